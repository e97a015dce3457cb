//! The actor: how commands flow from callers through the rules into the writer.
//!
//! 1. Callers ([`super::Conversation`]) send a [`Cmd`] with a reply channel to one task.
//! 2. The actor takes what has queued up (up to [`MAX_BATCH`]) as one batch, or a `Tick` when
//!    a timer of the rules is due.
//! 3. It loads what the rules will need from the database on its read connection: the index of
//!    every session the batch touches that is not in memory, the rows whose delivery changes.
//! 4. The rules ([`super::rules`]) decide every command of the batch in memory, synchronously:
//!    the answers, the events, the writes ([`crate::store::Op`]).
//! 5. The batch goes to the store's writer thread ([`crate::store::writer`]) as one unit, and
//!    the actor goes straight on to the next batch: the rules decide batch N+1 while the
//!    writer commits batch N (grouping whatever units have queued into one transaction).
//! 6. Once a unit is committed, [`deliver`] publishes its events and answers its callers; so a
//!    2xx always means "on disk". If a commit fails, its callers (and those of every unit
//!    decided on top of it, same epoch) get `storage_unavailable`; the actor waits for the
//!    writer to drain, reloads the rules from the database and starts a new epoch.
//!
//! A lone command (the usual case: one callback at a time) does not wait for the actor's task
//! at all: [`Handle::now`] runs steps 3–6 for it on the caller's own task when the actor is
//! idle, nothing is queued or in flight, the rules need nothing from the database and the
//! writer connection is free. It holds the actor's state for that long (the lock the actor's
//! task takes for a batch) and never waits inside it, so a caller that gives up cannot leave
//! a decision half made. Commands that arrive together still go through the actor and the
//! writer thread, grouped.

use super::index::{SessionIndex, RECENT_FINALS};
use super::keys::{id_digest, key_digest};
use super::rules::permissions::Settled;
use super::rules::Rules;
use super::{CoreError, DeliveryUpdate, Outcome, Settings};
use crate::clock::SharedClock;
use crate::events::{Change, Event, EventHub};
use crate::model::{MessageRow, MessageView, SessionView, TranscriptView, TypingView};
use crate::protocol::Callback;
use crate::store::writer::{Payload, Unit, WriterHandle};
use crate::store::{load, Op, StoreError};
use sqlx::sqlite::SqliteConnection;
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot, Mutex, Notify};

/// Largest number of commands applied in one transaction.
const MAX_BATCH: usize = 512;

pub(super) type Reply<T> = oneshot::Sender<Result<T, CoreError>>;

pub(super) enum Cmd {
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
    RenameSession {
        session_id: String,
        title: Option<String>,
        reply: Reply<SessionView>,
    },
    UserMessage {
        session_id: String,
        text: String,
        /// Not an ordinary message: `summary_request`.
        purpose: Option<&'static str>,
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
        language: Option<String>,
        reply: Reply<TranscriptView>,
    },
    Delivery {
        id: i64,
        update: DeliveryUpdate,
        reply: Reply<()>,
    },
    /// "Transcribe again": the call's turns get new texts, all or none.
    Retranscribe {
        call_id: String,
        turns: Vec<crate::recordings::Retranscribed>,
        reply: Reply<u64>,
    },
    PermissionRequest {
        session_id: String,
        request_id: String,
        tool: String,
        input_preview: String,
        reply: Reply<(MessageView, bool)>,
    },
    SettlePermission {
        request_id: String,
        state: String,
        resolver: Option<String>,
        reply: Reply<Settled>,
    },
    PermissionCard {
        request_id: String,
        reply: Reply<Option<MessageView>>,
    },
    /// A call's turns given other speaker names (`rules::speakers`).
    Speakers {
        call_id: String,
        change: super::SpeakerChange,
        reply: Reply<usize>,
    },
    /// An app-wide event (not about one session), e.g. the assistant link's status.
    AppEvent {
        change: Box<Change>,
        reply: Reply<()>,
    },
    Tick,
}

impl Cmd {
    /// Answers the command with `err` without applying it.
    fn refuse(self, err: CoreError) {
        fn no<T>(reply: Reply<T>, err: CoreError) {
            let _ = reply.send(Err(err));
        }
        match self {
            Cmd::Callback(_, reply) => no(reply, err),
            Cmd::CreateSession { reply, .. } => no(reply, err),
            Cmd::EndCall { reply, .. } => no(reply, err),
            Cmd::DeleteSession { reply, .. } => no(reply, err),
            Cmd::RenameSession { reply, .. } => no(reply, err),
            Cmd::UserMessage { reply, .. } => no(reply, err),
            Cmd::Typing { reply, .. } => no(reply, err),
            Cmd::Transcript { reply, .. } => no(reply, err),
            Cmd::Delivery { reply, .. } => no(reply, err),
            Cmd::Retranscribe { reply, .. } => no(reply, err),
            Cmd::PermissionRequest { reply, .. } => no(reply, err),
            Cmd::SettlePermission { reply, .. } => no(reply, err),
            Cmd::PermissionCard { reply, .. } => no(reply, err),
            Cmd::AppEvent { reply, .. } => no(reply, err),
            Cmd::Speakers { reply, .. } => no(reply, err),
            Cmd::Tick => {}
        }
    }
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
    _unanswered: Unanswered,
}

/// Counts the batches handed to the writer whose callers are not answered yet (committed or
/// not): while there are any, no command is committed on its caller's task, so events and
/// answers leave in commit order.
struct Unanswered(Arc<AtomicUsize>);

impl Unanswered {
    fn new(count: &Arc<AtomicUsize>) -> Unanswered {
        count.fetch_add(1, Ordering::AcqRel);
        Unanswered(count.clone())
    }
}

impl Drop for Unanswered {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
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
            publish(&hub, u.payload);
        }
    }
}

/// A batch's writes with its events and answers, counted unanswered until it is dropped.
fn batch_unit(
    epoch: u64,
    ops: Vec<Op>,
    events: Vec<Event>,
    finishers: Vec<Finish>,
    unanswered: &Arc<AtomicUsize>,
) -> Unit<Batch> {
    Unit {
        epoch,
        ops,
        payload: Batch {
            events,
            finishers,
            _unanswered: Unanswered::new(unanswered),
        },
    }
}

fn publish(hub: &EventHub, batch: Batch) {
    for e in batch.events {
        hub.publish(e);
    }
    for f in batch.finishers {
        f(None);
    }
}

/// The callers' end of the actor.
#[derive(Clone)]
pub(super) struct Handle {
    tx: mpsc::Sender<Cmd>,
    actor: Arc<Mutex<Actor>>,
    /// Commands whose callers are waiting for their answer ([`Handle::enter`]).
    waiting: Arc<AtomicUsize>,
    /// Rung when a command decided on a caller's task brought a timer of the rules forward.
    timers: Arc<Notify>,
}

/// A caller waiting for its command's answer (see [`Handle::enter`]).
pub(super) struct Waiting(Arc<AtomicUsize>);

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Handle {
    /// Counts the caller as waiting until the guard is dropped: with others waiting beside it,
    /// commands are grouped (one commit for many) rather than decided one by one.
    pub fn enter(&self) -> Waiting {
        self.waiting.fetch_add(1, Ordering::AcqRel);
        Waiting(self.waiting.clone())
    }

    /// Queues `cmd` for the actor's task; `Err` once the actor is gone.
    pub async fn send(&self, cmd: Cmd) -> Result<(), Cmd> {
        self.tx.send(cmd).await.map_err(|e| e.0)
    }

    /// Decides and commits `cmd` here, on the caller's task, when it is alone (no other caller
    /// waiting, the actor idle, its mailbox empty, nothing in flight to the writer), the rules
    /// have what they need in memory and the writer connection is free; `Some(cmd)` back
    /// otherwise (send it). Its answer is in its reply channel when this returns `None`. Never
    /// waits. The caller has [`Handle::enter`]ed.
    pub fn now(&self, cmd: Cmd) -> Option<Cmd> {
        if matches!(cmd, Cmd::Tick)
            || self.waiting.load(Ordering::Acquire) > 1
            || self.tx.capacity() < self.tx.max_capacity()
        {
            return Some(cmd);
        }
        let Ok(mut actor) = self.actor.try_lock() else {
            return Some(cmd);
        };
        let a = &mut *actor;
        if a.unanswered.load(Ordering::Acquire) != 0
            || a.writer.pipeline().failed_epoch() >= a.epoch
            || !a.in_memory(&cmd)
        {
            return Some(cmd);
        }
        let Some(here) = a.writer.hold_here() else {
            return Some(cmd);
        };
        let before = a.rules.next_deadline_ms();
        let mut events = Vec::new();
        let finisher = Actor::apply(&mut a.rules, cmd, &HashMap::new(), &mut events);
        let ops = a.rules.take_ops();
        let unit = batch_unit(a.epoch, ops, events, vec![finisher], &a.unanswered);
        if let Some(done) = here.commit(unit) {
            publish(&a.hub, done.payload);
        }
        a.after_batch();
        if let Some(at) = a.rules.next_deadline_ms() {
            if before.is_none_or(|b| at < b) {
                self.timers.notify_one();
            }
        }
        None
    }
}

/// Starts the writer thread on `conn`, the delivery task and the actor; returns the actor's
/// handle.
pub(super) async fn start(
    store: &crate::store::Store,
    conn: SqliteConnection,
    clock: SharedClock,
    settings: Settings,
    hub: EventHub,
) -> Result<Handle, StoreError> {
    let mut reader = store.connect_reader().await?;
    let rules = load_rules(&mut reader, clock, settings).await?;
    let (done_tx, done_rx) = mpsc::unbounded_channel();
    tokio::spawn(deliver(hub.clone(), done_rx));
    let writer = crate::store::writer::spawn(store.clone(), conn, done_tx)?;
    let (tx, rx) = mpsc::channel(8192);
    let actor = Arc::new(Mutex::new(Actor {
        reader,
        rules,
        writer,
        epoch: 1,
        hub,
        unanswered: Arc::new(AtomicUsize::new(0)),
    }));
    let timers = Arc::new(Notify::new());
    tokio::spawn(run(actor.clone(), rx, timers.clone()));
    Ok(Handle {
        tx,
        actor,
        waiting: Arc::new(AtomicUsize::new(0)),
        timers,
    })
}

/// The actor's task: waits for commands (or a timer of the rules), and decides each batch
/// holding the actor's state.
async fn run(actor: Arc<Mutex<Actor>>, mut rx: mpsc::Receiver<Cmd>, timers: Arc<Notify>) {
    // The next timer of the rules and the time it was read at, taken with the state after
    // each batch (a command decided on a caller's task that brings a timer forward rings
    // `timers`, and they are read again).
    let mut due = actor.lock().await.due();
    loop {
        let first = match due {
            (Some(at), now) => {
                let wait = (at - now).max(0) as u64;
                tokio::select! {
                    cmd = rx.recv() => cmd,
                    _ = tokio::time::sleep(std::time::Duration::from_millis(wait)) => Some(Cmd::Tick),
                    _ = timers.notified() => None,
                }
            }
            (None, _) => tokio::select! {
                cmd = rx.recv() => cmd,
                _ = timers.notified() => None,
            },
        };
        let mut a = actor.lock().await;
        let Some(first) = first else {
            if rx.is_closed() && rx.is_empty() {
                break;
            }
            due = a.due();
            continue;
        };
        let mut batch = vec![first];
        while batch.len() < MAX_BATCH {
            match rx.try_recv() {
                Ok(c) => batch.push(c),
                Err(_) => break,
            }
        }
        if a.writer.pipeline().failed_epoch() >= a.epoch {
            a.recover().await;
        }
        a.run_batch(batch).await;
        due = a.due();
    }
}

/// The rules' state as the database holds it.
async fn load_rules(
    conn: &mut SqliteConnection,
    clock: SharedClock,
    settings: Settings,
) -> Result<Rules, StoreError> {
    let sessions = load::sessions(conn).await?;
    let next_id = load::next_id(conn).await?;
    let open_drafts = load::open_drafts(conn).await?;
    Ok(Rules::new(sessions, next_id, open_drafts, clock, settings))
}

struct Actor {
    /// Reads only (indexes, start-up state); the writer thread owns the writing connection.
    reader: SqliteConnection,
    rules: Rules,
    writer: WriterHandle<Batch>,
    epoch: u64,
    /// Where a command decided on its caller's task is published.
    hub: EventHub,
    unanswered: Arc<AtomicUsize>,
}

impl Actor {
    /// After a failed commit: wait for the writer to settle, reload, start a new epoch.
    async fn recover(&mut self) {
        self.writer.pipeline().wait_drained().await;
        loop {
            let (clock, settings) = (self.rules.clock().clone(), self.rules.settings());
            match load_rules(&mut self.reader, clock, settings).await {
                Ok(mut fresh) => {
                    fresh.keep_typing_of(&self.rules);
                    self.rules = fresh;
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
        let rows = match self.load_for(&batch).await {
            Ok(rows) => rows,
            Err(e) => {
                // Nothing of the batch was decided (the rules' state is unchanged): its callers
                // are answered 503 and may retry.
                tracing::error!(error = %e, "reading the database failed; the batch is answered 503");
                let err = CoreError::StorageUnavailable(e.to_string());
                for cmd in batch {
                    cmd.refuse(err.clone());
                }
                return;
            }
        };
        let mut finishers: Vec<Finish> = Vec::with_capacity(batch.len());
        // A callback usually writes a row and an event: no regrowing on the way.
        let mut events: Vec<Event> = Vec::with_capacity(batch.len());
        self.rules.reserve_ops(2 * batch.len());
        for cmd in batch {
            finishers.push(Actor::apply(&mut self.rules, cmd, &rows, &mut events));
        }
        let ops = self.rules.take_ops();
        let unit = batch_unit(self.epoch, ops, events, finishers, &self.unanswered);
        self.writer.send(unit).await;
        self.after_batch();
    }

    /// The rules' next timer, and the time now.
    fn due(&self) -> (Option<i64>, i64) {
        (self.rules.next_deadline_ms(), self.rules.clock().now_ms())
    }

    fn after_batch(&mut self) {
        if self.writer.pipeline().is_drained() {
            self.rules.index.evict();
        }
    }

    /// Whether the rules have in memory all that `cmd` needs (what [`Actor::load_for`] would
    /// load otherwise); counts as the start of a batch.
    fn in_memory(&mut self, cmd: &Cmd) -> bool {
        self.rules.index.next_batch();
        let session = match cmd {
            Cmd::Callback(cb, _) => self.rules.index_for_callback(cb).map(str::to_string),
            Cmd::UserMessage { session_id, .. } => self
                .rules
                .index_for_user_message(session_id)
                .map(str::to_string),
            Cmd::Transcript { session_id, .. } => self.rules.index_for_transcript(session_id),
            Cmd::Delivery { .. }
            | Cmd::Retranscribe { .. }
            | Cmd::PermissionRequest { .. }
            | Cmd::SettlePermission { .. }
            | Cmd::PermissionCard { .. }
            | Cmd::Speakers { .. } => return false,
            _ => None,
        };
        session.is_none_or(|s| self.rules.index.touch(&s))
    }

    /// Loads what the rules need for a batch: the index of every session it touches (a
    /// session's index not in memory has no write in flight, so the database holds exactly
    /// what it must), and the rows whose delivery it changes, by id.
    async fn load_for(&mut self, batch: &[Cmd]) -> Result<HashMap<i64, MessageRow>, StoreError> {
        self.rules.index.next_batch();
        let mut rows = HashMap::new();
        for cmd in batch {
            match cmd {
                Cmd::Callback(cb, _) => {
                    if let Some(s) = self.rules.index_for_callback(cb) {
                        self.ensure_index(s).await?;
                    }
                }
                Cmd::UserMessage { session_id, .. } => {
                    if let Some(s) = self.rules.index_for_user_message(session_id) {
                        self.ensure_index(s).await?;
                    }
                }
                Cmd::Transcript { session_id, .. } => {
                    if let Some(s) = self.rules.index_for_transcript(session_id) {
                        self.ensure_index(&s).await?;
                    }
                }
                Cmd::Delivery { id, .. } => {
                    if let Some(row) = load::message(&mut self.reader, *id).await? {
                        rows.insert(*id, row);
                    }
                }
                Cmd::Retranscribe { turns, .. } => {
                    for id in turns.iter().filter_map(|t| t.row) {
                        if let Some(row) = load::message(&mut self.reader, id).await? {
                            rows.insert(id, row);
                        }
                    }
                }
                Cmd::PermissionRequest {
                    session_id,
                    request_id,
                    ..
                } => {
                    self.ensure_permission(request_id).await?;
                    if let Some(s) = self.rules.index_for_user_message(session_id) {
                        self.ensure_index(s).await?;
                    }
                }
                Cmd::SettlePermission { request_id, .. }
                | Cmd::PermissionCard { request_id, .. } => {
                    self.ensure_permission(request_id).await?;
                }
                Cmd::Speakers { call_id, .. } => {
                    // Every turn stored before the change, committed: then the call's rows.
                    self.writer.pipeline().wait_drained().await;
                    let insights = format!("{}{call_id}", crate::protocol::INSIGHTS_PREFIX);
                    for row in load::transcript_rows(&mut self.reader, &insights).await? {
                        rows.insert(row.id, row);
                    }
                }
                _ => {}
            }
        }
        Ok(rows)
    }

    async fn ensure_permission(&mut self, request_id: &str) -> Result<(), StoreError> {
        if let Some(id) = self.rules.needs_permission(request_id) {
            if let Some(row) = load::permission(&mut self.reader, id).await? {
                self.rules.remember_permission(row);
            }
        }
        Ok(())
    }

    async fn ensure_index(&mut self, session_id: &str) -> Result<(), StoreError> {
        if !self.rules.index.touch(session_id) {
            // The digests first, then one sort: no per-key inserts.
            let (mut ids, mut contents) = (Vec::new(), Vec::new());
            load::each_session_key(&mut self.reader, session_id, |m, c| {
                ids.extend(m.map(id_digest));
                contents.extend(c.map(key_digest));
            })
            .await?;
            let mut index = SessionIndex::from_digests(ids, contents);
            for row in load::recent_finals(&mut self.reader, session_id, RECENT_FINALS).await? {
                index.add_final(&row);
            }
            self.rules.index.insert(session_id.to_string(), index);
        }
        Ok(())
    }

    /// Hands one command to the rules; the answer leaves once the batch is committed.
    fn apply(
        rules: &mut Rules,
        cmd: Cmd,
        rows: &HashMap<i64, MessageRow>,
        events: &mut Vec<Event>,
    ) -> Finish {
        match cmd {
            Cmd::Callback(cb, reply) => finish(reply, Ok(rules.apply_callback(&cb, events))),
            Cmd::CreateSession {
                is_call,
                title,
                reply,
            } => finish(reply, Ok(rules.create_session(is_call, title, events))),
            Cmd::EndCall { session_id, reply } => {
                finish(reply, rules.end_call(&session_id, events))
            }
            Cmd::DeleteSession { session_id, reply } => {
                finish(reply, rules.delete_session(&session_id, events))
            }
            Cmd::RenameSession {
                session_id,
                title,
                reply,
            } => finish(reply, rules.rename_session(&session_id, title, events)),
            Cmd::UserMessage {
                session_id,
                text,
                purpose,
                reply,
            } => finish(
                reply,
                rules.user_message(&session_id, &text, purpose, events),
            ),
            Cmd::Typing { session_id, reply } => finish(reply, Ok(rules.typing_list(&session_id))),
            Cmd::Transcript {
                session_id,
                speaker,
                text,
                language,
                reply,
            } => finish(
                reply,
                rules.transcript_turn(&session_id, speaker, &text, language, events),
            ),
            Cmd::Delivery { id, update, reply } => {
                let row = rows.get(&id).cloned();
                finish(reply, rules.set_delivery(row, update, events))
            }
            Cmd::Retranscribe {
                call_id,
                turns,
                reply,
            } => finish(reply, rules.retranscribe(&call_id, rows, turns, events)),
            Cmd::PermissionRequest {
                session_id,
                request_id,
                tool,
                input_preview,
                reply,
            } => finish(
                reply,
                rules.permission_request(&session_id, &request_id, &tool, &input_preview, events),
            ),
            Cmd::SettlePermission {
                request_id,
                state,
                resolver,
                reply,
            } => finish(
                reply,
                rules.settle_permission(&request_id, &state, resolver, events),
            ),
            Cmd::PermissionCard { request_id, reply } => {
                finish(reply, Ok(rules.permission_card(&request_id)))
            }
            Cmd::Speakers {
                call_id,
                change,
                reply,
            } => finish(reply, rules.set_speakers(&call_id, &change, rows, events)),
            Cmd::AppEvent { change, reply } => {
                rules.app_event(*change, events);
                finish(reply, Ok(()))
            }
            Cmd::Tick => {
                rules.expire(events);
                Box::new(|_| {})
            }
        }
    }
}
