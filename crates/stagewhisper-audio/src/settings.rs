//! The pipeline's settings as saved: [`AudioSettings`] (sources, engine, labels, call
//! detection, speakers), and how a `PUT /api/audio` changes them. The routes' shapes and checks
//! ([`AudioUpdate`], [`AudioView`]) are the core's (`stagewhisper_core::audio`); these settings
//! are kept in the settings store's `audio` section (`service::AudioSection`).

use crate::engine::EngineSettings;
use serde::{Deserialize, Serialize};
use stagewhisper_core::audio::{
    AudioStatus, AudioUpdate, AudioView, Channel, EngineUpdate, SourceChoice, SpeakerSettings,
    SpeakersView, AUTO_LANGUAGE, DEFAULT_THEM, DEFAULT_YOU,
};
use stagewhisper_core::detect::DetectionSettings;

/// The saved settings of the pipeline.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AudioSettings {
    pub mic: SourceChoice,
    pub system: SourceChoice,
    #[serde(default)]
    pub engine: EngineSettings,
    pub you_label: String,
    pub them_label: String,
    /// Call detection (`GET /api/audio/detection`).
    #[serde(default)]
    pub detection: DetectionSettings,
    /// Telling the call's speakers apart (off unless turned on).
    #[serde(default)]
    pub speakers: SpeakerSettings,
    /// Keep each new call's audio for "Transcribe again" (off unless turned on).
    #[serde(default)]
    pub keep_audio: bool,
}

impl Default for AudioSettings {
    fn default() -> Self {
        AudioSettings {
            mic: SourceChoice::Default,
            system: SourceChoice::Default,
            engine: EngineSettings::Builtin,
            you_label: DEFAULT_YOU.into(),
            them_label: DEFAULT_THEM.into(),
            detection: Default::default(),
            speakers: SpeakerSettings::default(),
            keep_audio: false,
        }
    }
}

impl AudioSettings {
    pub fn source(&self, channel: Channel) -> &SourceChoice {
        match channel {
            Channel::Mic => &self.mic,
            Channel::System => &self.system,
        }
    }

    /// The speaker of a channel's turns.
    pub fn label(&self, channel: Channel) -> &str {
        match channel {
            Channel::Mic => &self.you_label,
            Channel::System => &self.them_label,
        }
    }

    /// The settings after `update` (already [checked](AudioUpdate::check)). An `openai` engine
    /// without `api_key` keeps the saved key when it is for the same server; `null` or `""`
    /// removes it.
    pub fn apply(&self, update: &AudioUpdate) -> AudioSettings {
        let mut next = self.clone();
        if let Some(speakers) = &update.speakers {
            next.speakers = speakers.clone();
        }
        if let Some(keep) = update.keep_audio {
            next.keep_audio = keep;
        }
        if let Some(mic) = &update.mic {
            next.mic = SourceChoice::from(mic.clone());
        }
        if let Some(system) = &update.system {
            next.system = system.clone().map_or(SourceChoice::Off, SourceChoice::from);
        }
        if let Some(engine) = &update.engine {
            next.engine = match engine {
                EngineUpdate::Builtin => EngineSettings::Builtin,
                EngineUpdate::Openai {
                    base_url,
                    model,
                    api_key,
                } => {
                    let base_url = base_url.trim().trim_end_matches('/').to_string();
                    let api_key = match api_key {
                        Some(Some(k)) if !k.trim().is_empty() => Some(k.trim().to_string()),
                        Some(_) => None,
                        None => match &self.engine {
                            EngineSettings::Openai {
                                base_url: saved,
                                api_key,
                                ..
                            } if *saved == base_url => api_key.clone(),
                            _ => None,
                        },
                    };
                    EngineSettings::Openai {
                        base_url,
                        model: model.trim().to_string(),
                        api_key,
                    }
                }
                EngineUpdate::Whisper { model, language } => EngineSettings::Whisper {
                    model: model.trim().to_string(),
                    language: language
                        .as_deref()
                        .map(str::trim)
                        .unwrap_or(AUTO_LANGUAGE)
                        .to_string(),
                },
            };
        }
        if let Some(l) = &update.you_label {
            next.you_label = l.trim().to_string();
        }
        if let Some(l) = &update.them_label {
            next.them_label = l.trim().to_string();
        }
        next
    }
}

impl AudioSettings {
    /// `GET /api/audio`: these settings with `status`.
    pub fn view(&self, status: AudioStatus) -> AudioView {
        let settings = self;
        AudioView {
            mic: settings.mic.clone(),
            system: settings.system.clone(),
            engine: settings.engine.view(),
            you_label: settings.you_label.clone(),
            them_label: settings.them_label.clone(),
            speakers: SpeakersView {
                enabled: settings.speakers.enabled,
                ..SpeakersView::default()
            },
            keep_audio: settings.keep_audio,
            status,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use stagewhisper_core::audio::{AudioError, EngineStatus};

    fn update(v: serde_json::Value) -> Result<AudioUpdate, AudioError> {
        AudioUpdate::from_json(v)
    }

    #[test]
    fn source_choices_read_and_write_as_the_api_spells_them() {
        let s = AudioSettings::default();
        let u = update(json!({"mic": null, "system": "call.monitor"})).unwrap();
        let next = s.apply(&u);
        assert_eq!(next.mic, SourceChoice::Off);
        assert_eq!(next.system, SourceChoice::Named("call.monitor".into()));
        let v = serde_json::to_value(next.view(AudioStatus::idle(EngineStatus {
            kind: "builtin".into(),
            state: "ready".into(),
            detail: String::new(),
        })))
        .unwrap();
        assert_eq!(v["mic"], json!(null));
        assert_eq!(v["system"], "call.monitor");
        assert_eq!(v["engine"]["kind"], "builtin");
        // Absent fields keep what is saved.
        let again = next.apply(&update(json!({"you_label": " Me "})).unwrap());
        assert_eq!(again.mic, SourceChoice::Off);
        assert_eq!(again.you_label, "Me");
        let saved: AudioSettings =
            serde_json::from_str(&serde_json::to_string(&again).unwrap()).unwrap();
        assert_eq!(saved, again);
    }

    #[test]
    fn a_whisper_engine_is_saved_with_its_language_and_stays_on_this_computer() {
        let s = AudioSettings::default()
            .apply(&update(json!({"engine": {"kind": "whisper", "model": " tiny.en "}})).unwrap());
        assert_eq!(
            s.engine,
            EngineSettings::Whisper {
                model: "tiny.en".into(),
                language: "auto".into()
            }
        );
        let s = s.apply(
            &update(json!({"engine": {"kind": "whisper", "model": "base", "language": "de"}}))
                .unwrap(),
        );
        let view = serde_json::to_value(s.engine.view()).unwrap();
        assert_eq!(
            (&view["kind"], &view["model"], &view["language"]),
            (&json!("whisper"), &json!("base"), &json!("de"))
        );
        assert!(!s.engine.leaves_machine());
        // A file saved without `language` (or by hand) reads as `auto`.
        let saved: EngineSettings =
            serde_json::from_value(json!({"kind": "whisper", "model": "tiny.en"})).unwrap();
        assert_eq!(saved.kind(), "whisper");
        assert!(matches!(saved, EngineSettings::Whisper { language, .. } if language == "auto"));
    }

    #[test]
    fn the_api_key_is_kept_for_the_same_server_and_never_shown() {
        let s = AudioSettings::default().apply(
            &update(
                json!({"engine": {"kind": "openai", "base_url": "https://asr.example/",
                "model": "whisper-1", "api_key": "sk-secret"}}),
            )
            .unwrap(),
        );
        let EngineSettings::Openai {
            base_url, api_key, ..
        } = &s.engine
        else {
            panic!("{s:?}")
        };
        assert_eq!(
            (base_url.as_str(), api_key.as_deref()),
            ("https://asr.example", Some("sk-secret"))
        );
        assert!(!format!("{s:?}").contains("sk-secret"));
        let view = serde_json::to_string(&s.engine.view()).unwrap();
        assert!(!view.contains("sk-secret"), "{view}");
        assert!(s.engine.leaves_machine());
        assert!(s.engine.view().notice.contains("asr.example"));
        // Same server, no key given: kept. Another server: not carried over. `null`: removed.
        let same = s.apply(
            &update(json!({"engine": {"kind": "openai",
            "base_url": "https://asr.example", "model": "whisper-1"}}))
            .unwrap(),
        );
        assert!(matches!(
            &same.engine,
            EngineSettings::Openai {
                api_key: Some(_),
                ..
            }
        ));
        let other = s.apply(
            &update(json!({"engine": {"kind": "openai",
            "base_url": "http://127.0.0.1:9000", "model": "tiny.en"}}))
            .unwrap(),
        );
        assert!(matches!(
            &other.engine,
            EngineSettings::Openai { api_key: None, .. }
        ));
        assert!(!other.engine.leaves_machine());
        let removed = s.apply(
            &update(json!({"engine": {"kind": "openai",
            "base_url": "https://asr.example", "model": "whisper-1", "api_key": null}}))
            .unwrap(),
        );
        assert!(matches!(
            &removed.engine,
            EngineSettings::Openai { api_key: None, .. }
        ));
    }
}
