//! The speaker benchmark: `cargo bench --workspace --bench speakers` (needs the ONNX Runtime
//! library: tests/speakers/install.sh, or ORT_DYLIB_PATH).
//!
//! On every real call of `tests/fixtures/speakers/` at its reference turns: labelling accuracy
//! (turns right up to renaming, online and after the end-of-call pass), the speaker count,
//! DER-style speaker confusion (the share of reference speech given to the wrong speaker; no
//! missed or false speech, the turns being the reference's), the real-time factor of the
//! embeddings (one thread), the added latency per turn (the time to label a turn once its audio
//! is in), the end-of-call pass's time, the added latency with every speaker of every call kept
//! as a known voiceprint (matching known voices), and the peak resident memory. Prints one line
//! per call and a summary.

use stagewhisper_speakers::cluster::Config;
use stagewhisper_speakers::embed::Embedder;
use stagewhisper_speakers::{Diarizer, Known};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Instant;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/speakers")
}

fn runtime_dir() -> Option<PathBuf> {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.peers/onnxruntime/onnxruntime/capi");
    d.is_dir().then_some(d)
}

fn peak_rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// (turns right, speech right in ms) up to renaming.
fn score(got: &[usize], want: &[&str], ms: &[u64]) -> (usize, u64) {
    let mut pairs: HashMap<(usize, &str), (usize, u64)> = HashMap::new();
    for ((g, w), m) in got.iter().zip(want).zip(ms) {
        let e = pairs.entry((*g, w)).or_default();
        e.0 += 1;
        e.1 += m;
    }
    let mut pairs: Vec<_> = pairs.into_iter().collect();
    pairs.sort_by_key(|p| std::cmp::Reverse(p.1 .1));
    let (mut gl, mut wl, mut n, mut t) = (Vec::new(), Vec::new(), 0, 0);
    for ((g, w), (c, m)) in pairs {
        if !gl.contains(&g) && !wl.contains(&w) {
            gl.push(g);
            wl.push(w);
            n += c;
            t += m;
        }
    }
    (n, t)
}

fn main() {
    let rss0 = peak_rss_kib();
    let model = fixtures().join("campplus-fp16w.onnx");
    let t = Instant::now();
    let e = std::sync::Arc::new(
        Embedder::load(&model, runtime_dir().as_deref()).expect("model and runtime"),
    );
    println!("model load: {:.0} ms", t.elapsed().as_secs_f64() * 1000.0);
    let calls: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("calls.json")).unwrap())
            .unwrap();
    let (mut audio_s, mut embed_s) = (0f64, 0f64);
    let (mut turns, mut on, mut fin, mut speech, mut speech_right) = (0, 0, 0, 0u64, 0u64);
    let mut lat: Vec<f64> = Vec::new();
    let (mut pass_ms, mut known) = (0f64, Vec::new());
    for (name, call) in calls.as_object().unwrap() {
        let samples: Vec<i16> =
            hound::WavReader::open(fixtures().join(call["file"].as_str().unwrap()))
                .unwrap()
                .samples::<i16>()
                .map(|s| s.unwrap())
                .collect();
        let mut d = Diarizer::new(e.clone(), Config::default(), Vec::new());
        let (mut want, mut ms, mut online) = (Vec::new(), Vec::new(), Vec::new());
        for t in call["turns"].as_array().unwrap() {
            let (a, b) = (
                t["start_ms"].as_u64().unwrap() as usize * 16,
                t["end_ms"].as_u64().unwrap() as usize * 16,
            );
            let started = Instant::now();
            let label = d.turn(&samples[a..b]);
            let took = started.elapsed().as_secs_f64();
            lat.push(took * 1000.0);
            embed_s += took;
            audio_s += (b - a) as f64 / 16_000.0;
            online.push(label.speaker);
            want.push(t["speaker"].as_str().unwrap());
            ms.push(((b - a) / 16) as u64);
        }
        let started = Instant::now();
        d.finish();
        pass_ms = pass_ms.max(started.elapsed().as_secs_f64() * 1000.0);
        let final_: Vec<usize> = d.labeller().labels().iter().map(|x| x.speaker).collect();
        for s in 0..d.labeller().speakers() {
            if let Some(embedding) = d.labeller().voiceprint(s) {
                let (id, name) = (format!("{name}-{s}"), format!("{name} {s}"));
                known.push(Known {
                    id,
                    name,
                    embedding,
                });
            }
        }
        let (o, _) = score(&online, &want, &ms);
        let (f, fm) = score(&final_, &want, &ms);
        let total_ms: u64 = ms.iter().sum();
        println!(
            "{name}: {} speakers, {} found; turns right online {o}/{n}, after the pass {f}/{n}; speaker confusion {:.1} %",
            call["speakers"].as_array().unwrap().len(),
            final_.iter().max().map_or(0, |m| m + 1),
            100.0 * (total_ms - fm) as f64 / total_ms as f64,
            n = want.len()
        );
        turns += want.len();
        on += o;
        fin += f;
        speech += total_ms;
        speech_right += fm;
    }
    lat.sort_by(f64::total_cmp);
    println!(
        "all: {turns} turns; right online {:.1} %, after the pass {:.1} %; speaker confusion {:.1} %",
        100.0 * on as f64 / turns as f64,
        100.0 * fin as f64 / turns as f64,
        100.0 * (speech - speech_right) as f64 / speech as f64
    );
    println!(
        "RTF (one thread) {:.3}; added latency per turn: median {:.0} ms, 95th percentile {:.0} ms, max {:.0} ms",
        embed_s / audio_s,
        lat[lat.len() / 2],
        lat[lat.len() * 95 / 100],
        lat[lat.len() - 1]
    );
    println!("end-of-call pass: at most {pass_ms:.1} ms a call");
    let with_known = known_latency(&e, &calls, known);
    println!(
        "with every call's speakers known: median {:.0} ms a turn (without: {:.0} ms)",
        with_known,
        lat[lat.len() / 2]
    );
    println!(
        "peak RSS {} MiB (before the model: {} MiB)",
        peak_rss_kib() / 1024,
        rss0 / 1024
    );
}

/// The median time to label a turn of the next-call fixture with `known` voiceprints.
fn known_latency(
    e: &std::sync::Arc<Embedder>,
    calls: &serde_json::Value,
    known: Vec<Known>,
) -> f64 {
    let n = known.len();
    let call = &calls["librispeech-next-call"];
    let samples: Vec<i16> = hound::WavReader::open(fixtures().join(call["file"].as_str().unwrap()))
        .unwrap()
        .samples::<i16>()
        .map(|s| s.unwrap())
        .collect();
    let mut d = Diarizer::new(e.clone(), Config::default(), known);
    let mut lat: Vec<f64> = call["turns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let a = t["start_ms"].as_u64().unwrap() as usize * 16;
            let b = t["end_ms"].as_u64().unwrap() as usize * 16;
            let started = Instant::now();
            d.turn(&samples[a..b]);
            started.elapsed().as_secs_f64() * 1000.0
        })
        .collect();
    lat.sort_by(f64::total_cmp);
    println!("known voiceprints: {n}");
    lat[lat.len() / 2]
}
