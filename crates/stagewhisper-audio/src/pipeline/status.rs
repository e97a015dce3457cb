//! The state of the pipeline as the service and its threads keep it (the settings, the call
//! listened to, each channel as its capture reports it, the engine) and the status built from
//! it: an [`AudioStatus`] with a `detail` in plain words for the call bar (what keeps the
//! pipeline from working first, then what to know), and the words it is said in.

use crate::capture::{Down, Source};
use crate::engine::EngineSettings;
use crate::engine::{Engine, EngineError, EngineErrorKind};
use crate::settings::AudioSettings;
use stagewhisper_core::audio::{
    AudioStatus, BacklogStatus, Channel, ChannelStatus, EngineStatus, ListenState, SourceChoice,
};
use std::collections::HashMap;
use std::sync::Arc;

/// A channel as its capture reports it.
#[derive(Debug, Clone)]
pub(crate) enum ChannelState {
    Starting,
    Recording(Source),
    Down(Down),
}

/// The current engine: built (or why it cannot be), and how its last attempt went.
pub(crate) struct EngineSlot {
    pub settings: EngineSettings,
    /// `None` until first needed (an app that never listens loads no engine).
    pub engine: Option<Result<Arc<dyn Engine>, EngineError>>,
    pub generation: u64,
    /// The last failure since its last success.
    pub failing: Option<EngineError>,
}

pub(crate) struct State {
    pub settings: AudioSettings,
    /// The call being listened to.
    pub listening: Option<String>,
    pub channels: HashMap<Channel, ChannelState>,
    /// Speech that could not be stored: its call ended (or was deleted) before the engine
    /// answered (seconds, since the app started).
    pub gone_seconds: f64,
}

/// The engine's status, and the kind of its failure when it fails.
pub(crate) fn engine_status(e: &EngineSlot) -> (EngineStatus, Option<EngineErrorKind>) {
    let kind = e.settings.kind().to_string();
    let (state, detail, failing) = match (&e.engine, &e.failing) {
        (None, _) => match &e.settings {
            EngineSettings::Whisper { model, .. } => (
                "ready",
                format!("Whisper {model}: the model loads when listening starts."),
                None,
            ),
            _ => ("ready", "Loads when listening starts.".to_string(), None),
        },
        (Some(Err(err)), _) | (Some(Ok(_)), Some(err)) => {
            let state = if err.kind == EngineErrorKind::Unavailable {
                "unavailable"
            } else {
                "down"
            };
            (state, engine_words(err), Some(err.kind))
        }
        (Some(Ok(engine)), None) => ("ready", engine.describe(), None),
    };
    (
        EngineStatus {
            kind,
            state: state.into(),
            detail,
        },
        failing,
    )
}

/// The status, with its plain-words detail: the engine's as [`engine_status`] told it
/// (`failing`: the kind of its failure), the backlog's, and the state's.
pub(crate) fn status(
    st: &State,
    engine: EngineStatus,
    failing: Option<EngineErrorKind>,
    backlog: BacklogStatus,
    disk_error: Option<String>,
) -> AudioStatus {
    // What keeps the pipeline from working (the state is `error`), then what to know.
    let mut errors: Vec<String> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let channels = match st.listening {
        Some(_) => channels(st, &mut errors),
        None => Vec::new(),
    };
    let waiting = backlog.turns > 0;
    if failing.is_some() {
        let mut s = format!("The speech engine: {}", lower_first(&engine.detail));
        if waiting {
            s.push_str(&format!(
                " {} kept and will be transcribed when it answers.",
                turns_words(&backlog)
            ));
        }
        errors.push(s);
    } else if waiting {
        notes.push(format!(
            "{} being transcribed.",
            capitalise(&turns_words(&backlog))
        ));
    }
    if backlog.dropped_seconds > 0.0 {
        notes.push(format!(
            "The backlog was full: the oldest {} of speech were dropped.",
            seconds_words(backlog.dropped_seconds)
        ));
    }
    if let Some(e) = disk_error {
        errors.push(format!(
            "Waiting turns cannot be written to disk ({e}): they are kept in memory only."
        ));
    }
    if st.gone_seconds > 0.0 {
        notes.push(format!(
            "{} of speech could not be added: the call had ended before the engine \
             answered.",
            capitalise(&seconds_words(st.gone_seconds))
        ));
    }
    let state = match &st.listening {
        None => ListenState::Idle,
        Some(_) if errors.is_empty() => ListenState::Listening,
        Some(_) => ListenState::Error,
    };
    let detail = std::iter::once(head(st, &channels))
        .chain(errors)
        .chain(notes)
        .collect::<Vec<_>>()
        .join(" ");
    AudioStatus {
        state,
        detail,
        call_id: st.listening.clone(),
        channels,
        engine,
        backlog,
    }
}

/// Each channel of the call listened to; what keeps them from working goes to `errors`.
fn channels(st: &State, errors: &mut Vec<String>) -> Vec<ChannelStatus> {
    let mut channels = Vec::new();
    let mut no_server: Option<String> = None;
    for ch in Channel::BOTH {
        let speaker = st.settings.label(ch).to_string();
        let (state, source, detail) = match (st.settings.source(ch), st.channels.get(&ch)) {
            (SourceChoice::Off, _) => ("off", None, "Off.".to_string()),
            (_, Some(ChannelState::Recording(src))) => (
                "listening",
                Some(src.name.clone()),
                format!("Listening to “{}”.", src.description),
            ),
            (_, Some(ChannelState::Down(d))) => {
                let detail = match d {
                    Down::NoServer(why) => {
                        no_server = Some(why.clone());
                        format!("No sound server: {why}.")
                    }
                    Down::NoSource(why) => {
                        errors.push(format!("{}: {why}.", capitalise(channel_words(ch))));
                        format!("{}.", capitalise(why))
                    }
                };
                ("error", None, detail)
            }
            (_, None | Some(ChannelState::Starting)) => {
                ("listening", None, "Starting…".to_string())
            }
        };
        channels.push(ChannelStatus {
            channel: ch,
            state: state.into(),
            speaker,
            source,
            detail,
        });
    }
    if let Some(why) = no_server {
        errors.insert(
            0,
            format!("No sound server: {why}. Listening starts when it is back."),
        );
    }
    if channels.iter().all(|c| c.state == "off") {
        errors.push(
            "Both sources are off: choose a microphone or the call's audio in Settings \
             → Audio."
                .into(),
        );
    }
    channels
}

/// The detail's first sentence: listening or not, and to what.
fn head(st: &State, channels: &[ChannelStatus]) -> String {
    match &st.listening {
        None => "Not listening.".to_string(),
        Some(_) => {
            let heard: Vec<&str> = channels
                .iter()
                .filter(|c| c.source.is_some())
                .map(|c| channel_words(c.channel))
                .collect();
            if heard.is_empty() {
                "Not hearing anything.".to_string()
            } else {
                format!("Listening to {}.", heard.join(" and "))
            }
        }
    }
}

pub(crate) fn channel_words(ch: Channel) -> &'static str {
    match ch {
        Channel::Mic => "your microphone",
        Channel::System => "the call's audio",
    }
}

pub(crate) fn engine_words(e: &EngineError) -> String {
    let msg = e.message.trim_end_matches('.');
    match e.kind {
        EngineErrorKind::Unavailable => format!("Cannot run on this computer: {msg}."),
        EngineErrorKind::Down => format!("Not answering ({msg})."),
        EngineErrorKind::Rejected => format!("Refused the audio ({msg})."),
        EngineErrorKind::Decode => {
            format!("Answered with something that is not a transcription ({msg}).")
        }
    }
}

fn seconds_words(s: f64) -> String {
    if s < 60.0 {
        format!("{} s", s.round() as u64)
    } else {
        format!(
            "{} min {} s",
            (s / 60.0).floor() as u64,
            (s % 60.0).round() as u64
        )
    }
}

fn turns_words(b: &BacklogStatus) -> String {
    format!(
        "{} turn{} ({} of speech) {}",
        b.turns,
        if b.turns == 1 { "" } else { "s" },
        seconds_words(b.seconds),
        if b.turns == 1 { "is" } else { "are" }
    )
}

pub(crate) fn capitalise(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_uppercase().chain(c).collect(),
        None => String::new(),
    }
}

pub(crate) fn lower_first(s: &str) -> String {
    let mut c = s.chars();
    match c.next() {
        Some(f) => f.to_lowercase().chain(c).collect(),
        None => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn amounts_read_as_people_say_them() {
        assert_eq!(seconds_words(7.4), "7 s");
        assert_eq!(seconds_words(125.0), "2 min 5 s");
        let b = BacklogStatus {
            turns: 1,
            seconds: 3.2,
            dropped_seconds: 0.0,
        };
        assert_eq!(turns_words(&b), "1 turn (3 s of speech) is");
        let e = EngineError::down("connection refused at 127.0.0.1:9");
        assert_eq!(
            engine_words(&e),
            "Not answering (connection refused at 127.0.0.1:9)."
        );
    }
}
