//! The request side of an online connection: a request frame out, its `res` back by id, within
//! the request timeout. Shared by the connection's loop ([`online`](super::online)), the send
//! worker ([`delivery`](super::delivery)) and the watch polls ([`watched`](super::watched)).

use super::GatewayError;
use crate::assistants::kinds::openclaw_gateway::frames::{
    ChatHistoryParams, ErrorShape, History, Request, Response,
};
use serde::Serialize;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// Requests waiting for their `res`, by id.
type Pending = Arc<Mutex<HashMap<String, oneshot::Sender<Result<Value, ErrorShape>>>>>;

/// The request side of an online connection, shared with its workers.
#[derive(Clone)]
pub(super) struct Rpc {
    out: mpsc::Sender<String>,
    pending: Pending,
    timeout: Duration,
}

impl Rpc {
    pub(super) fn new(out: mpsc::Sender<String>, timeout: Duration) -> Rpc {
        Rpc {
            out,
            pending: Arc::new(Mutex::new(HashMap::new())),
            timeout,
        }
    }

    pub(super) async fn call<P: Serialize>(
        &self,
        method: &str,
        params: &P,
    ) -> Result<Value, GatewayError> {
        let id = uuid::Uuid::new_v4().to_string();
        let frame = Request::new(
            id.clone(),
            method,
            serde_json::to_value(params).expect("params serialise"),
        );
        let (tx, rx) = oneshot::channel();
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.clone(), tx);
        let text = serde_json::to_string(&frame).expect("frame serialises");
        if self.out.send(text).await.is_err() {
            return Err(GatewayError::Offline);
        }
        let res = tokio::time::timeout(self.timeout, rx).await;
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        match res {
            Err(_) => Err(GatewayError::Timeout {
                method: method.to_string(),
                secs: self.timeout.as_secs(),
            }),
            Ok(Err(_)) => Err(GatewayError::Offline),
            Ok(Ok(Ok(v))) => Ok(v),
            Ok(Ok(Err(e))) => Err(GatewayError::Rejected {
                method: method.to_string(),
                code: e.detail_code().unwrap_or(&e.code).to_string(),
                message: e.message,
            }),
        }
    }

    pub(super) async fn history(
        &self,
        session_key: &str,
        limit: u32,
    ) -> Result<History, GatewayError> {
        let v = self
            .call(
                "chat.history",
                &ChatHistoryParams {
                    session_key: session_key.to_string(),
                    limit,
                },
            )
            .await?;
        History::from_payload(&v).map_err(|e| GatewayError::BadAnswer {
            method: "chat.history".into(),
            reason: e.to_string(),
        })
    }

    /// Hands an answer to the request waiting for it.
    pub(super) fn answer(&self, r: Response) {
        let tx = self
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&r.id);
        match tx {
            Some(tx) => {
                let _ = tx.send(r.result);
            }
            None => tracing::debug!(id = %r.id, "answer to no pending request"),
        }
    }

    /// Fails what still waits for an answer (the connection ended).
    pub(super) fn fail_pending(&self) {
        self.pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}
