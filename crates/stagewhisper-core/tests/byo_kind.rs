//! The `byo` kind through its real interfaces: the control API, the relay routes on the real
//! callback listener (HTTP on loopback), the real SQLite jobs table, a restart of the app on
//! the same data dir.
//!
//! The plugin side is played by this test with the crate's own crypto module (X25519, HKDF,
//! XChaCha20-Poly1305, the Hermes AAD dialect): it pairs, keeps the SSE job stream open, opens
//! the sealed jobs and seals its answers. The real plugins (Hermes BYO plugin, OpenClaw channel
//! in `sse` transport) run against the same API in the black-box suite under `tests/byo/`.

use hyper::Method;
use serde_json::{json, Value};
use stagewhisper_core::assistants::kinds::byo_relay::crypto::{
    Dialect, Envelope, EnvelopeKey, KeyPair, Meta,
};
use stagewhisper_core::clock::ManualClock;
use stagewhisper_core::events::Change;
use stagewhisper_core::{App, Config};
use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::sync::mpsc;

const WAIT: Duration = Duration::from_secs(15);
const H: &str = "/api/v1/assistant-relay";

async fn start(dir: &Path, clock: Arc<ManualClock>) -> App {
    let mut c = Config::new(dir.to_path_buf());
    c.clock = clock;
    App::start(c).await.expect("app starts")
}

async fn api(app: &App, method: Method, path: &str, body: Value) -> (u16, Value) {
    let b = if body.is_null() {
        Vec::new()
    } else {
        serde_json::to_vec(&body).unwrap()
    };
    let (s, v) = app.api.dispatch(&method, path, &b).await;
    (s.as_u16(), v)
}

async fn eventually<T, F, Fut>(what: &str, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + WAIT;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// One HTTP/1.1 request to the callback listener.
async fn relay(
    app: &App,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> (u16, Value) {
    let addr = app.callback_url.trim_start_matches("http://").to_string();
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let body = body.map(|b| b.to_string()).unwrap_or_default();
    let auth = token
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Content-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(WAIT, s.read_to_end(&mut out)).await;
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let json = text
        .split_once("\r\n\r\n")
        .and_then(|(_, b)| serde_json::from_str(b).ok())
        .unwrap_or(Value::Null);
    (status, json)
}

/// The test's plugin: its keys, the pairing answer, and an open stream.
struct Plugin {
    key: EnvelopeKey,
    integration_id: String,
    token: String,
}

/// An open job stream: every `data: ` line parsed, in order; `None` once it ended.
struct Stream {
    rx: mpsc::UnboundedReceiver<Option<Value>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Stream {
    async fn open(app: &App, p: &Plugin) -> (u16, Stream) {
        let addr = app.callback_url.trim_start_matches("http://").to_string();
        let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
        let req = format!(
            "GET {H}/integrations/{}/stream HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {}\r\n\
             Accept: text/event-stream\r\n\r\n",
            p.integration_id, p.token
        );
        s.write_all(req.as_bytes()).await.unwrap();
        let mut rd = BufReader::new(s);
        let mut status_line = String::new();
        rd.read_line(&mut status_line).await.unwrap();
        let status: u16 = status_line
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0);
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let mut line = String::new();
            loop {
                line.clear();
                match rd.read_line(&mut line).await {
                    Ok(0) | Err(_) => {
                        let _ = tx.send(None);
                        return;
                    }
                    Ok(_) => {}
                }
                // Chunked framing: the size lines are not `data: ` lines.
                if let Some(j) = line.trim_end().strip_prefix("data: ") {
                    let _ = tx.send(Some(
                        serde_json::from_str(j).expect("one compact JSON per line"),
                    ));
                } else if line.starts_with("0\r") {
                    let _ = tx.send(None);
                    return;
                }
            }
        });
        (status, Stream { rx, task })
    }

    async fn next(&mut self) -> Option<Value> {
        tokio::time::timeout(WAIT, self.rx.recv())
            .await
            .expect("a stream event in time")
            .flatten()
    }

    /// The next event that is not the capability probe (answered by `probe_answer`).
    async fn next_of(&mut self, purpose: &str) -> Value {
        loop {
            let ev = self.next().await.expect("stream open");
            let p = ev["purpose"]
                .as_str()
                .or(ev["action_type"].as_str())
                .or(ev["event_type"].as_str())
                .unwrap_or("");
            if p == purpose {
                return ev;
            }
        }
    }

    /// Nothing arrives for a moment.
    async fn quiet(&mut self, ms: u64) -> bool {
        tokio::time::timeout(Duration::from_millis(ms), self.rx.recv())
            .await
            .is_err()
    }
}

impl Plugin {
    fn open_job(&self, ev: &Value) -> Value {
        let env = Envelope::from_value(&ev["payload"]["envelope"]).unwrap();
        assert_eq!(env.sender_role, "desktop");
        let plain = self
            .key
            .open_from(&env, Dialect::Hermes, "desktop")
            .unwrap();
        serde_json::from_slice(&plain).unwrap()
    }

    fn seal(&self, session: &str, corr: &str, ctype: &str, plaintext: &[u8]) -> Envelope {
        self.seal_id(
            &uuid::Uuid::new_v4().to_string(),
            session,
            corr,
            ctype,
            plaintext,
        )
    }

    fn seal_id(
        &self,
        id: &str,
        session: &str,
        corr: &str,
        ctype: &str,
        plaintext: &[u8],
    ) -> Envelope {
        let mut nonce = [0u8; 24];
        rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut nonce);
        self.key
            .seal_with_nonce(
                "plugin",
                id,
                &nonce,
                &Meta {
                    session_id: session,
                    correlation_id: corr,
                    content_type: ctype,
                },
                plaintext,
            )
            .unwrap()
    }

    /// A sealed `completed` result for a reasoning job.
    fn result(&self, ev: &Value, output: &Value) -> (Value, Envelope) {
        let input = Envelope::from_value(&ev["payload"]["envelope"]).unwrap();
        let env = self.seal(
            &input.session_id,
            &input.correlation_id,
            "reasoning_output",
            output.to_string().as_bytes(),
        );
        (
            json!({"status": "completed", "provider_run_id": "run-1", "model_ref": "stub-model",
                "usage": null, "output": {"byo_encrypted": true, "envelope": env, "status": "completed"},
                "error_code": null, "error_message": null}),
            env,
        )
    }

    async fn post_result(&self, app: &App, ev: &Value, body: &Value) -> (u16, Value) {
        relay(
            app,
            "POST",
            &format!(
                "{H}/reasoning-jobs/{}/complete",
                ev["job_id"].as_str().unwrap()
            ),
            Some(&self.token),
            Some(body),
        )
        .await
    }
}

async fn pair(app: &App, code: &str) -> (u16, Value, KeyPair) {
    let keys = KeyPair::generate();
    let (s, v) = relay(
        app,
        "POST",
        &format!("{H}/pair/complete"),
        None,
        Some(&json!({"pairing_code": code, "host_label": "test-host", "plugin_public_key": keys.public_b64()})),
    )
    .await;
    (s, v, keys)
}

async fn paired_plugin(app: &App) -> Plugin {
    let (s, v) = api(app, Method::PUT, "/api/assistant", json!({"kind": "byo"})).await;
    assert_eq!(s, 200, "{v}");
    let (s, code) = api(app, Method::POST, "/api/assistant/pairing", Value::Null).await;
    assert_eq!(s, 201, "{code}");
    let (s, v, keys) = pair(app, code["code"].as_str().unwrap()).await;
    assert_eq!(s, 200, "{v}");
    let desktop = stagewhisper_core::assistants::kinds::byo_relay::crypto::public_key_from_b64(
        v["byo_public_key"].as_str().unwrap(),
    )
    .unwrap();
    Plugin {
        key: EnvelopeKey::derive(&keys, &desktop).unwrap(),
        integration_id: v["integration_id"].as_str().unwrap().to_string(),
        token: v["relay_token"].as_str().unwrap().to_string(),
    }
}

/// Answers the capability probe in clear, as the plugins do.
async fn answer_probe(app: &App, p: &Plugin, s: &mut Stream) {
    let ev = s.next_of("capability_probe").await;
    assert!(
        ev["payload"]["byo_encrypted"].is_null(),
        "the probe holds no call content"
    );
    let (st, v) = p
        .post_result(
            app,
            &ev,
            &json!({"job_id": ev["job_id"], "status": "completed", "output": {"raw_description": "stub-model, no tools"}}),
        )
        .await;
    assert_eq!(st, 200, "{v}");
}

async fn insights(app: &App, call: &str) -> Vec<Value> {
    let (_, v) = api(
        app,
        Method::GET,
        &format!("/api/sessions/{call}/insights"),
        Value::Null,
    )
    .await;
    v.as_array().cloned().unwrap_or_default()
}

async fn messages(app: &App, session: &str) -> Vec<Value> {
    let (_, v) = api(
        app,
        Method::GET,
        &format!("/api/sessions/{session}/messages"),
        Value::Null,
    )
    .await;
    v.as_array().cloned().unwrap_or_default()
}

async fn new_call(app: &App) -> String {
    let (s, v) = api(
        app,
        Method::POST,
        "/api/calls",
        json!({"title": "Acme renewal"}),
    )
    .await;
    assert_eq!(s, 201);
    v["session_id"].as_str().unwrap().to_string()
}

async fn turn(app: &App, call: &str, text: &str) {
    let (s, v) = api(
        app,
        Method::POST,
        &format!("/api/calls/{call}/transcript"),
        json!({"text": text, "speaker": "Customer"}),
    )
    .await;
    assert_eq!(s, 201, "{v}");
}

fn clock() -> Arc<ManualClock> {
    ManualClock::new(chrono::Utc::now())
}

fn tmp() -> tempfile::TempDir {
    tempfile::Builder::new()
        .prefix("sw-byo-test-")
        .tempdir()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pairing_codes_are_one_use_expire_and_are_throttled() {
    let dir = tmp();
    let clock = clock();
    let app = start(dir.path(), clock.clone()).await;
    let (s, v) = api(&app, Method::PUT, "/api/assistant", json!({"kind": "byo"})).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["status"], "waiting_for_pairing");
    assert_eq!(v["e2ee"], true);

    let (s, v) = api(&app, Method::POST, "/api/assistant/pairing", Value::Null).await;
    assert_eq!(s, 201, "{v}");
    let code = v["code"].as_str().unwrap().to_string();
    assert_eq!(code.len(), 11, "{code}");
    assert_eq!(v["api_url"], app.callback_url.as_str());
    assert_eq!(
        v["command"],
        format!(
            "stagewhisper-hermes pair --code {code} --api-url {}",
            app.callback_url
        )
    );
    assert_eq!(v["commands"]["hermes"], v["command"]);
    assert_eq!(
        v["commands"]["openclaw"],
        format!(
            "openclaw stagewhisper pair --code {code} --api-url {}",
            app.callback_url
        )
    );

    // Wrong code: 400 {"detail"} as the plugin prints it.
    let (s, v, _) = pair(&app, "WRONG-0000").await;
    assert_eq!(s, 400);
    assert_eq!(v["detail"], "invalid or expired pairing code");

    // Expired after 10 minutes.
    clock.advance_ms(10 * 60 * 1000 + 1);
    let (s, _, _) = pair(&app, &code).await;
    assert_eq!(s, 400);

    // A new code works once (typed in lower case, without the dash), under the OpenClaw
    // prefix: the answer carries the label and the dialect is OpenClaw's.
    let (_, v) = api(&app, Method::POST, "/api/assistant/pairing", Value::Null).await;
    let code = v["code"].as_str().unwrap().to_lowercase().replace('-', "");
    let keys = KeyPair::generate();
    let body =
        json!({"pairing_code": code, "host_label": "claw", "plugin_public_key": keys.public_b64()});
    let (s, v) = relay(
        &app,
        "POST",
        "/api/v1/openclaw/pair/complete",
        None,
        Some(&body),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    assert!(v["label"].as_str().unwrap().contains("claw"), "{v}");
    assert_eq!(
        base64_len(v["relay_token"].as_str().unwrap()),
        32,
        "32 random bytes of relay token"
    );
    let (s, _) = relay(
        &app,
        "POST",
        "/api/v1/openclaw/pair/complete",
        None,
        Some(&body),
    )
    .await;
    assert_eq!(s, 400, "a used code");
    let (_, view) = api(&app, Method::GET, "/api/assistant", Value::Null).await;
    assert_eq!(view["kind"], "byo");
    assert_eq!(view["status"], "offline", "{view}");
    assert_eq!(view["provider_kind"], "openclaw");
    assert_eq!(view["host_label"], "claw");
    let text = view.to_string();
    assert!(
        !text.contains(v["relay_token"].as_str().unwrap()),
        "the token is never returned"
    );

    // At rest: 0600, and the secret is not in the view.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let f = dir.path().join("byo").join("integration.json");
        assert_eq!(
            std::fs::metadata(&f).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    // Throttled after repeated failures: 429 with Retry-After; the right code still works.
    let mut last = 0;
    for _ in 0..11 {
        last = pair(&app, "BAD00-00000").await.0;
    }
    assert_eq!(last, 429);
    let (_, v) = api(&app, Method::POST, "/api/assistant/pairing", Value::Null).await;
    let (s, _, _) = pair(&app, v["code"].as_str().unwrap()).await;
    assert_eq!(
        s, 200,
        "the right code works while wrong ones are throttled"
    );
    app.shutdown().await;
}

fn base64_len(s: &str) -> usize {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(s)
        .map(|b| b.len())
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_call_goes_through_sealed_jobs_and_survives_a_restart() {
    let dir = tmp();
    let clock = clock();
    let app = start(dir.path(), clock.clone()).await;
    let p = paired_plugin(&app).await;

    // Token checks on every route but pairing.
    let stream_path = format!("{H}/integrations/{}/stream", p.integration_id);
    assert_eq!(relay(&app, "GET", &stream_path, None, None).await.0, 401);
    assert_eq!(
        relay(&app, "GET", &stream_path, Some("nope"), None).await.0,
        401
    );
    let hb = format!("{H}/integrations/{}/heartbeat", p.integration_id);
    assert_eq!(
        relay(&app, "POST", &hb, Some(&p.token[1..]), Some(&json!({})))
            .await
            .0,
        401
    );
    let other = format!("{H}/integrations/{}/heartbeat", uuid::Uuid::new_v4());
    assert_eq!(
        relay(&app, "POST", &other, Some(&p.token), Some(&json!({})))
            .await
            .0,
        404
    );

    // The stream opens; the probe comes first (in clear); status online; heartbeat → model.
    let (s, mut stream) = Stream::open(&app, &p).await;
    assert_eq!(s, 200);
    answer_probe(&app, &p, &mut stream).await;
    let (s, v) = relay(
        &app,
        "POST",
        &hb,
        Some(&p.token),
        Some(&json!({"status": "healthy", "display_model": "stub-model"})),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let view = eventually("online with its profile", || async {
        let (_, v) = api(&app, Method::GET, "/api/assistant", Value::Null).await;
        (v["status"] == "online" && v["capabilities"]["raw_description"].is_string()).then_some(v)
    })
    .await;
    assert_eq!(view["display_model"], "stub-model");
    assert_eq!(view["integration_id"], p.integration_id.as_str());
    assert!(view["last_heartbeat_at"].is_string());

    // A final transcript turn → a sealed live_analysis job with the window and the framing.
    let call = new_call(&app).await;
    turn(&app, &call, "Our budget is fixed at 40k this year.").await;
    let job = stream.next_of("live_analysis").await;
    assert_eq!(job["payload"]["byo_encrypted"], true);
    assert!(
        !job.to_string().contains("40k"),
        "no transcript text in clear"
    );
    let input = p.open_job(&job);
    assert!(input["transcript"]
        .as_str()
        .unwrap()
        .contains("Customer: Our budget is fixed at 40k"));
    assert!(input["system_instruction"]
        .as_str()
        .unwrap()
        .contains("Acme renewal"));
    assert_eq!(input["response_schema"]["required"][0], "insight");

    // Turns arriving while it is in flight wait (one job per call), batched into the next.
    turn(&app, &call, "And we need SOC2 before signing.").await;
    turn(&app, &call, "Can you do a pilot?").await;
    assert!(
        stream.quiet(400).await,
        "no second job while one is in flight"
    );
    // They are reported delivered once they are in the jobs table.
    eventually("the batched turns delivered", || async {
        let (_, v) = api(
            &app,
            Method::GET,
            &format!("/api/calls/{call}/transcript"),
            Value::Null,
        )
        .await;
        let list = v.as_array()?.clone();
        (list.len() == 3 && list.iter().all(|t| t["delivery"] == "sent")).then_some(())
    })
    .await;

    // The plugin reconnects (no cursor): the unanswered job is sent again.
    drop(stream);
    let (_, mut stream) = Stream::open(&app, &p).await;
    let again = stream.next_of("live_analysis").await;
    assert_eq!(again["job_id"], job["job_id"]);

    // Tampered, wrong-role and plaintext results are refused and nothing is stored.
    let (body, env) = p.result(
        &job,
        &json!({"insight": "Ask which SOC2 report they need."}),
    );
    let mut tampered = body.clone();
    let mut ct = env.ciphertext.clone().into_bytes();
    ct[3] = if ct[3] == b'A' { b'B' } else { b'A' };
    tampered["output"]["envelope"]["ciphertext"] = json!(String::from_utf8(ct).unwrap());
    assert_eq!(p.post_result(&app, &job, &tampered).await.0, 400);
    let mut aad = body.clone();
    aad["output"]["envelope"]["session_id"] = json!("another-session");
    assert_eq!(p.post_result(&app, &job, &aad).await.0, 400);
    let plain = json!({"status": "completed", "output": {"insight": "in clear"}});
    assert_eq!(p.post_result(&app, &job, &plain).await.0, 400);

    // The real result: stored once, answered 200; the same POST again is a 2xx duplicate.
    let (s, v) = p.post_result(&app, &job, &body).await;
    assert_eq!(s, 200, "{v}");
    let (s, v) = p.post_result(&app, &job, &body).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["duplicate"], true);
    let got = eventually("the insight", || async {
        let list = insights(&app, &call).await;
        (!list.is_empty()).then_some(list)
    })
    .await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0]["text"], "Ask which SOC2 report they need.");

    // The next job carries the two batched turns.
    let job2 = stream.next_of("live_analysis").await;
    assert_ne!(job2["job_id"], job["job_id"]);
    let input2 = p.open_job(&job2);
    assert_eq!(input2["new_turns"], 2);
    let t = input2["transcript"].as_str().unwrap();
    assert!(
        t.contains("SOC2 before signing") && t.contains("pilot"),
        "{t}"
    );

    // A replayed envelope (the first result's message_id again, sealed properly for this
    // job) is refused by the replay guard; an envelope of another job does not fit.
    let input_env = Envelope::from_value(&job2["payload"]["envelope"]).unwrap();
    let reused = p.seal_id(
        &env.message_id,
        &input_env.session_id,
        &input_env.correlation_id,
        "reasoning_output",
        br#"{"insight":"replayed"}"#,
    );
    let (mut replay, _) = p.result(&job2, &json!({}));
    replay["output"]["envelope"] = serde_json::to_value(&reused).unwrap();
    let (s, v) = p.post_result(&app, &job2, &replay).await;
    assert_eq!(s, 409, "{v}");
    assert_eq!(v["error"], "replayed_envelope");
    let (mut other, _) = p.result(&job2, &json!({}));
    other["output"]["envelope"] = serde_json::to_value(&env).unwrap();
    assert_eq!(p.post_result(&app, &job2, &other).await.0, 400);

    // "Nothing worth surfacing" shows nothing.
    let (body2, _) = p.result(&job2, &json!({"insight": null}));
    assert_eq!(p.post_result(&app, &job2, &body2).await.0, 200);

    // A user message → a sealed chat dispatch; typing while it runs; the sealed reply.
    let (_, m) = api(
        &app,
        Method::POST,
        &format!("/api/sessions/{call}/messages"),
        json!({"text": "What did they say about price?"}),
    )
    .await;
    let chat = stream.next_of("chat_message_dispatched").await;
    assert!(!chat.to_string().contains("price"), "no chat text in clear");
    let umid = chat["user_message_id"].as_str().unwrap().to_string();
    assert_eq!(m["message_id"].as_str(), Some(umid.as_str()), "{m}");
    let env = Envelope::from_json(chat["content"].as_str().unwrap()).unwrap();
    let text = p.key.open_from(&env, Dialect::Hermes, "desktop").unwrap();
    assert_eq!(text, b"What did they say about price?");
    eventually("typing", || async {
        let (_, v) = api(
            &app,
            Method::GET,
            &format!("/api/sessions/{call}/typing"),
            Value::Null,
        )
        .await;
        (!v.as_array()?.is_empty()).then_some(())
    })
    .await;

    // Restart mid-chat and mid-job: a turn is queued as a job, the app stops before answers.
    turn(&app, &call, "Let's talk next Tuesday.").await;
    let job3 = stream.next_of("live_analysis").await;
    drop(stream);
    app.shutdown().await;
    let app = start(dir.path(), clock.clone()).await;
    let (_, mut stream) = Stream::open(&app, &p).await;
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let ev = stream.next().await.expect("re-sent");
        if ev["purpose"] == "capability_probe" {
            continue;
        }
        seen.push(ev);
    }
    assert!(
        seen.iter().any(|e| e["user_message_id"] == umid.as_str()),
        "chat re-sent"
    );
    assert!(
        seen.iter().any(|e| e["job_id"] == job3["job_id"]),
        "job re-sent"
    );

    // The chat reply (sealed, correlation chat-reply:<id>), twice: one assistant message.
    let reply = p.seal(
        &env.session_id,
        &format!("chat-reply:{umid}"),
        "task_content",
        b"They want 10% off.",
    );
    let rb = json!({"content": reply.to_json(), "status": "completed"});
    let path = format!("{H}/chat/messages/{umid}/reply");
    assert_eq!(
        relay(&app, "POST", &path, Some(&p.token), Some(&rb))
            .await
            .0,
        200
    );
    assert_eq!(
        relay(&app, "POST", &path, Some(&p.token), Some(&rb))
            .await
            .0,
        200
    );
    let (b3, _) = p.result(&job3, &json!({"insight": "Confirm Tuesday's time."}));
    assert_eq!(p.post_result(&app, &job3, &b3).await.0, 200);
    let msgs = eventually("the chat reply", || async {
        let list = messages(&app, &call).await;
        list.iter()
            .any(|m| m["text"] == "They want 10% off.")
            .then_some(list)
    })
    .await;
    assert_eq!(
        msgs.iter()
            .filter(|m| m["text"] == "They want 10% off.")
            .count(),
        1
    );
    assert_eq!(
        msgs.iter()
            .find(|m| m["text"] == "They want 10% off.")
            .unwrap()["kind"],
        "assistant"
    );
    let got = eventually("the second insight", || async {
        let list = insights(&app, &call).await;
        (list.len() == 2).then_some(list)
    })
    .await;
    assert!(
        got.iter().any(|i| i["text"] == "Confirm Tuesday's time."),
        "{got:?}"
    );

    // An expired job: not re-sent, timed_out, an error on its turn; a late result is refused.
    turn(&app, &call, "One more thing.").await;
    let job4 = stream.next_of("live_analysis").await;
    clock.advance_ms(91_000);
    let (b4, _) = p.result(&job4, &json!({"insight": "late"}));
    let (s, v) = eventually("the job to time out", || async {
        let (s, v) = p.post_result(&app, &job4, &b4).await;
        (s == 409).then_some((s, v))
    })
    .await;
    assert_eq!(s, 409, "{v}");
    assert_eq!(v["error"], "job_expired");
    eventually("an error entry for the timed-out job", || async {
        let list = insights(&app, &call).await;
        list.iter()
            .any(|m| m["text"] == "The assistant did not answer in time.")
            .then_some(())
    })
    .await;
    drop(stream);
    let (_, mut stream) = Stream::open(&app, &p).await;
    assert!(stream.quiet(400).await, "an expired job is not re-sent");

    // End of call → session_summary with the whole transcript → an assistant message.
    let (s, _) = api(
        &app,
        Method::POST,
        &format!("/api/calls/{call}/end"),
        Value::Null,
    )
    .await;
    assert_eq!(s, 200);
    let sum = stream.next_of("session_summary").await;
    let input = p.open_job(&sum);
    assert!(input["transcript"].as_str().unwrap().contains("40k"));
    let (bs, _) = p.result(&sum, &json!({"summary": "- Budget 40k\n- SOC2 needed"}));
    assert_eq!(p.post_result(&app, &sum, &bs).await.0, 200);
    eventually("the summary message", || async {
        let list = messages(&app, &call).await;
        list.iter()
            .any(|m| m["text"] == "- Budget 40k\n- SOC2 needed" && m["kind"] == "assistant")
            .then_some(())
    })
    .await;

    // Connection test and probe on demand.
    let (s, v) = api(&app, Method::POST, "/api/assistant/byo/test", Value::Null).await;
    assert_eq!(s, 202, "{v}");
    let task = stream.next_of("connectivity_test").await;
    assert!(
        task["event_type"].is_null() && task["id"].is_string(),
        "a legacy task: {task}"
    );
    let tr = format!("{H}/integrations/{}/test-reply", p.integration_id);
    let body = json!({"test_id": task["id"], "content": "Hi, I can hear you."});
    let store = app.conversation.store().clone();
    let mut events = app
        .conversation
        .hub()
        .subscribe(store.clone(), store.last_event_id().await.unwrap());
    assert_eq!(
        relay(&app, "POST", &tr, Some(&p.token), Some(&body))
            .await
            .0,
        200
    );
    let (_, view) = api(&app, Method::GET, "/api/assistant", Value::Null).await;
    assert_eq!(view["last_test"]["state"], "ok", "{view}");
    // The reply is announced on the event stream (an `assistant_status` event), so an open view
    // reads the assistant again at once instead of at its next poll.
    let ev = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("an event after the test reply")
        .unwrap();
    let Change::AssistantStatus { assistant, .. } = &ev.change else {
        panic!("not an assistant status: {}", ev.json);
    };
    assert_eq!(assistant.kind, "byo", "{}", ev.json);
    let (s, v) = api(&app, Method::POST, "/api/assistant/byo/probe", Value::Null).await;
    assert_eq!(s, 202, "{v}");
    stream.next_of("capability_probe").await;

    // Unpair: the stream is closed and every later request of the plugin gets 401.
    let (s, v) = api(&app, Method::DELETE, "/api/assistant", Value::Null).await;
    assert_eq!(s, 200, "{v}");
    assert_eq!(v["status"], "waiting_for_pairing");
    loop {
        match stream.next().await {
            None => break,
            Some(ev) => assert_eq!(ev["purpose"], "capability_probe", "{ev}"),
        }
    }
    assert_eq!(
        relay(&app, "POST", &hb, Some(&p.token), Some(&json!({})))
            .await
            .0,
        401
    );
    let (s, _) = Stream::open(&app, &p).await;
    assert_eq!(s, 401);
    assert!(!dir.path().join("byo").join("integration.json").exists());
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_jobs_go_truncated_and_are_fetched_whole() {
    let dir = tmp();
    let app = start(dir.path(), clock()).await;
    let p = paired_plugin(&app).await;
    let (_, mut stream) = Stream::open(&app, &p).await;
    answer_probe(&app, &p, &mut stream).await;
    let call = new_call(&app).await;
    for i in 0..5 {
        turn(&app, &call, &format!("{i} {}", "word ".repeat(2_900))).await;
    }
    turn(&app, &call, "the last words").await;
    let (s, _) = api(
        &app,
        Method::POST,
        &format!("/api/calls/{call}/end"),
        Value::Null,
    )
    .await;
    assert_eq!(s, 200);
    let sum = stream.next_of("session_summary").await;
    assert_eq!(
        sum["payload"],
        json!({"_truncated": true}),
        "too large for one SSE line"
    );
    let path = format!("{H}/reasoning-jobs/{}", sum["job_id"].as_str().unwrap());
    assert_eq!(relay(&app, "GET", &path, None, None).await.0, 401);
    let (s, whole) = relay(&app, "GET", &path, Some(&p.token), None).await;
    assert_eq!(s, 200);
    assert_eq!(whole["job_id"], sum["job_id"]);
    assert_eq!(whole["idempotency_key"], sum["job_id"]);
    let input = p.open_job(&whole);
    assert!(input["transcript"]
        .as_str()
        .unwrap()
        .ends_with("Customer: the last words"));
    let (s, _) = relay(
        &app,
        "GET",
        &format!("{H}/reasoning-jobs/{}", uuid::Uuid::new_v4()),
        Some(&p.token),
        None,
    )
    .await;
    assert_eq!(s, 404);
    app.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_chat_replies_stream_in_and_failures_show_in_plain_words() {
    let dir = tmp();
    let app = start(dir.path(), clock()).await;
    let p = paired_plugin(&app).await;
    let (_, mut stream) = Stream::open(&app, &p).await;
    answer_probe(&app, &p, &mut stream).await;
    let (_, v) = api(&app, Method::POST, "/api/sessions", json!({})).await;
    let chat = v["session_id"].as_str().unwrap().to_string();

    // The plain flow: start → deltas → complete (one assistant message, the joined deltas).
    api(
        &app,
        Method::POST,
        &format!("/api/sessions/{chat}/messages"),
        json!({"text": "hello"}),
    )
    .await;
    let ev = stream.next_of("chat_message_dispatched").await;
    let umid = ev["user_message_id"].as_str().unwrap().to_string();
    let (s, start) = relay(
        &app,
        "POST",
        &format!("{H}/chat/messages/{umid}/reply/start"),
        Some(&p.token),
        None,
    )
    .await;
    assert_eq!(s, 200, "{start}");
    assert_eq!(start["status"], "streaming");
    let rid = start["id"].as_str().unwrap().to_string();
    for d in ["Hel", "lo there"] {
        let (s, _) = relay(
            &app,
            "POST",
            &format!("{H}/chat/messages/{rid}/reply/delta"),
            Some(&p.token),
            Some(&json!({"delta": d})),
        )
        .await;
        assert_eq!(s, 200);
    }
    let (s, _) = relay(
        &app,
        "POST",
        &format!("{H}/chat/messages/{rid}/reply/complete"),
        Some(&p.token),
        Some(&json!({"status": "completed"})),
    )
    .await;
    assert_eq!(s, 200);
    eventually("the plain reply", || async {
        messages(&app, &chat)
            .await
            .iter()
            .any(|m| m["text"] == "Hello there" && m["kind"] == "assistant")
            .then_some(())
    })
    .await;

    // A sealed chat the plugin could not open: an error entry in plain words on the message.
    api(
        &app,
        Method::POST,
        &format!("/api/sessions/{chat}/messages"),
        json!({"text": "again"}),
    )
    .await;
    let ev = stream.next_of("chat_message_dispatched").await;
    let umid = ev["user_message_id"].as_str().unwrap().to_string();
    let body = json!({"content": "(BYO decrypt failed)", "status": "errored", "error_code": "decryption_error"});
    assert_eq!(
        relay(
            &app,
            "POST",
            &format!("{H}/chat/messages/{umid}/reply"),
            Some(&p.token),
            Some(&body)
        )
        .await
        .0,
        200
    );
    eventually("the error entry", || async {
        messages(&app, &chat)
            .await
            .iter()
            .any(|m| {
                m["error_code"] == "decryption_error"
                    && m["text"]
                        .as_str()
                        .unwrap_or("")
                        .contains("could not open the encrypted request")
            })
            .then_some(())
    })
    .await;
    app.shutdown().await;
}
