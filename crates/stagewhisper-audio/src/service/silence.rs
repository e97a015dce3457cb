//! Silence said out loud: while listening, a channel that has been digital silence for a
//! minute while the other carried sound (the call playing through another device, a muted
//! microphone) is said in the live view (`audio_silence`), and said over when it is heard
//! again. Time comes from the app's clock (injectable), levels from the levels' ticker.

use stagewhisper_core::audio::Channel;
use stagewhisper_core::events::Change;

/// How long a channel may be silent while the other is not before it is said.
pub const SILENT_FOR_MS: i64 = 60_000;
/// A peak at or below this is digital silence (under one step of 16-bit audio, twice).
const DIGITAL: f32 = 2.0 / 32768.0;
/// A peak above this on the other channel is sound worth hearing on both.
const SOUND: f32 = 0.01;

/// Test builds only (`debug_assertions` and the fault-injection switch of
/// `stagewhisper_core::faults`): `STAGEWHISPER_TEST_SILENCE_SECS` shortens the minute, so a
/// browser test sees the line without waiting a minute. A release build ignores it.
fn window_ms() -> i64 {
    use stagewhisper_core::faults::{ENV_VALUE, ENV_VAR};
    if cfg!(debug_assertions) && std::env::var(ENV_VAR).is_ok_and(|v| v == ENV_VALUE) {
        if let Some(s) = std::env::var("STAGEWHISPER_TEST_SILENCE_SECS")
            .ok()
            .and_then(|s| s.parse::<i64>().ok())
        {
            return s.clamp(1, 3600) * 1000;
        }
    }
    SILENT_FOR_MS
}

/// One listening call's watch for a silent channel.
pub(super) struct Silence {
    call_id: String,
    window_ms: i64,
    start_ms: i64,
    /// Per channel (mic, system): when it last carried anything (not digital silence), and
    /// when it last carried sound.
    heard: [Option<i64>; 2],
    sound: [Option<i64>; 2],
    said: Option<Channel>,
}

fn slot(ch: Channel) -> usize {
    match ch {
        Channel::Mic => 0,
        Channel::System => 1,
    }
}

impl Silence {
    pub fn new(call_id: &str, now_ms: i64) -> Silence {
        Silence::with_window(call_id, now_ms, window_ms())
    }

    fn with_window(call_id: &str, now_ms: i64, window_ms: i64) -> Silence {
        Silence {
            call_id: call_id.to_string(),
            window_ms,
            start_ms: now_ms,
            heard: [None; 2],
            sound: [None; 2],
            said: None,
        }
    }

    /// The levels of the last interval (`None`: the channel is off or not recording); the
    /// event to publish when what is said changes.
    pub fn tick(&mut self, now_ms: i64, mic: Option<f32>, system: Option<f32>) -> Option<Change> {
        for (ch, level) in [(Channel::Mic, mic), (Channel::System, system)] {
            if let Some(l) = level {
                if l > DIGITAL {
                    self.heard[slot(ch)] = Some(now_ms);
                }
                if l > SOUND {
                    self.sound[slot(ch)] = Some(now_ms);
                }
            }
        }
        let silent = |ch: Channel, level: Option<f32>| {
            let other = match ch {
                Channel::Mic => Channel::System,
                Channel::System => Channel::Mic,
            };
            let since = self.heard[slot(ch)].unwrap_or(self.start_ms);
            level.is_some()
                && now_ms - since >= self.window_ms
                && self.sound[slot(other)].is_some_and(|t| t > since)
        };
        let now = if silent(Channel::System, system) {
            Some(Channel::System)
        } else if silent(Channel::Mic, mic) {
            Some(Channel::Mic)
        } else {
            None
        };
        if now == self.said {
            return None;
        }
        self.said = now;
        let mins = (self.window_ms / 60_000).max(1);
        let span = if self.window_ms >= 60_000 {
            format!("{mins} min")
        } else {
            format!("{} s", self.window_ms / 1000)
        };
        let message = match now {
            Some(Channel::System) => format!(
                "No call audio heard for {span} — is the call playing through another device?"
            ),
            Some(Channel::Mic) => format!(
                "Your microphone has heard nothing for {span} — is it muted, or is the call \
                 using another microphone?"
            ),
            None => String::new(),
        };
        Some(Change::AudioSilence {
            session_id: self.call_id.clone(),
            channel: now,
            message,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stagewhisper_core::clock::{Clock, ManualClock};

    fn said(c: Option<Change>) -> Option<Option<Channel>> {
        c.map(|c| match c {
            Change::AudioSilence { channel, .. } => channel,
            other => panic!("{other:?}"),
        })
    }

    #[test]
    fn a_silent_call_while_you_speak_is_said_after_a_minute_and_over_when_heard() {
        let clock = ManualClock::new(chrono::Utc::now());
        let mut s = Silence::with_window("c", clock.now_ms(), SILENT_FOR_MS);
        // You speak, the call is digital silence: nothing for 59.9 s…
        for _ in 0..599 {
            clock.advance_ms(100);
            assert_eq!(s.tick(clock.now_ms(), Some(0.2), Some(0.0)), None);
        }
        // …then it is said, once.
        clock.advance_ms(100);
        let c = s.tick(clock.now_ms(), Some(0.2), Some(0.0));
        let Some(Change::AudioSilence {
            channel, message, ..
        }) = c.clone()
        else {
            panic!("{c:?}")
        };
        assert_eq!(channel, Some(Channel::System));
        assert_eq!(
            message,
            "No call audio heard for 1 min — is the call playing through another device?"
        );
        clock.advance_ms(100);
        assert_eq!(s.tick(clock.now_ms(), Some(0.2), Some(0.0)), None);
        // The call heard again: said over.
        clock.advance_ms(100);
        assert_eq!(
            said(s.tick(clock.now_ms(), Some(0.0), Some(0.05))),
            Some(None)
        );
    }

    #[test]
    fn both_quiet_an_off_channel_or_a_faint_hiss_say_nothing() {
        let clock = ManualClock::new(chrono::Utc::now());
        let mut both = Silence::with_window("c", clock.now_ms(), SILENT_FOR_MS);
        let mut off = Silence::with_window("c", clock.now_ms(), SILENT_FOR_MS);
        let mut hiss = Silence::with_window("c", clock.now_ms(), SILENT_FOR_MS);
        for _ in 0..1200 {
            clock.advance_ms(100);
            let now = clock.now_ms();
            // Nobody speaks: a quiet moment, not a broken device.
            assert_eq!(both.tick(now, Some(0.0), Some(0.0)), None);
            // The call's audio is off: nothing to say about it.
            assert_eq!(off.tick(now, Some(0.3), None), None);
            // A faint hiss is not digital silence: the device is there.
            assert_eq!(hiss.tick(now, Some(0.3), Some(0.001)), None);
        }
        // The microphone silent while the call speaks is said too.
        let mut mic = Silence::with_window("c", clock.now_ms(), SILENT_FOR_MS);
        let mut last = None;
        for _ in 0..601 {
            clock.advance_ms(100);
            last = last.or(said(mic.tick(clock.now_ms(), Some(0.0), Some(0.2))));
        }
        assert_eq!(last, Some(Some(Channel::Mic)));
    }
}
