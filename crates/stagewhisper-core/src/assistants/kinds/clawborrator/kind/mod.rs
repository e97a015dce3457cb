//! The assistant kind `clawborrator`: the user's Claude Code session, reached as an operator
//! through a clawborrator hub ([`super::client`]).
//!
//! - Settings (`PUT /api/assistant {"kind":"clawborrator", hub_url, session_token, session_id,
//!   insights_session_id?}`) are validated by [`HubSettings::validate`] (stable codes), saved
//!   with mode 0600 and never returned: the status shows only whether a token is saved.
//! - User messages become `prompt`s on the session; a prompt is only handed to the client while
//!   the link is `online` (else the outbox keeps it pending and retries, so a message typed
//!   during an outage is sent once, when the hub is back). Replies go in through
//!   [`AssistantContext::submit`], like callbacks: to the chat of the user message whose `ack`
//!   gave their `chatId`, else the live call's chat, else the most recently used chat. A
//!   streamed reply is an edit-style draft (text + `▉`) that its final reply settles.
//! - `tail` → typing (the tool as label); `Stop` → typing ends; `error` frames → errors with
//!   their code; `permission_request` → a permission card; `permission_resolved` settles it.
//! - Insights: with `insights_session_id`, a second client attached to that session gets the
//!   call's prelude and final transcript turns as prompts, and its replies land in the call's
//!   Insights tab. Without it the status says `insights: "not_configured"` (the Insights tab
//!   shows that) and transcript turns fail with `no_insights_session`.
//! - Replays: the client drops what it has shown this run; message ids derived from the reply
//!   (chat id + text) make anything seen again harmless to the conversation's dedupe; the
//!   newest hub timestamp is kept (`clawborrator.state.json`) as the next start's replay cutoff.

use super::client::{HubClient, HubHandle, HubSettings, HubStatus, HubTiming, Token};
use crate::assistants::prelude::DEFAULT_PRELUDE;
use crate::assistants::{
    AssistantContext, AssistantKind, Attempt, BoxFuture, KindError, KindRoutes, Outgoing,
};
use crate::http::Shutdown;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex};

mod events;
mod routes;
use events::run_events;

/// The kind id.
pub const KIND: &str = "clawborrator";
/// The sentence the Insights tab shows without an insights session.
pub const NO_INSIGHTS: &str = "this assistant kind has no insights session configured";

/// What is saved (the settings store's `assistants` section; the replay cutoff kept between
/// runs is the kind's state, `assistants/clawborrator.state.json`).
#[derive(Debug, Clone, PartialEq)]
struct Saved {
    hub_url: String,
    token: Token,
    session_id: String,
    insights_session_id: Option<String>,
}

impl Saved {
    fn to_json(&self) -> Value {
        json!({"hub_url": self.hub_url, "session_token": self.token.expose(),
            "session_id": self.session_id, "insights_session_id": self.insights_session_id})
    }

    fn from_json(v: &Value) -> Option<Saved> {
        Some(Saved {
            hub_url: v["hub_url"].as_str()?.to_string(),
            token: Token::new(v["session_token"].as_str()?),
            session_id: v["session_id"].as_str()?.to_string(),
            insights_session_id: v["insights_session_id"].as_str().map(str::to_string),
        })
    }

    fn settings(&self, session_id: &str, timing: &HubTiming) -> HubSettings {
        let mut s = HubSettings::new(&self.hub_url, self.token.clone(), session_id);
        s.timing = timing.clone();
        s
    }
}

/// Where a prompt came from: its chat, its user message, its task id.
#[derive(Debug, Clone)]
struct Origin {
    session_id: String,
    user_message_id: Option<String>,
    task_id: String,
}

/// Which of the two links an event came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lane {
    Chat,
    Insights,
}

/// Routing state shared by the kind and its event tasks.
#[derive(Default)]
struct Routes {
    /// Prompt local id → its origin (until acked).
    by_local: HashMap<i64, Origin>,
    /// Hub chat id → the origin of the prompt it answers.
    by_chat: HashMap<String, Origin>,
    /// Task ids made up for replies that name no prompt of ours, by chat id.
    made_up: HashMap<String, String>,
    /// The chat of the last user message sent.
    last_chat: Option<String>,
    /// The prompt Claude works on now (typing scope).
    current: Option<Origin>,
    /// Insights: prompt local id → call id; chat id → call id; the last call fed.
    insights_local: HashMap<i64, String>,
    insights_chat: HashMap<String, String>,
    last_call: Option<String>,
    /// Permission requests of the insights session (their approval goes back that way).
    insights_requests: std::collections::HashSet<String>,
}

struct Link {
    handle: HubHandle,
    stop: Shutdown,
}

struct LinkState {
    status: HubStatus,
    role: Option<String>,
}

struct Shared {
    ctx: Arc<AssistantContext>,
    routes: Mutex<Routes>,
    chat: Mutex<LinkState>,
    insights: Mutex<LinkState>,
    login: Mutex<Option<String>>,
    next_local: AtomicI64,
}

/// The `clawborrator` kind.
pub struct ClawborratorKind {
    shared: Arc<Shared>,
    timing: HubTiming,
    saved: Mutex<Option<Saved>>,
    links: Mutex<(Option<Link>, Option<Link>)>,
    active: AtomicBool,
}

fn kerr(e: super::HubError) -> KindError {
    KindError::bad(e.code(), e.to_string())
}

impl ClawborratorKind {
    /// The kind with its saved settings (if any); nothing runs until it is active.
    pub fn start(ctx: Arc<AssistantContext>, timing: HubTiming) -> ClawborratorKind {
        let saved = ctx.load_settings(KIND).as_ref().and_then(Saved::from_json);
        let offline = || LinkState {
            status: HubStatus::Connecting,
            role: None,
        };
        ClawborratorKind {
            shared: Arc::new(Shared {
                ctx,
                routes: Mutex::default(),
                chat: Mutex::new(offline()),
                insights: Mutex::new(offline()),
                login: Mutex::default(),
                next_local: AtomicI64::new(1),
            }),
            timing,
            saved: Mutex::new(saved),
            links: Mutex::new((None, None)),
            active: AtomicBool::new(false),
        }
    }

    fn saved(&self) -> Option<Saved> {
        self.saved.lock().expect("saved lock").clone()
    }

    /// Stops the running clients and, when active and configured, starts new ones.
    fn restart_links(&self) {
        let mut links = self.links.lock().expect("links lock");
        for l in [links.0.take(), links.1.take()].into_iter().flatten() {
            l.stop.trigger();
        }
        let Some(saved) = self.saved().filter(|_| self.active.load(Ordering::SeqCst)) else {
            return;
        };
        let cutoff = self
            .shared
            .ctx
            .load_state(KIND)
            .and_then(|v| v["replay_cutoff"].as_str().map(str::to_string))
            .and_then(|t| crate::protocol::parse_rfc3339(&t));
        let open = |session: &str, lane: Lane| -> Option<Link> {
            let mut s = saved.settings(session, &self.timing);
            s.replay_cutoff = cutoff;
            let stop = Shutdown::new();
            // The client also stops with the app.
            let (app, mine) = (self.shared.ctx.shutdown.clone(), stop.clone());
            tokio::spawn(async move {
                tokio::select! {
                    _ = app.wait() => mine.trigger(),
                    _ = mine.wait() => {}
                }
            });
            {
                let st = self.lane_state(lane);
                let mut st = st.lock().expect("lane lock");
                st.status = HubStatus::Connecting;
                st.role = None;
            }
            match HubClient::start(s, stop.clone()) {
                Ok((handle, events)) => {
                    tokio::spawn(run_events(
                        self.shared.clone(),
                        lane,
                        handle.clone(),
                        events,
                        stop.clone(),
                    ));
                    Some(Link { handle, stop })
                }
                Err(e) => {
                    tracing::warn!(code = e.code(), "hub client not started");
                    None
                }
            }
        };
        links.0 = open(&saved.session_id, Lane::Chat);
        links.1 = saved
            .insights_session_id
            .as_deref()
            .and_then(|s| open(s, Lane::Insights));
        // Who we are, for the cards we settle (a failure is tolerated, as the CLI does).
        let shared = self.shared.clone();
        let settings = saved.settings(&saved.session_id, &self.timing);
        tokio::spawn(async move {
            if let Ok(me) = super::client::me(&settings).await {
                *shared.login.lock().expect("login lock") = Some(me.login);
            }
        });
    }

    fn lane_state(&self, lane: Lane) -> &Mutex<LinkState> {
        match lane {
            Lane::Chat => &self.shared.chat,
            Lane::Insights => &self.shared.insights,
        }
    }

    fn handle(&self, lane: Lane) -> Option<HubHandle> {
        let links = self.links.lock().expect("links lock");
        match lane {
            Lane::Chat => links.0.as_ref(),
            Lane::Insights => links.1.as_ref(),
        }
        .map(|l| l.handle.clone())
    }

    fn lane_status(&self, lane: Lane) -> HubStatus {
        self.lane_state(lane)
            .lock()
            .expect("lane lock")
            .status
            .clone()
    }

    /// `Some(attempt)` when the lane cannot take a write now.
    fn not_ready(&self, lane: Lane) -> Option<Attempt> {
        match self.lane_status(lane) {
            HubStatus::Online => None,
            HubStatus::AuthFailed { message } => Some(Attempt::RetryAfter {
                code: "auth_failed",
                message: format!("the hub refused the session token: {message}"),
                after: None,
            }),
            other => Some(Attempt::RetryAfter {
                code: "assistant_offline",
                message: format!("the Claude Code session is not reachable ({other})"),
                after: None,
            }),
        }
    }

    fn prompt(&self, lane: Lane, text: String, remember: impl FnOnce(i64)) -> Attempt {
        if let Some(a) = self.not_ready(lane) {
            return a;
        }
        let Some(handle) = self.handle(lane) else {
            return Attempt::RetryAfter {
                code: "assistant_offline",
                message: "the hub link is not running".into(),
                after: None,
            };
        };
        let local = self.shared.next_local.fetch_add(1, Ordering::SeqCst);
        remember(local);
        match handle.prompt(local, text) {
            Ok(()) => Attempt::Delivered("accepted"),
            Err(e) => Attempt::RetryAfter {
                code: e.code(),
                message: e.to_string(),
                after: None,
            },
        }
    }

    fn parse_settings(&self, v: &Value) -> Result<Saved, KindError> {
        let Value::Object(m) = v else {
            return Err(KindError::bad(
                "invalid_json",
                "the settings must be a JSON object",
            ));
        };
        let old = self.saved();
        let field = |k: &str| -> Result<Option<String>, KindError> {
            match m.get(k) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.trim().to_string())),
                Some(_) => Err(KindError::bad(
                    "invalid_field",
                    format!("`{k}` must be a string"),
                )),
            }
        };
        // Blank is absent; every missing field is named in one answer.
        let given = |k: &str| -> Result<Option<String>, KindError> {
            Ok(field(k)?.filter(|s| !s.is_empty()))
        };
        let hub_url = given("hub_url")?.or_else(|| old.as_ref().map(|o| o.hub_url.clone()));
        // An omitted token keeps the saved one (the UI never gets it back to resend).
        let token = given("session_token")?
            .map(Token::new)
            .or_else(|| old.as_ref().map(|o| o.token.clone()));
        let session_id =
            given("session_id")?.or_else(|| old.as_ref().map(|o| o.session_id.clone()));
        let (Some(hub_url), Some(token), Some(session_id)) =
            (hub_url.clone(), token.clone(), session_id.clone())
        else {
            return Err(missing(&[
                ("hub_url", hub_url.is_none()),
                ("session_token", token.is_none()),
                ("session_id", session_id.is_none()),
            ]));
        };
        let insights_session_id = if m.contains_key("insights_session_id") {
            field("insights_session_id")?.filter(|s| !s.is_empty())
        } else {
            old.as_ref().and_then(|o| o.insights_session_id.clone())
        };
        let saved = Saved {
            hub_url,
            token,
            session_id,
            insights_session_id,
        };
        saved
            .settings(&saved.session_id, &self.timing)
            .validate()
            .map_err(kerr)?;
        if let Some(i) = &saved.insights_session_id {
            saved.settings(i, &self.timing).validate().map_err(|_| {
                KindError::bad(
                    "invalid_insights_session",
                    "the insights session id is empty or has spaces",
                )
            })?;
            if *i == saved.session_id {
                return Err(KindError::bad(
                    "invalid_insights_session",
                    "the insights session must be a second session, not the chat's",
                ));
            }
        }
        Ok(saved)
    }
}

/// `400 missing_field` naming every field that is missing ("`a` and `b` are required").
fn missing(fields: &[(&str, bool)]) -> KindError {
    let names: Vec<String> = fields
        .iter()
        .filter(|(_, gone)| *gone)
        .map(|(k, _)| format!("`{k}`"))
        .collect();
    let message = match names.as_slice() {
        [one] => format!("{one} is required"),
        [init @ .., last] => format!("{} and {last} are required", init.join(", ")),
        [] => "a required field is missing".to_string(),
    };
    KindError::bad("missing_field", message)
}

/// The hub's sessions for the settings picker (`hub_url` / `session_token` from `body`,
/// else the saved ones).
pub async fn list_sessions(ctx: &AssistantContext, body: &Value) -> Result<Value, KindError> {
    let old = ctx.load_settings(KIND).as_ref().and_then(Saved::from_json);
    let url = body["hub_url"]
        .as_str()
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .map(str::to_string)
        .or_else(|| old.as_ref().map(|o| o.hub_url.clone()));
    let token = body["session_token"]
        .as_str()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(Token::new)
        .or_else(|| old.map(|o| o.token));
    let (Some(url), Some(token)) = (url.clone(), token.clone()) else {
        return Err(missing(&[
            ("hub_url", url.is_none()),
            ("session_token", token.is_none()),
        ]));
    };
    let s = HubSettings::new(url, token, "-");
    s.validate().map_err(kerr)?;
    let list = super::client::list_sessions(&s)
        .await
        .map_err(|e| KindError {
            status: 502,
            code: e.code(),
            message: e.to_string(),
        })?;
    Ok(json!({"sessions": list.iter().map(|s| json!({"id": s.id,
        "routing_name": s.routing_name, "cwd": s.cwd, "host": s.host, "online": s.online}))
        .collect::<Vec<_>>()}))
}

impl AssistantKind for ClawborratorKind {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn configure<'a>(&'a self, settings: &'a Value) -> BoxFuture<'a, Result<(), KindError>> {
        Box::pin(async move {
            let saved = self.parse_settings(settings)?;
            self.shared.ctx.save_settings(KIND, &saved.to_json())?;
            let changed_target = self
                .saved()
                .is_none_or(|o| o.hub_url != saved.hub_url || o.session_id != saved.session_id);
            if changed_target {
                // A new hub or session: the old replay cutoff means nothing there.
                self.shared.ctx.remove_state(KIND);
            }
            *self.saved.lock().expect("saved lock") = Some(saved);
            self.restart_links();
            Ok(())
        })
    }

    fn status(&self) -> Value {
        let Some(saved) = self.saved() else {
            return json!({"status": "not_configured", "configured": false,
                "detail": "enter the hub URL, your session token and the Claude Code session",
                "insights": "not_configured", "insights_detail": NO_INSIGHTS});
        };
        let chat = self.shared.chat.lock().expect("lane lock");
        let (status, detail) = if !self.active.load(Ordering::SeqCst) {
            (
                "inactive".to_string(),
                "not the active assistant".to_string(),
            )
        } else {
            (chat.status.code().to_string(), chat.status.to_string())
        };
        let insights = match &saved.insights_session_id {
            None => json!({"insights": "not_configured", "insights_detail": NO_INSIGHTS}),
            Some(_) => {
                let st = self.shared.insights.lock().expect("lane lock");
                json!({"insights": st.status.code(), "insights_detail": st.status.to_string()})
            }
        };
        let mut v = json!({"status": status, "detail": detail, "configured": true,
            "hub_url": saved.hub_url,
            "session_id": saved.session_id, "insights_session_id": saved.insights_session_id,
            "token_saved": true, "role": chat.role});
        if let (Some(o), Value::Object(i)) = (v.as_object_mut(), insights) {
            o.extend(i);
        }
        v
    }

    fn is_configured(&self) -> bool {
        self.saved().is_some()
    }

    fn remove(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            self.shared.ctx.remove_settings(KIND);
            self.shared.ctx.remove_state(KIND);
            *self.saved.lock().expect("saved lock") = None;
            self.restart_links();
        })
    }

    fn check(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let links = self.links.lock().expect("links lock");
            for l in [links.0.as_ref(), links.1.as_ref()].into_iter().flatten() {
                let _ = l.handle.reconnect();
            }
        })
    }

    fn deliver<'a>(&'a self, entry: &'a Outgoing) -> BoxFuture<'a, Attempt> {
        Box::pin(async move {
            let shared = &self.shared;
            match entry {
                Outgoing::UserMessage {
                    task_id,
                    session_id,
                    text,
                    user_message_id,
                    ..
                } => {
                    let origin = Origin {
                        session_id: session_id.clone(),
                        user_message_id: user_message_id.clone(),
                        task_id: task_id.clone(),
                    };
                    self.prompt(Lane::Chat, text.clone(), |local| {
                        let mut r = shared.routes.lock().expect("routes lock");
                        r.last_chat = Some(session_id.clone());
                        r.current = Some(origin.clone());
                        r.by_local.insert(local, origin);
                    })
                }
                Outgoing::Prelude { call_id, title, .. } => {
                    if self.saved().and_then(|s| s.insights_session_id).is_none() {
                        return Attempt::Delivered("no_insights_session");
                    }
                    let text = shared.ctx.conversation.call_prelude_for(
                        call_id,
                        DEFAULT_PRELUDE,
                        title.as_deref(),
                    );
                    self.prompt(Lane::Insights, text, |local| {
                        let mut r = shared.routes.lock().expect("routes lock");
                        r.last_call = Some(call_id.clone());
                        r.insights_local.insert(local, call_id.clone());
                    })
                }
                Outgoing::TranscriptTurn {
                    call_id,
                    speaker,
                    text,
                    ..
                } => {
                    if self.saved().and_then(|s| s.insights_session_id).is_none() {
                        return Attempt::Failed {
                            code: "no_insights_session",
                            message: NO_INSIGHTS.to_string(),
                        };
                    }
                    let line = crate::assistants::delivery_queue::transcript_text(
                        speaker.as_deref(),
                        text,
                    );
                    self.prompt(Lane::Insights, line, |local| {
                        let mut r = shared.routes.lock().expect("routes lock");
                        r.last_call = Some(call_id.clone());
                        r.insights_local.insert(local, call_id.clone());
                    })
                }
                // The hub has no notion of a call ending; nothing to tell it.
                Outgoing::CallEnded { .. } => Attempt::Delivered("not_needed"),
            }
        })
    }

    fn set_active(&self, active: bool) {
        self.active.store(active, Ordering::SeqCst);
        self.restart_links();
    }

    fn control_routes(&self) -> Option<KindRoutes> {
        Some(routes::routes(self.shared.ctx.clone()))
    }

    fn decide_permission(
        &self,
        request_id: &str,
        allow: bool,
    ) -> BoxFuture<'_, Result<(), KindError>> {
        let request_id = request_id.to_string();
        Box::pin(async move {
            let lane = if self
                .shared
                .routes
                .lock()
                .expect("routes lock")
                .insights_requests
                .contains(&request_id)
            {
                Lane::Insights
            } else {
                Lane::Chat
            };
            let handle = self.handle(lane).ok_or_else(|| KindError {
                status: 409,
                code: "not_configured",
                message: "the hub link is not running".into(),
            })?;
            handle.approve(&request_id, allow).map_err(|e| KindError {
                status: if e.code() == "already_resolved" {
                    409
                } else {
                    503
                },
                code: e.code(),
                message: e.to_string(),
            })?;
            // Settled here with who we are; the hub's `permission_resolved` finds it settled.
            let login = self.shared.login.lock().expect("login lock").clone();
            let state = if allow { "allow" } else { "deny" };
            let _ = self
                .shared
                .ctx
                .conversation
                .settle_permission(&request_id, state, Some(login.as_deref().unwrap_or("you")))
                .await;
            Ok(())
        })
    }
}
