//! The rules of the product, and the one writer of conversation state.
//!
//! Every change (a callback, a user message, a session created / ended / deleted, a timer
//! running out) is a command to one actor task. The actor applies a batch of commands inside one
//! SQLite transaction, commits once (group commit), and only then answers each command and
//! publishes its events. So a 2xx always means "on disk", a duplicate never shows twice, and the
//! event log and the messages can never disagree.
//!
//! What the conversation shows (see `docs/contract.md` for the full list):
//! - `message`/`notice` append an entry, deduped by `message_id` and by cleaned text within the
//!   scope (user_message_id, else task_id); `errored` appends an error entry;
//! - `typing`/`tool_call` show an indicator per scope until a reply, `completed`/`silent` or the
//!   inactivity timer (injected clock);
//! - `stream` parts and cursor-`▉` messages build drafts that settle in place;
//! - `insights:<call>` sessions feed the call's Insights list, `none` replies stay hidden;
//! - unknown, deleted and long-ended insights sessions are ignored (`session_ended`).

pub mod drafts;
pub mod typing;

use crate::clock::{fmt_time, SharedClock};
use crate::events::{Event, EventHub};
use crate::model::{InsightView, MessageKind, MessageRow, MessageView, SessionView, TypingView};
use crate::protocol::{
    clean_text, has_draft_cursor, is_none_reply, Callback, Status, INSIGHTS_PREFIX,
};
use crate::store::{write, NewMessage, SessionRecord, Store, StoreError};
use drafts::{Draft, DraftKey};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use sqlx::sqlite::SqliteConnection;
use sqlx::Connection;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use typing::{Touch, TypingTracker};

/// Largest number of commands applied in one transaction.
const MAX_BATCH: usize = 512;

#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Inactivity timer of a typing indicator (and of an open draft).
    pub typing_timeout_ms: i64,
    /// How long after a call ends its insights session still accepts replies.
    pub insights_grace_ms: i64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            typing_timeout_ms: 30_000,
            insights_grace_ms: 120_000,
        }
    }
}

/// The result of an accepted callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Applied,
    Duplicate,
    /// The session is unknown, deleted, or an insights session past its grace period.
    SessionEnded,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoreError {
    #[error("the change could not be stored: {0}")]
    StorageUnavailable(String),
    #[error("no such session")]
    SessionNotFound,
    #[error("this session is not a call")]
    NotACall,
    #[error("the text is empty")]
    EmptyText,
    #[error("the app is shutting down")]
    Stopped,
}

impl CoreError {
    pub fn code(&self) -> &'static str {
        match self {
            CoreError::StorageUnavailable(_) => "storage_unavailable",
            CoreError::SessionNotFound => "session_not_found",
            CoreError::NotACall => "not_a_call",
            CoreError::EmptyText => "empty_text",
            CoreError::Stopped => "shutting_down",
        }
    }
}

type Reply<T> = oneshot::Sender<Result<T, CoreError>>;

enum Cmd {
    Callback(Box<Callback>, Reply<Outcome>),
    CreateSession {
        is_call: bool,
        title: Option<String>,
        reply: Reply<SessionView>,
    },
    EndCall {
        session_id: String,
        reply: Reply<SessionView>,
    },
    DeleteSession {
        session_id: String,
        reply: Reply<()>,
    },
    UserMessage {
        session_id: String,
        text: String,
        reply: Reply<MessageView>,
    },
    Typing {
        session_id: String,
        reply: Reply<Vec<TypingView>>,
    },
    Tick,
}

/// Handle to the conversation: cheap to clone, used by the listener, the control API and the
/// desktop shell.
#[derive(Clone)]
pub struct Conversation {
    tx: mpsc::Sender<Cmd>,
    store: Store,
    hub: EventHub,
    clock: SharedClock,
    settings: Settings,
}

impl Conversation {
    /// Loads state from the store and starts the writer actor.
    pub async fn start(
        store: Store,
        mut conn: SqliteConnection,
        clock: SharedClock,
        settings: Settings,
    ) -> Result<Conversation, StoreError> {
        let hub = EventHub::new();
        let mut state = State {
            sessions: Arc::new(HashMap::new()),
            drafts: HashMap::new(),
            typing: TypingTracker::new(settings.typing_timeout_ms),
        };
        let sessions: HashMap<String, SessionRecord> = write::load_sessions(&mut conn)
            .await?
            .into_iter()
            .map(|s| (s.session_id.clone(), s))
            .collect();
        state.sessions = Arc::new(sessions);
        let now_ms = clock.now_ms();
        for (row, key) in write::load_open_drafts(&mut conn).await? {
            let Some(key) = DraftKey::decode(&key) else {
                continue;
            };
            let scope = row.scope.clone().unwrap_or_default();
            let d = Draft::new(
                &row.session_id,
                &scope,
                row.task_id.as_deref().unwrap_or_default(),
                row.user_message_id.as_deref(),
                row.sort_key,
                row.occurred_at.clone(),
                row.received_at.clone(),
                now_ms,
            )
            .resumed(row.id, row.text.clone());
            state.drafts.insert((row.session_id.clone(), key), d);
        }
        let (tx, rx) = mpsc::channel(8192);
        let actor = Actor {
            conn,
            core: Core {
                state,
                clock: clock.clone(),
                settings,
                hub: hub.clone(),
            },
            store: store.clone(),
        };
        tokio::spawn(actor.run(rx));
        Ok(Conversation {
            tx,
            store,
            hub,
            clock,
            settings,
        })
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn hub(&self) -> &EventHub {
        &self.hub
    }

    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    pub fn settings(&self) -> Settings {
        self.settings
    }

    async fn call<T>(&self, make: impl FnOnce(Reply<T>) -> Cmd) -> Result<T, CoreError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .send(make(reply))
            .await
            .map_err(|_| CoreError::Stopped)?;
        rx.await.map_err(|_| {
            CoreError::StorageUnavailable("the writer stopped before committing".into())
        })?
    }

    /// Applies an assistant callback; returns once the change is committed.
    pub async fn submit(&self, cb: Callback) -> Result<Outcome, CoreError> {
        self.call(|r| Cmd::Callback(Box::new(cb), r)).await
    }

    pub async fn create_session(
        &self,
        is_call: bool,
        title: Option<String>,
    ) -> Result<SessionView, CoreError> {
        self.call(|reply| Cmd::CreateSession {
            is_call,
            title,
            reply,
        })
        .await
    }

    pub async fn end_call(&self, session_id: &str) -> Result<SessionView, CoreError> {
        let session_id = session_id.to_string();
        self.call(|reply| Cmd::EndCall { session_id, reply }).await
    }

    pub async fn delete_session(&self, session_id: &str) -> Result<(), CoreError> {
        let session_id = session_id.to_string();
        self.call(|reply| Cmd::DeleteSession { session_id, reply })
            .await
    }

    pub async fn user_message(
        &self,
        session_id: &str,
        text: &str,
    ) -> Result<MessageView, CoreError> {
        let session_id = session_id.to_string();
        let text = text.to_string();
        self.call(|reply| Cmd::UserMessage {
            session_id,
            text,
            reply,
        })
        .await
    }

    pub async fn typing(&self, session_id: &str) -> Result<Vec<TypingView>, CoreError> {
        let session_id = session_id.to_string();
        self.call(|reply| Cmd::Typing { session_id, reply }).await
    }

    /// Runs due timers now (tests with a manual clock call this after advancing it).
    pub async fn tick(&self) -> Result<(), CoreError> {
        self.tx
            .send(Cmd::Tick)
            .await
            .map_err(|_| CoreError::Stopped)?;
        // A round trip through the queue: the tick's batch is committed when this returns.
        self.typing("").await.map(|_| ())
    }

    // ---- read side (no actor round trip) ----

    pub async fn sessions(&self) -> Result<Vec<SessionView>, CoreError> {
        let rows = self.store.sessions().await.map_err(storage)?;
        Ok(rows
            .iter()
            .filter(|s| s.kind == "chat" && s.deleted_at.is_none())
            .map(session_view)
            .collect())
    }

    async fn chat_session(&self, session_id: &str) -> Result<SessionRecord, CoreError> {
        self.store
            .sessions()
            .await
            .map_err(storage)?
            .into_iter()
            .find(|s| s.session_id == session_id && s.kind == "chat" && s.deleted_at.is_none())
            .ok_or(CoreError::SessionNotFound)
    }

    pub async fn messages(&self, session_id: &str) -> Result<Vec<MessageView>, CoreError> {
        self.chat_session(session_id).await?;
        let rows = self.store.messages(session_id).await.map_err(storage)?;
        Ok(rows
            .iter()
            .filter(|r| !r.hidden)
            .map(MessageView::from)
            .collect())
    }

    /// The Insights list of a call (or chat), newest first, `none` replies left out.
    pub async fn insights(&self, session_id: &str) -> Result<Vec<InsightView>, CoreError> {
        let s = self.chat_session(session_id).await?;
        let start = micros_of(&s.created_at);
        let rows = self
            .store
            .messages(&format!("{INSIGHTS_PREFIX}{session_id}"))
            .await
            .map_err(storage)?;
        let mut v: Vec<InsightView> = rows
            .iter()
            .filter(|r| !r.hidden && r.kind != MessageKind::User)
            .map(|r| InsightView::from_row(r, session_id, start))
            .collect();
        v.reverse();
        Ok(v)
    }
}

fn storage(e: StoreError) -> CoreError {
    CoreError::StorageUnavailable(e.to_string())
}

fn micros_of(t: &str) -> i64 {
    crate::protocol::parse_rfc3339(t)
        .map(|d| d.timestamp_micros())
        .unwrap_or(0)
}

pub(crate) fn session_view(s: &SessionRecord) -> SessionView {
    SessionView {
        session_id: s.session_id.clone(),
        kind: "chat",
        is_call: s.is_call,
        title: s.title.clone(),
        created_at: s.created_at.clone(),
        ended_at: s.ended_at.clone(),
        insights_session_id: s
            .is_call
            .then(|| format!("{INSIGHTS_PREFIX}{}", s.session_id)),
    }
}

fn hash_hex(parts: &[&str]) -> String {
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0u8]);
    }
    let d = h.finalize();
    d[..16].iter().map(|b| format!("{b:02x}")).collect()
}

// ---------------------------------------------------------------------------------------------

#[derive(Clone)]
struct State {
    /// Every session ever created (deleted ones as tombstones), by id.
    sessions: Arc<HashMap<String, SessionRecord>>,
    drafts: HashMap<(String, DraftKey), Draft>,
    typing: TypingTracker,
}

struct Actor {
    conn: SqliteConnection,
    core: Core,
    store: Store,
}

struct Core {
    state: State,
    clock: SharedClock,
    settings: Settings,
    hub: EventHub,
}

/// Sends a command's answer once its batch is committed (or failed).
type Finish = Box<dyn FnOnce(Option<CoreError>) + Send>;

fn finish<T: Send + 'static>(reply: Reply<T>, result: Result<T, CoreError>) -> Finish {
    Box::new(move |failure| {
        let _ = reply.send(match failure {
            Some(e) => Err(e),
            None => result,
        });
    })
}

impl Actor {
    async fn run(mut self, mut rx: mpsc::Receiver<Cmd>) {
        loop {
            let deadline = self.core.next_deadline_ms();
            let first = match deadline {
                Some(at) => {
                    let wait = (at - self.core.clock.now_ms()).max(0) as u64;
                    tokio::select! {
                        cmd = rx.recv() => cmd,
                        _ = tokio::time::sleep(std::time::Duration::from_millis(wait)) => Some(Cmd::Tick),
                    }
                }
                None => rx.recv().await,
            };
            let Some(first) = first else { break };
            let mut batch = vec![first];
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(c) => batch.push(c),
                    Err(_) => break,
                }
            }
            self.run_batch(batch).await;
        }
        tracing::debug!("conversation writer stopped");
    }

    async fn run_batch(&mut self, batch: Vec<Cmd>) {
        let snapshot = self.core.state.clone();
        let mut finishers: Vec<Finish> = Vec::with_capacity(batch.len());
        let mut events: Vec<Event> = Vec::new();
        let result: Result<(), StoreError> = async {
            let mut tx = self.conn.begin().await?;
            for cmd in batch {
                finishers.push(self.core.apply(&mut tx, cmd, &mut events).await?);
            }
            tx.commit().await?;
            Ok(())
        }
        .await;
        match result {
            Ok(()) => {
                if !events.is_empty() {
                    self.store.committed();
                }
                for e in events {
                    self.core.hub.publish(e);
                }
                for f in finishers {
                    f(None);
                }
            }
            Err(e) => {
                tracing::error!(error = %e, "commit failed; the batch is answered 503 and rolled back");
                self.core.state = snapshot;
                let err = CoreError::StorageUnavailable(e.to_string());
                for f in finishers {
                    f(Some(err.clone()));
                }
                // Commands of the batch not yet applied were dropped with their reply
                // channels: their callers see StorageUnavailable too.
            }
        }
    }
}

/// Where a callback goes.
enum Route {
    Chat,
    Insights { call_id: String },
}

impl Core {
    fn next_deadline_ms(&self) -> Option<i64> {
        let drafts = self
            .state
            .drafts
            .values()
            .filter(|d| d.is_open())
            .map(|d| d.last_activity_ms + self.settings.typing_timeout_ms)
            .min();
        match (self.state.typing.next_deadline(), drafts) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    async fn apply(
        &mut self,
        conn: &mut SqliteConnection,
        cmd: Cmd,
        events: &mut Vec<Event>,
    ) -> Result<Finish, StoreError> {
        Ok(match cmd {
            Cmd::Callback(cb, reply) => {
                let r = self.apply_callback(conn, &cb, events).await?;
                finish(reply, Ok(r))
            }
            Cmd::CreateSession {
                is_call,
                title,
                reply,
            } => {
                let r = self.create_session(conn, is_call, title, events).await?;
                finish(reply, Ok(r))
            }
            Cmd::EndCall { session_id, reply } => {
                let r = self.end_call(conn, &session_id, events).await?;
                finish(reply, r)
            }
            Cmd::DeleteSession { session_id, reply } => {
                let r = self.delete_session(conn, &session_id, events).await?;
                finish(reply, r)
            }
            Cmd::UserMessage {
                session_id,
                text,
                reply,
            } => {
                let r = self.user_message(conn, &session_id, &text, events).await?;
                finish(reply, r)
            }
            Cmd::Typing { session_id, reply } => {
                let v = self
                    .state
                    .typing
                    .list(&session_id)
                    .into_iter()
                    .map(|(scope, l)| typing_view(&session_id, &scope, &l))
                    .collect();
                finish(reply, Ok(v))
            }
            Cmd::Tick => {
                self.expire(conn, events).await?;
                Box::new(|_| {})
            }
        })
    }

    async fn emit(
        &mut self,
        conn: &mut SqliteConnection,
        events: &mut Vec<Event>,
        log_session: &str,
        data: Value,
    ) -> Result<(), StoreError> {
        let text = data.to_string();
        let id = write::insert_event(conn, log_session, &text).await?;
        events.push(Event::from_stored(id, &text));
        Ok(())
    }

    fn route(&self, session_id: &str) -> Option<Route> {
        let now_ms = self.clock.now_ms();
        let s = self.state.sessions.get(session_id)?;
        if s.deleted_at.is_some() {
            return None;
        }
        if s.kind == "insights" {
            let call_id = s.call_id.clone()?;
            let call = self.state.sessions.get(&call_id)?;
            if call.deleted_at.is_some() {
                return None;
            }
            if let Some(ended) = &call.ended_at {
                if micros_of(ended) / 1000 + self.settings.insights_grace_ms < now_ms {
                    return None;
                }
            }
            return Some(Route::Insights { call_id });
        }
        Some(Route::Chat)
    }

    // ---- callbacks ----

    async fn apply_callback(
        &mut self,
        conn: &mut SqliteConnection,
        cb: &Callback,
        events: &mut Vec<Event>,
    ) -> Result<Outcome, StoreError> {
        let Some(route) = self.route(&cb.session_id) else {
            return Ok(Outcome::SessionEnded);
        };
        let now_ms = self.clock.now_ms();
        match cb.status {
            Status::Typing | Status::ToolCall => {
                let label = cb.label.as_deref().or(if cb.status == Status::ToolCall {
                    cb.reply_text.as_deref().filter(|t| !t.trim().is_empty())
                } else {
                    None
                });
                if self
                    .state
                    .typing
                    .touch(&cb.session_id, cb.scope(), label, now_ms)
                    == Touch::Shown
                {
                    let lease = self
                        .state
                        .typing
                        .get(&cb.session_id, cb.scope())
                        .cloned()
                        .expect("just touched");
                    let data = json!({"type": "typing_started", "session_id": cb.session_id,
                        "typing": typing_view(&cb.session_id, cb.scope(), &lease)});
                    self.emit(conn, events, &cb.session_id, data).await?;
                }
                Ok(Outcome::Applied)
            }
            Status::Completed | Status::Silent => {
                let mut outcome = Outcome::Applied;
                if cb.status == Status::Completed
                    && cb
                        .reply_text
                        .as_deref()
                        .is_some_and(|t| !t.trim().is_empty())
                {
                    outcome = self
                        .store_reply(conn, cb, &route, MessageKind::Assistant, events)
                        .await?;
                }
                self.stop_typing(conn, events, &cb.session_id, cb.scope(), "completed")
                    .await?;
                Ok(outcome)
            }
            Status::Message | Status::Notice => {
                let kind = if cb.status == Status::Notice {
                    MessageKind::Notice
                } else {
                    MessageKind::Assistant
                };
                self.store_reply(conn, cb, &route, kind, events).await
            }
            Status::Errored => self.store_error(conn, cb, &route, events).await,
            Status::Stream => {
                if matches!(route, Route::Insights { .. }) {
                    // Insights are one short line: only the final message is surfaced.
                    return Ok(Outcome::Applied);
                }
                self.apply_chunk(conn, cb, events).await
            }
        }
    }

    fn sort_key(
        &self,
        cb_time: Option<chrono::DateTime<chrono::Utc>>,
        now: chrono::DateTime<chrono::Utc>,
    ) -> i64 {
        match cb_time {
            Some(t) if t < now => t.timestamp_micros(),
            _ => now.timestamp_micros(),
        }
    }

    async fn store_reply(
        &mut self,
        conn: &mut SqliteConnection,
        cb: &Callback,
        route: &Route,
        kind: MessageKind,
        events: &mut Vec<Event>,
    ) -> Result<Outcome, StoreError> {
        let raw = cb.reply_text.as_deref().unwrap_or_default();
        let insights = matches!(route, Route::Insights { .. });
        if has_draft_cursor(raw) && kind == MessageKind::Assistant {
            if insights {
                return Ok(Outcome::Applied);
            }
            return self.apply_edit_draft(conn, cb, events).await;
        }
        let text = clean_text(raw);
        if text.is_empty() {
            return Ok(Outcome::Applied);
        }
        let now = self.clock.now();
        let scope = cb.scope().to_string();
        let message_id = cb
            .message_id
            .clone()
            .unwrap_or_else(|| format!("h:{}", hash_hex(&[&cb.task_id, raw])));
        let content_key = hash_hex(&[&cb.session_id, &scope, kind.as_str(), &text]);
        let hidden = insights && is_none_reply(&text);
        let occurred_at = cb.occurred_at.map(fmt_time);

        // A draft this message settles: the stream of the same task, else an edit-style draft
        // of the scope that the final text extends.
        let task_key = (cb.session_id.clone(), DraftKey::Task(cb.task_id.clone()));
        let edit_key = (cb.session_id.clone(), DraftKey::Edit(scope.clone()));
        let settle_key = if kind == MessageKind::Assistant
            && self
                .state
                .drafts
                .get(&task_key)
                .is_some_and(|d| d.is_open())
        {
            Some(task_key)
        } else if kind == MessageKind::Assistant
            && self
                .state
                .drafts
                .get(&edit_key)
                .is_some_and(|d| d.is_open() && text.starts_with(d.display().trim_end()))
        {
            Some(edit_key)
        } else {
            None
        };

        let outcome = if let Some(key) = settle_key {
            if write::is_duplicate(conn, &cb.session_id, &message_id, Some(&content_key)).await? {
                // A retry of an earlier message: the draft is left alone, unless the same text
                // is already final, in which case the draft is redundant.
                if write::content_key_exists(conn, &content_key).await? {
                    self.drop_draft(conn, events, &key, route).await?;
                }
                Outcome::Duplicate
            } else {
                let d = self.state.drafts.get_mut(&key).expect("checked above");
                let row = d.row_id;
                d.settle();
                if matches!(key.1, DraftKey::Edit(_)) {
                    self.state.drafts.remove(&key);
                }
                match row {
                    Some(id) => {
                        write::settle_draft(
                            conn,
                            id,
                            &text,
                            Some(&message_id),
                            Some(&content_key),
                            occurred_at.as_deref(),
                            hidden,
                        )
                        .await?;
                        self.emit_message(conn, events, id, route, false).await?;
                        Outcome::Applied
                    }
                    None => {
                        self.insert_reply(
                            conn,
                            cb,
                            route,
                            kind,
                            &text,
                            &message_id,
                            &content_key,
                            hidden,
                            now,
                            events,
                        )
                        .await?
                    }
                }
            }
        } else {
            self.insert_reply(
                conn,
                cb,
                route,
                kind,
                &text,
                &message_id,
                &content_key,
                hidden,
                now,
                events,
            )
            .await?
        };
        self.stop_typing(conn, events, &cb.session_id, &scope, "message")
            .await?;
        Ok(outcome)
    }

    #[allow(clippy::too_many_arguments)]
    async fn insert_reply(
        &mut self,
        conn: &mut SqliteConnection,
        cb: &Callback,
        route: &Route,
        kind: MessageKind,
        text: &str,
        message_id: &str,
        content_key: &str,
        hidden: bool,
        now: chrono::DateTime<chrono::Utc>,
        events: &mut Vec<Event>,
    ) -> Result<Outcome, StoreError> {
        let occurred_at = cb.occurred_at.map(fmt_time);
        let received_at = fmt_time(now);
        let m = NewMessage {
            session_id: &cb.session_id,
            kind,
            text,
            message_id: Some(message_id),
            task_id: Some(&cb.task_id),
            user_message_id: cb.user_message_id.as_deref(),
            scope: Some(cb.scope()),
            content_key: Some(content_key),
            error_code: None,
            occurred_at: occurred_at.as_deref(),
            received_at: &received_at,
            sort_key: self.sort_key(cb.occurred_at, now),
            draft_key: None,
            hidden,
        };
        match write::insert_message(conn, &m).await? {
            None => Ok(Outcome::Duplicate),
            Some(id) => {
                if !hidden {
                    let row = row_of(&m, id);
                    self.emit_row(conn, events, &row, route, true).await?;
                }
                Ok(Outcome::Applied)
            }
        }
    }

    async fn store_error(
        &mut self,
        conn: &mut SqliteConnection,
        cb: &Callback,
        route: &Route,
        events: &mut Vec<Event>,
    ) -> Result<Outcome, StoreError> {
        let now = self.clock.now();
        let code = cb.error_code.clone().unwrap_or_else(|| "error".into());
        let text = cb
            .error_message
            .clone()
            .filter(|t| !t.trim().is_empty())
            .or_else(|| cb.reply_text.clone().filter(|t| !t.trim().is_empty()))
            .unwrap_or_else(|| "The assistant reported an error.".into());
        let message_id = cb
            .message_id
            .clone()
            .unwrap_or_else(|| format!("e:{}", hash_hex(&[&cb.task_id, &code, &text])));
        let occurred_at = cb.occurred_at.map(fmt_time);
        let received_at = fmt_time(now);
        let m = NewMessage {
            session_id: &cb.session_id,
            kind: MessageKind::Error,
            text: &text,
            message_id: Some(&message_id),
            task_id: Some(&cb.task_id),
            user_message_id: cb.user_message_id.as_deref(),
            scope: Some(cb.scope()),
            content_key: None,
            error_code: Some(&code),
            occurred_at: occurred_at.as_deref(),
            received_at: &received_at,
            sort_key: self.sort_key(cb.occurred_at, now),
            draft_key: None,
            hidden: false,
        };
        let outcome = match write::insert_message(conn, &m).await? {
            None => Outcome::Duplicate,
            Some(id) => {
                let row = row_of(&m, id);
                self.emit_row(conn, events, &row, route, true).await?;
                Outcome::Applied
            }
        };
        self.stop_typing(conn, events, &cb.session_id, cb.scope(), "errored")
            .await?;
        Ok(outcome)
    }

    /// A `message` whose text ends with the draft cursor: the whole text so far of a reply.
    async fn apply_edit_draft(
        &mut self,
        conn: &mut SqliteConnection,
        cb: &Callback,
        events: &mut Vec<Event>,
    ) -> Result<Outcome, StoreError> {
        let text = clean_text(cb.reply_text.as_deref().unwrap_or_default());
        let scope = cb.scope().to_string();
        let key = (cb.session_id.clone(), DraftKey::Edit(scope.clone()));
        let now = self.clock.now();
        let now_ms = now.timestamp_millis();
        if let Some(d) = self.state.drafts.get(&key).filter(|d| d.is_open()) {
            if d.display().starts_with(&text) {
                return Ok(Outcome::Duplicate); // a repeat or a stale, shorter draft
            }
        } else {
            if text.is_empty() {
                return Ok(Outcome::Applied);
            }
            let finals = write::scope_texts(conn, &cb.session_id, &scope).await?;
            if finals.iter().any(|f| f.starts_with(&text)) {
                return Ok(Outcome::Duplicate); // arrived after its final text
            }
            let d = Draft::new(
                &cb.session_id,
                &scope,
                &cb.task_id,
                cb.user_message_id.as_deref(),
                self.sort_key(cb.occurred_at, now),
                cb.occurred_at.map(fmt_time),
                fmt_time(now),
                now_ms,
            );
            self.state.drafts.insert(key.clone(), d);
        }
        let d = self.state.drafts.get_mut(&key).expect("inserted above");
        d.set_text(&text, now_ms);
        self.sync_draft(conn, events, &key).await?;
        self.stop_typing(conn, events, &cb.session_id, &scope, "message")
            .await?;
        Ok(Outcome::Applied)
    }

    async fn apply_chunk(
        &mut self,
        conn: &mut SqliteConnection,
        cb: &Callback,
        events: &mut Vec<Event>,
    ) -> Result<Outcome, StoreError> {
        let chunk = cb.chunk.as_ref().expect("parsed stream has a chunk");
        let now = self.clock.now();
        let key = (cb.session_id.clone(), DraftKey::Task(cb.task_id.clone()));
        if !self.state.drafts.contains_key(&key) {
            let d = Draft::new(
                &cb.session_id,
                cb.scope(),
                &cb.task_id,
                cb.user_message_id.as_deref(),
                self.sort_key(cb.occurred_at, now),
                cb.occurred_at.map(fmt_time),
                fmt_time(now),
                now.timestamp_millis(),
            );
            self.state.drafts.insert(key.clone(), d);
        }
        let d = self.state.drafts.get_mut(&key).expect("inserted above");
        if d.apply_chunk(chunk, now.timestamp_millis()) {
            self.sync_draft(conn, events, &key).await?;
        }
        Ok(Outcome::Applied)
    }

    /// Writes a draft's displayed text to its row (creating the row when it first becomes
    /// worth showing) and tells the view.
    async fn sync_draft(
        &mut self,
        conn: &mut SqliteConnection,
        events: &mut Vec<Event>,
        key: &(String, DraftKey),
    ) -> Result<(), StoreError> {
        let d = self.state.drafts.get(key).expect("caller has the draft");
        let text = d.display();
        if text == d.shown {
            return Ok(());
        }
        match d.row_id {
            Some(id) => {
                write::update_draft_text(conn, id, &text).await?;
                self.state.drafts.get_mut(key).expect("exists").shown = text;
                self.emit_message(conn, events, id, &Route::Chat, false)
                    .await?;
            }
            None => {
                if text.is_empty() {
                    return Ok(());
                }
                // A draft that only repeats (a prefix of) a final message is not shown.
                let finals = write::scope_texts(conn, &d.session_id, &d.scope).await?;
                if finals.iter().any(|f| f.starts_with(&text)) {
                    return Ok(());
                }
                let draft_key = key.1.encode();
                let m = NewMessage {
                    session_id: &d.session_id,
                    kind: MessageKind::Assistant,
                    text: &text,
                    message_id: None,
                    task_id: Some(&d.task_id),
                    user_message_id: d.user_message_id.as_deref(),
                    scope: Some(&d.scope),
                    content_key: None,
                    error_code: None,
                    occurred_at: d.occurred_at.as_deref(),
                    received_at: &d.received_at,
                    sort_key: d.sort_key,
                    draft_key: Some(&draft_key),
                    hidden: false,
                };
                let id = write::insert_message(conn, &m)
                    .await?
                    .expect("drafts have no unique keys");
                let row = row_of(&m, id);
                let d = self.state.drafts.get_mut(key).expect("exists");
                d.row_id = Some(id);
                d.shown = text;
                self.emit_row(conn, events, &row, &Route::Chat, true)
                    .await?;
            }
        }
        Ok(())
    }

    /// Removes a draft (its row too, if shown).
    async fn drop_draft(
        &mut self,
        conn: &mut SqliteConnection,
        events: &mut Vec<Event>,
        key: &(String, DraftKey),
        route: &Route,
    ) -> Result<(), StoreError> {
        let Some(d) = self.state.drafts.get_mut(key) else {
            return Ok(());
        };
        let row = d.row_id;
        d.settle();
        if matches!(key.1, DraftKey::Edit(_)) {
            self.state.drafts.remove(key);
        }
        if let Some(id) = row {
            write::delete_message(conn, id).await?;
            let (ty, sid) = match route {
                Route::Chat => ("message_removed", key.0.clone()),
                Route::Insights { call_id } => ("insight_removed", call_id.clone()),
            };
            let data = json!({"type": ty, "session_id": sid, "message_id": id});
            self.emit(conn, events, &sid, data).await?;
        }
        Ok(())
    }

    async fn stop_typing(
        &mut self,
        conn: &mut SqliteConnection,
        events: &mut Vec<Event>,
        session_id: &str,
        scope: &str,
        reason: &str,
    ) -> Result<(), StoreError> {
        if let Some(lease) = self.state.typing.clear(session_id, scope) {
            let data = json!({"type": "typing_stopped", "session_id": session_id, "reason": reason,
                "typing": typing_view(session_id, scope, &lease)});
            self.emit(conn, events, session_id, data).await?;
        }
        Ok(())
    }

    /// Timers: typing indicators and drafts whose inactivity timer ran out.
    async fn expire(
        &mut self,
        conn: &mut SqliteConnection,
        events: &mut Vec<Event>,
    ) -> Result<(), StoreError> {
        let now_ms = self.clock.now_ms();
        for (session, scope) in self.state.typing.expire(now_ms) {
            let lease = typing::Lease {
                label: None,
                since_ms: now_ms,
                expires_ms: now_ms,
            };
            let data = json!({"type": "typing_stopped", "session_id": session, "reason": "timeout",
                "typing": typing_view(&session, &scope, &lease)});
            self.emit(conn, events, &session, data).await?;
        }
        let timeout = self.settings.typing_timeout_ms;
        let due: Vec<(String, DraftKey)> = self
            .state
            .drafts
            .iter()
            .filter(|(_, d)| d.is_open() && d.last_activity_ms + timeout <= now_ms)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            self.settle_as_is(conn, events, &key).await?;
        }
        // Forget settled stream drafts after a while (they only guard against late chunks).
        self.state
            .drafts
            .retain(|_, d| d.is_open() || d.last_activity_ms + 10 * 60_000 > now_ms);
        Ok(())
    }

    /// An interrupted draft (no final message came): keep its text as a final message.
    async fn settle_as_is(
        &mut self,
        conn: &mut SqliteConnection,
        events: &mut Vec<Event>,
        key: &(String, DraftKey),
    ) -> Result<(), StoreError> {
        let Some(d) = self.state.drafts.get_mut(key) else {
            return Ok(());
        };
        let row = d.row_id;
        let text = d.shown.clone();
        let (session, scope) = (d.session_id.clone(), d.scope.clone());
        d.settle();
        if matches!(key.1, DraftKey::Edit(_)) {
            self.state.drafts.remove(key);
        }
        let Some(id) = row else { return Ok(()) };
        let content_key = hash_hex(&[&session, &scope, MessageKind::Assistant.as_str(), &text]);
        if write::content_key_exists(conn, &content_key).await? {
            let _ = self.state.drafts.remove(key);
            write::delete_message(conn, id).await?;
            let data = json!({"type": "message_removed", "session_id": session, "message_id": id});
            return self.emit(conn, events, &session, data).await;
        }
        write::settle_draft(conn, id, &text, None, Some(&content_key), None, false).await?;
        self.emit_message(conn, events, id, &Route::Chat, false)
            .await
    }

    async fn emit_message(
        &mut self,
        conn: &mut SqliteConnection,
        events: &mut Vec<Event>,
        id: i64,
        route: &Route,
        added: bool,
    ) -> Result<(), StoreError> {
        if let Some(row) = write::get_message(conn, id).await? {
            if !row.hidden {
                self.emit_row(conn, events, &row, route, added).await?;
            }
        }
        Ok(())
    }

    async fn emit_row(
        &mut self,
        conn: &mut SqliteConnection,
        events: &mut Vec<Event>,
        row: &MessageRow,
        route: &Route,
        added: bool,
    ) -> Result<(), StoreError> {
        let (data, log_session) = match route {
            Route::Chat => (
                json!({"type": if added {"message_added"} else {"message_updated"},
                    "session_id": row.session_id, "message": MessageView::from(row)}),
                row.session_id.clone(),
            ),
            Route::Insights { call_id } => {
                let start = self
                    .state
                    .sessions
                    .get(call_id)
                    .map(|s| micros_of(&s.created_at))
                    .unwrap_or(0);
                (
                    json!({"type": if added {"insight_added"} else {"insight_updated"},
                        "session_id": call_id, "insight": InsightView::from_row(row, call_id, start)}),
                    call_id.clone(),
                )
            }
        };
        self.emit(conn, events, &log_session, data).await
    }

    // ---- sessions and user messages ----

    async fn create_session(
        &mut self,
        conn: &mut SqliteConnection,
        is_call: bool,
        title: Option<String>,
        events: &mut Vec<Event>,
    ) -> Result<SessionView, StoreError> {
        let now = fmt_time(self.clock.now());
        let id = uuid::Uuid::new_v4().to_string();
        let chat = SessionRecord {
            session_id: id.clone(),
            kind: "chat".into(),
            is_call,
            call_id: None,
            title,
            created_at: now.clone(),
            ended_at: None,
            deleted_at: None,
        };
        write::insert_session(conn, &chat).await?;
        let sessions = Arc::make_mut(&mut self.state.sessions);
        if is_call {
            let insights = SessionRecord {
                session_id: format!("{INSIGHTS_PREFIX}{id}"),
                kind: "insights".into(),
                is_call: false,
                call_id: Some(id.clone()),
                title: None,
                created_at: now,
                ended_at: None,
                deleted_at: None,
            };
            write::insert_session(conn, &insights).await?;
            sessions.insert(insights.session_id.clone(), insights);
        }
        sessions.insert(id.clone(), chat.clone());
        let view = session_view(&chat);
        let data = json!({"type": "session_created", "session_id": id, "session": view});
        self.emit(conn, events, &id, data).await?;
        Ok(view)
    }

    fn live_chat(&self, session_id: &str) -> Option<&SessionRecord> {
        self.state
            .sessions
            .get(session_id)
            .filter(|s| s.kind == "chat" && s.deleted_at.is_none())
    }

    async fn end_call(
        &mut self,
        conn: &mut SqliteConnection,
        session_id: &str,
        events: &mut Vec<Event>,
    ) -> Result<Result<SessionView, CoreError>, StoreError> {
        let Some(s) = self.live_chat(session_id) else {
            return Ok(Err(CoreError::SessionNotFound));
        };
        if !s.is_call {
            return Ok(Err(CoreError::NotACall));
        }
        if s.ended_at.is_some() {
            return Ok(Ok(session_view(s)));
        }
        let now = fmt_time(self.clock.now());
        let insights_id = format!("{INSIGHTS_PREFIX}{session_id}");
        write::end_sessions(conn, &[session_id, &insights_id], &now).await?;
        let sessions = Arc::make_mut(&mut self.state.sessions);
        for id in [session_id, insights_id.as_str()] {
            if let Some(s) = sessions.get_mut(id) {
                s.ended_at = Some(now.clone());
            }
        }
        let view = session_view(&sessions[session_id]);
        let data = json!({"type": "session_updated", "session_id": session_id, "session": view});
        self.emit(conn, events, session_id, data).await?;
        Ok(Ok(view))
    }

    async fn delete_session(
        &mut self,
        conn: &mut SqliteConnection,
        session_id: &str,
        events: &mut Vec<Event>,
    ) -> Result<Result<(), CoreError>, StoreError> {
        if self.live_chat(session_id).is_none() {
            return Ok(Err(CoreError::SessionNotFound));
        }
        let now = fmt_time(self.clock.now());
        let insights_id = format!("{INSIGHTS_PREFIX}{session_id}");
        let ids = [session_id, insights_id.as_str()];
        write::delete_sessions(conn, &ids, &now).await?;
        let sessions = Arc::make_mut(&mut self.state.sessions);
        for id in ids {
            if let Some(s) = sessions.get_mut(id) {
                s.deleted_at = Some(now.clone());
            }
            self.state.typing.clear_session(id);
        }
        self.state
            .drafts
            .retain(|(s, _), _| s != session_id && s != &insights_id);
        let data = json!({"type": "session_deleted", "session_id": session_id});
        self.emit(conn, events, session_id, data).await?;
        Ok(Ok(()))
    }

    async fn user_message(
        &mut self,
        conn: &mut SqliteConnection,
        session_id: &str,
        text: &str,
        events: &mut Vec<Event>,
    ) -> Result<Result<MessageView, CoreError>, StoreError> {
        if self.live_chat(session_id).is_none() {
            return Ok(Err(CoreError::SessionNotFound));
        }
        let text = text.trim();
        if text.is_empty() {
            return Ok(Err(CoreError::EmptyText));
        }
        let now = self.clock.now();
        let received_at = fmt_time(now);
        let message_id = uuid::Uuid::new_v4().to_string();
        let m = NewMessage {
            session_id,
            kind: MessageKind::User,
            text,
            message_id: Some(&message_id),
            task_id: None,
            user_message_id: None,
            scope: Some(&message_id),
            content_key: None,
            error_code: None,
            occurred_at: Some(&received_at),
            received_at: &received_at,
            sort_key: now.timestamp_micros(),
            draft_key: None,
            hidden: false,
        };
        let id = write::insert_message(conn, &m)
            .await?
            .expect("a fresh message id is unique");
        let row = row_of(&m, id);
        self.emit_row(conn, events, &row, &Route::Chat, true)
            .await?;
        Ok(Ok(MessageView::from(&row)))
    }
}

fn row_of(m: &NewMessage<'_>, id: i64) -> MessageRow {
    MessageRow {
        id,
        session_id: m.session_id.to_string(),
        kind: m.kind,
        text: m.text.to_string(),
        message_id: m.message_id.map(str::to_string),
        task_id: m.task_id.map(str::to_string),
        user_message_id: m.user_message_id.map(str::to_string),
        scope: m.scope.map(str::to_string),
        error_code: m.error_code.map(str::to_string),
        occurred_at: m.occurred_at.map(str::to_string),
        received_at: m.received_at.to_string(),
        sort_key: m.sort_key,
        draft: m.draft_key.is_some(),
        hidden: m.hidden,
    }
}

fn typing_view(session_id: &str, scope: &str, lease: &typing::Lease) -> TypingView {
    TypingView {
        session_id: session_id.to_string(),
        scope: scope.to_string(),
        label: lease.label.clone(),
        since: chrono::DateTime::from_timestamp_millis(lease.since_ms)
            .map(fmt_time)
            .unwrap_or_default(),
    }
}
