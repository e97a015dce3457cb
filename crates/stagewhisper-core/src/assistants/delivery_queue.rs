//! The generic outbox: delivers pending entries through the active kind, one at a time, oldest
//! first (a call's prelude before its first transcript turn). It knows no transport.
//!
//! Reliability rules (the same for every kind):
//! - the task id is recorded (`set_delivery(Pending, task_id)`) before the first attempt and
//!   reused for every automatic retry and after a restart, so the assistant's dedupe (by task
//!   id) makes a resend harmless;
//! - [`Attempt::RetryAfter`]: retried with backoff (the entry stays pending and carries a note
//!   saying why);
//! - [`Attempt::Delivered`] / [`Attempt::Duplicate`]: `sent`;
//! - [`Attempt::Held`]: stays pending, skipped until the kind settles or releases it (see
//!   `held`); a restart offers it again;
//! - [`Attempt::Failed`]: the entry fails with the kind's code and sentence; only a user retry
//!   gives it a new task id.

use super::{AssistantContext, Assistants, Attempt, Outgoing};
use crate::assistants::state::{PreludeRecord, PreludeState};
use crate::backoff::{Backoff, Retries};
use crate::conversation::{Conversation, CoreError, DeliveryState, DeliveryUpdate};
use crate::events::Change;
use crate::model::{MessageKind, MessageRow, SessionView};
use crate::protocol::INSIGHTS_PREFIX;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

/// Timing of the generic outbox.
#[derive(Debug, Clone, Copy)]
pub struct OutboxTiming {
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// Smallest gap between two sends to the same assistant session.
    pub min_session_gap: Duration,
}

/// One thing to send (or settle).
#[derive(Debug)]
enum Job {
    Prelude {
        call_id: String,
        task_id: String,
        title: Option<String>,
    },
    Row(MessageRow),
    CallEnded {
        call_id: String,
        task_id: String,
    },
    /// A transcript turn whose call ended too long ago for a reply to be shown.
    Expire(MessageRow),
}

fn job_key(job: &Job) -> String {
    match job {
        Job::Prelude { call_id, .. } => format!("prelude:{call_id}"),
        Job::CallEnded { call_id, .. } => format!("call_end:{call_id}"),
        Job::Row(r) | Job::Expire(r) => format!("row:{}", r.id),
    }
}

/// What happened to a job.
enum Outcome {
    Done,
    Retry(Option<Duration>),
}

/// The text of a transcript turn as most assistants want it: `Speaker: text`.
pub fn transcript_text(speaker: Option<&str>, text: &str) -> String {
    match speaker.filter(|s| !s.is_empty()) {
        Some(sp) => format!("{sp}: {text}"),
        None => text.to_string(),
    }
}

pub(crate) async fn run(a: Assistants) {
    let ctx = a.context().clone();
    let s = a.timing();
    let mut retries = Retries::new(Backoff::doubling(s.backoff_initial, s.backoff_max));
    // Per entry: the note last written on it while retrying (to write each change once).
    let mut notes: HashMap<String, &'static str> = HashMap::new();
    // Per assistant session: when something was last sent to it.
    let mut last_sent: HashMap<String, Instant> = HashMap::new();
    loop {
        if ctx.shutdown.is_triggered() {
            break;
        }
        // Arm the wake-up before looking, so nothing slips between the scan and the wait.
        let woken = ctx.wake.notified();
        if !a.active().is_configured() {
            if !until_shutdown(&ctx, woken).await {
                break;
            }
            continue;
        }
        let job = match next_job(&a).await {
            Ok(j) => j,
            Err(e) => {
                tracing::warn!(error = %e, "assistant outbox: cannot read pending deliveries; retrying");
                if !until_shutdown(&ctx, tokio::time::sleep(Duration::from_secs(1))).await {
                    break;
                }
                continue;
            }
        };
        let Some(job) = job else {
            if !until_shutdown(&ctx, woken).await {
                break;
            }
            continue;
        };
        let key = job_key(&job);
        tracing::debug!(job = %key, "assistant outbox: next delivery");
        let paced = match &job {
            Job::Row(row) => Some(row.session_id.clone()),
            _ => None,
        };
        if let Some(sid) = &paced {
            if !pace_session(&ctx, &last_sent, sid, s.min_session_gap).await {
                break;
            }
        }
        let outcome = tokio::select! {
            o = run_job(&a, job, &mut notes) => o,
            _ = ctx.shutdown.wait() => break,
        };
        if let Some(sid) = paced {
            note_sent(&mut last_sent, sid, s.min_session_gap);
        }
        match outcome {
            Outcome::Done => {
                retries.reset();
                notes.remove(&key);
            }
            Outcome::Retry(after) => {
                if !wait_to_retry(&ctx, &mut retries, after).await {
                    break;
                }
            }
        }
    }
    tracing::debug!("assistant outbox stopped");
}

/// Waits for `fut`; false if the app shuts down first.
async fn until_shutdown(ctx: &AssistantContext, fut: impl std::future::Future) -> bool {
    tokio::select! {
        _ = fut => true,
        _ = ctx.shutdown.wait() => false,
    }
}

/// Keeps the smallest gap between two sends to one assistant session, counted from the end
/// of the previous send (so the assistant receives them at least that far apart); false if
/// the app shuts down while waiting.
async fn pace_session(
    ctx: &AssistantContext,
    last_sent: &HashMap<String, Instant>,
    session_id: &str,
    gap: Duration,
) -> bool {
    if let Some(at) = last_sent.get(session_id) {
        let left = gap.saturating_sub(at.elapsed());
        if !left.is_zero() && !until_shutdown(ctx, tokio::time::sleep(left)).await {
            return false;
        }
    }
    true
}

/// A send to `session_id` just ended (the gap to the next one counts from now).
fn note_sent(last_sent: &mut HashMap<String, Instant>, session_id: String, gap: Duration) {
    last_sent.insert(session_id, Instant::now());
    if last_sent.len() > 1024 {
        last_sent.retain(|_, t| t.elapsed() < gap);
    }
}

/// Waits before a retry (a "retry now" cuts it short and resets the backoff); false if the app
/// shuts down first.
async fn wait_to_retry(
    ctx: &AssistantContext,
    retries: &mut Retries,
    after: Option<Duration>,
) -> bool {
    // Retry-After is honoured (up to 5 minutes), else the backoff.
    let backoff = retries.fail();
    let wait = match after {
        Some(a) => a.max(backoff).min(Duration::from_secs(300)),
        None => backoff,
    };
    tracing::debug!(
        wait_ms = wait.as_millis() as u64,
        "assistant outbox: retrying later"
    );
    let retry_now = ctx.retry_now.notified();
    tokio::select! {
        _ = tokio::time::sleep(wait) => {},
        _ = retry_now => retries.reset(),
        _ = ctx.shutdown.wait() => return false,
    }
    true
}

/// The oldest thing to send.
async fn next_job(a: &Assistants) -> Result<Option<Job>, CoreError> {
    let ctx = a.context();
    let conversation = &ctx.conversation;
    let mut rows = conversation.pending_deliveries().await?;
    let pending_preludes = ctx.read_state(|st| pending_by_age(&st.preludes));
    let pending_ends = ctx.read_state(|st| pending_by_age(&st.call_ends));
    let needs_sessions = !pending_preludes.is_empty()
        || !pending_ends.is_empty()
        || rows.iter().any(|r| r.kind == MessageKind::Transcript);
    let sessions = if needs_sessions {
        let sessions = conversation.sessions().await?;
        // The pending rows again, read after the sessions: a call seen ended has every turn
        // stored before its end among them, so its prelude is never skipped, nor its end sent,
        // while a turn of it is still to go.
        rows = conversation.pending_deliveries().await?;
        sessions
    } else {
        Vec::new()
    };
    // Entries a kind holds wait for it (they still count as pending for their call).
    let pending: Vec<(i64, Option<&str>)> =
        rows.iter().map(|r| (r.id, r.task_id.as_deref())).collect();
    let held = ctx.held_among(&pending);
    let transcript_pending = |call: &str| {
        let sid = format!("{INSIGHTS_PREFIX}{call}");
        rows.iter().any(|r| r.session_id == sid)
    };
    if let Some(job) = next_prelude(ctx, pending_preludes, &sessions, &transcript_pending) {
        return Ok(Some(job));
    }
    let now_ms = ctx.clock.now_ms();
    let grace = conversation.settings().insights_grace_ms;
    let ends_waiting: Vec<(String, String)> = pending_ends
        .into_iter()
        .filter(|(call_id, _)| !transcript_pending(call_id))
        .collect();
    for row in rows {
        if held.contains(&row.id) {
            continue;
        }
        let job = match row.kind {
            MessageKind::User => Some(Job::Row(row)),
            MessageKind::Transcript => transcript_job(ctx, row, &sessions, now_ms, grace),
            _ => None,
        };
        if job.is_some() {
            return Ok(job);
        }
    }
    Ok(next_call_end(ctx, ends_waiting, &sessions))
}

/// A call's pending once-only records (call id, task id), oldest first.
fn pending_by_age(records: &BTreeMap<String, PreludeRecord>) -> Vec<(String, String)> {
    let mut v: Vec<_> = records
        .iter()
        .filter(|(_, p)| p.state == PreludeState::Pending)
        .map(|(k, p)| (p.created_ms, k.clone(), p.task_id.clone()))
        .collect();
    v.sort();
    v.into_iter().map(|(_, k, t)| (k, t)).collect()
}

/// The first pending prelude whose call is visible; a prelude of a call that ended with nothing
/// left to send is skipped.
fn next_prelude(
    ctx: &AssistantContext,
    pending_preludes: Vec<(String, String)>,
    sessions: &[SessionView],
    transcript_pending: &impl Fn(&str) -> bool,
) -> Option<Job> {
    for (call_id, task_id) in pending_preludes {
        match sessions.iter().find(|s| s.session_id == call_id) {
            // Not visible yet (or deleted: `session_deleted` forgets the record): wait.
            None => continue,
            Some(s) if s.ended_at.is_some() && !transcript_pending(&call_id) => {
                ctx.set_prelude_state(&call_id, PreludeState::Skipped)
            }
            Some(s) => {
                return Some(Job::Prelude {
                    call_id,
                    task_id,
                    title: s.title.clone(),
                })
            }
        }
    }
    None
}

/// What to do with a pending transcript turn: its call's prelude first, an expiry if the call
/// ended too long ago, else the turn; `None` if its call was deleted.
fn transcript_job(
    ctx: &AssistantContext,
    row: MessageRow,
    sessions: &[SessionView],
    now_ms: i64,
    grace: i64,
) -> Option<Job> {
    let call_id = row
        .session_id
        .strip_prefix(INSIGHTS_PREFIX)
        .unwrap_or_default()
        .to_string();
    // Deleted: its rows go with it.
    let call = sessions.iter().find(|s| s.session_id == call_id)?;
    // The prelude first: made now if the call has none yet, or pending because it was made
    // (by the watcher, when the call was created) after this round read the pending ones.
    ctx.ensure_prelude(&call_id);
    let pending_prelude = ctx.read_state(|st| {
        let p = st.preludes.get(&call_id);
        let pending = p.filter(|p| p.state == PreludeState::Pending);
        pending.map(|p| p.task_id.clone())
    });
    if let Some(task_id) = pending_prelude {
        return Some(Job::Prelude {
            call_id,
            task_id,
            title: call.title.clone(),
        });
    }
    let ended_long_ago = call
        .ended_at
        .as_deref()
        .and_then(crate::protocol::parse_rfc3339)
        .is_some_and(|t| t.timestamp_millis() + grace < now_ms);
    if ended_long_ago {
        return Some(Job::Expire(row));
    }
    Some(Job::Row(row))
}

/// The first "call ended" record whose call is settled (prelude and every stored turn); a
/// record of a deleted call is skipped.
fn next_call_end(
    ctx: &AssistantContext,
    ends_waiting: Vec<(String, String)>,
    sessions: &[SessionView],
) -> Option<Job> {
    // "The call ended" goes after the call's prelude and every stored turn were settled.
    for (call_id, task_id) in ends_waiting {
        if sessions.iter().all(|s| s.session_id != call_id) {
            ctx.set_call_end_state(&call_id, PreludeState::Skipped); // deleted
            continue;
        }
        let prelude_pending = ctx.read_state(|st| {
            st.preludes
                .get(&call_id)
                .is_some_and(|p| p.state == PreludeState::Pending)
        });
        if prelude_pending {
            continue;
        }
        return Some(Job::CallEnded { call_id, task_id });
    }
    None
}

async fn run_job(a: &Assistants, job: Job, notes: &mut HashMap<String, &'static str>) -> Outcome {
    let ctx = a.context();
    if matches!(job, Job::Prelude { .. } | Job::CallEnded { .. }) {
        // A notice's task id is committed before its first attempt, so a restart resends it
        // under the same id.
        ctx.state_saved().await;
    }
    match job {
        Job::Prelude {
            call_id,
            task_id,
            title,
        } => {
            let entry = Outgoing::Prelude {
                session_id: format!("{INSIGHTS_PREFIX}{call_id}"),
                call_id: call_id.clone(),
                task_id,
                title,
            };
            let refused = "the call's prelude was refused; its transcript is sent without it";
            deliver_call_record(a, &entry, refused, |state| {
                ctx.set_prelude_state(&call_id, state)
            })
            .await
        }
        Job::CallEnded { call_id, task_id } => {
            let entry = Outgoing::CallEnded {
                session_id: format!("{INSIGHTS_PREFIX}{call_id}"),
                call_id: call_id.clone(),
                task_id,
            };
            let refused = "the end of the call was not delivered";
            deliver_call_record(a, &entry, refused, |state| {
                ctx.set_call_end_state(&call_id, state)
            })
            .await
        }
        Job::Expire(row) => {
            let msg = format!(
                "Not sent: the call ended more than {} s before the assistant could be reached.",
                ctx.conversation.settings().insights_grace_ms / 1000
            );
            match ctx
                .conversation
                .set_delivery(
                    row.id,
                    DeliveryUpdate {
                        state: DeliveryState::Failed,
                        task_id: None,
                        error: Some(("call_ended".into(), msg)),
                    },
                )
                .await
            {
                Ok(()) | Err(CoreError::MessageNotFound) => Outcome::Done,
                Err(e) => storage_retry(e),
            }
        }
        Job::Row(row) => deliver_row(a, row, notes).await,
    }
}

async fn deliver_row(
    a: &Assistants,
    row: MessageRow,
    notes: &mut HashMap<String, &'static str>,
) -> Outcome {
    let conversation = &a.context().conversation;
    // The task id first: on disk before the assistant can see it.
    let task_id = match record_task_id(conversation, &row).await {
        Ok(t) => t,
        Err(outcome) => return outcome,
    };
    let entry = row_entry(&row, &task_id);
    let kind = a.active();
    let epoch = a.context().held_epoch();
    match kind.deliver(&entry).await {
        Attempt::Held(how) => {
            let held = a.context().hold(row.id, &task_id, epoch);
            tracing::info!(row = row.id, task_id = %task_id, session_id = %row.session_id, kind = kind.kind(), how, held, "held by the assistant kind");
            // (A note of an earlier retry stays until the kind settles it: writing the row
            // here could undo a settlement that came first.)
            Outcome::Done
        }
        attempt @ (Attempt::Delivered(_) | Attempt::Duplicate) => {
            let how = match attempt {
                Attempt::Delivered(how) => how,
                _ => "duplicate",
            };
            tracing::info!(row = row.id, task_id = %task_id, session_id = %row.session_id, kind = kind.kind(), how, "delivered to the assistant");
            record_sent(conversation, row.id, task_id).await
        }
        Attempt::RetryAfter {
            code,
            message,
            after,
        } => {
            note_retry(conversation, notes, row.id, &task_id, code, &message).await;
            Outcome::Retry(after)
        }
        Attempt::Failed { code, message } => {
            tracing::warn!(row = row.id, task_id = %task_id, session_id = %row.session_id, kind = kind.kind(), code, %message, "delivery failed");
            record_failed(conversation, row.id, task_id, code, message).await
        }
    }
}

/// The row's task id, a new one recorded (still pending) if it has none; `Err` if the row is
/// gone or cannot be written.
async fn record_task_id(conversation: &Conversation, row: &MessageRow) -> Result<String, Outcome> {
    if let Some(t) = row.task_id.clone() {
        return Ok(t);
    }
    let t = uuid::Uuid::new_v4().to_string();
    let update = DeliveryUpdate {
        state: DeliveryState::Pending,
        task_id: Some(t.clone()),
        error: None,
    };
    record(conversation, row.id, update).await.map(|()| t)
}

/// Records a row's delivery state: `Err(Done)` if the row was deleted meanwhile, `Err(Retry)`
/// if it cannot be written.
async fn record(
    conversation: &Conversation,
    row_id: i64,
    update: DeliveryUpdate,
) -> Result<(), Outcome> {
    match conversation.set_delivery(row_id, update).await {
        Ok(()) => Ok(()),
        Err(CoreError::MessageNotFound) => Err(Outcome::Done),
        Err(e) => Err(storage_retry(e)),
    }
}

/// The entry a row is sent as: a user's message or a transcript turn.
fn row_entry(row: &MessageRow, task_id: &str) -> Outgoing {
    let occurred_at = row.occurred_at.clone().unwrap_or(row.received_at.clone());
    match row.kind {
        MessageKind::User => Outgoing::UserMessage {
            task_id: task_id.to_string(),
            session_id: row.session_id.clone(),
            text: row.text.clone(),
            user_message_id: row.message_id.clone(),
            occurred_at,
        },
        _ => Outgoing::TranscriptTurn {
            task_id: task_id.to_string(),
            call_id: row
                .session_id
                .strip_prefix(INSIGHTS_PREFIX)
                .unwrap_or(&row.session_id)
                .to_string(),
            session_id: row.session_id.clone(),
            speaker: row.speaker.clone(),
            text: row.text.clone(),
            occurred_at,
        },
    }
}

/// Records a delivered row as sent. Sent but not recorded: the next attempt reuses the task id
/// and the assistant sees a duplicate.
async fn record_sent(conversation: &Conversation, row_id: i64, task_id: String) -> Outcome {
    let update = DeliveryUpdate {
        state: DeliveryState::Sent,
        task_id: Some(task_id),
        error: None,
    };
    record(conversation, row_id, update)
        .await
        .err()
        .unwrap_or(Outcome::Done)
}

/// Notes on a pending row why it is not delivered yet (once per reason).
async fn note_retry(
    conversation: &Conversation,
    notes: &mut HashMap<String, &'static str>,
    row_id: i64,
    task_id: &str,
    code: &'static str,
    message: &str,
) {
    let key = format!("row:{row_id}");
    if notes.get(&key) != Some(&code) {
        notes.insert(key, code);
        let note = format!("Not delivered yet: {message}");
        let _ = conversation
            .set_delivery(
                row_id,
                DeliveryUpdate {
                    state: DeliveryState::Pending,
                    task_id: Some(task_id.to_string()),
                    error: Some((code.to_string(), note)),
                },
            )
            .await;
    }
}

/// Records a refused row as failed with the kind's code and sentence.
async fn record_failed(
    conversation: &Conversation,
    row_id: i64,
    task_id: String,
    code: &str,
    message: String,
) -> Outcome {
    let update = DeliveryUpdate {
        state: DeliveryState::Failed,
        task_id: Some(task_id),
        error: Some((code.to_string(), message)),
    };
    record(conversation, row_id, update)
        .await
        .err()
        .unwrap_or(Outcome::Done)
}

fn storage_retry(e: CoreError) -> Outcome {
    tracing::warn!(error = %e, "assistant outbox: cannot record a delivery state; retrying");
    Outcome::Retry(Some(Duration::from_secs(1)))
}

/// One attempt at a call's once-only entry (prelude, call ended); `settle` records how it went.
async fn deliver_call_record(
    a: &Assistants,
    entry: &Outgoing,
    refused: &str,
    settle: impl FnOnce(PreludeState),
) -> Outcome {
    let kind = a.active();
    match kind.deliver(entry).await {
        // A once-only record has no row to keep pending: held is as good as sent.
        Attempt::Delivered(_) | Attempt::Duplicate | Attempt::Held(_) => {
            settle(PreludeState::Sent);
            Outcome::Done
        }
        Attempt::RetryAfter { after, .. } => Outcome::Retry(after),
        Attempt::Failed { code, message } => {
            tracing::warn!(session_id = entry.session_id(), code, %message, kind = kind.kind(), "{refused}");
            settle(PreludeState::Failed);
            Outcome::Done
        }
    }
}

/// Follows the conversation's event log: wakes the outbox for new outgoing entries, queues a
/// call's prelude when it starts, forgets deleted sessions.
pub(crate) async fn watch_conversation(a: Assistants, cursor: i64) {
    let ctx = a.context().clone();
    let store = ctx.conversation.store().clone();
    let mut sub = ctx.conversation.hub().subscribe(store, cursor);
    loop {
        let e = tokio::select! {
            e = sub.next() => e,
            _ = ctx.shutdown.wait() => break,
        };
        let e = match e {
            Ok(e) => e,
            Err(err) => {
                tracing::warn!(error = %err, "assistant outbox: event log read failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
        };
        match &e.change {
            Change::MessageAdded { message, .. } | Change::MessageUpdated { message, .. }
                if message.kind == MessageKind::User
                    && message.delivery.as_deref() == Some(DeliveryState::Pending.as_str()) =>
            {
                ctx.wake_outbox();
            }
            Change::TranscriptAdded { .. } => ctx.wake_outbox(),
            // A new call gets its prelude record (once), an ended one its "call ended" record.
            Change::SessionCreated {
                session_id,
                session,
            } if session.is_call && a.is_configured() && ctx.ensure_prelude(session_id) => {
                ctx.wake_outbox();
            }
            Change::SessionUpdated {
                session_id,
                session,
            } if session.is_call
                && session.ended_at.is_some()
                && a.is_configured()
                && ctx.ensure_call_end(session_id) =>
            {
                ctx.wake_outbox();
            }
            Change::SessionDeleted { session_id } => {
                ctx.with_state(|st| {
                    let a = st.preludes.remove(session_id).is_some();
                    let b = st.call_ends.remove(session_id).is_some();
                    ((), a || b)
                });
                for k in a.all_kinds() {
                    k.session_deleted(session_id);
                }
            }
            _ => {}
        }
    }
}
