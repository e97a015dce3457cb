//! The `/cli` frames of the clawborrator hub (`hub_v1` 0.3.0 AsyncAPI), plus the additions of the
//! hub's own type definitions: `prompt.attachments`, `chat_reply_chunk` and an `ack` without
//! `chatId`.
//!
//! Parsing is tolerant the way the public clients are: an unknown frame type is classified as
//! [`HubFrame::Unknown`] and an unknown field is ignored, so a newer hub never breaks an older
//! client. Text that is not JSON, or a known frame whose required fields are missing or of the
//! wrong type, is a [`FrameError`] with a stable code; the client logs and skips it.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// An operator → hub frame.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ClientFrame {
    /// Sent on every (re)open: subscribe to a session's broadcast firehose.
    Subscribe {
        #[serde(rename = "sessionId")]
        session_id: String,
    },
    /// A prompt for the session's Claude.
    Prompt {
        #[serde(rename = "sessionId")]
        session_id: String,
        text: String,
        /// Ids of files uploaded to the session beforehand.
        #[serde(skip_serializing_if = "Option::is_none")]
        attachments: Option<Vec<u64>>,
    },
    /// The answer to a `permission_request` (addressed to the gate's session).
    Approval {
        #[serde(rename = "sessionId")]
        session_id: String,
        #[serde(rename = "requestId")]
        request_id: String,
        decision: Decision,
    },
    /// The operator-to-operator lane (never reaches Claude).
    OpMessage {
        #[serde(rename = "sessionId")]
        session_id: String,
        text: String,
    },
}

impl ClientFrame {
    /// The frame as the JSON text sent on the socket.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("client frames always serialize")
    }
}

/// An operator's answer to a permission request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    Allow,
    Deny,
}

/// How a permission request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Resolution {
    Allow,
    Deny,
    /// Nobody answered in time.
    Expired,
}

impl Resolution {
    pub fn as_str(self) -> &'static str {
        match self {
            Resolution::Allow => "allow",
            Resolution::Deny => "deny",
            Resolution::Expired => "expired",
        }
    }
}

/// Our role on the session, from `subscribed`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Role {
    Owner,
    Viewer,
    Prompter,
    Approver,
    /// A role this client does not know yet (kept verbatim).
    Other(String),
}

impl Role {
    fn parse(s: &str) -> Role {
        match s {
            "owner" => Role::Owner,
            "viewer" => Role::Viewer,
            "prompter" => Role::Prompter,
            "approver" => Role::Approver,
            other => Role::Other(other.to_string()),
        }
    }

    pub fn as_str(&self) -> &str {
        match self {
            Role::Owner => "owner",
            Role::Viewer => "viewer",
            Role::Prompter => "prompter",
            Role::Approver => "approver",
            Role::Other(s) => s,
        }
    }
}

/// The `event.type` of a chat-lane event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatType {
    /// A prompt (ours echoed back, another operator's, or typed in the terminal).
    Prompt,
    /// Text Claude wrote in its transcript.
    AssistantText,
    /// Claude's reply (the `reply` tool, the Stop-time reply, or a peer's answer).
    Reply,
    /// A peer-routed prompt got no answer in time.
    PeerTimeout,
    Other(String),
}

impl ChatType {
    fn parse(s: &str) -> ChatType {
        match s {
            "prompt" => ChatType::Prompt,
            "assistant_text" => ChatType::AssistantText,
            "reply" => ChatType::Reply,
            "peer-timeout" => ChatType::PeerTimeout,
            other => ChatType::Other(other.to_string()),
        }
    }
}

/// The hook name of a tail-lane event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TailHook {
    PreToolUse,
    PostToolUse,
    Stop,
    Notification,
    UserPromptSubmit,
    SubagentStop,
    Other(String),
}

impl TailHook {
    fn parse(s: &str) -> TailHook {
        match s {
            "PreToolUse" => TailHook::PreToolUse,
            "PostToolUse" => TailHook::PostToolUse,
            "Stop" => TailHook::Stop,
            "Notification" => TailHook::Notification,
            "UserPromptSubmit" => TailHook::UserPromptSubmit,
            "SubagentStop" => TailHook::SubagentStop,
            other => TailHook::Other(other.to_string()),
        }
    }
}

/// What an `event` frame's inner event is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventClass {
    Chat(ChatType),
    Tail(TailHook),
    /// An `event.kind` other than `chat` / `tail`.
    Other {
        kind: String,
        ty: String,
    },
}

/// The inner event of an `event` frame.
#[derive(Debug, Clone, PartialEq)]
pub struct Event {
    pub class: EventClass,
    /// `event.type` verbatim.
    pub ty: String,
    /// `event.kind` verbatim.
    pub kind: String,
    pub payload: Value,
    /// `event.ts` (may be empty when a hub leaves it out).
    pub ts: String,
}

impl Event {
    fn payload_str(&self, key: &str) -> Option<&str> {
        self.payload.get(key).and_then(Value::as_str)
    }

    /// `payload.text`.
    pub fn text(&self) -> Option<&str> {
        self.payload_str("text")
    }

    /// `payload.chatId` (replies and prompt echoes carry it).
    pub fn chat_id(&self) -> Option<&str> {
        self.payload_str("chatId")
    }

    /// The tool of a tail event: `payload.tool_name` (Claude Code's hook field) or `payload.tool`.
    pub fn tool(&self) -> Option<&str> {
        self.payload_str("tool_name")
            .or_else(|| self.payload_str("toolName"))
            .or_else(|| self.payload_str("tool"))
    }

    /// Who wrote a prompt (`payload.authorLogin`), when the hub says.
    pub fn author(&self) -> Option<&str> {
        self.payload_str("authorLogin")
            .or_else(|| self.payload_str("author"))
    }

    /// A key that is the same for the same event delivered twice (a replay after a re-subscribe)
    /// and differs between events: the seed gives events no id, so it is built from the kind,
    /// the type, the timestamp and the payload with its keys in sorted order.
    pub fn content_key(&self) -> String {
        let mut out = String::with_capacity(64);
        out.push_str(&self.kind);
        out.push('\u{1f}');
        out.push_str(&self.ty);
        out.push('\u{1f}');
        out.push_str(&self.ts);
        out.push('\u{1f}');
        canonical(&self.payload, &mut out);
        out
    }
}

/// JSON with object keys sorted (whatever map order serde_json was built with).
fn canonical(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical(&m[k], out);
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

/// A hub → operator frame.
#[derive(Debug, Clone, PartialEq)]
pub enum HubFrame {
    Subscribed {
        session_id: String,
        role: Role,
    },
    /// A write was accepted; after a `prompt` it carries the `chatId` replies will name.
    Ack {
        chat_id: Option<String>,
    },
    Event {
        session_id: String,
        event: Event,
    },
    /// A piece of a streamed reply; `done` ends the stream.
    ChatReplyChunk {
        session_id: String,
        chat_id: String,
        text: String,
        done: bool,
    },
    PermissionRequest {
        /// The gate's session (differs from the attached one for a relayed gate).
        session_id: String,
        request_id: String,
        tool: String,
        input_preview: String,
        ts: String,
    },
    PermissionResolved {
        session_id: String,
        request_id: String,
        decision: Resolution,
        /// `None` when it expired without anyone deciding.
        resolver_login: Option<String>,
    },
    Presence {
        session_id: String,
        attached: Vec<String>,
        joined: Option<String>,
        left: Option<String>,
    },
    /// Whether the Claude Code session's `/channel` is connected.
    ChannelStatus {
        session_id: String,
        connected: bool,
    },
    OpMessage {
        session_id: String,
        author_login: String,
        text: String,
    },
    FileEvent {
        session_id: String,
        action: String,
    },
    Error {
        code: String,
        message: String,
    },
    /// A frame type this client does not know: ignored.
    Unknown {
        frame_type: String,
    },
}

/// A frame that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    #[error("the frame is not JSON: {0}")]
    Malformed(String),
    #[error("the frame is not a JSON object with a string `type`")]
    NoType,
    #[error("the `{frame_type}` frame is not valid: {detail}")]
    Invalid { frame_type: String, detail: String },
}

impl FrameError {
    /// A stable code for programs.
    pub fn code(&self) -> &'static str {
        match self {
            FrameError::Malformed(_) => "malformed_json",
            FrameError::NoType => "missing_type",
            FrameError::Invalid { .. } => "invalid_frame",
        }
    }
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SubscribedWire {
    #[serde(default)]
    session_id: String,
    role: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct AckWire {
    #[serde(default)]
    chat_id: Option<String>,
}

#[derive(Deserialize)]
struct EventInner {
    kind: String,
    #[serde(rename = "type")]
    ty: String,
    #[serde(default)]
    payload: Value,
    #[serde(default)]
    ts: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct EventWire {
    #[serde(default)]
    session_id: String,
    event: EventInner,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ChunkWire {
    #[serde(default)]
    session_id: String,
    chat_id: String,
    #[serde(default)]
    text: String,
    #[serde(default)]
    done: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PermissionRequestWire {
    #[serde(default)]
    session_id: String,
    request_id: String,
    tool: String,
    #[serde(default)]
    input_preview: Option<String>,
    #[serde(default)]
    ts: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PermissionResolvedWire {
    #[serde(default)]
    session_id: String,
    request_id: String,
    decision: Resolution,
    #[serde(default)]
    resolver_login: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct PresenceWire {
    #[serde(default)]
    session_id: String,
    #[serde(default)]
    attached: Vec<String>,
    #[serde(default)]
    joined: Option<String>,
    #[serde(default)]
    left: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ChannelStatusWire {
    #[serde(default)]
    session_id: String,
    connected: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct OpMessageWire {
    #[serde(default)]
    session_id: String,
    #[serde(default)]
    author_login: String,
    text: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FileEventWire {
    #[serde(default)]
    session_id: String,
    action: String,
}

#[derive(Deserialize)]
struct ErrorWire {
    code: String,
    #[serde(default)]
    message: String,
}

fn typed<T: serde::de::DeserializeOwned>(ty: &str, v: Value) -> Result<T, FrameError> {
    serde_json::from_value(v).map_err(|e| FrameError::Invalid {
        frame_type: ty.to_string(),
        detail: e.to_string(),
    })
}

/// Reads one hub frame.
pub fn parse_hub_frame(text: &str) -> Result<HubFrame, FrameError> {
    let v: Value = serde_json::from_str(text).map_err(|e| FrameError::Malformed(e.to_string()))?;
    let ty = match v.get("type").and_then(Value::as_str) {
        Some(t) => t.to_string(),
        None => return Err(FrameError::NoType),
    };
    let t = ty.as_str();
    Ok(match t {
        "subscribed" => subscribed_frame(typed(t, v)?),
        "ack" => ack_frame(typed(t, v)?),
        "event" => event_frame(typed(t, v)?),
        "chat_reply_chunk" => chat_reply_chunk_frame(typed(t, v)?),
        "permission_request" => permission_request_frame(typed(t, v)?),
        "permission_resolved" => permission_resolved_frame(typed(t, v)?),
        "presence" => presence_frame(typed(t, v)?),
        "channel_status" => channel_status_frame(typed(t, v)?),
        "op_message" => op_message_frame(typed(t, v)?),
        "file_event" => file_event_frame(typed(t, v)?),
        "error" => error_frame(typed(t, v)?),
        _ => HubFrame::Unknown { frame_type: ty },
    })
}

/// The session the connection follows, and our role in it.
fn subscribed_frame(w: SubscribedWire) -> HubFrame {
    HubFrame::Subscribed {
        session_id: w.session_id,
        role: Role::parse(&w.role),
    }
}

/// A write accepted (after a prompt: the chat id replies will name).
fn ack_frame(w: AckWire) -> HubFrame {
    HubFrame::Ack {
        chat_id: w.chat_id.filter(|c| !c.is_empty()),
    }
}

/// A session event, classed by its kind and type.
fn event_frame(w: EventWire) -> HubFrame {
    let e = w.event;
    let class = match e.kind.as_str() {
        "chat" => EventClass::Chat(ChatType::parse(&e.ty)),
        "tail" => EventClass::Tail(TailHook::parse(&e.ty)),
        other => EventClass::Other {
            kind: other.to_string(),
            ty: e.ty.clone(),
        },
    };
    HubFrame::Event {
        session_id: w.session_id,
        event: Event {
            class,
            ty: e.ty,
            kind: e.kind,
            payload: e.payload,
            ts: e.ts,
        },
    }
}

/// A piece of a streamed reply.
fn chat_reply_chunk_frame(w: ChunkWire) -> HubFrame {
    HubFrame::ChatReplyChunk {
        session_id: w.session_id,
        chat_id: w.chat_id,
        text: w.text,
        done: w.done,
    }
}

/// A tool asks for permission.
fn permission_request_frame(w: PermissionRequestWire) -> HubFrame {
    HubFrame::PermissionRequest {
        session_id: w.session_id,
        request_id: w.request_id,
        tool: w.tool,
        input_preview: w.input_preview.unwrap_or_default(),
        ts: w.ts,
    }
}

/// A permission request was answered (or expired).
fn permission_resolved_frame(w: PermissionResolvedWire) -> HubFrame {
    HubFrame::PermissionResolved {
        session_id: w.session_id,
        request_id: w.request_id,
        decision: w.decision,
        resolver_login: w.resolver_login.filter(|l| !l.is_empty()),
    }
}

/// Who is attached to the session.
fn presence_frame(w: PresenceWire) -> HubFrame {
    HubFrame::Presence {
        session_id: w.session_id,
        attached: w.attached,
        joined: w.joined,
        left: w.left,
    }
}

/// Whether the Claude Code session's `/channel` is connected.
fn channel_status_frame(w: ChannelStatusWire) -> HubFrame {
    HubFrame::ChannelStatus {
        session_id: w.session_id,
        connected: w.connected,
    }
}

/// A message of another operator.
fn op_message_frame(w: OpMessageWire) -> HubFrame {
    HubFrame::OpMessage {
        session_id: w.session_id,
        author_login: w.author_login,
        text: w.text,
    }
}

/// A file of the session changed.
fn file_event_frame(w: FileEventWire) -> HubFrame {
    HubFrame::FileEvent {
        session_id: w.session_id,
        action: w.action,
    }
}

/// An error of the hub.
fn error_frame(w: ErrorWire) -> HubFrame {
    HubFrame::Error {
        code: w.code,
        message: w.message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse(v: Value) -> HubFrame {
        parse_hub_frame(&v.to_string()).unwrap()
    }

    #[test]
    fn client_frames_serialize_as_the_seed_names_them() {
        let s = |f: ClientFrame| serde_json::from_str::<Value>(&f.to_json()).unwrap();
        assert_eq!(
            s(ClientFrame::Subscribe {
                session_id: "s1".into()
            }),
            json!({"type": "subscribe", "sessionId": "s1"})
        );
        assert_eq!(
            s(ClientFrame::Prompt {
                session_id: "s1".into(),
                text: "hi".into(),
                attachments: None
            }),
            json!({"type": "prompt", "sessionId": "s1", "text": "hi"})
        );
        assert_eq!(
            s(ClientFrame::Prompt {
                session_id: "s1".into(),
                text: "see".into(),
                attachments: Some(vec![4, 7])
            }),
            json!({"type": "prompt", "sessionId": "s1", "text": "see", "attachments": [4, 7]})
        );
        assert_eq!(
            s(ClientFrame::Approval {
                session_id: "gate".into(),
                request_id: "r1".into(),
                decision: Decision::Deny
            }),
            json!({"type": "approval", "sessionId": "gate", "requestId": "r1", "decision": "deny"})
        );
        assert_eq!(
            s(ClientFrame::OpMessage {
                session_id: "s1".into(),
                text: "brb".into()
            }),
            json!({"type": "op_message", "sessionId": "s1", "text": "brb"})
        );
    }

    #[test]
    fn subscribed_carries_the_role_and_tolerates_new_roles() {
        assert_eq!(
            parse(json!({"type": "subscribed", "sessionId": "s", "role": "approver"})),
            HubFrame::Subscribed {
                session_id: "s".into(),
                role: Role::Approver
            }
        );
        let HubFrame::Subscribed { role, .. } =
            parse(json!({"type": "subscribed", "sessionId": "s", "role": "auditor", "x": 1}))
        else {
            panic!()
        };
        assert_eq!(role, Role::Other("auditor".into()));
        assert_eq!(role.as_str(), "auditor");
        assert_eq!(Role::Owner.as_str(), "owner");
    }

    #[test]
    fn ack_with_and_without_chat_id() {
        assert_eq!(
            parse(json!({"type": "ack", "ok": true, "chatId": "c9"})),
            HubFrame::Ack {
                chat_id: Some("c9".into())
            }
        );
        assert_eq!(
            parse(json!({"type": "ack", "ok": true})),
            HubFrame::Ack { chat_id: None }
        );
        assert_eq!(
            parse(json!({"type": "ack", "ok": true, "chatId": ""})),
            HubFrame::Ack { chat_id: None }
        );
    }

    #[test]
    fn chat_events_are_classified() {
        for (ty, class) in [
            ("prompt", ChatType::Prompt),
            ("assistant_text", ChatType::AssistantText),
            ("reply", ChatType::Reply),
            ("peer-timeout", ChatType::PeerTimeout),
            ("thinking", ChatType::Other("thinking".into())),
        ] {
            let f = parse(json!({"type": "event", "sessionId": "s", "event": {
                "kind": "chat", "type": ty, "payload": {"text": "t", "chatId": "c1"},
                "ts": "2026-05-01T10:00:00Z"}}));
            let HubFrame::Event { session_id, event } = f else {
                panic!("{ty}")
            };
            assert_eq!(session_id, "s");
            assert_eq!(event.class, EventClass::Chat(class));
            assert_eq!(event.text(), Some("t"));
            assert_eq!(event.chat_id(), Some("c1"));
            assert_eq!(event.ts, "2026-05-01T10:00:00Z");
        }
        let HubFrame::Event { event, .. } = parse(json!({"type": "event", "sessionId": "s",
            "event": {"kind": "chat", "type": "reply", "ts": "t",
                "payload": {"text": "peer says", "source": "peer-reply", "agentHandle": "/x"}}}))
        else {
            panic!()
        };
        assert_eq!(event.payload["agentHandle"], "/x");
        assert_eq!(event.chat_id(), None);
    }

    #[test]
    fn tail_events_name_their_hook_and_tool() {
        for (ty, hook) in [
            ("PreToolUse", TailHook::PreToolUse),
            ("PostToolUse", TailHook::PostToolUse),
            ("Stop", TailHook::Stop),
            ("Notification", TailHook::Notification),
            ("UserPromptSubmit", TailHook::UserPromptSubmit),
            ("SubagentStop", TailHook::SubagentStop),
            ("PreCompact", TailHook::Other("PreCompact".into())),
        ] {
            let HubFrame::Event { event, .. } = parse(json!({"type": "event", "sessionId": "s",
                "event": {"kind": "tail", "type": ty, "payload": {"tool_name": "Bash"}, "ts": "t"}}))
            else {
                panic!()
            };
            assert_eq!(event.class, EventClass::Tail(hook));
            assert_eq!(event.tool(), Some("Bash"));
        }
        let HubFrame::Event { event, .. } = parse(json!({"type": "event", "sessionId": "s",
            "event": {"kind": "audit", "type": "x", "payload": {}, "ts": "t"}}))
        else {
            panic!()
        };
        assert_eq!(
            event.class,
            EventClass::Other {
                kind: "audit".into(),
                ty: "x".into()
            }
        );
    }

    #[test]
    fn content_keys_ignore_key_order_and_tell_events_apart() {
        let a = parse_hub_frame(
            r#"{"type":"event","sessionId":"s","event":{"kind":"chat","type":"reply","ts":"t1","payload":{"text":"a","chatId":"c"}}}"#,
        )
        .unwrap();
        let b = parse_hub_frame(
            r#"{"event":{"payload":{"chatId":"c","text":"a"},"ts":"t1","type":"reply","kind":"chat"},"sessionId":"s","type":"event"}"#,
        )
        .unwrap();
        let c = parse_hub_frame(
            r#"{"type":"event","sessionId":"s","event":{"kind":"chat","type":"reply","ts":"t2","payload":{"text":"a","chatId":"c"}}}"#,
        )
        .unwrap();
        let key = |f: &HubFrame| match f {
            HubFrame::Event { event, .. } => event.content_key(),
            _ => panic!(),
        };
        assert_eq!(key(&a), key(&b));
        assert_ne!(key(&a), key(&c));
    }

    #[test]
    fn chunks_permissions_presence_status_and_errors() {
        assert_eq!(
            parse(
                json!({"type": "chat_reply_chunk", "sessionId": "s", "chatId": "c",
                "text": "par", "done": false})
            ),
            HubFrame::ChatReplyChunk {
                session_id: "s".into(),
                chat_id: "c".into(),
                text: "par".into(),
                done: false
            }
        );
        assert_eq!(
            parse(
                json!({"type": "permission_request", "sessionId": "g", "requestId": "r",
                "tool": "Bash", "inputPreview": "ls", "ts": "t"})
            ),
            HubFrame::PermissionRequest {
                session_id: "g".into(),
                request_id: "r".into(),
                tool: "Bash".into(),
                input_preview: "ls".into(),
                ts: "t".into()
            }
        );
        // inputPreview is optional in the seed.
        let HubFrame::PermissionRequest { input_preview, .. } = parse(
            json!({"type": "permission_request", "sessionId": "g", "requestId": "r", "tool": "W", "ts": "t"}),
        ) else {
            panic!()
        };
        assert_eq!(input_preview, "");
        for (d, r) in [
            ("allow", Resolution::Allow),
            ("deny", Resolution::Deny),
            ("expired", Resolution::Expired),
        ] {
            let HubFrame::PermissionResolved {
                decision,
                resolver_login,
                ..
            } = parse(
                json!({"type": "permission_resolved", "sessionId": "g", "requestId": "r",
                "decision": d, "resolverLogin": if d == "expired" { Value::Null } else { json!("bob") }}),
            )
            else {
                panic!()
            };
            assert_eq!(decision, r);
            assert_eq!(decision.as_str(), d);
            assert_eq!(resolver_login.is_none(), d == "expired");
        }
        assert_eq!(
            parse(
                json!({"type": "presence", "sessionId": "s", "attached": ["a", "b"], "joined": "b"})
            ),
            HubFrame::Presence {
                session_id: "s".into(),
                attached: vec!["a".into(), "b".into()],
                joined: Some("b".into()),
                left: None
            }
        );
        assert_eq!(
            parse(
                json!({"type": "channel_status", "sessionId": "s", "connected": false, "ts": "t"})
            ),
            HubFrame::ChannelStatus {
                session_id: "s".into(),
                connected: false
            }
        );
        assert_eq!(
            parse(
                json!({"type": "error", "ok": false, "code": "token_revoked", "message": "gone"})
            ),
            HubFrame::Error {
                code: "token_revoked".into(),
                message: "gone".into()
            }
        );
        assert_eq!(
            parse(
                json!({"type": "op_message", "sessionId": "s", "authorLogin": "a",
                "text": "hi", "mentions": [], "ts": "t"})
            ),
            HubFrame::OpMessage {
                session_id: "s".into(),
                author_login: "a".into(),
                text: "hi".into()
            }
        );
        assert_eq!(
            parse(
                json!({"type": "file_event", "sessionId": "s", "action": "referenced", "file": {}})
            ),
            HubFrame::FileEvent {
                session_id: "s".into(),
                action: "referenced".into()
            }
        );
    }

    #[test]
    fn unknown_types_and_fields_are_classified_not_errors() {
        assert_eq!(
            parse(json!({"type": "route_reply", "routeId": "x"})),
            HubFrame::Unknown {
                frame_type: "route_reply".into()
            }
        );
        assert_eq!(
            parse(json!({"type": "ack", "ok": true, "chatId": "c", "brandNew": {"a": 1}})),
            HubFrame::Ack {
                chat_id: Some("c".into())
            }
        );
    }

    #[test]
    fn malformed_frames_are_typed_errors() {
        let e = parse_hub_frame("{not json").unwrap_err();
        assert_eq!(e.code(), "malformed_json");
        assert_eq!(parse_hub_frame("[1,2]").unwrap_err(), FrameError::NoType);
        assert_eq!(
            parse_hub_frame(r#"{"type":7}"#).unwrap_err().code(),
            "missing_type"
        );
        let e = parse_hub_frame(r#"{"type":"channel_status","connected":"yes"}"#).unwrap_err();
        assert_eq!(e.code(), "invalid_frame");
        assert!(e.to_string().contains("channel_status"), "{e}");
        let e =
            parse_hub_frame(r#"{"type":"permission_resolved","requestId":"r","decision":"maybe"}"#)
                .unwrap_err();
        assert_eq!(e.code(), "invalid_frame");
    }
}
