//! The no-callback fallback: `GET {base}/v1/events?session_id=…` (SSE). Durable reply bodies
//! come with an `id:` (kept as `Last-Event-ID` across reconnects and restarts), typing comes as
//! `event: progress` without one. Every body goes through [`ingest`] — the same path as the
//! callback listener (`parse_callback`, then `Conversation::submit`) — so a reply that arrives
//! both ways is stored once.

use super::client::{self, Call};
use super::sse::{SseEvent, SseParser};
use super::{Inner, Reader, StatusKind};
use crate::assistants::state::StreamRecord;
use crate::backoff::{Backoff, Retries};
use crate::conversation::{Conversation, CoreError, Outcome};
use crate::protocol::{self, ProtocolError};
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use hyper::header::CONTENT_TYPE;
use hyper::{Method, StatusCode};
use std::sync::Arc;
use std::time::Duration;

/// Why a body from the stream was not applied.
#[derive(Debug, thiserror::Error)]
pub enum IngestError {
    #[error("the body has no valid task_id: {0}")]
    TaskId(ProtocolError),
    #[error(transparent)]
    Protocol(#[from] ProtocolError),
    #[error(transparent)]
    Core(#[from] CoreError),
}

/// Applies one reply body exactly like `POST /tasks/{task_id}` would (the task id comes from the
/// body here).
pub async fn ingest(conversation: &Conversation, body: &[u8]) -> Result<Outcome, IngestError> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| ProtocolError::InvalidJson(e.to_string()))?;
    let task_id = v
        .get("task_id")
        .and_then(|t| t.as_str())
        .ok_or(IngestError::TaskId(ProtocolError::InvalidTaskId))
        .and_then(|t| protocol::parse_task_id(t).map_err(IngestError::TaskId))?;
    let cb = protocol::parse_callback(&task_id, body)?;
    Ok(conversation.submit(cb).await?)
}

/// How a stream connection ended.
enum StreamEnd {
    /// Reconnect (after a pause).
    Reconnect,
    /// Stop reading this session.
    Stop,
}

impl Inner {
    /// Makes sure replies of `session_id` are read from `/v1/events` (notes the activity).
    pub(crate) fn watch_events(self: &Arc<Self>, session_id: &str) {
        if self.events_support() == Some(false) {
            return;
        }
        let now = self.conversation.clock().now_ms();
        self.with_state(|st| {
            st.streams
                .entry(session_id.to_string())
                .or_default()
                .last_activity_ms = now;
            ((), true)
        });
        let generation = self.generation();
        let mut readers = self.readers.lock().expect("readers lock");
        if let Some(r) = readers.get(session_id) {
            if r.generation == generation && !r.task.is_finished() {
                return;
            }
        }
        let me = self.clone();
        let sid = session_id.to_string();
        let task = tokio::spawn(async move { me.read_events(sid, generation).await });
        readers.insert(
            session_id.to_string(),
            Reader {
                generation,
                task: task.abort_handle(),
            },
        );
    }

    /// At start-up: resume the streams that were active recently.
    pub(crate) fn resume_readers(self: &Arc<Self>) {
        let Some(cfg) = self.config() else {
            return;
        };
        let now = self.conversation.clock().now_ms();
        let idle = self.settings.events_idle.as_millis() as i64;
        let recent: Vec<String> = self.ctx.read_state(|st| {
            st.streams
                .iter()
                .filter(|(_, s)| s.last_activity_ms + idle > now)
                .map(|(k, _)| k.clone())
                .collect()
        });
        if !recent.is_empty() {
            tracing::info!(sessions = recent.len(), base_url = %cfg.stored.base_url, "resuming GET /v1/events readers");
        }
        for sid in recent {
            self.watch_events(&sid);
        }
    }

    fn stream_record(&self, session_id: &str) -> StreamRecord {
        self.ctx
            .read_state(|st| st.streams.get(session_id).cloned().unwrap_or_default())
    }

    async fn read_events(self: Arc<Self>, session_id: String, generation: u64) {
        let mut retries = Retries::new(Backoff::doubling(
            self.settings.backoff_initial,
            self.settings.backoff_max,
        ));
        let idle_ms = self.settings.events_idle.as_millis() as i64;
        loop {
            if self.shutdown.is_triggered() || self.generation() != generation {
                break;
            }
            let Some(cfg) = self.config() else { break };
            let rec = self.stream_record(&session_id);
            if rec.last_activity_ms + idle_ms < self.conversation.clock().now_ms() {
                tracing::debug!(%session_id, "GET /v1/events reader idle; stopping");
                break;
            }
            let path = format!(
                "/v1/events?session_id={}",
                client::encode_query_value(&session_id)
            );
            let mut call = Call::new(Method::GET, &path).bearer(cfg.relay_token());
            if let Some(id) = &rec.last_event_id {
                call = call.header("last-event-id", id.clone());
            }
            let end = match client::open(&cfg.endpoint, call, self.settings.timeouts()).await {
                Err(e) => {
                    tracing::debug!(%session_id, error = %e, "GET /v1/events failed; reconnecting");
                    StreamEnd::Reconnect
                }
                Ok(resp) => match resp.status() {
                    StatusCode::OK
                        if resp
                            .headers()
                            .get(CONTENT_TYPE)
                            .and_then(|v| v.to_str().ok())
                            .is_some_and(|v| v.starts_with("text/event-stream")) =>
                    {
                        retries.reset();
                        tracing::debug!(%session_id, last_event_id = ?rec.last_event_id, "reading GET /v1/events");
                        self.consume(&session_id, generation, resp.bytes_stream())
                            .await
                    }
                    StatusCode::NOT_FOUND => {
                        let detail = "This assistant has no GET /v1/events (404): it must be able \
                                      to reach this app's callback URL; there is no fallback."
                            .to_string();
                        self.set_events_support(Some(false), detail.clone());
                        tracing::warn!(%session_id, "{detail}");
                        StreamEnd::Stop
                    }
                    StatusCode::UNAUTHORIZED => {
                        self.set_status(
                            StatusKind::AuthFailed,
                            format!(
                                "GET {}/v1/events: the assistant rejected the relay token (401).",
                                cfg.stored.base_url
                            ),
                        );
                        StreamEnd::Reconnect
                    }
                    s => {
                        tracing::warn!(%session_id, status = s.as_u16(), "GET /v1/events refused; retrying");
                        StreamEnd::Reconnect
                    }
                },
            };
            match end {
                StreamEnd::Stop => break,
                StreamEnd::Reconnect => {
                    tokio::select! {
                        _ = tokio::time::sleep(retries.fail()) => {},
                        _ = self.shutdown.wait() => break,
                    }
                }
            }
        }
    }

    /// Reads one open stream until it ends, the reader goes idle, or a body cannot be stored.
    async fn consume(
        self: &Arc<Self>,
        session_id: &str,
        generation: u64,
        body: impl Stream<Item = reqwest::Result<Bytes>>,
    ) -> StreamEnd {
        let mut body = std::pin::pin!(body);
        let mut parser = SseParser::new();
        let idle_ms = self.settings.events_idle.as_millis() as i64;
        // Hermes sends a keep-alive every 20 s; silence for much longer means a dead stream.
        let read_timeout = Duration::from_secs(45);
        loop {
            if self.generation() != generation {
                return StreamEnd::Stop;
            }
            let frame = tokio::select! {
                f = tokio::time::timeout(read_timeout, body.next()) => f,
                _ = self.shutdown.wait() => return StreamEnd::Stop,
            };
            let data = match frame {
                Err(_) => return StreamEnd::Reconnect,
                Ok(None) => return StreamEnd::Reconnect,
                Ok(Some(Err(e))) => {
                    let error = crate::net::http::cause(&e);
                    tracing::debug!(%session_id, %error, "GET /v1/events stream broke");
                    return StreamEnd::Reconnect;
                }
                Ok(Some(Ok(data))) => data,
            };
            for ev in parser.feed(&data) {
                if !self.apply(session_id, ev).await {
                    return StreamEnd::Reconnect; // replay from the last stored id
                }
            }
            let rec = self.stream_record(session_id);
            if rec.last_activity_ms + idle_ms < self.conversation.clock().now_ms() {
                return StreamEnd::Stop;
            }
        }
    }

    /// Applies one event; `false` when it could not be stored (reconnect and replay).
    async fn apply(&self, session_id: &str, ev: SseEvent) -> bool {
        let durable = ev.event.as_deref().is_none_or(|t| t == "message");
        match ingest(&self.conversation, ev.data.as_bytes()).await {
            Ok(outcome) => {
                tracing::debug!(%session_id, id = ?ev.id, ?outcome, "reply from GET /v1/events");
            }
            Err(IngestError::Core(e @ (CoreError::StorageUnavailable(_) | CoreError::Stopped))) => {
                tracing::warn!(%session_id, error = %e, "a reply from GET /v1/events could not be stored; it will be replayed");
                return !durable;
            }
            Err(e) => {
                tracing::warn!(%session_id, id = ?ev.id, error = %e, "GET /v1/events: an event was rejected");
            }
        }
        if durable {
            if let Some(id) = ev.id {
                let now = self.conversation.clock().now_ms();
                self.with_state(|st| {
                    let r = st.streams.entry(session_id.to_string()).or_default();
                    r.last_event_id = Some(id);
                    r.last_activity_ms = now;
                    ((), true)
                });
            }
        }
        true
    }
}
