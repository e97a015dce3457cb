//! The BYO relay: the desktop serves the relay API the assistant's plugin pairs with and takes
//! its reasoning jobs and chat dispatches from, end-to-end encrypted.
//!
//! - [`crypto`]: X25519, HKDF-SHA256, XChaCha20-Poly1305 envelopes, both AAD dialects.
//! - [`replay`]: the persistent replay guard on envelope `message_id`s.
//! - [`kind`]: the assistant kind `byo` (pairing, status, the stream, jobs, deadlines), and
//!   `assistant`: its face to the app and the outbox (the `AssistantKind` trait, its routes);
//!   [`mapping`]: deliveries → jobs, answered jobs → the conversation.
//! - [`relay`]: its routes on the callback listener (`/api/v1/assistant-relay/`,
//!   `/api/v1/openclaw/`); [`routes`]: its control API routes (pairing, refresh, test).
//! - [`jobs`]: the jobs table; [`pairing`]: codes and the paired integration at rest;
//!   [`schema`]: the jobs' payloads and response schemas.

pub mod crypto;
pub mod entry;
pub mod replay;

mod assistant;
pub mod jobs;
pub mod kind;
pub mod mapping;
pub mod pairing;
pub mod relay;
pub mod routes;
pub mod schema;
