//! The assistant link's settings: base URL, mode and prelude in the settings store's `incoming`
//! section ([`IncomingSection`]; `assistant.json` of older versions is moved in), the relay
//! token alone in `assistant_relay_token` (mode 0600, like the app's own tokens: a secret, not a
//! setting). The token is never logged, never returned by the API, and redacted in `Debug`.

use super::client::{Endpoint, UrlError};
use crate::assistants::prelude::DEFAULT_PRELUDE;
use crate::settings::{Invalid, Legacy, Section, SettingsError, SettingsStore};
use crate::tokens::{write_secret, TokenError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The settings file of older versions (moved into the settings store).
pub const CONFIG_FILE: &str = "assistant.json";
pub const RELAY_TOKEN_FILE: &str = "assistant_relay_token";

/// Shortest relay token accepted (OpenClaw's `httpToken` minimum; Hermes wants ≥ 32).
pub const MIN_RELAY_TOKEN_LEN: usize = 16;
pub const MAX_RELAY_TOKEN_LEN: usize = 4096;
/// Longest prelude (the assistant's text limit).
pub const MAX_PRELUDE_LEN: usize = 16_000;

/// How replies come back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Callbacks; switch to `GET /v1/events` when the assistant rejects the callback URL and
    /// offers the stream.
    #[default]
    Auto,
    /// Callbacks only.
    Callback,
    /// No callback block; replies are read from `GET /v1/events` (Hermes only).
    Events,
}

impl Mode {
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "auto" => Some(Mode::Auto),
            "callback" => Some(Mode::Callback),
            "events" => Some(Mode::Events),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Auto => "auto",
            Mode::Callback => "callback",
            Mode::Events => "events",
        }
    }
}

/// What `assistant.json` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredConfig {
    pub base_url: String,
    #[serde(default)]
    pub mode: Mode,
    /// `None` = the default prelude.
    #[serde(default)]
    pub prelude: Option<String>,
}

/// The `incoming` section: what `assistant.json` held, `null` until configured.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct IncomingSection(pub Option<StoredConfig>);

impl Section for IncomingSection {
    const KEY: &'static str = "incoming";

    fn validate(&self) -> Result<(), Invalid> {
        let Some(c) = &self.0 else { return Ok(()) };
        let refused = |e: ConfigError| Invalid::new(e.code(), e.to_string());
        Endpoint::parse(&c.base_url).map_err(|e| refused(ConfigError::BaseUrl(e)))?;
        if c.prelude
            .as_ref()
            .is_some_and(|p| p.chars().count() > MAX_PRELUDE_LEN)
        {
            return Err(refused(ConfigError::PreludeTooLong));
        }
        Ok(())
    }

    /// `assistant.json` of older versions.
    fn legacy(data_dir: &Path) -> Legacy<Self> {
        Legacy::from_file(data_dir.join(CONFIG_FILE), |c| IncomingSection(Some(c)))
    }
}

/// A complete, validated configuration.
#[derive(Clone)]
pub struct LinkConfig {
    pub endpoint: Endpoint,
    pub stored: StoredConfig,
    relay_token: String,
}

impl std::fmt::Debug for LinkConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LinkConfig")
            .field("base_url", &self.stored.base_url)
            .field("mode", &self.stored.mode)
            .field("relay_token", &"<redacted>")
            .finish()
    }
}

impl LinkConfig {
    pub fn new(stored: StoredConfig, relay_token: String) -> Result<LinkConfig, ConfigError> {
        let endpoint = Endpoint::parse(&stored.base_url).map_err(ConfigError::BaseUrl)?;
        check_token(&relay_token)?;
        let stored = StoredConfig {
            base_url: endpoint.base_url(),
            ..stored
        };
        Ok(LinkConfig {
            endpoint,
            stored,
            relay_token,
        })
    }

    pub fn relay_token(&self) -> &str {
        &self.relay_token
    }

    /// The prelude text to send (the configured one or the default).
    pub fn prelude(&self) -> &str {
        self.stored.prelude.as_deref().unwrap_or(DEFAULT_PRELUDE)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("invalid base_url: {0}")]
    BaseUrl(UrlError),
    #[error(
        "the relay token must be {MIN_RELAY_TOKEN_LEN}–{MAX_RELAY_TOKEN_LEN} visible characters \
         with no spaces (use the exact token the assistant is configured with)"
    )]
    Token,
    #[error("the prelude is longer than {MAX_PRELUDE_LEN} characters")]
    PreludeTooLong,
    #[error(transparent)]
    Io(#[from] TokenError),
    #[error(transparent)]
    Settings(#[from] SettingsError),
    #[error("cannot read {path}: {message}")]
    Corrupt { path: PathBuf, message: String },
}

impl ConfigError {
    pub fn code(&self) -> &'static str {
        match self {
            ConfigError::BaseUrl(_) => "invalid_base_url",
            ConfigError::Token => "invalid_relay_token",
            ConfigError::PreludeTooLong => "prelude_too_long",
            ConfigError::Settings(SettingsError::Invalid(i)) => i.code,
            ConfigError::Io(_) | ConfigError::Corrupt { .. } | ConfigError::Settings(_) => {
                "config_write_failed"
            }
        }
    }
}

pub fn check_token(t: &str) -> Result<(), ConfigError> {
    let n = t.chars().count();
    if !(MIN_RELAY_TOKEN_LEN..=MAX_RELAY_TOKEN_LEN).contains(&n)
        || t.chars().any(|c| c.is_whitespace() || c.is_control())
    {
        return Err(ConfigError::Token);
    }
    Ok(())
}

/// Loads the saved configuration; `Ok(None)` when none (or only half of it) is saved.
pub fn load(dir: &Path, settings: &SettingsStore) -> Result<Option<LinkConfig>, ConfigError> {
    let Some(stored) = settings.get::<IncomingSection>().0 else {
        return Ok(None);
    };
    let token = match std::fs::read_to_string(dir.join(RELAY_TOKEN_FILE)) {
        Ok(t) if !t.trim().is_empty() => t.trim().to_string(),
        _ => return Ok(None),
    };
    LinkConfig::new(stored, token).map(Some)
}

/// Saves the configuration (the token first, atomically, 0600; then the settings).
pub fn save(dir: &Path, settings: &SettingsStore, cfg: &LinkConfig) -> Result<(), ConfigError> {
    IncomingSection(Some(cfg.stored.clone()))
        .validate()
        .map_err(SettingsError::from)?;
    write_secret(&dir.join(RELAY_TOKEN_FILE), cfg.relay_token())?;
    settings.set(&IncomingSection(Some(cfg.stored.clone())))?;
    Ok(())
}

/// Forgets the configuration.
pub fn remove(dir: &Path, settings: &SettingsStore) {
    if let Err(e) = settings.remove::<IncomingSection>() {
        tracing::error!(error = %e, "cannot remove the assistant link's settings");
    }
    let _ = std::fs::remove_file(dir.join(RELAY_TOKEN_FILE));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saves_with_0600_and_loads_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = SettingsStore::open(dir.path()).unwrap();
        assert!(load(dir.path(), &store).unwrap().is_none());
        let cfg = LinkConfig::new(
            StoredConfig {
                base_url: "http://localhost:8644/".into(),
                mode: Mode::Events,
                prelude: Some("p".into()),
            },
            "x".repeat(32),
        )
        .unwrap();
        save(dir.path(), &store, &cfg).unwrap();
        let back = load(dir.path(), &SettingsStore::open(dir.path()).unwrap())
            .unwrap()
            .unwrap();
        assert_eq!(back.stored.base_url, "http://localhost:8644");
        assert_eq!(back.stored.mode, Mode::Events);
        assert_eq!(back.relay_token(), "x".repeat(32));
        assert!(
            !format!("{back:?}").contains("xxxx"),
            "token redacted in Debug"
        );
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(RELAY_TOKEN_FILE))
                .unwrap()
                .permissions()
                .mode()
                & 0o777;
            assert_eq!(mode, 0o600);
        }
        remove(dir.path(), &store);
        assert!(load(dir.path(), &store).unwrap().is_none());
        assert!(!dir.path().join(RELAY_TOKEN_FILE).exists());
    }

    #[test]
    fn the_old_file_is_moved_in_and_the_token_stays_in_its_own() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(CONFIG_FILE),
            r#"{"base_url": "http://127.0.0.1:8644", "mode": "events", "prelude": "hi"}"#,
        )
        .unwrap();
        std::fs::write(dir.path().join(RELAY_TOKEN_FILE), "t".repeat(20)).unwrap();
        let store = SettingsStore::open(dir.path()).unwrap();
        let cfg = load(dir.path(), &store).unwrap().unwrap();
        assert_eq!(
            (cfg.stored.mode, cfg.prelude(), cfg.relay_token()),
            (Mode::Events, "hi", "t".repeat(20).as_str())
        );
        assert!(dir.path().join("assistant.json.migrated").exists());
        assert!(
            dir.path().join(RELAY_TOKEN_FILE).exists(),
            "a secret, not a setting"
        );
        let doc = std::fs::read_to_string(store.path()).unwrap();
        assert!(!doc.contains("tttt"), "{doc}");
    }

    #[test]
    fn validates_token_and_url() {
        let s = |u: &str| StoredConfig {
            base_url: u.into(),
            mode: Mode::Auto,
            prelude: None,
        };
        assert!(matches!(
            LinkConfig::new(s("http://127.0.0.1:1"), "short".into()),
            Err(ConfigError::Token)
        ));
        assert!(matches!(
            LinkConfig::new(s("http://127.0.0.1:1"), format!("{} x", "a".repeat(20))),
            Err(ConfigError::Token)
        ));
        assert!(matches!(
            LinkConfig::new(s("http://192.168.1.2:1"), "a".repeat(20)),
            Err(ConfigError::BaseUrl(UrlError::NotLoopback(_)))
        ));
    }
}
