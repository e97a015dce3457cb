//! The assistant link over real loopback HTTP: the app (in-process, real listeners, real SQLite)
//! against a small scripted assistant that answers `/v1/health`, `/v1/ping`, `/v1/incoming` and
//! `/v1/events` the way the real peers do — including the error cases: 401, 400
//! validation_failed, 429, 5xx then OK, connection refused, 202 in_flight, 200 duplicate.

use bytes::Bytes;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Frame;
use hyper::{Method, Request, Response, StatusCode};
use serde_json::{json, Value};
use stagewhisper_core::assistants::kinds::incoming::client::{self, Call, Endpoint, Timeouts};
use stagewhisper_core::assistants::kinds::incoming::LinkSettings;
use stagewhisper_core::http::{self as swhttp, serve, Resp, Shutdown};
use stagewhisper_core::transcript::replay::{replay, ReplayError, ReplayOptions};
use stagewhisper_core::{App, Config};
use std::future::Future;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;

const TOKEN: &str = "relay-token-0123456789abcdef0123456789";
const WAIT: Duration = Duration::from_secs(10);

// ------------------------------------------------------------------------------------------
// A scripted assistant
// ------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct Req {
    method: String,
    path: String,
    auth: Option<String>,
    /// `Last-Event-ID` of a `/v1/events` request.
    last_event_id: Option<String>,
    body: Value,
    at: Instant,
}

/// What to answer to one `POST /v1/incoming` (by how many came before).
type Script = dyn Fn(&Req, usize) -> (u16, Value, Vec<(&'static str, String)>) + Send + Sync;

struct Fake {
    addr: std::net::SocketAddr,
    reqs: Arc<Mutex<Vec<Req>>>,
    script: Arc<Mutex<Arc<Script>>>,
    /// Durable SSE events per session: (id, body).
    backlog: Arc<Mutex<Vec<(String, String, Value)>>>,
    shutdown: Shutdown,
}

fn accept_all() -> Arc<Script> {
    Arc::new(|r: &Req, _| {
        (
            202,
            json!({"status": "accepted", "task_id": r.body["task_id"]}),
            vec![],
        )
    })
}

impl Fake {
    async fn start(events: bool) -> Fake {
        Fake::start_on(TcpListener::bind("127.0.0.1:0").await.unwrap(), events).await
    }

    async fn start_on(listener: TcpListener, events: bool) -> Fake {
        let addr = listener.local_addr().unwrap();
        let reqs: Arc<Mutex<Vec<Req>>> = Arc::default();
        let script = Arc::new(Mutex::new(accept_all()));
        let backlog: Arc<Mutex<Vec<(String, String, Value)>>> = Arc::default();
        let shutdown = Shutdown::new();
        let (r2, s2, b2, sd) = (
            reqs.clone(),
            script.clone(),
            backlog.clone(),
            shutdown.clone(),
        );
        tokio::spawn(serve(
            listener,
            move |req: Request<hyper::body::Incoming>| {
                let (reqs, script, backlog, sd) = (r2.clone(), s2.clone(), b2.clone(), sd.clone());
                async move { handle(req, reqs, script, backlog, events, sd).await }
            },
            shutdown.clone(),
            Duration::from_millis(200),
        ));
        Fake {
            addr,
            reqs,
            script,
            backlog,
            shutdown,
        }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn set(&self, s: Arc<Script>) {
        *self.script.lock().unwrap() = s;
    }

    fn incoming(&self) -> Vec<Req> {
        self.reqs
            .lock()
            .unwrap()
            .iter()
            .filter(|r| r.path == "/v1/incoming")
            .cloned()
            .collect()
    }

    fn all(&self) -> Vec<Req> {
        self.reqs.lock().unwrap().clone()
    }

    fn push_event(&self, session: &str, id: &str, body: Value) {
        self.backlog
            .lock()
            .unwrap()
            .push((session.into(), id.into(), body));
    }

    fn stop(&self) {
        self.shutdown.trigger();
    }
}

async fn handle(
    req: Request<hyper::body::Incoming>,
    reqs: Arc<Mutex<Vec<Req>>>,
    script: Arc<Mutex<Arc<Script>>>,
    backlog: Arc<Mutex<Vec<(String, String, Value)>>>,
    events: bool,
    shutdown: Shutdown,
) -> Resp {
    let h = |n: &str| {
        req.headers()
            .get(n)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    let auth = h("authorization");
    let last_event_id = h("last-event-id");
    let method = req.method().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let body = swhttp::read_body(req.into_body(), 1 << 20)
        .await
        .unwrap_or_default();
    let r = Req {
        method,
        path: path.clone(),
        auth: auth.clone(),
        last_event_id: last_event_id.clone(),
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        at: Instant::now(),
    };
    let n_before = reqs
        .lock()
        .unwrap()
        .iter()
        .filter(|q| q.path == "/v1/incoming")
        .count();
    reqs.lock().unwrap().push(r.clone());
    let authed = auth.as_deref() == Some(&format!("Bearer {TOKEN}"));
    let json = |s: u16, v: Value| swhttp::json_response(StatusCode::from_u16(s).unwrap(), &v);
    match path.as_str() {
        "/v1/health" => json(200, json!({"ok": true, "version": "9.9.9-fake"})),
        "/v1/ping" if !authed => json(401, json!({"error": "bad_bearer"})),
        "/v1/ping" => json(200, json!({"ok": true})),
        "/v1/incoming" if !authed => json(401, json!({"error": "bad_bearer"})),
        "/v1/incoming" => {
            let s = script.lock().unwrap().clone();
            let (status, v, headers) = s(&r, n_before);
            let mut resp = json(status, v);
            for (k, val) in headers {
                resp.headers_mut().insert(k, val.parse().unwrap());
            }
            resp
        }
        "/v1/events" if !events => json(404, json!({"error": "not_found"})),
        "/v1/events" if !authed => json(401, json!({"error": "bad_bearer"})),
        "/v1/events" => {
            let session = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("session_id="))
                .map(|s| s.replace("%3A", ":"))
                .unwrap_or_default();
            let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(64);
            tokio::spawn(async move {
                let mut sent = 0usize;
                // Replay after Last-Event-ID (an unknown id replays everything).
                {
                    let b = backlog.lock().unwrap();
                    let mine: Vec<_> = b.iter().filter(|(s, _, _)| *s == session).collect();
                    if let Some(last) = &last_event_id {
                        if let Some(i) = mine.iter().position(|(_, id, _)| id == last) {
                            sent = i + 1;
                        }
                    }
                }
                if tx.send(Bytes::from(": open\n\n")).await.is_err() {
                    return;
                }
                loop {
                    let next: Vec<(String, Value)> = {
                        let b = backlog.lock().unwrap();
                        b.iter()
                            .filter(|(s, _, _)| *s == session)
                            .skip(sent)
                            .map(|(_, id, v)| (id.clone(), v.clone()))
                            .collect()
                    };
                    for (id, v) in next {
                        sent += 1;
                        let frame = format!("id: {id}\ndata: {v}\n\n");
                        if tx.send(Bytes::from(frame)).await.is_err() {
                            return;
                        }
                    }
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_millis(20)) => {},
                        _ = shutdown.wait() => return,
                        _ = tx.closed() => return,
                    }
                }
            });
            let stream = futures_util::stream::unfold(rx, |mut rx| async move {
                rx.recv()
                    .await
                    .map(|b| (Ok::<_, std::io::Error>(Frame::data(b)), rx))
            });
            let mut resp = Response::new(StreamBody::new(stream).boxed());
            resp.headers_mut()
                .insert("content-type", "text/event-stream".parse().unwrap());
            resp
        }
        _ => json(404, json!({"error": "not_found"})),
    }
}

// ------------------------------------------------------------------------------------------
// The app, in-process
// ------------------------------------------------------------------------------------------

fn fast_link() -> LinkSettings {
    LinkSettings {
        connect_timeout: Duration::from_secs(2),
        request_timeout: Duration::from_secs(3),
        backoff_initial: Duration::from_millis(50),
        backoff_max: Duration::from_millis(300),
        probe_interval: Duration::from_secs(1),
        probe_retry: Duration::from_millis(100),
        events_idle: Duration::from_secs(60),
        min_session_gap: Duration::from_millis(100),
    }
}

async fn start_app(dir: &Path) -> App {
    let mut c = Config::new(dir.to_path_buf());
    c.link = fast_link();
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

async fn configure(app: &App, base_url: &str, extra: Value) -> Value {
    let mut b = json!({"base_url": base_url, "relay_token": TOKEN});
    if let Value::Object(m) = extra {
        for (k, v) in m {
            b[k] = v;
        }
    }
    let (s, v) = api(app, Method::PUT, "/api/assistant", b).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v
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

async fn new_chat(app: &App) -> String {
    let (s, v) = api(app, Method::POST, "/api/sessions", json!({})).await;
    assert_eq!(s, StatusCode::CREATED);
    v["session_id"].as_str().unwrap().to_string()
}

async fn new_call(app: &App, title: &str) -> String {
    let (s, v) = api(app, Method::POST, "/api/calls", json!({"title": title})).await;
    assert_eq!(s, StatusCode::CREATED);
    v["session_id"].as_str().unwrap().to_string()
}

async fn say(app: &App, session: &str, text: &str) -> Value {
    let (s, v) = api(
        app,
        Method::POST,
        &format!("/api/sessions/{session}/messages"),
        json!({"text": text}),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    v
}

async fn message(app: &App, session: &str, id: i64) -> Value {
    let (_, v) = api(
        app,
        Method::GET,
        &format!("/api/sessions/{session}/messages"),
        Value::Null,
    )
    .await;
    v.as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == id)
        .cloned()
        .unwrap_or(Value::Null)
}

async fn wait_delivery(app: &App, session: &str, id: i64, state: &str) -> Value {
    eventually(&format!("message {id} {state}"), || async {
        let m = message(app, session, id).await;
        (m["delivery"] == state).then_some(m)
    })
    .await
}

fn tmp() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("sw-link-test-")
        .tempdir()
        .unwrap()
}

fn is_uuid(s: &str) -> bool {
    s.len() == 36 && s.chars().filter(|c| *c == '-').count() == 4
}

// ------------------------------------------------------------------------------------------
// Status and configuration
// ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_follows_the_configuration_and_the_token_stays_secret() {
    let dir = tmp();
    let app = start_app(dir.path()).await;
    let (s, v) = api(&app, Method::GET, "/api/assistant", Value::Null).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["configured"], false);
    assert_eq!(v["status"], "not_configured");
    assert!(v["detail"].as_str().unwrap().contains("Settings"));
    assert!(v["prelude"].as_str().unwrap().contains("Contract"));

    // Online; /v1/events missing (like OpenClaw 0.64).
    let fake = Fake::start(false).await;
    let v = configure(&app, &format!("{}/", fake.url()), json!({})).await;
    assert_eq!(v["status"], "online", "{v}");
    assert_eq!(v["base_url"], fake.url());
    assert_eq!(v["assistant_version"], "9.9.9-fake");
    // An adapter version StageWhisper is not tested with is called out in plain words.
    let warning = v["warning"].as_str().unwrap_or_default();
    assert!(
        warning.contains("9.9.9-fake") && warning.contains("0.43.0"),
        "{v}"
    );
    assert_eq!(v["kind"], "incoming");
    assert_eq!(v["supports_events_fallback"], false);
    assert!(v["events_fallback_detail"]
        .as_str()
        .unwrap()
        .contains("404"));
    assert!(
        !v.to_string().contains(TOKEN),
        "the token is never returned"
    );
    let tok = dir.path().join("assistant_relay_token");
    assert_eq!(std::fs::read_to_string(&tok).unwrap(), TOKEN);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&tok).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    let ping = fake
        .all()
        .into_iter()
        .find(|r| r.path == "/v1/ping")
        .unwrap();
    assert_eq!(ping.method, "POST");
    assert_eq!(
        ping.auth.as_deref(),
        Some(format!("Bearer {TOKEN}").as_str())
    );

    // Wrong token → auth failed, with the words to fix it.
    let (s, v) = api(
        &app,
        Method::PUT,
        "/api/assistant",
        json!({"base_url": fake.url(), "relay_token": "wrong-token-0123456789"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["status"], "auth_failed", "{v}");
    assert!(
        v["detail"].as_str().unwrap().contains("401 bad_bearer"),
        "{v}"
    );

    // Nothing listening → unreachable.
    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let v = configure(&app, &format!("http://127.0.0.1:{port}"), json!({})).await;
    assert_eq!(v["status"], "unreachable", "{v}");
    assert!(
        v["detail"].as_str().unwrap().contains("connection refused"),
        "{v}"
    );

    // A path that is not an assistant → misconfigured.
    let v = configure(&app, &format!("{}/nope", fake.url()), json!({})).await;
    assert_eq!(v["status"], "misconfigured", "{v}");
    assert!(v["detail"]
        .as_str()
        .unwrap()
        .contains("not a StageWhisper assistant"));

    // Validation.
    for (body, code) in [
        (json!({"relay_token": TOKEN}), "missing_field"),
        (
            json!({"base_url": "http://10.1.2.3:80", "relay_token": TOKEN}),
            "invalid_base_url",
        ),
        (
            json!({"base_url": "https://127.0.0.1:1", "relay_token": TOKEN}),
            "invalid_base_url",
        ),
        (
            json!({"base_url": fake.url(), "relay_token": "short"}),
            "invalid_relay_token",
        ),
        (
            json!({"base_url": fake.url(), "mode": "carrier-pigeon"}),
            "invalid_field",
        ),
    ] {
        let (s, v) = api(&app, Method::PUT, "/api/assistant", body).await;
        assert_eq!(s, StatusCode::BAD_REQUEST, "{v}");
        assert_eq!(v["error"], code, "{v}");
    }

    // Keeping the saved token; custom prelude; reset to default.
    let v = configure(
        &app,
        &fake.url(),
        json!({"relay_token": null, "prelude": "Be brief about {title}."}),
    )
    .await;
    assert_eq!(v["status"], "online");
    assert_eq!(v["prelude"], "Be brief about {title}.");
    assert_eq!(v["prelude_is_default"], false);
    let v = configure(&app, &fake.url(), json!({"prelude": null})).await;
    assert_eq!(v["prelude_is_default"], true);

    let (s, v) = api(&app, Method::DELETE, "/api/assistant", Value::Null).await;
    assert_eq!(s, StatusCode::OK);
    assert_eq!(v["status"], "not_configured");
    assert!(!tok.exists());
    fake.stop();
    app.shutdown().await;
}

// ------------------------------------------------------------------------------------------
// Delivery
// ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chat_message_is_sent_once_with_its_task_id_and_the_callback_block() {
    let dir = tmp();
    let app = start_app(dir.path()).await;
    let fake = Fake::start(true).await;
    configure(&app, &fake.url(), json!({})).await;
    let s = new_chat(&app).await;
    let m = say(&app, &s, "hello assistant").await;
    assert_eq!(m["delivery"], "pending");
    let id = m["id"].as_i64().unwrap();
    let sent = wait_delivery(&app, &s, id, "sent").await;
    let reqs = fake.incoming();
    assert_eq!(reqs.len(), 1);
    let b = &reqs[0].body;
    assert_eq!(b["reason"], "chat_message");
    assert_eq!(b["session_id"], s.as_str());
    assert_eq!(b["payload"]["text"], "hello assistant");
    assert_eq!(b["payload"]["user_message_id"], m["message_id"]);
    assert!(is_uuid(b["task_id"].as_str().unwrap()));
    assert_eq!(
        b["task_id"], sent["task_id"],
        "the recorded task id is the one sent"
    );
    assert_eq!(b["callback"]["url"], app.callback_url.as_str());
    assert_eq!(b["callback"]["token"], app.callback_token.get().as_str());
    assert!(
        !app.callback_url.trim_start_matches("http://").contains('/'),
        "an origin, no path"
    );
    assert!(b["occurred_at"].as_str().unwrap().ends_with('Z'));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(fake.incoming().len(), 1, "nothing is sent twice");
    fake.stop();
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_429_and_5xx_are_retried_under_the_same_task_id() {
    let dir = tmp();
    let app = start_app(dir.path()).await;
    let fake = Fake::start(true).await;
    configure(&app, &fake.url(), json!({})).await;
    fake.set(Arc::new(|r: &Req, n| match n {
        0 => (
            429,
            json!({"error": "too_many"}),
            vec![("retry-after", "1".into())],
        ),
        1 => (500, json!({"error": "boom"}), vec![]),
        2 => (503, json!({"error": "task_in_flight"}), vec![]),
        _ => (
            202,
            json!({"status": "accepted", "task_id": r.body["task_id"]}),
            vec![],
        ),
    }));
    let s = new_chat(&app).await;
    let t0 = Instant::now();
    let id = say(&app, &s, "retry me").await["id"].as_i64().unwrap();
    // While retrying, the entry stays pending and says why.
    let pending = eventually("a retry note", || async {
        let m = message(&app, &s, id).await;
        (m["delivery"] == "pending" && !m["delivery_error"].is_null()).then_some(m)
    })
    .await;
    assert_eq!(
        pending["delivery_error"]["code"], "assistant_busy",
        "{pending}"
    );
    let sent = wait_delivery(&app, &s, id, "sent").await;
    assert!(
        t0.elapsed() >= Duration::from_secs(1),
        "Retry-After was honoured"
    );
    assert!(sent["delivery_error"].is_null(), "the note is cleared");
    let reqs = fake.incoming();
    assert_eq!(reqs.len(), 4);
    let task = &reqs[0].body["task_id"];
    assert!(
        reqs.iter().all(|r| &r.body["task_id"] == task),
        "same task id on every attempt"
    );
    assert_eq!(&sent["task_id"], task);
    fake.stop();
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_refused_is_retried_until_the_assistant_comes_up() {
    let dir = tmp();
    let app = start_app(dir.path()).await;
    let hold = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = hold.local_addr().unwrap();
    drop(hold);
    let v = configure(&app, &format!("http://{addr}"), json!({})).await;
    assert_eq!(v["status"], "unreachable");
    let s = new_chat(&app).await;
    let id = say(&app, &s, "are you there?").await["id"]
        .as_i64()
        .unwrap();
    let m = eventually("an unreachable note", || async {
        let m = message(&app, &s, id).await;
        (m["delivery_error"]["code"] == "assistant_unreachable").then_some(m)
    })
    .await;
    assert_eq!(m["delivery"], "pending");
    let task = m["task_id"].as_str().unwrap().to_string();
    assert!(m["delivery_error"]["message"]
        .as_str()
        .unwrap()
        .contains("connection refused"));
    let fake = Fake::start_on(TcpListener::bind(addr).await.unwrap(), true).await;
    let sent = wait_delivery(&app, &s, id, "sent").await;
    assert_eq!(sent["task_id"], task.as_str());
    assert_eq!(fake.incoming()[0].body["task_id"], task.as_str());
    eventually("online", || async {
        let (_, v) = api(&app, Method::GET, "/api/assistant", Value::Null).await;
        (v["status"] == "online").then_some(())
    })
    .await;
    fake.stop();
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_flight_and_duplicate_answers_count_as_delivered() {
    let dir = tmp();
    let app = start_app(dir.path()).await;
    let fake = Fake::start(true).await;
    configure(&app, &fake.url(), json!({})).await;
    fake.set(Arc::new(|r: &Req, n| match n {
        0 => (202, json!({"status": "in_flight", "task_id": r.body["task_id"]}), vec![]),
        1 => (
            200,
            json!({"status": "duplicate", "task_id": r.body["task_id"], "result": {"status": "message"}}),
            vec![],
        ),
        _ => (202, json!({"status": "accepted"}), vec![("x-idempotent-replay", "true".into())]),
    }));
    let s = new_chat(&app).await;
    let a = say(&app, &s, "one").await["id"].as_i64().unwrap();
    let b = say(&app, &s, "two").await["id"].as_i64().unwrap();
    let c = say(&app, &s, "three").await["id"].as_i64().unwrap();
    for id in [a, b, c] {
        wait_delivery(&app, &s, id, "sent").await;
    }
    assert_eq!(
        fake.incoming().len(),
        3,
        "no resend after in_flight / duplicate / replay"
    );
    fake.stop();
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_401_fails_the_message_and_a_user_retry_gets_a_new_task_id() {
    let dir = tmp();
    let app = start_app(dir.path()).await;
    let fake = Fake::start(true).await;
    configure(&app, &fake.url(), json!({})).await;
    fake.set(Arc::new(|_: &Req, _| {
        (401, json!({"error": "invalid_token"}), vec![])
    }));
    let s = new_chat(&app).await;
    let id = say(&app, &s, "secret plans").await["id"].as_i64().unwrap();
    let failed = wait_delivery(&app, &s, id, "failed").await;
    assert_eq!(failed["delivery_error"]["code"], "assistant_auth_failed");
    let msg = failed["delivery_error"]["message"].as_str().unwrap();
    assert!(
        msg.contains("401 invalid_token") && msg.contains("relay token"),
        "{msg}"
    );
    let (_, v) = api(&app, Method::GET, "/api/assistant", Value::Null).await;
    assert_eq!(v["status"], "auth_failed");
    assert_eq!(v["last_error"]["code"], "assistant_auth_failed");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        fake.incoming().len(),
        1,
        "a 4xx is final: no automatic retry"
    );

    fake.set(accept_all());
    let path = format!("/api/sessions/{s}/messages/{id}/retry");
    let (st, v) = api(&app, Method::POST, &path, Value::Null).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["delivery"], "pending");
    assert_ne!(
        v["task_id"], failed["task_id"],
        "a user retry is a new task"
    );
    let sent = wait_delivery(&app, &s, id, "sent").await;
    let reqs = fake.incoming();
    assert_eq!(reqs.len(), 2);
    assert_ne!(reqs[0].body["task_id"], reqs[1].body["task_id"]);
    assert_eq!(reqs[1].body["task_id"], sent["task_id"]);
    assert_eq!(
        reqs[1].body["payload"]["user_message_id"],
        sent["message_id"]
    );
    // Only failed entries can be retried; others are 409 / 404.
    let (st, v) = api(&app, Method::POST, &path, Value::Null).await;
    assert_eq!(
        (st, v["error"].as_str()),
        (StatusCode::CONFLICT, Some("not_failed"))
    );
    let (st, _) = api(
        &app,
        Method::POST,
        &format!("/api/sessions/{s}/messages/999999/retry"),
        Value::Null,
    )
    .await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    let other = new_chat(&app).await;
    let (st, _) = api(
        &app,
        Method::POST,
        &format!("/api/sessions/{other}/messages/{id}/retry"),
        Value::Null,
    )
    .await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    fake.stop();
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_400_validation_failure_is_shown_on_the_message() {
    let dir = tmp();
    let app = start_app(dir.path()).await;
    let fake = Fake::start(true).await;
    configure(&app, &fake.url(), json!({})).await;
    fake.set(Arc::new(|_: &Req, _| {
        (
            400,
            json!({"error": "validation_failed", "detail": "text_too_long"}),
            vec![],
        )
    }));
    let s = new_chat(&app).await;
    let id = say(&app, &s, "long story").await["id"].as_i64().unwrap();
    let m = wait_delivery(&app, &s, id, "failed").await;
    assert_eq!(m["delivery_error"]["code"], "assistant_rejected");
    assert!(m["delivery_error"]["message"]
        .as_str()
        .unwrap()
        .contains("400 validation_failed: text_too_long"));
    fake.stop();
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_callback_url_is_actionable_in_callback_mode() {
    let dir = tmp();
    let app = start_app(dir.path()).await;
    let fake = Fake::start(false).await;
    configure(&app, &fake.url(), json!({"mode": "callback"})).await;
    fake.set(Arc::new(|_: &Req, _| {
        (
            400,
            json!({"error": "validation_failed", "detail": "invalid_callback_url"}),
            vec![],
        )
    }));
    let s = new_chat(&app).await;
    let id = say(&app, &s, "hi").await["id"].as_i64().unwrap();
    let m = wait_delivery(&app, &s, id, "failed").await;
    assert_eq!(m["delivery_error"]["code"], "callback_rejected");
    let msg = m["delivery_error"]["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!(
            "STAGEWHISPER_ALLOW_CALLBACK_URLS={}",
            app.callback_url
        )),
        "{msg}"
    );
    assert!(msg.contains("no GET /v1/events fallback"), "{msg}");
    let (_, v) = api(&app, Method::GET, "/api/assistant", Value::Null).await;
    assert_eq!(v["status"], "misconfigured", "{v}");
    // A later status check does not paper over it.
    let (_, v) = api(&app, Method::POST, "/api/assistant/check", Value::Null).await;
    assert_eq!(v["status"], "misconfigured", "{v}");
    fake.stop();
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_mode_falls_back_to_v1_events_and_dedupes_across_modes() {
    let dir = tmp();
    let app = start_app(dir.path()).await;
    let fake = Fake::start(true).await;
    let v = configure(&app, &fake.url(), json!({})).await;
    assert_eq!(v["supports_events_fallback"], true, "{v}");
    // Rejects any callback block; accepts without one.
    fake.set(Arc::new(|r: &Req, _| {
        if r.body.get("callback").is_some() {
            (
                400,
                json!({"error": "validation_failed", "detail": "invalid_callback_url"}),
                vec![],
            )
        } else {
            (
                202,
                json!({"status": "accepted", "task_id": r.body["task_id"]}),
                vec![],
            )
        }
    }));
    let s = new_chat(&app).await;
    let m = say(&app, &s, "over SSE please").await;
    let id = m["id"].as_i64().unwrap();
    let sent = wait_delivery(&app, &s, id, "sent").await;
    let reqs = fake.incoming();
    assert_eq!(reqs.len(), 2);
    assert!(reqs[0].body.get("callback").is_some());
    assert!(reqs[1].body.get("callback").is_none());
    assert_eq!(
        reqs[0].body["task_id"], reqs[1].body["task_id"],
        "same task id"
    );
    let (_, v) = api(&app, Method::GET, "/api/assistant", Value::Null).await;
    assert_eq!(v["delivery"], "events", "{v}");
    assert!(
        v["detail"].as_str().unwrap().contains("GET /v1/events"),
        "{v}"
    );

    // The reply arrives on the stream (and once more via a callback: stored once).
    let task = sent["task_id"].as_str().unwrap();
    let reply = json!({"task_id": task, "session_id": s, "status": "message",
        "message_id": "m-1", "user_message_id": m["message_id"], "reply_text": "Stub reply over SSE"});
    fake.push_event(&s, "e1-0.0", reply.clone());
    fake.push_event(
        &s,
        "e1-0.1",
        json!({"task_id": task, "session_id": s, "status": "completed"}),
    );
    eventually("the SSE reply", || async {
        let (_, v) = api(
            &app,
            Method::GET,
            &format!("/api/sessions/{s}/messages"),
            Value::Null,
        )
        .await;
        v.as_array()
            .unwrap()
            .iter()
            .any(|m| m["text"] == "Stub reply over SSE")
            .then_some(())
    })
    .await;
    let ep = Endpoint::parse(&app.callback_url).unwrap();
    let token = app.callback_token.get();
    let r = client::send(
        &ep,
        Call::new(Method::POST, &format!("/tasks/{task}"))
            .bearer(&token)
            .json(serde_json::to_vec(&reply).unwrap()),
        Timeouts::default(),
    )
    .await
    .unwrap();
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(r.json()["duplicate"], true);
    let (_, v) = api(
        &app,
        Method::GET,
        &format!("/api/sessions/{s}/messages"),
        Value::Null,
    )
    .await;
    let n = v
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["kind"] == "assistant")
        .count();
    assert_eq!(n, 1, "one assistant message: {v}");
    // The cursor is kept.
    eventually("the cursor saved", || async {
        (stream_cursor(dir.path(), &s).await.as_deref() == Some("e1-0.1")).then_some(())
    })
    .await;
    // After a restart the reader resumes from there.
    app.shutdown().await;
    let before = fake.all().len();
    let app = start_app(dir.path()).await;
    let resumed = eventually("a resumed /v1/events", || async {
        fake.all()[before..]
            .iter()
            .find(|r| r.path == "/v1/events" && r.last_event_id.is_some())
            .cloned()
    })
    .await;
    assert_eq!(resumed.last_event_id.as_deref(), Some("e1-0.1"));
    fake.stop();
    app.shutdown().await;
}

/// The `Last-Event-ID` the app keeps for an assistant session (its database, read-only).
async fn stream_cursor(dir: &Path, session: &str) -> Option<String> {
    use sqlx::ConnectOptions;
    let mut db = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(dir.join(stagewhisper_core::app::DB_FILE))
        .read_only(true)
        .connect()
        .await
        .ok()?;
    sqlx::query_scalar("SELECT last_event_id FROM stream_cursors WHERE session_id = ?")
        .bind(session)
        .fetch_optional(&mut db)
        .await
        .ok()?
        .flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_apps_state_file_is_moved_into_the_database_at_start() {
    let dir = tmp();
    let file = dir.path().join("assistant_state.json");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    let old = json!({
        "preludes": {},
        "streams": {"chat-1": {"last_event_id": "e9-0.3", "last_activity_ms": now_ms}}
    });
    std::fs::write(&file, old.to_string()).unwrap();
    let app = start_app(dir.path()).await;
    assert!(!file.exists(), "the file is gone once its records are rows");
    assert_eq!(
        stream_cursor(dir.path(), "chat-1").await.as_deref(),
        Some("e9-0.3")
    );
    app.shutdown().await;
    // The next start reads the rows.
    let app = start_app(dir.path()).await;
    assert_eq!(
        stream_cursor(dir.path(), "chat-1").await.as_deref(),
        Some("e9-0.3")
    );
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_sends_its_prelude_then_final_transcript_turns() {
    let dir = tmp();
    let app = start_app(dir.path()).await;
    let fake = Fake::start(true).await;
    configure(&app, &fake.url(), json!({})).await;
    let call = new_call(&app, "Acme renewal").await;
    let insights = format!("insights:{call}");
    let tpath = format!("/api/calls/{call}/transcript");
    let (st, v) = api(
        &app,
        Method::POST,
        &tpath,
        json!({"speaker": "Ana", "text": "We need it by May."}),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(v["speaker"], "Ana");
    let (st, v) = api(
        &app,
        Method::POST,
        &tpath,
        json!({"text": "partial wor", "is_final": false}),
    )
    .await;
    assert_eq!(st, StatusCode::ACCEPTED);
    assert_eq!(v["stored"], false);
    let (st, _) = api(
        &app,
        Method::POST,
        &tpath,
        json!({"speaker": "Ben", "text": "Budget is 50k.", "is_final": true}),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED);
    eventually("three requests", || async {
        (fake.incoming().len() >= 3).then_some(())
    })
    .await;
    let reqs = fake.incoming();
    assert_eq!(reqs.len(), 3, "the interim turn is not forwarded");
    let (t1, t2) = (reqs[1].at, reqs[2].at);
    assert!(
        t2.duration_since(t1) >= Duration::from_millis(90),
        "turns of one session are spaced out"
    );
    assert_eq!(reqs[0].body["reason"], "system_prelude");
    assert_eq!(reqs[0].body["session_id"], insights.as_str());
    assert!(reqs[0].body["payload"]["text"]
        .as_str()
        .unwrap()
        .contains("\"Acme renewal\""));
    // Sent before the first turn, once that turn is stored: who is on the call so far.
    let prelude = reqs[0].body["payload"]["text"].as_str().unwrap();
    assert!(prelude.contains("On the call so far: Ana"), "{prelude}");
    assert!(reqs[0].body.get("callback").is_none());
    for (r, text) in reqs[1..]
        .iter()
        .zip(["Ana: We need it by May.", "Ben: Budget is 50k."])
    {
        assert_eq!(r.body["reason"], "transcript_chunk");
        assert_eq!(r.body["session_id"], insights.as_str());
        assert_eq!(r.body["payload"]["text"], text);
        assert_eq!(r.body["payload"]["is_final"], true);
        assert_eq!(r.body["callback"]["url"], app.callback_url.as_str());
    }
    let turns = eventually("transcript sent", || async {
        let (_, v) = api(&app, Method::GET, &tpath, Value::Null).await;
        v.as_array()
            .unwrap()
            .iter()
            .all(|t| t["delivery"] == "sent")
            .then_some(v)
    })
    .await;
    assert_eq!(turns.as_array().unwrap().len(), 2);
    assert_eq!(turns[1]["task_id"], reqs[2].body["task_id"]);

    // Validation of the transcript input.
    for (body, st, code) in [
        (json!({}), StatusCode::BAD_REQUEST, "missing_field"),
        (
            json!({"text": "x", "is_final": "yes"}),
            StatusCode::BAD_REQUEST,
            "invalid_field",
        ),
        (
            json!({"text": "   "}),
            StatusCode::BAD_REQUEST,
            "empty_text",
        ),
        (
            json!({"text": "x".repeat(16_001)}),
            StatusCode::BAD_REQUEST,
            "text_too_long",
        ),
    ] {
        let (s, v) = api(&app, Method::POST, &tpath, body).await;
        assert_eq!((s, v["error"].as_str()), (st, Some(code)), "{v}");
    }
    let chat = new_chat(&app).await;
    let (s, v) = api(
        &app,
        Method::POST,
        &format!("/api/calls/{chat}/transcript"),
        json!({"text": "x"}),
    )
    .await;
    assert_eq!(
        (s, v["error"].as_str()),
        (StatusCode::CONFLICT, Some("not_a_call"))
    );

    // Post-call: forwarding stops, the chat stays open, "Summarise this call" is a user message.
    let (s, _) = api(
        &app,
        Method::POST,
        &format!("/api/calls/{call}/end"),
        Value::Null,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    let (s, v) = api(&app, Method::POST, &tpath, json!({"text": "after the end"})).await;
    assert_eq!(
        (s, v["error"].as_str()),
        (StatusCode::CONFLICT, Some("call_ended"))
    );
    let (s, v) = api(
        &app,
        Method::POST,
        &format!("/api/calls/{call}/summarise"),
        Value::Null,
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    assert_eq!(v["kind"], "user");
    let text = v["text"].as_str().unwrap();
    assert!(
        text.starts_with("Please summarise this call \"Acme renewal\""),
        "{text}"
    );
    assert!(text.contains("Ana: We need it by May.") && text.contains("Ben: Budget is 50k."));
    let id = v["id"].as_i64().unwrap();
    wait_delivery(&app, &call, id, "sent").await;
    let last = fake.incoming().pop().unwrap();
    assert_eq!(last.body["reason"], "chat_message");
    assert_eq!(last.body["session_id"], call.as_str());
    say(&app, &call, "and one more question").await;
    let (s, v) = api(
        &app,
        Method::POST,
        &format!("/api/calls/{chat}/summarise"),
        Value::Null,
    )
    .await;
    assert_eq!(
        (s, v["error"].as_str()),
        (StatusCode::CONFLICT, Some("not_a_call"))
    );
    let empty = new_call(&app, "").await;
    let (s, v) = api(
        &app,
        Method::POST,
        &format!("/api/calls/{empty}/summarise"),
        Value::Null,
    )
    .await;
    assert_eq!(
        (s, v["error"].as_str()),
        (StatusCode::CONFLICT, Some("no_transcript"))
    );
    fake.stop();
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_resends_pending_entries_with_their_recorded_task_ids() {
    let dir = tmp();
    let hold = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = hold.local_addr().unwrap();
    drop(hold);
    let (s, id, task, call) = {
        let app = start_app(dir.path()).await;
        configure(&app, &format!("http://{addr}"), json!({})).await;
        let s = new_chat(&app).await;
        let id = say(&app, &s, "survive a restart").await["id"]
            .as_i64()
            .unwrap();
        let m = eventually("a task id", || async {
            let m = message(&app, &s, id).await;
            m["task_id"].as_str().map(str::to_string)
        })
        .await;
        // After the message's first attempt: a new call's prelude goes first in the queue, and
        // with the assistant down it would hold the message back before it is ever attempted.
        let call = new_call(&app, "restart").await;
        app.shutdown().await;
        (s, id, m, call)
    };
    let fake = Fake::start_on(TcpListener::bind(addr).await.unwrap(), true).await;
    let app = start_app(dir.path()).await;
    let sent = wait_delivery(&app, &s, id, "sent").await;
    assert_eq!(sent["task_id"], task.as_str());
    let reqs = fake.incoming();
    let chat: Vec<_> = reqs
        .iter()
        .filter(|r| r.body["reason"] == "chat_message")
        .collect();
    assert_eq!(chat.len(), 1);
    assert_eq!(chat[0].body["task_id"], task.as_str());
    eventually("the prelude of the call", || async {
        fake.incoming()
            .iter()
            .any(|r| {
                r.body["reason"] == "system_prelude"
                    && r.body["session_id"] == format!("insights:{call}").as_str()
            })
            .then_some(())
    })
    .await;
    fake.stop();
    app.shutdown().await;
}

// ------------------------------------------------------------------------------------------
// Replay
// ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_feeds_a_running_app_at_the_given_speed() {
    let dir = tmp();
    let app = start_app(dir.path()).await;
    let call = new_call(&app, "replayed").await;
    let file = dir.path().join("call.vtt");
    std::fs::write(
        &file,
        "WEBVTT\n\n00:00:00.000 --> 00:00:01.000\n<v Ana>Hello.\n\n00:00:00.600 --> 00:00:02.000\n<v Ben>Hi Ana, budget first?\n\n00:00:01.200 --> 00:00:02.000\nAna: Yes.\n",
    )
    .unwrap();
    let opts = ReplayOptions {
        file: file.clone(),
        session_id: call.clone(),
        speed: 2.0,
        ui_url: None,
        ui_token: None,
        data_dir: Some(dir.path().to_path_buf()),
    };
    let mut seen = Vec::new();
    let t0 = Instant::now();
    let sum = replay(opts.clone(), |p| seen.push(p.clone()))
        .await
        .unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(550),
        "1.2 s of cues at 2x"
    );
    assert_eq!((sum.sent, sum.stored), (3, 3));
    assert_eq!(seen.len(), 5, "started, 3 turns, done");
    let (_, v) = api(
        &app,
        Method::GET,
        &format!("/api/calls/{call}/transcript"),
        Value::Null,
    )
    .await;
    let got: Vec<(String, String)> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            (
                t["speaker"].as_str().unwrap_or("").to_string(),
                t["text"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [
            ("Ana".into(), "Hello.".into()),
            ("Ben".into(), "Hi Ana, budget first?".into()),
            ("Ana".into(), "Yes.".into())
        ]
    );

    // Clear errors.
    let mut o = opts.clone();
    o.session_id = "no-such-call".into();
    assert!(matches!(
        replay(o, |_| {}).await,
        Err(ReplayError::CallNotFound(_))
    ));
    let mut o = opts.clone();
    o.ui_token = Some("nope".into());
    assert!(matches!(
        replay(o, |_| {}).await,
        Err(ReplayError::Unauthorized)
    ));
    let mut o = opts.clone();
    o.speed = -1.0;
    assert!(matches!(
        replay(o, |_| {}).await,
        Err(ReplayError::Speed(_))
    ));
    let bad = dir.path().join("bad.srt");
    std::fs::write(&bad, "1\n00:00:01,000 --> nonsense\nx\n").unwrap();
    let mut o = opts.clone();
    o.file = bad;
    let e = replay(o, |_| {}).await.unwrap_err().to_string();
    assert!(e.contains("line 2") && e.contains("bad end time"), "{e}");
    let mut o = opts.clone();
    o.data_dir = Some(dir.path().join("elsewhere"));
    let e = replay(o, |_| {}).await.unwrap_err().to_string();
    assert!(e.contains("cannot find the running app"), "{e}");
    api(
        &app,
        Method::POST,
        &format!("/api/calls/{call}/end"),
        Value::Null,
    )
    .await;
    assert!(matches!(
        replay(opts, |_| {}).await,
        Err(ReplayError::CallEnded(_))
    ));
    app.shutdown().await;
}

// ------------------------------------------------------------------------------------------
// Test-only fault injection
// ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_injection_is_off_by_default_and_answers_503_once_when_armed() {
    let dir = tmp();
    let app = start_app(dir.path()).await;
    let (s, _) = api(&app, Method::POST, "/api/test/faults", json!({})).await;
    assert_eq!(
        s,
        StatusCode::NOT_FOUND,
        "off unless enabled through the environment"
    );
    app.shutdown().await;

    // Enabled (debug build + the exact variable) — then armed per fault.
    std::env::set_var(
        stagewhisper_core::faults::ENV_VAR,
        stagewhisper_core::faults::ENV_VALUE,
    );
    let mut c = Config::new(dir.path().to_path_buf());
    std::env::remove_var(stagewhisper_core::faults::ENV_VAR);
    c.link = fast_link();
    let app = App::start(c).await.unwrap();
    let s = new_chat(&app).await;
    let (st, v) = api(
        &app,
        Method::POST,
        "/api/test/faults",
        json!({"status": "message", "count": 1}),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let ep = Endpoint::parse(&app.callback_url).unwrap();
    let token = app.callback_token.get();
    let task = "4b8f2a57-0d51-4c1e-9a55-6f0e6b1c2d3e";
    let body =
        json!({"session_id": s, "status": "message", "message_id": "m1", "reply_text": "once"});
    let path = format!("/tasks/{task}");
    let post = || {
        client::send(
            &ep,
            Call::new(Method::POST, &path)
                .bearer(&token)
                .json(serde_json::to_vec(&body).unwrap()),
            Timeouts::default(),
        )
    };
    let r = post().await.unwrap();
    assert_eq!(r.status, StatusCode::SERVICE_UNAVAILABLE);
    let r = post().await.unwrap();
    assert_eq!(r.status, StatusCode::OK);
    assert_eq!(
        r.json()["duplicate"],
        true,
        "stored before the injected 503"
    );
    let (_, v) = api(
        &app,
        Method::GET,
        &format!("/api/sessions/{s}/messages"),
        Value::Null,
    )
    .await;
    assert_eq!(v.as_array().unwrap().len(), 1);
    let (_, v) = api(&app, Method::GET, "/api/test/faults", Value::Null).await;
    assert_eq!(v["fired"].as_array().unwrap().len(), 1);
    assert_eq!(v["fired"][0]["followups"], json!(["duplicate"]), "{v}");
    app.shutdown().await;
}
