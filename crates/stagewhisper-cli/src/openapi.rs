//! `stagewhisper openapi`: prints the control API's OpenAPI document (JSON), the same bytes
//! `GET /api/openapi.json` serves, without a running app. The UI's wire types are generated from
//! it at build time (`npm run gen:api` in `ui/`, checked in CI).
//!
//! The document is built from the one route table, which includes the routes each assistant kind
//! contributes; so the core starts for a moment on a throwaway data dir (loopback, any free
//! port, no audio pipeline: its routes are declared either way), the document is taken and the
//! core shuts down again. The user's data dir is never opened.

use anyhow::Context;
use stagewhisper_core::{App, Config};
use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, clap::Args)]
pub struct OpenapiArgs {
    /// Write to this file instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

/// The document, from a core started on `scratch` (an empty directory) and stopped again.
pub async fn document(scratch: &Path) -> anyhow::Result<Vec<u8>> {
    let app = App::start(Config::new(scratch.to_path_buf()))
        .await
        .context("cannot start the core to read its OpenAPI document")?;
    let doc = app.api.openapi_json().to_vec();
    app.shutdown().await;
    Ok(doc)
}

/// Runs `openapi [--output FILE]`.
pub fn run(args: OpenapiArgs) -> anyhow::Result<()> {
    let scratch = tempfile::tempdir().context("cannot create a scratch directory")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let mut doc = rt.block_on(document(scratch.path()))?;
    doc.push(b'\n');
    match args.output {
        Some(path) => std::fs::write(&path, &doc)
            .with_context(|| format!("cannot write {}", path.display()))?,
        None => {
            let mut out = std::io::stdout().lock();
            out.write_all(&doc)?;
            out.flush()?;
        }
    }
    Ok(())
}
