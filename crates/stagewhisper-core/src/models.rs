//! Models a person chooses: the seam between the control API and the speech model shelf.
//!
//! The shelf itself (the catalogue of known Whisper models, downloads with resume and SHA-256
//! checks, importing a file the person has, removing) lives in `stagewhisper-audio`'s `models`
//! module, behind [`Models`]. The core holds what the rest of the app sees of it: the shapes of
//! the routes (`api::models`), the refusals with their stable codes ([`ModelError`]) and the
//! live-only [`Change::ModelDownload`] event a download publishes while it runs.

use crate::assistants::BoxFuture;
use crate::events::Change;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::Arc;
use utoipa::ToSchema;

/// A download's state, as `model_download` events and `GET /api/models` carry it.
pub mod state {
    /// Bytes are arriving.
    pub const DOWNLOADING: &str = "downloading";
    /// Every byte is here; its SHA-256 is being checked.
    pub const VERIFYING: &str = "verifying";
    /// Checked and in place: the model is installed.
    pub const DONE: &str = "done";
    /// Stopped on an error (`error` says which); what arrived is kept for a resume unless the
    /// error says otherwise (`checksum_mismatch`, `disk_full`).
    pub const FAILED: &str = "failed";
    /// Cancelled by the person; what arrived is removed.
    pub const CANCELLED: &str = "cancelled";
    /// An unfinished download from an earlier run (its part file is there): downloading the
    /// model again resumes it.
    pub const PAUSED: &str = "paused";
}

/// A download in progress or just ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DownloadView {
    /// `downloading`, `verifying`, `done`, `failed`, `cancelled` or `paused`.
    pub state: String,
    /// Bytes on disk so far.
    pub done: u64,
    /// The file's size.
    pub total: u64,
    /// `failed`: the stable code (`network_unavailable`, `disk_full`, `checksum_mismatch`,
    /// `server_refused`, `download_failed`, `write_failed`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `failed`: what went wrong, in plain words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// One model: a known one of the catalogue (installed or not), or one imported under a name of
/// its own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ModelView {
    /// What settings and commands call it (`tiny.en`, `base-q5_1`, an imported name).
    pub name: String,
    /// The file in the models folder (`ggml-<name>.bin`).
    pub file: String,
    /// The download's size in bytes (an imported model: its size on disk).
    pub size: u64,
    /// `en` (English only) or `multilingual`.
    pub languages: String,
    /// Words wrong in a hundred on real speech, where measured (`null`: not measured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wer_percent: Option<f32>,
    /// Expected accuracy, in words.
    pub accuracy: String,
    /// Expected speed, in words.
    pub speed: String,
    /// The one the first-run guide offers.
    pub recommended: bool,
    /// In the catalogue (it can be downloaded); `false`: imported.
    pub known: bool,
    /// The file is in the models folder, checked.
    pub installed: bool,
    /// Where the file is, when installed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Bytes it takes on disk (an unfinished download's part file included).
    pub size_on_disk: u64,
    /// A download running or just ended (this run of the app).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub download: Option<DownloadView>,
}

/// `GET /api/models`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ModelsView {
    /// The models folder (`<data dir>/models`).
    pub models_dir: String,
    /// Every file in it, in bytes (unfinished downloads included).
    pub disk_used: u64,
    pub models: Vec<ModelView>,
    /// The speaker model (`speakers`: telling the call's speakers apart), apart from the speech
    /// models; downloaded, imported and removed under the name `speakers`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub speakers: Option<ModelView>,
}

/// `POST /api/models/import`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct ImportModel {
    /// The model file on this computer (a whisper.cpp `ggml` file), an absolute path.
    pub path: String,
    /// The name to give it (letters, digits, `.`, `-`, `_`; at most 64). Default: from the file
    /// name (`ggml-<name>.bin` → `<name>`).
    pub name: Option<String>,
}

/// A refusal of the shelf: an HTTP status, a stable code and a sentence for people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ModelError {
    pub status: u16,
    pub code: &'static str,
    pub message: String,
}

impl ModelError {
    pub fn new(status: u16, code: &'static str, message: impl Into<String>) -> ModelError {
        ModelError {
            status,
            code,
            message: message.into(),
        }
    }

    /// `404 unknown_model`.
    pub fn unknown(name: &str) -> ModelError {
        ModelError::new(
            404,
            "unknown_model",
            format!("no model is called {name:?} (neither in the catalogue nor installed)"),
        )
    }

    /// `503 models_unavailable`: a build without the shelf.
    pub fn unavailable() -> ModelError {
        ModelError::new(
            503,
            "models_unavailable",
            "this build of the app has no speech models",
        )
    }
}

/// What the control API asks of the model shelf. One implementation ships
/// (`stagewhisper-audio`); without it the routes answer `503 models_unavailable`.
pub trait Models: Send + Sync + 'static {
    /// The catalogue and what is installed, with the disk they use.
    fn list(&self) -> BoxFuture<'_, Result<ModelsView, ModelError>>;

    /// Starts downloading a model of the catalogue (on a thread of its own); progress comes as
    /// `model_download` events. `404 unknown_model`, `409 already_installed`,
    /// `409 download_in_progress`, `507 disk_full` (not enough free space to start).
    fn download(&self, name: &str) -> Result<DownloadView, ModelError>;

    /// Cancels a running download and waits for it to stop (its part file is removed).
    /// `404 not_downloading`.
    fn cancel<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<DownloadView, ModelError>>;

    /// Checks and copies a model file into the models folder under a name.
    fn import(&self, request: ImportModel) -> BoxFuture<'_, Result<ModelView, ModelError>>;

    /// Removes an installed model (or an unfinished download's part file).
    fn remove<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), ModelError>>;

    /// Stops the downloads in flight, keeping what arrived for a resume (the app is stopping).
    fn shutdown(&self) -> BoxFuture<'_, ()>;
}

/// What the shelf reaches of the core.
#[derive(Clone)]
pub struct ModelsContext {
    pub data_dir: PathBuf,
    /// Publishes a live-only event ([`Change::ModelDownload`]).
    pub publish: Arc<dyn Fn(Change) + Send + Sync>,
}

/// Builds the shelf once the core is up.
pub type ModelsFactory = Box<dyn FnOnce(ModelsContext) -> Arc<dyn Models> + Send>;
