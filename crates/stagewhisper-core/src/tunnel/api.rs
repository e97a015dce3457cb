//! Control API routes of the tunnel (merged into the one route table in [`crate::api`]; the UI
//! listener only — the tunnel itself never reaches these; the handlers are thin callers of
//! [`TunnelManager`]):
//!
//! | route | answer |
//! |---|---|
//! | `GET /api/tunnel` | `200 {tunnel}`: state, URLs, error, what the assistant must allow, config |
//! | `POST /api/tunnel` `{"kind":"ngrok","authtoken"?,"domain"?,"wait_secs"?}` | `200 {tunnel}` (`connecting`, or settled within `wait_secs` ≤ 60) |
//! | `POST /api/tunnel` `{"kind":"external","url","check_interval_secs"?,"verify"?,"wait_secs"?}` | same (`verify: false`: advertised without the signed probe) |
//! | `DELETE /api/tunnel` | `200 {tunnel}` (`off`; the saved authtoken is kept) |
//! | `POST /api/tunnel/check` | `200 {tunnel}`: retry / re-check now |
//! | `DELETE /api/tunnel/authtoken` | `200 {tunnel}`: the saved ngrok authtoken file is deleted |
//!
//! Errors: `400 invalid_json` / `missing_field` / `invalid_field` / `invalid_url` (with a
//! sentence), `500 settings_write_failed`.

use super::{TunnelManager, TunnelRequest};
use crate::answers::{from_value, ApiError, ApiResult, ErrorDoc, JsonBody, Reply};
use axum::extract::{FromRef, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::time::Duration;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

/// Longest `wait_secs`.
pub const MAX_WAIT_SECS: u64 = 60;

type St = State<TunnelManager>;

/// The tunnel's routes, for any router state that provides the [`TunnelManager`].
pub fn routes<S>() -> OpenApiRouter<S>
where
    S: Clone + Send + Sync + 'static,
    TunnelManager: FromRef<S>,
{
    OpenApiRouter::new()
        .routes(routes!(get_tunnel, post_tunnel, delete_tunnel))
        .routes(routes!(check_tunnel))
        .routes(routes!(forget_authtoken))
}

/// `POST /api/tunnel`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum TunnelBody {
    /// ngrok, in process.
    Ngrok {
        /// Saved (mode 0600); absent or blank keeps the saved one (or `NGROK_AUTHTOKEN`).
        authtoken: Option<String>,
        /// A reserved domain.
        domain: Option<String>,
        /// Wait up to this long (≤ 60 s) until it is no longer `connecting`.
        wait_secs: Option<u64>,
    },
    /// A tunnel the user runs.
    External {
        /// The tunnel's public origin, e.g. `https://desk.example.net`.
        url: String,
        /// Re-check interval (default 30).
        check_interval_secs: Option<u64>,
        /// `false`: advertised without the signed probe (default `true`).
        verify: Option<bool>,
        /// Wait up to this long (≤ 60 s) until it is no longer `connecting`.
        wait_secs: Option<u64>,
    },
}

impl TunnelBody {
    /// The request and how long to wait for it to settle.
    pub fn into_request(self) -> Result<(TunnelRequest, Option<u64>), ApiError> {
        let (req, wait) = match self {
            TunnelBody::Ngrok {
                authtoken,
                domain,
                wait_secs,
            } => (
                TunnelRequest::Ngrok {
                    authtoken: authtoken.filter(|t| !t.trim().is_empty()),
                    domain: domain.filter(|d| !d.trim().is_empty()),
                },
                wait_secs,
            ),
            TunnelBody::External {
                url,
                check_interval_secs,
                verify,
                wait_secs,
            } => (
                TunnelRequest::External {
                    url,
                    check_interval_secs,
                    verify: verify.unwrap_or(true),
                },
                wait_secs,
            ),
        };
        if wait.is_some_and(|w| w > MAX_WAIT_SECS) {
            return Err(ApiError::bad(
                "invalid_field",
                format!("`wait_secs` is at most {MAX_WAIT_SECS}"),
            ));
        }
        Ok((req, wait))
    }
}

/// Parses a `POST /api/tunnel` body.
pub fn parse_request(b: &Value) -> Result<(TunnelRequest, Option<u64>), ApiError> {
    from_value::<TunnelBody>(b.clone())?.into_request()
}

/// `{tunnel}`: state, URLs, error, what the assistant must allow, and the configuration (see
/// docs/contract.md, "Tunnel").
#[derive(Serialize, ToSchema)]
#[schema(as = Tunnel)]
pub struct TunnelDoc {
    /// `off`, `connecting`, `online`, `failed`.
    pub state: String,
    pub kind: Option<String>,
    pub public_url: Option<String>,
    pub callback_url: String,
    pub local_callback_url: String,
    pub detail: String,
    pub since: String,
    pub attempt: u32,
    pub config: Value,
}

/// The tunnel's state and configuration.
#[utoipa::path(get, path = "/api/tunnel", tag = "tunnel",
    responses((status = 200, body = TunnelDoc)))]
async fn get_tunnel(State(tunnel): St) -> ApiResult {
    Ok(Reply::ok(tunnel.view()))
}

/// Saves the tunnel and (re)starts it in the background.
#[utoipa::path(post, path = "/api/tunnel", tag = "tunnel",
    request_body = TunnelBody,
    responses((status = 200, body = TunnelDoc),
        (status = 400, body = ErrorDoc, description = "`invalid_url`, `invalid_field`, `missing_field`"),
        (status = 500, body = ErrorDoc, description = "`settings_write_failed`")))]
async fn post_tunnel(State(tunnel): St, JsonBody(b): JsonBody<TunnelBody>) -> ApiResult {
    let (req, wait) = b.into_request()?;
    let view = tunnel.configure(req).await.map_err(|e| {
        let status = match e {
            super::RequestError::Save(_) => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        };
        ApiError::new(status, e.code(), e)
    })?;
    if let Some(w) = wait.filter(|w| *w > 0) {
        tunnel.settled(Duration::from_secs(w)).await;
        return Ok(Reply::ok(tunnel.view()));
    }
    Ok(Reply::ok(view))
}

/// Turns the tunnel off (the saved authtoken stays).
#[utoipa::path(delete, path = "/api/tunnel", tag = "tunnel",
    responses((status = 200, body = TunnelDoc)))]
async fn delete_tunnel(State(tunnel): St) -> ApiResult {
    Ok(Reply::ok(tunnel.stop().await))
}

/// Retries / re-checks now.
#[utoipa::path(post, path = "/api/tunnel/check", tag = "tunnel",
    responses((status = 200, body = TunnelDoc)))]
async fn check_tunnel(State(tunnel): St) -> ApiResult {
    Ok(Reply::ok(tunnel.check_now().await))
}

/// Deletes the saved ngrok authtoken.
#[utoipa::path(delete, path = "/api/tunnel/authtoken", tag = "tunnel",
    responses((status = 200, body = TunnelDoc),
        (status = 500, body = ErrorDoc, description = "`settings_write_failed`")))]
async fn forget_authtoken(State(tunnel): St) -> ApiResult {
    tunnel.forget_authtoken().map(Reply::ok).map_err(|e| {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "settings_write_failed",
            format!("cannot delete the saved authtoken: {e}"),
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn requests_parse() {
        let (r, w) =
            parse_request(&json!({"kind": "ngrok", "authtoken": "abc", "domain": ""})).unwrap();
        assert_eq!(
            r,
            TunnelRequest::Ngrok {
                authtoken: Some("abc".into()),
                domain: None
            }
        );
        assert_eq!(w, None);
        let (r, w) = parse_request(
            &json!({"kind": "external", "url": "https://d.example", "check_interval_secs": 5, "wait_secs": 3}),
        )
        .unwrap();
        assert_eq!(
            r,
            TunnelRequest::External {
                url: "https://d.example".into(),
                check_interval_secs: Some(5),
                verify: true,
            }
        );
        assert_eq!(w, Some(3));
        for (body, code) in [
            (json!({}), "missing_field"),
            (json!({"kind": "bore"}), "invalid_field"),
            (json!({"kind": "external"}), "missing_field"),
            (json!({"kind": "external", "url": 5}), "invalid_field"),
            (json!({"kind": "ngrok", "wait_secs": 999}), "invalid_field"),
            (json!({"kind": "ngrok", "wait_secs": -1}), "invalid_field"),
            (
                json!({"kind": "external", "url": "http://x.example", "verify": "no"}),
                "invalid_field",
            ),
        ] {
            let e = parse_request(&body).unwrap_err();
            let (s, v) = (e.status, e.body());
            assert_eq!(s, StatusCode::BAD_REQUEST);
            assert_eq!(v["error"], code, "{body}");
        }
    }
}
