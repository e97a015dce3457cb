-- Dedupe no longer keeps every key of a session in memory: the writer holds a window of each
-- session's recent keys and a Bloom filter of the older ones, and asks the database only when
-- the filter says "maybe" (a retry of an old message, or about one new message in a thousand).
-- These indexes make that question a point look-up, and let the filter be rebuilt from the
-- index alone (no row is read) when a session's index is loaded. Not unique: the in-memory
-- decision is the rule, as before (see 0002).
CREATE INDEX messages_dedupe_id ON messages (session_id, message_id)
    WHERE message_id IS NOT NULL;
CREATE INDEX messages_dedupe_content ON messages (session_id, content_key)
    WHERE content_key IS NOT NULL;
