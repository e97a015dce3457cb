//! The `stagewhisper` binary. With a display it opens the desktop window (a thin Tauri shell over
//! the core, see [`shell`]); with `--headless`, or when no display is available, it runs the core
//! with the web UI on loopback. Either way it prints one JSON `ready` line on stdout; logs go to
//! stderr.
//!
//! The command line and the headless start-up live in `stagewhisper-cli`, shared with the
//! `stagewhisper-headless` binary (the same without the window toolkit); this binary only adds
//! the window.

mod assets;
mod commands;
mod desktop;
mod notify;
mod prefs;
mod shell;

use stagewhisper_cli::{core_config, init_logging, run_command, run_headless, runtime};
use stagewhisper_cli::{Binary, Cli};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let mut cli = Cli::parse_for(Binary::Desktop);
    if let Some(command) = cli.command.take() {
        return run_command(command, cli.data_dir);
    }
    init_logging();
    let window = !cli.headless && display_available();
    if !cli.headless && !window {
        eprintln!("stagewhisper: no display (DISPLAY and WAYLAND_DISPLAY are unset); running headless, the UI is served on loopback");
    }
    let (rt, signals) = runtime()?;
    let mut config = core_config(cli);
    // The UI compiled into this binary, for the window and (without a UI folder, as in an
    // installed package) for the loopback UI listener.
    let mut context = tauri::generate_context!("tauri.conf.json");
    let ui = assets::UiAssets::share(&mut context);
    config.assets.get_or_insert_with(|| std::sync::Arc::new(ui));
    if window {
        shell::run(rt, config, signals, context)
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
