-- The search index (0006) is fed in batches instead of inside every commit.
--
-- With the insert trigger, every transaction that added a message wrote its own FTS5 segment:
-- about two thirds of the bytes each acknowledged callback wrote. Now the writer adds the new
-- rows to the index in batches, in transactions of their own (store/writer.rs, `index_batch`),
-- and `search_indexed.upto` says how far it got: every row people read (kind user, assistant
-- or transcript; final, not hidden) with `id <= upto` is in the index, none above it is. A
-- search reads the index and the rows above `upto` directly (store/search.rs), so a message is
-- found as soon as its commit is acknowledged; after a crash the writer carries on from `upto`.
--
-- Rows at or below `upto` still keep the index right in the transaction that changes them (a
-- draft that settles, a session deleted): the triggers below, limited to those rows. Rows above
-- `upto` are indexed as they are when the batch reaches them.
CREATE TABLE search_indexed (
    only  INTEGER PRIMARY KEY NOT NULL CHECK (only = 1),
    upto  INTEGER NOT NULL
);
-- Every row of an existing database is indexed (by the 0006 triggers).
INSERT INTO search_indexed (only, upto) SELECT 1, COALESCE(MAX(id), 0) FROM messages;

DROP TRIGGER messages_fts_insert;
DROP TRIGGER messages_fts_delete;
DROP TRIGGER messages_fts_update;

-- Ids are handed out above every stored row (and above `id_floors`), so a new row is never at
-- or below `upto`; this trigger only keeps the rule true if one ever were.
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages
WHEN new.kind IN ('user', 'assistant', 'transcript') AND new.draft = 0 AND new.hidden = 0
    AND new.id <= (SELECT upto FROM search_indexed)
BEGIN
    INSERT INTO messages_fts (rowid, text) VALUES (new.id, new.text);
END;

CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages
WHEN old.kind IN ('user', 'assistant', 'transcript') AND old.draft = 0 AND old.hidden = 0
    AND old.id <= (SELECT upto FROM search_indexed)
BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;

CREATE TRIGGER messages_fts_update AFTER UPDATE ON messages
WHEN (old.text IS NOT new.text OR old.kind IS NOT new.kind OR old.draft IS NOT new.draft
        OR old.hidden IS NOT new.hidden)
    AND old.id <= (SELECT upto FROM search_indexed)
BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, text)
        SELECT 'delete', old.id, old.text
        WHERE old.kind IN ('user', 'assistant', 'transcript') AND old.draft = 0 AND old.hidden = 0;
    INSERT INTO messages_fts (rowid, text)
        SELECT new.id, new.text
        WHERE new.kind IN ('user', 'assistant', 'transcript') AND new.draft = 0 AND new.hidden = 0;
END;
