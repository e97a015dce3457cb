//! Keeping a call's audio, and "Transcribe again" from it ([`again`]). Where it lives and the
//! per-call switch are the core's (`stagewhisper_core::recordings`); this module writes and
//! reads the audio.
//!
//! **Format:** each turn the pipeline hears is one FLAC file, `<seq>-<channel>.flac` (16 kHz
//! mono 16-bit, the samples the engine heard), written when the turn ends (a temporary name,
//! then a rename: a file is whole or absent). `rows.jsonl` ties a turn to the transcript row it
//! was stored as (`{"seq", "row"}`, one line per stored turn).
//!
//! **Why FLAC:** lossless, so a new model hears exactly what the live engine heard (a lossy
//! speech codec at a few kB/s would be ~10× smaller but changes what is recognised); encoded and
//! decoded in pure Rust (`flacenc`, `claxon`) with nothing to build or install. Speech at 16 kHz
//! takes about 1–1.3 MB per minute of speech (silence between turns is not kept at all;
//! `recording_sizes` in the tests measures it).

pub mod again;

use crate::backlog::TurnMeta;
use crate::pcm::RATE;
use stagewhisper_core::recordings;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The index of stored turns in a call's folder.
const ROWS: &str = "rows.jsonl";

/// Why kept audio could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum RecordingError {
    #[error("cannot write the call's audio: {0}")]
    Io(#[from] std::io::Error),
    #[error("cannot encode the call's audio: {0}")]
    Encode(String),
    #[error("cannot read the call's audio ({file}): {message}")]
    Decode { file: String, message: String },
}

/// Writes the turns of calls that keep their audio (one per app; cheap when they do not).
pub struct Recorder {
    data_dir: PathBuf,
}

impl Recorder {
    pub fn new(data_dir: &Path) -> Recorder {
        Recorder {
            data_dir: data_dir.to_path_buf(),
        }
    }

    /// A turn heard: kept when its call keeps its audio. Never fails the turn: a write that
    /// fails is logged.
    pub fn turn(&self, meta: &TurnMeta, samples: &[i16]) {
        let Some(dir) = self.keeping(&meta.call_id) else {
            return;
        };
        if samples.is_empty() {
            return;
        }
        let file = dir.join(format!("{}-{}.flac", meta.seq, meta.channel.as_str()));
        if let Err(e) = write_flac(&file, samples) {
            tracing::warn!(seq = meta.seq, error = %e, "a turn's audio could not be kept");
        }
    }

    /// The turn `meta` was stored as transcript row `row`.
    pub fn stored(&self, meta: &TurnMeta, row: i64) {
        let Some(dir) = self.keeping(&meta.call_id) else {
            return;
        };
        let line = serde_json::json!({"seq": meta.seq, "row": row}).to_string();
        let r = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join(ROWS))
            .and_then(|mut f| writeln!(f, "{line}"));
        if let Err(e) = r {
            tracing::warn!(seq = meta.seq, error = %e, "a kept turn's row could not be noted");
        }
    }

    fn keeping(&self, call_id: &str) -> Option<PathBuf> {
        recordings::call_dir(&self.data_dir, call_id).filter(|d| d.is_dir())
    }
}

/// Encodes 16 kHz mono samples as a FLAC file (whole or absent).
pub fn write_flac(file: &Path, samples: &[i16]) -> Result<(), RecordingError> {
    use flacenc::component::BitRepr;
    use flacenc::error::Verify;
    let mut config = flacenc::config::Encoder::default();
    config.multithread = false;
    let config = config
        .into_verified()
        .map_err(|(_, e)| RecordingError::Encode(format!("{e:?}")))?;
    let wide: Vec<i32> = samples.iter().map(|&s| i32::from(s)).collect();
    let source = flacenc::source::MemSource::from_samples(&wide, 1, 16, RATE as usize);
    let stream = flacenc::encode_with_fixed_block_size(&config, source, config.block_size)
        .map_err(|e| RecordingError::Encode(format!("{e:?}")))?;
    let mut sink = flacenc::bitsink::ByteSink::new();
    stream
        .write(&mut sink)
        .map_err(|e| RecordingError::Encode(format!("{e:?}")))?;
    let tmp = file.with_extension("flac.part");
    std::fs::write(&tmp, sink.as_slice())?;
    std::fs::rename(&tmp, file)?;
    Ok(())
}

/// Decodes a FLAC file written by [`write_flac`] (16 kHz mono 16-bit only).
pub fn read_flac(file: &Path) -> Result<Vec<i16>, RecordingError> {
    let bad = |message: String| RecordingError::Decode {
        file: file
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        message,
    };
    let mut reader = claxon::FlacReader::open(file).map_err(|e| bad(e.to_string()))?;
    let info = reader.streaminfo();
    if info.channels != 1 || info.bits_per_sample != 16 || info.sample_rate != RATE as u32 {
        return Err(bad(format!(
            "{} channel(s), {} bits, {} Hz: not the app's 16 kHz mono 16-bit",
            info.channels, info.bits_per_sample, info.sample_rate
        )));
    }
    reader
        .samples()
        .map(|s| s.map(|v| v as i16).map_err(|e| bad(e.to_string())))
        .collect()
}

/// A kept turn that was stored: its row and its audio's file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptTurn {
    pub seq: u64,
    pub row: i64,
    pub file: PathBuf,
}

/// The call's kept turns that are in its transcript, in the order they were heard (a turn
/// heard but never stored — nothing recognised, an echo — is not transcribed again).
pub fn kept_turns(data_dir: &Path, call_id: &str) -> Result<Vec<KeptTurn>, RecordingError> {
    let Some(dir) = recordings::call_dir(data_dir, call_id) else {
        return Ok(Vec::new());
    };
    let rows = match std::fs::read_to_string(dir.join(ROWS)) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut files = std::collections::HashMap::new();
    for e in std::fs::read_dir(&dir)?.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if let Some(seq) = name
            .strip_suffix(".flac")
            .and_then(|s| s.split('-').next())
            .and_then(|s| s.parse::<u64>().ok())
        {
            files.insert(seq, e.path());
        }
    }
    let mut turns: Vec<KeptTurn> = rows
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| Some((v["seq"].as_u64()?, v["row"].as_i64()?)))
        .filter_map(|(seq, row)| {
            files.get(&seq).map(|f| KeptTurn {
                seq,
                row,
                file: f.clone(),
            })
        })
        .collect();
    turns.sort_by_key(|t| t.seq);
    turns.dedup_by_key(|t| t.row);
    Ok(turns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use stagewhisper_core::audio::Channel;

    fn meta(seq: u64, call: &str) -> TurnMeta {
        TurnMeta {
            seq,
            call_id: call.into(),
            channel: Channel::Mic,
            speaker: "You".into(),
            started_at_ms: 0,
            ended_at_ms: 1000,
            samples: 0,
            text: None,
            attempts: 0,
            language: None,
        }
    }

    /// A turn's audio reads back exactly; nothing is written for a call that does not keep
    /// its audio; only stored turns are listed, in order.
    #[test]
    fn turns_are_kept_losslessly_and_only_when_the_call_keeps_them() {
        let d = tempfile::tempdir().unwrap();
        let rec = Recorder::new(d.path());
        let tone: Vec<i16> = (0..24_000)
            .map(|i| ((i as f32 * 0.05).sin() * 8000.0) as i16 + (i % 7) as i16)
            .collect();
        rec.turn(&meta(1, "c1"), &tone);
        rec.stored(&meta(1, "c1"), 10);
        assert!(
            !recordings::root(d.path()).exists(),
            "nothing kept when off"
        );
        recordings::set_keep(d.path(), "c1", true).unwrap();
        rec.turn(&meta(3, "c1"), &tone[..8000]);
        rec.turn(&meta(2, "c1"), &tone);
        rec.turn(&meta(4, "c1"), &tone);
        rec.stored(&meta(3, "c1"), 12);
        rec.stored(&meta(2, "c1"), 11);
        let turns = kept_turns(d.path(), "c1").unwrap();
        assert_eq!(
            turns.iter().map(|t| (t.seq, t.row)).collect::<Vec<_>>(),
            [(2, 11), (3, 12)]
        );
        assert_eq!(read_flac(&turns[0].file).unwrap(), tone);
        assert_eq!(read_flac(&turns[1].file).unwrap(), tone[..8000]);
        let (bytes, n) = recordings::usage(d.path(), "c1");
        assert_eq!(n, 3);
        assert!(bytes > 0 && bytes < (tone.len() * 2 * 2 + 8000 * 2) as u64);
    }
}
