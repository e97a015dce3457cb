//! One process per data dir (docs/contract.md, "Headless mode"), black-box: a second start on a
//! data dir in use exits at once, says who holds it and changes nothing in it; the lock dies
//! with its holder, even under `kill -9`.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use common::*;

/// Name → (mtime, contents) of every file in the data dir. SQLite's `-shm` index is left out:
/// it is shared memory of the running instance, not data.
fn snapshot(dir: &Path) -> BTreeMap<String, (SystemTime, Vec<u8>)> {
    std::fs::read_dir(dir)
        .expect("read the data dir")
        .map(|e| e.expect("dir entry"))
        .filter(|e| !e.file_name().to_string_lossy().ends_with("-shm"))
        .map(|e| {
            let meta = e.metadata().expect("metadata");
            let body = if meta.is_file() {
                std::fs::read(e.path()).expect("read a data dir file")
            } else {
                Vec::new()
            };
            (
                e.file_name().to_string_lossy().into_owned(),
                (meta.modified().expect("mtime"), body),
            )
        })
        .collect()
}

fn headless_args(data_dir: &Path) -> Vec<String> {
    [
        "--headless",
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

/// Starts the binary on `data_dir` and expects the quick refusal naming `holder`.
async fn assert_refused(data_dir: &Path, holder: u32) {
    let t0 = Instant::now();
    let mut second = Proc::spawn(&headless_args(data_dir), &[]);
    let Some(status) = second.wait_exit(Duration::from_secs(10)).await else {
        second.kill9();
        panic!(
            "a second instance on {} is still running\n--- stderr ---\n{}",
            data_dir.display(),
            second.stderr_tail()
        );
    };
    let took = t0.elapsed();
    second.wait_stdout_eof(Duration::from_secs(2)).await;
    // Its stderr is read on a thread: give it the moment to catch up with the exit.
    let deadline = Instant::now() + Duration::from_secs(2);
    while !second.stderr_tail().contains("already running") && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let err = second.stderr_tail();
    assert!(
        !status.success(),
        "the second instance exited {status}\n{err}"
    );
    assert!(
        took < Duration::from_secs(5),
        "the refusal took {took:?}\n{err}"
    );
    assert!(
        err.contains(&format!("already running (pid {holder})")),
        "stderr does not name the holder {holder}:\n{err}"
    );
    assert_eq!(
        second.stdout_lines(),
        Vec::<String>::new(),
        "the refused instance printed on stdout"
    );
}

#[tokio::test]
async fn a_second_instance_on_the_same_data_dir_is_refused_and_touches_nothing() {
    let mut app = App::start().await;
    let first = app.pid();
    let dir = app.data_dir.clone();
    let lock = std::fs::read_to_string(dir.join("stagewhisper.lock")).expect("the lock file");
    assert_eq!(
        lock.trim(),
        first.to_string(),
        "the lock file names its holder"
    );

    let sid = app.create_chat().await;
    assert_applied(&app.post(&message(&sid, &new_id(), "m-1", "before")).await);
    // Let the first instance settle (its idle WAL checkpoint writes the db) so that its own
    // files stand still: the same snapshot twice, a second apart.
    let before = wait_for("the data dir to stand still", WAIT * 2, || {
        let dir = dir.clone();
        async move {
            let a = snapshot(&dir);
            tokio::time::sleep(Duration::from_secs(1)).await;
            let b = snapshot(&dir);
            if b == a {
                Ok(a)
            } else {
                let moved: Vec<&String> = a.keys().filter(|k| a.get(*k) != b.get(*k)).collect();
                Err(format!("still changing: {moved:?}"))
            }
        }
    })
    .await;
    for name in ["ui_url", "callback_token", "ui_token", "stagewhisper.db"] {
        assert!(
            before.contains_key(name),
            "no {name} in {:?}",
            before.keys()
        );
    }
    let dir_mtime = std::fs::metadata(&dir).unwrap().modified().unwrap();

    assert_refused(&dir, first).await;
    // The same dir under another name is the same dir.
    let alias = tempfile::tempdir().unwrap();
    let link = alias.path().join("alias");
    std::os::unix::fs::symlink(&dir, &link).unwrap();
    assert_refused(&link, first).await;

    let after = snapshot(&dir);
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>(),
        "files appeared or went"
    );
    for (name, (mtime, body)) in &before {
        let (mtime2, body2) = &after[name];
        assert_eq!(mtime, mtime2, "{name} was touched");
        assert!(body == body2, "{name} changed");
    }
    assert_eq!(
        std::fs::metadata(&dir).unwrap().modified().unwrap(),
        dir_mtime,
        "the data dir itself changed"
    );

    // The first instance never noticed.
    assert_applied(&app.post(&message(&sid, &new_id(), "m-2", "after")).await);
    assert_duplicate(&app.post(&message(&sid, &new_id(), "m-1", "before")).await);
    assert_eq!(texts(&app.messages(&sid).await), vec!["before", "after"]);

    // A holder killed without any clean-up leaves its pid in the file but no lock.
    app.kill9();
    let stale = std::fs::read_to_string(dir.join("stagewhisper.lock")).unwrap();
    assert_eq!(stale.trim(), first.to_string());
    app.restart().await;
    let second = app.pid();
    assert_ne!(second, first);
    let lock = std::fs::read_to_string(dir.join("stagewhisper.lock")).unwrap();
    assert_eq!(lock.trim(), second.to_string(), "the new holder's pid");
    assert_eq!(texts(&app.messages(&sid).await), vec!["before", "after"]);
    assert_refused(&dir, second).await;

    // A graceful stop releases it too.
    let status = app.sigterm().await;
    assert!(status.success(), "{status}\n{}", app.stderr_tail());
    app.restart().await;
    assert_applied(&app.post(&message(&sid, &new_id(), "m-3", "again")).await);
}
