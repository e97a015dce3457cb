-- When a stored message's text was last replaced (RFC 3339, as `received_at`), NULL while it is
-- as first stored. A reply streamed into its row (a draft growing, then settling into its final
-- text) has the time its text last changed; `received_at` stays the time it first appeared.
-- Search needs nothing new: the index follows `text` already (migration 0011's triggers).
ALTER TABLE messages ADD COLUMN edited_at TEXT;
