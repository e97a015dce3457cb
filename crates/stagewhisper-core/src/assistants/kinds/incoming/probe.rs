//! Status checks: `GET /v1/health` (no auth; the Hermes adapter answers with its version,
//! OpenClaw 0.64 has none) and `POST /v1/ping` (bearer) decide online / auth failed /
//! unreachable / misconfigured; once online, `GET /v1/events` is tried once to learn whether
//! the no-callback fallback exists (Hermes: yes; OpenClaw 0.64: 404).

use super::attempt::{assistant_error, status_said};
use super::client::{self, Call, ClientError};
use super::config::LinkConfig;
use super::{Inner, StatusKind};
use hyper::header::CONTENT_TYPE;
use hyper::{Method, StatusCode};
use std::sync::Arc;
use std::time::Duration;

/// The result of one check.
#[derive(Debug, Clone, PartialEq)]
pub struct Probe {
    pub kind: StatusKind,
    pub detail: String,
    pub version: Option<String>,
}

/// Checks health and ping.
pub async fn check(cfg: &LinkConfig, t: client::Timeouts) -> Probe {
    let ep = &cfg.endpoint;
    let base = cfg.stored.base_url.as_str();
    let version = match client::send(ep, Call::new(Method::GET, "/v1/health"), t).await {
        Ok(r) if r.status == StatusCode::OK => r.json()["version"].as_str().map(str::to_string),
        _ => None,
    };
    let ping = client::send(
        ep,
        Call::new(Method::POST, "/v1/ping").bearer(cfg.relay_token()),
        t,
    )
    .await;
    let (kind, detail) = match ping {
        Err(e) => ping_failed(e, base, ep.port),
        Ok(r) => ping_answered(&r, base, &ep.authority, version.as_deref()),
    };
    Probe {
        kind,
        detail,
        version,
    }
}

/// The link status when `POST /v1/ping` got no HTTP answer.
fn ping_failed(e: ClientError, base: &str, port: u16) -> (StatusKind, String) {
    match e {
        ClientError::Refused => (
            StatusKind::Unreachable,
            format!(
                "Cannot connect to {base} (connection refused): is the assistant running and \
                 listening on port {port}? (Hermes: STAGEWHISPER_LISTEN_PORT; OpenClaw: \
                 plugins.entries.stagewhisper.config.httpPort)"
            ),
        ),
        e @ (ClientError::ConnectTimeout(_) | ClientError::Connect(_)) => (
            StatusKind::Unreachable,
            format!("Cannot connect to {base}: {e}."),
        ),
        e => (
            StatusKind::Unreachable,
            format!("{base} did not answer POST /v1/ping properly ({e})."),
        ),
    }
}

/// The link status an answer to `POST /v1/ping` says.
fn ping_answered(
    r: &client::Response,
    base: &str,
    authority: &str,
    version: Option<&str>,
) -> (StatusKind, String) {
    let words = assistant_error(r);
    let said = status_said(r, &words);
    match r.status {
        s if s.is_success() => (
            StatusKind::Online,
            match version {
                Some(v) => format!("Connected to the assistant at {base} (adapter {v})."),
                None => format!("Connected to the assistant at {base}."),
            },
        ),
        StatusCode::UNAUTHORIZED => (
            StatusKind::AuthFailed,
            format!(
                "The assistant at {base} rejected the relay token ({said}). Enter the \
                 token it is configured with (Hermes: STAGEWHISPER_RELAY_TOKEN; \
                 OpenClaw: plugins.entries.stagewhisper.config.httpToken)."
            ),
        ),
        StatusCode::FORBIDDEN => (
            StatusKind::Misconfigured,
            format!(
                "The assistant at {base} refused the request ({said}): it accepts only \
                 loopback Host headers unless STAGEWHISPER_ALLOW_INGRESS_HOSTS lists {authority}."
            ),
        ),
        StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED => (
            StatusKind::Misconfigured,
            format!(
                "POST {base}/v1/ping answered {said}: this URL is not a StageWhisper \
                 assistant listener. Check the port and remove any path."
            ),
        ),
        s if s.is_server_error() || s == StatusCode::TOO_MANY_REQUESTS => (
            StatusKind::Unreachable,
            format!(
                "The assistant at {base} answered {said} to POST /v1/ping; checking again soon."
            ),
        ),
        _ => (
            StatusKind::Misconfigured,
            format!("The assistant at {base} answered {said} to POST /v1/ping."),
        ),
    }
}

/// Is `GET /v1/events` offered? `None` when the answer says nothing either way.
pub async fn check_events(cfg: &LinkConfig, t: client::Timeouts) -> (Option<bool>, String) {
    let path = format!(
        "/v1/events?session_id={}",
        client::encode_query_value(&format!("stagewhisper-probe-{}", uuid::Uuid::new_v4()))
    );
    let call = Call::new(Method::GET, &path).bearer(cfg.relay_token());
    match client::open(&cfg.endpoint, call, t).await {
        Ok(r) => {
            let sse = r
                .headers()
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .is_some_and(|v| v.starts_with("text/event-stream"));
            // Dropping the response closes the connection: the stream was only a probe.
            match r.status() {
                StatusCode::OK if sse => (
                    Some(true),
                    "The assistant offers GET /v1/events: replies can be read there when it \
                     cannot reach the callback URL."
                        .into(),
                ),
                StatusCode::NOT_FOUND => (
                    Some(false),
                    "This assistant has no GET /v1/events (404): it must be able to reach this \
                     app's callback URL; there is no fallback."
                        .into(),
                ),
                s => (
                    None,
                    format!(
                        "GET /v1/events answered {}; fallback support unknown.",
                        s.as_u16()
                    ),
                ),
            }
        }
        Err(e) => (None, format!("GET /v1/events could not be checked ({e}).")),
    }
}

impl Inner {
    /// Checks now and records the result.
    pub(crate) async fn check_now(&self) {
        let Some(cfg) = self.config() else {
            return;
        };
        let generation = self.generation();
        let t = self.settings.timeouts();
        let p = check(&cfg, t).await;
        if self.generation() != generation {
            return; // reconfigured meanwhile
        }
        if let Some(v) = &p.version {
            self.set_version(v);
        }
        let (mut kind, mut detail) = (p.kind, p.detail.clone());
        if kind == StatusKind::Online {
            if let Some(problem) = self.callback_problem() {
                (kind, detail) = (StatusKind::Misconfigured, problem);
            } else if let Some(reason) = self.status.lock().expect("status lock").fallback.clone() {
                detail = reason;
            }
        }
        self.set_status(kind, detail);
        if p.kind == StatusKind::Online && self.events_support().is_none() {
            let (support, detail) = check_events(&cfg, t).await;
            if self.generation() == generation {
                self.set_events_support(support, detail);
            }
        }
    }

    pub(crate) async fn probe_loop(self: Arc<Self>) {
        let mut delay = self.settings.probe_retry;
        loop {
            let woken = self.probe_now.notified();
            let checking = self.config().is_some() && self.is_active();
            if checking {
                self.check_now().await;
            }
            let wait = if !checking {
                Duration::from_secs(3600)
            } else if self.status_kind() == StatusKind::Online {
                delay = self.settings.probe_retry;
                self.settings.probe_interval
            } else {
                let d = delay;
                delay = (delay * 2).min(self.settings.probe_interval);
                d
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {},
                _ = woken => { delay = self.settings.probe_retry; },
                _ = self.shutdown.wait() => break,
            }
        }
    }
}
