//! What is kept of past calls, read back: full-text search over every call's chat, insights and
//! transcript ([`search`]), a conversation one page at a time ([`messages_page`]), and a call
//! exported as Markdown or JSON ([`export`]). Reads only, straight from the store (the index is
//! fed in batches by the store's writer, migrations 0006 and 0009; the rows it has not reached
//! yet are searched directly, `store::search`).
//!
//! User input never reaches FTS5's query syntax: [`fts_query`] splits it into words and quotes
//! each one, so a query can only be refused for having no words or being too long, never with
//! a syntax error.

pub mod export;
pub mod pages;

use crate::model::{MessageRow, MessageView};
use crate::protocol::INSIGHTS_PREFIX;
use crate::store::search::{RowList, SearchRow, HIT_CLOSE, HIT_OPEN};
use crate::store::{SessionRecord, Store, StoreError};
use serde::Serialize;
use utoipa::ToSchema;

/// Longest search query, in characters.
pub const MAX_QUERY_CHARS: usize = 500;
/// Most words in a search query.
pub const MAX_QUERY_WORDS: usize = 16;
/// Results when no `limit` is given, and the most a search answers.
pub const DEFAULT_SEARCH_LIMIT: i64 = 20;
pub const MAX_SEARCH_LIMIT: i64 = 100;
/// Messages per page when `limit` is not given with `before`.
pub const DEFAULT_PAGE_LIMIT: i64 = 100;
/// The most messages one page holds.
pub const MAX_PAGE_LIMIT: i64 = 500;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArchiveError {
    #[error("the search query has no words")]
    EmptyQuery,
    #[error(
        "the search query is longer than {MAX_QUERY_CHARS} characters or {MAX_QUERY_WORDS} words"
    )]
    QueryTooLong,
    #[error("`limit` must be a whole number from 1 to {0}")]
    InvalidLimit(i64),
    #[error("`before` must be the id of an entry of this list (a message, insight or transcript turn of this session)")]
    InvalidCursor,
    #[error("`format` must be `md` or `json`")]
    InvalidFormat,
    #[error("no such session")]
    SessionNotFound,
    #[error("the archive could not be read: {0}")]
    Storage(String),
}

impl ArchiveError {
    pub fn code(&self) -> &'static str {
        match self {
            ArchiveError::EmptyQuery => "empty_query",
            ArchiveError::QueryTooLong => "query_too_long",
            ArchiveError::InvalidLimit(_) => "invalid_limit",
            ArchiveError::InvalidCursor => "invalid_cursor",
            ArchiveError::InvalidFormat => "invalid_format",
            ArchiveError::SessionNotFound => "session_not_found",
            ArchiveError::Storage(_) => "storage_unavailable",
        }
    }
}

impl From<StoreError> for ArchiveError {
    fn from(e: StoreError) -> Self {
        ArchiveError::Storage(e.to_string())
    }
}

/// The FTS5 query for what the user typed: every word quoted (a `"` inside doubled), all of
/// them required, the last one also as a prefix (results while typing). A word is a run of
/// letters and digits (the tokenizer's own idea of a word; everything else separates).
pub fn fts_query(input: &str) -> Result<String, ArchiveError> {
    if input.chars().count() > MAX_QUERY_CHARS {
        return Err(ArchiveError::QueryTooLong);
    }
    let words: Vec<&str> = input
        .split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    if words.is_empty() {
        return Err(ArchiveError::EmptyQuery);
    }
    if words.len() > MAX_QUERY_WORDS {
        return Err(ArchiveError::QueryTooLong);
    }
    let last = words.len() - 1;
    Ok(words
        .iter()
        .enumerate()
        .map(|(i, w)| {
            let q = format!("\"{}\"", w.replace('"', "\"\""));
            if i == last {
                format!("{q}*")
            } else {
                q
            }
        })
        .collect::<Vec<_>>()
        .join(" "))
}

/// One search result.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct SearchHit {
    /// The chat session of the call (also for an insight or a transcript turn).
    pub session_id: String,
    /// The session's title (`null`: untitled).
    pub title: Option<String>,
    pub is_call: bool,
    /// When the session started.
    pub session_created_at: String,
    /// `chat`, `insight` or `transcript`.
    pub kind: &'static str,
    /// The message's (or insight's, or transcript turn's) id: the `id` of the row in
    /// `GET /api/sessions/{id}/messages`, `…/insights` or `GET /api/calls/{id}/transcript`.
    pub message_id: i64,
    /// `user` or `assistant` for a chat message.
    pub role: Option<&'static str>,
    /// When it was received (RFC 3339).
    pub time: String,
    /// The text around the matches (`…` where it is cut).
    pub snippet: String,
    /// The matches in `snippet`: `[start, end)` offsets in Unicode code points.
    pub highlights: Vec<[usize; 2]>,
}

#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct SearchResults {
    pub query: String,
    /// Newest first.
    pub results: Vec<SearchHit>,
}

/// Searches every live session's chat, insights and transcript; newest first.
pub async fn search(
    store: &Store,
    input: &str,
    limit: Option<i64>,
) -> Result<SearchResults, ArchiveError> {
    let limit = limit.unwrap_or(DEFAULT_SEARCH_LIMIT);
    if !(1..=MAX_SEARCH_LIMIT).contains(&limit) {
        return Err(ArchiveError::InvalidLimit(MAX_SEARCH_LIMIT));
    }
    let q = fts_query(input)?;
    let rows = store.search(&q, limit).await?;
    Ok(SearchResults {
        query: input.to_string(),
        results: rows.into_iter().map(hit).collect(),
    })
}

fn hit(r: SearchRow) -> SearchHit {
    let (session_id, kind, role) = match r.session_id.strip_prefix(INSIGHTS_PREFIX) {
        Some(chat) if r.kind == "transcript" => (chat.to_string(), "transcript", None),
        Some(chat) => (chat.to_string(), "insight", None),
        None => {
            let role = if r.kind == "user" {
                "user"
            } else {
                "assistant"
            };
            (r.session_id.clone(), "chat", Some(role))
        }
    };
    let (snippet, highlights) = split_hits(&r.snippet);
    SearchHit {
        session_id,
        title: r.title,
        is_call: r.is_call,
        session_created_at: r.created_at,
        kind,
        message_id: r.id,
        role,
        time: r.received_at,
        snippet,
        highlights,
    }
}

/// The snippet without its hit markers, and where the hits were (code points).
fn split_hits(marked: &str) -> (String, Vec<[usize; 2]>) {
    let mut text = String::with_capacity(marked.len());
    let mut hits = Vec::new();
    let (mut n, mut start) = (0usize, None);
    for c in marked.chars() {
        match c {
            HIT_OPEN => start = Some(n),
            HIT_CLOSE => {
                if let Some(s) = start.take() {
                    hits.push([s, n]);
                }
            }
            c => {
                text.push(c);
                n += 1;
            }
        }
    }
    (text, hits)
}

/// One page of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct MessagePage {
    /// Oldest first within the page; the first page is the newest one.
    pub items: Vec<MessageView>,
    /// The path of the next older page (`null`: this is the oldest).
    pub next: Option<String>,
}

/// A live chat session (the sessions the API lists).
pub async fn chat_session(store: &Store, session_id: &str) -> Result<SessionRecord, ArchiveError> {
    store
        .sessions()
        .await?
        .into_iter()
        .find(|s| s.session_id == session_id && s.kind == "chat" && s.deleted_at.is_none())
        .ok_or(ArchiveError::SessionNotFound)
}

/// The page of `limit` shown messages before the message `before` (none: the newest page).
pub async fn messages_page(
    store: &Store,
    session_id: &str,
    limit: i64,
    before: Option<i64>,
) -> Result<MessagePage, ArchiveError> {
    let base = pages::route_path("/api/sessions/{session}/messages", session_id);
    let mut page = rows_page(store, session_id, session_id, RowList::Shown, limit, before).await?;
    page.rows.reverse();
    Ok(MessagePage {
        items: page.rows.iter().map(MessageView::from).collect(),
        next: page.next(&base, page.rows.first()),
    })
}

/// One page of rows of a list, newest first, read in SQL.
pub(crate) struct RowsPage {
    /// The chat the list belongs to.
    pub session: SessionRecord,
    pub rows: Vec<MessageRow>,
    limit: i64,
    /// Older rows exist.
    more: bool,
}

impl RowsPage {
    /// The path of the page of older rows, given the page's oldest row.
    pub fn next(&self, base: &str, oldest: Option<&MessageRow>) -> Option<String> {
        match (self.more, oldest) {
            (true, Some(o)) => Some(pages::page_path(base, self.limit, o.id)),
            _ => None,
        }
    }
}

/// The page of `limit` rows that `list` shows of the session `rows_of` before the row `before`,
/// for the live chat `chat_id` (the rows' own session, or its `insights:` one). The checks, in
/// order: `invalid_limit`, `session_not_found`, `invalid_cursor` (not a row of that list).
pub(crate) async fn rows_page(
    store: &Store,
    chat_id: &str,
    rows_of: &str,
    list: RowList,
    limit: i64,
    before: Option<i64>,
) -> Result<RowsPage, ArchiveError> {
    if !(1..=MAX_PAGE_LIMIT).contains(&limit) {
        return Err(ArchiveError::InvalidLimit(MAX_PAGE_LIMIT));
    }
    let session = chat_session(store, chat_id).await?;
    let position = match before {
        Some(id) => Some(
            store
                .position(rows_of, list, id)
                .await?
                .ok_or(ArchiveError::InvalidCursor)?,
        ),
        None => None,
    };
    // One more than asked tells whether an older page exists.
    let mut rows = store
        .messages_before(rows_of, list, position, limit + 1)
        .await?;
    let more = rows.len() as i64 > limit;
    rows.truncate(limit as usize);
    Ok(RowsPage {
        session,
        rows,
        limit,
        more,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_input_is_quoted_word_by_word() {
        assert_eq!(fts_query("budget").unwrap(), "\"budget\"*");
        assert_eq!(
            fts_query("  Q3 budget, review ").unwrap(),
            "\"Q3\" \"budget\" \"review\"*"
        );
        // FTS5 syntax is only ever text.
        assert_eq!(
            fts_query("\"a\" OR b* NEAR(c) -d ^e:").unwrap(),
            "\"a\" \"OR\" \"b\" \"NEAR\" \"c\" \"d\" \"e\"*"
        );
        assert_eq!(fts_query("café").unwrap(), "\"café\"*");
        assert_eq!(fts_query("").unwrap_err(), ArchiveError::EmptyQuery);
        assert_eq!(
            fts_query(" \"*():- ").unwrap_err(),
            ArchiveError::EmptyQuery
        );
        assert_eq!(
            fts_query(&"x ".repeat(MAX_QUERY_WORDS + 1)).unwrap_err(),
            ArchiveError::QueryTooLong
        );
        assert_eq!(
            fts_query(&"x".repeat(MAX_QUERY_CHARS + 1)).unwrap_err(),
            ArchiveError::QueryTooLong
        );
    }

    #[test]
    fn hits_become_offsets_in_code_points() {
        let marked = format!("…the {HIT_OPEN}café{HIT_CLOSE} and {HIT_OPEN}tea{HIT_CLOSE}");
        let (text, hits) = split_hits(&marked);
        assert_eq!(text, "…the café and tea");
        assert_eq!(hits, [[5, 9], [14, 17]]);
        let chars: Vec<char> = text.chars().collect();
        assert_eq!(chars[5..9].iter().collect::<String>(), "café");
    }
}
