//! The command line of StageWhisper Desktop and its headless start-up, shared by both binaries:
//! `stagewhisper` (the desktop app, which adds the window) and `stagewhisper-headless` (no window
//! toolkit linked at all). Nothing here depends on Tauri.
//!
//! Both binaries take the same flags, print the same JSON `ready` line on stdout (logs go to
//! stderr), shut down gracefully on SIGINT/SIGTERM and have the same `transcript replay`,
//! `export`, `transcribe`, `models` and `openapi` subcommands.

pub mod models;
pub mod openapi;
pub mod transcribe;

use anyhow::Context;
use clap::{CommandFactory, FromArgMatches, Parser};
use stagewhisper_core::api::{find_ui_dir, DirAssets};
use stagewhisper_core::app::default_data_dir;
use stagewhisper_core::conversation::Settings;
use stagewhisper_core::store::Durability;
use stagewhisper_core::{App, Config};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

/// Which binary is parsing its command line (its name, description and `--headless` help).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Binary {
    /// `stagewhisper`: the window with a display, else (or with `--headless`) the web UI.
    Desktop,
    /// `stagewhisper-headless`: always the web UI on loopback.
    Headless,
}

#[derive(Debug, Parser)]
#[command(
    name = "stagewhisper",
    version,
    about = "StageWhisper Desktop (direct relay)"
)]
pub struct Cli {
    /// Run without a window: serve the UI to a browser on loopback.
    #[arg(long)]
    pub headless: bool,
    /// Where the database and tokens live.
    #[arg(long, value_name = "DIR", global = true)]
    pub data_dir: Option<PathBuf>,
    /// Address of the callback listener (loopback only; port 0 = any free port).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    pub callback_listen: SocketAddr,
    /// Address of the UI / control API listener (loopback only).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    pub ui_listen: SocketAddr,
    /// Inactivity timer that clears a typing indicator, in seconds.
    #[arg(long, value_name = "N", default_value_t = 30)]
    pub typing_timeout_secs: u64,
    /// How long after a call ends its insights session still accepts replies, in seconds.
    #[arg(long, value_name = "N", default_value_t = 120)]
    pub insights_grace_secs: u64,
    /// The built web UI to serve (default: ui/dist found beside the executable).
    #[arg(long, value_name = "DIR")]
    pub ui_dir: Option<PathBuf>,
    /// `crash`: an acknowledged callback survives any crash of the app (WAL fsynced every
    /// second); `power-loss`: every commit is fsynced before it is acknowledged.
    #[arg(long, value_name = "LEVEL", default_value = "crash", value_parser = ["crash", "power-loss"])]
    pub durability: String,
    #[command(subcommand)]
    pub command: Option<Command>,
}

impl Cli {
    /// Parses the process's arguments as `binary` (exits with clap's message on an error or
    /// `--help`/`--version`).
    pub fn parse_for(binary: Binary) -> Cli {
        let command = match binary {
            Binary::Desktop => Cli::command(),
            Binary::Headless => Cli::command()
                .name("stagewhisper-headless")
                .about("StageWhisper Desktop (direct relay) without the window: the UI is served to a browser on loopback")
                .mut_arg("headless", |a| {
                    a.help("Accepted for scripts written for `stagewhisper --headless`; this binary never opens a window")
                }),
        };
        Cli::from_arg_matches(&command.get_matches()).unwrap_or_else(|e| e.exit())
    }
}

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Transcript tools.
    #[command(subcommand)]
    Transcript(TranscriptCommand),
    /// Export a call (or chat) with its transcript, insights and chat, as Markdown or JSON.
    /// Reads the data dir's database directly, whether the app is running on it or not.
    Export {
        /// The session id (a call's or a chat's).
        #[arg(long)]
        session: String,
        /// `md` (Markdown) or `json`.
        #[arg(long, default_value = "md", value_parser = ["md", "json"])]
        format: String,
        /// Write to this file instead of stdout.
        #[arg(long, short, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Transcribe a recording (WAV) with the same turn-making as live listening: one segment
    /// per turn, `{"start_ms", "end_ms", "speaker", "text"}`. Stereo: left "You", right "Them";
    /// mono: "Them". Turns with no recognised words are left out. Needs no running app.
    Transcribe(transcribe::TranscribeArgs),
    /// The speech models of the data dir: `list`, `download NAME`, `import FILE`, `remove NAME`.
    /// Acts on the data dir directly, whether the app is running on it or not.
    #[command(subcommand)]
    Models(models::ModelsCommand),
    /// Print the control API's OpenAPI document (JSON), as `GET /api/openapi.json` serves it.
    /// Needs no running app (the core starts for a moment on a throwaway data dir).
    Openapi(openapi::OpenapiArgs),
}

#[derive(Debug, clap::Subcommand)]
pub enum TranscriptCommand {
    /// Feed a WebVTT, SRT or JSONL transcript into a running app's call, at real or faster pace.
    Replay {
        /// The transcript (.vtt, .srt, .jsonl).
        file: PathBuf,
        /// The call's session id.
        #[arg(long)]
        session: String,
        /// 1 = real time, 4 = four times faster, 0 = as fast as possible.
        #[arg(long, default_value_t = 1.0)]
        speed: f64,
        /// The running app's UI URL (default: the data dir's `ui_url`).
        #[arg(long)]
        ui_url: Option<String>,
        /// The running app's UI token (default: the data dir's `ui_token`).
        #[arg(long)]
        ui_token: Option<String>,
    },
}

/// Runs a subcommand (a client of a running app, no core of its own).
pub fn run_command(command: Command, data_dir: Option<PathBuf>) -> anyhow::Result<()> {
    match command {
        Command::Transcript(cmd) => run_replay(cmd, data_dir),
        Command::Export {
            session,
            format,
            output,
        } => {
            if let Err(e) = run_export(&session, &format, output, data_dir) {
                eprintln!("stagewhisper export: {e:#}");
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Transcribe(args) => transcribe::run(args, data_dir),
        Command::Models(cmd) => models::run(cmd, data_dir),
        Command::Openapi(args) => openapi::run(args),
    }
}

/// `… export --session ID --format md|json [--output FILE]`.
fn run_export(
    session: &str,
    format: &str,
    output: Option<PathBuf>,
    data_dir: Option<PathBuf>,
) -> anyhow::Result<()> {
    use stagewhisper_core::archive::export::{export, Format};
    let format = Format::parse(format)?;
    let dir = data_dir.unwrap_or_else(default_data_dir);
    let db = dir.join(stagewhisper_core::app::DB_FILE);
    anyhow::ensure!(db.is_file(), "no database in {}", dir.display());
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let text = rt.block_on(async {
        let store = stagewhisper_core::store::Store::open_read_only(&db)
            .await
            .with_context(|| format!("cannot open {}", db.display()))?;
        let e = export(&store, session).await?;
        anyhow::Ok(e.render(format))
    })?;
    match output {
        Some(path) => std::fs::write(&path, text)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(text.as_bytes())?;
            out.flush()?;
        }
    }
    Ok(())
}

/// `… transcript replay …`.
fn run_replay(cmd: TranscriptCommand, data_dir: Option<PathBuf>) -> anyhow::Result<()> {
    use stagewhisper_core::transcript::replay::{print_progress, replay, ReplayOptions};
    let TranscriptCommand::Replay {
        file,
        session,
        speed,
        ui_url,
        ui_token,
    } = cmd;
    let opts = ReplayOptions {
        file,
        session_id: session,
        speed,
        ui_url,
        ui_token,
        data_dir,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    if let Err(e) = rt.block_on(replay(opts, print_progress)) {
        eprintln!("stagewhisper transcript replay: {e}");
        std::process::exit(1);
    }
    Ok(())
}

/// Logs to stderr (`RUST_LOG` filters; default `info,sqlx=warn`).
pub fn init_logging() {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,sqlx=warn".into()),
        )
        .init();
}

/// The Tokio runtime the core runs on, with the signal handlers installed in it. They go in
/// before the ready line, so a SIGTERM right after it is graceful too.
pub fn runtime() -> anyhow::Result<(tokio::runtime::Runtime, Signals)> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let signals = {
        let _in_runtime = rt.enter();
        Signals::install()?
    };
    Ok((rt, signals))
}

/// The core's configuration; the same in both modes and both binaries.
pub fn core_config(cli: Cli) -> Config {
    let mut config = Config::new(cli.data_dir.unwrap_or_else(default_data_dir));
    config.callback_listen = cli.callback_listen;
    config.ui_listen = cli.ui_listen;
    config.settings = Settings {
        typing_timeout_ms: (cli.typing_timeout_secs.max(1) * 1000) as i64,
        insights_grace_ms: (cli.insights_grace_secs * 1000) as i64,
    };
    config.durability = Durability::parse(&cli.durability).unwrap_or_default();
    config.assets = find_ui_dir(cli.ui_dir.as_deref())
        .map(|d| Arc::new(DirAssets::new(d)) as Arc<dyn stagewhisper_core::api::Assets>);
    // Both binaries hear the call (the sound server is found at run time; without one the
    // audio routes say why).
    config.ears = Some(stagewhisper_audio::factory());
    config.models = Some(stagewhisper_audio::models::factory());
    config
}

/// Starts the core and prints the one JSON `ready` line on stdout (both modes).
pub async fn start_core(config: Config) -> anyhow::Result<App> {
    let app = App::start(config)
        .await
        .context("cannot start StageWhisper")?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", app.ready_line())?;
    out.flush()?;
    drop(out);
    // Then one `{"event":"tunnel",…}` line per tunnel change (state, URL, error).
    app.tunnel.on_event_line(|line| {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    });
    Ok(app)
}

/// Headless mode: the core with the web UI on loopback until SIGINT/SIGTERM, then a graceful
/// shutdown (in-flight requests finish).
pub async fn run_headless(config: Config, signals: Signals) -> anyhow::Result<()> {
    let app = start_core(config).await?;
    signals.recv().await;
    tracing::info!("shutting down");
    app.shutdown().await;
    Ok(())
}

/// SIGINT / SIGTERM (Ctrl-C elsewhere), registered up front.
pub struct Signals {
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Signals {
    /// Must run inside the Tokio runtime.
    pub fn install() -> anyhow::Result<Signals> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Signals {
                int: signal(SignalKind::interrupt()).context("SIGINT handler")?,
                term: signal(SignalKind::terminate()).context("SIGTERM handler")?,
            })
        }
        #[cfg(not(unix))]
        Ok(Signals {})
    }

    /// Waits for the first of them.
    pub async fn recv(self) {
        #[cfg(unix)]
        {
            let Signals { mut int, mut term } = self;
            tokio::select! {
                _ = int.recv() => {},
                _ = term.recv() => {},
            }
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}
