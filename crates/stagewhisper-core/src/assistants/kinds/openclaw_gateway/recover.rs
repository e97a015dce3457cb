//! Replies that finished while the app was down: after the client gets online (the first
//! connect after a start, and every reconnect), the chat messages recently delivered to the
//! gateway whose reply is not in the conversation are handed to the client to look up
//! ([`GatewayHandle::watch`]). A reply found in `chat.history` comes back as a backfilled
//! `final` through the normal mapping: its message id `gw:<key>` makes it land exactly once.
//! A message is never sent again from here.
//!
//! Bounded: user messages `sent` in the last [`RECOVER_WINDOW`], at most [`RECOVER_LIMIT`] (the
//! newest), with ids within [`RECOVER_SCAN`] of the newest stored one.

use super::client::GatewayHandle;
use super::mapping::Runs;
use crate::assistants::AssistantContext;
use crate::clock::fmt_time;
use std::sync::Mutex;

/// How far back a delivered message's reply is looked up.
pub const RECOVER_WINDOW: chrono::Duration = chrono::Duration::hours(24);
/// At most this many messages are looked up per connect.
pub const RECOVER_LIMIT: i64 = 50;
/// With ids within this many of the newest stored one (messages and events share the ids).
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

#[cfg(test)]
mod tests {
    use crate::clock::Clock;
    use crate::conversation::{Conversation, DeliveryState, DeliveryUpdate};
    use crate::protocol::parse_callback;
    use serde_json::json;

    async fn reply(c: &Conversation, body: serde_json::Value) {
        let task = uuid::Uuid::new_v4().to_string();
        c.submit(parse_callback(&task, body.to_string().as_bytes()).unwrap())
            .await
            .unwrap();
    }

    async fn sent(c: &Conversation, sid: &str, text: &str) -> (i64, String) {
        let m = c.user_message(sid, text).await.unwrap();
        let update = DeliveryUpdate {
            state: DeliveryState::Sent,
            task_id: Some(uuid::Uuid::new_v4().to_string()),
            error: None,
        };
        c.set_delivery(m.id, update).await.unwrap();
        (m.id, m.message_id.unwrap())
    }

    /// The store's query behind the look-up, on a real SQLite file.
    #[tokio::test]
    async fn only_recent_sent_messages_without_a_settled_reply_are_looked_up() {
        let (c, clock, _dir) = crate::conversation::tests::start(60_000).await;
        let store = c.store().clone();
        let s = c.create_session(false, None).await.unwrap().session_id;
        let (_, old) = sent(&c, &s, "yesterday").await;
        clock.advance_ms(25 * 3600 * 1000);
        let since = crate::clock::fmt_time(clock.now() - super::RECOVER_WINDOW);
        let (_, answered) = sent(&c, &s, "answered").await;
        reply(
            &c,
            json!({"session_id": s, "status": "message", "message_id": "r1",
            "user_message_id": answered, "reply_text": "done"}),
        )
        .await;
        let (_, errored) = sent(&c, &s, "errored").await;
        reply(
            &c,
            json!({"session_id": s, "status": "errored", "user_message_id": errored,
            "error_code": "E1", "error_message": "It broke"}),
        )
        .await;
        let (_, drafted) = sent(&c, &s, "only a draft").await;
        reply(
            &c,
            json!({"session_id": s, "status": "stream", "user_message_id": drafted,
            "chunk": {"type": "text-start", "id": "p1"}}),
        )
        .await;
        reply(
            &c,
            json!({"session_id": s, "status": "stream", "user_message_id": drafted,
            "chunk": {"type": "text-delta", "id": "p1", "delta": "Half"}}),
        )
        .await;
        let (_, waiting) = sent(&c, &s, "waiting").await;
        let pending = c.user_message(&s, "not sent yet").await.unwrap();
        let gone = c.create_session(false, None).await.unwrap().session_id;
        sent(&c, &gone, "in a deleted chat").await;
        c.delete_session(&gone).await.unwrap();

        let rows = store.sent_without_reply(&since, 5000, 50).await.unwrap();
        let ids: Vec<&str> = rows
            .iter()
            .filter_map(|r| r.message_id.as_deref())
            .collect();
        assert_eq!(ids, [waiting.as_str(), drafted.as_str()], "newest first");
        assert!(!ids.contains(&old.as_str()) && !ids.contains(&answered.as_str()));
        assert!(!ids.contains(&errored.as_str()));
        assert!(!ids.contains(&pending.message_id.as_deref().unwrap()));
        let rows = store.sent_without_reply(&since, 5000, 1).await.unwrap();
        assert_eq!(rows.len(), 1, "at most `limit`");
        let rows = store.sent_without_reply(&since, 1, 50).await.unwrap();
        assert!(rows.is_empty(), "only among the newest `scan` entries");
    }
}
