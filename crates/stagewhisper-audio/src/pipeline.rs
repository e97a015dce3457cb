//! One listening call: per channel, capture → resample → turns → engine, and the finals in
//! order into the transcript.
//!
//! Each channel has two threads of its own, never the async runtime's workers:
//! - **capture** ([`crate::capture::run`]): reads the sound server, resamples to 16 kHz
//!   ([`Resampler`]), cuts turns ([`TurnMaker`]) and measures the level. It never waits on the
//!   engine, so the server never has to drop audio because recognition is slow;
//! - **recognizer**: feeds each turn to an [`Utterance`] of the current engine as it comes,
//!   publishes a partial at least every [`PARTIAL_EVERY`] while the turn is open, and hands the
//!   final (or the engine's failure) to [`Finals::deliver`].
//!
//! Between the two is an unbounded channel whose audio is counted: when the recognizer is more
//! than [`MAX_QUEUED_SECONDS`] behind (an engine that answers very slowly), new turns skip it
//! and go whole to the backlog on disk, where they wait their turn. Nothing is dropped.
//!
//! [`Finals`] keeps the transcript in order: a final is stored at once only when no earlier
//! turn waits in the backlog; otherwise it queues behind (its text kept, its audio not). The
//! drainer ([`drain`], a thread of its own for the app's life) transcribes the backlog in order
//! with whatever engine is current, retrying with a backoff, and stores each turn exactly once.
//!
//! **Echo**: when the microphone also hears the call (speakers, no headset), a "You" final
//! whose words are mostly those of a "Them" final at about the same time is dropped. A "You"
//! final is held while an overlapping "Them" turn is still being heard or recognised (at most
//! [`ECHO_HOLD`]), so the two can be compared.

use crate::backlog::{Turn, TurnMeta};
use crate::capture::{self, Event};
use crate::engine::{EngineError, Utterance};
use crate::pcm::Resampler;
use crate::service::Shared;
use crate::turns::{TurnConfig, TurnEvent, TurnMaker};
use stagewhisper_core::audio::{Channel, SourceChoice, TurnError};
use stagewhisper_core::backoff::Backoff;
use stagewhisper_core::conversation::CoreError;
use std::collections::{BTreeSet, HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A partial at least this often while a turn is open (the issue asks for ≤ 1.5 s).
pub const PARTIAL_EVERY: Duration = Duration::from_millis(1000);
/// Audio the recognizer of a channel may be behind before new turns go to the backlog.
pub const MAX_QUEUED_SECONDS: usize = 60;
const MAX_QUEUED: usize = MAX_QUEUED_SECONDS * 16_000;
/// The longest a "You" final waits for an overlapping "Them" turn.
pub const ECHO_HOLD: Duration = Duration::from_secs(20);
/// How far apart in time an echo and its source may be.
const ECHO_SLACK_MS: i64 = 1_500;
/// Share of the "You" words found in the "Them" turn that makes it an echo.
const ECHO_WORDS: f64 = 0.6;
/// "Them" finals kept for comparison.
const ECHO_KEEP: usize = 32;
/// The frames of the level envelopes compared for the echo check: 20 ms at 16 kHz.
const ENV_FRAME: usize = 320;
const ENV_MS: i64 = 20;
/// Envelope frames of the call's audio kept (90 s).
const ENV_KEEP: usize = 90 * 50;
/// How late (or, with the capture latencies, early) the microphone may hear the call.
const ECHO_LAG_MIN_MS: i64 = -500;
const ECHO_LAG_MAX_MS: i64 = 1_000;
/// Correlation of the two envelopes that makes a "You" turn an echo.
const ECHO_CORRELATION: f64 = 0.75;
/// Retries of a backlog turn: from 1 s, doubling, at most 15 s.
const BACKOFF: Backoff = Backoff::doubling(Duration::from_secs(1), Duration::from_secs(15));

/// What the capture thread hands its recognizer.
enum Work {
    Start { turn_id: String },
    Audio(Vec<i16>),
    End { meta: TurnMeta },
}

// ---------------------------------------------------------------------------------------------
// One channel
// ---------------------------------------------------------------------------------------------

/// A channel of a listening call: its capture and recognizer threads.
pub(crate) struct ChannelWorker {
    pub channel: Channel,
    stop: Arc<AtomicBool>,
    capture: Option<JoinHandle<()>>,
    recognizer: Option<JoinHandle<()>>,
}

impl ChannelWorker {
    pub fn start(
        shared: &Arc<Shared>,
        call_id: &str,
        channel: Channel,
        choice: SourceChoice,
    ) -> ChannelWorker {
        let stop = Arc::new(AtomicBool::new(false));
        let (tx, rx) = mpsc::channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let recognizer = {
            let (shared, queued) = (shared.clone(), queued.clone());
            let call_id = call_id.to_string();
            std::thread::Builder::new()
                .name(format!("sw-asr-{}", channel.as_str()))
                .spawn(move || recognize(&shared, &call_id, channel, rx, &queued))
                .expect("spawn a recognizer thread")
        };
        let capture = {
            let (shared, stop) = (shared.clone(), stop.clone());
            let mut cap = CaptureSide {
                shared: shared.clone(),
                call_id: call_id.to_string(),
                channel,
                tx,
                queued,
                resampler: None,
                turns: TurnMaker::new(TurnConfig::default()),
                epoch_ms: None,
                events: Vec::new(),
                pcm: Vec::new(),
                open: None,
                env_frame: Vec::with_capacity(ENV_FRAME),
                env_pos: 0,
            };
            std::thread::Builder::new()
                .name(format!("sw-capture-{}", channel.as_str()))
                .spawn(move || {
                    capture::run(channel, &choice, &stop, &mut |ev| cap.on(ev));
                    cap.close();
                })
                .expect("spawn a capture thread")
        };
        ChannelWorker {
            channel,
            stop,
            capture: Some(capture),
            recognizer: Some(recognizer),
        }
    }

    /// Stops capturing (the turn in progress ends there) and returns the recognizer, which
    /// finishes the turns it was given, then exits.
    pub fn stop(mut self) -> Option<JoinHandle<()>> {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(c) = self.capture.take() {
            let _ = c.join();
        }
        self.recognizer.take()
    }
}

/// A turn being heard on the capture thread.
struct Heard {
    turn_id: String,
    started_at_ms: i64,
    /// The recognizer is too far behind: the turn's audio is kept here for the backlog.
    spill: Option<Vec<i16>>,
}

struct CaptureSide {
    shared: Arc<Shared>,
    call_id: String,
    channel: Channel,
    tx: Sender<Work>,
    queued: Arc<AtomicUsize>,
    resampler: Option<(u32, Resampler)>,
    turns: TurnMaker,
    /// Wall-clock time (Unix ms) of the turn maker's position 0.
    epoch_ms: Option<i64>,
    events: Vec<TurnEvent>,
    pcm: Vec<i16>,
    open: Option<Heard>,
    /// The call's level envelope: the frame being filled, samples since the epoch.
    env_frame: Vec<i16>,
    env_pos: u64,
}

impl CaptureSide {
    fn on(&mut self, ev: Event<'_>) {
        match ev {
            Event::Opened(src) => self.shared.channel_opened(self.channel, src),
            Event::Audio { samples, rate } => {
                let peak = samples.iter().fold(0f32, |m, s| m.max(s.abs()));
                self.shared.levels.record(self.channel, peak);
                if self.resampler.as_ref().map(|(r, _)| *r) != Some(rate) {
                    self.flush_resampler();
                    match Resampler::new(rate) {
                        Ok(r) => self.resampler = Some((rate, r)),
                        Err(e) => {
                            tracing::error!(rate, error = %e, "cannot resample this source");
                            return;
                        }
                    }
                }
                if self.epoch_ms.is_none() {
                    self.epoch_ms = Some(self.shared.now_ms());
                }
                let (_, r) = self.resampler.as_mut().expect("set above");
                r.push(samples, &mut self.pcm);
                self.feed();
            }
            Event::Down(d) => {
                self.shared.channel_down(self.channel, d);
                // What was heard before the source went is a turn of its own.
                self.flush_resampler();
                self.end_input();
            }
        }
    }

    fn flush_resampler(&mut self) {
        if let Some((_, mut r)) = self.resampler.take() {
            r.flush(&mut self.pcm);
            self.feed();
        }
    }

    fn feed(&mut self) {
        if self.pcm.is_empty() {
            return;
        }
        let pcm = std::mem::take(&mut self.pcm);
        self.turns.push(&pcm, &mut self.events);
        if self.channel == Channel::System {
            self.envelope(&pcm);
        }
        self.pcm = pcm;
        self.pcm.clear();
        self.handle_events();
    }

    /// The call's level in 20 ms frames, for the echo check of the microphone's turns.
    fn envelope(&mut self, pcm: &[i16]) {
        let epoch = self.epoch_ms.unwrap_or_else(|| self.shared.now_ms());
        for &x in pcm {
            self.env_frame.push(x);
            if self.env_frame.len() == ENV_FRAME {
                let at = epoch + (self.env_pos * 1000 / 16_000) as i64;
                self.shared.finals.system_level(at, rms(&self.env_frame));
                self.env_pos += ENV_FRAME as u64;
                self.env_frame.clear();
            }
        }
    }

    /// Closes an open turn and starts a fresh turn maker (its clock starts at the next audio).
    fn end_input(&mut self) {
        self.turns.finish(&mut self.events);
        self.handle_events();
        self.turns = TurnMaker::new(TurnConfig::default());
        self.epoch_ms = None;
        self.env_frame.clear();
        self.env_pos = 0;
    }

    fn close(mut self) {
        self.flush_resampler();
        self.end_input();
        // Dropping the sender lets the recognizer finish and exit.
    }

    fn handle_events(&mut self) {
        let epoch = self.epoch_ms.unwrap_or_else(|| self.shared.now_ms());
        for ev in std::mem::take(&mut self.events) {
            match ev {
                TurnEvent::Start { start_ms } => {
                    let turn_id = uuid::Uuid::new_v4().to_string();
                    let started_at_ms = epoch + start_ms as i64;
                    let behind = self.queued.load(Ordering::SeqCst) > MAX_QUEUED;
                    if behind {
                        tracing::warn!(
                            channel = self.channel.as_str(),
                            "the recognizer is far behind: this turn goes to the backlog"
                        );
                    } else {
                        let _ = self.tx.send(Work::Start {
                            turn_id: turn_id.clone(),
                        });
                    }
                    if self.channel == Channel::System {
                        self.shared.finals.them_started(&turn_id, started_at_ms);
                    }
                    self.open = Some(Heard {
                        turn_id,
                        started_at_ms,
                        spill: behind.then(Vec::new),
                    });
                }
                TurnEvent::Audio(samples) => match self.open.as_mut() {
                    Some(Heard { spill: Some(s), .. }) => s.extend_from_slice(&samples),
                    Some(_) => {
                        self.queued.fetch_add(samples.len(), Ordering::SeqCst);
                        let _ = self.tx.send(Work::Audio(samples));
                    }
                    None => {}
                },
                TurnEvent::End { end_ms, .. } => {
                    let Some(heard) = self.open.take() else {
                        continue;
                    };
                    let meta = TurnMeta {
                        seq: self.shared.next_seq(),
                        call_id: self.call_id.clone(),
                        channel: self.channel,
                        speaker: self.shared.label(self.channel),
                        started_at_ms: heard.started_at_ms,
                        ended_at_ms: epoch + end_ms as i64,
                        samples: 0,
                        text: None,
                        attempts: 0,
                    };
                    if self.channel == Channel::System {
                        self.shared
                            .finals
                            .them_ended(&heard.turn_id, meta.ended_at_ms);
                    }
                    match heard.spill {
                        Some(samples) => {
                            self.shared
                                .publish_final(&meta, &heard.turn_id, "", "queued");
                            if self.channel == Channel::System {
                                self.shared.finals.them_done(&heard.turn_id, None);
                            }
                            self.shared
                                .finals
                                .keep(&self.shared, Turn { meta, samples });
                            self.shared.changed();
                        }
                        None => {
                            self.shared.finals.in_flight(meta.seq, true);
                            let _ = self.tx.send(Work::End { meta });
                        }
                    }
                }
            }
        }
    }
}

/// The turn the recognizer is on.
struct Recognising {
    turn_id: String,
    utterance: Option<Box<dyn Utterance>>,
    failed: Option<EngineError>,
    samples: Vec<i16>,
    last_partial: Instant,
    text: String,
}

fn recognize(
    shared: &Arc<Shared>,
    call_id: &str,
    channel: Channel,
    rx: Receiver<Work>,
    queued: &AtomicUsize,
) {
    // Ready before the first words: an engine that loads a model per open utterance (the
    // built-in one keeps a decoder per channel) loads it now, not while a turn waits.
    drop(shared.engine().and_then(|e| e.begin()));
    let mut cur: Option<Recognising> = None;
    loop {
        let wait = match &cur {
            Some(c) => PARTIAL_EVERY.saturating_sub(c.last_partial.elapsed()),
            None => Duration::from_secs(3600),
        };
        match rx.recv_timeout(wait) {
            Ok(Work::Start { turn_id }) => {
                let (utterance, failed) = match shared.engine().and_then(|e| e.begin()) {
                    Ok(u) => (Some(u), None),
                    Err(e) => (None, Some(e)),
                };
                shared.publish_partial(call_id, channel, &turn_id, "");
                cur = Some(Recognising {
                    turn_id,
                    utterance,
                    failed,
                    samples: Vec::new(),
                    last_partial: Instant::now(),
                    text: String::new(),
                });
            }
            Ok(Work::Audio(samples)) => {
                queued.fetch_sub(samples.len(), Ordering::SeqCst);
                if let Some(c) = cur.as_mut() {
                    if let Some(u) = c.utterance.as_mut() {
                        if let Err(e) = u.push(&samples) {
                            c.failed = Some(e);
                            c.utterance = None;
                        }
                    }
                    c.samples.extend_from_slice(&samples);
                }
            }
            Ok(Work::End { meta }) => {
                let Some(c) = cur.take() else {
                    shared.finals.in_flight(meta.seq, false);
                    continue;
                };
                let result = match (c.utterance, c.failed) {
                    (Some(u), _) => u.finish(),
                    (None, Some(e)) => Err(e),
                    (None, None) => Err(EngineError::down("no engine")),
                };
                shared.engine_outcome(result.as_ref().map(|_| ()));
                shared
                    .finals
                    .deliver(shared, meta, &c.turn_id, result, c.samples);
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return,
        }
        if let Some(c) = cur.as_mut() {
            if c.last_partial.elapsed() >= PARTIAL_EVERY {
                if let Some(t) = c.utterance.as_mut().and_then(|u| u.partial()) {
                    c.text = t;
                }
                shared.publish_partial(call_id, channel, &c.turn_id, &c.text);
                c.last_partial = Instant::now();
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Finals in order
// ---------------------------------------------------------------------------------------------

/// A "Them" turn being heard or recognised, for the echo hold.
struct ThemOpen {
    started_at_ms: i64,
    ended_at_ms: Option<i64>,
}

/// A recent "Them" final.
struct ThemFinal {
    started_at_ms: i64,
    ended_at_ms: i64,
    words: HashSet<String>,
}

#[derive(Default)]
struct Echo {
    open: HashMap<String, ThemOpen>,
    recent: VecDeque<ThemFinal>,
    /// The call's audio level in 20 ms frames (wall-clock ms, RMS), the last [`ENV_KEEP`].
    system: VecDeque<(i64, f32)>,
}

#[derive(Default)]
struct Order {
    /// Turns ended but not yet delivered by their recognizer.
    in_flight: BTreeSet<u64>,
}

/// The order of finals, the backlog's drainer wake-ups and the echo check.
pub(crate) struct Finals {
    order: Mutex<Order>,
    /// Wakes the drainer (a turn queued, an engine changed, shutdown).
    kick: Mutex<u64>,
    kicked: Condvar,
    echo: Mutex<Echo>,
    echo_changed: Condvar,
}

/// What became of a call whose turns wait.
enum CallState {
    Live,
    Ended,
    Deleted,
    /// The store did not answer: try as usual.
    Unknown,
}

/// How storing a turn went.
enum Stored {
    Done,
    /// The call is gone (ended or deleted) before the turn could be stored.
    Gone(String),
    /// Not now (storage refused, the app stopping): keep it and try again.
    Later(String),
}

impl Finals {
    pub fn new() -> Finals {
        Finals {
            order: Mutex::new(Order::default()),
            kick: Mutex::new(0),
            kicked: Condvar::new(),
            echo: Mutex::new(Echo::default()),
            echo_changed: Condvar::new(),
        }
    }

    /// Wakes the drainer.
    pub fn kick(&self) {
        *self.kick.lock().unwrap() += 1;
        self.kicked.notify_all();
    }

    fn kicks(&self) -> u64 {
        *self.kick.lock().unwrap()
    }

    /// Waits for a kick after `seen` (or `timeout`).
    fn wait_kick(&self, seen: u64, timeout: Duration) {
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

    fn first_in_flight(&self) -> Option<u64> {
        self.order.lock().unwrap().in_flight.first().copied()
    }

    pub fn them_started(&self, turn_id: &str, started_at_ms: i64) {
        self.echo.lock().unwrap().open.insert(
            turn_id.to_string(),
            ThemOpen {
                started_at_ms,
                ended_at_ms: None,
            },
        );
    }

    pub fn them_ended(&self, turn_id: &str, ended_at_ms: i64) {
        if let Some(o) = self.echo.lock().unwrap().open.get_mut(turn_id) {
            o.ended_at_ms = Some(ended_at_ms);
        }
    }

    /// A "Them" turn is final (`text`: what it said, when known).
    pub fn them_done(&self, turn_id: &str, text: Option<(&TurnMeta, &str)>) {
        let mut e = self.echo.lock().unwrap();
        e.open.remove(turn_id);
        if let Some((meta, text)) = text {
            e.recent.push_back(ThemFinal {
                started_at_ms: meta.started_at_ms,
                ended_at_ms: meta.ended_at_ms,
                words: words(text).into_iter().collect(),
            });
            while e.recent.len() > ECHO_KEEP {
                e.recent.pop_front();
            }
        }
        drop(e);
        self.echo_changed.notify_all();
    }

    /// The call's audio level of a 20 ms frame that began at `at_ms`.
    pub fn system_level(&self, at_ms: i64, rms: f32) {
        let mut e = self.echo.lock().unwrap();
        e.system.push_back((at_ms, rms));
        while e.system.len() > ENV_KEEP {
            e.system.pop_front();
        }
    }

    /// Whether a "You" turn is the call's audio heard by the microphone (speakers, no
    /// headset): its level envelope follows the call's at a small lag. `None` when the call's
    /// audio of that time is not known (its channel off or not recording).
    fn echoes_the_call(&self, meta: &TurnMeta, samples: &[i16]) -> Option<bool> {
        let mic: Vec<f32> = samples.chunks(ENV_FRAME).map(rms).collect();
        let e = self.echo.lock().unwrap();
        let from = meta.started_at_ms + ECHO_LAG_MIN_MS - ENV_MS;
        let to = meta.started_at_ms + mic.len() as i64 * ENV_MS + ECHO_LAG_MAX_MS;
        let window: Vec<(i64, f32)> = e
            .system
            .iter()
            .filter(|(t, _)| *t >= from && *t <= to)
            .copied()
            .collect();
        drop(e);
        let best = envelope_match(&mic, meta.started_at_ms, &window)?;
        tracing::debug!(seq = meta.seq, correlation = best, "echo check");
        Some(best >= ECHO_CORRELATION)
    }

    /// Whether a "You" final is the echo of a "Them" one: its audio follows the call's
    /// ([`Finals::echoes_the_call`]), or its words are mostly those of a "Them" final at about
    /// the same time. When the call's audio of that time is not known and a "Them" turn that
    /// overlaps it is still being heard or recognised, `hold` waits for it (at most
    /// [`ECHO_HOLD`]).
    fn is_echo(&self, meta: &TurnMeta, text: &str, samples: &[i16], hold: bool) -> bool {
        let acoustic = if samples.is_empty() {
            None
        } else {
            self.echoes_the_call(meta, samples)
        };
        if acoustic == Some(true) {
            return true;
        }
        let overlaps = |s: i64, e: i64| {
            s <= meta.ended_at_ms + ECHO_SLACK_MS && e >= meta.started_at_ms - ECHO_SLACK_MS
        };
        let mut g = self.echo.lock().unwrap();
        if hold && acoustic.is_none() {
            let deadline = Instant::now() + ECHO_HOLD;
            loop {
                let pending = g
                    .open
                    .values()
                    .any(|o| overlaps(o.started_at_ms, o.ended_at_ms.unwrap_or(i64::MAX)));
                let now = Instant::now();
                if !pending || now >= deadline {
                    break;
                }
                g = self.echo_changed.wait_timeout(g, deadline - now).unwrap().0;
            }
        }
        let you = words(text);
        if you.is_empty() {
            return false;
        }
        g.recent.iter().any(|t| {
            overlaps(t.started_at_ms, t.ended_at_ms) && {
                let found = you.iter().filter(|w| t.words.contains(*w)).count();
                found as f64 / you.len() as f64 >= ECHO_WORDS
            }
        })
    }

    /// A turn that skipped its recognizer: straight to the backlog.
    pub fn keep(&self, shared: &Shared, turn: Turn) {
        let o = self.order.lock().unwrap();
        shared.backlog.push(turn);
        drop(o);
        self.kick();
    }

    /// A turn's final (or the engine's failure), from its recognizer.
    pub fn deliver(
        &self,
        shared: &Arc<Shared>,
        mut meta: TurnMeta,
        turn_id: &str,
        result: Result<String, EngineError>,
        samples: Vec<i16>,
    ) {
        let is_them = meta.channel == Channel::System;
        if let Ok(text) = &result {
            if meta.channel == Channel::Mic && self.is_echo(&meta, text, &samples, true) {
                tracing::info!(
                    seq = meta.seq,
                    "a \"You\" turn echoed the other side: dropped"
                );
                shared.publish_final(&meta, turn_id, "", "echo");
                self.in_flight(meta.seq, false);
                return;
            }
        }
        let outcome = {
            let mut o = self.order.lock().unwrap();
            o.in_flight.remove(&meta.seq);
            let earlier_waits = !shared.backlog.is_empty();
            match result {
                Ok(text) if text.trim().is_empty() => "empty",
                Ok(text) if !earlier_waits => match shared.store(&meta, &text) {
                    Stored::Done => {
                        if is_them {
                            self.them_done(turn_id, Some((&meta, &text)));
                        }
                        shared.publish_final(&meta, turn_id, &text, "stored");
                        drop(o);
                        self.kick();
                        shared.changed();
                        return;
                    }
                    Stored::Gone(why) => {
                        tracing::warn!(
                            seq = meta.seq,
                            why,
                            "a turn could not be stored: its call is gone"
                        );
                        shared.count_gone(&meta);
                        "gone"
                    }
                    Stored::Later(why) => {
                        tracing::warn!(seq = meta.seq, why, "a turn waits in the backlog");
                        meta.text = Some(text.trim().to_string());
                        shared.backlog.push(Turn {
                            meta: meta.clone(),
                            samples: Vec::new(),
                        });
                        "queued"
                    }
                },
                Ok(text) => {
                    if is_them {
                        self.them_done(turn_id, Some((&meta, &text)));
                    }
                    meta.text = Some(text.trim().to_string());
                    shared.backlog.push(Turn {
                        meta: meta.clone(),
                        samples: Vec::new(),
                    });
                    "queued"
                }
                Err(e) => {
                    tracing::warn!(seq = meta.seq, error = %e, "the engine failed on a turn: kept in the backlog");
                    shared.backlog.push(Turn {
                        meta: meta.clone(),
                        samples,
                    });
                    "queued"
                }
            }
        };
        if is_them {
            self.them_done(turn_id, None);
        }
        shared.publish_final(&meta, turn_id, "", outcome);
        self.kick();
        shared.changed();
    }
}

/// The RMS of a frame, 0–1.
fn rms(frame: &[i16]) -> f32 {
    if frame.is_empty() {
        return 0.0;
    }
    let sum: f64 = frame.iter().map(|&x| (x as f64 / 32768.0).powi(2)).sum();
    (sum / frame.len() as f64).sqrt() as f32
}

/// The best correlation (Pearson) of the microphone's envelope `mic` (20 ms frames from
/// `mic_start_ms`) with the call's envelope `system` (frames with their times) over the lags an
/// echo can have; `None` when there is too little of the call's audio, or it is silent, to tell.
fn envelope_match(mic: &[f32], mic_start_ms: i64, system: &[(i64, f32)]) -> Option<f64> {
    if mic.len() < 10 || system.iter().all(|(_, v)| *v < 0.003) {
        return None;
    }
    let mut best: Option<f64> = None;
    let mut lag = ECHO_LAG_MIN_MS;
    while lag <= ECHO_LAG_MAX_MS {
        // The call's frame for mic frame i: the one nearest `mic time - lag`.
        let mut pairs = Vec::with_capacity(mic.len());
        let mut j = 0usize;
        for (i, m) in mic.iter().enumerate() {
            let t = mic_start_ms + i as i64 * ENV_MS - lag;
            while j + 1 < system.len() && system[j + 1].0 <= t {
                j += 1;
            }
            if let Some(&(st, sv)) = system.get(j) {
                if (st - t).abs() <= ENV_MS {
                    pairs.push((*m as f64, sv as f64));
                }
            }
        }
        if pairs.len() * 5 >= mic.len() * 4 {
            if let Some(c) = pearson(&pairs) {
                best = Some(best.map_or(c, |b: f64| b.max(c)));
            }
        }
        lag += ENV_MS;
    }
    best
}

fn pearson(pairs: &[(f64, f64)]) -> Option<f64> {
    let n = pairs.len() as f64;
    let (mx, my) = pairs
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x / n, b + y / n));
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (x, y) in pairs {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx).powi(2);
        syy += (y - my).powi(2);
    }
    (sxx > 1e-12 && syy > 1e-12).then(|| sxy / (sxx * syy).sqrt())
}

/// The words of a text, for the echo comparison (lower case, letters and digits).
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric() && c != '\'')
        .map(|w| w.trim_matches('\'').to_lowercase())
        .filter(|w| !w.is_empty())
        .collect()
}

impl Shared {
    /// Stores a final turn the way `POST /api/calls/{id}/transcript` does.
    fn store(&self, meta: &TurnMeta, text: &str) -> Stored {
        let r = self.rt.block_on(self.ctx.submit_turn(
            &meta.call_id,
            Some(&meta.speaker),
            text.trim(),
        ));
        match r {
            Ok(_) => Stored::Done,
            Err(TurnError::Core(
                e @ (CoreError::CallEnded | CoreError::SessionNotFound | CoreError::NotACall),
            )) => Stored::Gone(e.to_string()),
            Err(TurnError::Core(CoreError::EmptyText)) => Stored::Done,
            Err(TurnError::Invalid(_, why)) => Stored::Gone(why),
            Err(TurnError::Core(e)) => Stored::Later(e.to_string()),
        }
    }

    fn call_state(&self, call_id: &str) -> CallState {
        match self.rt.block_on(self.ctx.conversation.sessions()) {
            Ok(sessions) => match sessions.iter().find(|s| s.session_id == call_id) {
                None => CallState::Deleted,
                Some(s) if s.ended_at.is_some() => CallState::Ended,
                Some(_) => CallState::Live,
            },
            Err(_) => CallState::Unknown,
        }
    }

    /// Whether the turn is already in its call's transcript (stored by a run that stopped
    /// before it could forget the turn): same speaker, same text, stored after it ended.
    fn already_stored(&self, meta: &TurnMeta, text: &str) -> bool {
        let Ok(turns) = self
            .rt
            .block_on(self.ctx.conversation.transcript(&meta.call_id))
        else {
            return false;
        };
        turns.iter().rev().take(200).any(|t| {
            t.speaker.as_deref() == Some(meta.speaker.as_str())
                && t.text.trim() == text.trim()
                && chrono::DateTime::parse_from_rfc3339(&t.received_at)
                    .is_ok_and(|at| at.timestamp_millis() >= meta.ended_at_ms - 5_000)
        })
    }
}

/// The backlog's drainer: transcribes and stores the waiting turns in order, for the app's
/// life (until `shared.stopping`).
pub(crate) fn drain(shared: Arc<Shared>) {
    let finals = &shared.finals;
    let mut retry_at: Option<(Instant, u64)> = None;
    while !shared.stopping.load(Ordering::SeqCst) {
        let seen = finals.kicks();
        let Some((turn, sending)) = shared.backlog.first() else {
            retry_at = None;
            finals.wait_kick(seen, Duration::from_secs(5));
            continue;
        };
        let meta = turn.meta.clone();
        // An earlier turn still being recognised goes first.
        if finals.first_in_flight().is_some_and(|s| s < meta.seq) {
            finals.wait_kick(seen, Duration::from_millis(500));
            continue;
        }
        // Waiting for the engine (a new engine does not wait).
        if let Some((at, generation)) = retry_at {
            if Instant::now() < at && generation == shared.engine_generation() {
                finals.wait_kick(seen, at - Instant::now());
                continue;
            }
        }
        // A call deleted meanwhile takes its audio with it; an ended one takes no more turns.
        match shared.call_state(&meta.call_id) {
            CallState::Live | CallState::Unknown => {}
            CallState::Ended => {
                tracing::warn!(
                    seq = meta.seq,
                    "a backlog turn's call has ended: it cannot be added"
                );
                shared.count_gone(&meta);
                shared.backlog.remove(meta.seq);
                shared.changed();
                continue;
            }
            CallState::Deleted => {
                shared.backlog.remove(meta.seq);
                shared.changed();
                continue;
            }
        }
        let text = match (sending, &meta.text) {
            (Some(t), _) => {
                if shared.already_stored(&meta, &t) {
                    tracing::info!(
                        seq = meta.seq,
                        "a backlog turn was stored before the restart"
                    );
                    shared.backlog.remove(meta.seq);
                    shared.changed();
                    continue;
                }
                t
            }
            (None, Some(t)) => t.clone(),
            (None, None) => {
                let generation = shared.engine_generation();
                let r = shared.engine().and_then(|e| {
                    let mut u = e.begin()?;
                    u.push(&turn.samples)?;
                    u.finish()
                });
                shared.engine_outcome(r.as_ref().map(|_| ()));
                match r {
                    Ok(t) => t,
                    Err(e) => {
                        // Every failure is retried, also an answer that is not a transcription
                        // (a misconfigured server answers every turn so): the turn is never
                        // given up while it is kept, and the status says what fails, so the
                        // user can fix the server or choose another engine.
                        let tries = shared.backlog.failed(meta.seq);
                        let wait = BACKOFF.delay(tries);
                        tracing::info!(seq = meta.seq, tries, retry_in = ?wait, error = %e, "backlog: the engine failed");
                        retry_at = Some((Instant::now() + wait, generation));
                        shared.changed();
                        continue;
                    }
                }
            }
        };
        retry_at = None;
        let text = text.trim().to_string();
        if text.is_empty()
            || (meta.channel == Channel::Mic && finals.is_echo(&meta, &text, &turn.samples, false))
        {
            shared.backlog.remove(meta.seq);
            shared.changed();
            continue;
        }
        if let Err(e) = shared.backlog.sending(meta.seq, &text) {
            tracing::warn!(seq = meta.seq, error = %e, "cannot mark a backlog turn as being stored");
        }
        let o = finals.order.lock().unwrap();
        let stored = shared.store(&meta, &text);
        match stored {
            Stored::Done => {
                shared.backlog.remove(meta.seq);
                drop(o);
                if meta.channel == Channel::System {
                    finals.them_done("", Some((&meta, &text)));
                }
            }
            Stored::Gone(why) => {
                tracing::warn!(
                    seq = meta.seq,
                    why,
                    "a backlog turn could not be stored: its call is gone"
                );
                shared.count_gone(&meta);
                shared.backlog.remove(meta.seq);
            }
            Stored::Later(why) => {
                drop(o);
                tracing::warn!(
                    seq = meta.seq,
                    why,
                    "a backlog turn could not be stored yet"
                );
                retry_at = Some((
                    Instant::now() + Duration::from_secs(2),
                    shared.engine_generation(),
                ));
            }
        }
        shared.changed();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(start: i64, end: i64) -> TurnMeta {
        TurnMeta {
            seq: 1,
            call_id: "c".into(),
            channel: Channel::Mic,
            speaker: "You".into(),
            started_at_ms: start,
            ended_at_ms: end,
            samples: 0,
            text: None,
            attempts: 0,
        }
    }

    #[test]
    fn a_you_turn_is_an_echo_only_of_a_them_turn_close_in_time_and_words() {
        let f = Finals::new();
        let them = TurnMeta {
            channel: Channel::System,
            ..meta(10_000, 14_000)
        };
        f.them_started("t1", 10_000);
        f.them_done(
            "t1",
            Some((&them, "Our budget is about twenty thousand dollars.")),
        );
        // Mostly the same words, at the same time: an echo (recognised a little differently).
        assert!(f.is_echo(
            &meta(10_200, 14_100),
            "our budget is about twenty thousand",
            &[],
            true
        ));
        assert!(f.is_echo(
            &meta(10_200, 14_100),
            "the budget is about twenty dollars",
            &[],
            false
        ));
        // Other words at the same time: the user spoke over them.
        assert!(!f.is_echo(
            &meta(10_200, 14_100),
            "sorry can you repeat that",
            &[],
            false
        ));
        // The same words much later: said again, not an echo.
        assert!(!f.is_echo(
            &meta(30_000, 33_000),
            "our budget is about twenty thousand",
            &[],
            false
        ));
        assert!(!f.is_echo(&meta(10_200, 14_100), "", &[], false));
    }

    #[test]
    fn a_you_final_waits_for_an_overlapping_them_turn_still_being_recognised() {
        let f = Arc::new(Finals::new());
        f.them_started("t1", 10_000);
        f.them_ended("t1", 13_000);
        let them = TurnMeta {
            channel: Channel::System,
            ..meta(10_000, 13_000)
        };
        let g = f.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            g.them_done("t1", Some((&them, "let's meet on Tuesday at three")));
        });
        let began = Instant::now();
        assert!(f.is_echo(
            &meta(10_100, 13_200),
            "let's meet on tuesday at three",
            &[],
            true
        ));
        assert!(began.elapsed() >= Duration::from_millis(150));
        t.join().unwrap();
        // Not overlapping: no wait at all.
        f.them_started("t2", 50_000);
        let began = Instant::now();
        assert!(!f.is_echo(&meta(10_100, 13_200), "hello", &[], true));
        assert!(began.elapsed() < Duration::from_millis(100));
    }

    /// A speech-like level pattern (syllables of varying loudness), 20 ms frames.
    fn pattern(seed: u32, n: usize) -> Vec<f32> {
        let mut x = seed;
        (0..n)
            .map(|i| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                let syllable = ((i / 7) as f32 * 0.9).sin().abs();
                syllable * (0.05 + (x >> 16) as f32 / 65_536.0 * 0.1)
            })
            .collect()
    }

    #[test]
    fn the_microphone_picking_up_the_call_follows_its_level_at_a_lag() {
        let call = pattern(7, 400);
        let system: Vec<(i64, f32)> = call
            .iter()
            .enumerate()
            .map(|(i, v)| (100_000 + i as i64 * 20, *v))
            .collect();
        // The same audio 240 ms later in the microphone, quieter: an echo.
        let start = 100_000 + 60 * 20 + 240;
        let echo: Vec<f32> = call[60..260].iter().map(|v| v * 0.3).collect();
        let c = envelope_match(&echo, start, &system).unwrap();
        assert!(c > 0.95, "{c}");
        // Someone else speaking at the same time: no echo.
        let other = pattern(99, 200);
        let c = envelope_match(&other, start, &system).unwrap();
        assert!(c < ECHO_CORRELATION, "{c}");
        // The call silent then, or not recorded: cannot tell.
        let silent: Vec<(i64, f32)> = system.iter().map(|(t, _)| (*t, 0.0)).collect();
        assert_eq!(envelope_match(&echo, start, &silent), None);
        assert_eq!(envelope_match(&echo, start, &[]), None);
        // The acoustic check decides without waiting for the other side's text.
        let f = Finals::new();
        for (t, v) in &system {
            f.system_level(*t, *v);
        }
        f.them_started("still-open", start);
        let samples: Vec<i16> = echo
            .iter()
            .flat_map(|v| std::iter::repeat_n((*v * 32767.0) as i16, ENV_FRAME))
            .collect();
        let m = meta(start, start + 200 * 20);
        let began = Instant::now();
        assert!(f.is_echo(&m, "anything at all", &samples, true));
        assert!(began.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn words_ignore_case_and_punctuation() {
        assert_eq!(words("Hi, it's $20,000!"), ["hi", "it's", "20", "000"]);
    }
}
