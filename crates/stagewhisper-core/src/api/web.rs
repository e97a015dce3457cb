//! The web UI's static files (served on `/` without a token: they contain no secrets).
//!
//! Caching: the bundler names the files under `assets/` by their content's hash, so they are
//! `immutable` for a year; everything else (`index.html`, which names them, the favicon) is
//! `no-cache` with an `ETag`, answered `304` when unchanged. Text files are sent gzipped to a
//! client that accepts it, compressed once per content and kept in memory.

use crate::answers::ApiError;
use axum::body::Body;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// Files smaller than this are not worth compressing.
const GZIP_MIN_BYTES: usize = 1024;
/// Gzipped files kept (keyed by content hash, so an entry is never stale; a rebuilt UI
/// served by a running app adds entries, and past this many the cache starts over).
const GZIP_CACHE_ENTRIES: usize = 64;
const IMMUTABLE: &str = "public, max-age=31536000, immutable";

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

/// Worth gzipping: text, scripts, styles, JSON, SVG.
fn compressible(mime: &str) -> bool {
    mime.starts_with("text/")
        || matches!(
            mime,
            "application/javascript" | "application/json" | "image/svg+xml" | "application/xml"
        )
}

/// The client takes gzip (`Accept-Encoding` lists it without `q=0`).
fn accepts_gzip(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT_ENCODING)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|item| {
            let mut parts = item.split(';').map(str::trim);
            let coding = parts.next().unwrap_or("");
            let refused = parts.any(|p| {
                p.strip_prefix("q=")
                    .and_then(|q| q.parse::<f32>().ok())
                    .is_some_and(|q| q == 0.0)
            });
            (coding.eq_ignore_ascii_case("gzip") || coding == "*") && !refused
        })
}

/// `bytes` gzipped, from the cache when this content was compressed before.
fn gzipped(etag: &str, bytes: &[u8]) -> Bytes {
    static CACHE: OnceLock<Mutex<HashMap<String, Bytes>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(hit) = cache.lock().expect("not poisoned").get(etag) {
        return hit.clone();
    }
    let mut enc = flate2::write::GzEncoder::new(
        Vec::with_capacity(bytes.len() / 3),
        flate2::Compression::best(),
    );
    enc.write_all(bytes).expect("writes to memory");
    let out = Bytes::from(enc.finish().expect("writes to memory"));
    let mut map = cache.lock().expect("not poisoned");
    if map.len() >= GZIP_CACHE_ENTRIES {
        map.clear();
    }
    map.insert(etag.to_string(), out.clone());
    out
}

/// One static file (client-side routes fall back to the index).
pub(super) fn static_file(
    assets: Option<&dyn Assets>,
    method: &Method,
    path: &str,
    headers: &HeaderMap,
) -> Response {
    if method != Method::GET && method != Method::HEAD {
        return ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method_not_allowed",
            "GET only",
        )
        .into_response();
    }
    let rel = path.trim_start_matches('/');
    let Some((bytes, mime)) = find_file(assets, rel) else {
        return ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such file").into_response();
    };
    // A path with a dot is that file or nothing (no fallback to the index).
    let hashed = rel.starts_with("assets/") && rel.contains('.');
    let etag = format!("\"{}\"", hex::encode(&Sha256::digest(&bytes)[..16]));
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|t| t.trim() == etag || t.trim() == "*"));
    let zip = compressible(&mime) && bytes.len() >= GZIP_MIN_BYTES;
    let mut r = if fresh {
        let mut r = Response::new(Body::empty());
        *r.status_mut() = StatusCode::NOT_MODIFIED;
        r
    } else if zip && accepts_gzip(headers) {
        let gz = gzipped(&etag, &bytes);
        let mut r = Response::new(Body::from(gz));
        r.headers_mut()
            .insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
        r
    } else {
        Response::new(Body::from(bytes))
    };
    file_headers(r.headers_mut(), &mime, hashed, &etag, zip);
    r
}

/// The file at `rel` and its MIME type: client-side routes fall back to the index, else to the
/// placeholder page; `None` for a file that does not exist.
fn find_file(assets: Option<&dyn Assets>, rel: &str) -> Option<(Vec<u8>, String)> {
    // A path without a dot is a client-side route (or the root).
    let route = !rel.contains('.');
    assets
        .and_then(|a| a.get(rel).or_else(|| route.then(|| a.get("")).flatten()))
        .or_else(|| route.then(|| (FALLBACK_PAGE.as_bytes().to_vec(), "text/html".to_string())))
}

/// A static file's headers: type, caching (immutable for hashed assets), ETag, and the
/// security headers of the page.
fn file_headers(h: &mut HeaderMap, mime: &str, hashed: bool, etag: &str, zip: bool) {
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_str(mime).unwrap_or(HeaderValue::from_static("application/octet-stream")),
    );
    h.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static(if hashed { IMMUTABLE } else { "no-cache" }),
    );
    h.insert(
        header::ETAG,
        HeaderValue::from_str(etag).expect("hex is a valid header value"),
    );
    if zip {
        h.insert(header::VARY, HeaderValue::from_static("accept-encoding"));
    }
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
