//! Recording one source of a connection until it goes or a stop ([`record`]), and the pieces
//! every capture shares: the record stream ([`open_stream`], [`decode`]), what a channel
//! reports ([`Event`], [`Down`], through [`Reporter`]: each new reason for being down once)
//! and waiting for the server's notices ([`wait_for_change`]). The loop around them, which
//! never gives up, is `follow.rs`.

use super::conn::{broken, Conn, ConnError, Msg};
use super::source::{resolve, Source};
use pulseaudio::protocol::{
    self, stream::BufferAttr, stream::StreamFlags, ChannelMap, Command, Prop, Props, PulseError,
    SampleFormat, SampleSpec, SubscriptionEventFacility, SubscriptionEventType,
};
use stagewhisper_core::audio::{Channel, SourceChoice};
use std::ffi::CString;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The size of the fragments the server sends (its latency as well).
pub(super) const FRAGMENT: Duration = Duration::from_millis(50);
/// A source that sends nothing this long (a suspended device) is taken as silent for that time,
/// so a turn in progress still ends.
pub(super) const GAP: Duration = Duration::from_millis(300);
/// How often a waiting capture looks again without a notice from the server.
pub(super) const RECHECK: Duration = Duration::from_secs(2);
/// How often the loops look at their stop flag.
pub(super) const TICK: Duration = Duration::from_millis(100);

/// What a channel's capture reports.
#[derive(Debug)]
pub enum Event<'a> {
    /// Recording from this source (again, after a [`Event::Down`]).
    Opened(&'a Source),
    /// Mono samples at `rate`, in order. Zeros stand for time the source sent nothing (a
    /// suspended device), so time keeps going for the turns.
    Audio { samples: &'a [f32], rate: u32 },
    /// Not recording, and why; the capture keeps trying and sends [`Event::Opened`] when it
    /// records again.
    Down(Down),
}

/// Why a capture is not recording.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Down {
    /// No sound server (or it stopped answering).
    NoServer(String),
    /// The server is there but the source is not (removed, unplugged, no default).
    NoSource(String),
}

impl Down {
    pub fn reason(&self) -> &str {
        match self {
            Down::NoServer(s) | Down::NoSource(s) => s,
        }
    }
}

/// How a record stream ended.
pub(super) enum Ended {
    /// Told to stop.
    Stop,
    /// The source went away (why).
    Lost(String),
    /// Another source is meant now (the default changed): resolve and open again.
    Reopen,
}

/// Reports each new reason for being down once, and the source each time it opens.
pub(super) struct Reporter {
    channel: Channel,
    last_down: Option<Down>,
}

impl Reporter {
    /// A reporter for `channel` that has said nothing yet.
    pub(super) fn new(channel: Channel) -> Reporter {
        Reporter {
            channel,
            last_down: None,
        }
    }

    pub(super) fn down(&mut self, d: Down, on: &mut dyn FnMut(Event<'_>)) {
        if self.last_down.as_ref() != Some(&d) {
            tracing::info!(
                channel = self.channel.as_str(),
                reason = d.reason(),
                "capture down"
            );
            self.last_down = Some(d.clone());
            on(Event::Down(d));
        }
    }

    pub(super) fn opened(&mut self, src: &Source, on: &mut dyn FnMut(Event<'_>)) {
        self.last_down = None;
        on(Event::Opened(src));
    }
}

pub(super) fn label(channel: Channel) -> &'static str {
    match channel {
        Channel::Mic => "microphone",
        Channel::System => "call audio",
    }
}

/// Waits for a notice that sources, outputs or defaults changed (or [`RECHECK`]).
pub(super) fn wait_for_change(conn: &mut Conn, stop: &AtomicBool) -> Result<(), ConnError> {
    let until = Instant::now() + RECHECK;
    while !stop.load(Ordering::SeqCst) && Instant::now() < until {
        let notice = matches!(
            conn.poll(TICK)?,
            Some(Msg::Command { cmd, .. }) if matches!(*cmd, Command::SubscribeEvent(_))
        );
        if notice {
            // Let a burst of notices (a device brings a source and a sink) settle.
            let settle = Instant::now() + Duration::from_millis(100);
            while Instant::now() < settle {
                conn.poll(Duration::from_millis(20))?;
            }
            return Ok(());
        }
    }
    Ok(())
}

/// Records from `src` until told to stop or the source goes.
pub(super) fn record(
    conn: &mut Conn,
    src: &Source,
    choice: &SourceChoice,
    channel: Channel,
    stop: &AtomicBool,
    on: &mut dyn FnMut(Event<'_>),
    rep: &mut Reporter,
) -> Result<Ended, ConnError> {
    let Some(stream) = open_stream(conn, src, channel, None)? else {
        return Ok(Ended::Lost(gone(src)));
    };
    let rate = stream.sample_spec.sample_rate;
    tracing::info!(
        channel = channel.as_str(),
        source = %src.name,
        rate,
        "recording"
    );
    rep.opened(src, on);
    let mut samples: Vec<f32> = Vec::with_capacity(rate as usize / 10);
    let mut carry: Vec<u8> = Vec::new();
    let mut last_data = Instant::now();
    loop {
        if stop.load(Ordering::SeqCst) {
            return end(conn, &stream, Ended::Stop);
        }
        let msg = conn.poll(TICK)?;
        // Time the source sent nothing (suspended): silence, so turns still end.
        let quiet = last_data.elapsed();
        if quiet >= GAP {
            samples.clear();
            samples.resize((quiet.as_secs_f64() * rate as f64) as usize, 0.0);
            last_data = Instant::now();
            on(Event::Audio {
                samples: &samples,
                rate,
            });
        }
        let Some(msg) = msg else { continue };
        match msg {
            Msg::Data { channel: ch, bytes } if ch == stream.channel => {
                last_data = Instant::now();
                decode(&mut carry, &bytes, &mut samples);
                if !samples.is_empty() {
                    on(Event::Audio {
                        samples: &samples,
                        rate,
                    });
                }
            }
            Msg::Data { .. } | Msg::Reply { .. } => {}
            Msg::Command { cmd, .. } => {
                if let Some(how) = notice(conn, *cmd, &stream, src, choice, channel)? {
                    return Ok(how);
                }
            }
        }
    }
}

/// Opens a record stream of `src`: mono float samples at its rate, in fragments of about
/// [`FRAGMENT`]. `None`: the source went between the listing and the request.
pub(super) fn open_stream(
    conn: &mut Conn,
    src: &Source,
    channel: Channel,
    on_input: Option<u32>,
) -> Result<Option<protocol::CreateRecordStreamReply>, ConnError> {
    let rate = src.rate.clamp(8_000, 192_000);
    let fragment = (rate as u64 * FRAGMENT.as_millis() as u64 / 1000) as u32 * 4;
    let mut props = Props::new();
    if let Ok(n) = CString::new(format!("StageWhisper: {}", label(channel))) {
        props.set(Prop::MediaName, n);
    }
    let params = protocol::RecordStreamParams {
        sample_spec: SampleSpec {
            format: SampleFormat::Float32Le,
            channels: 1,
            sample_rate: rate,
        },
        channel_map: ChannelMap::mono(),
        source_index: Some(src.index),
        // Only what this sink input plays (the monitor of its sink, before mixing).
        direct_on_input_index: on_input,
        buffer_attr: BufferAttr {
            max_length: u32::MAX,
            fragment_size: fragment,
            ..Default::default()
        },
        flags: StreamFlags {
            adjust_latency: true,
            // The server must not move the stream (it would follow its default *source*,
            // also for the call's audio, whose "default" is the monitor of the default
            // output): this capture follows the defaults itself, and a source chosen by name
            // stays that source. The server kills the stream when its source goes.
            no_move: true,
            ..Default::default()
        },
        props,
        ..Default::default()
    };
    let stream: protocol::CreateRecordStreamReply =
        match conn.request(Command::CreateRecordStream(params)) {
            Ok(s) => s,
            // Gone between the listing and the request.
            Err(ConnError::Refused(PulseError::NoEntity | PulseError::Killed)) => return Ok(None),
            Err(e) => return Err(e),
        };
    let spec = stream.sample_spec;
    if spec.format != SampleFormat::Float32Le || spec.channels != 1 {
        let _ = conn.ack(Command::DeleteRecordStream(stream.channel));
        return Err(broken(format!(
            "it sent {spec:?} instead of mono float samples"
        )));
    }
    Ok(Some(stream))
}

/// The whole samples of the data received: `carry` keeps the bytes of a sample cut between two
/// messages.
pub(super) fn decode(carry: &mut Vec<u8>, bytes: &[u8], samples: &mut Vec<f32>) {
    carry.extend_from_slice(bytes);
    let whole = carry.len() / 4 * 4;
    samples.clear();
    samples.extend(
        carry[..whole]
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
    );
    carry.drain(..whole);
}

/// A notice from the server while recording: `Some` when the recording ends with it (the
/// stream killed or moved away, its source removed, another default meant now).
fn notice(
    conn: &mut Conn,
    cmd: Command,
    stream: &protocol::CreateRecordStreamReply,
    src: &Source,
    choice: &SourceChoice,
    channel: Channel,
) -> Result<Option<Ended>, ConnError> {
    match cmd {
        Command::RecordStreamKilled(ch) if ch == stream.channel => {
            return Ok(Some(Ended::Lost(gone(src))));
        }
        Command::RecordStreamMoved(m) if m.stream_index == stream.stream_index => {
            let to = m.device_name.to_string_lossy().into_owned();
            if to != src.name {
                // The server moved the stream away from a source that went: a named
                // choice waits for its own source; "default" follows the default.
                return end(
                    conn,
                    stream,
                    match choice {
                        SourceChoice::Named(_) => Ended::Lost(gone(src)),
                        _ => Ended::Reopen,
                    },
                )
                .map(Some);
            }
        }
        Command::SubscribeEvent(ev) => {
            let removed = ev.event_facility == SubscriptionEventFacility::Source
                && ev.event_type == SubscriptionEventType::Removed
                && ev.index == Some(src.index);
            if removed {
                return end(conn, stream, Ended::Lost(gone(src))).map(Some);
            }
            let defaults_may_change = matches!(choice, SourceChoice::Default)
                && (ev.event_facility == SubscriptionEventFacility::Server
                    || ev.event_type != SubscriptionEventType::Changed);
            if defaults_may_change {
                let now = conn.sources()?;
                if resolve(channel, choice, &now).map(|s| s.name) != Ok(src.name.clone()) {
                    return end(conn, stream, Ended::Reopen).map(Some);
                }
            }
        }
        Command::Overflow(ch) if ch == stream.channel => {
            tracing::warn!(
                channel = channel.as_str(),
                "the sound server dropped audio: this app read too slowly"
            );
        }
        _ => {}
    }
    Ok(None)
}

/// Deletes the record stream (one the server already removed is no error) and ends as `how`.
fn end(
    conn: &mut Conn,
    stream: &protocol::CreateRecordStreamReply,
    how: Ended,
) -> Result<Ended, ConnError> {
    match conn.ack(Command::DeleteRecordStream(stream.channel)) {
        Ok(()) | Err(ConnError::Refused(_)) => Ok(how),
        Err(e) => Err(e),
    }
}

pub(super) fn gone(src: &Source) -> String {
    format!(
        "“{}” is gone (unplugged or removed); listening resumes when it is back or another \
         source is chosen",
        src.description
    )
}
