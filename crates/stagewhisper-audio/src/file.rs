//! A recording → turns → an engine → segments `{start_ms, end_ms, speaker, text}`: what
//! `stagewhisper transcribe FILE` does, with the same turn-making as live listening.
//!
//! **Speakers of a file.** A call recorder that keeps the two sides apart writes them as the
//! two channels of a stereo file, and the app's own convention is that of call recorders: the
//! **left** channel is the microphone (**"You"**), the **right** one the call's other side
//! (**"Them"**); each is turned into turns on its own and the segments are merged in order of
//! their start. A stereo file whose channels carry the same signal (a mono recording saved as
//! stereo: their difference is more than 40 dB below the signal) is read as mono. A **mono**
//! file is the call's audio as heard, all of it **"Them"** (which side spoke cannot be told
//! from one channel). More than two channels are mixed down to mono.
//!
//! **Speakers** (`FileOptions::speakers`, `stagewhisper transcribe --speakers`): the call's
//! side (a mono file, or a stereo file's right channel) is told apart by voice: each turn's
//! speaker is `Speaker 1`, `Speaker 2`, … in order of first appearance (the left channel stays
//! "You"). The labels are decided over the whole file (a pass at its end), so the segments are
//! given out at the end rather than as they come.
//!
//! **Turns with no recognised text are left out** (the engine heard only noise or breath); the
//! [`FileReport`] counts them.
//!
//! The file is read twice, chunk by chunk (never whole in memory): a first pass checks it to
//! the end (a truncated file fails before anything is printed) and compares the channels, the
//! second one transcribes. Times count from the start of the file.

use crate::engine::{Engine, EngineError, EngineErrorKind, Utterance};
use crate::pcm::{PcmError, Resampler, WavSource};
use crate::turns::{TurnConfig, TurnEvent, TurnMaker};
use serde::Serialize;
use stagewhisper_core::audio::{DEFAULT_THEM, DEFAULT_YOU};
use stagewhisper_speakers::{default_name, Config as SpeakerConfig, Diarizer, Embedder};
use std::path::Path;
use std::sync::Arc;

/// One turn of the recording with its text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Segment {
    pub start_ms: u64,
    pub end_ms: u64,
    pub speaker: String,
    pub text: String,
    /// ISO-639-1 code of the text's language, when the engine tells it (Whisper).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    /// A language was forced and this turn was surely another (`language` is the one heard).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub language_mismatch: bool,
}

/// How a file's channels were read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// One signal (a mono file, a stereo one with identical channels, or more than two mixed).
    Mono,
    /// Left "You", right "Them".
    Stereo,
}

#[derive(Debug, Clone)]
pub struct FileOptions {
    pub turns: TurnConfig,
    /// The left channel's speaker (stereo).
    pub you_label: String,
    /// The right channel's speaker, and a mono file's.
    pub them_label: String,
    /// Tell the call's side's speakers apart with this speaker model.
    pub speakers: Option<Arc<Embedder>>,
}

impl Default for FileOptions {
    fn default() -> Self {
        FileOptions {
            turns: TurnConfig::default(),
            you_label: DEFAULT_YOU.into(),
            them_label: DEFAULT_THEM.into(),
            speakers: None,
        }
    }
}

/// What was done.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileReport {
    pub duration_ms: u64,
    pub layout: Layout,
    /// Segments given out.
    pub segments: usize,
    /// Turns the engine heard nothing in (left out).
    pub empty_turns: usize,
}

/// Why a file could not be transcribed.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("{0}")]
    Audio(#[from] PcmError),
    #[error("{0}")]
    Engine(#[from] EngineError),
}

impl FileError {
    /// A stable code: the audio's (`not_found`, `empty`, `not_audio`, `unsupported_format`,
    /// `truncated`, …) or `engine_<kind>` (`engine_unavailable`, `engine_down`, …).
    pub fn code(&self) -> &'static str {
        match self {
            FileError::Audio(e) => e.code(),
            FileError::Engine(e) => match e.kind {
                EngineErrorKind::Unavailable => "engine_unavailable",
                EngineErrorKind::Down => "engine_down",
                EngineErrorKind::Rejected => "engine_rejected",
                EngineErrorKind::Decode => "engine_decode",
            },
        }
    }
}

/// Frames read at a time: half a second at 48 kHz.
const CHUNK: usize = 24_000;

/// Checks the whole file and decides how its channels are read. Quick (no engine).
pub fn inspect(path: &Path) -> Result<(Layout, u64), FileError> {
    let mut src = WavSource::open(path)?;
    let duration = src.duration_ms();
    let mut chans = Vec::new();
    let (mut diff, mut sum) = (0f64, 0f64);
    loop {
        let n = src.read(CHUNK, &mut chans)?;
        if n == 0 {
            break;
        }
        if chans.len() == 2 {
            for (l, r) in chans[0].iter().zip(&chans[1]) {
                let (l, r) = (*l as f64, *r as f64);
                diff += (l - r) * (l - r);
                sum += (l + r) * (l + r) / 4.0;
            }
        }
    }
    let layout = if src.channels() == 2 && diff > sum * 1e-4 {
        Layout::Stereo
    } else {
        Layout::Mono
    };
    Ok((layout, duration))
}

/// A segment waiting to be given out: its track and, when speakers are told apart, its turn's
/// index in the track's [`Diarizer`].
type Done = (Segment, usize, Option<usize>);

/// One channel being turned into segments.
struct Track {
    speaker: String,
    resampler: Resampler,
    turns: TurnMaker,
    utterance: Option<Box<dyn Utterance>>,
    samples: Vec<i16>,
    events: Vec<TurnEvent>,
    /// Telling this channel's speakers apart: the diarizer and the open turn's audio.
    diarizer: Option<(Diarizer, Vec<i16>)>,
    labelled: usize,
}

impl Track {
    fn handle(
        &mut self,
        engine: &dyn Engine,
        done: &mut Vec<Done>,
        index: usize,
        empty: &mut usize,
    ) -> Result<(), EngineError> {
        for e in self.events.drain(..) {
            match e {
                TurnEvent::Start { .. } => self.utterance = Some(engine.begin()?),
                TurnEvent::Audio(a) => {
                    if let Some(u) = &mut self.utterance {
                        u.push(&a)?;
                        if let Some((_, audio)) = &mut self.diarizer {
                            audio.extend_from_slice(&a);
                        }
                    }
                }
                TurnEvent::End {
                    start_ms, end_ms, ..
                } => {
                    let Some(u) = self.utterance.take() else {
                        continue;
                    };
                    let heard = u.finish_heard()?;
                    let text = heard.text.trim();
                    let mut speaker = self.speaker.clone();
                    let mut turn = None;
                    if let Some((d, audio)) = &mut self.diarizer {
                        speaker = default_name(d.turn(audio).speaker);
                        audio.clear();
                        turn = Some(self.labelled);
                        self.labelled += 1;
                    }
                    if text.is_empty() {
                        *empty += 1;
                    } else {
                        done.push((
                            Segment {
                                start_ms,
                                end_ms,
                                speaker,
                                text: text.to_string(),
                                language: heard.language.clone(),
                                language_mismatch: heard.language_mismatch,
                            },
                            index,
                            turn,
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

/// Transcribes a WAV recording with `engine`, giving out each segment (`emit`) in order of
/// its start as soon as no earlier one can follow. Blocking.
pub fn transcribe_file(
    path: &Path,
    engine: &dyn Engine,
    opts: &FileOptions,
    mut emit: impl FnMut(Segment),
) -> Result<FileReport, FileError> {
    let (layout, duration_ms) = inspect(path)?;
    transcribe_inspected(path, layout, duration_ms, engine, opts, &mut emit)
}

/// [`transcribe_file`] after [`inspect`] (a caller that prints a header in between).
pub fn transcribe_inspected(
    path: &Path,
    layout: Layout,
    duration_ms: u64,
    engine: &dyn Engine,
    opts: &FileOptions,
    emit: &mut dyn FnMut(Segment),
) -> Result<FileReport, FileError> {
    let mut src = WavSource::open(path)?;
    let mut tracks = tracks(layout, opts, src.rate())?;
    let mut chans = Vec::new();
    let mut mono = Vec::new();
    let mut done: Vec<Done> = Vec::new();
    let mut report = FileReport {
        duration_ms,
        layout,
        segments: 0,
        empty_turns: 0,
    };
    let mut give_out = |done: &mut Vec<Done>, until: u64, report: &mut FileReport| {
        done.sort_by_key(|(s, i, _)| (s.start_ms, *i));
        let ready = done
            .iter()
            .take_while(|(s, _, _)| s.start_ms <= until)
            .count();
        for (s, _, _) in done.drain(..ready) {
            report.segments += 1;
            emit(s);
        }
    };
    loop {
        let n = src.read(CHUNK, &mut chans)?;
        if n == 0 {
            break;
        }
        for (i, t) in tracks.iter_mut().enumerate() {
            let input = track_input(layout, &chans, i, n, &mut mono);
            t.samples.clear();
            t.resampler.push(input, &mut t.samples);
            t.turns.push(&t.samples, &mut t.events);
            t.handle(engine, &mut done, i, &mut report.empty_turns)?;
        }
        let until = tracks
            .iter()
            .map(|t| t.turns.earliest_start_ms())
            .min()
            .unwrap_or(0);
        if opts.speakers.is_none() {
            give_out(&mut done, until.saturating_sub(1), &mut report);
        }
    }
    for (i, t) in tracks.iter_mut().enumerate() {
        t.samples.clear();
        t.resampler.flush(&mut t.samples);
        t.turns.push(&t.samples, &mut t.events);
        t.turns.finish(&mut t.events);
        t.handle(engine, &mut done, i, &mut report.empty_turns)?;
    }
    relabel(&mut tracks, &mut done);
    give_out(&mut done, u64::MAX, &mut report);
    Ok(report)
}

/// The end-of-file pass of each track that tells speakers apart: its segments take their
/// final labels, numbered again in order of first appearance.
fn relabel(tracks: &mut [Track], done: &mut [Done]) {
    done.sort_by_key(|(s, i, _)| (s.start_ms, *i));
    for (i, t) in tracks.iter_mut().enumerate() {
        let Some((d, _)) = &mut t.diarizer else {
            continue;
        };
        d.finish();
        let labels = d.labeller().labels();
        let mut order: Vec<usize> = Vec::new();
        for (s, _, turn) in done.iter_mut().filter(|(_, ti, _)| *ti == i) {
            if let Some(l) = turn.and_then(|k| labels.get(k)) {
                let n = order
                    .iter()
                    .position(|&o| o == l.speaker)
                    .unwrap_or_else(|| {
                        order.push(l.speaker);
                        order.len() - 1
                    });
                s.speaker = default_name(n);
            }
        }
    }
}

/// A track per speaker of the layout: "You" and "Them" for a stereo file, "Them" for a mono one.
fn tracks(layout: Layout, opts: &FileOptions, rate: u32) -> Result<Vec<Track>, PcmError> {
    let speakers = match layout {
        Layout::Stereo => vec![opts.you_label.clone(), opts.them_label.clone()],
        Layout::Mono => vec![opts.them_label.clone()],
    };
    let them = speakers.len() - 1;
    speakers
        .into_iter()
        .enumerate()
        .map(|(i, speaker)| {
            Ok(Track {
                speaker,
                resampler: Resampler::new(rate)?,
                turns: TurnMaker::new(opts.turns.clone()),
                utterance: None,
                samples: Vec::new(),
                events: Vec::new(),
                diarizer: opts.speakers.as_ref().filter(|_| i == them).map(|e| {
                    (
                        Diarizer::new(e.clone(), SpeakerConfig::default(), Vec::new()),
                        Vec::new(),
                    )
                }),
                labelled: 0,
            })
        })
        .collect()
}

/// The `n` samples of track `i` in a chunk read (`chans`, one per channel of the file): its own
/// channel of a stereo file, or the file's channels mixed down (into `mono`).
fn track_input<'a>(
    layout: Layout,
    chans: &'a [Vec<f32>],
    i: usize,
    n: usize,
    mono: &'a mut Vec<f32>,
) -> &'a [f32] {
    match layout {
        Layout::Stereo => &chans[i],
        Layout::Mono if chans.len() == 1 => &chans[0],
        Layout::Mono => {
            let k = 1.0 / chans.len() as f32;
            mono.clear();
            mono.extend((0..n).map(|j| chans.iter().map(|c| c[j]).sum::<f32>() * k));
            mono
        }
    }
}

/// How segments are written out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// One JSON object a line: `{"start_ms", "end_ms", "speaker", "text"}` (what
    /// `stagewhisper transcript replay` reads back).
    Jsonl,
    /// WebVTT with voice tags (`<v Them>…`).
    Vtt,
    /// `[h:mm:ss] Speaker: text` lines.
    Text,
}

impl Format {
    pub fn parse(s: &str) -> Option<Format> {
        match s {
            "jsonl" => Some(Format::Jsonl),
            "vtt" => Some(Format::Vtt),
            "text" | "txt" => Some(Format::Text),
            _ => None,
        }
    }

    /// What comes before the first segment (even when there is none).
    pub fn header(self) -> &'static str {
        match self {
            Format::Vtt => "WEBVTT\n\n",
            Format::Jsonl | Format::Text => "",
        }
    }

    /// One segment, with its line ending(s).
    pub fn render(self, s: &Segment) -> String {
        match self {
            Format::Jsonl => {
                let mut line = serde_json::to_string(s).expect("a segment serialises");
                line.push('\n');
                line
            }
            Format::Vtt => format!(
                "{} --> {}\n<v {}>{}\n\n",
                vtt_time(s.start_ms),
                vtt_time(s.end_ms),
                vtt_escape(&s.speaker),
                vtt_escape(&s.text)
            ),
            Format::Text => {
                let secs = s.start_ms / 1000;
                format!(
                    "[{}:{:02}:{:02}] {}: {}\n",
                    secs / 3600,
                    secs / 60 % 60,
                    secs % 60,
                    s.speaker,
                    s.text
                )
            }
        }
    }
}

fn vtt_time(ms: u64) -> String {
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}

fn vtt_escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, channels: u16, frame: impl Fn(usize) -> Vec<f32>) {
        let spec = hound::WavSpec {
            channels,
            sample_rate: 16_000,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        };
        let mut w = hound::WavWriter::create(path, spec).unwrap();
        for i in 0..16_000 {
            for x in frame(i) {
                w.write_sample(crate::pcm::to_i16(x)).unwrap();
            }
        }
        w.finalize().unwrap();
    }

    #[test]
    fn how_channels_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("x.wav");
        let a = |i: usize| (i as f32 * 0.05).sin() * 0.3;
        let b = |i: usize| (i as f32 * 0.011).sin() * 0.3;
        for (channels, frame, layout) in [
            (
                1,
                Box::new(move |i| vec![a(i)]) as Box<dyn Fn(usize) -> Vec<f32>>,
                Layout::Mono,
            ),
            (2, Box::new(move |i| vec![a(i), b(i)]), Layout::Stereo),
            // The same signal twice (give or take a rounding step): mono.
            (
                2,
                Box::new(move |i| vec![a(i), a(i) + 0.00003]),
                Layout::Mono,
            ),
            // One side silent: still two channels (only the left one speaks).
            (2, Box::new(move |i| vec![a(i), 0.0]), Layout::Stereo),
            (3, Box::new(move |i| vec![a(i), b(i), 0.0]), Layout::Mono),
        ] {
            write(&p, channels, frame);
            assert_eq!(inspect(&p).unwrap(), (layout, 1000), "{channels} channels");
        }
    }

    #[test]
    fn formats() {
        let s = Segment {
            start_ms: 3_723_045,
            end_ms: 3_725_500,
            speaker: "Them".into(),
            text: "a <b> & c".into(),
            language: None,
            language_mismatch: false,
        };
        assert_eq!(
            Format::Jsonl.render(&s),
            "{\"start_ms\":3723045,\"end_ms\":3725500,\"speaker\":\"Them\",\"text\":\"a <b> & c\"}\n"
        );
        assert_eq!(
            Format::Vtt.render(&s),
            "01:02:03.045 --> 01:02:05.500\n<v Them>a &lt;b&gt; &amp; c\n\n"
        );
        assert_eq!(Format::Text.render(&s), "[1:02:03] Them: a <b> & c\n");
        // What replay reads back: the same turns, speakers and times.
        use stagewhisper_core::transcript;
        for (f, tf) in [
            (Format::Vtt, transcript::Format::WebVtt),
            (Format::Jsonl, transcript::Format::Jsonl),
        ] {
            let doc = format!("{}{}", f.header(), f.render(&s));
            let cues = transcript::parse(&doc, tf).unwrap();
            assert_eq!(cues.len(), 1, "{f:?}");
            assert_eq!(cues[0].speaker.as_deref(), Some("Them"), "{f:?}");
            assert_eq!(cues[0].text, "a <b> & c", "{f:?}");
            assert_eq!(
                (cues[0].start_ms, cues[0].end_ms),
                (3_723_045, Some(3_725_500))
            );
        }
    }
}
