//! The desktop window: a thin Tauri shell over the core. Wiring only — the rules live in the
//! core.
//!
//! - The core starts exactly as in headless mode (callback listener + control API/web UI on
//!   loopback, so a browser can be pointed at it too) and the same `ready` line is printed.
//! - The window's web UI calls the control API in-process ([`commands::api`]), catches up with
//!   [`commands::events_since`], and receives every committed event as a `sw-event` Tauri event
//!   whose payload is the JSON object of an SSE `data:` line ([`forward_events`]).
//! - Closing the window, SIGINT or SIGTERM all end the event loop; then the core shuts down
//!   gracefully (in-flight callbacks finish) and the process exits 0.

use crate::commands::{self, Shell};
use anyhow::Context;
use serde_json::Value;
use stagewhisper_cli::{start_core, Signals};
use stagewhisper_core::events::Subscription;
use stagewhisper_core::http::Shutdown;
use stagewhisper_core::Config;
use std::time::Duration;
use tauri::Emitter;

/// The Tauri event that carries one event of the log to the window.
pub const SW_EVENT: &str = "sw-event";

pub fn run(rt: tokio::runtime::Runtime, config: Config, signals: Signals) -> anyhow::Result<()> {
    // Tauri's commands and tasks run on the same runtime as the core.
    tauri::async_runtime::set(rt.handle().clone());
    let app = rt.block_on(start_core(config))?;
    let store = app.conversation.store().clone();
    // Follow the log from its current end: the UI loads state through the API and catches up
    // with `events_since`, so it needs only what is committed from now on.
    let cursor = rt
        .block_on(store.last_event_id())
        .context("cannot read the event log")?;
    let events = app.conversation.hub().subscribe(store.clone(), cursor);
    let stop = app.shutdown_signal();

    let shell = Shell {
        api: app.api.clone(),
        store,
    };

    let window = tauri::Builder::default()
        .manage(shell)
        .invoke_handler(tauri::generate_handler![
            commands::api,
            commands::events_since
        ])
        .setup(move |tauri_app| {
            let handle = tauri_app.handle().clone();
            tauri::async_runtime::spawn(forward_events(events, stop, {
                let handle = handle.clone();
                move |payload| {
                    if let Err(e) = handle.emit(SW_EVENT, payload) {
                        tracing::warn!(error = %e, "cannot emit an event to the window");
                    }
                }
            }));
            tauri::async_runtime::spawn(async move {
                signals.recv().await;
                tracing::info!("signal received; closing the window");
                handle.exit(0);
            });
            Ok(())
        })
        .build(tauri::generate_context!("tauri.conf.json"))
        .context("cannot open the window")?;
    tracing::info!("window open");

    let code = window.run_return(|_, _| {});
    tracing::info!(code, "window closed; shutting down");
    rt.block_on(app.shutdown());
    if code != 0 {
        std::process::exit(code);
    }
    Ok(())
}

/// Hands each committed event (as its JSON object, `id` included) to `emit`, in cursor order,
/// until the core shuts down.
pub async fn forward_events(
    mut events: Subscription,
    stop: Shutdown,
    mut emit: impl FnMut(Value) + Send + 'static,
) {
    loop {
        let next = tokio::select! {
            e = events.next() => e,
            _ = stop.wait() => return,
        };
        match next {
            Ok(e) => match serde_json::from_str::<Value>(&e.json) {
                Ok(payload) => emit(payload),
                Err(err) => tracing::warn!(id = e.id, error = %err, "skipping an unreadable event"),
            },
            Err(err) => {
                tracing::warn!(error = %err, "reading the event log failed; retrying");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stagewhisper_core::App;

    #[tokio::test]
    async fn forwards_committed_events_in_order_until_shutdown() {
        let tmp = tempfile::tempdir().unwrap();
        let app = App::start(Config::new(tmp.path().to_path_buf()))
            .await
            .unwrap();
        let store = app.conversation.store().clone();
        let cursor = store.last_event_id().await.unwrap();
        let events = app.conversation.hub().subscribe(store, cursor);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(forward_events(events, app.shutdown_signal(), move |v| {
            let _ = tx.send(v);
        }));

        let shell = Shell {
            api: app.api.clone(),
            store: app.conversation.store().clone(),
        };
        let r = shell
            .call(
                "POST",
                "/api/sessions",
                Some(&serde_json::json!({"title": "t"})),
            )
            .await;
        assert_eq!(r.status, 201, "{:?}", r.body);
        let sid = r.body["session_id"].as_str().unwrap().to_string();

        let first = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("an event within 10 s")
            .expect("forwarder alive");
        assert_eq!(first["type"], "session_created", "{first}");
        assert_eq!(first["session_id"], sid.as_str(), "{first}");
        assert!(first["id"].as_i64().unwrap() > cursor, "{first}");

        app.shutdown().await;
        tokio::time::timeout(Duration::from_secs(10), task)
            .await
            .expect("the forwarder stops on shutdown")
            .unwrap();
    }
}
