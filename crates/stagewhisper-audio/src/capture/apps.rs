//! Other applications' streams, as metadata only: which application records from a
//! microphone ([`watch`], for call detection), and which plays what ([`playing`], for recording
//! one application's sound alone). Nothing here reads audio.
//!
//! The watcher holds one connection subscribed to the server's source-output and source events
//! and blocks on it with no time bound while nothing is pending: it costs nothing while the
//! person is not in a call. It wakes only for a notice, for the time its [`Watcher`] asks for,
//! or when [`WatchHandle::stop`] shuts its socket down.

use super::conn::{Conn, ConnError, Msg};
use super::server::{locate, CaptureError};
use pulseaudio::protocol::{
    self, Command, Prop, Props, SubscriptionEventFacility, SubscriptionEventType, SubscriptionMask,
};
use std::collections::{HashMap, HashSet};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// An application's record stream on a microphone (not a monitor).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MicStream {
    /// The server's index of the stream (a source output).
    pub index: u32,
    /// `application.name` (or the binary, or the stream's name when it has none).
    pub app: String,
    /// `application.process.binary`.
    pub binary: Option<String>,
}

/// What the watcher sees.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// Connected (again): the streams already open follow as [`Seen::Opened`].
    Up,
    /// No server, or it stopped answering (why, in plain words): every stream is gone.
    Down(String),
    Opened(MicStream),
    /// The stream closed, or moved to a monitor.
    Closed(u32),
    /// The time [`Watcher::wake_at`] asked for came.
    Wake,
}

/// What the watcher reports to.
pub trait Watcher {
    fn seen(&mut self, s: Seen);
    /// When to be woken without a notice (`None`: only for a notice).
    fn wake_at(&self) -> Option<Instant>;
}

/// Stops a [`watch`] from another thread.
#[derive(Default)]
pub struct WatchHandle {
    stop: AtomicBool,
    sock: Mutex<Option<UnixStream>>,
}

impl WatchHandle {
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(s) = self.sock.lock().unwrap().as_ref() {
            let _ = s.shutdown(Shutdown::Both);
        }
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }

    /// Waits `d` unless stopped first (without a server: the only waiting with a bound).
    fn pause(&self, d: Duration) {
        let until = Instant::now() + d;
        while !self.stopped() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(100).min(until - Instant::now()));
        }
    }
}

/// Watches the applications' microphone streams until stopped, reporting to `w` on this
/// thread. Without a server it says why once and tries again, less and less often (up to
/// every 30 s).
pub fn watch(h: &WatchHandle, w: &mut dyn Watcher) {
    let mut backoff = Duration::from_secs(1);
    let mut last_down: Option<String> = None;
    while !h.stopped() {
        let conn = locate().and_then(|p| Conn::open(&p, "StageWhisper: call detection"));
        let why = match conn {
            Ok(mut conn) => {
                backoff = Duration::from_secs(1);
                last_down = None;
                match conn.interrupter() {
                    Ok(s) => *h.sock.lock().unwrap() = Some(s),
                    Err(e) => tracing::warn!(error = %e, "call detection cannot be interrupted"),
                }
                if h.stopped() {
                    return;
                }
                w.seen(Seen::Up);
                let r = session(&mut conn, h, w);
                *h.sock.lock().unwrap() = None;
                match r {
                    Ok(()) => return,
                    Err(ConnError::Broken(why)) => why,
                    Err(ConnError::Refused(e)) => format!("the sound server refused: {e}"),
                }
            }
            Err(CaptureError::Unavailable(why) | CaptureError::Server(why)) => why,
        };
        if h.stopped() {
            return;
        }
        if last_down.as_ref() != Some(&why) {
            tracing::info!(reason = %why, "call detection down");
            w.seen(Seen::Down(why.clone()));
            last_down = Some(why);
        }
        h.pause(backoff);
        backoff = (backoff * 2).min(Duration::from_secs(30));
    }
}

/// What the session knows of the server.
struct Known {
    /// Source index → is a monitor.
    monitors: HashMap<u32, bool>,
    /// The microphone streams reported open.
    open: HashSet<u32>,
}

fn session(conn: &mut Conn, h: &WatchHandle, w: &mut dyn Watcher) -> Result<(), ConnError> {
    conn.ack(Command::Subscribe(
        SubscriptionMask::SOURCE_OUTPUT | SubscriptionMask::SOURCE,
    ))?;
    let mut k = Known {
        monitors: monitors(conn)?,
        open: HashSet::new(),
    };
    let list: protocol::SourceOutputInfoList = conn.request(Command::GetSourceOutputInfoList)?;
    for so in &list {
        consider(so, &mut k, w);
    }
    loop {
        if h.stopped() {
            return Ok(());
        }
        let wait = w
            .wake_at()
            .map(|t| t.saturating_duration_since(Instant::now()));
        let msg = match conn.wait(wait) {
            Err(e) if h.stopped() => {
                tracing::debug!("call detection stopped ({})", describe(&e));
                return Ok(());
            }
            r => r?,
        };
        let Some(msg) = msg else {
            w.seen(Seen::Wake);
            continue;
        };
        let Msg::Command { cmd, .. } = msg else {
            continue;
        };
        let Command::SubscribeEvent(ev) = *cmd else {
            continue;
        };
        match (ev.event_facility, ev.event_type, ev.index) {
            (SubscriptionEventFacility::Source, _, _) => k.monitors = monitors(conn)?,
            (SubscriptionEventFacility::SourceOutput, SubscriptionEventType::Removed, Some(i))
                if k.open.remove(&i) =>
            {
                w.seen(Seen::Closed(i));
            }
            (SubscriptionEventFacility::SourceOutput, SubscriptionEventType::Removed, _) => {}
            (SubscriptionEventFacility::SourceOutput, _, Some(i)) => {
                match conn.request::<protocol::SourceOutputInfo>(Command::GetSourceOutputInfo(i)) {
                    Ok(so) => {
                        if !k.monitors.contains_key(&so.source_index) {
                            k.monitors = monitors(conn)?;
                        }
                        consider(&so, &mut k, w)
                    }
                    // Gone before it could be looked at.
                    Err(ConnError::Refused(_)) => {
                        if k.open.remove(&i) {
                            w.seen(Seen::Closed(i));
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
            _ => {}
        }
    }
}

fn describe(e: &ConnError) -> String {
    match e {
        ConnError::Broken(why) => why.clone(),
        ConnError::Refused(e) => e.to_string(),
    }
}

/// Reports a stream opened when it is another application's on a microphone, closed when a
/// stream reported open is no longer one (moved to a monitor).
fn consider(so: &protocol::SourceOutputInfo, k: &mut Known, w: &mut dyn Watcher) {
    let is_mic = k.monitors.get(&so.source_index) == Some(&false);
    let stream = (is_mic && so.client_index.is_some())
        .then(|| mic_stream(so.index, &so.props))
        .flatten();
    match stream {
        Some(s) => {
            if k.open.insert(so.index) {
                w.seen(Seen::Opened(s));
            }
        }
        None => {
            if k.open.remove(&so.index) {
                w.seen(Seen::Closed(so.index));
            }
        }
    }
}

fn monitors(conn: &mut Conn) -> Result<HashMap<u32, bool>, ConnError> {
    let list: protocol::SourceInfoList = conn.request(Command::GetSourceInfoList)?;
    Ok(list
        .iter()
        .map(|s| {
            (
                s.index,
                s.monitor_of_sink_index.is_some() || s.monitor_of_sink_name.is_some(),
            )
        })
        .collect())
}

/// A property as text (without its terminating NUL), when set and not blank.
pub(super) fn prop(props: &Props, p: Prop) -> Option<String> {
    let v = props.get(p)?;
    let v = v.strip_suffix(&[0]).unwrap_or(v);
    let s = String::from_utf8_lossy(v).trim().to_string();
    (!s.is_empty()).then_some(s)
}

/// Another application's stream (`None`: this app's own, or a level meter's).
fn mic_stream(index: u32, props: &Props) -> Option<MicStream> {
    let ours = prop(props, Prop::ApplicationProcessId)
        .is_some_and(|p| p == std::process::id().to_string())
        || prop(props, Prop::ApplicationId).is_some_and(|id| id == "stagewhisper");
    // pavucontrol's level meters record every source (peak detection, no audio kept).
    let meter =
        prop(props, Prop::ApplicationId).is_some_and(|id| id == "org.PulseAudio.pavucontrol");
    if ours || meter {
        return None;
    }
    let binary = prop(props, Prop::ApplicationProcessBinary);
    let app = prop(props, Prop::ApplicationName)
        .or_else(|| binary.clone())
        .or_else(|| prop(props, Prop::MediaName))?;
    Some(MicStream { index, app, binary })
}
