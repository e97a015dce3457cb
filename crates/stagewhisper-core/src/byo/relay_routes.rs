//! The relay's routes as the kind's axum Router (see [`crate::assistants::CallbackRouter`]):
//! the same routes under both prefixes, `pair/complete` open, the rest behind the paired
//! integration's relay token ([`crate::guard::Bearer`] with the kind's throttle).

use super::*;
use crate::assistants::CallbackRouter;
use crate::guard::{AuthGuard, Bearer, BearerPolicy, Check, CheckLayer};
use axum::extract::{Path, State};
use axum::response::IntoResponse;
use axum::routing::{get, post, MethodRouter};
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
/// rest behind the paired integration's relay token.
fn dialect_routes(relay: Relay) -> Router {
    let nf = || async { not_found() };
    let post_only = |r: MethodRouter<Relay>| r.fallback(nf);
    let per_integration = |r: MethodRouter<Relay>| r.fallback(|| async { unknown_integration() });
    let paired =
        Router::new()
            .route(
                "/integrations/{id}/stream",
                per_integration(get(
                    |State(r): State<Relay>, Path(id): Path<String>| async move {
                        match r.integration_ok(&id) {
                            true => r.stream().await,
                            false => unknown_integration().into_response(),
                        }
                    },
                )),
            )
            .route(
                "/integrations/{id}/heartbeat",
                per_integration(post(
                    |State(r): State<Relay>, Path(id): Path<String>, body: Bytes| async move {
                        match r.integration_ok(&id) {
                            true => r.heartbeat(&body),
                            false => unknown_integration(),
                        }
                    },
                )),
            )
            .route(
                "/integrations/{id}/test-reply",
                per_integration(post(
                    |State(r): State<Relay>, Path(id): Path<String>, body: Bytes| async move {
                        match r.integration_ok(&id) {
                            true => r.test_reply(&body, r.kind.now_ms()).await,
                            false => unknown_integration(),
                        }
                    },
                )),
            )
            .route(
                "/reasoning-jobs/{job_id}",
                post_only(get(
                    |State(r): State<Relay>, Path(job): Path<String>| async move {
                        r.fetch_job(&job).await
                    },
                )),
            )
            .route(
                "/reasoning-jobs/{job_id}/complete",
                post_only(post(
                    |State(r): State<Relay>,
                     Path(job): Path<String>,
                     headers: HeaderMap,
                     body: Bytes| async move {
                        r.complete_request(&headers, &job, &body).await
                    },
                )),
            )
            .route(
                "/chat/messages/{id}/reply",
                post_only(post(
                    |State(r): State<Relay>, Path(id): Path<String>, body: Bytes| async move {
                        match json_body(&body) {
                            Ok(b) => r.chat_reply(&id, &b).await,
                            Err(refused) => refused,
                        }
                    },
                )),
            )
            .route(
                "/chat/messages/{id}/reply/start",
                post_only(post(
                    |State(r): State<Relay>, Path(id): Path<String>| async move {
                        r.chat_start(&id).await
                    },
                )),
            )
            .route(
                "/chat/messages/{id}/reply/{step}",
                post_only(post(
                    |State(r): State<Relay>,
                     Path((id, step)): Path<(String, String)>,
                     body: Bytes| async move {
                        if step != "delta" && step != "complete" {
                            return not_found();
                        }
                        match json_body(&body) {
                            Ok(b) => r.chat_plain(&id, &step, &b).await,
                            Err(refused) => refused,
                        }
                    },
                )),
            )
            .route(
                "/tasks/{task}/{what}",
                post_only(post(|Path((_, what)): Path<(String, String)>| async move {
                    match what.as_str() {
                        "status" | "reply" => ok(json!({"ok": true})),
                        _ => not_found(),
                    }
                })),
            )
            .fallback(|uri: hyper::Uri| async move {
                // Anything under `integrations/` names an integration this desktop does not have
                // (the path here is the one under the prefix).
                match uri.path().starts_with("/integrations/") {
                    true => unknown_integration(),
                    false => not_found(),
                }
            })
            .layer(CheckLayer(Bearer(Arc::new(relay.kind.clone()))))
            .layer(CheckLayer(IsPaired(relay.kind.clone())));
    Router::new()
        .route(
            "/pair/complete",
            post(|State(r): State<Relay>, body: Bytes| async move { r.pair(r.dialect, &body) })
                .fallback(|| async { method_not_allowed() }),
        )
        .merge(paired)
        .with_state(relay)
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
