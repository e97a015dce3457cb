//! One process per data dir.
//!
//! Dedupe by `message_id`, the event cursors and the rules' state live in the memory of the one
//! process that owns the database; a second process on the same data dir would store a retried
//! message twice and hand out the same cursor twice. So the app holds an exclusive OS advisory
//! lock on [`LOCK_FILE`] in the data dir for as long as it runs, taken before anything else in
//! the dir is read or written. A second start fails at once with
//! [`LockError::AlreadyRunning`] and touches nothing.
//!
//! The lock belongs to the open file, not to the file's contents: it goes away with the
//! process however it ends (a crash or `kill -9` included), so a stale lock file never blocks a
//! start. The file records the holder's pid for the refusal message only; it is emptied on a
//! clean release and never deleted (deleting it would let two processes lock two different
//! files of the same name).

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The lock file in the data dir.
pub const LOCK_FILE: &str = "stagewhisper.lock";

/// How long a refused start waits for the holder to have written its pid (it writes it right
/// after taking the lock).
const PID_WAIT: Duration = Duration::from_millis(200);

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "StageWhisper is already running (pid {}) on the data dir {}; stop it first or pass another --data-dir",
        pid.map_or_else(|| "unknown".to_string(), |p| p.to_string()),
        dir.display()
    )]
    AlreadyRunning { dir: PathBuf, pid: Option<u32> },
    #[error("cannot lock the data dir ({path}): {source}")]
    Io { path: PathBuf, source: io::Error },
}

/// The held lock; released when dropped (and by the OS when the process ends).
#[derive(Debug)]
pub struct DataDirLock {
    file: File,
    path: PathBuf,
}

impl DataDirLock {
    /// Takes the data dir's lock without waiting. The dir must exist. On
    /// [`LockError::AlreadyRunning`] nothing in the dir was changed.
    pub fn acquire(dir: &Path) -> Result<DataDirLock, LockError> {
        let path = dir.join(LOCK_FILE);
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        let mut opts = OpenOptions::new();
        // Never truncate on open: the file may be another process's, still locked.
        opts.read(true).write(true).create(true).truncate(false);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut file = opts.open(&path).map_err(io)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                return Err(LockError::AlreadyRunning {
                    dir: dir.to_path_buf(),
                    pid: read_holder_pid(&mut file),
                })
            }
            Err(TryLockError::Error(e)) => return Err(io(e)),
        }
        // Ours now: record who holds it.
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        file.write_all(format!("{}\n", std::process::id()).as_bytes())
            .map_err(io)?;
        Ok(DataDirLock { file, path })
    }

    /// The lock file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for DataDirLock {
    fn drop(&mut self) {
        // Still held here: nobody else can be writing it. Closing the file releases the lock.
        let _ = self.file.set_len(0);
        let _ = self.file.unlock();
    }
}

/// The pid the holder wrote, waiting briefly for a holder that has just taken the lock.
/// `None` when it cannot be read (some systems refuse reads of a locked file).
fn read_holder_pid(file: &mut File) -> Option<u32> {
    let deadline = Instant::now() + PID_WAIT;
    loop {
        let mut text = String::new();
        let read = file
            .seek(SeekFrom::Start(0))
            .and_then(|_| file.read_to_string(&mut text));
        match read {
            Ok(_) => {
                if let Ok(pid) = text.trim().parse() {
                    return Some(pid);
                }
            }
            Err(_) => return None,
        }
        if Instant::now() >= deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn contents(dir: &Path) -> String {
        std::fs::read_to_string(dir.join(LOCK_FILE)).unwrap()
    }

    #[test]
    fn a_second_lock_is_refused_with_the_holders_pid_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let held = DataDirLock::acquire(dir.path()).unwrap();
        assert_eq!(held.path(), dir.path().join(LOCK_FILE));
        let me = std::process::id();
        assert_eq!(contents(dir.path()), format!("{me}\n"));
        let before = std::fs::metadata(held.path()).unwrap().modified().unwrap();

        // Another open of the same file (as another process would do) is refused.
        let err = DataDirLock::acquire(dir.path()).unwrap_err();
        match &err {
            LockError::AlreadyRunning { dir: d, pid } => {
                assert_eq!(d, dir.path());
                assert_eq!(*pid, Some(me));
            }
            other => panic!("expected AlreadyRunning, got {other:?}"),
        }
        let msg = err.to_string();
        assert!(
            msg.contains(&format!("already running (pid {me})")),
            "{msg}"
        );
        assert_eq!(contents(dir.path()), format!("{me}\n"), "the refusal wrote");
        let after = std::fs::metadata(held.path()).unwrap().modified().unwrap();
        assert_eq!(before, after, "the refusal touched the lock file");

        // Released on drop: the next one gets it.
        drop(held);
        assert_eq!(contents(dir.path()), "", "a clean release empties the pid");
        let again = DataDirLock::acquire(dir.path()).unwrap();
        assert_eq!(contents(dir.path()), format!("{me}\n"));
        drop(again);
    }

    #[test]
    fn a_stale_lock_file_does_not_block_and_gets_the_new_pid() {
        let dir = tempfile::tempdir().unwrap();
        // What a killed holder leaves behind: its pid, no lock.
        std::fs::write(dir.path().join(LOCK_FILE), "4194999\nleft over\n").unwrap();
        let held = DataDirLock::acquire(dir.path()).unwrap();
        assert_eq!(contents(dir.path()), format!("{}\n", std::process::id()));
        drop(held);
    }

    #[test]
    fn an_unreadable_pid_is_reported_as_unknown() {
        let err = LockError::AlreadyRunning {
            dir: PathBuf::from("/data"),
            pid: None,
        };
        assert!(
            err.to_string().contains("already running (pid unknown)"),
            "{err}"
        );
    }

    #[test]
    fn a_missing_dir_is_an_io_error() {
        let dir = tempfile::tempdir().unwrap();
        let err = DataDirLock::acquire(&dir.path().join("absent")).unwrap_err();
        assert!(matches!(err, LockError::Io { .. }), "{err:?}");
    }

    #[cfg(unix)]
    #[test]
    fn the_lock_file_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let held = DataDirLock::acquire(dir.path()).unwrap();
        let mode = std::fs::metadata(held.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{mode:o}");
    }
}
