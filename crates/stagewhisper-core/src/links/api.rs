//! Control API routes of the assistants (merged into the one route table in [`crate::api`]; the
//! handlers are thin callers of [`Assistants`] and the conversation):
//!
//! | route | answer |
//! |---|---|
//! | `GET /api/assistant` | `200 {kind, status, detail, …}` (the active kind's view) |
//! | `PUT /api/assistant` `{kind?, …the kind's settings}` | `200` the same view, after a first check |
//! | `GET /api/providers` | `200 {active_kind, kinds, providers}` (the provider registry) |
//! | `DELETE /api/assistant` | `200` the view (`not_configured`) |
//! | `POST /api/assistant/check` | `200` the view, after checking now |
//! | `POST /api/calls/{id}/transcript` `{speaker?, text, is_final?}` | `201 {transcript}`; `202 {"stored":false}` when `is_final` is false |
//! | `GET /api/calls/{id}/transcript` | `200 [transcript]` oldest first |
//! | `POST /api/calls/{id}/summarise` | `201 {message}` (a user message asking for the summary) |
//! | `POST /api/sessions/{id}/messages/{row}/retry` | `200 {message}` (or `{transcript}`) pending again under a new task id |
//! | `GET/POST /api/test/faults` | test-only fault injection (404 unless enabled) |

use super::summary;
use crate::api::common::{
    double_option, from_value, parse_object, ApiError, ApiResult, ErrorDoc, JsonBody, Param,
    Params2, Reply,
};
use crate::assistants::Assistants;
use crate::conversation::{Conversation, CoreError, DeliveryState, DeliveryUpdate};
use crate::faults::Faults;
use crate::model::{MessageKind, MessageView, TranscriptView};
use crate::protocol::{Status, INSIGHTS_PREFIX};
use axum::body::Bytes;
use axum::extract::{FromRef, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// What these routes reach.
#[derive(Clone)]
pub struct LinkApi {
    pub link: Assistants,
    pub conversation: Conversation,
    pub faults: Arc<Faults>,
}

type St = State<LinkApi>;

/// The link's routes, for any router state that provides a [`LinkApi`].
pub fn routes<S>() -> OpenApiRouter<S>
where
    S: Clone + Send + Sync + 'static,
    LinkApi: FromRef<S>,
{
    OpenApiRouter::new()
        .routes(routes!(get_assistant, put_assistant, delete_assistant))
        .routes(routes!(check_assistant))
        .routes(routes!(get_providers))
        .routes(routes!(post_transcript, get_transcript))
        .routes(routes!(summarise))
        .routes(routes!(retry))
        .routes(routes!(faults_view, arm_fault))
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
    pub kinds: Vec<serde_json::Value>,
    pub providers: Vec<serde_json::Value>,
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
#[allow(dead_code)]
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
    let m = c.user_message(&id, &text).await?;
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
