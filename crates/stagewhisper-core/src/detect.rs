//! Noticing the call: the shapes of call detection as the control API takes and answers them.
//!
//! The pipeline (`stagewhisper-audio`) watches the sound server's streams; when an application
//! other than this one holds a microphone for a while and no call is running, it *offers* to
//! listen ([`Offer`], the live event `call_offered`). The person accepts (a call that listens
//! starts), says "not now", or "never for this app" (remembered in [`DetectionSettings`]).
//! When the application lets go of the microphone the offer closes (`call_offer_closed`); a
//! call started from the offer is offered to end, or ends by itself after a grace period.
//!
//! Only stream metadata is read for this, never audio, until the person says Start.

use crate::answers::AudioError;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// At most this many applications are remembered as "never offer".
pub const MAX_IGNORED: usize = 100;
/// Longest application name taken (ignored apps, accept / dismiss).
pub const MAX_APP: usize = 200;
/// Longest grace period before a call started from an offer ends by itself.
pub const MAX_END_AFTER_SECS: u32 = 3600;

fn yes() -> bool {
    true
}

/// Call detection as saved with the audio settings.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DetectionSettings {
    /// Watch for calls (on by default).
    #[serde(default = "yes")]
    pub enabled: bool,
    /// Applications never offered (compared without case to `application.name` and the
    /// binary).
    #[serde(default)]
    pub ignored_apps: Vec<String>,
    /// A call started from an offer ends this many seconds after the application lets go of
    /// the microphone (`None`: the app offers to end it and waits for the person).
    #[serde(default)]
    pub end_after_secs: Option<u32>,
}

impl Default for DetectionSettings {
    fn default() -> Self {
        DetectionSettings {
            enabled: true,
            ignored_apps: Vec::new(),
            end_after_secs: None,
        }
    }
}

impl DetectionSettings {
    /// Whether `app` (or its `binary`) is never offered.
    pub fn ignores(&self, app: &str, binary: Option<&str>) -> bool {
        self.ignored_apps.iter().any(|i| {
            i.eq_ignore_ascii_case(app) || binary.is_some_and(|b| i.eq_ignore_ascii_case(b))
        })
    }

    /// The settings after `update` (already [checked](DetectionUpdate::check)).
    pub fn apply(&self, update: &DetectionUpdate) -> DetectionSettings {
        let mut next = self.clone();
        if let Some(e) = update.enabled {
            next.enabled = e;
        }
        if let Some(list) = &update.ignored_apps {
            next.ignored_apps.clear();
            for a in list {
                next.ignore(a);
            }
        }
        if let Some(e) = update.end_after_secs {
            next.end_after_secs = e;
        }
        next
    }

    /// Adds `app` to the ignored applications (trimmed; once, whatever its case).
    pub fn ignore(&mut self, app: &str) {
        let app = app.trim();
        if !app.is_empty() && !self.ignores(app, None) {
            self.ignored_apps.push(app.to_string());
        }
    }
}

/// An application holding a microphone: the offer to listen.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Offer {
    /// The stream's `application.name` (what accept / dismiss take).
    pub app: String,
    /// Its `application.process.binary`, when the application says.
    pub binary: Option<String>,
    /// What people read: the application's name, or "a call in Firefox" for a browser.
    pub label: String,
    /// When the application took the microphone (RFC 3339).
    pub since: String,
}

/// A call started from an offer whose application let go of the microphone.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct EndOffer {
    pub app: String,
    /// The call started from the offer.
    pub call_id: String,
    /// When it ends by itself (RFC 3339; `None`: it waits for the person).
    pub ends_at: Option<String>,
}

/// Whether the app is watching, in plain words.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct DetectionStatus {
    /// `watching`, `off` (switched off) or `unavailable` (no sound server reachable).
    pub state: String,
    pub detail: String,
}

/// `GET /api/audio/detection`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct DetectionView {
    pub enabled: bool,
    /// The applications offered now.
    pub offers: Vec<Offer>,
    pub ignored_apps: Vec<String>,
    pub end_after_secs: Option<u32>,
    /// Calls started from an offer whose application let go of the microphone.
    pub end_offers: Vec<EndOffer>,
    pub status: DetectionStatus,
}

/// `PUT /api/audio/detection`. A field left out keeps its saved value.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
pub struct DetectionUpdate {
    pub enabled: Option<bool>,
    /// The whole list of applications never offered (replaces the saved one).
    pub ignored_apps: Option<Vec<String>>,
    /// 0–3600 seconds, or `null` (ask the person) — see [`DetectionSettings::end_after_secs`].
    #[serde(default, deserialize_with = "crate::model::double_option")]
    #[schema(value_type = Option<u32>)]
    pub end_after_secs: Option<Option<u32>>,
}

impl DetectionUpdate {
    pub fn check(&self) -> Result<(), AudioError> {
        if let Some(list) = &self.ignored_apps {
            if list.len() > MAX_IGNORED {
                return Err(AudioError::bad(
                    "invalid_field",
                    format!("`ignored_apps`: at most {MAX_IGNORED} applications"),
                ));
            }
            for a in list {
                check_app("ignored_apps", a)?;
            }
        }
        if let Some(Some(s)) = self.end_after_secs {
            if s > MAX_END_AFTER_SECS {
                return Err(AudioError::bad(
                    "invalid_field",
                    format!("`end_after_secs`: 0–{MAX_END_AFTER_SECS}, or null"),
                ));
            }
        }
        Ok(())
    }
}

/// `400 invalid_app` unless 1–[`MAX_APP`] characters without control characters.
pub fn check_app(field: &str, app: &str) -> Result<(), AudioError> {
    let n = app.trim().chars().count();
    if n == 0 || n > MAX_APP || app.chars().any(char::is_control) {
        return Err(AudioError::bad(
            "invalid_app",
            format!("`{field}`: an application name of 1–{MAX_APP} characters"),
        ));
    }
    Ok(())
}

/// `404 offer_not_found`: `app` is not offered (nor offered to end).
pub fn not_offered(app: &str) -> AudioError {
    AudioError {
        status: 404,
        code: "offer_not_found",
        message: format!("“{app}” is not offered (it may have let go of the microphone)"),
    }
}

/// `POST /api/audio/detection/accept`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct AcceptOffer {
    /// The application offered (its `app`).
    pub app: String,
    /// The new call's title (default: "Call in <app>"; at most 200 characters).
    pub title: Option<String>,
}

/// `POST /api/audio/detection/dismiss`.
#[derive(Debug, Clone, Deserialize, ToSchema)]
pub struct DismissOffer {
    /// The application offered (its `app`), or whose call was offered to end.
    pub app: String,
    /// Never offer this application again (remembered in `ignored_apps`).
    #[serde(default)]
    pub never: bool,
}

/// What people read for an application: browsers say a call runs in them.
pub fn label(app: &str, binary: Option<&str>) -> String {
    const BROWSERS: [(&str, &str); 9] = [
        ("firefox", "Firefox"),
        ("chromium", "Chromium"),
        ("chrome", "Chrome"),
        ("google-chrome", "Chrome"),
        ("brave", "Brave"),
        ("msedge", "Edge"),
        ("microsoft-edge", "Edge"),
        ("vivaldi", "Vivaldi"),
        ("opera", "Opera"),
    ];
    let looks = |s: &str| {
        let s = s.to_lowercase();
        BROWSERS
            .iter()
            .find(|(k, _)| s == *k || s.starts_with(&format!("{k}-")) || s.starts_with(k))
            .map(|(_, name)| *name)
    };
    match binary.and_then(looks).or_else(|| looks(app)) {
        Some(browser) => format!("a call in {browser}"),
        None => app.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn settings_default_on_and_ignore_without_case() {
        let s: DetectionSettings = serde_json::from_value(json!({})).unwrap();
        assert!(s.enabled);
        let mut s = DetectionSettings::default();
        s.ignore(" Zoom ");
        s.ignore("zoom");
        assert_eq!(s.ignored_apps, ["Zoom"]);
        assert!(s.ignores("ZOOM", None));
        assert!(s.ignores("ZOOM Meetings", Some("zoom")));
        assert!(!s.ignores("Slack", Some("slack")));
        let u: DetectionUpdate =
            serde_json::from_value(json!({"enabled": false, "end_after_secs": 30})).unwrap();
        let next = s.apply(&u);
        assert_eq!((next.enabled, next.end_after_secs), (false, Some(30)));
        assert_eq!(next.ignored_apps, ["Zoom"]);
        let u: DetectionUpdate =
            serde_json::from_value(json!({"ignored_apps": [], "end_after_secs": null})).unwrap();
        let next = next.apply(&u);
        assert!(next.ignored_apps.is_empty() && next.end_after_secs.is_none());
    }

    #[test]
    fn bad_updates_get_stable_codes() {
        let bad = |v| {
            serde_json::from_value::<DetectionUpdate>(v)
                .unwrap()
                .check()
                .unwrap_err()
                .code
        };
        assert_eq!(bad(json!({"ignored_apps": [""]})), "invalid_app");
        assert_eq!(bad(json!({"ignored_apps": ["a\nb"]})), "invalid_app");
        assert_eq!(bad(json!({"end_after_secs": 3601})), "invalid_field");
    }

    #[test]
    fn browsers_say_a_call_runs_in_them() {
        assert_eq!(label("Firefox", Some("firefox-esr")), "a call in Firefox");
        assert_eq!(label("Chromium", Some("chromium")), "a call in Chromium");
        assert_eq!(label("zoom", Some("zoom")), "zoom");
        assert_eq!(label("ZOOM VoiceEngine", None), "ZOOM VoiceEngine");
    }
}
