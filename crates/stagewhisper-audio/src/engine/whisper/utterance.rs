//! One turn with Whisper: `push` keeps the audio, `partial` decodes the audio so far in the
//! background (one decode at a time, never blocking), `finish` decodes the whole turn on the
//! caller's thread after aborting a partial still running.

use super::decode::{decode, Decoded, Model};
use super::WhisperConfig;
use crate::engine::{EngineError, Heard, Utterance};
use crate::pcm::RATE;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

type Answer = Result<Option<Decoded>, EngineError>;

/// A partial decode running.
struct Job {
    rx: mpsc::Receiver<Answer>,
    abort: Arc<AtomicBool>,
    started: Instant,
}

pub(super) struct WhisperUtterance {
    model: Arc<Model>,
    cfg: Arc<WhisperConfig>,
    samples: Vec<i16>,
    job: Option<Job>,
    /// When the last partial decode started, and what it cost.
    last_start: Option<Instant>,
    last_cost: Duration,
    /// The audio the last partial decode had.
    last_len: usize,
    latest: Option<String>,
    /// Partials stopped for this turn (one failed, or no thread could start).
    partials_off: bool,
}

impl WhisperUtterance {
    pub fn new(model: Arc<Model>, cfg: Arc<WhisperConfig>) -> WhisperUtterance {
        WhisperUtterance {
            partials_off: !cfg.partials.enabled,
            model,
            cfg,
            samples: Vec::new(),
            job: None,
            last_start: None,
            last_cost: Duration::ZERO,
            last_len: 0,
            latest: None,
        }
    }

    /// Takes the answer of a partial decode that has finished.
    fn collect(&mut self) {
        let Some(job) = &self.job else { return };
        match job.rx.try_recv() {
            Ok(answer) => {
                self.last_cost = job.started.elapsed();
                self.job = None;
                match answer {
                    Ok(Some(d)) if !d.text.is_empty() => self.latest = Some(d.text),
                    Ok(_) => {}
                    Err(e) => {
                        tracing::debug!(error = %e, "a Whisper partial failed: no more partials this turn");
                        self.partials_off = true;
                    }
                }
            }
            Err(mpsc::TryRecvError::Empty) => {}
            Err(mpsc::TryRecvError::Disconnected) => {
                self.job = None;
                self.partials_off = true;
            }
        }
    }

    /// Whether a partial decode is due now.
    fn due(&self) -> bool {
        let p = &self.cfg.partials;
        let min = (p.min_audio.as_secs_f64() * RATE as f64) as usize;
        if self.partials_off || self.job.is_some() || self.samples.len() < min {
            return false;
        }
        // Nothing new worth a decode (less than half a second more).
        if self.samples.len() < self.last_len + RATE as usize / 2 {
            return false;
        }
        let gap = p
            .interval
            .max(self.last_cost.div_f64(p.max_cpu_share.clamp(0.05, 1.0)));
        self.last_start.is_none_or(|t| t.elapsed() >= gap)
    }

    fn start_partial(&mut self) {
        let (tx, rx) = mpsc::sync_channel(1);
        let abort = Arc::new(AtomicBool::new(false));
        let (model, flag, audio) = (self.model.clone(), abort.clone(), self.samples.clone());
        let opts = self.cfg.options(self.cfg.partial_threads);
        let spawned = std::thread::Builder::new()
            .name("sw-whisper-partial".into())
            .spawn(move || {
                let _ = tx.send(decode(&model, &opts, &audio, Some(flag)));
            });
        if spawned.is_err() {
            self.partials_off = true;
            return;
        }
        self.last_start = Some(Instant::now());
        self.last_len = self.samples.len();
        self.job = Some(Job {
            rx,
            abort,
            started: Instant::now(),
        });
    }

    fn abort_partial(&mut self) {
        if let Some(job) = self.job.take() {
            job.abort.store(true, Ordering::Relaxed);
        }
    }
}

impl Utterance for WhisperUtterance {
    fn push(&mut self, samples: &[i16]) -> Result<(), EngineError> {
        self.samples.extend_from_slice(samples);
        Ok(())
    }

    fn partial(&mut self) -> Option<String> {
        self.collect();
        if self.due() {
            self.start_partial();
        }
        self.latest.clone()
    }

    fn finish(self: Box<Self>) -> Result<String, EngineError> {
        self.finish_heard().map(|h| h.text)
    }

    fn finish_heard(mut self: Box<Self>) -> Result<Heard, EngineError> {
        self.abort_partial();
        if self.samples.is_empty() {
            return Ok(Heard::default());
        }
        let opts = self.cfg.options(self.cfg.threads);
        let d = decode(&self.model, &opts, &self.samples, None)?
            .expect("a decode without an abort flag always answers");
        let said = !d.text.is_empty();
        Ok(Heard {
            language: d.language.filter(|_| said),
            text: d.text,
            language_mismatch: d.language_mismatch && said,
        })
    }
}

impl Drop for WhisperUtterance {
    fn drop(&mut self) {
        self.abort_partial();
    }
}
