//! Shared by the engine tests: the tools they need (PocketSphinx, espeak-ng, the Whisper test
//! server's venv), speech made with espeak-ng, the test server on a free loopback port.
//!
//! A test that needs a tool that is missing FAILS when `SW_AUDIO_REQUIRE=1` (run-tests sets
//! it) and is skipped with the reason printed otherwise.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/<name> inside the repository")
        .to_path_buf()
}

/// Whether missing tools fail the test (`SW_AUDIO_REQUIRE=1`).
pub fn required() -> bool {
    std::env::var("SW_AUDIO_REQUIRE").is_ok_and(|v| v == "1")
}

/// A tool is missing: fails under `SW_AUDIO_REQUIRE=1`, else prints why the test is skipped.
/// Returns `None` so that callers can `let Some(..) = .. else { return };`.
pub fn missing<T>(what: &str) -> Option<T> {
    if required() {
        panic!("SW_AUDIO_REQUIRE=1 and {what}");
    }
    eprintln!("SKIPPED: {what} (set SW_AUDIO_REQUIRE=1 to make this a failure)");
    None
}

pub fn have_command(cmd: &str) -> bool {
    Command::new(cmd)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// espeak-ng, or the skip/fail of [`missing`].
pub fn espeak() -> Option<()> {
    if have_command("espeak-ng") {
        Some(())
    } else {
        missing("espeak-ng is not installed (apt-get install espeak-ng)")
    }
}

/// Speaks `text` into a WAV file (espeak-ng's own format: 22,050 Hz mono 16-bit).
pub fn speak(text: &str, voice: &str, path: &Path) {
    let st = Command::new("espeak-ng")
        .args(["-v", voice, "-s", "150", "-w"])
        .arg(path)
        .arg(text)
        .status()
        .expect("espeak-ng runs");
    assert!(st.success(), "espeak-ng failed for {text:?}");
}

/// The recognised words, lower case, without punctuation.
pub fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric() && c != '\'')
        .filter(|w| !w.is_empty())
        .map(|w| w.to_lowercase())
        .collect()
}

/// How many of `keywords` appear in `text`. An amount in dollars counts as the word "dollars":
/// Whisper writes "$20,000" for "twenty thousand dollars" (seen on 8 kHz audio in a local run).
pub fn keywords_found(text: &str, keywords: &[&str]) -> usize {
    let mut w = words(text);
    if text.contains('$') {
        w.push("dollars".to_string());
    }
    keywords
        .iter()
        .filter(|k| w.iter().any(|x| x == *k))
        .count()
}

/// The Whisper test server (tests/whisper/server.py) on a free loopback port.
pub struct WhisperServer {
    child: Child,
    pub base_url: String,
}

impl WhisperServer {
    /// Starts the server from the venv `tests/whisper/install.sh` made, or the skip/fail of
    /// [`missing`]. `extra`: more arguments (e.g. `--api-key`).
    pub fn start(extra: &[&str]) -> Option<WhisperServer> {
        let root = repo_root();
        // Where tests/whisper/install.sh puts it; its stamp is written last, so a venv being
        // installed right now does not count.
        let venv = std::env::var_os("SW_WHISPER_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join(".peers/whisper"))
            .join("venv");
        let python = venv.join("bin/python");
        if !python.is_file() || !venv.join(".requirements.sha256").is_file() {
            return missing(&format!(
                "the Whisper test server's venv is not installed ({}; run tests/whisper/install.sh)",
                venv.display()
            ));
        }
        let mut child = Command::new(&python)
            .arg(root.join("tests/whisper/server.py"))
            .args(["--host", "127.0.0.1", "--port", "0", "--watch-stdin"])
            .args(extra)
            .env("HF_HUB_OFFLINE", "1")
            // Its stdin closes when this process ends, however it ends: the server then exits.
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the test server starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut lines = BufReader::new(stdout).lines();
            if let Some(Ok(line)) = lines.next() {
                let _ = tx.send(line);
            }
            // Keep reading so the server never blocks on a full pipe.
            for _ in lines {}
        });
        let line = match rx.recv_timeout(Duration::from_secs(120)) {
            Ok(l) => l,
            Err(_) => {
                let _ = child.kill();
                panic!("the Whisper test server printed no ready line within 120 s");
            }
        };
        let v: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("ready line {line:?}: {e}"));
        let base_url = v["base_url"].as_str().expect("base_url").to_string();
        Some(WhisperServer { child, base_url })
    }

    /// Tells the server how to answer the next `count` transcription requests
    /// (`{"status": 500}`, `{"hang": true}`, …; see server.py).
    pub fn control(&self, body: serde_json::Value) {
        post_json(&format!("{}/control", self.base_url), &body);
    }

    pub fn stats(&self) -> serde_json::Value {
        get_json(&format!("{}/stats", self.base_url))
    }
}

impl Drop for WhisperServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A tiny HTTP client for the control endpoints (plain std, so the test does not depend on
/// the engine's own client).
fn http(method: &str, url: &str, body: Option<&serde_json::Value>) -> serde_json::Value {
    use std::io::{Read, Write};
    let rest = url.strip_prefix("http://").expect("http URL");
    let (host, path) = rest
        .split_once('/')
        .map(|(h, p)| (h, format!("/{p}")))
        .unwrap();
    let mut s = std::net::TcpStream::connect(host).expect("connect to the test server");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    s.read_to_string(&mut answer).unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(
        head.starts_with("HTTP/1.") && head.contains(" 200 "),
        "{head}"
    );
    serde_json::from_str(body).unwrap_or(serde_json::Value::Null)
}

pub fn post_json(url: &str, body: &serde_json::Value) -> serde_json::Value {
    http("POST", url, Some(body))
}

pub fn get_json(url: &str) -> serde_json::Value {
    http("GET", url, None)
}

/// Waits until `f` is true (or panics after `limit`).
pub fn wait_until(limit: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ------------------------------------------------------------------------------ WER

pub fn number_words(n: u64) -> Vec<String> {
    const ONES: [&str; 20] = [
        "zero",
        "one",
        "two",
        "three",
        "four",
        "five",
        "six",
        "seven",
        "eight",
        "nine",
        "ten",
        "eleven",
        "twelve",
        "thirteen",
        "fourteen",
        "fifteen",
        "sixteen",
        "seventeen",
        "eighteen",
        "nineteen",
    ];
    const TENS: [&str; 10] = [
        "", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety",
    ];
    fn below_thousand(n: u64, out: &mut Vec<String>) {
        if n >= 100 {
            out.push(ONES[(n / 100) as usize].into());
            out.push("hundred".into());
        }
        let r = n % 100;
        if r >= 20 {
            out.push(TENS[(r / 10) as usize].into());
            if !r.is_multiple_of(10) {
                out.push(ONES[(r % 10) as usize].into());
            }
        } else if r > 0 || n == 0 {
            out.push(ONES[r as usize].into());
        }
    }
    let mut out = Vec::new();
    for (scale, name) in [(1_000_000, "million"), (1_000, "thousand")] {
        if n >= scale && !(n / scale).is_multiple_of(1000) {
            below_thousand(n / scale % 1000, &mut out);
            out.push(name.into());
        }
    }
    if !n.is_multiple_of(1000) || n == 0 {
        below_thousand(n % 1000, &mut out);
    }
    out
}

/// Lower case, punctuation dropped (apostrophes kept), digits written out, `$N` as "N
/// dollars", `N%` as "N percent".
pub fn normalize(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    for raw in text.split(|c: char| c.is_whitespace() || c == '-') {
        let t = raw.to_lowercase();
        let dollars = t.contains('$');
        let percent = t.contains('%');
        let digits: String = t.chars().filter(|c| c.is_ascii_digit()).collect();
        let core: String = t
            .chars()
            .filter(|c| c.is_alphanumeric() || *c == '\'')
            .collect();
        if !digits.is_empty() && core.chars().all(|c| c.is_ascii_digit()) {
            let whole: String = t
                .trim_start_matches('$')
                .split('.')
                .next()
                .unwrap_or("")
                .chars()
                .filter(|c| c.is_ascii_digit())
                .collect();
            if let Ok(n) = whole.parse::<u64>() {
                out.extend(number_words(n));
            }
            if dollars {
                out.push("dollars".into());
            }
            if percent {
                out.push("percent".into());
            }
        } else {
            let w = core.trim_matches('\'').to_string();
            match w.as_str() {
                "" => {}
                "mr" => out.push("mister".into()),
                "mrs" => out.push("missus".into()),
                _ => out.push(w),
            }
        }
    }
    out
}

/// Word-level edit distance.
pub fn edits(reference: &[String], hypothesis: &[String]) -> usize {
    let mut prev: Vec<usize> = (0..=hypothesis.len()).collect();
    for (i, r) in reference.iter().enumerate() {
        let mut cur = vec![i + 1; hypothesis.len() + 1];
        for (j, h) in hypothesis.iter().enumerate() {
            cur[j + 1] = (prev[j] + usize::from(r != h))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
        }
        prev = cur;
    }
    prev[hypothesis.len()]
}

/// Word error rate of `hypothesis` against `reference` (both normalised): (edits, words).
pub fn wer(reference: &str, hypothesis: &str) -> (usize, usize) {
    let r = normalize(reference);
    (edits(&r, &normalize(hypothesis)), r.len())
}

/// The committed clips of real human speech (`tests/fixtures/speech`): (file, reference).
pub fn real_speech() -> Vec<(PathBuf, String)> {
    let dir = repo_root().join("tests/fixtures/speech");
    std::fs::read_to_string(dir.join("references.tsv"))
        .expect("tests/fixtures/speech/references.tsv")
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (f, t) = l.split_once('\t').expect("file<TAB>text");
            (dir.join(f), t.to_string())
        })
        .collect()
}

/// The Whisper engine's test models (`tests/whisper/install.sh` makes them):
/// `$SW_WHISPER_MODELS`, else `<repo>/.peers/whisper/models`; or the skip/fail of [`missing`].
pub fn whisper_models() -> Option<PathBuf> {
    let dir = std::env::var_os("SW_WHISPER_MODELS")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".peers/whisper/models"));
    // The installer writes its stamp last: a folder being made does not count.
    if dir.join("ggml-tiny.en.bin").is_file() && dir.join(".stamp").is_file() {
        Some(dir)
    } else {
        missing(&format!(
            "the Whisper test models are not installed ({}; run tests/whisper/install.sh)",
            dir.display()
        ))
    }
}
