//! The SQL of the writer thread's work (`writer.rs` decides when): one commit of the
//! conversation's ops and the writes beside them ([`commit_with`]: multi-row inserts prepared
//! once, then the updates and deletes in order, then each side write in a savepoint of its
//! own), and the search index's batches ([`index_batch`]).

use super::row::{self, Bind};
use super::side::{Changes, Stmt};
use super::{Op, Param, RawConn, RawError, StoreError};
use crate::model::MessageRow;

/// Adds the next rows above `search_indexed.upto` (at most `max_rows` of them, in id order) to
/// the search index in one transaction of its own, and moves `upto` past them; returns how many
/// rows it went past (fewer than `max_rows`: the index has every committed row). Which rows are
/// indexed is the condition of the triggers of migration 0009; a row that is a draft or hidden
/// now and settles later is indexed by the update trigger then (it is at or below `upto`).
pub fn index_batch(db: &mut RawConn, max_rows: i64) -> Result<i64, StoreError> {
    db.execute("BEGIN", &[])?;
    let result = (|| {
        let upto = db
            .query_i64("SELECT upto FROM search_indexed", &[])?
            .unwrap_or(0);
        let last = db.query_i64(
            "SELECT MAX(id) FROM (SELECT id FROM messages WHERE id > ? ORDER BY id LIMIT ?)",
            &[upto.into(), max_rows.into()],
        )?;
        let Some(last) = last else {
            return Ok(0);
        };
        let rows = db
            .query_i64(
                "SELECT COUNT(*) FROM messages WHERE id > ? AND id <= ?",
                &[upto.into(), last.into()],
            )?
            .unwrap_or(0);
        db.execute(
            "INSERT INTO messages_fts (rowid, text) SELECT id, text FROM messages \
             WHERE id > ? AND id <= ? \
               AND kind IN ('user', 'assistant', 'transcript') AND draft = 0 AND hidden = 0 \
               AND purpose IS NULL",
            &[upto.into(), last.into()],
        )?;
        db.execute(
            "UPDATE search_indexed SET upto = ? WHERE upto < ?",
            &[last.into(), last.into()],
        )?;
        Ok(rows)
    })();
    let result = result.and_then(|rows| db.execute("COMMIT", &[]).map(|()| rows));
    if result.is_err() && db.in_transaction() {
        let _ = db.execute("ROLLBACK", &[]);
    }
    Ok(result?)
}

/// [`commit_with`] without writes beside the conversation's (the tests of what the ops write).
#[cfg(test)]
pub(super) fn commit(db: &mut RawConn, ops: &[&Op]) -> Result<(), StoreError> {
    commit_with(db, ops, &[]).map(drop)
}

/// Commits a batch's ops in one transaction on the writer's raw handle (see [`apply_all`]
/// for the order). On any error the transaction is rolled back: nothing of the batch is
/// written. Rows go in as `INSERT OR ROLLBACK`: a violation ends the transaction at once,
/// so SQLite keeps no statement journal for the multi-row inserts (a copy of every page
/// they touch, about a tenth of the writer's time).
///
/// The writes beside the conversation's follow its ops, each in a savepoint of its own: the
/// answer of each (the rows each statement changed, or why it alone was rolled back) once the
/// whole transaction is committed.
pub(super) fn commit_with(
    db: &mut RawConn,
    ops: &[&Op],
    writes: &[&[Stmt]],
) -> Result<Vec<Result<Changes, RawError>>, StoreError> {
    db.execute("BEGIN", &[])?;
    let result = apply_all(db, ops).and_then(|()| {
        let mut answers = Vec::with_capacity(writes.len());
        for stmts in writes {
            let answer = apply_side(db, stmts);
            if !db.in_transaction() {
                // What failed ended the whole transaction (a full disk, say).
                return Err(answer.err().unwrap_or_else(|| RawError {
                    code: 1,
                    message: "the transaction ended early".into(),
                }));
            }
            answers.push(answer);
        }
        db.execute("COMMIT", &[]).map(|()| answers)
    });
    if result.is_err() && db.in_transaction() {
        let _ = db.execute("ROLLBACK", &[]);
    }
    Ok(result?)
}

/// One write beside the conversation's, all or nothing, inside the open transaction.
fn apply_side(db: &mut RawConn, stmts: &[Stmt]) -> Result<Changes, RawError> {
    db.execute("SAVEPOINT side", &[])?;
    let mut changes = Vec::with_capacity(stmts.len());
    let result = stmts.iter().try_for_each(|s| {
        let params: Vec<Param<'_>> = s.args.iter().map(Param::from).collect();
        db.execute(s.sql, &params)?;
        changes.push(db.changes());
        Ok(())
    });
    match result {
        Ok(()) => {
            db.execute("RELEASE side", &[])?;
            Ok(changes)
        }
        Err(e) => {
            if db.in_transaction() {
                db.execute("ROLLBACK TO side", &[])?;
                db.execute("RELEASE side", &[])?;
            }
            Err(e)
        }
    }
}

/// Inserts go first, grouped into multi-row statements of power-of-two sizes (few distinct
/// statements, each prepared once); the other ops follow in order. That is equivalent to
/// applying them in order because nothing updates or deletes a row before inserting it.
fn apply_all(db: &mut RawConn, ops: &[&Op]) -> Result<(), RawError> {
    let messages: Vec<(&MessageRow, bool)> = ops
        .iter()
        .filter_map(|o| match o {
            Op::InsertMessage { row, logged } => Some((row, *logged)),
            _ => None,
        })
        .collect();
    // Permission cards' JSON, owned here so the parameters can borrow it.
    // (None allocated on the ingest path, where no row is a card.)
    let cards: Vec<Option<String>> = if messages.iter().any(|(m, _)| m.permission.is_some()) {
        messages
            .iter()
            .map(|(m, _)| m.permission.as_ref().map(|p| card_json(p)))
            .collect()
    } else {
        Vec::new()
    };
    const NO_CARD: &Option<String> = &None;
    let mut params = Vec::new();
    let mut offset = 0;
    for rows in chunks(&messages) {
        params.clear();
        for (i, (row, logged)) in rows.iter().enumerate() {
            let card = cards.get(offset + i).unwrap_or(NO_CARD).as_deref();
            let logged = *logged;
            row::bind_insert(&Bind { row, logged, card }, &mut params);
        }
        offset += rows.len();
        db.execute(insert_sql(&INSERT_MESSAGES, rows.len()), &params)?;
    }
    let events: Vec<(i64, &str, &str)> = ops
        .iter()
        .filter_map(|o| match o {
            Op::InsertEvent {
                id,
                session_id,
                data,
            } => Some((*id, session_id.as_str(), data.as_str())),
            _ => None,
        })
        .collect();
    for rows in chunks(&events) {
        params.clear();
        for (id, session_id, data) in rows {
            params.extend_from_slice(&[(*id).into(), (*session_id).into(), (*data).into()]);
        }
        db.execute(insert_sql(&INSERT_EVENTS, rows.len()), &params)?;
    }
    ops.iter().try_for_each(|op| apply(db, op))
}

/// Most rows per insert statement.
const MAX_CHUNK: usize = 64;

/// Splits rows into power-of-two chunks of at most [`MAX_CHUNK`].
fn chunks<T>(mut rows: &[T]) -> impl Iterator<Item = &[T]> {
    std::iter::from_fn(move || {
        if rows.is_empty() {
            return None;
        }
        let rest = rows.len().min(MAX_CHUNK);
        let n = 1usize << (usize::BITS - 1 - rest.leading_zeros());
        let (chunk, tail) = rows.split_at(n);
        rows = tail;
        Some(chunk)
    })
}

/// A multi-row INSERT: its head and columns per row, and its texts per power of two (built
/// once).
struct InsertSql {
    head: fn() -> (String, usize),
    texts: std::sync::OnceLock<Vec<String>>,
}

static INSERT_MESSAGES: InsertSql = InsertSql {
    head: row::insert_head,
    texts: std::sync::OnceLock::new(),
};

static INSERT_EVENTS: InsertSql = InsertSql {
    head: || {
        (
            "INSERT OR ROLLBACK INTO events (id, session_id, data) VALUES ".into(),
            3,
        )
    },
    texts: std::sync::OnceLock::new(),
};

fn insert_sql(sql: &'static InsertSql, rows: usize) -> &'static str {
    let texts = sql.texts.get_or_init(|| {
        let (head, columns) = (sql.head)();
        let one = format!("({})", vec!["?"; columns].join(", "));
        (0..=MAX_CHUNK.trailing_zeros())
            .map(|p| format!("{head}{}", vec![one.as_str(); 1 << p].join(", ")))
            .collect()
    });
    debug_assert!(rows.is_power_of_two() && rows <= MAX_CHUNK);
    &texts[rows.trailing_zeros() as usize]
}

/// Before rows are deleted: the next id stays past the highest one (see `id_floors`).
const RAISE_MESSAGES_FLOOR: &str = "INSERT INTO id_floors (name, next) \
     SELECT 'messages', COALESCE(MAX(id), 0) + 1 FROM messages WHERE true \
     ON CONFLICT (name) DO UPDATE SET next = max(next, excluded.next)";
const RAISE_EVENTS_FLOOR: &str = "INSERT INTO id_floors (name, next) \
     SELECT 'events', COALESCE(MAX(id), 0) + 1 FROM events WHERE true \
     ON CONFLICT (name) DO UPDATE SET next = max(next, excluded.next)";

fn apply(db: &mut RawConn, op: &Op) -> Result<(), RawError> {
    match op {
        Op::InsertSession(s) => {
            db.execute(
                "INSERT INTO sessions (session_id, kind, is_call, call_id, title, created_at) \
                 VALUES (?, ?, ?, ?, ?, ?)",
                &[
                    (&s.session_id).into(),
                    (&s.kind).into(),
                    s.is_call.into(),
                    (&s.call_id).into(),
                    (&s.title).into(),
                    (&s.created_at).into(),
                ],
            )?;
        }
        Op::UpdateMessage(row) => {
            let card = row.permission.as_ref().map(|p| card_json(p));
            let mut params = Vec::new();
            let (card, logged) = (card.as_deref(), false);
            row::bind_update(&Bind { row, logged, card }, &mut params);
            db.execute(row::update_sql(), &params)?;
        }
        Op::DeleteMessage(id) => {
            db.execute(RAISE_MESSAGES_FLOOR, &[])?;
            db.execute("DELETE FROM messages WHERE id = ?", &[(*id).into()])?;
        }
        // Written by `apply_all` before the rest.
        Op::InsertMessage { .. } | Op::InsertEvent { .. } => {}
        Op::EndSessions { ids, at } => {
            for id in ids {
                db.execute(
                    "UPDATE sessions SET ended_at = ? WHERE session_id = ? AND ended_at IS NULL",
                    &[at.into(), id.into()],
                )?;
            }
        }
        Op::RetitleSession { id, title } => {
            db.execute(
                "UPDATE sessions SET title = ? WHERE session_id = ? AND deleted_at IS NULL",
                &[title.into(), id.into()],
            )?;
        }
        Op::DeleteSessions {
            ids,
            at,
            events_before,
        } => {
            db.execute(RAISE_MESSAGES_FLOOR, &[])?;
            db.execute(RAISE_EVENTS_FLOOR, &[])?;
            for id in ids {
                db.execute(
                    "UPDATE sessions SET deleted_at = ? WHERE session_id = ?",
                    &[at.into(), id.into()],
                )?;
                db.execute("DELETE FROM messages WHERE session_id = ?", &[id.into()])?;
                db.execute(
                    "DELETE FROM events WHERE session_id = ? AND id < ?",
                    &[id.into(), (*events_before).into()],
                )?;
            }
        }
    }
    Ok(())
}

/// A permission card as its column holds it.
fn card_json(card: &crate::model::PermissionCard) -> String {
    serde_json::to_string(card).expect("serializable")
}
