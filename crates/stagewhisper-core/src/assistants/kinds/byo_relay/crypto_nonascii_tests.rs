//! The OpenClaw dialect against the real plugin's own code: every entry of
//! `tests/fixtures/byo/openclaw-nonascii.json` (made by @stagewhisper/stagewhisper's bundled
//! crypto module with `tests/byo/gen_vectors.mjs`): envelopes the plugin sealed with non-ASCII
//! session, correlation and content-type fields open here with the AAD bytes the plugin built,
//! and envelopes the desktop sealed (the `byo_seal` example) are what the plugin opened.

use super::*;
use serde_json::Value;

fn fixture() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/byo/openclaw-nonascii.json"
    );
    let text = std::fs::read_to_string(path).expect("the non-ASCII vectors fixture");
    serde_json::from_str(&text).expect("the fixture is JSON")
}

fn s<'a>(v: &'a Value, field: &str) -> &'a str {
    v[field]
        .as_str()
        .unwrap_or_else(|| panic!("`{field}` missing in {v}"))
}

fn hex(s: &str) -> Vec<u8> {
    hex::decode(s).unwrap_or_else(|e| panic!("hex {s:?}: {e}"))
}

fn cases<'a>(v: &'a Value, section: &str) -> &'a Vec<Value> {
    let l = v[section].as_array().expect("a list section");
    assert!(!l.is_empty(), "section {section} is empty");
    l
}

fn key(v: &Value) -> EnvelopeKey {
    EnvelopeKey::from_b64(s(v, "envelope_key_b64")).unwrap()
}

#[test]
fn both_sides_derive_the_plugins_key() {
    let v = fixture();
    let desktop = KeyPair::from_secret_b64(s(&v["keypairs"]["desktop"], "secret_b64")).unwrap();
    let plugin = KeyPair::from_secret_b64(s(&v["keypairs"]["plugin"], "secret_b64")).unwrap();
    assert_eq!(
        desktop.public_b64(),
        s(&v["keypairs"]["desktop"], "public_b64")
    );
    assert_eq!(
        plugin.public_b64(),
        s(&v["keypairs"]["plugin"], "public_b64")
    );
    let ours = EnvelopeKey::derive(&desktop, &plugin.public_bytes()).unwrap();
    // The derived key opens what the plugin sealed with its own derived key.
    let first = &cases(&v, "plugin_sealed")[0];
    let env = Envelope::from_json(s(first, "envelope_json")).unwrap();
    assert_eq!(
        ours.open(&env, Dialect::OpenClaw).unwrap(),
        key(&v).open(&env, Dialect::OpenClaw).unwrap()
    );
}

#[test]
fn envelopes_the_plugin_sealed_with_non_ascii_fields_open_in_its_dialect() {
    let v = fixture();
    let key = key(&v);
    let mut opened = 0;
    for c in cases(&v, "plugin_sealed") {
        let name = s(c, "name");
        match s(c, "expect") {
            "opens" => {
                let env = Envelope::from_json(s(c, "envelope_json"))
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(env.session_id, s(c, "session_id"), "{name}");
                assert_eq!(env.correlation_id, s(c, "correlation_id"), "{name}");
                assert_eq!(env.content_type, s(c, "content_type"), "{name}");
                assert_eq!(env.sender_role, "plugin", "{name}");
                // Byte for byte the AAD the plugin's `buildAad` made.
                assert_eq!(
                    String::from_utf8_lossy(&env.aad(Dialect::OpenClaw)),
                    String::from_utf8_lossy(&hex(s(c, "aad_hex"))),
                    "{name}"
                );
                let pt = key
                    .open(&env, Dialect::OpenClaw)
                    .unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(pt, s(c, "plaintext_utf8").as_bytes(), "{name}");
                // The other dialect builds other AAD bytes for anything outside printable
                // ASCII (the case of only ASCII escapes gives the same bytes in both).
                let all_ascii = [&env.session_id, &env.correlation_id, &env.content_type]
                    .iter()
                    .all(|f| f.is_ascii() && !f.contains('\u{7f}'));
                if all_ascii {
                    assert_eq!(
                        env.aad(Dialect::Hermes),
                        env.aad(Dialect::OpenClaw),
                        "{name}"
                    );
                } else {
                    assert_ne!(
                        env.aad(Dialect::Hermes),
                        env.aad(Dialect::OpenClaw),
                        "{name}"
                    );
                    let err = key.open(&env, Dialect::Hermes).unwrap_err();
                    assert_eq!(err.code(), "decryption_error", "{name}");
                }
                opened += 1;
            }
            "refused:bad_envelope" => {
                // A lone surrogate is valid JavaScript JSON text, not Unicode: refused with a
                // stable code, never half-read.
                assert!(c.get("session_id_json").is_some(), "{name}");
                let err = Envelope::from_json(s(c, "envelope_json")).unwrap_err();
                assert_eq!(err.code(), "bad_envelope", "{name}");
            }
            other => panic!("{name}: unknown expectation {other:?}"),
        }
    }
    assert!(opened >= 7, "only {opened} plugin-sealed envelopes opened");
}

#[test]
fn what_the_desktop_sealed_is_what_the_plugin_opened() {
    let v = fixture();
    let key = key(&v);
    for c in cases(&v, "desktop_sealed") {
        let name = s(c, "name");
        let wire = s(c, "envelope_json");
        let env = Envelope::from_json(wire).unwrap();
        // The plugin's `open` gave back exactly the plaintext the desktop sealed.
        assert_eq!(s(c, "plaintext_utf8"), s(c, "plaintext"), "{name}");
        assert_eq!(env.sender_role, "desktop", "{name}");
        assert_eq!(
            env.aad(Dialect::OpenClaw),
            hex(s(c, "aad_hex_by_plugin")),
            "{name}"
        );
        // Today's seal writes the same metadata for these inputs (non-ASCII percent-encoded)...
        let meta_in = Meta {
            session_id: s(c, "session_id"),
            correlation_id: s(c, "correlation_id"),
            content_type: s(c, "content_type"),
        };
        let fresh = key.seal(&meta_in, s(c, "plaintext").as_bytes());
        assert_eq!(
            (
                &fresh.session_id,
                &fresh.correlation_id,
                &fresh.content_type
            ),
            (&env.session_id, &env.correlation_id, &env.content_type),
            "{name}"
        );
        // ...and, with the recorded nonce and message_id, the very bytes the plugin opened.
        let nonce: [u8; NONCE_LEN] = STANDARD
            .decode(&env.nonce)
            .unwrap()
            .try_into()
            .expect("a 24-byte nonce");
        let meta = Meta {
            session_id: &env.session_id,
            correlation_id: &env.correlation_id,
            content_type: &env.content_type,
        };
        let again = key
            .seal_with_nonce(
                "desktop",
                &env.message_id,
                &nonce,
                &meta,
                s(c, "plaintext").as_bytes(),
            )
            .unwrap();
        assert_eq!(again.to_json(), wire, "{name}");
    }
}
