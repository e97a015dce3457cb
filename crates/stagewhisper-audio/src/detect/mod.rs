//! Noticing the call: a thread of its own watches which applications record from a
//! microphone ([`crate::capture::watch`], metadata only) and keeps the [`Tracker`]'s offers;
//! what it decides goes to its [`Hooks`] (the service: whether an app may be offered, the
//! events). Blocking on the server's notices with no time bound while nothing is pending, it
//! costs nothing while idle.
//!
//! | module | holds |
//! |---|---|
//! | `tracker` | the rules: held for [`HOLD`], offered once, closed with the last stream |

mod tracker;

pub use tracker::{Closed, Tracker, HOLD};

use crate::capture::{self, Seen, WatchHandle, Watcher};
use stagewhisper_core::detect::{DetectionStatus, Offer};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Instant;

/// What the detector asks of the service, on its own thread.
pub trait Hooks: Send + Sync + 'static {
    /// Whether `app` may be offered now (detection on, not ignored, no call running).
    fn allow(&self, app: &str, binary: Option<&str>) -> bool;
    fn offered(&self, offer: &Offer);
    fn closed(&self, closed: Closed);
    /// `app` holds a microphone again (a call offered to end goes on).
    fn reopened(&self, app: &str);
    /// The status changed.
    fn status(&self, status: DetectionStatus);
    /// Unix ms now (the injectable clock).
    fn now_ms(&self) -> i64;
}

/// The state the detector's thread and the service share.
pub struct DetectState {
    pub tracker: Tracker,
    pub status: DetectionStatus,
}

impl DetectState {
    pub fn new() -> Arc<Mutex<DetectState>> {
        Arc::new(Mutex::new(DetectState {
            tracker: Tracker::default(),
            status: off(),
        }))
    }
}

/// The status while switched off.
pub fn off() -> DetectionStatus {
    DetectionStatus {
        state: "off".into(),
        detail: "Call detection is off.".into(),
    }
}

/// The detector's thread, watching until dropped.
pub struct Detector {
    handle: Arc<WatchHandle>,
    thread: Option<JoinHandle<()>>,
}

impl Detector {
    pub fn start(state: Arc<Mutex<DetectState>>, hooks: Arc<dyn Hooks>) -> Detector {
        let handle = Arc::new(WatchHandle::default());
        let h = handle.clone();
        let thread = std::thread::Builder::new()
            .name("sw-detect".into())
            .spawn(move || {
                let mut w = Bridge { state, hooks };
                capture::watch(&h, &mut w);
                w.gone();
            })
            .expect("spawn the call detection thread");
        Detector {
            handle,
            thread: Some(thread),
        }
    }
}

impl Drop for Detector {
    fn drop(&mut self) {
        self.handle.stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The watcher's reports, into the tracker and out to the hooks.
struct Bridge {
    state: Arc<Mutex<DetectState>>,
    hooks: Arc<dyn Hooks>,
}

impl Bridge {
    /// Every stream gone: the applications' offers close.
    fn gone(&mut self) {
        let closed = self.state.lock().unwrap().tracker.clear();
        for c in closed {
            self.hooks.closed(c);
        }
    }

    fn set_status(&mut self, status: DetectionStatus) {
        let mut st = self.state.lock().unwrap();
        if st.status != status {
            st.status = status.clone();
            drop(st);
            self.hooks.status(status);
        }
    }
}

impl Watcher for Bridge {
    fn seen(&mut self, s: Seen) {
        match s {
            Seen::Up => self.set_status(DetectionStatus {
                state: "watching".into(),
                detail: "Watching for calls: when another app takes the microphone, the app \
                         offers to listen (it reads only which app uses it, never the sound)."
                    .into(),
            }),
            Seen::Down(why) => {
                self.gone();
                self.set_status(DetectionStatus {
                    state: "unavailable".into(),
                    detail: format!(
                        "Call detection is off: {} It starts when a sound server is reachable.",
                        crate::pipeline::capitalise(&why) + "."
                    ),
                });
            }
            Seen::Opened(stream) => {
                let app = stream.app.clone();
                let mut st = self.state.lock().unwrap();
                let held = st.tracker.holds(&app);
                st.tracker
                    .opened(stream, Instant::now(), self.hooks.now_ms());
                drop(st);
                if !held {
                    self.hooks.reopened(&app);
                }
            }
            Seen::Closed(index) => {
                let closed = self.state.lock().unwrap().tracker.closed(index);
                if let Some(c) = closed {
                    self.hooks.closed(c);
                }
            }
            Seen::Wake => {}
        }
        // Whether each due app may be offered is asked without the state's lock (the hooks
        // read the conversation), then decided under it.
        let due = self.state.lock().unwrap().tracker.due(Instant::now());
        for (app, binary) in due {
            let allowed = self.hooks.allow(&app, binary.as_deref());
            let offer = self.state.lock().unwrap().tracker.decide(&app, allowed);
            if let Some(o) = offer {
                tracing::info!(app = %o.app, binary = ?o.binary, "a call is offered");
                self.hooks.offered(&o);
            }
        }
    }

    fn wake_at(&self) -> Option<Instant> {
        self.state.lock().unwrap().tracker.wake_at()
    }
}
