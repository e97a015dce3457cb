import { afterEach, describe, expect, it, vi } from 'vitest';
import { Store } from '../src/store';
import { HttpTransport, SseParser, sseToEvent, type StreamState } from '../src/transport';
import type { SwEvent } from '../src/types';

describe('SSE parser', () => {
  it('parses id / event / data and ignores comments', () => {
    const p = new SseParser();
    const out = p.push(': keepalive\n\nid: 7\nevent: message_added\ndata: {"id":7}\n\n');
    expect(out).toEqual([{ id: '7', event: 'message_added', data: '{"id":7}' }]);
  });

  it('handles chunks split anywhere, CRLF and CR line ends', () => {
    const text = 'id: 1\r\nevent: a\r\ndata: {"x":\r\ndata: 1}\r\n\r\nid: 2\rdata: two\r\r';
    for (let cut = 1; cut < text.length; cut++) {
      const p = new SseParser();
      const out = [...p.push(text.slice(0, cut)), ...p.push(text.slice(cut))];
      expect(out, `cut at ${cut}`).toEqual([
        { id: '1', event: 'a', data: '{"x":\n1}' },
        { id: '2', event: 'message', data: 'two' },
      ]);
    }
  });

  it('keeps the last id for following events and drops empty data', () => {
    const p = new SseParser();
    expect(p.push('id: 5\n\ndata: x\n\n')).toEqual([{ id: '5', event: 'message', data: 'x' }]);
  });

  it('sseToEvent takes the id from the JSON, else from the id line', () => {
    expect(sseToEvent({ id: '9', event: 'message_added', data: '{"id":9,"type":"message_added"}' })).toMatchObject({ id: 9 });
    expect(sseToEvent({ id: '9', event: 'message_added', data: '{"type":"message_added"}' })).toMatchObject({ id: 9, type: 'message_added' });
    expect(sseToEvent({ id: null, event: 'x', data: 'not json' })).toBeNull();
    // The app greets a fresh stream with `event: ready` / `data: {"cursor":N}` and no id: not an event.
    expect(sseToEvent({ id: null, event: 'ready', data: '{"cursor":12}' })).toBeNull();
    expect(sseToEvent({ id: null, event: 'x', data: '[1]' })).toBeNull();
  });
});

// ---- HttpTransport over a scripted fetch -------------------------------------------------------

const frame = (e: SwEvent) => `id: ${e.id}\nevent: ${e.type}\ndata: ${JSON.stringify(e)}\n\n`;
const mk = (id: number): SwEvent => ({
  id,
  type: 'message_added',
  session_id: 's',
  message: { id, session_id: 's', kind: 'assistant', text: `m${id}`, sort_key: id, draft: false },
});

interface Conn {
  url: string;
  headers: Record<string, string>;
  push(s: string): void;
  fail(): void;
  end(): void;
}

function scriptedFetch() {
  const conns: Conn[] = [];
  const waiters: ((c: Conn) => void)[] = [];
  const fetchFn = vi.fn(async (url: string, init: RequestInit) => {
    let ctrl!: ReadableStreamDefaultController<Uint8Array>;
    const body = new ReadableStream<Uint8Array>({ start: (c) => (ctrl = c) });
    const enc = new TextEncoder();
    const conn: Conn = {
      url,
      headers: init.headers as Record<string, string>,
      push: (s) => ctrl.enqueue(enc.encode(s)),
      fail: () => ctrl.error(new TypeError('network error')),
      end: () => ctrl.close(),
    };
    init.signal?.addEventListener('abort', () => {
      try {
        ctrl.error(new DOMException('aborted', 'AbortError'));
      } catch {
        /* closed */
      }
    });
    conns.push(conn);
    waiters.shift()?.(conn);
    return new Response(body, { status: 200, headers: { 'Content-Type': 'text/event-stream' } });
  });
  const next = () => new Promise<Conn>((r) => waiters.push(r));
  return { fetchFn, conns, next };
}

afterEach(() => {
  vi.unstubAllGlobals();
});

describe('HttpTransport', () => {
  it('sends the bearer token, resumes from the store cursor after a drop, and the store ends up gapless', async () => {
    const { fetchFn, next } = scriptedFetch();
    vi.stubGlobal('fetch', fetchFn);
    const store = new Store();
    const states: StreamState[] = [];
    const t = new HttpTransport('tok');
    const firstConn = next();
    const sub = t.subscribe(() => store.cursor, {
      events: (b) => store.applyBatch(b),
      state: (s) => states.push(s),
      resync: () => {},
    });
    const c1 = await firstConn;
    await sub.ready;
    expect(c1.headers.Authorization).toBe('Bearer tok');
    expect(c1.headers['Last-Event-ID']).toBeUndefined();
    expect(c1.url).toBe('/api/events');
    c1.push(frame(mk(1)) + frame(mk(2)));
    c1.push(frame(mk(3)).slice(0, 10));
    c1.push(frame(mk(3)).slice(10));
    await vi.waitFor(() => expect(store.cursor).toBe(3));

    const secondConn = next();
    c1.fail(); // network drop
    const c2 = await secondConn;
    expect(c2.headers['Last-Event-ID']).toBe('3');
    expect(c2.url).toBe('/api/events?after=3');
    // An overlapping replay (2, 3) followed by new events.
    c2.push([2, 3, 4, 5, 6].map((i) => frame(mk(i))).join(''));
    await vi.waitFor(() => expect(store.cursor).toBe(6));

    const thirdConn = next();
    c2.end(); // server closed the stream cleanly
    const c3 = await thirdConn;
    expect(c3.headers['Last-Event-ID']).toBe('6');
    c3.push(frame(mk(7)));
    await vi.waitFor(() => expect(store.cursor).toBe(7));

    expect(store.conv('s')!.messages.map((m) => m.text)).toEqual(['m1', 'm2', 'm3', 'm4', 'm5', 'm6', 'm7']);
    expect(states[0]).toBe('connecting');
    expect(states).toContain('reconnecting');
    expect(states.at(-1)).toBe('live');
    sub.stop();
  });

  it('asks for a resync when it comes back without having seen any event', async () => {
    const { fetchFn, next } = scriptedFetch();
    vi.stubGlobal('fetch', fetchFn);
    const resync = vi.fn();
    const first = next();
    const sub = new HttpTransport('tok').subscribe(() => 0, { events: () => {}, state: () => {}, resync });
    const c1 = await first;
    const second = next();
    c1.fail();
    await second;
    await vi.waitFor(() => expect(resync).toHaveBeenCalledTimes(1));
    sub.stop();
  });

  it('after a drop with a cursor it asks for the live state again (typing), never for a resync', async () => {
    const { fetchFn, next } = scriptedFetch();
    vi.stubGlobal('fetch', fetchFn);
    const store = new Store();
    const [resync, reconnected] = [vi.fn(), vi.fn()];
    const first = next();
    const sub = new HttpTransport('tok').subscribe(() => store.cursor, {
      events: (b) => store.applyBatch(b),
      state: () => {},
      resync,
      reconnected,
    });
    const c1 = await first;
    await sub.ready;
    expect(reconnected).not.toHaveBeenCalled();
    c1.push(frame(mk(1)));
    await vi.waitFor(() => expect(store.cursor).toBe(1));
    const second = next();
    c1.fail();
    const c2 = await second;
    expect(c2.headers['Last-Event-ID']).toBe('1');
    await vi.waitFor(() => expect(reconnected).toHaveBeenCalledTimes(1));
    expect(resync).not.toHaveBeenCalled();
    sub.stop();
  });

  it('reports unauthorized on 401', async () => {
    vi.stubGlobal(
      'fetch',
      vi.fn(async () => new Response('{"ok":false,"error":"unauthorized","message":"no"}', { status: 401 })),
    );
    const states: StreamState[] = [];
    const sub = new HttpTransport('bad').subscribe(() => 0, { events: () => {}, state: (s) => states.push(s), resync: () => {} });
    await vi.waitFor(() => expect(states).toContain('unauthorized'));
    sub.stop();
  });

  it('a failure while applying events is not mistaken for a dropped stream', async () => {
    const { fetchFn, next, conns } = scriptedFetch();
    vi.stubGlobal('fetch', fetchFn);
    const err = vi.spyOn(console, 'error').mockImplementation(() => {});
    let n = 0;
    const first = next();
    const sub = new HttpTransport('tok').subscribe(() => n, {
      events: (b) => {
        n = b[b.length - 1].id;
        if (n === 1) throw new Error('boom');
      },
      state: () => {},
      resync: () => {},
    });
    const c1 = await first;
    c1.push(frame(mk(1)));
    c1.push(frame(mk(2)));
    await vi.waitFor(() => expect(n).toBe(2));
    expect(conns.length).toBe(1);
    expect(err).toHaveBeenCalled();
    sub.stop();
  });

  it('api() sends JSON with the bearer token and parses the answer', async () => {
    const f = vi.fn(async (_url: string, _init: RequestInit) => new Response('{"session_id":"x"}', { status: 201 }));
    vi.stubGlobal('fetch', f);
    const r = await new HttpTransport('tok').api('POST', '/api/calls', { title: 't' });
    expect(r).toEqual({ status: 201, body: { session_id: 'x' } });
    const [url, init] = f.mock.calls[0];
    expect(url).toBe('/api/calls');
    expect(init.method).toBe('POST');
    expect((init.headers as Record<string, string>).Authorization).toBe('Bearer tok');
    expect((init.headers as Record<string, string>)['Content-Type']).toBe('application/json');
    expect(init.body).toBe('{"title":"t"}');
  });
});
