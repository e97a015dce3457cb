//! The web UI's static files (served on `/` without a token: they contain no secrets).

use super::common::ApiError;
use axum::body::Body;
use axum::http::{header, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use std::path::{Path, PathBuf};

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

/// One static file (client-side routes fall back to the index).
pub(super) fn static_file(assets: Option<&dyn Assets>, method: &Method, path: &str) -> Response {
    if method != Method::GET && method != Method::HEAD {
        return ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "GET only",
        )
        .into_response();
    }
    let rel = path.trim_start_matches('/');
    let found = assets.and_then(|a| {
        a.get(rel)
            // Client-side routes fall back to the index.
            .or_else(|| (!rel.contains('.')).then(|| a.get("")).flatten())
    });
    let (bytes, mime) = match found {
        Some(x) => x,
        None if rel.is_empty() || !rel.contains('.') => {
            (FALLBACK_PAGE.as_bytes().to_vec(), "text/html".to_string())
        }
        None => {
            return ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such file")
                .into_response()
        }
    };
    let mut r = Response::new(Body::from(bytes));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(&mime)
            .unwrap_or(HeaderValue::from_static("application/octet-stream")),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
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
