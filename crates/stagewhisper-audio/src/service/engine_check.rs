//! `POST /api/audio/engine/check`: an engine tried on a short stretch of silence
//! ([`Engine::check`](crate::engine::Engine::check)), the same way for every engine kind.

use crate::engine;
use crate::engine::EngineSettings;
use crate::pipeline::Shared;
use stagewhisper_core::audio::{AudioUpdate, EngineUpdate};
use stagewhisper_core::engine_check::EngineCheck;
use std::sync::Arc;

/// The engine settings to try: `update` over the saved ones (an `openai` engine without a key
/// keeps the saved key for the same server), or the saved engine itself.
pub(super) fn settings_to_try(shared: &Shared, update: Option<EngineUpdate>) -> EngineSettings {
    let saved = shared.settings();
    match update {
        None => saved.engine,
        Some(e) => {
            saved
                .apply(&AudioUpdate {
                    engine: Some(e),
                    ..AudioUpdate::default()
                })
                .engine
        }
    }
}

/// Tries `settings` (blocks: a model may load, a request may wait for its answer). The saved
/// engine is the pipeline's own (loaded once, shared with the call); its outcome becomes its
/// status, as a turn's would.
pub(super) fn try_engine(shared: &Arc<Shared>, settings: EngineSettings) -> EngineCheck {
    let kind = settings.kind();
    let saved = shared.settings().engine == settings;
    let outcome = if saved {
        shared.engine().and_then(|e| e.check())
    } else {
        engine::build(&settings, &shared.models_dir()).and_then(|e| e.check())
    };
    if saved {
        shared.engine_outcome(outcome.as_ref().map(|_| ()));
    }
    match outcome {
        Ok(()) => EngineCheck::passed(kind, saved),
        Err(e) => {
            tracing::info!(kind, code = e.kind.as_str(), error = %e, "the speech engine check failed");
            EngineCheck::failed(kind, saved, e.kind.as_str(), e.message)
        }
    }
}
