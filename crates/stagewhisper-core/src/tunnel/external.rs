//! External URL: the user runs their own tunnel (tailscale serve/funnel, cloudflared, `ssh -R`,
//! a reverse proxy) to the callback listener and tells the app its public origin. The app
//! checks it by sending a signed probe ([`super::probe`]) through that origin to itself.

use super::net::{self, secs, Failure};
use super::probe::{IssuedProbe, ProbeResponder, PROBE_HEADER, PROBE_PATH};
use crate::net::connect::ConnectError;
use crate::net::http;
use bytes::Bytes;
use hyper::header::{HeaderMap, HeaderValue, CONNECTION, HOST, LOCATION, USER_AGENT};
use hyper::StatusCode;
use std::fmt;
use std::time::Duration;

/// A public origin: `scheme://host[:port]`, lowercase, the default port left out — the exact
/// form the assistants compare `STAGEWHISPER_ALLOW_CALLBACK_URLS` entries with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origin {
    https: bool,
    /// As in a URL (IPv6 in brackets).
    host: String,
    /// Only when not the scheme's default.
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OriginError {
    #[error("`{0}` is not a URL; enter the tunnel's public origin, e.g. https://desk.example.net")]
    NotAUrl(String),
    #[error("the tunnel URL must start with https:// or http://")]
    Scheme,
    #[error("the tunnel URL has no host name")]
    NoHost,
    #[error("the tunnel URL must not contain a user name or password")]
    UserInfo,
    #[error(
        "the tunnel URL must be an origin only (scheme://host[:port]) without a path, query or \
         fragment: the assistant posts to <origin>/tasks/<task_id>, and the assistants accept \
         only origins as callback URLs"
    )]
    NotAnOrigin,
}

impl Origin {
    pub fn parse(input: &str) -> Result<Origin, OriginError> {
        let input = input.trim();
        let url = url::Url::parse(input).map_err(|_| OriginError::NotAUrl(input.to_string()))?;
        let https = match url.scheme() {
            "https" => true,
            "http" => false,
            _ => return Err(OriginError::Scheme),
        };
        if !url.username().is_empty() || url.password().is_some() {
            return Err(OriginError::UserInfo);
        }
        if !matches!(url.path(), "" | "/") || url.query().is_some() || url.fragment().is_some() {
            return Err(OriginError::NotAnOrigin);
        }
        let host = match url.host() {
            None => return Err(OriginError::NoHost),
            Some(url::Host::Domain(d)) => d.trim_end_matches('.').to_ascii_lowercase(),
            Some(url::Host::Ipv4(a)) => a.to_string(),
            Some(url::Host::Ipv6(a)) => format!("[{a}]"),
        };
        if host.is_empty() {
            return Err(OriginError::NoHost);
        }
        // `Url` already drops a port equal to the scheme's default.
        Ok(Origin {
            https,
            host,
            port: url.port(),
        })
    }

    pub fn is_https(&self) -> bool {
        self.https
    }

    pub fn host(&self) -> &str {
        &self.host
    }

    pub fn port(&self) -> u16 {
        self.port.unwrap_or(if self.https { 443 } else { 80 })
    }

    /// `host[:port]` as a client puts it in the `Host` header.
    pub fn authority(&self) -> String {
        match self.port {
            Some(p) => format!("{}:{p}", self.host),
            None => self.host.clone(),
        }
    }

    /// The `Host` values a request through this origin may carry (with and without an
    /// explicit default port).
    pub fn host_headers(&self) -> Vec<String> {
        match self.port {
            Some(_) => vec![self.authority()],
            None => vec![self.host.clone(), format!("{}:{}", self.host, self.port())],
        }
    }

    /// Whether the host is this machine (a tunnel URL on loopback only helps local tests).
    pub fn is_loopback(&self) -> bool {
        let h = self.host.trim_start_matches('[').trim_end_matches(']');
        h == "localhost"
            || h.parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}://{}",
            if self.https { "https" } else { "http" },
            self.authority()
        )
    }
}

/// Timeouts of one probe.
#[derive(Debug, Clone, Copy)]
pub struct ProbeTimeouts {
    /// Each of: DNS, TCP connect, TLS handshake.
    pub step: Duration,
    /// The whole probe, answer included.
    pub total: Duration,
}

/// What a passed probe learnt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The `Host` the tunnel delivered (may differ from the origin's when a proxy rewrites it).
    pub host_seen: Option<String>,
}

/// Sends one signed probe through `origin` and checks that it reached this app's listener.
/// `local` is the callback listener's own URL (named in messages).
pub async fn verify(
    origin: &Origin,
    responder: &ProbeResponder,
    timeouts: ProbeTimeouts,
    local: &str,
) -> Result<Verified, Failure> {
    let probe = responder.issue();
    let sent = tokio::time::timeout(timeouts.total, send(origin, &probe, timeouts)).await;
    let arrival = responder.finish(&probe.nonce);
    let (status, location, body) = match sent {
        Err(_) => {
            return Err(Failure::new(
                "timeout",
                format!(
                    "No answer through {origin} within {} s: the tunnel may be down, or slow.",
                    timeouts.total.as_secs()
                ),
            ))
        }
        Ok(Err(f)) => return Err(f),
        Ok(Ok(r)) => r,
    };
    let answer = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| v.get("probe").and_then(|p| p.as_str()).map(str::to_string));
    match (status, arrival, answer) {
        (StatusCode::OK, Some(a), Some(ans)) if ProbeResponder::answer_matches(&probe, &ans) => {
            Ok(Verified { host_seen: a.host })
        }
        (StatusCode::OK, None, Some(_)) => Err(Failure::new(
            "probe_mismatch",
            format!(
                "{origin} answered for a different StageWhisper (another app or data dir): point the tunnel at {local}."
            ),
        )),
        (s, _, _) if s.is_redirection() => Err(Failure::new(
            "redirected",
            format!(
                "{origin} redirects (HTTP {}){}: assistants do not follow redirects; enter the final origin instead.",
                s.as_u16(),
                location.map(|l| format!(" to {l}")).unwrap_or_default()
            ),
        )),
        (s, Some(_), _) => Err(Failure::new(
            "probe_answer_lost",
            format!(
                "The probe reached StageWhisper through {origin}, but its answer did not come back intact (HTTP {}): does the tunnel alter responses?",
                s.as_u16()
            ),
        )),
        (s, None, _) if matches!(s.as_u16(), 502..=504) => Err(Failure::new(
            "tunnel_upstream_failed",
            format!(
                "The tunnel at {origin} is up but cannot reach StageWhisper (HTTP {}): it must forward to {local}.",
                s.as_u16()
            ),
        )),
        (s, None, _) => Err(Failure::new(
            "probe_not_arrived",
            format!(
                "{origin} answered (HTTP {}) but the probe never reached StageWhisper: the tunnel points somewhere else; it must forward to {local}.",
                s.as_u16()
            ),
        )),
    }
}

/// Largest probe answer read; a longer one counts as no body.
const MAX_PROBE_ANSWER: usize = 64 * 1024;

/// `GET {origin}/probe/{nonce}`: status, `Location`, body (≤ 64 KiB).
async fn send(
    origin: &Origin,
    probe: &IssuedProbe,
    t: ProbeTimeouts,
) -> Result<(StatusCode, Option<String>, Bytes), Failure> {
    let what = "the tunnel URL";
    let addrs = net::resolve(origin.host(), origin.port(), t.step, what).await?;
    // The addresses just resolved are the ones connected to (no second lookup).
    let mut builder = http::builder(t.step).resolve_to_addrs(origin.host(), &addrs);
    if origin.is_https() {
        let tls = crate::net::connect::app_client_config();
        builder = builder.use_preconfigured_tls(tls.as_ref().clone());
    }
    let client = builder
        .build()
        .map_err(|e| connect_failure(origin, &e, t.step, what))?;
    let mut h = HeaderMap::new();
    h.insert(
        HOST,
        HeaderValue::from_str(&origin.authority()).expect("valid host"),
    );
    h.insert(
        PROBE_HEADER,
        HeaderValue::from_str(&probe.signature).expect("base64url"),
    );
    h.insert(USER_AGENT, HeaderValue::from_static("stagewhisper-probe/1"));
    // (ngrok's free plan puts an interstitial page in front of browsers; never for this.)
    h.insert("ngrok-skip-browser-warning", HeaderValue::from_static("1"));
    h.insert(CONNECTION, HeaderValue::from_static("close"));
    let mut resp = client
        .get(format!("{origin}{PROBE_PATH}{}", probe.nonce))
        .headers(h)
        .send()
        .await
        .map_err(|e| {
            if e.is_connect() || e.is_builder() {
                connect_failure(origin, &e, t.step, what)
            } else {
                Failure::new(
                    "probe_http_error",
                    format!(
                        "{origin} did not answer the probe with valid HTTP: {}.",
                        http::cause(&e)
                    ),
                )
            }
        })?;
    let status = resp.status();
    let location = resp
        .headers()
        .get(LOCATION)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    // An answer over the limit, or broken, counts as no body.
    let body = http::read_limited(&mut resp, MAX_PROBE_ANSWER)
        .await
        .ok()
        .flatten()
        .unwrap_or_default();
    Ok((status, location, body))
}

/// Why no connection to `origin` was made, in the words of the tunnel's own connect steps
/// ([`net::failure`]).
fn connect_failure(origin: &Origin, e: &reqwest::Error, step: Duration, what: &str) -> Failure {
    let display = origin.to_string();
    let peer = net::Peer {
        host: origin.host(),
        display: &display,
        what,
        hint: "Is the certificate valid for this name (and trusted by this computer)?",
    };
    let tcp_timed_out =
        || http::io_error(e).is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut);
    match http::connect_error(e, step) {
        // Over https one bound covers TCP and TLS together: either step may be the one that hung.
        Some(ConnectError::ConnectTimeout(_)) if origin.is_https() && !tcp_timed_out() => {
            Failure::new(
                "timeout",
                format!(
                    "No answer from {display} ({what}) within {}: the network may be down, a firewall drops the traffic, or the server accepts connections but does not finish the TLS handshake.",
                    secs(step)
                ),
            )
        }
        Some(c) => net::failure(c, &peer),
        None => Failure::new(
            "connect_failed",
            format!("Cannot connect to {display} ({what}): {}.", http::cause(e)),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn probe() -> IssuedProbe {
        IssuedProbe {
            nonce: "n0nce".into(),
            signature: "c2ln".into(),
            expected_answer: String::new(),
        }
    }

    fn quick() -> ProbeTimeouts {
        ProbeTimeouts {
            step: Duration::from_millis(300),
            total: Duration::from_secs(3),
        }
    }

    #[tokio::test]
    async fn the_probe_goes_out_as_before_and_redirects_are_not_followed() {
        let reply = b"HTTP/1.1 301 Moved\r\nLocation: https://elsewhere.example/\r\n\
                      Content-Length: 2\r\n\r\nhi";
        let (port, served) = crate::net::http::serve_once(reply.to_vec(), Duration::ZERO).await;
        let origin = Origin::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        let (status, location, body) = send(&origin, &probe(), quick()).await.unwrap();
        assert_eq!(status, StatusCode::MOVED_PERMANENTLY);
        assert_eq!(location.as_deref(), Some("https://elsewhere.example/"));
        assert_eq!(&body[..], b"hi");
        // The request as the hand-written client sent it, plus reqwest's `accept: */*`.
        assert_eq!(
            served.await.unwrap(),
            format!(
                "GET /probe/n0nce HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\n\
                 x-stagewhisper-probe: c2ln\r\nuser-agent: stagewhisper-probe/1\r\n\
                 ngrok-skip-browser-warning: 1\r\nconnection: close\r\naccept: */*\r\n\r\n"
            )
        );
    }

    #[tokio::test]
    async fn connect_failures_keep_their_codes() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        let origin = Origin::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        let f = send(&origin, &probe(), quick()).await.unwrap_err();
        assert_eq!(f.code, "connection_refused", "{f}");
        assert_eq!(
            f.message,
            format!(
                "Connection refused by http://127.0.0.1:{port} (the tunnel URL): nothing is \
                 listening there."
            )
        );

        // https to a plain-HTTP server: the TLS step fails, in rustls' words.
        let (port, _served) = accepting(b"HTTP/1.1 400 Bad Request\r\n\r\n").await;
        let origin = Origin::parse(&format!("https://127.0.0.1:{port}")).unwrap();
        let f = send(&origin, &probe(), quick()).await.unwrap_err();
        assert_eq!(f.code, "tls_failed", "{f}");
        assert!(
            f.message
                .starts_with("TLS with 127.0.0.1 (the tunnel URL) failed: ")
                && f.message.ends_with(
                    ". Is the certificate valid for this name (and trusted by this computer)?"
                ),
            "{f}"
        );

        // https to a server that accepts and never speaks: the step's timeout.
        let (port, _served) = accepting(b"").await;
        let origin = Origin::parse(&format!("https://127.0.0.1:{port}")).unwrap();
        let t0 = std::time::Instant::now();
        let f = send(&origin, &probe(), quick()).await.unwrap_err();
        assert_eq!(f.code, "timeout", "{f}");
        assert!(f.message.contains("within 0.3 s"), "{f}");
        assert!(t0.elapsed() < Duration::from_secs(2));
    }

    /// A server that writes `greeting` to every connection, then holds it without reading.
    async fn accepting(greeting: &'static [u8]) -> (u16, tokio::task::JoinHandle<()>) {
        use tokio::io::AsyncWriteExt;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let held = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((mut s, _)) = l.accept().await {
                let _ = s.write_all(greeting).await;
                held.push(s);
            }
        });
        (port, held)
    }

    #[test]
    fn origins_are_canonical() {
        let o = Origin::parse(" HTTPS://Desk.Example.NET:443/ ").unwrap();
        assert_eq!(o.to_string(), "https://desk.example.net");
        assert_eq!(
            o.host_headers(),
            vec!["desk.example.net", "desk.example.net:443"]
        );
        let o = Origin::parse("http://10.1.2.3:8080").unwrap();
        assert_eq!(o.to_string(), "http://10.1.2.3:8080");
        assert_eq!(o.host_headers(), vec!["10.1.2.3:8080"]);
        assert!(!o.is_https());
        let o = Origin::parse("http://[::1]:9").unwrap();
        assert_eq!(o.to_string(), "http://[::1]:9");
        assert!(o.is_loopback());
        assert_eq!(
            Origin::parse("https://x.example/hook"),
            Err(OriginError::NotAnOrigin)
        );
        assert_eq!(
            Origin::parse("https://x.example/?a=1"),
            Err(OriginError::NotAnOrigin)
        );
        assert_eq!(Origin::parse("ftp://x.example"), Err(OriginError::Scheme));
        assert_eq!(
            Origin::parse("https://u:p@x.example"),
            Err(OriginError::UserInfo)
        );
        assert!(matches!(
            Origin::parse("desk.example"),
            Err(OriginError::NotAUrl(_))
        ));
    }
}
