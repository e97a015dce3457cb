//! Turns heard but not transcribed yet, kept on disk until they are stored.
//!
//! When the engine fails on a turn (a server down, a refusal, a decode error), the turn's audio
//! comes here: the only time the call's audio touches the disk. Once a turn waits here, every
//! later turn queues behind it (with its text when the engine already gave one, without audio
//! then), so the transcript keeps the order people spoke in. The pipeline drains the backlog in
//! order ([`Backlog::first`]) with whatever engine is current.
//!
//! - **One file per turn**, `<seq>.turn` in `<data_dir>/audio-backlog/` (mode 0700): a magic
//!   line, the turn's [`TurnMeta`] as JSON, then its samples (16 kHz mono, `i16` little-endian).
//!   Written to a temporary name, fsynced, renamed, the directory fsynced: a crash leaves the
//!   turn whole or absent, never half-written; a leftover temporary file is removed at the next
//!   start.
//! - **Bounded**: at most [`MAX_SECONDS`] of speech (30 minutes, about 58 MB). Past that the
//!   oldest turns' audio is dropped (each logged) and [`BacklogStatus::dropped_seconds`] says
//!   how much, so the status can say it in words.
//! - **Exactly once**: before a turn is stored, its text is written beside it
//!   (`<seq>.sending`); the turn's files go once the store has committed it. A crash between the
//!   two leaves the marker: at the next start [`Backlog::sending`] gives the text, and the
//!   pipeline looks for it in the transcript before storing it again.
//! - If the disk refuses (full, read-only), the turn is held in memory instead, and the status
//!   says so: it is still transcribed, but it would not survive a crash.

use serde::{Deserialize, Serialize};
use stagewhisper_core::audio::{BacklogStatus, Channel};
use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The folder under the data dir.
pub const DIR: &str = "audio-backlog";
/// Speech the backlog keeps at most before it drops the oldest: 30 minutes.
pub const MAX_SECONDS: f64 = 30.0 * 60.0;
/// The engines' sample rate (16 kHz mono).
const RATE: f64 = 16_000.0;
const MAGIC: &[u8] = b"STAGEWHISPER-TURN 1\n";
const TURN_EXT: &str = "turn";
const SENDING_EXT: &str = "sending";
/// The longest header accepted when reading a file back.
const MAX_META: u32 = 64 * 1024;

/// What is known of a turn besides its audio.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TurnMeta {
    /// Its place in the order of the transcript (grows across restarts).
    pub seq: u64,
    /// The call it belongs to.
    pub call_id: String,
    pub channel: Channel,
    /// The speaker as labelled when it was heard.
    pub speaker: String,
    /// Wall-clock time of its start and end (Unix milliseconds).
    pub started_at_ms: i64,
    pub ended_at_ms: i64,
    /// Its samples (16 kHz); 0 when only the text waits.
    pub samples: u64,
    /// Already recognised: it waits only for the turns before it.
    pub text: Option<String>,
    /// The engine failures met so far (for the log and the backoff).
    #[serde(default)]
    pub attempts: u32,
    /// The language its text was heard in (ISO-639-1), when the engine told it.
    #[serde(default)]
    pub language: Option<String>,
}

impl TurnMeta {
    pub fn seconds(&self) -> f64 {
        self.samples as f64 / RATE
    }
}

/// A turn with its audio.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    pub meta: TurnMeta,
    pub samples: Vec<i16>,
}

#[derive(Debug, thiserror::Error)]
pub enum BacklogError {
    #[error("cannot use the backlog folder {path}: {source}")]
    Dir { path: PathBuf, source: io::Error },
}

struct Entry {
    meta: TurnMeta,
    /// Held in memory: the disk refused it.
    memory: Option<Vec<i16>>,
    /// The text being stored (a `.sending` marker exists).
    sending: Option<String>,
}

#[derive(Default)]
struct State {
    entries: BTreeMap<u64, Entry>,
    dropped_seconds: f64,
    /// Why the last write failed, while turns are held in memory.
    disk_error: Option<String>,
}

/// The backlog of one data dir.
pub struct Backlog {
    dir: PathBuf,
    max_seconds: f64,
    state: Mutex<State>,
}

impl Backlog {
    /// Opens (creates) `<data_dir>/audio-backlog` and reads what a previous run left.
    pub fn open(data_dir: &Path) -> Result<Backlog, BacklogError> {
        Backlog::open_with(&data_dir.join(DIR), MAX_SECONDS)
    }

    /// A backlog in `dir` bounded to `max_seconds` of speech.
    pub fn open_with(dir: &Path, max_seconds: f64) -> Result<Backlog, BacklogError> {
        let err = |source| BacklogError::Dir {
            path: dir.to_path_buf(),
            source,
        };
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(err)?;
        let mut state = State::default();
        let mut markers = Vec::new();
        for e in std::fs::read_dir(dir).map_err(err)? {
            let path = e.map_err(err)?.path();
            let ext = path.extension().and_then(|x| x.to_str()).unwrap_or("");
            match ext {
                TURN_EXT => match read_meta(&path) {
                    Ok(meta) => {
                        state.entries.insert(
                            meta.seq,
                            Entry {
                                meta,
                                memory: None,
                                sending: None,
                            },
                        );
                    }
                    Err(e) => {
                        // Only a file this app did not write whole could be unreadable.
                        tracing::error!(path = %path.display(), error = %e, "unreadable backlog turn set aside");
                        let _ = std::fs::rename(&path, path.with_extension("unreadable"));
                    }
                },
                SENDING_EXT => markers.push(path),
                "tmp" => {
                    let _ = std::fs::remove_file(&path);
                }
                _ => {}
            }
        }
        for m in markers {
            let seq = seq_of(&m);
            match (
                seq.and_then(|s| state.entries.get_mut(&s)),
                std::fs::read(&m),
            ) {
                (Some(entry), Ok(bytes)) => {
                    entry.sending = serde_json::from_slice::<Sending>(&bytes)
                        .ok()
                        .map(|s| s.text);
                }
                _ => {
                    let _ = std::fs::remove_file(&m);
                }
            }
        }
        if !state.entries.is_empty() {
            tracing::info!(
                turns = state.entries.len(),
                "turns from a previous run wait to be transcribed"
            );
        }
        Ok(Backlog {
            dir: dir.to_path_buf(),
            max_seconds,
            state: Mutex::new(state),
        })
    }

    /// A backlog that cannot write (its folder could not be made): every turn is held in
    /// memory, and the status says so.
    pub fn in_memory() -> Backlog {
        Backlog {
            dir: PathBuf::from("/nonexistent/stagewhisper-audio-backlog"),
            max_seconds: MAX_SECONDS,
            state: Mutex::new(State::default()),
        }
    }

    fn path(&self, seq: u64, ext: &str) -> PathBuf {
        self.dir.join(format!("{seq:020}.{ext}"))
    }

    /// Keeps a turn (its audio, or only its text when `meta.text` is set and `samples` empty),
    /// durably unless the disk refuses (then in memory, and the status says so). Drops the
    /// oldest audio past the bound.
    pub fn push(&self, turn: Turn) {
        let Turn { mut meta, samples } = turn;
        meta.samples = samples.len() as u64;
        let written = write_turn(&self.dir, &self.path(meta.seq, TURN_EXT), &meta, &samples);
        let mut st = self.state.lock().unwrap();
        let memory = match written {
            Ok(()) => {
                st.disk_error = None;
                None
            }
            Err(e) => {
                tracing::error!(seq = meta.seq, error = %e, "cannot write a turn to the backlog: held in memory");
                st.disk_error = Some(e.to_string());
                Some(samples)
            }
        };
        let pushed = meta.seq;
        st.entries.insert(
            meta.seq,
            Entry {
                meta,
                memory,
                sending: None,
            },
        );
        // The bound: the oldest audio goes first (never the turn just kept).
        let mut total: f64 = st.entries.values().map(|e| e.meta.seconds()).sum();
        while total > self.max_seconds {
            let Some((&seq, _)) = st
                .entries
                .iter()
                .find(|(&s, e)| s != pushed && e.meta.samples > 0 && e.sending.is_none())
            else {
                break;
            };
            let e = st.entries.remove(&seq).expect("present");
            total -= e.meta.seconds();
            st.dropped_seconds += e.meta.seconds();
            tracing::warn!(
                seq,
                seconds = e.meta.seconds(),
                "backlog full: the oldest turn's audio was dropped"
            );
            let _ = std::fs::remove_file(self.path(seq, TURN_EXT));
        }
    }

    /// The oldest turn waiting (with its audio), and the text being stored when a previous
    /// attempt (or run) got as far as that.
    pub fn first(&self) -> Option<(Turn, Option<String>)> {
        let (meta, memory, sending) = {
            let st = self.state.lock().unwrap();
            let (_, e) = st.entries.iter().next()?;
            (e.meta.clone(), e.memory.clone(), e.sending.clone())
        };
        let samples = match memory {
            Some(s) => s,
            None if meta.samples == 0 => Vec::new(),
            None => match read_samples(&self.path(meta.seq, TURN_EXT), &meta) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!(seq = meta.seq, error = %e, "a backlog turn cannot be read back: dropped");
                    let mut st = self.state.lock().unwrap();
                    st.dropped_seconds += meta.seconds();
                    drop(st);
                    self.remove(meta.seq);
                    return self.first();
                }
            },
        };
        Some((Turn { meta, samples }, sending))
    }

    /// The lowest `seq` waiting.
    pub fn first_seq(&self) -> Option<u64> {
        self.state.lock().unwrap().entries.keys().next().copied()
    }

    /// The highest `seq` kept (a new run's turns come after it).
    pub fn last_seq(&self) -> Option<u64> {
        self.state
            .lock()
            .unwrap()
            .entries
            .keys()
            .next_back()
            .copied()
    }

    pub fn is_empty(&self) -> bool {
        self.state.lock().unwrap().entries.is_empty()
    }

    /// Counts one more engine failure of the turn (kept in memory: the count only paces the
    /// retries and the log).
    pub fn failed(&self, seq: u64) -> u32 {
        let mut st = self.state.lock().unwrap();
        match st.entries.get_mut(&seq) {
            Some(e) => {
                e.meta.attempts += 1;
                e.meta.attempts
            }
            None => 0,
        }
    }

    /// Writes down the text about to be stored for `seq` (fsynced), so a crash before
    /// [`Backlog::remove`] cannot store it twice.
    pub fn sending(&self, seq: u64, text: &str) -> io::Result<()> {
        let bytes = serde_json::to_vec(&Sending { text: text.into() }).expect("serializable");
        let has_file = {
            let st = self.state.lock().unwrap();
            st.entries.get(&seq).is_some_and(|e| e.memory.is_none())
        };
        if has_file {
            write_atomic(&self.dir, &self.path(seq, SENDING_EXT), &bytes)?;
        }
        if let Some(e) = self.state.lock().unwrap().entries.get_mut(&seq) {
            e.sending = Some(text.into());
        }
        Ok(())
    }

    /// The turn is stored (or given up): its files go.
    pub fn remove(&self, seq: u64) {
        self.state.lock().unwrap().entries.remove(&seq);
        let _ = std::fs::remove_file(self.path(seq, TURN_EXT));
        let _ = std::fs::remove_file(self.path(seq, SENDING_EXT));
        let _ = fsync_dir(&self.dir);
    }

    /// Drops every turn of a call (deleted: nothing of it may stay on disk).
    pub fn forget_call(&self, call_id: &str) -> usize {
        let seqs: Vec<u64> = {
            let st = self.state.lock().unwrap();
            st.entries
                .values()
                .filter(|e| e.meta.call_id == call_id)
                .map(|e| e.meta.seq)
                .collect()
        };
        for &s in &seqs {
            self.remove(s);
        }
        seqs.len()
    }

    pub fn status(&self) -> BacklogStatus {
        let st = self.state.lock().unwrap();
        BacklogStatus {
            turns: st.entries.len() as u64,
            seconds: round1(st.entries.values().map(|e| e.meta.seconds()).sum()),
            dropped_seconds: round1(st.dropped_seconds),
        }
    }

    /// Why turns are held in memory instead of on disk (the last write failed), if they are.
    pub fn disk_error(&self) -> Option<String> {
        self.state.lock().unwrap().disk_error.clone()
    }
}

fn round1(x: f64) -> f64 {
    // `+ 0.0`: an empty sum is -0.0.
    (x * 10.0).round() / 10.0 + 0.0
}

#[derive(Serialize, Deserialize)]
struct Sending {
    text: String,
}

fn seq_of(p: &Path) -> Option<u64> {
    p.file_stem()?.to_str()?.parse().ok()
}

fn fsync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Writes `bytes` to `path` through a temporary file: whole or not at all, fsynced.
fn write_atomic(dir: &Path, path: &Path, bytes: &[u8]) -> io::Result<()> {
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)?;
        fsync_dir(dir)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn write_turn(dir: &Path, path: &Path, meta: &TurnMeta, samples: &[i16]) -> io::Result<()> {
    let json = serde_json::to_vec(meta).expect("serializable");
    let mut bytes = Vec::with_capacity(MAGIC.len() + 4 + json.len() + samples.len() * 2);
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&(json.len() as u32).to_le_bytes());
    bytes.extend_from_slice(&json);
    for s in samples {
        bytes.extend_from_slice(&s.to_le_bytes());
    }
    write_atomic(dir, path, &bytes)
}

fn bad(why: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, why.to_string())
}

/// Reads a file's header; the reader is left at the first sample.
fn open_turn(path: &Path) -> io::Result<(TurnMeta, io::BufReader<File>, u64)> {
    let f = File::open(path)?;
    let len = f.metadata()?.len();
    let mut r = io::BufReader::new(f);
    let mut magic = [0u8; MAGIC.len()];
    r.read_exact(&mut magic)?;
    if magic != MAGIC {
        return Err(bad("not a backlog turn"));
    }
    let mut n = [0u8; 4];
    r.read_exact(&mut n)?;
    let n = u32::from_le_bytes(n);
    if n > MAX_META {
        return Err(bad("header too long"));
    }
    let mut json = vec![0u8; n as usize];
    r.read_exact(&mut json)?;
    let meta: TurnMeta = serde_json::from_slice(&json).map_err(|e| bad(&e.to_string()))?;
    let audio = len - (MAGIC.len() as u64 + 4 + n as u64);
    if audio != meta.samples * 2 {
        return Err(bad("its audio is not the length its header says"));
    }
    Ok((meta, r, audio))
}

fn read_meta(path: &Path) -> io::Result<TurnMeta> {
    let (meta, _, _) = open_turn(path)?;
    if seq_of(path) != Some(meta.seq) {
        return Err(bad("its name and its header disagree"));
    }
    Ok(meta)
}

fn read_samples(path: &Path, expect: &TurnMeta) -> io::Result<Vec<i16>> {
    let (meta, mut r, audio) = open_turn(path)?;
    if meta.seq != expect.seq {
        return Err(bad("another turn"));
    }
    let mut bytes = vec![0u8; audio as usize];
    r.read_exact(&mut bytes)?;
    Ok(bytes
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(seq: u64, seconds: f64, text: Option<&str>) -> Turn {
        let n = (seconds * RATE) as usize;
        Turn {
            meta: TurnMeta {
                seq,
                call_id: "call-1".into(),
                channel: Channel::Mic,
                speaker: "You".into(),
                started_at_ms: 1_000 * seq as i64,
                ended_at_ms: 1_000 * seq as i64 + 500,
                samples: 0,
                text: text.map(str::to_string),
                attempts: 0,
                language: None,
            },
            samples: (0..n).map(|i| (i % 1000) as i16 - 500).collect(),
        }
    }

    #[test]
    fn turns_survive_a_restart_in_order_with_their_audio() {
        let dir = tempfile::tempdir().unwrap();
        let b = Backlog::open(dir.path()).unwrap();
        let (t1, t2) = (turn(20, 1.5, None), turn(10, 0.75, None));
        b.push(t1.clone());
        b.push(t2.clone());
        b.push(Turn {
            samples: vec![],
            ..turn(30, 0.0, Some("already known"))
        });
        assert_eq!(
            b.status(),
            BacklogStatus {
                turns: 3,
                seconds: 2.3,
                dropped_seconds: 0.0
            }
        );
        drop(b);
        // A temporary file a crash left behind is cleaned up, not read.
        std::fs::write(dir.path().join(DIR).join("x.tmp"), b"half").unwrap();
        let b = Backlog::open(dir.path()).unwrap();
        assert!(!dir.path().join(DIR).join("x.tmp").exists());
        let (first, sending) = b.first().unwrap();
        assert_eq!(sending, None);
        assert_eq!(first.meta.seq, 10);
        assert_eq!(first.samples, t2.samples);
        assert_eq!(first.meta.samples, t2.samples.len() as u64);
        b.remove(10);
        assert_eq!(b.first().unwrap().0.samples, t1.samples);
        b.remove(20);
        let (last, _) = b.first().unwrap();
        assert_eq!(
            (last.meta.text.as_deref(), last.samples.len()),
            (Some("already known"), 0)
        );
        assert_eq!(b.last_seq(), Some(30));
        b.remove(30);
        assert!(b.is_empty() && b.first().is_none());
        let left: Vec<_> = std::fs::read_dir(dir.path().join(DIR)).unwrap().collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn past_the_bound_the_oldest_audio_is_dropped_and_counted() {
        let dir = tempfile::tempdir().unwrap();
        let b = Backlog::open_with(&dir.path().join("b"), 10.0).unwrap();
        for seq in 1..=4 {
            b.push(turn(seq, 3.0, None));
        }
        // 12 s kept against 10: the first turn (3 s) went.
        let s = b.status();
        assert_eq!((s.turns, s.seconds, s.dropped_seconds), (3, 9.0, 3.0));
        assert_eq!(b.first_seq(), Some(2));
        assert!(!dir
            .path()
            .join("b")
            .join(format!("{:020}.turn", 1))
            .exists());
        // Text-only turns cost nothing against the bound.
        b.push(Turn {
            samples: vec![],
            ..turn(5, 0.0, Some("hi"))
        });
        assert_eq!(b.status().turns, 4);
        // The count stays with the run that dropped them; a restart keeps the rest.
        drop(b);
        let b = Backlog::open_with(&dir.path().join("b"), 10.0).unwrap();
        assert_eq!(b.status().turns, 4);
        assert_eq!(b.status().dropped_seconds, 0.0);
    }

    #[test]
    fn a_crash_while_storing_leaves_the_text_being_stored() {
        let dir = tempfile::tempdir().unwrap();
        let b = Backlog::open(dir.path()).unwrap();
        b.push(turn(7, 0.5, None));
        b.sending(7, "the budget is fine").unwrap();
        drop(b);
        let b = Backlog::open(dir.path()).unwrap();
        let (t, sending) = b.first().unwrap();
        assert_eq!(
            (t.meta.seq, sending.as_deref()),
            (7, Some("the budget is fine"))
        );
        b.remove(7);
        drop(b);
        let b = Backlog::open(dir.path()).unwrap();
        assert!(b.is_empty());
    }

    #[test]
    fn a_damaged_file_is_set_aside_and_the_rest_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let b = Backlog::open(dir.path()).unwrap();
        b.push(turn(1, 0.5, None));
        b.push(turn(2, 0.5, None));
        drop(b);
        let p = dir.path().join(DIR).join(format!("{:020}.turn", 1));
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 10]).unwrap();
        let b = Backlog::open(dir.path()).unwrap();
        assert_eq!(b.first_seq(), Some(2));
        assert!(p.with_extension("unreadable").exists());
    }

    #[test]
    fn a_call_can_be_forgotten() {
        let dir = tempfile::tempdir().unwrap();
        let b = Backlog::open(dir.path()).unwrap();
        b.push(turn(1, 0.5, None));
        let mut other = turn(2, 0.5, None);
        other.meta.call_id = "call-2".into();
        b.push(other);
        assert_eq!(b.forget_call("call-1"), 1);
        assert_eq!(b.first_seq(), Some(2));
    }
}
