//! The change log's live side: after the writer commits, it publishes each event here. A reader
//! resumes from a cursor by reading the log from the store and then following live events,
//! skipping ids it already has, so it gets everything after its cursor exactly once.
//!
//! Besides the log, the hub carries *live-only* events ([`EventHub::publish_live`]): state that
//! is worth showing while it happens and worthless afterwards (a partial transcript, an audio
//! level). They are never stored, have no cursor (`id` 0, and `"live": true` in their JSON) and
//! reach only the readers following the hub at that moment; a view that reconnects reads the
//! current state from its route instead.

use crate::model::{
    AudioStatus, Channel, InsightView, MessageView, SessionView, TranscriptView, TypingView,
};
use crate::store::{Store, StoreError};
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use tokio::sync::broadcast;

/// What changed: one variant per type of the event stream (docs/contract.md, "Event stream"),
/// made once by whoever changes the state and read by `match`. Serialized, it is the event's
/// JSON as the views receive it (`type` is the variant's name in snake case, then its fields).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Change {
    SessionCreated {
        session_id: String,
        session: SessionView,
    },
    SessionUpdated {
        session_id: String,
        session: SessionView,
    },
    /// The session, its messages and its events are erased.
    SessionDeleted {
        session_id: String,
    },
    /// A chat message; a draft growing or settling is `MessageUpdated`.
    MessageAdded {
        session_id: String,
        message: MessageView,
    },
    MessageUpdated {
        session_id: String,
        message: MessageView,
    },
    /// A draft that turned out to repeat a final message (`message_id` is the row's `id`).
    MessageRemoved {
        session_id: String,
        message_id: i64,
    },
    /// `session_id` is the chat session of the call.
    InsightAdded {
        session_id: String,
        insight: InsightView,
    },
    InsightUpdated {
        session_id: String,
        insight: InsightView,
    },
    InsightRemoved {
        session_id: String,
        message_id: i64,
    },
    /// `session_id` is the chat session of the call.
    TranscriptAdded {
        session_id: String,
        transcript: TranscriptView,
    },
    TranscriptUpdated {
        session_id: String,
        transcript: TranscriptView,
    },
    /// Live-only.
    TypingStarted {
        session_id: String,
        typing: TypingView,
    },
    /// Live-only; `reason`: `message`, `completed`, `timeout`, `errored`.
    TypingStopped {
        session_id: String,
        reason: String,
        typing: TypingView,
    },
    /// App-wide (`session_id` is `null`): the active kind's status changed, or the active kind.
    AssistantStatus {
        session_id: Option<String>,
        assistant: AssistantStatusView,
    },
    /// Live-only: a turn being heard. The last one of a turn has `final: true` and the stored
    /// turn's text (or none, when nothing was recognised) with its `outcome`: a view then drops
    /// the partial, and `TranscriptAdded` brings the turn.
    TranscriptPartial {
        session_id: String,
        turn_id: String,
        channel: Channel,
        speaker: String,
        text: String,
        #[serde(rename = "final")]
        is_final: bool,
        /// `stored`, `empty`, `queued`, `echo` or `gone` (final ones only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        outcome: Option<String>,
    },
    /// Live-only: the two channels' levels, at most about ten a second (0–1 peak of the last
    /// interval, `None` when the channel is off).
    AudioLevel {
        mic: Option<f32>,
        system: Option<f32>,
    },
    /// Live-only: the audio pipeline's status changed (as in `GET /api/audio`).
    AudioStatus {
        status: AudioStatus,
    },
    /// Live-only: a model download's progress (at most about four a second) and its end
    /// (`state`: `downloading`, `verifying`, `done`, `failed` with `error` and `message`,
    /// `cancelled`); see [`crate::models`].
    ModelDownload {
        name: String,
        state: String,
        done: u64,
        total: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        error: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message: Option<String>,
    },
    /// Live-only: an application other than this one holds a microphone and no call is
    /// running: the offer to listen (`GET /api/audio/detection` lists the offers).
    CallOffered {
        app: String,
        binary: Option<String>,
        /// What people read ("zoom", "a call in Firefox").
        label: String,
    },
    /// Live-only: the application let go of the microphone (or the offer was answered). With
    /// `call_id`: the call started from the offer, offered to end (it ends by itself at
    /// `ends_at` when a grace period is set).
    CallOfferClosed {
        app: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        call_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        ends_at: Option<String>,
    },
    /// Live-only: one channel of the call listened to has been digital silence for a minute
    /// while the other carried sound (`channel`), or that is over (`channel: null`).
    AudioSilence {
        session_id: String,
        channel: Option<Channel>,
        message: String,
    },
    /// Live-only: "Transcribe again" of a past call: its progress and its end (see
    /// [`crate::recordings`]).
    TranscribeProgress {
        session_id: String,
        progress: crate::recordings::TranscribeView,
    },
    /// A logged event of a type this version does not know (its JSON is passed on as it is).
    #[serde(other)]
    Unknown,
}

/// The `assistant` of an `assistant_status` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AssistantStatusView {
    pub kind: String,
    pub status: String,
    pub detail: String,
    pub checked_at: Option<String>,
}

impl Change {
    /// The event's `type`.
    pub fn name(&self) -> &'static str {
        match self {
            Change::SessionCreated { .. } => "session_created",
            Change::SessionUpdated { .. } => "session_updated",
            Change::SessionDeleted { .. } => "session_deleted",
            Change::MessageAdded { .. } => "message_added",
            Change::MessageUpdated { .. } => "message_updated",
            Change::MessageRemoved { .. } => "message_removed",
            Change::InsightAdded { .. } => "insight_added",
            Change::InsightUpdated { .. } => "insight_updated",
            Change::InsightRemoved { .. } => "insight_removed",
            Change::TranscriptAdded { .. } => "transcript_added",
            Change::TranscriptUpdated { .. } => "transcript_updated",
            Change::TypingStarted { .. } => "typing_started",
            Change::TypingStopped { .. } => "typing_stopped",
            Change::AssistantStatus { .. } => "assistant_status",
            Change::TranscriptPartial { .. } => "transcript_partial",
            Change::AudioLevel { .. } => "audio_level",
            Change::AudioStatus { .. } => "audio_status",
            Change::ModelDownload { .. } => "model_download",
            Change::CallOffered { .. } => "call_offered",
            Change::CallOfferClosed { .. } => "call_offer_closed",
            Change::AudioSilence { .. } => "audio_silence",
            Change::TranscribeProgress { .. } => "transcribe_progress",
            Change::Unknown => "unknown",
        }
    }
}

/// One event: its cursor, what changed, and the JSON object the view receives (with `id`
/// inside for a logged event, `"live": true` for a live-only one).
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub id: i64,
    pub change: Change,
    pub json: String,
}

/// The `id` of a live-only event: no event of the log has it (the log's ids start at 1).
pub const LIVE_ID: i64 = 0;

/// The wire form: `{"id", "type", …the change's fields}` or `{"type", …, "live": true}`.
#[derive(Serialize)]
struct Wire<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<i64>,
    #[serde(flatten)]
    change: &'a Change,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    live: bool,
}

impl Event {
    /// An event of the log, with its cursor.
    pub fn logged(id: i64, change: Change) -> Event {
        let json = serde_json::to_string(&Wire {
            id: Some(id),
            change: &change,
            live: false,
        })
        .expect("an event serializes");
        Event { id, change, json }
    }

    /// A live-only event (see the module docs).
    pub fn live(change: Change) -> Event {
        let json = serde_json::to_string(&Wire {
            id: None,
            change: &change,
            live: true,
        })
        .expect("an event serializes");
        Event {
            id: LIVE_ID,
            change,
            json,
        }
    }

    /// The event's `type`.
    pub fn event_type(&self) -> &'static str {
        self.change.name()
    }

    /// Whether this event is live-only (never stored, no cursor).
    pub fn is_live(&self) -> bool {
        self.id == LIVE_ID
    }

    /// Builds the event from the stored data (a JSON object, with or without `id`).
    pub fn from_stored(id: i64, data: &str) -> Event {
        let mut value: serde_json::Value =
            serde_json::from_str(data).unwrap_or_else(|_| serde_json::json!({}));
        let change = Change::deserialize(&value).unwrap_or(Change::Unknown);
        if let Some(obj) = value.as_object_mut() {
            obj.insert("id".into(), id.into());
        }
        Event {
            id,
            change,
            json: value.to_string(),
        }
    }
}

#[derive(Clone)]
pub struct EventHub {
    tx: broadcast::Sender<Arc<Event>>,
}

impl Default for EventHub {
    fn default() -> Self {
        Self::new()
    }
}

impl EventHub {
    pub fn new() -> Self {
        let (tx, _) = broadcast::channel(4096);
        EventHub { tx }
    }

    pub fn publish(&self, e: Event) {
        let _ = self.tx.send(Arc::new(e));
    }

    /// Publishes a live-only event (see the module docs) to the readers following the hub now.
    pub fn publish_live(&self, change: Change) {
        self.publish(Event::live(change));
    }

    /// A reader positioned after `cursor`.
    pub fn subscribe(&self, store: Store, cursor: i64) -> Subscription {
        Subscription {
            rx: self.tx.subscribe(),
            store,
            last: cursor,
            backlog: std::collections::VecDeque::new(),
            catching_up: true,
        }
    }
}

pub struct Subscription {
    rx: broadcast::Receiver<Arc<Event>>,
    store: Store,
    last: i64,
    backlog: std::collections::VecDeque<Event>,
    catching_up: bool,
}

const PAGE: i64 = 500;

impl Subscription {
    pub fn cursor(&self) -> i64 {
        self.last
    }

    /// The next event after the cursor; waits for one when caught up. Shared with the other
    /// readers of the live stream (no copy per subscriber). Live-only events come in stream
    /// order among the logged ones once the reader has caught up, and leave the cursor as it is.
    pub async fn next(&mut self) -> Result<Arc<Event>, StoreError> {
        loop {
            if let Some(e) = self.backlog.pop_front() {
                self.last = e.id;
                return Ok(Arc::new(e));
            }
            if self.catching_up {
                let page = self.store.events_after(self.last, PAGE).await?;
                self.catching_up = page.len() as i64 == PAGE;
                self.backlog
                    .extend(page.iter().map(|(id, data)| Event::from_stored(*id, data)));
                continue;
            }
            match self.rx.recv().await {
                Ok(e) if e.is_live() => return Ok(e),
                Ok(e) if e.id <= self.last => continue,
                Ok(e) => {
                    self.last = e.id;
                    return Ok(e);
                }
                // Fell behind the live buffer: read the log again from the cursor.
                Err(broadcast::error::RecvError::Lagged(_)) => self.catching_up = true,
                Err(broadcast::error::RecvError::Closed) => {
                    std::future::pending::<()>().await;
                }
            }
        }
    }
}

impl crate::recordings::TranscribeView {
    /// The live-only event of this state (a "Transcribe again" of `call_id`).
    pub fn event(&self, call_id: &str) -> Change {
        Change::TranscribeProgress {
            session_id: call_id.to_string(),
            progress: self.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{MessageJson, MessageKind, MessageRow, PermissionCard};
    use serde_json::{json, Value};

    fn row() -> MessageRow {
        MessageRow {
            message_id: Some("m".into()),
            task_id: Some("t".into()),
            scope: Some("u".into()),
            occurred_at: Some("2026-11-29T12:00:00Z".into()),
            content_key: Some("k".into()),
            delivery: Some("failed".into()),
            delivery_error: Some(r#"{"code":"x","message":"y"}"#.into()),
            permission: Some(Box::new(PermissionCard {
                request_id: "r".into(),
                tool: "Bash".into(),
                input_preview: "ls".into(),
                state: "resolved".into(),
                resolver: None,
            })),
            ..MessageRow::new(
                7,
                "s",
                MessageKind::Permission,
                "May I? \"quoted\" ▉\n".into(),
                "2026-11-29T12:00:01.5Z".into(),
                42,
            )
        }
    }

    fn every_change() -> Vec<Change> {
        let r = row();
        let session = SessionView {
            session_id: "s".into(),
            kind: "chat".into(),
            is_call: true,
            title: Some("Acme".into()),
            created_at: "2026-11-29T12:00:00Z".into(),
            ended_at: None,
            insights_session_id: Some("insights:s".into()),
        };
        let typing = TypingView {
            session_id: "s".into(),
            scope: "u".into(),
            label: Some("Bash".into()),
            since: "2026-11-29T12:00:00Z".into(),
        };
        let s = || "s".to_string();
        vec![
            Change::SessionCreated {
                session_id: s(),
                session: session.clone(),
            },
            Change::SessionUpdated {
                session_id: s(),
                session,
            },
            Change::SessionDeleted { session_id: s() },
            Change::MessageAdded {
                session_id: s(),
                message: MessageView::from(&r),
            },
            Change::MessageUpdated {
                session_id: s(),
                message: MessageView::from(&r),
            },
            Change::MessageRemoved {
                session_id: s(),
                message_id: 7,
            },
            Change::InsightAdded {
                session_id: s(),
                insight: InsightView::from_row(&r, "s", 0),
            },
            Change::InsightUpdated {
                session_id: s(),
                insight: InsightView::from_row(&r, "s", 0),
            },
            Change::InsightRemoved {
                session_id: s(),
                message_id: 7,
            },
            Change::TranscriptAdded {
                session_id: s(),
                transcript: TranscriptView::from_row(&r, "s", 0),
            },
            Change::TranscriptUpdated {
                session_id: s(),
                transcript: TranscriptView::from_row(&r, "s", 0),
            },
            Change::TypingStarted {
                session_id: s(),
                typing: typing.clone(),
            },
            Change::TypingStopped {
                session_id: s(),
                reason: "timeout".into(),
                typing,
            },
            Change::AssistantStatus {
                session_id: None,
                assistant: AssistantStatusView {
                    kind: "byo".into(),
                    status: "online".into(),
                    detail: "Paired.".into(),
                    checked_at: None,
                },
            },
            Change::TranscriptPartial {
                session_id: s(),
                turn_id: "t1".into(),
                channel: Channel::System,
                speaker: "Them".into(),
                text: "so the budget".into(),
                is_final: true,
                outcome: Some("stored".into()),
            },
            Change::AudioLevel {
                mic: Some(0.123),
                system: None,
            },
            Change::AudioStatus {
                status: AudioStatus::idle(crate::model::EngineStatus {
                    kind: "builtin".into(),
                    state: "ready".into(),
                    detail: String::new(),
                }),
            },
            Change::ModelDownload {
                name: "tiny.en".into(),
                state: "failed".into(),
                done: 1024,
                total: 77_704_715,
                error: Some("network_unavailable".into()),
                message: Some("no connection".into()),
            },
            Change::TranscribeProgress {
                session_id: s(),
                progress: crate::recordings::TranscribeView {
                    model: "base.en".into(),
                    language: "auto".into(),
                    state: "done".into(),
                    done: 3,
                    total: 3,
                    changed: Some(2),
                    error: None,
                    message: None,
                },
            },
        ]
    }

    #[test]
    fn every_change_reads_back_from_the_log_as_it_was_made() {
        for (i, change) in every_change().into_iter().enumerate() {
            let id = i as i64 + 1;
            let made = Event::logged(id, change.clone());
            let v: Value = serde_json::from_str(&made.json).unwrap();
            assert_eq!(
                (v["id"].as_i64(), v["type"].as_str()),
                (Some(id), Some(change.name()))
            );
            assert!(v.get("live").is_none(), "{v}");
            let read = Event::from_stored(id, &made.json);
            assert_eq!(read.change, change, "{}", made.json);
            assert_eq!(read.event_type(), made.event_type());
            let again: Value = serde_json::from_str(&read.json).unwrap();
            assert_eq!(again, v);
        }
    }

    #[test]
    fn a_live_event_has_no_cursor_and_says_live() {
        let e = Event::live(Change::AudioLevel {
            mic: Some(0.5),
            system: None,
        });
        assert!(e.is_live());
        let v: Value = serde_json::from_str(&e.json).unwrap();
        assert_eq!(
            v,
            json!({"type": "audio_level", "mic": 0.5, "system": null, "live": true})
        );
        // A partial (not final) turn carries no outcome.
        let e = Event::live(Change::TranscriptPartial {
            session_id: "s".into(),
            turn_id: "t".into(),
            channel: Channel::Mic,
            speaker: "You".into(),
            text: "hel".into(),
            is_final: false,
            outcome: None,
        });
        let v: Value = serde_json::from_str(&e.json).unwrap();
        assert_eq!(
            v,
            json!({"type": "transcript_partial", "session_id": "s", "turn_id": "t",
                "channel": "mic", "speaker": "You", "text": "hel", "final": false, "live": true})
        );
    }

    /// The hot path makes `message_added` from the view; the log rebuilds it from the row
    /// (`MessageJson`): the view must read the same either way.
    #[test]
    fn a_message_event_is_the_rows_json() {
        let r = row();
        let e = Event::logged(
            7,
            Change::MessageAdded {
                session_id: "s".into(),
                message: MessageView::from(&r),
            },
        );
        let v: Value = serde_json::from_str(&e.json).unwrap();
        let from_row = json!({"id": 7, "type": "message_added", "session_id": "s",
            "message": serde_json::to_value(MessageJson(&r)).unwrap()});
        assert_eq!(v, from_row);
    }

    #[test]
    fn an_unknown_or_broken_logged_event_is_passed_on_as_it_is() {
        let e = Event::from_stored(5, r#"{"type":"from_a_newer_app","x":1}"#);
        assert_eq!(
            (e.change.clone(), e.event_type()),
            (Change::Unknown, "unknown")
        );
        let v: Value = serde_json::from_str(&e.json).unwrap();
        assert_eq!(v, json!({"id": 5, "type": "from_a_newer_app", "x": 1}));
        // A known type whose payload does not read (a field missing).
        let e = Event::from_stored(6, r#"{"type":"session_created","session_id":"s"}"#);
        assert_eq!(e.change, Change::Unknown);
        assert_eq!(
            serde_json::from_str::<Value>(&e.json).unwrap()["session_id"],
            "s"
        );
    }
}
