//! The messages this client is responsible for (sent, waiting to be sent, or watched), and the
//! mapping of the gateway's `chat` / `agent` events of their runs onto [`GatewayEvent`]s.
//!
//! [`Shared`] is held by the supervisor and by each connection's send worker; the registry is
//! behind a plain mutex, never held across an `await`.

use super::GatewayEvent;
use crate::assistants::kinds::openclaw_gateway::frames::{self, AgentStream, ChatState};
use std::collections::{HashMap, HashSet};
use std::sync::Mutex;
use tokio::sync::mpsc;
use tokio::time::Instant;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum EntryState {
    /// Not (known to be) taken by the gateway.
    Queued,
    /// The gateway took it (`chat.send` answered, or found in history); waiting for its end.
    Sent,
    /// Sent before this client started: only its reply is looked up (never sent).
    Watch,
}

/// One message not yet finished.
#[derive(Debug)]
pub(super) struct Entry {
    pub(super) session_key: String,
    pub(super) text: String,
    pub(super) state: EntryState,
    /// The connection (see `Supervisor::epoch`) on which the gateway took it (a watched one:
    /// on which its run was last seen going).
    pub(super) sent_on: u64,
    /// A watched one: until when it is looked up again while its run goes.
    pub(super) watch_until: Option<Instant>,
}

/// Every message not yet finished, and what is remembered of the finished ones.
#[derive(Default)]
pub(super) struct Registry {
    /// Not yet finished, in the order they were sent.
    pub(super) order: Vec<String>,
    pub(super) entries: HashMap<String, Entry>,
    /// Keys whose run ended (final, aborted, error): never sent again.
    pub(super) done: HashSet<String>,
    /// run id → (session key as the caller named it, idempotency key).
    pub(super) runs: HashMap<String, (String, String)>,
    /// The last typing label / draft text per run (to not repeat it).
    pub(super) last_label: HashMap<String, String>,
    pub(super) last_draft: HashMap<String, String>,
}

impl Registry {
    pub(super) fn finish(&mut self, key: &str) {
        self.entries.remove(key);
        self.order.retain(|k| k != key);
        self.done.insert(key.to_string());
        self.last_label.remove(key);
        self.last_draft.remove(key);
    }

    pub(super) fn open_keys(&self) -> Vec<String> {
        self.order.clone()
    }
}

/// The registry and the sender of [`GatewayEvent`]s, shared by the supervisor and the send
/// worker of the current connection.
pub(super) struct Shared {
    registry: Mutex<Registry>,
    events: mpsc::Sender<GatewayEvent>,
}

impl Shared {
    pub(super) fn new(events: mpsc::Sender<GatewayEvent>) -> Self {
        Shared {
            registry: Mutex::new(Registry::default()),
            events,
        }
    }

    pub(super) fn reg(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) async fn emit(&self, ev: GatewayEvent) {
        if self.events.send(ev).await.is_err() {
            tracing::debug!("gateway event receiver dropped");
        }
    }

    /// A reply found in `chat.history`: the message is finished, its reply reported.
    pub(super) async fn backfill(&self, session_key: String, key: &str, text: String) {
        tracing::info!(session = %session_key, "reply found in chat.history (backfill)");
        self.reg().finish(key);
        self.emit(GatewayEvent::Final {
            session_key,
            run_id: key.to_string(),
            idempotency_key: key.to_string(),
            text,
            backfilled: true,
        })
        .await;
    }

    /// Map a `chat` event of one of our runs onto [`GatewayEvent`]s.
    pub(super) async fn on_chat(&self, ev: frames::ChatEvent) {
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
    pub(super) async fn on_agent(&self, ev: frames::AgentEvent) {
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
