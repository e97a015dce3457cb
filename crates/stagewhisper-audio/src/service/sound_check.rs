//! `POST /api/audio/test`: records a few seconds of a channel and transcribes them with the
//! current engine (what Settings' sound check shows: the source used, the peak, the text).

use crate::capture::{self, Source};
use crate::pcm::Resampler;
use crate::pipeline::{engine_words, lower_first, Shared};
use stagewhisper_core::audio::{AudioError, AudioTestResult, Channel, SourceChoice};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `POST /api/audio/test`: records `seconds` of `channel` and transcribes them.
pub(super) fn record_and_transcribe(
    shared: &Arc<Shared>,
    channel: Channel,
    choice: &SourceChoice,
    src: Source,
    seconds: u32,
) -> Result<AudioTestResult, AudioError> {
    let stop = AtomicBool::new(false);
    let mut pcm: Vec<i16> = Vec::new();
    let mut resampler: Option<(u32, Resampler)> = None;
    let mut peak = 0f32;
    let mut recorded = 0f64;
    let mut used = src.name.clone();
    let mut down: Option<String> = None;
    let deadline = Instant::now() + Duration::from_secs(seconds as u64 + 5);
    let want = seconds as f64;
    capture::run(channel, choice, &stop, &mut |ev| {
        match ev {
            capture::Event::Opened(s) => used = s.name.clone(),
            capture::Event::Down(d) => down = Some(d.reason().to_string()),
            capture::Event::Audio { samples, rate } => {
                if resampler.as_ref().map(|(r, _)| *r) != Some(rate) {
                    if let Some((_, mut r)) = resampler.take() {
                        r.flush(&mut pcm);
                    }
                    resampler = Resampler::new(rate).ok().map(|r| (rate, r));
                }
                let take =
                    (((want - recorded) * rate as f64).ceil().max(0.0) as usize).min(samples.len());
                let part = &samples[..take];
                peak = part.iter().fold(peak, |m, s| m.max(s.abs()));
                if let Some((_, r)) = resampler.as_mut() {
                    r.push(part, &mut pcm);
                }
                recorded += take as f64 / rate as f64;
            }
        }
        if recorded >= want || Instant::now() >= deadline {
            stop.store(true, Ordering::SeqCst);
        }
    });
    if let Some((_, mut r)) = resampler.take() {
        r.flush(&mut pcm);
    }
    if recorded < want * 0.5 {
        return Err(AudioError {
            status: 503,
            code: "source_unavailable",
            message: format!(
                "Could not record from “{}”: {}.",
                src.description,
                down.unwrap_or_else(|| "it sent no audio".into())
            ),
        });
    }
    let text = shared
        .engine()
        .and_then(|e| {
            let mut u = e.begin()?;
            u.push(&pcm)?;
            u.finish()
        })
        .map_err(|e| {
            AudioError::engine(format!(
                "The speech engine: {}",
                lower_first(&engine_words(&e))
            ))
        })?;
    Ok(AudioTestResult {
        channel,
        source: used,
        seconds: (recorded * 10.0).round() / 10.0,
        peak: (peak.min(1.0) * 1000.0).round() / 1000.0,
        text: text.trim().to_string(),
    })
}
