//! Speech recognition engines behind one trait, the way assistant kinds are.
//!
//! An [`Engine`] opens an [`Utterance`] per turn; the turn's audio is pushed as it comes
//! (16 kHz mono `i16`, [`crate::pcm::RATE`]), [`Utterance::partial`] gives the best guess so
//! far, [`Utterance::finish`] the final text. Everything here **blocks**: callers run engines on
//! threads of their own, never on the async runtime's workers.
//!
//! The shape fits every engine we know of: one that decodes as audio comes (PocketSphinx:
//! `push` decodes, `finish` only closes the utterance), one that sends a whole turn to a
//! server (`push` buffers, `finish` uploads; `partial` uploads the audio so far in the
//! background), and one that runs a model file in process on the whole turn (whisper.cpp,
//! Parakeet via ONNX: `push` buffers, `finish` decodes, `partial` decodes what it has).

use std::fmt;
use std::sync::Arc;

/// One speech recognition engine, shared by every turn (`Send + Sync`).
pub trait Engine: Send + Sync + 'static {
    /// `"builtin"`, `"openai"`, … (as in the settings).
    fn kind(&self) -> &'static str;
    /// Opens an utterance (a turn). May wait for a model to load.
    fn begin(&self) -> Result<Box<dyn Utterance>, EngineError>;

    /// Tries the engine before a call needs it (Settings' Save and Test). By default, a turn of
    /// [`CHECK_MS`] of silence: a server engine makes one short request, a model engine loads
    /// its model and decodes it. Whatever it recognises is not used. An engine with a cheaper
    /// way to know it works may say so here.
    fn check(&self) -> Result<(), EngineError> {
        let mut u = self.begin()?;
        u.push(&vec![
            0i16;
            (crate::pcm::RATE as u64 * CHECK_MS / 1000) as usize
        ])?;
        u.finish().map(|_| ())
    }
    /// What it is and how it is, in a sentence for people (the status's detail when it works).
    fn describe(&self) -> String {
        "Ready.".into()
    }
}

/// A turn's final text, with what the engine knows of its language.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Heard {
    /// `""` when nothing was recognised.
    pub text: String,
    /// ISO-639-1 code of the text's language, when the engine tells it.
    pub language: Option<String>,
    /// A language was forced and the turn was surely another one (`language` is the one
    /// heard).
    pub language_mismatch: bool,
}

/// The silence [`Engine::check`] transcribes, in milliseconds.
pub const CHECK_MS: u64 = 500;

/// One turn being recognised. Not shared between threads; may move between them.
pub trait Utterance: Send {
    /// More of the turn's audio: 16 kHz mono, in order, any chunk size.
    fn push(&mut self, samples: &[i16]) -> Result<(), EngineError>;
    /// The best guess so far (cheap; may start work in the background); `None`: nothing yet.
    fn partial(&mut self) -> Option<String>;
    /// Everything pushed: the final text (`""` when nothing was recognised).
    fn finish(self: Box<Self>) -> Result<String, EngineError>;
    /// [`Utterance::finish`] with the turn's language when the engine knows it.
    fn finish_heard(self: Box<Self>) -> Result<Heard, EngineError> {
        self.finish().map(|text| Heard {
            text,
            ..Heard::default()
        })
    }
}

/// Why an engine failed, by what the caller should do about it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EngineErrorKind {
    /// It cannot run here at all (library or model not installed): tell the user how to
    /// install it; retrying will not help.
    Unavailable,
    /// It did not answer (connection refused, timeout, 5xx, rate limited): keep the audio,
    /// retry later.
    Down,
    /// It answered with a refusal (4xx: a bad key, an unknown model, …): the settings need a
    /// change; the audio is kept.
    Rejected,
    /// An answer that is not a transcription, or audio it could not decode.
    Decode,
}

impl EngineErrorKind {
    /// A stable code: `unavailable`, `down`, `rejected`, `decode`.
    pub fn as_str(self) -> &'static str {
        match self {
            EngineErrorKind::Unavailable => "unavailable",
            EngineErrorKind::Down => "down",
            EngineErrorKind::Rejected => "rejected",
            EngineErrorKind::Decode => "decode",
        }
    }
}

impl fmt::Display for EngineErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An engine's failure: its kind and a sentence for people (never an API key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct EngineError {
    pub kind: EngineErrorKind,
    pub message: String,
}

impl EngineError {
    pub fn new(kind: EngineErrorKind, message: impl Into<String>) -> EngineError {
        EngineError {
            kind,
            message: message.into(),
        }
    }

    pub fn unavailable(message: impl Into<String>) -> EngineError {
        EngineError::new(EngineErrorKind::Unavailable, message)
    }

    pub fn down(message: impl Into<String>) -> EngineError {
        EngineError::new(EngineErrorKind::Down, message)
    }

    pub fn rejected(message: impl Into<String>) -> EngineError {
        EngineError::new(EngineErrorKind::Rejected, message)
    }

    pub fn decode(message: impl Into<String>) -> EngineError {
        EngineError::new(EngineErrorKind::Decode, message)
    }
}

/// Keeps an `Arc<dyn Engine>` nameable in signatures.
pub type SharedEngine = Arc<dyn Engine>;

pub mod builtin;
pub mod openai;
pub mod whisper;

mod settings;
pub use settings::EngineSettings;

use std::path::Path;

/// The engine the settings name. Quick (no model is loaded on this thread, no request made);
/// [`EngineErrorKind::Unavailable`] when it cannot run here (PocketSphinx not installed, a
/// Whisper model missing), [`EngineErrorKind::Rejected`] for settings it cannot use (a
/// malformed URL). `models_dir`: where Whisper models named by name are
/// (`<data_dir>/models`).
pub fn build(settings: &EngineSettings, models_dir: &Path) -> Result<Arc<dyn Engine>, EngineError> {
    Ok(match settings {
        EngineSettings::Builtin => Arc::new(builtin::BuiltinEngine::new(
            builtin::BuiltinConfig::default(),
        )?),
        EngineSettings::Openai {
            base_url,
            model,
            api_key,
        } => Arc::new(openai::OpenAiEngine::new(openai::OpenAiConfig::new(
            base_url,
            model,
            api_key.clone(),
        ))?),
        EngineSettings::Whisper { model, language } => Arc::new(whisper::WhisperEngine::new(
            whisper::WhisperConfig::new(model, language, models_dir),
        )?),
    })
}
