//! Samples: the engines' format, WAV in and out, and resampling to it.
//!
//! Every engine takes 16 kHz mono signed 16-bit samples ([`RATE`]); capture and recordings come
//! at whatever rate the device or file has, and [`Resampler`] brings them there as they come
//! (an FFT resampler in fixed input chunks of about 20 ms, so its delay stays small).
//! [`WavSource`] reads a WAV recording chunk by chunk (any rate, any channel count, 8/16/24/32-bit
//! integer or 32-bit float), so an hour-long file never sits whole in memory; [`wav_bytes`] and
//! [`write_wav`] write the engines' format (an upload to a transcription server, a turn kept on
//! disk while the engine is down).

use rubato::audioadapter_buffers::direct::InterleavedSlice;
use rubato::{Fft, FixedSync, Indexing, Resampler as _};
use std::fs::File;
use std::io::{self, BufReader, Read};
use std::path::Path;

/// The engines' sample rate: 16 kHz, mono, `i16`.
pub const RATE: u32 = 16_000;

/// Sample rates a recording or a device may have (outside: refused as unsupported).
pub const MIN_INPUT_RATE: u32 = 4_000;
pub const MAX_INPUT_RATE: u32 = 384_000;

/// Why audio could not be read or converted. [`PcmError::code`] is stable (the CLI prints it).
#[derive(Debug, thiserror::Error)]
pub enum PcmError {
    #[error("no such file")]
    NotFound,
    #[error("cannot read it: {0}")]
    Unreadable(io::Error),
    #[error("the file is empty")]
    Empty,
    #[error("the recording has no samples")]
    NoSamples,
    #[error("not an audio file{0}")]
    NotAudio(String),
    #[error("{0}")]
    Unsupported(String),
    #[error("the recording is cut short: its header announces more audio than the file holds")]
    Truncated,
    #[error("cannot write the WAV file: {0}")]
    Write(String),
}

impl PcmError {
    /// A stable code for the kind of problem.
    pub fn code(&self) -> &'static str {
        match self {
            PcmError::NotFound => "not_found",
            PcmError::Unreadable(_) => "unreadable",
            PcmError::Empty | PcmError::NoSamples => "empty",
            PcmError::NotAudio(_) => "not_audio",
            PcmError::Unsupported(_) => "unsupported_format",
            PcmError::Truncated => "truncated",
            PcmError::Write(_) => "write_failed",
        }
    }
}

/// A float sample (−1…1) as the engines' `i16` (clamped, rounded).
pub fn to_i16(x: f32) -> i16 {
    (x * 32768.0).round().clamp(-32768.0, 32767.0) as i16
}

/// Chunk of input the FFT resampler takes at once: about 20 ms.
fn chunk_for(rate: u32) -> usize {
    (rate as usize / 50).max(64)
}

/// A streaming resampler from one rate to [`RATE`], mono: `f32` in, `i16` out. At 16 kHz it
/// only converts. Deterministic: the same input gives the same output whatever the chunking.
pub struct Resampler {
    inner: Option<Stream>,
}

struct Stream {
    fft: Box<Fft<f32>>,
    pending: Vec<f32>,
    out_buf: Vec<f32>,
    /// Output frames still to drop at the start (the resampler's delay).
    delay_left: usize,
    total_in: u64,
    total_out: u64,
    ratio: f64,
}

impl Resampler {
    /// From `from_rate` to 16 kHz.
    pub fn new(from_rate: u32) -> Result<Resampler, PcmError> {
        if !(MIN_INPUT_RATE..=MAX_INPUT_RATE).contains(&from_rate) {
            return Err(PcmError::Unsupported(format!(
                "a sample rate of {from_rate} Hz is not supported ({MIN_INPUT_RATE}–{MAX_INPUT_RATE} Hz are)"
            )));
        }
        if from_rate == RATE {
            return Ok(Resampler { inner: None });
        }
        let fft = Fft::<f32>::new(
            from_rate as usize,
            RATE as usize,
            chunk_for(from_rate),
            1,
            FixedSync::Input,
        )
        .map_err(|e| PcmError::Unsupported(format!("cannot resample from {from_rate} Hz: {e}")))?;
        let out_buf = vec![0.0; fft.output_frames_max()];
        let delay_left = fft.output_delay();
        let ratio = fft.resample_ratio();
        Ok(Resampler {
            inner: Some(Stream {
                fft: Box::new(fft),
                pending: Vec::new(),
                out_buf,
                delay_left,
                total_in: 0,
                total_out: 0,
                ratio,
            }),
        })
    }

    /// Resamples `input` (mono, −1…1), appending what is ready to `out`. Some input stays
    /// buffered (less than one chunk) until more comes or [`flush`](Self::flush).
    pub fn push(&mut self, input: &[f32], out: &mut Vec<i16>) {
        let Some(s) = &mut self.inner else {
            out.extend(input.iter().map(|&x| to_i16(x)));
            return;
        };
        s.total_in += input.len() as u64;
        s.pending.extend_from_slice(input);
        let n = s.fft.input_frames_next();
        let mut used = 0;
        while s.pending.len() - used >= n {
            s.process(used, n, None, out);
            used += n;
        }
        s.pending.drain(..used);
    }

    /// The end of the input: the rest comes out, exactly `input × 16 kHz / rate` samples in
    /// all (rounded up). The resampler can then take a new stream.
    pub fn flush(&mut self, out: &mut Vec<i16>) {
        let Some(s) = &mut self.inner else {
            return;
        };
        let n = s.fft.input_frames_next();
        let expected = (s.total_in as f64 * s.ratio).ceil() as u64;
        if !s.pending.is_empty() {
            let len = s.pending.len();
            s.pending.resize(n, 0.0);
            s.process(0, n, Some(len), out);
            s.pending.clear();
        }
        // Zeros through until the delayed tail is out.
        s.pending.resize(n, 0.0);
        while s.total_out < expected {
            s.process(0, n, Some(0), out);
        }
        let extra = (s.total_out - expected) as usize;
        out.truncate(out.len() - extra);
        s.pending.clear();
        s.fft.reset();
        s.delay_left = s.fft.output_delay();
        s.total_in = 0;
        s.total_out = 0;
    }
}

impl Stream {
    fn process(&mut self, from: usize, n: usize, partial: Option<usize>, out: &mut Vec<i16>) {
        let input = InterleavedSlice::new(&self.pending[from..from + n], 1, n)
            .expect("one channel, n frames");
        let frames = self.out_buf.len();
        let mut output =
            InterleavedSlice::new_mut(&mut self.out_buf, 1, frames).expect("one channel");
        let indexing = partial.map(|p| Indexing::new().partial_len(p));
        let (_, produced) = self
            .fft
            .process_into_buffer(&input, &mut output, indexing.as_ref())
            .expect("buffers sized from the resampler's own figures");
        let skip = self.delay_left.min(produced);
        self.delay_left -= skip;
        let kept = &self.out_buf[skip..produced];
        self.total_out += kept.len() as u64;
        out.extend(kept.iter().map(|&x| to_i16(x)));
    }
}

/// What a file starts with when it is audio, but not a WAV this reads.
fn sniff_other_audio(head: &[u8]) -> Option<&'static str> {
    let at = |i: usize, m: &[u8]| head.len() >= i + m.len() && &head[i..i + m.len()] == m;
    if at(0, b"RF64") || at(0, b"RIFX") || at(0, b"BW64") {
        Some("an RF64/RIFX WAV")
    } else if at(0, b"fLaC") {
        Some("FLAC")
    } else if at(0, b"OggS") {
        Some("Ogg (Vorbis/Opus)")
    } else if at(0, b"ID3") || (head.len() >= 2 && head[0] == 0xFF && head[1] & 0xE0 == 0xE0) {
        Some("MP3")
    } else if at(0, b"FORM") && (at(8, b"AIFF") || at(8, b"AIFC")) {
        Some("AIFF")
    } else if at(4, b"ftyp") {
        Some("MP4/M4A")
    } else if at(0, &[0x1A, 0x45, 0xDF, 0xA3]) {
        Some("WebM/Matroska")
    } else if at(0, b"#!AMR") {
        Some("AMR")
    } else {
        None
    }
}

enum Encoding {
    Int(u16),
    Float,
}

/// A WAV recording read chunk by chunk, as `f32` per channel.
pub struct WavSource {
    reader: hound::WavReader<BufReader<File>>,
    rate: u32,
    channels: usize,
    frames: u64,
    encoding: Encoding,
    interleaved: Vec<f32>,
}

impl WavSource {
    /// Opens a WAV file: checks it is one, with samples, at a supported rate and encoding.
    pub fn open(path: &Path) -> Result<WavSource, PcmError> {
        let mut file = File::open(path).map_err(|e| match e.kind() {
            io::ErrorKind::NotFound => PcmError::NotFound,
            _ => PcmError::Unreadable(e),
        })?;
        let meta = file.metadata().map_err(PcmError::Unreadable)?;
        if meta.is_dir() {
            return Err(PcmError::NotAudio(" (a directory)".into()));
        }
        if meta.len() == 0 {
            return Err(PcmError::Empty);
        }
        let mut head = [0u8; 12];
        let got = read_up_to(&mut file, &mut head).map_err(PcmError::Unreadable)?;
        let head = &head[..got];
        let is_wav = head.len() == 12 && &head[0..4] == b"RIFF" && &head[8..12] == b"WAVE";
        if !is_wav {
            return Err(match sniff_other_audio(head) {
                Some(kind) => PcmError::Unsupported(format!(
                    "{kind} is not supported: only WAV recordings are (convert it first, e.g. \
                     `ffmpeg -i IN OUT.wav` or `sox IN OUT.wav`)"
                )),
                None if head.len() >= 4 && &head[0..4] == b"RIFF" => {
                    PcmError::NotAudio(" (a RIFF file, but not WAVE)".into())
                }
                None => PcmError::NotAudio(" (only WAV recordings are read)".into()),
            });
        }
        drop(file);
        let reader = hound::WavReader::open(path).map_err(map_hound)?;
        let spec = reader.spec();
        let encoding =
            match (spec.sample_format, spec.bits_per_sample) {
                (hound::SampleFormat::Int, b @ (8 | 16 | 24 | 32)) => Encoding::Int(b),
                (hound::SampleFormat::Float, 32) => Encoding::Float,
                (f, b) => {
                    return Err(PcmError::Unsupported(format!(
                    "{b}-bit {} WAV samples are not supported (8/16/24/32-bit integer or 32-bit \
                     float are)",
                    if f == hound::SampleFormat::Float { "float" } else { "integer" }
                )))
                }
            };
        if !(MIN_INPUT_RATE..=MAX_INPUT_RATE).contains(&spec.sample_rate) {
            return Err(PcmError::Unsupported(format!(
                "a sample rate of {} Hz is not supported ({MIN_INPUT_RATE}–{MAX_INPUT_RATE} Hz \
                 are)",
                spec.sample_rate
            )));
        }
        let frames = reader.duration() as u64;
        if frames == 0 {
            return Err(PcmError::NoSamples);
        }
        Ok(WavSource {
            rate: spec.sample_rate,
            channels: spec.channels as usize,
            frames,
            encoding,
            reader,
            interleaved: Vec::new(),
        })
    }

    pub fn rate(&self) -> u32 {
        self.rate
    }

    pub fn channels(&self) -> usize {
        self.channels
    }

    /// Frames (samples per channel) the header announces.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Length in milliseconds.
    pub fn duration_ms(&self) -> u64 {
        self.frames * 1000 / self.rate as u64
    }

    /// Reads up to `max_frames` frames into `out` (one `Vec` per channel, cleared first).
    /// Returns the frames read: 0 at the end. [`PcmError::Truncated`] when the file ends before
    /// the data its header announces.
    pub fn read(&mut self, max_frames: usize, out: &mut Vec<Vec<f32>>) -> Result<usize, PcmError> {
        out.resize_with(self.channels, Vec::new);
        out.iter_mut().for_each(Vec::clear);
        let want = max_frames * self.channels;
        self.interleaved.clear();
        match self.encoding {
            Encoding::Int(bits) => {
                let scale = 1.0 / (1u64 << (bits - 1)) as f32;
                for s in self.reader.samples::<i32>().take(want) {
                    self.interleaved.push(s.map_err(map_hound)? as f32 * scale);
                }
            }
            Encoding::Float => {
                for s in self.reader.samples::<f32>().take(want) {
                    let s = s.map_err(map_hound)?;
                    self.interleaved.push(if s.is_finite() { s } else { 0.0 });
                }
            }
        }
        if !self.interleaved.len().is_multiple_of(self.channels) {
            return Err(PcmError::Truncated);
        }
        for frame in self.interleaved.chunks_exact(self.channels) {
            for (c, &x) in frame.iter().enumerate() {
                out[c].push(x);
            }
        }
        Ok(self.interleaved.len() / self.channels)
    }
}

fn read_up_to(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read(&mut buf[got..])? {
            0 => break,
            n => got += n,
        }
    }
    Ok(got)
}

fn map_hound(e: hound::Error) -> PcmError {
    match e {
        // hound reports a short read as its own `Other` error ("Failed to read enough bytes.").
        hound::Error::IoError(e)
            if e.kind() == io::ErrorKind::UnexpectedEof
                || e.to_string().contains("enough bytes") =>
        {
            PcmError::Truncated
        }
        hound::Error::IoError(e) => PcmError::Unreadable(e),
        hound::Error::FormatError(m) => PcmError::NotAudio(format!(" (a malformed WAV: {m})")),
        hound::Error::Unsupported => {
            PcmError::Unsupported("this WAV encoding is not supported (PCM or float WAV is)".into())
        }
        other => PcmError::NotAudio(format!(" ({other})")),
    }
}

/// Reads a whole WAV file as 16 kHz mono (channels averaged): a turn kept on disk, a test clip.
pub fn read_wav_16k_mono(path: &Path) -> Result<Vec<i16>, PcmError> {
    let mut src = WavSource::open(path)?;
    let mut rs = Resampler::new(src.rate())?;
    let mut chans = Vec::new();
    let mut mono = Vec::new();
    let mut out = Vec::with_capacity((src.frames() * RATE as u64 / src.rate() as u64) as usize);
    loop {
        let n = src.read(8192, &mut chans)?;
        if n == 0 {
            break;
        }
        mono.clear();
        let k = 1.0 / chans.len() as f32;
        mono.extend((0..n).map(|i| chans.iter().map(|c| c[i]).sum::<f32>() * k));
        rs.push(&mono, &mut out);
    }
    rs.flush(&mut out);
    Ok(out)
}

fn spec_16k() -> hound::WavSpec {
    hound::WavSpec {
        channels: 1,
        sample_rate: RATE,
        bits_per_sample: 16,
        sample_format: hound::SampleFormat::Int,
    }
}

/// 16 kHz mono 16-bit samples as a WAV file in memory (an upload).
pub fn wav_bytes(samples: &[i16]) -> Vec<u8> {
    let mut buf = io::Cursor::new(Vec::with_capacity(44 + samples.len() * 2));
    {
        let mut w = hound::WavWriter::new(&mut buf, spec_16k()).expect("writing to memory");
        let mut s = w.get_i16_writer(samples.len() as u32);
        for &x in samples {
            s.write_sample(x);
        }
        s.flush().expect("writing to memory");
        w.finalize().expect("writing to memory");
    }
    buf.into_inner()
}

/// Writes 16 kHz mono 16-bit samples as a WAV file at `path` (created or replaced; not synced).
pub fn write_wav(path: &Path, samples: &[i16]) -> Result<(), PcmError> {
    std::fs::write(path, wav_bytes(samples)).map_err(|e| PcmError::Write(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::f32::consts::PI;

    fn tone(rate: u32, hz: f32, secs: f32) -> Vec<f32> {
        (0..(rate as f32 * secs) as usize)
            .map(|i| 0.5 * (2.0 * PI * hz * i as f32 / rate as f32).sin())
            .collect()
    }

    /// The strongest frequency, by counting upward zero crossings over the middle part.
    fn frequency(samples: &[i16]) -> f32 {
        let mid = &samples[samples.len() / 10..samples.len() * 9 / 10];
        let ups = mid.windows(2).filter(|w| w[0] < 0 && w[1] >= 0).count();
        ups as f32 * RATE as f32 / mid.len() as f32
    }

    fn resample_in_chunks(rate: u32, input: &[f32], chunk: usize) -> Vec<i16> {
        let mut r = Resampler::new(rate).unwrap();
        let mut out = Vec::new();
        for c in input.chunks(chunk) {
            r.push(c, &mut out);
        }
        r.flush(&mut out);
        out
    }

    #[test]
    fn resampling_keeps_a_tones_frequency_and_length() {
        for rate in [8_000, 11_025, 22_050, 44_100, 48_000, 96_000] {
            let input = tone(rate, 440.0, 2.0);
            let out = resample_in_chunks(rate, &input, 1234);
            let expected = (input.len() as f64 * RATE as f64 / rate as f64).ceil() as usize;
            assert_eq!(out.len(), expected, "{rate} Hz: length");
            let f = frequency(&out);
            assert!(
                (f - 440.0).abs() < 3.0,
                "{rate} Hz: {f} Hz after resampling"
            );
            // The level survives too (0.5 peak ≈ 16384).
            let peak = out[out.len() / 4..out.len() * 3 / 4]
                .iter()
                .map(|x| x.unsigned_abs())
                .max()
                .unwrap();
            assert!((15_500..=17_300).contains(&peak), "{rate} Hz: peak {peak}");
        }
    }

    #[test]
    fn resampling_does_not_depend_on_the_chunking_and_starts_on_time() {
        let rate = 44_100;
        // Silence, then a click at exactly 0.5 s.
        let mut input = vec![0.0f32; rate as usize];
        input[rate as usize / 2] = 1.0;
        let a = resample_in_chunks(rate, &input, 1);
        let b = resample_in_chunks(rate, &input, 4410);
        let c = resample_in_chunks(rate, &input, input.len());
        assert_eq!(a, b);
        assert_eq!(a, c);
        let at = a
            .iter()
            .enumerate()
            .max_by_key(|(_, x)| x.unsigned_abs())
            .unwrap()
            .0;
        assert!(
            (7_998..=8_002).contains(&at),
            "click at sample {at}, not 8000"
        );
        // A flushed resampler takes a new stream as if new.
        let mut r = Resampler::new(rate).unwrap();
        let mut first = Vec::new();
        r.push(&input, &mut first);
        r.flush(&mut first);
        let mut second = Vec::new();
        r.push(&input, &mut second);
        r.flush(&mut second);
        assert_eq!(first, second);
    }

    #[test]
    fn at_16k_it_only_converts() {
        let mut r = Resampler::new(RATE).unwrap();
        let mut out = Vec::new();
        r.push(&[0.0, 0.5, -1.0, 1.5], &mut out);
        r.flush(&mut out);
        assert_eq!(out, vec![0, 16384, -32768, 32767]);
        assert!(Resampler::new(0).is_err());
        assert!(Resampler::new(1_000_000).is_err());
    }

    #[test]
    fn wav_round_trip_and_bad_files() {
        let dir = tempfile::tempdir().unwrap();
        let samples: Vec<i16> = (0..16_000)
            .map(|i| ((i % 200) * 100 - 10_000) as i16)
            .collect();
        let p = dir.path().join("a.wav");
        write_wav(&p, &samples).unwrap();
        assert_eq!(read_wav_16k_mono(&p).unwrap(), samples);
        let src = WavSource::open(&p).unwrap();
        assert_eq!(
            (src.rate(), src.channels(), src.frames()),
            (RATE, 1, 16_000)
        );

        let code = |bytes: &[u8]| {
            let p = dir.path().join("bad");
            std::fs::write(&p, bytes).unwrap();
            WavSource::open(&p).err().map(|e| e.code())
        };
        assert_eq!(code(b""), Some("empty"));
        assert_eq!(code(b"hello, this is text\n"), Some("not_audio"));
        assert_eq!(code(b"fLaC\0\0\0\x22rest"), Some("unsupported_format"));
        assert_eq!(code(b"ID3\x04\0\0\0\0\0\0"), Some("unsupported_format"));
        assert_eq!(code(b"RIFF\x10\0\0\0AVI LIST"), Some("not_audio"));
        // A header with no samples; a data chunk cut short.
        assert_eq!(code(&wav_bytes(&[])), Some("empty"));
        let full = wav_bytes(&samples);
        assert_eq!(code(&full[..30]), Some("truncated"));
        let p2 = dir.path().join("cut.wav");
        std::fs::write(&p2, &full[..full.len() / 2]).unwrap();
        let mut src = WavSource::open(&p2).unwrap();
        let mut chans = Vec::new();
        let err = loop {
            match src.read(4096, &mut chans) {
                Ok(0) => panic!("a cut file read to its end"),
                Ok(_) => {}
                Err(e) => break e,
            }
        };
        assert_eq!(err.code(), "truncated");
        assert_eq!(
            WavSource::open(&dir.path().join("missing.wav"))
                .err()
                .unwrap()
                .code(),
            "not_found"
        );
    }

    #[test]
    fn every_sample_encoding_reads_to_the_same_level() {
        let dir = tempfile::tempdir().unwrap();
        for (bits, format) in [
            (8, hound::SampleFormat::Int),
            (16, hound::SampleFormat::Int),
            (24, hound::SampleFormat::Int),
            (32, hound::SampleFormat::Int),
            (32, hound::SampleFormat::Float),
        ] {
            let p = dir.path().join(format!("{bits}{format:?}.wav"));
            let spec = hound::WavSpec {
                channels: 2,
                sample_rate: 8_000,
                bits_per_sample: bits,
                sample_format: format,
            };
            let mut w = hound::WavWriter::create(&p, spec).unwrap();
            for i in 0..800 {
                let x = if i % 2 == 0 { 0.5f32 } else { -0.25 };
                match format {
                    hound::SampleFormat::Float => w.write_sample(x).unwrap(),
                    hound::SampleFormat::Int => w
                        .write_sample((x * (1i64 << (bits - 1)) as f32) as i32)
                        .unwrap(),
                }
            }
            w.finalize().unwrap();
            let mut src = WavSource::open(&p).unwrap();
            let mut chans = Vec::new();
            assert_eq!(src.read(10_000, &mut chans).unwrap(), 400);
            assert_eq!(chans.len(), 2);
            assert!((chans[0][7] - 0.5).abs() < 0.01, "{bits} {format:?}");
            assert!((chans[1][7] + 0.25).abs() < 0.01, "{bits} {format:?}");
            assert_eq!(src.read(10_000, &mut chans).unwrap(), 0);
        }
    }
}
