//! The set of assistant kinds is open: a toy kind, registered here in the test only, converses
//! through the trait with no change to the conversation rules — switched to over the control
//! API, fed by the generic outbox (a failed first attempt retried under the same task id), its
//! reply submitted through the context like a callback. It also serves a route on the callback
//! listener, which gets the listener's Host check and body limit, and 404 while inactive; and
//! routes of its own on the control API (with the control API's guard, body rules and error
//! codes, and in its OpenAPI document), with no change to `api/`.

use bytes::Bytes;
use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use stagewhisper_core::answers::{ApiResult, ErrorDoc, JsonBody, Reply};
use stagewhisper_core::assistants::kinds::incoming::LinkSettings;
use stagewhisper_core::assistants::kinds::{ExtraKind, FieldInput, KindInfo, SettingField};
use stagewhisper_core::assistants::{
    AssistantContext, AssistantKind, Attempt, BoxFuture, CallbackRouter, KindError, KindRoutes,
    Outgoing,
};
use stagewhisper_core::http::{self as swhttp, Resp};
use stagewhisper_core::protocol::{Callback, Status};
use stagewhisper_core::{App, Config};
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WAIT: Duration = Duration::from_secs(10);
const TOY_KEY: &str = "toy-key-0123456789";

/// What the list of kinds says about the toy: its name, its one settings field.
const TOY_INFO: KindInfo = KindInfo {
    settings: &[SettingField {
        required: true,
        hint: "What the toy is called.",
        ..SettingField::new("name", "Toy name", FieldInput::Text)
    }],
    ..KindInfo::new("toy", "Toy assistant", "A toy kind, registered by a test.")
};

/// What the toy kind saw: every attempt, in order.
type Seen = Arc<Mutex<Vec<Outgoing>>>;

struct Toy {
    ctx: Arc<AssistantContext>,
    settings: Mutex<Option<Value>>,
    seen: Seen,
    /// Names given through the toy's own control route.
    renames: Arc<Mutex<Vec<String>>>,
    /// Attempts to refuse (retry after) before accepting, per task id.
    refuse_first: usize,
}

impl Toy {
    fn status_word(&self) -> &'static str {
        if self.settings.lock().unwrap().is_some() {
            "online"
        } else {
            "not_configured"
        }
    }
}

impl AssistantKind for Toy {
    fn kind(&self) -> &'static str {
        "toy"
    }

    fn configure<'a>(&'a self, settings: &'a Value) -> BoxFuture<'a, Result<(), KindError>> {
        Box::pin(async move {
            let Some(name) = settings["name"].as_str() else {
                return Err(KindError::bad("missing_field", "`name` is required"));
            };
            let saved = json!({"name": name, "secret": TOY_KEY});
            self.ctx.save_settings("toy", &saved)?;
            *self.settings.lock().unwrap() = Some(saved);
            Ok(())
        })
    }

    fn status(&self) -> Value {
        let s = self.settings.lock().unwrap().clone();
        json!({
            "status": self.status_word(),
            "detail": if s.is_some() { "The toy is listening." } else { "Name the toy." },
            "toy_name": s.as_ref().map(|s| s["name"].clone()),
        })
    }

    fn is_configured(&self) -> bool {
        self.settings.lock().unwrap().is_some()
    }

    fn remove(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.ctx.remove_settings("toy");
            *self.settings.lock().unwrap() = None;
        })
    }

    fn check(&self) -> BoxFuture<'_, ()> {
        Box::pin(async {})
    }

    fn deliver<'a>(&'a self, entry: &'a Outgoing) -> BoxFuture<'a, Attempt> {
        Box::pin(async move {
            let attempts = {
                let mut seen = self.seen.lock().unwrap();
                seen.push(entry.clone());
                seen.iter()
                    .filter(|e| e.task_id() == entry.task_id())
                    .count()
            };
            if attempts <= self.refuse_first {
                return Attempt::RetryAfter {
                    code: "toy_busy",
                    message: "The toy is busy.".into(),
                    after: Some(Duration::from_millis(20)),
                };
            }
            if let Outgoing::UserMessage {
                task_id,
                session_id,
                text,
                user_message_id,
                ..
            } = entry
            {
                // The reply goes in through the one entry point, like a callback would.
                let ctx = self.ctx.clone();
                let cb = Callback {
                    task_id: task_id.clone(),
                    session_id: session_id.clone(),
                    status: Status::Message,
                    message_id: Some(format!("toy-{task_id}")),
                    user_message_id: user_message_id.clone(),
                    reply_text: Some(format!("toy says: {text}")),
                    label: None,
                    error_code: None,
                    error_message: None,
                    occurred_at: None,
                    chunk: None,
                };
                tokio::spawn(async move {
                    ctx.submit(cb).await.expect("reply stored");
                });
            }
            Attempt::Delivered("accepted")
        })
    }

    fn callback_routes(&self) -> Option<CallbackRouter> {
        Some(axum::Router::new().route("/api/v1/toy/{*rest}", axum::routing::any(toy_echo)))
    }

    fn control_routes(&self) -> Option<KindRoutes> {
        Some(
            utoipa_axum::router::OpenApiRouter::new()
                .routes(utoipa_axum::routes!(toy_rename))
                .with_state(ToyApi {
                    ctx: self.ctx.clone(),
                    renames: self.renames.clone(),
                }),
        )
    }
}

/// What the toy's control route reaches (its router's own state).
#[derive(Clone)]
struct ToyApi {
    ctx: Arc<AssistantContext>,
    renames: Arc<Mutex<Vec<String>>>,
}

/// `POST /api/assistant/toy/rename` `{name}`.
#[derive(serde::Deserialize, utoipa::ToSchema)]
struct ToyRename {
    /// The toy's new name.
    name: String,
}

/// Renames the toy (a toy kind's own control route, declared in this test only).
#[utoipa::path(post, path = "/api/assistant/toy/rename", tag = "assistant",
    request_body = ToyRename,
    responses((status = 200, body = Object), (status = 400, body = ErrorDoc)))]
async fn toy_rename(
    axum::extract::State(toy): axum::extract::State<ToyApi>,
    JsonBody(b): JsonBody<ToyRename>,
) -> ApiResult {
    if b.name.trim().is_empty() {
        return Err(KindError::bad("toy_nameless", "a toy needs a name").into());
    }
    toy.renames.lock().unwrap().push(b.name.clone());
    toy.ctx
        .save_settings("toy", &json!({"name": b.name, "secret": TOY_KEY}))?;
    Ok(Reply::ok(json!({"renamed": b.name})))
}

/// The toy's route on the callback listener: its own key, then the path and the body's length.
async fn toy_echo(uri: hyper::Uri, headers: hyper::HeaderMap, body: Bytes) -> Resp {
    // The kind's own authentication (not the callback token).
    let key = headers.get("x-toy-key").and_then(|v| v.to_str().ok());
    if key != Some(TOY_KEY) {
        return swhttp::error(StatusCode::UNAUTHORIZED, "toy_unauthorized", "no key");
    }
    swhttp::json_response(
        StatusCode::OK,
        &json!({"path": uri.path(), "len": body.len()}),
    )
}

fn fast_link() -> LinkSettings {
    LinkSettings {
        connect_timeout: Duration::from_secs(1),
        request_timeout: Duration::from_secs(2),
        backoff_initial: Duration::from_millis(50),
        backoff_max: Duration::from_millis(300),
        probe_interval: Duration::from_secs(1),
        probe_retry: Duration::from_millis(100),
        events_idle: Duration::from_secs(60),
        min_session_gap: Duration::from_millis(10),
    }
}

async fn start_app(dir: &Path, seen: Seen, refuse_first: usize) -> App {
    let mut c = Config::new(dir.to_path_buf());
    c.link = fast_link();
    // The toy's line in the list of kinds, registered from this test alone.
    c.extra_kinds.push(ExtraKind {
        info: TOY_INFO,
        start: Box::new(move |ctx: Arc<AssistantContext>| {
            let saved = ctx.load_settings("toy");
            Arc::new(Toy {
                ctx,
                settings: Mutex::new(saved),
                seen,
                renames: Arc::default(),
                refuse_first,
            }) as Arc<dyn AssistantKind>
        }),
    });
    App::start(c).await.expect("app starts")
}

async fn api(app: &App, method: Method, path: &str, body: Value) -> (StatusCode, Value) {
    let b = if body.is_null() {
        Vec::new()
    } else {
        serde_json::to_vec(&body).unwrap()
    };
    app.api.dispatch(&method, path, &b).await
}

async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn tmp() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("sw-kinds-test-")
        .tempdir()
        .unwrap()
}

/// One raw HTTP/1.1 exchange with the callback listener (to control the Host header).
async fn raw(app: &App, host: &str, head: &str, body: &[u8]) -> (u16, Value) {
    raw_to(&app.callback_url, host, head, body).await
}

/// One raw HTTP/1.1 exchange with the listener at `url`.
async fn raw_to(url: &str, host: &str, head: &str, body: &[u8]) -> (u16, Value) {
    let addr = url.trim_start_matches("http://");
    let addr = addr.split('/').next().unwrap_or(addr).to_string();
    let s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (mut rd, mut wr) = s.into_split();
    let mut req = format!("{head}\r\nHost: {host}\r\nConnection: close\r\n\r\n").into_bytes();
    req.extend_from_slice(body);
    // Written concurrently: the listener may answer (and close) before the whole body is read.
    let writer = tokio::spawn(async move {
        let _ = wr.write_all(&req).await;
        wr
    });
    let mut out = Vec::new();
    let _ = tokio::time::timeout(WAIT, rd.read_to_end(&mut out)).await;
    writer.abort();
    let text = String::from_utf8_lossy(&out).to_string();
    let status: u16 = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let json = text
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (status, json)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_kind_converses_through_the_trait_with_no_change_to_the_rules() {
    let dir = tmp();
    let seen: Seen = Arc::default();
    let app = start_app(dir.path(), seen.clone(), 1).await;

    // Today's default: incoming, and absent `kind` still means incoming.
    let (s, v) = api(&app, Method::GET, "/api/assistant", Value::Null).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["kind"], "incoming");
    assert_eq!(v["status"], "not_configured");
    let (s, v) = api(&app, Method::GET, "/api/providers", Value::Null).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["active_kind"], "incoming");
    let toy = v["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["id"] == "toy")
        .cloned();
    assert_eq!(toy.unwrap()["available"], true, "{v}");

    // Save incoming settings first: switching away and back keeps them.
    let (s, v) = api(
        &app,
        Method::PUT,
        "/api/assistant",
        json!({"base_url": "http://127.0.0.1:9", "relay_token": "r".repeat(32)}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["kind"], "incoming");

    // The toy validates its own settings.
    let (s, v) = api(&app, Method::PUT, "/api/assistant", json!({"kind": "toy"})).await;
    assert_eq!(s, StatusCode::BAD_REQUEST);
    assert_eq!(v["error"], "missing_field");
    let (s, v) = api(
        &app,
        Method::PUT,
        "/api/assistant",
        json!({"kind": "toy", "name": "Tom"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["kind"], "toy");
    assert_eq!(v["status"], "online");
    assert_eq!(v["toy_name"], "Tom");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("settings.json"))
            .unwrap()
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
    }

    // A user message goes through the generic outbox to the toy, which replies.
    let (s, v) = api(&app, Method::POST, "/api/sessions", json!({})).await;
    assert_eq!(s, StatusCode::CREATED);
    let session = v["session_id"].as_str().unwrap().to_string();
    let (s, m) = api(
        &app,
        Method::POST,
        &format!("/api/sessions/{session}/messages"),
        json!({"text": "hello"}),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{m}");
    let messages = eventually("the toy's reply", || async {
        let (_, v) = api(
            &app,
            Method::GET,
            &format!("/api/sessions/{session}/messages"),
            Value::Null,
        )
        .await;
        let list = v.as_array().cloned().unwrap_or_default();
        list.iter()
            .any(|m| m["kind"] == "assistant" && m["text"] == "toy says: hello")
            .then_some(list)
    })
    .await;
    let user = messages.iter().find(|m| m["kind"] == "user").unwrap();
    assert_eq!(user["delivery"], "sent", "{user}");
    let attempts = seen.lock().unwrap().clone();
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    // The refused first attempt and the retry carry the same, recorded task id.
    assert_eq!(attempts[0], attempts[1]);
    assert_eq!(
        attempts[0].task_id(),
        user["task_id"].as_str().unwrap(),
        "the task id recorded on the message"
    );
    match &attempts[0] {
        Outgoing::UserMessage {
            session_id, text, ..
        } => {
            assert_eq!(session_id, &session);
            assert_eq!(text, "hello");
        }
        other => panic!("{other:?}"),
    }

    // A call: its prelude, then each final transcript turn, then "the call ended", in order.
    let (s, v) = api(&app, Method::POST, "/api/calls", json!({"title": "Acme"})).await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let call = v["session_id"].as_str().unwrap().to_string();
    let (s, v) = api(
        &app,
        Method::POST,
        &format!("/api/calls/{call}/transcript"),
        json!({"speaker": "Ana", "text": "We need it by Friday."}),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    let (s, v) = api(
        &app,
        Method::POST,
        &format!("/api/calls/{call}/end"),
        json!({}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let call_entries = eventually("the call's entries", || async {
        let seen = seen.lock().unwrap().clone();
        let mine: Vec<Outgoing> = seen
            .into_iter()
            .filter(|e| e.session_id() == format!("insights:{call}"))
            .collect();
        let ended = mine
            .iter()
            .filter(|e| matches!(e, Outgoing::CallEnded { .. }))
            .count();
        (ended == 2).then_some(mine)
    })
    .await;
    let order: Vec<&str> = call_entries
        .iter()
        .map(|e| match e {
            Outgoing::Prelude { title, .. } => {
                assert_eq!(title.as_deref(), Some("Acme"));
                "prelude"
            }
            Outgoing::TranscriptTurn { speaker, text, .. } => {
                assert_eq!(
                    (speaker.as_deref(), text.as_str()),
                    (Some("Ana"), "We need it by Friday.")
                );
                "turn"
            }
            Outgoing::CallEnded { .. } => "ended",
            Outgoing::UserMessage { .. } => "user",
        })
        .collect();
    // Each first attempt is refused once and retried under the same task id.
    assert_eq!(
        order,
        ["prelude", "prelude", "turn", "turn", "ended", "ended"],
        "{call_entries:?}"
    );
    for pair in call_entries.chunks(2) {
        assert_eq!(pair[0], pair[1]);
    }

    // Back to incoming with only `kind`: its saved settings are still there; so are the toy's.
    let (s, v) = api(
        &app,
        Method::PUT,
        "/api/assistant",
        json!({"kind": "incoming"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["kind"], "incoming");
    assert_eq!(v["base_url"], "http://127.0.0.1:9");
    let (s, v) = api(&app, Method::PUT, "/api/assistant", json!({"kind": "toy"})).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["toy_name"], "Tom");

    // Unknown and not-yet-available kinds are refused with stable codes.
    let (s, v) = api(
        &app,
        Method::PUT,
        "/api/assistant",
        json!({"kind": "carrier-pigeon"}),
    )
    .await;
    assert_eq!(
        (s, v["error"].clone()),
        (StatusCode::BAD_REQUEST, json!("unknown_kind"))
    );
    let (s, v) = api(
        &app,
        Method::PUT,
        "/api/assistant",
        json!({"kind": "byo", "url": "x"}),
    )
    .await;
    assert_eq!(
        (s, v["error"].clone()),
        (StatusCode::BAD_REQUEST, json!("unknown_field"))
    );
    let (_, v) = api(&app, Method::GET, "/api/assistant", Value::Null).await;
    assert_eq!(v["kind"], "toy", "a refused switch changes nothing");

    // The active kind and its settings survive a restart.
    app.shutdown().await;
    let app = start_app(dir.path(), Arc::default(), 0).await;
    let (_, v) = api(&app, Method::GET, "/api/assistant", Value::Null).await;
    assert_eq!(v["kind"], "toy");
    assert_eq!(v["toy_name"], "Tom");
    let (_, v) = api(&app, Method::DELETE, "/api/assistant", Value::Null).await;
    assert_eq!(v["kind"], "toy");
    assert_eq!(v["status"], "not_configured");
    let doc: Value =
        serde_json::from_slice(&std::fs::read(dir.path().join("settings.json")).unwrap()).unwrap();
    assert_eq!(
        doc["sections"]["assistants"]["value"]["kinds"].get("toy"),
        None,
        "{doc}"
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kinds_routes_get_the_listeners_host_check_and_limits_and_404_while_inactive() {
    let dir = tmp();
    let app = start_app(dir.path(), Arc::default(), 0).await;
    let host = app.callback_url.trim_start_matches("http://").to_string();
    let echo = "POST /api/v1/toy/echo HTTP/1.1\r\nContent-Type: text/plain";

    // Not active: the route does not exist.
    let head = format!("{echo}\r\nX-Toy-Key: {TOY_KEY}\r\nContent-Length: 2");
    let (s, v) = raw(&app, &host, &head, b"hi").await;
    assert_eq!((s, v["error"].clone()), (404, json!("not_found")), "{v}");

    let (s, v) = api(
        &app,
        Method::PUT,
        "/api/assistant",
        json!({"kind": "toy", "name": "Tom"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");

    // Active: served, with the kind's own auth and no callback bearer token.
    let (s, v) = raw(&app, &host, &head, b"hi").await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v, json!({"path": "/api/v1/toy/echo", "len": 2}));
    let (s, v) = raw(&app, &host, &format!("{echo}\r\nContent-Length: 2"), b"hi").await;
    assert_eq!((s, v["error"].clone()), (401, json!("toy_unauthorized")));

    // The listener's Host check applies first.
    let (s, v) = raw(&app, "evil.example:80", &head, b"hi").await;
    assert_eq!((s, v["error"].clone()), (403, json!("bad_host")), "{v}");

    // The body limit applies: declared, and actually sent (chunked).
    let big = 1024 * 1024 + 1;
    let declared = format!("{echo}\r\nX-Toy-Key: {TOY_KEY}\r\nContent-Length: {big}");
    let (s, v) = raw(&app, &host, &declared, b"").await;
    assert_eq!(
        (s, v["error"].clone()),
        (413, json!("payload_too_large")),
        "{v}"
    );
    let chunked = format!("{echo}\r\nX-Toy-Key: {TOY_KEY}\r\nTransfer-Encoding: chunked");
    let mut body = format!("{big:x}\r\n").into_bytes();
    body.extend(std::iter::repeat_n(b'a', big));
    body.extend_from_slice(b"\r\n0\r\n\r\n");
    let (s, v) = raw(&app, &host, &chunked, &body).await;
    assert_eq!(
        (s, v["error"].clone()),
        (413, json!("payload_too_large")),
        "{v}"
    );

    // Other paths are untouched: /tasks/{id} still wants the callback token; the rest is 404.
    let (s, v) = raw(
        &app,
        &host,
        "POST /tasks/t1 HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 2",
        b"{}",
    )
    .await;
    assert_eq!((s, v["error"].clone()), (401, json!("unauthorized")));
    let (s, _) = raw(&app, &host, "GET /api/v1/other HTTP/1.1", b"").await;
    assert_eq!(s, 404);

    // Switched away: 404 again.
    let (s, _) = api(&app, Method::PUT, "/api/assistant", json!({"kind": "incoming", "base_url": "http://127.0.0.1:9", "relay_token": "r".repeat(32)})).await;
    assert_eq!(s, StatusCode::OK);
    let (s, _) = raw(&app, &host, &head, b"hi").await;
    assert_eq!(s, 404);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_adds_its_own_control_routes_in_the_tests_alone() {
    let dir = tmp();
    let app = start_app(dir.path(), Arc::default(), 0).await;
    let rename = "/api/assistant/toy/rename";

    // Served whether the kind is active or not (like the built-in kinds' own routes), with the
    // control API's body rules and codes, and the kind's own refusals as answers.
    let (s, v) = api(&app, Method::POST, rename, json!({"name": "Tim"})).await;
    assert_eq!((s, v.clone()), (StatusCode::OK, json!({"renamed": "Tim"})));
    let (s, v) = api(&app, Method::POST, rename, json!({})).await;
    assert_eq!(
        (s, v["error"].clone()),
        (StatusCode::BAD_REQUEST, json!("missing_field")),
        "{v}"
    );
    let (s, v) = api(&app, Method::POST, rename, json!({"name": 7})).await;
    assert_eq!(
        (s, v["error"].clone()),
        (StatusCode::BAD_REQUEST, json!("invalid_field")),
        "{v}"
    );
    let (s, v) = api(&app, Method::POST, rename, json!({"name": " "})).await;
    assert_eq!(
        (s, v["error"].clone()),
        (StatusCode::BAD_REQUEST, json!("toy_nameless")),
        "{v}"
    );
    let (s, v) = api(&app, Method::GET, rename, Value::Null).await;
    assert_eq!(
        (s, v["error"].clone()),
        (StatusCode::METHOD_NOT_ALLOWED, json!("method_not_allowed")),
        "{v}"
    );

    // Over HTTP the control API's guard comes first: no UI token, no route.
    let host = app.ui_url.trim_start_matches("http://");
    let host = host.split('/').next().unwrap_or(host).to_string();
    let body = br#"{"name":"Eve"}"#;
    let head = format!("POST {rename} HTTP/1.1\r\nContent-Length: {}", body.len());
    let (s, v) = raw_to(&app.ui_url, &host, &head, body).await;
    assert_eq!((s, v["error"].clone()), (401, json!("unauthorized")), "{v}");
    let authed = format!("{head}\r\nAuthorization: Bearer {}", app.ui_token.get());
    let (s, v) = raw_to(&app.ui_url, "evil.example:80", &authed, body).await;
    assert_eq!((s, v["error"].clone()), (403, json!("bad_host")), "{v}");
    let (s, v) = raw_to(&app.ui_url, &host, &authed, body).await;
    assert_eq!((s, v), (200, json!({"renamed": "Eve"})));

    // Its settings: the route saved them through the kind's context, and switching to the kind
    // reads them like any other kind's.
    let (s, v) = api(
        &app,
        Method::PUT,
        "/api/assistant",
        json!({"kind": "toy", "name": "Eve"}),
    )
    .await;
    assert_eq!(
        (s, v["kind"].clone(), v["toy_name"].clone()),
        (StatusCode::OK, json!("toy"), json!("Eve")),
        "{v}"
    );

    // And it is in the OpenAPI document, beside the built-in kinds' routes.
    let doc: Value = serde_json::from_slice(app.api.openapi_json()).unwrap();
    let op = &doc["paths"][rename]["post"];
    assert_eq!(
        op["summary"],
        "Renames the toy (a toy kind's own control route, declared in this test only).",
        "{op}"
    );
    assert!(doc["paths"]["/api/assistant/pairing"]["post"].is_object());
    assert!(doc["paths"]["/api/assistant/clawborrator/sessions"]["post"].is_object());
}

/// The one list of kinds, as `GET /api/assistant/kinds` serves it: the built-in kinds in their
/// order with their names, settings fields and capabilities, then the toy this test registered
/// (with its own entry, no change to the app), and `/api/providers` describes the same kinds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_list_of_kinds_is_served_with_a_test_kind_registered_from_the_test() {
    let dir = tmp();
    let app = start_app(dir.path(), Arc::default(), 0).await;
    let (s, v) = api(&app, Method::GET, "/api/assistant/kinds", Value::Null).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["active_kind"], "incoming");
    let kinds = v["kinds"].as_array().unwrap();
    let ids: Vec<&str> = kinds.iter().map(|k| k["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        ["incoming", "byo", "openclaw-gateway", "clawborrator", "toy"]
    );
    let by_id = |id: &str| kinds.iter().find(|k| k["id"] == id).unwrap().clone();
    assert_eq!(by_id("incoming")["name"], "Direct relay");
    let fields = |id: &str| -> Vec<String> {
        by_id(id)["settings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| f["name"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        fields("incoming"),
        ["base_url", "relay_token", "mode", "prelude"]
    );
    assert_eq!(by_id("incoming")["settings"][1]["input"], "secret");
    assert_eq!(
        by_id("incoming")["settings"][2]["choices"],
        json!(["auto", "callback", "events"])
    );
    assert!(fields("byo").is_empty(), "BYO pairs by a code");
    assert_eq!(fields("openclaw-gateway"), ["url", "token", "session_key"]);
    assert_eq!(by_id("openclaw-gateway")["can_stop"], true);
    assert_eq!(by_id("clawborrator")["can_stop"], false);
    let toy = by_id("toy");
    assert_eq!(toy["name"], "Toy assistant");
    assert_eq!(toy["available"], true);
    assert_eq!(toy["settings"][0]["name"], "name");
    assert_eq!(toy["settings"][0]["required"], true);

    // The provider registry describes the same kinds, from the same list.
    let (_, p) = api(&app, Method::GET, "/api/providers", Value::Null).await;
    let names: Vec<(Value, Value)> = p["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| (k["id"].clone(), k["name"].clone()))
        .collect();
    let listed: Vec<(Value, Value)> = kinds
        .iter()
        .map(|k| (k["id"].clone(), k["name"].clone()))
        .collect();
    assert_eq!(names, listed);

    // Switching to the toy by its settings field; the list then names it active.
    let (s, v) = api(
        &app,
        Method::PUT,
        "/api/assistant",
        json!({"kind": "toy", "name": "Tiny"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let (_, v) = api(&app, Method::GET, "/api/assistant/kinds", Value::Null).await;
    assert_eq!(v["active_kind"], "toy");
    app.shutdown().await;
}
