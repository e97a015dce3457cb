//! Network steps shared by the ngrok connector and the external-URL probe — resolve, connect,
//! TLS — each bounded by a timeout and each failing with a [`Failure`] a person understands.

use serde::Serialize;
use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::rustls::{self, pki_types::ServerName, ClientConfig, RootCertStore};

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

/// A byte stream (TCP, or TLS over TCP).
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 1.0 && s.fract() == 0.0 {
        format!("{} s", s as u64)
    } else {
        format!("{s:.1} s")
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
    let dns_failure = |detail: String| {
        Failure::new(
            "dns_failure",
            format!(
                "DNS failure: cannot resolve {host} ({what}): {detail}. Check the name, and that this computer is online (no network, or no DNS server reachable)."
            ),
        )
    };
    match tokio::time::timeout(timeout, tokio::net::lookup_host((host, port))).await {
        Err(_) => Err(Failure::new(
            "dns_failure",
            format!(
                "DNS failure: resolving {host} ({what}) took longer than {}: is this computer online?",
                secs(timeout)
            ),
        )),
        Ok(Err(e)) => Err(dns_failure(e.to_string())),
        Ok(Ok(addrs)) => {
            let addrs: Vec<SocketAddr> = addrs.collect();
            if addrs.is_empty() {
                Err(dns_failure("no address".into()))
            } else {
                Ok(addrs)
            }
        }
    }
}

fn is_unreachable(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NetworkUnreachable | std::io::ErrorKind::HostUnreachable
    ) || matches!(e.raw_os_error(), Some(101) | Some(113))
}

/// Connects to the first address that answers.
pub async fn connect(
    addrs: &[SocketAddr],
    display: &str,
    timeout: Duration,
    what: &str,
) -> Result<TcpStream, Failure> {
    let mut last: Option<std::io::Error> = None;
    let attempt = async {
        for a in addrs {
            match TcpStream::connect(a).await {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    return Ok(s);
                }
                Err(e) => last = Some(e),
            }
        }
        Err(last.take())
    };
    match tokio::time::timeout(timeout, attempt).await {
        Ok(Ok(s)) => Ok(s),
        Err(_) => Err(Failure::new(
            "timeout",
            format!(
                "No answer from {display} ({what}) within {}: the network may be down, or a firewall drops the traffic.",
                secs(timeout)
            ),
        )),
        Ok(Err(e)) => {
            let e = e.unwrap_or_else(|| std::io::Error::other("no address"));
            Err(if e.kind() == std::io::ErrorKind::ConnectionRefused {
                Failure::new(
                    "connection_refused",
                    format!("Connection refused by {display} ({what}): nothing is listening there."),
                )
            } else if is_unreachable(&e) {
                Failure::new(
                    "no_network",
                    format!("No network: {display} ({what}) is unreachable from this computer ({e})."),
                )
            } else {
                Failure::new(
                    "connect_failed",
                    format!("Cannot connect to {display} ({what}): {e}."),
                )
            })
        }
    }
}

/// The web's root certificates (from the operating system), loaded once.
pub fn native_roots() -> Arc<RootCertStore> {
    static ROOTS: OnceLock<Arc<RootCertStore>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            let found = rustls_native_certs::load_native_certs();
            if !found.errors.is_empty() {
                tracing::debug!(
                    errors = found.errors.len(),
                    "some system certificates could not be read"
                );
            }
            let mut store = RootCertStore::empty();
            let (added, ignored) = store.add_parsable_certificates(found.certs);
            tracing::debug!(added, ignored, "system root certificates loaded");
            Arc::new(store)
        })
        .clone()
}

/// A TLS client configuration on the `ring` provider (explicitly, so it works whatever
/// provider features other crates turn on).
pub fn client_config(roots: Arc<RootCertStore>) -> Arc<ClientConfig> {
    Arc::new(
        ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .expect("ring supports the default protocol versions")
            .with_root_certificates(roots)
            .with_no_client_auth(),
    )
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
    let name = ServerName::try_from(
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
    )
    .map_err(|_| {
        Failure::permanent(
            "invalid_url",
            format!("{host} is not a valid TLS server name"),
        )
    })?;
    let connector = tokio_rustls::TlsConnector::from(config);
    match tokio::time::timeout(timeout, connector.connect(name, stream)).await {
        Err(_) => Err(Failure::new(
            "timeout",
            format!(
                "No answer from {host} ({what}): the TLS handshake did not finish within {} — the server accepts connections but does not answer.",
                secs(timeout)
            ),
        )),
        Ok(Err(e)) => Err(Failure::new(
            "tls_failed",
            format!("TLS with {host} ({what}) failed: {e}. {hint}"),
        )),
        Ok(Ok(s)) => Ok(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
