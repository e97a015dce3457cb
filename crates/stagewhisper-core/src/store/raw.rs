//! The group-commit writer's statements, run with rusqlite on the writer connection's own
//! SQLite handle.
//!
//! sqlx runs every statement on its connection's worker thread and answers through a channel, so
//! a commit of N messages cost several round trips between threads and boxed every argument.
//! Under load that hand-off, not SQLite, was what the writer spent its time on. The writer
//! therefore takes the handle once through sqlx's `lock_handle` (the public way to reach the
//! raw connection), wraps it in a [`rusqlite::Connection`] that does not own it, and runs each
//! commit synchronously on its own thread: statements prepared once and kept in rusqlite's
//! statement cache, every row bound in place, stepped and reset. Everything else (opening,
//! migrations, reads) stays with sqlx. rusqlite 0.32 is the release built on the same SQLite
//! crate as sqlx 0.8 (`libsqlite3-sys` 0.30; `links = "sqlite3"` allows one).
//!
//! Two calls remain `unsafe`, both small: wrapping the borrowed handle ([`RawConn::new`]: the
//! caller holds sqlx's lock on it while the value lives), and SQLite's WAL hook
//! ([`RawConn::count_wal_frames`]), which rusqlite 0.32 does not offer (later releases do, on a
//! newer SQLite crate than sqlx 0.8 links).

use rusqlite::types::{ToSql, ToSqlOutput, ValueRef};
use rusqlite::{ffi, Connection, OptionalExtension};
use std::ffi::{c_char, c_int, c_void};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// A failed SQLite call: its (extended) result code and message.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message} (sqlite code {code})")]
pub struct RawError {
    pub code: i32,
    pub message: String,
}

impl From<rusqlite::Error> for RawError {
    fn from(e: rusqlite::Error) -> Self {
        match e {
            rusqlite::Error::SqliteFailure(f, message) => RawError {
                code: f.extended_code,
                message: message.unwrap_or_else(|| f.to_string()),
            },
            other => RawError {
                code: ffi::SQLITE_MISUSE,
                message: other.to_string(),
            },
        }
    }
}

/// A bound parameter.
#[derive(Debug, Clone, Copy)]
pub enum Param<'a> {
    Null,
    Int(i64),
    Text(&'a str),
}

impl ToSql for Param<'_> {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(ToSqlOutput::Borrowed(match *self {
            Param::Null => ValueRef::Null,
            Param::Int(v) => ValueRef::Integer(v),
            Param::Text(s) => ValueRef::Text(s.as_bytes()),
        }))
    }
}

impl<'a> From<i64> for Param<'a> {
    fn from(v: i64) -> Self {
        Param::Int(v)
    }
}

impl<'a> From<bool> for Param<'a> {
    fn from(v: bool) -> Self {
        Param::Int(v as i64)
    }
}

impl<'a> From<&'a str> for Param<'a> {
    fn from(v: &'a str) -> Self {
        Param::Text(v)
    }
}

impl<'a> From<&'a String> for Param<'a> {
    fn from(v: &'a String) -> Self {
        Param::Text(v)
    }
}

impl<'a> From<&'a Option<String>> for Param<'a> {
    fn from(v: &'a Option<String>) -> Self {
        v.as_deref().map_or(Param::Null, Param::Text)
    }
}

impl<'a> From<&'a super::Arg> for Param<'a> {
    fn from(v: &'a super::Arg) -> Self {
        match v {
            super::Arg::Null => Param::Null,
            super::Arg::Int(i) => Param::Int(*i),
            super::Arg::Text(s) => Param::Text(s),
        }
    }
}

/// How many prepared statements the writer keeps: the multi-row inserts (one per power of two
/// per table), the updates and deletes, the search index's batch and the side writes' few
/// shapes, with room to spare.
const STATEMENT_CACHE: usize = 128;

/// The writer's statements on a borrowed connection handle.
pub struct RawConn {
    conn: Connection,
    /// The counter [`RawConn::count_wal_frames`] registered with SQLite (kept alive here, and
    /// unregistered on drop).
    wal_frames: Option<Arc<AtomicU64>>,
}

/// A WAL checkpoint's mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CheckpointMode {
    /// Copies what no reader still needs, beside readers and the writer.
    Passive,
    /// Also starts the WAL over and truncates its file to zero bytes: needs every reader to be
    /// done with the WAL.
    Truncate,
}

/// What a checkpoint reached: frames in the WAL and frames copied into the database (both
/// zero after a truncation).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Checkpointed {
    pub wal_frames: i64,
    pub copied: i64,
}

impl Checkpointed {
    /// Every frame of the WAL is in the database: the next write starts the WAL over.
    pub fn complete(&self) -> bool {
        self.copied >= self.wal_frames
    }
}

/// SQLite's WAL hook: the number of frames in the WAL after each commit.
unsafe extern "C" fn wal_hook(
    arg: *mut c_void,
    _db: *mut ffi::sqlite3,
    _name: *const c_char,
    frames: c_int,
) -> c_int {
    // SAFETY: `arg` is the `AtomicU64` inside the Arc the RawConn keeps alive while the hook
    // is registered (see `count_wal_frames` and `Drop`).
    let counter = unsafe { &*(arg as *const AtomicU64) };
    counter.store(frames.max(0) as u64, Ordering::Relaxed);
    ffi::SQLITE_OK
}

impl RawConn {
    /// # Safety
    /// `db` must be an open connection that nothing else uses while the returned value lives,
    /// and it must stay open until the value is dropped (the value never closes it).
    pub unsafe fn new(db: NonNull<ffi::sqlite3>) -> RawConn {
        // SAFETY: per this function's contract; rusqlite leaves a handle it does not own open.
        let conn = unsafe { Connection::from_handle(db.as_ptr()) }
            .expect("wrapping an open handle cannot fail");
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        RawConn {
            conn,
            wal_frames: None,
        }
    }

    /// Runs one statement with `params` bound in order (result rows, if any, are stepped
    /// through and dropped). The statement is prepared on first use and kept.
    pub fn execute(&mut self, sql: &str, params: &[Param<'_>]) -> Result<(), RawError> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        let mut rows = stmt.query(rusqlite::params_from_iter(params))?;
        while rows.next()?.is_some() {}
        Ok(())
    }

    /// Runs one statement and returns the first column of its first row (`None`: no row, or
    /// NULL).
    pub fn query_i64(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Option<i64>, RawError> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        let v = stmt
            .query_row(rusqlite::params_from_iter(params), |r| {
                r.get::<_, Option<i64>>(0)
            })
            .optional()?;
        Ok(v.flatten())
    }

    /// Keeps `counter` at the number of frames in the WAL after each commit of this
    /// connection (SQLite's WAL hook; the connection must not checkpoint by itself, which
    /// `wal_autocheckpoint = 0` already ensures).
    pub fn count_wal_frames(&mut self, counter: Arc<AtomicU64>) {
        let arg = Arc::as_ptr(&counter) as *mut c_void;
        // SAFETY: the handle is valid (constructor contract) and used by this thread only;
        // `arg` stays valid while registered, since `self` keeps the Arc until `Drop`
        // unregisters the hook.
        unsafe {
            ffi::sqlite3_wal_hook(self.conn.handle(), Some(wal_hook), arg);
        }
        self.wal_frames = Some(counter);
    }

    /// A checkpoint of the WAL on this connection that never waits: busy (a reader of the WAL
    /// where [`CheckpointMode::Truncate`] needs none, or another checkpoint running) is
    /// `Ok(None)`. `busy_timeout_ms` is what the connection waits otherwise (restored after).
    pub fn checkpoint(
        &mut self,
        mode: CheckpointMode,
        busy_timeout_ms: i32,
    ) -> Result<Option<Checkpointed>, RawError> {
        let sql = match mode {
            CheckpointMode::Passive => "PRAGMA main.wal_checkpoint(PASSIVE)",
            CheckpointMode::Truncate => "PRAGMA main.wal_checkpoint(TRUNCATE)",
        };
        self.conn.busy_timeout(Duration::ZERO)?;
        let result = self.conn.prepare_cached(sql).and_then(|mut s| {
            s.query_row([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            })
        });
        let waits = Duration::from_millis(busy_timeout_ms.max(0) as u64);
        self.conn.busy_timeout(waits)?;
        match result {
            Ok((0, wal_frames, copied)) => Ok(Some(Checkpointed { wal_frames, copied })),
            Ok(_busy) => Ok(None),
            Err(rusqlite::Error::SqliteFailure(f, _))
                if matches!(
                    f.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                ) =>
            {
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Frees the page cache memory the connection does not need right now (outside a
    /// transaction: all of it); the cache fills again from the OS page cache as pages are used.
    pub fn release_memory(&mut self) {
        if let Err(e) = self.conn.release_memory() {
            tracing::debug!(error = %e, "releasing the writer's page cache failed");
        }
    }

    /// Rows changed by the most recent INSERT, UPDATE or DELETE on this handle.
    pub fn changes(&self) -> u64 {
        self.conn.changes()
    }

    /// Whether a transaction is open on the connection.
    pub fn in_transaction(&self) -> bool {
        !self.conn.is_autocommit()
    }
}

impl Drop for RawConn {
    fn drop(&mut self) {
        if self.wal_frames.take().is_some() {
            // SAFETY: valid handle; unregisters the hook before its counter goes.
            unsafe {
                ffi::sqlite3_wal_hook(self.conn.handle(), None, std::ptr::null_mut());
            }
        }
        // The cached statements are finalized when `conn` drops, before the handle goes back
        // to sqlx (whose close fails on unfinalized statements); the handle stays open.
    }
}
