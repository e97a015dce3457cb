//! `stagewhisper models list|download|import|remove`: the speech models of a data dir, without a
//! running app (a download the app is running on the same file is refused: the part file is
//! locked).
//!
//! Exit status: 0 done; 1 refused or failed (one line on stderr:
//! `stagewhisper models: <code>: <what and why>`); 2 a usage error.

use stagewhisper_audio::models::download::{download, Options, Stop};
use stagewhisper_audio::models::{self, models_dir, shelf, Catalog, ModelError};
use stagewhisper_core::app::default_data_dir;
use stagewhisper_core::models::DownloadView;
use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, clap::Subcommand)]
pub enum ModelsCommand {
    /// The known speech models and the installed ones: name, size, languages, installed, path.
    List {
        /// `text` (a table) or `json` (`{models_dir, disk_used, models: [...]}`).
        #[arg(long, default_value = "text", value_parser = ["text", "json"])]
        format: String,
    },
    /// Downloads a model of the catalogue from its public home (progress on stderr). An
    /// interrupted download resumes where it stopped; nothing is installed until its SHA-256
    /// matches the catalogue's.
    Download {
        /// The model's name (`tiny.en`, `base`, …; see `models list`).
        name: String,
    },
    /// Use a file you have: checks that it is a whisper.cpp (ggml) model and copies it into the
    /// models folder.
    Import {
        /// The model file.
        file: PathBuf,
        /// The name to give it (default: from the file name, `ggml-<name>.bin` → `<name>`).
        #[arg(long)]
        name: Option<String>,
    },
    /// Removes an installed model (or what an unfinished download left).
    Remove {
        /// The model's name.
        name: String,
    },
}

fn fail(e: &ModelError) -> ! {
    eprintln!("stagewhisper models: {}: {}", e.code, e.message);
    std::process::exit(1);
}

/// Runs a `models` subcommand on the data dir; exits the process.
pub fn run(cmd: ModelsCommand, data_dir: Option<PathBuf>) -> ! {
    let dir = models_dir(&data_dir.unwrap_or_else(default_data_dir));
    let catalog = Catalog::load().unwrap_or_else(|e| fail(&e));
    let result = match cmd {
        ModelsCommand::List { format } => list(&dir, &catalog, &format),
        ModelsCommand::Download { name } => run_download(&dir, &catalog, &name),
        ModelsCommand::Import { file, name } => {
            let file = std::path::absolute(&file).unwrap_or(file);
            shelf::import(&dir, &catalog, &file, name.as_deref()).map(|v| {
                println!("{}", v.path.unwrap_or_default());
                eprintln!("stagewhisper models: imported as {}", v.name);
            })
        }
        ModelsCommand::Remove { name } => shelf::remove(&dir, &catalog, &name)
            .map(|()| eprintln!("stagewhisper models: removed {name}")),
    };
    if let Err(e) = result {
        fail(&e);
    }
    std::process::exit(0);
}

fn list(dir: &Path, catalog: &Catalog, format: &str) -> Result<(), ModelError> {
    let view = shelf::list(dir, catalog, &HashMap::new());
    let mut out = std::io::stdout().lock();
    let text = if format == "json" {
        format!(
            "{}\n",
            serde_json::to_string_pretty(&view).expect("serializes")
        )
    } else {
        let mut t = format!(
            "{:<16} {:>10} {:<13} {:<10} PATH\n",
            "NAME", "SIZE", "LANGUAGES", "INSTALLED"
        );
        for m in &view.models {
            let installed = match (&m.installed, &m.download) {
                (true, _) => "yes".to_string(),
                (false, Some(d)) => format!("{} %", d.done * 100 / d.total.max(1)),
                _ => "no".to_string(),
            };
            t.push_str(&format!(
                "{:<16} {:>10} {:<13} {:<10} {}\n",
                m.name,
                models::mib(m.size),
                m.languages,
                installed,
                m.path.as_deref().unwrap_or("")
            ));
        }
        t.push_str(&format!(
            "\n{} used in {}\n",
            models::mib(view.disk_used),
            view.models_dir
        ));
        t
    };
    let _ = out.write_all(text.as_bytes());
    Ok(())
}

fn run_download(dir: &Path, catalog: &Catalog, name: &str) -> Result<(), ModelError> {
    let entry = catalog.get(name).ok_or_else(|| ModelError::unknown(name))?;
    let target = dir.join(&entry.file);
    if target.is_file() {
        return Err(ModelError::new(
            409,
            "already_installed",
            format!("{name} is installed already: {}", target.display()),
        ));
    }
    let tty = std::io::stderr().is_terminal();
    let mut last: Option<Instant> = None;
    let mut report = |v: &DownloadView| {
        let due = last.is_none_or(|t| t.elapsed() >= Duration::from_secs(1));
        if !due && v.state == "downloading" {
            return;
        }
        last = Some(Instant::now());
        let line = format!(
            "{name}: {} {} / {} ({} %)",
            v.state,
            models::mib(v.done),
            models::mib(v.total),
            v.done * 100 / v.total.max(1)
        );
        if tty {
            eprint!("\r{line}\x1b[K");
        } else {
            eprintln!("{line}");
        }
    };
    let result = download(
        entry,
        dir,
        &Stop::default(),
        &Options::default(),
        &mut report,
    );
    if tty {
        eprintln!();
    }
    let path = result?;
    println!("{}", path.display());
    Ok(())
}
