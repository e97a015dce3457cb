//! The tools' reads, on the store's read pool (never the writer), and the shapes they answer.
//! Every read leaves out deleted sessions and sessions marked private; long texts are cut with
//! a marker ([`cut`]) so an answer fits a context window.

use crate::conversation::micros_of;
use crate::protocol::INSIGHTS_PREFIX;
use crate::store::{Store, StoreError};
use schemars::JsonSchema;
use serde::Serialize;
use sqlx::sqlite::SqliteRow;
use sqlx::Row;

/// The longest text of one transcript turn in an answer (characters).
pub const MAX_TURN_CHARS: usize = 1_000;
/// The longest insight, chat message or summary in an answer.
pub const MAX_ENTRY_CHARS: usize = 1_500;
/// The longest one-line summary in a list.
pub const MAX_LINE_CHARS: usize = 200;
/// Insights and chat messages `get_call` returns (the newest).
pub const CALL_ENTRIES: i64 = 20;
/// Whom a transcript names, at most, per call.
const MAX_SPEAKERS: i64 = 12;
/// The request the app sends for a summary (api/summary.rs); the assistant's reply to it is
/// the call's summary.
const SUMMARY_REQUEST: &str = "Please summarise this call";

/// `text`, or its first `max` characters and a marker saying how much was left out.
pub fn cut(text: &str, max: usize) -> String {
    let n = text.chars().count();
    if n <= max {
        return text.to_string();
    }
    let head: String = text.chars().take(max).collect();
    format!("{head}… [cut: {} more characters]", n - max)
}

/// A call (or a chat without a call) as lists show it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CallInfo {
    /// The id every other tool takes.
    pub call_id: String,
    pub title: Option<String>,
    /// `false`: a chat with the assistant, not a call.
    pub is_call: bool,
    /// ISO 8601 (UTC).
    pub started_at: String,
    /// ISO 8601 (UTC); `null` while the call goes on.
    pub ended_at: Option<String>,
    /// Seconds from start to end (`null` while it goes on).
    pub duration_s: Option<i64>,
    /// The speakers' labels in its transcript.
    pub speakers: Vec<String>,
    /// The first line of its summary, when one was asked for.
    pub summary: Option<String>,
}

/// A session a tool may show: live, a chat, not private.
struct Visible {
    id: String,
    is_call: bool,
    title: Option<String>,
    created_at: String,
    ended_at: Option<String>,
}

const VISIBLE: &str = "kind = 'chat' AND deleted_at IS NULL AND private = 0";

fn visible(r: &SqliteRow) -> Visible {
    Visible {
        id: r.get(0),
        is_call: r.get::<i64, _>(1) != 0,
        title: r.get(2),
        created_at: r.get(3),
        ended_at: r.get(4),
    }
}

fn duration(created: &str, ended: Option<&str>) -> Option<i64> {
    ended.map(|e| ((micros_of(e) - micros_of(created)) / 1_000_000).max(0))
}

/// The session `id`, when a tool may show it.
async fn session(store: &Store, id: &str) -> Result<Option<Visible>, StoreError> {
    let sql = format!(
        "SELECT session_id, is_call, title, created_at, ended_at FROM sessions \
         WHERE session_id = ? AND {VISIBLE}"
    );
    let row = sqlx::query(&sql)
        .bind(id)
        .fetch_optional(store.reads())
        .await?;
    Ok(row.as_ref().map(visible))
}

async fn speakers(store: &Store, id: &str) -> Result<Vec<String>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT DISTINCT speaker FROM messages WHERE session_id = ? AND kind = 'transcript' \
         AND speaker IS NOT NULL LIMIT ?",
    )
    .bind(format!("{INSIGHTS_PREFIX}{id}"))
    .bind(MAX_SPEAKERS)
    .fetch_all(store.reads())
    .await?)
}

/// The assistant's first reply after the newest summary request in the chat, if any.
async fn summary(store: &Store, id: &str) -> Result<Option<String>, StoreError> {
    Ok(sqlx::query_scalar(
        "SELECT a.text FROM messages a, (SELECT sort_key, id FROM messages \
             WHERE session_id = ?1 AND kind = 'user' AND substr(text, 1, ?2) = ?3 \
             ORDER BY sort_key DESC, id DESC LIMIT 1) q \
         WHERE a.session_id = ?1 AND a.kind = 'assistant' AND a.draft = 0 AND a.hidden = 0 \
           AND (a.sort_key, a.id) > (q.sort_key, q.id) \
         ORDER BY a.sort_key, a.id LIMIT 1",
    )
    .bind(id)
    .bind(SUMMARY_REQUEST.chars().count() as i64)
    .bind(SUMMARY_REQUEST)
    .fetch_optional(store.reads())
    .await?)
}

async fn info(store: &Store, s: Visible) -> Result<CallInfo, StoreError> {
    let line = summary(store, &s.id).await?.map(|t| {
        let first = t
            .lines()
            .map(|l| l.trim().trim_start_matches(['-', '*', '#', ' ']))
            .find(|l| !l.is_empty())
            .unwrap_or("");
        cut(first, MAX_LINE_CHARS)
    });
    Ok(CallInfo {
        speakers: speakers(store, &s.id).await?,
        duration_s: duration(&s.created_at, s.ended_at.as_deref()),
        summary: line,
        call_id: s.id,
        title: s.title,
        is_call: s.is_call,
        started_at: s.created_at,
        ended_at: s.ended_at,
    })
}

/// What `list_calls` filters on.
#[derive(Debug, Default, Clone)]
pub struct ListFilter {
    /// Words in the title (every one; ASCII letters in any case, as SQLite's `lower`).
    pub words: Vec<String>,
    /// Started at or after (RFC 3339, the store's form).
    pub since: Option<String>,
    /// Started before.
    pub until: Option<String>,
}

/// Newest first: at most `limit` calls, and whether more match.
pub async fn list_calls(
    store: &Store,
    f: &ListFilter,
    limit: i64,
) -> Result<(Vec<CallInfo>, bool), StoreError> {
    let mut sql = format!(
        "SELECT session_id, is_call, title, created_at, ended_at FROM sessions WHERE {VISIBLE} \
         AND (? IS NULL OR created_at >= ?) AND (? IS NULL OR created_at < ?)"
    );
    for _ in &f.words {
        sql.push_str(" AND instr(lower(coalesce(title, '')), lower(?)) > 0");
    }
    sql.push_str(" ORDER BY created_at DESC, rowid DESC LIMIT ?");
    // Plain `?` only: sqlx numbers them on their own, apart from `?N`.
    let mut q = sqlx::query(&sql)
        .bind(&f.since)
        .bind(&f.since)
        .bind(&f.until)
        .bind(&f.until);
    for w in &f.words {
        q = q.bind(w);
    }
    let rows = q.bind(limit + 1).fetch_all(store.reads()).await?;
    let more = rows.len() as i64 > limit;
    let mut out = Vec::new();
    for r in rows.iter().take(limit as usize) {
        out.push(info(store, visible(r)).await?);
    }
    Ok((out, more))
}

/// One transcript turn.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Turn {
    /// ISO 8601 (UTC).
    pub time: String,
    /// Milliseconds into the call.
    pub offset_ms: i64,
    pub speaker: Option<String>,
    pub text: String,
}

/// A call's transcript, or one window of it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Transcript {
    pub call_id: String,
    pub title: Option<String>,
    pub started_at: String,
    pub turns: Vec<Turn>,
    /// More turns follow in the window: ask again with `from_ms` = `next_from_ms`.
    pub more: bool,
    pub next_from_ms: Option<i64>,
}

fn turn(r: &SqliteRow, start: i64) -> Turn {
    let sort_key: i64 = r.get(3);
    Turn {
        time: r.get(0),
        speaker: r.get(1),
        text: cut(r.get::<&str, _>(2), MAX_TURN_CHARS),
        offset_ms: ((sort_key - start) / 1000).max(0),
    }
}

/// The turns from `from_ms` (inclusive) to `to_ms` (exclusive), oldest first, at most `limit`.
/// `None`: no such call (or private).
pub async fn transcript(
    store: &Store,
    id: &str,
    from_ms: i64,
    to_ms: Option<i64>,
    limit: i64,
) -> Result<Option<Transcript>, StoreError> {
    let Some(s) = session(store, id).await? else {
        return Ok(None);
    };
    let start = micros_of(&s.created_at);
    let rows = sqlx::query(
        "SELECT received_at, speaker, text, sort_key FROM messages WHERE session_id = ? \
         AND kind = 'transcript' AND sort_key >= ? AND sort_key < ? \
         ORDER BY sort_key, id LIMIT ?",
    )
    .bind(format!("{INSIGHTS_PREFIX}{id}"))
    .bind(start.saturating_add(from_ms.saturating_mul(1000)))
    .bind(to_ms.map_or(i64::MAX, |t| start.saturating_add(t.saturating_mul(1000))))
    .bind(limit + 1)
    .fetch_all(store.reads())
    .await?;
    let more = rows.len() as i64 > limit;
    let turns: Vec<Turn> = rows
        .iter()
        .take(limit as usize)
        .map(|r| turn(r, start))
        .collect();
    let next_from_ms = more
        .then(|| rows[limit as usize].get::<i64, _>(3))
        .map(|k| (k - start) / 1000);
    Ok(Some(Transcript {
        call_id: s.id,
        title: s.title,
        started_at: s.created_at,
        turns,
        more,
        next_from_ms,
    }))
}

/// An insight or a chat message.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Entry {
    /// ISO 8601 (UTC).
    pub time: String,
    /// Who wrote it: `user` (the person), `assistant`, or `notice` / `error` (the app).
    pub speaker: String,
    pub text: String,
}

/// A call whole, kept small: its info, summary, newest insights and chat.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CallDetail {
    #[serde(flatten)]
    pub info: CallInfo,
    /// The summary the assistant wrote when asked (cut when long).
    pub summary_text: Option<String>,
    /// The newest insights, oldest first.
    pub insights: Vec<Entry>,
    pub insights_total: i64,
    /// The newest chat messages, oldest first.
    pub chat: Vec<Entry>,
    pub chat_total: i64,
    /// Turns in its transcript (read them with `get_transcript`).
    pub transcript_turns: i64,
}

async fn entries(
    store: &Store,
    session: &str,
    cond: &str,
) -> Result<(Vec<Entry>, i64), StoreError> {
    let rows = sqlx::query(&format!(
        "SELECT received_at, kind, text FROM messages WHERE session_id = ? AND {cond} \
         ORDER BY sort_key DESC, id DESC LIMIT ?"
    ))
    .bind(session)
    .bind(CALL_ENTRIES)
    .fetch_all(store.reads())
    .await?;
    let total: i64 = sqlx::query_scalar(&format!(
        "SELECT count(*) FROM messages WHERE session_id = ? AND {cond}"
    ))
    .bind(session)
    .fetch_one(store.reads())
    .await?;
    let mut v: Vec<Entry> = rows
        .iter()
        .map(|r| Entry {
            time: r.get(0),
            speaker: r.get(1),
            text: cut(r.get::<&str, _>(2), MAX_ENTRY_CHARS),
        })
        .collect();
    v.reverse();
    Ok((v, total))
}

/// `None`: no such call (or private).
pub async fn call(store: &Store, id: &str) -> Result<Option<CallDetail>, StoreError> {
    let Some(s) = session(store, id).await? else {
        return Ok(None);
    };
    let side = format!("{INSIGHTS_PREFIX}{id}");
    let summary_text = summary(store, id).await?.map(|t| cut(&t, MAX_ENTRY_CHARS));
    let (insights, insights_total) = entries(
        store,
        &side,
        "hidden = 0 AND draft = 0 AND kind NOT IN ('user', 'transcript')",
    )
    .await?;
    let (chat, chat_total) = entries(store, id, "hidden = 0 AND draft = 0").await?;
    let transcript_turns: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM messages WHERE session_id = ? AND kind = 'transcript'",
    )
    .bind(&side)
    .fetch_one(store.reads())
    .await?;
    Ok(Some(CallDetail {
        info: info(store, s).await?,
        summary_text,
        insights,
        insights_total,
        chat,
        chat_total,
        transcript_turns,
    }))
}

/// The call going on now (the newest call not ended), its newest `last` turns.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Current {
    /// `null`: no call is going on (or it is private).
    pub call: Option<CurrentCall>,
}

#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CurrentCall {
    pub call_id: String,
    pub title: Option<String>,
    pub started_at: String,
    /// The newest turns, oldest first.
    pub turns: Vec<Turn>,
    pub turns_total: i64,
}

pub async fn current(store: &Store, last: i64) -> Result<Current, StoreError> {
    let row = sqlx::query(
        "SELECT session_id, is_call, title, created_at, ended_at, private FROM sessions \
         WHERE kind = 'chat' AND is_call = 1 AND ended_at IS NULL AND deleted_at IS NULL \
         ORDER BY created_at DESC, rowid DESC LIMIT 1",
    )
    .fetch_optional(store.reads())
    .await?;
    let Some(row) = row.filter(|r| r.get::<i64, _>(5) == 0) else {
        return Ok(Current { call: None });
    };
    let s = visible(&row);
    let start = micros_of(&s.created_at);
    let side = format!("{INSIGHTS_PREFIX}{}", s.id);
    let rows = sqlx::query(
        "SELECT received_at, speaker, text, sort_key FROM messages WHERE session_id = ? \
         AND kind = 'transcript' ORDER BY sort_key DESC, id DESC LIMIT ?",
    )
    .bind(&side)
    .bind(last)
    .fetch_all(store.reads())
    .await?;
    let mut turns: Vec<Turn> = rows.iter().map(|r| turn(r, start)).collect();
    turns.reverse();
    let turns_total: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM messages WHERE session_id = ? AND kind = 'transcript'",
    )
    .bind(&side)
    .fetch_one(store.reads())
    .await?;
    Ok(Current {
        call: Some(CurrentCall {
            call_id: s.id,
            title: s.title,
            started_at: s.created_at,
            turns,
            turns_total,
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::cut;

    #[test]
    fn long_texts_are_cut_with_a_marker() {
        assert_eq!(cut("short", 10), "short");
        assert_eq!(cut("ééééé", 5), "ééééé");
        assert_eq!(cut("ééééééé", 5), "ééééé… [cut: 2 more characters]");
    }
}
