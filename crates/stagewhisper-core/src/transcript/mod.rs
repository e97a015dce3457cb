//! Transcript files for feeding a live call: WebVTT, SRT and JSONL parsers (errors carry line
//! numbers) and the replay client ([`replay`]) that posts the turns to a running app at real or
//! faster pace through `POST /api/calls/{id}/transcript`.

pub mod jsonl;
pub mod replay;
pub mod srt;
pub mod vtt;

use std::path::{Path, PathBuf};

/// One transcript turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Cue {
    /// Line of the file where the cue starts (1-based).
    pub line: usize,
    /// Offset from the start of the recording, in milliseconds.
    pub start_ms: i64,
    pub end_ms: Option<i64>,
    pub speaker: Option<String>,
    pub text: String,
    /// Only final turns are stored and forwarded (JSONL can carry interim ones).
    pub is_final: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    WebVtt,
    Srt,
    Jsonl,
}

impl Format {
    pub fn as_str(self) -> &'static str {
        match self {
            Format::WebVtt => "WebVTT",
            Format::Srt => "SRT",
            Format::Jsonl => "JSONL",
        }
    }

    /// By extension (`.vtt`, `.srt`, `.jsonl`/`.ndjson`/`.json`), else by content.
    pub fn detect(path: &Path, text: &str) -> Format {
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .map(str::to_ascii_lowercase);
        match ext.as_deref() {
            Some("vtt") => return Format::WebVtt,
            Some("srt") => return Format::Srt,
            Some("jsonl" | "ndjson" | "json") => return Format::Jsonl,
            _ => {}
        }
        let t = text.trim_start_matches('\u{feff}').trim_start();
        if t.starts_with("WEBVTT") {
            Format::WebVtt
        } else if t.starts_with('{') {
            Format::Jsonl
        } else {
            Format::Srt
        }
    }
}

/// A malformed transcript: where and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct ParseError {
    pub line: usize,
    pub message: String,
}

impl ParseError {
    pub fn new(line: usize, message: impl Into<String>) -> Self {
        ParseError {
            line,
            message: message.into(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not valid UTF-8 text")]
    NotUtf8 { path: PathBuf },
    #[error("{path} ({format}): {error}")]
    Parse {
        path: PathBuf,
        format: &'static str,
        error: ParseError,
    },
    #[error("{path} holds no transcript turns")]
    Empty { path: PathBuf },
}

/// Parses a transcript text in a given format.
pub fn parse(text: &str, format: Format) -> Result<Vec<Cue>, ParseError> {
    match format {
        Format::WebVtt => vtt::parse(text),
        Format::Srt => srt::parse(text),
        Format::Jsonl => jsonl::parse(text),
    }
}

/// Reads and parses a transcript file (format from the extension or the content).
pub fn load(path: &Path) -> Result<(Format, Vec<Cue>), LoadError> {
    let bytes = std::fs::read(path).map_err(|source| LoadError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let text = String::from_utf8(bytes).map_err(|_| LoadError::NotUtf8 {
        path: path.to_path_buf(),
    })?;
    let format = Format::detect(path, &text);
    let cues = parse(&text, format).map_err(|error| LoadError::Parse {
        path: path.to_path_buf(),
        format: format.as_str(),
        error,
    })?;
    if cues.is_empty() {
        return Err(LoadError::Empty {
            path: path.to_path_buf(),
        });
    }
    Ok((format, cues))
}

/// The latest time a transcript may name: a million hours (offsets past it are not a recording,
/// and keeping them this small keeps every sum of times far from overflowing).
pub const MAX_TIME_MS: i64 = 1_000_000 * 3_600_000;

/// `hh:mm:ss.mmm`, `mm:ss.mmm` (`,` also accepted as the decimal mark) → milliseconds; `None`
/// past [`MAX_TIME_MS`].
pub fn parse_timestamp(s: &str) -> Option<i64> {
    let s = s.trim();
    let (hms, frac) = match s.find(['.', ',']) {
        Some(i) => (&s[..i], &s[i + 1..]),
        None => (s, ""),
    };
    if frac.len() > 3 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let ms_frac: i64 = if frac.is_empty() {
        0
    } else {
        frac.parse::<i64>().ok()? * 10i64.pow(3 - frac.len() as u32)
    };
    let parts: Vec<&str> = hms.split(':').collect();
    if !(2..=3).contains(&parts.len())
        || parts
            .iter()
            .any(|p| p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()))
    {
        return None;
    }
    let nums: Vec<i64> = parts
        .iter()
        .map(|p| p.parse().ok())
        .collect::<Option<_>>()?;
    let (h, m, sec) = match nums.as_slice() {
        [m, s] => (0, *m, *s),
        [h, m, s] => (*h, *m, *s),
        _ => return None,
    };
    if m > 59 || sec > 59 || h > MAX_TIME_MS / 3_600_000 {
        return None;
    }
    Some(((h * 60 + m) * 60 + sec) * 1000 + ms_frac).filter(|ms| *ms <= MAX_TIME_MS)
}

/// Parses a `START --> END [settings]` line; the error names what is wrong.
pub(crate) fn parse_timing(line: &str) -> Result<(i64, i64), String> {
    let Some((a, b)) = line.split_once("-->") else {
        return Err(format!(
            "expected a timing line like `00:00:01.000 --> 00:00:04.000`, got `{}`",
            clip(line)
        ));
    };
    let start = parse_timestamp(a)
        .ok_or_else(|| format!("bad start time `{}` (expected hh:mm:ss.mmm)", a.trim()))?;
    let end_raw = b.split_whitespace().next().unwrap_or("");
    let end = parse_timestamp(end_raw)
        .ok_or_else(|| format!("bad end time `{end_raw}` (expected hh:mm:ss.mmm)"))?;
    if end < start {
        return Err(format!(
            "the cue ends ({}) before it starts ({})",
            end_raw,
            a.trim()
        ));
    }
    Ok((start, end))
}

pub(crate) fn clip(s: &str) -> String {
    let s = s.trim();
    if s.chars().count() > 60 {
        format!("{}…", s.chars().take(60).collect::<String>())
    } else {
        s.to_string()
    }
}

/// Removes markup tags (`<i>`, `<c.x>`, `<00:01.000>`, `{\an8}`) and decodes the entities.
pub(crate) fn strip_markup(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '<' => {
                for d in chars.by_ref() {
                    if d == '>' {
                        break;
                    }
                }
            }
            '{' if chars.peek() == Some(&'\\') => {
                for d in chars.by_ref() {
                    if d == '}' {
                        break;
                    }
                }
            }
            _ => out.push(c),
        }
    }
    out.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&nbsp;", " ")
        .replace("&lrm;", "")
        .replace("&rlm;", "")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&amp;", "&")
}

/// `Name: text` → (`Name`, `text`) when the prefix looks like a speaker label (short, up to four
/// words, starts with a letter, no sentence punctuation).
pub(crate) fn split_speaker(text: &str) -> (Option<String>, String) {
    if let Some((name, rest)) = text.split_once(':') {
        let n = name.trim();
        let looks_like_name = !n.is_empty()
            && n.chars().count() <= 32
            && n.split_whitespace().count() <= 4
            && n.chars().next().is_some_and(char::is_alphabetic)
            && n.chars()
                .all(|c| c.is_alphanumeric() || matches!(c, ' ' | '.' | '\'' | '-' | '_'))
            && !rest.trim().is_empty()
            && rest.starts_with([' ', '\t']);
        if looks_like_name {
            return (Some(n.to_string()), rest.trim().to_string());
        }
    }
    (None, text.trim().to_string())
}

/// Joins payload lines into one turn (collapsing whitespace).
pub(crate) fn join_lines(lines: &[&str]) -> String {
    lines
        .iter()
        .map(|l| l.trim())
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Splits a text into blocks separated by blank lines: `(first line number, lines)`.
pub(crate) fn blocks(text: &str) -> Vec<(usize, Vec<&str>)> {
    let mut out = Vec::new();
    let mut cur: Vec<&str> = Vec::new();
    let mut start = 0;
    for (i, line) in text.lines().enumerate() {
        let line = if i == 0 {
            line.trim_start_matches('\u{feff}')
        } else {
            line
        };
        if line.trim().is_empty() {
            if !cur.is_empty() {
                out.push((start, std::mem::take(&mut cur)));
            }
        } else {
            if cur.is_empty() {
                start = i + 1;
            }
            cur.push(line);
        }
    }
    if !cur.is_empty() {
        out.push((start, cur));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        assert_eq!(parse_timestamp("00:00:01.500"), Some(1500));
        assert_eq!(parse_timestamp("01:02:03,004"), Some(3_723_004));
        assert_eq!(parse_timestamp("02:03.4"), Some(123_400));
        assert_eq!(parse_timestamp("100:00:00.000"), Some(360_000_000));
        assert_eq!(parse_timestamp("1000000:00:00"), Some(MAX_TIME_MS));
        // Found by fuzzing (fuzz/, `transcript_vtt`): hours this large overflowed i64.
        assert_eq!(parse_timestamp("004444444444444444:00:01.000"), None);
        assert_eq!(parse_timestamp("9223372036854775807:00:00"), None);
        assert_eq!(parse_timestamp("1000000:00:00.001"), None);
        for bad in [
            "",
            "1",
            "00:61:00.000",
            "00:00:00.0000",
            "a:00:00",
            "00::00",
            "-1:00",
        ] {
            assert_eq!(parse_timestamp(bad), None, "{bad}");
        }
    }

    #[test]
    fn speakers_and_markup() {
        assert_eq!(
            split_speaker("Ana Lima: we can ship"),
            (Some("Ana Lima".into()), "we can ship".into())
        );
        assert_eq!(split_speaker("At 10:30 we start").0, None);
        assert_eq!(split_speaker("Note that: x").0, Some("Note that".into()));
        assert_eq!(split_speaker("http://x").0, None);
        assert_eq!(
            strip_markup("<i>hi</i> &amp; {\\an8}<c.loud>bye</c> &lt;3"),
            "hi & bye <3"
        );
    }

    #[test]
    fn detects_formats() {
        assert_eq!(Format::detect(Path::new("a.vtt"), ""), Format::WebVtt);
        assert_eq!(Format::detect(Path::new("a.SRT"), ""), Format::Srt);
        assert_eq!(
            Format::detect(Path::new("a.txt"), "\u{feff}WEBVTT\n"),
            Format::WebVtt
        );
        assert_eq!(
            Format::detect(Path::new("a"), " {\"text\":1}"),
            Format::Jsonl
        );
        assert_eq!(
            Format::detect(Path::new("a"), "1\n00:00:00,000 --> 00:00:01,000"),
            Format::Srt
        );
    }
}
