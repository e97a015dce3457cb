//! The assistant kinds, one folder each, named as the UI names them.
//!
//! - [`incoming`]: StageWhisper's own callback protocol (`POST /v1/incoming`, status,
//!   `/v1/events` fallback);
//! - [`byo_relay`]: the BYO relay (end-to-end encrypted envelopes, replay guard);
//! - [`openclaw_gateway`]: the OpenClaw Gateway operator client;
//! - [`clawborrator`]: the clawborrator hub operator link.

pub mod byo_relay;
pub mod clawborrator;
pub mod incoming;
pub mod openclaw_gateway;
