//! Past calls for the user's own assistant, over the Model Context Protocol.
//!
//! An MCP server (the official SDK, `rmcp`, Streamable HTTP transport, stateless: every POST is
//! one JSON-RPC request and its answer, JSON) at `/mcp` on the UI listener. Read-only tools
//! ([`tools`]) over the store's read pool ([`read`]): `list_calls`, `search_calls`,
//! `get_transcript`, `get_call`, `current_call`. Each call whose data a tool returned is
//! written to the access log ([`log`]).
//!
//! Consent and limits, in the order a request meets them:
//! - off until the person turns it on (`PUT /api/mcp`; kept in the settings store's `mcp`
//!   section, [`McpSettings`]; `mcp.json` of older versions is moved in): while off,
//!   every request to `/mcp` is `404 mcp_off`, whatever it carries;
//! - the control API's guard has checked `Host` and `Origin` already (the same rules as `/api`);
//! - its own bearer token ([`TOKEN_FILE`], 0600, rotatable; never the UI or callback token):
//!   without it `401 unauthorized` and nothing else;
//! - a body of at most [`MAX_BODY`] bytes, read within the API's read timeout (`413` with a
//!   JSON-RPC error otherwise);
//! - at most [`MAX_RUNNING`] requests at work at once (the read pool has four connections: the
//!   UI always keeps two) and [`MAX_WAITING`] waiting, each for at most [`MAX_WAIT`]; more is
//!   `503` with a JSON-RPC error;
//! - its connections never present the UI token, so the UI listener's connection table treats
//!   them as untrusted: the first closed to make room for the UI (crate::conns). The callback
//!   listener is another listener with its own table: nothing here reaches it.
//!
//! A call marked private (`PUT /api/calls/{id}`) is never returned by any tool.

pub mod log;
pub mod read;
mod settings;
pub mod tools;

use crate::conversation::Conversation;
use crate::http::{self, BodyError};
use crate::settings::{SettingsError, SettingsStore};
use crate::tokens::{bearer, Secret, TokenError};
use axum::body::Body;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::Full;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::{StreamableHttpServerConfig, StreamableHttpService};
use serde_json::json;
pub use settings::McpSettings;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::Semaphore;
use tower::ServiceExt;

/// The MCP server's own bearer token, in the data dir.
pub const TOKEN_FILE: &str = "mcp_token";
/// Whether the person turned it on, in older versions: `{"enabled": true|false}` (moved into
/// the settings store).
pub const SETTINGS_FILE: &str = "mcp.json";
/// The endpoint's path on the UI listener.
pub const PATH: &str = "/mcp";
/// The largest request body (a tool call's arguments are a few hundred bytes).
pub const MAX_BODY: usize = 64 * 1024;
/// Requests at work at once.
pub const MAX_RUNNING: usize = 2;
/// Requests waiting for one of those places; more are refused at once.
pub const MAX_WAITING: usize = 16;
/// How long a request waits for a place.
pub const MAX_WAIT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
pub enum McpError {
    #[error(transparent)]
    Token(#[from] TokenError),
}

/// What Settings shows (`GET /api/mcp`).
#[derive(Debug, Clone, serde::Serialize, utoipa::ToSchema)]
pub struct McpView {
    /// The person let their assistant look up past calls.
    pub enabled: bool,
    /// The MCP endpoint (Streamable HTTP).
    pub url: String,
    /// The bearer token the assistant presents (`Authorization: Bearer <token>`).
    pub token: String,
}

type Service = StreamableHttpService<tools::Tools, NeverSessionManager>;

/// The MCP server: its switch, its token, its limits and the SDK's HTTP service.
pub struct Mcp {
    token: Secret,
    enabled: AtomicBool,
    settings: SettingsStore,
    /// Writes of the setting, one at a time (the saved switch and the flag agree).
    settings_lock: Mutex<()>,
    url: String,
    running: Semaphore,
    waiting: AtomicUsize,
    service: Service,
    /// Every call's prelude names the tools while they are on.
    conversation: Conversation,
}

impl Mcp {
    /// Loads (or creates) the token and reads the switch (off unless saved on). `ui_url` is the
    /// UI listener's URL (ending in `/`).
    pub fn open(
        data_dir: &Path,
        settings: SettingsStore,
        ui_url: &str,
        conversation: Conversation,
    ) -> Result<Mcp, McpError> {
        let token = Secret::load(data_dir.join(TOKEN_FILE))?;
        let enabled = settings.get::<McpSettings>().enabled;
        let config = StreamableHttpServerConfig::default()
            .with_legacy_session_mode(false)
            .with_json_response(true)
            .with_sse_keep_alive(None)
            .with_sse_retry(None)
            // The control API's guard checks Host (with the port) and Origin before this.
            .disable_allowed_hosts()
            .disable_allowed_origins()
            .with_max_request_body_bytes(MAX_BODY);
        let tools_conversation = conversation.clone();
        let service = StreamableHttpService::new(
            move || Ok(tools::Tools::new(tools_conversation.clone())),
            Arc::new(NeverSessionManager::default()),
            config,
        );
        let mcp = Mcp {
            token,
            enabled: AtomicBool::new(enabled),
            settings,
            settings_lock: Mutex::new(()),
            url: format!("{}{}", ui_url.trim_end_matches('/'), PATH),
            running: Semaphore::new(MAX_RUNNING),
            waiting: AtomicUsize::new(0),
            service,
            conversation,
        };
        mcp.conversation.set_prelude_note(mcp.prelude_note());
        Ok(mcp)
    }

    pub fn enabled(&self) -> bool {
        self.enabled.load(Ordering::Relaxed)
    }

    pub fn view(&self) -> McpView {
        McpView {
            enabled: self.enabled(),
            url: self.url.clone(),
            token: self.token.get(),
        }
    }

    /// Turns it on or off: on disk first, then in effect.
    pub fn set_enabled(&self, on: bool) -> Result<(), SettingsError> {
        let _one = self.settings_lock.lock().unwrap_or_else(|e| e.into_inner());
        self.settings.set(&McpSettings { enabled: on })?;
        self.enabled.store(on, Ordering::Relaxed);
        self.conversation.set_prelude_note(self.prelude_note());
        tracing::info!(enabled = on, "MCP access to past calls changed");
        Ok(())
    }

    /// A new token; the old one stops working when this returns.
    pub fn rotate(&self) -> Result<String, TokenError> {
        let t = self.token.rotate()?;
        tracing::info!("MCP token rotated");
        Ok(t)
    }

    /// The sentence a call's prelude gets while the tools are on (never the token).
    pub fn prelude_note(&self) -> Option<String> {
        self.enabled().then(|| {
            format!(
                "You can look up my earlier calls (titles, transcripts, insights, chats) with the \
                 StageWhisper MCP tools list_calls, search_calls, get_transcript, get_call and \
                 current_call at {}.",
                self.url
            )
        })
    }

    /// One HTTP request to [`PATH`] (Host and Origin already checked by the API's guard).
    pub async fn serve(&self, req: axum::http::Request<Body>) -> Response {
        if !self.enabled() {
            return plain(
                StatusCode::NOT_FOUND,
                "mcp_off",
                "your assistant's access to past calls is turned off (Settings → Assistant)",
            );
        }
        let presented = bearer(
            req.headers()
                .get(header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok()),
        );
        if !presented.is_some_and(|t| self.token.matches(t)) {
            let mut r = plain(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "missing or wrong MCP token",
            );
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return r;
        }
        let (parts, body) = req.into_parts();
        let bytes = if parts.method == Method::POST {
            let read = if http::declared_too_large(&parts.headers, MAX_BODY) {
                Err(BodyError::TooLarge)
            } else {
                http::read_body(body, MAX_BODY).await
            };
            match read {
                Ok(b) => b,
                Err(BodyError::TooLarge) => {
                    return rpc_error(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        -32600,
                        &format!("the request is larger than {} KiB", MAX_BODY / 1024),
                    )
                }
                Err(BodyError::Timeout) => {
                    return rpc_error(
                        StatusCode::REQUEST_TIMEOUT,
                        -32600,
                        "the request body did not arrive in time",
                    )
                }
                Err(BodyError::Io(e)) => {
                    return rpc_error(StatusCode::BAD_REQUEST, -32600, &e.to_string());
                }
            }
        } else {
            bytes::Bytes::new()
        };
        // A place only once the body is in: a slow sender never holds one.
        let Some(_place) = self.place().await else {
            return rpc_error(
                StatusCode::SERVICE_UNAVAILABLE,
                -32000,
                "the server is busy with other requests of your assistant; retry shortly",
            );
        };
        let req = axum::http::Request::from_parts(parts, Full::new(bytes));
        match self.service.clone().oneshot(req).await {
            Ok(r) => r.map(Body::new),
            Err(never) => match never {},
        }
    }

    /// One of the [`MAX_RUNNING`] places, after waiting at most [`MAX_WAIT`] among at most
    /// [`MAX_WAITING`] others.
    async fn place(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        if let Ok(p) = self.running.try_acquire() {
            return Some(p);
        }
        if self.waiting.fetch_add(1, Ordering::AcqRel) >= MAX_WAITING {
            self.waiting.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        let got = tokio::time::timeout(MAX_WAIT, self.running.acquire()).await;
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        got.ok().and_then(Result::ok)
    }
}

/// A refusal before the MCP layer (`{"ok": false, "error", "message"}`, as the control API).
fn plain(status: StatusCode, code: &'static str, message: &str) -> Response {
    crate::answers::ApiError::new(status, code, message.to_string()).into_response()
}

/// A refusal of the MCP layer itself: a JSON-RPC error without an id.
fn rpc_error(status: StatusCode, code: i64, message: &str) -> Response {
    let body = json!({"jsonrpc": "2.0", "id": null, "error": {"code": code, "message": message}});
    let mut r = (status, body.to_string()).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{App, Config};

    /// Two requests at work, sixteen waiting, the next refused at once; the waiting ones get
    /// their place as the first two finish.
    #[tokio::test]
    async fn at_most_two_at_work_and_sixteen_waiting() {
        let tmp = tempfile::tempdir().unwrap();
        let app = App::start(Config::new(tmp.path().to_path_buf()))
            .await
            .unwrap();
        let mcp = app.api.mcp.clone();
        let (a, b) = (mcp.place().await.unwrap(), mcp.place().await.unwrap());
        let waiters: Vec<_> = (0..MAX_WAITING)
            .map(|_| {
                let m = mcp.clone();
                tokio::spawn(async move { m.place().await.is_some() })
            })
            .collect();
        while mcp.waiting.load(Ordering::Acquire) < MAX_WAITING {
            tokio::task::yield_now().await;
        }
        let t = std::time::Instant::now();
        assert!(mcp.place().await.is_none(), "the seventeenth waits");
        assert!(t.elapsed() < Duration::from_secs(1), "refused at once");
        drop((a, b));
        for w in waiters {
            assert!(w.await.unwrap());
        }
        assert_eq!(mcp.waiting.load(Ordering::Acquire), 0);
        drop(mcp);
        app.shutdown().await;
    }

    #[tokio::test]
    async fn the_switch_is_kept_and_the_prelude_follows_it() {
        let tmp = tempfile::tempdir().unwrap();
        let app = App::start(Config::new(tmp.path().to_path_buf()))
            .await
            .unwrap();
        let mcp = app.api.mcp.clone();
        assert!(!mcp.enabled());
        let plain = app.conversation.call_prelude("Coach {title}", Some("Acme"));
        assert_eq!(plain, "Coach \"Acme\"");
        mcp.set_enabled(true).unwrap();
        let with = app.conversation.call_prelude("Coach {title}", Some("Acme"));
        let v = mcp.view();
        assert!(
            with.starts_with("Coach \"Acme\"\n") && with.contains(&v.url),
            "{with}"
        );
        assert!(
            with.contains("search_calls") && !with.contains(&v.token),
            "{with}"
        );
        drop(mcp);
        app.shutdown().await;
        let app = App::start(Config::new(tmp.path().to_path_buf()))
            .await
            .unwrap();
        assert!(app.api.mcp.enabled(), "kept across a restart");
        assert_eq!(app.api.mcp.view().token, v.token, "the same token");
        assert!(app
            .conversation
            .call_prelude("x", None)
            .contains("search_calls"));
        app.shutdown().await;
    }
}
