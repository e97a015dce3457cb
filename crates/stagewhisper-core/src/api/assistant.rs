//! The assistant routes every kind shares (the handlers are thin callers of [`Assistants`];
//! a kind's own routes come from the kind, see
//! [`crate::assistants::AssistantKind::control_routes`]):
//!
//! | route | answer |
//! |---|---|
//! | `GET /api/assistant` | `200 {kind, status, detail, …}` (the active kind's view) |
//! | `PUT /api/assistant` `{kind?, …the kind's settings}` | `200` the same view, after a first check |
//! | `GET /api/providers` | `200 {active_kind, kinds, providers}` (the provider registry) |
//! | `GET /api/assistant/kinds` | `200 {active_kind, kinds}` (the list of kinds: names, settings fields, capabilities) |
//! | `DELETE /api/assistant` | `200` the view (`not_configured`) |
//! | `POST /api/assistant/check` | `200` the view, after checking now |

use super::ApiState;
use crate::answers::{ApiError, ApiResult, ErrorDoc, JsonBody, Reply};
use crate::assistants::kinds::{KindInfo, KindList};
use crate::model::double_option;
use axum::extract::State;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

type St = State<Arc<ApiState>>;

pub fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(get_assistant, put_assistant, delete_assistant))
        .routes(routes!(check_assistant))
        .routes(routes!(get_providers))
        .routes(routes!(get_kinds))
}

/// `PUT /api/assistant`: `kind` picks the assistant kind (absent: `incoming`); the other fields
/// are that kind's settings, checked by the kind (these are `incoming`'s). A body with only `kind`
/// switches to that kind with its saved settings.
#[derive(Debug, Deserialize, ToSchema)]
#[allow(dead_code)]
pub struct AssistantUpdate {
    /// `incoming`: `http://` with a loopback host (a path prefix is allowed); required unless
    /// the body only switches kinds.
    pub base_url: Option<String>,
    /// 16–4096 visible characters; absent or blank keeps the saved one.
    pub relay_token: Option<String>,
    /// The coaching framing (`{title}` = the call's title); `null` restores the default, absent
    /// keeps the saved one.
    #[serde(default, deserialize_with = "double_option")]
    #[schema(value_type = Option<String>)]
    pub prelude: Option<Option<String>>,
    /// How replies come back; absent keeps the saved mode.
    #[schema(value_type = Option<ModeDoc>)]
    pub mode: Option<String>,
    /// The kind of assistant (`GET /api/providers` lists them); absent: `incoming`.
    pub kind: Option<String>,
    /// `clawborrator`: the hub's base URL, `https://` (plain `http://` only to this computer).
    pub hub_url: Option<String>,
    /// `clawborrator`: the operator session token (`cw_sess_…`); absent or blank keeps the
    /// saved one; never answered back.
    pub session_token: Option<String>,
    /// `clawborrator`: the Claude Code session to attach to.
    pub session_id: Option<String>,
    /// `clawborrator`: a second session for the call's insights; `null` or empty: none.
    pub insights_session_id: Option<String>,
}

/// How replies come back.
#[derive(Serialize, ToSchema)]
#[schema(as = Mode)]
#[allow(dead_code)]
#[serde(rename_all = "lowercase")]
enum ModeDoc {
    Auto,
    Callback,
    Events,
}

/// `{assistant}`: the active kind's configuration and status (see docs/contract.md, "Assistant
/// kinds"). `kind`, `status` and `detail` are common to every kind; the rest are `incoming`'s.
#[derive(Serialize, ToSchema)]
#[schema(as = Assistant)]
pub struct AssistantDoc {
    pub kind: String,
    /// `online` means ready to converse, for every kind; `incoming` also has `not_configured`,
    /// `checking`, `auth_failed`, `unreachable`, `misconfigured`.
    pub status: String,
    pub detail: String,
    /// A peer version the app is not tested with, in plain words.
    pub warning: Option<String>,
    pub configured: Option<bool>,
    pub base_url: Option<String>,
    pub relay_token_set: Option<bool>,
    pub checked_at: Option<String>,
    pub supports_events_fallback: Option<bool>,
    /// `auto`, `callback` or `events`.
    pub mode: Option<String>,
    /// `callback`, `events` or `none`.
    pub delivery: Option<String>,
}

/// `GET /api/providers`: every assistant kind and the real peers each one serves.
#[derive(Serialize, ToSchema)]
#[schema(as = Providers)]
pub struct ProvidersDoc {
    pub active_kind: String,
    /// The list of kinds (the same entries as `GET /api/assistant/kinds`).
    pub kinds: Vec<KindInfo>,
    pub providers: Vec<serde_json::Value>,
}

/// The active assistant kind's configuration and status.
#[utoipa::path(get, path = "/api/assistant", tag = "assistant",
    responses((status = 200, body = AssistantDoc)))]
async fn get_assistant(State(api): St) -> ApiResult {
    Ok(Reply::ok(api.link.view()))
}

/// The provider registry: each assistant kind and each real peer it serves.
#[utoipa::path(get, path = "/api/providers", tag = "assistant",
    responses((status = 200, body = ProvidersDoc)))]
async fn get_providers(State(api): St) -> ApiResult {
    Ok(Reply::ok(api.link.providers()))
}

/// Every assistant kind of this app (the one list the app starts them from): id, name, the
/// settings fields of `PUT /api/assistant`, what it can do; the active one named.
#[utoipa::path(get, path = "/api/assistant/kinds", tag = "assistant",
    responses((status = 200, body = KindList)))]
async fn get_kinds(State(api): St) -> ApiResult {
    Ok(Reply::ok(api.link.kind_list()))
}

/// Picks the assistant kind and saves its settings, checks them, and answers the resulting view.
#[utoipa::path(put, path = "/api/assistant", tag = "assistant",
    request_body = AssistantUpdate,
    responses((status = 200, body = AssistantDoc),
        (status = 400, body = ErrorDoc, description = "`unknown_kind`, `kind_not_available`; for `incoming`: `invalid_base_url`, `invalid_relay_token`, `missing_field`, `invalid_field`, `prelude_too_long`; for `clawborrator`: `invalid_url`, `insecure_url`, `invalid_token`, `invalid_session`, `invalid_insights_session`, `missing_field`, `invalid_field`"),
        (status = 500, body = ErrorDoc, description = "`config_write_failed`")))]
async fn put_assistant(State(api): St, JsonBody(b): JsonBody<serde_json::Value>) -> ApiResult {
    api.link.put(&b).await.map(Reply::ok).map_err(|e| {
        tracing::warn!(code = e.code, error = %e, "assistant configuration refused");
        ApiError::from(e)
    })
}

/// The active kind forgets its settings (for `incoming` the token file is deleted).
#[utoipa::path(delete, path = "/api/assistant", tag = "assistant",
    responses((status = 200, body = AssistantDoc)))]
async fn delete_assistant(State(api): St) -> ApiResult {
    Ok(Reply::ok(api.link.remove().await))
}

/// Checks the assistant now.
#[utoipa::path(post, path = "/api/assistant/check", tag = "assistant",
    responses((status = 200, body = AssistantDoc)))]
async fn check_assistant(State(api): St) -> ApiResult {
    Ok(Reply::ok(api.link.check().await))
}
