//! The desktop settings (what only the window has): the overlay's global shortcut, whether the
//! overlay opens by itself when a call starts, and which kinds of system notification are raised.
//!
//! Kept as `desktop.json` in the data folder, next to the app's other state, written whole
//! (temporary file + rename) so a crash never leaves half a file. A missing file means the
//! defaults; an unreadable one is reported and replaced by the defaults at the next save.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::str::FromStr;
use tauri_plugin_global_shortcut::Shortcut;

/// The file in the data folder.
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

    pub fn path(data_dir: &Path) -> PathBuf {
        data_dir.join(FILE)
    }

    /// The saved settings, or the defaults when there are none (or they cannot be read).
    pub fn load(data_dir: &Path) -> DesktopPrefs {
        let path = Self::path(data_dir);
        match std::fs::read(&path) {
            Ok(bytes) => match serde_json::from_slice::<DesktopPrefs>(&bytes) {
                Ok(p) if p.shortcut().is_ok() => p,
                Ok(_) | Err(_) => {
                    tracing::warn!(path = %path.display(), "unreadable desktop settings; using the defaults");
                    DesktopPrefs::default()
                }
            },
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => DesktopPrefs::default(),
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot read the desktop settings; using the defaults");
                DesktopPrefs::default()
            }
        }
    }

    /// Checks and writes the settings (whole file, then rename).
    pub fn save(&self, data_dir: &Path) -> Result<(), PrefsError> {
        self.shortcut()?;
        let path = Self::path(data_dir);
        let tmp = data_dir.join(format!(".{FILE}.tmp"));
        let io = |e: std::io::Error| PrefsError {
            error: "storage_unavailable",
            message: format!("cannot save the desktop settings: {e}"),
        };
        let bytes = serde_json::to_vec_pretty(self).expect("settings serialize");
        std::fs::write(&tmp, bytes).map_err(io)?;
        std::fs::rename(&tmp, &path).map_err(io)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_until_saved_then_what_was_saved() {
        let tmp = tempfile::tempdir().unwrap();
        assert_eq!(DesktopPrefs::load(tmp.path()), DesktopPrefs::default());
        assert!(DesktopPrefs::default().shortcut().unwrap().is_some());
        let p = DesktopPrefs {
            overlay_shortcut: "Alt+F9".into(),
            overlay_on_call_start: false,
            notify_errors: false,
            ..DesktopPrefs::default()
        };
        p.save(tmp.path()).unwrap();
        assert_eq!(DesktopPrefs::load(tmp.path()), p);
        assert!(!tmp.path().join(format!(".{FILE}.tmp")).exists());
    }

    #[test]
    fn a_bad_shortcut_is_refused_and_nothing_is_written() {
        let tmp = tempfile::tempdir().unwrap();
        let p = DesktopPrefs {
            overlay_shortcut: "Ctrl+Nope".into(),
            ..DesktopPrefs::default()
        };
        assert_eq!(p.save(tmp.path()).unwrap_err().error, "invalid_shortcut");
        assert!(!DesktopPrefs::path(tmp.path()).exists());
        let off = DesktopPrefs {
            overlay_shortcut: " ".into(),
            ..DesktopPrefs::default()
        };
        assert_eq!(off.shortcut().unwrap(), None);
    }

    #[test]
    fn an_unreadable_file_means_the_defaults() {
        let tmp = tempfile::tempdir().unwrap();
        std::fs::write(DesktopPrefs::path(tmp.path()), b"{\"overlay_shortcut\": 3").unwrap();
        assert_eq!(DesktopPrefs::load(tmp.path()), DesktopPrefs::default());
        std::fs::write(
            DesktopPrefs::path(tmp.path()),
            b"{\"notify_insights\": false}",
        )
        .unwrap();
        let p = DesktopPrefs::load(tmp.path());
        assert!(!p.notify_insights && p.notify_errors && p.overlay_shortcut == DEFAULT_SHORTCUT);
    }
}
