//! The assistant's access to past calls (MCP, [`crate::mcp`]): the switch, the token, private
//! calls and the access log. The MCP endpoint itself (`/mcp`) is not an `/api` route: it is
//! served beside them ([`endpoint`]) with its own token.

use super::{ApiState, InProcess};
use crate::answers::{ApiError, ApiResult, ErrorDoc, JsonBody, Param, Reply};
use crate::mcp::log::{self, McpRead};
use crate::mcp::McpView;
use crate::store::Stmt;
use crate::tokens::TokenError;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

type St = State<Arc<ApiState>>;

pub fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(get_mcp, put_mcp))
        .routes(routes!(rotate_mcp_token))
        .routes(routes!(mcp_activity))
        .routes(routes!(set_private))
        .routes(routes!(session_reads))
}

/// `PUT /api/mcp`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct McpSwitch {
    /// Let the assistant look up past calls.
    pub enabled: bool,
}

/// `PUT /api/calls/{session_id}`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct CallPatch {
    /// A private call is never returned by the assistant's tools.
    pub private: bool,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct CallPrivacy {
    pub session_id: String,
    pub private: bool,
}

/// What the assistant read of one call.
#[derive(Debug, Serialize, ToSchema)]
pub struct SessionReads {
    pub session_id: String,
    /// The call is hidden from the assistant's tools.
    pub private: bool,
    /// Newest first (at most 200).
    pub reads: Vec<McpRead>,
}

fn token_error(e: TokenError) -> ApiError {
    if e.is_storage_full() {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "storage_unavailable", e)
    } else {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "settings_write_failed",
            e,
        )
    }
}

fn storage(e: impl std::fmt::Display) -> ApiError {
    ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "storage_unavailable", e)
}

/// Whether the assistant may look up past calls, the MCP URL and its token.
#[utoipa::path(get, path = "/api/mcp", tag = "mcp",
    responses((status = 200, body = McpView)))]
async fn get_mcp(State(api): St) -> ApiResult {
    Ok(Reply::ok(api.mcp.view()))
}

/// Turns the assistant's access to past calls on or off (kept across restarts).
#[utoipa::path(put, path = "/api/mcp", tag = "mcp", request_body = McpSwitch,
    responses((status = 200, body = McpView),
        (status = 500, body = ErrorDoc, description = "`settings_write_failed`")))]
async fn put_mcp(State(api): St, JsonBody(b): JsonBody<McpSwitch>) -> ApiResult {
    api.mcp.set_enabled(b.enabled)?;
    Ok(Reply::ok(api.mcp.view()))
}

/// A new MCP token; the old one stops working at once.
#[utoipa::path(post, path = "/api/mcp/token", tag = "mcp",
    responses((status = 200, body = McpView),
        (status = 500, body = ErrorDoc, description = "`settings_write_failed`")))]
async fn rotate_mcp_token(State(api): St) -> ApiResult {
    api.mcp.rotate().map_err(token_error)?;
    Ok(Reply::ok(api.mcp.view()))
}

/// The access log: the calls the assistant's tools returned, newest first.
#[utoipa::path(get, path = "/api/mcp/activity", tag = "mcp",
    params(("limit" = Option<i64>, Query, minimum = 1, maximum = 200, description = "entries (1–200; default 50)")),
    responses((status = 200, body = Vec<McpRead>),
        (status = 400, body = ErrorDoc, description = "`invalid_limit`")))]
async fn mcp_activity(State(api): St, uri: axum::http::Uri) -> ApiResult {
    let limit = match super::query_param(uri.query().unwrap_or(""), "limit") {
        None => 50,
        Some(v) => v
            .parse::<i64>()
            .ok()
            .filter(|n| (1..=log::MAX_LIST).contains(n))
            .ok_or_else(|| {
                ApiError::bad(
                    "invalid_limit",
                    format!("`limit` must be a whole number from 1 to {}", log::MAX_LIST),
                )
            })?,
    };
    let reads = log::list(api.conversation.store(), None, limit)
        .await
        .map_err(storage)?;
    Ok(Reply::ok(reads))
}

/// Marks a call (or chat) private, or not: a private call is never returned by the assistant's
/// tools (MCP).
#[utoipa::path(put, path = "/api/calls/{session_id}", tag = "mcp",
    params(("session_id" = String, Path)), request_body = CallPatch,
    responses((status = 200, body = CallPrivacy),
        (status = 404, body = ErrorDoc, description = "`session_not_found`")))]
async fn set_private(
    State(api): St,
    Param(id): Param,
    JsonBody(b): JsonBody<CallPatch>,
) -> ApiResult {
    let changed = api
        .conversation
        .store()
        .write(vec![Stmt::new(
            "UPDATE sessions SET private = ? WHERE session_id = ? AND kind = 'chat' \
             AND deleted_at IS NULL",
        )
        .bind(b.private)
        .bind(id.as_str())])
        .await
        .map_err(storage)?;
    if changed.first().copied().unwrap_or(0) == 0 {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "session_not_found",
            "no such session",
        ));
    }
    Ok(Reply::ok(CallPrivacy {
        session_id: id,
        private: b.private,
    }))
}

/// Whether the call is private, and what the assistant's tools read of it ("Your assistant
/// read: …").
#[utoipa::path(get, path = "/api/sessions/{session_id}/mcp-reads", tag = "mcp",
    params(("session_id" = String, Path)),
    responses((status = 200, body = SessionReads),
        (status = 404, body = ErrorDoc, description = "`session_not_found`")))]
async fn session_reads(State(api): St, Param(id): Param) -> ApiResult {
    let store = api.conversation.store();
    let private: Option<i64> = sqlx::query_scalar(
        "SELECT private FROM sessions WHERE session_id = ? AND kind = 'chat' \
         AND deleted_at IS NULL",
    )
    .bind(&id)
    .fetch_optional(store.reads())
    .await
    .map_err(storage)?;
    let Some(private) = private else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "session_not_found",
            "no such session",
        ));
    };
    let reads = log::list(store, Some(&id), log::MAX_LIST)
        .await
        .map_err(storage)?;
    Ok(Reply::ok(SessionReads {
        session_id: id,
        private: private != 0,
        reads,
    }))
}

/// `/mcp` (every method): the MCP server, for HTTP requests only (the window's IPC gets 404).
pub async fn endpoint(State(api): St, req: Request) -> Response {
    if req.extensions().get::<InProcess>().is_some() {
        return ApiError::not_found().into_response();
    }
    api.mcp.serve(req).await
}
