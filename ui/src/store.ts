// The UI's state, fed only by the event stream plus snapshots loaded through the control API.
//
// - `cursor` is the id of the last applied event; an event whose id is ≤ the cursor is ignored,
//   so replays and overlapping catch-ups are harmless (idempotent application).
// - Every entity remembers the cursor of the event that last touched it (its version). A snapshot
//   is merged with the cursor the store had when the snapshot was requested: an entity changed by
//   a later event keeps the event's state (that event is newer or will be followed by one), so a
//   snapshot racing the live stream never rolls anything back.
// - Messages are kept ordered by (`sort_key`, `id`); drafts are updated in place.
// - Insights: newest first; a `none` reply (or one flagged `hidden`) is never listed, nor is a draft
//   that could still turn out to be `none`.
// - A call's transcript: oldest first, from `transcript_added` / `transcript_updated` and
//   `GET /api/calls/{id}/transcript`; turns carry their delivery state like user messages.
// - The assistant link (`GET /api/assistant` and the answers of its other routes): the latest
//   snapshot, patched by `assistant_status` events (`{status, detail, checked_at}`); a snapshot
//   requested before the last such event keeps that event's status.
// - Typing indicators are live-only events (`live: true`, no id: never in the log). Their version
//   is `liveSeq`, the count of live typing events applied; a view reads the current indicators
//   from `GET /api/sessions/{id}/typing` whenever its stream (re)connects, merged with the
//   `liveSeq` it had when it asked (`Snapshot.typingAt`). A logged typing event (written by an
//   older version, replayed from the log) is history and changes nothing.
// - Hearing the call (audio.ts): `GET /api/audio` (or why it cannot be read), patched by
//   `audio_status` events the same way; the latest `audio_level`; each call's partial turns from
//   `transcript_partial` events (live only, no cursor: one per open turn, dropped by its
//   `final: true` or after `PARTIAL_STALE_MS` without news).

export type { Change, Conversation, Snapshot } from './store/types';

// The normalisation and order helpers, and the store itself, live in ./store/.
export { timeMicros, normMessage, normDelivery, normDeliveryError, normTranscript, normAssistant, deliveryView, normInsight, normSession, normTyping, isNoneText, insightVisible, compareIds, compareMessages, compareTurns, compareInsights, normTunnel, tunnelActive } from './store/norm';
export type { DeliveryView } from './store/norm';
export { Store } from './store/load';
