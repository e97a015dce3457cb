// @vitest-environment happy-dom
// The compact overlay: which call it follows, what it shows (newest insights, typing), that it
// is fed only by the transport's event stream and the control API, and that its input sends a
// message to the followed call. The transport here is an in-memory one (the real ones are
// exercised by the browser and window tests); the Store and the DOM code are the real ones.

import { describe, expect, it } from 'vitest';
import { isOverlayRoute, overlayChrome, overlayUrl, prefsError, toggleOverlay } from '../src/desktop';
import { Overlay, OVERLAY_INSIGHTS, overlayModel, pickCall } from '../src/overlay';
import { Store } from '../src/store';
import type { ApiResponse, EventSink, Subscription, Transport } from '../src/transport';
import type { Session, SwEvent } from '../src/types';

const T0 = Date.UTC(2026, 10, 29, 12, 0, 0);

const session = (sid: string, over: Partial<Session> = {}): Session =>
  ({
    session_id: sid,
    kind: 'chat',
    is_call: true,
    title: null,
    created_at: new Date(T0).toISOString(),
    ended_at: null,
    insights_session_id: `insights:${sid}`,
    ...over,
  }) as Session;

const insight = (sid: string, id: number, text: string) => ({
  id,
  session_id: sid,
  text,
  task_id: 't',
  message_id: `i-${id}`,
  occurred_at: new Date(T0 + id * 1000).toISOString(),
  received_at: new Date(T0 + id * 1000).toISOString(),
  offset_ms: id * 1000,
  draft: false,
});

class MemTransport implements Transport {
  readonly kind = 'http' as const;
  sink: EventSink | null = null;
  calls: { method: string; path: string; body?: unknown }[] = [];
  constructor(private answers: Record<string, unknown>) {}
  async api<T>(method: string, path: string, body?: unknown): Promise<ApiResponse<T>> {
    this.calls.push({ method, path, body });
    if (method === 'POST') {
      // A stored user message, as `POST …/messages` answers.
      const text = (body as { text?: string } | undefined)?.text ?? '';
      const sid = path.split('/')[3];
      return { status: 201, body: { id: 99, session_id: sid, kind: 'user', text, message_id: 'mid-99', delivery: 'pending', received_at: new Date(T0).toISOString(), sort_key: 99 } as T };
    }
    return { status: 200, body: (this.answers[path] ?? []) as T };
  }
  subscribe(_cursor: () => number, sink: EventSink): Subscription {
    this.sink = sink;
    return { ready: Promise.resolve(), stop: () => undefined };
  }
}

const flush = () => new Promise((r) => setTimeout(r, 0));

describe('overlay model', () => {
  it('follows the newest live call, else the newest call', () => {
    const old = session('a', { created_at: new Date(T0 - 60_000).toISOString() });
    const ended = session('b', { ended_at: new Date(T0).toISOString() });
    const chat = session('c', { is_call: false, created_at: new Date(T0 + 60_000).toISOString() });
    expect(pickCall([chat, ended, old])?.session_id).toBe('a');
    expect(pickCall([chat, ended])?.session_id).toBe('b');
    expect(pickCall([chat])).toBeNull();
  });

  it('shows the newest insights first, at most a handful, and the typing state', () => {
    const store = new Store();
    store.loadSessions([session('s')], 0);
    let id = 1;
    for (let i = 1; i <= OVERLAY_INSIGHTS + 3; i++) {
      store.apply({ id: id++, type: 'insight_added', session_id: 'insights:s', insight: insight('s', i, `tip ${i}`) } as SwEvent);
    }
    let m = overlayModel(store);
    expect(m.live).toBe(true);
    expect(m.insights.map((x) => x.text)).toEqual([8, 7, 6, 5, 4].map((n) => `tip ${n}`));
    expect(m.typing).toBeNull();
    store.apply({ id: 0, live: true, type: 'typing_started', session_id: 'insights:s', typing: { session_id: 'insights:s', scope: 'insights', label: null, since: new Date(T0).toISOString() } } as SwEvent);
    m = overlayModel(store);
    expect(m.typing).toBe('Assistant is typing…');
  });
});

describe('overlay view', () => {
  it('renders insights arriving on the stream and sends a message to the call', async () => {
    const t = new MemTransport({
      '/api/sessions': [session('live-1')],
      // The newest few only: one short page.
      [`/api/sessions/live-1/insights?limit=${OVERLAY_INSIGHTS}`]: { items: [insight('live-1', 1, 'Ask about **budget**')], next: null },
    });
    const mount = document.createElement('div');
    document.body.append(mount);
    const chrome = { draggable: true, openMain: () => undefined, close: () => undefined };
    const ov = new Overlay(mount, t, chrome);
    await ov.start();
    await flush();
    await flush();
    expect(mount.querySelector('#overlay-title')?.textContent).toBe('Live call');
    expect(mount.querySelector('.ov-header')?.hasAttribute('data-tauri-drag-region')).toBe(true);
    expect(mount.querySelector('#overlay-insights')?.textContent).toContain('Ask about budget');
    expect(mount.querySelector('#overlay-insights strong')?.textContent).toBe('budget');

    t.sink!.events([{ id: 5, type: 'insight_added', session_id: 'insights:live-1', insight: insight('live-1', 2, 'Mention the pilot') } as SwEvent]);
    await flush();
    const items = [...mount.querySelectorAll('.ov-insight')].map((li) => li.querySelector('.ov-text')?.textContent);
    expect(items).toEqual(['Mention the pilot', 'Ask about budget']);
    // The followed call's insights, typing and newest messages (the pinned questions and answers
    // come from the store, not from this window's memory), and the assistant's state: no second stream.
    expect(t.calls.map((c) => c.path).sort()).toEqual(
      ['/api/sessions', `/api/sessions/live-1/insights?limit=${OVERLAY_INSIGHTS}`, '/api/sessions/live-1/typing', '/api/sessions/live-1/messages?limit=200', '/api/assistant'].sort(),
    );

    const input = mount.querySelector<HTMLInputElement>('#overlay-input')!;
    input.value = '  what next?  ';
    mount.querySelector('form')!.dispatchEvent(new Event('submit', { cancelable: true }));
    await flush();
    expect(t.calls.at(-1)).toEqual({ method: 'POST', path: '/api/sessions/live-1/messages', body: { text: 'what next?' } });
    expect(input.value).toBe('');
    // The question shows under the insights until its answer comes, then the answer.
    const thread = mount.querySelector<HTMLElement>('#overlay-thread')!;
    expect(thread.hidden).toBe(false);
    expect(thread.querySelector('.ov-question')?.textContent).toContain('what next?');
    expect(thread.querySelector('.ov-waiting')?.textContent).toBe('Waiting for the answer…');
    t.sink!.events([
      {
        id: 6,
        type: 'message_added',
        session_id: 'live-1',
        message: { id: 100, session_id: 'live-1', kind: 'assistant', text: 'Ask for the **pilot** date.', message_id: 'r-1', user_message_id: 'mid-99', received_at: new Date(T0 + 1000).toISOString(), sort_key: 100 },
      } as SwEvent,
      // Another chat message (not asked here) stays out of the overlay.
      {
        id: 7,
        type: 'message_added',
        session_id: 'live-1',
        message: { id: 101, session_id: 'live-1', kind: 'assistant', text: 'Unrelated', message_id: 'r-2', user_message_id: 'other', received_at: new Date(T0 + 2000).toISOString(), sort_key: 101 },
      } as SwEvent,
    ]);
    await flush();
    expect(thread.querySelector('.ov-waiting')).toBeNull();
    expect([...thread.querySelectorAll('.ov-reply')].map((r) => r.textContent)).toEqual(['AssistantAsk for the pilot date.']);
    expect(thread.querySelector('.ov-reply strong')?.textContent).toBe('pilot');
  });

  it('without a call: says so and the input is off', async () => {
    const t = new MemTransport({ '/api/sessions': [] });
    const mount = document.createElement('div');
    const ov = new Overlay(mount, t, { draggable: false, openMain: () => undefined, close: () => undefined });
    await ov.start();
    await flush();
    expect(mount.querySelector('#overlay-title')?.textContent).toBe('No call');
    expect(mount.querySelector<HTMLInputElement>('#overlay-input')!.disabled).toBe(true);
    expect(mount.querySelector('.ov-header')?.hasAttribute('data-tauri-drag-region')).toBe(false);
    expect(mount.querySelector('#overlay-grip')).toBeNull();
  });

  it('the desktop overlay drags by its whole header and resizes from its grip', async () => {
    const t = new MemTransport({ '/api/sessions': [] });
    const mount = document.createElement('div');
    let resizes = 0;
    const ov = new Overlay(mount, t, { draggable: true, openMain: () => undefined, close: () => undefined, startResize: () => resizes++ });
    await ov.start();
    expect(mount.querySelector('.ov-header')?.getAttribute('data-tauri-drag-region')).toBe('deep');
    const grip = mount.querySelector<HTMLElement>('#overlay-grip')!;
    grip.dispatchEvent(new MouseEvent('mousedown', { button: 2, bubbles: true }));
    expect(resizes).toBe(0);
    const press = new MouseEvent('mousedown', { button: 0, bubbles: true, cancelable: true });
    grip.dispatchEvent(press);
    expect(resizes).toBe(1);
    expect(press.defaultPrevented).toBe(true);
  });
});

describe('desktop helpers', () => {
  it('the overlay route and the call bar button', () => {
    expect(isOverlayRoute({ search: '?view=overlay' })).toBe(true);
    expect(isOverlayRoute({ search: '?view=main' })).toBe(false);
    expect(isOverlayRoute({ search: '' })).toBe(false);
    expect(overlayUrl({ pathname: '/' })).toBe('/?view=overlay');
    const opened: string[] = [];
    toggleOverlay(null, (u) => opened.push(u));
    expect(opened).toEqual([`${location.pathname}?view=overlay`]);
    const invoked: string[] = [];
    toggleOverlay(async <T,>(c: string) => {
      invoked.push(c);
      return true as T;
    });
    expect(invoked).toEqual(['overlay_toggle']);
  });

  it('the desktop chrome resizes through the window API; the browser has no grip', async () => {
    const invoked: [string, unknown][] = [];
    const chrome = overlayChrome(async <T,>(c: string, a?: Record<string, unknown>) => {
      invoked.push([c, a]);
      return undefined as T;
    });
    chrome.startResize?.();
    expect(invoked).toEqual([['plugin:window|start_resize_dragging', { label: 'overlay', value: 'SouthEast' }]]);
    expect(overlayChrome(null).startResize).toBeUndefined();
    expect(overlayChrome(null).draggable).toBe(false);
  });

  it('a refused setting reads as a sentence', () => {
    expect(prefsError({ error: 'invalid_shortcut', message: '"Ctrl+" is not a shortcut; write it like Ctrl+Shift+Space' })).toBe(
      '"Ctrl+" is not a shortcut; write it like Ctrl+Shift+Space.',
    );
    expect(prefsError(new Error('boom'))).toBe('boom');
  });
});
