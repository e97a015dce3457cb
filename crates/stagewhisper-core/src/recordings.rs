//! A call's kept audio ("keep the call's audio") and "Transcribe again": where it lives, what
//! the routes carry, and the live-only progress event.
//!
//! Off by default, per call and as a default (`PUT /api/audio {"keep_audio": true}`). A call
//! that keeps its audio has a folder `<data dir>/recordings/<call id>/`: each turn heard is one
//! FLAC file there (16 kHz mono 16-bit, lossless: a new model hears exactly what the live engine
//! heard) and `index.jsonl` says who said each turn, when, and which transcript row it became. The folder exists only
//! while the call keeps its audio: turning it off removes the folder (nothing is kept when off)
//! and leaves a marker (`<call id>.off`) so that listening to the call again does not turn it
//! back on by default. Deleting the call removes both.
//!
//! The recording itself (encoding, reading back, transcribing again) lives in
//! `stagewhisper-audio`'s `recording` module, behind [`crate::audio::Ears`].

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use utoipa::ToSchema;

/// The folder of every call's kept audio.
pub fn root(data_dir: &Path) -> PathBuf {
    data_dir.join("recordings")
}

/// Whether `call_id` can name a folder (the app's ids are UUIDs; anything else has no audio).
fn safe(call_id: &str) -> bool {
    !call_id.is_empty()
        && call_id.len() <= 100
        && call_id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The folder of a call's kept audio (`None`: not an id that can have one).
pub fn call_dir(data_dir: &Path, call_id: &str) -> Option<PathBuf> {
    safe(call_id).then(|| root(data_dir).join(call_id))
}

fn off_marker(data_dir: &Path, call_id: &str) -> Option<PathBuf> {
    safe(call_id).then(|| root(data_dir).join(format!("{call_id}.off")))
}

/// Whether the call keeps its audio (its folder exists).
pub fn keeps(data_dir: &Path, call_id: &str) -> bool {
    call_dir(data_dir, call_id).is_some_and(|d| d.is_dir())
}

/// Turns keeping on or off for one call. Off removes everything kept.
pub fn set_keep(data_dir: &Path, call_id: &str, keep: bool) -> std::io::Result<()> {
    let (Some(dir), Some(off)) = (call_dir(data_dir, call_id), off_marker(data_dir, call_id))
    else {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "not a call id",
        ));
    };
    if keep {
        std::fs::create_dir_all(&dir)?;
        remove_file(&off)
    } else {
        remove_dir(&dir)?;
        std::fs::create_dir_all(root(data_dir))?;
        std::fs::write(&off, b"")
    }
}

/// A call starts being listened to: it keeps its audio when the default says so and nobody
/// turned it off for this call.
pub fn apply_default(data_dir: &Path, call_id: &str, keep_by_default: bool) {
    let turned_off = off_marker(data_dir, call_id).is_some_and(|m| m.exists());
    if keep_by_default && !turned_off && !keeps(data_dir, call_id) {
        if let Err(e) = set_keep(data_dir, call_id, true) {
            tracing::warn!(error = %e, "cannot keep the call's audio");
        }
    }
}

/// Bytes on disk of the call's kept audio, and the turns kept (its `.flac` files).
pub fn usage(data_dir: &Path, call_id: &str) -> (u64, u64) {
    let Some(Ok(entries)) = call_dir(data_dir, call_id).map(std::fs::read_dir) else {
        return (0, 0);
    };
    let (mut bytes, mut turns) = (0, 0);
    for e in entries.flatten() {
        let Ok(m) = e.metadata() else { continue };
        if m.is_file() {
            bytes += m.len();
            turns += u64::from(e.path().extension().is_some_and(|x| x == "flac"));
        }
    }
    (bytes, turns)
}

/// Removes everything kept of a call (the call is deleted).
pub fn remove(data_dir: &Path, call_id: &str) {
    if let Some(dir) = call_dir(data_dir, call_id) {
        if let Err(e) = remove_dir(&dir) {
            tracing::warn!(error = %e, "cannot remove a deleted call's audio");
        }
    }
    if let Some(off) = off_marker(data_dir, call_id) {
        let _ = remove_file(&off);
    }
}

fn remove_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

fn remove_file(file: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(file) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
        _ => Ok(()),
    }
}

/// `GET`/`PUT /api/calls/{id}/recording`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RecordingView {
    /// The call keeps its audio.
    pub keep: bool,
    /// Bytes on disk of what is kept (0 when off).
    pub bytes: u64,
    /// Turns whose audio is kept.
    pub turns: u64,
    /// This call's latest "Transcribe again" since the app started: running now, or how it
    /// ended.
    pub transcribe: Option<TranscribeView>,
}

/// `PUT /api/calls/{id}/recording`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct RecordingUpdate {
    /// `false` removes everything kept of the call.
    pub keep: bool,
}

/// `POST /api/calls/{id}/transcribe`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct TranscribeRequest {
    /// A Whisper model: a name (`tiny.en`, `base-q8_0`, an imported name) or a file's path.
    pub model: String,
    /// `auto` (default) or an ISO-639-1 code.
    pub language: Option<String>,
}

/// A "Transcribe again" in progress or just ended; also the `transcribe_progress` event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct TranscribeView {
    pub model: String,
    pub language: String,
    /// `running`, `done` or `failed`.
    pub state: String,
    /// Turns decoded so far, of `total`.
    pub done: u64,
    pub total: u64,
    /// `done`: turns whose text or language changed, and turns added (heard live as nothing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub changed: Option<u64>,
    /// `failed`: a stable code (`model_unavailable`, `engine_failed`, `recording_unreadable`,
    /// `storage_unavailable`, `call_gone`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A turn's new text from "Transcribe again": of a stored transcript row, or of a turn heard
/// live in which the engine then recognised nothing (`row: None`: added as a new turn of
/// `speaker` at `at_ms`, the end of its speech, Unix ms).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Retranscribed {
    pub row: Option<i64>,
    pub speaker: Option<String>,
    pub at_ms: i64,
    pub text: String,
    pub language: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeping_is_per_call_and_off_removes_everything() {
        let d = tempfile::tempdir().unwrap();
        let data = d.path();
        assert!(!keeps(data, "c1"));
        apply_default(data, "c1", false);
        assert!(!keeps(data, "c1"));
        apply_default(data, "c1", true);
        assert!(keeps(data, "c1"));
        std::fs::write(call_dir(data, "c1").unwrap().join("1-mic.flac"), [0u8; 10]).unwrap();
        assert_eq!(usage(data, "c1"), (10, 1));
        set_keep(data, "c1", false).unwrap();
        assert!(!keeps(data, "c1") && usage(data, "c1") == (0, 0));
        // Turned off for this call: the default does not turn it back on.
        apply_default(data, "c1", true);
        assert!(!keeps(data, "c1"));
        set_keep(data, "c1", true).unwrap();
        assert!(keeps(data, "c1"));
        remove(data, "c1");
        assert!(!keeps(data, "c1"));
        assert!(!root(data).join("c1.off").exists());
        // Nothing outside the folder is ever named.
        assert!(call_dir(data, "../x").is_none() && set_keep(data, "a/b", true).is_err());
    }
}
