//! The desktop settings (what only the window has): the overlay's global shortcut, whether the
//! overlay opens by itself when a call starts, and which kinds of system notification are raised.
//!
//! Kept as the `desktop` section of the app's settings store (`settings.json`, written whole;
//! see `stagewhisper_core::settings`); `desktop.json` of older versions is moved in at the first
//! start of the window app. Nothing saved means the defaults; a section that cannot be read is
//! reported there and gives the defaults.

use serde::{Deserialize, Serialize};
use stagewhisper_core::settings::{Invalid, Legacy, Section, SettingsError, SettingsStore};
use std::path::Path;
use std::str::FromStr;
use tauri_plugin_global_shortcut::Shortcut;

/// The settings file of older versions (moved into the settings store).
pub const FILE: &str = "desktop.json";
/// The overlay's default global shortcut.
pub const DEFAULT_SHORTCUT: &str = "Ctrl+Shift+Space";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DesktopPrefs {
    /// Toggles the overlay from anywhere (an accelerator such as `Ctrl+Shift+Space`; empty = none).
    pub overlay_shortcut: String,
    /// Open the overlay when a call starts.
    pub overlay_on_call_start: bool,
    /// System notifications while no window of the app has the focus, per kind.
    pub notify_insights: bool,
    pub notify_errors: bool,
    pub notify_permissions: bool,
}

impl Default for DesktopPrefs {
    fn default() -> Self {
        DesktopPrefs {
            overlay_shortcut: DEFAULT_SHORTCUT.into(),
            overlay_on_call_start: true,
            notify_insights: true,
            notify_errors: true,
            notify_permissions: true,
        }
    }
}

/// Why a settings change was refused: a stable `error` code and a sentence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PrefsError {
    pub error: &'static str,
    pub message: String,
}

impl DesktopPrefs {
    /// The parsed shortcut (`None` when switched off).
    pub fn shortcut(&self) -> Result<Option<Shortcut>, PrefsError> {
        let s = self.overlay_shortcut.trim();
        if s.is_empty() {
            return Ok(None);
        }
        Shortcut::from_str(s).map(Some).map_err(|e| PrefsError {
            error: "invalid_shortcut",
            message: format!("{s:?} is not a shortcut ({e}); write it like {DEFAULT_SHORTCUT}"),
        })
    }

    /// The saved settings, or the defaults when there are none (or they cannot be read).
    pub fn load(settings: &SettingsStore) -> DesktopPrefs {
        settings.get::<DesktopPrefs>()
    }

    /// Checks and saves the settings (nothing is written when the shortcut is refused).
    pub fn save(&self, settings: &SettingsStore) -> Result<(), PrefsError> {
        settings.set(self).map_err(|e| match e {
            SettingsError::Invalid(i) => PrefsError {
                error: i.code,
                message: i.message,
            },
            e => PrefsError {
                error: "storage_unavailable",
                message: format!("cannot save the desktop settings: {e}"),
            },
        })
    }
}

impl Section for DesktopPrefs {
    const KEY: &'static str = "desktop";

    fn validate(&self) -> Result<(), Invalid> {
        self.shortcut()
            .map(|_| ())
            .map_err(|e| Invalid::new(e.error, e.message))
    }

    /// `desktop.json` of older versions.
    fn legacy(data_dir: &Path) -> Legacy<Self> {
        Legacy::from_file(data_dir.join(FILE), |p| p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(dir: &Path) -> SettingsStore {
        SettingsStore::open(dir).unwrap()
    }

    #[test]
    fn defaults_until_saved_then_what_was_saved() {
        let tmp = tempfile::tempdir().unwrap();
        let s = store(tmp.path());
        assert_eq!(DesktopPrefs::load(&s), DesktopPrefs::default());
        assert!(DesktopPrefs::default().shortcut().unwrap().is_some());
        let p = DesktopPrefs {
            overlay_shortcut: "Alt+F9".into(),
            overlay_on_call_start: false,
            notify_errors: false,
            ..DesktopPrefs::default()
        };
        p.save(&s).unwrap();
        assert_eq!(DesktopPrefs::load(&store(tmp.path())), p);
    }

    #[test]
    fn a_bad_shortcut_is_refused_and_nothing_is_written() {
        let tmp = tempfile::tempdir().unwrap();
        let s = store(tmp.path());
        let p = DesktopPrefs {
            overlay_shortcut: "Ctrl+Nope".into(),
            ..DesktopPrefs::default()
        };
        assert_eq!(p.save(&s).unwrap_err().error, "invalid_shortcut");
        assert!(!s.path().exists());
        let off = DesktopPrefs {
            overlay_shortcut: " ".into(),
            ..DesktopPrefs::default()
        };
        assert_eq!(off.shortcut().unwrap(), None);
    }

    #[test]
    fn the_old_file_is_moved_in_and_an_unreadable_one_reported() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join(FILE), b"{\"notify_insights\": false}").unwrap();
        let p = DesktopPrefs::load(&store(tmp.path()));
        assert!(!p.notify_insights && p.notify_errors && p.overlay_shortcut == DEFAULT_SHORTCUT);
        assert!(tmp.path().join("desktop.json.migrated").exists());
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(tmp.path().join(FILE), b"{\"overlay_shortcut\": 3").unwrap();
        let s = store(tmp.path());
        assert_eq!(DesktopPrefs::load(&s), DesktopPrefs::default());
        assert_eq!(s.problems()[0].code, "legacy_settings_unreadable");
        assert!(tmp.path().join("desktop.json.unreadable").exists());
    }
}
