//! Build script of the app package: runs the Tauri build helpers on `tauri.conf.json` (beside
//! the root `Cargo.toml`) with the app's own command permissions (`src-tauri/permissions/`).
//!
//! `tauri::generate_context!` embeds `frontendDist` (`ui/dist`) at compile time and fails when the
//! folder is missing. So that plain `cargo build` / `cargo test` work on a fresh checkout without
//! the web UI built, a missing `ui/dist/index.html` is replaced by a placeholder page (in
//! `OUT_DIR`, never in the source tree) with a warning. Build the UI first for a real window:
//! `npm --prefix ui ci && npm --prefix ui run build`.

use std::path::PathBuf;

const PERMISSIONS: &str = "src-tauri/permissions";
const UI_INDEX: &str = "ui/dist/index.html";

const PLACEHOLDER: &str = r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>StageWhisper</title></head>
<body><p>The web UI was not built when this binary was compiled.
Run <code>npm --prefix ui ci &amp;&amp; npm --prefix ui run build</code>, then rebuild.</p></body></html>
"#;

fn main() {
    let manifest_dir =
        PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    println!("cargo:rerun-if-changed={PERMISSIONS}");
    // Cargo reruns this script when the UI build writes ui/dist/index.html, so a placeholder
    // build gets the real UI at the next build.
    println!("cargo:rerun-if-changed={UI_INDEX}");
    if !manifest_dir.join(UI_INDEX).is_file() {
        use_placeholder_ui();
    }
    let attributes = tauri_build::Attributes::new()
        .config_path(manifest_dir.join("tauri.conf.json"))
        .app_manifest(
            tauri_build::AppManifest::new()
                .permissions_path_pattern("src-tauri/permissions/*.toml"),
        );
    if let Err(e) = tauri_build::try_build(attributes) {
        panic!("tauri-build failed: {e:#}");
    }
}

/// Points `frontendDist` at a one-page placeholder for this compilation (a `TAURI_CONFIG` JSON
/// merge seen by `generate_context!`), keeping any merge the Tauri CLI already passes.
fn use_placeholder_ui() {
    let out =
        PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets it")).join("placeholder-ui");
    std::fs::create_dir_all(&out).expect("create the placeholder UI folder");
    std::fs::write(out.join("index.html"), PLACEHOLDER).expect("write the placeholder UI");
    println!(
        "cargo:warning={UI_INDEX} is missing: the window will show a placeholder page (build the UI: npm --prefix ui run build)"
    );
    let mut merge: serde_json::Value = std::env::var("TAURI_CONFIG")
        .ok()
        .and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_else(|| serde_json::json!({}));
    merge["build"]["frontendDist"] = out.to_str().expect("OUT_DIR is UTF-8").into();
    println!("cargo:rustc-env=TAURI_CONFIG={merge}");
}
