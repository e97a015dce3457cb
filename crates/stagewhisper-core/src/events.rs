//! The change log's live side: after the writer commits, it publishes each event here. A reader
//! resumes from a cursor by reading the log from the store and then following live events,
//! skipping ids it already has, so it gets everything after its cursor exactly once.

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

impl Event {
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
    /// readers of the live stream (no copy per subscriber).
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
