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
use stagewhisper_core::events::Change;
use stagewhisper_core::model::MessageKind;

/// Longest notification body, in characters (the rest is cut with an ellipsis).
const BODY_MAX: usize = 180;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoticeKind {
    Insight,
    Error,
    Permission,
    /// Another app took the microphone: the offer to listen (call detection).
    Call,
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

/// The notice an event deserves under `prefs`, if any: a new insight (not a draft), an
/// assistant error, a permission request, and a message of the user's that could not be
/// delivered (under the errors switch). Other updates never notify (they repeat what was shown).
pub fn notice_for(change: &Change, prefs: &DesktopPrefs) -> Option<Notice> {
    match change {
        Change::InsightAdded { insight, .. } => {
            let text = insight.text.as_str();
            if !prefs.notify_insights
                || insight.draft
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
        Change::MessageAdded { message, .. } => {
            let text = message.text.as_str();
            match message.kind {
                MessageKind::Error if prefs.notify_errors => Some(Notice {
                    kind: NoticeKind::Error,
                    title: "Assistant error".into(),
                    body: clip(if text.trim().is_empty() {
                        "The assistant reported an error."
                    } else {
                        text
                    }),
                }),
                MessageKind::Permission if prefs.notify_permissions => Some(Notice {
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
        Change::MessageUpdated { message, .. } => {
            if !prefs.notify_errors
                || message.kind != MessageKind::User
                || message.delivery.as_deref() != Some("failed")
            {
                return None;
            }
            let why = message
                .delivery_error
                .as_ref()
                .and_then(|e| e["message"].as_str())
                .unwrap_or_default();
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
        // Call detection's offer (live-only; detection has its own switch in Settings).
        Change::CallOffered { label, .. } => Some(Notice {
            kind: NoticeKind::Call,
            title: format!("{} is using the microphone", capitalised(label)),
            body: "Start listening? Open StageWhisper to start, or say not now.".into(),
        }),
        _ => None,
    }
}

fn capitalised(s: &str) -> String {
    let mut c = s.chars();
    c.next()
        .map(|f| f.to_uppercase().chain(c).collect())
        .unwrap_or_default()
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
    use stagewhisper_core::model::{InsightView, MessageRow, MessageView, SessionView};

    fn insight_view(text: &str, draft: bool) -> InsightView {
        InsightView {
            id: 1,
            session_id: "s".into(),
            text: text.into(),
            task_id: None,
            message_id: None,
            occurred_at: None,
            received_at: String::new(),
            offset_ms: 0,
            draft,
        }
    }

    fn insight(text: &str, draft: bool) -> Change {
        Change::InsightAdded {
            session_id: "s".into(),
            insight: insight_view(text, draft),
        }
    }

    fn message_view(kind: MessageKind, text: &str) -> MessageView {
        MessageView::from(&MessageRow::new(
            8,
            "s",
            kind,
            text.into(),
            String::new(),
            0,
        ))
    }

    fn message(kind: MessageKind, text: &str) -> Change {
        Change::MessageAdded {
            session_id: "s".into(),
            message: message_view(kind, text),
        }
    }

    fn updated(message: MessageView) -> Change {
        Change::MessageUpdated {
            session_id: "s".into(),
            message,
        }
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
            notice_for(&message(MessageKind::Error, "gateway down"), &p)
                .unwrap()
                .kind,
            NoticeKind::Error
        );
        let n = notice_for(&message(MessageKind::Permission, ""), &p).unwrap();
        assert_eq!(n.kind, NoticeKind::Permission);
        assert!(!n.body.is_empty());
        for quiet in [
            insight("Ask about the budget", true),
            insight("None.", false),
            insight("  ", false),
            message(MessageKind::Assistant, "hello"),
            message(MessageKind::User, "hi"),
            Change::InsightUpdated {
                session_id: "s".into(),
                insight: insight_view("x", false),
            },
            Change::SessionCreated {
                session_id: "s".into(),
                session: SessionView {
                    session_id: "s".into(),
                    kind: "chat".into(),
                    is_call: true,
                    title: None,
                    created_at: String::new(),
                    ended_at: None,
                    insights_session_id: None,
                },
            },
            Change::Unknown,
        ] {
            assert_eq!(notice_for(&quiet, &p), None, "{quiet:?}");
        }
    }

    #[test]
    fn a_failed_delivery_notifies_under_the_errors_switch() {
        let failed = |delivery: &str| {
            let mut m = message_view(MessageKind::User, "hello");
            m.delivery = Some(delivery.into());
            m.delivery_error =
                Some(json!({"code": "assistant_refused", "message": "401 from the assistant"}));
            updated(m)
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
        let settled = updated(message_view(MessageKind::Assistant, "done"));
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
        assert_eq!(notice_for(&message(MessageKind::Error, "x"), &off), None);
        assert_eq!(
            notice_for(&message(MessageKind::Permission, "x"), &off),
            None
        );
        let only_errors = DesktopPrefs {
            notify_errors: true,
            ..off
        };
        assert!(notice_for(&message(MessageKind::Error, "x"), &only_errors).is_some());
        assert_eq!(notice_for(&insight("x", false), &only_errors), None);
    }

    #[test]
    fn long_bodies_are_cut() {
        let long = "a".repeat(500);
        let n = notice_for(&insight(&long, false), &DesktopPrefs::default()).unwrap();
        assert_eq!(n.body.chars().count(), BODY_MAX);
        assert!(n.body.ends_with('…'));
    }

    #[test]
    fn a_call_offer_is_a_notice_naming_the_app() {
        let n = notice_for(
            &Change::CallOffered {
                app: "zoom".into(),
                binary: Some("zoom".into()),
                label: "zoom".into(),
            },
            &DesktopPrefs::default(),
        )
        .unwrap();
        assert_eq!(n.kind, NoticeKind::Call);
        assert_eq!(n.title, "Zoom is using the microphone");
    }
}
