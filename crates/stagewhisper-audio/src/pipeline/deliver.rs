//! A turn's final into the transcript, in order: stored at once when no earlier turn waits,
//! queued behind the backlog otherwise; a "You" final that echoes the other side is dropped;
//! the engine's failure keeps the turn's audio in the backlog. Every turn ends with one final
//! event (its outcome).

use super::finals::Order;
use super::shared::{Shared, Stored};
use crate::backlog::{Turn, TurnMeta};
use crate::engine::EngineError;
use stagewhisper_core::audio::Channel;
use std::sync::{Arc, MutexGuard};

/// A turn that skipped its recognizer: straight to the backlog.
pub(crate) fn keep(shared: &Shared, turn: Turn) {
    shared.recorder.turn(&turn.meta, &turn.samples);
    let o = shared.finals.order();
    shared.backlog.push(turn);
    drop(o);
    shared.finals.kick();
}

/// A turn's final (or the engine's failure), from its recognizer.
pub(crate) fn deliver(
    shared: &Arc<Shared>,
    mut meta: TurnMeta,
    turn_id: &str,
    result: Result<String, EngineError>,
    samples: Vec<i16>,
) {
    let finals = &shared.finals;
    let is_them = meta.channel == Channel::System;
    if let Ok(text) = &result {
        if meta.channel == Channel::Mic && finals.echo.is_echo(&meta, text, &samples, true) {
            tracing::info!(
                seq = meta.seq,
                "a \"You\" turn echoed the other side: dropped"
            );
            shared.publish_final(&meta, turn_id, "", "echo");
            finals.in_flight(meta.seq, false);
            return;
        }
    }
    // Kept when its call keeps its audio (also when nothing was recognised in it: another model
    // may hear words there).
    shared.recorder.turn(&meta, &samples);
    let outcome = {
        let mut o = finals.order();
        o.in_flight.remove(&meta.seq);
        let earlier_waits = !shared.backlog.is_empty();
        match result {
            Ok(text) if text.trim().is_empty() => "empty",
            Ok(text) if !earlier_waits => match store_now(shared, o, &mut meta, turn_id, &text) {
                Some(outcome) => outcome,
                None => return,
            },
            Ok(text) => {
                if is_them {
                    finals.echo.them_done(turn_id, Some((&meta, &text)));
                }
                queue_text(shared, &mut meta, &text);
                "queued"
            }
            Err(e) => {
                tracing::warn!(seq = meta.seq, error = %e, "the engine failed on a turn: kept in the backlog");
                shared.backlog.push(Turn {
                    meta: meta.clone(),
                    samples,
                });
                "queued"
            }
        }
    };
    if is_them {
        finals.echo.them_done(turn_id, None);
    }
    shared.publish_final(&meta, turn_id, "", outcome);
    finals.kick();
    shared.changed();
}

/// Stores a final while no earlier turn waits (`order` held until it is stored or queued):
/// `None` once it is stored and its final event published, otherwise the outcome to publish.
fn store_now(
    shared: &Shared,
    order: MutexGuard<'_, Order>,
    meta: &mut TurnMeta,
    turn_id: &str,
    text: &str,
) -> Option<&'static str> {
    match shared.store(meta, text) {
        Stored::Done => {
            if meta.channel == Channel::System {
                shared.finals.echo.them_done(turn_id, Some((meta, text)));
            }
            shared.publish_final(meta, turn_id, text, "stored");
            drop(order);
            shared.finals.kick();
            shared.changed();
            None
        }
        Stored::Gone(why) => {
            tracing::warn!(
                seq = meta.seq,
                why,
                "a turn could not be stored: its call is gone"
            );
            shared.count_gone(meta);
            Some("gone")
        }
        Stored::Later(why) => {
            tracing::warn!(seq = meta.seq, why, "a turn waits in the backlog");
            queue_text(shared, meta, text);
            Some("queued")
        }
    }
}

/// A final's text queued behind the backlog (its audio is not needed any more).
fn queue_text(shared: &Shared, meta: &mut TurnMeta, text: &str) {
    meta.text = Some(text.trim().to_string());
    shared.backlog.push(Turn {
        meta: meta.clone(),
        samples: Vec::new(),
    });
}
