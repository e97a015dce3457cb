//! A call's kept audio and "Transcribe again" ([`crate::recordings`]):
//!
//! | route | answer |
//! |---|---|
//! | `GET /api/calls/{id}/recording` | `200 {keep, bytes, turns, transcribe}` |
//! | `PUT /api/calls/{id}/recording` `{keep}` | `200` the same shape; `keep: false` removes what was kept |
//! | `POST /api/calls/{id}/transcribe` `{model, language?}` | `202 {model, language, state, done, total}`; progress as `transcribe_progress` events |

use super::audio::ears;
use super::ApiState;
use crate::answers::{ApiError, ApiResult, ErrorDoc, JsonBody, Param, Reply};
use crate::audio::{check_language, AudioError};
use crate::conversation::CoreError;
use crate::model::SessionView;
use crate::recordings::{self, RecordingUpdate, RecordingView, TranscribeRequest, TranscribeView};
use axum::extract::State;
use axum::http::StatusCode;
use std::sync::Arc;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

type St = State<Arc<ApiState>>;

pub fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(get_recording, put_recording))
        .routes(routes!(transcribe))
}

/// The call (`404` when there is none, `409 not_a_call` for a chat).
async fn the_call(api: &ApiState, id: &str) -> Result<SessionView, ApiError> {
    let call = api
        .conversation
        .sessions()
        .await?
        .into_iter()
        .find(|s| s.session_id == id)
        .ok_or(CoreError::SessionNotFound)?;
    if !call.is_call {
        return Err(CoreError::NotACall.into());
    }
    Ok(call)
}

fn view(api: &ApiState, id: &str) -> RecordingView {
    let (bytes, turns) = recordings::usage(&api.data_dir, id);
    RecordingView {
        keep: recordings::keeps(&api.data_dir, id),
        bytes,
        turns,
        transcribe: api.ears.as_ref().and_then(|e| e.transcribing(id)),
    }
}

/// Whether the call keeps its audio, and what it takes on disk.
#[utoipa::path(get, path = "/api/calls/{session_id}/recording", tag = "calls",
    params(("session_id" = String, Path)),
    responses((status = 200, body = RecordingView), (status = 404, body = ErrorDoc),
        (status = 409, body = ErrorDoc, description = "`not_a_call`")))]
async fn get_recording(State(api): St, Param(id): Param) -> ApiResult {
    the_call(&api, &id).await?;
    Ok(Reply::ok(view(&api, &id)))
}

/// Keeps the call's audio from now on (`keep: true`), or removes everything kept of it.
#[utoipa::path(put, path = "/api/calls/{session_id}/recording", tag = "calls",
    params(("session_id" = String, Path)),
    request_body = RecordingUpdate,
    responses((status = 200, body = RecordingView), (status = 404, body = ErrorDoc),
        (status = 400, body = ErrorDoc, description = "`missing_field`, `invalid_field`"),
        (status = 409, body = ErrorDoc, description = "`not_a_call`, `transcribe_in_progress` (`keep: false` while it runs)"),
        (status = 500, body = ErrorDoc, description = "`recording_failed`: the folder cannot be written")))]
async fn put_recording(
    State(api): St,
    Param(id): Param,
    JsonBody(b): JsonBody<RecordingUpdate>,
) -> ApiResult {
    the_call(&api, &id).await?;
    let running =
        |e: &Arc<dyn crate::audio::Ears>| e.transcribing(&id).is_some_and(|t| t.state == "running");
    if !b.keep && api.ears.as_ref().is_some_and(running) {
        return Err(in_progress());
    }
    recordings::set_keep(&api.data_dir, &id, b.keep).map_err(|e| {
        ApiError::from(AudioError::internal(
            "recording_failed",
            format!("cannot change what is kept of the call's audio: {e}"),
        ))
    })?;
    Ok(Reply::ok(view(&api, &id)))
}

fn in_progress() -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "transcribe_in_progress",
        "this call is being transcribed again: wait for it to finish",
    )
}

/// Transcribes a past call again from its kept audio with a Whisper model. Each turn keeps its
/// speaker, time and place; its text (and language) is replaced, all turns at once or none.
/// The assistant is told nothing new.
#[utoipa::path(post, path = "/api/calls/{session_id}/transcribe", tag = "calls",
    params(("session_id" = String, Path)),
    request_body = TranscribeRequest,
    responses((status = 202, body = TranscribeView, description = "started; progress as `transcribe_progress` events"),
        (status = 400, body = ErrorDoc, description = "`missing_field`, `invalid_field`, `invalid_model`, `invalid_language`"),
        (status = 404, body = ErrorDoc),
        (status = 409, body = ErrorDoc, description = "`not_a_call`, `call_not_ended`, `no_recording`, `transcribe_in_progress`, `model_unavailable`"),
        (status = 503, body = ErrorDoc, description = "`audio_unavailable`: a build without audio")))]
async fn transcribe(
    State(api): St,
    Param(id): Param,
    JsonBody(b): JsonBody<TranscribeRequest>,
) -> ApiResult {
    let model = b.model.trim();
    if model.is_empty() || model.chars().count() > 4096 {
        return Err(ApiError::bad(
            "invalid_model",
            "`model`: a Whisper model's name or a model file's path",
        ));
    }
    if let Some(l) = b.language.as_deref() {
        check_language(l.trim())?;
    }
    let call = the_call(&api, &id).await?;
    if call.ended_at.is_none() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "call_not_ended",
            "the call is still going on: end it first",
        ));
    }
    if recordings::usage(&api.data_dir, &id).1 == 0 {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "no_recording",
            "this call's audio was not kept: there is nothing to transcribe again",
        ));
    }
    let request = TranscribeRequest {
        model: model.to_string(),
        language: b.language.map(|l| l.trim().to_string()),
    };
    let started = ears(&api)?.transcribe_again(&id, request).await?;
    Ok(Reply::new(StatusCode::ACCEPTED, started))
}
