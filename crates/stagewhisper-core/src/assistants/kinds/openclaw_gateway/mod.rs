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
//! - [`kind`]: the assistant kind `openclaw-gateway` on top of the client; its `mapping` module
//!   turns [`GatewayEvent`]s into the same callbacks the other kinds submit, and [`recover`]
//!   looks up the replies that finished while the app was down.
//!
//! The client knows nothing of the conversation model: the kind maps [`GatewayEvent`]s onto it
//! and the conversation dedupes finals by message id (`gw:<idempotency key>`).

pub mod client;
pub mod entry;
pub mod frames;
pub mod identity;
pub mod kind;
mod mapping;
pub mod recover;

pub use client::{
    GatewayClient, GatewayError, GatewayEvent, GatewayHandle, GatewaySettings, GatewayStatus,
    LinkState, Pairing, SendOutcome,
};
pub use identity::DeviceIdentity;
pub use kind::GatewayKind;

#[cfg(test)]
mod recordings;
