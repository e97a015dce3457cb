// @vitest-environment happy-dom
// The chat's bounded window of loaded messages (window.ts, store.ts): scrolling up drops the
// newer end, scrolling back down loads it again by cursor, live events past a dropped end land
// once the page covering them does. The pages come from `pageOf` below, a stand-in for
// `GET …/messages?limit=N&before=ID` over an in-memory history (the route itself is tested
// against the real binary in the Rust suite); the store is the real one. The virtual list's
// geometry is stubbed (happy-dom has no layout): rows of 50 px in a 500 px viewport.
import { describe, expect, it } from 'vitest';
import { type Change, Store } from '../src/store';
import { VList } from '../src/vlist';
import { MESSAGE_PAGE, MESSAGE_WINDOW } from '../src/window';

const SID = 'chat-w';
const T0 = Date.UTC(2026, 10, 29, 12, 0, 0) * 1000;

function msg(id: number, text = `m${id}`) {
  const sortKey = T0 + id * 1000;
  return { id, session_id: SID, kind: 'assistant', text, message_id: `m-${id}`, sort_key: sortKey, received_at: new Date(sortKey / 1000).toISOString(), draft: false };
}

/** The history as the server has it, oldest first. */
let history: ReturnType<typeof msg>[] = [];

/** One page: `limit` messages before `before` (none: the newest), oldest first, and `next`. */
function pageOf(path: string): { items: unknown[]; next: string | null } {
  const u = new URL(path, 'http://x');
  const limit = Number(u.searchParams.get('limit'));
  const b = u.searchParams.get('before');
  const end = b === null ? history.length : history.findIndex((m) => m.id === Number(b));
  if (end < 0) throw new Error(`invalid_cursor ${path}`);
  const start = Math.max(0, end - limit);
  const items = history.slice(start, end);
  return { items, next: start > 0 ? `${u.pathname}?limit=${limit}&before=${items[0].id}` : null };
}

/** The window is one run of the history without gaps or repeats. */
function contiguous(s: Store): number[] {
  const ids = s.conv(SID)!.messages.map((m) => Number(m.id));
  const gap = ids.findIndex((id, i) => i > 0 && id !== ids[i - 1] + 1);
  expect(gap, gap > 0 ? `${ids[gap]} after ${ids[gap - 1]}` : '').toBe(-1);
  return ids;
}

function scrollUpToTheTop(s: Store): number {
  let pages = 0;
  for (let path = s.conv(SID)!.olderPath; path; path = s.conv(SID)!.olderPath, pages++) {
    const p = pageOf(path);
    s.loadOlder(SID, p.items, p.next, s.cursor);
    expect(s.conv(SID)!.messages.length).toBeLessThanOrEqual(MESSAGE_WINDOW);
    contiguous(s);
  }
  return pages;
}

/** What the app does for one "near the bottom" load: pages until they reach the window. */
function loadNewer(s: Store, atCursor = s.cursor, between?: (items: unknown[]) => void): void {
  const items: unknown[] = [];
  for (let path = s.newerPath(SID); path; ) {
    const p = pageOf(path);
    items.push(...p.items);
    if (s.reachesWindow(SID, p.items)) break;
    path = p.next;
  }
  between?.(items);
  s.loadNewer(SID, items, atCursor);
}

function open(s: Store): void {
  const p = pageOf(`/api/sessions/${SID}/messages?limit=${MESSAGE_PAGE}`);
  s.loadConversation(SID, { messages: p.items, olderPath: p.next }, s.cursor);
}

describe('the bounded window of a long chat', () => {
  it('scrolled to the top and back down keeps at most MESSAGE_WINDOW messages, contiguous, and ends where it began', () => {
    history = Array.from({ length: 10_000 }, (_, i) => msg(i + 1));
    const s = new Store();
    const seen: Change[] = [];
    s.subscribe((c) => seen.push(c));
    open(s);
    expect(contiguous(s)).toEqual(history.slice(-MESSAGE_PAGE).map((m) => m.id));

    scrollUpToTheTop(s);
    const top = contiguous(s);
    expect(top[0]).toBe(1);
    expect(top.length).toBeLessThanOrEqual(MESSAGE_WINDOW);
    expect(s.conv(SID)!.byId.size).toBe(top.length); // the dropped ones are forgotten
    expect(s.conv(SID)!.olderPath).toBeNull();
    expect(s.newerPath(SID)).not.toBeNull();
    expect(seen.some((c) => c.kind === 'messages-dropped' && c.back > 0)).toBe(true);

    let loads = 0;
    while (s.newerPath(SID)) {
      loadNewer(s);
      expect(s.conv(SID)!.messages.length).toBeLessThanOrEqual(MESSAGE_WINDOW);
      contiguous(s);
      expect(++loads).toBeLessThan(100);
    }
    const bottom = contiguous(s);
    expect(bottom[bottom.length - 1]).toBe(10_000);
    expect(bottom.length).toBeLessThanOrEqual(MESSAGE_WINDOW);
    // Dropped at the older end: its path is the page before the window's first message.
    expect(s.conv(SID)!.olderPath).toBe(`/api/sessions/${SID}/messages?limit=${MESSAGE_PAGE}&before=${bottom[0]}`);
    // And up again from there, without a gap.
    const p = pageOf(s.conv(SID)!.olderPath!);
    s.loadOlder(SID, p.items, p.next, s.cursor);
    expect(contiguous(s)[0]).toBe(bottom[0] - MESSAGE_PAGE);
  });

  it('live events past the dropped newer end land once their page does, and a page asked for before an event never rolls it back', () => {
    history = Array.from({ length: 5_000 }, (_, i) => msg(i + 1));
    const s = new Store();
    open(s);
    scrollUpToTheTop(s);
    const before = s.conv(SID)!.messages.length;
    let ev = 0;
    const event = (type: string, m: unknown) => s.apply({ id: ++ev, type, message: m });

    // A new message at the live end, and an edit of a dropped one: not in the window (no gap).
    const fresh = msg(5_001, 'live');
    history.push(fresh);
    event('message_added', fresh);
    const edited = { ...msg(4_500), text: 'edited by an event' };
    history[4_499] = edited;
    event('message_updated', edited);
    expect(s.conv(SID)!.messages.length).toBe(before);
    expect(s.conv(SID)!.byId.has('5001')).toBe(false);

    // Down again; one page is asked for before an edit that the server answers without it.
    const c0 = s.cursor;
    let late = false;
    while (s.newerPath(SID)) {
      loadNewer(s, s.cursor, (items) => {
        if (!late && items.some((m) => (m as { id: number }).id === 4_950)) {
          late = true;
          event('message_updated', { ...msg(4_950), text: 'edited while the page was on its way' });
        }
      });
    }
    expect(late).toBe(true);
    expect(c0).toBeLessThan(s.cursor);
    const w = s.conv(SID)!;
    const ids = contiguous(s);
    expect(ids[ids.length - 1]).toBe(5_001);
    expect(w.byId.get('5001')!.text).toBe('live');
    expect(w.byId.get('4500')!.text).toBe('edited by an event');
    expect(w.byId.get('4950')!.text).toBe('edited while the page was on its way');
    expect(w.outside.size).toBe(0);

    // At the live end again: live events go straight in.
    event('message_added', msg(5_002, 'straight in'));
    expect(w.messages[w.messages.length - 1].text).toBe('straight in');
  });

  it('live messages at the newest end keep the window to its size, and reopening a scrolled-up chat starts from the newest page', () => {
    history = Array.from({ length: 1_000 }, (_, i) => msg(i + 1));
    const s = new Store();
    open(s);
    for (let i = 1_001; i <= 1_000 + MESSAGE_WINDOW + 2 * MESSAGE_PAGE; i++) s.apply({ id: i, type: 'message_added', message: msg(i) });
    s.trimFront(SID);
    const ids = contiguous(s);
    expect(ids.length).toBe(MESSAGE_WINDOW);
    expect(ids[ids.length - 1]).toBe(1_000 + MESSAGE_WINDOW + 2 * MESSAGE_PAGE);
    expect(s.conv(SID)!.olderPath).toContain(`before=${ids[0]}`);

    history = Array.from({ length: 8_000 }, (_, i) => msg(i + 1));
    const t = new Store();
    open(t);
    scrollUpToTheTop(t);
    open(t);
    expect(contiguous(t)).toEqual(history.slice(-MESSAGE_PAGE).map((m) => m.id));
    expect(t.newerPath(SID)).toBeNull();
  });
});

describe('paged insights and transcript in the store', () => {
  const insight = (id: number) => ({ id, session_id: `insights:${SID}`, text: `tip ${id}`, occurred_at: new Date(T0 / 1000 + id * 1000).toISOString(), draft: false });
  const turn = (id: number) => ({ id, session_id: `insights:${SID}`, speaker: 'A', text: `turn ${id}`, received_at: new Date(T0 / 1000 + id * 1000).toISOString() });

  it('opens on the newest page, adds older pages, and a reload of the newest page keeps the older path', () => {
    const s = new Store();
    s.loadConversation(SID, { insights: [5, 4, 3].map(insight), insightsOlderPath: '/i?before=3', transcript: [4, 5].map(turn), transcriptOlderPath: '/t?before=4' }, 0);
    const c = s.conv(SID)!;
    expect(c.insights.map((i) => i.id)).toEqual([5, 4, 3]);
    expect([c.insightsOlder, c.transcriptOlder]).toEqual(['/i?before=3', '/t?before=4']);
    s.loadOlderList(SID, 'insights', [2, 1].map(insight), null, 0);
    s.loadOlderList(SID, 'transcript', [2, 3].map(turn), '/t?before=2', 0);
    expect(c.insights.map((i) => i.id)).toEqual([5, 4, 3, 2, 1]);
    expect(c.transcript.map((t) => t.id)).toEqual([2, 3, 4, 5]);
    expect([c.insightsOlder, c.transcriptOlder]).toEqual([null, '/t?before=2']);
    // The newest page again (a reconnect): what was loaded stays, and so do the older paths.
    s.loadConversation(SID, { insights: [6, 5, 4].map(insight), insightsOlderPath: '/i?before=4', transcript: [5, 6].map(turn), transcriptOlderPath: '/t?before=5' }, 1);
    expect(c.insights.map((i) => i.id)).toEqual([6, 5, 4, 3, 2, 1]);
    expect(c.transcript.map((t) => t.id)).toEqual([2, 3, 4, 5, 6]);
    expect([c.insightsOlder, c.transcriptOlder]).toEqual([null, '/t?before=2']);
  });
});

describe('the virtual list when far rows leave the window', () => {
  function setup(n: number) {
    const scroller = document.createElement('div');
    document.body.append(scroller);
    Object.defineProperty(scroller, 'clientHeight', { value: 500, configurable: true });
    Object.defineProperty(scroller, 'clientWidth', { value: 600, configurable: true });
    let top = 0;
    Object.defineProperty(scroller, 'scrollTop', { get: () => top, set: (v: number) => (top = v), configurable: true });
    Object.defineProperty(scroller, 'scrollHeight', { get: () => items.length * 50, configurable: true });
    const items = Array.from({ length: n }, (_, i) => msg(i + 1));
    const list = new VList<ReturnType<typeof msg>>({
      scroller,
      key: (m) => String(m.id),
      estimate: () => 50,
      create: (m) => {
        const el = document.createElement('div');
        Object.defineProperty(el, 'offsetHeight', { value: 50 });
        el.textContent = m.text;
        return el;
      },
      update: () => {},
      overscanPx: 100,
    });
    list.reset(items, true);
    const scrollTo = (y: number) => {
      scroller.scrollTop = y;
      scroller.dispatchEvent(new Event('scroll'));
      list.render();
    };
    return { scroller, items, list, scrollTo };
  }

  it('keeps the row the user reads in place when rows leave at either end or come back at the end', () => {
    const { scroller, items, list, scrollTo } = setup(600);
    scrollTo(300 * 50); // row 301 at the top of the viewport
    items.splice(0, 200);
    list.dropped(200, 0);
    list.render();
    expect(scroller.scrollTop).toBe(100 * 50);
    expect(list.elementOf('301')).not.toBeNull();
    items.splice(items.length - 100, 100);
    list.dropped(0, 100);
    list.render();
    expect(scroller.scrollTop).toBe(100 * 50);
    expect(list.length).toBe(300);
    expect(list.renderedCount).toBeLessThan(30);

    // At the end of what is loaded (not of the chat): a page coming back there does not pull the
    // view down to its end.
    scrollTo(300 * 50 - 500);
    expect(list.atBottom).toBe(true);
    const at = scroller.scrollTop;
    items.push(...Array.from({ length: 200 }, (_, i) => msg(501 + i)));
    list.appended(200);
    list.render();
    expect(scroller.scrollTop).toBe(at);
    expect(list.atBottom).toBe(false);
    expect(list.elementOf('500')).not.toBeNull();
  });
});
