//! What the assistant outbox must remember across restarts beside the conversation (which
//! keeps the outgoing messages and transcript turns): each call's `system_prelude` and "call
//! ended" notices with their task ids (the outbox's, for every kind), and the `Last-Event-ID`
//! of every `/v1/events` stream the incoming kind reads.
//!
//! Rows of the app's database (`outbox_notices`, `stream_cursors`: migration 0010), written
//! through the store's one writer thread ([`Store::queue_write`]) as the difference between
//! the state before and after a change ([`changes`]); the outbox works on the copy in memory.
//! An `assistant_state.json` left by an older app is moved into the rows at the first start
//! ([`load`]).

use crate::store::{Stmt, Store, StoreError};
use serde::{Deserialize, Serialize};
use sqlx::Row;
use std::collections::BTreeMap;
use std::path::Path;

/// The file an older app kept this state in (moved into the database at start).
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

impl PreludeState {
    pub fn as_str(self) -> &'static str {
        match self {
            PreludeState::Pending => "pending",
            PreludeState::Sent => "sent",
            PreludeState::Failed => "failed",
            PreludeState::Skipped => "skipped",
        }
    }

    fn parse(s: &str) -> Option<PreludeState> {
        [
            PreludeState::Pending,
            PreludeState::Sent,
            PreludeState::Failed,
            PreludeState::Skipped,
        ]
        .into_iter()
        .find(|p| p.as_str() == s)
    }
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

/// The two kinds of once-only notices, as `outbox_notices.notice` names them.
const PRELUDE: &str = "prelude";
const CALL_END: &str = "call_end";

const UPSERT_NOTICE: &str = "INSERT INTO outbox_notices (call_id, notice, task_id, state, \
     created_ms) VALUES (?, ?, ?, ?, ?) ON CONFLICT (call_id, notice) DO UPDATE SET \
     task_id = excluded.task_id, state = excluded.state, created_ms = excluded.created_ms";
const DELETE_NOTICE: &str = "DELETE FROM outbox_notices WHERE call_id = ? AND notice = ?";
const UPSERT_CURSOR: &str = "INSERT INTO stream_cursors (session_id, last_event_id, \
     last_activity_ms) VALUES (?, ?, ?) ON CONFLICT (session_id) DO UPDATE SET \
     last_event_id = excluded.last_event_id, last_activity_ms = excluded.last_activity_ms";
const DELETE_CURSOR: &str = "DELETE FROM stream_cursors WHERE session_id = ?";

/// The statements that turn the rows of `before` into those of `after`.
pub fn changes(before: &AssistantState, after: &AssistantState) -> Vec<Stmt> {
    let mut stmts = Vec::new();
    for (notice, b, a) in [
        (PRELUDE, &before.preludes, &after.preludes),
        (CALL_END, &before.call_ends, &after.call_ends),
    ] {
        stmts.extend(diff(b, a, |call_id, r| match r {
            Some(r) => Stmt::new(UPSERT_NOTICE)
                .bind(call_id)
                .bind(notice)
                .bind(r.task_id.as_str())
                .bind(r.state.as_str())
                .bind(r.created_ms),
            None => Stmt::new(DELETE_NOTICE).bind(call_id).bind(notice),
        }));
    }
    stmts.extend(diff(&before.streams, &after.streams, |id, r| match r {
        Some(r) => Stmt::new(UPSERT_CURSOR)
            .bind(id)
            .bind(r.last_event_id.as_deref())
            .bind(r.last_activity_ms),
        None => Stmt::new(DELETE_CURSOR).bind(id),
    }));
    stmts
}

/// One statement per key whose record was added, changed (`Some`) or removed (`None`).
fn diff<V: PartialEq>(
    before: &BTreeMap<String, V>,
    after: &BTreeMap<String, V>,
    stmt: impl Fn(&str, Option<&V>) -> Stmt,
) -> Vec<Stmt> {
    let changed = after
        .iter()
        .filter(|(k, v)| before.get(*k) != Some(*v))
        .map(|(k, v)| stmt(k, Some(v)));
    let removed = before
        .keys()
        .filter(|k| !after.contains_key(*k))
        .map(|k| stmt(k, None));
    changed.chain(removed).collect()
}

/// The state as its rows hold it.
async fn read(store: &Store) -> Result<AssistantState, StoreError> {
    let mut st = AssistantState::default();
    let rows =
        sqlx::query("SELECT call_id, notice, task_id, state, created_ms FROM outbox_notices")
            .fetch_all(store.reads())
            .await?;
    for r in rows {
        let Some(state) = PreludeState::parse(r.get(3)) else {
            continue; // the table's CHECK keeps any other out
        };
        let record = PreludeRecord {
            task_id: r.get(2),
            state,
            created_ms: r.get(4),
        };
        let notices = match r.get::<&str, _>(1) {
            PRELUDE => &mut st.preludes,
            _ => &mut st.call_ends,
        };
        notices.insert(r.get(0), record);
    }
    let rows =
        sqlx::query("SELECT session_id, last_event_id, last_activity_ms FROM stream_cursors")
            .fetch_all(store.reads())
            .await?;
    for r in rows {
        st.streams.insert(
            r.get(0),
            StreamRecord {
                last_event_id: r.get(1),
                last_activity_ms: r.get(2),
            },
        );
    }
    Ok(st)
}

/// The state at start: the rows, with the records of an `assistant_state.json` left by an older
/// app moved in (the file is removed once they are committed), pruned. Rows that cannot be read
/// are logged and the state starts empty (the outbox then gives a call's notices new task ids,
/// as a lost file did before); a state that cannot be written is logged and kept for this run,
/// and an old file stays for the next start.
pub async fn load(store: &Store, data_dir: &Path, now_ms: i64) -> AssistantState {
    let rows = match read(store).await {
        Ok(st) => st,
        Err(e) => {
            tracing::error!(error = %e, "the assistant outbox's state is unreadable; starting empty");
            return AssistantState::default();
        }
    };
    let file = data_dir.join(STATE_FILE);
    let mut state = rows.clone();
    let moved = match std::fs::read_to_string(&file) {
        Ok(json) => {
            match serde_json::from_str::<AssistantState>(&json) {
                Ok(old) => {
                    state.preludes.extend(old.preludes);
                    state.call_ends.extend(old.call_ends);
                    state.streams.extend(old.streams);
                }
                Err(e) => {
                    tracing::warn!(path = %file.display(), error = %e, "an old assistant state file is unreadable; its records are dropped");
                }
            }
            true
        }
        Err(_) => false,
    };
    state.prune(now_ms);
    let stmts = changes(&rows, &state);
    let saved = if stmts.is_empty() {
        Ok(Vec::new())
    } else {
        store.write(stmts).await
    };
    match saved {
        Ok(_) if moved => {
            if let Err(e) = std::fs::remove_file(&file) {
                tracing::warn!(path = %file.display(), error = %e, "cannot remove the old assistant state file");
            } else {
                tracing::info!(
                    path = %file.display(),
                    "the old assistant state file was moved into the database"
                );
            }
        }
        Ok(_) => {}
        Err(e) => {
            tracing::error!(error = %e, "cannot save the assistant outbox's state");
        }
    }
    state
}

#[cfg(test)]
mod tests {
    //! On a real SQLite file with the store's writer thread.
    use super::*;
    use crate::store::open_with_writer;

    fn record(task_id: &str, state: PreludeState, created_ms: i64) -> PreludeRecord {
        PreludeRecord {
            task_id: task_id.into(),
            state,
            created_ms,
        }
    }

    const DAY: i64 = 24 * 3600 * 1000;

    #[tokio::test]
    async fn changes_round_trip_through_the_rows_and_prune() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _writer) = open_with_writer(&dir.path().join("t.db")).await;
        let now = 30 * DAY;
        assert_eq!(
            load(&store, dir.path(), now).await,
            AssistantState::default()
        );

        let mut s = AssistantState::default();
        s.preludes
            .insert("c1".into(), record("t", PreludeState::Sent, now - 8 * DAY));
        s.preludes
            .insert("c2".into(), record("u", PreludeState::Pending, 0));
        s.preludes
            .insert("c3".into(), record("w", PreludeState::Pending, 0));
        s.call_ends
            .insert("c2".into(), record("v", PreludeState::Failed, now));
        s.streams.insert(
            "insights:c2".into(),
            StreamRecord {
                last_event_id: Some("e1-0.1".into()),
                last_activity_ms: now,
            },
        );
        s.streams.insert("c1".into(), StreamRecord::default());
        store
            .write(changes(&AssistantState::default(), &s))
            .await
            .unwrap();
        assert_eq!(read(&store).await.unwrap(), s);

        // A change writes only what changed, and a removal deletes.
        let mut t = s.clone();
        t.preludes.get_mut("c2").unwrap().state = PreludeState::Sent;
        t.call_ends.remove("c2");
        let stmts = changes(&s, &t);
        assert_eq!(stmts.len(), 2, "{stmts:?}");
        store.write(stmts).await.unwrap();
        assert_eq!(read(&store).await.unwrap(), t);

        // At start: settled notices older than a week (pending ones stay) and streams idle for
        // a day are gone, from the rows too.
        let loaded = load(&store, dir.path(), now).await;
        assert_eq!(loaded.preludes.keys().collect::<Vec<_>>(), ["c3"]);
        assert_eq!(loaded.streams.keys().collect::<Vec<_>>(), ["insights:c2"]);
        assert_eq!(read(&store).await.unwrap(), loaded);
    }

    #[tokio::test]
    async fn an_old_state_file_is_moved_into_the_rows_once() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _writer) = open_with_writer(&dir.path().join("t.db")).await;
        let now = 10 * DAY;
        let mut old = AssistantState::default();
        old.preludes.insert(
            "c1".into(),
            record("kept-task-id", PreludeState::Pending, now),
        );
        old.streams.insert(
            "c1".into(),
            StreamRecord {
                last_event_id: Some("e7".into()),
                last_activity_ms: now,
            },
        );
        let file = dir.path().join(STATE_FILE);
        std::fs::write(&file, serde_json::to_string(&old).unwrap()).unwrap();

        assert_eq!(load(&store, dir.path(), now).await, old);
        assert!(
            !file.exists(),
            "the file is removed once its records are rows"
        );
        assert_eq!(read(&store).await.unwrap(), old);
        // The next start reads the rows alone.
        assert_eq!(load(&store, dir.path(), now).await, old);

        // An unreadable file is dropped with a warning; the rows stay.
        std::fs::write(&file, "{not json").unwrap();
        assert_eq!(load(&store, dir.path(), now).await, old);
        assert!(!file.exists());
    }

    #[tokio::test]
    async fn a_store_without_a_writer_keeps_the_state_for_this_run_and_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        drop(open_with_writer(&path).await);
        let store = Store::open_read_only(&path).await.unwrap();
        let mut old = AssistantState::default();
        old.preludes
            .insert("c1".into(), record("t", PreludeState::Pending, 0));
        let file = dir.path().join(STATE_FILE);
        std::fs::write(&file, serde_json::to_string(&old).unwrap()).unwrap();
        // The write is refused ("the writer stopped"): the file stays for the next start.
        assert_eq!(load(&store, dir.path(), 0).await, old);
        assert!(file.exists());
    }
}
