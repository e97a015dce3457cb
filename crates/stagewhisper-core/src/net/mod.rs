//! Outgoing network connections: the one TCP/TLS connector ([`connect`]) and the one HTTP client
//! set-up ([`http`]) every network client of the app shares.

pub mod connect;
pub mod http;
