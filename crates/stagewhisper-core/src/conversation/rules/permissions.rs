//! Permission cards: a tool of the assistant waits for the user's Allow / Deny. A card is a
//! chat row of kind `permission` ([`PermissionCard`] holds its fields); it is added once per
//! request id (a request seen again, after a replay or a reconnect, is the same card) and
//! settled in place exactly once (`allow`, `deny` or `expired`, with who decided): a
//! `message_updated` event carries the settled card, and the stored row holds it for a view
//! that loads the chat later.
//!
//! The cards this run has touched are kept by request id; the actor loads a stored one
//! before a batch that names it ([`Rules::needs_permission`]).

use super::{Route, RowChange, Rules};
use crate::conversation::CoreError;
use crate::events::Event;
use crate::model::{MessageKind, MessageRow, MessageView, PermissionCard};
use crate::store::Op;

/// The states a card settles into.
pub const SETTLED_STATES: [&str; 3] = ["allow", "deny", "expired"];

/// What settling a card came to.
#[derive(Debug, Clone, PartialEq)]
pub enum Settled {
    /// It was pending and is settled now (the card as it is now).
    Now(MessageView),
    /// It was already settled (the card as it was settled).
    Already(MessageView),
}

impl Rules {
    /// The request id whose stored card the actor must load first (`None` when in memory).
    pub fn needs_permission<'a>(&self, request_id: &'a str) -> Option<&'a str> {
        (!self.permissions.contains_key(request_id)).then_some(request_id)
    }

    /// A card loaded by the actor (or none stored: remembered as absent is not needed).
    pub fn remember_permission(&mut self, row: MessageRow) {
        if let Some(p) = &row.permission {
            self.permissions.insert(p.request_id.clone(), row);
        }
    }

    /// A new permission request: a pending card in `session_id`. `Ok((card, false))` when the
    /// request already has one (anywhere).
    pub fn permission_request(
        &mut self,
        session_id: &str,
        request_id: &str,
        tool: &str,
        input_preview: &str,
        events: &mut Vec<Event>,
    ) -> Result<(MessageView, bool), CoreError> {
        if let Some(row) = self.permissions.get(request_id) {
            if self.live_chat(&row.session_id).is_some() {
                return Ok((MessageView::from(row), false));
            }
        }
        if self.live_chat(session_id).is_none() {
            return Err(CoreError::SessionNotFound);
        }
        let mut row = self.new_row(session_id, MessageKind::Permission, input_preview.into());
        row.message_id = Some(format!("permission:{request_id}"));
        row.scope = row.message_id.clone();
        row.permission = Some(Box::new(PermissionCard {
            request_id: request_id.to_string(),
            tool: tool.to_string(),
            input_preview: input_preview.to_string(),
            state: "pending".into(),
            resolver: None,
        }));
        let view = MessageView::from(&row);
        self.permissions.insert(request_id.to_string(), row.clone());
        self.insert_row(row, &Route::Chat, events);
        Ok((view, true))
    }

    /// Settles a card (`state`: one of [`SETTLED_STATES`]); `MessageNotFound` for an unknown
    /// request (or one whose chat was deleted).
    pub fn settle_permission(
        &mut self,
        request_id: &str,
        state: &str,
        resolver: Option<String>,
        events: &mut Vec<Event>,
    ) -> Result<Settled, CoreError> {
        let live = self
            .permissions
            .get(request_id)
            .is_some_and(|r| self.live_chat(&r.session_id).is_some());
        if !live {
            self.permissions.remove(request_id);
            return Err(CoreError::MessageNotFound);
        }
        let row = self.permissions.get_mut(request_id).expect("checked");
        let card = row.permission.as_mut().expect("a card row");
        if !card.is_pending() {
            return Ok(Settled::Already(MessageView::from(&*row)));
        }
        card.state = state.to_string();
        card.resolver = resolver;
        let row = row.clone();
        self.emit_row(events, &row, &Route::Chat, RowChange::Updated);
        let view = MessageView::from(&row);
        self.ops.push(Op::UpdateMessage(row));
        Ok(Settled::Now(view))
    }

    /// The card of a request, if this run has it in memory.
    pub fn permission_card(&self, request_id: &str) -> Option<MessageView> {
        self.permissions
            .get(request_id)
            .filter(|r| self.live_chat(&r.session_id).is_some())
            .map(MessageView::from)
    }
}

#[cfg(test)]
mod tests {
    //! Cards through the real conversation (actor, writer, a real SQLite file).
    use crate::clock::ManualClock;
    use crate::conversation::{Conversation, CoreError, Settings, Settled};
    use crate::store::Store;
    use chrono::DateTime;

    async fn start(dir: &std::path::Path) -> Conversation {
        let (store, conn) = Store::open(&dir.join("t.db"), Default::default())
            .await
            .unwrap();
        let clock = ManualClock::new(DateTime::from_timestamp(1_800_000_000, 0).unwrap());
        Conversation::start(store, conn, clock, Settings::default())
            .await
            .unwrap()
    }

    #[tokio::test]
    async fn a_card_is_added_once_settles_once_in_place_and_is_stored_settled() {
        let dir = tempfile::tempdir().unwrap();
        let c = start(dir.path()).await;
        let s = c.create_session(false, None).await.unwrap().session_id;
        assert_eq!(
            c.permission_request("nope", "r1", "Bash", "ls").await,
            Err(CoreError::SessionNotFound)
        );
        let (card, new) = c
            .permission_request(&s, "r1", "Bash", "ls -la")
            .await
            .unwrap();
        assert!(new);
        assert_eq!(card.state.as_deref(), Some("pending"));
        // Seen again (a replay): the same card, nothing added.
        let (again, new) = c
            .permission_request(&s, "r1", "Bash", "ls -la")
            .await
            .unwrap();
        assert!(!new);
        assert_eq!(again.id, card.id);
        let Settled::Now(done) = c
            .settle_permission("r1", "deny", Some("bob"))
            .await
            .unwrap()
        else {
            panic!("settles");
        };
        assert_eq!(done.id, card.id);
        assert_eq!(done.resolver, Some(Some("bob".into())));
        let Settled::Already(same) = c
            .settle_permission("r1", "allow", Some("ana"))
            .await
            .unwrap()
        else {
            panic!("settles once");
        };
        assert_eq!(same.state.as_deref(), Some("deny"));
        assert_eq!(
            c.settle_permission("unknown", "allow", None).await,
            Err(CoreError::MessageNotFound)
        );
        // The log: the card added, then updated in place (same message id).
        let log = c.store().events_after(0, 100).await.unwrap();
        let cards: Vec<serde_json::Value> = log
            .iter()
            .map(|(_, j)| serde_json::from_str::<serde_json::Value>(j).unwrap())
            .filter(|v| v["message"]["kind"] == "permission")
            .collect();
        assert_eq!(cards.len(), 2, "{cards:?}");
        assert_eq!(cards[0]["type"], "message_added");
        assert_eq!(cards[0]["message"]["state"], "pending");
        assert_eq!(cards[1]["type"], "message_updated");
        assert_eq!(cards[1]["message"]["id"], card.id);
        assert_eq!(cards[1]["message"]["state"], "deny");
        assert_eq!(cards[1]["message"]["resolver"], "bob");
        drop(c);

        // A new run (nothing in memory) finds the stored card, settled.
        let c = start(dir.path()).await;
        let m = c.messages(&s).await.unwrap();
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].state.as_deref(), Some("deny"));
        assert!(matches!(
            c.settle_permission("r1", "allow", None).await.unwrap(),
            Settled::Already(_)
        ));
        let (_, new) = c
            .permission_request(&s, "r1", "Bash", "ls -la")
            .await
            .unwrap();
        assert!(!new, "a stored request is not added again");
        // A deleted chat takes its cards with it.
        c.delete_session(&s).await.unwrap();
        assert_eq!(c.permission_card("r1").await.unwrap(), None);
    }
}
