//! The OpenAI-compatible engine against a real Whisper tiny.en behind the test server
//! (tests/whisper/server.py: faster-whisper, installed by tests/whisper/install.sh), on speech
//! made with espeak-ng; the server's test controls make it fail, hang or answer garbage.

mod common;

use common::*;
use serde_json::json;
use stagewhisper_audio::engine::openai::{OpenAiConfig, OpenAiEngine, PartialPolicy};
use stagewhisper_audio::engine::{Engine, EngineErrorKind};
use stagewhisper_audio::pcm::read_wav_16k_mono;
use std::time::{Duration, Instant};

fn spoken(text: &str, voice: &str) -> Vec<i16> {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("s.wav");
    speak(text, voice, &p);
    read_wav_16k_mono(&p).unwrap()
}

fn engine(base_url: &str, cfg: impl FnOnce(&mut OpenAiConfig)) -> OpenAiEngine {
    let mut c = OpenAiConfig::new(base_url, "tiny.en", None);
    cfg(&mut c);
    OpenAiEngine::new(c).unwrap()
}

fn recognise(
    e: &OpenAiEngine,
    samples: &[i16],
) -> Result<String, stagewhisper_audio::engine::EngineError> {
    let mut u = e.begin()?;
    for c in samples.chunks(1600) {
        u.push(c)?;
    }
    u.finish()
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn openai_transcribes_speech_in_two_voices_through_a_real_whisper() {
    let Some(()) = espeak() else { return };
    let Some(server) = WhisperServer::start(&[]) else {
        return;
    };
    let e = engine(&server.base_url, |_| {});
    assert_eq!(e.kind(), "openai");
    for (voice, text, keys) in [
        (
            "en-us",
            "Our budget is about twenty thousand dollars this quarter, and we need it live before March.",
            &["budget", "quarter", "live", "march"][..],
        ),
        (
            "en-us+f3",
            "Can you send me the signed contract by Friday afternoon?",
            &["send", "contract", "friday", "afternoon"][..],
        ),
    ] {
        let text_out = recognise(&e, &spoken(text, voice)).unwrap();
        assert!(
            keywords_found(&text_out, keys) >= 3,
            "{voice}: {text:?} came out as {text_out:?}"
        );
    }
    // Silence: no words (Whisper may answer "" or nothing at all).
    let quiet = recognise(&e, &vec![0; 16_000]).unwrap();
    assert!(words(&quiet).len() <= 2, "silence came out as {quiet:?}");
}

#[test]
fn openai_partials_are_the_audio_so_far_one_at_a_time() {
    let Some(()) = espeak() else { return };
    let Some(server) = WhisperServer::start(&[]) else {
        return;
    };
    let s = spoken(
        "Please schedule the meeting for Tuesday at three o'clock. The agenda is the new pricing.",
        "en-us",
    );
    let e = engine(&server.base_url, |c| {
        c.partials = PartialPolicy {
            interval: Duration::from_secs(3600),
            min_audio: Duration::from_millis(1000),
            max_latency_ratio: 100.0,
            ..PartialPolicy::default()
        }
    });
    let mut u = e.begin().unwrap();
    // Under a second of audio: no request yet.
    u.push(&s[..12_000]).unwrap();
    assert_eq!(u.partial(), None);
    assert_eq!(server.stats()["requests"], 0);
    // Half of it: one request, and however often the caller asks, no second one before the
    // interval (an hour here) has passed.
    let half = s.len() / 2;
    u.push(&s[12_000..half]).unwrap();
    let mut partial = None;
    wait_until(Duration::from_secs(60), "a partial", || {
        partial = u.partial();
        partial.is_some()
    });
    for _ in 0..20 {
        u.partial();
    }
    assert_eq!(server.stats()["requests"], 1, "one partial request in all");
    let partial = partial.unwrap();
    assert!(
        keywords_found(&partial, &["schedule", "meeting", "tuesday"]) >= 2,
        "the first half came out as {partial:?}"
    );
    assert!(
        keywords_found(&partial, &["agenda", "pricing"]) == 0,
        "the partial heard audio it was not sent: {partial:?}"
    );
    u.push(&s[half..]).unwrap();
    let text = u.finish().unwrap();
    assert!(
        keywords_found(
            &text,
            &["schedule", "meeting", "tuesday", "agenda", "pricing"]
        ) >= 4,
        "{text:?}"
    );
    assert_eq!(server.stats()["requests"], 2);
}

#[test]
fn openai_finish_does_not_wait_for_a_partial_in_flight() {
    let Some(()) = espeak() else { return };
    let Some(server) = WhisperServer::start(&[]) else {
        return;
    };
    let s = spoken(
        "Let us talk about the renewal of the annual contract.",
        "en-us",
    );
    let e = engine(&server.base_url, |_| {});
    // The next request (the partial) hangs for a minute.
    server.control(json!({"hang": 60, "count": 1}));
    let mut u = e.begin().unwrap();
    u.push(&s).unwrap();
    assert_eq!(u.partial(), None, "the partial is in flight");
    wait_until(
        Duration::from_secs(10),
        "the partial to reach the server",
        || server.stats()["requests"] == 1,
    );
    let t = Instant::now();
    let text = u.finish().unwrap();
    // Functional bound, not a speed target: the hung partial would take 60 s.
    assert!(
        t.elapsed() < Duration::from_secs(40),
        "finish waited {:?}",
        t.elapsed()
    );
    assert!(
        keywords_found(&text, &["renewal", "annual", "contract"]) >= 2,
        "{text:?}"
    );
}

#[test]
fn openai_failures_have_the_right_kinds() {
    let Some(server) = WhisperServer::start(&[]) else {
        return;
    };
    let tone: Vec<i16> = (0..16_000).map(|i| ((i % 40) as i16 - 20) * 500).collect();
    let e = engine(&server.base_url, |c| {
        c.timeout_base = Duration::from_secs(3);
        c.timeout_per_audio_second = 0.0;
    });
    // 5xx: down.
    for status in [500, 503] {
        server.control(json!({"status": status}));
        let err = recognise(&e, &tone).unwrap_err();
        assert_eq!(err.kind, EngineErrorKind::Down, "{status}: {err}");
        assert!(err.message.contains(&status.to_string()), "{err}");
    }
    // Rate limited: down (try later), not rejected.
    server.control(json!({"status": 429}));
    assert_eq!(
        recognise(&e, &tone).unwrap_err().kind,
        EngineErrorKind::Down
    );
    // No answer within the timeout: down.
    server.control(json!({"hang": 10}));
    let err = recognise(&e, &tone).unwrap_err();
    assert_eq!(err.kind, EngineErrorKind::Down, "{err}");
    assert!(err.message.contains("in time"), "{err}");
    // An answer that is not a transcription: decode.
    server.control(json!({"garbage": true}));
    let err = recognise(&e, &tone).unwrap_err();
    assert_eq!(err.kind, EngineErrorKind::Decode, "{err}");
    // A model it does not have: rejected, and the message says which.
    let other = engine(&server.base_url, |c| c.model = "large-v9".into());
    let err = recognise(&other, &tone).unwrap_err();
    assert_eq!(err.kind, EngineErrorKind::Rejected, "{err}");
    assert!(err.message.contains("large-v9"), "{err}");
    // A URL that is not a transcription server: rejected.
    let wrong = engine(&format!("{}/not/here", server.base_url), |_| {});
    let err = recognise(&wrong, &tone).unwrap_err();
    assert_eq!(err.kind, EngineErrorKind::Rejected, "{err}");
    // After all that, the server still transcribes.
    assert!(recognise(&e, &tone).is_ok());
    // Nothing listening: down.
    let gone = engine(&format!("http://127.0.0.1:{}", closed_port()), |_| {});
    let err = recognise(&gone, &tone).unwrap_err();
    assert_eq!(err.kind, EngineErrorKind::Down, "{err}");
    assert!(err.message.contains("cannot connect"), "{err}");
}

#[test]
fn openai_sends_the_api_key_and_never_shows_it() {
    let Some(server) = WhisperServer::start(&["--api-key", "sk-test-0123456789"]) else {
        return;
    };
    let tone: Vec<i16> = (0..16_000).map(|i| ((i % 40) as i16 - 20) * 500).collect();
    let without = engine(&server.base_url, |_| {});
    let err = recognise(&without, &tone).unwrap_err();
    assert_eq!(err.kind, EngineErrorKind::Rejected, "{err}");
    let wrong = engine(&server.base_url, |c| {
        c.api_key = Some("sk-wrong-9876543210".into())
    });
    let err = recognise(&wrong, &tone).unwrap_err();
    assert_eq!(err.kind, EngineErrorKind::Rejected, "{err}");
    assert!(err.message.contains("API key"), "{err}");
    assert!(!err.message.contains("sk-wrong"), "{err}");
    assert!(!format!("{wrong:?}").contains("sk-wrong"));
    let right = engine(&server.base_url, |c| {
        c.api_key = Some("sk-test-0123456789".into())
    });
    assert!(recognise(&right, &tone).is_ok());
}
