//! The paged forms of a call's Insights list and transcript (`?limit=N&before=ID` →
//! `{items, next}`), cut from the whole list the conversation answers: the newest page first,
//! each page in the list's own order (insights newest first, transcript oldest first), `next`
//! the path of the page of older entries. The same parameters and codes as the messages pages.

use super::{ArchiveError, MAX_PAGE_LIMIT};
use crate::model::{InsightView, TranscriptView};
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

/// The page of `limit` entries of `list` older than the entry `before` (none: the newest page).
/// `newest_first` tells the list's order; `base` is the route's path for `next`.
pub fn list_page<T>(
    mut list: Vec<T>,
    newest_first: bool,
    id: impl Fn(&T) -> i64,
    limit: i64,
    before: Option<i64>,
    base: &str,
) -> Result<(Vec<T>, Option<String>), ArchiveError> {
    if !(1..=MAX_PAGE_LIMIT).contains(&limit) {
        return Err(ArchiveError::InvalidLimit(MAX_PAGE_LIMIT));
    }
    if newest_first {
        list.reverse();
    }
    let end = match before {
        Some(b) => list
            .iter()
            .position(|x| id(x) == b)
            .ok_or(ArchiveError::InvalidCursor)?,
        None => list.len(),
    };
    let start = end.saturating_sub(limit as usize);
    let mut items: Vec<T> = list.drain(start..end).collect();
    let next = match (start > 0, items.first()) {
        (true, Some(oldest)) => Some(page_path(base, limit, id(oldest))),
        _ => None,
    };
    if newest_first {
        items.reverse();
    }
    Ok((items, next))
}

pub fn insights_page(
    list: Vec<InsightView>,
    session_id: &str,
    limit: i64,
    before: Option<i64>,
) -> Result<InsightPage, ArchiveError> {
    let base = route_path("/api/sessions/{session}/insights", session_id);
    let (items, next) = list_page(list, true, |i| i.id, limit, before, &base)?;
    Ok(InsightPage { items, next })
}

pub fn transcript_page(
    list: Vec<TranscriptView>,
    session_id: &str,
    limit: i64,
    before: Option<i64>,
) -> Result<TranscriptPage, ArchiveError> {
    let base = route_path("/api/calls/{session}/transcript", session_id);
    let (items, next) = list_page(list, false, |t| t.id, limit, before, &base)?;
    Ok(TranscriptPage { items, next })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(
        list: &[i64],
        newest_first: bool,
        limit: i64,
        before: Option<i64>,
    ) -> (Vec<i64>, Option<String>) {
        list_page(list.to_vec(), newest_first, |x| *x, limit, before, "/p").unwrap()
    }

    #[test]
    fn pages_walk_back_from_the_newest_without_gaps_or_repeats() {
        let oldest_first: Vec<i64> = (1..=7).collect();
        assert_eq!(
            page(&oldest_first, false, 3, None),
            (vec![5, 6, 7], Some("/p?limit=3&before=5".into()))
        );
        assert_eq!(
            page(&oldest_first, false, 3, Some(5)),
            (vec![2, 3, 4], Some("/p?limit=3&before=2".into()))
        );
        assert_eq!(page(&oldest_first, false, 3, Some(2)), (vec![1], None));
        let newest_first: Vec<i64> = (1..=7).rev().collect();
        assert_eq!(
            page(&newest_first, true, 3, None),
            (vec![7, 6, 5], Some("/p?limit=3&before=5".into()))
        );
        assert_eq!(
            page(&newest_first, true, 3, Some(5)),
            (vec![4, 3, 2], Some("/p?limit=3&before=2".into()))
        );
        assert_eq!(page(&newest_first, true, 3, Some(2)), (vec![1], None));
        assert_eq!(page(&[], true, 3, None), (vec![], None));
        assert_eq!(
            page(&oldest_first, false, 7, None),
            (oldest_first.clone(), None)
        );
    }

    #[test]
    fn bad_parameters_have_their_codes() {
        let l = vec![1, 2, 3];
        let e = |limit, before| {
            list_page(l.clone(), false, |x| *x, limit, before, "/p")
                .unwrap_err()
                .code()
        };
        assert_eq!(e(0, None), "invalid_limit");
        assert_eq!(e(MAX_PAGE_LIMIT + 1, None), "invalid_limit");
        assert_eq!(e(2, Some(9)), "invalid_cursor");
        assert_eq!(
            route_path("/api/calls/{session}/transcript", "a b/c"),
            "/api/calls/a+b%2Fc/transcript"
        );
    }
}
