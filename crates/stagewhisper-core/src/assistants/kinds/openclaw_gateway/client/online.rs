//! A connection once it is online: the loop that reads the gateway's frames (answers, `chat` and
//! `agent` events, close), writes requests, pings, and takes the caller's commands, until the
//! connection ends. Its request side ([`Rpc`]) is shared with the send worker
//! ([`delivery`](super::delivery)).

use super::delivery::{send_worker, SendJob};
use super::rpc::Rpc;
use super::socket::{close_reason, Ws};
use super::supervisor::{Outcome, Supervisor};
use super::{Command, SendOutcome};
use crate::assistants::kinds::openclaw_gateway::frames::{self, ChatAbortParams, HelloOk, Inbound};
use futures_util::{SinkExt, StreamExt};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{self, Message};

/// A connection that completed `hello-ok`.
pub(super) struct Online {
    pub(super) ws: Ws,
    pub(super) hello: HelloOk,
}

impl Supervisor {
    /// Serves an online connection until it ends, and answers why it ended. A send worker
    /// delivers the messages meanwhile.
    pub(super) async fn serve(&mut self, online: Online) -> Outcome {
        let Online { mut ws, hello } = online;
        let tick = Duration::from_millis(hello.policy.tick_interval_ms.max(50));
        let dead_after = tick * 2;
        let ping_every = (tick / 2).min(Duration::from_secs(15));
        let (out_tx, mut out_rx) = mpsc::channel::<String>(256);
        let rpc = Rpc::new(out_tx, self.settings.request_timeout);
        let jobs_tx = self.start_send_worker(&rpc);
        let mut last_rx = Instant::now();
        let mut ping = tokio::time::interval_at(Instant::now() + ping_every, ping_every);
        let mut shutdown_reason: Option<String> = None;
        let outcome = loop {
            tokio::select! {
                msg = tokio::time::timeout_at(last_rx + dead_after, ws.next()) => {
                    let msg = match received(msg, dead_after) {
                        Ok(m) => m,
                        Err(outcome) => break outcome,
                    };
                    last_rx = Instant::now();
                    if let Some(outcome) = self.on_message(msg, &rpc, &mut shutdown_reason).await {
                        break outcome;
                    }
                }
                Some(text) = out_rx.recv() => {
                    if let Err(e) = ws.send(Message::text(text)).await {
                        break Outcome::Retry { code: "connection_lost", why: format!("sending failed: {e}"), hint: None };
                    }
                }
                _ = ping.tick() => {
                    if let Err(e) = ws.send(Message::Ping(Vec::new().into())).await {
                        break Outcome::Retry { code: "connection_lost", why: format!("ping failed: {e}"), hint: None };
                    }
                }
                cmd = self.cmd_rx.recv() => match cmd {
                    None => break Outcome::Stop,
                    Some(cmd) => self.online_command(cmd, &rpc, &jobs_tx).await,
                },
                _ = self.shutdown.wait() => break Outcome::Stop,
            }
        };
        rpc.fail_pending();
        if matches!(outcome, Outcome::Stop) {
            let _ = ws
                .close(Some(CloseFrame {
                    code: CloseCode::Normal,
                    reason: "client stopping".into(),
                }))
                .await;
        }
        outcome
    }

    /// Counts a new connection and spawns its send worker; answers the worker's job sender (the
    /// worker ends by itself once it is dropped, with the connection).
    fn start_send_worker(&mut self, rpc: &Rpc) -> mpsc::Sender<SendJob> {
        let (jobs_tx, jobs_rx) = mpsc::channel::<SendJob>(256);
        self.epoch += 1;
        // What is open now is reconciled first; what is sent from here on comes as a job.
        let open = self.shared.reg().open_keys();
        tokio::spawn(send_worker(
            rpc.clone(),
            self.shared.clone(),
            self.epoch,
            open,
            jobs_rx,
        ));
        jobs_tx
    }

    /// One WebSocket message from the gateway; `Some` when it ends the connection.
    async fn on_message(
        &self,
        msg: Message,
        rpc: &Rpc,
        shutdown_reason: &mut Option<String>,
    ) -> Option<Outcome> {
        match msg {
            Message::Text(t) => match frames::parse_inbound(t.as_str()) {
                Ok(Inbound::Response(r)) => rpc.answer(r),
                Ok(Inbound::Chat(c)) => self.shared.on_chat(c).await,
                Ok(Inbound::Agent(a)) => self.shared.on_agent(a).await,
                Ok(Inbound::Shutdown { reason }) => {
                    tracing::info!(
                        reason = reason.as_deref().unwrap_or(""),
                        "the gateway is shutting down"
                    );
                    *shutdown_reason = reason;
                }
                Ok(Inbound::Tick | Inbound::Ignored(_) | Inbound::Challenge(_)) => {}
                Err(e) => tracing::warn!(code = e.code(), "unreadable gateway frame: {e}"),
            },
            Message::Close(frame) => return Some(closed(&frame, shutdown_reason.as_deref())),
            _ => {} // ping (answered by tungstenite), pong, binary
        }
        None
    }

    /// A command of the caller while online: a message to send or to watch goes to the send
    /// worker (in order with the others); abort and history are requests of their own.
    async fn online_command(&self, cmd: Command, rpc: &Rpc, jobs: &mpsc::Sender<SendJob>) {
        match cmd {
            Command::Send {
                session_key,
                text,
                key,
                reply,
            } => {
                if let Some(out) = self.register(&session_key, &text, &key) {
                    let _ = reply.send(Ok(out));
                    return;
                }
                if let Err(mpsc::error::SendError(job)) = jobs.send(SendJob { key, reply }).await {
                    let _ = job.reply.send(Ok(SendOutcome::Queued));
                }
            }
            Command::Watch { session_key, key } => {
                if self.register_watch(&session_key, &key) {
                    // Looked up now (in order with the sends); nobody waits for the answer.
                    let (reply, _) = oneshot::channel();
                    let _ = jobs.send(SendJob { key, reply }).await;
                }
            }
            Command::Abort {
                session_key,
                run_id,
                reply,
            } => {
                let rpc = rpc.clone();
                tokio::spawn(async move {
                    let r = rpc
                        .call(
                            "chat.abort",
                            &ChatAbortParams {
                                session_key,
                                run_id,
                            },
                        )
                        .await;
                    let _ = reply.send(r);
                });
            }
            Command::History {
                session_key,
                limit,
                reply,
            } => {
                let rpc = rpc.clone();
                tokio::spawn(async move {
                    let _ = reply.send(rpc.history(&session_key, limit).await);
                });
            }
        }
    }
}

/// What the read of the next message gave: the message, or why the connection is lost (nothing
/// for `dead_after`, closed, or a socket error).
fn received(
    msg: Result<Option<Result<Message, tungstenite::Error>>, tokio::time::error::Elapsed>,
    dead_after: Duration,
) -> Result<Message, Outcome> {
    match msg {
        Err(_) => Err(Outcome::Retry {
            code: "dead_socket",
            why: format!("nothing from the gateway for {} s", dead_after.as_secs()),
            hint: None,
        }),
        Ok(None) => Err(Outcome::Retry {
            code: "connection_lost",
            why: "the connection closed".into(),
            hint: None,
        }),
        Ok(Some(Err(e))) => Err(Outcome::Retry {
            code: "connection_lost",
            why: format!("connection error: {e}"),
            hint: None,
        }),
        Ok(Some(Ok(m))) => Ok(m),
    }
}

/// The gateway closed an online connection: for good on 1008 / 1002, else retried.
/// `shutdown_reason`: what its `shutdown` event said before, if it sent one.
fn closed(frame: &Option<CloseFrame>, shutdown_reason: Option<&str>) -> Outcome {
    let (code, reason) = close_reason(frame);
    tracing::info!(code, reason = %reason, "the gateway closed the connection");
    match code {
        1008 | 1002 => Outcome::Final {
            code: "closed_by_gateway",
            detail: format!("The gateway closed the connection for good ({code}: {reason}). Check the settings."),
        },
        1012 => Outcome::Retry {
            code: "gateway_restarting",
            why: format!(
                "the gateway is restarting{}",
                shutdown_reason.map(|r| format!(": {r}")).unwrap_or_default()
            ),
            hint: None,
        },
        1013 => Outcome::Retry {
            code: "gateway_unavailable",
            why: "the gateway is busy".into(),
            hint: None,
        },
        _ => Outcome::Retry {
            code: "connection_lost",
            why: format!("closed by the gateway ({code})"),
            hint: None,
        },
    }
}
