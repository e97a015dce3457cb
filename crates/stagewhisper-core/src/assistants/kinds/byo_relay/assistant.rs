//! The `byo` kind as the app and the generic outbox see it: [`AssistantKind`] over [`ByoKind`]
//! (settings, status, removal, delivery), with its routes on both listeners — the relay API on
//! the callback listener ([`super::relay`]) and the control routes ([`super::routes`]).

use super::kind::{ByoKind, Live, KIND};
use super::pairing;
use super::routes;
use crate::assistants::{
    AssistantKind, Attempt, BoxFuture, CallbackRouter, KindError, KindRoutes, Outgoing,
};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;

impl AssistantKind for ByoKind {
    fn kind(&self) -> &'static str {
        KIND
    }

    fn configure<'a>(&'a self, settings: &'a Value) -> BoxFuture<'a, Result<(), KindError>> {
        Box::pin(async move {
            match settings {
                Value::Object(m) if m.is_empty() => {}
                Value::Object(m) => {
                    let k = m.keys().next().cloned().unwrap_or_default();
                    return Err(KindError::bad(
                        "unknown_field",
                        format!("unknown field `{k}` (the byo kind takes no settings: pair it with POST /api/assistant/pairing)"),
                    ));
                }
                _ => {
                    return Err(KindError::bad(
                        "invalid_json",
                        "the body must be a JSON object",
                    ))
                }
            }
            self.inner.ctx.save_settings(KIND, &json!({}))?;
            Ok(())
        })
    }

    fn status(&self) -> Value {
        self.view()
    }

    fn is_configured(&self) -> bool {
        self.paired().is_some()
    }

    fn remove(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move {
            let was = self.inner.paired.write().expect("paired lock").take();
            self.close_stream();
            pairing::remove(&self.inner.ctx.data_dir);
            let _ = std::fs::remove_file(self.profile_path());
            *self.inner.code.lock().expect("code lock") = None;
            *self.inner.live.lock().expect("live lock") = Live::default();
            let _ = self
                .jobs()
                .fail_open("unpaired", "the assistant was unpaired", self.now_ms())
                .await;
            if let Some(p) = was {
                tracing::info!(integration = %p.integration.integration_id, "BYO plugin unpaired");
            }
            self.report_status();
        })
    }

    fn check(&self) -> BoxFuture<'_, ()> {
        Box::pin(async move { self.report_status() })
    }

    fn deliver<'a>(&'a self, entry: &'a Outgoing) -> BoxFuture<'a, Attempt> {
        Box::pin(async move {
            match self.deliver_entry(entry).await {
                Ok(a) => a,
                Err(e) if e.status >= 500 => Attempt::RetryAfter {
                    code: e.code,
                    message: e.message,
                    after: None,
                },
                Err(e) => Attempt::Failed {
                    code: e.code,
                    message: e.message,
                },
            }
        })
    }

    fn set_active(&self, active: bool) {
        self.inner.active.store(active, Ordering::SeqCst);
        if !active {
            self.close_stream();
        }
    }

    fn session_deleted(&self, session_id: &str) {
        let me = self.clone();
        let call = session_id.to_string();
        tokio::spawn(async move {
            let _ = me.jobs().forget_call(&call).await;
        });
    }

    fn callback_routes(&self) -> Option<CallbackRouter> {
        Some(super::relay::router(self.clone()))
    }

    fn control_routes(&self) -> Option<KindRoutes> {
        Some(routes::routes(self.clone()))
    }
}
