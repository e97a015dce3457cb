//! Every kind of assistant behind one trait, exactly one active at a time.
//!
//! - [`AssistantKind`]: what a kind implements — configure from its JSON settings, status,
//!   remove/unpair, check now, one delivery attempt of a stored outbox entry, and optionally
//!   routes it serves on the callback listener ([`CallbackRouter`]).
//! - [`AssistantContext`]: the small handle a kind gets — the conversation (what the assistant
//!   says goes in through [`AssistantContext::submit`], the same entry point as
//!   `POST /tasks/{task_id}`), the callback target, the data dir, shutdown, the clock, the
//!   outbox's wake-ups and per-kind settings (the settings store's `assistants` section,
//!   [`settings`]) and state files.
//! - [`delivery_queue`]: the generic, durable outbox: the oldest pending entry, its task id recorded
//!   before the first attempt, retries with backoff under the same task id (also after a
//!   restart), `sent` / `failed` recorded. It knows no transport.
//! - `held`: entries a kind holds for a later send ([`Attempt::Held`]), settled by the kind.
//! - [`Assistants`]: the manager (registered kinds, the active one, `PUT /api/assistant`).
//! - [`providers`]: the data-only registry of kinds and the real peers they serve.
//!
//! The `incoming` kind (`POST /v1/incoming`) lives in [`crate::assistants::kinds::incoming`].

pub mod delivery_queue;
mod held;
pub mod kinds;
pub mod prelude;
pub mod providers;
pub mod settings;
pub mod state;
mod target;

pub use held::HeldOutcome;
pub use target::CallbackTarget;

use crate::answers::ApiError;
use crate::assistants::state::{AssistantState, PreludeRecord, PreludeState};
use crate::clock::{fmt_time, SharedClock};
use crate::conversation::{Conversation, CoreError, Outcome};
use crate::events::{AssistantStatusView, Change};
use crate::http::Shutdown;
use crate::protocol::Callback;
use crate::settings::SettingsStore;
use crate::tokens::write_secret;
use axum::http::StatusCode;
use serde_json::{json, Value};
use settings::{AssistantSettings, STATE_SUFFIX};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::Notify;

/// A boxed, `Send` future (the trait stays object-safe without `async-trait`).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The kind every install starts with and an absent `kind` means.
pub const DEFAULT_KIND: &str = "incoming";
/// Which kind was active, in older versions (moved into the settings store).
pub const ACTIVE_KIND_FILE: &str = "assistant_kind.json";
/// A kind's state (`<dir>/<kind>.state.json`, mode 0600); its settings were here in older
/// versions (`<dir>/<kind>.json`, moved into the settings store).
pub const KIND_SETTINGS_DIR: &str = "assistants";

/// A stored outbox entry, handed to the active kind for one attempt. The task id was recorded
/// before the first attempt and is the same on every retry of this entry.
#[derive(Debug, Clone, PartialEq)]
pub enum Outgoing {
    /// A user message (a summary request is one too: the conversation stores it as such).
    UserMessage {
        task_id: String,
        session_id: String,
        text: String,
        /// The message's `message_id`.
        user_message_id: Option<String>,
        occurred_at: String,
    },
    /// The coaching framing of a call, before its first transcript turn.
    Prelude {
        task_id: String,
        call_id: String,
        /// `insights:<call>`.
        session_id: String,
        title: Option<String>,
    },
    /// The call ended (after its last stored transcript turn was settled).
    CallEnded {
        task_id: String,
        call_id: String,
        /// `insights:<call>`.
        session_id: String,
    },
    /// A final transcript turn of a call.
    TranscriptTurn {
        task_id: String,
        call_id: String,
        /// `insights:<call>`.
        session_id: String,
        speaker: Option<String>,
        text: String,
        occurred_at: String,
    },
}

impl Outgoing {
    pub fn task_id(&self) -> &str {
        match self {
            Outgoing::UserMessage { task_id, .. }
            | Outgoing::Prelude { task_id, .. }
            | Outgoing::CallEnded { task_id, .. }
            | Outgoing::TranscriptTurn { task_id, .. } => task_id,
        }
    }

    /// The assistant-side session (`<chat>` or `insights:<call>`).
    pub fn session_id(&self) -> &str {
        match self {
            Outgoing::UserMessage { session_id, .. }
            | Outgoing::Prelude { session_id, .. }
            | Outgoing::CallEnded { session_id, .. }
            | Outgoing::TranscriptTurn { session_id, .. } => session_id,
        }
    }
}

/// What one delivery attempt came to. The kind decides; the outbox records it.
#[derive(Debug, Clone, PartialEq)]
pub enum Attempt {
    /// Taken (`how` is logged: `accepted`, `in_flight`, `replay`, …).
    Delivered(&'static str),
    /// The assistant already had this task id.
    Duplicate,
    /// Taken by the kind for a later send (e.g. batched behind a run in flight; `how` is
    /// logged): the entry stays pending in the store, does not block later entries and is not
    /// retried on a timer. The kind settles it ([`AssistantContext::settle_held`]) or gives it
    /// back ([`AssistantContext::release_held`]); after a restart, or when the active kind
    /// changes, it is offered again. (A call's prelude or "call ended" counts as sent.)
    Held(&'static str),
    /// Not now: try again under the same task id (`after` overrides the backoff, capped at 5 min).
    RetryAfter {
        code: &'static str,
        message: String,
        after: Option<Duration>,
    },
    /// Final: the entry fails with a stable code and a sentence the user can act on.
    Failed { code: &'static str, message: String },
}

/// A refused `configure` (stable `code`, HTTP status for the control API).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{message}")]
pub struct KindError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
}

/// A kind's refusal as a control API answer: its own status (a kind only builds valid ones),
/// code and sentence.
impl From<KindError> for ApiError {
    fn from(e: KindError) -> Self {
        let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        ApiError::new(status, e.code, e.message)
    }
}

impl KindError {
    pub fn bad(code: &'static str, message: impl Into<String>) -> KindError {
        KindError {
            status: 400,
            code,
            message: message.into(),
        }
    }

    pub fn internal(code: &'static str, message: impl Into<String>) -> KindError {
        KindError {
            status: 500,
            code,
            message: message.into(),
        }
    }
}

/// One kind of assistant: only transport. Dedupe, drafts, typing, insights routing and
/// durability are the conversation's and the outbox's, for all kinds.
pub trait AssistantKind: Send + Sync + 'static {
    /// The stable kind id (`incoming`, `byo`, …), as in `PUT /api/assistant {kind}`.
    fn kind(&self) -> &'static str;

    /// Validates and saves the kind's JSON settings (the `PUT /api/assistant` body without
    /// `kind`), then checks them. Refusals carry stable codes.
    fn configure<'a>(&'a self, settings: &'a Value) -> BoxFuture<'a, Result<(), KindError>>;

    /// `{status, detail, …}`: `status: "online"` means ready to converse; anything else is the
    /// kind's own word (`not_configured`, `checking`, …). Kind-specific fields may be added.
    /// The manager adds `kind`.
    fn status(&self) -> Value;

    /// Has settings to deliver with (the outbox waits while the active kind has none).
    fn is_configured(&self) -> bool;

    /// Forgets the settings / unpairs. Pending entries stay pending.
    fn remove(&self) -> BoxFuture<'_, ()>;

    /// Checks the assistant now.
    fn check(&self) -> BoxFuture<'_, ()>;

    /// One attempt at delivering `entry`; never retries by itself.
    fn deliver<'a>(&'a self, entry: &'a Outgoing) -> BoxFuture<'a, Attempt>;

    /// The kind became (or stopped being) the active one: start or stop background work.
    fn set_active(&self, _active: bool) {}

    /// A session was deleted: forget what the kind keeps about it.
    fn session_deleted(&self, _session_id: &str) {}

    /// Stops the reply running in `session_id` now (the Stop button). Kinds that cannot stop a
    /// reply keep this default: `not_supported`.
    fn abort(&self, _session_id: &str) -> BoxFuture<'_, Result<(), KindError>> {
        let kind = self.kind();
        Box::pin(async move {
            Err(KindError {
                status: 409,
                code: "not_supported",
                message: format!("the assistant kind \"{kind}\" cannot stop a reply"),
            })
        })
    }

    /// Routes the kind serves on the callback listener while it is active (see
    /// [`CallbackRouter`]). Kinds without such routes keep the default.
    fn callback_routes(&self) -> Option<CallbackRouter> {
        None
    }

    /// The kind's own control API routes (e.g. `POST /api/assistant/pairing` of the `byo`
    /// kind), merged into the one route table at start whether the kind is active or not: they
    /// get the same guard (Host, Origin, UI token, body limits) and appear in the OpenAPI
    /// document. The router carries its own state (a clone of the kind's handle); handlers
    /// answer with [`crate::answers`]. Kinds without such routes keep the default.
    fn control_routes(&self) -> Option<KindRoutes> {
        None
    }

    /// The user's Allow / Deny on a permission card (`POST /api/permissions/{request_id}`),
    /// to the assistant. Kinds without permission requests keep the default.
    fn decide_permission(
        &self,
        _request_id: &str,
        _allow: bool,
    ) -> BoxFuture<'_, Result<(), KindError>> {
        let kind = self.kind();
        Box::pin(async move {
            Err(KindError {
                status: 409,
                code: "not_supported",
                message: format!("the assistant kind \"{kind}\" takes no permission decisions"),
            })
        })
    }
}

/// A kind's own control API routes, their state already given (see
/// [`AssistantKind::control_routes`]).
pub type KindRoutes = utoipa_axum::router::OpenApiRouter;

/// Routes a kind serves on the callback listener, full paths (e.g. under
/// `/api/v1/assistant-relay/`), their state already given. The listener merges every kind's
/// router into its own at start and answers a kind's routes only while it is the active kind
/// (else `404 not_found`); before they run it applies its Host check and reads the body within
/// its size and time limits (`crate::guard`), so a handler may take the body as `Bytes`.
/// Authentication is the kind's own (the callback bearer token is not required here); the
/// kind's router answers paths under its prefixes that it does not know (its fallback).
pub type CallbackRouter = axum::Router;

/// What a kind gets to work with.
pub struct AssistantContext {
    pub conversation: Conversation,
    /// Where the assistant posts replies (origin read at send time; rotatable token).
    pub callback: Arc<CallbackTarget>,
    pub data_dir: PathBuf,
    /// The settings store (the kinds' settings are its `assistants` section).
    pub settings: SettingsStore,
    pub shutdown: Shutdown,
    pub clock: SharedClock,
    pub(crate) wake: Notify,
    pub(crate) retry_now: Notify,
    held: Mutex<held::HeldSet>,
    /// The outbox's state (`state.rs`): this copy, and its rows written through the store's
    /// writer in the order of the changes.
    state: Mutex<AssistantState>,
    /// Changes of the state queued for the writer, and (below) those committed or failed.
    state_queued: std::sync::atomic::AtomicU64,
    state_saved: tokio::sync::watch::Sender<u64>,
}

impl AssistantContext {
    /// The context, with the outbox's state loaded (an older app's state file moved into the
    /// database).
    pub async fn new(
        conversation: Conversation,
        callback: Arc<CallbackTarget>,
        data_dir: PathBuf,
        settings: SettingsStore,
        shutdown: Shutdown,
    ) -> Arc<AssistantContext> {
        let now = conversation.clock().now_ms();
        let state = state::load(conversation.store(), &data_dir, now).await;
        let clock = conversation.clock().clone();
        Arc::new(AssistantContext {
            conversation,
            callback,
            data_dir,
            settings,
            shutdown,
            clock,
            wake: Notify::new(),
            retry_now: Notify::new(),
            held: Mutex::default(),
            state: Mutex::new(state),
            state_queued: Default::default(),
            state_saved: tokio::sync::watch::Sender::new(0),
        })
    }

    /// What the assistant said, into the conversation: the one entry point, the same as
    /// `POST /tasks/{task_id}` (dedupe makes a reply arriving two ways harmless).
    pub async fn submit(&self, cb: Callback) -> Result<Outcome, CoreError> {
        self.conversation.submit(cb).await
    }

    /// Something may be deliverable now.
    pub fn wake_outbox(&self) {
        self.wake.notify_one();
    }

    /// Stop waiting out the backoff (e.g. the assistant came back online).
    pub fn retry_outbox_now(&self) {
        self.retry_now.notify_waiters();
        self.wake.notify_one();
    }

    /// Logs an `assistant_status` event (the call bar follows it).
    pub fn status_event(&self, kind: &str, status: &str, detail: &str, checked_at: Option<&str>) {
        let conversation = self.conversation.clone();
        let change = Change::AssistantStatus {
            session_id: None,
            assistant: AssistantStatusView {
                kind: kind.into(),
                status: status.into(),
                detail: detail.into(),
                checked_at: checked_at.map(str::to_string),
            },
        };
        tokio::spawn(async move {
            if let Err(e) = conversation.app_event(change).await {
                tracing::debug!(error = %e, "assistant status not logged");
            }
        });
    }

    pub fn now(&self) -> String {
        fmt_time(self.clock.now())
    }

    /// A kind's saved settings (`None` when none are saved).
    pub fn load_settings(&self, kind: &str) -> Option<Value> {
        self.settings
            .get::<AssistantSettings>()
            .kinds
            .get(kind)
            .cloned()
    }

    /// Saves a kind's settings in the settings store (mode 0600: they may hold secrets).
    pub fn save_settings(&self, kind: &str, settings: &Value) -> Result<(), KindError> {
        self.settings
            .update::<AssistantSettings, _>(|s| {
                s.kinds.insert(kind.to_string(), settings.clone());
                Ok(())
            })
            .map_err(|e| KindError::internal("config_write_failed", e.to_string()))
    }

    pub fn remove_settings(&self, kind: &str) {
        let removed = self.settings.update::<AssistantSettings, _>(|s| {
            s.kinds.remove(kind);
            Ok(())
        });
        if let Err(e) = removed {
            tracing::error!(kind, error = %e, "cannot remove an assistant kind's settings");
        }
    }

    fn state_path(&self, kind: &str) -> PathBuf {
        self.data_dir
            .join(KIND_SETTINGS_DIR)
            .join(format!("{kind}{STATE_SUFFIX}.json"))
    }

    /// A kind's own state (not a setting: `assistants/<kind>.state.json`), if saved and readable.
    pub fn load_state(&self, kind: &str) -> Option<Value> {
        let p = self.state_path(kind);
        let raw = std::fs::read_to_string(&p).ok()?;
        match serde_json::from_str(&raw) {
            Ok(v) => Some(v),
            Err(e) => {
                tracing::error!(path = %p.display(), error = %e, "saved assistant state unreadable");
                None
            }
        }
    }

    /// Saves a kind's state atomically with mode 0600.
    pub fn save_state(&self, kind: &str, state: &Value) -> Result<(), KindError> {
        let dir = self.data_dir.join(KIND_SETTINGS_DIR);
        std::fs::create_dir_all(&dir)
            .map_err(|e| KindError::internal("config_write_failed", e.to_string()))?;
        let json = serde_json::to_string_pretty(state).expect("serializable");
        write_secret(&self.state_path(kind), &json)
            .map_err(|e| KindError::internal("config_write_failed", e.to_string()))
    }

    pub fn remove_state(&self, kind: &str) {
        let _ = std::fs::remove_file(self.state_path(kind));
    }

    // ---- the outbox's persisted state (also holds the incoming kind's stream cursors) ----

    /// Reads the state.
    pub(crate) fn read_state<T>(&self, f: impl FnOnce(&AssistantState) -> T) -> T {
        f(&self.state.lock().expect("state lock"))
    }

    /// Changes the state; `f` says whether it changed it (then what changed is queued for the
    /// writer, in order: [`AssistantContext::state_saved`] waits for it).
    pub(crate) fn with_state<T>(&self, f: impl FnOnce(&mut AssistantState) -> (T, bool)) -> T {
        use std::sync::atomic::Ordering;
        let mut st = self.state.lock().expect("state lock");
        let before = st.clone();
        let (out, dirty) = f(&mut st);
        let stmts = if dirty {
            state::changes(&before, &st)
        } else {
            Vec::new()
        };
        if stmts.is_empty() {
            return out;
        }
        // Queued under the lock, so the rows change in the order the copy did.
        let written = self.conversation.store().queue_write(stmts);
        let n = self.state_queued.fetch_add(1, Ordering::AcqRel) + 1;
        drop(st);
        let saved = self.state_saved.clone();
        tokio::spawn(async move {
            if let Err(e) = written.await {
                tracing::error!(error = %e, "cannot save the assistant outbox's state");
            }
            // Writes commit in the order they were queued: this one's answer covers the earlier.
            saved.send_modify(|s| *s = (*s).max(n));
        });
        out
    }

    /// Waits until every change of the state made so far is committed (or failed, logged).
    pub(crate) async fn state_saved(&self) {
        let n = self.state_queued.load(std::sync::atomic::Ordering::Acquire);
        let _ = self.state_saved.subscribe().wait_for(|s| *s >= n).await;
    }

    /// Creates a pending prelude record for a call (once); `true` if one was created.
    pub(crate) fn ensure_prelude(&self, call_id: &str) -> bool {
        self.ensure_record(call_id, |st| &mut st.preludes)
    }

    /// Creates a pending "call ended" record (once); `true` if one was created.
    pub(crate) fn ensure_call_end(&self, call_id: &str) -> bool {
        self.ensure_record(call_id, |st| &mut st.call_ends)
    }

    pub(crate) fn set_call_end_state(&self, call_id: &str, state: PreludeState) {
        self.set_record_state(call_id, state, |st| &mut st.call_ends)
    }

    pub(crate) fn set_prelude_state(&self, call_id: &str, state: PreludeState) {
        self.set_record_state(call_id, state, |st| &mut st.preludes)
    }

    /// A call's once-only outgoing record (prelude, call ended): created pending with its own
    /// task id, kept across retries and restarts.
    fn ensure_record(
        &self,
        call_id: &str,
        records: fn(&mut AssistantState) -> &mut CallRecords,
    ) -> bool {
        let now = self.clock.now_ms();
        self.with_state(|st| {
            let records = records(st);
            if records.contains_key(call_id) {
                return (false, false);
            }
            records.insert(
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

    fn set_record_state(
        &self,
        call_id: &str,
        state: PreludeState,
        records: fn(&mut AssistantState) -> &mut CallRecords,
    ) {
        self.with_state(|st| match records(st).get_mut(call_id) {
            Some(p) if p.state != state => {
                p.state = state;
                ((), true)
            }
            _ => ((), false),
        })
    }
}

/// A call's once-only outgoing records, by call session id.
type CallRecords = std::collections::BTreeMap<String, PreludeRecord>;

/// Builds a kind once the context exists (extra kinds come in through [`crate::Config`]).
pub type KindFactory = Box<dyn FnOnce(Arc<AssistantContext>) -> Arc<dyn AssistantKind> + Send>;

struct ManagerInner {
    ctx: Arc<AssistantContext>,
    timing: delivery_queue::OutboxTiming,
    kinds: Vec<Arc<dyn AssistantKind>>,
    /// What the list of kinds says about each registered one (same order as `kinds`).
    infos: Vec<kinds::KindInfo>,
    active: RwLock<Arc<dyn AssistantKind>>,
}

/// The assistants manager: the registered kinds, exactly one active (cheap to clone).
#[derive(Clone)]
pub struct Assistants {
    inner: Arc<ManagerInner>,
}

impl Assistants {
    /// Registers `kinds`, each with what the list of kinds says about it (the first with a
    /// given id wins), activates the saved one (absent or unknown: `incoming`), and starts the
    /// outbox and the conversation watcher.
    pub async fn start(
        ctx: Arc<AssistantContext>,
        kinds: Vec<(kinds::KindInfo, Arc<dyn AssistantKind>)>,
        timing: delivery_queue::OutboxTiming,
    ) -> Self {
        let mut unique: Vec<Arc<dyn AssistantKind>> = Vec::new();
        let mut infos = Vec::new();
        for (info, k) in kinds {
            debug_assert_eq!(info.id, k.kind(), "a kind's entry and its trait agree");
            if unique.iter().any(|u| u.kind() == k.kind()) {
                tracing::warn!(
                    kind = k.kind(),
                    "assistant kind registered twice; keeping the first"
                );
                continue;
            }
            unique.push(k);
            infos.push(info);
        }
        assert!(!unique.is_empty(), "at least one assistant kind");
        let saved = ctx
            .settings
            .get::<AssistantSettings>()
            .active
            .unwrap_or_else(|| DEFAULT_KIND.to_string());
        let active = unique
            .iter()
            .find(|k| k.kind() == saved)
            .or_else(|| unique.iter().find(|k| k.kind() == DEFAULT_KIND))
            .unwrap_or(&unique[0])
            .clone();
        tracing::info!(kind = active.kind(), "assistant kind active");
        for k in &unique {
            k.set_active(Arc::ptr_eq(k, &active));
        }
        let cursor = ctx.conversation.store().last_event_id().await.unwrap_or(0);
        let inner = Arc::new(ManagerInner {
            ctx,
            timing,
            kinds: unique,
            infos,
            active: RwLock::new(active),
        });
        let me = Assistants { inner };
        me.catch_up_preludes().await;
        tokio::spawn(delivery_queue::run(me.clone()));
        tokio::spawn(delivery_queue::watch_conversation(me.clone(), cursor));
        me
    }

    /// A call that started just before the app stopped may have been committed without the
    /// watcher seeing its `session_created` (the watcher starts at the log's end): every live
    /// call of the last day gets its prelude record if it has none. (Older records are pruned
    /// after a week, so a call left open for longer is not framed again.)
    async fn catch_up_preludes(&self) {
        const DAY_MS: i64 = 24 * 3600 * 1000;
        if !self.is_configured() {
            return;
        }
        let sessions = match self.conversation().sessions().await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(error = %e, "assistant outbox: cannot list calls at start-up");
                return;
            }
        };
        let since = self.inner.ctx.clock.now_ms() - DAY_MS;
        let mut added = false;
        for s in sessions
            .iter()
            .filter(|s| s.is_call && s.ended_at.is_none())
        {
            let recent = crate::protocol::parse_rfc3339(&s.created_at)
                .is_some_and(|t| t.timestamp_millis() >= since);
            if recent && self.inner.ctx.ensure_prelude(&s.session_id) {
                added = true;
            }
        }
        if added {
            tracing::info!(
                "assistant outbox: queued the prelude of a call started just before the last stop"
            );
        }
    }

    pub fn context(&self) -> &Arc<AssistantContext> {
        &self.inner.ctx
    }

    pub fn conversation(&self) -> &Conversation {
        &self.inner.ctx.conversation
    }

    /// The active kind.
    pub fn active(&self) -> Arc<dyn AssistantKind> {
        self.inner.active.read().expect("active lock").clone()
    }

    /// A registered kind by id.
    pub fn kind(&self, id: &str) -> Option<Arc<dyn AssistantKind>> {
        self.inner.kinds.iter().find(|k| k.kind() == id).cloned()
    }

    pub(crate) fn all_kinds(&self) -> &[Arc<dyn AssistantKind>] {
        &self.inner.kinds
    }

    /// Every registered kind's own control routes, merged (see
    /// [`AssistantKind::control_routes`]).
    pub fn control_routes(&self) -> KindRoutes {
        self.inner
            .kinds
            .iter()
            .filter_map(|k| k.control_routes())
            .fold(KindRoutes::new(), |all, routes| all.merge(routes))
    }

    pub(crate) fn timing(&self) -> delivery_queue::OutboxTiming {
        self.inner.timing
    }

    pub fn kinds(&self) -> Vec<&'static str> {
        self.inner.kinds.iter().map(|k| k.kind()).collect()
    }

    /// Something new may be pending.
    pub fn wake(&self) {
        self.inner.ctx.wake_outbox();
    }

    /// Sends again now instead of waiting out the backoff.
    pub fn retry_now(&self) {
        self.inner.ctx.retry_outbox_now();
    }

    pub fn is_configured(&self) -> bool {
        self.active().is_configured()
    }

    /// Every registered kind's routes on the callback listener, by kind (see
    /// [`AssistantKind::callback_routes`]).
    pub fn callback_routers(&self) -> Vec<(&'static str, CallbackRouter)> {
        self.inner
            .kinds
            .iter()
            .filter_map(|k| Some((k.kind(), k.callback_routes()?)))
            .collect()
    }

    /// `GET /api/assistant`: the active kind's `{kind, status, detail, …}`.
    pub fn view(&self) -> Value {
        view_of(self.active().as_ref())
    }

    /// `PUT /api/assistant`: `kind` (absent: `incoming`) selects the kind; a body with only
    /// `kind` switches to it with its saved settings, anything else configures it first. The
    /// other kinds keep their saved settings.
    pub async fn put(&self, body: &Value) -> Result<Value, KindError> {
        let Value::Object(map) = body else {
            return Err(KindError::bad(
                "invalid_json",
                "the body must be a JSON object",
            ));
        };
        let kind_id = match map.get("kind") {
            None | Some(Value::Null) => DEFAULT_KIND.to_string(),
            Some(Value::String(s)) => s.trim().to_string(),
            Some(_) => return Err(KindError::bad("invalid_field", "`kind` must be a string")),
        };
        let Some(kind) = self.kind(&kind_id) else {
            let known = kinds::registry()
                .kinds
                .iter()
                .any(|k| k.id == kind_id.as_str());
            return Err(if known {
                KindError::bad(
                    "kind_not_available",
                    format!(
                        "the assistant kind \"{kind_id}\" is not available yet in this version"
                    ),
                )
            } else {
                KindError::bad(
                    "unknown_kind",
                    format!(
                        "unknown assistant kind \"{kind_id}\" (known: {})",
                        self.kinds().join(", ")
                    ),
                )
            });
        };
        let mut settings = map.clone();
        settings.remove("kind");
        if !settings.is_empty() || !kind.is_configured() {
            kind.configure(&Value::Object(settings)).await?;
        }
        self.activate(&kind)?;
        self.retry_now();
        Ok(self.view())
    }

    fn activate(&self, kind: &Arc<dyn AssistantKind>) -> Result<(), KindError> {
        let old = self.active();
        if Arc::ptr_eq(&old, kind) {
            return Ok(());
        }
        self.inner
            .ctx
            .settings
            .update::<AssistantSettings, _>(|s| {
                s.active = Some(kind.kind().to_string());
                Ok(())
            })
            .map_err(|e| KindError::internal("config_write_failed", e.to_string()))?;
        *self.inner.active.write().expect("active lock") = kind.clone();
        old.set_active(false);
        // What the old kind held goes to the new one.
        self.inner.ctx.release_held();
        kind.set_active(true);
        tracing::info!(
            kind = kind.kind(),
            was = old.kind(),
            "assistant kind switched"
        );
        let s = kind.status();
        self.inner.ctx.status_event(
            kind.kind(),
            s["status"].as_str().unwrap_or(""),
            s["detail"].as_str().unwrap_or(""),
            s["checked_at"].as_str(),
        );
        Ok(())
    }

    /// `DELETE /api/assistant`: the active kind forgets its settings (unpairs).
    pub async fn remove(&self) -> Value {
        self.active().remove().await;
        self.view()
    }

    /// `POST /api/assistant/check`.
    pub async fn check(&self) -> Value {
        self.active().check().await;
        self.retry_now();
        self.view()
    }

    /// `GET /api/providers`: the registry, with `available` true exactly for the registered
    /// kinds (a registered kind the registry does not describe is listed too).
    pub fn providers(&self) -> Value {
        kinds::for_registered(&self.inner.infos, self.active().kind())
    }

    /// `GET /api/assistant/kinds`: every kind of this app (the list's, then any other
    /// registered one), the active one named.
    pub fn kind_list(&self) -> kinds::KindList {
        kinds::KindList {
            active_kind: self.active().kind().to_string(),
            kinds: kinds::served_kinds(&self.inner.infos),
        }
    }
}

fn view_of(kind: &dyn AssistantKind) -> Value {
    let mut v = kind.status();
    if !v.is_object() {
        v = json!({"status": "unknown", "detail": ""});
    }
    v["kind"] = json!(kind.kind());
    v
}
