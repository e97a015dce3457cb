//! Listening to a call: CPU on silence, end of speech → turn stored, memory over a long capture.
//!
//! `cargo bench -p stagewhisper-headless --bench listen [-- --silence-secs N] [--sentences N]
//! [--capture-secs N] [--base-url URL --model NAME] [--whisper-model FILE] [--both N]`
//!
//! Starts a private PulseAudio (the tests' `sound::Pulse`: null sinks `call` and `micfeed`, the
//! remapped source `mic`) and the release `stagewhisper-headless` binary on it, then:
//! 1. listens to a call while both channels hear silence for `--silence-secs` (60): the app's
//!    CPU time from `/proc/PID/stat` over that time, as a share of one core;
//! 2. plays `--sentences` (20) sentences of the speech benchmark's corpus (espeak-ng, alternately
//!    into the microphone and the call) and measures, for each, from the moment `paplay` has
//!    handed the last sample to the server to the moment the turn is in
//!    `GET /api/calls/{id}/transcript` (polled every 10 ms): p50, p90, max;
//! 3. plays `--both` (10) pairs of sentences into both channels at once (both live, as in a
//!    call where people talk over each other) and measures, per channel, from the end of its
//!    sentence to its turn stored: p50, p90, max;
//! 4. keeps talking (the corpus in a loop, both channels) for `--capture-secs` (120; the figure
//!    the issue asks for is 600) and samples `VmRSS` every 10 % of that time.
//!
//! The engine is the built-in one unless `--base-url` names an OpenAI-compatible server (e.g.
//! `tests/whisper/server.py`), or `--whisper-model` a ggml model file (e.g.
//! `.peers/whisper/models/ggml-tiny.en-q8_0.bin` from `tests/whisper/install.sh`), installed in
//! the data dir before the app starts so that Whisper in process is the default engine. Needs `pulseaudio`, `pulseaudio-utils` and `espeak-ng`; without
//! them it says so and exits. Linux only (it reads `/proc`).

#[path = "../tests/sound/mod.rs"]
mod sound;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

fn arg(name: &str) -> Option<String> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

fn num(name: &str, default: u64) -> u64 {
    arg(name).map_or(default, |v| {
        v.parse().unwrap_or_else(|_| panic!("{name} N"))
    })
}

struct Api {
    addr: String,
    token: String,
}

impl Api {
    fn call(&self, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
        let mut s = TcpStream::connect(&self.addr).expect("connect to the app");
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let body = body.map(Value::to_string).unwrap_or_default();
        write!(
            s,
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.addr,
            self.token,
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        s.read_to_string(&mut answer).unwrap();
        let (head, rest) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
        let status = head
            .split_whitespace()
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        // Bodies are small and sent whole (no chunked framing for JSON answers).
        (status, serde_json::from_str(rest).unwrap_or(Value::Null))
    }

    fn turns(&self, call: &str) -> usize {
        let (_, v) = self.call("GET", &format!("/api/calls/{call}/transcript"), None);
        v.as_array().map_or(0, Vec::len)
    }
}

fn proc_stat(pid: u32) -> (u64, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
    // utime and stime: fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or(0);
    (ticks, rss)
}

fn clock_ticks() -> f64 {
    let out = Command::new("getconf").arg("CLK_TCK").output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .trim()
        .parse()
        .unwrap_or(100.0)
}

fn corpus() -> Vec<String> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../stagewhisper-audio/benches/asr_sentences.txt");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(str::to_string)
        .collect()
}

fn percentile(sorted: &[f64], q: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * q).round() as usize]
}

/// The call's turns of `speaker`.
fn turns_of(api: &Api, call: &str, speaker: &str) -> usize {
    let (_, v) = api.call("GET", &format!("/api/calls/{call}/transcript"), None);
    v.as_array()
        .map_or(0, |t| t.iter().filter(|x| x["speaker"] == speaker).count())
}

/// `pairs` pairs of sentences, one into each channel at the same time: per channel, the end of
/// its sentence (its `paplay` done) → its next turn stored.
fn both_live(api: &Api, call: &str, pulse: &sound::Pulse, wavs: &[PathBuf], pairs: usize) {
    let mut lat: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let sides = [("micfeed", "You"), ("call", "Them")];
    for i in 0..pairs {
        let mut players: Vec<Option<Child>> = sides
            .iter()
            .enumerate()
            .map(|(k, (sink, _))| Some(pulse.play_bg(sink, &wavs[(2 * i + k) % wavs.len()])))
            .collect();
        let mut ended: [Option<(Instant, usize)>; 2] = [None, None];
        let mut done = [false, false];
        let began = Instant::now();
        while done != [true, true] && began.elapsed() < Duration::from_secs(60) {
            for (k, player) in players.iter_mut().enumerate() {
                if player
                    .as_mut()
                    .is_some_and(|p| p.try_wait().unwrap().is_some())
                {
                    *player = None;
                    ended[k] = Some((Instant::now(), turns_of(api, call, sides[k].1)));
                }
                if let (false, Some((at, n))) = (done[k], ended[k]) {
                    if turns_of(api, call, sides[k].1) > n {
                        lat[k].push(at.elapsed().as_secs_f64());
                        done[k] = true;
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(800));
    }
    for (k, (_, who)) in sides.iter().enumerate() {
        let l = &mut lat[k];
        l.sort_by(f64::total_cmp);
        if let Some(&max) = l.last() {
            println!(
                "both channels live, {who}: end of speech → turn stored: n={} p50 {:.3} s, p90 {:.3} s, max {:.3} s",
                l.len(),
                percentile(l, 0.5),
                percentile(l, 0.9),
                max
            );
        }
    }
}

fn main() {
    if !sound::tools("bench listen") {
        return;
    }
    let silence = Duration::from_secs(num("--silence-secs", 60));
    let sentences = num("--sentences", 20) as usize;
    let capture = Duration::from_secs(num("--capture-secs", 120));
    let pulse = sound::Pulse::start();
    let data = tempfile::tempdir().unwrap();
    if let Some(model) = arg("--whisper-model") {
        let model = std::fs::canonicalize(&model).unwrap_or_else(|e| panic!("{model}: {e}"));
        std::fs::create_dir_all(data.path().join("models")).unwrap();
        std::os::unix::fs::symlink(
            &model,
            data.path().join("models").join(model.file_name().unwrap()),
        )
        .unwrap();
    }
    let bin = PathBuf::from(env!("CARGO_BIN_EXE_stagewhisper-headless"));
    let mut child: Child = Command::new(&bin)
        .args(["--data-dir"])
        .arg(data.path())
        .args([
            "--callback-listen",
            "127.0.0.1:0",
            "--ui-listen",
            "127.0.0.1:0",
        ])
        .env("PULSE_SERVER", &pulse.server)
        .env_remove("STAGEWHISPER_DATA_DIR")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the app");
    let pid = child.id();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let ready: Value = serde_json::from_str(&line).expect("the ready line");
    let api = Api {
        addr: ready["ui_url"]
            .as_str()
            .unwrap()
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_string(),
        token: ready["ui_token"].as_str().unwrap().to_string(),
    };
    if let Some(base_url) = arg("--base-url") {
        let model = arg("--model").unwrap_or_else(|| "tiny.en".into());
        let (st, v) = api.call(
            "PUT",
            "/api/audio",
            Some(&json!({"engine": {"kind": "openai", "base_url": base_url, "model": model}})),
        );
        assert_eq!(st, 200, "{v}");
    }
    let (st, v) = api.call(
        "POST",
        "/api/calls",
        Some(&json!({"title": "bench", "listen": true})),
    );
    assert_eq!(st, 201, "{v}");
    let call = v["session_id"].as_str().unwrap().to_string();
    let until = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, v) = api.call("GET", "/api/audio", None);
        if v["status"]["state"] == "listening"
            && v["status"]["channels"]
                .as_array()
                .is_some_and(|c| c.iter().all(|c| !c["source"].is_null()))
            && v["status"]["engine"]["detail"]
                .as_str()
                .is_some_and(|d| d.starts_with("Ready"))
        {
            break;
        }
        assert!(Instant::now() < until, "not listening: {v}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let engine = api.call("GET", "/api/audio", None).1["status"]["engine"]["detail"].clone();
    println!("engine: {engine}");

    // 1. Silence.
    std::thread::sleep(Duration::from_secs(3));
    let hz = clock_ticks();
    let (t0, rss0) = proc_stat(pid);
    let began = Instant::now();
    std::thread::sleep(silence);
    let (t1, rss1) = proc_stat(pid);
    let cpu = (t1 - t0) as f64 / hz / began.elapsed().as_secs_f64() * 100.0;
    println!(
        "silence: {:.2} % of one core over {} s (VmRSS {} → {} MiB)",
        cpu,
        silence.as_secs(),
        rss0 / 1024,
        rss1 / 1024
    );

    // 2. End of speech → stored.
    let words = corpus();
    let dir = pulse.dir().to_path_buf();
    let wavs: Vec<PathBuf> = words
        .iter()
        .enumerate()
        .map(|(i, s)| sound::speech(&dir, &format!("s{i}"), "en-us", s))
        .collect();
    let mut lat = Vec::new();
    for i in 0..sentences {
        let sink = if i % 2 == 0 { "micfeed" } else { "call" };
        let before = api.turns(&call);
        pulse.play(sink, &wavs[i % wavs.len()]);
        let end = Instant::now();
        loop {
            if api.turns(&call) > before {
                lat.push(end.elapsed().as_secs_f64());
                break;
            }
            if end.elapsed() > Duration::from_secs(30) {
                println!("sentence {i}: no turn within 30 s (nothing recognised?)");
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        std::thread::sleep(Duration::from_millis(800));
    }
    lat.sort_by(f64::total_cmp);
    if !lat.is_empty() {
        println!(
            "end of speech → turn stored: n={} p50 {:.3} s, p90 {:.3} s, p99/max {:.3} s",
            lat.len(),
            percentile(&lat, 0.5),
            percentile(&lat, 0.9),
            lat[lat.len() - 1]
        );
    }

    // 3. Both channels at once.
    both_live(&api, &call, &pulse, &wavs, num("--both", 10) as usize);

    // 4. A long capture.
    let began = Instant::now();
    let step = capture / 10;
    let mut next = step;
    let mut samples = vec![(0u64, proc_stat(pid).1)];
    let mut i = 0;
    while began.elapsed() < capture {
        let sink = if i % 2 == 0 { "micfeed" } else { "call" };
        pulse.play(sink, &wavs[i % wavs.len()]);
        i += 1;
        if began.elapsed() >= next {
            samples.push((began.elapsed().as_secs(), proc_stat(pid).1));
            next += step;
        }
    }
    samples.push((began.elapsed().as_secs(), proc_stat(pid).1));
    println!(
        "VmRSS over {} s of talk ({} turns stored in all): {}",
        capture.as_secs(),
        api.turns(&call),
        samples
            .iter()
            .map(|(t, r)| format!("{t}s {} MiB", r / 1024))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let _ = child.kill();
    let _ = child.wait();
}
