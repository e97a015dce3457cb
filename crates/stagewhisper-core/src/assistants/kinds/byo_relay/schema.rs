//! The reasoning jobs' plaintext payloads and response schemas, and the check of a result
//! against its schema (`jsonschema`).
//!
//! - `live_analysis`: `{transcript, system_instruction, response_schema, new_turns}` — the
//!   call's recent transcript window (the newest turns last; `new_turns` of them are new since
//!   the last job), the call's coaching framing, and the schema of "one short sentence, or
//!   nothing": `{"insight": string of at most 240 characters, or null}` (an empty string or
//!   `none` also means nothing).
//! - `session_summary`: the whole transcript (the newest part if too long) →
//!   `{"summary": non-empty string}`.
//! - `capability_probe`: no call content → `{"raw_description": string}` (answered in clear).

use serde_json::{json, Value};

/// Longest insight shown (characters).
pub const MAX_INSIGHT_CHARS: u64 = 240;
/// Turns of context in a live-analysis job.
pub const LIVE_WINDOW: i64 = 12;
/// Longest transcript text in one summary job (characters; the newest part is kept).
pub const MAX_SUMMARY_CHARS: usize = 60_000;

pub fn live_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "insight": {
                "type": ["string", "null"],
                "maxLength": MAX_INSIGHT_CHARS,
                "description": "One short sentence the user can act on right now, or null when nothing is worth surfacing."
            }
        },
        "required": ["insight"]
    })
}

pub fn summary_schema() -> Value {
    json!({
        "type": "object",
        "properties": {
            "summary": {
                "type": "string",
                "minLength": 1,
                "description": "The post-call summary: key points, decisions, open questions and action items, as short bullet points."
            }
        },
        "required": ["summary"]
    })
}

pub fn probe_schema() -> Value {
    json!({
        "type": "object",
        "properties": {"raw_description": {"type": "string"}},
        "required": ["raw_description"]
    })
}

pub fn schema_for(purpose: &str) -> Value {
    match purpose {
        super::jobs::LIVE => live_schema(),
        super::jobs::SUMMARY => summary_schema(),
        _ => probe_schema(),
    }
}

/// The live system instruction: the call's framing plus the answer contract.
pub fn live_instruction(framing: &str) -> String {
    format!(
        "{framing}\n\nYou receive the recent transcript window of the call (the last `new_turns` \
         lines are new). Answer with JSON matching the response schema: `insight` is ONE sentence \
         of at most 20 words about the new lines, or null when nothing is worth surfacing."
    )
}

pub fn live_payload(framing: &str, window: &[String], new_turns: usize) -> Value {
    let schema = live_schema();
    json!({
        "transcript": window.join("\n"),
        "system_instruction": live_instruction(framing),
        "response_schema": schema,
        "new_turns": new_turns,
    })
}

pub fn summary_payload(title: Option<&str>, lines: &[String]) -> Value {
    let mut kept: Vec<&str> = Vec::new();
    let mut used = 0usize;
    for l in lines.iter().rev() {
        let n = l.chars().count() + 1;
        if used + n > MAX_SUMMARY_CHARS {
            break;
        }
        used += n;
        kept.push(l);
    }
    kept.reverse();
    let title = title
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| format!(" \"{t}\""))
        .unwrap_or_default();
    let omitted = lines.len() - kept.len();
    let mut transcript = String::new();
    if omitted > 0 {
        transcript.push_str(&format!("[{omitted} earlier turns omitted]\n"));
    }
    transcript.push_str(&kept.join("\n"));
    json!({
        "transcript": transcript,
        "system_instruction": format!(
            "The call{title} has ended. Summarise it for the user: the key points, decisions, open \
             questions and action items (with owners and dates when they were said), as short \
             bullet points. Answer with JSON matching the response schema."
        ),
        "response_schema": summary_schema(),
    })
}

pub fn probe_payload() -> Value {
    json!({
        "transcript": "",
        "system_instruction": "Describe yourself for the StageWhisper settings page in one line: \
            which model you run, which tools you can use, and anything the user should know. \
            Answer with JSON matching the response schema.",
        "response_schema": probe_schema(),
    })
}

/// Why a result does not fit its schema.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("{0}")]
pub struct SchemaError(pub String);

/// Checks `output` against the schema of `purpose`.
pub fn validate(purpose: &str, output: &Value) -> Result<(), SchemaError> {
    let schema = schema_for(purpose);
    let validator = jsonschema::validator_for(&schema)
        .map_err(|e| SchemaError(format!("response schema: {e}")))?;
    let first = validator.iter_errors(output).next().map(|e| e.to_string());
    match first {
        None => Ok(()),
        Some(e) => Err(SchemaError(e)),
    }
}

/// The insight of a valid live result (`None`: nothing worth surfacing).
pub fn insight_text(output: &Value) -> Option<String> {
    let s = output["insight"].as_str()?.trim();
    let bare = s.trim_matches(|c: char| c == '.' || c == '"').trim();
    if bare.is_empty() || bare.eq_ignore_ascii_case("none") || bare.eq_ignore_ascii_case("null") {
        return None;
    }
    Some(s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_results_are_one_short_sentence_or_nothing() {
        assert!(validate("live_analysis", &json!({"insight": "Ask for the budget."})).is_ok());
        assert!(validate("live_analysis", &json!({"insight": null})).is_ok());
        assert!(validate("live_analysis", &json!({})).is_err());
        assert!(validate("live_analysis", &json!({"insight": 3})).is_err());
        assert!(validate("live_analysis", &json!({"insight": "x".repeat(241)})).is_err());
        assert!(validate("live_analysis", &json!("Ask for the budget.")).is_err());
        assert_eq!(
            insight_text(&json!({"insight": " Ask for the budget. "})).as_deref(),
            Some("Ask for the budget.")
        );
        for nothing in [
            json!({"insight": null}),
            json!({"insight": ""}),
            json!({"insight": "None."}),
        ] {
            assert_eq!(insight_text(&nothing), None, "{nothing}");
        }
    }

    #[test]
    fn summaries_need_text_and_keep_the_newest_turns() {
        assert!(validate("session_summary", &json!({"summary": "- done"})).is_ok());
        assert!(validate("session_summary", &json!({"summary": ""})).is_err());
        let lines: Vec<String> = (0..10_000).map(|i| format!("A: line {i}")).collect();
        let p = summary_payload(Some("Acme"), &lines);
        let t = p["transcript"].as_str().unwrap();
        assert!(t.chars().count() <= MAX_SUMMARY_CHARS + 40);
        assert!(
            t.ends_with("A: line 9999") && t.starts_with('['),
            "{}",
            &t[..40]
        );
        assert!(p["system_instruction"]
            .as_str()
            .unwrap()
            .contains("\"Acme\""));
    }
}
