//! The commit path: one thread owns the writer connection and commits what the conversation
//! decided, grouping whatever has queued up into one SQLite transaction (group commit).
//!
//! - [`spawn`] starts the thread. It takes the connection's own SQLite handle once (sqlx's
//!   `lock_handle`, wrapped by [`RawConn`] in `raw.rs`) and runs every commit synchronously on
//!   it, so a commit costs no hand-off between threads.
//! - [`WriterHandle::hold_here`]: when nothing is queued and the thread is not working, the
//!   deciding side commits a unit itself, on its own thread, through the same handle (a mutex
//!   says who holds it). A lone callback then crosses no thread at all; callbacks that queue
//!   up while a commit runs go to the thread and are grouped there.
//! - `commit.rs` writes one group: inserts first, grouped into multi-row `INSERT OR ROLLBACK`
//!   statements prepared once, then the updates and deletes in order; all or nothing.
//! - [`Pipeline`] is what the deciding side and this thread share: units in flight, and the
//!   newest *epoch* a commit failed in. A unit decided on top of a failed one (same epoch or
//!   older) is failed without being written; the deciding side reloads and starts a new epoch.
//!
//! A [`Unit`] carries its ops and an opaque payload (the conversation's events and answers):
//! committed units go back over the `done` channel in commit order; a failed one has its
//! payload told why ([`Payload::fail`]).
//!
//! Between commits the thread also does what keeps the files small, never inside a commit
//! that answers a caller:
//! - the search index (`commit.rs`, `index_batch`): rows are added to it in batches of their own, at the
//!   latest [`INDEX_LAG`] after they were committed (and whenever the writer goes idle); until
//!   then a search reads them directly (`search.rs`);
//! - the WAL ([`Maintenance::TruncateWal`]): once the checkpointer has copied all of it, the
//!   idle writer starts it over; and if a burst never let it be idle, at [`WAL_LIMIT_FRAMES`]
//!   it copies the last frames itself so the WAL starts over at its next commit.

use super::side::{SideWrite, Stmt};
use super::{
    CheckpointMode, Maintenance, Op, RawConn, Store, StoreError, BUSY_TIMEOUT_MS, WAL_LIMIT_FRAMES,
};
use sqlx::sqlite::SqliteConnection;
use sqlx::Connection;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, Notify};

/// Most units the writer commits in one transaction.
pub const MAX_UNITS_PER_COMMIT: usize = 64;

/// How often, at most, the idle writer gives back its page cache. Every new page of the
/// database passes through the writer's cache, so without this the cache grows with the
/// database (up to its `cache_size`): a three-hour call's memory kept climbing by the size of
/// what it stored. Under sustained load the writer is never idle and keeps its cache; after a
/// release the few hot pages come back from the OS page cache on the next commits.
const RELEASE_MEMORY_EVERY: Duration = Duration::from_secs(10);

/// The longest a committed row waits for the search index while the writer is busy (an idle
/// writer indexes sooner: see the checkpointer in `mod.rs`).
const INDEX_LAG: Duration = Duration::from_millis(500);

/// Most rows one index batch adds (a longer backlog, after a restart, takes several).
const INDEX_BATCH_ROWS: i64 = 4096;

/// What the writer thread receives.
enum Msg<P> {
    Unit(Unit<P>),
    Maintain(Maintenance),
    /// A commit made by the deciding side left work for between commits (the search index,
    /// the WAL's limit, the page cache): the thread does it, off the deciding side's thread.
    Housekeep,
    /// Writes beside the conversation's were queued (`side.rs`): they go into the next commit.
    Side,
}

/// What the deciding side hands over: the writes of one batch, and what to do once they are
/// committed (carried back over the `done` channel) or failed.
pub struct Unit<P> {
    pub epoch: u64,
    pub ops: Vec<Op>,
    pub payload: P,
}

/// The part of a [`Unit`] the writer does not look into.
pub trait Payload: Send + 'static {
    /// The unit was not committed (nothing of it is written).
    fn fail(self, why: &str);
}

/// Shared between the deciding side and the writer thread.
#[derive(Default)]
pub struct Pipeline {
    /// Units sent to the writer and not yet committed or failed.
    in_flight: AtomicUsize,
    /// The newest epoch a commit failed in (0: none).
    failed_epoch: AtomicU64,
    /// Rung when `in_flight` drops to zero.
    drained: Notify,
}

impl Pipeline {
    /// The newest epoch a commit (or a decision) failed in; 0 when none did.
    pub fn failed_epoch(&self) -> u64 {
        self.failed_epoch.load(Ordering::Acquire)
    }

    /// Fails `epoch`: every unit of it (or older) still queued is failed unwritten.
    pub fn fail_epoch(&self, epoch: u64) {
        self.failed_epoch.fetch_max(epoch, Ordering::AcqRel);
    }

    /// Nothing is in flight: every unit sent is committed or failed.
    pub fn is_drained(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) == 0
    }

    /// Waits until nothing is in flight.
    pub async fn wait_drained(&self) {
        loop {
            let notified = self.drained.notified();
            if self.is_drained() {
                return;
            }
            notified.await;
        }
    }

    /// `n` units left the pipeline (committed or failed); `true` when it is now empty.
    fn returned(&self, n: usize) -> bool {
        let drained = self.in_flight.fetch_sub(n, Ordering::AcqRel) == n;
        if drained {
            self.drained.notify_waiters();
        }
        drained
    }
}

/// The writer connection and the writer's state: held by the writer thread while it works,
/// or by the deciding side for one commit of its own ([`WriterHandle::hold_here`]). `None`
/// until the thread has its handle, and again once it has stopped.
type Shared<P> = Arc<Mutex<Option<Core<P>>>>;

struct Core<P> {
    db: RawConn,
    w: Writer<P>,
}

fn hold<P>(shared: &Shared<P>) -> MutexGuard<'_, Option<Core<P>>> {
    // Poisoned only by a panic (a bug) while it was held: the thread still goes on, and still
    // closes the connection when it stops.
    shared.lock().unwrap_or_else(|e| e.into_inner())
}

/// The writer connection, held by the deciding side for one commit ([`WriterHandle::hold_here`]).
pub struct Here<'a, P> {
    guard: MutexGuard<'a, Option<Core<P>>>,
    handle: &'a WriterHandle<P>,
}

impl<P: Payload> Here<'_, P> {
    /// Commits `unit` here: `Some(unit)` committed (the caller publishes it), `None` failed
    /// (its payload was told).
    pub fn commit(mut self, unit: Unit<P>) -> Option<Unit<P>> {
        let core = self
            .guard
            .as_mut()
            .expect("held only with the writer in place");
        let mut done = core.w.commit(&mut core.db, vec![unit], Vec::new());
        if core.w.note_commit() {
            // A full queue is a busy thread, which does it between its own commits anyway.
            let _ = self.handle.tx.try_send(Msg::Housekeep);
        }
        drop(self.guard);
        self.handle.store.idle();
        done.pop()
    }
}

/// The deciding side's end of the writer: sends units, counting them in flight.
pub struct WriterHandle<P> {
    tx: mpsc::Sender<Msg<P>>,
    pipeline: Arc<Pipeline>,
    shared: Shared<P>,
    store: Store,
    /// Whether [`WriterHandle::hold_here`] may commit on the caller's thread: only when a
    /// commit does not wait for the disk (`Durability::Crash`); an fsync in every commit stays
    /// on the writer thread.
    here: bool,
}

impl<P: Payload> WriterHandle<P> {
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// The writer connection for one commit on the calling thread, if nothing is in flight
    /// and the writer thread is not working (`None`: send the unit instead). Taken before
    /// deciding, so that what is decided is certain to have a way to the disk without a wait.
    /// One commit of a small batch without an fsync: tens of microseconds on the caller's
    /// thread, where a hand-off to the writer thread and back costs two thread wake-ups.
    pub fn hold_here(&self) -> Option<Here<'_, P>> {
        if !self.here || !self.pipeline.is_drained() {
            return None;
        }
        let guard = match self.shared.try_lock() {
            Ok(g) => g,
            Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
            Err(std::sync::TryLockError::WouldBlock) => return None,
        };
        guard.is_some().then_some(Here {
            guard,
            handle: self,
        })
    }

    /// Queues a unit for the next commit (waits while the queue is full).
    pub async fn send(&self, unit: Unit<P>) {
        self.pipeline.in_flight.fetch_add(1, Ordering::AcqRel);
        if let Err(mpsc::error::SendError(Msg::Unit(u))) = self.tx.send(Msg::Unit(unit)).await {
            self.pipeline.returned(1);
            u.payload.fail("the writer stopped");
        }
    }
}

/// Starts the writer thread on `conn` (the store's one writer connection). Committed units
/// go to `done`, in commit order.
pub fn spawn<P: Payload>(
    store: Store,
    conn: SqliteConnection,
    done: mpsc::UnboundedSender<Vec<Unit<P>>>,
) -> Result<WriterHandle<P>, StoreError> {
    let pipeline = Arc::new(Pipeline::default());
    let (tx, rx) = mpsc::channel(MAX_UNITS_PER_COMMIT);
    // The checkpointer's requests: only when there is room (a full queue is a busy writer,
    // which does its maintenance between commits anyway). A weak sender, so the writer still
    // stops when the deciding side is gone.
    let maintain = tx.downgrade();
    store.attach_writer(move |m| {
        maintain
            .upgrade()
            .is_some_and(|tx| tx.try_send(Msg::Maintain(m)).is_ok())
    });
    // Writes beside the conversation's wake the thread the same way; a full queue is a busy
    // thread, which takes them into its next commit anyway.
    let side = store.side.take_receiver();
    let wake = tx.downgrade();
    store.side.set_wake(move || {
        if let Some(tx) = wake.upgrade() {
            let _ = tx.try_send(Msg::Side);
        }
    });
    let here = store.durability() == super::Durability::Crash;
    let mine = store.clone();
    let writer = Writer {
        store,
        pipeline: pipeline.clone(),
        done,
        unindexed_since: None,
        short_of_space: false,
        wal_frames: 0,
        released: Instant::now(),
    };
    let shared: Shared<P> = Arc::new(Mutex::new(None));
    let theirs = shared.clone();
    std::thread::Builder::new()
        .name("sw-writer".into())
        .spawn(move || writer.run(theirs, conn, rx, side))?;
    Ok(WriterHandle {
        tx,
        pipeline,
        shared,
        store: mine,
        here,
    })
}

/// The writer stage runs on its own thread: it holds the writer connection's SQLite handle for
/// its whole life and commits synchronously (`commit.rs`), so a commit costs no hand-off
/// between threads (see `raw.rs`).
struct Writer<P> {
    store: Store,
    pipeline: Arc<Pipeline>,
    /// Committed units go to a task on the runtime, which publishes their events and answers
    /// their callers: one wake-up of the runtime per commit instead of one per caller.
    done: mpsc::UnboundedSender<Vec<Unit<P>>>,
    /// When the oldest commit whose rows the search index may not have yet was made.
    unindexed_since: Option<Instant>,
    /// A commit failed (a full disk, say) and the WAL has not started over since: every
    /// commit asks for a checkpoint, so space that comes back is not eaten by a growing WAL
    /// while the writer is never idle long enough for the idle round.
    short_of_space: bool,
    /// Frames in the WAL after the previous commit (fewer now: it started over).
    wal_frames: u64,
    /// When the idle writer last gave back its page cache.
    released: Instant,
}

impl<P: Payload> Writer<P> {
    fn run(
        self,
        shared: Shared<P>,
        mut conn: SqliteConnection,
        mut rx: mpsc::Receiver<Msg<P>>,
        mut side: Option<mpsc::UnboundedReceiver<SideWrite>>,
    ) {
        let mut locked = match futures_executor::block_on(conn.lock_handle()) {
            Ok(l) => l,
            Err(e) => {
                tracing::error!(error = %e, "the writer cannot reach its connection");
                refuse_all(&self.pipeline, &mut rx, &mut side);
                return;
            }
        };
        // SAFETY: `locked` is sqlx's lock on this connection's handle, held until `db` is gone
        // (taken back out of `shared` below); nothing else uses the connection meanwhile, and
        // whoever uses `db` holds `shared`'s mutex.
        let mut db = unsafe { RawConn::new(locked.as_raw_handle()) };
        db.count_wal_frames(self.store.wal_frame_counter());
        let mut core = Core { db, w: self };
        // Rows a previous run committed but did not index (a crash): indexed before any new
        // work, so search is complete from the first request on.
        core.w.index_all(&mut core.db);
        *hold(&shared) = Some(core);
        let mut pending: Option<Msg<P>> = None;
        loop {
            let first = match pending.take() {
                Some(m) => m,
                // Queued before the thread ran (nothing woke it for them) or during a commit.
                None if side.as_ref().is_some_and(|s| !s.is_empty()) => Msg::Side,
                None => match rx.blocking_recv() {
                    Some(m) => m,
                    None => break,
                },
            };
            let mut guard = hold(&shared);
            let Core { db, w } = guard.as_mut().expect("the writer's state is in place");
            let mut units = Vec::new();
            match first {
                Msg::Unit(u) => units.push(u),
                Msg::Side => {}
                Msg::Maintain(m) => {
                    w.maintain(db, m);
                    continue;
                }
                Msg::Housekeep => {
                    w.after_commit(db);
                    if rx.is_empty() {
                        w.went_idle(db);
                    }
                    continue;
                }
            }
            pending = gather(&mut rx, &mut units);
            let writes = take_side(&mut side);
            if units.is_empty() && writes.is_empty() {
                continue; // woken for writes an earlier commit took
            }
            let n = units.len();
            let live = w.commit(db, units, writes);
            if !live.is_empty() {
                // If the runtime is gone, so are the callers.
                let _ = w.done.send(live);
            }
            w.after_commit(db);
            let drained = if n > 0 {
                w.pipeline.returned(n)
            } else {
                w.pipeline.is_drained()
            };
            if drained && rx.is_empty() && pending.is_none() {
                w.went_idle(db);
            }
        }
        drop(hold(&shared).take());
        drain(&mut side);
        drop(locked);
        if let Err(e) = futures_executor::block_on(conn.close()) {
            tracing::warn!(error = %e, "closing the writer connection failed");
        }
        tracing::debug!("conversation writer stopped");
    }

    /// Nothing queued: the checkpointer may run its idle round, and now and then the page
    /// cache goes back.
    fn went_idle(&mut self, db: &mut RawConn) {
        self.store.idle();
        if self.released.elapsed() >= RELEASE_MEMORY_EVERY {
            db.release_memory();
            self.released = Instant::now();
        }
    }

    /// After a commit made by the deciding side: the cheap part of [`Writer::after_commit`];
    /// `true` when the rest (indexing, the WAL's limit, the page cache) is due.
    fn note_commit(&mut self) -> bool {
        self.note_wal() >= WAL_LIMIT_FRAMES
            || self.released.elapsed() >= RELEASE_MEMORY_EVERY
            || self.index_due()
    }

    fn index_due(&self) -> bool {
        self.unindexed_since
            .is_some_and(|t| t.elapsed() >= INDEX_LAG)
    }

    /// The WAL's frames after a commit, told to the checkpointer; returns them.
    fn note_wal(&mut self) -> u64 {
        let frames = self.store.wal_frames();
        if frames < self.wal_frames {
            self.short_of_space = false;
        }
        self.wal_frames = frames;
        self.store.wal_grew(self.short_of_space);
        frames
    }

    /// Between commits: the search index when its rows have waited [`INDEX_LAG`], and the
    /// WAL's limit.
    fn after_commit(&mut self, db: &mut RawConn) {
        if self.index_due() {
            self.index_once(db);
        }
        let frames = self.note_wal();
        if frames >= WAL_LIMIT_FRAMES {
            // A burst kept every checkpoint from completing (each one finds new frames at its
            // end): copy the rest here, between two commits, so the next one starts the WAL
            // over. Busy (the checkpointer is copying): the next commit tries again.
            match db.checkpoint(CheckpointMode::Passive, BUSY_TIMEOUT_MS) {
                Ok(Some(c)) => tracing::debug!(
                    wal_frames = c.wal_frames,
                    copied = c.copied,
                    "WAL at its limit: checkpoint by the writer"
                ),
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "WAL checkpoint by the writer failed"),
            }
        }
    }

    fn maintain(&mut self, db: &mut RawConn, m: Maintenance) {
        match m {
            Maintenance::Index(done) => {
                self.index_all(db);
                let _ = done.send(());
            }
            Maintenance::TruncateWal { commits, done } => {
                // Only with nothing committed since the complete checkpoint: then nothing is
                // left to copy, so this neither fsyncs nor waits (a reader of the WAL: busy,
                // tried again at the next idle round).
                let truncated = self.store.commits() == commits
                    && match db.checkpoint(CheckpointMode::Truncate, BUSY_TIMEOUT_MS) {
                        Ok(Some(c)) => c.wal_frames == 0,
                        Ok(None) => false,
                        Err(e) => {
                            tracing::warn!(error = %e, "truncating the WAL failed");
                            false
                        }
                    };
                let _ = done.send(truncated);
            }
        }
    }

    /// Indexes until the search index has every committed row (or a batch fails).
    fn index_all(&mut self, db: &mut RawConn) {
        self.unindexed_since.get_or_insert_with(Instant::now);
        while self.unindexed_since.is_some() {
            if !self.index_once(db) {
                break;
            }
        }
    }

    /// One batch; `false` when it failed (kept for later: a full disk, say).
    fn index_once(&mut self, db: &mut RawConn) -> bool {
        match super::commit::index_batch(db, INDEX_BATCH_ROWS) {
            Ok(n) => {
                if n > 0 {
                    self.store.committed();
                }
                if n < INDEX_BATCH_ROWS {
                    self.unindexed_since = None;
                }
                true
            }
            Err(e) => {
                tracing::warn!(error = %e, "adding rows to the search index failed; trying again later");
                // Not before another INDEX_LAG.
                self.unindexed_since = Some(Instant::now());
                false
            }
        }
    }

    /// Commits `units` and the writes beside them in one transaction; returns the units
    /// committed (none if it failed: their payloads were told). Each write is answered.
    fn commit(
        &mut self,
        db: &mut RawConn,
        units: Vec<Unit<P>>,
        writes: Vec<SideWrite>,
    ) -> Vec<Unit<P>> {
        let failed = self.pipeline.failed_epoch();
        let (doomed, live): (Vec<Unit<P>>, Vec<Unit<P>>) =
            units.into_iter().partition(|u| u.epoch <= failed);
        for u in doomed {
            u.payload.fail("an earlier write failed");
        }
        if live.is_empty() && writes.is_empty() {
            return live;
        }
        let started = Instant::now();
        let ops: Vec<&Op> = live.iter().flat_map(|u| u.ops.iter()).collect();
        let stmts: Vec<&[Stmt]> = writes.iter().map(|w| w.stmts.as_slice()).collect();
        let wrote = !ops.is_empty() || !writes.is_empty();
        let rows = ops
            .iter()
            .any(|o| matches!(o, Op::InsertMessage { .. } | Op::UpdateMessage(_)));
        let result = if wrote {
            super::commit::commit_with(db, &ops, &stmts)
        } else {
            Ok(Vec::new())
        };
        drop(ops);
        drop(stmts);
        if started.elapsed() > Duration::from_millis(50) {
            tracing::debug!(
                elapsed_ms = started.elapsed().as_millis() as u64,
                "slow commit"
            );
        }
        match result {
            Ok(answers) => {
                if wrote {
                    self.store.committed();
                }
                if rows {
                    self.unindexed_since.get_or_insert(started);
                }
                for (w, a) in writes.into_iter().zip(answers) {
                    let _ = w.answer.send(a.map_err(StoreError::Raw));
                }
                live
            }
            Err(e) => {
                tracing::error!(error = %e, "commit failed; its callbacks are answered 503 and the state reloads");
                self.short_of_space = true;
                let why = e.to_string();
                for w in writes {
                    let _ = w.answer.send(Err(StoreError::CommitFailed(why.clone())));
                }
                if live.is_empty() {
                    return live;
                }
                let newest = live.iter().map(|u| u.epoch).max().unwrap_or(0);
                self.pipeline.fail_epoch(newest);
                for u in live {
                    u.payload.fail(&why);
                }
                Vec::new()
            }
        }
    }
}

/// Without a connection: every unit is failed and every write beside them dropped ("the writer
/// stopped"), until the deciding side is gone.
fn refuse_all<P: Payload>(
    pipeline: &Pipeline,
    rx: &mut mpsc::Receiver<Msg<P>>,
    side: &mut Option<mpsc::UnboundedReceiver<SideWrite>>,
) {
    while let Some(m) = rx.blocking_recv() {
        if let Msg::Unit(u) = m {
            pipeline.fail_epoch(u.epoch);
            u.payload.fail("the writer has no connection");
            pipeline.returned(1);
        }
        drain(side);
    }
}

/// Adds the units queued behind the first to its group, up to [`MAX_UNITS_PER_COMMIT`]; a
/// message that is not a unit ends the group and is returned, for after the commit.
fn gather<P>(rx: &mut mpsc::Receiver<Msg<P>>, units: &mut Vec<Unit<P>>) -> Option<Msg<P>> {
    while units.len() < MAX_UNITS_PER_COMMIT {
        match rx.try_recv() {
            Ok(Msg::Unit(u)) => units.push(u),
            Ok(Msg::Side) => {}
            Ok(m) => return Some(m),
            Err(_) => break,
        }
    }
    None
}

/// Everything queued beside the conversation's writes, for the next commit.
fn take_side(side: &mut Option<mpsc::UnboundedReceiver<SideWrite>>) -> Vec<SideWrite> {
    let mut writes = Vec::new();
    if let Some(rx) = side {
        while let Ok(w) = rx.try_recv() {
            writes.push(w);
        }
    }
    writes
}

/// Drops what is queued beside the conversation's writes (each answer: the writer stopped).
fn drain(side: &mut Option<mpsc::UnboundedReceiver<SideWrite>>) {
    if let Some(rx) = side {
        rx.close();
        while rx.try_recv().is_ok() {}
    }
}

#[cfg(test)]
mod tests {
    //! The two ways into a commit, on a real SQLite file.
    use super::super::{Durability, Op, Stmt, Store};
    use super::*;
    use std::sync::atomic::AtomicBool;

    /// Remembers whether it was told that its unit failed.
    struct Told(Arc<AtomicBool>);

    impl Payload for Told {
        fn fail(self, _why: &str) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    fn event(id: i64) -> Op {
        Op::InsertEvent {
            id,
            session_id: "s".into(),
            data: format!("{{\"type\":\"app\",\"n\":{id}}}"),
        }
    }

    fn unit(epoch: u64, id: i64) -> (Unit<Told>, Arc<AtomicBool>) {
        let failed = Arc::new(AtomicBool::new(false));
        let u = Unit {
            epoch,
            ops: vec![event(id)],
            payload: Told(failed.clone()),
        };
        (u, failed)
    }

    async fn stored(store: &Store) -> Vec<i64> {
        let events = store.events_after(0, 100).await.unwrap();
        events.iter().map(|e| e.0).collect()
    }

    type Done = mpsc::UnboundedReceiver<Vec<Unit<Told>>>;

    /// A store in a new directory and its writer thread.
    async fn writer(
        durability: Durability,
    ) -> (tempfile::TempDir, Store, WriterHandle<Told>, Done) {
        let dir = tempfile::tempdir().unwrap();
        let (store, conn) = Store::open(&dir.path().join("t.db"), durability)
            .await
            .unwrap();
        let (done_tx, done) = mpsc::unbounded_channel();
        let writer = spawn::<Told>(store.clone(), conn, done_tx).unwrap();
        (dir, store, writer, done)
    }

    #[tokio::test]
    async fn an_idle_writer_lets_the_caller_commit_and_a_busy_one_does_not() {
        let (_dir, store, writer, mut done) = writer(Durability::Crash).await;
        // The thread takes its handle first (`None` until then: the caller sends).
        let deadline = Instant::now() + Duration::from_secs(10);
        while hold(&writer.shared).is_none() {
            assert!(Instant::now() < deadline, "the writer thread never started");
            std::thread::sleep(Duration::from_millis(5));
        }

        // Idle: committed here, and nothing comes back over `done`.
        let (u, failed) = unit(1, 1);
        let committed = writer.hold_here().expect("idle").commit(u);
        assert!(committed.is_some() && !failed.load(Ordering::SeqCst));
        assert_eq!(stored(&store).await, [1]);
        assert!(done.try_recv().is_err());

        // The thread holds the connection: not here; sent, it is committed by the thread.
        let guard = hold(&writer.shared);
        assert!(
            writer.hold_here().is_none(),
            "refused while the thread holds it"
        );
        drop(guard);
        let (u, _) = unit(1, 2);
        writer.send(u).await;
        assert_eq!(done.recv().await.unwrap().len(), 1);
        writer.pipeline().wait_drained().await;
        assert_eq!(stored(&store).await, [1, 2]);

        // A unit of an epoch that failed: told, nothing written.
        writer.pipeline().fail_epoch(1);
        let (u, failed) = unit(1, 3);
        assert!(writer.hold_here().unwrap().commit(u).is_none());
        assert!(failed.load(Ordering::SeqCst));
        let (u, failed) = unit(2, 4);
        assert!(writer.hold_here().unwrap().commit(u).is_some());
        assert!(!failed.load(Ordering::SeqCst));
        assert_eq!(stored(&store).await, [1, 2, 4]);
    }

    fn remember(id: &str, at: i64) -> Stmt {
        Stmt::new("INSERT INTO byo_replay (message_id, seen_at_ms) VALUES (?, ?)")
            .bind(id)
            .bind(at)
    }

    async fn remembered(store: &Store) -> Vec<String> {
        sqlx::query_scalar("SELECT message_id FROM byo_replay ORDER BY message_id")
            .fetch_all(store.reads())
            .await
            .unwrap()
    }

    fn wait_started(writer: &WriterHandle<Told>) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while hold(&writer.shared).is_none() {
            assert!(Instant::now() < deadline, "the writer thread never started");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    // The thread is held across the unit's send, which does not wait (its queue has room).
    #[allow(clippy::await_holding_lock)]
    #[tokio::test]
    async fn writes_beside_the_conversation_share_its_commits_and_fail_alone() {
        let (_dir, store, writer, mut done) = writer(Durability::Crash).await;
        wait_started(&writer);
        // Alone: committed and answered with the rows each statement changed.
        assert_eq!(store.write(vec![remember("a", 1)]).await.unwrap(), [1]);

        // Queued while the thread is held: a unit of the conversation, a write whose second
        // statement breaks the table's key, and a write after it. One commit takes all three.
        let guard = hold(&writer.shared);
        let commits = store.commits();
        let (u, failed) = unit(1, 1);
        writer.send(u).await;
        let broken = store.queue_write(vec![remember("b", 2), remember("a", 2)]);
        let after = store.queue_write(vec![
            Stmt::new("DELETE FROM byo_replay WHERE message_id = ?").bind("a"),
            Stmt::new("DELETE FROM byo_replay WHERE message_id = ?").bind("none"),
        ]);
        drop(guard);
        match broken.await {
            Err(StoreError::Raw(e)) => assert!(e.message.contains("UNIQUE"), "{e}"),
            other => panic!("the broken write: {other:?}"),
        }
        assert_eq!(after.await.unwrap(), [1, 0]);
        assert_eq!(done.recv().await.unwrap().len(), 1, "the unit is committed");
        assert!(!failed.load(Ordering::SeqCst));
        assert_eq!(store.commits(), commits + 1, "in one commit");
        // Nothing of the broken write ("b" neither), the rest all there.
        assert!(remembered(&store).await.is_empty());
        assert_eq!(stored(&store).await, [1]);
    }

    #[tokio::test]
    async fn writes_wait_for_the_writer_and_are_refused_once_it_stopped() {
        let dir = tempfile::tempdir().unwrap();
        let (store, conn) = Store::open(&dir.path().join("t.db"), Durability::PowerLoss)
            .await
            .unwrap();
        // Queued before the thread runs: committed once it does.
        let early = store.queue_write(vec![remember("early", 1)]);
        let (done_tx, _done) = mpsc::unbounded_channel();
        let writer = spawn::<Told>(store.clone(), conn, done_tx).unwrap();
        assert_eq!(early.await.unwrap(), [1]);
        assert_eq!(remembered(&store).await, ["early"]);

        // The conversation's end is gone: the thread stops, and a write is refused, unwritten.
        let shared = writer.shared.clone();
        drop(writer);
        let deadline = Instant::now() + Duration::from_secs(10);
        while hold(&shared).is_some() {
            assert!(Instant::now() < deadline, "the writer thread never stopped");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let late = store.write(vec![remember("late", 2)]).await;
        assert!(matches!(late, Err(StoreError::WriterStopped)), "{late:?}");
        assert_eq!(remembered(&store).await, ["early"]);
    }

    #[tokio::test]
    async fn an_fsync_in_every_commit_stays_on_the_writer_thread() {
        let (_dir, store, writer, mut done) = writer(Durability::PowerLoss).await;
        assert!(writer.hold_here().is_none(), "not on the caller's thread");
        let (u, _) = unit(1, 1);
        writer.send(u).await;
        assert_eq!(done.recv().await.unwrap().len(), 1);
        assert_eq!(stored(&store).await, [1]);
    }
}
