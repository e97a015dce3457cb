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
//! A batched turn is [`Attempt::Held`](crate::assistants::Attempt::Held): it stays pending in the
//! store until the batch's `chat.send` is taken (`sent`: its answer, or the first event of its
//! run when it waited for a reconnect) or refused (`failed`, visible and retryable); when the
//! link restarts the kind releases what it held and the outbox offers it again, and after an app
//! restart every still-pending turn is offered again — nothing batched lives only in memory.

use super::client::{GatewayError, GatewayEvent, GatewayHandle, SendOutcome};
use crate::assistants::{AssistantContext, HeldOutcome};
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
    /// The held outbox entries (task ids) this run carries, until their delivery is settled.
    held: Vec<String>,
    /// Sent before this start and looked up again: not known to run until an event says so.
    unconfirmed: bool,
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

/// Batched turns to send as one message: the run's key (the first turn's task id), the gateway
/// session, the turns joined, and the held entries it carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Batch {
    pub key: String,
    pub gateway_key: String,
    pub text: String,
    pub held: Vec<String>,
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
            held: Vec::new(),
            unconfirmed: false,
        });
    }

    /// A chat message sent before this start whose reply is missing (see `recover`): its events
    /// and backfilled reply map like any other; Stop sees it only once an event came.
    pub fn register_recovered(&mut self, key: &str, app_session: &str, gateway_key: &str) {
        if self.runs.contains_key(key) {
            return;
        }
        self.register(key, app_session, gateway_key, RunKind::Chat);
        if let Some(r) = self.runs.get_mut(key) {
            r.unconfirmed = true;
        }
    }

    /// The chat run of `app_session` that has not ended (the newest), if any.
    pub fn running_in(&self, app_session: &str) -> Option<(String, Run)> {
        self.runs
            .iter()
            .filter(|(_, r)| {
                r.app_session == app_session && !r.done && !r.unconfirmed && r.kind == RunKind::Chat
            })
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

    /// Ends a run (it ended, or will not run: refused). For an insights session: the batch
    /// that goes out next (the turns that waited, joined), registered as its run in flight.
    pub fn end_run(&mut self, key: &str) -> Option<Batch> {
        let run = self.runs.get_mut(key)?;
        run.done = true;
        let run = run.clone();
        if run.kind == RunKind::Chat {
            return None;
        }
        let q = self.insights.get_mut(&run.app_session)?;
        if q.in_flight.as_deref() != Some(key) {
            return None;
        }
        q.in_flight = None;
        if q.batch.is_empty() {
            return None;
        }
        let (held, texts): (Vec<String>, Vec<String>) =
            std::mem::take(&mut q.batch).into_iter().unzip();
        let next_key = held[0].clone();
        q.in_flight = Some(next_key.clone());
        self.register(
            &next_key,
            &run.app_session,
            &run.gateway_key,
            RunKind::Insights,
        );
        if let Some(r) = self.runs.get_mut(&next_key) {
            r.held = held.clone();
        }
        Some(Batch {
            key: next_key,
            gateway_key: run.gateway_key,
            text: texts.join("\n"),
            held,
        })
    }

    /// The held entries a run carries (once: they are settled by whoever takes them).
    pub fn take_held(&mut self, key: &str) -> Vec<String> {
        self.runs
            .get_mut(key)
            .map(|r| std::mem::take(&mut r.held))
            .unwrap_or_default()
    }

    /// The link restarted: what it had in flight for insights is gone with it. The queues and
    /// the unfinished insights runs are forgotten (the caller releases the held entries, and
    /// the outbox offers them again); chat runs stay (their replies are looked up again).
    pub fn link_restarted(&mut self) {
        self.insights.clear();
        self.runs.retain(|_, r| r.kind == RunKind::Chat || r.done);
        for r in self.runs.values_mut() {
            r.held.clear();
        }
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
        let Mapped {
            callbacks,
            next,
            settle,
        } = map_event(&ctx, &runs, ev);
        if let Some((held, how)) = settle {
            settle_held(&ctx, &held, how).await;
        }
        for cb in callbacks {
            if let Err(e) = ctx.submit(cb).await {
                tracing::warn!(error = %e, "gateway reply not stored");
            }
        }
        if let Some(batch) = next {
            // The batched turns of an insights session, now that its run ended.
            send_batch(&ctx, &runs, &handle, batch).await;
        }
    }
}

async fn settle_held(ctx: &AssistantContext, held: &[String], how: HeldOutcome) {
    if let Err(e) = ctx.settle_held(held, how).await {
        // They stay pending (and held until the next start, which offers them again).
        tracing::warn!(error = %e, "held transcript turns not settled");
    }
}

/// Sends a batch of held turns; a refused one fails them (visibly: the user can retry them)
/// and the session's next batch goes out instead.
pub(crate) async fn send_batch(
    ctx: &AssistantContext,
    runs: &Mutex<Runs>,
    handle: &GatewayHandle,
    batch: Batch,
) {
    let mut next = Some(batch);
    while let Some(b) = next.take() {
        let how = match handle.send(&b.gateway_key, &b.text, &b.key).await {
            // Sent after the reconnect: the run's first event settles them.
            Ok(SendOutcome::Queued) => {
                tracing::debug!(turns = b.held.len(), "insights batch waits for the gateway");
                continue;
            }
            Ok(_) => HeldOutcome::Sent,
            // The link stopped: the kind released what it held (offered again).
            Err(GatewayError::Stopped) => continue,
            Err(e) => {
                tracing::warn!(code = e.code(), error = %e, "insights batch refused");
                next = lock(runs).end_run(&b.key);
                HeldOutcome::Failed {
                    code: "gateway_rejected",
                    message: format!("Not sent: the OpenClaw gateway refused these turns ({e})."),
                }
            }
        };
        let held = lock(runs).take_held(&b.key);
        settle_held(ctx, &held, how).await;
    }
}

fn lock(runs: &Mutex<Runs>) -> std::sync::MutexGuard<'_, Runs> {
    runs.lock().unwrap_or_else(|p| p.into_inner())
}

/// What one event comes to.
pub(crate) struct Mapped {
    /// To submit to the conversation.
    pub callbacks: Vec<Callback>,
    /// An insights batch to send next.
    pub next: Option<Batch>,
    /// Held entries the run carried, and how they went (its first event: taken).
    pub settle: Option<(Vec<String>, HeldOutcome)>,
}

/// One event → the callbacks to submit, an insights batch to send next, held entries to settle.
pub(crate) fn map_event(ctx: &AssistantContext, runs: &Mutex<Runs>, ev: GatewayEvent) -> Mapped {
    let mut mapped = Mapped {
        callbacks: Vec::new(),
        next: None,
        settle: None,
    };
    let mut guard = lock(runs);
    let runs = &mut *guard;
    let Some(key) = run_key(&ev) else {
        return mapped;
    };
    let Some(run) = runs.runs.get_mut(&key) else {
        tracing::debug!(run = %key, "gateway event of a run this app did not start");
        return mapped;
    };
    run.unconfirmed = false;
    if !run.held.is_empty() {
        let held = std::mem::take(&mut run.held);
        mapped.settle = Some((held, held_outcome(&ev)));
    }
    let terminal = matches!(
        ev,
        GatewayEvent::Final { .. } | GatewayEvent::Aborted { .. } | GatewayEvent::Error { .. }
    );
    let out = run_callbacks(ctx, &key, run, ev);
    if terminal {
        let ended_now = runs.runs.get(&key).is_some_and(|r| !r.done);
        if ended_now {
            mapped.next = runs.end_run(&key);
        }
    }
    mapped.callbacks = out;
    mapped
}

/// The run an event belongs to (a status belongs to none).
fn run_key(ev: &GatewayEvent) -> Option<String> {
    match ev {
        GatewayEvent::Status(_) => None,
        GatewayEvent::Typing { run_id, .. }
        | GatewayEvent::Draft { run_id, .. }
        | GatewayEvent::Aborted { run_id, .. }
        | GatewayEvent::Error { run_id, .. } => Some(run_id.clone()),
        GatewayEvent::Final {
            idempotency_key, ..
        } => Some(idempotency_key.clone()),
    }
}

/// How the held entries a run carried went: failed by an error, else taken.
fn held_outcome(ev: &GatewayEvent) -> HeldOutcome {
    match ev {
        GatewayEvent::Error { code, message, .. } => HeldOutcome::Failed {
            code: "gateway_error",
            message: format!(
                "The OpenClaw gateway could not answer these turns ({code}: {message})."
            ),
        },
        _ => HeldOutcome::Sent,
    }
}

/// The callbacks a run's event becomes (none for a prelude's run).
fn run_callbacks(
    ctx: &AssistantContext,
    key: &str,
    run: &mut Run,
    ev: GatewayEvent,
) -> Vec<Callback> {
    let mut out = Vec::new();
    let prelude = run.kind == RunKind::Prelude;
    match ev {
        GatewayEvent::Status(_) => {}
        GatewayEvent::Typing { label, .. } => {
            if !prelude && !run.done {
                let mut cb = callback(ctx, key, run, Status::Typing);
                cb.label = Some(label);
                out.push(cb);
            }
        }
        GatewayEvent::Draft { text, .. } => {
            if !prelude && !run.done && run.kind == RunKind::Chat {
                out.extend(draft_parts(ctx, key, run, &text));
            }
        }
        GatewayEvent::Final { text, .. } => {
            if !prelude {
                let mut cb = callback(ctx, key, run, Status::Message);
                cb.message_id = Some(format!("gw:{key}"));
                cb.reply_text = Some(text);
                out.push(cb);
            }
        }
        GatewayEvent::Aborted { partial, .. } => {
            if !prelude {
                out.extend(aborted(ctx, key, run, partial));
            }
        }
        GatewayEvent::Error { code, message, .. } => {
            if !prelude {
                let mut cb = callback(ctx, key, run, Status::Errored);
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
    out
}

/// An aborted run: its partial text as the settled message (if any), then an error entry.
fn aborted(ctx: &AssistantContext, key: &str, run: &Run, partial: String) -> Vec<Callback> {
    let mut out = Vec::new();
    if !partial.trim().is_empty() {
        let mut cb = callback(ctx, key, run, Status::Message);
        cb.message_id = Some(format!("gw:{key}"));
        cb.reply_text = Some(partial);
        out.push(cb);
    }
    let mut cb = callback(ctx, key, run, Status::Errored);
    cb.message_id = Some(format!("gw:{key}:aborted"));
    cb.error_code = Some("aborted".into());
    cb.error_message = Some("Stopped: the reply was cut off here.".into());
    out.push(cb);
    out
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
