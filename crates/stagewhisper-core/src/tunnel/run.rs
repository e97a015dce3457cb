//! One run of a configured tunnel (one generation): connect (ngrok) or verify (external URL),
//! publish the status, keep checking, and retry with backoff until a newer run or the stop
//! cancels it.

use super::external::{self, Origin, ProbeTimeouts};
use super::ngrok::{self, NgrokParams};
use super::status::{allow_hint, now, off_detail, State, TunnelStatus};
use super::{valid_host, Failure, Inner, Kind, ALLOW_VAR};
use crate::clock::fmt_time;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// One run of a configured tunnel (one generation).
pub(super) struct Run {
    pub(super) inner: Arc<Inner>,
    pub(super) gen: u64,
    pub(super) kind: Kind,
    pub(super) public_url: Option<String>,
    pub(super) ever_online: bool,
    /// External URL: checked with the signed probe (else advertised as entered).
    pub(super) verifies: bool,
}

enum Wake {
    Cancelled,
    Go,
}

impl Run {
    fn current(&self) -> bool {
        self.inner.generation.load(Ordering::SeqCst) == self.gen
    }

    /// Publishes a status of this run (ignored once a newer run started).
    pub(super) fn publish(
        &self,
        state: State,
        verified: Option<bool>,
        error: Option<Failure>,
        attempt: u32,
        retry_in: Option<Duration>,
    ) {
        if !self.current() {
            return;
        }
        let local = &self.inner.deps.local_callback_url;
        let retrying = error.as_ref().is_none_or(|e| !e.permanent);
        let advertise_public =
            state == State::Online || (self.ever_online && retrying && state != State::Off);
        let callback_url = match (&self.public_url, advertise_public) {
            (Some(u), true) => u.clone(),
            _ => local.clone(),
        };
        let public = self.public_url.clone();
        let detail = self.detail(state, &error, attempt, retry_in);
        let checked_now = verified.is_some();
        self.inner.tx.send_if_modified(|s| {
            let changed_state = s.state != state;
            let next = TunnelStatus {
                state,
                kind: Some(self.kind),
                public_url: public.clone(),
                callback_url: callback_url.clone(),
                local_callback_url: local.clone(),
                detail: detail.clone(),
                error: error.clone(),
                since: if changed_state { now() } else { s.since.clone() },
                attempt,
                next_retry_at: retry_in.map(|d| {
                    fmt_time(chrono::Utc::now() + chrono::Duration::from_std(d).unwrap_or_default())
                }),
                verified: verified.or(if changed_state && state != State::Online {
                    None
                } else {
                    s.verified
                }),
                checked_at: if checked_now {
                    Some(now())
                } else {
                    s.checked_at.clone()
                },
                assistant_allow: public.as_deref().map(allow_hint),
            };
            if *s == next {
                return false;
            }
            if changed_state || s.error.as_ref().map(|e| e.code) != next.error.as_ref().map(|e| e.code) {
                match (&next.state, &next.error) {
                    (State::Failed, Some(e)) => {
                        tracing::warn!(kind = self.kind.as_str(), code = e.code, "tunnel failed: {}", e.message)
                    }
                    (st, _) => {
                        tracing::info!(kind = self.kind.as_str(), state = st.as_str(), public_url = ?next.public_url, callback_url = %next.callback_url, "tunnel state")
                    }
                }
            }
            *s = next;
            true
        });
    }

    fn detail(
        &self,
        state: State,
        error: &Option<Failure>,
        attempt: u32,
        retry_in: Option<Duration>,
    ) -> String {
        let local = &self.inner.deps.local_callback_url;
        let public = self.public_url.as_deref().unwrap_or("");
        match (state, self.kind) {
            (State::Off, _) => off_detail(local),
            (State::Connecting, Kind::Ngrok) => {
                format!("Connecting to ngrok (attempt {attempt})…")
            }
            (State::Connecting, Kind::External) => {
                format!("Checking {public}: sending a signed probe through it to this app…")
            }
            (State::Online, Kind::Ngrok) => format!(
                "Online: {public} forwards to the callback listener ({local}). A remote assistant must allow {ALLOW_VAR}={public}."
            ),
            (State::Online, Kind::External) => {
                let mut d = if self.verifies {
                    format!(
                        "Verified: a signed probe sent through {public} reached the callback listener ({local}). A remote assistant must allow {ALLOW_VAR}={public}."
                    )
                } else {
                    format!(
                        "Advertising {public} without checking it (verification is off): it must forward to the callback listener ({local}) and be reachable from the assistant's host. A remote assistant must allow {ALLOW_VAR}={public} (not needed for a loopback URL)."
                    )
                };
                if public.starts_with("http://")
                    && !Origin::parse(public).is_ok_and(|o| o.is_loopback())
                {
                    d.push_str(" Note: plain http — the callback token crosses the network unencrypted unless the path is private (VPN, SSH).");
                }
                d
            }
            (State::Failed, _) => {
                let msg = error
                    .as_ref()
                    .map(|e| e.message.clone())
                    .unwrap_or_else(|| "The tunnel is down.".into());
                match retry_in {
                    Some(d) => format!("{msg} Next attempt in {} s.", d.as_secs().max(1)),
                    None => format!("{msg} Not retrying: change the settings and start the tunnel again."),
                }
            }
        }
    }

    /// Sleeps `d`, or less when poked or cancelled.
    async fn wait(&self, d: Duration, cancel: &mut watch::Receiver<bool>) -> Wake {
        tokio::select! {
            _ = tokio::time::sleep(d) => Wake::Go,
            _ = self.inner.poke.notified() => Wake::Go,
            _ = cancel.wait_for(|c| *c) => Wake::Cancelled,
        }
    }

    pub(super) async fn ngrok(mut self, params: NgrokParams, mut cancel: watch::Receiver<bool>) {
        let settings = self.inner.settings.clone();
        let mut failures = 0u32;
        loop {
            self.publish(State::Connecting, None, None, failures + 1, None);
            let opened = tokio::select! {
                r = ngrok::open(&params, settings.connect_timeout) => r,
                _ = cancel.wait_for(|c| *c) => return,
            };
            match opened {
                Ok(mut t) => {
                    let origin = Origin::parse(&t.url);
                    let hosts = match &origin {
                        Ok(o) => o.host_headers(),
                        Err(_) => Vec::new(),
                    };
                    self.inner.deps.hosts.set_extra(hosts);
                    self.public_url = Some(
                        origin
                            .as_ref()
                            .map(|o| o.to_string())
                            .unwrap_or(t.url.clone()),
                    );
                    self.ever_online = true;
                    self.publish(State::Online, None, None, 0, None);
                    if let (true, Ok(o)) = (settings.ngrok_self_check, origin) {
                        self.spawn_self_check(o);
                    }
                    let lost = tokio::select! {
                        why = t.serve(self.inner.deps.callback_addr) => Some(why),
                        _ = cancel.wait_for(|c| *c) => None,
                    };
                    t.close().await;
                    let Some(why) = lost else { return };
                    failures = 1;
                    let d = settings.backoff(failures);
                    self.publish(State::Failed, None, Some(why), failures, Some(d));
                    if let Wake::Cancelled = self.wait(d, &mut cancel).await {
                        return;
                    }
                }
                Err(f) => {
                    failures += 1;
                    if f.permanent {
                        self.publish(State::Failed, None, Some(f), failures, None);
                        return;
                    }
                    let d = settings.backoff(failures);
                    self.publish(State::Failed, None, Some(f), failures, Some(d));
                    if let Wake::Cancelled = self.wait(d, &mut cancel).await {
                        return;
                    }
                }
            }
        }
    }

    /// Probes the ngrok URL once from this computer (informational: `verified`).
    fn spawn_self_check(&self, origin: Origin) {
        let inner = self.inner.clone();
        let gen = self.gen;
        tokio::spawn(async move {
            let t = ProbeTimeouts {
                step: inner.settings.step_timeout,
                total: inner.settings.probe_timeout,
            };
            let r =
                external::verify(&origin, &inner.probes, t, &inner.deps.local_callback_url).await;
            if inner.generation.load(Ordering::SeqCst) != gen {
                return;
            }
            inner.tx.send_if_modified(|s| {
                if s.state != State::Online {
                    return false;
                }
                s.verified = Some(r.is_ok());
                s.checked_at = Some(now());
                if let Err(f) = &r {
                    tracing::info!(
                        code = f.code,
                        "the ngrok URL could not be verified from this computer: {}",
                        f.message
                    );
                    s.detail = format!(
                        "{} (Could not verify it from this computer: {})",
                        s.detail, f.message
                    );
                }
                true
            });
        });
    }

    pub(super) async fn external(
        mut self,
        origin: Origin,
        interval: Duration,
        mut cancel: watch::Receiver<bool>,
    ) {
        let settings = self.inner.settings.clone();
        let timeouts = ProbeTimeouts {
            step: settings.step_timeout,
            total: settings.probe_timeout,
        };
        let mut failures = 0u32;
        let mut online = false;
        loop {
            if !online {
                self.publish(State::Connecting, None, None, failures + 1, None);
            }
            let r = tokio::select! {
                r = external::verify(&origin, &self.inner.probes, timeouts, &self.inner.deps.local_callback_url) => r,
                _ = cancel.wait_for(|c| *c) => return,
            };
            let wait = match r {
                Ok(v) => {
                    failures = 0;
                    online = true;
                    self.ever_online = true;
                    let mut hosts = origin.host_headers();
                    if let Some(h) = v.host_seen.filter(|h| valid_host(h) && !hosts.contains(h)) {
                        hosts.push(h);
                    }
                    self.inner.deps.hosts.set_extra(hosts);
                    self.publish(State::Online, Some(true), None, 0, None);
                    interval
                }
                Err(f) => {
                    failures += 1;
                    online = false;
                    let d = settings.backoff(failures).min(interval);
                    let permanent = f.permanent;
                    self.publish(
                        State::Failed,
                        Some(false),
                        Some(f),
                        failures,
                        (!permanent).then_some(d),
                    );
                    if permanent {
                        return;
                    }
                    d
                }
            };
            if let Wake::Cancelled = self.wait(wait, &mut cancel).await {
                return;
            }
        }
    }
}
