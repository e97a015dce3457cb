//! When to try again: one schedule type for every part of the app that retries (the assistant
//! outbox, the `/v1/events` reader, the gateway and hub links, the tunnel, the speech backlog).

use std::time::Duration;

/// The wait before the next try after a run of consecutive failures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backoff {
    /// `first` after the first failure, doubling after each further one, never above `max`.
    Doubling { first: Duration, max: Duration },
    /// Fixed waits after failure 1, 2, …; the last one repeats (none at all: 1 s).
    Steps(Vec<Duration>),
}

impl Backoff {
    /// `first`, doubling up to `max`.
    pub const fn doubling(first: Duration, max: Duration) -> Self {
        Backoff::Doubling { first, max }
    }

    /// The wait after `failures` consecutive failures, counted from 1 (0 counts as 1).
    pub fn delay(&self, failures: u32) -> Duration {
        let n = failures.max(1) - 1;
        match self {
            Backoff::Doubling { first, max } => first.saturating_mul(1u32 << n.min(31)).min(*max),
            Backoff::Steps(steps) => match steps.len() {
                0 => Duration::from_secs(1),
                len => steps[(n as usize).min(len - 1)],
            },
        }
    }
}

/// A run of consecutive failures under a [`Backoff`].
#[derive(Debug, Clone)]
pub struct Retries {
    backoff: Backoff,
    failures: u32,
}

impl Retries {
    pub fn new(backoff: Backoff) -> Self {
        Retries {
            backoff,
            failures: 0,
        }
    }

    /// One more failure: the wait before the next try.
    pub fn fail(&mut self) -> Duration {
        self.failures = self.failures.saturating_add(1);
        self.backoff.delay(self.failures)
    }

    /// A success (or a reason to try now): the next failure waits the first delay again.
    pub fn reset(&mut self) {
        self.failures = 0;
    }

    /// Consecutive failures since the last success.
    pub fn failures(&self) -> u32 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(d: Duration) -> u64 {
        d.as_secs()
    }

    #[test]
    fn doubling_starts_at_first_and_stops_at_max() {
        let b = Backoff::doubling(Duration::from_secs(1), Duration::from_secs(60));
        let v: Vec<u64> = (1..=9).map(|n| secs(b.delay(n))).collect();
        assert_eq!(v, vec![1, 2, 4, 8, 16, 32, 60, 60, 60]);
        assert_eq!(secs(b.delay(0)), 1, "no failure yet waits like the first");
        assert_eq!(
            secs(b.delay(u32::MAX)),
            60,
            "no overflow after very many failures"
        );
        let tiny = Backoff::doubling(Duration::from_millis(500), Duration::from_secs(30));
        assert_eq!(tiny.delay(3), Duration::from_secs(2));
    }

    #[test]
    fn steps_repeat_their_last_one() {
        let b = Backoff::Steps([1, 2, 5, 15, 30, 60].map(Duration::from_secs).to_vec());
        let v: Vec<u64> = (1..=8).map(|n| secs(b.delay(n))).collect();
        assert_eq!(v, vec![1, 2, 5, 15, 30, 60, 60, 60]);
        assert_eq!(Backoff::Steps(vec![]).delay(3), Duration::from_secs(1));
    }

    #[test]
    fn retries_count_failures_until_a_reset() {
        let mut r = Retries::new(Backoff::doubling(
            Duration::from_secs(1),
            Duration::from_secs(4),
        ));
        let waits: Vec<u64> = (0..4).map(|_| secs(r.fail())).collect();
        assert_eq!(waits, vec![1, 2, 4, 4]);
        assert_eq!(r.failures(), 4);
        r.reset();
        assert_eq!(r.failures(), 0);
        assert_eq!(secs(r.fail()), 1);
    }
}
