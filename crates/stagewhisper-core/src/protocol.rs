//! Wire types of the direct-relay callback (`POST {callback_url}/tasks/{task_id}`) and their
//! strict parsing. Knows nothing about HTTP transport, SQL or the UI.
//!
//! Parsing reads each known field as "absent, null, a string or something else" (`Field`) and
//! checks it by hand, so every rejection maps to one stable error code (see
//! [`ProtocolError::code`]); unknown fields are skipped without being built, and every field but
//! `session_id` and `status` is optional, because real assistants send more (and less) than the
//! seed documents.

use chrono::{DateTime, Utc};
use serde::de::{self, IgnoredAny};
use serde_json::Value;
use std::borrow::Cow;

/// Maximum accepted callback body (bytes).
pub const MAX_BODY_BYTES: usize = 1024 * 1024;
/// Longest `session_id` / ids we accept; anything longer is not a real id.
pub const MAX_ID_LEN: usize = 512;
/// Prefix that routes a reply to the Insights tab of a call.
pub const INSIGHTS_PREFIX: &str = "insights:";

/// Every status a real assistant sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Message,
    Notice,
    Errored,
    Typing,
    ToolCall,
    Completed,
    Silent,
    Stream,
}

impl Status {
    pub fn parse(s: &str) -> Option<Status> {
        Some(match s {
            "message" => Status::Message,
            "notice" => Status::Notice,
            "errored" => Status::Errored,
            "typing" => Status::Typing,
            "tool_call" => Status::ToolCall,
            "completed" => Status::Completed,
            "silent" => Status::Silent,
            "stream" => Status::Stream,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Message => "message",
            Status::Notice => "notice",
            Status::Errored => "errored",
            Status::Typing => "typing",
            Status::ToolCall => "tool_call",
            Status::Completed => "completed",
            Status::Silent => "silent",
            Status::Stream => "stream",
        }
    }
}

/// One AI-SDK UI-message-stream part carried by `status: "stream"`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamChunk {
    Start,
    TextStart {
        id: String,
    },
    TextDelta {
        id: String,
        delta: String,
    },
    TextEnd {
        id: String,
    },
    Finish,
    /// A part type we do not render (reasoning, tool input, …): accepted and ignored.
    Other(String),
}

/// A parsed, validated callback.
#[derive(Debug, Clone, PartialEq)]
pub struct Callback {
    /// From the path; the body's `task_id`, when present, equals it.
    pub task_id: String,
    pub session_id: String,
    pub status: Status,
    pub message_id: Option<String>,
    pub user_message_id: Option<String>,
    pub reply_text: Option<String>,
    pub label: Option<String>,
    pub error_code: Option<String>,
    pub error_message: Option<String>,
    /// `None` when absent or not RFC 3339 (arrival time is used instead).
    pub occurred_at: Option<DateTime<Utc>>,
    pub chunk: Option<StreamChunk>,
}

impl Callback {
    /// A callback with only its task, session and status set (what an assistant kind builds
    /// from the events it hears, before filling in the fields its event carries).
    pub fn new(task_id: String, session_id: String, status: Status) -> Callback {
        Callback {
            task_id,
            session_id,
            status,
            message_id: None,
            user_message_id: None,
            reply_text: None,
            label: None,
            error_code: None,
            error_message: None,
            occurred_at: None,
            chunk: None,
        }
    }

    /// The scope of a typing indicator: the user message it answers, else the task.
    pub fn scope(&self) -> &str {
        self.user_message_id.as_deref().unwrap_or(&self.task_id)
    }
}

/// A rejected callback. Each variant has a stable `code` used in the JSON error body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    #[error("the task id in the path must be a UUID")]
    InvalidTaskId,
    #[error("the body is not a JSON object: {0}")]
    InvalidJson(String),
    #[error("`{0}` is required and must be a non-empty string")]
    MissingField(&'static str),
    #[error("`{0}` has the wrong type or is too long")]
    InvalidField(&'static str),
    #[error("the body's task_id does not match the task id in the path")]
    TaskIdMismatch,
    #[error("unknown status `{0}`")]
    InvalidStatus(String),
    #[error("status `{0}` needs a non-empty `reply_text`")]
    EmptyReplyText(&'static str),
    #[error("status `stream` needs a valid `chunk` object: {0}")]
    InvalidChunk(&'static str),
}

impl ProtocolError {
    pub fn code(&self) -> &'static str {
        match self {
            ProtocolError::InvalidTaskId => "invalid_task_id",
            ProtocolError::InvalidJson(_) => "invalid_json",
            ProtocolError::MissingField(_) => "missing_field",
            ProtocolError::InvalidField(_) => "invalid_field",
            ProtocolError::TaskIdMismatch => "task_id_mismatch",
            ProtocolError::InvalidStatus(_) => "invalid_status",
            ProtocolError::EmptyReplyText(_) => "empty_reply_text",
            ProtocolError::InvalidChunk(_) => "invalid_chunk",
        }
    }
}

/// `true` when `s` is a UUID in the canonical 8-4-4-4-12 hex form (any case).
pub fn is_uuid(s: &str) -> bool {
    let b = s.as_bytes();
    if b.len() != 36 {
        return false;
    }
    b.iter().enumerate().all(|(i, c)| match i {
        8 | 13 | 18 | 23 => *c == b'-',
        _ => c.is_ascii_hexdigit(),
    })
}

/// Validates the path's task id.
pub fn parse_task_id(s: &str) -> Result<String, ProtocolError> {
    if is_uuid(s) {
        Ok(s.to_string())
    } else {
        Err(ProtocolError::InvalidTaskId)
    }
}

/// One known field of a callback body, as found: borrowed from the body when it has no escapes.
#[derive(Debug, Default)]
enum Field<'a> {
    #[default]
    Absent,
    Null,
    Str(Cow<'a, str>),
    /// A number, boolean, array or object (skipped, not built).
    Other,
}

impl<'de: 'a, 'a> de::Deserialize<'de> for Field<'a> {
    fn deserialize<D: de::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> de::Visitor<'de> for V<'a> {
            type Value = Field<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Field<'a>, E> {
                Ok(Field::Str(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Field<'a>, E> {
                Ok(Field::Str(Cow::Owned(v.to_string())))
            }
            fn visit_string<E>(self, v: String) -> Result<Field<'a>, E> {
                Ok(Field::Str(Cow::Owned(v)))
            }
            fn visit_unit<E>(self) -> Result<Field<'a>, E> {
                Ok(Field::Null)
            }
            fn visit_none<E>(self) -> Result<Field<'a>, E> {
                Ok(Field::Null)
            }
            fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Field<'a>, D::Error> {
                <Field<'a> as de::Deserialize<'de>>::deserialize(d)
            }
            fn visit_bool<E>(self, _: bool) -> Result<Field<'a>, E> {
                Ok(Field::Other)
            }
            fn visit_i64<E>(self, _: i64) -> Result<Field<'a>, E> {
                Ok(Field::Other)
            }
            fn visit_u64<E>(self, _: u64) -> Result<Field<'a>, E> {
                Ok(Field::Other)
            }
            fn visit_f64<E>(self, _: f64) -> Result<Field<'a>, E> {
                Ok(Field::Other)
            }
            fn visit_seq<A: de::SeqAccess<'de>>(self, mut a: A) -> Result<Field<'a>, A::Error> {
                while a.next_element::<IgnoredAny>()?.is_some() {}
                Ok(Field::Other)
            }
            fn visit_map<A: de::MapAccess<'de>>(self, mut a: A) -> Result<Field<'a>, A::Error> {
                while a.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
                Ok(Field::Other)
            }
        }
        d.deserialize_any(V(std::marker::PhantomData))
    }
}

/// The fields a callback can carry; anything else in the body is skipped.
#[derive(serde::Deserialize)]
struct Body<'a> {
    #[serde(default, borrow)]
    session_id: Field<'a>,
    #[serde(default, borrow)]
    status: Field<'a>,
    #[serde(default, borrow)]
    task_id: Field<'a>,
    #[serde(default, borrow)]
    message_id: Field<'a>,
    #[serde(default, borrow)]
    user_message_id: Field<'a>,
    #[serde(default, borrow)]
    reply_text: Field<'a>,
    #[serde(default, borrow)]
    label: Field<'a>,
    #[serde(default, borrow)]
    error_code: Field<'a>,
    #[serde(default, borrow)]
    error_message: Field<'a>,
    #[serde(default, borrow)]
    occurred_at: Field<'a>,
    #[serde(default)]
    chunk: Option<Value>,
}

/// Parses and validates a callback body for the task id from the path.
pub fn parse_callback(task_id: &str, body: &[u8]) -> Result<Callback, ProtocolError> {
    // A struct would also accept a JSON array (positional fields): only an object is a callback.
    let first = body.iter().find(|b| !b.is_ascii_whitespace());
    if first.is_some_and(|b| *b != b'{') {
        serde_json::from_slice::<IgnoredAny>(body)
            .map_err(|e| ProtocolError::InvalidJson(e.to_string()))?;
        return Err(ProtocolError::InvalidJson("expected an object".into()));
    }
    let obj: Body<'_> =
        serde_json::from_slice(body).map_err(|e| ProtocolError::InvalidJson(e.to_string()))?;
    let session_id = required_str(obj.session_id, "session_id")?;
    let status_raw = required_str(obj.status, "status")?;
    // Type-check the optional fields before looking at their meaning.
    let body_task_id = optional_str(obj.task_id, "task_id")?;
    let message_id = optional_str(obj.message_id, "message_id")?;
    let user_message_id = optional_str(obj.user_message_id, "user_message_id")?;
    let reply_text = optional_text(obj.reply_text, "reply_text")?;
    let label = optional_text(obj.label, "label")?;
    let error_code = optional_str(obj.error_code, "error_code")?;
    let error_message = optional_text(obj.error_message, "error_message")?;
    if let Some(t) = &body_task_id {
        if !t.eq_ignore_ascii_case(task_id) {
            return Err(ProtocolError::TaskIdMismatch);
        }
    }
    let status = Status::parse(&status_raw).ok_or(ProtocolError::InvalidStatus(status_raw))?;
    // A message is never lost over its timestamp: an `occurred_at` that is not an RFC 3339
    // string (epoch milliseconds, `true`, an object, any other text) is ignored and the message
    // is ordered by arrival. A non-string value was skipped by the parser, never built.
    let occurred_at = match &obj.occurred_at {
        Field::Str(s) => parse_rfc3339(s),
        Field::Absent | Field::Null | Field::Other => None,
    };
    let mut cb = Callback {
        task_id: task_id.to_string(),
        session_id,
        status,
        message_id: message_id.filter(|s| !s.is_empty()),
        user_message_id: user_message_id.filter(|s| !s.is_empty()),
        reply_text,
        label: label.filter(|s| !s.trim().is_empty()),
        error_code,
        error_message,
        occurred_at,
        chunk: None,
    };
    match status {
        Status::Message | Status::Notice
            if cb.reply_text.as_deref().is_none_or(|t| t.trim().is_empty()) =>
        {
            return Err(ProtocolError::EmptyReplyText(status.as_str()));
        }
        Status::Stream => cb.chunk = Some(parse_chunk(obj.chunk.as_ref())?),
        _ => {}
    }
    Ok(cb)
}

fn parse_chunk(v: Option<&Value>) -> Result<StreamChunk, ProtocolError> {
    let Some(Value::Object(c)) = v else {
        return Err(ProtocolError::InvalidChunk("`chunk` must be an object"));
    };
    let Some(Value::String(ty)) = c.get("type") else {
        return Err(ProtocolError::InvalidChunk("`chunk.type` must be a string"));
    };
    let id = || match c.get("id") {
        Some(Value::String(s)) if !s.is_empty() && s.len() <= MAX_ID_LEN => Ok(s.clone()),
        _ => Err(ProtocolError::InvalidChunk(
            "`chunk.id` must be a non-empty string",
        )),
    };
    Ok(match ty.as_str() {
        "start" => StreamChunk::Start,
        "finish" => StreamChunk::Finish,
        "text-start" => StreamChunk::TextStart { id: id()? },
        "text-end" => StreamChunk::TextEnd { id: id()? },
        "text-delta" => {
            let Some(Value::String(delta)) = c.get("delta") else {
                return Err(ProtocolError::InvalidChunk(
                    "`chunk.delta` must be a string on text-delta",
                ));
            };
            StreamChunk::TextDelta {
                id: id()?,
                delta: delta.clone(),
            }
        }
        other => StreamChunk::Other(other.to_string()),
    })
}

fn required_str(f: Field<'_>, key: &'static str) -> Result<String, ProtocolError> {
    match f {
        Field::Str(s) if !s.is_empty() => {
            if s.len() > MAX_ID_LEN {
                Err(ProtocolError::InvalidField(key))
            } else {
                Ok(s.into_owned())
            }
        }
        _ => Err(ProtocolError::MissingField(key)),
    }
}

/// An optional id-like string (bounded length); `null` means absent.
fn optional_str(f: Field<'_>, key: &'static str) -> Result<Option<String>, ProtocolError> {
    match f {
        Field::Absent | Field::Null => Ok(None),
        Field::Str(s) if s.len() <= MAX_ID_LEN => Ok(Some(s.into_owned())),
        _ => Err(ProtocolError::InvalidField(key)),
    }
}

/// An optional free-text field (bounded only by the body cap); `null` means absent.
fn optional_text(f: Field<'_>, key: &'static str) -> Result<Option<String>, ProtocolError> {
    match f {
        Field::Absent | Field::Null => Ok(None),
        Field::Str(s) => Ok(Some(s.into_owned())),
        Field::Other => Err(ProtocolError::InvalidField(key)),
    }
}

/// RFC 3339 with or without a fractional part; `None` for anything else.
pub fn parse_rfc3339(s: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(s.trim())
        .ok()
        .map(|d| d.with_timezone(&Utc))
}

/// The trailing draft cursor some assistants append to streamed drafts.
pub const DRAFT_CURSOR: char = '▉';
/// What the Hermes adapter prepends when it re-sends a reply as plain text.
pub const PLAIN_TEXT_FALLBACK_PREFIX: &str = "(Response formatting failed, plain text:)";

/// `true` when an assistant text is an edit-style draft (ends with the cursor).
pub fn has_draft_cursor(text: &str) -> bool {
    text.trim_end().ends_with(DRAFT_CURSOR)
}

/// Cleans an assistant text for display: drops leading blank lines, the plain-text fallback
/// prefix and a trailing draft cursor. Inner formatting is kept.
pub fn clean_text(text: &str) -> String {
    let mut t = text.trim_start_matches(['\n', '\r', ' ', '\t']);
    if let Some(rest) = t.strip_prefix(PLAIN_TEXT_FALLBACK_PREFIX) {
        t = rest.trim_start_matches(['\n', '\r', ' ', '\t']);
    }
    let t = t.trim_end();
    let t = t.strip_suffix(DRAFT_CURSOR).unwrap_or(t);
    t.trim_end().to_string()
}

/// `true` for an insight reply that means "nothing worth surfacing".
pub fn is_none_reply(text: &str) -> bool {
    let t = text.trim();
    let t = t.strip_suffix('.').unwrap_or(t);
    t.eq_ignore_ascii_case("none")
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: &str = "57b46352-d234-47a1-9c26-2b81d24983df";

    fn parse(body: &str) -> Result<Callback, ProtocolError> {
        parse_callback(T, body.as_bytes())
    }

    #[test]
    fn uuid_forms() {
        assert!(is_uuid(T));
        assert!(is_uuid(&T.to_uppercase()));
        assert!(!is_uuid("57b46352d23447a19c262b81d24983df"));
        assert!(!is_uuid("not-a-uuid"));
        assert!(!is_uuid("57b46352-d234-47a1-9c26-2b81d24983dg"));
    }

    #[test]
    fn message_with_all_observed_fields() {
        let cb = parse(&format!(
            r#"{{"task_id":"{T}","session_id":"s","message_id":"m","user_message_id":null,"status":"message","reply_text":"hi","error_code":null,"error_message":null,"model":null,"occurred_at":"2026-11-29T12:35:28.132716Z","chat_id":"sw:s:chat","extra":{{"a":1}}}}"#
        ))
        .unwrap();
        assert_eq!(cb.status, Status::Message);
        assert_eq!(cb.message_id.as_deref(), Some("m"));
        assert_eq!(cb.user_message_id, None);
        assert_eq!(cb.scope(), T);
        assert_eq!(
            cb.occurred_at.unwrap().timestamp_micros(),
            parse_rfc3339("2026-11-29T12:35:28.132716Z")
                .unwrap()
                .timestamp_micros()
        );
    }

    #[test]
    fn error_codes() {
        let code = |b: &str| parse(b).unwrap_err().code();
        assert_eq!(code("[]"), "invalid_json");
        // An array would fill a struct positionally: only an object is a callback.
        assert_eq!(code(r#" ["s", "typing"]"#), "invalid_json");
        assert_eq!(code(r#""s""#), "invalid_json");
        assert_eq!(code(""), "invalid_json");
        assert_eq!(code("{"), "invalid_json");
        assert_eq!(
            code(r#"{"session_id":"s","status":"typing"} x"#),
            "invalid_json"
        );
        assert_eq!(
            code(r#"{"session_id":["s"],"status":"typing"}"#),
            "missing_field"
        );
        assert_eq!(
            code(r#"{"session_id":"s","status":"typing","message_id":{"a":[1]}}"#),
            "invalid_field"
        );
        assert_eq!(code(r#"{"status":"typing"}"#), "missing_field");
        assert_eq!(
            code(r#"{"session_id":"","status":"typing"}"#),
            "missing_field"
        );
        assert_eq!(code(r#"{"session_id":"s"}"#), "missing_field");
        assert_eq!(code(r#"{"session_id":"s","status":5}"#), "missing_field");
        assert_eq!(
            code(r#"{"session_id":"s","status":"message","reply_text":5}"#),
            "invalid_field"
        );
        assert_eq!(
            code(
                r#"{"session_id":"s","status":"typing","task_id":"00000000-0000-0000-0000-000000000000"}"#
            ),
            "task_id_mismatch"
        );
        assert_eq!(
            code(r#"{"session_id":"s","status":"done"}"#),
            "invalid_status"
        );
        assert_eq!(
            code(r#"{"session_id":"s","status":"message","reply_text":"  "}"#),
            "empty_reply_text"
        );
        assert_eq!(
            code(r#"{"session_id":"s","status":"stream"}"#),
            "invalid_chunk"
        );
        assert_eq!(
            code(r#"{"session_id":"s","status":"stream","chunk":{"type":"text-delta","id":"a"}}"#),
            "invalid_chunk"
        );
        assert_eq!(parse_task_id("x").unwrap_err().code(), "invalid_task_id");
    }

    #[test]
    fn escaped_strings_and_nested_unknown_fields() {
        let cb = parse(
            r#"{"session_id":"s\u0031","status":"message","reply_text":"a \"quoted\" \u00e9\n","meta":{"deep":[1,{"x":null}],"s":"}"}}"#,
        )
        .unwrap();
        assert_eq!(cb.session_id, "s1");
        assert_eq!(cb.reply_text.as_deref(), Some("a \"quoted\" é\n"));
    }

    #[test]
    fn lenient_timestamps_and_unknown_chunks() {
        let cb =
            parse(r#"{"session_id":"s","status":"typing","occurred_at":"yesterday"}"#).unwrap();
        assert_eq!(cb.occurred_at, None);
        assert!(parse_rfc3339("2026-11-29T12:35:28Z").is_some());
        assert!(parse_rfc3339("2026-11-29T12:35:28.1+02:00").is_some());
        let cb =
            parse(r#"{"session_id":"s","status":"stream","chunk":{"type":"reasoning-delta"}}"#)
                .unwrap();
        assert_eq!(cb.chunk, Some(StreamChunk::Other("reasoning-delta".into())));
    }

    #[test]
    fn an_unusable_occurred_at_is_ignored_not_rejected() {
        for v in [
            "1733050000000",
            "1733050000.5",
            "-1",
            "true",
            "false",
            "null",
            r#"{"ms":1733050000000,"tz":["UTC"]}"#,
            r#"["2026-11-29T12:35:28Z"]"#,
            r#""""#,
            r#""2026-13-45T99:00:00Z""#,
        ] {
            let body = format!(
                r#"{{"session_id":"s","status":"message","reply_text":"hi","occurred_at":{v},"message_id":"m"}}"#
            );
            let cb = parse(&body).unwrap_or_else(|e| panic!("occurred_at {v}: {e:?}"));
            assert_eq!(cb.occurred_at, None, "occurred_at {v}");
            // The fields after it are still read.
            assert_eq!(cb.reply_text.as_deref(), Some("hi"), "occurred_at {v}");
            assert_eq!(cb.message_id.as_deref(), Some("m"), "occurred_at {v}");
        }
        // A string longer than any id is no longer an error either.
        let long = "x".repeat(MAX_ID_LEN + 1);
        let cb = parse(&format!(
            r#"{{"session_id":"s","status":"typing","occurred_at":"{long}"}}"#
        ))
        .unwrap();
        assert_eq!(cb.occurred_at, None);
        // A usable one is still used.
        let cb = parse(
            r#"{"session_id":"s","status":"typing","meta":1733050000000,"occurred_at":"2026-11-29T12:35:28Z"}"#,
        )
        .unwrap();
        assert_eq!(cb.occurred_at, parse_rfc3339("2026-11-29T12:35:28Z"));
        assert!(cb.occurred_at.is_some());
        // The other fields keep their strict types.
        assert_eq!(
            parse(r#"{"session_id":"s","status":"typing","occurred_at":5,"message_id":5}"#)
                .unwrap_err()
                .code(),
            "invalid_field"
        );
    }

    #[test]
    fn cleaning() {
        assert_eq!(clean_text("\n\nStub reply #10:  ▉"), "Stub reply #10:");
        assert!(has_draft_cursor("\n\nStub  ▉"));
        assert!(!has_draft_cursor("done"));
        assert_eq!(
            clean_text("(Response formatting failed, plain text:)\n\nStub reply #33"),
            "Stub reply #33"
        );
        assert_eq!(
            clean_text("  keep **this**\n\nand that  "),
            "keep **this**\n\nand that"
        );
        for none in ["none", "None.", " NONE ", "none."] {
            assert!(is_none_reply(none), "{none}");
        }
        assert!(!is_none_reply("none of them agreed"));
    }
}
