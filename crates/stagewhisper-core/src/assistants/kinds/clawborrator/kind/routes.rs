//! The `clawborrator` kind's control route, `POST /api/assistant/clawborrator/sessions`: the
//! Claude Code sessions a clawborrator hub lists for the token (`GET /api/v1/sessions` on the
//! hub), for the settings' session picker.
//! The body names the hub and token being entered; absent fields use the saved settings (the
//! token is sent in the body, never in a URL, and never answered back).

use crate::answers::{ApiError, ApiResult, ErrorDoc, JsonBody, Reply};
use crate::assistants::{AssistantContext, KindRoutes};
use axum::extract::State;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// The route, over the kind's context (it reads the saved settings).
pub fn routes(ctx: Arc<AssistantContext>) -> KindRoutes {
    OpenApiRouter::new()
        .routes(routes!(hub_sessions))
        .with_state(ctx)
}

#[derive(Debug, Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct HubSessionsQuery {
    /// `https://…` (or `http://` to this computer); absent: the saved one.
    pub hub_url: Option<String>,
    /// `cw_sess_…`; absent or blank: the saved one.
    pub session_token: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct HubSessionDoc {
    pub id: String,
    pub routing_name: Option<String>,
    pub cwd: Option<String>,
    pub host: Option<String>,
    /// Whether its Claude Code session is connected, when the hub says.
    pub online: Option<bool>,
}

#[derive(Serialize, ToSchema)]
pub struct HubSessionsDoc {
    pub sessions: Vec<HubSessionDoc>,
}

/// Lists the hub's Claude Code sessions for the settings picker.
#[utoipa::path(post, path = "/api/assistant/clawborrator/sessions", tag = "assistant",
    request_body = HubSessionsQuery,
    responses((status = 200, body = HubSessionsDoc),
        (status = 400, body = ErrorDoc, description = "`invalid_url`, `insecure_url`, `invalid_token`, `missing_field`"),
        (status = 502, body = ErrorDoc, description = "the hub refused (`auth_failed`) or could not be reached")))]
async fn hub_sessions(
    State(ctx): State<Arc<AssistantContext>>,
    JsonBody(b): JsonBody<serde_json::Value>,
) -> ApiResult {
    super::list_sessions(&ctx, &b)
        .await
        .map(Reply::ok)
        .map_err(ApiError::from)
}
