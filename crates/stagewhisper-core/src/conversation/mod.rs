//! The conversation: the rules of the product and the one writer of its state.
//!
//! Every change (a callback, a user message, a session created / ended / deleted, a timer
//! running out) is a command to one actor. The actor decides a batch of commands with the
//! rules, hands the batch's writes to the store's writer thread, which commits them in one
//! SQLite transaction (group commit), and only then answers each command and publishes its
//! events. So a 2xx always means "on disk", a duplicate never shows twice, and the event log and
//! the messages can never disagree. A command that finds nothing ahead of it is decided and
//! committed on its caller's own task, holding the actor's state (no thread hand-off); the
//! rules and the order of what is stored are the same either way.
//!
//! Where to look:
//! - [`rules`]: what the product does — dedupe, drafts, typing, insights routing, sessions.
//!   Plain synchronous code over in-memory state; start here;
//! - [`index`]: each session's dedupe keys and recent final texts, which the rules consult
//!   ([`keys`]: how ids and contents become those keys);
//! - [`actor`]: how a batch flows — load what the rules need, decide, hand to the writer,
//!   answer after the commit, recover after a failed one;
//! - [`crate::store::writer`]: the commit path (writer thread, group commit, multi-row
//!   inserts on the connection's raw handle);
//! - this file: the public handle [`Conversation`] (commands, and reads that go straight to the
//!   store) and the types callers see.
//!
//! What the conversation shows is specified in `docs/contract.md`.

mod actor;
mod index;
mod keys;
mod keyset;
/// The short stable digest of the dedupe index, for ids other modules derive the same way.
pub(crate) use keys::hash_hex;
mod rules;

pub use rules::permissions::{Settled, SETTLED_STATES};
pub use rules::speakers::SpeakerChange;
pub use rules::{drafts, typing};

use crate::clock::SharedClock;
use crate::events::{Change, EventHub};
use crate::model::{
    InsightView, MessageKind, MessageRow, MessageView, SessionView, TranscriptView, TypingView,
};
use crate::protocol::{Callback, INSIGHTS_PREFIX};
use crate::store::{SessionRecord, Store, StoreError};
use actor::{Cmd, Reply};
use sqlx::sqlite::SqliteConnection;
use tokio::sync::oneshot;

#[derive(Debug, Clone, Copy)]
pub struct Settings {
    /// Inactivity timer of a typing indicator (and of an open draft).
    pub typing_timeout_ms: i64,
    /// How long after a call ends its insights session still accepts replies.
    pub insights_grace_ms: i64,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            typing_timeout_ms: 30_000,
            insights_grace_ms: 120_000,
        }
    }
}

/// The result of an accepted callback.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Applied,
    Duplicate,
    /// The session is unknown, deleted, or an insights session past its grace period.
    SessionEnded,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CoreError {
    #[error("the change could not be stored: {0}")]
    StorageUnavailable(String),
    #[error("no such session")]
    SessionNotFound,
    #[error("this session is not a call")]
    NotACall,
    #[error("the text is empty")]
    EmptyText,
    #[error("the call has ended")]
    CallEnded,
    #[error("no such message")]
    MessageNotFound,
    #[error("the app is shutting down")]
    Stopped,
}

impl CoreError {
    pub fn code(&self) -> &'static str {
        match self {
            CoreError::StorageUnavailable(_) => "storage_unavailable",
            CoreError::SessionNotFound => "session_not_found",
            CoreError::NotACall => "not_a_call",
            CoreError::EmptyText => "empty_text",
            CoreError::CallEnded => "call_ended",
            CoreError::MessageNotFound => "message_not_found",
            CoreError::Stopped => "shutting_down",
        }
    }
}

/// What the assistant link reports about an outgoing entry (a user message or a transcript
/// turn).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeliveryUpdate {
    /// `pending` (queued, or queued again by a user retry), `sent` or `failed`.
    pub state: DeliveryState,
    /// The task id the entry was (or will be) sent under; kept across automatic retries.
    pub task_id: Option<String>,
    /// Why it failed: a stable code and a sentence for the user.
    pub error: Option<(String, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryState {
    Pending,
    Sent,
    Failed,
}

impl DeliveryState {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryState::Pending => "pending",
            DeliveryState::Sent => "sent",
            DeliveryState::Failed => "failed",
        }
    }
}

/// Handle to the conversation: cheap to clone, used by the listener, the control API and the
/// desktop shell.
#[derive(Clone)]
pub struct Conversation {
    actor: actor::Handle,
    store: Store,
    hub: EventHub,
    clock: SharedClock,
    settings: Settings,
    /// A sentence every call's prelude ends with (the assistant's tools over MCP, while they
    /// are on: [`crate::mcp`]).
    prelude_note: std::sync::Arc<std::sync::RwLock<Option<String>>>,
    /// Who spoke in each call so far (this run), for the prelude (`call_prelude_for`).
    people: std::sync::Arc<std::sync::RwLock<std::collections::HashMap<String, Vec<String>>>>,
}

impl Conversation {
    /// Loads state from the store and starts the actor and the writer thread.
    pub async fn start(
        store: Store,
        conn: SqliteConnection,
        clock: SharedClock,
        settings: Settings,
    ) -> Result<Conversation, StoreError> {
        let hub = EventHub::new();
        let actor = actor::start(&store, conn, clock.clone(), settings, hub.clone()).await?;
        Ok(Conversation {
            actor,
            store,
            hub,
            clock,
            settings,
            prelude_note: std::sync::Arc::default(),
            people: std::sync::Arc::default(),
        })
    }

    /// Sets (or clears) the sentence every call's prelude ends with from now on.
    pub fn set_prelude_note(&self, note: Option<String>) {
        *self.prelude_note.write().unwrap_or_else(|e| e.into_inner()) = note;
    }

    /// A call's prelude: `template` filled in with the title
    /// ([`crate::assistants::prelude::render_prelude`]), then the note, if any.
    pub fn call_prelude(&self, template: &str, title: Option<&str>) -> String {
        let text = crate::assistants::prelude::render_prelude(template, title);
        match &*self.prelude_note.read().unwrap_or_else(|e| e.into_inner()) {
            Some(note) => format!("{text}\n{note}"),
            None => text,
        }
    }

    /// [`Conversation::call_prelude`] for the call `call_id`, with who has spoken in it so far
    /// (`On the call so far: …`) once anyone has.
    pub fn call_prelude_for(&self, call_id: &str, template: &str, title: Option<&str>) -> String {
        let text = self.call_prelude(template, title);
        let people = self.people.read().unwrap_or_else(|e| e.into_inner());
        match crate::assistants::prelude::people_line(people.get(call_id).map(Vec::as_slice)) {
            Some(line) => format!("{text}\n{line}"),
            None => text,
        }
    }

    /// Lists `name` as on the call `call_id`: `false` when it was already.
    fn add_person(&self, call_id: &str, name: &str) -> bool {
        let mut people = self.people.write().unwrap_or_else(|e| e.into_inner());
        let names = people.entry(call_id.to_string()).or_default();
        let new = !names.iter().any(|n| n == name);
        if new {
            names.push(name.to_string());
        }
        new
    }

    /// Who spoke in the call, as its stored turns say (for the prelude).
    async fn refresh_people(&self, call_id: &str) {
        if let Ok(turns) = self.transcript(call_id).await {
            let mut names: Vec<String> = Vec::new();
            for s in turns.into_iter().filter_map(|t| t.speaker) {
                if !names.contains(&s) {
                    names.push(s);
                }
            }
            let mut people = self.people.write().unwrap_or_else(|e| e.into_inner());
            people.insert(call_id.to_string(), names);
        }
    }

    pub fn store(&self) -> &Store {
        &self.store
    }

    pub fn hub(&self) -> &EventHub {
        &self.hub
    }

    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    pub fn settings(&self) -> Settings {
        self.settings
    }

    async fn call<T>(&self, make: impl FnOnce(Reply<T>) -> Cmd) -> Result<T, CoreError> {
        let (reply, rx) = oneshot::channel();
        let _waiting = self.actor.enter();
        // Decided here when nothing is ahead of it; queued for the actor otherwise.
        if let Some(cmd) = self.actor.now(make(reply)) {
            self.actor.send(cmd).await.map_err(|_| CoreError::Stopped)?;
        }
        Self::answer(rx).await
    }

    /// Through the actor's queue, never decided on the caller's task.
    async fn queued<T>(&self, make: impl FnOnce(Reply<T>) -> Cmd) -> Result<T, CoreError> {
        let (reply, rx) = oneshot::channel();
        let _waiting = self.actor.enter();
        self.actor
            .send(make(reply))
            .await
            .map_err(|_| CoreError::Stopped)?;
        Self::answer(rx).await
    }

    async fn answer<T>(rx: oneshot::Receiver<Result<T, CoreError>>) -> Result<T, CoreError> {
        rx.await.map_err(|_| {
            CoreError::StorageUnavailable("the writer stopped before committing".into())
        })?
    }

    /// Applies an assistant callback; returns once the change is committed.
    pub async fn submit(&self, cb: Callback) -> Result<Outcome, CoreError> {
        self.call(|r| Cmd::Callback(Box::new(cb), r)).await
    }

    pub async fn create_session(
        &self,
        is_call: bool,
        title: Option<String>,
    ) -> Result<SessionView, CoreError> {
        self.call(|reply| Cmd::CreateSession {
            is_call,
            title,
            reply,
        })
        .await
    }

    pub async fn end_call(&self, session_id: &str) -> Result<SessionView, CoreError> {
        let session_id = session_id.to_string();
        self.call(|reply| Cmd::EndCall { session_id, reply }).await
    }

    /// Sets a chat's title (`None` or blank: untitled).
    pub async fn rename_session(
        &self,
        session_id: &str,
        title: Option<String>,
    ) -> Result<SessionView, CoreError> {
        let session_id = session_id.to_string();
        self.call(|reply| Cmd::RenameSession {
            session_id,
            title,
            reply,
        })
        .await
    }

    pub async fn delete_session(&self, session_id: &str) -> Result<(), CoreError> {
        let session_id = session_id.to_string();
        self.call(|reply| Cmd::DeleteSession { session_id, reply })
            .await
    }

    pub async fn user_message(
        &self,
        session_id: &str,
        text: &str,
    ) -> Result<MessageView, CoreError> {
        self.user_message_for(session_id, text, None).await
    }

    /// The user's "Summarise this call": a user message like any other (sent to the assistant
    /// with the transcript in its text), marked [`crate::model::PURPOSE_SUMMARY_REQUEST`] so it
    /// is shown short and left out of search.
    pub async fn summary_request(
        &self,
        session_id: &str,
        text: &str,
    ) -> Result<MessageView, CoreError> {
        let purpose = Some(crate::model::PURPOSE_SUMMARY_REQUEST);
        self.user_message_for(session_id, text, purpose).await
    }

    async fn user_message_for(
        &self,
        session_id: &str,
        text: &str,
        purpose: Option<&'static str>,
    ) -> Result<MessageView, CoreError> {
        let session_id = session_id.to_string();
        let text = text.to_string();
        self.call(|reply| Cmd::UserMessage {
            session_id,
            text,
            purpose,
            reply,
        })
        .await
    }

    pub async fn typing(&self, session_id: &str) -> Result<Vec<TypingView>, CoreError> {
        let session_id = session_id.to_string();
        self.call(|reply| Cmd::Typing { session_id, reply }).await
    }

    /// Stores a final transcript turn of a live call (sent to the assistant by the link).
    pub async fn transcript_turn(
        &self,
        session_id: &str,
        speaker: Option<&str>,
        text: &str,
    ) -> Result<TranscriptView, CoreError> {
        self.transcript_turn_in(session_id, speaker, text, None)
            .await
    }

    /// [`Conversation::transcript_turn`] with the language the turn was heard in.
    pub async fn transcript_turn_in(
        &self,
        session_id: &str,
        speaker: Option<&str>,
        text: &str,
        language: Option<&str>,
    ) -> Result<TranscriptView, CoreError> {
        let session_id = session_id.to_string();
        let speaker = speaker.map(str::to_string);
        let text = text.to_string();
        // Listed before the turn is stored: the link may send the prelude as soon as it is.
        let given = speaker
            .as_deref()
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_string);
        let added = given
            .as_deref()
            .is_some_and(|s| self.add_person(&session_id, s));
        let call_id = session_id.clone();
        let language = language.map(str::to_string);
        let t = self
            .call(|reply| Cmd::Transcript {
                session_id,
                speaker,
                text,
                language,
                reply,
            })
            .await;
        let mut people = self.people.write().unwrap_or_else(|e| e.into_inner());
        let names = people.entry(call_id).or_default();
        match (&t, given.as_deref()) {
            // Not stored, or stored under a new name (the speaker was renamed): not listed.
            (Err(_), Some(g)) if added => names.retain(|n| n != g),
            (Ok(v), Some(g)) if added && v.speaker.as_deref() != Some(g) => {
                names.retain(|n| n != g)
            }
            _ => {}
        }
        if let Some(s) = t.as_ref().ok().and_then(|v| v.speaker.clone()) {
            if !names.contains(&s) {
                names.push(s);
            }
        }
        drop(people);
        let t = t?;
        Ok(t)
    }

    /// Gives a call's turns other speaker names (a rename, or the end-of-call pass): the number
    /// of turns changed. Works during the call and after it.
    pub async fn set_speakers(
        &self,
        call_id: &str,
        change: SpeakerChange,
    ) -> Result<usize, CoreError> {
        let call_id = call_id.to_string();
        let id = call_id.clone();
        let n = self
            .queued(|reply| Cmd::Speakers {
                call_id,
                change,
                reply,
            })
            .await?;
        self.refresh_people(&id).await;
        Ok(n)
    }

    /// "Transcribe again": the call's turns get the texts a new model heard, in one commit (all
    /// or none); answers how many changed. Nothing is sent to the assistant.
    pub async fn retranscribe(
        &self,
        call_id: &str,
        turns: Vec<crate::recordings::Retranscribed>,
    ) -> Result<u64, CoreError> {
        let call_id = call_id.to_string();
        self.call(|reply| Cmd::Retranscribe {
            call_id,
            turns,
            reply,
        })
        .await
    }

    /// Records the delivery state of an outgoing entry (by row id).
    pub async fn set_delivery(&self, id: i64, update: DeliveryUpdate) -> Result<(), CoreError> {
        self.call(|reply| Cmd::Delivery { id, update, reply }).await
    }

    /// A permission request of the assistant: a pending card in `session_id` (a chat).
    /// `(card, false)` when the request already has a card.
    pub async fn permission_request(
        &self,
        session_id: &str,
        request_id: &str,
        tool: &str,
        input_preview: &str,
    ) -> Result<(MessageView, bool), CoreError> {
        let (session_id, request_id) = (session_id.to_string(), request_id.to_string());
        let (tool, input_preview) = (tool.to_string(), input_preview.to_string());
        self.call(|reply| Cmd::PermissionRequest {
            session_id,
            request_id,
            tool,
            input_preview,
            reply,
        })
        .await
    }

    /// Settles a card in place (`state`: `allow`, `deny` or `expired`); a card settles once.
    pub async fn settle_permission(
        &self,
        request_id: &str,
        state: &str,
        resolver: Option<&str>,
    ) -> Result<Settled, CoreError> {
        debug_assert!(SETTLED_STATES.contains(&state));
        let (request_id, state) = (request_id.to_string(), state.to_string());
        let resolver = resolver.map(str::to_string);
        self.call(|reply| Cmd::SettlePermission {
            request_id,
            state,
            resolver,
            reply,
        })
        .await
    }

    /// The card of a request (`None`: no such request, or its chat was deleted).
    pub async fn permission_card(
        &self,
        request_id: &str,
    ) -> Result<Option<MessageView>, CoreError> {
        let request_id = request_id.to_string();
        self.call(|reply| Cmd::PermissionCard { request_id, reply })
            .await
    }

    /// Logs an app-wide event: `data` is a JSON object with a `type` (the log adds `id` and a
    /// null `session_id`). Used for state that lives outside the conversation, such as the
    /// assistant link's status, so every view learns it from the one event stream.
    pub async fn app_event(&self, change: Change) -> Result<(), CoreError> {
        self.call(|reply| Cmd::AppEvent {
            change: Box::new(change),
            reply,
        })
        .await
    }

    /// Outgoing entries still to deliver, oldest first.
    pub async fn pending_deliveries(&self) -> Result<Vec<MessageRow>, CoreError> {
        self.store.pending_deliveries().await.map_err(storage)
    }

    /// The transcript of a call, oldest first.
    pub async fn transcript(&self, session_id: &str) -> Result<Vec<TranscriptView>, CoreError> {
        let s = self.chat_session(session_id).await?;
        let start = micros_of(&s.created_at);
        let rows = self
            .store
            .messages(&format!("{INSIGHTS_PREFIX}{session_id}"))
            .await
            .map_err(storage)?;
        Ok(rows
            .iter()
            .filter(|r| r.kind == MessageKind::Transcript)
            .map(|r| TranscriptView::from_row(r, session_id, start))
            .collect())
    }

    /// Runs due timers now (tests with a manual clock call this after advancing it).
    pub async fn tick(&self) -> Result<(), CoreError> {
        self.actor
            .send(Cmd::Tick)
            .await
            .map_err(|_| CoreError::Stopped)?;
        // A round trip through the queue: the tick's batch is committed when this returns.
        self.queued(|reply| Cmd::Typing {
            session_id: String::new(),
            reply,
        })
        .await
        .map(|_| ())
    }

    // ---- read side (no actor round trip) ----

    pub async fn sessions(&self) -> Result<Vec<SessionView>, CoreError> {
        let rows = self.store.sessions().await.map_err(storage)?;
        Ok(rows
            .iter()
            .filter(|s| s.kind == "chat" && s.deleted_at.is_none())
            .map(session_view)
            .collect())
    }

    /// Checks that `session_id` is a call still going on: `SessionNotFound`, `NotACall` or
    /// `CallEnded` otherwise (interim transcript turns and listening need one).
    pub async fn live_call(&self, session_id: &str) -> Result<(), CoreError> {
        let call = self
            .sessions()
            .await?
            .into_iter()
            .find(|s| s.session_id == session_id)
            .ok_or(CoreError::SessionNotFound)?;
        if !call.is_call {
            return Err(CoreError::NotACall);
        }
        if call.ended_at.is_some() {
            return Err(CoreError::CallEnded);
        }
        Ok(())
    }

    async fn chat_session(&self, session_id: &str) -> Result<SessionRecord, CoreError> {
        self.store
            .sessions()
            .await
            .map_err(storage)?
            .into_iter()
            .find(|s| s.session_id == session_id && s.kind == "chat" && s.deleted_at.is_none())
            .ok_or(CoreError::SessionNotFound)
    }

    pub async fn messages(&self, session_id: &str) -> Result<Vec<MessageView>, CoreError> {
        self.chat_session(session_id).await?;
        let rows = self.store.messages(session_id).await.map_err(storage)?;
        Ok(rows
            .iter()
            .filter(|r| !r.hidden)
            .map(MessageView::from)
            .collect())
    }

    /// The Insights list of a call (or chat), newest first, `none` replies left out.
    pub async fn insights(&self, session_id: &str) -> Result<Vec<InsightView>, CoreError> {
        let s = self.chat_session(session_id).await?;
        let start = micros_of(&s.created_at);
        let rows = self
            .store
            .messages(&format!("{INSIGHTS_PREFIX}{session_id}"))
            .await
            .map_err(storage)?;
        let mut v: Vec<InsightView> = rows
            .iter()
            .filter(|r| !r.hidden && !matches!(r.kind, MessageKind::User | MessageKind::Transcript))
            .map(|r| InsightView::from_row(r, session_id, start))
            .collect();
        v.reverse();
        Ok(v)
    }
}

fn storage(e: StoreError) -> CoreError {
    CoreError::StorageUnavailable(e.to_string())
}

pub(crate) fn micros_of(t: &str) -> i64 {
    crate::protocol::parse_rfc3339(t)
        .map(|d| d.timestamp_micros())
        .unwrap_or(0)
}

pub(crate) fn session_view(s: &SessionRecord) -> SessionView {
    SessionView {
        session_id: s.session_id.clone(),
        kind: "chat".into(),
        is_call: s.is_call,
        title: s.title.clone(),
        created_at: s.created_at.clone(),
        ended_at: s.ended_at.clone(),
        insights_session_id: s
            .is_call
            .then(|| format!("{INSIGHTS_PREFIX}{}", s.session_id)),
    }
}

#[cfg(test)]
pub(crate) mod tests;
