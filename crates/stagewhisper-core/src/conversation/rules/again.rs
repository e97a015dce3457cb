//! "Transcribe again" ([`crate::recordings`]): a past call's turns get the text a new model
//! heard, in one batch (one transaction: all of them or none). Each stored turn keeps its id,
//! speaker, time and delivery state, so the assistant is told nothing new; the views get
//! `transcript_updated`. A turn heard live in which the first engine recognised nothing, and in
//! which the new model hears words, is added at the time it was said (`transcript_added`),
//! never to be sent (no delivery state).

use super::Rules;
use crate::clock::fmt_time;
use crate::conversation::{micros_of, CoreError};
use crate::events::{Change, Event};
use crate::model::{MessageKind, MessageRow, TranscriptView};
use crate::protocol::INSIGHTS_PREFIX;
use crate::recordings::Retranscribed;
use crate::store::Op;
use std::collections::HashMap;

impl Rules {
    /// Replaces the text (and language) of the call's turns and adds the new ones; `rows`: the
    /// turns as stored (the actor loads them). Every row must be one of the call's turns, or
    /// nothing changes. Answers the number of turns changed or added.
    pub fn retranscribe(
        &mut self,
        call_id: &str,
        rows: &HashMap<i64, MessageRow>,
        turns: Vec<Retranscribed>,
        events: &mut Vec<Event>,
    ) -> Result<u64, CoreError> {
        let Some(call) = self.live_chat(call_id) else {
            return Err(CoreError::SessionNotFound);
        };
        if !call.is_call {
            return Err(CoreError::NotACall);
        }
        let start = micros_of(&call.created_at);
        let insights = format!("{INSIGHTS_PREFIX}{call_id}");
        let mut changed = Vec::new();
        let mut added = Vec::new();
        for t in turns {
            let text = t.text.trim();
            let Some(id) = t.row else {
                if !text.is_empty() {
                    added.push(t);
                }
                continue;
            };
            let row = rows
                .get(&id)
                .filter(|r| r.kind == MessageKind::Transcript && r.session_id == insights)
                .ok_or(CoreError::MessageNotFound)?;
            if text.is_empty() || (row.text == text && row.language == t.language) {
                continue;
            }
            let mut row = row.clone();
            row.text = text.to_string();
            row.language = t.language;
            changed.push(row);
        }
        let n = (changed.len() + added.len()) as u64;
        for row in changed {
            let change = Change::TranscriptUpdated {
                session_id: call_id.to_string(),
                transcript: TranscriptView::from_row(&row, call_id, start),
            };
            self.emit(events, call_id, change);
            self.ops.push(Op::UpdateMessage(row));
        }
        for t in added {
            let mut row = self.new_row(&insights, MessageKind::Transcript, t.text.trim().into());
            let at = chrono::DateTime::from_timestamp_millis(t.at_ms).unwrap_or_default();
            row.sort_key = at.timestamp_micros().max(start);
            row.received_at = fmt_time(at);
            row.speaker = t.speaker;
            row.language = t.language;
            let change = Change::TranscriptAdded {
                session_id: call_id.to_string(),
                transcript: TranscriptView::from_row(&row, call_id, start),
            };
            self.emit(events, call_id, change);
            self.ops.push(Op::InsertMessage { row, logged: false });
        }
        Ok(n)
    }
}
