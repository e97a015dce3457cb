//! [`Finals`]: the order in which finals enter the transcript, the turns still being
//! recognised, the backlog drainer's wake-ups, and the [`EchoCheck`].
//!
//! A final is stored at once only when no earlier turn waits in the backlog; otherwise it
//! queues behind (its text kept, its audio not). Storing a final and queueing one happen under
//! [`Finals::order`], so the drainer and the recognizers never store out of turn.

use super::echo::EchoCheck;
use std::collections::BTreeSet;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// What the order of finals is kept by.
#[derive(Default)]
pub(crate) struct Order {
    /// Turns ended but not yet delivered by their recognizer.
    pub in_flight: BTreeSet<u64>,
}

/// The order of finals, the backlog's drainer wake-ups and the echo check.
pub(crate) struct Finals {
    order: Mutex<Order>,
    /// Wakes the drainer (a turn queued, an engine changed, shutdown).
    kick: Mutex<u64>,
    kicked: Condvar,
    pub echo: EchoCheck,
}

impl Finals {
    pub fn new() -> Finals {
        Finals {
            order: Mutex::new(Order::default()),
            kick: Mutex::new(0),
            kicked: Condvar::new(),
            echo: EchoCheck::new(),
        }
    }

    /// Held while a final is stored or queued, so that turns enter the transcript in order.
    pub fn order(&self) -> MutexGuard<'_, Order> {
        self.order.lock().unwrap()
    }

    /// Wakes the drainer.
    pub fn kick(&self) {
        *self.kick.lock().unwrap() += 1;
        self.kicked.notify_all();
    }

    pub fn kicks(&self) -> u64 {
        *self.kick.lock().unwrap()
    }

    /// Waits for a kick after `seen` (or `timeout`).
    pub fn wait_kick(&self, seen: u64, timeout: Duration) {
        let g = self.kick.lock().unwrap();
        let _ = self
            .kicked
            .wait_timeout_while(g, timeout, |k| *k == seen)
            .unwrap();
    }

    pub fn in_flight(&self, seq: u64, add: bool) {
        let mut o = self.order.lock().unwrap();
        if add {
            o.in_flight.insert(seq);
        } else {
            o.in_flight.remove(&seq);
            drop(o);
            self.kick();
        }
    }

    pub fn first_in_flight(&self) -> Option<u64> {
        self.order.lock().unwrap().in_flight.first().copied()
    }
}
