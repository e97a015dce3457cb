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
