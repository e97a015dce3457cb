//! The desktop-only parts of the shell: the main window and the compact overlay (always on top,
//! opened by the call bar, the global shortcut, or a call starting), the links guard, system
//! notifications, and the commands the web UI calls for them. Wiring only: what deserves a
//! notification is [`notify::notice_for`], the settings are [`prefs`], the overlay's content is
//! the web UI's `?view=overlay` route (the same event stream as the main window).

use crate::notify::{self, NoticeKind};
use crate::prefs::{DesktopPrefs, PrefsError};
use stagewhisper_core::events::Change;
use stagewhisper_core::settings::SettingsStore;
use std::sync::Mutex;
use tauri::{AppHandle, Manager, Runtime, WebviewWindow, WebviewWindowBuilder};
use tauri_plugin_global_shortcut::{GlobalShortcutExt, Shortcut, ShortcutState};
use tauri_plugin_notification::NotificationExt;
use tauri_plugin_opener::OpenerExt;

pub const MAIN: &str = "main";
pub const OVERLAY: &str = "overlay";

/// The desktop settings and where they are kept.
pub struct Desktop {
    settings: SettingsStore,
    prefs: Mutex<DesktopPrefs>,
}

impl Desktop {
    pub fn load(settings: SettingsStore) -> Desktop {
        let prefs = DesktopPrefs::load(&settings);
        Desktop {
            settings,
            prefs: Mutex::new(prefs),
        }
    }

    pub fn prefs(&self) -> DesktopPrefs {
        self.prefs.lock().expect("prefs lock").clone()
    }
}

/// Whether the app's own pages may be shown in the webview at `url` (anything else is a link,
/// for the system browser).
pub fn is_app_url(url: &tauri::Url) -> bool {
    matches!(
        (url.scheme(), url.host_str()),
        ("tauri", Some("localhost")) | ("http" | "https", Some("tauri.localhost"))
    )
}

/// A window of the config (`create: false` there: the shell creates them), with the links guard:
/// a navigation away from the app opens the system browser instead and is cancelled.
fn window_from_config<R: Runtime>(
    app: &AppHandle<R>,
    label: &str,
) -> tauri::Result<WebviewWindow<R>> {
    if let Some(w) = app.get_webview_window(label) {
        return Ok(w);
    }
    let config = app
        .config()
        .app
        .windows
        .iter()
        .find(|w| w.label == label)
        .cloned()
        .ok_or_else(|| tauri::Error::WindowNotFound)?;
    let opener = app.clone();
    WebviewWindowBuilder::from_config(app, &config)?
        .on_navigation(move |url| {
            if is_app_url(url) {
                return true;
            }
            tracing::info!(%url, "a link: opening it in the system browser");
            if let Err(e) = opener.opener().open_url(url.as_str(), None::<&str>) {
                tracing::warn!(%url, error = %e, "cannot open the link");
            }
            false
        })
        .build()
}

pub fn open_main<R: Runtime>(app: &AppHandle<R>) -> tauri::Result<WebviewWindow<R>> {
    window_from_config(app, MAIN)
}

/// Brings the main window to the front (a second launch, the overlay's "open" button).
pub fn focus_main<R: Runtime>(app: &AppHandle<R>) {
    match open_main(app) {
        Ok(w) => {
            let _ = w.unminimize();
            let _ = w.show();
            if let Err(e) = w.set_focus() {
                tracing::warn!(error = %e, "cannot focus the main window");
            }
            tracing::info!("main window focused");
        }
        Err(e) => tracing::warn!(error = %e, "cannot open the main window"),
    }
}

pub fn show_overlay<R: Runtime>(app: &AppHandle<R>) -> tauri::Result<()> {
    let w = window_from_config(app, OVERLAY)?;
    w.set_always_on_top(true)?;
    w.show()?;
    let _ = w.unminimize();
    tracing::info!("overlay shown");
    Ok(())
}

pub fn hide_overlay<R: Runtime>(app: &AppHandle<R>) -> tauri::Result<()> {
    if let Some(w) = app.get_webview_window(OVERLAY) {
        w.hide()?;
        tracing::info!("overlay hidden");
    }
    Ok(())
}

/// Shows the overlay, or hides it when it is on screen. Answers whether it is now shown.
pub fn toggle_overlay<R: Runtime>(app: &AppHandle<R>) -> tauri::Result<bool> {
    let visible = app
        .get_webview_window(OVERLAY)
        .map(|w| w.is_visible().unwrap_or(false))
        .unwrap_or(false);
    if visible {
        hide_overlay(app)?;
    } else {
        show_overlay(app)?;
    }
    Ok(!visible)
}

/// The global shortcut's handler (registered with the plugin).
pub fn on_shortcut<R: Runtime>(app: &AppHandle<R>, _shortcut: &Shortcut, state: ShortcutState) {
    if state == ShortcutState::Pressed {
        tracing::info!("overlay shortcut pressed");
        if let Err(e) = toggle_overlay(app) {
            tracing::warn!(error = %e, "cannot toggle the overlay");
        }
    }
}

/// Registers `next`'s shortcut in place of `prev`'s (`prev` = None at start-up).
fn apply_shortcut<R: Runtime>(
    app: &AppHandle<R>,
    prev: Option<&DesktopPrefs>,
    next: &DesktopPrefs,
) -> Result<(), PrefsError> {
    let new = next.shortcut()?;
    let old = prev.and_then(|p| p.shortcut().ok().flatten());
    if old == new {
        return Ok(());
    }
    let gs = app.global_shortcut();
    if let Some(old) = old {
        let _ = gs.unregister(old);
    }
    if let Some(new) = new {
        if let Err(e) = gs.register(new) {
            // Put the old one back: the setting stays as it was.
            if let Some(old) = old {
                let _ = gs.register(old);
            }
            return Err(PrefsError {
                error: "shortcut_unavailable",
                message: format!("cannot register {:?}: {e}", next.overlay_shortcut),
            });
        }
    }
    tracing::info!(shortcut = %next.overlay_shortcut, "overlay shortcut registered");
    Ok(())
}

/// At start-up: the saved shortcut (a failure is logged; the app runs without it).
pub fn start<R: Runtime>(app: &AppHandle<R>) {
    let prefs = app.state::<Desktop>().prefs();
    if let Err(e) = apply_shortcut(app, None, &prefs) {
        tracing::warn!(error = e.error, message = %e.message, "no overlay shortcut");
    }
}

/// Whether an event is a call starting (the overlay may open by itself).
pub fn is_call_start(change: &Change) -> bool {
    matches!(change, Change::SessionCreated { session, .. }
        if session.is_call && session.ended_at.is_none())
}

fn app_focused<R: Runtime>(app: &AppHandle<R>) -> bool {
    app.webview_windows()
        .values()
        .any(|w| w.is_focused().unwrap_or(false))
}

/// What the desktop does with each committed event besides showing it: the overlay at call
/// start, a system notification while the app is not focused.
pub fn on_event<R: Runtime>(app: &AppHandle<R>, change: &Change) {
    let prefs = app.state::<Desktop>().prefs();
    if prefs.overlay_on_call_start && is_call_start(change) {
        if let Err(e) = show_overlay(app) {
            tracing::warn!(error = %e, "cannot open the overlay at call start");
        }
    }
    let Some(notice) = notify::notice_for(change, &prefs) else {
        return;
    };
    let focused = app_focused(app);
    tracing::debug!(kind = ?notice.kind, focused, "notification candidate");
    if focused {
        return;
    }
    let app = app.clone();
    tauri::async_runtime::spawn_blocking(move || {
        if notify::do_not_disturb() {
            tracing::info!(kind = ?notice.kind, "Do-Not-Disturb: no notification");
            return;
        }
        let kind = match notice.kind {
            NoticeKind::Insight => "insight",
            NoticeKind::Error => "error",
            NoticeKind::Permission => "permission",
            NoticeKind::Call => "call",
        };
        match app
            .notification()
            .builder()
            .title(&notice.title)
            .body(&notice.body)
            .show()
        {
            Ok(()) => tracing::info!(kind, "notification raised"),
            Err(e) => tracing::warn!(kind, error = %e, "cannot raise a notification"),
        }
    });
}

// ---- commands -----------------------------------------------------------------------------------

fn fail(e: tauri::Error) -> PrefsError {
    PrefsError {
        error: "window_failed",
        message: e.to_string(),
    }
}

#[tauri::command]
pub fn overlay_toggle(app: AppHandle) -> Result<bool, PrefsError> {
    toggle_overlay(&app).map_err(fail)
}

#[tauri::command]
pub fn overlay_show(app: AppHandle) -> Result<(), PrefsError> {
    show_overlay(&app).map_err(fail)
}

#[tauri::command]
pub fn overlay_hide(app: AppHandle) -> Result<(), PrefsError> {
    hide_overlay(&app).map_err(fail)
}

#[tauri::command]
pub fn main_focus(app: AppHandle) {
    focus_main(&app);
}

#[tauri::command]
pub fn desktop_prefs(desktop: tauri::State<'_, Desktop>) -> DesktopPrefs {
    desktop.prefs()
}

/// Checks, applies (the shortcut) and saves new settings; answers what is now in force.
#[tauri::command]
pub fn set_desktop_prefs(
    app: AppHandle,
    desktop: tauri::State<'_, Desktop>,
    prefs: DesktopPrefs,
) -> Result<DesktopPrefs, PrefsError> {
    let mut cur = desktop.prefs.lock().expect("prefs lock");
    prefs.shortcut()?;
    apply_shortcut(&app, Some(&cur), &prefs)?;
    if let Err(e) = prefs.save(&desktop.settings) {
        let _ = apply_shortcut(&app, Some(&prefs), &cur);
        return Err(e);
    }
    *cur = prefs.clone();
    Ok(prefs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use stagewhisper_core::model::SessionView;

    #[test]
    fn only_the_apps_own_pages_stay_in_the_webview() {
        for ok in [
            "tauri://localhost/index.html?view=overlay",
            "http://tauri.localhost/",
        ] {
            assert!(is_app_url(&ok.parse().unwrap()), "{ok}");
        }
        for link in [
            "https://example.com/",
            "http://localhost:8080/",
            "mailto:a@b.c",
            "tauri://evil.example/",
            "file:///etc/passwd",
        ] {
            assert!(!is_app_url(&link.parse().unwrap()), "{link}");
        }
    }

    #[test]
    fn a_new_live_call_is_a_call_start() {
        let session = |is_call: bool, ended: Option<&str>| SessionView {
            session_id: "s".into(),
            kind: "chat".into(),
            is_call,
            title: None,
            created_at: String::new(),
            ended_at: ended.map(str::to_string),
            insights_session_id: None,
        };
        let call = |is_call: bool, ended: Option<&str>| Change::SessionCreated {
            session_id: "s".into(),
            session: session(is_call, ended),
        };
        assert!(is_call_start(&call(true, None)));
        assert!(!is_call_start(&call(false, None)));
        assert!(!is_call_start(&call(true, Some("2026-01-01T00:00:00Z"))));
        let updated = Change::SessionUpdated {
            session_id: "s".into(),
            session: session(true, None),
        };
        assert!(!is_call_start(&updated));
    }
}
