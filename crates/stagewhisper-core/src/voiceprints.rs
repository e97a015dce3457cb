//! Voiceprints: the people named in earlier calls, known by voice in the next one.
//!
//! A voiceprint is a speaker embedding (a unit-length vector from the speaker model, never
//! audio) kept under the name a person was given (`PUT /api/calls/{id}/speakers/{label}`). It
//! lives in the data dir's `voiceprints.json` (mode 0600, replaced atomically), so it goes with
//! the data dir and never leaves the machine; `DELETE /api/voiceprints/{id}` forgets it.
//!
//! Naming the same person again (the same name, letter case aside) refines the voiceprint: the
//! mean of the old and the new embedding, weighted by how much speech each was made from.

use serde::{Deserialize, Serialize};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use utoipa::ToSchema;

/// The file in the data dir.
pub const FILE: &str = "voiceprints.json";

/// Reads and writes of the file, one at a time (the API and the audio pipeline share it).
static FILE_LOCK: Mutex<()> = Mutex::new(());

#[derive(Debug, thiserror::Error)]
pub enum VoiceprintError {
    #[error("the voiceprints cannot be read or written: {0}")]
    Io(#[from] std::io::Error),
    #[error("the voiceprints file is not readable: {0}")]
    Corrupt(#[from] serde_json::Error),
}

/// A person's voiceprint, as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Voiceprint {
    pub id: String,
    pub name: String,
    /// Unit length.
    pub embedding: Vec<f32>,
    /// The speech it was made from, in milliseconds.
    pub speech_ms: u64,
    pub created_at: String,
    pub updated_at: String,
}

/// `GET /api/voiceprints`: a voiceprint without its numbers.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct VoiceprintView {
    pub id: String,
    pub name: String,
    /// Seconds of speech it was made from.
    pub speech_seconds: f64,
    pub created_at: String,
    pub updated_at: String,
}

impl From<&Voiceprint> for VoiceprintView {
    fn from(v: &Voiceprint) -> Self {
        VoiceprintView {
            id: v.id.clone(),
            name: v.name.clone(),
            speech_seconds: v.speech_ms as f64 / 1000.0,
            created_at: v.created_at.clone(),
            updated_at: v.updated_at.clone(),
        }
    }
}

#[derive(Default, Serialize, Deserialize)]
struct SavedFile {
    voiceprints: Vec<Voiceprint>,
}

/// The voiceprints of a data dir.
#[derive(Debug, Clone)]
pub struct Voiceprints {
    path: PathBuf,
}

impl Voiceprints {
    pub fn new(data_dir: &Path) -> Voiceprints {
        Voiceprints {
            path: data_dir.join(FILE),
        }
    }

    /// Every voiceprint, oldest first (none without a file).
    pub fn list(&self) -> Result<Vec<Voiceprint>, VoiceprintError> {
        let _held = FILE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        Ok(self.read()?.voiceprints)
    }

    /// Keeps `embedding` (from `speech_ms` of speech) as `name`'s voiceprint, refining the one
    /// kept under that name already. `now`: RFC 3339.
    pub fn remember(
        &self,
        name: &str,
        embedding: &[f32],
        speech_ms: u64,
        now: &str,
    ) -> Result<Voiceprint, VoiceprintError> {
        let _held = FILE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let mut file = self.read()?;
        let embedding = &unit(embedding.to_vec());
        let name = name.trim();
        let same = |v: &&mut Voiceprint| v.name.to_lowercase() == name.to_lowercase();
        let kept = match file.voiceprints.iter_mut().find(same) {
            Some(v) if v.embedding.len() == embedding.len() => {
                let (a, b) = (v.speech_ms.max(1) as f32, speech_ms.max(1) as f32);
                let mixed = v
                    .embedding
                    .iter()
                    .zip(embedding)
                    .map(|(x, y)| x * a + y * b);
                v.embedding = unit(mixed.collect());
                v.speech_ms += speech_ms;
                v.name = name.to_string();
                v.updated_at = now.to_string();
                v.clone()
            }
            other => {
                let v = Voiceprint {
                    id: uuid::Uuid::new_v4().to_string(),
                    name: name.to_string(),
                    embedding: embedding.clone(),
                    speech_ms,
                    created_at: now.to_string(),
                    updated_at: now.to_string(),
                };
                match other {
                    // Another model's voiceprint under the name: replaced.
                    Some(old) => *old = v.clone(),
                    None => file.voiceprints.push(v.clone()),
                }
                v
            }
        };
        self.write(&file)?;
        Ok(kept)
    }

    /// Forgets a voiceprint: `false` when there is none with that id.
    pub fn forget(&self, id: &str) -> Result<bool, VoiceprintError> {
        let _held = FILE_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let mut file = self.read()?;
        let before = file.voiceprints.len();
        file.voiceprints.retain(|v| v.id != id);
        if file.voiceprints.len() == before {
            return Ok(false);
        }
        self.write(&file)?;
        Ok(true)
    }

    fn read(&self) -> Result<SavedFile, VoiceprintError> {
        match std::fs::read(&self.path) {
            Ok(bytes) => Ok(serde_json::from_slice(&bytes)?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(SavedFile::default()),
            Err(e) => Err(e.into()),
        }
    }

    /// Replaces the file: a temporary file (0600) written, synced and renamed over it.
    fn write(&self, file: &SavedFile) -> Result<(), VoiceprintError> {
        let bytes = serde_json::to_vec(file)?;
        let tmp = self.path.with_extension("json.tmp");
        let _ = std::fs::remove_file(&tmp);
        let result = (|| {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&tmp)?;
            f.write_all(&bytes)?;
            f.sync_all()?;
            drop(f);
            std::fs::rename(&tmp, &self.path)?;
            if let Some(dir) = self.path.parent() {
                std::fs::File::open(dir)?.sync_all()?;
            }
            Ok(())
        })();
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result.map_err(VoiceprintError::Io)
    }
}

fn unit(mut v: Vec<f32>) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n > 0.0 {
        v.iter_mut().for_each(|x| *x /= n);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_is_kept_refined_and_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let vp = Voiceprints::new(dir.path());
        assert!(vp.list().unwrap().is_empty());
        let dana = vp.remember("Dana", &[1.0, 0.0], 3_000, "t1").unwrap();
        assert_eq!(dana.embedding, vec![1.0, 0.0]);
        // The same person named again (case aside): one voiceprint, refined.
        let again = vp.remember(" dana ", &[0.0, 2.0], 3_000, "t2").unwrap();
        assert_eq!(again.id, dana.id);
        assert!((again.embedding[0] - again.embedding[1]).abs() < 1e-6);
        assert_eq!((again.speech_ms, again.updated_at.as_str()), (6_000, "t2"));
        vp.remember("Eve", &[0.0, 1.0], 2_000, "t3").unwrap();
        let names: Vec<String> = vp.list().unwrap().into_iter().map(|v| v.name).collect();
        assert_eq!(names, ["dana", "Eve"]);
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(dir.path().join(FILE))
                .unwrap()
                .permissions(),
        );
        assert_eq!(mode & 0o777, 0o600);
        assert!(vp.forget(&dana.id).unwrap());
        assert!(!vp.forget(&dana.id).unwrap());
        let left: Vec<String> = vp.list().unwrap().into_iter().map(|v| v.name).collect();
        assert_eq!(left, ["Eve"]);
        // A file that is not JSON is an error, not an empty list that a write would replace.
        std::fs::write(dir.path().join(FILE), "{").unwrap();
        assert!(matches!(vp.list(), Err(VoiceprintError::Corrupt(_))));
        assert!(vp.remember("Zed", &[1.0, 0.0], 1, "t4").is_err());
    }
}
