//! Every vector of `tests/fixtures/vectors/byo-envelopes.json` (made by the real Hermes plugin's
//! own crypto module): every section is known and every entry of it is checked, so a vector
//! added to the file cannot be skipped silently.

use super::*;
use serde_json::Value;
use std::collections::BTreeSet;

pub(crate) fn vectors() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../tests/fixtures/vectors/byo-envelopes.json"
    );
    let text = std::fs::read_to_string(path).expect("the vectors fixture");
    serde_json::from_str(&text).expect("the vectors fixture is JSON")
}

fn hex(s: &str) -> Vec<u8> {
    hex::decode(s).unwrap_or_else(|e| panic!("hex {s:?}: {e}"))
}

fn str_of<'a>(v: &'a Value, field: &str) -> &'a str {
    v[field]
        .as_str()
        .unwrap_or_else(|| panic!("`{field}` missing in {v}"))
}

fn list<'a>(v: &'a Value, section: &str) -> &'a Vec<Value> {
    let l = v[section].as_array().expect("a list section");
    assert!(!l.is_empty(), "section {section} is empty");
    l
}

fn keypair(v: &Value, name: &str) -> KeyPair {
    KeyPair::from_secret_b64(str_of(&v["keypairs"][name], "secret_b64")).expect("vector secret")
}

/// The envelope key named in an entry's `key` (a `key_agreement` name).
fn key_named(v: &Value, name: &str) -> EnvelopeKey {
    let ka = list(v, "key_agreement")
        .iter()
        .find(|k| k["name"] == name)
        .unwrap_or_else(|| panic!("no key_agreement {name}"));
    EnvelopeKey::from_b64(str_of(ka, "envelope_key_b64")).unwrap()
}

/// An entry's envelope: its `envelope` object, or else its `envelope_json` text.
fn envelope(v: &Value) -> Envelope {
    match v.get("envelope") {
        Some(obj) => Envelope::from_value(obj).expect("an envelope"),
        None => Envelope::from_json(str_of(v, "envelope_json")).expect("an envelope"),
    }
}

#[test]
fn every_section_of_the_file_is_known() {
    let v = vectors();
    let found: BTreeSet<&str> = v.as_object().unwrap().keys().map(|k| k.as_str()).collect();
    let known: BTreeSet<&str> = [
        "title",
        "generated_by",
        "constants",
        "keypairs",
        "key_agreement",
        "envelopes",
        "random_nonce_envelopes",
        "negative",
        "accepted_edge_cases",
        "replay_guard",
        "key_agreement_failures",
        "captured_from_live_run",
    ]
    .into();
    assert_eq!(found, known, "a section was added or removed: test it");
}

#[test]
fn constants_are_the_ones_implemented() {
    let v = vectors();
    let c = &v["constants"];
    assert_eq!(str_of(c, "version"), VERSION);
    assert_eq!(str_of(c, "hkdf_info").as_bytes(), HKDF_INFO);
    let fields: Vec<&str> = c["aad_fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert_eq!(
        fields,
        [
            "content_type",
            "correlation_id",
            "message_id",
            "sender_role",
            "session_id",
            "version"
        ]
    );
}

#[test]
fn keypairs_give_their_public_keys() {
    let v = vectors();
    let pairs = v["keypairs"].as_object().unwrap();
    assert!(pairs.len() >= 4);
    for (name, kp) in pairs {
        let pair = KeyPair::from_secret_b64(str_of(kp, "secret_b64")).unwrap();
        assert_eq!(pair.public_b64(), str_of(kp, "public_b64"), "{name}");
        assert_eq!(pair.public_bytes().to_vec(), hex(str_of(kp, "public_hex")));
        // Stored as given (not clamped): the secret round-trips byte for byte.
        assert_eq!(
            pair.secret_b64().as_str(),
            str_of(kp, "secret_b64"),
            "{name}"
        );
        assert_eq!(
            pair.secret.as_bytes().to_vec(),
            hex(str_of(kp, "secret_hex"))
        );
    }
}

#[test]
fn key_agreement_gives_the_same_key_from_both_sides() {
    let v = vectors();
    for ka in list(&v, "key_agreement") {
        let name = str_of(ka, "name");
        let ours = keypair(&v, str_of(ka, "secret_of"));
        let theirs = keypair(&v, str_of(ka, "public_of"));
        let shared = ours.secret.diffie_hellman(&theirs.public);
        assert_eq!(
            STANDARD.encode(shared.as_bytes()),
            str_of(ka, "x25519_shared_secret_b64"),
            "{name}"
        );
        let (prk, _) = Hkdf::<Sha256>::extract(None, shared.as_bytes());
        assert_eq!(STANDARD.encode(prk), str_of(ka, "hkdf_prk_b64"), "{name}");
        let key = EnvelopeKey::derive(&ours, &theirs.public_bytes()).unwrap();
        assert_eq!(
            key.0.to_vec(),
            hex(str_of(ka, "envelope_key_hex")),
            "{name}"
        );
        assert_eq!(STANDARD.encode(key.0), str_of(ka, "envelope_key_b64"));
        assert_eq!(ka["same_key_from_both_sides"], true);
        let back = EnvelopeKey::derive(&theirs, &ours.public_bytes()).unwrap();
        assert_eq!(back.0, key.0, "{name}: both sides");
    }
}

/// Every pinned-nonce envelope: the exact AAD of the Hermes dialect, the exact ciphertext, the
/// envelope object and its compact JSON; it opens in the dialect(s) that build that AAD.
#[test]
fn pinned_envelopes_reproduce_byte_for_byte_and_open() {
    let v = vectors();
    for e in list(&v, "envelopes") {
        let name = str_of(e, "name");
        let key = key_named(&v, str_of(e, "key"));
        let env = envelope(e);
        let plaintext = hex(str_of(e, "plaintext_hex"));
        assert_eq!(plaintext, str_of(e, "plaintext_utf8").as_bytes(), "{name}");
        for f in [
            "sender_role",
            "session_id",
            "correlation_id",
            "content_type",
            "message_id",
        ] {
            assert_eq!(e["envelope"][f], e[f], "{name}: {f}");
        }
        assert_eq!(env.nonce, str_of(e, "nonce_b64"), "{name}");
        assert_eq!(
            STANDARD.decode(&env.nonce).unwrap(),
            hex(str_of(e, "nonce_hex"))
        );

        // The AAD, both as text and bytes.
        let aad = env.aad(Dialect::Hermes);
        assert_eq!(aad, str_of(e, "aad").as_bytes(), "{name}: Hermes AAD");
        assert_eq!(aad, hex(str_of(e, "aad_hex")), "{name}: Hermes AAD hex");
        let fields = [
            &env.session_id,
            &env.correlation_id,
            &env.content_type,
            &env.message_id,
            &env.sender_role,
        ];
        let ascii = fields.iter().all(|f| printable_ascii(f));
        let oc_aad = env.aad(Dialect::OpenClaw);
        assert_eq!(ascii, oc_aad == aad, "{name}: dialects agree iff ASCII");

        // The ciphertext from a direct AEAD call with that AAD.
        let nonce = STANDARD.decode(&env.nonce).unwrap();
        let ct = key
            .cipher()
            .encrypt(
                XNonce::from_slice(&nonce),
                Payload {
                    msg: &plaintext,
                    aad: &aad,
                },
            )
            .unwrap();
        assert_eq!(ct, hex(str_of(e, "ciphertext_hex")), "{name}: ciphertext");
        assert_eq!(STANDARD.encode(&ct), env.ciphertext, "{name}");

        // Sealing with the pinned inputs gives the same envelope (ASCII AAD), or is refused.
        let meta = Meta {
            session_id: &env.session_id,
            correlation_id: &env.correlation_id,
            content_type: &env.content_type,
        };
        let pinned: [u8; NONCE_LEN] = nonce.as_slice().try_into().unwrap();
        let sealed = key.seal_with_nonce(
            &env.sender_role,
            &env.message_id,
            &pinned,
            &meta,
            &plaintext,
        );
        if ascii {
            let sealed = sealed.unwrap();
            assert_eq!(sealed, env, "{name}: sealed envelope");
            assert_eq!(sealed.to_json(), str_of(e, "envelope_json"), "{name}: JSON");
        } else {
            assert_eq!(sealed.unwrap_err().code(), "non_ascii_aad", "{name}");
        }
        if let Some(j) = e["envelope_json"].as_str() {
            assert_eq!(Envelope::from_json(j).unwrap(), env, "{name}: JSON parses");
        }

        // Opening: Hermes always; OpenClaw only where its AAD is the same bytes.
        let opened = key.open_from(&env, Dialect::Hermes, &env.sender_role);
        assert_eq!(opened.unwrap(), plaintext, "{name}: opens (Hermes)");
        let oc = key.open_from(&env, Dialect::OpenClaw, &env.sender_role);
        if ascii {
            assert_eq!(oc.unwrap(), plaintext, "{name}: opens (OpenClaw)");
        } else {
            assert_eq!(
                oc.unwrap_err(),
                CryptoError::Decrypt,
                "{name}: OpenClaw AAD differs"
            );
        }
        // What the desktop accepts: only the plugin's envelopes.
        let as_desktop = key.open(&env, Dialect::Hermes);
        if env.sender_role == ROLE_PLUGIN {
            assert_eq!(as_desktop.unwrap(), plaintext, "{name}");
        } else {
            assert_eq!(as_desktop.unwrap_err().code(), "bad_sender_role", "{name}");
        }
    }
}

#[test]
fn random_nonce_envelopes_open() {
    let v = vectors();
    for e in list(&v, "random_nonce_envelopes") {
        let name = str_of(e, "name");
        let key = key_named(&v, str_of(e, "key"));
        let env = envelope(e);
        for dialect in [Dialect::Hermes, Dialect::OpenClaw] {
            let got = key.open_unchecked_role(&env, dialect).expect(name);
            assert_eq!(got, str_of(e, "expect_plaintext_utf8").as_bytes(), "{name}");
        }
    }
}

/// The plugin's error for a negative vector, as this module's code.
fn expected_code(plugin_error: &str) -> &'static str {
    if plugin_error.contains("Decryption failed") || plugin_error.contains("negative array length")
    {
        "decryption_error"
    } else if plugin_error.contains("Nonce must be 24 bytes") {
        "bad_nonce"
    } else if plugin_error.contains("Unsupported envelope version") {
        "bad_version"
    } else if plugin_error.contains("binascii.Error") {
        "bad_base64"
    } else {
        panic!("a plugin error this test does not know: {plugin_error}")
    }
}

#[test]
fn negative_envelopes_are_refused_with_the_right_code() {
    let v = vectors();
    for e in list(&v, "negative") {
        let name = str_of(e, "name");
        assert_eq!(str_of(e, "expect"), "error", "{name}");
        let key = key_named(&v, str_of(e, "key"));
        let want = expected_code(str_of(e, "plugin_error"));
        let env = envelope(e);
        for dialect in [Dialect::Hermes, Dialect::OpenClaw] {
            let err = key.open_unchecked_role(&env, dialect).unwrap_err();
            assert_eq!(err.code(), want, "{name}: {err}");
            let err = key.open_from(&env, dialect, &env.sender_role).unwrap_err();
            assert_eq!(err.code(), want, "{name}: {err}");
        }
    }
}

#[test]
fn accepted_edge_cases_open_and_the_desktop_refuses_reflections() {
    let v = vectors();
    for e in list(&v, "accepted_edge_cases") {
        let name = str_of(e, "name");
        assert_eq!(str_of(e, "expect"), "ok");
        let key = key_named(&v, str_of(e, "key"));
        let env = envelope(e);
        let want = str_of(e, "plaintext_utf8").as_bytes();
        for dialect in [Dialect::Hermes, Dialect::OpenClaw] {
            assert_eq!(
                key.open_unchecked_role(&env, dialect).unwrap(),
                want,
                "{name}"
            );
        }
        // The desktop accepts plugin envelopes only; the plugin side (a test) desktop ones.
        let (accepted, refused) = if env.sender_role == ROLE_PLUGIN {
            (ROLE_PLUGIN, ROLE_DESKTOP)
        } else {
            (ROLE_DESKTOP, ROLE_PLUGIN)
        };
        assert_eq!(
            key.open_from(&env, Dialect::Hermes, accepted).unwrap(),
            want
        );
        assert_eq!(
            key.open_from(&env, Dialect::Hermes, refused)
                .unwrap_err()
                .code(),
            "bad_sender_role",
            "{name}"
        );
    }
}

#[test]
fn key_agreement_failures_are_refused_at_pairing() {
    let v = vectors();
    let desktop = keypair(&v, "desktop");
    for e in list(&v, "key_agreement_failures") {
        let name = str_of(e, "name");
        assert_eq!(str_of(e, "outcome"), "error");
        let peer = str_of(e, "peer_public_b64");
        let err = public_key_from_b64(peer).unwrap_err();
        let raw = STANDARD.decode(peer).unwrap();
        if raw.len() == 32 {
            assert_eq!(err, CryptoError::LowOrderKey, "{name}");
            let raw: [u8; 32] = raw.try_into().unwrap();
            assert_eq!(
                EnvelopeKey::derive(&desktop, &raw).unwrap_err(),
                CryptoError::LowOrderKey
            );
        } else {
            assert_eq!(err, CryptoError::BadKey, "{name}");
        }
    }
    // And a real key passes.
    let plugin = str_of(&v["keypairs"]["plugin"], "public_b64");
    assert_eq!(
        public_key_from_b64(plugin).unwrap(),
        keypair(&v, "plugin").public_bytes()
    );
}

#[test]
fn envelopes_captured_from_a_live_run_open() {
    let v = vectors();
    for e in list(&v, "captured_from_live_run") {
        let path = str_of(e, "path");
        let key = EnvelopeKey::from_b64(str_of(e, "envelope_key_b64")).unwrap();
        let env = envelope(e);
        let want = str_of(e, "expect_plaintext_utf8").as_bytes();
        for dialect in [Dialect::Hermes, Dialect::OpenClaw] {
            assert_eq!(key.open(&env, dialect).unwrap(), want, "{path}");
        }
    }
}

#[test]
fn seal_then_open_round_trips_and_every_seal_is_fresh() {
    let desktop = KeyPair::generate();
    let plugin = KeyPair::generate();
    let dk = EnvelopeKey::derive(&desktop, &plugin.public_bytes()).unwrap();
    let pk = EnvelopeKey::derive(&plugin, &desktop.public_bytes()).unwrap();
    let meta = Meta {
        session_id: "insights:0b6c",
        correlation_id: "job:42",
        content_type: content_type::REASONING_INPUT,
    };
    let a = dk.seal(&meta, b"Prospect: budget is fixed");
    let b = dk.seal(&meta, b"Prospect: budget is fixed");
    assert_ne!(a.nonce, b.nonce);
    assert_ne!(a.message_id, b.message_id);
    assert!(uuid::Uuid::parse_str(&a.message_id).is_ok());
    assert_eq!(a.sender_role, ROLE_DESKTOP);
    assert_eq!(a.version, VERSION);
    for dialect in [Dialect::Hermes, Dialect::OpenClaw] {
        let got = pk.open_from(&a, dialect, ROLE_DESKTOP).unwrap();
        assert_eq!(got, b"Prospect: budget is fixed");
    }
    // The plaintext is not in the envelope's text.
    assert!(!a.to_json().contains("budget"));
    // Our own envelope reflected back is refused.
    assert_eq!(
        dk.open(&a, Dialect::Hermes).unwrap_err().code(),
        "bad_sender_role"
    );
}

#[test]
fn sealing_never_produces_non_ascii_aad() {
    let key = EnvelopeKey::from_bytes([7; 32]);
    let meta = Meta {
        session_id: "séance-😀",
        correlation_id: "line\nbreak",
        content_type: content_type::TASK_CONTENT,
    };
    assert_eq!(
        key.try_seal(&meta, b"x").unwrap_err(),
        CryptoError::NonAsciiAad("session_id")
    );
    let env = key.seal(&meta, b"x");
    assert_eq!(env.session_id, "s%C3%A9ance-%F0%9F%98%80");
    assert_eq!(env.correlation_id, "line%0Abreak");
    assert_eq!(env.aad(Dialect::Hermes), env.aad(Dialect::OpenClaw));
    for dialect in [Dialect::Hermes, Dialect::OpenClaw] {
        assert_eq!(key.open_from(&env, dialect, ROLE_DESKTOP).unwrap(), b"x");
    }
}

#[test]
fn dialects_escape_like_python_and_javascript() {
    let env = Envelope {
        version: VERSION.into(),
        sender_role: ROLE_PLUGIN.into(),
        message_id: "m".into(),
        session_id: "a\"b\\c/d\u{8}\u{c}\r\u{1f}\u{7f}é😀".into(),
        correlation_id: String::new(),
        content_type: "t".into(),
        nonce: String::new(),
        ciphertext: String::new(),
    };
    let h = String::from_utf8(env.aad(Dialect::Hermes)).unwrap();
    assert!(
        h.contains(r#""session_id":"a\"b\\c/d\b\f\r\u001f\u007f\u00e9\ud83d\ude00""#),
        "{h}"
    );
    let o = String::from_utf8(env.aad(Dialect::OpenClaw)).unwrap();
    assert!(
        o.contains("\"session_id\":\"a\\\"b\\\\c/d\\b\\f\\r\\u001f\u{7f}é😀\""),
        "{o}"
    );
    assert!(h.starts_with(r#"{"content_type":"t","correlation_id":"","message_id":"m","#));
}

#[test]
fn keys_and_base64_are_strict() {
    assert_eq!(
        KeyPair::from_secret_b64("AAAA").unwrap_err(),
        CryptoError::BadKey
    );
    assert_eq!(
        public_key_from_b64("lj5H-LJOEfvanjIBSvWrXiyKvlbMWdFzXMG_4jibKWg=").unwrap_err(),
        CryptoError::BadBase64("public_key")
    );
    assert_eq!(
        public_key_from_b64("lj5H+LJOEfvanjIBSvWrXiyKvlbMWdFzXMG/4jibKWg").unwrap_err(),
        CryptoError::BadBase64("public_key")
    );
    let kp = KeyPair::generate();
    let again = KeyPair::from_secret_b64(&kp.secret_b64()).unwrap();
    assert_eq!(again.public_b64(), kp.public_b64());
    assert!(!format!("{kp:?}").contains(kp.secret_b64().as_str()));
    assert_eq!(
        format!("{:?}", EnvelopeKey::from_bytes([1; 32])),
        "EnvelopeKey(<redacted>)"
    );
    assert_eq!(
        Envelope::from_json("{\"version\":\"static_v1\"}")
            .unwrap_err()
            .code(),
        "bad_envelope"
    );
}
