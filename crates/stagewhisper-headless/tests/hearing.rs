//! Hearing the call, end to end: the real headless binary listening to a private PulseAudio
//! (`sound::Pulse`: null sinks `call` and `micfeed`, a remapped source `mic`), speech made by
//! `espeak-ng` and played with `paplay`, recognised by the real engines, driven over the control
//! API, with a minimal assistant on loopback receiving `POST /v1/incoming`.
//!
//! - speech into the microphone and into the call becomes turns of "You" and "Them" in
//!   `GET /api/calls/{id}/transcript`, delivered to the assistant; partials (`final: false`)
//!   reach `GET /api/events` before the final; levels too; the microphone hearing the call
//!   (the same words on both) gives one turn; stopping stops;
//! - an engine that is down keeps the turns on disk, across a `kill -9`; listening resumes
//!   after the restart; the turns are transcribed in order, once, when an engine answers;
//! - a microphone unplugged (its module unloaded) is an error in the status, and listening
//!   resumes when it is back; `POST /api/audio/test`, meters, an unknown source;
//! - without a sound server the routes say why (`503 audio_unavailable`).
//!
//! Keyword checks, not exact text: PocketSphinx on synthetic speech is rough.
//!
//! The tests that need PulseAudio and espeak-ng FAIL when `SW_AUDIO_REQUIRE=1` and the tools
//! are missing, and are skipped with the reason printed otherwise.

#[path = "../../../tests/common/mod.rs"]
mod common;
#[path = "../../stagewhisper-audio/tests/common/mod.rs"]
mod engines;
mod hardening;
mod sound;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};
use sound::{speech, Pulse};

/// Bound of a wait for something the engine must hear (recognition on two busy cores).
const HEAR: Duration = Duration::from_secs(60);

/// What is said, and words of it the built-in engine recognises in espeak-ng's voice even as a
/// fresh decoder's first turn (PocketSphinx adapts to the voice over a few turns and garbles
/// much of a first one; these two came through in every trial).
const BUDGET: &str = "Our budget is about twenty thousand dollars this quarter.";
const BUDGET_WORDS: &[&str] = &["budget", "twenty", "thousand", "dollars", "quarter"];
const CONTRACT: &str = "We signed the contract for two years.";
const CONTRACT_WORDS: &[&str] = &["signed", "contract", "years"];

async fn launch(dir: &Path, env: &[(String, String)]) -> App {
    App::launch(dir.to_path_buf(), vec![], env).await
}

async fn put_audio(app: &App, body: Value) -> Resp {
    let ui = app.ui();
    ui.request("PUT", "/api/audio", Some(&ui.token), Some(&body))
        .await
}

async fn status(app: &App) -> Value {
    let r = app.ui().get("/api/audio").await;
    assert_eq!(r.status, 200, "GET /api/audio: {r}");
    r.json["status"].clone()
}

/// Polls `GET /api/audio` until `pred` holds for the status.
async fn wait_status(
    app: &App,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    wait_for(what, timeout, || async {
        let s = status(app).await;
        if pred(&s) {
            Ok(s)
        } else {
            Err(serde_json::to_string_pretty(&s).unwrap())
        }
    })
    .await
}

fn channel<'a>(status: &'a Value, ch: &str) -> &'a Value {
    status["channels"]
        .as_array()
        .and_then(|a| a.iter().find(|c| c["channel"] == ch))
        .unwrap_or(&Value::Null)
}

async fn transcript(app: &App, call: &str) -> Vec<Value> {
    let r = app.ui().get(&format!("/api/calls/{call}/transcript")).await;
    assert_eq!(r.status, 200, "transcript: {r}");
    r.json.as_array().cloned().unwrap_or_default()
}

/// Waits until the transcript has a turn of `speaker` beyond the first `after` turns.
async fn wait_turn(app: &App, call: &str, after: usize, speaker: &str) -> Value {
    wait_for(&format!("a turn of {speaker}"), HEAR, || async {
        let t = transcript(app, call).await;
        t.iter()
            .skip(after)
            .find(|x| x["speaker"] == speaker)
            .cloned()
            .ok_or_else(|| serde_json::to_string_pretty(&t).unwrap())
    })
    .await
}

fn text(turn: &Value) -> String {
    turn["text"].as_str().unwrap_or_default().to_lowercase()
}

#[track_caller]
fn assert_heard(turn: &Value, keywords: &[&str]) {
    let t = text(turn);
    assert!(
        keywords.iter().any(|k| t.contains(k)),
        "none of {keywords:?} heard in {turn}"
    );
}

/// Every live event of the stream, with when it came.
type Seen = Arc<Mutex<Vec<(Instant, Value)>>>;

fn collect(mut stream: EventStream) -> (Seen, tokio::task::JoinHandle<()>) {
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let task = tokio::spawn(async move {
        while let Some(e) = stream.next(Duration::from_secs(3600)).await {
            if let Ok(v) = serde_json::from_str::<Value>(&e.data) {
                s.lock().unwrap().push((Instant::now(), v));
            }
        }
    });
    (seen, task)
}

fn of_type(seen: &Seen, kind: &str) -> Vec<(Instant, Value)> {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(_, v)| v["type"] == kind)
        .cloned()
        .collect()
}

async fn configure_assistant(app: &App) -> hardening::Received {
    let (base, received) = hardening::fake_assistant().await;
    let ui = app.ui();
    let r = ui
        .request(
            "PUT",
            "/api/assistant",
            Some(&ui.token),
            Some(&json!({"base_url": base, "relay_token": "r".repeat(40)})),
        )
        .await;
    assert_eq!(r.status, 200, "configure the assistant: {r}");
    received
}

async fn new_call(app: &App, listen: bool) -> String {
    let r = app
        .ui()
        .post(
            "/api/calls",
            &json!({"title": "heard call", "listen": listen}),
        )
        .await;
    assert_eq!(r.status, 201, "POST /api/calls: {r}");
    r.json["session_id"].as_str().unwrap().to_string()
}

fn listening_to_both(s: &Value) -> bool {
    s["state"] == "listening"
        && channel(s, "mic")["state"] == "listening"
        && channel(s, "system")["state"] == "listening"
        && !channel(s, "mic")["source"].is_null()
        && !channel(s, "system")["source"].is_null()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hearing_speech_becomes_turns_of_you_and_them_reaches_the_assistant_and_stopping_stops() {
    if !sound::tools("hearing: speech into the mic and the call") {
        return;
    }
    let pulse = Pulse::start();
    let root = tempfile::tempdir().unwrap();
    let app = launch(&root.path().join("data"), &pulse.env()).await;
    let received = configure_assistant(&app).await;

    // The sources of the server, with what "default" means for each channel.
    let r = app.ui().get("/api/audio/sources").await;
    assert_eq!(r.status, 200, "{r}");
    let find = |name: &str| {
        r.json
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("no source {name}: {r}"))
    };
    assert_eq!(
        (
            find("mic")["kind"].clone(),
            find("mic")["is_default"].clone()
        ),
        (json!("microphone"), json!(true))
    );
    assert_eq!(
        (
            find("call.monitor")["kind"].clone(),
            find("call.monitor")["is_default"].clone()
        ),
        (json!("monitor"), json!(true))
    );
    assert_eq!(find("micfeed.monitor")["is_default"], false);
    assert!(find("mic")["description"]
        .as_str()
        .is_some_and(|d| !d.is_empty()));

    // Listening from the call's creation, with the default sources (the settings' defaults).
    let (seen, _task) = collect(app.events(SseOpts::live()).await);
    let call = new_call(&app, true).await;
    let s = wait_status(&app, "listening to both channels", HEAR, listening_to_both).await;
    assert_eq!(s["call_id"], call.as_str());
    assert_eq!(channel(&s, "mic")["source"], "mic");
    assert_eq!(channel(&s, "system")["source"], "call.monitor");
    assert_eq!(channel(&s, "mic")["speaker"], "You");
    assert_eq!(channel(&s, "system")["speaker"], "Them");

    // Each channel speaks twice: PocketSphinx garbles much of a fresh decoder's first turn
    // (it adapts to the voice), so the words are checked over each speaker's turns.
    let you = speech(pulse.dir(), "you", "en-us", BUDGET);
    let them = speech(pulse.dir(), "them", "en-us", CONTRACT);
    pulse.play("micfeed", &you);
    let you_turn = wait_turn(&app, &call, 0, "You").await;
    pulse.play("call", &them);
    wait_turn(&app, &call, 0, "Them").await;
    pulse.play("micfeed", &you);
    wait_turn(&app, &call, 2, "You").await;
    pulse.play("call", &them);
    wait_turn(&app, &call, 3, "Them").await;
    let turns = transcript(&app, &call).await;
    let speakers: Vec<&str> = turns
        .iter()
        .map(|t| t["speaker"].as_str().unwrap())
        .collect();
    assert_eq!(speakers, ["You", "Them", "You", "Them"], "{turns:?}");
    let said = |who: &str| -> Value {
        json!({"text": turns
            .iter()
            .filter(|t| t["speaker"] == who)
            .map(text)
            .collect::<Vec<_>>()
            .join(" / ")})
    };
    assert_heard(&said("You"), BUDGET_WORDS);
    assert_heard(&said("Them"), CONTRACT_WORDS);

    // Partials while the turn was open, then its final, on the event stream.
    let partials = of_type(&seen, "transcript_partial");
    let finals: Vec<_> = partials
        .iter()
        .filter(|(_, v)| v["final"] == true && v["outcome"] == "stored")
        .collect();
    let you_final = finals
        .iter()
        .find(|(_, v)| v["speaker"] == "You")
        .unwrap_or_else(|| panic!("no stored final of You: {partials:?}"));
    assert_eq!(you_final.1["text"], you_turn["text"]);
    assert_eq!(you_final.1["session_id"], call.as_str());
    assert_eq!(you_final.1["channel"], "mic");
    let turn_id = you_final.1["turn_id"].clone();
    let before: Vec<_> = partials
        .iter()
        .filter(|(at, v)| v["turn_id"] == turn_id && v["final"] == false && *at < you_final.0)
        .collect();
    assert!(
        !before.is_empty(),
        "no partial before the final: {partials:?}"
    );
    // At least one per 1.5 s of the turn's speech (the empty one at its start, then one a
    // second while it is open), counted against the clip's length rather than timed on the
    // wall clock: how late they arrive on a loaded machine is the listening bench's business.
    // espeak-ng writes 22,050 Hz 16-bit mono after a 44-byte header.
    let clip_ms = (std::fs::metadata(&you).unwrap().len() - 44) * 1000 / (22_050 * 2);
    assert!(
        before.len() as u64 > clip_ms / 1500,
        "{} partials before the final of a {clip_ms} ms turn: {before:?}",
        before.len()
    );
    // Levels about ten a second, the microphone's loud while it spoke.
    let levels = of_type(&seen, "audio_level");
    assert!(levels.len() >= 20, "levels: {}", levels.len());
    assert!(
        levels
            .iter()
            .any(|(_, v)| v["mic"].as_f64().unwrap_or(0.0) > 0.05),
        "no level of the microphone's speech"
    );
    assert!(!of_type(&seen, "audio_status").is_empty());

    // Delivered to the assistant as the typed turns are: "Speaker: text", final, in order.
    let chunks = wait_for("the four turns delivered", HEAR, || async {
        let got: Vec<Value> = received
            .all()
            .into_iter()
            .filter(|b| b["reason"] == "transcript_chunk")
            .collect();
        if got.len() >= 4 {
            Ok(got)
        } else {
            Err(format!("{got:?}"))
        }
    })
    .await;
    let sent: Vec<String> = chunks
        .iter()
        .map(|c| {
            c["payload"]["text"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    let stored: Vec<String> = turns
        .iter()
        .map(|t| {
            format!(
                "{}: {}",
                t["speaker"].as_str().unwrap(),
                t["text"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(sent, stored);
    assert!(
        chunks
            .iter()
            .all(|c| c["session_id"] == format!("insights:{call}")
                && c["payload"]["is_final"] == true)
    );
    wait_for("the turns marked sent", HEAR, || async {
        let t = transcript(&app, &call).await;
        if t.iter().all(|x| x["delivery"] == "sent") {
            Ok(())
        } else {
            Err(format!("{t:?}"))
        }
    })
    .await;

    // The microphone hearing the call (speakers, no headset): the same words on both give one
    // turn, the other side's.
    let n = transcript(&app, &call).await.len();
    let echo = speech(
        pulse.dir(),
        "echo",
        "en+m3",
        "Can we move the launch to March instead of April?",
    );
    let mut bleed = pulse.play_bg("micfeed", &echo);
    pulse.play("call", &echo);
    let _ = bleed.wait();
    wait_turn(&app, &call, n, "Them").await;
    wait_for("the echo dropped", HEAR, || async {
        let drops = of_type(&seen, "transcript_partial")
            .into_iter()
            .filter(|(_, v)| v["final"] == true && v["channel"] == "mic" && v["outcome"] == "echo")
            .count();
        if drops >= 1 {
            Ok(())
        } else {
            Err(format!("{:?}", transcript(&app, &call).await))
        }
    })
    .await;
    let after_echo = transcript(&app, &call).await;
    assert_eq!(
        after_echo.len(),
        n + 1,
        "one turn for the echoed words: {after_echo:?}"
    );

    // Stopping stops: nothing more is heard.
    let r = app.ui().delete(&format!("/api/calls/{call}/listen")).await;
    assert_eq!(
        (r.status, r.json["listening"].clone()),
        (200, json!(false)),
        "{r}"
    );
    let s = status(&app).await;
    assert_eq!(s["state"], "idle", "{s}");
    assert!(s["call_id"].is_null());
    let stopped_at = Instant::now();
    pulse.play("micfeed", &you);
    pulse.play("call", &them);
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(
        transcript(&app, &call).await.len(),
        n + 1,
        "a turn after stopping"
    );
    let late = of_type(&seen, "transcript_partial")
        .into_iter()
        .filter(|(at, _)| *at > stopped_at)
        .count();
    assert_eq!(late, 0, "partials after stopping");
}

/// Whisper, the default engine when a model is installed and none was chosen, hears real
/// human speech on both channels live (partials, then finals within the WER bound).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hearing_whisper_is_the_default_with_a_model_installed_and_hears_real_speech_live() {
    if !sound::tools("hearing: Whisper live") {
        return;
    }
    let Some(models) = engines::whisper_models() else {
        return;
    };
    let pulse = Pulse::start();
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    std::fs::create_dir_all(data.join("models")).unwrap();
    std::os::unix::fs::symlink(
        models.join("ggml-tiny.en-q8_0.bin"),
        data.join("models/ggml-tiny.en-q8_0.bin"),
    )
    .unwrap();
    let app = launch(&data, &pulse.env()).await;
    let r = app.ui().get("/api/audio").await;
    assert_eq!(
        (&r.json["engine"]["kind"], &r.json["engine"]["model"]),
        (&json!("whisper"), &json!("tiny.en-q8_0")),
        "{r}"
    );
    assert_eq!(r.json["engine"]["leaves_machine"], false);
    let (seen, _task) = collect(app.events(SseOpts::live()).await);
    let call = new_call(&app, true).await;
    let s = wait_status(&app, "listening, Whisper loaded", HEAR, |s| {
        listening_to_both(s)
            && s["engine"]["detail"]
                .as_str()
                .unwrap_or("")
                .starts_with("Ready")
    })
    .await;
    let detail = s["engine"]["detail"].as_str().unwrap();
    assert!(
        detail.contains("Whisper tiny.en-q8_0 (English only)"),
        "{s}"
    );
    let clip = |name: &str| {
        engines::repo_root()
            .join("tests/fixtures/speech")
            .join(name)
    };
    let real = engines::real_speech();
    let reference = |name: &str| &real.iter().find(|(p, _)| p.ends_with(name)).unwrap().1;
    // The call says JFK's line; then the microphone reads Austen.
    pulse.play("call", &clip("jfk.wav"));
    let country = wait_for("JFK's last turn", HEAR, || async {
        let t = transcript(&app, &call).await;
        t.iter()
            .filter(|x| x["speaker"] == "Them")
            .filter(|x| text(x).contains("country"))
            .count()
            .checked_sub(1)
            .map(|_| t.clone())
            .ok_or_else(|| serde_json::to_string_pretty(&t).unwrap())
    })
    .await;
    pulse.play("micfeed", &clip("austen-0890.wav"));
    wait_turn(&app, &call, country.len(), "You").await;
    let turns = transcript(&app, &call).await;
    let said = |who: &str| -> String {
        turns
            .iter()
            .filter(|t| t["speaker"] == who)
            .map(text)
            .collect::<Vec<_>>()
            .join(" ")
    };
    // Each turn carries the language Whisper heard it in (English-only model: `en`).
    assert!(turns.iter().all(|t| t["language"] == "en"), "{turns:?}");
    for (who, clip) in [("Them", "jfk.wav"), ("You", "austen-0890.wav")] {
        let (errors, words) = engines::wer(reference(clip), &said(who));
        assert!(
            errors * 5 <= words,
            "{who}: {errors}/{words} {:?}",
            said(who)
        );
    }
    // Partials of JFK's longest turn before its final.
    let partials = of_type(&seen, "transcript_partial");
    let last = partials
        .iter()
        .find(|(_, v)| v["final"] == true && v["speaker"] == "Them" && text(v).contains("country"))
        .unwrap_or_else(|| panic!("no final with \"country\": {partials:?}"));
    let before = partials
        .iter()
        .filter(|(at, v)| v["turn_id"] == last.1["turn_id"] && v["final"] == false && *at < last.0)
        .filter(|(_, v)| !text(v).is_empty())
        .count();
    assert!(
        before >= 1,
        "no partial text before the final: {partials:?}"
    );
}

fn backlog_files(data: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(data.join("audio-backlog"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hearing_turns_wait_on_disk_while_the_engine_is_down_survive_kill_9_and_are_transcribed_in_order_once(
) {
    if !sound::tools("hearing: the engine down, kill -9, the backlog") {
        return;
    }
    // The engine: Whisper tiny.en behind the OpenAI-compatible test server, told to answer
    // 503 (down) until it is reset.
    let Some(whisper) = engines::WhisperServer::start(&[]) else {
        return;
    };
    whisper.control(json!({"status": 503, "count": 100_000}));
    let pulse = Pulse::start();
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let mut app = launch(&data, &pulse.env()).await;
    let r = put_audio(
        &app,
        json!({"engine": {"kind": "openai", "base_url": whisper.base_url, "model": "tiny.en"}}),
    )
    .await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.json["engine"]["leaves_machine"], false);
    let call = new_call(&app, true).await;
    wait_status(&app, "listening", HEAR, listening_to_both).await;

    let first = speech(pulse.dir(), "first", "en-us", BUDGET);
    let second = speech(pulse.dir(), "second", "en-us", CONTRACT);
    pulse.play("micfeed", &first);
    let s = wait_status(&app, "the first turn kept", HEAR, |s| {
        s["backlog"]["turns"] == 1
    })
    .await;
    assert_eq!(s["engine"]["state"], "down", "{s}");
    assert_eq!(s["state"], "error", "{s}");
    let detail = s["detail"].as_str().unwrap();
    assert!(
        detail.contains("not answering") && detail.contains("1 turn") && detail.contains("kept"),
        "{detail}"
    );
    pulse.play("call", &second);
    let s = wait_status(&app, "the second turn kept", HEAR, |s| {
        s["backlog"]["turns"] == 2
    })
    .await;
    assert!(s["backlog"]["seconds"].as_f64().unwrap() > 3.0, "{s}");
    let files = backlog_files(&data);
    assert_eq!(
        files.iter().filter(|f| f.ends_with(".turn")).count(),
        2,
        "{files:?}"
    );
    assert!(transcript(&app, &call).await.is_empty());

    // kill -9 while listening: the turns are still there, listening resumes.
    app.kill9();
    drop(app);
    let app = launch(&data, &pulse.env()).await;
    let s = wait_status(&app, "listening again after the restart", HEAR, |s| {
        s["call_id"].is_string()
    })
    .await;
    assert_eq!(s["call_id"], call.as_str(), "{s}");
    assert_eq!(s["backlog"]["turns"], 2, "{s}");
    wait_status(&app, "both channels open again", HEAR, |s| {
        channel(s, "mic")["state"] == "listening" && channel(s, "system")["state"] == "listening"
    })
    .await;
    assert!(transcript(&app, &call).await.is_empty());

    // The engine answers again: the backlog is transcribed, in order, once.
    whisper.control(json!({"reset": true}));
    wait_status(&app, "the backlog drained", HEAR, |s| {
        s["backlog"]["turns"] == 0
    })
    .await;
    let t = transcript(&app, &call).await;
    assert_eq!(t.len(), 2, "each turn once: {t:?}");
    assert_eq!(
        (t[0]["speaker"].clone(), t[1]["speaker"].clone()),
        (json!("You"), json!("Them"))
    );
    assert_heard(&t[0], BUDGET_WORDS);
    assert_heard(&t[1], CONTRACT_WORDS);
    let left: Vec<String> = backlog_files(&data);
    assert!(left.iter().all(|f| !f.ends_with(".turn")), "{left:?}");
    let s = wait_status(&app, "listening, the engine ready", HEAR, |s| {
        s["state"] == "listening" && s["engine"]["state"] == "ready"
    })
    .await;
    assert!(s["backlog"]["seconds"] == 0.0, "{s}");

    // Down again; meanwhile the user switches to the built-in engine: it transcribes what
    // waits, and what is said next.
    whisper.control(json!({"status": 503, "count": 100_000}));
    pulse.play("micfeed", &first);
    wait_status(&app, "a turn kept again", HEAR, |s| {
        s["backlog"]["turns"] == 1
    })
    .await;
    let r = put_audio(&app, json!({"engine": {"kind": "builtin"}})).await;
    assert_eq!(r.status, 200, "{r}");
    wait_status(&app, "drained by the built-in engine", HEAR, |s| {
        s["backlog"]["turns"] == 0 && s["engine"]["kind"] == "builtin"
    })
    .await;
    let t = transcript(&app, &call).await;
    assert_eq!(t.len(), 3, "{t:?}");
    assert_eq!(t[2]["speaker"], "You");
    assert!(!text(&t[2]).is_empty());
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(transcript(&app, &call).await.len(), 3, "stored once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hearing_an_unplugged_microphone_is_an_error_and_listening_resumes_when_it_is_back() {
    if !sound::tools("hearing: a device removed and back") {
        return;
    }
    let pulse = Pulse::start();
    let root = tempfile::tempdir().unwrap();
    let app = launch(&root.path().join("data"), &pulse.env()).await;

    // Sources by name; a name the server does not have is refused.
    let r = put_audio(&app, json!({"mic": "headset-that-is-not-there"})).await;
    assert_error(&r, 400, "unknown_source");
    let r = put_audio(
        &app,
        json!({"mic": "mic", "system": "call.monitor", "you_label": "Ana"}),
    )
    .await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(
        (r.json["mic"].clone(), r.json["system"].clone()),
        (json!("mic"), json!("call.monitor"))
    );

    // Test: a few seconds of the microphone, transcribed (nothing stored).
    let words = speech(pulse.dir(), "words", "en-us", BUDGET);
    let mut playing = pulse.play_bg("micfeed", &words);
    let r = app
        .ui()
        .post("/api/audio/test", &json!({"channel": "mic", "seconds": 4}))
        .await;
    let _ = playing.wait();
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.json["source"], "mic");
    assert!(r.json["peak"].as_f64().unwrap() > 0.05, "{r}");
    assert!(
        (r.json["seconds"].as_f64().unwrap() - 4.0).abs() < 0.5,
        "{r}"
    );
    // The words themselves are for the engines' tests (a fresh decoder's first turn).
    assert!(!text(&r.json).is_empty(), "{r}");

    // Meters without listening.
    let (seen, _task) = collect(app.events(SseOpts::live()).await);
    let r = app
        .ui()
        .post("/api/audio/meters", &json!({"seconds": 2}))
        .await;
    assert_eq!(r.status, 200, "{r}");
    wait_for("levels without listening", HEAR, || async {
        let n = of_type(&seen, "audio_level")
            .iter()
            .filter(|(_, v)| v["mic"].is_number() && v["system"].is_number())
            .count();
        if n >= 5 {
            Ok(())
        } else {
            Err(format!("{n} levels"))
        }
    })
    .await;

    let call = new_call(&app, false).await;
    let r = app
        .ui()
        .post(&format!("/api/calls/{call}/listen"), &json!({}))
        .await;
    assert_eq!(
        (r.status, r.json["listening"].clone()),
        (200, json!(true)),
        "{r}"
    );
    wait_status(&app, "listening", HEAR, listening_to_both).await;

    // The headset is unplugged.
    pulse.unplug_mic();
    let s = wait_status(&app, "the microphone's loss in the status", HEAR, |s| {
        s["state"] == "error" && channel(s, "mic")["state"] == "error"
    })
    .await;
    let detail = s["detail"].as_str().unwrap();
    assert!(
        detail.contains("gone") && detail.contains("microphone"),
        "{detail}"
    );
    assert_eq!(channel(&s, "system")["state"], "listening", "{s}");

    // It is back: listening resumes by itself, and hears.
    pulse.plug_mic();
    wait_status(&app, "listening again", HEAR, listening_to_both).await;
    pulse.play("micfeed", &words);
    let turn = wait_turn(&app, &call, 0, "Ana").await;
    assert!(!text(&turn).is_empty(), "{turn}");

    // Another microphone while listening: it takes over at once, the call listens on.
    let r = put_audio(
        &app,
        json!({"mic": "micfeed.monitor", "you_label": "Ana B"}),
    )
    .await;
    assert_eq!(r.status, 200, "{r}");
    let s = wait_status(&app, "the other microphone in use", HEAR, |s| {
        channel(s, "mic")["source"] == "micfeed.monitor" && s["state"] == "listening"
    })
    .await;
    assert_eq!(s["call_id"], call.as_str());
    assert_eq!(channel(&s, "system")["source"], "call.monitor");
    let n = transcript(&app, &call).await.len();
    pulse.play("micfeed", &words);
    let turn = wait_turn(&app, &call, n, "Ana B").await;
    assert!(!text(&turn).is_empty(), "{turn}");

    // Ending the call stops listening.
    let r = app
        .ui()
        .post(&format!("/api/calls/{call}/end"), &json!({}))
        .await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(status(&app).await["state"], "idle");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hearing_without_a_sound_server_the_audio_routes_say_why() {
    let root = tempfile::tempdir().unwrap();
    let nowhere = root.path().join("no-server");
    let env = vec![(
        "PULSE_SERVER".to_string(),
        format!("unix:{}", nowhere.display()),
    )];
    let app = launch(&root.path().join("data"), &env).await;
    let r = app.ui().get("/api/audio/sources").await;
    assert_error(&r, 503, "audio_unavailable");
    let why = r.json["message"].as_str().unwrap();
    assert!(
        why.contains("sound server") && why.contains("no-server"),
        "{why}"
    );
    for (path, body) in [
        ("/api/audio/meters", json!({"seconds": 1})),
        (
            "/api/audio/test",
            json!({"channel": "system", "seconds": 1}),
        ),
    ] {
        let r = app.ui().post(path, &body).await;
        assert_error(&r, 503, "audio_unavailable");
    }
    // A source name cannot be checked: it is kept as chosen.
    let r = put_audio(&app, json!({"mic": "usb-headset"})).await;
    assert_eq!(
        (r.status, r.json["mic"].clone()),
        (200, json!("usb-headset")),
        "{r}"
    );

    // Listening is an intent: the status says why nothing is heard.
    let call = new_call(&app, true).await;
    let s = wait_status(&app, "no sound server in the status", HEAR, |s| {
        s["state"] == "error"
            && channel(s, "mic")["state"] == "error"
            && channel(s, "system")["state"] == "error"
    })
    .await;
    assert_eq!(s["call_id"], call.as_str());
    let detail = s["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("Not hearing anything. No sound server: ")
            && detail.contains("no-server"),
        "{detail}"
    );
}
