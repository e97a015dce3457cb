//! The assistant kinds' settings as a section of the settings store (`assistants`): which kind
//! is active and each kind's own settings, as the kind saves them. (The `incoming` kind's are
//! its own section, `incoming`.) A kind's *state* (e.g. a replay cursor) is not a setting: it
//! stays in `assistants/<kind>.state.json`.

use super::{ACTIVE_KIND_FILE, KIND_SETTINGS_DIR};
use crate::settings::{read_legacy_json, Invalid, Legacy, Section};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// The file name ending of a kind's state in [`KIND_SETTINGS_DIR`] (not a setting).
pub const STATE_SUFFIX: &str = ".state";

/// The `assistants` section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AssistantSettings {
    /// The active kind (absent: [`super::DEFAULT_KIND`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub active: Option<String>,
    /// Each kind's own settings (an object each), by kind id.
    pub kinds: BTreeMap<String, Value>,
}

fn check_id(what: &str, id: &str) -> Result<(), Invalid> {
    if id.is_empty()
        || id.len() > 64
        || !id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
    {
        return Err(Invalid::new(
            "invalid_field",
            format!("{what} {id:?}: 1–64 letters, digits, `-`, `_` or `.`"),
        ));
    }
    Ok(())
}

impl Section for AssistantSettings {
    const KEY: &'static str = "assistants";

    fn validate(&self) -> Result<(), Invalid> {
        if let Some(a) = &self.active {
            check_id("the active kind", a)?;
        }
        for id in self.kinds.keys() {
            check_id("the kind", id)?;
        }
        Ok(())
    }

    /// `assistant_kind.json` (`{"kind": …}`) and `assistants/<kind>.json` of older versions
    /// (not the kinds' `*.state.json`).
    fn legacy(data_dir: &Path) -> Legacy<Self> {
        let mut out = Legacy::none();
        let mut found = AssistantSettings::default();
        let active = data_dir.join(ACTIVE_KIND_FILE);
        match read_legacy_json::<Value>(&active) {
            Ok(None) => {}
            Ok(Some(v)) => match v["kind"].as_str() {
                Some(k) => {
                    found.active = Some(k.to_string());
                    out.files.push(active);
                }
                None => out.broken.push((active, "no `kind`".into())),
            },
            Err(e) => out.broken.push((active, e)),
        }
        let dir = data_dir.join(KIND_SETTINGS_DIR);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        files.sort();
        for path in files {
            let Some(kind) = path
                .file_stem()
                .and_then(|s| s.to_str())
                .map(str::to_string)
            else {
                continue;
            };
            if kind.ends_with(STATE_SUFFIX) {
                continue;
            }
            match read_legacy_json::<Value>(&path) {
                Ok(Some(v)) if v.is_object() => {
                    found.kinds.insert(kind, v);
                    out.files.push(path);
                }
                Ok(Some(_)) => out.broken.push((path, "not a JSON object".into())),
                Ok(None) => {}
                Err(e) => out.broken.push((path, e)),
            }
        }
        if !out.files.is_empty() {
            out.value = Some(found);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::settings::SettingsStore;

    #[test]
    fn the_old_files_are_moved_in_but_not_a_kinds_state() {
        let dir = tempfile::tempdir().unwrap();
        let kinds = dir.path().join(KIND_SETTINGS_DIR);
        std::fs::create_dir_all(&kinds).unwrap();
        std::fs::write(dir.path().join(ACTIVE_KIND_FILE), r#"{"kind": "toy"}"#).unwrap();
        std::fs::write(kinds.join("toy.json"), r#"{"name": "a", "secret": "s"}"#).unwrap();
        std::fs::write(kinds.join("hub.json"), r#"{"url": "#).unwrap();
        std::fs::write(kinds.join("hub.state.json"), r#"{"replay_cutoff": "x"}"#).unwrap();
        let store = SettingsStore::open(dir.path()).unwrap();
        let s = store.get::<AssistantSettings>();
        assert_eq!(s.active.as_deref(), Some("toy"));
        assert_eq!(s.kinds["toy"]["name"], "a");
        assert!(!s.kinds.contains_key("hub"));
        assert!(kinds.join("toy.json.migrated").exists());
        assert!(dir.path().join("assistant_kind.json.migrated").exists());
        assert!(kinds.join("hub.json.unreadable").exists());
        assert!(kinds.join("hub.state.json").exists(), "state stays");
        let p = store.problems();
        assert_eq!(
            (p[0].code.as_str(), p[0].file.as_str()),
            (
                "legacy_settings_unreadable",
                "assistants/hub.json.unreadable"
            )
        );
    }
}
