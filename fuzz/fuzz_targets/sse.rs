//! The `/v1/events` SSE reader (`incoming::sse::SseParser`): bytes from the assistant, split into
//! body frames anywhere. Never panics; the events do not depend on where the frames were split
//! (the same as the whole stream at once, and as one byte at a time); every event's data goes
//! through what `incoming::events::ingest` reads before the conversation (task id, then the body).
#![no_main]
use libfuzzer_sys::fuzz_target;
use stagewhisper_core::assistants::kinds::incoming::sse::{SseEvent, SseParser};
use stagewhisper_core::protocol;

fn feed_all(pieces: &[&[u8]]) -> Vec<SseEvent> {
    let mut p = SseParser::new();
    let mut out = Vec::new();
    for piece in pieces {
        out.extend(p.feed(piece));
    }
    out
}

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, body)) = data.split_first() else {
        return;
    };
    // The first byte picks up to 7 cut points, spread by the next bytes.
    let cuts = (ctl % 8) as usize;
    let (cut_bytes, body) = body.split_at(cuts.min(body.len()));
    let mut at: Vec<usize> = cut_bytes
        .iter()
        .map(|b| (*b as usize * body.len()) / 255)
        .collect();
    at.sort_unstable();
    let mut pieces = Vec::new();
    let mut from = 0;
    for a in at {
        pieces.push(&body[from..a]);
        from = a;
    }
    pieces.push(&body[from..]);
    let whole = feed_all(&[body]);
    assert_eq!(feed_all(&pieces), whole, "split at {pieces:?}");
    if body.len() <= 256 {
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        assert_eq!(feed_all(&bytes), whole, "one byte at a time");
    }
    for ev in &whole {
        assert!(ev.id.as_deref().is_none_or(|id| !id.is_empty()));
        assert!(ev.event.as_deref() != Some("message"));
        // `ingest`: the task id comes from the body.
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(ev.data.as_bytes()) else {
            continue;
        };
        let Some(t) = v.get("task_id").and_then(|t| t.as_str()) else {
            continue;
        };
        let Ok(t) = protocol::parse_task_id(t) else {
            continue;
        };
        if let Ok(cb) = protocol::parse_callback(&t, ev.data.as_bytes()) {
            stagewhisper_fuzz::check_callback(&t, &cb);
        }
    }
});
