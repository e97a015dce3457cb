//! The rules of the product: what each callback, user action and timer does to the
//! conversation. Start here to learn what StageWhisper shows (`docs/contract.md` is the
//! reference; the tests in `conversation/tests.rs` and `tests/callback_protocol.rs` pin it).
//!
//! - [`replies`]: callbacks — `message`/`notice` append an entry, deduped by `message_id` and
//!   by cleaned text within the scope (`user_message_id`, else `task_id`); `errored` appends an
//!   error entry; `typing`/`tool_call` show an indicator per scope until a reply,
//!   `completed`/`silent` or the inactivity timer; `stream` parts and cursor-`▉` messages build
//!   drafts that settle in place; timers settle what was left open;
//! - [`drafts`]: the text of a live draft (stream parts, edit-style cursor texts);
//! - [`typing`]: typing leases and their inactivity timer (memory only: their events are
//!   live-only, see [`emit_live`]);
//! - [`sessions`]: chats and calls (created, ended, deleted), user messages, transcript turns,
//!   delivery states of outgoing entries;
//! - this file: the state the rules keep, routing (`insights:<call>` sessions feed the call's
//!   Insights list; unknown, deleted and long-ended insights sessions are `session_ended`),
//!   and how a decision becomes rows, events and ops.
//!
//! The rules are plain synchronous code: no SQL, no channels, no waiting. Each decision adds
//! [`Op`]s (the writes, committed later by the store's writer) and [`Event`]s (published once
//! committed). What they need from the database — a session's index ([`crate::conversation::index`]),
//! a row whose delivery changes — the actor loads before handing them the batch; the start-up
//! state comes in through [`Rules::new`].

mod again;
pub mod drafts;
pub mod permissions;
mod replies;
mod sessions;
pub mod speakers;
pub mod typing;

use super::index::{Indexes, SessionIndex};
use super::keys::FastHash;
use super::{micros_of, Settings};
use crate::clock::{fmt_time, SharedClock};
use crate::events::{Change, Event};
use crate::model::{InsightView, MessageKind, MessageRow, MessageView, TypingView};
use crate::protocol::{Callback, Status, INSIGHTS_PREFIX};
use crate::store::{Op, SessionRecord};
use chrono::{DateTime, Utc};
use drafts::{Draft, DraftKey};
use std::collections::HashMap;
use std::sync::Arc;
use typing::TypingTracker;

/// In-memory state of the rules (a failed commit reloads it from the database).
struct State {
    /// Every session ever created (deleted ones as tombstones), by id.
    sessions: Arc<HashMap<String, SessionRecord, FastHash>>,
    drafts: HashMap<(String, DraftKey), Draft>,
    /// Rows of visible drafts, by id.
    draft_rows: HashMap<i64, MessageRow>,
    typing: TypingTracker,
    /// Permission cards touched this run (or loaded for a batch), by request id.
    /// The next id to hand out. Messages and events share one sequence: a row that is its own
    /// `message_added` event (see [`logs_itself`]) carries that event's id.
    next_id: i64,
}

impl State {
    fn take_id(&mut self) -> i64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }
}

/// A chat row that never changes after it is added (a final assistant message, a notice, an
/// error) is its own `message_added` event: the event has the row's id and no row in `events`;
/// reading the log rebuilds the identical event from the row. Drafts, user and transcript rows
/// change later (their events are logged in full), and so do hidden rows and insights.
fn logs_itself(row: &MessageRow, route: &Route) -> bool {
    matches!(route, Route::Chat)
        && !row.hidden
        && !row.draft
        && row.delivery.is_none()
        && matches!(
            row.kind,
            MessageKind::Assistant | MessageKind::Notice | MessageKind::Error
        )
}

/// What [`Rules::emit_row`] reports about a row.
#[derive(Clone, Copy)]
enum RowChange {
    Added { logged: bool },
    Updated,
}

/// Where a callback goes.
enum Route {
    Chat,
    Insights { call_id: String },
}

/// The rules' state and the writes decided by the current batch.
pub(crate) struct Rules {
    state: State,
    /// Session indexes; the actor loads missing ones before a batch.
    pub(crate) index: Indexes,
    /// Writes decided by the current batch.
    ops: Vec<Op>,
    clock: SharedClock,
    settings: Settings,
    /// Permission cards touched this run (or loaded by the actor for a batch), by request id.
    pub(crate) permissions: HashMap<String, MessageRow>,
    /// Speakers renamed in a call (old name → new), for its turns still to come.
    speaker_names: HashMap<String, HashMap<String, String>>,
}

impl Rules {
    /// The rules' state as stored: every session, the next id, and the drafts a previous run
    /// left open (their rows).
    pub fn new(
        sessions: Vec<SessionRecord>,
        next_id: i64,
        open_drafts: Vec<MessageRow>,
        clock: SharedClock,
        settings: Settings,
    ) -> Rules {
        let sessions: HashMap<String, SessionRecord, FastHash> = sessions
            .into_iter()
            .map(|s| (s.session_id.clone(), s))
            .collect();
        let mut state = State {
            sessions: Arc::new(sessions),
            drafts: HashMap::new(),
            draft_rows: HashMap::new(),
            typing: TypingTracker::new(settings.typing_timeout_ms),
            next_id,
        };
        let now_ms = clock.now_ms();
        for row in open_drafts {
            let Some(key) = row.draft_key.as_deref().and_then(DraftKey::decode) else {
                continue;
            };
            let d = Draft::new(
                &row.session_id,
                row.scope.as_deref().unwrap_or_default(),
                row.task_id.as_deref().unwrap_or_default(),
                row.user_message_id.as_deref(),
                row.sort_key,
                row.occurred_at.clone(),
                row.received_at.clone(),
                now_ms,
            )
            .resumed(row.id, row.text.clone());
            state.drafts.insert((row.session_id.clone(), key), d);
            state.draft_rows.insert(row.id, row);
        }
        Rules {
            state,
            index: Indexes::default(),
            ops: Vec::new(),
            clock,
            settings,
            permissions: HashMap::new(),
            speaker_names: HashMap::new(),
        }
    }

    /// Typing indicators live only in memory: a reload keeps what the view was told.
    pub fn keep_typing_of(&mut self, old: &Rules) {
        self.state.typing = old.state.typing.clone();
    }

    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    pub fn settings(&self) -> Settings {
        self.settings
    }

    /// Room for the writes of a batch of `n` commands.
    pub fn reserve_ops(&mut self, n: usize) {
        self.ops.reserve(n);
    }

    /// The writes decided since the last call.
    pub fn take_ops(&mut self) -> Vec<Op> {
        std::mem::take(&mut self.ops)
    }

    /// The session whose index a callback needs (the actor loads it first), if any.
    pub fn index_for_callback<'c>(&self, cb: &'c Callback) -> Option<&'c str> {
        let s = self.state.sessions.get(cb.session_id.as_str())?;
        let needed = match cb.status {
            Status::Message | Status::Notice | Status::Errored => true,
            // Insights surface only final messages.
            Status::Stream => s.kind != "insights",
            Status::Completed => cb
                .reply_text
                .as_deref()
                .is_some_and(|t| !t.trim().is_empty()),
            Status::Typing | Status::ToolCall | Status::Silent => false,
        };
        (needed && s.deleted_at.is_none()).then_some(cb.session_id.as_str())
    }

    /// The session whose index a user message needs, if it can be stored.
    pub fn index_for_user_message<'s>(&self, session_id: &'s str) -> Option<&'s str> {
        self.live_chat(session_id).map(|_| session_id)
    }

    /// The (insights) session a transcript turn of a live call is stored in.
    pub fn index_for_transcript(&self, session_id: &str) -> Option<String> {
        self.live_chat(session_id)
            .filter(|c| c.is_call && c.ended_at.is_none())
            .map(|_| format!("{INSIGHTS_PREFIX}{session_id}"))
    }

    fn idx(&mut self, session_id: &str) -> &mut SessionIndex {
        self.index
            .get_mut(session_id)
            .expect("the actor loads a session's index before the rules use it")
    }

    pub fn next_deadline_ms(&self) -> Option<i64> {
        let drafts = self
            .state
            .drafts
            .values()
            .filter(|d| d.is_open())
            .map(|d| d.last_activity_ms + self.settings.typing_timeout_ms)
            .min();
        match (self.state.typing.next_deadline(), drafts) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Logs an event (written with the batch, published after the commit).
    fn emit(&mut self, events: &mut Vec<Event>, log_session: &str, change: Change) {
        let id = self.state.take_id();
        self.push_event(events, Event::logged(id, change), Some(log_session));
    }

    /// `log_session`: the session the logged event belongs to; `None` for a row that is its
    /// own event (nothing more is written).
    fn push_event(&mut self, events: &mut Vec<Event>, event: Event, log_session: Option<&str>) {
        if let Some(session) = log_session {
            self.ops.push(Op::InsertEvent {
                id: event.id,
                session_id: session.to_string(),
                data: event.json.clone(),
            });
        }
        events.push(event);
    }

    fn route(&self, session_id: &str) -> Option<Route> {
        let now_ms = self.clock.now_ms();
        let s = self.state.sessions.get(session_id)?;
        if s.deleted_at.is_some() {
            return None;
        }
        if s.kind == "insights" {
            let call_id = s.call_id.clone()?;
            let call = self.state.sessions.get(&call_id)?;
            if call.deleted_at.is_some() {
                return None;
            }
            if let Some(ended) = &call.ended_at {
                if micros_of(ended) / 1000 + self.settings.insights_grace_ms < now_ms {
                    return None;
                }
            }
            return Some(Route::Insights { call_id });
        }
        Some(Route::Chat)
    }

    fn sort_key(&self, at: Option<DateTime<Utc>>, now: DateTime<Utc>) -> i64 {
        match at {
            Some(t) if t < now => t.timestamp_micros(),
            _ => now.timestamp_micros(),
        }
    }

    /// A new row with the next id; the caller fills in the rest.
    fn new_row(&mut self, session_id: &str, kind: MessageKind, text: String) -> MessageRow {
        let id = self.state.take_id();
        let now = self.clock.now();
        MessageRow::new(
            id,
            session_id,
            kind,
            text,
            fmt_time(now),
            now.timestamp_micros(),
        )
    }

    /// Stores a new row (index, op, event).
    fn insert_row(&mut self, mut row: MessageRow, route: &Route, events: &mut Vec<Event>) {
        let logged = logs_itself(&row, route);
        if logged && row.id != self.state.next_id - 1 {
            // Its event must come after every event already emitted: a newer id.
            row.id = self.state.take_id();
        }
        self.idx(&row.session_id).add(&row);
        if !row.hidden {
            self.emit_row(events, &row, route, RowChange::Added { logged });
        }
        if row.draft {
            self.state.draft_rows.insert(row.id, row.clone());
        }
        self.ops.push(Op::InsertMessage { row, logged });
    }

    /// `RowChange::Added { logged: true }`: the row is its own event (decided by `insert_row`,
    /// which gave it the newest id).
    fn emit_row(
        &mut self,
        events: &mut Vec<Event>,
        row: &MessageRow,
        route: &Route,
        change: RowChange,
    ) {
        let added = matches!(change, RowChange::Added { .. });
        match route {
            Route::Chat => {
                let logged = matches!(change, RowChange::Added { logged: true });
                let id = if logged { row.id } else { self.state.take_id() };
                let session_id = row.session_id.clone();
                let message = MessageView::from(row);
                let change = if added {
                    Change::MessageAdded {
                        session_id,
                        message,
                    }
                } else {
                    Change::MessageUpdated {
                        session_id,
                        message,
                    }
                };
                let log_session = (!logged).then_some(row.session_id.as_str());
                self.push_event(events, Event::logged(id, change), log_session);
            }
            Route::Insights { call_id } => {
                let start = self
                    .state
                    .sessions
                    .get(call_id)
                    .map(|s| micros_of(&s.created_at))
                    .unwrap_or(0);
                let session_id = call_id.clone();
                let insight = InsightView::from_row(row, call_id, start);
                let change = if added {
                    Change::InsightAdded {
                        session_id,
                        insight,
                    }
                } else {
                    Change::InsightUpdated {
                        session_id,
                        insight,
                    }
                };
                self.emit(events, call_id, change);
            }
        }
    }
}

/// A live-only event ([`Event::live`]: never stored, no cursor), published with the batch's
/// logged events once the batch is committed, so it keeps its place among them. Typing
/// indicators are such events: they are worth showing while they last and worthless after, and
/// a view that (re)connects reads the current ones from `GET /api/sessions/{id}/typing`. A
/// `typing` callback alone therefore writes nothing to disk.
fn emit_live(events: &mut Vec<Event>, change: Change) {
    events.push(Event::live(change));
}

fn typing_view(session_id: &str, scope: &str, lease: &typing::Lease) -> TypingView {
    TypingView {
        session_id: session_id.to_string(),
        scope: scope.to_string(),
        label: lease.label.clone(),
        since: DateTime::from_timestamp_millis(lease.since_ms)
            .map(fmt_time)
            .unwrap_or_default(),
    }
}
