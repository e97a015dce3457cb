//! One connection to the sound server ([`Conn`]): the handshake, requests and their replies,
//! the messages that arrive meanwhile (data of record streams, events), and the sources listed.
//! Blocking, and every read and write bounded ([`IO_TIMEOUT`]).

use super::server::{cookie, CaptureError};
use super::source::{order, Source};
use pulseaudio::protocol::{self, Command, Prop, Props, PulseError};
use stagewhisper_core::audio::SourceKind;
use std::collections::VecDeque;
use std::ffi::CString;
use std::io::{BufRead, BufReader, Cursor, ErrorKind, Read};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

/// Bound of one read or write of a message once it has begun, and of the handshake.
pub const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest message the app accepts from the server (the protocol's own bound).
const MAX_MESSAGE: u32 = protocol::MAX_MEMBLOCKQ_LENGTH as u32;

/// A message from the server.
pub(super) enum Msg {
    /// Samples of a record stream.
    Data { channel: u32, bytes: Vec<u8> },
    /// A reply: its payload starts at `at`.
    Reply { seq: u32, body: Vec<u8>, at: usize },
    /// An error reply, or an event (stream killed or moved, a subscription event, …).
    Command { seq: u32, cmd: Box<Command> },
}

/// Why a request failed.
pub(super) enum ConnError {
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

pub(super) fn broken(e: impl std::fmt::Display) -> ConnError {
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

pub(super) struct Conn {
    sock: BufReader<UnixStream>,
    version: u16,
    next_seq: u32,
    /// Messages that arrived while waiting for a reply, handed out first by [`Conn::poll`].
    pending: VecDeque<Msg>,
}

impl Conn {
    pub fn open(path: &Path, what: &str) -> Result<Conn, CaptureError> {
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
    pub fn request<T: protocol::TagStructRead>(&mut self, cmd: Command) -> Result<T, ConnError> {
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
    pub fn ack(&mut self, cmd: Command) -> Result<(), ConnError> {
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
    pub fn poll(&mut self, wait: Duration) -> Result<Option<Msg>, ConnError> {
        self.wait(Some(wait))
    }

    /// A handle on the socket: shutting it down wakes a [`Conn::wait`] without a bound.
    pub fn interrupter(&self) -> std::io::Result<UnixStream> {
        self.sock.get_ref().try_clone()
    }

    /// The next message, waiting at most `wait` for one to begin (`None`: as long as it takes;
    /// no wake-ups meanwhile).
    pub fn wait(&mut self, wait: Option<Duration>) -> Result<Option<Msg>, ConnError> {
        if let Some(m) = self.pending.pop_front() {
            return Ok(Some(m));
        }
        if self.sock.buffer().is_empty() {
            let s = self.sock.get_ref();
            s.set_read_timeout(wait.map(|w| w.max(Duration::from_millis(1))))
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

    pub fn sources(&mut self) -> Result<Vec<Source>, ConnError> {
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
