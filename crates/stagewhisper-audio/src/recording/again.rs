//! "Transcribe again with <model>": a past call's kept turns decoded by a Whisper model on a
//! thread of its own, then their texts replaced in one commit (all or none: a failure on the
//! way leaves the old turns). Each turn keeps its row, speaker, time and delivery state, so the
//! assistant is told nothing new. A turn the new model hears nothing in keeps its old text
//! (nothing a person said is dropped); a turn heard live as nothing in which the new model
//! hears words is added. Progress: `transcribe_progress` live events.

use super::{kept_turns, read_flac, KeptTurn};
use crate::engine::EngineSettings;
use crate::engine::{self, Engine, EngineErrorKind};
use stagewhisper_core::audio::{AudioError, EarsContext, AUTO_LANGUAGE};
use stagewhisper_core::recordings::{Retranscribed, TranscribeRequest, TranscribeView};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Progress events at most this often (and at the end).
const PROGRESS_EVERY: Duration = Duration::from_millis(250);

/// The runs of "Transcribe again" (one per call at a time).
pub struct Transcriber {
    ctx: EarsContext,
    models_dir: PathBuf,
    runs: Mutex<HashMap<String, TranscribeView>>,
}

fn conflict(code: &'static str, message: impl Into<String>) -> AudioError {
    AudioError {
        status: 409,
        code,
        message: message.into(),
    }
}

impl Transcriber {
    pub fn new(ctx: EarsContext, models_dir: PathBuf) -> Arc<Transcriber> {
        Arc::new(Transcriber {
            ctx,
            models_dir,
            runs: Mutex::new(HashMap::new()),
        })
    }

    /// The latest run of `call_id` since the app started: running, or how it ended.
    pub fn latest(&self, call_id: &str) -> Option<TranscribeView> {
        self.runs.lock().unwrap().get(call_id).cloned()
    }

    /// Checks the request (the route has checked the call is a past call), then starts the
    /// run: `409 transcribe_in_progress`, `no_recording`, `model_unavailable`; `400
    /// invalid_model`.
    pub fn start(
        self: &Arc<Self>,
        call_id: &str,
        request: TranscribeRequest,
    ) -> Result<TranscribeView, AudioError> {
        let language = request
            .language
            .clone()
            .unwrap_or_else(|| AUTO_LANGUAGE.to_string());
        let settings = EngineSettings::Whisper {
            model: request.model.clone(),
            language: language.clone(),
        };
        let engine = engine::build(&settings, &self.models_dir).map_err(|e| match e.kind {
            EngineErrorKind::Rejected => AudioError::bad("invalid_model", e.message),
            _ => conflict("model_unavailable", e.message),
        })?;
        let turns = kept_turns(&self.ctx.data_dir, call_id)
            .map_err(|e| AudioError::internal("recording_unreadable", e.to_string()))?;
        if turns.is_empty() {
            return Err(conflict(
                "no_recording",
                "no turn of this call has its audio kept: there is nothing to transcribe again",
            ));
        }
        let view = TranscribeView {
            model: request.model,
            language,
            state: "running".into(),
            done: 0,
            total: turns.len() as u64,
            changed: None,
            error: None,
            message: None,
        };
        {
            let mut runs = self.runs.lock().unwrap();
            if runs.get(call_id).is_some_and(|r| r.state == "running") {
                return Err(conflict(
                    "transcribe_in_progress",
                    "this call is being transcribed again already",
                ));
            }
            runs.insert(call_id.to_string(), view.clone());
        }
        self.publish(call_id, &view);
        let (me, call, rt) = (
            self.clone(),
            call_id.to_string(),
            tokio::runtime::Handle::current(),
        );
        let first = view.clone();
        let spawned = std::thread::Builder::new()
            .name("sw-transcribe-again".into())
            .spawn(move || {
                let end = me.run(&rt, &call, engine, &turns, view);
                me.runs.lock().unwrap().insert(call.clone(), end.clone());
                me.publish(&call, &end);
            });
        if let Err(e) = spawned {
            self.runs.lock().unwrap().remove(call_id);
            return Err(AudioError::internal("internal_error", e.to_string()));
        }
        Ok(first)
    }

    fn publish(&self, call_id: &str, view: &TranscribeView) {
        self.ctx.publish_live(view.event(call_id));
    }

    /// Decodes every turn, then stores the texts at once; answers the final state.
    fn run(
        &self,
        rt: &tokio::runtime::Handle,
        call_id: &str,
        engine: Arc<dyn Engine>,
        turns: &[KeptTurn],
        mut view: TranscribeView,
    ) -> TranscribeView {
        let started = Instant::now();
        let mut last = Instant::now();
        let mut texts = Vec::with_capacity(turns.len());
        for t in turns {
            match transcribe_turn(engine.as_ref(), t) {
                Ok(r) => texts.push(r),
                Err((code, message)) => return failed(view, code, message),
            }
            view.done += 1;
            self.runs
                .lock()
                .unwrap()
                .insert(call_id.to_string(), view.clone());
            if last.elapsed() >= PROGRESS_EVERY {
                self.publish(call_id, &view);
                last = Instant::now();
            }
        }
        match rt.block_on(self.ctx.conversation.retranscribe(call_id, texts)) {
            Ok(n) => {
                tracing::info!(turns = view.total, changed = n, took = ?started.elapsed(), "a call was transcribed again");
                view.state = "done".into();
                view.changed = Some(n);
                view
            }
            Err(e) => {
                use stagewhisper_core::conversation::CoreError as C;
                let code = match e {
                    C::SessionNotFound | C::MessageNotFound | C::NotACall => "call_gone",
                    _ => "storage_unavailable",
                };
                failed(view, code, e.to_string())
            }
        }
    }
}

/// One kept turn decoded: its new text, or why the run stops.
fn transcribe_turn(
    engine: &dyn Engine,
    t: &KeptTurn,
) -> Result<Retranscribed, (&'static str, String)> {
    let samples = read_flac(&t.file).map_err(|e| ("recording_unreadable", e.to_string()))?;
    let engine_failed = |e: crate::engine::EngineError| {
        let code = match e.kind {
            EngineErrorKind::Unavailable => "model_unavailable",
            _ => "engine_failed",
        };
        (code, e.message)
    };
    let mut u = engine.begin().map_err(engine_failed)?;
    u.push(&samples).map_err(engine_failed)?;
    let heard = u.finish_heard().map_err(engine_failed)?;
    Ok(Retranscribed {
        row: t.row,
        speaker: t.speaker.clone(),
        at_ms: t.end_ms,
        text: heard.text,
        language: heard.language,
    })
}

fn failed(mut view: TranscribeView, code: &str, message: String) -> TranscribeView {
    tracing::warn!(code, %message, "transcribing a call again failed: its turns are as they were");
    view.state = "failed".into();
    view.error = Some(code.to_string());
    view.message = Some(message);
    view
}
