//! Secrets: the callback token (what the assistant presents) and the UI token (what the local
//! UI presents). 32 random bytes, base64url without padding, kept in the data dir with mode
//! 0600, compared in constant time, rotatable (written atomically).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use rand::RngCore;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::RwLock;
use subtle::ConstantTimeEq;

pub const CALLBACK_TOKEN_FILE: &str = "callback_token";
pub const UI_TOKEN_FILE: &str = "ui_token";

#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("cannot read or write the token file {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

impl TokenError {
    /// The file system is full (or over quota): the caller may retry once space is back.
    pub fn is_storage_full(&self) -> bool {
        let TokenError::Io { source, .. } = self;
        matches!(
            source.kind(),
            std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
        )
    }
}

pub fn generate() -> String {
    let mut bytes = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut bytes);
    URL_SAFE_NO_PAD.encode(bytes)
}

/// Constant-time equality of two secrets (length is not secret).
pub fn secret_eq(a: &str, b: &str) -> bool {
    a.len() == b.len() && bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// Extracts the token of an `Authorization: Bearer <token>` header value.
pub fn bearer(header: Option<&str>) -> Option<&str> {
    let h = header?.trim();
    let (scheme, rest) = h.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
}

/// Writes `value` to `path` with mode 0600, atomically (temp file + fsync + rename).
pub fn write_secret(path: &Path, value: &str) -> Result<(), TokenError> {
    let io = |source| TokenError::Io {
        path: path.to_path_buf(),
        source,
    };
    let tmp = path.with_extension("tmp");
    let written = write_tmp(&tmp, value).and_then(|()| std::fs::rename(&tmp, path));
    if written.is_err() {
        // A half-written temp file never replaces the secret; leave no litter either.
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(io)
}

fn write_tmp(tmp: &Path, value: &str) -> std::io::Result<()> {
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts.open(tmp)?;
    f.write_all(value.as_bytes())?;
    f.sync_all()?;
    drop(f);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(tmp, std::fs::Permissions::from_mode(0o600))?;
    }
    Ok(())
}

/// Reads the secret at `path`, creating it when missing or empty.
pub fn load_or_create(path: &Path) -> Result<String, TokenError> {
    match std::fs::read_to_string(path) {
        Ok(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
        Ok(_) => create(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => create(path),
        Err(source) => Err(TokenError::Io {
            path: path.to_path_buf(),
            source,
        }),
    }
}

fn create(path: &Path) -> Result<String, TokenError> {
    let t = generate();
    write_secret(path, &t)?;
    Ok(t)
}

/// A rotatable secret shared by the listener (checks) and the settings (shows, rotates).
#[derive(Debug)]
pub struct Secret {
    path: PathBuf,
    value: RwLock<String>,
}

impl Secret {
    pub fn load(path: PathBuf) -> Result<Secret, TokenError> {
        let value = load_or_create(&path)?;
        Ok(Secret {
            path,
            value: RwLock::new(value),
        })
    }

    pub fn get(&self) -> String {
        self.value.read().expect("token lock").clone()
    }

    pub fn matches(&self, presented: &str) -> bool {
        secret_eq(&self.value.read().expect("token lock"), presented)
    }

    /// A new value, on disk first; the old one stops working when this returns.
    pub fn rotate(&self) -> Result<String, TokenError> {
        let t = generate();
        write_secret(&self.path, &t)?;
        *self.value.write().expect("token lock") = t.clone();
        Ok(t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_32_random_bytes_base64url() {
        let a = generate();
        assert_eq!(URL_SAFE_NO_PAD.decode(&a).unwrap().len(), 32);
        assert_ne!(a, generate());
    }

    #[test]
    fn bearer_parsing_and_compare() {
        assert_eq!(bearer(Some("Bearer abc")), Some("abc"));
        assert_eq!(bearer(Some("bearer  abc ")), Some("abc"));
        assert_eq!(bearer(Some("Basic abc")), None);
        assert_eq!(bearer(None), None);
        assert!(secret_eq("abc", "abc"));
        assert!(!secret_eq("abc", "abd"));
        assert!(!secret_eq("abc", "abcd"));
    }

    #[test]
    fn stored_with_0600_and_rotates() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(CALLBACK_TOKEN_FILE);
        let s = Secret::load(p.clone()).unwrap();
        let first = s.get();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), first);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        assert_eq!(
            Secret::load(p.clone()).unwrap().get(),
            first,
            "stable across runs"
        );
        let second = s.rotate().unwrap();
        assert_ne!(first, second);
        assert!(!s.matches(&first));
        assert!(s.matches(&second));
        assert_eq!(std::fs::read_to_string(&p).unwrap(), second);
    }
}
