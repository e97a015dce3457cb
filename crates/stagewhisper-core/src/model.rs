//! The views the control API returns and the event stream carries. Plain data, no rules.

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum MessageKind {
    User,
    Assistant,
    Notice,
    Error,
    /// A final transcript turn of a call (kept in the call's insights session).
    Transcript,
    /// A tool of the assistant waits for the user's decision (a card with Allow / Deny).
    Permission,
}

impl MessageKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MessageKind::User => "user",
            MessageKind::Assistant => "assistant",
            MessageKind::Notice => "notice",
            MessageKind::Error => "error",
            MessageKind::Transcript => "transcript",
            MessageKind::Permission => "permission",
        }
    }

    pub fn parse(s: &str) -> MessageKind {
        match s {
            "user" => MessageKind::User,
            "notice" => MessageKind::Notice,
            "error" => MessageKind::Error,
            "transcript" => MessageKind::Transcript,
            "permission" => MessageKind::Permission,
            _ => MessageKind::Assistant,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SessionView {
    pub session_id: String,
    pub kind: String,
    pub is_call: bool,
    pub title: Option<String>,
    pub created_at: String,
    pub ended_at: Option<String>,
    pub insights_session_id: Option<String>,
}

/// One stored entry of a conversation, as the database holds it.
#[derive(Debug, Clone, PartialEq)]
pub struct MessageRow {
    pub id: i64,
    pub session_id: String,
    pub kind: MessageKind,
    pub text: String,
    pub message_id: Option<String>,
    pub task_id: Option<String>,
    pub user_message_id: Option<String>,
    pub scope: Option<String>,
    pub error_code: Option<String>,
    pub occurred_at: Option<String>,
    pub received_at: String,
    pub sort_key: i64,
    pub draft: bool,
    pub hidden: bool,
    /// Hash of (session, scope, kind, cleaned text): catches near-identical re-sends.
    pub content_key: Option<String>,
    /// While a draft: `task:<task_id>` or `edit:<scope>`.
    pub draft_key: Option<String>,
    pub speaker: Option<String>,
    /// Outgoing entries: `pending`, `sent` or `failed`.
    pub delivery: Option<String>,
    /// JSON `{code, message}` of the last failed delivery.
    pub delivery_error: Option<String>,
    /// A permission card's fields (kind `permission` only).
    pub permission: Option<Box<PermissionCard>>,
    /// Not an ordinary message: [`PURPOSE_SUMMARY_REQUEST`] (shown short, left out of search).
    pub purpose: Option<String>,
    /// When the text was last replaced after the row was first stored (`None`: as stored).
    pub edited_at: Option<String>,
    /// A transcript turn's language (ISO-639-1), when the engine told it.
    pub language: Option<String>,
}

impl MessageRow {
    /// A row with its identity, text and time, every other column unset (no keys, not a
    /// draft, shown, no delivery): the one place a whole row is written out.
    pub fn new(
        id: i64,
        session_id: &str,
        kind: MessageKind,
        text: String,
        received_at: String,
        sort_key: i64,
    ) -> MessageRow {
        MessageRow {
            id,
            session_id: session_id.to_string(),
            kind,
            text,
            message_id: None,
            task_id: None,
            user_message_id: None,
            scope: None,
            error_code: None,
            occurred_at: None,
            received_at,
            sort_key,
            draft: false,
            hidden: false,
            content_key: None,
            draft_key: None,
            speaker: None,
            delivery: None,
            delivery_error: None,
            permission: None,
            purpose: None,
            edited_at: None,
            language: None,
        }
    }

    /// Replaces the text of a stored row, noting when (`at`, as `received_at` is written) if it
    /// changed.
    pub fn replace_text(&mut self, text: String, at: String) {
        if text != self.text {
            self.text = text;
            self.edited_at = Some(at);
        }
    }
}

/// The purpose of the user's "Summarise this call" (its text carries the transcript).
pub const PURPOSE_SUMMARY_REQUEST: &str = "summary_request";

/// What a permission card shows; settling it changes `state` and `resolver` in place.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PermissionCard {
    pub request_id: String,
    /// The tool waiting (`Bash`, `Edit`, …).
    pub tool: String,
    /// What the tool would do, as the assistant previews it (plain text).
    pub input_preview: String,
    /// `pending`, `allow`, `deny` or `expired`.
    pub state: String,
    /// Who decided (`None` while pending or when it expired).
    pub resolver: Option<String>,
}

impl PermissionCard {
    pub fn is_pending(&self) -> bool {
        self.state == "pending"
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct MessageView {
    pub id: i64,
    pub session_id: String,
    pub kind: MessageKind,
    pub text: String,
    pub message_id: Option<String>,
    pub task_id: Option<String>,
    pub user_message_id: Option<String>,
    pub error_code: Option<String>,
    pub occurred_at: Option<String>,
    pub received_at: String,
    pub sort_key: i64,
    pub draft: bool,
    pub delivery: Option<String>,
    pub delivery_error: Option<serde_json::Value>,
    /// Permission cards only (kind `permission`): the request id.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    /// Permission cards only: the tool waiting for a decision.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// Permission cards only: what the tool would do.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub input_preview: Option<String>,
    /// Permission cards only: `pending`, `allow`, `deny` or `expired`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<String>,
    /// Permission cards only: who decided (null while pending or when it expired).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "double_option"
    )]
    #[schema(value_type = Option<String>)]
    pub resolver: Option<Option<String>>,
    /// Only when the message is not an ordinary one: `summary_request` (the user's "Summarise
    /// this call": its text carries the transcript for the assistant; shown as one short line,
    /// not found by search).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub purpose: Option<String>,
    /// When the text was last replaced after the message first appeared (a reply streamed
    /// into it: when it last grew or settled into its final text); absent while it is as
    /// first stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub edited_at: Option<String>,
}

/// Serializes a row exactly as its [`MessageView`], without building one (the ingest hot path
/// writes one per message).
pub struct MessageJson<'a>(pub &'a MessageRow);

impl Serialize for MessageJson<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let r = self.0;
        let mut m = s.serialize_struct("MessageView", 14)?;
        m.serialize_field("id", &r.id)?;
        m.serialize_field("session_id", &r.session_id)?;
        m.serialize_field("kind", &r.kind)?;
        m.serialize_field("text", &r.text)?;
        m.serialize_field("message_id", &r.message_id)?;
        m.serialize_field("task_id", &r.task_id)?;
        m.serialize_field("user_message_id", &r.user_message_id)?;
        m.serialize_field("error_code", &r.error_code)?;
        m.serialize_field("occurred_at", &r.occurred_at)?;
        m.serialize_field("received_at", &r.received_at)?;
        m.serialize_field("sort_key", &r.sort_key)?;
        m.serialize_field("draft", &r.draft)?;
        m.serialize_field("delivery", &r.delivery)?;
        let delivery_error: Option<serde_json::Value> = r
            .delivery_error
            .as_deref()
            .and_then(|e| serde_json::from_str(e).ok());
        m.serialize_field("delivery_error", &delivery_error)?;
        if let Some(p) = &r.permission {
            m.serialize_field("request_id", &p.request_id)?;
            m.serialize_field("tool", &p.tool)?;
            m.serialize_field("input_preview", &p.input_preview)?;
            m.serialize_field("state", &p.state)?;
            m.serialize_field("resolver", &p.resolver)?;
        }
        if let Some(p) = &r.purpose {
            m.serialize_field("purpose", p)?;
        }
        if let Some(at) = &r.edited_at {
            m.serialize_field("edited_at", at)?;
        }
        m.end()
    }
}

impl From<&MessageRow> for MessageView {
    fn from(r: &MessageRow) -> Self {
        MessageView {
            id: r.id,
            session_id: r.session_id.clone(),
            kind: r.kind,
            text: r.text.clone(),
            message_id: r.message_id.clone(),
            task_id: r.task_id.clone(),
            user_message_id: r.user_message_id.clone(),
            error_code: r.error_code.clone(),
            occurred_at: r.occurred_at.clone(),
            received_at: r.received_at.clone(),
            sort_key: r.sort_key,
            draft: r.draft,
            delivery: r.delivery.clone(),
            delivery_error: r
                .delivery_error
                .as_deref()
                .and_then(|e| serde_json::from_str(e).ok()),
            request_id: r.permission.as_ref().map(|p| p.request_id.clone()),
            tool: r.permission.as_ref().map(|p| p.tool.clone()),
            input_preview: r.permission.as_ref().map(|p| p.input_preview.clone()),
            state: r.permission.as_ref().map(|p| p.state.clone()),
            resolver: r.permission.as_ref().map(|p| p.resolver.clone()),
            purpose: r.purpose.clone(),
            edited_at: r.edited_at.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TranscriptView {
    pub id: i64,
    /// The chat session of the call.
    pub session_id: String,
    pub speaker: Option<String>,
    pub text: String,
    pub received_at: String,
    /// Time into the call, in milliseconds.
    pub offset_ms: i64,
    pub task_id: Option<String>,
    pub delivery: Option<String>,
    pub delivery_error: Option<serde_json::Value>,
    /// The language it was heard in (ISO-639-1), when the engine told it (Whisper does).
    #[serde(default)]
    pub language: Option<String>,
}

impl TranscriptView {
    pub fn from_row(r: &MessageRow, chat_session_id: &str, call_start_micros: i64) -> Self {
        TranscriptView {
            id: r.id,
            session_id: chat_session_id.to_string(),
            speaker: r.speaker.clone(),
            text: r.text.clone(),
            received_at: r.received_at.clone(),
            offset_ms: ((r.sort_key - call_start_micros) / 1000).max(0),
            task_id: r.task_id.clone(),
            delivery: r.delivery.clone(),
            delivery_error: r
                .delivery_error
                .as_deref()
                .and_then(|e| serde_json::from_str(e).ok()),
            language: r.language.clone(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InsightView {
    pub id: i64,
    /// The chat session of the call (not the `insights:` id).
    pub session_id: String,
    pub text: String,
    pub task_id: Option<String>,
    pub message_id: Option<String>,
    pub occurred_at: Option<String>,
    pub received_at: String,
    /// Time into the call, in milliseconds.
    pub offset_ms: i64,
    pub draft: bool,
}

impl InsightView {
    pub fn from_row(r: &MessageRow, chat_session_id: &str, call_start_micros: i64) -> Self {
        InsightView {
            id: r.id,
            session_id: chat_session_id.to_string(),
            text: r.text.clone(),
            task_id: r.task_id.clone(),
            message_id: r.message_id.clone(),
            occurred_at: r.occurred_at.clone(),
            received_at: r.received_at.clone(),
            offset_ms: ((r.sort_key - call_start_micros) / 1000).max(0),
            draft: r.draft,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TypingView {
    pub session_id: String,
    pub scope: String,
    pub label: Option<String>,
    pub since: String,
}

/// Deserializes a field that may be absent (`None`), `null` (`Some(None)`) or a value.
pub fn double_option<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::Deserialize<'de>,
{
    <Option<T> as serde::Deserialize>::deserialize(d).map(Some)
}

// ---- hearing the call (the `audio_status` and `transcript_partial` events carry these) ----

/// The two channels of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Channel {
    /// The microphone: the user ("You").
    Mic,
    /// The system audio, the monitor of the output device: the call's other side ("Them").
    System,
}

impl Channel {
    pub const BOTH: [Channel; 2] = [Channel::Mic, Channel::System];

    pub fn as_str(self) -> &'static str {
        match self {
            Channel::Mic => "mic",
            Channel::System => "system",
        }
    }
}

/// The pipeline's state as a whole.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum ListenState {
    /// Not listening to any call.
    Idle,
    /// Listening, and every part that is on works.
    Listening,
    /// Listening was asked for, but a part is failing (`detail` says which, in plain words):
    /// no sound server, a device gone, the engine down. Nothing said is lost meanwhile.
    Error,
}

/// The status in `GET /api/audio` and the `audio_status` event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AudioStatus {
    pub state: ListenState,
    /// In plain words, for the call bar.
    pub detail: String,
    /// The call being listened to.
    pub call_id: Option<String>,
    /// Each channel: its state (`off`, `listening`, `error`), the source in use, why it fails.
    pub channels: Vec<ChannelStatus>,
    pub engine: EngineStatus,
    /// Turns heard but not transcribed yet (kept on disk while the engine is down).
    pub backlog: BacklogStatus,
}

impl AudioStatus {
    /// Not listening, nothing pending.
    pub fn idle(engine: EngineStatus) -> AudioStatus {
        AudioStatus {
            state: ListenState::Idle,
            detail: "Not listening.".into(),
            call_id: None,
            channels: Vec::new(),
            engine,
            backlog: BacklogStatus::default(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ChannelStatus {
    pub channel: Channel,
    /// `off`, `listening` or `error`.
    pub state: String,
    /// The speaker of its turns.
    pub speaker: String,
    /// The source in use (its server name), when one is open.
    pub source: Option<String>,
    pub detail: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EngineStatus {
    /// `builtin` or `openai`.
    pub kind: String,
    /// `ready`, `down` (its last attempt failed; turns wait in the backlog) or `unavailable`
    /// (it cannot run here, e.g. PocketSphinx not installed).
    pub state: String,
    pub detail: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BacklogStatus {
    /// Turns waiting to be transcribed.
    pub turns: u64,
    /// Their speech, in seconds.
    pub seconds: f64,
    /// Speech dropped, oldest first, because the backlog was full (seconds, since the app
    /// started).
    pub dropped_seconds: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn message_json_is_the_views_json() {
        let mut row = MessageRow {
            message_id: Some("m".into()),
            task_id: Some("t".into()),
            user_message_id: Some("u".into()),
            scope: Some("u".into()),
            error_code: Some("E".into()),
            occurred_at: Some("2026-11-29T12:00:00Z".into()),
            draft: true,
            content_key: Some("k".into()),
            draft_key: Some("task:t".into()),
            delivery: Some("failed".into()),
            delivery_error: Some(r#"{"code":"x","message":"y"}"#.into()),
            ..MessageRow::new(
                7,
                "s",
                MessageKind::User,
                "a \"quoted\" ▉\n".into(),
                "2026-11-29T12:00:01.5Z".into(),
                42,
            )
        };
        let same = |row: &MessageRow| {
            assert_eq!(
                serde_json::to_string(&MessageJson(row)).unwrap(),
                serde_json::to_string(&MessageView::from(row)).unwrap()
            );
        };
        same(&row);
        row.delivery_error = Some("not json".into());
        same(&row);
        row.message_id = None;
        row.task_id = None;
        row.user_message_id = None;
        row.error_code = None;
        row.occurred_at = None;
        row.delivery = None;
        row.delivery_error = None;
        row.kind = MessageKind::Assistant;
        same(&row);
        row.kind = MessageKind::Permission;
        row.permission = Some(Box::new(PermissionCard {
            request_id: "r1".into(),
            tool: "Bash".into(),
            input_preview: "ls".into(),
            state: "pending".into(),
            resolver: None,
        }));
        same(&row);
        let v: serde_json::Value = serde_json::to_value(MessageJson(&row)).unwrap();
        assert_eq!(v["request_id"], "r1");
        assert!(v.get("resolver").is_some_and(|r| r.is_null()));
    }
}
