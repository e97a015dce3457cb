//! A voice → a speaker embedding: the CAM++ model (3D-Speaker, 192 values on 80-bin fbank
//! features) run through ONNX Runtime.
//!
//! **The runtime** is a shared library loaded when the first model is (`ort`'s
//! `load-dynamic`): the app starts, and hears calls as before, without it. It is looked for in
//! this order (see [`runtime_candidates`]): the `ORT_DYLIB_PATH` environment variable; the
//! folder of the model file; the data dir's `models/speakers/` (where the app keeps the model);
//! beside the executable and in `../lib/stagewhisper/` from it (a package's layout); then the
//! system's `libonnxruntime.so` by name. ONNX Runtime 1.17 or newer.
//!
//! **The model**: any ONNX export of CAM++ with one input `[batch, frames, 80]` (mean-normalised
//! log fbank, [`crate::fbank`]) and one output `[batch, 192]`: the one sherpa-onnx publishes
//! (`3dspeaker_speech_campplus_sv_zh_en_16k-common_advanced.onnx`) or the one this repository
//! makes for its tests (`tests/speakers/`).

use crate::fbank::{subtract_mean, Fbank, BINS};
use ort::environment::Environment;
use ort::session::Session;
use ort::value::Tensor;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// The shortest audio worth an embedding: 0.5 s.
pub const MIN_SAMPLES: usize = 8_000;
/// Longer audio is embedded in pieces of this many samples (10 s) and the pieces averaged
/// (by their length): the cost stays linear and the memory bounded.
pub const PIECE: usize = 160_000;

/// Why speaker embeddings cannot be made.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// No model file where it was looked for.
    #[error("no speaker model at {0}")]
    NoModel(PathBuf),
    /// The ONNX Runtime library cannot be loaded.
    #[error("the ONNX Runtime library cannot be loaded ({0}); install it or set ORT_DYLIB_PATH to libonnxruntime.so")]
    NoRuntime(String),
    /// The file is not a model this code can run.
    #[error("the speaker model cannot be used: {0}")]
    BadModel(String),
    /// Running it failed.
    #[error("the speaker model failed: {0}")]
    Run(String),
}

impl EmbedError {
    /// A stable code: `no_speaker_model`, `no_onnx_runtime`, `bad_speaker_model`,
    /// `speaker_model_failed`.
    pub fn code(&self) -> &'static str {
        match self {
            EmbedError::NoModel(_) => "no_speaker_model",
            EmbedError::NoRuntime(_) => "no_onnx_runtime",
            EmbedError::BadModel(_) => "bad_speaker_model",
            EmbedError::Run(_) => "speaker_model_failed",
        }
    }
}

/// Where the runtime library is looked for, in order (see the module's doc).
pub fn runtime_candidates(model: &Path, models_dir: Option<&Path>) -> Vec<PathBuf> {
    const NAME: &str = "libonnxruntime.so";
    let mut out = Vec::new();
    if let Some(p) = std::env::var_os("ORT_DYLIB_PATH").filter(|p| !p.is_empty()) {
        out.push(PathBuf::from(p));
    }
    let mut dirs: Vec<PathBuf> = Vec::new();
    if let Some(d) = model.parent() {
        dirs.push(d.to_path_buf());
    }
    if let Some(d) = models_dir {
        dirs.push(d.to_path_buf());
    }
    if let Some(exe) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_path_buf))
    {
        dirs.push(exe.join("../lib/stagewhisper"));
        dirs.push(exe);
    }
    for d in dirs {
        // The library as a wheel or a tarball names it: plain, or with its version.
        if let Ok(rd) = std::fs::read_dir(&d) {
            let mut found: Vec<PathBuf> = rd
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| {
                    p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n == NAME || n.starts_with("libonnxruntime.so.1"))
                })
                .collect();
            found.sort();
            out.extend(found);
        }
    }
    out.push(PathBuf::from(NAME));
    out
}

/// Loads the runtime from the first candidate that loads (once per process) and gives its
/// environment.
fn load_runtime(candidates: &[PathBuf]) -> Result<Environment, EmbedError> {
    static LOADED: Mutex<Option<Result<Environment, String>>> = Mutex::new(None);
    let mut loaded = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(r) = loaded.as_ref() {
        return r.clone().map_err(EmbedError::NoRuntime);
    }
    let mut why = String::from("nowhere to look");
    let mut result = None;
    for c in candidates {
        let env = ort::init_from(c).map_err(|e| e.to_string()).and_then(|b| {
            b.with_name("stagewhisper-speakers")
                .build()
                .map_err(|e| e.to_string())
        });
        match env {
            Ok(env) => {
                tracing::info!(library = %c.display(), "ONNX Runtime loaded");
                result = Some(env);
                break;
            }
            Err(e) => why = e,
        }
    }
    let result = result.ok_or(why);
    *loaded = Some(result.clone());
    result.map_err(EmbedError::NoRuntime)
}

/// The speaker model, loaded. Embeddings are made one at a time (a lock around the session).
pub struct Embedder {
    session: Mutex<Session>,
    fbank: Fbank,
    dim: usize,
}

impl std::fmt::Debug for Embedder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Embedder").field("dim", &self.dim).finish()
    }
}

impl Embedder {
    /// Loads `model` (and the runtime, the first time; `models_dir` is the data dir's models
    /// folder, one of the places the runtime is looked for). Uses one thread: the call's
    /// transcription has the others.
    pub fn load(model: &Path, models_dir: Option<&Path>) -> Result<Embedder, EmbedError> {
        if !model.is_file() {
            return Err(EmbedError::NoModel(model.to_path_buf()));
        }
        let env = load_runtime(&runtime_candidates(model, models_dir))?;
        let bad = |e: ort::Error| EmbedError::BadModel(e.to_string());
        let mut session = Session::builder(&env)
            .map_err(bad)?
            .with_intra_threads(1)
            .map_err(|e| bad(e.into()))?
            .commit_from_file(model)
            .map_err(bad)?;
        if session.inputs().len() != 1 || session.outputs().is_empty() {
            return Err(EmbedError::BadModel(
                "expected one input (fbank features) and an output (the embedding)".into(),
            ));
        }
        // One short run: the output's size, and a model that runs at all.
        let probe = vec![0i16; 16_000];
        let dim = run(&mut session, &Fbank::new(), &probe)?.len();
        if dim == 0 {
            return Err(EmbedError::BadModel("an empty embedding".into()));
        }
        Ok(Embedder {
            session: Mutex::new(session),
            fbank: Fbank::new(),
            dim,
        })
    }

    /// The embedding's length (192 for CAM++).
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The embedding of `samples` (16 kHz mono), of unit length; `None` for less than
    /// [`MIN_SAMPLES`] of sound (silence is left out first). Pieces of [`PIECE`] samples are
    /// averaged.
    pub fn embed(&self, samples: &[i16]) -> Result<Option<Vec<f32>>, EmbedError> {
        let samples = &audible(samples);
        if samples.len() < MIN_SAMPLES {
            return Ok(None);
        }
        let mut session = self.session.lock().unwrap_or_else(|e| e.into_inner());
        let mut sum = vec![0f32; self.dim];
        let pieces = samples.len().div_ceil(PIECE);
        let len = samples.len().div_ceil(pieces);
        for piece in samples.chunks(len) {
            if piece.len() < MIN_SAMPLES / 2 {
                continue;
            }
            let e = normalise(run(&mut session, &self.fbank, piece)?);
            let w = piece.len() as f32;
            for (s, v) in sum.iter_mut().zip(&e) {
                *s += v * w;
            }
        }
        Ok(Some(normalise(sum)))
    }
}

fn run(session: &mut Session, fbank: &Fbank, samples: &[i16]) -> Result<Vec<f32>, EmbedError> {
    let mut feats = fbank.compute(samples);
    subtract_mean(&mut feats);
    let frames = feats.len() / BINS;
    let err = |e: ort::Error| EmbedError::Run(e.to_string());
    let input = Tensor::from_array(([1usize, frames, BINS], feats)).map_err(err)?;
    let outputs = session.run(ort::inputs![input]).map_err(err)?;
    let (_, data) = outputs[0].try_extract_tensor::<f32>().map_err(err)?;
    Ok(data.to_vec())
}

/// Silence between words (a turn's pre-roll and hangover, pauses) left out: 20 ms blocks
/// quieter than about -66 dBFS. Digital silence otherwise weighs on the per-segment mean of the
/// features as much as speech, and makes every voice look alike.
pub fn audible(samples: &[i16]) -> Vec<i16> {
    const BLOCK: usize = 320;
    const FLOOR: f64 = 16.0;
    samples
        .chunks(BLOCK)
        .filter(|b| {
            let e = b.iter().map(|&s| (s as f64) * (s as f64)).sum::<f64>() / b.len() as f64;
            e.sqrt() >= FLOOR
        })
        .flatten()
        .copied()
        .collect()
}

/// `v` scaled to unit length (unchanged when it is all zeros).
pub fn normalise(mut v: Vec<f32>) -> Vec<f32> {
    let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if n > 0.0 {
        v.iter_mut().for_each(|x| *x /= n);
    }
    v
}

/// Cosine similarity of two vectors of unit length (their dot product).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}
