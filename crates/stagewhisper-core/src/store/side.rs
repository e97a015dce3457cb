//! Writes of the small tables beside the conversation (BYO's jobs, turns and replay guard, the
//! outbox's notices and the event streams' cursors), through the one writer thread.
//!
//! Such a write is a list of statements ([`Stmt`]) queued with [`Store::queue_write`] (or
//! [`Store::write`], which also waits): the writer thread takes whatever is queued into its
//! next commit, beside the conversation's units, so it has the same group commit and the same
//! durability. Each write runs inside a savepoint of its own: all of its statements or none,
//! and one that fails (a constraint, say) fails alone, without the conversation's units of the
//! same commit. Its answer, once the commit is through, is how many rows each statement
//! changed. Writes are committed in the order they were queued.

use super::{Store, StoreError};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, OnceLock};
use std::task::{Context, Poll};
use tokio::sync::{mpsc, oneshot};

/// One statement of a write: its SQL (prepared once by the writer and kept) and its arguments.
#[derive(Debug, Clone)]
pub struct Stmt {
    pub(super) sql: &'static str,
    pub(super) args: Vec<Arg>,
}

impl Stmt {
    pub fn new(sql: &'static str) -> Stmt {
        Stmt {
            sql,
            args: Vec::new(),
        }
    }

    /// Binds the next parameter.
    pub fn bind(mut self, arg: impl Into<Arg>) -> Stmt {
        self.args.push(arg.into());
        self
    }
}

/// An owned statement argument.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    Null,
    Int(i64),
    Text(String),
}

impl From<i64> for Arg {
    fn from(v: i64) -> Arg {
        Arg::Int(v)
    }
}

impl From<bool> for Arg {
    fn from(v: bool) -> Arg {
        Arg::Int(v as i64)
    }
}

impl From<&str> for Arg {
    fn from(v: &str) -> Arg {
        Arg::Text(v.to_string())
    }
}

impl From<String> for Arg {
    fn from(v: String) -> Arg {
        Arg::Text(v)
    }
}

impl<T: Into<Arg>> From<Option<T>> for Arg {
    fn from(v: Option<T>) -> Arg {
        v.map_or(Arg::Null, Into::into)
    }
}

/// Rows changed by each statement of a write, in order.
pub type Changes = Vec<u64>;

/// A queued write and where its answer goes.
pub(super) struct SideWrite {
    pub(super) stmts: Vec<Stmt>,
    pub(super) answer: oneshot::Sender<Result<Changes, StoreError>>,
}

/// The queue between the store's users and the writer thread.
pub(super) struct SideQueue {
    tx: mpsc::UnboundedSender<SideWrite>,
    /// Taken by the writer thread when it starts.
    rx: Mutex<Option<mpsc::UnboundedReceiver<SideWrite>>>,
    /// Wakes the writer thread (set once it runs; a write queued before waits for its start).
    wake: OnceLock<Box<dyn Fn() + Send + Sync>>,
}

impl Default for SideQueue {
    fn default() -> SideQueue {
        let (tx, rx) = mpsc::unbounded_channel();
        SideQueue {
            tx,
            rx: Mutex::new(Some(rx)),
            wake: OnceLock::new(),
        }
    }
}

impl SideQueue {
    /// A queue no writer will ever take (a read-only store).
    pub(super) fn closed() -> SideQueue {
        let queue = SideQueue::default();
        drop(queue.take_receiver());
        queue
    }

    pub(super) fn take_receiver(&self) -> Option<mpsc::UnboundedReceiver<SideWrite>> {
        self.rx.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    pub(super) fn set_wake(&self, wake: impl Fn() + Send + Sync + 'static) {
        let _ = self.wake.set(Box::new(wake));
    }
}

/// The answer of a queued write (see [`Store::queue_write`]).
pub struct Written(oneshot::Receiver<Result<Changes, StoreError>>);

impl Future for Written {
    type Output = Result<Changes, StoreError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        Pin::new(&mut self.0)
            .poll(cx)
            .map(|r| r.unwrap_or(Err(StoreError::WriterStopped)))
    }
}

impl Store {
    /// Queues `stmts` for the writer's next commit (all of them or none) and returns their
    /// answer. Writes are committed in the order they were queued, so a caller that queues
    /// under its own lock keeps its order without holding the lock while it waits.
    pub fn queue_write(&self, stmts: Vec<Stmt>) -> Written {
        let (answer, rx) = oneshot::channel();
        if self.side.tx.send(SideWrite { stmts, answer }).is_ok() {
            if let Some(wake) = self.side.wake.get() {
                wake();
            }
        }
        // A closed queue drops the write, and its answer says the writer stopped.
        Written(rx)
    }

    /// Writes `stmts` through the writer (see [`Store::queue_write`]) and waits for the commit.
    pub async fn write(&self, stmts: Vec<Stmt>) -> Result<Changes, StoreError> {
        self.queue_write(stmts).await
    }
}
