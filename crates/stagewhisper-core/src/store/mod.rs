//! SQLite storage (sqlx): migrations, the one writer connection, read queries for views, and
//! WAL checkpoints kept off the request path. Knows SQL, not rules.
//!
//! - this file: opening, durability, checkpoints, the views' reads, [`Op`] (every write the
//!   conversation can decide) and the sessions' row mapping;
//! - `row.rs`: the `messages` row, described once (its columns drive the writer's insert and
//!   rewrite, every read's select, and the decoding by column name);
//! - [`load`]: what the conversation loads on its own read connection (start-up state, a
//!   session's rows for its index);
//! - [`writer`]: the commit path — the writer thread, group commit, multi-row inserts, the
//!   search index fed in batches — on the connection's own handle (`raw.rs`: SQLite's C API,
//!   for speed; its module doc says why), without sqlx's per-statement hand-off to its worker thread;
//! - [`search`]: search (the index and the rows it does not have yet), pages, the export's
//!   read-only open.
//! - `side.rs`: the writes of the small tables beside the conversation (BYO's jobs, turns and
//!   replay guard; the assistant outbox's notices and stream cursors), queued with
//!   [`Store::queue_write`] and committed by the same writer thread, in the same commits. The
//!   writer thread is the only connection that writes the database.
//!
//! Durability ([`Durability`]): WAL, and every answer waits for its commit. With
//! `synchronous = NORMAL` (the default, [`Durability::Crash`]) a commit is in the operating
//! system before the 2xx, so an accepted callback survives `kill -9` and any crash of the app;
//! a background task fsyncs the WAL every second, so a power loss can take at most the last
//! second. [`Durability::PowerLoss`] (`synchronous = FULL`) fsyncs inside every commit instead.
//!
//! The WAL's size ([`Checkpoints`]): the writer has `wal_autocheckpoint = 0`, so no commit ever
//! runs a checkpoint. A checkpointer task on its own connection copies the WAL into the
//! database (PASSIVE: beside the writer and the readers, never blocking them; its fsyncs are
//! its own) once the writer is idle, and during a long burst each time the WAL has grown by
//! [`CHECKPOINT_EVERY_FRAMES`]. Once a checkpoint has copied everything and nothing was
//! committed since, the idle writer starts the WAL over and truncates its file to zero bytes
//! (a TRUNCATE checkpoint with nothing left to copy: no fsync, no waiting). Otherwise the next
//! commit after a complete checkpoint starts the WAL over and cuts its file back to
//! `journal_size_limit`. Only a burst that never lets the writer be idle can keep every
//! checkpoint from completing; at [`WAL_LIMIT_FRAMES`] the writer copies the last frames
//! itself, between two commits, so the WAL starts over (see `writer.rs`).

use crate::model::MessageRow;
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{ConnectOptions, FromRow, Row, SqlitePool};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::sync::{oneshot, Notify};

mod commit;
pub mod load;
mod raw;
mod row;
pub mod search;
mod side;
pub mod writer;
pub use raw::{CheckpointMode, Checkpointed, Param, RawConn, RawError};
pub use side::{Arg, Changes, Stmt, Written};

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Sql(#[from] sqlx::Error),
    #[error("database error: {0}")]
    Raw(#[from] RawError),
    #[error("cannot start the writer thread: {0}")]
    Thread(#[from] std::io::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    /// The writer thread is gone (the app is stopping): nothing of the write was committed.
    #[error("the database writer stopped")]
    WriterStopped,
    /// The commit that carried a write failed (a full disk, say): nothing of it was committed.
    #[error("database error: {0}")]
    CommitFailed(String),
}

/// How far an acknowledged write is guaranteed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous = NORMAL` + a WAL fsync every second: survives any crash of the app
    /// (`kill -9` included); a power loss may lose the last second.
    #[default]
    Crash,
    /// `synchronous = FULL`: every commit is fsynced before it is acknowledged.
    PowerLoss,
}

impl Durability {
    pub fn parse(s: &str) -> Option<Durability> {
        match s {
            "crash" | "normal" => Some(Durability::Crash),
            "power-loss" | "full" => Some(Durability::PowerLoss),
            _ => None,
        }
    }

    fn synchronous(self) -> SqliteSynchronous {
        match self {
            Durability::Crash => SqliteSynchronous::Normal,
            Durability::PowerLoss => SqliteSynchronous::Full,
        }
    }
}

/// How often the WAL is fsynced in [`Durability::Crash`] mode (when anything was committed).
const WAL_SYNC_INTERVAL: Duration = Duration::from_secs(1);

/// Read side of the store (a pool of read-only connections), the checkpoint trigger and the
/// queue of writes beside the conversation's (`side.rs`).
#[derive(Clone)]
pub struct Store {
    read: SqlitePool,
    path: PathBuf,
    checkpoint: Arc<Checkpoints>,
    durability: Durability,
    /// Writes of the tables beside the conversation, on their way to the writer thread.
    side: Arc<side::SideQueue>,
}

/// What the writer thread and the checkpointer share: how big the WAL is, whether anything
/// was committed, and the writer's mailbox for the work done when it is idle.
#[derive(Default)]
struct Checkpoints {
    /// Rung by the writer when it has nothing queued.
    idle: Notify,
    /// Rung by the writer when the WAL grew past [`CHECKPOINT_EVERY_FRAMES`] (see `asked`).
    ask: Notify,
    /// Frames in the WAL after the writer's last commit (its WAL hook; 0 once it starts over).
    wal_frames: Arc<AtomicU64>,
    /// The checkpointer was asked because of the WAL's size (and has not run since).
    asked: AtomicBool,
    /// Commits ever (never reset): the WAL sync and the idle check compare it.
    total: AtomicU64,
    /// The writer thread's maintenance mailbox, once it runs.
    writer: OnceLock<Box<dyn Fn(Maintenance) -> bool + Send + Sync>>,
}

/// Work the checkpointer hands the idle writer thread (it owns the writing connection).
#[derive(Debug)]
pub enum Maintenance {
    /// Add every row the search index does not have yet; answered when done.
    Index(oneshot::Sender<()>),
    /// A checkpoint copied the whole WAL when `commits` commits had been made: start the WAL
    /// over and truncate its file, unless something was committed since (answers whether it
    /// did).
    TruncateWal {
        commits: u64,
        done: oneshot::Sender<bool>,
    },
}

/// Page cache of each pooled read connection (`cache_size`, negative: KiB).
const READ_CACHE_KIB: &str = "-512";

/// How long the writer must be idle before a checkpoint.
const IDLE_BEFORE_CHECKPOINT: Duration = Duration::from_millis(250);
/// After an idle round that could not finish (a reader kept the WAL, the disk was full), the
/// next try.
const CHECKPOINT_RETRY: Duration = Duration::from_secs(1);
/// During a burst, the checkpointer copies the WAL each time it has grown by this many frames
/// (4 MiB of 4 KiB pages), beside the writer.
pub const CHECKPOINT_EVERY_FRAMES: u64 = 1024;
/// The most frames the WAL holds before the writer itself completes a checkpoint between two
/// commits, so the WAL starts over (about 14 MiB: with one commit's frames, under 16 MiB).
pub const WAL_LIMIT_FRAMES: u64 = 3584;
/// Once the WAL starts over, its file is cut back to this size (bytes) at the next commit.
const JOURNAL_SIZE_LIMIT: &str = "4194304";
/// How long a connection waits for a lock held by another (ms).
pub const BUSY_TIMEOUT_MS: i32 = 5_000;

fn base_options(path: &Path) -> SqliteConnectOptions {
    SqliteConnectOptions::new()
        .filename(path)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(Duration::from_millis(BUSY_TIMEOUT_MS as u64))
        .foreign_keys(false)
        .log_statements(tracing::log::LevelFilter::Trace)
}

impl Store {
    /// Opens (creating and migrating) the database; returns the read side and the one writer
    /// connection, which the writer thread ([`writer::spawn`]) owns.
    pub async fn open(
        path: &Path,
        durability: Durability,
    ) -> Result<(Store, SqliteConnection), StoreError> {
        let mut writer = base_options(path)
            .synchronous(durability.synchronous())
            .create_if_missing(true)
            .pragma("wal_autocheckpoint", "0")
            .pragma("journal_size_limit", JOURNAL_SIZE_LIMIT)
            .pragma("temp_store", "memory")
            .pragma("cache_size", "-32768")
            .connect()
            .await?;
        sqlx::migrate!("./migrations").run(&mut writer).await?;
        // The views' reads: a small page cache each (the OS page cache holds the file anyway),
        // so the pool's memory does not grow with the database as its pages get read.
        let read = SqlitePoolOptions::new()
            .max_connections(4)
            .min_connections(1)
            .connect_with(
                base_options(path)
                    .read_only(true)
                    .pragma("cache_size", READ_CACHE_KIB)
                    // A search builds a small in-memory index of the rows the search index does
                    // not have yet (store/search.rs).
                    .pragma("temp_store", "memory"),
            )
            .await?;
        let store = Store {
            read,
            path: path.to_path_buf(),
            checkpoint: Arc::new(Checkpoints::default()),
            durability,
            side: Arc::default(),
        };
        store.spawn_checkpointer().await?;
        if durability == Durability::Crash {
            store.spawn_wal_sync();
        }
        Ok((store, writer))
    }

    /// A separate read-only connection (the conversation's rules stage reads through it). Its
    /// reads are rows by id and a session's keys when its index loads (one pass, which the OS
    /// page cache serves as well): a 4 MiB page cache, so a load of a long session does not
    /// leave the process larger by a cache of its pages.
    pub async fn connect_reader(&self) -> Result<SqliteConnection, StoreError> {
        Ok(base_options(&self.path)
            .read_only(true)
            .pragma("cache_size", "-4096")
            .connect()
            .await?)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// The views' read pool, also for the reads of the tables beside the conversation (BYO's
    /// jobs and replay guard, the outbox's state), whose writes go through [`Store::write`].
    pub(crate) fn reads(&self) -> &SqlitePool {
        &self.read
    }

    /// A commit that wrote something happened.
    pub fn committed(&self) {
        self.checkpoint.total.fetch_add(1, Ordering::Relaxed);
    }

    /// Commits ever made (all of them the writer thread's).
    pub fn commits(&self) -> u64 {
        self.checkpoint.total.load(Ordering::Relaxed)
    }

    /// The counter the writer's WAL hook keeps at the WAL's frame count.
    pub fn wal_frame_counter(&self) -> Arc<AtomicU64> {
        self.checkpoint.wal_frames.clone()
    }

    /// Frames in the WAL after the writer's last commit.
    pub fn wal_frames(&self) -> u64 {
        self.checkpoint.wal_frames.load(Ordering::Relaxed)
    }

    /// After a writer commit: asks the checkpointer to copy the WAL once it has grown by
    /// [`CHECKPOINT_EVERY_FRAMES`], or at once with `now` (once until the checkpointer ran).
    pub fn wal_grew(&self, now: bool) {
        let cp = &self.checkpoint;
        if (now || cp.wal_frames.load(Ordering::Relaxed) >= CHECKPOINT_EVERY_FRAMES)
            && !cp.asked.swap(true, Ordering::Relaxed)
        {
            cp.ask.notify_one();
        }
    }

    /// The writer has nothing queued.
    pub fn idle(&self) {
        self.checkpoint.idle.notify_one();
    }

    /// Where the checkpointer hands the idle writer its maintenance (the writer thread sets it
    /// once; `send` answers `false` when the writer cannot take it now).
    pub fn attach_writer(&self, send: impl Fn(Maintenance) -> bool + Send + Sync + 'static) {
        let _ = self.checkpoint.writer.set(Box::new(send));
    }

    /// Crash mode: fsync the WAL file every second when something was committed, off the
    /// request path (a second handle on the same file; fsync flushes the file, not the handle).
    fn spawn_wal_sync(&self) {
        let wal = {
            let mut p = self.path.clone().into_os_string();
            p.push("-wal");
            PathBuf::from(p)
        };
        let cp = self.checkpoint.clone();
        tokio::spawn(async move {
            let mut synced = 0;
            loop {
                tokio::time::sleep(WAL_SYNC_INTERVAL).await;
                let total = cp.total.load(Ordering::Relaxed);
                if total == synced {
                    continue;
                }
                let path = wal.clone();
                let r = tokio::task::spawn_blocking(move || {
                    std::fs::File::open(&path).and_then(|f| f.sync_data())
                })
                .await;
                match r {
                    Ok(Ok(())) => synced = total,
                    Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => synced = total,
                    Ok(Err(e)) => tracing::warn!(error = %e, "WAL fsync failed"),
                    Err(e) => tracing::warn!(error = %e, "WAL fsync task failed"),
                }
            }
        });
    }

    async fn spawn_checkpointer(&self) -> Result<(), StoreError> {
        let mut conn = base_options(&self.path).connect().await?;
        let cp = self.checkpoint.clone();
        tokio::spawn(async move {
            // Commits made when the last idle round was through: an idle writer with nothing
            // new (a read went through it) needs no round.
            let mut handled = u64::MAX;
            let total = || cp.total.load(Ordering::Relaxed);
            loop {
                tokio::select! {
                    _ = cp.idle.notified() => {}
                    _ = cp.ask.notified() => {}
                }
                loop {
                    if cp.asked.swap(false, Ordering::Relaxed) {
                        // A burst: copy what the WAL has beside the writer, without waiting
                        // for it to be idle.
                        let _ = passive_checkpoint(&mut conn).await;
                    }
                    let before = total();
                    if before == handled {
                        break;
                    }
                    // Idle for a while? (A burst's request meanwhile is served at once.)
                    tokio::select! {
                        _ = tokio::time::sleep(IDLE_BEFORE_CHECKPOINT) => {}
                        _ = cp.ask.notified() => continue,
                    }
                    if total() != before {
                        continue;
                    }
                    if idle_round(&cp, &mut conn).await {
                        handled = total();
                        break;
                    }
                    // A reader kept the WAL, or the disk is full: again in a while, even if
                    // nothing else happens.
                    tokio::select! {
                        _ = tokio::time::sleep(CHECKPOINT_RETRY) => {}
                        _ = cp.ask.notified() => {}
                    }
                }
            }
        });
        Ok(())
    }

    pub async fn sessions(&self) -> Result<Vec<SessionRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT session_id, kind, is_call, call_id, title, created_at, ended_at, deleted_at \
             FROM sessions ORDER BY created_at DESC, rowid DESC",
        )
        .fetch_all(&self.read)
        .await?;
        Ok(rows.iter().map(session_from_row).collect())
    }

    pub async fn messages(&self, session_id: &str) -> Result<Vec<MessageRow>, StoreError> {
        let cols = row::select(None);
        let sql = format!("SELECT {cols} FROM messages WHERE session_id = ? ORDER BY sort_key, id");
        let rows = sqlx::query_as::<_, MessageRow>(&sql)
            .bind(session_id)
            .fetch_all(&self.read)
            .await?;
        Ok(rows)
    }

    /// Outgoing entries not yet delivered (oldest first), for the assistant link.
    pub async fn pending_deliveries(&self) -> Result<Vec<MessageRow>, StoreError> {
        let cols = row::select(None);
        let sql = format!("SELECT {cols} FROM messages WHERE delivery = 'pending' ORDER BY id");
        let rows = sqlx::query_as::<_, MessageRow>(&sql)
            .fetch_all(&self.read)
            .await?;
        Ok(rows)
    }

    /// User messages delivered (`sent`) at or after `since` (RFC 3339, as `received_at` is
    /// stored) that have no settled reply yet (no non-draft assistant or error entry answering
    /// them), in sessions not deleted: newest first, at most `limit`, with ids within `scan`
    /// of the newest (a bounded scan). An assistant kind looks their replies up after a
    /// restart.
    pub async fn sent_without_reply(
        &self,
        since: &str,
        scan: i64,
        limit: i64,
    ) -> Result<Vec<MessageRow>, StoreError> {
        let cols = row::select(None);
        let sql = format!(
            "SELECT {cols} FROM messages AS m \
             WHERE m.id > (SELECT COALESCE(MAX(id), 0) FROM messages) - ? \
               AND m.kind = 'user' AND m.delivery = 'sent' AND m.received_at >= ? \
               AND m.message_id IS NOT NULL \
               AND EXISTS (SELECT 1 FROM sessions s \
                           WHERE s.session_id = m.session_id AND s.deleted_at IS NULL) \
               AND NOT EXISTS (SELECT 1 FROM messages r \
                               WHERE r.session_id = m.session_id \
                                 AND r.user_message_id = m.message_id \
                                 AND r.kind IN ('assistant', 'error') AND r.draft = 0) \
             ORDER BY m.id DESC LIMIT ?"
        );
        let rows = sqlx::query_as::<_, MessageRow>(&sql)
            .bind(scan)
            .bind(since)
            .bind(limit)
            .fetch_all(&self.read)
            .await?;
        Ok(rows)
    }

    pub async fn message(&self, id: i64) -> Result<Option<MessageRow>, StoreError> {
        let cols = row::select(None);
        let sql = format!("SELECT {cols} FROM messages WHERE id = ?");
        let row = sqlx::query_as::<_, MessageRow>(&sql)
            .bind(id)
            .fetch_optional(&self.read)
            .await?;
        Ok(row)
    }

    /// The newest event id (0 when the log is empty): in `events`, or a row that is its own
    /// event (see [`Op::InsertMessage`]).
    pub async fn last_event_id(&self) -> Result<i64, StoreError> {
        let row = sqlx::query(
            "SELECT max(COALESCE((SELECT MAX(id) FROM events), 0), \
                        COALESCE((SELECT id FROM messages WHERE logged = 1 \
                                  ORDER BY id DESC LIMIT 1), 0))",
        )
        .fetch_one(&self.read)
        .await?;
        Ok(row.get::<i64, _>(0))
    }

    /// Events after `after` (exclusive), oldest first: `(id, data json)`. The log is `events`
    /// merged with the rows that are their own `message_added` event (`logged = 1`, the id is
    /// the event's); those, and the references of migration 0003 (`message_row`), come back
    /// whole, the same JSON as when they were emitted.
    pub async fn events_after(
        &self,
        after: i64,
        limit: i64,
    ) -> Result<Vec<(i64, String)>, StoreError> {
        let sql = format!(
            "SELECT x.id AS event_id, x.data AS event_data, x.message_row AS event_row, {} \
             FROM ( \
                 SELECT id, data, message_row FROM events WHERE id > ? \
                 UNION ALL \
                 SELECT id, '', id FROM messages WHERE id > ? AND logged = 1 \
                 ORDER BY 1 LIMIT ? \
             ) x LEFT JOIN messages m ON m.id = x.message_row ORDER BY x.id",
            row::select(Some("m"))
        );
        let rows = sqlx::query(&sql)
            .bind(after)
            .bind(after)
            .bind(limit)
            .fetch_all(&self.read)
            .await?;
        let mut events = Vec::with_capacity(rows.len());
        for r in &rows {
            let id: i64 = r.try_get("event_id")?;
            let data: String = r.try_get("event_data")?;
            let event = match r.try_get::<Option<i64>, _>("event_row")? {
                Some(_) if r.try_get::<Option<i64>, _>("id")?.is_some() => {
                    expand_event(&data, &MessageRow::from_row(r)?)
                }
                Some(row) => {
                    // Only a deleted session's rows go, and their events with them.
                    tracing::warn!(event = id, row, "event refers to a missing message");
                    data
                }
                None => data,
            };
            events.push((id, event));
        }
        Ok(events)
    }
}

/// The idle writer's round: the search index takes the rows it does not have yet, then the
/// WAL is copied into the database and, if that was all of it and nothing came in meanwhile,
/// started over with its file truncated. `true` when all of that was done.
async fn idle_round(cp: &Checkpoints, conn: &mut SqliteConnection) -> bool {
    let Some(send) = cp.writer.get() else {
        return passive_checkpoint(conn).await;
    };
    let (done, indexed) = oneshot::channel();
    if !send(Maintenance::Index(done)) || indexed.await.is_err() {
        return false;
    }
    let commits = cp.total.load(Ordering::Relaxed);
    if !passive_checkpoint(conn).await || cp.total.load(Ordering::Relaxed) != commits {
        return false;
    }
    let (done, truncated) = oneshot::channel();
    send(Maintenance::TruncateWal { commits, done }) && truncated.await.unwrap_or(false)
}

/// A PASSIVE checkpoint on the checkpointer's connection; `true` when it copied the whole WAL.
async fn passive_checkpoint(conn: &mut SqliteConnection) -> bool {
    match sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
        .fetch_one(&mut *conn)
        .await
    {
        Ok(r) => {
            let (frames, copied) = (r.get::<i64, _>(1), r.get::<i64, _>(2));
            tracing::debug!(wal_frames = frames, copied, "WAL checkpoint");
            frames >= 0 && copied >= frames
        }
        Err(e) => {
            tracing::warn!(error = %e, "WAL checkpoint failed");
            false
        }
    }
}

/// A `message_added` rebuilt from its row: the event as it was emitted. A row that is its own
/// event comes with empty `data` (the type is implied, the session is the row's); a reference
/// logged the 0003 way carries `{"type", "session_id"}`, which is honoured.
fn expand_event(data: &str, row: &MessageRow) -> String {
    #[derive(serde::Deserialize)]
    struct Head {
        #[serde(rename = "type")]
        ty: String,
        session_id: String,
    }
    #[derive(serde::Serialize)]
    struct Whole<'a> {
        #[serde(rename = "type")]
        ty: &'a str,
        session_id: &'a str,
        message: crate::model::MessageJson<'a>,
    }
    let head = (!data.is_empty())
        .then(|| serde_json::from_str::<Head>(data).ok())
        .flatten();
    let (ty, session_id) = head
        .as_ref()
        .map_or(("message_added", row.session_id.as_str()), |h| {
            (h.ty.as_str(), h.session_id.as_str())
        });
    serde_json::to_string(&Whole {
        ty,
        session_id,
        message: crate::model::MessageJson(row),
    })
    .expect("serializable")
}

/// A session as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRecord {
    pub session_id: String,
    pub kind: String,
    pub is_call: bool,
    pub call_id: Option<String>,
    pub title: Option<String>,
    pub created_at: String,
    pub ended_at: Option<String>,
    pub deleted_at: Option<String>,
}

fn session_from_row(r: &SqliteRow) -> SessionRecord {
    SessionRecord {
        session_id: r.get(0),
        kind: r.get(1),
        is_call: r.get::<i64, _>(2) != 0,
        call_id: r.get(3),
        title: r.get(4),
        created_at: r.get(5),
        ended_at: r.get(6),
        deleted_at: r.get(7),
    }
}

/// Everything that changes the database, decided by the conversation's rules in memory and
/// written at the end of a batch, inside its one transaction.
#[derive(Debug, Clone)]
pub enum Op {
    InsertSession(SessionRecord),
    EndSessions {
        ids: Vec<String>,
        at: String,
    },
    /// A chat's new title (`None`: untitled).
    RetitleSession {
        id: String,
        title: Option<String>,
    },
    /// Tombstones the sessions, erases their messages and every event of theirs older than
    /// `events_before` (the `session_deleted` event itself stays).
    DeleteSessions {
        ids: Vec<String>,
        at: String,
        events_before: i64,
    },
    /// `logged`: the row is also its own `message_added` event, whose id is the row's (it
    /// never changes afterwards; `events_after` rebuilds the event from it).
    InsertMessage {
        row: MessageRow,
        logged: bool,
    },
    /// Rewrites the mutable columns of a row (draft text, settling).
    UpdateMessage(MessageRow),
    DeleteMessage(i64),
    InsertEvent {
        id: i64,
        session_id: String,
        data: String,
    },
}

/// Test-only: what a writer thread started without a conversation carries (nothing: its
/// only work is the writes beside the conversation's).
#[cfg(test)]
pub(crate) struct NoUnits;

#[cfg(test)]
impl writer::Payload for NoUnits {
    fn fail(self, _why: &str) {}
}

/// Test-only: a store at `path` and its writer thread (kept while the handle lives), for the
/// tables written through [`Store::write`] without a conversation.
#[cfg(test)]
pub(crate) async fn open_with_writer(path: &Path) -> (Store, writer::WriterHandle<NoUnits>) {
    let (store, conn) = Store::open(path, Durability::Crash).await.unwrap();
    let (done, _) = tokio::sync::mpsc::unbounded_channel();
    let writer = writer::spawn(store.clone(), conn, done).unwrap();
    (store, writer)
}

/// Test-only: a database at `path` migrated by the migrations before `version` only (a
/// database left by an older app), built from copies of them in `dir`.
#[cfg(test)]
pub(crate) async fn migrated_before(dir: &Path, path: &Path, version: &str) -> SqliteConnection {
    let old = dir.join("migrations");
    std::fs::create_dir(&old).unwrap();
    for f in std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations")).unwrap() {
        let f = f.unwrap();
        let name = f.file_name().into_string().unwrap();
        if name.as_str() < version {
            std::fs::copy(f.path(), old.join(&name)).unwrap();
        }
    }
    let mut conn = SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .connect()
        .await
        .unwrap();
    sqlx::migrate::Migrator::new(old.as_path())
        .await
        .unwrap()
        .run(&mut conn)
        .await
        .unwrap();
    conn
}

#[cfg(test)]
mod tests {
    //! Migrations on a real SQLite file.
    use super::*;
    use sqlx::Connection;

    /// A database left by a version before 0004 (ids from AUTOINCREMENT) keeps its rows and
    /// never hands out an id it already gave, even one whose row was deleted.
    #[tokio::test]
    async fn plain_rowids_keep_the_rows_and_the_high_water_marks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let mut conn = super::migrated_before(dir.path(), &path, "0004").await;
        for n in 1..=3 {
            sqlx::query(
                "INSERT INTO messages (session_id, kind, text, received_at, sort_key) \
                 VALUES ('s', 'assistant', ?, '2026-11-29T12:00:00Z', ?)",
            )
            .bind(format!("m{n}"))
            .bind(n)
            .execute(&mut conn)
            .await
            .unwrap();
            sqlx::query("INSERT INTO events (session_id, data, message_row) VALUES ('s', '', ?)")
                .bind(n)
                .execute(&mut conn)
                .await
                .unwrap();
        }
        // The last of each is gone: AUTOINCREMENT still remembers 3.
        sqlx::query("DELETE FROM messages WHERE id = 3")
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query("DELETE FROM events WHERE id = 3")
            .execute(&mut conn)
            .await
            .unwrap();
        conn.close().await.unwrap();

        let (store, mut writer) = Store::open(&path, Durability::Crash).await.unwrap();
        assert_eq!(load::next_id(&mut writer).await.unwrap(), 4);
        // The 0003 references still come back whole.
        let events = store.events_after(0, 10).await.unwrap();
        assert_eq!(events.iter().map(|e| e.0).collect::<Vec<_>>(), [1, 2]);
        for ((_, json), text) in events.iter().zip(["m1", "m2"]) {
            let v: serde_json::Value = serde_json::from_str(json).unwrap();
            assert_eq!(v["type"], "message_added");
            assert_eq!(v["message"]["text"], text);
        }
        let texts: Vec<String> = sqlx::query_scalar("SELECT text FROM messages ORDER BY id")
            .fetch_all(&mut writer)
            .await
            .unwrap();
        assert_eq!(texts, ["m1", "m2"]);
        let refs: Vec<i64> = sqlx::query_scalar("SELECT message_row FROM events ORDER BY id")
            .fetch_all(&mut writer)
            .await
            .unwrap();
        assert_eq!(refs, [1, 2]);
        let schema: Vec<String> =
            sqlx::query_scalar("SELECT sql FROM sqlite_master WHERE sql IS NOT NULL")
                .fetch_all(&mut writer)
                .await
                .unwrap();
        assert!(
            schema.iter().all(|s| !s.contains("AUTOINCREMENT")),
            "{schema:?}"
        );
        for index in ["messages_in_order", "messages_pending"] {
            assert!(
                schema.iter().any(|s| s.contains(index)),
                "{index} is rebuilt"
            );
        }
    }
}
