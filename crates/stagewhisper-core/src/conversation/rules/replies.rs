//! Callbacks: replies, errors, typing and end-of-turn markers, stream parts, and the timers.
//!
//! - `message`/`notice` ([`Rules::store_reply`]): cleaned text (leading blank lines, the
//!   plain-text fallback prefix and a trailing cursor removed); a duplicate by `message_id`
//!   (else a hash of task + text) or by cleaned text within the scope changes nothing; a reply
//!   settles the draft it finishes in place (the stream of its task, or an edit-style draft of
//!   its scope that it extends) and clears its scope's typing indicator;
//! - a `message` ending in the cursor `▉` is an edit-style draft ([`Rules::apply_edit_draft`]),
//!   unless its task's stream has finished: then the cursor is a leftover and it is the final;
//! - `stream` parts build the task's draft ([`Rules::apply_chunk`]); a draft is shown once it
//!   has text that no final text of its scope already starts with;
//! - timers ([`Rules::expire`]): typing indicators and drafts idle for the inactivity timeout
//!   go; an open draft settles as it is.

use super::drafts::{Draft, DraftKey};
use super::{emit_live, typing, typing_view, Route, RowChange, Rules};
use crate::clock::fmt_time;
use crate::conversation::keys::hash_hex;
use crate::conversation::Outcome;
use crate::events::{Change, Event};
use crate::model::{MessageKind, MessageRow};
use crate::protocol::{clean_text, has_draft_cursor, is_none_reply, Callback, Status};
use crate::store::Op;
use chrono::{DateTime, Utc};
use typing::Touch;

/// A reply's final form: its cleaned text and keys.
struct Reply {
    text: String,
    message_id: String,
    content_key: String,
    occurred_at: Option<String>,
    hidden: bool,
}

impl Rules {
    /// Applies an assistant callback.
    pub fn apply_callback(&mut self, cb: &Callback, events: &mut Vec<Event>) -> Outcome {
        let Some(route) = self.route(&cb.session_id) else {
            return Outcome::SessionEnded;
        };
        let now_ms = self.clock.now_ms();
        match cb.status {
            Status::Typing | Status::ToolCall => {
                let label = cb.label.as_deref().or(if cb.status == Status::ToolCall {
                    cb.reply_text.as_deref().filter(|t| !t.trim().is_empty())
                } else {
                    None
                });
                if self
                    .state
                    .typing
                    .touch(&cb.session_id, cb.scope(), label, now_ms)
                    == Touch::Shown
                {
                    let lease = self
                        .state
                        .typing
                        .get(&cb.session_id, cb.scope())
                        .cloned()
                        .expect("just touched");
                    let typing = typing_view(&cb.session_id, cb.scope(), &lease);
                    emit_live(
                        events,
                        Change::TypingStarted {
                            session_id: cb.session_id.clone(),
                            typing,
                        },
                    );
                }
                Outcome::Applied
            }
            Status::Completed | Status::Silent => {
                let mut outcome = Outcome::Applied;
                if cb.status == Status::Completed
                    && cb
                        .reply_text
                        .as_deref()
                        .is_some_and(|t| !t.trim().is_empty())
                {
                    outcome = self.store_reply(cb, &route, MessageKind::Assistant, events);
                }
                self.stop_typing(events, &cb.session_id, cb.scope(), "completed");
                outcome
            }
            Status::Message | Status::Notice => {
                let kind = if cb.status == Status::Notice {
                    MessageKind::Notice
                } else {
                    MessageKind::Assistant
                };
                self.store_reply(cb, &route, kind, events)
            }
            Status::Errored => self.store_error(cb, &route, events),
            Status::Stream => {
                if matches!(route, Route::Insights { .. }) {
                    // Insights are one short line: only the final message is surfaced.
                    return Outcome::Applied;
                }
                self.apply_chunk(cb, events);
                Outcome::Applied
            }
        }
    }

    fn store_reply(
        &mut self,
        cb: &Callback,
        route: &Route,
        kind: MessageKind,
        events: &mut Vec<Event>,
    ) -> Outcome {
        let raw = cb.reply_text.as_deref().unwrap_or_default();
        let insights = matches!(route, Route::Insights { .. });
        let task_key = (cb.session_id.clone(), DraftKey::Task(cb.task_id.clone()));
        if has_draft_cursor(raw) && kind == MessageKind::Assistant {
            if let Some(outcome) = self.cursor_reply(cb, insights, &task_key, events) {
                return outcome;
            }
        }
        let text = clean_text(raw);
        if text.is_empty() {
            return Outcome::Applied;
        }
        let scope = cb.scope().to_string();
        let message_id = cb
            .message_id
            .clone()
            .unwrap_or_else(|| format!("h:{}", hash_hex(&[&cb.task_id, raw])));
        let content_key = hash_hex(&[&cb.session_id, &scope, kind.as_str(), &text]);
        let hidden = insights && is_none_reply(&text);
        let settle_key = self.draft_to_settle(cb, kind, task_key, &scope, &text);

        let idx = self.idx(&cb.session_id);
        let same_id = idx.has_id(&message_id);
        let same_text = idx.has_content(&content_key);
        let outcome = if same_id || same_text {
            // A retry or a near-identical re-send: nothing changes, except that a draft of the
            // same, already final, text is redundant.
            if let (Some(key), true) = (&settle_key, same_text) {
                self.drop_draft(events, key, route);
            }
            Outcome::Duplicate
        } else {
            let draft_row = settle_key.and_then(|key| self.settle_draft(&key));
            let reply = Reply {
                text,
                message_id,
                content_key,
                occurred_at: cb.occurred_at.map(fmt_time),
                hidden,
            };
            match draft_row {
                Some(row) => self.settle_in_place(row, reply, &cb.session_id, route, events),
                None => self.insert_reply(cb, route, kind, reply, &scope, events),
            }
            Outcome::Applied
        };
        self.stop_typing(events, &cb.session_id, &scope, "message");
        outcome
    }

    /// A reply ending in the draft cursor: an edit-style draft (dropped for Insights), unless its
    /// task's stream has finished (`None`: then it is the final text).
    fn cursor_reply(
        &mut self,
        cb: &Callback,
        insights: bool,
        task_key: &(String, DraftKey),
        events: &mut Vec<Event>,
    ) -> Option<Outcome> {
        if insights {
            return Some(Outcome::Applied);
        }
        let stream_finished = self
            .state
            .drafts
            .get(task_key)
            .is_some_and(|d| d.is_open() && d.is_finished());
        if !stream_finished {
            return Some(self.apply_edit_draft(cb, events));
        }
        // The task's stream has finished: the cursor is a leftover and this is its final
        // text, which settles the stream's draft below.
        None
    }

    /// A draft this message settles: the stream of the same task, else an edit-style draft
    /// of the scope that the final text extends.
    fn draft_to_settle(
        &self,
        cb: &Callback,
        kind: MessageKind,
        task_key: (String, DraftKey),
        scope: &str,
        text: &str,
    ) -> Option<(String, DraftKey)> {
        let edit_key = (cb.session_id.clone(), DraftKey::Edit(scope.to_string()));
        if kind != MessageKind::Assistant {
            None
        } else if self.state.drafts.get(&task_key).is_some_and(Draft::is_open) {
            Some(task_key)
        } else if self
            .state
            .drafts
            .get(&edit_key)
            .is_some_and(|d| d.is_open() && text.starts_with(d.display().trim_end()))
        {
            Some(edit_key)
        } else {
            None
        }
    }

    /// Settles the draft (an edit-style one goes) and takes its row, if it is shown.
    fn settle_draft(&mut self, key: &(String, DraftKey)) -> Option<MessageRow> {
        let d = self.state.drafts.get_mut(key).expect("checked above");
        let row = d.row_id;
        d.settle();
        if matches!(key.1, DraftKey::Edit(_)) {
            self.state.drafts.remove(key);
        }
        row.and_then(|id| self.state.draft_rows.remove(&id))
    }

    /// The reply settles its draft's row in place: same id, same position, the final text.
    fn settle_in_place(
        &mut self,
        mut row: MessageRow,
        reply: Reply,
        session_id: &str,
        route: &Route,
        events: &mut Vec<Event>,
    ) {
        row.replace_text(reply.text, fmt_time(self.clock.now()));
        row.message_id = Some(reply.message_id);
        row.content_key = Some(reply.content_key);
        row.occurred_at = reply.occurred_at.or(row.occurred_at);
        row.draft = false;
        row.draft_key = None;
        row.hidden = reply.hidden;
        self.idx(session_id).add(&row);
        if !reply.hidden {
            self.emit_row(events, &row, route, RowChange::Updated);
        }
        self.ops.push(Op::UpdateMessage(row));
    }

    /// The reply as a new row of its scope.
    fn insert_reply(
        &mut self,
        cb: &Callback,
        route: &Route,
        kind: MessageKind,
        reply: Reply,
        scope: &str,
        events: &mut Vec<Event>,
    ) {
        let mut row = self.new_row(&cb.session_id, kind, reply.text);
        row.message_id = Some(reply.message_id);
        row.task_id = Some(cb.task_id.clone());
        row.user_message_id = cb.user_message_id.clone();
        row.scope = Some(scope.to_string());
        row.content_key = Some(reply.content_key);
        row.occurred_at = reply.occurred_at;
        row.sort_key = self.sort_key(cb.occurred_at, self.clock.now());
        row.hidden = reply.hidden;
        self.insert_row(row, route, events);
    }

    fn store_error(&mut self, cb: &Callback, route: &Route, events: &mut Vec<Event>) -> Outcome {
        let code = cb.error_code.clone().unwrap_or_else(|| "error".into());
        let text = cb
            .error_message
            .clone()
            .filter(|t| !t.trim().is_empty())
            .or_else(|| cb.reply_text.clone().filter(|t| !t.trim().is_empty()))
            .unwrap_or_else(|| "The assistant reported an error.".into());
        let message_id = cb
            .message_id
            .clone()
            .unwrap_or_else(|| format!("e:{}", hash_hex(&[&cb.task_id, &code, &text])));
        let outcome = if self.idx(&cb.session_id).has_id(&message_id) {
            Outcome::Duplicate
        } else {
            let mut row = self.new_row(&cb.session_id, MessageKind::Error, text);
            row.message_id = Some(message_id);
            row.task_id = Some(cb.task_id.clone());
            row.user_message_id = cb.user_message_id.clone();
            row.scope = Some(cb.scope().to_string());
            row.error_code = Some(code);
            row.occurred_at = cb.occurred_at.map(fmt_time);
            row.sort_key = self.sort_key(cb.occurred_at, self.clock.now());
            self.insert_row(row, route, events);
            Outcome::Applied
        };
        self.stop_typing(events, &cb.session_id, cb.scope(), "errored");
        outcome
    }

    /// A `message` whose text ends with the draft cursor: the whole text so far of a reply.
    fn apply_edit_draft(&mut self, cb: &Callback, events: &mut Vec<Event>) -> Outcome {
        let text = clean_text(cb.reply_text.as_deref().unwrap_or_default());
        let scope = cb.scope().to_string();
        let key = (cb.session_id.clone(), DraftKey::Edit(scope.clone()));
        let now = self.clock.now();
        if let Some(d) = self.state.drafts.get(&key).filter(|d| d.is_open()) {
            if d.display().starts_with(&text) {
                return Outcome::Duplicate; // a repeat or a stale, shorter draft
            }
        } else {
            if text.is_empty() {
                return Outcome::Applied;
            }
            if self.idx(&cb.session_id).final_extends(&scope, &text) {
                return Outcome::Duplicate; // arrived after its final text
            }
            let d = self.new_draft(cb, now);
            self.state.drafts.insert(key.clone(), d);
        }
        let d = self.state.drafts.get_mut(&key).expect("inserted above");
        d.set_text(&text, now.timestamp_millis());
        self.sync_draft(events, &key);
        self.stop_typing(events, &cb.session_id, &scope, "message");
        Outcome::Applied
    }

    /// A new draft for the callback's task and scope, placed at the callback's time.
    fn new_draft(&self, cb: &Callback, now: DateTime<Utc>) -> Draft {
        Draft::new(
            &cb.session_id,
            cb.scope(),
            &cb.task_id,
            cb.user_message_id.as_deref(),
            self.sort_key(cb.occurred_at, now),
            cb.occurred_at.map(fmt_time),
            fmt_time(now),
            now.timestamp_millis(),
        )
    }

    fn apply_chunk(&mut self, cb: &Callback, events: &mut Vec<Event>) {
        let chunk = cb.chunk.as_ref().expect("parsed stream has a chunk");
        let now = self.clock.now();
        let key = (cb.session_id.clone(), DraftKey::Task(cb.task_id.clone()));
        if !self.state.drafts.contains_key(&key) {
            let d = self.new_draft(cb, now);
            self.state.drafts.insert(key.clone(), d);
        }
        let d = self.state.drafts.get_mut(&key).expect("inserted above");
        if d.apply_chunk(chunk, now.timestamp_millis()) {
            self.sync_draft(events, &key);
        }
    }

    /// Shows a draft's current text: updates its row, or creates the row once the draft is
    /// worth showing (not empty, not a prefix of a final text of its scope).
    fn sync_draft(&mut self, events: &mut Vec<Event>, key: &(String, DraftKey)) {
        let d = self.state.drafts.get(key).expect("caller has the draft");
        let text = d.display();
        if text == d.shown {
            return;
        }
        match d.row_id {
            Some(id) => {
                let now = fmt_time(self.clock.now());
                let Some(row) = self.state.draft_rows.get_mut(&id) else {
                    return;
                };
                row.replace_text(text.clone(), now);
                let row = row.clone();
                self.state.drafts.get_mut(key).expect("exists").shown = text;
                self.emit_row(events, &row, &Route::Chat, RowChange::Updated);
                self.ops.push(Op::UpdateMessage(row));
            }
            None => {
                let redundant = self
                    .index
                    .get(&d.session_id)
                    .is_some_and(|i| i.final_extends(&d.scope, &text));
                if text.is_empty() || redundant {
                    return;
                }
                let (session, scope, task, umid) = (
                    d.session_id.clone(),
                    d.scope.clone(),
                    d.task_id.clone(),
                    d.user_message_id.clone(),
                );
                let (sort_key, occurred_at, received_at) =
                    (d.sort_key, d.occurred_at.clone(), d.received_at.clone());
                let mut row = self.new_row(&session, MessageKind::Assistant, text.clone());
                row.task_id = Some(task);
                row.user_message_id = umid;
                row.scope = Some(scope);
                row.occurred_at = occurred_at;
                row.received_at = received_at;
                row.sort_key = sort_key;
                row.draft = true;
                row.draft_key = Some(key.1.encode());
                let d = self.state.drafts.get_mut(key).expect("exists");
                d.row_id = Some(row.id);
                d.shown = text;
                self.insert_row(row, &Route::Chat, events);
            }
        }
    }

    /// Removes a draft (and its row, if shown).
    fn drop_draft(&mut self, events: &mut Vec<Event>, key: &(String, DraftKey), route: &Route) {
        let Some(d) = self.state.drafts.get_mut(key) else {
            return;
        };
        let row = d.row_id;
        d.settle();
        if matches!(key.1, DraftKey::Edit(_)) {
            self.state.drafts.remove(key);
        }
        if let Some(id) = row {
            self.state.draft_rows.remove(&id);
            self.ops.push(Op::DeleteMessage(id));
            let (change, sid) = match route {
                Route::Chat => (
                    Change::MessageRemoved {
                        session_id: key.0.clone(),
                        message_id: id,
                    },
                    key.0.clone(),
                ),
                Route::Insights { call_id } => (
                    Change::InsightRemoved {
                        session_id: call_id.clone(),
                        message_id: id,
                    },
                    call_id.clone(),
                ),
            };
            self.emit(events, &sid, change);
        }
    }

    fn stop_typing(
        &mut self,
        events: &mut Vec<Event>,
        session_id: &str,
        scope: &str,
        reason: &str,
    ) {
        if let Some(lease) = self.state.typing.clear(session_id, scope) {
            let typing = typing_view(session_id, scope, &lease);
            emit_live(
                events,
                Change::TypingStopped {
                    session_id: session_id.to_string(),
                    reason: reason.to_string(),
                    typing,
                },
            );
        }
    }

    /// Timers: typing indicators and drafts whose inactivity timer ran out.
    pub fn expire(&mut self, events: &mut Vec<Event>) {
        let now_ms = self.clock.now_ms();
        for (session, scope) in self.state.typing.expire(now_ms) {
            let lease = typing::Lease {
                label: None,
                since_ms: now_ms,
                expires_ms: now_ms,
            };
            let typing = typing_view(&session, &scope, &lease);
            emit_live(
                events,
                Change::TypingStopped {
                    session_id: session,
                    reason: "timeout".into(),
                    typing,
                },
            );
        }
        let timeout = self.settings.typing_timeout_ms;
        let due: Vec<(String, DraftKey)> = self
            .state
            .drafts
            .iter()
            .filter(|(_, d)| d.is_open() && d.last_activity_ms + timeout <= now_ms)
            .map(|(k, _)| k.clone())
            .collect();
        for key in due {
            self.settle_as_is(events, &key);
        }
        // Forget settled stream drafts after a while (they only guard against late chunks).
        self.state
            .drafts
            .retain(|_, d| d.is_open() || d.last_activity_ms + 10 * 60_000 > now_ms);
    }

    /// An interrupted draft (no final message came): its text stays, as a final message.
    fn settle_as_is(&mut self, events: &mut Vec<Event>, key: &(String, DraftKey)) {
        let Some(d) = self.state.drafts.get_mut(key) else {
            return;
        };
        let row_id = d.row_id;
        d.settle();
        if matches!(key.1, DraftKey::Edit(_)) {
            self.state.drafts.remove(key);
        }
        let Some(mut row) = row_id.and_then(|id| self.state.draft_rows.remove(&id)) else {
            return;
        };
        let scope = row.scope.clone().unwrap_or_default();
        let content_key = hash_hex(&[
            &row.session_id,
            &scope,
            MessageKind::Assistant.as_str(),
            &row.text,
        ]);
        // The index may be cold after a restart; an unknown key only risks keeping a draft
        // whose text is also final, never losing one.
        let dup = self
            .index
            .get(&row.session_id)
            .is_some_and(|i| i.has_content(&content_key));
        if dup {
            self.ops.push(Op::DeleteMessage(row.id));
            let sid = row.session_id.clone();
            let change = Change::MessageRemoved {
                session_id: sid.clone(),
                message_id: row.id,
            };
            self.emit(events, &sid, change);
            return;
        }
        row.draft = false;
        row.draft_key = None;
        row.content_key = Some(content_key);
        if let Some(i) = self.index.get_mut(&row.session_id) {
            i.add(&row);
        }
        self.emit_row(events, &row, &Route::Chat, RowChange::Updated);
        self.ops.push(Op::UpdateMessage(row));
    }
}
