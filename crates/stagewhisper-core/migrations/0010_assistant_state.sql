-- What the assistant outbox remembers across restarts, moved here from `assistant_state.json`
-- (an app that finds that file moves its records in at start and removes it), so that the
-- store's one writer writes it with the conversation's commits.
--
-- `outbox_notices`: each call's once-only notices to the assistant (`prelude`: the call's
-- system prelude before its first transcript turn; `call_end`: "the call ended"), each with
-- the task id chosen before its first attempt and kept across retries and restarts. `state`:
-- pending, sent, failed or skipped; `created_ms`: Unix milliseconds of the app's clock.
CREATE TABLE outbox_notices (
    call_id    TEXT NOT NULL,
    notice     TEXT NOT NULL CHECK (notice IN ('prelude', 'call_end')),
    task_id    TEXT NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('pending', 'sent', 'failed', 'skipped')),
    created_ms INTEGER NOT NULL,
    PRIMARY KEY (call_id, notice)
) WITHOUT ROWID;

-- The incoming kind's `GET /v1/events` streams: the `Last-Event-ID` of each assistant session
-- (`<chat>` or `insights:<chat>`) and its last activity (Unix milliseconds).
CREATE TABLE stream_cursors (
    session_id       TEXT PRIMARY KEY NOT NULL,
    last_event_id    TEXT,
    last_activity_ms INTEGER NOT NULL
) WITHOUT ROWID;
