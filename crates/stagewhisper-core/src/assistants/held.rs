//! Entries a kind holds ([`Attempt::Held`](super::Attempt::Held)): taken by the kind for a later
//! send (the gateway kind batches an insights session's turns behind its run in flight), but
//! still `pending` in the store until the kind says how they went.
//!
//! - The outbox records a held entry here (by row id, with its task id) and skips it when it
//!   looks for the next entry: it does not block later entries and is not retried on a timer.
//! - The kind settles held entries by task id with [`AssistantContext::settle_held`] (`sent`, or
//!   `failed` with a stable code and a sentence: the user sees it and can retry), or gives them
//!   all back with [`AssistantContext::release_held`] (its link restarted and lost what it
//!   held): the outbox offers them again.
//! - Nothing of this is on disk: after a restart (or when the active kind changes) every entry
//!   still pending is offered again, and the kind rebuilds what it held.

use super::AssistantContext;
use crate::conversation::{CoreError, DeliveryState, DeliveryUpdate};
use std::collections::{HashMap, HashSet};

/// How held entries went.
#[derive(Debug, Clone, PartialEq)]
pub enum HeldOutcome {
    /// The assistant took them.
    Sent,
    /// Final: they fail with a stable code and a sentence the user can act on (a user retry
    /// sends them again under a new task id).
    Failed { code: &'static str, message: String },
}

/// The held entries (row id → task id), and a counter of releases: an entry whose attempt
/// started before a release is not held (the kind that took it has let go since).
#[derive(Debug, Default)]
pub(crate) struct HeldSet {
    epoch: u64,
    rows: HashMap<i64, String>,
}

impl AssistantContext {
    fn held(&self) -> std::sync::MutexGuard<'_, HeldSet> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The release counter, read before an attempt.
    pub(crate) fn held_epoch(&self) -> u64 {
        self.held().epoch
    }

    /// Records a held entry; `false` when a release came since `epoch` (it is offered again).
    pub(crate) fn hold(&self, row_id: i64, task_id: &str, epoch: u64) -> bool {
        let mut h = self.held();
        if h.epoch != epoch {
            return false;
        }
        h.rows.insert(row_id, task_id.to_string());
        true
    }

    /// Held row ids among `pending` (row id, task id); forgets the entries no longer pending
    /// under the same task id (settled, retried by the user, deleted).
    pub(crate) fn held_among(&self, pending: &[(i64, Option<&str>)]) -> HashSet<i64> {
        let mut h = self.held();
        let still: HashMap<i64, Option<&str>> = pending.iter().copied().collect();
        h.rows
            .retain(|id, task| still.get(id).is_some_and(|t| *t == Some(task.as_str())));
        h.rows.keys().copied().collect()
    }

    /// Settles held entries by task id (entries no longer pending under that task id are left
    /// alone). Answers how many were settled.
    pub async fn settle_held(
        &self,
        task_ids: &[String],
        how: HeldOutcome,
    ) -> Result<usize, CoreError> {
        if task_ids.is_empty() {
            return Ok(0);
        }
        let wanted: HashSet<&str> = task_ids.iter().map(String::as_str).collect();
        let rows = self.conversation.pending_deliveries().await?;
        let mut n = 0;
        for row in rows
            .iter()
            .filter(|r| r.task_id.as_deref().is_some_and(|t| wanted.contains(t)))
        {
            let (state, error) = match &how {
                HeldOutcome::Sent => (DeliveryState::Sent, None),
                HeldOutcome::Failed { code, message } => (
                    DeliveryState::Failed,
                    Some((code.to_string(), message.clone())),
                ),
            };
            let update = DeliveryUpdate {
                state,
                task_id: row.task_id.clone(),
                error,
            };
            match self.conversation.set_delivery(row.id, update).await {
                Ok(()) => n += 1,
                Err(CoreError::MessageNotFound) => {}
                Err(e) => return Err(e),
            }
            self.held().rows.remove(&row.id);
        }
        match &how {
            HeldOutcome::Sent => {
                tracing::info!(entries = n, "held entries delivered to the assistant")
            }
            HeldOutcome::Failed { code, message } => {
                tracing::warn!(entries = n, code, %message, "held entries failed")
            }
        }
        Ok(n)
    }

    /// Gives every held entry back to the outbox: it offers them again.
    pub fn release_held(&self) {
        let n = {
            let mut h = self.held();
            h.epoch += 1;
            let n = h.rows.len();
            h.rows.clear();
            n
        };
        if n > 0 {
            tracing::info!(entries = n, "held entries offered again");
        }
        self.wake_outbox();
    }
}
