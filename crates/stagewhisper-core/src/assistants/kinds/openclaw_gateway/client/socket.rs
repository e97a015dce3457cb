//! The socket to the gateway: TCP and TLS for `wss://` through the app's one connector
//! ([`crate::net::connect`]: the system's root certificates), the WebSocket upgrade, and reading
//! one frame during the handshake.

use super::supervisor::Outcome;
use crate::assistants::kinds::openclaw_gateway::frames::{self, Inbound};
use crate::net::connect::{self, ConnectError, Io};
use futures_util::StreamExt;
use std::time::Duration;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

/// The WebSocket to the gateway.
pub(super) type Ws = WebSocketStream<Box<dyn Io>>;

/// Open the WebSocket to `url` (each step — TCP, TLS, upgrade — within `timeout`). `Err`: why
/// not, as a sentence.
pub(super) async fn open_socket(url: &url::Url, timeout: Duration) -> Result<Ws, String> {
    let host = url.host_str().ok_or("no host")?.to_string();
    let port = url.port_or_known_default().ok_or("no port")?;
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    // Resolving and connecting share one budget (the TCP step).
    let tcp = tokio::time::timeout(timeout, async {
        let addrs = connect::resolve(bare, port, timeout).await?;
        connect::connect_first(&addrs, timeout).await
    })
    .await
    .map_err(|_| {
        format!(
            "no TCP connection to {host}:{port} within {} s",
            timeout.as_secs()
        )
    })?
    .map_err(|e| match e {
        ConnectError::Resolve(why) => format!("cannot connect to {host}:{port}: {why}"),
        ConnectError::Connect(e) => format!("cannot connect to {host}:{port}: {e}"),
        _ => format!(
            "no TCP connection to {host}:{port} within {} s",
            timeout.as_secs()
        ),
    })?;
    let stream: Box<dyn Io> = if url.scheme() == "wss" {
        let tls = connect::tls(connect::app_client_config(), bare, tcp, timeout)
            .await
            .map_err(|e| match e {
                ConnectError::InvalidServerName => {
                    format!("{host} is not a valid TLS server name")
                }
                ConnectError::Tls(e) => format!("TLS with {host} failed: {e}"),
                _ => format!(
                    "TLS with {host} did not finish within {} s",
                    timeout.as_secs()
                ),
            })?;
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
