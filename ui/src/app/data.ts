// The application shell, part data: loading a conversation and the session list through the API, search and export.
// (The shell is one class in layers: base.ts → data.ts → links.ts → actions.ts → view.ts → bar.ts → ../app.ts.)

import { h } from '../dom';
import { errorText } from '../errors';
import { sessionTitle, type ExportFormat } from '../history';
import type { SearchHit } from '../search';
import { listPath, messagesPath } from '../window';
import type { ApiResponse } from '../transport';
import { NEWER_MAX_PAGES, JUMP_MAX_PAGES, Tab } from './base';
import { AppBase } from './base';

export abstract class AppData extends AppBase {

  /** Loads the sessions and the open conversation through the API (merged by version). */
  protected async reload(first = false): Promise<void> {
    const c0 = this.store.cursor;
    const res = await this.api<unknown[]>('GET', '/api/sessions').catch(() => null);
    if (!res || res.status !== 200 || !Array.isArray(res.body)) {
      if (res && res.status !== 401) this.showBarError(`Could not load the sessions: ${errorText(res)}`, res);
      return;
    }
    this.store.loadSessions(res.body, c0);
    if (!first) {
      this.scheduleAssistantPoll(0);
      this.scheduleTunnelPoll(0);
    }
    if (first && !this.activeId) {
      const live = this.store.sessionList().find((s) => s.is_call && !s.ended_at);
      if (live) this.open(live.session_id, this.tab === 'chat' ? 'call' : null);
    }
    if (this.activeId) {
      const c = this.store.conv(this.activeId);
      if (c) c.loaded = false;
      await this.loadConv(this.activeId);
    }
    this.dirty.bar = this.dirty.history = true;
    this.flush();
  }

  /** Typing indicators are live-only: after the stream dropped, the open conversation's are read again. */
  protected async reloadTyping(): Promise<void> {
    const sid = this.activeId;
    if (!sid || !this.store.conv(sid)?.loaded) return;
    const [c0, typingAt] = [this.store.cursor, this.store.liveSeq];
    const t = await this.api<unknown[]>('GET', `/api/sessions/${encodeURIComponent(sid)}/typing`).catch(() => null);
    if (!t || t.status !== 200 || !Array.isArray(t.body)) return;
    this.store.loadConversation(sid, { typing: t.body, typingAt }, c0);
    this.flush();
  }

  protected loadConv(sid: string): Promise<void> {
    const running = this.loading.get(sid);
    if (running) return running;
    const p = this.loadConvNow(sid).finally(() => {
      this.loading.delete(sid);
      this.flush();
    });
    this.loading.set(sid, p);
    return p;
  }

  protected async loadConvNow(sid: string): Promise<void> {
    try {
      const [c0, typingAt] = [this.store.cursor, this.store.liveSeq];
      const enc = encodeURIComponent(sid);
      const s = this.store.sessions.get(sid);
      const noList = Promise.resolve<ApiResponse<{ items?: unknown; next?: unknown }>>({ status: 0, body: {} });
      const [m, i, t, x] = await Promise.all([
        // The newest page; older ones as the user scrolls up.
        this.api<{ items?: unknown; next?: unknown }>('GET', messagesPath(sid)),
        this.api<{ items?: unknown; next?: unknown }>('GET', listPath(sid, 'insights')),
        this.api<unknown[]>('GET', `/api/sessions/${enc}/typing`),
        // A chat that is not a call has no transcript (the route answers 409 not_a_call).
        !s || s.is_call ? this.api<{ items?: unknown; next?: unknown }>('GET', listPath(sid, 'transcript')) : noList,
      ]);
      const page = m.status === 200 && m.body && Array.isArray(m.body.items) ? m.body : null;
      if (!page) {
        if (m.status !== 401) this.showBarError(`Could not load the conversation: ${errorText(m)}`, m);
        return;
      }
      const ok = (r: ApiResponse<unknown[]>) => (r.status === 200 && Array.isArray(r.body) ? r.body : undefined);
      type Page = ApiResponse<{ items?: unknown; next?: unknown }>;
      const items = (r: Page) => (r.status === 200 && r.body && Array.isArray(r.body.items) ? (r.body.items as unknown[]) : undefined);
      const nextOf = (r: Page) => (items(r) && typeof r.body.next === 'string' ? r.body.next : null);
      this.store.loadConversation(
        sid,
        {
          messages: page.items as unknown[],
          olderPath: typeof page.next === 'string' ? page.next : null,
          insights: items(i) ?? [],
          insightsOlderPath: nextOf(i),
          typing: ok(t) ?? [],
          typingAt,
          transcript: items(x),
          transcriptOlderPath: nextOf(x),
        },
        c0,
      );
    } catch (e) {
      this.showBarError(`Could not load the conversation: ${e instanceof Error ? e.message : String(e)}`);
    }
  }

  /** Loads the next older page of a conversation; true when one was merged. */
  protected async loadOlder(sid: string): Promise<boolean> {
    const c = this.store.conv(sid);
    const path = c?.olderPath;
    if (!c || !path) return false;
    const c0 = this.store.cursor;
    const res = await this.api<{ items?: unknown; next?: unknown }>('GET', path);
    if (res.status !== 200 || !res.body || !Array.isArray(res.body.items)) return false;
    if (c.olderPath !== path) return true; // another load got there first
    this.store.loadOlder(sid, res.body.items, typeof res.body.next === 'string' ? res.body.next : null, c0);
    this.chat.flush();
    return true;
  }

  /**
   * Loads the dropped newer end of a conversation's window again (following `next` until the
   * pages reach the window, so nothing is skipped); true when some were merged.
   */
  protected async loadNewer(sid: string): Promise<boolean> {
    let path = this.store.newerPath(sid);
    if (!path) return false;
    const c0 = this.store.cursor;
    const items: unknown[] = [];
    for (let pages = 0; path && pages < NEWER_MAX_PAGES; pages++) {
      const res: ApiResponse<{ items?: unknown; next?: unknown }> = await this.api<{ items?: unknown; next?: unknown }>('GET', path);
      if (res.status !== 200 || !res.body || !Array.isArray(res.body.items)) {
        // A cursor that is gone (the conversation changed): start again from the newest page.
        if (res.status === 400) await this.loadNewest(sid);
        return false;
      }
      items.push(...res.body.items);
      if (this.store.reachesWindow(sid, res.body.items)) break;
      path = typeof res.body.next === 'string' ? res.body.next : null;
    }
    if (this.store.newerPath(sid) === null) return true; // another load got there first
    this.store.loadNewer(sid, items, c0);
    this.chat.flush();
    return true;
  }

  /** Loads the next older page of a call's insights or transcript (the user asked for it). */
  protected async loadOlderList(sid: string, list: 'insights' | 'transcript'): Promise<void> {
    const c = this.store.conv(sid);
    const path = list === 'insights' ? c?.insightsOlder : c?.transcriptOlder;
    if (!c || !path) return;
    const c0 = this.store.cursor;
    const res = await this.api<{ items?: unknown; next?: unknown }>('GET', path);
    if (res.status !== 200 || !res.body || !Array.isArray(res.body.items)) {
      this.showBarError(`Could not load older ${list === 'insights' ? 'insights' : 'turns'}: ${errorText(res)}`, res);
      return;
    }
    if ((list === 'insights' ? c.insightsOlder : c.transcriptOlder) !== path) return; // another load got there first
    this.store.loadOlderList(sid, list, res.body.items, typeof res.body.next === 'string' ? res.body.next : null, c0);
    this.flush();
  }

  /** Loads a conversation's newest page again, as its window (its newer end had been dropped). */
  protected async loadNewest(sid: string): Promise<void> {
    const c0 = this.store.cursor;
    const m = await this.api<{ items?: unknown; next?: unknown }>('GET', messagesPath(sid));
    if (m.status !== 200 || !m.body || !Array.isArray(m.body.items)) return;
    this.store.loadConversation(sid, { messages: m.body.items, olderPath: typeof m.body.next === 'string' ? m.body.next : null }, c0);
    this.chat.flush();
  }

  // ---- search and export -----------------------------------------------------------------------

  protected async search(q: string): Promise<SearchHit[]> {
    const res = await this.api<{ results?: SearchHit[] }>('GET', `/api/search?q=${encodeURIComponent(q)}&limit=50`);
    if (res.status !== 200 || !res.body || !Array.isArray(res.body.results)) {
      const b = res.body as { error?: unknown } | null;
      if (b && b.error === 'empty_query') return [];
      throw new Error(`Search failed: ${errorText(res)}`);
    }
    return res.body.results;
  }

  /** Opens a search result's call on the right tab, scrolled to the message and highlighted. */
  async jump(hit: SearchHit): Promise<boolean> {
    const tab: Tab = hit.kind === 'chat' ? 'chat' : hit.kind === 'insight' ? 'insights' : 'transcript';
    this.open(hit.session_id, tab);
    const c = this.store.conv(hit.session_id);
    if (!c || !c.loaded) await this.loadConv(hit.session_id);
    this.flush();
    if (hit.kind === 'chat') {
      // A hit newer than the window (its newer end was dropped): from the newest page back.
      const w = this.store.conv(hit.session_id);
      if (w && !w.byId.has(String(hit.message_id)) && w.newer.length) await this.loadNewest(hit.session_id);
      for (let pages = 0; ; pages++) {
        const conv = this.store.conv(hit.session_id);
        if (conv?.byId.has(String(hit.message_id))) {
          this.chat.flush();
          return this.chat.reveal(hit.message_id);
        }
        if (pages >= JUMP_MAX_PAGES || !(await this.loadOlder(hit.session_id))) return false;
      }
    }
    const panel = hit.kind === 'insight' ? this.insights.panel : this.transcript.panel;
    const el = panel.querySelector<HTMLElement>(`[data-id="${hit.message_id}"]`);
    if (!el) return false;
    el.scrollIntoView({ block: 'center' });
    el.classList.add('search-hit');
    setTimeout(() => el.classList.remove('search-hit'), 2500);
    return true;
  }

  protected async exportSession(sid: string, format: ExportFormat): Promise<void> {
    const res = await this.api<unknown>('GET', `/api/sessions/${encodeURIComponent(sid)}/export?format=${format}`);
    if (res.status !== 200) throw new Error(`Could not export: ${errorText(res)}`);
    const text = typeof res.body === 'string' ? res.body : `${JSON.stringify(res.body, null, 2)}\n`;
    const s = this.store.sessions.get(sid);
    const base = (s ? sessionTitle(s) : sid).replace(/[^\p{L}\p{N}]+/gu, '-').replace(/^-+|-+$/g, '').slice(0, 80) || 'export';
    const blob = new Blob([text], { type: format === 'md' ? 'text/markdown' : 'application/json' });
    const url = URL.createObjectURL(blob);
    const a = h('a', { href: url, download: `${base}.${format}`, hidden: true });
    document.body.append(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10_000);
  }
}
