//! Whisper in process: whisper.cpp (through `whisper-rs`) running a ggml model file on the CPU.
//!
//! - **The model** is a name (`tiny.en`: the file `ggml-tiny.en.bin` in the app's models
//!   folder, `<data_dir>/models/`) or the path of a ggml file ([`model_path`]). It is loaded
//!   once per engine, on a thread of its own (`sw-whisper-load`), when the engine is built;
//!   [`Engine::begin`] waits for it. The loaded model is shared by every turn; each decode
//!   running uses a decoding state of its own (a few are kept between turns).
//! - **Short turns do not pay for 30 s**: Whisper's encoder is run on a context proportional
//!   to the turn (50 positions a second plus a margin, at least
//!   [`WhisperConfig::min_audio_ctx`]) instead of its full 1500; one segment, no timestamps.
//! - **No invented text**: the VAD has already gated the turn; Whisper's no-speech and
//!   log-prob thresholds with temperature fallback run inside the decode; a loop is cut and a
//!   turn that is only a stock phrase Whisper writes on silence is dropped ([`filter`]).
//! - **Languages**: English-only models (`*.en`) always write English. A multilingual model
//!   detects each turn's language (`auto`) or is forced to one; a forced language that is
//!   surely not what was heard (detected at ≥ 80 %) is flagged on the turn
//!   ([`Heard::language_mismatch`](super::Heard)) and the turn is written in the language
//!   heard, never garbled into the forced one.
//! - **Partials**: the audio so far is decoded in the background, one decode at a time, at most
//!   once per [`PartialPolicy::interval`] and less often when decodes are slow
//!   ([`PartialPolicy::max_cpu_share`]); [`Utterance::push`] never waits, and
//!   [`Utterance::finish`] aborts a partial still running.

mod decode;
pub mod filter;
mod utterance;

pub use decode::{audio_ctx_for, DecodeOptions, Decoded, MISMATCH_PROBABILITY};

use super::{Engine, EngineError, Utterance};
use decode::Model;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};
use whisper_rs::{WhisperContext, WhisperContextParameters};

/// Overrides the CPU threads of a decode (default [`default_threads`]).
pub const THREADS_ENV: &str = "STAGEWHISPER_WHISPER_THREADS";
/// The models preferred as the default engine's, best first, when several are installed.
const PREFERRED: &[&str] = &[
    "base.en",
    "base.en-q8_0",
    "tiny.en",
    "tiny.en-q8_0",
    "small.en-q8_0",
    "small.en",
    "base",
    "base-q8_0",
    "tiny",
    "tiny-q8_0",
];

/// A setting's `model` that is a path rather than a name.
fn is_path(model: &str) -> bool {
    model.contains('/') || model.ends_with(".bin")
}

/// The model file a setting's `model` names: a path as it is, a name as
/// `<models_dir>/ggml-<name>.bin`.
pub fn model_path(models_dir: &Path, model: &str) -> PathBuf {
    let m = model.trim();
    if is_path(m) {
        PathBuf::from(m)
    } else {
        models_dir.join(crate::models::file_name(m))
    }
}

/// The names of the models in `models_dir` (`ggml-<name>.bin` files), sorted.
pub fn installed_models(models_dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(models_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.path().is_file())
        .filter_map(|e| {
            let n = e.file_name().into_string().ok()?;
            Some(n.strip_prefix("ggml-")?.strip_suffix(".bin")?.to_string())
        })
        .filter(|n| !n.is_empty())
        .collect();
    names.sort();
    names
}

/// The model a person who never chose an engine gets: the first of [`PREFERRED`] installed,
/// else the first installed by name; `None` when the folder has none.
pub fn default_model(models_dir: &Path) -> Option<String> {
    let installed = installed_models(models_dir);
    PREFERRED
        .iter()
        .find(|p| installed.iter().any(|i| i == *p))
        .map(|p| p.to_string())
        .or_else(|| installed.into_iter().next())
}

/// CPU threads of a decode: [`THREADS_ENV`] when set, else 1. Measured on 2 busy cores
/// (JFK's 11 s, tiny.en): one thread 2.4 s of CPU, two threads 62 s (ggml's threads spin while
/// they wait for each other, and lose their core to other programs); each channel decodes on
/// its own thread anyway.
pub fn default_threads() -> usize {
    std::env::var(THREADS_ENV)
        .ok()
        .and_then(|v| v.trim().parse::<usize>().ok())
        .filter(|n| (1..=64).contains(n))
        .unwrap_or(1)
}

/// When partial decodes are made.
#[derive(Debug, Clone, PartialEq)]
pub struct PartialPolicy {
    pub enabled: bool,
    /// The least time between the starts of two partial decodes of a turn.
    pub interval: Duration,
    /// No partial before this much audio.
    pub min_audio: Duration,
    /// Partial decodes may take at most this share of one thread's time: after a decode that
    /// took `d`, the next one waits at least `d / max_cpu_share`.
    pub max_cpu_share: f64,
}

impl Default for PartialPolicy {
    fn default() -> Self {
        PartialPolicy {
            enabled: true,
            interval: Duration::from_secs(1),
            min_audio: Duration::from_millis(1000),
            max_cpu_share: 0.5,
        }
    }
}

/// Everything the engine needs.
#[derive(Debug, Clone)]
pub struct WhisperConfig {
    /// As the settings say it (a name or a path): what people are shown.
    pub model: String,
    /// The model file.
    pub path: PathBuf,
    /// `None`: detected per turn.
    pub language: Option<String>,
    /// CPU threads of a final decode.
    pub threads: usize,
    /// CPU threads of a partial decode (it runs beside capture and the other channel).
    pub partial_threads: usize,
    /// The least encoder context (positions, 50 a second; Whisper's full context is 1500;
    /// default 512, about 10 s).
    pub min_audio_ctx: i32,
    pub partials: PartialPolicy,
}

impl WhisperConfig {
    /// The settings' `model` (a name in `models_dir` or a path) and `language` (`auto` or a
    /// code), with the default threads and policies.
    pub fn new(model: &str, language: &str, models_dir: &Path) -> WhisperConfig {
        let language = language.trim();
        WhisperConfig {
            model: model.trim().to_string(),
            path: model_path(models_dir, model),
            language: (!language.is_empty() && language != "auto").then(|| language.to_string()),
            threads: default_threads(),
            partial_threads: 1,
            // Measured on the real speech clips (tiny.en q8_0, WER / CPU): 1500 (Whisper's
            // 30 s) 5.9 % / 26.5 s; 1024 7.6 % / 14.7 s; 512 6.8 % / 8.5 s; 384 6.8 %; 256
            // 22 % and 128 25 %: below about 8 s of context short turns loop ("go forward
            // ten meters go forward …").
            min_audio_ctx: 512,
            partials: PartialPolicy::default(),
        }
    }

    fn options(&self, threads: usize) -> DecodeOptions {
        DecodeOptions {
            threads,
            language: self.language.clone(),
            min_audio_ctx: self.min_audio_ctx,
        }
    }
}

enum Load {
    Loading,
    Ready(Arc<Model>),
    Failed(EngineError),
}

struct Loader {
    state: Mutex<Load>,
    done: Condvar,
}

/// Whisper in process.
pub struct WhisperEngine {
    cfg: Arc<WhisperConfig>,
    loader: Arc<Loader>,
}

/// ggml's magic, as the file starts with it (`ggml`, little-endian).
const GGML_MAGIC: u32 = 0x6767_6d6c;

/// Checks that `path` is a readable ggml file (quick: its first bytes).
fn check_file(cfg: &WhisperConfig) -> Result<(), EngineError> {
    let p = &cfg.path;
    let mut f = std::fs::File::open(p).map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound && !is_path(&cfg.model) {
            EngineError::unavailable(format!(
                "the Whisper model {} is not installed (no {}): download it in Settings → \
                 Audio → Model or with `stagewhisper models download {}`",
                cfg.model,
                p.display(),
                cfg.model
            ))
        } else {
            EngineError::unavailable(format!(
                "cannot read the Whisper model {}: {e}",
                p.display()
            ))
        }
    })?;
    let mut magic = [0u8; 4];
    if f.read_exact(&mut magic).is_err() || u32::from_le_bytes(magic) != GGML_MAGIC {
        return Err(EngineError::unavailable(format!(
            "{} is not a Whisper model in ggml format (whisper.cpp's `ggml-*.bin`)",
            p.display()
        )));
    }
    // The whole header, as the importer checks it: whisper.cpp trusts it, and a damaged one
    // (the magic right, the sizes not) brings the process down instead of failing.
    crate::models::ggml::Header::read(p).map_err(|why| {
        EngineError::unavailable(format!(
            "{} is not a usable Whisper model: {why}",
            p.display()
        ))
    })?;
    Ok(())
}

fn load(cfg: &WhisperConfig) -> Result<Model, EngineError> {
    let t = Instant::now();
    let mut params = WhisperContextParameters::default();
    params.use_gpu(false);
    let ctx = WhisperContext::new_with_params(&cfg.path, params).map_err(|e| {
        EngineError::unavailable(format!(
            "whisper.cpp could not load the model {} ({e}): the file is damaged or not a \
             Whisper model",
            cfg.path.display()
        ))
    })?;
    if ctx.n_vocab() < 100 || ctx.n_audio_ctx() <= 0 || ctx.n_text_ctx() <= 0 {
        return Err(EngineError::unavailable(format!(
            "{} is not a usable Whisper model (no vocabulary or context in its header)",
            cfg.path.display()
        )));
    }
    let model = Model::new(ctx);
    tracing::info!(model = %cfg.model, ms = t.elapsed().as_millis() as u64, multilingual = model.multilingual, "Whisper model loaded");
    Ok(model)
}

impl WhisperEngine {
    /// Checks the model file (quick) and starts loading it on a thread of its own;
    /// [`EngineErrorKind::Unavailable`](super::EngineErrorKind) when it is missing or not a
    /// ggml file.
    pub fn new(cfg: WhisperConfig) -> Result<WhisperEngine, EngineError> {
        whisper_rs::install_logging_hooks();
        check_file(&cfg)?;
        let cfg = Arc::new(cfg);
        let loader = Arc::new(Loader {
            state: Mutex::new(Load::Loading),
            done: Condvar::new(),
        });
        let (l, c) = (loader.clone(), cfg.clone());
        std::thread::Builder::new()
            .name("sw-whisper-load".into())
            .spawn(move || {
                let r = load(&c);
                *l.state.lock().unwrap_or_else(|e| e.into_inner()) = match r {
                    Ok(m) => Load::Ready(Arc::new(m)),
                    Err(e) => Load::Failed(e),
                };
                l.done.notify_all();
            })
            .map_err(|e| EngineError::unavailable(format!("cannot start a thread: {e}")))?;
        Ok(WhisperEngine { cfg, loader })
    }

    /// Waits for the model (loaded, or why not).
    fn model(&self) -> Result<Arc<Model>, EngineError> {
        let mut st = self.loader.state.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            match &*st {
                Load::Loading => st = self.loader.done.wait(st).unwrap_or_else(|e| e.into_inner()),
                Load::Ready(m) => return Ok(m.clone()),
                Load::Failed(e) => return Err(e.clone()),
            }
        }
    }

    /// Waits until the model is loaded: `Err` when it cannot be.
    pub fn wait_loaded(&self) -> Result<(), EngineError> {
        self.model().map(drop)
    }

    /// Whether the loaded model knows more languages than English (`None` while loading).
    pub fn multilingual(&self) -> Option<bool> {
        match &*self.loader.state.lock().unwrap_or_else(|e| e.into_inner()) {
            Load::Ready(m) => Some(m.multilingual),
            _ => None,
        }
    }

    pub fn config(&self) -> &WhisperConfig {
        &self.cfg
    }
}

impl Engine for WhisperEngine {
    fn kind(&self) -> &'static str {
        "whisper"
    }

    fn begin(&self) -> Result<Box<dyn Utterance>, EngineError> {
        Ok(Box::new(utterance::WhisperUtterance::new(
            self.model()?,
            self.cfg.clone(),
        )))
    }

    fn describe(&self) -> String {
        let lang = match &self.cfg.language {
            None => "language detected per turn".to_string(),
            Some(l) => format!("language {l}"),
        };
        match &*self.loader.state.lock().unwrap_or_else(|e| e.into_inner()) {
            Load::Loading => format!("Loading the Whisper model {}.", self.cfg.model),
            Load::Ready(m) if !m.multilingual => format!(
                "Ready: Whisper {} (English only), {} thread{}.",
                self.cfg.model,
                self.cfg.threads,
                if self.cfg.threads == 1 { "" } else { "s" }
            ),
            Load::Ready(_) => format!(
                "Ready: Whisper {} ({lang}), {} thread{}.",
                self.cfg.model,
                self.cfg.threads,
                if self.cfg.threads == 1 { "" } else { "s" }
            ),
            Load::Failed(e) => format!("The Whisper model {} did not load: {e}", self.cfg.model),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_are_named_or_given_by_path_and_the_default_is_the_preferred_installed() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        assert_eq!(model_path(d, "tiny.en"), d.join("ggml-tiny.en.bin"));
        assert_eq!(
            model_path(d, "/x/my-model.bin"),
            PathBuf::from("/x/my-model.bin")
        );
        assert_eq!(model_path(d, "m.bin"), PathBuf::from("m.bin"));
        assert_eq!(default_model(d), None);
        for f in [
            "ggml-small.bin",
            "ggml-tiny.en-q8_0.bin",
            "notes.txt",
            "ggml-.bin",
        ] {
            std::fs::write(d.join(f), b"x").unwrap();
        }
        assert_eq!(installed_models(d), ["small", "tiny.en-q8_0"]);
        assert_eq!(default_model(d).as_deref(), Some("tiny.en-q8_0"));
        std::fs::write(d.join("ggml-base.en.bin"), b"x").unwrap();
        assert_eq!(default_model(d).as_deref(), Some("base.en"));
        std::fs::remove_file(d.join("ggml-base.en.bin")).unwrap();
        std::fs::remove_file(d.join("ggml-tiny.en-q8_0.bin")).unwrap();
        assert_eq!(default_model(d).as_deref(), Some("small"));
    }

    #[test]
    fn a_missing_or_foreign_file_is_unavailable_with_what_to_do() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = WhisperConfig::new("tiny.en", "auto", dir.path());
        let e = WhisperEngine::new(cfg).err().unwrap();
        assert_eq!(e.kind, super::super::EngineErrorKind::Unavailable);
        assert!(e.message.contains("not installed"), "{e}");
        assert!(e.message.contains("models download tiny.en"), "{e}");
        let p = dir.path().join("x.bin");
        std::fs::write(&p, b"RIFF....WAVE").unwrap();
        let cfg = WhisperConfig::new(p.to_str().unwrap(), "de", dir.path());
        assert_eq!(cfg.language.as_deref(), Some("de"));
        let e = WhisperEngine::new(cfg).err().unwrap();
        assert!(e.message.contains("not a Whisper model"), "{e}");
    }

    /// A file with the `ggml` magic and a damaged header is refused before whisper.cpp reads
    /// it (whisper.cpp trusts the sizes it reads, and such a file brought the app down).
    #[test]
    fn a_damaged_header_is_refused_before_whisper_cpp_loads_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("junk.bin");
        std::fs::write(&file, b"lmgg not a model at all, whatever follows").unwrap();
        let cfg = WhisperConfig::new(file.to_str().unwrap(), "auto", dir.path());
        let e = WhisperEngine::new(cfg).err().unwrap();
        assert_eq!(e.kind, super::super::EngineErrorKind::Unavailable);
        assert!(e.message.contains("not a usable Whisper model"), "{e}");
    }
}
