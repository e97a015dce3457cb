//! WebVTT: a `WEBVTT` header, then blocks separated by blank lines — cues (optional identifier,
//! `start --> end [settings]`, payload lines), `NOTE`, `STYLE` and `REGION` blocks (skipped).
//! The speaker comes from a voice tag (`<v Ana>` / `<v.loud Ana>`) or a `Name: ` prefix.

use super::{blocks, clip, join_lines, parse_timing, split_speaker, strip_markup, Cue, ParseError};

fn is_keyword_block(first: &str, kw: &str) -> bool {
    first
        .strip_prefix(kw)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '\t']))
}

/// The speaker of a `<v Name>` voice tag, if the payload has one.
fn voice(payload: &str) -> Option<String> {
    let i = payload.find("<v")?;
    let rest = &payload[i + 2..];
    if !rest.starts_with([' ', '.', '\t']) {
        return None;
    }
    let end = rest.find('>')?;
    let inner = &rest[..end];
    // `<v.class1.class2 Name>`: classes first, then the annotation.
    let name = match inner.strip_prefix('.') {
        Some(classes_and_name) => classes_and_name
            .split_once([' ', '\t'])
            .map(|(_, n)| n)
            .unwrap_or(""),
        None => inner,
    };
    // A tag can span lines: the name is its words, one space apart (no line breaks or CRs).
    let name = name.split_whitespace().collect::<Vec<_>>().join(" ");
    (!name.is_empty()).then_some(name)
}

pub fn parse(text: &str) -> Result<Vec<Cue>, ParseError> {
    let all = blocks(text);
    let Some((first_line, header)) = all.first() else {
        return Err(ParseError::new(
            1,
            "empty file: expected the `WEBVTT` header",
        ));
    };
    let sig = header[0];
    if *first_line != 1 || !is_keyword_block(sig, "WEBVTT") {
        return Err(ParseError::new(
            *first_line,
            format!("missing the `WEBVTT` header (got `{}`)", clip(sig)),
        ));
    }
    // Header lines (metadata) must not contain cue timings: a header glued to the first cue
    // without a blank line is a common mistake.
    for (k, l) in header.iter().enumerate().skip(1) {
        if l.contains("-->") {
            return Err(ParseError::new(
                first_line + k,
                "a cue timing inside the header: put a blank line after `WEBVTT`",
            ));
        }
    }
    let mut cues = Vec::new();
    for (start, lines) in all.iter().skip(1) {
        let first = lines[0];
        if is_keyword_block(first, "NOTE")
            || is_keyword_block(first, "STYLE")
            || is_keyword_block(first, "REGION")
        {
            continue;
        }
        let (timing_at, timing) = if first.contains("-->") {
            (0, first)
        } else if lines.len() > 1 && lines[1].contains("-->") {
            (1, lines[1])
        } else {
            return Err(ParseError::new(
                *start,
                format!(
                    "expected a cue (an optional identifier, then a timing line like \
                     `00:00:01.000 --> 00:00:04.000`), got `{}`",
                    clip(first)
                ),
            ));
        };
        let line_no = start + timing_at;
        let (s, e) = parse_timing(timing).map_err(|m| ParseError::new(line_no, m))?;
        let payload_lines = &lines[timing_at + 1..];
        if let Some(k) = payload_lines.iter().position(|l| l.contains("-->")) {
            return Err(ParseError::new(
                line_no + 1 + k,
                "a second timing line in one cue: separate cues with a blank line",
            ));
        }
        let raw = payload_lines.join("\n");
        let speaker_tag = voice(&raw);
        let text = join_lines(&strip_markup(&raw).lines().collect::<Vec<_>>());
        if text.is_empty() {
            continue;
        }
        let (speaker, text) = match speaker_tag {
            Some(v) => (Some(v), text),
            None => split_speaker(&text),
        };
        cues.push(Cue {
            line: *start,
            start_ms: s,
            end_ms: Some(e),
            speaker,
            text,
            is_final: true,
        });
    }
    Ok(cues)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "\u{feff}WEBVTT - a call\nKind: captions\n\nNOTE written by hand\nover two lines\n\n1\n00:00:01.000 --> 00:00:04.200 align:start\n<v Ana Lima>Hello, <i>everyone</i>.</v>\n\n00:05.000 --> 00:07.000\nBen: The budget is\nfifty thousand.\n\nSTYLE\n::cue { color: red }\n\nintro\n00:00:08.000 --> 00:00:09.000\n<v.loud Chris>Agreed &amp; done</v>\n\n00:00:10.000 --> 00:00:11.000\n\n";

    #[test]
    fn parses_cues_voices_and_skips_notes() {
        let cues = parse(GOOD).unwrap();
        assert_eq!(cues.len(), 3);
        assert_eq!(cues[0].speaker.as_deref(), Some("Ana Lima"));
        assert_eq!(cues[0].text, "Hello, everyone.");
        assert_eq!((cues[0].start_ms, cues[0].end_ms), (1000, Some(4200)));
        assert_eq!(cues[0].line, 7);
        assert_eq!(cues[1].speaker.as_deref(), Some("Ben"));
        assert_eq!(cues[1].text, "The budget is fifty thousand.");
        assert_eq!(cues[1].start_ms, 5000);
        assert_eq!(cues[2].speaker.as_deref(), Some("Chris"));
        assert_eq!(cues[2].text, "Agreed & done");
    }

    #[test]
    fn a_voice_name_over_several_lines_is_one_line() {
        // Found by fuzzing (fuzz/, `transcript_vtt`): a `<v` tag spanning lines kept the line
        // breaks and carriage returns in the speaker's name.
        let cues = parse("WEBVTT\n\n00:01.000 --> 00:02.000\n<v Ana\r\r\n  Lima\r>Hi\n").unwrap();
        assert_eq!(cues[0].speaker.as_deref(), Some("Ana Lima"));
        assert_eq!(cues[0].text, "Hi");
        let cues = parse("WEBVTT\n\n00:01.000 --> 00:02.000\n<v.loud\tBen\n Ito>Yes\n").unwrap();
        assert_eq!(cues[0].speaker.as_deref(), Some("Ben Ito"));
    }

    fn err(s: &str) -> ParseError {
        parse(s).unwrap_err()
    }

    #[test]
    fn malformed_input_names_the_line() {
        let e = err("");
        assert_eq!(e.line, 1);
        let e = err("1\n00:00:01.000 --> 00:00:02.000\nhi\n");
        assert_eq!(e.line, 1);
        assert!(e.message.contains("WEBVTT"), "{e}");
        let e = err("WEBVTT\n\n00:00:01.000 -> 00:00:02.000\nhi\n");
        assert_eq!(e.line, 3);
        assert!(e.message.contains("expected a cue"), "{e}");
        let e = err("WEBVTT\n\nid\n00:00:0x.000 --> 00:00:02.000\nhi\n");
        assert_eq!(e.line, 4);
        assert!(e.message.contains("bad start time `00:00:0x.000`"), "{e}");
        let e =
            err("WEBVTT\n\n00:00:01.000 --> 00:00:02\nhi\n\n00:00:03.000 --> 00:00:01.000\nx\n");
        assert_eq!(e.line, 6);
        assert!(e.message.contains("ends"), "{e}");
        let e = err("WEBVTT\n00:00:01.000 --> 00:00:02.000\nhi\n");
        assert_eq!(e.line, 2);
        assert!(e.message.contains("blank line after `WEBVTT`"), "{e}");
        let e =
            err("WEBVTT\n\n00:00:01.000 --> 00:00:02.000\nhi\n00:00:03.000 --> 00:00:04.000\nho\n");
        assert_eq!(e.line, 5);
        assert_eq!(e.to_string(), format!("line 5: {}", e.message));
        let e = err("WEBVTTX\n\n");
        assert_eq!(e.line, 1);
    }
}
