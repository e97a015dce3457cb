//! The callback listener's checks, in one place, as tower layers: the Host check
//! ([`HostCheck`]), the bearer token with its failure throttle ([`Bearer`], [`AuthGuard`]), and
//! the body's size and time limits ([`BodyLimitLayer`] with [`read_body`], [`Buffered`]).
//!
//! A check either lets a request through untouched or answers it itself ([`Check`]), so each one
//! is a [`CheckLayer`] around whatever it guards, without a boxed future on the way through. The
//! answers are the listener's stable JSON refusals (docs/contract.md): `403 bad_host`,
//! `401 unauthorized` (with `WWW-Authenticate: Bearer`), `429 too_many_auth_failures` (with
//! `Retry-After`), `413 payload_too_large`, `408 request_timeout`.
//!
//! The body limit is lazy: the layer only wraps the body, and the refusal is answered when the
//! body is read ([`read_body`]), so checks a route makes before reading (its task id, its media
//! type) keep their order.

use crate::conns::Connection;
use crate::http::{self, AllowedHosts, BodyError, Resp, READ_TIMEOUT};
use crate::tokens::bearer;
use axum::body::Body;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use futures_util::future::{Either, Ready};
use http_body_util::BodyExt;
use hyper::header::{HeaderValue, AUTHORIZATION, RETRY_AFTER, WWW_AUTHENTICATE};
use hyper::Request;
use hyper::StatusCode;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use tower::{Layer, Service};

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

/// A check made before a request reaches what it guards: `Err` is the answer instead.
pub trait Check: Clone + Send + Sync + 'static {
    // A refusal is the answer itself, built once and returned as is.
    #[allow(clippy::result_large_err)]
    fn check<B>(&self, req: &Request<B>) -> Result<(), Resp>;
}

/// A [`Check`] as a tower layer.
#[derive(Clone)]
pub struct CheckLayer<C>(pub C);

impl<C: Clone, S> Layer<S> for CheckLayer<C> {
    type Service = Checked<C, S>;

    fn layer(&self, inner: S) -> Self::Service {
        Checked {
            check: self.0.clone(),
            inner,
        }
    }
}

/// The service of a [`CheckLayer`].
#[derive(Clone)]
pub struct Checked<C, S> {
    check: C,
    inner: S,
}

impl<C, S, B> Service<Request<B>> for Checked<C, S>
where
    C: Check,
    S: Service<Request<B>, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Either<Ready<Result<Response, S::Error>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        match self.check.check(&req) {
            Ok(()) => Either::Right(self.inner.call(req)),
            Err(refused) => Either::Left(futures_util::future::ready(Ok(refused.into_response()))),
        }
    }
}

/// The Host header names the listener (DNS-rebinding defence): else `403 bad_host`.
#[derive(Clone)]
pub struct HostCheck(pub Arc<AllowedHosts>);

impl Check for HostCheck {
    fn check<B>(&self, req: &Request<B>) -> Result<(), Resp> {
        if self.0.allows(req) {
            Ok(())
        } else {
            Err(http::bad_host())
        }
    }
}

/// Whose bearer token a [`Bearer`] check wants, and how it refuses.
pub trait BearerPolicy: Send + Sync + 'static {
    /// The presented token is the right one (compared in constant time).
    fn matches(&self, presented: &str) -> bool;
    /// The failure count of this token.
    fn throttle(&self) -> &AuthGuard;
    fn now_ms(&self) -> i64;
    /// A missing or wrong token.
    fn unauthorized(&self) -> Resp;
    /// Failures are throttled: try again in `secs`.
    fn throttled(&self, secs: i64) -> Resp;
}

/// `Authorization: Bearer <token>` checked against a [`BearerPolicy`]: a wrong or missing one is
/// counted and refused (throttled after [`MAX_AUTH_FAILURES`]); the right one marks the
/// request's connection trusted ([`crate::conns`]).
pub struct Bearer<P>(pub Arc<P>);

impl<P> Clone for Bearer<P> {
    fn clone(&self) -> Self {
        Bearer(self.0.clone())
    }
}

impl<P: BearerPolicy> Check for Bearer<P> {
    fn check<B>(&self, req: &Request<B>) -> Result<(), Resp> {
        let policy = &self.0;
        let presented = bearer(
            req.headers()
                .get(AUTHORIZATION)
                .and_then(|v| v.to_str().ok()),
        );
        if presented.is_some_and(|t| policy.matches(t)) {
            // The token is right: this connection is the caller's (it keeps its keep-alive
            // allowance and is not closed for room while busy, see crate::conns).
            Connection::mark(req);
            return Ok(());
        }
        let now_ms = policy.now_ms();
        if let Some(secs) = policy.throttle().locked(now_ms) {
            return Err(policy.throttled(secs));
        }
        policy.throttle().record_failure(now_ms);
        Err(policy.unauthorized())
    }
}

/// The callback bearer's refusal: `401 unauthorized` with `WWW-Authenticate: Bearer`.
pub fn unauthorized() -> Resp {
    let mut r = http::error(
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        "missing or wrong bearer token",
    );
    r.headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    r
}

/// The callback bearer's refusal while failures are throttled: `429 too_many_auth_failures`
/// with `Retry-After`.
pub fn throttled(secs: i64) -> Resp {
    let mut r = http::error(
        StatusCode::TOO_MANY_REQUESTS,
        "too_many_auth_failures",
        "too many failed authentication attempts; try again later",
    );
    r.headers_mut()
        .insert(RETRY_AFTER, HeaderValue::from(secs.max(0) as u64));
    r
}

/// Caps every request body at `limit` bytes (a declared `Content-Length` over it included); the
/// refusal comes when the body is read ([`read_body`]).
#[derive(Clone, Copy)]
pub struct BodyLimitLayer(pub usize);

impl<S> Layer<S> for BodyLimitLayer {
    type Service = BodyLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        BodyLimit {
            limit: self.0,
            inner,
        }
    }
}

#[derive(Clone)]
pub struct BodyLimit<S> {
    limit: usize,
    inner: S,
}

impl<S, B> Service<Request<B>> for BodyLimit<S>
where
    S: Service<Request<Body>>,
    B: hyper::body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<axum::BoxError>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let declared_over = http::declared_too_large(req.headers(), self.limit);
        let limit = self.limit;
        self.inner.call(req.map(|b| {
            if declared_over {
                Body::new(TooLargeBody)
            } else {
                Body::new(http_body_util::Limited::new(b, limit))
            }
        }))
    }
}

/// The body of a request whose `Content-Length` is already over the cap: an error when read.
struct TooLargeBody;

#[derive(Debug, thiserror::Error)]
#[error("the body is larger than the limit")]
struct DeclaredTooLarge;

impl hyper::body::Body for TooLargeBody {
    type Data = Bytes;
    type Error = DeclaredTooLarge;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, DeclaredTooLarge>>> {
        Poll::Ready(Some(Err(DeclaredTooLarge)))
    }
}

/// Reads a whole (limited) body within [`READ_TIMEOUT`]; the refusal is `413`, `408` or `400`.
pub async fn read_body(body: Body) -> Result<Bytes, Resp> {
    match tokio::time::timeout(READ_TIMEOUT, body.collect()).await {
        Err(_) => Err(http::body_error(BodyError::Timeout)),
        Ok(Ok(c)) => Ok(c.to_bytes()),
        Ok(Err(e)) => {
            let e = e.into_inner();
            let too_large = e.is::<DeclaredTooLarge>()
                || e.is::<http_body_util::LengthLimitError>()
                || e.source()
                    .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            Err(http::body_error(if too_large {
                BodyError::TooLarge
            } else {
                BodyError::Io(e.to_string())
            }))
        }
    }
}

/// Reads the body (within the [`BodyLimitLayer`]'s cap and [`READ_TIMEOUT`]) before the inner
/// service sees the request: what the assistant kinds' routes get.
#[derive(Clone)]
pub struct Buffered<S>(S);

/// The layer of [`Buffered`].
#[derive(Clone, Copy, Default)]
pub struct BufferedLayer;

impl<S> Layer<S> for BufferedLayer {
    type Service = Buffered<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Buffered(inner)
    }
}

impl<S> Service<Request<Body>> for Buffered<S>
where
    S: Service<Request<Body>, Response = Response> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = Response;
    type Error = S::Error;
    type Future = futures_util::future::BoxFuture<'static, Result<Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        // The clone that was made ready serves this request (tower's usual swap).
        let clone = self.0.clone();
        let mut inner = std::mem::replace(&mut self.0, clone);
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            match read_body(body).await {
                Ok(bytes) => {
                    inner
                        .call(Request::from_parts(parts, Body::from(bytes)))
                        .await
                }
                Err(refused) => Ok(refused.into_response()),
            }
        })
    }
}

#[cfg(test)]
#[path = "guard_tests.rs"]
mod tests;
