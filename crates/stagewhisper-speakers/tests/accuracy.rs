//! The speaker model on real voices: features and embeddings against reference values computed
//! once in Python, and the labelling of the real multi-speaker calls of
//! `tests/fixtures/speakers/` (AMI meeting excerpts and LibriSpeech readers; see its README)
//! at the reference turn boundaries.
//!
//! Needs the ONNX Runtime library: `tests/speakers/install.sh` (or `ORT_DYLIB_PATH`). Without
//! it the tests that run the model are skipped, or FAIL under `SW_AUDIO_REQUIRE=1` (CI).

use serde_json::Value;
use stagewhisper_speakers::cluster::Config;
use stagewhisper_speakers::embed::{cosine, Embedder};
use stagewhisper_speakers::fbank::{Fbank, BINS};
use stagewhisper_speakers::{label_name, Diarizer, Known};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/speakers")
}

fn read_json(name: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(fixtures().join(name)).unwrap()).unwrap()
}

fn wav(name: &str) -> Vec<i16> {
    let mut r = hound::WavReader::open(fixtures().join(name)).unwrap();
    assert_eq!(r.spec().sample_rate, 16_000);
    assert_eq!(r.spec().channels, 1);
    r.samples::<i16>().map(|s| s.unwrap()).collect()
}

/// The runtime library: `ORT_DYLIB_PATH`, or what tests/speakers/install.sh installed.
pub fn runtime() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ORT_DYLIB_PATH").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let dir =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.peers/onnxruntime/onnxruntime/capi");
    std::fs::read_dir(dir)
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libonnxruntime.so.1"))
        })
}

fn embedder() -> Option<Arc<Embedder>> {
    static E: std::sync::OnceLock<Option<Arc<Embedder>>> = std::sync::OnceLock::new();
    E.get_or_init(|| {
        let Some(rt) = runtime() else {
            if std::env::var("SW_AUDIO_REQUIRE").is_ok_and(|v| v == "1") {
                panic!("SW_AUDIO_REQUIRE=1 and no ONNX Runtime (run tests/speakers/install.sh)");
            }
            eprintln!("SKIPPED: no ONNX Runtime (run tests/speakers/install.sh)");
            return None;
        };
        // The library's folder is one of the places the embedder looks.
        let model = fixtures().join("campplus-fp16w.onnx");
        Some(Arc::new(
            Embedder::load(&model, rt.parent()).expect("the committed model loads"),
        ))
    })
    .clone()
}

#[test]
fn fbank_matches_kaldi_native_fbank() {
    let r = read_json("reference.json");
    let f = &r["fbank"];
    let samples = wav(f["file"].as_str().unwrap());
    let (a, b) = (
        f["from_sample"].as_u64().unwrap() as usize,
        f["to_sample"].as_u64().unwrap() as usize,
    );
    let got = Fbank::new().compute(&samples[a..b]);
    let want: Vec<f32> = f["frames"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|row| {
            row.as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_f64().unwrap() as f32)
        })
        .collect();
    assert_eq!(got.len(), want.len());
    assert_eq!(got.len() % BINS, 0);
    let worst = got
        .iter()
        .zip(&want)
        .map(|(g, w)| (g - w).abs())
        .fold(0f32, f32::max);
    // Log energies of about 5–20; float32 FFTs differ in the last digits.
    assert!(worst < 2e-3, "largest difference {worst}");
}

#[test]
fn embedding_matches_onnxruntime_in_python() {
    let Some(e) = embedder() else { return };
    assert_eq!(e.dim(), 192);
    let r = read_json("reference.json");
    let m = &r["embedding"];
    let samples = wav(m["file"].as_str().unwrap());
    let (a, b) = (
        m["start_ms"].as_u64().unwrap() as usize * 16,
        m["end_ms"].as_u64().unwrap() as usize * 16,
    );
    let got = e.embed(&samples[a..b]).unwrap().unwrap();
    let want = stagewhisper_speakers::embed::normalise(
        m["values"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_f64().unwrap() as f32)
            .collect(),
    );
    let sim = cosine(&got, &want);
    assert!(sim > 0.9999, "cosine {sim}");
    // Too short for an embedding: none, not an error.
    assert_eq!(e.embed(&samples[a..a + 4000]).unwrap(), None);
}

/// Turns right (up to renaming: the best one-to-one mapping of labels to reference speakers).
pub fn turns_right(got: &[usize], want: &[&str]) -> usize {
    let mut pairs: HashMap<(usize, &str), usize> = HashMap::new();
    for (g, w) in got.iter().zip(want) {
        *pairs.entry((*g, w)).or_default() += 1;
    }
    let mut pairs: Vec<_> = pairs.into_iter().collect();
    pairs.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let (mut gl, mut wl) = (Vec::new(), Vec::new());
    let mut right = 0;
    for ((g, w), n) in pairs {
        if !gl.contains(&g) && !wl.contains(&w) {
            gl.push(g);
            wl.push(w);
            right += n;
        }
    }
    right
}

#[test]
fn real_calls_are_labelled_at_85_percent_or_better() {
    let Some(e) = embedder() else { return };
    let calls = read_json("calls.json");
    let (mut right_online, mut right_final, mut total) = (0, 0, 0);
    for (name, call) in calls.as_object().unwrap() {
        let samples = wav(call["file"].as_str().unwrap());
        let turns = call["turns"].as_array().unwrap();
        let want: Vec<&str> = turns
            .iter()
            .map(|t| t["speaker"].as_str().unwrap())
            .collect();
        // The product's path: the diarizer of a call, turn by turn, then its end pass.
        let mut d = Diarizer::new(e.clone(), Config::default(), Vec::new());
        let mut online = Vec::new();
        for t in turns {
            let (a, b) = (
                t["start_ms"].as_u64().unwrap() as usize * 16,
                t["end_ms"].as_u64().unwrap() as usize * 16,
            );
            online.push(d.turn(&samples[a..b]).speaker);
        }
        d.finish();
        let fin: Vec<usize> = d.labeller().labels().iter().map(|x| x.speaker).collect();
        let speakers = call["speakers"].as_array().unwrap().len();
        let found = fin.iter().max().unwrap() + 1;
        let (ro, rf) = (turns_right(&online, &want), turns_right(&fin, &want));
        eprintln!(
            "{name}: {speakers} speakers, {found} found; online {ro}/{n}, after the pass {rf}/{n}",
            n = want.len()
        );
        assert!(
            found.abs_diff(speakers) <= 1,
            "{name}: {found} speakers for {speakers}"
        );
        right_online += ro;
        right_final += rf;
        total += want.len();
    }
    let (po, pf) = (
        right_online as f64 / total as f64,
        right_final as f64 / total as f64,
    );
    eprintln!("all calls: online {po:.3}, after the pass {pf:.3} of {total} turns");
    assert!(po >= 0.85, "online: {po:.3}");
    assert!(pf >= 0.85, "after the pass: {pf:.3}");
}

/// One call labelled turn by turn at its reference boundaries with these known voices: the
/// diarizer, each reference turn's speaker (reader), and the names given as it went.
fn hear(e: &Arc<Embedder>, call: &str, known: Vec<Known>) -> (Diarizer, Vec<String>, Vec<String>) {
    let calls = read_json("calls.json");
    let call = &calls[call];
    let samples = wav(call["file"].as_str().unwrap());
    let mut d = Diarizer::new(e.clone(), Config::default(), known);
    let (mut who, mut live) = (Vec::new(), Vec::new());
    for t in call["turns"].as_array().unwrap() {
        let (a, b) = (
            t["start_ms"].as_u64().unwrap() as usize * 16,
            t["end_ms"].as_u64().unwrap() as usize * 16,
        );
        live.push(label_name(&d.turn(&samples[a..b])));
        who.push(t["speaker"].as_str().unwrap().to_string());
    }
    (d, who, live)
}

/// The voiceprint of `reader` as a call leaves it (the speaker most of their turns went to).
fn voiceprint_of(d: &Diarizer, who: &[String], reader: &str) -> Vec<f32> {
    let labels = d.labeller().labels();
    let mut count: HashMap<usize, usize> = HashMap::new();
    for (l, w) in labels.iter().zip(who) {
        if w == reader {
            *count.entry(l.speaker).or_default() += 1;
        }
    }
    let (s, _) = count.into_iter().max_by_key(|(_, n)| *n).unwrap();
    d.labeller().voiceprint(s).unwrap()
}

/// Named in one call, known in the next: readers 1998 (of the 2-speaker call) and 2033 (of the
/// 3-speaker call) are named; in the next call (1998 and 2033 again, other utterances, and a
/// new reader 533) their speakers take those names (confirmed by the end), the new reader none.
#[test]
fn a_named_voice_is_known_in_the_next_call() {
    let Some(e) = embedder() else { return };
    let mut d1 = hear(&e, "librispeech-2-speakers", Vec::new());
    d1.0.finish();
    let mut d2 = hear(&e, "librispeech-3-speakers", Vec::new());
    d2.0.finish();
    let known = vec![
        Known {
            id: "a".into(),
            name: "Dana".into(),
            embedding: voiceprint_of(&d1.0, &d1.1, "1998"),
        },
        Known {
            id: "b".into(),
            name: "Eve".into(),
            embedding: voiceprint_of(&d2.0, &d2.1, "2033"),
        },
    ];
    let (mut next, who, live) = hear(&e, "librispeech-next-call", known);
    // As heard: the first turn (1998's) is named at once, unconfirmed.
    assert_eq!(live[0], "Dana?", "{live:?}");
    next.finish();
    let names: Vec<String> = next.labeller().labels().iter().map(label_name).collect();
    let mut per_reader: HashMap<&str, HashMap<&str, usize>> = HashMap::new();
    for (n, w) in names.iter().zip(&who) {
        *per_reader.entry(w).or_default().entry(n).or_default() += 1;
    }
    eprintln!("next call: {per_reader:?}");
    let top = |r: &str| {
        let m = &per_reader[r];
        *m.iter().max_by_key(|(_, n)| **n).unwrap().0
    };
    assert_eq!(top("1998"), "Dana");
    assert_eq!(top("2033"), "Eve");
    assert!(!top("533").starts_with("Dana") && !top("533").starts_with("Eve"));
}
