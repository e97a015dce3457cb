//! Who said it, live and black-box: the headless binary hears a call through a private
//! PulseAudio (`sound`), two recorded human voices (LibriSpeech readers from
//! `tests/fixtures/speakers/`) played on the call's sink; with speaker separation on and the
//! model and ONNX Runtime library in the data dir, the stored "Them" turns carry two speakers,
//! `Speaker 1` and `Speaker 2`. Real PocketSphinx for the text.
//!
//! Needs PulseAudio, espeak-ng (the harness checks its tools) and the ONNX Runtime library
//! (`tests/speakers/install.sh`): skipped without them, or FAILS under `SW_AUDIO_REQUIRE=1`.

#[path = "../../../tests/common/mod.rs"]
mod common;
#[path = "../../stagewhisper-audio/tests/common/mod.rs"]
mod engines;
mod sound;

use common::*;
use serde_json::{json, Value};
use sound::Pulse;
use std::collections::BTreeSet;
use std::path::PathBuf;
use std::time::Duration;

fn runtime() -> Option<PathBuf> {
    std::fs::read_dir(engines::repo_root().join(".peers/onnxruntime/onnxruntime/capi"))
        .ok()?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libonnxruntime.so.1"))
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hearing_speakers_two_recorded_voices_on_the_call_are_two_speakers() {
    if !sound::tools("hearing: speakers") {
        return;
    }
    let Some(ort) = runtime() else {
        return engines::missing(
            "the ONNX Runtime library is not installed (tests/speakers/install.sh)",
        )
        .unwrap_or(());
    };
    let fixtures = engines::repo_root().join("tests/fixtures/speakers");
    let pulse = Pulse::start();
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let models = data.join("models/speakers");
    std::fs::create_dir_all(&models).unwrap();
    std::fs::copy(
        fixtures.join("campplus-fp16w.onnx"),
        models.join("campplus.onnx"),
    )
    .unwrap();
    std::os::unix::fs::symlink(&ort, models.join("libonnxruntime.so")).unwrap();
    // The first six turns (two readers in turn) of a real call: about 30 s.
    let calls: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures.join("calls.json")).unwrap())
            .unwrap();
    let turns = calls["librispeech-2-speakers"]["turns"].as_array().unwrap();
    let end = turns[5]["end_ms"].as_u64().unwrap() as usize * 16 + 16_000;
    let samples: Vec<i16> = hound::WavReader::open(fixtures.join("librispeech-2-speakers.wav"))
        .unwrap()
        .samples::<i16>()
        .map(|s| s.unwrap())
        .take(end)
        .collect();
    let clip = pulse.dir().join("two-voices.wav");
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 16_000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(&clip, spec).unwrap();
    for s in samples {
        w.write_sample(s).unwrap();
    }
    w.finalize().unwrap();

    let mut env = pulse.env();
    env.push((
        "RUST_LOG".into(),
        "stagewhisper_speakers=debug,stagewhisper_audio=debug".into(),
    ));
    let app = App::launch(data.clone(), vec![], &env).await;
    let ui = app.ui();
    let body = json!({"speakers": {"enabled": true}, "mic": null});
    let r = ui
        .request("PUT", "/api/audio", Some(&ui.token), Some(&body))
        .await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.json["speakers"]["available"], true, "{r}");
    let r = ui
        .post(
            "/api/calls",
            &json!({"title": "two voices", "listen": true}),
        )
        .await;
    assert_eq!(r.status, 201, "{r}");
    let call = r.json["session_id"].as_str().unwrap().to_string();
    wait_for("listening to the call", Duration::from_secs(30), || async {
        let s = ui.get("/api/audio").await.json["status"].clone();
        let sys = s["channels"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["channel"] == "system").cloned())
            .unwrap_or(Value::Null);
        if sys["state"] == "listening" && !sys["source"].is_null() {
            Ok(())
        } else {
            Err(s.to_string())
        }
    })
    .await;
    pulse.play("call", &clip);
    // Every turn stored (the clip has six; PocketSphinx may split or drop one), then who.
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let speakers = loop {
        let r = ui.get(&format!("/api/calls/{call}/transcript")).await;
        let t = r.json.as_array().cloned().unwrap_or_default();
        let who: BTreeSet<String> = t
            .iter()
            .filter_map(|x| x["speaker"].as_str().map(str::to_string))
            .collect();
        if t.len() >= 5 && who.len() >= 2 {
            break who;
        }
        if std::time::Instant::now() > deadline {
            panic!(
                "no two speakers: {t:?}\napp log: {}",
                app.proc
                    .as_ref()
                    .map(|p| p.stderr_tail())
                    .unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    assert!(!speakers.contains("Them"), "{speakers:?}");
    let expected: BTreeSet<String> = ["Speaker 1", "Speaker 2"].map(String::from).into();
    assert_eq!(speakers, expected);
}
