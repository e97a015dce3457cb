//! The views the control API returns and the event stream carries. Plain data, no rules.

use serde::Serialize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MessageKind {
    User,
    Assistant,
    Notice,
    Error,
    /// A final transcript turn of a call (kept in the call's insights session).
    Transcript,
}

impl MessageKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MessageKind::User => "user",
            MessageKind::Assistant => "assistant",
            MessageKind::Notice => "notice",
            MessageKind::Error => "error",
            MessageKind::Transcript => "transcript",
        }
    }

    pub fn parse(s: &str) -> MessageKind {
        match s {
            "user" => MessageKind::User,
            "notice" => MessageKind::Notice,
            "error" => MessageKind::Error,
            "transcript" => MessageKind::Transcript,
            _ => MessageKind::Assistant,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SessionView {
    pub session_id: String,
    pub kind: &'static str,
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
}

#[derive(Debug, Clone, PartialEq, Serialize)]
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
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
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
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize)]
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

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TypingView {
    pub session_id: String,
    pub scope: String,
    pub label: Option<String>,
    pub since: String,
}
