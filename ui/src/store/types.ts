// The store's shapes: what changed (`Change`), one conversation's state, a loaded snapshot.

import type { Insight, Message, PartialTurn, Session, SwEvent, TranscriptTurn, Typing } from '../types';

export type Change =
  | { kind: 'sessions' }
  | { kind: 'session-created'; session: Session }
  | { kind: 'session-deleted'; sessionId: string }
  | { kind: 'message-insert'; sessionId: string; index: number; message: Message }
  | { kind: 'message-update'; sessionId: string; index: number; message: Message; prev: Message }
  | { kind: 'message-move'; sessionId: string; from: number; to: number; message: Message }
  | { kind: 'messages-reset'; sessionId: string }
  /** `count` older messages were put in front of the list (a page loaded while scrolling up). */
  | { kind: 'messages-prepended'; sessionId: string; count: number }
  /** `count` newer messages were put at the end of the list (a dropped page loaded again). */
  | { kind: 'messages-appended'; sessionId: string; count: number }
  /** Far messages left the window: `front` from its start, `back` from its end. */
  | { kind: 'messages-dropped'; sessionId: string; front: number; back: number }
  | { kind: 'insights'; sessionId: string; added: Insight | null }
  | { kind: 'typing'; sessionId: string; insights: boolean }
  | { kind: 'unread'; sessionId: string }
  | { kind: 'transcript'; sessionId: string; added: TranscriptTurn | null }
  /** The assistant link changed; `fromEvent`: through an `assistant_status` event (a patch). */
  | { kind: 'assistant'; fromEvent: boolean }
  /** The callback tunnel changed (`/api/tunnel…` answers). */
  | { kind: 'tunnel' }
  /** What the app reports about hearing the call changed; `fromEvent`: an `audio_status` event. */
  | { kind: 'audio'; fromEvent: boolean }
  /** New audio levels (about ten a second while listening or while the meters are on). */
  | { kind: 'levels' }
  /** A call's partial turns changed (one came, was replaced by its final, or went stale). */
  | { kind: 'partials'; sessionId: string }
  /** A live-only event (`live: true`: a partial transcript, an audio level), as it came. */
  | { kind: 'live'; event: SwEvent };

export interface Conversation {
  sessionId: string;
  /** A snapshot of this conversation has been merged (the lists are complete). */
  loaded: boolean;
  messages: Message[];
  byId: Map<string, Message>;
  /** Visible insights, newest first. */
  insights: Insight[];
  /** Every insight seen, hidden ones included. */
  insightById: Map<string, Insight>;
  typing: Map<string, Typing>;
  insightTyping: Map<string, Typing>;
  unread: Set<string>;
  /** The call's transcript turns, oldest first. */
  transcript: TranscriptTurn[];
  transcriptById: Map<string, TranscriptTurn>;
  /** A transcript snapshot has been merged (the list is complete). */
  transcriptLoaded: boolean;
  /** Entity key → cursor of the last event that touched it. */
  ver: Map<string, number>;
  /**
   * The path of the next older page of messages (`GET …/messages?limit=N&before=ID`); null when
   * the list reaches the first message (or was loaded whole).
   */
  olderPath: string | null;
  /**
   * The window's newer end was dropped: the first message of each dropped run, oldest first
   * (empty: the window reaches the newest message). See `window.ts`.
   */
  newer: Message[];
  /** Events for messages outside the window, with their cursor (see `window.ts`). */
  outside: Map<string, { m: Message; ver: number }>;
  /** The path of the next older page of insights / transcript turns; null: none (or loaded whole). */
  insightsOlder: string | null;
  transcriptOlder: string | null;
  /** Turns being heard (live only), by `turn_id`, in the order they began. */
  partials: Map<string, PartialTurn>;
}

export interface Snapshot {
  messages?: unknown[];
  /**
   * `messages` is the newest page (`GET …/messages?limit=N`): the path of the page before it
   * (null: it reaches the first message). Absent: `messages` is the whole list.
   */
  olderPath?: string | null;
  insights?: unknown[];
  /** `insights` is the newest page: the path of the page before it (absent: the whole list). */
  insightsOlderPath?: string | null;
  typing?: unknown[];
  /** The store's `liveSeq` when `typing` was requested: live typing events after it win. */
  typingAt?: number;
  transcript?: unknown[];
  /** `transcript` is the newest page: the path of the page before it (absent: the whole list). */
  transcriptOlderPath?: string | null;
}
