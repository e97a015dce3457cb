//! A call (or a chat) exported whole: its transcript, insights and chat, each entry with its
//! time, as JSON ([`Export::to_json`], the stable machine form) or Markdown
//! ([`Export::to_markdown`], for people). Built from the store alone, so the control API and
//! the `export` command (which reads a data dir, the app running or not) give the same bytes.
//!
//! Left out: drafts (a reply still streaming) and hidden rows, as in the views; user messages
//! addressed to the insights session (they are not insights).

use super::{chat_session, ArchiveError};
use crate::conversation::micros_of;
use crate::model::{MessageKind, MessageRow};
use crate::protocol::INSIGHTS_PREFIX;
use crate::store::Store;
use serde::Serialize;
use std::fmt::Write;

/// `md` or `json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Markdown,
    Json,
}

impl Format {
    pub fn parse(s: &str) -> Result<Format, ArchiveError> {
        match s {
            "md" | "markdown" => Ok(Format::Markdown),
            "json" => Ok(Format::Json),
            _ => Err(ArchiveError::InvalidFormat),
        }
    }

    pub fn content_type(self) -> &'static str {
        match self {
            Format::Markdown => "text/markdown; charset=utf-8",
            Format::Json => "application/json",
        }
    }

    pub fn extension(self) -> &'static str {
        match self {
            Format::Markdown => "md",
            Format::Json => "json",
        }
    }
}

/// Identifies the JSON form (a reader checks it before the rest).
pub const EXPORT_FORMAT: &str = "stagewhisper.export";
pub const EXPORT_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Export {
    pub format: &'static str,
    pub version: u32,
    pub session: ExportSession,
    /// Oldest first.
    pub transcript: Vec<ExportTurn>,
    /// Oldest first.
    pub insights: Vec<ExportInsight>,
    /// Oldest first, in the chat's order.
    pub chat: Vec<ExportMessage>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExportSession {
    pub session_id: String,
    pub title: Option<String>,
    pub is_call: bool,
    pub created_at: String,
    pub ended_at: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExportTurn {
    pub id: i64,
    /// When it was stored (RFC 3339).
    pub time: String,
    /// Time into the call, in milliseconds.
    pub offset_ms: i64,
    pub speaker: Option<String>,
    pub text: String,
    /// The language it was heard in (ISO-639-1), when the engine told it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExportInsight {
    pub id: i64,
    pub time: String,
    pub offset_ms: i64,
    /// `assistant` (an insight), `notice` or `error`.
    pub kind: &'static str,
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExportMessage {
    pub id: i64,
    pub time: String,
    /// `user`, `assistant`, `notice`, `error` or `permission`.
    pub kind: &'static str,
    pub text: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error_code: Option<String>,
}

/// Reads a live session's export.
pub async fn export(store: &Store, session_id: &str) -> Result<Export, ArchiveError> {
    let s = chat_session(store, session_id).await?;
    let start = micros_of(&s.created_at);
    let offset = |r: &MessageRow| ((r.sort_key - start) / 1000).max(0);
    let shown = |r: &&MessageRow| !r.hidden && !r.draft;
    let chat = store.messages(session_id).await?;
    let side = store
        .messages(&format!("{INSIGHTS_PREFIX}{session_id}"))
        .await?;
    Ok(Export {
        format: EXPORT_FORMAT,
        version: EXPORT_VERSION,
        session: ExportSession {
            session_id: s.session_id.clone(),
            title: s.title.clone(),
            is_call: s.is_call,
            created_at: s.created_at.clone(),
            ended_at: s.ended_at.clone(),
        },
        transcript: side
            .iter()
            .filter(shown)
            .filter(|r| r.kind == MessageKind::Transcript)
            .map(|r| ExportTurn {
                id: r.id,
                time: r.received_at.clone(),
                offset_ms: offset(r),
                speaker: r.speaker.clone(),
                text: r.text.clone(),
                language: r.language.clone(),
            })
            .collect(),
        insights: side
            .iter()
            .filter(shown)
            .filter(|r| !matches!(r.kind, MessageKind::User | MessageKind::Transcript))
            .map(|r| ExportInsight {
                id: r.id,
                time: r.received_at.clone(),
                offset_ms: offset(r),
                kind: r.kind.as_str(),
                text: r.text.clone(),
                error_code: r.error_code.clone(),
            })
            .collect(),
        chat: chat
            .iter()
            .filter(shown)
            .map(|r| ExportMessage {
                id: r.id,
                time: r.received_at.clone(),
                kind: r.kind.as_str(),
                text: r.text.clone(),
                error_code: r.error_code.clone(),
            })
            .collect(),
    })
}

impl Export {
    /// Pretty JSON, ending with a newline.
    pub fn to_json(&self) -> String {
        let mut s = serde_json::to_string_pretty(self).expect("plain data serializes");
        s.push('\n');
        s
    }

    pub fn render(&self, format: Format) -> String {
        match format {
            Format::Markdown => self.to_markdown(),
            Format::Json => self.to_json(),
        }
    }

    /// A file name for the export (`<title or id>.<ext>`, only safe characters).
    pub fn file_name(&self, format: Format) -> String {
        let base = self
            .session
            .title
            .as_deref()
            .filter(|t| !t.trim().is_empty())
            .unwrap_or(&self.session.session_id);
        let mut name: String = base
            .chars()
            .map(|c| if c.is_alphanumeric() { c } else { '-' })
            .collect();
        name = name.trim_matches('-').chars().take(80).collect();
        if name.is_empty() {
            name = "export".into();
        }
        format!("{name}.{}", format.extension())
    }

    /// Markdown: a heading with the session's times, then the transcript, the insights and
    /// the chat, each entry with its time (and time into the call).
    pub fn to_markdown(&self) -> String {
        let s = &self.session;
        let mut out = String::new();
        let kind = if s.is_call { "Call" } else { "Chat" };
        let title = s.title.as_deref().filter(|t| !t.trim().is_empty());
        let _ = writeln!(
            out,
            "# {}\n",
            one_line(title.unwrap_or(&format!("{kind} {}", human_time(&s.created_at))))
        );
        let _ = writeln!(out, "- {kind}: `{}`", s.session_id);
        let _ = writeln!(out, "- Started: {}", human_time(&s.created_at));
        match &s.ended_at {
            Some(e) => {
                let _ = writeln!(out, "- Ended: {}", human_time(e));
            }
            None if s.is_call => {
                let _ = writeln!(out, "- Ended: not yet");
            }
            None => {}
        }
        if s.is_call {
            out.push_str("\n## Transcript\n\n");
            if self.transcript.is_empty() {
                out.push_str("_No transcript._\n");
            }
            for t in &self.transcript {
                let who = t.speaker.as_deref().map(one_line).unwrap_or_default();
                let who = if who.is_empty() {
                    String::new()
                } else {
                    format!(" **{who}:**")
                };
                // The app's convention: the clock time, with the time into the call.
                let _ = writeln!(
                    out,
                    "- [{}] {}{who} {}",
                    offset(t.offset_ms),
                    clock_time(&t.time),
                    one_line(&t.text)
                );
            }
            out.push_str("\n## Insights\n");
            if self.insights.is_empty() {
                out.push_str("\n_No insights._\n");
            }
            for i in &self.insights {
                let label = match i.kind {
                    "assistant" => String::new(),
                    k => format!(" · {k}{}", code(&i.error_code)),
                };
                let _ = writeln!(
                    out,
                    "\n### [{}] {}{label}\n\n{}",
                    offset(i.offset_ms),
                    human_time(&i.time),
                    block(&i.text)
                );
            }
        }
        out.push_str("\n## Chat\n");
        if self.chat.is_empty() {
            out.push_str("\n_No messages._\n");
        }
        for m in &self.chat {
            let who = match m.kind {
                "user" => "You".to_string(),
                "assistant" => "Assistant".to_string(),
                "permission" => "Permission request".to_string(),
                k => format!("{}{}", capitalised(k), code(&m.error_code)),
            };
            let _ = writeln!(
                out,
                "\n**{who}** · {}\n\n{}",
                human_time(&m.time),
                block(&m.text)
            );
        }
        out
    }
}

/// `2026-12-01T16:53:02.123456Z` → `2026-12-01 16:53:02 UTC` (other forms as they are).
fn human_time(t: &str) -> String {
    match crate::protocol::parse_rfc3339(t) {
        Some(d) => d.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        None => t.to_string(),
    }
}

/// `2026-12-01T16:53:02.123456Z` → `16:53:02` (UTC, like the export's other times).
fn clock_time(t: &str) -> String {
    match crate::protocol::parse_rfc3339(t) {
        Some(d) => d.format("%H:%M:%S").to_string(),
        None => t.to_string(),
    }
}

/// `[m:ss]`, or `[h:mm:ss]` from an hour on.
fn offset(ms: i64) -> String {
    let s = ms / 1000;
    let (h, m, s) = (s / 3600, (s / 60) % 60, s % 60);
    if h > 0 {
        format!("{h}:{m:02}:{s:02}")
    } else {
        format!("{m}:{s:02}")
    }
}

fn code(c: &Option<String>) -> String {
    c.as_deref().map(|c| format!(" `{c}`")).unwrap_or_default()
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A message's text as a Markdown block: kept as written (it is Markdown already), trailing
/// white space trimmed, a line starting with `#` escaped so it cannot become a heading of the
/// export.
fn block(s: &str) -> String {
    s.trim_end()
        .lines()
        .map(|l| {
            if l.trim_start().starts_with('#') {
                format!("\\{}", l.trim_start())
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_and_times_read_as_people_write_them() {
        assert_eq!(offset(0), "0:00");
        assert_eq!(offset(61_999), "1:01");
        assert_eq!(offset(3_725_000), "1:02:05");
        assert_eq!(
            human_time("2026-12-01T16:53:02.123456Z"),
            "2026-12-01 16:53:02 UTC"
        );
        assert_eq!(
            block("# Title\nline\n  ## sub  \n"),
            "\\# Title\nline\n\\## sub"
        );
        assert_eq!(Format::parse("md").unwrap(), Format::Markdown);
        assert_eq!(
            Format::parse("pdf").unwrap_err(),
            ArchiveError::InvalidFormat
        );
    }
}
