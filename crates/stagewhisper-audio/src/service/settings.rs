//! The settings file, `<data_dir>/audio.json`: the [`AudioSettings`] with the call being
//! listened to, so listening resumes after a restart (or a crash) when that call is still live.
//! Mode 0600 (it may hold an API key); written to a temporary file, fsynced, renamed. A damaged
//! file gives the defaults and is kept aside (`.bad`) for a person to look at.
//!
//! Also what a change of the settings is checked by: the sources it newly names.

use crate::capture::Source;
use serde::{Deserialize, Serialize};
use stagewhisper_core::audio::{
    AudioError, AudioSettings, Channel, EngineSettings, SourceChoice, AUTO_LANGUAGE,
};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The settings file under the data dir.
pub const SETTINGS_FILE: &str = "audio.json";

#[derive(Serialize, Deserialize)]
struct SavedFile {
    #[serde(flatten)]
    settings: AudioSettings,
    /// The call being listened to (resumed after a restart while it is live).
    #[serde(default)]
    listening: Option<String>,
}

pub(super) fn load_settings(path: &Path) -> (AudioSettings, Option<String>) {
    match std::fs::read(path) {
        Ok(bytes) => match serde_json::from_slice::<SavedFile>(&bytes) {
            Ok(f) => (f.settings, f.listening),
            Err(e) => {
                tracing::error!(path = %path.display(), error = %e, "the audio settings cannot be read: defaults used, the file kept as .bad");
                let _ = std::fs::rename(path, path.with_extension("json.bad"));
                (AudioSettings::default(), None)
            }
        },
        Err(_) => (AudioSettings::default(), None),
    }
}

/// Whether the person ever chose an engine: the settings file names one. (A file saved
/// before engines could be chosen, or none at all, does not.)
pub(super) fn engine_chosen(path: &Path) -> bool {
    #[derive(Deserialize)]
    struct Engine {
        engine: Option<serde_json::Value>,
    }
    std::fs::read(path)
        .ok()
        .and_then(|b| serde_json::from_slice::<Engine>(&b).ok())
        .is_some_and(|f| f.engine.is_some())
}

/// The engine of a person who never chose one: Whisper with the preferred model installed in
/// `models_dir` (auto-detected language), else the settings' (PocketSphinx).
pub(super) fn default_engine(settings: &mut AudioSettings, path: &Path, models_dir: &Path) {
    if engine_chosen(path) {
        return;
    }
    if let Some(model) = crate::engine::whisper::default_model(models_dir) {
        tracing::info!(%model, "no engine chosen and a Whisper model is installed: Whisper is used");
        settings.engine = EngineSettings::Whisper {
            model,
            language: AUTO_LANGUAGE.into(),
        };
    }
}

pub(super) fn save_settings(
    path: &Path,
    settings: &AudioSettings,
    listening: Option<&str>,
) -> std::io::Result<()> {
    let bytes = serde_json::to_vec_pretty(&SavedFile {
        settings: settings.clone(),
        listening: listening.map(str::to_string),
    })
    .expect("serializable");
    let tmp = path.with_extension("json.tmp");
    // A leftover temporary file would keep its own mode: start afresh (0600).
    let _ = std::fs::remove_file(&tmp);
    let result = (|| {
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(&bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent() {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
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

    #[test]
    fn whisper_is_the_default_when_a_model_is_installed_and_no_engine_was_chosen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(SETTINGS_FILE);
        let models = dir.path().join("models");
        let mut s = AudioSettings::default();
        default_engine(&mut s, &path, &models);
        assert_eq!(s.engine, EngineSettings::Builtin, "no model: PocketSphinx");
        std::fs::create_dir_all(&models).unwrap();
        std::fs::write(models.join("ggml-tiny.en.bin"), b"x").unwrap();
        default_engine(&mut s, &path, &models);
        assert_eq!(
            s.engine,
            EngineSettings::Whisper {
                model: "tiny.en".into(),
                language: "auto".into()
            }
        );
        // A file without `engine` (older, or hand-written) is no choice either.
        std::fs::write(
            &path,
            br#"{"mic": "default", "system": null, "you_label": "You", "them_label": "Them"}"#,
        )
        .unwrap();
        let mut s = load_settings(&path).0;
        default_engine(&mut s, &path, &models);
        assert_eq!(s.engine.kind(), "whisper");
        // A chosen engine stays, PocketSphinx included.
        save_settings(&path, &AudioSettings::default(), None).unwrap();
        let mut s = load_settings(&path).0;
        default_engine(&mut s, &path, &models);
        assert_eq!(s.engine, EngineSettings::Builtin);
    }

    #[test]
    fn settings_are_saved_private_and_whole_with_the_call_listened_to() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(SETTINGS_FILE);
        assert_eq!(load_settings(&path), (AudioSettings::default(), None));
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
        save_settings(&path, &s, Some("call-1")).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(load_settings(&path), (s.clone(), Some("call-1".into())));
        save_settings(&path, &s, None).unwrap();
        assert_eq!(load_settings(&path).1, None);
        let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file left: {left:?}");
        // A damaged file: defaults, and the file kept aside for a person to look at.
        std::fs::write(&path, b"{\"mic\": ").unwrap();
        assert_eq!(load_settings(&path), (AudioSettings::default(), None));
        assert!(path.with_extension("json.bad").exists());
    }
}
