-- A message's purpose, when it is not an ordinary one (NULL). `summary_request`: the user's
-- "Summarise this call", whose text carries the whole transcript for the assistant. People see
-- it as one short line, and search leaves it out: its words are the transcript's, already found
-- as transcript turns, and a hit in a wall of pasted text helps nobody.
ALTER TABLE messages ADD COLUMN purpose TEXT;

DROP TRIGGER messages_fts_insert;
DROP TRIGGER messages_fts_delete;
DROP TRIGGER messages_fts_update;

-- As in 0009, with rows that have a purpose left out of the index.
CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages
WHEN new.kind IN ('user', 'assistant', 'transcript') AND new.draft = 0 AND new.hidden = 0
    AND new.purpose IS NULL AND new.id <= (SELECT upto FROM search_indexed)
BEGIN
    INSERT INTO messages_fts (rowid, text) VALUES (new.id, new.text);
END;

CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages
WHEN old.kind IN ('user', 'assistant', 'transcript') AND old.draft = 0 AND old.hidden = 0
    AND old.purpose IS NULL AND old.id <= (SELECT upto FROM search_indexed)
BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;

CREATE TRIGGER messages_fts_update AFTER UPDATE ON messages
WHEN (old.text IS NOT new.text OR old.kind IS NOT new.kind OR old.draft IS NOT new.draft
        OR old.hidden IS NOT new.hidden OR old.purpose IS NOT new.purpose)
    AND old.id <= (SELECT upto FROM search_indexed)
BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, text)
        SELECT 'delete', old.id, old.text
        WHERE old.kind IN ('user', 'assistant', 'transcript') AND old.draft = 0 AND old.hidden = 0
            AND old.purpose IS NULL;
    INSERT INTO messages_fts (rowid, text)
        SELECT new.id, new.text
        WHERE new.kind IN ('user', 'assistant', 'transcript') AND new.draft = 0 AND new.hidden = 0
            AND new.purpose IS NULL;
END;
