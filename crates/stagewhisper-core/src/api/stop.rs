//! `POST /api/sessions/{session_id}/stop`: the Stop button. The active assistant kind stops the
//! reply running in the session ([`crate::assistants::AssistantKind::abort`]); what the
//! assistant produced so far stays in the chat, marked as stopped, through the kind's usual
//! replies. Kinds that cannot stop a reply answer `409 not_supported`.

use super::ApiState;
use crate::answers::{ApiError, ApiResult, ErrorDoc, OkDoc, Param, Reply};
use crate::conversation::CoreError;
use axum::extract::State;
use serde_json::json;
use std::sync::Arc;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new().routes(routes!(stop_reply))
}

/// Stops the assistant's reply running in this session (chat sessions).
#[utoipa::path(post, path = "/api/sessions/{session_id}/stop", tag = "messages",
    params(("session_id" = String, Path)),
    responses((status = 200, body = OkDoc),
        (status = 404, body = ErrorDoc, description = "`session_not_found`"),
        (status = 409, body = ErrorDoc, description = "`not_supported` (the active kind cannot stop a reply), `nothing_running`"),
        (status = 502, body = ErrorDoc, description = "`abort_failed`"),
        (status = 503, body = ErrorDoc, description = "`gateway_offline`")))]
async fn stop_reply(State(api): State<Arc<ApiState>>, Param(id): Param) -> ApiResult {
    let sessions = api.conversation.sessions().await?;
    if sessions.iter().all(|s| s.session_id != id) {
        return Err(CoreError::SessionNotFound.into());
    }
    let kind = api.link.active();
    kind.abort(&id).await.map_err(|e| {
        tracing::info!(
            kind = kind.kind(),
            code = e.code,
            "stop refused: {}",
            e.message
        );
        ApiError::from(e)
    })?;
    Ok(Reply::ok(json!({"ok": true})))
}
