//! Models a person chooses, black-box through the real `stagewhisper-headless` binary: the
//! catalogue is replaced (`STAGEWHISPER_MODEL_CATALOG`) by one whose files a loopback HTTP
//! server in this test serves (Range requests, a connection dropped mid-file once, throttling),
//! so every download is a real HTTP download with the app's own client. The files are generated
//! model-like files (a whisper.cpp header and pseudo-random bytes): the app checks their size
//! and SHA-256, never their weights.
//!
//! - a download's progress events, its resume after the server drops the connection, the
//!   checksum, the atomic install; `409`/`404` refusals; remove;
//! - a file whose SHA-256 is not the pinned one is refused and removed; no server: no network;
//! - resume after the app is killed mid-download; cancel removes what arrived;
//! - disk full (a small tmpfs as the data dir: needs root, else skipped; `SW_REQUIRE_TMPFS=1`
//!   makes that a failure): refused before starting, and stopped when the disk fills during it;
//! - import (`use a file I have`) and the CLI (`models list|download|import|remove`).

#[path = "../../../tests/common/mod.rs"]
mod common;
mod hardening;

use bytes::Bytes;
use common::*;
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::{json, Value};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// The loopback file server
// ---------------------------------------------------------------------------------------------

#[derive(Default)]
struct ServerState {
    files: std::collections::HashMap<String, Vec<u8>>,
    /// Drop the connection once, after this many bytes of a body.
    drop_once_at: Option<u64>,
    /// Sleep this long after every 64 KiB.
    throttle: Option<Duration>,
    /// `(path, range header)` of every request.
    log: Vec<(String, Option<String>)>,
}

#[derive(Clone)]
struct FileServer {
    base: String,
    state: Arc<Mutex<ServerState>>,
}

type Body = BoxBody<Bytes, std::io::Error>;

impl FileServer {
    async fn start() -> FileServer {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(ServerState::default()));
        let st = state.clone();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let st = st.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| {
                        let st = st.clone();
                        async move { Ok::<_, std::convert::Infallible>(serve(&st, req)) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        FileServer { base, state }
    }

    fn put(&self, name: &str, bytes: Vec<u8>) {
        self.state
            .lock()
            .unwrap()
            .files
            .insert(format!("/{name}"), bytes);
    }

    fn set(&self, f: impl FnOnce(&mut ServerState)) {
        f(&mut self.state.lock().unwrap());
    }

    fn log(&self) -> Vec<(String, Option<String>)> {
        self.state.lock().unwrap().log.clone()
    }

    fn url(&self, name: &str) -> String {
        format!("{}/{name}", self.base)
    }
}

fn serve(
    st: &Arc<Mutex<ServerState>>,
    req: hyper::Request<hyper::body::Incoming>,
) -> hyper::Response<Body> {
    let path = req.uri().path().to_string();
    let range = req
        .headers()
        .get("range")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let mut s = st.lock().unwrap();
    s.log.push((path.clone(), range.clone()));
    // `/r/<file>` redirects to `/<file>`, as the model repository sends downloads to its CDN.
    if let Some(rest) = path.strip_prefix("/r/") {
        return hyper::Response::builder()
            .status(302)
            .header("location", format!("/{rest}"))
            .body(Full::new(Bytes::new()).map_err(|e| match e {}).boxed())
            .unwrap();
    }
    let Some(file) = s.files.get(&path).cloned() else {
        return hyper::Response::builder()
            .status(404)
            .body(
                Full::new(Bytes::from_static(b"not found"))
                    .map_err(|e| match e {})
                    .boxed(),
            )
            .unwrap();
    };
    let len = file.len() as u64;
    let start = range
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|r| r.parse::<u64>().ok());
    let mut resp = hyper::Response::builder().header("accept-ranges", "bytes");
    let from = match start {
        Some(n) if n >= len => {
            return resp
                .status(416)
                .header("content-range", format!("bytes */{len}"))
                .body(Full::new(Bytes::new()).map_err(|e| match e {}).boxed())
                .unwrap();
        }
        Some(n) => {
            resp = resp
                .status(206)
                .header("content-range", format!("bytes {n}-{}/{len}", len - 1));
            n
        }
        None => {
            resp = resp.status(200);
            0
        }
    };
    let drop_at = s.drop_once_at.take();
    let throttle = s.throttle;
    drop(s);
    let body = Bytes::from(file).slice(from as usize..);
    let total = body.len();
    let stream = futures_util::stream::unfold(0usize, move |at| {
        let body = body.clone();
        async move {
            if at >= total {
                return None;
            }
            if let Some(t) = throttle {
                tokio::time::sleep(t).await;
            }
            let end = (at + 64 * 1024).min(total);
            if drop_at.is_some_and(|d| (at as u64) >= d) {
                // The connection is cut mid-file (hyper aborts it on a body error).
                return Some((Err(std::io::Error::other("dropped")), total));
            }
            Some((Ok(Frame::data(body.slice(at..end))), end))
        }
    });
    resp.header("content-length", (len - from).to_string())
        .body(BodyExt::boxed(StreamBody::new(stream)))
        .unwrap()
}

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A model-like file: whisper tiny.en's header (the app checks it on import), then bytes.
fn model_like(len: usize, seed: u32) -> Vec<u8> {
    let mut b: Vec<u8> = vec![0x6c, 0x6d, 0x67, 0x67];
    for v in [51_864i32, 1500, 384, 6, 4, 448, 384, 6, 4, 80, 1, 80, 201] {
        b.extend_from_slice(&v.to_le_bytes());
    }
    let mut x = seed.wrapping_mul(2_654_435_761).max(1);
    while b.len() < len {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        b.extend_from_slice(&x.to_le_bytes());
    }
    b.truncate(len);
    b
}

fn sha256(b: &[u8]) -> String {
    hex::encode(Sha256::digest(b))
}

fn entry(name: &str, url: &str, size: usize, sha: &str) -> Value {
    json!({"name": name, "file": format!("ggml-{name}.bin"), "size": size, "sha256": sha,
           "url": url, "languages": "en", "accuracy": "test", "speed": "test"})
}

/// Writes the catalogue into `dir` and answers the environment that points the app at it.
fn catalog(dir: &Path, models: Vec<Value>) -> Vec<(String, String)> {
    let path = dir.join("catalog.json");
    std::fs::write(&path, json!({"models": models}).to_string()).unwrap();
    vec![(
        "STAGEWHISPER_MODEL_CATALOG".into(),
        path.display().to_string(),
    )]
}

async fn launch(data: &Path, env: &[(String, String)]) -> App {
    App::launch(data.to_path_buf(), vec![], env).await
}

/// Every `model_download` event of `name` up to its end (`done`, `failed`, `cancelled`).
async fn until_end(ev: &mut EventStream, name: &str) -> Vec<Value> {
    ev.until(
        &format!("the end of {name}'s download"),
        Duration::from_secs(60),
        |e| {
            let j = e.json();
            e.kind() == "model_download"
                && j["name"] == name
                && matches!(j["state"].as_str(), Some("done" | "failed" | "cancelled"))
        },
    )
    .await
    .into_iter()
    .filter(|e| e.kind() == "model_download" && e.json()["name"] == name)
    .map(|e| e.json())
    .collect()
}

fn model<'a>(list: &'a Value, name: &str) -> &'a Value {
    list["models"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name)
        .unwrap_or_else(|| panic!("{name} not listed: {list}"))
}

fn dir_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_download_progress_resume_after_a_drop_install_and_remove() {
    let server = FileServer::start().await;
    let file = model_like(3 * 1024 * 1024 + 123, 1);
    server.put("a.bin", file.clone());
    server.set(|s| {
        s.drop_once_at = Some(1024 * 1024);
        s.throttle = Some(Duration::from_millis(30));
    });
    let tmp = tempfile::tempdir().unwrap();
    let env = catalog(
        tmp.path(),
        vec![entry(
            "test-a",
            &server.url("a.bin"),
            file.len(),
            &sha256(&file),
        )],
    );
    let data = tmp.path().join("data");
    let app = launch(&data, &env).await;
    let ui = app.ui();
    let list = ui.get("/api/models").await;
    assert_eq!(list.status, 200, "{list}");
    let m = model(&list.json, "test-a");
    assert_eq!(
        (m["installed"].clone(), m["size"].clone()),
        (json!(false), json!(file.len()))
    );
    let mut ev = app.events(SseOpts::live()).await;
    let r = ui.post("/api/models/test-a/download", &json!({})).await;
    assert_eq!(r.status, 202, "{r}");
    assert_eq!(r.json["state"], "downloading");
    assert_error(
        &ui.post("/api/models/test-a/download", &json!({})).await,
        409,
        "download_in_progress",
    );
    let events = until_end(&mut ev, "test-a").await;
    let last = events.last().unwrap();
    assert_eq!(last["state"], "done", "{events:?}");
    let progress: Vec<u64> = events
        .iter()
        .filter(|e| e["state"] == "downloading")
        .map(|e| e["done"].as_u64().unwrap())
        .collect();
    assert!(progress.len() >= 3, "progress events: {progress:?}");
    assert!(progress.windows(2).all(|w| w[0] <= w[1]), "{progress:?}");
    assert!(events.iter().all(|e| e["total"] == json!(file.len())));
    assert!(events.iter().any(|e| e["state"] == "verifying"));
    // The server dropped the connection once; the app asked for the rest with a Range.
    let log = server.log();
    assert_eq!(log.len(), 2, "{log:?}");
    let resumed_at: u64 = log[1]
        .1
        .as_deref()
        .unwrap()
        .trim_start_matches("bytes=")
        .trim_end_matches('-')
        .parse()
        .unwrap();
    assert!(
        resumed_at >= 1024 * 1024 && resumed_at < file.len() as u64,
        "{log:?}"
    );
    // Installed: the very bytes, at the path the list gives, nothing else in the folder.
    let models = data.join("models");
    let list = ui.get("/api/models").await.json;
    let m = model(&list, "test-a");
    assert_eq!(m["installed"], true);
    let path = PathBuf::from(m["path"].as_str().unwrap());
    assert_eq!(path, models.join("ggml-test-a.bin"));
    assert!(std::fs::read(&path).unwrap() == file);
    assert_eq!(dir_files(&models), vec!["ggml-test-a.bin"]);
    assert_eq!(list["disk_used"], json!(file.len()));
    assert_error(
        &ui.post("/api/models/test-a/download", &json!({})).await,
        409,
        "already_installed",
    );
    assert_error(
        &ui.post("/api/models/nope/download", &json!({})).await,
        404,
        "unknown_model",
    );
    let r = ui.delete("/api/models/test-a").await;
    assert_eq!(r.status, 200, "{r}");
    assert!(!path.exists());
    assert_error(&ui.delete("/api/models/test-a").await, 404, "not_installed");
    assert_error(&ui.delete("/api/models/nope").await, 404, "unknown_model");
    assert_error(
        &ui.request(
            "DELETE",
            "/api/models/test-a/download",
            Some(&ui.token),
            None,
        )
        .await,
        404,
        "not_downloading",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_a_wrong_checksum_is_refused_and_removed_and_no_server_is_no_network() {
    let server = FileServer::start().await;
    let file = model_like(512 * 1024, 2);
    server.put("b.bin", file.clone());
    let tmp = tempfile::tempdir().unwrap();
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let env = catalog(
        tmp.path(),
        vec![
            entry(
                "test-b",
                &server.url("b.bin"),
                file.len(),
                &sha256(b"another file"),
            ),
            entry(
                "test-off",
                &format!("http://{dead}/x.bin"),
                1000,
                &sha256(b"x"),
            ),
            entry("test-404", &server.url("missing.bin"), 1000, &sha256(b"x")),
        ],
    );
    let data = tmp.path().join("data");
    let app = launch(&data, &env).await;
    let ui = app.ui();
    let mut ev = app.events(SseOpts::live()).await;
    assert_eq!(
        ui.post("/api/models/test-b/download", &json!({}))
            .await
            .status,
        202
    );
    let events = until_end(&mut ev, "test-b").await;
    let last = events.last().unwrap();
    assert_eq!(
        (last["state"].as_str(), last["error"].as_str()),
        (Some("failed"), Some("checksum_mismatch")),
        "{events:?}"
    );
    assert!(
        last["message"].as_str().unwrap().contains("SHA-256"),
        "{last}"
    );
    // Nothing is left: no part file, no model.
    assert!(
        dir_files(&data.join("models")).is_empty(),
        "{:?}",
        dir_files(&data.join("models"))
    );
    let list = ui.get("/api/models").await.json;
    assert_eq!(model(&list, "test-b")["installed"], false);
    assert_eq!(
        model(&list, "test-b")["download"]["error"],
        "checksum_mismatch"
    );
    // Nothing listens: no network, said at once.
    assert_eq!(
        ui.post("/api/models/test-off/download", &json!({}))
            .await
            .status,
        202
    );
    let last = until_end(&mut ev, "test-off").await.pop().unwrap();
    assert_eq!(last["error"], "network_unavailable", "{last}");
    // The server refuses.
    assert_eq!(
        ui.post("/api/models/test-404/download", &json!({}))
            .await
            .status,
        202
    );
    let last = until_end(&mut ev, "test-404").await.pop().unwrap();
    assert_eq!(last["error"], "server_refused", "{last}");
    assert!(last["message"].as_str().unwrap().contains("404"), "{last}");
    // No byte arrived: no part file is left to resume.
    assert!(
        dir_files(&data.join("models")).is_empty(),
        "{:?}",
        dir_files(&data.join("models"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_resume_after_the_app_is_killed_and_cancel_removes_what_arrived() {
    let server = FileServer::start().await;
    let file = model_like(4 * 1024 * 1024, 3);
    server.put("c.bin", file.clone());
    server.set(|s| s.throttle = Some(Duration::from_millis(40)));
    let tmp = tempfile::tempdir().unwrap();
    let env = catalog(
        tmp.path(),
        vec![entry(
            "test-c",
            &server.url("r/c.bin"),
            file.len(),
            &sha256(&file),
        )],
    );
    let data = tmp.path().join("data");
    let part = data.join("models/ggml-test-c.bin.part");
    let mut app = launch(&data, &env).await;
    let mut ev = app.events(SseOpts::live()).await;
    assert_eq!(
        app.ui()
            .post("/api/models/test-c/download", &json!({}))
            .await
            .status,
        202
    );
    ev.until("a MiB downloaded", Duration::from_secs(30), |e| {
        e.kind() == "model_download" && e.json()["done"].as_u64().unwrap_or(0) >= 1024 * 1024
    })
    .await;
    drop(ev);
    app.kill9();
    let had = std::fs::metadata(&part).unwrap().len();
    assert!(had >= 1024 * 1024 && had < file.len() as u64, "{had}");
    assert!(!data.join("models/ggml-test-c.bin").exists());
    server.set(|s| s.throttle = None);
    let app = launch(&data, &env).await;
    let ui = app.ui();
    let list = ui.get("/api/models").await.json;
    let d = &model(&list, "test-c")["download"];
    assert_eq!(
        (d["state"].as_str(), d["done"].as_u64()),
        (Some("paused"), Some(had)),
        "{list}"
    );
    let mut ev = app.events(SseOpts::live()).await;
    let r = ui.post("/api/models/test-c/download", &json!({})).await;
    assert_eq!((r.status, r.json["done"].as_u64()), (202, Some(had)), "{r}");
    assert_eq!(
        until_end(&mut ev, "test-c").await.pop().unwrap()["state"],
        "done"
    );
    // Through the redirect, the Range is asked of the file itself.
    let log = server.log();
    let n = log.len();
    let want = Some(format!("bytes={had}-"));
    assert_eq!(
        log[n - 2],
        ("/r/c.bin".to_string(), want.clone()),
        "{log:?}"
    );
    assert_eq!(log[n - 1], ("/c.bin".to_string(), want), "{log:?}");
    assert!(std::fs::read(data.join("models/ggml-test-c.bin")).unwrap() == file);
    assert!(!part.exists());
    // Cancel: the download stops and what arrived is removed (while bytes keep coming fast:
    // every 20 ms).
    assert_eq!(ui.delete("/api/models/test-c").await.status, 200);
    server.set(|s| s.throttle = Some(Duration::from_millis(20)));
    assert_eq!(
        ui.post("/api/models/test-c/download", &json!({}))
            .await
            .status,
        202
    );
    ev.until("some bytes", Duration::from_secs(30), |e| {
        e.kind() == "model_download" && e.json()["done"].as_u64().unwrap_or(0) > 0
    })
    .await;
    let r = ui
        .request(
            "DELETE",
            "/api/models/test-c/download",
            Some(&ui.token),
            None,
        )
        .await;
    assert_eq!(
        (r.status, r.json["state"].as_str()),
        (200, Some("cancelled")),
        "{r}"
    );
    assert!(
        dir_files(&data.join("models")).is_empty(),
        "{:?}",
        dir_files(&data.join("models"))
    );
    assert_eq!(
        until_end(&mut ev, "test-c").await.pop().unwrap()["state"],
        "cancelled"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_disk_full_before_and_during_a_download() {
    if let Some(why) = hardening::cannot_mount() {
        return hardening::skip(&why);
    }
    let fs = hardening::Tmpfs::mount(24).expect("tmpfs");
    let server = FileServer::start().await;
    let file = model_like(12 * 1024 * 1024, 4);
    server.put("d.bin", file.clone());
    server.set(|s| s.throttle = Some(Duration::from_millis(30)));
    let tmp = tempfile::tempdir().unwrap();
    let env = catalog(
        tmp.path(),
        vec![
            entry("test-d", &server.url("d.bin"), file.len(), &sha256(&file)),
            entry(
                "test-huge",
                &server.url("d.bin"),
                64 * 1024 * 1024,
                &sha256(&file),
            ),
        ],
    );
    let data = fs.path().join("data");
    let app = launch(&data, &env).await;
    let ui = app.ui();
    // Not enough room to start: refused at once, nothing requested.
    assert_error(
        &ui.post("/api/models/test-huge/download", &json!({})).await,
        507,
        "disk_full",
    );
    assert!(server.log().is_empty());
    // The disk fills while it runs: stopped, the part file removed, the app still answers.
    let mut ev = app.events(SseOpts::live()).await;
    assert_eq!(
        ui.post("/api/models/test-d/download", &json!({}))
            .await
            .status,
        202
    );
    ev.until("some bytes", Duration::from_secs(30), |e| {
        e.kind() == "model_download" && e.json()["done"].as_u64().unwrap_or(0) > 0
    })
    .await;
    let filler = fs.path().join("filler");
    hardening::fill(&filler, u64::MAX);
    let last = until_end(&mut ev, "test-d").await.pop().unwrap();
    assert_eq!(
        (last["state"].as_str(), last["error"].as_str()),
        (Some("failed"), Some("disk_full")),
        "{last}"
    );
    assert!(!data.join("models/ggml-test-d.bin.part").exists());
    assert!(!data.join("models/ggml-test-d.bin").exists());
    std::fs::remove_file(&filler).unwrap();
    let list = ui.get("/api/models").await;
    assert_eq!(list.status, 200, "{list}");
    assert_eq!(model(&list.json, "test-d")["installed"], false);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_import_a_file_and_the_cli() {
    let server = FileServer::start().await;
    let file = model_like(700 * 1024, 5);
    server.put("e.bin", file.clone());
    let tmp = tempfile::tempdir().unwrap();
    let env = catalog(
        tmp.path(),
        vec![entry(
            "test-e",
            &server.url("e.bin"),
            file.len(),
            &sha256(&file),
        )],
    );
    let data = tmp.path().join("data");
    let mine = tmp.path().join("ggml-my own.bin");
    std::fs::write(&mine, model_like(300 * 1024, 6)).unwrap();
    let junk = tmp.path().join("junk.bin");
    std::fs::write(&junk, vec![1u8; 300 * 1024]).unwrap();
    let app = launch(&data, &env).await;
    let ui = app.ui();
    let r = ui
        .post(
            "/api/models/import",
            &json!({"path": mine.display().to_string()}),
        )
        .await;
    assert_eq!(r.status, 201, "{r}");
    assert_eq!(
        (
            r.json["name"].as_str(),
            r.json["installed"].as_bool(),
            r.json["known"].as_bool()
        ),
        (Some("my-own"), Some(true), Some(false))
    );
    assert!(
        std::fs::read(data.join("models/ggml-my-own.bin")).unwrap()
            == std::fs::read(&mine).unwrap()
    );
    for (body, status, code) in [
        (
            json!({"path": mine.display().to_string()}),
            409,
            "model_exists",
        ),
        (
            json!({"path": mine.display().to_string(), "name": "test-e"}),
            409,
            "name_taken",
        ),
        (
            json!({"path": junk.display().to_string()}),
            400,
            "invalid_model_file",
        ),
        (json!({"path": "/no/such/file.bin"}), 400, "file_not_found"),
        (json!({"path": "relative.bin"}), 400, "file_not_found"),
        (
            json!({"path": mine.display().to_string(), "name": "../x"}),
            400,
            "invalid_name",
        ),
        (json!({}), 400, "missing_field"),
    ] {
        assert_error(&ui.post("/api/models/import", &body).await, status, code);
    }
    assert_eq!(dir_files(&data.join("models")), vec!["ggml-my-own.bin"]);
    let list = ui.get("/api/models").await.json;
    assert_eq!(model(&list, "my-own")["languages"], "en");
    assert_eq!(list["disk_used"], json!(300 * 1024));
    // The CLI on the same data dir (the app may run meanwhile).
    let cli = |args: &[&str]| {
        let mut c = std::process::Command::new(bin());
        c.arg("--data-dir").arg(&data).arg("models").args(args);
        for (k, v) in &env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let o = cli(&["download", "test-e"]);
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{err}");
    assert_eq!(
        out.trim(),
        data.join("models/ggml-test-e.bin").display().to_string()
    );
    assert!(err.contains("test-e: done"), "{err}");
    assert!(std::fs::read(data.join("models/ggml-test-e.bin")).unwrap() == file);
    let o = cli(&["list", "--format", "json"]);
    let l: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(model(&l, "test-e")["installed"], true);
    assert_eq!(model(&l, "test-e")["languages"], "en");
    assert_eq!(
        model(&l, "my-own")["path"],
        json!(data.join("models/ggml-my-own.bin").display().to_string())
    );
    let o = cli(&["import", junk.to_str().unwrap(), "--name", "junk"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&o.stderr).starts_with("stagewhisper models: invalid_model_file: ")
    );
    let o = cli(&["import", mine.to_str().unwrap(), "--name", "second"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    for name in ["second", "test-e", "my-own"] {
        assert!(cli(&["remove", name]).status.success(), "{name}");
    }
    let o = cli(&["remove", "second"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("unknown_model"));
    let o = cli(&["download", "nope"]);
    assert!(String::from_utf8_lossy(&o.stderr).contains("stagewhisper models: unknown_model: "));
    assert!(dir_files(&data.join("models")).is_empty());
    let list = ui.get("/api/models").await.json;
    assert_eq!(list["disk_used"], 0);
}

/// The speaker model on the shelf (`speakers`): listed apart from the speech models, downloaded
/// from the catalogue's `speakers` entry (a loopback server here, sherpa-onnx's release in a real
/// install), its SHA-256 checked, put at `models/speakers/campplus.onnx`; a wrong file is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn models_the_speaker_model_is_downloaded_checked_and_removed() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let file = std::fs::read(root.join("tests/fixtures/speakers/campplus-fp16w.onnx")).unwrap();
    let server = FileServer::start().await;
    server.put("campplus.onnx", file.clone());
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("catalog.json");
    let speakers = |sha: &str| {
        json!({"name": "speakers", "file": "campplus.onnx", "size": file.len(), "sha256": sha,
               "url": server.url("campplus.onnx"), "languages": "multilingual"})
    };
    let write = |sha: &str| {
        std::fs::write(
            &path,
            json!({"models": [], "speakers": speakers(sha)}).to_string(),
        )
        .unwrap()
    };
    write(&"0".repeat(64));
    let env = vec![(
        "STAGEWHISPER_MODEL_CATALOG".to_string(),
        path.display().to_string(),
    )];
    let data = tmp.path().join("data");
    let app = launch(&data, &env).await;
    let ui = app.ui();
    let list = ui.get("/api/models").await;
    assert_eq!(list.json["speakers"]["installed"], false, "{list}");
    assert_eq!(list.json["speakers"]["size"], json!(file.len()), "{list}");
    assert!(list.json["models"].as_array().unwrap().is_empty(), "{list}");
    // A file that does not hash to the pinned value is refused and removed.
    let mut ev = app.events(SseOpts::live()).await;
    let r = ui.post("/api/models/speakers/download", &json!({})).await;
    assert_eq!(r.status, 202, "{r}");
    let last = until_end(&mut ev, "speakers").await.pop().unwrap();
    assert_eq!(
        (last["state"].as_str(), last["error"].as_str()),
        (Some("failed"), Some("checksum_mismatch"))
    );
    assert!(dir_files(&data.join("models/speakers")).is_empty());
    // The right hash: installed where the app looks for it.
    write(&sha256(&file));
    drop(app);
    let app = launch(&data, &env).await;
    let ui = app.ui();
    let mut ev = app.events(SseOpts::live()).await;
    let r = ui.post("/api/models/speakers/download", &json!({})).await;
    assert_eq!(r.status, 202, "{r}");
    let last = until_end(&mut ev, "speakers").await.pop().unwrap();
    assert_eq!(last["state"], "done", "{last}");
    let target = data.join("models/speakers/campplus.onnx");
    assert_eq!(std::fs::read(&target).unwrap(), file);
    let list = ui.get("/api/models").await;
    assert_eq!(list.json["speakers"]["installed"], true, "{list}");
    let r = ui.get("/api/audio").await;
    let detail = r.json["speakers"]["detail"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(!detail.contains("no speaker model"), "{r}");
    assert_error(
        &ui.post("/api/models/speakers/download", &json!({})).await,
        409,
        "already_installed",
    );
    let r = ui.delete("/api/models/speakers").await;
    assert_eq!(r.status, 200, "{r}");
    assert!(!target.exists());
}
