//! StageWhisper Desktop core: everything but the window.
//!
//! - [`protocol`]: callback wire types and strict parsing with stable error codes;
//! - [`listener`]: the loopback callback listener (`POST /tasks/{task_id}`);
//! - [`conversation`]: the rules and the one writer of conversation state (timers via [`clock`]);
//! - [`store`]: SQLite (sqlx) with group commit; [`events`]: the change log with cursors;
//! - [`api`]: the control API + web UI for the browser and the desktop shell;
//! - [`tokens`]: secrets; [`app`]: wiring it all together.

pub mod api;
pub mod app;
pub mod clock;
pub mod conversation;
pub mod events;
pub mod http;
pub mod listener;
pub mod model;
pub mod protocol;
pub mod store;
pub mod tokens;

pub use app::{App, Config};
