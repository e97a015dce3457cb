//! The `messages` row, described once: [`COLUMNS`] names every column, how a
//! [`MessageRow`] binds it and whether a rewrite of the row ([`super::Op::UpdateMessage`])
//! changes it. The writer's multi-row inserts and its update are built from it, every read
//! selects its columns ([`select`]) and decodes them by name (`FromRow`).
//!
//! A new column: its migration, its field in [`MessageRow`] (and [`MessageRow::new`]'s
//! default), one line in [`COLUMNS`] and one in the decoder below it.

use super::Param;
use crate::model::{MessageKind, MessageRow};
use sqlx::sqlite::SqliteRow;
use sqlx::{FromRow, Row};
use std::sync::OnceLock;

/// What one row binds: the row, whether it is its own `message_added` event, and its
/// permission card as its column holds it (JSON).
pub struct Bind<'a> {
    pub row: &'a MessageRow,
    pub logged: bool,
    pub card: Option<&'a str>,
}

/// Who writes a column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Set when the row is inserted, never changed.
    Once,
    /// Also rewritten in place (a draft's text, settling, delivery).
    Rewritten,
    /// Set when the row is inserted and not part of a [`MessageRow`] (nothing reads it back).
    InsertOnly,
}

/// One column of `messages`.
pub struct Column {
    pub name: &'static str,
    pub written: Written,
    pub bind: for<'a> fn(&Bind<'a>) -> Param<'a>,
}

const fn col(
    name: &'static str,
    written: Written,
    bind: for<'a> fn(&Bind<'a>) -> Param<'a>,
) -> Column {
    Column {
        name,
        written,
        bind,
    }
}

use Written::{InsertOnly, Once, Rewritten};

/// Every column of `messages` the app writes or reads.
pub static COLUMNS: &[Column] = &[
    col("id", Once, |b| b.row.id.into()),
    col("session_id", Once, |b| (&b.row.session_id).into()),
    col("kind", Once, |b| b.row.kind.as_str().into()),
    col("text", Rewritten, |b| (&b.row.text).into()),
    col("message_id", Rewritten, |b| (&b.row.message_id).into()),
    col("task_id", Rewritten, |b| (&b.row.task_id).into()),
    col("user_message_id", Once, |b| (&b.row.user_message_id).into()),
    col("scope", Once, |b| (&b.row.scope).into()),
    col("error_code", Once, |b| (&b.row.error_code).into()),
    col("occurred_at", Rewritten, |b| (&b.row.occurred_at).into()),
    col("received_at", Once, |b| (&b.row.received_at).into()),
    col("sort_key", Once, |b| b.row.sort_key.into()),
    col("draft", Rewritten, |b| b.row.draft.into()),
    col("hidden", Rewritten, |b| b.row.hidden.into()),
    col("content_key", Rewritten, |b| (&b.row.content_key).into()),
    col("draft_key", Rewritten, |b| (&b.row.draft_key).into()),
    col("speaker", Rewritten, |b| (&b.row.speaker).into()),
    col("delivery", Rewritten, |b| (&b.row.delivery).into()),
    col("delivery_error", Rewritten, |b| {
        (&b.row.delivery_error).into()
    }),
    col("permission", Rewritten, |b| {
        b.card.map_or(Param::Null, Param::Text)
    }),
    col("purpose", Once, |b| (&b.row.purpose).into()),
    col("edited_at", Rewritten, |b| (&b.row.edited_at).into()),
    col("language", Rewritten, |b| (&b.row.language).into()),
    col("logged", InsertOnly, |b| b.logged.into()),
];

impl<'r> FromRow<'r, SqliteRow> for MessageRow {
    /// A row by its columns' names (whatever else the query selects beside them).
    fn from_row(r: &'r SqliteRow) -> Result<Self, sqlx::Error> {
        Ok(MessageRow {
            id: r.try_get("id")?,
            session_id: r.try_get("session_id")?,
            kind: MessageKind::parse(r.try_get("kind")?),
            text: r.try_get("text")?,
            message_id: r.try_get("message_id")?,
            task_id: r.try_get("task_id")?,
            user_message_id: r.try_get("user_message_id")?,
            scope: r.try_get("scope")?,
            error_code: r.try_get("error_code")?,
            occurred_at: r.try_get("occurred_at")?,
            received_at: r.try_get("received_at")?,
            sort_key: r.try_get("sort_key")?,
            draft: r.try_get("draft")?,
            hidden: r.try_get("hidden")?,
            content_key: r.try_get("content_key")?,
            draft_key: r.try_get("draft_key")?,
            speaker: r.try_get("speaker")?,
            delivery: r.try_get("delivery")?,
            delivery_error: r.try_get("delivery_error")?,
            permission: r
                .try_get::<Option<&str>, _>("permission")?
                .and_then(|p| serde_json::from_str(p).ok())
                .map(Box::new),
            purpose: r.try_get("purpose")?,
            edited_at: r.try_get("edited_at")?,
            language: r.try_get("language")?,
        })
    }
}

/// The columns a [`MessageRow`] is read from, for a `SELECT` (`m.id, m.session_id, …` with
/// `alias` `m`; built once per alias).
pub fn select(alias: Option<&'static str>) -> &'static str {
    static PLAIN: OnceLock<String> = OnceLock::new();
    static M: OnceLock<String> = OnceLock::new();
    let (cell, prefix) = match alias {
        None => (&PLAIN, String::new()),
        Some("m") => (&M, "m.".to_string()),
        Some(other) => unreachable!("no select list for alias {other}"),
    };
    cell.get_or_init(|| {
        COLUMNS
            .iter()
            .filter(|c| c.written != InsertOnly)
            .map(|c| format!("{prefix}{}", c.name))
            .collect::<Vec<_>>()
            .join(", ")
    })
}

/// The head of the multi-row insert (`INSERT OR ROLLBACK INTO messages (…) VALUES `) and its
/// columns per row.
pub fn insert_head() -> (String, usize) {
    let names: Vec<&str> = COLUMNS.iter().map(|c| c.name).collect();
    (
        format!(
            "INSERT OR ROLLBACK INTO messages ({}) VALUES ",
            names.join(", ")
        ),
        names.len(),
    )
}

/// Binds one row for the insert, in [`COLUMNS`] order.
pub fn bind_insert<'a>(b: &Bind<'a>, params: &mut Vec<Param<'a>>) {
    params.extend(COLUMNS.iter().map(|c| (c.bind)(b)));
}

/// The rewrite of a row's mutable columns, by id (a row already gone is no error).
pub fn update_sql() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| {
        let set: Vec<String> = COLUMNS
            .iter()
            .filter(|c| c.written == Rewritten)
            .map(|c| format!("{} = ?", c.name))
            .collect();
        format!(
            "UPDATE OR IGNORE messages SET {} WHERE id = ?",
            set.join(", ")
        )
    })
}

/// Binds one row for [`update_sql`].
pub fn bind_update<'a>(b: &Bind<'a>, params: &mut Vec<Param<'a>>) {
    params.extend(
        COLUMNS
            .iter()
            .filter(|c| c.written == Rewritten)
            .map(|c| (c.bind)(b)),
    );
    params.push(b.row.id.into());
}

#[cfg(test)]
mod tests {
    //! The mapping on a real SQLite file: what the writer stores is what every read gives back.
    use super::super::commit::commit;
    use super::super::{Durability, Op, RawConn, Store};
    use super::*;
    use crate::model::PermissionCard;

    /// A row with every column set to something other than its default.
    fn full_row(id: i64) -> MessageRow {
        MessageRow {
            message_id: Some("m".into()),
            task_id: Some("t".into()),
            user_message_id: Some("u".into()),
            scope: Some("sc".into()),
            error_code: Some("E".into()),
            occurred_at: Some("2026-11-29T12:00:00Z".into()),
            draft: true,
            hidden: true,
            content_key: Some("k".into()),
            draft_key: Some("task:t".into()),
            speaker: Some("Ann".into()),
            delivery: Some("failed".into()),
            delivery_error: Some(r#"{"code":"x","message":"y"}"#.into()),
            permission: Some(Box::new(PermissionCard {
                request_id: "r".into(),
                tool: "Bash".into(),
                input_preview: "ls".into(),
                state: "pending".into(),
                resolver: None,
            })),
            purpose: Some("summary_request".into()),
            edited_at: Some("2026-11-29T12:00:02Z".into()),
            language: Some("en".into()),
            ..MessageRow::new(
                id,
                "s",
                MessageKind::Permission,
                "a \"quoted\" ▉\n".into(),
                "2026-11-29T12:00:01.5Z".into(),
                42,
            )
        }
    }

    #[tokio::test]
    async fn every_column_round_trips_through_insert_update_and_the_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let (store, mut conn) = Store::open(&path, Durability::Crash).await.unwrap();
        let row = full_row(1);
        let mut locked = conn.lock_handle().await.unwrap();
        // SAFETY: the lock is held while `db` lives; nothing else uses the connection.
        let mut db = unsafe { RawConn::new(locked.as_raw_handle()) };
        let insert = Op::InsertMessage {
            row: row.clone(),
            logged: true,
        };
        commit(&mut db, &[&insert]).unwrap();
        assert_eq!(store.message(1).await.unwrap().as_ref(), Some(&row));

        // A rewrite changes exactly the columns marked so.
        let mut changed = row.clone();
        changed.text = "settled".into();
        changed.message_id = Some("m2".into());
        changed.task_id = None;
        changed.occurred_at = None;
        changed.draft = false;
        changed.hidden = false;
        changed.content_key = Some("k2".into());
        changed.draft_key = None;
        changed.delivery = Some("sent".into());
        changed.delivery_error = None;
        changed.permission.as_mut().unwrap().state = "allow".into();
        changed.edited_at = Some("2026-11-29T12:00:09Z".into());
        changed.speaker = Some("Dana".into());
        changed.language = Some("de".into());
        let mut fixed = changed.clone();
        fixed.session_id = "other".into();
        fixed.kind = MessageKind::User;
        fixed.user_message_id = None;
        fixed.scope = None;
        fixed.error_code = None;
        fixed.received_at = "2030-01-01T00:00:00Z".into();
        fixed.sort_key = 7;
        fixed.purpose = None;
        commit(&mut db, &[&Op::UpdateMessage(fixed)]).unwrap();
        drop(db);
        drop(locked);
        assert_eq!(store.message(1).await.unwrap().as_ref(), Some(&changed));

        // The event log rebuilds the row it logged from the same columns.
        let events = store.events_after(0, 10).await.unwrap();
        assert_eq!(events.len(), 1);
        let v: serde_json::Value = serde_json::from_str(&events[0].1).unwrap();
        assert_eq!(v["message"]["text"], "settled");
        assert_eq!(v["message"]["state"], "allow");
        let logged: i64 = sqlx::query_scalar("SELECT logged FROM messages WHERE id = 1")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(logged, 1);
    }

    #[test]
    fn the_statements_name_each_column_once() {
        let (head, n) = insert_head();
        assert_eq!(n, COLUMNS.len());
        for c in COLUMNS {
            assert_eq!(
                head.matches(&format!(" {},", c.name)).count()
                    + head.matches(&format!("({},", c.name)).count()
                    + head.matches(&format!(" {})", c.name)).count(),
                1,
                "{}",
                c.name
            );
        }
        assert!(!select(None).contains("logged"));
        assert!(select(Some("m")).starts_with("m.id, m.session_id"));
        assert!(update_sql().contains("text = ?") && !update_sql().contains("sort_key"));
    }
}
