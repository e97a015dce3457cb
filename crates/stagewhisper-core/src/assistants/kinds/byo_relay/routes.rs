//! The `byo` kind's control routes: `POST /api/assistant/pairing` (a one-use pairing code and
//! the commands to run on the assistant's computer), `POST /api/assistant/byo/probe` (the
//! capability probe again: "Refresh") and `POST /api/assistant/byo/test` (the connection test).

use super::kind::ByoKind;
use crate::answers::{ApiResult, ErrorDoc, Reply};
use crate::assistants::KindRoutes;
use axum::extract::State;
use axum::http::StatusCode;
use serde::Serialize;
use serde_json::json;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

type St = State<ByoKind>;

/// The routes, over `kind` (registered whether the kind is active or not).
pub fn routes(kind: ByoKind) -> KindRoutes {
    OpenApiRouter::new()
        .routes(routes!(pairing))
        .routes(routes!(probe))
        .routes(routes!(test))
        .with_state(kind)
}

#[derive(Serialize, ToSchema)]
pub struct PairingCommands {
    pub hermes: String,
    pub openclaw: String,
}

#[derive(Serialize, ToSchema)]
pub struct PairingDoc {
    /// `ABCDE-FGHJK` (one use, 10 minutes).
    pub code: String,
    pub expires_at: String,
    /// The advertised callback URL (the tunnel's origin while one is up).
    pub api_url: String,
    /// `stagewhisper-hermes pair --code <code> --api-url <api_url>`.
    pub command: String,
    pub commands: PairingCommands,
}

#[derive(Serialize, ToSchema)]
pub struct JobStarted {
    pub job_id: String,
}

/// A new pairing code for the BYO relay (replaces any earlier one).
#[utoipa::path(post, path = "/api/assistant/pairing", tag = "assistant",
    responses((status = 201, body = PairingDoc), (status = 400, body = ErrorDoc)))]
async fn pairing(State(kind): St) -> ApiResult {
    Ok(Reply::new(StatusCode::CREATED, kind.new_pairing()))
}

/// Sends the capability probe again (Settings → Assistant → Refresh).
#[utoipa::path(post, path = "/api/assistant/byo/probe", tag = "assistant",
    responses((status = 202, body = JobStarted), (status = 409, body = ErrorDoc, description = "`not_paired`")))]
async fn probe(State(kind): St) -> ApiResult {
    let id = kind.probe(true).await?;
    Ok(Reply::new(StatusCode::ACCEPTED, json!({"job_id": id})))
}

/// The connection test (a `connectivity_test` task; the answer shows as `last_test`).
#[utoipa::path(post, path = "/api/assistant/byo/test", tag = "assistant",
    responses((status = 202, body = JobStarted), (status = 409, body = ErrorDoc, description = "`not_paired`")))]
async fn test(State(kind): St) -> ApiResult {
    let id = kind.test_connection().await?;
    Ok(Reply::new(
        StatusCode::ACCEPTED,
        json!({"test_id": id, "job_id": id}),
    ))
}
