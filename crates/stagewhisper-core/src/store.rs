//! SQLite storage (sqlx): migrations, the one writer connection, read queries for views, and
//! WAL checkpoints kept off the request path. Knows SQL, not rules.
//!
//! Durability: WAL with `synchronous = FULL`, so a commit is on disk (fsync of the WAL) before
//! the listener answers 2xx — an accepted callback survives `kill -9` and power loss. The writer
//! has `wal_autocheckpoint = 0`; a background task checkpoints (PASSIVE) on its own connection
//! so checkpoint fsyncs never sit inside a request.

use crate::model::{MessageKind, MessageRow};
use sqlx::sqlite::{
    SqliteConnectOptions, SqliteConnection, SqliteJournalMode, SqlitePoolOptions, SqliteRow,
    SqliteSynchronous,
};
use sqlx::{ConnectOptions, Connection, Row, SqlitePool};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::Notify;

pub type Tx<'c> = sqlx::Transaction<'c, sqlx::Sqlite>;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database error: {0}")]
    Sql(#[from] sqlx::Error),
    #[error("migration failed: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
}

/// Read side of the store (a pool of read-only connections) plus the checkpoint trigger.
#[derive(Clone)]
pub struct Store {
    read: SqlitePool,
    path: PathBuf,
    checkpoint: std::sync::Arc<Notify>,
}

const MESSAGE_COLUMNS: &str = "id, session_id, kind, text, message_id, task_id, user_message_id, \
     scope, error_code, occurred_at, received_at, sort_key, draft, hidden";

fn base_options(path: &Path) -> SqliteConnectOptions {
    SqliteConnectOptions::new()
        .filename(path)
        .journal_mode(SqliteJournalMode::Wal)
        .synchronous(SqliteSynchronous::Full)
        .busy_timeout(Duration::from_secs(5))
        .foreign_keys(false)
        .log_statements(tracing::log::LevelFilter::Trace)
}

impl Store {
    /// Opens (creating and migrating) the database; returns the read side and the one writer
    /// connection, which the conversation actor owns.
    pub async fn open(path: &Path) -> Result<(Store, SqliteConnection), StoreError> {
        let mut writer = base_options(path)
            .create_if_missing(true)
            .pragma("wal_autocheckpoint", "0")
            .pragma("temp_store", "memory")
            .connect()
            .await?;
        sqlx::migrate!("./migrations").run(&mut writer).await?;
        let read = SqlitePoolOptions::new()
            .max_connections(4)
            .min_connections(1)
            .connect_with(base_options(path).read_only(true))
            .await?;
        let store = Store {
            read,
            path: path.to_path_buf(),
            checkpoint: std::sync::Arc::new(Notify::new()),
        };
        store.spawn_checkpointer().await?;
        Ok((store, writer))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Tells the checkpointer that commits happened (cheap; coalesced).
    pub fn committed(&self) {
        self.checkpoint.notify_one();
    }

    async fn spawn_checkpointer(&self) -> Result<(), StoreError> {
        let mut conn = base_options(&self.path).connect().await?;
        let notify = self.checkpoint.clone();
        tokio::spawn(async move {
            loop {
                notify.notified().await;
                // Coalesce: at most one checkpoint a second, whatever the commit rate.
                tokio::time::sleep(Duration::from_secs(1)).await;
                if let Err(e) = sqlx::query("PRAGMA wal_checkpoint(PASSIVE)")
                    .execute(&mut conn)
                    .await
                {
                    tracing::warn!(error = %e, "WAL checkpoint failed");
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
        let sql = format!(
            "SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ? ORDER BY sort_key, id"
        );
        let rows = sqlx::query(&sql)
            .bind(session_id)
            .fetch_all(&self.read)
            .await?;
        Ok(rows.iter().map(message_from_row).collect())
    }

    /// The newest event id (0 when the log is empty).
    pub async fn last_event_id(&self) -> Result<i64, StoreError> {
        let row = sqlx::query("SELECT COALESCE(MAX(id), 0) FROM events")
            .fetch_one(&self.read)
            .await?;
        Ok(row.get::<i64, _>(0))
    }

    /// Events after `after` (exclusive), oldest first: `(id, data json)`.
    pub async fn events_after(
        &self,
        after: i64,
        limit: i64,
    ) -> Result<Vec<(i64, String)>, StoreError> {
        let rows = sqlx::query("SELECT id, data FROM events WHERE id > ? ORDER BY id LIMIT ?")
            .bind(after)
            .bind(limit)
            .fetch_all(&self.read)
            .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get::<i64, _>(0), r.get::<String, _>(1)))
            .collect())
    }
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

fn message_from_row(r: &SqliteRow) -> MessageRow {
    MessageRow {
        id: r.get(0),
        session_id: r.get(1),
        kind: MessageKind::parse(r.get::<&str, _>(2)),
        text: r.get(3),
        message_id: r.get(4),
        task_id: r.get(5),
        user_message_id: r.get(6),
        scope: r.get(7),
        error_code: r.get(8),
        occurred_at: r.get(9),
        received_at: r.get(10),
        sort_key: r.get(11),
        draft: r.get::<i64, _>(12) != 0,
        hidden: r.get::<i64, _>(13) != 0,
    }
}

/// A new entry to insert.
#[derive(Debug, Clone)]
pub struct NewMessage<'a> {
    pub session_id: &'a str,
    pub kind: MessageKind,
    pub text: &'a str,
    pub message_id: Option<&'a str>,
    pub task_id: Option<&'a str>,
    pub user_message_id: Option<&'a str>,
    pub scope: Option<&'a str>,
    pub content_key: Option<&'a str>,
    pub error_code: Option<&'a str>,
    pub occurred_at: Option<&'a str>,
    pub received_at: &'a str,
    pub sort_key: i64,
    pub draft_key: Option<&'a str>,
    pub hidden: bool,
}

/// Writes, used only by the conversation actor inside its transaction.
pub mod write {
    use super::*;

    pub async fn load_sessions(
        conn: &mut SqliteConnection,
    ) -> Result<Vec<SessionRecord>, StoreError> {
        let rows = sqlx::query(
            "SELECT session_id, kind, is_call, call_id, title, created_at, ended_at, deleted_at FROM sessions",
        )
        .fetch_all(&mut *conn)
        .await?;
        Ok(rows.iter().map(session_from_row).collect())
    }

    /// Drafts left open by a previous run: `(row, draft_key)`.
    pub async fn load_open_drafts(
        conn: &mut SqliteConnection,
    ) -> Result<Vec<(MessageRow, String)>, StoreError> {
        let sql = format!(
            "SELECT {MESSAGE_COLUMNS}, draft_key FROM messages WHERE draft = 1 AND draft_key IS NOT NULL"
        );
        let rows = sqlx::query(&sql).fetch_all(&mut *conn).await?;
        Ok(rows
            .iter()
            .map(|r| (message_from_row(r), r.get::<String, _>(14)))
            .collect())
    }

    pub async fn insert_session(
        conn: &mut SqliteConnection,
        s: &SessionRecord,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "INSERT INTO sessions (session_id, kind, is_call, call_id, title, created_at) VALUES (?, ?, ?, ?, ?, ?)",
        )
        .bind(&s.session_id)
        .bind(&s.kind)
        .bind(s.is_call as i64)
        .bind(&s.call_id)
        .bind(&s.title)
        .bind(&s.created_at)
        .execute(&mut *conn)
        .await?;
        Ok(())
    }

    pub async fn end_sessions(
        conn: &mut SqliteConnection,
        ids: &[&str],
        ended_at: &str,
    ) -> Result<(), StoreError> {
        for id in ids {
            sqlx::query(
                "UPDATE sessions SET ended_at = ? WHERE session_id = ? AND ended_at IS NULL",
            )
            .bind(ended_at)
            .bind(id)
            .execute(&mut *conn)
            .await?;
        }
        Ok(())
    }

    /// Tombstones the sessions and erases their messages and events.
    pub async fn delete_sessions(
        conn: &mut SqliteConnection,
        ids: &[&str],
        deleted_at: &str,
    ) -> Result<(), StoreError> {
        for id in ids {
            sqlx::query("UPDATE sessions SET deleted_at = ? WHERE session_id = ?")
                .bind(deleted_at)
                .bind(id)
                .execute(&mut *conn)
                .await?;
            sqlx::query("DELETE FROM messages WHERE session_id = ?")
                .bind(id)
                .execute(&mut *conn)
                .await?;
            sqlx::query("DELETE FROM events WHERE session_id = ?")
                .bind(id)
                .execute(&mut *conn)
                .await?;
        }
        Ok(())
    }

    /// Inserts unless the (session, message_id) or the content key already exists.
    /// Returns the new row id, or `None` for a duplicate.
    pub async fn insert_message(
        conn: &mut SqliteConnection,
        m: &NewMessage<'_>,
    ) -> Result<Option<i64>, StoreError> {
        let row = sqlx::query(
            "INSERT INTO messages (session_id, kind, text, message_id, task_id, user_message_id, scope, \
             content_key, error_code, occurred_at, received_at, sort_key, draft, draft_key, hidden) \
             VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING RETURNING id",
        )
        .bind(m.session_id)
        .bind(m.kind.as_str())
        .bind(m.text)
        .bind(m.message_id)
        .bind(m.task_id)
        .bind(m.user_message_id)
        .bind(m.scope)
        .bind(m.content_key)
        .bind(m.error_code)
        .bind(m.occurred_at)
        .bind(m.received_at)
        .bind(m.sort_key)
        .bind(m.draft_key.is_some() as i64)
        .bind(m.draft_key)
        .bind(m.hidden as i64)
        .fetch_optional(&mut *conn)
        .await?;
        Ok(row.map(|r| r.get::<i64, _>(0)))
    }

    /// `true` when the message id or the content key is already stored in the session.
    pub async fn is_duplicate(
        conn: &mut SqliteConnection,
        session_id: &str,
        message_id: &str,
        content_key: Option<&str>,
    ) -> Result<bool, StoreError> {
        let row = sqlx::query(
            "SELECT 1 FROM messages WHERE (session_id = ? AND message_id = ?) OR content_key = ? LIMIT 1",
        )
        .bind(session_id)
        .bind(message_id)
        .bind(content_key)
        .fetch_optional(&mut *conn)
        .await?;
        Ok(row.is_some())
    }

    pub async fn update_draft_text(
        conn: &mut SqliteConnection,
        id: i64,
        text: &str,
    ) -> Result<(), StoreError> {
        sqlx::query("UPDATE messages SET text = ? WHERE id = ?")
            .bind(text)
            .bind(id)
            .execute(&mut *conn)
            .await?;
        Ok(())
    }

    /// Turns a draft row into a final message (caller checked for duplicates first).
    #[allow(clippy::too_many_arguments)]
    pub async fn settle_draft(
        conn: &mut SqliteConnection,
        id: i64,
        text: &str,
        message_id: Option<&str>,
        content_key: Option<&str>,
        occurred_at: Option<&str>,
        hidden: bool,
    ) -> Result<(), StoreError> {
        sqlx::query(
            "UPDATE messages SET text = ?, message_id = COALESCE(?, message_id), content_key = ?, \
             occurred_at = COALESCE(?, occurred_at), draft = 0, draft_key = NULL, hidden = ? WHERE id = ?",
        )
        .bind(text)
        .bind(message_id)
        .bind(content_key)
        .bind(occurred_at)
        .bind(hidden as i64)
        .bind(id)
        .execute(&mut *conn)
        .await?;
        Ok(())
    }

    pub async fn delete_message(conn: &mut SqliteConnection, id: i64) -> Result<(), StoreError> {
        sqlx::query("DELETE FROM messages WHERE id = ?")
            .bind(id)
            .execute(&mut *conn)
            .await?;
        Ok(())
    }

    pub async fn content_key_exists(
        conn: &mut SqliteConnection,
        content_key: &str,
    ) -> Result<bool, StoreError> {
        Ok(sqlx::query("SELECT 1 FROM messages WHERE content_key = ?")
            .bind(content_key)
            .fetch_optional(&mut *conn)
            .await?
            .is_some())
    }

    /// The most recent final texts of a scope (for hiding stale or redundant drafts).
    pub async fn scope_texts(
        conn: &mut SqliteConnection,
        session_id: &str,
        scope: &str,
    ) -> Result<Vec<String>, StoreError> {
        let rows = sqlx::query(
            "SELECT text FROM messages WHERE session_id = ? AND scope = ? AND draft = 0 \
             AND kind IN ('assistant', 'notice') ORDER BY id DESC LIMIT 50",
        )
        .bind(session_id)
        .bind(scope)
        .fetch_all(&mut *conn)
        .await?;
        Ok(rows.iter().map(|r| r.get::<String, _>(0)).collect())
    }

    pub async fn get_message(
        conn: &mut SqliteConnection,
        id: i64,
    ) -> Result<Option<MessageRow>, StoreError> {
        let sql = format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ?");
        Ok(sqlx::query(&sql)
            .bind(id)
            .fetch_optional(&mut *conn)
            .await?
            .as_ref()
            .map(message_from_row))
    }

    pub async fn insert_event(
        conn: &mut SqliteConnection,
        session_id: &str,
        data: &str,
    ) -> Result<i64, StoreError> {
        let row = sqlx::query("INSERT INTO events (session_id, data) VALUES (?, ?) RETURNING id")
            .bind(session_id)
            .bind(data)
            .fetch_one(&mut *conn)
            .await?;
        Ok(row.get::<i64, _>(0))
    }

    pub async fn begin(conn: &mut SqliteConnection) -> Result<Tx<'_>, StoreError> {
        Ok(conn.begin().await?)
    }
}
