//! The backlog's drainer ([`drain`]): a thread of its own for the app's life that transcribes
//! the turns waiting in the backlog, in order, with whatever engine is current, retrying with a
//! backoff, and stores each turn exactly once (a turn being stored when the app stopped is
//! looked for in the transcript first).

use super::shared::{CallState, Shared, Stored};
use crate::backlog::{Turn, TurnMeta};
use crate::engine::Heard;
use stagewhisper_core::audio::Channel;
use stagewhisper_core::backoff::Backoff;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Retries of a backlog turn: from 1 s, doubling, at most 15 s.
const BACKOFF: Backoff = Backoff::doubling(Duration::from_secs(1), Duration::from_secs(15));

/// When the first waiting turn is tried again, and the engine's generation then (a new engine
/// does not wait).
type RetryAt = Option<(Instant, u64)>;

/// The backlog's drainer: transcribes and stores the waiting turns in order, for the app's
/// life (until `shared.stopping`).
pub(crate) fn drain(shared: Arc<Shared>) {
    let finals = &shared.finals;
    let mut retry_at: RetryAt = None;
    while !shared.stopping.load(Ordering::SeqCst) {
        let seen = finals.kicks();
        let Some((turn, sending)) = shared.backlog.first() else {
            retry_at = None;
            finals.wait_kick(seen, Duration::from_secs(5));
            continue;
        };
        let mut meta = turn.meta.clone();
        if waited(&shared, &meta, retry_at, seen) {
            continue;
        }
        if !call_takes_it(&shared, &meta) {
            continue;
        }
        let Some((text, language)) = text_of(&shared, &turn, sending, &mut retry_at) else {
            continue;
        };
        if language.is_some() {
            meta.language = language;
        }
        retry_at = None;
        let text = text.trim().to_string();
        if text.is_empty()
            || (meta.channel == Channel::Mic
                && finals.echo.is_echo(&meta, &text, &turn.samples, false))
        {
            shared.backlog.remove(meta.seq);
            shared.changed();
            continue;
        }
        store_turn(&shared, &meta, &text, &mut retry_at);
    }
}

/// Whether the first waiting turn may not go yet: then waits for a kick (or until it may).
fn waited(shared: &Shared, meta: &TurnMeta, retry_at: RetryAt, seen: u64) -> bool {
    let finals = &shared.finals;
    // An earlier turn still being recognised goes first.
    if finals.first_in_flight().is_some_and(|s| s < meta.seq) {
        finals.wait_kick(seen, Duration::from_millis(500));
        return true;
    }
    // Waiting for the engine (a new engine does not wait).
    if let Some((at, generation)) = retry_at {
        if Instant::now() < at && generation == shared.engine_generation() {
            finals.wait_kick(seen, at - Instant::now());
            return true;
        }
    }
    false
}

/// Whether the turn's call still takes it. A call deleted meanwhile takes its audio with it; an
/// ended one takes no more turns: either way the turn is forgotten.
fn call_takes_it(shared: &Shared, meta: &TurnMeta) -> bool {
    match shared.call_state(&meta.call_id) {
        CallState::Live | CallState::Unknown => true,
        CallState::Ended => {
            tracing::warn!(
                seq = meta.seq,
                "a backlog turn's call has ended: it cannot be added"
            );
            shared.count_gone(meta);
            shared.backlog.remove(meta.seq);
            shared.changed();
            false
        }
        CallState::Deleted => {
            shared.backlog.remove(meta.seq);
            shared.changed();
            false
        }
    }
}

/// The text of a waiting turn: the one it was being stored with when the app stopped (`None`
/// if it was stored then: it is forgotten), the one kept with it, or the engine's now (with
/// the language the engine heard, when it tells it; a kept text's language is in its meta).
fn text_of(
    shared: &Shared,
    turn: &Turn,
    sending: Option<String>,
    retry_at: &mut RetryAt,
) -> Option<(String, Option<String>)> {
    let meta = &turn.meta;
    match (sending, &meta.text) {
        (Some(t), _) => {
            if shared.already_stored(meta, &t) {
                tracing::info!(
                    seq = meta.seq,
                    "a backlog turn was stored before the restart"
                );
                shared.backlog.remove(meta.seq);
                shared.changed();
                return None;
            }
            Some((t, None))
        }
        (None, Some(t)) => Some((t.clone(), None)),
        (None, None) => transcribe(shared, turn, retry_at).map(|h| (h.text, h.language)),
    }
}

/// The engine's text of a turn kept with its audio, with its language when the engine tells
/// it; `None` when the engine fails (`retry_at` then says when to try again).
fn transcribe(shared: &Shared, turn: &Turn, retry_at: &mut RetryAt) -> Option<Heard> {
    let meta = &turn.meta;
    let generation = shared.engine_generation();
    let r = shared.engine().and_then(|e| {
        let mut u = e.begin()?;
        u.push(&turn.samples)?;
        u.finish_heard()
    });
    shared.engine_outcome(r.as_ref().map(|_| ()));
    match r {
        Ok(t) => Some(t),
        Err(e) => {
            // Every failure is retried, also an answer that is not a transcription (a
            // misconfigured server answers every turn so): the turn is never given up while it
            // is kept, and the status says what fails, so the user can fix the server or
            // choose another engine.
            let tries = shared.backlog.failed(meta.seq);
            let wait = BACKOFF.delay(tries);
            tracing::info!(seq = meta.seq, tries, retry_in = ?wait, error = %e, "backlog: the engine failed");
            *retry_at = Some((Instant::now() + wait, generation));
            shared.changed();
            None
        }
    }
}

/// Stores a waiting turn's text in order (marked as being stored first, so that a restart
/// meanwhile does not store it twice) and forgets the turn, unless storing must wait.
fn store_turn(shared: &Shared, meta: &TurnMeta, text: &str, retry_at: &mut RetryAt) {
    if let Err(e) = shared.backlog.sending(meta.seq, text) {
        tracing::warn!(seq = meta.seq, error = %e, "cannot mark a backlog turn as being stored");
    }
    let o = shared.finals.order();
    let stored = shared.store(meta, text);
    match stored {
        Stored::Done => {
            shared.backlog.remove(meta.seq);
            drop(o);
            if meta.channel == Channel::System {
                shared.finals.echo.them_done("", Some((meta, text)));
            }
        }
        Stored::Gone(why) => {
            tracing::warn!(
                seq = meta.seq,
                why,
                "a backlog turn could not be stored: its call is gone"
            );
            shared.count_gone(meta);
            shared.backlog.remove(meta.seq);
        }
        Stored::Later(why) => {
            drop(o);
            tracing::warn!(
                seq = meta.seq,
                why,
                "a backlog turn could not be stored yet"
            );
            *retry_at = Some((
                Instant::now() + Duration::from_secs(2),
                shared.engine_generation(),
            ));
        }
    }
    shared.changed();
}
