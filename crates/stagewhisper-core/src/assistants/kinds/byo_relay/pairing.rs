//! Pairing codes and the paired integration at rest.
//!
//! A code is 10 characters of Crockford's base32 (no I, L, O, U: 50 bits), shown as
//! `ABCDE-FGHJK`; typed back it is read case-insensitively, ignoring spaces and dashes. One code
//! is valid at a time, once, for [`CODE_TTL_MS`]. The integration (its id, the relay token, the
//! desktop's X25519 secret, the plugin's public key, the dialect) lives in
//! `byo/integration.json` in the data dir, mode 0600, and is never logged or returned.

use super::crypto::{Dialect, KeyPair};
use crate::tokens::write_secret;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use rand::{Rng, RngCore};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// A code expires 10 minutes after it was made.
pub const CODE_TTL_MS: i64 = 10 * 60 * 1000;
const ALPHABET: &[u8] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";
const CODE_LEN: usize = 10;

/// Where the integration lives inside the data dir.
pub const DIR: &str = "byo";
const FILE: &str = "integration.json";

/// An issued pairing code.
#[derive(Debug, Clone)]
pub struct Code {
    /// Normalised (no dash, upper case).
    pub code: String,
    pub expires_ms: i64,
}

impl Code {
    pub fn generate(now_ms: i64) -> Code {
        let mut rng = rand::thread_rng();
        let code: String = (0..CODE_LEN)
            .map(|_| ALPHABET[rng.gen_range(0..ALPHABET.len())] as char)
            .collect();
        Code {
            code,
            expires_ms: now_ms + CODE_TTL_MS,
        }
    }

    /// `ABCDE-FGHJK`.
    pub fn display(&self) -> String {
        format!("{}-{}", &self.code[..5], &self.code[5..])
    }
}

/// What the user typed, as comparable to [`Code::code`] (Crockford: O→0, I/L→1).
pub fn normalise(typed: &str) -> String {
    typed
        .chars()
        .filter(|c| !c.is_whitespace() && *c != '-')
        .map(|c| match c.to_ascii_uppercase() {
            'O' => '0',
            'I' | 'L' => '1',
            c => c,
        })
        .collect()
}

/// The paired plugin.
#[derive(Clone, Serialize, Deserialize)]
pub struct Integration {
    pub integration_id: String,
    pub relay_token: String,
    /// The desktop's X25519 secret for this integration (standard base64).
    pub desktop_secret: String,
    pub plugin_public_key: String,
    /// `hermes` or `openclaw`.
    pub provider_kind: String,
    pub host_label: String,
    pub label: String,
    pub paired_at: String,
}

impl std::fmt::Debug for Integration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Integration")
            .field("integration_id", &self.integration_id)
            .field("provider_kind", &self.provider_kind)
            .field("host_label", &self.host_label)
            .finish_non_exhaustive()
    }
}

impl Integration {
    /// A new integration: fresh id, 32 random bytes of relay token, a fresh key pair.
    pub fn new(
        provider_kind: Dialect,
        host_label: &str,
        plugin_public_key: &str,
        paired_at: String,
    ) -> (Integration, KeyPair) {
        let mut token = [0u8; 32];
        rand::thread_rng().fill_bytes(&mut token);
        let keys = KeyPair::generate();
        let label = format!("StageWhisper ({host_label})");
        (
            Integration {
                integration_id: uuid::Uuid::new_v4().to_string(),
                relay_token: URL_SAFE_NO_PAD.encode(token),
                desktop_secret: keys.secret_b64().to_string(),
                plugin_public_key: plugin_public_key.to_string(),
                provider_kind: provider_kind.provider_kind().to_string(),
                host_label: host_label.to_string(),
                label,
                paired_at,
            },
            keys,
        )
    }

    pub fn dialect(&self) -> Dialect {
        Dialect::from_provider_kind(&self.provider_kind).unwrap_or(Dialect::Hermes)
    }
}

fn path(data_dir: &Path) -> PathBuf {
    data_dir.join(DIR).join(FILE)
}

pub fn load(data_dir: &Path) -> Option<Integration> {
    let raw = std::fs::read_to_string(path(data_dir)).ok()?;
    match serde_json::from_str(&raw) {
        Ok(i) => Some(i),
        Err(e) => {
            tracing::error!(error = %e, "the paired BYO integration is unreadable");
            None
        }
    }
}

pub fn save(data_dir: &Path, i: &Integration) -> std::io::Result<()> {
    std::fs::create_dir_all(data_dir.join(DIR))?;
    write_secret(
        &path(data_dir),
        &serde_json::to_string_pretty(i).expect("serializable"),
    )
    .map_err(std::io::Error::other)
}

pub fn remove(data_dir: &Path) {
    let _ = std::fs::remove_file(path(data_dir));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_typable_and_read_back_loosely() {
        let c = Code::generate(0);
        assert_eq!(c.code.len(), CODE_LEN);
        assert!(c.code.bytes().all(|b| ALPHABET.contains(&b)));
        let shown = c.display();
        assert_eq!(shown.len(), 11);
        assert_eq!(normalise(&shown.to_lowercase()), c.code);
        assert_eq!(normalise(" ab-cde  fghjk "), "ABCDEFGHJK");
        assert_eq!(normalise("OIL"), "011");
        assert_eq!(c.expires_ms, CODE_TTL_MS);
        // 32 symbols × 10 = 50 bits.
        assert_eq!(ALPHABET.len(), 32);
        assert_ne!(Code::generate(0).code, Code::generate(0).code);
    }
}
