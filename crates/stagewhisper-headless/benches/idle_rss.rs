//! Idle memory of the headless build, side by side with `stagewhisper --headless`.
//!
//! `cargo bench -p stagewhisper-headless --bench idle_rss [-- --idle-secs N] [--desktop PATH]
//! [--bin PATH]`
//! starts the release `stagewhisper-headless` binary (built by cargo for this bench, or the one
//! given with `--bin`, e.g. an older build to compare) on a fresh
//! temp data dir, waits for its ready line, lets it idle, then posts one callback (to a chat made
//! through the control API), loads the UI page with the files it references and the chat's
//! messages, lets it idle again, and reads `VmRSS` / `RssAnon` / `RssFile` from
//! `/proc/PID/status` after each phase.
//! The desktop binary (`stagewhisper`, the same core with Tauri linked) is measured the same way
//! when it is built beside it (`cargo build --release -p stagewhisper`) or given with
//! `--desktop`; it is run as built, so rebuild it first for a fair comparison. Linux only (it
//! reads `/proc`).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
const IO_TIMEOUT: Duration = Duration::from_secs(10);

fn main() {
    let idle =
        Duration::from_secs(arg("--idle-secs").map_or(4, |v| v.parse().expect("--idle-secs N")));
    let headless = arg("--bin")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_stagewhisper-headless")));
    let desktop = arg("--desktop").map(PathBuf::from).unwrap_or_else(|| {
        headless.with_file_name(format!("stagewhisper{}", std::env::consts::EXE_SUFFIX))
    });

    let mut runs = vec![measure("stagewhisper-headless", &headless, &[], idle)];
    if desktop.is_file() {
        runs.push(measure(
            "stagewhisper --headless",
            &desktop,
            &["--headless"],
            idle,
        ));
    } else {
        println!(
            "({} is not built: `cargo build --release -p stagewhisper` to compare)",
            desktop.display()
        );
    }

    println!();
    println!(
        "idle RSS after {} s in each phase (MiB, from /proc/PID/status)",
        idle.as_secs()
    );
    println!(
        "{:<26} {:<24} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "binary", "phase", "VmRSS", "RssAnon", "RssFile", "VmHWM", "threads"
    );
    for run in &runs {
        for (phase, m) in &run.phases {
            println!(
                "{:<26} {:<24} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>8}",
                run.name,
                phase,
                mib(m.vm_rss),
                mib(m.rss_anon),
                mib(m.rss_file),
                mib(m.vm_hwm),
                m.threads
            );
        }
    }
    println!();
    for run in &runs {
        println!("{}: UI served: {}", run.name, run.ui);
    }
}

/// The value after `name` on the command line (`-- --idle-secs N`, `-- --desktop PATH`).
fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .cloned()
}

fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

struct Run {
    name: &'static str,
    phases: Vec<(&'static str, Mem)>,
    ui: String,
}

/// From `/proc/PID/status`, in KiB.
#[derive(Clone, Copy, Debug, Default)]
struct Mem {
    vm_rss: u64,
    rss_anon: u64,
    rss_file: u64,
    vm_hwm: u64,
    threads: u64,
}

fn read_mem(pid: u32) -> Mem {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_else(|e| panic!("cannot read /proc/{pid}/status (Linux only): {e}"));
    let mut m = Mem::default();
    for line in status.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let n = value
            .split_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(0);
        match key {
            "VmRSS" => m.vm_rss = n,
            "RssAnon" => m.rss_anon = n,
            "RssFile" => m.rss_file = n,
            "VmHWM" => m.vm_hwm = n,
            "Threads" => m.threads = n,
            _ => {}
        }
    }
    m
}

/// Kills the child when dropped (a panicking bench leaves nothing behind).
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn measure(name: &'static str, bin: &Path, extra: &[&str], idle: Duration) -> Run {
    let data = tempfile::Builder::new()
        .prefix("stagewhisper-idle-rss-")
        .tempdir()
        .expect("temp data dir");
    let mut child = Command::new(bin);
    child
        .args(extra)
        .arg("--data-dir")
        .arg(data.path())
        .args([
            "--callback-listen",
            "127.0.0.1:0",
            "--ui-listen",
            "127.0.0.1:0",
        ])
        // As on a machine without a display.
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = Guard(
        child
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display())),
    );
    let pid = child.0.id();
    let ready = read_ready(&mut child.0);
    let field = |k: &str| {
        ready[k]
            .as_str()
            .unwrap_or_else(|| panic!("ready line: {k}"))
    };
    let cb = field("callback_url")
        .trim_start_matches("http://")
        .to_owned();
    let cb_token = field("callback_token").to_owned();
    let ui = field("ui_url")
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    let ui_token = field("ui_token").to_owned();

    let mut phases = Vec::new();
    std::thread::sleep(idle);
    phases.push(("idle after ready", read_mem(pid)));

    // One chat, one callback into it, as an assistant would.
    let (status, body) = http(
        &ui,
        "POST",
        "/api/sessions",
        Some(&ui_token),
        Some(&json!({"title": "idle bench"})),
    );
    assert_eq!(status, 201, "POST /api/sessions: {body}");
    let session: Value = serde_json::from_str(&body).expect("session JSON");
    let session = session["session_id"]
        .as_str()
        .expect("session_id")
        .to_owned();
    let task = uuid::Uuid::new_v4().to_string();
    let (status, body) = http(
        &cb,
        "POST",
        &format!("/tasks/{task}"),
        Some(&cb_token),
        Some(&json!({
            "task_id": task,
            "session_id": session,
            "status": "message",
            "message_id": uuid::Uuid::new_v4().to_string(),
            "reply_text": "One reply to measure the memory after a callback.",
        })),
    );
    assert_eq!(status, 200, "callback: {body}");

    // One UI page load: the page, every file it references, the chat's messages.
    let (status, page) = http(&ui, "GET", "/", None, None);
    assert_eq!(status, 200, "GET /: {page}");
    let assets = referenced_files(&page);
    for path in &assets {
        let (status, _) = http(&ui, "GET", path, None, None);
        assert_eq!(status, 200, "GET {path}");
    }
    let (status, body) = http(
        &ui,
        "GET",
        &format!("/api/sessions/{session}/messages"),
        Some(&ui_token),
        None,
    );
    assert_eq!(status, 200, "GET messages: {body}");
    assert!(body.contains("One reply to measure"), "{body}");
    std::thread::sleep(idle);
    phases.push(("idle after callback + UI", read_mem(pid)));

    let ui_desc = if page.contains("The web UI is not built") {
        "the fallback page (ui/dist not built)".to_owned()
    } else {
        format!("ui/dist ({} referenced files loaded)", assets.len())
    };

    // Graceful stop.
    let _ = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if child.0.try_wait().ok().flatten().is_some() {
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(child);
    Run {
        name,
        phases,
        ui: ui_desc,
    }
}

/// Reads stdout until the JSON ready line (bounded).
fn read_ready(child: &mut Child) -> Value {
    let out = child.stdout.take().expect("stdout piped");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut lines = BufReader::new(out).lines();
        let first = lines.next();
        let _ = tx.send(first);
        // Keep draining (tunnel lines), so the child never blocks on a full pipe.
        for _ in lines {}
    });
    let line = rx
        .recv_timeout(STARTUP_TIMEOUT)
        .expect("no ready line in time")
        .expect("stdout closed before the ready line")
        .expect("reading stdout");
    let v: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
    assert_eq!(v["event"], "ready", "{line}");
    v
}

/// `src="/…"` and `href="/…"` of a page (its scripts, styles, icons).
fn referenced_files(page: &str) -> Vec<String> {
    let mut out = Vec::new();
    for attr in ["src=\"", "href=\""] {
        for (i, _) in page.match_indices(attr) {
            let rest = &page[i + attr.len()..];
            if let Some(end) = rest.find('"') {
                let path = &rest[..end];
                if path.starts_with('/')
                    && !path.starts_with("//")
                    && !out.iter().any(|p| p == path)
                {
                    out.push(path.to_owned());
                }
            }
        }
    }
    out
}

/// One HTTP/1.1 request (`Connection: close`); returns the status and the body.
fn http(
    addr: &str,
    method: &str,
    path: &str,
    bearer: Option<&str>,
    body: Option<&Value>,
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.set_read_timeout(Some(IO_TIMEOUT)).unwrap();
    s.set_write_timeout(Some(IO_TIMEOUT)).unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(t) = bearer {
        req.push_str(&format!("Authorization: Bearer {t}\r\n"));
    }
    if !body.is_empty() {
        req.push_str("Content-Type: application/json\r\n");
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).expect("write request");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read response");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("response head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut payload = raw[split + 4..].to_vec();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status code");
    if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        payload = dechunk(&payload);
    }
    (status, String::from_utf8_lossy(&payload).into_owned())
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = data.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&data[..eol])
            .ok()
            .and_then(|l| usize::from_str_radix(l.split(';').next().unwrap_or("").trim(), 16).ok())
            .unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = eol + 2;
        let end = (start + size).min(data.len());
        out.extend_from_slice(&data[start..end]);
        data = data.get(end + 2..).unwrap_or(&[]);
    }
    out
}
