//! The guard's layers on a small router, one request each (`tower::ServiceExt::oneshot`): every
//! refusal's status, code and headers, and that a refused request never reaches the route.

use super::*;
use crate::conns::ConnTable;
use axum::routing::post;
use axum::Router;
use serde_json::Value;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};
use tower::ServiceExt;

const TOKEN: &str = "right-token";
const LIMIT: usize = 16;

struct Policy {
    throttle: AuthGuard,
    now: AtomicI64,
}

impl BearerPolicy for Policy {
    fn matches(&self, presented: &str) -> bool {
        crate::tokens::secret_eq(TOKEN, presented)
    }
    fn throttle(&self) -> &AuthGuard {
        &self.throttle
    }
    fn now_ms(&self) -> i64 {
        self.now.load(Ordering::Relaxed)
    }
    fn unauthorized(&self) -> Resp {
        unauthorized()
    }
    fn throttled(&self, secs: i64) -> Resp {
        throttled(secs)
    }
}

struct Fixture {
    router: Router,
    policy: Arc<Policy>,
    /// Requests that reached the route.
    reached: Arc<AtomicUsize>,
}

/// `POST /echo` behind Host, bearer and body limit (reads the body like the callback route);
/// `POST /kind` behind Host and the buffered body (like a kind's route).
fn fixture() -> Fixture {
    let policy = Arc::new(Policy {
        throttle: AuthGuard::default(),
        now: AtomicI64::new(1_000_000),
    });
    let reached = Arc::new(AtomicUsize::new(0));
    let (r1, r2) = (reached.clone(), reached.clone());
    let echo = post(move |req: Request<Body>| async move {
        r1.fetch_add(1, Ordering::Relaxed);
        match read_body(req.into_body()).await {
            Ok(b) => http::json_response(StatusCode::OK, &serde_json::json!({"len": b.len()})),
            Err(refused) => refused,
        }
    })
    .route_layer(CheckLayer(Bearer(policy.clone())));
    let kind = Router::new()
        .route(
            "/kind",
            post(move |body: Bytes| async move {
                r2.fetch_add(1, Ordering::Relaxed);
                http::json_response(StatusCode::OK, &serde_json::json!({"len": body.len()}))
            }),
        )
        .layer(BufferedLayer);
    let hosts = Arc::new(AllowedHosts::for_addr(SocketAddr::from((
        [127, 0, 0, 1],
        4100,
    ))));
    let router = Router::new()
        .route("/echo", echo)
        .merge(kind)
        .layer(CheckLayer(HostCheck(hosts)))
        .layer(BodyLimitLayer(LIMIT));
    Fixture {
        router,
        policy,
        reached,
    }
}

fn req(path: &str, host: Option<&str>, token: Option<&str>, body: &'static str) -> Request<Body> {
    let mut b = Request::post(path);
    if let Some(h) = host {
        b = b.header("host", h);
    }
    if let Some(t) = token {
        b = b.header("authorization", format!("Bearer {t}"));
    }
    b.body(Body::from(body)).unwrap()
}

async fn send(router: &Router, r: Request<Body>) -> (StatusCode, hyper::HeaderMap, Value) {
    let resp = router.clone().oneshot(r).await.unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    let v = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    (parts.status, parts.headers, v)
}

const HOST: Option<&str> = Some("127.0.0.1:4100");

#[tokio::test]
async fn a_host_not_naming_the_listener_is_403_bad_host() {
    let f = fixture();
    for host in [None, Some("evil.test"), Some("127.0.0.1:4101")] {
        let (status, _, v) = send(&f.router, req("/echo", host, Some(TOKEN), "{}")).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{host:?}");
        assert_eq!(v["error"], "bad_host");
        assert_eq!(v["ok"], false);
    }
    let (status, _, _) = send(&f.router, req("/kind", Some("evil.test"), None, "{}")).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(
        f.reached.load(Ordering::Relaxed),
        0,
        "refused before the route"
    );
    let (status, _, _) = send(
        &f.router,
        req("/echo", Some("LOCALHOST:4100"), Some(TOKEN), "{}"),
    )
    .await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn a_missing_or_wrong_bearer_is_401_with_www_authenticate() {
    let f = fixture();
    for token in [None, Some("wrong"), Some("right-token2")] {
        let (status, headers, v) = send(&f.router, req("/echo", HOST, token, "{}")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{token:?}");
        assert_eq!(v["error"], "unauthorized");
        assert_eq!(headers["www-authenticate"], "Bearer");
    }
    let basic = Request::post("/echo")
        .header("host", "127.0.0.1:4100")
        .header("authorization", format!("Basic {TOKEN}"))
        .body(Body::empty())
        .unwrap();
    assert_eq!(send(&f.router, basic).await.0, StatusCode::UNAUTHORIZED);
    assert_eq!(f.reached.load(Ordering::Relaxed), 0);
}

#[tokio::test]
async fn repeated_failures_are_429_with_retry_after_and_the_right_token_still_works() {
    let f = fixture();
    for _ in 0..MAX_AUTH_FAILURES {
        let (status, _, _) = send(&f.router, req("/echo", HOST, Some("wrong"), "{}")).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED);
    }
    let (status, headers, v) = send(&f.router, req("/echo", HOST, Some("wrong"), "{}")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(v["error"], "too_many_auth_failures");
    assert_eq!(
        headers["retry-after"],
        (LOCKOUT_MS / 1000).to_string().as_str()
    );
    let (status, _, _) = send(&f.router, req("/echo", HOST, Some(TOKEN), "{}")).await;
    assert_eq!(status, StatusCode::OK, "the assistant is not locked out");
    // The lockout ends.
    f.policy.now.fetch_add(LOCKOUT_MS, Ordering::Relaxed);
    let (status, _, _) = send(&f.router, req("/echo", HOST, Some("wrong"), "{}")).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn the_right_bearer_reaches_the_route_and_marks_the_connection_trusted() {
    let f = fixture();
    let table = Arc::new(ConnTable::default());
    let (untrusted, trusted) = (table.register(), table.register());
    let mut wrong = req("/echo", HOST, Some("wrong"), "{}");
    wrong
        .extensions_mut()
        .insert(Connection::from_state(untrusted.clone()));
    send(&f.router, wrong).await;
    let mut right = req("/echo", HOST, Some(TOKEN), "{\"a\":1}");
    right
        .extensions_mut()
        .insert(Connection::from_state(trusted.clone()));
    let (status, _, v) = send(&f.router, right).await;
    assert_eq!((status, v["len"].as_u64()), (StatusCode::OK, Some(7)));
    assert!(trusted.is_trusted());
    assert!(!untrusted.is_trusted());
    assert_eq!(f.reached.load(Ordering::Relaxed), 1);
}

#[tokio::test]
async fn a_body_over_the_limit_is_413_declared_or_streamed() {
    let f = fixture();
    let big = "0123456789abcdefX"; // LIMIT + 1 bytes
                                   // Over the limit in one piece, in pieces, and declared by `Content-Length`.
    let (status, _, v) = send(&f.router, req("/echo", HOST, Some(TOKEN), big)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(v["error"], "payload_too_large");
    let chunks = futures_util::stream::iter(
        ["0123456789", "abcdefX"]
            .map(|c| Ok::<_, std::io::Error>(Bytes::from_static(c.as_bytes()))),
    );
    let mut streamed = req("/echo", HOST, Some(TOKEN), "");
    *streamed.body_mut() = Body::from_stream(chunks);
    let (status, _, v) = send(&f.router, streamed).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(v["error"], "payload_too_large");
    let mut declared = Request::post("/echo")
        .header("host", "127.0.0.1:4100")
        .header("authorization", format!("Bearer {TOKEN}"))
        .header("content-length", "1000000")
        .body(Body::from("{}"))
        .unwrap();
    declared.headers_mut().remove("transfer-encoding");
    assert_eq!(
        send(&f.router, declared).await.0,
        StatusCode::PAYLOAD_TOO_LARGE
    );
    // Exactly the limit is fine.
    let (status, _, v) = send(
        &f.router,
        req("/echo", HOST, Some(TOKEN), "0123456789abcdef"),
    )
    .await;
    assert_eq!(
        (status, v["len"].as_u64()),
        (StatusCode::OK, Some(LIMIT as u64))
    );
}

#[tokio::test]
async fn a_buffered_route_gets_the_whole_body_or_never_runs() {
    let f = fixture();
    let (status, _, v) = send(&f.router, req("/kind", HOST, None, "0123456789abcdefX")).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(v["error"], "payload_too_large");
    assert_eq!(f.reached.load(Ordering::Relaxed), 0, "the route never ran");
    let (status, _, v) = send(&f.router, req("/kind", HOST, None, "hello")).await;
    assert_eq!((status, v["len"].as_u64()), (StatusCode::OK, Some(5)));
    assert_eq!(f.reached.load(Ordering::Relaxed), 1);
}

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
