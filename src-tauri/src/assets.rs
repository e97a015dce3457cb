//! The web UI compiled into the binary (Tauri's embedded `frontendDist`), shared by the window
//! and the loopback UI listener: an installed package has no `ui/dist` folder next to it, so
//! `stagewhisper --headless` (and the listener beside the window) serve these same files when
//! no UI folder is found (`--ui-dir`, `STAGEWHISPER_UI_DIR` or a `ui/dist` near the binary win).

use std::borrow::Cow;
use std::sync::Arc;
use tauri::utils::assets::{AssetKey, AssetsIter, CspHash};
use tauri::{Assets, Wry};

/// The embedded files, for Tauri and for the core's UI listener.
#[derive(Clone)]
pub struct UiAssets(Arc<dyn Assets<Wry>>);

/// Stands in for a moment while the embedded assets change hands.
struct Nothing;

impl Assets<Wry> for Nothing {
    fn get(&self, _: &AssetKey) -> Option<Cow<'_, [u8]>> {
        None
    }
    fn iter(&self) -> Box<AssetsIter<'_>> {
        Box::new(std::iter::empty())
    }
    fn csp_hashes(&self, _: &AssetKey) -> Box<dyn Iterator<Item = CspHash<'_>> + '_> {
        Box::new(std::iter::empty())
    }
}

impl UiAssets {
    /// Takes the context's embedded assets, leaving it a handle to the same ones.
    pub fn share(context: &mut tauri::Context<Wry>) -> UiAssets {
        let inner: Arc<dyn Assets<Wry>> = Arc::from(context.set_assets(Box::new(Nothing)));
        let shared = UiAssets(inner);
        context.set_assets(Box::new(shared.clone()));
        shared
    }
}

impl Assets<Wry> for UiAssets {
    fn setup(&self, app: &tauri::App<Wry>) {
        self.0.setup(app)
    }
    fn get(&self, key: &AssetKey) -> Option<Cow<'_, [u8]>> {
        self.0.get(key)
    }
    fn iter(&self) -> Box<AssetsIter<'_>> {
        self.0.iter()
    }
    fn csp_hashes(&self, html_path: &AssetKey) -> Box<dyn Iterator<Item = CspHash<'_>> + '_> {
        self.0.csp_hashes(html_path)
    }
}

impl stagewhisper_core::api::Assets for UiAssets {
    fn get(&self, path: &str) -> Option<(Vec<u8>, String)> {
        let rel = if path.is_empty() { "index.html" } else { path };
        let bytes = self.0.get(&AssetKey::from(format!("/{rel}")))?.into_owned();
        let mime = mime_guess::from_path(rel)
            .first_or_octet_stream()
            .essence_str()
            .to_string();
        Some((bytes, mime))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stagewhisper_core::api::Assets as CoreAssets;

    #[test]
    fn serves_the_embedded_index_and_shares_it_with_the_window() {
        let mut context = tauri::generate_context!("tauri.conf.json");
        let ui = UiAssets::share(&mut context);
        let get = |p: &str| CoreAssets::get(&ui, p);
        let (html, mime) = get("").expect("an index page is embedded");
        assert_eq!(mime, "text/html");
        assert!(String::from_utf8_lossy(&html).contains("StageWhisper"));
        assert_eq!(get("index.html").unwrap().0, html);
        assert!(get("no/such/file.js").is_none());
        // The context still serves the same files to the window.
        let via_context = context.assets().get(&AssetKey::from("/index.html"));
        assert_eq!(via_context.as_deref(), Some(&html[..]));
    }
}
