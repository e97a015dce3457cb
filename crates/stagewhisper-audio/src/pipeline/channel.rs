//! One channel of a listening call: its two threads, never the async runtime's workers.
//!
//! - **capture** ([`crate::capture::run`]): reads the sound server, resamples to 16 kHz
//!   ([`Resampler`]), cuts turns ([`TurnMaker`]) and measures the level (and, for the call's
//!   channel, its envelope for the echo check). It never waits on the engine, so the server never
//!   has to drop audio because recognition is slow;
//! - **recognizer**: feeds each turn to an [`Utterance`] of the current engine as it comes,
//!   publishes a partial at least every [`PARTIAL_EVERY`] while the turn is open, and hands the
//!   final (or the engine's failure) to [`deliver`].
//!
//! Between the two is an unbounded channel whose audio is counted: when the recognizer is more
//! than [`MAX_QUEUED_SECONDS`] behind (an engine that answers very slowly), new turns skip it
//! and go whole to the backlog on disk ([`keep`]), where they wait their turn. Nothing is
//! dropped.

use super::deliver::{deliver, keep};
use super::echo::ENV_FRAME;
use super::shared::Shared;
use crate::backlog::{Turn, TurnMeta};
use crate::capture::{self, Event};
use crate::engine::{EngineError, Utterance};
use crate::pcm::Resampler;
use crate::turns::{rms, TurnConfig, TurnEvent, TurnMaker};
use stagewhisper_core::audio::{Channel, SourceChoice};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A partial at least this often while a turn is open (the issue asks for ≤ 1.5 s).
pub const PARTIAL_EVERY: Duration = Duration::from_millis(1000);
/// Audio the recognizer of a channel may be behind before new turns go to the backlog.
pub const MAX_QUEUED_SECONDS: usize = 60;
const MAX_QUEUED: usize = MAX_QUEUED_SECONDS * 16_000;

/// What the capture thread hands its recognizer.
enum Work {
    Start { turn_id: String },
    Audio(Vec<i16>),
    End { meta: TurnMeta },
}

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
                self.shared
                    .finals
                    .echo
                    .system_level(at, rms(&self.env_frame));
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
                        self.shared
                            .finals
                            .echo
                            .them_started(&turn_id, started_at_ms);
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
                        language: None,
                    };
                    if self.channel == Channel::System {
                        self.shared
                            .finals
                            .echo
                            .them_ended(&heard.turn_id, meta.ended_at_ms);
                    }
                    match heard.spill {
                        Some(samples) => {
                            self.shared
                                .publish_final(&meta, &heard.turn_id, "", "queued");
                            if self.channel == Channel::System {
                                self.shared.finals.echo.them_done(&heard.turn_id, None);
                            }
                            keep(&self.shared, Turn { meta, samples });
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

/// The turn's final text from the engine and, for "Them" with speaker separation on, its
/// speaker's name: computed on a thread of its own while the engine finishes.
fn finish_turn(
    shared: &Arc<Shared>,
    call_id: &str,
    channel: Channel,
    seq: u64,
    c: &mut Recognising,
) -> (Result<crate::engine::Heard, EngineError>, Option<String>) {
    let label = channel == Channel::System && shared.settings().speakers.enabled;
    let samples = &c.samples;
    let utterance = c.utterance.take();
    let failed = c.failed.take();
    std::thread::scope(|s| {
        let who = label.then(|| s.spawn(|| shared.speakers.label(call_id, seq, samples)));
        let result = match (utterance, failed) {
            (Some(u), _) => u.finish_heard().inspect(|h| {
                // The stored turn carries the language heard; the log says it was not forced.
                if h.language_mismatch {
                    tracing::warn!(language = ?h.language, ?channel, "a turn was not in the language forced: written in the language heard");
                }
            }),
            (None, Some(e)) => Err(e),
            (None, None) => Err(EngineError::down("no engine")),
        };
        (result, who.and_then(|h| h.join().ok().flatten()))
    })
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
            Ok(Work::End { mut meta }) => {
                let Some(mut c) = cur.take() else {
                    shared.finals.in_flight(meta.seq, false);
                    continue;
                };
                let (result, speaker) = finish_turn(shared, call_id, channel, meta.seq, &mut c);
                if let Some(name) = speaker {
                    meta.speaker = name;
                }
                let result = result.map(|h| {
                    meta.language = h.language;
                    h.text
                });
                shared.engine_outcome(result.as_ref().map(|_| ()));
                deliver(shared, meta, &c.turn_id, result, c.samples);
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
