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
//! appearance. A voice that matches a voiceprint of an earlier call
//! (`stagewhisper_core::voiceprints`) is named at once, "Dana?" until enough of its speech
//! agrees, then "Dana". A speaker renamed ([`LiveSpeakers::rename`]) keeps the name for the
//! rest of the call and gives its voiceprint to be kept.
//!
//! **At the end of the call** ([`LiveSpeakers::finish`]) every turn is clustered again with the
//! whole call in view; the stored turns whose speaker changed are relabelled (the conversation
//! rewrites them, the views and the export follow). The voices of the last call stay in memory
//! until the next one starts, so a speaker can still be renamed — and remembered — afterwards.

use stagewhisper_core::audio::SpeakerPrint;
use stagewhisper_core::voiceprints::Voiceprints;
use stagewhisper_speakers::{
    label_name, Config, Diarizer, EmbedError, Embedder, Known, Label, MODEL_FILE,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// One call's voices: the diarizer, the names given, and each turn's stored row.
struct CallVoices {
    call_id: String,
    diarizer: Diarizer,
    /// Speaker number → the name given in this call.
    names: HashMap<usize, String>,
    /// Each labelled turn's place in the transcript (`TurnMeta::seq`), in labelling order.
    seqs: Vec<u64>,
    /// The row each turn was stored as, by `seq`.
    rows: HashMap<u64, i64>,
}

impl CallVoices {
    fn name_of(&self, label: &Label) -> String {
        self.names
            .get(&label.speaker)
            .cloned()
            .unwrap_or_else(|| label_name(label))
    }

    /// The name speaker `s` shows now.
    fn speaker_name(&self, s: usize) -> String {
        self.name_of(&Label {
            speaker: s,
            tentative: false,
            known: self.diarizer.labeller().known_of(s),
        })
    }
}

/// The live labeller of the service: the model (loaded once, when first needed) and the
/// current (or last) call's voices.
pub struct LiveSpeakers {
    models_dir: PathBuf,
    voiceprints: Voiceprints,
    embedder: Mutex<Option<Result<Arc<Embedder>, String>>>,
    call: Mutex<Option<CallVoices>>,
}

impl LiveSpeakers {
    /// `data_dir`: the app's data dir (the model is in its `models/speakers/`).
    pub fn new(data_dir: &Path) -> LiveSpeakers {
        LiveSpeakers {
            models_dir: crate::models::models_dir(data_dir).join("speakers"),
            voiceprints: Voiceprints::new(data_dir),
            embedder: Mutex::new(None),
            call: Mutex::new(None),
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

    /// The voiceprints of earlier calls (none when the file cannot be read: logged).
    fn known(&self) -> Vec<Known> {
        match self.voiceprints.list() {
            Ok(list) => list
                .into_iter()
                .map(|v| Known {
                    id: v.id,
                    name: v.name,
                    embedding: v.embedding,
                })
                .collect(),
            Err(e) => {
                tracing::warn!(error = %e, "voiceprints not read: no voice is known by name");
                Vec::new()
            }
        }
    }

    /// A "Them" turn of `call_id` (16 kHz mono), at `seq` in the transcript: its speaker's
    /// name, or `None` without a model (the turn keeps its channel's label). Blocking.
    pub fn label(&self, call_id: &str, seq: u64, samples: &[i16]) -> Option<String> {
        let embedder = match self.embedder() {
            Ok(e) => e,
            Err(e) => {
                tracing::debug!(error = %e, "speakers are not told apart");
                return None;
            }
        };
        let mut call = self.call.lock().unwrap_or_else(|e| e.into_inner());
        // One call at a time is listened to: the voices of an earlier call are let go.
        if call.as_ref().is_none_or(|c| c.call_id != call_id) {
            *call = Some(CallVoices {
                call_id: call_id.to_string(),
                diarizer: Diarizer::new(embedder, Config::default(), self.known()),
                names: HashMap::new(),
                seqs: Vec::new(),
                rows: HashMap::new(),
            });
        }
        let c = call.as_mut().expect("just set");
        let label = c.diarizer.turn(samples);
        c.seqs.push(seq);
        Some(c.name_of(&label))
    }

    /// The turn at `seq` of `call_id` was stored as row `row`.
    pub fn stored(&self, call_id: &str, seq: u64, row: i64) {
        let mut call = self.call.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(c) = call.as_mut().filter(|c| c.call_id == call_id) {
            c.rows.insert(seq, row);
        }
    }

    /// Renames the speakers of `call_id` shown as `label` (when it is the current or last
    /// call): their next turns carry `name`. The voiceprint of the one heard the longest.
    pub fn rename(&self, call_id: &str, label: &str, name: &str) -> Option<SpeakerPrint> {
        let mut call = self.call.lock().unwrap_or_else(|e| e.into_inner());
        let c = call.as_mut().filter(|c| c.call_id == call_id)?;
        let l = c.diarizer.labeller();
        let matching: Vec<usize> = (0..l.speakers())
            .filter(|&s| c.speaker_name(s) == label)
            .collect();
        let best = matching
            .iter()
            .copied()
            .max_by_key(|&s| l.speech_ms(s))
            .and_then(|s| {
                l.voiceprint(s).map(|embedding| SpeakerPrint {
                    embedding,
                    speech_ms: l.speech_ms(s),
                })
            })
            .filter(|p| p.speech_ms > 0);
        for s in matching {
            c.names.insert(s, name.to_string());
        }
        best
    }

    /// The end-of-call pass over `call_id`'s voices: `(row, speaker name)` of every stored
    /// turn, with the whole call in view (the conversation rewrites those that changed).
    pub fn finish(&self, call_id: &str) -> Vec<(i64, String)> {
        let mut call = self.call.lock().unwrap_or_else(|e| e.into_inner());
        let Some(c) = call.as_mut().filter(|c| c.call_id == call_id) else {
            return Vec::new();
        };
        let changed = c.diarizer.finish();
        tracing::info!(%call_id, turns = changed.len(), "end-of-call speaker pass");
        let labels = c.diarizer.labeller().labels();
        labels
            .iter()
            .zip(&c.seqs)
            .filter_map(|(label, seq)| Some((*c.rows.get(seq)?, c.name_of(label))))
            .collect()
    }
}
