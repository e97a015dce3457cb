//! Replies that finished while the app was down: after the client gets online (the first
//! connect after a start, and every reconnect), the chat messages recently delivered to the
//! gateway whose reply is not in the conversation are handed to the client to look up
//! ([`GatewayHandle::watch`]). A reply found in `chat.history` comes back as a backfilled
//! `final` through the normal mapping: its message id `gw:<key>` makes it land exactly once.
//! A message is never sent again from here.
//!
//! Bounded: user messages `sent` in the last [`RECOVER_WINDOW`], at most [`RECOVER_LIMIT`] (the
//! newest), among the newest [`RECOVER_SCAN`] stored entries.

use super::client::GatewayHandle;
use super::mapping::Runs;
use crate::assistants::AssistantContext;
use crate::clock::fmt_time;
use std::sync::Mutex;

/// How far back a delivered message's reply is looked up.
pub const RECOVER_WINDOW: chrono::Duration = chrono::Duration::hours(24);
/// At most this many messages are looked up per connect.
pub const RECOVER_LIMIT: i64 = 50;
/// Among the newest this many stored entries.
pub const RECOVER_SCAN: i64 = 5000;

/// Hands the recent unanswered messages to the client; `gateway_key` maps an app session to
/// its gateway session key.
pub(crate) async fn recover(
    ctx: &AssistantContext,
    runs: &Mutex<Runs>,
    handle: &GatewayHandle,
    gateway_key: impl Fn(&str) -> String,
) {
    let since = fmt_time(ctx.clock.now() - RECOVER_WINDOW);
    let rows = match ctx
        .conversation
        .store()
        .sent_without_reply(&since, RECOVER_SCAN, RECOVER_LIMIT)
        .await
    {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list the messages whose reply is missing");
            return;
        }
    };
    if !rows.is_empty() {
        tracing::info!(
            messages = rows.len(),
            "looking up replies missing since the last start"
        );
    }
    for row in rows {
        let Some(key) = row.message_id else { continue };
        let gw = gateway_key(&row.session_id);
        runs.lock()
            .unwrap_or_else(|p| p.into_inner())
            .register_recovered(&key, &row.session_id, &gw);
        if handle.watch(&gw, &key).await.is_err() {
            return; // the client stopped
        }
    }
}
