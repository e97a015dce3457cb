//! The `stagewhisper` binary. `--headless` runs the core with the web UI on loopback and prints
//! one JSON `ready` line on stdout; logs go to stderr.

use anyhow::Context;
use clap::Parser;
use stagewhisper_core::api::{find_ui_dir, DirAssets};
use stagewhisper_core::app::default_data_dir;
use stagewhisper_core::conversation::Settings;
use stagewhisper_core::{App, Config};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

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
    #[arg(long, value_name = "DIR")]
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
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,sqlx=warn".into()),
        )
        .init();
    if !cli.headless {
        eprintln!("stagewhisper: this build has no window yet; running headless (the UI is served on loopback)");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(run_headless(cli))
}

async fn run_headless(cli: Cli) -> anyhow::Result<()> {
    let mut config = Config::new(cli.data_dir.unwrap_or_else(default_data_dir));
    config.callback_listen = cli.callback_listen;
    config.ui_listen = cli.ui_listen;
    config.settings = Settings {
        typing_timeout_ms: (cli.typing_timeout_secs.max(1) * 1000) as i64,
        insights_grace_ms: (cli.insights_grace_secs * 1000) as i64,
    };
    config.assets = find_ui_dir(cli.ui_dir.as_deref())
        .map(|d| Arc::new(DirAssets::new(d)) as Arc<dyn stagewhisper_core::api::Assets>);
    let app = App::start(config)
        .await
        .context("cannot start StageWhisper")?;
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{}", app.ready_line())?;
        out.flush()?;
    }
    wait_for_signal().await;
    tracing::info!("shutting down");
    app.shutdown().await;
    Ok(())
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
