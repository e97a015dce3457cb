//! Noticing the call: the detection routes (thin callers of [`crate::audio::Ears`]).
//!
//! | route | answer |
//! |---|---|
//! | `GET /api/audio/detection` | `200 {enabled, offers, ignored_apps, end_after_secs, end_offers, status}` |
//! | `PUT /api/audio/detection` `{enabled?, ignored_apps?, end_after_secs?}` | `200` the same shape |
//! | `POST /api/audio/detection/accept` `{app, title?}` | `201` the call started, listening (as `POST /api/calls`) |
//! | `POST /api/audio/detection/dismiss` `{app, never?}` | `200` the detection view |

use super::audio::ears;
use super::routes::{CreatedCall, MAX_TITLE};
use super::ApiState;
use crate::answers::{ApiError, ApiResult, ErrorDoc, JsonBody, Reply};
use crate::detect::{
    check_app, not_offered, AcceptOffer, DetectionUpdate, DetectionView, DismissOffer,
};
use axum::extract::State;
use axum::http::StatusCode;
use std::sync::Arc;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

type St = State<Arc<ApiState>>;

pub fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(get_detection, put_detection))
        .routes(routes!(accept))
        .routes(routes!(dismiss))
}

/// Call detection: whether it watches, the applications offered now, those never offered.
#[utoipa::path(get, path = "/api/audio/detection", tag = "audio",
    responses((status = 200, body = DetectionView),
        (status = 503, body = ErrorDoc, description = "`audio_unavailable`: a build without audio")))]
async fn get_detection(State(api): St) -> ApiResult {
    Ok(Reply::ok(ears(&api)?.detection()?))
}

/// Switches call detection on or off, sets the applications never offered and the grace period
/// before a call started from an offer ends by itself.
#[utoipa::path(put, path = "/api/audio/detection", tag = "audio",
    request_body = DetectionUpdate,
    responses((status = 200, body = DetectionView),
        (status = 400, body = ErrorDoc, description = "`invalid_app`, `invalid_field`"),
        (status = 500, body = ErrorDoc, description = "`config_write_failed`"),
        (status = 503, body = ErrorDoc, description = "`audio_unavailable`: a build without audio")))]
async fn put_detection(State(api): St, JsonBody(b): JsonBody<DetectionUpdate>) -> ApiResult {
    let ears = ears(&api)?;
    b.check()?;
    Ok(Reply::ok(ears.set_detection(b).await?))
}

/// Start listening: a call starts (as `POST /api/calls` with `listen: true`) and the offer
/// closes; when the application lets go of the microphone the call is offered to end.
#[utoipa::path(post, path = "/api/audio/detection/accept", tag = "audio",
    request_body = AcceptOffer,
    responses((status = 201, body = CreatedCall),
        (status = 400, body = ErrorDoc, description = "`invalid_app`, `title_too_long`, `missing_field`"),
        (status = 404, body = ErrorDoc, description = "`offer_not_found`: that application is not offered (it let go of the microphone)"),
        (status = 503, body = ErrorDoc, description = "`audio_unavailable`")))]
async fn accept(State(api): St, JsonBody(b): JsonBody<AcceptOffer>) -> ApiResult {
    let ears = ears(&api)?.clone();
    check_app("app", &b.app)?;
    if b.title
        .as_ref()
        .is_some_and(|t| t.trim().chars().count() > MAX_TITLE)
    {
        return Err(ApiError::bad(
            "title_too_long",
            format!("a title is at most {MAX_TITLE} characters"),
        ));
    }
    let offer = ears
        .detection()?
        .offers
        .into_iter()
        .find(|o| o.app == b.app)
        .ok_or_else(|| not_offered(&b.app))?;
    let title = b
        .title
        .filter(|t| !t.trim().is_empty())
        .unwrap_or_else(|| format!("Call in {}", offer.label.trim_start_matches("a call in ")));
    let s = api.conversation.create_session(true, Some(title)).await?;
    // Listening is an intent (as `POST /api/calls`): a sound server that is not there shows
    // in the status, and listening starts when it comes.
    if let Err(e) = ears.listen(&s.session_id).await {
        tracing::warn!(code = e.code, error = %e, "the offered call could not start listening");
    }
    ears.offer_accepted(&offer.app, &s.session_id);
    Ok(Reply::new(
        StatusCode::CREATED,
        CreatedCall {
            session_id: s.session_id.clone(),
            insights_session_id: s.insights_session_id.clone(),
            session: s,
        },
    ))
}

/// "Not now" (`never: true`: never for this application, remembered), or keep a call that was
/// offered to end.
#[utoipa::path(post, path = "/api/audio/detection/dismiss", tag = "audio",
    request_body = DismissOffer,
    responses((status = 200, body = DetectionView),
        (status = 400, body = ErrorDoc, description = "`invalid_app`, `missing_field`, `invalid_field` (`never` with 100 apps never offered already)"),
        (status = 404, body = ErrorDoc, description = "`offer_not_found` (without `never`)"),
        (status = 500, body = ErrorDoc, description = "`config_write_failed`"),
        (status = 503, body = ErrorDoc, description = "`audio_unavailable`")))]
async fn dismiss(State(api): St, JsonBody(b): JsonBody<DismissOffer>) -> ApiResult {
    let ears = ears(&api)?;
    check_app("app", &b.app)?;
    Ok(Reply::ok(ears.dismiss_offer(&b.app, b.never).await?))
}
