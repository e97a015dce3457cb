//! Outgoing network connections: the one TCP/TLS connector ([`connect`]) and the one HTTP client
//! set-up ([`http`]) every network client of the app shares, and the one runtime the blocking
//! callers' requests run on ([`blocking`]: the speech engines, the model downloads).

pub mod blocking;
pub mod connect;
pub mod http;
