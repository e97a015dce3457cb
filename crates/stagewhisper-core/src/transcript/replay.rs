//! `stagewhisper transcript replay FILE --session ID [--speed X]`: feeds a transcript file into a
//! running app through its control API (`POST /api/calls/{id}/transcript`), at the pace of the
//! file's timings divided by `speed` (`0` = as fast as possible), reporting progress.
//!
//! The app is found through `--ui-url`/`--ui-token`, else the data dir's `ui_url` and
//! `ui_token` files (written by the app at start-up).

use super::{load, Cue, Format, LoadError};
use crate::assistants::kinds::incoming::client::{self, Call, Endpoint, Timeouts};
use crate::tokens::UI_TOKEN_FILE;
use hyper::{Method, StatusCode};
use serde_json::{json, Value};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, Clone)]
pub struct ReplayOptions {
    pub file: PathBuf,
    /// The call's chat session id.
    pub session_id: String,
    /// `1.0` = real time, `2.0` = twice as fast, `0.0` = no waiting.
    pub speed: f64,
    pub ui_url: Option<String>,
    pub ui_token: Option<String>,
    /// Where `ui_url` / `ui_token` are read when not given (default: the app's default).
    pub data_dir: Option<PathBuf>,
}

/// Progress, for the caller to show.
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayProgress {
    Started {
        format: Format,
        turns: usize,
        /// Of the recording, from the first turn to the last.
        duration_ms: i64,
        ui_url: String,
    },
    /// One turn was posted (`stored` false for interim turns, which the app ignores).
    Sent {
        index: usize,
        total: usize,
        at_ms: i64,
        speaker: Option<String>,
        text: String,
        stored: bool,
    },
    Done {
        sent: usize,
        stored: usize,
        elapsed: Duration,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplaySummary {
    pub sent: usize,
    pub stored: usize,
    pub elapsed: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("--speed must be a number ≥ 0 (0 = as fast as possible), got {0}")]
    Speed(f64),
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(
        "cannot find the running app: {0}. Start StageWhisper, or pass --ui-url and --ui-token \
         (shown in the headless ready line), or --data-dir of the running app"
    )]
    Locate(String),
    #[error("the UI URL {url} is not usable: {message}")]
    BadUrl { url: String, message: String },
    #[error("no app answers at {url} ({error}): is StageWhisper running with this data dir?")]
    Unreachable { url: String, error: String },
    #[error(
        "the app rejected the UI token (401): pass the current --ui-token or the right --data-dir"
    )]
    Unauthorized,
    #[error("there is no call {0} (list calls with GET /api/sessions)")]
    CallNotFound(String),
    #[error("session {0} is a chat, not a call: start a call first (POST /api/calls)")]
    NotACall(String),
    #[error("the call {0} has ended: transcript turns are no longer accepted")]
    CallEnded(String),
    #[error("turn {index} (line {line}) was refused: {status} {body}")]
    Refused {
        index: usize,
        line: usize,
        status: u16,
        body: String,
    },
}

struct Target {
    ep: Endpoint,
    url: String,
    token: String,
}

fn locate(opts: &ReplayOptions) -> Result<Target, ReplayError> {
    let dir = opts
        .data_dir
        .clone()
        .unwrap_or_else(crate::app::default_data_dir);
    let read = |name: &str| -> Result<String, ReplayError> {
        let p = dir.join(name);
        std::fs::read_to_string(&p)
            .map(|s| s.trim().to_string())
            .map_err(|e| ReplayError::Locate(format!("cannot read {} ({e})", p.display())))
    };
    let url = match &opts.ui_url {
        Some(u) => u.clone(),
        None => read(crate::app::UI_URL_FILE)?,
    };
    let token = match &opts.ui_token {
        Some(t) => t.clone(),
        None => read(UI_TOKEN_FILE)?,
    };
    let ep = Endpoint::parse(&url).map_err(|e| ReplayError::BadUrl {
        url: url.clone(),
        message: e.to_string(),
    })?;
    Ok(Target { ep, url, token })
}

async fn api(
    t: &Target,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Result<client::Response, ReplayError> {
    let mut call = Call::new(method, path).bearer(&t.token);
    if let Some(b) = body {
        call = call.json(serde_json::to_vec(&b).expect("serializable"));
    }
    let r = client::send(&t.ep, call, Timeouts::default())
        .await
        .map_err(|e| ReplayError::Unreachable {
            url: t.url.clone(),
            error: e.to_string(),
        })?;
    if r.status == StatusCode::UNAUTHORIZED {
        return Err(ReplayError::Unauthorized);
    }
    Ok(r)
}

/// Replays a transcript file into a running app.
pub async fn replay(
    opts: ReplayOptions,
    mut progress: impl FnMut(&ReplayProgress),
) -> Result<ReplaySummary, ReplayError> {
    if !(opts.speed.is_finite() && opts.speed >= 0.0) {
        return Err(ReplayError::Speed(opts.speed));
    }
    let (format, cues) = load(&opts.file)?;
    let target = locate(&opts)?;
    let sid = opts.session_id.trim().to_string();
    // Check the call first: a clear error before anything is sent.
    let r = api(&target, Method::GET, "/api/sessions", None).await?;
    let sessions = r.json();
    let Some(call) = sessions
        .as_array()
        .and_then(|a| a.iter().find(|s| s["session_id"] == sid.as_str()))
    else {
        return Err(ReplayError::CallNotFound(sid));
    };
    if call["is_call"] != true {
        return Err(ReplayError::NotACall(sid));
    }
    if !call["ended_at"].is_null() {
        return Err(ReplayError::CallEnded(sid));
    }
    let first = cues.iter().map(|c| c.start_ms).min().unwrap_or(0);
    let last = cues.iter().map(|c| c.start_ms).max().unwrap_or(0);
    progress(&ReplayProgress::Started {
        format,
        turns: cues.len(),
        duration_ms: last - first,
        ui_url: target.url.clone(),
    });
    let started = Instant::now();
    let path = format!("/api/calls/{}/transcript", client::encode_query_value(&sid));
    let total = cues.len();
    let mut stored = 0;
    for (i, cue) in cues.iter().enumerate() {
        wait_for(cue, first, opts.speed, started).await;
        let body = json!({"speaker": cue.speaker, "text": cue.text, "is_final": cue.is_final});
        let r = api(&target, Method::POST, &path, Some(body)).await?;
        let ok = match r.status {
            StatusCode::CREATED => true,
            StatusCode::ACCEPTED => false,
            StatusCode::CONFLICT if r.json()["error"] == "call_ended" => {
                return Err(ReplayError::CallEnded(sid))
            }
            StatusCode::NOT_FOUND => return Err(ReplayError::CallNotFound(sid)),
            s => {
                return Err(ReplayError::Refused {
                    index: i + 1,
                    line: cue.line,
                    status: s.as_u16(),
                    body: String::from_utf8_lossy(&r.body).into_owned(),
                })
            }
        };
        stored += ok as usize;
        progress(&ReplayProgress::Sent {
            index: i + 1,
            total,
            at_ms: cue.start_ms - first,
            speaker: cue.speaker.clone(),
            text: cue.text.clone(),
            stored: ok,
        });
    }
    let summary = ReplaySummary {
        sent: total,
        stored,
        elapsed: started.elapsed(),
    };
    progress(&ReplayProgress::Done {
        sent: summary.sent,
        stored: summary.stored,
        elapsed: summary.elapsed,
    });
    Ok(summary)
}

async fn wait_for(cue: &Cue, first: i64, speed: f64, started: Instant) {
    if speed == 0.0 {
        return;
    }
    let due = Duration::from_secs_f64(((cue.start_ms - first).max(0) as f64 / 1000.0) / speed);
    if let Some(left) = due.checked_sub(started.elapsed()) {
        tokio::time::sleep(left).await;
    }
}

/// A progress printer for the command line (stderr, one line per turn).
pub fn print_progress(p: &ReplayProgress) {
    let mmss = |ms: i64| format!("{:02}:{:02}", ms / 60_000, (ms / 1000) % 60);
    match p {
        ReplayProgress::Started {
            format,
            turns,
            duration_ms,
            ui_url,
        } => eprintln!(
            "replaying {turns} {} of {} ({} long) into {ui_url}",
            if *turns == 1 { "turn" } else { "turns" },
            format.as_str(),
            mmss(*duration_ms),
        ),
        ReplayProgress::Sent {
            index,
            total,
            at_ms,
            speaker,
            text,
            stored,
        } => {
            let short: String = text.chars().take(70).collect();
            let more = if text.chars().count() > 70 { "…" } else { "" };
            let who = speaker
                .as_deref()
                .map(|s| format!("{s}: "))
                .unwrap_or_default();
            let note = if *stored {
                ""
            } else {
                "  (interim: not stored)"
            };
            eprintln!(
                "[{index:>4}/{total}] {} {who}{short}{more}{note}",
                mmss(*at_ms)
            );
        }
        ReplayProgress::Done {
            sent,
            stored,
            elapsed,
        } => eprintln!(
            "done: {sent} turns sent, {stored} stored, in {:.1} s",
            elapsed.as_secs_f64()
        ),
    }
}

/// A clap-free command line entry point: `ARGS` are what follows `transcript replay`
/// (`FILE --session ID [--speed X] [--ui-url URL] [--ui-token T] [--data-dir DIR]`). Returns the
/// process exit code (0 ok, 1 failed, 2 usage).
pub async fn run_cli(args: &[String]) -> i32 {
    const USAGE: &str = "usage: stagewhisper transcript replay FILE --session ID [--speed X] \
                         [--ui-url URL] [--ui-token TOKEN] [--data-dir DIR]";
    let mut file = None;
    let mut opts = ReplayOptions {
        file: PathBuf::new(),
        session_id: String::new(),
        speed: 1.0,
        ui_url: None,
        ui_token: None,
        data_dir: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = |name: &str| match it.next() {
            Some(v) => Ok(v.clone()),
            None => Err(format!("{name} needs a value")),
        };
        let r: Result<(), String> = match a.as_str() {
            "--session" => value("--session").map(|v| opts.session_id = v),
            "--speed" => value("--speed").and_then(|v| {
                v.parse::<f64>()
                    .map(|s| opts.speed = s)
                    .map_err(|_| format!("--speed: `{v}` is not a number"))
            }),
            "--ui-url" => value("--ui-url").map(|v| opts.ui_url = Some(v)),
            "--ui-token" => value("--ui-token").map(|v| opts.ui_token = Some(v)),
            "--data-dir" => value("--data-dir").map(|v| opts.data_dir = Some(v.into())),
            "-h" | "--help" => {
                eprintln!("{USAGE}");
                return 0;
            }
            s if s.starts_with('-') => Err(format!("unknown option {s}")),
            s if file.is_none() => {
                file = Some(PathBuf::from(s));
                Ok(())
            }
            s => Err(format!("unexpected argument {s}")),
        };
        if let Err(e) = r {
            eprintln!("stagewhisper transcript replay: {e}\n{USAGE}");
            return 2;
        }
    }
    let Some(file) = file else {
        eprintln!("stagewhisper transcript replay: FILE is required\n{USAGE}");
        return 2;
    };
    if opts.session_id.is_empty() {
        eprintln!("stagewhisper transcript replay: --session is required\n{USAGE}");
        return 2;
    }
    opts.file = file;
    match replay(opts, print_progress).await {
        Ok(_) => 0,
        Err(e) => {
            eprintln!("stagewhisper transcript replay: {e}");
            1
        }
    }
}
