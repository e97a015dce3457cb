//! What the conversation loads on its own read-only connection: the state it starts (and
//! reloads) from, a session's rows for its in-memory index, a row to update. Reads only; the
//! writes are in [`super::writer`].

use super::{message_from_row, session_from_row, SessionRecord, StoreError, MESSAGE_COLUMNS};
use crate::model::MessageRow;
use sqlx::sqlite::SqliteConnection;
use sqlx::Row;

pub async fn sessions(conn: &mut SqliteConnection) -> Result<Vec<SessionRecord>, StoreError> {
    let rows = sqlx::query(
        "SELECT session_id, kind, is_call, call_id, title, created_at, ended_at, deleted_at FROM sessions",
    )
    .fetch_all(&mut *conn)
    .await?;
    Ok(rows.iter().map(session_from_row).collect())
}

/// Drafts left open by a previous run.
pub async fn open_drafts(conn: &mut SqliteConnection) -> Result<Vec<MessageRow>, StoreError> {
    let sql =
        format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE draft = 1 AND draft_key IS NOT NULL");
    let rows = sqlx::query(&sql).fetch_all(&mut *conn).await?;
    Ok(rows.iter().map(message_from_row).collect())
}

/// Every row of a session, oldest first, handed to `each` one at a time as they are read (for its
/// in-memory dedupe index): only the index grows with the session, never a copy of its rows.
pub async fn each_session_message(
    conn: &mut SqliteConnection,
    session_id: &str,
    mut each: impl FnMut(&MessageRow),
) -> Result<(), StoreError> {
    use futures_util::TryStreamExt;
    let sql = format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ? ORDER BY id");
    let mut rows = sqlx::query(&sql).bind(session_id).fetch(&mut *conn);
    while let Some(r) = rows.try_next().await? {
        each(&message_from_row(&r));
    }
    Ok(())
}

/// One row by id, as the writer's transaction sees it.
pub async fn message(
    conn: &mut SqliteConnection,
    id: i64,
) -> Result<Option<MessageRow>, StoreError> {
    let sql = format!("SELECT {MESSAGE_COLUMNS} FROM messages WHERE id = ?");
    let row = sqlx::query(&sql)
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?;
    Ok(row.as_ref().map(message_from_row))
}

/// The permission card of a request, if one is stored.
pub async fn permission(
    conn: &mut SqliteConnection,
    request_id: &str,
) -> Result<Option<MessageRow>, StoreError> {
    let sql = format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages WHERE permission IS NOT NULL \
         AND json_extract(permission, '$.request_id') = ? ORDER BY id DESC LIMIT 1"
    );
    let row = sqlx::query(&sql)
        .bind(request_id)
        .fetch_optional(&mut *conn)
        .await?;
    Ok(row.as_ref().map(message_from_row))
}

/// The next id to hand out (messages and events share one sequence): past every stored
/// row of both and past the floors recorded when rows were deleted, so an id is never reused.
pub async fn next_id(conn: &mut SqliteConnection) -> Result<i64, StoreError> {
    let row = sqlx::query(
        "SELECT max((SELECT COALESCE(MAX(id), 0) + 1 FROM messages), \
                    (SELECT COALESCE(MAX(id), 0) + 1 FROM events), \
                    COALESCE((SELECT MAX(next) FROM id_floors), 1))",
    )
    .fetch_one(&mut *conn)
    .await?;
    Ok(row.get(0))
}
