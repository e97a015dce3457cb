//! BYO end-to-end encryption, wire-compatible with both real relay plugins (the Hermes BYO
//! plugin and the OpenClaw channel plugin in `sse` transport).
//!
//! - Keys: X25519 ([`KeyPair`]; the stored secret is the raw 32 bytes, clamped by X25519 itself).
//! - Envelope key ([`EnvelopeKey::derive`]): HKDF-SHA256 of the shared secret, no salt, info
//!   [`HKDF_INFO`], 32 bytes. Both sides derive the same key, so both directions use it.
//! - [`Envelope`]: `{version, sender_role, message_id, session_id, correlation_id, content_type,
//!   nonce, ciphertext}`; XChaCha20-Poly1305 with a 24-byte nonce, the 16-byte tag appended to
//!   the ciphertext, both standard base64 **with** padding (anything else is refused).
//! - AAD: the compact JSON object of exactly `content_type, correlation_id, message_id,
//!   sender_role, session_id, version` in that order. The two plugins serialise it differently
//!   ([`Dialect`]): Hermes (Python `json.dumps`, `ensure_ascii`) escapes every character outside
//!   `0x20..=0x7e` as `\uXXXX`; OpenClaw (`JSON.stringify`) writes them raw. The two agree on
//!   printable ASCII, so every AAD field the desktop seals is printable ASCII
//!   ([`EnvelopeKey::try_seal`] refuses anything else with [`CryptoError::NonAsciiAad`]).
//!
//! The desktop opens only envelopes a plugin sealed ([`EnvelopeKey::open`] refuses a reflected
//! `sender_role: "desktop"` envelope); replay of a `message_id` is the guard's
//! ([`super::replay`]), not this module's.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use chacha20poly1305::aead::{Aead, KeyInit, Payload};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use hkdf::Hkdf;
use rand::RngCore;
use serde::{Deserialize, Serialize};
use sha2::Sha256;
use std::fmt;
use x25519_dalek::{PublicKey, StaticSecret};
use zeroize::{Zeroize, Zeroizing};

/// The only envelope version either plugin speaks.
pub const VERSION: &str = "static_v1";
/// HKDF-SHA256 `info` of the envelope key.
pub const HKDF_INFO: &[u8] = b"stagewhisper-byo-envelope-v1";
/// XChaCha20 nonce length.
pub const NONCE_LEN: usize = 24;
/// Poly1305 tag length (appended to the ciphertext).
pub const TAG_LEN: usize = 16;

/// `sender_role` of what the desktop seals.
pub const ROLE_DESKTOP: &str = "desktop";
/// `sender_role` of what a plugin seals.
pub const ROLE_PLUGIN: &str = "plugin";

/// Envelope content types (`content_type`).
pub mod content_type {
    /// A reasoning job's payload (desktop → plugin).
    pub const REASONING_INPUT: &str = "reasoning_input";
    /// A reasoning job's result (plugin → desktop).
    pub const REASONING_OUTPUT: &str = "reasoning_output";
    /// A chat message, both directions.
    pub const TASK_CONTENT: &str = "task_content";
    pub const TASK_REPLY: &str = "task_reply";
    pub const TOOL_INTENT: &str = "tool_intent";
    pub const TOOL_RESULT: &str = "tool_result";
}

/// How a plugin serialises the AAD (which plugin paired decides).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// Python `json.dumps(separators=(",", ":"))` with `ensure_ascii`: every character outside
    /// `0x20..=0x7e` becomes `\uXXXX` (lowercase hex, surrogate pairs above the BMP).
    Hermes,
    /// `JSON.stringify`: control characters escaped, everything else raw (UTF-8).
    OpenClaw,
}

impl Dialect {
    /// From the integration's `provider_kind` (`hermes`, `openclaw`).
    pub fn from_provider_kind(kind: &str) -> Option<Dialect> {
        match kind {
            "hermes" => Some(Dialect::Hermes),
            "openclaw" => Some(Dialect::OpenClaw),
            _ => None,
        }
    }

    pub fn provider_kind(self) -> &'static str {
        match self {
            Dialect::Hermes => "hermes",
            Dialect::OpenClaw => "openclaw",
        }
    }
}

/// Why a key, an envelope or a seal was refused. [`CryptoError::code`] is stable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CryptoError {
    #[error("the key is not 32 bytes")]
    BadKey,
    #[error("the peer's public key is a low-order point (no shared secret)")]
    LowOrderKey,
    #[error("`{0}` is not standard base64 with padding")]
    BadBase64(&'static str),
    #[error("the nonce is {0} bytes, not 24")]
    BadNonce(usize),
    #[error("unsupported envelope version {0:?}")]
    BadVersion(String),
    #[error("sender_role {0:?} is not what this side accepts")]
    BadSenderRole(String),
    #[error("not an envelope: {0}")]
    BadEnvelope(String),
    #[error("the envelope does not open with this key (tampered, truncated or another key)")]
    Decrypt,
    #[error("AAD field `{0}` is not printable ASCII (the two plugins would build different AAD)")]
    NonAsciiAad(&'static str),
}

impl CryptoError {
    pub fn code(&self) -> &'static str {
        match self {
            CryptoError::BadKey => "bad_key",
            CryptoError::LowOrderKey => "low_order_key",
            CryptoError::BadBase64(_) => "bad_base64",
            CryptoError::BadNonce(_) => "bad_nonce",
            CryptoError::BadVersion(_) => "bad_version",
            CryptoError::BadSenderRole(_) => "bad_sender_role",
            CryptoError::BadEnvelope(_) => "bad_envelope",
            CryptoError::Decrypt => "decryption_error",
            CryptoError::NonAsciiAad(_) => "non_ascii_aad",
        }
    }
}

/// Standard base64 with canonical padding (what both plugins write); anything else is refused.
fn b64_decode(field: &'static str, s: &str) -> Result<Vec<u8>, CryptoError> {
    STANDARD
        .decode(s.as_bytes())
        .map_err(|_| CryptoError::BadBase64(field))
}

fn b64_32(field: &'static str, s: &str) -> Result<Zeroizing<[u8; 32]>, CryptoError> {
    let v = Zeroizing::new(b64_decode(field, s)?);
    let arr: [u8; 32] = v.as_slice().try_into().map_err(|_| CryptoError::BadKey)?;
    Ok(Zeroizing::new(arr))
}

/// An X25519 key pair (the desktop's, or in tests a plugin's).
pub struct KeyPair {
    secret: StaticSecret,
    public: PublicKey,
}

impl KeyPair {
    pub fn generate() -> KeyPair {
        let secret = StaticSecret::random_from_rng(rand::rngs::OsRng);
        let public = PublicKey::from(&secret);
        KeyPair { secret, public }
    }

    /// From the stored secret (standard base64 of the raw 32 bytes, as both plugins store it).
    pub fn from_secret_b64(s: &str) -> Result<KeyPair, CryptoError> {
        let bytes = b64_32("secret_key", s.trim())?;
        let secret = StaticSecret::from(*bytes);
        let public = PublicKey::from(&secret);
        Ok(KeyPair { secret, public })
    }

    /// The secret as stored (raw 32 bytes, standard base64); wiped when dropped.
    pub fn secret_b64(&self) -> Zeroizing<String> {
        Zeroizing::new(STANDARD.encode(self.secret.as_bytes()))
    }

    pub fn public_bytes(&self) -> [u8; 32] {
        *self.public.as_bytes()
    }

    /// The public key as the pairing answer carries it (`byo_public_key`).
    pub fn public_b64(&self) -> String {
        STANDARD.encode(self.public.as_bytes())
    }
}

impl fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyPair")
            .field("public", &self.public_b64())
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// A peer's public key from the wire (`plugin_public_key`): standard base64 of 32 bytes, not a
/// low-order point (those give an all-zero shared secret; refuse them at pairing).
pub fn public_key_from_b64(s: &str) -> Result<[u8; 32], CryptoError> {
    let bytes = b64_decode("public_key", s)?;
    let key: [u8; 32] = bytes
        .as_slice()
        .try_into()
        .map_err(|_| CryptoError::BadKey)?;
    // A clamped scalar is a multiple of the cofactor 8, so it maps every low-order point (on
    // the curve or its twist) to zero, and no other point.
    let probe = StaticSecret::from([1u8; 32]);
    if !probe
        .diffie_hellman(&PublicKey::from(key))
        .was_contributory()
    {
        return Err(CryptoError::LowOrderKey);
    }
    Ok(key)
}

/// The symmetric envelope key of one pairing (both directions). Wiped when dropped.
#[derive(Clone)]
pub struct EnvelopeKey([u8; 32]);

impl Drop for EnvelopeKey {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}

impl fmt::Debug for EnvelopeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("EnvelopeKey(<redacted>)")
    }
}

/// What the AAD covers besides `version`, `sender_role` and `message_id` (which sealing fills
/// in). Every field must be printable ASCII (UUIDs and ids the desktop chooses).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Meta<'a> {
    pub session_id: &'a str,
    pub correlation_id: &'a str,
    pub content_type: &'a str,
}

/// The wire envelope (field names and order as both plugins write them). Unknown fields are
/// ignored when reading; a missing `version` reads as empty and is refused by
/// [`EnvelopeKey::open`] as [`CryptoError::BadVersion`].
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
pub struct Envelope {
    #[serde(default)]
    pub version: String,
    pub sender_role: String,
    pub message_id: String,
    pub session_id: String,
    pub correlation_id: String,
    pub content_type: String,
    pub nonce: String,
    pub ciphertext: String,
}

impl Envelope {
    /// An envelope from a JSON value (a job result's `output.envelope`).
    pub fn from_value(v: &serde_json::Value) -> Result<Envelope, CryptoError> {
        Envelope::deserialize(v).map_err(|e| CryptoError::BadEnvelope(e.to_string()))
    }

    /// An envelope from its JSON text (a BYO chat reply's `content` is one).
    pub fn from_json(s: &str) -> Result<Envelope, CryptoError> {
        serde_json::from_str(s).map_err(|e| CryptoError::BadEnvelope(e.to_string()))
    }

    /// The compact JSON text (a sealed chat message's `content`).
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("an envelope serialises")
    }

    /// The AAD bytes of this envelope in `dialect`.
    pub fn aad(&self, dialect: Dialect) -> Vec<u8> {
        aad(
            [
                ("content_type", &self.content_type),
                ("correlation_id", &self.correlation_id),
                ("message_id", &self.message_id),
                ("sender_role", &self.sender_role),
                ("session_id", &self.session_id),
                ("version", &self.version),
            ],
            dialect,
        )
    }
}

/// The AAD: `{"content_type":…,"correlation_id":…,"message_id":…,"sender_role":…,
/// "session_id":…,"version":…}`, compact, each value escaped the way `dialect` does.
fn aad(fields: [(&str, &String); 6], dialect: Dialect) -> Vec<u8> {
    let mut out = String::with_capacity(160);
    out.push('{');
    for (i, (name, value)) in fields.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('"');
        out.push_str(name);
        out.push_str("\":");
        push_json_string(&mut out, value, dialect);
    }
    out.push('}');
    out.into_bytes()
}

fn push_u_escape(out: &mut String, unit: u16) {
    use fmt::Write as _;
    let _ = write!(out, "\\u{unit:04x}");
}

/// One JSON string literal as Python's `json.dumps` (ensure_ascii) or `JSON.stringify` writes it.
fn push_json_string(out: &mut String, s: &str, dialect: Dialect) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => push_u_escape(out, c as u16),
            ' '..='~' => out.push(c),
            c => match dialect {
                Dialect::OpenClaw => out.push(c),
                Dialect::Hermes => {
                    let mut units = [0u16; 2];
                    for unit in c.encode_utf16(&mut units) {
                        push_u_escape(out, *unit);
                    }
                }
            },
        }
    }
    out.push('"');
}

fn printable_ascii(s: &str) -> bool {
    s.bytes().all(|b| (0x20..=0x7e).contains(&b))
}

impl EnvelopeKey {
    /// HKDF-SHA256(X25519(ours, peer), salt none, info [`HKDF_INFO`]) → 32 bytes. A low-order
    /// peer key (all-zero shared secret) is refused.
    pub fn derive(ours: &KeyPair, peer_public: &[u8; 32]) -> Result<EnvelopeKey, CryptoError> {
        let shared = ours.secret.diffie_hellman(&PublicKey::from(*peer_public));
        if !shared.was_contributory() {
            return Err(CryptoError::LowOrderKey);
        }
        let hk = Hkdf::<Sha256>::new(None, shared.as_bytes());
        let mut okm = [0u8; 32];
        hk.expand(HKDF_INFO, &mut okm)
            .expect("32 bytes is a valid HKDF-SHA256 length");
        Ok(EnvelopeKey(okm))
    }

    /// A key given as bytes (tests, vectors).
    pub fn from_bytes(bytes: [u8; 32]) -> EnvelopeKey {
        EnvelopeKey(bytes)
    }

    /// A key given as standard base64 (tests, vectors).
    pub fn from_b64(s: &str) -> Result<EnvelopeKey, CryptoError> {
        Ok(EnvelopeKey(*b64_32("envelope_key", s)?))
    }

    /// Seals `plaintext` as the desktop: `sender_role: "desktop"`, a fresh UUID v4
    /// `message_id`, a random 24-byte nonce. Any AAD character outside printable ASCII (which
    /// the desktop never chooses: its ids are UUIDs) is written as `%XX` of its UTF-8 bytes, so
    /// the envelope opens in both dialects; [`EnvelopeKey::try_seal`] refuses such fields instead.
    pub fn seal(&self, meta: &Meta, plaintext: &[u8]) -> Envelope {
        match self.try_seal(meta, plaintext) {
            Ok(env) => env,
            Err(_) => {
                tracing::warn!("BYO seal: a non-ASCII AAD field was percent-encoded");
                let (s, c, t) = (
                    ascii_only(meta.session_id),
                    ascii_only(meta.correlation_id),
                    ascii_only(meta.content_type),
                );
                let meta = Meta {
                    session_id: &s,
                    correlation_id: &c,
                    content_type: &t,
                };
                self.try_seal(&meta, plaintext)
                    .expect("percent-encoded fields are printable ASCII")
            }
        }
    }

    /// [`EnvelopeKey::seal`], refusing AAD fields that are not printable ASCII.
    pub fn try_seal(&self, meta: &Meta, plaintext: &[u8]) -> Result<Envelope, CryptoError> {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let message_id = uuid::Uuid::new_v4().to_string();
        self.seal_with(ROLE_DESKTOP, &message_id, &nonce, meta, plaintext)
    }

    /// Test-only: seals with a pinned role, `message_id` and nonce (the vectors'; a plugin's
    /// side in tests). Never use a nonce twice with one key.
    #[doc(hidden)]
    pub fn seal_with_nonce(
        &self,
        sender_role: &str,
        message_id: &str,
        nonce: &[u8; NONCE_LEN],
        meta: &Meta,
        plaintext: &[u8],
    ) -> Result<Envelope, CryptoError> {
        self.seal_with(sender_role, message_id, nonce, meta, plaintext)
    }

    fn seal_with(
        &self,
        sender_role: &str,
        message_id: &str,
        nonce: &[u8; NONCE_LEN],
        meta: &Meta,
        plaintext: &[u8],
    ) -> Result<Envelope, CryptoError> {
        for (name, value) in [
            ("session_id", meta.session_id),
            ("correlation_id", meta.correlation_id),
            ("content_type", meta.content_type),
            ("message_id", message_id),
            ("sender_role", sender_role),
        ] {
            if !printable_ascii(value) {
                return Err(CryptoError::NonAsciiAad(name));
            }
        }
        let mut env = Envelope {
            version: VERSION.to_string(),
            sender_role: sender_role.to_string(),
            message_id: message_id.to_string(),
            session_id: meta.session_id.to_string(),
            correlation_id: meta.correlation_id.to_string(),
            content_type: meta.content_type.to_string(),
            nonce: STANDARD.encode(nonce),
            ciphertext: String::new(),
        };
        // Printable ASCII: both dialects give the same bytes.
        let aad = env.aad(Dialect::Hermes);
        let ct = self
            .cipher()
            .encrypt(
                XNonce::from_slice(nonce),
                Payload {
                    msg: plaintext,
                    aad: &aad,
                },
            )
            .map_err(|_| CryptoError::Decrypt)?;
        env.ciphertext = STANDARD.encode(ct);
        Ok(env)
    }

    fn cipher(&self) -> XChaCha20Poly1305 {
        XChaCha20Poly1305::new(chacha20poly1305::Key::from_slice(&self.0))
    }

    /// Opens an envelope a plugin sealed (`sender_role: "plugin"`; a reflected desktop
    /// envelope is refused), its AAD built the way `dialect` builds it.
    pub fn open(&self, env: &Envelope, dialect: Dialect) -> Result<Vec<u8>, CryptoError> {
        self.open_from(env, dialect, ROLE_PLUGIN)
    }

    /// Opens an envelope whose `sender_role` must be `expected_role` (tests play the plugin
    /// side with `"desktop"`).
    pub fn open_from(
        &self,
        env: &Envelope,
        dialect: Dialect,
        expected_role: &str,
    ) -> Result<Vec<u8>, CryptoError> {
        if env.version != VERSION {
            return Err(CryptoError::BadVersion(env.version.clone()));
        }
        if env.sender_role != expected_role {
            return Err(CryptoError::BadSenderRole(env.sender_role.clone()));
        }
        self.open_unchecked_role(env, dialect)
    }

    /// Opens without looking at `sender_role` (what the plugins do; the vectors' own check).
    #[doc(hidden)]
    pub fn open_unchecked_role(
        &self,
        env: &Envelope,
        dialect: Dialect,
    ) -> Result<Vec<u8>, CryptoError> {
        if env.version != VERSION {
            return Err(CryptoError::BadVersion(env.version.clone()));
        }
        let nonce = b64_decode("nonce", &env.nonce)?;
        if nonce.len() != NONCE_LEN {
            return Err(CryptoError::BadNonce(nonce.len()));
        }
        let ct = b64_decode("ciphertext", &env.ciphertext)?;
        if ct.len() < TAG_LEN {
            return Err(CryptoError::Decrypt);
        }
        let aad = env.aad(dialect);
        self.cipher()
            .decrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: &ct,
                    aad: &aad,
                },
            )
            .map_err(|_| CryptoError::Decrypt)
    }
}

/// Printable ASCII kept, everything else as `%XX` of its UTF-8 bytes (`%` itself included).
fn ascii_only(s: &str) -> String {
    use fmt::Write as _;
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
#[path = "crypto_tests.rs"]
pub(crate) mod tests;

#[cfg(test)]
#[path = "crypto_nonascii_tests.rs"]
mod openclaw_nonascii;
