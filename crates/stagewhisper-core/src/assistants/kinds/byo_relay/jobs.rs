//! The BYO jobs table (`byo_jobs`, migration 0007) and the transcript turns waiting for a
//! live-analysis job (`byo_turns`). Written through the store's one writer thread
//! ([`Store::write`]: the conversation's group commit and durability); every state change is
//! one write, so a restart finds each job either before or after it. Read on the store's read
//! pool.

use crate::assistants::KindError;
use crate::store::{Stmt, Store, StoreError};
use serde_json::Value;
use sqlx::Row;

const INSERT: &str = "INSERT INTO byo_jobs (job_id, purpose, app_session, source_task_id, \
     anchor, correlation_id, state, deadline_ms, created_ms, event) \
     VALUES (?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?)";
const INSERT_OR_IGNORE: &str = "INSERT OR IGNORE INTO byo_jobs (job_id, purpose, app_session, \
     source_task_id, anchor, correlation_id, state, deadline_ms, created_ms, event) \
     VALUES (?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?)";

/// A new job's row, `queued`, for one of the two statements above.
fn insert_job(sql: &'static str, j: &NewJob<'_>, now_ms: i64) -> Stmt {
    Stmt::new(sql)
        .bind(j.job_id)
        .bind(j.purpose)
        .bind(j.app_session)
        .bind(j.source_task_id)
        .bind(j.anchor)
        .bind(j.correlation_id)
        .bind(j.deadline_ms)
        .bind(now_ms)
        .bind(j.event)
}

/// A `byo_turns` row read as `task_id, speaker, text, job_id`.
fn turn(r: &sqlx::sqlite::SqliteRow) -> Turn {
    Turn {
        task_id: r.get(0),
        speaker: r.get(1),
        text: r.get(2),
        job_id: r.get(3),
    }
}

/// What a job is for.
pub const LIVE: &str = "live_analysis";
pub const SUMMARY: &str = "session_summary";
pub const PROBE: &str = "capability_probe";
pub const CHAT: &str = "chat";
pub const TEST: &str = "connectivity_test";

#[derive(Debug, thiserror::Error)]
pub enum JobsError {
    #[error("BYO jobs table: {0}")]
    Read(#[from] sqlx::Error),
    #[error("BYO jobs table: {0}")]
    Write(#[from] StoreError),
}

/// A jobs table that cannot be read or written, as the kind reports it.
impl From<JobsError> for KindError {
    fn from(e: JobsError) -> KindError {
        KindError::internal("storage_unavailable", e.to_string())
    }
}

/// One row of `byo_jobs`.
#[derive(Debug, Clone)]
pub struct Job {
    pub job_id: String,
    pub purpose: String,
    pub app_session: Option<String>,
    pub source_task_id: Option<String>,
    pub anchor: Option<String>,
    pub correlation_id: String,
    pub state: String,
    pub deadline_ms: i64,
    pub event: Option<String>,
    pub result: Option<String>,
    pub error_code: Option<String>,
    pub applied: bool,
    pub reply_id: Option<String>,
    pub partial: Option<String>,
}

impl Job {
    /// Not answered yet (queued or dispatched).
    pub fn is_open(&self) -> bool {
        matches!(self.state.as_str(), "queued" | "dispatched")
    }
}

/// A new job.
pub struct NewJob<'a> {
    pub job_id: &'a str,
    pub purpose: &'a str,
    pub app_session: Option<&'a str>,
    pub source_task_id: Option<&'a str>,
    pub anchor: Option<&'a str>,
    pub correlation_id: &'a str,
    pub deadline_ms: i64,
    pub event: Option<&'a str>,
}

/// A stored transcript turn.
#[derive(Debug, Clone)]
pub struct Turn {
    pub task_id: String,
    pub speaker: Option<String>,
    pub text: String,
    pub job_id: Option<String>,
}

const COLS: &str = "job_id, purpose, app_session, source_task_id, anchor, correlation_id, state, \
    deadline_ms, event, result, error_code, applied, reply_id, partial";

fn job(r: &sqlx::sqlite::SqliteRow) -> Job {
    Job {
        job_id: r.get(0),
        purpose: r.get(1),
        app_session: r.get(2),
        source_task_id: r.get(3),
        anchor: r.get(4),
        correlation_id: r.get(5),
        state: r.get(6),
        deadline_ms: r.get(7),
        event: r.get(8),
        result: r.get(9),
        error_code: r.get(10),
        applied: r.get::<i64, _>(11) != 0,
        reply_id: r.get(12),
        partial: r.get(13),
    }
}

#[derive(Clone)]
pub struct Jobs {
    /// Read on its read pool; written through its writer thread.
    store: Store,
}

impl Jobs {
    /// The tables on the app's database (already migrated by the store).
    pub fn new(store: &Store) -> Jobs {
        Jobs {
            store: store.clone(),
        }
    }

    /// One statement through the writer; the rows it changed.
    async fn write(&self, stmt: Stmt) -> Result<u64, JobsError> {
        let changes = self.store.write(vec![stmt]).await?;
        Ok(changes.first().copied().unwrap_or(0))
    }

    /// Inserts a job; `false` when its id or source task id is already there.
    pub async fn insert(&self, j: &NewJob<'_>, now_ms: i64) -> Result<bool, JobsError> {
        Ok(self.write(insert_job(INSERT_OR_IGNORE, j, now_ms)).await? == 1)
    }

    pub async fn get(&self, job_id: &str) -> Result<Option<Job>, JobsError> {
        let r = sqlx::query(&format!("SELECT {COLS} FROM byo_jobs WHERE job_id = ?"))
            .bind(job_id)
            .fetch_optional(self.store.reads())
            .await?;
        Ok(r.as_ref().map(job))
    }

    pub async fn by_source(&self, task_id: &str) -> Result<Option<Job>, JobsError> {
        let r = sqlx::query(&format!(
            "SELECT {COLS} FROM byo_jobs WHERE source_task_id = ?"
        ))
        .bind(task_id)
        .fetch_optional(self.store.reads())
        .await?;
        Ok(r.as_ref().map(job))
    }

    pub async fn by_reply_id(&self, reply_id: &str) -> Result<Option<Job>, JobsError> {
        let r = sqlx::query(&format!("SELECT {COLS} FROM byo_jobs WHERE reply_id = ?"))
            .bind(reply_id)
            .fetch_optional(self.store.reads())
            .await?;
        Ok(r.as_ref().map(job))
    }

    /// Open jobs with their event built, oldest first (what a (re)connected stream gets).
    pub async fn sendable(&self) -> Result<Vec<Job>, JobsError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLS} FROM byo_jobs WHERE state IN ('queued','dispatched') \
             AND event IS NOT NULL ORDER BY created_ms, rowid"
        ))
        .fetch_all(self.store.reads())
        .await?;
        Ok(rows.iter().map(job).collect())
    }

    /// Open jobs whose deadline is at or before `now_ms`.
    pub async fn expired(&self, now_ms: i64) -> Result<Vec<Job>, JobsError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLS} FROM byo_jobs WHERE state IN ('queued','dispatched') \
             AND deadline_ms <= ? ORDER BY created_ms"
        ))
        .bind(now_ms)
        .fetch_all(self.store.reads())
        .await?;
        Ok(rows.iter().map(job).collect())
    }

    /// Answered jobs whose result has not gone into the conversation yet (a stop in between).
    pub async fn unapplied(&self) -> Result<Vec<Job>, JobsError> {
        let rows = sqlx::query(&format!(
            "SELECT {COLS} FROM byo_jobs WHERE state IN ('completed','failed','timed_out') \
             AND applied = 0 ORDER BY created_ms"
        ))
        .fetch_all(self.store.reads())
        .await?;
        Ok(rows.iter().map(job).collect())
    }

    pub async fn mark_dispatched(&self, job_id: &str) -> Result<(), JobsError> {
        self.write(
            Stmt::new(
                "UPDATE byo_jobs SET state = 'dispatched' WHERE job_id = ? AND state = 'queued'",
            )
            .bind(job_id),
        )
        .await?;
        Ok(())
    }

    /// Stores the answer of an open job; `false` when it was already answered (first wins).
    pub async fn finish(
        &self,
        job_id: &str,
        state: &str,
        result: Option<&Value>,
        error: Option<(&str, &str)>,
        now_ms: i64,
    ) -> Result<bool, JobsError> {
        let r = self
            .write(
                Stmt::new("UPDATE byo_jobs SET state = ?, result = ?, error_code = ?, error_message = ?, \
             completed_ms = ? WHERE job_id = ? AND state IN ('queued','dispatched')",)
        .bind(state)
        .bind(result.map(|v| v.to_string()))
        .bind(error.map(|e| e.0))
        .bind(error.map(|e| e.1))
        .bind(now_ms)
        .bind(job_id)
            )
            .await?;
        Ok(r == 1)
    }

    pub async fn mark_applied(&self, job_id: &str) -> Result<(), JobsError> {
        self.write(Stmt::new("UPDATE byo_jobs SET applied = 1 WHERE job_id = ?").bind(job_id))
            .await?;
        Ok(())
    }

    pub async fn set_event(&self, job_id: &str, event: &str) -> Result<(), JobsError> {
        self.write(
            Stmt::new("UPDATE byo_jobs SET event = ? WHERE job_id = ?")
                .bind(event)
                .bind(job_id),
        )
        .await?;
        Ok(())
    }

    pub async fn set_reply(
        &self,
        job_id: &str,
        reply_id: &str,
        partial: &str,
    ) -> Result<(), JobsError> {
        self
            .write(
                Stmt::new("UPDATE byo_jobs SET reply_id = COALESCE(reply_id, ?), partial = ? WHERE job_id = ?",)
        .bind(reply_id)
        .bind(partial)
        .bind(job_id)
            )
            .await?;
        Ok(())
    }

    /// Every open job ends `failed` with `code` (unpairing: nothing will answer them).
    pub async fn fail_open(&self, code: &str, message: &str, now_ms: i64) -> Result<(), JobsError> {
        self.write(
            Stmt::new(
                "UPDATE byo_jobs SET state = 'failed', error_code = ?, error_message = ?, \
             completed_ms = ?, applied = 1 WHERE state IN ('queued','dispatched')",
            )
            .bind(code)
            .bind(message)
            .bind(now_ms),
        )
        .await?;
        Ok(())
    }

    // ---- transcript turns ----

    /// Stores a turn once (a retried delivery of the same task id is a no-op).
    pub async fn add_turn(
        &self,
        task_id: &str,
        call_id: &str,
        speaker: Option<&str>,
        text: &str,
        occurred_at: &str,
    ) -> Result<bool, JobsError> {
        let r = self
            .write(
                Stmt::new("INSERT OR IGNORE INTO byo_turns (task_id, call_id, speaker, text, occurred_at, seq) \
             VALUES (?, ?, ?, ?, ?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM byo_turns))",)
        .bind(task_id)
        .bind(call_id)
        .bind(speaker)
        .bind(text)
        .bind(occurred_at)
            )
            .await?;
        Ok(r == 1)
    }

    /// The call's last `window` turns (oldest first).
    pub async fn recent_turns(&self, call_id: &str, window: i64) -> Result<Vec<Turn>, JobsError> {
        let rows = sqlx::query(
            "SELECT task_id, speaker, text, job_id FROM (SELECT * FROM byo_turns WHERE call_id = ? \
             ORDER BY seq DESC LIMIT ?) ORDER BY seq",
        )
        .bind(call_id)
        .bind(window)
        .fetch_all(self.store.reads())
        .await?;
        Ok(rows.iter().map(turn).collect())
    }

    /// Calls with turns that no job carries yet.
    pub async fn calls_waiting(&self) -> Result<Vec<String>, JobsError> {
        let rows = sqlx::query("SELECT DISTINCT call_id FROM byo_turns WHERE job_id IS NULL")
            .fetch_all(self.store.reads())
            .await?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    }

    /// The call's turns no job carries yet (oldest first).
    pub async fn waiting_turns(&self, call_id: &str) -> Result<Vec<Turn>, JobsError> {
        let rows = sqlx::query(
            "SELECT task_id, speaker, text, job_id FROM byo_turns WHERE call_id = ? \
             AND job_id IS NULL ORDER BY seq",
        )
        .bind(call_id)
        .fetch_all(self.store.reads())
        .await?;
        Ok(rows.iter().map(turn).collect())
    }

    /// The live-analysis job of `insights_session` still open, if any.
    pub async fn live_in_flight(&self, insights_session: &str) -> Result<Option<Job>, JobsError> {
        let r = sqlx::query(&format!(
            "SELECT {COLS} FROM byo_jobs WHERE app_session = ? AND purpose = 'live_analysis' \
             AND state IN ('queued','dispatched') LIMIT 1"
        ))
        .bind(insights_session)
        .fetch_optional(self.store.reads())
        .await?;
        Ok(r.as_ref().map(job))
    }

    /// Creates a live job and hands it the waiting turns, in one transaction.
    pub async fn insert_live(
        &self,
        j: &NewJob<'_>,
        turns: &[String],
        now_ms: i64,
    ) -> Result<(), JobsError> {
        let mut stmts = vec![insert_job(INSERT, j, now_ms)];
        stmts.extend(turns.iter().map(|t| {
            Stmt::new("UPDATE byo_turns SET job_id = ? WHERE task_id = ? AND job_id IS NULL")
                .bind(j.job_id)
                .bind(t.as_str())
        }));
        self.store.write(stmts).await?;
        Ok(())
    }

    /// Counts jobs by state for one purpose (tests and the view).
    pub async fn count(&self, purpose: &str, state: &str) -> Result<i64, JobsError> {
        Ok(
            sqlx::query_scalar("SELECT COUNT(*) FROM byo_jobs WHERE purpose = ? AND state = ?")
                .bind(purpose)
                .bind(state)
                .fetch_one(self.store.reads())
                .await?,
        )
    }

    /// A call's turns are no longer needed (the session was deleted).
    pub async fn forget_call(&self, call_id: &str) -> Result<(), JobsError> {
        self.write(Stmt::new("DELETE FROM byo_turns WHERE call_id = ?").bind(call_id))
            .await?;
        Ok(())
    }
}
