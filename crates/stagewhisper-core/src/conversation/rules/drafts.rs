//! Live drafts: a reply being streamed, shown in place and settled into the final message.
//!
//! Two kinds, one shape:
//! - `task:<task_id>` — AI-SDK stream parts (`text-start`/`text-delta`) of one task;
//! - `edit:<scope>` — edit-style streaming, where each `message` carries the whole text so far
//!   with a trailing cursor `▉` (the Hermes adapter does this after a slow tool step).
//!
//! Pure text logic; the rules ([`super`]) turn what changes into rows and events.

use crate::protocol::{clean_text, StreamChunk};
use std::collections::HashSet;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum DraftKey {
    Task(String),
    Edit(String),
}

impl DraftKey {
    pub fn encode(&self) -> String {
        match self {
            DraftKey::Task(t) => format!("task:{t}"),
            DraftKey::Edit(s) => format!("edit:{s}"),
        }
    }

    pub fn decode(s: &str) -> Option<DraftKey> {
        if let Some(t) = s.strip_prefix("task:") {
            Some(DraftKey::Task(t.to_string()))
        } else {
            s.strip_prefix("edit:")
                .map(|sc| DraftKey::Edit(sc.to_string()))
        }
    }
}

#[derive(Debug, Clone)]
pub struct Draft {
    pub session_id: String,
    pub scope: String,
    pub task_id: String,
    pub user_message_id: Option<String>,
    /// The stored row while the draft is visible.
    pub row_id: Option<i64>,
    /// The text the row holds now.
    pub shown: String,
    /// Where the draft sorts (its first chunk's time).
    pub sort_key: i64,
    pub occurred_at: Option<String>,
    pub received_at: String,
    pub last_activity_ms: i64,
    part: Option<String>,
    part_text: String,
    prev_text: String,
    settled_parts: HashSet<String>,
    /// A draft resumed after a restart: its part ids are unknown, the next part continues it.
    resumed: bool,
    /// The stream sent `finish` (and no `start` since): its text is complete, a cursor left on
    /// it or on its final message is a leftover.
    finished: bool,
}

impl Draft {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        session_id: &str,
        scope: &str,
        task_id: &str,
        user_message_id: Option<&str>,
        sort_key: i64,
        occurred_at: Option<String>,
        received_at: String,
        now_ms: i64,
    ) -> Draft {
        Draft {
            session_id: session_id.to_string(),
            scope: scope.to_string(),
            task_id: task_id.to_string(),
            user_message_id: user_message_id.map(str::to_string),
            row_id: None,
            shown: String::new(),
            sort_key,
            occurred_at,
            received_at,
            last_activity_ms: now_ms,
            part: None,
            part_text: String::new(),
            prev_text: String::new(),
            settled_parts: HashSet::new(),
            resumed: false,
            finished: false,
        }
    }

    /// A draft row found open at start-up.
    pub fn resumed(mut self, row_id: i64, text: String) -> Draft {
        self.row_id = Some(row_id);
        self.shown = text.clone();
        self.prev_text = text;
        self.resumed = true;
        self
    }

    /// `true` while the draft has text that no message has settled yet.
    pub fn is_open(&self) -> bool {
        self.part.is_some() || self.resumed || !self.part_text.is_empty()
    }

    /// `true` once the stream of an open draft has finished: only its final message is still
    /// to come.
    pub fn is_finished(&self) -> bool {
        self.finished
    }

    /// What the draft shows: the current part, unless it is still a prefix of the previous
    /// part (a re-stream of the same text), in which case the longer previous text stays.
    pub fn display(&self) -> String {
        let cur = clean_text(&self.part_text);
        let prev = clean_text(&self.prev_text);
        if !prev.is_empty() && prev.len() > cur.len() && prev.starts_with(&cur) {
            prev
        } else {
            cur
        }
    }

    /// Applies a stream part; returns `true` when the displayed text may have changed.
    pub fn apply_chunk(&mut self, chunk: &StreamChunk, now_ms: i64) -> bool {
        self.last_activity_ms = now_ms;
        match chunk {
            StreamChunk::TextStart { id } => {
                if self.settled_parts.contains(id) || self.part.as_deref() == Some(id.as_str()) {
                    return false;
                }
                self.begin_part(id);
                false
            }
            StreamChunk::TextDelta { id, delta } => {
                if self.settled_parts.contains(id) {
                    return false;
                }
                if self.part.as_deref() != Some(id.as_str()) {
                    // A delta without its text-start (lost or reordered): start the part here.
                    self.begin_part(id);
                }
                self.part_text.push_str(delta);
                true
            }
            StreamChunk::Start => {
                self.finished = false;
                false
            }
            StreamChunk::Finish => {
                self.finished = true;
                false
            }
            StreamChunk::TextEnd { .. } => false,
            StreamChunk::Other(_) => false,
        }
    }

    fn begin_part(&mut self, id: &str) {
        if let Some(old) = self.part.take() {
            // The old part is superseded, not settled: its late chunks are ignored too.
            self.settled_parts.insert(old);
        }
        if !self.part_text.is_empty() || self.resumed {
            self.prev_text = if self.resumed {
                std::mem::take(&mut self.prev_text)
            } else {
                std::mem::take(&mut self.part_text)
            };
        }
        self.part_text.clear();
        self.part = Some(id.to_string());
        self.resumed = false;
    }

    /// Replaces the whole text (edit-style drafts).
    pub fn set_text(&mut self, text: &str, now_ms: i64) {
        self.last_activity_ms = now_ms;
        self.part_text = text.to_string();
        self.resumed = false;
    }

    /// A message settled this draft: later chunks of its parts are ignored, a new part starts
    /// a new draft.
    pub fn settle(&mut self) {
        if let Some(p) = self.part.take() {
            self.settled_parts.insert(p);
        }
        self.part_text.clear();
        self.prev_text.clear();
        self.shown.clear();
        self.row_id = None;
        self.resumed = false;
        self.finished = false;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn draft() -> Draft {
        Draft::new("s", "u", "t", Some("u"), 1, None, "now".into(), 0)
    }

    fn delta(id: &str, d: &str) -> StreamChunk {
        StreamChunk::TextDelta {
            id: id.into(),
            delta: d.into(),
        }
    }

    #[test]
    fn deltas_accumulate_and_late_chunks_after_settle_are_ignored() {
        let mut d = draft();
        d.apply_chunk(&StreamChunk::Start, 0);
        d.apply_chunk(&StreamChunk::TextStart { id: "p1".into() }, 0);
        assert!(d.apply_chunk(&delta("p1", "\n\nStub "), 0));
        assert!(d.apply_chunk(&delta("p1", "reply"), 0));
        assert_eq!(d.display(), "Stub reply");
        assert!(d.is_open());
        d.settle();
        assert!(!d.is_open());
        assert!(!d.apply_chunk(&delta("p1", " please"), 0));
        assert!(!d.apply_chunk(&StreamChunk::TextEnd { id: "p1".into() }, 0));
        assert_eq!(d.display(), "");
        // A new part after settlement is a new draft.
        d.apply_chunk(&StreamChunk::TextStart { id: "p2".into() }, 0);
        d.apply_chunk(&delta("p2", "second"), 0);
        assert_eq!(d.display(), "second");
    }

    #[test]
    fn a_new_part_replaces_but_a_restream_does_not_flicker() {
        let mut d = draft();
        d.apply_chunk(&delta("p1", "Hello world"), 0);
        d.apply_chunk(&StreamChunk::TextStart { id: "p2".into() }, 0);
        d.apply_chunk(&delta("p2", "Hello"), 0);
        assert_eq!(d.display(), "Hello world", "prefix of the previous part");
        d.apply_chunk(&delta("p2", " world, again"), 0);
        assert_eq!(d.display(), "Hello world, again");
        d.apply_chunk(&StreamChunk::TextStart { id: "p3".into() }, 0);
        d.apply_chunk(&delta("p3", "Different"), 0);
        assert_eq!(d.display(), "Different", "does not extend: replaces");
        // Chunks of a superseded part are ignored.
        assert!(!d.apply_chunk(&delta("p2", "zzz"), 0));
        assert_eq!(d.display(), "Different");
    }

    #[test]
    fn repeated_start_and_finish_are_harmless() {
        let mut d = draft();
        d.apply_chunk(&StreamChunk::TextStart { id: "p1".into() }, 0);
        d.apply_chunk(&delta("p1", "abc"), 0);
        d.apply_chunk(&StreamChunk::TextStart { id: "p1".into() }, 0);
        d.apply_chunk(&StreamChunk::Start, 0);
        d.apply_chunk(&StreamChunk::Finish, 0);
        d.apply_chunk(&StreamChunk::Finish, 0);
        assert_eq!(d.display(), "abc");
    }

    #[test]
    fn resumed_drafts_continue_with_the_next_part() {
        let mut d = draft().resumed(7, "Partial answer".into());
        assert!(d.is_open());
        assert_eq!(d.display(), "Partial answer");
        d.apply_chunk(&delta("p9", "Partial"), 0);
        assert_eq!(d.display(), "Partial answer");
        d.apply_chunk(&delta("p9", " answer, finished"), 0);
        assert_eq!(d.display(), "Partial answer, finished");
    }

    #[test]
    fn finish_marks_the_stream_complete_until_the_next_start() {
        let mut d = draft();
        d.apply_chunk(&StreamChunk::Start, 0);
        d.apply_chunk(&delta("p1", "Hello \u{2589}"), 0);
        assert!(!d.is_finished());
        d.apply_chunk(&StreamChunk::TextEnd { id: "p1".into() }, 0);
        assert!(!d.is_finished(), "a part ended, not the stream");
        d.apply_chunk(&StreamChunk::Finish, 0);
        assert!(d.is_finished() && d.is_open());
        assert_eq!(d.display(), "Hello");
        d.apply_chunk(&StreamChunk::Start, 0);
        assert!(!d.is_finished(), "a new stream of the task");
        d.apply_chunk(&StreamChunk::Finish, 0);
        d.settle();
        assert!(!d.is_finished());
    }

    #[test]
    fn keys_round_trip() {
        for k in [DraftKey::Task("t-1".into()), DraftKey::Edit("um:1".into())] {
            assert_eq!(DraftKey::decode(&k.encode()), Some(k));
        }
        assert_eq!(DraftKey::decode("x"), None);
    }
}
