//! Hearing the call: the seam between the core and the audio pipeline.
//!
//! The pipeline itself (capture from the sound server, voice activity, turns, speech
//! recognition engines, the backlog kept while an engine is down) lives in its own crate,
//! `stagewhisper-audio`, behind [`Ears`]. The core holds only what the rest of the app sees of
//! it:
//! - [`Ears`]: what the control API asks of the pipeline (`api::audio` holds the routes);
//! - the shapes those routes take and answer ([`AudioView`], [`AudioUpdate`], [`SourceView`],
//!   …), checked here so every engine and every transport refuses bad input with the same
//!   codes ([`AudioUpdate::check`]); the settings as saved (`AudioSettings`, with the engines'
//!   `EngineSettings`) are the audio crate's, kept in the settings store ([`crate::settings`]);
//! - [`EarsContext`]: what the pipeline reaches of the core. A final turn goes through
//!   [`EarsContext::submit_turn`], the very path of `POST /api/calls/{id}/transcript` (stored
//!   first, then the active assistant kind is woken), so the conversation rules and the kinds
//!   do not know whether a turn was typed, replayed or heard;
//! - the live-only events the pipeline publishes on the event hub
//!   ([`EarsContext::publish_live`]): partial transcripts, levels, its status
//!   ([`Change::TranscriptPartial`], [`Change::AudioLevel`], [`Change::AudioStatus`]).

pub use crate::answers::AudioError;
use crate::answers::MAX_USER_TEXT;
use crate::assistants::{Assistants, BoxFuture};
use crate::clock::SharedClock;
use crate::conversation::{Conversation, CoreError};
use crate::detect::{DetectionUpdate, DetectionView};
use crate::events::Change;
use crate::http::Shutdown;
use crate::model::TranscriptView;
pub use crate::model::{
    AudioStatus, BacklogStatus, Channel, ChannelStatus, EngineStatus, ListenState,
};
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;
use utoipa::ToSchema;

/// The default speaker of the microphone channel.
pub const DEFAULT_YOU: &str = "You";
/// The default speaker of the system-audio channel (the call's other side).
pub const DEFAULT_THEM: &str = "Them";

/// Longest speaker name of a transcript turn (heard or posted).
pub const MAX_SPEAKER: usize = 100;
/// Longest model name an engine setting takes.
pub const MAX_MODEL: usize = 200;
/// Longest API key an engine setting takes.
pub const MAX_API_KEY: usize = 4096;

/// What a sound server source is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum SourceKind {
    /// An input device (a microphone, a headset).
    Microphone,
    /// The monitor of an output device: what plays there (the call's other side).
    Monitor,
}

/// `GET /api/audio/sources`: one source of the sound server.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SourceView {
    /// The server's name of the source (what `mic` / `system` take).
    pub name: String,
    /// The name people read.
    pub description: String,
    pub kind: SourceKind,
    /// The server's default source (`kind: microphone`) or the monitor of its default output
    /// (`kind: monitor`): what `"default"` means for that channel.
    pub is_default: bool,
}

/// Where a channel listens: a source by name, the server's default, nowhere (`null`), or (the
/// call's audio only) one application's own playback (`{"app": "zoom"}`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "SystemChoice", into = "SystemChoice")]
pub enum SourceChoice {
    Off,
    Default,
    Named(String),
    /// Only what this application plays (its `application.name` or binary).
    App(String),
}

/// A channel's choice as the API spells it: a source name, `"default"`, `null`, or
/// `{"app": "<application>"}` (the call's audio only: that application's playback alone).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(untagged)]
pub enum SystemChoice {
    Source(Option<String>),
    App { app: String },
}

impl From<Option<String>> for SourceChoice {
    fn from(v: Option<String>) -> Self {
        match v {
            None => SourceChoice::Off,
            Some(s) if s == "default" => SourceChoice::Default,
            Some(s) => SourceChoice::Named(s),
        }
    }
}

impl From<SystemChoice> for SourceChoice {
    fn from(v: SystemChoice) -> Self {
        match v {
            SystemChoice::Source(s) => SourceChoice::from(s),
            SystemChoice::App { app } => SourceChoice::App(app.trim().to_string()),
        }
    }
}

impl From<SourceChoice> for SystemChoice {
    fn from(c: SourceChoice) -> Self {
        match c {
            SourceChoice::Off => SystemChoice::Source(None),
            SourceChoice::Default => SystemChoice::Source(Some("default".into())),
            SourceChoice::Named(s) => SystemChoice::Source(Some(s)),
            SourceChoice::App(app) => SystemChoice::App { app },
        }
    }
}

impl SourceChoice {
    pub fn is_off(&self) -> bool {
        matches!(self, SourceChoice::Off)
    }
}

/// `language` of a Whisper engine that detects the language of each turn.
pub const AUTO_LANGUAGE: &str = "auto";

/// The ISO-639-1 codes Whisper knows (its multilingual models' languages).
pub const WHISPER_LANGUAGES: &[&str] = &[
    "en", "zh", "de", "es", "ru", "ko", "fr", "ja", "pt", "tr", "pl", "ca", "nl", "ar", "sv", "it",
    "id", "hi", "fi", "vi", "he", "uk", "el", "ms", "cs", "ro", "da", "hu", "ta", "no", "th", "ur",
    "hr", "bg", "lt", "la", "mi", "ml", "cy", "sk", "te", "fa", "lv", "bn", "sr", "az", "sl", "kn",
    "et", "mk", "br", "eu", "is", "hy", "ne", "mn", "bs", "kk", "sq", "sw", "gl", "mr", "pa", "si",
    "km", "sn", "yo", "so", "af", "oc", "ka", "be", "tg", "sd", "gu", "am", "yi", "lo", "uz", "fo",
    "ht", "ps", "tk", "nn", "mt", "sa", "lb", "my", "bo", "tl", "mg", "as", "tt", "haw", "ln",
    "ha", "ba", "jw", "su", "yue",
];

/// `auto` or a language Whisper knows (`invalid_language` otherwise).
pub fn check_language(language: &str) -> Result<(), AudioError> {
    let l = language.trim();
    if l == AUTO_LANGUAGE || WHISPER_LANGUAGES.contains(&l) {
        return Ok(());
    }
    Err(AudioError::bad(
        "invalid_language",
        "`engine.language`: `auto` or an ISO-639-1 code Whisper knows (`en`, `de`, `fr`, …)",
    ))
}

/// A model name or path as an engine setting takes it (`invalid_model` otherwise).
pub fn check_model(model: &str) -> Result<(), AudioError> {
    let m = model.trim();
    if m.is_empty() || m.chars().count() > MAX_MODEL || m.chars().any(char::is_control) {
        return Err(AudioError::bad(
            "invalid_model",
            format!("`engine.model`: 1–{MAX_MODEL} characters"),
        ));
    }
    Ok(())
}

/// The engine as answered: never the API key itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct EngineView {
    /// `builtin`, `openai` or `whisper`.
    pub kind: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// `whisper`: `auto` or the ISO-639-1 code of the language forced.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    /// `openai`: whether an API key is saved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api_key_set: Option<bool>,
    /// The server is not on this computer: the call's audio is sent there.
    pub leaves_machine: bool,
    /// What happens to the call's audio, in plain words.
    pub notice: String,
}

/// Telling the call's side's speakers apart by voice (the data dir's
/// `models/speakers/campplus.onnx` and the ONNX Runtime library): "Them" turns become
/// "Speaker 1", "Speaker 2", ….
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct SpeakerSettings {
    pub enabled: bool,
}

/// `GET /api/audio`'s `speakers`: the setting and whether it can run here.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, ToSchema)]
pub struct SpeakersView {
    pub enabled: bool,
    /// The model and the ONNX Runtime library are there and load.
    pub available: bool,
    /// What is missing, or what is used, in plain words.
    pub detail: String,
}

/// `PUT /api/audio`. A field left out keeps its saved value.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct AudioUpdate {
    /// The microphone ("You"): a source `name`, `"default"` (the server's default source), or
    /// `null` (off).
    #[serde(default, deserialize_with = "crate::model::double_option")]
    #[schema(value_type = Option<String>)]
    pub mic: Option<Option<String>>,
    /// The call's audio ("Them"): a monitor source `name`, `"default"` (the monitor of the
    /// server's default output), `{"app": "zoom"}` (only what that application plays), or
    /// `null` (off).
    #[serde(default, deserialize_with = "crate::model::double_option")]
    #[schema(value_type = Option<SystemChoice>)]
    pub system: Option<Option<SystemChoice>>,
    /// `{"kind": "builtin"}`, `{"kind": "openai", "base_url", "model", "api_key"?}` or
    /// `{"kind": "whisper", "model", "language"?}`.
    pub engine: Option<EngineUpdate>,
    /// The speaker of the microphone's turns (1–100 characters).
    pub you_label: Option<String>,
    /// The speaker of the call audio's turns (1–100 characters).
    pub them_label: Option<String>,
    /// `{"enabled": true}`: tell the call's speakers apart.
    pub speakers: Option<SpeakerSettings>,
    /// Keep each new call's audio for "Transcribe again" (a call's own choice:
    /// `PUT /api/calls/{id}/recording`).
    pub keep_audio: Option<bool>,
}

/// An engine as `PUT /api/audio` takes it.
#[derive(Clone, Deserialize, ToSchema)]
#[serde(tag = "kind", rename_all = "lowercase")]
pub enum EngineUpdate {
    Builtin,
    Openai {
        /// `http://` or `https://` origin (a path prefix is allowed) of an OpenAI-compatible
        /// server; the app posts to `{base_url}/v1/audio/transcriptions`.
        base_url: String,
        /// The model the server should use (`whisper-1`, `tiny.en`, …).
        model: String,
        /// Sent as `Authorization: Bearer`; absent keeps the saved key (same `base_url`),
        /// `null` or `""` removes it. Never answered back.
        #[serde(default, deserialize_with = "crate::model::double_option")]
        #[schema(value_type = Option<String>)]
        api_key: Option<Option<String>>,
    },
    Whisper {
        /// A model's name (`tiny.en`, `base`, …: the file `ggml-<name>.bin` in the app's
        /// models folder) or the path of a ggml model file.
        model: String,
        /// `auto` (the default: detected per turn) or an ISO-639-1 code to force.
        #[serde(default)]
        language: Option<String>,
    },
}

impl std::fmt::Debug for EngineUpdate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EngineUpdate::Builtin => f.write_str("Builtin"),
            EngineUpdate::Openai {
                base_url, model, ..
            } => f
                .debug_struct("Openai")
                .field("base_url", base_url)
                .field("model", model)
                .finish_non_exhaustive(),
            EngineUpdate::Whisper { model, language } => f
                .debug_struct("Whisper")
                .field("model", model)
                .field("language", language)
                .finish(),
        }
    }
}

impl AudioUpdate {
    /// An update from its JSON as `PUT /api/audio` takes it, read and [checked](Self::check):
    /// the first refusal, with the route's code (`400`).
    pub fn from_json(v: serde_json::Value) -> Result<AudioUpdate, AudioError> {
        let u: AudioUpdate = crate::answers::from_value(v).map_err(|e| AudioError {
            status: 400,
            code: e.code,
            message: e.message,
        })?;
        u.check()?;
        Ok(u)
    }

    /// Checks everything that does not need the sound server: labels, the engine's URL and
    /// model. (Whether a named source exists is the pipeline's to check: `unknown_source`.)
    pub fn check(&self) -> Result<(), AudioError> {
        for (field, label) in [
            ("you_label", &self.you_label),
            ("them_label", &self.them_label),
        ] {
            if let Some(l) = label {
                let n = l.trim().chars().count();
                if n == 0 || n > MAX_SPEAKER || l.chars().any(char::is_control) {
                    return Err(AudioError::bad(
                        "invalid_label",
                        format!("`{field}`: 1–{MAX_SPEAKER} characters, no control characters"),
                    ));
                }
            }
        }
        if let Some(Some(SystemChoice::App { app })) = &self.system {
            crate::detect::check_app("system.app", app)?;
        }
        let system = match &self.system {
            Some(Some(SystemChoice::Source(s))) => Some(s.clone()),
            _ => None,
        };
        for (field, source) in [("mic", &self.mic), ("system", &system)] {
            if let Some(Some(name)) = source {
                if name.trim().is_empty() || name.len() > 1024 || name.chars().any(char::is_control)
                {
                    return Err(AudioError::bad(
                        "unknown_source",
                        format!("`{field}`: no source has that name"),
                    ));
                }
            }
        }
        if let Some(EngineUpdate::Openai {
            base_url,
            model,
            api_key,
        }) = &self.engine
        {
            check_base_url(base_url)?;
            check_model(model)?;
            if let Some(Some(k)) = api_key {
                if k.len() > MAX_API_KEY || k.chars().any(|c| c.is_control() || c == ' ') {
                    return Err(AudioError::bad(
                        "invalid_api_key",
                        "`engine.api_key`: no spaces or control characters, at most 4,096",
                    ));
                }
            }
        }
        if let Some(EngineUpdate::Whisper { model, language }) = &self.engine {
            check_model(model)?;
            if let Some(l) = language {
                check_language(l)?;
            }
        }
        Ok(())
    }
}

/// `http://` or `https://`, a host, no query, fragment or credentials.
pub fn check_base_url(raw: &str) -> Result<url::Url, AudioError> {
    let bad = |why: &str| AudioError::bad("invalid_url", format!("`engine.base_url`: {why}"));
    let u = url::Url::parse(raw.trim()).map_err(|e| match e {
        // The parser's words ("relative URL without a base") mean nothing to most people.
        url::ParseError::RelativeUrlWithoutBase => bad(
            "write the whole address, starting with http:// or https:// \
             (for example http://127.0.0.1:8000)",
        ),
        e => bad(&e.to_string()),
    })?;
    if !matches!(u.scheme(), "http" | "https") {
        return Err(bad("http:// or https:// only"));
    }
    if u.host_str().is_none_or(str::is_empty) {
        return Err(bad("no host"));
    }
    if u.query().is_some() || u.fragment().is_some() {
        return Err(bad("no query or fragment"));
    }
    if !u.username().is_empty() || u.password().is_some() {
        return Err(bad("put the key in `api_key`, not in the URL"));
    }
    Ok(u)
}

/// The host of a URL (the URL itself when it has none), for people to read.
pub fn host_of(raw: &str) -> String {
    url::Url::parse(raw)
        .ok()
        .and_then(|u| u.host_str().map(str::to_string))
        .unwrap_or_else(|| raw.to_string())
}

/// Whether a URL names this computer (`localhost`, 127.0.0.0/8, `::1`).
pub fn is_loopback_url(raw: &str) -> bool {
    match url::Url::parse(raw).ok().as_ref().and_then(url::Url::host) {
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        None => false,
    }
}

/// `GET /api/audio`: the settings and the status.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct AudioView {
    /// A source name, `"default"`, or `null` (off).
    #[schema(value_type = Option<String>)]
    pub mic: SourceChoice,
    #[schema(value_type = Option<SystemChoice>)]
    pub system: SourceChoice,
    pub engine: EngineView,
    pub you_label: String,
    pub them_label: String,
    pub speakers: SpeakersView,
    /// New calls keep their audio for "Transcribe again".
    pub keep_audio: bool,
    pub status: AudioStatus,
}

/// `POST /api/audio/test`: record a few seconds of one channel and transcribe them.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct AudioTest {
    /// `mic` (default) or `system`.
    pub channel: Option<Channel>,
    /// 1–10 (default 3).
    pub seconds: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct AudioTestResult {
    pub channel: Channel,
    /// The source recorded.
    pub source: String,
    pub seconds: f64,
    /// The loudest sample, 0–1 (0: nothing reached the source).
    pub peak: f32,
    /// What the engine heard (empty: nothing recognised).
    pub text: String,
}

/// `POST /api/audio/engine/check`.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct EngineCheckRequest {
    /// The engine to try, as `PUT /api/audio` takes it (an `openai` engine without `api_key`
    /// uses the saved key when it is for the same server); absent: the saved engine.
    pub engine: Option<EngineUpdate>,
}

/// What the control API asks of the audio pipeline. One implementation ships
/// (`stagewhisper-audio`); an app built without it answers `503 audio_unavailable`.
pub trait Ears: Send + Sync + 'static {
    /// The sound server's sources, microphones and monitors. `503 audio_unavailable` with the
    /// reason when no sound server is reachable.
    fn sources(&self) -> BoxFuture<'_, Result<Vec<SourceView>, AudioError>>;

    /// The settings and the current status.
    fn view(&self) -> AudioView;

    /// Saves new settings (already [checked](AudioUpdate::check)); while listening, a change of
    /// source or engine takes effect without stopping the call.
    fn update(&self, update: AudioUpdate) -> BoxFuture<'_, Result<AudioView, AudioError>>;

    /// Listens to `call_id` (the route has checked it is a live call). One call listens at a
    /// time: another call's listening stops. Remembered across restarts.
    fn listen(&self, call_id: &str) -> BoxFuture<'_, Result<(), AudioError>>;

    /// Stops listening to `call_id` (`None`: to whatever call). Turns already heard are still
    /// transcribed and stored.
    fn stop(&self, call_id: Option<&str>) -> BoxFuture<'_, ()>;

    /// The call being listened to.
    fn listening(&self) -> Option<String>;

    /// Records `seconds` of one channel and transcribes them with the current engine (nothing
    /// is stored).
    fn test(&self, test: AudioTest) -> BoxFuture<'_, Result<AudioTestResult, AudioError>>;

    /// Tries an engine (`None`: the saved one) on a short stretch of silence: one request to a
    /// server, or loading a local model. The outcome of the saved engine's try is its status
    /// too. (See [`crate::engine_check`].)
    fn check_engine(
        &self,
        engine: Option<EngineUpdate>,
    ) -> BoxFuture<'_, Result<crate::engine_check::EngineCheck, AudioError>>;

    /// Publishes the levels of both sources for the next `seconds` even while not listening
    /// (Settings shows its meters while it is open).
    fn meters(&self, seconds: u32) -> BoxFuture<'_, Result<(), AudioError>>;

    /// Stops capture and lets the turns in flight finish (the app is shutting down).
    fn shutdown(&self) -> BoxFuture<'_, ()>;

    /// "Transcribe again" a past call whose audio was kept ([`crate::recordings`]): checked
    /// here, then run on a thread of its own (progress as `transcribe_progress` events).
    fn transcribe_again(
        &self,
        _call_id: &str,
        _request: crate::recordings::TranscribeRequest,
    ) -> BoxFuture<'_, Result<crate::recordings::TranscribeView, AudioError>> {
        Box::pin(async {
            Err(AudioError::unavailable(
                "this build cannot transcribe again",
            ))
        })
    }

    /// The latest "Transcribe again" of `call_id` since the app started (running, or its end).
    fn transcribing(&self, _call_id: &str) -> Option<crate::recordings::TranscribeView> {
        None
    }

    /// A speaker of `call_id` (the call listened to, or the last one) renamed from `label` to
    /// `name`: the call's next turns of that voice carry `name`, and its voiceprint comes
    /// back (`None`: not a voice told apart in that call). See `crate::voiceprints`.
    fn rename_speaker(&self, _call_id: &str, _label: &str, _name: &str) -> Option<SpeakerPrint> {
        None
    }

    /// Call detection: settings, offers, status (`crate::detect`). A pipeline without it
    /// answers `503 audio_unavailable`.
    fn detection(&self) -> Result<DetectionView, AudioError> {
        Err(AudioError::unavailable("this build cannot notice calls"))
    }

    /// Saves detection settings (already [checked](DetectionUpdate::check)).
    fn set_detection(
        &self,
        _update: DetectionUpdate,
    ) -> BoxFuture<'_, Result<DetectionView, AudioError>> {
        Box::pin(async { Err(AudioError::unavailable("this build cannot notice calls")) })
    }

    /// The call `call_id` (listening already) was started from the offer of `app`: the offer
    /// closes, and the call is offered to end when the application lets go of the microphone.
    fn offer_accepted(&self, _app: &str, _call_id: &str) {}

    /// "Not now" (`never`: and never again for this application, remembered), or "keep the
    /// call" for a call offered to end. `404 offer_not_found` when `app` has neither.
    fn dismiss_offer(
        &self,
        _app: &str,
        _never: bool,
    ) -> BoxFuture<'_, Result<DetectionView, AudioError>> {
        Box::pin(async { Err(AudioError::unavailable("this build cannot notice calls")) })
    }
}

/// A voice told apart in a call: its voiceprint (unit length) and the speech it was made from.
#[derive(Debug, Clone, PartialEq)]
pub struct SpeakerPrint {
    pub embedding: Vec<f32>,
    pub speech_ms: u64,
}

/// What the pipeline reaches of the core.
#[derive(Clone)]
pub struct EarsContext {
    pub conversation: Conversation,
    pub link: Assistants,
    pub data_dir: PathBuf,
    /// The settings store (the pipeline keeps its settings in its `audio` section).
    pub settings: crate::settings::SettingsStore,
    pub shutdown: Shutdown,
    pub clock: SharedClock,
}

impl EarsContext {
    /// A final turn of a live call, exactly as `POST /api/calls/{id}/transcript` takes it:
    /// checked, stored, then the active assistant kind is woken to send it.
    pub async fn submit_turn(
        &self,
        call_id: &str,
        speaker: Option<&str>,
        text: &str,
        language: Option<&str>,
    ) -> Result<TranscriptView, TurnError> {
        let (speaker, text) = check_turn(speaker, text)?;
        let t = self
            .conversation
            .transcript_turn_in(call_id, speaker.as_deref(), &text, language)
            .await?;
        self.link.wake();
        Ok(t)
    }

    /// Publishes a live-only event (`Change::TranscriptPartial`, `AudioLevel`, `AudioStatus`).
    pub fn publish_live(&self, change: Change) {
        self.conversation.hub().publish_live(change);
    }
}

/// Why a turn was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TurnError {
    /// `400` with a code (`invalid_field`, `text_too_long`).
    #[error("{1}")]
    Invalid(&'static str, String),
    #[error(transparent)]
    Core(#[from] CoreError),
}

/// The checks of a transcript turn shared by the route and the pipeline: the speaker trimmed
/// (blank: none) and at most [`MAX_SPEAKER`] characters; speaker and text together at most
/// [`MAX_USER_TEXT`].
pub fn check_turn(
    speaker: Option<&str>,
    text: &str,
) -> Result<(Option<String>, String), TurnError> {
    let speaker = speaker
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty());
    if speaker
        .as_ref()
        .is_some_and(|s| s.chars().count() > MAX_SPEAKER)
    {
        return Err(TurnError::Invalid(
            "invalid_field",
            format!("`speaker` is at most {MAX_SPEAKER} characters"),
        ));
    }
    let sent_len =
        text.trim().chars().count() + speaker.as_ref().map_or(0, |s| s.chars().count() + 2);
    if sent_len > MAX_USER_TEXT {
        return Err(TurnError::Invalid(
            "text_too_long",
            format!("a transcript turn (with its speaker) is at most {MAX_USER_TEXT} characters"),
        ));
    }
    Ok((speaker, text.to_string()))
}

/// Builds the pipeline once the core is up (the app's start-up calls it with the context).
pub type EarsFactory = Box<dyn FnOnce(EarsContext) -> Arc<dyn Ears> + Send>;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn update(v: serde_json::Value) -> Result<AudioUpdate, AudioError> {
        AudioUpdate::from_json(v)
    }

    #[test]
    fn bad_updates_get_stable_codes() {
        for (body, code) in [
            (json!({"engine": {"kind": "vosk"}}), "invalid_field"),
            (
                json!({"engine": {"kind": "openai", "model": "m"}}),
                "missing_field",
            ),
            (
                json!({"engine": {"kind": "openai", "base_url": "ftp://x", "model": "m"}}),
                "invalid_url",
            ),
            (
                json!({"engine": {"kind": "openai", "base_url": "not a url", "model": "m"}}),
                "invalid_url",
            ),
            (
                json!({"engine": {"kind": "openai", "base_url": "http://u:p@h", "model": "m"}}),
                "invalid_url",
            ),
            (
                json!({"engine": {"kind": "openai", "base_url": "http://h", "model": " "}}),
                "invalid_model",
            ),
            (json!({"engine": {"kind": "whisper"}}), "missing_field"),
            (
                json!({"engine": {"kind": "whisper", "model": ""}}),
                "invalid_model",
            ),
            (
                json!({"engine": {"kind": "whisper", "model": "tiny", "language": "english"}}),
                "invalid_language",
            ),
            (
                json!({"engine": {"kind": "whisper", "model": "tiny", "language": "xx"}}),
                "invalid_language",
            ),
            (json!({"you_label": ""}), "invalid_label"),
            (json!({"them_label": "x".repeat(101)}), "invalid_label"),
            (json!({"mic": " "}), "unknown_source"),
            (json!({"mic": 5}), "invalid_field"),
        ] {
            assert_eq!(update(body.clone()).unwrap_err().code, code, "{body}");
        }
    }

    #[test]
    fn loopback_urls_stay_on_this_machine() {
        for u in [
            "http://127.0.0.1:8000",
            "http://localhost:9/x",
            "http://[::1]:1",
            "http://127.3.2.1",
        ] {
            assert!(is_loopback_url(u), "{u}");
        }
        for u in [
            "http://10.0.0.2",
            "https://api.openai.com",
            "http://localhost.example.com",
        ] {
            assert!(!is_loopback_url(u), "{u}");
        }
    }

    #[test]
    fn turns_are_checked_like_the_transcript_route() {
        assert_eq!(check_turn(Some("  "), "hi").unwrap(), (None, "hi".into()));
        assert!(matches!(
            check_turn(Some(&"x".repeat(101)), "hi"),
            Err(TurnError::Invalid("invalid_field", _))
        ));
        assert!(matches!(
            check_turn(Some("You"), &"x".repeat(MAX_USER_TEXT)),
            Err(TurnError::Invalid("text_too_long", _))
        ));
    }
}
