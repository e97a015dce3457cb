//! The headless process contract: the ready line, the data dir, signals, and the control API's
//! own guards (UI token, Host check).

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;
use serde_json::{json, Value};

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .permissions()
        .mode()
        & 0o777
}

fn port_of(url: &str) -> u16 {
    url.trim_end_matches('/')
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {url}"))
}

#[tokio::test]
async fn exactly_one_json_ready_line_and_private_token_files() {
    let mut app = App::start().await;
    let r = app.ready.clone();

    // The line itself.
    assert!(r.json.is_object(), "{}", r.line);
    for k in [
        "event",
        "callback_url",
        "callback_token",
        "ui_url",
        "ui_token",
        "data_dir",
    ] {
        assert!(r.json.get(k).is_some(), "ready line lacks {k}: {}", r.line);
    }
    let cb_url = r.json["callback_url"].as_str().unwrap();
    let ui_url = r.json["ui_url"].as_str().unwrap();
    assert!(
        cb_url.starts_with("http://127.0.0.1:"),
        "callback_url {cb_url}"
    );
    assert!(
        ui_url.starts_with("http://127.0.0.1:") && ui_url.ends_with('/'),
        "ui_url {ui_url}"
    );
    assert_ne!(port_of(cb_url), 0, "{}", r.line);
    assert_ne!(port_of(ui_url), 0, "{}", r.line);
    assert_ne!(port_of(cb_url), port_of(ui_url), "{}", r.line);
    assert!(
        r.callback_token.len() >= 16,
        "callback token too short: {}",
        r.line
    );
    assert!(r.ui_token.len() >= 16, "ui token too short: {}", r.line);
    assert_ne!(r.callback_token, r.ui_token, "the two tokens must differ");
    assert_eq!(
        std::fs::canonicalize(&r.data_dir).expect("data_dir exists"),
        std::fs::canonicalize(&app.data_dir).unwrap(),
        "data_dir in the ready line: {}",
        r.line
    );
    assert!(!r.line.contains('\n'), "ready line spans lines");

    // The data dir.
    assert!(
        app.data_dir.join("stagewhisper.db").is_file(),
        "stagewhisper.db missing"
    );
    for (file, token) in [
        ("callback_token", &r.callback_token),
        ("ui_token", &r.ui_token),
    ] {
        let p = app.data_dir.join(file);
        assert_eq!(
            mode_of(&p),
            0o600,
            "{file} must be mode 0600, is {:o}",
            mode_of(&p)
        );
        let content = std::fs::read_to_string(&p).unwrap();
        assert_eq!(
            content.trim(),
            token.as_str(),
            "{file} content vs ready line"
        );
    }

    // Some activity, which must log to stderr only.
    let sid = app.create_chat().await;
    assert_applied(&app.post(&message(&sid, &new_id(), "m-1", "hello")).await);
    let _ = app
        .post(&message("sw-unknown", &new_id(), "m-2", "x"))
        .await;
    let _ = app
        .cb()
        .with_token("wrong-token-wrong-token")
        .post(&message(&sid, &new_id(), "m-3", "x"))
        .await;
    let mut ev = app.events(SseOpts::after(0)).await;
    ev.until("message_added", WAIT, |e| e.kind() == "message_added")
        .await;
    drop(ev);

    let status = app.sigterm().await;
    assert_eq!(
        status.code(),
        Some(0),
        "exit status {status}\n{}",
        app.stderr_tail()
    );
    let proc = app.proc.as_ref().unwrap();
    assert!(
        proc.wait_stdout_eof(Duration::from_secs(5)).await,
        "stdout not closed"
    );
    let lines = proc.stdout_lines();
    assert_eq!(
        lines,
        vec![r.line.clone()],
        "stdout must hold exactly the ready line"
    );

    // Tokens persist across restarts of the same data dir.
    app.restart().await;
    assert_eq!(
        app.ready.callback_token, r.callback_token,
        "callback token changed on restart"
    );
    assert_eq!(
        app.ready.ui_token, r.ui_token,
        "ui token changed on restart"
    );
    assert_eq!(texts(&app.messages(&sid).await), vec!["hello"]);
    for file in ["callback_token", "ui_token"] {
        assert_eq!(
            mode_of(&app.data_dir.join(file)),
            0o600,
            "{file} after restart"
        );
    }
}

#[tokio::test]
async fn data_dir_defaults_to_stagewhisper_data_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("from-env");
    std::fs::create_dir_all(&dir).unwrap();
    let args: Vec<String> = [
        "--headless",
        "--callback-listen",
        "127.0.0.1:0",
        "--ui-listen",
        "127.0.0.1:0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut proc = Proc::spawn(
        &args,
        &[(
            "STAGEWHISPER_DATA_DIR".into(),
            dir.to_string_lossy().into_owned(),
        )],
    );
    let ready = proc.wait_ready().await;
    assert_eq!(
        std::fs::canonicalize(&ready.data_dir).unwrap(),
        std::fs::canonicalize(&dir).unwrap(),
        "{}",
        ready.line
    );
    assert!(dir.join("stagewhisper.db").is_file());
    assert!(dir.join("callback_token").is_file());
    proc.signal("TERM");
    let status = proc
        .wait_exit(SHUTDOWN_TIMEOUT)
        .await
        .expect("exit after SIGTERM");
    assert_eq!(status.code(), Some(0), "{}", proc.stderr_tail());
}

#[tokio::test]
async fn non_loopback_listen_addresses_are_refused() {
    for flag in ["--callback-listen", "--ui-listen"] {
        let tmp = tempfile::tempdir().unwrap();
        let mut args: Vec<String> = vec![
            "--headless".into(),
            "--data-dir".into(),
            tmp.path().to_string_lossy().into_owned(),
        ];
        for f in ["--callback-listen", "--ui-listen"] {
            args.push(f.into());
            args.push(
                if f == flag {
                    "0.0.0.0:0"
                } else {
                    "127.0.0.1:0"
                }
                .into(),
            );
        }
        let mut proc = Proc::spawn(&args, &[]);
        let status = proc.wait_exit(Duration::from_secs(15)).await;
        let out = proc.stdout_lines();
        match status {
            None => {
                proc.kill9();
                panic!("{flag} 0.0.0.0:0 was accepted (still running); stdout {out:?}");
            }
            Some(st) => {
                assert!(
                    !st.success(),
                    "{flag} 0.0.0.0:0 exited successfully; stdout {out:?}"
                );
                assert!(
                    !out.iter().any(|l| l.contains("\"ready\"")),
                    "{flag} 0.0.0.0:0 printed a ready line: {out:?}"
                );
            }
        }
    }
}

#[tokio::test]
async fn sigterm_lets_in_flight_requests_finish_and_exits_0() {
    let mut app = App::start().await;
    let sid = app.create_chat().await;
    // An open event stream must not hold the shutdown up.
    let mut sse = app.events(SseOpts::after(0)).await;
    sse.until("session_created", WAIT, |e| e.kind() == "session_created")
        .await;

    let addr = app.ready.callback_addr.clone();
    let tok = app.ready.callback_token.clone();
    let mut conn = RawConn::connect(&addr).await;
    // A first request on the connection proves it was accepted and is being served.
    let t = new_id();
    let warm = typing(&sid, &t, Some("um-term")).to_string();
    conn.send(
        format!(
            "POST /tasks/{t} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {tok}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{warm}",
            warm.len()
        )
        .as_bytes(),
    )
    .await
    .expect("send warm-up");
    let r = conn.read_response(WAIT).await;
    assert_eq!(r.status, Some(200), "warm-up: {r:?}");

    // The second request: headers and half of the body, then SIGTERM.
    let body = with(
        message(&sid, &t, "m-inflight", "Sent across a SIGTERM"),
        json!({"user_message_id": "um-term"}),
    )
    .to_string();
    let (a, b) = body.as_bytes().split_at(body.len() / 2);
    conn.send(
        format!(
            "POST /tasks/{t} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {tok}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .as_bytes(),
    )
    .await
    .expect("send head");
    conn.send(a).await.expect("send first half");
    // Let the server read the head (nothing to poll for here).
    tokio::time::sleep(Duration::from_millis(150)).await;
    app.proc().signal("TERM");

    // It stops accepting connections…
    let t0 = Instant::now();
    let mut refused = false;
    while t0.elapsed() < Duration::from_secs(5) {
        match tokio::time::timeout(
            Duration::from_millis(500),
            tokio::net::TcpStream::connect(&addr),
        )
        .await
        {
            Ok(Err(_)) => {
                refused = true;
                break;
            }
            _ => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
    // …but the request in flight completes.
    conn.send(b).await.expect("send second half");
    let r = conn.read_response(Duration::from_secs(15)).await;
    assert_applied(&r.to_resp("request in flight during SIGTERM"));

    let status = match app.proc_mut().wait_exit(SHUTDOWN_TIMEOUT).await {
        Some(s) => s,
        None => panic!(
            "still running {SHUTDOWN_TIMEOUT:?} after SIGTERM (open SSE stream?)\n{}",
            app.stderr_tail()
        ),
    };
    assert_eq!(
        status.code(),
        Some(0),
        "exit status {status}\n{}",
        app.stderr_tail()
    );
    assert!(
        refused,
        "the callback listener kept accepting connections after SIGTERM"
    );
    assert!(
        sse.wait_closed(Duration::from_secs(5)).await,
        "SSE stream not closed at shutdown"
    );
    let proc = app.proc.as_ref().unwrap();
    proc.wait_stdout_eof(Duration::from_secs(5)).await;
    assert_eq!(
        proc.stdout_lines().len(),
        1,
        "stdout: {:?}",
        proc.stdout_lines()
    );

    // The message was committed.
    app.restart().await;
    let msgs = app.messages(&sid).await;
    assert_eq!(
        texts(&msgs),
        vec!["Sent across a SIGTERM"],
        "{}",
        dump_entries(&msgs)
    );
}

#[tokio::test]
async fn sigint_exits_0() {
    let mut app = App::start().await;
    let sid = app.create_chat().await;
    assert_applied(
        &app.post(&message(&sid, &new_id(), "m", "before SIGINT"))
            .await,
    );
    let status = app.stop_with("INT").await;
    assert_eq!(
        status.code(),
        Some(0),
        "exit status {status}\n{}",
        app.stderr_tail()
    );
    app.restart().await;
    assert_eq!(texts(&app.messages(&sid).await), vec!["before SIGINT"]);
}

fn raw_get(path: &str, host: &str, token: Option<&str>) -> Vec<u8> {
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    format!("GET {path} HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n").into_bytes()
}

#[tokio::test]
async fn control_api_requires_the_ui_token_and_a_local_host() {
    let app = App::start().await;
    let ui = app.ui();
    let tok = app.ready.ui_token.clone();

    // 401 without / with a wrong token, with the callback token, or with ?access_token on a
    // non-SSE route.
    for bearer in [
        None,
        Some(format!("{tok}x")),
        Some(app.ready.callback_token.clone()),
    ] {
        let r = ui
            .request("GET", "/api/sessions", bearer.as_deref(), None)
            .await;
        assert_error(&r, 401, "unauthorized");
        let r = ui
            .request(
                "POST",
                "/api/sessions",
                bearer.as_deref(),
                Some(&json!({"title": "x"})),
            )
            .await;
        assert_error(&r, 401, "unauthorized");
    }
    let r = ui
        .request(
            "GET",
            &format!("/api/sessions?access_token={tok}"),
            None,
            None,
        )
        .await;
    assert_error(&r, 401, "unauthorized");
    let r = ui.request("GET", "/api/settings", None, None).await;
    assert_error(&r, 401, "unauthorized");
    match EventStream::open(
        &app,
        SseOpts {
            token_in_query: false,
            ..SseOpts::default()
        },
    )
    .await
    {
        Ok(_) => {}
        Err(r) => panic!("SSE with the bearer header refused: {r}"),
    }
    let r = ui.request("GET", "/api/events", None, None).await;
    assert_error(&r, 401, "unauthorized");
    // The SSE route accepts ?access_token.
    let mut ev = match EventStream::open(
        &app,
        SseOpts {
            token_in_query: true,
            ..SseOpts::default()
        },
    )
    .await
    {
        Ok(s) => s,
        Err(r) => panic!("SSE with ?access_token refused: {r}"),
    };
    assert!(
        ev.content_type.starts_with("text/event-stream"),
        "{}",
        ev.content_type
    );
    // A live stream (no cursor) first says where it starts, then delivers new events.
    let first = ev.next(WAIT).await.expect("a first event on a live stream");
    assert_eq!(first.kind(), "ready", "{}", first.short());
    let start = first.json()["cursor"]
        .as_u64()
        .unwrap_or_else(|| panic!("ready event without a numeric cursor: {}", first.short()));
    let sid = app.create_chat().await;
    let evs = ev
        .until("session_created", WAIT, |e| e.kind() == "session_created")
        .await;
    assert!(
        evs.iter().all(|e| e.cursor() > start),
        "live events must come after the ready cursor {start}:\n{}",
        dump_events(&evs)
    );
    let s = evs.last().unwrap().payload("session");
    assert_eq!(s["session_id"], sid.as_str(), "{}", dump_events(&evs));

    // Host must be the UI listener's own loopback host.
    let addr = app.ready.ui_addr.clone();
    let port = port_of(&addr);
    let cb_port = port_of(&app.ready.callback_addr);
    for host in [
        "evil.example".to_owned(),
        format!("evil.example:{port}"),
        format!("127.0.0.1:{cb_port}"),
        format!("127.0.0.2:{port}"),
    ] {
        let r = raw_request(&addr, raw_get("/api/sessions", &host, Some(&tok)), WAIT).await;
        assert_error(
            &r.to_resp(&format!("GET /api/sessions Host: {host}")),
            403,
            "bad_host",
        );
    }
    for host in [format!("127.0.0.1:{port}"), format!("localhost:{port}")] {
        let r = raw_request(&addr, raw_get("/api/sessions", &host, Some(&tok)), WAIT).await;
        assert_eq!(r.status, Some(200), "Host: {host}: {r:?}");
    }

    // The control API is not served on the callback listener.
    let r = app
        .cb()
        .request("GET", "/api/sessions", Some(&tok), None, None)
        .await;
    assert_ne!(
        r.status, 200,
        "control API reachable on the callback listener: {r}"
    );

    // The static UI needs no token.
    let r = ui.request("GET", "/", None, None).await;
    assert_eq!(r.status, 200, "{r}");
    assert!(!r.text.contains(&tok), "the UI page leaks the ui token");
    assert!(
        !r.text.contains(&app.ready.callback_token),
        "the UI page leaks the callback token"
    );

    let r = ui.get("/api/nope").await;
    assert_error(&r, 404, "not_found");
}

#[tokio::test]
async fn control_api_sessions_settings_and_user_messages() {
    let app = App::start().await;
    let ui = app.ui();

    let mut ev = app.events(SseOpts::after(0)).await;
    let s = ui.get("/api/settings").await;
    assert_eq!(s.status, 200, "{s}");
    assert_eq!(
        s.json["callback_url"]
            .as_str()
            .map(|u| u.trim_end_matches('/')),
        Some(app.ready.callback_url.as_str()),
        "{s}"
    );
    assert_eq!(
        s.json["callback_token"],
        app.ready.callback_token.as_str(),
        "{s}"
    );
    assert_eq!(s.json["typing_timeout_secs"], 30, "{s}");
    assert_eq!(s.json["insights_grace_secs"], 120, "{s}");
    assert!(s.json["data_dir"].is_string(), "{s}");

    let a = app.create_chat().await;
    let (b, ib) = app.create_call().await;
    let r = ui.get("/api/sessions").await;
    assert_eq!(r.status, 200, "{r}");
    let list = r.json.as_array().expect("array").clone();
    let ids: Vec<&str> = list
        .iter()
        .filter_map(|s| s["session_id"].as_str())
        .collect();
    assert_eq!(ids, vec![b.as_str(), a.as_str()], "newest first: {r}");
    let call = &list[0];
    assert_eq!(call["kind"], "chat", "{call}");
    assert_eq!(call["is_call"], true, "{call}");
    assert_eq!(call["insights_session_id"], ib.as_str(), "{call}");
    assert_eq!(call["ended_at"], Value::Null, "{call}");
    assert_eq!(call["title"], "test call", "{call}");
    assert!(is_time_micros(&call["created_at"]), "{call}");
    assert_eq!(list[1]["is_call"], false, "{}", list[1]);
    assert_eq!(list[1]["insights_session_id"], Value::Null, "{}", list[1]);

    // User messages.
    let r = ui
        .post(
            &format!("/api/sessions/{a}/messages"),
            &json!({"text": "What should I ask?"}),
        )
        .await;
    assert_eq!(r.status, 201, "{r}");
    let m = r.json.get("message").cloned().unwrap_or(r.json.clone());
    assert_eq!(m["kind"], "user", "{r}");
    assert_eq!(m["text"], "What should I ask?", "{r}");
    assert_eq!(m["draft"], false, "{r}");
    // Read the announcements now: deleting a session later erases its events from the log.
    let mut evs = ev
        .until("message_added (user)", WAIT, |e| {
            e.kind() == "message_added"
        })
        .await;
    let r = ui
        .post(&format!("/api/sessions/{a}/messages"), &json!({}))
        .await;
    assert_error(&r, 400, "missing_field");
    let r = ui
        .request("POST", "/api/sessions", Some(&ui.token), None)
        .await;
    assert!(
        r.status == 201 || r.status == 400,
        "POST /api/sessions without a body: {r}"
    );
    if let Some(extra) = r.json["session_id"].as_str() {
        assert_eq!(app.delete_session(extra).await.status, 200);
    }
    let r = ui
        .http
        .post(format!("{}/api/sessions", ui.base))
        .bearer_auth(&ui.token)
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .expect("send");
    assert_eq!(r.status().as_u16(), 400, "invalid JSON body");
    let r = ui
        .post("/api/sessions/sw-nope/messages", &json!({"text": "x"}))
        .await;
    assert_error(&r, 404, "session_not_found");
    let r = ui.get("/api/sessions/sw-nope/messages").await;
    assert_error(&r, 404, "session_not_found");
    let msgs = app.messages(&a).await;
    assert_eq!(texts(&msgs), vec!["What should I ask?"]);
    assert_eq!(msgs[0]["kind"], "user");

    // Deleting.
    let r = app.delete_session(&a).await;
    assert_eq!(r.status, 200, "{r}");
    let r = ui.get("/api/sessions").await;
    let ids: Vec<&str> = r
        .json
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|s| s["session_id"].as_str())
        .collect();
    assert_eq!(ids, vec![b.as_str()], "{r}");
    let r = app.delete_session("sw-nope").await;
    assert_error(&r, 404, "session_not_found");

    // Every change was announced.
    let r = app.end_call(&b).await;
    assert_eq!(r.status, 200, "{r}");
    evs.extend(
        ev.until("session_updated (call ended)", WAIT, |e| {
            e.kind() == "session_updated" && e.payload("session")["session_id"] == b.as_str()
        })
        .await,
    );
    let dumped = dump_events(&evs);
    let created: Vec<String> = evs
        .iter()
        .filter(|e| e.kind() == "session_created")
        .map(|e| {
            e.payload("session")["session_id"]
                .as_str()
                .unwrap_or("?")
                .to_owned()
        })
        .collect();
    assert!(created.contains(&a) && created.contains(&b), "{dumped}");
    let user_added = evs
        .iter()
        .find(|e| e.kind() == "message_added")
        .expect("message_added");
    assert_eq!(user_added.message()["kind"], "user", "{dumped}");
    assert_eq!(
        user_added.message()["text"],
        "What should I ask?",
        "{dumped}"
    );
    let deleted = evs
        .iter()
        .find(|e| e.kind() == "session_deleted" && e.json()["session_id"] == a.as_str())
        .unwrap_or_else(|| panic!("no session_deleted:\n{dumped}"));
    assert_eq!(deleted.json()["session_id"], a.as_str(), "{dumped}");
    let updated = evs.last().unwrap().payload("session");
    assert!(updated["ended_at"].is_string(), "{dumped}");
}

#[tokio::test]
async fn ui_dir_serves_the_given_static_files_without_a_token() {
    let ui_dir = tempfile::tempdir().unwrap();
    std::fs::write(
        ui_dir.path().join("index.html"),
        "<!doctype html><title>marker-ui-4711</title>",
    )
    .unwrap();
    std::fs::write(
        ui_dir.path().join("app.js"),
        "console.log('marker-js-4712');",
    )
    .unwrap();
    let dir = ui_dir.path().to_string_lossy().into_owned();
    let app = App::start_with(&["--ui-dir", &dir]).await;
    let ui = app.ui();
    let r = ui.request("GET", "/", None, None).await;
    assert_eq!(r.status, 200, "{r}");
    assert!(r.text.contains("marker-ui-4711"), "{r}");
    assert!(
        r.header("content-type")
            .is_some_and(|c| c.starts_with("text/html")),
        "{:?}",
        r.header("content-type")
    );
    let r = ui.request("GET", "/app.js", None, None).await;
    assert_eq!(r.status, 200, "{r}");
    assert!(r.text.contains("marker-js-4712"), "{r}");
    // No escaping the directory.
    let addr = app.ready.ui_addr.clone();
    let r = raw_request(
        &addr,
        format!(
            "GET /../../../../etc/passwd HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
        )
        .into_bytes(),
        WAIT,
    )
    .await;
    assert!(!r.body.contains("root:"), "path traversal: {r:?}");
    let r = raw_request(
        &addr,
        format!("GET /%2e%2e/%2e%2e/%2e%2e/etc/passwd HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")
            .into_bytes(),
        WAIT,
    )
    .await;
    assert!(!r.body.contains("root:"), "path traversal: {r:?}");
}
