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

use super::frames::{
    self, AgentStream, ChatAbortParams, ChatHistoryParams, ChatSendParams, ChatState, ClientInfo,
    ConnectAuth, ConnectParams, DeviceProof, ErrorShape, HelloOk, History, HistoryFinding, Inbound,
    Request, PROTOCOL,
};
use super::identity::{DeviceIdentity, DeviceTokenStore, IdentityError, SignedFields};
use crate::backoff::{Backoff, Retries};
use crate::http::Shutdown;
use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

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
            shared: Arc::new(Shared {
                registry: Mutex::new(Registry::default()),
                events: events_tx,
            }),
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

// ------------------------------------------------------------------------------------------
// Registry of the messages this client is responsible for
// ------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EntryState {
    /// Not (known to be) taken by the gateway.
    Queued,
    /// The gateway took it (`chat.send` answered, or found in history); waiting for its end.
    Sent,
    /// Sent before this client started: only its reply is looked up (never sent).
    Watch,
}

#[derive(Debug)]
struct Entry {
    session_key: String,
    text: String,
    state: EntryState,
    /// The connection (see `Supervisor::epoch`) on which the gateway took it (a watched one:
    /// on which its run was last seen going).
    sent_on: u64,
    /// A watched one: until when it is looked up again while its run goes.
    watch_until: Option<Instant>,
}

#[derive(Default)]
struct Registry {
    /// Not yet finished, in the order they were sent.
    order: Vec<String>,
    entries: HashMap<String, Entry>,
    /// Keys whose run ended (final, aborted, error): never sent again.
    done: HashSet<String>,
    /// run id → (session key as the caller named it, idempotency key).
    runs: HashMap<String, (String, String)>,
    /// The last typing label / draft text per run (to not repeat it).
    last_label: HashMap<String, String>,
    last_draft: HashMap<String, String>,
}

impl Registry {
    fn finish(&mut self, key: &str) {
        self.entries.remove(key);
        self.order.retain(|k| k != key);
        self.done.insert(key.to_string());
        self.last_label.remove(key);
        self.last_draft.remove(key);
    }

    fn open_keys(&self) -> Vec<String> {
        self.order.clone()
    }
}

struct Shared {
    registry: Mutex<Registry>,
    events: mpsc::Sender<GatewayEvent>,
}

impl Shared {
    fn reg(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn emit(&self, ev: GatewayEvent) {
        if self.events.send(ev).await.is_err() {
            tracing::debug!("gateway event receiver dropped");
        }
    }

    /// Map a `chat` event of one of our runs onto [`GatewayEvent`]s.
    async fn on_chat(&self, ev: frames::ChatEvent) {
        let out = {
            let mut reg = self.reg();
            let Some((session_key, key)) = reg.runs.get(&ev.run_id).cloned() else {
                tracing::debug!(run_id = %ev.run_id, "chat event of a run this client did not start");
                return;
            };
            if reg.done.contains(&key) {
                // The first terminal state ended the run; later ones (a second `error`) are noise.
                return;
            }
            let run_id = ev.run_id.clone();
            match ev.state {
                ChatState::Status { phase } => {
                    let label = humanize(&phase);
                    if reg.last_label.get(&key) == Some(&label) {
                        None
                    } else {
                        reg.last_label.insert(key.clone(), label.clone());
                        Some(GatewayEvent::Typing {
                            session_key,
                            run_id,
                            label,
                        })
                    }
                }
                ChatState::Delta { text, .. } => {
                    if text.is_empty() || reg.last_draft.get(&key) == Some(&text) {
                        None
                    } else {
                        reg.last_draft.insert(key.clone(), text.clone());
                        Some(GatewayEvent::Draft {
                            session_key,
                            run_id,
                            text,
                        })
                    }
                }
                ChatState::Final { text } => {
                    reg.finish(&key);
                    Some(GatewayEvent::Final {
                        session_key,
                        run_id,
                        idempotency_key: key,
                        text,
                        backfilled: false,
                    })
                }
                ChatState::Aborted { partial } => {
                    reg.finish(&key);
                    Some(GatewayEvent::Aborted {
                        session_key,
                        run_id,
                        partial,
                    })
                }
                ChatState::Error { kind, message } => {
                    reg.finish(&key);
                    Some(GatewayEvent::Error {
                        session_key,
                        run_id,
                        code: kind.unwrap_or_else(|| "run_failed".to_string()),
                        message,
                    })
                }
            }
        };
        if let Some(ev) = out {
            self.emit(ev).await;
        }
    }

    /// `agent` events only add typing labels the `chat` stream does not carry.
    async fn on_agent(&self, ev: frames::AgentEvent) {
        let label = match &ev.stream {
            AgentStream::Lifecycle { phase, .. } if phase == "start" => "thinking",
            AgentStream::RunStatus { phase } if phase == "retrying" => "retrying",
            _ => return,
        };
        let out = {
            let mut reg = self.reg();
            let Some((session_key, key)) = reg.runs.get(&ev.run_id).cloned() else {
                return;
            };
            if reg.done.contains(&key)
                || reg.last_label.get(&key).map(String::as_str) == Some(label)
            {
                return;
            }
            reg.last_label.insert(key, label.to_string());
            GatewayEvent::Typing {
                session_key,
                run_id: ev.run_id,
                label: label.to_string(),
            }
        };
        self.emit(out).await;
    }
}

fn humanize(phase: &str) -> String {
    match phase {
        "" => "working".to_string(),
        "starting_model" => "thinking".to_string(),
        p => p.replace('_', " "),
    }
}

// ------------------------------------------------------------------------------------------
// Transport
// ------------------------------------------------------------------------------------------

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
type Ws = WebSocketStream<Box<dyn Io>>;

/// Why one connection ended, or why it never got online.
#[derive(Debug)]
enum Outcome {
    /// Retry after the backoff (or the gateway's hint).
    Retry {
        code: &'static str,
        why: String,
        hint: Option<Duration>,
    },
    /// The device waits for approval: retry quietly.
    Pairing { request_id: String },
    /// The stored device token was refused: forget it and retry with the shared token.
    DeviceTokenRejected,
    /// Refused for good with these settings.
    Final { code: &'static str, detail: String },
    /// Shutdown or every handle dropped.
    Stop,
}

fn tls_config() -> Arc<tokio_rustls::rustls::ClientConfig> {
    use tokio_rustls::rustls;
    static CONFIG: std::sync::OnceLock<Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            tracing::debug!(added, "system root certificates for wss://");
            Arc::new(
                rustls::ClientConfig::builder_with_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .with_safe_default_protocol_versions()
                .expect("ring supports the default protocol versions")
                .with_root_certificates(roots)
                .with_no_client_auth(),
            )
        })
        .clone()
}

async fn open_socket(url: &url::Url, timeout: Duration) -> Result<Ws, String> {
    let host = url.host_str().ok_or("no host")?.to_string();
    let port = url.port_or_known_default().ok_or("no port")?;
    let bare = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let tcp = tokio::time::timeout(timeout, TcpStream::connect((bare.as_str(), port)))
        .await
        .map_err(|_| {
            format!(
                "no TCP connection to {host}:{port} within {} s",
                timeout.as_secs()
            )
        })?
        .map_err(|e| format!("cannot connect to {host}:{port}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let stream: Box<dyn Io> = if url.scheme() == "wss" {
        let name = tokio_rustls::rustls::pki_types::ServerName::try_from(bare.clone())
            .map_err(|_| format!("{host} is not a valid TLS server name"))?;
        let tls = tokio::time::timeout(
            timeout,
            tokio_rustls::TlsConnector::from(tls_config()).connect(name, tcp),
        )
        .await
        .map_err(|_| {
            format!(
                "TLS with {host} did not finish within {} s",
                timeout.as_secs()
            )
        })?
        .map_err(|e| format!("TLS with {host} failed: {e}"))?;
        Box::new(tls)
    } else {
        Box::new(tcp)
    };
    let config = WebSocketConfig::default().max_message_size(Some(32 << 20));
    let (ws, _resp) = tokio::time::timeout(
        timeout,
        tokio_tungstenite::client_async_with_config(url.as_str(), stream, Some(config)),
    )
    .await
    .map_err(|_| {
        format!(
            "the WebSocket handshake did not finish within {} s",
            timeout.as_secs()
        )
    })?
    .map_err(|e| format!("WebSocket handshake failed: {e}"))?;
    Ok(ws)
}

fn close_reason(frame: &Option<CloseFrame>) -> (u16, String) {
    match frame {
        Some(f) => (u16::from(f.code), f.reason.to_string()),
        None => (1005, String::new()),
    }
}

/// Classify a refused `connect`.
fn classify_refusal(e: &ErrorShape, used_device_token: bool) -> Outcome {
    let detail = e.detail_code().unwrap_or("");
    if detail == "PAIRING_REQUIRED" {
        return Outcome::Pairing {
            request_id: e
                .details
                .as_ref()
                .and_then(|d| d.request_id.clone())
                .unwrap_or_default(),
        };
    }
    if e.code == "UNAVAILABLE" || e.retryable == Some(true) {
        return Outcome::Retry {
            code: "gateway_unavailable",
            why: format!("the gateway is not ready: {}", e.message),
            hint: e.retry_after_ms.map(Duration::from_millis),
        };
    }
    if used_device_token && (detail.starts_with("AUTH_") || detail.contains("DEVICE_TOKEN")) {
        return Outcome::DeviceTokenRejected;
    }
    let (code, detail) = match detail {
        "AUTH_TOKEN_MISMATCH" => (
            "token_mismatch",
            "The gateway refused the token: it is not this gateway's token (gateway.auth.token). Correct it in Settings; StageWhisper does not retry with a wrong token.".to_string(),
        ),
        "AUTH_TOKEN_MISSING" => (
            "token_missing",
            "The gateway needs its token: enter the gateway token (gateway.auth.token) in Settings.".to_string(),
        ),
        "PROTOCOL_MISMATCH" => {
            let expected = e
                .details
                .as_ref()
                .and_then(|d| d.expected_protocol)
                .map(|p| p.to_string())
                .unwrap_or_else(|| "another version".into());
            (
                "protocol_mismatch",
                format!("This gateway speaks protocol {expected} and StageWhisper speaks protocol {PROTOCOL}: update OpenClaw or StageWhisper so that both speak the same version."),
            )
        }
        d if d.starts_with("DEVICE_") => (
            "device_rejected",
            format!("The gateway refused this device's identity ({d}: {}). Check that this computer's clock is right; if it is, remove the device on the gateway (openclaw devices) and connect again.", e.message),
        ),
        _ if e.message.contains("unexpected property") => (
            "unknown_field",
            format!("The gateway refused a field StageWhisper sent ({}): this OpenClaw version is not supported by this StageWhisper version.", e.message),
        ),
        _ if e.message.starts_with("invalid connect params") => (
            "invalid_params",
            format!("The gateway refused StageWhisper's connect request ({}): this OpenClaw version is not supported by this StageWhisper version.", e.message),
        ),
        _ => (
            "refused",
            format!("The gateway refused the connection: {} ({}).", e.message, e.code),
        ),
    };
    Outcome::Final { code, detail }
}

// ------------------------------------------------------------------------------------------
// Supervisor
// ------------------------------------------------------------------------------------------

struct Supervisor {
    url: url::Url,
    settings: GatewaySettings,
    identity: Arc<DeviceIdentity>,
    tokens: DeviceTokenStore,
    shared: Arc<Shared>,
    status: watch::Sender<GatewayStatus>,
    cmd_rx: mpsc::Receiver<Command>,
    shutdown: Shutdown,
    /// Counts connections that reached `hello-ok` (1 = the first).
    epoch: u64,
}

/// A connection that completed `hello-ok`.
struct Online {
    ws: Ws,
    hello: HelloOk,
}

/// Requests waiting for their `res`, by id.
type Pending = Arc<Mutex<HashMap<String, oneshot::Sender<Result<Value, ErrorShape>>>>>;

/// The request side of an online connection, shared with its workers.
#[derive(Clone)]
struct Rpc {
    out: mpsc::Sender<String>,
    pending: Pending,
    timeout: Duration,
}

impl Rpc {
    async fn call<P: Serialize>(&self, method: &str, params: &P) -> Result<Value, GatewayError> {
        let id = uuid::Uuid::new_v4().to_string();
        let frame = Request::new(
            id.clone(),
            method,
            serde_json::to_value(params).expect("params serialise"),
        );
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone(), tx);
        let text = serde_json::to_string(&frame).expect("frame serialises");
        if self.out.send(text).await.is_err() {
            return Err(GatewayError::Offline);
        }
        let res = tokio::time::timeout(self.timeout, rx).await;
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        match res {
            Err(_) => Err(GatewayError::Timeout {
                method: method.to_string(),
                secs: self.timeout.as_secs(),
            }),
            Ok(Err(_)) => Err(GatewayError::Offline),
            Ok(Ok(Ok(v))) => Ok(v),
            Ok(Ok(Err(e))) => Err(GatewayError::Rejected {
                method: method.to_string(),
                code: e.detail_code().unwrap_or(&e.code).to_string(),
                message: e.message,
            }),
        }
    }

    async fn history(&self, session_key: &str, limit: u32) -> Result<History, GatewayError> {
        let v = self
            .call(
                "chat.history",
                &ChatHistoryParams {
                    session_key: session_key.to_string(),
                    limit,
                },
            )
            .await?;
        History::from_payload(&v).map_err(|e| GatewayError::BadAnswer {
            method: "chat.history".into(),
            reason: e.to_string(),
        })
    }
}

struct SendJob {
    key: String,
    reply: oneshot::Sender<Result<SendOutcome, GatewayError>>,
}

impl Supervisor {
    fn set_status(
        &self,
        state: LinkState,
        code: &'static str,
        detail: String,
        pairing: Option<Pairing>,
        server_version: Option<String>,
    ) -> Option<GatewayStatus> {
        let st = GatewayStatus {
            state,
            code,
            detail,
            pairing,
            server_version,
            device_id: self.identity.device_id().to_string(),
        };
        if *self.status.borrow() == st {
            return None;
        }
        tracing::info!(state = ?st.state, code = st.code, "gateway status: {}", st.detail);
        self.status.send_replace(st.clone());
        Some(st)
    }

    async fn status(
        &self,
        state: LinkState,
        code: &'static str,
        detail: String,
        pairing: Option<Pairing>,
        server_version: Option<String>,
    ) {
        if let Some(st) = self.set_status(state, code, detail, pairing, server_version) {
            self.shared.emit(GatewayEvent::Status(st)).await;
        }
    }

    async fn run(mut self) {
        let mut retries = Retries::new(BACKOFF);
        loop {
            if self.shutdown.is_triggered() {
                break;
            }
            let outcome = self.connect_and_serve(&mut retries).await;
            let wait = match outcome {
                Outcome::Stop => break,
                Outcome::DeviceTokenRejected => {
                    tracing::warn!("the gateway refused the stored device token; retrying with the shared token");
                    self.tokens.clear();
                    Duration::ZERO
                }
                Outcome::Pairing { request_id } => {
                    let command = format!("openclaw devices approve {request_id}");
                    self.status(
                        LinkState::PairingRequired,
                        "pairing_required",
                        format!("This device waits for approval on the gateway: run `{command}` on the gateway's computer. StageWhisper connects by itself once it is approved."),
                        Some(Pairing { request_id, command }),
                        None,
                    )
                    .await;
                    self.settings.pairing_retry
                }
                Outcome::Retry { code, why, hint } => {
                    let backoff = retries.fail();
                    let wait = hint.unwrap_or(backoff);
                    self.status(
                        LinkState::Reconnecting,
                        code,
                        format!(
                            "No connection to the gateway ({why}); retrying in {} s.",
                            wait.as_secs_f64().ceil() as u64
                        ),
                        None,
                        None,
                    )
                    .await;
                    wait
                }
                Outcome::Final { code, detail } => {
                    self.status(LinkState::Failed, code, detail, None, None)
                        .await;
                    // Final until the settings change (a new client): keep answering commands.
                    self.idle(None).await;
                    break;
                }
            };
            if !wait.is_zero() && !self.idle(Some(wait)).await {
                break;
            }
        }
        self.status(
            LinkState::Stopped,
            "stopped",
            "The gateway link is stopped.".into(),
            None,
            None,
        )
        .await;
    }

    /// Wait `wait` (forever when `None`) while answering commands offline. False on stop.
    async fn idle(&mut self, wait: Option<Duration>) -> bool {
        let deadline = wait.map(|w| Instant::now() + w);
        loop {
            let sleep = async {
                match deadline {
                    Some(d) => tokio::time::sleep_until(d).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = sleep => return true,
                _ = self.shutdown.wait() => return false,
                cmd = self.cmd_rx.recv() => match cmd {
                    None => return false,
                    Some(cmd) => self.offline_command(cmd),
                },
            }
        }
    }

    /// Records a message to send; `Some` when there is nothing to send (the gateway has it).
    /// A message already waiting (queued, not yet taken) is `None` again: the caller sends it
    /// now if it can, and a caller retrying it is never told it was taken before it was.
    fn register(&self, session_key: &str, text: &str, key: &str) -> Option<SendOutcome> {
        let mut reg = self.shared.reg();
        let taken = reg
            .entries
            .get(key)
            .is_some_and(|e| e.state == EntryState::Sent);
        if reg.done.contains(key) || taken {
            return Some(SendOutcome::AlreadyKnown {
                run_id: key.to_string(),
            });
        }
        if let Some(e) = reg.entries.get_mut(key) {
            if e.state == EntryState::Watch {
                // Asked to send it after all: it is checked against history like any other.
                e.text = text.to_string();
                e.state = EntryState::Queued;
                e.watch_until = None;
            }
            return None;
        }
        reg.entries.insert(
            key.to_string(),
            Entry {
                session_key: session_key.to_string(),
                text: text.to_string(),
                state: EntryState::Queued,
                sent_on: 0,
                watch_until: None,
            },
        );
        reg.order.push(key.to_string());
        reg.runs
            .insert(key.to_string(), (session_key.to_string(), key.to_string()));
        None
    }

    /// Records a message to look up (see [`GatewayHandle::watch`]); `true` if it is new.
    fn register_watch(&self, session_key: &str, key: &str) -> bool {
        let mut reg = self.shared.reg();
        if reg.done.contains(key) || reg.entries.contains_key(key) {
            return false;
        }
        reg.entries.insert(
            key.to_string(),
            Entry {
                session_key: session_key.to_string(),
                text: String::new(),
                state: EntryState::Watch,
                sent_on: 0,
                watch_until: Some(Instant::now() + WATCH_FOR),
            },
        );
        reg.order.push(key.to_string());
        reg.runs
            .insert(key.to_string(), (session_key.to_string(), key.to_string()));
        true
    }

    fn offline_command(&self, cmd: Command) {
        match cmd {
            // Looked up on the next connect.
            Command::Watch { session_key, key } => {
                self.register_watch(&session_key, &key);
            }
            Command::Send {
                session_key,
                text,
                key,
                reply,
            } => {
                let out = self
                    .register(&session_key, &text, &key)
                    .unwrap_or(SendOutcome::Queued);
                tracing::debug!(?out, "message while the gateway is not connected");
                let _ = reply.send(Ok(out));
            }
            Command::Abort { reply, .. } => {
                let _ = reply.send(Err(GatewayError::Offline));
            }
            Command::History { reply, .. } => {
                let _ = reply.send(Err(GatewayError::Offline));
            }
        }
    }

    async fn connect_and_serve(&mut self, retries: &mut Retries) -> Outcome {
        if retries.failures() == 0 && self.status.borrow().state != LinkState::PairingRequired {
            self.status(
                LinkState::Connecting,
                "connecting",
                format!("Connecting to the OpenClaw gateway at {}.", self.url),
                None,
                None,
            )
            .await;
        }
        let online = tokio::select! {
            r = self.handshake() => r,
            _ = self.shutdown.wait() => return Outcome::Stop,
        };
        let online = match online {
            Ok(o) => o,
            Err(outcome) => return outcome,
        };
        retries.reset();
        let version = online.hello.server.version.clone();
        self.status(
            LinkState::Online,
            "online",
            format!(
                "Connected to OpenClaw {}.",
                version.as_deref().unwrap_or("(unknown version)")
            ),
            None,
            version,
        )
        .await;
        self.serve(online).await
    }

    async fn handshake(&self) -> Result<Online, Outcome> {
        let timeout = self.settings.request_timeout;
        let mut ws = open_socket(&self.url, timeout)
            .await
            .map_err(|why| Outcome::Retry {
                code: "unreachable",
                why,
                hint: None,
            })?;
        // 1. connect.challenge
        let challenge = loop {
            match next_inbound(&mut ws, timeout).await {
                Ok(Inbound::Challenge(c)) => break c,
                Ok(other) => tracing::debug!(?other, "frame before the challenge"),
                Err(o) => return Err(o),
            }
        };
        // 2. signed connect
        let device_token = self.tokens.load(self.url.as_str(), &self.settings.token);
        let used_device_token = device_token.is_some();
        let auth = match &device_token {
            Some(t) => ConnectAuth {
                token: None,
                device_token: Some(t.clone()),
            },
            None => ConnectAuth {
                token: Some(self.settings.token.clone()),
                device_token: None,
            },
        };
        let signed_token = auth
            .token
            .as_deref()
            .or(auth.device_token.as_deref())
            .unwrap_or("")
            .to_string();
        let scopes: Vec<String> = SCOPES.iter().map(|s| s.to_string()).collect();
        let platform = self.settings.platform.clone();
        let payload = SignedFields {
            device_id: self.identity.device_id(),
            client_id: CLIENT_ID,
            client_mode: CLIENT_MODE,
            role: ROLE,
            scopes: &scopes,
            signed_at: challenge.ts,
            token: &signed_token,
            nonce: &challenge.nonce,
            platform: &platform,
            device_family: "",
        }
        .v3();
        let params = ConnectParams {
            min_protocol: PROTOCOL,
            max_protocol: PROTOCOL,
            client: ClientInfo {
                id: CLIENT_ID.into(),
                version: self.settings.client_version.clone(),
                platform,
                mode: CLIENT_MODE.into(),
                device_family: None,
            },
            role: ROLE.into(),
            scopes,
            caps: vec![],
            user_agent: format!("stagewhisper-desktop/{}", self.settings.client_version),
            locale: "en-US".into(),
            auth: Some(auth),
            device: Some(DeviceProof {
                id: self.identity.device_id().to_string(),
                public_key: self.identity.public_key(),
                signature: self.identity.sign(&payload),
                signed_at: challenge.ts,
                nonce: challenge.nonce.clone(),
            }),
        };
        let id = uuid::Uuid::new_v4().to_string();
        let req = Request::new(
            id.clone(),
            "connect",
            serde_json::to_value(&params).expect("connect params serialise"),
        );
        ws.send(Message::text(
            serde_json::to_string(&req).expect("frame serialises"),
        ))
        .await
        .map_err(|e| Outcome::Retry {
            code: "connection_lost",
            why: format!("sending connect failed: {e}"),
            hint: None,
        })?;
        tracing::debug!(used_device_token, "connect sent");
        // 3. hello-ok or a refusal
        let result = loop {
            match next_inbound(&mut ws, timeout).await {
                Ok(Inbound::Response(r)) if r.id == id => break r.result,
                Ok(other) => tracing::debug!(?other, "frame before the connect answer"),
                Err(o) => return Err(o),
            }
        };
        match result {
            Ok(payload) => {
                let hello = HelloOk::from_payload(&payload).map_err(|e| Outcome::Final {
                    code: "bad_hello",
                    detail: format!("The gateway's hello could not be read ({e}): this OpenClaw version is not supported."),
                })?;
                if hello.protocol != PROTOCOL {
                    return Err(Outcome::Final {
                        code: "protocol_mismatch",
                        detail: format!("This gateway speaks protocol {} and StageWhisper speaks protocol {PROTOCOL}: update OpenClaw or StageWhisper so that both speak the same version.", hello.protocol),
                    });
                }
                if let Some(dt) = hello.auth.as_ref().and_then(|a| a.device_token.as_deref()) {
                    if device_token.as_deref() != Some(dt) {
                        if let Err(e) =
                            self.tokens
                                .save(self.url.as_str(), &self.settings.token, dt)
                        {
                            tracing::warn!(error = %e, code = e.code(), "cannot store the device token");
                        }
                    }
                }
                Ok(Online { ws, hello })
            }
            Err(e) => {
                tracing::info!(code = %e.code, detail = e.detail_code().unwrap_or(""), "connect refused: {}", e.message);
                let outcome = classify_refusal(&e, used_device_token);
                let _ = ws.close(None).await;
                Err(outcome)
            }
        }
    }

    async fn serve(&mut self, online: Online) -> Outcome {
        let Online { mut ws, hello } = online;
        let tick = Duration::from_millis(hello.policy.tick_interval_ms.max(50));
        let dead_after = tick * 2;
        let ping_every = (tick / 2).min(Duration::from_secs(15));
        let (out_tx, mut out_rx) = mpsc::channel::<String>(256);
        let rpc = Rpc {
            out: out_tx,
            pending: Arc::new(Mutex::new(HashMap::new())),
            timeout: self.settings.request_timeout,
        };
        let (jobs_tx, jobs_rx) = mpsc::channel::<SendJob>(256);
        self.epoch += 1;
        // What is open now is reconciled first; what is sent from here on comes as a job.
        let open = self.shared.reg().open_keys();
        // Ends by itself once `jobs_tx` is dropped with this function.
        tokio::spawn(send_worker(
            rpc.clone(),
            self.shared.clone(),
            self.epoch,
            open,
            jobs_rx,
        ));
        let mut last_rx = Instant::now();
        let mut ping = tokio::time::interval_at(Instant::now() + ping_every, ping_every);
        let mut shutdown_reason: Option<String> = None;
        let outcome = loop {
            tokio::select! {
                msg = tokio::time::timeout_at(last_rx + dead_after, ws.next()) => {
                    let msg = match msg {
                        Err(_) => break Outcome::Retry {
                            code: "dead_socket",
                            why: format!("nothing from the gateway for {} s", dead_after.as_secs()),
                            hint: None,
                        },
                        Ok(None) => break Outcome::Retry { code: "connection_lost", why: "the connection closed".into(), hint: None },
                        Ok(Some(Err(e))) => break Outcome::Retry { code: "connection_lost", why: format!("connection error: {e}"), hint: None },
                        Ok(Some(Ok(m))) => m,
                    };
                    last_rx = Instant::now();
                    match msg {
                        Message::Text(t) => match frames::parse_inbound(t.as_str()) {
                            Ok(Inbound::Response(r)) => {
                                let tx = rpc.pending.lock().unwrap_or_else(|p| p.into_inner()).remove(&r.id);
                                match tx {
                                    Some(tx) => { let _ = tx.send(r.result); }
                                    None => tracing::debug!(id = %r.id, "answer to no pending request"),
                                }
                            }
                            Ok(Inbound::Chat(c)) => self.shared.on_chat(c).await,
                            Ok(Inbound::Agent(a)) => self.shared.on_agent(a).await,
                            Ok(Inbound::Shutdown { reason }) => {
                                tracing::info!(reason = reason.as_deref().unwrap_or(""), "the gateway is shutting down");
                                shutdown_reason = reason;
                            }
                            Ok(Inbound::Tick | Inbound::Ignored(_) | Inbound::Challenge(_)) => {}
                            Err(e) => tracing::warn!(code = e.code(), "unreadable gateway frame: {e}"),
                        },
                        Message::Close(frame) => {
                            let (code, reason) = close_reason(&frame);
                            tracing::info!(code, reason = %reason, "the gateway closed the connection");
                            break match code {
                                1008 | 1002 => Outcome::Final {
                                    code: "closed_by_gateway",
                                    detail: format!("The gateway closed the connection for good ({code}: {reason}). Check the settings."),
                                },
                                1012 => Outcome::Retry { code: "gateway_restarting", why: format!("the gateway is restarting{}", shutdown_reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default()), hint: None },
                                1013 => Outcome::Retry { code: "gateway_unavailable", why: "the gateway is busy".into(), hint: None },
                                _ => Outcome::Retry { code: "connection_lost", why: format!("closed by the gateway ({code})"), hint: None },
                            };
                        }
                        _ => {} // ping (answered by tungstenite), pong, binary
                    }
                }
                Some(text) = out_rx.recv() => {
                    if let Err(e) = ws.send(Message::text(text)).await {
                        break Outcome::Retry { code: "connection_lost", why: format!("sending failed: {e}"), hint: None };
                    }
                }
                _ = ping.tick() => {
                    if let Err(e) = ws.send(Message::Ping(Vec::new().into())).await {
                        break Outcome::Retry { code: "connection_lost", why: format!("ping failed: {e}"), hint: None };
                    }
                }
                cmd = self.cmd_rx.recv() => match cmd {
                    None => break Outcome::Stop,
                    Some(cmd) => self.online_command(cmd, &rpc, &jobs_tx).await,
                },
                _ = self.shutdown.wait() => break Outcome::Stop,
            }
        };
        // Fail what still waits for an answer on this connection.
        rpc.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
        if matches!(outcome, Outcome::Stop) {
            let _ = ws
                .close(Some(CloseFrame {
                    code: CloseCode::Normal,
                    reason: "client stopping".into(),
                }))
                .await;
        }
        outcome
    }

    async fn online_command(&self, cmd: Command, rpc: &Rpc, jobs: &mpsc::Sender<SendJob>) {
        match cmd {
            Command::Send {
                session_key,
                text,
                key,
                reply,
            } => {
                if let Some(out) = self.register(&session_key, &text, &key) {
                    let _ = reply.send(Ok(out));
                    return;
                }
                if let Err(mpsc::error::SendError(job)) = jobs.send(SendJob { key, reply }).await {
                    let _ = job.reply.send(Ok(SendOutcome::Queued));
                }
            }
            Command::Watch { session_key, key } => {
                if self.register_watch(&session_key, &key) {
                    // Looked up now (in order with the sends); nobody waits for the answer.
                    let (reply, _) = oneshot::channel();
                    let _ = jobs.send(SendJob { key, reply }).await;
                }
            }
            Command::Abort {
                session_key,
                run_id,
                reply,
            } => {
                let rpc = rpc.clone();
                tokio::spawn(async move {
                    let r = rpc
                        .call(
                            "chat.abort",
                            &ChatAbortParams {
                                session_key,
                                run_id,
                            },
                        )
                        .await;
                    let _ = reply.send(r);
                });
            }
            Command::History {
                session_key,
                limit,
                reply,
            } => {
                let rpc = rpc.clone();
                tokio::spawn(async move {
                    let _ = reply.send(rpc.history(&session_key, limit).await);
                });
            }
        }
    }
}

/// Read the next frame during the handshake.
async fn next_inbound(ws: &mut Ws, timeout: Duration) -> Result<Inbound, Outcome> {
    loop {
        let msg = match tokio::time::timeout(timeout, ws.next()).await {
            Err(_) => {
                return Err(Outcome::Retry {
                    code: "handshake_timeout",
                    why: format!("the gateway did not answer within {} s", timeout.as_secs()),
                    hint: None,
                })
            }
            Ok(None) => {
                return Err(Outcome::Retry {
                    code: "connection_lost",
                    why: "the connection closed during the handshake".into(),
                    hint: None,
                })
            }
            Ok(Some(Err(e))) => {
                return Err(Outcome::Retry {
                    code: "connection_lost",
                    why: format!("connection error during the handshake: {e}"),
                    hint: None,
                })
            }
            Ok(Some(Ok(m))) => m,
        };
        match msg {
            Message::Text(t) => match frames::parse_inbound(t.as_str()) {
                Ok(f) => return Ok(f),
                Err(e) => tracing::warn!(code = e.code(), "unreadable gateway frame: {e}"),
            },
            Message::Close(frame) => {
                let (code, reason) = close_reason(&frame);
                return Err(match code {
                    1008 | 1002 => Outcome::Final {
                        code: "closed_by_gateway",
                        detail: format!("The gateway closed the connection for good ({code}: {reason}). Check the settings."),
                    },
                    _ => Outcome::Retry {
                        code: "connection_lost",
                        why: format!("closed by the gateway during the handshake ({code} {reason})"),
                        hint: None,
                    },
                });
            }
            _ => {}
        }
    }
}

/// Sends messages on one connection, in order. First it reconciles every open message with
/// `chat.history` (backfilling replies, re-sending only what the gateway does not have), then
/// it takes new messages; the first message of a session on this connection is checked against
/// that session's history too.
async fn send_worker(
    rpc: Rpc,
    shared: Arc<Shared>,
    epoch: u64,
    open: Vec<String>,
    mut jobs: mpsc::Receiver<SendJob>,
) {
    let mut checked: HashMap<String, (Instant, History)> = HashMap::new();
    let lost = |r: &Result<SendOutcome, GatewayError>| {
        matches!(
            r,
            Err(GatewayError::Offline) | Err(GatewayError::Timeout { .. })
        )
    };
    let mut online = true;
    for key in open {
        let r = deliver(&rpc, &shared, epoch, &mut checked, &key).await;
        if lost(&r) {
            tracing::info!("the connection was lost while reconciling; the rest waits");
            online = false;
            break;
        }
    }
    // Runs until the connection's job sender is dropped; once the connection is lost the
    // remaining messages stay queued for the next connection.
    let mut poll = tokio::time::interval_at(Instant::now() + WATCH_POLL, WATCH_POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let job = tokio::select! {
            job = jobs.recv() => match job {
                Some(job) => job,
                None => break,
            },
            _ = poll.tick(), if online => {
                if watched::poll(&rpc, &shared, epoch).await.is_err() {
                    online = false;
                }
                continue;
            }
        };
        if !online {
            let _ = job.reply.send(Ok(SendOutcome::Queued));
            continue;
        }
        let r = deliver(&rpc, &shared, epoch, &mut checked, &job.key).await;
        if lost(&r) {
            online = false;
            let _ = job.reply.send(Ok(SendOutcome::Queued));
        } else {
            let _ = job.reply.send(r);
        }
    }
}

/// A reply found in `chat.history`: the message is finished, its reply reported.
async fn backfill(shared: &Shared, session_key: String, key: &str, text: String) {
    tracing::info!(session = %session_key, "reply found in chat.history (backfill)");
    shared.reg().finish(key);
    shared
        .emit(GatewayEvent::Final {
            session_key,
            run_id: key.to_string(),
            idempotency_key: key.to_string(),
            text,
            backfilled: true,
        })
        .await;
}

/// Make sure the gateway has message `key` exactly once.
async fn deliver(
    rpc: &Rpc,
    shared: &Shared,
    epoch: u64,
    checked: &mut HashMap<String, (Instant, History)>,
    key: &str,
) -> Result<SendOutcome, GatewayError> {
    let (session_key, text, state) = {
        let reg = shared.reg();
        match reg.entries.get(key) {
            // Finished, or taken on this very connection: nothing to do.
            Some(e) if e.state == EntryState::Sent && e.sent_on == epoch => {
                return Ok(SendOutcome::AlreadyKnown {
                    run_id: key.to_string(),
                })
            }
            Some(e) => (e.session_key.clone(), e.text.clone(), e.state),
            None => {
                return Ok(SendOutcome::AlreadyKnown {
                    run_id: key.to_string(),
                })
            }
        }
    };
    // A watched message may have been answered since the session was read on this connection.
    let stale = |at: &Instant| state == EntryState::Watch && at.elapsed() > WATCH_POLL / 2;
    if checked.get(&session_key).is_none_or(|(at, _)| stale(at)) {
        let h = rpc.history(&session_key, HISTORY_LIMIT).await?;
        checked.insert(session_key.clone(), (Instant::now(), h));
    }
    let finding = checked[&session_key].1.find(key);
    if state == EntryState::Watch {
        watched::found(shared, epoch, session_key, key, finding).await;
        return Ok(SendOutcome::AlreadyKnown {
            run_id: key.to_string(),
        });
    }
    match finding {
        HistoryFinding::Replied { text: reply } => {
            backfill(shared, session_key, key, reply).await;
            return Ok(SendOutcome::AlreadyKnown {
                run_id: key.to_string(),
            });
        }
        HistoryFinding::Accepted => {
            tracing::info!(session = %session_key, "message already in chat.history; not sent again");
            if let Some(e) = shared.reg().entries.get_mut(key) {
                e.state = EntryState::Sent;
                e.sent_on = epoch;
            }
            return Ok(SendOutcome::AlreadyKnown {
                run_id: key.to_string(),
            });
        }
        HistoryFinding::Unknown if state == EntryState::Sent => {
            // Taken on an earlier connection, and gone from history: the gateway lost it
            // (restart before it was recorded). Sending it again is the only way to a reply.
            tracing::warn!(session = %session_key, "a sent message is missing from chat.history; sending it again");
        }
        HistoryFinding::Unknown => {}
    }
    let res = rpc
        .call(
            "chat.send",
            &ChatSendParams {
                session_key: session_key.clone(),
                message: text,
                deliver: false,
                idempotency_key: key.to_string(),
                attachments: vec![],
            },
        )
        .await;
    match res {
        Ok(v) => {
            let run_id = v
                .get("runId")
                .and_then(Value::as_str)
                .unwrap_or(key)
                .to_string();
            let status = v.get("status").and_then(Value::as_str).unwrap_or("");
            let mut reg = shared.reg();
            if let Some(e) = reg.entries.get_mut(key) {
                e.state = EntryState::Sent;
                e.sent_on = epoch;
            }
            reg.runs
                .insert(run_id.clone(), (session_key, key.to_string()));
            Ok(if status == "started" {
                SendOutcome::Started { run_id }
            } else {
                SendOutcome::AlreadyKnown { run_id }
            })
        }
        Err(GatewayError::Rejected {
            method,
            code,
            message,
        }) => {
            shared.reg().finish(key);
            shared
                .emit(GatewayEvent::Error {
                    session_key,
                    run_id: key.to_string(),
                    code: code.clone(),
                    message: message.clone(),
                })
                .await;
            Err(GatewayError::Rejected {
                method,
                code,
                message,
            })
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests;
mod watched;
