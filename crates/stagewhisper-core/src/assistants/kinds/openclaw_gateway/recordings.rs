//! Replays the recorded frames of the real gateway (openclaw 2026.9.6) through the parser and
//! the signature code.

use super::frames::{
    parse_inbound_value, parse_outbound, AgentStream, ChatState, Ignored, Inbound, Outbound,
};
use super::identity::{verify, SignedFields};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;

const FILES: [&str; 2] = [
    "openclaw-gateway-2026.9.6-frames.jsonl",
    "openclaw-gateway-2026.9.6-frames-llm-error.jsonl",
];

struct Row {
    case: String,
    dir: String,
    frame: Value,
}

fn rows(name: &str) -> Vec<Row> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/recordings")
        .join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path:?}: {e}"));
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).unwrap();
            Row {
                case: v["case"].as_str().unwrap().to_string(),
                dir: v["dir"].as_str().unwrap().to_string(),
                frame: v["frame"].clone(),
            }
        })
        .collect()
}

/// What a frame was classified as (for the coverage assertions).
fn kind_of(f: &Inbound) -> String {
    match f {
        Inbound::Challenge(_) => "challenge".into(),
        Inbound::Response(r) => match &r.result {
            Ok(p) if p.get("type").and_then(Value::as_str) == Some("hello-ok") => "hello-ok".into(),
            Ok(_) => "res-ok".into(),
            Err(e) => format!("res-err:{}", e.detail_code().unwrap_or(&e.code)),
        },
        Inbound::Chat(c) => match &c.state {
            ChatState::Status { .. } => "chat:status",
            ChatState::Delta { .. } => "chat:delta",
            ChatState::Final { .. } => "chat:final",
            ChatState::Aborted { .. } => "chat:aborted",
            ChatState::Error { .. } => "chat:error",
        }
        .into(),
        Inbound::Agent(a) => match &a.stream {
            AgentStream::Lifecycle { .. } => "agent:lifecycle",
            AgentStream::RunStatus { .. } => "agent:run_status",
            AgentStream::Assistant { .. } => "agent:assistant",
            AgentStream::Usage => "agent:usage",
        }
        .into(),
        Inbound::Tick => "tick".into(),
        Inbound::Shutdown { .. } => "shutdown".into(),
        Inbound::Ignored(Ignored::Event(e)) => format!("ignored:{e}"),
        Inbound::Ignored(i) => format!("ignored:{i:?}"),
    }
}

#[test]
fn every_recorded_frame_parses_or_is_ignored_on_purpose() {
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    let mut total = 0;
    for name in FILES {
        for (i, row) in rows(name).iter().enumerate() {
            total += 1;
            let at = format!("{name}:{} ({}, {})", i + 1, row.case, row.dir);
            match row.dir.as_str() {
                "in" => {
                    let f = parse_inbound_value(row.frame.clone())
                        .unwrap_or_else(|e| panic!("{at}: {e}"));
                    if let Inbound::Ignored(ig) = &f {
                        // Only these are ignored on purpose; anything else is a parser gap.
                        let Ignored::Event(name) = ig else {
                            panic!("{at}: unexpected {ig:?}")
                        };
                        assert!(
                            [
                                "presence",
                                "health",
                                "skills.changed",
                                "chat.metadata.changed"
                            ]
                            .contains(&name.as_str()),
                            "{at}: ignored event {name}"
                        );
                    }
                    *kinds.entry(kind_of(&f)).or_default() += 1;
                }
                "out" => {
                    let text = row.frame.to_string();
                    match parse_outbound(&text) {
                        Ok((_, out)) => {
                            let k = match out {
                                Outbound::Connect(_) => "out:connect".to_string(),
                                Outbound::ChatSend(_) => "out:chat.send".into(),
                                Outbound::ChatAbort(_) => "out:chat.abort".into(),
                                Outbound::ChatHistory(_) => "out:chat.history".into(),
                                Outbound::Other { method } => format!("out:{method}"),
                            };
                            *kinds.entry(k).or_default() += 1;
                        }
                        // The one connect the gateway refused for an unknown property is refused
                        // by our closed types too.
                        Err(e) if row.case == "extra-field" => {
                            assert!(e.to_string().contains("stagewhisper"), "{at}: {e}");
                            *kinds.entry("out:refused-unknown-field".into()).or_default() += 1;
                        }
                        Err(e) => panic!("{at}: {e}"),
                    }
                }
                "close" => {
                    let code = row.frame["code"].as_u64().unwrap_or_else(|| panic!("{at}"));
                    *kinds.entry(format!("close:{code}")).or_default() += 1;
                }
                "note" => {
                    assert!(row.frame["signaturePayload"].is_string(), "{at}");
                    *kinds.entry("note".into()).or_default() += 1;
                }
                other => panic!("{at}: unknown dir {other}"),
            }
        }
    }
    assert_eq!(total, 236 + 93, "every line of both files was replayed");
    // Every kind the client acts on occurs in the recordings.
    for k in [
        "challenge",
        "hello-ok",
        "res-ok",
        "res-err:PAIRING_REQUIRED",
        "res-err:AUTH_TOKEN_MISMATCH",
        "res-err:PROTOCOL_MISMATCH",
        "res-err:UNAVAILABLE",
        "chat:status",
        "chat:delta",
        "chat:final",
        "chat:aborted",
        "chat:error",
        "agent:lifecycle",
        "agent:assistant",
        "agent:usage",
        "agent:run_status",
        "tick",
        "shutdown",
        "close:1008",
        "close:1002",
        "close:1012",
        "close:1013",
        "out:connect",
        "out:chat.send",
        "out:chat.abort",
        "out:chat.history",
        "out:refused-unknown-field",
    ] {
        assert!(kinds.contains_key(k), "no {k} in {kinds:#?}");
    }
}

#[test]
fn recorded_errors_carry_the_codes_the_client_branches_on() {
    let mut seen = BTreeMap::new();
    for row in rows(FILES[0]) {
        if row.dir != "in" {
            continue;
        }
        if let Inbound::Response(r) = parse_inbound_value(row.frame).unwrap() {
            if let Err(e) = r.result {
                seen.insert(row.case.clone(), e);
            }
        }
    }
    let pairing = &seen["pair-probe"];
    assert_eq!(pairing.code, "NOT_PAIRED");
    assert_eq!(pairing.detail_code(), Some("PAIRING_REQUIRED"));
    assert!(pairing.details.as_ref().unwrap().request_id.is_some());
    assert_eq!(seen["bad-token"].detail_code(), Some("AUTH_TOKEN_MISMATCH"));
    assert_eq!(
        seen["protocol-v3"]
            .details
            .as_ref()
            .unwrap()
            .expected_protocol,
        Some(4)
    );
    assert_eq!(
        seen["startup-probe"].detail_code(),
        Some("PAIRING_REQUIRED")
    );
    let startup = rows(FILES[0])
        .into_iter()
        .find(|r| r.case == "startup-probe" && r.dir == "in" && r.frame["type"] == "res")
        .unwrap();
    let Inbound::Response(r) = parse_inbound_value(startup.frame).unwrap() else {
        panic!()
    };
    let e = r.result.unwrap_err();
    assert_eq!(
        (e.code.as_str(), e.retry_after_ms),
        ("UNAVAILABLE", Some(500))
    );
    assert!(seen["extra-field"].message.contains("unexpected property"));
}

/// Every `note` row holds the exact payload string signed for the `connect` that follows:
/// rebuild it from that frame's fields (and the challenge before it) byte for byte, and verify
/// the recorded signature with the recorded public key.
#[test]
fn recorded_signed_payloads_rebuild_byte_for_byte_and_verify() {
    let mut checked = 0;
    let mut v2 = 0;
    for name in FILES {
        let rows = rows(name);
        let mut challenge_nonce: Option<String> = None;
        for (i, row) in rows.iter().enumerate() {
            if row.dir == "in" && row.frame["event"] == "connect.challenge" {
                challenge_nonce = Some(row.frame["payload"]["nonce"].as_str().unwrap().into());
            }
            if row.dir != "note" {
                continue;
            }
            let note = row.frame["signaturePayload"].as_str().unwrap();
            let next = &rows[i + 1];
            assert_eq!(
                next.dir, "out",
                "{} note not followed by a connect",
                row.case
            );
            let (_, Outbound::Connect(p)) = parse_outbound(&next.frame.to_string())
                .or_else(|_| {
                    // extra-field: read it without the unknown property.
                    let mut f = next.frame.clone();
                    f["params"].as_object_mut().unwrap().remove("stagewhisper");
                    parse_outbound(&f.to_string())
                })
                .unwrap()
            else {
                panic!("{}: not a connect", row.case)
            };
            let Some(device) = &p.device else {
                // Sent without a device on purpose: nothing was signed.
                assert!(row.case.starts_with("no-device"), "{}", row.case);
                continue;
            };
            let auth = p.auth.as_ref();
            let token = auth
                .and_then(|a| a.token.as_deref().or(a.device_token.as_deref()))
                .unwrap_or("");
            let nonce = challenge_nonce.as_deref().unwrap();
            if row.case == "nonce-mismatch" {
                assert_ne!(device.nonce, nonce);
            } else {
                assert_eq!(device.nonce, nonce, "{}", row.case);
            }
            let fields = SignedFields {
                device_id: &device.id,
                client_id: &p.client.id,
                client_mode: &p.client.mode,
                role: &p.role,
                scopes: &p.scopes,
                signed_at: device.signed_at,
                token,
                nonce,
                platform: &p.client.platform,
                device_family: p.client.device_family.as_deref().unwrap_or(""),
            };
            let rebuilt = if note.starts_with("v2|") {
                v2 += 1;
                fields.v2()
            } else {
                fields.v3()
            };
            assert_eq!(rebuilt, note, "{}: payload", row.case);
            // The device id is the SHA-256 of the public key it comes with.
            let pk: [u8; 32] = base64::Engine::decode(
                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                &device.public_key,
            )
            .unwrap()
            .try_into()
            .unwrap();
            assert_eq!(
                super::identity::device_id_of(&pk),
                device.id,
                "{}",
                row.case
            );
            let verified = if row.case == "nonce-mismatch" {
                // The note holds the challenge's nonce; the signature covers the nonce the frame
                // claims (so that only the nonce check can refuse it).
                let claimed = SignedFields {
                    nonce: &device.nonce,
                    ..fields.clone()
                };
                assert!(verify(&device.public_key, note, &device.signature).is_err());
                verify(&device.public_key, &claimed.v3(), &device.signature)
            } else {
                verify(&device.public_key, note, &device.signature)
            };
            if row.case == "bad-signature" {
                assert!(
                    verified.is_err(),
                    "the deliberately bad signature must not verify"
                );
            } else {
                verified.unwrap_or_else(|e| panic!("{}: {e}", row.case));
            }
            checked += 1;
        }
    }
    assert_eq!(v2, 1, "the recording holds one v2 signature");
    assert!(checked >= 25, "checked {checked}");
}
