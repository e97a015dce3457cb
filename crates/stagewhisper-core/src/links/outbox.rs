//! The outbox: delivers pending entries to `POST {base}/v1/incoming`, one at a time, oldest
//! first (a call's `system_prelude` before its first transcript turn).
//!
//! Reliability rules:
//! - the task id is recorded (`set_delivery(Pending, task_id)`) before the first attempt and
//!   reused for every automatic retry and after a restart, so the assistant's dedupe (by task
//!   id) makes a resend harmless;
//! - connection errors, timeouts, 408/425/429/5xx: retried with backoff (the entry stays
//!   pending and carries a note saying why);
//! - `202 accepted`, `202 in_flight`, `200 duplicate` (and OpenClaw's idempotent replay): sent;
//! - other 4xx: the entry fails with a code and a sentence; a user retry gives it a new task id.

use super::client::{self, Call, ClientError, Response};
use super::config::{render_prelude, LinkConfig, Mode};
use super::state::PreludeState;
use super::{Inner, StatusKind};
use crate::clock::fmt_time;
use crate::conversation::{CoreError, DeliveryState, DeliveryUpdate};
use crate::model::{MessageKind, MessageRow};
use crate::protocol::INSIGHTS_PREFIX;
use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

/// One thing to send (or settle).
#[derive(Debug)]
pub(crate) enum Job {
    Prelude {
        call_id: String,
        task_id: String,
        title: Option<String>,
    },
    Row(MessageRow),
    /// A transcript turn whose call ended too long ago for a reply to be shown.
    Expire(MessageRow),
}

/// What an attempt came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// `accepted`, `in_flight`, `duplicate`, `replay`.
    Delivered(&'static str),
    /// Try again later (same task id).
    Retry {
        code: &'static str,
        message: String,
        after: Option<Duration>,
        status: StatusKind,
    },
    /// The assistant refused our callback URL (400).
    CallbackRejected { detail: String },
    /// Final: the entry fails.
    Failed {
        code: &'static str,
        message: String,
        /// The link status this says something about (401 → auth failed, …).
        status: Option<StatusKind>,
    },
}

/// The assistant's own error words (`error`, `detail`), for messages.
pub fn assistant_error(resp: &Response) -> String {
    let v = resp.json();
    let mut parts: Vec<String> = Vec::new();
    for k in ["error", "detail", "message"] {
        match &v[k] {
            Value::String(s) if !s.is_empty() => parts.push(s.clone()),
            Value::Null => {}
            other if !other.is_object() => parts.push(other.to_string()),
            _ => {}
        }
    }
    if parts.is_empty() {
        let raw = String::from_utf8_lossy(&resp.body);
        let raw = raw.trim();
        if !raw.is_empty() && raw.len() < 300 {
            parts.push(raw.to_string());
        }
    }
    parts.join(": ")
}

fn is_callback_problem(words: &str) -> bool {
    let w = words.to_ascii_lowercase();
    w.contains("callback")
}

/// Classifies an answer to `POST /v1/incoming`.
pub fn classify(resp: &Response, base_url: &str) -> Verdict {
    let s = resp.status;
    let words = assistant_error(resp);
    let said = |code: u16| {
        if words.is_empty() {
            format!("{code}")
        } else {
            format!("{code} {words}")
        }
    };
    if s.is_success() {
        let v = resp.json();
        let how = if resp
            .headers
            .get("x-idempotent-replay")
            .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"))
        {
            "replay"
        } else {
            match v["status"].as_str() {
                Some("in_flight") => "in_flight",
                Some("duplicate") => "duplicate",
                _ => "accepted",
            }
        };
        return Verdict::Delivered(how);
    }
    let code = s.as_u16();
    match s {
        StatusCode::REQUEST_TIMEOUT | StatusCode::TOO_MANY_REQUESTS => Verdict::Retry {
            code: if s == StatusCode::TOO_MANY_REQUESTS {
                "assistant_busy"
            } else {
                "assistant_timeout"
            },
            message: format!(
                "The assistant is busy ({}); retrying automatically.",
                said(code)
            ),
            after: resp.retry_after(),
            status: StatusKind::Online,
        },
        _ if code == 425 => Verdict::Retry {
            code: "assistant_busy",
            message: format!("The assistant asked to retry later ({}).", said(code)),
            after: resp.retry_after(),
            status: StatusKind::Online,
        },
        _ if s.is_server_error() => Verdict::Retry {
            code: "assistant_error",
            message: format!(
                "The assistant answered {}; retrying automatically.",
                said(code)
            ),
            after: resp.retry_after(),
            status: StatusKind::Unreachable,
        },
        StatusCode::UNAUTHORIZED => Verdict::Failed {
            code: "assistant_auth_failed",
            message: format!(
                "The assistant rejected the relay token ({}). Enter the token the assistant is \
                 configured with in Settings → Assistant (Hermes: STAGEWHISPER_RELAY_TOKEN; \
                 OpenClaw: plugins.entries.stagewhisper.config.httpToken), then retry.",
                said(code)
            ),
            status: Some(StatusKind::AuthFailed),
        },
        StatusCode::FORBIDDEN => Verdict::Failed {
            code: "assistant_forbidden",
            message: format!(
                "The assistant refused the request ({}): it accepts only loopback Host headers \
                 unless STAGEWHISPER_ALLOW_INGRESS_HOSTS lists the host of {base_url}.",
                said(code)
            ),
            status: Some(StatusKind::Misconfigured),
        },
        StatusCode::NOT_FOUND => Verdict::Failed {
            code: "assistant_not_found",
            message: format!(
                "{base_url}/v1/incoming does not exist (404): the base URL does not point at a \
                 StageWhisper assistant listener. Check its port (Hermes: \
                 STAGEWHISPER_LISTEN_PORT; OpenClaw: httpPort) and path."
            ),
            status: Some(StatusKind::Misconfigured),
        },
        StatusCode::PAYLOAD_TOO_LARGE => Verdict::Failed {
            code: "assistant_payload_too_large",
            message: format!("The assistant refused this as too large ({}).", said(code)),
            status: None,
        },
        StatusCode::BAD_REQUEST if is_callback_problem(&words) => {
            Verdict::CallbackRejected { detail: said(code) }
        }
        _ => Verdict::Failed {
            code: "assistant_rejected",
            message: format!(
                "The assistant rejected this ({}). It was not delivered; retry or rephrase it.",
                said(code)
            ),
            status: None,
        },
    }
}

/// Classifies a failed exchange (no HTTP answer).
pub fn classify_error(e: &ClientError, base_url: &str, port: u16) -> Verdict {
    let message = match e {
        ClientError::Refused => format!(
            "Cannot connect to {base_url} (connection refused): is the assistant running and \
             listening on port {port}? (Hermes: STAGEWHISPER_LISTEN_PORT; OpenClaw: \
             plugins.entries.stagewhisper.config.httpPort)"
        ),
        ClientError::ConnectTimeout(d) => {
            format!("Cannot connect to {base_url}: no answer to the connection within {d:?}.")
        }
        ClientError::Timeout(d) => {
            format!("{base_url} accepted the connection but did not answer within {d:?}; retrying.")
        }
        other => format!("The exchange with {base_url} failed ({other}); retrying."),
    };
    Verdict::Retry {
        code: "assistant_unreachable",
        message,
        after: None,
        status: StatusKind::Unreachable,
    }
}

/// The JSON body of `POST /v1/incoming`.
pub fn incoming_body(
    task_id: &str,
    session_id: &str,
    reason: &str,
    occurred_at: &str,
    payload: Value,
    callback: Option<(String, String)>,
) -> Vec<u8> {
    let mut v = json!({
        "task_id": task_id,
        "session_id": session_id,
        "reason": reason,
        "occurred_at": occurred_at,
        "payload": payload,
    });
    if let Some((url, token)) = callback {
        v["callback"] = json!({"url": url, "token": token});
    }
    serde_json::to_vec(&v).expect("serializable")
}

/// The text of a transcript turn as sent: `Speaker: text`.
pub fn transcript_text(row: &MessageRow) -> String {
    match row.speaker.as_deref().filter(|s| !s.is_empty()) {
        Some(sp) => format!("{sp}: {}", row.text),
        None => row.text.clone(),
    }
}

/// What happened to a job.
enum Outcome {
    Done,
    Retry(Verdict),
}

impl Inner {
    pub(crate) async fn outbox_loop(self: Arc<Self>) {
        let s = self.settings;
        let mut backoff = s.backoff_initial;
        // Per entry: the note last written on it while retrying (to write each change once).
        let mut notes: HashMap<String, &'static str> = HashMap::new();
        // Per assistant session: when something was last sent to it.
        let mut last_sent: HashMap<String, std::time::Instant> = HashMap::new();
        loop {
            if self.shutdown.is_triggered() {
                break;
            }
            // Arm the wake-up before looking, so nothing slips between the scan and the wait.
            let woken = self.wake.notified();
            let Some(cfg) = self.config() else {
                tokio::select! {
                    _ = woken => {},
                    _ = self.shutdown.wait() => break,
                }
                continue;
            };
            let job = match self.next_job(&cfg).await {
                Ok(j) => j,
                Err(e) => {
                    tracing::warn!(error = %e, "assistant link: cannot read pending deliveries; retrying");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(1)) => {},
                        _ = self.shutdown.wait() => break,
                    }
                    continue;
                }
            };
            let Some(job) = job else {
                tokio::select! {
                    _ = woken => {},
                    _ = self.shutdown.wait() => break,
                }
                continue;
            };
            let key = job_key(&job);
            tracing::debug!(job = %key, "assistant link: next delivery");
            if let Job::Row(row) = &job {
                // Space out sends to one session (see `LinkSettings::min_session_gap`).
                if let Some(at) = last_sent.get(&row.session_id) {
                    let left = s.min_session_gap.saturating_sub(at.elapsed());
                    if !left.is_zero() {
                        tokio::select! {
                            _ = tokio::time::sleep(left) => {},
                            _ = self.shutdown.wait() => break,
                        }
                    }
                }
                last_sent.insert(row.session_id.clone(), std::time::Instant::now());
                if last_sent.len() > 1024 {
                    let gap = s.min_session_gap;
                    last_sent.retain(|_, t| t.elapsed() < gap);
                }
            }
            let outcome = tokio::select! {
                o = self.run_job(&cfg, job, &mut notes) => o,
                _ = self.shutdown.wait() => break,
            };
            match outcome {
                Outcome::Done => {
                    backoff = s.backoff_initial;
                    notes.remove(&key);
                }
                Outcome::Retry(v) => {
                    let after = match &v {
                        Verdict::Retry { after, .. } => *after,
                        _ => None,
                    };
                    // Retry-After is honoured (up to 5 minutes), else the backoff.
                    let wait = match after {
                        Some(a) => a.max(backoff).min(Duration::from_secs(300)),
                        None => backoff,
                    };
                    tracing::debug!(
                        wait_ms = wait.as_millis() as u64,
                        "assistant link: retrying later"
                    );
                    backoff = (backoff * 2).min(s.backoff_max);
                    let retry_now = self.retry_now.notified();
                    tokio::select! {
                        _ = tokio::time::sleep(wait) => {},
                        _ = retry_now => { backoff = s.backoff_initial; },
                        _ = self.shutdown.wait() => break,
                    }
                }
            }
        }
        tracing::debug!("assistant link outbox stopped");
    }

    /// The oldest thing to send.
    pub(crate) async fn next_job(&self, _cfg: &LinkConfig) -> Result<Option<Job>, CoreError> {
        let rows = self.conversation.pending_deliveries().await?;
        let pending_preludes: Vec<(String, String)> = {
            let st = self.state.lock().expect("state lock");
            let mut v: Vec<_> = st
                .preludes
                .iter()
                .filter(|(_, p)| p.state == PreludeState::Pending)
                .map(|(k, p)| (p.created_ms, k.clone(), p.task_id.clone()))
                .collect();
            v.sort();
            v.into_iter().map(|(_, k, t)| (k, t)).collect()
        };
        let needs_sessions =
            !pending_preludes.is_empty() || rows.iter().any(|r| r.kind == MessageKind::Transcript);
        let sessions = if needs_sessions {
            self.conversation.sessions().await?
        } else {
            Vec::new()
        };
        let transcript_pending = |call: &str| {
            let sid = format!("{INSIGHTS_PREFIX}{call}");
            rows.iter().any(|r| r.session_id == sid)
        };
        for (call_id, task_id) in pending_preludes {
            match sessions.iter().find(|s| s.session_id == call_id) {
                // Not visible yet (or deleted: `session_deleted` forgets the record): wait.
                None => continue,
                Some(s) if s.ended_at.is_some() && !transcript_pending(&call_id) => {
                    self.set_prelude_state(&call_id, PreludeState::Skipped)
                }
                Some(s) => {
                    return Ok(Some(Job::Prelude {
                        call_id,
                        task_id,
                        title: s.title.clone(),
                    }))
                }
            }
        }
        let now_ms = self.conversation.clock().now_ms();
        let grace = self.conversation.settings().insights_grace_ms;
        for row in rows {
            match row.kind {
                MessageKind::User => return Ok(Some(Job::Row(row))),
                MessageKind::Transcript => {
                    let call_id = row
                        .session_id
                        .strip_prefix(INSIGHTS_PREFIX)
                        .unwrap_or_default()
                        .to_string();
                    let Some(call) = sessions.iter().find(|s| s.session_id == call_id) else {
                        continue; // deleted: its rows go with it
                    };
                    if self.ensure_prelude(&call_id) {
                        let task_id = self
                            .state
                            .lock()
                            .expect("state lock")
                            .preludes
                            .get(&call_id)
                            .map(|p| p.task_id.clone())
                            .unwrap_or_default();
                        return Ok(Some(Job::Prelude {
                            call_id,
                            task_id,
                            title: call.title.clone(),
                        }));
                    }
                    let ended_long_ago = call
                        .ended_at
                        .as_deref()
                        .and_then(crate::protocol::parse_rfc3339)
                        .is_some_and(|t| t.timestamp_millis() + grace < now_ms);
                    if ended_long_ago {
                        return Ok(Some(Job::Expire(row)));
                    }
                    return Ok(Some(Job::Row(row)));
                }
                _ => continue,
            }
        }
        Ok(None)
    }

    async fn run_job(
        self: &Arc<Self>,
        cfg: &Arc<super::config::LinkConfig>,
        job: Job,
        notes: &mut HashMap<String, &'static str>,
    ) -> Outcome {
        match job {
            Job::Prelude {
                call_id,
                task_id,
                title,
            } => {
                let text = render_prelude(cfg.prelude(), title.as_deref());
                let session = format!("{INSIGHTS_PREFIX}{call_id}");
                let now = fmt_time(self.conversation.clock().now());
                let body = incoming_body(
                    &task_id,
                    &session,
                    "system_prelude",
                    &now,
                    json!({"text": text}),
                    None,
                );
                match self
                    .post(cfg, body, &task_id, &session, "system_prelude")
                    .await
                {
                    Verdict::Delivered(_) => {
                        self.set_prelude_state(&call_id, PreludeState::Sent);
                        Outcome::Done
                    }
                    v @ Verdict::Retry { .. } => Outcome::Retry(v),
                    Verdict::CallbackRejected { detail }
                    | Verdict::Failed {
                        message: detail, ..
                    } => {
                        tracing::warn!(call_id = %call_id, %detail, "the call's prelude was refused; its transcript is sent without it");
                        self.set_last_error("prelude_rejected", &detail);
                        self.set_prelude_state(&call_id, PreludeState::Failed);
                        Outcome::Done
                    }
                }
            }
            Job::Expire(row) => {
                let msg = format!(
                    "Not sent: the call ended more than {} s before the assistant could be reached.",
                    self.conversation.settings().insights_grace_ms / 1000
                );
                match self
                    .conversation
                    .set_delivery(
                        row.id,
                        DeliveryUpdate {
                            state: DeliveryState::Failed,
                            task_id: None,
                            error: Some(("call_ended".into(), msg)),
                        },
                    )
                    .await
                {
                    Ok(()) | Err(CoreError::MessageNotFound) => Outcome::Done,
                    Err(e) => Outcome::Retry(storage_retry(e)),
                }
            }
            Job::Row(row) => self.deliver_row(cfg, row, notes).await,
        }
    }

    async fn deliver_row(
        self: &Arc<Self>,
        cfg: &Arc<LinkConfig>,
        row: MessageRow,
        notes: &mut HashMap<String, &'static str>,
    ) -> Outcome {
        // The task id first: on disk before the assistant can see it.
        let task_id = match row.task_id.clone() {
            Some(t) => t,
            None => {
                let t = uuid::Uuid::new_v4().to_string();
                if let Err(e) = self
                    .conversation
                    .set_delivery(
                        row.id,
                        DeliveryUpdate {
                            state: DeliveryState::Pending,
                            task_id: Some(t.clone()),
                            error: None,
                        },
                    )
                    .await
                {
                    return match e {
                        CoreError::MessageNotFound => Outcome::Done,
                        e => Outcome::Retry(storage_retry(e)),
                    };
                }
                t
            }
        };
        let (reason, payload) = match row.kind {
            MessageKind::User => (
                "chat_message",
                json!({"text": row.text, "user_message_id": row.message_id}),
            ),
            _ => (
                "transcript_chunk",
                json!({"text": transcript_text(&row), "is_final": true}),
            ),
        };
        let occurred_at = row.occurred_at.clone().unwrap_or(row.received_at.clone());
        let mut verdict;
        loop {
            let events = self.uses_events(cfg);
            let callback = (!events).then(|| (self.callback.url(), self.callback.token()));
            let body = incoming_body(
                &task_id,
                &row.session_id,
                reason,
                &occurred_at,
                payload.clone(),
                callback,
            );
            verdict = self
                .post(cfg, body, &task_id, &row.session_id, reason)
                .await;
            if let Verdict::CallbackRejected { detail } = &verdict {
                let cb = self.callback.url();
                let (code, message) = if events {
                    // We sent no callback block, and the assistant wants one.
                    let missing = if self.events_support() == Some(false) {
                        " and it has no GET /v1/events (404) to read replies from"
                    } else {
                        ""
                    };
                    (
                        "callback_required",
                        format!(
                            "The assistant requires a callback URL ({detail}){missing}: set the \
                             link's mode to \"auto\" or \"callback\" in Settings → Assistant, \
                             then retry."
                        ),
                    )
                } else {
                    let fix = format!(
                        "Allow it on the assistant (STAGEWHISPER_ALLOW_CALLBACK_URLS={cb}) or use a \
                         loopback callback URL."
                    );
                    let can_fall_back =
                        cfg.stored.mode == Mode::Auto && self.events_support() == Some(true);
                    if can_fall_back {
                        let reason_text = format!(
                            "The assistant rejects this app's callback URL {cb} ({detail}), so \
                             replies are read from its GET /v1/events stream instead. {fix}"
                        );
                        self.set_fallback(reason_text.clone());
                        self.set_status(StatusKind::Online, reason_text);
                        continue; // same task id, without the callback block
                    }
                    let missing = match self.events_support() {
                        Some(false) => " This assistant offers no GET /v1/events fallback (404), so it must be able to reach the callback URL.",
                        _ if cfg.stored.mode == Mode::Callback => " (Mode \"callback\": the GET /v1/events fallback is not used.)",
                        _ => "",
                    };
                    (
                        "callback_rejected",
                        format!(
                            "The assistant rejects this app's callback URL {cb} ({detail}). {fix}{missing}"
                        ),
                    )
                };
                if code == "callback_rejected" {
                    self.set_callback_problem(Some(message.clone()));
                }
                self.set_last_error(code, &message);
                self.set_status(StatusKind::Misconfigured, message.clone());
                verdict = Verdict::Failed {
                    code,
                    message,
                    status: Some(StatusKind::Misconfigured),
                };
            }
            break;
        }
        match verdict {
            Verdict::Delivered(how) => {
                if !self.uses_events(cfg) && self.callback_problem().is_some() {
                    self.set_callback_problem(None);
                }
                tracing::info!(row = row.id, task_id = %task_id, session_id = %row.session_id, reason, how, "delivered to the assistant");
                if let Err(e) = self
                    .conversation
                    .set_delivery(
                        row.id,
                        DeliveryUpdate {
                            state: DeliveryState::Sent,
                            task_id: Some(task_id),
                            error: None,
                        },
                    )
                    .await
                {
                    if e != CoreError::MessageNotFound {
                        // Sent but not recorded: the next attempt reuses the task id and the
                        // assistant answers `duplicate`.
                        return Outcome::Retry(storage_retry(e));
                    }
                }
                if self.uses_events(cfg) {
                    self.watch_events(&row.session_id);
                }
                Outcome::Done
            }
            v @ Verdict::Retry { .. } => {
                if let Verdict::Retry { code, message, .. } = &v {
                    let key = format!("row:{}", row.id);
                    if notes.get(&key) != Some(code) {
                        notes.insert(key, code);
                        let note = format!("Not delivered yet: {message}");
                        let _ = self
                            .conversation
                            .set_delivery(
                                row.id,
                                DeliveryUpdate {
                                    state: DeliveryState::Pending,
                                    task_id: Some(task_id.clone()),
                                    error: Some((code.to_string(), note)),
                                },
                            )
                            .await;
                    }
                }
                Outcome::Retry(v)
            }
            Verdict::Failed { code, message, .. } => {
                tracing::warn!(row = row.id, task_id = %task_id, session_id = %row.session_id, code, %message, "delivery failed");
                match self
                    .conversation
                    .set_delivery(
                        row.id,
                        DeliveryUpdate {
                            state: DeliveryState::Failed,
                            task_id: Some(task_id),
                            error: Some((code.to_string(), message)),
                        },
                    )
                    .await
                {
                    Ok(()) | Err(CoreError::MessageNotFound) => Outcome::Done,
                    Err(e) => Outcome::Retry(storage_retry(e)),
                }
            }
            Verdict::CallbackRejected { .. } => unreachable!("turned into Failed above"),
        }
    }

    /// One `POST /v1/incoming`; updates the link status from the answer.
    async fn post(
        &self,
        cfg: &LinkConfig,
        body: Vec<u8>,
        task_id: &str,
        session_id: &str,
        reason: &str,
    ) -> Verdict {
        let ep = &cfg.endpoint;
        let base = cfg.stored.base_url.as_str();
        let call = Call::new(Method::POST, "/v1/incoming")
            .bearer(cfg.relay_token())
            .json(body);
        let verdict = match client::send(ep, call, self.settings.timeouts()).await {
            Ok(resp) => {
                let v = classify(&resp, base);
                tracing::debug!(task_id, session_id, reason, status = resp.status.as_u16(), verdict = ?v, "POST /v1/incoming");
                v
            }
            Err(e) => classify_error(&e, base, ep.port),
        };
        match &verdict {
            Verdict::Delivered(_) => {
                if self.status_kind() != StatusKind::Online {
                    self.set_status(
                        StatusKind::Online,
                        format!("Delivering to the assistant at {base}."),
                    );
                }
            }
            Verdict::Retry {
                code,
                message,
                status,
                ..
            } => {
                self.set_last_error(code, message);
                if *status != StatusKind::Online {
                    self.set_status(*status, message.clone());
                }
            }
            Verdict::Failed {
                code,
                message,
                status,
            } => {
                self.set_last_error(code, message);
                if let Some(st) = status {
                    self.set_status(*st, message.clone());
                }
            }
            Verdict::CallbackRejected { .. } => {}
        }
        verdict
    }
}

fn job_key(job: &Job) -> String {
    match job {
        Job::Prelude { call_id, .. } => format!("prelude:{call_id}"),
        Job::Row(r) | Job::Expire(r) => format!("row:{}", r.id),
    }
}

fn storage_retry(e: CoreError) -> Verdict {
    tracing::warn!(error = %e, "assistant link: cannot record a delivery state; retrying");
    Verdict::Retry {
        code: "storage_unavailable",
        message: e.to_string(),
        after: Some(Duration::from_secs(1)),
        status: StatusKind::Online,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::header::HeaderMap;

    fn resp(status: u16, body: &str) -> Response {
        Response {
            status: StatusCode::from_u16(status).unwrap(),
            headers: HeaderMap::new(),
            body: bytes::Bytes::from(body.to_string()),
        }
    }

    const B: &str = "http://127.0.0.1:1";

    #[test]
    fn success_answers_are_delivered() {
        assert_eq!(
            classify(&resp(202, r#"{"status":"accepted"}"#), B),
            Verdict::Delivered("accepted")
        );
        assert_eq!(
            classify(&resp(202, r#"{"status":"in_flight"}"#), B),
            Verdict::Delivered("in_flight")
        );
        assert_eq!(
            classify(&resp(200, r#"{"status":"duplicate","result":{}}"#), B),
            Verdict::Delivered("duplicate")
        );
        let mut r = resp(202, r#"{"status":"accepted"}"#);
        r.headers
            .insert("x-idempotent-replay", "true".parse().unwrap());
        assert_eq!(classify(&r, B), Verdict::Delivered("replay"));
    }

    #[test]
    fn transient_answers_are_retried() {
        for code in [408, 425, 429, 500, 502, 503] {
            assert!(
                matches!(classify(&resp(code, "{}"), B), Verdict::Retry { .. }),
                "{code}"
            );
        }
        let mut r = resp(429, r#"{"error":"too_many"}"#);
        r.headers.insert("retry-after", "7".parse().unwrap());
        match classify(&r, B) {
            Verdict::Retry { after, .. } => assert_eq!(after, Some(Duration::from_secs(7))),
            v => panic!("{v:?}"),
        }
        assert!(matches!(
            classify_error(&ClientError::Refused, B, 1),
            Verdict::Retry {
                code: "assistant_unreachable",
                ..
            }
        ));
    }

    #[test]
    fn client_errors_fail_with_a_specific_sentence() {
        match classify(&resp(401, r#"{"error":"bad_bearer"}"#), B) {
            Verdict::Failed {
                code,
                message,
                status,
            } => {
                assert_eq!(code, "assistant_auth_failed");
                assert!(message.contains("401 bad_bearer"), "{message}");
                assert_eq!(status, Some(StatusKind::AuthFailed));
            }
            v => panic!("{v:?}"),
        }
        assert_eq!(
            classify(
                &resp(
                    400,
                    r#"{"error":"validation_failed","detail":"invalid_callback_url"}"#
                ),
                B
            ),
            Verdict::CallbackRejected {
                detail: "400 validation_failed: invalid_callback_url".into()
            }
        );
        assert!(matches!(
            classify(
                &resp(
                    400,
                    r#"{"error":"chat_message requires callback {url, token}"}"#
                ),
                B
            ),
            Verdict::CallbackRejected { .. }
        ));
        match classify(
            &resp(
                400,
                r#"{"error":"validation_failed","detail":"text_too_long"}"#,
            ),
            B,
        ) {
            Verdict::Failed { code, message, .. } => {
                assert_eq!(code, "assistant_rejected");
                assert!(message.contains("text_too_long"));
            }
            v => panic!("{v:?}"),
        }
        assert!(matches!(
            classify(&resp(404, "{}"), B),
            Verdict::Failed {
                code: "assistant_not_found",
                ..
            }
        ));
        assert!(matches!(
            classify(&resp(403, r#"{"error":"bad_host"}"#), B),
            Verdict::Failed {
                code: "assistant_forbidden",
                ..
            }
        ));
    }

    #[test]
    fn bodies_follow_the_protocol() {
        let b = incoming_body(
            "t",
            "s",
            "chat_message",
            "2026-01-01T00:00:00Z",
            json!({"text": "hi", "user_message_id": "u"}),
            Some(("http://127.0.0.1:5".into(), "tok".into())),
        );
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert_eq!(v["callback"]["url"], "http://127.0.0.1:5");
        assert_eq!(v["payload"]["user_message_id"], "u");
        let b = incoming_body("t", "s", "system_prelude", "x", json!({"text": "p"}), None);
        let v: Value = serde_json::from_slice(&b).unwrap();
        assert!(v.get("callback").is_none());
    }
}
