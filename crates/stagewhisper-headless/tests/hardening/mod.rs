//! Shared by the hardening tests (`disk_full`, `restarts`): a small tmpfs as a data dir, the
//! database opened from the test (integrity, counts), a minimal assistant that accepts
//! `POST /v1/incoming` (real HTTP on loopback, parsed by hand), and bounded requests that
//! return transport errors instead of panicking.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use sqlx::sqlite::SqliteConnectOptions;
use sqlx::{ConnectOptions, Row};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The bound of every request the hardening tests send (a hang fails the test).
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a test that needs root and `mount` cannot run here, if it cannot.
pub fn cannot_mount() -> Option<String> {
    let uid = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().next().map(str::to_owned))
        });
    if uid.as_deref() != Some("0") {
        return Some(format!(
            "not root (uid {}): mounting a tmpfs needs root",
            uid.unwrap_or_else(|| "unknown".into())
        ));
    }
    None
}

/// Skips the calling test (prints why) unless `SW_REQUIRE_TMPFS=1` makes it a failure.
pub fn skip(why: &str) {
    if std::env::var("SW_REQUIRE_TMPFS").is_ok_and(|v| v == "1") {
        panic!("SW_REQUIRE_TMPFS=1 but: {why}");
    }
    eprintln!("SKIPPED: {why}");
    println!("SKIPPED: {why}");
}

/// A tmpfs of a fixed size mounted on a fresh temp directory; unmounted on drop.
pub struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    pub fn mount(size_mib: u64) -> Result<Tmpfs, String> {
        let dir = tempfile::Builder::new()
            .prefix("sw-tmpfs-")
            .tempdir()
            .map_err(|e| format!("tempdir: {e}"))?;
        let out = Command::new("mount")
            .args(["-t", "tmpfs", "-o"])
            .arg(format!("size={size_mib}m,mode=0700"))
            .arg("tmpfs")
            .arg(dir.path())
            .output()
            .map_err(|e| format!("cannot run mount: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "mount -t tmpfs failed ({}): {}",
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        Ok(Tmpfs { dir })
    }

    pub fn path(&self) -> PathBuf {
        self.dir.path().to_path_buf()
    }

    /// Bytes still free (`df`).
    pub fn avail(&self) -> u64 {
        let out = Command::new("df")
            .args(["-B1", "--output=avail"])
            .arg(self.dir.path())
            .output()
            .expect("df");
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .nth(1)
            .and_then(|l| l.trim().parse().ok())
            .expect("df output")
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

/// Writes `path` in 64 KiB pieces until the file system is full (or `limit` bytes); returns
/// the bytes written.
pub fn fill(path: &Path, limit: u64) -> u64 {
    use std::io::Write;
    let mut f = std::fs::File::create(path).expect("create filler");
    let block = vec![0x5au8; 64 * 1024];
    let mut written = 0u64;
    while written < limit {
        match f.write(&block) {
            Ok(0) => break,
            Ok(n) => written += n as u64,
            Err(_) => break,
        }
    }
    let _ = f.sync_all();
    written
}

/// Opens the database file read-write (no create) the way a later start would.
pub async fn open_db(path: &Path) -> Result<sqlx::SqliteConnection, sqlx::Error> {
    SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(false)
        .busy_timeout(Duration::from_secs(5))
        .connect()
        .await
}

/// `PRAGMA integrity_check`: `Ok("ok")` on a sound database.
pub async fn integrity(path: &Path) -> Result<String, String> {
    let mut db = open_db(path).await.map_err(|e| format!("open: {e}"))?;
    let rows = sqlx::query("PRAGMA integrity_check")
        .fetch_all(&mut db)
        .await
        .map_err(|e| format!("integrity_check: {e}"))?;
    Ok(rows
        .iter()
        .map(|r| r.get::<String, _>(0))
        .collect::<Vec<_>>()
        .join("; "))
}

/// The `message_id`s stored in a session.
pub async fn stored_message_ids(path: &Path, session: &str) -> Vec<String> {
    let mut db = open_db(path).await.expect("open the database");
    sqlx::query("SELECT message_id FROM messages WHERE session_id = ? AND message_id IS NOT NULL")
        .bind(session)
        .fetch_all(&mut db)
        .await
        .expect("read message ids")
        .iter()
        .map(|r| r.get::<String, _>(0))
        .collect()
}

/// A bounded JSON request: `Ok((status, body))`, or the transport error (a timeout included).
pub async fn request(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: &str,
    token: &str,
    body: Option<&Value>,
) -> Result<(u16, Value), String> {
    let mut rb = http
        .request(method, url)
        .bearer_auth(token)
        .timeout(CLIENT_TIMEOUT);
    if let Some(b) = body {
        rb = rb
            .header("content-type", "application/json")
            .body(b.to_string());
    }
    let r = rb.send().await.map_err(|e| format!("{url}: {e}"))?;
    let status = r.status().as_u16();
    let text = r.text().await.map_err(|e| format!("{url}: body: {e}"))?;
    Ok((status, serde_json::from_str(&text).unwrap_or(Value::Null)))
}

/// What the minimal assistant received: one entry per `POST /v1/incoming` (the JSON body).
#[derive(Clone, Default)]
pub struct Received(pub Arc<Mutex<Vec<Value>>>);

impl Received {
    pub fn all(&self) -> Vec<Value> {
        self.0.lock().unwrap().clone()
    }
}

/// A minimal assistant on loopback: answers `POST /v1/incoming` with
/// `202 {"status":"accepted"}` and any other request with `200 {"status":"ok"}`.
pub async fn fake_assistant() -> (String, Received) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind the assistant");
    let base = format!("http://{}", listener.local_addr().unwrap());
    let received = Received::default();
    let rec = received.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut sock, _)) = listener.accept().await else {
                return;
            };
            let rec = rec.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut tmp = [0u8; 8192];
                // One request per connection (answered with `connection: close`).
                let head_end = loop {
                    if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        break p + 4;
                    }
                    match sock.read(&mut tmp).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&tmp[..n]),
                    }
                };
                let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
                let len = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .and_then(|v| v.trim().parse::<usize>().ok())
                    .unwrap_or(0);
                while buf.len() < head_end + len {
                    match sock.read(&mut tmp).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&tmp[..n]),
                    }
                }
                let incoming = head.starts_with("post ") && head.contains("/v1/incoming");
                let (status, body) = if incoming {
                    let v: Value =
                        serde_json::from_slice(&buf[head_end..head_end + len]).unwrap_or_default();
                    rec.0.lock().unwrap().push(v);
                    ("202 Accepted", r#"{"status":"accepted"}"#)
                } else {
                    ("200 OK", r#"{"status":"ok"}"#)
                };
                let resp = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = sock.write_all(resp.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    (base, received)
}
