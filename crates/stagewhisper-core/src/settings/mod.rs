//! Settings in one store: `settings.json` in the data dir, one typed, versioned document with
//! one load / validate / save path for every part of the app.
//!
//! # The design: named sections
//! The document is a set of named *sections*; each part of the app owns one and implements
//! [`Section`] for its own type (its key, its default, its checks, its version and how an older
//! version is upgraded, and which of today's files it replaces):
//!
//! | key          | type (owner)                                   | replaces                        |
//! |--------------|------------------------------------------------|---------------------------------|
//! | `audio`      | `AudioSettings` (crate `stagewhisper-audio`)   | `audio.json`                    |
//! | `desktop`    | `DesktopPrefs` (the window app)                | `desktop.json`                  |
//! | `mcp`        | [`crate::mcp::McpSettings`]                    | `mcp.json`                      |
//! | `tunnel`     | [`crate::tunnel::config::TunnelSection`]       | `tunnel.json`                   |
//! | `incoming`   | [`crate::assistants::kinds::incoming::config::IncomingSection`]| `assistant.json`                |
//! | `assistants` | [`crate::assistants::settings::AssistantSettings`] | `assistant_kind.json`, `assistants/<kind>.json` |
//!
//! The core defines the store and knows no section but its own: the audio crate depends on the
//! core (not the reverse) and the window app's settings are the window's, so each section
//! lives with the code that reads it and carries its type whole (a field added to a section's
//! struct is saved with it, `#[serde(default)]` reading files written before it).
//!
//! ```json
//! {"format": 1, "sections": {"mcp": {"version": 1, "value": {"enabled": true}}, …}}
//! ```
//!
//! # Writing
//! [`SettingsStore`] is one writer: every read and write of the document goes through one
//! mutex, so two parts of the app saving at once never leave two files (or two halves of one)
//! out of step. A write checks the section first ([`Section::validate`]; a refusal writes
//! nothing and keeps the refusal's stable code), then writes the whole document to a temporary
//! file in the data dir (mode 0600: some sections hold an engine's or an assistant's key),
//! fsyncs it, renames it over `settings.json` and fsyncs the folder. The copy in memory changes
//! only once the file is in place: a failed write changes nothing.
//!
//! # Versions
//! `format` is the document's own shape; a document of a newer format is refused at start-up
//! (`settings_too_new`) rather than overwritten. Each section carries its own `version`: a
//! section saved at an older version is upgraded by [`Section::upgrade`] when first read (and
//! saved upgraded); one of a newer version, or one that no longer reads or passes its checks,
//! gives the defaults, is reported (below) and stays in the document untouched until that
//! section is saved again.
//!
//! # Today's files, migrated at first start
//! The first time a section is read and the document has none, the section's
//! [`Section::legacy`] reads the file(s) it replaces. What reads and passes the checks is put
//! in the document and saved; then each old file is renamed `<name>.migrated` (kept, never read
//! again: a restart reads only `settings.json`). An old file that cannot be read or fails the
//! checks is never silently dropped: it is renamed `<name>.unreadable`, logged, and reported
//! with the stable code `legacy_settings_unreadable` (the section starts from its defaults). A
//! `settings.json` that is not JSON is kept aside the same way (`settings.json.unreadable`,
//! code `settings_unreadable`). Every such report is listed in `GET /api/settings`
//! (`settings_problems`) until the app restarts.
//!
//! # Not settings
//! Secrets and machine state stay in their own files: the tokens (`callback_token`,
//! `ui_token`, `mcp_token`, `assistant_relay_token`, `ngrok_authtoken`), device identities and
//! keys, pairings, the outbox's state (in the database; `assistant_state.json` of older apps),
//! a kind's own state (`assistants/<kind>.state.json`) and the call being listened to
//! (`audio_listening.json`). A key that is part of a setting (an OpenAI-compatible engine's
//! API key, an assistant kind's token) stays in its section, as it was in its file.

mod document;
mod legacy;
#[cfg(test)]
mod tests;

pub use legacy::{read_legacy_json, Legacy};

use document::{Document, Stored};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;
use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

/// The document in the data dir.
pub const FILE: &str = "settings.json";
/// The document's shape this build reads and writes.
pub const FORMAT: u32 = 1;

/// A section's value refused by its checks: a stable code and a sentence for people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Invalid {
    pub code: &'static str,
    pub message: String,
}

impl Invalid {
    pub fn new(code: &'static str, message: impl Into<String>) -> Invalid {
        Invalid {
            code,
            message: message.into(),
        }
    }
}

/// One named part of the settings document, implemented by the type its owner reads.
pub trait Section: Serialize + DeserializeOwned + Default + Clone + Send + 'static {
    /// The section's name in the document.
    const KEY: &'static str;
    /// The version this build writes; older versions are [upgraded](Section::upgrade).
    const VERSION: u32 = 1;

    /// Checks a value before it is saved (and a migrated or stored one when read).
    fn validate(&self) -> Result<(), Invalid> {
        Ok(())
    }

    /// The stored `value` of version `from` (older than [`Section::VERSION`]) in today's shape.
    fn upgrade(from: u32, value: Value) -> Result<Value, String> {
        let _ = value;
        Err(format!(
            "no upgrade of `{}` from version {from} to {}",
            Self::KEY,
            Self::VERSION
        ))
    }

    /// What today's file(s) of this section hold, read once when the document has no such
    /// section yet.
    fn legacy(data_dir: &Path) -> Legacy<Self> {
        let _ = data_dir;
        Legacy::none()
    }
}

/// Why the settings could not be opened or saved.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error(transparent)]
    Invalid(#[from] Invalid),
    #[error("cannot save the settings ({path}): {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read the settings ({path}): {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "{path} was written by a newer StageWhisper (format {found}; this one reads {FORMAT}): \
         start that version, or move the file away to start from the defaults"
    )]
    TooNew { path: PathBuf, found: u32 },
}

impl SettingsError {
    /// The stable code: the refusal's own for a value that fails its checks.
    pub fn code(&self) -> &'static str {
        match self {
            SettingsError::Invalid(i) => i.code,
            SettingsError::Write { .. } if self.is_storage_full() => "storage_unavailable",
            SettingsError::Write { .. } => "settings_write_failed",
            SettingsError::Read { .. } => "settings_unreadable",
            SettingsError::TooNew { .. } => "settings_too_new",
        }
    }

    /// The disk is full (or over quota).
    pub fn is_storage_full(&self) -> bool {
        matches!(self, SettingsError::Write { source, .. }
            if matches!(source.raw_os_error(), Some(28) | Some(122)))
    }
}

/// Something read at start-up that could not be used (see the module doc).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, utoipa::ToSchema)]
pub struct SettingsProblem {
    /// `settings_unreadable`, `legacy_settings_unreadable`, `settings_section_unreadable` or
    /// `settings_section_too_new`.
    pub code: String,
    /// The section concerned (absent: the whole document).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub section: Option<String>,
    /// The file, in the data dir (as it is named now: kept aside for a person to look at).
    pub file: String,
    pub message: String,
}

struct State {
    doc: Document,
    /// Sections already read once (their old files looked at, their stored value checked).
    adopted: HashSet<&'static str>,
    problems: Vec<SettingsProblem>,
}

struct Inner {
    dir: PathBuf,
    path: PathBuf,
    state: Mutex<State>,
}

/// The settings document of one data dir: the one writer (cheap to clone).
#[derive(Clone)]
pub struct SettingsStore {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for SettingsStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SettingsStore")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

impl SettingsStore {
    /// Reads `settings.json` in `data_dir` (none: an empty document). A file that is not a
    /// settings document is kept aside and reported; one of a newer format is refused.
    pub fn open(data_dir: &Path) -> Result<SettingsStore, SettingsError> {
        let path = data_dir.join(FILE);
        let mut problems = Vec::new();
        let doc = match document::read(&path)? {
            document::Read::Missing => Document::default(),
            document::Read::Doc(doc) => doc,
            document::Read::Unreadable(message) => {
                let kept = legacy::keep_aside(&path, "unreadable");
                tracing::error!(code = "settings_unreadable", file = %kept.display(), %message,
                    "the settings document cannot be read: kept aside, the defaults are used");
                problems.push(SettingsProblem {
                    code: "settings_unreadable".into(),
                    section: None,
                    file: file_name(&kept),
                    message,
                });
                Document::default()
            }
        };
        Ok(SettingsStore {
            inner: Arc::new(Inner {
                dir: data_dir.to_path_buf(),
                path,
                state: Mutex::new(State {
                    doc,
                    adopted: HashSet::new(),
                    problems,
                }),
            }),
        })
    }

    /// The document's path.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The data dir the document is in.
    pub fn data_dir(&self) -> &Path {
        &self.inner.dir
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The section's saved value (the defaults when none is saved or it cannot be used).
    pub fn get<S: Section>(&self) -> S {
        let mut st = self.lock();
        self.adopt::<S>(&mut st);
        decode::<S>(st.doc.sections.get(S::KEY)).unwrap_or_default()
    }

    /// The section as stored (its JSON value), if the document has it.
    pub fn raw(&self, key: &str) -> Option<Value> {
        self.lock().doc.sections.get(key).map(|s| s.value.clone())
    }

    /// Whether the document holds the section (after its old files were looked at).
    pub fn has<S: Section>(&self) -> bool {
        let mut st = self.lock();
        self.adopt::<S>(&mut st);
        st.doc.sections.contains_key(S::KEY)
    }

    /// Checks and saves the section; nothing is written when the checks refuse it.
    pub fn set<S: Section>(&self, value: &S) -> Result<(), SettingsError> {
        self.update::<S, _>(|s| {
            *s = value.clone();
            Ok(())
        })
    }

    /// Reads, changes and saves the section as one step (no other write in between). `change`
    /// may refuse (its refusal is returned, nothing written); the value it leaves is checked.
    pub fn update<S: Section, T>(
        &self,
        change: impl FnOnce(&mut S) -> Result<T, Invalid>,
    ) -> Result<T, SettingsError> {
        let mut st = self.lock();
        self.adopt::<S>(&mut st);
        let mut value = decode::<S>(st.doc.sections.get(S::KEY)).unwrap_or_default();
        let out = change(&mut value)?;
        value.validate()?;
        let stored = Stored::of(S::VERSION, &value);
        if st.doc.sections.get(S::KEY) != Some(&stored) {
            let mut next = st.doc.clone();
            next.sections.insert(S::KEY.to_string(), stored);
            self.write(&next)?;
            st.doc = next;
            forget_problems(&mut st.problems, S::KEY);
        }
        Ok(out)
    }

    /// Removes the section (its defaults from now on).
    pub fn remove<S: Section>(&self) -> Result<(), SettingsError> {
        let mut st = self.lock();
        self.adopt::<S>(&mut st);
        if st.doc.sections.contains_key(S::KEY) {
            let mut next = st.doc.clone();
            next.sections.remove(S::KEY);
            self.write(&next)?;
            st.doc = next;
        }
        Ok(())
    }

    /// What could not be used at start-up (see the module doc).
    pub fn problems(&self) -> Vec<SettingsProblem> {
        self.lock().problems.clone()
    }

    fn write(&self, doc: &Document) -> Result<(), SettingsError> {
        document::write(&self.inner.path, doc).map_err(|source| {
            tracing::error!(error = %source, "cannot save the settings");
            SettingsError::Write {
                path: self.inner.path.clone(),
                source,
            }
        })
    }

    /// The first read of a section: the stored value upgraded and checked, or today's old
    /// files moved in.
    fn adopt<S: Section>(&self, st: &mut State) {
        if !st.adopted.insert(S::KEY) {
            return;
        }
        match st.doc.sections.get(S::KEY).cloned() {
            Some(stored) => self.check_stored::<S>(st, stored),
            None => self.migrate::<S>(st),
        }
    }

    fn check_stored<S: Section>(&self, st: &mut State, stored: Stored) {
        let problem = |code: &str, message: String| SettingsProblem {
            code: code.into(),
            section: Some(S::KEY.into()),
            file: FILE.into(),
            message,
        };
        if stored.version > S::VERSION {
            let message = format!(
                "the section `{}` is of version {} (this version reads up to {}): its defaults \
                 are used and the saved value is kept until it is saved again",
                S::KEY,
                stored.version,
                S::VERSION
            );
            tracing::error!(code = "settings_section_too_new", section = S::KEY, %message);
            st.problems
                .push(problem("settings_section_too_new", message));
            return;
        }
        let value = if stored.version < S::VERSION {
            S::upgrade(stored.version, stored.value.clone())
        } else {
            Ok(stored.value.clone())
        };
        let checked = value.and_then(|v| {
            let s: S = serde_json::from_value(v).map_err(|e| e.to_string())?;
            s.validate().map_err(|e| e.message)?;
            Ok(s)
        });
        match checked {
            Ok(s) if stored.version < S::VERSION => {
                let mut next = st.doc.clone();
                next.sections
                    .insert(S::KEY.into(), Stored::of(S::VERSION, &s));
                if self.write(&next).is_ok() {
                    tracing::info!(
                        section = S::KEY,
                        from = stored.version,
                        to = S::VERSION,
                        "settings section upgraded"
                    );
                    st.doc = next;
                }
            }
            Ok(_) => {}
            Err(message) => {
                tracing::error!(code = "settings_section_unreadable", section = S::KEY, %message,
                    "a settings section cannot be used: its defaults are used");
                st.problems
                    .push(problem("settings_section_unreadable", message));
            }
        }
    }

    fn migrate<S: Section>(&self, st: &mut State) {
        let legacy = S::legacy(&self.inner.dir);
        let mut broken = legacy.broken;
        let mut files = legacy.files;
        if let Some(value) = legacy.value {
            match value.validate() {
                Ok(()) => {
                    let mut next = st.doc.clone();
                    next.sections
                        .insert(S::KEY.into(), Stored::of(S::VERSION, &value));
                    if self.write(&next).is_err() {
                        // The old files stay: the next start migrates them again.
                        return;
                    }
                    st.doc = next;
                    for f in &files {
                        let kept = legacy::keep_aside(f, "migrated");
                        tracing::info!(section = S::KEY, from = %f.display(), kept = %kept.display(), "settings moved into settings.json");
                    }
                }
                Err(e) => {
                    broken.extend(files.drain(..).map(|f| (f, e.message.clone())));
                }
            }
        }
        for (file, message) in broken {
            let kept = legacy::keep_aside(&file, "unreadable");
            tracing::error!(code = "legacy_settings_unreadable", section = S::KEY, file = %kept.display(), %message,
                "an old settings file cannot be read: kept aside, the defaults are used");
            st.problems.push(SettingsProblem {
                code: "legacy_settings_unreadable".into(),
                section: Some(S::KEY.into()),
                file: self.relative(&kept),
                message,
            });
        }
    }

    fn relative(&self, p: &Path) -> String {
        p.strip_prefix(&self.inner.dir)
            .unwrap_or(p)
            .display()
            .to_string()
    }
}

/// A stored section as today's type (`None`: absent, too new, or unusable).
fn decode<S: Section>(stored: Option<&Stored>) -> Option<S> {
    let stored = stored?;
    if stored.version > S::VERSION {
        return None;
    }
    let value = if stored.version < S::VERSION {
        S::upgrade(stored.version, stored.value.clone()).ok()?
    } else {
        stored.value.clone()
    };
    let s: S = serde_json::from_value(value).ok()?;
    s.validate().is_ok().then_some(s)
}

/// A section saved again: what was reported about its stored value no longer holds.
fn forget_problems(problems: &mut Vec<SettingsProblem>, key: &str) {
    problems.retain(|p| {
        !(p.section.as_deref() == Some(key)
            && matches!(
                p.code.as_str(),
                "settings_section_unreadable" | "settings_section_too_new"
            ))
    });
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// A settings error as a control API answer: `400` with the refusal's code, `503
/// storage_unavailable` when the disk is full, `500 settings_write_failed` otherwise.
impl From<SettingsError> for crate::answers::ApiError {
    fn from(e: SettingsError) -> Self {
        use axum::http::StatusCode;
        let status = match &e {
            SettingsError::Invalid(_) => StatusCode::BAD_REQUEST,
            e if e.is_storage_full() => StatusCode::SERVICE_UNAVAILABLE,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        crate::answers::ApiError::new(status, e.code(), e)
    }
}
