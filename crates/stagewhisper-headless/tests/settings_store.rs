//! Settings in one store, black-box: the real headless binary on a data dir holding the
//! settings files of the versions before `settings.json` (`tests/fixtures/settings-v0`, each
//! in the format those versions wrote).
//!
//! - after the first start every setting is in force (read back through the control API), in
//!   `settings.json` (0600), and each old file is renamed `*.migrated`; secrets and state files
//!   (`assistant_relay_token`, `assistants/<kind>.state.json`) stay where they were;
//! - a restart reads only `settings.json`: the `*.migrated` files removed and a contradicting
//!   old file put back change nothing;
//! - bad input through the PUT routes keeps its stable codes and writes nothing; a good change
//!   is saved and kept across a restart;
//! - an old file that cannot be read is kept (`*.unreadable`) and reported in `GET
//!   /api/settings` with a stable code, never silently dropped.

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::*;
use serde_json::{json, Value};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/settings-v0")
}

/// The old files the headless binary moves in (`desktop.json` is the window app's).
const MOVED: &[&str] = &[
    "audio.json",
    "mcp.json",
    "tunnel.json",
    "assistant.json",
    "assistant_kind.json",
    "assistants/openclaw-gateway.json",
];

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &dest);
        } else if e.file_name() != "README.md" {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

fn doc(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("settings.json")).unwrap()).unwrap()
}

/// Every setting of the fixture, as the control API answers it.
async fn assert_fixture_settings(app: &App) {
    let ui = app.ui();
    let mcp = ui.get("/api/mcp").await;
    assert_eq!(mcp.json["enabled"], true, "{}", mcp.json);

    let t = ui.get("/api/tunnel").await.json["config"].clone();
    assert_eq!(
        (&t["kind"], &t["enabled"], &t["url"]),
        (
            &json!("external"),
            &json!(false),
            &json!("https://desk.example.net")
        ),
        "{t}"
    );
    assert_eq!(
        (&t["check_interval_secs"], &t["verify"]),
        (&json!(30), &json!(false))
    );

    let a = ui.get("/api/assistant").await.json;
    assert_eq!(
        (
            &a["kind"],
            &a["base_url"],
            &a["mode"],
            &a["relay_token_set"]
        ),
        (
            &json!("incoming"),
            &json!("http://127.0.0.1:9"),
            &json!("events"),
            &json!(true)
        ),
        "{a}"
    );
    assert_eq!(a["prelude"], "Fixture prelude: coach me on {title}.");

    let au = ui.get("/api/audio").await.json;
    assert_eq!(au["mic"], "usb-headset.mono", "{au}");
    assert_eq!(au["system"], json!({"app": "zoom"}));
    assert_eq!(
        (&au["you_label"], &au["them_label"]),
        (&json!("Ada"), &json!("Client"))
    );
    let e = &au["engine"];
    assert_eq!(
        (&e["kind"], &e["base_url"], &e["model"], &e["api_key_set"]),
        (
            &json!("openai"),
            &json!("http://127.0.0.1:9"),
            &json!("whisper-1"),
            &json!(true)
        ),
        "{e}"
    );
    assert_eq!(au["speakers"]["enabled"], true);

    let d = ui.get("/api/audio/detection").await.json;
    assert_eq!(
        (&d["enabled"], &d["ignored_apps"], &d["end_after_secs"]),
        (&json!(false), &json!(["slack"]), &json!(120)),
        "{d}"
    );
}

#[tokio::test]
async fn settings_store_old_files_are_moved_in_and_a_restart_reads_only_settings_json() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    copy_dir(&fixture(), &dir);
    let mut app = App::launch(dir.clone(), Vec::new(), &[]).await;
    assert_fixture_settings(&app).await;
    let s = app.ui().get("/api/settings").await.json;
    assert_eq!(s["settings_problems"], json!([]), "{s}");

    // The document: private, every section in, the secrets not.
    let mode = std::fs::metadata(dir.join("settings.json"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    let d = doc(&dir);
    assert_eq!(d["format"], 1);
    for key in ["audio", "mcp", "tunnel", "incoming", "assistants"] {
        assert_eq!(d["sections"][key]["version"], 1, "{key}: {d}");
    }
    let gw = &d["sections"]["assistants"]["value"]["kinds"]["openclaw-gateway"];
    assert_eq!(
        (&gw["url"], &gw["session_key"]),
        (&json!("ws://127.0.0.1:9"), &json!("fixture-desk"))
    );
    assert_eq!(d["sections"]["assistants"]["value"]["active"], "incoming");
    let text = std::fs::read_to_string(dir.join("settings.json")).unwrap();
    assert!(
        !text.contains("fixture-relay-token"),
        "the relay token is a secret: {text}"
    );
    assert!(
        !text.contains("call-that-ended"),
        "listening is state, not a setting"
    );

    // The old files moved in, each kept as `*.migrated`; secrets and state where they were.
    for f in MOVED {
        assert!(!dir.join(f).exists(), "{f} still there");
        assert!(dir.join(format!("{f}.migrated")).exists(), "{f}.migrated");
    }
    assert!(dir.join("assistant_relay_token").exists());
    assert!(dir.join("assistants/clawborrator.state.json").exists());
    assert!(
        dir.join("desktop.json").exists(),
        "the window app's, untouched here"
    );

    // A restart reads only settings.json: the old copies gone, a contradicting old file back.
    let status = app.sigterm().await;
    assert!(status.success(), "{status}");
    for f in MOVED {
        std::fs::remove_file(dir.join(format!("{f}.migrated"))).unwrap();
    }
    std::fs::write(dir.join("mcp.json"), r#"{"enabled": false}"#).unwrap();
    std::fs::write(dir.join("audio.json"), r#"{"you_label": "Stale"}"#).unwrap();
    app.restart().await;
    assert_fixture_settings(&app).await;
    assert!(dir.join("mcp.json").exists(), "not read, not moved");

    // Bad input through the PUT routes: the same stable codes, nothing written.
    let before = std::fs::read(dir.join("settings.json")).unwrap();
    let ui = app.ui();
    for (method, path, body, code) in [
        (
            "PUT",
            "/api/audio",
            json!({"you_label": ""}),
            "invalid_label",
        ),
        (
            "PUT",
            "/api/audio",
            json!({"engine": {"kind": "whisper", "model": "tiny", "language": "xx"}}),
            "invalid_language",
        ),
        (
            "POST",
            "/api/tunnel",
            json!({"kind": "external", "url": "ftp://desk.example.net"}),
            "invalid_url",
        ),
        (
            "PUT",
            "/api/assistant",
            json!({"kind": "incoming", "base_url": "http://192.168.1.2:1", "relay_token": "x".repeat(20)}),
            "invalid_base_url",
        ),
        (
            "PUT",
            "/api/mcp",
            json!({"enabled": "yes"}),
            "invalid_field",
        ),
    ] {
        let r = ui
            .request(method, path, Some(&ui_token(&app)), Some(&body))
            .await;
        assert_eq!(
            (r.status, r.json["error"].as_str()),
            (400, Some(code)),
            "{method} {path} {body}: {}",
            r.json
        );
    }
    assert_eq!(
        std::fs::read(dir.join("settings.json")).unwrap(),
        before,
        "nothing written"
    );

    // A good change is saved and kept across a restart.
    let r = put(&app, "/api/mcp", &json!({"enabled": false})).await;
    assert_eq!(r.status, 200, "{}", r.json);
    let r = put(&app, "/api/audio", &json!({"them_label": "Buyer"})).await;
    assert_eq!(r.status, 200, "{}", r.json);
    assert_eq!(doc(&dir)["sections"]["mcp"]["value"]["enabled"], false);
    app.restart().await;
    let ui = app.ui();
    assert_eq!(ui.get("/api/mcp").await.json["enabled"], false);
    let au = ui.get("/api/audio").await.json;
    assert_eq!(
        (&au["you_label"], &au["them_label"]),
        (&json!("Ada"), &json!("Buyer"))
    );
    let status = app.sigterm().await;
    assert!(status.success(), "{status}");
}

fn ui_token(app: &App) -> String {
    app.ready.ui_token.clone()
}

async fn put(app: &App, path: &str, body: &Value) -> Resp {
    app.ui()
        .request("PUT", path, Some(&ui_token(app)), Some(body))
        .await
}

#[tokio::test]
async fn settings_store_an_unreadable_old_file_is_kept_and_reported() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("mcp.json"), b"{\"enabled\": tru").unwrap();
    std::fs::write(dir.join("tunnel.json"), br#"{"kind": "external", "enabled": true, "url": "https://x.example", "check_interval_secs": 1}"#).unwrap();
    let mut app = App::launch(dir.clone(), Vec::new(), &[]).await;
    let ui = app.ui();
    assert_eq!(
        ui.get("/api/mcp").await.json["enabled"],
        false,
        "the default"
    );
    assert_eq!(
        ui.get("/api/tunnel").await.json["config"]["kind"],
        Value::Null
    );
    let problems = ui.get("/api/settings").await.json["settings_problems"].clone();
    let mut seen: Vec<(String, String)> = problems
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["code"].as_str().unwrap().to_string(),
                p["file"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            (
                "legacy_settings_unreadable".to_string(),
                "mcp.json.unreadable".to_string()
            ),
            (
                "legacy_settings_unreadable".to_string(),
                "tunnel.json.unreadable".to_string()
            ),
        ],
        "{problems}"
    );
    assert_eq!(
        std::fs::read(dir.join("mcp.json.unreadable")).unwrap(),
        b"{\"enabled\": tru",
        "kept as it was"
    );
    let status = app.sigterm().await;
    assert!(status.success(), "{status}");
}
