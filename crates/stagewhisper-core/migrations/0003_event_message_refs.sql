-- A `message_added` event of a row that never changes afterwards (a final assistant message,
-- notice or error) is logged as a reference: `data` keeps only its type and session, and
-- `message_row` names the row; reading the log rebuilds the same event from the row. Halves the
-- bytes each accepted callback writes. Every other event keeps its full JSON in `data`.
ALTER TABLE events ADD COLUMN message_row INTEGER;
