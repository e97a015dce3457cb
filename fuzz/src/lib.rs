//! What the fuzz targets share: writers that turn a parsed value back into the wire format, so a
//! target can check parse → write → parse gives the same value.

use chrono::SecondsFormat;
use serde_json::{json, Map, Value};
use stagewhisper_core::protocol::{self, Callback, StreamChunk};
use stagewhisper_core::transcript::Cue;

/// The task id the callback targets use for the path.
pub const TASK_ID: &str = "57b46352-d234-47a1-9c26-2b81d24983df";

/// A parsed callback written back as a body.
pub fn callback_json(cb: &Callback) -> Value {
    let mut m = Map::new();
    m.insert("task_id".into(), json!(cb.task_id));
    m.insert("session_id".into(), json!(cb.session_id));
    m.insert("status".into(), json!(cb.status.as_str()));
    let opt = [
        ("message_id", &cb.message_id),
        ("user_message_id", &cb.user_message_id),
        ("reply_text", &cb.reply_text),
        ("label", &cb.label),
        ("error_code", &cb.error_code),
        ("error_message", &cb.error_message),
    ];
    for (k, v) in opt {
        if let Some(v) = v {
            m.insert(k.into(), json!(v));
        }
    }
    if let Some(t) = cb.occurred_at {
        m.insert(
            "occurred_at".into(),
            json!(t.to_rfc3339_opts(SecondsFormat::AutoSi, true)),
        );
    }
    if let Some(c) = &cb.chunk {
        let c = match c {
            StreamChunk::Start => json!({"type": "start"}),
            StreamChunk::Finish => json!({"type": "finish"}),
            StreamChunk::TextStart { id } => json!({"type": "text-start", "id": id}),
            StreamChunk::TextEnd { id } => json!({"type": "text-end", "id": id}),
            StreamChunk::TextDelta { id, delta } => {
                json!({"type": "text-delta", "id": id, "delta": delta})
            }
            StreamChunk::Other(t) => json!({"type": t}),
        };
        m.insert("chunk".into(), c);
    }
    Value::Object(m)
}

/// Everything a valid callback guarantees, then the round trip through [`callback_json`].
pub fn check_callback(task_id: &str, cb: &Callback) {
    use protocol::Status;
    assert_eq!(cb.task_id, task_id);
    assert!(!cb.session_id.is_empty() && cb.session_id.len() <= protocol::MAX_ID_LEN);
    for id in [&cb.message_id, &cb.user_message_id].into_iter().flatten() {
        assert!(!id.is_empty() && id.len() <= protocol::MAX_ID_LEN);
    }
    if matches!(cb.status, Status::Message | Status::Notice) {
        assert!(cb
            .reply_text
            .as_deref()
            .is_some_and(|t| !t.trim().is_empty()));
    }
    assert_eq!(cb.status == Status::Stream, cb.chunk.is_some());
    match &cb.chunk {
        Some(StreamChunk::TextStart { id } | StreamChunk::TextEnd { id })
        | Some(StreamChunk::TextDelta { id, .. }) => {
            assert!(!id.is_empty() && id.len() <= protocol::MAX_ID_LEN)
        }
        _ => {}
    }
    let again = serde_json::to_vec(&callback_json(cb)).expect("serializes");
    let back = protocol::parse_callback(task_id, &again)
        .unwrap_or_else(|e| panic!("a written-back callback is refused ({e}): {cb:?}"));
    assert_eq!(&back, cb, "round trip");
    // What the text cleaners do to any accepted text: no panic, no blank edges left. (Not
    // idempotent on purpose: a reply that itself starts with the fallback prefix keeps it.)
    if let Some(t) = &cb.reply_text {
        let c = protocol::clean_text(t);
        assert_eq!(c.trim_end(), c);
        assert!(!c.starts_with(['\n', '\r', ' ', '\t']));
        let _ = protocol::is_none_reply(&c);
        let _ = protocol::has_draft_cursor(t);
    }
}

/// `hh:mm:ss.mmm` (`,` for SRT).
fn timestamp(ms: i64, mark: char) -> String {
    let (h, rest) = (ms / 3_600_000, ms % 3_600_000);
    format!(
        "{h:02}:{:02}:{:02}{mark}{:03}",
        rest / 60_000,
        rest % 60_000 / 1000,
        rest % 1000
    )
}

/// Cue text as a payload line that reads back as the same text: the markup characters as
/// entities, and a `{\` (which would start an SSA override) split by an empty tag.
fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace("{\\", "{<>\\")
}

/// Cues as a WebVTT file (the speaker as a voice tag).
pub fn write_vtt(cues: &[Cue]) -> String {
    let mut out = String::from("WEBVTT\n\n");
    for c in cues {
        let end = c.end_ms.unwrap_or(c.start_ms);
        out.push_str(&format!(
            "{} --> {}\n",
            timestamp(c.start_ms, '.'),
            timestamp(end, '.')
        ));
        if let Some(s) = &c.speaker {
            // Two spaces: a name that starts with `.` is not read as a class list.
            out.push_str(&format!("<v  {s}>"));
        }
        out.push_str(&escape(&c.text));
        out.push_str("\n\n");
    }
    out
}

/// Cues as an SRT file (the speaker as a `Name: ` prefix).
pub fn write_srt(cues: &[Cue]) -> String {
    let mut out = String::new();
    for (i, c) in cues.iter().enumerate() {
        let end = c.end_ms.unwrap_or(c.start_ms);
        out.push_str(&format!(
            "{}\n{} --> {}\n",
            i + 1,
            timestamp(c.start_ms, ','),
            timestamp(end, ',')
        ));
        if let Some(s) = &c.speaker {
            out.push_str(&format!("{s}: "));
        }
        out.push_str(&escape(&c.text));
        out.push_str("\n\n");
    }
    out
}

/// Cues as JSONL with explicit millisecond times.
pub fn write_jsonl(cues: &[Cue]) -> String {
    let mut out = String::new();
    for c in cues {
        let v = json!({
            "text": c.text,
            "speaker": c.speaker,
            "start_ms": c.start_ms,
            "end_ms": c.end_ms,
            "is_final": c.is_final,
        });
        out.push_str(&v.to_string());
        out.push('\n');
    }
    out
}

/// What every parsed transcript guarantees.
pub fn check_cues(text: &str, cues: &[Cue]) {
    let lines = text.lines().count().max(1);
    let mut last_line = 0;
    for c in cues {
        assert!(c.line >= 1 && c.line <= lines, "line {} of {lines}", c.line);
        assert!(c.line > last_line, "cues in file order");
        last_line = c.line;
        assert!(c.start_ms >= 0, "{c:?}");
        if let Some(e) = c.end_ms {
            assert!(e >= c.start_ms, "{c:?}");
        }
        assert!(!c.text.is_empty() && c.text.trim() == c.text, "{c:?}");
        if let Some(s) = &c.speaker {
            assert!(!s.is_empty() && s.trim() == s, "{c:?}");
        }
    }
}

/// The fields a round trip keeps (not the line numbers).
pub fn essence(cues: &[Cue]) -> Vec<(i64, Option<i64>, Option<String>, String, bool)> {
    cues.iter()
        .map(|c| {
            (
                c.start_ms,
                c.end_ms,
                c.speaker.clone(),
                c.text.clone(),
                c.is_final,
            )
        })
        .collect()
}
