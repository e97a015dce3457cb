//! The speaker model on the shelf: the CAM++ speaker embedding that tells the call's speakers
//! apart (`crate::speakers`), downloaded, imported and removed like a speech model, under the
//! name [`NAME`] (`POST /api/models/speakers/download`, `POST /api/models/import {"path",
//! "name": "speakers"}`, `DELETE /api/models/speakers`); `GET /api/models` shows it as
//! `speakers`, apart from the speech models.
//!
//! **The file** is the one sherpa-onnx publishes in its `speaker-recongition-models` release
//! (the tag's spelling is upstream's): `3dspeaker_speech_campplus_sv_zh_en_16k-common_advanced.onnx`,
//! 3D-Speaker's CAM++ (Apache-2.0), 28,281,164 bytes, SHA-256 [`SHA256`]. The size and hash are
//! pinned identically by independent public projects that download this file (desktop and
//! Unity apps' model lists, a benchmark's pinned downloads, one of them from the same file's
//! Hugging Face mirror at a fixed revision); the download is refused (`checksum_mismatch`)
//! unless the bytes hash to it. It is kept as `<models>/speakers/campplus.onnx`.
//!
//! A catalogue file ([`super::CATALOG_ENV`]) may carry a `speakers` entry that replaces the
//! pinned one (a mirror, an offline install, a test's loopback server).

use super::download::part_path;
use super::{bad, import_source, Catalog, CatalogEntry, ModelError};
use stagewhisper_core::models::{state, DownloadView, ModelView};
use std::collections::HashMap;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The speaker model's name on the shelf.
pub const NAME: &str = "speakers";
/// Where it is published.
pub const URL: &str = "https://github.com/k2-fsa/sherpa-onnx/releases/download/speaker-recongition-models/3dspeaker_speech_campplus_sv_zh_en_16k-common_advanced.onnx";
/// Its size in bytes.
pub const SIZE: u64 = 28_281_164;
/// Its SHA-256.
pub const SHA256: &str = "aa3cfc16963a10586a9393f5035d6d6b57e98d358b347f80c2a30bf4f00ceba2";
/// An imported file larger than this is not a speaker model.
const MAX_IMPORT: u64 = 512 * 1024 * 1024;

/// The pinned entry.
pub fn pinned() -> CatalogEntry {
    CatalogEntry {
        name: NAME.into(),
        file: stagewhisper_speakers::MODEL_FILE.into(),
        size: SIZE,
        sha256: SHA256.into(),
        url: URL.into(),
        languages: "multilingual".into(),
        wer_percent: None,
        accuracy: "Tells the call's speakers apart: about 9 turns in 10 right online, 97 % after \
                   the call (measured on real 2–4-speaker calls)"
            .into(),
        speed: "About 60 ms of CPU per turn, beside the speech engine (measured)".into(),
        recommended: false,
    }
}

/// The entry in use: the catalogue file's `speakers`, else the pinned one.
pub fn entry(catalog: &Catalog) -> CatalogEntry {
    catalog.speakers.clone().unwrap_or_else(pinned)
}

/// The folder it lives in (`<models>/speakers`).
pub fn dir(models_dir: &Path) -> PathBuf {
    models_dir.join("speakers")
}

/// The installed file's path.
pub fn target(models_dir: &Path) -> PathBuf {
    dir(models_dir).join(stagewhisper_speakers::MODEL_FILE)
}

/// `GET /api/models`'s `speakers`.
pub fn view(
    models_dir: &Path,
    catalog: &Catalog,
    downloads: &HashMap<String, DownloadView>,
) -> ModelView {
    let e = entry(catalog);
    let target = target(models_dir);
    let installed = std::fs::metadata(&target).ok().filter(|m| m.is_file());
    let part = std::fs::metadata(part_path(&target)).map(|m| m.len()).ok();
    ModelView {
        name: NAME.into(),
        file: format!("speakers/{}", e.file),
        size: e.size,
        languages: e.languages.clone(),
        wer_percent: None,
        accuracy: e.accuracy.clone(),
        speed: e.speed.clone(),
        recommended: false,
        known: true,
        installed: installed.is_some(),
        path: installed.as_ref().map(|_| target.display().to_string()),
        size_on_disk: installed.map_or(0, |m| m.len()) + part.unwrap_or(0),
        download: downloads.get(NAME).cloned().or_else(|| {
            part.map(|done| DownloadView {
                state: state::PAUSED.into(),
                done,
                total: e.size,
                error: None,
                message: None,
            })
        }),
    }
}

/// Imports a speaker model file the person has (an ONNX file): copied beside the target and
/// renamed into place. Whether it runs is known once it is loaded (`GET /api/audio`'s
/// `speakers.detail` says why not).
pub fn import(models_dir: &Path, catalog: &Catalog, path: &Path) -> Result<ModelView, ModelError> {
    let meta = import_source(path)?;
    let not_onnx = || {
        bad(
            "invalid_model_file",
            format!("{} is not an ONNX speaker model", path.display()),
        )
    };
    if meta.len() < 1024 || meta.len() > MAX_IMPORT {
        return Err(not_onnx());
    }
    // An ONNX file is a protobuf ModelProto: its first field is `ir_version` (field 1, varint).
    let mut first = [0u8; 1];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut first))
        .map_err(|e| {
            bad(
                "file_not_found",
                format!("{} cannot be read: {e}", path.display()),
            )
        })?;
    if first[0] != 0x08 {
        return Err(not_onnx());
    }
    super::check_space(models_dir, meta.len())?;
    let target = target(models_dir);
    let write = |e: std::io::Error| {
        ModelError::new(
            500,
            "write_failed",
            format!("cannot write the speaker model: {e}"),
        )
    };
    std::fs::create_dir_all(dir(models_dir)).map_err(write)?;
    let tmp = target.with_extension("onnx.import");
    let copied = std::fs::copy(path, &tmp)
        .and_then(|_| std::fs::File::open(&tmp)?.sync_all())
        .and_then(|_| std::fs::rename(&tmp, &target));
    if let Err(e) = copied {
        let _ = std::fs::remove_file(&tmp);
        return Err(write(e));
    }
    Ok(view(models_dir, catalog, &HashMap::new()))
}

/// Removes the installed file and any unfinished download.
pub fn remove(models_dir: &Path) -> Result<(), ModelError> {
    let target = target(models_dir);
    let removed_part = std::fs::remove_file(part_path(&target)).is_ok();
    match std::fs::remove_file(&target) {
        Ok(()) => Ok(()),
        Err(_) if removed_part => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ModelError::new(
            404,
            "not_installed",
            "the speaker model is not installed",
        )),
        Err(e) => Err(ModelError::new(
            500,
            "write_failed",
            format!("cannot remove the speaker model: {e}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pinned_entry_is_sherpa_onnx_s_file() {
        let e = pinned();
        assert_eq!(e.sha256.len(), 64);
        assert!(e.url.starts_with("https://") && e.url.ends_with(".onnx"));
        assert_eq!(e.file, "campplus.onnx");
        let c = Catalog::builtin();
        assert_eq!(entry(&c), e);
        assert!(c.get(NAME).is_none(), "not a speech model");
    }

    #[test]
    fn an_onnx_file_is_imported_and_removed_other_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let models = dir.path().join("models");
        let c = Catalog::builtin();
        let fixture = Path::new(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../tests/fixtures/speakers/campplus-fp16w.onnx"
        ));
        let v = import(&models, &c, fixture).unwrap();
        assert!(v.installed && v.path.is_some());
        assert_eq!(
            std::fs::read(target(&models)).unwrap(),
            std::fs::read(fixture).unwrap()
        );
        let text = dir.path().join("notes.txt");
        std::fs::write(&text, vec![b'x'; 4096]).unwrap();
        assert_eq!(
            import(&models, &c, &text).unwrap_err().code,
            "invalid_model_file"
        );
        assert_eq!(
            import(&models, &c, &dir.path().join("none.onnx"))
                .unwrap_err()
                .code,
            "file_not_found"
        );
        remove(&models).unwrap();
        assert!(!view(&models, &c, &HashMap::new()).installed);
        assert_eq!(remove(&models).unwrap_err().code, "not_installed");
    }
}
