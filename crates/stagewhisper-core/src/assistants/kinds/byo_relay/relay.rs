//! The relay API on the callback listener, under `/api/v1/assistant-relay/` (Hermes) and
//! `/api/v1/openclaw/` (OpenClaw; same meaning). Every refusal is a 4xx `{"detail", "error"}`
//! (the plugins print `detail`); every route but `pair/complete` needs `Authorization: Bearer
//! <relay token>`, compared in constant time; failed pairing codes and tokens are throttled
//! (429 with `Retry-After` while locked; the right code or token still works).
//!
//! A result is stored on its first receipt and answered 200; the same result again is a
//! 200 `duplicate`. Refused (4xx, nothing stored): envelopes that do not open (tampered, other
//! key, wrong role or content type, another job's correlation id), envelope `message_id`s seen
//! before (replay), plaintext where a sealed answer is due, and results for a job that already
//! timed out (`job_expired`, 409).

// A refusal is the answer itself (`Err(Resp)`), built once and returned as is.
#![allow(clippy::result_large_err)]

use super::crypto::{Dialect, Envelope, ROLE_PLUGIN};
use super::jobs::{self, Job};
use super::kind::ByoKind;
use super::pairing::Integration;
use super::schema;
use crate::http::Resp;
use crate::protocol::{Callback, Status};
use crate::tokens::secret_eq;
use axum::response::sse::{Event, Sse};
use axum::response::IntoResponse;
use bytes::Bytes;
use hyper::header::{HeaderMap, HeaderValue, CACHE_CONTROL, RETRY_AFTER};
use hyper::StatusCode;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, Notify};

pub const HERMES_PREFIX: &str = "/api/v1/assistant-relay/";
pub const OPENCLAW_PREFIX: &str = "/api/v1/openclaw/";
/// A comment line on an idle stream this often.
pub const KEEPALIVE: Duration = Duration::from_secs(15);

/// The relay API of one dialect (its path prefix), over the kind.
#[derive(Clone)]
pub struct Relay {
    kind: ByoKind,
    dialect: Dialect,
}

/// The routes (`relay_routes.rs`): the axum Router of the kind, and its checks.
#[path = "relay_routes.rs"]
mod routes;
pub use routes::router;

fn detail(status: StatusCode, code: &str, message: &str) -> Resp {
    crate::http::json_response(status, &json!({"detail": message, "error": code}))
}

fn unpaired() -> Resp {
    detail(
        StatusCode::UNAUTHORIZED,
        "not_paired",
        "this integration is not paired (or was unpaired)",
    )
}

fn ok(v: Value) -> Resp {
    crate::http::json_response(StatusCode::OK, &v)
}

fn throttled(secs: i64) -> Resp {
    let mut r = detail(
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_attempts",
        "too many failed attempts; try again later",
    );
    r.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(secs as u64));
    r
}

fn db(e: impl std::fmt::Display) -> Resp {
    tracing::error!(error = %e, "BYO jobs table unavailable");
    detail(
        StatusCode::SERVICE_UNAVAILABLE,
        "storage_unavailable",
        "the desktop could not read its jobs; retry",
    )
}

/// How a job ends: its state, its result and its error (code, message).
type Settled<'a> = (&'a str, Option<Value>, Option<(String, String)>);

/// The request's JSON body (an empty one is `{}`).
fn json_body(body: &Bytes) -> Result<Value, Resp> {
    if body.iter().all(|b| b.is_ascii_whitespace()) {
        return Ok(json!({}));
    }
    serde_json::from_slice(body).map_err(|e| {
        detail(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            &format!("the body is not JSON: {e}"),
        )
    })
}

impl Relay {
    fn integration_ok(&self, id: &str) -> bool {
        self.kind
            .paired()
            .is_some_and(|p| id == p.integration.integration_id)
    }

    /// `POST integrations/{id}/heartbeat`: the plugin is alive; answers the kind's status.
    fn heartbeat(&self, body: &Bytes) -> Resp {
        let b = match json_body(body) {
            Ok(b) => b,
            Err(r) => return r,
        };
        self.kind.heartbeat(&b);
        ok(json!({"ok": true, "status": self.kind_status()}))
    }

    /// `POST integrations/{id}/test-reply`: the answer to a connection test.
    async fn test_reply(&self, body: &Bytes, now: i64) -> Resp {
        let b = match json_body(body) {
            Ok(b) => b,
            Err(r) => return r,
        };
        let test_id = b["test_id"].as_str().unwrap_or("");
        self.kind
            .test_replied(test_id, b["content"].as_str().unwrap_or(""));
        let jobs = self.kind.jobs();
        let _ = jobs
            .finish(test_id, "completed", Some(&b["content"]), None, now)
            .await;
        let _ = jobs.mark_applied(test_id).await;
        ok(json!({"ok": true}))
    }

    /// `POST reasoning-jobs/{id}/complete`: the body and its correlation id, then the result.
    async fn complete_request(&self, headers: &HeaderMap, job_id: &str, body: &Bytes) -> Resp {
        let Some(dialect) = self.paired_dialect() else {
            return unpaired();
        };
        let b = match json_body(body) {
            Ok(b) => b,
            Err(r) => return r,
        };
        let corr = headers
            .get("x-correlation-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        self.complete_job(job_id, corr.as_deref(), &b, dialect)
            .await
    }

    /// The dialect of the paired integration (not always the path's: either prefix serves it).
    fn paired_dialect(&self) -> Option<Dialect> {
        self.kind.paired().map(|p| p.integration.dialect())
    }

    fn kind_status(&self) -> Value {
        use crate::assistants::AssistantKind;
        self.kind.status()["status"].clone()
    }

    fn pair(&self, dialect: Dialect, body: &Bytes) -> Resp {
        let now = self.kind.now_ms();
        let b: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(_) => {
                return detail(
                    StatusCode::BAD_REQUEST,
                    "invalid_json",
                    "the body must be JSON {pairing_code, host_label, plugin_public_key}",
                )
            }
        };
        let code = b["pairing_code"].as_str().unwrap_or("");
        if !self.kind.take_code(code) {
            if let Some(secs) = self.kind.inner.pair_guard.locked(now) {
                return throttled(secs);
            }
            self.kind.inner.pair_guard.record_failure(now);
            tracing::warn!("BYO pairing with a wrong, expired or used code");
            return detail(
                StatusCode::BAD_REQUEST,
                "invalid_pairing_code",
                "invalid or expired pairing code",
            );
        }
        let Some(public) = b["plugin_public_key"].as_str() else {
            return detail(
                StatusCode::BAD_REQUEST,
                "missing_field",
                "plugin_public_key is required",
            );
        };
        let host_label = b["host_label"]
            .as_str()
            .map(|s| {
                s.chars()
                    .filter(|c| !c.is_control())
                    .take(80)
                    .collect::<String>()
            })
            .filter(|s| !s.trim().is_empty())
            .unwrap_or_else(|| "assistant".to_string());
        let (integration, keys) =
            Integration::new(dialect, &host_label, public, self.kind.inner.ctx.now());
        match self.kind.complete_pairing(integration, keys) {
            Ok(p) => {
                let mut v = json!({
                    "integration_id": p.integration.integration_id,
                    "relay_token": p.integration.relay_token,
                    "byo_public_key": p.public_b64,
                });
                if dialect == Dialect::OpenClaw {
                    v["label"] = json!(p.integration.label);
                }
                ok(v)
            }
            Err(e) => detail(
                StatusCode::from_u16(e.status).unwrap_or(StatusCode::BAD_REQUEST),
                e.code,
                &e.message,
            ),
        }
    }

    /// `GET integrations/{id}/stream`: the job events on axum's [`Sse`], until the stream is
    /// replaced, the integration unpaired or the app stopped.
    async fn stream(&self) -> axum::response::Response {
        let (rx, stop, generation) = self.kind.open_stream().await;
        let tx = {
            let s = self.kind.inner.stream.lock().expect("stream lock");
            s.as_ref()
                .filter(|s| s.generation == generation)
                .map(|s| s.tx.clone())
        };
        if let Some(tx) = tx {
            tokio::spawn(keepalive(tx, stop, self.kind.inner.ctx.shutdown.clone()));
        }
        let closed = OnClose(Some((self.kind.clone(), generation)));
        let events = futures_util::stream::unfold((rx, closed), |(mut rx, closed)| async move {
            let event = rx.recv().await?;
            Some((Ok::<_, std::convert::Infallible>(event), (rx, closed)))
        });
        // axum's `Sse` writes the frames and the content type; the cache header is ours.
        let mut r = Sse::new(events).into_response();
        r.headers_mut()
            .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        r
    }

    async fn fetch_job(&self, job_id: &str) -> Resp {
        let jobs = self.kind.jobs();
        match jobs.get(job_id).await {
            Ok(Some(j)) if j.event.is_some() && j.purpose != jobs::CHAT => {
                crate::http::json_response(
                    StatusCode::OK,
                    &serde_json::from_str(j.event.as_deref().unwrap_or("{}"))
                        .unwrap_or(Value::Null),
                )
            }
            Ok(_) => detail(StatusCode::NOT_FOUND, "unknown_job", "no such job"),
            Err(e) => db(e),
        }
    }

    /// Opens a plugin envelope for `job`, refusing replays.
    async fn open(
        &self,
        env: &Value,
        dialect: Dialect,
        correlation: &str,
    ) -> Result<Vec<u8>, Resp> {
        let env = Envelope::from_value(env).map_err(|e| {
            detail(
                StatusCode::BAD_REQUEST,
                e.code(),
                &format!("the envelope is not valid: {e}"),
            )
        })?;
        if env.correlation_id != correlation {
            return Err(detail(
                StatusCode::BAD_REQUEST,
                "correlation_mismatch",
                "the envelope belongs to another job",
            ));
        }
        if env.sender_role != ROLE_PLUGIN {
            return Err(detail(
                StatusCode::BAD_REQUEST,
                "bad_sender_role",
                "the envelope was not sealed by the plugin",
            ));
        }
        let p = self.kind.paired().ok_or_else(|| {
            detail(
                StatusCode::UNAUTHORIZED,
                "not_paired",
                "this integration is not paired",
            )
        })?;
        let plain = p.key.open(&env, dialect).map_err(|e| {
            tracing::warn!(code = e.code(), "BYO envelope refused");
            detail(
                StatusCode::BAD_REQUEST,
                e.code(),
                &format!("the envelope does not open: {e}"),
            )
        })?;
        if let Err(code) = self.kind.accept_once(&env.message_id).await {
            tracing::warn!(code, "BYO envelope refused by the replay guard");
            return Err(if code == "replay_guard_unavailable" {
                db(code)
            } else {
                detail(
                    StatusCode::CONFLICT,
                    "replayed_envelope",
                    "this envelope was received before",
                )
            });
        }
        Ok(plain)
    }

    async fn complete_job(
        &self,
        job_id: &str,
        corr: Option<&str>,
        b: &Value,
        dialect: Dialect,
    ) -> Resp {
        let job = match self.job_to_complete(job_id, corr).await {
            Ok(j) => j,
            Err(r) => return r,
        };
        let status = b["status"].as_str().unwrap_or("");
        let now = self.kind.now_ms();
        let (state, result, error): Settled<'_> = match status {
            "completed" => match self.completed_result(&job, &b["output"], dialect).await {
                Ok(settled) => settled,
                Err(r) => return r,
            },
            "failed" | "timed_out" => {
                let code = b["error_code"].as_str().unwrap_or(status).to_string();
                let msg = b["error_message"].as_str().unwrap_or("").to_string();
                (status, None, Some((code, msg)))
            }
            _ => {
                return detail(
                    StatusCode::BAD_REQUEST,
                    "invalid_status",
                    "status must be completed, failed or timed_out",
                )
            }
        };
        self.store_result(job_id, state, result, error, now).await
    }

    /// The reasoning job a result is for: known, not answered yet, not late, and of the same
    /// correlation id; else the refusal.
    async fn job_to_complete(&self, job_id: &str, corr: Option<&str>) -> Result<Job, Resp> {
        let job = match self.kind.jobs().get(job_id).await {
            Ok(Some(j)) if j.purpose != jobs::CHAT && j.purpose != jobs::TEST => j,
            Ok(_) => return Err(detail(StatusCode::NOT_FOUND, "unknown_job", "no such job")),
            Err(e) => return Err(db(e)),
        };
        if let Some(answer) = answered(&job) {
            return Err(answer);
        }
        if let Some(r) = self.expire_if_late(&job).await {
            return Err(r);
        }
        if corr.is_some_and(|c| c != job.correlation_id) {
            return Err(detail(
                StatusCode::BAD_REQUEST,
                "correlation_mismatch",
                "X-Correlation-ID is not this job's",
            ));
        }
        Ok(job)
    }

    /// A `completed` result: the sealed output opened (plaintext only for a probe) and checked
    /// against the job's schema; a result that does not parse or fit fails the job.
    async fn completed_result(
        &self,
        job: &Job,
        output: &Value,
        dialect: Dialect,
    ) -> Result<Settled<'static>, Resp> {
        let value = if output["byo_encrypted"] == true {
            let plain = self
                .open(&output["envelope"], dialect, &job.correlation_id)
                .await?;
            match serde_json::from_slice::<Value>(&plain) {
                Ok(v) => Ok(v),
                Err(_) => Err(("response_parse_error".to_string(), String::new())),
            }
        } else if job.purpose == jobs::PROBE {
            Ok(output.clone())
        } else {
            return Err(detail(
                StatusCode::BAD_REQUEST,
                "plaintext_refused",
                "this job's result must be sealed (byo_encrypted)",
            ));
        };
        Ok(match value {
            Ok(v) => match schema::validate(&job.purpose, &v) {
                Ok(()) => ("completed", Some(v), None),
                Err(e) => ("failed", None, Some(("invalid_result".to_string(), e.0))),
            },
            Err(e) => ("failed", None, Some(e)),
        })
    }

    /// Stores a job's result (once: the same result again is a `duplicate`) and applies it.
    async fn store_result(
        &self,
        job_id: &str,
        state: &str,
        result: Option<Value>,
        error: Option<(String, String)>,
        now: i64,
    ) -> Resp {
        let jobs = self.kind.jobs();
        let err = error.as_ref().map(|(c, m)| (c.as_str(), m.as_str()));
        match jobs.finish(job_id, state, result.as_ref(), err, now).await {
            Ok(true) => {}
            Ok(false) => return ok(json!({"ok": true, "job_id": job_id, "duplicate": true})),
            Err(e) => return db(e),
        }
        tracing::debug!(job = %job_id, state, "BYO job answered");
        // Stored: from here on the answer is 2xx whatever happens.
        if let Ok(Some(j)) = jobs.get(job_id).await {
            let kind = self.kind.clone();
            tokio::spawn(async move { kind.apply(&j).await });
        }
        ok(json!({"ok": true, "job_id": job_id}))
    }

    /// A job past its deadline ends `timed_out` now (before the sweeper sees it): refused.
    async fn expire_if_late(&self, job: &Job) -> Option<Resp> {
        let now = self.kind.now_ms();
        if job.deadline_ms > now {
            return None;
        }
        let jobs = self.kind.jobs();
        if jobs
            .finish(&job.job_id, "timed_out", None, Some(("timed_out", "")), now)
            .await
            .unwrap_or(false)
        {
            if let Ok(Some(j)) = jobs.get(&job.job_id).await {
                let kind = self.kind.clone();
                tokio::spawn(async move { kind.apply(&j).await });
            }
        }
        let mut late = job.clone();
        late.state = "timed_out".into();
        answered(&late)
    }

    async fn chat_job(&self, id: &str) -> Result<Job, Resp> {
        let jobs = self.kind.jobs();
        match jobs.get(id).await {
            Ok(Some(j)) if j.purpose == jobs::CHAT => Ok(j),
            Ok(_) => match jobs.by_reply_id(id).await {
                Ok(Some(j)) => Ok(j),
                Ok(None) => Err(detail(
                    StatusCode::NOT_FOUND,
                    "unknown_message",
                    "no such chat message",
                )),
                Err(e) => Err(db(e)),
            },
            Err(e) => Err(db(e)),
        }
    }

    async fn store_chat(
        &self,
        job: &Job,
        state: &str,
        text: Option<&str>,
        error: Option<(&str, &str)>,
    ) -> Resp {
        let jobs = self.kind.jobs();
        let result = text.map(|t| json!(t));
        match jobs
            .finish(
                &job.job_id,
                state,
                result.as_ref(),
                error,
                self.kind.now_ms(),
            )
            .await
        {
            Ok(true) => {
                if let Ok(Some(j)) = jobs.get(&job.job_id).await {
                    let kind = self.kind.clone();
                    tokio::spawn(async move { kind.apply(&j).await });
                }
                ok(
                    json!({"ok": true, "id": job.reply_id.clone().unwrap_or_else(|| format!("byo-{}", job.job_id))}),
                )
            }
            Ok(false) => ok(json!({"ok": true, "duplicate": true})),
            Err(e) => db(e),
        }
    }

    async fn chat_reply(&self, id: &str, b: &Value) -> Resp {
        let Some(dialect) = self.paired_dialect() else {
            return unpaired();
        };
        let job = match self.chat_job(id).await {
            Ok(j) => j,
            Err(r) => return r,
        };
        if let Some(answer) = answered(&job) {
            return answer;
        }
        if let Some(r) = self.expire_if_late(&job).await {
            return r;
        }
        let status = b["status"].as_str().unwrap_or("completed");
        if status == "errored" {
            let code = b["error_code"].as_str().unwrap_or("errored");
            let msg = b["error_message"].as_str().unwrap_or("");
            return self
                .store_chat(&job, "failed", None, Some((code, msg)))
                .await;
        }
        let env: Value = match &b["content"] {
            Value::String(s) => match serde_json::from_str(s) {
                Ok(v) => v,
                Err(_) => {
                    return detail(
                        StatusCode::BAD_REQUEST,
                        "plaintext_refused",
                        "a chat reply must be a sealed envelope",
                    )
                }
            },
            v @ Value::Object(_) => v.clone(),
            _ => {
                return detail(
                    StatusCode::BAD_REQUEST,
                    "missing_field",
                    "content is required",
                )
            }
        };
        let corr = format!("chat-reply:{}", job.job_id);
        let plain = match self.open(&env, dialect, &corr).await {
            Ok(p) => p,
            Err(r) => return r,
        };
        let text = String::from_utf8_lossy(&plain).to_string();
        self.store_chat(&job, "completed", Some(&text), None).await
    }

    /// `reply/start` of the plain chat flow: typing, and the assistant message id.
    async fn chat_start(&self, user_message_id: &str) -> Resp {
        let job = match self.chat_job(user_message_id).await {
            Ok(j) => j,
            Err(r) => return r,
        };
        let reply_id = job
            .reply_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let jobs = self.kind.jobs();
        if let Err(e) = jobs
            .set_reply(&job.job_id, &reply_id, job.partial.as_deref().unwrap_or(""))
            .await
        {
            return db(e);
        }
        if job.is_open() {
            if let (Some(session), Some(task)) = (&job.app_session, &job.source_task_id) {
                let mut typing = Callback::new(task.clone(), session.clone(), Status::Typing);
                typing.user_message_id = job.anchor.clone();
                let _ = self.kind.inner.ctx.submit(typing).await;
            }
        }
        ok(json!({"id": reply_id, "user_message_id": job.job_id, "status": "streaming"}))
    }

    async fn chat_plain(&self, reply_id: &str, step: &str, b: &Value) -> Resp {
        let job = match self.chat_job(reply_id).await {
            Ok(j) => j,
            Err(r) => return r,
        };
        if let Some(answer) = answered(&job) {
            return answer;
        }
        let mut partial = job.partial.clone().unwrap_or_default();
        if step == "delta" {
            partial.push_str(b["delta"].as_str().unwrap_or(""));
            let jobs = self.kind.jobs();
            if let Err(e) = jobs.set_reply(&job.job_id, reply_id, &partial).await {
                return db(e);
            }
            return ok(json!({"ok": true}));
        }
        let status = b["status"].as_str().unwrap_or("completed");
        if status != "completed" {
            let code = b["error_code"].as_str().unwrap_or(status);
            let msg = b["error_message"].as_str().unwrap_or("");
            return self
                .store_chat(&job, "failed", None, Some((code, msg)))
                .await;
        }
        let text = b["content"].as_str().map(str::to_string).unwrap_or(partial);
        if text.trim().is_empty() {
            return self
                .store_chat(&job, "failed", None, Some(("no_reply", "")))
                .await;
        }
        self.store_chat(&job, "completed", Some(&text), None).await
    }
}

/// The answer for a job that already has one: a duplicate 200, or 409 once it timed out.
fn answered(job: &Job) -> Option<Resp> {
    if job.is_open() {
        return None;
    }
    if job.state == "timed_out" {
        return Some(detail(
            StatusCode::CONFLICT,
            "job_expired",
            "the job's deadline passed; its result is no longer accepted",
        ));
    }
    Some(ok(
        json!({"ok": true, "job_id": job.job_id, "duplicate": true}),
    ))
}

fn method_not_allowed() -> Resp {
    detail(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "use POST",
    )
}

/// Keepalive comments until the stream is stopped (unpaired, replaced) or the app stops.
async fn keepalive(
    tx: mpsc::UnboundedSender<Event>,
    stop: Arc<Notify>,
    shutdown: crate::http::Shutdown,
) {
    let _ = tx.send(Event::default().comment("connected"));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(KEEPALIVE) => {
                if tx.send(Event::default().comment("keepalive")).is_err() {
                    return;
                }
            }
            _ = stop.notified() => return,
            _ = shutdown.wait() => return,
        }
    }
}

/// Tells the kind its stream of this generation ended, when the stream is dropped.
struct OnClose(Option<(ByoKind, u64)>);

impl Drop for OnClose {
    fn drop(&mut self) {
        if let Some((kind, generation)) = self.0.take() {
            kind.stream_closed(generation);
        }
    }
}
