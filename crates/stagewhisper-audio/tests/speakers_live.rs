//! The live labeller of the "Them" channel (`stagewhisper_audio::speakers::LiveSpeakers`) on
//! a real call (LibriSpeech readers, `tests/fixtures/speakers/`), with the model and the ONNX
//! Runtime library laid out in a data dir as a user's install has them
//! (`<data dir>/models/speakers/campplus.onnx` and `libonnxruntime.so` beside it).
//!
//! Needs the library (`tests/speakers/install.sh`): skipped without it, or FAILS under
//! `SW_AUDIO_REQUIRE=1` (CI).

mod common;

use common::*;
use serde_json::Value;
use stagewhisper_audio::speakers::LiveSpeakers;
use std::path::PathBuf;

fn runtime() -> Option<PathBuf> {
    std::fs::read_dir(repo_root().join(".peers/onnxruntime/onnxruntime/capi"))
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libonnxruntime.so.1"))
        })
}

#[test]
fn live_them_turns_get_speakers_by_voice() {
    let Some(rt) = runtime() else {
        return missing("the ONNX Runtime library is not installed (tests/speakers/install.sh)")
            .unwrap_or(());
    };
    let fixtures = repo_root().join("tests/fixtures/speakers");
    let data = tempfile::tempdir().unwrap();
    let live = LiveSpeakers::new(data.path());
    // No model yet: not available, and turns keep their label.
    let (available, detail) = live.availability();
    assert!(!available);
    assert!(detail.contains("no speaker model"), "{detail}");
    assert_eq!(live.label("call-1", 1, &[0i16; 32_000]), None);
    // The model and the library put in the data dir's models folder.
    let models = data.path().join("models/speakers");
    std::fs::create_dir_all(&models).unwrap();
    std::fs::copy(
        fixtures.join("campplus-fp16w.onnx"),
        models.join("campplus.onnx"),
    )
    .unwrap();
    std::os::unix::fs::symlink(&rt, models.join("libonnxruntime.so")).unwrap();
    let (available, detail) = live.availability();
    assert!(available, "{detail}");

    let calls: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures.join("calls.json")).unwrap())
            .unwrap();
    let call = &calls["librispeech-3-speakers"];
    let samples: Vec<i16> = hound::WavReader::open(fixtures.join(call["file"].as_str().unwrap()))
        .unwrap()
        .samples::<i16>()
        .map(|s| s.unwrap())
        .collect();
    let mut pairs = std::collections::HashMap::<(String, String), usize>::new();
    let turns = call["turns"].as_array().unwrap();
    let mut first = None;
    for (seq, t) in turns.iter().enumerate() {
        let (a, b) = (
            t["start_ms"].as_u64().unwrap() as usize * 16,
            t["end_ms"].as_u64().unwrap() as usize * 16,
        );
        let name = live
            .label("call-1", seq as u64, &samples[a..b])
            .expect("a label");
        live.stored("call-1", seq as u64, 100 + seq as i64);
        first.get_or_insert(name.clone());
        *pairs
            .entry((name, t["speaker"].as_str().unwrap().to_string()))
            .or_default() += 1;
    }
    assert_eq!(first.as_deref(), Some("Speaker 1"));
    let names: std::collections::BTreeSet<&str> = pairs.keys().map(|(n, _)| n.as_str()).collect();
    assert!(names.len().abs_diff(3) <= 1, "{pairs:?}");
    // Each reader mostly under one name (up to renaming). Online labels only (the accuracy of
    // the labelling itself is measured on every call by the speakers crate's test and bench).
    let mut by: Vec<_> = pairs.iter().collect();
    by.sort_by(|a, b| b.1.cmp(a.1));
    let (mut used_n, mut used_r, mut right) = (Vec::new(), Vec::new(), 0);
    for ((n, r), c) in by {
        if !used_n.contains(n) && !used_r.contains(r) {
            used_n.push(n.clone());
            used_r.push(r.clone());
            right += c;
        }
    }
    assert!(
        right * 100 >= turns.len() * 60,
        "{right}/{}: {pairs:?}",
        turns.len()
    );
    // "Speaker 1" renamed: their voiceprint comes back, their next turn carries the name.
    let t = &turns[3];
    let (a, b) = (
        t["start_ms"].as_u64().unwrap() as usize * 16,
        t["end_ms"].as_u64().unwrap() as usize * 16,
    );
    let print = live
        .rename("call-1", "Speaker 1", "Ann")
        .expect("a voiceprint");
    assert_eq!(print.embedding.len(), 192);
    assert!(print.speech_ms >= 1_500, "{print:?}");
    assert!(live.rename("call-1", "Speaker 9", "Bob").is_none());
    assert!(live.rename("call-0", "Speaker 2", "Bob").is_none());
    // The end-of-call pass: every stored turn with its speaker's name ("Ann" kept).
    let pass = live.finish("call-1");
    assert_eq!(pass.len(), turns.len(), "{pass:?}");
    assert!(pass
        .iter()
        .all(|(row, _)| (100..100 + turns.len() as i64).contains(row)));
    assert!(pass.iter().any(|(_, n)| n == "Ann"), "{pass:?}");
    assert!(!pass.iter().any(|(_, n)| n == "Speaker 1"), "{pass:?}");
    // The next call starts again from Speaker 1.
    assert_eq!(
        live.label("call-2", 1, &samples[a..b]).as_deref(),
        Some("Speaker 1")
    );
}
