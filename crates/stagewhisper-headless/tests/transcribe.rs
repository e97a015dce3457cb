//! `stagewhisper-headless transcribe FILE`, black-box: recordings made with espeak-ng (and sox
//! for rates and channels) through the real PocketSphinx, the Whisper test server through
//! `--engine openai`, and bad files. Keyword checks, not exact text.
//!
//! Every test here is named `transcribe_cli_*`: run-tests runs them in its speech step, with
//! `SW_AUDIO_REQUIRE=1` (a missing tool fails instead of skipping).

#[path = "../../stagewhisper-audio/tests/common/mod.rs"]
mod audio;

use audio::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn bin() -> PathBuf {
    std::env::var_os("STAGEWHISPER_TEST_BIN")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_stagewhisper-headless")))
}

fn transcribe(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut c = Command::new(bin());
    c.arg("transcribe").args(args).stdin(Stdio::null());
    c.env_remove("STAGEWHISPER_API_KEY");
    for (k, v) in envs {
        c.env(k, v);
    }
    c.output().expect("the binary runs")
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// PocketSphinx, espeak-ng and sox, or the skip/fail of `missing`.
fn tools() -> Option<()> {
    espeak()?;
    if !have_command("sox") {
        return missing("sox is not installed (apt-get install sox)");
    }
    if !Path::new("/usr/share/pocketsphinx/model/en-us/en-us.lm.bin").is_file() {
        return missing("PocketSphinx's model is not installed (apt-get install libpocketsphinx3 pocketsphinx-en-us)");
    }
    Some(())
}

fn sox(args: &[&str]) {
    let st = Command::new("sox").args(args).status().expect("sox runs");
    assert!(st.success(), "sox {args:?}");
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// (start_ms, end_ms, speaker, text) of each JSONL line.
fn segments(jsonl: &str) -> Vec<(u64, u64, String, String)> {
    jsonl
        .lines()
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}"));
            let o = v.as_object().unwrap();
            let mut keys: Vec<&str> = o.keys().map(String::as_str).collect();
            keys.sort();
            assert_eq!(keys, ["end_ms", "speaker", "start_ms", "text"], "{l}");
            (
                v["start_ms"].as_u64().unwrap(),
                v["end_ms"].as_u64().unwrap(),
                v["speaker"].as_str().unwrap().to_string(),
                v["text"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

const BUDGET: &str = "Our budget is about twenty thousand dollars this quarter.";
const BUDGET_WORDS: &[&str] = &["twenty", "thousand", "dollars"];
const MEETING: &str = "Please schedule the meeting for Tuesday at three o'clock.";
const MEETING_WORDS: &[&str] = &["three", "o'clock"];

#[test]
fn transcribe_cli_stereo_44k_gives_you_and_them_in_order_in_every_format() {
    let Some(()) = tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (you, them, file) = (
        dir.path().join("you.wav"),
        dir.path().join("them.wav"),
        dir.path().join("call.wav"),
    );
    speak(BUDGET, "en-us", &you);
    speak(MEETING, "en-us+f3", &them);
    // Left: "You" from the start; right: "Them" 4.5 s in. 44.1 kHz, 16-bit stereo.
    let them_late = dir.path().join("them_late.wav");
    sox(&[s(&them), s(&them_late), "pad", "4.5"]);
    sox(&["-M", s(&you), s(&them_late), "-r", "44100", s(&file)]);

    let o = transcribe(&[s(&file)], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let segs = segments(&stdout(&o));
    assert_eq!(segs.len(), 2, "{segs:?}");
    assert_eq!((segs[0].2.as_str(), segs[1].2.as_str()), ("You", "Them"));
    assert!(segs[0].0 < 500 && segs[0].1 > segs[0].0, "{segs:?}");
    assert!(
        (4000..5000).contains(&segs[1].0),
        "Them starts at about 4.5 s: {segs:?}"
    );
    assert!(keywords_found(&segs[0].3, BUDGET_WORDS) >= 2, "{segs:?}");
    assert!(keywords_found(&segs[1].3, MEETING_WORDS) >= 1, "{segs:?}");

    // WebVTT: what `transcript replay` reads, with the same speakers and times.
    let o = transcribe(&[s(&file), "--format", "vtt"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let vtt = stdout(&o);
    assert!(vtt.starts_with("WEBVTT\n\n"), "{vtt}");
    let cues =
        stagewhisper_core::transcript::parse(&vtt, stagewhisper_core::transcript::Format::WebVtt)
            .unwrap_or_else(|e| panic!("{vtt}: {e}"));
    assert_eq!(cues.len(), 2, "{vtt}");
    assert_eq!(cues[0].speaker.as_deref(), Some("You"));
    assert_eq!(cues[1].speaker.as_deref(), Some("Them"));
    assert_eq!(cues[1].start_ms as u64, segs[1].0);
    assert_eq!(cues[0].text, segs[0].3);

    // Text: one line a turn.
    let o = transcribe(&[s(&file), "--format", "text"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with("[0:00:00] You: "), "{text}");
    assert!(lines[1].starts_with("[0:00:04] Them: "), "{text}");
    assert!(keywords_found(lines[1], MEETING_WORDS) >= 1, "{text}");
}

#[test]
fn transcribe_cli_8k_mono_is_them_turn_by_turn() {
    let Some(()) = tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (a, b, file) = (
        dir.path().join("a.wav"),
        dir.path().join("b.wav"),
        dir.path().join("call8k.wav"),
    );
    speak(MEETING, "en-us", &a);
    speak(BUDGET, "en-us", &b);
    // Two sentences 1.5 s apart, telephone rate (8 kHz), mono.
    let a_padded = dir.path().join("a_padded.wav");
    sox(&[s(&a), s(&a_padded), "pad", "0", "1.5"]);
    sox(&[s(&a_padded), s(&b), "-r", "8000", s(&file)]);
    let check = |segs: &[(u64, u64, String, String)]| {
        assert_eq!(segs.len(), 2, "{segs:?}");
        assert!(segs.iter().all(|s| s.2 == "Them"), "{segs:?}");
        assert!(
            segs[0].1 <= segs[1].0,
            "in order, not overlapping: {segs:?}"
        );
        assert!((4000..5500).contains(&segs[1].0), "{segs:?}");
    };
    // PocketSphinx's model is wideband (16 kHz): on telephone audio it gets only a few words,
    // and which ones varies (none of the meeting's keywords in one CI run), so only the turns
    // are checked here: two, in order, at the right places.
    let o = transcribe(&[s(&file), "--format", "jsonl"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let segs = segments(&stdout(&o));
    check(&segs);
    // Whisper through the test server gets them.
    let Some(server) = WhisperServer::start(&[]) else {
        return;
    };
    let o = transcribe(
        &[
            s(&file),
            "--base-url",
            &server.base_url,
            "--model",
            "tiny.en",
        ],
        &[],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let segs = segments(&stdout(&o));
    check(&segs);
    assert!(
        keywords_found(&segs[0].3, &["schedule", "meeting", "tuesday"]) >= 2,
        "{segs:?}"
    );
    assert!(
        keywords_found(&segs[1].3, &["budget", "quarter", "dollars"]) >= 2,
        "{segs:?}"
    );
}

#[test]
fn transcribe_cli_stereo_with_identical_channels_is_read_as_mono() {
    let Some(()) = tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (a, file) = (dir.path().join("a.wav"), dir.path().join("dual.wav"));
    speak(BUDGET, "en-us", &a);
    sox(&[s(&a), "-c", "2", "-r", "48000", s(&file)]);
    let o = transcribe(&[s(&file)], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let segs = segments(&stdout(&o));
    assert_eq!(
        segs.len(),
        1,
        "one speaker, not the same words twice: {segs:?}"
    );
    assert_eq!(segs[0].2, "Them");
}

#[test]
fn transcribe_cli_silence_prints_no_turn_and_says_so() {
    let Some(()) = tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("quiet.wav");
    sox(&[
        "-n",
        "-r",
        "16000",
        "-c",
        "1",
        "-b",
        "16",
        s(&file),
        "trim",
        "0",
        "3",
    ]);
    let o = transcribe(&[s(&file), "--format", "vtt"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), "WEBVTT\n\n");
    assert!(
        stderr(&o).contains("no speech recognised"),
        "{}",
        stderr(&o)
    );
}

/// Exits with `status`, nothing on stdout, one line on stderr naming `code`.
fn assert_one_line_failure(o: &Output, status: i32, code: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(status), "{err}");
    assert_eq!(stdout(o), "", "{err}");
    assert_eq!(err.lines().count(), 1, "one line: {err:?}");
    assert!(
        err.starts_with(&format!("stagewhisper transcribe: {code}: ")),
        "{code}: {err:?}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn transcribe_cli_bad_files_exit_non_zero_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    };
    // A real 16-bit WAV header announcing 1 s of audio, then half of it.
    let mut wav = Vec::new();
    let data_len: u32 = 32_000;
    wav.extend_from_slice(b"RIFF");
    wav.extend_from_slice(&(36 + data_len).to_le_bytes());
    wav.extend_from_slice(b"WAVEfmt ");
    wav.extend_from_slice(&16u32.to_le_bytes());
    wav.extend_from_slice(&1u16.to_le_bytes()); // PCM
    wav.extend_from_slice(&1u16.to_le_bytes()); // mono
    wav.extend_from_slice(&16_000u32.to_le_bytes());
    wav.extend_from_slice(&32_000u32.to_le_bytes());
    wav.extend_from_slice(&2u16.to_le_bytes());
    wav.extend_from_slice(&16u16.to_le_bytes());
    wav.extend_from_slice(b"data");
    wav.extend_from_slice(&data_len.to_le_bytes());
    let header_only = wav.clone();
    wav.extend(std::iter::repeat_n(0u8, 16_000));
    let mut no_samples = header_only[..40].to_vec();
    no_samples.extend_from_slice(&0u32.to_le_bytes());
    no_samples[4..8].copy_from_slice(&36u32.to_le_bytes());
    let cases: Vec<(PathBuf, &str)> = vec![
        (dir.path().join("missing.wav"), "not_found"),
        (p("empty.wav", b""), "empty"),
        (
            p("notes.wav", b"these are my meeting notes, not audio\n"),
            "not_audio",
        ),
        (
            p("song.mp3", b"ID3\x04\x00\x00\x00\x00\x00\x00rest of an mp3"),
            "unsupported_format",
        ),
        (
            p("clip.flac", b"fLaC\x00\x00\x00\x22"),
            "unsupported_format",
        ),
        (p("cut.wav", &wav), "truncated"),
        (p("header.wav", &header_only[..20]), "truncated"),
        (p("nothing.wav", &no_samples), "empty"),
        (dir.path().to_path_buf(), "not_audio"),
    ];
    for (path, code) in cases {
        let o = transcribe(&[s(&path)], &[]);
        assert_one_line_failure(&o, 1, code);
        assert!(
            stderr(&o).contains(s(&path)),
            "names the file: {}",
            stderr(&o)
        );
    }
}

#[test]
fn transcribe_cli_engine_failures_exit_3_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("tone.wav");
    // A valid file needs no tool: 2 s of a 200 Hz square wave, written by hand.
    let samples: Vec<i16> = (0..32_000)
        .map(|i| if (i / 40) % 2 == 0 { 6000 } else { -6000 })
        .collect();
    write_wav(&file, &samples);
    // A server nobody runs.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let o = transcribe(
        &[s(&file), "--base-url", &url, "--model", "tiny.en"],
        &[("STAGEWHISPER_API_KEY", "sk-must-not-show")],
    );
    assert_one_line_failure(&o, 3, "engine_down");
    assert!(!stderr(&o).contains("sk-must-not-show"));
    // PocketSphinx's model where there is none.
    let o = transcribe(
        &[s(&file), "--engine", "builtin"],
        &[("STAGEWHISPER_POCKETSPHINX_MODEL", s(dir.path()))],
    );
    assert_one_line_failure(&o, 3, "engine_unavailable");
    assert!(stderr(&o).contains("apt-get install"), "{}", stderr(&o));
    // Usage: a server engine without its URL; a URL for the built-in engine.
    let o = transcribe(&[s(&file), "--engine", "openai"], &[]);
    assert_one_line_failure(&o, 2, "usage");
    let o = transcribe(&[s(&file), "--engine", "builtin", "--base-url", &url], &[]);
    assert_one_line_failure(&o, 2, "usage");
}

/// 16 kHz mono 16-bit WAV, written by hand (the test does not lean on the code under test).
fn write_wav(path: &Path, samples: &[i16]) {
    let mut b = Vec::new();
    let len = (samples.len() * 2) as u32;
    b.extend_from_slice(b"RIFF");
    b.extend_from_slice(&(36 + len).to_le_bytes());
    b.extend_from_slice(b"WAVEfmt ");
    b.extend_from_slice(&16u32.to_le_bytes());
    for v in [1u16, 1] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    for v in [16_000u32, 32_000] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    for v in [2u16, 16] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    b.extend_from_slice(b"data");
    b.extend_from_slice(&len.to_le_bytes());
    for x in samples {
        b.extend_from_slice(&x.to_le_bytes());
    }
    std::fs::write(path, b).unwrap();
}

#[test]
fn transcribe_cli_openai_engine_with_the_key_from_the_environment() {
    let Some(()) = espeak() else { return };
    let Some(server) = WhisperServer::start(&["--api-key", "sk-cli-test-42"]) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("them.wav");
    speak(
        "Can you send me the signed contract by Friday afternoon?",
        "en-us+f3",
        &file,
    );
    let o = transcribe(
        &[
            s(&file),
            "--base-url",
            &server.base_url,
            "--model",
            "tiny.en",
        ],
        &[("STAGEWHISPER_API_KEY", "sk-cli-test-42")],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let segs = segments(&stdout(&o));
    assert_eq!(segs.len(), 1, "{segs:?}");
    assert_eq!(segs[0].2, "Them");
    assert!(
        keywords_found(&segs[0].3, &["send", "contract", "friday", "afternoon"]) >= 3,
        "{segs:?}"
    );
    // Without the key the server refuses: exit 3, rejected.
    let o = transcribe(
        &[
            s(&file),
            "--base-url",
            &server.base_url,
            "--model",
            "tiny.en",
        ],
        &[],
    );
    assert_one_line_failure(&o, 3, "engine_rejected");
}

/// Real human speech through `--engine whisper`: a model by name (from the data dir's
/// `models/`) and by path, `--language`, a `language` on every segment; a model that cannot
/// be loaded and a missing one exit 3 with one line.
#[test]
fn transcribe_cli_whisper_real_speech_by_name_and_path_and_models_that_cannot_load() {
    let Some(models) = whisper_models() else {
        return;
    };
    let jfk = repo_root().join("tests/fixtures/speech/jfk.wav");
    let reference = "and so my fellow americans ask not what your country can do for you ask what \
                     you can do for your country";
    let data = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(data.path().join("models")).unwrap();
    std::os::unix::fs::symlink(
        models.join("ggml-tiny.en-q8_0.bin"),
        data.path().join("models/ggml-tiny.en-q8_0.bin"),
    )
    .unwrap();
    let by_name = transcribe(
        &[
            s(&jfk),
            "--engine",
            "whisper",
            "--model",
            "tiny.en-q8_0",
            "--language",
            "en",
            "--data-dir",
            s(data.path()),
        ],
        &[],
    );
    let by_path = transcribe(
        &[
            s(&jfk),
            "--engine",
            "whisper",
            "--model",
            s(&models.join("ggml-tiny.en.bin")),
        ],
        &[],
    );
    for o in [&by_name, &by_path] {
        assert_eq!(o.status.code(), Some(0), "{}", stderr(o));
        let lines: Vec<Value> = stdout(o)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert!(!lines.is_empty());
        let text: Vec<&str> = lines.iter().map(|l| l["text"].as_str().unwrap()).collect();
        for l in &lines {
            assert_eq!(l["speaker"], "Them");
            assert_eq!(l["language"], "en", "{l}");
            assert!(l.get("language_mismatch").is_none(), "{l}");
        }
        let (errors, words) = wer(reference, &text.join(" "));
        assert!(errors * 10 <= words, "{errors}/{words}: {text:?}");
    }
    // The installed model preferred when --model is left out.
    let o = transcribe(
        &[s(&jfk), "--engine", "whisper", "--data-dir", s(data.path())],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // A model cut short, one not installed, a bad language, none installed at all.
    let cut = data.path().join("cut.bin");
    let whole = std::fs::read(models.join("ggml-tiny.en-q8_0.bin")).unwrap();
    std::fs::write(&cut, &whole[..whole.len() / 3]).unwrap();
    let o = transcribe(&[s(&jfk), "--engine", "whisper", "--model", s(&cut)], &[]);
    assert_one_line_failure(&o, 3, "engine_unavailable");
    assert!(stderr(&o).contains("could not load"), "{}", stderr(&o));
    let o = transcribe(
        &[
            s(&jfk),
            "--engine",
            "whisper",
            "--model",
            "small.en",
            "--data-dir",
            s(data.path()),
        ],
        &[],
    );
    assert_one_line_failure(&o, 3, "engine_unavailable");
    assert!(
        stderr(&o).contains("models download small.en"),
        "{}",
        stderr(&o)
    );
    let o = transcribe(
        &[
            s(&jfk),
            "--engine",
            "whisper",
            "--model",
            s(&cut),
            "--language",
            "xx",
        ],
        &[],
    );
    assert_one_line_failure(&o, 2, "invalid_language");
    let empty = tempfile::tempdir().unwrap();
    let o = transcribe(
        &[
            s(&jfk),
            "--engine",
            "whisper",
            "--data-dir",
            s(empty.path()),
        ],
        &[],
    );
    assert_one_line_failure(&o, 3, "engine_unavailable");
    let o = transcribe(&[s(&jfk), "--engine", "builtin", "--language", "en"], &[]);
    assert_one_line_failure(&o, 2, "usage");
}
