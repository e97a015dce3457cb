//! Assistants the app talks to. Today one kind: the **direct relay** — any assistant that
//! speaks `POST {base}/v1/incoming` (the Hermes adapter, the OpenClaw channel).
//!
//! The conversation stores every outgoing entry (user message, final transcript turn) with
//! `delivery: pending` before the link sees it; the link is an outbox over that:
//!
//! - [`outbox`]: picks the oldest pending entry, records its task id (`set_delivery(Pending,
//!   task_id)`) **before** the first attempt, sends it, and records `sent` / `failed`. Connection
//!   errors, 408/425/429/5xx are retried with backoff under the same task id (also after a
//!   restart), `202 in_flight` / `200 duplicate` count as delivered, other 4xx fail the entry
//!   with a code and a sentence; only a user retry gets a new task id. Each call's
//!   `system_prelude` goes before its first transcript turn.
//! - [`probe`]: `GET /v1/health` + `POST /v1/ping` drive the status (online / auth failed /
//!   unreachable / misconfigured / not configured) and detect `GET /v1/events`.
//! - [`events`]: the no-callback fallback — reads `GET /v1/events?session_id=…` (SSE,
//!   `Last-Event-ID`) and feeds each body to the same path as the callback listener
//!   ([`crate::protocol::parse_callback`] then [`Conversation::submit`]), so dedupe makes
//!   switching modes harmless.
//! - [`api`]: the control API routes (`/api/assistant`, transcript input, summarise, retry).

pub mod api;
pub mod client;
pub mod config;
pub mod events;
pub mod outbox;
pub mod probe;
pub mod sse;
pub mod state;
pub mod summary;

use crate::clock::fmt_time;
use crate::conversation::Conversation;
use crate::http::Shutdown;
use crate::tokens::Secret;
use config::{ConfigError, LinkConfig, Mode, StoredConfig, DEFAULT_PRELUDE};
use serde::Serialize;
use serde_json::{json, Value};
use state::{LinkState, PreludeRecord, PreludeState, StateFile};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::Notify;

/// Where the assistant posts replies: this app's callback origin (a tunnel may change it, so it
/// is read at send time) and the callback token (rotatable).
pub struct CallbackTarget {
    url: RwLock<String>,
    token: Arc<Secret>,
}

impl CallbackTarget {
    pub fn new(url: String, token: Arc<Secret>) -> Self {
        CallbackTarget {
            url: RwLock::new(url),
            token,
        }
    }

    pub fn url(&self) -> String {
        self.url.read().expect("url lock").clone()
    }

    /// E.g. a tunnel came up: later sends carry the new origin.
    pub fn set_url(&self, url: String) {
        *self.url.write().expect("url lock") = url;
    }

    pub fn token(&self) -> String {
        self.token.get()
    }
}

/// Timing of the link (tests shorten it).
#[derive(Debug, Clone, Copy)]
pub struct LinkSettings {
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    /// First retry delay after a connection error / 429 / 5xx; doubles up to `backoff_max`.
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// Status check interval while online.
    pub probe_interval: Duration,
    /// First status re-check while not online (doubles up to `probe_interval`).
    pub probe_retry: Duration,
    /// A `/v1/events` reader stops after this long without a send or an event in its session.
    pub events_idle: Duration,
    /// Smallest gap between two sends to the same assistant session. OpenClaw 0.64 loses both
    /// replies when two turns of one session arrive back to back (measured: 0 ms apart → 0 of 2
    /// replies, 3 of 3 runs; ≥ 50 ms → 2 of 2).
    pub min_session_gap: Duration,
}

impl Default for LinkSettings {
    fn default() -> Self {
        LinkSettings {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            backoff_initial: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            probe_interval: Duration::from_secs(30),
            probe_retry: Duration::from_secs(2),
            events_idle: Duration::from_secs(15 * 60),
            min_session_gap: Duration::from_millis(250),
        }
    }
}

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
    conversation: Conversation,
    dir: PathBuf,
    callback: Arc<CallbackTarget>,
    settings: LinkSettings,
    config: RwLock<Option<Arc<LinkConfig>>>,
    /// Bumped on every configuration change; workers of an older generation stop.
    generation: AtomicU64,
    status: Mutex<Status>,
    /// New work for the outbox.
    wake: Notify,
    /// The outbox should stop waiting out its backoff (configuration changed, back online).
    retry_now: Notify,
    probe_now: Notify,
    state_file: StateFile,
    state: Mutex<LinkState>,
    readers: Mutex<HashMap<String, Reader>>,
    shutdown: Shutdown,
}

/// Handle to the assistant link (cheap to clone).
#[derive(Clone)]
pub struct AssistantLink {
    inner: Arc<Inner>,
}

/// A `PUT /api/assistant` request.
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

impl AssistantLink {
    /// Loads the saved configuration and state and starts the workers (outbox, status checks,
    /// the conversation watcher, `/v1/events` readers left from the last run).
    pub async fn start(
        conversation: Conversation,
        dir: PathBuf,
        callback: Arc<CallbackTarget>,
        settings: LinkSettings,
        shutdown: Shutdown,
    ) -> AssistantLink {
        let config = match config::load(&dir) {
            Ok(c) => c.map(Arc::new),
            Err(e) => {
                tracing::error!(error = %e, "the saved assistant configuration is unusable; the link is not configured");
                None
            }
        };
        let state_file = StateFile::new(&dir);
        let mut state = state_file.load();
        state.prune(conversation.clock().now_ms());
        let mut status = Status::not_configured();
        if let Some(c) = &config {
            status.kind = StatusKind::Checking;
            status.detail = format!("Checking {} …", c.stored.base_url);
            tracing::info!(base_url = %c.stored.base_url, mode = c.stored.mode.as_str(), "assistant link configured");
        } else {
            tracing::info!("no assistant configured");
        }
        let cursor = conversation.store().last_event_id().await.unwrap_or(0);
        let inner = Arc::new(Inner {
            conversation,
            dir,
            callback,
            settings,
            config: RwLock::new(config),
            generation: AtomicU64::new(1),
            status: Mutex::new(status),
            wake: Notify::new(),
            retry_now: Notify::new(),
            probe_now: Notify::new(),
            state_file,
            state: Mutex::new(state),
            readers: Mutex::new(HashMap::new()),
            shutdown,
        });
        tokio::spawn(inner.clone().outbox_loop());
        tokio::spawn(inner.clone().probe_loop());
        tokio::spawn(inner.clone().watch_conversation(cursor));
        inner.resume_readers();
        AssistantLink { inner }
    }

    pub fn conversation(&self) -> &Conversation {
        &self.inner.conversation
    }

    /// Something new may be pending.
    pub fn wake(&self) {
        self.inner.wake.notify_one();
    }

    /// Sends again now instead of waiting out the backoff.
    pub fn retry_now(&self) {
        self.inner.retry_now.notify_waiters();
        self.inner.wake.notify_one();
    }

    pub fn is_configured(&self) -> bool {
        self.inner.config().is_some()
    }

    /// Saves a new configuration, checks it at once and returns the resulting view.
    pub async fn configure(&self, update: ConfigUpdate) -> Result<Value, UpdateError> {
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
        config::save(&self.inner.dir, &cfg)?;
        tracing::info!(base_url = %cfg.stored.base_url, mode = mode.as_str(), "assistant link configuration saved");
        self.inner.install(Some(Arc::new(cfg)));
        self.inner.check_now().await;
        self.retry_now();
        Ok(self.view())
    }

    /// Forgets the configuration (pending entries stay pending until a new one is saved).
    pub fn remove(&self) -> Value {
        config::remove(&self.inner.dir);
        self.inner.install(None);
        tracing::info!("assistant link configuration removed");
        self.view()
    }

    /// Runs the status check now.
    pub async fn check(&self) -> Value {
        self.inner.check_now().await;
        self.retry_now();
        self.view()
    }

    pub fn status_kind(&self) -> StatusKind {
        self.inner.status.lock().expect("status lock").kind
    }

    /// `GET /api/assistant`.
    pub fn view(&self) -> Value {
        self.inner.view()
    }
}

impl Inner {
    pub(crate) fn config(&self) -> Option<Arc<LinkConfig>> {
        self.config.read().expect("config lock").clone()
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
        self.wake.notify_one();
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
            let conversation = self.conversation.clone();
            let data = json!({"type": "assistant_status",
                "assistant": {"status": kind.as_str(), "detail": detail, "checked_at": checked_at}});
            tokio::spawn(async move {
                if let Err(e) = conversation.app_event(data).await {
                    tracing::debug!(error = %e, "assistant status not logged");
                }
            });
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
            self.retry_now.notify_waiters();
            self.wake.notify_one();
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
            "configured": cfg.is_some(),
            "base_url": cfg.as_ref().map(|c| c.stored.base_url.clone()),
            "relay_token_set": cfg.is_some(),
            "status": s.kind.as_str(),
            "detail": s.detail,
            "checked_at": s.checked_at,
            "assistant_version": s.version,
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

    // ---- persisted link state ----

    pub(crate) fn with_state<T>(&self, f: impl FnOnce(&mut LinkState) -> (T, bool)) -> T {
        let mut st = self.state.lock().expect("state lock");
        let (out, dirty) = f(&mut st);
        if dirty {
            self.state_file.save(&st);
        }
        out
    }

    /// Creates a pending prelude record for a call (once); `true` if one was created.
    pub(crate) fn ensure_prelude(&self, call_id: &str) -> bool {
        if self.config().is_none() {
            return false;
        }
        let now = self.conversation.clock().now_ms();
        self.with_state(|st| {
            if st.preludes.contains_key(call_id) {
                return (false, false);
            }
            st.preludes.insert(
                call_id.to_string(),
                PreludeRecord {
                    task_id: uuid::Uuid::new_v4().to_string(),
                    state: PreludeState::Pending,
                    created_ms: now,
                },
            );
            (true, true)
        })
    }

    pub(crate) fn set_prelude_state(&self, call_id: &str, state: PreludeState) {
        self.with_state(|st| match st.preludes.get_mut(call_id) {
            Some(p) if p.state != state => {
                p.state = state;
                ((), true)
            }
            _ => ((), false),
        })
    }

    /// Follows the conversation's event log: wakes the outbox for new outgoing entries, queues
    /// a call's prelude when it starts, forgets deleted sessions.
    async fn watch_conversation(self: Arc<Self>, cursor: i64) {
        let store = self.conversation.store().clone();
        let mut sub = self.conversation.hub().subscribe(store, cursor);
        loop {
            let e = tokio::select! {
                e = sub.next() => e,
                _ = self.shutdown.wait() => break,
            };
            let e = match e {
                Ok(e) => e,
                Err(err) => {
                    tracing::warn!(error = %err, "assistant link: event log read failed; retrying");
                    tokio::time::sleep(Duration::from_millis(500)).await;
                    continue;
                }
            };
            match e.event_type.as_str() {
                "message_added" | "message_updated"
                    if e.json.contains("\"kind\":\"user\"")
                        && e.json.contains("\"delivery\":\"pending\"") =>
                {
                    self.wake.notify_one();
                }
                "transcript_added" => self.wake.notify_one(),
                "session_created" => {
                    let v: Value = serde_json::from_str(&e.json).unwrap_or_default();
                    if v["session"]["is_call"] == true {
                        if let Some(id) = v["session_id"].as_str() {
                            if self.ensure_prelude(id) {
                                self.wake.notify_one();
                            }
                        }
                    }
                }
                "session_deleted" => {
                    let v: Value = serde_json::from_str(&e.json).unwrap_or_default();
                    if let Some(id) = v["session_id"].as_str() {
                        self.forget_session(id);
                    }
                }
                _ => {}
            }
        }
    }

    fn forget_session(&self, id: &str) {
        let insights = format!("{}{id}", crate::protocol::INSIGHTS_PREFIX);
        self.with_state(|st| {
            let a = st.preludes.remove(id).is_some();
            let b = st.streams.remove(id).is_some();
            let c = st.streams.remove(&insights).is_some();
            ((), a || b || c)
        });
        let mut readers = self.readers.lock().expect("readers lock");
        for k in [id, insights.as_str()] {
            if let Some(r) = readers.remove(k) {
                r.task.abort();
            }
        }
    }
}
