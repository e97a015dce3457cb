//! BYO relay envelopes (`byo_relay::crypto`): what a plugin posts is read as an [`Envelope`] and
//! opened; the desktop seals its own. Never panics, and:
//! - an envelope read from JSON reads the same from its JSON written again;
//! - its AAD, in both dialects, is JSON naming exactly the envelope's six AAD fields with
//!   their values (Python's `ensure_ascii` form is ASCII only), so the two sides can only differ
//!   in escaping, never in content;
//! - opening anything a fuzzer made up fails with a stable code, never panics;
//! - a seal of arbitrary fields and plaintext opens to the same plaintext in both dialects, is
//!   refused when any AAD field or ciphertext byte changes, and a non-ASCII field is refused by
//!   `try_seal` and percent-encoded by `seal`, which still opens in both dialects.
#![no_main]
use libfuzzer_sys::fuzz_target;
use stagewhisper_core::assistants::kinds::byo_relay::crypto::{Dialect, Envelope, EnvelopeKey, Meta, ROLE_PLUGIN};

const DIALECTS: [Dialect; 2] = [Dialect::Hermes, Dialect::OpenClaw];

fn check_aad(env: &Envelope) {
    for d in DIALECTS {
        let aad = env.aad(d);
        if d == Dialect::Hermes {
            assert!(aad.is_ascii(), "ensure_ascii AAD has a non-ASCII byte");
        }
        let v: serde_json::Value = serde_json::from_slice(&aad).expect("the AAD is JSON");
        let obj = v.as_object().expect("the AAD is an object");
        let fields = [
            ("content_type", &env.content_type),
            ("correlation_id", &env.correlation_id),
            ("message_id", &env.message_id),
            ("sender_role", &env.sender_role),
            ("session_id", &env.session_id),
            ("version", &env.version),
        ];
        assert_eq!(obj.len(), fields.len());
        for (name, value) in fields {
            assert_eq!(obj[name].as_str(), Some(value.as_str()), "AAD field {name}");
        }
    }
}

fn opens(key: &EnvelopeKey, env: &Envelope, plaintext: &[u8], role: &str) {
    for d in DIALECTS {
        assert_eq!(key.open_from(env, d, role).expect("own seal opens"), plaintext);
    }
}

fuzz_target!(|data: &[u8]| {
    let key = EnvelopeKey::from_bytes([7u8; 32]);

    // 1. The bytes as a posted envelope.
    if let Ok(text) = std::str::from_utf8(data) {
        if let Ok(env) = Envelope::from_json(text) {
            let again = Envelope::from_json(&env.to_json()).expect("written again");
            assert_eq!(again, env);
            check_aad(&env);
            for d in DIALECTS {
                if let Err(e) = key.open(&env, d) {
                    assert!(!e.code().is_empty());
                }
            }
        }
    }

    // 2. The bytes as fields and plaintext, split on 0xFF: session, correlation, content type,
    // then the plaintext; the nonce is the first 24 bytes (zero-padded).
    let mut parts = data.splitn(4, |b| *b == 0xFF);
    let session = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let correlation = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let ctype = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let plaintext = parts.next().unwrap_or_default();
    let mut nonce = [0u8; 24];
    for (n, b) in nonce.iter_mut().zip(data) {
        *n = *b;
    }
    let meta = Meta {
        session_id: &session,
        correlation_id: &correlation,
        content_type: &ctype,
    };
    let printable = |s: &str| s.bytes().all(|b| (0x20..=0x7e).contains(&b));
    let ascii = printable(&session) && printable(&correlation) && printable(&ctype);
    match key.seal_with_nonce(ROLE_PLUGIN, "m-1", &nonce, &meta, plaintext) {
        Ok(env) => {
            assert!(ascii, "a non-ASCII AAD field was sealed as it is");
            check_aad(&env);
            opens(&key, &env, plaintext, ROLE_PLUGIN);
            let mut changed = env.clone();
            changed.session_id.push('x');
            for d in DIALECTS {
                assert_eq!(key.open(&changed, d).unwrap_err().code(), "decryption_error");
            }
            // One ciphertext byte flipped (the first: there is always the 16-byte tag).
            use base64::Engine as _;
            let b64 = base64::engine::general_purpose::STANDARD;
            let mut ct = b64.decode(&env.ciphertext).expect("own base64");
            ct[0] ^= 1;
            let mut flipped = env.clone();
            flipped.ciphertext = b64.encode(&ct);
            assert_eq!(
                key.open(&flipped, Dialect::Hermes).unwrap_err().code(),
                "decryption_error"
            );
        }
        Err(e) => {
            assert!(!ascii, "printable fields refused: {e}");
            assert_eq!(e.code(), "non_ascii_aad");
            let env = key.seal(&meta, plaintext);
            check_aad(&env);
            opens(&key, &env, plaintext, "desktop");
        }
    }
});
