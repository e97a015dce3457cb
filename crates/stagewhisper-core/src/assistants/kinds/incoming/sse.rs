//! Server-Sent Events for the `/v1/events` client, parsed by `eventsource-stream` (the WHATWG
//! rules: lines end in `\n`, `\r\n` or `\r`; `:` starts a comment; `data` lines are joined with
//! `\n`; a blank line dispatches the event; an event without data is dropped; the last event
//! id carries over to later events, as `Last-Event-ID` does in a browser).
//!
//! [`SseParser`] is a push adapter over that stream: the reader feeds it each body frame as it
//! arrives and gets the events completed so far, so the reader keeps its own per-frame timeout,
//! shutdown and idle checks.

use bytes::Bytes;
use eventsource_stream::{Event, EventStream, EventStreamError, Eventsource};
use futures_util::{FutureExt, Stream, StreamExt};
use std::convert::Infallible;
use std::pin::Pin;
use tokio::sync::mpsc;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The last event id (`id:` of this event or an earlier one; `None` before any, or after an
    /// empty `id:` reset it).
    pub id: Option<String>,
    /// The `event:` type (`None` = the default `message`).
    pub event: Option<String>,
    pub data: String,
}

impl From<Event> for SseEvent {
    fn from(e: Event) -> Self {
        SseEvent {
            id: Some(e.id).filter(|id| !id.is_empty()),
            event: Some(e.event).filter(|t| t != "message"),
            data: e.data,
        }
    }
}

type Events = Pin<Box<dyn Stream<Item = Result<Event, EventStreamError<Infallible>>> + Send>>;

/// Feed it bytes as they arrive; it returns the events completed so far.
pub struct SseParser {
    tx: mpsc::UnboundedSender<Bytes>,
    events: Events,
    /// Bytes since the last line break.
    run: usize,
    /// A line went over [`MAX_LINE`]: its bytes are dropped up to the next line break.
    skipping: bool,
}

impl std::fmt::Debug for SseParser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SseParser")
            .field("run", &self.run)
            .field("skipping", &self.skipping)
            .finish_non_exhaustive()
    }
}

impl Default for SseParser {
    fn default() -> Self {
        Self::new()
    }
}

/// A line longer than this is dropped (a broken or hostile stream), with the event it was in.
const MAX_LINE: usize = 4 * 1024 * 1024;

fn stream() -> (mpsc::UnboundedSender<Bytes>, Events) {
    let (tx, mut rx) = mpsc::unbounded_channel::<Bytes>();
    let bytes = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx)).map(Ok::<_, Infallible>);
    let events: EventStream<_> = bytes.eventsource();
    (tx, Box::pin(events))
}

impl SseParser {
    pub fn new() -> Self {
        let (tx, events) = stream();
        SseParser {
            tx,
            events,
            run: 0,
            skipping: false,
        }
    }

    pub fn feed(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut chunk = chunk;
        if self.skipping {
            match chunk.iter().position(|&b| b == b'\n' || b == b'\r') {
                None => return Vec::new(),
                Some(i) => {
                    // The over-long line ends here; the parser starts afresh after it.
                    self.skipping = false;
                    chunk = &chunk[i + 1..];
                    let (tx, events) = stream();
                    (self.tx, self.events) = (tx, events);
                    self.run = 0;
                }
            }
        }
        let brk = chunk.iter().rposition(|&b| b == b'\n' || b == b'\r');
        let run = match brk {
            Some(i) => chunk.len() - i - 1,
            None => self.run + chunk.len(),
        };
        let send = if run > MAX_LINE {
            tracing::warn!("SSE line over {MAX_LINE} bytes dropped");
            self.skipping = true;
            &chunk[..brk.map_or(0, |i| i + 1)]
        } else {
            self.run = run;
            chunk
        };
        if !send.is_empty() {
            // The receiver lives in `self.events`: the send cannot fail.
            let _ = self.tx.send(Bytes::copy_from_slice(send));
        }
        let mut out = Vec::new();
        // Everything fed is in the channel already, so the stream is ready until it is drained.
        while let Some(Some(next)) = self.events.next().now_or_never() {
            match next {
                Ok(e) => out.push(e.into()),
                Err(e) => tracing::debug!(error = %e, "an unreadable SSE event was dropped"),
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_hermes_style_frames_split_anywhere() {
        let raw = b": open\n\nevent: progress\ndata: {\"status\":\"typing\"}\n\nid: 17-0.0\ndata: {\"a\":1}\n\n: keep-alive\n\nid: 17-0.1\r\ndata: x\r\ndata: y\r\n\r\n";
        for split in 1..raw.len() {
            let mut p = SseParser::new();
            let mut evs = p.feed(&raw[..split]);
            evs.extend(p.feed(&raw[split..]));
            assert_eq!(evs.len(), 3, "split at {split}");
            assert_eq!(evs[0].event.as_deref(), Some("progress"));
            assert_eq!(evs[0].id, None);
            assert_eq!(evs[1].id.as_deref(), Some("17-0.0"));
            assert_eq!(evs[1].data, "{\"a\":1}");
            assert_eq!(evs[2].id.as_deref(), Some("17-0.1"));
            assert_eq!(evs[2].data, "x\ny");
        }
    }

    #[test]
    fn events_without_data_are_dropped() {
        let mut p = SseParser::new();
        assert!(p.feed(b"id: 3\n\nevent: x\n\n").is_empty());
        assert_eq!(p.feed(b"data\n\n")[0].data, "");
    }

    #[test]
    fn the_last_event_id_carries_over_and_over_long_lines_are_dropped() {
        let mut p = SseParser::new();
        let evs = p.feed(b"id: 5\ndata: a\n\ndata: b\n\nid:\ndata: c\n\n");
        let ids: Vec<_> = evs.iter().map(|e| e.id.as_deref()).collect();
        assert_eq!(ids, [Some("5"), Some("5"), None]);
        let mut p = SseParser::new();
        assert!(p.feed(b"data: ").is_empty());
        let big = vec![b'x'; MAX_LINE];
        assert!(p.feed(&big).is_empty());
        assert!(p.feed(b"yyy").is_empty());
        let evs = p.feed(b"zz\n\ndata: after\n\n");
        assert_eq!(evs.len(), 1, "{evs:?}");
        assert_eq!(evs[0].data, "after");
    }
}
