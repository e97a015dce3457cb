//! Typed frames of the OpenClaw Gateway WebSocket protocol, version 4.
//!
//! Three frame types travel on the socket: `req` (client → gateway), `res` (the answer to one
//! `req`, by `id`) and `event` (gateway → client, unasked). What the client sends is built from
//! closed types (`deny_unknown_fields`): the gateway rejects any unknown property with close 1008,
//! so a typo must fail here, in a test, not against a user's gateway. What the client receives is
//! parsed leniently: unknown fields are skipped, unknown event names and unknown `chat` states /
//! `agent` streams are classified as [`Inbound::Ignored`] on purpose (the gateway sends many
//! events an operator chat client does not use: `presence`, `health`, `skills.changed`, ...).

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The protocol version this client speaks (the live gateway refuses 3 with close 1002).
pub const PROTOCOL: u32 = 4;

/// A frame the client could not make sense of at all (not JSON, no `type`, a `res` without `id`).
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("gateway frame is not valid JSON: {0}")]
    NotJson(serde_json::Error),
    #[error("gateway frame of an unknown type {0:?}")]
    UnknownType(String),
    #[error("gateway {kind} frame is malformed: {source}")]
    Malformed {
        kind: &'static str,
        #[source]
        source: serde_json::Error,
    },
}

impl FrameError {
    /// Stable code for logs and statuses.
    pub fn code(&self) -> &'static str {
        match self {
            FrameError::NotJson(_) => "frame_not_json",
            FrameError::UnknownType(_) => "frame_unknown_type",
            FrameError::Malformed { .. } => "frame_malformed",
        }
    }
}

// ------------------------------------------------------------------------------------------
// Client → gateway
// ------------------------------------------------------------------------------------------

/// `{"type":"req","id","method","params"}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Request {
    #[serde(rename = "type")]
    pub kind: ReqTag,
    pub id: String,
    pub method: String,
    pub params: Value,
}

/// The literal `"req"`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub enum ReqTag {
    #[serde(rename = "req")]
    Req,
}

impl Request {
    pub fn new(id: impl Into<String>, method: impl Into<String>, params: Value) -> Self {
        Request {
            kind: ReqTag::Req,
            id: id.into(),
            method: method.into(),
            params,
        }
    }
}

/// `connect` params, exactly the properties the gateway's schema allows.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConnectParams {
    pub min_protocol: u32,
    pub max_protocol: u32,
    pub client: ClientInfo,
    pub role: String,
    pub scopes: Vec<String>,
    pub caps: Vec<String>,
    pub user_agent: String,
    pub locale: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<ConnectAuth>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<DeviceProof>,
}

/// `connect.params.client`. `id` and `mode` are closed enums on the gateway side
/// (`gateway-client` / `ui` is what an operator UI uses).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClientInfo {
    pub id: String,
    pub version: String,
    pub platform: String,
    pub mode: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_family: Option<String>,
}

/// `connect.params.auth`: the shared gateway token, or the device token a `hello-ok` issued.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConnectAuth {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_token: Option<String>,
}

/// `connect.params.device`: the signed proof of the device identity.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DeviceProof {
    pub id: String,
    pub public_key: String,
    pub signature: String,
    pub signed_at: u64,
    pub nonce: String,
}

/// `chat.send` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ChatSendParams {
    pub session_key: String,
    pub message: String,
    pub deliver: bool,
    pub idempotency_key: String,
    #[serde(default)]
    pub attachments: Vec<Value>,
}

/// `chat.abort` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ChatAbortParams {
    pub session_key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
}

/// `chat.history` params.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ChatHistoryParams {
    pub session_key: String,
    pub limit: u32,
}

/// An outgoing request, typed by method (used to check what we send, and recorded frames).
#[derive(Debug, Clone, PartialEq)]
pub enum Outbound {
    Connect(Box<ConnectParams>),
    ChatSend(ChatSendParams),
    ChatAbort(ChatAbortParams),
    ChatHistory(ChatHistoryParams),
    /// A method this client never sends (e.g. `health`); kept as is.
    Other {
        method: String,
    },
}

/// Parse an outgoing `req` frame into its typed params. Fails when params carry a property the
/// closed types do not know (the gateway would refuse those too).
pub fn parse_outbound(text: &str) -> Result<(String, Outbound), FrameError> {
    let req: Request = serde_json::from_str(text).map_err(|e| FrameError::Malformed {
        kind: "req",
        source: e,
    })?;
    let params = req.params;
    let malformed = |e| FrameError::Malformed {
        kind: "req",
        source: e,
    };
    let out = match req.method.as_str() {
        "connect" => {
            Outbound::Connect(Box::new(serde_json::from_value(params).map_err(malformed)?))
        }
        "chat.send" => Outbound::ChatSend(serde_json::from_value(params).map_err(malformed)?),
        "chat.abort" => Outbound::ChatAbort(serde_json::from_value(params).map_err(malformed)?),
        "chat.history" => Outbound::ChatHistory(serde_json::from_value(params).map_err(malformed)?),
        other => Outbound::Other {
            method: other.to_string(),
        },
    };
    Ok((req.id, out))
}

// ------------------------------------------------------------------------------------------
// Gateway → client
// ------------------------------------------------------------------------------------------

/// `connect.challenge` payload.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct Challenge {
    pub nonce: String,
    /// Milliseconds since the epoch; the client signs with `signedAt` = this value.
    pub ts: u64,
    #[serde(default)]
    pub capabilities: Vec<String>,
}

/// The `error` of a failed `res`.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ErrorShape {
    #[serde(default)]
    pub code: String,
    #[serde(default)]
    pub message: String,
    #[serde(default)]
    pub retryable: Option<bool>,
    #[serde(default)]
    pub retry_after_ms: Option<u64>,
    #[serde(default)]
    pub details: Option<ErrorDetails>,
}

/// `error.details`: the machine-readable reason (`code`) and what comes with it.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ErrorDetails {
    #[serde(default)]
    pub code: Option<String>,
    #[serde(default)]
    pub reason: Option<String>,
    #[serde(default)]
    pub request_id: Option<String>,
    #[serde(default)]
    pub expected_protocol: Option<u32>,
    #[serde(default)]
    pub can_retry_with_device_token: Option<bool>,
}

impl ErrorShape {
    /// `error.details.code` (`PAIRING_REQUIRED`, `AUTH_TOKEN_MISMATCH`, `PROTOCOL_MISMATCH`, ...).
    pub fn detail_code(&self) -> Option<&str> {
        self.details.as_ref().and_then(|d| d.code.as_deref())
    }
}

/// A `res` frame.
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    pub id: String,
    pub result: Result<Value, ErrorShape>,
}

#[derive(Deserialize)]
struct RawResponse {
    id: String,
    ok: bool,
    #[serde(default)]
    payload: Value,
    #[serde(default)]
    error: Option<ErrorShape>,
}

/// The `hello-ok` payload of a successful `connect`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HelloOk {
    #[serde(rename = "type")]
    pub kind: String,
    pub protocol: u32,
    #[serde(default)]
    pub server: ServerInfo,
    #[serde(default)]
    pub auth: Option<HelloAuth>,
    #[serde(default)]
    pub policy: Policy,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ServerInfo {
    #[serde(default)]
    pub version: Option<String>,
    #[serde(default)]
    pub conn_id: Option<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HelloAuth {
    #[serde(default)]
    pub method: Option<String>,
    #[serde(default)]
    pub role: Option<String>,
    #[serde(default)]
    pub scopes: Vec<String>,
    #[serde(default)]
    pub device_token: Option<String>,
}

/// `hello-ok.policy`; the tick interval decides the liveness timeout (2× silence = dead).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Policy {
    #[serde(default = "default_tick")]
    pub tick_interval_ms: u64,
}

fn default_tick() -> u64 {
    30_000
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            tick_interval_ms: default_tick(),
        }
    }
}

impl HelloOk {
    /// Read a successful `connect` response's payload.
    pub fn from_payload(payload: &Value) -> Result<HelloOk, FrameError> {
        let hello: HelloOk =
            serde_json::from_value(payload.clone()).map_err(|e| FrameError::Malformed {
                kind: "hello-ok",
                source: e,
            })?;
        Ok(hello)
    }
}

/// The `content` of a chat message: a plain string or a list of parts.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Parts(Vec<Value>),
}

impl Content {
    /// The concatenated text parts.
    pub fn text(&self) -> String {
        match self {
            Content::Text(t) => t.clone(),
            Content::Parts(parts) => parts
                .iter()
                .filter(|p| p.get("type").and_then(Value::as_str).unwrap_or("text") == "text")
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join(""),
        }
    }
}

/// `{role, content}` as carried by `chat` events.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct ChatMessage {
    #[serde(default)]
    pub role: Option<String>,
    #[serde(default)]
    pub content: Option<Content>,
}

impl ChatMessage {
    pub fn text(&self) -> String {
        self.content.as_ref().map(Content::text).unwrap_or_default()
    }
}

/// The state of a `chat` event.
#[derive(Debug, Clone, PartialEq)]
pub enum ChatState {
    /// A preparation phase (`preparing_workspace`, `preparing_context`, `starting_model`, ...).
    Status { phase: String },
    /// A streamed part: `delta` is the new text, `text` the cumulative reply so far.
    Delta { delta: String, text: String },
    /// The settled reply (terminal).
    Final { text: String },
    /// Stopped by `chat.abort` (terminal); `partial` is what was produced.
    Aborted { partial: String },
    /// The run failed (terminal).
    Error {
        kind: Option<String>,
        message: String,
    },
}

impl ChatState {
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            ChatState::Final { .. } | ChatState::Aborted { .. } | ChatState::Error { .. }
        )
    }
}

/// A `chat` event.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatEvent {
    pub run_id: String,
    /// Canonical session key (`main` comes back as `agent:main:main`).
    pub session_key: String,
    pub seq: Option<u64>,
    pub state: ChatState,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawChat {
    run_id: String,
    #[serde(default)]
    session_key: String,
    #[serde(default)]
    seq: Option<u64>,
    state: String,
    #[serde(default)]
    phase: Option<String>,
    #[serde(default)]
    delta_text: Option<String>,
    #[serde(default)]
    message: Option<ChatMessage>,
    #[serde(default)]
    error_message: Option<String>,
    #[serde(default)]
    error_kind: Option<String>,
}

/// The stream of an `agent` event.
#[derive(Debug, Clone, PartialEq)]
pub enum AgentStream {
    /// `lifecycle` `{phase: start|model|finishing|end, error?}`.
    Lifecycle {
        phase: String,
        error: Option<String>,
    },
    /// `run_status` `{phase}` (`preparing_workspace`, ..., `retrying`).
    RunStatus { phase: String },
    /// `assistant` `{text (cumulative), delta}`.
    Assistant { text: String, delta: String },
    /// `usage` (token counts; unused).
    Usage,
}

/// An `agent` event.
#[derive(Debug, Clone, PartialEq)]
pub struct AgentEvent {
    pub run_id: String,
    pub session_key: String,
    pub stream: AgentStream,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct RawAgent {
    run_id: String,
    #[serde(default)]
    session_key: String,
    stream: String,
    #[serde(default)]
    data: Value,
}

/// Why an inbound frame is deliberately not used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ignored {
    /// An event name this client has no use for (`presence`, `health`, `skills.changed`,
    /// `chat.metadata.changed`, and whatever future gateways add).
    Event(String),
    /// A `chat` event with a state this client does not know.
    ChatState(String),
    /// An `agent` event of a stream this client does not use (`tool`, ...).
    AgentStream(String),
}

/// Any frame from the gateway.
#[derive(Debug, Clone, PartialEq)]
pub enum Inbound {
    Challenge(Challenge),
    Response(Response),
    Chat(ChatEvent),
    Agent(AgentEvent),
    Tick,
    /// `shutdown {reason}`: the gateway is stopping; a close 1012 follows.
    Shutdown {
        reason: Option<String>,
    },
    Ignored(Ignored),
}

fn malformed(kind: &'static str) -> impl Fn(serde_json::Error) -> FrameError {
    move |source| FrameError::Malformed { kind, source }
}

/// Parse one text frame from the gateway.
pub fn parse_inbound(text: &str) -> Result<Inbound, FrameError> {
    let value: Value = serde_json::from_str(text).map_err(FrameError::NotJson)?;
    parse_inbound_value(value)
}

/// [`parse_inbound`] on an already parsed JSON value.
pub fn parse_inbound_value(value: Value) -> Result<Inbound, FrameError> {
    let kind = value
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    match kind.as_str() {
        "res" => {
            let raw: RawResponse = serde_json::from_value(value).map_err(malformed("res"))?;
            let result = if raw.ok {
                Ok(raw.payload)
            } else {
                Err(raw.error.unwrap_or_else(|| ErrorShape {
                    code: "UNKNOWN".into(),
                    message: "request failed without an error object".into(),
                    ..ErrorShape::default()
                }))
            };
            Ok(Inbound::Response(Response { id: raw.id, result }))
        }
        "event" => {
            let name = value
                .get("event")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let payload = value.get("payload").cloned().unwrap_or(Value::Null);
            parse_event(&name, payload)
        }
        other => Err(FrameError::UnknownType(other.to_string())),
    }
}

fn parse_event(name: &str, payload: Value) -> Result<Inbound, FrameError> {
    match name {
        "connect.challenge" => Ok(Inbound::Challenge(
            serde_json::from_value(payload).map_err(malformed("connect.challenge"))?,
        )),
        "tick" => Ok(Inbound::Tick),
        "shutdown" => Ok(Inbound::Shutdown {
            reason: payload
                .get("reason")
                .and_then(Value::as_str)
                .map(str::to_string),
        }),
        "chat" => {
            let raw: RawChat = serde_json::from_value(payload).map_err(malformed("chat"))?;
            let text = raw.message.as_ref().map(ChatMessage::text);
            let state = match raw.state.as_str() {
                "status" => ChatState::Status {
                    phase: raw.phase.unwrap_or_default(),
                },
                "delta" => ChatState::Delta {
                    delta: raw.delta_text.unwrap_or_default(),
                    text: text.unwrap_or_default(),
                },
                "final" => ChatState::Final {
                    text: text.unwrap_or_default(),
                },
                "aborted" => ChatState::Aborted {
                    partial: text.unwrap_or_default(),
                },
                "error" => ChatState::Error {
                    kind: raw.error_kind,
                    message: raw
                        .error_message
                        .unwrap_or_else(|| "the run failed".to_string()),
                },
                other => return Ok(Inbound::Ignored(Ignored::ChatState(other.to_string()))),
            };
            Ok(Inbound::Chat(ChatEvent {
                run_id: raw.run_id,
                session_key: raw.session_key,
                seq: raw.seq,
                state,
            }))
        }
        "agent" => {
            let raw: RawAgent = serde_json::from_value(payload).map_err(malformed("agent"))?;
            let s = |k: &str| {
                raw.data
                    .get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            let stream = match raw.stream.as_str() {
                "lifecycle" => AgentStream::Lifecycle {
                    phase: s("phase"),
                    error: raw
                        .data
                        .get("error")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                },
                "run_status" => AgentStream::RunStatus { phase: s("phase") },
                "assistant" => AgentStream::Assistant {
                    text: s("text"),
                    delta: s("delta"),
                },
                "usage" => AgentStream::Usage,
                other => return Ok(Inbound::Ignored(Ignored::AgentStream(other.to_string()))),
            };
            Ok(Inbound::Agent(AgentEvent {
                run_id: raw.run_id,
                session_key: raw.session_key,
                stream,
            }))
        }
        other => Ok(Inbound::Ignored(Ignored::Event(other.to_string()))),
    }
}

// ------------------------------------------------------------------------------------------
// chat.history
// ------------------------------------------------------------------------------------------

/// One message of `chat.history`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HistoryMessage {
    #[serde(default)]
    pub role: String,
    #[serde(default)]
    pub content: Option<Content>,
    /// User messages: `"<chat.send idempotencyKey>:user"`.
    #[serde(default)]
    pub idempotency_key: Option<String>,
    #[serde(default, rename = "__openclaw")]
    pub meta: Option<HistoryMeta>,
}

#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HistoryMeta {
    /// Assistant messages: the run that produced them (= the `chat.send` idempotency key).
    #[serde(default)]
    pub run_id: Option<String>,
    #[serde(default)]
    pub idempotency_key: Option<String>,
}

impl HistoryMessage {
    pub fn text(&self) -> String {
        self.content.as_ref().map(Content::text).unwrap_or_default()
    }

    pub fn run_id(&self) -> Option<&str> {
        self.meta.as_ref().and_then(|m| m.run_id.as_deref())
    }

    /// The user-message idempotency key, from the message or its metadata.
    pub fn user_key(&self) -> Option<&str> {
        self.idempotency_key.as_deref().or_else(|| {
            self.meta
                .as_ref()
                .and_then(|m| m.idempotency_key.as_deref())
        })
    }
}

/// The `chat.history` response payload.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct History {
    #[serde(default)]
    pub session_key: String,
    #[serde(default)]
    pub messages: Vec<HistoryMessage>,
}

/// What `chat.history` says about one `chat.send` idempotency key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HistoryFinding {
    /// No user message with `"<key>:user"`: the gateway never took it (or forgot it).
    Unknown,
    /// The user message is there and no reply yet: the run is in progress (or died).
    Accepted,
    /// The user message and the assistant reply of that run are there.
    Replied { text: String },
}

impl History {
    pub fn from_payload(payload: &Value) -> Result<History, FrameError> {
        serde_json::from_value(payload.clone()).map_err(malformed("chat.history"))
    }

    /// Look one idempotency key up: was it taken, and did its run reply?
    pub fn find(&self, key: &str) -> HistoryFinding {
        let user_key = format!("{key}:user");
        let accepted = self
            .messages
            .iter()
            .any(|m| m.role == "user" && m.user_key() == Some(user_key.as_str()));
        let reply = self
            .messages
            .iter()
            .rev()
            .filter(|m| m.role == "assistant" && m.run_id() == Some(key))
            .map(HistoryMessage::text)
            .find(|t| !t.is_empty());
        match (accepted, reply) {
            (_, Some(text)) => HistoryFinding::Replied { text },
            (true, None) => HistoryFinding::Accepted,
            (false, None) => HistoryFinding::Unknown,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn connect_params_are_closed() {
        let mut v = json!({
            "minProtocol": 4, "maxProtocol": 4,
            "client": {"id": "gateway-client", "version": "1", "platform": "linux", "mode": "ui"},
            "role": "operator", "scopes": ["operator.read"], "caps": [], "userAgent": "x",
            "locale": "en-US", "auth": {"token": "t"}
        });
        let ok: ConnectParams = serde_json::from_value(v.clone()).unwrap();
        assert_eq!(serde_json::to_value(&ok).unwrap(), v);
        v["stagewhisper"] = json!(true);
        let err = serde_json::from_value::<ConnectParams>(v).unwrap_err();
        assert!(err.to_string().contains("stagewhisper"), "{err}");
    }

    #[test]
    fn error_details_code_and_retry_hint() {
        let f = parse_inbound(
            r#"{"type":"res","id":"a","ok":false,"error":{"code":"UNAVAILABLE","message":"m",
            "retryable":true,"retryAfterMs":500,"details":{"code":"X","requestId":"r"}}}"#,
        )
        .unwrap();
        let Inbound::Response(Response { id, result: Err(e) }) = f else {
            panic!("{f:?}")
        };
        assert_eq!(id, "a");
        assert_eq!(e.retry_after_ms, Some(500));
        assert_eq!(e.retryable, Some(true));
        assert_eq!(e.detail_code(), Some("X"));
        assert_eq!(
            e.details.unwrap().request_id.as_deref(),
            Some("r"),
            "requestId of a pairing request"
        );
    }

    #[test]
    fn unknown_events_and_states_are_ignored_not_errors() {
        let f = parse_inbound(r#"{"type":"event","event":"presence","payload":{}}"#).unwrap();
        assert_eq!(f, Inbound::Ignored(Ignored::Event("presence".into())));
        let f = parse_inbound(
            r#"{"type":"event","event":"chat","payload":{"runId":"r","state":"thinking"}}"#,
        )
        .unwrap();
        assert_eq!(f, Inbound::Ignored(Ignored::ChatState("thinking".into())));
        assert!(matches!(
            parse_inbound(r#"{"type":"hello"}"#),
            Err(FrameError::UnknownType(_))
        ));
        assert!(matches!(
            parse_inbound("not json"),
            Err(FrameError::NotJson(_))
        ));
    }

    #[test]
    fn history_lookup_by_key() {
        let h = History::from_payload(&json!({"sessionKey": "s", "messages": [
            {"role": "user", "content": "hi", "idempotencyKey": "k1:user"},
            {"role": "assistant", "content": [{"type": "text", "text": "yo"}],
             "__openclaw": {"runId": "k1"}},
            {"role": "user", "content": "again", "__openclaw": {"idempotencyKey": "k2:user"}}
        ]}))
        .unwrap();
        assert_eq!(h.find("k1"), HistoryFinding::Replied { text: "yo".into() });
        assert_eq!(h.find("k2"), HistoryFinding::Accepted);
        assert_eq!(h.find("k3"), HistoryFinding::Unknown);
        assert_eq!(h.find("k"), HistoryFinding::Unknown, "no prefix match");
    }
}
