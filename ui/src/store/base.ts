// The store, part base: its state (fields), listeners, conversations and unread counts.
// (One class in layers: base.ts → live.ts → load.ts; the rules are at the top of ../store.ts.)

import type { Assistant, Audio, AudioLevels, Session, Tunnel } from '../types';
import { INSIGHTS_PREFIX, timeMicros, compareIds } from './norm';
import type { Conversation, Change } from './types';

export abstract class StoreBase {
  cursor = 0;
  /** Live typing events applied so far: the version of a typing indicator (see the top). */
  liveSeq = 0;
  readonly sessions = new Map<string, Session>();
  protected sessionVer = new Map<string, number>();
  protected deleted = new Set<string>();
  protected convs = new Map<string, Conversation>();
  protected insightsOf = new Map<string, string>(); // insights session id → chat session id
  protected listeners = new Set<(c: Change) => void>();
  /** The conversation whose Insights tab is on screen (its new insights are not "unread"). */
  protected insightsOpen: string | null = null;
  /** The assistant link as last reported (null until the first answer). */
  assistant: Assistant | null = null;
  protected assistantJson = '';
  /** Cursor of the last `assistant_status` event applied. */
  protected assistantStatusVer = -1;
  /** The callback tunnel as last reported (null until the first answer). */
  tunnel: Tunnel | null = null;
  protected tunnelJson = '';
  /** `GET /api/audio` as last answered, patched by `audio_status` events (null: not known). */
  audio: Audio | null = null;
  /** Why `GET /api/audio` cannot be answered (`503 audio_unavailable`: this build cannot hear). */
  audioUnavailable: string | null = null;
  protected audioJson = '';
  /** Counts `audio_status` events (they have no cursor): a snapshot asked for before one keeps its status. */
  audioStatusSeq = 0;
  /** The latest levels (null: none for `LEVEL_STALE_MS`). */
  levels: AudioLevels | null = null;
  protected levelTimer: ReturnType<typeof setTimeout> | undefined;
  protected partialTimer: ReturnType<typeof setTimeout> | undefined;
  protected partialDue = Infinity;

  subscribe(fn: (c: Change) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  protected emit(c: Change): void {
    for (const fn of this.listeners) fn(c);
  }

  conv(sessionId: string): Conversation | undefined {
    return this.convs.get(sessionId);
  }

  /** The conversation of `sessionId`, created empty (not loaded) if new. */
  ensureConv(sessionId: string): Conversation {
    let c = this.convs.get(sessionId);
    if (!c) {
      c = {
        sessionId,
        loaded: false,
        messages: [],
        byId: new Map(),
        insights: [],
        insightById: new Map(),
        typing: new Map(),
        insightTyping: new Map(),
        unread: new Set(),
        transcript: [],
        transcriptById: new Map(),
        transcriptLoaded: false,
        ver: new Map(),
        olderPath: null,
        newer: [],
        outside: new Map(),
        insightsOlder: null,
        transcriptOlder: null,
        partials: new Map(),
      };
      this.convs.set(sessionId, c);
    }
    return c;
  }

  /** Sessions newest first. */
  sessionList(): Session[] {
    return [...this.sessions.values()].sort(
      (a, b) => (timeMicros(b.created_at) || 0) - (timeMicros(a.created_at) || 0) || compareIds(b.session_id, a.session_id),
    );
  }

  /** The chat session an (`insights:` or chat) session id belongs to, and whether it was insights. */
  protected route(sessionId: string): { chat: string; insights: boolean } {
    const mapped = this.insightsOf.get(sessionId);
    if (mapped) return { chat: mapped, insights: true };
    if (sessionId.startsWith(INSIGHTS_PREFIX)) return { chat: sessionId.slice(INSIGHTS_PREFIX.length), insights: true };
    return { chat: sessionId, insights: false };
  }

  unreadCount(sessionId: string | null): number {
    if (!sessionId) return 0;
    return this.convs.get(sessionId)?.unread.size ?? 0;
  }

  /** The Insights tab of `sessionId` is on screen (or none is, with `null`): its unread clears. */
  setInsightsOpen(sessionId: string | null): void {
    this.insightsOpen = sessionId;
    if (sessionId) {
      const c = this.convs.get(sessionId);
      if (c && c.unread.size) {
        c.unread.clear();
        this.emit({ kind: 'unread', sessionId });
      }
    }
  }
}
