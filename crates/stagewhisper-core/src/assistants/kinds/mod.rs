//! The assistant kinds, one folder each, named as the UI names them, and the one list of them
//! ([`BUILT_IN`]) that the app starts, the provider registry describes and the UI's kind
//! registry reads (`GET /api/assistant/kinds`).
//!
//! - [`incoming`]: StageWhisper's own callback protocol (`POST /v1/incoming`, status,
//!   `/v1/events` fallback);
//! - [`byo_relay`]: the BYO relay (end-to-end encrypted envelopes, replay guard);
//! - [`openclaw_gateway`]: the OpenClaw Gateway operator client;
//! - [`clawborrator`]: the clawborrator hub operator link.
//!
//! Adding a kind: a folder here with its [`AssistantKind`](super::AssistantKind) and an
//! `entry.rs` (its [`KindEntry`]: id, name, settings fields, how to start it), one line in
//! [`BUILT_IN`], and its form in `ui/src/kinds/` (one line in `ui/src/kinds/index.ts`; without
//! one the UI renders the entry's settings fields).

pub mod byo_relay;
pub mod clawborrator;
pub mod incoming;
pub mod openclaw_gateway;
pub mod registry;

pub use registry::{ExtraKind, FieldInput, KindDeps, KindEntry, KindInfo, KindList, SettingField};

use super::providers::{self, Provider};
use serde::Serialize;
use serde_json::{json, Value};

/// Every built-in kind, in the order the UI lists them (the first is the default).
pub static BUILT_IN: &[KindEntry] = &[
    incoming::entry::ENTRY,
    byo_relay::entry::ENTRY,
    openclaw_gateway::entry::ENTRY,
    clawborrator::entry::ENTRY,
];

/// The built-in kind `id`.
pub fn built_in(id: &str) -> Option<&'static KindEntry> {
    BUILT_IN.iter().find(|e| e.info.id == id)
}

/// The kinds and the peers each serves (`GET /api/providers`).
#[derive(Debug, Clone, Serialize)]
pub struct Registry {
    pub kinds: Vec<KindInfo>,
    pub providers: Vec<Provider>,
}

/// The static registry (`available` as implemented in this version).
pub fn registry() -> Registry {
    Registry {
        kinds: BUILT_IN.iter().map(|e| e.info.clone()).collect(),
        providers: providers::all().to_vec(),
    }
}

/// The registry as served: `available` is true exactly for the `registered` kinds of this
/// app; a registered kind the list does not have (a test's) is listed with its own info.
pub fn for_registered(registered: &[KindInfo], active: &str) -> Value {
    let r = registry();
    let ids: Vec<&str> = registered.iter().map(|k| k.id).collect();
    let kinds = served_kinds(registered);
    let providers: Vec<Value> = r
        .providers
        .iter()
        .map(|p| {
            let mut v = serde_json::to_value(p).expect("serializable");
            v["available"] = json!(ids.contains(&p.kind));
            v
        })
        .collect();
    json!({"active_kind": active, "kinds": kinds, "providers": providers})
}

/// The kinds as served: the built-in ones in their order (`available` when registered), then
/// the other registered ones.
pub fn served_kinds(registered: &[KindInfo]) -> Vec<KindInfo> {
    let mut kinds: Vec<KindInfo> = BUILT_IN
        .iter()
        .map(|e| KindInfo {
            available: registered.iter().any(|k| k.id == e.info.id),
            ..e.info.clone()
        })
        .collect();
    for k in registered {
        if !kinds.iter().any(|b| b.id == k.id) {
            kinds.push(k.clone());
        }
    }
    kinds
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_provider_has_a_described_kind_and_set_up_steps() {
        let r = registry();
        for p in &r.providers {
            let k = r.kinds.iter().find(|k| k.id == p.kind).expect(p.id);
            assert_eq!(p.available, k.available, "{}", p.id);
            assert!(!p.setup.is_empty(), "{}", p.id);
        }
        let ids: Vec<_> = r.providers.iter().map(|p| p.id).collect();
        let mut dedup = ids.clone();
        dedup.dedup();
        assert_eq!(ids, dedup);
        assert_eq!(
            r.kinds
                .iter()
                .filter(|k| k.available)
                .map(|k| k.id)
                .collect::<Vec<_>>(),
            ["incoming", "byo", "openclaw-gateway", "clawborrator"]
        );
    }

    #[test]
    fn served_registry_marks_registered_kinds_available() {
        let toy = KindInfo::new("toy", "Toy", "");
        let incoming = built_in("incoming").unwrap().info.clone();
        let byo = built_in("byo").unwrap().info.clone();
        let v = for_registered(&[incoming.clone(), toy], "toy");
        assert_eq!(v["active_kind"], "toy");
        let kinds = v["kinds"].as_array().unwrap();
        assert!(kinds
            .iter()
            .any(|k| k["id"] == "toy" && k["available"] == true));
        assert!(kinds
            .iter()
            .any(|k| k["id"] == "byo" && k["available"] == false));
        let v = for_registered(&[incoming, byo], "byo");
        assert!(v["kinds"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k["id"] == "byo" && k["available"] == true));
        let ps = v["providers"].as_array().unwrap();
        let hermes = ps.iter().find(|p| p["id"] == "hermes-adapter").unwrap();
        assert_eq!(hermes["available"], true);
        assert_eq!(hermes["tested_with"][0]["version"], "0.43.0");
    }
}
