//! The tunnel's settings: kind, URL / domain, on or off in `tunnel.json`; the ngrok authtoken
//! alone in `ngrok_authtoken` (mode 0600, like the app's own tokens). The authtoken is never
//! logged, never returned by the API, and redacted in `Debug`.

use crate::tokens::{write_secret, TokenError};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

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

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not valid: {source}")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error(transparent)]
    Write(#[from] TokenError),
}

pub fn load(dir: &Path) -> Result<Option<StoredConfig>, ConfigError> {
    let path = dir.join(CONFIG_FILE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|source| ConfigError::Parse { path, source }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(ConfigError::Read { path, source }),
    }
}

pub fn save(dir: &Path, config: &StoredConfig) -> Result<(), ConfigError> {
    let json = serde_json::to_string_pretty(config).expect("serializable");
    write_secret(&dir.join(CONFIG_FILE), &json)?;
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
        assert_eq!(load(dir.path()).unwrap(), None);
        let c = StoredConfig {
            kind: Kind::External,
            enabled: true,
            domain: None,
            url: Some("https://desk.example.net".into()),
            check_interval_secs: Some(10),
            verify: None,
        };
        save(dir.path(), &c).unwrap();
        assert_eq!(load(dir.path()).unwrap(), Some(c));
    }
}
