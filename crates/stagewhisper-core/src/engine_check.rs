//! Trying the speech engine before a call needs it: `POST /api/audio/engine/check`.
//!
//! Settings → Audio saves an engine and then tries it, and its Test button tries the engine
//! being typed before it is saved: a server engine gets one short request (half a second of
//! silence to transcribe), a local one loads its model and decodes that silence. The pipeline
//! does it the same way for every engine (`stagewhisper-audio`'s `Engine::check`), so a new
//! engine kind is checked without code of its own here. What the route takes
//! ([`crate::audio::EngineCheckRequest`]) is with the engine settings it names.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// How the try went. A failure is an answer too (`200` with `ok: false`): the request was
/// fine, the engine was not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct EngineCheck {
    pub ok: bool,
    /// `ok`, or why not: `unavailable` (cannot run here: not installed), `down` (did not
    /// answer: no server at that address, a timeout, 5xx), `rejected` (refused: a bad key, an
    /// unknown model), `decode` (answered something that is not a transcription).
    pub code: String,
    /// The engine tried: `builtin`, `openai`, …
    pub kind: String,
    /// What happened, in plain words (never an API key).
    pub message: String,
    /// Whether the engine tried is the saved one (its outcome also shows in `GET /api/audio`).
    pub saved: bool,
}

impl EngineCheck {
    /// A try that worked.
    pub fn passed(kind: &str, saved: bool) -> EngineCheck {
        let message = if kind == "openai" {
            "The transcription server answered."
        } else {
            "The speech engine is ready."
        };
        EngineCheck {
            ok: true,
            code: "ok".into(),
            kind: kind.into(),
            message: message.into(),
            saved,
        }
    }

    /// A try that failed: `code` as in [`EngineCheck::code`].
    pub fn failed(kind: &str, saved: bool, code: &str, message: impl Into<String>) -> EngineCheck {
        EngineCheck {
            ok: false,
            code: code.into(),
            kind: kind.into(),
            message: message.into(),
            saved,
        }
    }
}
