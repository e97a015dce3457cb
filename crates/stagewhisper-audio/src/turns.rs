//! Voice activity and turns.
//!
//! Audio (16 kHz mono) is cut into 30 ms frames; a frame is *voiced* when WebRTC's voice
//! activity detector (libfvad, mode `Aggressive` by default) says so **and** it is louder than
//! an energy floor (RMS 0.002, about −54 dBFS). Measured on synthetic signals: the detector has
//! a level gate of its own (a voice-like harmonic tone is voiced in 96–100 % of its frames at
//! −37 dBFS RMS and in none at −48 dBFS; white noise and a 50 Hz hum below −40 dBFS make at most
//! 3 voiced frames in 10 s), but it also smooths its decisions: it stays *voiced* for about
//! 100–200 ms after speech stops, even over digital silence — which the call's channel is
//! between utterances — so turns ended late and a 150 ms click passed for 250 ms of speech.
//! Below the floor a frame is silence at once. The
//! [`TurnMaker`] turns voiced frames into turns:
//!
//! - **start**: at least `min_speech_ms` voiced within the last `2 × min_speech_ms`; the turn
//!   then begins `pre_roll_ms` before its first voiced frame (never before the end of the
//!   previous turn's audio), so a word's soft onset is not clipped;
//! - **end**: `hangover_ms` of unvoiced frames; `end_ms` is the end of the last voiced frame;
//! - **cut**: a long turn ends at the first short pause (≥ 90 ms) once it is within
//!   `soft_cut_ms` of `max_turn_ms`, or at `max_turn_ms` exactly when there is none; after an
//!   exact cut in the middle of speech the next turn begins at once (no pre-roll, no gap, no
//!   overlap), after a pause-cut it begins as any turn does.
//!
//! Every position comes from the number of samples pushed, never from a clock: the same audio
//! gives the same turns, however it is chunked.

/// Samples per 30 ms frame at 16 kHz.
pub const FRAME: usize = 480;
const FRAME_MS: u32 = 30;
/// A pause that may end a turn near its length limit: 3 frames (90 ms).
const PAUSE_FRAMES: u32 = 3;

/// How eagerly the detector calls a frame speech (WebRTC's modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VadMode {
    Quality,
    LowBitrate,
    Aggressive,
    VeryAggressive,
}

/// The turn-making rules. `Default`: 700 ms hangover, 15 s limit, 300 ms pre-roll, 250 ms of
/// speech to start.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnConfig {
    /// Silence that ends a turn.
    pub hangover_ms: u32,
    /// The longest turn.
    pub max_turn_ms: u32,
    /// Audio kept before a turn's first voiced frame.
    pub pre_roll_ms: u32,
    /// Speech needed (within twice as long) before a turn starts.
    pub min_speech_ms: u32,
    /// Within this much of `max_turn_ms`, a short pause ends the turn.
    pub soft_cut_ms: u32,
    pub vad_mode: VadMode,
    /// Frames quieter than this RMS (0–1 of full scale) are never speech; 0: no floor.
    pub energy_floor: f32,
}

impl Default for TurnConfig {
    fn default() -> Self {
        TurnConfig {
            hangover_ms: 700,
            max_turn_ms: 15_000,
            pre_roll_ms: 300,
            min_speech_ms: 250,
            soft_cut_ms: 2_000,
            vad_mode: VadMode::Aggressive,
            energy_floor: 0.002,
        }
    }
}

/// What the [`TurnMaker`] saw.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TurnEvent {
    /// A turn began (enough speech seen); its audio follows, pre-roll first.
    Start { start_ms: u64 },
    /// Audio of the open turn, in order.
    Audio(Vec<i16>),
    /// The turn ended: silence for `hangover_ms` (`cut: false`) or its length limit reached
    /// (`cut: true`). `end_ms`: the end of the last voiced frame.
    End {
        start_ms: u64,
        end_ms: u64,
        cut: bool,
    },
}

/// WebRTC's detector, movable to another thread (its state is plain memory owned by this
/// value; it is never shared).
struct Vad(webrtc_vad::Vad);

// SAFETY: `webrtc_vad::Vad` owns a heap-allocated libfvad instance through a raw pointer and
// frees it on drop; libfvad keeps no thread-local or global state, so moving the owner to
// another thread is sound. `Vad` is not `Sync` (no shared access).
unsafe impl Send for Vad {}

impl Vad {
    fn new(mode: VadMode) -> Vad {
        use webrtc_vad::{SampleRate, VadMode as M};
        let mode = match mode {
            VadMode::Quality => M::Quality,
            VadMode::LowBitrate => M::LowBitrate,
            VadMode::Aggressive => M::Aggressive,
            VadMode::VeryAggressive => M::VeryAggressive,
        };
        Vad(webrtc_vad::Vad::new_with_rate_and_mode(
            SampleRate::Rate16kHz,
            mode,
        ))
    }

    fn voiced(&mut self, frame: &[i16]) -> bool {
        // A 480-sample frame at 16 kHz is always a valid length.
        self.0.is_voice_segment(frame).unwrap_or(false)
    }
}

/// The RMS of a frame, 0–1.
pub fn rms(frame: &[i16]) -> f32 {
    if frame.is_empty() {
        return 0.0;
    }
    let sum: f64 = frame.iter().map(|&x| (x as f64) * (x as f64)).sum();
    ((sum / frame.len() as f64).sqrt() / 32768.0) as f32
}

enum State {
    Idle,
    Open {
        start: u64,
        /// Sample position after the last voiced frame.
        last_voiced_end: u64,
        silent_frames: u32,
    },
}

/// Voice activity → turns, for one channel. See the [module](self) for the rules.
pub struct TurnMaker {
    cfg: TurnConfig,
    vad: Vad,
    state: State,
    /// Samples not yet making a whole frame.
    partial: Vec<i16>,
    /// Samples consumed into whole frames (the position of `partial`'s first sample).
    consumed: u64,
    /// Idle: the recent frames (pre-roll + the start window), with their voicing.
    recent: std::collections::VecDeque<(Vec<i16>, bool)>,
    /// Where the last turn's audio ended: the next turn's pre-roll starts no earlier.
    emitted_until: u64,
    hangover_frames: u32,
    window_frames: usize,
    min_speech_frames: usize,
    pre_roll_frames: usize,
    max_turn: u64,
    soft_cut_from: u64,
}

fn frames_of(ms: u32) -> u32 {
    ms.div_ceil(FRAME_MS)
}

fn samples_of(ms: u32) -> u64 {
    ms as u64 * 16
}

fn ms_of(samples: u64) -> u64 {
    samples / 16
}

impl TurnMaker {
    pub fn new(cfg: TurnConfig) -> TurnMaker {
        let min_speech_frames = frames_of(cfg.min_speech_ms).max(1) as usize;
        let max_turn = samples_of(cfg.max_turn_ms.max(FRAME_MS * 4));
        TurnMaker {
            vad: Vad::new(cfg.vad_mode),
            state: State::Idle,
            partial: Vec::with_capacity(FRAME),
            consumed: 0,
            recent: Default::default(),
            emitted_until: 0,
            hangover_frames: frames_of(cfg.hangover_ms).max(1),
            window_frames: min_speech_frames * 2,
            min_speech_frames,
            pre_roll_frames: frames_of(cfg.pre_roll_ms) as usize,
            max_turn,
            soft_cut_from: max_turn.saturating_sub(samples_of(cfg.soft_cut_ms)),
            cfg,
        }
    }

    pub fn config(&self) -> &TurnConfig {
        &self.cfg
    }

    /// Audio pushed so far, in milliseconds.
    pub fn position_ms(&self) -> u64 {
        ms_of(self.consumed + self.partial.len() as u64)
    }

    /// Whether a turn is open.
    pub fn in_turn(&self) -> bool {
        matches!(self.state, State::Open { .. })
    }

    /// The earliest `start_ms` a turn not yet ended can have: the open turn's start, or where
    /// a turn starting now would begin (its pre-roll). Segments of several channels can be
    /// merged in order once they start before every channel's `earliest_start_ms`.
    pub fn earliest_start_ms(&self) -> u64 {
        match self.state {
            State::Open { start, .. } => ms_of(start),
            State::Idle => {
                let back = (self.recent.len() * FRAME) as u64;
                ms_of(self.consumed.saturating_sub(back).max(self.emitted_until))
            }
        }
    }

    /// Pushes 16 kHz mono samples (any chunk size).
    pub fn push(&mut self, samples: &[i16], out: &mut Vec<TurnEvent>) {
        let mut rest = samples;
        while !rest.is_empty() {
            let take = (FRAME - self.partial.len()).min(rest.len());
            self.partial.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            if self.partial.len() == FRAME {
                let frame = std::mem::replace(&mut self.partial, Vec::with_capacity(FRAME));
                self.frame(frame, out);
            }
        }
        coalesce(out);
    }

    /// The end of the input: an open turn ends (its last partial frame included).
    pub fn finish(&mut self, out: &mut Vec<TurnEvent>) {
        if let State::Open {
            start,
            last_voiced_end,
            ..
        } = self.state
        {
            if !self.partial.is_empty() {
                out.push(TurnEvent::Audio(std::mem::take(&mut self.partial)));
            }
            out.push(TurnEvent::End {
                start_ms: ms_of(start),
                end_ms: ms_of(last_voiced_end),
                cut: false,
            });
            self.state = State::Idle;
        }
        self.consumed += self.partial.len() as u64;
        self.partial.clear();
        self.emitted_until = self.consumed;
        self.recent.clear();
        coalesce(out);
    }

    fn frame(&mut self, frame: Vec<i16>, out: &mut Vec<TurnEvent>) {
        let voiced = (self.cfg.energy_floor <= 0.0 || rms(&frame) >= self.cfg.energy_floor)
            && self.vad.voiced(&frame);
        self.consumed += FRAME as u64;
        let frame_end = self.consumed;
        match self.state {
            State::Idle => self.idle_frame(frame, voiced, frame_end, out),
            State::Open { .. } => self.open_frame(frame, voiced, frame_end, out),
        }
    }

    /// A frame between turns: kept for the pre-roll; a turn starts once the window holds
    /// enough speech.
    fn idle_frame(
        &mut self,
        frame: Vec<i16>,
        voiced: bool,
        frame_end: u64,
        out: &mut Vec<TurnEvent>,
    ) {
        self.recent.push_back((frame, voiced));
        while self.recent.len() > self.pre_roll_frames + self.window_frames {
            self.recent.pop_front();
        }
        let window = self.recent.len().min(self.window_frames);
        let in_window = self.recent.len() - window;
        let voiced_count = self.recent.iter().skip(in_window).filter(|f| f.1).count();
        if voiced && voiced_count >= self.min_speech_frames {
            let first_voiced = self
                .recent
                .iter()
                .skip(in_window)
                .position(|f| f.1)
                .expect("voiced frames in the window")
                + in_window;
            let recent_start = frame_end - (self.recent.len() * FRAME) as u64;
            // Pre-roll before the first voiced frame, never into the previous turn.
            let from = first_voiced.saturating_sub(self.pre_roll_frames);
            let mut start = recent_start + (from * FRAME) as u64;
            let mut skip = from;
            while start < self.emitted_until {
                start += FRAME as u64;
                skip += 1;
            }
            let mut audio = Vec::with_capacity((self.recent.len() - skip) * FRAME);
            for (f, _) in self.recent.drain(..).skip(skip) {
                audio.extend_from_slice(&f);
            }
            out.push(TurnEvent::Start {
                start_ms: ms_of(start),
            });
            out.push(TurnEvent::Audio(audio));
            self.state = State::Open {
                start,
                last_voiced_end: frame_end,
                silent_frames: 0,
            };
        }
    }

    /// A frame of the open turn: its audio; the turn ends after the hangover, or is cut near
    /// (or at) its length limit.
    fn open_frame(
        &mut self,
        frame: Vec<i16>,
        voiced: bool,
        frame_end: u64,
        out: &mut Vec<TurnEvent>,
    ) {
        let State::Open {
            start,
            last_voiced_end,
            silent_frames,
        } = &mut self.state
        else {
            return;
        };
        let start = *start;
        out.push(TurnEvent::Audio(frame));
        if voiced {
            *last_voiced_end = frame_end;
            *silent_frames = 0;
        } else {
            *silent_frames += 1;
        }
        let (last_voiced_end, silent_frames) = (*last_voiced_end, *silent_frames);
        let len = frame_end - start;
        if silent_frames >= self.hangover_frames {
            self.end(start, last_voiced_end, false, frame_end, out);
        } else if len >= self.soft_cut_from
            && silent_frames >= PAUSE_FRAMES
            && last_voiced_end > start
        {
            // A pause near the limit: a natural place to cut.
            self.end(start, last_voiced_end, true, frame_end, out);
        } else if len >= self.max_turn {
            self.end(start, last_voiced_end, true, frame_end, out);
            if silent_frames == 0 {
                // Speech goes on: the next turn starts right here.
                out.push(TurnEvent::Start {
                    start_ms: ms_of(frame_end),
                });
                self.state = State::Open {
                    start: frame_end,
                    last_voiced_end: frame_end,
                    silent_frames: 0,
                };
            }
        }
    }

    fn end(&mut self, start: u64, end: u64, cut: bool, at: u64, out: &mut Vec<TurnEvent>) {
        out.push(TurnEvent::End {
            start_ms: ms_of(start),
            end_ms: ms_of(end),
            cut,
        });
        self.state = State::Idle;
        self.emitted_until = at;
        self.recent.clear();
    }
}

/// Merges consecutive `Audio` events (one per push rather than one per frame).
fn coalesce(out: &mut Vec<TurnEvent>) {
    let mut merged: Vec<TurnEvent> = Vec::with_capacity(out.len());
    for e in out.drain(..) {
        match (merged.last_mut(), e) {
            (Some(TurnEvent::Audio(a)), TurnEvent::Audio(b)) => a.extend_from_slice(&b),
            (_, e) => merged.push(e),
        }
    }
    *out = merged;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// "Speech" the detector takes for voice: a vowel-like tone (a 140 Hz fundamental with
    /// harmonics, its level wobbling at a syllable rate).
    fn speech(ms: u32, seed: u32) -> Vec<i16> {
        let n = samples_of(ms) as usize;
        (0..n)
            .map(|i| {
                let t = i as f32 / 16_000.0;
                let f0 = 140.0 + 10.0 * (seed % 5) as f32;
                let env = 0.55 + 0.45 * (2.0 * std::f32::consts::PI * 4.0 * t).sin().abs();
                let v: f32 = (1..=8)
                    .map(|h| (2.0 * std::f32::consts::PI * f0 * h as f32 * t).sin() / h as f32)
                    .sum();
                (v * env * 6000.0) as i16
            })
            .collect()
    }

    fn silence(ms: u32) -> Vec<i16> {
        vec![0; samples_of(ms) as usize]
    }

    /// Low steady noise (a fan, hiss), under the floor.
    fn hiss(ms: u32) -> Vec<i16> {
        let mut x: u32 = 12345;
        (0..samples_of(ms))
            .map(|_| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                ((x >> 16) % 41) as i16 - 20
            })
            .collect()
    }

    fn run(cfg: TurnConfig, audio: &[i16], chunk: usize) -> (Vec<TurnEvent>, usize) {
        let mut tm = TurnMaker::new(cfg);
        let mut all = Vec::new();
        for c in audio.chunks(chunk) {
            let mut out = Vec::new();
            tm.push(c, &mut out);
            all.extend(out);
        }
        let mut out = Vec::new();
        tm.finish(&mut out);
        all.extend(out);
        let audio_total = all
            .iter()
            .map(|e| match e {
                TurnEvent::Audio(a) => a.len(),
                _ => 0,
            })
            .sum();
        (
            all.into_iter()
                .filter(|e| !matches!(e, TurnEvent::Audio(_)))
                .collect(),
            audio_total,
        )
    }

    fn cat(parts: &[Vec<i16>]) -> Vec<i16> {
        parts.concat()
    }

    #[test]
    fn two_utterances_make_two_turns_with_pre_roll_and_hangover() {
        let audio = cat(&[
            silence(1000),
            speech(1500, 1),
            silence(1200),
            speech(900, 2),
            silence(2000),
        ]);
        let (events, _) = run(TurnConfig::default(), &audio, 320);
        assert_eq!(events.len(), 4, "{events:?}");
        let TurnEvent::Start { start_ms: s1 } = events[0] else {
            panic!("{events:?}")
        };
        let TurnEvent::End {
            start_ms,
            end_ms: e1,
            cut,
        } = events[1]
        else {
            panic!("{events:?}")
        };
        assert_eq!((start_ms, cut), (s1, false));
        // Speech began at 1000 ms: the turn starts about 300 ms earlier (pre-roll).
        assert!((680..=720).contains(&s1), "start {s1}");
        // It ended at 2500 ms (frame-rounded).
        assert!((2460..=2550).contains(&e1), "end {e1}");
        let TurnEvent::Start { start_ms: s2 } = events[2] else {
            panic!("{events:?}")
        };
        let TurnEvent::End {
            end_ms: e2, cut, ..
        } = events[3]
        else {
            panic!("{events:?}")
        };
        assert!((3380..=3420).contains(&s2), "second start {s2}");
        assert!((4560..=4650).contains(&e2), "second end {e2}");
        assert!(!cut);
    }

    #[test]
    fn the_same_audio_gives_the_same_turns_however_it_is_chunked() {
        let audio = cat(&[
            silence(300),
            speech(2000, 3),
            silence(400),
            speech(700, 4),
            silence(900),
            speech(5000, 0),
        ]);
        let (a, na) = run(TurnConfig::default(), &audio, 1);
        let (b, nb) = run(TurnConfig::default(), &audio, 480);
        let (c, nc) = run(TurnConfig::default(), &audio, 7777);
        assert_eq!(a, b);
        assert_eq!(a, c);
        assert_eq!((na, nb), (nb, nc));
        // A 400 ms pause does not end a turn (700 ms hangover); the 900 ms one does. The last
        // turn is closed by the end of input.
        assert_eq!(a.len(), 4, "{a:?}");
        assert!(matches!(a[3], TurnEvent::End { cut: false, .. }));
    }

    #[test]
    fn short_noises_and_quiet_hiss_make_no_turn() {
        // 150 ms of speech (< 250 ms), twice, far apart; then a long quiet hiss.
        let audio = cat(&[
            silence(500),
            speech(150, 1),
            silence(1500),
            speech(150, 2),
            silence(1500),
            hiss(5000),
        ]);
        let (events, audio_out) = run(TurnConfig::default(), &audio, 1000);
        assert!(events.is_empty(), "{events:?}");
        assert_eq!(audio_out, 0);
        // Why the floor: without it the detector's own smoothing keeps a blip "voiced" into
        // the digital silence after it, long enough to pass for speech.
        let no_floor = TurnConfig {
            energy_floor: 0.0,
            ..TurnConfig::default()
        };
        let (events, _) = run(no_floor, &audio, 1000);
        assert!(!events.is_empty(), "the detector alone ignored the blips");
    }

    #[test]
    fn a_long_monologue_is_cut_and_goes_on_at_once() {
        // 40 s of unbroken speech: cut at 15 s exactly, twice, with no gap and no overlap.
        let audio = cat(&[silence(600), speech(40_000, 1), silence(1000)]);
        let mut tm = TurnMaker::new(TurnConfig::default());
        let mut events = Vec::new();
        for c in audio.chunks(4096) {
            tm.push(c, &mut events);
        }
        tm.finish(&mut events);
        // (start, end, cut, samples of audio sent for the turn)
        let mut turns: Vec<(u64, u64, bool, usize)> = Vec::new();
        let mut audio_len = 0;
        for e in &events {
            match e {
                TurnEvent::Start { .. } => audio_len = 0,
                TurnEvent::Audio(a) => audio_len += a.len(),
                TurnEvent::End {
                    start_ms,
                    end_ms,
                    cut,
                } => turns.push((*start_ms, *end_ms, *cut, audio_len)),
            }
        }
        assert_eq!(turns.len(), 3, "{turns:?}");
        assert!(turns[0].2 && turns[1].2 && !turns[2].2, "{turns:?}");
        assert_eq!(turns[0].1 - turns[0].0, 15_000, "{turns:?}");
        assert_eq!(
            turns[1].0, turns[0].1,
            "the next turn starts at the cut: {turns:?}"
        );
        assert_eq!(turns[2].0, turns[1].1, "{turns:?}");
        // Each cut turn sent exactly its 15 s: nothing twice, nothing skipped.
        assert_eq!(turns[0].3, 15_000 * 16);
        assert_eq!(turns[1].3, 15_000 * 16);
        assert!((40_560..=40_650).contains(&turns[2].1), "{turns:?}");
    }

    #[test]
    fn near_the_limit_a_pause_ends_the_turn() {
        // 14 s of speech, a 200 ms pause, more speech: the turn ends at the pause (cut), not
        // in the middle of a word at 15 s, and the next one starts with the speech after it.
        let audio = cat(&[
            silence(300),
            speech(14_000, 1),
            silence(200),
            speech(3000, 2),
            silence(1000),
        ]);
        let (events, _) = run(TurnConfig::default(), &audio, 1600);
        let ends: Vec<(u64, u64, bool)> = events
            .iter()
            .filter_map(|e| match e {
                TurnEvent::End {
                    start_ms,
                    end_ms,
                    cut,
                } => Some((*start_ms, *end_ms, *cut)),
                _ => None,
            })
            .collect();
        assert_eq!(ends.len(), 2, "{events:?}");
        assert!(ends[0].2, "{ends:?}");
        assert!((14_250..=14_330).contains(&ends[0].1), "{ends:?}");
        assert!(ends[1].0 >= ends[0].1 && ends[1].0 <= 14_520, "{ends:?}");
        assert!(!ends[1].2);
    }

    #[test]
    fn the_end_of_input_closes_a_turn_and_positions_count_samples() {
        let audio = cat(&[silence(100), speech(800, 1)]);
        let mut tm = TurnMaker::new(TurnConfig::default());
        let mut out = Vec::new();
        tm.push(&audio, &mut out);
        assert!(tm.in_turn());
        assert_eq!(tm.position_ms(), 900);
        assert_eq!(tm.earliest_start_ms(), 0);
        out.clear();
        tm.finish(&mut out);
        assert!(
            matches!(
                out.last(),
                Some(TurnEvent::End {
                    end_ms: 900,
                    cut: false,
                    ..
                })
            ),
            "{out:?}"
        );
        assert!(!tm.in_turn());
        // A pre-roll never reaches back into audio already sent.
        tm.push(&speech(1000, 2), &mut out);
        assert!(
            out.iter()
                .any(|e| matches!(e, TurnEvent::Start { start_ms: 900 })),
            "{out:?}"
        );
    }
}
