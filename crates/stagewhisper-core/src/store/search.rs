//! The reads behind search, paging and export: the full-text index (`messages_fts`, migration
//! 0006) and the rows it does not have yet (migration 0009), one page of a session's messages,
//! and a read-only open of the database for the export command (no migrations, no writer).
//!
//! The writer adds rows to the index in batches (`writer.rs`, `index_batch`); every row people
//! read with an id up to `search_indexed.upto` is in it. A search reads, in one read
//! transaction, the rows above `upto` through a small index of its own (an FTS5 table in the
//! connection's memory, with the same tokenizer, filled from those rows and emptied again), then
//! the main index: so a message is found as soon as its commit is acknowledged, whether the
//! batch has reached it or not. The rows above `upto` are the newest, so they come first.

use super::{row, Durability, Store, StoreError, READ_CACHE_KIB};
use crate::model::MessageRow;
use sqlx::sqlite::SqlitePoolOptions;
use sqlx::Row;
use std::path::Path;

/// One stored row that matches a search.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchRow {
    pub id: i64,
    /// The row's own session (a chat, or `insights:<chat>`).
    pub session_id: String,
    pub kind: String,
    pub received_at: String,
    pub occurred_at: Option<String>,
    pub sort_key: i64,
    /// The chat session's title and start (the call's, for an insight or a transcript turn).
    pub title: Option<String>,
    pub is_call: bool,
    pub created_at: String,
    /// The matched text around the hits, hits between [`HIT_OPEN`] and [`HIT_CLOSE`].
    pub snippet: String,
}

/// Marks the start of a hit in [`SearchRow::snippet`] (a control character no text is shown with).
pub const HIT_OPEN: char = '\u{2}';
/// Marks the end of a hit.
pub const HIT_CLOSE: char = '\u{3}';

impl Store {
    /// Opens an existing database read-only: no migrations, no writer, no checkpoints (the
    /// export command reads a data dir, whether the app runs on it or not).
    pub async fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        let read = SqlitePoolOptions::new()
            .max_connections(1)
            .connect_with(
                super::base_options(path)
                    .read_only(true)
                    .pragma("cache_size", READ_CACHE_KIB)
                    .pragma("temp_store", "memory"),
            )
            .await?;
        Ok(Store {
            read,
            path: path.to_path_buf(),
            checkpoint: Default::default(),
            durability: Durability::default(),
            // No writer: a write is answered at once, "the writer stopped".
            side: std::sync::Arc::new(super::side::SideQueue::closed()),
        })
    }

    /// Newest first: the rows of live sessions matching `fts_query` (an FTS5 query the caller
    /// built from quoted terms), at most `limit`. A user message sent to an insights session is
    /// not an insight and stays out.
    pub async fn search(&self, fts_query: &str, limit: i64) -> Result<Vec<SearchRow>, StoreError> {
        self.search_in(fts_query, limit, false).await
    }

    /// [`Store::search`] without the sessions marked private (what the MCP tools may show).
    pub async fn search_shared(
        &self,
        fts_query: &str,
        limit: i64,
    ) -> Result<Vec<SearchRow>, StoreError> {
        self.search_in(fts_query, limit, true).await
    }

    async fn search_in(
        &self,
        fts_query: &str,
        limit: i64,
        shared: bool,
    ) -> Result<Vec<SearchRow>, StoreError> {
        let open = HIT_OPEN.to_string();
        let close = HIT_CLOSE.to_string();
        // One snapshot for `upto`, the rows above it and the index.
        let mut tx = self.read.begin().await?;
        let upto: i64 = sqlx::query_scalar("SELECT upto FROM search_indexed")
            .fetch_one(&mut *tx)
            .await?;
        let tail: bool = sqlx::query_scalar(&format!(
            "SELECT EXISTS (SELECT 1 FROM messages WHERE id > ? AND {INDEXED_ROWS})"
        ))
        .bind(upto)
        .fetch_one(&mut *tx)
        .await?;
        let mut rows = Vec::new();
        if tail {
            sqlx::query(
                "CREATE VIRTUAL TABLE IF NOT EXISTS temp.search_tail USING fts5(text, \
                 tokenize = 'unicode61 remove_diacritics 2')",
            )
            .execute(&mut *tx)
            .await?;
            sqlx::query("DELETE FROM temp.search_tail")
                .execute(&mut *tx)
                .await?;
            sqlx::query(&format!(
                "INSERT INTO temp.search_tail (rowid, text) SELECT id, text FROM main.messages \
                 WHERE id > ? AND {INDEXED_ROWS}"
            ))
            .bind(upto)
            .execute(&mut *tx)
            .await?;
            rows = sqlx::query(&search_sql("temp.search_tail", "search_tail", shared))
                .bind(&open)
                .bind(&close)
                .bind(fts_query)
                .bind(limit)
                .fetch_all(&mut *tx)
                .await?;
            // The memory goes back at once (a long tail after a restart, say).
            sqlx::query("DROP TABLE temp.search_tail")
                .execute(&mut *tx)
                .await?;
        }
        let left = limit - rows.len() as i64;
        if left > 0 {
            rows.extend(
                sqlx::query(&search_sql("messages_fts", "messages_fts", shared))
                    .bind(&open)
                    .bind(&close)
                    .bind(fts_query)
                    .bind(left)
                    .fetch_all(&mut *tx)
                    .await?,
            );
        }
        tx.commit().await?;
        Ok(rows
            .iter()
            .map(|r| SearchRow {
                id: r.get(0),
                session_id: r.get(1),
                kind: r.get(2),
                received_at: r.get(3),
                occurred_at: r.get(4),
                sort_key: r.get(5),
                title: r.get(6),
                is_call: r.get::<i64, _>(7) != 0,
                created_at: r.get(8),
                snippet: r.get(9),
            })
            .collect())
    }

    /// The rows of a session that `list` shows before `before` (a `(sort_key, id)` position,
    /// exclusive; `None`: from the newest), newest first, at most `limit`. The session's order
    /// index is read backwards from the position, so a page costs its own rows (and the rows of
    /// other lists it passes), not the session's history.
    pub async fn messages_before(
        &self,
        session_id: &str,
        list: RowList,
        before: Option<(i64, i64)>,
        limit: i64,
    ) -> Result<Vec<MessageRow>, StoreError> {
        let (sort_key, id) = before.unwrap_or((i64::MAX, i64::MAX));
        let cols = row::select(None);
        let sql = format!(
            "SELECT {cols} FROM messages WHERE session_id = ? AND {} \
             AND (sort_key, id) < (?, ?) ORDER BY sort_key DESC, id DESC LIMIT ?",
            list.condition()
        );
        let rows = sqlx::query_as::<_, MessageRow>(&sql)
            .bind(session_id)
            .bind(sort_key)
            .bind(id)
            .bind(limit)
            .fetch_all(&self.read)
            .await?;
        Ok(rows)
    }

    /// The `(sort_key, id)` position of a row of `session_id`, if it is one of the rows `list`
    /// shows.
    pub async fn position(
        &self,
        session_id: &str,
        list: RowList,
        id: i64,
    ) -> Result<Option<(i64, i64)>, StoreError> {
        let sql = format!(
            "SELECT sort_key, id FROM messages WHERE id = ? AND session_id = ? AND {}",
            list.condition()
        );
        let row = sqlx::query(&sql)
            .bind(id)
            .bind(session_id)
            .fetch_optional(&self.read)
            .await?;
        Ok(row.map(|r| (r.get(0), r.get(1))))
    }
}

/// The rows the search index holds (the condition of migration 0011's triggers): a message
/// with a purpose (a summary request, which carries the transcript) is left out.
const INDEXED_ROWS: &str =
    "kind IN ('user', 'assistant', 'transcript') AND draft = 0 AND hidden = 0 AND purpose IS NULL";

/// A search over one FTS5 table (`table` as named in FROM, `name` as the MATCH and `snippet()`
/// name it), newest first; `shared`: without private sessions. Binds: hit open, hit close, the
/// query, the limit.
fn search_sql(table: &str, name: &str, shared: bool) -> String {
    let private = if shared { "AND s.private = 0" } else { "" };
    format!(
        "SELECT m.id, m.session_id, m.kind, m.received_at, m.occurred_at, m.sort_key, \
                s.title, s.is_call, s.created_at, \
                snippet({name}, 0, ?, ?, '…', 16) \
         FROM {table} f \
         JOIN main.messages m ON m.id = f.rowid \
         JOIN main.sessions s ON s.session_id = \
             CASE WHEN m.session_id LIKE 'insights:%' THEN substr(m.session_id, 10) \
                  ELSE m.session_id END \
         WHERE {name} MATCH ? AND s.deleted_at IS NULL AND s.kind = 'chat' \
           AND NOT (m.session_id LIKE 'insights:%' AND m.kind = 'user') {private} \
         ORDER BY f.rowid DESC LIMIT ?"
    )
}

/// Which of a session's rows a paged list shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RowList {
    /// A chat's messages: every row not hidden.
    Shown,
    /// A call's insights (rows of its `insights:` session): not hidden, not a transcript turn
    /// or the user's own message.
    Insights,
    /// A call's transcript turns (rows of its `insights:` session).
    Transcript,
}

impl RowList {
    fn condition(self) -> &'static str {
        match self {
            RowList::Shown => "hidden = 0",
            RowList::Insights => "hidden = 0 AND kind NOT IN ('user', 'transcript')",
            RowList::Transcript => "kind = 'transcript'",
        }
    }
}

#[cfg(test)]
mod tests {
    //! The index on a real SQLite file: migration 0006 indexes an existing database, and the
    //! triggers keep it equal to the rows it covers through the writer's own ops.
    use super::super::commit::{commit, index_batch};
    use super::super::{Durability, Op, RawConn, SessionRecord};
    use super::*;
    use crate::model::MessageKind;
    use sqlx::Connection;

    fn row(id: i64, session: &str, kind: MessageKind, text: &str) -> MessageRow {
        MessageRow {
            message_id: Some(format!("m{id}")),
            ..MessageRow::new(
                id,
                session,
                kind,
                text.into(),
                "2026-11-29T12:00:00Z".into(),
                id,
            )
        }
    }

    async fn ids(store: &Store, q: &str) -> Vec<i64> {
        let mut v: Vec<i64> = store
            .search(q, 100)
            .await
            .unwrap()
            .iter()
            .map(|r| r.id)
            .collect();
        v.sort_unstable();
        v
    }

    #[tokio::test]
    async fn the_migration_indexes_old_rows_and_the_writer_keeps_the_index() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let mut conn = crate::store::migrated_before(dir.path(), &path, "0006").await;
        sqlx::raw_sql(
            "INSERT INTO sessions (session_id, kind, is_call, title, created_at) VALUES \
               ('c', 'chat', 1, 'old call', '2026-11-29T12:00:00Z'), \
               ('insights:c', 'insights', 0, NULL, '2026-11-29T12:00:00Z'); \
             INSERT INTO messages (id, session_id, kind, text, received_at, sort_key, draft, hidden) VALUES \
               (1, 'c', 'assistant', 'an old walrus reply', '2026-11-29T12:00:00Z', 1, 0, 0), \
               (2, 'c', 'assistant', 'a walrus draft', '2026-11-29T12:00:00Z', 2, 1, 0), \
               (3, 'c', 'notice', 'walrus notice', '2026-11-29T12:00:00Z', 3, 0, 0), \
               (4, 'c', 'user', 'hidden walrus', '2026-11-29T12:00:00Z', 4, 0, 1), \
               (5, 'insights:c', 'transcript', 'walrus said aloud', '2026-11-29T12:00:00Z', 5, 0, 0), \
               (6, 'insights:c', 'user', 'walrus prompt', '2026-11-29T12:00:00Z', 6, 0, 0);",
        )
        .execute(&mut conn)
        .await
        .unwrap();
        conn.close().await.unwrap();

        let (store, mut writer) = Store::open(&path, Durability::Crash).await.unwrap();
        // Final, shown user/assistant/transcript rows only; not a user prompt to insights.
        assert_eq!(ids(&store, "\"walrus\"").await, [1, 5]);
        let hits = store.search("\"walrus\"", 10).await.unwrap();
        assert_eq!(hits[0].title.as_deref(), Some("old call"));
        assert!(hits[0]
            .snippet
            .contains(&format!("{HIT_OPEN}walrus{HIT_CLOSE}")));

        let mut locked = writer.lock_handle().await.unwrap();
        // SAFETY: the connection is locked for the whole use of `db` and used by nothing else.
        let mut db = unsafe { RawConn::new(locked.as_raw_handle()) };
        let mut draft = row(7, "c", MessageKind::Assistant, "a streaming narwhal");
        draft.draft = true;
        let ops = [
            Op::InsertSession(SessionRecord {
                session_id: "d".into(),
                kind: "chat".into(),
                is_call: false,
                call_id: None,
                title: None,
                created_at: "2026-11-29T12:00:00Z".into(),
                ended_at: None,
                deleted_at: None,
            }),
            Op::InsertMessage {
                row: row(8, "d", MessageKind::User, "narwhal and walrus"),
                logged: false,
            },
            Op::InsertMessage {
                row: draft.clone(),
                logged: false,
            },
        ];
        commit(&mut db, &ops.iter().collect::<Vec<_>>()).unwrap();
        assert_eq!(
            ids(&store, "\"narwhal\"").await,
            [8],
            "a draft is not indexed"
        );
        // The draft settles with other text: indexed as it ends up.
        let settled = MessageRow {
            draft: false,
            text: "the final narwhal answer".into(),
            ..draft
        };
        commit(&mut db, &[&Op::UpdateMessage(settled.clone())]).unwrap();
        assert_eq!(ids(&store, "\"narwhal\"").await, [7, 8]);
        assert_eq!(ids(&store, "\"streaming\"").await, Vec::<i64>::new());
        // A delivery update rewrites the row without changing what is indexed.
        let delivered = MessageRow {
            delivery: Some("sent".into()),
            ..row(8, "d", MessageKind::User, "narwhal and walrus")
        };
        commit(&mut db, &[&Op::UpdateMessage(delivered)]).unwrap();
        assert_eq!(ids(&store, "\"walrus\"").await, [1, 5, 8]);
        commit(&mut db, &[&Op::DeleteMessage(7)]).unwrap();
        assert_eq!(ids(&store, "\"narwhal\"").await, [8]);
        commit(
            &mut db,
            &[&Op::DeleteSessions {
                ids: vec!["c".into(), "insights:c".into()],
                at: "2026-11-29T13:00:00Z".into(),
                events_before: 1_000,
            }],
        )
        .unwrap();
        assert_eq!(ids(&store, "\"walrus\"").await, [8]);
        // Nothing is left in the index that has no row (an external-content index cannot
        // tell by itself): every indexed rowid is a row.
        drop(db);
        drop(locked);
        let orphans: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM messages_fts f WHERE messages_fts MATCH '\"walrus\" OR \"narwhal\"' \
             AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = f.rowid)",
        )
        .fetch_one(&mut writer)
        .await
        .unwrap();
        assert_eq!(orphans, 0);
    }

    /// What the index itself holds (not the rows above `upto`, which a search reads directly):
    /// `upto` and the rowids it has documents for.
    async fn in_index(conn: &mut sqlx::SqliteConnection) -> (i64, Vec<i64>) {
        let upto = sqlx::query_scalar("SELECT upto FROM search_indexed")
            .fetch_one(&mut *conn)
            .await
            .unwrap();
        let ids = sqlx::query_scalar("SELECT id FROM messages_fts_docsize ORDER BY id")
            .fetch_all(&mut *conn)
            .await
            .unwrap();
        (upto, ids)
    }

    #[tokio::test]
    async fn rows_are_found_before_and_after_the_batch_that_indexes_them() {
        let dir = tempfile::tempdir().unwrap();
        let (store, mut writer) = Store::open(&dir.path().join("t.db"), Durability::Crash)
            .await
            .unwrap();
        let mut reader = store.connect_reader().await.unwrap();
        let mut locked = writer.lock_handle().await.unwrap();
        // SAFETY: the connection is locked for the whole use of `db` and used by nothing else.
        let mut db = unsafe { RawConn::new(locked.as_raw_handle()) };
        let session = |id: &str| {
            Op::InsertSession(SessionRecord {
                session_id: id.into(),
                kind: "chat".into(),
                is_call: false,
                call_id: None,
                title: None,
                created_at: "2026-11-29T12:00:00Z".into(),
                ended_at: None,
                deleted_at: None,
            })
        };
        let mut draft = row(4, "a", MessageKind::Assistant, "a quokka draft");
        draft.draft = true;
        let mut hidden = row(5, "a", MessageKind::Assistant, "a hidden quokka");
        hidden.hidden = true;
        let insert = |row| Op::InsertMessage { row, logged: false };
        let ops = [
            session("a"),
            session("b"),
            insert(row(1, "a", MessageKind::User, "quokka one")),
            insert(row(2, "a", MessageKind::Notice, "a quokka notice")),
            insert(row(3, "b", MessageKind::Assistant, "quokka three")),
            insert(draft.clone()),
            insert(hidden),
            insert(row(6, "b", MessageKind::Transcript, "quokka said aloud")),
        ];
        commit(&mut db, &ops.iter().collect::<Vec<_>>()).unwrap();
        // Not indexed yet: found all the same (read directly), newest first.
        assert_eq!(in_index(&mut reader).await, (0, vec![]));
        let newest_first = |v: Vec<SearchRow>| v.iter().map(|r| r.id).collect::<Vec<_>>();
        let found = store.search("\"quokka\"", 10).await.unwrap();
        assert_eq!(newest_first(found.clone()), [6, 3, 1]);
        assert!(found[0]
            .snippet
            .contains(&format!("{HIT_OPEN}quokka{HIT_CLOSE}")));
        // Two batches of at most 4 rows: the rows people read, and `upto` past every row.
        assert_eq!(index_batch(&mut db, 4).unwrap(), 4);
        assert_eq!(in_index(&mut reader).await, (4, vec![1, 3]));
        assert_eq!(
            newest_first(store.search("\"quokka\"", 10).await.unwrap()),
            [6, 3, 1]
        );
        assert_eq!(index_batch(&mut db, 4).unwrap(), 2);
        assert_eq!(index_batch(&mut db, 4).unwrap(), 0);
        assert_eq!(in_index(&mut reader).await, (6, vec![1, 3, 6]));
        // The same answers from the index alone, snippets included.
        assert_eq!(store.search("\"quokka\"", 10).await.unwrap(), found);
        assert_eq!(
            newest_first(store.search("\"quokka\"", 2).await.unwrap()),
            [6, 3]
        );

        // A draft below `upto` that settles is indexed in the same commit; one above it waits
        // for the batch like any row.
        let settled = MessageRow {
            draft: false,
            text: "the settled quokka".into(),
            ..draft
        };
        let mut late = row(7, "a", MessageKind::Assistant, "a late quokka draft");
        late.draft = true;
        commit(
            &mut db,
            &[&Op::UpdateMessage(settled), &insert(late.clone())],
        )
        .unwrap();
        assert_eq!(in_index(&mut reader).await, (6, vec![1, 3, 4, 6]));
        let late = MessageRow {
            draft: false,
            ..late
        };
        commit(&mut db, &[&Op::UpdateMessage(late)]).unwrap();
        assert_eq!(in_index(&mut reader).await, (6, vec![1, 3, 4, 6]));
        assert_eq!(
            newest_first(store.search("\"quokka\"", 10).await.unwrap()),
            [7, 6, 4, 3, 1]
        );
        index_batch(&mut db, 100).unwrap();
        assert_eq!(in_index(&mut reader).await, (7, vec![1, 3, 4, 6, 7]));

        // Deleting a session takes its indexed rows out of the index, and rows above `upto`
        // simply go.
        commit(
            &mut db,
            &[&insert(row(8, "b", MessageKind::User, "quokka eight"))],
        )
        .unwrap();
        commit(
            &mut db,
            &[&Op::DeleteSessions {
                ids: vec!["b".into()],
                at: "2026-11-29T13:00:00Z".into(),
                events_before: 1_000,
            }],
        )
        .unwrap();
        assert_eq!(in_index(&mut reader).await, (7, vec![1, 4, 7]));
        assert_eq!(
            newest_first(store.search("\"quokka\"", 10).await.unwrap()),
            [7, 4, 1]
        );
        index_batch(&mut db, 100).unwrap();
        assert_eq!(in_index(&mut reader).await, (7, vec![1, 4, 7]));
        drop(db);
        drop(locked);
    }

    #[tokio::test]
    async fn pages_walk_back_by_position() {
        let dir = tempfile::tempdir().unwrap();
        let (store, mut writer) = Store::open(&dir.path().join("t.db"), Durability::Crash)
            .await
            .unwrap();
        let mut locked = writer.lock_handle().await.unwrap();
        // SAFETY: as above.
        let mut db = unsafe { RawConn::new(locked.as_raw_handle()) };
        // Sort keys out of id order, a hidden row, a row of another session.
        let mut ops = Vec::new();
        for (id, sort_key) in [(1, 10), (2, 30), (3, 20), (4, 40), (5, 50)] {
            let mut r = row(id, "s", MessageKind::Assistant, "x");
            r.sort_key = sort_key;
            r.hidden = id == 4;
            ops.push(Op::InsertMessage {
                row: r,
                logged: false,
            });
        }
        // A transcript turn and a user message (as in an insights session).
        for (id, sort_key, kind) in [(7, 25, MessageKind::Transcript), (8, 35, MessageKind::User)] {
            let mut r = row(id, "s", kind, "x");
            r.sort_key = sort_key;
            ops.push(Op::InsertMessage {
                row: r,
                logged: false,
            });
        }
        ops.push(Op::InsertMessage {
            row: row(6, "t", MessageKind::Assistant, "x"),
            logged: false,
        });
        commit(&mut db, &ops.iter().collect::<Vec<_>>()).unwrap();
        let page = |list, before, limit| {
            let store = store.clone();
            async move {
                store
                    .messages_before("s", list, before, limit)
                    .await
                    .unwrap()
                    .iter()
                    .map(|r| r.id)
                    .collect::<Vec<i64>>()
            }
        };
        assert_eq!(page(RowList::Shown, None, 2).await, [5, 8]);
        let at = store.position("s", RowList::Shown, 2).await.unwrap();
        assert_eq!(at, Some((30, 2)));
        assert_eq!(page(RowList::Shown, at, 10).await, [7, 3, 1]);
        assert_eq!(store.position("s", RowList::Shown, 6).await.unwrap(), None);
        // The insights and the transcript of a call, each its own list of the same rows.
        assert_eq!(page(RowList::Insights, None, 10).await, [5, 2, 3, 1]);
        assert_eq!(page(RowList::Insights, at, 1).await, [3]);
        assert_eq!(page(RowList::Transcript, None, 10).await, [7]);
        let turn = store.position("s", RowList::Transcript, 7).await.unwrap();
        assert_eq!(turn, Some((25, 7)));
        assert_eq!(page(RowList::Transcript, turn, 10).await, Vec::<i64>::new());
        for (list, id) in [
            (RowList::Insights, 7),
            (RowList::Insights, 8),
            (RowList::Transcript, 2),
        ] {
            assert_eq!(
                store.position("s", list, id).await.unwrap(),
                None,
                "{list:?} {id}"
            );
        }
        drop(db);
        drop(locked);
    }

    #[tokio::test]
    async fn a_key_load_reads_every_row_once_across_its_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let (store, mut writer) = Store::open(&dir.path().join("t.db"), Durability::Crash)
            .await
            .unwrap();
        let mut locked = writer.lock_handle().await.unwrap();
        // SAFETY: as above.
        let mut db = unsafe { RawConn::new(locked.as_raw_handle()) };
        // Three chunks' worth, with sort keys shared by neighbours (ties across chunk ends),
        // and rows of another session in between.
        let mut ops = Vec::new();
        for id in 1..=10_000 {
            let mut r = row(
                id,
                if id % 7 == 0 { "t" } else { "s" },
                MessageKind::Assistant,
                "x",
            );
            r.sort_key = id / 3;
            r.content_key = Some(format!("c{id}"));
            ops.push(Op::InsertMessage {
                row: r,
                logged: false,
            });
        }
        commit(&mut db, &ops.iter().collect::<Vec<_>>()).unwrap();
        drop(db);
        drop(locked);
        let mut reader = store.connect_reader().await.unwrap();
        let mut seen = Vec::new();
        super::super::load::each_session_key(&mut reader, "s", |m, c| {
            seen.push((m.unwrap().to_string(), c.unwrap().to_string()));
        })
        .await
        .unwrap();
        let want: Vec<(String, String)> = (1..=10_000)
            .filter(|id| id % 7 != 0)
            .map(|id| (format!("m{id}"), format!("c{id}")))
            .collect();
        assert_eq!(seen, want);
    }
}
