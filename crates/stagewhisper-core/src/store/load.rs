//! What the conversation loads on its own read-only connection: the state it starts (and
//! reloads) from, a session's keys and recent finals for its in-memory index, a row to update. Reads only; the
//! writes are in [`super::writer`].

use super::{row, session_from_row, SessionRecord, StoreError};
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
    let cols = row::select(None);
    let sql = format!("SELECT {cols} FROM messages WHERE draft = 1 AND draft_key IS NOT NULL");
    let rows = sqlx::query_as::<_, MessageRow>(&sql)
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows)
}

/// The dedupe keys (`message_id`, `content_key`) of every row of a session, handed to `each` one
/// row at a time: only these two columns, so a load never holds the session's texts (for its
/// in-memory dedupe index). Read in chunks of [`KEY_CHUNK`] rows along the session's order index
/// (a stream over the whole session left the process tens of MiB larger for a 100,000-message
/// chat, though the keys themselves take about 3 MiB).
pub async fn each_session_key(
    conn: &mut SqliteConnection,
    session_id: &str,
    mut each: impl FnMut(Option<&str>, Option<&str>),
) -> Result<(), StoreError> {
    let mut after = (i64::MIN, i64::MIN);
    loop {
        let rows = sqlx::query(
            "SELECT message_id, content_key, sort_key, id FROM messages WHERE session_id = ? \
             AND (sort_key, id) > (?, ?) ORDER BY sort_key, id LIMIT ?",
        )
        .bind(session_id)
        .bind(after.0)
        .bind(after.1)
        .bind(KEY_CHUNK)
        .fetch_all(&mut *conn)
        .await?;
        for r in &rows {
            each(r.get(0), r.get(1));
        }
        match rows.last() {
            Some(last) if rows.len() as i64 == KEY_CHUNK => after = (last.get(2), last.get(3)),
            _ => return Ok(()),
        }
    }
}

/// Rows a key load reads at a time.
const KEY_CHUNK: i64 = 4096;

/// The newest `limit` final rows of a session (assistant and notice texts of a scope, not
/// drafts), in the session's order: read backwards along its order index, so only those rows.
pub async fn recent_finals(
    conn: &mut SqliteConnection,
    session_id: &str,
    limit: i64,
) -> Result<Vec<MessageRow>, StoreError> {
    let cols = row::select(None);
    let sql = format!(
        "SELECT {cols} FROM messages WHERE session_id = ? AND draft = 0 \
         AND kind IN ('assistant', 'notice') AND scope IS NOT NULL \
         ORDER BY sort_key DESC, id DESC LIMIT ?"
    );
    let rows = sqlx::query_as::<_, MessageRow>(&sql)
        .bind(session_id)
        .bind(limit)
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows.into_iter().rev().collect())
}

/// One row by id, as the writer's transaction sees it.
pub async fn message(
    conn: &mut SqliteConnection,
    id: i64,
) -> Result<Option<MessageRow>, StoreError> {
    let cols = row::select(None);
    let sql = format!("SELECT {cols} FROM messages WHERE id = ?");
    let row = sqlx::query_as::<_, MessageRow>(&sql)
        .bind(id)
        .fetch_optional(&mut *conn)
        .await?;
    Ok(row)
}

/// The permission card of a request, if one is stored.
pub async fn permission(
    conn: &mut SqliteConnection,
    request_id: &str,
) -> Result<Option<MessageRow>, StoreError> {
    let cols = row::select(None);
    let sql = format!(
        "SELECT {cols} FROM messages WHERE permission IS NOT NULL \
         AND json_extract(permission, '$.request_id') = ? ORDER BY id DESC LIMIT 1"
    );
    let row = sqlx::query_as::<_, MessageRow>(&sql)
        .bind(request_id)
        .fetch_optional(&mut *conn)
        .await?;
    Ok(row)
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

/// The transcript rows of a call's `insights:<call>` session (for a change of speakers).
pub async fn transcript_rows(
    conn: &mut SqliteConnection,
    session_id: &str,
) -> Result<Vec<MessageRow>, StoreError> {
    let cols = row::select(None);
    let sql = format!("SELECT {cols} FROM messages WHERE session_id = ? AND kind = 'transcript'");
    let rows = sqlx::query_as::<_, MessageRow>(&sql)
        .bind(session_id)
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows)
}
