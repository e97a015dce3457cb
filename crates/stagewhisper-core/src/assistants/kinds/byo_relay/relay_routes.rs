//! The relay's routes as the kind's axum Router (see [`crate::assistants::CallbackRouter`]):
//! the same routes under both prefixes, `pair/complete` open, the rest behind the paired
//! integration's relay token ([`crate::guard::Bearer`] with the kind's throttle).

use super::*;
use crate::assistants::CallbackRouter;
use crate::guard::{AuthGuard, Bearer, BearerPolicy, Check, CheckLayer};
use axum::extract::{Path, State};
use axum::response::IntoResponse;
use axum::routing::{get, post};
use axum::Router;
use hyper::header::HeaderMap;

/// The relay's routes under both prefixes (the kind's [`CallbackRouter`]).
pub fn router(kind: ByoKind) -> CallbackRouter {
    let nest = |dialect| {
        dialect_routes(Relay {
            kind: kind.clone(),
            dialect,
        })
    };
    Router::new()
        .nest(HERMES_PREFIX.trim_end_matches('/'), nest(Dialect::Hermes))
        .nest(
            OPENCLAW_PREFIX.trim_end_matches('/'),
            nest(Dialect::OpenClaw),
        )
}

/// One dialect's routes: `pair/complete` open to anyone (the one-use code is its check), the
/// rest behind the paired integration's relay token. A method a route does not take answers
/// what an unknown path under it would (`404`), as the plugins expect.
fn dialect_routes(relay: Relay) -> Router {
    let nf = || async { not_found() };
    let unknown = || async { unknown_integration() };
    let paired = Router::new()
        .route("/integrations/{id}/stream", get(stream).fallback(unknown))
        .route(
            "/integrations/{id}/heartbeat",
            post(heartbeat).fallback(unknown),
        )
        .route(
            "/integrations/{id}/test-reply",
            post(test_reply).fallback(unknown),
        )
        .route("/reasoning-jobs/{job_id}", get(fetch_job).fallback(nf))
        .route(
            "/reasoning-jobs/{job_id}/complete",
            post(complete).fallback(nf),
        )
        .route("/chat/messages/{id}/reply", post(chat_reply).fallback(nf))
        .route(
            "/chat/messages/{id}/reply/start",
            post(chat_start).fallback(nf),
        )
        .route(
            "/chat/messages/{id}/reply/{step}",
            post(chat_step).fallback(nf),
        )
        .route("/tasks/{task}/{what}", post(task_ack).fallback(nf))
        .fallback(|uri: hyper::Uri| async move {
            // Anything under `integrations/` names an integration this desktop does not have
            // (the path here is the one under the prefix).
            if uri.path().starts_with("/integrations/") {
                unknown_integration()
            } else {
                not_found()
            }
        })
        .layer(CheckLayer(Bearer(Arc::new(relay.kind.clone()))))
        .layer(CheckLayer(IsPaired(relay.kind.clone())));
    Router::new()
        .route(
            "/pair/complete",
            post(pair).fallback(|| async { method_not_allowed() }),
        )
        .merge(paired)
        .with_state(relay)
}

type Id = Path<String>;

async fn pair(State(r): State<Relay>, body: Bytes) -> Resp {
    r.pair(r.dialect, &body)
}

async fn stream(State(r): State<Relay>, Path(id): Id) -> axum::response::Response {
    if r.integration_ok(&id) {
        r.stream().await
    } else {
        unknown_integration().into_response()
    }
}

async fn heartbeat(State(r): State<Relay>, Path(id): Id, body: Bytes) -> Resp {
    if r.integration_ok(&id) {
        r.heartbeat(&body)
    } else {
        unknown_integration()
    }
}

async fn test_reply(State(r): State<Relay>, Path(id): Id, body: Bytes) -> Resp {
    if r.integration_ok(&id) {
        r.test_reply(&body, r.kind.now_ms()).await
    } else {
        unknown_integration()
    }
}

async fn fetch_job(State(r): State<Relay>, Path(job): Id) -> Resp {
    r.fetch_job(&job).await
}

async fn complete(State(r): State<Relay>, Path(job): Id, headers: HeaderMap, body: Bytes) -> Resp {
    r.complete_request(&headers, &job, &body).await
}

async fn chat_reply(State(r): State<Relay>, Path(id): Id, body: Bytes) -> Resp {
    match json_body(&body) {
        Ok(b) => r.chat_reply(&id, &b).await,
        Err(refused) => refused,
    }
}

async fn chat_start(State(r): State<Relay>, Path(id): Id) -> Resp {
    r.chat_start(&id).await
}

/// `reply/delta` and `reply/complete` of the plain chat flow.
async fn chat_step(
    State(r): State<Relay>,
    Path((id, step)): Path<(String, String)>,
    body: Bytes,
) -> Resp {
    if step != "delta" && step != "complete" {
        return not_found();
    }
    match json_body(&body) {
        Ok(b) => r.chat_plain(&id, &step, &b).await,
        Err(refused) => refused,
    }
}

/// `tasks/{task}/status|reply`: acknowledged (the desktop has nothing to do with them).
async fn task_ack(Path((_, what)): Path<(String, String)>) -> Resp {
    match what.as_str() {
        "status" | "reply" => ok(json!({"ok": true})),
        _ => not_found(),
    }
}

fn not_found() -> Resp {
    detail(StatusCode::NOT_FOUND, "not_found", "no such relay route")
}

fn unknown_integration() -> Resp {
    detail(
        StatusCode::NOT_FOUND,
        "unknown_integration",
        "no such integration",
    )
}

/// Every relay route but `pair/complete`: an integration is paired (`401 not_paired`).
#[derive(Clone)]
struct IsPaired(ByoKind);

impl Check for IsPaired {
    fn check<B>(&self, _req: &hyper::Request<B>) -> Result<(), Resp> {
        match self.0.paired() {
            Some(_) => Ok(()),
            None => Err(unpaired()),
        }
    }
}

/// The relay token of the paired integration, compared in constant time; failures throttled
/// (see [`crate::guard::Bearer`]).
impl BearerPolicy for ByoKind {
    fn matches(&self, presented: &str) -> bool {
        self.paired()
            .is_some_and(|p| secret_eq(&p.integration.relay_token, presented))
    }

    fn throttle(&self) -> &AuthGuard {
        &self.inner.token_guard
    }

    fn now_ms(&self) -> i64 {
        ByoKind::now_ms(self)
    }

    fn unauthorized(&self) -> Resp {
        tracing::warn!("BYO relay request with a missing or wrong relay token");
        detail(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "missing or wrong relay token",
        )
    }

    fn throttled(&self, secs: i64) -> Resp {
        throttled(secs)
    }
}
