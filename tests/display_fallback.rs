//! Without `--headless` the binary opens the desktop window; when no display is available
//! (`DISPLAY` and `WAYLAND_DISPLAY` unset or empty) it runs the headless mode instead, with the
//! same contract, and says so in one line on stderr. (The window itself is tested under Xvfb by
//! `tests/window/run.py`.)

mod common;

use std::time::Duration;

use common::*;

#[tokio::test]
async fn without_a_display_it_runs_headless_and_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let args: Vec<String> = [
        "--data-dir",
        &tmp.path().to_string_lossy(),
        "--callback-listen",
        "127.0.0.1:0",
        "--ui-listen",
        "127.0.0.1:0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut proc = Proc::spawn(
        &args,
        &[
            ("DISPLAY".into(), String::new()),
            ("WAYLAND_DISPLAY".into(), String::new()),
        ],
    );
    let ready = proc.wait_ready().await;

    let r = http_client()
        .get(format!("{}/api/settings", ready.ui_url))
        .bearer_auth(&ready.ui_token)
        .timeout(REQUEST_TIMEOUT)
        .send()
        .await
        .expect("GET /api/settings");
    assert_eq!(r.status(), 200);

    proc.signal("TERM");
    let status = proc
        .wait_exit(SHUTDOWN_TIMEOUT)
        .await
        .expect("exit after SIGTERM");
    assert_eq!(status.code(), Some(0), "{}", proc.stderr_tail());
    proc.wait_stdout_eof(Duration::from_secs(5)).await;
    assert_eq!(proc.stdout_lines().len(), 1, "{:?}", proc.stdout_lines());
    let notices: Vec<String> = proc
        .stderr_tail()
        .lines()
        .filter(|l| l.starts_with("stagewhisper: ") && l.contains("running headless"))
        .map(str::to_owned)
        .collect();
    assert_eq!(notices.len(), 1, "stderr:\n{}", proc.stderr_tail());
}
