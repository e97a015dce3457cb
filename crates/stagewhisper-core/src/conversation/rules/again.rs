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
            row.replace_text(text.to_string(), fmt_time(self.clock.now()));
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

#[cfg(test)]
mod tests {
    use crate::conversation::CoreError;
    use crate::recordings::Retranscribed;

    fn turn(row: Option<i64>, text: &str, at_ms: i64) -> Retranscribed {
        Retranscribed {
            row,
            speaker: Some("Them".into()),
            at_ms,
            text: text.into(),
            language: Some("en".into()),
        }
    }

    /// On a real SQLite file: the turns change in place (ids, speakers, delivery kept), an
    /// empty text keeps the old one, a turn heard as nothing is added at its time and never
    /// sent, and one bad row changes nothing at all.
    #[tokio::test]
    async fn a_past_calls_turns_are_replaced_in_place_all_or_none() {
        let (c, _clock, _dir) = crate::conversation::tests::start(30_000).await;
        let call = c.create_session(true, None).await.unwrap().session_id;
        let a = c
            .transcript_turn_in(&call, Some("You"), "helo wrld", None)
            .await
            .unwrap();
        let b = c
            .transcript_turn_in(&call, Some("Them"), "bye", Some("en"))
            .await
            .unwrap();
        assert_eq!((a.language, b.language.as_deref()), (None, Some("en")));
        c.end_call(&call).await.unwrap();
        let later = 1_800_000_000_000 + 5_000;
        let texts = |t: &[crate::model::TranscriptView]| {
            t.iter().map(|x| x.text.clone()).collect::<Vec<_>>()
        };
        let bad = c
            .retranscribe(
                &call,
                vec![
                    turn(Some(a.id), "hello world", 0),
                    turn(Some(999_999), "x", 0),
                ],
            )
            .await;
        assert!(matches!(bad, Err(CoreError::MessageNotFound)), "{bad:?}");
        let before = c.transcript(&call).await.unwrap();
        assert_eq!(texts(&before), ["helo wrld", "bye"]);
        let n = c
            .retranscribe(
                &call,
                vec![
                    turn(Some(a.id), "hello world", 0),
                    turn(Some(b.id), " ", 0),
                    turn(None, "and more", later),
                    turn(None, "", later),
                ],
            )
            .await
            .unwrap();
        assert_eq!(n, 2);
        let after = c.transcript(&call).await.unwrap();
        assert_eq!(texts(&after), ["hello world", "bye", "and more"]);
        let (a2, b2, added) = (&after[0], &after[1], &after[2]);
        assert_eq!((a2.id, a2.speaker.as_deref()), (a.id, Some("You")));
        assert_eq!(
            (a2.delivery.clone(), a2.language.as_deref()),
            (a.delivery, Some("en"))
        );
        assert_eq!(b2, &before[1]);
        assert_eq!(
            (added.speaker.as_deref(), added.delivery.clone()),
            (Some("Them"), None)
        );
        assert_eq!(added.offset_ms, 5_000);
    }
}
