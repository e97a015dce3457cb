//! A small HTTP/1.1 client (hyper) for talking to a loopback assistant and to the app's own
//! control API: one connection per request (a handful of requests a minute needs no pool),
//! bounded connect and response times, whole JSON bodies or a streamed body for SSE.
//!
//! Only `http://` URLs whose host is loopback (`127.0.0.0/8`, `::1`, `localhost`) are accepted:
//! the relay token travels in clear text, so it must never leave the machine.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{HeaderMap, HeaderValue, AUTHORIZATION, CONTENT_TYPE, HOST};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use std::time::Duration;
use tokio::net::TcpStream;

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
    #[error("the connection failed: {0}")]
    Http(#[from] hyper::Error),
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

async fn connect(ep: &Endpoint, t: Timeouts) -> Result<TcpStream, ClientError> {
    match tokio::time::timeout(t.connect, TcpStream::connect((ep.host.as_str(), ep.port))).await {
        Err(_) => Err(ClientError::ConnectTimeout(t.connect)),
        Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
            Err(ClientError::Refused)
        }
        Ok(Err(e)) => Err(ClientError::Connect(e)),
        Ok(Ok(s)) => {
            let _ = s.set_nodelay(true);
            Ok(s)
        }
    }
}

async fn start(
    ep: &Endpoint,
    call: Call<'_>,
    t: Timeouts,
) -> Result<hyper::Response<Incoming>, ClientError> {
    let stream = connect(ep, t).await?;
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "client connection ended with an error");
        }
    });
    let uri = format!("{}{}", ep.prefix, call.path);
    let mut b = Request::builder()
        .method(call.method)
        .uri(uri)
        .header(HOST, ep.authority.as_str());
    if let Some(token) = call.bearer {
        let mut v = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| {
            ClientError::Build("the token has characters a header cannot carry".into())
        })?;
        v.set_sensitive(true);
        b = b.header(AUTHORIZATION, v);
    }
    for (name, value) in call.headers {
        b = b.header(name, value);
    }
    let body = match call.json {
        Some(j) => {
            b = b.header(CONTENT_TYPE, "application/json");
            Full::new(Bytes::from(j))
        }
        None => Full::new(Bytes::new()),
    };
    let req = b
        .body(body)
        .map_err(|e| ClientError::Build(e.to_string()))?;
    Ok(sender.send_request(req).await?)
}

/// Sends one request and reads the whole answer within `t.response`.
pub async fn send(ep: &Endpoint, call: Call<'_>, t: Timeouts) -> Result<Response, ClientError> {
    let fut = async {
        let resp = start(ep, call, t).await?;
        let (parts, body) = resp.into_parts();
        let body = match Limited::new(body, MAX_RESPONSE_BYTES).collect().await {
            Ok(c) => c.to_bytes(),
            Err(e) => {
                return Err(match e.downcast::<hyper::Error>() {
                    Ok(h) => ClientError::Http(*h),
                    Err(_) => ClientError::TooLarge,
                })
            }
        };
        Ok(Response {
            status: parts.status,
            headers: parts.headers,
            body,
        })
    };
    match tokio::time::timeout(t.connect + t.response, fut).await {
        Ok(r) => r,
        Err(_) => Err(ClientError::Timeout(t.response)),
    }
}

/// Sends one request and returns as soon as the headers arrived; the body is read by the caller
/// (an SSE stream).
pub async fn open(
    ep: &Endpoint,
    call: Call<'_>,
    t: Timeouts,
) -> Result<hyper::Response<Incoming>, ClientError> {
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

    #[test]
    fn encodes_query_values() {
        assert_eq!(encode_query_value("insights:ab-1"), "insights%3Aab-1");
        assert_eq!(encode_query_value("a b/é"), "a%20b%2F%C3%A9");
    }
}
