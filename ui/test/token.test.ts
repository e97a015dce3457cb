// @vitest-environment happy-dom
import { beforeEach, describe, expect, it, vi } from 'vitest';
import { isTauri, takeUiToken, TauriTransport } from '../src/transport';
import { Store } from '../src/store';

describe('UI token from the URL fragment', () => {
  beforeEach(() => {
    sessionStorage.clear();
  });

  it('takes #token=…, keeps it in sessionStorage and removes it from the address bar', () => {
    history.replaceState(null, '', '/?x=1#token=abc%2Fdef');
    expect(takeUiToken()).toBe('abc/def');
    expect(location.hash).toBe('');
    expect(location.search).toBe('?x=1');
    expect(Object.values(sessionStorage)).toContain('abc/def');
    // Later loads of the tab find it in sessionStorage.
    expect(takeUiToken()).toBe('abc/def');
  });

  it('returns null without a token anywhere', () => {
    history.replaceState(null, '', '/');
    expect(takeUiToken()).toBeNull();
  });
});

describe('Tauri transport', () => {
  it('is detected through window.__TAURI__ only', () => {
    expect(isTauri()).toBe(false);
  });

  it('uses invoke("api") for the routes and listen("sw-event") + events_since for events', async () => {
    let listener: ((e: { payload: unknown }) => void) | null = null;
    const invoke = vi.fn(async (cmd: string, args?: Record<string, unknown>) => {
      if (cmd === 'api') return { status: 200, body: { echo: args } };
      if (cmd === 'events_since') {
        // A catch-up that overlaps with what the live listener already delivered.
        return [2, 3].map((id) => ({ id, type: 'message_added', session_id: 's', message: { id, session_id: 's', kind: 'assistant', text: `m${id}`, sort_key: id } }));
      }
      throw new Error(cmd);
    });
    const listen = vi.fn(async (_name: string, cb: (e: { payload: unknown }) => void) => {
      listener = cb;
      return () => (listener = null);
    });
    const t = new TauriTransport({ core: { invoke: invoke as never }, event: { listen: listen as never } });

    const r = await t.api('POST', '/api/calls', { title: 'x' });
    expect(invoke).toHaveBeenCalledWith('api', { method: 'POST', path: '/api/calls', body: { title: 'x' } });
    expect(r.status).toBe(200);

    const store = new Store();
    const sub = t.subscribe(() => store.cursor, { events: (b) => store.applyBatch(b), state: () => {}, resync: () => {} });
    await sub.ready;
    expect(listen).toHaveBeenCalledWith('sw-event', expect.any(Function));
    listener!({ payload: { id: 1, type: 'message_added', session_id: 's', message: { id: 1, session_id: 's', kind: 'assistant', text: 'm1', sort_key: 1 } } });
    listener!({ payload: JSON.stringify({ id: 2, type: 'message_added', session_id: 's', message: { id: 2, session_id: 's', kind: 'assistant', text: 'm2', sort_key: 2 } }) });
    expect(store.cursor).toBe(2);
    // The window was hidden and comes back: catch up from the cursor.
    document.dispatchEvent(new Event('visibilitychange'));
    await vi.waitFor(() => expect(invoke).toHaveBeenCalledWith('events_since', { after: 2, limit: 500 }));
    await vi.waitFor(() => expect(store.cursor).toBe(3));
    expect(store.conv('s')!.messages.map((m) => m.text)).toEqual(['m1', 'm2', 'm3']);
    sub.stop();
    expect(listener).toBeNull();
  });
});
