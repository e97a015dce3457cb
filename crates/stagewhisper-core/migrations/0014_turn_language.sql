-- The language a transcript turn was heard in (ISO-639-1, when the engine tells it: Whisper
-- does); NULL for every other row and for turns of engines that do not say.
ALTER TABLE messages ADD COLUMN language TEXT;
