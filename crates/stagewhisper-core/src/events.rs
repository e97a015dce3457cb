//! The change log's live side: after the writer commits, it publishes each event here. A reader
//! resumes from a cursor by reading the log from the store and then following live events,
//! skipping ids it already has, so it gets everything after its cursor exactly once.
//!
//! Besides the log, the hub carries *live-only* events ([`EventHub::publish_live`]): state that
//! is worth showing while it happens and worthless afterwards (a partial transcript, an audio
//! level). They are never stored, have no cursor (`id` 0, and `"live": true` in their JSON) and
//! reach only the readers following the hub at that moment; a view that reconnects reads the
//! current state from its route instead.

use crate::store::{Store, StoreError};
use std::sync::Arc;
use tokio::sync::broadcast;

/// One committed event: its cursor and the JSON object the view receives (with `id` inside).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub id: i64,
    pub event_type: String,
    pub json: String,
}

/// The `id` of a live-only event: no event of the log has it (the log's ids start at 1).
pub const LIVE_ID: i64 = 0;

impl Event {
    /// A live-only event: `data` is a JSON object (its `type` is set from `event_type`, and
    /// `"live": true` is added so a view can tell it from a logged event).
    pub fn live(event_type: &str, mut data: serde_json::Value) -> Event {
        if let Some(obj) = data.as_object_mut() {
            obj.insert("type".into(), event_type.into());
            obj.insert("live".into(), true.into());
        }
        Event {
            id: LIVE_ID,
            event_type: event_type.to_string(),
            json: data.to_string(),
        }
    }

    /// Whether this event is live-only (never stored, no cursor).
    pub fn is_live(&self) -> bool {
        self.id == LIVE_ID
    }

    /// Builds the wire form from the stored data (a JSON object without `id`).
    pub fn from_stored(id: i64, data: &str) -> Event {
        let mut value: serde_json::Value =
            serde_json::from_str(data).unwrap_or_else(|_| serde_json::json!({}));
        let event_type = value
            .get("type")
            .and_then(|t| t.as_str())
            .unwrap_or("unknown")
            .to_string();
        if let Some(obj) = value.as_object_mut() {
            obj.insert("id".into(), id.into());
        }
        Event {
            id,
            event_type,
            json: value.to_string(),
        }
    }
}

#[derive(Clone)]
pub struct EventHub {
    tx: broadcast::Sender<Arc<Event>>,
}

impl Default for EventHub {
    fn default() -> Self {
        Self::new()
    }
}

impl EventHub {
    pub fn new() -> Self {
        let (tx, _) = broadcast::channel(4096);
        EventHub { tx }
    }

    pub fn publish(&self, e: Event) {
        let _ = self.tx.send(Arc::new(e));
    }

    /// Publishes a live-only event (see the module docs) to the readers following the hub now.
    pub fn publish_live(&self, event_type: &str, data: serde_json::Value) {
        self.publish(Event::live(event_type, data));
    }

    /// A reader positioned after `cursor`.
    pub fn subscribe(&self, store: Store, cursor: i64) -> Subscription {
        Subscription {
            rx: self.tx.subscribe(),
            store,
            last: cursor,
            backlog: std::collections::VecDeque::new(),
            catching_up: true,
        }
    }
}

pub struct Subscription {
    rx: broadcast::Receiver<Arc<Event>>,
    store: Store,
    last: i64,
    backlog: std::collections::VecDeque<Event>,
    catching_up: bool,
}

const PAGE: i64 = 500;

impl Subscription {
    pub fn cursor(&self) -> i64 {
        self.last
    }

    /// The next event after the cursor; waits for one when caught up. Shared with the other
    /// readers of the live stream (no copy per subscriber). Live-only events come in stream
    /// order among the logged ones once the reader has caught up, and leave the cursor as it is.
    pub async fn next(&mut self) -> Result<Arc<Event>, StoreError> {
        loop {
            if let Some(e) = self.backlog.pop_front() {
                self.last = e.id;
                return Ok(Arc::new(e));
            }
            if self.catching_up {
                let page = self.store.events_after(self.last, PAGE).await?;
                self.catching_up = page.len() as i64 == PAGE;
                self.backlog
                    .extend(page.iter().map(|(id, data)| Event::from_stored(*id, data)));
                continue;
            }
            match self.rx.recv().await {
                Ok(e) if e.is_live() => return Ok(e),
                Ok(e) if e.id <= self.last => continue,
                Ok(e) => {
                    self.last = e.id;
                    return Ok(e);
                }
                // Fell behind the live buffer: read the log again from the cursor.
                Err(broadcast::error::RecvError::Lagged(_)) => self.catching_up = true,
                Err(broadcast::error::RecvError::Closed) => {
                    std::future::pending::<()>().await;
                }
            }
        }
    }
}
