//! The built-in engine against the real PocketSphinx (Debian's libpocketsphinx3 and
//! pocketsphinx-en-us), on speech made with espeak-ng. Keyword checks: PocketSphinx is weak on
//! synthetic speech, so each test asks for a few words it is known to get.

mod common;

use common::*;
use stagewhisper_audio::engine::builtin::{BuiltinConfig, BuiltinEngine, INSTALL_HINT};
use stagewhisper_audio::engine::{Engine, EngineErrorKind};
use stagewhisper_audio::pcm::read_wav_16k_mono;
use std::time::Duration;

/// The engine, or the skip/fail of `missing` when PocketSphinx is not installed.
fn engine() -> Option<BuiltinEngine> {
    match BuiltinEngine::new(BuiltinConfig::default()) {
        Ok(e) => Some(e),
        Err(e) if e.kind == EngineErrorKind::Unavailable => {
            missing(&format!("PocketSphinx is not installed: {e}"))
        }
        Err(e) => panic!("{e}"),
    }
}

fn spoken(text: &str, voice: &str) -> Vec<i16> {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.wav");
    speak(text, voice, &p);
    read_wav_16k_mono(&p).unwrap()
}

fn recognise(e: &BuiltinEngine, samples: &[i16], chunk: usize) -> String {
    let mut u = e.begin().unwrap();
    for c in samples.chunks(chunk) {
        u.push(c).unwrap();
    }
    u.finish().unwrap()
}

#[test]
fn builtin_recognises_espeak_speech_in_two_voices() {
    let Some(()) = espeak() else { return };
    for voice in ["en-us", "en-us+f3"] {
        // A fresh engine per voice (a decoder adapts to the voices it has heard).
        let Some(e) = engine() else { return };
        assert_eq!(e.kind(), "builtin");
        let budget = recognise(
            &e,
            &spoken(
                "our budget is about twenty thousand dollars this quarter",
                voice,
            ),
            1600,
        );
        assert!(
            keywords_found(&budget, &["twenty", "thousand", "dollars"]) >= 2,
            "{voice}: the budget came out as {budget:?}"
        );
        let meeting = recognise(
            &e,
            &spoken(
                "please schedule the meeting for tuesday at three o'clock",
                voice,
            ),
            4000,
        );
        assert!(
            keywords_found(&meeting, &["three", "o'clock"]) >= 1,
            "{voice}: the meeting came out as {meeting:?}"
        );
    }
}

#[test]
fn builtin_partials_come_while_the_audio_does() {
    let Some(e) = engine() else { return };
    let Some(()) = espeak() else { return };
    let s = spoken(
        "please schedule the meeting for tuesday at three o'clock",
        "en-us",
    );
    let mut u = e.begin().unwrap();
    assert_eq!(u.partial(), None, "a guess before any audio");
    let half = s.len() * 2 / 3;
    for c in s[..half].chunks(800) {
        u.push(c).unwrap();
    }
    let early = u.partial().expect("a guess after two thirds of the audio");
    assert!(!early.is_empty());
    for c in s[half..].chunks(800) {
        u.push(c).unwrap();
    }
    let text = u.finish().unwrap();
    assert!(
        keywords_found(&text, &["three", "o'clock"]) >= 1,
        "final {text:?} (partial was {early:?})"
    );
}

#[test]
fn builtin_a_fresh_decoders_first_turn_is_decoded_with_its_own_mean() {
    let Some(()) = espeak() else { return };
    let Some(e) = engine() else { return };
    // PocketSphinx's live CMN starts from the model's default mean and adapts as turns end;
    // the first turn of a decoder is decoded again once its own mean is known, so it comes out
    // as the same audio does on a decoder that has heard it before.
    let s = spoken(
        "please schedule the meeting for tuesday at three o'clock",
        "en-us",
    );
    let first = recognise(&e, &s, 1600);
    let second = recognise(&e, &s, 1600);
    assert_eq!(first, second);
    assert!(
        keywords_found(&first, &["three", "o'clock"]) >= 1,
        "{first:?}"
    );
}

#[test]
fn builtin_silence_gives_no_text() {
    let Some(e) = engine() else { return };
    assert_eq!(recognise(&e, &vec![0i16; 32_000], 1600), "");
}

#[test]
fn builtin_decoders_are_loaded_once_and_reused() {
    let Some(e) = engine() else { return };
    let Some(()) = espeak() else { return };
    // The first decoder loads in the background as the engine is built.
    wait_until(Duration::from_secs(60), "the first decoder", || {
        e.idle_decoders() == 1
    });
    let s = spoken("our budget is about twenty thousand dollars", "en-us");
    // Turns at once (both channels of a call, and one more): a decoder each, loaded as needed;
    // two are kept afterwards.
    let mut a = e.begin().unwrap();
    assert_eq!(e.idle_decoders(), 0);
    let mut b = e.begin().unwrap();
    let mut c = e.begin().unwrap();
    a.push(&s).unwrap();
    b.push(&s).unwrap();
    c.push(&s).unwrap();
    let (ta, tb) = (a.finish().unwrap(), b.finish().unwrap());
    assert_eq!(ta, tb, "two fresh decoders of the same model disagree");
    c.finish().unwrap();
    assert_eq!(e.idle_decoders(), 2);
    // A turn given up on (dropped without finish) gives its decoder back, ready for the next.
    let mut c = e.begin().unwrap();
    c.push(&s[..s.len() / 2]).unwrap();
    drop(c);
    assert_eq!(e.idle_decoders(), 2);
    let again = recognise(&e, &s, 1600);
    assert!(
        keywords_found(&again, &["twenty", "thousand", "dollars"]) >= 2,
        "a reused decoder heard {again:?}"
    );
    assert_eq!(e.idle_decoders(), 2);
}

#[test]
fn builtin_is_unavailable_with_the_install_line_when_missing() {
    // Needs nothing installed: these are what a machine without PocketSphinx sees.
    let err = BuiltinEngine::new(BuiltinConfig {
        library: "libpocketsphinx-not-there.so.3".into(),
        ..BuiltinConfig::default()
    })
    .err()
    .expect("a missing library");
    assert_eq!(err.kind, EngineErrorKind::Unavailable);
    assert!(err.message.contains(INSTALL_HINT), "{}", err.message);
    let dir = tempfile::tempdir().unwrap();
    let err = BuiltinEngine::new(BuiltinConfig {
        model_dir: dir.path().to_path_buf(),
        ..BuiltinConfig::default()
    })
    .err()
    .expect("a missing model");
    assert_eq!(err.kind, EngineErrorKind::Unavailable);
    assert!(err.message.contains(INSTALL_HINT), "{}", err.message);
}
