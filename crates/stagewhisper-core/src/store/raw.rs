//! The group-commit writer's statements, run on the writer connection's own SQLite handle
//! through SQLite's C API.
//!
//! sqlx runs every statement on its connection's worker thread and answers through a channel, so
//! a commit of N messages cost several round trips between threads and boxed every argument.
//! Under load that hand-off, not SQLite, was what the writer spent its time on. The writer
//! therefore takes the handle once through sqlx's `lock_handle` (the public way to reach the
//! raw connection) and runs each commit synchronously on its own thread: statements prepared
//! once, every row bound in place (no copies), stepped and reset. Everything else (opening,
//! migrations, reads) stays with sqlx.
//!
//! Why not a maintained crate's statements: rusqlite's cached statements (0.32, the release on
//! the SQLite crate sqlx 0.8 links) were tried in this place and measured with the ingest bench
//! (`--profile durable|core --conns 1 --secs 3`, release, five alternating runs of each; CPU
//! time from `perf stat` around the whole run, start-up included: the bench's own per-request
//! CPU line came after): durable ingest
//! fell from 7,630 to 6,139 callbacks/s (median) and its CPU time per callback rose from 159 to
//! 198 µs; with this module back, 7,272/s and 157 µs. rusqlite binds every text as
//! `SQLITE_TRANSIENT` (SQLite copies each string) and looks every statement up by its SQL text
//! in an LRU cache; here text is bound `SQLITE_STATIC` and a statement is found by its text in a
//! plain map. The cost was over the 3 % the hot path allows, so this stays.
//!
//! The invariants of the `unsafe` code are local: the handle is valid and used by nobody else
//! while a [`RawConn`] lives (the caller holds sqlx's lock for that long), statements are
//! finalized before it is dropped, and text is bound with `SQLITE_STATIC` only for the duration
//! of one `execute` (reset + clear_bindings before returning, while the borrowed strings are
//! still alive).

use libsqlite3_sys as ffi;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// A failed SQLite call: its (extended) result code and message.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{message} (sqlite code {code})")]
pub struct RawError {
    pub code: i32,
    pub message: String,
}

/// A bound parameter.
#[derive(Debug, Clone, Copy)]
pub enum Param<'a> {
    Null,
    Int(i64),
    Text(&'a str),
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

/// Prepared statements on a borrowed connection handle.
pub struct RawConn {
    db: NonNull<ffi::sqlite3>,
    /// By SQL text; the multi-row inserts are kilobytes long, hence a fast hasher.
    statements: HashMap<String, NonNull<ffi::sqlite3_stmt>, foldhash::fast::RandomState>,
    /// The counter [`RawConn::count_wal_frames`] registered with SQLite (kept alive here, and
    /// unregistered on drop).
    wal_frames: Option<Arc<AtomicU64>>,
}

// SAFETY: the handle is opened by sqlx in SQLite's multi-thread mode (`SQLITE_OPEN_NOMUTEX`),
// in which one connection may be used from any thread as long as no two use it at once. A
// `RawConn` is moved between threads only inside the writer's mutex (`writer.rs`), whose holder
// is its one user; its statements belong to it and move with it.
unsafe impl Send for RawConn {}

/// A WAL checkpoint's mode (`sqlite3_wal_checkpoint_v2`).
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
    /// and it must stay open until the value is dropped.
    pub unsafe fn new(db: NonNull<ffi::sqlite3>) -> RawConn {
        RawConn {
            db,
            statements: HashMap::default(),
            wal_frames: None,
        }
    }

    fn error(&self, code: c_int) -> RawError {
        // SAFETY: the handle is valid (constructor contract); errmsg returns a string owned by
        // SQLite that stays valid until the next call on this handle, copied right away.
        let message = unsafe {
            let p = ffi::sqlite3_errmsg(self.db.as_ptr());
            if p.is_null() {
                String::from("unknown error")
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        // SAFETY: valid handle.
        let extended = unsafe { ffi::sqlite3_extended_errcode(self.db.as_ptr()) };
        RawError {
            code: if extended != 0 { extended } else { code },
            message,
        }
    }

    fn statement(&mut self, sql: &str) -> Result<NonNull<ffi::sqlite3_stmt>, RawError> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(*s);
        }
        let mut stmt = std::ptr::null_mut();
        // SAFETY: valid handle; `sql` is a live UTF-8 buffer of the given length; SQLite writes
        // the statement pointer (or null) into `stmt`.
        let rc = unsafe {
            ffi::sqlite3_prepare_v3(
                self.db.as_ptr(),
                sql.as_ptr().cast(),
                sql.len() as c_int,
                ffi::SQLITE_PREPARE_PERSISTENT,
                &mut stmt,
                std::ptr::null_mut(),
            )
        };
        if rc != ffi::SQLITE_OK {
            return Err(self.error(rc));
        }
        let stmt = NonNull::new(stmt).ok_or_else(|| RawError {
            code: ffi::SQLITE_MISUSE,
            message: format!("empty statement: {sql}"),
        })?;
        self.statements.insert(sql.to_string(), stmt);
        Ok(stmt)
    }

    /// Binds `params` in order.
    ///
    /// # Safety
    /// `stmt` was prepared on this handle and is live; text is bound as SQLITE_STATIC, so the
    /// caller clears the bindings before the borrowed strings go.
    unsafe fn bind(
        &self,
        stmt: *mut ffi::sqlite3_stmt,
        params: &[Param<'_>],
    ) -> Result<(), RawError> {
        for (i, p) in params.iter().enumerate() {
            let n = i as c_int + 1;
            // SAFETY: per the function's contract.
            let rc = unsafe {
                match *p {
                    Param::Null => ffi::sqlite3_bind_null(stmt, n),
                    Param::Int(v) => ffi::sqlite3_bind_int64(stmt, n, v),
                    Param::Text(s) => ffi::sqlite3_bind_text(
                        stmt,
                        n,
                        s.as_ptr().cast(),
                        s.len() as c_int,
                        ffi::SQLITE_STATIC(),
                    ),
                }
            };
            if rc != ffi::SQLITE_OK {
                return Err(self.error(rc));
            }
        }
        Ok(())
    }

    /// Runs one statement (no result rows expected) with `params` bound in order. The statement
    /// is prepared on first use and kept.
    pub fn execute(&mut self, sql: &str, params: &[Param<'_>]) -> Result<(), RawError> {
        let stmt = self.statement(sql)?.as_ptr();
        // SAFETY: `stmt` was prepared on this handle and is not finalized until drop. Text is
        // bound as SQLITE_STATIC: SQLite reads it during `step` only, and the bindings are
        // cleared before this function returns, while `params` (and what it borrows) is alive.
        unsafe {
            let result = (|| {
                self.bind(stmt, params)?;
                loop {
                    match ffi::sqlite3_step(stmt) {
                        ffi::SQLITE_DONE => break,
                        ffi::SQLITE_ROW => continue,
                        rc => return Err(self.error(rc)),
                    }
                }
                Ok(())
            })();
            ffi::sqlite3_reset(stmt);
            ffi::sqlite3_clear_bindings(stmt);
            result
        }
    }

    /// Runs one statement and returns the first column of its first row (`None`: no row, or
    /// NULL).
    pub fn query_i64(&mut self, sql: &str, params: &[Param<'_>]) -> Result<Option<i64>, RawError> {
        let stmt = self.statement(sql)?.as_ptr();
        // SAFETY: as in `execute` (text bound as SQLITE_STATIC, cleared before returning); the
        // column is read while the statement is on its row.
        unsafe {
            let result = (|| {
                self.bind(stmt, params)?;
                match ffi::sqlite3_step(stmt) {
                    ffi::SQLITE_ROW => Ok((ffi::sqlite3_column_type(stmt, 0) != ffi::SQLITE_NULL)
                        .then(|| ffi::sqlite3_column_int64(stmt, 0))),
                    ffi::SQLITE_DONE => Ok(None),
                    rc => Err(self.error(rc)),
                }
            })();
            ffi::sqlite3_reset(stmt);
            ffi::sqlite3_clear_bindings(stmt);
            result
        }
    }

    /// Keeps `counter` at the number of frames in the WAL after each commit of this
    /// connection (SQLite's WAL hook; the connection must not checkpoint by itself, which
    /// `wal_autocheckpoint = 0` already ensures).
    pub fn count_wal_frames(&mut self, counter: Arc<AtomicU64>) {
        let arg = Arc::as_ptr(&counter) as *mut c_void;
        // SAFETY: valid handle; `arg` stays valid while registered, since `self` keeps the Arc
        // until `Drop` unregisters the hook.
        unsafe {
            ffi::sqlite3_wal_hook(self.db.as_ptr(), Some(wal_hook), arg);
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
        let (mut log, mut copied) = (0, 0);
        let mode = match mode {
            CheckpointMode::Passive => ffi::SQLITE_CHECKPOINT_PASSIVE,
            CheckpointMode::Truncate => ffi::SQLITE_CHECKPOINT_TRUNCATE,
        };
        // SAFETY: valid handle, used by this thread only; the out-pointers are live locals.
        let rc = unsafe {
            ffi::sqlite3_busy_timeout(self.db.as_ptr(), 0);
            let rc = ffi::sqlite3_wal_checkpoint_v2(
                self.db.as_ptr(),
                c"main".as_ptr(),
                mode,
                &mut log,
                &mut copied,
            );
            ffi::sqlite3_busy_timeout(self.db.as_ptr(), busy_timeout_ms);
            rc
        };
        match rc {
            ffi::SQLITE_OK => Ok(Some(Checkpointed {
                wal_frames: log.into(),
                copied: copied.into(),
            })),
            ffi::SQLITE_BUSY | ffi::SQLITE_LOCKED => Ok(None),
            rc => Err(self.error(rc)),
        }
    }

    /// Frees the page cache memory the connection does not need right now (outside a
    /// transaction: all of it); the cache fills again from the OS page cache as pages are used.
    pub fn release_memory(&mut self) {
        // SAFETY: valid handle, used by this thread only.
        unsafe {
            ffi::sqlite3_db_release_memory(self.db.as_ptr());
        }
    }

    /// Rows changed by the most recent INSERT, UPDATE or DELETE on this handle.
    pub fn changes(&self) -> u64 {
        // SAFETY: valid handle.
        unsafe { ffi::sqlite3_changes64(self.db.as_ptr()) as u64 }
    }

    /// Whether a transaction is open on the connection.
    pub fn in_transaction(&self) -> bool {
        // SAFETY: valid handle.
        unsafe { ffi::sqlite3_get_autocommit(self.db.as_ptr()) == 0 }
    }
}

impl Drop for RawConn {
    fn drop(&mut self) {
        if self.wal_frames.take().is_some() {
            // SAFETY: valid handle; unregisters the hook before its counter goes.
            unsafe {
                ffi::sqlite3_wal_hook(self.db.as_ptr(), None, std::ptr::null_mut());
            }
        }
        for (_, s) in self.statements.drain() {
            // SAFETY: each statement was prepared on this handle and is finalized exactly once,
            // before the handle is released (sqlx's close fails on unfinalized statements).
            unsafe {
                ffi::sqlite3_finalize(s.as_ptr());
            }
        }
    }
}
