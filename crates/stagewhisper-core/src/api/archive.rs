//! The archive's routes: full-text search over every call, a call's export, and the paged form
//! of the messages list (the list route itself is in `routes.rs`; it calls [`messages_page`]
//! when paging parameters are given). The logic is in [`crate::archive`].

use super::ApiState;
use crate::answers::{ApiError, ApiResult, ErrorDoc, Param, Reply};
use crate::archive::export::{self, Format};
use crate::archive::{self, ArchiveError, MessagePage, SearchResults};
use axum::extract::State;
use axum::http::{header, HeaderValue, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

type St = State<Arc<ApiState>>;

pub fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(search))
        .routes(routes!(export_session))
}

impl From<ArchiveError> for ApiError {
    fn from(e: ArchiveError) -> Self {
        let status = match e {
            ArchiveError::SessionNotFound => StatusCode::NOT_FOUND,
            ArchiveError::Storage(_) => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::BAD_REQUEST,
        };
        ApiError::new(status, e.code(), e)
    }
}

/// The query parameters, percent-decoded (the first of a repeated one wins).
pub(super) fn query(uri: &Uri) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for (k, v) in url::form_urlencoded::parse(uri.query().unwrap_or("").as_bytes()) {
        if !out.iter().any(|(seen, _)| *seen == k) {
            out.push((k.into_owned(), v.into_owned()));
        }
    }
    out
}

fn get<'a>(q: &'a [(String, String)], key: &str) -> Option<&'a str> {
    q.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

/// A whole-number parameter; anything else is `invalid_limit`.
fn number(v: Option<&str>, max: i64) -> Result<Option<i64>, ArchiveError> {
    v.map(|v| {
        v.trim()
            .parse::<i64>()
            .map_err(|_| ArchiveError::InvalidLimit(max))
    })
    .transpose()
}

/// Searches every call's and chat's messages, insights and transcript (whole words; the last
/// word also as a prefix), newest first.
#[utoipa::path(get, path = "/api/search", tag = "archive",
    params(
        ("q" = String, Query, description = "what to find: words, all of them required (at most 500 characters, 16 words)"),
        ("limit" = Option<i64>, Query, description = "at most this many results (1–100, default 20)"),
    ),
    responses((status = 200, body = SearchResults),
        (status = 400, body = ErrorDoc, description = "`empty_query` (no words), `query_too_long`, `invalid_limit`")))]
async fn search(State(api): St, uri: Uri) -> ApiResult {
    let q = query(&uri);
    let limit = number(get(&q, "limit"), archive::MAX_SEARCH_LIMIT)?;
    let text = get(&q, "q").unwrap_or("");
    Ok(Reply::ok(
        archive::search(api.conversation.store(), text, limit).await?,
    ))
}

/// A call (or chat) with its transcript, insights and chat, each entry with its time: Markdown
/// (`format=md`, for people) or JSON (`format=json`, the stable machine form). The same bytes as
/// `stagewhisper export --session ID --format md|json`.
#[utoipa::path(get, path = "/api/sessions/{session_id}/export", tag = "archive",
    params(("session_id" = String, Path),
        ("format" = Option<String>, Query, description = "`md` (default) or `json`")),
    responses(
        (status = 200, description = "the export: Markdown for `format=md`, JSON for `format=json`",
            content((String = "text/markdown"), (Object = "application/json"))),
        (status = 400, body = ErrorDoc, description = "`invalid_format`"),
        (status = 404, body = ErrorDoc)))]
async fn export_session(State(api): St, Param(id): Param, uri: Uri) -> Response {
    let q = query(&uri);
    let run = async {
        let format = Format::parse(get(&q, "format").unwrap_or("md"))?;
        let e = export::export(api.conversation.store(), &id).await?;
        Ok::<_, ArchiveError>((format, e))
    };
    match run.await {
        Ok((format, e)) => {
            let mut r = Response::new(axum::body::Body::from(e.render(format)));
            let h = r.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(format.content_type()),
            );
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            if let Ok(v) =
                HeaderValue::from_str(&format!("attachment; filename=\"{}\"", e.file_name(format)))
            {
                h.insert(header::CONTENT_DISPOSITION, v);
            }
            r
        }
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// The paging parameters of a list route (`limit`, `before`), or None when neither is given (the
/// route answers its whole list, as it always did). `limit` defaults to
/// [`archive::DEFAULT_PAGE_LIMIT`]; a `limit` that is not a whole number is `invalid_limit`, a
/// `before` that is not one `invalid_cursor` (its range and existence are the list's to check).
pub(crate) fn page_params(uri: &Uri) -> Result<Option<(i64, Option<i64>)>, ApiError> {
    let q = query(uri);
    if !q.iter().any(|(k, _)| k == "limit" || k == "before") {
        return Ok(None);
    }
    let limit =
        number(get(&q, "limit"), archive::MAX_PAGE_LIMIT)?.unwrap_or(archive::DEFAULT_PAGE_LIMIT);
    let before = get(&q, "before")
        .map(|v| {
            v.trim()
                .parse::<i64>()
                .map_err(|_| ArchiveError::InvalidCursor)
        })
        .transpose()?;
    Ok(Some((limit, before)))
}

/// `GET /api/sessions/{id}/messages?limit=N(&before=ID)`.
pub(super) async fn messages_page(
    api: &ApiState,
    id: &str,
    (limit, before): (i64, Option<i64>),
) -> Result<MessagePage, ApiError> {
    Ok(archive::messages_page(api.conversation.store(), id, limit, before).await?)
}
