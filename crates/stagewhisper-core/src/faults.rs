//! **Test-only** fault injection, for the interop suite: make the callback listener answer
//! `503 storage_unavailable` to chosen callbacks, to prove that the assistant's retry never
//! duplicates a message.
//!
//! Guarded three ways so it cannot be switched on by accident:
//! 1. compiled in only with `debug_assertions` (a release build ignores it and says so);
//! 2. the process environment must hold [`ENV_VAR`]=[`ENV_VALUE`] exactly at start-up (the app
//!    then logs a warning);
//! 3. faults are armed one by one through `POST /api/test/faults` (UI token required); the route
//!    is `404` otherwise.

use crate::protocol::{Callback, Status};
use serde_json::{json, Value};
use std::sync::Mutex;

pub const ENV_VAR: &str = "STAGEWHISPER_TEST_FAULT_INJECTION";
pub const ENV_VALUE: &str = "i-am-a-test";

/// When the injected 503 happens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum When {
    /// The callback is stored, then answered 503 (the answer is "lost"): the retry must be
    /// recognised as a duplicate.
    AfterCommit,
    /// Answered 503 without storing: the retry stores it.
    BeforeCommit,
}

impl When {
    fn as_str(self) -> &'static str {
        match self {
            When::AfterCommit => "after_commit",
            When::BeforeCommit => "before_commit",
        }
    }
}

#[derive(Debug, Clone)]
struct Rule {
    when: When,
    status: Option<Status>,
    session_id: Option<String>,
    remaining: u32,
}

#[derive(Debug, Default)]
pub struct Faults {
    enabled: bool,
    rules: Mutex<Vec<Rule>>,
    fired: Mutex<Vec<Value>>,
}

impl Faults {
    /// Off.
    pub fn disabled() -> Faults {
        Faults::default()
    }

    /// On only in a debug build with the environment variable set to the exact value.
    pub fn from_env() -> Faults {
        let asked = std::env::var(ENV_VAR).is_ok_and(|v| v == ENV_VALUE);
        if !asked {
            return Faults::disabled();
        }
        if !cfg!(debug_assertions) {
            tracing::warn!("{ENV_VAR} is ignored: fault injection exists only in debug builds");
            return Faults::disabled();
        }
        tracing::warn!(
            "TEST-ONLY fault injection is enabled ({ENV_VAR}); never use this outside tests"
        );
        Faults {
            enabled: true,
            ..Faults::default()
        }
    }

    pub fn enabled(&self) -> bool {
        self.enabled
    }

    /// Arms `count` injected 503s for callbacks matching `status` / `session_id` (`None` = any).
    pub fn arm(&self, when: When, status: Option<Status>, session_id: Option<String>, count: u32) {
        if !self.enabled {
            return;
        }
        self.rules.lock().expect("faults lock").push(Rule {
            when,
            status,
            session_id,
            remaining: count,
        });
    }

    /// Should this callback get an injected 503 at this point?
    pub fn take(&self, when: When, cb: &Callback) -> bool {
        if !self.enabled {
            return false;
        }
        let mut rules = self.rules.lock().expect("faults lock");
        let Some(r) = rules.iter_mut().find(|r| {
            r.remaining > 0
                && r.when == when
                && r.status.is_none_or(|s| s == cb.status)
                && r.session_id.as_deref().is_none_or(|s| s == cb.session_id)
        }) else {
            return false;
        };
        r.remaining -= 1;
        rules.retain(|r| r.remaining > 0);
        tracing::warn!(when = when.as_str(), task_id = %cb.task_id, status = cb.status.as_str(), "TEST-ONLY: injected 503");
        self.fired.lock().expect("faults lock").push(json!({
            "when": when.as_str(),
            "task_id": cb.task_id,
            "session_id": cb.session_id,
            "status": cb.status.as_str(),
            "message_id": cb.message_id,
        }));
        true
    }

    /// Records what later callbacks of a task that got an injected 503 came to (the
    /// assistant's retries: `duplicate` proves the retry was recognised).
    pub fn observe(&self, cb: &Callback, outcome: &str) {
        if !self.enabled {
            return;
        }
        let mut fired = self.fired.lock().expect("faults lock");
        for f in fired.iter_mut() {
            if f["task_id"] == cb.task_id.as_str()
                && f["message_id"] == json!(cb.message_id)
                && f["status"] == cb.status.as_str()
            {
                if let Some(a) = f["followups"].as_array_mut() {
                    a.push(json!(outcome));
                } else {
                    f["followups"] = json!([outcome]);
                }
            }
        }
    }

    /// `GET /api/test/faults`.
    pub fn view(&self) -> Value {
        let armed: Vec<Value> = self
            .rules
            .lock()
            .expect("faults lock")
            .iter()
            .map(|r| {
                json!({"when": r.when.as_str(), "status": r.status.map(|s| s.as_str()),
                       "session_id": r.session_id, "remaining": r.remaining})
            })
            .collect();
        json!({"enabled": self.enabled, "armed": armed, "fired": *self.fired.lock().expect("faults lock")})
    }

    pub fn parse_when(s: &str) -> Option<When> {
        match s {
            "after_commit" => Some(When::AfterCommit),
            "before_commit" => Some(When::BeforeCommit),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cb(status: Status, session: &str) -> Callback {
        crate::protocol::parse_callback(
            "0b9f5c0e-3f43-4a57-9d5e-1f8e2f0a9c11",
            format!(
                r#"{{"session_id":"{session}","status":"{}","reply_text":"x"}}"#,
                status.as_str()
            )
            .as_bytes(),
        )
        .unwrap()
    }

    #[test]
    fn disabled_never_fires() {
        let f = Faults::disabled();
        f.arm(When::AfterCommit, None, None, 1);
        assert!(!f.take(When::AfterCommit, &cb(Status::Message, "s")));
    }

    #[test]
    fn fires_as_often_as_armed_for_matching_callbacks() {
        let f = Faults {
            enabled: true,
            ..Faults::default()
        };
        f.arm(
            When::AfterCommit,
            Some(Status::Message),
            Some("s".into()),
            1,
        );
        assert!(!f.take(When::AfterCommit, &cb(Status::Typing, "s")));
        assert!(!f.take(When::AfterCommit, &cb(Status::Message, "t")));
        assert!(!f.take(When::BeforeCommit, &cb(Status::Message, "s")));
        assert!(f.take(When::AfterCommit, &cb(Status::Message, "s")));
        assert!(!f.take(When::AfterCommit, &cb(Status::Message, "s")));
        assert_eq!(f.view()["fired"].as_array().unwrap().len(), 1);
    }
}
