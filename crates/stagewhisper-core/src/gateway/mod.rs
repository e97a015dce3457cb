//! The OpenClaw Gateway operator client (protocol 4): the desktop talks to any OpenClaw install
//! over its own WebSocket, with no channel plugin.
//!
//! - [`frames`]: typed `req` / `res` / `event` frames (closed outgoing params, lenient incoming);
//! - [`identity`]: the install's Ed25519 device identity, the signed `connect` payload, and the
//!   stored device token;
//! - [`client`]: the connection (challenge → signed `connect` → `hello-ok`), liveness, reconnect
//!   with backoff, pairing, `chat.send` / `chat.abort` / `chat.history`, and the transport-neutral
//!   [`GatewayEvent`]s a conversation consumes.
//!
//! Nothing here knows the conversation model: the caller maps [`GatewayEvent`]s onto it and
//! dedupes finals by idempotency key.

pub mod client;
pub mod frames;
pub mod identity;

pub use client::{
    GatewayClient, GatewayError, GatewayEvent, GatewayHandle, GatewaySettings, GatewayStatus,
    LinkState, Pairing, SendOutcome,
};
pub use identity::DeviceIdentity;

#[cfg(test)]
mod recordings;
