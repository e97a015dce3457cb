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
use crate::model::{
    InsightView, MessageJson, MessageKind, MessageRow, MessageView, SessionView, TranscriptView,
    TypingView,
};
use crate::protocol::{
    clean_text, has_draft_cursor, is_none_reply, Callback, Status, INSIGHTS_PREFIX,
};
use crate::store::writer::{self, Payload, Unit, WriterHandle};
use crate::store::{load, Op, SessionRecord, Store, StoreError};
use chrono::{DateTime, Utc};
use drafts::{Draft, DraftKey};
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use sqlx::sqlite::SqliteConnection;
use std::collections::{HashMap, HashSet};
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
    #[error("the call has ended")]
    CallEnded,
    #[error("no such message")]
    MessageNotFound,
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
            CoreError::CallEnded => "call_ended",
            CoreError::MessageNotFound => "message_not_found",
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
    Transcript {
        session_id: String,
        speaker: Option<String>,
        text: String,
        reply: Reply<TranscriptView>,
    },
    Delivery {
        id: i64,
        update: DeliveryUpdate,
        reply: Reply<()>,
    },
    /// An app-wide event (not about one session), e.g. the assistant link's status.
    AppEvent {
        data: Value,
        reply: Reply<()>,
    },
    Tick,
}

/// What the assistant link reports about an outgoing entry (a user message or a transcript
/// turn).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryUpdate {
    /// `pending` (queued, or queued again by a user retry), `sent` or `failed`.
    pub state: DeliveryState,
    /// The task id the entry was (or will be) sent under; kept across automatic retries.
    pub task_id: Option<String>,
    /// Why it failed: a stable code and a sentence for the user.
    pub error: Option<(String, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryState {
    Pending,
    Sent,
    Failed,
}

impl DeliveryState {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Sent => "sent",
            DeliveryState::Failed => "failed",
        }
    }
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
        conn: SqliteConnection,
        clock: SharedClock,
        settings: Settings,
    ) -> Result<Conversation, StoreError> {
        let hub = EventHub::new();
        let mut reader = store.connect_reader().await?;
        let core = Core::load(&mut reader, clock.clone(), settings, hub.clone()).await?;
        let (done_tx, done_rx) = mpsc::unbounded_channel();
        tokio::spawn(deliver(hub.clone(), done_rx));
        let writer = writer::spawn(store.clone(), conn, done_tx)?;
        let (tx, rx) = mpsc::channel(8192);
        let actor = Actor {
            reader,
            core,
            writer,
            epoch: 1,
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

    /// Stores a final transcript turn of a live call (sent to the assistant by the link).
    pub async fn transcript_turn(
        &self,
        session_id: &str,
        speaker: Option<&str>,
        text: &str,
    ) -> Result<TranscriptView, CoreError> {
        let session_id = session_id.to_string();
        let speaker = speaker.map(str::to_string);
        let text = text.to_string();
        self.call(|reply| Cmd::Transcript {
            session_id,
            speaker,
            text,
            reply,
        })
        .await
    }

    /// Records the delivery state of an outgoing entry (by row id).
    pub async fn set_delivery(&self, id: i64, update: DeliveryUpdate) -> Result<(), CoreError> {
        self.call(|reply| Cmd::Delivery { id, update, reply }).await
    }

    /// Logs an app-wide event: `data` is a JSON object with a `type` (the log adds `id` and a
    /// null `session_id`). Used for state that lives outside the conversation, such as the
    /// assistant link's status, so every view learns it from the one event stream.
    pub async fn app_event(&self, data: Value) -> Result<(), CoreError> {
        self.call(|reply| Cmd::AppEvent { data, reply }).await
    }

    /// Outgoing entries still to deliver, oldest first.
    pub async fn pending_deliveries(&self) -> Result<Vec<MessageRow>, CoreError> {
        self.store.pending_deliveries().await.map_err(storage)
    }

    /// The transcript of a call, oldest first.
    pub async fn transcript(&self, session_id: &str) -> Result<Vec<TranscriptView>, CoreError> {
        let s = self.chat_session(session_id).await?;
        let start = micros_of(&s.created_at);
        let rows = self
            .store
            .messages(&format!("{INSIGHTS_PREFIX}{session_id}"))
            .await
            .map_err(storage)?;
        Ok(rows
            .iter()
            .filter(|r| r.kind == MessageKind::Transcript)
            .map(|r| TranscriptView::from_row(r, session_id, start))
            .collect())
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
            .filter(|r| !r.hidden && !matches!(r.kind, MessageKind::User | MessageKind::Transcript))
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
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(32);
    for b in &d[..16] {
        out.push(HEX[(b >> 4) as usize] as char);
        out.push(HEX[(b & 15) as usize] as char);
    }
    out
}

/// A content key as the index holds it: the 128 bits it spells (every key [`hash_hex`] makes),
/// so the index stores 16 bytes instead of a string. Any other stored form is hashed to 128 bits.
fn key_digest(key: &str) -> u128 {
    match (key.len(), u128::from_str_radix(key, 16)) {
        (32, Ok(v)) => v,
        _ => {
            let d = Sha256::digest(key.as_bytes());
            u128::from_be_bytes(d[..16].try_into().expect("16 bytes"))
        }
    }
}

// ---------------------------------------------------------------------------------------------

/// What the writer knows of one session's stored messages, so batches decide without reading
/// the database: the dedupe keys, and the final texts of its most recent scopes. Loaded on
/// first use.
#[derive(Debug, Default)]
struct SessionIndex {
    message_ids: HashSet<String, FastHash>,
    content_keys: HashSet<u128, FastHash>,
    /// Final texts by scope, each with the scope's position among the session's scopes. Only
    /// the last [`FINAL_SCOPES`] (at least) are kept: they answer whether a late stream part
    /// repeats a final text, which happens within a reply or two, not hundreds later (and a
    /// draft that settles on a final text is dropped by its content key anyway).
    finals: HashMap<String, (u64, Vec<String>), FastHash>,
    scopes: u64,
    last_used: u64,
}

/// Scopes whose final texts a session index keeps (it prunes at twice as many).
const FINAL_SCOPES: u64 = 1024;

impl SessionIndex {
    fn add(&mut self, row: &MessageRow) {
        if let Some(m) = &row.message_id {
            self.message_ids.insert(m.clone());
        }
        if let Some(k) = &row.content_key {
            self.content_keys.insert(key_digest(k));
        }
        if !row.draft && matches!(row.kind, MessageKind::Assistant | MessageKind::Notice) {
            if let Some(scope) = &row.scope {
                self.scopes += 1;
                let at = self.scopes;
                match self.finals.get_mut(scope.as_str()) {
                    Some((seen, texts)) => {
                        *seen = at;
                        texts.push(row.text.clone());
                    }
                    None => {
                        self.finals
                            .insert(scope.clone(), (at, vec![row.text.clone()]));
                        if self.finals.len() as u64 > 2 * FINAL_SCOPES {
                            let keep_after = at - FINAL_SCOPES;
                            self.finals.retain(|_, (seen, _)| *seen > keep_after);
                        }
                    }
                }
            }
        }
    }

    /// A final text of the scope starts with `text`: a draft of it is redundant.
    fn final_extends(&self, scope: &str, text: &str) -> bool {
        self.finals
            .get(scope)
            .is_some_and(|(_, v)| v.iter().any(|f| f.starts_with(text)))
    }
}

/// The hasher of the rules' maps keyed by ids (session ids, message ids, scopes): seeded per
/// process, several times faster than SipHash on them. Keys come only from token holders.
type FastHash = foldhash::fast::RandomState;

/// Sessions whose index stays in memory between batches.
const INDEX_CACHE: usize = 64;

/// In-memory state that a failed commit must roll back.
#[derive(Clone)]
struct State {
    /// Every session ever created (deleted ones as tombstones), by id.
    sessions: Arc<HashMap<String, SessionRecord, FastHash>>,
    drafts: HashMap<(String, DraftKey), Draft>,
    /// Rows of visible drafts, by id.
    draft_rows: HashMap<i64, MessageRow>,
    typing: TypingTracker,
    /// The next id to hand out. Messages and events share one sequence: a row that is its own
    /// `message_added` event (see [`logs_itself`]) carries that event's id.
    next_id: i64,
}

impl State {
    fn take_id(&mut self) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }
}

/// A chat row that never changes after it is added (a final assistant message, a notice, an
/// error) is its own `message_added` event: the event has the row's id and no row in `events`;
/// reading the log rebuilds the identical event from the row. Drafts, user and transcript rows
/// change later (their events are logged in full), and so do hidden rows and insights.
fn logs_itself(row: &MessageRow, route: &Route) -> bool {
    matches!(route, Route::Chat)
        && !row.hidden
        && !row.draft
        && row.delivery.is_none()
        && matches!(
            row.kind,
            MessageKind::Assistant | MessageKind::Notice | MessageKind::Error
        )
}

/// What [`Core::emit_row`] reports about a row.
#[derive(Clone, Copy)]
enum Change {
    Added { logged: bool },
    Updated,
}

struct Actor {
    /// Reads only (indexes, start-up state); the writer stage owns the writing connection.
    reader: SqliteConnection,
    core: Core,
    writer: WriterHandle<Batch>,
    epoch: u64,
}

struct Core {
    state: State,
    index: HashMap<String, SessionIndex, FastHash>,
    batch_no: u64,
    /// Writes decided by the current batch.
    ops: Vec<Op>,
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

/// What a batch hands the writer besides its ops: its events and its callers' answers, which
/// leave only after the commit.
struct Batch {
    events: Vec<Event>,
    finishers: Vec<Finish>,
}

impl Payload for Batch {
    fn fail(self, why: &str) {
        let err = CoreError::StorageUnavailable(why.to_string());
        for f in self.finishers {
            f(Some(err.clone()));
        }
    }
}

/// Publishes the events of committed units and answers their callers, in commit order.
async fn deliver(hub: EventHub, mut done: mpsc::UnboundedReceiver<Vec<Unit<Batch>>>) {
    while let Some(units) = done.recv().await {
        for u in units {
            for e in u.payload.events {
                hub.publish(e);
            }
            for f in u.payload.finishers {
                f(None);
            }
        }
    }
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
            if self.writer.pipeline().failed_epoch() >= self.epoch {
                self.recover().await;
            }
            self.run_batch(batch).await;
        }
    }

    /// After a failed commit: wait for the writer to settle, reload, start a new epoch.
    async fn recover(&mut self) {
        self.writer.pipeline().wait_drained().await;
        loop {
            match Core::load(
                &mut self.reader,
                self.core.clock.clone(),
                self.core.settings,
                self.core.hub.clone(),
            )
            .await
            {
                Ok(mut fresh) => {
                    // Typing indicators live only in memory; keep what the view was told.
                    fresh.state.typing = self.core.state.typing.clone();
                    self.core = fresh;
                    break;
                }
                Err(e) => {
                    tracing::error!(error = %e, "cannot reload the conversation state; retrying");
                    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
                }
            }
        }
        self.epoch = self.writer.pipeline().failed_epoch() + 1;
    }

    async fn run_batch(&mut self, batch: Vec<Cmd>) {
        self.core.batch_no += 1;
        let mut finishers: Vec<Finish> = Vec::with_capacity(batch.len());
        // A callback usually writes a row and an event: no regrowing on the way.
        let mut events: Vec<Event> = Vec::with_capacity(batch.len());
        self.core.ops.reserve(2 * batch.len());
        let mut failure = None;
        for cmd in batch {
            if failure.is_some() {
                drop(cmd); // its caller sees StorageUnavailable
                continue;
            }
            match self.core.apply(&mut self.reader, cmd, &mut events).await {
                Ok(f) => finishers.push(f),
                Err(e) => failure = Some(e),
            }
        }
        let ops = std::mem::take(&mut self.core.ops);
        if let Some(e) = failure {
            // A read failed mid-batch: nothing of this batch is written; start over from the
            // database once the writer is done.
            tracing::error!(error = %e, "reading the database failed; the batch is answered 503");
            drop(ops);
            Batch { events, finishers }.fail(&e.to_string());
            self.writer.pipeline().fail_epoch(self.epoch);
            return;
        }
        let unit = Unit {
            epoch: self.epoch,
            ops,
            payload: Batch { events, finishers },
        };
        self.writer.send(unit).await;
        if self.writer.pipeline().is_drained() {
            self.core.evict_indexes();
        }
    }
}

/// Where a callback goes.
enum Route {
    Chat,
    Insights { call_id: String },
}

impl Core {
    async fn load(
        conn: &mut SqliteConnection,
        clock: SharedClock,
        settings: Settings,
        hub: EventHub,
    ) -> Result<Core, StoreError> {
        let sessions: HashMap<String, SessionRecord, FastHash> = load::sessions(conn)
            .await?
            .into_iter()
            .map(|s| (s.session_id.clone(), s))
            .collect();
        let next_id = load::next_id(conn).await?;
        let mut state = State {
            sessions: Arc::new(sessions),
            drafts: HashMap::new(),
            draft_rows: HashMap::new(),
            typing: TypingTracker::new(settings.typing_timeout_ms),
            next_id,
        };
        let now_ms = clock.now_ms();
        for row in load::open_drafts(conn).await? {
            let Some(key) = row.draft_key.as_deref().and_then(DraftKey::decode) else {
                continue;
            };
            let d = Draft::new(
                &row.session_id,
                row.scope.as_deref().unwrap_or_default(),
                row.task_id.as_deref().unwrap_or_default(),
                row.user_message_id.as_deref(),
                row.sort_key,
                row.occurred_at.clone(),
                row.received_at.clone(),
                now_ms,
            )
            .resumed(row.id, row.text.clone());
            state.drafts.insert((row.session_id.clone(), key), d);
            state.draft_rows.insert(row.id, row);
        }
        Ok(Core {
            state,
            index: HashMap::default(),
            batch_no: 0,
            ops: Vec::new(),
            clock,
            settings,
            hub,
        })
    }

    fn evict_indexes(&mut self) {
        if self.index.len() <= INDEX_CACHE {
            return;
        }
        let mut ages: Vec<u64> = self.index.values().map(|i| i.last_used).collect();
        ages.sort_unstable();
        let cutoff = ages[ages.len() - INDEX_CACHE / 2];
        self.index.retain(|_, i| i.last_used >= cutoff);
    }

    /// Loads a session's index if needed. Safe mid-batch: a session is loaded before any op of
    /// the batch touches it, so the database holds exactly what the index must.
    async fn ensure_index(
        &mut self,
        conn: &mut SqliteConnection,
        session_id: &str,
    ) -> Result<(), StoreError> {
        if !self.index.contains_key(session_id) {
            let mut idx = SessionIndex::default();
            for row in load::session_messages(conn, session_id).await? {
                idx.add(&row);
            }
            self.index.insert(session_id.to_string(), idx);
        }
        let batch = self.batch_no;
        self.index.get_mut(session_id).expect("loaded").last_used = batch;
        Ok(())
    }

    fn idx(&mut self, session_id: &str) -> &mut SessionIndex {
        self.index.get_mut(session_id).expect("ensure_index first")
    }

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
            } => finish(reply, Ok(self.create_session(is_call, title, events))),
            Cmd::EndCall { session_id, reply } => finish(reply, self.end_call(&session_id, events)),
            Cmd::DeleteSession { session_id, reply } => {
                finish(reply, self.delete_session(&session_id, events))
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
            Cmd::Transcript {
                session_id,
                speaker,
                text,
                reply,
            } => {
                let r = self
                    .transcript_turn(conn, &session_id, speaker, &text, events)
                    .await?;
                finish(reply, r)
            }
            Cmd::Delivery { id, update, reply } => {
                let r = self.set_delivery(conn, id, update, events).await?;
                finish(reply, r)
            }
            Cmd::AppEvent { mut data, reply } => {
                if let Some(o) = data.as_object_mut() {
                    o.insert("session_id".into(), Value::Null);
                }
                self.emit(events, "", data);
                finish(reply, Ok(()))
            }
            Cmd::Tick => {
                self.expire(events);
                Box::new(|_| {})
            }
        })
    }

    /// Logs an event (written with the batch, published after the commit).
    fn emit(&mut self, events: &mut Vec<Event>, log_session: &str, mut data: Value) {
        let id = self.state.take_id();
        let event_type = data
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("unknown")
            .to_string();
        if let Some(o) = data.as_object_mut() {
            o.insert("id".into(), id.into());
        }
        self.push_event(events, id, &event_type, Some(log_session), data.to_string());
    }

    /// `log_session`: the session the logged event belongs to; `None` for a row that is its
    /// own event (nothing more is written).
    fn push_event(
        &mut self,
        events: &mut Vec<Event>,
        id: i64,
        ty: &str,
        log_session: Option<&str>,
        json: String,
    ) {
        if let Some(session) = log_session {
            self.ops.push(Op::InsertEvent {
                id,
                session_id: session.to_string(),
                data: json.clone(),
            });
        }
        events.push(Event {
            id,
            event_type: ty.to_string(),
            json,
        });
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
                    self.emit(events, &cb.session_id, data);
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
                self.stop_typing(events, &cb.session_id, cb.scope(), "completed");
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
                self.ensure_index(conn, &cb.session_id).await?;
                self.apply_chunk(cb, events);
                Ok(Outcome::Applied)
            }
        }
    }

    fn sort_key(&self, at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> i64 {
        match at {
            Some(t) if t < now => t.timestamp_micros(),
            _ => now.timestamp_micros(),
        }
    }

    /// A new row with the next id; the caller fills in the rest.
    fn new_row(&mut self, session_id: &str, kind: MessageKind, text: String) -> MessageRow {
        let id = self.state.take_id();
        let now = self.clock.now();
        MessageRow {
            id,
            session_id: session_id.to_string(),
            kind,
            text,
            message_id: None,
            task_id: None,
            user_message_id: None,
            scope: None,
            error_code: None,
            occurred_at: None,
            received_at: fmt_time(now),
            sort_key: now.timestamp_micros(),
            draft: false,
            hidden: false,
            content_key: None,
            draft_key: None,
            speaker: None,
            delivery: None,
            delivery_error: None,
        }
    }

    /// Stores a new row (index, op, event).
    fn insert_row(&mut self, mut row: MessageRow, route: &Route, events: &mut Vec<Event>) {
        let logged = logs_itself(&row, route);
        if logged && row.id != self.state.next_id - 1 {
            // Its event must come after every event already emitted: a newer id.
            row.id = self.state.take_id();
        }
        self.idx(&row.session_id).add(&row);
        if !row.hidden {
            self.emit_row(events, &row, route, Change::Added { logged });
        }
        if row.draft {
            self.state.draft_rows.insert(row.id, row.clone());
        }
        self.ops.push(Op::InsertMessage { row, logged });
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
        self.ensure_index(conn, &cb.session_id).await?;
        if has_draft_cursor(raw) && kind == MessageKind::Assistant {
            if insights {
                return Ok(Outcome::Applied);
            }
            return Ok(self.apply_edit_draft(cb, events));
        }
        let text = clean_text(raw);
        if text.is_empty() {
            return Ok(Outcome::Applied);
        }
        let scope = cb.scope().to_string();
        let message_id = cb
            .message_id
            .clone()
            .unwrap_or_else(|| format!("h:{}", hash_hex(&[&cb.task_id, raw])));
        let content_key = hash_hex(&[&cb.session_id, &scope, kind.as_str(), &text]);
        let hidden = insights && is_none_reply(&text);

        // A draft this message settles: the stream of the same task, else an edit-style draft
        // of the scope that the final text extends.
        let task_key = (cb.session_id.clone(), DraftKey::Task(cb.task_id.clone()));
        let edit_key = (cb.session_id.clone(), DraftKey::Edit(scope.clone()));
        let settle_key = if kind != MessageKind::Assistant {
            None
        } else if self.state.drafts.get(&task_key).is_some_and(Draft::is_open) {
            Some(task_key)
        } else if self
            .state
            .drafts
            .get(&edit_key)
            .is_some_and(|d| d.is_open() && text.starts_with(d.display().trim_end()))
        {
            Some(edit_key)
        } else {
            None
        };

        let idx = self.idx(&cb.session_id);
        let same_id = idx.message_ids.contains(&message_id);
        let same_text = idx.content_keys.contains(&key_digest(&content_key));
        let outcome = if same_id || same_text {
            // A retry or a near-identical re-send: nothing changes, except that a draft of the
            // same, already final, text is redundant.
            if let (Some(key), true) = (&settle_key, same_text) {
                self.drop_draft(events, key, route);
            }
            Outcome::Duplicate
        } else {
            let draft_row = settle_key.and_then(|key| {
                let d = self.state.drafts.get_mut(&key).expect("checked above");
                let row = d.row_id;
                d.settle();
                if matches!(key.1, DraftKey::Edit(_)) {
                    self.state.drafts.remove(&key);
                }
                row.and_then(|id| self.state.draft_rows.remove(&id))
            });
            let occurred_at = cb.occurred_at.map(fmt_time);
            match draft_row {
                Some(mut row) => {
                    // Settles in place: same id, same position, the final text.
                    row.text = text;
                    row.message_id = Some(message_id);
                    row.content_key = Some(content_key);
                    row.occurred_at = occurred_at.or(row.occurred_at);
                    row.draft = false;
                    row.draft_key = None;
                    row.hidden = hidden;
                    self.idx(&cb.session_id).add(&row);
                    if !hidden {
                        self.emit_row(events, &row, route, Change::Updated);
                    }
                    self.ops.push(Op::UpdateMessage(row));
                }
                None => {
                    let mut row = self.new_row(&cb.session_id, kind, text);
                    row.message_id = Some(message_id);
                    row.task_id = Some(cb.task_id.clone());
                    row.user_message_id = cb.user_message_id.clone();
                    row.scope = Some(scope.clone());
                    row.content_key = Some(content_key);
                    row.occurred_at = occurred_at;
                    row.sort_key = self.sort_key(cb.occurred_at, self.clock.now());
                    row.hidden = hidden;
                    self.insert_row(row, route, events);
                }
            }
            Outcome::Applied
        };
        self.stop_typing(events, &cb.session_id, &scope, "message");
        Ok(outcome)
    }

    async fn store_error(
        &mut self,
        conn: &mut SqliteConnection,
        cb: &Callback,
        route: &Route,
        events: &mut Vec<Event>,
    ) -> Result<Outcome, StoreError> {
        self.ensure_index(conn, &cb.session_id).await?;
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
        let outcome = if self.idx(&cb.session_id).message_ids.contains(&message_id) {
            Outcome::Duplicate
        } else {
            let mut row = self.new_row(&cb.session_id, MessageKind::Error, text);
            row.message_id = Some(message_id);
            row.task_id = Some(cb.task_id.clone());
            row.user_message_id = cb.user_message_id.clone();
            row.scope = Some(cb.scope().to_string());
            row.error_code = Some(code);
            row.occurred_at = cb.occurred_at.map(fmt_time);
            row.sort_key = self.sort_key(cb.occurred_at, self.clock.now());
            self.insert_row(row, route, events);
            Outcome::Applied
        };
        self.stop_typing(events, &cb.session_id, cb.scope(), "errored");
        Ok(outcome)
    }

    /// A `message` whose text ends with the draft cursor: the whole text so far of a reply.
    fn apply_edit_draft(&mut self, cb: &Callback, events: &mut Vec<Event>) -> Outcome {
        let text = clean_text(cb.reply_text.as_deref().unwrap_or_default());
        let scope = cb.scope().to_string();
        let key = (cb.session_id.clone(), DraftKey::Edit(scope.clone()));
        let now = self.clock.now();
        if let Some(d) = self.state.drafts.get(&key).filter(|d| d.is_open()) {
            if d.display().starts_with(&text) {
                return Outcome::Duplicate; // a repeat or a stale, shorter draft
            }
        } else {
            if text.is_empty() {
                return Outcome::Applied;
            }
            if self.idx(&cb.session_id).final_extends(&scope, &text) {
                return Outcome::Duplicate; // arrived after its final text
            }
            let d = self.new_draft(cb, now);
            self.state.drafts.insert(key.clone(), d);
        }
        let d = self.state.drafts.get_mut(&key).expect("inserted above");
        d.set_text(&text, now.timestamp_millis());
        self.sync_draft(events, &key);
        self.stop_typing(events, &cb.session_id, &scope, "message");
        Outcome::Applied
    }

    /// A new draft for the callback's task and scope, placed at the callback's time.
    fn new_draft(&self, cb: &Callback, now: DateTime<Utc>) -> Draft {
        Draft::new(
            &cb.session_id,
            cb.scope(),
            &cb.task_id,
            cb.user_message_id.as_deref(),
            self.sort_key(cb.occurred_at, now),
            cb.occurred_at.map(fmt_time),
            fmt_time(now),
            now.timestamp_millis(),
        )
    }

    fn apply_chunk(&mut self, cb: &Callback, events: &mut Vec<Event>) {
        let chunk = cb.chunk.as_ref().expect("parsed stream has a chunk");
        let now = self.clock.now();
        let key = (cb.session_id.clone(), DraftKey::Task(cb.task_id.clone()));
        if !self.state.drafts.contains_key(&key) {
            let d = self.new_draft(cb, now);
            self.state.drafts.insert(key.clone(), d);
        }
        let d = self.state.drafts.get_mut(&key).expect("inserted above");
        if d.apply_chunk(chunk, now.timestamp_millis()) {
            self.sync_draft(events, &key);
        }
    }

    /// Shows a draft's current text: updates its row, or creates the row once the draft is
    /// worth showing (not empty, not a prefix of a final text of its scope).
    fn sync_draft(&mut self, events: &mut Vec<Event>, key: &(String, DraftKey)) {
        let d = self.state.drafts.get(key).expect("caller has the draft");
        let text = d.display();
        if text == d.shown {
            return;
        }
        match d.row_id {
            Some(id) => {
                let Some(row) = self.state.draft_rows.get_mut(&id) else {
                    return;
                };
                row.text = text.clone();
                let row = row.clone();
                self.state.drafts.get_mut(key).expect("exists").shown = text;
                self.emit_row(events, &row, &Route::Chat, Change::Updated);
                self.ops.push(Op::UpdateMessage(row));
            }
            None => {
                let redundant = self
                    .index
                    .get(&d.session_id)
                    .is_some_and(|i| i.final_extends(&d.scope, &text));
                if text.is_empty() || redundant {
                    return;
                }
                let (session, scope, task, umid) = (
                    d.session_id.clone(),
                    d.scope.clone(),
                    d.task_id.clone(),
                    d.user_message_id.clone(),
                );
                let (sort_key, occurred_at, received_at) =
                    (d.sort_key, d.occurred_at.clone(), d.received_at.clone());
                let mut row = self.new_row(&session, MessageKind::Assistant, text.clone());
                row.task_id = Some(task);
                row.user_message_id = umid;
                row.scope = Some(scope);
                row.occurred_at = occurred_at;
                row.received_at = received_at;
                row.sort_key = sort_key;
                row.draft = true;
                row.draft_key = Some(key.1.encode());
                let d = self.state.drafts.get_mut(key).expect("exists");
                d.row_id = Some(row.id);
                d.shown = text;
                self.insert_row(row, &Route::Chat, events);
            }
        }
    }

    /// Removes a draft (and its row, if shown).
    fn drop_draft(&mut self, events: &mut Vec<Event>, key: &(String, DraftKey), route: &Route) {
        let Some(d) = self.state.drafts.get_mut(key) else {
            return;
        };
        let row = d.row_id;
        d.settle();
        if matches!(key.1, DraftKey::Edit(_)) {
            self.state.drafts.remove(key);
        }
        if let Some(id) = row {
            self.state.draft_rows.remove(&id);
            self.ops.push(Op::DeleteMessage(id));
            let (ty, sid) = match route {
                Route::Chat => ("message_removed", key.0.clone()),
                Route::Insights { call_id } => ("insight_removed", call_id.clone()),
            };
            self.emit(
                events,
                &sid,
                json!({"type": ty, "session_id": sid, "message_id": id}),
            );
        }
    }

    fn stop_typing(
        &mut self,
        events: &mut Vec<Event>,
        session_id: &str,
        scope: &str,
        reason: &str,
    ) {
        if let Some(lease) = self.state.typing.clear(session_id, scope) {
            let data = json!({"type": "typing_stopped", "session_id": session_id, "reason": reason,
                "typing": typing_view(session_id, scope, &lease)});
            self.emit(events, session_id, data);
        }
    }

    /// Timers: typing indicators and drafts whose inactivity timer ran out.
    fn expire(&mut self, events: &mut Vec<Event>) {
        let now_ms = self.clock.now_ms();
        for (session, scope) in self.state.typing.expire(now_ms) {
            let lease = typing::Lease {
                label: None,
                since_ms: now_ms,
                expires_ms: now_ms,
            };
            let data = json!({"type": "typing_stopped", "session_id": session, "reason": "timeout",
                "typing": typing_view(&session, &scope, &lease)});
            self.emit(events, &session, data);
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
            self.settle_as_is(events, &key);
        }
        // Forget settled stream drafts after a while (they only guard against late chunks).
        self.state
            .drafts
            .retain(|_, d| d.is_open() || d.last_activity_ms + 10 * 60_000 > now_ms);
    }

    /// An interrupted draft (no final message came): its text stays, as a final message.
    fn settle_as_is(&mut self, events: &mut Vec<Event>, key: &(String, DraftKey)) {
        let Some(d) = self.state.drafts.get_mut(key) else {
            return;
        };
        let row_id = d.row_id;
        d.settle();
        if matches!(key.1, DraftKey::Edit(_)) {
            self.state.drafts.remove(key);
        }
        let Some(mut row) = row_id.and_then(|id| self.state.draft_rows.remove(&id)) else {
            return;
        };
        let scope = row.scope.clone().unwrap_or_default();
        let content_key = hash_hex(&[
            &row.session_id,
            &scope,
            MessageKind::Assistant.as_str(),
            &row.text,
        ]);
        // The index may be cold after a restart; an unknown key only risks keeping a draft
        // whose text is also final, never losing one.
        let dup = self
            .index
            .get(&row.session_id)
            .is_some_and(|i| i.content_keys.contains(&key_digest(&content_key)));
        if dup {
            self.ops.push(Op::DeleteMessage(row.id));
            let data = json!({"type": "message_removed", "session_id": row.session_id, "message_id": row.id});
            let sid = row.session_id.clone();
            self.emit(events, &sid, data);
            return;
        }
        row.draft = false;
        row.draft_key = None;
        row.content_key = Some(content_key);
        if let Some(i) = self.index.get_mut(&row.session_id) {
            i.add(&row);
        }
        self.emit_row(events, &row, &Route::Chat, Change::Updated);
        self.ops.push(Op::UpdateMessage(row));
    }

    /// `Change::Added { logged: true }`: the row is its own event (decided by `insert_row`,
    /// which gave it the newest id).
    fn emit_row(
        &mut self,
        events: &mut Vec<Event>,
        row: &MessageRow,
        route: &Route,
        change: Change,
    ) {
        let added = matches!(change, Change::Added { .. });
        let (data, log_session) = match route {
            Route::Chat => {
                // The hot path: serialized straight from the view, no JSON tree.
                #[derive(serde::Serialize)]
                struct MessageEvent<'a> {
                    id: i64,
                    #[serde(rename = "type")]
                    ty: &'a str,
                    session_id: &'a str,
                    message: MessageJson<'a>,
                }
                let logged = matches!(change, Change::Added { logged: true });
                let id = if logged { row.id } else { self.state.take_id() };
                let ty = if added {
                    "message_added"
                } else {
                    "message_updated"
                };
                let json = serde_json::to_string(&MessageEvent {
                    id,
                    ty,
                    session_id: &row.session_id,
                    message: MessageJson(row),
                })
                .expect("serializable");
                let log_session = (!logged).then_some(row.session_id.as_str());
                self.push_event(events, id, ty, log_session, json);
                return;
            }
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
        self.emit(events, &log_session, data);
    }

    // ---- sessions and user messages ----

    fn create_session(
        &mut self,
        is_call: bool,
        title: Option<String>,
        events: &mut Vec<Event>,
    ) -> SessionView {
        let now = fmt_time(self.clock.now());
        let id = uuid::Uuid::new_v4().to_string();
        let chat = SessionRecord {
            session_id: id.clone(),
            kind: "chat".into(),
            is_call,
            call_id: None,
            title: title
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty()),
            created_at: now.clone(),
            ended_at: None,
            deleted_at: None,
        };
        self.ops.push(Op::InsertSession(chat.clone()));
        self.index.insert(id.clone(), SessionIndex::default());
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
            self.ops.push(Op::InsertSession(insights.clone()));
            self.index
                .insert(insights.session_id.clone(), SessionIndex::default());
            sessions.insert(insights.session_id.clone(), insights);
        }
        sessions.insert(id.clone(), chat.clone());
        let view = session_view(&chat);
        let data = json!({"type": "session_created", "session_id": id, "session": view});
        self.emit(events, &id, data);
        view
    }

    fn live_chat(&self, session_id: &str) -> Option<&SessionRecord> {
        self.state
            .sessions
            .get(session_id)
            .filter(|s| s.kind == "chat" && s.deleted_at.is_none())
    }

    fn end_call(
        &mut self,
        session_id: &str,
        events: &mut Vec<Event>,
    ) -> Result<SessionView, CoreError> {
        let s = self
            .live_chat(session_id)
            .ok_or(CoreError::SessionNotFound)?;
        if !s.is_call {
            return Err(CoreError::NotACall);
        }
        if s.ended_at.is_some() {
            return Ok(session_view(s));
        }
        let now = fmt_time(self.clock.now());
        let insights_id = format!("{INSIGHTS_PREFIX}{session_id}");
        self.ops.push(Op::EndSessions {
            ids: vec![session_id.to_string(), insights_id.clone()],
            at: now.clone(),
        });
        let sessions = Arc::make_mut(&mut self.state.sessions);
        for id in [session_id, insights_id.as_str()] {
            if let Some(s) = sessions.get_mut(id) {
                s.ended_at = Some(now.clone());
            }
        }
        let view = session_view(&sessions[session_id]);
        let data = json!({"type": "session_updated", "session_id": session_id, "session": view});
        self.emit(events, session_id, data);
        Ok(view)
    }

    fn delete_session(
        &mut self,
        session_id: &str,
        events: &mut Vec<Event>,
    ) -> Result<(), CoreError> {
        if self.live_chat(session_id).is_none() {
            return Err(CoreError::SessionNotFound);
        }
        let now = fmt_time(self.clock.now());
        let insights_id = format!("{INSIGHTS_PREFIX}{session_id}");
        let ids = [session_id.to_string(), insights_id.clone()];
        let sessions = Arc::make_mut(&mut self.state.sessions);
        for id in &ids {
            if let Some(s) = sessions.get_mut(id) {
                s.deleted_at = Some(now.clone());
            }
            self.state.typing.clear_session(id);
            self.index.remove(id);
        }
        self.state
            .drafts
            .retain(|(s, _), _| s != session_id && s != &insights_id);
        self.state
            .draft_rows
            .retain(|_, r| r.session_id != session_id && r.session_id != insights_id);
        let events_before = self.state.next_id;
        let data = json!({"type": "session_deleted", "session_id": session_id});
        self.emit(events, session_id, data);
        self.ops.push(Op::DeleteSessions {
            ids: ids.to_vec(),
            at: now,
            events_before,
        });
        Ok(())
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
        self.ensure_index(conn, session_id).await?;
        let message_id = uuid::Uuid::new_v4().to_string();
        let mut row = self.new_row(session_id, MessageKind::User, text.to_string());
        row.message_id = Some(message_id.clone());
        row.scope = Some(message_id);
        row.occurred_at = Some(row.received_at.clone());
        row.delivery = Some(DeliveryState::Pending.as_str().into());
        let view = MessageView::from(&row);
        self.insert_row(row, &Route::Chat, events);
        Ok(Ok(view))
    }

    async fn transcript_turn(
        &mut self,
        conn: &mut SqliteConnection,
        session_id: &str,
        speaker: Option<String>,
        text: &str,
        events: &mut Vec<Event>,
    ) -> Result<Result<TranscriptView, CoreError>, StoreError> {
        let Some(call) = self.live_chat(session_id) else {
            return Ok(Err(CoreError::SessionNotFound));
        };
        if !call.is_call {
            return Ok(Err(CoreError::NotACall));
        }
        if call.ended_at.is_some() {
            return Ok(Err(CoreError::CallEnded));
        }
        let text = text.trim();
        if text.is_empty() {
            return Ok(Err(CoreError::EmptyText));
        }
        let start = micros_of(&call.created_at);
        let insights_id = format!("{INSIGHTS_PREFIX}{session_id}");
        self.ensure_index(conn, &insights_id).await?;
        let mut row = self.new_row(&insights_id, MessageKind::Transcript, text.to_string());
        row.speaker = speaker
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        row.delivery = Some(DeliveryState::Pending.as_str().into());
        let view = TranscriptView::from_row(&row, session_id, start);
        self.emit(
            events,
            session_id,
            json!({"type": "transcript_added", "session_id": session_id, "transcript": view}),
        );
        self.ops.push(Op::InsertMessage { row, logged: false });
        Ok(Ok(view))
    }

    async fn set_delivery(
        &mut self,
        conn: &mut SqliteConnection,
        id: i64,
        update: DeliveryUpdate,
        events: &mut Vec<Event>,
    ) -> Result<Result<(), CoreError>, StoreError> {
        let Some(mut row) = load::message(conn, id).await? else {
            return Ok(Err(CoreError::MessageNotFound));
        };
        if !matches!(row.kind, MessageKind::User | MessageKind::Transcript) {
            return Ok(Err(CoreError::MessageNotFound));
        }
        row.delivery = Some(update.state.as_str().into());
        if update.task_id.is_some() {
            row.task_id = update.task_id;
        }
        row.delivery_error = update
            .error
            .map(|(code, message)| json!({"code": code, "message": message}).to_string());
        if row.kind == MessageKind::Transcript {
            let call_id = row
                .session_id
                .strip_prefix(INSIGHTS_PREFIX)
                .unwrap_or_default()
                .to_string();
            let start = self
                .state
                .sessions
                .get(&call_id)
                .map(|s| micros_of(&s.created_at))
                .unwrap_or(0);
            let view = TranscriptView::from_row(&row, &call_id, start);
            self.emit(
                events,
                &call_id,
                json!({"type": "transcript_updated", "session_id": call_id, "transcript": view}),
            );
        } else {
            self.emit_row(events, &row, &Route::Chat, Change::Updated);
        }
        self.ops.push(Op::UpdateMessage(row));
        Ok(Ok(()))
    }
}

fn typing_view(session_id: &str, scope: &str, lease: &typing::Lease) -> TypingView {
    TypingView {
        session_id: session_id.to_string(),
        scope: scope.to_string(),
        label: lease.label.clone(),
        since: DateTime::from_timestamp_millis(lease.since_ms)
            .map(fmt_time)
            .unwrap_or_default(),
    }
}

#[cfg(test)]
mod tests {
    //! The conversation with a manual clock on a real SQLite file: timers fire only when the
    //! test moves time, so nothing sleeps.
    use super::*;
    use crate::clock::ManualClock;
    use crate::protocol::parse_callback;

    const TASK: &str = "3dac4154-7224-4cd4-88a0-14428dc826d7";

    async fn start(timeout_ms: i64) -> (Conversation, Arc<ManualClock>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        let (store, conn) = Store::open(&dir.path().join("t.db"), Default::default())
            .await
            .unwrap();
        let clock = ManualClock::new(DateTime::from_timestamp(1_800_000_000, 0).unwrap());
        let c = Conversation::start(
            store,
            conn,
            clock.clone(),
            Settings {
                typing_timeout_ms: timeout_ms,
                insights_grace_ms: 60_000,
            },
        )
        .await
        .unwrap();
        (c, clock, dir)
    }

    async fn post(c: &Conversation, body: serde_json::Value) -> Outcome {
        c.submit(parse_callback(TASK, body.to_string().as_bytes()).unwrap())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_failed_commit_writes_nothing_and_answers_storage_unavailable() {
        let (c, _clock, dir) = start(30_000).await;
        let s = c.create_session(false, None).await.unwrap().session_id;
        let msg = |id: &str, text: &str| {
            parse_callback(
                TASK,
                json!({"session_id": s, "status": "message", "message_id": id, "reply_text": text})
                    .to_string()
                    .as_bytes(),
            )
            .unwrap()
        };
        // A second connection makes SQLite itself refuse one row, inside the writer's commit.
        use sqlx::ConnectOptions;
        let mut other = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(dir.path().join("t.db"))
            .connect()
            .await
            .unwrap();
        sqlx::query(
            "CREATE TRIGGER refuse BEFORE INSERT ON messages WHEN NEW.text = 'boom' \
             BEGIN SELECT RAISE(ABORT, 'refused by the test'); END",
        )
        .execute(&mut other)
        .await
        .unwrap();
        assert_eq!(c.submit(msg("m1", "one")).await.unwrap(), Outcome::Applied);
        let err = c.submit(msg("m2", "boom")).await.unwrap_err();
        assert!(matches!(err, CoreError::StorageUnavailable(_)), "{err:?}");
        // Nothing of the failed batch stayed, in the database or in memory: the same
        // message_id is new once SQLite accepts it.
        assert_eq!(
            c.submit(msg("m3", "three")).await.unwrap(),
            Outcome::Applied
        );
        sqlx::query("DROP TRIGGER refuse")
            .execute(&mut other)
            .await
            .unwrap();
        assert_eq!(c.submit(msg("m2", "boom")).await.unwrap(), Outcome::Applied);
        assert_eq!(
            c.submit(msg("m2", "boom")).await.unwrap(),
            Outcome::Duplicate
        );
        let texts: Vec<String> = c
            .messages(&s)
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.text)
            .collect();
        assert_eq!(texts, ["one", "three", "boom"]);
        let events = c.store().events_after(0, 1000).await.unwrap();
        let added = events
            .iter()
            .filter(|(_, data)| data.contains("\"type\":\"message_added\""))
            .count();
        assert_eq!(added, 3, "no event of the failed batch was logged");
    }

    #[tokio::test]
    async fn a_constraint_failing_late_in_a_commit_takes_its_earlier_rows_back_too() {
        // Rows go in as `INSERT OR ROLLBACK` (no statement journal): a violation ends the whole
        // transaction at once; the writer must not leave the message rows written before it.
        let (c, _clock, dir) = start(30_000).await;
        let s = c.create_session(false, None).await.unwrap().session_id;
        post(
            &c,
            json!({"session_id": s, "status": "message", "message_id": "m1", "reply_text": "one"}),
        )
        .await;
        // The reply to a typing scope writes its row (its own event), then `typing_stopped`
        // into `events`. Another connection takes that event's id: the message row goes in
        // first, then the event clashes on the primary key.
        post(
            &c,
            json!({"session_id": s, "status": "typing", "user_message_id": "u2"}),
        )
        .await;
        use sqlx::ConnectOptions;
        let mut other = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(dir.path().join("t.db"))
            .connect()
            .await
            .unwrap();
        let taken = c.store().last_event_id().await.unwrap() + 2;
        sqlx::query("INSERT INTO events (id, session_id, data) VALUES (?, 'elsewhere', '{\"type\":\"marker\"}')")
            .bind(taken)
            .execute(&mut other)
            .await
            .unwrap();
        let two = parse_callback(
            TASK,
            json!({"session_id": s, "status": "message", "message_id": "m2", "user_message_id": "u2", "reply_text": "two"})
                .to_string()
                .as_bytes(),
        )
        .unwrap();
        let err = c.submit(two.clone()).await.unwrap_err();
        assert!(matches!(err, CoreError::StorageUnavailable(_)), "{err:?}");
        let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM messages WHERE session_id = ?")
            .bind(&s)
            .fetch_one(&mut other)
            .await
            .unwrap();
        assert_eq!(rows, 1, "the failed commit's message row was taken back");
        // After the reload the ids move past the taken one and the resend is accepted once.
        assert_eq!(c.submit(two.clone()).await.unwrap(), Outcome::Applied);
        assert_eq!(c.submit(two).await.unwrap(), Outcome::Duplicate);
        let texts: Vec<String> = c
            .messages(&s)
            .await
            .unwrap()
            .into_iter()
            .map(|m| m.text)
            .collect();
        assert_eq!(texts, ["one", "two"]);
    }

    #[tokio::test]
    async fn ids_of_a_deleted_session_are_never_handed_out_again() {
        let (c, _clock, _dir) = start(30_000).await;
        let s = c.create_session(false, None).await.unwrap().session_id;
        for n in 0..3 {
            post(&c, json!({"session_id": s, "status": "message", "message_id": format!("m{n}"), "reply_text": format!("reply {n}")})).await;
        }
        let highest = c.messages(&s).await.unwrap().last().unwrap().id;
        let last_event = c.store().last_event_id().await.unwrap();
        c.delete_session(&s).await.unwrap();
        // What a restart would start from: past the deleted rows, though none is left.
        let mut conn = c.store().connect_reader().await.unwrap();
        let next = load::next_id(&mut conn).await.unwrap();
        assert!(next > highest, "{next} <= {highest}");
        assert!(next > last_event, "{next} <= {last_event}");
        let left: i64 = sqlx::query_scalar("SELECT count(*) FROM messages")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(left, 0);
    }

    fn h_bytes(parts: &[&str]) -> Vec<u8> {
        let mut h = Sha256::new();
        for p in parts {
            h.update(p.as_bytes());
            h.update([0u8]);
        }
        h.finalize().to_vec()
    }

    #[test]
    fn a_session_index_keeps_the_final_texts_of_its_recent_scopes() {
        let final_row = |n: u64| MessageRow {
            id: n as i64,
            session_id: "s".into(),
            kind: MessageKind::Assistant,
            text: format!("The answer to question {n}."),
            message_id: Some(format!("m{n}")),
            task_id: None,
            user_message_id: None,
            scope: Some(format!("u{n}")),
            error_code: None,
            occurred_at: None,
            received_at: "2026-11-29T12:00:00Z".into(),
            sort_key: n as i64,
            draft: false,
            hidden: false,
            content_key: Some(hash_hex(&[&n.to_string()])),
            draft_key: None,
            speaker: None,
            delivery: None,
            delivery_error: None,
        };
        let mut idx = SessionIndex::default();
        let total = 5 * FINAL_SCOPES;
        for n in 1..=total {
            idx.add(&final_row(n));
        }
        assert!(idx.finals.len() as u64 <= 2 * FINAL_SCOPES);
        // The recent scopes answer; a prefix of their final is redundant, other text is not.
        for n in total - FINAL_SCOPES + 1..=total {
            assert!(
                idx.final_extends(&format!("u{n}"), "The answer"),
                "scope u{n}"
            );
        }
        assert!(!idx.final_extends(&format!("u{total}"), "Another answer"));
        assert!(!idx.final_extends("u1", "The answer"), "long forgotten");
        // A scope that gets another final stays recent.
        idx.add(&MessageRow {
            text: "A second final.".into(),
            ..final_row(total - FINAL_SCOPES)
        });
        for n in total + 1..total + FINAL_SCOPES {
            idx.add(&final_row(n));
        }
        assert!(idx.final_extends(&format!("u{}", total - FINAL_SCOPES), "A second"));
        // Dedupe keys are never forgotten.
        assert_eq!(idx.message_ids.len() as u64, total + FINAL_SCOPES - 1);
    }

    #[test]
    fn content_hashes_keep_their_stored_form() {
        // Stored rows carry these keys; a restart must derive the same ones.
        let parts = ["task", "Caf\u{e9} \u{25c9}", ""];
        let mut h = Sha256::new();
        for p in parts {
            h.update(p.as_bytes());
            h.update([0u8]);
        }
        let expected: String = h.finalize()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(hash_hex(&parts), expected);
        assert_eq!(hash_hex(&parts).len(), 32);
        // The index holds the same 128 bits; other forms get a digest of their own.
        assert_eq!(
            key_digest(&expected),
            u128::from_be_bytes(h_bytes(&parts)[..16].try_into().unwrap())
        );
        assert_ne!(key_digest("not-hex"), key_digest("not-hex."));
    }

    #[tokio::test]
    async fn typing_clears_when_the_inactivity_timer_runs_out() {
        let (c, clock, _dir) = start(30_000).await;
        let s = c.create_session(false, None).await.unwrap().session_id;
        post(&c, json!({"session_id": s, "status": "typing", "user_message_id": "u1", "label": "thinking"})).await;
        assert_eq!(
            c.typing(&s).await.unwrap()[0].label.as_deref(),
            Some("thinking")
        );
        clock.advance_ms(20_000);
        post(
            &c,
            json!({"session_id": s, "status": "typing", "user_message_id": "u1"}),
        )
        .await;
        clock.advance_ms(29_000); // 49 s after the first, 29 s after the keepalive
        c.tick().await.unwrap();
        assert_eq!(c.typing(&s).await.unwrap().len(), 1, "kept alive");
        clock.advance_ms(1_000);
        c.tick().await.unwrap();
        assert!(c.typing(&s).await.unwrap().is_empty(), "expired");
        let mut sub = c.hub().subscribe(c.store().clone(), 0);
        let mut last = String::new();
        while sub.cursor() < c.store().last_event_id().await.unwrap() {
            last = sub.next().await.unwrap().json.clone();
        }
        assert!(
            last.contains("\"typing_stopped\"") && last.contains("\"timeout\""),
            "{last}"
        );
    }

    #[tokio::test]
    async fn typing_after_completed_does_not_stick() {
        let (c, clock, _dir) = start(30_000).await;
        let s = c.create_session(false, None).await.unwrap().session_id;
        post(
            &c,
            json!({"session_id": s, "status": "typing", "user_message_id": "u1"}),
        )
        .await;
        post(
            &c,
            json!({"session_id": s, "status": "completed", "user_message_id": "u1"}),
        )
        .await;
        assert!(c.typing(&s).await.unwrap().is_empty());
        post(
            &c,
            json!({"session_id": s, "status": "typing", "user_message_id": "u1"}),
        )
        .await;
        assert_eq!(c.typing(&s).await.unwrap().len(), 1);
        clock.advance_ms(30_000);
        c.tick().await.unwrap();
        assert!(c.typing(&s).await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn the_log_replays_every_event_exactly_as_it_was_emitted() {
        let (c, _clock, _dir) = start(30_000).await;
        let mut live = c.hub().subscribe(c.store().clone(), 0);
        let s = c.create_session(true, None).await.unwrap().session_id;
        // Logged by reference (final assistant rows, notices, errors) and in full (drafts that
        // change, user messages whose delivery changes, insights).
        post(&c, json!({"session_id": s, "status": "message", "message_id": "a", "reply_text": "Final \"answer\" é"})).await;
        post(&c, json!({"session_id": s, "status": "notice", "message_id": "n", "reply_text": "Working on it"})).await;
        post(&c, json!({"session_id": s, "status": "errored", "error_code": "E1", "error_message": "It broke"})).await;
        post(&c, json!({"session_id": s, "status": "stream", "chunk": {"type": "text-delta", "id": "p", "delta": "Dra"}})).await;
        post(&c, json!({"session_id": s, "status": "stream", "chunk": {"type": "text-delta", "id": "p", "delta": "ft"}})).await;
        post(&c, json!({"session_id": s, "status": "message", "message_id": "d", "reply_text": "Draft done"})).await;
        post(&c, json!({"session_id": format!("insights:{s}"), "status": "message", "message_id": "i", "reply_text": "Tip"})).await;
        let user = c.user_message(&s, "Hello").await.unwrap();
        c.set_delivery(
            user.id,
            DeliveryUpdate {
                state: DeliveryState::Sent,
                task_id: None,
                error: None,
            },
        )
        .await
        .unwrap();
        let last = c.store().last_event_id().await.unwrap();
        let mut emitted = Vec::new();
        loop {
            let e = live.next().await.unwrap();
            emitted.push((e.id, serde_json::from_str::<Value>(&e.json).unwrap()));
            if e.id == last {
                break;
            }
        }
        let mut replay = c.hub().subscribe(c.store().clone(), 0);
        for (id, json) in &emitted {
            let e = replay.next().await.unwrap();
            assert_eq!(e.id, *id);
            assert_eq!(
                &serde_json::from_str::<Value>(&e.json).unwrap(),
                json,
                "event {id}"
            );
        }
        let mut reader = c.store().connect_reader().await.unwrap();
        let logged: Vec<String> =
            sqlx::query_scalar("SELECT kind FROM messages WHERE logged = 1 ORDER BY id")
                .fetch_all(&mut reader)
                .await
                .unwrap();
        assert_eq!(
            logged,
            ["assistant", "notice", "error"],
            "the final message, the notice and the error are their own events"
        );
        let in_log: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM events WHERE id IN (SELECT id FROM messages WHERE logged = 1)",
        )
        .fetch_one(&mut reader)
        .await
        .unwrap();
        assert_eq!(in_log, 0, "and have no row in `events`");
        // Logged by an earlier version: the same events as references (`message_row`, data
        // `{"type","session_id"}`) in `events`. Same replay.
        let mut w = sqlx::ConnectOptions::connect(
            &sqlx::sqlite::SqliteConnectOptions::new().filename(c.store().path()),
        )
        .await
        .unwrap();
        let old = sqlx::query(
            "INSERT INTO events (id, session_id, data, message_row) \
             SELECT id, session_id, json_object('type', 'message_added', 'session_id', \
             session_id), id FROM messages WHERE logged = 1",
        )
        .execute(&mut w)
        .await
        .unwrap();
        assert_eq!(old.rows_affected(), 3);
        sqlx::query("UPDATE messages SET logged = 0")
            .execute(&mut w)
            .await
            .unwrap();
        let mut replay = c.hub().subscribe(c.store().clone(), 0);
        for (id, json) in &emitted {
            let e = replay.next().await.unwrap();
            assert_eq!(
                &serde_json::from_str::<Value>(&e.json).unwrap(),
                json,
                "event {id} (old form)"
            );
        }
    }

    #[tokio::test]
    async fn the_merged_log_pages_in_order_without_gaps_or_repeats() {
        // Rows that are their own event interleave with events logged in `events`; every page
        // boundary must land between them correctly.
        let (c, _clock, _dir) = start(30_000).await;
        let s = c.create_session(false, None).await.unwrap().session_id;
        for n in 0..120 {
            let scope = format!("u{n}");
            post(
                &c,
                json!({"session_id": s, "status": "typing", "user_message_id": scope}),
            )
            .await;
            post(&c, json!({"session_id": s, "status": "message", "user_message_id": scope, "message_id": format!("m{n}"), "reply_text": format!("reply {n}")})).await;
        }
        let whole = c.store().events_after(0, 10_000).await.unwrap();
        let types: Vec<String> = whole
            .iter()
            .map(|(_, d)| {
                serde_json::from_str::<Value>(d).unwrap()["type"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect();
        assert_eq!(types.iter().filter(|t| *t == "message_added").count(), 120);
        assert_eq!(types.iter().filter(|t| *t == "typing_started").count(), 120);
        assert_eq!(types.iter().filter(|t| *t == "typing_stopped").count(), 120);
        assert!(
            whole.windows(2).all(|w| w[0].0 < w[1].0),
            "strictly increasing"
        );
        for page in [1, 2, 3, 7, 50] {
            let mut cursor = 0;
            let mut paged = Vec::new();
            loop {
                let rows = c.store().events_after(cursor, page).await.unwrap();
                let Some(last) = rows.last() else { break };
                cursor = last.0;
                paged.extend(rows);
            }
            assert_eq!(paged, whole, "pages of {page}");
        }
        assert_eq!(
            c.store().last_event_id().await.unwrap(),
            whole.last().unwrap().0
        );
    }

    #[tokio::test]
    async fn an_interrupted_draft_settles_as_is_on_timeout() {
        let (c, clock, _dir) = start(5_000).await;
        let s = c.create_session(false, None).await.unwrap().session_id;
        for chunk in [
            json!({"type": "text-start", "id": "p1"}),
            json!({"type": "text-delta", "id": "p1", "delta": "Half an ans"}),
        ] {
            post(
                &c,
                json!({"session_id": s, "status": "stream", "chunk": chunk}),
            )
            .await;
        }
        let m = c.messages(&s).await.unwrap();
        assert_eq!(
            (m.len(), m[0].draft, m[0].text.as_str()),
            (1, true, "Half an ans")
        );
        clock.advance_ms(4_999);
        c.tick().await.unwrap();
        assert!(c.messages(&s).await.unwrap()[0].draft);
        clock.advance_ms(1);
        c.tick().await.unwrap();
        let m = c.messages(&s).await.unwrap();
        assert_eq!(
            (m.len(), m[0].draft, m[0].text.as_str()),
            (1, false, "Half an ans")
        );
    }

    #[tokio::test]
    async fn insights_session_ends_after_its_grace_period() {
        let (c, clock, _dir) = start(30_000).await;
        let call = c.create_session(true, None).await.unwrap();
        let ins = call.insights_session_id.clone().unwrap();
        c.end_call(&call.session_id).await.unwrap();
        clock.advance_ms(60_000);
        let reply = json!({"session_id": ins, "status": "message", "message_id": "a", "reply_text": "late but in time"});
        assert_eq!(post(&c, reply).await, Outcome::Applied);
        clock.advance_ms(1);
        let reply = json!({"session_id": ins, "status": "message", "message_id": "b", "reply_text": "too late"});
        assert_eq!(post(&c, reply).await, Outcome::SessionEnded);
        // The chat of an ended call stays open for the review.
        let chat = json!({"session_id": call.session_id, "status": "message", "message_id": "c", "reply_text": "review"});
        assert_eq!(post(&c, chat).await, Outcome::Applied);
        assert_eq!(c.insights(&call.session_id).await.unwrap().len(), 1);
    }
}
