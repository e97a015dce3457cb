//! Black-box tests of the `stagewhisper-headless` binary, with the same harness as the app's own
//! black-box tests (`tests/common/` at the repository root): it starts, prints the ready line,
//! stores a callback, serves the UI, shuts down gracefully, and neither links nor loads the window
//! toolkit (WebKitGTK, JavaScriptCore, GTK, GDK, libsoup).

#[path = "../../../tests/common/mod.rs"]
mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

/// Libraries of the window toolkit; none may be linked or mapped.
const WINDOW_LIBS: &[&str] = &["webkit", "javascriptcore", "libgtk", "libgdk", "libsoup"];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("crates/<name> inside the repository")
        .to_path_buf()
}

fn window_libs_in(text: &str) -> Vec<String> {
    text.lines()
        .filter(|l| {
            let l = l.to_ascii_lowercase();
            WINDOW_LIBS.iter().any(|w| l.contains(w))
        })
        .map(|l| l.trim().to_owned())
        .collect()
}

#[tokio::test]
async fn starts_stores_a_callback_serves_the_ui_and_stops() {
    let mut app = App::start().await;
    let ready = app.ready.clone();
    assert_eq!(
        ready.json.as_object().map(|o| {
            let mut k: Vec<&str> = o.keys().map(String::as_str).collect();
            k.sort();
            k
        }),
        Some(vec![
            "callback_token",
            "callback_url",
            "data_dir",
            "event",
            "ui_token",
            "ui_url"
        ]),
        "the same ready line as `stagewhisper --headless`: {}",
        ready.line
    );
    assert_eq!(ready.data_dir, app.data_dir);

    // A callback with the token is stored and listed; a wrong token is refused.
    let chat = app.create_chat().await;
    let task = new_id();
    let mid = new_id();
    let r = app
        .post(&message(
            &chat,
            &task,
            &mid,
            "Hello from the headless build",
        ))
        .await;
    assert_applied(&r);
    let r = app
        .post(&message(
            &chat,
            &task,
            &mid,
            "Hello from the headless build",
        ))
        .await;
    assert!(
        r.status == 200 && r.is_duplicate(),
        "a retry is a duplicate: {r}"
    );
    let r = app
        .cb()
        .with_token("not-the-token-0123456789")
        .post(&message(&chat, &new_id(), &new_id(), "intruder"))
        .await;
    assert_error(&r, 401, "unauthorized");
    let msgs = app.messages(&chat).await;
    assert_eq!(
        texts(&msgs),
        vec!["Hello from the headless build".to_owned()]
    );
    assert_eq!(msgs[0]["message_id"], mid.as_str());

    // The UI: the built one beside the binary's workspace when there is one, else the fallback.
    let page = app.ui().request("GET", "/", None, None).await;
    assert_eq!(page.status, 200, "{page}");
    assert!(
        page.header("content-type")
            .is_some_and(|t| t.starts_with("text/html")),
        "{page}"
    );
    let built = repo_root().join("ui").join("dist").join("index.html");
    match std::fs::read_to_string(&built) {
        Ok(index) => assert_eq!(page.text, index, "GET / serves ui/dist/index.html"),
        Err(_) => assert!(
            page.text.contains("The web UI is not built"),
            "without ui/dist the fallback page: {page}"
        ),
    }

    // Durable across a graceful restart.
    app.restart().await;
    assert_eq!(app.messages(&chat).await, msgs);

    let status = app.sigterm().await;
    assert_eq!(status.code(), Some(0), "{}", app.stderr_tail());
}

/// The built UI's files as a browser gets them: gzipped when asked, the hashed bundles cached
/// for good, the index revalidated (`ETag`, `304`).
#[tokio::test]
async fn serves_the_ui_gzipped_and_cached() {
    let dist = repo_root().join("ui").join("dist");
    let Ok(index) = std::fs::read_to_string(dist.join("index.html")) else {
        // `./run-tests` builds the UI first; a bare `cargo test` may run without it.
        eprintln!("skipped: ui/dist is not built");
        return;
    };
    let app = App::start().await;
    let http = reqwest::Client::new();
    let get = |path: &str, headers: &[(&str, &str)]| {
        let mut req = http.get(format!("{}{path}", app.ready.ui_url));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        req.send()
    };
    let script = index
        .split('"')
        .find(|s| s.starts_with("./assets/") && s.ends_with(".js"))
        .expect("index.html names its script")
        .trim_start_matches('.')
        .to_owned();
    let raw = std::fs::read(dist.join(script.trim_start_matches('/'))).unwrap();

    // Asked for gzip: a gzip body that inflates to the file, cached for a year.
    let r = get(&script, &[("accept-encoding", "gzip, deflate, br")])
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let h = r.headers().clone();
    assert_eq!(h["content-encoding"], "gzip");
    assert_eq!(h["vary"], "accept-encoding");
    assert_eq!(h["cache-control"], "public, max-age=31536000, immutable");
    let body = r.bytes().await.unwrap();
    let mut inflated = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(&body[..]), &mut inflated)
        .unwrap();
    assert_eq!(inflated, raw, "the gzip body is the file");
    assert!(
        body.len() * 2 < raw.len(),
        "at most half the bytes: {} of {}",
        body.len(),
        raw.len()
    );

    // Not asked (or refused with q=0): the file as it is.
    for accept in [None, Some("gzip;q=0, identity")] {
        let headers: Vec<(&str, &str)> =
            accept.map(|a| ("accept-encoding", a)).into_iter().collect();
        let r = get(&script, &headers).await.unwrap();
        assert!(r.headers().get("content-encoding").is_none(), "{accept:?}");
        assert_eq!(r.bytes().await.unwrap(), raw, "{accept:?}");
    }

    // The index is revalidated each time: no-cache, an ETag, 304 when unchanged.
    let r = get("/", &[]).await.unwrap();
    assert_eq!(r.headers()["cache-control"], "no-cache");
    let etag = r.headers()["etag"].to_str().unwrap().to_owned();
    assert_eq!(r.text().await.unwrap(), index);
    let r = get("/", &[("if-none-match", &etag)]).await.unwrap();
    assert_eq!(r.status(), 304);
    assert!(r.bytes().await.unwrap().is_empty());
    let r = get("/", &[("if-none-match", "\"something-else\"")])
        .await
        .unwrap();
    assert_eq!(r.status(), 200);

    // The favicon the page names is served.
    let r = get("/favicon.svg", &[]).await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["content-type"], "image/svg+xml");
    assert!(index.contains("favicon.svg"));
}

#[test]
fn does_not_link_the_window_toolkit() {
    match Command::new("ldd").arg(bin()).output() {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "ldd {} failed: {text}", bin());
            assert!(
                text.contains("libc.so"),
                "ldd lists the binary's libraries: {text}"
            );
            let found = window_libs_in(&text);
            assert!(found.is_empty(), "window toolkit linked: {found:?}\n{text}");
        }
        Err(e) => {
            eprintln!("SKIPPED the ldd check: cannot run `ldd` ({e}); the maps check still runs")
        }
    }
}

#[tokio::test]
async fn does_not_load_the_window_toolkit_at_run_time() {
    let app = App::start().await;
    let maps = std::fs::read_to_string(format!("/proc/{}/maps", app.pid()))
        .expect("/proc/PID/maps (Linux)");
    assert!(maps.contains("libc"), "maps lists the mapped files: {maps}");
    let found = window_libs_in(&maps);
    assert!(found.is_empty(), "window toolkit mapped: {found:?}");
}

#[test]
fn has_the_flags_and_the_subcommand_of_stagewhisper() {
    let out = Command::new(bin()).arg("--help").output().expect("--help");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    assert!(help.contains("stagewhisper-headless"), "{help}");
    for flag in [
        "--headless",
        "--data-dir",
        "--callback-listen",
        "--ui-listen",
        "--typing-timeout-secs",
        "--insights-grace-secs",
        "--ui-dir",
        "--durability",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help:\n{help}");
    }
    assert!(help.contains("transcript"), "{help}");

    let out = Command::new(bin())
        .args(["transcript", "replay", "--help"])
        .output()
        .expect("transcript replay --help");
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for flag in ["--session", "--speed", "--ui-url", "--ui-token"] {
        assert!(help.contains(flag), "{flag} missing:\n{help}");
    }

    // A replay with nothing to read fails with its own message and exit code 1.
    let empty = tempfile::tempdir().unwrap();
    let out = Command::new(bin())
        .args(["transcript", "replay", "--session", "s", "--speed", "0"])
        .arg(empty.path().join("missing.vtt"))
        .arg("--data-dir")
        .arg(empty.path())
        .output()
        .expect("transcript replay");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("stagewhisper transcript replay: "), "{err}");
}
