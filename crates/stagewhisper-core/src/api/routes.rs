//! The conversation's routes: calls, sessions, messages, insights, typing, settings.

use super::{ApiState, InProcess};
use crate::answers::{ApiError, ApiResult, ErrorDoc, JsonBody, OkDoc, Param, Reply, MAX_USER_TEXT};
use crate::conversation::CoreError;
use crate::model::{InsightView, MessageView, SessionView, TypingView};
use axum::extract::{Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

type St = State<Arc<ApiState>>;

pub fn routes() -> OpenApiRouter<Arc<ApiState>> {
    OpenApiRouter::new()
        .routes(routes!(create_call))
        .routes(routes!(end_call))
        .routes(routes!(create_session, list_sessions))
        .routes(routes!(delete_session, rename_session))
        .routes(routes!(list_messages, post_message))
        .routes(routes!(list_insights))
        .routes(routes!(list_typing))
        .routes(routes!(settings))
        .routes(routes!(rotate_callback_token))
        .routes(routes!(event_stream))
}

/// A title is at most this many characters.
pub const MAX_TITLE: usize = 200;

/// `POST /api/calls`, `POST /api/sessions`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct NewSession {
    /// The title shown in the list and sent in a call's prelude (none or blank: untitled; at
    /// most 200 characters).
    pub title: Option<String>,
    /// `POST /api/calls` only: start listening to the call at once (microphone and call audio).
    pub listen: Option<bool>,
}

/// `PATCH /api/sessions/{session_id}`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct SessionPatch {
    /// The new title (`null` or blank: untitled; at most 200 characters). Required: a patch
    /// without it would change nothing.
    #[serde(default, deserialize_with = "crate::model::double_option")]
    #[schema(value_type = Option<String>, required = true)]
    pub title: Option<Option<String>>,
}

/// `title_too_long` past [`MAX_TITLE`] characters.
fn check_title(title: &Option<String>) -> Result<(), ApiError> {
    match title {
        Some(t) if t.trim().chars().count() > MAX_TITLE => Err(ApiError::bad(
            "title_too_long",
            format!("a title is at most {MAX_TITLE} characters"),
        )),
        _ => Ok(()),
    }
}

#[derive(Serialize, ToSchema)]
pub struct CreatedCall {
    pub session_id: String,
    /// `insights:<session_id>`.
    pub insights_session_id: Option<String>,
    pub session: SessionView,
}

#[derive(Serialize, ToSchema)]
pub struct CreatedSession {
    pub session_id: String,
    pub session: SessionView,
}

/// `POST /api/sessions/{session_id}/messages`.
#[derive(Debug, Deserialize, ToSchema)]
pub struct NewMessage {
    /// At most 16,000 characters.
    pub text: String,
}

#[derive(Serialize, ToSchema)]
pub struct SettingsView {
    /// The advertised callback URL (the tunnel's origin while it is up).
    pub callback_url: String,
    /// The callback listener's own loopback URL.
    pub local_callback_url: String,
    /// The tunnel's state (`off`, `connecting`, `online`, `failed`).
    pub tunnel: String,
    pub callback_token: String,
    pub data_dir: String,
    pub typing_timeout_secs: i64,
    pub insights_grace_secs: i64,
    /// Settings read at start-up that could not be used (old files or sections kept aside;
    /// see `settings.json` in the contract). Empty when all is well.
    pub settings_problems: Vec<crate::settings::SettingsProblem>,
}

#[derive(Serialize, ToSchema)]
pub struct RotatedToken {
    pub callback_token: String,
}

/// A call: a chat session plus its `insights:` session.
#[utoipa::path(post, path = "/api/calls", tag = "sessions",
    request_body(content = NewSession, description = "optional"),
    responses((status = 201, body = CreatedCall), (status = 400, body = ErrorDoc),
        (status = 503, body = ErrorDoc, description = "`audio_unavailable`: `listen` in a build that cannot hear")))]
async fn create_call(State(api): St, JsonBody(b): JsonBody<NewSession>) -> ApiResult {
    check_title(&b.title)?;
    // Checked before the call exists: a build that cannot hear refuses `listen` cleanly.
    let ears = match b.listen {
        Some(true) => Some(super::audio::ears(&api)?.clone()),
        _ => None,
    };
    let s = api.conversation.create_session(true, b.title).await?;
    if let Some(ears) = ears {
        // Listening is an intent: a sound server that is not there shows in the status, and
        // listening starts when it comes.
        if let Err(e) = ears.listen(&s.session_id).await {
            tracing::warn!(code = e.code, error = %e, "the new call could not start listening");
        }
    }
    Ok(Reply::new(
        StatusCode::CREATED,
        CreatedCall {
            session_id: s.session_id.clone(),
            insights_session_id: s.insights_session_id.clone(),
            session: s,
        },
    ))
}

/// Ends the call; the chat stays open for the review.
#[utoipa::path(post, path = "/api/calls/{session_id}/end", tag = "sessions",
    params(("session_id" = String, Path)),
    responses((status = 200, body = SessionView), (status = 404, body = ErrorDoc),
        (status = 409, body = ErrorDoc, description = "`not_a_call`")))]
async fn end_call(State(api): St, Param(id): Param) -> ApiResult {
    // Listening stops first, so the turn in progress and those being transcribed are stored
    // while the call is still live (an ended call takes no more turns).
    if let Some(ears) = &api.ears {
        ears.stop(Some(&id)).await;
    }
    let s = api.conversation.end_call(&id).await?;
    Ok(Reply::ok(s))
}

/// A chat without a call.
#[utoipa::path(post, path = "/api/sessions", tag = "sessions",
    request_body(content = NewSession, description = "optional"),
    responses((status = 201, body = CreatedSession), (status = 400, body = ErrorDoc)))]
async fn create_session(State(api): St, JsonBody(b): JsonBody<NewSession>) -> ApiResult {
    check_title(&b.title)?;
    let s = api.conversation.create_session(false, b.title).await?;
    Ok(Reply::new(
        StatusCode::CREATED,
        CreatedSession {
            session_id: s.session_id.clone(),
            session: s,
        },
    ))
}

/// Every session, newest first.
#[utoipa::path(get, path = "/api/sessions", tag = "sessions",
    responses((status = 200, body = Vec<SessionView>)))]
async fn list_sessions(State(api): St) -> ApiResult {
    Ok(Reply::ok(api.conversation.sessions().await?))
}

/// Renames a chat or a call (the `session_updated` event carries the new title). A call's
/// prelude, already sent when it started, is not sent again.
#[utoipa::path(patch, path = "/api/sessions/{session_id}", tag = "sessions",
    params(("session_id" = String, Path)),
    request_body = SessionPatch,
    responses((status = 200, body = SessionView), (status = 404, body = ErrorDoc),
        (status = 400, body = ErrorDoc, description = "`title_too_long`, `invalid_json`")))]
async fn rename_session(
    State(api): St,
    Param(id): Param,
    JsonBody(b): JsonBody<SessionPatch>,
) -> ApiResult {
    let Some(title) = b.title else {
        return Err(ApiError::bad("missing_field", "`title` is required"));
    };
    check_title(&title)?;
    Ok(Reply::ok(
        api.conversation.rename_session(&id, title).await?,
    ))
}

/// Deletes a session with its messages, insights and events.
#[utoipa::path(delete, path = "/api/sessions/{session_id}", tag = "sessions",
    params(("session_id" = String, Path)),
    responses((status = 200, body = OkDoc), (status = 404, body = ErrorDoc)))]
async fn delete_session(State(api): St, Param(id): Param) -> ApiResult {
    api.conversation.delete_session(&id).await?;
    if let Some(ears) = &api.ears {
        ears.stop(Some(&id)).await;
    }
    // The call's kept audio goes with it.
    crate::recordings::remove(&api.data_dir, &id);
    Ok(Reply::ok(OkDoc { ok: true }))
}

/// The chat, ordered by (`sort_key`, `id`): without `limit` and `before`, every message (an
/// array); with them, one page `{"items": [...], "next": "<path of the older page>" | null}`,
/// the newest page first, oldest first within a page.
#[utoipa::path(get, path = "/api/sessions/{session_id}/messages", tag = "messages",
    params(("session_id" = String, Path),
        ("limit" = Option<i64>, Query, description = "messages per page (1–500; default 100 with `before`)"),
        ("before" = Option<i64>, Query, description = "the page before this message (the oldest `id` of the newer page)")),
    responses((status = 200, body = MessagesAnswer), (status = 404, body = ErrorDoc),
        (status = 400, body = ErrorDoc, description = "`invalid_limit`, `invalid_cursor` (`before` is not a message of the session)")))]
async fn list_messages(State(api): St, Param(id): Param, uri: axum::http::Uri) -> ApiResult {
    if let Some(page) = super::archive::page_params(&uri)? {
        return Ok(Reply::ok(
            super::archive::messages_page(&api, &id, page).await?,
        ));
    }
    Ok(Reply::ok(api.conversation.messages(&id).await?))
}

/// `GET /api/sessions/{id}/messages`: the whole list, or one page of it.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)] // the document's shape; the route answers either form directly
enum MessagesAnswer {
    All(Vec<MessageView>),
    Page(crate::archive::MessagePage),
}

/// Stores the user's message (then the assistant link sends it).
#[utoipa::path(post, path = "/api/sessions/{session_id}/messages", tag = "messages",
    params(("session_id" = String, Path)),
    request_body = NewMessage,
    responses((status = 201, body = MessageView),
        (status = 400, body = ErrorDoc, description = "`missing_field`, `invalid_field`, `text_too_long`, `empty_text`"),
        (status = 404, body = ErrorDoc)))]
async fn post_message(
    State(api): St,
    Param(id): Param,
    JsonBody(b): JsonBody<NewMessage>,
) -> ApiResult {
    if b.text.chars().count() > MAX_USER_TEXT {
        return Err(ApiError::bad(
            "text_too_long",
            format!("a message is at most {MAX_USER_TEXT} characters"),
        ));
    }
    let m = api.conversation.user_message(&id, &b.text).await?;
    api.link.wake();
    Ok(Reply::new(StatusCode::CREATED, m))
}

/// The call's insights, newest first: without `limit` and `before`, all of them (an array); with
/// them, one page `{"items": [...], "next": "<path of the older page>" | null}`, the newest page
/// first, newest first within a page.
#[utoipa::path(get, path = "/api/sessions/{session_id}/insights", tag = "messages",
    params(("session_id" = String, Path),
        ("limit" = Option<i64>, Query, description = "insights per page (1–500; default 100 with `before`)"),
        ("before" = Option<i64>, Query, description = "the page of insights older than this one (the last `id` of the newer page)")),
    responses((status = 200, body = InsightsAnswer), (status = 404, body = ErrorDoc),
        (status = 400, body = ErrorDoc, description = "`invalid_limit`, `invalid_cursor` (`before` is not an insight of the call)")))]
async fn list_insights(State(api): St, Param(id): Param, uri: axum::http::Uri) -> ApiResult {
    match super::archive::page_params(&uri)? {
        Some((limit, before)) => Ok(Reply::ok(
            crate::archive::pages::insights_page(api.conversation.store(), &id, limit, before)
                .await?,
        )),
        None => Ok(Reply::ok(api.conversation.insights(&id).await?)),
    }
}

/// `GET /api/sessions/{id}/insights`: the whole list, or one page of it.
#[derive(Serialize, ToSchema)]
#[serde(untagged)]
#[allow(dead_code)] // the document's shape; the route answers either form directly
enum InsightsAnswer {
    All(Vec<InsightView>),
    Page(crate::archive::pages::InsightPage),
}

/// Active typing indicators.
#[utoipa::path(get, path = "/api/sessions/{session_id}/typing", tag = "messages",
    params(("session_id" = String, Path)),
    responses((status = 200, body = Vec<TypingView>), (status = 404, body = ErrorDoc)))]
async fn list_typing(State(api): St, Param(id): Param) -> ApiResult {
    let c = &api.conversation;
    if c.sessions().await?.iter().all(|s| s.session_id != id) {
        return Err(CoreError::SessionNotFound.into());
    }
    Ok(Reply::ok(c.typing(&id).await?))
}

/// The callback URL and token, and the timers.
#[utoipa::path(get, path = "/api/settings", tag = "settings",
    responses((status = 200, body = SettingsView)))]
async fn settings(State(api): St) -> ApiResult {
    let s = api.conversation.settings();
    Ok(Reply::ok(SettingsView {
        callback_url: api.tunnel.advertised_callback_url(),
        local_callback_url: api.callback_url.clone(),
        tunnel: api.tunnel.status().state.as_str().to_string(),
        callback_token: api.callback_token.get(),
        data_dir: api.data_dir.display().to_string(),
        typing_timeout_secs: s.typing_timeout_ms / 1000,
        insights_grace_secs: s.insights_grace_ms / 1000,
        settings_problems: api.settings.problems(),
    }))
}

/// A new callback token; the old one stops working at once.
#[utoipa::path(post, path = "/api/settings/callback-token/rotate", tag = "settings",
    responses((status = 200, body = RotatedToken),
        (status = 503, body = ErrorDoc, description = "`storage_unavailable`: the disk is full (the old token stays)"),
        (status = 500, body = ErrorDoc, description = "`token_write_failed`")))]
async fn rotate_callback_token(State(api): St) -> ApiResult {
    let t = api.callback_token.rotate().map_err(|e| {
        if e.is_storage_full() {
            ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "storage_unavailable", e)
        } else {
            ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "token_write_failed", e)
        }
    })?;
    tracing::info!("callback token rotated");
    Ok(Reply::ok(RotatedToken { callback_token: t }))
}

/// The event log as SSE (`GET /api/events`): `id:` is the cursor; `Last-Event-ID: N` (or
/// `?after=N`) resumes after N exactly once, then live events. Without a cursor the stream starts
/// at the current end and first sends `event: ready` with `{"cursor": N}`. Live-only events
/// (partial transcripts, audio levels: `"live": true` in `data`) come without `id:` and are never
/// replayed. The window's IPC has the `sw-event` Tauri event instead (`404` there).
#[utoipa::path(get, path = "/api/events", tag = "events",
    params(
        ("after" = Option<i64>, Query, description = "resume after this cursor (`0`: the whole log)"),
        ("Last-Event-ID" = Option<i64>, Header, description = "resume after this cursor (wins over `after`)"),
        ("access_token" = Option<String>, Query, description = "the UI token (`EventSource` cannot set headers)"),
    ),
    responses((status = 200, content_type = "text/event-stream", body = String,
        description = "`id: <cursor>` / `event: <type>` / `data: {…}` frames; `: keepalive` every 15 s")))]
async fn event_stream(State(api): St, req: Request) -> Response {
    if req.extensions().get::<InProcess>().is_some() {
        return ApiError::not_found().into_response();
    }
    let header_cursor = req
        .headers()
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<i64>().ok());
    let cursor = header_cursor.or_else(|| {
        super::query_param(req.uri().query().unwrap_or(""), "after")
            .and_then(|v| v.parse::<i64>().ok())
    });
    match stream_from(&api, cursor).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

/// The log from `cursor` (exclusive), or from its end with a `ready` frame first.
async fn stream_from(api: &ApiState, cursor: Option<i64>) -> Result<Response, ApiError> {
    let store = api.conversation.store().clone();
    let (start, hello) = match cursor {
        Some(c) => (c.max(0), false),
        None => match store.last_event_id().await {
            Ok(id) => (id, true),
            Err(e) => {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "storage_unavailable",
                    e,
                ))
            }
        },
    };
    let mut sub = api.conversation.hub().subscribe(store, start);
    let shutdown = api.shutdown.clone();
    let (tx, rx) = tokio::sync::mpsc::channel::<Event>(256);
    tokio::spawn(async move {
        // A first frame at once, so proxies and clients see the stream is alive.
        let mut first = vec![Event::default().comment("stream open")];
        if hello {
            first.push(
                Event::default()
                    .event("ready")
                    .data(format!("{{\"cursor\":{start}}}")),
            );
        }
        for e in first {
            if tx.send(e).await.is_err() {
                return;
            }
        }
        let mut keepalive = tokio::time::interval(Duration::from_secs(15));
        keepalive.tick().await;
        loop {
            let frame = tokio::select! {
                e = sub.next() => match e {
                    // A live-only event has no cursor: no `id:` line, so the reader's
                    // Last-Event-ID stays that of the last logged event.
                    Ok(e) if e.is_live() => Event::default().event(e.event_type()).data(&e.json),
                    Ok(e) => Event::default()
                        .id(e.id.to_string())
                        .event(e.event_type())
                        .data(&e.json),
                    Err(err) => {
                        tracing::warn!(error = %err, "event stream read failed; retrying");
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        continue;
                    }
                },
                _ = keepalive.tick() => Event::default().comment("keepalive"),
                _ = shutdown.wait() => break,
                _ = tx.closed() => break,
            };
            if tx.send(frame).await.is_err() {
                break;
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv()
            .await
            .map(|e| (Ok::<_, std::convert::Infallible>(e), rx))
    });
    // axum's `Sse` writes the frames and the content type; the cache headers are ours (no
    // proxy may keep or buffer the stream).
    let mut r = Sse::new(stream).into_response();
    let h = r.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(r)
}
