//! The replay guard on envelope `message_id`s: an id is accepted once, and the record survives
//! restarts (the `byo_replay` table, migration 0008, on the store's database file).
//!
//! Record **before** decrypting (as the Hermes plugin does): a tampered copy sent first burns
//! the id, so the genuine envelope after it is refused too; that is the safe way round (an
//! attacker who can inject can also drop). Bounded: ids older than [`RETENTION`] are pruned
//! (at open, then after every [`PRUNE_EVERY`] accepted ids), so the table holds about a week of
//! traffic. Writes go through the store's one writer thread ([`Store::write`]: the
//! conversation's group commit and durability); reads through its read pool.

use crate::clock::SharedClock;
use crate::store::{Stmt, Store, StoreError};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// How long an accepted `message_id` is remembered.
pub const RETENTION: Duration = Duration::from_secs(7 * 24 * 3600);
/// Accepted ids between two prunes.
pub const PRUNE_EVERY: u64 = 1_000;
/// Longest `message_id` accepted (the plugins send UUIDs).
pub const MAX_MESSAGE_ID_LEN: usize = 128;

/// Why an id was not accepted. [`ReplayError::code`] is stable.
#[derive(Debug, thiserror::Error)]
pub enum ReplayError {
    #[error("envelope message_id {0:?} was seen before (replay)")]
    Replayed(String),
    #[error("envelope message_id is empty or longer than {MAX_MESSAGE_ID_LEN} bytes")]
    BadMessageId,
    #[error("replay guard storage: {0}")]
    Store(#[from] StoreError),
}

impl From<sqlx::Error> for ReplayError {
    fn from(e: sqlx::Error) -> Self {
        ReplayError::Store(StoreError::Sql(e))
    }
}

impl ReplayError {
    pub fn code(&self) -> &'static str {
        match self {
            ReplayError::Replayed(_) => "replayed",
            ReplayError::BadMessageId => "bad_message_id",
            ReplayError::Store(_) => "replay_guard_unavailable",
        }
    }
}

/// The persistent replay guard (one per app; cheap to share behind an `Arc`).
pub struct ReplayGuard {
    store: Store,
    clock: SharedClock,
    retention_ms: i64,
    prune_every: u64,
    since_prune: AtomicU64,
}

impl ReplayGuard {
    /// Opens the guard on the store's database (migrated by [`Store::open`]) and prunes it.
    pub async fn open(store: &Store, clock: SharedClock) -> Result<ReplayGuard, ReplayError> {
        Self::open_with(store, clock, RETENTION, PRUNE_EVERY).await
    }

    /// [`ReplayGuard::open`] with another retention and prune interval (tests).
    pub async fn open_with(
        store: &Store,
        clock: SharedClock,
        retention: Duration,
        prune_every: u64,
    ) -> Result<ReplayGuard, ReplayError> {
        let guard = ReplayGuard {
            store: store.clone(),
            clock,
            retention_ms: i64::try_from(retention.as_millis()).unwrap_or(i64::MAX),
            prune_every: prune_every.max(1),
            since_prune: AtomicU64::new(0),
        };
        guard.prune().await?;
        Ok(guard)
    }

    /// Accepts `message_id` once: `Err(Replayed)` if it was accepted before (within the
    /// retention), also before a restart. The record is committed before this returns.
    pub async fn check_and_record(&self, message_id: &str) -> Result<(), ReplayError> {
        if message_id.is_empty() || message_id.len() > MAX_MESSAGE_ID_LEN {
            return Err(ReplayError::BadMessageId);
        }
        let now = self.clock.now_ms();
        let insert =
            Stmt::new("INSERT OR IGNORE INTO byo_replay (message_id, seen_at_ms) VALUES (?, ?)")
                .bind(message_id)
                .bind(now);
        if self.store.write(vec![insert]).await?.first() != Some(&1) {
            return Err(ReplayError::Replayed(message_id.to_string()));
        }
        if self.since_prune.fetch_add(1, Ordering::Relaxed) + 1 >= self.prune_every {
            self.prune().await?;
        }
        Ok(())
    }

    /// Forgets ids older than the retention; returns how many.
    pub async fn prune(&self) -> Result<u64, ReplayError> {
        self.since_prune.store(0, Ordering::Relaxed);
        let cutoff = self.clock.now_ms().saturating_sub(self.retention_ms);
        let delete = Stmt::new("DELETE FROM byo_replay WHERE seen_at_ms < ?").bind(cutoff);
        let changes = self.store.write(vec![delete]).await?;
        Ok(changes.first().copied().unwrap_or(0))
    }

    /// How many ids are remembered.
    pub async fn len(&self) -> Result<u64, ReplayError> {
        let (n,): (i64,) = sqlx::query_as("SELECT COUNT(*) FROM byo_replay")
            .fetch_one(self.store.reads())
            .await?;
        Ok(n as u64)
    }

    pub async fn is_empty(&self) -> Result<bool, ReplayError> {
        Ok(self.len().await? == 0)
    }
}

#[cfg(test)]
mod tests {
    //! On a real SQLite file, across a reopen; the vectors' replay-guard sequences with the
    //! crypto module (the guard checked before opening, as the plugin does).
    use super::*;
    use crate::assistants::kinds::byo_relay::crypto::{Dialect, Envelope, EnvelopeKey};
    use crate::clock::ManualClock;
    use std::sync::Arc;

    fn clock() -> Arc<ManualClock> {
        ManualClock::new(chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap())
    }

    #[tokio::test]
    async fn a_seen_id_is_refused_also_after_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("app.sqlite");
        let clock = clock();
        {
            let (store, _writer) = crate::store::open_with_writer(&db).await;
            let guard = ReplayGuard::open(&store, clock.clone()).await.unwrap();
            guard.check_and_record("m-1").await.unwrap();
            guard.check_and_record("m-2").await.unwrap();
            let err = guard.check_and_record("m-1").await.unwrap_err();
            assert_eq!(err.code(), "replayed");
            assert_eq!(guard.len().await.unwrap(), 2);
        }
        let (store, _writer) = crate::store::open_with_writer(&db).await;
        let guard = ReplayGuard::open(&store, clock.clone()).await.unwrap();
        assert_eq!(guard.len().await.unwrap(), 2);
        for id in ["m-1", "m-2"] {
            assert_eq!(
                guard.check_and_record(id).await.unwrap_err().code(),
                "replayed",
                "{id} after the reopen"
            );
        }
        guard.check_and_record("m-3").await.unwrap();
    }

    #[tokio::test]
    async fn ids_older_than_the_retention_are_pruned() {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("app.sqlite");
        let clock = clock();
        let (store, _writer) = crate::store::open_with_writer(&db).await;
        let guard = ReplayGuard::open(&store, clock.clone()).await.unwrap();
        guard.check_and_record("old").await.unwrap();
        clock.advance_ms(6 * 24 * 3600 * 1000);
        guard.check_and_record("recent").await.unwrap();
        assert_eq!(guard.prune().await.unwrap(), 0);
        clock.advance_ms(2 * 24 * 3600 * 1000);
        assert_eq!(guard.prune().await.unwrap(), 1);
        assert_eq!(guard.len().await.unwrap(), 1);
        assert_eq!(
            guard.check_and_record("recent").await.unwrap_err().code(),
            "replayed"
        );
        // Pruning also runs at open.
        clock.advance_ms(8 * 24 * 3600 * 1000);
        drop(guard);
        let guard = ReplayGuard::open(&store, clock.clone()).await.unwrap();
        assert!(guard.is_empty().await.unwrap());
    }

    #[tokio::test]
    async fn the_table_stays_bounded_under_a_stream_of_ids() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _writer) = crate::store::open_with_writer(&dir.path().join("a.sqlite")).await;
        let clock = clock();
        let (retention, every) = (Duration::from_secs(20), 10);
        let guard = ReplayGuard::open_with(&store, clock.clone(), retention, every)
            .await
            .unwrap();
        // One id a second for 100 s: at most retention + prune interval rows remain.
        for i in 0..100 {
            guard.check_and_record(&format!("id-{i}")).await.unwrap();
            clock.advance_ms(1000);
        }
        let n = guard.len().await.unwrap();
        assert!((20..=20 + every).contains(&n), "{n} rows");
        // The newest are still refused, the pruned ones are forgotten.
        assert_eq!(
            guard.check_and_record("id-99").await.unwrap_err().code(),
            "replayed"
        );
        guard.check_and_record("id-0").await.unwrap();
    }

    #[tokio::test]
    async fn bad_message_ids_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _writer) = crate::store::open_with_writer(&dir.path().join("a.sqlite")).await;
        let guard = ReplayGuard::open(&store, clock()).await.unwrap();
        assert_eq!(
            guard.check_and_record("").await.unwrap_err().code(),
            "bad_message_id"
        );
        let long = "x".repeat(MAX_MESSAGE_ID_LEN + 1);
        assert_eq!(
            guard.check_and_record(&long).await.unwrap_err().code(),
            "bad_message_id"
        );
        assert!(guard.is_empty().await.unwrap());
    }

    /// What the plugin's `open_json_checked` does: the guard first, then the envelope.
    async fn open_checked(
        guard: &ReplayGuard,
        key: &EnvelopeKey,
        env: &Envelope,
    ) -> Result<serde_json::Value, String> {
        guard
            .check_and_record(&env.message_id)
            .await
            .map_err(|e| e.code().to_string())?;
        let bytes = key
            .open_unchecked_role(env, Dialect::Hermes)
            .map_err(|e| e.code().to_string())?;
        serde_json::from_slice(&bytes).map_err(|e| e.to_string())
    }

    /// Every step of the vectors' `replay_guard` sequences, with the outcome the plugin had.
    #[tokio::test]
    async fn the_vectors_replay_sequences() {
        let v = crate::assistants::kinds::byo_relay::crypto::tests::vectors();
        let rg = &v["replay_guard"];
        let find = |id: &str| {
            let e = v["envelopes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|e| e["message_id"] == id)
                .unwrap_or_else(|| panic!("no envelope {id}"));
            (
                Envelope::from_value(&e["envelope"]).unwrap(),
                e["key"].as_str().unwrap().to_string(),
            )
        };
        let (e1, key_name) = find(rg["e1_message_id"].as_str().unwrap());
        let (e2, _) = find(rg["e2_message_id"].as_str().unwrap());
        let ka = v["key_agreement"]
            .as_array()
            .unwrap()
            .iter()
            .find(|k| k["name"] == key_name.as_str())
            .unwrap();
        let key = EnvelopeKey::from_b64(ka["envelope_key_b64"].as_str().unwrap()).unwrap();
        let mut tampered = e1.clone();
        tampered.ciphertext = {
            use base64::Engine as _;
            let e = base64::engine::general_purpose::STANDARD;
            let mut ct = e.decode(&tampered.ciphertext).unwrap();
            ct[0] ^= 1;
            e.encode(ct)
        };

        let sequences = rg.as_object().unwrap();
        let mut checked = 0;
        for (name, steps) in sequences {
            let Some(steps) = steps.as_array() else {
                continue;
            };
            let dir = tempfile::tempdir().unwrap();
            let (store, _writer) =
                crate::store::open_with_writer(&dir.path().join("a.sqlite")).await;
            let guard = ReplayGuard::open(&store, clock()).await.unwrap();
            for step in steps {
                let label = step["step"].as_str().unwrap();
                let env = if label.contains("tampered copy of e1") {
                    &tampered
                } else if label.contains("e1") {
                    &e1
                } else if label.contains("e2") {
                    &e2
                } else {
                    panic!("{name}: a step this test does not know: {label}")
                };
                let got = open_checked(&guard, &key, env).await;
                match step["outcome"].as_str().unwrap() {
                    "ok" => assert_eq!(got.unwrap(), step["value"], "{name}: {label}"),
                    "error" => {
                        let perr = step["plugin_error"].as_str().unwrap();
                        let want = if perr.contains("Replay detected") {
                            "replayed"
                        } else if perr.contains("Decryption failed") {
                            "decryption_error"
                        } else {
                            panic!("{name}: unknown plugin error {perr}")
                        };
                        assert_eq!(got.unwrap_err(), want, "{name}: {label}");
                    }
                    other => panic!("{name}: outcome {other}"),
                }
                checked += 1;
            }
        }
        assert_eq!(checked, 5, "the two sequences of the vectors");
    }
}
