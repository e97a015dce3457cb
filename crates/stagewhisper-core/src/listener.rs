//! The callback listener: `POST /tasks/{task_id}` from the assistant, and the active assistant
//! kind's own routes. One axum [`Router`] ([`CallbackListener::router`]) served by the accept
//! loop of [`crate::http::serve_service`]; the Host, bearer, throttle and body checks are the
//! layers of [`crate::guard`]. HTTP only — then the conversation decides.

use crate::assistants::Assistants;
use crate::clock::SharedClock;
use crate::conversation::{Conversation, CoreError, Outcome};
use crate::faults::{Faults, When};
use crate::guard::{
    self, Bearer, BearerPolicy, BodyLimitLayer, BufferedLayer, Check, CheckLayer, HostCheck,
};
use crate::http::{self, AllowedHosts, Resp};
use crate::protocol::{self, Callback, MAX_BODY_BYTES};
use crate::tokens::Secret;
use crate::tunnel::ProbeResponder;
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use axum::routing::post;
use axum::Router;
use hyper::header::{HeaderValue, ALLOW};
use hyper::StatusCode;
use std::sync::Arc;
use tracing::Instrument;

/// The auth-failure throttle lives with the other checks (crate::guard).
pub use crate::guard::{AuthGuard, FAILURE_WINDOW_MS, LOCKOUT_MS, MAX_AUTH_FAILURES};

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
    /// The assistant kinds, whose routes are served while each is active (see
    /// [`crate::assistants::AssistantKind::callback_routes`]).
    pub assistants: Option<Assistants>,
}

impl CallbackListener {
    /// The listener's routes: `POST /tasks/{task_id}` behind the bearer check, each assistant
    /// kind's own routes (served while it is the active kind), and the `404` for anything else;
    /// all behind the Host check and the body limit ([`crate::guard`]). A tunnel probe this app
    /// sent itself is answered before anything else, whatever its Host (the probe is how the
    /// app learns which Host its tunnel delivers).
    pub fn router(self: &Arc<Self>) -> Router {
        let tasks = post(task_callback)
            .route_layer(CheckLayer(Bearer(self.clone())))
            .fallback(|| async {
                let mut r = http::error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "method_not_allowed",
                    "callbacks are POST",
                );
                r.headers_mut()
                    .insert(ALLOW, HeaderValue::from_static("POST"));
                r
            });
        let mut router = Router::new()
            .route("/tasks/{task_id}", tasks)
            .with_state(self.clone());
        if let Some(assistants) = &self.assistants {
            for (kind, routes) in assistants.callback_routers() {
                let active = ActiveKind {
                    assistants: assistants.clone(),
                    kind,
                };
                router = router.merge(routes.layer(BufferedLayer).layer(CheckLayer(active)));
            }
        }
        router
            .fallback(|| async { not_found() })
            .layer(CheckLayer(HostCheck(self.hosts.clone())))
            .layer(CheckLayer(ProbeFirst(self.probes.clone())))
            .layer(BodyLimitLayer(MAX_BODY_BYTES))
            .layer(axum::middleware::from_fn(in_span))
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
}

/// `POST /tasks/{task_id}`, its bearer already checked: the callback, stored.
async fn task_callback(State(listener): State<Arc<CallbackListener>>, req: Request) -> Resp {
    // The raw (still percent-encoded) segment: the task id is checked as the assistant sent it.
    let raw_task = req.uri().path().strip_prefix("/tasks/").unwrap_or("");
    let raw_task = raw_task.to_string();
    match read_callback(&raw_task, req).await {
        Ok(cb) => listener.store(cb).await,
        Err(refused) => refused,
    }
}

/// The callback an authorized request carries: its task id, JSON media type, body within
/// [`MAX_BODY_BYTES`] (the [`crate::guard::BodyLimitLayer`]'s) and parse, in that order; the
/// first that fails is the answer.
async fn read_callback(raw_task: &str, req: Request) -> Result<Callback, Resp> {
    let task_id = protocol::parse_task_id(raw_task)
        .map_err(|e| http::error(StatusCode::BAD_REQUEST, e.code(), e))?;
    if !http::is_json(&req) {
        return Err(http::error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "send Content-Type: application/json",
        ));
    }
    let body = guard::read_body(req.into_body()).await?;
    protocol::parse_callback(&task_id, &body).map_err(|e| {
        tracing::info!(code = e.code(), "callback rejected: {e}");
        http::error(StatusCode::BAD_REQUEST, e.code(), e)
    })
}

/// The callback bearer: the listener's token, its throttle and its refusals.
impl BearerPolicy for CallbackListener {
    fn matches(&self, presented: &str) -> bool {
        self.token.matches(presented)
    }

    fn throttle(&self) -> &AuthGuard {
        &self.guard
    }

    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }

    fn unauthorized(&self) -> Resp {
        tracing::warn!("callback with a missing or wrong bearer token");
        guard::unauthorized()
    }

    fn throttled(&self, secs: i64) -> Resp {
        guard::throttled(secs)
    }
}

/// A kind's routes answer only while it is the active kind; else they are not there.
#[derive(Clone)]
struct ActiveKind {
    assistants: Assistants,
    kind: &'static str,
}

impl Check for ActiveKind {
    fn check<B>(&self, _req: &hyper::Request<B>) -> Result<(), Resp> {
        if self.assistants.active().kind() == self.kind {
            Ok(())
        } else {
            Err(not_found())
        }
    }
}

/// A tunnel probe this app sent itself is answered here (see [`ProbeResponder::answer`]).
#[derive(Clone)]
struct ProbeFirst(Arc<ProbeResponder>);

impl Check for ProbeFirst {
    fn check<B>(&self, req: &hyper::Request<B>) -> Result<(), Resp> {
        match self.0.answer(req) {
            Some(answer) => Err(answer),
            None => Ok(()),
        }
    }
}

/// Each request in a `callback` span naming its path.
async fn in_span(req: Request, next: Next) -> Response {
    let span = tracing::info_span!("callback", path = %req.uri().path());
    next.run(req).instrument(span).await
}

fn not_found() -> Resp {
    http::error(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such route; callbacks go to POST /tasks/{task_id}",
    )
}

/// The answer of an injected fault: what a failed commit answers.
fn injected_503() -> Resp {
    http::error(
        StatusCode::SERVICE_UNAVAILABLE,
        "storage_unavailable",
        "the message could not be stored; retry (test-only injected fault)",
    )
}
