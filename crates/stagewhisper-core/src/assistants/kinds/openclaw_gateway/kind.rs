//! The assistant kind `openclaw-gateway`: the app as an operator client of an OpenClaw gateway
//! (no channel plugin).
//!
//! `PUT /api/assistant {"kind":"openclaw-gateway","url","token","session_key"?}`:
//! - `url`: `ws://` only to a loopback host, `wss://` to any host (`invalid_url`,
//!   `insecure_url`); `token`: the gateway token (`invalid_token`), saved 0600 with the other
//!   settings, never returned or logged; `session_key` (`invalid_session_key`): the prefix of
//!   this app's own gateway sessions (default `stagewhisper`: a chat is `<prefix>-<chat id>`, a
//!   call's insights `<prefix>-insights-<call id>`), so the user's other OpenClaw chats are not
//!   mixed in. Unknown fields: `unknown_field`. Absent fields keep the saved value.
//! - A PUT that changes `url` or `token` discards the stored device token (the gateway accepts a
//!   wrong shared token when a valid device token comes with it; keeping it would hide the
//!   mistake).
//!
//! `GET /api/assistant`: `{kind, status, detail, pairing, server_version, device_id,
//! session_key}` (+ `code`, the client's stable code). `status`: `not_configured`,
//! `connecting`, `online`, `reconnecting`, `pairing_required` (with `pairing: {request_id,
//! command}`), `stopped`, or the final refusal's own code (`token_mismatch`,
//! `protocol_mismatch`, `unknown_field`, `device_rejected`, …; no retry until the settings change
//! or `POST /api/assistant/check`).
//!
//! Deliveries: a user message is `chat.send` with `idempotencyKey` = the stored message id; while
//! the gateway is down the outbox keeps it pending (the client also queues it and sends it on
//! reconnect after checking `chat.history`, so it starts exactly one run). Replies come back
//! through [`super::mapping`]. Stop: [`AssistantKind::abort`] → `chat.abort` of the session's run.
//! Transcript turns batched behind an insights run are [`Attempt::Held`]: pending in the store
//! until their batch is sent or refused (see [`super::mapping`]). Each time the client gets
//! online, [`super::recover`] hands it the recently sent messages whose reply is missing, so a
//! reply that finished while the app was down is backfilled once.

use super::client::{
    validate_url, GatewayClient, GatewayError, GatewayHandle, GatewaySettings, GatewayStatus,
    LinkState, SendOutcome,
};
use super::identity::DeviceTokenStore;
use super::mapping::{self, Admit, RunKind, Runs};
use super::recover;
use crate::assistants::delivery_queue::transcript_text;
use crate::assistants::prelude::DEFAULT_PRELUDE;
use crate::assistants::{AssistantContext, AssistantKind, Attempt, BoxFuture, KindError, Outgoing};
use crate::http::Shutdown;
use serde_json::{json, Map, Value};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

/// The kind id.
pub const KIND: &str = "openclaw-gateway";
/// The default prefix of this app's gateway sessions.
pub const DEFAULT_SESSION_KEY: &str = "stagewhisper";
/// Where the device identity and the device token live (inside the data dir).
pub const IDENTITY_DIR: &str = "gateway";
const MAX_TOKEN_LEN: usize = 4096;
const MAX_SESSION_KEY_LEN: usize = 64;
/// How long `PUT` waits for the first connection attempt to say something.
const FIRST_STATUS_WAIT: Duration = Duration::from_secs(3);

/// The saved settings (`assistants/openclaw-gateway.json`, 0600).
#[derive(Clone, PartialEq, Eq)]
struct Stored {
    url: String,
    token: String,
    session_key: String,
}

impl Stored {
    fn to_json(&self) -> Value {
        json!({"url": self.url, "token": self.token, "session_key": self.session_key})
    }

    fn from_json(v: &Value) -> Option<Stored> {
        Some(Stored {
            url: v["url"].as_str()?.to_string(),
            token: v["token"].as_str()?.to_string(),
            session_key: v["session_key"]
                .as_str()
                .unwrap_or(DEFAULT_SESSION_KEY)
                .to_string(),
        })
    }

    fn chat_key(&self, session_id: &str) -> String {
        format!("{}-{session_id}", self.session_key)
    }

    fn insights_key(&self, call_id: &str) -> String {
        format!("{}-insights-{call_id}", self.session_key)
    }
}

/// A running client.
struct Link {
    handle: GatewayHandle,
    stop: Shutdown,
}

struct Inner {
    ctx: Arc<AssistantContext>,
    stored: RwLock<Option<Stored>>,
    link: Mutex<Option<Link>>,
    active: AtomicBool,
    runs: Arc<Mutex<Runs>>,
    /// Counts started / stopped clients: the status of an older one is not reported.
    generation: Arc<AtomicU64>,
}

/// The `openclaw-gateway` kind (cheap to clone).
#[derive(Clone)]
pub struct GatewayKind {
    inner: Arc<Inner>,
}

impl GatewayKind {
    /// Loads the saved settings; the client runs only while the kind is active.
    pub fn start(ctx: Arc<AssistantContext>) -> GatewayKind {
        let stored = ctx.load_settings(KIND).as_ref().and_then(Stored::from_json);
        GatewayKind {
            inner: Arc::new(Inner {
                ctx,
                stored: RwLock::new(stored),
                link: Mutex::new(None),
                active: AtomicBool::new(false),
                runs: Arc::new(Mutex::new(Runs::default())),
                generation: Arc::new(AtomicU64::new(0)),
            }),
        }
    }

    fn identity_dir(&self) -> PathBuf {
        self.inner.ctx.data_dir.join(IDENTITY_DIR)
    }

    fn stored(&self) -> Option<Stored> {
        self.inner.stored.read().expect("stored lock").clone()
    }

    fn handle(&self) -> Option<GatewayHandle> {
        self.inner
            .link
            .lock()
            .expect("link lock")
            .as_ref()
            .map(|l| l.handle.clone())
    }

    fn stop_client(&self) {
        self.inner.generation.fetch_add(1, Ordering::SeqCst);
        if let Some(old) = self.inner.link.lock().expect("link lock").take() {
            old.stop.trigger();
        }
        // What that client had queued for insights is gone with it: the held turns go back to
        // the outbox, which offers them again (to the next client, or the next active kind).
        self.inner.runs.lock().expect("runs lock").link_restarted();
        self.inner.ctx.release_held();
    }

    /// (Re)starts the client with the saved settings (when active and configured).
    fn restart_client(&self) {
        self.stop_client();
        if !self.inner.active.load(Ordering::SeqCst) {
            return;
        }
        let Some(stored) = self.stored() else { return };
        let settings = GatewaySettings::new(stored.url.clone(), stored.token.clone());
        let stop = Shutdown::new();
        let (handle, events) =
            match GatewayClient::start(settings, &self.identity_dir(), stop.clone()) {
                Ok(x) => x,
                Err(e) => {
                    tracing::error!(code = e.code(), error = %e, "gateway client not started");
                    return;
                }
            };
        {
            // The app's shutdown stops the client too.
            let (app, stop) = (self.inner.ctx.shutdown.clone(), stop.clone());
            tokio::spawn(async move {
                tokio::select! {
                    _ = app.wait() => stop.trigger(),
                    _ = stop.wait() => {}
                }
            });
        }
        let ctx = self.inner.ctx.clone();
        let status_ctx = ctx.clone();
        let (generation, mine) = (
            self.inner.generation.clone(),
            self.inner.generation.load(Ordering::SeqCst),
        );
        let (runs, recover_handle) = (self.inner.runs.clone(), handle.clone());
        let on_status = move |st: &GatewayStatus| {
            if generation.load(Ordering::SeqCst) != mine {
                return; // a client replaced by newer settings (or stopped)
            }
            status_ctx.status_event(KIND, status_word(st), &st.detail, None);
            if st.state == LinkState::Online {
                // Pending entries can go now.
                status_ctx.retry_outbox_now();
                // Replies that finished while the app (or the link) was down.
                let (ctx, runs, handle, stored) = (
                    status_ctx.clone(),
                    runs.clone(),
                    recover_handle.clone(),
                    stored.clone(),
                );
                tokio::spawn(async move {
                    recover::recover(&ctx, &runs, &handle, |s| stored.chat_key(s)).await;
                });
            }
        };
        tokio::spawn(mapping::pump(
            ctx,
            self.inner.runs.clone(),
            handle.clone(),
            events,
            on_status,
        ));
        *self.inner.link.lock().expect("link lock") = Some(Link { handle, stop });
    }

    fn view(&self) -> Value {
        let stored = self.stored();
        let Some(stored) = stored else {
            return json!({"status": "not_configured", "configured": false,
                "detail": "Enter the OpenClaw gateway's WebSocket URL and token.",
                "pairing": null, "server_version": null, "device_id": null, "session_key": null});
        };
        let Some(handle) = self.handle() else {
            return json!({"status": "stopped", "configured": true,
                "detail": "The gateway link runs while this assistant kind is active.",
                "pairing": null, "server_version": null,
                "device_id": null,
                "session_key": stored.session_key, "url": stored.url});
        };
        let st = handle.status();
        json!({
            "status": status_word(&st),
            "configured": true,
            "code": st.code,
            "detail": st.detail,
            "pairing": st.pairing.as_ref().map(|p| json!({"request_id": p.request_id, "command": p.command})),
            "server_version": st.server_version,
            "device_id": st.device_id,
            "session_key": stored.session_key,
            "url": stored.url,
        })
    }

    /// Waits a little for the first connection attempt (so `PUT` answers something telling).
    async fn first_status(&self) {
        let Some(handle) = self.handle() else { return };
        let mut rx = handle.watch_status();
        let _ = tokio::time::timeout(
            FIRST_STATUS_WAIT,
            rx.wait_for(|s| s.state != LinkState::Connecting),
        )
        .await;
    }

    async fn send(
        &self,
        key: &str,
        app_session: &str,
        gateway_key: &str,
        text: &str,
        kind: RunKind,
    ) -> Attempt {
        let Some(handle) = self.handle() else {
            return Attempt::RetryAfter {
                code: "gateway_not_running",
                message: "The OpenClaw gateway link is not running.".into(),
                after: None,
            };
        };
        self.inner
            .runs
            .lock()
            .expect("runs lock")
            .register(key, app_session, gateway_key, kind);
        match handle.send(gateway_key, text, key).await {
            Ok(SendOutcome::Started { .. }) => Attempt::Delivered("started"),
            Ok(SendOutcome::AlreadyKnown { .. }) => Attempt::Delivered("already_known"),
            Ok(SendOutcome::Queued) => Attempt::RetryAfter {
                code: "gateway_offline",
                message: format!(
                    "Waiting for the OpenClaw gateway: {}",
                    handle.status().detail
                ),
                after: None,
            },
            Err(
                e @ (GatewayError::Offline | GatewayError::Stopped | GatewayError::Timeout { .. }),
            ) => Attempt::RetryAfter {
                code: "gateway_offline",
                message: e.to_string(),
                after: None,
            },
            Err(e) => {
                if kind != RunKind::Chat {
                    // A refused insights message must not hold up the call's next turns.
                    let next = self.inner.runs.lock().expect("runs lock").end_run(key);
                    if let Some(batch) = next {
                        let (ctx, runs, handle) = (
                            self.inner.ctx.clone(),
                            self.inner.runs.clone(),
                            handle.clone(),
                        );
                        tokio::spawn(async move {
                            mapping::send_batch(&ctx, &runs, &handle, batch).await;
                        });
                    }
                }
                Attempt::Failed {
                    code: "gateway_rejected",
                    message: e.to_string(),
                }
            }
        }
    }
}

/// The `status` word of the view.
fn status_word(st: &GatewayStatus) -> &'static str {
    match st.state {
        LinkState::Connecting => "connecting",
        LinkState::Online => "online",
        LinkState::Reconnecting => "reconnecting",
        LinkState::PairingRequired => "pairing_required",
        LinkState::Failed => st.code,
        LinkState::Stopped => "stopped",
    }
}

/// Validates a `PUT` body against the saved settings; the new settings.
fn parse_update(body: &Value, saved: Option<&Stored>) -> Result<Stored, KindError> {
    let Value::Object(map) = body else {
        return Err(KindError::bad(
            "invalid_json",
            "the body must be a JSON object",
        ));
    };
    if let Some(k) = map
        .keys()
        .find(|k| !matches!(k.as_str(), "url" | "token" | "session_key"))
    {
        return Err(KindError::bad(
            "unknown_field",
            format!(
                "unknown field `{k}` (the openclaw-gateway kind takes url, token, session_key)"
            ),
        ));
    }
    let url = match text_field(map, "url")? {
        Some(u) => {
            validate_url(&u).map_err(|e| KindError::bad(e.code(), e.to_string()))?;
            u
        }
        None => match saved {
            Some(s) => s.url.clone(),
            None => return Err(KindError::bad("missing_field", "`url` is required")),
        },
    };
    let token = match text_field(map, "token")? {
        Some(t) => {
            if t.len() > MAX_TOKEN_LEN || t.chars().any(|c| c.is_whitespace() || c.is_control()) {
                return Err(KindError::bad(
                    "invalid_token",
                    format!("the gateway token must be 1–{MAX_TOKEN_LEN} visible characters with no spaces (gateway.auth.token)"),
                ));
            }
            t
        }
        None => match saved {
            Some(s) => s.token.clone(),
            None => return Err(KindError::bad("missing_field", "`token` is required")),
        },
    };
    let session_key = match text_field(map, "session_key")? {
        Some(k) => {
            let ok = k.len() <= MAX_SESSION_KEY_LEN
                && k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
            if !ok {
                return Err(KindError::bad(
                    "invalid_session_key",
                    format!("`session_key` must be 1–{MAX_SESSION_KEY_LEN} letters, digits, '-', '_' or '.'"),
                ));
            }
            k
        }
        None => saved
            .map(|s| s.session_key.clone())
            .unwrap_or_else(|| DEFAULT_SESSION_KEY.to_string()),
    };
    Ok(Stored {
        url,
        token,
        session_key,
    })
}

/// A string field: absent, null or blank is `None`; another type is `invalid_field`.
fn text_field(map: &Map<String, Value>, name: &'static str) -> Result<Option<String>, KindError> {
    match map.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) if s.trim().is_empty() => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.trim().to_string())),
        Some(_) => Err(KindError::bad(
            "invalid_field",
            format!("`{name}` must be a string"),
        )),
    }
}

impl AssistantKind for GatewayKind {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn configure<'a>(&'a self, settings: &'a Value) -> BoxFuture<'a, Result<(), KindError>> {
        Box::pin(async move {
            let saved = self.stored();
            let new = parse_update(settings, saved.as_ref())?;
            if saved.as_ref() == Some(&new) && self.handle().is_some() {
                return Ok(());
            }
            self.inner.ctx.save_settings(KIND, &new.to_json())?;
            let credentials_changed = saved
                .as_ref()
                .is_none_or(|s| s.url != new.url || s.token != new.token);
            if credentials_changed {
                std::fs::create_dir_all(self.identity_dir()).ok();
                DeviceTokenStore::new(&self.identity_dir()).clear();
            }
            tracing::info!(url = %new.url, session_key = %new.session_key, "openclaw-gateway settings saved");
            *self.inner.stored.write().expect("stored lock") = Some(new);
            // The manager activates the kind after configure; start it now if it already is.
            self.restart_client();
            self.first_status().await;
            Ok(())
        })
    }

    fn status(&self) -> Value {
        self.view()
    }

    fn is_configured(&self) -> bool {
        self.stored().is_some()
    }

    fn remove(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.stop_client();
            self.inner.ctx.remove_settings(KIND);
            DeviceTokenStore::new(&self.identity_dir()).clear();
            *self.inner.stored.write().expect("stored lock") = None;
            tracing::info!("openclaw-gateway settings removed");
        })
    }

    fn check(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            // A final refusal waits for this (or new settings): connect again now.
            let failed = self
                .handle()
                .is_none_or(|h| matches!(h.status().state, LinkState::Failed | LinkState::Stopped));
            if failed {
                self.restart_client();
                self.first_status().await;
            }
        })
    }

    fn deliver<'a>(&'a self, entry: &'a Outgoing) -> BoxFuture<'a, Attempt> {
        Box::pin(async move {
            let Some(stored) = self.stored() else {
                return Attempt::RetryAfter {
                    code: "assistant_not_configured",
                    message: "No OpenClaw gateway is configured.".into(),
                    after: None,
                };
            };
            match entry {
                Outgoing::UserMessage {
                    task_id,
                    session_id,
                    text,
                    user_message_id,
                    ..
                } => {
                    let key = user_message_id.as_deref().unwrap_or(task_id);
                    let gw = stored.chat_key(session_id);
                    self.send(key, session_id, &gw, text, RunKind::Chat).await
                }
                Outgoing::Prelude {
                    task_id,
                    call_id,
                    session_id,
                    title,
                } => {
                    let text = self.inner.ctx.conversation.call_prelude_for(
                        call_id,
                        DEFAULT_PRELUDE,
                        title.as_deref(),
                    );
                    self.deliver_insights(
                        task_id,
                        session_id,
                        &stored.insights_key(call_id),
                        &text,
                        RunKind::Prelude,
                    )
                    .await
                }
                Outgoing::TranscriptTurn {
                    task_id,
                    call_id,
                    session_id,
                    speaker,
                    text,
                    ..
                } => {
                    let text = transcript_text(speaker.as_deref(), text);
                    self.deliver_insights(
                        task_id,
                        session_id,
                        &stored.insights_key(call_id),
                        &text,
                        RunKind::Insights,
                    )
                    .await
                }
                // The gateway has no "call ended"; the call's session simply gets no more turns.
                Outgoing::CallEnded { .. } => Attempt::Delivered("not_applicable"),
            }
        })
    }

    fn set_active(&self, active: bool) {
        let was = self.inner.active.swap(active, Ordering::SeqCst);
        if was == active {
            return;
        }
        if active {
            self.restart_client();
        } else {
            self.stop_client();
        }
    }

    fn session_deleted(&self, session_id: &str) {
        self.inner
            .runs
            .lock()
            .expect("runs lock")
            .forget_session(session_id);
    }

    fn abort(&self, session_id: &str) -> BoxFuture<'_, Result<(), KindError>> {
        let session_id = session_id.to_string();
        Box::pin(async move {
            let running = self
                .inner
                .runs
                .lock()
                .expect("runs lock")
                .running_in(&session_id);
            let Some((key, run)) = running else {
                return Err(KindError {
                    status: 409,
                    code: "nothing_running",
                    message: "No reply is running in this session.".into(),
                });
            };
            let Some(handle) = self.handle() else {
                return Err(KindError {
                    status: 503,
                    code: "gateway_offline",
                    message: "The OpenClaw gateway link is not running.".into(),
                });
            };
            match handle.abort(&run.gateway_key, Some(&key)).await {
                Ok(_) => {
                    tracing::info!(run = %key, "reply stopped (chat.abort)");
                    Ok(())
                }
                Err(e @ (GatewayError::Offline | GatewayError::Stopped)) => Err(KindError {
                    status: 503,
                    code: "gateway_offline",
                    message: e.to_string(),
                }),
                Err(e) => Err(KindError {
                    status: 502,
                    code: "abort_failed",
                    message: e.to_string(),
                }),
            }
        })
    }
}

impl GatewayKind {
    async fn deliver_insights(
        &self,
        task_id: &str,
        session_id: &str,
        gateway_key: &str,
        text: &str,
        kind: RunKind,
    ) -> Attempt {
        let admit = self
            .inner
            .runs
            .lock()
            .expect("runs lock")
            .admit_insights(session_id, task_id, text);
        match admit {
            // Pending in the store until the batch is sent (see `mapping`).
            Admit::Batched => Attempt::Held("batched"),
            Admit::Send => {
                self.send(task_id, session_id, gateway_key, text, kind)
                    .await
            }
        }
    }
}
