//! The optional tunnel for the callback listener, so an assistant on another machine can post
//! replies: **ngrok in process** ([`ngrok`]) or an **external URL** the user runs themselves
//! (tailscale serve/funnel, cloudflared, `ssh -R`, a reverse proxy), verified with a signed
//! probe ([`probe`], [`external`]).
//!
//! [`TunnelManager`] owns it: it connects in the background (never blocking start-up; every
//! network step bounded), publishes a [`TunnelStatus`] (`off`, `connecting`, `online <url>`,
//! `failed <reason>`) on a `watch` channel, retries with backoff, and while a tunnel is
//! configured adds its public `Host` to the callback listener's [`AllowedHosts`]. The
//! advertised callback URL ([`TunnelManager::advertised_callback_url`]) is the tunnel's origin
//! while it is up (and while it is being re-established after having been up), the loopback
//! URL otherwise. The tunnel forwards to the callback listener only; it going down never
//! touches the local listeners. The bearer token stays the only door: tunnelled requests
//! arrive from 127.0.0.1 and get no trust for that.
//!
//! Control API routes: [`api`]. What it reports: `status` ([`TunnelStatus`]); one run of a
//! configured tunnel (connect or verify, check, retry): `run`.

pub mod api;
pub mod config;
pub mod external;
pub mod net;
pub mod ngrok;
pub mod probe;
mod run;
mod status;

pub use config::Kind;
pub use external::Origin;
pub use net::Failure;
pub use probe::ProbeResponder;
pub use status::{AllowHint, State, TunnelStatus};

use crate::backoff::Backoff;
use crate::http::{AllowedHosts, Shutdown};
use crate::tokens::Secret;
use config::{AuthtokenFile, StoredConfig};
use ngrok::NgrokParams;
use run::Run;
use serde_json::{json, Value};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

/// The variable both assistants (Hermes adapter, OpenClaw channel) read to allow a
/// non-loopback callback origin.
pub const ALLOW_VAR: &str = "STAGEWHISPER_ALLOW_CALLBACK_URLS";

/// Timing and test hooks.
#[derive(Clone)]
pub struct TunnelSettings {
    /// ngrok: the whole connect + login + bind.
    pub connect_timeout: Duration,
    /// Each network step: DNS, TCP connect, TLS handshake.
    pub step_timeout: Duration,
    /// One probe through an external URL (or the ngrok URL), answer included.
    pub probe_timeout: Duration,
    /// First retry delay after a failure; doubles up to `backoff_max`.
    pub backoff_initial: Duration,
    pub backoff_max: Duration,
    /// External URL: re-check interval while online (the request may override it).
    pub check_interval: Duration,
    /// ngrok service `host:port`; `None` = the crate's default. Tests point it at loopback.
    pub ngrok_server_addr: Option<String>,
    /// TLS to the ngrok service; only a fake service in tests turns it off.
    pub ngrok_tls: bool,
    /// ngrok session heartbeat (interval, tolerance); `None` = the crate's default.
    pub ngrok_heartbeat: Option<(Duration, Duration)>,
    /// Probe the ngrok URL once it is online (sets `verified`).
    pub ngrok_self_check: bool,
    /// `NGROK_AUTHTOKEN` at start-up (used when no authtoken is saved).
    pub env_authtoken: Option<String>,
}

impl std::fmt::Debug for TunnelSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TunnelSettings")
            .field("connect_timeout", &self.connect_timeout)
            .field("step_timeout", &self.step_timeout)
            .field("probe_timeout", &self.probe_timeout)
            .field("backoff_initial", &self.backoff_initial)
            .field("backoff_max", &self.backoff_max)
            .field("check_interval", &self.check_interval)
            .field("ngrok_server_addr", &self.ngrok_server_addr)
            .field("ngrok_tls", &self.ngrok_tls)
            .field("env_authtoken_set", &self.env_authtoken.is_some())
            .finish()
    }
}

impl Default for TunnelSettings {
    fn default() -> Self {
        TunnelSettings {
            connect_timeout: Duration::from_secs(20),
            step_timeout: Duration::from_secs(10),
            probe_timeout: Duration::from_secs(10),
            backoff_initial: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
            check_interval: Duration::from_secs(30),
            ngrok_server_addr: None,
            ngrok_tls: true,
            ngrok_heartbeat: None,
            ngrok_self_check: true,
            env_authtoken: None,
        }
    }
}

impl TunnelSettings {
    /// The defaults plus `NGROK_AUTHTOKEN` from the environment.
    pub fn from_env() -> Self {
        TunnelSettings {
            env_authtoken: std::env::var(config::AUTHTOKEN_ENV)
                .ok()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty()),
            ..TunnelSettings::default()
        }
    }

    fn backoff(&self, failures: u32) -> Duration {
        Backoff::doubling(self.backoff_initial, self.backoff_max).delay(failures)
    }
}

/// What the tunnel needs from the app.
pub struct TunnelDeps {
    pub data_dir: PathBuf,
    /// Where its settings are kept (the `tunnel` section).
    pub settings: crate::settings::SettingsStore,
    /// The callback listener's address (the only thing the tunnel forwards to).
    pub callback_addr: SocketAddr,
    /// Its loopback URL (`http://127.0.0.1:P`).
    pub local_callback_url: String,
    pub callback_token: Arc<Secret>,
    /// The callback listener's allowed `Host` values (the tunnel's host is added while it is
    /// configured).
    pub hosts: Arc<AllowedHosts>,
    pub shutdown: Shutdown,
}

/// A `POST /api/tunnel` request.
#[derive(Clone, PartialEq, Eq)]
pub enum TunnelRequest {
    Ngrok {
        /// `None` keeps the saved one (or `NGROK_AUTHTOKEN`).
        authtoken: Option<String>,
        domain: Option<String>,
    },
    External {
        url: String,
        check_interval_secs: Option<u64>,
        /// `false`: no signed probe (the URL is reachable from the assistant's host only).
        verify: bool,
    },
}

impl std::fmt::Debug for TunnelRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TunnelRequest::Ngrok { authtoken, domain } => f
                .debug_struct("Ngrok")
                .field("authtoken_set", &authtoken.is_some())
                .field("domain", domain)
                .finish(),
            TunnelRequest::External {
                url,
                check_interval_secs,
                verify,
            } => f
                .debug_struct("External")
                .field("url", url)
                .field("check_interval_secs", check_interval_secs)
                .field("verify", verify)
                .finish(),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error("{0}")]
    InvalidUrl(#[from] external::OriginError),
    #[error("{0}")]
    InvalidField(String),
    #[error("cannot save the tunnel settings: {0}")]
    Save(String),
}

impl RequestError {
    pub fn code(&self) -> &'static str {
        match self {
            RequestError::InvalidUrl(_) => "invalid_url",
            RequestError::InvalidField(_) => "invalid_field",
            RequestError::Save(_) => "settings_write_failed",
        }
    }
}

struct Worker {
    cancel: watch::Sender<bool>,
    handle: JoinHandle<()>,
}

pub(super) struct Inner {
    deps: TunnelDeps,
    settings: TunnelSettings,
    probes: Arc<ProbeResponder>,
    authtoken: AuthtokenFile,
    tx: watch::Sender<TunnelStatus>,
    config: Mutex<Option<StoredConfig>>,
    worker: Mutex<Option<Worker>>,
    generation: AtomicU64,
    /// Wakes the worker: retry / re-check now.
    poke: Notify,
    /// Serialises configure / stop.
    ops: tokio::sync::Mutex<()>,
}

/// Handle to the tunnel (cheap to clone).
#[derive(Clone)]
pub struct TunnelManager {
    inner: Arc<Inner>,
}

impl TunnelManager {
    /// Loads the saved settings and, when a tunnel was on, starts it in the background.
    /// Returns at once. Must run inside the Tokio runtime.
    pub fn start(deps: TunnelDeps, settings: TunnelSettings) -> TunnelManager {
        // ngrok builds its TLS configuration with the process-default provider: make it ring
        // (a no-op when one is installed already).
        let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
        let saved = match config::load(&deps.settings) {
            Ok(c) => c,
            Err(e) => {
                tracing::error!(error = %e, "the saved tunnel settings are unusable; the tunnel is off");
                None
            }
        };
        let (tx, _) = watch::channel(TunnelStatus::off(&deps.local_callback_url));
        let inner = Arc::new(Inner {
            probes: Arc::new(ProbeResponder::new(deps.callback_token.clone())),
            authtoken: AuthtokenFile::new(&deps.data_dir),
            deps,
            settings,
            tx,
            config: Mutex::new(saved.clone()),
            worker: Mutex::new(None),
            generation: AtomicU64::new(0),
            poke: Notify::new(),
            ops: tokio::sync::Mutex::new(()),
        });
        let m = TunnelManager { inner };
        if let Some(c) = saved.filter(|c| c.enabled) {
            tracing::info!(
                kind = c.kind.as_str(),
                "starting the saved tunnel in the background"
            );
            m.spawn_worker(&c);
        }
        let weak = Arc::downgrade(&m.inner);
        let shutdown = m.inner.deps.shutdown.clone();
        tokio::spawn(async move {
            shutdown.wait().await;
            if let Some(inner) = weak.upgrade() {
                TunnelManager { inner }.halt(true).await;
            }
        });
        m
    }

    /// Status changes (the lead's wiring follows `callback_url`; the headless mode prints
    /// [`TunnelStatus::event_line`]).
    pub fn subscribe(&self) -> watch::Receiver<TunnelStatus> {
        self.inner.tx.subscribe()
    }

    pub fn status(&self) -> TunnelStatus {
        self.inner.tx.borrow().clone()
    }

    /// The callback URL to advertise now: the tunnel's origin while it is up, else loopback.
    pub fn advertised_callback_url(&self) -> String {
        self.inner.tx.borrow().callback_url.clone()
    }

    /// The probe responder the callback listener consults first (see [`probe`]).
    pub fn probes(&self) -> Arc<ProbeResponder> {
        self.inner.probes.clone()
    }

    /// Calls `f` with the advertised callback URL now and on every change (e.g.
    /// `CallbackTarget::set_url`). Stops when the app shuts down.
    pub fn on_callback_url(&self, f: impl Fn(String) + Send + Sync + 'static) {
        let mut rx = self.subscribe();
        let shutdown = self.inner.deps.shutdown.clone();
        tokio::spawn(async move {
            let mut last = String::new();
            loop {
                let url = rx.borrow_and_update().callback_url.clone();
                if url != last {
                    f(url.clone());
                    last = url;
                }
                tokio::select! {
                    r = rx.changed() => if r.is_err() { break },
                    _ = shutdown.wait() => break,
                }
            }
        });
    }

    /// Calls `f` with [`TunnelStatus::event_line`]: now when a tunnel is configured, then on
    /// every change of state, URL or error (not on re-checks).
    pub fn on_event_line(&self, f: impl Fn(String) + Send + Sync + 'static) {
        let mut rx = self.subscribe();
        let shutdown = self.inner.deps.shutdown.clone();
        let first = rx.borrow_and_update().clone();
        if first.state != State::Off {
            f(first.event_line());
        }
        tokio::spawn(async move {
            let mut last = first.signature();
            loop {
                tokio::select! {
                    r = rx.changed() => if r.is_err() { break },
                    _ = shutdown.wait() => break,
                }
                let s = rx.borrow_and_update().clone();
                if s.signature() != last {
                    last = s.signature();
                    f(s.event_line());
                }
            }
        });
    }

    /// Status plus the configuration (`GET /api/tunnel`).
    pub fn view(&self) -> Value {
        let mut v = serde_json::to_value(self.status()).unwrap_or(Value::Null);
        let config = self.inner.config.lock().expect("config lock").clone();
        let saved_token = self.inner.authtoken.load().is_some();
        let env_token = self.inner.settings.env_authtoken.is_some();
        v["config"] = json!({
            "kind": config.as_ref().map(|c| c.kind),
            "enabled": config.as_ref().is_some_and(|c| c.enabled),
            "url": config.as_ref().and_then(|c| c.url.clone()),
            "domain": config.as_ref().and_then(|c| c.domain.clone()),
            "check_interval_secs": config.as_ref().map(|c| c.check_interval(self.inner.settings.check_interval).as_secs()),
            "verify": config.as_ref().map(|c| c.verify()),
            "authtoken_set": saved_token || env_token,
            "authtoken_source": if saved_token { Some("saved") } else if env_token { Some("env") } else { None },
        });
        v
    }

    /// Saves and starts a tunnel (replacing any); returns at once with `connecting` (or
    /// `failed` when it cannot even start, e.g. no authtoken).
    pub async fn configure(&self, req: TunnelRequest) -> Result<Value, RequestError> {
        let _ops = self.inner.ops.lock().await;
        let stored = match req {
            TunnelRequest::Ngrok { authtoken, domain } => {
                let domain = domain
                    .map(|d| config::validate_domain(&d))
                    .transpose()
                    .map_err(RequestError::InvalidField)?;
                if let Some(t) = authtoken {
                    let t = config::validate_authtoken(&t).map_err(RequestError::InvalidField)?;
                    self.inner
                        .authtoken
                        .save(&t)
                        .map_err(|e| RequestError::Save(e.to_string()))?;
                }
                StoredConfig {
                    kind: Kind::Ngrok,
                    enabled: true,
                    domain,
                    url: None,
                    check_interval_secs: None,
                    verify: None,
                }
            }
            TunnelRequest::External {
                url,
                check_interval_secs,
                verify,
            } => {
                let origin = Origin::parse(&url)?;
                if let Some(s) = check_interval_secs {
                    if !(config::MIN_CHECK_SECS..=config::MAX_CHECK_SECS).contains(&s) {
                        return Err(RequestError::InvalidField(format!(
                            "`check_interval_secs` must be {}–{}",
                            config::MIN_CHECK_SECS,
                            config::MAX_CHECK_SECS
                        )));
                    }
                }
                StoredConfig {
                    kind: Kind::External,
                    enabled: true,
                    domain: None,
                    url: Some(origin.to_string()),
                    check_interval_secs,
                    verify: (!verify).then_some(false),
                }
            }
        };
        config::save(&self.inner.deps.settings, &stored)
            .map_err(|e| RequestError::Save(e.to_string()))?;
        // The new run publishes `connecting` at once: no `off` in between.
        self.halt(false).await;
        *self.inner.config.lock().expect("config lock") = Some(stored.clone());
        tracing::info!(kind = stored.kind.as_str(), url = ?stored.url, domain = ?stored.domain, "tunnel configured");
        self.spawn_worker(&stored);
        Ok(self.view())
    }

    /// Stops the tunnel and turns it off (the saved authtoken is kept).
    pub async fn stop(&self) -> Value {
        let _ops = self.inner.ops.lock().await;
        self.halt(true).await;
        let mut c = self.inner.config.lock().expect("config lock");
        if let Some(c) = c.as_mut() {
            c.enabled = false;
            if let Err(e) = config::save(&self.inner.deps.settings, c) {
                tracing::warn!(error = %e, "cannot save the tunnel settings");
            }
        }
        drop(c);
        tracing::info!("tunnel stopped");
        self.view()
    }

    /// Deletes the saved ngrok authtoken (a running tunnel keeps its session).
    pub fn forget_authtoken(&self) -> std::io::Result<Value> {
        self.inner.authtoken.remove()?;
        tracing::info!("ngrok authtoken deleted");
        Ok(self.view())
    }

    /// Retry / re-check now; restarts a tunnel that gave up (permanent failure).
    pub async fn check_now(&self) -> Value {
        let running = self
            .inner
            .worker
            .lock()
            .expect("worker lock")
            .as_ref()
            .is_some_and(|w| !w.handle.is_finished());
        if running {
            self.inner.poke.notify_one();
        } else {
            let _ops = self.inner.ops.lock().await;
            let c = self.inner.config.lock().expect("config lock").clone();
            if let Some(c) = c.filter(|c| c.enabled) {
                self.spawn_worker(&c);
            }
        }
        self.view()
    }

    /// Stops the tunnel for the app's shutdown (politely closing an ngrok session, bounded);
    /// the saved settings stay as they are, so it starts again with the app.
    pub async fn shutdown(&self) {
        let _ops = self.inner.ops.lock().await;
        self.halt(true).await;
    }

    /// Waits (bounded) until the state is no longer `connecting`.
    pub async fn settled(&self, within: Duration) -> TunnelStatus {
        let mut rx = self.subscribe();
        let _ = tokio::time::timeout(within, rx.wait_for(|s| s.state != State::Connecting)).await;
        self.status()
    }

    /// Stops the worker (politely closing an ngrok session), clears the extra hosts and
    /// (`publish_off`) publishes `off`. Leaves the saved settings alone.
    async fn halt(&self, publish_off: bool) {
        // Outdates the running worker's status updates.
        self.inner.generation.fetch_add(1, Ordering::SeqCst);
        let worker = self.inner.worker.lock().expect("worker lock").take();
        if let Some(mut w) = worker {
            let _ = w.cancel.send(true);
            if tokio::time::timeout(Duration::from_secs(3), &mut w.handle)
                .await
                .is_err()
            {
                w.handle.abort();
            }
        }
        self.inner.deps.hosts.set_extra(Vec::new());
        if !publish_off {
            return;
        }
        let local = self.inner.deps.local_callback_url.clone();
        self.inner.tx.send_if_modified(|s| {
            if s.state == State::Off {
                return false;
            }
            *s = TunnelStatus::off(&local);
            true
        });
    }

    fn spawn_worker(&self, c: &StoredConfig) {
        let gen = self.inner.generation.fetch_add(1, Ordering::SeqCst) + 1;
        let (cancel, cancel_rx) = watch::channel(false);
        let mut run = Run {
            inner: self.inner.clone(),
            gen,
            kind: c.kind,
            public_url: None,
            ever_online: false,
            verifies: c.verify(),
        };
        let handle = match c.kind {
            Kind::Ngrok => {
                let token = self
                    .inner
                    .authtoken
                    .load()
                    .or_else(|| self.inner.settings.env_authtoken.clone())
                    .unwrap_or_default();
                let s = &self.inner.settings;
                let params = NgrokParams {
                    authtoken: token,
                    domain: c.domain.clone(),
                    server_addr: s.ngrok_server_addr.clone(),
                    tls: s.ngrok_tls,
                    step_timeout: s.step_timeout,
                    heartbeat: s.ngrok_heartbeat,
                    forwards_to: self.inner.deps.local_callback_url.clone(),
                };
                // A reserved domain is known before connecting.
                run.public_url = c.domain.as_ref().map(|d| format!("https://{d}"));
                run.publish(State::Connecting, None, None, 1, None);
                tokio::spawn(run.ngrok(params, cancel_rx))
            }
            Kind::External => {
                let origin = c.url.as_deref().map(Origin::parse);
                let interval = c.check_interval(self.inner.settings.check_interval);
                match origin {
                    Some(Ok(o)) => {
                        run.public_url = Some(o.to_string());
                        // Accept the public Host at once: an assistant may post before the
                        // first check ends.
                        self.inner.deps.hosts.set_extra(o.host_headers());
                        if c.verify() {
                            run.publish(State::Connecting, None, None, 1, None);
                            tokio::spawn(run.external(o, interval, cancel_rx))
                        } else {
                            run.ever_online = true;
                            run.publish(State::Online, None, None, 0, None);
                            tokio::spawn(async {})
                        }
                    }
                    _ => {
                        run.publish(
                            State::Failed,
                            None,
                            Some(Failure::permanent(
                                "invalid_url",
                                "The saved tunnel URL is not valid: enter it again.",
                            )),
                            0,
                            None,
                        );
                        tokio::spawn(async {})
                    }
                }
            }
        };
        *self.inner.worker.lock().expect("worker lock") = Some(Worker { cancel, handle });
    }
}

/// A plausible `host[:port]` (what a proxy put in `Host`).
pub(super) fn valid_host(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 260
        && h.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | ':' | '[' | ']'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_debug_hides_the_token() {
        let s = TunnelSettings {
            env_authtoken: Some("secret-token-value".into()),
            ..TunnelSettings::default()
        };
        assert!(!format!("{s:?}").contains("secret-token-value"));
        let r = TunnelRequest::Ngrok {
            authtoken: Some("secret-token-value".into()),
            domain: None,
        };
        assert!(!format!("{r:?}").contains("secret-token-value"));
    }

    #[test]
    fn event_line_shape() {
        let s = TunnelStatus::off("http://127.0.0.1:5");
        let v: Value = serde_json::from_str(&s.event_line()).unwrap();
        assert_eq!(v["event"], "tunnel");
        assert_eq!(v["state"], "off");
        assert_eq!(v["callback_url"], "http://127.0.0.1:5");
    }
}
