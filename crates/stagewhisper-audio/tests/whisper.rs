//! The Whisper engine with real models (tiny.en, f16 and q8_0, made offline by
//! tests/whisper/install.sh) on real human speech and on sound that is not speech.
//!
//! Skipped with the reason printed when the models are not installed, a failure under
//! `SW_AUDIO_REQUIRE=1`. The 10-minute no-speech run is `#[ignore]`d:
//! `cargo test --workspace --test whisper -- --ignored`.

mod common;

use stagewhisper_audio::engine::whisper::{WhisperConfig, WhisperEngine};
use stagewhisper_audio::engine::{Engine, EngineErrorKind};
use stagewhisper_audio::file::{transcribe_file, FileOptions, Segment};
use stagewhisper_audio::pcm::{read_wav_16k_mono, RATE};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn engine(models: &Path, model: &str, cfg: impl FnOnce(&mut WhisperConfig)) -> WhisperEngine {
    let mut c = WhisperConfig::new(model, "auto", models);
    cfg(&mut c);
    let e = WhisperEngine::new(c).expect("the model file is there");
    e.wait_loaded().expect("the model loads");
    e
}

fn segments(path: &Path, engine: &dyn Engine) -> Vec<Segment> {
    let mut out = Vec::new();
    transcribe_file(path, engine, &FileOptions::default(), |s| out.push(s)).unwrap();
    out
}

/// Word error rate on the committed real speech, printing each clip.
fn real_speech_wer(engine: &dyn Engine, label: &str) -> f64 {
    let (mut e, mut n) = (0, 0);
    for (path, reference) in common::real_speech() {
        let segs = segments(&path, engine);
        let text = segs
            .iter()
            .map(|s| s.text.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        let (ce, cn) = common::wer(&reference, &text);
        eprintln!(
            "{label} {}: {ce}/{cn} {text:?}",
            path.file_name().unwrap().to_string_lossy()
        );
        for s in &segs {
            assert_eq!(s.language.as_deref(), Some("en"), "{s:?}");
        }
        e += ce;
        n += cn;
    }
    let wer = e as f64 / n as f64;
    eprintln!("{label}: WER {:.1} % ({e}/{n})", wer * 100.0);
    wer
}

#[test]
fn whisper_transcribes_real_speech_within_the_wer_bound_f16_and_q8_0() {
    let Some(models) = common::whisper_models() else {
        return;
    };
    for (model, bound) in [("tiny.en", 0.12), ("tiny.en-q8_0", 0.12)] {
        let e = engine(&models, model, |_| {});
        let wer = real_speech_wer(&e, model);
        assert!(wer <= bound, "{model}: WER {wer:.3} > {bound}");
    }
}

/// Sound that is not speech, made with sox: (name, sox synth arguments).
const NOT_SPEECH: &[(&str, &str)] = &[
    ("silence", "synth {d} sine 440 vol 0"),
    ("white noise", "synth {d} whitenoise vol 0.05"),
    ("pink noise", "synth {d} pinknoise vol 0.3"),
    ("brown noise", "synth {d} brownnoise vol 0.3"),
    ("hum", "synth {d} sine 50 sine 100 vol 0.3"),
    (
        "chords",
        "synth {d} pluck C4 pluck E4 pluck G4 tremolo 3 40 vol 0.5",
    ),
    ("melody", "synth {d} sine 300-900 vol 0.4 tremolo 2 60"),
    ("beeps", "synth {d} square 880 vol 0.2 tremolo 4 100"),
];

fn not_speech_gives_no_turn(seconds: u32) {
    let Some(models) = common::whisper_models() else {
        return;
    };
    if !common::have_command("sox") {
        common::missing::<()>("sox is not installed (apt-get install sox)");
        return;
    }
    let e = engine(&models, "tiny.en", |_| {});
    let dir = tempfile::tempdir().unwrap();
    let mut heard = Vec::new();
    for (name, synth) in NOT_SPEECH {
        let wav = dir.path().join("x.wav");
        let st = Command::new("sox")
            .args(["-n", "-r", "16000", "-c", "1", "-b", "16"])
            .arg(&wav)
            .args(synth.replace("{d}", &seconds.to_string()).split(' '))
            .status()
            .unwrap();
        assert!(st.success(), "sox {synth}");
        for s in segments(&wav, &e) {
            heard.push(format!("{name}: {s:?}"));
        }
    }
    assert!(
        heard.is_empty(),
        "turns from sound that is not speech: {heard:#?}"
    );
}

#[test]
fn whisper_gives_no_turn_on_silence_noise_hum_and_music() {
    not_speech_gives_no_turn(8);
}

/// 8 kinds × 75 s = 10 minutes.
#[test]
#[ignore = "10 minutes of audio: run with --ignored"]
fn whisper_gives_no_turn_on_ten_minutes_of_silence_noise_and_music() {
    not_speech_gives_no_turn(75);
}

#[test]
fn whisper_partials_decode_in_the_background_and_never_block_push() {
    let Some(models) = common::whisper_models() else {
        return;
    };
    let e = engine(&models, "tiny.en-q8_0", |_| {});
    let (path, reference) = common::real_speech()
        .into_iter()
        .find(|(p, _)| p.ends_with("jfk.wav"))
        .unwrap();
    let audio = read_wav_16k_mono(&path).unwrap();
    let mut u = e.begin().unwrap();
    let (mut partials, mut slowest_push) = (Vec::new(), Duration::ZERO);
    // In real time, 100 ms at a time, a partial asked after every chunk.
    let t0 = Instant::now();
    for (i, chunk) in audio.chunks(RATE as usize / 10).enumerate() {
        let t = Instant::now();
        u.push(chunk).unwrap();
        let p = u.partial();
        slowest_push = slowest_push.max(t.elapsed());
        if let Some(p) = p {
            if partials.last() != Some(&p) {
                partials.push(p);
            }
        }
        let due = t0 + Duration::from_millis(100 * (i as u64 + 1));
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
    }
    let t = Instant::now();
    let heard = u.finish_heard().unwrap();
    eprintln!(
        "partials {partials:#?}\nfinal {heard:?} in {:?}; slowest push+partial {slowest_push:?}",
        t.elapsed()
    );
    assert!(
        slowest_push < Duration::from_millis(50),
        "push/partial waited {slowest_push:?}"
    );
    assert!(!partials.is_empty(), "partials came while the turn lasted");
    // Each partial is the start of what was said.
    let first = common::normalize(&partials[0]);
    assert!(
        common::normalize(&reference).starts_with(&first[..first.len().min(2)]),
        "{partials:?}"
    );
    let (errs, n) = common::wer(&reference, &heard.text);
    assert!(errs * 10 <= n, "{heard:?}");
    assert_eq!(heard.language.as_deref(), Some("en"));
}

#[test]
fn whisper_models_that_cannot_be_used_say_so() {
    let dir = tempfile::tempdir().unwrap();
    // A file that starts like a ggml model but is not one: the load fails, and every turn
    // says why (the engine is Unavailable, not Down: retrying will not help).
    let bad = dir.path().join("ggml-broken.bin");
    let Some(models) = common::whisper_models() else {
        return;
    };
    // A model cut short (a download that stopped half way).
    let whole = std::fs::read(models.join("ggml-tiny.en.bin")).unwrap();
    std::fs::write(&bad, &whole[..whole.len() / 2]).unwrap();
    let e = WhisperEngine::new(WhisperConfig::new("broken", "auto", dir.path())).unwrap();
    let err = e.begin().err().expect("no utterance without a model");
    assert_eq!(err.kind, EngineErrorKind::Unavailable);
    assert!(err.message.contains("could not load"), "{err}");
    assert!(e.describe().contains("did not load"), "{}", e.describe());
    let missing = WhisperEngine::new(WhisperConfig::new("base.en", "auto", dir.path()))
        .err()
        .unwrap();
    assert_eq!(missing.kind, EngineErrorKind::Unavailable);
}

#[test]
fn whisper_multilingual_detects_or_forces_the_language_and_flags_a_forced_one_not_heard() {
    let Some(models) = common::whisper_models() else {
        return;
    };
    if !models.join("ggml-base-q8_0.bin").is_file() {
        common::missing::<()>("the multilingual test model ggml-base-q8_0.bin is not installed");
        return;
    }
    if common::espeak().is_none() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let de = dir.path().join("de.wav");
    let en = dir.path().join("en.wav");
    common::speak(
        "Wir haben den Vertrag für zwei Jahre unterschrieben, und das Budget liegt bei \
         zwanzigtausend Euro.",
        "de",
        &de,
    );
    common::speak(
        "We signed the contract for two years, and the budget is twenty thousand euros.",
        "en-us",
        &en,
    );
    let heard = |language: &str, wav: &Path| -> Vec<Segment> {
        let mut c = WhisperConfig::new("base-q8_0", language, &models);
        c.partials.enabled = false;
        let e = WhisperEngine::new(c).unwrap();
        segments(wav, &e)
    };
    let one = |segs: Vec<Segment>| -> Segment {
        assert_eq!(segs.len(), 1, "{segs:?}");
        segs.into_iter().next().unwrap()
    };
    // Detected per turn.
    let s = one(heard("auto", &de));
    assert_eq!(
        (s.language.as_deref(), s.language_mismatch),
        (Some("de"), false),
        "{s:?}"
    );
    assert!(
        common::keywords_found(&s.text, &["wir", "haben"]) == 2,
        "{s:?}"
    );
    let s = one(heard("auto", &en));
    assert_eq!(
        (s.language.as_deref(), s.language_mismatch),
        (Some("en"), false),
        "{s:?}"
    );
    // Forced, and what was said.
    let s = one(heard("de", &de));
    assert_eq!(
        (s.language.as_deref(), s.language_mismatch),
        (Some("de"), false),
        "{s:?}"
    );
    // Forced, and another language was said: flagged, written in the language heard (not an
    // English garble of German).
    let s = one(heard("en", &de));
    assert_eq!(
        (s.language.as_deref(), s.language_mismatch),
        (Some("de"), true),
        "{s:?}"
    );
    assert!(
        common::keywords_found(&s.text, &["wir", "haben"]) == 2,
        "{s:?}"
    );
    let s = one(heard("de", &en));
    assert_eq!(
        (s.language.as_deref(), s.language_mismatch),
        (Some("en"), true),
        "{s:?}"
    );
    assert!(
        common::keywords_found(&s.text, &["contract", "years"]) == 2,
        "{s:?}"
    );
}
