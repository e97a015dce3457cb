//! The `stagewhisper` binary. With a display it opens the desktop window (a thin Tauri shell over
//! the core, see [`shell`]); with `--headless`, or when no display is available, it runs the core
//! with the web UI on loopback. Either way it prints one JSON `ready` line on stdout; logs go to
//! stderr.

mod commands;
mod shell;

use anyhow::Context;
use clap::Parser;
use stagewhisper_core::api::{find_ui_dir, DirAssets};
use stagewhisper_core::app::default_data_dir;
use stagewhisper_core::conversation::Settings;
use stagewhisper_core::store::Durability;
use stagewhisper_core::{App, Config};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Debug, Parser)]
#[command(
    name = "stagewhisper",
    version,
    about = "StageWhisper Desktop (direct relay)"
)]
struct Cli {
    /// Run without a window: serve the UI to a browser on loopback.
    #[arg(long)]
    headless: bool,
    /// Where the database and tokens live.
    #[arg(long, value_name = "DIR", global = true)]
    data_dir: Option<PathBuf>,
    /// Address of the callback listener (loopback only; port 0 = any free port).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    callback_listen: SocketAddr,
    /// Address of the UI / control API listener (loopback only).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:0")]
    ui_listen: SocketAddr,
    /// Inactivity timer that clears a typing indicator, in seconds.
    #[arg(long, value_name = "N", default_value_t = 30)]
    typing_timeout_secs: u64,
    /// How long after a call ends its insights session still accepts replies, in seconds.
    #[arg(long, value_name = "N", default_value_t = 120)]
    insights_grace_secs: u64,
    /// The built web UI to serve (default: ui/dist found beside the executable).
    #[arg(long, value_name = "DIR")]
    ui_dir: Option<PathBuf>,
    /// `crash`: an acknowledged callback survives any crash of the app (WAL fsynced every
    /// second); `power-loss`: every commit is fsynced before it is acknowledged.
    #[arg(long, value_name = "LEVEL", default_value = "crash", value_parser = ["crash", "power-loss"])]
    durability: String,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Transcript tools.
    #[command(subcommand)]
    Transcript(TranscriptCommand),
}

#[derive(Debug, clap::Subcommand)]
enum TranscriptCommand {
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

/// `stagewhisper transcript replay …`: a client of a running app, no core of its own.
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

fn main() -> anyhow::Result<()> {
    let mut cli = Cli::parse();
    if let Some(Command::Transcript(cmd)) = cli.command.take() {
        return run_replay(cmd, cli.data_dir);
    }
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,sqlx=warn".into()),
        )
        .init();
    let window = !cli.headless && display_available();
    if !cli.headless && !window {
        eprintln!("stagewhisper: no display (DISPLAY and WAYLAND_DISPLAY are unset); running headless, the UI is served on loopback");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    // Signal handlers go in before the ready line, so a SIGTERM right after it is graceful too.
    let signals = {
        let _in_runtime = rt.enter();
        Signals::install()?
    };
    let config = core_config(cli);
    if window {
        shell::run(rt, config, signals)
    } else {
        rt.block_on(run_headless(config, signals))
    }
}

/// Whether a window can be opened: on Linux and the BSDs that needs an X11 or Wayland display.
fn display_available() -> bool {
    if cfg!(all(unix, not(target_os = "macos"))) {
        ["DISPLAY", "WAYLAND_DISPLAY"]
            .iter()
            .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()))
    } else {
        true
    }
}

/// The core's configuration; the same in both modes.
fn core_config(cli: Cli) -> Config {
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
    config
}

/// Starts the core and prints the one JSON `ready` line on stdout (both modes).
async fn start_core(config: Config) -> anyhow::Result<App> {
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

async fn run_headless(config: Config, signals: Signals) -> anyhow::Result<()> {
    let app = start_core(config).await?;
    signals.recv().await;
    tracing::info!("shutting down");
    app.shutdown().await;
    Ok(())
}

/// SIGINT / SIGTERM (Ctrl-C elsewhere), registered up front.
struct Signals {
    #[cfg(unix)]
    int: tokio::signal::unix::Signal,
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
}

impl Signals {
    /// Must run inside the Tokio runtime.
    fn install() -> anyhow::Result<Signals> {
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

    async fn recv(self) {
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
