//! The OpenClaw Gateway client against the real gateway (npm `openclaw` 2026.9.6), offline.
//!
//! Needs a running gateway and its control script: `tests/gateway/run.sh` sets everything up
//! inside a loopback-only network namespace and runs this with `--ignored`. Without it the test
//! is ignored (plain `cargo test` prints it as ignored, with the reason).
//!
//! Environment (set by run.sh): `SW_GATEWAY_URL`, `SW_GATEWAY_TOKEN`, `SW_GATEWAY_CTL` (the
//! `gwctl.sh` that starts / stops the gateway and runs the `openclaw` CLI on its state dir) and
//! `SW_OPENCLAW_BIN` (the openclaw entry point, for the record).

use stagewhisper_core::assistants::kinds::openclaw_gateway::{
    GatewayClient, GatewayEvent, GatewayHandle, GatewaySettings, LinkState, SendOutcome,
};
use stagewhisper_core::http::Shutdown;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

struct Env {
    url: String,
    token: String,
    ctl: String,
}

fn env() -> Option<Env> {
    let get = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    Some(Env {
        url: get("SW_GATEWAY_URL")?,
        token: get("SW_GATEWAY_TOKEN")?,
        ctl: get("SW_GATEWAY_CTL")?,
    })
    .filter(|_| get("SW_OPENCLAW_BIN").is_some())
}

/// Run the gateway control script (blocking; call through spawn_blocking in async code).
fn ctl(ctl: &str, args: &[&str]) -> String {
    let out = std::process::Command::new(ctl)
        .args(args)
        .output()
        .expect("run the gateway control script");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "gwctl {args:?} failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("gwctl {}: {}", args.join(" "), stdout.trim());
    stdout
}

async fn ctl_async(ctl: &str, args: &[&str]) -> String {
    let script = ctl.to_string();
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    tokio::task::spawn_blocking(move || {
        let refs: Vec<&str> = args.iter().map(String::as_str).collect();
        self::ctl(&script, &refs)
    })
    .await
    .unwrap()
}

struct Link {
    handle: GatewayHandle,
    events: mpsc::Receiver<GatewayEvent>,
    seen: Vec<GatewayEvent>,
    shutdown: Shutdown,
}

impl Link {
    fn start(url: &str, token: &str, dir: &std::path::Path) -> Link {
        let shutdown = Shutdown::new();
        let mut settings = GatewaySettings::new(url, token);
        settings.pairing_retry = Duration::from_secs(2);
        settings.request_timeout = Duration::from_secs(45);
        let (handle, events) =
            GatewayClient::start(settings, dir, shutdown.clone()).expect("start the client");
        Link {
            handle,
            events,
            seen: Vec::new(),
            shutdown,
        }
    }

    /// Wait for the first event matching `pred` (every event is kept in `seen`).
    async fn wait_for(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&GatewayEvent) -> bool,
    ) -> GatewayEvent {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match tokio::time::timeout_at(deadline, self.events.recv()).await {
                Ok(Some(ev)) => {
                    eprintln!("  event: {ev:?}");
                    self.seen.push(ev.clone());
                    if pred(&ev) {
                        return ev;
                    }
                }
                Ok(None) => panic!("event stream ended while waiting for {what}"),
                Err(_) => panic!(
                    "no {what} within {} s; status {:?}",
                    timeout.as_secs(),
                    self.handle.status()
                ),
            }
        }
    }

    async fn wait_state(&mut self, state: LinkState, timeout: Duration) {
        if self.handle.status().state == state {
            return;
        }
        self.wait_for(
            &format!("status {state:?}"),
            timeout,
            |e| matches!(e, GatewayEvent::Status(s) if s.state == state),
        )
        .await;
    }

    /// Collect events for `d`.
    async fn drain(&mut self, d: Duration) {
        let deadline = tokio::time::Instant::now() + d;
        while let Ok(Some(ev)) = tokio::time::timeout_at(deadline, self.events.recv()).await {
            eprintln!("  event: {ev:?}");
            self.seen.push(ev);
        }
    }

    fn finals_for(&self, key: &str) -> Vec<String> {
        self.seen
            .iter()
            .filter_map(|e| match e {
                GatewayEvent::Final {
                    idempotency_key,
                    text,
                    ..
                } if idempotency_key == key => Some(text.clone()),
                _ => None,
            })
            .collect()
    }

    /// How many user messages with `key` and assistant replies of run `key` the gateway has.
    async fn history_counts(&self, session: &str, key: &str) -> (usize, usize) {
        let h = self
            .handle
            .history(session, 200)
            .await
            .expect("chat.history");
        let user_key = format!("{key}:user");
        let users = h
            .messages
            .iter()
            .filter(|m| m.role == "user" && m.user_key() == Some(user_key.as_str()))
            .count();
        let replies = h
            .messages
            .iter()
            .filter(|m| m.role == "assistant" && m.run_id() == Some(key))
            .count();
        (users, replies)
    }
}

fn key() -> String {
    uuid::Uuid::new_v4().to_string()
}

fn is_final_for(key: &str) -> impl Fn(&GatewayEvent) -> bool + '_ {
    move |e| matches!(e, GatewayEvent::Final { idempotency_key, .. } if idempotency_key == key)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs the real OpenClaw gateway: run tests/gateway/run.sh"]
async fn real_gateway_end_to_end() {
    let Some(env) = env() else {
        eprintln!(
            "skipped: SW_GATEWAY_URL / SW_GATEWAY_TOKEN / SW_GATEWAY_CTL / SW_OPENCLAW_BIN are not set (tests/gateway/run.sh sets them)"
        );
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut link = Link::start(&env.url, &env.token, dir.path());

    // 1. Pairing: a new device must be approved; the client retries by itself and is online
    //    within 10 s of the approval, with no new start.
    eprintln!("== pairing");
    let ev = link
        .wait_for(
            "pairing_required",
            Duration::from_secs(120),
            |e| matches!(e, GatewayEvent::Status(s) if s.state == LinkState::PairingRequired),
        )
        .await;
    let GatewayEvent::Status(st) = ev else {
        unreachable!()
    };
    let pairing = st.pairing.expect("pairing details");
    assert_eq!(
        pairing.command,
        format!("openclaw devices approve {}", pairing.request_id)
    );
    assert!(!pairing.request_id.is_empty());
    assert_eq!(st.device_id, link.handle.device_id());
    // The CLI itself takes several seconds (it connects to the gateway too); the approval is
    // done when it returns.
    let cli_started = Instant::now();
    ctl_async(
        &env.ctl,
        &["cli", "devices", "approve", &pairing.request_id, "--json"],
    )
    .await;
    let approved_at = Instant::now();
    link.wait_state(LinkState::Online, Duration::from_secs(30))
        .await;
    let took = Instant::now().saturating_duration_since(approved_at);
    eprintln!(
        "approve CLI took {:.1} s; online {:.1} s after it returned",
        (approved_at - cli_started).as_secs_f64(),
        took.as_secs_f64()
    );
    assert!(took < Duration::from_secs(10), "online after {took:?}");
    assert_eq!(
        link.handle.status().server_version.as_deref(),
        Some("2026.9.6")
    );

    // 2. A streamed reply: drafts, then exactly one final.
    eprintln!("== streamed reply");
    let session = format!("sw-gw-{}", &key()[..8]);
    let k = key();
    let out = link
        .handle
        .send(&session, "Say hello to the gateway test.", &k)
        .await
        .unwrap();
    assert_eq!(out, SendOutcome::Started { run_id: k.clone() });
    let fin = link
        .wait_for("final", Duration::from_secs(90), is_final_for(&k))
        .await;
    let GatewayEvent::Final { text, run_id, .. } = fin else {
        unreachable!()
    };
    assert!(text.contains("Stub reply"), "{text}");
    assert_eq!(run_id, k);
    let drafts: Vec<&GatewayEvent> = link
        .seen
        .iter()
        .filter(|e| matches!(e, GatewayEvent::Draft { run_id, .. } if *run_id == k))
        .collect();
    assert!(!drafts.is_empty(), "no draft before the final");
    assert!(link
        .seen
        .iter()
        .any(|e| matches!(e, GatewayEvent::Typing { run_id, .. } if *run_id == k)));
    // The same key again never starts a second run.
    let again = link
        .handle
        .send(&session, "Say hello to the gateway test.", &k)
        .await
        .unwrap();
    assert_eq!(again, SendOutcome::AlreadyKnown { run_id: k.clone() });
    link.drain(Duration::from_secs(2)).await;
    assert_eq!(link.finals_for(&k).len(), 1);
    assert_eq!(link.history_counts(&session, &k).await, (1, 1));

    // 3. Stop: chat.abort on a slow reply.
    eprintln!("== abort");
    let k = key();
    let slow = "#slow please write a long answer about the weather in many many words so that it takes a while to stream";
    link.handle.send(&session, slow, &k).await.unwrap();
    link.wait_for(
        "first draft",
        Duration::from_secs(90),
        |e| matches!(e, GatewayEvent::Draft { run_id, .. } if *run_id == k),
    )
    .await;
    let res = link.handle.abort(&session, Some(&k)).await.unwrap();
    assert_eq!(res["aborted"], true, "{res}");
    let ab = link
        .wait_for(
            "aborted",
            Duration::from_secs(30),
            |e| matches!(e, GatewayEvent::Aborted { run_id, .. } if *run_id == k),
        )
        .await;
    let GatewayEvent::Aborted { partial, .. } = ab else {
        unreachable!()
    };
    // What had streamed when the abort landed: a prefix of the stub's "Stub reply #N: ...".
    assert!(
        !partial.is_empty() && partial.starts_with("Stub"),
        "{partial}"
    );
    link.drain(Duration::from_secs(3)).await;
    assert!(link.finals_for(&k).is_empty(), "no final after an abort");

    // 4. A message sent while the gateway is down waits and is delivered once.
    eprintln!("== send while the gateway is down");
    ctl_async(&env.ctl, &["stop"]).await;
    link.wait_for(
        "link down",
        Duration::from_secs(60),
        |e| matches!(e, GatewayEvent::Status(s) if s.state == LinkState::Reconnecting),
    )
    .await;
    let k = key();
    let out = link
        .handle
        .send(&session, "Are you back?", &k)
        .await
        .unwrap();
    assert_eq!(out, SendOutcome::Queued);
    ctl_async(&env.ctl, &["start"]).await;
    link.wait_state(LinkState::Online, Duration::from_secs(90))
        .await;
    link.wait_for(
        "final of the queued message",
        Duration::from_secs(120),
        is_final_for(&k),
    )
    .await;
    link.drain(Duration::from_secs(2)).await;
    assert_eq!(link.finals_for(&k).len(), 1);
    assert_eq!(link.history_counts(&session, &k).await, (1, 1));

    // 5. Gateway restart mid-reply: reconnect, and the reply exactly once (history).
    eprintln!("== restart mid-reply");
    let k = key();
    let long = "#slow tell me a story about a lighthouse keeper who counts the waves every night and writes them all down in a very long book";
    link.handle.send(&session, long, &k).await.unwrap();
    link.wait_for(
        "first draft",
        Duration::from_secs(90),
        |e| matches!(e, GatewayEvent::Draft { run_id, .. } if *run_id == k),
    )
    .await;
    ctl_async(&env.ctl, &["restart"]).await;
    link.wait_state(LinkState::Online, Duration::from_secs(120))
        .await;
    if link.finals_for(&k).is_empty() {
        link.wait_for(
            "final after the restart",
            Duration::from_secs(120),
            is_final_for(&k),
        )
        .await;
    }
    link.drain(Duration::from_secs(3)).await;
    let finals = link.finals_for(&k);
    eprintln!("finals for the restarted run: {finals:?}");
    assert!(!finals.is_empty());
    assert!(
        finals.iter().all(|t| t == &finals[0]),
        "one reply, however often reported: {finals:?}"
    );
    assert_eq!(
        link.history_counts(&session, &k).await,
        (1, 1),
        "one user message and one reply in the gateway"
    );
    // Sending it again after the reconnect does not start a second run either.
    let again = link.handle.send(&session, long, &k).await.unwrap();
    assert_eq!(again, SendOutcome::AlreadyKnown { run_id: k.clone() });
    link.shutdown.trigger();
    link.wait_state(LinkState::Stopped, Duration::from_secs(10))
        .await;

    // 6. Wrong token: the stored device token is discarded (the token changed), the gateway
    //    refuses, the status says so, and the client does not retry.
    eprintln!("== wrong token");
    let mut bad = Link::start(&env.url, "definitely-not-the-token", dir.path());
    bad.wait_for(
        "failed",
        Duration::from_secs(60),
        |e| matches!(e, GatewayEvent::Status(s) if s.state == LinkState::Failed),
    )
    .await;
    let st = bad.handle.status();
    assert_eq!(st.code, "token_mismatch", "{st:?}");
    assert!(st.detail.contains("token"), "{}", st.detail);
    bad.drain(Duration::from_secs(8)).await;
    assert_eq!(bad.handle.status().state, LinkState::Failed);
    let attempts = bad
        .seen
        .iter()
        .filter(|e| matches!(e, GatewayEvent::Status(s) if s.state != LinkState::Failed && s.state != LinkState::Connecting))
        .count();
    assert_eq!(attempts, 0, "no retry loop: {:?}", bad.seen);
    bad.shutdown.trigger();
    eprintln!("== all real-gateway cases passed");
}
