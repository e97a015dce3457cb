//! The kind's event side: what each hub event does to the conversation (replies, drafts,
//! typing, errors, permission cards), and where it goes (the chat of the prompt it answers, else
//! the live call's chat, else the most recently used chat; insights to the call's Insights tab).

use super::{Lane, Origin, Shared, KIND};
use crate::assistants::kinds::clawborrator::client::{HubEvent, HubHandle, HubStatus};
use crate::assistants::kinds::clawborrator::frames::Resolution;
use crate::conversation::hash_hex;
use crate::http::Shutdown;
use crate::protocol::{Callback, Status, INSIGHTS_PREFIX};
use serde_json::json;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Where a reply without a prompt of ours goes: the live call's chat, else the most recently
/// used chat, else the newest chat; a chat is created when there is none.
async fn fallback_chat(shared: &Shared) -> Option<String> {
    let conversation = &shared.ctx.conversation;
    let sessions = conversation.sessions().await.ok()?;
    if let Some(call) = sessions.iter().find(|s| s.is_call && s.ended_at.is_none()) {
        return Some(call.session_id.clone());
    }
    let last = shared.routes.lock().expect("routes lock").last_chat.clone();
    if let Some(l) = last.filter(|l| sessions.iter().any(|s| &s.session_id == l)) {
        return Some(l);
    }
    if let Some(s) = sessions.first() {
        return Some(s.session_id.clone());
    }
    conversation
        .create_session(false, Some("Claude Code".into()))
        .await
        .ok()
        .map(|s| s.session_id)
}

/// The origin a chat-lane event answers: by chat id, else made up for the fallback chat.
async fn origin_for(shared: &Shared, chat_id: Option<&str>) -> Option<Origin> {
    if let Some(c) = chat_id {
        if let Some(o) = shared.routes.lock().expect("routes lock").by_chat.get(c) {
            return Some(o.clone());
        }
    }
    let session_id = fallback_chat(shared).await?;
    let mut r = shared.routes.lock().expect("routes lock");
    let task_id = match chat_id {
        Some(c) => r
            .made_up
            .entry(c.to_string())
            .or_insert_with(|| uuid::Uuid::new_v4().to_string())
            .clone(),
        None => uuid::Uuid::new_v4().to_string(),
    };
    Some(Origin {
        session_id,
        user_message_id: None,
        task_id,
    })
}

pub(super) async fn run_events(
    shared: Arc<Shared>,
    lane: Lane,
    handle: HubHandle,
    mut events: mpsc::Receiver<HubEvent>,
    stop: Shutdown,
) {
    loop {
        let ev = tokio::select! {
            ev = events.recv() => ev,
            _ = stop.wait() => None,
        };
        let Some(ev) = ev else { break };
        if stop.is_triggered() {
            break;
        }
        match lane {
            Lane::Chat => chat_event(&shared, ev).await,
            Lane::Insights => insights_event(&shared, ev).await,
        }
        if let Some(ts) = handle.newest_event_ts() {
            let at = crate::clock::fmt_time(ts);
            let kept = shared
                .ctx
                .load_state(KIND)
                .and_then(|v| v["replay_cutoff"].as_str().map(str::to_string));
            if kept.as_deref() != Some(at.as_str()) {
                let _ = shared.ctx.save_state(KIND, &json!({"replay_cutoff": at}));
            }
        }
    }
}

async fn submit(shared: &Shared, cb: Callback) {
    if let Err(e) = shared.ctx.submit(cb).await {
        tracing::warn!(code = e.code(), "hub reply not stored");
    }
}

fn set_status(shared: &Shared, lane: Lane, status: HubStatus) {
    let st = match lane {
        Lane::Chat => &shared.chat,
        Lane::Insights => &shared.insights,
    };
    let online = status == HubStatus::Online;
    st.lock().expect("lane lock").status = status.clone();
    if lane == Lane::Chat {
        shared
            .ctx
            .status_event(KIND, status.code(), &status.to_string(), None);
    }
    if online {
        shared.ctx.retry_outbox_now();
    }
}

async fn chat_event(shared: &Shared, ev: HubEvent) {
    match ev {
        HubEvent::Status(s) => set_status(shared, Lane::Chat, s),
        HubEvent::Role(r) => {
            shared.chat.lock().expect("lane lock").role = Some(r.as_str().to_string());
        }
        HubEvent::Acked { local_id, chat_id } => acked(shared, local_id, chat_id),
        HubEvent::Unconfirmed { local_id } => unconfirmed(shared, local_id).await,
        HubEvent::Reply { chat_id, text, .. } => reply(shared, chat_id, text).await,
        HubEvent::Draft { chat_id, text } => draft(shared, &chat_id, &text).await,
        HubEvent::Prompt { text, author, .. } => prompt(shared, &text, author).await,
        HubEvent::Typing { tool } => typing(shared, tool).await,
        HubEvent::Idle => idle(shared).await,
        HubEvent::Permission {
            request_id,
            tool,
            input_preview,
        } => permission(shared, &request_id, &tool, &input_preview).await,
        HubEvent::PermissionResolved {
            request_id,
            decision,
            resolver,
        } => settle(shared, &request_id, decision, resolver).await,
        HubEvent::Error {
            code,
            message,
            local_id,
        } => error(shared, code, message, local_id).await,
        HubEvent::Presence { .. } | HubEvent::OpMessage { .. } => {}
    }
}

/// The hub confirmed a prompt: its origin is now found by the hub's chat id.
fn acked(shared: &Shared, local_id: i64, chat_id: Option<String>) {
    let mut r = shared.routes.lock().expect("routes lock");
    if let (Some(o), Some(c)) = (r.by_local.remove(&local_id), chat_id) {
        r.by_chat.insert(c, o);
    }
}

/// A prompt the hub never confirmed: its message errs.
async fn unconfirmed(shared: &Shared, local_id: i64) {
    let origin = shared
        .routes
        .lock()
        .expect("routes lock")
        .by_local
        .remove(&local_id);
    if let Some(o) = origin {
        let mut cb = Callback::new(o.task_id, o.session_id, Status::Errored);
        cb.user_message_id = o.user_message_id;
        cb.error_code = Some("unconfirmed".into());
        cb.error_message = Some(
            "the connection to the hub dropped before it confirmed this message; it may not have reached Claude Code".into(),
        );
        submit(shared, cb).await;
    }
}

/// A reply: a message in the chat of the prompt it answers.
async fn reply(shared: &Shared, chat_id: Option<String>, text: String) {
    let Some(o) = origin_for(shared, chat_id.as_deref()).await else {
        return;
    };
    let mut cb = Callback::new(o.task_id.clone(), o.session_id.clone(), Status::Message);
    cb.message_id = Some(format!(
        "hub:{}",
        hash_hex(&[chat_id.as_deref().unwrap_or(""), &text])
    ));
    cb.user_message_id = o.user_message_id.clone();
    cb.reply_text = Some(text);
    submit(shared, cb).await;
}

/// A reply still being written: shown with a cursor.
async fn draft(shared: &Shared, chat_id: &str, text: &str) {
    let Some(o) = origin_for(shared, Some(chat_id)).await else {
        return;
    };
    let mut cb = Callback::new(o.task_id, o.session_id, Status::Message);
    cb.user_message_id = o.user_message_id;
    cb.reply_text = Some(format!("{text}▉"));
    submit(shared, cb).await;
}

/// Someone else's prompt at the hub: a notice in the fallback chat.
async fn prompt(shared: &Shared, text: &str, author: Option<String>) {
    let Some(o) = origin_for(shared, None).await else {
        return;
    };
    let mut cb = Callback::new(o.task_id, o.session_id, Status::Notice);
    let who = author.unwrap_or_else(|| "someone".into());
    cb.message_id = Some(format!("hub-prompt:{}", hash_hex(&[&who, text])));
    cb.reply_text = Some(format!("{who} asked Claude Code: {text}"));
    submit(shared, cb).await;
}

/// The origin typing and idle go to: the current prompt's, else one made up for typing.
async fn typing_origin(shared: &Shared, current: Option<Origin>) -> Option<Origin> {
    match current {
        Some(o) => Some(o),
        None => origin_for(shared, Some("typing")).await,
    }
}

/// Claude Code is working (with the tool it uses).
async fn typing(shared: &Shared, tool: Option<String>) {
    let o = shared.routes.lock().expect("routes lock").current.clone();
    let Some(o) = typing_origin(shared, o).await else {
        return;
    };
    let mut cb = Callback::new(o.task_id, o.session_id, Status::Typing);
    cb.user_message_id = o.user_message_id;
    cb.label = tool;
    submit(shared, cb).await;
}

/// Claude Code is done: the current prompt completes.
async fn idle(shared: &Shared) {
    let o = shared.routes.lock().expect("routes lock").current.take();
    let Some(o) = typing_origin(shared, o).await else {
        return;
    };
    let mut cb = Callback::new(o.task_id, o.session_id, Status::Completed);
    cb.user_message_id = o.user_message_id;
    submit(shared, cb).await;
}

/// A permission request: a card in the current prompt's chat, else the fallback chat.
async fn permission(shared: &Shared, request_id: &str, tool: &str, preview: &str) {
    let current = shared.routes.lock().expect("routes lock").current.clone();
    let session = match current {
        Some(o) => Some(o.session_id),
        None => fallback_chat(shared).await,
    };
    let Some(session) = session else { return };
    add_card(shared, &session, request_id, tool, preview).await;
}

/// An error of the hub: the prompt it names errs, else a message in the fallback chat.
async fn error(shared: &Shared, code: String, message: String, local_id: Option<i64>) {
    let origin = local_id.and_then(|l| {
        shared
            .routes
            .lock()
            .expect("routes lock")
            .by_local
            .remove(&l)
    });
    let o = match origin {
        Some(o) => o,
        None => match origin_for(shared, None).await {
            Some(o) => o,
            None => return,
        },
    };
    let mut cb = Callback::new(o.task_id, o.session_id, Status::Errored);
    cb.user_message_id = o.user_message_id;
    cb.error_code = Some(code);
    cb.error_message = Some(message);
    submit(shared, cb).await;
}

/// A permission request of the hub becomes a card in `session`'s chat.
async fn add_card(shared: &Shared, session: &str, request_id: &str, tool: &str, preview: &str) {
    let r = shared
        .ctx
        .conversation
        .permission_request(session, request_id, tool, preview)
        .await;
    if let Err(e) = r {
        tracing::warn!(code = e.code(), "permission card not stored");
    }
}

/// A request resolved at the hub (by us, another operator, or expiry) settles its card.
async fn settle(shared: &Shared, request_id: &str, decision: Resolution, resolver: Option<String>) {
    let state = match decision {
        Resolution::Allow => "allow",
        Resolution::Deny => "deny",
        Resolution::Expired => "expired",
    };
    let r = shared
        .ctx
        .conversation
        .settle_permission(request_id, state, resolver.as_deref())
        .await;
    if let Err(e) = r {
        tracing::debug!(code = e.code(), "permission resolution for no card");
    }
}

async fn insights_event(shared: &Shared, ev: HubEvent) {
    match ev {
        // The insights session may need a permission too: a card in the call's chat.
        HubEvent::Permission {
            request_id,
            tool,
            input_preview,
        } => {
            let Some(session) = fallback_chat(shared).await else {
                return;
            };
            shared
                .routes
                .lock()
                .expect("routes lock")
                .insights_requests
                .insert(request_id.clone());
            add_card(shared, &session, &request_id, &tool, &input_preview).await;
        }
        HubEvent::PermissionResolved {
            request_id,
            decision,
            resolver,
        } => settle(shared, &request_id, decision, resolver).await,
        HubEvent::Status(s) => set_status(shared, Lane::Insights, s),
        HubEvent::Role(r) => {
            shared.insights.lock().expect("lane lock").role = Some(r.as_str().to_string());
        }
        HubEvent::Acked { local_id, chat_id } => {
            let mut r = shared.routes.lock().expect("routes lock");
            if let (Some(call), Some(c)) = (r.insights_local.remove(&local_id), chat_id) {
                r.insights_chat.insert(c, call);
            }
        }
        // Insights show final replies only.
        HubEvent::Reply { chat_id, text, .. } => {
            let call = {
                let r = shared.routes.lock().expect("routes lock");
                chat_id
                    .as_deref()
                    .and_then(|c| r.insights_chat.get(c).cloned())
                    .or_else(|| r.last_call.clone())
            };
            let Some(call) = call else { return };
            let mut cb = Callback::new(
                uuid::Uuid::new_v4().to_string(),
                format!("{INSIGHTS_PREFIX}{call}"),
                Status::Message,
            );
            cb.message_id = Some(format!(
                "hub:{}",
                hash_hex(&[chat_id.as_deref().unwrap_or(""), &text])
            ));
            cb.reply_text = Some(text);
            submit(shared, cb).await;
        }
        _ => {}
    }
}
