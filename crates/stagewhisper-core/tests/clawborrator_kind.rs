//! The `clawborrator` assistant kind through the real app: the core `App` (real listeners, a
//! real SQLite file) driven over real HTTP on loopback, attached to a hub.
//!
//! The hub is the project's conformance fake (the dev-only crate `stagewhisper-fake-hub`, written
//! from the hub's AsyncAPI and what its public clients send): the real hub is not public and
//! cannot run here, so it is the one fake in these tests. Everything on the app's side is real.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{json, Value};
use stagewhisper_core::assistants::kinds::clawborrator::HubTiming;
use stagewhisper_core::backoff::Backoff;
use stagewhisper_core::{App, Config};
use stagewhisper_fake_hub::{FakeHub, FakeHubConfig};
use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(15);
const TOKEN: &str = "cw_sess_ana";

fn fast_hub() -> HubTiming {
    HubTiming {
        backoff: Backoff::Steps(vec![Duration::from_millis(50), Duration::from_millis(150)]),
        liveness: Duration::from_secs(3),
        connect_timeout: Duration::from_secs(2),
        channel_grace: Duration::from_millis(300),
    }
}

async fn start_app(dir: &Path) -> App {
    let mut c = Config::new(dir.to_path_buf());
    c.hub_timing = fast_hub();
    c.link.backoff_initial = Duration::from_millis(50);
    c.link.backoff_max = Duration::from_millis(200);
    c.link.min_session_gap = Duration::from_millis(5);
    App::start(c).await.expect("app starts")
}

/// One request to the control API over HTTP, with the UI token.
async fn http(app: &App, method: Method, path: &str, body: Value) -> (StatusCode, Value) {
    let authority = app
        .ui_url
        .trim_start_matches("http://")
        .trim_end_matches('/');
    let stream = tokio::net::TcpStream::connect(authority).await.unwrap();
    let (mut send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    tokio::spawn(conn);
    let bytes = if body.is_null() {
        Bytes::new()
    } else {
        Bytes::from(body.to_string())
    };
    let req = hyper::Request::builder()
        .method(method)
        .uri(path)
        .header("host", authority)
        .header("authorization", format!("Bearer {}", app.ui_token.get()))
        .header("content-type", "application/json")
        .body(Full::new(bytes))
        .unwrap();
    let resp = send.send_request(req).await.unwrap();
    let status = resp.status();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
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
        .prefix("sw-claw-test-")
        .tempdir()
        .unwrap()
}

async fn attach(app: &App, hub: &FakeHub, extra: Value) -> Value {
    let mut body = json!({"kind": "clawborrator", "hub_url": hub.url(),
        "session_token": TOKEN, "session_id": hub.session_id()});
    if let Value::Object(m) = extra {
        body.as_object_mut().unwrap().extend(m);
    }
    let (s, v) = http(app, Method::PUT, "/api/assistant", body).await;
    assert_eq!(s, StatusCode::OK, "{v}");
    v
}

async fn status_is(app: &App, want: &str) -> Value {
    eventually(&format!("assistant status {want}"), || async {
        let (_, v) = http(app, Method::GET, "/api/assistant", Value::Null).await;
        (v["status"] == want).then_some(v)
    })
    .await
}

async fn new_chat(app: &App) -> String {
    let (s, v) = http(app, Method::POST, "/api/sessions", json!({"title": "t"})).await;
    assert_eq!(s, StatusCode::CREATED);
    v["session_id"].as_str().unwrap().to_string()
}

async fn say(app: &App, session: &str, text: &str) -> Value {
    let (s, v) = http(
        app,
        Method::POST,
        &format!("/api/sessions/{session}/messages"),
        json!({ "text": text }),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    v
}

async fn messages(app: &App, session: &str) -> Vec<Value> {
    let (s, v) = http(
        app,
        Method::GET,
        &format!("/api/sessions/{session}/messages"),
        Value::Null,
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    v.as_array().unwrap().clone()
}

fn of_kind<'a>(m: &'a [Value], kind: &str) -> Vec<&'a Value> {
    m.iter().filter(|x| x["kind"] == kind).collect()
}

/// The number of `prompt` frames with `text` the hub received.
fn prompts(hub: &FakeHub, text: &str) -> usize {
    hub.cli_frames()
        .iter()
        .filter(|f| f["type"] == "prompt" && f["text"] == text)
        .count()
}

async fn wait_prompt(hub: &FakeHub, text: &str) -> String {
    assert!(
        hub.wait_until(WAIT, |h| prompts(h, text) == 1).await,
        "the hub got the prompt {text:?}"
    );
    hub.last_chat_id().expect("acked")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attach_prompt_and_replies_plain_chunked_typing_errors_and_no_duplicates() {
    let hub = FakeHub::start(FakeHubConfig::default()).await;
    let dir = tmp();
    let app = start_app(dir.path()).await;
    let view = attach(&app, &hub, json!({})).await;
    assert_eq!(view["kind"], "clawborrator");
    // The token is never answered back, and it is stored with mode 0600.
    let online = status_is(&app, "online").await;
    for v in [&view, &online] {
        assert!(!v.to_string().contains(TOKEN), "{v}");
    }
    assert_eq!(online["token_saved"], true);
    assert_eq!(online["role"], "owner");
    let saved = dir.path().join("settings.json");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&saved).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    let doc: Value = serde_json::from_slice(&std::fs::read(&saved).unwrap()).unwrap();
    assert!(
        doc["sections"]["assistants"]["value"]["kinds"]["clawborrator"].is_object(),
        "{doc}"
    );
    // The upgrade carried the token as a bearer: the hub let us subscribe to the session.
    assert!(hub
        .cli_frames()
        .iter()
        .any(|f| f["type"] == "subscribe" && f["sessionId"] == hub.session_id()));

    // A prompt and its reply (correlated by the ack's chatId).
    let chat = new_chat(&app).await;
    let user = say(&app, &chat, "What is on my calendar?").await;
    let chat_id = wait_prompt(&hub, "What is on my calendar?").await;
    hub.tail("PreToolUse", Some("Bash"));
    let typing = eventually("typing with the tool as label", || async {
        let (_, v) = http(
            &app,
            Method::GET,
            &format!("/api/sessions/{chat}/typing"),
            Value::Null,
        )
        .await;
        (v.as_array().is_some_and(|a| !a.is_empty())).then_some(v)
    })
    .await;
    assert_eq!(typing[0]["label"], "Bash");
    hub.reply(Some(&chat_id), "Two meetings, the first at ten.");
    let m = eventually("the reply in the chat", || async {
        let m = messages(&app, &chat).await;
        (of_kind(&m, "assistant").len() == 1).then_some(m)
    })
    .await;
    let reply = of_kind(&m, "assistant")[0];
    assert_eq!(reply["text"], "Two meetings, the first at ten.");
    assert_eq!(reply["user_message_id"], user["message_id"]);
    // The hub's echo of the prompt is not shown again (as a user message or a notice).
    assert_eq!(of_kind(&m, "user").len(), 1);
    assert_eq!(of_kind(&m, "notice").len(), 0, "{m:?}");
    hub.tail("Stop", None);
    eventually("typing ends on Stop", || async {
        let (_, v) = http(
            &app,
            Method::GET,
            &format!("/api/sessions/{chat}/typing"),
            Value::Null,
        )
        .await;
        (v.as_array().is_some_and(|a| a.is_empty())).then_some(())
    })
    .await;

    // A streamed reply: one message, settled (no draft left), with the whole text.
    say(&app, &chat, "And tomorrow?").await;
    let chat_id2 = wait_prompt(&hub, "And tomorrow?").await;
    hub.reply_chunked(&chat_id2, &["Nothing ", "until ", "noon."]);
    let m = eventually("the streamed reply settled", || async {
        let m = messages(&app, &chat).await;
        let a = of_kind(&m, "assistant");
        (a.len() == 2 && a[1]["draft"] == false && a[1]["text"] == "Nothing until noon.")
            .then_some(m)
    })
    .await;
    assert_eq!(m.iter().filter(|x| x["draft"] == true).count(), 0);

    // An error frame shows as an error with its code.
    hub.send_raw(json!({"type": "error", "ok": false, "code": "rate_limited",
        "message": "slow down"}));
    eventually("the error in the chat", || async {
        let m = messages(&app, &chat).await;
        of_kind(&m, "error")
            .iter()
            .any(|e| e["error_code"] == "rate_limited")
            .then_some(())
    })
    .await;
    // Unknown frames are ignored.
    hub.send_raw(json!({"type": "brand_new_frame", "x": 1}));

    // A hub restart: the client reconnects, the hub replays its history, nothing shows twice.
    let before = messages(&app, &chat).await.len();
    let upgrades = hub.cli_upgrades();
    hub.restart().await;
    assert!(
        hub.wait_until(WAIT, |h| h.cli_upgrades() > upgrades
            && h.subscribers() == 1)
            .await,
        "reconnected"
    );
    status_is(&app, "online").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(messages(&app, &chat).await.len(), before, "no duplicates");

    // A message typed while the hub is down is sent once, when it is back.
    hub.go_down();
    status_is(&app, "offline").await;
    say(&app, &chat, "typed during the outage").await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(prompts(&hub, "typed during the outage"), 0);
    hub.come_up().await;
    wait_prompt(&hub, "typed during the outage").await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(prompts(&hub, "typed during the outage"), 1, "sent once");
    let m = messages(&app, &chat).await;
    let typed = m
        .iter()
        .find(|x| x["text"] == "typed during the outage")
        .unwrap();
    assert_eq!(typed["delivery"], "sent");
    assert_eq!(of_kind(&m, "user").len(), 3);

    // A reply that names no prompt of ours goes to the most recently used chat.
    hub.reply(None, "Unprompted note.");
    eventually("an unprompted reply in the last chat", || async {
        let m = messages(&app, &chat).await;
        m.iter()
            .any(|x| x["text"] == "Unprompted note.")
            .then_some(())
    })
    .await;
    app.shutdown().await;
}

async fn card(app: &App, chat: &str, request_id: &str) -> Option<Value> {
    messages(app, chat)
        .await
        .into_iter()
        .find(|m| m["kind"] == "permission" && m["request_id"] == request_id)
}

async fn card_in_state(app: &App, chat: &str, request_id: &str, state: &str) -> Value {
    eventually(&format!("card {request_id} {state}"), || async {
        card(app, chat, request_id)
            .await
            .filter(|c| c["state"] == state)
    })
    .await
}

async fn decide(app: &App, request_id: &str, decision: &str) -> (StatusCode, Value) {
    http(
        app,
        Method::POST,
        &format!("/api/permissions/{request_id}"),
        json!({ "decision": decision }),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn permission_cards_are_decided_here_or_settled_by_others_and_by_expiry() {
    let hub = FakeHub::start(FakeHubConfig::default()).await;
    let dir = tmp();
    let app = start_app(dir.path()).await;
    attach(&app, &hub, json!({})).await;
    status_is(&app, "online").await;
    let chat = new_chat(&app).await;
    say(&app, &chat, "Clean the build").await;
    wait_prompt(&hub, "Clean the build").await;

    // A request becomes a pending card in the chat of the prompt Claude works on.
    hub.request_permission("req-1", "Bash", "rm -rf build/");
    let c = card_in_state(&app, &chat, "req-1", "pending").await;
    assert_eq!(c["tool"], "Bash");
    assert_eq!(c["input_preview"], "rm -rf build/");
    assert!(c.get("resolver").is_some_and(Value::is_null), "{c}");

    // Bad input.
    let (s, v) = decide(&app, "req-1", "maybe").await;
    assert_eq!(
        (s, v["error"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_decision"))
    );
    let (s, v) = decide(&app, "no-such-request", "allow").await;
    assert_eq!(
        (s, v["error"].as_str()),
        (StatusCode::NOT_FOUND, Some("permission_not_found"))
    );

    // Allowed here: the hub gets the approval, the card settles with who decided.
    let (s, v) = decide(&app, "req-1", "allow").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["message"]["state"], "allow");
    assert_eq!(v["message"]["request_id"], "req-1");
    assert!(v["message"]["resolver"].is_string(), "{v}");
    let approval = hub
        .wait_cli_frame("approval", WAIT, |f| f["requestId"] == "req-1")
        .await
        .expect("the approval reached the hub");
    assert_eq!(approval["decision"], "allow");
    assert_eq!(approval["sessionId"], hub.session_id());
    // A second decision is refused.
    let (s, v) = decide(&app, "req-1", "deny").await;
    assert_eq!(
        (s, v["error"].as_str()),
        (StatusCode::CONFLICT, Some("already_resolved"))
    );
    card_in_state(&app, &chat, "req-1", "allow").await;

    // Resolved by another operator.
    hub.request_permission("req-2", "Edit", "src/main.rs");
    card_in_state(&app, &chat, "req-2", "pending").await;
    assert!(hub.resolve_permission("req-2", "deny", Some("bob")));
    let c = card_in_state(&app, &chat, "req-2", "deny").await;
    assert_eq!(c["resolver"], "bob");
    let (s, _) = decide(&app, "req-2", "allow").await;
    assert_eq!(s, StatusCode::CONFLICT);

    // Expired.
    hub.request_permission("req-3", "WebFetch", "https://example.com");
    card_in_state(&app, &chat, "req-3", "pending").await;
    assert!(hub.resolve_permission("req-3", "expired", None));
    let c = card_in_state(&app, &chat, "req-3", "expired").await;
    assert!(c["resolver"].is_null());

    // A pending card replayed by the hub after a reconnect is the same card.
    hub.request_permission("req-4", "Bash", "cargo test");
    card_in_state(&app, &chat, "req-4", "pending").await;
    hub.restart().await;
    status_is(&app, "offline").await;
    status_is(&app, "online").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let n = messages(&app, &chat)
        .await
        .iter()
        .filter(|m| m["request_id"] == "req-4")
        .count();
    assert_eq!(n, 1);

    // The settled cards are stored: a view that loads the chat after a restart sees them so.
    app.shutdown().await;
    assert!(
        hub.wait_until(WAIT, |h| h.subscribers() == 0).await,
        "the hub link stops with the app"
    );
    let app = start_app(dir.path()).await;
    card_in_state(&app, &chat, "req-1", "allow").await;
    card_in_state(&app, &chat, "req-2", "deny").await;
    card_in_state(&app, &chat, "req-3", "expired").await;
    let (s, _) = decide(&app, "req-3", "allow").await;
    assert_eq!(s, StatusCode::CONFLICT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn channel_offline_and_a_refused_token_show_in_the_status() {
    let hub = FakeHub::start(FakeHubConfig {
        channel_connected: false,
        ..FakeHubConfig::default()
    })
    .await;
    let dir = tmp();
    let app = start_app(dir.path()).await;

    // Bad settings are refused with stable codes; nothing is saved.
    for (body, code) in [
        (
            json!({"kind": "clawborrator", "hub_url": "http://hub.example.net",
            "session_token": TOKEN, "session_id": "s"}),
            "insecure_url",
        ),
        (
            json!({"kind": "clawborrator", "hub_url": "ftp://x", "session_token": TOKEN,
            "session_id": "s"}),
            "invalid_url",
        ),
        (
            json!({"kind": "clawborrator", "hub_url": hub.url(), "session_token": TOKEN,
            "session_id": "has space"}),
            "invalid_session",
        ),
        (
            json!({"kind": "clawborrator", "hub_url": hub.url(), "session_id": "s"}),
            "missing_field",
        ),
    ] {
        let (s, v) = http(&app, Method::PUT, "/api/assistant", body).await;
        assert_eq!(
            (s, v["error"].as_str()),
            (StatusCode::BAD_REQUEST, Some(code)),
            "{v}"
        );
    }
    let doc = std::fs::read(dir.path().join("settings.json")).unwrap_or_default();
    assert!(
        !String::from_utf8_lossy(&doc).contains("\"clawborrator\""),
        "nothing saved"
    );

    // Blank fields are missing, and every missing one is named in the one answer (the form
    // sends what its boxes hold: empty strings).
    for (path, method, body, message) in [
        (
            "/api/assistant/clawborrator/sessions",
            Method::POST,
            json!({"hub_url": " ", "session_token": ""}),
            "`hub_url` and `session_token` are required",
        ),
        (
            "/api/assistant",
            Method::PUT,
            json!({"kind": "clawborrator", "hub_url": "", "session_id": ""}),
            "`hub_url`, `session_token` and `session_id` are required",
        ),
    ] {
        let (s, v) = http(&app, method, path, body).await;
        assert_eq!(
            (s, v["error"].as_str(), v["message"].as_str()),
            (
                StatusCode::BAD_REQUEST,
                Some("missing_field"),
                Some(message)
            ),
            "{v}"
        );
    }

    // The session picker lists the hub's sessions for the token being entered.
    let (s, v) = http(
        &app,
        Method::POST,
        "/api/assistant/clawborrator/sessions",
        json!({"hub_url": hub.url(), "session_token": TOKEN}),
    )
    .await;
    assert_eq!(s, StatusCode::OK, "{v}");
    assert_eq!(v["sessions"][0]["id"], hub.session_id());
    let (s, v) = http(
        &app,
        Method::POST,
        "/api/assistant/clawborrator/sessions",
        json!({"hub_url": hub.url(), "session_token": "cw_sess_wrong"}),
    )
    .await;
    assert_eq!(
        (s, v["error"].as_str()),
        (StatusCode::BAD_GATEWAY, Some("auth_failed"))
    );

    // Subscribed, but the Claude Code session is not connected.
    attach(&app, &hub, json!({})).await;
    let v = status_is(&app, "offline").await;
    assert!(
        v["detail"]
            .as_str()
            .unwrap()
            .contains("Claude Code session is not connected"),
        "{v}"
    );
    hub.set_channel_connected(true);
    status_is(&app, "online").await;
    hub.set_channel_connected(false);
    status_is(&app, "offline").await;

    // A wrong token is final: auth_failed, and no retries until the settings change.
    let (s, _) = http(
        &app,
        Method::PUT,
        "/api/assistant",
        json!({"kind": "clawborrator", "session_token": "cw_sess_wrong"}),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    status_is(&app, "auth_failed").await;
    let attempts = hub.cli_attempts();
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert_eq!(hub.cli_attempts(), attempts, "no retry after auth_failed");
    // New settings end it (the other fields are kept).
    hub.set_channel_connected(true);
    let (s, _) = http(
        &app,
        Method::PUT,
        "/api/assistant",
        json!({"kind": "clawborrator", "session_token": TOKEN}),
    )
    .await;
    assert_eq!(s, StatusCode::OK);
    status_is(&app, "online").await;
}

async fn new_call(app: &App) -> String {
    let (s, v) = http(app, Method::POST, "/api/calls", json!({"title": "Weekly"})).await;
    assert_eq!(s, StatusCode::CREATED);
    v["session_id"].as_str().unwrap().to_string()
}

async fn turn(app: &App, call: &str, speaker: &str, text: &str) -> Value {
    let (s, v) = http(
        app,
        Method::POST,
        &format!("/api/calls/{call}/transcript"),
        json!({"speaker": speaker, "text": text}),
    )
    .await;
    assert_eq!(s, StatusCode::CREATED, "{v}");
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insights_go_to_the_insights_session_and_without_one_the_status_says_so() {
    const SIDE: &str = "9f9a7c56-1111-4c1d-8f00-insights0001";
    let hub = FakeHub::start(FakeHubConfig {
        side_sessions: vec![SIDE.into()],
        ..FakeHubConfig::default()
    })
    .await;
    let dir = tmp();
    let app = start_app(dir.path()).await;

    // Without an insights session: the status says so, transcript turns are not sent.
    attach(&app, &hub, json!({})).await;
    let v = status_is(&app, "online").await;
    assert_eq!(v["insights"], "not_configured");
    assert_eq!(
        v["insights_detail"],
        "this assistant kind has no insights session configured"
    );
    let call = new_call(&app).await;
    turn(&app, &call, "Ana", "Can we ship on Friday?").await;
    eventually("the turn fails with no_insights_session", || async {
        let (_, v) = http(
            &app,
            Method::GET,
            &format!("/api/calls/{call}/transcript"),
            Value::Null,
        )
        .await;
        (v[0]["delivery"] == "failed" && v[0]["delivery_error"]["code"] == "no_insights_session")
            .then_some(())
    })
    .await;
    assert_eq!(prompts(&hub, "Ana: Can we ship on Friday?"), 0);
    let (s, _) = http(
        &app,
        Method::POST,
        &format!("/api/calls/{call}/end"),
        Value::Null,
    )
    .await;
    assert_eq!(s, StatusCode::OK);

    // With one: the prelude, then the final turns, go there as prompts; replies land in the
    // call's Insights tab.
    attach(&app, &hub, json!({"insights_session_id": SIDE})).await;
    let v = eventually("the insights lane online", || async {
        let (_, v) = http(&app, Method::GET, "/api/assistant", Value::Null).await;
        (v["status"] == "online" && v["insights"] == "online").then_some(v)
    })
    .await;
    assert_eq!(v["insights_session_id"], SIDE);
    let call = new_call(&app).await;
    turn(&app, &call, "Ana", "What is the budget?").await;
    assert!(
        hub.wait_until(WAIT, |h| prompts(h, "Ana: What is the budget?") == 1)
            .await,
        "the turn reached the insights session"
    );
    let frames = hub.cli_frames();
    let side_prompts: Vec<&Value> = frames
        .iter()
        .filter(|f| f["type"] == "prompt" && f["sessionId"] == SIDE)
        .collect();
    assert!(side_prompts.len() >= 2, "{side_prompts:?}");
    assert!(
        side_prompts[0]["text"].as_str().unwrap().contains("Weekly"),
        "the prelude first: {side_prompts:?}"
    );
    let chat_id = hub.last_chat_id();
    hub.reply_in(SIDE, chat_id.as_deref(), "Ask for the number in writing.");
    eventually("the insight in the call's Insights tab", || async {
        let (_, v) = http(
            &app,
            Method::GET,
            &format!("/api/sessions/{call}/insights"),
            Value::Null,
        )
        .await;
        v.as_array()
            .unwrap()
            .iter()
            .any(|i| i["text"] == "Ask for the number in writing.")
            .then_some(())
    })
    .await;
    // …and not in the chat.
    assert!(messages(&app, &call)
        .await
        .iter()
        .all(|m| m["text"] != "Ask for the number in writing."));

    // A permission the insights session asks for is a card in the call's chat, and its
    // approval goes back to that session.
    hub.request_permission_in(SIDE, "req-side", "Read", "notes.md");
    card_in_state(&app, &call, "req-side", "pending").await;
    let (s, v) = decide(&app, "req-side", "allow").await;
    assert_eq!(s, StatusCode::OK, "{v}");
    let approval = hub
        .wait_cli_frame("approval", WAIT, |f| f["requestId"] == "req-side")
        .await
        .expect("the approval reached the hub");
    assert_eq!(approval["sessionId"], SIDE);
    card_in_state(&app, &call, "req-side", "allow").await;
}
