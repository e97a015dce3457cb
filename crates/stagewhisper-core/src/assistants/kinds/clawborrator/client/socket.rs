//! Opening the hub: TCP (+ TLS) through the crate's connector, and the `/cli` WebSocket
//! upgrade on top.

use super::{human, HubError, HubTiming, HubUrl, Token};
use crate::net::connect::{self, Io};
use crate::tunnel::net::{self, Failure};
use bytes::Bytes;
use http_body_util::Empty;
use hyper::header::HeaderValue;
use hyper::StatusCode;
use hyper_util::rt::TokioIo;
use std::time::Duration;
use tokio_tungstenite::tungstenite;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role as WsRole;
use tokio_tungstenite::WebSocketStream;

/// The `/cli` socket.
pub(super) type Ws = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

/// TCP (+ TLS for `https`), each step bounded by `timeout`.
pub(super) async fn open_stream(url: &HubUrl, timeout: Duration) -> Result<Box<dyn Io>, HubError> {
    connect::open(&url.host, url.port, url.tls, timeout)
        .await
        .map_err(|e| network(url, e))
}

/// A failed connection to the hub, in the tunnel's words for its steps.
pub(super) fn network(url: &HubUrl, e: connect::ConnectError) -> HubError {
    HubError::Network(net::failure(
        e,
        &net::Peer {
            host: &url.host,
            display: &url.authority,
            what: "the hub",
            hint: "Check the hub URL.",
        },
    ))
}

/// Opens `/cli` with the bearer token on the upgrade. The upgrade is made with hyper, not by
/// the WebSocket library, whose trace log prints the whole request (the token included).
pub(super) async fn connect_cli(
    url: HubUrl,
    token: Token,
    timing: HubTiming,
) -> Result<Ws, HubError> {
    let auth = token.header()?;
    let stream = open_stream(&url, timing.connect_timeout).await?;
    match tokio::time::timeout(timing.connect_timeout, upgrade(stream, &url, auth)).await {
        Err(_) => Err(HubError::Network(Failure::new(
            "timeout",
            format!(
                "the hub did not answer the WebSocket upgrade within {}",
                human(timing.connect_timeout)
            ),
        ))),
        Ok(r) => r,
    }
}

/// The WebSocket upgrade of `/cli` over `stream`, `auth` the `Authorization` header.
async fn upgrade(stream: Box<dyn Io>, url: &HubUrl, auth: HeaderValue) -> Result<Ws, HubError> {
    use hyper::header::{
        AUTHORIZATION, CONNECTION, HOST, SEC_WEBSOCKET_ACCEPT, SEC_WEBSOCKET_KEY,
        SEC_WEBSOCKET_VERSION, UPGRADE,
    };
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .map_err(|e| HubError::Handshake(e.to_string()))?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "hub upgrade connection ended with an error");
        }
    });
    let key = tungstenite::handshake::client::generate_key();
    let req = hyper::Request::get(format!("{}/cli", url.prefix))
        .header(HOST, url.authority.as_str())
        .header(UPGRADE, "websocket")
        .header(CONNECTION, "Upgrade")
        .header(SEC_WEBSOCKET_VERSION, "13")
        .header(SEC_WEBSOCKET_KEY, key.as_str())
        .header(AUTHORIZATION, auth)
        .body(Empty::<Bytes>::new())
        .map_err(|e| HubError::InvalidUrl(e.to_string()))?;
    let resp = sender
        .send_request(req)
        .await
        .map_err(|e| HubError::Handshake(e.to_string()))?;
    let status = resp.status();
    if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
        return Err(HubError::AuthFailed(format!(
            "the upgrade was refused with HTTP {}",
            status.as_u16()
        )));
    }
    if status != StatusCode::SWITCHING_PROTOCOLS {
        return Err(HubError::Handshake(format!(
            "the hub answered HTTP {} instead of switching to WebSocket",
            status.as_u16()
        )));
    }
    let accept = derive_accept_key(key.as_bytes());
    let accepted = resp
        .headers()
        .get(SEC_WEBSOCKET_ACCEPT)
        .is_some_and(|v| v.as_bytes() == accept.as_bytes());
    if !accepted {
        return Err(HubError::Handshake(
            "the hub's Sec-WebSocket-Accept does not match".into(),
        ));
    }
    let upgraded = hyper::upgrade::on(resp)
        .await
        .map_err(|e| HubError::Handshake(e.to_string()))?;
    Ok(WebSocketStream::from_raw_socket(TokioIo::new(upgraded), WsRole::Client, None).await)
}
