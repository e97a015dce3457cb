//! StageWhisper Desktop core: everything but the window.
//!
//! - [`protocol`]: callback wire types and strict parsing with stable error codes;
//! - [`listener`]: the loopback callback listener (`POST /tasks/{task_id}`, one axum Router);
//!   [`guard`]: its Host, bearer, throttle and body checks as tower layers; [`conns`]: both
//!   listeners' connection limits (who may hold a connection, for how long);
//! - [`conversation`]: the rules and the one writer of conversation state (timers via [`clock`]);
//! - [`store`]: SQLite (sqlx) with group commit; [`events`]: the change log with cursors, and
//!   [`events::Change`], every event type as one enum; [`model`]: the views the API and the
//!   events carry;
//! - [`api`]: the control API + web UI for the browser and the desktop shell (its route table
//!   names no assistant kind); [`answers`]: what every control route answers and reads;
//! - [`assistants`]: one trait for every assistant kind (its own control routes included), the
//!   generic outbox, the manager and the provider registry; [`assistants::kinds`]: one folder
//!   per kind (`incoming`, `byo_relay`, `openclaw_gateway`, `clawborrator`);
//! - [`net`]: outgoing connections (the one TCP/TLS connector);
//! - [`audio`]: the seam to the audio pipeline (crate `stagewhisper-audio`): the routes' shapes,
//!   the [`audio::Ears`] trait, and the one path a heard turn takes into the conversation;
//! - [`transcript`]: transcript files (WebVTT, SRT, JSONL) and the replay client;
//! - [`datadir`]: one process per data dir (an exclusive lock held while the app runs);
//! - [`net`]: the connector the network clients share (TCP, and TLS on top);
//! - [`settings`]: every setting the core and its crates read, in one typed, versioned
//!   document (`settings.json`) with one writer;
//! - [`tokens`]: secrets; [`backoff`]: when every retrying part tries again; [`faults`]: test-only
//!   fault injection; [`app`]: wiring it all together.

pub mod answers;
pub mod api;
pub mod app;
pub mod archive;
pub mod assistants;
pub mod audio;
pub mod backoff;
pub mod clock;
pub mod conns;
pub mod conversation;
pub mod datadir;
pub mod detect;
pub mod engine_check;
pub mod events;
pub mod faults;
#[doc(hidden)]
pub mod fuzzing;
pub mod guard;
pub mod http;
pub mod listener;
pub mod mcp;
pub mod model;
pub mod models;
pub mod net;
pub mod protocol;
pub mod recordings;
pub mod settings;
pub mod store;
pub mod tokens;
pub mod transcript;
pub mod tunnel;
pub mod voiceprints;

pub use app::{App, Config};
