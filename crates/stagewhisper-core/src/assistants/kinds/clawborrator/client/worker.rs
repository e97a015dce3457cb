//! The client task: one socket after another, from connect to its end, with the reconnect
//! backoff, the liveness timer and the queued writes.

use super::socket::{connect_cli, Ws};
use super::{
    human, Command, HubError, HubEvent, HubHandle, HubSettings, HubStatus, HubUrl, Outgoing,
    Permissions, Sent, CHANNEL_OFFLINE, MEMORY,
};
use crate::assistants::kinds::clawborrator::frames::ClientFrame;
use crate::http::Shutdown;
use bytes::Bytes;
use futures_util::stream::{SplitSink, SplitStream};
use futures_util::{SinkExt, StreamExt};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{self, Message};

/// A bounded set that forgets its oldest keys.
#[derive(Default)]
pub(super) struct Memory {
    set: HashSet<String>,
    order: VecDeque<String>,
}

impl Memory {
    /// `true` when `key` is new.
    pub(super) fn insert(&mut self, key: String) -> bool {
        if !self.set.insert(key.clone()) {
            return false;
        }
        self.order.push_back(key);
        while self.order.len() > MEMORY {
            if let Some(old) = self.order.pop_front() {
                self.set.remove(&old);
            }
        }
        true
    }

    pub(super) fn contains(&self, key: &str) -> bool {
        self.set.contains(key)
    }
}

pub(super) struct OwnPrompt {
    pub(super) local_id: i64,
    pub(super) text: String,
    pub(super) chat_id: Option<String>,
}

/// How a socket ended.
pub(super) enum End {
    Shutdown,
    /// Try again after the backoff.
    Retry(String),
    /// Retry now (new settings, or asked to).
    Now,
    /// The hub refused us: no retry until the settings change.
    Final(String),
}

pub(super) struct Worker {
    pub(super) settings: HubSettings,
    url: HubUrl,
    events: mpsc::Sender<HubEvent>,
    cmds: mpsc::UnboundedReceiver<Command>,
    shutdown: Shutdown,
    queued: Arc<std::sync::atomic::AtomicUsize>,
    pub(super) permissions: Arc<Mutex<Permissions>>,
    pub(super) newest: Arc<Mutex<Option<chrono::DateTime<chrono::Utc>>>>,
    /// Writes not yet on a socket.
    queue: VecDeque<Outgoing>,
    /// Writes on the socket that the hub has not acknowledged yet, oldest first.
    pub(super) in_flight: VecDeque<Sent>,
    /// Prompts we sent, to recognise the hub's echo.
    pub(super) own_prompts: VecDeque<OwnPrompt>,
    /// Keys of the events already surfaced.
    pub(super) seen: Memory,
    /// `chatId` + text of replies already surfaced as final.
    pub(super) settled: Memory,
    /// Streamed replies in progress.
    pub(super) drafts: HashMap<String, String>,
    /// The Claude Code session's channel, as last reported.
    pub(super) channel: Option<bool>,
    /// Whether a handle still exists.
    cmds_open: bool,
    pub(super) subscribed: bool,
    status: Option<HubStatus>,
    /// Reconnects since the last subscription (or settings change).
    pub(super) failures: u32,
}

impl Worker {
    /// The task behind `handle`, not started yet ([`Worker::run`]).
    pub(super) fn new(
        settings: HubSettings,
        url: HubUrl,
        events: mpsc::Sender<HubEvent>,
        cmds: mpsc::UnboundedReceiver<Command>,
        shutdown: Shutdown,
        handle: &HubHandle,
    ) -> Worker {
        Worker {
            settings,
            url,
            events,
            cmds,
            shutdown,
            queued: handle.queued.clone(),
            permissions: handle.permissions.clone(),
            newest: handle.newest.clone(),
            queue: VecDeque::new(),
            in_flight: VecDeque::new(),
            own_prompts: VecDeque::new(),
            seen: Memory::default(),
            settled: Memory::default(),
            drafts: HashMap::new(),
            channel: None,
            cmds_open: true,
            subscribed: false,
            status: None,
            failures: 0,
        }
    }

    pub(super) async fn emit(&mut self, e: HubEvent) {
        if self.events.send(e).await.is_err() {
            tracing::debug!("hub client: nobody reads the events any more");
        }
    }

    async fn set_status(&mut self, s: HubStatus) {
        if self.status.as_ref() != Some(&s) {
            tracing::info!(session_id = %self.settings.session_id, status = %s, "hub link status");
            self.status = Some(s.clone());
            self.emit(HubEvent::Status(s)).await;
        }
    }

    /// After `subscribed`: online when the channel is connected, offline when it is not;
    /// still `connecting` while the hub has not said yet (see [`super::HubTiming::channel_grace`]).
    pub(super) async fn subscribed_status(&mut self) {
        let s = match self.channel {
            Some(true) => HubStatus::Online,
            Some(false) => HubStatus::Offline {
                reason: CHANNEL_OFFLINE.to_string(),
            },
            None => return,
        };
        self.set_status(s).await;
    }

    fn stopped(&self) -> bool {
        self.shutdown.is_triggered() || (self.events.is_closed() && !self.cmds_open)
    }

    fn enqueue(&mut self, w: Outgoing) {
        self.queue.push_back(w);
    }

    /// Handles a command from the handle (`None`: every handle is gone), whatever the socket
    /// is doing; writes are queued. `Some` ends the socket, or the wait for one.
    fn on_command(&mut self, c: Option<Command>) -> Option<End> {
        match c {
            None => {
                self.cmds_open = false;
                if self.events.is_closed() {
                    Some(End::Shutdown)
                } else {
                    None
                }
            }
            Some(Command::Write(w)) => {
                self.enqueue(w);
                None
            }
            Some(Command::Settings(s, url)) => {
                self.apply_settings(*s, url);
                Some(End::Now)
            }
            Some(Command::Reconnect) => Some(End::Now),
        }
    }

    fn apply_settings(&mut self, s: HubSettings, url: HubUrl) {
        if s.session_id != self.settings.session_id {
            // Another session: what was remembered about the old one does not apply.
            self.seen = Memory::default();
            self.settled = Memory::default();
            self.drafts.clear();
            self.channel = None;
        }
        self.settings = s;
        self.url = url;
        self.failures = 0;
    }

    pub(super) async fn run(mut self) {
        tracing::info!(session_id = %self.settings.session_id, url = %self.url.cli_url(), "hub client started");
        loop {
            if self.stopped() {
                break;
            }
            self.set_status(HubStatus::Connecting).await;
            let end = self.attach().await;
            self.subscribed = false;
            self.unconfirm_in_flight().await;
            match end {
                End::Shutdown => break,
                End::Now => continue,
                End::Final(message) => {
                    if !self.refused(message).await {
                        break;
                    }
                }
                End::Retry(reason) => self.wait_to_retry(reason).await,
            }
        }
        tracing::info!(session_id = %self.settings.session_id, "hub client stopped");
    }

    /// The hub refused the session token: `auth_failed` until new settings come. `false` when
    /// the client is to stop instead.
    async fn refused(&mut self, message: String) -> bool {
        tracing::warn!(session_id = %self.settings.session_id, %message, "the hub refused the session token; not retrying until the settings change");
        self.set_status(HubStatus::AuthFailed { message }).await;
        // Only new settings (or the end) leave this state.
        loop {
            let c = tokio::select! {
                _ = self.shutdown.wait() => break,
                c = self.cmds.recv(), if self.cmds_open => c,
            };
            if c.is_none() {
                self.cmds_open = false;
                if self.events.is_closed() {
                    break;
                }
                continue;
            }
            match c {
                Some(Command::Settings(s, url)) => {
                    self.apply_settings(*s, url);
                    break;
                }
                Some(Command::Write(w)) => self.enqueue(w),
                _ => {}
            }
        }
        !self.shutdown.is_triggered() && self.cmds_open
    }

    /// Offline with `reason` for the backoff's next delay (commands still handled; new
    /// settings or a reconnect cut it short).
    async fn wait_to_retry(&mut self, reason: String) {
        self.failures = self.failures.saturating_add(1);
        let delay = self.settings.timing.backoff.delay(self.failures);
        tracing::info!(session_id = %self.settings.session_id, %reason, delay_ms = delay.as_millis() as u64, "hub link down; reconnecting");
        self.set_status(HubStatus::Offline {
            reason: format!("{reason}; reconnecting in {}", human(delay)),
        })
        .await;
        let until = Instant::now() + delay;
        loop {
            let c = tokio::select! {
                _ = self.shutdown.wait() => break,
                _ = tokio::time::sleep_until(until) => break,
                c = self.cmds.recv(), if self.cmds_open => c,
            };
            if let Some(End::Shutdown | End::Now) = self.on_command(c) {
                break;
            }
        }
    }

    /// Prompts written to a socket that closed before their `ack`.
    async fn unconfirm_in_flight(&mut self) {
        let lost: Vec<Sent> = self.in_flight.drain(..).collect();
        for s in lost {
            if let Sent::Prompt(local_id) = s {
                self.emit(HubEvent::Unconfirmed { local_id }).await;
            }
        }
    }

    /// One socket, from connect to its end.
    async fn attach(&mut self) -> End {
        let connect = connect_cli(
            self.url.clone(),
            self.settings.session_token.clone(),
            self.settings.timing.clone(),
        );
        tokio::pin!(connect);
        let ws = loop {
            tokio::select! {
                _ = self.shutdown.wait() => return End::Shutdown,
                r = &mut connect => match r {
                    Ok(ws) => break ws,
                    Err(HubError::AuthFailed(m)) => return End::Final(m),
                    Err(e) => return End::Retry(e.to_string()),
                },
                c = self.cmds.recv(), if self.cmds_open => {
                    if let Some(end) = self.on_command(c) {
                        return end;
                    }
                }
            }
        };
        tracing::debug!(session_id = %self.settings.session_id, "hub socket open; subscribing");
        self.session(ws).await
    }

    /// Subscribes on a fresh socket, then serves it until it ends.
    async fn session(&mut self, ws: Ws) -> End {
        let (mut sink, stream) = ws.split();
        let subscribe = ClientFrame::Subscribe {
            session_id: self.settings.session_id.clone(),
        };
        if let Err(e) = sink.send(Message::text(subscribe.to_json())).await {
            return End::Retry(format!("the connection to the hub failed: {e}"));
        }
        // What the channel was on an earlier socket may no longer hold.
        self.channel = None;
        self.serve(sink, stream).await
    }

    /// The socket's life after `subscribe`: frames in, commands, the liveness timer (a ping
    /// when quiet, dead when silent), the channel's grace time, and the queued writes once
    /// subscribed.
    async fn serve(
        &mut self,
        mut sink: SplitSink<Ws, Message>,
        mut stream: SplitStream<Ws>,
    ) -> End {
        let liveness = self.settings.timing.liveness.max(Duration::from_millis(30));
        let ping_every = liveness / 3;
        let mut last_rx = Instant::now();
        let mut pinged = false;
        let mut subscribed_at: Option<Instant> = None;
        let mut grace_over = false;
        loop {
            let ping_at = last_rx + ping_every;
            let dead_at = last_rx + liveness;
            if self.subscribed && subscribed_at.is_none() {
                subscribed_at = Some(Instant::now());
            }
            let grace_at = subscribed_at.map(|t| t + self.settings.timing.channel_grace);
            let waiting_channel = self.subscribed && self.channel.is_none() && !grace_over;
            let end = tokio::select! {
                _ = self.shutdown.wait() => {
                    let _ = sink.send(Message::Close(None)).await;
                    return End::Shutdown;
                }
                m = stream.next() => {
                    last_rx = Instant::now();
                    pinged = false;
                    if let Some(Ok(Message::Text(t))) = m {
                        let end = self.on_text(t.as_str()).await;
                        // Time spent handing events to a slow reader is not silence.
                        last_rx = Instant::now();
                        end
                    } else {
                        ending(m)
                    }
                }
                c = self.cmds.recv(), if self.cmds_open => self.on_command(c),
                _ = tokio::time::sleep_until(ping_at), if !pinged => {
                    pinged = true;
                    if let Err(e) = sink.send(Message::Ping(Bytes::new())).await {
                        Some(End::Retry(format!("the connection to the hub failed: {e}")))
                    } else {
                        None
                    }
                }
                _ = tokio::time::sleep_until(grace_at.unwrap_or(dead_at)), if waiting_channel => {
                    // The hub said nothing about the Claude Code session: not online.
                    grace_over = true;
                    self.set_status(HubStatus::Offline { reason: CHANNEL_OFFLINE.to_string() }).await;
                    None
                }
                _ = tokio::time::sleep_until(dead_at) => {
                    tracing::warn!(session_id = %self.settings.session_id, silent_ms = liveness.as_millis() as u64, "hub socket silent; treating it as dead");
                    Some(End::Retry(format!("no sign of life from the hub for {}", human(liveness))))
                }
            };
            if let Some(end) = end {
                if matches!(end, End::Now) {
                    let _ = sink.send(Message::Close(None)).await;
                }
                return end;
            }
            if self.subscribed {
                if let Err(end) = self.flush(&mut sink).await {
                    return end;
                }
            }
        }
    }

    /// Writes the queued writes, in order (only once subscribed).
    async fn flush(&mut self, sink: &mut SplitSink<Ws, Message>) -> Result<(), End> {
        while let Some(w) = self.queue.pop_front() {
            self.queued
                .fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
            let frame = self.frame_of(&w);
            match &w {
                Outgoing::Prompt { local_id, text, .. } => {
                    self.in_flight.push_back(Sent::Prompt(*local_id));
                    self.own_prompts.push_back(OwnPrompt {
                        local_id: *local_id,
                        text: text.clone(),
                        chat_id: None,
                    });
                    while self.own_prompts.len() > MEMORY {
                        self.own_prompts.pop_front();
                    }
                }
                _ => self.in_flight.push_back(Sent::Other),
            }
            if let Err(e) = sink.send(Message::text(frame.to_json())).await {
                return Err(End::Retry(format!("the connection to the hub failed: {e}")));
            }
        }
        Ok(())
    }

    fn frame_of(&self, w: &Outgoing) -> ClientFrame {
        let session_id = self.settings.session_id.clone();
        match w {
            Outgoing::Prompt {
                text, attachments, ..
            } => ClientFrame::Prompt {
                session_id,
                text: text.clone(),
                attachments: attachments.clone(),
            },
            Outgoing::Approval {
                request_id,
                session_id: gate,
                decision,
            } => ClientFrame::Approval {
                session_id: gate.clone().unwrap_or(session_id),
                request_id: request_id.clone(),
                decision: *decision,
            },
            Outgoing::OpMessage { text } => ClientFrame::OpMessage {
                session_id,
                text: text.clone(),
            },
        }
    }
}

/// What a socket message other than text means: `Some` ends the socket (a close with 1008 is
/// final).
fn ending(m: Option<Result<Message, tungstenite::Error>>) -> Option<End> {
    match m {
        None => Some(End::Retry("the hub closed the connection".into())),
        Some(Err(e)) => Some(End::Retry(format!("the connection to the hub failed: {e}"))),
        Some(Ok(Message::Close(frame))) => Some(match frame {
            Some(f) if f.code == CloseCode::Policy => End::Final(if f.reason.is_empty() {
                "the hub closed the connection for a policy violation (1008)".to_string()
            } else {
                format!("{} (1008)", f.reason)
            }),
            Some(f) => End::Retry(format!(
                "the hub closed the connection ({})",
                u16::from(f.code)
            )),
            None => End::Retry("the hub closed the connection".into()),
        }),
        Some(Ok(_)) => None,
    }
}
