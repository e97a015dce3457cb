//! Keeping a call's audio, and "Transcribe again" from it ([`again`]). Where it lives and the
//! per-call switch are the core's (`stagewhisper_core::recordings`); this module writes and
//! reads the audio.
//!
//! **Format:** each turn the pipeline hears is one FLAC file, `<seq>-<channel>.flac` (16 kHz
//! mono 16-bit, the samples the engine heard), written when the turn ends (a temporary name,
//! then a rename: a file is whole or absent). `index.jsonl` says who said each turn and when it
//! ended (`{"seq", "speaker", "end_ms"}`, written with the file) and ties a stored turn to its
//! transcript row (`{"seq", "row"}`).
//!
//! **Why FLAC:** lossless, so a new model hears exactly what the live engine heard (a lossy
//! speech codec at a few kB/s would be ~10× smaller but changes what is recognised); encoded and
//! decoded in pure Rust (`flacenc`, `claxon`) with nothing to build or install. Speech at 16 kHz
//! takes about 1.1 MB per minute of speech against 1.9 MB raw (1.07 MB on the real-speech
//! fixtures: `recording_sizes` in the tests); the silence between turns is not kept at all.

pub mod again;

use crate::backlog::TurnMeta;
use crate::pcm::RATE;
use stagewhisper_core::recordings;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The index of a call's kept turns, in its folder.
const INDEX: &str = "index.jsonl";

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
            return;
        }
        let line = serde_json::json!({"seq": meta.seq, "speaker": meta.speaker, "end_ms": meta.ended_at_ms});
        note(&dir, meta, &line);
    }

    /// The turn `meta` was stored as transcript row `row`.
    pub fn stored(&self, meta: &TurnMeta, row: i64) {
        if let Some(dir) = self.keeping(&meta.call_id) {
            note(
                &dir,
                meta,
                &serde_json::json!({"seq": meta.seq, "row": row}),
            );
        }
    }

    fn keeping(&self, call_id: &str) -> Option<PathBuf> {
        recordings::call_dir(&self.data_dir, call_id).filter(|d| d.is_dir())
    }
}

/// Appends a line to the call's index.
fn note(dir: &Path, meta: &TurnMeta, line: &serde_json::Value) {
    let r = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(INDEX))
        .and_then(|mut f| writeln!(f, "{line}"));
    if let Err(e) = r {
        tracing::warn!(seq = meta.seq, error = %e, "a kept turn could not be noted");
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
    if info.channels != 1 || info.bits_per_sample != 16 || info.sample_rate != RATE {
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

/// A kept turn: its transcript row (`None`: nothing was recognised in it live), who said it,
/// when it ended (Unix ms) and its audio's file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptTurn {
    pub seq: u64,
    pub row: Option<i64>,
    pub speaker: Option<String>,
    pub end_ms: i64,
    pub file: PathBuf,
}

/// The call's kept turns, in the order they were heard (an echo of the other side is never
/// kept).
pub fn kept_turns(data_dir: &Path, call_id: &str) -> Result<Vec<KeptTurn>, RecordingError> {
    let Some(dir) = recordings::call_dir(data_dir, call_id) else {
        return Ok(Vec::new());
    };
    let index = match std::fs::read_to_string(dir.join(INDEX)) {
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
    let mut turns = std::collections::BTreeMap::<u64, KeptTurn>::new();
    for v in index
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
    {
        let Some((seq, file)) = v["seq"].as_u64().and_then(|s| Some((s, files.get(&s)?))) else {
            continue;
        };
        let t = turns.entry(seq).or_insert_with(|| KeptTurn {
            seq,
            row: None,
            speaker: None,
            end_ms: 0,
            file: file.clone(),
        });
        if let Some(row) = v["row"].as_i64() {
            t.row = Some(row);
        }
        if let Some(s) = v["speaker"].as_str() {
            t.speaker = Some(s.to_string());
        }
        if let Some(end) = v["end_ms"].as_i64() {
            t.end_ms = end;
        }
    }
    Ok(turns.into_values().collect())
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
    /// its audio; the turns are listed in order, with their rows when stored.
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
            [(2, Some(11)), (3, Some(12)), (4, None)]
        );
        assert_eq!(
            (turns[2].speaker.as_deref(), turns[2].end_ms),
            (Some("You"), 1000)
        );
        assert_eq!(read_flac(&turns[0].file).unwrap(), tone);
        assert_eq!(read_flac(&turns[1].file).unwrap(), tone[..8000]);
        let (bytes, n) = recordings::usage(d.path(), "c1");
        assert_eq!(n, 3);
        assert!(bytes > 0 && bytes < (tone.len() * 2 * 2 + 8000 * 2) as u64);
    }

    /// What keeping costs: the real-speech fixtures (16 kHz mono, 52 s of human speech) as
    /// kept, in bytes per minute of speech. Raw 16-bit PCM is 1.92 MB a minute; FLAC must save
    /// a good share of it (the figure is printed for the docs).
    #[test]
    fn recording_sizes() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/speech");
        let out = tempfile::tempdir().unwrap();
        let (mut samples, mut bytes) = (0usize, 0u64);
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            if e.path().extension().is_none_or(|x| x != "wav") {
                continue;
            }
            let pcm = crate::pcm::read_wav_16k_mono(&e.path()).unwrap();
            let file = out.path().join("t.flac");
            write_flac(&file, &pcm).unwrap();
            assert_eq!(read_flac(&file).unwrap(), pcm);
            samples += pcm.len();
            bytes += file.metadata().unwrap().len();
        }
        let minutes = samples as f64 / f64::from(RATE) / 60.0;
        let per_minute = bytes as f64 / minutes;
        println!("kept audio: {bytes} bytes for {minutes:.2} min of speech: {per_minute:.0} bytes per minute");
        assert!(minutes > 0.5, "the fixtures: {minutes} min");
        assert!(per_minute < 1_500_000.0, "{per_minute} bytes per minute");
    }
}
