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

use pulseaudio::protocol::{
    self, stream::BufferAttr, stream::StreamFlags, ChannelMap, Command, Prop, Props, PulseError,
    SampleFormat, SampleSpec, SubscriptionEventFacility, SubscriptionEventType, SubscriptionMask,
};
use stagewhisper_core::audio::{Channel, SourceChoice, SourceKind, SourceView};
use std::collections::VecDeque;
use std::ffi::CString;
use std::io::{BufRead, BufReader, Cursor, ErrorKind, Read};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Bound of one read or write of a message once it has begun, and of the handshake.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// The size of the fragments the server sends (its latency as well).
const FRAGMENT: Duration = Duration::from_millis(50);
/// A source that sends nothing this long (a suspended device) is taken as silent for that time,
/// so a turn in progress still ends.
const GAP: Duration = Duration::from_millis(300);
/// How often a waiting capture looks again without a notice from the server.
const RECHECK: Duration = Duration::from_secs(2);
/// How often the loops look at their stop flag.
const TICK: Duration = Duration::from_millis(100);
/// The longest message the app accepts from the server (the protocol's own bound).
const MAX_MESSAGE: u32 = protocol::MAX_MEMBLOCKQ_LENGTH as u32;

/// Why the sound server cannot be used, in plain words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaptureError {
    /// No sound server could be reached.
    #[error("{0}")]
    Unavailable(String),
    /// The server answered something unexpected, refused a request or stopped answering.
    #[error("{0}")]
    Server(String),
}

/// A source of the sound server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The server's index (changes when the device comes back).
    pub index: u32,
    pub name: String,
    pub description: String,
    pub kind: SourceKind,
    /// The default source (a microphone) or the monitor of the default output (a monitor).
    pub is_default: bool,
    /// Its native sample rate: what the app records at.
    pub rate: u32,
}

impl Source {
    pub fn view(&self) -> SourceView {
        SourceView {
            name: self.name.clone(),
            description: self.description.clone(),
            kind: self.kind,
            is_default: self.is_default,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Where the server is
// ---------------------------------------------------------------------------------------------

/// The socket of the sound server, or why there is none (in plain words). Looks where libpulse
/// does: `PULSE_SERVER` (`unix:PATH` or a path; several may be given, separated by spaces),
/// then `$PULSE_RUNTIME_PATH/native`, `$XDG_RUNTIME_DIR/pulse/native`,
/// `/run/user/<uid>/pulse/native` and the system-wide `/var/run/pulse/native`. PipeWire's pulse
/// server listens at the same places.
pub fn locate() -> Result<PathBuf, CaptureError> {
    let uid = std::fs::metadata("/proc/self").map(|m| m.uid()).ok();
    locate_in(&|k| std::env::var(k).ok().filter(|v| !v.is_empty()), uid)
}

fn locate_in(
    env: &dyn Fn(&str) -> Option<String>,
    uid: Option<u32>,
) -> Result<PathBuf, CaptureError> {
    if let Some(list) = env("PULSE_SERVER") {
        let mut remote = Vec::new();
        let mut tried = Vec::new();
        for entry in list.split_whitespace() {
            // `{machine-id}unix:/path`: the prefix names the machine the entry is for.
            let entry = match entry.strip_prefix('{') {
                Some(rest) => rest.split_once('}').map_or(rest, |(_, e)| e),
                None => entry,
            };
            let path = match entry.strip_prefix("unix:") {
                Some(p) => PathBuf::from(p),
                None if entry.starts_with('/') => PathBuf::from(entry),
                None => {
                    remote.push(entry.to_string());
                    continue;
                }
            };
            if is_socket(&path) {
                return Ok(path);
            }
            tried.push(path.display().to_string());
        }
        return Err(CaptureError::Unavailable(if tried.is_empty() {
            format!(
                "PULSE_SERVER names a network sound server ({}); this app records from a sound \
                 server on this computer only",
                remote.join(", ")
            )
        } else {
            format!(
                "no sound server is listening at {} (from PULSE_SERVER)",
                tried.join(", ")
            )
        }));
    }
    let mut candidates = Vec::new();
    if let Some(p) = env("PULSE_RUNTIME_PATH") {
        candidates.push(PathBuf::from(p).join("native"));
    }
    match env("XDG_RUNTIME_DIR") {
        Some(p) => candidates.push(PathBuf::from(p).join("pulse/native")),
        None => {
            if let Some(uid) = uid {
                candidates.push(PathBuf::from(format!("/run/user/{uid}/pulse/native")));
            }
        }
    }
    candidates.push(PathBuf::from("/var/run/pulse/native"));
    if let Some(found) = candidates.iter().find(|p| is_socket(p)) {
        return Ok(found.clone());
    }
    Err(CaptureError::Unavailable(format!(
        "no sound server is running (PulseAudio or PipeWire): nothing listens at {}",
        candidates
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(" or ")
    )))
}

fn is_socket(p: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::metadata(p).is_ok_and(|m| m.file_type().is_socket())
}

/// The length of a cookie in the protocol's `AUTH` command: the server reads exactly this many
/// bytes and kicks a client that sends fewer, even when it accepts anyone (`auth-anonymous`).
const COOKIE_LENGTH: usize = 256;

/// The authentication cookie, where libpulse looks for it (PipeWire needs none). Without one
/// (a user who never ran a libpulse client, a fresh machine), zeros of the right length: a
/// server that accepts anonymous clients (PipeWire, `auth-anonymous=1`, the system server's
/// group check) lets the app in; one that wants the cookie refuses it in plain words.
fn cookie() -> Vec<u8> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let mut paths: Vec<PathBuf> = std::env::var_os("PULSE_COOKIE")
        .map(PathBuf::from)
        .into_iter()
        .collect();
    if let Some(h) = home {
        paths.push(h.join(".config/pulse/cookie"));
        paths.push(h.join(".pulse-cookie"));
    }
    paths
        .iter()
        .find_map(|p| std::fs::read(p).ok().filter(|c| c.len() == COOKIE_LENGTH))
        .unwrap_or_else(|| vec![0; COOKIE_LENGTH])
}

// ---------------------------------------------------------------------------------------------
// One connection
// ---------------------------------------------------------------------------------------------

/// A message from the server.
enum Msg {
    /// Samples of a record stream.
    Data { channel: u32, bytes: Vec<u8> },
    /// A reply: its payload starts at `at`.
    Reply { seq: u32, body: Vec<u8>, at: usize },
    /// An error reply, or an event (stream killed or moved, a subscription event, …).
    Command { seq: u32, cmd: Box<Command> },
}

/// Why a request failed.
enum ConnError {
    /// The server refused it.
    Refused(PulseError),
    /// The connection is broken or the server stopped answering.
    Broken(String),
}

impl From<ConnError> for CaptureError {
    fn from(e: ConnError) -> Self {
        match e {
            ConnError::Refused(e) => CaptureError::Server(format!("the sound server refused: {e}")),
            ConnError::Broken(why) => CaptureError::Server(why),
        }
    }
}

fn broken(e: impl std::fmt::Display) -> ConnError {
    ConnError::Broken(format!("the sound server stopped answering ({e})"))
}

fn io_broken(e: std::io::Error) -> ConnError {
    match e.kind() {
        ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset | ErrorKind::BrokenPipe => {
            ConnError::Broken("the sound server closed the connection".into())
        }
        ErrorKind::WouldBlock | ErrorKind::TimedOut => {
            ConnError::Broken("the sound server stopped answering (timed out)".into())
        }
        _ => broken(e),
    }
}

fn proto_broken(e: protocol::ProtocolError) -> ConnError {
    match e {
        protocol::ProtocolError::Io(e) => io_broken(e),
        protocol::ProtocolError::ServerError(e) => ConnError::Refused(e),
        e => broken(e),
    }
}

struct Conn {
    sock: BufReader<UnixStream>,
    version: u16,
    next_seq: u32,
    /// Messages that arrived while waiting for a reply, handed out first by [`Conn::poll`].
    pending: VecDeque<Msg>,
}

impl Conn {
    fn open(path: &Path, what: &str) -> Result<Conn, CaptureError> {
        let stream = UnixStream::connect(path).map_err(|e| {
            CaptureError::Unavailable(match e.kind() {
                ErrorKind::ConnectionRefused | ErrorKind::NotFound => format!(
                    "no sound server is running (nothing answers at {})",
                    path.display()
                ),
                ErrorKind::PermissionDenied => format!(
                    "this app may not use the sound server at {} (permission denied)",
                    path.display()
                ),
                _ => format!("cannot reach the sound server at {}: {e}", path.display()),
            })
        })?;
        let setup = |s: &UnixStream| {
            s.set_read_timeout(Some(IO_TIMEOUT))?;
            s.set_write_timeout(Some(IO_TIMEOUT))
        };
        setup(&stream).map_err(|e| CaptureError::Server(e.to_string()))?;
        let mut conn = Conn {
            sock: BufReader::with_capacity(64 * 1024, stream),
            version: protocol::MAX_VERSION,
            next_seq: 0,
            pending: VecDeque::new(),
        };
        let auth: protocol::AuthReply = conn
            .request(Command::Auth(protocol::AuthParams {
                version: protocol::MAX_VERSION,
                supports_shm: false,
                supports_memfd: false,
                cookie: cookie(),
            }))
            .map_err(|e| match e {
                ConnError::Refused(PulseError::AccessDenied | PulseError::AuthKey) => {
                    CaptureError::Unavailable(format!(
                        "the sound server at {} refused this app (no valid authentication \
                         cookie)",
                        path.display()
                    ))
                }
                e => CaptureError::from(e),
            })?;
        conn.version = protocol::MAX_VERSION.min(auth.version);
        if conn.version < protocol::MIN_VERSION {
            return Err(CaptureError::Unavailable(format!(
                "the sound server at {} speaks a protocol too old for this app (version {})",
                path.display(),
                auth.version
            )));
        }
        let mut props = Props::new();
        props.set(Prop::ApplicationName, c"StageWhisper");
        props.set(Prop::ApplicationId, c"stagewhisper");
        if let Ok(pid) = CString::new(std::process::id().to_string()) {
            props.set(Prop::ApplicationProcessId, pid);
        }
        if let Ok(what) = CString::new(what) {
            props.set(Prop::MediaName, what);
        }
        let _: protocol::SetClientNameReply = conn.request(Command::SetClientName(props))?;
        Ok(conn)
    }

    fn send(&mut self, cmd: &Command) -> Result<u32, ConnError> {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        protocol::write_command_message(self.sock.get_mut(), seq, cmd, self.version)
            .map_err(proto_broken)?;
        Ok(seq)
    }

    /// One whole message (blocking, bounded by [`IO_TIMEOUT`]).
    fn read_msg(&mut self) -> Result<Msg, ConnError> {
        let desc = protocol::read_descriptor(&mut self.sock).map_err(proto_broken)?;
        if desc.length > MAX_MESSAGE {
            return Err(broken(format!("a message of {} bytes", desc.length)));
        }
        let mut body = vec![0u8; desc.length as usize];
        self.sock.read_exact(&mut body).map_err(io_broken)?;
        if desc.channel != u32::MAX {
            return Ok(Msg::Data {
                channel: desc.channel,
                bytes: body,
            });
        }
        let mut cur = Cursor::new(&body[..]);
        let (seq, cmd) =
            Command::read_tag_prefixed(&mut cur, self.version).map_err(proto_broken)?;
        if matches!(cmd, Command::Reply) {
            let at = cur.position() as usize;
            return Ok(Msg::Reply { seq, body, at });
        }
        Ok(Msg::Command {
            seq,
            cmd: Box::new(cmd),
        })
    }

    /// Sends `cmd` and waits for its reply; what arrives meanwhile is kept for [`Conn::poll`].
    fn request<T: protocol::TagStructRead>(&mut self, cmd: Command) -> Result<T, ConnError> {
        let seq = self.send(&cmd)?;
        loop {
            match self.read_msg()? {
                Msg::Reply { seq: s, body, at } if s == seq => {
                    let mut cur = Cursor::new(&body[at..]);
                    return protocol::TagStructReader::new(&mut cur, self.version)
                        .read::<T>()
                        .map_err(proto_broken);
                }
                Msg::Command { seq: s, cmd } if s == seq => {
                    if let Command::Error(e) = *cmd {
                        return Err(ConnError::Refused(e));
                    }
                }
                other => self.pending.push_back(other),
            }
        }
    }

    /// Sends `cmd` and waits for its acknowledgement.
    fn ack(&mut self, cmd: Command) -> Result<(), ConnError> {
        let seq = self.send(&cmd)?;
        loop {
            match self.read_msg()? {
                Msg::Reply { seq: s, .. } if s == seq => return Ok(()),
                Msg::Command { seq: s, cmd } if s == seq => {
                    if let Command::Error(e) = *cmd {
                        return Err(ConnError::Refused(e));
                    }
                }
                other => self.pending.push_back(other),
            }
        }
    }

    /// The next message, waiting at most `wait` for one to begin (`None`: nothing came).
    fn poll(&mut self, wait: Duration) -> Result<Option<Msg>, ConnError> {
        if let Some(m) = self.pending.pop_front() {
            return Ok(Some(m));
        }
        if self.sock.buffer().is_empty() {
            let s = self.sock.get_ref();
            s.set_read_timeout(Some(wait.max(Duration::from_millis(1))))
                .map_err(io_broken)?;
            let got = self.sock.fill_buf().map(|b| b.len());
            self.sock
                .get_ref()
                .set_read_timeout(Some(IO_TIMEOUT))
                .map_err(io_broken)?;
            match got {
                Ok(0) => {
                    return Err(ConnError::Broken(
                        "the sound server closed the connection".into(),
                    ))
                }
                Ok(_) => {}
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return Ok(None)
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => return Ok(None),
                Err(e) => return Err(io_broken(e)),
            }
        }
        self.read_msg().map(Some)
    }

    fn sources(&mut self) -> Result<Vec<Source>, ConnError> {
        let info: protocol::ServerInfo = self.request(Command::GetServerInfo)?;
        let list: protocol::SourceInfoList = self.request(Command::GetSourceInfoList)?;
        let text = |s: &CString| s.to_string_lossy().into_owned();
        let default_source = info.default_source_name.as_ref().map(text);
        let default_sink = info.default_sink_name.as_ref().map(text);
        Ok(order(
            list.iter()
                .map(|s| {
                    let name = text(&s.name);
                    let monitor_of = s.monitor_of_sink_name.as_ref().map(text);
                    let kind = if s.monitor_of_sink_index.is_some() || monitor_of.is_some() {
                        SourceKind::Monitor
                    } else {
                        SourceKind::Microphone
                    };
                    let is_default = match kind {
                        SourceKind::Microphone => default_source.as_deref() == Some(name.as_str()),
                        SourceKind::Monitor => {
                            monitor_of.is_some() && monitor_of.as_deref() == default_sink.as_deref()
                        }
                    };
                    Source {
                        index: s.index,
                        description: s
                            .description
                            .as_ref()
                            .map(text)
                            .filter(|d| !d.trim().is_empty())
                            .unwrap_or_else(|| name.clone()),
                        name,
                        kind,
                        is_default,
                        rate: s.sample_spec.sample_rate,
                    }
                })
                .collect(),
        ))
    }
}

/// Microphones first, then monitors; the default first within each; then by description.
fn order(mut v: Vec<Source>) -> Vec<Source> {
    v.sort_by(|a, b| {
        let key = |s: &Source| (s.kind == SourceKind::Monitor, !s.is_default);
        key(a)
            .cmp(&key(b))
            .then_with(|| {
                a.description
                    .to_lowercase()
                    .cmp(&b.description.to_lowercase())
            })
            .then_with(|| a.name.cmp(&b.name))
    });
    v
}

/// The sound server's sources, microphones first.
pub fn sources() -> Result<Vec<Source>, CaptureError> {
    let path = locate()?;
    let mut conn = Conn::open(&path, "StageWhisper: list of sources")?;
    Ok(conn.sources()?)
}

/// The source a channel's choice means, or why there is none (in plain words).
///
/// `"default"` is the server's default source for the microphone (unless that is the monitor
/// of an output, as on a machine with no microphone: then there is none) and the monitor of the
/// server's default output for the call's audio.
pub fn resolve(
    channel: Channel,
    choice: &SourceChoice,
    sources: &[Source],
) -> Result<Source, String> {
    match choice {
        SourceChoice::Off => Err("off".into()),
        SourceChoice::Named(name) => sources
            .iter()
            .find(|s| &s.name == name)
            .cloned()
            .ok_or_else(|| format!("the source “{name}” is not there (unplugged or removed)")),
        SourceChoice::Default => {
            let want = match channel {
                Channel::Mic => SourceKind::Microphone,
                Channel::System => SourceKind::Monitor,
            };
            sources
                .iter()
                .find(|s| s.is_default && s.kind == want)
                .cloned()
                .ok_or_else(|| match channel {
                    Channel::Mic => {
                        "there is no microphone (the sound server has no default input)".to_string()
                    }
                    Channel::System => {
                        "there is no output device to take the call's audio from (the sound \
                         server has no default output)"
                            .to_string()
                    }
                })
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Recording
// ---------------------------------------------------------------------------------------------

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
enum Ended {
    /// Told to stop.
    Stop,
    /// The source went away (why).
    Lost(String),
    /// Another source is meant now (the default changed): resolve and open again.
    Reopen,
}

/// Reports each new reason for being down once, and the source each time it opens.
struct Reporter {
    channel: Channel,
    last_down: Option<Down>,
}

impl Reporter {
    fn down(&mut self, d: Down, on: &mut dyn FnMut(Event<'_>)) {
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

    fn opened(&mut self, src: &Source, on: &mut dyn FnMut(Event<'_>)) {
        self.last_down = None;
        on(Event::Opened(src));
    }
}

/// Records `choice` for `channel` until `stop` is set, reporting through `on` (on this thread).
/// Never gives up: without a server or a source it waits (notified by the server when it can
/// be, looking again every few seconds otherwise) and reports each new reason once.
pub fn run(
    channel: Channel,
    choice: &SourceChoice,
    stop: &AtomicBool,
    on: &mut dyn FnMut(Event<'_>),
) {
    let mut rep = Reporter {
        channel,
        last_down: None,
    };
    let mut wait = Duration::from_millis(250);
    while !stop.load(Ordering::SeqCst) {
        let conn =
            locate().and_then(|p| Conn::open(&p, &format!("StageWhisper: {}", label(channel))));
        let mut conn = match conn {
            Ok(c) => c,
            Err(e) => {
                rep.down(Down::NoServer(e.to_string()), on);
                sleep(stop, wait);
                wait = (wait * 2).min(RECHECK);
                continue;
            }
        };
        wait = Duration::from_millis(250);
        match session(&mut conn, channel, choice, stop, on, &mut rep) {
            Ok(()) => return,
            Err(e) => {
                let why = match e {
                    ConnError::Broken(why) => why,
                    ConnError::Refused(e) => format!("the sound server refused: {e}"),
                };
                rep.down(Down::NoServer(why), on);
                sleep(stop, wait);
            }
        }
    }
}

fn label(channel: Channel) -> &'static str {
    match channel {
        Channel::Mic => "microphone",
        Channel::System => "call audio",
    }
}

fn sleep(stop: &AtomicBool, d: Duration) {
    let until = Instant::now() + d;
    while !stop.load(Ordering::SeqCst) {
        let now = Instant::now();
        if now >= until {
            return;
        }
        std::thread::sleep((until - now).min(TICK));
    }
}

/// One connection's life: resolve the source, record until it goes, wait for it, again.
fn session(
    conn: &mut Conn,
    channel: Channel,
    choice: &SourceChoice,
    stop: &AtomicBool,
    on: &mut dyn FnMut(Event<'_>),
    rep: &mut Reporter,
) -> Result<(), ConnError> {
    conn.ack(Command::Subscribe(
        SubscriptionMask::SOURCE | SubscriptionMask::SINK | SubscriptionMask::SERVER,
    ))?;
    // The source that went, to keep saying it by the name people know.
    let mut lost: Option<Source> = None;
    loop {
        if stop.load(Ordering::SeqCst) {
            return Ok(());
        }
        let sources = conn.sources()?;
        let src = match resolve(channel, choice, &sources) {
            Ok(s) => s,
            Err(why) => {
                let why = match (&lost, choice) {
                    (Some(l), SourceChoice::Named(n)) if &l.name == n => gone(l),
                    _ => why,
                };
                rep.down(Down::NoSource(why), on);
                wait_for_change(conn, stop)?;
                continue;
            }
        };
        match record(conn, &src, choice, channel, stop, on, rep)? {
            Ended::Stop => return Ok(()),
            Ended::Lost(why) => {
                lost = Some(src);
                rep.down(Down::NoSource(why), on)
            }
            Ended::Reopen => {}
        }
    }
}

/// Waits for a notice that sources, outputs or defaults changed (or [`RECHECK`]).
fn wait_for_change(conn: &mut Conn, stop: &AtomicBool) -> Result<(), ConnError> {
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
fn record(
    conn: &mut Conn,
    src: &Source,
    choice: &SourceChoice,
    channel: Channel,
    stop: &AtomicBool,
    on: &mut dyn FnMut(Event<'_>),
    rep: &mut Reporter,
) -> Result<Ended, ConnError> {
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
            Err(ConnError::Refused(PulseError::NoEntity | PulseError::Killed)) => {
                return Ok(Ended::Lost(gone(src)))
            }
            Err(e) => return Err(e),
        };
    let spec = stream.sample_spec;
    if spec.format != SampleFormat::Float32Le || spec.channels != 1 {
        let _ = conn.ack(Command::DeleteRecordStream(stream.channel));
        return Err(broken(format!(
            "it sent {spec:?} instead of mono float samples"
        )));
    }
    let rate = spec.sample_rate;
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
    let end = |conn: &mut Conn, how: Ended| -> Result<Ended, ConnError> {
        match conn.ack(Command::DeleteRecordStream(stream.channel)) {
            Ok(()) | Err(ConnError::Refused(_)) => Ok(how),
            Err(e) => Err(e),
        }
    };
    loop {
        if stop.load(Ordering::SeqCst) {
            return end(conn, Ended::Stop);
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
                carry.extend_from_slice(&bytes);
                let whole = carry.len() / 4 * 4;
                samples.clear();
                samples.extend(
                    carry[..whole]
                        .chunks_exact(4)
                        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                );
                carry.drain(..whole);
                if !samples.is_empty() {
                    on(Event::Audio {
                        samples: &samples,
                        rate,
                    });
                }
            }
            Msg::Data { .. } | Msg::Reply { .. } => {}
            Msg::Command { cmd, .. } => match *cmd {
                Command::RecordStreamKilled(ch) if ch == stream.channel => {
                    return Ok(Ended::Lost(gone(src)));
                }
                Command::RecordStreamMoved(m) if m.stream_index == stream.stream_index => {
                    let to = m.device_name.to_string_lossy().into_owned();
                    if to != src.name {
                        // The server moved the stream away from a source that went: a named
                        // choice waits for its own source; "default" follows the default.
                        return end(
                            conn,
                            match choice {
                                SourceChoice::Named(_) => Ended::Lost(gone(src)),
                                _ => Ended::Reopen,
                            },
                        );
                    }
                }
                Command::SubscribeEvent(ev) => {
                    let removed = ev.event_facility == SubscriptionEventFacility::Source
                        && ev.event_type == SubscriptionEventType::Removed
                        && ev.index == Some(src.index);
                    if removed {
                        return end(conn, Ended::Lost(gone(src)));
                    }
                    let defaults_may_change = matches!(choice, SourceChoice::Default)
                        && (ev.event_facility == SubscriptionEventFacility::Server
                            || ev.event_type != SubscriptionEventType::Changed);
                    if defaults_may_change {
                        let now = conn.sources()?;
                        if resolve(channel, choice, &now).map(|s| s.name) != Ok(src.name.clone()) {
                            return end(conn, Ended::Reopen);
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
            },
        }
    }
}

fn gone(src: &Source) -> String {
    format!(
        "“{}” is gone (unplugged or removed); listening resumes when it is back or another \
         source is chosen",
        src.description
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    fn socket_in(dir: &Path, rel: &str) -> PathBuf {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        // A bound listener is a socket on disk; kept alive by leaking it for the test.
        std::mem::forget(std::os::unix::net::UnixListener::bind(&p).unwrap());
        p
    }

    #[test]
    fn the_server_is_found_where_libpulse_looks() {
        let dir = tempfile::tempdir().unwrap();
        let xdg = socket_in(dir.path(), "xdg/pulse/native");
        let runtime = socket_in(dir.path(), "runtime/native");
        let direct = socket_in(dir.path(), "direct.sock");
        let d = dir.path().display().to_string();
        // PULSE_SERVER first, with a machine prefix and a dead entry before the live one.
        let server = format!("{{abc}}unix:{d}/nothing unix:{}", direct.display());
        assert_eq!(
            locate_in(
                &env(&[
                    ("PULSE_SERVER", &server),
                    ("XDG_RUNTIME_DIR", &format!("{d}/xdg"))
                ]),
                None
            )
            .unwrap(),
            direct
        );
        assert_eq!(
            locate_in(
                &env(&[
                    ("PULSE_RUNTIME_PATH", &format!("{d}/runtime")),
                    ("XDG_RUNTIME_DIR", &format!("{d}/xdg"))
                ]),
                None
            )
            .unwrap(),
            runtime
        );
        assert_eq!(
            locate_in(&env(&[("XDG_RUNTIME_DIR", &format!("{d}/xdg"))]), None).unwrap(),
            xdg
        );
        // A plain file is not a server.
        std::fs::write(dir.path().join("file"), b"x").unwrap();
        let e = locate_in(&env(&[("PULSE_SERVER", &format!("{d}/file"))]), None).unwrap_err();
        assert!(
            e.to_string().contains("no sound server is listening at"),
            "{e}"
        );
        let e = locate_in(&env(&[("PULSE_SERVER", "tcp:10.0.0.2:4713")]), None).unwrap_err();
        assert!(e.to_string().contains("network sound server"), "{e}");
        let e = locate_in(&env(&[("XDG_RUNTIME_DIR", &format!("{d}/none"))]), None).unwrap_err();
        assert!(
            e.to_string().starts_with("no sound server is running")
                && e.to_string().contains(&format!("{d}/none/pulse/native")),
            "{e}"
        );
    }

    fn src(name: &str, kind: SourceKind, is_default: bool) -> Source {
        Source {
            index: 0,
            name: name.into(),
            description: format!("{name} device"),
            kind,
            is_default,
            rate: 48_000,
        }
    }

    #[test]
    fn default_means_the_default_input_and_the_monitor_of_the_default_output() {
        let list = order(vec![
            src("call.monitor", SourceKind::Monitor, true),
            src("usb", SourceKind::Microphone, false),
            src("mic", SourceKind::Microphone, true),
            src("hdmi.monitor", SourceKind::Monitor, false),
        ]);
        let names: Vec<_> = list.iter().map(|s| s.name.as_str()).collect();
        assert_eq!(names, ["mic", "usb", "call.monitor", "hdmi.monitor"]);
        assert_eq!(
            resolve(Channel::Mic, &SourceChoice::Default, &list)
                .unwrap()
                .name,
            "mic"
        );
        assert_eq!(
            resolve(Channel::System, &SourceChoice::Default, &list)
                .unwrap()
                .name,
            "call.monitor"
        );
        assert_eq!(
            resolve(
                Channel::Mic,
                &SourceChoice::Named("hdmi.monitor".into()),
                &list
            )
            .unwrap()
            .name,
            "hdmi.monitor"
        );
        let e = resolve(Channel::Mic, &SourceChoice::Named("headset".into()), &list).unwrap_err();
        assert!(e.contains("“headset” is not there"), "{e}");
        // No microphone: the default input being a monitor does not make it one.
        let only_monitors = vec![src("call.monitor", SourceKind::Monitor, true)];
        let e = resolve(Channel::Mic, &SourceChoice::Default, &only_monitors).unwrap_err();
        assert!(e.contains("no microphone"), "{e}");
    }
}
