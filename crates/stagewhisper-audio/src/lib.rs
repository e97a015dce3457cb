//! Hearing the call: what turns sound into transcript turns.
//!
//! | module | holds |
//! |---|---|
//! | [`pcm`] | the engines' format ([`pcm::RATE`]: 16 kHz mono `i16`), WAV reading (any rate, mono or stereo, 8–32-bit int and float) and writing, a streaming resampler to 16 kHz |
//! | [`turns`] | voice activity (WebRTC's detector on 30 ms frames, plus an energy floor) and the [`turns::TurnMaker`]: where a turn starts, ends or is cut, from the sample count alone |
//! | [`engine`] | the [`engine::Engine`] / [`engine::Utterance`] traits every speech recognition engine implements, [`engine::EngineError`], the engines ([`engine::builtin`]: PocketSphinx in process; [`engine::openai`]: an OpenAI-compatible transcription server) and [`engine::build`] from the settings |
//! | [`file`] | a recording → turns → engine → segments `{start_ms, end_ms, speaker, text}` (`stagewhisper transcribe`) |
//! | [`capture`] | the sound server: sources (microphones, monitors of outputs), record streams by source name, devices that go and come back |
//! | [`pipeline`] | one listening call: per channel capture → resample → turns → engine, partials, finals in order into the transcript, echo dedupe, the backlog's drainer; what its threads share with the service (the state, its status in plain words) |
//! | [`detect`] | noticing the call: which applications hold a microphone (metadata only), the offers to listen |
//! | [`backlog`] | turns whose transcription failed, kept on disk (bounded) until they are stored |
//! | [`models`] | models a person chooses: the catalogue of Whisper models, downloads (resumed, SHA-256 checked), imports, removal, [`models::resolve`] of a setting's model name or path |
//! | [`speakers`] | who said it, live: the "Them" channel's turns labelled `Speaker 1`, `Speaker 2`, … by voice when the settings turn it on and the speaker model is there |
//! | [`settings`] | [`settings::AudioSettings`], the pipeline's settings as saved (with the engine's, [`engine::EngineSettings`]), and how `PUT /api/audio` changes them |
//! | [`service`] | [`service::AudioService`], the pipeline behind the control API (`stagewhisper_core::audio::Ears`): settings, status, listen/stop, test, meters |
//!
//! Engines are blocking on purpose: callers run them on threads of their own, never on the async
//! runtime's workers; so are capture and the backlog.

pub mod backlog;
pub mod capture;
pub mod detect;
pub mod engine;
pub mod file;
pub mod models;
pub mod pcm;
pub mod pipeline;
pub mod recording;
pub mod service;
pub mod settings;
pub mod speakers;
pub mod turns;

pub use service::{factory, AudioService};
