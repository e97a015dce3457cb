//! Watched messages ([`GatewayHandle::watch`](super::GatewayHandle::watch)): sent before this
//! client started, reply still missing. Only `chat.history` is read for them, never `chat.send`.

use super::registry::{EntryState, Shared};
use super::rpc::Rpc;
use super::{GatewayError, HISTORY_LIMIT};
use crate::assistants::kinds::openclaw_gateway::frames::HistoryFinding;
use std::collections::HashMap;
use tokio::time::Instant;

/// What `chat.history` says about a watched message, applied: a reply is backfilled; a run
/// still going is followed on this connection (`sent_on`); a message the gateway does not have
/// is dropped (there is nothing to wait for, and it is never sent again from here).
pub(super) async fn found(
    shared: &Shared,
    epoch: u64,
    session_key: String,
    key: &str,
    finding: HistoryFinding,
) {
    match finding {
        HistoryFinding::Replied { text } => shared.backfill(session_key, key, text).await,
        HistoryFinding::Accepted => {
            tracing::debug!(session = %session_key, "a watched message's run still goes");
            if let Some(e) = shared.reg().entries.get_mut(key) {
                e.sent_on = epoch;
            }
        }
        HistoryFinding::Unknown => {
            tracing::info!(session = %session_key, "a watched message is not in chat.history; its reply is not looked up");
            shared.reg().finish(key);
        }
    }
}

/// Reads `chat.history` again for the watched messages whose run was seen going on this
/// connection. One watched for longer than [`WATCH_FOR`](super::WATCH_FOR) is let go (a later connect may watch it
/// again). `Err` when the connection is lost.
pub(super) async fn poll(rpc: &Rpc, shared: &Shared, epoch: u64) -> Result<(), GatewayError> {
    let now = Instant::now();
    let mut by_session: HashMap<String, Vec<String>> = HashMap::new();
    {
        let mut reg = shared.reg();
        let mut expired = Vec::new();
        for (k, e) in &reg.entries {
            if e.state != EntryState::Watch || e.sent_on != epoch {
                continue;
            }
            if e.watch_until.is_some_and(|u| u <= now) {
                expired.push(k.clone());
            } else {
                by_session
                    .entry(e.session_key.clone())
                    .or_default()
                    .push(k.clone());
            }
        }
        for k in expired {
            tracing::info!("a watched message's run went on too long; no longer looked up");
            reg.entries.remove(&k);
            reg.order.retain(|o| *o != k);
        }
    }
    for (session_key, keys) in by_session {
        let history = match rpc.history(&session_key, HISTORY_LIMIT).await {
            Ok(h) => h,
            Err(e @ (GatewayError::Offline | GatewayError::Timeout { .. })) => return Err(e),
            Err(e) => {
                tracing::warn!(code = e.code(), error = %e, "chat.history of a watched session failed");
                continue;
            }
        };
        for key in keys {
            // A live `final` may have finished it meanwhile.
            let watched = shared
                .reg()
                .entries
                .get(&key)
                .is_some_and(|e| e.state == EntryState::Watch);
            if watched {
                found(shared, epoch, session_key.clone(), &key, history.find(&key)).await;
            }
        }
    }
    Ok(())
}
