//! The `openclaw-gateway` assistant kind through the real control API and conversation of an
//! in-process app (real SQLite files, real loopback WebSocket).
//!
//! The gateway here is a MINIMAL IN-TEST WEBSOCKET PEER, not the real one: it is used only for
//! what needs no gateway (settings validation, the token never returned, the saved file's mode)
//! and for what the real gateway cannot be made to do on demand — refuse a connect on cue, fail a
//! run with `error`, hold an insights run while turns pile up (batching), answer `none`, refuse
//! one `chat.send`, hold a run until the test releases it (so the app can be stopped and started
//! around it). It speaks the frame shapes the real gateway 2026.9.6 was recorded speaking (its
//! `chat.history` keeps the user messages as `"<key>:user"` and the replies with
//! `__openclaw.runId`), and does not check signatures (the client's own tests do). Everything
//! else is proven against the real gateway by `tests/gateway/run.sh`
//! (crates/stagewhisper-headless/tests/gateway_app.rs).

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use stagewhisper_core::{App, Config};
use std::future::Future;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;

const WAIT: Duration = Duration::from_secs(20);
const TOKEN: &str = "good-gateway-token-123";

/// Every `chat.send` / `chat.abort` the peer received: (method, params).
type Seen = Arc<Mutex<Vec<(String, Value)>>>;

/// The peer's `chat.history`, by session key.
type PeerHistory = Arc<Mutex<std::collections::HashMap<String, Vec<Value>>>>;

struct Peer {
    url: String,
    seen: Seen,
    /// Runs marked `#gate` (a chat message, or a call's title for its prelude) wait for a permit.
    gate: Arc<tokio::sync::Semaphore>,
    history: PeerHistory,
}

impl Peer {
    /// Lets one gated run finish.
    fn release(&self) {
        self.gate.add_permits(1);
    }

    /// The reply to `key` is in the peer's history.
    fn replied(&self, key: &str) -> bool {
        self.history
            .lock()
            .unwrap()
            .values()
            .flatten()
            .any(|m| m["role"] == "assistant" && m["__openclaw"]["runId"] == key)
    }

    /// The text of every `chat.send` to an insights session, after the prelude, line by line.
    fn insight_lines(&self) -> Vec<String> {
        self.sends("-insights-")
            .iter()
            .filter_map(|p| p["message"].as_str())
            .filter(|m| !m.starts_with("You are my live coach"))
            .flat_map(|m| m.lines().map(str::to_string).collect::<Vec<_>>())
            .collect()
    }

    fn sends(&self, session_key_part: &str) -> Vec<Value> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(m, p)| {
                m == "chat.send"
                    && p["sessionKey"]
                        .as_str()
                        .is_some_and(|k| k.contains(session_key_part))
            })
            .map(|(_, p)| p.clone())
            .collect()
    }
}

fn chat(run: &str, key: &str, state: &str, extra: Value) -> String {
    let mut payload =
        json!({"runId": run, "sessionKey": format!("agent:main:{key}"), "state": state});
    for (k, v) in extra.as_object().unwrap() {
        payload[k] = v.clone();
    }
    json!({"type": "event", "event": "chat", "payload": payload}).to_string()
}

fn msg(text: &str) -> Value {
    json!({"role": "assistant", "content": [{"type": "text", "text": text}]})
}

/// The peer. `refuse_first`: how many connects get `NOT_PAIRED` first. A connect with a token
/// other than [`TOKEN`] gets `AUTH_TOKEN_MISMATCH` (close 1008). Replies by message text:
/// `#slow` streams "Partial" and waits for `chat.abort`; `#fail` ends in `error`; the first
/// `chat.send` containing `#refuse` is refused (`INVALID_REQUEST`); `#gate` streams "Partial",
/// waits for [`Peer::release`] and finals "Gated reply" (a prelude whose call title has `#gate`
/// waits too); the prelude is answered after 1.5 s (so transcript turns pile up behind it); a
/// turn containing `nothing` is answered `none`; anything else streams "Hel", "Hello there" and
/// finals "Hello there". A run's final goes into the history even when its connection is gone.
async fn peer(refuse_first: usize) -> Peer {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let seen: Seen = Arc::default();
    let seen2 = seen.clone();
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let gate2 = gate.clone();
    let history: PeerHistory = Arc::default();
    let history2 = history.clone();
    let refused = Arc::new(std::sync::atomic::AtomicBool::new(false));
    tokio::spawn(async move {
        let mut n = 0usize;
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            n += 1;
            let conn = n;
            let seen = seen2.clone();
            let (gate, history, refused) = (gate2.clone(), history2.clone(), refused.clone());
            tokio::spawn(async move {
                let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
                let ts = chrono_ms();
                let challenge = json!({"type": "event", "event": "connect.challenge",
                    "payload": {"nonce": uuid::Uuid::new_v4().to_string(), "ts": ts}});
                ws.send(Message::text(challenge.to_string())).await.unwrap();
                let Some(Ok(Message::Text(t))) = ws.next().await else {
                    return;
                };
                let req: Value = serde_json::from_str(t.as_str()).unwrap();
                let id = req["id"].clone();
                let token = req["params"]["auth"]["token"]
                    .as_str()
                    .unwrap_or("")
                    .to_string();
                let refuse = |code: &str, detail: Value, message: &str| {
                    json!({"type": "res", "id": id, "ok": false,
                        "error": {"code": code, "message": message, "details": detail}})
                };
                let refusal = if token != TOKEN {
                    Some(refuse(
                        "INVALID_REQUEST",
                        json!({"code": "AUTH_TOKEN_MISMATCH"}),
                        "unauthorized: gateway token mismatch",
                    ))
                } else if conn <= refuse_first {
                    Some(refuse(
                        "NOT_PAIRED",
                        json!({"code": "PAIRING_REQUIRED", "requestId": "req-42"}),
                        "pairing required: device is not approved yet",
                    ))
                } else {
                    None
                };
                if let Some(r) = refusal {
                    let _ = ws.send(Message::text(r.to_string())).await;
                    let _ = ws
                        .close(Some(CloseFrame {
                            code: CloseCode::from(1008),
                            reason: "refused".into(),
                        }))
                        .await;
                    return;
                }
                let hello = json!({"type": "res", "id": id, "ok": true, "payload": {
                    "type": "hello-ok", "protocol": 4, "server": {"version": "peer-1"},
                    "features": {"methods": []}, "auth": {"role": "operator"},
                    "policy": {"tickIntervalMs": 30000}}});
                ws.send(Message::text(hello.to_string())).await.unwrap();
                let (tx, mut rx) = mpsc::channel::<String>(64);
                let (mut sink, mut stream) = ws.split();
                tokio::spawn(async move {
                    while let Some(t) = rx.recv().await {
                        if sink.send(Message::text(t)).await.is_err() {
                            break;
                        }
                    }
                });
                while let Some(Ok(m)) = stream.next().await {
                    let Message::Text(t) = m else { continue };
                    let req: Value = serde_json::from_str(t.as_str()).unwrap();
                    let (id, method, p) = (
                        req["id"].clone(),
                        req["method"].as_str().unwrap_or("").to_string(),
                        req["params"].clone(),
                    );
                    let key = p["sessionKey"].as_str().unwrap_or("").to_string();
                    let res = |payload: Value| {
                        json!({"type": "res", "id": id, "ok": true, "payload": payload}).to_string()
                    };
                    match method.as_str() {
                        "chat.history" => {
                            let messages = history
                                .lock()
                                .unwrap()
                                .get(&key)
                                .cloned()
                                .unwrap_or_default();
                            let _ = tx
                                .send(res(json!({"sessionKey": key, "messages": messages})))
                                .await;
                        }
                        "chat.abort" => {
                            seen.lock().unwrap().push((method.clone(), p.clone()));
                            let run = p["runId"].as_str().unwrap_or("").to_string();
                            let _ = tx
                                .send(chat(
                                    &run,
                                    &key,
                                    "aborted",
                                    json!({"message": msg("Partial")}),
                                ))
                                .await;
                            let _ = tx
                                .send(res(json!({"ok": true, "aborted": true, "runIds": [run]})))
                                .await;
                        }
                        "chat.send" => {
                            seen.lock().unwrap().push((method.clone(), p.clone()));
                            let run = p["idempotencyKey"].as_str().unwrap().to_string();
                            let text = p["message"].as_str().unwrap_or("").to_string();
                            if text.contains("#refuse")
                                && !refused.swap(true, std::sync::atomic::Ordering::SeqCst)
                            {
                                let no = json!({"type": "res", "id": id, "ok": false, "error": {
                                    "code": "INVALID_REQUEST", "message": "refused by the test peer"}});
                                let _ = tx.send(no.to_string()).await;
                                continue;
                            }
                            history
                                .lock()
                                .unwrap()
                                .entry(key.clone())
                                .or_default()
                                .push(json!({
                                "role": "user", "content": text,
                                "idempotencyKey": format!("{run}:user")}));
                            let _ = tx
                                .send(res(json!({"runId": run, "status": "started"})))
                                .await;
                            let (tx, gate, history) = (tx.clone(), gate.clone(), history.clone());
                            tokio::spawn(async move {
                                let ev = |s: &str, x: Value| {
                                    if s == "final" {
                                        let mut m = x["message"].clone();
                                        m["__openclaw"] = json!({"runId": run});
                                        history
                                            .lock()
                                            .unwrap()
                                            .entry(key.clone())
                                            .or_default()
                                            .push(m);
                                    }
                                    chat(&run, &key, s, x)
                                };
                                let _ = tx
                                    .send(ev("status", json!({"phase": "starting_model"})))
                                    .await;
                                let prelude = text.starts_with("You are my live coach");
                                if text.contains("#gate") && !prelude {
                                    let _ = tx.send(ev("delta", json!({"deltaText": "Partial", "message": msg("Partial")}))).await;
                                    gate.acquire().await.unwrap().forget();
                                    let _ = tx
                                        .send(ev("final", json!({"message": msg("Gated reply")})))
                                        .await;
                                } else if text.contains("#slow") {
                                    let _ = tx.send(ev("delta", json!({"deltaText": "Partial", "message": msg("Partial")}))).await;
                                } else if text.contains("#fail") {
                                    let _ = tx
                                        .send(ev(
                                            "error",
                                            json!({"errorMessage": "the model is unreachable"}),
                                        ))
                                        .await;
                                } else if prelude {
                                    tokio::time::sleep(Duration::from_millis(1500)).await;
                                    if text.contains("#gate") {
                                        gate.acquire().await.unwrap().forget();
                                    }
                                    let _ = tx
                                        .send(ev(
                                            "final",
                                            json!({"message": msg("Understood, I am ready.")}),
                                        ))
                                        .await;
                                } else if text.contains("nothing") {
                                    let _ =
                                        tx.send(ev("final", json!({"message": msg("none")}))).await;
                                } else if key.contains("-insights-") {
                                    let lines = text.lines().count();
                                    let _ = tx.send(ev("final", json!({"message": msg(&format!("Insight on {lines} turns"))}))).await;
                                } else {
                                    for t in ["Hel", "Hello there"] {
                                        let _ = tx
                                            .send(ev(
                                                "delta",
                                                json!({"deltaText": "x", "message": msg(t)}),
                                            ))
                                            .await;
                                        tokio::time::sleep(Duration::from_millis(50)).await;
                                    }
                                    let _ = tx
                                        .send(ev("final", json!({"message": msg("Hello there")})))
                                        .await;
                                }
                            });
                        }
                        _ => {}
                    }
                }
            });
        }
    });
    Peer {
        url,
        seen,
        gate,
        history,
    }
}

fn chrono_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

async fn start_app(dir: &Path) -> App {
    App::start(Config::new(dir.to_path_buf()))
        .await
        .expect("app starts")
}

async fn api(app: &App, method: &str, path: &str, body: Value) -> (u16, Value) {
    let b = if body.is_null() {
        Vec::new()
    } else {
        serde_json::to_vec(&body).unwrap()
    };
    let m = axum::http::Method::from_bytes(method.as_bytes()).unwrap();
    let (s, v) = app.api.dispatch(&m, path, &b).await;
    (s.as_u16(), v)
}

async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn status_is(app: &App, want: &str) -> Value {
    eventually(&format!("status {want}"), || async {
        let (_, v) = api(app, "GET", "/api/assistant", Value::Null).await;
        (v["status"] == want).then_some(v)
    })
    .await
}

async fn chat_session(app: &App) -> String {
    let (s, v) = api(app, "POST", "/api/sessions", json!({"title": "gw"})).await;
    assert_eq!(s, 201, "{v}");
    v["session_id"].as_str().unwrap().to_string()
}

async fn messages(app: &App, sid: &str) -> Vec<Value> {
    let (_, v) = api(
        app,
        "GET",
        &format!("/api/sessions/{sid}/messages"),
        Value::Null,
    )
    .await;
    v.as_array().cloned().unwrap_or_default()
}

fn tmp() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("sw-gwkind-")
        .tempdir()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settings_are_validated_with_stable_codes_and_the_token_is_never_returned() {
    let dir = tmp();
    let app = start_app(dir.path()).await;
    let put = |body: Value| {
        let mut b = body;
        b["kind"] = json!("openclaw-gateway");
        b
    };
    let cases = [
        (json!({"token": TOKEN}), "missing_field"),
        (json!({"url": "ws://127.0.0.1:9"}), "missing_field"),
        (
            json!({"url": "http://127.0.0.1:9", "token": TOKEN}),
            "invalid_url",
        ),
        (json!({"url": "not a url", "token": TOKEN}), "invalid_url"),
        (
            json!({"url": "ws://gateway.example.com:18789", "token": TOKEN}),
            "insecure_url",
        ),
        (
            json!({"url": "ws://10.0.0.5:18789", "token": TOKEN}),
            "insecure_url",
        ),
        (
            json!({"url": "ws://127.0.0.1:9", "token": "has space"}),
            "invalid_token",
        ),
        (
            json!({"url": "ws://127.0.0.1:9", "token": 42}),
            "invalid_field",
        ),
        (
            json!({"url": "ws://127.0.0.1:9", "token": TOKEN, "session_key": "a b"}),
            "invalid_session_key",
        ),
        (
            json!({"url": "ws://127.0.0.1:9", "token": TOKEN, "password": "x"}),
            "unknown_field",
        ),
    ];
    for (body, code) in cases {
        let (s, v) = api(&app, "PUT", "/api/assistant", put(body.clone())).await;
        assert_eq!((s, v["error"].as_str()), (400, Some(code)), "{body} → {v}");
    }
    let (_, v) = api(&app, "GET", "/api/assistant", Value::Null).await;
    assert_eq!(v["kind"], "incoming", "a refused PUT changes nothing: {v}");

    // wss:// to any host is accepted (nothing listens there: it just reconnects).
    let (s, v) = api(
        &app,
        "PUT",
        "/api/assistant",
        put(json!({"url": "wss://gateway.invalid:443", "token": TOKEN})),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["kind"], "openclaw-gateway");
    assert_eq!(v["session_key"], "stagewhisper");
    for k in [
        "kind",
        "status",
        "detail",
        "pairing",
        "server_version",
        "device_id",
        "session_key",
    ] {
        assert!(v.get(k).is_some(), "view lacks {k}: {v}");
    }
    assert_ne!(v["status"], "online");
    let (_, v) = api(&app, "GET", "/api/assistant", Value::Null).await;
    assert!(
        !v.to_string().contains(TOKEN),
        "the token is never returned: {v}"
    );
    let (_, p) = api(&app, "GET", "/api/providers", Value::Null).await;
    let kind = p["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["id"] == "openclaw-gateway")
        .cloned();
    assert_eq!(kind.unwrap()["available"], true, "{p}");

    // Saved 0600 in the settings store, token included (it is the only copy).
    let f = dir.path().join("settings.json");
    let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let saved: Value = serde_json::from_slice(&std::fs::read(&f).unwrap()).unwrap();
    assert_eq!(
        saved["sections"]["assistants"]["value"]["kinds"]["openclaw-gateway"]["token"],
        TOKEN
    );

    // Stop is refused while nothing runs; a kind without Stop says not_supported.
    let sid = chat_session(&app).await;
    let (s, v) = api(
        &app,
        "POST",
        &format!("/api/sessions/{sid}/stop"),
        json!({}),
    )
    .await;
    assert_eq!(
        (s, v["error"].as_str()),
        (409, Some("nothing_running")),
        "{v}"
    );
    let (s, v) = api(&app, "POST", "/api/sessions/nope/stop", json!({})).await;
    assert_eq!(s, 404, "{v}");
    let (s, _) = api(&app, "PUT", "/api/assistant",
        json!({"kind": "incoming", "base_url": "http://127.0.0.1:9", "relay_token": "r".repeat(32)})).await;
    assert_eq!(s, 200);
    let (s, v) = api(
        &app,
        "POST",
        &format!("/api/sessions/{sid}/stop"),
        json!({}),
    )
    .await;
    assert_eq!(
        (s, v["error"].as_str()),
        (409, Some("not_supported")),
        "{v}"
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pairing_then_online_then_a_streamed_reply_settles_once_and_stop_keeps_the_partial() {
    let dir = tmp();
    let gw = peer(2).await;
    let app = start_app(dir.path()).await;
    let (s, v) = api(
        &app,
        "PUT",
        "/api/assistant",
        json!({"kind": "openclaw-gateway", "url": gw.url, "token": TOKEN, "session_key": "swtest"}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let v = status_is(&app, "pairing_required").await;
    assert_eq!(v["pairing"]["request_id"], "req-42", "{v}");
    assert_eq!(
        v["pairing"]["command"], "openclaw devices approve req-42",
        "{v}"
    );
    assert!(
        v["device_id"].as_str().is_some_and(|d| d.len() == 64),
        "{v}"
    );
    // The peer approves on the third connect; the app retries by itself.
    let v = status_is(&app, "online").await;
    assert_eq!(v["server_version"], "peer-1");
    assert_eq!(v["pairing"], Value::Null);

    let sid = chat_session(&app).await;
    let (s, m) = api(
        &app,
        "POST",
        &format!("/api/sessions/{sid}/messages"),
        json!({"text": "hi"}),
    )
    .await;
    assert_eq!(s, 201, "{m}");
    let user_id = m["message_id"].as_str().unwrap().to_string();
    let reply = eventually("the settled reply", || async {
        let ms = messages(&app, &sid).await;
        ms.iter()
            .find(|m| m["kind"] == "assistant" && m["draft"] == false)
            .cloned()
    })
    .await;
    assert_eq!(reply["text"], "Hello there");
    assert_eq!(reply["user_message_id"], user_id.as_str());
    let sends = gw.sends("swtest-");
    assert_eq!(sends.len(), 1, "{sends:?}");
    assert_eq!(sends[0]["idempotencyKey"], user_id.as_str());
    assert_eq!(sends[0]["sessionKey"], format!("swtest-{sid}"));
    let ms = messages(&app, &sid).await;
    assert_eq!(
        ms.iter().filter(|m| m["kind"] == "assistant").count(),
        1,
        "{ms:#?}"
    );

    // A slow reply: Stop → chat.abort; the partial text stays, marked by an `aborted` entry.
    let (_, m) = api(
        &app,
        "POST",
        &format!("/api/sessions/{sid}/messages"),
        json!({"text": "tell me more #slow"}),
    )
    .await;
    let slow_id = m["message_id"].as_str().unwrap().to_string();
    eventually("the draft", || async {
        let ms = messages(&app, &sid).await;
        ms.iter()
            .find(|m| m["draft"] == true && m["text"] == "Partial")
            .cloned()
    })
    .await;
    let (s, v) = api(
        &app,
        "POST",
        &format!("/api/sessions/{sid}/stop"),
        json!({}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let marked = eventually("the aborted entry", || async {
        let ms = messages(&app, &sid).await;
        ms.iter().find(|m| m["error_code"] == "aborted").cloned()
    })
    .await;
    assert_eq!(marked["user_message_id"], slow_id.as_str());
    let ms = messages(&app, &sid).await;
    let partial: Vec<&Value> = ms
        .iter()
        .filter(|m| m["kind"] == "assistant" && m["user_message_id"] == slow_id.as_str())
        .collect();
    assert_eq!(partial.len(), 1, "{ms:#?}");
    assert_eq!(
        (partial[0]["text"].as_str(), partial[0]["draft"].as_bool()),
        (Some("Partial"), Some(false))
    );
    let aborts: Vec<_> = gw
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(m, _)| m == "chat.abort")
        .cloned()
        .collect();
    assert_eq!(aborts.len(), 1);
    assert_eq!(aborts[0].1["runId"], slow_id.as_str());

    // A failed run → an error entry.
    let (_, m) = api(
        &app,
        "POST",
        &format!("/api/sessions/{sid}/messages"),
        json!({"text": "#fail"}),
    )
    .await;
    let fail_id = m["message_id"].as_str().unwrap().to_string();
    let err = eventually("the error entry", || async {
        let ms = messages(&app, &sid).await;
        ms.iter()
            .find(|m| m["kind"] == "error" && m["user_message_id"] == fail_id.as_str())
            .cloned()
    })
    .await;
    assert!(
        err["text"]
            .as_str()
            .unwrap()
            .contains("the model is unreachable"),
        "{err}"
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_token_is_final_and_a_new_token_discards_the_device_token() {
    let dir = tmp();
    let gw = peer(0).await;
    let app = start_app(dir.path()).await;
    let (s, v) = api(
        &app,
        "PUT",
        "/api/assistant",
        json!({"kind": "openclaw-gateway", "url": gw.url, "token": "not-the-token"}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let v = status_is(&app, "token_mismatch").await;
    assert!(v["detail"].as_str().unwrap().contains("token"), "{v}");
    assert!(!v.to_string().contains("not-the-token"), "{v}");
    // A stored device token is discarded when the token changes.
    let dt = dir.path().join("gateway/openclaw-device-token.json");
    std::fs::write(&dt, "{}").unwrap();
    let (s, _) = api(
        &app,
        "PUT",
        "/api/assistant",
        json!({"kind": "openclaw-gateway", "token": TOKEN}),
    )
    .await;
    assert_eq!(s, 200);
    assert!(
        !dt.exists(),
        "the device token is discarded on a token change"
    );
    status_is(&app, "online").await;
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insights_prelude_first_then_turns_batched_behind_the_run_in_flight() {
    let dir = tmp();
    let gw = peer(0).await;
    let app = start_app(dir.path()).await;
    let (s, v) = api(
        &app,
        "PUT",
        "/api/assistant",
        json!({"kind": "openclaw-gateway", "url": gw.url, "token": TOKEN}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    status_is(&app, "online").await;
    let (s, c) = api(&app, "POST", "/api/calls", json!({"title": "Acme"})).await;
    assert_eq!(s, 201, "{c}");
    let call = c["session_id"].as_str().unwrap().to_string();
    eventually("the prelude", || async {
        (!gw.sends("-insights-").is_empty()).then_some(())
    })
    .await;
    for (sp, t) in [("Ann", "one"), ("Bob", "two")] {
        let (s, v) = api(
            &app,
            "POST",
            &format!("/api/calls/{call}/transcript"),
            json!({"speaker": sp, "text": t, "is_final": true}),
        )
        .await;
        assert_eq!(s, 201, "{v}");
    }
    let insights = eventually("an insight", || async {
        let (_, v) = api(
            &app,
            "GET",
            &format!("/api/sessions/{call}/insights"),
            Value::Null,
        )
        .await;
        v.as_array().filter(|a| !a.is_empty()).cloned()
    })
    .await;
    let sends = gw.sends("-insights-");
    assert_eq!(
        sends.len(),
        2,
        "prelude, then the two turns together: {sends:#?}"
    );
    assert!(
        sends[0]["message"].as_str().unwrap().contains("Acme"),
        "{sends:#?}"
    );
    assert_eq!(sends[1]["message"], "Ann: one\nBob: two");
    assert_eq!(
        sends[0]["sessionKey"],
        format!("stagewhisper-insights-{call}")
    );
    assert_eq!(
        insights.len(),
        1,
        "the prelude's reply is not an insight: {insights:#?}"
    );
    assert_eq!(insights[0]["text"], "Insight on 2 turns");

    // A reply of `none` is hidden.
    let (s, _) = api(
        &app,
        "POST",
        &format!("/api/calls/{call}/transcript"),
        json!({"speaker": "Ann", "text": "nothing to see", "is_final": true}),
    )
    .await;
    assert_eq!(s, 201);
    eventually("the third send", || async {
        (gw.sends("-insights-").len() == 3).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (_, v) = api(
        &app,
        "GET",
        &format!("/api/sessions/{call}/insights"),
        Value::Null,
    )
    .await;
    assert_eq!(v.as_array().unwrap().len(), 1, "`none` is hidden: {v}");
    let ms = messages(&app, &call).await;
    assert!(
        ms.iter().all(|m| m["kind"] != "assistant"),
        "insights never reach the chat: {ms:#?}"
    );
    app.shutdown().await;
}

async fn transcript(app: &App, call: &str) -> Vec<Value> {
    let (s, v) = api(
        app,
        "GET",
        &format!("/api/calls/{call}/transcript"),
        Value::Null,
    )
    .await;
    assert_eq!(s, 200, "{v}");
    v.as_array().cloned().unwrap_or_default()
}

async fn turn(app: &App, call: &str, speaker: &str, text: &str) {
    let (s, v) = api(
        app,
        "POST",
        &format!("/api/calls/{call}/transcript"),
        json!({"speaker": speaker, "text": text, "is_final": true}),
    )
    .await;
    assert_eq!(s, 201, "{v}");
}

async fn configure(app: &App, gw: &Peer) {
    let (s, v) = api(
        app,
        "PUT",
        "/api/assistant",
        json!({"kind": "openclaw-gateway", "url": gw.url, "token": TOKEN}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    status_is(app, "online").await;
}

/// A call whose prelude the peer holds (`#gate` in its title), and two turns behind it. Returns
/// once the two turns are held by the kind: a chat message stored after them has gone out (the
/// outbox goes oldest first, so it got past them) while they are still pending.
async fn call_with_held_turns(
    app: &App,
    gw: &Peer,
    title: &str,
    turns: [(&str, &str); 2],
) -> String {
    let (s, c) = api(app, "POST", "/api/calls", json!({ "title": title })).await;
    assert_eq!(s, 201, "{c}");
    let call = c["session_id"].as_str().unwrap().to_string();
    eventually("the prelude", || async {
        (!gw.sends("-insights-").is_empty()).then_some(())
    })
    .await;
    for (sp, t) in turns {
        turn(app, &call, sp, t).await;
    }
    let sid = chat_session(app).await;
    let (_, m) = api(
        app,
        "POST",
        &format!("/api/sessions/{sid}/messages"),
        json!({"text": "after the turns"}),
    )
    .await;
    let umid = m["message_id"].as_str().unwrap().to_string();
    eventually("the later chat message sent", || async {
        gw.sends("")
            .iter()
            .any(|p| p["idempotencyKey"] == umid.as_str())
            .then_some(())
    })
    .await;
    let rows = transcript(app, &call).await;
    assert_eq!(rows.len(), 2, "{rows:#?}");
    assert!(
        rows.iter().all(|r| r["delivery"] == "pending"),
        "batched turns stay pending in the store: {rows:#?}"
    );
    assert_eq!(gw.sends("-insights-").len(), 1, "only the prelude went out");
    call
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_turns_survive_an_app_restart_and_are_delivered_once() {
    let dir = tmp();
    let gw = peer(0).await;
    let app = start_app(dir.path()).await;
    configure(&app, &gw).await;
    let call =
        call_with_held_turns(&app, &gw, "Acme #gate", [("Ann", "one"), ("Bob", "two")]).await;
    app.shutdown().await;

    // Started again: the pending turns are offered again and go out, each once.
    let app = start_app(dir.path()).await;
    status_is(&app, "online").await;
    let rows = eventually("both turns sent after the restart", || async {
        let rows = transcript(&app, &call).await;
        rows.iter().all(|r| r["delivery"] == "sent").then_some(rows)
    })
    .await;
    assert_eq!(rows.len(), 2);
    let mut lines = gw.insight_lines();
    lines.sort();
    assert_eq!(lines, ["Ann: one", "Bob: two"], "each turn once");
    assert_eq!(
        gw.sends("-insights-")
            .iter()
            .filter(|p| p["message"]
                .as_str()
                .unwrap()
                .starts_with("You are my live coach"))
            .count(),
        1,
        "the prelude is not sent again"
    );
    eventually("the insights", || async {
        let (_, v) = api(
            &app,
            "GET",
            &format!("/api/sessions/{call}/insights"),
            Value::Null,
        )
        .await;
        v.as_array().filter(|a| !a.is_empty()).cloned()
    })
    .await;
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_batch_fails_its_turns_visibly_and_a_retry_sends_them() {
    let dir = tmp();
    let gw = peer(0).await;
    let app = start_app(dir.path()).await;
    configure(&app, &gw).await;
    let call = call_with_held_turns(
        &app,
        &gw,
        "Beta #gate",
        [("Ann", "x #refuse"), ("Bob", "y")],
    )
    .await;
    gw.release(); // the prelude ends: the batch goes out, and is refused
    let rows = eventually("both turns failed", || async {
        let rows = transcript(&app, &call).await;
        rows.iter()
            .all(|r| r["delivery"] == "failed")
            .then_some(rows)
    })
    .await;
    for r in &rows {
        assert_eq!(r["delivery_error"]["code"], "gateway_rejected", "{r}");
        assert!(
            r["delivery_error"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("refused")),
            "{r}"
        );
    }
    let batch = gw.sends("-insights-");
    assert_eq!(batch.len(), 2, "{batch:#?}");
    assert_eq!(batch[1]["message"], "Ann: x #refuse\nBob: y");

    // The user retries them: they go out (the peer refuses only once) and get their insight.
    for r in &rows {
        let (s, v) = api(
            &app,
            "POST",
            &format!("/api/sessions/{call}/messages/{}/retry", r["id"]),
            json!({}),
        )
        .await;
        assert_eq!(s, 200, "{v}");
    }
    eventually("both turns sent after the retry", || async {
        let rows = transcript(&app, &call).await;
        rows.iter().all(|r| r["delivery"] == "sent").then_some(())
    })
    .await;
    let lines = gw.insight_lines();
    assert_eq!(
        lines.iter().filter(|l| *l == "Bob: y").count(),
        2,
        "refused once, sent once after the retry: {lines:?}"
    );
    eventually("an insight", || async {
        let (_, v) = api(
            &app,
            "GET",
            &format!("/api/sessions/{call}/insights"),
            Value::Null,
        )
        .await;
        v.as_array()
            .filter(|a| {
                a.iter().any(|i| {
                    i["text"]
                        .as_str()
                        .is_some_and(|t| t.starts_with("Insight on"))
                })
            })
            .cloned()
    })
    .await;
    app.shutdown().await;
}

/// The settled assistant entries answering `umid`, and whether a draft of it is left.
async fn replies(app: &App, sid: &str, umid: &str) -> (Vec<Value>, bool) {
    let ms = messages(app, sid).await;
    let of = |m: &&Value| m["kind"] == "assistant" && m["user_message_id"] == umid;
    let settled = ms
        .iter()
        .filter(of)
        .filter(|m| m["draft"] == false)
        .cloned()
        .collect();
    let draft = ms.iter().filter(of).any(|m| m["draft"] == true);
    (settled, draft)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replies_finished_while_the_app_was_down_land_once_after_the_restart() {
    let dir = tmp();
    let gw = peer(0).await;
    let app = start_app(dir.path()).await;
    configure(&app, &gw).await;
    let sid = chat_session(&app).await;
    let mut umids = Vec::new();
    for text in ["first #gate", "second #gate"] {
        let (s, m) = api(
            &app,
            "POST",
            &format!("/api/sessions/{sid}/messages"),
            json!({ "text": text }),
        )
        .await;
        assert_eq!(s, 201, "{m}");
        let umid = m["message_id"].as_str().unwrap().to_string();
        eventually("the draft", || async {
            let ms = messages(&app, &sid).await;
            ms.iter()
                .any(|m| m["user_message_id"] == umid.as_str() && m["draft"] == true)
                .then_some(())
        })
        .await;
        umids.push(umid);
    }
    app.shutdown().await;

    // The first reply finishes while the app is down.
    gw.release();
    eventually("the first reply in the peer's history", || async {
        gw.replied(&umids[0]).then_some(())
    })
    .await;
    let app = start_app(dir.path()).await;
    status_is(&app, "online").await;
    let (got, _) = eventually("the first reply backfilled", || async {
        let r = replies(&app, &sid, &umids[0]).await;
        (!r.0.is_empty() && !r.1).then_some(r)
    })
    .await;
    assert_eq!(got.len(), 1, "{got:#?}");
    assert_eq!(got[0]["text"], "Gated reply");

    // The second is still running after the restart: it lands once it finishes.
    assert!(replies(&app, &sid, &umids[1]).await.0.is_empty());
    gw.release();
    eventually("the second reply backfilled", || async {
        let r = replies(&app, &sid, &umids[1]).await;
        (!r.0.is_empty() && !r.1).then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    for umid in &umids {
        let (got, draft) = replies(&app, &sid, umid).await;
        assert_eq!(got.len(), 1, "exactly once: {got:#?}");
        assert!(!draft);
        let sends: Vec<_> = gw
            .sends("")
            .into_iter()
            .filter(|p| p["idempotencyKey"] == umid.as_str())
            .collect();
        assert_eq!(sends.len(), 1, "never sent again: {sends:#?}");
    }
    app.shutdown().await;

    // A third start finds nothing to look up and adds nothing.
    let app = start_app(dir.path()).await;
    status_is(&app, "online").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let ms = messages(&app, &sid).await;
    assert_eq!(
        ms.iter().filter(|m| m["kind"] == "assistant").count(),
        2,
        "{ms:#?}"
    );
    app.shutdown().await;
}
