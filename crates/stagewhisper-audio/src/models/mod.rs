//! Models a person chooses: the speech models on this computer.
//!
//! | module | holds |
//! |---|---|
//! | [`catalog`] | the known Whisper models (name, size, SHA-256, public home, languages, expected accuracy and speed) and the catalogue override for mirrors and offline installs ([`catalog::CATALOG_ENV`]) |
//! | [`download`] | one download: to `<file>.part` beside the target, resumed with HTTP `Range`, SHA-256 checked before an atomic rename; cancel, progress, errors with stable codes |
//! | [`shelf`] | what is installed: list with the disk used, import a file the person has (checked as a whisper.cpp model), remove |
//! | [`ggml`] | the whisper.cpp file header, checked before a file is taken |
//! | [`service`] | [`service::ModelShelf`], the shelf behind the control API (`stagewhisper_core::models::Models`) |
//! | [`speaker_model`] | the speaker model (`speakers`: CAM++ from sherpa-onnx's release, pinned size and SHA-256) on the same shelf |
//!
//! Models live in `<data dir>/models/`, one file each, `ggml-<name>.bin`; an engine setting's
//! `model` is a name or a path, and [`resolve`] turns it into the file. Nothing half-written is
//! ever at a model's path: downloads and imports write a part file and rename it into place
//! once it is complete and checked.

pub mod catalog;
pub mod download;
pub mod ggml;
pub mod service;
pub mod shelf;
pub mod speaker_model;

pub use catalog::{Catalog, CatalogEntry, CATALOG_ENV};
pub use service::{factory, ModelShelf};
pub use stagewhisper_core::models::ModelError;

use std::path::{Path, PathBuf};

/// The models folder of a data dir.
pub fn models_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("models")
}

/// The file of a model name (`tiny.en` → `ggml-tiny.en.bin`).
pub fn file_name(name: &str) -> String {
    format!("ggml-{name}.bin")
}

/// A model name: 1–64 letters, digits, `.`, `-`, `_`, not starting with `.` or `-`, no `..`.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
        && !name.starts_with(['.', '-'])
        && !name.contains("..")
}

/// The model file an engine setting names: a path to a file (absolute, or with a `/`), or the
/// name of an installed model (`<models_dir>/ggml-<name>.bin`). `404 model_not_installed` (a
/// name whose file is not there, with what to run), `404 file_not_found` (a path),
/// `400 invalid_name`.
pub fn resolve(models_dir: &Path, name_or_path: &str) -> Result<PathBuf, ModelError> {
    let s = name_or_path.trim();
    if s.contains('/') || s.contains(std::path::MAIN_SEPARATOR) {
        let p = PathBuf::from(s);
        return if p.is_file() {
            Ok(p)
        } else {
            Err(ModelError::new(
                404,
                "file_not_found",
                format!("the model file {} does not exist", p.display()),
            ))
        };
    }
    if !valid_name(s) {
        return Err(ModelError::new(
            400,
            "invalid_name",
            format!("{s:?} is neither a model name nor a path to a model file"),
        ));
    }
    let p = models_dir.join(file_name(s));
    if p.is_file() {
        Ok(p)
    } else {
        Err(ModelError::new(
            404,
            "model_not_installed",
            format!(
                "the model {s} is not installed (download it in Settings → Audio → Model, or run \
                 `stagewhisper models download {s}`)"
            ),
        ))
    }
}

/// Bytes free for this user on the file system holding `dir` (`None`: unknown).
pub fn free_space(dir: &Path) -> Option<u64> {
    let st = rustix::fs::statvfs(dir).ok()?;
    Some(st.f_bavail.saturating_mul(st.f_frsize))
}

/// Room kept free beyond a model's bytes (the app's database lives on the same disk).
pub const SPACE_MARGIN: u64 = 4 * 1024 * 1024;

/// `507 disk_full` when `needed` bytes (plus [`SPACE_MARGIN`]) do not fit in `dir`.
pub fn check_space(dir: &Path, needed: u64) -> Result<(), ModelError> {
    match free_space(dir) {
        Some(free) if free < needed.saturating_add(SPACE_MARGIN) => Err(disk_full(format!(
            "not enough free space: the model needs {} and {} is free",
            mib(needed),
            mib(free)
        ))),
        _ => Ok(()),
    }
}

/// `507 disk_full`.
pub fn disk_full(message: impl Into<String>) -> ModelError {
    ModelError::new(507, "disk_full", message)
}

/// A refusal of what the person asked (`400` with `code`).
pub fn bad(code: &'static str, message: impl Into<String>) -> ModelError {
    ModelError::new(400, code, message)
}

/// The file a person asks to import: what it is, or `400 file_not_found`.
pub fn import_source(path: &Path) -> Result<std::fs::Metadata, ModelError> {
    std::fs::metadata(path)
        .ok()
        .filter(|m| m.is_file())
        .ok_or_else(|| {
            bad(
                "file_not_found",
                format!("there is no file {}", path.display()),
            )
        })
}

/// `12.3 MiB`.
pub fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths_resolve_to_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ggml-tiny.en.bin"), b"x").unwrap();
        assert_eq!(
            resolve(dir.path(), "tiny.en").unwrap(),
            dir.path().join("ggml-tiny.en.bin")
        );
        let e = resolve(dir.path(), "base").unwrap_err();
        assert_eq!((e.status, e.code), (404, "model_not_installed"));
        assert!(e.message.contains("models download base"), "{e}");
        let own = dir.path().join("mine.bin");
        std::fs::write(&own, b"x").unwrap();
        assert_eq!(resolve(dir.path(), own.to_str().unwrap()).unwrap(), own);
        assert_eq!(
            resolve(dir.path(), "/no/such.bin").unwrap_err().code,
            "file_not_found"
        );
        assert_eq!(resolve(dir.path(), "..").unwrap_err().code, "invalid_name");
        for bad in ["", ".x", "-x", "a..b", "a b", "a/b", &"x".repeat(65)] {
            assert!(!valid_name(bad), "{bad:?}");
        }
        for good in ["tiny.en", "base-q5_1", "my_model.v2"] {
            assert!(valid_name(good), "{good}");
        }
    }
}
