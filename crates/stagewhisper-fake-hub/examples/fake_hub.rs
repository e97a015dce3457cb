//! Test-only: serves the conformance fake of the clawborrator hub (this crate, written from the
//! hub's AsyncAPI; no real hub can run in the tests) on a loopback port, for the browser tests.
//! Not a shipped binary: an example of a dev-only crate.
//!
//!   cargo run -p stagewhisper-fake-hub --example fake_hub
//!
//! Prints one JSON line `{"url", "session_id", "token"}` on stdout, then reads commands, one
//! JSON object a line, on stdin, and answers each with one JSON line:
//! - `{"cmd":"permission","request_id","tool","input_preview"}` → a permission request;
//! - `{"cmd":"reply","chat_id"?,"text"}` → a reply;
//! - `{"cmd":"resolve","request_id","decision","resolver"?}` → resolved by another operator;
//! - `{"cmd":"frames"}` → `{"frames":[…]}`, every frame the hub got on `/cli`.
//!
//! It stops when stdin closes.

use serde_json::{json, Value};
use stagewhisper_fake_hub::{FakeHub, FakeHubConfig};
use std::io::BufRead;

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let hub = FakeHub::start(FakeHubConfig::default()).await;
    println!(
        "{}",
        json!({"url": hub.url(), "session_id": hub.session_id(), "token": "cw_sess_ana"})
    );
    // stdin on a thread of its own (the crate's tokio has no `io-std`).
    let (tx, mut lines) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    while let Some(line) = lines.recv().await {
        let Ok(v) = serde_json::from_str::<Value>(&line) else {
            println!("{}", json!({"ok": false, "error": "not JSON"}));
            continue;
        };
        let s = |k: &str| v[k].as_str().unwrap_or_default().to_string();
        let answer = match v["cmd"].as_str().unwrap_or_default() {
            "permission" => {
                hub.request_permission(&s("request_id"), &s("tool"), &s("input_preview"));
                json!({"ok": true})
            }
            "reply" => {
                hub.reply(v["chat_id"].as_str(), &s("text"));
                json!({"ok": true})
            }
            "resolve" => match s("decision").as_str() {
                d @ ("allow" | "deny" | "expired") => {
                    json!({"ok": hub.resolve_permission(&s("request_id"), d, v["resolver"].as_str())})
                }
                other => json!({"ok": false, "error": format!("unknown decision {other:?}")}),
            },
            "frames" => json!({"ok": true, "frames": hub.cli_frames()}),
            other => json!({"ok": false, "error": format!("unknown command {other:?}")}),
        };
        println!("{answer}");
    }
}
