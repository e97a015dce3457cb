-- Permission cards: a message of kind 'permission' (a tool of the assistant waits for the user's
-- Allow / Deny). Its fields live in `permission`, a JSON object
-- {request_id, tool, input_preview, state: pending|allow|deny|expired, resolver}; settling the
-- card rewrites that column in place.
--
-- SQLite cannot change a CHECK constraint in place: the table is rebuilt (as in 0004) with the
-- new kind and column, its rows and indexes kept.
CREATE TABLE messages_v5 (
    id              INTEGER PRIMARY KEY,
    session_id      TEXT NOT NULL,
    kind            TEXT NOT NULL CHECK (kind IN ('user', 'assistant', 'notice', 'error', 'transcript', 'permission')),
    text            TEXT NOT NULL,
    message_id      TEXT,
    task_id         TEXT,
    user_message_id TEXT,
    scope           TEXT,
    content_key     TEXT,
    error_code      TEXT,
    occurred_at     TEXT,
    received_at     TEXT NOT NULL,
    sort_key        INTEGER NOT NULL,
    draft           INTEGER NOT NULL DEFAULT 0,
    draft_key       TEXT,
    hidden          INTEGER NOT NULL DEFAULT 0,
    speaker         TEXT,
    delivery        TEXT,
    delivery_error  TEXT,
    logged          INTEGER NOT NULL DEFAULT 0,
    permission      TEXT
);
INSERT INTO messages_v5 (id, session_id, kind, text, message_id, task_id, user_message_id,
        scope, content_key, error_code, occurred_at, received_at, sort_key, draft, draft_key,
        hidden, speaker, delivery, delivery_error, logged)
    SELECT id, session_id, kind, text, message_id, task_id, user_message_id, scope, content_key,
        error_code, occurred_at, received_at, sort_key, draft, draft_key, hidden, speaker,
        delivery, delivery_error, logged
    FROM messages;
DROP TABLE messages;
ALTER TABLE messages_v5 RENAME TO messages;
CREATE INDEX messages_in_order ON messages (session_id, sort_key, id);
CREATE INDEX messages_pending ON messages (id) WHERE delivery = 'pending';
CREATE INDEX messages_permission ON messages (json_extract(permission, '$.request_id'))
    WHERE permission IS NOT NULL;
