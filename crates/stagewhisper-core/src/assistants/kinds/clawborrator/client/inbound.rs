//! The frames the hub sends on `/cli`, one handler per frame kind: replayed events and echoes
//! are dropped here, acks are matched to our writes, and the rest becomes [`HubEvent`]s.

use super::worker::{End, Worker};
use super::{HubEvent, Sent};
use crate::assistants::kinds::clawborrator::frames::{
    parse_hub_frame, ChatType, Event, EventClass, HubFrame, Resolution, Role, TailHook,
};

impl Worker {
    /// One text frame. `Some` ends the socket.
    pub(super) async fn on_text(&mut self, text: &str) -> Option<End> {
        let frame = match parse_hub_frame(text) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(code = e.code(), error = %e, "unreadable hub frame skipped");
                return None;
            }
        };
        match frame {
            HubFrame::Subscribed { role, .. } => self.on_subscribed(role).await,
            HubFrame::Ack { chat_id } => self.on_ack(chat_id).await,
            HubFrame::Event { event, .. } => self.on_event(event).await,
            HubFrame::ChatReplyChunk {
                chat_id,
                text,
                done,
                ..
            } => self.on_reply_chunk(chat_id, text, done).await,
            HubFrame::PermissionRequest {
                session_id,
                request_id,
                tool,
                input_preview,
                ..
            } => {
                self.on_permission_request(session_id, request_id, tool, input_preview)
                    .await
            }
            HubFrame::PermissionResolved {
                session_id,
                request_id,
                decision,
                resolver_login,
            } => {
                self.on_permission_resolved(session_id, request_id, decision, resolver_login)
                    .await
            }
            HubFrame::Presence { attached, .. } => self.emit(HubEvent::Presence { attached }).await,
            HubFrame::ChannelStatus { connected, .. } => self.on_channel_status(connected).await,
            HubFrame::OpMessage {
                author_login, text, ..
            } => {
                self.emit(HubEvent::OpMessage {
                    author: author_login,
                    text,
                })
                .await
            }
            HubFrame::FileEvent { action, .. } => tracing::debug!(%action, "file event ignored"),
            HubFrame::Error { code, message } => return self.on_error(code, message).await,
            HubFrame::Unknown { frame_type } => {
                tracing::debug!(%frame_type, "unknown hub frame ignored")
            }
        }
        None
    }

    async fn on_subscribed(&mut self, role: Role) {
        self.subscribed = true;
        self.failures = 0;
        tracing::info!(session_id = %self.settings.session_id, role = role.as_str(), "subscribed");
        self.emit(HubEvent::Role(role)).await;
        self.subscribed_status().await;
    }

    /// An `event` frame: surfaced once, and only when newer than the replay cutoff.
    async fn on_event(&mut self, event: Event) {
        if !self.is_fresh(&event) {
            return;
        }
        match &event.class {
            EventClass::Chat(ChatType::Prompt) => self.on_prompt_event(&event).await,
            EventClass::Chat(ChatType::AssistantText) => {
                let text = event.text().unwrap_or_default().to_string();
                if !text.is_empty() {
                    self.emit(HubEvent::Reply {
                        chat_id: event.chat_id().map(str::to_string),
                        text,
                        r#final: false,
                    })
                    .await;
                }
            }
            EventClass::Chat(ChatType::Reply) => {
                let chat_id = event.chat_id().map(str::to_string);
                let text = event.text().unwrap_or_default().to_string();
                self.final_reply(chat_id, text).await;
            }
            EventClass::Chat(ChatType::PeerTimeout) => {
                let message = event
                    .text()
                    .map(str::to_string)
                    .unwrap_or_else(|| "a peer session did not answer in time".into());
                self.emit(HubEvent::Error {
                    code: "peer_timeout".into(),
                    message,
                    local_id: None,
                })
                .await;
            }
            EventClass::Tail(TailHook::PreToolUse) => {
                let tool = event.tool().map(str::to_string);
                self.emit(HubEvent::Typing { tool }).await;
            }
            EventClass::Tail(
                TailHook::PostToolUse | TailHook::UserPromptSubmit | TailHook::SubagentStop,
            ) => self.emit(HubEvent::Typing { tool: None }).await,
            EventClass::Tail(TailHook::Stop) => self.emit(HubEvent::Idle).await,
            other => tracing::debug!(?other, "hub event ignored"),
        }
    }

    /// Whether `event` is to be surfaced: not seen before (a replay), and not from before the
    /// replay cutoff. Keeps the newest timestamp seen either way.
    fn is_fresh(&mut self, event: &Event) -> bool {
        if !self.seen.insert(event.content_key()) {
            tracing::debug!(kind = %event.kind, ty = %event.ty, "replayed event dropped");
            return false;
        }
        let ts = chrono::DateTime::parse_from_rfc3339(&event.ts)
            .ok()
            .map(|t| t.with_timezone(&chrono::Utc));
        if let Some(ts) = ts {
            let mut n = self.newest.lock().expect("newest lock");
            if n.is_none_or(|n| ts > n) {
                *n = Some(ts);
            }
        }
        if let (Some(cutoff), Some(ts)) = (self.settings.replay_cutoff, ts) {
            if ts <= cutoff {
                tracing::debug!(kind = %event.kind, ty = %event.ty, "event from before the cutoff dropped");
                return false;
            }
        }
        true
    }

    /// A `chat`/`prompt` event: someone else's prompt, unless it is the echo of ours.
    async fn on_prompt_event(&mut self, event: &Event) {
        let chat_id = event.chat_id().map(str::to_string);
        let text = event.text().unwrap_or_default().to_string();
        if self.is_own_echo(chat_id.as_deref(), &text) {
            tracing::debug!("echo of our own prompt dropped");
        } else {
            let author = event.author().map(str::to_string);
            self.emit(HubEvent::Prompt {
                chat_id,
                text,
                author,
            })
            .await;
        }
    }

    /// A piece of a streamed reply: a [`HubEvent::Draft`] of the whole text so far, and the
    /// final reply once `done`.
    async fn on_reply_chunk(&mut self, chat_id: String, text: String, done: bool) {
        let acc = self.drafts.entry(chat_id.clone()).or_default();
        acc.push_str(&text);
        if done {
            let text = self.drafts.remove(&chat_id).unwrap_or_default();
            self.final_reply(Some(chat_id), text).await;
        } else {
            let text = acc.clone();
            self.emit(HubEvent::Draft { chat_id, text }).await;
        }
    }

    /// Surfaced once per request id.
    async fn on_permission_request(
        &mut self,
        session_id: String,
        request_id: String,
        tool: String,
        input_preview: String,
    ) {
        let new = {
            let mut p = self.permissions.lock().expect("permissions lock");
            if p.known.contains_key(&request_id) {
                false
            } else {
                p.remember(&request_id, session_id, false);
                true
            }
        };
        if new {
            tracing::info!(%request_id, %tool, "permission requested");
            self.emit(HubEvent::Permission {
                request_id,
                tool,
                input_preview,
            })
            .await;
        }
    }

    /// Surfaced once per request id; from then on [`super::HubHandle::approve`] refuses it.
    async fn on_permission_resolved(
        &mut self,
        session_id: String,
        request_id: String,
        decision: Resolution,
        resolver_login: Option<String>,
    ) {
        let new = {
            let mut p = self.permissions.lock().expect("permissions lock");
            match p.known.get_mut(&request_id) {
                Some((_, true)) => false,
                Some((_, resolved)) => {
                    *resolved = true;
                    true
                }
                None => {
                    p.remember(&request_id, session_id, true);
                    true
                }
            }
        };
        if new {
            tracing::info!(%request_id, decision = decision.as_str(), "permission resolved");
            self.emit(HubEvent::PermissionResolved {
                request_id,
                decision,
                resolver: resolver_login,
            })
            .await;
        }
    }

    async fn on_channel_status(&mut self, connected: bool) {
        self.channel = Some(connected);
        if self.subscribed {
            self.subscribed_status().await;
        }
    }

    /// An `error` frame: `auth_failed` / `token_revoked` end the socket for good; any other
    /// answers the oldest write still waiting for its ack.
    async fn on_error(&mut self, code: String, message: String) -> Option<End> {
        if code == "auth_failed" || code == "token_revoked" {
            return Some(End::Final(format!("{message} ({code})")));
        }
        let local_id = match self.in_flight.pop_front() {
            Some(Sent::Prompt(id)) => {
                self.own_prompts.retain(|p| p.local_id != id);
                Some(id)
            }
            _ => None,
        };
        tracing::warn!(%code, %message, "hub error");
        self.emit(HubEvent::Error {
            code,
            message,
            local_id,
        })
        .await;
        None
    }

    /// Acks come in the order of our writes. One with a `chatId` answers the oldest prompt
    /// still waiting (writes before it were not acknowledged by this hub); one without answers
    /// the oldest write of any kind.
    async fn on_ack(&mut self, chat_id: Option<String>) {
        let local_id = if chat_id.is_some() {
            match self
                .in_flight
                .iter()
                .position(|s| matches!(s, Sent::Prompt(_)))
            {
                Some(i) => {
                    let s = self.in_flight.drain(..=i).next_back();
                    match s {
                        Some(Sent::Prompt(id)) => Some(id),
                        _ => None,
                    }
                }
                None => None,
            }
        } else {
            match self.in_flight.pop_front() {
                Some(Sent::Prompt(id)) => Some(id),
                _ => None,
            }
        };
        let Some(local_id) = local_id else {
            tracing::debug!("ack for no write of ours");
            return;
        };
        if let Some(p) = self.own_prompts.iter_mut().find(|p| p.local_id == local_id) {
            p.chat_id = chat_id.clone();
        }
        self.emit(HubEvent::Acked { local_id, chat_id }).await;
    }

    /// Whether a `chat`/`prompt` event is the hub's echo of a prompt we sent (matched by its
    /// `chatId` once acknowledged, else by its text); a match is consumed.
    fn is_own_echo(&mut self, chat_id: Option<&str>, text: &str) -> bool {
        let by_id = chat_id.and_then(|c| {
            self.own_prompts
                .iter()
                .position(|p| p.chat_id.as_deref() == Some(c))
        });
        let i = by_id.or_else(|| {
            self.own_prompts.iter().position(|p| {
                p.text == text
                    && match (chat_id, p.chat_id.as_deref()) {
                        (Some(a), Some(b)) => a == b,
                        _ => true,
                    }
            })
        });
        match i {
            Some(i) => {
                self.own_prompts.remove(i);
                true
            }
            None => false,
        }
    }

    /// A settled reply, once per `chatId` + text (a streamed reply and the `reply` event the
    /// hub may also send for it are the same message).
    async fn final_reply(&mut self, chat_id: Option<String>, text: String) {
        if let Some(c) = &chat_id {
            self.drafts.remove(c);
            let key = format!("{c}\u{1f}{text}");
            if self.settled.contains(&key) {
                tracing::debug!(chat_id = %c, "reply already shown");
                return;
            }
            self.settled.insert(key);
        }
        self.emit(HubEvent::Reply {
            chat_id,
            text,
            r#final: true,
        })
        .await;
    }
}
