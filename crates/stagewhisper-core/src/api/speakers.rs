//! Who said it: a call's speakers renamed, and the voiceprints kept of the people named.
//!
//! | route | answer |
//! |---|---|
//! | `PUT /api/calls/{id}/speakers/{label}` `{name}` | `200 {session_id, label, name, turns, voiceprint}`: every turn of `label` in the call is `name`'s |
//! | `GET /api/voiceprints` | `200 [{id, name, speech_seconds, created_at, updated_at}]` |
//! | `DELETE /api/voiceprints/{id}` | `200 {"ok": true}`; `404 voiceprint_not_found` |
//!
//! A rename during the call also names the voice's next turns; the voice told apart by the
//! speaker model (the call listened to, or the last one) is kept as `name`'s voiceprint
//! ([`crate::voiceprints`]), so the next call names it at once.

use super::ApiState;
use crate::answers::{ApiError, ApiResult, ErrorDoc, JsonBody, OkDoc, Param, Params2, Reply};
use crate::audio::MAX_SPEAKER;
use crate::conversation::SpeakerChange;
use crate::voiceprints::{VoiceprintError, VoiceprintView, Voiceprints};
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
        .routes(routes!(rename_speaker))
        .routes(routes!(list_voiceprints))
        .routes(routes!(forget_voiceprint))
}

/// `PUT /api/calls/{id}/speakers/{label}`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct SpeakerName {
    /// The speaker's name from now on: 1–100 characters, no control characters.
    pub name: String,
}

/// A rename done.
#[derive(Debug, Serialize, ToSchema)]
pub struct SpeakerRenamed {
    pub session_id: String,
    /// The name the turns had.
    pub label: String,
    pub name: String,
    /// The turns that changed.
    pub turns: usize,
    /// The voiceprint kept under `name`, when the voice was told apart in this call.
    pub voiceprint: Option<VoiceprintView>,
}

fn stored(e: VoiceprintError) -> ApiError {
    ApiError::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        "voiceprints_unavailable",
        e,
    )
}

fn check_name(name: &str) -> Result<String, ApiError> {
    let name = name.trim();
    let n = name.chars().count();
    if n == 0 || n > MAX_SPEAKER || name.chars().any(char::is_control) {
        return Err(ApiError::bad(
            "invalid_field",
            format!("`name`: 1–{MAX_SPEAKER} characters, no control characters"),
        ));
    }
    Ok(name.to_string())
}

/// Renames a speaker of a call: every turn of `label` (exactly as shown, e.g. `Speaker 2`) in
/// the call takes `name` (the `transcript_updated` events carry them), during the call and
/// afterwards; a voice told apart in the call is remembered as `name`'s voiceprint.
#[utoipa::path(put, path = "/api/calls/{session_id}/speakers/{label}", tag = "speakers",
    params(("session_id" = String, Path), ("label" = String, Path, description = "the speaker's name as the turns show it")),
    request_body = SpeakerName,
    responses((status = 200, body = SpeakerRenamed),
        (status = 404, body = ErrorDoc, description = "`session_not_found`; `speaker_not_found`: no turn and no voice of the call has that name"),
        (status = 409, body = ErrorDoc, description = "`not_a_call`"),
        (status = 500, body = ErrorDoc, description = "`voiceprints_unavailable`: the voiceprints file cannot be read or written")))]
async fn rename_speaker(
    State(api): St,
    Params2(id, label): Params2,
    JsonBody(b): JsonBody<SpeakerName>,
) -> ApiResult {
    let name = check_name(&b.name)?;
    let print = api
        .ears
        .as_ref()
        .and_then(|e| e.rename_speaker(&id, &label, &name));
    let change = SpeakerChange::Rename {
        from: label.clone(),
        to: name.clone(),
    };
    let turns = api.conversation.set_speakers(&id, change).await?;
    if turns == 0 && print.is_none() && label != name {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "speaker_not_found",
            format!("no turn of this call is by \"{label}\""),
        ));
    }
    let voiceprint = match print {
        Some(p) if label != name => {
            let vp = Voiceprints::new(&api.data_dir);
            let now = crate::clock::fmt_time(api.conversation.clock().now());
            let (n, at) = (name.clone(), now);
            let kept = tokio::task::spawn_blocking(move || {
                vp.remember(&n, &p.embedding, p.speech_ms, &at)
            })
            .await
            .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e))?
            .map_err(stored)?;
            Some(VoiceprintView::from(&kept))
        }
        _ => None,
    };
    Ok(Reply::ok(SpeakerRenamed {
        session_id: id,
        label,
        name,
        turns,
        voiceprint,
    }))
}

/// The people known by voice (kept on this computer), oldest first.
#[utoipa::path(get, path = "/api/voiceprints", tag = "speakers",
    responses((status = 200, body = Vec<VoiceprintView>),
        (status = 500, body = ErrorDoc, description = "`voiceprints_unavailable`")))]
async fn list_voiceprints(State(api): St) -> ApiResult {
    let vp = Voiceprints::new(&api.data_dir);
    let list = tokio::task::spawn_blocking(move || vp.list())
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e))?
        .map_err(stored)?;
    Ok(Reply::ok(
        list.iter().map(VoiceprintView::from).collect::<Vec<_>>(),
    ))
}

/// Forgets a voiceprint: the next calls no longer know that voice (turns already named keep
/// their name).
#[utoipa::path(delete, path = "/api/voiceprints/{id}", tag = "speakers",
    params(("id" = String, Path)),
    responses((status = 200, body = OkDoc),
        (status = 404, body = ErrorDoc, description = "`voiceprint_not_found`"),
        (status = 500, body = ErrorDoc, description = "`voiceprints_unavailable`")))]
async fn forget_voiceprint(State(api): St, Param(id): Param) -> ApiResult {
    let vp = Voiceprints::new(&api.data_dir);
    let gone = tokio::task::spawn_blocking(move || vp.forget(&id))
        .await
        .map_err(|e| ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", e))?
        .map_err(stored)?;
    if !gone {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "voiceprint_not_found",
            "no voiceprint has this id",
        ));
    }
    Ok(Reply::ok(OkDoc { ok: true }))
}
