//! What the live-call view and Settings → Audio rely on, black-box: the real
//! `stagewhisper-headless` binary on a temp data dir, over real HTTP on loopback.
//!
//! - `POST /api/audio/engine/check`: the saved engine and an engine being typed are tried for
//!   real (PocketSphinx loads its model; a transcription server address with nothing listening
//!   is `down`; an address that answers but is no transcription server is `rejected`); the saved
//!   engine's outcome is its status; a bad address is refused in words people understand.
//! - "Summarise this call" is a user message marked `purpose: "summary_request"`, delivered as
//!   before (the transcript in its text), and search does not find it — before and after the
//!   writer's index batch reached it, and after a restart.

#[path = "../../../tests/common/mod.rs"]
mod common;

use common::*;
use serde_json::{json, Value};
use std::time::Duration;

/// A loopback port with nothing listening (bound, then closed).
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    port
}

async fn check(app: &App, body: Value) -> Resp {
    app.ui().post("/api/audio/engine/check", &body).await
}

#[tokio::test]
async fn the_engine_is_tried_on_save_and_on_test() {
    let mut app = App::start().await;
    let ui = app.ui();
    let nowhere = format!("http://127.0.0.1:{}", closed_port());

    // The built-in engine (the default) loads its model and decodes half a second of silence.
    let r = check(&app, json!({})).await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.json["kind"], "builtin", "{r}");
    assert_eq!(r.json["ok"], true, "PocketSphinx is installed here: {r}");
    assert_eq!(r.json["code"], "ok");
    assert_eq!(r.json["saved"], true);

    // An engine being typed (not saved): nothing listens at that address.
    let r = check(
        &app,
        json!({"engine": {"kind": "openai", "base_url": nowhere, "model": "tiny.en"}}),
    )
    .await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.json["ok"], false, "{r}");
    assert_eq!(r.json["code"], "down", "{r}");
    assert_eq!(r.json["saved"], false);
    assert!(
        r.json["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{r}"
    );
    let st = ui.get("/api/audio").await;
    assert_eq!(
        st.json["engine"]["kind"], "builtin",
        "a test saves nothing: {st}"
    );

    // Saved, then tried: the saved engine's outcome is its status at once.
    let r = ui
        .request(
            "PUT",
            "/api/audio",
            Some(&ui.token),
            Some(&json!({"engine": {"kind": "openai", "base_url": nowhere, "model": "tiny.en"}})),
        )
        .await;
    assert_eq!(r.status, 200, "{r}");
    let r = check(&app, json!({})).await;
    assert_eq!(
        (&r.json["ok"], &r.json["code"], &r.json["saved"]),
        (&json!(false), &json!("down"), &json!(true)),
        "{r}"
    );
    let st = ui.get("/api/audio").await;
    assert_eq!(st.json["status"]["engine"]["state"], "down", "{st}");

    // An address that answers, but is no transcription server (the app's own UI server).
    let other = app.ready.ui_url.trim_end_matches('/').to_string();
    let r = check(
        &app,
        json!({"engine": {"kind": "openai", "base_url": other, "model": "tiny.en"}}),
    )
    .await;
    assert_eq!(r.status, 200, "{r}");
    assert_eq!(r.json["ok"], false, "{r}");
    assert_eq!(r.json["code"], "rejected", "{r}");

    // Back to the built-in engine: the status is fine again once it is tried.
    let r = ui
        .request(
            "PUT",
            "/api/audio",
            Some(&ui.token),
            Some(&json!({"engine": {"kind": "builtin"}})),
        )
        .await;
    assert_eq!(r.status, 200, "{r}");
    let r = check(&app, json!({})).await;
    assert_eq!(r.json["ok"], true, "{r}");
    let st = ui.get("/api/audio").await;
    assert_eq!(st.json["status"]["engine"]["state"], "ready", "{st}");

    // A bad address: the same codes as PUT, in words people understand.
    let r = check(
        &app,
        json!({"engine": {"kind": "openai", "base_url": "127.0.0.1:8001", "model": "x"}}),
    )
    .await;
    assert_error(&r, 400, "invalid_url");
    let m = r.json["message"].as_str().unwrap();
    assert!(m.contains("http://"), "{m}");
    assert!(!m.contains("relative URL"), "{m}");
    let r = check(&app, json!({"engine": {"kind": "whatever"}})).await;
    assert_eq!(r.status, 400, "{r}");
    let status = app.sigterm().await;
    assert!(status.success(), "{status}");
}

async fn search_hits(app: &App, q: &str) -> Vec<Value> {
    let r = app.ui().get(&format!("/api/search?q={q}")).await;
    assert_eq!(r.status, 200, "{r}");
    r.json["results"].as_array().unwrap().clone()
}

#[tokio::test]
async fn a_summary_request_is_short_in_the_chat_and_not_a_search_hit() {
    let mut app = App::start().await;
    let ui = app.ui();
    let r = ui
        .post("/api/calls", &json!({"title": "Quokka review"}))
        .await;
    assert_eq!(r.status, 201, "{r}");
    let sid = r.json["session_id"].as_str().unwrap().to_string();
    let r = ui
        .post(
            &format!("/api/calls/{sid}/transcript"),
            &json!({"speaker": "Ana", "text": "The quokka budget is settled."}),
        )
        .await;
    assert_eq!(r.status, 201, "{r}");
    let r = ui
        .post(
            &format!("/api/sessions/{sid}/messages"),
            &json!({"text": "Did the quokka budget change?"}),
        )
        .await;
    assert_eq!(r.status, 201, "{r}");
    let asked = r.json["id"].as_i64().unwrap();

    let r = ui
        .post(&format!("/api/calls/{sid}/summarise"), &json!({}))
        .await;
    assert_eq!(r.status, 201, "{r}");
    assert_eq!(r.json["purpose"], "summary_request", "{r}");
    assert_eq!(r.json["kind"], "user");
    let text = r.json["text"].as_str().unwrap();
    assert!(
        text.contains("The quokka budget is settled."),
        "the assistant still gets the transcript: {text}"
    );
    let request = r.json["id"].as_i64().unwrap();

    // The chat's messages say so too; an ordinary message carries no purpose.
    let page = ui.get(&format!("/api/sessions/{sid}/messages")).await;
    // The whole list (no `limit`: an array).
    let items = page.json.as_array().unwrap_or_else(|| panic!("{page}"));
    let by_id = |id: i64| items.iter().find(|m| m["id"] == id).unwrap().clone();
    assert_eq!(by_id(request)["purpose"], "summary_request");
    assert!(by_id(asked).get("purpose").is_none(), "{page}");

    // Search: the transcript turn and the question, never the request (right away, after the
    // index batch, and after a restart).
    let kinds = |hits: &[Value]| {
        let mut ids: Vec<i64> = hits
            .iter()
            .map(|h| h["message_id"].as_i64().unwrap())
            .collect();
        ids.sort();
        ids
    };
    let first = search_hits(&app, "quokka").await;
    assert!(!kinds(&first).contains(&request), "{first:?}");
    assert!(kinds(&first).contains(&asked), "{first:?}");
    assert_eq!(first.len(), 2, "the turn and the question: {first:?}");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let later = search_hits(&app, "quokka").await;
    assert_eq!(kinds(&later), kinds(&first));
    app.restart().await;
    let after = search_hits(&app, "quokka").await;
    assert_eq!(kinds(&after), kinds(&first));
    let page = app.ui().get(&format!("/api/sessions/{sid}/messages")).await;
    let kept = page
        .json
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == request)
        .cloned()
        .unwrap();
    assert_eq!(kept["purpose"], "summary_request", "kept across a restart");
    let status = app.sigterm().await;
    assert!(status.success(), "{status}");
}
