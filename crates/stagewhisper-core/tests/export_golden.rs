//! The export of a recorded call matches its golden files (`tests/golden/export-call.md` and
//! `.json`). The call is built through the real API: the app in-process with its real
//! listeners and a real SQLite file, driven over loopback HTTP (the control API and the
//! callback listener), on a manual clock (the injectable one) so every time is fixed. Only the
//! session id (a random UUID) is replaced by `<session>` before comparing.
//!
//! `UPDATE_GOLDEN=1 cargo test -p stagewhisper-core --test export_golden` rewrites the files
//! (then read the diff).

use chrono::{DateTime, Utc};
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request};
use serde_json::{json, Value};
use stagewhisper_core::clock::ManualClock;
use stagewhisper_core::{App, Config};
use std::path::Path;
use std::sync::Arc;

/// One request over a fresh loopback connection: (status, content type, body).
async fn request(
    base: &str,
    method: Method,
    path: &str,
    token: &str,
    body: Option<Value>,
) -> (u16, String, String) {
    let authority = base
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    let stream = tokio::net::TcpStream::connect(&authority).await.unwrap();
    let (mut send, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(conn);
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("host", &authority)
        .header("authorization", format!("Bearer {token}"))
        .header("content-type", "application/json")
        .body(Full::new(bytes::Bytes::from(
            body.map(|b| b.to_string()).unwrap_or_default(),
        )))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    let status = resp.status().as_u16();
    let ctype = resp
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, ctype, String::from_utf8(body.to_vec()).unwrap())
}

struct Call {
    app: App,
    clock: Arc<ManualClock>,
}

impl Call {
    async fn api(&self, method: Method, path: &str, body: Option<Value>) -> Value {
        let (status, _, text) = request(
            &self.app.ui_url,
            method,
            path,
            &self.app.ui_token.get(),
            body,
        )
        .await;
        assert!((200..300).contains(&status), "{path}: {status} {text}");
        serde_json::from_str(&text).unwrap()
    }

    async fn callback(&self, session: &str, task: &str, message_id: &str, text: &str) {
        let body = json!({
            "task_id": task, "session_id": session, "status": "message",
            "message_id": message_id, "reply_text": text,
            "error_code": null, "error_message": null, "model": null,
        });
        let (status, _, text) = request(
            &self.app.callback_url,
            Method::POST,
            &format!("/tasks/{task}"),
            &self.app.callback_token.get(),
            Some(body),
        )
        .await;
        assert_eq!(status, 200, "{text}");
    }

    fn wait(&self, secs: i64) {
        self.clock.advance_ms(secs * 1000);
    }
}

fn golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (UPDATE_GOLDEN=1 writes it)", path.display()));
    assert_eq!(actual, want, "{name} differs from its golden file");
}

#[tokio::test]
async fn the_export_of_a_recorded_call_matches_its_golden_files() {
    let tmp = tempfile::tempdir().unwrap();
    let start: DateTime<Utc> = "2026-03-02T09:00:00Z".parse().unwrap();
    let clock = ManualClock::new(start);
    let mut config = Config::new(tmp.path().to_path_buf());
    config.clock = clock.clone();
    let app = App::start(config).await.unwrap();
    let call = Call { app, clock };

    let c = call
        .api(
            Method::POST,
            "/api/calls",
            Some(json!({"title": "Pricing call with Acme"})),
        )
        .await;
    let sid = c["session_id"].as_str().unwrap().to_string();
    let isid = c["insights_session_id"].as_str().unwrap().to_string();
    let transcript = format!("/api/calls/{sid}/transcript");
    call.wait(4);
    call.api(
        Method::POST,
        &transcript,
        Some(json!({"speaker": "Dana (Acme)", "text": "Thanks for joining. We have about\nthirty minutes."})),
    )
    .await;
    call.wait(9);
    call.api(
        Method::POST,
        &transcript,
        Some(json!({"speaker": "Me", "text": "Great. Shall we start with the renewal?"})),
    )
    .await;
    call.wait(20);
    call.api(
        Method::POST,
        &transcript,
        Some(json!({"speaker": "Dana (Acme)", "text": "Honestly the price went up 20% and that is hard to justify."})),
    )
    .await;
    call.wait(3);
    call.callback(
        &isid,
        "00000000-0000-4000-8000-000000000001",
        "ins-1",
        "Price objection: anchor on the **usage growth** (3x since last year) before discussing discounts.",
    )
    .await;
    call.wait(15);
    call.api(
        Method::POST,
        &format!("/api/sessions/{sid}/messages"),
        Some(json!({"text": "What discount can I offer without approval?"})),
    )
    .await;
    call.wait(2);
    call.callback(
        &sid,
        "00000000-0000-4000-8000-000000000002",
        "chat-1",
        "Up to 10% on a two-year term.\n\n# Not a heading\n- list item kept",
    )
    .await;
    call.wait(40);
    call.callback(
        &isid,
        "00000000-0000-4000-8000-000000000003",
        "ins-2",
        "They mentioned a competitor twice; ask what the competitor offers.",
    )
    .await;
    call.wait(3725 - 93);
    call.api(
        Method::POST,
        &format!("/api/calls/{sid}/end"),
        Some(json!({})),
    )
    .await;

    let base = call.app.ui_url.clone();
    let token = call.app.ui_token.get();
    let mut got = Vec::new();
    for (format, ctype) in [("md", "text/markdown"), ("json", "application/json")] {
        let (status, content_type, body) = request(
            &base,
            Method::GET,
            &format!("/api/sessions/{sid}/export?format={format}"),
            &token,
            None,
        )
        .await;
        assert_eq!(status, 200, "{body}");
        assert!(content_type.starts_with(ctype), "{content_type}");
        got.push(body.replace(&sid, "<session>"));
    }
    golden("export-call.md", &got[0]);
    golden("export-call.json", &got[1]);
    // The JSON is the same data as the API's lists.
    let v: Value = serde_json::from_str(&got[1]).unwrap();
    let insights = call
        .api(Method::GET, &format!("/api/sessions/{sid}/insights"), None)
        .await;
    assert_eq!(v["insights"].as_array().unwrap().len(), 2);
    assert_eq!(v["insights"][0]["id"], insights[1]["id"], "oldest first");
    call.app.shutdown().await;
}
