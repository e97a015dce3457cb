//! The clawborrator hub operator link: a Claude Code session as the assistant, reached through
//! the hub's operator surface (`/cli`).
//!
//! - [`frames`]: the `/cli` frames, parsed tolerantly (unknown types and fields are ignored);
//! - [`client`]: the operator client ([`HubClient::start`] → [`HubHandle`] + a stream of
//!   [`HubEvent`]s), with reconnects, a liveness timer, queued writes, replay and echo
//!   suppression, and the REST reads a settings page needs ([`list_sessions`], [`me`]);
//!
//! - [`kind`]: the assistant kind `clawborrator` built on them (registered by the app).
//!
//! # Wiring it as an assistant kind
//! - Settings: [`HubSettings::validate`] gives the error code for `PUT /api/assistant`
//!   (`invalid_url`, `insecure_url`, `invalid_token`, `invalid_session`);
//!   [`HubClient::start`] validates again and spawns the task; [`HubHandle::update_settings`]
//!   swaps them in place (and is the only way out of `auth_failed`). The settings picker uses
//!   [`list_sessions`]; [`me`] names the user (`auth_failed` on a refused token).
//! - User message `id` → [`HubHandle::prompt`]`(id, text)`; [`HubEvent::Acked`] then maps
//!   `chat_id` → that message's conversation. [`HubEvent::Reply`] / [`HubEvent::Draft`] name
//!   the `chat_id` they answer; without one (or one never acked by this client), route to the
//!   live call's chat, else to the most recently used chat. A `Draft` is the whole text so far;
//!   the `Reply` with `final: true` and the same `chat_id` settles it.
//! - [`HubEvent::Permission`] → a card; `POST /api/permissions/{id}` →
//!   [`HubHandle::approve`] (`already_resolved` → 409); [`HubEvent::PermissionResolved`]
//!   settles it with `resolver` (`None` when expired).
//! - [`HubEvent::Status`] → the assistant status ([`HubStatus`] `Display` is the sentence);
//!   [`HubEvent::Typing`] / [`HubEvent::Idle`] → the typing indicator; [`HubEvent::Error`] →
//!   an error with its code; [`HubEvent::Unconfirmed`] → the message may not have arrived.
//! - Keep [`HubHandle::newest_event_ts`] and hand it back as [`HubSettings::replay_cutoff`] on
//!   the next start, so the hub's replay to a fresh client is not shown again.
//! - Tests: the black-box tests run `stagewhisper_fake_hub::FakeHub` in process (a dev-only
//!   crate, written from the hub's AsyncAPI) and point `hub_url` at `FakeHub::url()`.

pub mod client;
pub mod entry;
pub mod frames;
pub mod kind;

pub use client::{
    list_sessions, me, HubClient, HubError, HubEvent, HubHandle, HubMe, HubSession, HubSettings,
    HubStatus, HubTiming, HubUrl, Token, CHANNEL_OFFLINE,
};
pub use frames::{Resolution, Role};
pub use kind::ClawborratorKind;
