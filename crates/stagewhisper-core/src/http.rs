//! Shared HTTP plumbing for both listeners: the accept loop with graceful shutdown, limits, the
//! JSON error shape and the Host check.

use bytes::Bytes;
use http_body_util::{combinators::BoxBody, BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE, HOST};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use serde_json::json;
use std::convert::Infallible;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};
use tower::Service;

use crate::conns::{BusyGuard, ConnTable, Connection, MAX_HEAD_BYTES};

pub type Body = BoxBody<Bytes, std::io::Error>;
pub type Resp = Response<Body>;

/// Time allowed for a request's headers and, separately, for its body (a connection that has
/// not presented the token gets less for its headers: [`crate::conns::UNTRUSTED_IDLE`]).
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Open connections per listener (see [`crate::conns`] for who makes room at the cap).
pub use crate::conns::MAX_CONNECTIONS;
/// Connections closed for room that may still be closing while new ones are served.
const EVICTION_SLACK: usize = 64;

/// A shutdown signal shared by every task of the app.
#[derive(Clone)]
pub struct Shutdown {
    tx: Arc<watch::Sender<bool>>,
    rx: watch::Receiver<bool>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    pub fn new() -> Self {
        let (tx, rx) = watch::channel(false);
        Shutdown {
            tx: Arc::new(tx),
            rx,
        }
    }

    pub fn trigger(&self) {
        let _ = self.tx.send(true);
    }

    pub fn is_triggered(&self) -> bool {
        *self.rx.borrow()
    }

    pub async fn wait(&self) {
        let mut rx = self.rx.clone();
        let _ = rx.wait_for(|v| *v).await;
    }
}

/// Serves HTTP/1.1 on `listener` until `shutdown` with a handler function (see
/// [`serve_service`]; the control API's entry and the tests' bare servers).
pub async fn serve<F, Fut, B>(
    listener: TcpListener,
    handler: F,
    shutdown: Shutdown,
    drain: Duration,
) where
    F: Fn(Request<Incoming>) -> Fut + Clone + Send + Sync + 'static,
    Fut: Future<Output = Response<B>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let service = tower::service_fn(move |req| {
        let answer = handler(req);
        async move { Ok::<_, Infallible>(answer.await) }
    });
    serve_service(listener, service, shutdown, drain).await
}

/// Serves HTTP/1.1 on `listener` until `shutdown`, then lets in-flight requests finish (up to
/// `drain`). The service is any tower service (an axum `Router`: the callback listener's,
/// [`crate::listener::CallbackListener::router`]); this accept loop and its connection table
/// stay in charge of the connections. Each request carries its [`Connection`] as an extension;
/// a check marks it trusted once the request presented the token. The limits are
/// [`crate::conns`]'.
pub async fn serve_service<S, B>(
    listener: TcpListener,
    service: S,
    shutdown: Shutdown,
    drain: Duration,
) where
    S: Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let graceful = GracefulShutdown::new();
    let cap = crate::conns::max_connections();
    // `cap` connections, plus up to EVICTION_SLACK closing ones not yet gone: the accept loop
    // never waits for a connection it closed for room to finish closing.
    let permits = Arc::new(Semaphore::new(cap + EVICTION_SLACK));
    let table = Arc::new(ConnTable::default());
    while let Some((stream, peer, permit)) = admit(&listener, &permits, &table, &shutdown).await {
        serve_connection(stream, peer, permit, &table, service.clone(), &graceful);
    }
    drop(listener);
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("some connections did not finish in time");
    }
}

/// The next connection, with its place among the `cap` (`None` once shutting down). It always
/// accepts: at the cap, an idle or untrusted connection makes room (conns.rs).
async fn admit(
    listener: &TcpListener,
    permits: &Arc<Semaphore>,
    table: &ConnTable,
    shutdown: &Shutdown,
) -> Option<(TcpStream, SocketAddr, OwnedSemaphorePermit)> {
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    if !table.evict_one() {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    continue;
                }
            },
            _ = shutdown.wait() => return None,
        };
        if permits.available_permits() <= EVICTION_SLACK {
            table.evict_one();
        }
        let permit = match permits.clone().try_acquire_owned() {
            Ok(p) => p,
            // Every connection is busy and trusted, or the closing ones are slow: wait.
            Err(_) => tokio::select! {
                p = permits.clone().acquire_owned() => p.expect("semaphore open"),
                _ = shutdown.wait() => return None,
            },
        };
        return Some((stream, peer, permit));
    }
}

/// Serves one connection on a task of its own until it ends, idles out, is closed for room or
/// drains at shutdown; its place among the `cap` is given back when it is gone.
fn serve_connection<S, B>(
    stream: TcpStream,
    peer: SocketAddr,
    permit: OwnedSemaphorePermit,
    table: &Arc<ConnTable>,
    service: S,
    graceful: &GracefulShutdown,
) where
    S: Service<Request<Incoming>, Response = Response<B>, Error = Infallible>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let _ = stream.set_nodelay(true);
    let state = table.register();
    let svc = TowerToHyperService::new(Tracked {
        inner: service,
        table: table.clone(),
        state: state.clone(),
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(READ_TIMEOUT)
        .max_buf_size(MAX_HEAD_BYTES)
        .keep_alive(true)
        .serve_connection(TokioIo::new(stream), svc);
    let conn = graceful.watch(conn);
    let table = table.clone();
    tokio::spawn(async move {
        tokio::select! {
            r = conn => if let Err(e) = r {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            },
            _ = table.idle_deadline(&state) => {
                tracing::debug!(%peer, trusted = state.is_trusted(), "idle connection closed");
            }
            _ = state.evicted() => {
                tracing::debug!(%peer, trusted = state.is_trusted(), "connection closed to make room");
            }
        }
        table.remove(&state);
        drop(permit);
    });
}

/// A connection's service: each request busy (for the connection table) until its answer has
/// been written, and carrying its [`Connection`].
#[derive(Clone)]
struct Tracked<S> {
    inner: S,
    table: Arc<ConnTable>,
    state: Arc<crate::conns::ConnState>,
}

impl<S, B> Service<Request<Incoming>> for Tracked<S>
where
    S: Service<Request<Incoming>, Response = Response<B>, Error = Infallible>,
{
    type Response = Response<Guarded<B>>;
    type Error = Infallible;
    type Future = TrackedFuture<S::Future>;

    fn poll_ready(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), Infallible>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<Incoming>) -> Self::Future {
        let busy = self.table.begin(&self.state);
        req.extensions_mut()
            .insert(Connection::from_state(self.state.clone()));
        TrackedFuture {
            answer: self.inner.call(req),
            busy: Some(busy),
        }
    }
}

pin_project_lite::pin_project! {
    /// A [`Tracked`] request's answer: its body then holds the request's [`BusyGuard`].
    struct TrackedFuture<F> {
        #[pin]
        answer: F,
        busy: Option<BusyGuard>,
    }
}

impl<F, B> Future for TrackedFuture<F>
where
    F: Future<Output = Result<Response<B>, Infallible>>,
{
    type Output = Result<Response<Guarded<B>>, Infallible>;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let this = self.project();
        let Ok(resp) = std::task::ready!(this.answer.poll(cx));
        let busy = this.busy.take().expect("polled after completion");
        std::task::Poll::Ready(Ok(resp.map(|body| Guarded { body, busy })))
    }
}

pin_project_lite::pin_project! {
    /// An answer's body, holding its request's [`BusyGuard`] until it has been written.
    struct Guarded<B> {
        #[pin]
        body: B,
        busy: BusyGuard,
    }
}

impl<B: hyper::body::Body> hyper::body::Body for Guarded<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        self.project().body.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

pub fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed()
}

pub fn json_response(status: StatusCode, value: &serde_json::Value) -> Resp {
    json_body(status, value.to_string())
}

/// A fixed JSON answer (no serialization, no allocation for the body).
pub fn json_static(status: StatusCode, json: &'static str) -> Resp {
    json_body(status, Bytes::from_static(json.as_bytes()))
}

fn json_body(status: StatusCode, body: impl Into<Bytes>) -> Resp {
    let mut r = Response::new(full(body));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    r.headers_mut().insert(
        hyper::header::CACHE_CONTROL,
        HeaderValue::from_static("no-store"),
    );
    r
}

/// `{"ok":false,"error":code,"message":text}`.
pub fn error(status: StatusCode, code: &str, message: impl std::fmt::Display) -> Resp {
    json_response(
        status,
        &json!({"ok": false, "error": code, "message": message.to_string()}),
    )
}

#[derive(Debug)]
pub enum BodyError {
    TooLarge,
    Timeout,
    Io(String),
}

/// Reads a whole body with a size cap and a deadline (a request's on either listener).
pub async fn read_body<B>(body: B, limit: usize) -> Result<Bytes, BodyError>
where
    B: hyper::body::Body<Data = Bytes>,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    match tokio::time::timeout(READ_TIMEOUT, Limited::new(body, limit).collect()).await {
        Err(_) => Err(BodyError::Timeout),
        Ok(Ok(c)) => Ok(c.to_bytes()),
        Ok(Err(e)) => {
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some()
            {
                Err(BodyError::TooLarge)
            } else {
                Err(BodyError::Io(e.to_string()))
            }
        }
    }
}

pub fn body_error(e: BodyError) -> Resp {
    match e {
        BodyError::TooLarge => error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            "the body is larger than 1 MiB",
        ),
        BodyError::Timeout => error(
            StatusCode::REQUEST_TIMEOUT,
            "request_timeout",
            "the body did not arrive in time",
        ),
        BodyError::Io(e) => error(StatusCode::BAD_REQUEST, "bad_request", e),
    }
}

/// `Content-Length` already over the cap?
pub fn declared_too_large(headers: &hyper::HeaderMap, limit: usize) -> bool {
    headers
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
        .is_some_and(|n| n > limit as u64)
}

pub fn is_json<B>(req: &Request<B>) -> bool {
    req.headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(|v| {
            v.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .eq_ignore_ascii_case("application/json")
        })
        .unwrap_or(false)
}

/// The hosts a listener answers to: its own loopback `host:port` forms plus any extra (a
/// tunnel's public host). Checked on every request (DNS-rebinding defence).
#[derive(Debug)]
pub struct AllowedHosts {
    own: Vec<String>,
    extra: RwLock<Vec<String>>,
}

impl AllowedHosts {
    pub fn for_addr(addr: SocketAddr) -> AllowedHosts {
        let port = addr.port();
        let mut own = vec![format!("localhost:{port}")];
        match addr {
            SocketAddr::V4(a) => own.push(format!("{}:{port}", a.ip())),
            SocketAddr::V6(a) => own.push(format!("[{}]:{port}", a.ip())),
        }
        AllowedHosts {
            own,
            extra: RwLock::new(Vec::new()),
        }
    }

    /// Replaces the extra hosts (e.g. `abc.ngrok.app`, `host:443`).
    pub fn set_extra(&self, hosts: Vec<String>) {
        *self.extra.write().expect("hosts lock") =
            hosts.into_iter().map(|h| h.to_ascii_lowercase()).collect();
    }

    pub fn allows<B>(&self, req: &Request<B>) -> bool {
        let Some(host) = req.headers().get(HOST).and_then(|v| v.to_str().ok()) else {
            return false;
        };
        self.names(host)
    }

    fn names(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        self.own.contains(&host) || self.extra.read().expect("hosts lock").contains(&host)
    }

    /// An `Origin` header naming this listener (`http://` and one of its hosts): what a page
    /// served by this listener sends. Any other origin (another port, another host name,
    /// `null`) is a page this listener did not serve.
    pub fn allows_origin(&self, origin: &str) -> bool {
        origin
            .trim()
            .strip_prefix("http://")
            .is_some_and(|host| !host.contains('/') && self.names(host))
    }
}

pub fn bad_host() -> Resp {
    error(
        StatusCode::FORBIDDEN,
        "bad_host",
        "the Host header does not name this listener",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_listeners_own_pages_are_an_allowed_origin() {
        let hosts = AllowedHosts::for_addr(SocketAddr::from(([127, 0, 0, 1], 4100)));
        for ok in [
            "http://127.0.0.1:4100",
            "http://localhost:4100",
            "http://LocalHost:4100",
        ] {
            assert!(hosts.allows_origin(ok), "{ok}");
        }
        for bad in [
            "null",
            "",
            "http://127.0.0.1:4101",
            "http://evil.test:4100",
            "https://127.0.0.1:4100",
            "http://127.0.0.1:4100/",
            "http://127.0.0.1",
            "file://",
            "http://127.0.0.1:4100.evil.test",
        ] {
            assert!(!hosts.allows_origin(bad), "{bad}");
        }
    }
}
