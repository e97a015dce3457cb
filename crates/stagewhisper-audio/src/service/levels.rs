//! Levels for the call bar and Settings: published about ten times a second ([`Ticker`]) while
//! listening (from the channels' captures) or while Settings measures without listening
//! ([`Meters`]: captures that only measure, until a deadline).

use super::silence::Silence;
use crate::capture;
use crate::pipeline::Shared;
use crate::settings::AudioSettings;
use stagewhisper_core::audio::Channel;
use stagewhisper_core::events::Change;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// How often levels are published.
const LEVEL_EVERY: Duration = Duration::from_millis(100);

/// Levels published about ten times a second while it lives.
pub(super) struct Ticker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Ticker {
    pub fn start(shared: &Arc<Shared>, on: impl Fn(Channel) -> bool + Send + 'static) -> Ticker {
        Ticker::watching(shared, on, None)
    }

    /// Also watches for a silent channel (a listening call).
    pub fn watching(
        shared: &Arc<Shared>,
        on: impl Fn(Channel) -> bool + Send + 'static,
        mut silence: Option<Silence>,
    ) -> Ticker {
        let stop = Arc::new(AtomicBool::new(false));
        let (s, shared) = (stop.clone(), shared.clone());
        let thread = std::thread::Builder::new()
            .name("sw-levels".into())
            .spawn(move || {
                while !s.load(Ordering::SeqCst) {
                    std::thread::sleep(LEVEL_EVERY);
                    let level = |ch: Channel| -> Option<f32> {
                        let v = shared.levels.take(ch);
                        on(ch).then(|| (v * 1000.0).round() / 1000.0)
                    };
                    let (mic, system) = (level(Channel::Mic), level(Channel::System));
                    shared.ctx.publish_live(Change::AudioLevel { mic, system });
                    if let Some(said) = silence
                        .as_mut()
                        .and_then(|w| w.tick(shared.now_ms(), mic, system))
                    {
                        shared.ctx.publish_live(said);
                    }
                }
            })
            .expect("spawn the levels thread");
        Ticker {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Ticker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Levels without listening: captures that only measure, until a deadline.
pub(super) struct Meters {
    pub until: Arc<AtomicI64>,
    pub thread: JoinHandle<()>,
}

impl Drop for Meters {
    fn drop(&mut self) {
        self.until.store(0, Ordering::SeqCst);
    }
}

/// Measures both channels until `until` (Unix ms), publishing levels.
pub(super) fn run_meters(shared: &Arc<Shared>, settings: &AudioSettings, until: &AtomicI64) {
    let stop = Arc::new(AtomicBool::new(false));
    let mut threads = Vec::new();
    let on: Arc<Mutex<HashMap<Channel, bool>>> = Arc::default();
    for ch in Channel::BOTH {
        let choice = settings.source(ch).clone();
        if choice.is_off() {
            continue;
        }
        let (shared, stop, on) = (shared.clone(), stop.clone(), on.clone());
        threads.push(std::thread::spawn(move || {
            capture::run(ch, &choice, &stop, &mut |ev| match ev {
                capture::Event::Opened(_) => {
                    on.lock().unwrap().insert(ch, true);
                }
                capture::Event::Down(_) => {
                    on.lock().unwrap().insert(ch, false);
                }
                capture::Event::Audio { samples, .. } => {
                    let peak = samples.iter().fold(0f32, |m, s| m.max(s.abs()));
                    shared.levels.record(ch, peak);
                }
            })
        }));
    }
    let o = on.clone();
    let ticker = Ticker::start(shared, move |ch| {
        o.lock().unwrap().get(&ch).copied().unwrap_or(false)
    });
    while shared.now_ms() < until.load(Ordering::SeqCst) && !shared.stopping.load(Ordering::SeqCst)
    {
        std::thread::sleep(Duration::from_millis(100));
    }
    drop(ticker);
    stop.store(true, Ordering::SeqCst);
    for t in threads {
        let _ = t.join();
    }
}
