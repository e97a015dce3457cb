//! The client against a scripted fake gateway on loopback (the real one: tests/gateway/).
//! The fake checks every `connect` signature the way the gateway does.

use super::*;
use crate::assistants::kinds::openclaw_gateway::frames::{
    parse_outbound, ConnectAuth, ConnectParams, Outbound, Request,
};
use crate::assistants::kinds::openclaw_gateway::identity::{verify, SignedFields};
use futures_util::{SinkExt, StreamExt};
use serde_json::json;
use std::sync::Mutex;
use tokio::net::TcpListener;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;

#[derive(Clone)]
enum Act {
    Hello {
        tick_ms: u64,
        device_token: Option<&'static str>,
    },
    Refuse(Value, u16),
    /// hello-ok, then read nothing more (no pongs) and hold the socket.
    HelloThenSilence {
        tick_ms: u64,
    },
}

#[derive(Clone)]
enum Reply {
    Ok(Value),
    Event(Value),
    Close(u16),
}

type ConnectFn = dyn Fn(usize, &ConnectParams) -> Act + Send + Sync;
type RequestFn = dyn Fn(usize, &str, &Value) -> Vec<Reply> + Send + Sync;

struct Fake {
    url: String,
    connects: Arc<Mutex<Vec<(Instant, ConnectParams)>>>,
    requests: Arc<Mutex<Vec<(usize, String, Value)>>>,
}

impl Fake {
    fn connects(&self) -> Vec<ConnectParams> {
        self.connects
            .lock()
            .unwrap()
            .iter()
            .map(|(_, p)| p.clone())
            .collect()
    }
    fn requests(&self, method: &str) -> Vec<(usize, Value)> {
        self.requests
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, m, _)| m == method)
            .map(|(c, _, p)| (*c, p.clone()))
            .collect()
    }
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

fn refusal(code: &str, detail: Value, message: &str) -> Value {
    json!({"code": code, "message": message, "details": detail})
}

async fn fake(
    on_connect: impl Fn(usize, &ConnectParams) -> Act + Send + Sync + 'static,
    on_request: impl Fn(usize, &str, &Value) -> Vec<Reply> + Send + Sync + 'static,
) -> Fake {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("ws://127.0.0.1:{}", listener.local_addr().unwrap().port());
    let connects = Arc::new(Mutex::new(Vec::new()));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let on_connect: Arc<ConnectFn> = Arc::new(on_connect);
    let on_request: Arc<RequestFn> = Arc::new(on_request);
    let (c2, r2) = (connects.clone(), requests.clone());
    tokio::spawn(async move {
        let mut n = 0usize;
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let conn = n;
            n += 1;
            let (connects, requests) = (c2.clone(), r2.clone());
            let (on_connect, on_request) = (on_connect.clone(), on_request.clone());
            tokio::spawn(async move {
                let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
                let nonce = uuid::Uuid::new_v4().to_string();
                let ts = now_ms();
                let challenge = json!({"type": "event", "event": "connect.challenge",
                    "payload": {"nonce": nonce, "ts": ts}});
                ws.send(Message::text(challenge.to_string())).await.unwrap();
                let Some(Ok(Message::Text(t))) = ws.next().await else {
                    return;
                };
                let (id, Outbound::Connect(p)) = parse_outbound(t.as_str()).unwrap() else {
                    panic!("first request is not connect")
                };
                // Verify like the gateway: v3 payload over the challenge, token = what was sent.
                let d = p.device.clone().expect("a device proof");
                let auth = p.auth.clone().unwrap_or(ConnectAuth {
                    token: None,
                    device_token: None,
                });
                let token = auth.token.or(auth.device_token).unwrap_or_default();
                let payload = SignedFields {
                    device_id: &d.id,
                    client_id: &p.client.id,
                    client_mode: &p.client.mode,
                    role: &p.role,
                    scopes: &p.scopes,
                    signed_at: ts,
                    token: &token,
                    nonce: &nonce,
                    platform: &p.client.platform,
                    device_family: "",
                }
                .v3();
                assert_eq!(d.nonce, nonce);
                assert_eq!(d.signed_at, ts);
                verify(&d.public_key, &payload, &d.signature).expect("a valid signature");
                connects
                    .lock()
                    .unwrap()
                    .push((Instant::now(), (*p).clone()));
                match on_connect(conn, &p) {
                    Act::Refuse(error, code) => {
                        let res = json!({"type": "res", "id": id, "ok": false, "error": error});
                        let _ = ws.send(Message::text(res.to_string())).await;
                        let _ = ws
                            .close(Some(CloseFrame {
                                code: CloseCode::from(code),
                                reason: "refused".into(),
                            }))
                            .await;
                        return;
                    }
                    Act::Hello {
                        tick_ms,
                        device_token,
                    } => {
                        let mut auth = json!({"role": "operator", "scopes": SCOPES});
                        if let Some(dt) = device_token {
                            auth["deviceToken"] = json!(dt);
                        }
                        let res = json!({"type": "res", "id": id, "ok": true, "payload": {
                            "type": "hello-ok", "protocol": 4, "server": {"version": "fake-1"},
                            "features": {"methods": []}, "auth": auth,
                            "policy": {"tickIntervalMs": tick_ms}}});
                        ws.send(Message::text(res.to_string())).await.unwrap();
                    }
                    Act::HelloThenSilence { tick_ms } => {
                        let res = json!({"type": "res", "id": id, "ok": true, "payload": {
                            "type": "hello-ok", "protocol": 4, "server": {"version": "fake-1"},
                            "policy": {"tickIntervalMs": tick_ms}}});
                        ws.send(Message::text(res.to_string())).await.unwrap();
                        tokio::time::sleep(Duration::from_secs(60)).await;
                        return;
                    }
                }
                while let Some(Ok(msg)) = ws.next().await {
                    let Message::Text(t) = msg else { continue };
                    let req: Request = serde_json::from_str(t.as_str()).unwrap();
                    requests
                        .lock()
                        .unwrap()
                        .push((conn, req.method.clone(), req.params.clone()));
                    for r in on_request(conn, &req.method, &req.params) {
                        match r {
                            Reply::Ok(v) => {
                                let res =
                                    json!({"type": "res", "id": req.id, "ok": true, "payload": v});
                                let _ = ws.send(Message::text(res.to_string())).await;
                            }
                            Reply::Event(v) => {
                                let _ = ws.send(Message::text(v.to_string())).await;
                            }
                            Reply::Close(code) => {
                                let _ = ws
                                    .close(Some(CloseFrame {
                                        code: CloseCode::from(code),
                                        reason: "bye".into(),
                                    }))
                                    .await;
                                return;
                            }
                        }
                    }
                }
            });
        }
    });
    Fake {
        url,
        connects,
        requests,
    }
}

fn hello() -> Act {
    Act::Hello {
        tick_ms: 30_000,
        device_token: None,
    }
}

fn empty_history(method: &str) -> Vec<Reply> {
    match method {
        "chat.history" => vec![Reply::Ok(json!({"sessionKey": "s", "messages": []}))],
        _ => vec![],
    }
}

struct Client {
    handle: GatewayHandle,
    events: mpsc::Receiver<GatewayEvent>,
    seen: Vec<GatewayEvent>,
    shutdown: Shutdown,
    _dir: tempfile::TempDir,
}

impl Client {
    fn start(url: &str, token: &str) -> Client {
        Self::start_in(url, token, tempfile::tempdir().unwrap())
    }

    fn start_in(url: &str, token: &str, dir: tempfile::TempDir) -> Client {
        let shutdown = Shutdown::new();
        let mut s = GatewaySettings::new(url, token);
        s.pairing_retry = Duration::from_millis(100);
        s.request_timeout = Duration::from_secs(5);
        let (handle, events) = GatewayClient::start(s, dir.path(), shutdown.clone()).unwrap();
        Client {
            handle,
            events,
            seen: vec![],
            shutdown,
            _dir: dir,
        }
    }

    async fn until(&mut self, what: &str, pred: impl Fn(&GatewayEvent) -> bool) -> GatewayEvent {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(ev)) => {
                    self.seen.push(ev.clone());
                    if pred(&ev) {
                        return ev;
                    }
                }
                other => panic!("no {what}: {other:?}; seen {:#?}", self.seen),
            }
        }
    }

    async fn state(&mut self, state: LinkState) -> GatewayStatus {
        let ev = self
            .until(
                &format!("{state:?}"),
                |e| matches!(e, GatewayEvent::Status(s) if s.state == state),
            )
            .await;
        let GatewayEvent::Status(s) = ev else {
            unreachable!()
        };
        s
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        self.shutdown.trigger();
    }
}

#[test]
fn url_rule_ws_only_to_loopback() {
    for ok in [
        "ws://127.0.0.1:18789",
        "ws://localhost:1",
        "ws://[::1]:5",
        "ws://127.3.4.5/",
        "wss://gateway.example.com",
        "wss://10.0.0.1:443",
    ] {
        assert!(validate_url(ok).is_ok(), "{ok}");
    }
    for (bad, code) in [
        ("ws://gateway.example.com:18789", "insecure_url"),
        ("ws://192.168.1.2:18789", "insecure_url"),
        ("http://127.0.0.1:18789", "invalid_url"),
        ("127.0.0.1:18789", "invalid_url"),
    ] {
        assert_eq!(validate_url(bad).unwrap_err().code(), code, "{bad}");
    }
    let dir = tempfile::tempdir().unwrap();
    let err = GatewayClient::start(
        GatewaySettings::new("ws://example.com", "t"),
        dir.path(),
        Shutdown::new(),
    )
    .err()
    .unwrap();
    assert_eq!(err.code(), "insecure_url");
}

#[tokio::test]
async fn pairing_is_retried_quietly_until_approved() {
    let f = fake(
        |n, _| {
            if n < 3 {
                Act::Refuse(
                    refusal(
                        "NOT_PAIRED",
                        json!({"code": "PAIRING_REQUIRED", "requestId": "req-1"}),
                        "pairing required: device is not approved yet",
                    ),
                    1008,
                )
            } else {
                hello()
            }
        },
        |_, m, _| empty_history(m),
    )
    .await;
    let mut c = Client::start(&f.url, "tok");
    let st = c.state(LinkState::PairingRequired).await;
    assert_eq!(st.code, "pairing_required");
    let p = st.pairing.unwrap();
    assert_eq!(p.request_id, "req-1");
    assert_eq!(p.command, "openclaw devices approve req-1");
    assert!(st.detail.contains("openclaw devices approve req-1"));
    let online = c.state(LinkState::Online).await;
    assert_eq!(online.server_version.as_deref(), Some("fake-1"));
    assert_eq!(f.connects().len(), 4);
    let pairing_statuses = c
        .seen
        .iter()
        .filter(|e| matches!(e, GatewayEvent::Status(s) if s.state == LinkState::PairingRequired))
        .count();
    assert_eq!(pairing_statuses, 1, "one status for the whole wait");
}

#[tokio::test]
async fn final_refusals_have_their_own_status_and_no_retry() {
    let cases = [
        (
            refusal(
                "INVALID_REQUEST",
                json!({"code": "AUTH_TOKEN_MISMATCH"}),
                "unauthorized: gateway token mismatch",
            ),
            1008,
            "token_mismatch",
            "token",
        ),
        (
            refusal(
                "INVALID_REQUEST",
                json!({"code": "PROTOCOL_MISMATCH", "expectedProtocol": 5}),
                "protocol mismatch",
            ),
            1002,
            "protocol_mismatch",
            "protocol 5",
        ),
        (
            json!({"code": "INVALID_REQUEST",
                   "message": "invalid connect params: at root: unexpected property 'x'"}),
            1008,
            "unknown_field",
            "unexpected property 'x'",
        ),
        (
            refusal(
                "INVALID_REQUEST",
                json!({"code": "AUTH_TOKEN_MISSING"}),
                "unauthorized: gateway token missing",
            ),
            1008,
            "token_missing",
            "enter the gateway token",
        ),
    ];
    for (error, close, code, words) in cases {
        let err = error.clone();
        let f = fake(
            move |_, _| Act::Refuse(err.clone(), close),
            |_, _, _| vec![],
        )
        .await;
        let mut c = Client::start(&f.url, "tok");
        let st = c.state(LinkState::Failed).await;
        assert_eq!(st.code, code);
        assert!(st.detail.contains(words), "{code}: {}", st.detail);
        tokio::time::sleep(Duration::from_millis(1500)).await;
        assert_eq!(f.connects().len(), 1, "{code}: retried");
        assert_eq!(c.handle.status().state, LinkState::Failed);
        // A message typed meanwhile waits; nothing is sent.
        let out = c.handle.send("s", "hi", "k1").await.unwrap();
        assert_eq!(out, SendOutcome::Queued);
        assert_eq!(
            c.handle.abort("s", None).await.unwrap_err().code(),
            "offline"
        );
    }
}

#[tokio::test]
async fn unavailable_honours_retry_after() {
    let f = fake(
        |n, _| {
            if n == 0 {
                Act::Refuse(
                    json!({"code": "UNAVAILABLE", "message": "gateway starting; retry shortly",
                           "retryable": true, "retryAfterMs": 200}),
                    1013,
                )
            } else {
                hello()
            }
        },
        |_, m, _| empty_history(m),
    )
    .await;
    let mut c = Client::start(&f.url, "tok");
    let st = c.state(LinkState::Reconnecting).await;
    assert_eq!(st.code, "gateway_unavailable");
    c.state(LinkState::Online).await;
    let times: Vec<Instant> = f.connects.lock().unwrap().iter().map(|(t, _)| *t).collect();
    let gap = times[1] - times[0];
    assert!(
        gap >= Duration::from_millis(150) && gap < Duration::from_millis(900),
        "the 200 ms hint, not the 1 s backoff: {gap:?}"
    );
}

#[tokio::test]
async fn silence_of_two_ticks_is_a_dead_socket() {
    let f = fake(
        |n, _| {
            if n == 0 {
                Act::HelloThenSilence { tick_ms: 150 }
            } else {
                hello()
            }
        },
        |_, m, _| empty_history(m),
    )
    .await;
    let mut c = Client::start(&f.url, "tok");
    c.state(LinkState::Online).await;
    // The first ping (every tick / 2) reaches a gateway that answers nothing.
    let st = c.state(LinkState::Reconnecting).await;
    assert_eq!(st.code, "dead_socket", "{st:?}");
    c.state(LinkState::Online).await;
    assert_eq!(f.connects().len(), 2);
}

#[tokio::test]
async fn device_token_is_kept_reused_and_dropped_on_token_change() {
    let f = fake(
        |_, _| Act::Hello {
            tick_ms: 30_000,
            device_token: Some("dt-1"),
        },
        |n, m, _| match (n, m) {
            (0, _) => vec![Reply::Close(1012)],
            _ => empty_history(m),
        },
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let mut c = Client::start_in(&f.url, "tok", dir);
    c.state(LinkState::Online).await;
    // Make the first connection see a request, so the fake closes it with 1012.
    let _ = c.handle.history("s", 1).await;
    let st = c.state(LinkState::Reconnecting).await;
    assert_eq!(st.code, "gateway_restarting");
    c.state(LinkState::Online).await;
    let connects = f.connects();
    assert_eq!(
        connects[0].auth.as_ref().unwrap().token.as_deref(),
        Some("tok")
    );
    let second = connects[1].auth.clone().unwrap();
    assert_eq!(second.device_token.as_deref(), Some("dt-1"));
    assert_eq!(second.token, None);
    let key_file =
        std::fs::read_to_string(path.join(super::super::identity::DEVICE_TOKEN_FILE)).unwrap();
    assert!(key_file.contains("dt-1") && !key_file.contains("\"tok\""));
    c.shutdown.trigger();
    c.state(LinkState::Stopped).await;
    // New settings (another token): the device token is not used.
    let dir2 = tempfile::tempdir().unwrap();
    for f in std::fs::read_dir(&path).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), dir2.path().join(f.file_name())).unwrap();
    }
    let mut c2 = Client::start_in(&f.url, "tok-2", dir2);
    c2.state(LinkState::Online).await;
    let third = f.connects()[2].auth.clone().unwrap();
    assert_eq!(third.token.as_deref(), Some("tok-2"));
    assert_eq!(third.device_token, None);
    assert_eq!(
        f.connects()[2].device.as_ref().unwrap().id,
        connects[0].device.as_ref().unwrap().id,
        "same identity"
    );
}

fn chat(run: &str, state: &str, extra: Value) -> Reply {
    let mut payload = json!({"runId": run, "sessionKey": "agent:main:s", "state": state});
    for (k, v) in extra.as_object().unwrap() {
        payload[k] = v.clone();
    }
    Reply::Event(json!({"type": "event", "event": "chat", "payload": payload}))
}

fn msg(text: &str) -> Value {
    json!({"role": "assistant", "content": [{"type": "text", "text": text}]})
}

#[tokio::test]
async fn chat_events_map_to_typing_drafts_and_one_final() {
    let f = fake(
        |_, _| hello(),
        |_, m, p| match m {
            "chat.send" => {
                let k = p["idempotencyKey"].as_str().unwrap().to_string();
                vec![
                    chat(&k, "status", json!({"phase": "preparing_workspace"})),
                    Reply::Ok(json!({"runId": k, "status": "started"})),
                    chat(&k, "status", json!({"phase": "preparing_workspace"})),
                    chat(
                        &k,
                        "delta",
                        json!({"deltaText": "He", "message": msg("He")}),
                    ),
                    chat(
                        &k,
                        "delta",
                        json!({"deltaText": "llo", "message": msg("Hello")}),
                    ),
                    chat(&k, "final", json!({"message": msg("Hello")})),
                    chat(&k, "error", json!({"errorMessage": "late noise"})),
                    chat("someone-else", "final", json!({"message": msg("not ours")})),
                ]
            }
            _ => empty_history(m),
        },
    )
    .await;
    let mut c = Client::start(&f.url, "tok");
    c.state(LinkState::Online).await;
    let out = c.handle.send("s", "hi", "k1").await.unwrap();
    assert_eq!(
        out,
        SendOutcome::Started {
            run_id: "k1".into()
        }
    );
    c.until("final", |e| matches!(e, GatewayEvent::Final { .. }))
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    while let Ok(ev) = c.events.try_recv() {
        c.seen.push(ev);
    }
    let run: Vec<&GatewayEvent> = c
        .seen
        .iter()
        .filter(|e| !matches!(e, GatewayEvent::Status(_)))
        .collect();
    assert_eq!(
        run,
        vec![
            &GatewayEvent::Typing {
                session_key: "s".into(),
                run_id: "k1".into(),
                label: "preparing workspace".into()
            },
            &GatewayEvent::Draft {
                session_key: "s".into(),
                run_id: "k1".into(),
                text: "He".into()
            },
            &GatewayEvent::Draft {
                session_key: "s".into(),
                run_id: "k1".into(),
                text: "Hello".into()
            },
            &GatewayEvent::Final {
                session_key: "s".into(),
                run_id: "k1".into(),
                idempotency_key: "k1".into(),
                text: "Hello".into(),
                backfilled: false
            },
        ]
    );
    // History was read before the first send of the session on this connection.
    assert_eq!(f.requests("chat.history").len(), 1);
    let sends = f.requests("chat.send");
    assert_eq!(sends.len(), 1);
    assert_eq!(
        sends[0].1,
        json!({"sessionKey": "s", "message": "hi", "deliver": false,
               "idempotencyKey": "k1", "attachments": []})
    );
    // The same key again: no second chat.send.
    let again = c.handle.send("s", "hi", "k1").await.unwrap();
    assert_eq!(
        again,
        SendOutcome::AlreadyKnown {
            run_id: "k1".into()
        }
    );
    assert_eq!(f.requests("chat.send").len(), 1);
}

#[tokio::test]
async fn after_a_reconnect_history_decides_what_is_sent_again() {
    // Connection 0 takes k1 and is then restarted (1012) before k1's reply. Connection 1's
    // history has k1 and its reply: k1 is backfilled, not re-sent; k2, typed while the link was
    // down, is sent once.
    let f = fake(
        |_, _| hello(),
        |n, m, p| match (n, m) {
            (0, "chat.send") => {
                let k = p["idempotencyKey"].as_str().unwrap().to_string();
                vec![
                    Reply::Ok(json!({"runId": k, "status": "started"})),
                    Reply::Close(1012),
                ]
            }
            (_, "chat.history") if n > 0 => {
                vec![Reply::Ok(json!({"sessionKey": "s", "messages": [
                    {"role": "user", "content": "one", "idempotencyKey": "k1:user"},
                    {"role": "assistant", "content": [{"type": "text", "text": "reply one"}],
                     "__openclaw": {"runId": "k1"}}
                ]}))]
            }
            (_, "chat.send") => {
                let k = p["idempotencyKey"].as_str().unwrap().to_string();
                vec![Reply::Ok(json!({"runId": k, "status": "started"}))]
            }
            _ => empty_history(m),
        },
    )
    .await;
    let mut c = Client::start(&f.url, "tok");
    c.state(LinkState::Online).await;
    assert_eq!(
        c.handle.send("s", "one", "k1").await.unwrap(),
        SendOutcome::Started {
            run_id: "k1".into()
        }
    );
    c.state(LinkState::Reconnecting).await;
    assert_eq!(
        c.handle.send("s", "two", "k2").await.unwrap(),
        SendOutcome::Queued
    );
    let fin = c
        .until("backfilled final", |e| {
            matches!(e, GatewayEvent::Final { .. })
        })
        .await;
    assert_eq!(
        fin,
        GatewayEvent::Final {
            session_key: "s".into(),
            run_id: "k1".into(),
            idempotency_key: "k1".into(),
            text: "reply one".into(),
            backfilled: true
        }
    );
    tokio::time::sleep(Duration::from_millis(300)).await;
    let sends: Vec<(usize, String)> = f
        .requests("chat.send")
        .into_iter()
        .map(|(n, p)| (n, p["idempotencyKey"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(sends, vec![(0, "k1".to_string()), (1, "k2".to_string())]);
    assert_eq!(
        f.requests("chat.history")
            .iter()
            .filter(|(n, _)| *n == 1)
            .count(),
        1,
        "one history read per session per connection"
    );
}
