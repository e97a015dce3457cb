//! Sessions and the user's side: chats and calls (a call is a chat plus its `insights:<call>`
//! session), ending a call (its chat stays open for the review; its insights session accepts
//! replies for a grace period), deleting a session (its messages and events are erased, later
//! callbacks get `session_ended`), user messages and transcript turns (outgoing entries whose
//! delivery the assistant link reports), and app-wide events.

use super::{typing_view, Route, RowChange, Rules};
use crate::clock::fmt_time;
use crate::conversation::index::SessionIndex;
use crate::conversation::{micros_of, session_view, CoreError, DeliveryState, DeliveryUpdate};
use crate::events::{Change, Event};
use crate::model::{MessageKind, MessageRow, MessageView, SessionView, TranscriptView, TypingView};
use crate::protocol::INSIGHTS_PREFIX;
use crate::store::{Op, SessionRecord};
use serde_json::json;
use std::sync::Arc;

impl Rules {
    pub fn create_session(
        &mut self,
        is_call: bool,
        title: Option<String>,
        events: &mut Vec<Event>,
    ) -> SessionView {
        let now = fmt_time(self.clock.now());
        let id = uuid::Uuid::new_v4().to_string();
        let chat = SessionRecord {
            session_id: id.clone(),
            kind: "chat".into(),
            is_call,
            call_id: None,
            title: title
                .map(|t| t.trim().to_string())
                .filter(|t| !t.is_empty()),
            created_at: now.clone(),
            ended_at: None,
            deleted_at: None,
        };
        self.ops.push(Op::InsertSession(chat.clone()));
        self.index.insert(id.clone(), SessionIndex::default());
        let sessions = Arc::make_mut(&mut self.state.sessions);
        if is_call {
            let insights = SessionRecord {
                session_id: format!("{INSIGHTS_PREFIX}{id}"),
                kind: "insights".into(),
                is_call: false,
                call_id: Some(id.clone()),
                title: None,
                created_at: now,
                ended_at: None,
                deleted_at: None,
            };
            self.ops.push(Op::InsertSession(insights.clone()));
            self.index
                .insert(insights.session_id.clone(), SessionIndex::default());
            sessions.insert(insights.session_id.clone(), insights);
        }
        sessions.insert(id.clone(), chat.clone());
        let view = session_view(&chat);
        let change = Change::SessionCreated {
            session_id: id.clone(),
            session: view.clone(),
        };
        self.emit(events, &id, change);
        view
    }

    pub(super) fn live_chat(&self, session_id: &str) -> Option<&SessionRecord> {
        self.state
            .sessions
            .get(session_id)
            .filter(|s| s.kind == "chat" && s.deleted_at.is_none())
    }

    pub fn end_call(
        &mut self,
        session_id: &str,
        events: &mut Vec<Event>,
    ) -> Result<SessionView, CoreError> {
        let s = self
            .live_chat(session_id)
            .ok_or(CoreError::SessionNotFound)?;
        if !s.is_call {
            return Err(CoreError::NotACall);
        }
        if s.ended_at.is_some() {
            return Ok(session_view(s));
        }
        let now = fmt_time(self.clock.now());
        let insights_id = format!("{INSIGHTS_PREFIX}{session_id}");
        self.ops.push(Op::EndSessions {
            ids: vec![session_id.to_string(), insights_id.clone()],
            at: now.clone(),
        });
        let sessions = Arc::make_mut(&mut self.state.sessions);
        for id in [session_id, insights_id.as_str()] {
            if let Some(s) = sessions.get_mut(id) {
                s.ended_at = Some(now.clone());
            }
        }
        let view = session_view(&sessions[session_id]);
        let change = Change::SessionUpdated {
            session_id: session_id.to_string(),
            session: view.clone(),
        };
        self.emit(events, session_id, change);
        Ok(view)
    }

    /// A chat's new title (trimmed; blank: untitled). The `insights:` session has none of its
    /// own. The prelude already sent is not sent again.
    pub fn rename_session(
        &mut self,
        session_id: &str,
        title: Option<String>,
        events: &mut Vec<Event>,
    ) -> Result<SessionView, CoreError> {
        if self.live_chat(session_id).is_none() {
            return Err(CoreError::SessionNotFound);
        }
        let title = title
            .map(|t| t.trim().to_string())
            .filter(|t| !t.is_empty());
        let sessions = Arc::make_mut(&mut self.state.sessions);
        let s = sessions.get_mut(session_id).expect("checked above");
        if s.title == title {
            return Ok(session_view(s));
        }
        s.title = title.clone();
        let view = session_view(s);
        self.ops.push(Op::RetitleSession {
            id: session_id.to_string(),
            title,
        });
        let change = Change::SessionUpdated {
            session_id: session_id.to_string(),
            session: view.clone(),
        };
        self.emit(events, session_id, change);
        Ok(view)
    }

    pub fn delete_session(
        &mut self,
        session_id: &str,
        events: &mut Vec<Event>,
    ) -> Result<(), CoreError> {
        if self.live_chat(session_id).is_none() {
            return Err(CoreError::SessionNotFound);
        }
        let now = fmt_time(self.clock.now());
        let insights_id = format!("{INSIGHTS_PREFIX}{session_id}");
        let ids = [session_id.to_string(), insights_id.clone()];
        let sessions = Arc::make_mut(&mut self.state.sessions);
        for id in &ids {
            if let Some(s) = sessions.get_mut(id) {
                s.deleted_at = Some(now.clone());
            }
            self.state.typing.clear_session(id);
            self.index.remove(id);
        }
        self.state
            .drafts
            .retain(|(s, _), _| s != session_id && s != &insights_id);
        self.state
            .draft_rows
            .retain(|_, r| r.session_id != session_id && r.session_id != insights_id);
        let events_before = self.state.next_id;
        let change = Change::SessionDeleted {
            session_id: session_id.to_string(),
        };
        self.emit(events, session_id, change);
        self.ops.push(Op::DeleteSessions {
            ids: ids.to_vec(),
            at: now,
            events_before,
        });
        Ok(())
    }

    pub fn user_message(
        &mut self,
        session_id: &str,
        text: &str,
        purpose: Option<&'static str>,
        events: &mut Vec<Event>,
    ) -> Result<MessageView, CoreError> {
        if self.live_chat(session_id).is_none() {
            return Err(CoreError::SessionNotFound);
        }
        let text = text.trim();
        if text.is_empty() {
            return Err(CoreError::EmptyText);
        }
        let message_id = uuid::Uuid::new_v4().to_string();
        let mut row = self.new_row(session_id, MessageKind::User, text.to_string());
        row.message_id = Some(message_id.clone());
        row.scope = Some(message_id);
        row.occurred_at = Some(row.received_at.clone());
        row.delivery = Some(DeliveryState::Pending.as_str().into());
        row.purpose = purpose.map(str::to_string);
        let view = MessageView::from(&row);
        self.insert_row(row, &Route::Chat, events);
        Ok(view)
    }

    pub fn transcript_turn(
        &mut self,
        session_id: &str,
        speaker: Option<String>,
        text: &str,
        language: Option<String>,
        events: &mut Vec<Event>,
    ) -> Result<TranscriptView, CoreError> {
        let Some(call) = self.live_chat(session_id) else {
            return Err(CoreError::SessionNotFound);
        };
        if !call.is_call {
            return Err(CoreError::NotACall);
        }
        if call.ended_at.is_some() {
            return Err(CoreError::CallEnded);
        }
        let text = text.trim();
        if text.is_empty() {
            return Err(CoreError::EmptyText);
        }
        let start = micros_of(&call.created_at);
        let insights_id = format!("{INSIGHTS_PREFIX}{session_id}");
        let mut row = self.new_row(&insights_id, MessageKind::Transcript, text.to_string());
        let speaker = speaker
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty());
        row.speaker = self.renamed_speaker(session_id, speaker);
        row.language = language;
        row.delivery = Some(DeliveryState::Pending.as_str().into());
        let view = TranscriptView::from_row(&row, session_id, start);
        let change = Change::TranscriptAdded {
            session_id: session_id.to_string(),
            transcript: view.clone(),
        };
        self.emit(events, session_id, change);
        self.ops.push(Op::InsertMessage { row, logged: false });
        Ok(view)
    }

    /// Records the delivery state of an outgoing entry; `row` is the entry as stored (the actor
    /// loads it), `None` when there is no such row.
    pub fn set_delivery(
        &mut self,
        row: Option<MessageRow>,
        update: DeliveryUpdate,
        events: &mut Vec<Event>,
    ) -> Result<(), CoreError> {
        let Some(mut row) = row else {
            return Err(CoreError::MessageNotFound);
        };
        if !matches!(row.kind, MessageKind::User | MessageKind::Transcript) {
            return Err(CoreError::MessageNotFound);
        }
        row.delivery = Some(update.state.as_str().into());
        if update.task_id.is_some() {
            row.task_id = update.task_id;
        }
        row.delivery_error = update
            .error
            .map(|(code, message)| json!({"code": code, "message": message}).to_string());
        if row.kind == MessageKind::Transcript {
            let call_id = row
                .session_id
                .strip_prefix(INSIGHTS_PREFIX)
                .unwrap_or_default()
                .to_string();
            let start = self
                .state
                .sessions
                .get(&call_id)
                .map(|s| micros_of(&s.created_at))
                .unwrap_or(0);
            let view = TranscriptView::from_row(&row, &call_id, start);
            let change = Change::TranscriptUpdated {
                session_id: call_id.clone(),
                transcript: view,
            };
            self.emit(events, &call_id, change);
        } else {
            self.emit_row(events, &row, &Route::Chat, RowChange::Updated);
        }
        self.ops.push(Op::UpdateMessage(row));
        Ok(())
    }

    /// The typing indicators shown in a session.
    pub fn typing_list(&self, session_id: &str) -> Vec<TypingView> {
        self.state
            .typing
            .list(session_id)
            .into_iter()
            .map(|(scope, l)| typing_view(session_id, &scope, &l))
            .collect()
    }

    /// An app-wide event (logged under no session).
    pub fn app_event(&mut self, change: Change, events: &mut Vec<Event>) {
        self.emit(events, "", change);
    }
}
