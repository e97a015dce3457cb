//! Outgoing network connections: the connector the network clients share.

pub mod connect;
