//! The control API and the web UI, on the UI listener (loopback only, never tunnelled).
//!
//! One axum [`Router`] (built in [`route_table`]) serves both the HTTP listener
//! ([`ControlApi::handle`]) and the desktop window's IPC ([`ControlApi::call`]), so there is
//! exactly one control API. In front of the routes, one guard ([`guard`]):
//! - HTTP only: the `Host` check (DNS-rebinding defence, every path), the `Origin` check (a
//!   browser's request from a page of another origin, every path) and the UI token on
//!   `/api/*` (`Authorization: Bearer`, or `?access_token=` on the SSE route). A request made
//!   in-process by the shell carries the [`InProcess`] marker instead, which no HTTP request can;
//! - both: the body limits (256 KiB, 10 s), read once so every route sees the same rules.
//!
//! The areas: [`routes`] (sessions, messages, settings, events), `assistant` (the routes every
//! assistant kind shares), `calls` (transcript, summarise, retry, test faults), the others by
//! name, and [`crate::tunnel::api`] (the tunnel); each returns a router merged here. An assistant
//! kind's own routes come from the kind ([`crate::assistants::AssistantKind::control_routes`]),
//! so this module names no kind. All of them answer with [`crate::answers`] (answers, errors,
//! the body extractor). The OpenAPI document is generated from the same route table and types
//! and served at `GET /api/openapi.json`.

pub(crate) mod archive;
mod assistant;
mod audio;
mod calls;
mod detection;
mod mcp;
mod models;
mod permissions;
mod recording;
mod routes;
mod speakers;
mod stop;
mod summary;
mod web;

pub use crate::answers::{ApiError, MAX_API_BODY, MAX_USER_TEXT};
pub use web::{find_ui_dir, Assets, DirAssets};

use crate::assistants::Assistants;
use crate::conversation::Conversation;
use crate::faults::Faults;
use crate::http::{self, AllowedHosts, BodyError, Shutdown};
use crate::tokens::{bearer, Secret};
use crate::tunnel::TunnelManager;
use axum::body::Body;
use axum::extract::{FromRef, Request, State};
use axum::http::request::Parts;
use axum::http::{header, HeaderValue, Method, StatusCode, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Router;
use bytes::Bytes;
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use tower::ServiceExt;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{ContentBuilder, Ref, RefOr, ResponseBuilder};
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

/// Marks a request made in-process by the desktop shell (the window's IPC), never by the
/// network: an HTTP request cannot carry it (extensions are not on the wire). Only
/// [`ControlApi::call`] sets it; it stands in for the HTTP-only checks (Host, UI token).
#[derive(Debug, Clone, Copy)]
pub(crate) struct InProcess;

/// The schema's route (no UI token: it holds no secret; the `Host` check applies).
pub const OPENAPI_PATH: &str = "/api/openapi.json";
const EVENTS_PATH: &str = "/api/events";

/// What the routes reach.
pub struct ApiState {
    pub conversation: Conversation,
    pub callback_token: Arc<Secret>,
    pub ui_token: Arc<Secret>,
    pub hosts: Arc<AllowedHosts>,
    pub callback_url: String,
    pub data_dir: PathBuf,
    /// The settings store (`GET /api/settings` lists what it could not use).
    pub settings: crate::settings::SettingsStore,
    pub assets: Option<Arc<dyn Assets>>,
    pub shutdown: Shutdown,
    /// The assistants (the routes every kind shares live in `api::assistant`; a kind's own
    /// come from the kind).
    pub link: Assistants,
    /// Test-only fault injection (`/api/test/faults`, 404 unless enabled).
    pub faults: Arc<Faults>,
    /// The optional tunnel (its routes live in [`crate::tunnel::api`]).
    pub tunnel: TunnelManager,
    /// The audio pipeline (its routes live in `api::audio`); `None`: the app cannot hear.
    pub ears: Option<Arc<dyn crate::audio::Ears>>,
    /// The speech model shelf (its routes live in `api::models`); `None`: `503
    /// models_unavailable`.
    pub models: Option<Arc<dyn crate::models::Models>>,
    /// The assistant's access to past calls (`/mcp`; its routes live in `api::mcp`).
    pub mcp: Arc<crate::mcp::Mcp>,
}

impl FromRef<Arc<ApiState>> for TunnelManager {
    fn from_ref(s: &Arc<ApiState>) -> TunnelManager {
        s.tunnel.clone()
    }
}

/// The control API: its state and the one router over it.
pub struct ControlApi {
    state: Arc<ApiState>,
    router: Router,
    openapi: Bytes,
}

impl std::ops::Deref for ControlApi {
    type Target = ApiState;
    fn deref(&self) -> &ApiState {
        &self.state
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "StageWhisper control API",
        description = "The UI listener's API (loopback only). Every `/api/*` route but this \
                       document needs `Authorization: Bearer <ui_token>`. Errors are \
                       `{\"ok\":false,\"error\":\"<code>\",\"message\":\"…\"}` with stable codes \
                       (docs/contract.md)."
    ),
    security(("ui_token" = []))
)]
struct ApiDoc;

/// The security scheme, and the answers every route can give (documented once here): `401`
/// without the token, `403` on a foreign `Host`, `503` when storage fails; and for routes with a
/// body, `400 invalid_json`, `408` and `413`.
struct CommonAnswers;

impl utoipa::Modify for CommonAnswers {
    fn modify(&self, doc: &mut utoipa::openapi::OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "ui_token",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        let error = |description: &str| {
            RefOr::T(
                ResponseBuilder::new()
                    .description(description)
                    .content(
                        "application/json",
                        ContentBuilder::new()
                            .schema(Some(Ref::from_schema_name("Error")))
                            .build(),
                    )
                    .build(),
            )
        };
        for item in doc.paths.paths.values_mut() {
            let ops = [
                &mut item.get,
                &mut item.put,
                &mut item.post,
                &mut item.delete,
                &mut item.patch,
            ];
            for op in ops.into_iter().flatten() {
                let has_body = op.request_body.is_some();
                let r = &mut op.responses.responses;
                r.entry("401".into())
                    .or_insert_with(|| error("`unauthorized`: missing or wrong UI token"));
                r.entry("403".into()).or_insert_with(|| {
                    error(
                        "`bad_host`: the Host header does not name this listener; `bad_origin`: \
                         the Origin header names another web page",
                    )
                });
                r.entry("503".into())
                    .or_insert_with(|| error("`storage_unavailable`, `shutting_down`"));
                if has_body {
                    r.entry("400".into()).or_insert_with(|| {
                        error("`invalid_json`, `missing_field`, `invalid_field`")
                    });
                    r.entry("408".into()).or_insert_with(|| {
                        error("`request_timeout`: the body did not arrive in time")
                    });
                    r.entry("413".into())
                        .or_insert_with(|| error("`payload_too_large`: over 256 KiB"));
                }
            }
        }
    }
}

/// The one route table, and the OpenAPI document generated from it (JSON).
fn route_table(state: Arc<ApiState>) -> (Router, Bytes) {
    let (router, mut doc) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(routes::routes())
        .merge(assistant::routes())
        .merge(calls::routes())
        .merge(crate::tunnel::api::routes())
        .merge(permissions::routes())
        .merge(state.link.control_routes().with_state(()))
        .merge(stop::routes())
        .merge(archive::routes())
        .merge(audio::routes())
        .merge(models::routes())
        .merge(detection::routes())
        .merge(mcp::routes())
        .merge(recording::routes())
        .merge(speakers::routes())
        .split_for_parts();
    utoipa::Modify::modify(&CommonAnswers, &mut doc);
    let openapi = Bytes::from(doc.to_json().expect("the OpenAPI document serializes"));
    let schema = openapi.clone();
    let router = router
        .route(
            OPENAPI_PATH,
            axum::routing::get(move || {
                let schema = schema.clone();
                async move { crate::answers::Reply(StatusCode::OK, schema) }
            }),
        )
        .route(crate::mcp::PATH, axum::routing::any(mcp::endpoint))
        .fallback(fallback)
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state);
    (router, openapi)
}

impl ControlApi {
    pub fn new(state: ApiState) -> ControlApi {
        let state = Arc::new(state);
        let (router, openapi) = route_table(state.clone());
        ControlApi {
            state,
            router,
            openapi,
        }
    }

    /// The router (for in-process callers; see [`ControlApi::call`]).
    pub fn router(&self) -> Router {
        self.router.clone()
    }

    /// The OpenAPI document (JSON), as served at `GET /api/openapi.json`.
    pub fn openapi_json(&self) -> &[u8] {
        &self.openapi
    }

    /// The HTTP listener's entry.
    pub async fn handle(self: Arc<Self>, req: hyper::Request<Incoming>) -> Response {
        let mut req = normalize(req.map(Body::new));
        // Only `call` may mark a request in-process (an HTTP request cannot carry it anyway).
        req.extensions_mut().remove::<InProcess>();
        match self.router.clone().oneshot(req).await {
            Ok(r) => r,
            Err(never) => match never {},
        }
    }

    /// One control API request made in-process (the window's IPC): the same router as HTTP,
    /// marked [`InProcess`] instead of the HTTP-only Host and token checks. Answers the status
    /// and the JSON body (`null` when there is none).
    pub async fn call(&self, req: axum::http::Request<Vec<u8>>) -> (StatusCode, Value) {
        let mut req = normalize(req.map(Body::from));
        req.extensions_mut().insert(InProcess);
        let resp = match self.router.clone().oneshot(req).await {
            Ok(r) => r,
            Err(never) => match never {},
        };
        let status = resp.status();
        let text = resp
            .headers()
            .get(header::CONTENT_TYPE)
            .is_some_and(|v| v.as_bytes().starts_with(b"text/"));
        let body = match resp.into_body().collect().await {
            // A text answer (an export as Markdown) comes as a JSON string.
            Ok(b) => {
                let b = b.to_bytes();
                serde_json::from_slice(&b).unwrap_or_else(|_| {
                    match (text, String::from_utf8(b.to_vec())) {
                        (true, Ok(s)) => Value::String(s),
                        _ => Value::Null,
                    }
                })
            }
            Err(_) => Value::Null,
        };
        (status, body)
    }

    /// [`ControlApi::call`] from its parts; `path` is the URL path (no query).
    pub async fn dispatch(&self, method: &Method, path: &str, body: &[u8]) -> (StatusCode, Value) {
        let Ok(req) = axum::http::Request::builder()
            .method(method.clone())
            .uri(path)
            .body(body.to_vec())
        else {
            let e = ApiError::not_found();
            return (e.status, e.body());
        };
        self.call(req).await
    }
}

fn is_api_path(path: &str) -> bool {
    path == "/api" || path.starts_with("/api/")
}

/// `/api/sessions/` is `/api/sessions` (and `//api/…` is `/api/…`), as routes never end in `/`.
pub(crate) fn normalize<B>(mut req: axum::http::Request<B>) -> axum::http::Request<B> {
    let path = req.uri().path();
    let trimmed = format!("/{}", path.trim_matches('/'));
    if trimmed == path || !is_api_path(&trimmed) {
        return req;
    }
    let pq = match req.uri().query() {
        Some(q) => format!("{trimmed}?{q}"),
        None => trimmed,
    };
    let mut parts = req.uri().clone().into_parts();
    if let Ok(pq) = pq.parse() {
        parts.path_and_query = Some(pq);
        if let Ok(uri) = Uri::from_parts(parts) {
            *req.uri_mut() = uri;
        }
    }
    req
}

/// In front of every route (see the module docs).
async fn guard(State(api): State<Arc<ApiState>>, req: Request, next: Next) -> Response {
    let in_process = req.extensions().get::<InProcess>().is_some();
    let path = req.uri().path().to_string();
    let is_api = is_api_path(&path);
    if !in_process {
        if let Err(refusal) = check_head(&api.hosts, &api.ui_token, &req) {
            return refused(refusal);
        }
        if is_api && path != OPENAPI_PATH {
            // The UI token was presented: a trusted connection (crate::conns).
            crate::conns::Connection::mark(&req);
        }
    }
    if !is_api {
        return next.run(req).await;
    }
    // Only POST/PUT/PATCH carry a body; it is read here, once, within the limits.
    let (parts, body) = req.into_parts();
    let bytes = if matches!(parts.method, Method::POST | Method::PUT | Method::PATCH) {
        match read_body(&parts, body).await {
            Ok(b) => b,
            Err(r) => return r,
        }
    } else {
        Bytes::new()
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

/// The answer to a request refused on its head.
fn refused(refusal: Refusal) -> Response {
    match refusal {
        Refusal::BadHost => ApiError::new(
            StatusCode::FORBIDDEN,
            "bad_host",
            "the Host header does not name this listener",
        )
        .into_response(),
        Refusal::BadOrigin => ApiError::new(
            StatusCode::FORBIDDEN,
            "bad_origin",
            "the request comes from a web page this listener did not serve",
        )
        .into_response(),
        Refusal::Unauthorized => {
            let mut r = ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "missing or wrong UI token",
            )
            .into_response();
            r.headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            r
        }
    }
}

/// Reads a request's body, within the size limit and the read timeout.
async fn read_body(parts: &Parts, body: Body) -> Result<Bytes, Response> {
    let read = if http::declared_too_large(&parts.headers, MAX_API_BODY) {
        Err(BodyError::TooLarge)
    } else {
        http::read_body(body, MAX_API_BODY).await
    };
    read.map_err(|e| {
        match e {
            BodyError::TooLarge => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload_too_large",
                format!("the body is larger than {} KiB", MAX_API_BODY / 1024),
            ),
            BodyError::Timeout => ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "request_timeout",
                "the body did not arrive in time",
            ),
            BodyError::Io(e) => ApiError::bad("bad_request", e),
        }
        .into_response()
    })
}

/// Why the guard refuses an HTTP request on its head alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// `403 bad_host`.
    BadHost,
    /// `403 bad_origin`: an `Origin` that names a page this listener did not serve.
    BadOrigin,
    /// `401 unauthorized`.
    Unauthorized,
}

/// The guard's HTTP-only checks on a request as routed (after [`normalize`]): the `Host` on every
/// path, then the UI token on `/api` routes but the schema.
pub(crate) fn check_head<B>(
    hosts: &AllowedHosts,
    ui_token: &Secret,
    req: &axum::http::Request<B>,
) -> Result<(), Refusal> {
    if !hosts.allows(req) {
        return Err(Refusal::BadHost);
    }
    // A browser names the page a request comes from; only this listener's own pages may use it
    // (defence in depth beside the token: a page elsewhere never has it either).
    let origin = req.headers().get(header::ORIGIN);
    if origin.is_some_and(|o| !o.to_str().is_ok_and(|o| hosts.allows_origin(o))) {
        return Err(Refusal::BadOrigin);
    }
    let path = req.uri().path();
    if is_api_path(path) && path != OPENAPI_PATH && !authorized(ui_token, req, path == EVENTS_PATH)
    {
        return Err(Refusal::Unauthorized);
    }
    Ok(())
}

fn authorized<B>(ui_token: &Secret, req: &axum::http::Request<B>, is_events: bool) -> bool {
    let header_token = bearer(
        req.headers()
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok()),
    );
    let query_token = is_events
        .then(|| query_param(req.uri().query().unwrap_or(""), "access_token"))
        .flatten();
    header_token
        .map(str::to_string)
        .or(query_token)
        .is_some_and(|t| ui_token.matches(&t))
}

/// No route matched: an unknown `/api` route (or anything in-process) is `404 not_found`, any
/// other path is a static file of the web UI.
async fn fallback(State(api): State<Arc<ApiState>>, req: Request) -> Response {
    let path = req.uri().path();
    if req.extensions().get::<InProcess>().is_some() || is_api_path(path) {
        return ApiError::not_found().into_response();
    }
    web::static_file(api.assets.as_deref(), req.method(), path, req.headers())
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{App, Config};
    use serde_json::json;

    async fn start() -> (tempfile::TempDir, App) {
        let tmp = tempfile::tempdir().unwrap();
        let app = App::start(Config::new(tmp.path().to_path_buf()))
            .await
            .unwrap();
        (tmp, app)
    }

    #[tokio::test]
    async fn the_openapi_document_describes_every_route_of_the_table() {
        let (_tmp, app) = start().await;
        let (s, doc) = app.api.dispatch(&Method::GET, OPENAPI_PATH, b"").await;
        assert_eq!(s, StatusCode::OK);
        assert_eq!(
            doc,
            serde_json::from_slice::<Value>(app.api.openapi_json()).unwrap()
        );
        let mut ops: Vec<String> = Vec::new();
        for (path, item) in doc["paths"].as_object().unwrap() {
            for (method, op) in item.as_object().unwrap() {
                ops.push(format!("{} {path}", method.to_uppercase()));
                for code in ["401", "403"] {
                    assert_eq!(
                        op["responses"][code]["content"]["application/json"]["schema"]["$ref"],
                        "#/components/schemas/Error",
                        "{method} {path} {code}"
                    );
                }
                if op.get("requestBody").is_some() {
                    assert!(op["responses"]["413"].is_object(), "{method} {path}");
                }
            }
        }
        ops.sort();
        let mut want = vec![
            "POST /api/calls",
            "POST /api/calls/{session_id}/end",
            "POST /api/sessions",
            "GET /api/sessions",
            "DELETE /api/sessions/{session_id}",
            "PATCH /api/sessions/{session_id}",
            "GET /api/sessions/{session_id}/messages",
            "POST /api/sessions/{session_id}/messages",
            "GET /api/sessions/{session_id}/insights",
            "GET /api/sessions/{session_id}/typing",
            "GET /api/settings",
            "POST /api/settings/callback-token/rotate",
            "GET /api/events",
            "GET /api/assistant",
            "PUT /api/assistant",
            "DELETE /api/assistant",
            "POST /api/assistant/check",
            "GET /api/providers",
            "GET /api/assistant/kinds",
            "POST /api/calls/{session_id}/transcript",
            "GET /api/calls/{session_id}/transcript",
            "POST /api/calls/{session_id}/summarise",
            "POST /api/sessions/{session_id}/messages/{id}/retry",
            "POST /api/sessions/{session_id}/stop",
            "GET /api/test/faults",
            "POST /api/test/faults",
            "GET /api/tunnel",
            "POST /api/tunnel",
            "DELETE /api/tunnel",
            "POST /api/tunnel/check",
            "DELETE /api/tunnel/authtoken",
            "POST /api/permissions/{request_id}",
            "POST /api/assistant/clawborrator/sessions",
            "GET /api/search",
            "GET /api/sessions/{session_id}/export",
            "POST /api/assistant/pairing",
            "POST /api/assistant/byo/probe",
            "POST /api/assistant/byo/test",
            "GET /api/audio/sources",
            "GET /api/audio",
            "PUT /api/audio",
            "POST /api/calls/{session_id}/listen",
            "DELETE /api/calls/{session_id}/listen",
            "POST /api/audio/test",
            "POST /api/audio/meters",
            "POST /api/audio/engine/check",
            "GET /api/models",
            "POST /api/models/{name}/download",
            "DELETE /api/models/{name}/download",
            "POST /api/models/import",
            "DELETE /api/models/{name}",
            "GET /api/audio/detection",
            "PUT /api/audio/detection",
            "POST /api/audio/detection/accept",
            "POST /api/audio/detection/dismiss",
            "GET /api/mcp",
            "PUT /api/mcp",
            "POST /api/mcp/token",
            "GET /api/mcp/activity",
            "PUT /api/calls/{session_id}",
            "GET /api/sessions/{session_id}/mcp-reads",
            "GET /api/calls/{session_id}/recording",
            "PUT /api/calls/{session_id}/recording",
            "POST /api/calls/{session_id}/transcribe",
            "PUT /api/calls/{session_id}/speakers/{label}",
            "GET /api/voiceprints",
            "DELETE /api/voiceprints/{id}",
        ];
        want.sort();
        assert_eq!(ops, want);
        assert!(doc["components"]["securitySchemes"]["ui_token"].is_object());
        app.shutdown().await;
    }

    /// `PATCH /api/sessions/{id}`: a new title (trimmed, blank: untitled), stored, in the
    /// `session_updated` event and in the list after a restart; the limits are stable codes.
    #[tokio::test]
    async fn a_session_is_renamed_and_the_name_survives_a_restart() {
        let tmp = tempfile::tempdir().unwrap();
        let app = App::start(Config::new(tmp.path().to_path_buf()))
            .await
            .unwrap();
        let api = &app.api;
        let (s, v) = api
            .dispatch(&Method::POST, "/api/calls", br#"{"title": "  Acme  "}"#)
            .await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        assert_eq!(v["session"]["title"], "Acme");
        let sid = v["session_id"].as_str().unwrap().to_string();
        let path = format!("/api/sessions/{sid}");
        let store = app.conversation.store().clone();
        let before = store.last_event_id().await.unwrap();
        let (s, v) = api
            .dispatch(&Method::PATCH, &path, br#"{"title": " Acme renewal "}"#)
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(v["title"], "Acme renewal");
        let logged = store.events_after(before, 10).await.unwrap();
        assert_eq!(logged.len(), 1, "one event");
        let data: Value = serde_json::from_str(&logged[0].1).unwrap();
        assert_eq!(data["type"], "session_updated");
        assert_eq!(data["session"]["title"], "Acme renewal");
        for (body, status, code) in [
            (
                format!(r#"{{"title": "{}"}}"#, "x".repeat(201)),
                400,
                "title_too_long",
            ),
            (r#"{"title": 5}"#.to_string(), 400, "invalid_field"),
            (r#"{"name": "x"}"#.to_string(), 400, "missing_field"),
            ("{}".to_string(), 400, "missing_field"),
        ] {
            let (s, v) = api.dispatch(&Method::PATCH, &path, body.as_bytes()).await;
            assert_eq!(
                (s.as_u16(), v["error"].as_str()),
                (status, Some(code)),
                "{body}: {v}"
            );
        }
        let (s, v) = api
            .dispatch(&Method::PATCH, "/api/sessions/nope", br#"{"title": "x"}"#)
            .await;
        assert_eq!(
            (s, v["error"].as_str()),
            (StatusCode::NOT_FOUND, Some("session_not_found"))
        );
        // A long title at the limit is fine; blank is untitled.
        let (s, _) = api
            .dispatch(
                &Method::PATCH,
                &path,
                format!(r#"{{"title": "{}"}}"#, "é".repeat(200)).as_bytes(),
            )
            .await;
        assert_eq!(s, StatusCode::OK);
        let (s, v) = api
            .dispatch(&Method::PATCH, &path, br#"{"title": "   "}"#)
            .await;
        assert_eq!((s, &v["title"]), (StatusCode::OK, &Value::Null));
        let (_, v) = api
            .dispatch(&Method::PATCH, &path, br#"{"title": "Acme renewal"}"#)
            .await;
        assert_eq!(v["title"], "Acme renewal");
        app.shutdown().await;

        let app = App::start(Config::new(tmp.path().to_path_buf()))
            .await
            .unwrap();
        let (_, list) = app.api.dispatch(&Method::GET, "/api/sessions", b"").await;
        let found = list
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["session_id"] == sid.as_str())
            .cloned()
            .unwrap();
        assert_eq!(found["title"], "Acme renewal");
        app.shutdown().await;
    }

    #[tokio::test]
    async fn in_process_requests_get_the_routers_rules() {
        let (_tmp, app) = start().await;
        let api = &app.api;
        let (s, v) = api.dispatch(&Method::POST, "/api/sessions/", b"").await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        let sid = v["session_id"].as_str().unwrap().to_string();
        for (method, path, body, status, code) in [
            (Method::GET, "/api/events", &b""[..], 404, "not_found"),
            (Method::GET, "/index.html", b"", 404, "not_found"),
            (Method::PUT, "/api/calls", b"", 405, "method_not_allowed"),
            (Method::POST, "/api/calls", b"[1]", 400, "invalid_json"),
            (
                Method::POST,
                "/api/calls",
                b"{\"title\": 5}",
                400,
                "invalid_field",
            ),
            (Method::PUT, "/api/assistant", b"{}", 400, "missing_field"),
            (
                Method::PUT,
                "/api/assistant",
                b"{\"base_url\": null}",
                400,
                "missing_field",
            ),
            (
                Method::PUT,
                "/api/assistant",
                b"{\"base_url\": \"http://127.0.0.1:9\", \"mode\": \"x\"}",
                400,
                "invalid_field",
            ),
            (
                Method::PUT,
                "/api/assistant",
                b"{\"base_url\": \"http://127.0.0.1:9\", \"kind\": 3}",
                400,
                "invalid_field",
            ),
            (Method::POST, "/api/test/faults", b"{", 404, "not_found"),
        ] {
            let (s, v) = api.dispatch(&method, path, body).await;
            assert_eq!(
                (s.as_u16(), v["error"].as_str()),
                (status, Some(code)),
                "{method} {path}: {v}"
            );
            assert_eq!(v["ok"], false, "{v}");
        }
        let big = serde_json::to_vec(&json!({"text": "x".repeat(MAX_API_BODY)})).unwrap();
        let path = format!("/api/sessions/{sid}/messages");
        let (s, v) = api.dispatch(&Method::POST, &path, &big).await;
        assert_eq!(
            (s.as_u16(), v["error"].as_str()),
            (413, Some("payload_too_large"))
        );
        // `kind` picks the assistant kind; an unknown one is refused with its code, the default
        // one takes its settings (the kind checks the rest).
        let (s, v) = api
            .dispatch(
                &Method::PUT,
                "/api/assistant",
                b"{\"base_url\": \"http://127.0.0.1:9\", \"relay_token\": \"0123456789abcdef0123\", \"kind\": \"relay\"}",
            )
            .await;
        assert_eq!(
            (s.as_u16(), v["error"].as_str()),
            (400, Some("unknown_kind")),
            "{v}"
        );
        let (s, v) = api
            .dispatch(
                &Method::PUT,
                "/api/assistant",
                b"{\"base_url\": \"http://127.0.0.1:9\", \"relay_token\": \"0123456789abcdef0123\", \"kind\": \"incoming\"}",
            )
            .await;
        assert_eq!(s, StatusCode::OK, "{v}");
        assert_eq!(
            (v["kind"].as_str(), &v["configured"]),
            (Some("incoming"), &json!(true)),
            "{v}"
        );
        app.shutdown().await;
    }
}
