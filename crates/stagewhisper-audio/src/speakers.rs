//! Who said it, live: the "Them" channel's turns labelled `Speaker 1`, `Speaker 2`, … by voice
//! (`stagewhisper_speakers`), when the settings' `speakers.enabled` is on and the model is in
//! the data dir's `models/speakers/` folder ([`MODEL_FILE`]) with the ONNX Runtime library
//! found (see `stagewhisper_speakers::embed`).
//!
//! **Timing.** A turn's label is computed on a thread of its own while the engine finishes the
//! turn's text (the embedding of a turn takes a small fraction of its length, see the README's
//! figures), and the turn is stored with it: the label does not hold the text back unless the
//! model is slower than the engine. Without the model, or when it fails, turns stay "Them" —
//! nothing else changes.
//!
//! **Per call** the labeller keeps the voices heard so far; numbers follow the order of first
//! appearance and stay for the whole call (a later re-clustering pass is not applied live: the
//! stored turns keep the label they were sent to the assistant with).

use stagewhisper_speakers::{default_name, Config, Diarizer, EmbedError, Embedder, MODEL_FILE};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The live labeller of the service: the model (loaded once, when first needed) and each
/// call's voices.
pub struct LiveSpeakers {
    models_dir: PathBuf,
    embedder: Mutex<Option<Result<Arc<Embedder>, String>>>,
    calls: Mutex<HashMap<String, Diarizer>>,
}

impl LiveSpeakers {
    /// `data_dir`: the app's data dir (the model is in its `models/speakers/`).
    pub fn new(data_dir: &Path) -> LiveSpeakers {
        LiveSpeakers {
            models_dir: crate::models::models_dir(data_dir).join("speakers"),
            embedder: Mutex::new(None),
            calls: Mutex::new(HashMap::new()),
        }
    }

    /// Where the model is looked for.
    pub fn model_path(&self) -> PathBuf {
        self.models_dir.join(MODEL_FILE)
    }

    /// The model, loaded on first use. A missing file is looked for again next time (it may
    /// have been put there since); a file that fails to load is not retried.
    fn embedder(&self) -> Result<Arc<Embedder>, String> {
        let mut slot = self.embedder.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(r) = slot.as_ref() {
            return r.clone();
        }
        let r = Embedder::load(&self.model_path(), Some(&self.models_dir))
            .map(Arc::new)
            .map_err(|e| match e {
                EmbedError::NoModel(_) => format!(
                    "no speaker model: put the CAM++ model (ONNX) at {}",
                    self.model_path().display()
                ),
                e => e.to_string(),
            });
        if r.is_ok() || self.model_path().is_file() {
            *slot = Some(r.clone());
        }
        r
    }

    /// Whether speaker separation can run here, and what is missing or used, in plain words.
    pub fn availability(&self) -> (bool, String) {
        match self.embedder() {
            Ok(_) => (
                true,
                format!(
                    "speaker model {} (on this computer)",
                    self.model_path().display()
                ),
            ),
            Err(e) => (false, e),
        }
    }

    /// A "Them" turn of `call_id` (16 kHz mono): its speaker's name, or `None` without a
    /// model (the turn keeps its channel's label). Blocking.
    pub fn label(&self, call_id: &str, samples: &[i16]) -> Option<String> {
        let embedder = match self.embedder() {
            Ok(e) => e,
            Err(e) => {
                tracing::debug!(error = %e, "speakers are not told apart");
                return None;
            }
        };
        let mut calls = self.calls.lock().unwrap_or_else(|e| e.into_inner());
        // One call at a time is listened to: the voices of an earlier call are let go.
        calls.retain(|id, _| id == call_id);
        let d = calls
            .entry(call_id.to_string())
            .or_insert_with(|| Diarizer::new(embedder, Config::default(), Vec::new()));
        Some(default_name(d.turn(samples).speaker))
    }
}
