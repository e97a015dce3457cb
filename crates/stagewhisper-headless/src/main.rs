//! `stagewhisper-headless`: StageWhisper Desktop without the window. The same core, flags, ready
//! line and `transcript replay` subcommand as `stagewhisper --headless`, but built without Tauri,
//! so it neither links nor loads WebKitGTK or GTK and runs on a machine without a display or
//! those libraries.

use stagewhisper_cli::{core_config, init_logging, run_command, run_headless, runtime};
use stagewhisper_cli::{Binary, Cli};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> anyhow::Result<()> {
    let mut cli = Cli::parse_for(Binary::Headless);
    if let Some(command) = cli.command.take() {
        return run_command(command, cli.data_dir);
    }
    init_logging();
    let (rt, signals) = runtime()?;
    let config = core_config(cli);
    rt.block_on(run_headless(config, signals))
}
