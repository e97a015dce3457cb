//! The REST reads a settings page needs: the sessions the token can see, and who it belongs to.

use super::socket::open_stream;
use super::{human, HubError, HubSettings, HubUrl, Token};
use crate::tunnel::net::Failure;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use std::time::Duration;

/// Largest REST answer read.
const MAX_REST_BYTES: usize = 1024 * 1024;

/// A session for a picker (`GET /api/v1/sessions`). Fields the hub does not give are `None`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubSession {
    pub id: String,
    pub routing_name: Option<String>,
    pub cwd: Option<String>,
    pub host: Option<String>,
    /// Whether its Claude Code channel is connected, when the hub says.
    pub online: Option<bool>,
}

/// Who the token belongs to (`GET /api/v1/me`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubMe {
    pub login: String,
    pub name: Option<String>,
}

fn str_field(v: &Value, keys: &[&str]) -> Option<String> {
    keys.iter()
        .find_map(|k| v.get(*k).and_then(Value::as_str))
        .map(str::to_string)
}

/// Reads the sessions list: an array, or an object holding it under `sessions`/`data`/`items`.
pub fn parse_sessions(v: &Value) -> Result<Vec<HubSession>, HubError> {
    let list = v
        .as_array()
        .or_else(|| {
            ["sessions", "data", "items"]
                .iter()
                .find_map(|k| v.get(*k).and_then(Value::as_array))
        })
        .ok_or_else(|| HubError::BadResponse("no list of sessions".into()))?;
    Ok(list
        .iter()
        .filter_map(|s| {
            Some(HubSession {
                id: str_field(s, &["id", "sessionId"])?,
                routing_name: str_field(s, &["routingName", "name"]),
                cwd: str_field(s, &["cwd"]),
                host: str_field(s, &["host"]),
                online: ["online", "connected", "channelConnected"]
                    .iter()
                    .find_map(|k| s.get(*k).and_then(Value::as_bool)),
            })
        })
        .collect())
}

/// Reads `/api/v1/me` (`login` at the top or under `user`).
pub fn parse_me(v: &Value) -> Result<HubMe, HubError> {
    let u = v.get("user").filter(|u| u.is_object()).unwrap_or(v);
    let login = str_field(u, &["login", "githubLogin"])
        .ok_or_else(|| HubError::BadResponse("no login".into()))?;
    Ok(HubMe {
        login,
        name: str_field(u, &["name"]),
    })
}

/// `GET {path}` on the hub with the bearer token; the body as JSON.
async fn get_json(
    url: &HubUrl,
    token: &Token,
    path: &str,
    timeout: Duration,
) -> Result<Value, HubError> {
    let auth = token.header()?;
    let fut = async {
        let stream = open_stream(url, timeout).await?;
        let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| HubError::Handshake(e.to_string()))?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "hub REST connection ended with an error");
            }
        });
        let req = hyper::Request::get(format!("{}{path}", url.prefix))
            .header(hyper::header::HOST, url.authority.as_str())
            .header(hyper::header::ACCEPT, "application/json")
            .header(hyper::header::AUTHORIZATION, auth)
            .body(Empty::<Bytes>::new())
            .map_err(|e| HubError::InvalidUrl(e.to_string()))?;
        let resp = sender
            .send_request(req)
            .await
            .map_err(|e| HubError::BadResponse(e.to_string()))?;
        let status = resp.status().as_u16();
        let body = Limited::new(resp.into_body(), MAX_REST_BYTES)
            .collect()
            .await
            .map_err(|e| HubError::BadResponse(e.to_string()))?
            .to_bytes();
        if status == 401 || status == 403 {
            return Err(HubError::AuthFailed(format!("HTTP {status} on {path}")));
        }
        if !(200..300).contains(&status) {
            return Err(HubError::Status(status));
        }
        serde_json::from_slice(&body).map_err(|e| HubError::BadResponse(e.to_string()))
    };
    match tokio::time::timeout(timeout * 2, fut).await {
        Ok(r) => r,
        Err(_) => Err(HubError::Network(Failure::new(
            "timeout",
            format!(
                "the hub did not answer {path} within {}",
                human(timeout * 2)
            ),
        ))),
    }
}

/// The sessions the token can see (`GET /api/v1/sessions`), for a picker.
pub async fn list_sessions(settings: &HubSettings) -> Result<Vec<HubSession>, HubError> {
    let url = HubUrl::parse(&settings.hub_url)?;
    let v = get_json(
        &url,
        &settings.session_token,
        "/api/v1/sessions",
        settings.timing.connect_timeout,
    )
    .await?;
    parse_sessions(&v)
}

/// Who the token belongs to (`GET /api/v1/me`).
pub async fn me(settings: &HubSettings) -> Result<HubMe, HubError> {
    let url = HubUrl::parse(&settings.hub_url)?;
    let v = get_json(
        &url,
        &settings.session_token,
        "/api/v1/me",
        settings.timing.connect_timeout,
    )
    .await?;
    parse_me(&v)
}
