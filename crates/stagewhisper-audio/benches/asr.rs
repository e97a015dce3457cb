//! The speech benchmark (a bench binary, not a test):
//!
//! ```sh
//! cargo bench -p stagewhisper-audio --bench asr -- [--engines builtin,openai,openai-partials]
//!     [--sentences N] [--json FILE] [--partial-every-chunk]
//! ```
//!
//! **Section `engines`** (this file): the corpus (`benches/asr_sentences.txt`, 20 sentences of
//! a sales or planning call) is spoken by espeak-ng in two voices (`en-us`, `en-us+f3`) into
//! the target directory, each utterance framed by silence and cut into turns by the same
//! [`TurnMaker`] as live listening. Each turn is then fed to the engine **in real time**, in
//! 100 ms chunks as capture delivers them, with `partial()` asked once per
//! [`PARTIAL_EVERY`](stagewhisper_audio::pipeline::PARTIAL_EVERY) of audio as the live pipeline
//! does (`--partial-every-chunk`: after every chunk, ten times as often); then `finish()`. Per
//! engine configuration:
//!
//! - **WER**: word error rate of the joined final texts against the sentences (words lower
//!   case, punctuation dropped, digits written out: Whisper writes "$20,000" for "twenty
//!   thousand dollars");
//! - **RTF**: time spent inside the engine's calls (`push`, `partial`, `finish`) over the
//!   audio's duration (for a server, the client's wait; the server's own busy time over the
//!   audio is given too, partial requests included);
//! - **latency**: from the moment a turn's last audio arrived (its `End`, i.e. after the
//!   700 ms hangover) to its final text, p50 and p99 (with 40 turns p99 is the slowest but
//!   one). End of speech → final text is this plus the hangover.
//!
//! **Real human speech** (`tests/fixtures/speech`, 12 clips, 118 words) is fed the same way
//! after the synthetic sentences and scored as the voice `real`. Also per configuration: **CPU
//! seconds per second of speech** (the whole process, background partials included), the RSS
//! at the end of the run and the process's peak, and **end of speech → final text** (the
//! latency's p50 plus the turn maker's hangover).
//!
//! Engines: `builtin` (PocketSphinx), `whisper:MODEL[:THREADS]` (in process, e.g.
//! `whisper:tiny.en-q8_0:2`; the test models of tests/whisper/install.sh, partials on as live;
//! `whisper:MODEL:THREADS:nopartials` without them: what partials cost),
//! `openai` (Whisper tiny.en behind tests/whisper/server.py,
//! no partials), `openai-partials` (the same with the engine's partial requests, default
//! policy), `openai-partials-always` (partials without the pause the default policy takes
//! while the server is slow: what the pause buys).
//!
//! **Later sections** (the live pipeline: CPU while listening to silence, RSS over a
//! 10-minute capture, end of speech → turn stored) join as further `--section`s of this binary
//! or as their own bench printing the same JSON lines (`{"section", "config", ...}`).

#[path = "../tests/common/mod.rs"]
mod common;

use serde_json::json;
use stagewhisper_audio::engine::builtin::{BuiltinConfig, BuiltinEngine};
use stagewhisper_audio::engine::openai::{OpenAiConfig, OpenAiEngine, PartialPolicy};
use stagewhisper_audio::engine::whisper::{WhisperConfig, WhisperEngine};
use stagewhisper_audio::engine::Engine;
use stagewhisper_audio::pcm::{read_wav_16k_mono, RATE};
use stagewhisper_audio::pipeline::PARTIAL_EVERY;
use stagewhisper_audio::turns::{TurnConfig, TurnEvent, TurnMaker};
use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

const VOICES: [&str; 3] = ["en-us", "en-us+f3", REAL];
/// The committed clips of real human speech (tests/fixtures/speech), scored as a "voice".
const REAL: &str = "real";
const CHUNK: usize = 1600; // 100 ms

struct Utterance {
    voice: &'static str,
    text: String,
    /// The turns the TurnMaker cut from it (usually one).
    turns: Vec<Vec<i16>>,
    speech_ms: u64,
}

fn corpus(limit: usize) -> Vec<Utterance> {
    let list = include_str!("asr_sentences.txt");
    let sentences: Vec<&str> = list
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .take(limit)
        .collect();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("asr-corpus");
    std::fs::create_dir_all(&dir).unwrap();
    let mut out = Vec::new();
    let mut clips: Vec<(&'static str, String, PathBuf)> = Vec::new();
    for voice in &VOICES[..2] {
        for (i, text) in sentences.iter().enumerate() {
            let wav = dir.join(format!("{voice}-{i:02}.wav"));
            common::speak(text, voice, &wav);
            clips.push((voice, text.to_string(), wav));
        }
    }
    for (wav, text) in common::real_speech() {
        clips.push((REAL, text, wav));
    }
    {
        for (voice, text, wav) in clips {
            let speech = read_wav_16k_mono(&wav).unwrap();
            let mut audio = vec![0i16; RATE as usize / 2];
            audio.extend_from_slice(&speech);
            audio.extend(std::iter::repeat_n(0i16, RATE as usize * 3 / 2));
            let mut tm = TurnMaker::new(TurnConfig::default());
            let mut events = Vec::new();
            tm.push(&audio, &mut events);
            tm.finish(&mut events);
            let mut turns = Vec::new();
            for e in events {
                match e {
                    TurnEvent::Start { .. } => turns.push(Vec::new()),
                    TurnEvent::Audio(a) => turns.last_mut().unwrap().extend_from_slice(&a),
                    TurnEvent::End { .. } => {}
                }
            }
            out.push(Utterance {
                voice,
                text,
                turns,
                speech_ms: speech.len() as u64 * 1000 / RATE as u64,
            });
        }
    }
    out
}

// ------------------------------------------------------------------------------ a run

struct Run {
    config: String,
    wer: f64,
    /// Per voice.
    wer_by_voice: Vec<(&'static str, f64)>,
    rtf: f64,
    /// CPU seconds of the whole process per second of speech (partials included).
    cpu_per_s: f64,
    /// RSS at the end of the run.
    rss_mib: u64,
    server_rtf: Option<f64>,
    latencies: Vec<Duration>,
    partials_seen: usize,
    turns: usize,
    audio_s: f64,
    worst: Vec<(String, String)>,
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn sleep_until(t: Instant) {
    let now = Instant::now();
    if t > now {
        std::thread::sleep(t - now);
    }
}

fn run(
    config: &str,
    engine: &dyn Engine,
    corpus: &[Utterance],
    server: Option<&common::WhisperServer>,
) -> Run {
    let busy0 = server.map(|s| s.stats()["busy_s"].as_f64().unwrap_or(0.0));
    let cpu0 = cpu_s();
    // The live pipeline asks for a partial once per PARTIAL_EVERY (in chunks of audio).
    let every = if std::env::args().any(|a| a == "--partial-every-chunk") {
        1
    } else {
        ((PARTIAL_EVERY.as_secs_f64() * RATE as f64) as usize / CHUNK).max(1)
    };
    let (mut edits_total, mut words_total) = (0usize, 0usize);
    let mut by_voice: Vec<(&'static str, usize, usize)> =
        VOICES.iter().map(|v| (*v, 0, 0)).collect();
    let mut engine_time = Duration::ZERO;
    let mut audio_samples = 0usize;
    let mut latencies = Vec::new();
    let mut partials_seen = 0;
    let mut worst: Vec<(usize, String, String)> = Vec::new();
    for (n, utt) in corpus.iter().enumerate() {
        let mut texts = Vec::new();
        for turn in &utt.turns {
            audio_samples += turn.len();
            let t0 = Instant::now();
            let mut u = engine.begin().expect("begin");
            engine_time += t0.elapsed();
            let mut seen_partial = false;
            for (k, chunk) in turn.chunks(CHUNK).enumerate() {
                // The chunk is there once its last sample has been captured.
                let arrives =
                    t0 + Duration::from_secs_f64((k * CHUNK + chunk.len()) as f64 / RATE as f64);
                sleep_until(arrives);
                let t = Instant::now();
                u.push(chunk).expect("push");
                if (k + 1) % every == 0 {
                    seen_partial |= u.partial().is_some();
                }
                engine_time += t.elapsed();
            }
            let end = t0 + Duration::from_secs_f64(turn.len() as f64 / RATE as f64);
            sleep_until(end);
            let t = Instant::now();
            let text = u.finish().unwrap_or_else(|e| panic!("{config}: {e}"));
            engine_time += t.elapsed();
            latencies.push(end.elapsed());
            partials_seen += usize::from(seen_partial);
            texts.push(text);
            // A pause between turns, as in a conversation.
            std::thread::sleep(Duration::from_millis(300));
        }
        let hyp = texts.join(" ");
        let (r, h) = (common::normalize(&utt.text), common::normalize(&hyp));
        let e = common::edits(&r, &h);
        edits_total += e;
        words_total += r.len();
        if let Some(v) = by_voice.iter_mut().find(|v| v.0 == utt.voice) {
            v.1 += e;
            v.2 += r.len();
        }
        if e > 0 {
            worst.push((e, format!("[{}] {}", utt.voice, utt.text), hyp));
        }
        eprint!("\r{config}: {}/{}   ", n + 1, corpus.len());
    }
    eprintln!();
    let audio_s = audio_samples as f64 / RATE as f64;
    worst.sort_by_key(|w| std::cmp::Reverse(w.0));
    latencies.sort();
    let server_rtf = server
        .zip(busy0)
        .map(|(s, b0)| (s.stats()["busy_s"].as_f64().unwrap_or(0.0) - b0) / audio_s);
    Run {
        config: config.into(),
        wer: edits_total as f64 / words_total.max(1) as f64,
        wer_by_voice: by_voice
            .iter()
            .map(|(v, e, n)| (*v, *e as f64 / (*n).max(1) as f64))
            .collect(),
        rtf: engine_time.as_secs_f64() / audio_s,
        cpu_per_s: (cpu_s() - cpu0) / audio_s,
        rss_mib: rss_kib() / 1024,
        server_rtf,
        turns: latencies.len(),
        latencies,
        partials_seen,
        audio_s,
        worst: worst.into_iter().take(3).map(|(_, r, h)| (r, h)).collect(),
    }
}

fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

fn rss_kib() -> u64 {
    status_kib("VmRSS:")
}

/// CPU time of the whole process (every thread: the engine's background work included).
fn cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let f: Vec<f64> = after
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0.0))
        .collect();
    // utime and stime are fields 14 and 15 (11 and 12 after the command), in clock ticks.
    (f.get(11).unwrap_or(&0.0) + f.get(12).unwrap_or(&0.0)) / 100.0
}

/// `whisper:MODEL[:THREADS]` (partials on, as live): the model from the test models
/// (`tests/whisper/install.sh`), loaded before the run; its load time and RSS printed.
fn run_whisper(config: &str, corpus: &[Utterance]) -> Option<Run> {
    let mut parts = config.split(':').skip(1);
    let model = parts.next().unwrap_or("tiny.en");
    let threads: usize = parts.next().and_then(|t| t.parse().ok()).unwrap_or(1);
    let partials = parts.next() != Some("nopartials");
    let models = common::whisper_models()?;
    let rss0 = rss_kib();
    let t = Instant::now();
    let mut c = WhisperConfig::new(model, "auto", &models);
    c.threads = threads;
    c.partials.enabled = partials;
    let e = WhisperEngine::new(c).expect("the model file");
    e.wait_loaded().expect("the model loads");
    eprintln!(
        "{config}: loaded in {:.2} s, RSS +{} MiB",
        t.elapsed().as_secs_f64(),
        (rss_kib() - rss0) / 1024
    );
    Some(run(config, &e, corpus, None))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let opt = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let engines = opt("--engines")
        .unwrap_or_else(|| "builtin,openai,openai-partials,openai-partials-always".into());
    let limit: usize = opt("--sentences")
        .and_then(|n| n.parse().ok())
        .unwrap_or(usize::MAX);
    let json_out = opt("--json");
    // The scorer itself, checked before it scores anything.
    assert_eq!(
        common::normalize("Our budget: $20,000, by 3 o'clock - 15%!").join(" "),
        "our budget twenty thousand dollars by three o'clock fifteen percent"
    );
    assert_eq!(
        common::normalize("2,500,013").join(" "),
        "two million five hundred thousand thirteen"
    );
    let w = |s: &str| common::normalize(s);
    assert_eq!(common::edits(&w("a b c d"), &w("a x c")), 2);
    if common::espeak().is_none() {
        return;
    }
    let t = Instant::now();
    let corpus = corpus(limit);
    let turns: usize = corpus.iter().map(|u| u.turns.len()).sum();
    let speech: u64 = corpus.iter().map(|u| u.speech_ms).sum();
    eprintln!(
        "corpus: {} utterances ({} voices), {turns} turns, {:.1} s of speech, made in {:.1} s",
        corpus.len(),
        VOICES.len(),
        speech as f64 / 1000.0,
        t.elapsed().as_secs_f64()
    );
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    eprintln!("load average at start: {}", load.trim());

    let mut runs = Vec::new();
    let mut extra = serde_json::Map::new();
    let wanted: Vec<&str> = engines.split(',').map(str::trim).collect();
    if wanted.contains(&"builtin") {
        let rss0 = rss_kib();
        let t = Instant::now();
        match BuiltinEngine::new(BuiltinConfig::default()) {
            Ok(e) => {
                while e.idle_decoders() == 0 {
                    std::thread::sleep(Duration::from_millis(5));
                }
                let load_s = t.elapsed().as_secs_f64();
                let rss1 = rss_kib();
                // A second decoder (both channels of a call).
                let a = e.begin().unwrap();
                let b = e.begin().unwrap();
                let rss2 = rss_kib();
                drop((a, b));
                eprintln!(
                    "builtin: first decoder loaded in {load_s:.2} s; RSS +{} MiB with one decoder, +{} MiB with two",
                    (rss1 - rss0) / 1024,
                    (rss2 - rss0) / 1024
                );
                extra.insert("builtin_load_s".into(), json!(load_s));
                extra.insert("builtin_rss_one_mib".into(), json!((rss1 - rss0) / 1024));
                extra.insert("builtin_rss_two_mib".into(), json!((rss2 - rss0) / 1024));
                runs.push(run("builtin", &e, &corpus, None));
            }
            Err(err) => eprintln!("builtin: skipped ({err})"),
        }
    }
    let openai: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|w| w.starts_with("openai"))
        .collect();
    if !openai.is_empty() {
        if let Some(server) = common::WhisperServer::start(&[]) {
            for config in openai {
                let mut c = OpenAiConfig::new(&server.base_url, "tiny.en", None);
                c.partials = match config {
                    "openai" => PartialPolicy {
                        enabled: false,
                        ..PartialPolicy::default()
                    },
                    "openai-partials" => PartialPolicy::default(),
                    "openai-partials-always" => PartialPolicy {
                        max_latency_ratio: f64::INFINITY,
                        ..PartialPolicy::default()
                    },
                    other => panic!("unknown engine configuration {other}"),
                };
                let e = OpenAiEngine::new(c).unwrap();
                // One request first: the server's first inference warms its caches.
                let _ = e.transcribe(&corpus[0].turns[0]);
                runs.push(run(config, &e, &corpus, Some(&server)));
            }
        }
    }

    for config in wanted.iter().filter(|w| w.starts_with("whisper")) {
        if let Some(r) = run_whisper(config, &corpus) {
            runs.push(r);
        }
    }

    println!(
        "\n{:<24} {:>6} {:>6} {:>7} {:>10} {:>9} {:>9} {:>9} {:>6} {:>5}",
        "engine", "WER", "RTF", "CPU/s", "server RTF", "p50", "p99", "max", "turns", "RSS"
    );
    let mut lines = Vec::new();
    for r in &runs {
        let (p50, p99, max) = (
            percentile(&r.latencies, 0.5),
            percentile(&r.latencies, 0.99),
            r.latencies.last().copied().unwrap_or_default(),
        );
        println!(
            "{:<24} {:>5.1}% {:>6.3} {:>7.3} {:>10} {:>7.0}ms {:>7.0}ms {:>7.0}ms {:>6} {:>5}",
            r.config,
            r.wer * 100.0,
            r.rtf,
            r.cpu_per_s,
            r.server_rtf.map_or("-".into(), |x| format!("{x:.3}")),
            p50.as_secs_f64() * 1000.0,
            p99.as_secs_f64() * 1000.0,
            max.as_secs_f64() * 1000.0,
            r.turns,
            r.rss_mib
        );
        let voices: Vec<String> = r
            .wer_by_voice
            .iter()
            .map(|(v, w)| format!("{v} {:.1}%", w * 100.0))
            .collect();
        println!(
            "    WER by voice: {}; turns with a partial before the final: {}/{}",
            voices.join(", "),
            r.partials_seen,
            r.turns
        );
        for (reference, hyp) in &r.worst {
            println!("    worst: {reference}\n        -> {hyp}");
        }
        lines.push(json!({
            "section": "engines",
            "config": r.config,
            "wer": r.wer,
            "wer_by_voice": r.wer_by_voice.iter().map(|(v, w)| json!({"voice": v, "wer": w})).collect::<Vec<_>>(),
            "rtf": r.rtf,
            "cpu_s_per_speech_s": r.cpu_per_s,
            "rss_mib": r.rss_mib,
            "peak_rss_mib": status_kib("VmHWM:") / 1024,
            "end_of_speech_to_final_p50_ms": p50.as_secs_f64() * 1000.0 + TurnConfig::default().hangover_ms as f64,
            "server_rtf": r.server_rtf,
            "latency_p50_ms": p50.as_secs_f64() * 1000.0,
            "latency_p99_ms": p99.as_secs_f64() * 1000.0,
            "latency_max_ms": max.as_secs_f64() * 1000.0,
            "turns": r.turns,
            "turns_with_a_partial": r.partials_seen,
            "audio_s": r.audio_s,
        }));
    }
    if !extra.is_empty() {
        lines.push(json!({"section": "engines", "config": "builtin-load", "figures": extra}));
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at the end: {}", load.trim());
    if let Some(path) = json_out {
        let mut f = std::fs::File::create(&path).unwrap();
        for l in lines {
            writeln!(f, "{l}").unwrap();
        }
    }
}
