//! One model download, blocking (run it on a thread of its own, never on the async workers).
//! Its requests go out through the app's shared HTTP set-up (`stagewhisper_core::net::http`:
//! the app's TLS roots, no proxy, the timeouts below; redirects followed, as download hosts
//! send them to their storage) on the runtime the blocking callers share
//! (`stagewhisper_core::net::blocking`).
//!
//! - The bytes go to `<file>.part` beside the target, locked for the download's time (a second
//!   download of the same file, in the app or the command line, is `download_in_progress`).
//! - Resume: a part file from an interrupted download (the server dropped the connection, the
//!   app stopped) is continued with `Range: bytes=<len>-`; a server that answers the whole file
//!   (`200`) starts it again. The SHA-256 is computed as the bytes arrive (the part's existing
//!   bytes are read once when resuming).
//! - A broken connection is retried ([`Options::retries`] times in a row without progress, the
//!   wait doubling from [`Options::backoff`]); `408`, `429` and `5xx` too. Other refusals are
//!   final (`server_refused`).
//! - Once every byte is there, the SHA-256 is checked against the catalogue's: a mismatch
//!   removes the part file (`checksum_mismatch`); a match is synced and renamed into place.
//! - Free space is checked before starting (`disk_full`); a write that finds the disk full
//!   removes the part file (the app's database lives on the same disk) and says `disk_full`.
//! - [`Stop::cancel`] removes the part file; [`Stop::interrupt`] keeps it for a resume.

use super::{check_space, disk_full, mib, CatalogEntry, ModelError};
use sha2::{Digest, Sha256};
use stagewhisper_core::models::{state, DownloadView};
use stagewhisper_core::net::{blocking, http as nethttp};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::{Duration, Instant};

/// How a download is asked to stop.
#[derive(Debug, Default)]
pub struct Stop(AtomicU8);

const RUN: u8 = 0;
const CANCEL: u8 = 1;
const INTERRUPT: u8 = 2;

impl Stop {
    /// The person cancelled: the part file is removed.
    pub fn cancel(&self) {
        self.0.store(CANCEL, Ordering::SeqCst);
    }

    /// The app is stopping: the part file is kept for a resume.
    pub fn interrupt(&self) {
        let _ = self
            .0
            .compare_exchange(RUN, INTERRUPT, Ordering::SeqCst, Ordering::SeqCst);
    }

    fn get(&self) -> u8 {
        self.0.load(Ordering::SeqCst)
    }

    fn error(&self) -> Option<ModelError> {
        match self.get() {
            CANCEL => Some(ModelError::new(
                409,
                "cancelled",
                "the download was cancelled",
            )),
            INTERRUPT => Some(ModelError::new(
                503,
                "interrupted",
                "the download was interrupted; it resumes where it stopped",
            )),
            _ => None,
        }
    }
}

/// Timing of a download.
#[derive(Debug, Clone)]
pub struct Options {
    pub connect_timeout: Duration,
    /// A connection that sends nothing for this long is broken.
    pub read_timeout: Duration,
    /// Failed attempts in a row (without a byte of progress) before giving up.
    pub retries: u32,
    /// The first wait before a new attempt (doubling).
    pub backoff: Duration,
    /// Progress is reported at most this often.
    pub progress_interval: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            connect_timeout: Duration::from_secs(15),
            read_timeout: Duration::from_secs(30),
            retries: 4,
            backoff: Duration::from_millis(500),
            progress_interval: Duration::from_millis(250),
        }
    }
}

/// The part file of a target.
pub fn part_path(target: &Path) -> PathBuf {
    let mut s = target.as_os_str().to_os_string();
    s.push(".part");
    PathBuf::from(s)
}

/// Why an attempt ended without the whole file.
enum Attempt {
    /// Try again (a broken connection, a busy server).
    Retry(ModelError),
    Fatal(ModelError),
}

/// Where the download stands (the part file and what is known of its bytes).
struct Part {
    file: File,
    have: u64,
    hasher: Sha256,
    total: u64,
    last_report: Option<Instant>,
}

impl Part {
    fn view(&self, state: &str) -> DownloadView {
        DownloadView {
            state: state.into(),
            done: self.have,
            total: self.total,
            error: None,
            message: None,
        }
    }

    /// Starts the file again from nothing.
    fn restart(&mut self) -> Result<(), ModelError> {
        self.file.set_len(0).map_err(write_error)?;
        self.file.seek(SeekFrom::Start(0)).map_err(write_error)?;
        self.have = 0;
        self.hasher = Sha256::new();
        Ok(())
    }

    fn write(&mut self, bytes: &[u8]) -> Result<(), ModelError> {
        self.file.write_all(bytes).map_err(write_error)?;
        self.hasher.update(bytes);
        self.have += bytes.len() as u64;
        Ok(())
    }
}

fn write_error(e: std::io::Error) -> ModelError {
    if e.kind() == std::io::ErrorKind::StorageFull {
        disk_full("the disk is full: the download was stopped and its part file removed")
    } else {
        ModelError::new(
            500,
            "write_failed",
            format!("cannot write the model file: {e}"),
        )
    }
}

/// Downloads `entry` into `dir` (see the module docs); `progress` hears the state as it goes.
/// Answers the installed file's path.
pub fn download(
    entry: &CatalogEntry,
    dir: &Path,
    stop: &Stop,
    opts: &Options,
    progress: &mut dyn FnMut(&DownloadView),
) -> Result<PathBuf, ModelError> {
    std::fs::create_dir_all(dir).map_err(write_error)?;
    let target = dir.join(&entry.file);
    let part_file = part_path(&target);
    let file = OpenOptions::new()
        .create(true)
        .truncate(false)
        .read(true)
        .write(true)
        .open(&part_file)
        .map_err(write_error)?;
    if file.try_lock().is_err() {
        return Err(ModelError::new(
            409,
            "download_in_progress",
            format!("{} is already being downloaded", entry.name),
        ));
    }
    match fetch_all(entry, dir, file, stop, opts, progress) {
        Ok(part) => {
            part.file.sync_all().map_err(write_error)?;
            std::fs::rename(&part_file, &target).map_err(write_error)?;
            if let Ok(d) = File::open(dir) {
                let _ = d.sync_all();
            }
            progress(&part.view(state::DONE));
            Ok(target)
        }
        Err(e) => {
            // What is worth nothing is removed: a part to throw away, or one with no byte yet
            // (not another process's: that one is locked and still running).
            let empty = std::fs::metadata(&part_file).is_ok_and(|m| m.len() == 0);
            if matches!(e.code, "cancelled" | "checksum_mismatch" | "disk_full")
                || (empty && e.code != "download_in_progress")
            {
                let _ = std::fs::remove_file(&part_file);
            }
            Err(e)
        }
    }
}

/// Every byte into the part file, then the checksum; the part (still locked) when it matches.
fn fetch_all(
    entry: &CatalogEntry,
    dir: &Path,
    file: File,
    stop: &Stop,
    opts: &Options,
    progress: &mut dyn FnMut(&DownloadView),
) -> Result<Part, ModelError> {
    let mut part = Part {
        have: file.metadata().map_err(write_error)?.len(),
        file,
        hasher: Sha256::new(),
        total: entry.size,
        last_report: None,
    };
    if part.have > entry.size {
        part.restart()?;
    }
    check_space(dir, entry.size - part.have)?;
    hash_existing(&mut part)?;
    let client = nethttp::https_builder(opts.connect_timeout)
        .redirect(reqwest::redirect::Policy::limited(10))
        .read_timeout(opts.read_timeout)
        .user_agent(concat!("stagewhisper/", env!("CARGO_PKG_VERSION")))
        .build()
        .map_err(|e| ModelError::new(500, "download_failed", e.to_string()))?;
    progress(&part.view(state::DOWNLOADING));
    let (mut failures, mut attempts) = (0u32, 0u32);
    while part.have < entry.size {
        let before = part.have;
        attempts += 1;
        let outcome = blocking::block_on(attempt(&client, entry, &mut part, stop, opts, progress))
            .map_err(|e| ModelError::new(500, "download_failed", e.to_string()))?;
        match outcome {
            Ok(()) => failures = 0,
            Err(Attempt::Fatal(e)) => return Err(e),
            Err(Attempt::Retry(e)) => {
                // No connection at all on the first try: there is no network; say so at once.
                if attempts == 1 && part.have == before && e.code == "network_unavailable" {
                    return Err(e);
                }
                failures = if part.have > before { 1 } else { failures + 1 };
                if failures > opts.retries {
                    return Err(e);
                }
                tracing::info!(model = %entry.name, error = %e, "model download: trying again");
                wait(stop, opts.backoff * 2u32.pow(failures - 1))?;
            }
        }
        if let Some(e) = stop.error() {
            return Err(e);
        }
    }
    progress(&part.view(state::VERIFYING));
    let digest = hex::encode(std::mem::take(&mut part.hasher).finalize());
    if digest != entry.sha256 {
        return Err(ModelError::new(
            502,
            "checksum_mismatch",
            format!(
                "the downloaded file is not the expected {} (its SHA-256 differs): it was removed",
                entry.name
            ),
        ));
    }
    Ok(part)
}

/// The SHA-256 of the bytes a resumed part already has; positions the file at its end.
fn hash_existing(part: &mut Part) -> Result<(), ModelError> {
    part.file.seek(SeekFrom::Start(0)).map_err(write_error)?;
    let mut buf = vec![0u8; 1 << 20];
    let mut left = part.have;
    while left > 0 {
        let n = part.file.read(&mut buf).map_err(write_error)?;
        if n == 0 {
            break;
        }
        let n = n.min(left as usize);
        part.hasher.update(&buf[..n]);
        left -= n as u64;
    }
    part.file
        .seek(SeekFrom::Start(part.have))
        .map_err(write_error)?;
    Ok(())
}

/// Sleeps, waking early (with its error) when asked to stop.
fn wait(stop: &Stop, d: Duration) -> Result<(), ModelError> {
    let until = Instant::now() + d;
    while Instant::now() < until {
        if let Some(e) = stop.error() {
            return Err(e);
        }
        std::thread::sleep(Duration::from_millis(50).min(until - Instant::now()));
    }
    Ok(())
}

fn host(url: &str) -> String {
    reqwest::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(str::to_string))
        .unwrap_or_default()
}

/// A request that failed before an answer.
fn send_error(e: &reqwest::Error, url: &str, opts: &Options) -> Attempt {
    match nethttp::connect_error(e, opts.connect_timeout) {
        Some(c) => Attempt::Retry(ModelError::new(
            503,
            "network_unavailable",
            format!("cannot reach {}: {c}", host(url)),
        )),
        None => Attempt::Retry(broken(e)),
    }
}

fn broken(e: &reqwest::Error) -> ModelError {
    ModelError::new(
        502,
        "download_failed",
        format!(
            "the connection broke during the download: {}",
            nethttp::cause(e)
        ),
    )
}

/// One request: from the part's end to the file's end (or as far as the connection lasts).
async fn attempt(
    client: &reqwest::Client,
    entry: &CatalogEntry,
    part: &mut Part,
    stop: &Stop,
    opts: &Options,
    progress: &mut dyn FnMut(&DownloadView),
) -> Result<(), Attempt> {
    let mut req = client.get(&entry.url);
    if part.have > 0 {
        req = req.header(reqwest::header::RANGE, format!("bytes={}-", part.have));
    }
    let mut resp = until_stopped(stop, req.send())
        .await?
        .map_err(|e| send_error(&e, &entry.url, opts))?;
    if resp.status() == reqwest::StatusCode::RANGE_NOT_SATISFIABLE {
        // The part is as long as (or longer than) the file: start again from nothing.
        part.restart().map_err(Attempt::Fatal)?;
        return Err(Attempt::Retry(ModelError::new(
            502,
            "download_failed",
            "the server did not accept the resume; starting again",
        )));
    }
    check_answer(&resp, entry, part)?;
    if resp.status() == reqwest::StatusCode::OK && part.have > 0 {
        part.restart().map_err(Attempt::Fatal)?;
    }
    loop {
        let chunk = match until_stopped(stop, resp.chunk()).await? {
            Ok(Some(c)) => c,
            Ok(None) => break,
            Err(e) => return Err(Attempt::Retry(broken(&e))),
        };
        if part.have + chunk.len() as u64 > entry.size {
            return Err(Attempt::Fatal(size_mismatch(entry, "more")));
        }
        part.write(&chunk).map_err(Attempt::Fatal)?;
        if part
            .last_report
            .is_none_or(|t| t.elapsed() >= opts.progress_interval)
        {
            part.last_report = Some(Instant::now());
            progress(&part.view(state::DOWNLOADING));
        }
    }
    if part.have < entry.size {
        return Err(Attempt::Retry(ModelError::new(
            502,
            "download_failed",
            "the server closed the connection before the end of the file",
        )));
    }
    Ok(())
}

/// Runs `fut`, giving up (with the stop's error) when asked to stop.
async fn until_stopped<T>(
    stop: &Stop,
    fut: impl std::future::Future<Output = T>,
) -> Result<T, Attempt> {
    tokio::pin!(fut);
    loop {
        // Checked before each wait too: a server that never pauses 100 ms must not outrun it.
        if let Some(e) = stop.error() {
            return Err(Attempt::Fatal(e));
        }
        tokio::select! {
            v = &mut fut => return Ok(v),
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
        }
    }
}

fn size_mismatch(entry: &CatalogEntry, what: &str) -> ModelError {
    ModelError::new(
        502,
        "checksum_mismatch",
        format!(
            "the server's file is {what} than the expected {} ({}): it was removed",
            entry.name,
            mib(entry.size)
        ),
    )
}

/// The answer's status and range against what was asked.
fn check_answer(
    resp: &reqwest::Response,
    entry: &CatalogEntry,
    part: &Part,
) -> Result<(), Attempt> {
    let status = resp.status();
    match status.as_u16() {
        200 => match resp.content_length() {
            Some(n) if n != entry.size => Err(Attempt::Fatal(size_mismatch(
                entry,
                if n > entry.size { "larger" } else { "smaller" },
            ))),
            _ => Ok(()),
        },
        206 => {
            let start = resp
                .headers()
                .get(reqwest::header::CONTENT_RANGE)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.strip_prefix("bytes "))
                .and_then(|v| v.split('-').next())
                .and_then(|v| v.parse::<u64>().ok());
            if start == Some(part.have) {
                Ok(())
            } else {
                Err(Attempt::Fatal(ModelError::new(
                    502,
                    "server_refused",
                    "the server answered another part of the file than the one asked for",
                )))
            }
        }
        s => {
            let e = ModelError::new(
                502,
                "server_refused",
                format!("{} refused the download: HTTP {status}", host(&entry.url)),
            );
            if s == 408 || s == 429 || s >= 500 {
                Err(Attempt::Retry(e))
            } else {
                Err(Attempt::Fatal(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_is_seen_even_when_the_bytes_never_pause() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let stop = Stop::default();
        assert!(matches!(
            rt.block_on(until_stopped(&stop, async { 7 })),
            Ok(7)
        ));
        // A server whose bytes are always ready: the cancel is still seen before the next read.
        stop.cancel();
        let r = rt.block_on(until_stopped(&stop, async { 7 }));
        assert!(matches!(r, Err(Attempt::Fatal(e)) if e.code == "cancelled"));
        // An interrupt after a cancel stays a cancel (the part file is removed).
        stop.interrupt();
        assert_eq!(stop.error().unwrap().code, "cancelled");
        let s = Stop::default();
        s.interrupt();
        assert_eq!(s.error().unwrap().code, "interrupted");
    }

    #[test]
    fn the_part_file_is_beside_the_target() {
        assert_eq!(
            part_path(Path::new("/d/models/ggml-tiny.en.bin")),
            PathBuf::from("/d/models/ggml-tiny.en.bin.part")
        );
    }
}
