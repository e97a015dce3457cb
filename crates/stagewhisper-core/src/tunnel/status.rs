//! What the tunnel reports: its [`State`], the [`TunnelStatus`] published on the manager's
//! `watch` channel and answered by the control API, and the line that allows a non-loopback
//! callback origin in the assistants' configuration ([`AllowHint`]).

use super::{Failure, Kind, ALLOW_VAR};
use crate::clock::fmt_time;
use serde::Serialize;
use serde_json::json;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    Off,
    Connecting,
    Online,
    Failed,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Off => "off",
            State::Connecting => "connecting",
            State::Online => "online",
            State::Failed => "failed",
        }
    }
}

/// What the remote assistant must allow, ready to copy.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AllowHint {
    /// `STAGEWHISPER_ALLOW_CALLBACK_URLS`.
    pub variable: &'static str,
    /// The origin.
    pub value: String,
    /// `STAGEWHISPER_ALLOW_CALLBACK_URLS=<origin>`.
    pub line: String,
}

/// The tunnel as the UI shows it (`GET /api/tunnel` adds the configuration).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TunnelStatus {
    pub state: State,
    pub kind: Option<Kind>,
    /// The tunnel's public origin, once known.
    pub public_url: Option<String>,
    /// What the app advertises to the assistant right now (`callback.url`).
    pub callback_url: String,
    /// The callback listener's own loopback URL (what the tunnel must forward to).
    pub local_callback_url: String,
    /// One sentence for people.
    pub detail: String,
    /// Why it is not online (`failed` only).
    pub error: Option<Failure>,
    /// When `state` last changed.
    pub since: String,
    /// Attempts since the last success.
    pub attempt: u32,
    /// When the next automatic attempt is due (`null`: none planned).
    pub next_retry_at: Option<String>,
    /// Whether a signed probe through the public URL reached the listener (`null`: not
    /// checked).
    pub verified: Option<bool>,
    pub checked_at: Option<String>,
    /// What the remote assistant must allow.
    pub assistant_allow: Option<AllowHint>,
}

impl TunnelStatus {
    pub(super) fn off(local: &str) -> TunnelStatus {
        TunnelStatus {
            state: State::Off,
            kind: None,
            public_url: None,
            callback_url: local.to_string(),
            local_callback_url: local.to_string(),
            detail: off_detail(local),
            error: None,
            since: now(),
            attempt: 0,
            next_retry_at: None,
            verified: None,
            checked_at: None,
            assistant_allow: None,
        }
    }

    /// The `{"event":"tunnel",…}` line the headless mode prints on stdout on each change.
    pub fn event_line(&self) -> String {
        json!({
            "event": "tunnel",
            "state": self.state,
            "kind": self.kind,
            "public_url": self.public_url,
            "callback_url": self.callback_url,
            "error": self.error.as_ref().map(|e| json!({"code": e.code, "message": e.message})),
            "assistant_allow": self.assistant_allow.as_ref().map(|a| a.line.clone()),
        })
        .to_string()
    }

    /// What changes the event line (not timestamps or re-checks).
    pub(super) fn signature(&self) -> (State, Option<String>, String, Option<&'static str>) {
        (
            self.state,
            self.public_url.clone(),
            self.callback_url.clone(),
            self.error.as_ref().map(|e| e.code),
        )
    }
}

pub(super) fn off_detail(local: &str) -> String {
    format!("No tunnel: the callback URL {local} is reachable from this computer only (for an assistant running here).")
}

pub(super) fn now() -> String {
    fmt_time(chrono::Utc::now())
}

pub(super) fn allow_hint(origin: &str) -> AllowHint {
    AllowHint {
        variable: ALLOW_VAR,
        value: origin.to_string(),
        line: format!("{ALLOW_VAR}={origin}"),
    }
}
