//! Control API routes of the tunnel (mounted by [`crate::api::ControlApi`]; the UI listener
//! only — the tunnel itself never reaches these):
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
use crate::api::{bad, error_json, not_allowed, ok, opt_string, parse_body, Answer};
use hyper::{Method, StatusCode};
use serde_json::Value;
use std::time::Duration;

/// Longest `wait_secs`.
pub const MAX_WAIT_SECS: u64 = 60;

fn opt_u64(body: &Value, key: &'static str) -> Result<Option<u64>, (StatusCode, Value)> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .map(Some)
            .ok_or_else(|| bad("invalid_field", format!("`{key}` must be a whole number"))),
    }
}

/// Routes a request if it is one of the tunnel's; `None` otherwise.
pub async fn dispatch(
    tunnel: &TunnelManager,
    method: &Method,
    segs: &[&str],
    body: &[u8],
) -> Option<Answer> {
    Some(match segs {
        ["api", "tunnel"] => match *method {
            Method::GET => Ok(ok(StatusCode::OK, tunnel.view())),
            Method::POST => post_tunnel(tunnel, body).await,
            Method::DELETE => Ok(ok(StatusCode::OK, tunnel.stop().await)),
            _ => Err(not_allowed()),
        },
        ["api", "tunnel", "check"] => match *method {
            Method::POST => Ok(ok(StatusCode::OK, tunnel.check_now().await)),
            _ => Err(not_allowed()),
        },
        ["api", "tunnel", "authtoken"] => match *method {
            Method::DELETE => tunnel
                .forget_authtoken()
                .map(|v| ok(StatusCode::OK, v))
                .map_err(|e| {
                    error_json(
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "settings_write_failed",
                        format!("cannot delete the saved authtoken: {e}"),
                    )
                }),
            _ => Err(not_allowed()),
        },
        _ => return None,
    })
}

/// Parses a `POST /api/tunnel` body.
pub fn parse_request(b: &Value) -> Result<(TunnelRequest, Option<u64>), (StatusCode, Value)> {
    let wait = opt_u64(b, "wait_secs")?;
    if wait.is_some_and(|w| w > MAX_WAIT_SECS) {
        return Err(bad(
            "invalid_field",
            format!("`wait_secs` is at most {MAX_WAIT_SECS}"),
        ));
    }
    let Some(kind) = opt_string(b, "kind")? else {
        return Err(bad(
            "missing_field",
            "`kind` is required: \"ngrok\" or \"external\"",
        ));
    };
    let req = match kind.as_str() {
        "ngrok" => TunnelRequest::Ngrok {
            authtoken: opt_string(b, "authtoken")?.filter(|t| !t.trim().is_empty()),
            domain: opt_string(b, "domain")?.filter(|d| !d.trim().is_empty()),
        },
        "external" => {
            let Some(url) = opt_string(b, "url")? else {
                return Err(bad(
                    "missing_field",
                    "`url` is required: the tunnel's public origin, e.g. https://desk.example.net",
                ));
            };
            let verify = match b.get("verify") {
                None | Some(Value::Null) => true,
                Some(Value::Bool(v)) => *v,
                Some(_) => return Err(bad("invalid_field", "`verify` must be true or false")),
            };
            TunnelRequest::External {
                url,
                check_interval_secs: opt_u64(b, "check_interval_secs")?,
                verify,
            }
        }
        other => {
            return Err(bad(
                "invalid_field",
                format!("`kind` must be \"ngrok\" or \"external\" (got \"{other}\")"),
            ))
        }
    };
    Ok((req, wait))
}

async fn post_tunnel(tunnel: &TunnelManager, body: &[u8]) -> Answer {
    let b = parse_body(body)?;
    let (req, wait) = parse_request(&b)?;
    let view = tunnel.configure(req).await.map_err(|e| {
        let status = match e {
            super::RequestError::Save(_) => StatusCode::INTERNAL_SERVER_ERROR,
            _ => StatusCode::BAD_REQUEST,
        };
        error_json(status, e.code(), e)
    })?;
    if let Some(w) = wait.filter(|w| *w > 0) {
        tunnel.settled(Duration::from_secs(w)).await;
        return Ok(ok(StatusCode::OK, tunnel.view()));
    }
    Ok(ok(StatusCode::OK, view))
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
            let (s, v) = parse_request(&body).unwrap_err();
            assert_eq!(s, StatusCode::BAD_REQUEST);
            assert_eq!(v["error"], code, "{body}");
        }
    }
}
