//! One decode of a turn's audio with a loaded model: the parameters (a reduced encoder
//! context, one segment, no timestamps, Whisper's no-speech / log-prob thresholds with
//! temperature fallback), the language (detected, forced, or forced but not what was heard),
//! and the filters of [`super::filter`].

use super::filter::{self, Evidence};
use crate::engine::EngineError;
use crate::pcm::RATE;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
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

/// A loaded model and the decoding states kept between decodes (one per decode running).
pub struct Model {
    pub ctx: WhisperContext,
    pub multilingual: bool,
    states: Mutex<Vec<WhisperState>>,
}

impl Model {
    pub fn new(ctx: WhisperContext) -> Model {
        Model {
            multilingual: ctx.is_multilingual(),
            ctx,
            states: Mutex::new(Vec::new()),
        }
    }

    fn take_state(&self) -> Result<WhisperState, EngineError> {
        if let Some(s) = self.states.lock().unwrap_or_else(|e| e.into_inner()).pop() {
            return Ok(s);
        }
        self.ctx.create_state().map_err(|e| {
            EngineError::unavailable(format!("Whisper cannot allocate a decoder: {e}"))
        })
    }

    fn give_back(&self, s: WhisperState) {
        let mut st = self.states.lock().unwrap_or_else(|e| e.into_inner());
        // One per channel and one for partials is what a call needs.
        if st.len() < 3 {
            st.push(s);
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
/// the answer is then `Ok(None)`.
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
    let mut state = model.take_state()?;
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
    model.give_back(state);
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
}
