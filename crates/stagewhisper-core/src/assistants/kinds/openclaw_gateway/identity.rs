//! The device identity of this install towards OpenClaw gateways.
//!
//! One Ed25519 key pair per install, kept 0600 in the app's data dir; the device id is the
//! lowercase hex SHA-256 of the raw 32-byte public key. A `connect` carries the public key and a
//! signature over a pipe-separated payload (v3):
//! `v3|deviceId|client.id|client.mode|role|scopes joined by ","|signedAt|token|nonce|lower(platform)|lower(deviceFamily)`
//! with `signedAt` = the challenge `ts` and `token` = the auth token sent (shared or device
//! token, empty when none). Public key and signature are base64url without padding.
//!
//! The device token a `hello-ok` issues is kept beside the key ([`DeviceTokenStore`]), bound to
//! the gateway URL and the shared token it was issued under: when either changes the stored
//! device token is discarded (the gateway accepts a wrong shared token when a valid device token
//! comes with it, so keeping it would hide the mistake).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::Write;
use std::path::{Path, PathBuf};

/// File name of the key pair inside the identity dir.
pub const KEY_FILE: &str = "openclaw-device.json";
/// File name of the stored device token inside the identity dir.
pub const DEVICE_TOKEN_FILE: &str = "openclaw-device-token.json";

#[derive(Debug, thiserror::Error)]
pub enum IdentityError {
    #[error("cannot read or write the device identity in {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the device identity file {path} is damaged: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    #[error("invalid base64url in {what}")]
    BadBase64 { what: &'static str },
    #[error("invalid Ed25519 {what}")]
    BadKey { what: &'static str },
    #[error("the signature does not verify")]
    BadSignature,
}

impl IdentityError {
    /// Stable code for logs and statuses.
    pub fn code(&self) -> &'static str {
        match self {
            IdentityError::Io { .. } => "identity_io",
            IdentityError::Corrupt { .. } => "identity_corrupt",
            IdentityError::BadBase64 { .. } => "identity_bad_base64",
            IdentityError::BadKey { .. } => "identity_bad_key",
            IdentityError::BadSignature => "identity_bad_signature",
        }
    }
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> IdentityError + '_ {
    move |source| IdentityError::Io {
        path: path.to_path_buf(),
        source,
    }
}

/// Write `bytes` to `path` atomically (temp file + rename), readable by the owner only.
fn write_private(path: &Path, bytes: &[u8]) -> Result<(), IdentityError> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(io_err(dir))?;
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    {
        let mut opts = std::fs::OpenOptions::new();
        opts.write(true).create(true).truncate(true);
        #[cfg(unix)]
        {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        let mut f = opts.open(&tmp).map_err(io_err(&tmp))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            // An existing temp file keeps its mode through open(); force it.
            f.set_permissions(std::fs::Permissions::from_mode(0o600))
                .map_err(io_err(&tmp))?;
        }
        f.write_all(bytes).map_err(io_err(&tmp))?;
        f.sync_all().map_err(io_err(&tmp))?;
    }
    std::fs::rename(&tmp, path).map_err(io_err(path))
}

/// base64url without padding.
pub fn b64url(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(bytes)
}

fn un_b64url(s: &str, what: &'static str) -> Result<Vec<u8>, IdentityError> {
    URL_SAFE_NO_PAD
        .decode(s.trim_end_matches('='))
        .map_err(|_| IdentityError::BadBase64 { what })
}

/// Lowercase hex SHA-256 of the raw public key.
pub fn device_id_of(public_key: &[u8; 32]) -> String {
    hex::encode(Sha256::digest(public_key))
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct KeyFile {
    version: u32,
    /// The 32-byte Ed25519 seed, base64url.
    secret_key: String,
    public_key: String,
    device_id: String,
}

/// The install's Ed25519 key pair.
pub struct DeviceIdentity {
    key: SigningKey,
    device_id: String,
}

impl std::fmt::Debug for DeviceIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret key.
        f.debug_struct("DeviceIdentity")
            .field("device_id", &self.device_id)
            .finish()
    }
}

impl DeviceIdentity {
    /// Load the key pair from `dir`, or create it (0600) when there is none yet.
    pub fn load_or_create(dir: &Path) -> Result<DeviceIdentity, IdentityError> {
        let path = dir.join(KEY_FILE);
        match std::fs::read(&path) {
            Ok(bytes) => Self::parse(&path, &bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let key = SigningKey::generate(&mut rand::rngs::OsRng);
                let id = Self::from_key(key);
                let file = KeyFile {
                    version: 1,
                    secret_key: b64url(id.key.as_bytes()),
                    public_key: id.public_key(),
                    device_id: id.device_id.clone(),
                };
                let json = serde_json::to_vec_pretty(&file).expect("key file serialises");
                write_private(&path, &json)?;
                tracing::info!(device_id = %id.device_id, "created the OpenClaw device identity");
                Ok(id)
            }
            Err(e) => Err(io_err(&path)(e)),
        }
    }

    fn parse(path: &Path, bytes: &[u8]) -> Result<DeviceIdentity, IdentityError> {
        let corrupt = |reason: String| IdentityError::Corrupt {
            path: path.to_path_buf(),
            reason,
        };
        let file: KeyFile = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
        if file.version != 1 {
            return Err(corrupt(format!("unknown version {}", file.version)));
        }
        let seed = un_b64url(&file.secret_key, "secret key")?;
        let seed: [u8; 32] = seed
            .try_into()
            .map_err(|_| corrupt("the secret key is not 32 bytes".into()))?;
        let id = Self::from_key(SigningKey::from_bytes(&seed));
        if id.public_key() != file.public_key || id.device_id != file.device_id {
            return Err(corrupt(
                "the public key or device id does not match the secret key".into(),
            ));
        }
        Ok(id)
    }

    /// An identity from a known seed (tests, fixtures).
    pub fn from_seed(seed: [u8; 32]) -> DeviceIdentity {
        Self::from_key(SigningKey::from_bytes(&seed))
    }

    fn from_key(key: SigningKey) -> DeviceIdentity {
        let device_id = device_id_of(key.verifying_key().as_bytes());
        DeviceIdentity { key, device_id }
    }

    /// Lowercase hex SHA-256 of the raw public key.
    pub fn device_id(&self) -> &str {
        &self.device_id
    }

    /// The raw public key, base64url without padding.
    pub fn public_key(&self) -> String {
        b64url(self.key.verifying_key().as_bytes())
    }

    /// Sign `payload`; base64url without padding.
    pub fn sign(&self, payload: &str) -> String {
        b64url(&self.key.sign(payload.as_bytes()).to_bytes())
    }
}

/// Check `signature` (base64url) over `payload` with `public_key` (base64url, raw 32 bytes).
pub fn verify(public_key: &str, payload: &str, signature: &str) -> Result<(), IdentityError> {
    let pk: [u8; 32] = un_b64url(public_key, "public key")?
        .try_into()
        .map_err(|_| IdentityError::BadKey { what: "public key" })?;
    let pk =
        VerifyingKey::from_bytes(&pk).map_err(|_| IdentityError::BadKey { what: "public key" })?;
    let sig: [u8; 64] = un_b64url(signature, "signature")?
        .try_into()
        .map_err(|_| IdentityError::BadKey { what: "signature" })?;
    pk.verify(payload.as_bytes(), &Signature::from_bytes(&sig))
        .map_err(|_| IdentityError::BadSignature)
}

/// The fields a `connect` signature covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignedFields<'a> {
    pub device_id: &'a str,
    pub client_id: &'a str,
    pub client_mode: &'a str,
    pub role: &'a str,
    pub scopes: &'a [String],
    /// The challenge `ts`.
    pub signed_at: u64,
    /// The auth token sent (shared token or device token), empty when none.
    pub token: &'a str,
    /// The challenge nonce.
    pub nonce: &'a str,
    pub platform: &'a str,
    pub device_family: &'a str,
}

impl SignedFields<'_> {
    /// The v3 payload (the one this client signs).
    pub fn v3(&self) -> String {
        format!(
            "v3|{}|{}|{}|{}|{}|{}|{}|{}|{}|{}",
            self.device_id,
            self.client_id,
            self.client_mode,
            self.role,
            self.scopes.join(","),
            self.signed_at,
            self.token,
            self.nonce,
            self.platform.to_lowercase(),
            self.device_family.to_lowercase(),
        )
    }

    /// The v2 payload (no platform / device family); the gateway still accepts it.
    pub fn v2(&self) -> String {
        format!(
            "v2|{}|{}|{}|{}|{}|{}|{}|{}",
            self.device_id,
            self.client_id,
            self.client_mode,
            self.role,
            self.scopes.join(","),
            self.signed_at,
            self.token,
            self.nonce,
        )
    }
}

// ------------------------------------------------------------------------------------------
// Device token
// ------------------------------------------------------------------------------------------

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct TokenFile {
    version: u32,
    /// The gateway URL the token was issued by.
    url: String,
    /// SHA-256 (hex) of the shared token in force when it was issued (never the token itself).
    shared_token_sha256: String,
    device_token: String,
}

fn fingerprint(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// The device token a `hello-ok` issued, persisted 0600 and bound to (url, shared token).
#[derive(Debug, Clone)]
pub struct DeviceTokenStore {
    path: PathBuf,
}

impl DeviceTokenStore {
    pub fn new(dir: &Path) -> DeviceTokenStore {
        DeviceTokenStore {
            path: dir.join(DEVICE_TOKEN_FILE),
        }
    }

    /// The stored device token, if it was issued under this `url` and shared `token`. A token
    /// issued under other settings is deleted (a settings change discards it).
    pub fn load(&self, url: &str, token: &str) -> Option<String> {
        let bytes = std::fs::read(&self.path).ok()?;
        let file: TokenFile = match serde_json::from_slice(&bytes) {
            Ok(f) => f,
            Err(e) => {
                tracing::warn!(error = %e, "stored device token unreadable; discarding it");
                self.clear();
                return None;
            }
        };
        if file.version == 1 && file.url == url && file.shared_token_sha256 == fingerprint(token) {
            Some(file.device_token)
        } else {
            tracing::info!("gateway url or token changed; discarding the stored device token");
            self.clear();
            None
        }
    }

    pub fn save(&self, url: &str, token: &str, device_token: &str) -> Result<(), IdentityError> {
        let file = TokenFile {
            version: 1,
            url: url.to_string(),
            shared_token_sha256: fingerprint(token),
            device_token: device_token.to_string(),
        };
        write_private(
            &self.path,
            &serde_json::to_vec_pretty(&file).expect("token file serialises"),
        )
    }

    pub fn clear(&self) {
        match std::fs::remove_file(&self.path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(error = %e, "cannot remove the stored device token"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_pair_persists_0600_and_reloads() {
        let dir = tempfile::tempdir().unwrap();
        let a = DeviceIdentity::load_or_create(dir.path()).unwrap();
        let b = DeviceIdentity::load_or_create(dir.path()).unwrap();
        assert_eq!(a.device_id(), b.device_id());
        assert_eq!(a.public_key(), b.public_key());
        assert_eq!(a.device_id().len(), 64);
        assert!(a
            .device_id()
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(dir.path().join(KEY_FILE))
                .unwrap()
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        let sig = a.sign("hello");
        assert!(!sig.contains('=') && !sig.contains('+') && !sig.contains('/'));
        verify(&b.public_key(), "hello", &sig).unwrap();
        assert!(matches!(
            verify(&b.public_key(), "hellO", &sig),
            Err(IdentityError::BadSignature)
        ));
    }

    #[test]
    fn damaged_key_file_is_an_error_not_a_new_identity() {
        let dir = tempfile::tempdir().unwrap();
        let a = DeviceIdentity::load_or_create(dir.path()).unwrap();
        let path = dir.path().join(KEY_FILE);
        let text = std::fs::read_to_string(&path).unwrap();
        let other = DeviceIdentity::from_seed([7; 32]);
        std::fs::write(&path, text.replace(&a.public_key(), &other.public_key())).unwrap();
        let err = DeviceIdentity::load_or_create(dir.path()).unwrap_err();
        assert_eq!(err.code(), "identity_corrupt");
    }

    #[test]
    fn device_id_is_sha256_of_raw_public_key() {
        // RFC 8032 test 1: secret 9d61b1..., public d75a98...
        let seed: [u8; 32] = [
            0x9d, 0x61, 0xb1, 0x9d, 0xef, 0xfd, 0x5a, 0x60, 0xba, 0x84, 0x4a, 0xf4, 0x92, 0xec,
            0x2c, 0xc4, 0x44, 0x49, 0xc5, 0x69, 0x7b, 0x32, 0x69, 0x19, 0x70, 0x3b, 0xac, 0x03,
            0x1c, 0xae, 0x7f, 0x60,
        ];
        let id = DeviceIdentity::from_seed(seed);
        assert_eq!(
            id.public_key(),
            "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"
        );
        let expected = device_id_of(&[
            0xd7, 0x5a, 0x98, 0x01, 0x82, 0xb1, 0x0a, 0xb7, 0xd5, 0x4b, 0xfe, 0xd3, 0xc9, 0x64,
            0x07, 0x3a, 0x0e, 0xe1, 0x72, 0xf3, 0xda, 0xa6, 0x23, 0x25, 0xaf, 0x02, 0x1a, 0x68,
            0xf7, 0x07, 0x51, 0x1a,
        ]);
        assert_eq!(id.device_id(), expected);
    }

    #[test]
    fn v3_payload_lowercases_platform_and_family() {
        let scopes = vec!["operator.read".to_string(), "operator.write".to_string()];
        let f = SignedFields {
            device_id: "d",
            client_id: "gateway-client",
            client_mode: "ui",
            role: "operator",
            scopes: &scopes,
            signed_at: 12,
            token: "",
            nonce: "n",
            platform: "MacOS",
            device_family: "Mac",
        };
        assert_eq!(
            f.v3(),
            "v3|d|gateway-client|ui|operator|operator.read,operator.write|12||n|macos|mac"
        );
        assert_eq!(
            f.v2(),
            "v2|d|gateway-client|ui|operator|operator.read,operator.write|12||n"
        );
    }

    #[test]
    fn device_token_is_discarded_when_url_or_token_change() {
        let dir = tempfile::tempdir().unwrap();
        let store = DeviceTokenStore::new(dir.path());
        store.save("ws://127.0.0.1:1", "shared", "dev-tok").unwrap();
        let raw = std::fs::read_to_string(dir.path().join(DEVICE_TOKEN_FILE)).unwrap();
        assert!(!raw.contains("shared\""), "the shared token is not stored");
        assert_eq!(
            store.load("ws://127.0.0.1:1", "shared").as_deref(),
            Some("dev-tok")
        );
        assert_eq!(store.load("ws://127.0.0.1:1", "other"), None);
        // ...and it is gone for good, even with the old settings back.
        assert_eq!(store.load("ws://127.0.0.1:1", "shared"), None);
        store.save("ws://127.0.0.1:1", "shared", "dev-tok").unwrap();
        assert_eq!(store.load("ws://127.0.0.1:2", "shared"), None);
        assert_eq!(store.load("ws://127.0.0.1:1", "shared"), None);
    }
}
