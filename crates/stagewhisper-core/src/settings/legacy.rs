//! Today's settings files, read once to move them into the document.

use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};

/// What a section's old file(s) held (see [`super::Section::legacy`]).
#[derive(Debug)]
pub struct Legacy<T> {
    /// The settings read (`None`: no old file, or none that reads).
    pub value: Option<T>,
    /// The files `value` was read from: renamed `<name>.migrated` once it is saved.
    pub files: Vec<std::path::PathBuf>,
    /// Files that cannot be read, with why: renamed `<name>.unreadable` and reported.
    pub broken: Vec<(PathBuf, String)>,
}

impl<T> Legacy<T> {
    /// Nothing to migrate.
    pub fn none() -> Legacy<T> {
        Legacy {
            value: None,
            files: Vec::new(),
            broken: Vec::new(),
        }
    }

    /// The one old file at `path` as JSON, turned into the section by `into`.
    pub fn from_file<U: DeserializeOwned>(path: PathBuf, into: impl FnOnce(U) -> T) -> Legacy<T> {
        match read_legacy_json::<U>(&path) {
            Ok(None) => Legacy::none(),
            Ok(Some(u)) => Legacy {
                value: Some(into(u)),
                files: vec![path],
                broken: Vec::new(),
            },
            Err(message) => Legacy {
                value: None,
                files: Vec::new(),
                broken: vec![(path, message)],
            },
        }
    }
}

/// An old file as JSON: `Ok(None)` when there is none, `Err` (why) when it does not read.
pub fn read_legacy_json<U: DeserializeOwned>(path: &Path) -> Result<Option<U>, String> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| e.to_string()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// Renames `path` to `<path>.<suffix>` (or `.<suffix>.1`, `.2`, … when taken) and answers the
/// new name; on failure the file stays where it is (and that is answered).
pub(super) fn keep_aside(path: &Path, suffix: &str) -> PathBuf {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let free = (0..1000)
        .map(|i| match i {
            0 => path.with_file_name(format!("{name}.{suffix}")),
            i => path.with_file_name(format!("{name}.{suffix}.{i}")),
        })
        .find(|p| !p.exists());
    match free {
        Some(to) => match std::fs::rename(path, &to) {
            Ok(()) => to,
            Err(e) => {
                tracing::warn!(file = %path.display(), error = %e, "cannot rename an old settings file");
                path.to_path_buf()
            }
        },
        None => path.to_path_buf(),
    }
}
