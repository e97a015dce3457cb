//! What Whisper is known to write when nobody speaks: a whole turn that is only one of its
//! stock phrases ("Thank you.", "Thanks for watching!", "[BLANK_AUDIO]", "(music)", "you", …),
//! and a phrase looping ("I'm going to I'm going to I'm going to …").
//!
//! A decode that failed Whisper's log-prob threshold at every temperature gives nothing.
//! Applied to whole turns only: "thank you" inside a sentence is kept. A tag (`[BLANK_AUDIO]`,
//! `(music)`, `♪`) and a phrase nobody says as a call's whole turn ("You", "Thanks for
//! watching!") are always dropped; one that a person may really say ("Thank you.", "Bye.") only
//! when the decode itself doubted it was speech (see [`Evidence::doubtful`]).

/// Whole turns Whisper writes on silence, noise or music that nobody says as a turn of a
/// call: always dropped ("You" came, sure of itself, from a 300–900 Hz sweep).
const NEVER_A_TURN: &[&str] = &[
    "you",
    // A filler alone is no words for the assistant ("Oh" came from a sweep, log-prob -0.47).
    "oh",
    "uh",
    "um",
    "ah",
    "hmm",
    "thanks for watching",
    "thank you for watching",
    "thanks for watching and please subscribe",
    "please subscribe",
    "subscribe to my channel",
    "like and subscribe",
    "see you in the next video",
    "subtitles by the amaraorg community",
    "transcription by castingwords",
];

/// Phrases Whisper writes on silence, noise or music that a person may also say (lower case,
/// no punctuation), from its trackers and seen in our own runs: dropped when the decode doubted.
const STOCK_PHRASES: &[&str] = &[
    "thank you",
    "thank you very much",
    "thank you so much",
    "thanks",
    "see you next time",
    "bye",
    "bye bye",
    "so",
    "okay",
];

/// Whisper's log-prob threshold (whisper.cpp's and OpenAI's default): below it a decode is
/// tried again at a higher temperature.
pub const FAILED_LOGPROB: f32 = -1.0;
/// A turn's text below this mean log-prob is a guess, dropped.
pub const GUESS_LOGPROB: f32 = -1.5;

/// What the decode said about its own text.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Evidence {
    /// Whisper's probability that the audio holds no speech.
    pub no_speech: f32,
    /// The mean log-probability of the text's tokens.
    pub avg_logprob: f32,
}

impl Evidence {
    /// The decode doubted it heard speech: a stock phrase is then not trusted. (Whisper's own
    /// thresholds are 0.6 and -1.0 together; a stock phrase alone needs less doubt.)
    pub fn doubtful(&self) -> bool {
        self.no_speech > 0.2 || self.avg_logprob < -0.6
    }
}

/// Lower case, letters, digits and apostrophes, single spaces.
pub fn normalise(text: &str) -> String {
    text.split(|c: char| !(c.is_alphanumeric() || c == '\''))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect::<Vec<_>>()
        .join(" ")
}

/// A tag rather than words: `[BLANK_AUDIO]`, `(music)`, `*laughs*`, `♪ ♪`, or nothing.
fn is_tag(text: &str) -> bool {
    let t = text.trim();
    if t.is_empty() || t.chars().all(|c| !c.is_alphanumeric()) {
        return true;
    }
    let pairs = [('[', ']'), ('(', ')'), ('*', '*'), ('♪', '♪')];
    pairs
        .iter()
        .any(|(a, b)| t.starts_with(*a) && t.ends_with(*b) && t.chars().count() > 1)
}

/// Runs of the same phrase repeated in a row are cut to one (a decoding loop): a word more than
/// three times, a phrase of 2–8 words more than twice ("four queen of clubs four queen of clubs
/// four queen of clubs", seen on a 2 s turn). "no no no" stays as it is.
pub fn collapse_loops(text: &str) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    let key: Vec<String> = words.iter().map(|w| normalise(w)).collect();
    let mut out: Vec<&str> = Vec::with_capacity(words.len());
    let mut i = 0;
    'next: while i < words.len() {
        for n in 1..=8usize {
            if i + n > words.len() {
                break;
            }
            let mut reps = 1;
            while i + (reps + 1) * n <= words.len()
                && key[i + reps * n..i + (reps + 1) * n] == key[i..i + n]
            {
                reps += 1;
            }
            if reps > if n == 1 { 3 } else { 2 } {
                out.extend_from_slice(&words[i..i + n]);
                i += reps * n;
                continue 'next;
            }
        }
        out.push(words[i]);
        i += 1;
    }
    out.join(" ")
}

/// The text to keep of a turn, `""` for none.
pub fn clean(text: &str, evidence: Evidence) -> String {
    // Whisper falls back to higher temperatures until the mean log-prob of a decode reaches
    // -1: a text far below it failed at every temperature, a guess ("I left." at -4.3 on pink
    // noise). Real speech can land just below -1 on a short turn (JFK's "Ask not!": -1.09),
    // so only a clear failure is dropped.
    if evidence.avg_logprob < GUESS_LOGPROB {
        return String::new();
    }
    let text = collapse_loops(text.trim());
    if is_tag(&text) {
        return String::new();
    }
    let norm = normalise(&text);
    if NEVER_A_TURN.contains(&norm.as_str()) {
        return String::new();
    }
    if STOCK_PHRASES.contains(&norm.as_str()) && evidence.doubtful() {
        return String::new();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    const SURE: Evidence = Evidence {
        no_speech: 0.01,
        avg_logprob: -0.2,
    };
    const UNSURE: Evidence = Evidence {
        no_speech: 0.4,
        avg_logprob: -0.3,
    };

    #[test]
    fn tags_and_doubtful_stock_phrases_are_dropped_whole_turns_only() {
        for t in [
            "[BLANK_AUDIO]",
            "(music)",
            " ♪ ♪ ",
            "*laughs*",
            "...",
            "[ Silence ]",
        ] {
            assert_eq!(clean(t, SURE), "", "{t}");
        }
        for t in ["Thank you.", "Bye.", "Okay."] {
            assert_eq!(clean(t, UNSURE), "", "{t}");
            assert_eq!(clean(t, SURE), t.trim(), "a sure {t} is kept");
        }
        for t in ["You", " you.", "Thanks for watching!"] {
            assert_eq!(clean(t, SURE), "", "{t}");
        }
        let s = "Thank you, see you on Tuesday.";
        assert_eq!(clean(s, UNSURE), s);
        let failed = Evidence {
            no_speech: 0.0001,
            avg_logprob: -4.3,
        };
        assert_eq!(clean("I left.", failed), "");
        let short = Evidence {
            no_speech: 0.00001,
            avg_logprob: -1.09,
        };
        assert_eq!(clean("Ask not!", short), "Ask not!");
    }

    #[test]
    fn loops_are_cut_to_one_and_short_repeats_kept() {
        assert_eq!(
            collapse_loops("I'm going to I'm going to I'm going to I'm going to I'm going to go"),
            "I'm going to go"
        );
        assert_eq!(collapse_loops("no, no, no."), "no, no, no.");
        assert_eq!(collapse_loops("the the the the the end"), "the end");
        assert_eq!(collapse_loops("a b c"), "a b c");
        assert_eq!(
            collapse_loops("4. Queen of Cloves 4. Queen of Cloves 4. Queen of Cloves"),
            "4. Queen of Cloves"
        );
        assert_eq!(collapse_loops("go on, go on"), "go on, go on");
    }
}
