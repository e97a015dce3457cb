//! The routes of a call's transcript and of a message's retry, and the test-only faults:
//!
//! | route | answer |
//! |---|---|
//! | `POST /api/calls/{id}/transcript` `{speaker?, text, is_final?}` | `201 {transcript}`; `202 {"stored":false}` when `is_final` is false |
//! | `GET /api/calls/{id}/transcript` | `200 [transcript]` oldest first |
//! | `POST /api/calls/{id}/summarise` | `201 {message}` (a user message asking for the summary) |
//! | `POST /api/sessions/{id}/messages/{row}/retry` | `200 {message}` (or `{transcript}`) pending again under a new task id |
//! | `GET/POST /api/test/faults` | test-only fault injection (404 unless enabled) |

use super::summary;
use super::ApiState;
use crate::answers::{
    from_value, parse_object, ApiError, ApiResult, ErrorDoc, JsonBody, Param, Params2, Reply,
};
use crate::conversation::{CoreError, DeliveryState, DeliveryUpdate};
use crate::faults::Faults;
use crate::model::{MessageKind, MessageView, TranscriptView};
use crate::protocol::{Status, INSIGHTS_PREFIX};
use axum::body::Bytes;
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
        .routes(routes!(post_transcript, get_transcript))
        .routes(routes!(summarise))
        .routes(routes!(retry))
        .routes(routes!(faults_view, arm_fault))
}

/// `POST /api/calls/{session_id}/transcript`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct TranscriptTurn {
    /// With the speaker, at most 16,000 characters.
    pub text: String,
    /// At most 100 characters.
    pub speaker: Option<String>,
    /// `false`: an interim result, neither stored nor sent (default `true`).
    pub is_final: Option<bool>,
}

#[derive(Serialize, ToSchema)]
pub struct NotStored {
    pub ok: bool,
    pub stored: bool,
    /// `not_final`.
    pub reason: String,
}

/// A retried entry: a chat message, or a transcript turn of the call.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code, clippy::large_enum_variant)] // the document's shape only: never built
enum RetriedDoc {
    Message(MessageView),
    Transcript(TranscriptView),
}

/// `POST /api/test/faults`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct FaultRequest {
    /// `after_commit` (default) or `before_commit`.
    pub when: Option<String>,
    /// Only callbacks of this status.
    pub status: Option<String>,
    /// Only callbacks of this session.
    pub session_id: Option<String>,
    /// 1..100 (default 1).
    pub count: Option<u64>,
}

/// One transcript turn of a live call: a final one is stored, then sent.
#[utoipa::path(post, path = "/api/calls/{session_id}/transcript", tag = "calls",
    params(("session_id" = String, Path)),
    request_body = TranscriptTurn,
    responses((status = 201, body = TranscriptView),
        (status = 202, body = NotStored, description = "`is_final: false`"),
        (status = 400, body = ErrorDoc, description = "`missing_field`, `invalid_field`, `text_too_long`, `empty_text`"),
        (status = 404, body = ErrorDoc),
        (status = 409, body = ErrorDoc, description = "`call_ended`, `not_a_call`")))]
async fn post_transcript(
    State(api): St,
    Param(id): Param,
    JsonBody(b): JsonBody<TranscriptTurn>,
) -> ApiResult {
    // The same checks as a turn the app hears itself (crate::audio::check_turn).
    let (speaker, _) =
        crate::audio::check_turn(b.speaker.as_deref(), &b.text).map_err(|e| match e {
            crate::audio::TurnError::Invalid(code, message) => ApiError::bad(code, message),
            crate::audio::TurnError::Core(e) => e.into(),
        })?;
    let is_final = b.is_final.unwrap_or(true);
    if !is_final {
        // Interim results are not stored or forwarded; only check that the call is live.
        api.conversation.live_call(&id).await?;
        return Ok(Reply::new(
            StatusCode::ACCEPTED,
            NotStored {
                ok: true,
                stored: false,
                reason: "not_final".into(),
            },
        ));
    }
    let t = api
        .conversation
        .transcript_turn(&id, speaker.as_deref(), &b.text)
        .await?;
    api.link.wake();
    Ok(Reply::new(StatusCode::CREATED, t))
}

/// The call's transcript, oldest first.
///
/// Without `limit` and `before`, every turn (an array); with them, one page `{"items": [...],
/// "next": "<path of the older page>" | null}`, the newest page first, oldest first within it.
#[utoipa::path(get, path = "/api/calls/{session_id}/transcript", tag = "calls",
    params(("session_id" = String, Path),
        ("limit" = Option<i64>, Query, description = "turns per page (1–500; default 100 with `before`)"),
        ("before" = Option<i64>, Query, description = "the page of turns older than this one (the oldest `id` of the newer page)")),
    responses((status = 200, body = TranscriptAnswer), (status = 404, body = ErrorDoc),
        (status = 400, body = ErrorDoc, description = "`invalid_limit`, `invalid_cursor` (`before` is not a turn of the call)"),
        (status = 409, body = ErrorDoc, description = "`not_a_call`")))]
async fn get_transcript(State(api): St, Param(id): Param, uri: axum::http::Uri) -> ApiResult {
    match crate::api::archive::page_params(&uri)? {
        Some((limit, before)) => Ok(Reply::ok(
            crate::archive::pages::transcript_page(api.conversation.store(), &id, limit, before)
                .await?,
        )),
        None => Ok(Reply::ok(api.conversation.transcript(&id).await?)),
    }
}

/// `GET /api/calls/{id}/transcript`: the whole list, or one page of it.
#[derive(Serialize, utoipa::ToSchema)]
#[serde(untagged)]
#[allow(dead_code)] // the document's shape; the route answers either form directly
enum TranscriptAnswer {
    All(Vec<TranscriptView>),
    Page(crate::archive::pages::TranscriptPage),
}

/// A user message asking for a summary of the call (with its transcript).
#[utoipa::path(post, path = "/api/calls/{session_id}/summarise", tag = "calls",
    params(("session_id" = String, Path)),
    responses((status = 201, body = MessageView), (status = 404, body = ErrorDoc),
        (status = 409, body = ErrorDoc, description = "`no_transcript`, `not_a_call`")))]
async fn summarise(State(api): St, Param(id): Param) -> ApiResult {
    let c = &api.conversation;
    let sessions = c.sessions().await?;
    let call = sessions
        .into_iter()
        .find(|s| s.session_id == id)
        .ok_or(CoreError::SessionNotFound)?;
    if !call.is_call {
        return Err(CoreError::NotACall.into());
    }
    let turns = c.transcript(&id).await?;
    if turns.is_empty() {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "no_transcript",
            "this call has no transcript yet: there is nothing to summarise",
        ));
    }
    let text = summary::request_text(&call, &turns);
    let m = c.summary_request(&id, &text).await?;
    api.link.wake();
    Ok(Reply::new(StatusCode::CREATED, m))
}

/// Sends an entry whose delivery failed again, under a new task id.
#[utoipa::path(post, path = "/api/sessions/{session_id}/messages/{id}/retry", tag = "messages",
    params(("session_id" = String, Path), ("id" = String, Path, description = "the row `id`")),
    responses((status = 200, body = RetriedDoc), (status = 404, body = ErrorDoc),
        (status = 409, body = ErrorDoc, description = "`not_failed`")))]
async fn retry(State(api): St, Params2(id, row): Params2) -> ApiResult {
    let c = &api.conversation;
    let not_found = || ApiError::from(CoreError::MessageNotFound);
    let stored =
        |e: crate::store::StoreError| ApiError::from(CoreError::StorageUnavailable(e.to_string()));
    let row_id: i64 = row.parse().map_err(|_| not_found())?;
    let r = c
        .store()
        .message(row_id)
        .await
        .map_err(stored)?
        .ok_or_else(not_found)?;
    let insights = format!("{INSIGHTS_PREFIX}{id}");
    let mine = match r.kind {
        MessageKind::User => r.session_id == id,
        MessageKind::Transcript => r.session_id == insights,
        _ => false,
    };
    if !mine {
        return Err(not_found());
    }
    if r.delivery.as_deref() != Some(DeliveryState::Failed.as_str()) {
        return Err(ApiError::new(
            StatusCode::CONFLICT,
            "not_failed",
            "only an entry whose delivery failed can be retried (pending ones are retried \
             automatically)",
        ));
    }
    // The user retried: a new task id, so the assistant treats it as a new request.
    let task_id = uuid::Uuid::new_v4().to_string();
    c.set_delivery(
        row_id,
        DeliveryUpdate {
            state: DeliveryState::Pending,
            task_id: Some(task_id.clone()),
            error: None,
        },
    )
    .await?;
    tracing::info!(row = row_id, %task_id, "delivery retried by the user");
    // The answer is the state this retry wrote: read back, it could already be the outbox's
    // next one (`sent`), which the caller sees in the event stream anyway.
    let mut r = r;
    r.delivery = Some(DeliveryState::Pending.as_str().to_string());
    r.task_id = Some(task_id);
    r.delivery_error = None;
    api.link.retry_now();
    if r.kind == MessageKind::Transcript {
        let start = c
            .sessions()
            .await?
            .iter()
            .find(|s| s.session_id == id)
            .and_then(|s| crate::protocol::parse_rfc3339(&s.created_at))
            .map(|t| t.timestamp_micros())
            .unwrap_or(0);
        Ok(Reply::ok(TranscriptView::from_row(&r, &id, start)))
    } else {
        Ok(Reply::ok(MessageView::from(&r)))
    }
}

fn faults_enabled(faults: &Faults) -> Result<(), ApiError> {
    if faults.enabled() {
        Ok(())
    } else {
        Err(ApiError::not_found())
    }
}

/// Test-only: what fired and what the retries came to (`404` unless enabled).
#[utoipa::path(get, path = "/api/test/faults", tag = "test",
    responses((status = 200, body = Object), (status = 404, body = ErrorDoc)))]
async fn faults_view(State(api): St) -> ApiResult {
    faults_enabled(&api.faults)?;
    Ok(Reply::ok(api.faults.view()))
}

/// Test-only: arms injected `503 storage_unavailable` answers (`404` unless enabled).
#[utoipa::path(post, path = "/api/test/faults", tag = "test",
    request_body = FaultRequest,
    responses((status = 200, body = Object), (status = 400, body = ErrorDoc),
        (status = 404, body = ErrorDoc)))]
async fn arm_fault(State(api): St, body: Bytes) -> ApiResult {
    // Disabled: `404` whatever the body.
    faults_enabled(&api.faults)?;
    let b: FaultRequest = from_value(parse_object(&body)?)?;
    let when = match b.when {
        None => crate::faults::When::AfterCommit,
        Some(w) => Faults::parse_when(&w).ok_or_else(|| {
            ApiError::bad("invalid_field", "`when`: after_commit or before_commit")
        })?,
    };
    let status = match b.status {
        None => None,
        Some(s) => Some(
            Status::parse(&s).ok_or_else(|| ApiError::bad("invalid_field", "unknown `status`"))?,
        ),
    };
    let count = match b.count {
        None => 1,
        Some(n) if (1..=100).contains(&n) => n as u32,
        Some(_) => return Err(ApiError::bad("invalid_field", "`count`: 1..100")),
    };
    api.faults.arm(when, status, b.session_id, count);
    Ok(Reply::ok(api.faults.view()))
}
