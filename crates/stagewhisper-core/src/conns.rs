//! Connection limits of both listeners (docs/limits.md): who may hold a connection, for how
//! long, and who makes room when the cap is reached.
//!
//! Every peer of a loopback listener is 127.0.0.1 — a tunnel delivers the whole internet from
//! there — so the peer address tells nothing. What does tell callers apart is whether a request
//! on the connection has presented the listener's token (the callback bearer, or the UI token):
//! such a connection is *trusted* for the rest of its life ([`Connection::mark_trusted`]).
//!
//! - A connection that is not trusted gets [`UNTRUSTED_IDLE`] (3 s) from its accept, and from
//!   the end of each answer, to deliver a complete request head; otherwise it is closed. One
//!   clock for idle and slow (slowloris) alike: trickling bytes does not reset it.
//! - A trusted connection keeps the ordinary keep-alive allowance, [`TRUSTED_IDLE`] (10 s).
//! - A request head is at most [`MAX_HEAD_BYTES`] (16 KiB; more is answered `431` and closed).
//! - Each listener holds at most [`max_connections`] (1,024) connections. A new connection is
//!   always accepted: at the cap the app closes one to make room, in this order — the oldest
//!   idle untrusted one, the oldest busy untrusted one, the oldest idle trusted one. A trusted
//!   connection with a request in progress is never closed for room; only when every connection
//!   is one does a new connection wait (in the listen backlog, [`LISTEN_BACKLOG`]).
//! - At start-up the app raises its soft descriptor limit to the hard one ([`raise_fd_limit`]),
//!   and the per-listener cap shrinks when even that leaves too few descriptors.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::Notify;

/// Connections per listener (at most; see [`max_connections`]).
pub const MAX_CONNECTIONS: usize = 1024;
/// How long a connection that has not presented the token may take to deliver a complete
/// request head, from its accept or from the end of its last answer.
pub const UNTRUSTED_IDLE: Duration = Duration::from_secs(3);
/// The keep-alive allowance of a trusted connection between requests (hyper's header read
/// timeout, [`crate::http::READ_TIMEOUT`], enforces the same).
pub const TRUSTED_IDLE: Duration = Duration::from_secs(10);
/// The largest request head (request line and headers); hyper's read buffer is capped at
/// this, and a longer head is answered `431 Request Header Fields Too Large`.
pub const MAX_HEAD_BYTES: usize = 16 * 1024;
/// The listen backlog asked for (the kernel caps it at `net.core.somaxconn`).
pub const LISTEN_BACKLOG: u32 = 4096;
/// Descriptors kept for everything but the two listeners' connections (database, WAL, logs,
/// the tunnel, outgoing requests to the assistant).
const FD_RESERVE: u64 = 256;

/// Binds a loopback listener with [`LISTEN_BACKLOG`].
pub fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = match addr {
        SocketAddr::V4(_) => TcpSocket::new_v4()?,
        SocketAddr::V6(_) => TcpSocket::new_v6()?,
    };
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit (two listeners of 1,024 connections need
/// more than the usual soft 1,024). Returns the soft limit in effect afterwards.
pub fn raise_fd_limit() -> u64 {
    #[cfg(unix)]
    {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit/setrlimit only read and write the struct passed in.
        unsafe {
            if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
                return 1024;
            }
            if lim.rlim_cur < lim.rlim_max {
                let want = libc::rlimit {
                    rlim_cur: lim.rlim_max,
                    rlim_max: lim.rlim_max,
                };
                if libc::setrlimit(libc::RLIMIT_NOFILE, &want) == 0 {
                    lim.rlim_cur = lim.rlim_max;
                } else {
                    tracing::warn!(soft = lim.rlim_cur, "cannot raise the descriptor limit");
                }
            }
        }
        #[allow(clippy::unnecessary_cast)] // `rlim_t` is not u64 on every platform.
        let soft = lim.rlim_cur as u64;
        soft
    }
    #[cfg(not(unix))]
    {
        u64::MAX
    }
}

/// The per-listener cap: [`MAX_CONNECTIONS`], or less when the descriptor limit leaves fewer
/// than that for each of the two listeners.
pub fn max_connections() -> usize {
    let soft = current_fd_limit();
    let per_listener = soft.saturating_sub(FD_RESERVE) / 2;
    (per_listener.min(MAX_CONNECTIONS as u64) as usize).max(16)
}

fn current_fd_limit() -> u64 {
    #[cfg(unix)]
    {
        let mut lim = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: as above.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } == 0 {
            #[allow(clippy::unnecessary_cast)] // as above
            return lim.rlim_cur as u64;
        }
        1024
    }
    #[cfg(not(unix))]
    {
        u64::MAX
    }
}

/// One open connection, as the table sees it.
#[derive(Debug)]
pub struct ConnState {
    id: u64,
    trusted: AtomicBool,
    /// A request is being handled or its answer written.
    busy: AtomicBool,
    /// Milliseconds since the table's epoch at the end of the last answer (or the accept).
    idle_since: AtomicU64,
    /// Picked to make room (closed as soon as its task sees it).
    evicted: AtomicBool,
    close: Notify,
}

impl ConnState {
    pub fn is_trusted(&self) -> bool {
        self.trusted.load(Ordering::Relaxed)
    }

    /// Resolves when the connection is to be closed for room.
    pub async fn evicted(&self) {
        self.close.notified().await
    }
}

/// The request extension naming the connection a request came on (HTTP requests only).
#[derive(Debug, Clone)]
pub struct Connection(Arc<ConnState>);

impl Connection {
    pub(crate) fn from_state(state: Arc<ConnState>) -> Connection {
        Connection(state)
    }

    /// The request presented the listener's token: the connection is trusted from now on.
    pub fn mark_trusted(&self) {
        self.0.trusted.store(true, Ordering::Relaxed);
    }

    pub fn is_trusted(&self) -> bool {
        self.0.is_trusted()
    }

    /// Marks that request's connection trusted, when it came over HTTP.
    pub fn mark<B>(req: &hyper::Request<B>) {
        if let Some(c) = req.extensions().get::<Connection>() {
            c.mark_trusted();
        }
    }
}

/// Ends a request's busy time when dropped (held by the answer's body until it is written,
/// or by the handler if the connection goes away first).
#[derive(Debug)]
pub struct BusyGuard {
    state: Arc<ConnState>,
    table: Arc<ConnTable>,
}

impl Drop for BusyGuard {
    fn drop(&mut self) {
        self.state
            .idle_since
            .store(self.table.now_ms(), Ordering::Relaxed);
        self.state.busy.store(false, Ordering::Release);
    }
}

/// The open connections of one listener.
#[derive(Debug)]
pub struct ConnTable {
    epoch: tokio::time::Instant,
    next_id: AtomicU64,
    conns: Mutex<HashMap<u64, Arc<ConnState>>>,
    untrusted_idle: Duration,
    trusted_idle: Duration,
}

impl Default for ConnTable {
    fn default() -> Self {
        ConnTable::with_limits(UNTRUSTED_IDLE, TRUSTED_IDLE)
    }
}

impl ConnTable {
    /// A table with other idle limits than [`UNTRUSTED_IDLE`] and [`TRUSTED_IDLE`] (tests).
    pub fn with_limits(untrusted_idle: Duration, trusted_idle: Duration) -> ConnTable {
        ConnTable {
            epoch: tokio::time::Instant::now(),
            next_id: AtomicU64::new(0),
            conns: Mutex::new(HashMap::new()),
            untrusted_idle,
            trusted_idle,
        }
    }

    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    pub fn register(&self) -> Arc<ConnState> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(ConnState {
            id,
            trusted: AtomicBool::new(false),
            busy: AtomicBool::new(false),
            idle_since: AtomicU64::new(self.now_ms()),
            evicted: AtomicBool::new(false),
            close: Notify::new(),
        });
        self.lock().insert(id, state.clone());
        state
    }

    pub fn remove(&self, state: &ConnState) {
        self.lock().remove(&state.id);
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<ConnState>>> {
        self.conns.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request begins on `state`: busy until the returned guard is dropped.
    pub fn begin(self: &Arc<Self>, state: &Arc<ConnState>) -> BusyGuard {
        state.busy.store(true, Ordering::Release);
        BusyGuard {
            state: state.clone(),
            table: self.clone(),
        }
    }

    /// Picks the connection to close for room (see the module docs) and tells it to close.
    /// `false` when every connection is trusted and busy.
    pub fn evict_one(&self) -> bool {
        let conns = self.lock();
        let victim = conns
            .values()
            .filter(|c| !c.evicted.load(Ordering::Relaxed))
            .filter_map(|c| {
                let busy = c.busy.load(Ordering::Acquire);
                let class = match (c.is_trusted(), busy) {
                    (false, false) => 0,
                    (false, true) => 1,
                    (true, false) => 2,
                    (true, true) => return None,
                };
                Some(((class, c.idle_since.load(Ordering::Relaxed), c.id), c))
            })
            .min_by_key(|(k, _)| *k)
            .map(|(_, c)| c.clone());
        drop(conns);
        match victim {
            Some(c) => {
                c.evicted.store(true, Ordering::Relaxed);
                c.close.notify_one();
                true
            }
            None => false,
        }
    }

    /// Resolves when `state` has been idle longer than it may be (see the module docs).
    pub async fn idle_deadline(&self, state: &ConnState) {
        loop {
            let limit = if state.is_trusted() {
                self.trusted_idle
            } else {
                self.untrusted_idle
            };
            if state.busy.load(Ordering::Acquire) {
                tokio::time::sleep(limit).await;
                continue;
            }
            let idle_for = Duration::from_millis(
                self.now_ms()
                    .saturating_sub(state.idle_since.load(Ordering::Relaxed)),
            );
            if idle_for >= limit && !state.busy.load(Ordering::Acquire) {
                return;
            }
            tokio::time::sleep(limit.saturating_sub(idle_for)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trusted(t: &Arc<ConnTable>) -> Arc<ConnState> {
        let c = t.register();
        Connection(c.clone()).mark_trusted();
        c
    }

    #[tokio::test]
    async fn room_is_made_untrusted_idle_first_then_untrusted_busy_then_trusted_idle() {
        let t = Arc::new(ConnTable::default());
        let trusted_busy = trusted(&t);
        let _g1 = t.begin(&trusted_busy);
        let trusted_idle = trusted(&t);
        let untrusted_busy = t.register();
        let _g2 = t.begin(&untrusted_busy);
        let old_idle = t.register();
        let new_idle = t.register();
        let picked = |c: &ConnState| c.evicted.load(Ordering::Relaxed);
        for expect in [&old_idle, &new_idle, &untrusted_busy, &trusted_idle] {
            assert!(t.evict_one());
            assert!(picked(expect), "expected connection {} next", expect.id);
        }
        assert!(
            !t.evict_one(),
            "a busy trusted connection is never closed for room"
        );
        assert!(!picked(&trusted_busy));
        // The pick is told to close.
        tokio::time::timeout(Duration::from_secs(1), old_idle.evicted())
            .await
            .expect("notified");
    }

    #[tokio::test]
    async fn untrusted_connections_get_the_short_deadline_trusted_the_keep_alive_one() {
        let (short, long) = (Duration::from_millis(100), Duration::from_millis(400));
        let t = Arc::new(ConnTable::with_limits(short, long));
        let u = t.register();
        let started = tokio::time::Instant::now();
        t.idle_deadline(&u).await;
        assert!(started.elapsed() >= short && started.elapsed() < long);
        let c = trusted(&t);
        let started = tokio::time::Instant::now();
        // Busy for a while (a long answer): the clock starts when it ends.
        let g = t.begin(&c);
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(600)).await;
            drop(g);
        });
        tokio::time::timeout(Duration::from_secs(10), t.idle_deadline(&c))
            .await
            .expect("deadline");
        assert!(started.elapsed() >= Duration::from_millis(600) + long);
    }
}
