//! Test-only: the desktop's own BYO seal on stdin/stdout, so the real plugin's code can open what
//! the desktop seals (`tests/byo/gen_vectors.mjs`). Not a shipped binary.
//!
//!   echo '{"key_b64":"…","items":[{"session_id","correlation_id","content_type","plaintext"}]}' \
//!     | cargo run -q -p stagewhisper-core --example byo_seal
//!
//! Prints a JSON array: each item's envelope text as the desktop puts it on the wire (sealed by
//! `EnvelopeKey::seal`, so AAD fields outside printable ASCII come out percent-encoded).

use serde_json::Value;
use stagewhisper_core::assistants::kinds::byo_relay::crypto::{EnvelopeKey, Meta};
use std::io::Read;

fn main() {
    let mut input = String::new();
    std::io::stdin().read_to_string(&mut input).expect("stdin");
    let req: Value = serde_json::from_str(&input).expect("a JSON request on stdin");
    let field = |v: &Value, name: &str| -> String {
        v[name]
            .as_str()
            .unwrap_or_else(|| panic!("`{name}` missing"))
            .to_string()
    };
    let key = EnvelopeKey::from_b64(&field(&req, "key_b64")).expect("a 32-byte base64 key");
    let items = req["items"].as_array().expect("`items`: a list");
    let out: Vec<String> = items
        .iter()
        .map(|it| {
            let (s, c, t) = (
                field(it, "session_id"),
                field(it, "correlation_id"),
                field(it, "content_type"),
            );
            let meta = Meta {
                session_id: &s,
                correlation_id: &c,
                content_type: &t,
            };
            key.seal(&meta, field(it, "plaintext").as_bytes()).to_json()
        })
        .collect();
    println!("{}", serde_json::to_string(&out).expect("JSON"));
}
