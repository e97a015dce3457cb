//! The pipeline's settings: the settings store's `audio` section ([`AudioSection`]: the
//! [`AudioSettings`] whole; `audio.json` of older versions is moved in at first start), and the
//! call being listened to, which is machine state rather than a setting:
//! `<data_dir>/audio_listening.json` (0600), so listening resumes after a restart (or a crash)
//! when that call is still live.
//!
//! Also what a change of the settings is checked by: the sources it newly names.

use crate::capture::Source;
use crate::engine::EngineSettings;
use crate::settings::AudioSettings;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use stagewhisper_core::audio::{
    check_base_url, check_language, check_model, AudioError, Channel, SourceChoice, AUTO_LANGUAGE,
    MAX_SPEAKER,
};
use stagewhisper_core::settings::{
    read_legacy_json, Invalid, Legacy, Section, SettingsError, SettingsStore,
};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The settings file of older versions (moved into the settings store).
pub const SETTINGS_FILE: &str = "audio.json";
/// The call being listened to (`{"call_id": …}`; absent: none).
pub const LISTENING_FILE: &str = "audio_listening.json";

/// The `audio` section: the settings as saved. A section without `engine` (moved in from a
/// file saved before engines could be chosen) is no choice of engine: see [`default_engine`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Value", into = "Value")]
pub struct AudioSection {
    pub settings: AudioSettings,
    /// The saved value names an engine (every value the app saves does).
    pub engine_named: bool,
}

impl TryFrom<Value> for AudioSection {
    type Error = serde_json::Error;
    fn try_from(v: Value) -> Result<Self, Self::Error> {
        let engine_named = v.get("engine").is_some();
        Ok(AudioSection {
            settings: serde_json::from_value(v)?,
            engine_named,
        })
    }
}

impl From<AudioSection> for Value {
    fn from(s: AudioSection) -> Value {
        let mut v = serde_json::to_value(&s.settings).expect("settings serialize");
        if let (false, Some(o)) = (s.engine_named, v.as_object_mut()) {
            o.remove("engine");
        }
        v
    }
}

/// `audio.json` of older versions: the settings with the call listened to.
#[derive(Deserialize)]
struct OldFile {
    #[serde(flatten)]
    settings: Value,
    #[serde(default)]
    listening: Option<String>,
}

impl Section for AudioSection {
    const KEY: &'static str = "audio";

    fn validate(&self) -> Result<(), Invalid> {
        let s = &self.settings;
        for (field, label) in [("you_label", &s.you_label), ("them_label", &s.them_label)] {
            let n = label.trim().chars().count();
            if n == 0 || n > MAX_SPEAKER || label.chars().any(char::is_control) {
                return Err(Invalid::new(
                    "invalid_label",
                    format!("`{field}`: 1–{MAX_SPEAKER} characters, no control characters"),
                ));
            }
        }
        let refused = |e: AudioError| Invalid::new(e.code, e.message);
        match &s.engine {
            EngineSettings::Builtin => {}
            EngineSettings::Openai {
                base_url, model, ..
            } => {
                check_base_url(base_url).map_err(refused)?;
                check_model(model).map_err(refused)?;
            }
            EngineSettings::Whisper { model, language } => {
                check_model(model).map_err(refused)?;
                check_language(language).map_err(refused)?;
            }
        }
        Ok(())
    }

    /// `audio.json` of older versions (its `listening` is the call listened to: not a
    /// setting, see [`Saved::open`]).
    fn legacy(data_dir: &Path) -> Legacy<Self> {
        let path = data_dir.join(SETTINGS_FILE);
        let read = read_legacy_json::<OldFile>(&path).and_then(|f| {
            f.map(|f| AudioSection::try_from(f.settings))
                .transpose()
                .map_err(|e| e.to_string())
        });
        let mut out = Legacy::none();
        match read {
            Ok(None) => {}
            Ok(Some(section)) => {
                out.value = Some(section);
                out.files.push(path);
            }
            Err(message) => out.broken.push((path, message)),
        }
        out
    }
}

/// Where the pipeline keeps its settings and the call it listens to.
pub(super) struct Saved {
    store: SettingsStore,
    listening_path: PathBuf,
    /// The call last saved as listened to (written only when it changes).
    listening: Mutex<Option<String>>,
}

impl Saved {
    /// The saved settings (an engine chosen for whoever never chose one: [`default_engine`])
    /// and the call listened to when the app stopped.
    pub fn open(
        store: SettingsStore,
        data_dir: &Path,
        models_dir: &Path,
    ) -> (Saved, AudioSettings, Option<String>) {
        let old_listening = old_listening(data_dir);
        let section = store.get::<AudioSection>();
        let listening_path = data_dir.join(LISTENING_FILE);
        let listening = match std::fs::read(&listening_path) {
            Ok(b) => serde_json::from_slice::<Value>(&b)
                .ok()
                .and_then(|v| v["call_id"].as_str().map(str::to_string)),
            Err(_) => old_listening,
        };
        let mut settings = section.settings;
        if !section.engine_named {
            default_engine(&mut settings, models_dir);
        }
        let saved = Saved {
            store,
            listening_path,
            listening: Mutex::new(None),
        };
        if let Err(e) = saved.write_listening(listening.as_deref()) {
            tracing::error!(error = %e, "cannot save the call listened to");
        }
        (saved, settings, listening)
    }

    /// Saves the settings (checked; nothing written when refused) and the call listened to.
    pub fn save(
        &self,
        settings: &AudioSettings,
        listening: Option<&str>,
    ) -> Result<(), AudioError> {
        let section = AudioSection {
            settings: settings.clone(),
            engine_named: true,
        };
        self.store.set(&section).map_err(|e| match e {
            SettingsError::Invalid(i) => AudioError::bad(i.code, i.message),
            e => AudioError::internal(
                "config_write_failed",
                format!("the audio settings cannot be saved: {e}"),
            ),
        })?;
        self.write_listening(listening).map_err(|e| {
            AudioError::internal(
                "config_write_failed",
                format!("the call listened to cannot be saved: {e}"),
            )
        })
    }

    fn write_listening(&self, call: Option<&str>) -> std::io::Result<()> {
        let mut last = self.listening.lock().unwrap_or_else(|e| e.into_inner());
        if last.as_deref() == call && (call.is_some() == self.listening_path.exists()) {
            return Ok(());
        }
        match call {
            Some(id) => stagewhisper_core::tokens::write_secret(
                &self.listening_path,
                &serde_json::json!({ "call_id": id }).to_string(),
            )
            .map_err(|e| std::io::Error::other(e.to_string()))?,
            None => match std::fs::remove_file(&self.listening_path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
                _ => {}
            },
        }
        *last = call.map(str::to_string);
        Ok(())
    }
}

/// The call listened to as `audio.json` of an older version named it (read before that file is
/// moved into the settings store).
fn old_listening(data_dir: &Path) -> Option<String> {
    let bytes = std::fs::read(data_dir.join(SETTINGS_FILE)).ok()?;
    serde_json::from_slice::<OldFile>(&bytes).ok()?.listening
}

/// The engine of a person who never chose one: Whisper with the preferred model installed in
/// `models_dir` (auto-detected language), else the settings' (PocketSphinx).
pub(super) fn default_engine(settings: &mut AudioSettings, models_dir: &Path) {
    if let Some(model) = crate::engine::whisper::default_model(models_dir) {
        tracing::info!(%model, "no engine chosen and a Whisper model is installed: Whisper is used");
        settings.engine = EngineSettings::Whisper {
            model,
            language: AUTO_LANGUAGE.into(),
        };
    }
}

/// The sources `next` names that `current` did not: each with its field (`mic`, `system`).
pub(super) fn newly_named(
    current: &AudioSettings,
    next: &AudioSettings,
) -> Vec<(&'static str, String)> {
    [("mic", Channel::Mic), ("system", Channel::System)]
        .into_iter()
        .filter_map(|(field, ch)| match next.source(ch) {
            SourceChoice::Named(n) if next.source(ch) != current.source(ch) => {
                Some((field, n.clone()))
            }
            _ => None,
        })
        .collect()
}

/// `400 unknown_source` for the first of the `named` sources the sound server does not have.
pub(super) fn check_named(named: &[(&str, String)], list: &[Source]) -> Result<(), AudioError> {
    for (field, name) in named {
        if !list.iter().any(|s| &s.name == name) {
            return Err(AudioError::bad(
                "unknown_source",
                format!(
                    "`{field}`: the sound server has no source “{name}” (it has: {})",
                    list.iter()
                        .map(|s| s.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn open(dir: &Path) -> (Saved, AudioSettings, Option<String>) {
        let store = SettingsStore::open(dir).unwrap();
        Saved::open(store, dir, &dir.join("models"))
    }

    #[test]
    fn whisper_is_the_default_when_a_model_is_installed_and_no_engine_was_chosen() {
        let dir = tempfile::tempdir().unwrap();
        let models = dir.path().join("models");
        assert_eq!(
            open(dir.path()).1.engine,
            EngineSettings::Builtin,
            "no model: PocketSphinx"
        );
        std::fs::create_dir_all(&models).unwrap();
        std::fs::write(models.join("ggml-tiny.en.bin"), b"x").unwrap();
        assert_eq!(
            open(dir.path()).1.engine,
            EngineSettings::Whisper {
                model: "tiny.en".into(),
                language: "auto".into()
            }
        );
        // An old file without `engine` (older, or hand-written) is no choice either, also once
        // it is moved into the settings store.
        std::fs::write(
            dir.path().join(SETTINGS_FILE),
            br#"{"mic": "default", "system": null, "you_label": "Me", "them_label": "Them",
                 "listening": "call-7"}"#,
        )
        .unwrap();
        let (saved, s, listening) = open(dir.path());
        assert_eq!((s.engine.kind(), s.you_label.as_str()), ("whisper", "Me"));
        assert_eq!(
            listening.as_deref(),
            Some("call-7"),
            "the call listened to is kept"
        );
        assert!(dir.path().join("audio.json.migrated").exists());
        drop(saved);
        let (saved, s, listening) = open(dir.path());
        assert_eq!(
            (s.engine.kind(), listening.as_deref()),
            ("whisper", Some("call-7"))
        );
        // A chosen engine stays, PocketSphinx included.
        saved.save(&AudioSettings::default(), None).unwrap();
        let (_, s, listening) = open(dir.path());
        assert_eq!((s.engine, listening), (EngineSettings::Builtin, None));
    }

    #[test]
    fn settings_are_saved_private_and_whole_with_the_call_listened_to() {
        let dir = tempfile::tempdir().unwrap();
        let (saved, s0, l0) = open(dir.path());
        assert_eq!((s0, l0), (AudioSettings::default(), None));
        let mut s = AudioSettings {
            mic: SourceChoice::Named("usb".into()),
            system: SourceChoice::Off,
            ..AudioSettings::default()
        };
        s.engine = EngineSettings::Openai {
            base_url: "https://asr.example".into(),
            model: "whisper-1".into(),
            api_key: Some("sk-secret".into()),
        };
        saved.save(&s, Some("call-1")).unwrap();
        for f in ["settings.json", LISTENING_FILE] {
            let mode = std::fs::metadata(dir.path().join(f))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600, "{f}");
        }
        let (_, back, listening) = open(dir.path());
        assert_eq!((back, listening), (s.clone(), Some("call-1".into())));
        saved.save(&s, None).unwrap();
        assert!(!dir.path().join(LISTENING_FILE).exists());
        assert_eq!(open(dir.path()).2, None);
        // A value the routes would refuse is refused here too, and nothing is written.
        let bad = AudioSettings {
            you_label: " ".into(),
            ..s.clone()
        };
        assert_eq!(saved.save(&bad, None).unwrap_err().code, "invalid_label");
        assert_eq!(open(dir.path()).1, s);
    }

    #[test]
    fn a_damaged_old_file_gives_the_defaults_and_is_kept_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(SETTINGS_FILE), b"{\"mic\": ").unwrap();
        let store = SettingsStore::open(dir.path()).unwrap();
        let (_, s, _) = Saved::open(store.clone(), dir.path(), &dir.path().join("models"));
        assert_eq!(s, AudioSettings::default());
        assert!(dir.path().join("audio.json.unreadable").exists());
        assert_eq!(store.problems()[0].code, "legacy_settings_unreadable");
    }
}
