//! The callback listener: `POST /tasks/{task_id}` from the assistant. HTTP only — Host and
//! bearer checks, auth-failure throttling, limits, parsing — then the conversation decides.

use crate::assistants::Assistants;
use crate::clock::SharedClock;
use crate::conns::Connection;
use crate::conversation::{Conversation, CoreError, Outcome};
use crate::faults::{Faults, When};
use crate::http::{self, AllowedHosts, Resp};
use crate::protocol::{self, Callback, MAX_BODY_BYTES};
use crate::tokens::{bearer, Secret};
use crate::tunnel::ProbeResponder;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, AUTHORIZATION, RETRY_AFTER, WWW_AUTHENTICATE};
use hyper::{Method, Request, StatusCode};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use tracing::Instrument;

/// Failed auth attempts allowed in [`FAILURE_WINDOW_MS`] before throttling.
pub const MAX_AUTH_FAILURES: usize = 10;
pub const FAILURE_WINDOW_MS: i64 = 60_000;
/// How long failing clients get 429 once throttling starts.
pub const LOCKOUT_MS: i64 = 30_000;

/// Counts failed auth attempts. Every caller looks the same (tunnelled traffic arrives from
/// 127.0.0.1 too), so the count is global; while locked, wrong tokens get 429 instead of 401,
/// and the right token still works, so an attacker cannot lock the assistant out.
#[derive(Debug, Default)]
pub struct AuthGuard {
    inner: Mutex<GuardState>,
}

#[derive(Debug, Default)]
struct GuardState {
    failures: VecDeque<i64>,
    locked_until: i64,
}

impl AuthGuard {
    /// Seconds to wait, when throttled at `now_ms`.
    pub fn locked(&self, now_ms: i64) -> Option<i64> {
        let g = self.inner.lock().expect("guard lock");
        (g.locked_until > now_ms).then(|| ((g.locked_until - now_ms + 999) / 1000).max(1))
    }

    pub fn record_failure(&self, now_ms: i64) {
        let mut g = self.inner.lock().expect("guard lock");
        while g
            .failures
            .front()
            .is_some_and(|t| *t <= now_ms - FAILURE_WINDOW_MS)
        {
            g.failures.pop_front();
        }
        g.failures.push_back(now_ms);
        if g.failures.len() >= MAX_AUTH_FAILURES {
            g.locked_until = now_ms + LOCKOUT_MS;
            g.failures.clear();
        }
    }
}

pub struct CallbackListener {
    pub conversation: Conversation,
    pub token: Arc<Secret>,
    pub hosts: Arc<AllowedHosts>,
    pub guard: AuthGuard,
    pub clock: SharedClock,
    /// Test-only fault injection (off unless explicitly enabled, see [`crate::faults`]).
    pub faults: Arc<Faults>,
    /// The tunnel's signed probe (`GET /probe/{nonce}`, see [`crate::tunnel::probe`]).
    pub probes: Arc<ProbeResponder>,
    /// Routes of the active assistant kind (see [`crate::assistants::CallbackRoutes`]).
    pub assistants: Option<Assistants>,
}

impl CallbackListener {
    pub async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Resp {
        let span = tracing::info_span!("callback", path = %req.uri().path());
        self.route(req).instrument(span).await
    }

    async fn route(&self, req: Request<Incoming>) -> Resp {
        // First: a tunnel probe this app sent itself (any Host: the probe is how the app
        // learns which Host its tunnel delivers). Anything else falls through unchanged.
        if let Some(r) = self.probes.answer(&req) {
            return r;
        }
        if !self.hosts.allows(&req) {
            return http::bad_host();
        }
        let Some(raw_task) = req
            .uri()
            .path()
            .strip_prefix("/tasks/")
            .filter(|t| !t.is_empty() && !t.contains('/'))
            .map(str::to_string)
        else {
            return self.kind_route(req).await;
        };
        if req.method() != Method::POST {
            let mut r = http::error(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "callbacks are POST",
            );
            r.headers_mut()
                .insert(ALLOW, HeaderValue::from_static("POST"));
            return r;
        }
        if let Err(refused) = self.authorize(&req) {
            return refused;
        }
        // The bearer is right: this connection is the assistant's (it keeps its keep-alive
        // allowance and is not closed for room while busy, see crate::conns).
        Connection::mark(&req);
        match read_callback(&raw_task, req).await {
            Ok(cb) => self.store(cb).await,
            Err(refused) => refused,
        }
    }

    /// The bearer token, checked in constant time; a wrong or missing one is counted, and
    /// answered 429 while failures are throttled, else 401.
    // A refusal is the answer itself (`Err(Resp)`), built once and returned as is.
    #[allow(clippy::result_large_err)]
    fn authorize(&self, req: &Request<Incoming>) -> Result<(), Resp> {
        let presented = bearer(
            req.headers()
                .get(AUTHORIZATION)
                .and_then(|v| v.to_str().ok()),
        );
        if presented.is_some_and(|t| self.token.matches(t)) {
            return Ok(());
        }
        let now_ms = self.clock.now_ms();
        if let Some(secs) = self.guard.locked(now_ms) {
            let mut r = http::error(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_auth_failures",
                "too many failed authentication attempts; try again later",
            );
            r.headers_mut()
                .insert(RETRY_AFTER, HeaderValue::from(secs as u64));
            return Err(r);
        }
        self.guard.record_failure(now_ms);
        tracing::warn!("callback with a missing or wrong bearer token");
        let mut r = http::error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong bearer token",
        );
        r.headers_mut()
            .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        Err(r)
    }

    /// Hands a parsed callback to the conversation and answers once it is decided (and, when
    /// applied, committed).
    async fn store(&self, cb: Callback) -> Resp {
        tracing::debug!(session_id = %cb.session_id, status = cb.status.as_str(), message_id = ?cb.message_id, "callback");
        if self.faults.take(When::BeforeCommit, &cb) {
            return injected_503();
        }
        let probe = self.faults.enabled().then(|| cb.clone());
        let result = self.conversation.submit(cb).await;
        if let (Some(cb), Ok(outcome)) = (&probe, &result) {
            if self.faults.take(When::AfterCommit, cb) {
                return injected_503();
            }
            self.faults.observe(
                cb,
                match outcome {
                    Outcome::Applied => "applied",
                    Outcome::Duplicate => "duplicate",
                    Outcome::SessionEnded => "session_ended",
                },
            );
        }
        match result {
            Ok(Outcome::Applied) => http::json_static(StatusCode::OK, r#"{"ok":true}"#),
            Ok(Outcome::Duplicate) => {
                http::json_static(StatusCode::OK, r#"{"ok":true,"duplicate":true}"#)
            }
            Ok(Outcome::SessionEnded) => http::json_static(
                StatusCode::OK,
                r#"{"ok":true,"ignored":true,"reason":"session_ended"}"#,
            ),
            Err(e @ (CoreError::StorageUnavailable(_) | CoreError::Stopped)) => {
                tracing::error!(error = %e, "callback not stored");
                http::error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "storage_unavailable",
                    "the message could not be stored; retry",
                )
            }
            Err(e) => http::error(StatusCode::BAD_REQUEST, e.code(), e),
        }
    }

    async fn kind_route(&self, req: Request<Incoming>) -> Resp {
        let routes = self.assistants.as_ref().and_then(|a| a.active_routes());
        let Some(routes) = routes.filter(|r| {
            let path = req.uri().path();
            r.prefixes().iter().any(|p| path.starts_with(p))
        }) else {
            return http::error(
                StatusCode::NOT_FOUND,
                "not_found",
                "no such route; callbacks go to POST /tasks/{task_id}",
            );
        };
        if http::declared_too_large(req.headers(), MAX_BODY_BYTES) {
            return http::body_error(http::BodyError::TooLarge);
        }
        let (parts, body) = req.into_parts();
        let body = match http::read_body(body, MAX_BODY_BYTES).await {
            Ok(b) => b,
            Err(e) => return http::body_error(e),
        };
        routes.handle(parts, body).await
    }
}

/// The answer of an injected fault: what a failed commit answers.
/// The callback an authorized request carries: its task id, JSON media type, body within
/// [`MAX_BODY_BYTES`] and parse, in that order; the first that fails is the answer.
async fn read_callback(raw_task: &str, req: Request<Incoming>) -> Result<Callback, Resp> {
    let task_id = protocol::parse_task_id(raw_task)
        .map_err(|e| http::error(StatusCode::BAD_REQUEST, e.code(), e))?;
    if !http::is_json(&req) {
        return Err(http::error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send Content-Type: application/json",
        ));
    }
    if http::declared_too_large(req.headers(), MAX_BODY_BYTES) {
        return Err(http::body_error(http::BodyError::TooLarge));
    }
    let body = http::read_body(req.into_body(), MAX_BODY_BYTES)
        .await
        .map_err(http::body_error)?;
    protocol::parse_callback(&task_id, &body).map_err(|e| {
        tracing::info!(code = e.code(), "callback rejected: {e}");
        http::error(StatusCode::BAD_REQUEST, e.code(), e)
    })
}

fn injected_503() -> Resp {
    http::error(
        StatusCode::SERVICE_UNAVAILABLE,
        "storage_unavailable",
        "the message could not be stored; retry (test-only injected fault)",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttles_after_repeated_failures_and_recovers() {
        let g = AuthGuard::default();
        let mut now = 1_000_000;
        for _ in 0..MAX_AUTH_FAILURES - 1 {
            g.record_failure(now);
            now += 100;
        }
        assert_eq!(g.locked(now), None);
        g.record_failure(now);
        assert_eq!(g.locked(now), Some(LOCKOUT_MS / 1000));
        assert_eq!(g.locked(now + LOCKOUT_MS - 1), Some(1));
        assert_eq!(g.locked(now + LOCKOUT_MS), None);
    }

    #[test]
    fn old_failures_fall_out_of_the_window() {
        let g = AuthGuard::default();
        for i in 0..MAX_AUTH_FAILURES as i64 - 1 {
            g.record_failure(i);
        }
        g.record_failure(FAILURE_WINDOW_MS + 5);
        assert_eq!(g.locked(FAILURE_WINDOW_MS + 5), None);
    }
}
