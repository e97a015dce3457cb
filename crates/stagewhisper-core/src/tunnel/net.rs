//! Network steps shared by the ngrok connector and the external-URL probe — resolve, connect,
//! TLS — each bounded by a timeout and each failing with a [`Failure`] a person understands.
//! The steps themselves are [`crate::net::connect`]'s; this module words their failures.

use crate::net::connect::{self, ConnectError};
use serde::Serialize;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpStream;
use tokio_rustls::rustls::ClientConfig;

/// Why a tunnel is not up: a stable code for programs, a sentence for people.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    pub code: &'static str,
    pub message: String,
    /// Retrying cannot help until the user changes a setting (bad authtoken, domain not
    /// reserved, …): no automatic retry.
    #[serde(skip)]
    pub permanent: bool,
}

impl Failure {
    pub fn new(code: &'static str, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
            permanent: false,
        }
    }

    pub fn permanent(code: &'static str, message: impl Into<String>) -> Failure {
        Failure {
            permanent: true,
            ..Failure::new(code, message)
        }
    }
}

/// A duration as the tunnel's messages word it: whole seconds, else one decimal.
pub(super) fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 1.0 && s.fract() == 0.0 {
        format!("{} s", s as u64)
    } else {
        format!("{s:.1} s")
    }
}

/// Names the peer in a [`Failure`]'s sentence.
pub struct Peer<'a> {
    /// The host name as given (what was resolved, and the TLS server name).
    pub host: &'a str,
    /// `host:port` (or the URL's origin), as shown in the connect messages.
    pub display: &'a str,
    /// What the peer is ("the ngrok service", "the tunnel URL", "the hub").
    pub what: &'a str,
    /// Ends the message when TLS fails ("Check the hub URL.").
    pub hint: &'a str,
}

/// The sentence a person reads for a failed connect step, with its stable code.
pub fn failure(e: ConnectError, peer: &Peer<'_>) -> Failure {
    let Peer {
        host,
        display,
        what,
        hint,
    } = *peer;
    let dns_failure = |detail: String| {
        Failure::new(
            "dns_failure",
            format!(
                "DNS failure: cannot resolve {host} ({what}): {detail}. Check the name, and that this computer is online (no network, or no DNS server reachable)."
            ),
        )
    };
    match e {
        ConnectError::ResolveTimeout(timeout) => Failure::new(
            "dns_failure",
            format!(
                "DNS failure: resolving {host} ({what}) took longer than {}: is this computer online?",
                secs(timeout)
            ),
        ),
        ConnectError::Resolve(detail) => dns_failure(detail),
        ConnectError::ConnectTimeout(timeout) => Failure::new(
            "timeout",
            format!(
                "No answer from {display} ({what}) within {}: the network may be down, or a firewall drops the traffic.",
                secs(timeout)
            ),
        ),
        ConnectError::Connect(e) if connect::is_refused(&e) => Failure::new(
            "connection_refused",
            format!("Connection refused by {display} ({what}): nothing is listening there."),
        ),
        ConnectError::Connect(e) if connect::is_unreachable(&e) => Failure::new(
            "no_network",
            format!("No network: {display} ({what}) is unreachable from this computer ({e})."),
        ),
        ConnectError::Connect(e) => Failure::new(
            "connect_failed",
            format!("Cannot connect to {display} ({what}): {e}."),
        ),
        ConnectError::InvalidServerName => Failure::permanent(
            "invalid_url",
            format!("{host} is not a valid TLS server name"),
        ),
        ConnectError::TlsTimeout(timeout) => Failure::new(
            "timeout",
            format!(
                "No answer from {host} ({what}): the TLS handshake did not finish within {} — the server accepts connections but does not answer.",
                secs(timeout)
            ),
        ),
        ConnectError::Tls(e) => Failure::new(
            "tls_failed",
            format!("TLS with {host} ({what}) failed: {e}. {hint}"),
        ),
    }
}

/// Resolves `host:port`. `what` names the peer in messages ("the ngrok service", "the tunnel
/// URL").
pub async fn resolve(
    host: &str,
    port: u16,
    timeout: Duration,
    what: &str,
) -> Result<Vec<SocketAddr>, Failure> {
    connect::resolve(host, port, timeout).await.map_err(|e| {
        failure(
            e,
            &Peer {
                host,
                display: host,
                what,
                hint: "",
            },
        )
    })
}

/// Connects to the first address that answers.
pub async fn connect(
    addrs: &[SocketAddr],
    display: &str,
    timeout: Duration,
    what: &str,
) -> Result<TcpStream, Failure> {
    connect::connect_first(addrs, timeout).await.map_err(|e| {
        failure(
            e,
            &Peer {
                host: display,
                display,
                what,
                hint: "",
            },
        )
    })
}

/// TLS handshake over `stream`. `hint` ends the message on failure.
pub async fn tls(
    config: Arc<ClientConfig>,
    host: &str,
    stream: TcpStream,
    timeout: Duration,
    what: &str,
    hint: &str,
) -> Result<tokio_rustls::client::TlsStream<TcpStream>, Failure> {
    connect::tls(config, host, stream, timeout)
        .await
        .map_err(|e| {
            failure(
                e,
                &Peer {
                    host,
                    display: host,
                    what,
                    hint,
                },
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::connect::client_config;
    use tokio_rustls::rustls::RootCertStore;

    #[tokio::test]
    async fn refused_and_silent_peers_are_told_apart() {
        // A port that was just free: refused.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let e = connect(&[addr], "x", Duration::from_secs(2), "test")
            .await
            .unwrap_err();
        assert_eq!(e.code, "connection_refused", "{e}");

        // Accepts, never speaks: the TLS step times out.
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let _keep = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = l.accept().await {
                held.push(s);
            }
        });
        let s = connect(&[addr], "x", Duration::from_secs(2), "test")
            .await
            .unwrap();
        let t0 = std::time::Instant::now();
        let e = tls(
            client_config(Arc::new(RootCertStore::empty())),
            "silent.test",
            s,
            Duration::from_millis(300),
            "test",
            "",
        )
        .await
        .unwrap_err();
        assert_eq!(e.code, "timeout", "{e}");
        assert!(t0.elapsed() < Duration::from_secs(2));
    }
}
