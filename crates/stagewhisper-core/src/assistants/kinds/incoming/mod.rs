//! The `incoming` assistant kind (the **direct relay**): any assistant that speaks
//! `POST {base}/v1/incoming` (the Hermes adapter, the OpenClaw channel's `http` transport).
//! It implements [`AssistantKind`]; the generic outbox ([`crate::assistants::delivery_queue`]) owns
//! durability, this module only performs attempts:
//!
//! - [`attempt`]: one `POST /v1/incoming` per attempt — the body, the HTTP call, the answer's
//!   classification (`202 accepted` / `in_flight` / `200 duplicate` delivered; connection
//!   errors, 408/425/429/5xx retry; other 4xx fail with a code and a sentence), and the switch
//!   to `GET /v1/events` when the assistant rejects the callback URL.
//! - [`probe`]: `GET /v1/health` + `POST /v1/ping` drive the status (online / auth failed /
//!   unreachable / misconfigured / not configured), detect `GET /v1/events`, and compare the
//!   adapter's version with the provider registry.
//! - [`events`]: the no-callback fallback — reads `GET /v1/events?session_id=…` (SSE,
//!   `Last-Event-ID`) and feeds each body to the same path as the callback listener
//!   ([`crate::protocol::parse_callback`] then [`Conversation::submit`]), so dedupe makes
//!   switching modes harmless.

pub mod attempt;
pub mod client;
pub mod config;
pub mod entry;
pub mod events;
pub mod probe;
pub mod sse;
pub mod timing;

pub use timing::LinkSettings;

use crate::assistants::prelude::DEFAULT_PRELUDE;
use crate::assistants::state::AssistantState;
use crate::assistants::CallbackTarget;
use crate::assistants::{AssistantContext, AssistantKind, Attempt, BoxFuture, KindError, Outgoing};
use crate::clock::fmt_time;
use crate::conversation::Conversation;
use crate::http::Shutdown;
use config::{ConfigError, LinkConfig, Mode, StoredConfig};
use serde::Serialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use tokio::sync::Notify;

impl LinkSettings {
    pub fn timeouts(&self) -> client::Timeouts {
        client::Timeouts {
            connect: self.connect_timeout,
            response: self.request_timeout,
        }
    }
}

/// The link's status as the call bar and the settings show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StatusKind {
    NotConfigured,
    /// Configured, first check not finished yet.
    Checking,
    Online,
    AuthFailed,
    Unreachable,
    /// Reachable, but it refuses what we send (wrong URL path, Host or callback URL not
    /// allowed, …): the detail says what to change.
    Misconfigured,
}

impl StatusKind {
    pub fn as_str(self) -> &'static str {
        match self {
            StatusKind::NotConfigured => "not_configured",
            StatusKind::Checking => "checking",
            StatusKind::Online => "online",
            StatusKind::AuthFailed => "auth_failed",
            StatusKind::Unreachable => "unreachable",
            StatusKind::Misconfigured => "misconfigured",
        }
    }
}

#[derive(Debug, Clone)]
struct Status {
    kind: StatusKind,
    detail: String,
    checked_at: Option<String>,
    version: Option<String>,
    /// `GET /v1/events`: `Some(true)` offered, `Some(false)` missing (404), `None` not known.
    events_support: Option<bool>,
    events_detail: String,
    /// Why replies currently come over `/v1/events` although the mode is `auto`.
    fallback: Option<String>,
    /// The last delivery failure `{code, message, at}`.
    last_error: Option<Value>,
    /// The adapter reports a version StageWhisper is not tested with (plain words).
    warning: Option<String>,
    /// The assistant rejected our callback URL and there is no fallback: the link stays
    /// misconfigured (whatever `/v1/ping` says) until a send with a callback works again.
    callback_problem: Option<String>,
}

impl Status {
    fn not_configured() -> Status {
        Status {
            kind: StatusKind::NotConfigured,
            detail: "No assistant is configured: set its base URL and relay token in Settings → \
                     Assistant."
                .into(),
            checked_at: None,
            version: None,
            events_support: None,
            events_detail: "Not checked yet.".into(),
            fallback: None,
            last_error: None,
            warning: None,
            callback_problem: None,
        }
    }
}

/// A running `/v1/events` reader.
struct Reader {
    generation: u64,
    task: tokio::task::AbortHandle,
}

pub(crate) struct Inner {
    ctx: Arc<AssistantContext>,
    conversation: Conversation,
    callback: Arc<CallbackTarget>,
    settings: LinkSettings,
    config: RwLock<Option<Arc<LinkConfig>>>,
    /// Bumped on every configuration change; workers of an older generation stop.
    generation: AtomicU64,
    status: Mutex<Status>,
    probe_now: Notify,
    /// The active kind: checks run and `/v1/events` readers are kept only while active.
    active: AtomicBool,
    readers: Mutex<HashMap<String, Reader>>,
    shutdown: Shutdown,
}

/// The `incoming` kind (cheap to clone).
#[derive(Clone)]
pub struct IncomingKind {
    inner: Arc<Inner>,
}

/// A `PUT /api/assistant` request of the `incoming` kind.
#[derive(Debug, Default)]
pub struct ConfigUpdate {
    pub base_url: String,
    /// `None` keeps the saved token.
    pub relay_token: Option<String>,
    /// `None` keeps the saved prelude; `Some(None)` resets to the default.
    pub prelude: Option<Option<String>>,
    /// `None` keeps the saved mode.
    pub mode: Option<Mode>,
}

#[derive(Debug, thiserror::Error)]
pub enum UpdateError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("no relay token is saved yet: send `relay_token`")]
    TokenMissing,
}

impl UpdateError {
    pub fn code(&self) -> &'static str {
        match self {
            UpdateError::Config(e) => e.code(),
            UpdateError::TokenMissing => "missing_field",
        }
    }
}

impl From<UpdateError> for KindError {
    fn from(e: UpdateError) -> KindError {
        let status = if e.code() == "config_write_failed" {
            500
        } else {
            400
        };
        KindError {
            status,
            code: e.code(),
            message: e.to_string(),
        }
    }
}

/// The `incoming` kind's JSON settings: `{base_url, relay_token?, prelude?, mode?}`.
pub fn parse_update(b: &Value) -> Result<ConfigUpdate, KindError> {
    let string = |k: &str| -> Result<Option<String>, KindError> {
        match b.get(k) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) => Ok(Some(s.clone())),
            Some(_) => Err(KindError::bad(
                "invalid_field",
                format!("`{k}` must be a string"),
            )),
        }
    };
    let Some(base_url) = string("base_url")? else {
        return Err(KindError::bad(
            "missing_field",
            "`base_url` is required (e.g. http://127.0.0.1:8644)",
        ));
    };
    let relay_token = string("relay_token")?.filter(|t| !t.trim().is_empty());
    let prelude = match b.get("prelude") {
        None => None,
        Some(Value::Null) => Some(None),
        Some(Value::String(s)) => Some(Some(s.clone())),
        Some(_) => {
            return Err(KindError::bad(
                "invalid_field",
                "`prelude` must be a string or null",
            ))
        }
    };
    let mode = match string("mode")? {
        None => None,
        Some(m) => Some(Mode::parse(&m).ok_or_else(|| {
            KindError::bad(
                "invalid_field",
                "`mode` must be \"auto\", \"callback\" or \"events\"",
            )
        })?),
    };
    Ok(ConfigUpdate {
        base_url,
        relay_token,
        prelude,
        mode,
    })
}

impl IncomingKind {
    pub const KIND: &'static str = "incoming";

    /// Loads the saved configuration (the settings store's `incoming` section +
    /// `assistant_relay_token`) and starts the status checks; `/v1/events` readers left from the last
    /// run resume when the kind is active.
    pub fn start(ctx: Arc<AssistantContext>, settings: LinkSettings) -> IncomingKind {
        let config = match config::load(&ctx.data_dir, &ctx.settings) {
            Ok(c) => c.map(Arc::new),
            Err(e) => {
                tracing::error!(error = %e, "the saved assistant configuration is unusable; the link is not configured");
                None
            }
        };
        let mut status = Status::not_configured();
        if let Some(c) = &config {
            status.kind = StatusKind::Checking;
            status.detail = format!("Checking {} …", c.stored.base_url);
            tracing::info!(base_url = %c.stored.base_url, mode = c.stored.mode.as_str(), "assistant link configured");
        } else {
            tracing::info!("no assistant configured");
        }
        let inner = Arc::new(Inner {
            conversation: ctx.conversation.clone(),
            callback: ctx.callback.clone(),
            shutdown: ctx.shutdown.clone(),
            ctx,
            settings,
            config: RwLock::new(config),
            generation: AtomicU64::new(1),
            status: Mutex::new(status),
            probe_now: Notify::new(),
            active: AtomicBool::new(false),
            readers: Mutex::new(HashMap::new()),
        });
        tokio::spawn(inner.clone().probe_loop());
        IncomingKind { inner }
    }

    pub fn conversation(&self) -> &Conversation {
        &self.inner.conversation
    }

    pub fn is_configured(&self) -> bool {
        self.inner.config().is_some()
    }

    /// Saves a new configuration, checks it at once and returns the resulting view.
    pub async fn configure_update(&self, update: ConfigUpdate) -> Result<Value, UpdateError> {
        let old = self.inner.config();
        let token = match update.relay_token {
            Some(t) => t.trim().to_string(),
            None => old
                .as_ref()
                .map(|c| c.relay_token().to_string())
                .ok_or(UpdateError::TokenMissing)?,
        };
        let prelude = match update.prelude {
            Some(p) => p.filter(|p| !p.trim().is_empty()),
            None => old.as_ref().and_then(|c| c.stored.prelude.clone()),
        };
        if prelude
            .as_ref()
            .is_some_and(|p| p.chars().count() > config::MAX_PRELUDE_LEN)
        {
            return Err(ConfigError::PreludeTooLong.into());
        }
        let mode = update
            .mode
            .or(old.as_ref().map(|c| c.stored.mode))
            .unwrap_or_default();
        let cfg = LinkConfig::new(
            StoredConfig {
                base_url: update.base_url,
                mode,
                prelude,
            },
            token,
        )?;
        config::save(&self.inner.ctx.data_dir, &self.inner.ctx.settings, &cfg)?;
        tracing::info!(base_url = %cfg.stored.base_url, mode = mode.as_str(), "assistant link configuration saved");
        self.inner.install(Some(Arc::new(cfg)));
        self.inner.check_now().await;
        self.inner.ctx.retry_outbox_now();
        Ok(self.view())
    }

    pub fn status_kind(&self) -> StatusKind {
        self.inner.status.lock().expect("status lock").kind
    }

    /// The kind's part of `GET /api/assistant` (the manager adds `kind`).
    pub fn view(&self) -> Value {
        self.inner.view()
    }
}

impl AssistantKind for IncomingKind {
    fn kind(&self) -> &'static str {
        Self::KIND
    }

    fn configure<'a>(&'a self, settings: &'a Value) -> BoxFuture<'a, Result<(), KindError>> {
        Box::pin(async move {
            let update = parse_update(settings)?;
            self.configure_update(update).await.map_err(|e| {
                tracing::warn!(code = e.code(), error = %e, "assistant configuration refused");
                KindError::from(e)
            })?;
            Ok(())
        })
    }

    fn status(&self) -> Value {
        self.view()
    }

    fn is_configured(&self) -> bool {
        self.inner.config().is_some()
    }

    fn remove(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            config::remove(&self.inner.ctx.data_dir, &self.inner.ctx.settings);
            self.inner.install(None);
            tracing::info!("assistant link configuration removed");
        })
    }

    fn check(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move { self.inner.check_now().await })
    }

    fn deliver<'a>(&'a self, entry: &'a Outgoing) -> BoxFuture<'a, Attempt> {
        Box::pin(async move {
            let Some(cfg) = self.inner.config() else {
                return Attempt::RetryAfter {
                    code: "assistant_not_configured",
                    message: "No assistant is configured.".into(),
                    after: None,
                };
            };
            self.inner.deliver(&cfg, entry).await
        })
    }

    fn set_active(&self, active: bool) {
        let was = self.inner.active.swap(active, Ordering::SeqCst);
        if was == active {
            return;
        }
        if active {
            self.inner.probe_now.notify_one();
            self.inner.resume_readers();
        } else {
            for (_, r) in self.inner.readers.lock().expect("readers lock").drain() {
                r.task.abort();
            }
        }
    }

    fn session_deleted(&self, session_id: &str) {
        self.inner.forget_session(session_id);
    }
}

impl Inner {
    pub(crate) fn config(&self) -> Option<Arc<LinkConfig>> {
        self.config.read().expect("config lock").clone()
    }

    fn is_active(&self) -> bool {
        self.active.load(Ordering::SeqCst)
    }

    fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Replaces the configuration: a new generation, status back to checking, readers stopped.
    fn install(&self, cfg: Option<Arc<LinkConfig>>) {
        let base = cfg.as_ref().map(|c| c.stored.base_url.clone());
        *self.config.write().expect("config lock") = cfg;
        self.generation.fetch_add(1, Ordering::SeqCst);
        {
            let mut s = self.status.lock().expect("status lock");
            *s = Status::not_configured();
            if let Some(b) = base {
                s.kind = StatusKind::Checking;
                s.detail = format!("Checking {b} …");
            }
        }
        for (_, r) in self.readers.lock().expect("readers lock").drain() {
            r.task.abort();
        }
        self.probe_now.notify_one();
        self.ctx.wake_outbox();
    }

    /// Sets the status; logs when it changes (never with a token in it).
    pub(crate) fn set_status(&self, kind: StatusKind, detail: String) {
        let mut s = self.status.lock().expect("status lock");
        let changed = s.kind != kind || s.detail != detail;
        let was = s.kind;
        s.kind = kind;
        s.detail = detail;
        s.checked_at = Some(fmt_time(self.conversation.clock().now()));
        drop(s);
        if changed {
            let (detail, checked_at) = {
                let s = self.status.lock().expect("status lock");
                (s.detail.clone(), s.checked_at.clone())
            };
            if self.is_active() {
                self.ctx.status_event(
                    IncomingKind::KIND,
                    kind.as_str(),
                    &detail,
                    checked_at.as_deref(),
                );
            }
            match kind {
                StatusKind::Online | StatusKind::Checking | StatusKind::NotConfigured => {
                    tracing::info!(status = kind.as_str(), was = was.as_str(), %detail, "assistant link status")
                }
                _ => {
                    tracing::warn!(status = kind.as_str(), was = was.as_str(), %detail, "assistant link status")
                }
            }
        }
        if kind == StatusKind::Online && was != StatusKind::Online {
            self.ctx.retry_outbox_now();
        }
    }

    pub(crate) fn status_kind(&self) -> StatusKind {
        self.status.lock().expect("status lock").kind
    }

    pub(crate) fn set_last_error(&self, code: &str, message: &str) {
        let at = fmt_time(self.conversation.clock().now());
        self.status.lock().expect("status lock").last_error =
            Some(json!({"code": code, "message": message, "at": at}));
    }

    /// The adapter's version from `GET /v1/health` (only the Hermes adapter reports one),
    /// compared with the versions StageWhisper is tested with.
    pub(crate) fn set_version(&self, version: &str) {
        let warning = crate::assistants::providers::version_warning(
            "hermes-adapter",
            "hermes-platform-stagewhisper",
            version,
        );
        let mut s = self.status.lock().expect("status lock");
        if warning.is_some() && s.warning != warning {
            tracing::warn!(version, "untested assistant adapter version");
        }
        s.version = Some(version.to_string());
        s.warning = warning;
    }

    pub(crate) fn events_support(&self) -> Option<bool> {
        self.status.lock().expect("status lock").events_support
    }

    pub(crate) fn set_events_support(&self, support: Option<bool>, detail: String) {
        let mut s = self.status.lock().expect("status lock");
        if s.events_support != support {
            tracing::info!(supported = ?support, %detail, "assistant GET /v1/events fallback");
        }
        s.events_support = support;
        s.events_detail = detail;
    }

    /// Replies come over `/v1/events` (mode `events`, or `auto` after a rejected callback).
    pub(crate) fn uses_events(&self, cfg: &LinkConfig) -> bool {
        cfg.stored.mode == Mode::Events
            || (cfg.stored.mode == Mode::Auto
                && self.status.lock().expect("status lock").fallback.is_some())
    }

    pub(crate) fn set_callback_problem(&self, problem: Option<String>) {
        self.status.lock().expect("status lock").callback_problem = problem;
    }

    pub(crate) fn callback_problem(&self) -> Option<String> {
        self.status
            .lock()
            .expect("status lock")
            .callback_problem
            .clone()
    }

    pub(crate) fn set_fallback(&self, reason: String) {
        tracing::warn!(%reason, "switching to GET /v1/events for replies");
        self.status.lock().expect("status lock").fallback = Some(reason);
    }

    fn view(&self) -> Value {
        let cfg = self.config();
        let s = self.status.lock().expect("status lock").clone();
        let delivery = match &cfg {
            Some(c) if self.uses_events(c) => "events",
            Some(_) => "callback",
            None => "none",
        };
        json!({
            "kind": IncomingKind::KIND,
            "configured": cfg.is_some(),
            "base_url": cfg.as_ref().map(|c| c.stored.base_url.clone()),
            "relay_token_set": cfg.is_some(),
            "status": s.kind.as_str(),
            "detail": s.detail,
            "checked_at": s.checked_at,
            "assistant_version": s.version,
            "warning": s.warning,
            "supports_events_fallback": s.events_support,
            "events_fallback_detail": s.events_detail,
            "mode": cfg.as_ref().map(|c| c.stored.mode.as_str()).unwrap_or("auto"),
            "delivery": delivery,
            "fallback_reason": s.fallback,
            "prelude": cfg.as_ref().map(|c| c.prelude().to_string()).unwrap_or_else(|| DEFAULT_PRELUDE.to_string()),
            "prelude_is_default": cfg.as_ref().is_none_or(|c| c.stored.prelude.is_none()),
            "default_prelude": DEFAULT_PRELUDE,
            "callback_url": self.callback.url(),
            "last_error": s.last_error,
        })
    }

    // ---- persisted state (the `/v1/events` cursors live in the outbox's state) ----

    pub(crate) fn with_state<T>(&self, f: impl FnOnce(&mut AssistantState) -> (T, bool)) -> T {
        self.ctx.with_state(f)
    }

    fn forget_session(&self, id: &str) {
        let insights = format!("{}{id}", crate::protocol::INSIGHTS_PREFIX);
        self.with_state(|st| {
            let b = st.streams.remove(id).is_some();
            let c = st.streams.remove(&insights).is_some();
            ((), b || c)
        });
        let mut readers = self.readers.lock().expect("readers lock");
        for k in [id, insights.as_str()] {
            if let Some(r) = readers.remove(k) {
                r.task.abort();
            }
        }
    }
}
