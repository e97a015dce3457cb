//! Hearing the call: the audio routes (thin callers of [`crate::audio::Ears`]).
//!
//! | route | answer |
//! |---|---|
//! | `GET /api/audio/sources` | `200 [{name, description, kind, is_default}]`; `503 audio_unavailable` |
//! | `GET /api/audio` | `200 {mic, system, engine, you_label, them_label, status}` |
//! | `PUT /api/audio` `{mic?, system?, engine?, you_label?, them_label?}` | `200` the same shape |
//! | `POST /api/calls/{id}/listen` | `200 {"listening": true}` |
//! | `DELETE /api/calls/{id}/listen` | `200 {"listening": false}` |
//! | `POST /api/audio/test` `{channel?, seconds?}` | `200 {channel, source, seconds, peak, text}` |
//! | `POST /api/audio/meters` `{seconds?}` | `200 {"ok": true}`: levels for a while without listening |
//! | `POST /api/audio/engine/check` `{engine?}` | `200 {ok, code, kind, message, saved}`: the engine tried |

use super::ApiState;
use crate::answers::{ApiError, ApiResult, ErrorDoc, JsonBody, OkDoc, Param, Reply};
use crate::audio::EngineCheckRequest;
use crate::audio::{
    AudioError, AudioTest, AudioTestResult, AudioUpdate, AudioView, Ears, SourceView,
};
use crate::conversation::CoreError;
use crate::engine_check::EngineCheck;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

type St = State<Arc<ApiState>>;

pub fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(sources))
        .routes(routes!(get_audio, put_audio))
        .routes(routes!(listen, stop_listening))
        .routes(routes!(test))
        .routes(routes!(meters))
        .routes(routes!(check_engine))
}

impl From<AudioError> for ApiError {
    fn from(e: AudioError) -> Self {
        let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        ApiError::new(status, e.code, e.message)
    }
}

/// The pipeline, or `503 audio_unavailable` in a build without one.
pub(crate) fn ears(api: &ApiState) -> Result<&Arc<dyn Ears>, ApiError> {
    api.ears.as_ref().ok_or_else(|| {
        AudioError::unavailable("this build of the app cannot hear calls (no audio pipeline)")
            .into()
    })
}

/// `{"listening": bool}`.
#[derive(Serialize, ToSchema)]
pub struct Listening {
    pub listening: bool,
}

/// `POST /api/audio/meters`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct Meters {
    /// 1–60 (default 10).
    pub seconds: Option<u32>,
}

/// The sound server's microphones and monitors.
#[utoipa::path(get, path = "/api/audio/sources", tag = "audio",
    responses((status = 200, body = Vec<SourceView>),
        (status = 503, body = ErrorDoc, description = "`audio_unavailable`: no sound server is reachable (the message says why)")))]
async fn sources(State(api): St) -> ApiResult {
    Ok(Reply::ok(ears(&api)?.sources().await?))
}

/// The audio settings and the pipeline's status.
#[utoipa::path(get, path = "/api/audio", tag = "audio",
    responses((status = 200, body = AudioView),
        (status = 503, body = ErrorDoc, description = "`audio_unavailable`: a build without audio")))]
async fn get_audio(State(api): St) -> ApiResult {
    Ok(Reply::ok(ears(&api)?.view()))
}

/// Saves the audio settings; while listening they take effect without stopping the call.
#[utoipa::path(put, path = "/api/audio", tag = "audio",
    request_body = AudioUpdate,
    responses((status = 200, body = AudioView),
        (status = 400, body = ErrorDoc, description = "`unknown_source`, `invalid_url`, `invalid_model`, `invalid_api_key`, `invalid_label`, `missing_field`, `invalid_field` (an unknown engine `kind`)"),
        (status = 500, body = ErrorDoc, description = "`config_write_failed`"),
        (status = 503, body = ErrorDoc, description = "`audio_unavailable`: a build without audio (without a sound server a source name is saved unchecked)")))]
async fn put_audio(State(api): St, JsonBody(b): JsonBody<AudioUpdate>) -> ApiResult {
    let ears = ears(&api)?;
    b.check()?;
    Ok(Reply::ok(ears.update(b).await?))
}

/// Starts listening to the call, microphone as "You" and the call's audio as "Them" (one call
/// listens at a time: another call's listening stops).
#[utoipa::path(post, path = "/api/calls/{session_id}/listen", tag = "audio",
    params(("session_id" = String, Path)),
    responses((status = 200, body = Listening), (status = 404, body = ErrorDoc),
        (status = 409, body = ErrorDoc, description = "`call_ended`, `not_a_call`")))]
async fn listen(State(api): St, Param(id): Param) -> ApiResult {
    let ears = ears(&api)?;
    api.conversation.live_call(&id).await?;
    ears.listen(&id).await?;
    Ok(Reply::ok(Listening { listening: true }))
}

/// Stops listening to the call (turns already heard are still transcribed and stored).
#[utoipa::path(delete, path = "/api/calls/{session_id}/listen", tag = "audio",
    params(("session_id" = String, Path)),
    responses((status = 200, body = Listening), (status = 404, body = ErrorDoc)))]
async fn stop_listening(State(api): St, Param(id): Param) -> ApiResult {
    let ears = ears(&api)?;
    if !api
        .conversation
        .sessions()
        .await?
        .iter()
        .any(|s| s.session_id == id)
    {
        return Err(CoreError::SessionNotFound.into());
    }
    ears.stop(Some(&id)).await;
    Ok(Reply::ok(Listening { listening: false }))
}

/// Records a few seconds of one channel and transcribes them with the current engine (nothing
/// is stored).
#[utoipa::path(post, path = "/api/audio/test", tag = "audio", operation_id = "audio_test",
    request_body(content = AudioTest, description = "optional"),
    responses((status = 200, body = AudioTestResult),
        (status = 400, body = ErrorDoc, description = "`invalid_field`; `channel_off`: that channel has no source"),
        (status = 409, body = ErrorDoc, description = "`listening`: a call is being listened to (what the test records would go into its transcript); `app_only`: the channel hears one application's sound, which only a listening call records"),
        (status = 502, body = ErrorDoc, description = "`engine_failed`: the engine did not answer (the message says why)"),
        (status = 503, body = ErrorDoc, description = "`audio_unavailable`, `source_unavailable`")))]
async fn test(State(api): St, JsonBody(b): JsonBody<AudioTest>) -> ApiResult {
    let ears = ears(&api)?;
    if b.seconds.is_some_and(|s| !(1..=10).contains(&s)) {
        return Err(ApiError::bad("invalid_field", "`seconds`: 1–10"));
    }
    Ok(Reply::ok(ears.test(b).await?))
}

/// Publishes both sources' levels (`audio_level` events) for a while without listening, for
/// the meters of Settings → Audio; call it again to keep them going.
#[utoipa::path(post, path = "/api/audio/meters", tag = "audio",
    request_body(content = Meters, description = "optional"),
    responses((status = 200, body = OkDoc), (status = 400, body = ErrorDoc),
        (status = 503, body = ErrorDoc, description = "`audio_unavailable`")))]
async fn meters(State(api): St, JsonBody(b): JsonBody<Meters>) -> ApiResult {
    let ears = ears(&api)?;
    let seconds = b.seconds.unwrap_or(10);
    if !(1..=60).contains(&seconds) {
        return Err(ApiError::bad("invalid_field", "`seconds`: 1–60"));
    }
    ears.meters(seconds).await?;
    Ok(Reply::ok(OkDoc { ok: true }))
}

/// Tries a speech engine now (`engine` absent: the saved one) on half a second of silence: a
/// server engine gets one short request, a local one loads its model. A failing engine is a
/// `200` with `ok: false` and its code; the saved engine's outcome is also its status.
#[utoipa::path(post, path = "/api/audio/engine/check", tag = "audio",
    request_body(content = EngineCheckRequest, description = "optional"),
    responses((status = 200, body = EngineCheck),
        (status = 400, body = ErrorDoc, description = "`invalid_url`, `invalid_model`, `invalid_api_key`, `missing_field`, `invalid_field` (as `PUT /api/audio`)"),
        (status = 503, body = ErrorDoc, description = "`audio_unavailable`: a build without audio")))]
async fn check_engine(State(api): St, JsonBody(b): JsonBody<EngineCheckRequest>) -> ApiResult {
    let ears = ears(&api)?;
    let update = AudioUpdate {
        engine: b.engine,
        ..AudioUpdate::default()
    };
    update.check()?;
    Ok(Reply::ok(ears.check_engine(update.engine).await?))
}
