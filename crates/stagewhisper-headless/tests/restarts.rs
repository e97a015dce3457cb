//! Restarts: `kill -9` in a loop during start-up and migration never leaves a database that
//! fails to open or loses an acknowledged message; a callback token rotation during a flood
//! loses nothing that was acknowledged.
//!
//! The migration case builds a database of the previous schema (the first three migrations of
//! `crates/stagewhisper-core/migrations`, applied by sqlx's migrator from a copy of those files)
//! holding many rows, so the binary's start-up spends a while in migration 0004 (which rebuilds
//! both tables), then starts the real binary on it 20 times and kills it (`SIGKILL`):
//! - 15 times at increasing delays over the start-up time measured once on a copy; a start that
//!   got through the migration before its kill narrows the window and the next start is from
//!   the old database again, so these kills land in start-up or in the migration;
//! - 5 times on the migrated database, at increasing delays after the ready line, in the middle
//!   of a flood of callbacks: each acknowledged one must survive.
//!
//! After every kill the test opens the file itself: it opens, `PRAGMA quick_check` is `ok`, the
//! schema is the old or the new one and never half-migrated, and no row is missing.

#[path = "../../../tests/common/mod.rs"]
mod common;
mod hardening;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use common::*;
use hardening::*;
use reqwest::Method;
use serde_json::{json, Value};
use sqlx::{ConnectOptions, Row};

/// Rows of the old-schema database (about 16 MB).
const OLD_ROWS: i64 = 40_000;
const OLD_SESSIONS: i64 = 40;
const KILLS: usize = 20;
/// Of those, the kills during start-up and migration (the rest come after the ready line).
const MIGRATION_KILLS: usize = 15;

fn migrations_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../stagewhisper-core/migrations")
}

/// A database of the schema before migration 0004, with [`OLD_ROWS`] assistant messages (and
/// the 0003-style event reference of each) over [`OLD_SESSIONS`] chats.
async fn old_schema_db(path: &Path) {
    let old = tempfile::tempdir().unwrap();
    let mut files: Vec<PathBuf> = std::fs::read_dir(migrations_dir())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "sql"))
        .collect();
    files.sort();
    assert!(files.len() >= 4, "migrations: {files:?}");
    for f in files.iter().take(3) {
        std::fs::copy(f, old.path().join(f.file_name().unwrap())).unwrap();
    }
    let migrator = sqlx::migrate::Migrator::new(old.path()).await.unwrap();
    let mut db = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(path)
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .connect()
        .await
        .expect("create the old-schema database");
    migrator.run_direct(&mut db).await.unwrap();
    let script = format!(
        "BEGIN;
         WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i + 1 < {OLD_SESSIONS})
         INSERT INTO sessions (session_id, kind, is_call, title, created_at)
             SELECT printf('old-%02d', i), 'chat', 0, 'old chat ' || i, '2026-01-01T00:00:00Z' FROM n;
         WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {OLD_ROWS})
         INSERT INTO messages (session_id, kind, text, message_id, task_id, scope, content_key,
                               received_at, sort_key)
             SELECT printf('old-%02d', i % {OLD_SESSIONS}), 'assistant',
                    'An old message, number ' || i || ': ' || hex(randomblob(80)),
                    'old-' || i, 'task-' || i, 'task-' || i, hex(randomblob(16)),
                    '2026-01-01T00:00:00Z', i
             FROM n;
         INSERT INTO events (session_id, data, message_row)
             SELECT session_id, json_object('type', 'message_added', 'session_id', session_id), id
             FROM messages;
         COMMIT;
         PRAGMA wal_checkpoint(TRUNCATE);"
    );
    sqlx::raw_sql(&script).execute(&mut db).await.unwrap();
}

fn args(data_dir: &Path) -> Vec<String> {
    [
        "--data-dir",
        &data_dir.to_string_lossy(),
        "--callback-listen",
        "127.0.0.1:0",
        "--ui-listen",
        "127.0.0.1:0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// The newest applied migration, the messages and events counts, `PRAGMA quick_check`.
async fn inspect(db: &Path) -> Result<(i64, i64, i64, String), String> {
    let mut c = open_db(db).await.map_err(|e| format!("open: {e}"))?;
    let q = |sql: &'static str| sqlx::query(sql);
    let check: String = q("PRAGMA quick_check")
        .fetch_one(&mut c)
        .await
        .map_err(|e| format!("quick_check: {e}"))?
        .get(0);
    let version: i64 = q("SELECT MAX(version) FROM _sqlx_migrations WHERE success")
        .fetch_one(&mut c)
        .await
        .map_err(|e| format!("migrations: {e}"))?
        .get(0);
    let messages: i64 = q("SELECT COUNT(*) FROM messages")
        .fetch_one(&mut c)
        .await
        .map_err(|e| format!("count messages: {e}"))?
        .get(0);
    let events: i64 = q("SELECT COUNT(*) FROM events")
        .fetch_one(&mut c)
        .await
        .map_err(|e| format!("count events: {e}"))?
        .get(0);
    // A half-applied 0004 would leave its new tables beside the old ones.
    let stray: i64 = q("SELECT COUNT(*) FROM sqlite_master WHERE name LIKE '%_plain'")
        .fetch_one(&mut c)
        .await
        .map_err(|e| format!("schema: {e}"))?
        .get(0);
    if stray != 0 {
        return Err(format!("{stray} half-migrated tables (`*_plain`) left"));
    }
    Ok((version, messages, events, check))
}

fn flood_body(i: usize, sid: &str) -> Value {
    json!({
        "task_id": uuid::Uuid::from_u128(0x4e57_0000_0000_0000_0000_0000_0000_0000 + i as u128).to_string(),
        "session_id": sid,
        "status": "message",
        "message_id": format!("rs-{i:05}"),
        "reply_text": format!("Message {i} sent between kills"),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn kill_9_during_start_up_and_migration_never_breaks_the_database() {
    let root = tempfile::tempdir().unwrap();
    let data = root.path().join("data");
    std::fs::create_dir(&data).unwrap();
    let db = data.join("stagewhisper.db");
    let built = Instant::now();
    old_schema_db(&db).await;
    let size = std::fs::metadata(&db).unwrap().len();
    eprintln!(
        "old-schema database: {OLD_ROWS} rows, {} MiB, built in {:?}",
        size >> 20,
        built.elapsed()
    );

    // How long a start with the migration takes here (on a copy).
    let probe = root.path().join("probe");
    std::fs::create_dir(&probe).unwrap();
    std::fs::copy(&db, probe.join("stagewhisper.db")).unwrap();
    let t0 = Instant::now();
    let mut p = Proc::spawn(&args(&probe), &[]);
    p.wait_ready().await;
    let startup = t0.elapsed();
    p.kill9();
    let (v, n, _, _) = inspect(&probe.join("stagewhisper.db")).await.unwrap();
    assert_eq!((v, n), (4, OLD_ROWS), "the probe start migrated everything");
    eprintln!("start-up with the migration: {startup:?}");

    // The old database as built, to start each migration kill from.
    let pristine = root.path().join("pristine.db");
    std::fs::copy(&db, &pristine).unwrap();
    let restore = || {
        for ext in ["-wal", "-shm"] {
            let _ = std::fs::remove_file(format!("{}{ext}", db.display()));
        }
        std::fs::copy(&pristine, &db).unwrap();
    };

    let http = http_client();
    let acked: Arc<Mutex<BTreeSet<String>>> = Arc::default();
    let next = Arc::new(AtomicUsize::new(0));
    let mut sid: Option<String> = None;
    let mut window = startup;
    let (mut mid_migration, mut ready_kills) = (0, 0);
    for k in 0..KILLS {
        // Phase 1: kills at increasing delays over the start-up with the migration. A start that
        // got through the migration before its kill narrows the window, and the next one starts
        // from the old database again, so every kill of this phase lands in start-up or
        // migration. Phase 2: on the migrated database, kills at increasing delays after the
        // ready line, in the middle of a flood of callbacks.
        let migrating = k < MIGRATION_KILLS;
        let delay = if migrating {
            window.mul_f64((k + 1) as f64 / (MIGRATION_KILLS + 1) as f64)
        } else {
            Duration::from_millis(150 * (k - MIGRATION_KILLS + 1) as u64)
        };
        let mut p = Proc::spawn(&args(&data), &[]);
        let t = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let mut senders = Vec::new();
        let mut flood_from = None;
        loop {
            let ready_line = p.stdout_lines().first().cloned();
            if migrating && t.elapsed() >= delay {
                break;
            }
            if let (Some(at), false) = (flood_from, migrating) {
                if Instant::now().duration_since(at) >= delay {
                    break;
                }
            }
            if senders.is_empty() && (!migrating || ready_line.is_some()) {
                if let Some(line) = &ready_line {
                    let ready = parse_ready(line).unwrap();
                    let s = match &sid {
                        Some(s) => s.clone(),
                        None => {
                            let (st, v) = request(
                                &http,
                                Method::POST,
                                &format!("{}/api/sessions", ready.ui_url),
                                &ready.ui_token,
                                Some(&json!({"title": "between kills"})),
                            )
                            .await
                            .unwrap();
                            assert_eq!(st, 201, "{v}");
                            v["session_id"].as_str().unwrap().to_owned()
                        }
                    };
                    sid = Some(s.clone());
                    flood_from = Some(Instant::now());
                    for _ in 0..4 {
                        let (http, ready, s) = (http.clone(), ready.clone(), s.clone());
                        let (acked, next, stop) = (acked.clone(), next.clone(), stop.clone());
                        senders.push(tokio::spawn(async move {
                            while !stop.load(Ordering::SeqCst) {
                                let i = next.fetch_add(1, Ordering::SeqCst);
                                let b = flood_body(i, &s);
                                let url = format!(
                                    "{}/tasks/{}",
                                    ready.callback_url,
                                    b["task_id"].as_str().unwrap()
                                );
                                let token = &ready.callback_token;
                                match request(&http, Method::POST, &url, token, Some(&b)).await {
                                    Ok((200, v)) if v["ok"] == true => {
                                        acked.lock().unwrap().insert(format!("rs-{i:05}"));
                                    }
                                    Ok((s, v)) => panic!("callback {i} before the kill: {s} {v}"),
                                    Err(_) => return, // killed under it: not acknowledged
                                }
                            }
                        }));
                    }
                }
            }
            assert!(
                t.elapsed() < STARTUP_TIMEOUT,
                "kill {k}: no ready line within {STARTUP_TIMEOUT:?}\n{}",
                p.stderr_tail()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let was_ready = !p.stdout_lines().is_empty();
        p.kill9();
        stop.store(true, Ordering::SeqCst);
        for s in senders {
            s.await.expect("a sender panicked");
        }
        ready_kills += was_ready as usize;
        let (version, messages, events, check) = inspect(&db).await.unwrap_or_else(|e| {
            panic!(
                "after kill {k} ({delay:?}): the database does not open: {e}\n{}",
                p.stderr_tail()
            )
        });
        assert_eq!(check, "ok", "kill {k}: quick_check");
        assert!(
            version == 3 || version == 4,
            "kill {k}: schema version {version}"
        );
        assert!(
            messages >= OLD_ROWS && events >= OLD_ROWS,
            "kill {k}: {messages} messages, {events} events (of {OLD_ROWS} each before)"
        );
        if migrating {
            assert!(
                !was_ready || version == 4,
                "kill {k}: ready on schema {version}"
            );
            assert_eq!(messages, OLD_ROWS, "kill {k}: rows before any callback");
            if version == 4 {
                window = delay.mul_f64(0.9);
                restore();
            } else {
                mid_migration += 1;
            }
        }
        if let Some(s) = &sid {
            let stored: BTreeSet<String> = stored_message_ids(&db, s).await.into_iter().collect();
            let lost: Vec<String> = acked.lock().unwrap().difference(&stored).cloned().collect();
            assert!(
                lost.is_empty(),
                "kill {k}: acknowledged callbacks lost: {lost:?}"
            );
        }
        eprintln!(
            "kill {k:2} after {delay:>8.1?}{}: schema {version}, ready {was_ready}, {messages} messages, {} acknowledged so far",
            if migrating { "" } else { " of flood" },
            acked.lock().unwrap().len()
        );
    }
    eprintln!(
        "{mid_migration} kills left the old schema (start-up or migration interrupted); \
         {ready_kills} kills after the ready line"
    );
    assert!(
        mid_migration >= MIGRATION_KILLS / 2,
        "only {mid_migration} of {MIGRATION_KILLS} kills landed before the migration committed"
    );

    // A last, clean start: the old rows and every acknowledged callback are there.
    let mut app = App::launch(data.clone(), vec![], &[]).await;
    for s in 0..OLD_SESSIONS {
        let n = app.messages(&format!("old-{s:02}")).await.len() as i64;
        assert_eq!(n, OLD_ROWS / OLD_SESSIONS, "old chat {s}");
    }
    if let Some(s) = &sid {
        let shown: BTreeSet<String> = app
            .messages(s)
            .await
            .iter()
            .filter_map(|m| m["message_id"].as_str().map(str::to_owned))
            .collect();
        let lost: Vec<String> = acked.lock().unwrap().difference(&shown).cloned().collect();
        assert!(
            lost.is_empty(),
            "acknowledged callbacks not shown: {lost:?}"
        );
    }
    assert!(app.sigterm().await.success());
    assert_eq!(integrity(&db).await.as_deref(), Ok("ok"));
    assert_eq!(inspect(&db).await.unwrap().0, 4, "migrated in the end");
}

const ROTATION_SENDERS: usize = 4;
const ROTATION_TOTAL: usize = 1_500;
const ROTATE_AFTER: usize = 300;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_token_rotation_during_a_flood_loses_nothing_acknowledged() {
    let mut app = App::start().await;
    let sid = app.create_chat().await;
    let ready = app.ready.clone();
    let http = http_client();
    let token = Arc::new(RwLock::new(ready.callback_token.clone()));
    let acked: Arc<Mutex<BTreeSet<usize>>> = Arc::default();
    let unauthorized = Arc::new(AtomicUsize::new(0));
    let next = Arc::new(AtomicUsize::new(0));
    let mut senders = Vec::new();
    for _ in 0..ROTATION_SENDERS {
        let (http, ready, sid, token) = (http.clone(), ready.clone(), sid.clone(), token.clone());
        let (acked, unauthorized, next) = (acked.clone(), unauthorized.clone(), next.clone());
        senders.push(tokio::spawn(async move {
            // Each sender learns the new token only from a 401, as an assistant would.
            let mut mine = token.read().unwrap().clone();
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                if i >= ROTATION_TOTAL {
                    return;
                }
                let b = flood_body(i, &sid);
                let url = format!(
                    "{}/tasks/{}",
                    ready.callback_url,
                    b["task_id"].as_str().unwrap()
                );
                loop {
                    match request(&http, Method::POST, &url, &mine, Some(&b)).await {
                        Ok((200, v)) if v["ok"] == true && v["duplicate"] != true => {
                            acked.lock().unwrap().insert(i);
                            break;
                        }
                        Ok((401, v)) if v["error"] == "unauthorized" => {
                            unauthorized.fetch_add(1, Ordering::SeqCst);
                            // The rotation may have answered the test but not been published
                            // to the senders yet: wait (bounded) for the new token.
                            let since = Instant::now();
                            while *token.read().unwrap() == mine {
                                assert!(
                                    since.elapsed() < Duration::from_secs(10),
                                    "401 for callback {i} and no rotation: {v}"
                                );
                                tokio::time::sleep(Duration::from_millis(2)).await;
                            }
                            mine = token.read().unwrap().clone();
                        }
                        other => panic!("callback {i}: {other:?}"),
                    }
                }
            }
        }));
    }
    wait_for(
        "acknowledgements before the rotation",
        Duration::from_secs(30),
        || {
            let n = acked.lock().unwrap().len();
            async move {
                if n >= ROTATE_AFTER {
                    Ok(())
                } else {
                    Err(format!("{n} acknowledged"))
                }
            }
        },
    )
    .await;
    // The new token is published to the senders only once the rotation has answered.
    let fresh = app.rotate_callback_token().await;
    let at_rotation = acked.lock().unwrap().len();
    *token.write().unwrap() = fresh.clone();
    for s in senders {
        s.await.expect("a sender panicked");
    }
    let acked = acked.lock().unwrap().clone();
    let refused = unauthorized.load(Ordering::SeqCst);
    eprintln!(
        "{} acknowledged ({at_rotation} before the rotation answered), {refused} refused 401 unauthorized",
        acked.len()
    );
    assert_eq!(
        acked.len(),
        ROTATION_TOTAL,
        "every callback acknowledged in the end"
    );
    assert_eq!(
        refused, ROTATION_SENDERS,
        "each sender gets exactly one 401 (its first request with the old token after the rotation)"
    );

    let want: BTreeSet<String> = acked.iter().map(|i| format!("rs-{i:05}")).collect();
    let shown = |msgs: Vec<Value>| -> BTreeSet<String> {
        msgs.iter()
            .filter_map(|m| m["message_id"].as_str().map(str::to_owned))
            .collect()
    };
    assert_eq!(shown(app.messages(&sid).await), want);
    app.restart().await;
    assert_eq!(
        app.ready.callback_token, fresh,
        "the rotated token survives a restart"
    );
    assert_eq!(shown(app.messages(&sid).await), want, "after a restart");
}
