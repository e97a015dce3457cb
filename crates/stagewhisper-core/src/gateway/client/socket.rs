//! The socket to the gateway: TCP, TLS for `wss://` (the system's root certificates), the
//! WebSocket upgrade, and reading one frame during the handshake.

use super::supervisor::Outcome;
use crate::gateway::frames::{self, Inbound};
use futures_util::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// A plain TCP or a TLS stream.
pub(super) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
/// The WebSocket to the gateway.
pub(super) type Ws = WebSocketStream<Box<dyn Io>>;

fn tls_config() -> Arc<tokio_rustls::rustls::ClientConfig> {
    use tokio_rustls::rustls;
    static CONFIG: std::sync::OnceLock<Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();
    CONFIG
        .get_or_init(|| {
            let mut roots = rustls::RootCertStore::empty();
            let found = rustls_native_certs::load_native_certs();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            tracing::debug!(added, "system root certificates for wss://");
            Arc::new(
                rustls::ClientConfig::builder_with_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .with_safe_default_protocol_versions()
                .expect("ring supports the default protocol versions")
                .with_root_certificates(roots)
                .with_no_client_auth(),
            )
        })
        .clone()
}

/// Open the WebSocket to `url` (each step — TCP, TLS, upgrade — within `timeout`). `Err`: why
/// not, as a sentence.
pub(super) async fn open_socket(url: &url::Url, timeout: Duration) -> Result<Ws, String> {
    let host = url.host_str().ok_or("no host")?.to_string();
    let port = url.port_or_known_default().ok_or("no port")?;
    let bare = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let tcp = tokio::time::timeout(timeout, TcpStream::connect((bare.as_str(), port)))
        .await
        .map_err(|_| {
            format!(
                "no TCP connection to {host}:{port} within {} s",
                timeout.as_secs()
            )
        })?
        .map_err(|e| format!("cannot connect to {host}:{port}: {e}"))?;
    let _ = tcp.set_nodelay(true);
    let stream: Box<dyn Io> = if url.scheme() == "wss" {
        let name = tokio_rustls::rustls::pki_types::ServerName::try_from(bare.clone())
            .map_err(|_| format!("{host} is not a valid TLS server name"))?;
        let tls = tokio::time::timeout(
            timeout,
            tokio_rustls::TlsConnector::from(tls_config()).connect(name, tcp),
        )
        .await
        .map_err(|_| {
            format!(
                "TLS with {host} did not finish within {} s",
                timeout.as_secs()
            )
        })?
        .map_err(|e| format!("TLS with {host} failed: {e}"))?;
        Box::new(tls)
    } else {
        Box::new(tcp)
    };
    let config = WebSocketConfig::default().max_message_size(Some(32 << 20));
    let (ws, _resp) = tokio::time::timeout(
        timeout,
        tokio_tungstenite::client_async_with_config(url.as_str(), stream, Some(config)),
    )
    .await
    .map_err(|_| {
        format!(
            "the WebSocket handshake did not finish within {} s",
            timeout.as_secs()
        )
    })?
    .map_err(|e| format!("WebSocket handshake failed: {e}"))?;
    Ok(ws)
}

/// The code and reason of a close frame (1005 when it has none).
pub(super) fn close_reason(frame: &Option<CloseFrame>) -> (u16, String) {
    match frame {
        Some(f) => (u16::from(f.code), f.reason.to_string()),
        None => (1005, String::new()),
    }
}

/// Read the next frame during the handshake.
pub(super) async fn next_inbound(ws: &mut Ws, timeout: Duration) -> Result<Inbound, Outcome> {
    loop {
        let msg = match tokio::time::timeout(timeout, ws.next()).await {
            Err(_) => {
                return Err(Outcome::Retry {
                    code: "handshake_timeout",
                    why: format!("the gateway did not answer within {} s", timeout.as_secs()),
                    hint: None,
                })
            }
            Ok(None) => {
                return Err(Outcome::Retry {
                    code: "connection_lost",
                    why: "the connection closed during the handshake".into(),
                    hint: None,
                })
            }
            Ok(Some(Err(e))) => {
                return Err(Outcome::Retry {
                    code: "connection_lost",
                    why: format!("connection error during the handshake: {e}"),
                    hint: None,
                })
            }
            Ok(Some(Ok(m))) => m,
        };
        match msg {
            Message::Text(t) => match frames::parse_inbound(t.as_str()) {
                Ok(f) => return Ok(f),
                Err(e) => tracing::warn!(code = e.code(), "unreadable gateway frame: {e}"),
            },
            Message::Close(frame) => {
                let (code, reason) = close_reason(&frame);
                return Err(match code {
                    1008 | 1002 => Outcome::Final {
                        code: "closed_by_gateway",
                        detail: format!("The gateway closed the connection for good ({code}: {reason}). Check the settings."),
                    },
                    _ => Outcome::Retry {
                        code: "connection_lost",
                        why: format!("closed by the gateway during the handshake ({code} {reason})"),
                        hint: None,
                    },
                });
            }
            _ => {}
        }
    }
}
