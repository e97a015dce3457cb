//! The control API and the web UI, on the UI listener (loopback only, never tunnelled).
//!
//! [`ControlApi::dispatch`] is transport-free (method, path, JSON body → status, JSON), so the
//! desktop shell calls exactly the same routes in-process; [`ControlApi::handle`] adds the HTTP
//! concerns (Host check, UI token, SSE, static files).

use crate::assistants::Assistants;
use crate::conversation::{Conversation, CoreError};
use crate::faults::Faults;
use crate::http::{self, AllowedHosts, Resp, Shutdown};
use crate::tokens::{bearer, Secret};
use crate::tunnel::TunnelManager;
use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{HeaderValue, AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// Largest control API request body.
const MAX_API_BODY: usize = 256 * 1024;
/// Largest user message.
pub const MAX_USER_TEXT: usize = 16_000;

/// Static files of the web UI.
pub trait Assets: Send + Sync {
    /// `path` without the leading `/`; `""` is the index.
    fn get(&self, path: &str) -> Option<(Vec<u8>, String)>;
}

/// Serves a built UI folder (`ui/dist`).
pub struct DirAssets {
    root: PathBuf,
}

impl DirAssets {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        DirAssets { root: root.into() }
    }
}

impl Assets for DirAssets {
    fn get(&self, path: &str) -> Option<(Vec<u8>, String)> {
        let rel = if path.is_empty() { "index.html" } else { path };
        if rel
            .split('/')
            .any(|seg| seg == ".." || seg.starts_with('.'))
        {
            return None;
        }
        let full = self.root.join(rel);
        let bytes = std::fs::read(&full).ok()?;
        let mime = mime_guess::from_path(&full)
            .first_or_octet_stream()
            .essence_str()
            .to_string();
        Some((bytes, mime))
    }
}

const FALLBACK_PAGE: &str = "<!doctype html><meta charset=utf-8><title>StageWhisper</title>\
<body style=\"font:16px system-ui;margin:3rem\"><h1>StageWhisper</h1>\
<p>The web UI is not built. Run <code>npm --prefix ui ci &amp;&amp; npm --prefix ui run build</code> \
(or <code>./run</code>) and restart the app. The control API is available under <code>/api</code>.</p>";

pub struct ControlApi {
    pub conversation: Conversation,
    pub callback_token: Arc<Secret>,
    pub ui_token: Arc<Secret>,
    pub hosts: Arc<AllowedHosts>,
    pub callback_url: String,
    pub data_dir: PathBuf,
    pub assets: Option<Arc<dyn Assets>>,
    pub shutdown: Shutdown,
    /// The assistants (their routes live in [`crate::links::api`]).
    pub link: Assistants,
    /// Test-only fault injection (`/api/test/faults`, 404 unless enabled).
    pub faults: Arc<Faults>,
    /// The optional tunnel (its routes live in [`crate::tunnel::api`]).
    pub tunnel: TunnelManager,
}

/// A control API answer: `Ok` and `Err` both carry the status and the JSON body.
pub(crate) type Answer = Result<(StatusCode, Value), (StatusCode, Value)>;

pub(crate) fn not_allowed() -> (StatusCode, Value) {
    error_json(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "method not allowed on this route",
    )
}

pub(crate) fn bad(code: &str, msg: impl std::fmt::Display) -> (StatusCode, Value) {
    error_json(StatusCode::BAD_REQUEST, code, msg)
}

pub(crate) fn error_json(
    status: StatusCode,
    code: &str,
    message: impl std::fmt::Display,
) -> (StatusCode, Value) {
    (
        status,
        json!({"ok": false, "error": code, "message": message.to_string()}),
    )
}

pub(crate) fn core_error(e: CoreError) -> (StatusCode, Value) {
    let status = match e {
        CoreError::SessionNotFound | CoreError::MessageNotFound => StatusCode::NOT_FOUND,
        CoreError::NotACall | CoreError::CallEnded => StatusCode::CONFLICT,
        CoreError::EmptyText => StatusCode::BAD_REQUEST,
        CoreError::StorageUnavailable(_) | CoreError::Stopped => StatusCode::SERVICE_UNAVAILABLE,
    };
    error_json(status, e.code(), e)
}

pub(crate) fn ok<T: serde::Serialize>(status: StatusCode, v: T) -> (StatusCode, Value) {
    (status, serde_json::to_value(v).unwrap_or(Value::Null))
}

/// An optional string field of a JSON body.
pub(crate) fn opt_string(
    body: &Value,
    key: &'static str,
) -> Result<Option<String>, (StatusCode, Value)> {
    match body.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(error_json(
            StatusCode::BAD_REQUEST,
            "invalid_field",
            format!("`{key}` must be a string"),
        )),
    }
}

pub(crate) fn parse_body(body: &[u8]) -> Result<Value, (StatusCode, Value)> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(json!({}));
    }
    match serde_json::from_slice::<Value>(body) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(_) => Err(error_json(
            StatusCode::BAD_REQUEST,
            "invalid_json",
            "expected a JSON object",
        )),
        Err(e) => Err(error_json(StatusCode::BAD_REQUEST, "invalid_json", e)),
    }
}

impl ControlApi {
    /// Routes one control API request. `path` is the URL path (no query).
    pub async fn dispatch(&self, method: &Method, path: &str, body: &[u8]) -> (StatusCode, Value) {
        match self.dispatch_inner(method, path, body).await {
            Ok(r) | Err(r) => r,
        }
    }

    async fn dispatch_inner(
        &self,
        method: &Method,
        path: &str,
        body: &[u8],
    ) -> Result<(StatusCode, Value), (StatusCode, Value)> {
        let segs: Vec<&str> = path
            .trim_start_matches('/')
            .trim_end_matches('/')
            .split('/')
            .collect();
        let c = &self.conversation;
        match segs.as_slice() {
            ["api", "calls"] => {
                if method != Method::POST {
                    return Err(not_allowed());
                }
                let b = parse_body(body)?;
                let title = opt_string(&b, "title")?;
                let s = c.create_session(true, title).await.map_err(core_error)?;
                Ok(ok(
                    StatusCode::CREATED,
                    json!({"session_id": s.session_id, "insights_session_id": s.insights_session_id, "session": s}),
                ))
            }
            ["api", "calls", id, "end"] => {
                if method != Method::POST {
                    return Err(not_allowed());
                }
                let s = c.end_call(id).await.map_err(core_error)?;
                Ok(ok(StatusCode::OK, s))
            }
            ["api", "sessions"] => match *method {
                Method::POST => {
                    let b = parse_body(body)?;
                    let title = opt_string(&b, "title")?;
                    let s = c.create_session(false, title).await.map_err(core_error)?;
                    Ok(ok(
                        StatusCode::CREATED,
                        json!({"session_id": s.session_id, "session": s}),
                    ))
                }
                Method::GET => Ok(ok(StatusCode::OK, c.sessions().await.map_err(core_error)?)),
                _ => Err(not_allowed()),
            },
            ["api", "sessions", id] => {
                if method != Method::DELETE {
                    return Err(not_allowed());
                }
                c.delete_session(id).await.map_err(core_error)?;
                Ok(ok(StatusCode::OK, json!({"ok": true})))
            }
            ["api", "sessions", id, "messages"] => match *method {
                Method::GET => Ok(ok(
                    StatusCode::OK,
                    c.messages(id).await.map_err(core_error)?,
                )),
                Method::POST => {
                    let b = parse_body(body)?;
                    let Some(text) = opt_string(&b, "text")? else {
                        return Err(error_json(
                            StatusCode::BAD_REQUEST,
                            "missing_field",
                            "`text` is required",
                        ));
                    };
                    if text.chars().count() > MAX_USER_TEXT {
                        return Err(error_json(
                            StatusCode::BAD_REQUEST,
                            "text_too_long",
                            format!("a message is at most {MAX_USER_TEXT} characters"),
                        ));
                    }
                    let m = c.user_message(id, &text).await.map_err(core_error)?;
                    self.link.wake();
                    Ok(ok(StatusCode::CREATED, m))
                }
                _ => Err(not_allowed()),
            },
            ["api", "sessions", id, "insights"] => {
                if method != Method::GET {
                    return Err(not_allowed());
                }
                Ok(ok(
                    StatusCode::OK,
                    c.insights(id).await.map_err(core_error)?,
                ))
            }
            ["api", "sessions", id, "typing"] => {
                if method != Method::GET {
                    return Err(not_allowed());
                }
                if c.sessions()
                    .await
                    .map_err(core_error)?
                    .iter()
                    .all(|s| s.session_id != *id)
                {
                    return Err(core_error(CoreError::SessionNotFound));
                }
                Ok(ok(StatusCode::OK, c.typing(id).await.map_err(core_error)?))
            }
            ["api", "settings"] => {
                if method != Method::GET {
                    return Err(not_allowed());
                }
                let s = c.settings();
                Ok(ok(
                    StatusCode::OK,
                    json!({
                        "callback_url": self.tunnel.advertised_callback_url(),
                        "local_callback_url": self.callback_url,
                        "tunnel": self.tunnel.status().state,
                        "callback_token": self.callback_token.get(),
                        "data_dir": self.data_dir.display().to_string(),
                        "typing_timeout_secs": s.typing_timeout_ms / 1000,
                        "insights_grace_secs": s.insights_grace_ms / 1000,
                    }),
                ))
            }
            ["api", "settings", "callback-token", "rotate"] => {
                if method != Method::POST {
                    return Err(not_allowed());
                }
                let t = self.callback_token.rotate().map_err(|e| {
                    error_json(StatusCode::INTERNAL_SERVER_ERROR, "token_write_failed", e)
                })?;
                tracing::info!("callback token rotated");
                Ok(ok(StatusCode::OK, json!({"callback_token": t})))
            }
            ["api", "tunnel", ..] => {
                match crate::tunnel::api::dispatch(&self.tunnel, method, &segs, body).await {
                    Some(r) => r,
                    None => Err(error_json(
                        StatusCode::NOT_FOUND,
                        "not_found",
                        "no such route",
                    )),
                }
            }
            _ => match crate::links::api::dispatch(self, method, &segs, body).await {
                Some(r) => r,
                None => Err(error_json(
                    StatusCode::NOT_FOUND,
                    "not_found",
                    "no such route",
                )),
            },
        }
    }

    pub async fn handle(self: Arc<Self>, req: Request<Incoming>) -> Resp {
        if !self.hosts.allows(&req) {
            return http::bad_host();
        }
        let path = req.uri().path().to_string();
        if !path.starts_with("/api/") && path != "/api" {
            return self.static_file(&req, &path);
        }
        let query = req.uri().query().unwrap_or("").to_string();
        let is_events = path == "/api/events";
        let header_token = bearer(
            req.headers()
                .get(AUTHORIZATION)
                .and_then(|v| v.to_str().ok()),
        )
        .map(str::to_string);
        let query_token = is_events
            .then(|| query_param(&query, "access_token"))
            .flatten();
        let authorized = header_token
            .or(query_token)
            .is_some_and(|t| self.ui_token.matches(&t));
        if !authorized {
            let mut r = http::error(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "missing or wrong UI token",
            );
            r.headers_mut().insert(
                hyper::header::WWW_AUTHENTICATE,
                HeaderValue::from_static("Bearer"),
            );
            return r;
        }
        if is_events {
            if req.method() != Method::GET {
                return http::error(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "method_not_allowed",
                    "GET only",
                );
            }
            let header_cursor = req
                .headers()
                .get("last-event-id")
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<i64>().ok());
            let cursor = header_cursor
                .or_else(|| query_param(&query, "after").and_then(|v| v.parse::<i64>().ok()));
            return self.event_stream(cursor).await;
        }
        let method = req.method().clone();
        let body = if matches!(method, Method::POST | Method::PUT | Method::PATCH) {
            if http::declared_too_large(&req, MAX_API_BODY) {
                return http::body_error(http::BodyError::TooLarge);
            }
            match http::read_body(req.into_body(), MAX_API_BODY).await {
                Ok(b) => b,
                Err(e) => return http::body_error(e),
            }
        } else {
            Bytes::new()
        };
        let (status, value) = self.dispatch(&method, &path, &body).await;
        http::json_response(status, &value)
    }

    fn static_file(&self, req: &Request<Incoming>, path: &str) -> Resp {
        if req.method() != Method::GET && req.method() != Method::HEAD {
            return http::error(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "GET only",
            );
        }
        let rel = path.trim_start_matches('/');
        let found = self.assets.as_ref().and_then(|a| {
            a.get(rel)
                // Client-side routes fall back to the index.
                .or_else(|| (!rel.contains('.')).then(|| a.get("")).flatten())
        });
        let (bytes, mime) = match found {
            Some(x) => x,
            None if rel.is_empty() || !rel.contains('.') => {
                (FALLBACK_PAGE.as_bytes().to_vec(), "text/html".to_string())
            }
            None => return http::error(StatusCode::NOT_FOUND, "not_found", "no such file"),
        };
        let mut r = Response::new(http::full(bytes));
        let h = r.headers_mut();
        h.insert(
            CONTENT_TYPE,
            HeaderValue::from_str(&mime)
                .unwrap_or(HeaderValue::from_static("application/octet-stream")),
        );
        h.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        h.insert(
            "content-security-policy",
            HeaderValue::from_static(
                "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; \
                 connect-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'",
            ),
        );
        h.insert(
            "x-content-type-options",
            HeaderValue::from_static("nosniff"),
        );
        h.insert("referrer-policy", HeaderValue::from_static("no-referrer"));
        r
    }

    /// The event log as SSE from `cursor` (exclusive). Without a cursor the stream starts at
    /// the current end and first sends `event: ready` with `{"cursor": N}`.
    async fn event_stream(&self, cursor: Option<i64>) -> Resp {
        let store = self.conversation.store().clone();
        let (start, hello) = match cursor {
            Some(c) => (c.max(0), false),
            None => match store.last_event_id().await {
                Ok(id) => (id, true),
                Err(e) => {
                    return http::error(StatusCode::SERVICE_UNAVAILABLE, "storage_unavailable", e)
                }
            },
        };
        let mut sub = self.conversation.hub().subscribe(store, start);
        let shutdown = self.shutdown.clone();
        let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(256);
        tokio::spawn(async move {
            // A first frame at once, so proxies and clients see the stream is alive.
            let first = if hello {
                format!(": stream open\nevent: ready\ndata: {{\"cursor\":{start}}}\n\n")
            } else {
                ": stream open\n\n".to_string()
            };
            if tx.send(Bytes::from(first)).await.is_err() {
                return;
            }
            let mut keepalive = tokio::time::interval(Duration::from_secs(15));
            keepalive.tick().await;
            loop {
                let frame = tokio::select! {
                    e = sub.next() => match e {
                        Ok(e) => format!("id: {}\nevent: {}\ndata: {}\n\n", e.id, e.event_type, e.json),
                        Err(err) => {
                            tracing::warn!(error = %err, "event stream read failed; retrying");
                            tokio::time::sleep(Duration::from_millis(500)).await;
                            continue;
                        }
                    },
                    _ = keepalive.tick() => ": keepalive\n\n".to_string(),
                    _ = shutdown.wait() => break,
                    _ = tx.closed() => break,
                };
                if tx.send(Bytes::from(frame)).await.is_err() {
                    break;
                }
            }
        });
        let stream = futures_util::stream::unfold(rx, |mut rx| async move {
            rx.recv()
                .await
                .map(|b| (Ok::<_, std::io::Error>(Frame::data(b)), rx))
        });
        let mut r = Response::new(StreamBody::new(stream).boxed());
        let h = r.headers_mut();
        h.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
        h.insert("x-accel-buffering", HeaderValue::from_static("no"));
        r
    }
}

/// One `key=value` of a query string (values here are tokens and numbers: no decoding needed
/// beyond `%3D`-free base64url).
fn query_param(query: &str, key: &str) -> Option<String> {
    query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v.to_string())
}

/// Finds the built UI: an explicit folder, else `ui/dist` beside or above the executable.
pub fn find_ui_dir(explicit: Option<&Path>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(p.to_path_buf());
    }
    if let Ok(p) = std::env::var("STAGEWHISPER_UI_DIR") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    exe.ancestors()
        .skip(1)
        .take(4)
        .map(|d| d.join("ui").join("dist"))
        .find(|d| d.join("index.html").is_file())
}
