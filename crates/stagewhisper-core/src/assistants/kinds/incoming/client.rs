//! The HTTP client for talking to a loopback assistant and to the app's own control API: one
//! connection per request (a handful of requests a minute needs no pool), bounded connect and
//! response times, whole JSON bodies or a streamed body for SSE. The transport is the app's one
//! outgoing HTTP client ([`crate::net::http`]).
//!
//! Only `http://` URLs whose host is loopback (`127.0.0.0/8`, `::1`, `localhost`) are accepted:
//! the relay token travels in clear text, so it must never leave the machine.

use crate::net::connect::{self, ConnectError};
use crate::net::http as net_http;
use bytes::Bytes;
use hyper::header::{HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::http::uri::PathAndQuery;
use hyper::{Method, StatusCode};
use std::time::Duration;

/// Largest response body read whole (SSE streams are read incrementally instead).
pub const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// Why a base URL is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    #[error("the URL is empty")]
    Empty,
    #[error("`{0}` is not a URL (expected http://127.0.0.1:PORT)")]
    Malformed(String),
    #[error("only http:// URLs are supported (got `{0}`); the assistant listens on loopback")]
    Scheme(String),
    #[error(
        "`{0}` is not a loopback host: only 127.0.0.1, ::1 or localhost are allowed, because the \
         relay token must never cross the network in clear text"
    )]
    NotLoopback(String),
    #[error("the URL must not contain a query, a fragment or user info")]
    Extra,
}

/// A parsed `http://host:port[/prefix]` base URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The host to connect to (IPv6 without brackets).
    pub host: String,
    pub port: u16,
    /// `host:port` as sent in the `Host` header (IPv6 in brackets).
    pub authority: String,
    /// Path prefix without a trailing `/` (`""` for none).
    pub prefix: String,
}

impl Endpoint {
    /// Parses and validates a base URL (with the `url` crate: hosts, IPv6 and ports as a
    /// browser reads them), then keeps what the loopback-only rule allows.
    pub fn parse(input: &str) -> Result<Endpoint, UrlError> {
        let input = input.trim();
        if input.is_empty() {
            return Err(UrlError::Empty);
        }
        let malformed = || UrlError::Malformed(input.to_string());
        // `host:port` alone would read as a URL of the scheme `host`.
        if !input.contains("://") {
            return Err(malformed());
        }
        let url = url::Url::parse(input).map_err(|_| malformed())?;
        if url.scheme() != "http" {
            return Err(UrlError::Scheme(input.to_string()));
        }
        if url.query().is_some()
            || url.fragment().is_some()
            || !url.username().is_empty()
            || url.password().is_some()
        {
            return Err(UrlError::Extra);
        }
        let (host, loopback) = match url.host() {
            Some(url::Host::Domain(d)) => (d.to_string(), d == "localhost"),
            Some(url::Host::Ipv4(ip)) => (ip.to_string(), ip.is_loopback()),
            Some(url::Host::Ipv6(ip)) => (ip.to_string(), ip.is_loopback()),
            None => return Err(malformed()),
        };
        if !loopback {
            return Err(UrlError::NotLoopback(host));
        }
        let port = url
            .port_or_known_default()
            .filter(|p| *p != 0)
            .ok_or_else(malformed)?;
        // The parser resolves `.` and `..`; a base URL written with them is refused, not
        // silently rewritten.
        let dotted = ["/./", "/../"].iter().any(|d| input.contains(d))
            || input.ends_with("/.")
            || input.ends_with("/..");
        if dotted || url.path().contains("//") {
            return Err(malformed());
        }
        let authority = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        Ok(Endpoint {
            host,
            port,
            authority,
            prefix: url.path().trim_end_matches('/').to_string(),
        })
    }

    /// The normalised base URL (`http://host:port[/prefix]`).
    pub fn base_url(&self) -> String {
        format!("http://{}{}", self.authority, self.prefix)
    }
}

/// A failed exchange (no HTTP status came back, or the body could not be read).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("connection refused")]
    Refused,
    #[error("cannot connect: {0}")]
    Connect(std::io::Error),
    #[error("no connection within {0:?}")]
    ConnectTimeout(Duration),
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    /// The HTTP exchange broke (named by hyper's own message, as [`net_http::cause`] finds it).
    #[error("the connection failed: {}", net_http::cause(.0))]
    Http(reqwest::Error),
    #[error("the answer is larger than {MAX_RESPONSE_BYTES} bytes")]
    TooLarge,
    #[error("bad request: {0}")]
    Build(String),
}

/// A whole response.
#[derive(Debug)]
pub struct Response {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Response {
    /// The body as JSON (`Null` when it is not JSON).
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// `Retry-After` in seconds, if given as a number.
    pub fn retry_after(&self) -> Option<Duration> {
        self.headers
            .get(hyper::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok())
            .map(Duration::from_secs)
    }
}

/// One request to send.
pub struct Call<'a> {
    pub method: Method,
    /// Path and query, appended to the endpoint's prefix (starts with `/`).
    pub path: &'a str,
    pub bearer: Option<&'a str>,
    pub json: Option<Vec<u8>>,
    pub headers: Vec<(&'static str, String)>,
}

impl<'a> Call<'a> {
    pub fn new(method: Method, path: &'a str) -> Self {
        Call {
            method,
            path,
            bearer: None,
            json: None,
            headers: Vec::new(),
        }
    }

    pub fn bearer(mut self, token: &'a str) -> Self {
        self.bearer = Some(token);
        self
    }

    pub fn json(mut self, body: Vec<u8>) -> Self {
        self.json = Some(body);
        self
    }

    pub fn header(mut self, name: &'static str, value: String) -> Self {
        self.headers.push((name, value));
        self
    }
}

/// Connect and response-header deadlines.
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    pub connect: Duration,
    /// For whole requests: until the whole body is read. For streams: until the headers.
    pub response: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(5),
            response: Duration::from_secs(10),
        }
    }
}

impl ClientError {
    /// Names a failed reqwest exchange the way callers know: refused, other connect failures
    /// (with the OS error), no connection in time, a broken exchange.
    fn from_reqwest(e: reqwest::Error, t: Timeouts) -> ClientError {
        if e.is_builder() {
            return ClientError::Build(net_http::cause(&e));
        }
        match net_http::connect_error(&e, t.connect) {
            None => ClientError::Http(e),
            Some(ConnectError::ConnectTimeout(d)) => ClientError::ConnectTimeout(d),
            Some(ConnectError::Connect(io)) if connect::is_refused(&io) => ClientError::Refused,
            Some(ConnectError::Connect(io)) => ClientError::Connect(io),
            // TLS steps: none over plain `http://` to loopback.
            Some(other) => ClientError::Connect(std::io::Error::other(other.to_string())),
        }
    }
}

/// Builds the request (the `Host` header as `host:port`, the token marked sensitive), then sends
/// it and waits for the answer's headers.
async fn start(
    ep: &Endpoint,
    call: Call<'_>,
    t: Timeouts,
) -> Result<reqwest::Response, ClientError> {
    let build = |e: hyper::http::Error| ClientError::Build(e.to_string());
    // Checked as a request target first, so the URL parser below never rewrites it.
    let target = format!("{}{}", ep.prefix, call.path);
    PathAndQuery::try_from(target.as_str()).map_err(|e| build(e.into()))?;
    let url = format!("http://{}{target}", ep.authority);
    let mut headers = HeaderMap::new();
    headers.insert(
        HOST,
        HeaderValue::try_from(ep.authority.as_str()).map_err(|e| build(e.into()))?,
    );
    if let Some(token) = call.bearer {
        let mut v = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
            ClientError::Build("the token has characters a header cannot carry".into())
        })?;
        v.set_sensitive(true);
        headers.insert(AUTHORIZATION, v);
    }
    for (name, value) in call.headers {
        let name = HeaderName::try_from(name).map_err(|e| build(e.into()))?;
        let value = HeaderValue::try_from(value).map_err(|e| build(e.into()))?;
        headers.append(name, value);
    }
    let client = net_http::builder(t.connect)
        .build()
        .map_err(|e| ClientError::Build(net_http::cause(&e)))?;
    let mut req = client.request(call.method, url);
    if let Some(j) = call.json {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        req = req.body(j);
    }
    req.headers(headers)
        .send()
        .await
        .map_err(|e| ClientError::from_reqwest(e, t))
}

/// Sends one request and reads the whole answer within `t.response`.
pub async fn send(ep: &Endpoint, call: Call<'_>, t: Timeouts) -> Result<Response, ClientError> {
    let fut = async {
        let mut resp = start(ep, call, t).await?;
        let status = resp.status();
        let headers = std::mem::take(resp.headers_mut());
        let body = net_http::read_limited(&mut resp, MAX_RESPONSE_BYTES)
            .await
            .map_err(ClientError::Http)?
            .ok_or(ClientError::TooLarge)?;
        Ok(Response {
            status,
            headers,
            body,
        })
    };
    match tokio::time::timeout(t.connect + t.response, fut).await {
        Ok(r) => r,
        Err(_) => Err(ClientError::Timeout(t.response)),
    }
}

/// Sends one request and returns as soon as the headers arrived; the body is read by the caller
/// (an SSE stream, with [`reqwest::Response::bytes_stream`]).
pub async fn open(
    ep: &Endpoint,
    call: Call<'_>,
    t: Timeouts,
) -> Result<reqwest::Response, ClientError> {
    match tokio::time::timeout(t.connect + t.response, start(ep, call, t)).await {
        Ok(r) => r,
        Err(_) => Err(ClientError::Timeout(t.response)),
    }
}

/// Percent-encodes a query value (everything but unreserved characters).
pub fn encode_query_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_loopback_urls() {
        let e = Endpoint::parse("http://127.0.0.1:8644").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, e.prefix.as_str()),
            ("127.0.0.1", 8644, "")
        );
        assert_eq!(e.base_url(), "http://127.0.0.1:8644");
        let e = Endpoint::parse(" http://LOCALHOST:9/relay/ ").unwrap();
        assert_eq!(e.authority, "localhost:9");
        assert_eq!(e.prefix, "/relay");
        assert_eq!(e.base_url(), "http://localhost:9/relay");
        let e = Endpoint::parse("http://[::1]:7000/").unwrap();
        assert_eq!(
            (e.host.as_str(), e.authority.as_str()),
            ("::1", "[::1]:7000")
        );
        assert_eq!(Endpoint::parse("http://127.0.0.2").unwrap().port, 80);
        // Read as a browser reads them: the scheme in any case, short IPv4 forms.
        let e = Endpoint::parse("HTTP://127.1:5/a/b").unwrap();
        assert_eq!(e.base_url(), "http://127.0.0.1:5/a/b");
    }

    #[test]
    fn rejects_what_is_not_a_loopback_http_url() {
        assert_eq!(Endpoint::parse(""), Err(UrlError::Empty));
        for bare in ["127.0.0.1:80", "localhost:80"] {
            assert!(
                matches!(Endpoint::parse(bare), Err(UrlError::Malformed(_))),
                "{bare}"
            );
        }
        for odd in [
            "http://[::1]:0",
            "http://127.0.0.1:1//a",
            "http://127.0.0.1:1/a/.",
            "http://:80",
        ] {
            assert!(
                matches!(Endpoint::parse(odd), Err(UrlError::Malformed(_))),
                "{odd}"
            );
        }
        assert!(matches!(
            Endpoint::parse("https://127.0.0.1:1"),
            Err(UrlError::Scheme(_))
        ));
        assert!(matches!(
            Endpoint::parse("http://example.com:80"),
            Err(UrlError::NotLoopback(_))
        ));
        assert!(matches!(
            Endpoint::parse("http://10.0.0.1:80"),
            Err(UrlError::NotLoopback(_))
        ));
        assert_eq!(
            Endpoint::parse("http://127.0.0.1:1/?a=b"),
            Err(UrlError::Extra)
        );
        assert_eq!(
            Endpoint::parse("http://u:p@127.0.0.1:1"),
            Err(UrlError::Extra)
        );
        assert!(matches!(
            Endpoint::parse("http://127.0.0.1:0"),
            Err(UrlError::Malformed(_))
        ));
        assert!(matches!(
            Endpoint::parse("http://127.0.0.1:x"),
            Err(UrlError::Malformed(_))
        ));
        assert!(matches!(
            Endpoint::parse("http://127.0.0.1:1/../a"),
            Err(UrlError::Malformed(_))
        ));
    }

    fn endpoint(port: u16, prefix: &str) -> Endpoint {
        Endpoint::parse(&format!("http://127.0.0.1:{port}{prefix}")).unwrap()
    }

    fn short() -> Timeouts {
        Timeouts {
            connect: Duration::from_millis(500),
            response: Duration::from_millis(300),
        }
    }

    #[tokio::test]
    async fn sends_one_request_and_reads_the_whole_answer() {
        let reply =
            b"HTTP/1.1 429 Too Many\r\nRetry-After: 7\r\nContent-Length: 11\r\n\r\n{\"a\": true}";
        let (port, served) = crate::net::http::serve_once(reply.to_vec(), Duration::ZERO).await;
        let call = Call::new(Method::POST, "/v1/ping?x=1")
            .bearer("tok")
            .header("last-event-id", "e-1".into())
            .json(b"{}".to_vec());
        let r = send(&endpoint(port, "/relay/"), call, short())
            .await
            .unwrap();
        assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.retry_after(), Some(Duration::from_secs(7)));
        assert_eq!(r.json()["a"], true);
        // The request as the hand-written client sent it, plus reqwest's `accept: */*`.
        assert_eq!(
            served.await.unwrap(),
            format!(
                "POST /relay/v1/ping?x=1 HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n\
                 authorization: Bearer tok\r\nlast-event-id: e-1\r\n\
                 content-type: application/json\r\naccept: */*\r\ncontent-length: 2\r\n\r\n{{}}"
            )
        );
    }

    #[tokio::test]
    async fn failures_keep_their_names() {
        // Nothing listening: refused.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        let e = send(&endpoint(port, ""), Call::new(Method::GET, "/"), short()).await;
        assert!(matches!(e, Err(ClientError::Refused)), "{e:?}");

        // A listener whose accept queue is full: the connection is never made.
        let full = tokio::net::TcpSocket::new_v4().unwrap();
        full.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let full = full.listen(0).unwrap();
        let port = full.local_addr().unwrap().port();
        let mut queued = Vec::new();
        for _ in 0..4 {
            let c = tokio::net::TcpStream::connect(("127.0.0.1", port));
            if let Ok(Ok(c)) = tokio::time::timeout(Duration::from_millis(100), c).await {
                queued.push(c);
            }
        }
        let t = Timeouts {
            connect: Duration::from_millis(200),
            response: Duration::from_secs(5),
        };
        let e = send(&endpoint(port, ""), Call::new(Method::GET, "/"), t).await;
        assert!(
            matches!(e, Err(ClientError::ConnectTimeout(d)) if d == t.connect),
            "{e:?}"
        );

        // Connected, no answer: a response timeout (not a connect timeout).
        let (port, _served) =
            crate::net::http::serve_once(Vec::new(), Duration::from_secs(5)).await;
        let e = send(&endpoint(port, ""), Call::new(Method::GET, "/"), short()).await;
        assert!(
            matches!(e, Err(ClientError::Timeout(d)) if d == short().response),
            "{e:?}"
        );

        // A body over the limit.
        let mut big = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n",
            MAX_RESPONSE_BYTES + 1
        )
        .into_bytes();
        big.resize(big.len() + MAX_RESPONSE_BYTES + 1, b'x');
        let (port, _served) = crate::net::http::serve_once(big, Duration::from_secs(1)).await;
        let e = send(&endpoint(port, ""), Call::new(Method::GET, "/"), short()).await;
        assert!(matches!(e, Err(ClientError::TooLarge)), "{e:?}");

        // The peer hangs up mid-answer: the exchange failed, in hyper's words.
        let cut = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc".to_vec();
        let (port, _served) = crate::net::http::serve_once(cut, Duration::ZERO).await;
        let e = send(&endpoint(port, ""), Call::new(Method::GET, "/"), short())
            .await
            .unwrap_err();
        assert!(matches!(e, ClientError::Http(_)), "{e:?}");
        assert!(e.to_string().starts_with("the connection failed: "), "{e}");
        assert!(!e.to_string().contains("http://"), "{e}");

        // A header value a request cannot carry.
        let call = Call::new(Method::GET, "/").header("x-a", "a\nb".into());
        let e = send(&endpoint(1, ""), call, short()).await;
        assert!(matches!(e, Err(ClientError::Build(_))), "{e:?}");
    }

    #[tokio::test]
    async fn streams_are_read_as_they_come() {
        let head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\
                     Transfer-Encoding: chunked\r\n\r\n6\r\ndata: \r\n";
        let (port, _served) =
            crate::net::http::serve_once(head.to_vec(), Duration::from_secs(5)).await;
        let r = open(
            &endpoint(port, ""),
            Call::new(Method::GET, "/v1/events"),
            short(),
        )
        .await
        .unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        let mut body = Box::pin(r.bytes_stream());
        let first = tokio::time::timeout(
            Duration::from_secs(2),
            futures_util::StreamExt::next(&mut body),
        )
        .await
        .expect("the first chunk, while the stream stays open")
        .unwrap()
        .unwrap();
        assert_eq!(&first[..], b"data: ");
    }

    #[test]
    fn encodes_query_values() {
        assert_eq!(encode_query_value("insights:ab-1"), "insights%3Aab-1");
        assert_eq!(encode_query_value("a b/é"), "a%20b%2F%C3%A9");
    }
}
