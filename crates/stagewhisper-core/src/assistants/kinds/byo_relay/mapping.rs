//! The `byo` kind's mapping between the conversation and the jobs: what a delivery becomes
//! (a stored turn and the call's next `live_analysis` job, a sealed chat dispatch, a
//! `session_summary` job), and what an answered job becomes in the conversation (an insight, a
//! chat reply, the summary message, a plain-words error entry), through
//! [`crate::assistants::AssistantContext::submit`] like any callback.

use super::crypto::{content_type, Meta};
use super::jobs::{self, Job, NewJob};
use super::kind::{ByoKind, Paired, CHAT_DEADLINE_MS, LIVE_DEADLINE_MS, SUMMARY_DEADLINE_MS};
use super::pairing;
use super::schema;
use crate::assistants::delivery_queue::transcript_text;
use crate::assistants::prelude::DEFAULT_PRELUDE;
use crate::assistants::{Attempt, KindError, Outgoing};
use crate::protocol::{Callback, Status};
use serde_json::{json, Value};

/// Plain words for a failure code the plugin (or the desktop) reports.
pub fn plain_words(code: &str, message: &str) -> String {
    let said = if message.trim().is_empty() {
        String::new()
    } else {
        format!(" ({})", message.trim())
    };
    match code {
        "timed_out" | "deadline_expired_before_start" | "deadline_exceeded" => {
            "The assistant did not answer in time.".to_string()
        }
        "decryption_error" => format!(
            "The assistant could not open the encrypted request; if this keeps happening, pair it again{said}."
        ),
        "missing_envelope" | "missing_keys" => {
            "The assistant is missing its encryption keys; pair it again.".to_string()
        }
        "response_parse_error" => {
            "The assistant's answer was not in the expected format.".to_string()
        }
        "invalid_result" => format!("The assistant's answer did not match what was asked{said}."),
        "llm_error" => format!("The assistant's model failed to answer{said}."),
        "unpaired" => "The assistant was unpaired before it answered.".to_string(),
        "no_reply" => "The assistant gave no reply.".to_string(),
        _ => format!("The assistant reported an error: {code}{said}."),
    }
}

impl ByoKind {
    /// Starts the next live-analysis job of a call when none is in flight and turns wait.
    pub(crate) async fn schedule_live(&self, call_id: &str) -> Result<(), KindError> {
        let Some(p) = self.paired() else {
            return Ok(());
        };
        let _one = self.inner.schedule.lock().await;
        let jobs = self.jobs();
        let insights = format!("insights:{call_id}");
        if jobs.live_in_flight(&insights).await?.is_some() {
            return Ok(());
        }
        let waiting = jobs.waiting_turns(call_id).await?;
        if waiting.is_empty() {
            return Ok(());
        }
        let window = jobs
            .recent_turns(call_id, schema::LIVE_WINDOW.max(waiting.len() as i64))
            .await?;
        let lines: Vec<String> = window
            .iter()
            .map(|t| transcript_text(t.speaker.as_deref(), &t.text))
            .collect();
        let title = self.call_title(call_id).await;
        let framing = self.inner.ctx.conversation.call_prelude_for(
            call_id,
            DEFAULT_PRELUDE,
            title.as_deref(),
        );
        let payload = schema::live_payload(&framing, &lines, waiting.len());
        let job_id = uuid::Uuid::new_v4().to_string();
        let deadline = self.now_ms() + LIVE_DEADLINE_MS;
        let ev = self.job_event(
            &p,
            &job_id,
            jobs::LIVE,
            &insights,
            deadline,
            &payload,
            false,
        )?;
        let ids: Vec<String> = waiting.iter().map(|t| t.task_id.clone()).collect();
        jobs.insert_live(
            &NewJob {
                job_id: &job_id,
                purpose: jobs::LIVE,
                app_session: Some(&insights),
                source_task_id: None,
                anchor: Some(&ids[0]),
                correlation_id: &job_id,
                deadline_ms: deadline,
                event: Some(&ev),
            },
            &ids,
            self.now_ms(),
        )
        .await?;
        tracing::debug!(job = %job_id, turns = ids.len(), "BYO live-analysis job queued");
        self.push(&job_id, &ev).await;
        Ok(())
    }

    pub(crate) async fn call_title(&self, call_id: &str) -> Option<String> {
        let sessions = self.inner.ctx.conversation.sessions().await.ok()?;
        sessions
            .into_iter()
            .find(|s| s.session_id == call_id)
            .and_then(|s| s.title)
    }

    /// A job was answered (or expired): its outcome into the conversation, once.
    pub(crate) async fn apply(&self, job: &Job) {
        let cb = self.callback_for(job);
        if let Some(cb) = cb {
            if let Err(e) = self.inner.ctx.submit(cb).await {
                tracing::warn!(error = %e, job = %job.job_id, "BYO result not stored in the conversation yet");
                return; // applied stays 0: the sweeper tries again
            }
        }
        let _ = self.jobs().mark_applied(&job.job_id).await;
        if job.purpose == jobs::LIVE {
            if let Some(call) = job
                .app_session
                .as_deref()
                .and_then(|s| s.strip_prefix("insights:"))
            {
                if let Err(e) = self.schedule_live(call).await {
                    tracing::warn!(error = %e, "next BYO live-analysis job not queued");
                }
            }
        }
    }

    pub(crate) fn callback_for(&self, job: &Job) -> Option<Callback> {
        let result: Option<Value> = job
            .result
            .as_deref()
            .and_then(|r| serde_json::from_str(r).ok());
        if job.purpose == jobs::PROBE {
            if job.state == "completed" {
                let mut profile = result.unwrap_or(Value::Null);
                if profile.is_object() {
                    profile["received_at"] = json!(self.inner.ctx.now());
                    let _ = std::fs::create_dir_all(self.inner.ctx.data_dir.join(pairing::DIR));
                    let _ = std::fs::write(self.profile_path(), profile.to_string());
                }
            }
            return None;
        }
        if job.purpose == jobs::TEST {
            return None;
        }
        let session = job.app_session.clone()?;
        let task_id = match job.purpose.as_str() {
            jobs::LIVE => job.anchor.clone()?,
            _ => job
                .source_task_id
                .clone()
                .unwrap_or_else(|| job.job_id.clone()),
        };
        let mut cb = Callback::new(task_id, session, Status::Message);
        cb.occurred_at = Some(self.inner.ctx.clock.now());
        if job.purpose == jobs::CHAT {
            cb.user_message_id = job.anchor.clone();
        }
        if job.state != "completed" {
            let code = job.error_code.clone().unwrap_or_else(|| job.state.clone());
            let msg = job.result.as_deref().unwrap_or("");
            cb.status = Status::Errored;
            cb.error_message = Some(plain_words(&code, msg));
            cb.error_code = Some(code);
            return Some(cb);
        }
        let text = match job.purpose.as_str() {
            jobs::LIVE => schema::insight_text(result.as_ref()?)?,
            jobs::SUMMARY => result.as_ref()?["summary"].as_str()?.to_string(),
            _ => result.as_ref()?.as_str()?.to_string(),
        };
        cb.message_id = Some(format!("byo:{}", job.job_id));
        cb.reply_text = Some(text);
        Some(cb)
    }

    pub(crate) async fn deliver_entry(&self, entry: &Outgoing) -> Result<Attempt, KindError> {
        let Some(p) = self.paired() else {
            return Ok(Attempt::RetryAfter {
                code: "assistant_not_paired",
                message: "No assistant is paired yet.".into(),
                after: None,
            });
        };
        match entry {
            // The framing goes into every live job (render_prelude with the call's title).
            Outgoing::Prelude { .. } => Ok(Attempt::Delivered("framing_kept")),
            Outgoing::TranscriptTurn {
                task_id,
                call_id,
                speaker,
                text,
                occurred_at,
                ..
            } => {
                self.jobs()
                    .add_turn(task_id, call_id, speaker.as_deref(), text, occurred_at)
                    .await?;
                self.schedule_live(call_id).await?;
                Ok(Attempt::Delivered("queued"))
            }
            Outgoing::CallEnded {
                task_id, call_id, ..
            } => self.queue_summary(&p, task_id, call_id).await,
            Outgoing::UserMessage {
                task_id,
                session_id,
                text,
                user_message_id,
                ..
            } => {
                let umid = user_message_id.clone().unwrap_or_else(|| task_id.clone());
                self.dispatch_chat(&p, task_id, session_id, text, umid)
                    .await
            }
        }
    }

    /// The end of a call: one `session_summary` job over its stored transcript (none for a
    /// call without turns, or when one is queued already).
    async fn queue_summary(
        &self,
        p: &Paired,
        task_id: &str,
        call_id: &str,
    ) -> Result<Attempt, KindError> {
        if self.jobs().by_source(task_id).await?.is_some() {
            return Ok(Attempt::Delivered("already_queued"));
        }
        let conv = &self.inner.ctx.conversation;
        let turns = conv
            .transcript(call_id)
            .await
            .map_err(|e| KindError::internal("storage_unavailable", e.to_string()))?;
        if turns.is_empty() {
            return Ok(Attempt::Delivered("nothing_to_summarise"));
        }
        let lines: Vec<String> = turns
            .iter()
            .map(|t| transcript_text(t.speaker.as_deref(), &t.text))
            .collect();
        let title = self.call_title(call_id).await;
        let payload = schema::summary_payload(title.as_deref(), &lines);
        let job_id = uuid::Uuid::new_v4().to_string();
        let deadline = self.now_ms() + SUMMARY_DEADLINE_MS;
        let ev = self.job_event(
            p,
            &job_id,
            jobs::SUMMARY,
            call_id,
            deadline,
            &payload,
            false,
        )?;
        self.insert_and_push(&NewJob {
            job_id: &job_id,
            purpose: jobs::SUMMARY,
            app_session: Some(call_id),
            source_task_id: Some(task_id),
            anchor: None,
            correlation_id: &job_id,
            deadline_ms: deadline,
            event: Some(&ev),
        })
        .await?;
        Ok(Attempt::Delivered("queued"))
    }

    /// A user's message: a sealed `chat_message_dispatched` job (once per message id), and
    /// typing while the assistant works on it.
    async fn dispatch_chat(
        &self,
        p: &Paired,
        task_id: &str,
        session_id: &str,
        text: &str,
        umid: String,
    ) -> Result<Attempt, KindError> {
        if self.jobs().get(&umid).await?.is_some() {
            return Ok(Attempt::Delivered("already_queued"));
        }
        let corr = format!("chat:{umid}");
        let env = p
            .key
            .try_seal(
                &Meta {
                    session_id,
                    correlation_id: &corr,
                    content_type: content_type::TASK_CONTENT,
                },
                text.as_bytes(),
            )
            .map_err(|e| KindError::internal(e.code(), e.to_string()))?;
        let ev = json!({
            "event_type": "chat_message_dispatched",
            "user_message_id": umid,
            "session_id": session_id,
            "content": env.to_json(),
        })
        .to_string();
        self.insert_and_push(&NewJob {
            job_id: &umid,
            purpose: jobs::CHAT,
            app_session: Some(session_id),
            source_task_id: Some(task_id),
            anchor: Some(&umid),
            correlation_id: &corr,
            deadline_ms: self.now_ms() + CHAT_DEADLINE_MS,
            event: Some(&ev),
        })
        .await?;
        // Typing while the assistant works on it.
        let mut typing = Callback::new(task_id.to_string(), session_id.to_string(), Status::Typing);
        typing.user_message_id = Some(umid.clone());
        typing.label = Some("thinking".into());
        if let Err(e) = self.inner.ctx.submit(typing).await {
            tracing::debug!(error = %e, "typing not shown");
        }
        Ok(Attempt::Delivered("queued"))
    }
}
