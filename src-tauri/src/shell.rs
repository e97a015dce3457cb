//! The desktop window: a thin Tauri shell over the core. Wiring only — the rules live in the
//! core.
//!
//! - The core starts exactly as in headless mode (callback listener + control API/web UI on
//!   loopback, so a browser can be pointed at it too) and the same `ready` line is printed.
//! - The window's web UI calls the control API in-process ([`commands::api`]), catches up with
//!   [`commands::events_since`], and receives every committed event as a `sw-event` Tauri event
//!   whose payload is the JSON object of an SSE `data:` line ([`forward_events`]).
//! - Closing the main window, SIGINT or SIGTERM all end the event loop; then the core shuts down
//!   gracefully (in-flight callbacks finish) and the process exits 0.
//! - Desktop extras ([`desktop`]): the compact overlay window, the global shortcut, system
//!   notifications, links to the system browser, one running instance, window places kept.

use crate::commands::{self, Shell};
use crate::desktop::{self, Desktop};
use anyhow::Context;
use serde_json::Value;
use stagewhisper_cli::{start_core, Signals};
use stagewhisper_core::events::{Change, Subscription};
use stagewhisper_core::http::Shutdown;
use stagewhisper_core::Config;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tauri::{Emitter, Manager, RunEvent, WindowEvent};
use tauri_plugin_window_state::{AppHandleExt, StateFlags};

/// What is kept of each window between runs (not its visibility: the overlay opens on demand).
const WINDOW_STATE: StateFlags = StateFlags::SIZE
    .union(StateFlags::POSITION)
    .union(StateFlags::MAXIMIZED);

/// The Tauri event that carries one event of the log to the window.
pub const SW_EVENT: &str = "sw-event";

/// Builds the window, starts the core, runs the event loop until the main window closes or a
/// signal arrives, then shuts the core down gracefully.
pub fn run(
    rt: tokio::runtime::Runtime,
    config: Config,
    signals: Signals,
    context: tauri::Context<tauri::Wry>,
) -> anyhow::Result<()> {
    // Tauri's commands and tasks run on the same runtime as the core.
    tauri::async_runtime::set(rt.handle().clone());
    let started: StartedSlot = Arc::new(Mutex::new(None));
    let window = build_window(context, started.clone())?;

    let app = rt.block_on(start_core(config))?;
    let store = app.conversation.store().clone();
    // Follow the log from its current end: the UI loads state through the API and catches up
    // with `events_since`, so it needs only what is committed from now on.
    let cursor = rt
        .block_on(store.last_event_id())
        .context("cannot read the event log")?;
    let events = app.conversation.hub().subscribe(store.clone(), cursor);
    *started.lock().expect("setup slot") = Some((events, app.shutdown_signal(), signals));
    window.manage(Shell {
        api: app.api.clone(),
        store,
    });
    window.manage(Desktop::load(app.settings.clone()));

    let code = window.run_return(on_run_event);
    tracing::info!(code, "window closed; shutting down");
    rt.block_on(app.shutdown());
    if code != 0 {
        std::process::exit(code);
    }
    Ok(())
}

/// What the setup (on the event loop's start) needs from the core, which starts after the
/// single-instance check of [`build_window`] and before the loop.
type Started = (Subscription, Shutdown, Signals);
type StartedSlot = Arc<Mutex<Option<Started>>>;

/// The app with its plugins and commands. The single-instance plugin comes first: a second
/// launch hands its arguments to the running app (which focuses its window) and exits inside
/// `build`, before touching the data folder. Without a session bus it cannot find the first
/// one and the data folder's lock refuses the second launch instead.
fn build_window(
    context: tauri::Context<tauri::Wry>,
    started: StartedSlot,
) -> anyhow::Result<tauri::App> {
    tauri::Builder::default()
        .plugin(tauri_plugin_single_instance::init(|app, _argv, _cwd| {
            tracing::info!("another launch of the app: focusing this one");
            desktop::focus_main(app);
        }))
        .plugin(
            tauri_plugin_window_state::Builder::new()
                .with_state_flags(WINDOW_STATE)
                .build(),
        )
        .plugin(
            tauri_plugin_global_shortcut::Builder::new()
                .with_handler(|app, shortcut, e| desktop::on_shortcut(app, shortcut, e.state()))
                .build(),
        )
        .plugin(tauri_plugin_notification::init())
        .plugin(tauri_plugin_opener::init())
        .invoke_handler(tauri::generate_handler![
            commands::api,
            commands::events_since,
            desktop::overlay_toggle,
            desktop::overlay_show,
            desktop::overlay_hide,
            desktop::main_focus,
            desktop::desktop_prefs,
            desktop::set_desktop_prefs,
        ])
        .setup(move |tauri_app| on_setup(tauri_app, &started))
        .build(context)
        .context("cannot open the window")
}

/// On the event loop's start: the main window, the desktop extras, the core's events forwarded
/// to the window, and a signal closing the app.
fn on_setup(
    tauri_app: &mut tauri::App,
    started: &StartedSlot,
) -> Result<(), Box<dyn std::error::Error>> {
    let (events, stop, signals) = started
        .lock()
        .expect("setup slot")
        .take()
        .expect("the core started before the event loop");
    let handle = tauri_app.handle().clone();
    desktop::open_main(&handle)?;
    desktop::start(&handle);
    tauri::async_runtime::spawn(forward_events(events, stop, {
        let handle = handle.clone();
        move |payload, change| {
            if let Err(e) = handle.emit(SW_EVENT, &payload) {
                tracing::warn!(error = %e, "cannot emit an event to the window");
            }
            desktop::on_event(&handle, change);
        }
    }));
    tauri::async_runtime::spawn(async move {
        signals.recv().await;
        tracing::info!("signal received; closing the window");
        handle.exit(0);
    });
    tracing::info!("window open");
    Ok(())
}

fn on_run_event(handle: &tauri::AppHandle, event: RunEvent) {
    match event {
        // The main window closing ends the app (the overlay alone does not keep it running).
        RunEvent::WindowEvent {
            label,
            event: WindowEvent::CloseRequested { .. },
            ..
        } if label == desktop::MAIN => {
            // The windows' places, while both still exist (the plugin saves again at exit).
            if let Err(e) = handle.save_window_state(WINDOW_STATE) {
                tracing::warn!(error = %e, "cannot save the window places");
            }
            handle.exit(0)
        }
        // The overlay's close hides it (its place is kept for the next time).
        RunEvent::WindowEvent {
            label,
            event: WindowEvent::CloseRequested { api, .. },
            ..
        } if label == desktop::OVERLAY => {
            api.prevent_close();
            let _ = desktop::hide_overlay(handle);
        }
        _ => {}
    }
}

/// Hands each committed event to `emit` (its JSON object, `id` included, for the window, and
/// what changed, for the desktop), in cursor order, until the core shuts down.
pub async fn forward_events(
    mut events: Subscription,
    stop: Shutdown,
    mut emit: impl FnMut(Value, &Change) + Send + 'static,
) {
    loop {
        let next = tokio::select! {
            e = events.next() => e,
            _ = stop.wait() => return,
        };
        match next {
            Ok(e) => match serde_json::from_str::<Value>(&e.json) {
                Ok(payload) => emit(payload, &e.change),
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
        let task = tokio::spawn(forward_events(
            events,
            app.shutdown_signal(),
            move |v, _| {
                let _ = tx.send(v);
            },
        ));

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
