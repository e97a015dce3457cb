//! How the link paces itself: timeouts, retries, probes (the app's [`crate::Config`]; tests
//! shorten them).

use std::time::Duration;

/// Timing of the link (tests shorten it).
#[derive(Debug, Clone, Copy)]
pub struct LinkSettings {
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    /// First retry delay after a connection error / 429 / 5xx; doubles up to `backoff_max`.
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// Status check interval while online.
    pub probe_interval: Duration,
    /// First status re-check while not online (doubles up to `probe_interval`).
    pub probe_retry: Duration,
    /// A `/v1/events` reader stops after this long without a send or an event in its session.
    pub events_idle: Duration,
    /// Smallest gap between two sends to the same assistant session. OpenClaw 0.64 loses both
    /// replies when two turns of one session arrive back to back (measured: 0 ms apart → 0 of 2
    /// replies, 3 of 3 runs; ≥ 50 ms → 2 of 2).
    pub min_session_gap: Duration,
}

impl Default for LinkSettings {
    fn default() -> Self {
        LinkSettings {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(10),
            backoff_initial: Duration::from_millis(500),
            backoff_max: Duration::from_secs(30),
            probe_interval: Duration::from_secs(30),
            probe_retry: Duration::from_secs(2),
            events_idle: Duration::from_secs(15 * 60),
            min_session_gap: Duration::from_millis(250),
        }
    }
}
