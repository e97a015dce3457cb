//! JSONL: one JSON object per line (blank lines are skipped):
//! `{"text": "…", "speaker"?: "Ana", "start"?: 1.5, "end"?: 3.0, "is_final"?: true}`.
//! Times are seconds from the start (`start_ms` / `end_ms` in milliseconds also work). A turn
//! without a start follows the previous one after its end, or after an estimate of how long the
//! previous text takes to say (0.4 s a word, at least 1 s).

use super::{Cue, ParseError, MAX_TIME_MS};
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
                "`{k}` must be a non-negative number ({}) up to a million hours",
                if k == ms_key {
                    "milliseconds"
                } else {
                    "seconds"
                }
            ),
        )
    };
    // An integer is read exactly (as a float, one past 2^53 would move); a fraction is rounded
    // to the millisecond.
    let ms = |v: &Value, scale: f64| match v.as_i64() {
        Some(n) => n.checked_mul(scale as i64),
        None => v
            .as_f64()
            .filter(|n| n.is_finite() && *n >= 0.0 && n * scale <= MAX_TIME_MS as f64)
            .map(|n| (n * scale).round() as i64),
    };
    for (key, scale) in [(ms_key, 1.0), (secs_key, 1000.0)] {
        if let Some(v) = obj.get(key).filter(|v| !v.is_null()) {
            let n = ms(v, scale)
                .filter(|n| (0..=MAX_TIME_MS).contains(n))
                .ok_or_else(|| bad(key))?;
            return Ok(Some(n));
        }
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
                .map_or(0, |t| t.min(MAX_TIME_MS)),
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
    fn integer_times_are_exact_and_large_ones_add_up() {
        // Found by fuzzing (fuzz/, `transcript_jsonl`): a time of 1e15 s (past 2^53 ms) lost
        // precision when the next turn's start was estimated from it, and one near i64::MAX
        // overflowed. Times are bounded now, integers read exactly.
        let s = "{\"text\":\"a\",\"start_ms\":3599999999999}\n{\"text\":\"b\"}\n{\"text\":\"c\",\"start\":3600000000}\n";
        let cues = parse(s).unwrap();
        assert_eq!(cues[0].start_ms, 3_599_999_999_999);
        assert_eq!(
            cues[1].start_ms, MAX_TIME_MS,
            "an estimate stops at the limit"
        );
        assert_eq!(cues[2].start_ms, MAX_TIME_MS);
        let cues = parse("{\"text\":\"a\",\"start_ms\":9007199254740993}\n");
        assert!(cues.is_err(), "past the limit");
        let cues = parse("{\"text\":\"a\",\"start_ms\":1000000000001}\n").unwrap();
        assert_eq!(cues[0].start_ms, 1_000_000_000_001);
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
            // Past a million hours (found by fuzzing: such times lost precision or overflowed).
            ("{\"text\":\"a\",\"start\":1e300}\n", 1, "`start` must be"),
            (
                "{\"text\":\"a\",\"start_ms\":3600000000001}\n",
                1,
                "`start_ms` must be",
            ),
            (
                "{\"text\":\"a\",\"end\":9223372036854775807}\n",
                1,
                "`end` must be",
            ),
        ];
        for (input, line, needle) in cases {
            let e = parse(input).unwrap_err();
            assert_eq!(e.line, *line, "{input:?}: {e}");
            assert!(e.message.contains(needle), "{input:?}: {e}");
        }
    }
}
