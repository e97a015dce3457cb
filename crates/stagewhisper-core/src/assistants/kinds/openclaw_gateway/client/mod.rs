//! The connection to an OpenClaw gateway, as an operator client.
//!
//! [`GatewayClient::start`] spawns one supervisor task that connects (challenge → signed
//! `connect` → `hello-ok`), keeps the link alive (WebSocket pings; 2× `tickIntervalMs` of silence
//! is a dead socket), reconnects with backoff (1 s doubling to 30 s, or the gateway's
//! `retryAfterMs`) on 1012 / 1013 / network errors, retries quietly every few seconds while the
//! device waits for pairing approval, and stops retrying on a final refusal (wrong token, protocol
//! mismatch, unknown field: close 1008 / 1002) until it is started again with new settings.
//!
//! Messages go out with `chat.send` (`idempotencyKey` = the caller's message id). A message sent
//! while the link is down waits and goes out on the next connection. After every (re)connect the
//! client reads `chat.history` before sending anything of a session again: a user message
//! recorded as `"<key>:user"` is not sent twice (the gateway forgets idempotency keys when it
//! restarts, so a second `chat.send` would start a second run), and a reply that finished while
//! the link was down is reported as a [`GatewayEvent::Final`] (the caller dedupes by key).
//!
//! [`GatewayHandle::watch`] adds a message this client did not send (the app sent it before a
//! restart) whose reply is still missing: it is only looked up, never sent. On each connect its
//! session's `chat.history` is read: a finished reply is reported as a backfilled `Final`, a run
//! still going is followed (its live events, and `chat.history` again every
//! [`WATCH_POLL`] for up to [`WATCH_FOR`]), a message the gateway does not have is dropped.
//!
//! The code, by responsibility (files of this module):
//! - `mod.rs`: the public types, [`GatewayHandle`] (the caller's side) and
//!   [`GatewayClient::start`];
//! - `supervisor.rs`: the one task behind a handle: connect, reconnect with backoff, the
//!   status, and the commands answered while offline;
//! - `socket.rs`: the WebSocket over the app's one TCP/TLS connector, and reading one
//!   handshake frame;
//! - `handshake.rs`: challenge → signed `connect` → `hello-ok`, and what a refusal means;
//! - `online.rs`: the loop of a connection that is online (liveness, frames in and out,
//!   commands); `rpc.rs`: its requests awaiting their answers;
//! - `registry.rs`: the messages this client is responsible for, the mapping of the gateway's
//!   `chat` / `agent` events of their runs onto [`GatewayEvent`]s, and a reply found in
//!   `chat.history` (backfill);
//! - `delivery.rs`: on each connection, reconcile with `chat.history` and send each message
//!   exactly once; `watched.rs`: the messages only looked up, never sent.

mod delivery;
mod handshake;
mod online;
mod registry;
mod rpc;
mod socket;
mod supervisor;
#[cfg(test)]
mod tests;
mod watched;

use super::frames::History;
use super::identity::{DeviceIdentity, DeviceTokenStore, IdentityError};
use crate::backoff::Backoff;
use crate::http::Shutdown;
use registry::Shared;
use serde::Serialize;
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;
use supervisor::Supervisor;
use tokio::sync::{mpsc, oneshot, watch};

/// `client.id` / `client.mode` (closed enums on the gateway side).
pub const CLIENT_ID: &str = "gateway-client";
pub const CLIENT_MODE: &str = "ui";
pub const ROLE: &str = "operator";
pub const SCOPES: [&str; 2] = ["operator.read", "operator.write"];
/// Reconnect delays: 1 s, doubling up to 30 s (unless the gateway says when).
pub const BACKOFF: Backoff = Backoff::doubling(Duration::from_secs(1), Duration::from_secs(30));
/// How many history messages are read to reconcile a session after a reconnect.
pub const HISTORY_LIMIT: u32 = 100;
/// How often `chat.history` is read again for a watched message whose run still goes.
pub const WATCH_POLL: Duration = Duration::from_secs(2);
/// How long a watched message whose run still goes is looked up again.
pub const WATCH_FOR: Duration = Duration::from_secs(600);

// ------------------------------------------------------------------------------------------
// Public types
// ------------------------------------------------------------------------------------------

/// Errors of the gateway client, each with a stable [`code`](GatewayError::code).
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    #[error("invalid gateway URL: {0}")]
    InvalidUrl(String),
    #[error("ws:// is only allowed to a loopback host (the token would travel in clear); use wss:// for {0}")]
    InsecureUrl(String),
    #[error(transparent)]
    Identity(#[from] IdentityError),
    #[error("the gateway client has stopped")]
    Stopped,
    #[error("the gateway is not connected")]
    Offline,
    #[error("the gateway did not answer {method} within {secs} s")]
    Timeout { method: String, secs: u64 },
    #[error("the gateway refused {method}: {message} ({code})")]
    Rejected {
        method: String,
        code: String,
        message: String,
    },
    #[error("the gateway sent an unexpected answer to {method}: {reason}")]
    BadAnswer { method: String, reason: String },
}

impl GatewayError {
    pub fn code(&self) -> &'static str {
        match self {
            GatewayError::InvalidUrl(_) => "invalid_url",
            GatewayError::InsecureUrl(_) => "insecure_url",
            GatewayError::Identity(e) => e.code(),
            GatewayError::Stopped => "stopped",
            GatewayError::Offline => "offline",
            GatewayError::Timeout { .. } => "timeout",
            GatewayError::Rejected { .. } => "rejected",
            GatewayError::BadAnswer { .. } => "bad_answer",
        }
    }
}

/// What the client needs to reach a gateway.
#[derive(Clone)]
pub struct GatewaySettings {
    /// `ws://` to a loopback host, or `wss://` to any host.
    pub url: String,
    /// The gateway's shared token (`gateway.auth.token`). Never logged.
    pub token: String,
    /// `client.version` sent in `connect`.
    pub client_version: String,
    /// `client.platform` (lowercased into the signature).
    pub platform: String,
    /// How often a device waiting for pairing approval retries.
    pub pairing_retry: Duration,
    /// Time allowed for one request's answer (and for each handshake step).
    pub request_timeout: Duration,
}

impl std::fmt::Debug for GatewaySettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GatewaySettings")
            .field("url", &self.url)
            .field("token", &"<redacted>")
            .field("client_version", &self.client_version)
            .field("platform", &self.platform)
            .finish()
    }
}

impl GatewaySettings {
    pub fn new(url: impl Into<String>, token: impl Into<String>) -> Self {
        GatewaySettings {
            url: url.into(),
            token: token.into(),
            client_version: env!("CARGO_PKG_VERSION").to_string(),
            platform: std::env::consts::OS.to_string(),
            pairing_retry: Duration::from_secs(2),
            request_timeout: Duration::from_secs(30),
        }
    }
}

/// Check the URL rule: `ws://` only to a loopback host, `wss://` to any host.
pub fn validate_url(raw: &str) -> Result<url::Url, GatewayError> {
    let url = url::Url::parse(raw.trim()).map_err(|e| GatewayError::InvalidUrl(e.to_string()))?;
    let host = url
        .host()
        .ok_or_else(|| GatewayError::InvalidUrl("no host".into()))?;
    match url.scheme() {
        "wss" => Ok(url),
        "ws" => {
            let loopback = match host {
                url::Host::Domain(d) => d.eq_ignore_ascii_case("localhost"),
                url::Host::Ipv4(ip) => ip.is_loopback(),
                url::Host::Ipv6(ip) => ip.is_loopback(),
            };
            if loopback {
                Ok(url)
            } else {
                Err(GatewayError::InsecureUrl(host.to_string()))
            }
        }
        other => Err(GatewayError::InvalidUrl(format!(
            "the scheme must be ws:// or wss://, not {other}://"
        ))),
    }
}

/// The link's state, as the settings page shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkState {
    Connecting,
    Online,
    /// Lost or refused for now; the client retries by itself.
    Reconnecting,
    /// The gateway waits for `openclaw devices approve <requestId>`; retried quietly.
    PairingRequired,
    /// Refused for good with these settings (wrong token, protocol, ...): no retry.
    Failed,
    Stopped,
}

/// A pending pairing request and the command that approves it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Pairing {
    pub request_id: String,
    pub command: String,
}

/// The link's status: state, a stable code and one specific sentence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct GatewayStatus {
    pub state: LinkState,
    pub code: &'static str,
    pub detail: String,
    pub pairing: Option<Pairing>,
    pub server_version: Option<String>,
    pub device_id: String,
}

/// What happened on the link, mapped away from the wire.
#[derive(Debug, Clone, PartialEq)]
pub enum GatewayEvent {
    Status(GatewayStatus),
    /// The run is working (`label`: "preparing workspace", "thinking", "retrying", ...).
    Typing {
        session_key: String,
        run_id: String,
        label: String,
    },
    /// The reply so far (cumulative text).
    Draft {
        session_key: String,
        run_id: String,
        text: String,
    },
    /// The settled reply. `backfilled`: read from `chat.history` after a reconnect.
    Final {
        session_key: String,
        run_id: String,
        idempotency_key: String,
        text: String,
        backfilled: bool,
    },
    /// Stopped by `chat.abort`; `partial` is what was produced.
    Aborted {
        session_key: String,
        run_id: String,
        partial: String,
    },
    /// The run (or its `chat.send`) failed.
    Error {
        session_key: String,
        run_id: String,
        code: String,
        message: String,
    },
}

/// The answer to [`GatewayHandle::send`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendOutcome {
    /// `chat.send` started a run.
    Started { run_id: String },
    /// The gateway already has this message (history, or this client sent it before): no
    /// second run.
    AlreadyKnown { run_id: String },
    /// The link is down: the message waits and goes out after the next connect.
    Queued,
}

// ------------------------------------------------------------------------------------------
// Handle
// ------------------------------------------------------------------------------------------

/// What a [`GatewayHandle`] asks of the client's task (`supervisor.rs`), answered on `reply`.
enum Command {
    Send {
        session_key: String,
        text: String,
        key: String,
        reply: oneshot::Sender<Result<SendOutcome, GatewayError>>,
    },
    Abort {
        session_key: String,
        run_id: Option<String>,
        reply: oneshot::Sender<Result<Value, GatewayError>>,
    },
    History {
        session_key: String,
        limit: u32,
        reply: oneshot::Sender<Result<History, GatewayError>>,
    },
    Watch {
        session_key: String,
        key: String,
    },
}

/// The caller's side of a running client. Dropping every handle stops the client.
#[derive(Clone)]
pub struct GatewayHandle {
    cmd: mpsc::Sender<Command>,
    status: watch::Receiver<GatewayStatus>,
    device_id: String,
}

impl GatewayHandle {
    /// Send a user message. `idempotency_key` is the caller's stored message id; the same key
    /// never starts a second run.
    pub async fn send(
        &self,
        session_key: &str,
        text: &str,
        idempotency_key: &str,
    ) -> Result<SendOutcome, GatewayError> {
        let (reply, rx) = oneshot::channel();
        self.cmd
            .send(Command::Send {
                session_key: session_key.to_string(),
                text: text.to_string(),
                key: idempotency_key.to_string(),
                reply,
            })
            .await
            .map_err(|_| GatewayError::Stopped)?;
        rx.await.map_err(|_| GatewayError::Stopped)?
    }

    /// `chat.abort` (the Stop button). `run_id` = the message's idempotency key; `None` aborts
    /// whatever runs in the session. Answers the gateway's payload (`{ok, aborted, runIds}`).
    pub async fn abort(
        &self,
        session_key: &str,
        run_id: Option<&str>,
    ) -> Result<Value, GatewayError> {
        let (reply, rx) = oneshot::channel();
        self.cmd
            .send(Command::Abort {
                session_key: session_key.to_string(),
                run_id: run_id.map(str::to_string),
                reply,
            })
            .await
            .map_err(|_| GatewayError::Stopped)?;
        rx.await.map_err(|_| GatewayError::Stopped)?
    }

    /// Looks up the reply of a message sent before this client started (idempotency key `key`,
    /// in `session_key`): reported as a backfilled [`GatewayEvent::Final`] once found, never
    /// sent again. A key this client already knows is left as it is.
    pub async fn watch(&self, session_key: &str, key: &str) -> Result<(), GatewayError> {
        self.cmd
            .send(Command::Watch {
                session_key: session_key.to_string(),
                key: key.to_string(),
            })
            .await
            .map_err(|_| GatewayError::Stopped)
    }

    /// `chat.history` of a session.
    pub async fn history(&self, session_key: &str, limit: u32) -> Result<History, GatewayError> {
        let (reply, rx) = oneshot::channel();
        self.cmd
            .send(Command::History {
                session_key: session_key.to_string(),
                limit,
                reply,
            })
            .await
            .map_err(|_| GatewayError::Stopped)?;
        rx.await.map_err(|_| GatewayError::Stopped)?
    }

    /// The current status.
    pub fn status(&self) -> GatewayStatus {
        self.status.borrow().clone()
    }

    /// A receiver of status changes.
    pub fn watch_status(&self) -> watch::Receiver<GatewayStatus> {
        self.status.clone()
    }

    /// This install's device id.
    pub fn device_id(&self) -> &str {
        &self.device_id
    }
}

/// Entry point.
pub struct GatewayClient;

impl GatewayClient {
    /// Validate the settings, load (or create) the device identity in `identity_dir`, and spawn
    /// the client. It runs until `shutdown` or until every handle is dropped.
    pub fn start(
        settings: GatewaySettings,
        identity_dir: &Path,
        shutdown: Shutdown,
    ) -> Result<(GatewayHandle, mpsc::Receiver<GatewayEvent>), GatewayError> {
        let url = validate_url(&settings.url)?;
        let identity = DeviceIdentity::load_or_create(identity_dir)?;
        let device_id = identity.device_id().to_string();
        let (cmd_tx, cmd_rx) = mpsc::channel(64);
        let (events_tx, events_rx) = mpsc::channel(1024);
        let initial = GatewayStatus {
            state: LinkState::Connecting,
            code: "connecting",
            detail: format!("Connecting to the OpenClaw gateway at {url}."),
            pairing: None,
            server_version: None,
            device_id: device_id.clone(),
        };
        let (status_tx, status_rx) = watch::channel(initial);
        let sup = Supervisor {
            url,
            settings,
            identity: Arc::new(identity),
            tokens: DeviceTokenStore::new(identity_dir),
            shared: Arc::new(Shared::new(events_tx)),
            status: status_tx,
            cmd_rx,
            shutdown,
            epoch: 0,
        };
        tokio::spawn(sup.run());
        Ok((
            GatewayHandle {
                cmd: cmd_tx,
                status: status_rx,
                device_id,
            },
            events_rx,
        ))
    }
}
