//! The MCP tools: read-only, small answers (paged with `limit`, long texts cut with a marker),
//! JSON text content and `structuredContent` (rmcp's `Json`), times in ISO 8601 (UTC). Bad
//! input is a JSON-RPC error (`-32602 invalid params`) with a message an assistant can act on;
//! a storage failure is `-32603`. Each call whose data is returned is recorded in the access
//! log first ([`super::log`]).

use super::read::{self, CallDetail, CallInfo, Current, ListFilter, Transcript};
use crate::archive::{fts_query, ArchiveError, MAX_QUERY_CHARS};
use crate::clock::fmt_time;
use crate::conversation::Conversation;
use crate::protocol::INSIGHTS_PREFIX;
use crate::store::search::{HIT_CLOSE, HIT_OPEN};
use crate::store::StoreError;
use chrono::{DateTime, NaiveDate, NaiveDateTime, Utc};
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::ToolCallContext;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, JsonObject, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_handler, tool_router, ErrorData, Json, RoleServer, ServerHandler};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sqlx::Row;
use std::sync::OnceLock;

const INSTRUCTIONS: &str = "StageWhisper keeps the person's calls on their own device: each \
call's transcript (who said what, when), the insights their assistant gave during it, their chat \
with the assistant and a summary when one was asked for. Use search_calls to find what was said \
about something, list_calls to find calls by title or date, get_call for one call's summary, \
insights and chat, get_transcript to read what was said, and current_call for the call going on \
now. Every answer is small: page with `limit` and the fields the answers give. Times are ISO \
8601 (UTC). Calls the person marked private are never shown.";

#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct ListCallsArgs {
    /// Words that must all be in the call's title (case-insensitive for A–Z). Leave out to
    /// list every call.
    pub query: Option<String>,
    /// Only calls that started at or after this time: ISO 8601, a date (`2026-11-12`, UTC) or
    /// a date and time (`2026-11-12T09:00:00Z`).
    pub since: Option<String>,
    /// Only calls that started before this time (ISO 8601, as `since`).
    pub until: Option<String>,
    /// At most this many calls, newest first (1–50; default 10).
    pub limit: Option<i64>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct CallList {
    /// Newest first.
    pub calls: Vec<CallInfo>,
    /// More calls match: narrow with `since`/`until` or `query`.
    pub more: bool,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct SearchCallsArgs {
    /// What to look for. Plain words must all appear (the last one also as a prefix). For more
    /// control use the full-text syntax: `"exact phrase"`, `a OR b`, `a NOT b`, `prefix*`.
    pub query: String,
    /// At most this many matches, newest first (1–50; default 10).
    pub limit: Option<i64>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct SearchHit {
    pub call_id: String,
    pub title: Option<String>,
    /// When the call started (ISO 8601).
    pub call_started_at: String,
    /// When this was said or written (ISO 8601).
    pub time: String,
    /// `transcript` (said on the call), `insight` (the assistant's, during the call) or `chat`.
    pub kind: String,
    /// The speaker's label for a transcript turn; `user` or `assistant` in the chat.
    pub speaker: Option<String>,
    /// The text around the match (matches between `**`; `…` where cut).
    pub text: String,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct SearchResults {
    pub query: String,
    /// Newest first.
    pub results: Vec<SearchHit>,
    /// More matches exist: raise `limit` or narrow the query.
    pub more: bool,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct GetTranscriptArgs {
    /// The call's id (from list_calls or search_calls).
    pub call_id: String,
    /// From this many milliseconds into the call (default 0).
    pub from_ms: Option<i64>,
    /// Up to (not including) this many milliseconds into the call (default: the end).
    pub to_ms: Option<i64>,
    /// At most this many turns, oldest first (1–200; default 50).
    pub limit: Option<i64>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct GetCallArgs {
    /// The call's id (from list_calls or search_calls).
    pub call_id: String,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct CurrentCallArgs {
    /// The newest turns to return (1–100; default 20).
    pub limit: Option<i64>,
}

/// The tool server one request is served by (stateless: one per request).
#[derive(Clone)]
pub struct Tools {
    conversation: Conversation,
    tool_router: ToolRouter<Tools>,
}

impl Tools {
    pub fn new(conversation: Conversation) -> Tools {
        static ROUTER: OnceLock<ToolRouter<Tools>> = OnceLock::new();
        Tools {
            conversation,
            tool_router: ROUTER.get_or_init(Tools::tool_router).clone(),
        }
    }

    /// Records the reads, then answers (no data leaves without its record).
    async fn logged<T>(&self, tool: &str, ids: &[String], out: T) -> Result<Json<T>, ErrorData> {
        let at = fmt_time(self.conversation.clock().now());
        super::log::record(self.conversation.store(), tool, ids, &at)
            .await
            .map_err(storage)?;
        Ok(Json(out))
    }
}

fn bad(code: &str, message: impl Into<String>) -> ErrorData {
    ErrorData::invalid_params(message.into(), Some(json!({ "error": code })))
}

fn storage(e: StoreError) -> ErrorData {
    tracing::warn!(error = %e, "an MCP tool could not read the archive");
    ErrorData::internal_error(
        "the archive could not be read right now; retry",
        Some(json!({"error": "storage_unavailable"})),
    )
}

fn not_found(id: &str) -> ErrorData {
    bad(
        "call_not_found",
        format!("no call with id {id:?} (list_calls and search_calls give the ids)"),
    )
}

/// `limit`, checked against `1..=max`, or `default`.
fn limit(v: Option<i64>, default: i64, max: i64) -> Result<i64, ErrorData> {
    match v {
        None => Ok(default),
        Some(n) if (1..=max).contains(&n) => Ok(n),
        Some(_) => Err(bad(
            "invalid_limit",
            format!("`limit` must be a whole number from 1 to {max}"),
        )),
    }
}

/// An ISO 8601 date or date-time, as the store writes times (RFC 3339, UTC, microseconds).
fn time_arg(name: &str, v: Option<&str>) -> Result<Option<String>, ErrorData> {
    let Some(s) = v.map(str::trim).filter(|s| !s.is_empty()) else {
        return Ok(None);
    };
    let t: Option<DateTime<Utc>> = DateTime::parse_from_rfc3339(s)
        .map(|d| d.with_timezone(&Utc))
        .ok()
        .or_else(|| {
            NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S")
                .ok()
                .map(|d| d.and_utc())
        })
        .or_else(|| {
            NaiveDate::parse_from_str(s, "%Y-%m-%d")
                .ok()
                .and_then(|d| d.and_hms_opt(0, 0, 0))
                .map(|d| d.and_utc())
        });
    t.map(|t| Some(fmt_time(t))).ok_or_else(|| {
        bad(
            "invalid_time",
            format!("`{name}` must be an ISO 8601 date (2026-11-12) or date and time (2026-11-12T09:00:00Z)"),
        )
    })
}

/// The FTS5 query: the query as written when it uses the syntax, else its words quoted (the
/// app's own search).
fn search_query(input: &str) -> Result<String, ErrorData> {
    let t = input.trim();
    if t.chars().count() > MAX_QUERY_CHARS {
        return Err(bad(
            "query_too_long",
            format!("the query is longer than {MAX_QUERY_CHARS} characters"),
        ));
    }
    let syntax = t.contains(['"', '*', '(', ')'])
        || t.split_whitespace()
            .any(|w| matches!(w, "OR" | "AND" | "NOT" | "NEAR"));
    if syntax {
        return Ok(t.to_string());
    }
    fts_query(t).map_err(|e| match e {
        ArchiveError::EmptyQuery => bad("empty_query", "the query has no words"),
        e => bad(e.code(), e.to_string()),
    })
}

/// A query FTS5 refused (`SQLITE_ERROR` from MATCH) rather than a failing store.
fn unparsable(e: &StoreError) -> Option<String> {
    match e {
        StoreError::Sql(sqlx::Error::Database(d)) if d.code().as_deref() == Some("1") => {
            Some(d.message().to_string())
        }
        _ => None,
    }
}

#[tool_router(router = tool_router)]
impl Tools {
    #[tool(
        name = "list_calls",
        description = "List the person's past calls (and chats with their assistant), newest \
                       first: id, title, start and end, duration, the speakers' labels and the \
                       first line of the summary when there is one. Filter by words in the \
                       title and by start time.",
        annotations(title = "List past calls", read_only_hint = true)
    )]
    async fn list_calls(
        &self,
        Parameters(a): Parameters<ListCallsArgs>,
    ) -> Result<Json<CallList>, ErrorData> {
        let limit = limit(a.limit, 10, 50)?;
        let f = ListFilter {
            words: a
                .query
                .as_deref()
                .unwrap_or("")
                .split_whitespace()
                .take(16)
                .map(str::to_string)
                .collect(),
            since: time_arg("since", a.since.as_deref())?,
            until: time_arg("until", a.until.as_deref())?,
        };
        let store = self.conversation.store();
        let (calls, more) = read::list_calls(store, &f, limit).await.map_err(storage)?;
        let ids: Vec<String> = calls.iter().map(|c| c.call_id.clone()).collect();
        self.logged("list_calls", &ids, CallList { calls, more })
            .await
    }

    #[tool(
        name = "search_calls",
        description = "Full-text search over everything kept of past calls: what was said \
                       (transcript), the insights given during calls and the chats. Returns \
                       the matching passages with their call's id and title, the time and \
                       the speaker. Use it to recall what was agreed, a number, a name or a \
                       promise; then get_transcript or get_call for the context.",
        annotations(title = "Search past calls", read_only_hint = true)
    )]
    async fn search_calls(
        &self,
        Parameters(a): Parameters<SearchCallsArgs>,
    ) -> Result<Json<SearchResults>, ErrorData> {
        let limit = limit(a.limit, 10, 50)?;
        let q = search_query(&a.query)?;
        let store = self.conversation.store();
        let rows = match store.search_shared(&q, limit + 1).await {
            Ok(r) => r,
            Err(e) => match unparsable(&e) {
                Some(why) => {
                    return Err(bad(
                        "invalid_query",
                        format!(
                            "the query could not be parsed ({why}); use plain words, \
                             \"a phrase\", OR, NOT or prefix*"
                        ),
                    ))
                }
                None => return Err(storage(e)),
            },
        };
        let more = rows.len() as i64 > limit;
        let rows = &rows[..rows.len().min(limit as usize)];
        let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
        let speakers = speakers_of(self, &ids).await.map_err(storage)?;
        let results: Vec<SearchHit> = rows
            .iter()
            .map(|r| {
                let (call_id, kind, speaker) = match r.session_id.strip_prefix(INSIGHTS_PREFIX) {
                    Some(c) if r.kind == "transcript" => (
                        c.to_string(),
                        "transcript",
                        speakers.get(&r.id).cloned().flatten(),
                    ),
                    Some(c) => (c.to_string(), "insight", Some("assistant".to_string())),
                    None => (r.session_id.clone(), "chat", Some(r.kind.clone())),
                };
                SearchHit {
                    call_id,
                    title: r.title.clone(),
                    call_started_at: r.created_at.clone(),
                    time: r.received_at.clone(),
                    kind: kind.to_string(),
                    speaker,
                    text: r.snippet.replace([HIT_OPEN, HIT_CLOSE], "**"),
                }
            })
            .collect();
        let calls: Vec<String> = results.iter().map(|h| h.call_id.clone()).collect();
        let out = SearchResults {
            query: a.query,
            results,
            more,
        };
        self.logged("search_calls", &calls, out).await
    }

    #[tool(
        name = "get_transcript",
        description = "What was said on a call, turn by turn (speaker, time, milliseconds into \
                       the call), oldest first. Read a window with from_ms/to_ms; when `more` \
                       is true, ask again with from_ms = next_from_ms.",
        annotations(title = "Read a call's transcript", read_only_hint = true)
    )]
    async fn get_transcript(
        &self,
        Parameters(a): Parameters<GetTranscriptArgs>,
    ) -> Result<Json<Transcript>, ErrorData> {
        let limit = limit(a.limit, 50, 200)?;
        let from = a.from_ms.unwrap_or(0);
        if from < 0 || a.to_ms.is_some_and(|t| t < from) {
            return Err(bad(
                "invalid_range",
                "`from_ms` must be 0 or more and `to_ms` not before it",
            ));
        }
        let store = self.conversation.store();
        let t = read::transcript(store, &a.call_id, from, a.to_ms, limit)
            .await
            .map_err(storage)?
            .ok_or_else(|| not_found(&a.call_id))?;
        let ids = vec![t.call_id.clone()];
        self.logged("get_transcript", &ids, t).await
    }

    #[tool(
        name = "get_call",
        description = "One call: title, start and end, speakers, the summary when one was \
                       asked for, the newest insights and the newest chat messages (with \
                       totals). For what was said use get_transcript.",
        annotations(title = "Read a call", read_only_hint = true)
    )]
    async fn get_call(
        &self,
        Parameters(a): Parameters<GetCallArgs>,
    ) -> Result<Json<CallDetail>, ErrorData> {
        let store = self.conversation.store();
        let c = read::call(store, &a.call_id)
            .await
            .map_err(storage)?
            .ok_or_else(|| not_found(&a.call_id))?;
        let ids = vec![c.info.call_id.clone()];
        self.logged("get_call", &ids, c).await
    }

    #[tool(
        name = "current_call",
        description = "The call going on now: its id, title and its newest transcript turns \
                       (to re-read what was just said). `call` is null when no call is going on.",
        annotations(title = "The current call", read_only_hint = true)
    )]
    async fn current_call(
        &self,
        Parameters(a): Parameters<CurrentCallArgs>,
    ) -> Result<Json<Current>, ErrorData> {
        let last = limit(a.limit, 20, 100)?;
        let c = read::current(self.conversation.store(), last)
            .await
            .map_err(storage)?;
        let ids: Vec<String> = c.call.iter().map(|c| c.call_id.clone()).collect();
        self.logged("current_call", &ids, c).await
    }
}

/// The speaker of each of `ids` (transcript turns), one read.
async fn speakers_of(
    t: &Tools,
    ids: &[i64],
) -> Result<std::collections::HashMap<i64, Option<String>>, StoreError> {
    let rows = sqlx::query(
        "SELECT id, speaker FROM messages WHERE id IN (SELECT value FROM json_each(?))",
    )
    .bind(serde_json::to_string(ids).unwrap_or_else(|_| "[]".into()))
    .fetch_all(t.conversation.store().reads())
    .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// The arguments of `name`, checked before the tool runs: malformed ones are a JSON-RPC error
/// (`-32602`), not a tool result (the SDK's own answer).
fn check_args(name: &str, args: Option<&JsonObject>) -> Result<(), ErrorData> {
    let v = serde_json::Value::Object(args.cloned().unwrap_or_default());
    let checked = match name {
        "list_calls" => serde_json::from_value::<ListCallsArgs>(v).map(drop),
        "search_calls" => serde_json::from_value::<SearchCallsArgs>(v).map(drop),
        "get_transcript" => serde_json::from_value::<GetTranscriptArgs>(v).map(drop),
        "get_call" => serde_json::from_value::<GetCallArgs>(v).map(drop),
        "current_call" => serde_json::from_value::<CurrentCallArgs>(v).map(drop),
        // An unknown tool: the router's own error.
        _ => Ok(()),
    };
    checked.map_err(|e| {
        bad(
            "invalid_arguments",
            format!("the arguments of {name} are not valid: {e}"),
        )
    })
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Tools {
    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        check_args(&request.name, request.arguments.as_ref())?;
        let tcc = ToolCallContext::new(self, request, context);
        self.tool_router.call(tcc).await
    }

    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new(
                "stagewhisper",
                env!("CARGO_PKG_VERSION"),
            ))
            .with_instructions(INSTRUCTIONS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_iso_dates_or_date_times() {
        let t = |s: &str| time_arg("since", Some(s)).map_err(|e| e.message.to_string());
        assert_eq!(
            t("2026-11-12").unwrap().unwrap(),
            "2026-11-12T00:00:00.000000Z"
        );
        assert_eq!(
            t("2026-11-12T10:00:00+01:00").unwrap().unwrap(),
            "2026-11-12T09:00:00.000000Z"
        );
        assert_eq!(
            t("2026-11-12T09:30:00").unwrap().unwrap(),
            "2026-11-12T09:30:00.000000Z"
        );
        assert!(t("yesterday").unwrap_err().contains("ISO 8601"));
        assert_eq!(time_arg("until", Some("  ")).unwrap(), None);
    }

    #[test]
    fn plain_words_are_quoted_and_syntax_is_kept() {
        assert_eq!(
            search_query("price agreed").unwrap(),
            "\"price\" \"agreed\"*"
        );
        assert_eq!(
            search_query("what's 10:30?").unwrap(),
            "\"what\" \"s\" \"10\" \"30\"*"
        );
        assert_eq!(search_query("price OR cost").unwrap(), "price OR cost");
        assert_eq!(search_query("\"42 walruses\"").unwrap(), "\"42 walruses\"");
        assert!(search_query(" ?! ").is_err());
        assert!(search_query(&"x".repeat(MAX_QUERY_CHARS + 1)).is_err());
    }

    #[test]
    fn malformed_arguments_are_invalid_params() {
        let args = |v: serde_json::Value| v.as_object().cloned();
        let e = check_args("get_call", args(json!({"call_id": 5})).as_ref()).unwrap_err();
        assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        assert!(check_args("get_call", None).is_err());
        assert!(check_args("current_call", None).is_ok());
        assert!(check_args("list_calls", args(json!({"limit": 5})).as_ref()).is_ok());
    }
}
