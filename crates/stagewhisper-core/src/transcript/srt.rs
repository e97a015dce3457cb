//! SRT (SubRip): blocks separated by blank lines — a cue number, `hh:mm:ss,mmm --> hh:mm:ss,mmm`,
//! then text lines. The speaker comes from a `Name: ` prefix; `<i>`-style tags and `{\an8}` are
//! removed.

use super::{blocks, clip, join_lines, parse_timing, split_speaker, strip_markup, Cue, ParseError};

pub fn parse(text: &str) -> Result<Vec<Cue>, ParseError> {
    let mut cues = Vec::new();
    for (start, lines) in blocks(text) {
        let first = lines[0].trim();
        let (timing_at, number) = if first.contains("-->") {
            (0, None)
        } else if first.bytes().all(|b| b.is_ascii_digit()) {
            if lines.len() < 2 {
                return Err(ParseError::new(
                    start,
                    format!("cue {first} has no timing line (expected `00:00:01,000 --> 00:00:04,000` on the next line)"),
                ));
            }
            (1, Some(first))
        } else {
            return Err(ParseError::new(
                start,
                format!(
                    "expected a cue number or a timing line like `00:00:01,000 --> \
                     00:00:04,000`, got `{}`",
                    clip(first)
                ),
            ));
        };
        let line_no = start + timing_at;
        let (s, e) = parse_timing(lines[timing_at]).map_err(|m| {
            let m = match number {
                Some(n) => format!("cue {n}: {m}"),
                None => m,
            };
            ParseError::new(line_no, m)
        })?;
        let payload = &lines[timing_at + 1..];
        if let Some(k) = payload.iter().position(|l| l.contains("-->")) {
            return Err(ParseError::new(
                line_no + 1 + k,
                "a second timing line in one cue: separate cues with a blank line",
            ));
        }
        let raw = strip_markup(&payload.join("\n"));
        let text = join_lines(&raw.lines().collect::<Vec<_>>());
        if text.is_empty() {
            continue;
        }
        let (speaker, text) = split_speaker(&text);
        cues.push(Cue {
            line: start,
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

    #[test]
    fn parses_cues() {
        let s = "1\r\n00:00:01,000 --> 00:00:03,500\r\nAna: Hello <i>there</i>\r\nall of you\r\n\r\n\r\n2\r\n00:00:04,000 --> 00:00:05,000 X1:0\r\n{\\an8}Budget is 50k.\r\n\r\n3\r\n00:00:06,000 --> 00:00:07,000\r\n\r\n";
        let cues = parse(s).unwrap();
        assert_eq!(cues.len(), 2, "the empty cue 3 is skipped");
        assert_eq!(cues[0].speaker.as_deref(), Some("Ana"));
        assert_eq!(cues[0].text, "Hello there all of you");
        assert_eq!((cues[0].start_ms, cues[0].end_ms), (1000, Some(3500)));
        assert_eq!(cues[1].speaker, None);
        assert_eq!(cues[1].text, "Budget is 50k.");
        assert_eq!(cues[1].line, 7);
    }

    #[test]
    fn malformed_input_names_the_line() {
        let e = parse("hello\n").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(e.message.contains("expected a cue number"), "{e}");
        let e = parse("1\n00:00:01,000 --> 00:00:02,000\nok\n\n2\n").unwrap_err();
        assert_eq!(e.line, 5);
        assert!(e.message.contains("cue 2 has no timing line"), "{e}");
        let e =
            parse("1\n00:00:01,000 --> 00:00:02,000\nok\n\n2\n00:00:01,000 -> 00:00:02,000\nx\n")
                .unwrap_err();
        assert_eq!(e.line, 6);
        assert!(e.message.contains("cue 2: expected a timing line"), "{e}");
        let e = parse("\n\n7\n00:00:01,000 --> 00:00:0a,000\nx\n").unwrap_err();
        assert_eq!(e.line, 4);
        assert!(e.message.contains("bad end time `00:00:0a,000`"), "{e}");
        let e = parse("7\n00:00:09,000 --> 00:00:01,000\nx\n").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("ends"), "{e}");
        let e = parse("1\n00:00:01,000 --> 00:00:02,000\na\n00:00:02,000 --> 00:00:03,000\nb\n")
            .unwrap_err();
        assert_eq!(e.line, 4);
    }
}
