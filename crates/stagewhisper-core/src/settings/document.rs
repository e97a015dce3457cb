//! The document on disk: its shape, and reading and writing it whole (temporary file, fsync,
//! rename, fsync of the folder; mode 0600).

use super::{SettingsError, FORMAT};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

/// `{"format": 1, "sections": {"<key>": {"version": n, "value": …}}}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Document {
    pub format: u32,
    #[serde(default)]
    pub sections: BTreeMap<String, Stored>,
}

impl Default for Document {
    fn default() -> Self {
        Document {
            format: FORMAT,
            sections: BTreeMap::new(),
        }
    }
}

/// One section as saved: the version of its shape and its value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Stored {
    pub version: u32,
    pub value: Value,
}

impl Stored {
    pub fn of(version: u32, value: &impl Serialize) -> Stored {
        Stored {
            version,
            value: serde_json::to_value(value).expect("settings serialize"),
        }
    }
}

pub(super) enum Read {
    Missing,
    Doc(Document),
    /// Not a settings document (the parser's words).
    Unreadable(String),
}

/// Reads the document; an I/O error other than "no such file" is an error (nothing is moved).
pub(super) fn read(path: &Path) -> Result<Read, SettingsError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Read::Missing),
        Err(source) => {
            return Err(SettingsError::Read {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    // The format first: a newer document is refused even when its shape is unknown here.
    #[derive(Deserialize)]
    struct Format {
        format: u32,
    }
    match serde_json::from_slice::<Format>(&bytes) {
        Ok(f) if f.format > FORMAT => {
            return Err(SettingsError::TooNew {
                path: path.to_path_buf(),
                found: f.format,
            })
        }
        Ok(_) => {}
        Err(e) => return Ok(Read::Unreadable(e.to_string())),
    }
    Ok(match serde_json::from_slice::<Document>(&bytes) {
        Ok(doc) => Read::Doc(doc),
        Err(e) => Read::Unreadable(e.to_string()),
    })
}

/// Writes the whole document: a temporary file beside it (0600), fsynced, renamed over it, then
/// the folder fsynced. On any error the old document stays as it was and no temporary file is
/// left.
pub(super) fn write(path: &Path, doc: &Document) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let bytes = serde_json::to_vec_pretty(doc).expect("settings serialize");
    // `tempfile` creates it with mode 0600 and removes it when it is not persisted.
    let mut tmp = tempfile::Builder::new()
        .prefix(".settings.")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    tmp.write_all(&bytes)?;
    tmp.write_all(b"\n")?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    std::fs::File::open(dir)?.sync_all()
}
