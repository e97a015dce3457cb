//! The assistant kind `byo`: the desktop is the BYO relay the assistant's plugin pairs with.
//!
//! - `PUT /api/assistant {"kind":"byo"}` selects it (no settings). `POST /api/assistant/pairing`
//!   makes a one-use code; the plugin's `pair/complete` (see [`super::relay`]) creates the
//!   integration: its id, a relay token (32 random bytes), a fresh desktop X25519 key pair, the
//!   plugin's public key and the dialect (which prefix it paired under), saved 0600.
//! - Deliveries (the generic outbox): a final transcript turn is stored in `byo_turns` and
//!   reported delivered; one `live_analysis` job per call is in flight at a time, the turns that
//!   arrive meanwhile go into the next one. A user message is a sealed
//!   `chat_message_dispatched`; "call ended" is a `session_summary` job with the whole
//!   transcript. Everything sent is sealed with the integration's envelope key, except the
//!   capability probe (no call content) and the connection test.
//! - Results come back on the relay routes, are stored on first receipt (`byo_jobs`) and go into
//!   the conversation through [`AssistantContext::submit`] like any callback: a valid insight, a
//!   chat reply, the summary as an assistant message, or a plain-words error entry.
//! - `GET /api/assistant`: `{kind, status (waiting_for_pairing|online|offline), detail,
//!   integration_id, host_label, provider_kind, display_model, last_heartbeat_at, capabilities,
//!   last_test, e2ee: true}`.

use super::crypto::{content_type, EnvelopeKey, KeyPair, Meta};
use super::jobs::{self, Jobs, NewJob};
use super::pairing::{self, Code, Integration};
use super::replay::ReplayGuard;
use super::schema;
use crate::assistants::{AssistantContext, KindError};
use crate::clock::fmt_time;
use crate::guard::AuthGuard;
use axum::response::sse::Event;
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::{mpsc, Notify, OnceCell};

pub const KIND: &str = "byo";
/// A heartbeat older than this (or, before the first one, a stream opened longer ago) is stale.
pub const HEARTBEAT_STALE_MS: i64 = 75_000;
/// Deadlines by purpose.
pub const LIVE_DEADLINE_MS: i64 = 90_000;
pub const SUMMARY_DEADLINE_MS: i64 = 10 * 60_000;
pub const PROBE_DEADLINE_MS: i64 = 2 * 60_000;
pub const CHAT_DEADLINE_MS: i64 = 10 * 60_000;
/// An SSE line longer than this goes as `{"_truncated": true}` (the plugin fetches the job).
pub const MAX_EVENT_BYTES: usize = 64 * 1024;
/// How often open jobs are checked against their deadline (and the status re-evaluated).
const SWEEP: Duration = Duration::from_millis(250);

/// The paired integration with its envelope key.
pub(crate) struct Paired {
    pub integration: Integration,
    pub key: EnvelopeKey,
    pub public_b64: String,
}

/// The open job stream.
pub(crate) struct Subscriber {
    pub generation: u64,
    pub tx: mpsc::UnboundedSender<Event>,
    pub stop: Arc<Notify>,
}

/// What the plugin told us lately (memory only).
#[derive(Default)]
pub(crate) struct Live {
    pub stream_opened_ms: Option<i64>,
    pub last_heartbeat_ms: Option<i64>,
    pub heartbeat_status: Option<String>,
    pub display_model: Option<String>,
    pub last_test: Option<Value>,
    pub last_pairing: Option<Value>,
}

pub(crate) struct Inner {
    pub ctx: Arc<AssistantContext>,
    jobs: Jobs,
    pub paired: RwLock<Option<Arc<Paired>>>,
    pub code: Mutex<Option<Code>>,
    /// Failed pairing attempts (the route is reachable by anyone through the tunnel).
    pub pair_guard: AuthGuard,
    /// Failed relay-token checks.
    pub token_guard: AuthGuard,
    pub live: Mutex<Live>,
    pub stream: Mutex<Option<Subscriber>>,
    generation: AtomicU64,
    pub active: AtomicBool,
    /// Serialises the live-analysis scheduling (one job in flight per call).
    pub(crate) schedule: tokio::sync::Mutex<()>,
    replay: OnceCell<ReplayGuard>,
    last_status: Mutex<String>,
}

/// The `byo` kind (cheap to clone).
#[derive(Clone)]
pub struct ByoKind {
    pub(crate) inner: Arc<Inner>,
}

fn paired_from(i: Integration) -> Option<Arc<Paired>> {
    let keys = match KeyPair::from_secret_b64(&i.desktop_secret) {
        Ok(k) => k,
        Err(e) => {
            tracing::error!(
                code = e.code(),
                "the paired BYO integration's key is unreadable"
            );
            return None;
        }
    };
    let peer = super::crypto::public_key_from_b64(&i.plugin_public_key).ok()?;
    let key = EnvelopeKey::derive(&keys, &peer).ok()?;
    Some(Arc::new(Paired {
        public_b64: keys.public_b64(),
        integration: i,
        key,
    }))
}

impl ByoKind {
    pub fn start(ctx: Arc<AssistantContext>) -> ByoKind {
        let paired = pairing::load(&ctx.data_dir).and_then(paired_from);
        let me = ByoKind {
            inner: Arc::new(Inner {
                jobs: Jobs::new(ctx.conversation.store()),
                ctx,
                paired: RwLock::new(paired),
                code: Mutex::new(None),
                pair_guard: AuthGuard::default(),
                token_guard: AuthGuard::default(),
                live: Mutex::new(Live::default()),
                stream: Mutex::new(None),
                generation: AtomicU64::new(0),
                active: AtomicBool::new(false),
                schedule: tokio::sync::Mutex::new(()),
                replay: OnceCell::new(),
                last_status: Mutex::new(String::new()),
            }),
        };
        tokio::spawn(me.clone().sweeper());
        me
    }

    pub(crate) fn jobs(&self) -> &Jobs {
        &self.inner.jobs
    }

    /// Accepts an envelope `message_id` once (persistent across restarts).
    pub(crate) async fn accept_once(&self, message_id: &str) -> Result<(), String> {
        let conv = &self.inner.ctx.conversation;
        let guard = self
            .inner
            .replay
            .get_or_try_init(|| ReplayGuard::open(conv.store(), self.inner.ctx.clock.clone()))
            .await
            .map_err(|e| e.code().to_string())?;
        guard
            .check_and_record(message_id)
            .await
            .map_err(|e| e.code().to_string())
    }

    pub(crate) fn paired(&self) -> Option<Arc<Paired>> {
        self.inner.paired.read().expect("paired lock").clone()
    }

    pub(crate) fn now_ms(&self) -> i64 {
        self.inner.ctx.clock.now_ms()
    }

    fn is_active(&self) -> bool {
        self.inner.active.load(Ordering::SeqCst)
    }

    // ---- pairing ----

    /// `POST /api/assistant/pairing`: a new one-use code (replaces any earlier one).
    pub fn new_pairing(&self) -> Value {
        let now = self.now_ms();
        let code = Code::generate(now);
        let shown = code.display();
        let expires_at =
            fmt_time(chrono::DateTime::from_timestamp_millis(code.expires_ms).unwrap_or_default());
        *self.inner.code.lock().expect("code lock") = Some(code);
        let api_url = self.inner.ctx.callback.url();
        let hermes = format!("stagewhisper-hermes pair --code {shown} --api-url {api_url}");
        let openclaw = format!("openclaw stagewhisper pair --code {shown} --api-url {api_url}");
        tracing::info!("BYO pairing code issued");
        json!({
            "code": shown,
            "expires_at": expires_at,
            "api_url": api_url,
            "command": hermes,
            "commands": {"hermes": hermes, "openclaw": openclaw},
        })
    }

    /// Takes the code if `typed` is the valid one (one use).
    pub(crate) fn take_code(&self, typed: &str) -> bool {
        let now = self.now_ms();
        let typed = pairing::normalise(typed);
        let mut slot = self.inner.code.lock().expect("code lock");
        let ok = slot
            .as_ref()
            .is_some_and(|c| c.expires_ms > now && crate::tokens::secret_eq(&c.code, &typed));
        if ok {
            *slot = None;
        }
        ok
    }

    /// A plugin paired: save the integration, replace any earlier one (its stream closes).
    pub(crate) fn complete_pairing(
        &self,
        integration: Integration,
        keys: KeyPair,
    ) -> Result<Arc<Paired>, KindError> {
        let peer = super::crypto::public_key_from_b64(&integration.plugin_public_key)
            .map_err(|e| KindError::bad(e.code(), e.to_string()))?;
        let key = EnvelopeKey::derive(&keys, &peer)
            .map_err(|e| KindError::bad(e.code(), e.to_string()))?;
        pairing::save(&self.inner.ctx.data_dir, &integration)
            .map_err(|e| KindError::internal("config_write_failed", e.to_string()))?;
        self.close_stream();
        let p = Arc::new(Paired {
            public_b64: keys.public_b64(),
            integration,
            key,
        });
        *self.inner.paired.write().expect("paired lock") = Some(p.clone());
        {
            let mut live = self.inner.live.lock().expect("live lock");
            *live = Live {
                last_pairing: Some(json!({
                    "paired_at": p.integration.paired_at,
                    "host_label": p.integration.host_label,
                    "provider_kind": p.integration.provider_kind,
                    "integration_id": p.integration.integration_id,
                })),
                ..Live::default()
            };
        }
        tracing::info!(integration = %p.integration.integration_id, provider = %p.integration.provider_kind, "BYO plugin paired");
        self.report_status();
        self.inner.ctx.retry_outbox_now();
        Ok(p)
    }

    /// Closes the open job stream, if any.
    pub(crate) fn close_stream(&self) {
        if let Some(s) = self.inner.stream.lock().expect("stream lock").take() {
            s.stop.notify_one();
        }
        self.inner.live.lock().expect("live lock").stream_opened_ms = None;
    }

    // ---- the stream ----

    /// A (re)connected stream: registered, then every unanswered job is sent again.
    pub(crate) async fn open_stream(&self) -> (mpsc::UnboundedReceiver<Event>, Arc<Notify>, u64) {
        let (tx, rx) = mpsc::unbounded_channel();
        let stop = Arc::new(Notify::new());
        let generation = self.inner.generation.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(old) = self
            .inner
            .stream
            .lock()
            .expect("stream lock")
            .replace(Subscriber {
                generation,
                tx: tx.clone(),
                stop: stop.clone(),
            })
        {
            old.stop.notify_one();
        }
        {
            let mut live = self.inner.live.lock().expect("live lock");
            live.stream_opened_ms = Some(self.now_ms());
            // A plugin that said `disconnected` and came back is judged by its new stream.
            live.heartbeat_status = None;
        }
        self.report_status();
        let jobs = self.jobs();
        match jobs.sendable().await {
            Ok(list) => {
                let now = self.now_ms();
                for j in list.iter().filter(|j| j.deadline_ms > now) {
                    if let Some(ev) = &j.event {
                        let _ = tx.send(sse_line(&wire_event(ev)));
                        let _ = jobs.mark_dispatched(&j.job_id).await;
                    }
                }
            }
            Err(e) => tracing::warn!(error = %e, "BYO jobs not re-sent"),
        }
        // The capability probe, once the paired plugin first connects.
        if self.capabilities().is_none() {
            self.probe(false).await.ok();
        }
        self.inner.ctx.retry_outbox_now();
        (rx, stop, generation)
    }

    /// The stream of `generation` ended.
    pub(crate) fn stream_closed(&self, generation: u64) {
        let mut s = self.inner.stream.lock().expect("stream lock");
        if s.as_ref().is_some_and(|s| s.generation == generation) {
            *s = None;
            drop(s);
            self.inner.live.lock().expect("live lock").stream_opened_ms = None;
            tracing::info!("BYO job stream closed");
            self.report_status();
        }
    }

    /// Sends an event on the open stream (if any); the job is then `dispatched`.
    pub(crate) async fn push(&self, job_id: &str, event: &str) {
        let sent = self
            .inner
            .stream
            .lock()
            .expect("stream lock")
            .as_ref()
            .is_some_and(|s| s.tx.send(sse_line(&wire_event(event))).is_ok());
        if sent {
            let _ = self.jobs().mark_dispatched(job_id).await;
        }
    }

    // ---- heartbeat / status ----

    pub(crate) fn heartbeat(&self, body: &Value) {
        let mut live = self.inner.live.lock().expect("live lock");
        live.last_heartbeat_ms = Some(self.now_ms());
        if let Some(s) = body["status"].as_str() {
            live.heartbeat_status = Some(s.to_string());
        }
        if let Some(m) = body["display_model"].as_str() {
            live.display_model = Some(m.to_string());
        }
        drop(live);
        self.report_status();
    }

    /// (status, detail).
    fn status_word(&self) -> (&'static str, String) {
        let Some(p) = self.paired() else {
            return (
                "waiting_for_pairing",
                "Create a pairing code and run the pair command on the assistant's computer."
                    .into(),
            );
        };
        let now = self.now_ms();
        let live = self.inner.live.lock().expect("live lock");
        let who = &p.integration.host_label;
        let Some(opened) = live.stream_opened_ms else {
            return (
                "offline",
                format!("Paired with {who}, but its job stream is not open (is the assistant running?)."),
            );
        };
        if live.heartbeat_status.as_deref() == Some("disconnected") {
            return (
                "offline",
                format!("{who} reported that it is shutting down."),
            );
        }
        let fresh = live.last_heartbeat_ms.unwrap_or(opened).max(opened);
        if now - fresh > HEARTBEAT_STALE_MS {
            return (
                "offline",
                format!("No heartbeat from {who} for {} s.", (now - fresh) / 1000),
            );
        }
        let degraded = live
            .heartbeat_status
            .as_deref()
            .filter(|s| *s != "healthy")
            .map(|s| format!(" It reports: {s}."))
            .unwrap_or_default();
        (
            "online",
            format!("Paired with {who}; end-to-end encrypted.{degraded}"),
        )
    }

    /// Logs an `assistant_status` event when the status word changed.
    pub(super) fn report_status(&self) {
        let (word, detail) = self.status_word();
        let changed = {
            let mut last = self.inner.last_status.lock().expect("status lock");
            let changed = *last != word;
            *last = word.to_string();
            changed
        };
        if changed && self.is_active() {
            self.inner.ctx.status_event(KIND, word, &detail, None);
            if word == "online" {
                self.inner.ctx.retry_outbox_now();
            }
        }
    }

    pub(crate) fn profile_path(&self) -> std::path::PathBuf {
        self.inner
            .ctx
            .data_dir
            .join(pairing::DIR)
            .join("profile.json")
    }

    pub(crate) fn capabilities(&self) -> Option<Value> {
        let raw = std::fs::read_to_string(self.profile_path()).ok()?;
        serde_json::from_str(&raw).ok()
    }

    pub(super) fn view(&self) -> Value {
        let (status, detail) = self.status_word();
        let p = self.paired();
        let live = self.inner.live.lock().expect("live lock");
        let hb = live
            .last_heartbeat_ms
            .and_then(chrono::DateTime::from_timestamp_millis)
            .map(fmt_time);
        let code = self
            .inner
            .code
            .lock()
            .expect("code lock")
            .as_ref()
            .filter(|c| c.expires_ms > self.now_ms())
            .map(|c| {
                json!({"expires_at": chrono::DateTime::from_timestamp_millis(c.expires_ms).map(fmt_time)})
            });
        json!({
            "status": status,
            "detail": detail,
            "configured": p.is_some(),
            "integration_id": p.as_ref().map(|p| p.integration.integration_id.clone()),
            "host_label": p.as_ref().map(|p| p.integration.host_label.clone()),
            "provider_kind": p.as_ref().map(|p| p.integration.provider_kind.clone()),
            "paired_at": p.as_ref().map(|p| p.integration.paired_at.clone()),
            "display_model": live.display_model,
            "last_heartbeat_at": hb,
            "stream_open": live.stream_opened_ms.is_some(),
            "capabilities": self.capabilities(),
            "last_test": live.last_test,
            "last_pairing": live.last_pairing,
            "pairing_code_pending": code,
            "e2ee": true,
        })
    }

    // ---- jobs ----

    /// Builds a reasoning-job event (payload sealed unless `plain`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn job_event(
        &self,
        p: &Paired,
        job_id: &str,
        purpose: &str,
        session: &str,
        deadline_ms: i64,
        payload: &Value,
        plain: bool,
    ) -> Result<String, KindError> {
        let payload = if plain {
            payload.clone()
        } else {
            let env = p
                .key
                .try_seal(
                    &Meta {
                        session_id: session,
                        correlation_id: job_id,
                        content_type: content_type::REASONING_INPUT,
                    },
                    payload.to_string().as_bytes(),
                )
                .map_err(|e| KindError::internal(e.code(), e.to_string()))?;
            json!({"byo_encrypted": true, "envelope": env})
        };
        let deadline_at = chrono::DateTime::from_timestamp_millis(deadline_ms)
            .map(fmt_time)
            .unwrap_or_default();
        Ok(json!({
            "event_type": "reasoning_job",
            "job_id": job_id,
            "idempotency_key": job_id,
            "purpose": purpose,
            "deadline_at": deadline_at,
            "schema_version": 1,
            "envelope_version": 1,
            "response_schema": schema::schema_for(purpose),
            "payload": payload,
            "provider_kind": p.integration.provider_kind,
            "correlation_id": job_id,
        })
        .to_string())
    }

    /// `capability_probe` (on first connect, and on demand with `force`).
    pub async fn probe(&self, force: bool) -> Result<String, KindError> {
        let p = self.paired().ok_or_else(not_paired)?;
        let jobs = self.jobs();
        if !force
            && jobs.count(jobs::PROBE, "queued").await.unwrap_or(0)
                + jobs.count(jobs::PROBE, "dispatched").await.unwrap_or(0)
                > 0
        {
            return Ok(String::new());
        }
        let job_id = uuid::Uuid::new_v4().to_string();
        let deadline = self.now_ms() + PROBE_DEADLINE_MS;
        let ev = self.job_event(
            &p,
            &job_id,
            jobs::PROBE,
            "probe",
            deadline,
            &schema::probe_payload(),
            true,
        )?;
        self.insert_and_push(&NewJob {
            job_id: &job_id,
            purpose: jobs::PROBE,
            app_session: None,
            source_task_id: None,
            anchor: None,
            correlation_id: &job_id,
            deadline_ms: deadline,
            event: Some(&ev),
        })
        .await?;
        Ok(job_id)
    }

    /// The "Test connection" button: a legacy `connectivity_test` task.
    pub async fn test_connection(&self) -> Result<String, KindError> {
        self.paired().ok_or_else(not_paired)?;
        let test_id = uuid::Uuid::new_v4().to_string();
        let ev = json!({
            "id": test_id,
            "title": "StageWhisper connection test",
            "request_text": "Say hi and confirm you can hear me.",
            "action_type": "connectivity_test",
            "evidence_payload": {},
        })
        .to_string();
        self.inner.live.lock().expect("live lock").last_test =
            Some(json!({"test_id": test_id, "state": "sent", "sent_at": self.inner.ctx.now()}));
        self.insert_and_push(&NewJob {
            job_id: &test_id,
            purpose: jobs::TEST,
            app_session: None,
            source_task_id: None,
            anchor: None,
            correlation_id: &test_id,
            deadline_ms: self.now_ms() + PROBE_DEADLINE_MS,
            event: Some(&ev),
        })
        .await?;
        Ok(test_id)
    }

    pub(crate) fn test_replied(&self, test_id: &str, content: &str) {
        {
            let mut live = self.inner.live.lock().expect("live lock");
            live.last_test = Some(json!({"test_id": test_id, "state": "ok",
                "content": content, "replied_at": self.inner.ctx.now()}));
        }
        // The status itself is unchanged, but its event makes an open view read the assistant
        // again at once, so the answer shows without waiting for the next poll.
        if self.is_active() {
            let (word, detail) = self.status_word();
            self.inner.ctx.status_event(KIND, word, &detail, None);
        }
    }

    pub(crate) async fn insert_and_push(&self, j: &NewJob<'_>) -> Result<(), KindError> {
        let jobs = self.jobs();
        let fresh = jobs.insert(j, self.now_ms()).await?;
        if fresh {
            if let Some(ev) = j.event {
                self.push(j.job_id, ev).await;
            }
        }
        Ok(())
    }

    /// Open jobs past their deadline end `timed_out` (and are not sent again).
    async fn sweep(&self) {
        let jobs = self.jobs();
        let now = self.now_ms();
        if let Ok(expired) = jobs.expired(now).await {
            for j in expired {
                let stored = jobs
                    .finish(&j.job_id, "timed_out", None, Some(("timed_out", "")), now)
                    .await
                    .unwrap_or(false);
                if stored {
                    tracing::info!(job = %j.job_id, purpose = %j.purpose, "BYO job timed out");
                    if let Ok(Some(j)) = jobs.get(&j.job_id).await {
                        self.apply(&j).await;
                    }
                }
            }
        }
        self.report_status();
    }

    async fn sweeper(self) {
        // Start-up: results stored but not yet in the conversation, turns waiting for a job.
        let shutdown = self.inner.ctx.shutdown.clone();
        let mut started = false;
        loop {
            tokio::select! {
                _ = tokio::time::sleep(SWEEP) => {}
                _ = shutdown.wait() => {
                    self.close_stream();
                    return;
                }
            }
            if !started {
                started = self.catch_up().await;
            }
            self.sweep().await;
        }
    }

    async fn catch_up(&self) -> bool {
        let jobs = self.jobs();
        if let Ok(list) = jobs.unapplied().await {
            for j in list {
                self.apply(&j).await;
            }
        }
        if let Ok(calls) = jobs.calls_waiting().await {
            for c in calls {
                let _ = self.schedule_live(&c).await;
            }
        }
        true
    }
}

fn not_paired() -> KindError {
    KindError {
        status: 409,
        code: "not_paired",
        message: "No assistant is paired: create a pairing code first.".into(),
    }
}

/// What goes on the wire for a stored event: the whole event, or a `_truncated` stub.
fn wire_event(event: &str) -> String {
    if event.len() <= MAX_EVENT_BYTES {
        return event.to_string();
    }
    match serde_json::from_str::<Value>(event) {
        Ok(mut v) if v["event_type"] == "reasoning_job" => {
            v["payload"] = json!({"_truncated": true});
            // Without it the OpenClaw plugin fetches the whole job too (Hermes does on
            // `_truncated`).
            if let Some(o) = v.as_object_mut() {
                o.remove("idempotency_key");
            }
            v.to_string()
        }
        _ => event.to_string(),
    }
}

/// One SSE event: a single compact `data: ` line and a blank line.
pub(crate) fn sse_line(json: &str) -> Event {
    Event::default().data(json)
}
