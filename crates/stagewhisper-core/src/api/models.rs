//! Models a person chooses: the model routes (thin callers of [`crate::models::Models`]).
//!
//! | route | answer |
//! |---|---|
//! | `GET /api/models` | `200 {models_dir, disk_used, models: [model]}` |
//! | `POST /api/models/{name}/download` | `202 {state, done, total}`; progress as `model_download` events |
//! | `DELETE /api/models/{name}/download` | `200 {state: "cancelled", …}` |
//! | `POST /api/models/import` `{path, name?}` | `201 {model}` |
//! | `DELETE /api/models/{name}` | `200 {"ok": true}` |

use super::ApiState;
use crate::answers::{ApiError, ApiResult, ErrorDoc, JsonBody, OkDoc, Param, Reply};
use crate::models::{DownloadView, ImportModel, ModelError, ModelView, Models, ModelsView};
use axum::extract::State;
use axum::http::StatusCode;
use std::sync::Arc;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

type St = State<Arc<ApiState>>;

pub fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(list))
        .routes(routes!(download, cancel))
        .routes(routes!(import))
        .routes(routes!(remove))
}

impl From<ModelError> for ApiError {
    fn from(e: ModelError) -> Self {
        let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        ApiError::new(status, e.code, e.message)
    }
}

/// The shelf, or `503 models_unavailable` in a build without one.
fn shelf(api: &ApiState) -> Result<&Arc<dyn Models>, ApiError> {
    api.models
        .as_ref()
        .ok_or_else(|| ModelError::unavailable().into())
}

/// The known speech models and the installed ones, with the disk they use.
#[utoipa::path(get, path = "/api/models", tag = "models",
    responses((status = 200, body = ModelsView),
        (status = 500, body = ErrorDoc, description = "`catalog_invalid`: the catalogue file named by STAGEWHISPER_MODEL_CATALOG cannot be read"),
        (status = 503, body = ErrorDoc, description = "`models_unavailable`: a build without speech models")))]
async fn list(State(api): St) -> ApiResult {
    Ok(Reply::ok(shelf(&api)?.list().await?))
}

/// Starts downloading a model of the catalogue from its public home; progress and the end come
/// as `model_download` events (live-only). Nothing is installed until every byte is checked
/// against the catalogue's SHA-256.
#[utoipa::path(post, path = "/api/models/{name}/download", tag = "models",
    params(("name" = String, Path)),
    responses((status = 202, body = DownloadView),
        (status = 404, body = ErrorDoc, description = "`unknown_model`: not in the catalogue"),
        (status = 409, body = ErrorDoc, description = "`already_installed`, `download_in_progress`"),
        (status = 507, body = ErrorDoc, description = "`disk_full`: less free space than the model needs")))]
async fn download(State(api): St, Param(name): Param) -> ApiResult {
    let view = shelf(&api)?.download(&name)?;
    Ok(Reply::new(StatusCode::ACCEPTED, view))
}

/// Cancels a running download; what arrived is removed.
#[utoipa::path(delete, path = "/api/models/{name}/download", tag = "models",
    params(("name" = String, Path)),
    responses((status = 200, body = DownloadView),
        (status = 404, body = ErrorDoc, description = "`not_downloading`: no download of that model is running")))]
async fn cancel(State(api): St, Param(name): Param) -> ApiResult {
    Ok(Reply::ok(shelf(&api)?.cancel(&name).await?))
}

/// "Use a file I have": checks that a file on this computer is a whisper.cpp model and copies it
/// into the models folder under a name.
#[utoipa::path(post, path = "/api/models/import", tag = "models",
    request_body = ImportModel,
    responses((status = 201, body = ModelView),
        (status = 400, body = ErrorDoc, description = "`file_not_found`, `invalid_model_file` (not a whisper.cpp ggml model), `invalid_name`"),
        (status = 409, body = ErrorDoc, description = "`model_exists`: a model of that name is installed; `name_taken`: the catalogue's name for another file"),
        (status = 507, body = ErrorDoc, description = "`disk_full`")))]
async fn import(State(api): St, JsonBody(b): JsonBody<ImportModel>) -> ApiResult {
    let view = shelf(&api)?.import(b).await?;
    Ok(Reply::new(StatusCode::CREATED, view))
}

/// Removes an installed model (or what an unfinished download left).
#[utoipa::path(delete, path = "/api/models/{name}", tag = "models",
    params(("name" = String, Path)),
    responses((status = 200, body = OkDoc),
        (status = 404, body = ErrorDoc, description = "`unknown_model`, `not_installed`"),
        (status = 409, body = ErrorDoc, description = "`download_in_progress`: cancel it first")))]
async fn remove(State(api): St, Param(name): Param) -> ApiResult {
    shelf(&api)?.remove(&name).await?;
    Ok(Reply::ok(OkDoc { ok: true }))
}
