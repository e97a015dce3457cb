//! `stagewhisper-headless openapi`: the OpenAPI document without a running app (what the UI's
//! wire types are generated from, `ui/src/api.gen.ts`). It must be the very document a running
//! app serves at `GET /api/openapi.json`, and it must not touch the user's data dir.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::process::Command;

use common::*;
use serde_json::Value;

#[tokio::test]
async fn openapi_prints_the_document_a_running_app_serves() {
    let dir = tempfile::tempdir().unwrap();
    let app = App::launch(dir.path().to_path_buf(), vec![], &[]).await;
    let served = app.ui().get("/api/openapi.json").await;
    assert_eq!(served.status, 200, "{served}");

    // The user's data dir (given, or the default one) is never opened: the core starts on a
    // scratch dir of its own.
    let untouched = dir.path().join("not-created");
    let out = Command::new(bin())
        .arg("--data-dir")
        .arg(&untouched)
        .arg("openapi")
        .output()
        .expect("openapi");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(printed, served.json, "the printed document differs");
    assert!(printed["paths"]["/api/sessions"].is_object(), "{printed}");
    assert!(!untouched.exists(), "the data dir was created");
    // Each operation has its own id (OpenAPI requires it; the generated UI types are keyed by it).
    let mut ids = std::collections::BTreeMap::<String, Vec<String>>::new();
    for (path, item) in printed["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            if let Some(id) = op["operationId"].as_str() {
                ids.entry(id.to_owned())
                    .or_default()
                    .push(format!("{method} {path}"));
            }
        }
    }
    let dup: Vec<_> = ids.iter().filter(|(_, ops)| ops.len() > 1).collect();
    assert!(dup.is_empty(), "operation ids used twice: {dup:?}");

    // `--output FILE`: the same bytes in the file, nothing on stdout.
    let file = dir.path().join("openapi.json");
    let out = Command::new(bin())
        .args(["openapi", "--output"])
        .arg(&file)
        .output()
        .expect("openapi --output");
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    let written: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(written, served.json);

    // A file that cannot be written: exit 1 with the reason, not a panic.
    let out = Command::new(bin())
        .args(["openapi", "--output"])
        .arg(dir.path().join("no-such-dir").join("openapi.json"))
        .output()
        .expect("openapi --output (bad path)");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot write"), "{err}");
}
