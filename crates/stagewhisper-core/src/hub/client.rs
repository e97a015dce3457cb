//! The operator client of a clawborrator hub: one `/cli` WebSocket, kept attached to one session.
//!
//! What it does on top of the frames ([`super::frames`]):
//! - `subscribe` on every open; the status is `online` only once subscribed **and** the Claude
//!   Code session's channel is connected (`offline: Claude Code session is not connected`
//!   otherwise);
//! - reconnects with a capped backoff (1, 2, 5, 15, 30, 60 s by default), reset once a socket got
//!   as far as `subscribed`; a 401/403 on the upgrade, close code 1008 and an `error` frame with
//!   `auth_failed` / `token_revoked` are final (status `auth_failed`, no retry until the settings
//!   change);
//! - a liveness timer: it pings a quiet socket and treats a socket that has been silent for
//!   [`HubTiming::liveness`] as dead;
//! - writes (prompts, approvals, op messages) made while the socket is down or not yet
//!   subscribed are queued and sent once, in order, after `subscribed`;
//! - events replayed after a re-subscribe are dropped (events carry no id in the seed: they are
//!   keyed by kind, type, timestamp and payload), permission requests and resolutions are
//!   surfaced once per request id, and the hub's echo of our own prompt is not surfaced;
//! - correlation: the hub acknowledges writes in order, and a prompt's `ack` carries the
//!   `chatId` its replies will name ([`HubEvent::Acked`]).
//!
//! The session token is only ever put in the `Authorization` header (marked sensitive); it is
//! never logged and its `Debug` is redacted.

use super::frames::{
    parse_hub_frame, ChatType, ClientFrame, Decision, EventClass, HubFrame, Resolution, Role,
    TailHook,
};
use crate::backoff::Backoff;
use crate::http::Shutdown;
use crate::net::connect::{self, Io};
use crate::tunnel::net::{self, Failure};
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::{BodyExt, Empty, Limited};
use hyper::header::HeaderValue;
use hyper::StatusCode;
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::Role as WsRole;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::WebSocketStream;

/// The status detail while subscribed but the Claude Code session is offline.
pub const CHANNEL_OFFLINE: &str = "Claude Code session is not connected";

/// The reconnect delays of the public clients, in seconds (the last one repeats).
pub const DEFAULT_BACKOFF_SECS: [u64; 6] = [1, 2, 5, 15, 30, 60];

/// Writes kept while the socket is down; past this a write is refused with `queue_full`.
pub const MAX_QUEUED: usize = 256;

/// Remembered replayable items (event keys, request ids, own prompts, settled replies).
const MEMORY: usize = 4096;

/// Largest REST answer read.
const MAX_REST_BYTES: usize = 1024 * 1024;

/// A `cw_sess_…` session token. Its `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct Token(String);

impl Token {
    pub fn new(token: impl Into<String>) -> Token {
        Token(token.into().trim().to_string())
    }

    /// The token itself, for the `Authorization` header only.
    pub fn expose(&self) -> &str {
        &self.0
    }

    fn header(&self) -> Result<HeaderValue, HubError> {
        let mut v = HeaderValue::from_str(&format!("Bearer {}", self.0))
            .map_err(|_| HubError::InvalidToken)?;
        v.set_sensitive(true);
        Ok(v)
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// Timings; the defaults are the public clients' (tests shorten them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubTiming {
    /// Delays before reconnect attempts (steps by default; the last one repeats).
    pub backoff: Backoff,
    /// A socket that has delivered nothing (not even a pong) for this long is dead. A quiet
    /// socket is pinged every third of it.
    pub liveness: Duration,
    /// For resolve + connect + TLS + upgrade, and for a REST request.
    pub connect_timeout: Duration,
    /// After `subscribed`, how long to wait for the hub's `channel_status` before reporting
    /// the Claude Code session as not connected (the status stays `connecting` until then).
    pub channel_grace: Duration,
}

impl Default for HubTiming {
    fn default() -> Self {
        HubTiming {
            backoff: Backoff::Steps(DEFAULT_BACKOFF_SECS.map(Duration::from_secs).to_vec()),
            liveness: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(10),
            channel_grace: Duration::from_secs(3),
        }
    }
}

/// What the client needs to attach.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubSettings {
    /// `https://hub.example` (or `http://127.0.0.1:8787` on this computer).
    pub hub_url: String,
    pub session_token: Token,
    /// The Claude Code session to attach to.
    pub session_id: String,
    pub timing: HubTiming,
    /// Events stamped at or before this are taken as already shown (the hub replays recent
    /// history on every subscribe, also to a client that has just started). Use a time the hub
    /// gave, [`HubHandle::newest_event_ts`] of the previous run, not this computer's clock.
    /// `None`: surface everything the hub sends. Pending permission requests always surface.
    pub replay_cutoff: Option<chrono::DateTime<chrono::Utc>>,
}

impl HubSettings {
    pub fn new(hub_url: impl Into<String>, token: Token, session_id: impl Into<String>) -> Self {
        HubSettings {
            hub_url: hub_url.into(),
            session_token: token,
            session_id: session_id.into(),
            timing: HubTiming::default(),
            replay_cutoff: None,
        }
    }

    /// Checks everything that can be checked without the network.
    pub fn validate(&self) -> Result<HubUrl, HubError> {
        let url = HubUrl::parse(&self.hub_url)?;
        if self.session_token.0.is_empty() {
            return Err(HubError::InvalidToken);
        }
        self.session_token.header()?;
        let id = self.session_id.trim();
        if id.is_empty() || id.chars().any(|c| c.is_control() || c.is_whitespace()) {
            return Err(HubError::InvalidSession);
        }
        Ok(url)
    }
}

/// A validated hub base URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubUrl {
    pub tls: bool,
    /// Host name or IP (IPv6 without brackets).
    pub host: String,
    pub port: u16,
    /// `host:port` (IPv6 in brackets).
    pub authority: String,
    /// Path prefix without a trailing `/`.
    pub prefix: String,
}

fn is_loopback_host(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<IpAddr>()
            .map(|ip| ip.is_loopback())
            .unwrap_or(false)
}

impl HubUrl {
    /// `http(s)://host[:port][/prefix]`; plain `http` only to this computer.
    pub fn parse(s: &str) -> Result<HubUrl, HubError> {
        let s = s.trim();
        let bad = |why: &str| HubError::InvalidUrl(format!("`{s}` {why}"));
        let u = url::Url::parse(s).map_err(|e| bad(&format!("is not a URL ({e})")))?;
        let tls = match u.scheme() {
            "https" => true,
            "http" => false,
            _ => {
                return Err(bad(
                    "must start with https:// (or http:// to this computer)",
                ))
            }
        };
        if !u.username().is_empty() || u.password().is_some() {
            return Err(bad("must not contain a user name or password"));
        }
        if u.query().is_some() || u.fragment().is_some() {
            return Err(bad("must not contain a query or a fragment"));
        }
        let host = match u.host() {
            Some(url::Host::Domain(d)) => d.to_ascii_lowercase(),
            Some(url::Host::Ipv4(a)) => a.to_string(),
            Some(url::Host::Ipv6(a)) => a.to_string(),
            None => return Err(bad("has no host")),
        };
        if !tls && !is_loopback_host(&host) {
            return Err(HubError::InsecureUrl(host));
        }
        let port = u
            .port_or_known_default()
            .ok_or_else(|| bad("has no port"))?;
        let authority = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        Ok(HubUrl {
            tls,
            host,
            port,
            authority,
            prefix: u.path().trim_end_matches('/').to_string(),
        })
    }

    /// The operator socket: `ws(s)://host:port[/prefix]/cli`.
    pub fn cli_url(&self) -> String {
        let scheme = if self.tls { "wss" } else { "ws" };
        format!("{scheme}://{}{}/cli", self.authority, self.prefix)
    }

    /// `http(s)://host:port[/prefix]{path}`.
    pub fn http_url(&self, path: &str) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}{}{path}", self.authority, self.prefix)
    }
}

/// Why something did not work, with a stable [`HubError::code`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HubError {
    #[error("the hub URL {0}")]
    InvalidUrl(String),
    #[error(
        "`{0}` is not this computer: plain http:// would send the session token across the \
         network in clear text; use https://"
    )]
    InsecureUrl(String),
    #[error("the session token is empty or has characters a header cannot carry")]
    InvalidToken,
    #[error("the session id is empty or has spaces")]
    InvalidSession,
    #[error("the hub refused the session token: {0}")]
    AuthFailed(String),
    #[error("{0}")]
    Network(Failure),
    #[error("the WebSocket upgrade failed: {0}")]
    Handshake(String),
    #[error("the hub answered HTTP {0}")]
    Status(u16),
    #[error("the hub's answer is not what was expected: {0}")]
    BadResponse(String),
    #[error("the request {0} is already resolved")]
    AlreadyResolved(String),
    #[error("{MAX_QUEUED} writes are already waiting for the hub")]
    QueueFull,
    #[error("the hub client has stopped")]
    Stopped,
}

impl HubError {
    pub fn code(&self) -> &'static str {
        match self {
            HubError::InvalidUrl(_) => "invalid_url",
            HubError::InsecureUrl(_) => "insecure_url",
            HubError::InvalidToken => "invalid_token",
            HubError::InvalidSession => "invalid_session",
            HubError::AuthFailed(_) => "auth_failed",
            HubError::Network(f) => f.code,
            HubError::Handshake(_) => "handshake_failed",
            HubError::Status(_) => "http_status",
            HubError::BadResponse(_) => "bad_response",
            HubError::AlreadyResolved(_) => "already_resolved",
            HubError::QueueFull => "queue_full",
            HubError::Stopped => "client_stopped",
        }
    }
}

/// The link's state, for the assistant status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HubStatus {
    /// Opening the socket (or waiting for `subscribed`).
    Connecting,
    /// Subscribed, and the Claude Code session is connected.
    Online,
    /// Not usable now; retried by itself. `reason` is a sentence ([`CHANNEL_OFFLINE`] when only
    /// the Claude Code session is missing).
    Offline { reason: String },
    /// The hub refused the token: no retry until the settings change.
    AuthFailed { message: String },
}

impl HubStatus {
    /// `connecting`, `online`, `offline`, `auth_failed`.
    pub fn code(&self) -> &'static str {
        match self {
            HubStatus::Connecting => "connecting",
            HubStatus::Online => "online",
            HubStatus::Offline { .. } => "offline",
            HubStatus::AuthFailed { .. } => "auth_failed",
        }
    }
}

impl std::fmt::Display for HubStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HubStatus::Connecting => f.write_str("connecting"),
            HubStatus::Online => f.write_str("online"),
            HubStatus::Offline { reason } => write!(f, "offline: {reason}"),
            HubStatus::AuthFailed { message } => write!(f, "auth_failed: {message}"),
        }
    }
}

/// What the client tells the app. Each reply, permission request and resolution comes once.
#[derive(Debug, Clone, PartialEq)]
pub enum HubEvent {
    /// Sent on every change.
    Status(HubStatus),
    /// Our role on the session, on every `subscribed`.
    Role(Role),
    /// The hub accepted prompt `local_id`; replies to it name `chat_id` (an older hub may not
    /// give one).
    Acked {
        local_id: i64,
        chat_id: Option<String>,
    },
    /// The socket closed after prompt `local_id` was written but before the hub acknowledged
    /// it: it may or may not have reached Claude, and it is not sent again.
    Unconfirmed { local_id: i64 },
    /// An assistant message. `final` is true for a reply (a `reply` event or a completed
    /// streamed reply) and false for interim `assistant_text`. `chat_id` is the `chatId` of the
    /// prompt it answers, when the hub says.
    Reply {
        chat_id: Option<String>,
        text: String,
        r#final: bool,
    },
    /// A streamed reply so far (the whole text, not a delta); a `Reply` with the same
    /// `chat_id` settles it.
    Draft { chat_id: String, text: String },
    /// A prompt that is not ours (another operator's, or typed in the terminal).
    Prompt {
        chat_id: Option<String>,
        text: String,
        author: Option<String>,
    },
    /// Claude is working (`tool`: the tool it is about to use, when known).
    Typing { tool: Option<String> },
    /// Claude's turn ended (`Stop`).
    Idle,
    /// A tool waits for an operator's decision ([`HubHandle::approve`]).
    Permission {
        request_id: String,
        tool: String,
        input_preview: String,
    },
    /// A permission request ended; `resolver` is who decided (`None` when it expired).
    PermissionResolved {
        request_id: String,
        decision: Resolution,
        resolver: Option<String>,
    },
    /// The operators attached to the session.
    Presence { attached: Vec<String> },
    /// The operators' lane.
    OpMessage { author: String, text: String },
    /// A hub `error` frame (or a `peer-timeout`); `local_id` when it answers one of our prompts.
    Error {
        code: String,
        message: String,
        local_id: Option<i64>,
    },
}

enum Command {
    Write(Outgoing),
    Settings(Box<HubSettings>, HubUrl),
    Reconnect,
}

#[derive(Debug, Clone)]
enum Outgoing {
    Prompt {
        local_id: i64,
        text: String,
        attachments: Option<Vec<u64>>,
    },
    Approval {
        request_id: String,
        session_id: Option<String>,
        decision: Decision,
    },
    OpMessage {
        text: String,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sent {
    Prompt(i64),
    Other,
}

#[derive(Debug, Default)]
struct Permissions {
    /// request id → (gate session, resolved)
    known: HashMap<String, (String, bool)>,
    order: VecDeque<String>,
}

impl Permissions {
    fn remember(&mut self, id: &str, session: String, resolved: bool) {
        if self
            .known
            .insert(id.to_string(), (session, resolved))
            .is_none()
        {
            self.order.push_back(id.to_string());
            while self.order.len() > MEMORY {
                if let Some(old) = self.order.pop_front() {
                    self.known.remove(&old);
                }
            }
        }
    }
}

/// The app's side of a running client.
#[derive(Clone)]
pub struct HubHandle {
    tx: mpsc::UnboundedSender<Command>,
    queued: Arc<std::sync::atomic::AtomicUsize>,
    permissions: Arc<Mutex<Permissions>>,
    newest: Arc<Mutex<Option<chrono::DateTime<chrono::Utc>>>>,
}

impl HubHandle {
    fn write(&self, w: Outgoing) -> Result<(), HubError> {
        use std::sync::atomic::Ordering;
        if self.queued.fetch_add(1, Ordering::SeqCst) >= MAX_QUEUED {
            self.queued.fetch_sub(1, Ordering::SeqCst);
            return Err(HubError::QueueFull);
        }
        self.tx.send(Command::Write(w)).map_err(|_| {
            self.queued.fetch_sub(1, Ordering::SeqCst);
            HubError::Stopped
        })
    }

    /// Sends a prompt; `local_id` (the app's message id) comes back in [`HubEvent::Acked`].
    pub fn prompt(&self, local_id: i64, text: impl Into<String>) -> Result<(), HubError> {
        self.prompt_with_attachments(local_id, text, None)
    }

    /// A prompt that refers to files uploaded to the session.
    pub fn prompt_with_attachments(
        &self,
        local_id: i64,
        text: impl Into<String>,
        attachments: Option<Vec<u64>>,
    ) -> Result<(), HubError> {
        self.write(Outgoing::Prompt {
            local_id,
            text: text.into(),
            attachments,
        })
    }

    /// Answers a permission request (to the gate's session). Refused once the request is
    /// known to be resolved.
    pub fn approve(&self, request_id: &str, allow: bool) -> Result<(), HubError> {
        let session_id = {
            let p = self.permissions.lock().expect("permissions lock");
            match p.known.get(request_id) {
                Some((_, true)) => return Err(HubError::AlreadyResolved(request_id.to_string())),
                Some((s, false)) if !s.is_empty() => Some(s.clone()),
                _ => None,
            }
        };
        self.write(Outgoing::Approval {
            request_id: request_id.to_string(),
            session_id,
            decision: if allow {
                Decision::Allow
            } else {
                Decision::Deny
            },
        })
    }

    /// The newest hub timestamp of the events seen so far: keep it, and hand it back as
    /// [`HubSettings::replay_cutoff`] next time so the hub's replay is not shown again.
    pub fn newest_event_ts(&self) -> Option<chrono::DateTime<chrono::Utc>> {
        *self.newest.lock().expect("newest lock")
    }

    /// A message on the operators' lane.
    pub fn op_message(&self, text: impl Into<String>) -> Result<(), HubError> {
        self.write(Outgoing::OpMessage { text: text.into() })
    }

    /// New settings: the socket is reopened with them (this also ends `auth_failed`).
    pub fn update_settings(&self, settings: HubSettings) -> Result<(), HubError> {
        let url = settings.validate()?;
        self.tx
            .send(Command::Settings(Box::new(settings), url))
            .map_err(|_| HubError::Stopped)
    }

    /// Reconnect now (skips a backoff delay; does not end `auth_failed`).
    pub fn reconnect(&self) -> Result<(), HubError> {
        self.tx
            .send(Command::Reconnect)
            .map_err(|_| HubError::Stopped)
    }
}

/// Starts operator clients.
pub struct HubClient;

impl HubClient {
    /// Validates `settings` and starts the client task; it runs until `shutdown` (or until the
    /// handle and the receiver are both dropped).
    pub fn start(
        settings: HubSettings,
        shutdown: Shutdown,
    ) -> Result<(HubHandle, mpsc::Receiver<HubEvent>), HubError> {
        let url = settings.validate()?;
        let (tx, cmds) = mpsc::unbounded_channel();
        let (events, rx) = mpsc::channel(256);
        let handle = HubHandle {
            tx,
            queued: Arc::default(),
            permissions: Arc::default(),
            newest: Arc::default(),
        };
        let worker = Worker {
            settings,
            url,
            events,
            cmds,
            shutdown,
            queued: handle.queued.clone(),
            permissions: handle.permissions.clone(),
            newest: handle.newest.clone(),
            queue: VecDeque::new(),
            in_flight: VecDeque::new(),
            own_prompts: VecDeque::new(),
            seen: Memory::default(),
            settled: Memory::default(),
            drafts: HashMap::new(),
            channel: None,
            cmds_open: true,
            subscribed: false,
            status: None,
            failures: 0,
        };
        tokio::spawn(worker.run());
        Ok((handle, rx))
    }
}

/// A bounded set that forgets its oldest keys.
#[derive(Default)]
struct Memory {
    set: HashSet<String>,
    order: VecDeque<String>,
}

impl Memory {
    /// `true` when `key` is new.
    fn insert(&mut self, key: String) -> bool {
        if !self.set.insert(key.clone()) {
            return false;
        }
        self.order.push_back(key);
        while self.order.len() > MEMORY {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        true
    }

    fn contains(&self, key: &str) -> bool {
        self.set.contains(key)
    }
}

struct OwnPrompt {
    local_id: i64,
    text: String,
    chat_id: Option<String>,
}

/// How a socket ended.
enum End {
    Shutdown,
    /// Try again after the backoff.
    Retry(String),
    /// Retry now (new settings, or asked to).
    Now,
    /// The hub refused us: no retry until the settings change.
    Final(String),
}

type Ws = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

struct Worker {
    settings: HubSettings,
    url: HubUrl,
    events: mpsc::Sender<HubEvent>,
    cmds: mpsc::UnboundedReceiver<Command>,
    shutdown: Shutdown,
    queued: Arc<std::sync::atomic::AtomicUsize>,
    permissions: Arc<Mutex<Permissions>>,
    newest: Arc<Mutex<Option<chrono::DateTime<chrono::Utc>>>>,
    /// Writes not yet on a socket.
    queue: VecDeque<Outgoing>,
    /// Writes on the socket that the hub has not acknowledged yet, oldest first.
    in_flight: VecDeque<Sent>,
    /// Prompts we sent, to recognise the hub's echo.
    own_prompts: VecDeque<OwnPrompt>,
    /// Keys of the events already surfaced.
    seen: Memory,
    /// `chatId` + text of replies already surfaced as final.
    settled: Memory,
    /// Streamed replies in progress.
    drafts: HashMap<String, String>,
    /// The Claude Code session's channel, as last reported.
    channel: Option<bool>,
    /// Whether a handle still exists.
    cmds_open: bool,
    subscribed: bool,
    status: Option<HubStatus>,
    /// Reconnects since the last subscription (or settings change).
    failures: u32,
}

impl Worker {
    async fn emit(&mut self, e: HubEvent) {
        if self.events.send(e).await.is_err() {
            tracing::debug!("hub client: nobody reads the events any more");
        }
    }

    async fn set_status(&mut self, s: HubStatus) {
        if self.status.as_ref() != Some(&s) {
            tracing::info!(session_id = %self.settings.session_id, status = %s, "hub link status");
            self.status = Some(s.clone());
            self.emit(HubEvent::Status(s)).await;
        }
    }

    /// After `subscribed`: online when the channel is connected, offline when it is not;
    /// still `connecting` while the hub has not said yet (see [`HubTiming::channel_grace`]).
    async fn subscribed_status(&mut self) {
        let s = match self.channel {
            Some(true) => HubStatus::Online,
            Some(false) => HubStatus::Offline {
                reason: CHANNEL_OFFLINE.to_string(),
            },
            None => return,
        };
        self.set_status(s).await;
    }

    fn stopped(&self) -> bool {
        self.shutdown.is_triggered() || (self.events.is_closed() && !self.cmds_open)
    }

    fn enqueue(&mut self, w: Outgoing) {
        self.queue.push_back(w);
    }

    /// Handles a command while no socket is subscribed. `Some` ends the wait.
    fn command_offline(&mut self, c: Option<Command>) -> Option<End> {
        match c {
            None => {
                if self.events.is_closed() {
                    Some(End::Shutdown)
                } else {
                    None
                }
            }
            Some(Command::Write(w)) => {
                self.enqueue(w);
                None
            }
            Some(Command::Settings(s, url)) => {
                self.apply_settings(*s, url);
                Some(End::Now)
            }
            Some(Command::Reconnect) => Some(End::Now),
        }
    }

    fn apply_settings(&mut self, s: HubSettings, url: HubUrl) {
        if s.session_id != self.settings.session_id {
            // Another session: what was remembered about the old one does not apply.
            self.seen = Memory::default();
            self.settled = Memory::default();
            self.drafts.clear();
            self.channel = None;
        }
        self.settings = s;
        self.url = url;
        self.failures = 0;
    }

    async fn run(mut self) {
        tracing::info!(session_id = %self.settings.session_id, url = %self.url.cli_url(), "hub client started");
        loop {
            if self.stopped() {
                break;
            }
            self.set_status(HubStatus::Connecting).await;
            let end = self.attach().await;
            self.subscribed = false;
            self.unconfirm_in_flight().await;
            match end {
                End::Shutdown => break,
                End::Now => continue,
                End::Final(message) => {
                    tracing::warn!(session_id = %self.settings.session_id, %message, "the hub refused the session token; not retrying until the settings change");
                    self.set_status(HubStatus::AuthFailed { message }).await;
                    // Only new settings (or the end) leave this state.
                    loop {
                        let c = tokio::select! {
                            _ = self.shutdown.wait() => break,
                            c = self.cmds.recv(), if self.cmds_open => c,
                        };
                        if c.is_none() {
                            self.cmds_open = false;
                            if self.events.is_closed() {
                                break;
                            }
                            continue;
                        }
                        match c {
                            Some(Command::Settings(s, url)) => {
                                self.apply_settings(*s, url);
                                break;
                            }
                            Some(Command::Write(w)) => self.enqueue(w),
                            _ => {}
                        }
                    }
                    if self.shutdown.is_triggered() || !self.cmds_open {
                        break;
                    }
                }
                End::Retry(reason) => {
                    self.failures = self.failures.saturating_add(1);
                    let delay = self.settings.timing.backoff.delay(self.failures);
                    tracing::info!(session_id = %self.settings.session_id, %reason, delay_ms = delay.as_millis() as u64, "hub link down; reconnecting");
                    self.set_status(HubStatus::Offline {
                        reason: format!("{reason}; reconnecting in {}", human(delay)),
                    })
                    .await;
                    let until = Instant::now() + delay;
                    loop {
                        let c = tokio::select! {
                            _ = self.shutdown.wait() => break,
                            _ = tokio::time::sleep_until(until) => break,
                            c = self.cmds.recv(), if self.cmds_open => c,
                        };
                        if c.is_none() {
                            self.cmds_open = false;
                        }
                        if let Some(End::Shutdown | End::Now) = self.command_offline(c) {
                            break;
                        }
                    }
                }
            }
        }
        tracing::info!(session_id = %self.settings.session_id, "hub client stopped");
    }

    /// Prompts written to a socket that closed before their `ack`.
    async fn unconfirm_in_flight(&mut self) {
        let lost: Vec<Sent> = self.in_flight.drain(..).collect();
        for s in lost {
            if let Sent::Prompt(local_id) = s {
                self.emit(HubEvent::Unconfirmed { local_id }).await;
            }
        }
    }

    /// One socket, from connect to its end.
    async fn attach(&mut self) -> End {
        let connect = connect_cli(
            self.url.clone(),
            self.settings.session_token.clone(),
            self.settings.timing.clone(),
        );
        tokio::pin!(connect);
        let ws = loop {
            tokio::select! {
                _ = self.shutdown.wait() => return End::Shutdown,
                r = &mut connect => match r {
                    Ok(ws) => break ws,
                    Err(HubError::AuthFailed(m)) => return End::Final(m),
                    Err(e) => return End::Retry(e.to_string()),
                },
                c = self.cmds.recv(), if self.cmds_open => {
                    if c.is_none() {
                        self.cmds_open = false;
                    }
                    if let Some(end) = self.command_offline(c) {
                        return end;
                    }
                }
            }
        };
        tracing::debug!(session_id = %self.settings.session_id, "hub socket open; subscribing");
        self.session(ws).await
    }

    async fn session(&mut self, ws: Ws) -> End {
        let (mut sink, mut stream) = ws.split();
        let subscribe = ClientFrame::Subscribe {
            session_id: self.settings.session_id.clone(),
        };
        if let Err(e) = sink.send(Message::text(subscribe.to_json())).await {
            return End::Retry(format!("the connection to the hub failed: {e}"));
        }
        let liveness = self.settings.timing.liveness.max(Duration::from_millis(30));
        let ping_every = liveness / 3;
        let mut last_rx = Instant::now();
        let mut pinged = false;
        // What the channel was on an earlier socket may no longer hold.
        self.channel = None;
        let mut subscribed_at: Option<Instant> = None;
        let mut grace_over = false;
        loop {
            let ping_at = last_rx + ping_every;
            let dead_at = last_rx + liveness;
            if self.subscribed && subscribed_at.is_none() {
                subscribed_at = Some(Instant::now());
            }
            let grace_at = subscribed_at.map(|t| t + self.settings.timing.channel_grace);
            let waiting_channel = self.subscribed && self.channel.is_none() && !grace_over;
            let end = tokio::select! {
                _ = self.shutdown.wait() => {
                    let _ = sink.send(Message::Close(None)).await;
                    return End::Shutdown;
                }
                m = stream.next() => {
                    last_rx = Instant::now();
                    pinged = false;
                    match m {
                        None => Some(End::Retry("the hub closed the connection".into())),
                        Some(Err(e)) => Some(End::Retry(format!("the connection to the hub failed: {e}"))),
                        Some(Ok(Message::Text(t))) => {
                            let end = self.on_text(t.as_str()).await;
                            // Time spent handing events to a slow reader is not silence.
                            last_rx = Instant::now();
                            end
                        }
                        Some(Ok(Message::Close(frame))) => Some(match frame {
                            Some(f) if f.code == CloseCode::Policy => End::Final(if f.reason.is_empty() {
                                "the hub closed the connection for a policy violation (1008)".to_string()
                            } else {
                                format!("{} (1008)", f.reason)
                            }),
                            Some(f) => End::Retry(format!("the hub closed the connection ({})", u16::from(f.code))),
                            None => End::Retry("the hub closed the connection".into()),
                        }),
                        Some(Ok(_)) => None,
                    }
                }
                c = self.cmds.recv(), if self.cmds_open => match c {
                    None => {
                        self.cmds_open = false;
                        if self.events.is_closed() { Some(End::Shutdown) } else { None }
                    }
                    Some(Command::Write(w)) => { self.enqueue(w); None }
                    Some(Command::Settings(s, url)) => { self.apply_settings(*s, url); Some(End::Now) }
                    Some(Command::Reconnect) => Some(End::Now),
                },
                _ = tokio::time::sleep_until(ping_at), if !pinged => {
                    pinged = true;
                    if let Err(e) = sink.send(Message::Ping(Bytes::new())).await {
                        Some(End::Retry(format!("the connection to the hub failed: {e}")))
                    } else {
                        None
                    }
                }
                _ = tokio::time::sleep_until(grace_at.unwrap_or(dead_at)), if waiting_channel => {
                    // The hub said nothing about the Claude Code session: not online.
                    grace_over = true;
                    self.set_status(HubStatus::Offline { reason: CHANNEL_OFFLINE.to_string() }).await;
                    None
                }
                _ = tokio::time::sleep_until(dead_at) => {
                    tracing::warn!(session_id = %self.settings.session_id, silent_ms = liveness.as_millis() as u64, "hub socket silent; treating it as dead");
                    Some(End::Retry(format!("no sign of life from the hub for {}", human(liveness))))
                }
            };
            if let Some(end) = end {
                if matches!(end, End::Now) {
                    let _ = sink.send(Message::Close(None)).await;
                }
                return end;
            }
            if self.subscribed {
                while let Some(w) = self.queue.pop_front() {
                    self.queued
                        .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
                    let frame = self.frame_of(&w);
                    match &w {
                        Outgoing::Prompt { local_id, text, .. } => {
                            self.in_flight.push_back(Sent::Prompt(*local_id));
                            self.own_prompts.push_back(OwnPrompt {
                                local_id: *local_id,
                                text: text.clone(),
                                chat_id: None,
                            });
                            while self.own_prompts.len() > MEMORY {
                                self.own_prompts.pop_front();
                            }
                        }
                        _ => self.in_flight.push_back(Sent::Other),
                    }
                    if let Err(e) = sink.send(Message::text(frame.to_json())).await {
                        return End::Retry(format!("the connection to the hub failed: {e}"));
                    }
                }
            }
        }
    }

    fn frame_of(&self, w: &Outgoing) -> ClientFrame {
        let session_id = self.settings.session_id.clone();
        match w {
            Outgoing::Prompt {
                text, attachments, ..
            } => ClientFrame::Prompt {
                session_id,
                text: text.clone(),
                attachments: attachments.clone(),
            },
            Outgoing::Approval {
                request_id,
                session_id: gate,
                decision,
            } => ClientFrame::Approval {
                session_id: gate.clone().unwrap_or(session_id),
                request_id: request_id.clone(),
                decision: *decision,
            },
            Outgoing::OpMessage { text } => ClientFrame::OpMessage {
                session_id,
                text: text.clone(),
            },
        }
    }

    /// One text frame. `Some` ends the socket.
    async fn on_text(&mut self, text: &str) -> Option<End> {
        let frame = match parse_hub_frame(text) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(code = e.code(), error = %e, "unreadable hub frame skipped");
                return None;
            }
        };
        match frame {
            HubFrame::Subscribed { role, .. } => {
                self.subscribed = true;
                self.failures = 0;
                tracing::info!(session_id = %self.settings.session_id, role = role.as_str(), "subscribed");
                self.emit(HubEvent::Role(role)).await;
                self.subscribed_status().await;
            }
            HubFrame::Ack { chat_id } => self.on_ack(chat_id).await,
            HubFrame::Event { event, .. } => {
                if !self.seen.insert(event.content_key()) {
                    tracing::debug!(kind = %event.kind, ty = %event.ty, "replayed event dropped");
                    return None;
                }
                let ts = chrono::DateTime::parse_from_rfc3339(&event.ts)
                    .ok()
                    .map(|t| t.with_timezone(&chrono::Utc));
                if let Some(ts) = ts {
                    let mut n = self.newest.lock().expect("newest lock");
                    if n.is_none_or(|n| ts > n) {
                        *n = Some(ts);
                    }
                }
                if let (Some(cutoff), Some(ts)) = (self.settings.replay_cutoff, ts) {
                    if ts <= cutoff {
                        tracing::debug!(kind = %event.kind, ty = %event.ty, "event from before the cutoff dropped");
                        return None;
                    }
                }
                match &event.class {
                    EventClass::Chat(ChatType::Prompt) => {
                        let chat_id = event.chat_id().map(str::to_string);
                        let text = event.text().unwrap_or_default().to_string();
                        if self.is_own_echo(chat_id.as_deref(), &text) {
                            tracing::debug!("echo of our own prompt dropped");
                        } else {
                            let author = event.author().map(str::to_string);
                            self.emit(HubEvent::Prompt {
                                chat_id,
                                text,
                                author,
                            })
                            .await;
                        }
                    }
                    EventClass::Chat(ChatType::AssistantText) => {
                        let text = event.text().unwrap_or_default().to_string();
                        if !text.is_empty() {
                            self.emit(HubEvent::Reply {
                                chat_id: event.chat_id().map(str::to_string),
                                text,
                                r#final: false,
                            })
                            .await;
                        }
                    }
                    EventClass::Chat(ChatType::Reply) => {
                        let chat_id = event.chat_id().map(str::to_string);
                        let text = event.text().unwrap_or_default().to_string();
                        self.final_reply(chat_id, text).await;
                    }
                    EventClass::Chat(ChatType::PeerTimeout) => {
                        let message = event
                            .text()
                            .map(str::to_string)
                            .unwrap_or_else(|| "a peer session did not answer in time".into());
                        self.emit(HubEvent::Error {
                            code: "peer_timeout".into(),
                            message,
                            local_id: None,
                        })
                        .await;
                    }
                    EventClass::Tail(TailHook::PreToolUse) => {
                        let tool = event.tool().map(str::to_string);
                        self.emit(HubEvent::Typing { tool }).await;
                    }
                    EventClass::Tail(
                        TailHook::PostToolUse | TailHook::UserPromptSubmit | TailHook::SubagentStop,
                    ) => self.emit(HubEvent::Typing { tool: None }).await,
                    EventClass::Tail(TailHook::Stop) => self.emit(HubEvent::Idle).await,
                    other => tracing::debug!(?other, "hub event ignored"),
                }
            }
            HubFrame::ChatReplyChunk {
                chat_id,
                text,
                done,
                ..
            } => {
                let acc = self.drafts.entry(chat_id.clone()).or_default();
                acc.push_str(&text);
                if done {
                    let text = self.drafts.remove(&chat_id).unwrap_or_default();
                    self.final_reply(Some(chat_id), text).await;
                } else {
                    let text = acc.clone();
                    self.emit(HubEvent::Draft { chat_id, text }).await;
                }
            }
            HubFrame::PermissionRequest {
                session_id,
                request_id,
                tool,
                input_preview,
                ..
            } => {
                let new = {
                    let mut p = self.permissions.lock().expect("permissions lock");
                    if p.known.contains_key(&request_id) {
                        false
                    } else {
                        p.remember(&request_id, session_id, false);
                        true
                    }
                };
                if new {
                    tracing::info!(%request_id, %tool, "permission requested");
                    self.emit(HubEvent::Permission {
                        request_id,
                        tool,
                        input_preview,
                    })
                    .await;
                }
            }
            HubFrame::PermissionResolved {
                session_id,
                request_id,
                decision,
                resolver_login,
            } => {
                let new = {
                    let mut p = self.permissions.lock().expect("permissions lock");
                    match p.known.get_mut(&request_id) {
                        Some((_, true)) => false,
                        Some((_, resolved)) => {
                            *resolved = true;
                            true
                        }
                        None => {
                            p.remember(&request_id, session_id, true);
                            true
                        }
                    }
                };
                if new {
                    tracing::info!(%request_id, decision = decision.as_str(), "permission resolved");
                    self.emit(HubEvent::PermissionResolved {
                        request_id,
                        decision,
                        resolver: resolver_login,
                    })
                    .await;
                }
            }
            HubFrame::Presence { attached, .. } => self.emit(HubEvent::Presence { attached }).await,
            HubFrame::ChannelStatus { connected, .. } => {
                self.channel = Some(connected);
                if self.subscribed {
                    self.subscribed_status().await;
                }
            }
            HubFrame::OpMessage {
                author_login, text, ..
            } => {
                self.emit(HubEvent::OpMessage {
                    author: author_login,
                    text,
                })
                .await
            }
            HubFrame::FileEvent { action, .. } => tracing::debug!(%action, "file event ignored"),
            HubFrame::Error { code, message } => {
                if code == "auth_failed" || code == "token_revoked" {
                    return Some(End::Final(format!("{message} ({code})")));
                }
                let local_id = match self.in_flight.pop_front() {
                    Some(Sent::Prompt(id)) => {
                        self.own_prompts.retain(|p| p.local_id != id);
                        Some(id)
                    }
                    _ => None,
                };
                tracing::warn!(%code, %message, "hub error");
                self.emit(HubEvent::Error {
                    code,
                    message,
                    local_id,
                })
                .await;
            }
            HubFrame::Unknown { frame_type } => {
                tracing::debug!(%frame_type, "unknown hub frame ignored")
            }
        }
        None
    }

    /// Acks come in the order of our writes. One with a `chatId` answers the oldest prompt
    /// still waiting (writes before it were not acknowledged by this hub); one without answers
    /// the oldest write of any kind.
    async fn on_ack(&mut self, chat_id: Option<String>) {
        let local_id = if chat_id.is_some() {
            match self
                .in_flight
                .iter()
                .position(|s| matches!(s, Sent::Prompt(_)))
            {
                Some(i) => {
                    let s = self.in_flight.drain(..=i).next_back();
                    match s {
                        Some(Sent::Prompt(id)) => Some(id),
                        _ => None,
                    }
                }
                None => None,
            }
        } else {
            match self.in_flight.pop_front() {
                Some(Sent::Prompt(id)) => Some(id),
                _ => None,
            }
        };
        let Some(local_id) = local_id else {
            tracing::debug!("ack for no write of ours");
            return;
        };
        if let Some(p) = self.own_prompts.iter_mut().find(|p| p.local_id == local_id) {
            p.chat_id = chat_id.clone();
        }
        self.emit(HubEvent::Acked { local_id, chat_id }).await;
    }

    /// Whether a `chat`/`prompt` event is the hub's echo of a prompt we sent (matched by its
    /// `chatId` once acknowledged, else by its text); a match is consumed.
    fn is_own_echo(&mut self, chat_id: Option<&str>, text: &str) -> bool {
        let by_id = chat_id.and_then(|c| {
            self.own_prompts
                .iter()
                .position(|p| p.chat_id.as_deref() == Some(c))
        });
        let i = by_id.or_else(|| {
            self.own_prompts.iter().position(|p| {
                p.text == text
                    && match (chat_id, p.chat_id.as_deref()) {
                        (Some(a), Some(b)) => a == b,
                        _ => true,
                    }
            })
        });
        match i {
            Some(i) => {
                self.own_prompts.remove(i);
                true
            }
            None => false,
        }
    }

    /// A settled reply, once per `chatId` + text (a streamed reply and the `reply` event the
    /// hub may also send for it are the same message).
    async fn final_reply(&mut self, chat_id: Option<String>, text: String) {
        if let Some(c) = &chat_id {
            self.drafts.remove(c);
            let key = format!("{c}\u{1f}{text}");
            if self.settled.contains(&key) {
                tracing::debug!(chat_id = %c, "reply already shown");
                return;
            }
            self.settled.insert(key);
        }
        self.emit(HubEvent::Reply {
            chat_id,
            text,
            r#final: true,
        })
        .await;
    }
}

fn human(d: Duration) -> String {
    if d >= Duration::from_secs(1) && d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// TCP (+ TLS for `https`), each step bounded by `timeout`.
async fn open_stream(url: &HubUrl, timeout: Duration) -> Result<Box<dyn Io>, HubError> {
    connect::open(&url.host, url.port, url.tls, timeout)
        .await
        .map_err(|e| {
            HubError::Network(net::failure(
                e,
                &net::Peer {
                    host: &url.host,
                    display: &url.authority,
                    what: "the hub",
                    hint: "Check the hub URL.",
                },
            ))
        })
}

/// Opens `/cli` with the bearer token on the upgrade. The upgrade is made with hyper, not by
/// the WebSocket library, whose trace log prints the whole request (the token included).
async fn connect_cli(url: HubUrl, token: Token, timing: HubTiming) -> Result<Ws, HubError> {
    use hyper::header::{
        AUTHORIZATION, CONNECTION, HOST, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY,
        SEC_WEBSOCKET_VERSION, UPGRADE,
    };
    let auth = token.header()?;
    let stream = open_stream(&url, timing.connect_timeout).await?;
    let upgrade = async {
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| HubError::Handshake(e.to_string()))?;
        tokio::spawn(async move {
            if let Err(e) = conn.with_upgrades().await {
                tracing::debug!(error = %e, "hub upgrade connection ended with an error");
            }
        });
        let key = tungstenite::handshake::client::generate_key();
        let req = hyper::Request::get(format!("{}/cli", url.prefix))
            .header(HOST, url.authority.as_str())
            .header(UPGRADE, "websocket")
            .header(CONNECTION, "Upgrade")
            .header(SEC_WEBSOCKET_VERSION, "13")
            .header(SEC_WEBSOCKET_KEY, key.as_str())
            .header(AUTHORIZATION, auth)
            .body(Empty::<Bytes>::new())
            .map_err(|e| HubError::InvalidUrl(e.to_string()))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| HubError::Handshake(e.to_string()))?;
        let status = resp.status();
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(HubError::AuthFailed(format!(
                "the upgrade was refused with HTTP {}",
                status.as_u16()
            )));
        }
        if status != StatusCode::SWITCHING_PROTOCOLS {
            return Err(HubError::Handshake(format!(
                "the hub answered HTTP {} instead of switching to WebSocket",
                status.as_u16()
            )));
        }
        let accept = derive_accept_key(key.as_bytes());
        let accepted = resp
            .headers()
            .get(SEC_WEBSOCKET_ACCEPT)
            .is_some_and(|v| v.as_bytes() == accept.as_bytes());
        if !accepted {
            return Err(HubError::Handshake(
                "the hub's Sec-WebSocket-Accept does not match".into(),
            ));
        }
        let upgraded = hyper::upgrade::on(resp)
            .await
            .map_err(|e| HubError::Handshake(e.to_string()))?;
        Ok(WebSocketStream::from_raw_socket(TokioIo::new(upgraded), WsRole::Client, None).await)
    };
    match tokio::time::timeout(timing.connect_timeout, upgrade).await {
        Err(_) => Err(HubError::Network(Failure::new(
            "timeout",
            format!(
                "the hub did not answer the WebSocket upgrade within {}",
                human(timing.connect_timeout)
            ),
        ))),
        Ok(r) => r,
    }
}

/// A session for a picker (`GET /api/v1/sessions`). Fields the hub does not give are `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubSession {
    pub id: String,
    pub routing_name: Option<String>,
    pub cwd: Option<String>,
    pub host: Option<String>,
    /// Whether its Claude Code channel is connected, when the hub says.
    pub online: Option<bool>,
}

/// Who the token belongs to (`GET /api/v1/me`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubMe {
    pub login: String,
    pub name: Option<String>,
}

fn str_field(v: &Value, keys: &[&str]) -> Option<String> {
    keys.iter()
        .find_map(|k| v.get(*k).and_then(Value::as_str))
        .map(str::to_string)
}

/// Reads the sessions list: an array, or an object holding it under `sessions`/`data`/`items`.
pub fn parse_sessions(v: &Value) -> Result<Vec<HubSession>, HubError> {
    let list = v
        .as_array()
        .or_else(|| {
            ["sessions", "data", "items"]
                .iter()
                .find_map(|k| v.get(*k).and_then(Value::as_array))
        })
        .ok_or_else(|| HubError::BadResponse("no list of sessions".into()))?;
    Ok(list
        .iter()
        .filter_map(|s| {
            Some(HubSession {
                id: str_field(s, &["id", "sessionId"])?,
                routing_name: str_field(s, &["routingName", "name"]),
                cwd: str_field(s, &["cwd"]),
                host: str_field(s, &["host"]),
                online: ["online", "connected", "channelConnected"]
                    .iter()
                    .find_map(|k| s.get(*k).and_then(Value::as_bool)),
            })
        })
        .collect())
}

/// Reads `/api/v1/me` (`login` at the top or under `user`).
pub fn parse_me(v: &Value) -> Result<HubMe, HubError> {
    let u = v.get("user").filter(|u| u.is_object()).unwrap_or(v);
    let login = str_field(u, &["login", "githubLogin"])
        .ok_or_else(|| HubError::BadResponse("no login".into()))?;
    Ok(HubMe {
        login,
        name: str_field(u, &["name"]),
    })
}

/// `GET {path}` on the hub with the bearer token; the body as JSON.
async fn get_json(
    url: &HubUrl,
    token: &Token,
    path: &str,
    timeout: Duration,
) -> Result<Value, HubError> {
    let auth = token.header()?;
    let fut = async {
        let stream = open_stream(url, timeout).await?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| HubError::Handshake(e.to_string()))?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "hub REST connection ended with an error");
            }
        });
        let req = hyper::Request::get(format!("{}{path}", url.prefix))
            .header(hyper::header::HOST, url.authority.as_str())
            .header(hyper::header::ACCEPT, "application/json")
            .header(hyper::header::AUTHORIZATION, auth)
            .body(Empty::<Bytes>::new())
            .map_err(|e| HubError::InvalidUrl(e.to_string()))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| HubError::BadResponse(e.to_string()))?;
        let status = resp.status().as_u16();
        let body = Limited::new(resp.into_body(), MAX_REST_BYTES)
            .collect()
            .await
            .map_err(|e| HubError::BadResponse(e.to_string()))?
            .to_bytes();
        if status == 401 || status == 403 {
            return Err(HubError::AuthFailed(format!("HTTP {status} on {path}")));
        }
        if !(200..300).contains(&status) {
            return Err(HubError::Status(status));
        }
        serde_json::from_slice(&body).map_err(|e| HubError::BadResponse(e.to_string()))
    };
    match tokio::time::timeout(timeout * 2, fut).await {
        Ok(r) => r,
        Err(_) => Err(HubError::Network(Failure::new(
            "timeout",
            format!(
                "the hub did not answer {path} within {}",
                human(timeout * 2)
            ),
        ))),
    }
}

/// The sessions the token can see (`GET /api/v1/sessions`), for a picker.
pub async fn list_sessions(settings: &HubSettings) -> Result<Vec<HubSession>, HubError> {
    let url = HubUrl::parse(&settings.hub_url)?;
    let v = get_json(
        &url,
        &settings.session_token,
        "/api/v1/sessions",
        settings.timing.connect_timeout,
    )
    .await?;
    parse_sessions(&v)
}

/// Who the token belongs to (`GET /api/v1/me`).
pub async fn me(settings: &HubSettings) -> Result<HubMe, HubError> {
    let url = HubUrl::parse(&settings.hub_url)?;
    let v = get_json(
        &url,
        &settings.session_token,
        "/api/v1/me",
        settings.timing.connect_timeout,
    )
    .await?;
    parse_me(&v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn hub_urls_become_cli_socket_urls() {
        let u = HubUrl::parse("https://Hub.Example.net").unwrap();
        assert_eq!(u.cli_url(), "wss://hub.example.net:443/cli");
        assert_eq!(
            u.http_url("/api/v1/me"),
            "https://hub.example.net:443/api/v1/me"
        );
        let u = HubUrl::parse("https://hub.example.net:8443/base/").unwrap();
        assert_eq!(u.cli_url(), "wss://hub.example.net:8443/base/cli");
        assert_eq!(
            HubUrl::parse("http://localhost:8787").unwrap().cli_url(),
            "ws://localhost:8787/cli"
        );
        assert_eq!(
            HubUrl::parse("http://127.0.0.1:9/").unwrap().cli_url(),
            "ws://127.0.0.1:9/cli"
        );
        let u = HubUrl::parse("http://[::1]:7000").unwrap();
        assert_eq!((u.host.as_str(), u.port), ("::1", 7000));
        assert_eq!(u.cli_url(), "ws://[::1]:7000/cli");
    }

    #[test]
    fn plain_http_only_to_this_computer() {
        let e = HubUrl::parse("http://hub.example.net").unwrap_err();
        assert_eq!(e.code(), "insecure_url");
        assert_eq!(
            HubUrl::parse("http://10.0.0.2:8787").unwrap_err().code(),
            "insecure_url"
        );
        for bad in [
            "",
            "hub.example.net",
            "ws://127.0.0.1:1",
            "ftp://x",
            "https://u:p@hub.example.net",
            "https://hub.example.net/?a=1",
            "https://hub.example.net/#x",
        ] {
            assert_eq!(
                HubUrl::parse(bad).unwrap_err().code(),
                "invalid_url",
                "{bad}"
            );
        }
    }

    #[test]
    fn settings_are_checked_and_the_token_never_shows() {
        let mut s = HubSettings::new(
            "http://127.0.0.1:1",
            Token::new("cw_sess_secret123"),
            "sess-1",
        );
        assert!(s.validate().is_ok());
        let shown = format!("{s:?}");
        assert!(!shown.contains("secret123"), "{shown}");
        s.session_id = " ".into();
        assert_eq!(s.validate().unwrap_err().code(), "invalid_session");
        s.session_id = "sess-1".into();
        s.session_token = Token::new("");
        assert_eq!(s.validate().unwrap_err().code(), "invalid_token");
        s.session_token = Token::new("cw_sess_\nx");
        assert_eq!(s.validate().unwrap_err().code(), "invalid_token");
        let h = Token::new("cw_sess_abc").header().unwrap();
        assert!(h.is_sensitive());
        assert_eq!(h.to_str().unwrap(), "Bearer cw_sess_abc");
    }

    #[test]
    fn reconnects_wait_the_public_clients_steps() {
        let t = HubTiming::default();
        let secs: Vec<u64> = (1..=8).map(|n| t.backoff.delay(n).as_secs()).collect();
        assert_eq!(secs, [1, 2, 5, 15, 30, 60, 60, 60]);
    }

    #[test]
    fn status_reads_as_the_issue_words_it() {
        assert_eq!(HubStatus::Online.to_string(), "online");
        assert_eq!(
            HubStatus::Offline {
                reason: CHANNEL_OFFLINE.into()
            }
            .to_string(),
            "offline: Claude Code session is not connected"
        );
        assert_eq!(
            HubStatus::AuthFailed {
                message: "x".into()
            }
            .code(),
            "auth_failed"
        );
    }

    #[test]
    fn rest_answers_are_read_tolerantly() {
        let s = parse_sessions(&json!([
            {"id": "a", "routingName": "@api", "online": true, "extra": 1},
            {"sessionId": "b", "cwd": "/w"},
            {"nope": 1}
        ]))
        .unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].routing_name.as_deref(), Some("@api"));
        assert_eq!(s[0].online, Some(true));
        assert_eq!(s[1].id, "b");
        assert_eq!(s[1].online, None);
        assert_eq!(
            parse_sessions(&json!({"sessions": [{"id": "x"}]}))
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            parse_sessions(&json!({"x": 1})).unwrap_err().code(),
            "bad_response"
        );
        assert_eq!(parse_me(&json!({"login": "ana"})).unwrap().login, "ana");
        assert_eq!(
            parse_me(&json!({"user": {"login": "bo", "name": "Bo"}}))
                .unwrap()
                .name
                .as_deref(),
            Some("Bo")
        );
        assert_eq!(parse_me(&json!({})).unwrap_err().code(), "bad_response");
    }

    #[test]
    fn memory_forgets_the_oldest_keys() {
        let mut m = Memory::default();
        assert!(m.insert("a".into()));
        assert!(!m.insert("a".into()));
        for i in 0..MEMORY {
            m.insert(i.to_string());
        }
        assert!(!m.contains("a"));
        assert!(m.contains(&(MEMORY - 1).to_string()));
    }
}
