//! [`Shared`]: what every thread of the pipeline reaches, and the service with it: the app's
//! context and runtime, the backlog, the [`Finals`], the levels, the state (its status
//! published as an `audio_status` live event on every change), the current engine, and the
//! conversation (turns stored, calls looked up) as the threads see it.

use super::finals::Finals;
use super::status::{self, ChannelState, EngineSlot, State};
use crate::backlog::{Backlog, TurnMeta};
use crate::capture::{Down, Source};
use crate::engine::EngineSettings;
use crate::engine::{self, Engine, EngineError};
use crate::settings::AudioSettings;
use stagewhisper_core::audio::{AudioStatus, Channel, EarsContext, TurnError};
use stagewhisper_core::conversation::CoreError;
use stagewhisper_core::events::Change;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use tokio::runtime::Handle;

/// Levels of the two channels since the last publication (0–1 peaks, as `f32` bits).
#[derive(Default)]
pub(crate) struct Levels {
    mic: AtomicU32,
    system: AtomicU32,
}

impl Levels {
    pub fn record(&self, channel: Channel, peak: f32) {
        let slot = match channel {
            Channel::Mic => &self.mic,
            Channel::System => &self.system,
        };
        let _ = slot.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |cur| {
            (peak.min(1.0) > f32::from_bits(cur)).then(|| peak.min(1.0).to_bits())
        });
    }

    pub fn take(&self, channel: Channel) -> f32 {
        let slot = match channel {
            Channel::Mic => &self.mic,
            Channel::System => &self.system,
        };
        f32::from_bits(slot.swap(0, Ordering::SeqCst))
    }
}

/// What every thread of the pipeline reaches.
pub(crate) struct Shared {
    pub ctx: EarsContext,
    pub rt: Handle,
    pub backlog: Backlog,
    pub finals: Finals,
    pub levels: Levels,
    /// The app is shutting down.
    pub stopping: AtomicBool,
    seq: Mutex<u64>,
    pub state: Mutex<State>,
    engine: Mutex<EngineSlot>,
    published: Mutex<Option<AudioStatus>>,
    /// Telling the "Them" channel's speakers apart (`crate::speakers`).
    pub speakers: crate::speakers::LiveSpeakers,
    /// Keeps the turns of calls that keep their audio (`crate::recording`).
    pub recorder: crate::recording::Recorder,
}

/// What became of a call whose turns wait.
pub(crate) enum CallState {
    Live,
    Ended,
    Deleted,
    /// The store did not answer: try as usual.
    Unknown,
}

/// How storing a turn went.
pub(crate) enum Stored {
    Done,
    /// The call is gone (ended or deleted) before the turn could be stored.
    Gone(String),
    /// Not now (storage refused, the app stopping): keep it and try again.
    Later(String),
}

impl Shared {
    /// What the threads share, with the `settings` and the `backlog` read at start; within the
    /// async runtime (its handle is kept for the threads).
    pub fn new(ctx: EarsContext, settings: &AudioSettings, backlog: Backlog) -> Shared {
        let first_seq = backlog.last_seq().unwrap_or(0);
        Shared {
            rt: Handle::current(),
            backlog,
            finals: Finals::new(),
            levels: Levels::default(),
            stopping: AtomicBool::new(false),
            seq: Mutex::new(first_seq),
            state: Mutex::new(State {
                settings: settings.clone(),
                listening: None,
                channels: HashMap::new(),
                gone_seconds: 0.0,
            }),
            engine: Mutex::new(EngineSlot {
                settings: settings.engine.clone(),
                engine: None,
                generation: 0,
                failing: None,
            }),
            published: Mutex::new(None),
            speakers: crate::speakers::LiveSpeakers::new(&ctx.data_dir),
            recorder: crate::recording::Recorder::new(&ctx.data_dir),
            ctx,
        }
    }

    pub fn now_ms(&self) -> i64 {
        self.ctx.clock.now_ms()
    }

    /// The next turn's place in the transcript's order: grows, also across restarts (it
    /// starts above the backlog's last and at the wall clock in microseconds).
    pub fn next_seq(&self) -> u64 {
        let mut s = self.seq.lock().unwrap();
        let now = (self.now_ms().max(0) as u64) * 1000;
        *s = (*s + 1).max(now);
        *s
    }

    pub fn label(&self, channel: Channel) -> String {
        self.state
            .lock()
            .unwrap()
            .settings
            .label(channel)
            .to_string()
    }

    pub fn settings(&self) -> AudioSettings {
        self.state.lock().unwrap().settings.clone()
    }

    /// Where the engines' model files are (the data dir's `models/`).
    pub fn models_dir(&self) -> std::path::PathBuf {
        crate::models::models_dir(&self.ctx.data_dir)
    }

    /// The current engine, built when first needed (building is quick: an engine loads its
    /// model in the background, or on its first utterance).
    pub fn engine(&self) -> Result<Arc<dyn Engine>, EngineError> {
        let (built, fresh) = {
            let mut slot = self.engine.lock().unwrap();
            let fresh = slot.engine.is_none();
            if fresh {
                let built = engine::build(&slot.settings, &self.models_dir());
                if let Err(e) = &built {
                    tracing::warn!(kind = slot.settings.kind(), error = %e, "the speech engine cannot be used");
                }
                slot.engine = Some(built);
            }
            (slot.engine.clone().expect("set above"), fresh)
        };
        if fresh {
            self.finals.kick();
            self.changed();
        }
        built
    }

    /// Another engine from now on (built when next needed); its generation.
    pub fn replace_engine(&self, settings: EngineSettings) -> u64 {
        let mut slot = self.engine.lock().unwrap();
        slot.generation += 1;
        slot.settings = settings;
        slot.engine = None;
        slot.failing = None;
        slot.generation
    }
    pub fn engine_generation(&self) -> u64 {
        self.engine.lock().unwrap().generation
    }

    /// How the engine's last attempt went.
    pub fn engine_outcome(&self, r: Result<(), &EngineError>) {
        let changed = {
            let mut e = self.engine.lock().unwrap();
            let next = r.err().cloned();
            let changed = e.failing != next;
            e.failing = next;
            changed
        };
        if changed {
            self.changed();
        }
    }

    pub fn channel_opened(&self, channel: Channel, src: &Source) {
        self.state
            .lock()
            .unwrap()
            .channels
            .insert(channel, ChannelState::Recording(src.clone()));
        self.changed();
    }

    pub fn channel_down(&self, channel: Channel, d: Down) {
        self.state
            .lock()
            .unwrap()
            .channels
            .insert(channel, ChannelState::Down(d));
        self.changed();
    }

    pub fn count_gone(&self, meta: &TurnMeta) {
        self.state.lock().unwrap().gone_seconds += turn_seconds(meta);
    }

    pub fn publish_partial(&self, call_id: &str, channel: Channel, turn_id: &str, text: &str) {
        self.ctx.publish_live(Change::TranscriptPartial {
            session_id: call_id.to_string(),
            turn_id: turn_id.to_string(),
            channel,
            speaker: self.label(channel),
            text: text.to_string(),
            is_final: false,
            outcome: None,
        });
    }

    /// The last event of a turn: `outcome` is `stored` (with its text), `empty` (nothing
    /// recognised), `queued` (waits in the backlog), `echo` (the microphone heard the other
    /// side) or `gone` (its call ended first).
    pub fn publish_final(&self, meta: &TurnMeta, turn_id: &str, text: &str, outcome: &str) {
        self.ctx.publish_live(Change::TranscriptPartial {
            session_id: meta.call_id.clone(),
            turn_id: turn_id.to_string(),
            channel: meta.channel,
            speaker: meta.speaker.clone(),
            text: text.trim().to_string(),
            is_final: true,
            outcome: Some(outcome.to_string()),
        });
    }

    /// Publishes the status if it changed.
    pub fn changed(&self) {
        let status = self.status();
        let mut last = self.published.lock().unwrap();
        if last.as_ref() != Some(&status) {
            self.ctx.publish_live(Change::AudioStatus {
                status: status.clone(),
            });
            *last = Some(status);
        }
    }

    /// The status, with its plain-words detail.
    pub fn status(&self) -> AudioStatus {
        let (engine, failing) = status::engine_status(&self.engine.lock().unwrap());
        let backlog = self.backlog.status();
        let disk_error = self.backlog.disk_error();
        let st = self.state.lock().unwrap();
        status::status(&st, engine, failing, backlog, disk_error)
    }

    /// Stores a final turn the way `POST /api/calls/{id}/transcript` does.
    pub fn store(&self, meta: &TurnMeta, text: &str) -> Stored {
        let r = self.rt.block_on(self.ctx.submit_turn(
            &meta.call_id,
            Some(&meta.speaker),
            text.trim(),
            meta.language.as_deref(),
        ));
        match r {
            Ok(t) => {
                self.recorder.stored(meta, t.id);
                if meta.channel == Channel::System {
                    self.speakers.stored(&meta.call_id, meta.seq, t.id);
                }
                Stored::Done
            }
            Err(TurnError::Core(
                e @ (CoreError::CallEnded | CoreError::SessionNotFound | CoreError::NotACall),
            )) => Stored::Gone(e.to_string()),
            Err(TurnError::Core(CoreError::EmptyText)) => Stored::Done,
            Err(TurnError::Invalid(_, why)) => Stored::Gone(why),
            Err(TurnError::Core(e)) => Stored::Later(e.to_string()),
        }
    }

    pub fn call_state(&self, call_id: &str) -> CallState {
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
    pub fn already_stored(&self, meta: &TurnMeta, text: &str) -> bool {
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

fn turn_seconds(meta: &TurnMeta) -> f64 {
    if meta.samples > 0 {
        meta.seconds()
    } else {
        (meta.ended_at_ms - meta.started_at_ms).max(0) as f64 / 1000.0
    }
}
