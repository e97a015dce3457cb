//! What the assistant link must remember across restarts beside the conversation (which keeps
//! the outgoing messages and transcript turns): each call's `system_prelude` with its task id
//! (the outbox's, for every kind), and the `Last-Event-ID` of every `/v1/events` stream the
//! incoming kind reads. A small JSON file, written atomically.

use crate::tokens::write_secret;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const STATE_FILE: &str = "assistant_state.json";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PreludeState {
    Pending,
    Sent,
    Failed,
    /// The call ended or was deleted before the prelude could go out.
    Skipped,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreludeRecord {
    /// Recorded before the first attempt and kept across retries and restarts.
    pub task_id: String,
    pub state: PreludeState,
    /// Milliseconds since the epoch.
    pub created_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct StreamRecord {
    pub last_event_id: Option<String>,
    /// Last send to or event from this session (ms since the epoch).
    pub last_activity_ms: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct AssistantState {
    /// By call (chat) session id.
    #[serde(default)]
    pub preludes: BTreeMap<String, PreludeRecord>,
    /// "The call ended" notices, by call session id (same record: task id kept across retries).
    #[serde(default)]
    pub call_ends: BTreeMap<String, PreludeRecord>,
    /// By assistant session id (`<chat>` or `insights:<chat>`).
    #[serde(default)]
    pub streams: BTreeMap<String, StreamRecord>,
}

/// The state file and its in-memory copy.
pub struct StateFile {
    path: PathBuf,
}

impl StateFile {
    pub fn new(dir: &Path) -> StateFile {
        StateFile {
            path: dir.join(STATE_FILE),
        }
    }

    /// Loads the state; a missing or unreadable file is an empty state (logged).
    pub fn load(&self) -> AssistantState {
        match std::fs::read_to_string(&self.path) {
            Ok(s) => serde_json::from_str(&s).unwrap_or_else(|e| {
                tracing::warn!(path = %self.path.display(), error = %e, "assistant link state unreadable; starting empty");
                AssistantState::default()
            }),
            Err(_) => AssistantState::default(),
        }
    }

    pub fn save(&self, state: &AssistantState) {
        let json = serde_json::to_string(state).expect("serializable");
        if let Err(e) = write_secret(&self.path, &json) {
            tracing::error!(error = %e, "cannot save the assistant link state");
        }
    }
}

impl AssistantState {
    /// Drops what can no longer matter: preludes older than a week that are settled, streams idle
    /// for a day.
    pub fn prune(&mut self, now_ms: i64) {
        const WEEK: i64 = 7 * 24 * 3600 * 1000;
        const DAY: i64 = 24 * 3600 * 1000;
        self.preludes
            .retain(|_, p| p.state == PreludeState::Pending || p.created_ms + WEEK > now_ms);
        self.call_ends
            .retain(|_, p| p.state == PreludeState::Pending || p.created_ms + WEEK > now_ms);
        self.streams
            .retain(|_, s| s.last_activity_ms + DAY > now_ms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_prunes() {
        let dir = tempfile::tempdir().unwrap();
        let f = StateFile::new(dir.path());
        assert_eq!(f.load(), AssistantState::default());
        let mut s = AssistantState::default();
        s.preludes.insert(
            "c1".into(),
            PreludeRecord {
                task_id: "t".into(),
                state: PreludeState::Sent,
                created_ms: 0,
            },
        );
        s.preludes.insert(
            "c2".into(),
            PreludeRecord {
                task_id: "u".into(),
                state: PreludeState::Pending,
                created_ms: 0,
            },
        );
        s.streams.insert("c1".into(), StreamRecord::default());
        f.save(&s);
        assert_eq!(f.load(), s);
        s.prune(30 * 24 * 3600 * 1000);
        assert_eq!(s.preludes.keys().collect::<Vec<_>>(), ["c2"]);
        assert!(s.streams.is_empty());
        std::fs::write(dir.path().join(STATE_FILE), "{not json").unwrap();
        assert_eq!(f.load(), AssistantState::default());
    }
}
