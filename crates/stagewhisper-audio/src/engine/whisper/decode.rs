//! One decode of a turn's audio with a loaded model: the parameters (a reduced encoder
//! context, one segment, no timestamps, Whisper's no-speech / log-prob thresholds with
//! temperature fallback), the language (detected, forced, or forced but not what was heard),
//! and the filters of [`super::filter`].

use super::filter::{self, Evidence};
use crate::engine::EngineError;
use crate::pcm::RATE;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use whisper_rs::{FullParams, SamplingStrategy, WhisperContext, WhisperState};

/// Encoder positions per second of audio (Whisper's encoder: 100 mel frames a second,
/// halved by its second convolution).
const CTX_PER_SECOND: f64 = 50.0;
/// Positions added after the audio (0.64 s): the last word is not cut.
const CTX_MARGIN: i32 = 32;
/// whisper.cpp ignores audio shorter than a second: shorter turns are padded with silence.
const MIN_SAMPLES: usize = RATE as usize * 21 / 20;
/// A forced language is said not to be the one heard when detection gives another this
/// likely.
pub const MISMATCH_PROBABILITY: f32 = 0.8;

/// How decodes are run.
#[derive(Debug, Clone, PartialEq)]
pub struct DecodeOptions {
    /// CPU threads of one decode.
    pub threads: usize,
    /// `None`: detected per turn; `Some(code)`: forced (ignored by English-only models).
    pub language: Option<String>,
    /// The least encoder context (positions; 1500 is Whisper's full 30 s).
    pub min_audio_ctx: i32,
}

/// What one decode heard.
#[derive(Debug, Clone, PartialEq)]
pub struct Decoded {
    /// After the filters: `""` when nothing is kept.
    pub text: String,
    /// The language of the text (ISO-639-1), when the model tells it.
    pub language: Option<String>,
    /// A language was forced, and the turn was another one (the text is then in the language
    /// heard).
    pub language_mismatch: bool,
    pub evidence: Evidence,
}

/// Most decoding states a model has at once. Each holds whisper.cpp's buffers (its KV caches and
/// compute buffers, sized for the model's full context), so they bound the memory: two is one
/// final decode per channel. A partial decode that finds no state free is skipped (the next one
/// comes within a second); a final decode waits for one (its own partial, aborted, gives its
/// state back at once).
pub const MAX_STATES: usize = 2;

/// The decoding states: the idle ones, and how many exist.
#[derive(Default)]
struct Pool {
    idle: Vec<WhisperState>,
    made: usize,
}

/// A loaded model and its decoding states, kept between decodes (at most [`MAX_STATES`]).
pub struct Model {
    pub ctx: WhisperContext,
    pub multilingual: bool,
    pool: Mutex<Pool>,
    freed: Condvar,
}

/// A state lent to one decode: back to the model's pool when dropped (on a panic too).
struct Lent<'a> {
    model: &'a Model,
    state: Option<WhisperState>,
}

impl std::ops::Deref for Lent<'_> {
    type Target = WhisperState;
    fn deref(&self) -> &WhisperState {
        self.state.as_ref().expect("lent until dropped")
    }
}

impl std::ops::DerefMut for Lent<'_> {
    fn deref_mut(&mut self) -> &mut WhisperState {
        self.state.as_mut().expect("lent until dropped")
    }
}

impl Drop for Lent<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.state.take() {
            self.model.pool().idle.push(s);
            self.model.freed.notify_one();
        }
    }
}

impl Model {
    pub fn new(ctx: WhisperContext) -> Model {
        Model {
            multilingual: ctx.is_multilingual(),
            ctx,
            pool: Mutex::new(Pool::default()),
            freed: Condvar::new(),
        }
    }

    fn pool(&self) -> std::sync::MutexGuard<'_, Pool> {
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A state for one decode: an idle one, a new one while fewer than [`MAX_STATES`] exist,
    /// else (`wait`) the next one given back; `None` when none is free and `wait` is false.
    fn take_state(&self, wait: bool) -> Result<Option<Lent<'_>>, EngineError> {
        let mut pool = self.pool();
        loop {
            if let Some(s) = pool.idle.pop() {
                return Ok(Some(self.lend(s)));
            }
            if pool.made < MAX_STATES {
                pool.made += 1;
                drop(pool);
                return match self.ctx.create_state() {
                    Ok(s) => Ok(Some(self.lend(s))),
                    Err(e) => {
                        self.pool().made -= 1;
                        self.freed.notify_one();
                        Err(EngineError::unavailable(format!(
                            "Whisper cannot allocate a decoder: {e}"
                        )))
                    }
                };
            }
            if !wait {
                return Ok(None);
            }
            pool = self.freed.wait(pool).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn lend(&self, s: WhisperState) -> Lent<'_> {
        Lent {
            model: self,
            state: Some(s),
        }
    }
}

/// The encoder context for `samples` of audio: proportional to its length, at least `min`,
/// at most the model's.
pub fn audio_ctx_for(samples: usize, min: i32, full: i32) -> i32 {
    let needed = (samples as f64 / RATE as f64 * CTX_PER_SECOND).ceil() as i32 + CTX_MARGIN;
    needed.clamp(min.min(full), full)
}

/// Decodes `samples` (16 kHz mono). `abort`: set to give up (a partial no longer wanted):
/// the answer is then `Ok(None)`, as it is for a partial (`abort` given) that finds every
/// decoding state busy. A final (no `abort`) waits for a state.
pub fn decode(
    model: &Model,
    opts: &DecodeOptions,
    samples: &[i16],
    abort: Option<Arc<AtomicBool>>,
) -> Result<Option<Decoded>, EngineError> {
    let mut audio: Vec<f32> = samples.iter().map(|&s| s as f32 / 32768.0).collect();
    if audio.len() < MIN_SAMPLES {
        audio.resize(MIN_SAMPLES, 0.0);
    }
    let ctx_len = audio_ctx_for(audio.len(), opts.min_audio_ctx, model.ctx.n_audio_ctx());
    let forced = if model.multilingual {
        opts.language.as_deref()
    } else {
        Some("en")
    };
    let Some(mut state) = model.take_state(abort.is_none())? else {
        return Ok(None);
    };
    let result = (|| {
        let Some(mut out) = run(model, &mut state, opts, &audio, ctx_len, forced, &abort)? else {
            return Ok(None);
        };
        // A forced language checked against the one heard (multilingual models only).
        if let (true, Some(code)) = (model.multilingual, opts.language.as_deref()) {
            if let Some(heard) = mismatch(&state, opts.threads, code)? {
                let Some(again) = run(
                    model,
                    &mut state,
                    opts,
                    &audio,
                    ctx_len,
                    Some(heard),
                    &abort,
                )?
                else {
                    return Ok(None);
                };
                out = Decoded {
                    language_mismatch: true,
                    ..again
                };
            }
        }
        Ok(Some(out))
    })();
    drop(state);
    result
}

/// The language detected in the state's audio when it is surely not `forced`.
fn mismatch(
    state: &WhisperState,
    threads: usize,
    forced: &str,
) -> Result<Option<&'static str>, EngineError> {
    let (id, probs) = state
        .lang_detect(0, threads.max(1))
        .map_err(|e| EngineError::decode(format!("Whisper could not detect the language: {e}")))?;
    let heard = whisper_rs::get_lang_str(id);
    let p = probs.get(id.max(0) as usize).copied().unwrap_or(0.0);
    Ok(heard.filter(|h| *h != forced && p >= MISMATCH_PROBABILITY))
}

/// whisper.cpp's abort callback: whether the decode is no longer wanted.
unsafe extern "C" fn aborted(flag: *mut std::ffi::c_void) -> bool {
    // SAFETY: `run` passes a pointer to an `AtomicBool` alive for the whole decode.
    unsafe { (*(flag as *const AtomicBool)).load(Ordering::Relaxed) }
}

/// The temperatures of the fallback: greedy first, then sampling.
const TEMPERATURES: [f32; 3] = [0.0, 0.4, 0.8];
/// A sampled decode (temperature > 0) replaces the greedy one only when at least this sure:
/// sampling on noise invents fluent sentences ("I'm gonna go to the ground." at -0.96 on pink
/// noise).
const SAMPLED_MIN_LOGPROB: f32 = -0.5;

/// The audio in `language` (`None`: detected), with Whisper's temperature fallback done here:
/// a greedy decode whose tokens are unlikely (mean log-prob < -1, and not judged silent) is
/// tried again sampling at 0.4, then 0.8; the first that passes is kept if sure enough,
/// else the greedy text (which the filters judge).
#[allow(clippy::too_many_arguments)]
fn run(
    model: &Model,
    state: &mut WhisperState,
    opts: &DecodeOptions,
    audio: &[f32],
    audio_ctx: i32,
    language: Option<&str>,
    abort: &Option<Arc<AtomicBool>>,
) -> Result<Option<Decoded>, EngineError> {
    let mut greedy = None;
    for t in TEMPERATURES {
        let Some((text, ev)) = full(model, state, opts, audio, audio_ctx, language, abort, t)?
        else {
            return Ok(None);
        };
        let failed = ev.avg_logprob < filter::FAILED_LOGPROB && ev.no_speech < 0.6;
        if t == 0.0 {
            greedy = Some((text.clone(), ev));
        }
        if !failed && (t == 0.0 || ev.avg_logprob >= SAMPLED_MIN_LOGPROB) {
            return Ok(Some(decoded(model, state, &text, ev, audio_ctx)));
        }
        if !failed {
            break;
        }
    }
    let (text, ev) = greedy.expect("the greedy decode ran first");
    Ok(Some(decoded(model, state, &text, ev, audio_ctx)))
}

/// What a decode heard, after the filters.
fn decoded(
    model: &Model,
    state: &WhisperState,
    text: &str,
    evidence: Evidence,
    audio_ctx: i32,
) -> Decoded {
    let language = if model.multilingual {
        whisper_rs::get_lang_str(state.full_lang_id_from_state()).map(str::to_string)
    } else {
        Some("en".to_string())
    };
    let kept = filter::clean(text, evidence);
    tracing::debug!(heard = %text, %kept, no_speech = evidence.no_speech, avg_logprob = evidence.avg_logprob, audio_ctx, "Whisper decode");
    Decoded {
        text: kept,
        language,
        language_mismatch: false,
        evidence,
    }
}

/// One `whisper_full` at `temperature`: its text and evidence, `None` when aborted.
#[allow(clippy::too_many_arguments)]
fn full(
    model: &Model,
    state: &mut WhisperState,
    opts: &DecodeOptions,
    audio: &[f32],
    audio_ctx: i32,
    language: Option<&str>,
    abort: &Option<Arc<AtomicBool>>,
    temperature: f32,
) -> Result<Option<(String, Evidence)>, EngineError> {
    let mut p = FullParams::new(SamplingStrategy::Greedy { best_of: 2 });
    p.set_n_threads(opts.threads.max(1) as i32);
    p.set_language(Some(language.unwrap_or("auto")));
    p.set_translate(false);
    p.set_no_context(true);
    p.set_single_segment(true);
    p.set_no_timestamps(true);
    p.set_print_special(false);
    p.set_print_progress(false);
    p.set_print_realtime(false);
    p.set_print_timestamps(false);
    p.set_suppress_blank(true);
    // Non-speech tokens ("[Music]", "(laughs)", …) are never written.
    p.set_suppress_nst(true);
    // The fallback is [`run`]'s (whisper.cpp's own would keep any sampled text that passes).
    // A turn likely silent (no-speech > 0.6) with unlikely tokens gives no text. The other
    // trigger of a fallback, a repetitive decode (token entropy < 2.4), is off: on music and
    // noise the greedy decode is "♪♪ ♪♪ ♪♪ …" (dropped as a tag), and sampling again is what
    // invented words there; loops on speech are cut by the filter instead.
    p.set_temperature(temperature);
    p.set_temperature_inc(0.0);
    p.set_logprob_thold(filter::FAILED_LOGPROB);
    p.set_entropy_thold(0.0);
    p.set_no_speech_thold(0.6);
    p.set_audio_ctx(audio_ctx);
    if let Some(flag) = abort {
        // (whisper-rs 0.16's `set_abort_callback_safe` hands whisper.cpp a pointer of another
        // type than its trampoline reads: every decode aborted. A plain function instead.)
        // SAFETY: `aborted` reads an `AtomicBool` through the pointer, and the `Arc` holding
        // it outlives `full` below (it is borrowed for this whole function).
        unsafe {
            p.set_abort_callback(Some(aborted));
            p.set_abort_callback_user_data(Arc::as_ptr(flag) as *mut std::ffi::c_void);
        }
    }
    let r = state.full(p, audio);
    if abort.as_ref().is_some_and(|f| f.load(Ordering::Relaxed)) {
        return Ok(None);
    }
    r.map_err(|e| EngineError::decode(format!("Whisper could not decode the audio: {e}")))?;
    let eot = model.ctx.token_eot();
    let (mut text, mut no_speech, mut lp_sum, mut lp_n) = (String::new(), 0f32, 0f64, 0usize);
    for seg in state.as_iter() {
        text.push_str(&seg.to_str_lossy().unwrap_or_default());
        no_speech = no_speech.max(seg.no_speech_probability());
        for i in 0..seg.n_tokens() {
            if let Some(t) = seg.get_token(i) {
                let d = t.token_data();
                if d.id < eot {
                    lp_sum += d.plog as f64;
                    lp_n += 1;
                }
            }
        }
    }
    let evidence = Evidence {
        no_speech,
        avg_logprob: if lp_n == 0 {
            0.0
        } else {
            (lp_sum / lp_n as f64) as f32
        },
    };
    Ok(Some((text, evidence)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_encoder_context_follows_the_audio() {
        assert_eq!(audio_ctx_for(RATE as usize, 512, 1500), 512);
        assert_eq!(audio_ctx_for(RATE as usize * 20, 512, 1500), 1032);
        assert_eq!(audio_ctx_for(RATE as usize * 40, 256, 1500), 1500);
        assert_eq!(audio_ctx_for(RATE as usize, 2000, 1500), 1500);
    }

    /// Whisper tiny.en from `tests/whisper/install.sh` (`SW_WHISPER_MODELS`), loaded; `None`
    /// (a skip, or a failure with `SW_AUDIO_REQUIRE=1`) when it is not installed.
    fn tiny_en() -> Option<Model> {
        let dir = std::env::var_os("SW_WHISPER_MODELS")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| {
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.peers/whisper/models")
            });
        let file = dir.join("ggml-tiny.en-q8_0.bin");
        if !file.is_file() {
            assert!(
                std::env::var("SW_AUDIO_REQUIRE").as_deref() != Ok("1"),
                "the Whisper test models are not installed ({}; run tests/whisper/install.sh)",
                dir.display()
            );
            eprintln!("skipped: no {}", file.display());
            return None;
        }
        let mut params = whisper_rs::WhisperContextParameters::default();
        params.use_gpu(false);
        Some(Model::new(
            WhisperContext::new_with_params(&file, params).expect("tiny.en loads"),
        ))
    }

    #[test]
    fn decoding_states_are_bounded_a_partial_skips_and_a_final_waits_for_one() {
        let Some(model) = tiny_en() else { return };
        let model = Arc::new(model);
        let held: Vec<_> = (0..MAX_STATES)
            .map(|_| {
                model
                    .take_state(false)
                    .unwrap()
                    .expect("a state while fewer exist")
            })
            .collect();
        // Every state busy: a partial's request gets none, and so does a whole partial decode.
        assert!(model.take_state(false).unwrap().is_none());
        let opts = DecodeOptions {
            threads: 1,
            language: None,
            min_audio_ctx: 512,
        };
        let silence = vec![0i16; RATE as usize];
        let flag = Some(Arc::new(AtomicBool::new(false)));
        assert!(decode(&model, &opts, &silence, flag).unwrap().is_none());
        // A final waits until a state is given back, then runs on it (no third state is made).
        let (tx, rx) = std::sync::mpsc::channel();
        let m = model.clone();
        let waiter = std::thread::spawn(move || {
            let s = m.take_state(true).unwrap().is_some();
            tx.send(s).unwrap();
        });
        assert!(
            rx.recv_timeout(std::time::Duration::from_millis(300))
                .is_err(),
            "a final must wait while every state is busy"
        );
        drop(held);
        assert!(rx.recv().unwrap());
        waiter.join().unwrap();
        assert_eq!(model.pool().made, MAX_STATES);
        assert_eq!(model.pool().idle.len(), MAX_STATES);
    }
}
