//! System notifications: which committed events deserve one ([`notice_for`], a pure function of
//! the event and the settings), and whether the desktop asks for quiet ([`do_not_disturb`]).
//!
//! The shell raises a notice only while no window of the app has the focus (see `shell.rs`).
//!
//! Do-Not-Disturb on Linux: the freedesktop notification specification has no such state, but
//! servers that implement one (KDE Plasma's, and others following it) expose a boolean
//! `Inhibited` property on `org.freedesktop.Notifications`. It is read before each notice; a
//! server without the property (or no server at all) counts as "not inhibited".

use crate::prefs::DesktopPrefs;
use serde_json::Value;

/// Longest notification body, in characters (the rest is cut with an ellipsis).
const BODY_MAX: usize = 180;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeKind {
    Insight,
    Error,
    Permission,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notice {
    pub kind: NoticeKind,
    pub title: String,
    pub body: String,
}

fn clip(text: &str) -> String {
    let t = text.trim();
    if t.chars().count() <= BODY_MAX {
        return t.to_string();
    }
    let mut s: String = t.chars().take(BODY_MAX - 1).collect();
    s.push('…');
    s
}

/// An insight text that means "nothing to surface" (as the UI hides it).
fn is_none_text(t: &str) -> bool {
    let t = t.trim().trim_end_matches('.');
    t.eq_ignore_ascii_case("none")
}

/// The notice an event deserves under `prefs`, if any: a new visible insight (not a draft), an
/// assistant error, a permission request, and a message of the user's that could not be
/// delivered (under the errors switch). Other updates never notify (they repeat what was shown).
pub fn notice_for(event: &Value, prefs: &DesktopPrefs) -> Option<Notice> {
    match event["type"].as_str()? {
        "insight_added" => {
            let ins = &event["insight"];
            let text = ins["text"].as_str().unwrap_or_default();
            let hidden = ins["hidden"].as_bool().unwrap_or(false);
            let draft = ins["draft"].as_bool().unwrap_or(false);
            if !prefs.notify_insights
                || hidden
                || draft
                || text.trim().is_empty()
                || is_none_text(text)
            {
                return None;
            }
            Some(Notice {
                kind: NoticeKind::Insight,
                title: "New insight".into(),
                body: clip(text),
            })
        }
        "message_added" => {
            let m = &event["message"];
            let text = m["text"].as_str().unwrap_or_default();
            match m["kind"].as_str()? {
                "error" if prefs.notify_errors => Some(Notice {
                    kind: NoticeKind::Error,
                    title: "Assistant error".into(),
                    body: clip(if text.trim().is_empty() {
                        "The assistant reported an error."
                    } else {
                        text
                    }),
                }),
                "permission" if prefs.notify_permissions => Some(Notice {
                    kind: NoticeKind::Permission,
                    title: "The assistant asks for permission".into(),
                    body: clip(if text.trim().is_empty() {
                        "Open StageWhisper to allow or deny."
                    } else {
                        text
                    }),
                }),
                _ => None,
            }
        }
        // A user message whose delivery failed for good (the outbox gave up: a refusal, or
        // the assistant unreachable past its retries): the user must know it did not arrive.
        "message_updated" => {
            let m = &event["message"];
            if !prefs.notify_errors
                || m["kind"].as_str()? != "user"
                || m["delivery"].as_str()? != "failed"
            {
                return None;
            }
            let why = m["delivery_error"]["message"].as_str().unwrap_or_default();
            Some(Notice {
                kind: NoticeKind::Error,
                title: "Message not delivered".into(),
                body: clip(if why.trim().is_empty() {
                    "The assistant did not receive your message. Open StageWhisper to retry."
                } else {
                    why
                }),
            })
        }
        _ => None,
    }
}

/// Whether the desktop's notification server says notifications are inhibited (Do-Not-Disturb).
#[cfg(target_os = "linux")]
pub fn do_not_disturb() -> bool {
    let read = || -> zbus::Result<bool> {
        let conn = zbus::blocking::Connection::session()?;
        let proxy = zbus::blocking::Proxy::new(
            &conn,
            "org.freedesktop.Notifications",
            "/org/freedesktop/Notifications",
            "org.freedesktop.Notifications",
        )?;
        proxy.get_property::<bool>("Inhibited")
    };
    match read() {
        Ok(v) => v,
        Err(e) => {
            tracing::debug!(error = %e, "no Do-Not-Disturb state from the notification server");
            false
        }
    }
}

#[cfg(not(target_os = "linux"))]
pub fn do_not_disturb() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn insight(text: &str, draft: bool) -> Value {
        json!({"id": 7, "type": "insight_added", "session_id": "insights:s",
               "insight": {"id": 1, "session_id": "s", "text": text, "draft": draft}})
    }

    fn message(kind: &str, text: &str) -> Value {
        json!({"id": 8, "type": "message_added", "message": {"id": "m", "kind": kind, "text": text}})
    }

    #[test]
    fn insights_errors_and_permissions_notify_the_rest_does_not() {
        let p = DesktopPrefs::default();
        let n = notice_for(&insight("Ask about the budget", false), &p).unwrap();
        assert_eq!(
            (n.kind, n.body.as_str()),
            (NoticeKind::Insight, "Ask about the budget")
        );
        assert_eq!(
            notice_for(&message("error", "gateway down"), &p)
                .unwrap()
                .kind,
            NoticeKind::Error
        );
        let n = notice_for(&message("permission", ""), &p).unwrap();
        assert_eq!(n.kind, NoticeKind::Permission);
        assert!(!n.body.is_empty());
        for quiet in [
            insight("Ask about the budget", true),
            insight("None.", false),
            insight("  ", false),
            message("assistant", "hello"),
            message("user", "hi"),
            json!({"id": 9, "type": "insight_updated", "insight": {"text": "x"}}),
            json!({"id": 9, "type": "session_created"}),
            json!({"nothing": true}),
        ] {
            assert_eq!(notice_for(&quiet, &p), None, "{quiet}");
        }
    }

    #[test]
    fn a_failed_delivery_notifies_under_the_errors_switch() {
        let failed = |delivery: &str| {
            json!({"id": 9, "type": "message_updated", "message": {"id": "u", "kind": "user",
                "text": "hello", "delivery": delivery,
                "delivery_error": {"code": "assistant_refused", "message": "401 from the assistant"}}})
        };
        let p = DesktopPrefs::default();
        let n = notice_for(&failed("failed"), &p).expect("a notice");
        assert_eq!(
            (n.kind, n.title.as_str(), n.body.as_str()),
            (
                NoticeKind::Error,
                "Message not delivered",
                "401 from the assistant"
            )
        );
        assert_eq!(notice_for(&failed("sent"), &p), None);
        assert_eq!(notice_for(&failed("pending"), &p), None);
        let off = DesktopPrefs {
            notify_errors: false,
            ..DesktopPrefs::default()
        };
        assert_eq!(notice_for(&failed("failed"), &off), None);
        // An assistant message's update (a draft settling) never notifies.
        let settled = json!({"id": 10, "type": "message_updated",
            "message": {"id": "a", "kind": "assistant", "text": "done", "delivery": null}});
        assert_eq!(notice_for(&settled, &p), None);
    }

    #[test]
    fn each_kind_has_its_switch() {
        let off = DesktopPrefs {
            notify_insights: false,
            notify_errors: false,
            notify_permissions: false,
            ..DesktopPrefs::default()
        };
        assert_eq!(notice_for(&insight("x", false), &off), None);
        assert_eq!(notice_for(&message("error", "x"), &off), None);
        assert_eq!(notice_for(&message("permission", "x"), &off), None);
        let only_errors = DesktopPrefs {
            notify_errors: true,
            ..off
        };
        assert!(notice_for(&message("error", "x"), &only_errors).is_some());
        assert_eq!(notice_for(&insight("x", false), &only_errors), None);
    }

    #[test]
    fn long_bodies_are_cut() {
        let long = "a".repeat(500);
        let n = notice_for(&insight(&long, false), &DesktopPrefs::default()).unwrap();
        assert_eq!(n.body.chars().count(), BODY_MAX);
        assert!(n.body.ends_with('…'));
    }
}
