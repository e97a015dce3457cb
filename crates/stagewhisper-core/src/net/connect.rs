//! One way to open a byte stream to a server: resolve the name, connect to the first address
//! that answers, and put TLS on top for `https`/`wss`, each step bounded by a timeout.
//!
//! The steps fail with a [`ConnectError`] that says which step failed and why, without wording
//! it for people: each caller turns it into its own error codes and sentences (the tunnel's
//! [`crate::tunnel::Failure`], for one).

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls::{self, pki_types::ServerName, ClientConfig, RootCertStore};

/// A byte stream (TCP, or TLS over TCP).
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + 'static> Io for T {}

/// Why a connection could not be opened, by step.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// Resolving the name took longer than the timeout.
    #[error("resolving the name took longer than {0:?}")]
    ResolveTimeout(Duration),
    /// The name did not resolve (the resolver's reason, or "no address").
    #[error("cannot resolve the name: {0}")]
    Resolve(String),
    /// No address answered within the timeout.
    #[error("no answer within {0:?}")]
    ConnectTimeout(Duration),
    /// Every address failed; this is the last one's error ("no address" when there were none).
    /// [`is_refused`] and [`is_unreachable`] tell the usual causes apart.
    #[error("cannot connect: {0}")]
    Connect(std::io::Error),
    /// The host is not something a TLS certificate can name.
    #[error("not a valid TLS server name")]
    InvalidServerName,
    /// The server accepted the connection but the TLS handshake did not finish in time.
    #[error("the TLS handshake did not finish within {0:?}")]
    TlsTimeout(Duration),
    /// The TLS handshake failed (a certificate that is not trusted, for one).
    #[error("TLS failed: {0}")]
    Tls(std::io::Error),
}

/// Nothing listens at the address.
pub fn is_refused(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::ConnectionRefused
}

/// No route to the address from this computer (no network).
pub fn is_unreachable(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        std::io::ErrorKind::NetworkUnreachable | std::io::ErrorKind::HostUnreachable
    ) || matches!(e.raw_os_error(), Some(101) | Some(113))
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

/// The app's TLS client configuration: [`client_config`] on the [`native_roots`], built once.
pub fn app_client_config() -> Arc<ClientConfig> {
    static CONFIG: OnceLock<Arc<ClientConfig>> = OnceLock::new();
    CONFIG.get_or_init(|| client_config(native_roots())).clone()
}

/// Resolves `host:port` to at least one address.
pub async fn resolve(
    host: &str,
    port: u16,
    timeout: Duration,
) -> Result<Vec<SocketAddr>, ConnectError> {
    match tokio::time::timeout(timeout, tokio::net::lookup_host((host, port))).await {
        Err(_) => Err(ConnectError::ResolveTimeout(timeout)),
        Ok(Err(e)) => Err(ConnectError::Resolve(e.to_string())),
        Ok(Ok(addrs)) => {
            let addrs: Vec<SocketAddr> = addrs.collect();
            if addrs.is_empty() {
                Err(ConnectError::Resolve("no address".into()))
            } else {
                Ok(addrs)
            }
        }
    }
}

/// Connects to the first of `addrs` that answers (in order), all within `timeout`; Nagle off.
pub async fn connect_first(
    addrs: &[SocketAddr],
    timeout: Duration,
) -> Result<TcpStream, ConnectError> {
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
        Err(_) => Err(ConnectError::ConnectTimeout(timeout)),
        Ok(Err(e)) => Err(ConnectError::Connect(
            e.unwrap_or_else(|| std::io::Error::other("no address")),
        )),
    }
}

/// The TLS handshake over `stream`, for `host` (an IPv6 address may come in brackets).
pub async fn tls(
    config: Arc<ClientConfig>,
    host: &str,
    stream: TcpStream,
    timeout: Duration,
) -> Result<TlsStream<TcpStream>, ConnectError> {
    let name = ServerName::try_from(
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .to_string(),
    )
    .map_err(|_| ConnectError::InvalidServerName)?;
    let connector = tokio_rustls::TlsConnector::from(config);
    match tokio::time::timeout(timeout, connector.connect(name, stream)).await {
        Err(_) => Err(ConnectError::TlsTimeout(timeout)),
        Ok(Err(e)) => Err(ConnectError::Tls(e)),
        Ok(Ok(s)) => Ok(s),
    }
}

/// Resolve, connect, and TLS with the [`app_client_config`] when `tls` (for `https`/`wss`);
/// `timeout` bounds each step.
pub async fn open(
    host: &str,
    port: u16,
    tls: bool,
    timeout: Duration,
) -> Result<Box<dyn Io>, ConnectError> {
    let addrs = resolve(host, port, timeout).await?;
    let tcp = connect_first(&addrs, timeout).await?;
    if tls {
        let s = self::tls(app_client_config(), host, tcp, timeout).await?;
        Ok(Box::new(s))
    } else {
        Ok(Box::new(tcp))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn each_step_says_how_it_failed() {
        // A port that was just free: refused.
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        match open("127.0.0.1", port, false, Duration::from_secs(2)).await {
            Err(ConnectError::Connect(e)) => assert!(is_refused(&e), "{e}"),
            other => panic!("{:?}", other.err()),
        }

        // Accepts, never speaks: TCP opens, the TLS step times out.
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        let _keep = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = l.accept().await {
                held.push(s);
            }
        });
        assert!(open("127.0.0.1", port, false, Duration::from_secs(2))
            .await
            .is_ok());
        let e = open("127.0.0.1", port, true, Duration::from_millis(300))
            .await
            .err();
        assert!(matches!(e, Some(ConnectError::TlsTimeout(_))), "{e:?}");

        assert!(matches!(
            connect_first(&[], Duration::from_secs(1)).await,
            Err(ConnectError::Connect(_))
        ));
    }
}
