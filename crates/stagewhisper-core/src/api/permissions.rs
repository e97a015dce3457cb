//! `POST /api/permissions/{request_id}`: the user's Allow / Deny on a permission card.
//!
//! The card must be pending (`409 already_resolved` once settled, by this app, another operator
//! or expiry); the decision goes to the active assistant kind
//! ([`crate::assistants::AssistantKind::decide_permission`]); the card is then settled in place
//! (a `message_updated` event) and answered as `200 {message}`.

use super::ApiState;
use crate::answers::{ApiError, ApiResult, ErrorDoc, JsonBody, Param, Reply};
use crate::conversation::Settled;
use crate::model::MessageView;
use crate::protocol::MAX_ID_LEN;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

pub fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new().routes(routes!(decide))
}

/// `POST /api/permissions/{request_id}`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct PermissionDecision {
    /// `allow` or `deny`.
    pub decision: String,
}

#[derive(Serialize, ToSchema)]
pub struct PermissionAnswer {
    /// The card (kind `permission`), settled.
    pub message: MessageView,
}

fn already(card: MessageView) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "already_resolved",
        format!(
            "this permission request is already settled ({})",
            card.state.as_deref().unwrap_or("settled")
        ),
    )
}

/// Allows or denies the tool a permission card asks about.
#[utoipa::path(post, path = "/api/permissions/{request_id}", tag = "messages",
    params(("request_id" = String, Path)),
    request_body = PermissionDecision,
    responses((status = 200, body = PermissionAnswer),
        (status = 400, body = ErrorDoc, description = "`invalid_decision`, `missing_field`"),
        (status = 404, body = ErrorDoc, description = "`permission_not_found`"),
        (status = 409, body = ErrorDoc, description = "`already_resolved`; `not_supported` when the active assistant kind takes no decisions"),
        (status = 503, body = ErrorDoc, description = "the decision could not be sent")))]
async fn decide(
    State(api): State<Arc<ApiState>>,
    Param(request_id): Param,
    JsonBody(b): JsonBody<PermissionDecision>,
) -> ApiResult {
    let allow = match b.decision.as_str() {
        "allow" => true,
        "deny" => false,
        _ => {
            return Err(ApiError::bad(
                "invalid_decision",
                "`decision` must be \"allow\" or \"deny\"",
            ))
        }
    };
    let not_found = || {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "permission_not_found",
            "no permission request with this id",
        )
    };
    if request_id.len() > MAX_ID_LEN {
        return Err(not_found());
    }
    let card = api
        .conversation
        .permission_card(&request_id)
        .await?
        .ok_or_else(not_found)?;
    if card.state.as_deref() != Some("pending") {
        return Err(already(card));
    }
    api.link
        .active()
        .decide_permission(&request_id, allow)
        .await?;
    // The kind may have settled it already (with who decided); else it is settled here.
    let state = if allow { "allow" } else { "deny" };
    let message = match api
        .conversation
        .settle_permission(&request_id, state, Some("you"))
        .await?
    {
        Settled::Now(m) => m,
        // Settled by the kind just now with this decision, or by someone else meanwhile.
        Settled::Already(m) if m.state.as_deref() == Some(state) => m,
        Settled::Already(m) => return Err(already(m)),
    };
    Ok(Reply::ok(PermissionAnswer { message }))
}
