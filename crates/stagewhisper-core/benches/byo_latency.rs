//! BYO relay benchmark (not a test): the time from a final transcript turn
//! (`POST /api/calls/{id}/transcript`) to its insight in the app's event stream, through the
//! whole BYO path — the outbox, the jobs table, the sealed `live_analysis` job on the SSE stream,
//! a plugin played here that opens it and answers at once with a sealed result over loopback
//! HTTP, the result's check (envelope, replay guard, JSON Schema), and the conversation.
//!
//! `cargo bench -p stagewhisper-core --bench byo_latency [-- --turns 150 --pause-ms 300]`
//!
//! Turns are `--pause-ms` apart (live speech: seconds), more than the outbox's smallest gap
//! between two sends to one assistant session (250 ms by default, for every kind), so each
//! figure is the BYO path itself and not that pacing.

use serde_json::{json, Value};
use stagewhisper_core::assistants::kinds::byo_relay::crypto::{
    public_key_from_b64, Dialect, Envelope, EnvelopeKey, KeyPair, Meta,
};
use stagewhisper_core::{App, Config};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

const H: &str = "/api/v1/assistant-relay";

async fn post(addr: &str, path: &str, token: Option<&str>, body: &Value) -> (u16, Value) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    let body = body.to_string();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let v = text
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (status, v)
}

fn arg(name: &str, default: u64) -> u64 {
    let v: Vec<String> = std::env::args().collect();
    v.iter()
        .position(|a| a == name)
        .and_then(|i| v.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(default)
}

fn pct(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let turns = arg("--turns", 150) as usize;
    let pause = Duration::from_millis(arg("--pause-ms", 300));
    let dir = tempfile::tempdir().unwrap();
    let app = App::start(Config::new(dir.path().to_path_buf()))
        .await
        .unwrap();
    let addr = app.callback_url.trim_start_matches("http://").to_string();
    let (s, _) = app
        .api
        .dispatch(&hyper::Method::PUT, "/api/assistant", br#"{"kind":"byo"}"#)
        .await;
    assert_eq!(s, 200);
    let (_, code) = app
        .api
        .dispatch(&hyper::Method::POST, "/api/assistant/pairing", b"")
        .await;
    let keys = KeyPair::generate();
    let (s, paired) = post(
        &addr,
        &format!("{H}/pair/complete"),
        None,
        &json!({"pairing_code": code["code"], "host_label": "bench", "plugin_public_key": keys.public_b64()}),
    )
    .await;
    assert_eq!(s, 200, "{paired}");
    let desktop = public_key_from_b64(paired["byo_public_key"].as_str().unwrap()).unwrap();
    let key = EnvelopeKey::derive(&keys, &desktop).unwrap();
    let token = paired["relay_token"].as_str().unwrap().to_string();
    let id = paired["integration_id"].as_str().unwrap().to_string();

    // The plugin: reads the stream, answers each job at once (sealed; the probe in clear).
    {
        let addr = addr.clone();
        let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let req = format!(
            "GET {H}/integrations/{id}/stream HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"
        );
        s.write_all(req.as_bytes()).await.unwrap();
        tokio::spawn(async move {
            let mut rd = BufReader::new(s);
            let mut line = String::new();
            loop {
                line.clear();
                if rd.read_line(&mut line).await.unwrap_or(0) == 0 {
                    return;
                }
                let Some(j) = line.trim_end().strip_prefix("data: ") else {
                    continue;
                };
                let ev: Value = serde_json::from_str(j).unwrap();
                let path = format!(
                    "{H}/reasoning-jobs/{}/complete",
                    ev["job_id"].as_str().unwrap_or("")
                );
                let body = if ev["purpose"] == "live_analysis" {
                    let env = Envelope::from_value(&ev["payload"]["envelope"]).unwrap();
                    let input: Value = serde_json::from_slice(
                        &key.open_from(&env, Dialect::Hermes, "desktop").unwrap(),
                    )
                    .unwrap();
                    let last = input["transcript"]
                        .as_str()
                        .unwrap()
                        .lines()
                        .last()
                        .unwrap_or("")
                        .to_string();
                    let marker = last.rsplit(' ').next().unwrap_or("").to_string();
                    let mut nonce = [0u8; 24];
                    rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut nonce);
                    let out = key
                        .seal_with_nonce(
                            "plugin",
                            &uuid::Uuid::new_v4().to_string(),
                            &nonce,
                            &Meta {
                                session_id: &env.session_id,
                                correlation_id: &env.correlation_id,
                                content_type: "reasoning_output",
                            },
                            json!({"insight": format!("Answer {marker}")})
                                .to_string()
                                .as_bytes(),
                        )
                        .unwrap();
                    json!({"status": "completed", "output": {"byo_encrypted": true, "envelope": out, "status": "completed"}})
                } else if ev["purpose"] == "capability_probe" {
                    json!({"status": "completed", "output": {"raw_description": "bench plugin"}})
                } else {
                    continue;
                };
                let (addr, token) = (addr.clone(), token.clone());
                tokio::spawn(async move {
                    let (s, v) = post(&addr, &path, Some(&token), &body).await;
                    assert_eq!(s, 200, "{v}");
                });
            }
        });
    }

    let (_, call) = app
        .api
        .dispatch(&hyper::Method::POST, "/api/calls", br#"{"title":"bench"}"#)
        .await;
    let call = call["session_id"].as_str().unwrap().to_string();
    let store = app.conversation.store().clone();
    let mut sub = app
        .conversation
        .hub()
        .subscribe(store.clone(), store.last_event_id().await.unwrap());
    let warm = 20.min(turns / 5);
    let mut ms = Vec::with_capacity(turns);
    for i in 0..turns + warm {
        tokio::time::sleep(pause).await;
        let marker = format!("m{i}x");
        let body = json!({"text": format!("turn number {marker}"), "speaker": "A"}).to_string();
        let t0 = Instant::now();
        let (s, v) = app
            .api
            .dispatch(
                &hyper::Method::POST,
                &format!("/api/calls/{call}/transcript"),
                body.as_bytes(),
            )
            .await;
        assert_eq!(s, 201, "{v}");
        let want = format!("Answer {marker}");
        loop {
            let e = tokio::time::timeout(Duration::from_secs(30), sub.next())
                .await
                .expect("the insight in time")
                .unwrap();
            if e.json.contains(&want) {
                break;
            }
        }
        if i >= warm {
            ms.push(t0.elapsed().as_secs_f64() * 1000.0);
        }
    }
    ms.sort_by(|a, b| a.partial_cmp(b).unwrap());
    println!(
        "byo turn → insight ({turns} turns {} ms apart, one call, plugin answering at once): p50 {:.2} ms  p99 {:.2} ms  max {:.2} ms",
        pause.as_millis(),
        pct(&ms, 0.5),
        pct(&ms, 0.99),
        ms[ms.len() - 1]
    );
    app.shutdown().await;
}
