-- The user's own assistant reads past calls over MCP (src/mcp/).
--
-- `sessions.private`: a call (or chat) marked private is never returned by an MCP tool.
ALTER TABLE sessions ADD COLUMN private INTEGER NOT NULL DEFAULT 0;

-- The access log: one row per call whose data an MCP tool call returned (`tool`: the tool's
-- name; `at`: RFC 3339). Kept to the newest rows (src/mcp/log.rs trims it). A plain rowid, as
-- every table since 0004: the trim removes the oldest, so new ids still only grow.
CREATE TABLE mcp_reads (
    id         INTEGER PRIMARY KEY,
    session_id TEXT NOT NULL,
    tool       TEXT NOT NULL,
    at         TEXT NOT NULL
);
CREATE INDEX mcp_reads_by_session ON mcp_reads (session_id, id);
