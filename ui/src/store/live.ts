// The store, part live: applying events (logged and live), partial turns, hearing the call, the assistant link, the tunnel.
// (One class in layers: base.ts → live.ts → load.ts; the rules are at the top of ../store.ts.)

import { LEVEL_STALE_MS, normAudio, normAudioStatus, normLevels, normPartial, PARTIAL_STALE_MS } from '../audio';
import type { Assistant, Audio, Insight, Message, PartialTurn, Session, SwEvent, TranscriptTurn, Typing } from '../types';
import { MESSAGE_WINDOW } from '../window';
import { str, isObj, normMessage, normTranscript, normAssistant, normInsight, normSession, normTyping, insightVisible, compareMessages, compareTurns, compareInsights, upperBound, indexOfSorted, outsideWindow, payload, normTunnel } from './norm';
import { StoreBase } from './base';

export abstract class StoreLive extends StoreBase {

  // ---- events ---------------------------------------------------------------------------------

  /** Applies a batch in order; returns how many were new. */
  applyBatch(events: SwEvent[]): number {
    let n = 0;
    for (const ev of events) if (this.apply(ev)) n++;
    return n;
  }

  /** Applies one event; false when it was already applied (id ≤ cursor) or malformed. */
  apply(ev: SwEvent): boolean {
    if (ev.live === true) {
      // No cursor: typing indicators are kept (versioned by `liveSeq`); every live event is
      // handed to whoever shows it, and never counted as applied.
      if (ev.type === 'typing_started' || ev.type === 'typing_stopped') {
        const t = normTyping(payload(ev, 'typing'));
        if (t) this.putTyping(t, ev.type === 'typing_started', ++this.liveSeq);
      } else {
        this.applyLive(ev);
      }
      this.emit({ kind: 'live', event: ev });
      return false;
    }
    const id = Number(ev.id);
    if (!Number.isFinite(id) || id <= this.cursor) return false;
    this.cursor = id;
    switch (ev.type) {
      case 'session_created':
      case 'session_updated': {
        const s = normSession(payload(ev, 'session'));
        if (s) this.putSession(s, id, true);
        break;
      }
      case 'session_deleted': {
        const p = payload(ev, 'session');
        const sid = str(ev.session_id) ?? (isObj(p) ? str(p.session_id) : null);
        if (sid) this.deleteSession(sid);
        break;
      }
      case 'message_added':
      case 'message_updated': {
        const m = normMessage(payload(ev, 'message'));
        if (m) this.putMessage(m, id);
        break;
      }
      case 'insight_added':
      case 'insight_updated': {
        const i = normInsight(payload(ev, 'insight'));
        if (i) this.putInsight(i, id, true);
        break;
      }
      case 'typing_started':
      case 'typing_stopped':
        break; // logged by an older version: history (typing is live-only, see above)
      case 'transcript_added':
      case 'transcript_updated': {
        const t = normTranscript(payload(ev, 'transcript'));
        if (t) this.putTurn(t, id);
        break;
      }
      case 'assistant_status':
        this.patchAssistant(payload(ev, 'assistant'), id);
        break;
      default:
        break; // unknown types are skipped (forward compatible); the cursor still advances
    }
    return true;
  }

  // ---- live-only events (hearing the call) ----------------------------------------------------

  protected applyLive(ev: SwEvent): void {
    switch (ev.type) {
      case 'transcript_partial':
        this.putPartial(ev);
        break;
      case 'audio_level': {
        const l = normLevels(ev);
        if (!l) break;
        this.levels = l;
        clearTimeout(this.levelTimer);
        this.levelTimer = setTimeout(() => {
          this.levels = null;
          this.emit({ kind: 'levels' });
        }, LEVEL_STALE_MS);
        this.emit({ kind: 'levels' });
        break;
      }
      case 'audio_status': {
        const st = normAudioStatus(ev.status);
        if (!st) break;
        this.audioStatusSeq++;
        if (this.audio) this.putAudio({ ...this.audio, status: st }, true);
        // No snapshot yet: the app reads `GET /api/audio` after each status event anyway.
        else this.emit({ kind: 'audio', fromEvent: true });
        break;
      }
      default:
        break;
    }
  }

  protected putPartial(ev: SwEvent): void {
    const now = Date.now();
    const p = normPartial(ev, now);
    if (!p) return;
    const chat = this.route(p.partial.session_id).chat;
    if (this.deleted.has(chat)) return;
    const c = this.ensureConv(chat);
    const key = p.partial.turn_id;
    const prev = c.partials.get(key);
    if (p.final) {
      // Its stored turn comes (or came) as `transcript_added`.
      if (c.partials.delete(key)) this.emit({ kind: 'partials', sessionId: chat });
      return;
    }
    c.partials.set(key, { ...p.partial, session_id: chat, since: prev?.since ?? now });
    this.schedulePartialSweep(now + PARTIAL_STALE_MS);
    this.emit({ kind: 'partials', sessionId: chat });
  }

  /** A call's turns being heard, in the order they began. */
  partialsOf(sessionId: string | null): PartialTurn[] {
    const c = sessionId ? this.convs.get(sessionId) : undefined;
    return c ? [...c.partials.values()] : [];
  }

  /** Drops every partial turn (the stream came back: those it missed cannot be trusted). */
  clearPartials(): void {
    for (const c of this.convs.values()) {
      if (!c.partials.size) continue;
      c.partials.clear();
      this.emit({ kind: 'partials', sessionId: c.sessionId });
    }
  }

  protected schedulePartialSweep(due: number): void {
    if (due >= this.partialDue) return;
    clearTimeout(this.partialTimer);
    this.partialDue = due;
    this.partialTimer = setTimeout(() => this.sweepPartials(), Math.max(0, due - Date.now()));
  }

  /** Drops the partial turns with no news for `PARTIAL_STALE_MS`; wakes up again for the next. */
  protected sweepPartials(): void {
    const now = Date.now();
    this.partialDue = Infinity;
    let next = Infinity;
    for (const c of this.convs.values()) {
      let dropped = false;
      for (const [k, p] of c.partials) {
        if (now - p.at >= PARTIAL_STALE_MS) {
          c.partials.delete(k);
          dropped = true;
        } else next = Math.min(next, p.at + PARTIAL_STALE_MS);
      }
      if (dropped) this.emit({ kind: 'partials', sessionId: c.sessionId });
    }
    if (next < Infinity) this.schedulePartialSweep(next);
  }

  /**
   * `GET` / `PUT /api/audio`'s answer, asked for when `audioStatusSeq` was `atSeq` (omitted: newer
   * than every event): an `audio_status` event that came meanwhile keeps its status. Returns
   * whether anything changed.
   */
  setAudio(raw: unknown, atSeq = Infinity): boolean {
    const a = normAudio(raw);
    if (!a) return false;
    if (this.audio && this.audioStatusSeq > atSeq) a.status = this.audio.status;
    this.audioUnavailable = null;
    return this.putAudio(a, false);
  }

  /** `GET /api/audio` answered `503 audio_unavailable` (this build, or this machine, cannot hear). */
  setAudioUnavailable(message: string): boolean {
    if (this.audio === null && this.audioUnavailable === message) return false;
    this.audio = null;
    this.audioJson = '';
    this.audioUnavailable = message;
    this.emit({ kind: 'audio', fromEvent: false });
    return true;
  }

  protected putAudio(a: Audio, fromEvent: boolean): boolean {
    const json = JSON.stringify(a);
    if (json === this.audioJson) return false;
    this.audioJson = json;
    this.audio = a;
    this.emit({ kind: 'audio', fromEvent });
    return true;
  }

  protected putSession(s: Session, version: number, live: boolean): void {
    if (this.deleted.has(s.session_id)) return;
    const isNew = !this.sessions.has(s.session_id);
    this.sessions.set(s.session_id, s);
    this.sessionVer.set(s.session_id, version);
    if (s.insights_session_id) this.insightsOf.set(s.insights_session_id, s.session_id);
    this.emit({ kind: 'sessions' });
    if (isNew && live) this.emit({ kind: 'session-created', session: s });
  }

  protected deleteSession(sid: string): void {
    this.deleted.add(sid);
    const s = this.sessions.get(sid);
    if (s?.insights_session_id) this.insightsOf.delete(s.insights_session_id);
    this.sessions.delete(sid);
    this.sessionVer.delete(sid);
    this.convs.delete(sid);
    this.emit({ kind: 'sessions' });
    this.emit({ kind: 'session-deleted', sessionId: sid });
  }

  protected putMessage(m: Message, version: number): void {
    const r = this.route(m.session_id);
    if (r.insights) return; // an `insights:` session never shows in a chat
    if (this.deleted.has(r.chat)) return;
    const c = this.ensureConv(r.chat);
    const key = String(m.id);
    const prev = c.byId.get(key);
    if (!prev && outsideWindow(c, m)) {
      c.outside.delete(key);
      c.outside.set(key, { m, ver: version });
      // Bounded too: only events newer than a page still on its way matter (see `pruneOutside`).
      if (c.outside.size > MESSAGE_WINDOW) c.outside.delete(c.outside.keys().next().value as string);
      return;
    }
    c.ver.set('m:' + key, version);
    c.byId.set(key, m);
    if (!prev) {
      const index = upperBound(c.messages, m, compareMessages);
      c.messages.splice(index, 0, m);
      this.emit({ kind: 'message-insert', sessionId: r.chat, index, message: m });
      return;
    }
    const from = indexOfSorted(c.messages, prev, compareMessages, (x) => String(x.id) === key);
    if (from < 0) {
      const index = upperBound(c.messages, m, compareMessages);
      c.messages.splice(index, 0, m);
      this.emit({ kind: 'message-insert', sessionId: r.chat, index, message: m });
      return;
    }
    if (compareMessages(prev, m) === 0) {
      c.messages[from] = m;
      this.emit({ kind: 'message-update', sessionId: r.chat, index: from, message: m, prev });
      return;
    }
    c.messages.splice(from, 1);
    const to = upperBound(c.messages, m, compareMessages);
    c.messages.splice(to, 0, m);
    if (to === from) this.emit({ kind: 'message-update', sessionId: r.chat, index: to, message: m, prev });
    else this.emit({ kind: 'message-move', sessionId: r.chat, from, to, message: m });
  }

  protected putInsight(ins: Insight, version: number, live: boolean): void {
    const chat = this.route(ins.session_id).chat;
    if (this.deleted.has(chat)) return;
    const c = this.ensureConv(chat);
    const key = String(ins.id);
    c.ver.set('i:' + key, version);
    const prev = c.insightById.get(key);
    const wasVisible = !!prev && insightVisible(prev);
    const nowVisible = insightVisible(ins);
    c.insightById.set(key, ins);
    if (wasVisible) {
      const at = c.insights.findIndex((x) => String(x.id) === key);
      if (at >= 0) c.insights.splice(at, 1);
    }
    if (nowVisible) c.insights.splice(upperBound(c.insights, ins, compareInsights), 0, ins);
    if (!wasVisible && !nowVisible) return;
    let unreadChanged = false;
    if (nowVisible && !wasVisible && live && this.insightsOpen !== chat && !c.unread.has(key)) {
      c.unread.add(key);
      unreadChanged = true;
    }
    if (!nowVisible && c.unread.delete(key)) unreadChanged = true;
    this.emit({ kind: 'insights', sessionId: chat, added: nowVisible && !wasVisible ? ins : null });
    if (unreadChanged) this.emit({ kind: 'unread', sessionId: chat });
  }

  protected putTurn(t: TranscriptTurn, version: number): void {
    const chat = this.route(t.session_id).chat;
    if (this.deleted.has(chat)) return;
    const c = this.ensureConv(chat);
    const key = String(t.id);
    c.ver.set('x:' + key, version);
    const prev = c.transcriptById.get(key);
    c.transcriptById.set(key, t);
    if (prev) {
      const at = c.transcript.findIndex((x) => String(x.id) === key);
      if (at >= 0) c.transcript.splice(at, 1);
    }
    c.transcript.splice(upperBound(c.transcript, t, compareTurns), 0, t);
    this.emit({ kind: 'transcript', sessionId: chat, added: prev ? null : t });
  }

  /**
   * The assistant link's state from an answer of `/api/assistant…`, requested when the cursor was
   * `atCursor` (omitted: newer than every event). An `assistant_status` event applied after that
   * keeps its status, detail and check time. Returns whether anything changed. Ordering between
   * overlapping requests is the caller's business (see App).
   */
  setAssistant(raw: unknown, atCursor = Infinity): boolean {
    const a = normAssistant(raw);
    if (!a) return false;
    const cur = this.assistant;
    if (cur && this.assistantStatusVer > atCursor) {
      a.status = cur.status;
      a.detail = cur.detail;
      a.checked_at = cur.checked_at;
    }
    return this.putAssistant(a, false);
  }

  /** An `assistant_status` event: `{status, detail, checked_at}` over the last snapshot. */
  protected patchAssistant(raw: unknown, version: number): void {
    if (!isObj(raw) || typeof raw.status !== 'string') return;
    this.assistantStatusVer = version;
    const base: Assistant = this.assistant ?? normAssistant({ status: raw.status })!;
    const configured = raw.status !== 'not_configured';
    const next: Assistant = {
      ...base,
      kind: str(raw.kind) ?? base.kind,
      status: raw.status,
      detail: str(raw.detail) ?? '',
      checked_at: 'checked_at' in raw ? str(raw.checked_at) : base.checked_at,
      configured,
      relay_token_set: configured ? base.relay_token_set : false,
    };
    this.putAssistant(next, true);
  }

  protected putAssistant(a: Assistant, fromEvent: boolean): boolean {
    const json = JSON.stringify(a);
    if (json === this.assistantJson) return false;
    this.assistantJson = json;
    this.assistant = a;
    this.emit({ kind: 'assistant', fromEvent });
    return true;
  }

  /** The tunnel from an answer of `/api/tunnel…`. Returns whether anything changed. */
  setTunnel(raw: unknown): boolean {
    const t = normTunnel(raw);
    if (!t) return false;
    const json = JSON.stringify(t);
    if (json === this.tunnelJson) return false;
    this.tunnelJson = json;
    this.tunnel = t;
    this.emit({ kind: 'tunnel' });
    return true;
  }

  protected putTyping(t: Typing, on: boolean, version: number): void {
    const r = this.route(t.session_id);
    if (this.deleted.has(r.chat)) return;
    const c = this.ensureConv(r.chat);
    const map = r.insights ? c.insightTyping : c.typing;
    c.ver.set((r.insights ? 'ti:' : 't:') + t.scope, version);
    const had = map.has(t.scope);
    if (on) map.set(t.scope, t);
    else map.delete(t.scope);
    if (had || on) this.emit({ kind: 'typing', sessionId: r.chat, insights: r.insights });
  }
}
