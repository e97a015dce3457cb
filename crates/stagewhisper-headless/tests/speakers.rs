//! `stagewhisper-headless transcribe FILE --speakers`, black-box, on the real multi-speaker
//! calls of `tests/fixtures/speakers/` (AMI meeting excerpts and LibriSpeech readers, with their
//! reference turns): the real binary, the committed CAM++ model, the real ONNX Runtime library
//! and the real PocketSphinx for the text.
//!
//! And the setting through the real control API (`PUT /api/audio {"speakers"}`, the
//! availability in `GET /api/audio`) with the model laid out in the data dir.
//!
//! They need the ONNX Runtime library
//! (`tests/speakers/install.sh`, or `ORT_DYLIB_PATH`) and PocketSphinx: without them they are
//! skipped, or FAIL under `SW_AUDIO_REQUIRE=1` (CI).

#[path = "../../stagewhisper-audio/tests/common/mod.rs"]
mod audio;
#[path = "../../../tests/common/mod.rs"]
mod common;

use audio::*;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn bin() -> PathBuf {
    std::env::var_os("STAGEWHISPER_TEST_BIN")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_stagewhisper-headless")))
}

fn fixtures() -> PathBuf {
    repo_root().join("tests/fixtures/speakers")
}

/// The ONNX Runtime library: `ORT_DYLIB_PATH`, or what tests/speakers/install.sh installed.
fn runtime() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("ORT_DYLIB_PATH").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    std::fs::read_dir(repo_root().join(".peers/onnxruntime/onnxruntime/capi"))
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libonnxruntime.so.1"))
        })
}

/// The runtime and PocketSphinx, or the skip/fail of `missing`.
fn tools() -> Option<PathBuf> {
    if !Path::new("/usr/share/pocketsphinx/model/en-us/en-us.lm.bin").is_file() {
        return missing("PocketSphinx's model is not installed (apt-get install libpocketsphinx3 pocketsphinx-en-us)");
    }
    match runtime() {
        Some(r) => Some(r),
        None => missing("the ONNX Runtime library is not installed (tests/speakers/install.sh)"),
    }
}

fn transcribe(args: &[&str], ort: Option<&Path>, data_dir: &Path) -> Output {
    let mut c = Command::new(bin());
    c.arg("--data-dir")
        .arg(data_dir)
        .arg("transcribe")
        .args(args)
        .stdin(Stdio::null())
        .env_remove("ORT_DYLIB_PATH");
    if let Some(o) = ort {
        c.env("ORT_DYLIB_PATH", o);
    }
    c.output().expect("the binary runs")
}

/// A segment: (start_ms, end_ms, speaker).
type Seg = (u64, u64, String);

/// The segments of the JSONL output.
fn segments(o: &Output) -> Vec<Seg> {
    assert!(
        o.status.success(),
        "{:?}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            (
                v["start_ms"].as_u64().unwrap(),
                v["end_ms"].as_u64().unwrap(),
                v["speaker"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Segments right up to renaming: each segment's reference speaker is the reference turn it
/// overlaps most; the best one-to-one mapping of labels to reference speakers counts.
fn right(segs: &[Seg], turns: &[Value]) -> (usize, usize) {
    let mut pairs: HashMap<(String, String), usize> = HashMap::new();
    let mut n = 0;
    for (s, e, who) in segs {
        let best = turns
            .iter()
            .map(|t| {
                let (a, b) = (
                    t["start_ms"].as_u64().unwrap(),
                    t["end_ms"].as_u64().unwrap(),
                );
                (s.max(&a).to_owned() as i64 - (*e).min(b) as i64, t)
            })
            .min_by_key(|(neg_overlap, _)| *neg_overlap);
        let Some((neg, t)) = best else { continue };
        if neg >= 0 {
            continue; // overlaps no reference turn (noise heard as speech)
        }
        n += 1;
        let want = t["speaker"].as_str().unwrap().to_string();
        *pairs.entry((who.clone(), want)).or_default() += 1;
    }
    let mut pairs: Vec<_> = pairs.into_iter().collect();
    pairs.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let (mut gl, mut wl, mut ok) = (Vec::new(), Vec::new(), 0);
    for ((g, w), c) in pairs {
        if !gl.contains(&g) && !wl.contains(&w) {
            gl.push(g);
            wl.push(w);
            ok += c;
        }
    }
    (ok, n)
}

#[test]
fn transcribe_cli_speakers_real_calls() {
    let Some(ort) = tools() else { return };
    let calls: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("calls.json")).unwrap())
            .unwrap();
    let model = fixtures().join("campplus-fp16w.onnx");
    let data = tempfile::tempdir().unwrap();
    // 2, 3 and 4 speakers, meeting and read speech (the library's test covers every call).
    let names = [
        "ami-2-speakers",
        "ami-3-speakers-c",
        "librispeech-3-speakers",
        "librispeech-4-speakers",
    ];
    let results: Vec<(String, Vec<Seg>)> = std::thread::scope(|s| {
        let handles: Vec<_> = names
            .iter()
            .map(|name| {
                let (model, ort, data) = (&model, &ort, data.path());
                s.spawn(move || {
                    let file = fixtures().join(format!("{name}.wav"));
                    let o = transcribe(
                        &[
                            file.to_str().unwrap(),
                            "--speakers",
                            "--speaker-model",
                            model.to_str().unwrap(),
                        ],
                        Some(ort),
                        data,
                    );
                    (name.to_string(), segments(&o))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let (mut ok, mut n) = (0, 0);
    for (name, segs) in results {
        let call = &calls[&name];
        let turns = call["turns"].as_array().unwrap();
        let want = call["speakers"].as_array().unwrap().len();
        let labels: std::collections::BTreeSet<&str> = segs.iter().map(|s| s.2.as_str()).collect();
        assert!(
            labels.iter().all(|l| l.starts_with("Speaker ")),
            "{name}: {labels:?}"
        );
        // In order of first appearance.
        let mut seen = Vec::new();
        for s in &segs {
            if !seen.contains(&s.2) {
                seen.push(s.2.clone());
            }
        }
        let expected: Vec<String> = (1..=seen.len()).map(|i| format!("Speaker {i}")).collect();
        assert_eq!(seen, expected, "{name}");
        let (r, c) = right(&segs, turns);
        eprintln!(
            "{name}: {want} speakers, {} found; {r}/{c} segments right",
            labels.len()
        );
        assert!(
            labels.len().abs_diff(want) <= 1,
            "{name}: {labels:?} for {want}"
        );
        ok += r;
        n += c;
    }
    let share = ok as f64 / n as f64;
    eprintln!("all: {ok}/{n} = {share:.3}");
    assert!(n >= 30, "too few segments recognised: {n}");
    assert!(share >= 0.85, "{share:.3}");
}

#[test]
fn transcribe_cli_speakers_stereo_keeps_you_on_the_left() {
    let Some(ort) = tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let read = |name: &str| -> Vec<i16> {
        hound::WavReader::open(fixtures().join(name))
            .unwrap()
            .samples::<i16>()
            .map(|s| s.unwrap())
            .collect()
    };
    // Left: one reader (the microphone); right: two others (the call), 30 s of each.
    let left = read("librispeech-next-call.wav");
    let right_ch = read("librispeech-2-speakers.wav");
    let n = 30 * 16_000;
    let path = dir.path().join("stereo.wav");
    let spec = hound::WavSpec {
        channels: 2,
        sample_rate: 16_000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(&path, spec).unwrap();
    for i in 0..n {
        w.write_sample(left[i] / 4).unwrap();
        w.write_sample(right_ch[i]).unwrap();
    }
    w.finalize().unwrap();
    let model = fixtures().join("campplus-fp16w.onnx");
    let o = transcribe(
        &[
            path.to_str().unwrap(),
            "--speakers",
            "--speaker-model",
            model.to_str().unwrap(),
        ],
        Some(&ort),
        dir.path(),
    );
    let segs = segments(&o);
    let labels: std::collections::BTreeSet<&str> = segs.iter().map(|s| s.2.as_str()).collect();
    assert!(labels.contains("You"), "{labels:?}");
    assert!(
        labels.contains("Speaker 1") && labels.contains("Speaker 2"),
        "{labels:?}"
    );
    assert!(!labels.contains("Them"), "{labels:?}");
}

#[test]
fn transcribe_cli_speakers_without_a_model_or_runtime_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = fixtures().join("ami-3-speakers-b.wav");
    let file = file.to_str().unwrap();
    // No model in the data dir and none given.
    let o = transcribe(&[file, "--speakers"], None, dir.path());
    assert_eq!(o.status.code(), Some(4));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.starts_with("stagewhisper transcribe: no_speaker_model: "),
        "{err}"
    );
    assert!(err.contains("--speaker-model"), "{err}");
    assert!(o.stdout.is_empty());
    // A model, but no runtime where it is looked for.
    let model = fixtures().join("campplus-fp16w.onnx");
    let o = transcribe(
        &[
            file,
            "--speakers",
            "--speaker-model",
            model.to_str().unwrap(),
        ],
        Some(Path::new("/nonexistent/libonnxruntime.so")),
        dir.path(),
    );
    let err = String::from_utf8_lossy(&o.stderr);
    // The system may have the library under its plain name; where it does not, a clear error.
    if o.status.code() != Some(0) {
        assert_eq!(o.status.code(), Some(4), "{err}");
        assert!(
            err.starts_with("stagewhisper transcribe: no_onnx_runtime: "),
            "{err}"
        );
    }
    // --speaker-model alone is a usage error.
    let o = transcribe(&[file, "--speaker-model", "x.onnx"], None, dir.path());
    assert_eq!(o.status.code(), Some(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speakers_api_setting_and_availability() {
    let Some(ort) = runtime() else {
        return missing("the ONNX Runtime library is not installed (tests/speakers/install.sh)")
            .unwrap_or(());
    };
    let dir = tempfile::tempdir().unwrap();
    let app = common::App::launch(dir.path().to_path_buf(), vec![], &[]).await;
    let ui = app.ui();
    let r = ui.get("/api/audio").await;
    assert_eq!(r.status, 200, "{r}");
    let s = &r.json["speakers"];
    assert_eq!(s["enabled"], false, "{r}");
    assert_eq!(s["available"], false, "{r}");
    assert!(
        s["detail"].as_str().unwrap().contains("no speaker model"),
        "{r}"
    );
    // Described in the OpenAPI document (what schemathesis and clients read).
    let doc = ui.get("/api/openapi.json").await;
    let schemas = &doc.json["components"]["schemas"];
    assert!(
        schemas["SpeakersView"]["properties"]["available"].is_object(),
        "{doc}"
    );
    assert!(
        schemas["SpeakerSettings"]["properties"]["enabled"].is_object(),
        "{doc}"
    );
    // Turned on: saved, and answered.
    let body = serde_json::json!({"speakers": {"enabled": true}});
    let r = ui
        .request("PUT", "/api/audio", Some(&ui.token), Some(&body))
        .await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.json["speakers"]["enabled"], true, "{r}");
    // A malformed setting: refused, nothing changed.
    let bad = serde_json::json!({"speakers": {"enabled": "yes"}});
    let r = ui
        .request("PUT", "/api/audio", Some(&ui.token), Some(&bad))
        .await;
    assert_eq!(r.status, 400, "{r}");
    // The model and the library in the data dir's models folder: available.
    let models = dir.path().join("models/speakers");
    std::fs::create_dir_all(&models).unwrap();
    std::fs::copy(
        fixtures().join("campplus-fp16w.onnx"),
        models.join("campplus.onnx"),
    )
    .unwrap();
    std::os::unix::fs::symlink(&ort, models.join("libonnxruntime.so")).unwrap();
    let r = ui.get("/api/audio").await;
    assert_eq!(r.json["speakers"]["available"], true, "{r}");
    assert_eq!(r.json["speakers"]["enabled"], true, "{r}");
    // Saved across a restart.
    drop(app);
    let app = common::App::launch(dir.path().to_path_buf(), vec![], &[]).await;
    let r = app.ui().get("/api/audio").await;
    assert_eq!(r.json["speakers"]["enabled"], true, "{r}");
}
