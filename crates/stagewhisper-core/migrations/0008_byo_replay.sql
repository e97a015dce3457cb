-- The BYO replay guard: every envelope `message_id` the desktop accepted from a plugin, so a
-- replayed envelope is refused also after a restart. Rows older than the guard's retention
-- (7 days) are pruned; `seen_at_ms` is Unix milliseconds of the app's clock.
CREATE TABLE byo_replay (
    message_id TEXT PRIMARY KEY NOT NULL,
    seen_at_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX byo_replay_seen ON byo_replay (seen_at_ms);
