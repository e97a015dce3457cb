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
//!
//! The parts: this module holds the public types and the app's [`HubHandle`]; `socket` opens
//! the `/cli` WebSocket; `worker` is the task that keeps it attached (reconnects, liveness,
//! queued writes) and `inbound` handles the frames the hub sends; `rest` holds the REST reads.

mod inbound;
mod rest;
mod socket;
#[cfg(test)]
mod tests;
mod worker;

pub use rest::{list_sessions, me, parse_me, parse_sessions, HubMe, HubSession};

use super::frames::{Decision, Resolution, Role};
use crate::backoff::Backoff;
use crate::http::Shutdown;
use crate::tunnel::net::Failure;
use hyper::header::HeaderValue;
use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use worker::Worker;

/// The status detail while subscribed but the Claude Code session is offline.
pub const CHANNEL_OFFLINE: &str = "Claude Code session is not connected";

/// The reconnect delays of the public clients, in seconds (the last one repeats).
pub const DEFAULT_BACKOFF_SECS: [u64; 6] = [1, 2, 5, 15, 30, 60];

/// Writes kept while the socket is down; past this a write is refused with `queue_full`.
pub const MAX_QUEUED: usize = 256;

/// Remembered replayable items (event keys, request ids, own prompts, settled replies).
const MEMORY: usize = 4096;

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
        let worker = Worker::new(settings, url, events, cmds, shutdown, &handle);
        tokio::spawn(worker.run());
        Ok((handle, rx))
    }
}

/// A duration for a sentence: `5 s`, or `300 ms` below a second or off the second.
fn human(d: Duration) -> String {
    if d >= Duration::from_secs(1) && d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}
