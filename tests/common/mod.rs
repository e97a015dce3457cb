//! Shared harness of the black-box tests.
//!
//! Spawns the real `stagewhisper` binary (`--headless --data-dir <tempdir>`, both listeners on
//! port 0; see [`bin`] for running the suite against `stagewhisper-headless`), reads its single JSON ready line, and talks to it over HTTP exactly like the
//! assistant (callbacks) and the UI (control API, SSE event stream) do. Every wait is bounded;
//! the child is SIGKILLed when the [`App`] is dropped.
#![allow(dead_code)]

use std::fmt;
use std::future::Future;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::StreamExt;
use serde_json::{json, Value};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The binary under test: `STAGEWHISPER_TEST_BIN` when set (e.g. the `stagewhisper-headless`
/// binary, which takes the same flags), else the binary of the package whose tests include this
/// harness (`stagewhisper`, or `stagewhisper-headless` in that crate's own tests).
pub fn bin() -> String {
    if let Some(path) = std::env::var_os("STAGEWHISPER_TEST_BIN").filter(|p| !p.is_empty()) {
        return path.to_string_lossy().into_owned();
    }
    option_env!("CARGO_BIN_EXE_stagewhisper")
        .or(option_env!("CARGO_BIN_EXE_stagewhisper-headless"))
        .expect("built by cargo test: the package has a stagewhisper binary")
        .to_owned()
}
/// How long the binary may take to print its ready line.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// Upper bound of one ordinary HTTP request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(20);
/// Upper bound of a graceful shutdown.
pub const SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(20);
/// Default bound of the polling helpers.
pub const WAIT: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// The process
// ---------------------------------------------------------------------------------------------

/// The parsed ready line.
#[derive(Clone, Debug)]
pub struct Ready {
    pub line: String,
    pub json: Value,
    /// `http://127.0.0.1:P` (no trailing slash).
    pub callback_url: String,
    /// `127.0.0.1:P`
    pub callback_addr: String,
    pub callback_token: String,
    /// `http://127.0.0.1:Q` (no trailing slash; the ready line itself has one).
    pub ui_url: String,
    /// `127.0.0.1:Q`
    pub ui_addr: String,
    pub ui_token: String,
    pub data_dir: PathBuf,
}

pub fn parse_ready(line: &str) -> Result<Ready, String> {
    let json: Value = serde_json::from_str(line.trim())
        .map_err(|e| format!("ready line is not JSON ({e}): {line:?}"))?;
    if json["event"] != "ready" {
        return Err(format!("ready line has no \"event\":\"ready\": {line}"));
    }
    let field = |k: &str| -> Result<String, String> {
        json[k]
            .as_str()
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
            .ok_or_else(|| format!("ready line: `{k}` missing or not a non-empty string: {line}"))
    };
    let callback_url = field("callback_url")?.trim_end_matches('/').to_owned();
    let ui_url = field("ui_url")?.trim_end_matches('/').to_owned();
    let addr = |url: &str| -> Result<String, String> {
        url.strip_prefix("http://")
            .map(str::to_owned)
            .ok_or_else(|| format!("not an http:// URL: {url}"))
    };
    Ok(Ready {
        line: line.to_owned(),
        callback_addr: addr(&callback_url)?,
        ui_addr: addr(&ui_url)?,
        callback_url,
        ui_url,
        callback_token: field("callback_token")?,
        ui_token: field("ui_token")?,
        data_dir: PathBuf::from(field("data_dir")?),
        json,
    })
}

/// A running child with its captured stdout lines and stderr.
pub struct Proc {
    pub child: Child,
    pub stdout: Arc<Mutex<Vec<String>>>,
    pub stdout_eof: Arc<AtomicBool>,
    pub stderr: Arc<Mutex<String>>,
}

const STDERR_CAP: usize = 64 * 1024;

impl Proc {
    /// Spawns the binary with exactly these arguments and extra environment variables.
    pub fn spawn(args: &[String], envs: &[(String, String)]) -> Proc {
        let bin = bin();
        let mut cmd = Command::new(&bin);
        cmd.args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .env_remove("STAGEWHISPER_DATA_DIR");
        for (k, v) in envs {
            cmd.env(k, v);
        }
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot spawn {bin} {args:?}: {e}"));
        let stdout = Arc::new(Mutex::new(Vec::new()));
        let stdout_eof = Arc::new(AtomicBool::new(false));
        let stderr = Arc::new(Mutex::new(String::new()));
        {
            let out = child.stdout.take().expect("stdout piped");
            let lines = stdout.clone();
            let eof = stdout_eof.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(out);
                let mut buf = Vec::new();
                loop {
                    buf.clear();
                    match reader.read_until(b'\n', &mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => {
                            let line = String::from_utf8_lossy(&buf);
                            let line = line.strip_suffix('\n').unwrap_or(&line);
                            let line = line.strip_suffix('\r').unwrap_or(line);
                            lines.lock().unwrap().push(line.to_owned());
                        }
                    }
                }
                eof.store(true, Ordering::SeqCst);
            });
        }
        {
            let mut err = child.stderr.take().expect("stderr piped");
            let sink = stderr.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 8192];
                loop {
                    match err.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            let mut s = sink.lock().unwrap();
                            s.push_str(&String::from_utf8_lossy(&buf[..n]));
                            if s.len() > STDERR_CAP {
                                let mut cut = s.len() - STDERR_CAP / 2;
                                while !s.is_char_boundary(cut) {
                                    cut += 1;
                                }
                                s.replace_range(..cut, "…");
                            }
                        }
                    }
                }
            });
        }
        Proc {
            child,
            stdout,
            stdout_eof,
            stderr,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn stdout_lines(&self) -> Vec<String> {
        self.stdout.lock().unwrap().clone()
    }

    pub fn stderr_tail(&self) -> String {
        let s = self.stderr.lock().unwrap();
        let mut start = s.len().saturating_sub(6000);
        while !s.is_char_boundary(start) {
            start += 1;
        }
        s[start..].to_owned()
    }

    /// Waits for the ready line (bounded); panics with stderr if the child exits first.
    pub async fn wait_ready(&mut self) -> Ready {
        let deadline = Instant::now() + STARTUP_TIMEOUT;
        loop {
            if let Some(line) = self.stdout.lock().unwrap().first().cloned() {
                return parse_ready(&line)
                    .unwrap_or_else(|e| panic!("{e}\n--- stderr ---\n{}", self.stderr_tail()));
            }
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                self.wait_stdout_eof(Duration::from_secs(2)).await;
                if let Some(line) = self.stdout.lock().unwrap().first().cloned() {
                    return parse_ready(&line).unwrap_or_else(|e| panic!("{e}"));
                }
                panic!(
                    "stagewhisper exited ({status}) before printing its ready line\n--- stderr ---\n{}",
                    self.stderr_tail()
                );
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "no ready line within {STARTUP_TIMEOUT:?}\n--- stderr ---\n{}",
                    self.stderr_tail()
                );
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// Polls for exit; `None` on timeout (the child keeps running).
    pub async fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return Some(status);
            }
            if Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub async fn wait_stdout_eof(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while !self.stdout_eof.load(Ordering::SeqCst) {
            if Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        true
    }

    /// Sends a signal by name (`TERM`, `INT`, `KILL`) through the shell's `kill` builtin.
    pub fn signal(&self, sig: &str) {
        let status = Command::new("sh")
            .arg("-c")
            .arg(format!("kill -{sig} {}", self.pid()))
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{sig} {} failed", self.pid());
    }

    /// SIGKILL and reap.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// The binary under test, its private data dir and HTTP clients for both listeners.
pub struct App {
    pub proc: Option<Proc>,
    pub ready: Ready,
    pub data_dir: PathBuf,
    extra_args: Vec<String>,
    pub http: reqwest::Client,
    _tmp: Option<tempfile::TempDir>,
}

pub fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(Duration::from_secs(5))
        .pool_idle_timeout(Duration::from_secs(5))
        .build()
        .expect("reqwest client")
}

impl App {
    /// Starts the binary on a fresh temp data dir.
    pub async fn start() -> App {
        App::start_with(&[]).await
    }

    /// Starts the binary on a fresh temp data dir with extra arguments.
    pub async fn start_with(extra: &[&str]) -> App {
        let tmp = tempfile::Builder::new()
            .prefix("stagewhisper-test-")
            .tempdir()
            .expect("tempdir");
        let data_dir = tmp.path().to_path_buf();
        let mut app =
            App::launch(data_dir, extra.iter().map(|s| s.to_string()).collect(), &[]).await;
        app._tmp = Some(tmp);
        app
    }

    /// Starts the binary on an existing data dir (the caller owns the directory).
    pub async fn launch(
        data_dir: PathBuf,
        extra_args: Vec<String>,
        envs: &[(String, String)],
    ) -> App {
        let args = full_args(&data_dir, &extra_args);
        let mut proc = Proc::spawn(&args, envs);
        let ready = proc.wait_ready().await;
        App {
            proc: Some(proc),
            ready,
            data_dir,
            extra_args,
            http: http_client(),
            _tmp: None,
        }
    }

    pub fn proc(&self) -> &Proc {
        self.proc.as_ref().expect("the binary is not running")
    }

    pub fn proc_mut(&mut self) -> &mut Proc {
        self.proc.as_mut().expect("the binary is not running")
    }

    pub fn pid(&self) -> u32 {
        self.proc().pid()
    }

    pub fn stderr_tail(&self) -> String {
        self.proc
            .as_ref()
            .map(Proc::stderr_tail)
            .unwrap_or_default()
    }

    /// SIGTERM, then wait (bounded) for the exit status.
    pub async fn sigterm(&mut self) -> ExitStatus {
        self.stop_with("TERM").await
    }

    /// Sends `sig`, waits (bounded) for the exit; the process stays in `self.proc` for
    /// inspection of its output until the next start.
    pub async fn stop_with(&mut self, sig: &str) -> ExitStatus {
        let proc = self.proc_mut();
        proc.signal(sig);
        match proc.wait_exit(SHUTDOWN_TIMEOUT).await {
            Some(status) => status,
            None => {
                let tail = proc.stderr_tail();
                proc.kill9();
                panic!("no exit within {SHUTDOWN_TIMEOUT:?} after SIG{sig}\n--- stderr ---\n{tail}")
            }
        }
    }

    /// SIGKILL (no chance to clean up).
    pub fn kill9(&mut self) {
        if let Some(p) = self.proc.as_mut() {
            p.kill9();
        }
    }

    /// Starts the binary again on the same data dir with the same arguments. If it is still
    /// running it is first stopped gracefully (SIGTERM) and must exit 0.
    pub async fn restart(&mut self) {
        let running = matches!(
            self.proc.as_mut().map(|p| p.child.try_wait()),
            Some(Ok(None))
        );
        if running {
            let status = self.sigterm().await;
            assert!(
                status.success(),
                "graceful stop before restart exited {status}\n--- stderr ---\n{}",
                self.stderr_tail()
            );
        }
        self.proc = None;
        let args = full_args(&self.data_dir, &self.extra_args);
        let mut proc = Proc::spawn(&args, &[]);
        self.ready = proc.wait_ready().await;
        self.proc = Some(proc);
        // The old ports are gone: drop pooled connections.
        self.http = http_client();
    }

    /// SIGKILL, then start again on the same data dir.
    pub async fn kill9_and_restart(&mut self) {
        self.kill9();
        self.restart().await;
    }

    pub fn cb(&self) -> CbClient {
        CbClient {
            http: self.http.clone(),
            base: self.ready.callback_url.clone(),
            token: self.ready.callback_token.clone(),
        }
    }

    pub fn ui(&self) -> UiClient {
        UiClient {
            http: self.http.clone(),
            base: self.ready.ui_url.clone(),
            token: self.ready.ui_token.clone(),
        }
    }

    /// POST a callback body to `/tasks/{body.task_id}` with the right token.
    pub async fn post(&self, body: &Value) -> Resp {
        self.cb().post(body).await
    }

    // ---- control API conveniences -------------------------------------------------------

    pub async fn create_chat(&self) -> String {
        let r = self
            .ui()
            .post("/api/sessions", &json!({"title": "test chat"}))
            .await;
        assert_eq!(r.status, 201, "POST /api/sessions: {r}");
        assert_eq!(
            r.json["session"]["session_id"], r.json["session_id"],
            "POST /api/sessions answers the session too: {r}"
        );
        r.json["session_id"]
            .as_str()
            .unwrap_or_else(|| panic!("POST /api/sessions: no session_id: {r}"))
            .to_owned()
    }

    /// Creates a call; returns (chat session id, insights session id).
    pub async fn create_call(&self) -> (String, String) {
        let r = self
            .ui()
            .post("/api/calls", &json!({"title": "test call"}))
            .await;
        assert_eq!(r.status, 201, "POST /api/calls: {r}");
        let sid = r.json["session_id"]
            .as_str()
            .unwrap_or_else(|| panic!("POST /api/calls: no session_id: {r}"))
            .to_owned();
        let isid = r.json["insights_session_id"]
            .as_str()
            .unwrap_or_else(|| panic!("POST /api/calls: no insights_session_id: {r}"))
            .to_owned();
        assert_eq!(isid, format!("insights:{sid}"), "POST /api/calls: {r}");
        assert_eq!(
            r.json["session"]["session_id"],
            sid.as_str(),
            "POST /api/calls answers the session too: {r}"
        );
        assert_eq!(r.json["session"]["is_call"], true, "POST /api/calls: {r}");
        (sid, isid)
    }

    pub async fn end_call(&self, sid: &str) -> Resp {
        self.ui()
            .post(&format!("/api/calls/{sid}/end"), &json!({}))
            .await
    }

    pub async fn delete_session(&self, sid: &str) -> Resp {
        self.ui().delete(&format!("/api/sessions/{sid}")).await
    }

    async fn list(&self, sid: &str, what: &str) -> Vec<Value> {
        let r = self.ui().get(&format!("/api/sessions/{sid}/{what}")).await;
        assert_eq!(r.status, 200, "GET {what}: {r}");
        r.json
            .as_array()
            .unwrap_or_else(|| panic!("GET {what}: not an array: {r}"))
            .clone()
    }

    /// `GET /api/sessions/{sid}/messages`
    pub async fn messages(&self, sid: &str) -> Vec<Value> {
        self.list(sid, "messages").await
    }

    /// `GET /api/sessions/{sid}/insights`
    pub async fn insights(&self, sid: &str) -> Vec<Value> {
        self.list(sid, "insights").await
    }

    /// `GET /api/sessions/{sid}/typing`
    pub async fn typing(&self, sid: &str) -> Vec<Value> {
        self.list(sid, "typing").await
    }

    /// A readable dump of everything the UI would show for a session.
    pub async fn dump(&self, sid: &str) -> String {
        let ui = self.ui();
        let mut out = String::new();
        for what in ["messages", "insights", "typing"] {
            let r = ui.get(&format!("/api/sessions/{sid}/{what}")).await;
            out.push_str(&format!("--- {what} of {sid} ({}) ---\n", r.status));
            match r.json.as_array() {
                Some(items) if what == "typing" => {
                    for t in items {
                        out.push_str(&format!("  {t}\n"));
                    }
                }
                Some(items) => out.push_str(&dump_entries(items)),
                None => out.push_str(&format!("  {}\n", r.text)),
            }
        }
        out
    }

    pub async fn rotate_callback_token(&self) -> String {
        let r = self
            .ui()
            .post("/api/settings/callback-token/rotate", &json!({}))
            .await;
        assert_eq!(r.status, 200, "rotate: {r}");
        r.json["callback_token"]
            .as_str()
            .unwrap_or_else(|| panic!("rotate: no callback_token: {r}"))
            .to_owned()
    }

    /// Opens `/api/events`.
    pub async fn events(&self, opts: SseOpts) -> EventStream {
        EventStream::connect(self, opts).await
    }
}

fn full_args(data_dir: &Path, extra: &[String]) -> Vec<String> {
    let mut args = vec![
        "--headless".to_owned(),
        "--data-dir".to_owned(),
        data_dir.to_string_lossy().into_owned(),
        "--callback-listen".to_owned(),
        "127.0.0.1:0".to_owned(),
        "--ui-listen".to_owned(),
        "127.0.0.1:0".to_owned(),
    ];
    args.extend(extra.iter().cloned());
    args
}

// ---------------------------------------------------------------------------------------------
// HTTP
// ---------------------------------------------------------------------------------------------

/// A response with its body read and parsed (`json` is `Null` when the body is not JSON).
#[derive(Clone, Debug)]
pub struct Resp {
    pub what: String,
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub text: String,
    pub json: Value,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
    }
    pub fn is_duplicate(&self) -> bool {
        self.json["duplicate"] == true
    }
    pub fn is_ignored(&self) -> bool {
        self.json["ignored"] == true
    }
}

impl fmt::Display for Resp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut body = self.text.clone();
        if body.len() > 2000 {
            let mut cut = 2000;
            while !body.is_char_boundary(cut) {
                cut -= 1;
            }
            body.truncate(cut);
            body.push('…');
        }
        write!(f, "{} → {} {}", self.what, self.status, body)
    }
}

async fn into_resp(what: String, r: reqwest::Response) -> Resp {
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let text = r
        .text()
        .await
        .unwrap_or_else(|e| panic!("{what}: reading the body: {e}"));
    let json = serde_json::from_str(&text).unwrap_or(Value::Null);
    Resp {
        what,
        status,
        headers,
        text,
        json,
    }
}

fn describe_body(body: &Value) -> String {
    let mut s = body.to_string();
    if s.len() > 300 {
        let mut cut = 300;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

/// The assistant's side: POSTs to the callback listener.
#[derive(Clone)]
pub struct CbClient {
    pub http: reqwest::Client,
    pub base: String,
    pub token: String,
}

impl CbClient {
    pub fn with_token(&self, token: &str) -> CbClient {
        CbClient {
            token: token.to_owned(),
            ..self.clone()
        }
    }

    /// POST `body` to `/tasks/{body.task_id}`.
    pub async fn post(&self, body: &Value) -> Resp {
        let task = body["task_id"]
            .as_str()
            .expect("body has no task_id: use post_to")
            .to_owned();
        self.post_to(&task, body).await
    }

    /// POST `body` to `/tasks/{task_id}`; panics on a transport error.
    pub async fn post_to(&self, task_id: &str, body: &Value) -> Resp {
        self.try_post_to(task_id, body).await.unwrap_or_else(|e| {
            panic!(
                "POST /tasks/{task_id} {}: transport error: {e}",
                describe_body(body)
            )
        })
    }

    /// Like `post_to` but returns transport errors (used while the binary gets killed).
    pub async fn try_post_to(&self, task_id: &str, body: &Value) -> Result<Resp, reqwest::Error> {
        let r = self
            .http
            .post(format!("{}/tasks/{task_id}", self.base))
            .bearer_auth(&self.token)
            .header("content-type", "application/json")
            .body(body.to_string())
            .timeout(REQUEST_TIMEOUT)
            .send()
            .await?;
        let what = format!("POST /tasks/{task_id} {}", describe_body(body));
        Ok(into_resp(what, r).await)
    }

    /// A free-form request to the callback listener.
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        bearer: Option<&str>,
        content_type: Option<&str>,
        body: Option<Vec<u8>>,
    ) -> Resp {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut rb = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .timeout(REQUEST_TIMEOUT);
        if let Some(t) = bearer {
            rb = rb.header("authorization", format!("Bearer {t}"));
        }
        if let Some(ct) = content_type {
            rb = rb.header("content-type", ct);
        }
        let shown = body
            .as_ref()
            .map(|b| {
                let s = String::from_utf8_lossy(&b[..b.len().min(200)]).into_owned();
                format!(" body[{}]={s:?}", b.len())
            })
            .unwrap_or_default();
        if let Some(b) = body {
            rb = rb.body(b);
        }
        let what = format!("{method} {path} (ct={content_type:?}){shown}");
        let r = rb
            .send()
            .await
            .unwrap_or_else(|e| panic!("{what}: transport error: {e}"));
        into_resp(what, r).await
    }
}

/// The UI's side: the control API.
#[derive(Clone)]
pub struct UiClient {
    pub http: reqwest::Client,
    pub base: String,
    pub token: String,
}

impl UiClient {
    pub async fn request(
        &self,
        method: &str,
        path: &str,
        bearer: Option<&str>,
        body: Option<&Value>,
    ) -> Resp {
        let method = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let mut rb = self
            .http
            .request(method.clone(), format!("{}{path}", self.base))
            .timeout(REQUEST_TIMEOUT);
        if let Some(t) = bearer {
            rb = rb.header("authorization", format!("Bearer {t}"));
        }
        if let Some(b) = body {
            rb = rb
                .header("content-type", "application/json")
                .body(b.to_string());
        }
        let what = format!(
            "{method} {path}{}",
            body.map(|b| format!(" {}", describe_body(b)))
                .unwrap_or_default()
        );
        let r = rb
            .send()
            .await
            .unwrap_or_else(|e| panic!("{what}: transport error: {e}"));
        into_resp(what, r).await
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.request("GET", path, Some(&self.token.clone()), None)
            .await
    }

    pub async fn post(&self, path: &str, body: &Value) -> Resp {
        self.request("POST", path, Some(&self.token.clone()), Some(body))
            .await
    }

    pub async fn delete(&self, path: &str) -> Resp {
        self.request("DELETE", path, Some(&self.token.clone()), None)
            .await
    }
}

// ---------------------------------------------------------------------------------------------
// Assertions on answers
// ---------------------------------------------------------------------------------------------

/// `{"ok":false,"error":code,"message":"…"}` with the given status.
#[track_caller]
pub fn assert_error(r: &Resp, status: u16, code: &str) {
    assert_eq!(r.status, status, "expected {status} {code}: {r}");
    assert_eq!(r.json["ok"], false, "expected ok:false: {r}");
    assert_eq!(r.json["error"], code, "expected error {code:?}: {r}");
    assert!(
        r.json["message"].as_str().is_some_and(|m| !m.is_empty()),
        "expected a non-empty `message` text: {r}"
    );
}

/// `200 {"ok":true}` — applied (neither duplicate nor ignored).
#[track_caller]
pub fn assert_applied(r: &Resp) {
    assert_eq!(r.status, 200, "expected 200 applied: {r}");
    assert_eq!(r.json["ok"], true, "expected ok:true: {r}");
    assert!(!r.is_duplicate(), "expected applied, got duplicate: {r}");
    assert!(!r.is_ignored(), "expected applied, got ignored: {r}");
}

/// `200 {"ok":true,"duplicate":true}`.
#[track_caller]
pub fn assert_duplicate(r: &Resp) {
    assert_eq!(r.status, 200, "expected 200 duplicate: {r}");
    assert_eq!(r.json["ok"], true, "expected ok:true: {r}");
    assert!(r.is_duplicate(), "expected duplicate:true: {r}");
}

/// `200 {"ok":true,"ignored":true,"reason":"session_ended"}`.
#[track_caller]
pub fn assert_session_ended(r: &Resp) {
    assert_eq!(r.status, 200, "expected 200 session_ended: {r}");
    assert_eq!(
        r.json,
        json!({"ok": true, "ignored": true, "reason": "session_ended"}),
        "expected session_ended: {r}"
    );
}

/// 2xx with `ok:true` (applied, duplicate or harmlessly ignored), but not `session_ended`.
#[track_caller]
pub fn assert_accepted(r: &Resp) {
    assert_eq!(r.status, 200, "expected 200: {r}");
    assert_eq!(r.json["ok"], true, "expected ok:true: {r}");
    assert_ne!(
        r.json["reason"], "session_ended",
        "unexpected session_ended: {r}"
    );
}

// ---------------------------------------------------------------------------------------------
// Callback bodies
// ---------------------------------------------------------------------------------------------

pub fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Shallow-merges the fields of `extra` into `base` (a `null` in `extra` sets the field to null).
pub fn with(mut base: Value, extra: Value) -> Value {
    let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) else {
        panic!("with(): both must be objects");
    };
    for (k, v) in e {
        b.insert(k, v);
    }
    base
}

/// A bare status body.
pub fn status_body(session: &str, task: &str, status: &str) -> Value {
    json!({"task_id": task, "session_id": session, "status": status})
}

/// A `message` callback as the Hermes adapter sends it (without `occurred_at`).
pub fn message(session: &str, task: &str, message_id: &str, text: &str) -> Value {
    json!({
        "task_id": task,
        "session_id": session,
        "status": "message",
        "message_id": message_id,
        "reply_text": text,
        "error_code": null,
        "error_message": null,
        "model": null,
    })
}

/// A `typing` callback for a scope given by `user_message_id` (or none → the task).
pub fn typing(session: &str, task: &str, user_message_id: Option<&str>) -> Value {
    let mut b = status_body(session, task, "typing");
    if let Some(um) = user_message_id {
        b["user_message_id"] = json!(um);
    }
    b
}

/// A `stream` callback carrying one UI-message-stream part.
pub fn stream(session: &str, task: &str, user_message_id: Option<&str>, chunk: Value) -> Value {
    let mut b = status_body(session, task, "stream");
    b["user_message_id"] = json!(user_message_id);
    b["chunk"] = chunk;
    b
}

// ---------------------------------------------------------------------------------------------
// Conversations
// ---------------------------------------------------------------------------------------------

pub fn text_of(m: &Value) -> String {
    m["text"].as_str().unwrap_or("<no text>").to_owned()
}

pub fn texts(items: &[Value]) -> Vec<String> {
    items.iter().map(text_of).collect()
}

pub fn drafts(items: &[Value]) -> Vec<&Value> {
    items.iter().filter(|m| m["draft"] == true).collect()
}

/// One line per entry: `#id [kind draft] sort_key task/message ids: "text"`.
pub fn dump_entries(items: &[Value]) -> String {
    let mut out = String::new();
    if items.is_empty() {
        out.push_str("  (empty)\n");
    }
    for m in items {
        let mut text = text_of(m);
        if text.len() > 160 {
            let mut cut = 160;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
            text.push('…');
        }
        out.push_str(&format!(
            "  #{} [{}{}] sort_key={} task={} message_id={} um={}: {:?}\n",
            m["id"],
            m["kind"].as_str().unwrap_or("insight"),
            if m["draft"] == true { " DRAFT" } else { "" },
            m["sort_key"],
            m["task_id"].as_str().unwrap_or("-"),
            m["message_id"].as_str().unwrap_or("-"),
            m["user_message_id"].as_str().unwrap_or("-"),
            text
        ));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Waiting
// ---------------------------------------------------------------------------------------------

/// Polls `f` every 25 ms until it returns `Ok`; panics after `timeout` with the last `Err`
/// (a description of the state seen).
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        match f().await {
            Ok(v) => return v,
            Err(state) => {
                if Instant::now() > deadline {
                    panic!("timed out after {timeout:?} waiting for {what}; last state:\n{state}");
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Time
// ---------------------------------------------------------------------------------------------

pub fn now_micros() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock")
        .as_micros() as i64
}

fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

fn rfc3339_parts(micros: i64) -> (String, i64) {
    let secs = micros.div_euclid(1_000_000);
    let frac = micros.rem_euclid(1_000_000);
    let (y, mo, d) = civil_from_days(secs.div_euclid(86_400));
    let sod = secs.rem_euclid(86_400);
    (
        format!(
            "{y:04}-{mo:02}-{d:02}T{:02}:{:02}:{:02}",
            sod / 3600,
            sod % 3600 / 60,
            sod % 60
        ),
        frac,
    )
}

/// Whether `v` is an RFC 3339 UTC time with microseconds, as the contract writes every time.
pub fn is_time_micros(v: &Value) -> bool {
    let Some(s) = v.as_str() else { return false };
    let b = s.as_bytes();
    b.len() == 27
        && b[4] == b'-'
        && b[7] == b'-'
        && b[10] == b'T'
        && b[13] == b':'
        && b[16] == b':'
        && b[19] == b'.'
        && b[26] == b'Z'
        && b.iter()
            .enumerate()
            .all(|(i, c)| [4, 7, 10, 13, 16, 19, 26].contains(&i) || c.is_ascii_digit())
}

/// RFC 3339 UTC with microseconds: `2026-11-29T12:36:35.402254Z`.
pub fn rfc3339(micros: i64) -> String {
    let (base, frac) = rfc3339_parts(micros);
    format!("{base}.{frac:06}Z")
}

/// RFC 3339 UTC without a fraction (the fraction is dropped).
pub fn rfc3339_secs(micros: i64) -> String {
    format!("{}Z", rfc3339_parts(micros).0)
}

/// The same instant written with a `+HH:00` offset.
pub fn rfc3339_offset(micros: i64, offset_hours: i64) -> String {
    let (base, frac) = rfc3339_parts(micros + offset_hours * 3_600_000_000);
    let sign = if offset_hours < 0 { '-' } else { '+' };
    format!("{base}.{frac:06}{sign}{:02}:00", offset_hours.abs())
}

// ---------------------------------------------------------------------------------------------
// Server-sent events
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug, Default)]
pub struct SseEvent {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: String,
}

impl SseEvent {
    /// The `id:` line as a cursor.
    pub fn cursor(&self) -> u64 {
        self.id
            .as_deref()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or_else(|| panic!("event without a numeric id: {self:?}"))
    }

    pub fn json(&self) -> Value {
        serde_json::from_str(&self.data)
            .unwrap_or_else(|e| panic!("event data is not JSON ({e}): {self:?}"))
    }

    /// The type: the `event:` line (else `data.type`).
    pub fn kind(&self) -> String {
        self.event
            .clone()
            .or_else(|| self.json()["type"].as_str().map(str::to_owned))
            .unwrap_or_default()
    }

    /// The entity carried by the event (`data.message`, `data.insight`, `data.typing`,
    /// `data.session`), or the data itself when the payload is flat.
    pub fn payload(&self, key: &str) -> Value {
        let d = self.json();
        match d.get(key) {
            Some(v) if v.is_object() => v.clone(),
            _ => d,
        }
    }

    /// For message events: the message.
    pub fn message(&self) -> Value {
        self.payload("message")
    }

    pub fn insight(&self) -> Value {
        self.payload("insight")
    }

    pub fn typing(&self) -> Value {
        self.payload("typing")
    }

    /// `typing_stopped` reason (top level or inside `typing`).
    pub fn reason(&self) -> Option<String> {
        let d = self.json();
        d["reason"]
            .as_str()
            .or_else(|| d["typing"]["reason"].as_str())
            .map(str::to_owned)
    }

    pub fn short(&self) -> String {
        let mut d = self.data.clone();
        if d.len() > 240 {
            let mut cut = 240;
            while !d.is_char_boundary(cut) {
                cut -= 1;
            }
            d.truncate(cut);
            d.push('…');
        }
        format!(
            "id={} event={} data={d}",
            self.id.as_deref().unwrap_or("-"),
            self.event.as_deref().unwrap_or("-")
        )
    }
}

pub fn dump_events(events: &[SseEvent]) -> String {
    let mut out = String::new();
    if events.is_empty() {
        out.push_str("  (no events)\n");
    }
    for e in events {
        out.push_str(&format!("  {}\n", e.short()));
    }
    out
}

/// Where to start reading `/api/events`.
#[derive(Clone, Debug, Default)]
pub struct SseOpts {
    pub last_event_id: Option<u64>,
    pub after: Option<u64>,
    /// Authenticate with `?access_token=` instead of the header.
    pub token_in_query: bool,
}

impl SseOpts {
    pub fn live() -> SseOpts {
        SseOpts::default()
    }
    pub fn after(n: u64) -> SseOpts {
        SseOpts {
            after: Some(n),
            ..SseOpts::default()
        }
    }
    pub fn last_event_id(n: u64) -> SseOpts {
        SseOpts {
            last_event_id: Some(n),
            ..SseOpts::default()
        }
    }
}

enum SseItem {
    Event(SseEvent),
    Closed(String),
}

/// A live `/api/events` connection, parsed in a background task.
pub struct EventStream {
    rx: tokio::sync::mpsc::UnboundedReceiver<SseItem>,
    task: tokio::task::JoinHandle<()>,
    pub closed: Option<String>,
    pub content_type: String,
}

impl Drop for EventStream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl EventStream {
    /// Opens the stream; `Err` with the answer when it is not 200.
    pub async fn open(app: &App, opts: SseOpts) -> Result<EventStream, Resp> {
        let mut query = Vec::new();
        if let Some(n) = opts.after {
            query.push(format!("after={n}"));
        }
        if opts.token_in_query {
            query.push(format!("access_token={}", app.ready.ui_token));
        }
        let path = if query.is_empty() {
            "/api/events".to_owned()
        } else {
            format!("/api/events?{}", query.join("&"))
        };
        let mut rb = app
            .http
            .get(format!("{}{path}", app.ready.ui_url))
            .header("accept", "text/event-stream");
        if !opts.token_in_query {
            rb = rb.bearer_auth(&app.ready.ui_token);
        }
        if let Some(n) = opts.last_event_id {
            rb = rb.header("last-event-id", n.to_string());
        }
        let what = format!("GET {path} (Last-Event-ID: {:?})", opts.last_event_id);
        let resp = tokio::time::timeout(REQUEST_TIMEOUT, rb.send())
            .await
            .unwrap_or_else(|_| panic!("{what}: no response headers within {REQUEST_TIMEOUT:?}"))
            .unwrap_or_else(|e| panic!("{what}: transport error: {e}"));
        if resp.status().as_u16() != 200 {
            return Err(into_resp(what, resp).await);
        }
        let content_type = resp
            .headers()
            .get("content-type")
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .unwrap_or_default();
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let mut body = resp.bytes_stream();
            let mut buf: Vec<u8> = Vec::new();
            let mut cur = SseEvent::default();
            let mut has_data = false;
            loop {
                let chunk = match body.next().await {
                    Some(Ok(c)) => c,
                    Some(Err(e)) => {
                        let _ = tx.send(SseItem::Closed(format!("transport error: {e}")));
                        return;
                    }
                    None => {
                        let _ = tx.send(SseItem::Closed("end of stream".into()));
                        return;
                    }
                };
                buf.extend_from_slice(&chunk);
                while let Some(pos) = buf.iter().position(|&b| b == b'\n') {
                    let raw: Vec<u8> = buf.drain(..=pos).collect();
                    let line = String::from_utf8_lossy(&raw[..raw.len() - 1]).into_owned();
                    let line = line.strip_suffix('\r').unwrap_or(&line);
                    if line.is_empty() {
                        if has_data || cur.id.is_some() || cur.event.is_some() {
                            let ev = std::mem::take(&mut cur);
                            if tx.send(SseItem::Event(ev)).is_err() {
                                return;
                            }
                        }
                        has_data = false;
                        continue;
                    }
                    if line.starts_with(':') {
                        continue; // comment / keepalive
                    }
                    let (field, value) = match line.split_once(':') {
                        Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
                        None => (line, ""),
                    };
                    match field {
                        "id" => cur.id = Some(value.to_owned()),
                        "event" => cur.event = Some(value.to_owned()),
                        "data" => {
                            if has_data {
                                cur.data.push('\n');
                            }
                            cur.data.push_str(value);
                            has_data = true;
                        }
                        _ => {}
                    }
                }
            }
        });
        Ok(EventStream {
            rx,
            task,
            closed: None,
            content_type,
        })
    }

    /// Opens the stream; panics when it is not 200.
    pub async fn connect(app: &App, opts: SseOpts) -> EventStream {
        match EventStream::open(app, opts).await {
            Ok(s) => s,
            Err(r) => panic!("event stream refused: {r}"),
        }
    }

    /// The next event, or `None` on timeout or when the stream has ended.
    pub async fn next(&mut self, timeout: Duration) -> Option<SseEvent> {
        if self.closed.is_some() {
            return None;
        }
        match tokio::time::timeout(timeout, self.rx.recv()).await {
            Ok(Some(SseItem::Event(e))) => Some(e),
            Ok(Some(SseItem::Closed(why))) => {
                self.closed = Some(why);
                None
            }
            Ok(None) => {
                self.closed = Some("reader gone".into());
                None
            }
            Err(_) => None,
        }
    }

    /// Every event up to and including the first one matching `pred`; panics (with the
    /// events seen) after `timeout`.
    pub async fn until(
        &mut self,
        what: &str,
        timeout: Duration,
        mut pred: impl FnMut(&SseEvent) -> bool,
    ) -> Vec<SseEvent> {
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.next(left).await {
                Some(e) => {
                    let hit = pred(&e);
                    seen.push(e);
                    if hit {
                        return seen;
                    }
                }
                None => panic!(
                    "event stream: {what} not seen within {timeout:?} (stream {}); events seen:\n{}",
                    self.closed
                        .as_deref()
                        .map(|c| format!("closed: {c}"))
                        .unwrap_or_else(|| "open".into()),
                    dump_events(&seen)
                ),
            }
        }
    }

    /// Events until the `message_added` (or `_updated`) of the message with this `message_id`.
    pub async fn until_message(&mut self, message_id: &str) -> Vec<SseEvent> {
        let mid = message_id.to_owned();
        self.until(&format!("message event of {message_id}"), WAIT, move |e| {
            e.kind().starts_with("message_") && e.message()["message_id"] == mid.as_str()
        })
        .await
    }

    /// Reads until the stream ends; `false` if it is still open after `timeout`.
    pub async fn wait_closed(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while self.closed.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let _ = self.next(left).await;
        }
        true
    }
}

// ---------------------------------------------------------------------------------------------
// Raw TCP (for Host headers, stalled clients, oversized bodies)
// ---------------------------------------------------------------------------------------------

#[derive(Debug)]
pub struct RawResponse {
    pub status: Option<u16>,
    pub head: String,
    pub body: String,
    pub elapsed: Duration,
    /// How the read ended: "complete", "eof", "timeout" or an I/O error.
    pub end: String,
}

impl RawResponse {
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
    /// As a [`Resp`] so the common assertions apply.
    pub fn to_resp(&self, what: &str) -> Resp {
        let mut headers = reqwest::header::HeaderMap::new();
        for l in self.head.lines().skip(1) {
            if let Some((k, v)) = l.split_once(':') {
                if let (Ok(k), Ok(v)) = (
                    reqwest::header::HeaderName::from_bytes(k.trim().as_bytes()),
                    reqwest::header::HeaderValue::from_str(v.trim()),
                ) {
                    headers.append(k, v);
                }
            }
        }
        Resp {
            what: format!("{what} [raw: {} after {:?}]", self.end, self.elapsed),
            status: self.status.unwrap_or(0),
            headers,
            text: self.body.clone(),
            json: self.json(),
        }
    }
}

/// A raw HTTP/1.1 client connection.
pub struct RawConn {
    stream: TcpStream,
    started: Instant,
}

impl RawConn {
    pub async fn connect(addr: &str) -> RawConn {
        let stream = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr))
            .await
            .unwrap_or_else(|_| panic!("connect {addr}: timeout"))
            .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
        stream.set_nodelay(true).ok();
        RawConn {
            stream,
            started: Instant::now(),
        }
    }

    /// Writes bytes; a write error (the peer closed early) is returned, not raised.
    pub async fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(bytes).await?;
        self.stream.flush().await
    }

    /// Reads one response (until complete by Content-Length / chunked end, EOF or `timeout`).
    pub async fn read_response(&mut self, timeout: Duration) -> RawResponse {
        read_response(&mut self.stream, self.started, timeout).await
    }
}

async fn read_response<R: AsyncReadExt + Unpin>(
    r: &mut R,
    started: Instant,
    timeout: Duration,
) -> RawResponse {
    let deadline = Instant::now() + timeout;
    let mut buf = Vec::new();
    let mut tmp = [0u8; 16384];
    let end;
    loop {
        if let Some(done) = response_complete(&buf) {
            if done {
                end = "complete".to_owned();
                break;
            }
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            end = "timeout".to_owned();
            break;
        }
        match tokio::time::timeout(left, r.read(&mut tmp)).await {
            Err(_) => {
                end = "timeout".to_owned();
                break;
            }
            Ok(Ok(0)) => {
                end = "eof".to_owned();
                break;
            }
            Ok(Ok(n)) => buf.extend_from_slice(&tmp[..n]),
            Ok(Err(e)) => {
                end = format!("io error: {e}");
                break;
            }
        }
    }
    let elapsed = started.elapsed();
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = match text.split_once("\r\n\r\n") {
        Some((h, b)) => (h.to_owned(), b.to_owned()),
        None => (text.clone(), String::new()),
    };
    let status = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok());
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked { dechunk(&body) } else { body };
    RawResponse {
        status,
        head,
        body,
        elapsed,
        end,
    }
}

/// `Some(true)` when `buf` holds a whole response, `Some(false)`/`None` otherwise.
fn response_complete(buf: &[u8]) -> Option<bool> {
    let pos = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = String::from_utf8_lossy(&buf[..pos]).to_ascii_lowercase();
    let body = &buf[pos + 4..];
    if let Some(cl) = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok())
    {
        return Some(body.len() >= cl);
    }
    if head.contains("transfer-encoding: chunked") {
        return Some(body.ends_with(b"0\r\n\r\n"));
    }
    None
}

fn dechunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    while let Some((size, after)) = rest.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || after.len() < n {
            break;
        }
        out.push_str(&after[..n]);
        rest = after[n..].strip_prefix("\r\n").unwrap_or(&after[n..]);
    }
    out
}

/// Sends `request` on a fresh connection (writing concurrently with reading, so an early
/// answer is seen even while a large body is still being written) and reads the answer.
pub async fn raw_request(addr: &str, request: Vec<u8>, timeout: Duration) -> RawResponse {
    let conn = RawConn::connect(addr).await;
    let started = conn.started;
    let (mut rd, mut wr) = conn.stream.into_split();
    let writer = tokio::spawn(async move {
        for part in request.chunks(64 * 1024) {
            if wr.write_all(part).await.is_err() {
                return;
            }
        }
        let _ = wr.flush().await;
        // Keep the write half open (no FIN) until the response has been read.
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(wr);
    });
    let resp = read_response(&mut rd, started, timeout).await;
    writer.abort();
    resp
}
