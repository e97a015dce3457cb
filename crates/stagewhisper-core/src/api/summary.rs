//! "Summarise this call": a user message in the call's chat asking the assistant for a summary.
//! The chat session and the call's `insights:` session are different sessions on the assistant
//! side, so the message carries the transcript itself (the newest part if it is too long).

use crate::answers::MAX_USER_TEXT as MAX_TEXT;
use crate::model::{SessionView, TranscriptView};

/// The request text for a call and its transcript.
pub fn request_text(call: &SessionView, turns: &[TranscriptView]) -> String {
    let title = call
        .title
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(|t| format!(" \"{t}\""))
        .unwrap_or_default();
    let minutes = turns
        .last()
        .map(|t| (t.offset_ms + 59_999) / 60_000)
        .unwrap_or(0);
    let head = format!(
        "Please summarise this call{title}: the key points, decisions, open questions and action \
         items (with owners and dates when they were said), as short bullet points."
    );
    let lines: Vec<String> = turns
        .iter()
        .map(|t| {
            let at = format!(
                "[{:02}:{:02}]",
                t.offset_ms / 60_000,
                (t.offset_ms / 1000) % 60
            );
            match t.speaker.as_deref() {
                Some(s) => format!("{at} {s}: {}", t.text),
                None => format!("{at} {}", t.text),
            }
        })
        .collect();
    // Keep the newest lines that fit.
    let budget = MAX_TEXT - head.chars().count() - 200;
    let mut kept: Vec<&str> = Vec::new();
    let mut used = 0usize;
    for l in lines.iter().rev() {
        let n = l.chars().count() + 1;
        if used + n > budget {
            break;
        }
        used += n;
        kept.push(l);
    }
    kept.reverse();
    let omitted = lines.len() - kept.len();
    let mut text = format!(
        "{head}\n\nTranscript ({} turns, about {minutes} min):\n",
        turns.len()
    );
    if omitted > 0 {
        text.push_str(&format!(
            "[the first {omitted} turns are left out for length]\n"
        ));
    }
    text.push_str(&kept.join("\n"));
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn turn(i: i64, speaker: Option<&str>, text: &str) -> TranscriptView {
        TranscriptView {
            id: i,
            session_id: "c".into(),
            speaker: speaker.map(str::to_string),
            text: text.into(),
            received_at: String::new(),
            offset_ms: i * 61_000,
            task_id: None,
            delivery: None,
            delivery_error: None,
            language: None,
        }
    }

    fn call() -> SessionView {
        SessionView {
            session_id: "c".into(),
            kind: "chat".into(),
            is_call: true,
            title: Some("Acme".into()),
            created_at: String::new(),
            ended_at: None,
            insights_session_id: None,
        }
    }

    #[test]
    fn includes_the_transcript() {
        let t = request_text(
            &call(),
            &[turn(0, Some("Ana"), "Hi"), turn(1, None, "Budget is 50k")],
        );
        assert!(t.starts_with("Please summarise this call \"Acme\""));
        assert!(t.contains("[00:00] Ana: Hi\n[01:01] Budget is 50k"), "{t}");
        assert!(t.contains("(2 turns, about 2 min)"));
    }

    #[test]
    fn keeps_the_newest_turns_within_the_limit() {
        let turns: Vec<_> = (0..400)
            .map(|i| turn(i, Some("S"), &"word ".repeat(20)))
            .collect();
        let t = request_text(&call(), &turns);
        assert!(t.chars().count() <= MAX_TEXT);
        assert!(t.contains("turns are left out for length"));
        assert!(t.ends_with(&format!("S: {}", "word ".repeat(20))));
    }
}
