//! "Keep the call's audio" and "Transcribe again", end to end: the real headless binary hears a
//! private PulseAudio (`sound::Pulse`) with the built-in engine (PocketSphinx), keeps the
//! call's audio as FLAC in the data dir, and a past call is transcribed again with a real
//! Whisper model (tiny.en q8_0 from `tests/whisper/install.sh`, `SW_WHISPER_MODELS`).
//!
//! - off: a call whose keeping is turned off keeps no file, and cannot be transcribed again;
//! - on (the default set in `PUT /api/audio`): a FLAC file per turn heard, their size in
//!   `GET /api/calls/{id}/recording`;
//! - a model that cannot load fails the run and leaves every turn as it was;
//! - Whisper replaces the turns' text in place (same ids, speakers, times, delivery: the
//!   assistant receives nothing new), within the WER bound, each turn with its `language`,
//!   also in the export; progress comes as `transcribe_progress` events;
//! - deleting the call deletes its audio.
//!
//! Needs PulseAudio, PocketSphinx and the Whisper test models: FAILS without them when
//! `SW_AUDIO_REQUIRE=1` / `SW_WHISPER_REQUIRE=1`, skipped with the reason otherwise.

#[path = "../../../tests/common/mod.rs"]
mod common;
#[path = "../../stagewhisper-audio/tests/common/mod.rs"]
mod engines;
mod hardening;
mod sound;

use common::*;
use serde_json::{json, Value};
use sound::Pulse;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Bound of a wait for something the engine must hear (recognition on two busy cores: with
/// eight builds beside it, PocketSphinx took minutes for JFK's 11 s).
const HEAR: Duration = Duration::from_secs(300);

async fn transcript(app: &App, call: &str) -> Vec<Value> {
    let r = app.ui().get(&format!("/api/calls/{call}/transcript")).await;
    assert_eq!(r.status, 200, "transcript: {r}");
    r.json.as_array().cloned().unwrap_or_default()
}

/// Waits until every turn heard in `call` has had its final event (stored, empty, echo…), a
/// turn of `speaker` (any: `None`) is in the transcript, and nothing new came for 3 s.
async fn settled(app: &App, seen: &Seen, call: &str, speaker: Option<&str>) -> Vec<Value> {
    let quiet = || {
        let partials: Vec<Value> = of_type(seen, "transcript_partial")
            .into_iter()
            .filter(|v| v["session_id"] == call)
            .collect();
        let ids: HashSet<String> = partials.iter().map(|v| v["turn_id"].to_string()).collect();
        let finals: HashSet<String> = partials
            .iter()
            .filter(|v| v["final"] == true)
            .map(|v| v["turn_id"].to_string())
            .collect();
        (!ids.is_empty() && ids == finals).then_some(partials.len())
    };
    loop {
        let n = wait_for("every turn heard to its final", HEAR, || async {
            let t = transcript(app, call).await;
            match quiet() {
                Some(n) if t.iter().any(|x| speaker.is_none_or(|s| x["speaker"] == s)) => Ok(n),
                _ => Err(format!(
                    "{}\nthe call's turns heard (partials and finals): {:?}",
                    serde_json::to_string_pretty(&t).unwrap(),
                    of_type(seen, "transcript_partial")
                        .iter()
                        .filter(|v| v["session_id"] == call)
                        .map(|v| format!("{} {} {}", v["turn_id"], v["final"], v["outcome"]))
                        .collect::<Vec<_>>()
                )),
            }
        })
        .await;
        tokio::time::sleep(Duration::from_secs(3)).await;
        if quiet() == Some(n) {
            return transcript(app, call).await;
        }
    }
}

async fn new_call(app: &App) -> String {
    let r = app
        .ui()
        .post("/api/calls", &json!({"title": "kept call", "listen": true}))
        .await;
    assert_eq!(r.status, 201, "POST /api/calls: {r}");
    r.json["session_id"].as_str().unwrap().to_string()
}

async fn end_call(app: &App, call: &str) {
    let r = app
        .ui()
        .post(&format!("/api/calls/{call}/end"), &json!({}))
        .await;
    assert_eq!(r.status, 200, "end the call: {r}");
}

async fn recording(app: &App, call: &str) -> Value {
    let r = app.ui().get(&format!("/api/calls/{call}/recording")).await;
    assert_eq!(r.status, 200, "GET recording: {r}");
    r.json
}

async fn transcribe(app: &App, call: &str, body: Value) -> Resp {
    app.ui()
        .post(&format!("/api/calls/{call}/transcribe"), &body)
        .await
}

fn flac_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|x| x == "flac"))
                .collect()
        })
        .unwrap_or_default()
}

/// Every event of the stream.
type Seen = Arc<Mutex<Vec<Value>>>;

fn follow(mut stream: EventStream) -> Seen {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    tokio::spawn(async move {
        while let Some(e) = stream.next(Duration::from_secs(3600)).await {
            if let Ok(v) = serde_json::from_str::<Value>(&e.data) {
                s.lock().unwrap().push(v);
            }
        }
    });
    seen
}

fn of_type(seen: &Seen, kind: &str) -> Vec<Value> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|v| v["type"] == kind)
        .cloned()
        .collect()
}

/// Waits for the run's last event (`done` or `failed`) after the first `after` events.
async fn run_end(seen: &Seen, after: usize) -> Value {
    wait_for("the end of transcribing again", HEAR, || async {
        let p = of_type(seen, "transcribe_progress");
        p.iter()
            .skip(after)
            .find(|v| v["progress"]["state"] != "running")
            .cloned()
            .ok_or_else(|| format!("{p:?}"))
    })
    .await
}

/// What must not change when a call is transcribed again.
fn kept_fields(turns: &[Value]) -> Vec<Value> {
    turns
        .iter()
        .map(|t| {
            json!([
                t["id"],
                t["speaker"],
                t["offset_ms"],
                t["task_id"],
                t["delivery"]
            ])
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transcribe_again_replaces_a_past_calls_turns_from_its_kept_audio_and_keeping_is_opt_in() {
    if !sound::tools("transcribe again: a call heard live") {
        return;
    }
    let Some(models) = engines::whisper_models() else {
        return;
    };
    let pulse = Pulse::start();
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let app = App::launch(data.clone(), vec![], &pulse.env()).await;
    let ui = app.ui();
    let seen = follow(app.events(SseOpts::live()).await);
    let (base, received) = hardening::fake_assistant().await;
    let r = ui
        .request(
            "PUT",
            "/api/assistant",
            Some(&ui.token),
            Some(&json!({"base_url": base, "relay_token": "r".repeat(40)})),
        )
        .await;
    assert_eq!(r.status, 200, "configure the assistant: {r}");
    let r = app.ui().get("/api/audio").await;
    assert_eq!(
        (&r.json["engine"]["kind"], &r.json["keep_audio"]),
        (&json!("builtin"), &json!(false)),
        "no model installed, nothing kept by default: {r}"
    );
    let r = ui
        .request(
            "PUT",
            "/api/audio",
            Some(&ui.token),
            Some(&json!({"keep_audio": true})),
        )
        .await;
    assert_eq!(
        (r.status, &r.json["keep_audio"]),
        (200, &json!(true)),
        "{r}"
    );
    let clip = |name: &str| {
        engines::repo_root()
            .join("tests/fixtures/speech")
            .join(name)
    };
    let recordings = data.join("recordings");

    // Off for this call (the default says on): nothing is kept.
    let off = new_call(&app).await;
    assert_eq!(
        recording(&app, &off).await["keep"],
        true,
        "the default applies"
    );
    let r = ui
        .request(
            "PUT",
            &format!("/api/calls/{off}/recording"),
            Some(&ui.token),
            Some(&json!({"keep": false})),
        )
        .await;
    assert_eq!(
        (r.status, &r.json["keep"], &r.json["bytes"]),
        (200, &json!(false), &json!(0)),
        "{r}"
    );
    pulse.play("micfeed", &clip("goforward.wav"));
    settled(&app, &seen, &off, None).await;
    assert!(
        !recordings.join(&off).exists(),
        "audio kept for a call with keeping off"
    );
    end_call(&app, &off).await;
    let r = transcribe(&app, &off, json!({"model": "tiny.en-q8_0"})).await;
    assert_error(&r, 409, "no_recording");

    // On: both channels heard, each turn one FLAC file.
    let call = new_call(&app).await;
    pulse.play("call", &clip("jfk.wav"));
    pulse.play("micfeed", &clip("goforward.wav"));
    let before = settled(&app, &seen, &call, Some("Them")).await;
    let r = transcribe(&app, &call, json!({"model": "tiny.en-q8_0"})).await;
    assert_error(&r, 409, "call_not_ended");
    end_call(&app, &call).await;
    let kept = recording(&app, &call).await;
    let files = flac_files(&recordings.join(&call));
    let bytes: u64 = files.iter().map(|f| f.metadata().unwrap().len()).sum();
    assert!(files.len() >= before.len(), "{files:?} for {before:?}");
    assert_eq!(
        (
            &kept["keep"],
            &kept["bytes"].as_u64().map(|b| b >= bytes),
            &kept["turns"]
        ),
        (&json!(true), &Some(true), &json!(files.len())),
        "{kept}"
    );
    assert!(before.iter().all(|t| t["language"].is_null()), "{before:?}");
    let delivered = wait_for("every turn delivered", HEAR, || async {
        let t = transcript(&app, &call).await;
        t.iter()
            .all(|x| x["delivery"] == "sent")
            .then(|| received.all().len())
            .ok_or_else(|| format!("{t:?}"))
    })
    .await;
    let before = transcript(&app, &call).await;

    // The model is installed only now (the live engine stays the built-in one).
    std::fs::create_dir_all(data.join("models")).unwrap();
    std::os::unix::fs::symlink(
        models.join("ggml-tiny.en-q8_0.bin"),
        data.join("models/ggml-tiny.en-q8_0.bin"),
    )
    .unwrap();

    // A file that is not a model is refused at once; a damaged model (its header right, the
    // rest cut off) fails the run when it loads: either way nothing changes.
    let junk = root.path().join("junk.bin");
    std::fs::write(&junk, b"lmgg not a model at all").unwrap();
    let r = transcribe(&app, &call, json!({"model": junk.to_str().unwrap()})).await;
    assert_error(&r, 409, "model_unavailable");
    let model = std::fs::read(models.join("ggml-tiny.en-q8_0.bin")).unwrap();
    let broken = root.path().join("broken.bin");
    std::fs::write(&broken, &model[..1_000_000]).unwrap();
    let r = transcribe(&app, &call, json!({"model": broken.to_str().unwrap()})).await;
    assert_eq!(r.status, 202, "{r}");
    let end = run_end(&seen, 0).await;
    assert_eq!(
        (&end["progress"]["state"], &end["progress"]["error"]),
        (&json!("failed"), &json!("model_unavailable")),
        "{end}"
    );
    assert_eq!(
        transcript(&app, &call).await,
        before,
        "a failed run changed the turns"
    );
    let r = transcribe(
        &app,
        &call,
        json!({"model": "tiny.en-q8_0", "language": "xx-bad"}),
    )
    .await;
    assert_eq!(r.status, 400, "{r}");

    // Whisper: the same turns, better words, with their language.
    let n = of_type(&seen, "transcribe_progress").len();
    let r = transcribe(&app, &call, json!({"model": "tiny.en-q8_0"})).await;
    assert_eq!(
        (r.status, &r.json["state"]),
        (202, &json!("running")),
        "{r}"
    );
    assert!(r.json["total"].as_u64() >= Some(before.len() as u64), "{r}");
    let end = run_end(&seen, n).await;
    assert_eq!(end["progress"]["state"], "done", "{end}");
    assert_eq!(end["session_id"], json!(call), "{end}");
    let after = transcript(&app, &call).await;
    let stored_before: Vec<Value> = after
        .iter()
        .filter(|t| before.iter().any(|b| b["id"] == t["id"]))
        .cloned()
        .collect();
    assert_eq!(
        kept_fields(&stored_before),
        kept_fields(&before),
        "ids, speakers, times, delivery"
    );
    // Turns heard live as nothing and now heard are added, never to be sent.
    for t in after
        .iter()
        .filter(|t| !before.iter().any(|b| b["id"] == t["id"]))
    {
        assert!(t["delivery"].is_null() && t["task_id"].is_null(), "{t}");
    }
    assert!(after.iter().any(|t| t["language"] == "en"), "{after:?}");
    let them: String = after
        .iter()
        .filter(|t| t["speaker"] == "Them")
        .map(|t| t["text"].as_str().unwrap())
        .collect::<Vec<_>>()
        .join(" ");
    let real = engines::real_speech();
    let jfk = &real.iter().find(|(p, _)| p.ends_with("jfk.wav")).unwrap().1;
    let (errors, words) = engines::wer(jfk, &them);
    assert!(
        errors * 5 <= words,
        "Whisper again: {errors}/{words} {them:?}"
    );
    // The export carries the language; the assistant got nothing new.
    let r = app
        .ui()
        .get(&format!("/api/sessions/{call}/export?format=json"))
        .await;
    assert_eq!(r.status, 200, "{r}");
    let exported = r.json["transcript"].as_array().cloned().unwrap_or_default();
    assert!(
        !exported.is_empty() && exported.iter().all(|t| t["language"] == "en"),
        "{r}"
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        received.all().len(),
        delivered,
        "the assistant was sent something"
    );

    // Deleting the call deletes its audio.
    let r = app.delete_session(&call).await;
    assert_eq!(r.status, 200, "{r}");
    assert!(
        !recordings.join(&call).exists(),
        "the audio outlived its call"
    );
}
