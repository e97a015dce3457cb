//! Search and long-conversation benchmark (not a test): the release `stagewhisper-headless`
//! binary on a database holding one chat of 100,000 messages.
//!
//! `cargo bench -p stagewhisper-headless --bench archive [-- --messages N --queries N]`
//!
//! 1. starts the binary on a fresh temp data dir (migrations), makes a chat through the control
//!    API, stops it; fills the chat with N messages (default 100,000; ~25 words each from a
//!    fixed vocabulary, so some words are rare and some are in most rows) in one transaction
//!    of the database file, the full-text index kept by its triggers as in the app;
//! 2. starts the binary again and measures over loopback HTTP (keep-alive):
//!    - `GET /api/search?q=…` for rare, common, two-word and prefix queries: p50 / p99; and the
//!      same queries through the MCP tool `search_calls` (`POST /mcp`): p50 / p99;
//!    - `GET /api/sessions/{id}/messages?limit=100`, the newest page: the first request after
//!      start and the median of 20;
//!    - the process's RSS (`/proc/PID/status`) before and after paging through the whole chat
//!      by its `next` links, after a callback to a second, short chat (the writer's first
//!      write), and after one more callback to the long chat (which loads its dedupe index);
//!    - for comparison, the unpaged `GET /api/sessions/{id}/messages` (its size and time) and
//!      the RSS after it.
//!
//! Targets (2 cores): search p99 < 50 ms, first page < 200 ms, RSS after paging < 100 MB.

use serde_json::{json, Value};
use sqlx::{ConnectOptions, Connection};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

struct Proc {
    child: Child,
    ui_url: String,
    ui_token: String,
    callback_url: String,
    callback_token: String,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(bin: &Path, data: &Path) -> Proc {
    let mut child = Command::new(bin)
        .args(["--data-dir", &data.to_string_lossy()])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the binary");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .expect("the ready line");
    let r: Value = serde_json::from_str(&line).expect("a JSON ready line");
    let s = |k: &str| r[k].as_str().unwrap().trim_end_matches('/').to_string();
    Proc {
        ui_url: s("ui_url"),
        ui_token: s("ui_token"),
        callback_url: s("callback_url"),
        callback_token: s("callback_token"),
        child,
    }
}

fn stop(mut p: Proc) {
    let _ = Command::new("kill")
        .args(["-TERM", &p.child.id().to_string()])
        .status();
    let _ = p.child.wait();
}

/// (VmRSS, VmHWM) in MiB.
fn rss(pid: u32) -> (f64, f64) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kib = |key: &str| {
        s.lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (kib("VmRSS:") / 1024.0, kib("VmHWM:") / 1024.0)
}

/// The process's anonymous resident memory (heap, stacks), MiB.
fn rss_anon(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    s.lines()
        .find(|l| l.starts_with("RssAnon:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0)
        / 1024.0
}

/// A small deterministic generator (xorshift), so every run writes the same rows.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// 2,000 made-up words; word `i` is drawn with weight ~1/(i+1) (Zipf-like), so `w0` is in most
/// rows and the words past ~1,500 in a few dozen.
fn vocabulary() -> Vec<String> {
    (0..2000).map(|i| format!("w{i}x")).collect()
}

/// The cumulative weights of [`vocabulary`].
fn weights(n: usize) -> Vec<f64> {
    let mut acc = 0.0;
    (1..=n)
        .map(|i| {
            acc += 1.0 / i as f64;
            acc
        })
        .collect()
}

fn sentence(rng: &mut Rng, words: &[String], cum: &[f64], n: usize) -> String {
    let total = cum[cum.len() - 1];
    (0..n)
        .map(|_| {
            let x = (rng.next() % 1_000_000) as f64 / 1_000_000.0 * total;
            let i = cum.partition_point(|&c| c < x).min(words.len() - 1);
            words[i].as_str()
        })
        .collect::<Vec<_>>()
        .join(" ")
}

async fn fill(db: &Path, sid: &str, n: usize) {
    let mut c = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(db)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .connect()
        .await
        .unwrap();
    let next: i64 = sqlx::query_scalar(
        "SELECT max((SELECT COALESCE(MAX(id), 0) + 1 FROM messages), \
                    (SELECT COALESCE(MAX(id), 0) + 1 FROM events), \
                    COALESCE((SELECT MAX(next) FROM id_floors), 1))",
    )
    .fetch_one(&mut c)
    .await
    .unwrap();
    let words = vocabulary();
    let cum = weights(words.len());
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut tx = c.begin().await.unwrap();
    let t0 = chrono_like(0);
    for i in 0..n as i64 {
        let kind = if i % 2 == 0 { "user" } else { "assistant" };
        let text = sentence(&mut rng, &words, &cum, 25);
        sqlx::query(
            "INSERT INTO messages (id, session_id, kind, text, message_id, task_id, scope, \
             content_key, received_at, sort_key, logged) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)",
        )
        .bind(next + i)
        .bind(sid)
        .bind(kind)
        .bind(&text)
        .bind(format!("bench-{i}"))
        .bind(format!("task-{}", i / 2))
        .bind(format!("task-{}", i / 2))
        .bind(format!("{:032x}", (i as u128) * 0x9e37_79b9_7f4a_7c15))
        .bind(&t0)
        .bind(1_800_000_000_000_000 + i * 1000)
        .execute(&mut *tx)
        .await
        .unwrap();
    }
    tx.commit().await.unwrap();
    sqlx::query("PRAGMA wal_checkpoint(TRUNCATE)")
        .execute(&mut c)
        .await
        .unwrap();
    c.close().await.unwrap();
}

fn chrono_like(_: i64) -> String {
    "2027-01-15T08:00:00.000000Z".to_string()
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

/// `search_calls` over MCP for each of `queries`: the sorted times (ms).
async fn mcp_search(http: &reqwest::Client, ui: &str, token: &str, queries: &[String]) -> Vec<f64> {
    let on: Value = http
        .put(format!("{ui}/api/mcp"))
        .bearer_auth(token)
        .json(&json!({"enabled": true}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let (url, mcp_token) = (on["url"].as_str().unwrap(), on["token"].as_str().unwrap());
    let mut times = Vec::new();
    for (i, q) in queries.iter().enumerate() {
        let t = Instant::now();
        let r: Value = http
            .post(url)
            .bearer_auth(mcp_token)
            .header("Accept", "application/json, text/event-stream")
            .header("MCP-Protocol-Version", "2025-06-18")
            .json(&json!({"jsonrpc": "2.0", "id": i, "method": "tools/call",
                "params": {"name": "search_calls", "arguments": {"query": q, "limit": 10}}}))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        times.push(t.elapsed().as_secs_f64() * 1000.0);
        assert!(
            r["result"]["structuredContent"]["results"].is_array(),
            "{r}"
        );
    }
    times.sort_by(f64::total_cmp);
    times
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let n: usize = arg("--messages").map_or(100_000, |v| v.parse().unwrap());
    let queries: usize = arg("--queries").map_or(200, |v| v.parse().unwrap());
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_stagewhisper-headless"));
    let tmp = tempfile::tempdir().unwrap();
    let data = tmp.path().to_path_buf();
    let http = reqwest::Client::builder().no_proxy().build().unwrap();

    let p = start(&bin, &data);
    let create_chat = |title: &str| {
        let req = http
            .post(format!("{}/api/sessions", p.ui_url))
            .bearer_auth(&p.ui_token)
            .json(&json!({ "title": title }));
        async move {
            let r: Value = req.send().await.unwrap().json().await.unwrap();
            r["session_id"].as_str().unwrap().to_string()
        }
    };
    let sid = create_chat("long chat").await;
    // A second, short chat: its first callback is the writer's first write after the restart
    // (page cache, full-text index), so the long chat's callback shows its index load alone.
    let short = create_chat("short chat").await;
    stop(p);
    let t = Instant::now();
    fill(&data.join("stagewhisper.db"), &sid, n).await;
    let db_mib = std::fs::metadata(data.join("stagewhisper.db"))
        .unwrap()
        .len() as f64
        / 1048576.0;
    println!(
        "filled {n} messages in {:.1} s (database {db_mib:.0} MiB, FTS index included)",
        t.elapsed().as_secs_f64()
    );

    let p = start(&bin, &data);
    let pid = p.child.id();
    let get = |path: String| {
        let http = http.clone();
        let url = format!("{}{path}", p.ui_url);
        let token = p.ui_token.clone();
        async move {
            let t = Instant::now();
            let r = http.get(url).bearer_auth(token).send().await.unwrap();
            assert!(r.status().is_success(), "{path}: {}", r.status());
            let body = r.bytes().await.unwrap();
            (t.elapsed().as_secs_f64() * 1000.0, body)
        }
    };
    let (rss0, _) = rss(pid);

    // The newest page, first request after start.
    let page = format!("/api/sessions/{sid}/messages?limit=100");
    let (first_ms, body) = get(page.clone()).await;
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["items"].as_array().unwrap().len(), 100.min(n));
    let mut warm: Vec<f64> = Vec::new();
    for _ in 0..20 {
        warm.push(get(page.clone()).await.0);
    }
    warm.sort_by(f64::total_cmp);

    // Search.
    let words = vocabulary();
    let mut rng = Rng(42);
    let mut kinds: Vec<(&str, Vec<f64>, usize)> = vec![
        ("rare word", vec![], 0),
        ("common word", vec![], 0),
        ("two words", vec![], 0),
        ("prefix", vec![], 0),
    ];
    let mut asked: Vec<String> = Vec::new();
    for q in 0..queries {
        let (k, text) = match q % 4 {
            0 => (0, words[1500 + (rng.next() % 500) as usize].clone()),
            1 => (1, words[(rng.next() % 5) as usize].clone()),
            2 => (
                2,
                format!(
                    "{} {}",
                    words[(rng.next() % 50) as usize],
                    words[(rng.next() % 200) as usize]
                ),
            ),
            _ => (3, format!("w{}", 10 + rng.next() % 90)),
        };
        asked.push(text.clone());
        let (ms, body) = get(format!("/api/search?q={}", text.replace(' ', "+"))).await;
        let v: Value = serde_json::from_slice(&body).unwrap();
        kinds[k].1.push(ms);
        kinds[k].2 += v["results"].as_array().unwrap().len();
    }
    let mut all: Vec<f64> = kinds.iter().flat_map(|k| k.1.iter().copied()).collect();
    all.sort_by(f64::total_cmp);

    // The same queries as the assistant's MCP tool `search_calls` (JSON-RPC over Streamable
    // HTTP on `/mcp`, its own token; each answer also writes the access log).
    let mcp = mcp_search(&http, &p.ui_url, &p.ui_token, &asked).await;

    // Page through everything.
    let (rss1, _) = rss(pid);
    let t = Instant::now();
    let mut path = Some(page.clone());
    let (mut pages, mut rows) = (0, 0);
    while let Some(pth) = path {
        let (_, body) = get(pth).await;
        let v: Value = serde_json::from_slice(&body).unwrap();
        rows += v["items"].as_array().unwrap().len();
        pages += 1;
        path = v["next"].as_str().map(str::to_string);
    }
    let paging_s = t.elapsed().as_secs_f64();
    assert_eq!(rows, n, "paging saw every message once");
    let (rss2, hwm2) = rss(pid);

    // A callback to the short chat (the writer's first write), then one to the long chat: the
    // writer loads its dedupe index.
    let callback = |session: String, n: u32| {
        let (http, url, token) = (
            http.clone(),
            p.callback_url.clone(),
            p.callback_token.clone(),
        );
        async move {
            let task = format!("00000000-0000-4000-8000-00000000000{n}");
            let r = http
                .post(format!("{url}/tasks/{task}"))
                .bearer_auth(token)
                .json(
                    &json!({"task_id": task, "session_id": session, "status": "message",
                    "message_id": format!("bench-new-{n}"), "reply_text": "one more",
                    "error_code": null, "error_message": null, "model": null}),
                )
                .send()
                .await
                .unwrap();
            assert!(r.status().is_success());
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    };
    callback(short.clone(), 1).await;
    let (rss_w, hwm_w) = rss(pid);
    let anon_w = rss_anon(pid);
    callback(sid.clone(), 2).await;
    let (rss3, hwm3) = rss(pid);
    let anon3 = rss_anon(pid);

    // For comparison: the whole list at once.
    let (whole_ms, body) = get(format!("/api/sessions/{sid}/messages")).await;
    let whole_mib = body.len() as f64 / 1048576.0;
    drop(body);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (rss4, hwm4) = rss(pid);
    stop(p);

    println!();
    println!("search over {n} messages ({queries} queries, 20 results each at most)");
    println!(
        "{:<14} {:>8} {:>8} {:>8} {:>10}",
        "query", "p50 ms", "p99 ms", "max ms", "avg hits"
    );
    for (name, v, hits) in &mut kinds {
        v.sort_by(f64::total_cmp);
        println!(
            "{:<14} {:>8.2} {:>8.2} {:>8.2} {:>10.1}",
            name,
            pct(v, 0.5),
            pct(v, 0.99),
            v[v.len() - 1],
            *hits as f64 / v.len() as f64
        );
    }
    println!(
        "{:<14} {:>8.2} {:>8.2} {:>8.2}   (target p99 < 50 ms)",
        "all",
        pct(&all, 0.5),
        pct(&all, 0.99),
        all[all.len() - 1]
    );
    println!(
        "{:<14} {:>8.2} {:>8.2} {:>8.2}   (MCP search_calls, limit 10; target p99 < 50 ms)",
        "mcp",
        pct(&mcp, 0.5),
        pct(&mcp, 0.99),
        mcp[mcp.len() - 1]
    );
    println!();
    println!(
        "newest page (limit=100): first request {first_ms:.1} ms, warm p50 {:.1} ms (target < 200 ms)",
        pct(&warm, 0.5)
    );
    println!("paging through all: {pages} pages in {paging_s:.1} s");
    println!("RSS MiB: after start {rss0:.1}; after search {rss1:.1}; after paging {rss2:.1} (peak {hwm2:.1}; target < 100)");
    println!("RSS MiB after a callback to a short chat (the writer's first write): {rss_w:.1} (peak {hwm_w:.1})");
    println!("RSS MiB after one callback to the long chat (its dedupe index loaded): {rss3:.1} (peak {hwm3:.1}; the load: {:+.1}, of which anonymous {:+.1})", rss3 - rss_w, anon3 - anon_w);
    println!("unpaged GET …/messages: {whole_mib:.1} MiB in {whole_ms:.0} ms; RSS after {rss4:.1} (peak {hwm4:.1})");
}
