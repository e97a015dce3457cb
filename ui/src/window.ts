// The chat's window of loaded messages: a conversation keeps one contiguous run of its history
// in memory (the pages near what is on screen plus a cache), never all of it.
//
// - It opens on the newest page; older pages come as the user scrolls up (`olderPath`), and once
//   the window holds more than `MESSAGE_WINDOW` messages, pages at the far end are dropped.
// - A dropped run at the newer end is remembered by its first message (`Conversation.newer`,
//   oldest first): the page before the next remembered message (or the newest page, for the last
//   one) brings it back, through `GET …/messages?limit=N&before=ID` — the same cursor paging.
//   A run dropped at the older end is simply `olderPath` again, from the window's first message.
// - Events for messages outside the window (past a dropped end) are not put in the list (that
//   would leave a gap); they are kept aside with their cursor until a page covering them lands,
//   so a page requested before such an event never rolls it back.

/** Messages per page (`GET …/messages?limit=N&before=ID`). */
export const MESSAGE_PAGE = 200;
/** The most messages a conversation keeps loaded (its window); beyond it, far pages are dropped. */
export const MESSAGE_WINDOW = 3000;

/** The path of the page of messages before `before` (none: the newest page). */
export function messagesPath(sessionId: string, before?: string | number): string {
  const base = `/api/sessions/${encodeURIComponent(sessionId)}/messages?limit=${MESSAGE_PAGE}`;
  return before === undefined ? base : `${base}&before=${encodeURIComponent(String(before))}`;
}

/** Insights per page (`GET …/insights?limit=N&before=ID`); the Insights tab opens on the newest. */
export const INSIGHT_PAGE = 100;
/** Transcript turns per page (`GET /api/calls/{id}/transcript?limit=N&before=ID`). */
export const TRANSCRIPT_PAGE = 200;

/** The newest page of a call's insights or transcript. */
export function listPath(sessionId: string, list: 'insights' | 'transcript'): string {
  const enc = encodeURIComponent(sessionId);
  return list === 'insights' ? `/api/sessions/${enc}/insights?limit=${INSIGHT_PAGE}` : `/api/calls/${enc}/transcript?limit=${TRANSCRIPT_PAGE}`;
}
