//! JSONL: one JSON object per line (blank lines are skipped):
//! `{"text": "…", "speaker"?: "Ana", "start"?: 1.5, "end"?: 3.0, "is_final"?: true}`.
//! Times are seconds from the start (`start_ms` / `end_ms` in milliseconds also work). A turn
//! without a start follows the previous one after its end, or after an estimate of how long the
//! previous text takes to say (0.4 s a word, at least 1 s).

use super::{Cue, ParseError};
use serde_json::{Map, Value};

fn time_ms(
    obj: &Map<String, Value>,
    secs_key: &str,
    ms_key: &str,
    line: usize,
) -> Result<Option<i64>, ParseError> {
    let bad = |k: &str| {
        ParseError::new(
            line,
            format!(
                "`{k}` must be a non-negative number ({})",
                if k == ms_key {
                    "milliseconds"
                } else {
                    "seconds"
                }
            ),
        )
    };
    if let Some(v) = obj.get(ms_key).filter(|v| !v.is_null()) {
        let n = v
            .as_f64()
            .filter(|n| n.is_finite() && *n >= 0.0)
            .ok_or_else(|| bad(ms_key))?;
        return Ok(Some(n.round() as i64));
    }
    if let Some(v) = obj.get(secs_key).filter(|v| !v.is_null()) {
        let n = v
            .as_f64()
            .filter(|n| n.is_finite() && *n >= 0.0)
            .ok_or_else(|| bad(secs_key))?;
        return Ok(Some((n * 1000.0).round() as i64));
    }
    Ok(None)
}

/// How long a text takes to say, roughly.
pub fn estimate_ms(text: &str) -> i64 {
    (text.split_whitespace().count() as i64 * 400).max(1000)
}

pub fn parse(text: &str) -> Result<Vec<Cue>, ParseError> {
    let mut cues: Vec<Cue> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let raw = if i == 0 {
            raw.trim_start_matches('\u{feff}')
        } else {
            raw
        };
        if raw.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(raw).map_err(|e| {
            ParseError::new(line, format!("invalid JSON at column {}: {e}", e.column()))
        })?;
        let Value::Object(obj) = v else {
            return Err(ParseError::new(
                line,
                "expected a JSON object like {\"text\": \"…\"}",
            ));
        };
        let text = match obj.get("text") {
            Some(Value::String(s)) if !s.trim().is_empty() => s.trim().to_string(),
            Some(Value::String(_)) => return Err(ParseError::new(line, "`text` is empty")),
            None | Some(Value::Null) => return Err(ParseError::new(line, "`text` is missing")),
            Some(_) => return Err(ParseError::new(line, "`text` must be a string")),
        };
        let speaker = match obj.get("speaker") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.trim().to_string()).filter(|s| !s.is_empty()),
            Some(_) => return Err(ParseError::new(line, "`speaker` must be a string")),
        };
        let is_final = match obj.get("is_final") {
            None | Some(Value::Null) => true,
            Some(Value::Bool(b)) => *b,
            Some(_) => return Err(ParseError::new(line, "`is_final` must be true or false")),
        };
        let start = time_ms(&obj, "start", "start_ms", line)?;
        let end = time_ms(&obj, "end", "end_ms", line)?;
        let start_ms = match start {
            Some(s) => s,
            None => cues
                .last()
                .map(|p| p.end_ms.unwrap_or(p.start_ms + estimate_ms(&p.text)))
                .unwrap_or(0),
        };
        if let Some(e) = end {
            if e < start_ms {
                return Err(ParseError::new(
                    line,
                    format!("the turn ends ({e} ms) before it starts ({start_ms} ms)"),
                ));
            }
        }
        cues.push(Cue {
            line,
            start_ms,
            end_ms: end,
            speaker,
            text,
            is_final,
        });
    }
    Ok(cues)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_turns_and_fills_times() {
        let s = "{\"speaker\":\"Ana\",\"text\":\"Hello there\",\"start\":1.5,\"end\":2.25}\n\n{\"text\":\"one two three four five\"}\n{\"text\":\"partial\",\"is_final\":false,\"start_ms\":9000}\n{\"text\":\"next\",\"speaker\":null}\n";
        let cues = parse(s).unwrap();
        assert_eq!(cues.len(), 4);
        assert_eq!(cues[0].speaker.as_deref(), Some("Ana"));
        assert_eq!((cues[0].start_ms, cues[0].end_ms), (1500, Some(2250)));
        assert_eq!(cues[1].start_ms, 2250, "after the previous end");
        assert_eq!(cues[1].line, 3);
        assert!(!cues[2].is_final);
        assert_eq!(cues[2].start_ms, 9000);
        assert_eq!(
            cues[3].start_ms,
            9000 + 1000,
            "estimated from the previous text"
        );
    }

    #[test]
    fn malformed_input_names_the_line() {
        let cases: &[(&str, usize, &str)] = &[
            (
                "{\"text\":\"a\"}\n{\"text\": \"b\"\n",
                2,
                "invalid JSON at column",
            ),
            ("[1,2]\n", 1, "expected a JSON object"),
            ("\n\n{\"speaker\":\"x\"}\n", 3, "`text` is missing"),
            ("{\"text\":\"  \"}\n", 1, "`text` is empty"),
            ("{\"text\":5}\n", 1, "`text` must be a string"),
            (
                "{\"text\":\"a\",\"speaker\":1}\n",
                1,
                "`speaker` must be a string",
            ),
            (
                "{\"text\":\"a\",\"start\":-1}\n",
                1,
                "`start` must be a non-negative number",
            ),
            ("{\"text\":\"a\",\"start\":\"1\"}\n", 1, "`start` must be"),
            ("{\"text\":\"a\",\"end_ms\":true}\n", 1, "`end_ms` must be"),
            ("{\"text\":\"a\",\"start\":5,\"end\":1}\n", 1, "ends"),
            (
                "{\"text\":\"a\",\"is_final\":\"yes\"}\n",
                1,
                "`is_final` must be",
            ),
        ];
        for (input, line, needle) in cases {
            let e = parse(input).unwrap_err();
            assert_eq!(e.line, *line, "{input:?}: {e}");
            assert!(e.message.contains(needle), "{input:?}: {e}");
        }
    }
}
