//! The clawborrator hub operator link: a Claude Code session as the assistant, reached through
//! the hub's operator surface (`/cli`).
//!
//! - [`frames`]: the `/cli` frames, parsed tolerantly (unknown types and fields are ignored);
//! - [`client`]: the operator client ([`HubClient::start`] → [`HubHandle`] + a stream of
//!   [`HubEvent`]s), with reconnects, a liveness timer, queued writes, replay and echo
//!   suppression, and the REST reads a settings page needs ([`list_sessions`], [`me`]);
//! - `fake` (cargo feature `fake-hub`): a conformance fake of the hub for tests.
//!
//! Not wired into the app yet: the assistant-kind wiring comes with the assistant trait.

pub mod client;
#[cfg(feature = "fake-hub")]
pub mod fake;
pub mod frames;

pub use client::{
    list_sessions, me, HubClient, HubError, HubEvent, HubHandle, HubMe, HubSession, HubSettings,
    HubStatus, HubTiming, HubUrl, Token, CHANNEL_OFFLINE,
};
pub use frames::{Resolution, Role};
