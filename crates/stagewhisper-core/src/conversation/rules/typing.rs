//! Typing leases: one working indicator per (session, scope), kept alive by `typing` callbacks
//! and dropped by a reply, an end-of-turn marker or the inactivity timer. Pure logic on
//! millisecond timestamps from the injected clock, so it is tested without sleeping.

use std::collections::HashMap;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    pub label: Option<String>,
    /// Wall time (ms) the indicator first showed.
    pub since_ms: i64,
    /// Wall time (ms) the inactivity timer runs out.
    pub expires_ms: i64,
}

#[derive(Debug, Clone)]
pub struct TypingTracker {
    timeout_ms: i64,
    leases: HashMap<(String, String), Lease>,
}

/// What a `typing` callback changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Touch {
    /// The indicator appeared (or its label changed): tell the view.
    Shown,
    /// Only the timer was reset.
    KeptAlive,
}

impl TypingTracker {
    pub fn new(timeout_ms: i64) -> Self {
        TypingTracker {
            timeout_ms: timeout_ms.max(1),
            leases: HashMap::new(),
        }
    }

    pub fn timeout_ms(&self) -> i64 {
        self.timeout_ms
    }

    /// A `typing` (or `tool_call`) arrived for `scope` at `now_ms`.
    pub fn touch(&mut self, session: &str, scope: &str, label: Option<&str>, now_ms: i64) -> Touch {
        let expires_ms = now_ms + self.timeout_ms;
        match self
            .leases
            .get_mut(&(session.to_string(), scope.to_string()))
        {
            Some(lease) => {
                lease.expires_ms = lease.expires_ms.max(expires_ms);
                // A keepalive without a label keeps the label it had.
                if label.is_some() && lease.label.as_deref() != label {
                    lease.label = label.map(str::to_string);
                    Touch::Shown
                } else {
                    Touch::KeptAlive
                }
            }
            None => {
                self.leases.insert(
                    (session.to_string(), scope.to_string()),
                    Lease {
                        label: label.map(str::to_string),
                        since_ms: now_ms,
                        expires_ms,
                    },
                );
                Touch::Shown
            }
        }
    }

    /// A reply or an end-of-turn marker for `scope`: the indicator goes away.
    pub fn clear(&mut self, session: &str, scope: &str) -> Option<Lease> {
        self.leases
            .remove(&(session.to_string(), scope.to_string()))
    }

    /// Drops every indicator of a session (deleted session).
    pub fn clear_session(&mut self, session: &str) -> Vec<String> {
        let scopes: Vec<String> = self
            .leases
            .keys()
            .filter(|(s, _)| s == session)
            .map(|(_, sc)| sc.clone())
            .collect();
        for sc in &scopes {
            self.leases.remove(&(session.to_string(), sc.clone()));
        }
        scopes
    }

    /// Removes and returns the leases whose timer ran out at `now_ms`, oldest first.
    pub fn expire(&mut self, now_ms: i64) -> Vec<(String, String)> {
        let mut due: Vec<((String, String), i64)> = self
            .leases
            .iter()
            .filter(|(_, l)| l.expires_ms <= now_ms)
            .map(|(k, l)| (k.clone(), l.expires_ms))
            .collect();
        due.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.cmp(&b.0)));
        for (k, _) in &due {
            self.leases.remove(k);
        }
        due.into_iter().map(|(k, _)| k).collect()
    }

    /// When the next lease runs out, if any.
    pub fn next_deadline(&self) -> Option<i64> {
        self.leases.values().map(|l| l.expires_ms).min()
    }

    pub fn get(&self, session: &str, scope: &str) -> Option<&Lease> {
        self.leases.get(&(session.to_string(), scope.to_string()))
    }

    /// The active indicators of a session, oldest first.
    pub fn list(&self, session: &str) -> Vec<(String, Lease)> {
        let mut v: Vec<(String, Lease)> = self
            .leases
            .iter()
            .filter(|((s, _), _)| s == session)
            .map(|((_, sc), l)| (sc.clone(), l.clone()))
            .collect();
        v.sort_by(|a, b| a.1.since_ms.cmp(&b.1.since_ms).then_with(|| a.0.cmp(&b.0)));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::{Clock, ManualClock};

    fn clock() -> std::sync::Arc<ManualClock> {
        ManualClock::new(chrono::DateTime::from_timestamp(1_800_000_000, 0).unwrap())
    }

    #[test]
    fn shows_once_and_keepalives_extend_the_timer() {
        let c = clock();
        let mut t = TypingTracker::new(30_000);
        assert_eq!(t.touch("s", "u1", None, c.now_ms()), Touch::Shown);
        c.advance_ms(2_000);
        assert_eq!(t.touch("s", "u1", None, c.now_ms()), Touch::KeptAlive);
        c.advance_ms(29_999); // 31.999 s after the first, 29.999 s after the keepalive
        assert!(t.expire(c.now_ms()).is_empty());
        assert_eq!(t.next_deadline(), Some(c.now_ms() + 1));
        c.advance_ms(1);
        assert_eq!(
            t.expire(c.now_ms()),
            vec![("s".to_string(), "u1".to_string())]
        );
        assert!(t.get("s", "u1").is_none());
        assert_eq!(t.next_deadline(), None);
    }

    #[test]
    fn label_change_is_shown_and_labelless_keepalive_keeps_label() {
        let c = clock();
        let mut t = TypingTracker::new(30_000);
        t.touch("s", "u1", Some("thinking"), c.now_ms());
        assert_eq!(t.touch("s", "u1", None, c.now_ms()), Touch::KeptAlive);
        assert_eq!(t.get("s", "u1").unwrap().label.as_deref(), Some("thinking"));
        assert_eq!(
            t.touch("s", "u1", Some("Searching the CRM"), c.now_ms()),
            Touch::Shown
        );
    }

    #[test]
    fn reply_clears_only_its_scope() {
        let c = clock();
        let mut t = TypingTracker::new(30_000);
        t.touch("s", "u1", None, c.now_ms());
        t.touch("s", "u2", None, c.now_ms());
        t.touch("other", "u1", None, c.now_ms());
        assert!(t.clear("s", "u1").is_some());
        assert!(t.clear("s", "u1").is_none());
        assert_eq!(t.list("s").len(), 1);
        assert_eq!(t.clear_session("other"), vec!["u1".to_string()]);
        assert!(t.list("other").is_empty());
    }

    #[test]
    fn typing_after_completed_is_shown_and_still_expires() {
        // Hermes sends `completed`, then one more `typing` before a late reply that may
        // never come: the indicator must not get stuck.
        let c = clock();
        let mut t = TypingTracker::new(30_000);
        t.touch("s", "u1", None, c.now_ms());
        c.advance_ms(4_000);
        assert!(t.clear("s", "u1").is_some()); // completed
        c.advance_ms(3);
        assert_eq!(t.touch("s", "u1", None, c.now_ms()), Touch::Shown);
        c.advance_ms(30_000);
        assert_eq!(t.expire(c.now_ms()).len(), 1);
        assert!(t.list("s").is_empty());
    }

    #[test]
    fn expiry_order_is_deterministic() {
        let c = clock();
        let mut t = TypingTracker::new(1_000);
        t.touch("s", "b", None, c.now_ms());
        c.advance_ms(10);
        t.touch("s", "a", None, c.now_ms());
        c.advance_ms(5_000);
        assert_eq!(
            t.expire(c.now_ms()),
            vec![
                ("s".to_string(), "b".to_string()),
                ("s".to_string(), "a".to_string())
            ]
        );
    }
}
