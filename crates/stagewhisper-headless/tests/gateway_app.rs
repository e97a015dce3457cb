//! The real app (the `stagewhisper-headless` binary, driven over its control API and event
//! stream) through the REAL OpenClaw gateway (npm `openclaw` 2026.9.6, offline, with the stub
//! model of tests/interop/stub_model.py). Nothing is faked.
//!
//! Needs the running gateway and its control script: `tests/gateway/run.sh` sets everything up
//! inside a loopback-only network namespace and runs this with `--ignored` (after the client's
//! own real-gateway test, on the same gateway). Environment: `SW_GATEWAY_URL`,
//! `SW_GATEWAY_TOKEN`, `SW_GATEWAY_CTL` (gwctl.sh: stop / start the gateway, run its CLI).
//!
//! The cases, in order, on one app and one gateway:
//! 1. pairing required → the real `openclaw devices approve <requestId>` → online with no
//!    request from the test (< 10 s after the CLI returns);
//! 2. a streamed reply shows as a draft and settles exactly once;
//! 3. Stop (`POST /api/sessions/{id}/stop`) aborts a slow reply: the partial text stays, marked;
//! 4. gateway stopped mid-reply, a message typed while it is down stays pending; gateway started
//!    again → the app reconnects, the interrupted reply is in the chat exactly once and the
//!    pending message is delivered once (one reply);
//! 5. transcript turns of a call → insights (the prelude's reply is not one);
//! 6. the app stopped mid-reply; the gateway finishes the reply while the app is down (it is
//!    stopped and started too: SIGTERM waits for the run); the app started again → the reply
//!    is backfilled from `chat.history`, in the chat exactly once, the message not sent again;
//! 7. a wrong token → `token_mismatch`, and no retry loop.

#[path = "../../../tests/common/mod.rs"]
mod common;

use common::*;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

struct Env {
    url: String,
    token: String,
    ctl: String,
}

fn env() -> Option<Env> {
    let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    Some(Env {
        url: get("SW_GATEWAY_URL")?,
        token: get("SW_GATEWAY_TOKEN")?,
        ctl: get("SW_GATEWAY_CTL")?,
    })
}

/// Runs the gateway control script.
async fn ctl(script: &str, args: &[&str]) -> String {
    let script = script.to_string();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let out = std::process::Command::new(&script)
            .args(&args)
            .output()
            .expect("run the gateway control script");
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "gwctl {args:?} failed: {stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("gwctl {}: {}", args.join(" "), stdout.trim());
        stdout
    })
    .await
    .unwrap()
}

fn status_event(e: &SseEvent, want: &str) -> bool {
    e.kind() == "assistant_status" && e.json()["assistant"]["status"] == want
}

fn is_message_of(e: &SseEvent, umid: &str) -> bool {
    e.kind().starts_with("message_")
        && e.message()["user_message_id"] == umid
        && e.message()["kind"] == "assistant"
}

fn settled_of(e: &SseEvent, umid: &str) -> bool {
    is_message_of(e, umid) && e.message()["draft"] == false
}

async fn send(app: &App, sid: &str, text: &str) -> String {
    let r = app
        .ui()
        .post(
            &format!("/api/sessions/{sid}/messages"),
            &json!({"text": text}),
        )
        .await;
    assert_eq!(r.status, 201, "{r}");
    r.json["message_id"].as_str().unwrap().to_string()
}

/// The settled assistant entries answering `umid` (as the UI would list them).
async fn replies_to(app: &App, sid: &str, umid: &str) -> Vec<Value> {
    app.messages(sid)
        .await
        .into_iter()
        .filter(|m| m["kind"] == "assistant" && m["user_message_id"] == umid && m["draft"] == false)
        .collect()
}

async fn view(app: &App) -> Value {
    let r = app.ui().get("/api/assistant").await;
    assert_eq!(r.status, 200, "{r}");
    r.json
}

/// Events for `d`, whatever they are.
async fn drain(ev: &mut EventStream, d: Duration) -> Vec<SseEvent> {
    let deadline = Instant::now() + d;
    let mut out = Vec::new();
    while let Some(e) = ev
        .next(deadline.saturating_duration_since(Instant::now()))
        .await
    {
        out.push(e);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real OpenClaw gateway: run tests/gateway/run.sh"]
async fn the_app_through_the_real_gateway() {
    let Some(env) = env() else {
        eprintln!("skipped: SW_GATEWAY_URL / SW_GATEWAY_TOKEN / SW_GATEWAY_CTL are not set (tests/gateway/run.sh sets them)");
        return;
    };
    let mut app = App::start().await;
    let mut ev = app.events(SseOpts::live()).await;
    let ui = app.ui();

    // 1. Pairing.
    eprintln!("== pairing");
    let r = ui
        .request(
            "PUT",
            "/api/assistant",
            Some(&app.ready.ui_token),
            Some(&json!({"kind": "openclaw-gateway", "url": env.url, "token": env.token})),
        )
        .await;
    assert_eq!(r.status, 200, "{r}");
    assert!(
        !r.text.contains(&env.token),
        "the token is never returned: {r}"
    );
    let mut v = view(&app).await;
    if v["status"] != "pairing_required" {
        ev.until("pairing_required", Duration::from_secs(120), |e| {
            status_event(e, "pairing_required")
        })
        .await;
        v = view(&app).await;
    }
    let request_id = v["pairing"]["request_id"]
        .as_str()
        .expect("pairing.request_id")
        .to_string();
    assert_eq!(
        v["pairing"]["command"],
        format!("openclaw devices approve {request_id}"),
        "{v}"
    );
    assert!(
        v["device_id"].as_str().is_some_and(|d| d.len() == 64),
        "{v}"
    );
    let cli_started = Instant::now();
    ctl(
        &env.ctl,
        &["cli", "devices", "approve", &request_id, "--json"],
    )
    .await;
    let approved = Instant::now();
    if view(&app).await["status"] != "online" {
        ev.until("online after the approval", Duration::from_secs(30), |e| {
            status_event(e, "online")
        })
        .await;
    }
    let took = approved.elapsed();
    eprintln!(
        "approve CLI took {:.1} s; the app was online {:.1} s after it returned",
        (approved - cli_started).as_secs_f64(),
        took.as_secs_f64()
    );
    assert!(
        took < Duration::from_secs(10),
        "online {took:?} after the approval"
    );
    let v = view(&app).await;
    assert_eq!(v["status"], "online", "{v}");
    assert_eq!(v["server_version"], "2026.9.6", "{v}");
    assert_eq!(v["pairing"], Value::Null, "{v}");

    // 2. A streamed reply: a draft, then exactly one settled message.
    eprintln!("== streamed reply");
    let sid = app.create_chat().await;
    let umid = send(&app, &sid, "Say hello to the app test.").await;
    let seen = ev
        .until("the settled reply", Duration::from_secs(120), |e| {
            settled_of(e, &umid)
        })
        .await;
    assert!(
        seen.iter()
            .any(|e| is_message_of(e, &umid) && e.message()["draft"] == true),
        "a draft before the settled reply:\n{}",
        dump_events(&seen)
    );
    assert!(
        seen.iter().any(|e| e.kind() == "typing_started"),
        "typing while the reply runs:\n{}",
        dump_events(&seen)
    );
    drain(&mut ev, Duration::from_secs(2)).await;
    let replies = replies_to(&app, &sid, &umid).await;
    assert_eq!(replies.len(), 1, "{}", app.dump(&sid).await);
    assert!(
        replies[0]["text"]
            .as_str()
            .unwrap()
            .starts_with("Stub reply"),
        "{}",
        replies[0]
    );
    let user = app
        .messages(&sid)
        .await
        .into_iter()
        .find(|m| m["message_id"] == umid.as_str())
        .unwrap();
    assert_eq!(user["delivery"], "sent", "{user}");

    // 3. Stop a slow reply.
    eprintln!("== stop");
    let slow = "#slow please write a long answer about the weather in many many words so that it takes a while to stream";
    let umid = send(&app, &sid, slow).await;
    ev.until("the slow draft", Duration::from_secs(120), |e| {
        is_message_of(e, &umid) && e.message()["draft"] == true
    })
    .await;
    let r = ui
        .post(&format!("/api/sessions/{sid}/stop"), &json!({}))
        .await;
    assert_eq!(r.status, 200, "{r}");
    ev.until("the aborted mark", Duration::from_secs(30), |e| {
        e.kind().starts_with("message_")
            && e.message()["error_code"] == "aborted"
            && e.message()["user_message_id"] == umid.as_str()
    })
    .await;
    drain(&mut ev, Duration::from_secs(3)).await;
    let replies = replies_to(&app, &sid, &umid).await;
    assert_eq!(
        replies.len(),
        1,
        "the partial text, once: {}",
        app.dump(&sid).await
    );
    let partial = replies[0]["text"].as_str().unwrap();
    assert!(
        partial.starts_with("Stub") && partial.len() < slow.len(),
        "a prefix of the reply: {partial}"
    );
    let r = ui
        .post(&format!("/api/sessions/{sid}/stop"), &json!({}))
        .await;
    assert_error(&r, 409, "nothing_running");

    // 4. Gateway stopped mid-reply; a message typed while it is down; started again.
    eprintln!("== gateway restart mid-reply, and a message typed while it is down");
    let long = "#slow tell me a story about a lighthouse keeper who counts the waves every night and writes them all down";
    let umid_long = send(&app, &sid, long).await;
    ev.until("the long draft", Duration::from_secs(120), |e| {
        is_message_of(e, &umid_long) && e.message()["draft"] == true
    })
    .await;
    ctl(&env.ctl, &["stop"]).await; // SIGTERM: the gateway finishes the run, then closes (1012)
    if view(&app).await["status"] == "online" {
        ev.until("the link down", Duration::from_secs(60), |e| {
            e.kind() == "assistant_status" && e.json()["assistant"]["status"] != "online"
        })
        .await;
    }
    let umid_down = send(&app, &sid, "Are you back?").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let pending = app
        .messages(&sid)
        .await
        .into_iter()
        .find(|m| m["message_id"] == umid_down.as_str())
        .unwrap();
    assert_eq!(
        pending["delivery"],
        "pending",
        "{pending}\n--- app stderr ---\n{}",
        app.stderr_tail()
    );
    ctl(&env.ctl, &["start"]).await;
    ev.until("online again", Duration::from_secs(120), |e| {
        status_event(e, "online")
    })
    .await;
    let deadline = Instant::now() + Duration::from_secs(180);
    loop {
        let a = replies_to(&app, &sid, &umid_long).await.len();
        let b = replies_to(&app, &sid, &umid_down).await.len();
        if a >= 1 && b >= 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "replies after the restart missing:\n{}",
            app.dump(&sid).await
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    drain(&mut ev, Duration::from_secs(5)).await;
    let dump = app.dump(&sid).await;
    assert_eq!(
        replies_to(&app, &sid, &umid_long).await.len(),
        1,
        "the interrupted reply once:\n{dump}"
    );
    let down = replies_to(&app, &sid, &umid_down).await;
    assert_eq!(
        down.len(),
        1,
        "the message typed while down answered once:\n{dump}"
    );
    let user = app
        .messages(&sid)
        .await
        .into_iter()
        .find(|m| m["message_id"] == umid_down.as_str())
        .unwrap();
    assert_eq!(user["delivery"], "sent", "{user}");
    let users = app
        .messages(&sid)
        .await
        .into_iter()
        .filter(|m| m["kind"] == "user")
        .count();
    assert_eq!(users, 4, "{dump}");

    // 5. Transcript turns → insights: each turn waits for the previous insight, so exactly one
    //    insight per turn (the first may ride behind the prelude's run); the prelude's reply would
    //    be one more.
    eprintln!("== insights");
    let (call, _) = app.create_call().await;
    let turns = [
        ("Ann", "We need the numbers by Friday."),
        ("Bob", "Our budget is fifty thousand."),
    ];
    for (n, (speaker, text)) in turns.iter().enumerate() {
        let r = ui
            .post(
                &format!("/api/calls/{call}/transcript"),
                &json!({"speaker": speaker, "text": text, "is_final": true}),
            )
            .await;
        assert_eq!(r.status, 201, "{r}");
        let deadline = Instant::now() + Duration::from_secs(180);
        while app.insights(&call).await.len() < n + 1 {
            assert!(
                Instant::now() < deadline,
                "no insight for turn {n}:\n{}",
                app.dump(&call).await
            );
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }
    drain(&mut ev, Duration::from_secs(5)).await;
    let insights = app.insights(&call).await;
    eprintln!("insights: {insights:#?}");
    assert_eq!(
        insights.len(),
        2,
        "one insight per turn, none for the prelude:\n{}",
        app.dump(&call).await
    );
    assert!(
        app.messages(&call)
            .await
            .iter()
            .all(|m| m["kind"] != "assistant"),
        "insights never reach the chat:\n{}",
        app.dump(&call).await
    );

    // 6. The app stopped mid-reply; the reply finishes while it is down.
    eprintln!("== app stopped mid-reply, the gateway finishes, app started again");
    let sid = app.create_chat().await;
    let umid = send(
        &app,
        &sid,
        "#slow tell me about the tides while I step away for a moment",
    )
    .await;
    ev.until("the draft before the stop", Duration::from_secs(120), |e| {
        is_message_of(e, &umid) && e.message()["draft"] == true
    })
    .await;
    // (Informational: a reply settled before the stop would come live, not from the backfill.)
    let early = !replies_to(&app, &sid, &umid).await.is_empty();
    eprintln!("reply settled before the app stopped: {early}");
    let status = app.sigterm().await;
    assert!(status.success(), "the app stops cleanly: {status}");
    // SIGTERM on the gateway waits for its active runs: the reply is finished when it is down.
    ctl(&env.ctl, &["stop"]).await;
    ctl(&env.ctl, &["start"]).await;
    app.restart().await;
    let mut ev = app.events(SseOpts::live()).await;
    let ui = app.ui();
    if view(&app).await["status"] != "online" {
        ev.until(
            "online after the app restart",
            Duration::from_secs(120),
            |e| status_event(e, "online"),
        )
        .await;
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let settled = replies_to(&app, &sid, &umid).await;
        let draft = app
            .messages(&sid)
            .await
            .iter()
            .any(|m| m["user_message_id"] == umid.as_str() && m["draft"] == true);
        if !settled.is_empty() && !draft {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the reply was not backfilled after the restart:\n{}\n--- app stderr ---\n{}",
            app.dump(&sid).await,
            app.stderr_tail()
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    drain(&mut ev, Duration::from_secs(5)).await;
    let dump = app.dump(&sid).await;
    let replies = replies_to(&app, &sid, &umid).await;
    assert_eq!(replies.len(), 1, "the reply once:\n{dump}");
    assert!(
        replies[0]["text"]
            .as_str()
            .unwrap()
            .starts_with("Stub reply"),
        "a settled reply of the run: {}",
        replies[0]
    );
    // (The gateway's reply of that run as `chat.history` has it: when the stop interrupted the
    // run, the gateway finishes it after its restart with a turn of its own.)
    eprintln!("backfilled reply: {}", replies[0]["text"]);
    let users: Vec<Value> = app
        .messages(&sid)
        .await
        .into_iter()
        .filter(|m| m["kind"] == "user")
        .collect();
    assert_eq!(users.len(), 1, "{dump}");
    assert_eq!(users[0]["delivery"], "sent", "{dump}");

    // 7. Wrong token: its own status, and no retry.
    eprintln!("== wrong token");
    let r = ui
        .request(
            "PUT",
            "/api/assistant",
            Some(&app.ready.ui_token),
            Some(&json!({"kind": "openclaw-gateway", "token": "definitely-not-the-token"})),
        )
        .await;
    assert_eq!(r.status, 200, "{r}");
    // The event of the new status always comes (the view may already say so).
    ev.until("token_mismatch", Duration::from_secs(60), |e| {
        status_event(e, "token_mismatch")
    })
    .await;
    let after = drain(&mut ev, Duration::from_secs(8)).await;
    let v = view(&app).await;
    assert_eq!(v["status"], "token_mismatch", "{v}");
    assert!(v["detail"].as_str().unwrap().contains("token"), "{v}");
    assert!(!v.to_string().contains("definitely-not-the-token"), "{v}");
    assert!(
        after.iter().all(|e| e.kind() != "assistant_status"),
        "no retry loop after a final refusal:\n{}",
        dump_events(&after)
    );
    eprintln!("== all app-through-the-real-gateway cases passed");
}
