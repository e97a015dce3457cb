//! The access log: which call's data each tool call returned, and when. Written through the
//! store's one writer (a side write, committed before the tool's answer goes out: no data
//! leaves without its record), read on the read pool. The newest [`KEEP`] rows are kept.

use crate::store::{Stmt, Store, StoreError};
use serde::Serialize;
use sqlx::Row;
use utoipa::ToSchema;

/// Rows kept (older ones go as new ones come).
pub const KEEP: i64 = 10_000;
/// The most rows one read answers.
pub const MAX_LIST: i64 = 200;

/// One record: a tool returned this call's data.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct McpRead {
    /// The call (chat session) id.
    pub session_id: String,
    /// Its title (`null`: untitled).
    pub title: Option<String>,
    /// `list_calls`, `search_calls`, `get_transcript`, `get_call` or `current_call`.
    pub tool: String,
    /// When (RFC 3339).
    pub at: String,
}

/// Records that `tool` returned the data of `ids` (each once) at `at`; waits for the commit.
pub async fn record(store: &Store, tool: &str, ids: &[String], at: &str) -> Result<(), StoreError> {
    let mut seen = std::collections::BTreeSet::new();
    let mut stmts: Vec<Stmt> = ids
        .iter()
        .filter(|id| seen.insert(id.as_str()))
        .map(|id| {
            Stmt::new("INSERT INTO mcp_reads (session_id, tool, at) VALUES (?, ?, ?)")
                .bind(id.as_str())
                .bind(tool)
                .bind(at)
        })
        .collect();
    if stmts.is_empty() {
        return Ok(());
    }
    stmts.push(
        Stmt::new("DELETE FROM mcp_reads WHERE id <= (SELECT max(id) FROM mcp_reads) - ?")
            .bind(KEEP),
    );
    store.write(stmts).await.map(|_| ())
}

/// The newest records, of one session or of all (live sessions only), newest first.
pub async fn list(
    store: &Store,
    session_id: Option<&str>,
    limit: i64,
) -> Result<Vec<McpRead>, StoreError> {
    let rows = sqlx::query(
        "SELECT r.session_id, s.title, r.tool, r.at FROM mcp_reads r \
         JOIN sessions s ON s.session_id = r.session_id \
         WHERE s.deleted_at IS NULL AND (?1 IS NULL OR r.session_id = ?1) \
         ORDER BY r.id DESC LIMIT ?2",
    )
    .bind(session_id)
    .bind(limit.clamp(1, MAX_LIST))
    .fetch_all(store.reads())
    .await?;
    Ok(rows
        .iter()
        .map(|r| McpRead {
            session_id: r.get(0),
            title: r.get(1),
            tool: r.get(2),
            at: r.get(3),
        })
        .collect())
}
