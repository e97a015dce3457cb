//! Delivery: on each connection a send worker makes sure the gateway has every open message
//! exactly once. It reconciles with `chat.history` first (a reply that finished meanwhile is
//! backfilled, a message already recorded is not sent again), then sends with `chat.send`.

use super::registry::{EntryState, Shared};
use super::rpc::Rpc;
use super::{watched, GatewayError, GatewayEvent, SendOutcome, HISTORY_LIMIT, WATCH_POLL};
use crate::assistants::kinds::openclaw_gateway::frames::{ChatSendParams, History, HistoryFinding};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

/// A message for the send worker (`key`: its idempotency key, registered already), and where
/// its outcome goes.
pub(super) struct SendJob {
    pub(super) key: String,
    pub(super) reply: oneshot::Sender<Result<SendOutcome, GatewayError>>,
}

/// Sends messages on one connection, in order. First it reconciles every open message with
/// `chat.history` (backfilling replies, re-sending only what the gateway does not have), then
/// it takes new messages; the first message of a session on this connection is checked against
/// that session's history too.
pub(super) async fn send_worker(
    rpc: Rpc,
    shared: Arc<Shared>,
    epoch: u64,
    open: Vec<String>,
    mut jobs: mpsc::Receiver<SendJob>,
) {
    let mut checked: HashMap<String, (Instant, History)> = HashMap::new();
    let lost = |r: &Result<SendOutcome, GatewayError>| {
        matches!(
            r,
            Err(GatewayError::Offline) | Err(GatewayError::Timeout { .. })
        )
    };
    let mut online = true;
    for key in open {
        let r = deliver(&rpc, &shared, epoch, &mut checked, &key).await;
        if lost(&r) {
            tracing::info!("the connection was lost while reconciling; the rest waits");
            online = false;
            break;
        }
    }
    // Runs until the connection's job sender is dropped; once the connection is lost the
    // remaining messages stay queued for the next connection.
    let mut poll = tokio::time::interval_at(Instant::now() + WATCH_POLL, WATCH_POLL);
    poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let job = tokio::select! {
            job = jobs.recv() => match job {
                Some(job) => job,
                None => break,
            },
            _ = poll.tick(), if online => {
                if watched::poll(&rpc, &shared, epoch).await.is_err() {
                    online = false;
                }
                continue;
            }
        };
        if !online {
            let _ = job.reply.send(Ok(SendOutcome::Queued));
            continue;
        }
        let r = deliver(&rpc, &shared, epoch, &mut checked, &job.key).await;
        if lost(&r) {
            online = false;
            let _ = job.reply.send(Ok(SendOutcome::Queued));
        } else {
            let _ = job.reply.send(r);
        }
    }
}

/// Make sure the gateway has message `key` exactly once.
async fn deliver(
    rpc: &Rpc,
    shared: &Shared,
    epoch: u64,
    checked: &mut HashMap<String, (Instant, History)>,
    key: &str,
) -> Result<SendOutcome, GatewayError> {
    let known = || SendOutcome::AlreadyKnown {
        run_id: key.to_string(),
    };
    let Some((session_key, text, state)) = still_open(shared, epoch, key) else {
        return Ok(known());
    };
    let finding = find_in_history(rpc, checked, &session_key, state, key).await?;
    if state == EntryState::Watch {
        watched::found(shared, epoch, session_key, key, finding).await;
        return Ok(known());
    }
    match finding {
        HistoryFinding::Replied { text: reply } => {
            shared.backfill(session_key, key, reply).await;
            return Ok(known());
        }
        HistoryFinding::Accepted => {
            tracing::info!(session = %session_key, "message already in chat.history; not sent again");
            if let Some(e) = shared.reg().entries.get_mut(key) {
                e.state = EntryState::Sent;
                e.sent_on = epoch;
            }
            return Ok(known());
        }
        HistoryFinding::Unknown if state == EntryState::Sent => {
            // Taken on an earlier connection, and gone from history: the gateway lost it
            // (restart before it was recorded). Sending it again is the only way to a reply.
            tracing::warn!(session = %session_key, "a sent message is missing from chat.history; sending it again");
        }
        HistoryFinding::Unknown => {}
    }
    chat_send(rpc, shared, epoch, session_key, key, text).await
}

/// The session, text and state of message `key`; `None` when there is nothing to do (finished,
/// or taken on this very connection).
fn still_open(shared: &Shared, epoch: u64, key: &str) -> Option<(String, String, EntryState)> {
    let reg = shared.reg();
    match reg.entries.get(key) {
        Some(e) if e.state == EntryState::Sent && e.sent_on == epoch => None,
        Some(e) => Some((e.session_key.clone(), e.text.clone(), e.state)),
        None => None,
    }
}

/// What the session's `chat.history` says about `key`. The history is read once per session
/// on a connection (`checked`), and again for a watched message once that read is older than
/// half a [`WATCH_POLL`].
async fn find_in_history(
    rpc: &Rpc,
    checked: &mut HashMap<String, (Instant, History)>,
    session_key: &str,
    state: EntryState,
    key: &str,
) -> Result<HistoryFinding, GatewayError> {
    // A watched message may have been answered since the session was read on this connection.
    let stale = |at: &Instant| state == EntryState::Watch && at.elapsed() > WATCH_POLL / 2;
    if checked.get(session_key).is_none_or(|(at, _)| stale(at)) {
        let h = rpc.history(session_key, HISTORY_LIMIT).await?;
        checked.insert(session_key.to_string(), (Instant::now(), h));
    }
    Ok(checked[session_key].1.find(key))
}

/// `chat.send` of a message the gateway does not have. Taken: its run is followed. Refused: the
/// message is finished and a [`GatewayEvent::Error`] reported.
async fn chat_send(
    rpc: &Rpc,
    shared: &Shared,
    epoch: u64,
    session_key: String,
    key: &str,
    text: String,
) -> Result<SendOutcome, GatewayError> {
    let res = rpc
        .call(
            "chat.send",
            &ChatSendParams {
                session_key: session_key.clone(),
                message: text,
                deliver: false,
                idempotency_key: key.to_string(),
                attachments: vec![],
            },
        )
        .await;
    match res {
        Ok(v) => Ok(taken(shared, epoch, session_key, key, &v)),
        Err(GatewayError::Rejected {
            method,
            code,
            message,
        }) => {
            shared.reg().finish(key);
            shared
                .emit(GatewayEvent::Error {
                    session_key,
                    run_id: key.to_string(),
                    code: code.clone(),
                    message: message.clone(),
                })
                .await;
            Err(GatewayError::Rejected {
                method,
                code,
                message,
            })
        }
        Err(e) => Err(e),
    }
}

/// The gateway took message `key` (`answer`: `chat.send`'s payload): it is sent on this
/// connection, and the events of its run are mapped.
fn taken(
    shared: &Shared,
    epoch: u64,
    session_key: String,
    key: &str,
    answer: &Value,
) -> SendOutcome {
    let run_id = answer
        .get("runId")
        .and_then(Value::as_str)
        .unwrap_or(key)
        .to_string();
    let status = answer.get("status").and_then(Value::as_str).unwrap_or("");
    let mut reg = shared.reg();
    if let Some(e) = reg.entries.get_mut(key) {
        e.state = EntryState::Sent;
        e.sent_on = epoch;
    }
    reg.runs
        .insert(run_id.clone(), (session_key, key.to_string()));
    if status == "started" {
        SendOutcome::Started { run_id }
    } else {
        SendOutcome::AlreadyKnown { run_id }
    }
}
