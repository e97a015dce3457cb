//! `stagewhisper transcribe FILE`: a recording through a speech engine, with the same
//! turn-making as live listening, printed as JSONL, WebVTT or text.
//!
//! `--speakers` tells the call's side's speakers apart by voice (`Speaker 1`, `Speaker 2`, … in
//! order of first appearance; a stereo file's left channel stays "You"), with the speaker model
//! of `--speaker-model` or the data dir's `models/speakers/campplus.onnx`; the labels are
//! decided over the whole file, so the segments are printed at the end. Without the model or
//! the ONNX Runtime library it fails at once (`no_speaker_model`, `no_onnx_runtime`, status 4).
//!
//! Exit status: 0 done (also when no speech was recognised: nothing is printed but the format's
//! header, and stderr says so); 1 the file cannot be read (missing, empty, not audio, an
//! unsupported format, truncated); 2 a usage error; 3 the engine failed (not installed, not
//! answering, refusing); 4 `--speakers` cannot run (no model, no ONNX Runtime, a bad model).
//! Every failure is one line on stderr:
//! `stagewhisper transcribe: <code>: <what and why>`.

use stagewhisper_audio::engine::builtin::{BuiltinConfig, BuiltinEngine};
use stagewhisper_audio::engine::openai::{OpenAiConfig, OpenAiEngine};
use stagewhisper_audio::engine::whisper::{self, WhisperConfig, WhisperEngine};
use stagewhisper_audio::engine::Engine;
use stagewhisper_audio::file::{inspect, transcribe_inspected, FileError, FileOptions, Format};
use stagewhisper_audio::models::models_dir;
use stagewhisper_core::app::default_data_dir;
use stagewhisper_core::audio::check_language;
use stagewhisper_speakers::{EmbedError, Embedder, MODEL_FILE};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The API key's environment variable (so that it need not be on the command line, where
/// every user of the machine can read it in `ps`).
pub const API_KEY_ENV: &str = "STAGEWHISPER_API_KEY";

#[derive(Debug, clap::Args)]
pub struct TranscribeArgs {
    /// The recording: a WAV file (any sample rate; mono, or stereo with the microphone on the
    /// left and the call on the right).
    pub file: PathBuf,
    /// `builtin` (PocketSphinx on this computer), `whisper` (Whisper on this computer, a ggml
    /// model) or `openai` (an OpenAI-compatible transcription server). Default: `openai` when
    /// --base-url is given, else `builtin`.
    #[arg(long, value_parser = ["builtin", "openai", "whisper"])]
    pub engine: Option<String>,
    /// The transcription server (`--engine openai`): the part before /v1/audio/transcriptions,
    /// e.g. http://127.0.0.1:8000. The recording is sent there, turn by turn.
    #[arg(long, value_name = "URL")]
    pub base_url: Option<String>,
    /// `--engine openai`: the model the server should use (default `whisper-1`).
    /// `--engine whisper`: a model's name (`tiny.en`: `ggml-tiny.en.bin` in the data dir's
    /// `models/`) or the path of a ggml model file (default: the installed one preferred).
    #[arg(long, value_name = "NAME|PATH")]
    pub model: Option<String>,
    /// `--engine whisper`: `auto` (detected per turn, the default) or an ISO-639-1 code to
    /// force (multilingual models).
    #[arg(long, value_name = "auto|CODE")]
    pub language: Option<String>,
    /// The server's API key (`--engine openai`; sent as a Bearer token). Prefer the
    /// environment variable: a command line is visible to every user of the machine.
    #[arg(long, value_name = "KEY", env = API_KEY_ENV, hide_env_values = true)]
    pub api_key: Option<String>,
    /// `jsonl` (one {"start_ms","end_ms","speaker","text"} a line, plus "language" when the
    /// engine tells it), `vtt` (WebVTT) or `text`.
    #[arg(long, default_value = "jsonl", value_parser = ["jsonl", "vtt", "text"])]
    pub format: String,
    /// Tell the call's speakers apart: `Speaker 1`, `Speaker 2`, … (a mono file, or a stereo
    /// file's right channel). Needs the speaker model and the ONNX Runtime library.
    #[arg(long)]
    pub speakers: bool,
    /// The speaker model (ONNX; default: the data dir's models/speakers/campplus.onnx).
    #[arg(long, value_name = "PATH", requires = "speakers")]
    pub speaker_model: Option<PathBuf>,
}

fn fail(code: &str, message: impl std::fmt::Display, status: i32) -> ! {
    eprintln!("stagewhisper transcribe: {code}: {message}");
    std::process::exit(status);
}

fn file_error(path: &Path, e: &FileError) -> ! {
    match e {
        FileError::Audio(a) => fail(e.code(), format!("{}: {a}", path.display()), 1),
        FileError::Engine(_) => fail(e.code(), e, 3),
    }
}

/// The speaker model, loaded (`--speakers`), or exit with status 4.
fn speaker_model(model: Option<PathBuf>, data_dir: Option<PathBuf>) -> Arc<Embedder> {
    let models = models_dir(&data_dir.unwrap_or_else(default_data_dir)).join("speakers");
    let path = model.unwrap_or_else(|| models.join(MODEL_FILE));
    match Embedder::load(&path, Some(&models)) {
        Ok(e) => Arc::new(e),
        Err(e @ EmbedError::NoModel(_)) => fail(
            e.code(),
            format!("{e} (put the CAM++ speaker model there, or give --speaker-model PATH)"),
            4,
        ),
        Err(e) => fail(e.code(), e, 4),
    }
}

/// The Whisper engine of `--model` (a name in `<data_dir>/models`, or a path), its model
/// loaded: one line and status 3 when it cannot be.
fn whisper_engine(
    file: &Path,
    model: Option<String>,
    language: Option<String>,
    data_dir: Option<PathBuf>,
) -> WhisperEngine {
    let language = language.unwrap_or_else(|| "auto".into());
    if let Err(e) = check_language(&language) {
        fail(e.code, e.message, 2);
    }
    let models = models_dir(&data_dir.unwrap_or_else(default_data_dir));
    let Some(model) = model.or_else(|| whisper::default_model(&models)) else {
        fail(
            "engine_unavailable",
            format!(
                "no Whisper model is installed in {}: give one with --model NAME|PATH or \
                 download one with `stagewhisper models download tiny.en`",
                models.display()
            ),
            3,
        );
    };
    let engine = WhisperEngine::new(WhisperConfig::new(&model, &language, &models))
        .unwrap_or_else(|e| file_error(file, &e.into()));
    if let Err(e) = engine.wait_loaded() {
        file_error(file, &e.into());
    }
    engine
}

/// Runs `transcribe`; exits the process with the status above. `data_dir`: where the Whisper
/// models named by name are (its `models/`).
pub fn run(args: TranscribeArgs, data_dir: Option<PathBuf>) -> ! {
    let TranscribeArgs {
        file,
        engine,
        base_url,
        model,
        language,
        api_key,
        format,
        speakers,
        speaker_model: speaker_model_path,
    } = args;
    let format = Format::parse(&format).expect("clap checked the format");
    let kind = engine.unwrap_or_else(|| {
        if base_url.is_some() {
            "openai".into()
        } else {
            "builtin".into()
        }
    });
    if kind != "openai" && base_url.is_some() {
        fail("usage", "--base-url is for --engine openai", 2);
    }
    if kind != "whisper" && language.is_some() {
        fail("usage", "--language is for --engine whisper", 2);
    }
    if kind == "openai" && base_url.is_none() {
        fail(
            "usage",
            "--engine openai needs --base-url (the transcription server, e.g. http://127.0.0.1:8000)",
            2,
        );
    }
    // The whole file is checked first: a bad one fails before anything is printed.
    let (layout, duration_ms) = inspect(&file).unwrap_or_else(|e| file_error(&file, &e));
    let opts = FileOptions {
        speakers: speakers.then(|| speaker_model(speaker_model_path, data_dir.clone())),
        ..FileOptions::default()
    };
    let engine: Box<dyn Engine> = match kind.as_str() {
        "openai" => Box::new(
            OpenAiEngine::new(OpenAiConfig::new(
                base_url.as_deref().unwrap_or_default(),
                model.as_deref().unwrap_or("whisper-1"),
                api_key,
            ))
            .unwrap_or_else(|e| file_error(&file, &e.into())),
        ),
        "whisper" => Box::new(whisper_engine(&file, model, language, data_dir)),
        _ => Box::new(
            BuiltinEngine::new(BuiltinConfig::default())
                .unwrap_or_else(|e| file_error(&file, &e.into())),
        ),
    };
    let mut out = std::io::stdout().lock();
    let mut write = |s: &str| {
        if let Err(e) = out.write_all(s.as_bytes()).and_then(|_| out.flush()) {
            if e.kind() == std::io::ErrorKind::BrokenPipe {
                // The reader has gone (`| head`): nothing more to say.
                std::process::exit(0);
            }
            fail(
                "write_failed",
                format!("cannot write the transcript: {e}"),
                1,
            );
        }
    };
    write(format.header());
    let report = transcribe_inspected(
        &file,
        layout,
        duration_ms,
        engine.as_ref(),
        &opts,
        &mut |segment| write(&format.render(&segment)),
    )
    .unwrap_or_else(|e| file_error(&file, &e));
    if report.segments == 0 {
        eprintln!(
            "stagewhisper transcribe: no speech recognised in {} ({} s of audio)",
            file.display(),
            duration_ms / 1000
        );
    }
    std::process::exit(0);
}
