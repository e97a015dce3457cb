//! Noticing the call, end to end: the real headless binary watching a private PulseAudio
//! (`sound::Pulse`), fake meeting applications (`parec` recording from the microphone with
//! `application.name` set, as Zoom or a browser would), driven over the control API and read on
//! the event stream.
//!
//! - an application holding the microphone is offered (`call_offered`) about two seconds after
//!   it takes it; accepting starts a call that listens and hears the microphone; letting go
//!   offers to end that call (`call_offer_closed` with its `call_id`); "keep" withdraws that;
//! - the app's own capture (meters, listening) never makes an offer; nor does a call running;
//! - "never for this app" is remembered across a restart; "not now" closes the offer; a grace
//!   period ends the call by itself;
//! - without a sound server, detection says it is off and why.
//!
//! The time from taking the microphone to the offer is printed (`offer after …`), not asserted:
//! speed is for benches.
//!
//! Needs PulseAudio (`pulseaudio`, `pactl`, `parec`, `paplay`) and espeak-ng: FAILS when
//! `SW_AUDIO_REQUIRE=1` and they are missing, skipped with the reason otherwise.

#[path = "../../../tests/common/mod.rs"]
mod common;
mod sound;

use std::path::Path;
use std::process::Child;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};
use sound::{speech, Pulse};

/// Bound of a wait for something the engine must hear.
const HEAR: Duration = Duration::from_secs(60);
/// Bound of a wait for an offer (the rule is two seconds of holding the microphone).
const OFFER: Duration = Duration::from_secs(10);

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

/// Waits for an event of `kind` about `app` (after `from`), returning when it came.
async fn wait_event(seen: &Seen, kind: &str, app: &str, from: Instant) -> (Instant, Value) {
    wait_for(&format!("{kind} for {app}"), OFFER, || async {
        of_type(seen, kind)
            .into_iter()
            .find(|(t, v)| *t >= from && v["app"] == app)
            .ok_or_else(|| format!("{:?}", of_type(seen, kind)))
    })
    .await
}

/// The end offer of a call started from `app`'s offer: a `call_offer_closed` with a `call_id`
/// (the accept's own closing of the offer, without one, may arrive after `from`).
async fn wait_end_offer(seen: &Seen, app: &str, from: Instant) -> Value {
    wait_for(&format!("the end offer for {app}"), OFFER, || async {
        of_type(seen, "call_offer_closed")
            .into_iter()
            .find(|(t, v)| *t >= from && v["app"] == app && !v["call_id"].is_null())
            .map(|(_, v)| v)
            .ok_or_else(|| format!("{:?}", of_type(seen, "call_offer_closed")))
    })
    .await
}

async fn detection(app: &App) -> Value {
    let r = app.ui().get("/api/audio/detection").await;
    assert_eq!(r.status, 200, "GET /api/audio/detection: {r}");
    r.json
}

async fn wait_watching(app: &App) -> Value {
    wait_for("detection watching", OFFER, || async {
        let d = detection(app).await;
        if d["status"]["state"] == "watching" {
            Ok(d)
        } else {
            Err(d.to_string())
        }
    })
    .await
}

async fn launch(dir: &Path, env: &[(String, String)]) -> App {
    App::launch(dir.to_path_buf(), vec![], env).await
}

fn stop(mut c: Child) {
    let _ = c.kill();
    let _ = c.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detection_a_meeting_app_on_the_microphone_is_offered_accepted_heard_and_offered_to_end() {
    if !sound::tools("detection: offer, accept, end") {
        return;
    }
    let pulse = Pulse::start();
    let root = tempfile::tempdir().unwrap();
    let app = launch(&root.path().join("data"), &pulse.env()).await;
    let (seen, _task) = collect(app.events(SseOpts::live()).await);
    let d = wait_watching(&app).await;
    assert_eq!(d["enabled"], true, "on by default: {d}");
    assert_eq!(d["offers"], json!([]));

    // The app's own capture (the meters record both channels) is never offered.
    let r = app
        .ui()
        .post("/api/audio/meters", &json!({"seconds": 4}))
        .await;
    assert_eq!(r.status, 200, "{r}");
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        of_type(&seen, "call_offered").is_empty(),
        "own capture offered"
    );

    // A meeting app takes the microphone: offered within a few seconds.
    let t0 = Instant::now();
    let zoom = pulse.record_as("zoom", "mic");
    let (at, ev) = wait_event(&seen, "call_offered", "zoom", t0).await;
    println!("offer after {} ms", (at - t0).as_millis());
    assert_eq!(ev["binary"], "zoom", "{ev}");
    assert!(
        at - t0 >= Duration::from_millis(1900),
        "held two seconds first"
    );
    let d = detection(&app).await;
    assert_eq!(d["offers"][0]["app"], "zoom", "{d}");
    assert!(is_time_micros(&d["offers"][0]["since"]), "{d}");

    // Bad answers get stable codes.
    let r = app
        .ui()
        .post("/api/audio/detection/accept", &json!({"app": "skype"}))
        .await;
    assert_error(&r, 404, "offer_not_found");
    let r = app
        .ui()
        .post("/api/audio/detection/accept", &json!({"app": ""}))
        .await;
    assert_error(&r, 400, "invalid_app");

    // Start listening: a call that listens, titled after the app; the offer closes.
    let t1 = Instant::now();
    let r = app
        .ui()
        .post("/api/audio/detection/accept", &json!({"app": "zoom"}))
        .await;
    assert_eq!(r.status, 201, "{r}");
    let call = r.json["session_id"].as_str().unwrap().to_string();
    assert_eq!(r.json["session"]["title"], "Call in zoom");
    wait_event(&seen, "call_offer_closed", "zoom", t1).await;
    assert_eq!(detection(&app).await["offers"], json!([]));
    // It hears the microphone.
    let wav = speech(
        pulse.dir(),
        "you",
        "en-us",
        "Our budget is about twenty thousand dollars this quarter.",
    );
    wait_for("listening", HEAR, || async {
        let s = app.ui().get("/api/audio").await.json["status"].clone();
        if s["state"] == "listening" {
            Ok(())
        } else {
            Err(s.to_string())
        }
    })
    .await;
    pulse.play("micfeed", &wav);
    let turn = wait_for("a turn of You", HEAR, || async {
        let t = app
            .ui()
            .get(&format!("/api/calls/{call}/transcript"))
            .await
            .json;
        t.as_array()
            .and_then(|a| a.iter().find(|x| x["speaker"] == "You").cloned())
            .ok_or_else(|| t.to_string())
    })
    .await;
    let text = turn["text"].as_str().unwrap_or_default().to_lowercase();
    assert!(
        ["budget", "twenty", "thousand", "dollars", "quarter"]
            .iter()
            .any(|k| text.contains(k)),
        "heard: {turn}"
    );

    // The meeting app lets go: the call is offered to end; "keep" withdraws that.
    let t2 = Instant::now();
    stop(zoom);
    let ev = wait_end_offer(&seen, "zoom", t2).await;
    assert_eq!(ev["call_id"], call.as_str(), "{ev}");
    assert!(ev.get("ends_at").is_none(), "no grace set: it waits: {ev}");
    let d = detection(&app).await;
    assert_eq!(d["end_offers"][0]["call_id"], call.as_str(), "{d}");
    let r = app
        .ui()
        .post("/api/audio/detection/dismiss", &json!({"app": "zoom"}))
        .await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.json["end_offers"], json!([]));
    // While the call runs, another app on the microphone is not offered.
    let t3 = Instant::now();
    let slack = pulse.record_as("slack", "mic");
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert!(
        of_type(&seen, "call_offered").iter().all(|(t, _)| *t < t3),
        "offered during a call"
    );
    stop(slack);
    app.end_call(&call).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detection_never_for_this_app_survives_a_restart_and_a_grace_period_ends_the_call() {
    if !sound::tools("detection: never, restart, grace") {
        return;
    }
    let pulse = Pulse::start();
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    let mut app = launch(&data, &pulse.env()).await;
    let (seen, task) = collect(app.events(SseOpts::live()).await);
    wait_watching(&app).await;

    // "Not now": the offer closes, and comes again only when the app takes the microphone anew.
    let t0 = Instant::now();
    let zoom = pulse.record_as("zoom", "mic");
    wait_event(&seen, "call_offered", "zoom", t0).await;
    let r = app
        .ui()
        .post("/api/audio/detection/dismiss", &json!({"app": "zoom"}))
        .await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.json["offers"], json!([]));
    wait_event(&seen, "call_offer_closed", "zoom", t0).await;
    let r = app
        .ui()
        .post("/api/audio/detection/dismiss", &json!({"app": "zoom"}))
        .await;
    assert_error(&r, 404, "offer_not_found");
    stop(zoom);

    // "Never for this app": remembered, across a restart.
    let t1 = Instant::now();
    let zoom = pulse.record_as("zoom", "mic");
    wait_event(&seen, "call_offered", "zoom", t1).await;
    let r = app
        .ui()
        .post(
            "/api/audio/detection/dismiss",
            &json!({"app": "zoom", "never": true}),
        )
        .await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.json["ignored_apps"], json!(["zoom"]));
    stop(zoom);
    task.abort();
    let status = app.sigterm().await;
    assert!(status.success(), "{}", app.stderr_tail());
    let app = launch(&data, &pulse.env()).await;
    let (seen, _task) = collect(app.events(SseOpts::live()).await);
    let d = wait_watching(&app).await;
    assert_eq!(d["ignored_apps"], json!(["zoom"]), "{d}");
    let t2 = Instant::now();
    let zoom = pulse.record_as("zoom", "mic");
    // A browser call, with a grace period of one second after it lets go.
    let ui = app.ui();
    let r = ui
        .request(
            "PUT",
            "/api/audio/detection",
            Some(&ui.token),
            Some(&json!({"end_after_secs": 1})),
        )
        .await;
    assert_eq!(r.status, 200, "{r}");
    let firefox = pulse.record_as("Firefox", "mic");
    let (_, ev) = wait_event(&seen, "call_offered", "Firefox", t2).await;
    assert_eq!(ev["label"], "a call in Firefox", "{ev}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        of_type(&seen, "call_offered")
            .iter()
            .all(|(_, v)| v["app"] != "zoom"),
        "an ignored app was offered"
    );
    stop(zoom);
    let r = app
        .ui()
        .post(
            "/api/audio/detection/accept",
            &json!({"app": "Firefox", "title": "Standup"}),
        )
        .await;
    assert_eq!(r.status, 201, "{r}");
    let call = r.json["session_id"].as_str().unwrap().to_string();
    assert_eq!(r.json["session"]["title"], "Standup");
    let t3 = Instant::now();
    stop(firefox);
    let ev = wait_end_offer(&seen, "Firefox", t3).await;
    assert_eq!(ev["call_id"], call.as_str(), "{ev}");
    assert!(is_time_micros(&ev["ends_at"]), "{ev}");
    wait_for(
        "the call ended by itself",
        Duration::from_secs(20),
        || async {
            let s = app.ui().get("/api/sessions").await.json;
            let ended = s
                .as_array()
                .and_then(|a| a.iter().find(|x| x["session_id"] == call.as_str()))
                .is_some_and(|x| !x["ended_at"].is_null());
            if ended {
                Ok(())
            } else {
                Err(s.to_string())
            }
        },
    )
    .await;
    let a = app.ui().get("/api/audio").await.json;
    assert_eq!(a["status"]["state"], "idle", "listening stopped: {a}");

    // Bad settings: stable codes, nothing saved.
    let r = ui
        .request(
            "PUT",
            "/api/audio/detection",
            Some(&ui.token),
            Some(&json!({"end_after_secs": 99999})),
        )
        .await;
    assert_error(&r, 400, "invalid_field");
    let r = ui
        .request(
            "PUT",
            "/api/audio/detection",
            Some(&ui.token),
            Some(&json!({"ignored_apps": [""]})),
        )
        .await;
    assert_error(&r, 400, "invalid_app");
    // Switched off: no watching, and says so.
    let r = ui
        .request(
            "PUT",
            "/api/audio/detection",
            Some(&ui.token),
            Some(&json!({"enabled": false})),
        )
        .await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.json["status"]["state"], "off", "{r}");
    assert_eq!(r.json["ignored_apps"], json!(["zoom"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detection_without_a_sound_server_is_off_and_says_why() {
    let nowhere = tempfile::tempdir().unwrap();
    let env = vec![
        (
            "PULSE_SERVER".to_string(),
            format!("unix:{}", nowhere.path().join("native").display()),
        ),
        (
            "XDG_RUNTIME_DIR".into(),
            nowhere.path().display().to_string(),
        ),
    ];
    let root = tempfile::tempdir().unwrap();
    let app = launch(&root.path().join("data"), &env).await;
    let d = wait_for("detection unavailable", OFFER, || async {
        let d = detection(&app).await;
        if d["status"]["state"] == "unavailable" {
            Ok(d)
        } else {
            Err(d.to_string())
        }
    })
    .await;
    let detail = d["status"]["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("Call detection is off") && detail.contains("sound server"),
        "{detail}"
    );
    assert_eq!(d["enabled"], true);
}

/// `wav` with `secs` of silence before it (sox), so a player's stream is open before it speaks.
fn padded(wav: &Path, secs: f32) -> std::path::PathBuf {
    let out = wav.with_extension("padded.wav");
    let status = std::process::Command::new("sox")
        .arg(wav)
        .arg(&out)
        .args(["pad", &secs.to_string(), "0.5"])
        .status()
        .expect("run sox");
    assert!(status.success(), "sox pad {}", wav.display());
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detection_only_the_call_app_is_heard_not_the_music_on_the_same_output() {
    if !sound::tools("detection: only the call's app") {
        return;
    }
    let pulse = Pulse::start();
    let root = tempfile::tempdir().unwrap();
    let app = launch(&root.path().join("data"), &pulse.env()).await;
    let ui = app.ui();
    let r = ui
        .request(
            "PUT",
            "/api/audio",
            Some(&ui.token),
            Some(&json!({"mic": null, "system": {"app": "zoom"}})),
        )
        .await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.json["system"], json!({"app": "zoom"}));
    let r = ui
        .request(
            "PUT",
            "/api/audio",
            Some(&ui.token),
            Some(&json!({"system": {"app": ""}})),
        )
        .await;
    assert_error(&r, 400, "invalid_app");
    let r = ui
        .request(
            "PUT",
            "/api/audio",
            Some(&ui.token),
            Some(&json!({"mic": {"app": "zoom"}})),
        )
        .await;
    assert_error(&r, 400, "invalid_field");
    // One app's sound is no source to test on its own: a conflict with the setting, not a 5xx.
    let r = app
        .ui()
        .post("/api/audio/test", &json!({"channel": "system"}))
        .await;
    assert_error(&r, 409, "app_only");
    let r = app.ui().post("/api/calls", &json!({"listen": true})).await;
    assert_eq!(r.status, 201, "{r}");
    let call = r.json["session_id"].as_str().unwrap().to_string();
    // Nothing played by the app yet: the channel says so.
    let system = |s: &Value| {
        s["channels"]
            .as_array()
            .and_then(|a| a.iter().find(|c| c["channel"] == "system").cloned())
            .unwrap_or_default()
    };
    wait_for("the app plays nothing yet", OFFER, || async {
        let s = app.ui().get("/api/audio").await.json["status"].clone();
        let d = system(&s)["detail"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        if d.contains("plays nothing yet") {
            Ok(())
        } else {
            Err(s.to_string())
        }
    })
    .await;
    // The meeting app and a music app speak different words on the same output, together.
    let zoom_wav = padded(
        &speech(
            pulse.dir(),
            "zoom",
            "en-us",
            "We signed the contract for two years.",
        ),
        1.5,
    );
    let music_wav = padded(
        &speech(
            pulse.dir(),
            "music",
            "en-us",
            "Our budget is about twenty thousand dollars this quarter.",
        ),
        1.5,
    );
    let mut zoom = pulse.play_as("zoom", "call", &zoom_wav);
    let mut music = pulse.play_as("music", "call", &music_wav);
    let s = wait_for("listening to zoom alone", OFFER, || async {
        let s = app.ui().get("/api/audio").await.json["status"].clone();
        if system(&s)["state"] == "listening" && !system(&s)["source"].is_null() {
            Ok(s)
        } else {
            Err(s.to_string())
        }
    })
    .await;
    let d = system(&s)["detail"].as_str().unwrap().to_string();
    assert!(d.contains("zoom only"), "{d}");
    let _ = zoom.wait();
    let _ = music.wait();
    let turn = wait_for("a turn of Them", HEAR, || async {
        let t = app
            .ui()
            .get(&format!("/api/calls/{call}/transcript"))
            .await
            .json;
        t.as_array()
            .and_then(|a| a.iter().find(|x| x["speaker"] == "Them").cloned())
            .ok_or_else(|| t.to_string())
    })
    .await;
    // Let the last turn end, then read them all.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let t = app
        .ui()
        .get(&format!("/api/calls/{call}/transcript"))
        .await
        .json;
    let them: String = t
        .as_array()
        .unwrap()
        .iter()
        .filter(|x| x["speaker"] == "Them")
        .map(|x| x["text"].as_str().unwrap_or_default().to_lowercase() + " ")
        .collect();
    println!("Them heard: {them}");
    assert!(
        ["signed", "contract", "years"]
            .iter()
            .any(|k| them.contains(k)),
        "the meeting app's words: {turn} / {them}"
    );
    assert!(
        !["budget", "dollars", "thousand", "quarter"]
            .iter()
            .any(|k| them.contains(k)),
        "the music app's words were heard: {them}"
    );
    app.end_call(&call).await;
}
