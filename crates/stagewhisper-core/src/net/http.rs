//! The one set-up of the app's outgoing HTTP requests (reqwest on hyper): the loopback
//! assistant's client ([`crate::assistants::kinds::incoming::client`]), the probe through a
//! tunnel's public origin ([`crate::tunnel::external`]), the clawborrator hub's REST reads
//! ([`crate::assistants::kinds::clawborrator`]), and in the audio crate the OpenAI-compatible
//! speech engine and the model downloads (on the shared runtime of [`crate::net::blocking`]).
//!
//! Every request goes out on a fresh HTTP/1.1 connection (a handful of requests a minute needs
//! no pool), straight to its host (no proxy from the environment: the loopback assistant and
//! the user's own tunnel are reached directly), and its answer is taken as it comes (redirects
//! are not followed: the assistants do not follow them either).

use crate::net::connect::ConnectError;
use std::error::Error as StdError;
use std::time::Duration;
use tokio_rustls::rustls;

/// A client builder with the settings every outgoing request shares. `connect` bounds the
/// connection: name lookup, TCP and, for https, the TLS handshake. No `User-Agent` unless the
/// caller sets one; https callers hand over their TLS set-up with
/// [`reqwest::ClientBuilder::use_preconfigured_tls`] (a `rustls::ClientConfig`).
pub fn builder(connect: Duration) -> reqwest::ClientBuilder {
    reqwest::Client::builder()
        .http1_only()
        .connect_timeout(connect)
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .retry(reqwest::retry::never())
        .pool_max_idle_per_host(0)
        .tcp_nodelay(true)
}

/// [`builder`] for a client that may also reach `https` servers anywhere (a cloud speech
/// server, a model's download host): the app's TLS set-up, the operating system's root
/// certificates on ring ([`crate::net::connect::app_client_config`]), as every other TLS
/// connection of the app has.
pub fn https_builder(connect: Duration) -> reqwest::ClientBuilder {
    builder(connect)
        .use_preconfigured_tls(crate::net::connect::app_client_config().as_ref().clone())
}

/// What went wrong, in the words of the layer that failed: hyper's own message when the HTTP
/// exchange broke, else the innermost cause (not reqwest's "error sending request for url").
pub fn cause(e: &reqwest::Error) -> String {
    let mut deepest: &(dyn StdError + 'static) = e;
    let mut next = e.source();
    while let Some(err) = next {
        if let Some(h) = err.downcast_ref::<hyper::Error>() {
            return h.to_string();
        }
        deepest = err;
        next = err.source();
    }
    deepest.to_string()
}

/// The operating system's error under a failed connection (refused, unreachable, …), if any.
pub fn io_error(e: &reqwest::Error) -> Option<&std::io::Error> {
    let mut next = e.source();
    while let Some(err) = next {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return Some(io);
        }
        next = err.source();
    }
    None
}

/// A copy of an I/O error with the same kind and message (the original stays inside the
/// reqwest error).
pub fn copy_io_error(e: &std::io::Error) -> std::io::Error {
    match e.raw_os_error() {
        Some(code) => std::io::Error::from_raw_os_error(code),
        None => std::io::Error::new(e.kind(), e.to_string()),
    }
}

/// Reads the whole body, at most `max` bytes: `Ok(None)` when it is larger.
pub async fn read_limited(
    resp: &mut reqwest::Response,
    max: usize,
) -> Result<Option<bytes::Bytes>, reqwest::Error> {
    let mut body = bytes::BytesMut::new();
    while let Some(chunk) = resp.chunk().await? {
        if body.len() + chunk.len() > max {
            return Ok(None);
        }
        body.extend_from_slice(&chunk);
    }
    Ok(Some(body.freeze()))
}

/// A request that failed before an answer, as the connector's steps name it
/// ([`ConnectError`]), so each caller words it as it words its own connections; `None` when the
/// connection was made and the exchange itself broke. `connect` is the builder's bound (it
/// covers TCP and TLS together: a timeout is reported as the connection's).
pub fn connect_error(e: &reqwest::Error, connect: Duration) -> Option<ConnectError> {
    let mut io = None;
    let mut tls = None;
    let mut next = e.source();
    while let Some(err) = next {
        if err.is::<rustls::pki_types::InvalidDnsNameError>() {
            return Some(ConnectError::InvalidServerName);
        }
        if let Some(outer) = err.downcast_ref::<std::io::Error>() {
            // The TLS step wraps the handshake's own error in one more I/O error; a TCP error
            // comes as the operating system gave it.
            match outer
                .get_ref()
                .and_then(|i| i.downcast_ref::<std::io::Error>())
            {
                Some(inner) => tls = tls.or(Some(inner)),
                None => io = io.or(Some(outer)),
            }
        }
        next = err.source();
    }
    if let Some(e) = tls {
        return Some(ConnectError::Tls(copy_io_error(e)));
    }
    if e.is_timeout() && e.is_connect() {
        return Some(ConnectError::ConnectTimeout(connect));
    }
    if !e.is_connect() {
        return None;
    }
    Some(ConnectError::Connect(match io {
        Some(io) => copy_io_error(io),
        None => std::io::Error::other(cause(e)),
    }))
}

/// A one-connection HTTP server for the clients' tests: it reads one request (head and a
/// `Content-Length` body), writes `reply`, keeps the connection open for `hold`, and hands back
/// the request's bytes as text.
#[cfg(test)]
pub(crate) async fn serve_once(
    reply: Vec<u8>,
    hold: Duration,
) -> (u16, tokio::task::JoinHandle<String>) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let served = tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut req = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = s.read(&mut buf).await.unwrap();
            req.extend_from_slice(&buf[..n]);
            let Some(end) = req.windows(4).position(|w| w == b"\r\n\r\n") else {
                assert!(n > 0, "the request ended early");
                continue;
            };
            let head = String::from_utf8_lossy(&req[..end]).to_ascii_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .map_or(0, |v| v.trim().parse::<usize>().unwrap());
            if n == 0 || req.len() >= end + 4 + len {
                break;
            }
        }
        s.write_all(&reply).await.unwrap();
        tokio::time::sleep(hold).await;
        String::from_utf8(req).unwrap()
    });
    (port, served)
}
