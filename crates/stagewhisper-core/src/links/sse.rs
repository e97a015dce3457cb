//! An incremental Server-Sent Events parser (the WHATWG rules that matter here): lines end in
//! `\n`, `\r\n` or `\r`; `:` starts a comment; `data` lines are joined with `\n`; a blank line
//! dispatches the event; an event without data is dropped.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The `id:` given on this very event (not inherited from earlier ones).
    pub id: Option<String>,
    /// The `event:` type (`None` = the default `message`).
    pub event: Option<String>,
    pub data: String,
}

/// Feed it bytes as they arrive; it returns the events completed so far.
#[derive(Debug, Default)]
pub struct SseParser {
    buf: Vec<u8>,
    /// The previous chunk ended in `\r`: a `\n` at the start of the next one belongs to it.
    skip_lf: bool,
    cur: SseEvent,
    has_data: bool,
}

/// A line longer than this is dropped (a broken or hostile stream).
const MAX_LINE: usize = 4 * 1024 * 1024;

impl SseParser {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn feed(&mut self, chunk: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        for &b in chunk {
            if self.skip_lf {
                self.skip_lf = false;
                if b == b'\n' {
                    continue;
                }
            }
            match b {
                b'\n' | b'\r' => {
                    self.skip_lf = b == b'\r';
                    let line = std::mem::take(&mut self.buf);
                    if let Some(e) = self.line(&line) {
                        out.push(e);
                    }
                }
                _ => {
                    if self.buf.len() < MAX_LINE {
                        self.buf.push(b);
                    }
                }
            }
        }
        out
    }

    fn line(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            let e = std::mem::take(&mut self.cur);
            let had = std::mem::replace(&mut self.has_data, false);
            return had.then_some(e);
        }
        if line[0] == b':' {
            return None;
        }
        let text = String::from_utf8_lossy(line);
        let (field, value) = match text.split_once(':') {
            Some((f, v)) => (f.to_string(), v.strip_prefix(' ').unwrap_or(v).to_string()),
            None => (text.to_string(), String::new()),
        };
        match field.as_str() {
            "data" => {
                if self.has_data {
                    self.cur.data.push('\n');
                }
                self.cur.data.push_str(&value);
                self.has_data = true;
            }
            "event" => self.cur.event = Some(value),
            "id" if !value.contains('\0') => self.cur.id = Some(value),
            _ => {}
        }
        None
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
}
