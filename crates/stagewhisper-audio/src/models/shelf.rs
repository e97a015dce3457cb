//! What is in the models folder: the list (the catalogue's models, installed or not, and the
//! imported ones) with the disk used, importing a file the person has, removing. Blocking file
//! work: callers on the async runtime run it with `spawn_blocking`.

use super::ggml::Header;
use super::{
    bad, check_space, disk_full, file_name, import_source, valid_name, Catalog, CatalogEntry,
    ModelError,
};
use sha2::{Digest, Sha256};
use stagewhisper_core::models::{state, DownloadView, ModelView, ModelsView};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// What the folder holds, by model name.
#[derive(Debug, Default)]
struct Folder {
    /// Installed files: name → (path, bytes).
    installed: BTreeMap<String, (PathBuf, u64)>,
    /// Unfinished downloads: name → bytes.
    parts: HashMap<String, u64>,
    /// Every file's bytes.
    used: u64,
}

fn read_folder(dir: &Path) -> Folder {
    let mut f = Folder::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return f;
    };
    for e in entries.flatten() {
        let Ok(meta) = e.metadata() else { continue };
        if !meta.is_file() {
            continue;
        }
        f.used += meta.len();
        let fname = e.file_name().to_string_lossy().into_owned();
        let Some(rest) = fname.strip_prefix("ggml-") else {
            continue;
        };
        if let Some(name) = rest.strip_suffix(".bin.part") {
            f.parts.insert(name.to_string(), meta.len());
        } else if let Some(name) = rest.strip_suffix(".bin").filter(|n| valid_name(n)) {
            f.installed.insert(name.to_string(), (e.path(), meta.len()));
        }
    }
    f
}

fn catalog_view(m: &CatalogEntry) -> ModelView {
    ModelView {
        name: m.name.clone(),
        file: m.file.clone(),
        size: m.size,
        languages: m.languages.clone(),
        wer_percent: m.wer_percent,
        accuracy: m.accuracy.clone(),
        speed: m.speed.clone(),
        recommended: m.recommended,
        known: true,
        installed: false,
        path: None,
        size_on_disk: 0,
        download: None,
    }
}

/// An imported model, described from its header.
fn imported_view(name: &str, path: &Path, bytes: u64) -> ModelView {
    let header = Header::read(path).ok();
    let (languages, speed) = match header {
        Some(h) => (
            if h.multilingual() {
                "multilingual"
            } else {
                "en"
            },
            format!("Like Whisper {}", h.size_name()),
        ),
        None => ("multilingual", "Unknown".into()),
    };
    ModelView {
        name: name.to_string(),
        file: file_name(name),
        size: bytes,
        languages: languages.into(),
        wer_percent: None,
        accuracy: "Imported from a file: not measured".into(),
        speed,
        recommended: false,
        known: false,
        installed: true,
        path: Some(path.display().to_string()),
        size_on_disk: bytes,
        download: None,
    }
}

/// The catalogue's models (installed or not), then the imported ones; `downloads` are the
/// downloads of this run of the app (a part file without one is `paused`: a download resumes it).
pub fn list(
    dir: &Path,
    catalog: &Catalog,
    downloads: &HashMap<String, DownloadView>,
) -> ModelsView {
    let mut folder = read_folder(dir);
    let mut models: Vec<ModelView> = catalog
        .models
        .iter()
        .map(|m| {
            let mut v = catalog_view(m);
            if let Some((path, bytes)) = folder.installed.remove(&m.name) {
                v.installed = true;
                v.path = Some(path.display().to_string());
                v.size_on_disk = bytes;
            }
            let part = folder.parts.get(&m.name).copied();
            v.size_on_disk += part.unwrap_or(0);
            v.download = downloads.get(&m.name).cloned().or_else(|| {
                part.filter(|_| !v.installed).map(|done| DownloadView {
                    state: state::PAUSED.into(),
                    done,
                    total: m.size,
                    error: None,
                    message: None,
                })
            });
            v
        })
        .collect();
    models.extend(
        folder
            .installed
            .iter()
            .map(|(name, (path, bytes))| imported_view(name, path, *bytes)),
    );
    ModelsView {
        models_dir: dir.display().to_string(),
        disk_used: folder.used,
        models,
        speakers: None,
    }
}

/// `ggml-base.en.bin` → `base.en`; `My Model (v2).bin` → `My-Model-v2`.
pub fn derive_name(path: &Path) -> String {
    let stem = path
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let stem = stem.strip_suffix(".bin").unwrap_or(&stem);
    let stem = stem.strip_prefix("ggml-").unwrap_or(stem);
    let mut name = String::new();
    for c in stem.chars() {
        if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
            name.push(c);
        } else if !name.ends_with('-') {
            name.push('-');
        }
    }
    let name = name.trim_matches(['-', '.']).replace("..", ".");
    let name: String = name.chars().take(64).collect();
    if valid_name(&name) {
        name
    } else {
        "imported".into()
    }
}

/// Checks `path` is a whisper.cpp model and copies it into `dir` as `ggml-<name>.bin` (through a
/// part file renamed into place). A catalogue name is taken only by the catalogue's very file.
pub fn import(
    dir: &Path,
    catalog: &Catalog,
    path: &Path,
    name: Option<&str>,
) -> Result<ModelView, ModelError> {
    let meta = import_source(path)?;
    Header::read(path).map_err(|why| {
        bad(
            "invalid_model_file",
            format!("{} cannot be used: {why}", path.display()),
        )
    })?;
    let name = match name.map(str::trim) {
        Some(n) => n.to_string(),
        None => derive_name(path),
    };
    if !valid_name(&name) {
        return Err(bad(
            "invalid_name",
            "a model name is 1–64 letters, digits, `.`, `-`, `_` (not starting with `.` or `-`)",
        ));
    }
    std::fs::create_dir_all(dir).map_err(write_error)?;
    let target = dir.join(file_name(&name));
    if target.exists() {
        return Err(ModelError::new(
            409,
            "model_exists",
            format!("a model called {name} is installed already: remove it or choose another name"),
        ));
    }
    check_space(dir, meta.len())?;
    let tmp = dir.join(format!(".import-{}.part", uuid::Uuid::new_v4()));
    let copied = copy_hashing(path, &tmp);
    let digest = match copied {
        Ok(d) => d,
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            return Err(e);
        }
    };
    if let Some(known) = catalog.get(&name) {
        if digest != known.sha256 {
            let _ = std::fs::remove_file(&tmp);
            return Err(ModelError::new(
                409,
                "name_taken",
                format!(
                    "{name} is the catalogue's name for the official file, and this file is a \
                     different one: import it under another name"
                ),
            ));
        }
    }
    if target.exists() {
        let _ = std::fs::remove_file(&tmp);
        return Err(ModelError::new(
            409,
            "model_exists",
            format!("a model called {name} is installed already"),
        ));
    }
    std::fs::rename(&tmp, &target).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        write_error(e)
    })?;
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
    let mut view = match catalog.get(&name) {
        Some(m) => catalog_view(m),
        None => imported_view(&name, &target, meta.len()),
    };
    view.installed = true;
    view.path = Some(target.display().to_string());
    view.size_on_disk = meta.len();
    Ok(view)
}

fn write_error(e: std::io::Error) -> ModelError {
    if e.kind() == std::io::ErrorKind::StorageFull {
        disk_full("the disk is full: the model was not copied")
    } else {
        ModelError::new(
            500,
            "write_failed",
            format!("cannot write into the models folder: {e}"),
        )
    }
}

/// Copies `from` to `to` (synced), answering the SHA-256 of the bytes.
fn copy_hashing(from: &Path, to: &Path) -> Result<String, ModelError> {
    let mut src = File::open(from).map_err(|e| {
        bad(
            "file_not_found",
            format!("cannot read {}: {e}", from.display()),
        )
    })?;
    let mut dst = File::create_new(to).map_err(write_error)?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = src.read(&mut buf).map_err(|e| {
            bad(
                "file_not_found",
                format!("cannot read {}: {e}", from.display()),
            )
        })?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
        dst.write_all(&buf[..n]).map_err(write_error)?;
    }
    dst.sync_all().map_err(write_error)?;
    Ok(hex::encode(hasher.finalize()))
}

/// Removes an installed model, and an unfinished download's part file.
pub fn remove(dir: &Path, catalog: &Catalog, name: &str) -> Result<(), ModelError> {
    if !valid_name(name) {
        return Err(ModelError::unknown(name));
    }
    let target = dir.join(file_name(name));
    let part = super::download::part_path(&target);
    if let Ok(f) = File::open(&part) {
        if f.try_lock().is_err() {
            return Err(ModelError::new(
                409,
                "download_in_progress",
                format!("{name} is being downloaded: cancel the download first"),
            ));
        }
    }
    let removed_part = std::fs::remove_file(&part).is_ok();
    match std::fs::remove_file(&target) {
        Ok(()) => Ok(()),
        Err(_) if removed_part => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(if catalog.get(name).is_some() {
            ModelError::new(404, "not_installed", format!("{name} is not installed"))
        } else {
            ModelError::unknown(name)
        }),
        Err(e) => Err(ModelError::new(
            500,
            "write_failed",
            format!("cannot remove {name}: {e}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model_like(path: &Path, extra: usize) {
        let mut bytes = Header::tiny_en().to_bytes();
        bytes.extend((0..extra).map(|i| (i * 7) as u8));
        std::fs::write(path, bytes).unwrap();
    }

    #[test]
    fn import_list_and_remove() {
        let src = tempfile::tempdir().unwrap();
        let data = tempfile::tempdir().unwrap();
        let dir = data.path().join("models");
        let catalog = Catalog::builtin();
        let own = src.path().join("ggml-my model.bin");
        model_like(&own, 4096);
        let v = import(&dir, &catalog, &own, None).unwrap();
        assert_eq!(
            (v.name.as_str(), v.installed, v.known),
            ("my-model", true, false)
        );
        assert_eq!(v.languages, "en");
        assert_eq!(
            import(&dir, &catalog, &own, None).unwrap_err().code,
            "model_exists"
        );
        // The catalogue's name for another file is refused; nothing is left behind.
        assert_eq!(
            import(&dir, &catalog, &own, Some("tiny.en"))
                .unwrap_err()
                .code,
            "name_taken"
        );
        let not_model = src.path().join("notes.bin");
        std::fs::write(&not_model, vec![0u8; 4096]).unwrap();
        assert_eq!(
            import(&dir, &catalog, &not_model, None).unwrap_err().code,
            "invalid_model_file"
        );
        assert_eq!(
            import(&dir, &catalog, &src.path().join("none"), None)
                .unwrap_err()
                .code,
            "file_not_found"
        );
        assert_eq!(
            import(&dir, &catalog, &own, Some("a/b")).unwrap_err().code,
            "invalid_name"
        );
        const HL: u64 = crate::models::ggml::HEADER_LEN as u64;
        let l = list(&dir, &catalog, &HashMap::new());
        assert_eq!(l.disk_used, 4096 + HL);
        assert_eq!(l.models.len(), catalog.models.len() + 1);
        assert!(l
            .models
            .iter()
            .all(|m| m.installed == (m.name == "my-model")));
        // A part file shows as a paused download and counts as used.
        std::fs::write(dir.join("ggml-base.bin.part"), b"12345").unwrap();
        let l = list(&dir, &catalog, &HashMap::new());
        let base = l.models.iter().find(|m| m.name == "base").unwrap();
        assert_eq!(base.download.as_ref().unwrap().state, "paused");
        assert_eq!((base.size_on_disk, l.disk_used), (5, 4096 + HL + 5));
        remove(&dir, &catalog, "base").unwrap();
        remove(&dir, &catalog, "my-model").unwrap();
        assert_eq!(
            remove(&dir, &catalog, "my-model").unwrap_err().code,
            "unknown_model"
        );
        assert_eq!(
            remove(&dir, &catalog, "tiny").unwrap_err().code,
            "not_installed"
        );
        assert_eq!(list(&dir, &catalog, &HashMap::new()).disk_used, 0);
    }

    #[test]
    fn names_are_derived_from_file_names() {
        for (file, name) in [
            ("ggml-base.en.bin", "base.en"),
            ("/x/My Model (v2).bin", "My-Model-v2"),
            ("...bin", "imported"),
        ] {
            assert_eq!(derive_name(Path::new(file)), name, "{file}");
        }
    }
}
