// @vitest-environment happy-dom
// Paged conversations in the store, the search box of Past calls, export buttons, and the
// virtual list keeping the reader's place when an older page goes in front.
// (happy-dom: the DOM is real, layout is not — the list's geometry is given by stubbing the
// scroller's sizes and the rows' offsetHeight.)
import { describe, expect, it, vi } from 'vitest';
import { HistoryView } from '../src/history';
import { SEARCH_DEBOUNCE_MS, SearchView, snippetNodes, type SearchHit } from '../src/search';
import { type Change, Store } from '../src/store';
import { VList } from '../src/vlist';

const SID = 'chat-1';
const T0 = Date.UTC(2026, 10, 29, 12, 0, 0) * 1000;

function msg(id: number, text = `m${id}`) {
  const sortKey = T0 + id * 1000;
  return {
    id,
    session_id: SID,
    kind: 'assistant',
    text,
    message_id: `m-${id}`,
    task_id: 't',
    user_message_id: null,
    error_code: null,
    occurred_at: null,
    received_at: new Date(sortKey / 1000).toISOString(),
    sort_key: sortKey,
    draft: false,
  };
}

const range = (a: number, b: number) => Array.from({ length: b - a }, (_, i) => msg(a + i));
const ids = (s: Store) => s.conv(SID)?.messages.map((m) => m.id) ?? [];

describe('a conversation loaded one page at a time', () => {
  it('opens on the newest page, prepends older pages once each, and live events still land at the end', () => {
    const s = new Store();
    const seen: Change[] = [];
    s.subscribe((c) => seen.push(c));
    s.loadConversation(SID, { messages: range(200, 300), olderPath: '/p?before=200' }, 0);
    expect(ids(s)).toEqual(range(200, 300).map((m) => m.id));
    expect(s.conv(SID)?.olderPath).toBe('/p?before=200');

    // A live message after the page.
    s.apply({ id: 1000, type: 'message_added', session_id: SID, message: msg(300) });
    seen.length = 0;
    const shared = s.conv(SID)?.messages;
    expect(s.loadOlder(SID, range(100, 200), '/p?before=100', 999)).toBe(100);
    // In place: the chat's list holds the same array.
    expect(s.conv(SID)?.messages).toBe(shared);
    expect(seen).toEqual([{ kind: 'messages-prepended', sessionId: SID, count: 100 }]);
    expect(ids(s)).toEqual(range(100, 301).map((m) => m.id));
    // The same page again (a retry, an overlap): nothing changes but the path.
    expect(s.loadOlder(SID, range(100, 200), '/p?before=100', 999)).toBe(0);
    expect(s.loadOlder(SID, range(0, 100), null, 999)).toBe(100);
    expect(ids(s)).toEqual(range(0, 301).map((m) => m.id));
    expect(s.conv(SID)?.olderPath).toBeNull();
  });

  it('a reload of the newest page keeps the older pages and where to go on', () => {
    const s = new Store();
    s.loadConversation(SID, { messages: range(200, 300), olderPath: '/p?before=200' }, 0);
    s.loadOlder(SID, range(100, 200), '/p?before=100', 0);
    // A resync loads the newest page again (one newer message meanwhile).
    s.loadConversation(SID, { messages: range(201, 301), olderPath: '/p?before=201' }, 5);
    expect(ids(s)).toEqual(range(100, 301).map((m) => m.id));
    expect(s.conv(SID)?.olderPath).toBe('/p?before=100');
  });

  it('an older page never overwrites what an event changed after it was requested', () => {
    const s = new Store();
    s.loadConversation(SID, { messages: range(5, 10), olderPath: '/p?before=5' }, 0);
    s.apply({ id: 50, type: 'message_added', session_id: SID, message: msg(3, 'live') });
    // Requested at cursor 40 (before the event): its copy of message 3 is older.
    s.loadOlder(SID, [msg(3, 'stale'), msg(4)], null, 40);
    expect(s.conv(SID)?.messages.map((m) => m.text)).toEqual(['live', 'm4', 'm5', 'm6', 'm7', 'm8', 'm9']);
  });

  it('the whole list (no paging) has no older path', () => {
    const s = new Store();
    s.loadConversation(SID, { messages: range(0, 5) }, 0);
    expect(s.conv(SID)?.olderPath).toBeNull();
  });
});

describe('the virtual list and older pages', () => {
  function setup(n: number) {
    const scroller = document.createElement('div');
    document.body.append(scroller);
    Object.defineProperty(scroller, 'clientHeight', { value: 500, configurable: true });
    Object.defineProperty(scroller, 'clientWidth', { value: 600, configurable: true });
    let top = 0;
    Object.defineProperty(scroller, 'scrollTop', {
      get: () => top,
      set: (v: number) => (top = v),
      configurable: true,
    });
    Object.defineProperty(scroller, 'scrollHeight', { get: () => items.length * 50, configurable: true });
    const items = range(1000 - n, 1000);
    const list = new VList<ReturnType<typeof msg>>({
      scroller,
      key: (m) => String(m.id),
      estimate: () => 50,
      create: (m) => {
        const el = document.createElement('div');
        el.textContent = m.text;
        Object.defineProperty(el, 'offsetHeight', { value: 50 });
        return el;
      },
      update: () => {},
      overscanPx: 100,
    });
    list.reset(items, true);
    return { scroller, items, list, top: () => top };
  }

  it('keeps the row the user reads in place when a page goes in front, with a bounded DOM', () => {
    const { scroller, items, list } = setup(200);
    expect(list.renderedCount).toBeLessThan(30);
    // The user scrolls to the top of what is loaded.
    scroller.scrollTop = 0;
    scroller.dispatchEvent(new Event('scroll'));
    list.render();
    const firstShown = items[0].id;
    items.unshift(...range(600, 800));
    list.prepended(200);
    list.render();
    // The same row is at the top of the viewport: 200 rows of 50 px above it now.
    expect(scroller.scrollTop).toBe(200 * 50);
    expect(list.elementOf(String(firstShown))).not.toBeNull();
    expect(list.renderedCount).toBeLessThan(30);
  });

  it('scrolls to a row by key', () => {
    const { scroller, list } = setup(300);
    expect(list.scrollToKey('750')).toBe(true);
    // Row index 50 (id 750) sits a third down the 500 px viewport.
    expect(scroller.scrollTop).toBe(50 * 50 - Math.round(500 / 3));
    expect(list.elementOf('750')).not.toBeNull();
    expect(list.scrollToKey('1')).toBe(false);
  });
});

const hit = (over: Partial<SearchHit> = {}): SearchHit => ({
  session_id: 's1',
  title: 'Pricing call',
  is_call: true,
  session_created_at: '2026-11-29T12:00:00Z',
  kind: 'transcript',
  message_id: 42,
  role: null,
  time: '2026-11-29T12:05:00Z',
  snippet: '…we loved Zanzibar, café',
  highlights: [[10, 18]],
  ...over,
});

describe('search in Past calls', () => {
  it('marks the matches by code point, never as HTML', () => {
    const p = document.createElement('p');
    p.append(...snippetNodes('😀 <b>café</b> tea', [[5, 9], [14, 17]]));
    expect(p.innerHTML).toBe('😀 &lt;b&gt;<mark>café</mark>&lt;/b&gt; <mark>tea</mark>');
    const q = document.createElement('p');
    q.append(...snippetNodes('abc', [[2, 9], [-1, 1]]));
    expect(q.innerHTML).toBe('abc');
  });

  it('searches after a pause in typing, shows the newest answer only, and jumps on a click', async () => {
    vi.useFakeTimers();
    try {
      const asked: string[] = [];
      let release: (h: SearchHit[]) => void = () => {};
      const search = vi.fn((q: string) => {
        asked.push(q);
        return q === 'zanz' ? new Promise<SearchHit[]>((r) => (release = r)) : Promise.resolve([hit(), hit({ kind: 'chat', role: 'user', message_id: 7 })]);
      });
      const jump = vi.fn();
      const v = new SearchView({ search, jump });
      document.body.append(v.el);
      v.input.value = 'zanz';
      v.input.dispatchEvent(new Event('input'));
      v.input.value = 'zanzi';
      v.input.dispatchEvent(new Event('input'));
      expect(search).not.toHaveBeenCalled();
      await vi.advanceTimersByTimeAsync(SEARCH_DEBOUNCE_MS);
      expect(asked).toEqual(['zanzi']);
      const items = v.el.querySelectorAll<HTMLButtonElement>('.search-hit-item');
      expect(items.length).toBe(2);
      expect(items[0].dataset.kind).toBe('transcript');
      expect(items[0].querySelector('mark')?.textContent).toBe('Zanzibar');
      expect(items[1].textContent).toContain('You:');
      expect(v.el.querySelector('[role=status]')?.textContent).toBe('2 results');

      // An older query answering late is dropped.
      v.input.value = 'zanz';
      v.input.dispatchEvent(new KeyboardEvent('keydown', { key: 'Enter' }));
      v.input.value = 'zanzi';
      await v.run();
      release([]);
      await vi.advanceTimersByTimeAsync(0);
      expect(v.el.querySelectorAll('.search-hit-item').length).toBe(2);

      items[1].click();
      expect(jump).toHaveBeenCalledWith(expect.objectContaining({ message_id: 7, kind: 'chat' }));
      // Escape clears the box and the results.
      v.input.dispatchEvent(new KeyboardEvent('keydown', { key: 'Escape' }));
      expect(v.active).toBe(false);
      expect(v.el.querySelectorAll('.search-hit-item').length).toBe(0);
    } finally {
      vi.useRealTimers();
    }
  });

  it('shows why a search failed', async () => {
    const v = new SearchView({ search: () => Promise.reject(new Error('Search failed: query_too_long')), jump: () => {} });
    v.input.value = 'x';
    await v.run();
    expect(v.el.querySelector('[role=status]')?.textContent).toBe('Search failed: query_too_long');
  });

  it('hides the session list while results are shown, and each call has its export buttons', async () => {
    const exported: [string, string][] = [];
    const view = new HistoryView({
      open: () => {},
      newChat: async () => {},
      search: async () => [hit()],
      jump: () => {},
      export: async (sid, format) => void exported.push([sid, format]),
    });
    view.render([{ session_id: 's1', kind: 'chat', is_call: true, title: 'Pricing call', created_at: '2026-11-29T12:00:00Z', ended_at: '2026-11-29T13:00:00Z', insights_session_id: 'insights:s1' }], null);
    const list = view.panel.querySelector<HTMLElement>('#history')!;
    expect(list.hidden).toBe(false);
    view.search!.input.value = 'zanzibar';
    await view.search!.run();
    expect(list.hidden).toBe(true);
    view.search!.clear();
    expect(list.hidden).toBe(false);
    for (const b of view.panel.querySelectorAll<HTMLButtonElement>('[data-export]')) b.click();
    await Promise.resolve();
    expect(exported).toEqual([
      ['s1', 'md'],
      ['s1', 'json'],
    ]);
  });
});

describe("the window's catch-up", () => {
  it('asks for one page at a time from the last event of the page before, into the store without gaps or repeats', async () => {
    const { CATCH_UP_PAGE, TauriTransport } = await import('../src/transport');
    // The log: 1,234 events whose ids skip (messages and events share one sequence).
    const log = Array.from({ length: 1234 }, (_, i) => ({ id: 10 + i * 3, type: 'message_added', session_id: SID, message: msg(10 + i * 3) }));
    const asked: { after: number; limit?: number }[] = [];
    const tauri = {
      core: {
        invoke: async (cmd: string, args: { after: number; limit?: number }) => {
          expect(cmd).toBe('events_since');
          asked.push(args);
          return log.filter((e) => e.id > args.after).slice(0, args.limit ?? Infinity);
        },
      },
      event: { listen: async () => () => {} },
    };
    const store = new Store();
    store.apply(log[0]); // the view had seen the first event
    const sub = new TauriTransport(tauri as never).subscribe(() => store.cursor, {
      events: (b) => void store.applyBatch(b),
      state: () => {},
      resync: () => {},
    });
    await sub.ready;
    sub.stop();
    expect(asked.every((a) => a.limit === CATCH_UP_PAGE)).toBe(true);
    expect(asked.map((a) => a.after)).toEqual([10, log[500].id, log[1000].id]);
    expect(ids(store)).toEqual(log.map((e) => e.id));
  });
});
