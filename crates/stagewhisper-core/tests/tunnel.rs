//! The tunnel (`src/tunnel/`) through the app, against real sockets, offline: `App` with its
//! real callback listener (probe route included), conversation and control API, and
//!
//! - ngrok failure paths with no internet: no authtoken, DNS failure, connection refused, a
//!   server that accepts TCP and never answers (bounded by our timeouts), plus a **fake ngrok
//!   service** speaking the crate's real transport (muxado + the JSON RPCs) on loopback: bad
//!   authtoken, domain not reserved, and a working tunnel whose public "edge" delivers real
//!   HTTP callbacks into the conversation, drops, and comes back;
//! - external URLs through a byte relay (what `ssh -R` does): verified by the signed probe,
//!   going down and recovering, pointing at the wrong place, TLS against a plain server;
//! - the control API routes, the advertised callback URL (settings, the assistant link's
//!   callback target) and the `{"event":"tunnel"}` lines.
//!
//! The real ngrok service is never contacted: every ngrok test points `ngrok_server_addr` at
//! loopback (or a `.invalid` name).

use muxado::heartbeat::{Heartbeat, HeartbeatConfig};
use muxado::typed::{StreamType, TypedAccept, TypedOpenClose, TypedSession, TypedStream};
use serde_json::{json, Value};
use stagewhisper_core::tunnel::{
    State, TunnelManager, TunnelRequest, TunnelSettings, TunnelStatus,
};
use stagewhisper_core::{App, Config};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

const WAIT: Duration = Duration::from_secs(15);

// ------------------------------------------------------------------------------------------
// The desktop: the app, with fast tunnel timings
// ------------------------------------------------------------------------------------------

struct Desk {
    _dir: Option<tempfile::TempDir>,
    data_dir: PathBuf,
    app: App,
    cb_addr: SocketAddr,
    cb_url: String,
}

fn fast(settings: TunnelSettings) -> TunnelSettings {
    TunnelSettings {
        connect_timeout: Duration::from_secs(3),
        step_timeout: Duration::from_secs(2),
        probe_timeout: Duration::from_secs(3),
        backoff_initial: Duration::from_millis(200),
        backoff_max: Duration::from_secs(1),
        check_interval: Duration::from_secs(2),
        ..settings
    }
}

impl Desk {
    async fn start(settings: TunnelSettings) -> Desk {
        let dir = tempfile::tempdir().unwrap();
        let mut d = Desk::start_in(dir.path(), settings).await;
        d._dir = Some(dir);
        d
    }

    async fn start_in(data_dir: &Path, settings: TunnelSettings) -> Desk {
        let mut config = Config::new(data_dir.to_path_buf());
        config.tunnel = settings;
        let app = App::start(config).await.unwrap();
        let cb_url = app.callback_url.clone();
        let cb_addr: SocketAddr = cb_url.trim_start_matches("http://").parse().unwrap();
        Desk {
            _dir: None,
            data_dir: data_dir.to_path_buf(),
            app,
            cb_addr,
            cb_url,
        }
    }

    fn tunnel(&self) -> &TunnelManager {
        &self.app.tunnel
    }

    fn token(&self) -> String {
        self.app.callback_token.get()
    }

    /// A control API request, as the UI sends it.
    async fn api(&self, method: hyper::Method, path: &str, body: Value) -> (u16, Value) {
        let body = if body.is_null() {
            Vec::new()
        } else {
            body.to_string().into_bytes()
        };
        let (s, v) = self.app.api.dispatch(&method, path, &body).await;
        (s.as_u16(), v)
    }

    async fn wait_for(&self, what: &str, f: impl Fn(&TunnelStatus) -> bool) -> TunnelStatus {
        let mut rx = self.tunnel().subscribe();
        let found = tokio::time::timeout(WAIT, rx.wait_for(|s| f(s)))
            .await
            .ok()
            .and_then(|r| r.ok())
            .map(|s| s.clone());
        found.unwrap_or_else(|| {
            panic!(
                "timed out waiting for {what}; status: {:#?}",
                self.tunnel().status()
            )
        })
    }

    async fn failed(&self, code: &str) -> TunnelStatus {
        self.wait_for(&format!("failed {code}"), |s| {
            s.state == State::Failed && s.error.as_ref().is_some_and(|e| e.code == code)
        })
        .await
    }

    async fn online(&self) -> TunnelStatus {
        self.wait_for("online", |s| s.state == State::Online).await
    }

    async fn session(&self) -> String {
        self.app
            .conversation
            .create_session(false, Some("tunnel".into()))
            .await
            .unwrap()
            .session_id
    }

    async fn assistant_texts(&self, session: &str) -> Vec<String> {
        self.app
            .conversation
            .messages(session)
            .await
            .unwrap()
            .into_iter()
            .map(|m| serde_json::to_value(m).unwrap())
            .filter(|m| m["kind"] == "assistant")
            .map(|m| m["text"].as_str().unwrap().to_string())
            .collect()
    }

    async fn stop(self) {
        self.app.shutdown().await;
    }
}

// ------------------------------------------------------------------------------------------
// A tiny HTTP/1.1 client (one request per connection)
// ------------------------------------------------------------------------------------------

async fn http(addr: SocketAddr, raw: String) -> (u16, Value) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(raw.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    tokio::time::timeout(WAIT, s.read_to_end(&mut buf))
        .await
        .expect("answer in time")
        .unwrap();
    let text = String::from_utf8_lossy(&buf).to_string();
    let status: u16 = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or_else(|| panic!("not HTTP: {text:?}"));
    let body = text.split_once("\r\n\r\n").map(|x| x.1).unwrap_or("");
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

async fn post_callback(
    addr: SocketAddr,
    host: &str,
    token: &str,
    session: &str,
    text: &str,
) -> (u16, Value) {
    let task = uuid::Uuid::new_v4().to_string();
    let body = json!({
        "task_id": task, "session_id": session, "status": "message",
        "message_id": uuid::Uuid::new_v4().to_string(), "reply_text": text,
    })
    .to_string();
    http(
        addr,
        format!(
            "POST /tasks/{task} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
    .await
}

// ------------------------------------------------------------------------------------------
// A byte relay: what `ssh -R` / a TCP tunnel does. Can drop its connections and stop.
// ------------------------------------------------------------------------------------------

struct Relay {
    addr: SocketAddr,
    target: Arc<Mutex<SocketAddr>>,
    tasks: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: Mutex<Option<JoinHandle<()>>>,
    connections: Arc<AtomicUsize>,
}

impl Relay {
    async fn start(target: SocketAddr) -> Relay {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let r = Relay {
            addr: l.local_addr().unwrap(),
            target: Arc::new(Mutex::new(target)),
            tasks: Arc::default(),
            accept: Mutex::new(None),
            connections: Arc::default(),
        };
        r.run(l);
        r
    }

    fn run(&self, l: TcpListener) {
        let (target, tasks, n) = (
            self.target.clone(),
            self.tasks.clone(),
            self.connections.clone(),
        );
        *self.accept.lock().unwrap() = Some(tokio::spawn(async move {
            while let Ok((mut inbound, _)) = l.accept().await {
                n.fetch_add(1, Ordering::SeqCst);
                let to = *target.lock().unwrap();
                tasks.lock().unwrap().push(tokio::spawn(async move {
                    if let Ok(mut out) = TcpStream::connect(to).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                    }
                }));
            }
        }));
    }

    /// Drops every relayed connection (the tunnel "blips").
    fn drop_connections(&self) {
        for t in self.tasks.lock().unwrap().drain(..) {
            t.abort();
        }
    }

    /// Stops listening and drops everything (the tunnel is down).
    fn stop(&self) {
        if let Some(a) = self.accept.lock().unwrap().take() {
            a.abort();
        }
        self.drop_connections();
    }

    /// Listens again on the same port (the tunnel is back).
    async fn restart(&self) {
        let l = loop {
            match TcpListener::bind(self.addr).await {
                Ok(l) => break l,
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        };
        self.run(l);
    }
}

// ------------------------------------------------------------------------------------------
// A fake ngrok service: muxado over plain TCP, the Auth / Bind / Unbind RPCs, and a public
// "edge" whose connections are handed to the agent as proxy streams — as the real service does.
// ------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
enum Behaviour {
    Accept,
    RejectAuth(&'static str),
    RejectBind(&'static str),
}

type Opener = Arc<tokio::sync::Mutex<Box<dyn TypedOpenClose + Send>>>;

struct FakeNgrok {
    /// Where agents connect (through a relay, so the test can cut the session).
    relay: Relay,
    edge: SocketAddr,
    behaviour: Arc<Mutex<Behaviour>>,
    logins: Arc<Mutex<Vec<String>>>,
    binds: Arc<Mutex<Vec<Value>>>,
    /// The live session's opener and tunnel id (for edge connections).
    live: Arc<Mutex<Option<(Opener, String)>>>,
}

const PROXY_REQ: u32 = 3;

async fn read_json(s: &mut TypedStream) -> Option<Value> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match serde_json::from_slice::<Value>(&buf) {
            Ok(v) => return Some(v),
            Err(e) if e.is_eof() => {}
            Err(_) => return None,
        }
        let n = s.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

async fn reply(s: &mut TypedStream, v: Value) {
    let _ = s.write_all(v.to_string().as_bytes()).await;
    let _ = s.shutdown().await;
}

impl FakeNgrok {
    async fn start(behaviour: Behaviour) -> FakeNgrok {
        let agent_l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let agent_addr = agent_l.local_addr().unwrap();
        let edge_l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let edge = edge_l.local_addr().unwrap();
        let fake = FakeNgrok {
            relay: Relay::start(agent_addr).await,
            edge,
            behaviour: Arc::new(Mutex::new(behaviour)),
            logins: Arc::default(),
            binds: Arc::default(),
            live: Arc::default(),
        };
        let (b, logins, binds, live) = (
            fake.behaviour.clone(),
            fake.logins.clone(),
            fake.binds.clone(),
            fake.live.clone(),
        );
        tokio::spawn(async move {
            while let Ok((tcp, _)) = agent_l.accept().await {
                let (b, logins, binds, live) =
                    (b.clone(), logins.clone(), binds.clone(), live.clone());
                tokio::spawn(async move {
                    let sess = muxado::SessionBuilder::new(tcp).server().start();
                    let typed = muxado::typed::Typed::new(sess);
                    let Ok((hb, _ctl)) = Heartbeat::start(typed, HeartbeatConfig::default()).await
                    else {
                        return;
                    };
                    let (open, mut accept) = hb.split_typed();
                    let opener: Opener = Arc::new(tokio::sync::Mutex::new(Box::new(open)));
                    while let Ok(mut st) = accept.accept_typed().await {
                        let Some(req) = read_json(&mut st).await else {
                            continue;
                        };
                        let behaviour = b.lock().unwrap().clone();
                        match *st.typ() {
                            0 => {
                                let token =
                                    req["Extra"]["AuthToken"].as_str().unwrap_or("").to_string();
                                logins.lock().unwrap().push(token.clone());
                                if let Behaviour::RejectAuth(code) = behaviour {
                                    reply(&mut st, json!({"Error": format!(
                                        "The authtoken you specified is properly formed, but it is invalid.\nYour authtoken: {token}\n{code}\n")})).await;
                                } else {
                                    reply(
                                        &mut st,
                                        json!({"Version": "3", "ClientId": "sess-1", "Extra": {}}),
                                    )
                                    .await;
                                }
                            }
                            1 => {
                                binds.lock().unwrap().push(req.clone());
                                if let Behaviour::RejectBind(code) = behaviour {
                                    let domain =
                                        req["Opts"]["Domain"].as_str().unwrap_or("").to_string();
                                    reply(&mut st, json!({"Error": format!(
                                        "The domain {domain} is not reserved by your account.\n{code}\n")})).await;
                                } else {
                                    *live.lock().unwrap() =
                                        Some((opener.clone(), "tun-1".to_string()));
                                    reply(&mut st, json!({
                                        "Id": "tun-1", "URL": format!("http://localhost:{}", edge.port()),
                                        "Proto": "http", "Opts": req["Opts"], "Extra": {"Token": ""}})).await;
                                }
                            }
                            _ => reply(&mut st, json!({})).await,
                        }
                    }
                });
            }
        });
        let live = fake.live.clone();
        tokio::spawn(async move {
            while let Ok((mut public, _)) = edge_l.accept().await {
                let live = live.lock().unwrap().clone();
                let Some((opener, id)) = live else { continue };
                tokio::spawn(async move {
                    let Ok(mut st) = opener
                        .lock()
                        .await
                        .open_typed(StreamType::clamp(PROXY_REQ))
                        .await
                    else {
                        return;
                    };
                    let header =
                        json!({"Id": id, "ClientAddr": "203.0.113.7:40000", "Proto": "http",
                        "EdgeType": "", "PassthroughTLS": false})
                        .to_string();
                    let _ = st.write_i64_le(header.len() as i64).await;
                    let _ = st.write_all(header.as_bytes()).await;
                    let _ = tokio::io::copy_bidirectional(&mut public, &mut *st).await;
                });
            }
        });
        fake
    }

    fn server_addr(&self) -> String {
        self.relay.addr.to_string()
    }

    fn settings(&self) -> TunnelSettings {
        fast(TunnelSettings {
            ngrok_server_addr: Some(self.server_addr()),
            ngrok_tls: false,
            ..TunnelSettings::default()
        })
    }
}

fn ngrok(authtoken: Option<&str>, domain: Option<&str>) -> TunnelRequest {
    TunnelRequest::Ngrok {
        authtoken: authtoken.map(str::to_string),
        domain: domain.map(str::to_string),
    }
}

/// A TCP server that accepts and never answers (a silent network).
async fn silent_server() -> (SocketAddr, Arc<AtomicUsize>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let n = Arc::new(AtomicUsize::new(0));
    let n2 = n.clone();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            n2.fetch_add(1, Ordering::SeqCst);
            held.push(s);
        }
    });
    (addr, n)
}

async fn until(f: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < WAIT, "timed out");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn closed_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

// ------------------------------------------------------------------------------------------
// ngrok failure paths, no internet
// ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ngrok_without_an_authtoken_fails_at_once_and_contacts_nobody() {
    let (addr, contacted) = silent_server().await;
    let desk = Desk::start(fast(TunnelSettings {
        ngrok_server_addr: Some(addr.to_string()),
        ..TunnelSettings::default()
    }))
    .await;
    assert_eq!(desk.tunnel().status().state, State::Off);
    desk.tunnel().configure(ngrok(None, None)).await.unwrap();
    let s = desk.failed("no_authtoken").await;
    assert!(s
        .error
        .as_ref()
        .unwrap()
        .message
        .contains("NGROK_AUTHTOKEN"));
    assert_eq!(s.next_retry_at, None, "a missing token is not retried");
    assert_eq!(s.callback_url, desk.cb_url);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(contacted.load(Ordering::SeqCst), 0);
    desk.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ngrok_dns_failure_is_named_and_retried() {
    let desk = Desk::start(fast(TunnelSettings {
        ngrok_server_addr: Some("connect.ngrok-test.invalid:443".into()),
        ..TunnelSettings::default()
    }))
    .await;
    desk.tunnel()
        .configure(ngrok(Some("test-token-123"), None))
        .await
        .unwrap();
    let s = desk.failed("dns_failure").await;
    let msg = &s.error.as_ref().unwrap().message;
    assert!(
        msg.contains("DNS failure") && msg.contains("connect.ngrok-test.invalid"),
        "{msg}"
    );
    assert!(s.next_retry_at.is_some(), "network failures are retried");
    // It keeps retrying (attempt count grows).
    desk.wait_for("a later attempt", |s| s.attempt >= 3).await;
    desk.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ngrok_refused_connection_is_named() {
    let desk = Desk::start(fast(TunnelSettings {
        ngrok_server_addr: Some(closed_port().to_string()),
        ..TunnelSettings::default()
    }))
    .await;
    desk.tunnel()
        .configure(ngrok(Some("test-token-123"), None))
        .await
        .unwrap();
    let s = desk.failed("connection_refused").await;
    assert!(s.error.unwrap().message.contains("Connection refused"));
    desk.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ngrok_silent_server_times_out_and_never_blocks_start_up() {
    let (addr, contacted) = silent_server().await;
    let settings = TunnelSettings {
        ngrok_server_addr: Some(addr.to_string()),
        connect_timeout: Duration::from_millis(1500),
        step_timeout: Duration::from_secs(1),
        backoff_initial: Duration::from_secs(5),
        backoff_max: Duration::from_secs(5),
        ..TunnelSettings::default()
    };
    let desk = Desk::start(settings.clone()).await;
    let t0 = Instant::now();
    desk.tunnel()
        .configure(ngrok(Some("test-token-123"), None))
        .await
        .unwrap();
    assert!(
        t0.elapsed() < Duration::from_millis(500),
        "configure returns at once"
    );
    let s = desk.failed("timeout").await;
    let took = t0.elapsed();
    assert!(
        took < Duration::from_secs(4),
        "bounded by our timeout: {took:?}"
    );
    let msg = s.error.unwrap().message;
    assert!(
        msg.contains("TLS handshake") || msg.contains("No answer"),
        "{msg}"
    );
    assert!(contacted.load(Ordering::SeqCst) >= 1);

    // A restart with the tunnel on: the app starts at once, the tunnel connects in the
    // background.
    let dir = tempfile::tempdir().unwrap();
    let first = Desk::start_in(dir.path(), settings.clone()).await;
    first
        .tunnel()
        .configure(ngrok(Some("test-token-123"), None))
        .await
        .unwrap();
    first.stop().await;
    let t0 = Instant::now();
    let again = Desk::start_in(dir.path(), settings).await;
    assert!(
        t0.elapsed() < Duration::from_secs(1),
        "start-up is not blocked: {:?}",
        t0.elapsed()
    );
    assert_eq!(again.tunnel().status().state, State::Connecting);
    assert_eq!(again.tunnel().advertised_callback_url(), again.cb_url);
    again.failed("timeout").await;
    again.stop().await;
    // The local listener never noticed.
    let session = desk.session().await;
    let (st, _) = post_callback(
        desk.cb_addr,
        &desk.cb_addr.to_string(),
        &desk.token(),
        &session,
        "local still works",
    )
    .await;
    assert_eq!(st, 200);
    desk.stop().await;
}

// ------------------------------------------------------------------------------------------
// ngrok against a fake ngrok service
// ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ngrok_bad_authtoken_is_named_not_retried_and_never_shown() {
    let fake = FakeNgrok::start(Behaviour::RejectAuth("ERR_NGROK_107")).await;
    let desk = Desk::start(fake.settings()).await;
    let token = "2bAdT0kenXYZ_0123456789abcdef";
    desk.tunnel()
        .configure(ngrok(Some(token), None))
        .await
        .unwrap();
    let s = desk.failed("bad_authtoken").await;
    let msg = s.error.as_ref().unwrap().message.clone();
    assert!(
        msg.contains("ERR_NGROK_107") && msg.contains("Your Authtoken"),
        "{msg}"
    );
    assert!(!msg.contains(token), "the token is never shown: {msg}");
    assert!(!s.detail.contains(token));
    assert_eq!(s.next_retry_at, None);
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(
        *fake.logins.lock().unwrap(),
        vec![token.to_string()],
        "one login, no retry"
    );
    assert!(!desk.tunnel().view().to_string().contains(token));
    desk.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ngrok_domain_not_reserved_is_named() {
    let fake = FakeNgrok::start(Behaviour::RejectBind("ERR_NGROK_7118")).await;
    let desk = Desk::start(fake.settings()).await;
    desk.tunnel()
        .configure(ngrok(Some("token-abc-123"), Some("desk.example.test")))
        .await
        .unwrap();
    let s = desk.failed("domain_not_reserved").await;
    let msg = s.error.unwrap().message;
    assert!(
        msg.contains("desk.example.test") && msg.contains("not reserved"),
        "{msg}"
    );
    assert_eq!(
        s.callback_url, desk.cb_url,
        "a dead end advertises loopback"
    );
    assert_eq!(
        fake.binds.lock().unwrap()[0]["Opts"]["Domain"],
        "desk.example.test",
        "the reserved domain is requested"
    );
    desk.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ngrok_tunnel_delivers_callbacks_drops_and_recovers() {
    let fake = FakeNgrok::start(Behaviour::Accept).await;
    // The token comes from NGROK_AUTHTOKEN when none is saved.
    let desk = Desk::start(TunnelSettings {
        env_authtoken: Some("env-token-456".into()),
        ..fake.settings()
    })
    .await;
    assert_eq!(desk.tunnel().view()["config"]["authtoken_source"], "env");
    desk.tunnel().configure(ngrok(None, None)).await.unwrap();
    let s = desk.online().await;
    let public = format!("http://localhost:{}", fake.edge.port());
    assert_eq!(s.public_url.as_deref(), Some(public.as_str()));
    assert_eq!(s.callback_url, public, "advertised while up");
    assert_eq!(desk.tunnel().advertised_callback_url(), public);
    assert_eq!(
        s.assistant_allow.as_ref().unwrap().line,
        format!("STAGEWHISPER_ALLOW_CALLBACK_URLS={public}")
    );
    assert_eq!(fake.logins.lock().unwrap()[0], "env-token-456");
    assert_eq!(desk.tunnel().view()["config"]["authtoken_source"], "env");
    // The bind asked to forward to the callback listener.
    assert_eq!(fake.binds.lock().unwrap()[0]["ForwardsTo"], desk.cb_url);
    // The self-check probe went out through the edge and came back.
    desk.wait_for("verified", |s| s.verified == Some(true))
        .await;

    // A remote assistant posts through the public edge.
    let session = desk.session().await;
    let host = format!("localhost:{}", fake.edge.port());
    let (st, body) = post_callback(fake.edge, &host, &desk.token(), &session, "via ngrok").await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(desk.assistant_texts(&session).await, vec!["via ngrok"]);
    let (st, body) = post_callback(fake.edge, &host, "wrong-token-0123456789", &session, "x").await;
    assert_eq!((st, body["error"].as_str()), (401, Some("unauthorized")));
    // The tunnel reaches the callback listener only: the control API is not there.
    let (st, body) = http(
        fake.edge,
        format!(
            "GET /api/settings HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {}\r\nConnection: close\r\n\r\n",
            desk.app.ui_token.get()
        ),
    )
    .await;
    assert_eq!(
        (st, body["error"].as_str()),
        (404, Some("not_found")),
        "{body}"
    );
    let (st, body) = post_callback(fake.edge, "evil.example", &desk.token(), &session, "x").await;
    assert_eq!((st, body["error"].as_str()), (403, Some("bad_host")));

    // The session to ngrok drops: the state says so, it reconnects by itself.
    fake.relay.drop_connections();
    let s = desk
        .wait_for("not online", |s| s.state != State::Online)
        .await;
    assert!(
        s.error.as_ref().is_none_or(|e| e.code == "connection_lost"),
        "{s:#?}"
    );
    assert_eq!(
        s.callback_url, public,
        "still advertised while it reconnects"
    );
    let s = desk.online().await;
    assert_eq!(s.public_url.as_deref(), Some(public.as_str()));
    let (st, _) = post_callback(fake.edge, &host, &desk.token(), &session, "after the drop").await;
    assert_eq!(st, 200);
    assert_eq!(
        desk.assistant_texts(&session).await,
        vec!["via ngrok", "after the drop"]
    );
    assert!(fake.logins.lock().unwrap().len() >= 2);

    // Off: loopback again, and the public Host is refused.
    let v = desk.tunnel().stop().await;
    assert_eq!(v["state"], "off");
    assert_eq!(desk.tunnel().advertised_callback_url(), desk.cb_url);
    let (st, _) = post_callback(desk.cb_addr, &host, &desk.token(), &session, "x").await;
    assert_eq!(st, 403);
    desk.stop().await;
}

// ------------------------------------------------------------------------------------------
// External URL
// ------------------------------------------------------------------------------------------

fn external(url: &str, secs: Option<u64>) -> TunnelRequest {
    TunnelRequest::External {
        url: url.to_string(),
        check_interval_secs: secs,
        verify: true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_url_is_verified_goes_down_and_recovers() {
    let desk = Desk::start(fast(TunnelSettings::default())).await;
    let relay = Relay::start(desk.cb_addr).await;
    let origin = format!("http://127.0.0.1:{}", relay.addr.port());
    let v = desk
        .tunnel()
        .configure(external(&format!("{origin}/"), Some(2)))
        .await
        .unwrap();
    assert_eq!(v["config"]["url"], origin.as_str(), "stored canonical");
    let s = desk.online().await;
    assert_eq!(s.verified, Some(true));
    assert_eq!(s.callback_url, origin);
    assert!(s.detail.contains("signed probe"), "{}", s.detail);
    let session = desk.session().await;
    let host = relay.addr.to_string();
    let (st, _) = post_callback(
        relay.addr,
        &host,
        &desk.token(),
        &session,
        "through the relay",
    )
    .await;
    assert_eq!(st, 200);
    assert_eq!(
        desk.assistant_texts(&session).await,
        vec!["through the relay"]
    );

    // Throttling applies through the tunnel; the right token still works meanwhile.
    let mut last = 0;
    for _ in 0..11 {
        last = post_callback(relay.addr, &host, "nope-nope-nope-nope", &session, "x")
            .await
            .0;
    }
    assert_eq!(last, 429);
    let (st, _) = post_callback(relay.addr, &host, &desk.token(), &session, "still in").await;
    assert_eq!(st, 200);

    // Down: named (connection refused), retried, the public URL stays advertised meanwhile.
    relay.stop();
    let s = desk.failed("connection_refused").await;
    assert!(s.next_retry_at.is_some());
    assert_eq!(s.callback_url, origin);
    assert_eq!(s.verified, Some(false));
    // The local listener is untouched.
    let (st, _) = post_callback(
        desk.cb_addr,
        &desk.cb_addr.to_string(),
        &desk.token(),
        &session,
        "local",
    )
    .await;
    assert_eq!(st, 200);
    // Back.
    relay.restart().await;
    let s = desk.online().await;
    assert_eq!(s.verified, Some(true));

    // Check now.
    let before = s.checked_at.clone();
    tokio::time::sleep(Duration::from_millis(20)).await;
    desk.tunnel().check_now().await;
    desk.wait_for("a fresh check", |s| s.checked_at != before)
        .await;
    desk.stop().await;
}

/// An HTTP server answering every request with `status`.
async fn answering(status: u16) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut buf = [0u8; 4096];
                let _ = s.read(&mut buf).await;
                let _ = s
                    .write_all(
                        format!(
                            "HTTP/1.1 {status} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
                        )
                        .as_bytes(),
                    )
                    .await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_url_pointing_elsewhere_is_named() {
    let desk = Desk::start(fast(TunnelSettings::default())).await;
    for (status, code) in [
        (404, "probe_not_arrived"),
        (502, "tunnel_upstream_failed"),
        (301, "redirected"),
    ] {
        let other = answering(status).await;
        desk.tunnel()
            .configure(external(
                &format!("http://127.0.0.1:{}", other.port()),
                None,
            ))
            .await
            .unwrap();
        let s = desk.failed(code).await;
        if status != 301 {
            assert!(
                s.error.unwrap().message.contains(&desk.cb_url),
                "names what to forward to"
            );
        }
        assert_eq!(
            s.callback_url, desk.cb_url,
            "never verified: loopback advertised"
        );
    }
    // https against a plain-HTTP tunnel: TLS fails, clearly.
    let relay = Relay::start(desk.cb_addr).await;
    desk.tunnel()
        .configure(external(
            &format!("https://127.0.0.1:{}", relay.addr.port()),
            None,
        ))
        .await
        .unwrap();
    desk.failed("tls_failed").await;
    // Nothing there at all.
    desk.tunnel()
        .configure(external(&format!("http://{}", closed_port()), None))
        .await
        .unwrap();
    desk.failed("connection_refused").await;
    // Not an origin.
    let e = desk
        .tunnel()
        .configure(external("https://desk.example.net/callbacks", None))
        .await
        .unwrap_err();
    assert_eq!(e.code(), "invalid_url");
    desk.stop().await;
}

// ------------------------------------------------------------------------------------------
// Control API routes
// ------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_api_routes() {
    use hyper::Method;
    let desk = Desk::start(fast(TunnelSettings {
        ngrok_server_addr: Some(closed_port().to_string()),
        ..TunnelSettings::default()
    }))
    .await;
    let relay = Relay::start(desk.cb_addr).await;
    let (s, v) = desk.api(Method::GET, "/api/tunnel", Value::Null).await;
    assert_eq!((s, v["state"].as_str()), (200, Some("off")));
    assert_eq!(v["callback_url"], desk.cb_url.as_str());
    assert_eq!(v["local_callback_url"], desk.cb_url.as_str());
    let origin = format!("http://127.0.0.1:{}", relay.addr.port());
    let (s, v) = desk
        .api(
            Method::POST,
            "/api/tunnel",
            json!({"kind": "external", "url": origin, "wait_secs": 10}),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(v["state"], "online", "{v:#}");
    assert_eq!(v["callback_url"], origin.as_str());
    assert_eq!(
        v["assistant_allow"]["line"],
        format!("STAGEWHISPER_ALLOW_CALLBACK_URLS={origin}")
    );
    // The advertised URL: settings and the assistant link's callback target follow.
    let (_, settings) = desk.api(Method::GET, "/api/settings", Value::Null).await;
    assert_eq!(settings["callback_url"], origin.as_str());
    assert_eq!(settings["local_callback_url"], desk.cb_url.as_str());
    until(|| desk.app.callback_target.url() == origin).await;

    let (s, v) = desk
        .api(
            Method::POST,
            "/api/tunnel",
            json!({"kind": "external", "url": "ftp://x"}),
        )
        .await;
    assert_eq!((s, v["error"].as_str()), (400, Some("invalid_url")));
    let (s, v) = desk
        .api(
            Method::POST,
            "/api/tunnel",
            json!({"kind": "ngrok", "authtoken": "with space"}),
        )
        .await;
    assert_eq!((s, v["error"].as_str()), (400, Some("invalid_field")));
    let (s, _) = desk.api(Method::PUT, "/api/tunnel", Value::Null).await;
    assert_eq!(s, 405);
    let (s, _) = desk.api(Method::GET, "/api/tunnel/nope", Value::Null).await;
    assert_eq!(s, 404);
    // ngrok with a token: saved 0600, reported as set, never returned. (No ngrok service
    // here: it is pointed at a closed port.)
    let (s, v) = desk
        .api(
            Method::POST,
            "/api/tunnel",
            json!({"kind": "ngrok", "authtoken": "saved-token-789", "domain": "desk.example.test"}),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(v["config"]["authtoken_source"], "saved");
    assert_eq!(v["config"]["domain"], "desk.example.test");
    assert!(!v.to_string().contains("saved-token-789"));
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let m = std::fs::metadata(desk.data_dir.join("ngrok_authtoken")).unwrap();
        assert_eq!(m.permissions().mode() & 0o777, 0o600);
    }
    let (s, v) = desk.api(Method::DELETE, "/api/tunnel", Value::Null).await;
    assert_eq!((s, v["state"].as_str()), (200, Some("off")));
    assert_eq!(v["config"]["enabled"], false);
    assert_eq!(v["config"]["authtoken_set"], true, "stop keeps the token");
    until(|| desk.app.callback_target.url() == desk.cb_url).await;
    let (s, v) = desk
        .api(Method::DELETE, "/api/tunnel/authtoken", Value::Null)
        .await;
    assert_eq!(
        (s, v["config"]["authtoken_set"].as_bool()),
        (200, Some(false))
    );
    assert!(!desk.data_dir.join("ngrok_authtoken").exists());
    let (s, _) = desk
        .api(Method::POST, "/api/tunnel/check", Value::Null)
        .await;
    assert_eq!(s, 200);
    desk.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn advertised_url_follows_the_tunnel() {
    let desk = Desk::start(fast(TunnelSettings::default())).await;
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let lines: Arc<Mutex<Vec<String>>> = Arc::default();
    let (s2, l2) = (seen.clone(), lines.clone());
    desk.tunnel()
        .on_callback_url(move |u| s2.lock().unwrap().push(u));
    desk.tunnel()
        .on_event_line(move |l| l2.lock().unwrap().push(l));
    let relay = Relay::start(desk.cb_addr).await;
    let origin = format!("http://127.0.0.1:{}", relay.addr.port());
    desk.tunnel()
        .configure(external(&origin, Some(2)))
        .await
        .unwrap();
    desk.online().await;
    // (A watch channel keeps the latest value only: let the followers see `online` before
    // moving on, as a person would.)
    until(|| {
        seen.lock().unwrap().len() == 2
            && lines
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains("\"online\""))
    })
    .await;
    desk.tunnel().stop().await;
    until(|| seen.lock().unwrap().len() == 3).await;
    until(|| {
        lines
            .lock()
            .unwrap()
            .last()
            .is_some_and(|l| l.contains("\"off\""))
    })
    .await;
    assert_eq!(
        *seen.lock().unwrap(),
        vec![desk.cb_url.clone(), origin.clone(), desk.cb_url.clone()]
    );
    let lines = lines.lock().unwrap().clone();
    let states: Vec<String> = lines
        .iter()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["state"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .filter(|s| s != "connecting")
        .collect();
    assert_eq!(states, vec!["online", "off"], "{lines:#?}");
    let online: Value =
        serde_json::from_str(lines.iter().find(|l| l.contains("\"online\"")).unwrap()).unwrap();
    assert_eq!(online["event"], "tunnel");
    assert_eq!(online["callback_url"], origin.as_str());
    assert_eq!(
        online["assistant_allow"],
        format!("STAGEWHISPER_ALLOW_CALLBACK_URLS={origin}")
    );
    desk.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_url_without_verification() {
    // `ssh -R` bound to the assistant host's loopback: only that host can reach the URL, so
    // the app cannot probe it; the user turns verification off.
    let desk = Desk::start(fast(TunnelSettings::default())).await;
    let (s, v) = desk
        .api(
            hyper::Method::POST,
            "/api/tunnel",
            json!({"kind": "external", "url": "http://127.0.0.1:18080", "verify": false}),
        )
        .await;
    assert_eq!(s, 200);
    assert_eq!(v["state"], "online", "{v:#}");
    assert_eq!(v["verified"], Value::Null);
    assert_eq!(v["config"]["verify"], false);
    assert_eq!(v["callback_url"], "http://127.0.0.1:18080");
    assert!(v["detail"].as_str().unwrap().contains("without checking"));
    // A relay on some port standing in for the assistant host's end: the Host it carries
    // (the entered origin's) is accepted.
    let relay = Relay::start(desk.cb_addr).await;
    let session = desk.session().await;
    let (st, body) = post_callback(
        relay.addr,
        "127.0.0.1:18080",
        &desk.token(),
        &session,
        "unverified",
    )
    .await;
    assert_eq!(st, 200, "{body}");
    assert_eq!(desk.assistant_texts(&session).await, vec!["unverified"]);
    desk.stop().await;
}
