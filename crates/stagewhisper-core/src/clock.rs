//! Injectable time. Everything that waits or stamps goes through a [`Clock`], so timer rules
//! (typing leases, auth throttling) are tested deterministically with [`ManualClock`].

use chrono::{DateTime, Utc};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

pub trait Clock: Send + Sync + 'static {
    /// Wall-clock time, used for timestamps and for timers (milliseconds resolution is enough).
    fn now(&self) -> DateTime<Utc>;

    fn now_ms(&self) -> i64 {
        self.now().timestamp_millis()
    }
}

pub type SharedClock = Arc<dyn Clock>;

#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
}

/// A clock that only moves when told to.
#[derive(Debug)]
pub struct ManualClock {
    micros: AtomicI64,
}

impl ManualClock {
    pub fn new(start: DateTime<Utc>) -> Arc<Self> {
        Arc::new(ManualClock {
            micros: AtomicI64::new(start.timestamp_micros()),
        })
    }

    pub fn advance_ms(&self, ms: i64) {
        self.micros.fetch_add(ms * 1000, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> DateTime<Utc> {
        DateTime::from_timestamp_micros(self.micros.load(Ordering::SeqCst)).expect("valid time")
    }
}

/// RFC 3339 UTC with microseconds, the one timestamp format of the API.
pub fn fmt_time(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}
