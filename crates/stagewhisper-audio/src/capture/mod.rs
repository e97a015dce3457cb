//! The sound server: its sources (microphones and the monitors of outputs), record streams by
//! source name, and sources that disappear and come back.
//!
//! The app speaks the PulseAudio native protocol itself, over the server's unix socket, with the
//! wire format of the pure-Rust `pulseaudio` crate: no libpulse or libasound at build or run
//! time, and the same client for PulseAudio and PipeWire's pulse server. Its connections are
//! blocking on purpose: each lives on a thread of its own (a channel's capture thread, or a
//! `spawn_blocking` for a listing), never on the async runtime's workers, and every read and
//! write is bounded ([`IO_TIMEOUT`]).
//!
//! - [`locate`]: where the server is (`PULSE_SERVER`, `PULSE_RUNTIME_PATH`, `XDG_RUNTIME_DIR`,
//!   `/run/user/<uid>`), or why there is none, in plain words;
//! - [`sources`]: the microphones and monitors, with what `"default"` means for each channel
//!   ([`resolve`]): the server's default source for the microphone, the monitor of its default
//!   output for the call's audio;
//! - [`run`]: records one channel (mono at the source's rate, in about 50 ms fragments) until
//!   told to stop, through everything: no server yet, a source that is removed (a headset
//!   unplugged) and comes back, a default that changes, a server that restarts. It reports
//!   what happens as [`Event`]s and never gives up.
//!
//! | module | holds |
//! |---|---|
//! | `server` | where the server is ([`locate`]), [`CaptureError`], the authentication cookie |
//! | `conn` | one connection: the handshake, requests and replies, the messages between, the sources listed |
//! | `source` | a [`Source`], the order sources are listed in, [`resolve`] |
//! | `apps` | other applications' streams, metadata only: [`watch`] which record from a microphone (call detection) |
//! | `only_app` | the call's audio as one application's sound alone (`{"app": …}`): its playback streams recorded before mixing, followed as they come and go |
//! | `follow` | [`run`]: a channel's capture through everything (no server, a source gone, a restart), never giving up |
//! | `record` | one source recorded until it goes, the record stream, a channel's [`Event`]s |

mod apps;
mod conn;
mod follow;
mod only_app;
mod record;
mod server;
mod source;

pub use apps::{watch, MicStream, Seen, WatchHandle, Watcher};
pub use conn::IO_TIMEOUT;
pub use follow::run;
pub use record::{Down, Event};
pub use server::{locate, CaptureError};
pub use source::{resolve, Source};

use conn::Conn;

/// The sound server's sources, microphones first.
pub fn sources() -> Result<Vec<Source>, CaptureError> {
    let path = locate()?;
    let mut conn = Conn::open(&path, "StageWhisper: list of sources")?;
    Ok(conn.sources()?)
}
