//! The model shelf behind the control API ([`stagewhisper_core::models::Models`]): the list,
//! downloads on threads of their own (one per model at a time) publishing `model_download`
//! events, imports and removals on the blocking pool.

use super::download::{self, Options, Stop};
use super::{check_space, models_dir, shelf, speaker_model, Catalog, CatalogEntry, ModelError};
use stagewhisper_core::assistants::BoxFuture;
use stagewhisper_core::events::Change;
use stagewhisper_core::models::{
    state, DownloadView, ImportModel, ModelView, Models, ModelsContext, ModelsFactory, ModelsView,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Builds the shelf once the core is up.
pub fn factory() -> ModelsFactory {
    Box::new(|ctx| Arc::new(ModelShelf::new(ctx)) as Arc<dyn Models>)
}

/// A download of this run of the app: running (`stop` is set) or ended.
struct Slot {
    view: DownloadView,
    stop: Option<Arc<Stop>>,
    thread: Option<JoinHandle<()>>,
}

struct Inner {
    dir: PathBuf,
    catalog: Result<Catalog, ModelError>,
    slots: Mutex<HashMap<String, Slot>>,
    publish: Arc<dyn Fn(Change) + Send + Sync>,
    opts: Options,
}

/// See the module docs.
pub struct ModelShelf {
    inner: Arc<Inner>,
}

impl ModelShelf {
    /// The shelf of `<data dir>/models`, with the catalogue in use ([`Catalog::load`]).
    pub fn new(ctx: ModelsContext) -> ModelShelf {
        let catalog = Catalog::load();
        if let Err(e) = &catalog {
            tracing::warn!(error = %e, "the model catalogue cannot be used");
        }
        ModelShelf {
            inner: Arc::new(Inner {
                dir: models_dir(&ctx.data_dir),
                catalog,
                slots: Mutex::new(HashMap::new()),
                publish: ctx.publish,
                opts: Options::default(),
            }),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }
}

impl Inner {
    fn catalog(&self) -> Result<&Catalog, ModelError> {
        self.catalog.as_ref().map_err(Clone::clone)
    }

    /// A model of the catalogue, or the speaker model ([`speaker_model`]): its entry and the
    /// folder it goes to.
    fn entry(&self, name: &str) -> Result<Option<(CatalogEntry, PathBuf)>, ModelError> {
        let catalog = self.catalog()?;
        Ok(if name == speaker_model::NAME {
            Some((speaker_model::entry(catalog), speaker_model::dir(&self.dir)))
        } else {
            catalog.get(name).map(|e| (e.clone(), self.dir.clone()))
        })
    }

    fn slots(&self) -> std::sync::MutexGuard<'_, HashMap<String, Slot>> {
        self.slots.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn running(&self, name: &str) -> bool {
        self.slots().get(name).is_some_and(|s| s.stop.is_some())
    }

    /// Records a download's state and publishes it.
    fn report(&self, name: &str, view: &DownloadView, ended: bool) {
        if let Some(slot) = self.slots().get_mut(name) {
            slot.view = view.clone();
            if ended {
                slot.stop = None;
            }
        }
        (self.publish)(Change::ModelDownload {
            name: name.to_string(),
            state: view.state.clone(),
            done: view.done,
            total: view.total,
            error: view.error.clone(),
            message: view.message.clone(),
        });
    }

    /// The download thread's body.
    fn run(self: Arc<Self>, name: String, stop: Arc<Stop>) {
        let Ok(Some((entry, dir))) = self.entry(&name) else {
            return;
        };
        let mut last = DownloadView {
            state: state::DOWNLOADING.into(),
            done: 0,
            total: entry.size,
            error: None,
            message: None,
        };
        let result = download::download(&entry, &dir, &stop, &self.opts, &mut |v| {
            last = v.clone();
            if v.state != state::DONE {
                self.report(&name, v, false);
            }
        });
        let end = match result {
            Ok(_) => DownloadView {
                state: state::DONE.into(),
                done: entry.size,
                ..last
            },
            Err(e) => {
                tracing::info!(model = %name, error = %e, code = e.code, "model download ended");
                let (st, error, message) = match e.code {
                    "cancelled" => (state::CANCELLED, None, None),
                    "interrupted" => (state::PAUSED, None, None),
                    code => (state::FAILED, Some(code.to_string()), Some(e.message)),
                };
                let gone = matches!(e.code, "cancelled" | "checksum_mismatch" | "disk_full");
                DownloadView {
                    state: st.into(),
                    done: if gone { 0 } else { last.done },
                    error,
                    message,
                    ..last
                }
            }
        };
        self.report(&name, &end, true);
    }
}

fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ModelError> + Send + 'static,
) -> BoxFuture<'static, Result<T, ModelError>> {
    Box::pin(async move {
        tokio::task::spawn_blocking(f)
            .await
            .unwrap_or_else(|e| Err(ModelError::new(500, "internal", e.to_string())))
    })
}

impl Models for ModelShelf {
    fn list(&self) -> BoxFuture<'_, Result<ModelsView, ModelError>> {
        let inner = self.inner.clone();
        blocking(move || {
            let catalog = inner.catalog()?;
            let downloads = inner
                .slots()
                .iter()
                .map(|(k, s)| (k.clone(), s.view.clone()))
                .collect();
            let mut view = shelf::list(&inner.dir, catalog, &downloads);
            view.speakers = Some(speaker_model::view(&inner.dir, catalog, &downloads));
            Ok(view)
        })
    }

    fn download(&self, name: &str) -> Result<DownloadView, ModelError> {
        let inner = &self.inner;
        let (entry, dir) = inner
            .entry(name)?
            .ok_or_else(|| ModelError::unknown(name))?;
        let target = dir.join(&entry.file);
        if target.is_file() {
            return Err(ModelError::new(
                409,
                "already_installed",
                format!("{name} is installed already"),
            ));
        }
        let mut slots = inner.slots();
        if slots.get(name).is_some_and(|s| s.stop.is_some()) {
            return Err(ModelError::new(
                409,
                "download_in_progress",
                format!("{name} is already being downloaded"),
            ));
        }
        std::fs::create_dir_all(&dir).map_err(|e| {
            ModelError::new(
                500,
                "write_failed",
                format!("cannot make the models folder: {e}"),
            )
        })?;
        let have = std::fs::metadata(download::part_path(&target))
            .map(|m| m.len())
            .unwrap_or(0)
            .min(entry.size);
        check_space(&inner.dir, entry.size - have)?;
        let view = DownloadView {
            state: state::DOWNLOADING.into(),
            done: have,
            total: entry.size,
            error: None,
            message: None,
        };
        let stop = Arc::new(Stop::default());
        let (me, n, s) = (inner.clone(), name.to_string(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("sw-model-download".into())
            .spawn(move || me.run(n, s))
            .map_err(|e| ModelError::new(500, "internal", e.to_string()))?;
        if let Some(old) = slots.insert(
            name.to_string(),
            Slot {
                view: view.clone(),
                stop: Some(stop),
                thread: Some(thread),
            },
        ) {
            drop(old.thread);
        }
        Ok(view)
    }

    fn cancel<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<DownloadView, ModelError>> {
        Box::pin(async move {
            let stop = self.inner.slots().get(name).and_then(|s| s.stop.clone());
            let Some(stop) = stop else {
                return Err(ModelError::new(
                    404,
                    "not_downloading",
                    format!("no download of {name:?} is running"),
                ));
            };
            stop.cancel();
            // The thread notices within a tenth of a second and removes the part file.
            let until = Instant::now() + Duration::from_secs(5);
            while self.inner.running(name) && Instant::now() < until {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let slots = self.inner.slots();
            Ok(slots
                .get(name)
                .map(|s| s.view.clone())
                .unwrap_or(DownloadView {
                    state: state::CANCELLED.into(),
                    done: 0,
                    total: 0,
                    error: None,
                    message: None,
                }))
        })
    }

    fn import(&self, request: ImportModel) -> BoxFuture<'_, Result<ModelView, ModelError>> {
        let inner = self.inner.clone();
        blocking(move || {
            let catalog = inner.catalog()?;
            let path = PathBuf::from(request.path.trim());
            if !path.is_absolute() {
                return Err(ModelError::new(
                    400,
                    "file_not_found",
                    "give the model file's full path (from /)",
                ));
            }
            if request.name.as_deref().map(str::trim) == Some(speaker_model::NAME) {
                return speaker_model::import(&inner.dir, catalog, &path);
            }
            shelf::import(&inner.dir, catalog, &path, request.name.as_deref())
        })
    }

    fn remove<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Result<(), ModelError>> {
        if self.inner.running(name) {
            return Box::pin(async move {
                Err(ModelError::new(
                    409,
                    "download_in_progress",
                    format!("{name} is being downloaded: cancel the download first"),
                ))
            });
        }
        let inner = self.inner.clone();
        let name = name.to_string();
        blocking(move || {
            let catalog = inner.catalog()?;
            if name == speaker_model::NAME {
                speaker_model::remove(&inner.dir)?;
            } else {
                shelf::remove(&inner.dir, catalog, &name)?;
            }
            inner.slots().remove(&name);
            Ok(())
        })
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        let threads: Vec<JoinHandle<()>> = {
            let mut slots = self.inner.slots();
            slots
                .values_mut()
                .filter_map(|s| {
                    if let Some(stop) = &s.stop {
                        stop.interrupt();
                    }
                    s.thread.take()
                })
                .collect()
        };
        Box::pin(async move {
            let _ = tokio::task::spawn_blocking(move || {
                for t in threads {
                    let _ = t.join();
                }
            })
            .await;
        })
    }
}
