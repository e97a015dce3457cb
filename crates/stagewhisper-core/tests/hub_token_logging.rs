//! The hub session token never reaches a log line, at any level, including the `log` records of
//! the libraries underneath (bridged into `tracing`). Its own test binary: it installs the
//! global subscriber. Runs against the conformance fake hub (the dev-only crate
//! `stagewhisper-fake-hub`), not the real hub.

use stagewhisper_core::assistants::kinds::clawborrator::{
    list_sessions, me, HubClient, HubEvent, HubSettings, HubTiming, Token,
};
use stagewhisper_core::backoff::Backoff;
use stagewhisper_core::http::Shutdown;
use stagewhisper_fake_hub::{FakeHub, FakeHubConfig};
use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn the_token_is_never_logged() {
    let capture = Capture::default();
    let w = capture.clone();
    tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_ansi(false)
        .with_writer(move || w.clone())
        .try_init()
        .expect("the only subscriber of this test binary");

    let hub = FakeHub::start(FakeHubConfig::default()).await;
    let timing = HubTiming {
        backoff: Backoff::Steps(vec![Duration::from_millis(20)]),
        liveness: Duration::from_secs(30),
        connect_timeout: Duration::from_secs(5),
        channel_grace: Duration::from_secs(5),
    };
    let good = HubSettings {
        timing: timing.clone(),
        ..HubSettings::new(hub.url(), Token::new("cw_sess_ana"), hub.session_id())
    };
    let shutdown = Shutdown::new();
    let (handle, mut events) = HubClient::start(good.clone(), shutdown.clone()).unwrap();
    let mut online = false;
    while let Ok(Some(e)) = tokio::time::timeout(Duration::from_secs(10), events.recv()).await {
        match e {
            HubEvent::Status(s) if s.code() == "online" && !online => {
                online = true;
                handle.prompt(1, "hello").unwrap();
            }
            HubEvent::Acked { chat_id, .. } => hub.reply(chat_id.as_deref(), "hi"),
            HubEvent::Reply { .. } => break,
            _ => {}
        }
    }
    assert!(online, "the client never came online");
    list_sessions(&good).await.unwrap();
    me(&good).await.unwrap();
    // A refused token is not logged either.
    let bad = HubSettings {
        timing,
        ..HubSettings::new(hub.url(), Token::new("cw_sess_refused"), hub.session_id())
    };
    assert!(me(&bad).await.is_err());
    handle.update_settings(bad).unwrap();
    while let Ok(Some(e)) = tokio::time::timeout(Duration::from_secs(10), events.recv()).await {
        if matches!(&e, HubEvent::Status(s) if s.code() == "auth_failed") {
            break;
        }
    }
    shutdown.trigger();

    let out = String::from_utf8_lossy(&capture.0.lock().unwrap()).to_string();
    // The capture works, down to the WebSocket library's own trace records.
    assert!(out.contains("hub link status"), "{out}");
    assert!(out.contains("tungstenite"), "{out}");
    for secret in ["cw_sess_ana", "cw_sess_refused"] {
        assert!(!out.contains(secret), "{secret} was logged:\n{out}");
    }
}
