//! Who said it, live and black-box: the headless binary hears calls through a private
//! PulseAudio (`sound`), recorded human voices (LibriSpeech readers from
//! `tests/fixtures/speakers/`) played on the call's sink; speaker separation on, the model and
//! the ONNX Runtime library in the data dir. Real PocketSphinx for the text.
//!
//! 1. Two readers on the call: the stored "Them" turns carry exactly `Speaker 1` and
//!    `Speaker 2`.
//! 2. `Speaker 2` (reader 1998) renamed "Dana" during the call: every turn of theirs follows,
//!    the voiceprint is kept (`GET /api/voiceprints`), never audio; the call ends (the
//!    end-of-call pass runs over its stored turns).
//! 3. The next call (reader 1998 again, other words, and a new reader): her turns are named
//!    "Dana?" / "Dana" at once.
//! 4. Forgetting the voiceprint removes it (the list and the data dir's file).
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
use std::path::{Path, PathBuf};
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

fn fixtures() -> PathBuf {
    engines::repo_root().join("tests/fixtures/speakers")
}

/// The first `turns` turns of a fixture call (and a second of silence), as a WAV to play.
fn clip(pulse: &Pulse, call: &str, turns: usize) -> PathBuf {
    let calls: Value =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("calls.json")).unwrap())
            .unwrap();
    let t = calls[call]["turns"].as_array().unwrap();
    let end = t[turns - 1]["end_ms"].as_u64().unwrap() as usize * 16 + 16_000;
    let file = calls[call]["file"].as_str().unwrap();
    let samples: Vec<i16> = hound::WavReader::open(fixtures().join(file))
        .unwrap()
        .samples::<i16>()
        .map(|s| s.unwrap())
        .take(end)
        .collect();
    let path = pulse.dir().join(format!("{call}.wav"));
    let spec = hound::WavSpec {
        channels: 1,
        sample_rate: 16_000,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    };
    let mut w = hound::WavWriter::create(&path, spec).unwrap();
    for s in samples {
        w.write_sample(s).unwrap();
    }
    w.finalize().unwrap();
    path
}

/// The data dir with the speaker model and the runtime library in `models/speakers/`.
fn data_dir(root: &Path, ort: &Path) -> PathBuf {
    let data = root.join("data");
    let models = data.join("models/speakers");
    std::fs::create_dir_all(&models).unwrap();
    std::fs::copy(
        fixtures().join("campplus-fp16w.onnx"),
        models.join("campplus.onnx"),
    )
    .unwrap();
    std::os::unix::fs::symlink(ort, models.join("libonnxruntime.so")).unwrap();
    data
}

/// A new call, listened to (both channels up): its id.
async fn listened_call(ui: &UiClient, title: &str) -> String {
    let r = ui
        .post("/api/calls", &json!({"title": title, "listen": true}))
        .await;
    assert_eq!(r.status, 201, "{r}");
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
    r.json["session_id"].as_str().unwrap().to_string()
}

/// The call's turns once `done` says they are all there (within 90 s).
async fn turns_when(app: &App, call: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let ui = app.ui();
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    loop {
        let r = ui.get(&format!("/api/calls/{call}/transcript")).await;
        let t = r.json.as_array().cloned().unwrap_or_default();
        if done(&t) {
            return t;
        }
        if std::time::Instant::now() > deadline {
            let log = app.proc.as_ref().map(|p| p.stderr_tail());
            panic!(
                "turns not there: {t:?}\napp log: {}",
                log.unwrap_or_default()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

fn speakers(turns: &[Value]) -> BTreeSet<String> {
    turns
        .iter()
        .filter_map(|x| x["speaker"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hearing_speakers_two_voices_named_known_in_the_next_call_and_forgotten() {
    if !sound::tools("hearing: speakers") {
        return;
    }
    let Some(ort) = runtime() else {
        return engines::missing(
            "the ONNX Runtime library is not installed (tests/speakers/install.sh)",
        )
        .unwrap_or(());
    };
    let pulse = Pulse::start();
    let root = tempfile::tempdir().unwrap();
    let data = data_dir(root.path(), &ort);
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

    // 1. The first four turns (two readers in turn) of a real call: about 20 s.
    let call = listened_call(&ui, "two voices").await;
    pulse.play("call", &clip(&pulse, "librispeech-2-speakers", 4));
    // Every turn stored (the clip has four; PocketSphinx may split or drop one), then who.
    let turns = turns_when(&app, &call, |t| t.len() >= 3 && speakers(t).len() >= 2).await;
    let expected: BTreeSet<String> = ["Speaker 1", "Speaker 2"].map(String::from).into();
    assert_eq!(speakers(&turns), expected, "{turns:?}");

    name_and_end(&app, &call, &data).await;
    known_next_and_forgotten(&app, &pulse, &data).await;
}

/// 2. "Speaker 2" is Dana: every turn of theirs follows; the voiceprint is kept; the call ends.
async fn name_and_end(app: &App, call: &str, data: &Path) {
    let ui = app.ui();
    let before = ui.get(&format!("/api/calls/{call}/transcript")).await.json;
    let theirs = before
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["speaker"] == "Speaker 2")
        .count();
    let path = format!("/api/calls/{call}/speakers/Speaker%202");
    let r = ui
        .request(
            "PUT",
            &path,
            Some(&ui.token),
            Some(&json!({"name": "Dana"})),
        )
        .await;
    assert_eq!(r.status, 200, "{r}");
    // (A turn still on its way may be stored in between: it is renamed too.)
    assert!(r.json["turns"].as_u64().unwrap() as usize >= theirs, "{r}");
    assert_eq!(r.json["voiceprint"]["name"], "Dana", "{r}");
    let after = ui.get(&format!("/api/calls/{call}/transcript")).await.json;
    let who = speakers(after.as_array().unwrap());
    assert!(
        who.contains("Dana") && !who.contains("Speaker 2"),
        "{who:?}"
    );
    // The same label again: nobody is called that any more.
    let r = ui
        .request("PUT", &path, Some(&ui.token), Some(&json!({"name": "Zed"})))
        .await;
    assert_eq!(
        (r.status, r.json["error"].as_str()),
        (404, Some("speaker_not_found"))
    );
    let r = ui.get("/api/voiceprints").await;
    assert_eq!(r.status, 200, "{r}");
    let list = r.json.as_array().unwrap();
    assert_eq!(list.len(), 1, "{r}");
    assert_eq!(list[0]["name"], "Dana");
    assert!(
        list[0].get("embedding").is_none(),
        "the numbers stay on disk"
    );
    let file = std::fs::read_to_string(data.join("voiceprints.json")).unwrap();
    assert!(file.contains("Dana") && file.contains("embedding"));
    let r = ui.post(&format!("/api/calls/{call}/end"), &json!({})).await;
    assert_eq!(r.status, 200, "{r}");
}

/// 3. The next call names her at once; 4. forgetting removes the voiceprint.
async fn known_next_and_forgotten(app: &App, pulse: &Pulse, data: &Path) {
    let ui = app.ui();
    let call = listened_call(&ui, "the next call").await;
    // Readers 1998 (Dana), 533 (new), 1998, 533: about 20 s.
    pulse.play("call", &clip(pulse, "librispeech-next-call", 4));
    let turns = turns_when(app, &call, |t| {
        t.len() >= 3 && speakers(t).iter().any(|s| s.starts_with("Dana"))
    })
    .await;
    let who = speakers(&turns);
    assert!(
        who.iter().any(|s| !s.starts_with("Dana")),
        "the new reader is not Dana: {turns:?}"
    );
    let id = ui.get("/api/voiceprints").await.json[0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let r = ui.delete(&format!("/api/voiceprints/{id}")).await;
    assert_eq!(r.status, 200, "{r}");
    let r = ui.get("/api/voiceprints").await;
    assert_eq!(r.json, json!([]), "{r}");
    let file = std::fs::read_to_string(data.join("voiceprints.json")).unwrap();
    assert!(!file.contains("Dana"), "{file}");
    let r = ui.delete(&format!("/api/voiceprints/{id}")).await;
    assert_eq!(
        (r.status, r.json["error"].as_str()),
        (404, Some("voiceprint_not_found"))
    );
    let r = ui.post(&format!("/api/calls/{call}/end"), &json!({})).await;
    assert_eq!(r.status, 200, "{r}");
}
