//! Who said it: the call's other side told apart, on the device.
//!
//! | module | holds |
//! |---|---|
//! | [`fbank`] | Kaldi-style log mel filter-bank features (80 bins, 25 ms frames every 10 ms) |
//! | [`embed`] | [`embed::Embedder`]: a turn's audio → a speaker embedding (CAM++ through ONNX Runtime, loaded at run time), and where the runtime library is looked for |
//! | [`cluster`] | [`cluster::Labeller`]: embeddings → speakers, online turn by turn and once more at the end of the call; known voices |
//!
//! [`Diarizer`] puts them together for one call (or one file): [`Diarizer::turn`] labels a turn
//! from its audio, [`Diarizer::finish`] runs the end-of-call pass. Everything blocks: callers
//! run it on a thread of their own, after the turn's text is out (labels follow, they never
//! hold a turn back).
//!
//! Speakers are numbered from 0 in order of first appearance; [`default_name`] makes the
//! "Speaker 1", "Speaker 2", … people see.

pub mod cluster;
pub mod embed;
pub mod fbank;

pub use cluster::{Config, Known, KnownMatch, Label, Labeller};
pub use embed::{EmbedError, Embedder};

use std::sync::Arc;

/// The file name of the speaker model in the data dir's `models/speakers/` folder.
pub const MODEL_FILE: &str = "campplus.onnx";

/// "Speaker 1" for speaker 0, and so on.
pub fn default_name(speaker: usize) -> String {
    format!("Speaker {}", speaker + 1)
}

/// The name a label shows: a known person's ("Dana", or "Dana?" while unconfirmed), else
/// [`default_name`].
pub fn label_name(label: &Label) -> String {
    match &label.known {
        Some(k) if k.confirmed => k.name.clone(),
        Some(k) => format!("{}?", k.name),
        None => default_name(label.speaker),
    }
}

/// The speakers of one call: the model (shared) and the call's labeller.
pub struct Diarizer {
    embedder: Arc<Embedder>,
    labeller: Labeller,
}

impl Diarizer {
    pub fn new(embedder: Arc<Embedder>, cfg: Config, known: Vec<Known>) -> Diarizer {
        Diarizer {
            embedder,
            labeller: Labeller::new(cfg, known),
        }
    }

    /// The next turn (16 kHz mono audio): its speaker. A turn the model fails on takes the
    /// previous speaker, tentative (logged), rather than failing the call.
    pub fn turn(&mut self, samples: &[i16]) -> Label {
        // How long the turn is heard for: its silence does not make it a long one.
        let ms = embed::audible(samples).len() as u64 / 16;
        let embedding = match self.embedder.embed(samples) {
            Ok(e) => e,
            Err(e) => {
                tracing::warn!(error = %e, "no speaker embedding for a turn");
                None
            }
        };
        self.labeller.assign(embedding, ms)
    }

    /// The end-of-call pass: `(turn index, new label)` for the turns that changed.
    pub fn finish(&mut self) -> Vec<(usize, Label)> {
        self.labeller.recluster()
    }

    pub fn labeller(&self) -> &Labeller {
        &self.labeller
    }
}
