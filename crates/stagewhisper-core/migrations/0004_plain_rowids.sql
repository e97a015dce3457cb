-- One id sequence for messages and events, handed out by the writer (from the high-water marks
-- below, read once at start), and rows that are their own event.
--
-- AUTOINCREMENT made SQLite read and rewrite `sqlite_sequence` in every insert statement: one
-- more B-tree page in every commit. The tables are rebuilt with plain integer keys; `id_floors`
-- keeps the marks instead: written only when rows are deleted (so a deleted last id is never
-- handed out again), seeded here from `sqlite_sequence`.
--
-- `messages.logged = 1`: the row is also its own `message_added` event, with the row's id as the
-- event id (a final assistant message, a notice, an error: rows that never change afterwards).
-- Such an event has no row in `events`; the log is read as `events` merged with these rows.
-- References logged the 0003 way (`events.message_row`) are still read.
CREATE TABLE id_floors (
    name  TEXT PRIMARY KEY NOT NULL,   -- 'messages' | 'events'
    next  INTEGER NOT NULL             -- no id below this is handed out
);
INSERT INTO id_floors (name, next)
    SELECT name, seq + 1 FROM sqlite_sequence WHERE name IN ('messages', 'events');

CREATE TABLE messages_plain (
    id              INTEGER PRIMARY KEY,
    session_id      TEXT NOT NULL,
    kind            TEXT NOT NULL CHECK (kind IN ('user', 'assistant', 'notice', 'error', 'transcript')),
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
    logged          INTEGER NOT NULL DEFAULT 0
);
INSERT INTO messages_plain (id, session_id, kind, text, message_id, task_id, user_message_id,
        scope, content_key, error_code, occurred_at, received_at, sort_key, draft, draft_key,
        hidden, speaker, delivery, delivery_error)
    SELECT id, session_id, kind, text, message_id, task_id, user_message_id, scope, content_key,
        error_code, occurred_at, received_at, sort_key, draft, draft_key, hidden, speaker,
        delivery, delivery_error
    FROM messages;
DROP TABLE messages;
ALTER TABLE messages_plain RENAME TO messages;
CREATE INDEX messages_in_order ON messages (session_id, sort_key, id);
CREATE INDEX messages_pending ON messages (id) WHERE delivery = 'pending';

CREATE TABLE events_plain (
    id           INTEGER PRIMARY KEY,
    session_id   TEXT NOT NULL,
    data         TEXT NOT NULL,
    message_row  INTEGER
);
INSERT INTO events_plain (id, session_id, data, message_row)
    SELECT id, session_id, data, message_row FROM events;
DROP TABLE events;
ALTER TABLE events_plain RENAME TO events;
