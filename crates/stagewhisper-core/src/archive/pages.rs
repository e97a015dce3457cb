//! The paged forms of a call's Insights list and transcript (`?limit=N&before=ID` →
//! `{items, next}`), read page by page in SQL like the messages pages: the newest page first,
//! each page in the list's own order (insights newest first, transcript oldest first), `next`
//! the path of the page of older entries. The same parameters and codes as the messages pages.

use super::{rows_page, ArchiveError};
use crate::conversation::micros_of;
use crate::model::{InsightView, TranscriptView};
use crate::protocol::INSIGHTS_PREFIX;
use crate::store::search::RowList;
use crate::store::Store;
use serde::Serialize;
use utoipa::ToSchema;

/// One page of a call's insights.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct InsightPage {
    /// Newest first (as the whole list); the first page is the newest one.
    pub items: Vec<InsightView>,
    /// The path of the next older page (`null`: this is the oldest).
    pub next: Option<String>,
}

/// One page of a call's transcript.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct TranscriptPage {
    /// Oldest first (as the whole list); the first page is the newest one.
    pub items: Vec<TranscriptView>,
    /// The path of the next older page (`null`: this is the oldest).
    pub next: Option<String>,
}

/// The path of the page of `limit` entries before `before` under `base` (a route's path).
pub fn page_path(base: &str, limit: i64, before: i64) -> String {
    format!("{base}?limit={limit}&before={before}")
}

/// A route's path with the session id percent-encoded (`{session}` in `template`).
pub fn route_path(template: &str, session_id: &str) -> String {
    let enc: String = url::form_urlencoded::byte_serialize(session_id.as_bytes()).collect();
    template.replace("{session}", &enc)
}

/// One page of a call's insights, newest first (read in SQL: a page costs its own rows).
pub async fn insights_page(
    store: &Store,
    session_id: &str,
    limit: i64,
    before: Option<i64>,
) -> Result<InsightPage, ArchiveError> {
    let base = route_path("/api/sessions/{session}/insights", session_id);
    let of = format!("{INSIGHTS_PREFIX}{session_id}");
    let page = rows_page(store, session_id, &of, RowList::Insights, limit, before).await?;
    let start = micros_of(&page.session.created_at);
    Ok(InsightPage {
        items: page
            .rows
            .iter()
            .map(|r| InsightView::from_row(r, session_id, start))
            .collect(),
        next: page.next(&base, page.rows.last()),
    })
}

/// One page of a call's transcript, oldest first within the page.
pub async fn transcript_page(
    store: &Store,
    session_id: &str,
    limit: i64,
    before: Option<i64>,
) -> Result<TranscriptPage, ArchiveError> {
    let base = route_path("/api/calls/{session}/transcript", session_id);
    let of = format!("{INSIGHTS_PREFIX}{session_id}");
    let mut page = rows_page(store, session_id, &of, RowList::Transcript, limit, before).await?;
    page.rows.reverse();
    let start = micros_of(&page.session.created_at);
    Ok(TranscriptPage {
        items: page
            .rows
            .iter()
            .map(|r| TranscriptView::from_row(r, session_id, start))
            .collect(),
        next: page.next(&base, page.rows.first()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_encode_the_session() {
        assert_eq!(
            route_path("/api/calls/{session}/transcript", "a b/c"),
            "/api/calls/a+b%2Fc/transcript"
        );
        assert_eq!(page_path("/p", 3, 5), "/p?limit=3&before=5");
    }
}
