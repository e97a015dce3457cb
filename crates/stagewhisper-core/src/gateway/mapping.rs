//! Gateway runs → the conversation, through [`AssistantContext::submit`] (the entry point the
//! callbacks use, so the conversation rules never know which kind is active).
//!
//! Each run is identified by its idempotency key (= its `runId`): the stored user message id of
//! a chat message, the task id of an insights message. A run's events become callbacks with
//! `task_id` = the run:
//! - typing (chat phases, agent lifecycle) → `typing` with the label;
//! - a cumulative draft → `stream` text parts of the run (the draft shows in place);
//! - `final` → `message` with `message_id` `gw:<run>`: it settles the draft, and the same final
//!   read again from `chat.history` after a reconnect is a duplicate the conversation drops;
//! - `aborted` → the partial text as the settled message, then an error entry `aborted`;
//! - `error` → an error entry with the gateway's code.
//!
//! Insights: a call's prelude, then its transcript turns, go to that call's own gateway session.
//! The prelude's reply is not an insight (dropped). One run is in flight per insights session:
//! turns arriving meanwhile are batched and sent together as the next message when it ends.

use super::client::{GatewayEvent, GatewayHandle, SendOutcome};
use crate::assistants::AssistantContext;
use crate::protocol::{Callback, Status, StreamChunk};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// What a run answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RunKind {
    /// A chat message: its reply goes to the chat.
    Chat,
    /// The coaching prelude of a call: its reply is dropped.
    Prelude,
    /// Transcript turns of a call: the reply is an insight.
    Insights,
}

/// One run this kind started (or will start once the gateway is back).
#[derive(Debug, Clone)]
pub(crate) struct Run {
    /// The app's session (`<chat>` or `insights:<call>`).
    pub app_session: String,
    /// The gateway session key it was sent to.
    pub gateway_key: String,
    pub kind: RunKind,
    /// Ended (final, aborted, error).
    pub done: bool,
    /// The draft text already streamed into the conversation, and the current part number.
    streamed: String,
    part: u32,
    /// Registration order (the newest running chat run is the one Stop ends).
    seq: u64,
}

/// One insights session (one call): the run in flight and the turns waiting for it.
#[derive(Debug, Default)]
struct InsightsQueue {
    in_flight: Option<String>,
    /// (task id, text) of turns that arrived while a run was in flight.
    batch: Vec<(String, String)>,
}

/// The runs of the kind and the insights queues, shared by the deliveries and the event pump.
#[derive(Default)]
pub(crate) struct Runs {
    runs: HashMap<String, Run>,
    seq: u64,
    insights: HashMap<String, InsightsQueue>,
}

/// What [`Runs::admit_insights`] decided for a transcript turn.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Admit {
    /// Send it now (nothing in flight, or it is the run in flight being retried).
    Send,
    /// Waits in the batch for the run in flight.
    Batched,
}

impl Runs {
    /// Records a run before it is sent (idempotent: a retry keeps the state).
    pub fn register(&mut self, key: &str, app_session: &str, gateway_key: &str, kind: RunKind) {
        self.seq += 1;
        let seq = self.seq;
        self.runs.entry(key.to_string()).or_insert_with(|| Run {
            app_session: app_session.to_string(),
            gateway_key: gateway_key.to_string(),
            kind,
            done: false,
            streamed: String::new(),
            part: 0,
            seq,
        });
    }

    /// The chat run of `app_session` that has not ended (the newest), if any.
    pub fn running_in(&self, app_session: &str) -> Option<(String, Run)> {
        self.runs
            .iter()
            .filter(|(_, r)| r.app_session == app_session && !r.done && r.kind == RunKind::Chat)
            .max_by_key(|(_, r)| r.seq)
            .map(|(k, r)| (k.clone(), r.clone()))
    }

    /// A turn (or prelude) of an insights session: send now, or batch behind the run in flight.
    pub fn admit_insights(&mut self, app_session: &str, key: &str, text: &str) -> Admit {
        let q = self.insights.entry(app_session.to_string()).or_default();
        match &q.in_flight {
            Some(k) if k == key => Admit::Send,
            Some(_) => {
                if !q.batch.iter().any(|(k, _)| k == key) {
                    q.batch.push((key.to_string(), text.to_string()));
                }
                Admit::Batched
            }
            None => {
                q.in_flight = Some(key.to_string());
                Admit::Send
            }
        }
    }

    /// A run ended: for an insights session, the batch that is to go out next (its key and the
    /// turns joined), which becomes the run in flight.
    fn end(&mut self, key: &str) -> Option<(Run, Option<(String, String)>)> {
        let run = self.runs.get_mut(key)?;
        run.done = true;
        let run = run.clone();
        let mut next = None;
        if run.kind != RunKind::Chat {
            if let Some(q) = self.insights.get_mut(&run.app_session) {
                if q.in_flight.as_deref() == Some(key) {
                    q.in_flight = None;
                    if !q.batch.is_empty() {
                        let batch = std::mem::take(&mut q.batch);
                        let next_key = batch[0].0.clone();
                        let text = batch
                            .into_iter()
                            .map(|(_, t)| t)
                            .collect::<Vec<_>>()
                            .join("\n");
                        q.in_flight = Some(next_key.clone());
                        next = Some((next_key, text));
                    }
                }
            }
        }
        Some((run, next))
    }

    /// Ends a run that will not run (refused): the batch that goes out instead, registered
    /// (its key, gateway session key and text).
    pub fn end_run(&mut self, key: &str) -> Option<(String, String, String)> {
        let (run, next) = self.end(key)?;
        let (next_key, text) = next?;
        self.register(
            &next_key,
            &run.app_session,
            &run.gateway_key,
            RunKind::Insights,
        );
        Some((next_key, run.gateway_key, text))
    }

    /// A session was deleted (or a call ended and its queue is empty).
    pub fn forget_session(&mut self, app_session: &str) {
        self.runs.retain(|_, r| r.app_session != app_session);
        self.insights.remove(app_session);
    }
}

fn callback(ctx: &AssistantContext, run_key: &str, run: &Run, status: Status) -> Callback {
    let mut cb = Callback::new(run_key.to_string(), run.app_session.clone(), status);
    cb.user_message_id = (run.kind == RunKind::Chat).then(|| run_key.to_string());
    cb.occurred_at = Some(ctx.clock.now());
    cb
}

/// Turns the client's events into conversation callbacks (runs until the client stops).
pub(crate) async fn pump(
    ctx: Arc<AssistantContext>,
    runs: Arc<Mutex<Runs>>,
    handle: GatewayHandle,
    mut events: tokio::sync::mpsc::Receiver<GatewayEvent>,
    on_status: impl Fn(&super::client::GatewayStatus) + Send + 'static,
) {
    while let Some(ev) = events.recv().await {
        if let GatewayEvent::Status(st) = &ev {
            on_status(st);
            continue;
        }
        let (cbs, next) = map_event(&ctx, &runs, ev);
        for cb in cbs {
            if let Err(e) = ctx.submit(cb).await {
                tracing::warn!(error = %e, "gateway reply not stored");
            }
        }
        if let Some((key, gateway_key, text)) = next {
            // The batched turns of an insights session, now that its run ended.
            match handle.send(&gateway_key, &text, &key).await {
                Ok(SendOutcome::Queued) => {
                    tracing::debug!("insights batch waits for the gateway")
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(code = e.code(), error = %e, "insights batch not sent"),
            }
        }
    }
}

type Next = Option<(String, String, String)>;

/// One event → the callbacks to submit, and an insights batch to send next.
pub(crate) fn map_event(
    ctx: &AssistantContext,
    runs: &Mutex<Runs>,
    ev: GatewayEvent,
) -> (Vec<Callback>, Next) {
    let mut guard = runs.lock().unwrap_or_else(|p| p.into_inner());
    let runs = &mut *guard;
    let key = match &ev {
        GatewayEvent::Status(_) => return (Vec::new(), None),
        GatewayEvent::Typing { run_id, .. }
        | GatewayEvent::Draft { run_id, .. }
        | GatewayEvent::Aborted { run_id, .. }
        | GatewayEvent::Error { run_id, .. } => run_id.clone(),
        GatewayEvent::Final {
            idempotency_key, ..
        } => idempotency_key.clone(),
    };
    let Some(run) = runs.runs.get_mut(&key) else {
        tracing::debug!(run = %key, "gateway event of a run this app did not start");
        return (Vec::new(), None);
    };
    let mut out = Vec::new();
    let prelude = run.kind == RunKind::Prelude;
    let terminal = matches!(
        ev,
        GatewayEvent::Final { .. } | GatewayEvent::Aborted { .. } | GatewayEvent::Error { .. }
    );
    match ev {
        GatewayEvent::Status(_) => {}
        GatewayEvent::Typing { label, .. } => {
            if !prelude && !run.done {
                let mut cb = callback(ctx, &key, run, Status::Typing);
                cb.label = Some(label);
                out.push(cb);
            }
        }
        GatewayEvent::Draft { text, .. } => {
            if !prelude && !run.done && run.kind == RunKind::Chat {
                out.extend(draft_parts(ctx, &key, run, &text));
            }
        }
        GatewayEvent::Final { text, .. } => {
            if !prelude {
                let mut cb = callback(ctx, &key, run, Status::Message);
                cb.message_id = Some(format!("gw:{key}"));
                cb.reply_text = Some(text);
                out.push(cb);
            }
        }
        GatewayEvent::Aborted { partial, .. } => {
            if !prelude {
                if !partial.trim().is_empty() {
                    let mut cb = callback(ctx, &key, run, Status::Message);
                    cb.message_id = Some(format!("gw:{key}"));
                    cb.reply_text = Some(partial);
                    out.push(cb);
                }
                let mut cb = callback(ctx, &key, run, Status::Errored);
                cb.message_id = Some(format!("gw:{key}:aborted"));
                cb.error_code = Some("aborted".into());
                cb.error_message = Some("Stopped: the reply was cut off here.".into());
                out.push(cb);
            }
        }
        GatewayEvent::Error { code, message, .. } => {
            if !prelude {
                let mut cb = callback(ctx, &key, run, Status::Errored);
                cb.message_id = Some(format!("gw:{key}:error"));
                cb.error_code = Some(code);
                cb.error_message = Some(if message.trim().is_empty() {
                    "The OpenClaw gateway reported an error for this reply.".into()
                } else {
                    format!("The OpenClaw gateway reported an error: {message}")
                });
                out.push(cb);
            }
        }
    }
    let mut next = None;
    if terminal {
        let ended_now = runs.runs.get(&key).is_some_and(|r| !r.done);
        if ended_now {
            next = runs.end_run(&key);
        }
    }
    (out, next)
}

/// A cumulative draft → stream parts: the new tail as a delta, or (when the text is not an
/// extension of what was streamed) a new part with the whole text.
fn draft_parts(ctx: &AssistantContext, key: &str, run: &mut Run, text: &str) -> Vec<Callback> {
    let part_id = |n: u32| {
        if n == 0 {
            key.to_string()
        } else {
            format!("{key}#{n}")
        }
    };
    let mut out = Vec::new();
    let delta = if let Some(tail) = text.strip_prefix(run.streamed.as_str()) {
        tail.to_string()
    } else {
        run.part += 1;
        let mut cb = callback(ctx, key, run, Status::Stream);
        cb.chunk = Some(StreamChunk::TextStart {
            id: part_id(run.part),
        });
        out.push(cb);
        text.to_string()
    };
    if delta.is_empty() {
        return out;
    }
    let mut cb = callback(ctx, key, run, Status::Stream);
    cb.chunk = Some(StreamChunk::TextDelta {
        id: part_id(run.part),
        delta,
    });
    out.push(cb);
    run.streamed = text.to_string();
    out
}
