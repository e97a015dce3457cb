//! The REST reads a settings page needs: the sessions the token can see, and who it belongs to.

use super::socket::network;
use super::{human, HubError, HubSettings, HubUrl, Token};
use crate::net::{connect, http};
use crate::tunnel::net::Failure;
use serde_json::Value;
use std::time::Duration;

/// Largest REST answer read.
pub(super) const MAX_REST_BYTES: usize = 1024 * 1024;

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

/// `GET {path}` on the hub with the bearer token; the body as JSON. Through the app's one HTTP
/// client ([`crate::net::http`]), to the addresses the connector resolved, with the app's TLS
/// configuration; a failed connection is worded as the hub's WebSocket connection words it.
async fn get_json(
    url: &HubUrl,
    token: &Token,
    path: &str,
    timeout: Duration,
) -> Result<Value, HubError> {
    let auth = token.header()?;
    let fut = async {
        let addrs = connect::resolve(&url.host, url.port, timeout)
            .await
            .map_err(|e| network(url, e))?;
        let mut builder = http::builder(timeout).resolve_to_addrs(&url.host, &addrs);
        if url.tls {
            builder = builder.use_preconfigured_tls(connect::app_client_config().as_ref().clone());
        }
        let client = builder
            .build()
            .map_err(|e| HubError::Handshake(http::cause(&e)))?;
        let mut resp = client
            .get(url.http_url(path))
            .header(reqwest::header::ACCEPT, "application/json")
            .header(reqwest::header::AUTHORIZATION, auth)
            .send()
            .await
            .map_err(|e| match http::connect_error(&e, timeout) {
                Some(c) => network(url, c),
                None => HubError::BadResponse(http::cause(&e)),
            })?;
        let status = resp.status().as_u16();
        let body = http::read_limited(&mut resp, MAX_REST_BYTES)
            .await
            .map_err(|e| HubError::BadResponse(http::cause(&e)))?
            .ok_or_else(|| HubError::BadResponse("length limit exceeded".into()))?;
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
