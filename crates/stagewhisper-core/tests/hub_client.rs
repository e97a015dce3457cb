//! The clawborrator hub operator client against the conformance fake hub (the dev-only crate
//! `stagewhisper-fake-hub`), over real WebSockets on loopback. The fake is written from the hub's
//! published spec and the public clients' behaviour; it is not the real hub.

use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use stagewhisper_core::assistants::kinds::clawborrator::{
    list_sessions, me, HubClient, HubEvent, HubHandle, HubSettings, HubStatus, HubTiming,
    Resolution, Role, Token, CHANNEL_OFFLINE,
};
use stagewhisper_core::backoff::Backoff;
use stagewhisper_core::http::Shutdown;
use stagewhisper_fake_hub::{FakeHub, FakeHubConfig, PromptAck};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::Message;

/// Generous bound for something that should happen promptly (never a speed assertion).
const WAIT: Duration = Duration::from_secs(10);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn timing() -> HubTiming {
    HubTiming {
        backoff: Backoff::Steps(vec![ms(20), ms(50), ms(100)]),
        liveness: Duration::from_secs(30),
        connect_timeout: Duration::from_secs(5),
        channel_grace: Duration::from_secs(5),
    }
}

fn settings(hub: &FakeHub, token: &str) -> HubSettings {
    HubSettings {
        timing: timing(),
        ..HubSettings::new(hub.url(), Token::new(token), hub.session_id())
    }
}

struct Events {
    rx: mpsc::Receiver<HubEvent>,
    log: Vec<HubEvent>,
}

impl Events {
    /// The next event matching `pred` (all events are kept in `log`).
    async fn until(&mut self, what: &str, pred: impl Fn(&HubEvent) -> bool) -> HubEvent {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some(e)) => {
                    self.log.push(e.clone());
                    if pred(&e) {
                        return e;
                    }
                }
                Ok(None) => panic!("event stream ended waiting for {what}; got {:#?}", self.log),
                Err(_) => panic!("timed out waiting for {what}; got {:#?}", self.log),
            }
        }
    }

    /// Moves whatever already arrived into `log`.
    fn drain(&mut self) {
        while let Ok(e) = self.rx.try_recv() {
            self.log.push(e);
        }
    }

    async fn status(&mut self, code: &str) -> HubStatus {
        match self
            .until(
                code,
                |e| matches!(e, HubEvent::Status(s) if s.code() == code),
            )
            .await
        {
            HubEvent::Status(s) => s,
            _ => unreachable!(),
        }
    }

    /// Every event up to a marker reply the fake sends now. The fake writes to a socket in
    /// order, so whatever it sent before (replays included) arrives before the marker.
    async fn until_marker(&mut self, hub: &FakeHub) -> Vec<HubEvent> {
        static N: AtomicUsize = AtomicUsize::new(0);
        let marker = format!("marker-{}", N.fetch_add(1, Ordering::SeqCst));
        let start = self.log.len();
        hub.reply(None, &marker);
        self.until(
            "the marker",
            |e| matches!(e, HubEvent::Reply { text, .. } if *text == marker),
        )
        .await;
        self.log[start..self.log.len() - 1].to_vec()
    }
}

struct Rig {
    hub: FakeHub,
    handle: HubHandle,
    events: Events,
    shutdown: Shutdown,
}

impl Drop for Rig {
    fn drop(&mut self) {
        self.shutdown.trigger();
    }
}

fn start_client(s: HubSettings) -> (HubHandle, Events, Shutdown) {
    let shutdown = Shutdown::new();
    let (handle, rx) = HubClient::start(s, shutdown.clone()).expect("valid settings");
    (
        handle,
        Events {
            rx,
            log: Vec::new(),
        },
        shutdown,
    )
}

async fn attached_with(cfg: FakeHubConfig, tune: impl FnOnce(&mut HubTiming)) -> Rig {
    let hub = FakeHub::start(cfg).await;
    let mut s = settings(&hub, "cw_sess_ana");
    tune(&mut s.timing);
    let (handle, mut events, shutdown) = start_client(s);
    events.status("online").await;
    Rig {
        hub,
        handle,
        events,
        shutdown,
    }
}

async fn attached() -> Rig {
    attached_with(FakeHubConfig::default(), |_| {}).await
}

/// Sends prompt `local_id` and returns the `chatId` of its ack.
async fn prompt(rig: &mut Rig, local_id: i64, text: &str) -> String {
    rig.handle.prompt(local_id, text).unwrap();
    match rig
        .events
        .until(
            "the ack",
            |e| matches!(e, HubEvent::Acked { local_id: l, .. } if *l == local_id),
        )
        .await
    {
        HubEvent::Acked {
            chat_id: Some(c), ..
        } => c,
        other => panic!("ack without chatId: {other:?}"),
    }
}

fn replies(events: &[HubEvent]) -> Vec<(Option<String>, String, bool)> {
    events
        .iter()
        .filter_map(|e| match e {
            HubEvent::Reply {
                chat_id,
                text,
                r#final,
            } => Some((chat_id.clone(), text.clone(), *r#final)),
            _ => None,
        })
        .collect()
}

fn frames_of(hub: &FakeHub, ty: &str) -> Vec<Value> {
    hub.cli_frames()
        .into_iter()
        .filter(|f| f["type"] == ty)
        .collect()
}

#[tokio::test]
async fn attach_subscribes_reports_role_presence_and_online() {
    let hub = FakeHub::start(FakeHubConfig {
        role: "approver".into(),
        ..FakeHubConfig::default()
    })
    .await;
    let (_handle, mut events, shutdown) = start_client(settings(&hub, "cw_sess_ana"));
    let role = events
        .until("the role", |e| matches!(e, HubEvent::Role(_)))
        .await;
    assert_eq!(role, HubEvent::Role(Role::Approver));
    events
        .until(
            "presence",
            |e| matches!(e, HubEvent::Presence { attached } if attached == &["ana".to_string()]),
        )
        .await;
    events.status("online").await;
    // Nothing claimed online before `subscribed`.
    let first_online = events
        .log
        .iter()
        .position(|e| *e == HubEvent::Status(HubStatus::Online))
        .unwrap();
    let role_at = events
        .log
        .iter()
        .position(|e| matches!(e, HubEvent::Role(_)))
        .unwrap();
    assert!(role_at < first_online, "{:#?}", events.log);
    let subs = frames_of(&hub, "subscribe");
    assert_eq!(
        subs,
        vec![json!({"type": "subscribe", "sessionId": hub.session_id()})]
    );

    // The REST reads a settings page uses, with the same bearer.
    let s = settings(&hub, "cw_sess_ana");
    let sessions = list_sessions(&s).await.unwrap();
    assert_eq!(sessions.len(), 1);
    assert_eq!(sessions[0].id, hub.session_id());
    assert_eq!(sessions[0].routing_name.as_deref(), Some("@fake"));
    assert_eq!(me(&s).await.unwrap().login, "ana");
    let e = me(&settings(&hub, "cw_sess_wrong")).await.unwrap_err();
    assert_eq!(e.code(), "auth_failed");
    shutdown.trigger();
}

#[tokio::test]
async fn prompt_is_acked_with_a_chat_id_and_replies_come_once_plain_and_chunked() {
    let mut rig = attached().await;
    let chat = prompt(&mut rig, 1, "what did they just say?").await;
    let sent = frames_of(&rig.hub, "prompt");
    assert_eq!(
        sent,
        vec![json!({"type": "prompt", "sessionId": rig.hub.session_id(),
            "text": "what did they just say?"})]
    );

    rig.hub.reply(Some(&chat), "They asked about pricing.");
    let r = rig
        .events
        .until("the reply", |e| matches!(e, HubEvent::Reply { .. }))
        .await;
    assert_eq!(
        r,
        HubEvent::Reply {
            chat_id: Some(chat.clone()),
            text: "They asked about pricing.".into(),
            r#final: true
        }
    );

    // Streamed: drafts (whole text so far), then one final reply.
    let chat2 = prompt(&mut rig, 2, "and now?").await;
    assert_ne!(chat, chat2);
    rig.hub
        .reply_chunked(&chat2, &["Say ", "the price ", "first."]);
    // The hub may also store the streamed reply as a `reply` event: still one message.
    rig.hub.reply(Some(&chat2), "Say the price first.");
    let got = rig.events.until_marker(&rig.hub).await;
    let drafts: Vec<&str> = got
        .iter()
        .filter_map(|e| match e {
            HubEvent::Draft { chat_id, text } if *chat_id == chat2 => Some(text.as_str()),
            _ => None,
        })
        .collect();
    assert_eq!(drafts, ["Say ", "Say the price "]);
    assert_eq!(
        replies(&got),
        vec![(Some(chat2.clone()), "Say the price first.".into(), true)]
    );
    // Our own prompts were echoed by the hub as chat/prompt events, and not surfaced.
    assert_eq!(frames_of(&rig.hub, "prompt").len(), 2);
    assert!(
        !rig.events
            .log
            .iter()
            .any(|e| matches!(e, HubEvent::Prompt { .. })),
        "{:#?}",
        rig.events.log
    );
}

#[tokio::test]
async fn other_chat_and_tail_events_are_surfaced_as_what_they_are() {
    let mut rig = attached().await;
    rig.hub.foreign_prompt("bob", "summarise the call");
    rig.hub.tail("PreToolUse", Some("Bash"));
    rig.hub.tail("PostToolUse", Some("Bash"));
    rig.hub
        .assistant_text(Some("chat-x"), "Looking at the notes…");
    rig.hub.tail("Stop", None);
    rig.hub.peer_timeout("@backend did not answer");
    let got = rig.events.until_marker(&rig.hub).await;
    assert_eq!(
        got,
        vec![
            HubEvent::Prompt {
                chat_id: Some("chat-1".into()),
                text: "summarise the call".into(),
                author: Some("bob".into())
            },
            HubEvent::Typing {
                tool: Some("Bash".into())
            },
            HubEvent::Typing { tool: None },
            HubEvent::Reply {
                chat_id: Some("chat-x".into()),
                text: "Looking at the notes…".into(),
                r#final: false
            },
            HubEvent::Idle,
            HubEvent::Error {
                code: "peer_timeout".into(),
                message: "@backend did not answer".into(),
                local_id: None
            },
        ]
    );
}

#[tokio::test]
async fn a_permission_allowed_here_reaches_the_hub_as_an_approval() {
    let mut rig = attached().await;
    rig.hub
        .request_permission("req-1", "Bash", "rm -rf target/debug");
    let p = rig
        .events
        .until("the request", |e| matches!(e, HubEvent::Permission { .. }))
        .await;
    assert_eq!(
        p,
        HubEvent::Permission {
            request_id: "req-1".into(),
            tool: "Bash".into(),
            input_preview: "rm -rf target/debug".into()
        }
    );
    rig.handle.approve("req-1", true).unwrap();
    let a = rig
        .hub
        .wait_cli_frame("approval", WAIT, |_| true)
        .await
        .expect("the approval reached the hub");
    assert_eq!(
        a,
        json!({"type": "approval", "sessionId": rig.hub.session_id(), "requestId": "req-1",
            "decision": "allow"})
    );
    let r = rig
        .events
        .until("the resolution", |e| {
            matches!(e, HubEvent::PermissionResolved { .. })
        })
        .await;
    assert_eq!(
        r,
        HubEvent::PermissionResolved {
            request_id: "req-1".into(),
            decision: Resolution::Allow,
            resolver: Some("ana".into())
        }
    );
    // Settled: a second answer is refused here (the app answers 409).
    assert_eq!(
        rig.handle.approve("req-1", false).unwrap_err().code(),
        "already_resolved"
    );

    // Denied likewise.
    rig.hub.request_permission("req-2", "Write", "notes.md");
    rig.events
        .until(
            "the second request",
            |e| matches!(e, HubEvent::Permission { request_id, .. } if request_id == "req-2"),
        )
        .await;
    rig.handle.approve("req-2", false).unwrap();
    let r = rig
        .events
        .until("the second resolution", |e| {
            matches!(e, HubEvent::PermissionResolved { request_id, .. } if request_id == "req-2")
        })
        .await;
    assert!(matches!(
        r,
        HubEvent::PermissionResolved {
            decision: Resolution::Deny,
            ..
        }
    ));
}

#[tokio::test]
async fn a_permission_resolved_by_another_operator_or_expired_settles_with_who() {
    let mut rig = attached().await;
    // Bob is attached to the same session with his own client.
    let mut bs = settings(&rig.hub, "cw_sess_bob");
    bs.timing = timing();
    let (bob, mut bob_events, bob_stop) = start_client(bs);
    bob_events.status("online").await;

    rig.hub.request_permission("req-7", "Edit", "src/main.rs");
    rig.events
        .until("the request", |e| matches!(e, HubEvent::Permission { .. }))
        .await;
    bob_events
        .until("bob sees it", |e| matches!(e, HubEvent::Permission { .. }))
        .await;
    bob.approve("req-7", false).unwrap();
    let r = rig
        .events
        .until("the resolution", |e| {
            matches!(e, HubEvent::PermissionResolved { .. })
        })
        .await;
    assert_eq!(
        r,
        HubEvent::PermissionResolved {
            request_id: "req-7".into(),
            decision: Resolution::Deny,
            resolver: Some("bob".into())
        }
    );
    assert_eq!(
        rig.handle.approve("req-7", true).unwrap_err().code(),
        "already_resolved"
    );
    bob_stop.trigger();

    // Resolved by the hub itself on behalf of someone else, and an expiry.
    rig.hub.request_permission("req-8", "Bash", "ls");
    rig.hub.request_permission("req-9", "Bash", "pwd");
    assert!(rig.hub.resolve_permission("req-8", "allow", Some("carol")));
    assert!(rig.hub.resolve_permission("req-9", "expired", None));
    let got = rig.events.until_marker(&rig.hub).await;
    let resolved: Vec<HubEvent> = got
        .into_iter()
        .filter(|e| matches!(e, HubEvent::PermissionResolved { .. }))
        .collect();
    assert_eq!(
        resolved,
        vec![
            HubEvent::PermissionResolved {
                request_id: "req-8".into(),
                decision: Resolution::Allow,
                resolver: Some("carol".into())
            },
            HubEvent::PermissionResolved {
                request_id: "req-9".into(),
                decision: Resolution::Expired,
                resolver: None
            },
        ]
    );
}

#[tokio::test]
async fn channel_offline_turns_the_status_offline_with_the_sentence() {
    let mut rig = attached().await;
    rig.hub.set_channel_connected(false);
    let s = rig.events.status("offline").await;
    assert_eq!(s.to_string(), format!("offline: {CHANNEL_OFFLINE}"));
    assert_eq!(
        s.to_string(),
        "offline: Claude Code session is not connected"
    );
    rig.hub.set_channel_connected(true);
    rig.events.status("online").await;
}

#[tokio::test]
async fn without_word_on_the_channel_it_is_never_online() {
    let hub = FakeHub::start(FakeHubConfig {
        announce_channel: false,
        ..FakeHubConfig::default()
    })
    .await;
    let mut s = settings(&hub, "cw_sess_ana");
    s.timing.channel_grace = ms(200);
    let (_handle, mut events, shutdown) = start_client(s);
    events
        .until("the role", |e| matches!(e, HubEvent::Role(_)))
        .await;
    let st = events.status("offline").await;
    assert_eq!(
        st,
        HubStatus::Offline {
            reason: CHANNEL_OFFLINE.into()
        }
    );
    assert!(
        !events.log.contains(&HubEvent::Status(HubStatus::Online)),
        "{:#?}",
        events.log
    );
    // The first word from the hub settles it.
    hub.set_channel_connected(true);
    events.status("online").await;
    shutdown.trigger();
}

/// A stand-in for the Claude Code side (what the channel MCP server does on `/channel`).
async fn channel_client(
    hub: &FakeHub,
) -> tokio_tungstenite::WebSocketStream<tokio::net::TcpStream> {
    let url = hub.url().replace("http://", "ws://") + "/channel";
    let mut req = url.into_client_request().unwrap();
    req.headers_mut().insert(
        "authorization",
        format!("Bearer {}", hub.channel_token()).parse().unwrap(),
    );
    let addr = hub.url().trim_start_matches("http://").to_string();
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (ws, _) = tokio_tungstenite::client_async(req, tcp).await.unwrap();
    ws
}

async fn next_json(ws: &mut tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>) -> Value {
    loop {
        match tokio::time::timeout(WAIT, ws.next()).await {
            Ok(Some(Ok(Message::Text(t)))) => return serde_json::from_str(t.as_str()).unwrap(),
            Ok(Some(Ok(_))) => continue,
            other => panic!("channel socket: {other:?}"),
        }
    }
}

#[tokio::test]
async fn the_claude_code_channel_drives_status_chat_tail_and_permissions() {
    let hub = FakeHub::start(FakeHubConfig {
        channel_connected: false,
        ..FakeHubConfig::default()
    })
    .await;
    let (handle, mut events, shutdown) = start_client(settings(&hub, "cw_sess_ana"));
    let s = events.status("offline").await;
    assert_eq!(
        s,
        HubStatus::Offline {
            reason: CHANNEL_OFFLINE.into()
        }
    );

    let mut ch = channel_client(&hub).await;
    ch.send(Message::text(
        json!({"type": "register", "host": "h", "cwd": "/w", "osUser": "u", "pid": 1,
            "channelVersion": "0.0.0", "sessionId": hub.session_id()})
        .to_string(),
    ))
    .await
    .unwrap();
    let w = next_json(&mut ch).await;
    assert_eq!(w["type"], "welcome");
    assert_eq!(w["sessionId"], hub.session_id());
    events.status("online").await;

    // An operator prompt reaches Claude Code with its chatId; Claude answers on the channel.
    handle.prompt(11, "hello claude").unwrap();
    let p = next_json(&mut ch).await;
    assert_eq!(p["type"], "prompt");
    assert_eq!(p["text"], "hello claude");
    let chat = p["chatId"].as_str().unwrap().to_string();
    events
        .until(
            "the ack",
            |e| matches!(e, HubEvent::Acked { local_id: 11, chat_id: Some(c) } if *c == chat),
        )
        .await;
    let send = |v: Value| Message::text(v.to_string());
    ch.send(send(
        json!({"type": "tail_event", "eventType": "PreToolUse",
        "payload": {"tool_name": "Read"}, "ts": "2026-05-01T10:00:00.001Z"}),
    ))
    .await
    .unwrap();
    ch.send(send(json!({"type": "chat_event", "eventType": "reply_chunk",
        "payload": {"chatId": chat, "text": "Hi", "done": false}, "ts": "2026-05-01T10:00:00.002Z"})))
        .await
        .unwrap();
    ch.send(send(json!({"type": "chat_event", "eventType": "reply_chunk",
        "payload": {"chatId": chat, "text": " there", "done": true}, "ts": "2026-05-01T10:00:00.003Z"})))
        .await
        .unwrap();
    events
        .until("typing", |e| {
            *e == HubEvent::Typing {
                tool: Some("Read".into()),
            }
        })
        .await;
    events
        .until(
            "the draft",
            |e| matches!(e, HubEvent::Draft { text, .. } if text == "Hi"),
        )
        .await;
    let r = events
        .until("the reply", |e| matches!(e, HubEvent::Reply { .. }))
        .await;
    assert_eq!(
        r,
        HubEvent::Reply {
            chat_id: Some(chat.clone()),
            text: "Hi there".into(),
            r#final: true
        }
    );

    // A gate raised by Claude Code, allowed by the operator: the channel gets the response.
    ch.send(send(
        json!({"type": "permission_request", "requestId": "gate-1", "tool": "Bash",
        "inputPreview": "cargo test", "ts": "2026-05-01T10:00:01Z"}),
    ))
    .await
    .unwrap();
    events
        .until(
            "the gate",
            |e| matches!(e, HubEvent::Permission { request_id, .. } if request_id == "gate-1"),
        )
        .await;
    handle.approve("gate-1", true).unwrap();
    let pr = next_json(&mut ch).await;
    assert_eq!(
        pr,
        json!({"type": "permission_response", "requestId": "gate-1", "decision": "allow"})
    );

    // ping → pong.
    assert!(hub.ping_channel());
    let ping = next_json(&mut ch).await;
    assert_eq!(ping["type"], "ping");
    ch.send(send(json!({"type": "pong", "ts": ping["ts"]})))
        .await
        .unwrap();
    assert!(
        hub.wait_until(WAIT, |h| h
            .channel_frames()
            .iter()
            .any(|f| f["type"] == "pong"))
            .await
    );

    // The Stop-time reply over REST (`POST /api/channel/event`).
    let body = json!({"sessionId": hub.session_id(), "kind": "chat", "type": "reply",
        "payload": {"chatId": chat, "text": "Done."}, "ts": "2026-05-01T10:00:02Z"})
    .to_string();
    let addr = hub.url().trim_start_matches("http://").to_string();
    let status = post_json(&addr, "/api/channel/event", hub.channel_token(), &body).await;
    assert_eq!(status, 200);
    events
        .until(
            "the REST reply",
            |e| matches!(e, HubEvent::Reply { text, .. } if text == "Done."),
        )
        .await;

    // Claude Code goes away: offline with the sentence.
    ch.close(None).await.unwrap();
    let s = events.status("offline").await;
    assert_eq!(
        s.to_string(),
        "offline: Claude Code session is not connected"
    );
    shutdown.trigger();
}

/// A bare HTTP/1.1 POST (the channel's REST ingest), returning the status code.
async fn post_json(addr: &str, path: &str, token: &str, body: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let req = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(WAIT, s.read_to_end(&mut out))
        .await
        .unwrap()
        .unwrap();
    let head = String::from_utf8_lossy(&out);
    head.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::test]
async fn after_a_hub_restart_it_resubscribes_and_shows_nothing_twice() {
    let mut rig = attached().await;
    let chat = prompt(&mut rig, 1, "before the restart").await;
    rig.hub.reply(Some(&chat), "first answer");
    rig.hub.tail("PreToolUse", Some("Grep"));
    rig.hub.request_permission("req-r", "Bash", "make");
    rig.hub.foreign_prompt("bob", "from bob");
    let before = rig.events.until_marker(&rig.hub).await;
    assert_eq!(replies(&before).len(), 1, "{before:#?}");

    rig.hub.restart().await;
    rig.events.status("offline").await;
    rig.events.status("online").await;
    assert_eq!(rig.hub.cli_upgrades(), 2);
    assert_eq!(frames_of(&rig.hub, "subscribe").len(), 2);

    // The fake replayed every event and the pending request on the new subscribe.
    let after = rig.events.until_marker(&rig.hub).await;
    let surfaced: Vec<&HubEvent> = after
        .iter()
        .filter(|e| {
            !matches!(
                e,
                HubEvent::Status(_) | HubEvent::Role(_) | HubEvent::Presence { .. }
            )
        })
        .collect();
    assert!(surfaced.is_empty(), "replayed events surfaced: {after:#?}");

    // New traffic still flows after the reconnect.
    let chat2 = prompt(&mut rig, 2, "after the restart").await;
    rig.hub.reply(Some(&chat2), "second answer");
    let got = rig.events.until_marker(&rig.hub).await;
    assert_eq!(
        replies(&got),
        vec![(Some(chat2), "second answer".into(), true)]
    );
}

#[tokio::test]
async fn a_wrong_token_is_final_until_the_settings_change() {
    let hub = FakeHub::start(FakeHubConfig::default()).await;
    let (handle, mut events, shutdown) = start_client(settings(&hub, "cw_sess_wrong"));
    let s = events.status("auth_failed").await;
    assert!(s.to_string().contains("401"), "{s}");
    // With a 20 ms backoff, a retrying client would have tried many times by now.
    tokio::time::sleep(ms(400)).await;
    assert_eq!(hub.cli_attempts(), 1);
    assert_eq!(hub.cli_upgrades(), 0);
    // A prompt typed meanwhile waits; new settings end the state.
    handle.prompt(5, "queued while refused").unwrap();
    handle
        .update_settings(settings(&hub, "cw_sess_ana"))
        .unwrap();
    events.status("online").await;
    events
        .until("the ack", |e| {
            matches!(e, HubEvent::Acked { local_id: 5, .. })
        })
        .await;
    assert_eq!(frames_of(&hub, "prompt").len(), 1);
    shutdown.trigger();
}

#[tokio::test]
async fn a_revoked_token_is_final_too() {
    let mut rig = attached().await;
    rig.hub.revoke("cw_sess_ana");
    let s = rig.events.status("auth_failed").await;
    assert!(s.to_string().contains("token_revoked"), "{s}");
    let attempts = rig.hub.cli_attempts();
    tokio::time::sleep(ms(400)).await;
    assert_eq!(rig.hub.cli_attempts(), attempts);
    rig.events.drain();
    let at = rig
        .events
        .log
        .iter()
        .position(|e| matches!(e, HubEvent::Status(HubStatus::AuthFailed { .. })))
        .unwrap();
    assert!(
        rig.events.log[at + 1..]
            .iter()
            .all(|e| !matches!(e, HubEvent::Status(_))),
        "{:#?}",
        rig.events.log
    );
}

#[tokio::test]
async fn a_prompt_typed_during_an_outage_is_delivered_once_after_subscribed() {
    let mut rig = attached().await;
    rig.hub.go_down();
    rig.events.status("offline").await;
    rig.handle
        .prompt(42, "typed while the hub was down")
        .unwrap();
    rig.handle.op_message("brb").unwrap();
    // Let the client fail to reconnect twice with the writes queued.
    rig.events
        .until("a second failed reconnect", |e| {
            matches!(e, HubEvent::Status(HubStatus::Offline { reason }) if reason.contains("reconnecting in 50 ms"))
        })
        .await;
    rig.hub.come_up().await;
    rig.events
        .until("the ack", |e| {
            matches!(
                e,
                HubEvent::Acked {
                    local_id: 42,
                    chat_id: Some(_)
                }
            )
        })
        .await;
    rig.hub
        .wait_cli_frame("op_message", WAIT, |_| true)
        .await
        .expect("the op message reached the hub");
    let _ = rig.events.until_marker(&rig.hub).await;
    let frames = rig.hub.cli_frames();
    let kinds: Vec<&str> = frames.iter().map(|f| f["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["subscribe", "subscribe", "prompt", "op_message"]);
    assert_eq!(frames[2]["text"], "typed while the hub was down");
    assert!(!rig
        .events
        .log
        .iter()
        .any(|e| matches!(e, HubEvent::Unconfirmed { .. })));
}

#[tokio::test]
async fn a_silent_socket_is_treated_as_dead_and_reopened() {
    let mut rig = attached_with(FakeHubConfig::default(), |t| t.liveness = ms(500)).await;
    // Healthy but quiet: pings keep it alive past two liveness periods.
    tokio::time::sleep(ms(1200)).await;
    assert_eq!(rig.hub.cli_upgrades(), 1);
    rig.hub.freeze_cli();
    let s = rig.events.status("offline").await;
    assert!(s.to_string().contains("no sign of life"), "{s}");
    rig.events.status("online").await;
    assert_eq!(rig.hub.cli_upgrades(), 2);
    let chat = prompt(&mut rig, 3, "still there?").await;
    rig.hub.reply(Some(&chat), "yes");
    rig.events
        .until(
            "the reply",
            |e| matches!(e, HubEvent::Reply { text, .. } if text == "yes"),
        )
        .await;
}

#[tokio::test]
async fn unknown_and_malformed_frames_are_ignored_and_errors_surface_with_their_code() {
    let mut rig = attached().await;
    rig.hub
        .send_raw(json!({"type": "route_reply", "routeId": "r", "fromName": "@x", "text": "t"}));
    rig.hub
        .send_raw(json!({"type": "totally_new", "sessionId": rig.hub.session_id()}));
    rig.hub.send_raw_text("{this is not json");
    rig.hub.send_raw_text("[]");
    rig.hub
        .send_raw(json!({"type": "channel_status", "connected": "sometimes"}));
    rig.hub.send_raw(
        json!({"type": "file_event", "sessionId": rig.hub.session_id(),
        "action": "referenced", "file": {"id": 1}}),
    );
    rig.hub
        .send_raw(json!({"type": "event", "sessionId": rig.hub.session_id(),
        "event": {"kind": "audit", "type": "x", "payload": {}, "ts": "t"}}));
    rig.hub.send_raw(
        json!({"type": "presence", "sessionId": rig.hub.session_id(),
        "attached": ["ana", "bob"], "joined": "bob", "newField": true}),
    );
    rig.handle.op_message("hello operators").unwrap();
    // An approval for nothing pending: the hub answers with an error frame.
    rig.handle.approve("no-such-request", true).unwrap();
    // The marker orders what the fake sends, not what it receives: wait for both writes.
    rig.hub
        .wait_cli_frame("approval", WAIT, |_| true)
        .await
        .expect("the approval reached the hub");
    let got = rig.events.until_marker(&rig.hub).await;
    assert_eq!(
        got,
        vec![
            HubEvent::Presence {
                attached: vec!["ana".into(), "bob".into()]
            },
            HubEvent::OpMessage {
                author: "ana".into(),
                text: "hello operators".into()
            },
            HubEvent::Error {
                code: "already_resolved".into(),
                message: "that permission request is not pending".into(),
                local_id: None
            },
        ]
    );
    // Still the same socket, still online.
    assert_eq!(rig.hub.cli_upgrades(), 1);
    let chat = prompt(&mut rig, 9, "ok?").await;
    assert!(chat.starts_with("chat-"));
}

#[tokio::test]
async fn an_ack_without_chat_id_still_correlates_in_order() {
    let mut rig = attached().await;
    rig.hub.set_prompt_ack(PromptAck::WithoutChatId);
    rig.handle.prompt(31, "first").unwrap();
    rig.handle.prompt(32, "second").unwrap();
    let acks: Vec<HubEvent> = {
        let mut v = Vec::new();
        for id in [31, 32] {
            v.push(
                rig.events
                    .until(
                        "an ack",
                        |e| matches!(e, HubEvent::Acked { local_id, .. } if *local_id == id),
                    )
                    .await,
            );
        }
        v
    };
    assert_eq!(
        acks,
        vec![
            HubEvent::Acked {
                local_id: 31,
                chat_id: None
            },
            HubEvent::Acked {
                local_id: 32,
                chat_id: None
            },
        ]
    );
    // Back to acks with a chatId: the next prompt gets its own.
    rig.hub.set_prompt_ack(PromptAck::WithChatId);
    let chat = prompt(&mut rig, 33, "third").await;
    assert_eq!(chat, "chat-3");
}

#[tokio::test]
async fn a_prompt_the_hub_never_acknowledged_is_reported_and_not_sent_again() {
    let mut rig = attached().await;
    rig.hub.set_prompt_ack(PromptAck::Never);
    rig.handle.prompt(21, "lost in the crash?").unwrap();
    rig.hub
        .wait_cli_frame("prompt", WAIT, |_| true)
        .await
        .expect("the prompt reached the hub");
    rig.hub.restart().await;
    rig.events
        .until("unconfirmed", |e| {
            *e == HubEvent::Unconfirmed { local_id: 21 }
        })
        .await;
    rig.events.status("online").await;
    rig.hub.set_prompt_ack(PromptAck::WithChatId);
    let _ = prompt(&mut rig, 22, "after").await;
    let texts: Vec<Value> = frames_of(&rig.hub, "prompt")
        .into_iter()
        .map(|f| f["text"].clone())
        .collect();
    assert_eq!(texts, [json!("lost in the crash?"), json!("after")]);
}

#[tokio::test]
async fn a_replay_cutoff_from_the_previous_run_hides_history_already_shown() {
    let hub = FakeHub::start(FakeHubConfig::default()).await;
    // A first run sees one reply and keeps the newest hub timestamp.
    let (h1, mut e1, stop1) = start_client(settings(&hub, "cw_sess_ana"));
    e1.status("online").await;
    hub.reply(Some("chat-a"), "shown in the first run");
    e1.until("the reply", |e| matches!(e, HubEvent::Reply { .. }))
        .await;
    let cutoff = h1.newest_event_ts().expect("a hub timestamp was seen");
    stop1.trigger();
    hub.request_permission("req-old", "Bash", "still pending");

    // The next run starts with that cutoff: the replay of the old reply is not shown, the
    // pending request is, and new replies are.
    let mut s = settings(&hub, "cw_sess_ana");
    s.replay_cutoff = Some(cutoff);
    let (_h2, mut e2, stop2) = start_client(s);
    e2.status("online").await;
    let got = e2.until_marker(&hub).await;
    assert!(replies(&got).is_empty(), "{got:#?}");
    assert!(
        got.iter().any(
            |e| matches!(e, HubEvent::Permission { request_id, .. } if request_id == "req-old")
        ),
        "{got:#?}"
    );
    hub.reply(Some("chat-b"), "new");
    e2.until(
        "the new reply",
        |e| matches!(e, HubEvent::Reply { text, .. } if text == "new"),
    )
    .await;

    // Without a cutoff a fresh client shows the hub's replay (what the cutoff is for).
    let (_h3, mut e3, stop3) = start_client(settings(&hub, "cw_sess_ana"));
    e3.status("online").await;
    let got = e3.until_marker(&hub).await;
    assert!(
        replies(&got)
            .iter()
            .any(|(_, t, _)| t == "shown in the first run"),
        "{got:#?}"
    );
    stop2.trigger();
    stop3.trigger();
}

#[tokio::test]
async fn the_fake_accepts_the_browser_subprotocol_and_refuses_a_missing_token() {
    let hub = FakeHub::start(FakeHubConfig::default()).await;
    let url = hub.url().replace("http://", "ws://") + "/cli";
    let addr = hub.url().trim_start_matches("http://").to_string();

    let mut req = url.as_str().into_client_request().unwrap();
    req.headers_mut().insert(
        "sec-websocket-protocol",
        "bearer, cw_sess_bob".parse().unwrap(),
    );
    let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let (mut ws, resp) = tokio_tungstenite::client_async(req, tcp).await.unwrap();
    assert_eq!(resp.headers()["sec-websocket-protocol"], "bearer");
    ws.send(Message::text(
        json!({"type": "subscribe", "sessionId": hub.session_id()}).to_string(),
    ))
    .await
    .unwrap();
    let first = next_json(&mut ws).await;
    assert_eq!(first["type"], "subscribed");
    assert_eq!(first["role"], "owner");

    let req = url.as_str().into_client_request().unwrap();
    let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
    match tokio_tungstenite::client_async(req, tcp).await {
        Err(tokio_tungstenite::tungstenite::Error::Http(r)) => assert_eq!(r.status(), 401),
        other => panic!("expected 401, got {:?}", other.map(|(_, r)| r.status())),
    }
    assert_eq!(hub.cli_attempts(), 2);
    assert_eq!(hub.cli_upgrades(), 1);
}
