//! The tunnel's settings: kind, URL / domain, on or off in the settings store's `tunnel`
//! section ([`TunnelSection`]; `tunnel.json` of older versions is moved in); the ngrok authtoken
//! alone in `ngrok_authtoken` (mode 0600, like the app's own tokens: a secret, not a setting).
//! The authtoken is never logged, never returned by the API, and redacted in `Debug`.

use crate::settings::{Invalid, Legacy, Section, SettingsError, SettingsStore};
use crate::tokens::{write_secret, TokenError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The settings file of older versions (moved into the settings store).
pub const CONFIG_FILE: &str = "tunnel.json";
pub const AUTHTOKEN_FILE: &str = "ngrok_authtoken";
/// The environment variable the ngrok tools use; read at start-up when no token is saved.
pub const AUTHTOKEN_ENV: &str = "NGROK_AUTHTOKEN";
pub const MAX_AUTHTOKEN_LEN: usize = 512;
/// Bounds of an external URL's re-check interval.
pub const MIN_CHECK_SECS: u64 = 2;
pub const MAX_CHECK_SECS: u64 = 3600;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Ngrok,
    External,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Ngrok => "ngrok",
            Kind::External => "external",
        }
    }
}

/// What `tunnel.json` holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredConfig {
    pub kind: Kind,
    /// Started at start-up (`POST /api/tunnel` turns it on, `DELETE` off).
    pub enabled: bool,
    /// ngrok: a reserved domain (`desk.example.app`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub domain: Option<String>,
    /// external: the public origin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// external: seconds between two checks while online.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check_interval_secs: Option<u64>,
    /// external: `false` = advertise the URL without the signed probe (for a URL only the
    /// assistant's host can reach, e.g. `ssh -R` bound to that host's loopback).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify: Option<bool>,
}

impl StoredConfig {
    pub fn verify(&self) -> bool {
        self.verify.unwrap_or(true)
    }

    pub fn check_interval(&self, default: Duration) -> Duration {
        self.check_interval_secs
            .map(Duration::from_secs)
            .unwrap_or(default)
    }
}

/// The `tunnel` section: the tunnel's settings, `null` until one is configured.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct TunnelSection(pub Option<StoredConfig>);

impl Section for TunnelSection {
    const KEY: &'static str = "tunnel";

    fn validate(&self) -> Result<(), Invalid> {
        let Some(c) = &self.0 else { return Ok(()) };
        let bad = |m: String| Err(Invalid::new("invalid_field", m));
        if let Some(d) = &c.domain {
            if let Err(m) = validate_domain(d) {
                return bad(m);
            }
        }
        if let Some(s) = c.check_interval_secs {
            if !(MIN_CHECK_SECS..=MAX_CHECK_SECS).contains(&s) {
                return bad(format!(
                    "`check_interval_secs` must be {MIN_CHECK_SECS}–{MAX_CHECK_SECS}"
                ));
            }
        }
        if c.kind == Kind::External && c.url.as_deref().is_none_or(str::is_empty) {
            return bad("an external tunnel needs its `url`".into());
        }
        Ok(())
    }

    /// `tunnel.json` of older versions.
    fn legacy(data_dir: &Path) -> Legacy<Self> {
        Legacy::from_file(data_dir.join(CONFIG_FILE), |c| TunnelSection(Some(c)))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Settings(#[from] SettingsError),
}

/// The saved tunnel settings (`None`: never configured).
pub fn load(settings: &SettingsStore) -> Result<Option<StoredConfig>, ConfigError> {
    Ok(settings.get::<TunnelSection>().0)
}

/// Checks and saves the tunnel settings.
pub fn save(settings: &SettingsStore, config: &StoredConfig) -> Result<(), ConfigError> {
    settings.set(&TunnelSection(Some(config.clone())))?;
    Ok(())
}

/// Checks an authtoken's shape (ngrok's own check happens at login).
pub fn validate_authtoken(t: &str) -> Result<String, String> {
    let t = t.trim();
    if t.is_empty() {
        return Err("`authtoken` is empty".into());
    }
    if t.len() > MAX_AUTHTOKEN_LEN {
        return Err(format!(
            "`authtoken` is longer than {MAX_AUTHTOKEN_LEN} characters"
        ));
    }
    if !t.chars().all(|c| c.is_ascii_graphic()) {
        return Err("`authtoken` must be visible ASCII characters without spaces".into());
    }
    Ok(t.to_string())
}

/// Checks a reserved domain: a bare host name (an `https://` origin is reduced to its host).
pub fn validate_domain(d: &str) -> Result<String, String> {
    let mut d = d.trim().to_ascii_lowercase();
    for p in ["https://", "http://"] {
        if let Some(rest) = d.strip_prefix(p) {
            d = rest.trim_end_matches('/').to_string();
        }
    }
    let d = d.trim_end_matches('.').to_string();
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
    };
    if d.len() > 253 || !d.contains('.') || !d.split('.').all(label_ok) {
        return Err(format!(
            "`domain` must be a host name such as desk.example.app (got `{d}`)"
        ));
    }
    Ok(d)
}

/// The saved authtoken file.
pub struct AuthtokenFile {
    path: PathBuf,
}

impl std::fmt::Debug for AuthtokenFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthtokenFile")
            .field("path", &self.path)
            .finish()
    }
}

impl AuthtokenFile {
    pub fn new(dir: &Path) -> AuthtokenFile {
        AuthtokenFile {
            path: dir.join(AUTHTOKEN_FILE),
        }
    }

    pub fn load(&self) -> Option<String> {
        std::fs::read_to_string(&self.path)
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    }

    pub fn save(&self, token: &str) -> Result<(), TokenError> {
        write_secret(&self.path, token)
    }

    pub fn remove(&self) -> std::io::Result<()> {
        match std::fs::remove_file(&self.path) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authtoken_saved_0600_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let f = AuthtokenFile::new(dir.path());
        assert_eq!(f.load(), None);
        f.save("2abcDEF_ghi").unwrap();
        assert_eq!(f.load().as_deref(), Some("2abcDEF_ghi"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(AUTHTOKEN_FILE))
                .unwrap()
                .permissions()
                .mode()
                & 0o777;
            assert_eq!(mode, 0o600);
        }
        assert!(!format!("{f:?}").contains("2abc"));
        f.remove().unwrap();
        f.remove().unwrap();
        assert_eq!(f.load(), None);
    }

    #[test]
    fn validation() {
        assert_eq!(validate_authtoken(" abc_DEF-1 ").unwrap(), "abc_DEF-1");
        assert!(validate_authtoken("a b").is_err());
        assert!(validate_authtoken("").is_err());
        assert_eq!(
            validate_domain("https://Desk.Example.app/").unwrap(),
            "desk.example.app"
        );
        assert!(validate_domain("nodot").is_err());
        assert!(validate_domain("bad_char.example").is_err());
        assert!(validate_domain("desk.example.app/path").is_err());
    }

    #[test]
    fn config_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let store = SettingsStore::open(dir.path()).unwrap();
        assert_eq!(load(&store).unwrap(), None);
        let c = StoredConfig {
            kind: Kind::External,
            enabled: true,
            domain: None,
            url: Some("https://desk.example.net".into()),
            check_interval_secs: Some(10),
            verify: None,
        };
        save(&store, &c).unwrap();
        let again = SettingsStore::open(dir.path()).unwrap();
        assert_eq!(load(&again).unwrap(), Some(c.clone()));
        // A value the routes would refuse is refused by the store too, and nothing is written.
        let bad = StoredConfig {
            check_interval_secs: Some(1),
            ..c.clone()
        };
        let e = save(&store, &bad).unwrap_err();
        assert!(
            matches!(e, ConfigError::Settings(ref s) if s.code() == "invalid_field"),
            "{e}"
        );
        assert_eq!(
            load(&SettingsStore::open(dir.path()).unwrap()).unwrap(),
            Some(c)
        );
    }

    #[test]
    fn the_old_file_is_moved_in() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join(CONFIG_FILE),
            r#"{"kind": "ngrok", "enabled": true, "domain": "desk.example.app"}"#,
        )
        .unwrap();
        let store = SettingsStore::open(dir.path()).unwrap();
        let c = load(&store).unwrap().unwrap();
        assert_eq!((c.kind, c.enabled), (Kind::Ngrok, true));
        assert_eq!(c.domain.as_deref(), Some("desk.example.app"));
        assert!(!dir.path().join(CONFIG_FILE).exists());
        assert!(dir.path().join("tunnel.json.migrated").exists());
    }
}
