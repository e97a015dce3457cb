// The store, part load: snapshots and pages loaded through the API, merged by version; the conversation window.
// (One class in layers: base.ts → live.ts → load.ts; the rules are at the top of ../store.ts.)

import type { Insight, Message, TranscriptTurn, Typing } from '../types';
import { MESSAGE_PAGE, MESSAGE_WINDOW, messagesPath } from '../window';
import { normMessage, normTranscript, normInsight, normSession, normTyping, insightVisible, compareMessages, compareTurns, compareInsights, fromOutside, pruneOutside } from './norm';
import type { Conversation, Snapshot } from './types';
import { StoreLive } from './live';

export class Store extends StoreLive {

  // ---- snapshots ------------------------------------------------------------------------------

  /** Merges `GET /api/sessions`, requested when the cursor was `atCursor`. */
  loadSessions(list: unknown[], atCursor: number): void {
    let changed = false;
    for (const raw of list) {
      const s = normSession(raw);
      if (!s || this.deleted.has(s.session_id)) continue;
      if ((this.sessionVer.get(s.session_id) ?? -1) > atCursor) continue;
      this.sessions.set(s.session_id, s);
      if (s.insights_session_id) this.insightsOf.set(s.insights_session_id, s.session_id);
      changed = true;
    }
    if (changed) this.emit({ kind: 'sessions' });
  }

  /**
   * The messages of a page (requested when the cursor was `atCursor`) that the conversation does
   * not know yet, added to its index (with the state a later event left aside for them). Known
   * messages, and those an event newer than the page already changed, are skipped.
   */
  protected mergePage(c: Conversation, items: unknown[], atCursor: number): Message[] {
    const fresh: Message[] = [];
    for (const raw of items) {
      const got = normMessage(raw);
      if (!got || this.route(got.session_id).insights) continue;
      const key = String(got.id);
      if (c.byId.has(key) || (c.ver.get('m:' + key) ?? -1) > atCursor) continue;
      const { m, ver } = fromOutside(c, got, atCursor);
      c.byId.set(key, m);
      c.ver.set('m:' + key, ver);
      fresh.push(m);
    }
    return fresh;
  }

  /**
   * Merges an older page of messages (`GET …/messages?limit=N&before=ID`, requested when the
   * cursor was `atCursor`) and remembers the path of the page before it. Messages already known
   * are skipped (pages may overlap a reload), so loading the same page twice changes nothing.
   * Answers how many messages were added.
   */
  loadOlder(sessionId: string, items: unknown[], next: string | null, atCursor: number): number {
    if (this.deleted.has(sessionId)) return 0;
    const c = this.ensureConv(sessionId);
    const fresh = this.mergePage(c, items, atCursor);
    c.olderPath = next;
    pruneOutside(c, atCursor);
    if (!fresh.length) return 0;
    fresh.sort(compareMessages);
    const first = c.messages[0];
    if (!first || compareMessages(fresh[fresh.length - 1], first) <= 0) {
      // In place: the views hold this array.
      c.messages.splice(0, 0, ...fresh);
      this.emit({ kind: 'messages-prepended', sessionId, count: fresh.length });
    } else {
      c.messages = [...c.byId.values()].sort(compareMessages);
      this.emit({ kind: 'messages-reset', sessionId });
    }
    // Scrolling up: the far end is the newer one.
    const over = c.messages.length - MESSAGE_WINDOW;
    if (over > 0) this.dropBack(c, Math.ceil(over / MESSAGE_PAGE) * MESSAGE_PAGE);
    return fresh.length;
  }

  /**
   * The page(s) bringing back the window's dropped newer end: the path to ask for (the page
   * before the next dropped run, or the newest page); null when nothing was dropped there.
   */
  newerPath(sessionId: string): string | null {
    const c = this.convs.get(sessionId);
    if (!c || !c.newer.length) return null;
    return c.newer.length > 1 ? messagesPath(sessionId, c.newer[1].id) : messagesPath(sessionId);
  }

  /**
   * Whether messages `items` (one or more pages of `GET …/messages?limit=N&before=ID`, any order)
   * reach back to the window's last message, so that merging them leaves no gap.
   */
  reachesWindow(sessionId: string, items: unknown[]): boolean {
    const c = this.convs.get(sessionId);
    const last = c?.messages[c.messages.length - 1];
    if (!c || !last) return true;
    for (const raw of items) {
      const m = normMessage(raw);
      if (m && compareMessages(m, last) <= 0) return true;
    }
    return false;
  }

  /**
   * Merges newer messages loaded again after the window's newer end was dropped (the pages of
   * `newerPath`, requested when the cursor was `atCursor`; the caller follows `next` until
   * `reachesWindow` or the oldest page). Far messages at the older end are dropped beyond the
   * window. Answers how many messages were added.
   */
  loadNewer(sessionId: string, items: unknown[], atCursor: number): number {
    if (this.deleted.has(sessionId)) return 0;
    const c = this.ensureConv(sessionId);
    const fresh = this.mergePage(c, items, atCursor);
    pruneOutside(c, atCursor);
    fresh.sort(compareMessages);
    const last = c.messages[c.messages.length - 1];
    if (fresh.length) {
      if (!last || compareMessages(fresh[0], last) > 0) {
        c.messages.push(...fresh); // in place: the views hold this array
        this.emit({ kind: 'messages-appended', sessionId, count: fresh.length });
      } else {
        c.messages = [...c.byId.values()].sort(compareMessages);
        this.emit({ kind: 'messages-reset', sessionId });
      }
    }
    const end = c.messages[c.messages.length - 1];
    if (end) c.newer = c.newer.filter((x) => compareMessages(x, end) > 0);
    // Scrolling down: the far end is the older one.
    const over = c.messages.length - MESSAGE_WINDOW;
    if (over > 0) this.dropFront(c, Math.ceil(over / MESSAGE_PAGE) * MESSAGE_PAGE);
    return fresh.length;
  }

  /**
   * Keeps a window that grew past its size at its newer end (live messages while the user reads
   * the newest ones) to `MESSAGE_WINDOW`, dropping its oldest pages.
   */
  trimFront(sessionId: string): void {
    const c = this.convs.get(sessionId);
    if (!c || c.messages.length <= MESSAGE_WINDOW + MESSAGE_PAGE) return;
    this.dropFront(c, c.messages.length - MESSAGE_WINDOW);
  }

  protected forget(c: Conversation, gone: Message[]): void {
    for (const m of gone) {
      const key = String(m.id);
      c.byId.delete(key);
      c.ver.delete('m:' + key);
    }
  }

  /** Drops the `n` oldest messages of the window; `olderPath` brings them back. */
  protected dropFront(c: Conversation, n: number): void {
    n = Math.min(n, c.messages.length - 1);
    if (n <= 0) return;
    this.forget(c, c.messages.splice(0, n));
    c.olderPath = messagesPath(c.sessionId, c.messages[0].id);
    this.emit({ kind: 'messages-dropped', sessionId: c.sessionId, front: n, back: 0 });
  }

  /** Drops the `n` newest messages of the window, remembering where the dropped run starts. */
  protected dropBack(c: Conversation, n: number): void {
    n = Math.min(n, c.messages.length - 1);
    if (n <= 0) return;
    const gone = c.messages.splice(c.messages.length - n, n);
    this.forget(c, gone);
    c.newer.unshift(gone[0]);
    this.emit({ kind: 'messages-dropped', sessionId: c.sessionId, front: 0, back: n });
  }

  /** Merges a conversation's messages / insights / typing, requested when the cursor was `atCursor`. */
  loadConversation(sessionId: string, snap: Snapshot, atCursor: number): void {
    if (this.deleted.has(sessionId)) return;
    const c = this.ensureConv(sessionId);
    if (snap.messages) this.snapMessages(c, sessionId, snap, atCursor);
    if (snap.insights) this.snapInsights(c, sessionId, snap, atCursor);
    if (snap.typing) this.snapTyping(c, sessionId, snap);
    if (snap.transcript) this.snapTranscript(c, sessionId, snap, atCursor);
    c.loaded = true;
  }

  /** A snapshot's messages (the newest page, or the whole list). */
  private snapMessages(c: Conversation, sessionId: string, snap: Snapshot, atCursor: number): void {
    const newer = (key: string) => (c.ver.get(key) ?? -1) > atCursor;
    if (!snap.messages) return;
    if (c.newer.length) {
      // The window does not reach the newest page: it starts again from it.
      this.forget(c, c.messages);
      c.messages = [];
      c.newer = [];
    }
    const prevFirst = c.messages[0];
    let oldest: Message | undefined;
    for (const raw of snap.messages) {
      const got = normMessage(raw);
      if (!got || this.route(got.session_id).insights) continue;
      if (!oldest || compareMessages(got, oldest) < 0) oldest = got;
      const key = String(got.id);
      if (newer('m:' + key)) continue;
      const { m, ver } = fromOutside(c, got, atCursor);
      c.byId.set(key, m);
      c.ver.set('m:' + key, ver);
    }
    pruneOutside(c, atCursor);
    // A page reaching no further back than what is already loaded keeps the older path.
    const olderPath = snap.olderPath === undefined ? null : snap.olderPath;
    if (!prevFirst || !oldest || compareMessages(oldest, prevFirst) <= 0) c.olderPath = olderPath;
    c.messages = [...c.byId.values()].sort(compareMessages);
    this.emit({ kind: 'messages-reset', sessionId });
  }

  /** A snapshot's insights (a page, newest first). */
  private snapInsights(c: Conversation, sessionId: string, snap: Snapshot, atCursor: number): void {
    const newer = (key: string) => (c.ver.get(key) ?? -1) > atCursor;
    if (!snap.insights) return;
    // A page reaching no further back than what is already loaded keeps the older path.
    const prevOldest = c.insights[c.insights.length - 1];
    let oldest: Insight | undefined;
    for (const raw of snap.insights) {
      const ins = normInsight(raw);
      if (!ins) continue;
      if (!oldest || compareInsights(ins, oldest) > 0) oldest = ins;
      const key = String(ins.id);
      if (newer('i:' + key)) continue;
      c.insightById.set(key, ins);
      c.ver.set('i:' + key, atCursor);
    }
    if (!prevOldest || !oldest || compareInsights(oldest, prevOldest) >= 0) c.insightsOlder = snap.insightsOlderPath ?? null;
    c.insights = [...c.insightById.values()].filter(insightVisible).sort(compareInsights);
    for (const k of [...c.unread]) {
      const i = c.insightById.get(k);
      if (!i || !insightVisible(i)) c.unread.delete(k);
    }
    this.emit({ kind: 'insights', sessionId, added: null });
    this.emit({ kind: 'unread', sessionId });
  }

  /** A snapshot's typing indicators (versioned by `liveSeq`). */
  private snapTyping(c: Conversation, sessionId: string, snap: Snapshot): void {
    if (!snap.typing) return;
    // Live typing events since the request (a version above `typingAt`) are newer.
    const at = snap.typingAt ?? this.liveSeq;
    const newer = (key: string) => (c.ver.get(key) ?? -1) > at;
    const fresh = new Map<string, { t: Typing; insights: boolean }>();
    for (const raw of snap.typing) {
      const t = normTyping(raw);
      if (!t) continue;
      const r = this.route(t.session_id);
      fresh.set((r.insights ? 'ti:' : 't:') + t.scope, { t, insights: r.insights });
    }
    for (const [map, prefix] of [
      [c.typing, 't:'],
      [c.insightTyping, 'ti:'],
    ] as const) {
      for (const scope of [...map.keys()]) {
        const key = prefix + scope;
        if (!newer(key) && !fresh.has(key)) map.delete(scope);
      }
    }
    for (const [key, { t, insights }] of fresh) {
      if (newer(key)) continue;
      (insights ? c.insightTyping : c.typing).set(t.scope, t);
    }
    this.emit({ kind: 'typing', sessionId, insights: false });
    this.emit({ kind: 'typing', sessionId, insights: true });
  }

  /** A snapshot's transcript turns (a page, oldest first). */
  private snapTranscript(c: Conversation, sessionId: string, snap: Snapshot, atCursor: number): void {
    const newer = (key: string) => (c.ver.get(key) ?? -1) > atCursor;
    if (!snap.transcript) return;
    const prevOldest = c.transcriptLoaded ? c.transcript[0] : undefined;
    let oldest: TranscriptTurn | undefined;
    for (const raw of snap.transcript) {
      const t = normTranscript(raw);
      if (!t) continue;
      if (!oldest || compareTurns(t, oldest) < 0) oldest = t;
      const key = String(t.id);
      if (newer('x:' + key)) continue;
      c.transcriptById.set(key, t);
      c.ver.set('x:' + key, atCursor);
    }
    if (!prevOldest || !oldest || compareTurns(oldest, prevOldest) <= 0) c.transcriptOlder = snap.transcriptOlderPath ?? null;
    c.transcript = [...c.transcriptById.values()].sort(compareTurns);
    c.transcriptLoaded = true;
    this.emit({ kind: 'transcript', sessionId, added: null });
  }

  /**
   * Merges an older page of insights (`GET …/insights?limit=N&before=ID`) or of the transcript
   * (`GET /api/calls/{id}/transcript?limit=N&before=ID`), requested when the cursor was
   * `atCursor`, and remembers the path of the page before it.
   */
  loadOlderList(sessionId: string, list: 'insights' | 'transcript', items: unknown[], next: string | null, atCursor: number): void {
    if (this.deleted.has(sessionId)) return;
    const c = this.ensureConv(sessionId);
    const was = c.loaded;
    if (list === 'insights') this.loadConversation(sessionId, { insights: items, insightsOlderPath: next }, atCursor);
    else this.loadConversation(sessionId, { transcript: items, transcriptOlderPath: next }, atCursor);
    c.loaded = was;
    if (list === 'insights') c.insightsOlder = next;
    else c.transcriptOlder = next;
  }

  /** Merges a call's transcript (`GET /api/calls/{id}/transcript`), requested at `atCursor`. */
  loadTranscript(sessionId: string, list: unknown[], atCursor: number): void {
    if (this.deleted.has(sessionId)) return;
    const c = this.ensureConv(sessionId);
    const was = c.loaded;
    this.loadConversation(sessionId, { transcript: list }, atCursor);
    c.loaded = was;
  }

  /** Merges one transcript turn returned by the API (the 201 of a posted turn, a retry's 200). */
  mergeTurn(raw: unknown, atCursor: number): void {
    const t = normTranscript(raw);
    if (!t) return;
    const chat = this.route(t.session_id).chat;
    if (this.deleted.has(chat)) return;
    const c = this.ensureConv(chat);
    if ((c.ver.get('x:' + String(t.id)) ?? -1) > atCursor) return;
    this.putTurn(t, atCursor);
  }

  /**
   * Merges one message returned by the API (e.g. the 201 of a sent message). An entry already
   * there is kept unless `replace` (a retry's answer: the entry changed by that very request);
   * either way an entry touched by an event after `atCursor` keeps the event's state.
   */
  mergeMessage(raw: unknown, atCursor: number, replace = false): void {
    const m = normMessage(raw);
    if (!m) return;
    const c = this.ensureConv(this.route(m.session_id).chat);
    if ((c.ver.get('m:' + String(m.id)) ?? -1) > atCursor) return;
    if (!replace && c.byId.has(String(m.id))) return; // already there (from the stream or a snapshot)
    this.putMessage(m, atCursor);
  }

  /** Merges one session returned by the API. */
  mergeSession(raw: unknown, atCursor: number): void {
    const s = normSession(raw);
    if (!s || (this.sessionVer.get(s.session_id) ?? -1) > atCursor) return;
    this.putSession(s, atCursor, false);
  }
}
