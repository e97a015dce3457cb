//! A **conformance fake** of the clawborrator hub, for tests only (a dev-only crate: no product
//! crate depends on it except as a dev-dependency).
//!
//! This is not the real hub and shares no code with it: it is written from the hub_v1 AsyncAPI
//! (0.3.0) and from what the public clients (the `claw` operator CLI, the channel MCP server)
//! are known to send and expect. It listens on loopback only and serves:
//! - `GET /cli` (WebSocket; `Authorization: Bearer cw_sess_…` or the `bearer, <token>`
//!   subprotocol, else 401 on the upgrade): `subscribe` → `subscribed` + `presence` +
//!   `channel_status` + a replay of recent events and pending permission requests; `prompt` →
//!   the `chat`/`prompt` echo to every subscriber, then `ack {chatId}`; `approval` → the
//!   `permission_resolved` broadcast, `ack` (no `chatId`) and `permission_response` to the
//!   channel; `op_message` → broadcast + `ack`;
//! - `GET /channel` (WebSocket; `Bearer ck_live_…`): `register` → `welcome`, `chat_event`,
//!   `tail_event`, `permission_request`, `pong` to its `ping`;
//! - `POST /api/channel/event`, `GET /api/v1/sessions`, `GET /api/v1/me`.
//!
//! A test drives the rest: replies (plain and chunked), tail events, permission requests and
//! their resolution by another operator or by expiry, `channel_status`, unknown and malformed
//! frames, a restart on the same port, a revoked token, and a socket that goes silent.

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role as WsRole};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// How the fake starts.
#[derive(Debug, Clone)]
pub struct FakeHubConfig {
    /// The one session it hosts.
    pub session_id: String,
    /// Operator tokens and the login each resolves to.
    pub operators: Vec<(String, String)>,
    /// The role `subscribed` reports.
    pub role: String,
    /// The channel token `/channel` accepts.
    pub channel_token: String,
    /// Events replayed on every `subscribe` (the most recent ones).
    pub replay: usize,
    /// Whether the Claude Code session counts as connected without a `/channel` socket.
    pub channel_connected: bool,
    /// Whether `subscribe` is answered with the current `channel_status` too (a hub that
    /// only reports transitions would not).
    pub announce_channel: bool,
    /// Further sessions a client may subscribe to (always connected, no history): prompts to
    /// them are acknowledged, and [`FakeHub::reply_in`] answers in them.
    pub side_sessions: Vec<String>,
}

impl Default for FakeHubConfig {
    fn default() -> Self {
        FakeHubConfig {
            session_id: "5b0c1f4e-3c1d-4a53-9b7a-0f2f8a9d6e10".into(),
            operators: vec![
                ("cw_sess_ana".into(), "ana".into()),
                ("cw_sess_bob".into(), "bob".into()),
            ],
            role: "owner".into(),
            channel_token: "ck_live_fake".into(),
            replay: 50,
            channel_connected: true,
            announce_channel: true,
            side_sessions: Vec::new(),
        }
    }
}

/// How the fake acknowledges a `prompt`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PromptAck {
    /// `ack {ok, chatId}` (the hub's current type definitions).
    #[default]
    WithChatId,
    /// `ack {ok}` (the AsyncAPI allows it).
    WithoutChatId,
    /// No ack at all (a hub that dies before answering).
    Never,
}

struct Cli {
    tx: mpsc::UnboundedSender<Message>,
    token: String,
    login: String,
    subscribed: bool,
    /// The session subscribed to.
    session: String,
    freeze: watch::Sender<bool>,
}

#[derive(Default)]
struct State {
    tokens: HashMap<String, String>,
    revoked: HashSet<String>,
    channel_flag: bool,
    channel: Option<(u64, mpsc::UnboundedSender<Message>)>,
    clis: HashMap<u64, Cli>,
    history: VecDeque<Value>,
    pending: Vec<(String, Value)>,
    cli_frames: Vec<Value>,
    channel_frames: Vec<Value>,
    cli_attempts: usize,
    cli_upgrades: usize,
    next_chat: u64,
    prompt_ack: PromptAck,
}

struct Inner {
    cfg: FakeHubConfig,
    addr: SocketAddr,
    state: Mutex<State>,
    /// Bumped to drop every socket (restart, drop of the fake).
    kill: watch::Sender<u64>,
    /// Bumped on every change a test may wait for.
    changes: watch::Sender<u64>,
    ids: AtomicU64,
    accept: Mutex<Option<JoinHandle<()>>>,
}

/// A running fake hub on `127.0.0.1`.
pub struct FakeHub {
    inner: Arc<Inner>,
}

fn now_ts() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

fn text(v: &Value) -> Message {
    Message::text(v.to_string())
}

fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let s = TcpSocket::new_v4()?;
    s.set_reuseaddr(true)?;
    s.bind(addr)?;
    s.listen(128)
}

impl FakeHub {
    /// Starts on a free loopback port.
    pub async fn start(cfg: FakeHubConfig) -> FakeHub {
        let listener = bind("127.0.0.1:0".parse().expect("addr")).expect("bind the fake hub");
        let addr = listener.local_addr().expect("local addr");
        let state = State {
            tokens: cfg.operators.iter().cloned().collect(),
            channel_flag: cfg.channel_connected,
            ..State::default()
        };
        let inner = Arc::new(Inner {
            cfg,
            addr,
            state: Mutex::new(state),
            kill: watch::channel(0).0,
            changes: watch::channel(0).0,
            ids: AtomicU64::new(1),
            accept: Mutex::new(None),
        });
        let hub = FakeHub { inner };
        hub.serve(listener);
        hub
    }

    fn serve(&self, listener: TcpListener) {
        let inner = self.inner.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let inner = inner.clone();
                let mut kill = inner.kill.subscribe();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let inner = inner.clone();
                        async move { Ok::<_, std::convert::Infallible>(handle(inner, req).await) }
                    });
                    let conn = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .with_upgrades();
                    tokio::select! {
                        _ = conn => {}
                        _ = kill.changed() => {}
                    }
                });
            }
        });
        *self.inner.accept.lock().expect("lock") = Some(task);
    }

    /// `http://127.0.0.1:PORT` (what the client's `hub_url` is set to).
    pub fn url(&self) -> String {
        format!("http://{}", self.inner.addr)
    }

    pub fn session_id(&self) -> &str {
        &self.inner.cfg.session_id
    }

    pub fn channel_token(&self) -> &str {
        &self.inner.cfg.channel_token
    }

    fn changed(&self) {
        self.inner.changes.send_modify(|n| *n += 1);
    }

    /// Stops listening and drops every socket (no close frame), as a crashed hub would.
    pub fn go_down(&self) {
        if let Some(t) = self.inner.accept.lock().expect("lock").take() {
            t.abort();
        }
        self.inner.kill.send_modify(|n| *n += 1);
        let mut s = self.inner.state.lock().expect("lock");
        s.clis.clear();
        s.channel = None;
        drop(s);
        self.changed();
    }

    /// Listens again on the same port; history and pending requests survive.
    pub async fn come_up(&self) {
        let mut tries = 0;
        let listener = loop {
            match bind(self.inner.addr) {
                Ok(l) => break l,
                Err(e) if tries < 100 => {
                    tries += 1;
                    tracing::debug!(error = %e, "fake hub: port not free yet");
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("the fake hub cannot bind its port again: {e}"),
            }
        };
        self.serve(listener);
    }

    /// [`go_down`](Self::go_down) then [`come_up`](Self::come_up).
    pub async fn restart(&self) {
        self.go_down();
        self.come_up().await;
    }

    /// Every later upgrade with `token` gets 401; live sockets with it get `error
    /// token_revoked` and a 1008 close.
    pub fn revoke(&self, token: &str) {
        let mut s = self.inner.state.lock().expect("lock");
        s.revoked.insert(token.to_string());
        for c in s.clis.values().filter(|c| c.token == token) {
            let _ = c.tx.send(text(&json!({"type": "error", "ok": false,
                "code": "token_revoked", "message": "the session token was revoked"})));
            let _ = c.tx.send(Message::Close(Some(CloseFrame {
                code: CloseCode::Policy,
                reason: "token revoked".into(),
            })));
        }
    }

    /// The `/cli` sockets open now stop reading and writing (a half-dead connection: no
    /// frames, no pongs). Later sockets are normal.
    pub fn freeze_cli(&self) {
        let s = self.inner.state.lock().expect("lock");
        for c in s.clis.values() {
            let _ = c.freeze.send(true);
        }
    }

    /// How later prompts are acknowledged.
    pub fn set_prompt_ack(&self, mode: PromptAck) {
        self.inner.state.lock().expect("lock").prompt_ack = mode;
    }

    /// Whether the Claude Code session counts as connected (broadcasts `channel_status`).
    pub fn set_channel_connected(&self, connected: bool) {
        let mut s = self.inner.state.lock().expect("lock");
        s.channel_flag = connected;
        let v = s.channel_status(&self.inner.cfg.session_id);
        s.broadcast(&v);
    }

    fn event(&self, kind: &str, ty: &str, payload: Value) {
        let v = json!({"type": "event", "sessionId": self.inner.cfg.session_id,
            "event": {"kind": kind, "type": ty, "payload": payload, "ts": now_ts()}});
        let mut s = self.inner.state.lock().expect("lock");
        s.record_event(&v, self.inner.cfg.replay);
        s.broadcast(&v);
    }

    /// A `chat`/`reply` event (what `mcp__clawborrator__reply` or the Stop hook produces).
    pub fn reply(&self, chat_id: Option<&str>, text: &str) {
        let mut p = json!({"text": text});
        if let Some(c) = chat_id {
            p["chatId"] = json!(c);
        }
        self.event("chat", "reply", p);
    }

    /// A `chat`/`reply` event in a side session (not recorded for replay).
    pub fn reply_in(&self, session_id: &str, chat_id: Option<&str>, text: &str) {
        let mut p = json!({"text": text});
        if let Some(c) = chat_id {
            p["chatId"] = json!(c);
        }
        let v = json!({"type": "event", "sessionId": session_id,
            "event": {"kind": "chat", "type": "reply", "payload": p, "ts": now_ts()}});
        self.inner.state.lock().expect("lock").broadcast(&v);
    }

    /// The `chatId` the last acknowledged prompt got (`chat-N`).
    pub fn last_chat_id(&self) -> Option<String> {
        let n = self.inner.state.lock().expect("lock").next_chat;
        (n > 0).then(|| format!("chat-{n}"))
    }

    /// A `chat`/`assistant_text` event.
    pub fn assistant_text(&self, chat_id: Option<&str>, text: &str) {
        let mut p = json!({"text": text});
        if let Some(c) = chat_id {
            p["chatId"] = json!(c);
        }
        self.event("chat", "assistant_text", p);
    }

    /// A `chat`/`prompt` event from someone else (another operator, or typed in the terminal).
    pub fn foreign_prompt(&self, author: &str, text: &str) {
        let chat = self.next_chat();
        self.event(
            "chat",
            "prompt",
            json!({"text": text, "chatId": chat, "authorLogin": author}),
        );
    }

    /// A `chat`/`peer-timeout` event.
    pub fn peer_timeout(&self, text: &str) {
        self.event("chat", "peer-timeout", json!({"text": text}));
    }

    /// A streamed reply: one `chat_reply_chunk` per part, the last with `done: true`.
    pub fn reply_chunked(&self, chat_id: &str, parts: &[&str]) {
        let s = self.inner.state.lock().expect("lock");
        for (i, p) in parts.iter().enumerate() {
            let v = json!({"type": "chat_reply_chunk", "sessionId": self.inner.cfg.session_id,
                "chatId": chat_id, "text": p, "done": i + 1 == parts.len()});
            s.broadcast(&v);
        }
    }

    /// A `tail` event (`PreToolUse`, `Stop`, …) with Claude Code's `tool_name`.
    pub fn tail(&self, hook: &str, tool: Option<&str>) {
        let p = match tool {
            Some(t) => json!({"tool_name": t}),
            None => json!({}),
        };
        self.event("tail", hook, p);
    }

    /// A pending `permission_request` (replayed on every subscribe until resolved).
    pub fn request_permission(&self, request_id: &str, tool: &str, input_preview: &str) {
        self.request_permission_in(&self.inner.cfg.session_id, request_id, tool, input_preview);
    }

    /// A pending `permission_request` in a side session.
    pub fn request_permission_in(
        &self,
        session_id: &str,
        request_id: &str,
        tool: &str,
        input_preview: &str,
    ) {
        let v = json!({"type": "permission_request", "sessionId": session_id,
            "requestId": request_id, "tool": tool, "inputPreview": input_preview, "ts": now_ts()});
        let mut s = self.inner.state.lock().expect("lock");
        s.pending.push((request_id.to_string(), v.clone()));
        s.broadcast(&v);
    }

    /// Resolves a request as another operator (`resolver`) or as expired (`None`), with the
    /// hub's decision word (`allow`, `deny` or `expired`). `false` when it was not pending.
    pub fn resolve_permission(
        &self,
        request_id: &str,
        decision: &str,
        resolver: Option<&str>,
    ) -> bool {
        assert!(
            matches!(decision, "allow" | "deny" | "expired"),
            "the hub decides allow, deny or expired, not {decision:?}"
        );
        let mut s = self.inner.state.lock().expect("lock");
        s.resolve(&self.inner.cfg.session_id, request_id, decision, resolver)
    }

    /// Sends `frame` as is to every subscribed `/cli` socket.
    pub fn send_raw(&self, frame: Value) {
        self.send_raw_text(&frame.to_string());
    }

    /// Sends `text` (JSON or not) to every subscribed `/cli` socket.
    pub fn send_raw_text(&self, text: &str) {
        let s = self.inner.state.lock().expect("lock");
        for c in s.clis.values().filter(|c| c.subscribed) {
            let _ = c.tx.send(Message::text(text.to_string()));
        }
    }

    /// Pings the channel socket (it must answer `pong`).
    pub fn ping_channel(&self) -> bool {
        let s = self.inner.state.lock().expect("lock");
        match &s.channel {
            Some((_, tx)) => tx
                .send(text(&json!({"type": "ping", "ts": now_ts()})))
                .is_ok(),
            None => false,
        }
    }

    /// Every frame received on `/cli`, in order.
    pub fn cli_frames(&self) -> Vec<Value> {
        self.inner.state.lock().expect("lock").cli_frames.clone()
    }

    /// Every frame received on `/channel`, in order.
    pub fn channel_frames(&self) -> Vec<Value> {
        self.inner
            .state
            .lock()
            .expect("lock")
            .channel_frames
            .clone()
    }

    /// `/cli` upgrade requests so far (refused ones included).
    pub fn cli_attempts(&self) -> usize {
        self.inner.state.lock().expect("lock").cli_attempts
    }

    /// `/cli` sockets accepted so far.
    pub fn cli_upgrades(&self) -> usize {
        self.inner.state.lock().expect("lock").cli_upgrades
    }

    /// `/cli` sockets subscribed now.
    pub fn subscribers(&self) -> usize {
        let s = self.inner.state.lock().expect("lock");
        s.clis.values().filter(|c| c.subscribed).count()
    }

    /// Waits until `pred` holds on the fake (checked on every change), at most `timeout`.
    pub async fn wait_until<F: Fn(&FakeHub) -> bool>(&self, timeout: Duration, pred: F) -> bool {
        let mut rx = self.inner.changes.subscribe();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            if pred(self) {
                return true;
            }
            if tokio::time::timeout_at(deadline, rx.changed())
                .await
                .is_err()
            {
                return pred(self);
            }
        }
    }

    /// Waits for a `/cli` frame of `ty` matching `pred`; returns the first such frame.
    pub async fn wait_cli_frame<F: Fn(&Value) -> bool>(
        &self,
        ty: &str,
        timeout: Duration,
        pred: F,
    ) -> Option<Value> {
        let find = |h: &FakeHub| {
            h.cli_frames()
                .into_iter()
                .find(|f| f["type"] == ty && pred(f))
        };
        if self.wait_until(timeout, |h| find(h).is_some()).await {
            find(self)
        } else {
            None
        }
    }

    fn next_chat(&self) -> String {
        let mut s = self.inner.state.lock().expect("lock");
        s.next_chat += 1;
        format!("chat-{}", s.next_chat)
    }
}

impl Drop for FakeHub {
    fn drop(&mut self) {
        self.go_down();
    }
}

impl State {
    fn channel_connected(&self) -> bool {
        self.channel_flag || self.channel.is_some()
    }

    fn channel_status(&self, session_id: &str) -> Value {
        json!({"type": "channel_status", "sessionId": session_id,
            "connected": self.channel_connected(), "ts": now_ts()})
    }

    /// To every client subscribed to the frame's session (every subscribed client when the
    /// frame names none).
    fn broadcast(&self, v: &Value) {
        let to = v["sessionId"].as_str();
        for c in self
            .clis
            .values()
            .filter(|c| c.subscribed && to.is_none_or(|t| t == c.session))
        {
            let _ = c.tx.send(text(v));
        }
    }

    fn record_event(&mut self, v: &Value, keep: usize) {
        self.history.push_back(v.clone());
        while self.history.len() > keep {
            self.history.pop_front();
        }
    }

    fn presence(&self, session_id: &str, joined: Option<&str>, left: Option<&str>) -> Value {
        let mut attached: Vec<&str> = self
            .clis
            .values()
            .filter(|c| c.subscribed)
            .map(|c| c.login.as_str())
            .collect();
        attached.sort();
        let mut v = json!({"type": "presence", "sessionId": session_id, "attached": attached});
        if let Some(j) = joined {
            v["joined"] = json!(j);
        }
        if let Some(l) = left {
            v["left"] = json!(l);
        }
        v
    }

    fn resolve(
        &mut self,
        session_id: &str,
        request_id: &str,
        decision: &str,
        resolver: Option<&str>,
    ) -> bool {
        let Some(i) = self.pending.iter().position(|(id, _)| id == request_id) else {
            return false;
        };
        let (_, req) = self.pending.remove(i);
        // Resolved in the session that asked.
        let session_id = req["sessionId"].as_str().unwrap_or(session_id).to_string();
        let session_id = session_id.as_str();
        if let Some((_, tx)) = &self.channel {
            let _ = tx.send(text(&json!({"type": "permission_response",
                "requestId": request_id, "decision": decision})));
        }
        let v = json!({"type": "permission_resolved", "sessionId": session_id,
            "requestId": request_id, "decision": decision, "resolverLogin": resolver});
        self.broadcast(&v);
        true
    }
}

fn respond(status: StatusCode, body: Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/json"),
    );
    r
}

fn unauthorized() -> Response<Full<Bytes>> {
    respond(
        StatusCode::UNAUTHORIZED,
        json!({"ok": false, "code": "auth_failed", "message": "invalid or revoked token"}),
    )
}

fn bearer<B>(req: &Request<B>) -> Option<String> {
    if let Some(t) = req
        .headers()
        .get(hyper::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
    {
        return Some(t.trim().to_string());
    }
    // The browser fallback: `Sec-WebSocket-Protocol: bearer, <token>`.
    let p = req
        .headers()
        .get(hyper::header::SEC_WEBSOCKET_PROTOCOL)?
        .to_str()
        .ok()?;
    let mut parts = p.split(',').map(str::trim);
    (parts.next()? == "bearer").then(|| parts.next().map(str::to_string))?
}

/// A WebSocket on the upgraded connection.
type Ws = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// Answers a WebSocket upgrade with 101 and runs `serve` on the socket once the connection is
/// upgraded (400 `not_websocket` when `req` is no upgrade).
fn accept<F, Fut>(req: &mut Request<Incoming>, serve: F) -> Response<Full<Bytes>>
where
    F: FnOnce(Ws) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let Some(resp) = upgrade_response(req) else {
        return respond(
            StatusCode::BAD_REQUEST,
            json!({"ok": false, "code": "not_websocket"}),
        );
    };
    let on = hyper::upgrade::on(req);
    tokio::spawn(async move {
        match on.await {
            Ok(up) => {
                serve(
                    WebSocketStream::from_raw_socket(TokioIo::new(up), WsRole::Server, None).await,
                )
                .await
            }
            Err(e) => tracing::debug!(error = %e, "fake hub: upgrade failed"),
        }
    });
    resp
}

/// The 101 answer, or `None` when `req` is not a WebSocket upgrade.
fn upgrade_response<B>(req: &Request<B>) -> Option<Response<Full<Bytes>>> {
    let key = req.headers().get(hyper::header::SEC_WEBSOCKET_KEY)?;
    let is_ws = req
        .headers()
        .get(hyper::header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if !is_ws {
        return None;
    }
    let bearer_protocol = req
        .headers()
        .get(hyper::header::SEC_WEBSOCKET_PROTOCOL)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|p| p.split(',').next().map(str::trim) == Some("bearer"));
    let mut r = Response::new(Full::new(Bytes::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    if bearer_protocol {
        // The browser fallback names `bearer` as the subprotocol; the server selects it.
        h.insert(
            hyper::header::SEC_WEBSOCKET_PROTOCOL,
            hyper::header::HeaderValue::from_static("bearer"),
        );
    }
    h.insert(
        hyper::header::UPGRADE,
        hyper::header::HeaderValue::from_static("websocket"),
    );
    h.insert(
        hyper::header::CONNECTION,
        hyper::header::HeaderValue::from_static("Upgrade"),
    );
    h.insert(
        hyper::header::SEC_WEBSOCKET_ACCEPT,
        derive_accept_key(key.as_bytes()).parse().ok()?,
    );
    Some(r)
}

async fn handle(inner: Arc<Inner>, mut req: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let token = bearer(&req);
    match (method.as_str(), path.as_str()) {
        ("GET", "/cli") => {
            let login = {
                let mut s = inner.state.lock().expect("lock");
                s.cli_attempts += 1;
                token
                    .as_ref()
                    .filter(|t| !s.revoked.contains(*t))
                    .and_then(|t| s.tokens.get(t).cloned())
            };
            inner.changes.send_modify(|n| *n += 1);
            let (Some(login), Some(token)) = (login, token) else {
                return unauthorized();
            };
            accept(&mut req, move |ws| cli_socket(inner, ws, token, login))
        }
        ("GET", "/channel") => {
            if token.as_deref() != Some(inner.cfg.channel_token.as_str()) {
                return unauthorized();
            }
            accept(&mut req, move |ws| channel_socket(inner, ws))
        }
        ("POST", "/api/channel/event") => {
            if token.as_deref() != Some(inner.cfg.channel_token.as_str()) {
                return unauthorized();
            }
            let body = match Limited::new(req.into_body(), 1024 * 1024).collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => {
                    return respond(
                        StatusCode::BAD_REQUEST,
                        json!({"ok": false, "code": "bad_body"}),
                    )
                }
            };
            let Ok(v) = serde_json::from_slice::<Value>(&body) else {
                return respond(
                    StatusCode::BAD_REQUEST,
                    json!({"ok": false, "code": "invalid_json"}),
                );
            };
            let (Some(kind), Some(ty)) = (v["kind"].as_str(), v["type"].as_str()) else {
                return respond(
                    StatusCode::BAD_REQUEST,
                    json!({"ok": false, "code": "invalid_event"}),
                );
            };
            let ts = v["ts"].as_str().map(str::to_string).unwrap_or_else(now_ts);
            let frame = json!({"type": "event", "sessionId": inner.cfg.session_id,
                "event": {"kind": kind, "type": ty, "payload": v["payload"].clone(), "ts": ts}});
            let mut s = inner.state.lock().expect("lock");
            s.record_event(&frame, inner.cfg.replay);
            s.broadcast(&frame);
            respond(StatusCode::OK, json!({"ok": true}))
        }
        ("GET", "/api/v1/sessions") | ("GET", "/api/v1/me") => {
            let s = inner.state.lock().expect("lock");
            let login = token
                .as_ref()
                .filter(|t| !s.revoked.contains(*t))
                .and_then(|t| s.tokens.get(t).cloned());
            let Some(login) = login else {
                return unauthorized();
            };
            if path == "/api/v1/me" {
                respond(StatusCode::OK, json!({"login": login, "name": login}))
            } else {
                respond(
                    StatusCode::OK,
                    Value::Array(
                        std::iter::once(json!({"id": inner.cfg.session_id,
                            "routingName": "@fake", "cwd": "~/project", "host": "fakehost",
                            "online": s.channel_connected()}))
                        .chain(inner.cfg.side_sessions.iter().map(|id| {
                            json!({"id": id,
                            "routingName": "@side", "cwd": "~/notes", "host": "fakehost",
                            "online": true})
                        }))
                        .collect(),
                    ),
                )
            }
        }
        _ => respond(
            StatusCode::NOT_FOUND,
            json!({"ok": false, "code": "not_found"}),
        ),
    }
}

type ServerWs = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

async fn cli_socket(inner: Arc<Inner>, mut ws: ServerWs, token: String, login: String) {
    let id = inner.ids.fetch_add(1, Ordering::SeqCst);
    let (tx, mut rx) = mpsc::unbounded_channel();
    let (freeze, mut frozen) = watch::channel(false);
    let mut kill = inner.kill.subscribe();
    {
        let mut s = inner.state.lock().expect("lock");
        s.cli_upgrades += 1;
        s.clis.insert(
            id,
            Cli {
                tx: tx.clone(),
                token,
                login: login.clone(),
                subscribed: false,
                session: String::new(),
                freeze,
            },
        );
    }
    inner.changes.send_modify(|n| *n += 1);
    loop {
        if *frozen.borrow() {
            // Half-dead: read nothing, write nothing, until the fake restarts or ends.
            let _ = kill.changed().await;
            break;
        }
        tokio::select! {
            _ = kill.changed() => break,
            _ = frozen.changed() => continue,
            m = ws.next() => match m {
                Some(Ok(Message::Text(t))) => on_cli_frame(&inner, id, &login, &tx, t.as_str()),
                Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                Some(Ok(_)) => {}
            },
            out = rx.recv() => match out {
                Some(m) => {
                    if ws.send(m).await.is_err() {
                        break;
                    }
                }
                None => break,
            },
        }
    }
    let mut s = inner.state.lock().expect("lock");
    if let Some(c) = s.clis.remove(&id) {
        if c.subscribed {
            let v = s.presence(&inner.cfg.session_id, None, Some(&login));
            s.broadcast(&v);
        }
    }
    drop(s);
    inner.changes.send_modify(|n| *n += 1);
}

fn on_cli_frame(
    inner: &Inner,
    id: u64,
    login: &str,
    tx: &mpsc::UnboundedSender<Message>,
    raw: &str,
) {
    let sid = inner.cfg.session_id.as_str();
    let err = |code: &str, message: &str| {
        let _ = tx.send(text(
            &json!({"type": "error", "ok": false, "code": code, "message": message}),
        ));
    };
    let Ok(v) = serde_json::from_str::<Value>(raw) else {
        err("invalid_json", "the frame is not JSON");
        return;
    };
    let mut s = inner.state.lock().expect("lock");
    s.cli_frames.push(v.clone());
    match v["type"].as_str().unwrap_or_default() {
        "subscribe" => {
            let want = v["sessionId"].as_str().unwrap_or_default();
            if inner.cfg.side_sessions.iter().any(|x| x == want) {
                if let Some(c) = s.clis.get_mut(&id) {
                    c.subscribed = true;
                    c.session = want.to_string();
                }
                let _ = tx.send(text(
                    &json!({"type": "subscribed", "sessionId": want, "role": inner.cfg.role}),
                ));
                let _ = tx.send(text(&json!({"type": "channel_status", "sessionId": want,
                    "connected": true, "ts": now_ts()})));
            } else if want != sid {
                err("not_found", "no such session");
            } else {
                if let Some(c) = s.clis.get_mut(&id) {
                    c.subscribed = true;
                    c.session = sid.to_string();
                }
                let _ = tx.send(text(
                    &json!({"type": "subscribed", "sessionId": sid, "role": inner.cfg.role}),
                ));
                let p = s.presence(sid, Some(login), None);
                s.broadcast(&p);
                if inner.cfg.announce_channel {
                    let _ = tx.send(text(&s.channel_status(sid)));
                }
                for e in &s.history {
                    let _ = tx.send(text(e));
                }
                for (_, p) in s.pending.iter().filter(|(_, p)| p["sessionId"] == sid) {
                    let _ = tx.send(text(p));
                }
            }
        }
        "unsubscribe" => {
            if let Some(c) = s.clis.get_mut(&id) {
                c.subscribed = false;
            }
        }
        "prompt" => {
            let Some(t) = v["text"].as_str() else {
                drop(s);
                err("invalid_frame", "prompt needs text");
                return;
            };
            s.next_chat += 1;
            let chat = format!("chat-{}", s.next_chat);
            if s.clis.get(&id).is_some_and(|c| c.session != sid) {
                // A side session: acknowledged, no echo, no channel.
                let _ = tx.send(text(&json!({"type": "ack", "ok": true, "chatId": chat})));
                return;
            }
            // The echo goes out first (the hub stores and broadcasts, then acknowledges).
            let echo = json!({"type": "event", "sessionId": sid, "event": {"kind": "chat",
                "type": "prompt", "payload": {"text": t, "chatId": chat, "authorLogin": login},
                "ts": now_ts()}});
            s.record_event(&echo, inner.cfg.replay);
            s.broadcast(&echo);
            match s.prompt_ack {
                PromptAck::WithChatId => {
                    let _ = tx.send(text(&json!({"type": "ack", "ok": true, "chatId": chat})));
                }
                PromptAck::WithoutChatId => {
                    let _ = tx.send(text(&json!({"type": "ack", "ok": true})));
                }
                PromptAck::Never => {}
            }
            if let Some((_, ch)) = &s.channel {
                let _ = ch.send(text(&json!({"type": "prompt", "chatId": chat, "text": t})));
            }
        }
        "approval" => {
            let rid = v["requestId"].as_str().unwrap_or_default().to_string();
            let decision = v["decision"].as_str().unwrap_or_default().to_string();
            if decision != "allow" && decision != "deny" {
                drop(s);
                err("invalid_frame", "decision must be allow or deny");
            } else if s.resolve(sid, &rid, &decision, Some(login)) {
                let _ = tx.send(text(&json!({"type": "ack", "ok": true})));
            } else {
                drop(s);
                err("already_resolved", "that permission request is not pending");
            }
        }
        "op_message" => {
            let m = json!({"type": "op_message", "sessionId": sid, "authorLogin": login,
                "text": v["text"], "mentions": [], "ts": now_ts()});
            s.broadcast(&m);
            let _ = tx.send(text(&json!({"type": "ack", "ok": true})));
        }
        other => {
            let msg = format!("unknown frame type {other}");
            drop(s);
            err("unknown_type", &msg);
        }
    }
    inner.changes.send_modify(|n| *n += 1);
}

async fn channel_socket(inner: Arc<Inner>, mut ws: ServerWs) {
    let id = inner.ids.fetch_add(1, Ordering::SeqCst);
    let (tx, mut rx) = mpsc::unbounded_channel::<Message>();
    let mut kill = inner.kill.subscribe();
    let sid = inner.cfg.session_id.clone();
    loop {
        tokio::select! {
            _ = kill.changed() => break,
            out = rx.recv() => match out {
                Some(m) => if ws.send(m).await.is_err() { break },
                None => break,
            },
            m = ws.next() => {
                let raw = match m {
                    Some(Ok(Message::Text(t))) => t.to_string(),
                    Some(Ok(Message::Close(_))) | None | Some(Err(_)) => break,
                    Some(Ok(_)) => continue,
                };
                let Ok(v) = serde_json::from_str::<Value>(&raw) else {
                    let _ = tx.send(text(&json!({"type": "error", "code": "invalid_json", "message": "not JSON"})));
                    continue;
                };
                let mut s = inner.state.lock().expect("lock");
                s.channel_frames.push(v.clone());
                let ts = v["ts"].as_str().map(str::to_string).unwrap_or_else(now_ts);
                match v["type"].as_str().unwrap_or_default() {
                    "register" => {
                        s.channel = Some((id, tx.clone()));
                        let _ = tx.send(text(&json!({"type": "welcome", "sessionId": sid,
                            "routingName": "@fake", "channelTokenName": "fake channel token"})));
                        let st = s.channel_status(&sid);
                        s.broadcast(&st);
                    }
                    "chat_event" => {
                        let p = v["payload"].clone();
                        match v["eventType"].as_str().unwrap_or_default() {
                            "reply_chunk" => {
                                let c = json!({"type": "chat_reply_chunk", "sessionId": sid,
                                    "chatId": p["chatId"], "text": p["text"],
                                    "done": p["done"].as_bool().unwrap_or(false)});
                                s.broadcast(&c);
                            }
                            et => {
                                let e = json!({"type": "event", "sessionId": sid, "event":
                                    {"kind": "chat", "type": et, "payload": p, "ts": ts}});
                                s.record_event(&e, inner.cfg.replay);
                                s.broadcast(&e);
                            }
                        }
                    }
                    "tail_event" => {
                        let e = json!({"type": "event", "sessionId": sid, "event": {"kind": "tail",
                            "type": v["eventType"], "payload": v["payload"], "ts": ts}});
                        s.record_event(&e, inner.cfg.replay);
                        s.broadcast(&e);
                    }
                    "permission_request" => {
                        let rid = v["requestId"].as_str().unwrap_or_default().to_string();
                        let p = json!({"type": "permission_request", "sessionId": sid,
                            "requestId": rid, "tool": v["tool"], "inputPreview": v["inputPreview"],
                            "ts": ts});
                        s.pending.push((rid, p.clone()));
                        s.broadcast(&p);
                    }
                    "pong" => {}
                    other => {
                        let _ = tx.send(text(&json!({"type": "error", "code": "unknown_type",
                            "message": format!("unknown frame type {other}")})));
                    }
                }
                drop(s);
                inner.changes.send_modify(|n| *n += 1);
            }
        }
    }
    let mut s = inner.state.lock().expect("lock");
    if s.channel.as_ref().is_some_and(|(c, _)| *c == id) {
        s.channel = None;
        let st = s.channel_status(&sid);
        s.broadcast(&st);
    }
    drop(s);
    inner.changes.send_modify(|n| *n += 1);
}
