//! What the conversation loads on its own read-only connection: the state it starts (and
//! reloads) from, a session's keys and last rows for its in-memory index (and the dedupe
//! look-ups its filter calls for), a row to update. Reads only; the
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

/// Every stored dedupe key of a session, `message_id`s first, handed to `each` as they are read
/// (for the Bloom filter of its in-memory index): read from the dedupe indexes of migration
/// 0009 alone, not from the rows, and nothing of them kept.
pub async fn each_session_key(
    conn: &mut SqliteConnection,
    session_id: &str,
    mut each: impl FnMut(DedupeKey<'_>),
) -> Result<(), StoreError> {
    use futures_util::TryStreamExt;
    for (sql, id) in [
        (
            "SELECT message_id FROM messages WHERE session_id = ? AND message_id IS NOT NULL",
            true,
        ),
        (
            "SELECT content_key FROM messages WHERE session_id = ? AND content_key IS NOT NULL",
            false,
        ),
    ] {
        let mut rows = sqlx::query(sql).bind(session_id).fetch(&mut *conn);
        while let Some(r) = rows.try_next().await? {
            let key: &str = r.get(0);
            each(if id {
                DedupeKey::MessageId(key)
            } else {
                DedupeKey::Content(key)
            });
        }
    }
    Ok(())
}

/// A stored dedupe key.
#[derive(Debug, Clone, Copy)]
pub enum DedupeKey<'a> {
    MessageId(&'a str),
    Content(&'a str),
}

/// The last `limit` rows of a session in its order, oldest first (the exact window of its index).
pub async fn recent_session_messages(
    conn: &mut SqliteConnection,
    session_id: &str,
    limit: usize,
) -> Result<Vec<MessageRow>, StoreError> {
    let sql = format!(
        "SELECT {MESSAGE_COLUMNS} FROM messages WHERE session_id = ? \
         ORDER BY sort_key DESC, id DESC LIMIT ?"
    );
    let rows = sqlx::query(&sql)
        .bind(session_id)
        .bind(limit as i64)
        .fetch_all(&mut *conn)
        .await?;
    Ok(rows.iter().rev().map(message_from_row).collect())
}

/// A committed row of the session has this key (an indexed point look-up).
pub async fn has_key(
    conn: &mut SqliteConnection,
    session_id: &str,
    key: DedupeKey<'_>,
) -> Result<bool, StoreError> {
    let (sql, k) = match key {
        DedupeKey::MessageId(k) => (HAS_MESSAGE_ID, k),
        DedupeKey::Content(k) => (HAS_CONTENT_KEY, k),
    };
    let row = sqlx::query(sql)
        .bind(session_id)
        .bind(k)
        .fetch_optional(&mut *conn)
        .await?;
    Ok(row.is_some())
}

pub(crate) const HAS_MESSAGE_ID: &str =
    "SELECT 1 FROM messages WHERE session_id = ? AND message_id = ? LIMIT 1";
pub(crate) const HAS_CONTENT_KEY: &str =
    "SELECT 1 FROM messages WHERE session_id = ? AND content_key = ? LIMIT 1";

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

#[cfg(test)]
mod tests {
    use super::*;

    /// The dedupe look-ups and the key scans of a session read an index, never the table.
    #[tokio::test]
    async fn dedupe_lookups_and_key_scans_use_their_indexes() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _writer) =
            crate::store::Store::open(&dir.path().join("t.db"), Default::default())
                .await
                .unwrap();
        let mut conn = store.connect_reader().await.unwrap();
        let plans = [
            (HAS_MESSAGE_ID, "messages_dedupe_id"),
            (HAS_CONTENT_KEY, "messages_dedupe_content"),
            (
                "SELECT message_id FROM messages WHERE session_id = ? AND message_id IS NOT NULL",
                "messages_dedupe_id",
            ),
            (
                "SELECT content_key FROM messages WHERE session_id = ? AND content_key IS NOT NULL",
                "messages_dedupe_content",
            ),
        ];
        for (sql, index) in plans {
            let rows = sqlx::query(&format!("EXPLAIN QUERY PLAN {sql}"))
                .bind("s")
                .bind("k")
                .fetch_all(&mut conn)
                .await
                .unwrap();
            let detail: Vec<String> = rows.iter().map(|r| r.get::<String, _>(3)).collect();
            assert!(
                detail
                    .iter()
                    .any(|d| d.contains(&format!("USING COVERING INDEX {index}"))),
                "{sql}: {detail:?}"
            );
        }
        assert!(!has_key(&mut conn, "s", DedupeKey::MessageId("m1"))
            .await
            .unwrap());
    }
}
