//! The echo check: whether a "You" final is the call's audio heard by the microphone
//! (speakers, no headset), so that it is dropped rather than stored.
//!
//! Two ways to tell: the turn's level envelope follows the call's at a small lag (the
//! acoustic check, [`EchoCheck::system_level`] keeps the call's envelope), or its words are
//! mostly those of a "Them" final at about the same time. When the call's audio of that time is
//! not known, a "You" final is held while an overlapping "Them" turn is still being heard or
//! recognised (at most [`ECHO_HOLD`]), so the two can be compared.

use crate::backlog::TurnMeta;
use crate::turns::rms;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// The longest a "You" final waits for an overlapping "Them" turn.
pub const ECHO_HOLD: Duration = Duration::from_secs(20);
/// How far apart in time an echo and its source may be.
const ECHO_SLACK_MS: i64 = 1_500;
/// Share of the "You" words found in the "Them" turn that makes it an echo.
const ECHO_WORDS: f64 = 0.6;
/// "Them" finals kept for comparison.
const ECHO_KEEP: usize = 32;
/// The frames of the level envelopes compared for the echo check: 20 ms at 16 kHz.
pub(super) const ENV_FRAME: usize = 320;
const ENV_MS: i64 = 20;
/// Envelope frames of the call's audio kept (90 s).
const ENV_KEEP: usize = 90 * 50;
/// How late (or, with the capture latencies, early) the microphone may hear the call.
const ECHO_LAG_MIN_MS: i64 = -500;
const ECHO_LAG_MAX_MS: i64 = 1_000;
/// Correlation of the two envelopes that makes a "You" turn an echo.
const ECHO_CORRELATION: f64 = 0.75;

/// A "Them" turn being heard or recognised, for the echo hold.
struct ThemOpen {
    started_at_ms: i64,
    ended_at_ms: Option<i64>,
}

/// A recent "Them" final.
struct ThemFinal {
    started_at_ms: i64,
    ended_at_ms: i64,
    words: HashSet<String>,
}

/// What is known of the other side: its turns open, its recent finals, its level.
#[derive(Default)]
struct Them {
    open: HashMap<String, ThemOpen>,
    recent: VecDeque<ThemFinal>,
    /// The call's audio level in 20 ms frames (wall-clock ms, RMS), the last [`ENV_KEEP`].
    system: VecDeque<(i64, f32)>,
}

/// The echo check of a listening app: fed by the call's channel (its turns, its level), asked
/// about the microphone's finals.
pub(crate) struct EchoCheck {
    them: Mutex<Them>,
    /// A "Them" turn became final (a held "You" final looks again).
    changed: Condvar,
}

impl EchoCheck {
    pub fn new() -> EchoCheck {
        EchoCheck {
            them: Mutex::new(Them::default()),
            changed: Condvar::new(),
        }
    }

    pub fn them_started(&self, turn_id: &str, started_at_ms: i64) {
        self.them.lock().unwrap().open.insert(
            turn_id.to_string(),
            ThemOpen {
                started_at_ms,
                ended_at_ms: None,
            },
        );
    }

    pub fn them_ended(&self, turn_id: &str, ended_at_ms: i64) {
        if let Some(o) = self.them.lock().unwrap().open.get_mut(turn_id) {
            o.ended_at_ms = Some(ended_at_ms);
        }
    }

    /// A "Them" turn is final (`text`: what it said, when known).
    pub fn them_done(&self, turn_id: &str, text: Option<(&TurnMeta, &str)>) {
        let mut e = self.them.lock().unwrap();
        e.open.remove(turn_id);
        if let Some((meta, text)) = text {
            e.recent.push_back(ThemFinal {
                started_at_ms: meta.started_at_ms,
                ended_at_ms: meta.ended_at_ms,
                words: words(text).into_iter().collect(),
            });
            while e.recent.len() > ECHO_KEEP {
                e.recent.pop_front();
            }
        }
        drop(e);
        self.changed.notify_all();
    }

    /// The call's audio level of a 20 ms frame that began at `at_ms`.
    pub fn system_level(&self, at_ms: i64, rms: f32) {
        let mut e = self.them.lock().unwrap();
        e.system.push_back((at_ms, rms));
        while e.system.len() > ENV_KEEP {
            e.system.pop_front();
        }
    }

    /// Whether a "You" turn is the call's audio heard by the microphone (speakers, no
    /// headset): its level envelope follows the call's at a small lag. `None` when the call's
    /// audio of that time is not known (its channel off or not recording).
    fn echoes_the_call(&self, meta: &TurnMeta, samples: &[i16]) -> Option<bool> {
        let mic: Vec<f32> = samples.chunks(ENV_FRAME).map(rms).collect();
        let e = self.them.lock().unwrap();
        let from = meta.started_at_ms + ECHO_LAG_MIN_MS - ENV_MS;
        let to = meta.started_at_ms + mic.len() as i64 * ENV_MS + ECHO_LAG_MAX_MS;
        let window: Vec<(i64, f32)> = e
            .system
            .iter()
            .filter(|(t, _)| *t >= from && *t <= to)
            .copied()
            .collect();
        drop(e);
        let best = envelope_match(&mic, meta.started_at_ms, &window)?;
        tracing::debug!(seq = meta.seq, correlation = best, "echo check");
        Some(best >= ECHO_CORRELATION)
    }

    /// Whether a "You" final is the echo of a "Them" one: its audio follows the call's
    /// ([`EchoCheck::echoes_the_call`]), or its words are mostly those of a "Them" final at about
    /// the same time. When the call's audio of that time is not known and a "Them" turn that
    /// overlaps it is still being heard or recognised, `hold` waits for it (at most
    /// [`ECHO_HOLD`]).
    pub fn is_echo(&self, meta: &TurnMeta, text: &str, samples: &[i16], hold: bool) -> bool {
        let acoustic = if samples.is_empty() {
            None
        } else {
            self.echoes_the_call(meta, samples)
        };
        if acoustic == Some(true) {
            return true;
        }
        let overlaps = |s: i64, e: i64| {
            s <= meta.ended_at_ms + ECHO_SLACK_MS && e >= meta.started_at_ms - ECHO_SLACK_MS
        };
        let mut g = self.them.lock().unwrap();
        if hold && acoustic.is_none() {
            let deadline = Instant::now() + ECHO_HOLD;
            loop {
                let pending = g
                    .open
                    .values()
                    .any(|o| overlaps(o.started_at_ms, o.ended_at_ms.unwrap_or(i64::MAX)));
                let now = Instant::now();
                if !pending || now >= deadline {
                    break;
                }
                g = self.changed.wait_timeout(g, deadline - now).unwrap().0;
            }
        }
        let you = words(text);
        if you.is_empty() {
            return false;
        }
        g.recent.iter().any(|t| {
            overlaps(t.started_at_ms, t.ended_at_ms) && {
                let found = you.iter().filter(|w| t.words.contains(*w)).count();
                found as f64 / you.len() as f64 >= ECHO_WORDS
            }
        })
    }
}

/// The best correlation (Pearson) of the microphone's envelope `mic` (20 ms frames from
/// `mic_start_ms`) with the call's envelope `system` (frames with their times) over the lags an
/// echo can have; `None` when there is too little of the call's audio, or it is silent, to tell.
fn envelope_match(mic: &[f32], mic_start_ms: i64, system: &[(i64, f32)]) -> Option<f64> {
    if mic.len() < 10 || system.iter().all(|(_, v)| *v < 0.003) {
        return None;
    }
    let mut best: Option<f64> = None;
    let mut lag = ECHO_LAG_MIN_MS;
    while lag <= ECHO_LAG_MAX_MS {
        // The call's frame for mic frame i: the one nearest `mic time - lag`.
        let mut pairs = Vec::with_capacity(mic.len());
        let mut j = 0usize;
        for (i, m) in mic.iter().enumerate() {
            let t = mic_start_ms + i as i64 * ENV_MS - lag;
            while j + 1 < system.len() && system[j + 1].0 <= t {
                j += 1;
            }
            if let Some(&(st, sv)) = system.get(j) {
                if (st - t).abs() <= ENV_MS {
                    pairs.push((*m as f64, sv as f64));
                }
            }
        }
        if pairs.len() * 5 >= mic.len() * 4 {
            if let Some(c) = pearson(&pairs) {
                best = Some(best.map_or(c, |b: f64| b.max(c)));
            }
        }
        lag += ENV_MS;
    }
    best
}

fn pearson(pairs: &[(f64, f64)]) -> Option<f64> {
    let n = pairs.len() as f64;
    let (mx, my) = pairs
        .iter()
        .fold((0.0, 0.0), |(a, b), (x, y)| (a + x / n, b + y / n));
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for (x, y) in pairs {
        sxy += (x - mx) * (y - my);
        sxx += (x - mx).powi(2);
        syy += (y - my).powi(2);
    }
    (sxx > 1e-12 && syy > 1e-12).then(|| sxy / (sxx * syy).sqrt())
}

/// The words of a text, for the echo comparison (lower case, letters and digits).
fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric() && c != '\'')
        .map(|w| w.trim_matches('\'').to_lowercase())
        .filter(|w| !w.is_empty())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use stagewhisper_core::audio::Channel;
    use std::sync::Arc;

    fn meta(start: i64, end: i64) -> TurnMeta {
        TurnMeta {
            seq: 1,
            call_id: "c".into(),
            channel: Channel::Mic,
            speaker: "You".into(),
            started_at_ms: start,
            ended_at_ms: end,
            samples: 0,
            text: None,
            attempts: 0,
            language: None,
        }
    }

    #[test]
    fn a_you_turn_is_an_echo_only_of_a_them_turn_close_in_time_and_words() {
        let f = EchoCheck::new();
        let them = TurnMeta {
            channel: Channel::System,
            ..meta(10_000, 14_000)
        };
        f.them_started("t1", 10_000);
        f.them_done(
            "t1",
            Some((&them, "Our budget is about twenty thousand dollars.")),
        );
        // Mostly the same words, at the same time: an echo (recognised a little differently).
        assert!(f.is_echo(
            &meta(10_200, 14_100),
            "our budget is about twenty thousand",
            &[],
            true
        ));
        assert!(f.is_echo(
            &meta(10_200, 14_100),
            "the budget is about twenty dollars",
            &[],
            false
        ));
        // Other words at the same time: the user spoke over them.
        assert!(!f.is_echo(
            &meta(10_200, 14_100),
            "sorry can you repeat that",
            &[],
            false
        ));
        // The same words much later: said again, not an echo.
        assert!(!f.is_echo(
            &meta(30_000, 33_000),
            "our budget is about twenty thousand",
            &[],
            false
        ));
        assert!(!f.is_echo(&meta(10_200, 14_100), "", &[], false));
    }

    #[test]
    fn a_you_final_waits_for_an_overlapping_them_turn_still_being_recognised() {
        let f = Arc::new(EchoCheck::new());
        f.them_started("t1", 10_000);
        f.them_ended("t1", 13_000);
        let them = TurnMeta {
            channel: Channel::System,
            ..meta(10_000, 13_000)
        };
        let g = f.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            g.them_done("t1", Some((&them, "let's meet on Tuesday at three")));
        });
        let began = Instant::now();
        assert!(f.is_echo(
            &meta(10_100, 13_200),
            "let's meet on tuesday at three",
            &[],
            true
        ));
        assert!(began.elapsed() >= Duration::from_millis(150));
        t.join().unwrap();
        // Not overlapping: no wait at all.
        f.them_started("t2", 50_000);
        let began = Instant::now();
        assert!(!f.is_echo(&meta(10_100, 13_200), "hello", &[], true));
        assert!(began.elapsed() < Duration::from_millis(100));
    }

    /// A speech-like level pattern (syllables of varying loudness), 20 ms frames.
    fn pattern(seed: u32, n: usize) -> Vec<f32> {
        let mut x = seed;
        (0..n)
            .map(|i| {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12_345);
                let syllable = ((i / 7) as f32 * 0.9).sin().abs();
                syllable * (0.05 + (x >> 16) as f32 / 65_536.0 * 0.1)
            })
            .collect()
    }

    #[test]
    fn the_microphone_picking_up_the_call_follows_its_level_at_a_lag() {
        let call = pattern(7, 400);
        let system: Vec<(i64, f32)> = call
            .iter()
            .enumerate()
            .map(|(i, v)| (100_000 + i as i64 * 20, *v))
            .collect();
        // The same audio 240 ms later in the microphone, quieter: an echo.
        let start = 100_000 + 60 * 20 + 240;
        let echo: Vec<f32> = call[60..260].iter().map(|v| v * 0.3).collect();
        let c = envelope_match(&echo, start, &system).unwrap();
        assert!(c > 0.95, "{c}");
        // Someone else speaking at the same time: no echo.
        let other = pattern(99, 200);
        let c = envelope_match(&other, start, &system).unwrap();
        assert!(c < ECHO_CORRELATION, "{c}");
        // The call silent then, or not recorded: cannot tell.
        let silent: Vec<(i64, f32)> = system.iter().map(|(t, _)| (*t, 0.0)).collect();
        assert_eq!(envelope_match(&echo, start, &silent), None);
        assert_eq!(envelope_match(&echo, start, &[]), None);
        // The acoustic check decides without waiting for the other side's text.
        let f = EchoCheck::new();
        for (t, v) in &system {
            f.system_level(*t, *v);
        }
        f.them_started("still-open", start);
        let samples: Vec<i16> = echo
            .iter()
            .flat_map(|v| std::iter::repeat_n((*v * 32767.0) as i16, ENV_FRAME))
            .collect();
        let m = meta(start, start + 200 * 20);
        let began = Instant::now();
        assert!(f.is_echo(&m, "anything at all", &samples, true));
        assert!(began.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn words_ignore_case_and_punctuation() {
        assert_eq!(words("Hi, it's $20,000!"), ["hi", "it's", "20", "000"]);
    }
}
