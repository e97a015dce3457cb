//! Ingest benchmark (not a test): floods the real callback listener over loopback HTTP/1.1
//! keep-alive with unique `message` callbacks and reports req/s, p50 and p99, side by side in the
//! same run with a bare hyper handler that only parses the JSON and answers 200; then what the
//! store wrote.
//!
//! `cargo bench -p stagewhisper-core --bench ingest [-- --secs 2 --conns 1,64 --rounds 9]`
//! `... -- --profile durable|core|bare` runs that one flood alone (to attach a profiler), and
//! reports the process's CPU time per request beside req/s.
//! `... -- --storage-only` runs only the storage table.
//!
//! Two tables:
//! - speed: each handler's median round, alternating round by round (so a slow moment of the
//!   machine hits all of them), the ratio to bare hyper, and beside each durable row the bytes
//!   the process wrote per request in its rounds (`/proc/self/io` `write_bytes`: what reached
//!   the page cache for the disk, WAL and database alike), the `-wal` file and the data dir
//!   after its last round;
//! - storage: a fresh app per line, a fixed number of callbacks over HTTP, then the idle
//!   writer's round (search index, checkpoint, WAL truncated): bytes written per callback
//!   including that round, the `-wal` file's largest size during the flood (sampled every
//!   5 ms) and after the idle round, and the data dir's size.
//!
//! Targets (2 cores, issue 21): durable ingest >= 0.7x the bare handler's req/s at 1 and at 64
//! connections, p99 < 1 ms at 1 connection; at most 14 KiB written per message callback and
//! 1 KiB per typing callback at 1 connection; the WAL at most 16 MiB; 8,000 short messages in a
//! data dir under 24 MiB.

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use stagewhisper_core::http::{self, serve, Shutdown};
use stagewhisper_core::store::Durability;
use stagewhisper_core::{App, Config};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Args {
    secs: f64,
    conns: Vec<usize>,
    /// Alternating rounds per connection count; each handler's row is its median round.
    rounds: usize,
    /// `--profile durable|core`: run only that one flood (for a profiler), no comparison.
    profile: Option<String>,
    /// `--storage-only`: only the storage table.
    storage_only: bool,
}

fn args() -> Args {
    let mut a = Args {
        secs: 2.0,
        conns: vec![1, 64],
        rounds: 9,
        profile: None,
        storage_only: false,
    };
    let v: Vec<String> = std::env::args().collect();
    let mut i = 1;
    while i < v.len() {
        match v[i].as_str() {
            "--secs" => {
                a.secs = v[i + 1].parse().expect("--secs N");
                i += 1;
            }
            "--conns" => {
                a.conns = v[i + 1]
                    .split(',')
                    .map(|c| c.parse().expect("--conns 1,64"))
                    .collect();
                i += 1;
            }
            "--rounds" => {
                a.rounds = v[i + 1].parse().expect("--rounds N");
                i += 1;
            }
            "--profile" => {
                a.profile = Some(v[i + 1].clone());
                i += 1;
            }
            "--storage-only" => a.storage_only = true,
            _ => {} // cargo bench passes --bench
        }
        i += 1;
    }
    a
}

struct Target {
    addr: SocketAddr,
    token: String,
    session_id: String,
    /// The app's data dir (none for bare hyper).
    dir: Option<std::path::PathBuf>,
}

/// What a flood sends.
#[derive(Clone, Copy, PartialEq)]
enum Body {
    /// A unique `message` (about 70 bytes of text).
    Message,
    /// A `typing` for a new scope (so each one shows an indicator).
    Typing,
}

impl Body {
    fn json(self, task: &str, session_id: &str, n: u64) -> String {
        match self {
            Body::Message => format!(
                r#"{{"task_id":"{task}","session_id":"{session_id}","status":"message","message_id":"bench-{n}","user_message_id":"um-{n}","reply_text":"Benchmark reply number {n}: they said the budget is fifty thousand for Q3.","occurred_at":"2026-11-29T12:35:28.132716Z","error_code":null,"model":null}}"#
            ),
            Body::Typing => format!(
                r#"{{"task_id":"{task}","session_id":"{session_id}","status":"typing","user_message_id":"typing-{n}","label":"thinking","occurred_at":"2026-11-29T12:35:28.132716Z"}}"#
            ),
        }
    }
}

/// Bytes this process has caused to be written to storage (`/proc/self/io` `write_bytes`).
fn write_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/io")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("write_bytes:"))
                .and_then(|v| v.trim().parse().ok())
        })
        .unwrap_or(0)
}

/// Size of a file (0 when absent).
fn file_size(p: &std::path::Path) -> u64 {
    std::fs::metadata(p).map(|m| m.len()).unwrap_or(0)
}

/// Size of the files of a directory, recursively.
fn dir_size(p: &std::path::Path) -> u64 {
    std::fs::read_dir(p)
        .map(|d| {
            d.flatten()
                .map(|e| match e.file_type() {
                    Ok(t) if t.is_dir() => dir_size(&e.path()),
                    _ => e.metadata().map(|m| m.len()).unwrap_or(0),
                })
                .sum()
        })
        .unwrap_or(0)
}

fn wal_of(dir: &std::path::Path) -> std::path::PathBuf {
    dir.join(format!("{}-wal", stagewhisper_core::app::DB_FILE))
}

const MIB: f64 = 1024.0 * 1024.0;

/// CPU time this process has used (user + system, every thread), in microseconds: the figure
/// that tells small costs apart when req/s moves with the machine's other work.
fn cpu_time_us() -> u64 {
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `u` is a valid rusage for getrusage to fill.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) } != 0 {
        return 0;
    }
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    us(u.ru_utime) + us(u.ru_stime)
}

struct Result {
    requests: u64,
    errors: u64,
    elapsed: Duration,
    latencies_us: Vec<u64>,
}

impl Result {
    fn rps(&self) -> f64 {
        self.requests as f64 / self.elapsed.as_secs_f64()
    }
    fn pct(&self, p: f64) -> f64 {
        if self.latencies_us.is_empty() {
            return f64::NAN;
        }
        let i = ((self.latencies_us.len() as f64 - 1.0) * p).round() as usize;
        self.latencies_us[i] as f64 / 1000.0
    }
}

// The allocator the app binary uses (src-tauri/src/main.rs), so the figures are the app's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

static SEQ: AtomicU64 = AtomicU64::new(0);

async fn flood(target: Arc<Target>, conns: usize, secs: f64) -> Result {
    flood_with(target, conns, Limit::Secs(secs), Body::Message).await
}

/// How long a flood runs.
#[derive(Clone, Copy)]
enum Limit {
    Secs(f64),
    /// This many requests in all (shared by the connections).
    Requests(u64),
}

async fn flood_with(target: Arc<Target>, conns: usize, limit: Limit, body: Body) -> Result {
    let deadline = match limit {
        Limit::Secs(s) => Instant::now() + Duration::from_secs_f64(s),
        Limit::Requests(_) => Instant::now() + Duration::from_secs(3600),
    };
    let left = Arc::new(AtomicU64::new(match limit {
        Limit::Requests(n) => n,
        Limit::Secs(_) => u64::MAX,
    }));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let t = target.clone();
        let left = left.clone();
        tasks.push(tokio::spawn(async move {
            let stream = tokio::net::TcpStream::connect(t.addr)
                .await
                .expect("connect");
            stream.set_nodelay(true).unwrap();
            let (mut sender, conn) =
                hyper::client::conn::http1::handshake::<_, Full<Bytes>>(TokioIo::new(stream))
                    .await
                    .expect("handshake");
            tokio::spawn(conn);
            let mut lat = Vec::with_capacity(100_000);
            let mut errors = 0u64;
            let host = t.addr.to_string();
            let auth = format!("Bearer {}", t.token);
            while Instant::now() < deadline
                && left
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1))
                    .is_ok()
            {
                let n = SEQ.fetch_add(1, Ordering::Relaxed);
                let task = uuid::Uuid::new_v4().to_string();
                let req = Request::post(format!("/tasks/{task}"))
                    .header("host", &host)
                    .header("authorization", &auth)
                    .header("content-type", "application/json")
                    .body(Full::new(Bytes::from(body.json(&task, &t.session_id, n))))
                    .unwrap();
                let t0 = Instant::now();
                let resp = sender.send_request(req).await.expect("request");
                let status = resp.status();
                let _ = resp.into_body().collect().await;
                lat.push(t0.elapsed().as_micros() as u64);
                if status != StatusCode::OK {
                    errors += 1;
                }
            }
            (lat, errors)
        }));
    }
    collect(tasks, start).await
}

/// Submits callbacks straight to the conversation from `conns` tasks.
async fn flood_core(app: &App, session_id: &str, conns: usize, secs: f64) -> Result {
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..conns {
        let conv = app.conversation.clone();
        let session_id = session_id.to_string();
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            let mut errors = 0u64;
            while Instant::now() < deadline {
                let n = SEQ.fetch_add(1, Ordering::Relaxed);
                let task = uuid::Uuid::new_v4().to_string();
                let body = format!(
                    r#"{{"session_id":"{session_id}","status":"message","message_id":"bench-{n}","user_message_id":"um-{n}","reply_text":"Benchmark reply number {n}: they said the budget is fifty thousand for Q3.","occurred_at":"2026-11-29T12:35:28.132716Z"}}"#
                );
                let t0 = Instant::now();
                let cb = stagewhisper_core::protocol::parse_callback(&task, body.as_bytes())
                    .expect("valid");
                match conv.submit(cb).await {
                    Ok(stagewhisper_core::conversation::Outcome::Applied) => {}
                    _ => errors += 1,
                }
                lat.push(t0.elapsed().as_micros() as u64);
            }
            (lat, errors)
        }));
    }
    collect(tasks, start).await
}

/// Joins the senders: their latencies (sorted) and error counts.
async fn collect(tasks: Vec<tokio::task::JoinHandle<(Vec<u64>, u64)>>, start: Instant) -> Result {
    let mut latencies_us = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await.unwrap();
        latencies_us.extend(l);
        errors += e;
    }
    let elapsed = start.elapsed();
    latencies_us.sort_unstable();
    Result {
        requests: latencies_us.len() as u64,
        errors,
        elapsed,
        latencies_us,
    }
}

/// The baseline: parse the JSON, answer 200, nothing else.
async fn start_bare() -> Target {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(
        listener,
        |req: Request<hyper::body::Incoming>| async move {
            let body = req.into_body().collect().await.unwrap().to_bytes();
            match serde_json::from_slice::<serde_json::Value>(&body) {
                Ok(_) => http::json_response(StatusCode::OK, &serde_json::json!({"ok": true})),
                Err(_) => http::error(StatusCode::BAD_REQUEST, "invalid_json", "bad"),
            }
        },
        Shutdown::new(),
        Duration::from_secs(1),
    ));
    Target {
        addr,
        token: "unused".into(),
        session_id: "bare".into(),
        dir: None,
    }
}

async fn start_durable(durability: Durability) -> (App, Arc<Target>, String, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = Config::new(dir.path().to_path_buf());
    cfg.durability = durability;
    let app = App::start(cfg).await.expect("app");
    let session = app.conversation.create_session(true, None).await.unwrap();
    let target = Arc::new(Target {
        addr: app
            .callback_url
            .trim_start_matches("http://")
            .parse()
            .unwrap(),
        token: app.callback_token.get(),
        session_id: session.session_id.clone(),
        dir: Some(dir.path().to_path_buf()),
    });
    (app, target, session.session_id, dir)
}

fn main() {
    let a = args();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        if a.storage_only {
            storage_table().await;
            return;
        }
        let (app, durable, session, _dir) = start_durable(Durability::Crash).await;
        // The same app with every commit fsynced (--durability power-loss), for comparison.
        let (app_full, durable_full, _, _dir_full) = start_durable(Durability::PowerLoss).await;
        let bare = Arc::new(start_bare().await);
        if let Some(which) = &a.profile {
            for &c in &a.conns {
                let cpu0 = cpu_time_us();
                let r = match which.as_str() {
                    "durable" => flood(durable.clone(), c, a.secs).await,
                    "core" => flood_core(&app, &session, c, a.secs).await,
                    "bare" => flood(bare.clone(), c, a.secs).await,
                    other => panic!("--profile durable|core|bare, not {other}"),
                };
                let cpu_per_req = (cpu_time_us() - cpu0) as f64 / r.requests.max(1) as f64;
                println!(
                    "{which} {c} conns: {:.0} req/s, p99 {:.3} ms, CPU {cpu_per_req:.1} µs per request (the whole process: load generator, server and writer)",
                    r.rps(),
                    r.pct(0.99)
                );
            }
            app.shutdown().await;
            app_full.shutdown().await;
            return;
        }
        println!(
            "ingest benchmark: {} s per run, {} alternating rounds (median shown), {} cores; durable = WAL synchronous=NORMAL (default, crash-safe), durable-fsync = synchronous=FULL; group commit",
            a.secs,
            a.rounds,
            std::thread::available_parallelism()
                .map(|n| n.get())
                .unwrap_or(0)
        );
        println!("machine load before: {}", loadavg());
        println!(
            "{:<10} {:>6} {:>10} {:>9} {:>9} {:>9} {:>9} {:>8} {:>9} {:>8} {:>8}",
            "handler", "conns", "req/s", "p50 ms", "p99 ms", "p99.9 ms", "max ms", "errors",
            "KiB/req", "WAL MiB", "dir MiB"
        );
        let mut stored_expected = 0;
        for &c in &a.conns {
            // Warm-up for both, then measure alternately.
            let _ = flood(bare.clone(), c, 0.5).await;
            let w = flood(durable.clone(), c, 0.5).await;
            stored_expected += w.requests - w.errors;
            let _ = flood(durable_full.clone(), c, 0.5).await;
            // Alternate the handlers round by round, so a slow moment of the machine hits all
            // of them; report each handler's median round and the median of the per-round ratios.
            let (mut bs, mut ds, mut fs) = (Vec::new(), Vec::new(), Vec::new());
            // Bytes written during each handler's rounds, and requests.
            let mut written = [(0u64, 0u64); 3];
            for _ in 0..a.rounds.max(1) {
                let w0 = write_bytes();
                let b = flood(bare.clone(), c, a.secs).await;
                let w1 = write_bytes();
                let d = flood(durable.clone(), c, a.secs).await;
                let w2 = write_bytes();
                let f = flood(durable_full.clone(), c, a.secs).await;
                let w3 = write_bytes();
                for (k, (bytes, r)) in [(w1 - w0, &b), (w2 - w1, &d), (w3 - w2, &f)]
                    .into_iter()
                    .enumerate()
                {
                    written[k].0 += bytes;
                    written[k].1 += r.requests;
                }
                stored_expected += d.requests - d.errors;
                bs.push(b);
                ds.push(d);
                fs.push(f);
            }
            let ratios = |xs: &[Result]| {
                let mut r: Vec<f64> = xs.iter().zip(&bs).map(|(x, b)| x.rps() / b.rps()).collect();
                r.sort_by(f64::total_cmp);
                (r[r.len() / 2], r[0], r[r.len() - 1])
            };
            let (dr, fr) = (ratios(&ds), ratios(&fs));
            let targets = [&bare, &durable, &durable_full];
            for (k, (name, runs)) in [("bare", &mut bs), ("durable", &mut ds), ("dur-fsync", &mut fs)]
                .into_iter()
                .enumerate()
            {
                runs.sort_by(|x, y| x.rps().total_cmp(&y.rps()));
                let r = &runs[runs.len() / 2];
                let (files, dir) = match &targets[k].dir {
                    Some(d) => (
                        format!("{:.1}", file_size(&wal_of(d)) as f64 / MIB),
                        format!("{:.1}", dir_size(d) as f64 / MIB),
                    ),
                    None => ("-".into(), "-".into()),
                };
                println!(
                    "{:<10} {:>6} {:>10.0} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>8} {:>9.1} {:>8} {:>8}",
                    name,
                    c,
                    r.rps(),
                    r.pct(0.50),
                    r.pct(0.99),
                    r.pct(0.999),
                    r.pct(1.0),
                    r.errors,
                    written[k].0 as f64 / written[k].1.max(1) as f64 / 1024.0,
                    files,
                    dir
                );
            }
            println!(
                "{:<10} {:>6} {:>10.3}x of bare (durable; rounds {:.2}-{:.2}), {:.2}x (dur-fsync; {:.2}-{:.2})",
                "ratio", c, dr.0, dr.1, dr.2, fr.0, fr.1, fr.2
            );
        }
        // The conversation alone (no HTTP): what the rules + group commit sustain.
        for &c in &a.conns {
            let r = flood_core(&app, &session, c, a.secs).await;
            stored_expected += r.requests - r.errors;
            println!(
                "{:<10} {:>6} {:>10.0} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>8}",
                "core-only",
                c,
                r.rps(),
                r.pct(0.50),
                r.pct(0.99),
                r.pct(0.999),
                r.pct(1.0),
                r.errors
            );
        }
        println!("machine load after: {}", loadavg());
        let stored = app
            .conversation
            .messages(&session)
            .await
            .unwrap()
            .len() as u64;
        println!("check: {stored} messages stored, {stored_expected} acknowledged");
        assert_eq!(
            stored, stored_expected,
            "every acknowledged message is stored"
        );
        app.shutdown().await;
        app_full.shutdown().await;
        println!();
        storage_table().await;
    });
}

/// `/proc/loadavg`'s three averages.
fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

/// The storage table: per line a fresh app (default durability), `n` callbacks of one kind
/// over HTTP from `conns` connections, then the idle round; what was written and how big the
/// files are.
async fn storage_table() {
    println!(
        "storage: a fresh app per line; bytes written per callback include the idle round after the flood (search index, checkpoint, WAL truncation); machine load {}",
        loadavg()
    );
    println!(
        "{:<22} {:>6} {:>7} {:>10} {:>9} {:>10} {:>12} {:>13} {:>8}",
        "callbacks",
        "conns",
        "n",
        "req/s",
        "p99 ms",
        "KiB/call",
        "WAL max MiB",
        "WAL idle MiB",
        "dir MiB"
    );
    for (name, body, conns, n) in [
        ("message (70 B text)", Body::Message, 1, 3_000),
        ("typing", Body::Typing, 1, 3_000),
        ("message (70 B text)", Body::Message, 1, 8_000),
        ("message (70 B text)", Body::Message, 64, 20_000),
    ] {
        let (app, target, session, dir) = start_durable(Durability::Crash).await;
        // Whatever the start-up wrote, settled first.
        settle(dir.path()).await;
        let wal = wal_of(dir.path());
        let peak = Arc::new(AtomicU64::new(0));
        let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let sampler = {
            let (wal, peak, sampling) = (wal.clone(), peak.clone(), sampling.clone());
            tokio::spawn(async move {
                while sampling.load(Ordering::Relaxed) {
                    peak.fetch_max(file_size(&wal), Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
        };
        let w0 = write_bytes();
        let r = flood_with(target, conns, Limit::Requests(n), body).await;
        settle(dir.path()).await;
        let written = write_bytes() - w0;
        sampling.store(false, Ordering::Relaxed);
        let _ = sampler.await;
        peak.fetch_max(file_size(&wal), Ordering::Relaxed);
        assert_eq!(r.errors, 0, "{name}: every callback accepted");
        if body == Body::Message {
            let stored = app.conversation.messages(&session).await.unwrap().len() as u64;
            assert_eq!(stored, n, "{name}: every message stored");
        }
        println!(
            "{:<22} {:>6} {:>7} {:>10.0} {:>9.3} {:>10.2} {:>12.1} {:>13.1} {:>8.1}",
            name,
            conns,
            n,
            r.rps(),
            r.pct(0.99),
            written as f64 / n as f64 / 1024.0,
            peak.load(Ordering::Relaxed) as f64 / MIB,
            file_size(&wal) as f64 / MIB,
            dir_size(dir.path()) as f64 / MIB
        );
        app.shutdown().await;
    }
}

/// Waits for the idle writer's round to end: no bytes written for a second (the round starts
/// a quarter second after the last commit), at most 10 s.
async fn settle(_dir: &std::path::Path) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = write_bytes();
    let mut quiet_since = Instant::now();
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = write_bytes();
        if now != last {
            last = now;
            quiet_since = Instant::now();
        } else if quiet_since.elapsed() >= Duration::from_secs(1) {
            return;
        }
    }
}
