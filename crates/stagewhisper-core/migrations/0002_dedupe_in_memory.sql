-- Dedupe by (session_id, message_id) is decided by the writer from its in-memory index of each
-- session, rebuilt from these rows whenever a session is loaded; no query reads by message_id.
-- The unique index only cost every insert a B-tree write (about a tenth of ingest throughput).
-- A row whose id already exists still fails its commit (primary key), so nothing is dropped
-- silently: the batch is answered 503 and the state reloads.
DROP INDEX IF EXISTS messages_by_message_id;
