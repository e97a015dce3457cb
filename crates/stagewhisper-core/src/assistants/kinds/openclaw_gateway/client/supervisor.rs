//! The supervisor: the one task behind a [`GatewayHandle`](super::GatewayHandle). It connects,
//! serves the connection while it is online ([`online`](super::online)), reconnects with backoff
//! or waits for pairing approval, keeps the status, and answers commands while offline.

use super::registry::{Entry, EntryState, Shared};
use super::{
    Command, GatewayError, GatewayEvent, GatewaySettings, GatewayStatus, LinkState, Pairing,
    SendOutcome, BACKOFF, WATCH_FOR,
};
use crate::assistants::kinds::openclaw_gateway::identity::{DeviceIdentity, DeviceTokenStore};
use crate::backoff::Retries;
use crate::http::Shutdown;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

/// Why one connection ended, or why it never got online.
#[derive(Debug)]
pub(super) enum Outcome {
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

/// The client's task; see the module documentation.
pub(super) struct Supervisor {
    pub(super) url: url::Url,
    pub(super) settings: GatewaySettings,
    pub(super) identity: Arc<DeviceIdentity>,
    pub(super) tokens: DeviceTokenStore,
    pub(super) shared: Arc<Shared>,
    pub(super) status: watch::Sender<GatewayStatus>,
    pub(super) cmd_rx: mpsc::Receiver<Command>,
    pub(super) shutdown: Shutdown,
    /// Counts connections that reached `hello-ok` (1 = the first).
    pub(super) epoch: u64,
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

    pub(super) async fn run(mut self) {
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
    pub(super) fn register(&self, session_key: &str, text: &str, key: &str) -> Option<SendOutcome> {
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

    /// Records a message to look up (see
    /// [`GatewayHandle::watch`](super::GatewayHandle::watch)); `true` if it is new.
    pub(super) fn register_watch(&self, session_key: &str, key: &str) -> bool {
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
}
