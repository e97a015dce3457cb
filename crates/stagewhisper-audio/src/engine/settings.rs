//! The speech recognition engine as saved: [`EngineSettings`], with the engines that build
//! from it ([`super::build`]). What the control API takes and answers ([`EngineUpdate`],
//! [`EngineView`]) and its checks stay with the API's shapes in `stagewhisper_core::audio`.
//!
//! [`EngineUpdate`]: stagewhisper_core::audio::EngineUpdate

use serde::{Deserialize, Serialize};
use stagewhisper_core::audio::{host_of, is_loopback_url, EngineView, AUTO_LANGUAGE};

/// The speech recognition engine, as saved (the API key included: never answered, never
/// logged; see [`EngineView`]).
#[derive(Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum EngineSettings {
    /// PocketSphinx in process (no network at all).
    #[default]
    Builtin,
    /// An OpenAI-compatible transcription server: `POST {base_url}/v1/audio/transcriptions`.
    Openai {
        base_url: String,
        model: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        api_key: Option<String>,
    },
    /// Whisper in process (whisper.cpp): `model` is a model's name (`tiny.en`: the file
    /// `ggml-tiny.en.bin` in the models folder) or the path of a ggml model file; `language`
    /// is `auto` (detected per turn) or an ISO-639-1 code (forced).
    Whisper {
        model: String,
        #[serde(default = "auto_language")]
        language: String,
    },
}

fn auto_language() -> String {
    AUTO_LANGUAGE.into()
}

impl std::fmt::Debug for EngineSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineSettings::Builtin => f.write_str("Builtin"),
            EngineSettings::Openai {
                base_url,
                model,
                api_key,
            } => f
                .debug_struct("Openai")
                .field("base_url", base_url)
                .field("model", model)
                .field("api_key", &api_key.as_ref().map(|_| "<set>"))
                .finish(),
            EngineSettings::Whisper { model, language } => f
                .debug_struct("Whisper")
                .field("model", model)
                .field("language", language)
                .finish(),
        }
    }
}

impl EngineSettings {
    pub fn kind(&self) -> &'static str {
        match self {
            EngineSettings::Builtin => "builtin",
            EngineSettings::Openai { .. } => "openai",
            EngineSettings::Whisper { .. } => "whisper",
        }
    }

    /// Whether call audio leaves this machine with this engine (a server not on loopback).
    pub fn leaves_machine(&self) -> bool {
        match self {
            EngineSettings::Builtin | EngineSettings::Whisper { .. } => false,
            EngineSettings::Openai { base_url, .. } => !is_loopback_url(base_url),
        }
    }

    pub fn view(&self) -> EngineView {
        let leaves = self.leaves_machine();
        match self {
            EngineSettings::Builtin => EngineView {
                kind: "builtin".into(),
                base_url: None,
                model: None,
                language: None,
                api_key_set: None,
                leaves_machine: false,
                notice: "Speech is recognised on this computer (PocketSphinx); no audio leaves it."
                    .into(),
            },
            EngineSettings::Whisper { model, language } => EngineView {
                kind: "whisper".into(),
                base_url: None,
                model: Some(model.clone()),
                language: Some(language.clone()),
                api_key_set: None,
                leaves_machine: false,
                notice: format!(
                    "Speech is recognised on this computer (Whisper, model {model}); no audio \
                     leaves it."
                ),
            },
            EngineSettings::Openai {
                base_url,
                model,
                api_key,
            } => EngineView {
                kind: "openai".into(),
                base_url: Some(base_url.clone()),
                model: Some(model.clone()),
                language: None,
                api_key_set: Some(api_key.is_some()),
                leaves_machine: leaves,
                notice: if leaves {
                    format!(
                        "The call's audio leaves this computer: every turn you and the other \
                         side speak is sent to {} to be transcribed.",
                        host_of(base_url)
                    )
                } else {
                    "Speech is sent to a transcription server on this computer; no audio \
                     leaves it."
                        .into()
                },
            },
        }
    }
}
