//! Hostile connections against the real `stagewhisper-headless` binary (docs/limits.md), on
//! both listeners: idle unauthenticated connections beyond the connection cap, a backlog of
//! bare handshakes, slowloris, 1 MiB header blocks. Through each attack a legitimate callback
//! (a fresh connection, the right bearer) and a legitimate control API request are answered
//! within 1 s — a functional liveness bound (issue: "answered within 1 s"), not a performance
//! figure — and the app's memory (VmRSS) and open file descriptors, sampled from /proc while the
//! attack runs, stay bounded. No mocks: real TCP on loopback, the real binary.
//!
//! The tests run one at a time (a lock): each one holds well over a thousand sockets on a
//! 2-core machine.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use futures_util::{stream, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The liveness bound the issue asks for.
const LIVE: Duration = Duration::from_secs(1);
/// More connections than one listener's cap (1,024 in the app).
const FLOOD: usize = 1_100;
/// Bare handshakes on top (past the ~1,150 where handshakes stopped completing).
const HANDSHAKES: usize = 500;
/// The app's bound per listener, from docs/limits.md: 1,024 connections, 64 more closing (to
/// make room) and one accepted waiting for a place.
const APP_MAX_CONNECTIONS: u64 = 1_024 + 64 + 1;
/// Head room for the app's own descriptors (database, WAL, listeners, runtime).
const FD_SLACK: u64 = 64;
/// Peak VmRSS growth allowed under attack (docs/limits.md): 2 listeners × 1,088 connections ×
/// 48 KiB (hyper's read and write buffers, a head of up to 16 KiB, the task and socket state)
/// is 102 MiB; 128 MiB with the allocator's slack. Without the caps it grows without bound.
const RSS_GROWTH_KIB: u64 = 128 * 1024;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Sets this process's soft descriptor limit (capped at the hard one); returns the hard one.
fn set_own_nofile(soft: Option<u64>) -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain syscalls on a valid, owned struct.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        lim.rlim_cur = soft.unwrap_or(lim.rlim_max).min(lim.rlim_max);
        assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
    }
    lim.rlim_max
}

/// Starts the app the way a desktop session would (soft descriptor limit 1,024, whatever the
/// hard one), then lifts this process's own soft limit: the attackers need thousands.
async fn start_app() -> App {
    set_own_nofile(Some(1024));
    let app = App::start().await;
    let hard = set_own_nofile(None);
    assert!(
        hard >= 4 * (FLOOD + HANDSHAKES) as u64,
        "this test needs a hard RLIMIT_NOFILE of at least {} (have {hard})",
        4 * (FLOOD + HANDSHAKES)
    );
    app
}

fn vm_rss_kib(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn fd_count(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count() as u64)
        .unwrap_or(0)
}

/// The soft and hard "Max open files" of a process.
fn nofile_of(pid: u32) -> (String, String) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/limits")).expect("limits");
    let l = s
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("Max open files");
    let v: Vec<&str> = l.split_whitespace().collect();
    (v[3].to_owned(), v[4].to_owned())
}

/// Samples the app's VmRSS and descriptor count every 50 ms until dropped.
struct Sampler {
    stop: Arc<AtomicBool>,
    max_rss: Arc<AtomicU64>,
    max_fds: Arc<AtomicU64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    fn start(pid: u32) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let max_rss = Arc::new(AtomicU64::new(0));
        let max_fds = Arc::new(AtomicU64::new(0));
        let thread = {
            let (stop, max_rss, max_fds) = (stop.clone(), max_rss.clone(), max_fds.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::SeqCst) {
                    max_rss.fetch_max(vm_rss_kib(pid), Ordering::SeqCst);
                    max_fds.fetch_max(fd_count(pid), Ordering::SeqCst);
                    std::thread::sleep(Duration::from_millis(50));
                }
            })
        };
        Sampler {
            stop,
            max_rss,
            max_fds,
            thread: Some(thread),
        }
    }

    /// (peak VmRSS KiB, peak descriptors).
    fn finish(mut self) -> (u64, u64) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        (
            self.max_rss.load(Ordering::SeqCst),
            self.max_fds.load(Ordering::SeqCst),
        )
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// The attackers run on a runtime of their own (one thread), so the legitimate client's
/// latency is the app's, not this process's scheduling of thousands of attacker tasks.
struct Attacker {
    rt: Option<tokio::runtime::Runtime>,
}

impl Attacker {
    fn new() -> Attacker {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("attacker runtime");
        Attacker { rt: Some(rt) }
    }

    /// Runs `fut` on the attacker runtime; resolves with its output.
    async fn run<T: Send + 'static>(
        &self,
        fut: impl std::future::Future<Output = T> + Send + 'static,
    ) -> T {
        let rt = self.rt.as_ref().expect("running");
        rt.spawn(fut).await.expect("attacker task")
    }

    fn spawn_value<T: Send + 'static>(
        &self,
        fut: impl std::future::Future<Output = T> + Send + 'static,
    ) -> tokio::task::JoinHandle<T> {
        self.rt.as_ref().expect("running").spawn(fut)
    }

    fn spawn(
        &self,
        fut: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        self.rt.as_ref().expect("running").spawn(fut)
    }
}

impl Drop for Attacker {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

struct Baseline {
    pid: u32,
    rss: u64,
    fds: u64,
}

impl Baseline {
    fn of(app: &App) -> Baseline {
        let pid = app.pid();
        Baseline {
            pid,
            rss: vm_rss_kib(pid),
            fds: fd_count(pid),
        }
    }

    /// Peaks within bounds: at most one listener's cap of connections per attacked listener
    /// (plus slack), and bounded memory growth.
    #[track_caller]
    fn check(&self, (rss, fds): (u64, u64), listeners: u64, what: &str) {
        eprintln!(
            "{what}: VmRSS {} → peak {} KiB, fds {} → peak {}",
            self.rss, rss, self.fds, fds
        );
        let fd_cap = self.fds + listeners * APP_MAX_CONNECTIONS + FD_SLACK;
        assert!(
            fds <= fd_cap,
            "{what}: the app held {fds} descriptors (cap {fd_cap})"
        );
        assert!(
            rss <= self.rss + RSS_GROWTH_KIB,
            "{what}: VmRSS grew from {} to {rss} KiB (allowed +{RSS_GROWTH_KIB})",
            self.rss
        );
    }

    /// Once the attackers are gone the descriptors come back (nothing leaks).
    async fn settles(&self, what: &str) {
        let pid = self.pid;
        let base = self.fds;
        wait_for(
            &format!("{what}: descriptors back near {base}"),
            Duration::from_secs(15),
            move || async move {
                let n = fd_count(pid);
                if n <= base + 8 {
                    Ok(())
                } else {
                    Err(format!("{n} descriptors open"))
                }
            },
        )
        .await;
    }
}

/// One legitimate callback on a fresh connection: answered 200 within [`LIVE`] (measured from
/// the start of the TCP connect), and stored.
async fn legit_callback(app: &App, sid: &str, what: &str) -> Duration {
    let addr = app.ready.callback_addr.clone();
    let t = new_id();
    let mid = new_id();
    let body = message(sid, &t, &mid, "still answered").to_string();
    let req = format!(
        "POST /tasks/{t} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        app.ready.callback_token,
        body.len()
    );
    let r = timed_request(&addr, req.into_bytes()).await;
    eprintln!(
        "{what}: legitimate callback {:?} after {:?}",
        r.status, r.elapsed
    );
    assert_eq!(r.status, Some(200), "{what}: legitimate callback: {r:?}");
    assert!(
        r.elapsed <= LIVE,
        "{what}: the legitimate callback took {:?} (bound {LIVE:?})",
        r.elapsed
    );
    let stored = app.messages(sid).await;
    assert!(
        stored.iter().any(|m| m["message_id"] == mid.as_str()),
        "{what}: the answered callback is not stored"
    );
    r.elapsed
}

/// One legitimate control API request on a fresh connection: 200 within [`LIVE`].
async fn legit_api(app: &App, what: &str) -> Duration {
    let addr = app.ready.ui_addr.clone();
    let req = format!(
        "GET /api/sessions HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\
         Connection: close\r\n\r\n",
        app.ready.ui_token
    );
    let r = timed_request(&addr, req.into_bytes()).await;
    eprintln!(
        "{what}: legitimate API request {:?} after {:?}",
        r.status, r.elapsed
    );
    assert_eq!(r.status, Some(200), "{what}: legitimate API request: {r:?}");
    assert!(
        r.elapsed <= LIVE,
        "{what}: the legitimate API request took {:?} (bound {LIVE:?})",
        r.elapsed
    );
    r.elapsed
}

/// A request on a fresh connection, connect included in `elapsed`; waits up to 15 s so a
/// failure reports how long it really took.
async fn timed_request(addr: &str, req: Vec<u8>) -> RawResponse {
    let started = Instant::now();
    let cap = Duration::from_secs(15);
    let stream = match tokio::time::timeout(cap, TcpStream::connect(addr)).await {
        Ok(Ok(s)) => s,
        other => {
            return RawResponse {
                status: None,
                head: String::new(),
                body: String::new(),
                elapsed: started.elapsed(),
                end: format!("connect: {other:?}"),
            }
        }
    };
    let mut r = raw_request_on(stream, req, cap - started.elapsed()).await;
    r.elapsed = started.elapsed();
    r
}

async fn raw_request_on(mut s: TcpStream, req: Vec<u8>, timeout: Duration) -> RawResponse {
    s.set_nodelay(true).ok();
    let started = Instant::now();
    if let Err(e) = s.write_all(&req).await {
        return RawResponse {
            status: None,
            head: String::new(),
            body: String::new(),
            elapsed: started.elapsed(),
            end: format!("write: {e}"),
        };
    }
    let mut buf = Vec::new();
    let mut tmp = [0u8; 8192];
    let deadline = Instant::now() + timeout;
    let end = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, s.read(&mut tmp)).await {
            Err(_) => break "timeout".to_owned(),
            Ok(Ok(0)) => break "eof".to_owned(),
            Ok(Ok(n)) => buf.extend_from_slice(&tmp[..n]),
            Ok(Err(e)) => break format!("io error: {e}"),
        }
    };
    let text = String::from_utf8_lossy(&buf).into_owned();
    let (head, body) = text
        .split_once("\r\n\r\n")
        .map(|(h, b)| (h.to_owned(), b.to_owned()))
        .unwrap_or((text.clone(), String::new()));
    let status = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok());
    RawResponse {
        status,
        head,
        body,
        elapsed: started.elapsed(),
        end,
    }
}

/// `n` connections that each send one unauthenticated `GET /` (answered or not: the attacker
/// does not wait) and then stay open, idle. Returns the open streams.
async fn idle_after_one_get(addr: String, n: usize) -> Vec<TcpStream> {
    let addr = addr.as_str();
    let head = format!("GET / HTTP/1.1\r\nHost: {addr}\r\n\r\n");
    stream::iter(0..n)
        .map(|_| {
            let head = head.clone();
            async move {
                let mut s = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr))
                    .await
                    .ok()?
                    .ok()?;
                s.write_all(head.as_bytes()).await.ok()?;
                Some(s)
            }
        })
        .buffer_unordered(128)
        .filter_map(|s| async move { s })
        .collect()
        .await
}

/// `n` bare TCP handshakes (nothing sent); returns the connected streams and how long the
/// slowest connect took (failures count as the 5 s cap).
async fn bare_handshakes(addr: String, n: usize) -> (Vec<TcpStream>, Duration) {
    let addr = addr.as_str();
    let results: Vec<(Option<TcpStream>, Duration)> = stream::iter(0..n)
        .map(|_| async move {
            let t = Instant::now();
            let s = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(addr))
                .await
                .ok()
                .and_then(Result::ok);
            (s, t.elapsed())
        })
        .buffer_unordered(256)
        .collect()
        .await;
    let slowest = results.iter().map(|(_, d)| *d).max().unwrap_or_default();
    (
        results.into_iter().filter_map(|(s, _)| s).collect(),
        slowest,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_unauthenticated_connections_and_a_handshake_backlog_do_not_starve_either_listener() {
    let _serial = SERIAL.lock().await;
    let app = start_app().await;
    // The app raises its own soft descriptor limit to the hard one at start-up (it was
    // spawned with a soft limit of 1,024).
    let (soft, hard) = nofile_of(app.pid());
    eprintln!("the app's RLIMIT_NOFILE: soft {soft}, hard {hard}");
    let sid = app.create_chat().await;
    let base = Baseline::of(&app);
    let sampler = Sampler::start(base.pid);

    let attacker = Attacker::new();
    let mut held = Vec::new();
    let mut handshakes = Vec::new();
    for (name, addr) in [
        ("callback listener", app.ready.callback_addr.clone()),
        ("control API", app.ready.ui_addr.clone()),
    ] {
        let t = Instant::now();
        let conns = attacker.run(idle_after_one_get(addr.clone(), FLOOD)).await;
        eprintln!(
            "{name}: {} of {FLOOD} idle connections open in {:?}",
            conns.len(),
            t.elapsed()
        );
        held.extend(conns);
        // The attacker's connections are open, answered and idle (the app takes a moment to
        // get through a thousand new connections in a debug build).
        tokio::time::sleep(Duration::from_millis(500)).await;
        // While those are held: the attacked listener still answers at once.
        if addr == app.ready.callback_addr {
            legit_callback(&app, &sid, name).await;
        } else {
            legit_api(&app, name).await;
        }
        let (conns, slowest) = attacker
            .run(bare_handshakes(addr.clone(), HANDSHAKES))
            .await;
        eprintln!(
            "{name}: {} of {HANDSHAKES} bare handshakes completed, slowest {slowest:?}",
            conns.len()
        );
        handshakes.push((name, conns.len()));
        held.extend(conns);
        let what = format!("{name}, after the handshakes");
        if addr == app.ready.callback_addr {
            legit_callback(&app, &sid, &what).await;
        } else {
            legit_api(&app, &what).await;
        }
    }
    legit_callback(&app, &sid, "idle flood on both").await;
    legit_api(&app, "idle flood on both").await;
    assert_eq!(soft, hard, "the app's RLIMIT_NOFILE soft limit");
    for (name, done) in handshakes {
        assert_eq!(
            done, HANDSHAKES,
            "{name}: handshakes past the connection cap must still complete"
        );
    }
    base.check(sampler.finish(), 2, "idle flood");
    drop(held);
    base.settles("idle flood").await;
}

/// One slowloris connection until `stop`: a request head one byte every `every`, reconnecting
/// whenever the app cuts it. Counts the cuts.
async fn slowloris(addr: String, every: Duration, stop: Arc<AtomicBool>, cuts: Arc<AtomicU64>) {
    let head = format!("GET / HTTP/1.1\r\nHost: {addr}\r\nX-Slow: ");
    while !stop.load(Ordering::SeqCst) {
        let Ok(Ok(mut s)) =
            tokio::time::timeout(Duration::from_secs(5), TcpStream::connect(&addr)).await
        else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let mut i = 0usize;
        let mut tmp = [0u8; 512];
        loop {
            if stop.load(Ordering::SeqCst) {
                return;
            }
            let byte = head.as_bytes().get(i).copied().unwrap_or(b'a');
            i += 1;
            if s.write_all(&[byte]).await.is_err() {
                cuts.fetch_add(1, Ordering::SeqCst);
                break;
            }
            // Wait `every`, noticing an answer or a close from the app meanwhile.
            match tokio::time::timeout(every, s.read(&mut tmp)).await {
                Err(_) => {}
                Ok(_) => {
                    cuts.fetch_add(1, Ordering::SeqCst);
                    break;
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_on_both_listeners_does_not_stop_a_legitimate_callback() {
    let _serial = SERIAL.lock().await;
    let app = start_app().await;
    let sid = app.create_chat().await;
    let base = Baseline::of(&app);
    let sampler = Sampler::start(base.pid);
    let stop = Arc::new(AtomicBool::new(false));
    let cuts = Arc::new(AtomicU64::new(0));
    let attacker = Attacker::new();
    let mut tasks = Vec::new();
    for addr in [app.ready.callback_addr.clone(), app.ready.ui_addr.clone()] {
        for _ in 0..FLOOD {
            tasks.push(attacker.spawn(slowloris(
                addr.clone(),
                Duration::from_secs(2),
                stop.clone(),
                cuts.clone(),
            )));
        }
    }
    // Let the slow connections pile up past the cap, then ask legitimately, repeatedly.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut worst = Duration::ZERO;
    for round in 0..8 {
        worst = worst.max(legit_callback(&app, &sid, &format!("slowloris round {round}")).await);
        worst = worst.max(legit_api(&app, &format!("slowloris round {round}")).await);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        let _ = t.await;
    }
    eprintln!(
        "slowloris: worst legitimate answer {worst:?}; the app cut {} slow connections",
        cuts.load(Ordering::SeqCst)
    );
    base.check(sampler.finish(), 2, "slowloris");
    base.settles("slowloris").await;
}

/// Sends a request whose head is a 1 MiB header block; returns how the app answered.
async fn huge_head(addr: String) -> RawResponse {
    let mut req = format!("GET / HTTP/1.1\r\nHost: {addr}\r\n").into_bytes();
    let line = format!("X-Pad: {}\r\n", "a".repeat(1016));
    while req.len() < 1024 * 1024 {
        req.extend_from_slice(line.as_bytes());
    }
    req.extend_from_slice(b"\r\n");
    raw_request(&addr, req, Duration::from_secs(15)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1_mib_header_block_is_refused_and_a_legitimate_callback_still_answered() {
    let _serial = SERIAL.lock().await;
    let app = start_app().await;
    let sid = app.create_chat().await;
    let base = Baseline::of(&app);
    let sampler = Sampler::start(base.pid);
    let attacker = Attacker::new();
    let mut attacks = Vec::new();
    for addr in [app.ready.callback_addr.clone(), app.ready.ui_addr.clone()] {
        for _ in 0..32 {
            attacks.push(attacker.spawn_value(huge_head(addr.clone())));
        }
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    legit_callback(&app, &sid, "1 MiB heads").await;
    legit_api(&app, "1 MiB heads").await;
    for a in attacks {
        let r = a.await.expect("attack task");
        assert!(
            r.status == Some(431) || (r.status.is_none() && r.end != "timeout"),
            "a 1 MiB header block must get 431 or a closed connection: {:?} {} after {:?}",
            r.status,
            r.end,
            r.elapsed
        );
    }
    legit_callback(&app, &sid, "after 1 MiB heads").await;
    base.check(sampler.finish(), 2, "1 MiB heads");
    base.settles("1 MiB heads").await;
}
