-- Full-text search over every call's chat, insights and transcript: an FTS5 index of the
-- `messages` rows people read (kind user, assistant or transcript; final, not hidden). It is an
-- external-content table (the text lives once, in `messages`; `snippet()` reads it from there by
-- rowid) kept by triggers, so every write of a row updates the index inside the same
-- transaction, and deleting a session's rows takes them out of the index with them.
--
-- Which rows are indexed is the same condition in every trigger below: an external-content index
-- is told exactly what it holds ('delete' with the old text), so the three must agree. Never run
-- the 'rebuild' command on it (that would index every row, drafts and notices too); the INSERT at
-- the end is the rebuild for this condition.
CREATE VIRTUAL TABLE messages_fts USING fts5(
    text,
    content = 'messages',
    content_rowid = 'id',
    tokenize = 'unicode61 remove_diacritics 2'
);

CREATE TRIGGER messages_fts_insert AFTER INSERT ON messages
WHEN new.kind IN ('user', 'assistant', 'transcript') AND new.draft = 0 AND new.hidden = 0
BEGIN
    INSERT INTO messages_fts (rowid, text) VALUES (new.id, new.text);
END;

CREATE TRIGGER messages_fts_delete AFTER DELETE ON messages
WHEN old.kind IN ('user', 'assistant', 'transcript') AND old.draft = 0 AND old.hidden = 0
BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;

-- The writer rewrites every mutable column of a row (a delivery update too): only a change of
-- what is indexed touches the index.
CREATE TRIGGER messages_fts_update AFTER UPDATE ON messages
WHEN old.text IS NOT new.text OR old.kind IS NOT new.kind OR old.draft IS NOT new.draft
    OR old.hidden IS NOT new.hidden
BEGIN
    INSERT INTO messages_fts (messages_fts, rowid, text)
        SELECT 'delete', old.id, old.text
        WHERE old.kind IN ('user', 'assistant', 'transcript') AND old.draft = 0 AND old.hidden = 0;
    INSERT INTO messages_fts (rowid, text)
        SELECT new.id, new.text
        WHERE new.kind IN ('user', 'assistant', 'transcript') AND new.draft = 0 AND new.hidden = 0;
END;

-- The rows of an existing database.
INSERT INTO messages_fts (rowid, text)
    SELECT id, text FROM messages
    WHERE kind IN ('user', 'assistant', 'transcript') AND draft = 0 AND hidden = 0;
