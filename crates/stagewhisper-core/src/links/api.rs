//! Control API routes of the assistant link (mounted by [`crate::api::ControlApi`]):
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
use crate::api::{
    bad, core_error, error_json, not_allowed, ok, opt_string, parse_body, Answer, ControlApi,
    MAX_USER_TEXT,
};
use crate::conversation::{CoreError, DeliveryState, DeliveryUpdate};
use crate::faults::Faults;
use crate::model::{MessageKind, MessageView, TranscriptView};
use crate::protocol::{Status, INSIGHTS_PREFIX};
use hyper::{Method, StatusCode};
use serde_json::{json, Value};

/// Longest speaker name.
pub const MAX_SPEAKER: usize = 100;

/// Routes a request if it is one of the link's; `None` otherwise.
pub(crate) async fn dispatch(
    api: &ControlApi,
    method: &Method,
    segs: &[&str],
    body: &[u8],
) -> Option<Answer> {
    Some(match segs {
        ["api", "assistant"] => match *method {
            Method::GET => Ok(ok(StatusCode::OK, api.link.view())),
            Method::PUT => put_assistant(api, body).await,
            Method::DELETE => Ok(ok(StatusCode::OK, api.link.remove().await)),
            _ => Err(not_allowed()),
        },
        ["api", "providers"] => match *method {
            Method::GET => Ok(ok(StatusCode::OK, api.link.providers())),
            _ => Err(not_allowed()),
        },
        ["api", "assistant", "check"] => {
            if method != Method::POST {
                return Some(Err(not_allowed()));
            }
            Ok(ok(StatusCode::OK, api.link.check().await))
        }
        ["api", "calls", id, "transcript"] => match *method {
            Method::POST => post_transcript(api, id, body).await,
            Method::GET => api
                .conversation
                .transcript(id)
                .await
                .map(|v| ok(StatusCode::OK, v))
                .map_err(core_error),
            _ => Err(not_allowed()),
        },
        ["api", "calls", id, "summarise"] => {
            if method != Method::POST {
                return Some(Err(not_allowed()));
            }
            summarise(api, id).await
        }
        ["api", "sessions", id, "messages", row, "retry"] => {
            if method != Method::POST {
                return Some(Err(not_allowed()));
            }
            retry(api, id, row).await
        }
        ["api", "test", "faults"] if api.faults.enabled() => match *method {
            Method::GET => Ok(ok(StatusCode::OK, api.faults.view())),
            Method::POST => arm_fault(&api.faults, body),
            _ => Err(not_allowed()),
        },
        _ => return None,
    })
}

async fn put_assistant(api: &ControlApi, body: &[u8]) -> Answer {
    let b = parse_body(body)?;
    api.link
        .put(&b)
        .await
        .map(|v| ok(StatusCode::OK, v))
        .map_err(|e| {
            tracing::warn!(code = e.code, error = %e, "assistant configuration refused");
            let status =
                StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
            error_json(status, e.code, e)
        })
}

async fn post_transcript(api: &ControlApi, id: &str, body: &[u8]) -> Answer {
    let b = parse_body(body)?;
    let Some(text) = opt_string(&b, "text")? else {
        return Err(bad("missing_field", "`text` is required"));
    };
    let speaker = opt_string(&b, "speaker")?
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    let is_final = match b.get("is_final") {
        None | Some(Value::Null) => true,
        Some(Value::Bool(f)) => *f,
        Some(_) => return Err(bad("invalid_field", "`is_final` must be a boolean")),
    };
    if speaker
        .as_ref()
        .is_some_and(|s| s.chars().count() > MAX_SPEAKER)
    {
        return Err(bad(
            "invalid_field",
            format!("`speaker` is at most {MAX_SPEAKER} characters"),
        ));
    }
    let sent_len =
        text.trim().chars().count() + speaker.as_ref().map_or(0, |s| s.chars().count() + 2);
    if sent_len > MAX_USER_TEXT {
        return Err(bad(
            "text_too_long",
            format!("a transcript turn (with its speaker) is at most {MAX_USER_TEXT} characters"),
        ));
    }
    if !is_final {
        // Interim results are not stored or forwarded; only check that the call is live.
        let sessions = api.conversation.sessions().await.map_err(core_error)?;
        let call = sessions
            .iter()
            .find(|s| s.session_id == *id)
            .ok_or_else(|| core_error(CoreError::SessionNotFound))?;
        if !call.is_call {
            return Err(core_error(CoreError::NotACall));
        }
        if call.ended_at.is_some() {
            return Err(core_error(CoreError::CallEnded));
        }
        return Ok(ok(
            StatusCode::ACCEPTED,
            json!({"ok": true, "stored": false, "reason": "not_final"}),
        ));
    }
    let t = api
        .conversation
        .transcript_turn(id, speaker.as_deref(), &text)
        .await
        .map_err(core_error)?;
    api.link.wake();
    Ok(ok(StatusCode::CREATED, t))
}

async fn summarise(api: &ControlApi, id: &str) -> Answer {
    let c = &api.conversation;
    let sessions = c.sessions().await.map_err(core_error)?;
    let call = sessions
        .into_iter()
        .find(|s| s.session_id == *id)
        .ok_or_else(|| core_error(CoreError::SessionNotFound))?;
    if !call.is_call {
        return Err(core_error(CoreError::NotACall));
    }
    let turns = c.transcript(id).await.map_err(core_error)?;
    if turns.is_empty() {
        return Err(error_json(
            StatusCode::CONFLICT,
            "no_transcript",
            "this call has no transcript yet: there is nothing to summarise",
        ));
    }
    let text = summary::request_text(&call, &turns);
    let m = c.user_message(id, &text).await.map_err(core_error)?;
    api.link.wake();
    Ok(ok(StatusCode::CREATED, m))
}

async fn retry(api: &ControlApi, id: &str, row: &str) -> Answer {
    let c = &api.conversation;
    let not_found = || core_error(CoreError::MessageNotFound);
    let row_id: i64 = row.parse().map_err(|_| not_found())?;
    let r = c
        .store()
        .message(row_id)
        .await
        .map_err(|e| core_error(CoreError::StorageUnavailable(e.to_string())))?
        .ok_or_else(not_found)?;
    let insights = format!("{INSIGHTS_PREFIX}{id}");
    let mine = match r.kind {
        MessageKind::User => r.session_id == *id,
        MessageKind::Transcript => r.session_id == insights,
        _ => false,
    };
    if !mine {
        return Err(not_found());
    }
    if r.delivery.as_deref() != Some(DeliveryState::Failed.as_str()) {
        return Err(error_json(
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
    .await
    .map_err(core_error)?;
    tracing::info!(row = row_id, %task_id, "delivery retried by the user");
    api.link.retry_now();
    let r = c
        .store()
        .message(row_id)
        .await
        .map_err(|e| core_error(CoreError::StorageUnavailable(e.to_string())))?
        .ok_or_else(not_found)?;
    if r.kind == MessageKind::Transcript {
        let start = c
            .sessions()
            .await
            .map_err(core_error)?
            .iter()
            .find(|s| s.session_id == *id)
            .and_then(|s| crate::protocol::parse_rfc3339(&s.created_at))
            .map(|t| t.timestamp_micros())
            .unwrap_or(0);
        Ok(ok(StatusCode::OK, TranscriptView::from_row(&r, id, start)))
    } else {
        Ok(ok(StatusCode::OK, MessageView::from(&r)))
    }
}

fn arm_fault(faults: &Faults, body: &[u8]) -> Answer {
    let b = parse_body(body)?;
    let when = match opt_string(&b, "when")? {
        None => crate::faults::When::AfterCommit,
        Some(w) => Faults::parse_when(&w)
            .ok_or_else(|| bad("invalid_field", "`when`: after_commit or before_commit"))?,
    };
    let status = match opt_string(&b, "status")? {
        None => None,
        Some(s) => Some(Status::parse(&s).ok_or_else(|| bad("invalid_field", "unknown `status`"))?),
    };
    let session_id = opt_string(&b, "session_id")?;
    let count = match b.get("count") {
        None | Some(Value::Null) => 1,
        Some(v) => v
            .as_u64()
            .filter(|n| (1..=100).contains(n))
            .ok_or_else(|| bad("invalid_field", "`count`: 1..100"))? as u32,
    };
    faults.arm(when, status, session_id, count);
    Ok(ok(StatusCode::OK, faults.view()))
}
