-- Sessions: a chat (optionally a call) or the insights session of a call.
CREATE TABLE sessions (
    session_id   TEXT PRIMARY KEY NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('chat', 'insights')),
    is_call      INTEGER NOT NULL DEFAULT 0,
    call_id      TEXT,               -- for kind = 'insights': the chat session of the call
    title        TEXT,
    created_at   TEXT NOT NULL,
    ended_at     TEXT,
    deleted_at   TEXT                -- tombstone: callbacks get session_ended
);

-- Every entry of a conversation (chat or insights).
CREATE TABLE messages (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id      TEXT NOT NULL,
    kind            TEXT NOT NULL CHECK (kind IN ('user', 'assistant', 'notice', 'error', 'transcript')),
    text            TEXT NOT NULL,
    message_id      TEXT,            -- dedupe key: the assistant's message_id or a derived one
    task_id         TEXT,
    user_message_id TEXT,
    scope           TEXT,            -- user_message_id, else task_id
    content_key     TEXT,            -- hash of (session, scope, kind, cleaned text): near-identical re-sends
    error_code      TEXT,
    occurred_at     TEXT,
    received_at     TEXT NOT NULL,
    sort_key        INTEGER NOT NULL,
    draft           INTEGER NOT NULL DEFAULT 0,
    draft_key       TEXT,            -- while a draft: 'task:<task_id>' (stream) or 'edit:<scope>' (cursor edits)
    hidden          INTEGER NOT NULL DEFAULT 0,
    speaker         TEXT,            -- transcript turns
    delivery        TEXT,            -- outgoing (user, transcript): pending | sent | failed
    delivery_error  TEXT             -- why the last delivery failed (JSON {code, message})
);
-- Dedupe is decided in memory by the writer (from these columns); the unique index is the
-- last line of defence. content_key needs no index: it is only read per session.
CREATE UNIQUE INDEX messages_by_message_id ON messages (session_id, message_id);
CREATE INDEX messages_in_order ON messages (session_id, sort_key, id);
-- The assistant link's queue: outgoing entries not yet delivered.
CREATE INDEX messages_pending ON messages (id) WHERE delivery = 'pending';

-- The append-only change log; its id is the cursor of /api/events.
CREATE TABLE events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id  TEXT NOT NULL,
    data        TEXT NOT NULL
);
