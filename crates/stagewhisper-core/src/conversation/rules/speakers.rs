//! Who said it, afterwards: a call's turns given another speaker name — every turn of one
//! speaker renamed ([`SpeakerChange::Rename`], `PUT /api/calls/{id}/speakers/{label}`), or
//! turns relabelled one by one by the end-of-call pass ([`SpeakerChange::Turns`]).
//!
//! The actor loads the call's transcript rows first (after the writes in flight are
//! committed); each row that changes is rewritten and a `transcript_updated` event carries it,
//! so the views, the export and search follow. A rename is also remembered for the call: a turn
//! of the old name stored afterwards (one labelled while the rename was being decided) takes
//! the new name.

use super::Rules;
use crate::conversation::{micros_of, CoreError};
use crate::events::{Change, Event};
use crate::model::{MessageKind, MessageRow, TranscriptView};
use crate::protocol::INSIGHTS_PREFIX;
use crate::store::Op;
use std::collections::HashMap;

/// What changes in a call's transcript.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpeakerChange {
    /// Every turn whose speaker is `from` (exactly) becomes `to`'s.
    Rename { from: String, to: String },
    /// These turns (row ids) take these speakers.
    Turns(Vec<(i64, String)>),
}

impl Rules {
    /// Applies `change` to the call `call_id`, whose transcript rows the actor loaded into
    /// `rows` (by id). The number of turns changed.
    pub fn set_speakers(
        &mut self,
        call_id: &str,
        change: &SpeakerChange,
        rows: &HashMap<i64, MessageRow>,
        events: &mut Vec<Event>,
    ) -> Result<usize, CoreError> {
        let Some(call) = self.state.sessions.get(call_id) else {
            return Err(CoreError::SessionNotFound);
        };
        if call.deleted_at.is_some() {
            return Err(CoreError::SessionNotFound);
        }
        if !call.is_call {
            return Err(CoreError::NotACall);
        }
        let start = micros_of(&call.created_at);
        let insights = format!("{INSIGHTS_PREFIX}{call_id}");
        let new_name = |row: &MessageRow| -> Option<String> {
            match change {
                SpeakerChange::Rename { from, to } => {
                    (row.speaker.as_deref() == Some(from.as_str())).then(|| to.clone())
                }
                SpeakerChange::Turns(turns) => turns
                    .iter()
                    .find(|(id, _)| *id == row.id)
                    .map(|(_, s)| s.clone()),
            }
        };
        // Turns of this batch not committed yet are renamed where they wait.
        for op in &mut self.ops {
            if let Op::InsertMessage { row, .. } = op {
                if row.session_id == insights && row.kind == MessageKind::Transcript {
                    if let Some(name) = new_name(row) {
                        row.speaker = Some(name);
                    }
                }
            }
        }
        let mut ids: Vec<&i64> = rows.keys().collect();
        ids.sort_unstable();
        let mut changed = 0;
        for id in ids {
            let row = &rows[id];
            if row.session_id != insights || row.kind != MessageKind::Transcript {
                continue;
            }
            let Some(name) = new_name(row).filter(|n| row.speaker.as_ref() != Some(n)) else {
                continue;
            };
            let mut row = row.clone();
            row.speaker = Some(name);
            let change = Change::TranscriptUpdated {
                session_id: call_id.to_string(),
                transcript: TranscriptView::from_row(&row, call_id, start),
            };
            self.emit(events, call_id, change);
            self.ops.push(Op::UpdateMessage(row));
            changed += 1;
        }
        if let SpeakerChange::Rename { from, to } = change {
            let names = self.speaker_names.entry(call_id.to_string()).or_default();
            for v in names.values_mut().filter(|v| *v == from) {
                v.clone_from(to);
            }
            names.insert(from.clone(), to.clone());
        }
        Ok(changed)
    }

    /// The name a new turn of `call_id` stored as `speaker` takes (a renamed speaker's).
    pub(super) fn renamed_speaker(&self, call_id: &str, speaker: Option<String>) -> Option<String> {
        let names = self.speaker_names.get(call_id);
        speaker.map(|s| names.and_then(|n| n.get(&s)).cloned().unwrap_or(s))
    }
}
