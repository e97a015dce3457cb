//! One delivery attempt of the `incoming` kind: `POST {base}/v1/incoming` (the generic outbox,
//! [`crate::assistants::delivery_queue`], picks the entry, keeps its task id and retries):
//! - connection errors, timeouts, 408/425/429/5xx: retry after (same task id);
//! - `202 accepted`, `202 in_flight`, `200 duplicate` (and OpenClaw's idempotent replay):
//!   delivered;
//! - other 4xx: failed with a code and a sentence; a 400 about the callback URL switches to
//!   `GET /v1/events` (mode `auto`, when offered) and resends under the same task id.

use super::client::{self, Call, ClientError, Response};
use super::config::{LinkConfig, Mode};
use super::{Inner, StatusKind};
use crate::assistants::delivery_queue::transcript_text;
use crate::assistants::{Attempt, Outgoing};
use crate::clock::fmt_time;
use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

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
    if resp.status.is_success() {
        return Verdict::Delivered(accepted_how(resp));
    }
    let words = assistant_error(resp);
    let said = status_said(resp, &words);
    retry_verdict(resp, &said).unwrap_or_else(|| refusal_verdict(resp, &words, &said, base_url))
}

/// The status code and what the assistant said with it: `404` or `404 no such route`.
pub fn status_said(resp: &Response, words: &str) -> String {
    let code = resp.status.as_u16();
    if words.is_empty() {
        code.to_string()
    } else {
        format!("{code} {words}")
    }
}

/// How a 2xx answer took the entry: `replay`, `in_flight`, `duplicate` or `accepted`.
fn accepted_how(resp: &Response) -> &'static str {
    if resp
        .headers
        .get("x-idempotent-replay")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"true"))
    {
        "replay"
    } else {
        match resp.json()["status"].as_str() {
            Some("in_flight") => "in_flight",
            Some("duplicate") => "duplicate",
            _ => "accepted",
        }
    }
}

/// A busy or failing assistant (408, 425, 429, 5xx): retried; `None` for any other status.
fn retry_verdict(resp: &Response, said: &str) -> Option<Verdict> {
    let s = resp.status;
    let code = s.as_u16();
    Some(match s {
        StatusCode::REQUEST_TIMEOUT | StatusCode::TOO_MANY_REQUESTS => Verdict::Retry {
            code: if s == StatusCode::TOO_MANY_REQUESTS {
                "assistant_busy"
            } else {
                "assistant_timeout"
            },
            message: format!("The assistant is busy ({said}); retrying automatically."),
            after: resp.retry_after(),
            status: StatusKind::Online,
        },
        _ if code == 425 => Verdict::Retry {
            code: "assistant_busy",
            message: format!("The assistant asked to retry later ({said})."),
            after: resp.retry_after(),
            status: StatusKind::Online,
        },
        _ if s.is_server_error() => Verdict::Retry {
            code: "assistant_error",
            message: format!("The assistant answered {said}; retrying automatically."),
            after: resp.retry_after(),
            status: StatusKind::Unreachable,
        },
        _ => return None,
    })
}

/// A refusal (4xx): the entry fails with a sentence saying what to fix, or the callback URL
/// was rejected.
fn refusal_verdict(resp: &Response, words: &str, said: &str, base_url: &str) -> Verdict {
    match resp.status {
        StatusCode::UNAUTHORIZED => Verdict::Failed {
            code: "assistant_auth_failed",
            message: format!(
                "The assistant rejected the relay token ({said}). Enter the token the assistant is \
                 configured with in Settings → Assistant (Hermes: STAGEWHISPER_RELAY_TOKEN; \
                 OpenClaw: plugins.entries.stagewhisper.config.httpToken), then retry."
            ),
            status: Some(StatusKind::AuthFailed),
        },
        StatusCode::FORBIDDEN => Verdict::Failed {
            code: "assistant_forbidden",
            message: format!(
                "The assistant refused the request ({said}): it accepts only loopback Host headers \
                 unless STAGEWHISPER_ALLOW_INGRESS_HOSTS lists the host of {base_url}."
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
            message: format!("The assistant refused this as too large ({said})."),
            status: None,
        },
        StatusCode::BAD_REQUEST if is_callback_problem(words) => Verdict::CallbackRejected {
            detail: said.to_string(),
        },
        _ => Verdict::Failed {
            code: "assistant_rejected",
            message: format!(
                "The assistant rejected this ({said}). It was not delivered; retry or rephrase it."
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

impl Inner {
    /// One attempt at delivering a stored outbox entry with `POST /v1/incoming` (the generic
    /// outbox records the verdict and retries).
    pub(crate) async fn deliver(
        self: &Arc<Self>,
        cfg: &Arc<LinkConfig>,
        entry: &Outgoing,
    ) -> Attempt {
        match entry {
            Outgoing::Prelude {
                task_id,
                call_id,
                session_id,
                title,
            } => {
                self.deliver_prelude(cfg, task_id, call_id, session_id, title.as_deref())
                    .await
            }
            // `/v1/incoming` has no reason for the end of a call: nothing to send.
            Outgoing::CallEnded { .. } => Attempt::Delivered("not_applicable"),
            Outgoing::UserMessage {
                task_id,
                session_id,
                text,
                user_message_id,
                occurred_at,
            } => {
                let payload = json!({"text": text, "user_message_id": user_message_id});
                self.deliver_turn(
                    cfg,
                    task_id,
                    session_id,
                    "chat_message",
                    occurred_at,
                    payload,
                )
                .await
            }
            Outgoing::TranscriptTurn {
                task_id,
                session_id,
                speaker,
                text,
                occurred_at,
                ..
            } => {
                let payload = json!({
                    "text": transcript_text(speaker.as_deref(), text),
                    "is_final": true,
                });
                self.deliver_turn(
                    cfg,
                    task_id,
                    session_id,
                    "transcript_chunk",
                    occurred_at,
                    payload,
                )
                .await
            }
        }
    }

    /// A call's prelude (`system_prelude`, without a callback block); a refusal fails it.
    async fn deliver_prelude(
        &self,
        cfg: &LinkConfig,
        task_id: &str,
        call_id: &str,
        session_id: &str,
        title: Option<&str>,
    ) -> Attempt {
        let text = self
            .conversation
            .call_prelude_for(call_id, cfg.prelude(), title);
        let now = fmt_time(self.conversation.clock().now());
        let body = incoming_body(
            task_id,
            session_id,
            "system_prelude",
            &now,
            json!({"text": text}),
            None,
        );
        match self
            .post(cfg, body, task_id, session_id, "system_prelude")
            .await
        {
            Verdict::Delivered(how) => Attempt::Delivered(how),
            Verdict::Retry {
                code,
                message,
                after,
                ..
            } => Attempt::RetryAfter {
                code,
                message,
                after,
            },
            Verdict::CallbackRejected { detail }
            | Verdict::Failed {
                message: detail, ..
            } => {
                tracing::debug!(call_id = %call_id, %detail, "system_prelude refused");
                self.set_last_error("prelude_rejected", &detail);
                Attempt::Failed {
                    code: "prelude_rejected",
                    message: detail,
                }
            }
        }
    }

    /// A chat message or a transcript turn: with the callback block, or without it (replies
    /// over `GET /v1/events`) when the assistant rejects the callback URL and offers the stream.
    async fn deliver_turn(
        self: &Arc<Self>,
        cfg: &Arc<LinkConfig>,
        task_id: &str,
        session_id: &str,
        reason: &str,
        occurred_at: &str,
        payload: Value,
    ) -> Attempt {
        let mut verdict;
        loop {
            let events = self.uses_events(cfg);
            let callback = (!events).then(|| (self.callback.url(), self.callback.token()));
            let body = incoming_body(
                task_id,
                session_id,
                reason,
                occurred_at,
                payload.clone(),
                callback,
            );
            verdict = self.post(cfg, body, task_id, session_id, reason).await;
            if let Verdict::CallbackRejected { detail } = &verdict {
                let Some((code, message)) = self.callback_refusal(cfg, events, detail) else {
                    continue; // same task id, without the callback block
                };
                verdict = self.refused_for_callback(code, message);
            }
            break;
        }
        self.turn_attempt(cfg, session_id, verdict)
    }

    /// What a rejected callback URL comes to: `None` when the link falls back to
    /// `GET /v1/events` (the turn is resent), else the failure's code and sentence.
    fn callback_refusal(
        &self,
        cfg: &LinkConfig,
        events: bool,
        detail: &str,
    ) -> Option<(&'static str, String)> {
        let cb = self.callback.url();
        if events {
            // We sent no callback block, and the assistant wants one.
            let missing = if self.events_support() == Some(false) {
                " and it has no GET /v1/events (404) to read replies from"
            } else {
                ""
            };
            return Some((
                "callback_required",
                format!(
                    "The assistant requires a callback URL ({detail}){missing}: set the \
                     link's mode to \"auto\" or \"callback\" in Settings → Assistant, \
                     then retry."
                ),
            ));
        }
        let fix = format!(
            "Allow it on the assistant (STAGEWHISPER_ALLOW_CALLBACK_URLS={cb}) or use a \
             loopback callback URL."
        );
        let can_fall_back = cfg.stored.mode == Mode::Auto && self.events_support() == Some(true);
        if can_fall_back {
            let reason_text = format!(
                "The assistant rejects this app's callback URL {cb} ({detail}), so \
                 replies are read from its GET /v1/events stream instead. {fix}"
            );
            self.set_fallback(reason_text.clone());
            self.set_status(StatusKind::Online, reason_text);
            return None;
        }
        let missing = match self.events_support() {
            Some(false) => " This assistant offers no GET /v1/events fallback (404), so it must be able to reach the callback URL.",
            _ if cfg.stored.mode == Mode::Callback => " (Mode \"callback\": the GET /v1/events fallback is not used.)",
            _ => "",
        };
        Some((
            "callback_rejected",
            format!(
                "The assistant rejects this app's callback URL {cb} ({detail}). {fix}{missing}"
            ),
        ))
    }

    /// Records a callback problem on the link (misconfigured) and fails the turn with it.
    fn refused_for_callback(&self, code: &'static str, message: String) -> Verdict {
        if code == "callback_rejected" {
            self.set_callback_problem(Some(message.clone()));
        }
        self.set_last_error(code, &message);
        self.set_status(StatusKind::Misconfigured, message.clone());
        Verdict::Failed {
            code,
            message,
            status: Some(StatusKind::Misconfigured),
        }
    }

    /// The attempt a turn's verdict comes to; a delivery clears a callback problem (callback
    /// mode) or follows the session's replies (events mode).
    fn turn_attempt(
        self: &Arc<Self>,
        cfg: &Arc<LinkConfig>,
        session_id: &str,
        verdict: Verdict,
    ) -> Attempt {
        match verdict {
            Verdict::Delivered(how) => {
                if !self.uses_events(cfg) && self.callback_problem().is_some() {
                    self.set_callback_problem(None);
                }
                if self.uses_events(cfg) {
                    self.watch_events(session_id);
                }
                if how == "duplicate" {
                    Attempt::Duplicate
                } else {
                    Attempt::Delivered(how)
                }
            }
            Verdict::Retry {
                code,
                message,
                after,
                ..
            } => Attempt::RetryAfter {
                code,
                message,
                after,
            },
            Verdict::Failed { code, message, .. } => Attempt::Failed { code, message },
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
