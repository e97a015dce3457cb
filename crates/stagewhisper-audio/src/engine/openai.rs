//! An OpenAI-compatible transcription server: the OpenAI API itself, a local faster-whisper or
//! whisper.cpp server, speaches, … — anything that answers
//! `POST {base_url}/v1/audio/transcriptions` (multipart: `file` = the turn as a 16 kHz mono WAV,
//! `model`, `response_format=json`, `language` when configured) with `{"text": …}`.
//!
//! - The API key goes in `Authorization: Bearer` when set; it is never logged, never in an
//!   error message (a server that echoes it back has it replaced), never in `Debug` output.
//! - Timeouts: connecting [`OpenAiConfig::connect_timeout`]; the whole request
//!   [`OpenAiConfig::timeout_base`] plus [`OpenAiConfig::timeout_per_audio_second`] per second
//!   of audio (a slow CPU server on a long turn is not a dead one).
//! - Failures map to [`EngineErrorKind`]: no connection, a timeout, 5xx, 408 and 429 are
//!   `Down` (try again later); other 4xx are `Rejected` (the settings need a change: a bad key,
//!   an unknown model, a wrong URL); a 2xx answer that is not `{"text": string}` is `Decode`.
//! - Partials ([`Utterance::partial`]): the audio so far is sent in the background, at most one
//!   request at a time, no sooner than [`PartialPolicy::interval`] after the previous one began;
//!   the latest answer is the partial text. [`Utterance::finish`] never waits for a partial:
//!   one still in flight is abandoned (its connection closed). A local one-model server works
//!   on one request at a time, so a partial it is still computing delays the final: partials
//!   pause while the server answers slower than [`PartialPolicy::max_latency_ratio`] × the
//!   audio it was sent, and stop for the turn after one fails.
//!
//! The HTTP client is the app's shared set-up (`stagewhisper_core::net::http::https_builder`:
//! the app's TLS roots, no proxy, no redirects, the connect timeout) and its requests run on the
//! runtime the app's blocking callers share (`stagewhisper_core::net::blocking`): callers still
//! see a blocking engine, and an abandoned partial can really be cancelled. Unlike the app's
//! other clients it keeps its connections open between requests: a partial every
//! [`PartialPolicy::interval`] to the same server would otherwise pay a new TCP (and TLS)
//! handshake each time.

use super::{Engine, EngineError, EngineErrorKind, Utterance};
use crate::pcm;
use stagewhisper_core::net::{blocking, http as nethttp};
use std::fmt;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The path every OpenAI-compatible server answers on.
pub const TRANSCRIPTIONS_PATH: &str = "/v1/audio/transcriptions";

/// When partial requests are made.
#[derive(Debug, Clone, PartialEq)]
pub struct PartialPolicy {
    /// No partials at all when false.
    pub enabled: bool,
    /// The least time between the starts of two partial requests of a turn.
    pub interval: Duration,
    /// No partial before this much audio.
    pub min_audio: Duration,
    /// A partial answer that took longer than this × the audio it carried pauses partials for
    /// the turn until the server is fast again (it is then busy, and the final would wait).
    pub max_latency_ratio: f64,
}

impl Default for PartialPolicy {
    fn default() -> Self {
        PartialPolicy {
            enabled: true,
            interval: Duration::from_millis(1500),
            min_audio: Duration::from_millis(1000),
            max_latency_ratio: 0.5,
        }
    }
}

/// Everything the engine needs.
#[derive(Clone)]
pub struct OpenAiConfig {
    /// `http(s)://host[:port][/prefix]`, without `/v1/audio/transcriptions`.
    pub base_url: String,
    pub model: String,
    pub api_key: Option<String>,
    /// ISO-639-1; sent only when set.
    pub language: Option<String>,
    pub connect_timeout: Duration,
    pub timeout_base: Duration,
    pub timeout_per_audio_second: f64,
    pub partials: PartialPolicy,
}

impl OpenAiConfig {
    pub fn new(base_url: &str, model: &str, api_key: Option<String>) -> OpenAiConfig {
        OpenAiConfig {
            base_url: base_url.trim().trim_end_matches('/').to_string(),
            model: model.trim().to_string(),
            api_key: api_key.filter(|k| !k.trim().is_empty()),
            language: None,
            connect_timeout: Duration::from_secs(5),
            timeout_base: Duration::from_secs(15),
            timeout_per_audio_second: 2.0,
            partials: PartialPolicy::default(),
        }
    }

    /// The request's whole-time limit for `audio_ms` of audio.
    pub fn timeout_for(&self, audio_ms: u64) -> Duration {
        self.timeout_base
            + Duration::from_secs_f64(audio_ms as f64 / 1000.0 * self.timeout_per_audio_second)
    }
}

impl fmt::Debug for OpenAiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiConfig")
            .field("base_url", &self.base_url)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "<set>"))
            .field("language", &self.language)
            .field("connect_timeout", &self.connect_timeout)
            .field("timeout_base", &self.timeout_base)
            .field("timeout_per_audio_second", &self.timeout_per_audio_second)
            .field("partials", &self.partials)
            .finish()
    }
}

/// Idle connections kept per server (a partial and the final may overlap by one request).
const IDLE_CONNECTIONS: usize = 2;

struct Shared {
    cfg: OpenAiConfig,
    url: reqwest::Url,
    client: reqwest::Client,
    /// The shared runtime of the app's blocking callers.
    rt: tokio::runtime::Handle,
}

impl Shared {
    /// Starts a transcription of `samples` on the shared runtime; its answer comes on the
    /// returned channel.
    fn spawn(
        self: &Arc<Self>,
        samples: &[i16],
    ) -> (
        mpsc::Receiver<Result<String, EngineError>>,
        tokio::task::AbortHandle,
    ) {
        let (tx, rx) = mpsc::sync_channel(1);
        let audio_ms = samples.len() as u64 * 1000 / pcm::RATE as u64;
        let wav = pcm::wav_bytes(samples);
        let me = self.clone();
        let task = self.rt.spawn(async move {
            let _ = tx.send(me.transcribe(wav, audio_ms).await);
        });
        (rx, task.abort_handle())
    }

    /// Transcribes `samples`, waiting for the answer (from any thread).
    fn transcribe_blocking(self: &Arc<Self>, samples: &[i16]) -> Result<String, EngineError> {
        let (rx, _abort) = self.spawn(samples);
        rx.recv().unwrap_or_else(|_| {
            Err(EngineError::down(
                "the transcription request was cut short (the engine is shutting down)",
            ))
        })
    }

    async fn transcribe(&self, wav: Vec<u8>, audio_ms: u64) -> Result<String, EngineError> {
        let file = reqwest::multipart::Part::bytes(wav)
            .file_name("turn.wav")
            .mime_str("audio/wav")
            .expect("a valid MIME type");
        let mut form = reqwest::multipart::Form::new()
            .part("file", file)
            .text("model", self.cfg.model.clone())
            .text("response_format", "json");
        if let Some(l) = &self.cfg.language {
            form = form.text("language", l.clone());
        }
        let mut req = self
            .client
            .post(self.url.clone())
            .multipart(form)
            .timeout(self.cfg.timeout_for(audio_ms));
        if let Some(key) = &self.cfg.api_key {
            req = req.bearer_auth(key);
        }
        let server = self.server();
        let resp = req.send().await.map_err(|e| self.transport_error(&e))?;
        let status = resp.status();
        let body = resp.bytes().await.map_err(|e| self.transport_error(&e))?;
        if status.is_success() {
            return parse_answer(&body).ok_or_else(|| {
                EngineError::decode(format!(
                    "the transcription server at {server} answered with something that is not a \
                     transcription ({})",
                    self.snippet(&body)
                ))
            });
        }
        let detail = self.server_message(&body);
        let code = status.as_u16();
        let said = if detail.is_empty() {
            String::new()
        } else {
            format!(": {detail}")
        };
        Err(match (kind_of_status(code), code) {
            (EngineErrorKind::Down, _) => EngineError::down(format!(
                "the transcription server at {server} is not answering now ({status}){said}"
            )),
            (EngineErrorKind::Rejected, 401 | 403) => EngineError::rejected(format!(
                "the transcription server at {server} refused the API key ({status}){said}"
            )),
            (EngineErrorKind::Rejected, 404) if detail.to_lowercase().contains("model") => {
                EngineError::rejected(format!(
                    "the transcription server at {server} does not have the model `{}` \
                     ({status}){said}",
                    self.cfg.model
                ))
            }
            (EngineErrorKind::Rejected, 404 | 405) => EngineError::rejected(format!(
                "{server} has no {TRANSCRIPTIONS_PATH} ({status}); is the URL that of an \
                 OpenAI-compatible transcription server?"
            )),
            (EngineErrorKind::Rejected, _) => EngineError::rejected(format!(
                "the transcription server at {server} refused the request ({status}){said}"
            )),
            _ => EngineError::decode(format!(
                "the transcription server at {server} gave an unexpected answer ({status})"
            )),
        })
    }

    /// `scheme://host[:port]` of the server (what people recognise; no path, no key).
    fn server(&self) -> String {
        let u = &self.url;
        match u.port() {
            Some(p) => format!("{}://{}:{p}", u.scheme(), u.host_str().unwrap_or("?")),
            None => format!("{}://{}", u.scheme(), u.host_str().unwrap_or("?")),
        }
    }

    fn transport_error(&self, e: &reqwest::Error) -> EngineError {
        let server = self.server();
        let why = if e.is_timeout() {
            "it did not answer in time".to_string()
        } else if e.is_connect() {
            format!("cannot connect ({})", root_cause(e))
        } else {
            format!("the connection failed ({})", root_cause(e))
        };
        EngineError::down(self.scrub(&format!(
            "the transcription server at {server} is not answering: {why}"
        )))
    }

    /// The error message of an OpenAI-style (`{"error": {"message"}}`), FastAPI-style
    /// (`{"detail"}`) or plain-text answer, shortened and scrubbed.
    fn server_message(&self, body: &[u8]) -> String {
        let v: Option<serde_json::Value> = serde_json::from_slice(body).ok();
        let msg = v
            .as_ref()
            .and_then(|v| {
                v.pointer("/error/message")
                    .or_else(|| v.get("error"))
                    .or_else(|| v.get("detail"))
                    .or_else(|| v.get("message"))
            })
            .and_then(|m| m.as_str().map(str::to_string));
        match msg {
            Some(m) => self.scrub(&shorten(&m, 200)),
            None => self.snippet(body),
        }
    }

    fn snippet(&self, body: &[u8]) -> String {
        let text = String::from_utf8_lossy(body);
        self.scrub(&shorten(text.trim(), 120))
    }

    /// Never the API key in a message, even if a server echoes it.
    fn scrub(&self, s: &str) -> String {
        let s: String = s
            .chars()
            .map(|c| if c.is_control() { ' ' } else { c })
            .collect();
        match &self.cfg.api_key {
            Some(k) if k.len() >= 4 => s.replace(k.as_str(), "<api key>"),
            _ => s,
        }
    }
}

fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cur = e;
    while let Some(next) = cur.source() {
        cur = next;
    }
    cur.to_string()
}

fn shorten(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(max).collect::<String>())
    }
}

/// `{"text": "…"}` → the text, trimmed (whitespace runs made single spaces).
fn parse_answer(body: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    let text = v.get("text")?.as_str()?;
    Some(text.split_whitespace().collect::<Vec<_>>().join(" "))
}

/// The OpenAI-compatible engine.
pub struct OpenAiEngine {
    shared: Arc<Shared>,
}

impl fmt::Debug for OpenAiEngine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenAiEngine")
            .field("cfg", &self.shared.cfg)
            .finish()
    }
}

impl OpenAiEngine {
    /// Checks the URL and makes the client (no request is made). `Rejected` for a URL that is
    /// not `http(s)://host…`.
    pub fn new(cfg: OpenAiConfig) -> Result<OpenAiEngine, EngineError> {
        // The URL itself is not repeated: it may hold credentials.
        let bad = |why: &str| {
            EngineError::rejected(format!("the transcription server URL is not usable: {why}"))
        };
        let base = reqwest::Url::parse(&cfg.base_url).map_err(|e| bad(&e.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") || base.host_str().is_none() {
            return Err(bad("it must be http:// or https:// and name a host"));
        }
        if !base.username().is_empty() || base.password().is_some() {
            return Err(bad("put the API key in its own setting, not in the URL"));
        }
        if cfg.model.is_empty() {
            return Err(EngineError::rejected(
                "no model is set for the transcription server",
            ));
        }
        let url = reqwest::Url::parse(&format!(
            "{}{TRANSCRIPTIONS_PATH}",
            cfg.base_url.trim_end_matches('/')
        ))
        .map_err(|e| bad(&e.to_string()))?;
        let unavailable = |e: &dyn fmt::Display| {
            EngineError::unavailable(format!("cannot start the HTTP client: {e}"))
        };
        let rt = blocking::handle().map_err(|e| unavailable(&e))?;
        let client = nethttp::https_builder(cfg.connect_timeout)
            .pool_max_idle_per_host(IDLE_CONNECTIONS)
            .user_agent(concat!("stagewhisper/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| unavailable(&e))?;
        Ok(OpenAiEngine {
            shared: Arc::new(Shared {
                cfg,
                url,
                client,
                rt,
            }),
        })
    }

    pub fn config(&self) -> &OpenAiConfig {
        &self.shared.cfg
    }

    /// Transcribes a whole clip at once (no partials).
    pub fn transcribe(&self, samples: &[i16]) -> Result<String, EngineError> {
        self.shared.transcribe_blocking(samples)
    }
}

impl Engine for OpenAiEngine {
    fn kind(&self) -> &'static str {
        "openai"
    }

    fn begin(&self) -> Result<Box<dyn Utterance>, EngineError> {
        Ok(Box::new(OpenAiUtterance {
            shared: self.shared.clone(),
            samples: Vec::new(),
            text: None,
            in_flight: None,
            last_began: None,
            sent_len: 0,
            paused: false,
            stopped: false,
        }))
    }
}

struct InFlight {
    rx: mpsc::Receiver<Result<String, EngineError>>,
    abort: tokio::task::AbortHandle,
    began: Instant,
    audio: Duration,
}

struct OpenAiUtterance {
    shared: Arc<Shared>,
    samples: Vec<i16>,
    /// The latest partial answer.
    text: Option<String>,
    in_flight: Option<InFlight>,
    last_began: Option<Instant>,
    /// Samples the latest partial request carried.
    sent_len: usize,
    /// The server answered slowly: partials wait until one comes back fast.
    paused: bool,
    /// A partial failed: no more partials this turn.
    stopped: bool,
}

impl OpenAiUtterance {
    fn audio_of(samples: usize) -> Duration {
        Duration::from_secs_f64(samples as f64 / pcm::RATE as f64)
    }

    fn collect(&mut self) {
        let Some(f) = &self.in_flight else {
            return;
        };
        let answer = match f.rx.try_recv() {
            Ok(a) => a,
            Err(mpsc::TryRecvError::Empty) => return,
            Err(mpsc::TryRecvError::Disconnected) => Err(EngineError::down("partial dropped")),
        };
        let took = f.began.elapsed();
        let slow =
            took.as_secs_f64() > f.audio.as_secs_f64() * self.shared.cfg.partials.max_latency_ratio;
        self.in_flight = None;
        match answer {
            Ok(t) => {
                self.paused = slow;
                if !t.is_empty() {
                    self.text = Some(t);
                }
            }
            Err(e) => {
                tracing::debug!(kind = %e.kind, "a partial transcription failed: {e}");
                self.stopped = true;
            }
        }
    }
}

impl Utterance for OpenAiUtterance {
    fn push(&mut self, samples: &[i16]) -> Result<(), EngineError> {
        self.samples.extend_from_slice(samples);
        Ok(())
    }

    fn partial(&mut self) -> Option<String> {
        self.collect();
        let p = &self.shared.cfg.partials;
        let due = self.last_began.is_none_or(|t| t.elapsed() >= p.interval);
        let grown = self.samples.len() > self.sent_len;
        // A paused turn tries again only once the server has had time to catch up (a second
        // interval), so a busy server is not kept busy.
        let paused = self.paused
            && self
                .last_began
                .is_some_and(|t| t.elapsed() < p.interval * 2);
        if p.enabled
            && !self.stopped
            && !paused
            && self.in_flight.is_none()
            && due
            && grown
            && Self::audio_of(self.samples.len()) >= p.min_audio
        {
            let (rx, abort) = self.shared.spawn(&self.samples);
            self.in_flight = Some(InFlight {
                rx,
                abort,
                began: Instant::now(),
                audio: Self::audio_of(self.samples.len()),
            });
            self.last_began = Some(Instant::now());
            self.sent_len = self.samples.len();
        }
        self.text.clone()
    }

    fn finish(mut self: Box<Self>) -> Result<String, EngineError> {
        if let Some(f) = self.in_flight.take() {
            f.abort.abort();
        }
        if self.samples.is_empty() {
            return Ok(String::new());
        }
        self.shared.transcribe_blocking(&self.samples)
    }
}

impl Drop for OpenAiUtterance {
    fn drop(&mut self) {
        if let Some(f) = self.in_flight.take() {
            f.abort.abort();
        }
    }
}

/// What an HTTP status that is not a success means.
fn kind_of_status(status: u16) -> EngineErrorKind {
    match status {
        408 | 429 | 500..=599 => EngineErrorKind::Down,
        400..=499 => EngineErrorKind::Rejected,
        _ => EngineErrorKind::Decode,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_and_messages() {
        assert_eq!(
            parse_answer(br#"{"text": "  hello\n there "}"#).as_deref(),
            Some("hello there")
        );
        assert_eq!(parse_answer(b"<html>"), None);
        assert_eq!(parse_answer(br#"{"segments": []}"#), None);
        assert_eq!(parse_answer(br#"{"text": 5}"#), None);
        let e = OpenAiEngine::new(OpenAiConfig::new(
            "http://127.0.0.1:9/",
            "m",
            Some("sk-very-secret".into()),
        ))
        .unwrap();
        let s = &e.shared;
        assert_eq!(s.url.as_str(), "http://127.0.0.1:9/v1/audio/transcriptions");
        assert_eq!(
            s.server_message(br#"{"error": {"message": "bad key sk-very-secret"}}"#),
            "bad key <api key>"
        );
        assert_eq!(s.server_message(br#"{"detail": "nope"}"#), "nope");
        assert_eq!(s.server_message(b"plain\ntext"), "plain text");
        assert!(!format!("{e:?}").contains("sk-very-secret"));
    }

    #[test]
    fn bad_settings_are_rejected() {
        for url in ["not a url", "ftp://h", "http://user:pw@h", "file:///x"] {
            let e = OpenAiEngine::new(OpenAiConfig::new(url, "m", None)).unwrap_err();
            assert_eq!(e.kind, EngineErrorKind::Rejected, "{url}");
            assert!(!e.message.contains("pw"), "{}", e.message);
        }
        let e = OpenAiEngine::new(OpenAiConfig::new("http://h", " ", None)).unwrap_err();
        assert_eq!(e.kind, EngineErrorKind::Rejected);
        assert_eq!(kind_of_status(503), EngineErrorKind::Down);
        assert_eq!(kind_of_status(429), EngineErrorKind::Down);
        assert_eq!(kind_of_status(401), EngineErrorKind::Rejected);
        // A prefix path is kept.
        let e = OpenAiEngine::new(OpenAiConfig::new("https://h.example/api/", "m", None)).unwrap();
        assert_eq!(
            e.shared.url.as_str(),
            "https://h.example/api/v1/audio/transcriptions"
        );
        // Dropped on an async worker thread: no panic (the shared runtime is never dropped).
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async move { drop(e) });
    }
}
