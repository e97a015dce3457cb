//! The assistant link's settings: base URL, mode and prelude in `assistant.json`, the relay
//! token alone in `assistant_relay_token` (mode 0600, like the app's own tokens). The token is
//! never logged, never returned by the API, and redacted in `Debug`.

use super::client::{Endpoint, UrlError};
use crate::assistants::prelude::DEFAULT_PRELUDE;
use crate::tokens::{write_secret, TokenError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

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
    #[error("cannot read {path}: {message}")]
    Corrupt { path: PathBuf, message: String },
}

impl ConfigError {
    pub fn code(&self) -> &'static str {
        match self {
            ConfigError::BaseUrl(_) => "invalid_base_url",
            ConfigError::Token => "invalid_relay_token",
            ConfigError::PreludeTooLong => "prelude_too_long",
            ConfigError::Io(_) | ConfigError::Corrupt { .. } => "config_write_failed",
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
pub fn load(dir: &Path) -> Result<Option<LinkConfig>, ConfigError> {
    let cfg_path = dir.join(CONFIG_FILE);
    let raw = match std::fs::read_to_string(&cfg_path) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(ConfigError::Corrupt {
                path: cfg_path,
                message: e.to_string(),
            })
        }
    };
    let stored: StoredConfig = serde_json::from_str(&raw).map_err(|e| ConfigError::Corrupt {
        path: cfg_path.clone(),
        message: e.to_string(),
    })?;
    let token = match std::fs::read_to_string(dir.join(RELAY_TOKEN_FILE)) {
        Ok(t) if !t.trim().is_empty() => t.trim().to_string(),
        _ => return Ok(None),
    };
    LinkConfig::new(stored, token).map(Some)
}

/// Saves the configuration (token first, both atomically, both 0600).
pub fn save(dir: &Path, cfg: &LinkConfig) -> Result<(), ConfigError> {
    write_secret(&dir.join(RELAY_TOKEN_FILE), cfg.relay_token())?;
    let json = serde_json::to_string_pretty(&cfg.stored).expect("serializable");
    write_secret(&dir.join(CONFIG_FILE), &json)?;
    Ok(())
}

/// Forgets the configuration.
pub fn remove(dir: &Path) {
    for f in [CONFIG_FILE, RELAY_TOKEN_FILE] {
        let _ = std::fs::remove_file(dir.join(f));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn saves_with_0600_and_loads_back() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(dir.path()).unwrap().is_none());
        let cfg = LinkConfig::new(
            StoredConfig {
                base_url: "http://localhost:8644/".into(),
                mode: Mode::Events,
                prelude: Some("p".into()),
            },
            "x".repeat(32),
        )
        .unwrap();
        save(dir.path(), &cfg).unwrap();
        let back = load(dir.path()).unwrap().unwrap();
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
        remove(dir.path());
        assert!(load(dir.path()).unwrap().is_none());
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
