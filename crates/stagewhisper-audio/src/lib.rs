//! Hearing the call: what turns sound into transcript turns.
//!
//! | module | holds |
//! |---|---|
//! | [`capture`] | the sound server: sources (microphones, monitors of outputs), record streams by source name, devices that go and come back |

pub mod backlog;
pub mod capture;
