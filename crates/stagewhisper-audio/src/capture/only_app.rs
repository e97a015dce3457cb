//! Only the call's application (`{"app": "zoom"}` for the call's audio): what that application
//! plays, without the rest of what plays on the same output (music, notifications, a video in
//! another tab).
//!
//! The native protocol can record one playback stream (a *sink input*) alone: a record stream
//! on the monitor of its sink with `direct_on_input` set to it (libpulse's
//! `pa_stream_set_monitor_stream`) hears that stream before it is mixed. One such stream per
//! playback stream of the application, mixed here; when the application opens or closes one
//! (a new call, a device change), the set is opened anew. While it plays nothing the channel
//! says so and waits. When the server refuses such a stream, the monitor of the application's
//! output is recorded instead, and the channel's source says so in plain words.

use super::apps::prop;
use super::conn::{Conn, ConnError, Msg};
use super::record::{
    decode, open_stream, record, wait_for_change, Down, Ended, Event, Reporter, GAP, TICK,
};
use super::source::Source;
use pulseaudio::protocol::{
    self, Command, Prop, PulseError, SubscriptionEventFacility, SubscriptionEventType,
    SubscriptionMask,
};
use stagewhisper_core::audio::{Channel, SourceChoice};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// One playback stream of the application, and the monitor it can be heard on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Playing {
    input: u32,
    monitor: Source,
    /// The output's name for people.
    output: String,
}

/// How recording the application's streams ended.
enum AppEnded {
    Stop,
    /// Its streams changed: look again.
    Changed,
    /// The server refused to record a stream alone (why).
    Refused(String),
}

/// Records what `app` plays until told to stop, through its streams coming and going.
pub(super) fn session(
    conn: &mut Conn,
    app: &str,
    stop: &AtomicBool,
    on: &mut dyn FnMut(Event<'_>),
    rep: &mut Reporter,
) -> Result<(), ConnError> {
    conn.ack(Command::Subscribe(
        SubscriptionMask::SINK_INPUT | SubscriptionMask::SOURCE | SubscriptionMask::SINK,
    ))?;
    loop {
        if stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let now = playing(conn, app)?;
        if now.is_empty() {
            rep.down(
                Down::NoSource(format!(
                    "“{app}” plays nothing yet: its sound is heard as soon as it plays"
                )),
                on,
            );
            wait_for_change(conn, stop)?;
            continue;
        }
        match record_app(conn, app, &now, stop, on, rep)? {
            AppEnded::Stop => return Ok(()),
            AppEnded::Changed => {}
            AppEnded::Refused(why) => {
                tracing::warn!(%app, reason = %why, "one application's sound cannot be recorded alone: the whole output is");
                let mut src = now[0].monitor.clone();
                src.description = format!(
                    "{}, everything playing there: {app}'s own sound cannot be heard alone \
                     here ({why})",
                    now[0].output
                );
                let choice = SourceChoice::Named(src.name.clone());
                if let Ended::Stop = record(conn, &src, &choice, Channel::System, stop, on, rep)? {
                    return Ok(());
                }
            }
        }
    }
}

/// Whether a stream's properties name `app` (its `application.name` or binary, any case).
fn is_app(props: &protocol::Props, app: &str) -> bool {
    [Prop::ApplicationName, Prop::ApplicationProcessBinary]
        .into_iter()
        .filter_map(|p| prop(props, p))
        .any(|v| v.eq_ignore_ascii_case(app))
}

/// The application's playback streams now.
fn playing(conn: &mut Conn, app: &str) -> Result<Vec<Playing>, ConnError> {
    let inputs: protocol::SinkInputInfoList = conn.request(Command::GetSinkInputInfoList)?;
    let mine: Vec<_> = inputs.iter().filter(|i| is_app(&i.props, app)).collect();
    if mine.is_empty() {
        return Ok(Vec::new());
    }
    let sinks: protocol::SinkInfoList = conn.request(Command::GetSinkInfoList)?;
    let sources = conn.sources()?;
    let mut out = Vec::new();
    for i in mine {
        let Some(sink) = sinks.iter().find(|s| s.index == i.sink_index) else {
            continue;
        };
        let Some(monitor) = sources
            .iter()
            .find(|s| Some(s.index) == sink.monitor_source_index)
        else {
            continue;
        };
        out.push(Playing {
            input: i.index,
            monitor: monitor.clone(),
            output: sink
                .description
                .as_ref()
                .map(|d| d.to_string_lossy().into_owned())
                .unwrap_or_else(|| sink.name.to_string_lossy().into_owned()),
        });
    }
    Ok(out)
}

/// Records the streams of `now`, mixed, until stopped or they change.
fn record_app(
    conn: &mut Conn,
    app: &str,
    now: &[Playing],
    stop: &AtomicBool,
    on: &mut dyn FnMut(Event<'_>),
    rep: &mut Reporter,
) -> Result<AppEnded, ConnError> {
    let rate = now[0].monitor.rate;
    let mut streams = Vec::new();
    for p in now {
        let mut src = p.monitor.clone();
        src.rate = rate;
        match open_stream(conn, &src, Channel::System, Some(p.input)) {
            Ok(Some(s)) => streams.push(s),
            Ok(None) => return close(conn, &streams, AppEnded::Changed),
            Err(ConnError::Refused(e)) if e != PulseError::NoEntity => {
                return close(conn, &streams, AppEnded::Refused(e.to_string()));
            }
            Err(e) => return Err(e),
        }
    }
    let mut shown = now[0].monitor.clone();
    shown.description = format!("{app} only (its own sound on {})", now[0].output);
    tracing::info!(%app, streams = streams.len(), rate, "recording one application's sound");
    rep.opened(&shown, on);
    let mut mix = Mixer::new(streams.len(), rate);
    let mut carry: Vec<Vec<u8>> = vec![Vec::new(); streams.len()];
    let mut samples = Vec::new();
    let mut last_data = Instant::now();
    loop {
        if stop.load(Ordering::SeqCst) {
            return close(conn, &streams, AppEnded::Stop);
        }
        let msg = conn.poll(TICK)?;
        let quiet = last_data.elapsed();
        if quiet >= GAP {
            samples.clear();
            samples.resize((quiet.as_secs_f64() * rate as f64) as usize, 0.0);
            last_data = Instant::now();
            mix.clear();
            on(Event::Audio {
                samples: &samples,
                rate,
            });
        }
        match msg {
            Some(Msg::Data { channel, bytes }) => {
                let Some(i) = streams.iter().position(|s| s.channel == channel) else {
                    continue;
                };
                last_data = Instant::now();
                decode(&mut carry[i], &bytes, &mut samples);
                mix.push(i, &samples);
                if mix.take(&mut samples) {
                    on(Event::Audio {
                        samples: &samples,
                        rate,
                    });
                }
            }
            Some(Msg::Command { cmd, .. }) => {
                let changed = match *cmd {
                    Command::RecordStreamKilled(ch) => streams.iter().any(|s| s.channel == ch),
                    Command::SubscribeEvent(ev) => {
                        ev.event_facility == SubscriptionEventFacility::SinkInput
                            && (ev.event_type != SubscriptionEventType::Changed
                                || ev.index.is_some_and(|i| now.iter().any(|p| p.input == i)))
                            && playing(conn, app)? != now
                    }
                    _ => false,
                };
                if changed {
                    return close(conn, &streams, AppEnded::Changed);
                }
            }
            _ => {}
        }
    }
}

/// Deletes the record streams (those the server already removed are no error).
fn close(
    conn: &mut Conn,
    streams: &[protocol::CreateRecordStreamReply],
    how: AppEnded,
) -> Result<AppEnded, ConnError> {
    for s in streams {
        match conn.ack(Command::DeleteRecordStream(s.channel)) {
            Ok(()) | Err(ConnError::Refused(_)) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(how)
}

/// The application's streams summed into one signal, in step: what all of them have sent is
/// handed on; one that sends nothing while another has sent half a second is taken as silent.
struct Mixer {
    queues: Vec<VecDeque<f32>>,
    lag: usize,
}

impl Mixer {
    fn new(n: usize, rate: u32) -> Mixer {
        Mixer {
            queues: vec![VecDeque::new(); n],
            lag: rate as usize / 2,
        }
    }

    fn push(&mut self, i: usize, samples: &[f32]) {
        self.queues[i].extend(samples.iter().copied());
    }

    fn clear(&mut self) {
        self.queues.iter_mut().for_each(VecDeque::clear);
    }

    /// The mixed samples ready, into `out` (`false`: none).
    fn take(&mut self, out: &mut Vec<f32>) -> bool {
        let most = self.queues.iter().map(VecDeque::len).max().unwrap_or(0);
        let least = self.queues.iter().map(VecDeque::len).min().unwrap_or(0);
        let n = if most >= self.lag { most } else { least };
        out.clear();
        if n == 0 {
            return false;
        }
        out.resize(n, 0.0);
        for q in &mut self.queues {
            for (o, x) in out.iter_mut().zip(q.drain(..n.min(q.len()))) {
                *o += x;
            }
        }
        for o in out.iter_mut() {
            *o = o.clamp(-1.0, 1.0);
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_mixed_in_step_and_a_silent_one_does_not_hold_the_rest() {
        let mut m = Mixer::new(2, 8);
        let mut out = Vec::new();
        m.push(0, &[0.1, 0.2, 0.3]);
        assert!(!m.take(&mut out), "the other has sent nothing yet");
        m.push(1, &[0.5, 0.5]);
        assert!(m.take(&mut out));
        assert_eq!(out, [0.6, 0.7]);
        // Stream 1 is quiet while 0 sends half a second (4 samples at 8 Hz): handed on alone.
        m.push(0, &[0.9, 0.9, 0.9]);
        assert!(m.take(&mut out));
        assert_eq!(out, [0.3, 0.9, 0.9, 0.9]);
        // One stream: as it comes.
        let mut one = Mixer::new(1, 8);
        one.push(0, &[0.25]);
        assert!(one.take(&mut out));
        assert_eq!(out, [0.25]);
    }
}
