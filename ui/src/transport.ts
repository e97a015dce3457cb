// The one transport module: the rest of the UI talks to the app only through `Transport`.
//
// - Browser (headless mode): the control API over fetch with `Authorization: Bearer <ui_token>`,
//   and the SSE stream `GET /api/events` read with streaming fetch (so the token travels in a
//   header, never in a URL), resumed with `Last-Event-ID` / `?after=` from the store's cursor.
// - Tauri window: `invoke('api', {method, path, body})` for the very same routes, events from
//   `listen('sw-event')`, catch-up with `invoke('events_since', {after})`.

import type { SwEvent } from './types';

export interface ApiResponse<T = unknown> {
  status: number;
  body: T;
}

export type StreamState = 'connecting' | 'live' | 'reconnecting' | 'unauthorized';

export interface EventSink {
  /** Events in stream order; a batch is what arrived together (one network read). */
  events(batch: SwEvent[]): void;
  state(state: StreamState): void;
  /** The stream came back without a known cursor (no event seen yet): reload the snapshot. */
  resync(): void;
  /**
   * The stream came back after a drop and resumed from its cursor: the log's events are all
   * there, but live-only ones sent meanwhile (typing indicators) were missed; re-read that state.
   */
  reconnected?(): void;
}

export interface Subscription {
  /** Resolves once the subscription is in place: a snapshot loaded after this misses nothing. */
  ready: Promise<void>;
  stop(): void;
}

export interface Transport {
  readonly kind: 'tauri' | 'http';
  /** `path` is the control API route itself, e.g. `/api/calls`. */
  api<T = unknown>(method: string, path: string, body?: unknown): Promise<ApiResponse<T>>;
  /** Delivers every event after `cursor()`, then live ones; after a drop it resumes from `cursor()`. */
  subscribe(cursor: () => number, sink: EventSink): Subscription;
}

// ---------------------------------------------------------------------------------------------
// SSE parsing (WHATWG "event stream interpretation"), independent of the network.

export interface SseMessage {
  id: string | null;
  event: string;
  data: string;
}

export class SseParser {
  private buf = '';
  private data: string[] = [];
  private event = '';
  private id: string | null = null;
  private sawCR = false;

  /** Feeds decoded text; returns the messages completed by it. */
  push(text: string): SseMessage[] {
    const out: SseMessage[] = [];
    let s = text;
    if (this.sawCR && s.startsWith('\n')) s = s.slice(1); // CRLF split across two reads
    this.sawCR = false;
    this.buf += s;
    let start = 0;
    for (;;) {
      let i = start;
      const n = this.buf.length;
      while (i < n) {
        const c = this.buf.charCodeAt(i);
        if (c === 10 || c === 13) break;
        i++;
      }
      if (i >= n) break;
      const line = this.buf.slice(start, i);
      if (this.buf.charCodeAt(i) === 13) {
        if (i + 1 < n) {
          if (this.buf.charCodeAt(i + 1) === 10) i++;
        } else {
          this.sawCR = true;
        }
      }
      start = i + 1;
      this.line(line, out);
    }
    this.buf = this.buf.slice(start);
    return out;
  }

  private line(line: string, out: SseMessage[]): void {
    if (line === '') {
      if (this.data.length > 0) {
        out.push({ id: this.id, event: this.event || 'message', data: this.data.join('\n') });
      }
      this.data = [];
      this.event = '';
      return;
    }
    if (line.charCodeAt(0) === 58) return; // ':' comment (keepalive)
    const colon = line.indexOf(':');
    const field = colon < 0 ? line : line.slice(0, colon);
    let value = colon < 0 ? '' : line.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'data') this.data.push(value);
    else if (field === 'event') this.event = value;
    else if (field === 'id') {
      if (!value.includes('\0')) this.id = value;
    }
  }
}

/** Turns one SSE message into an event; `null` for anything that is not an event object. */
export function sseToEvent(msg: SseMessage): SwEvent | null {
  let v: unknown;
  try {
    v = JSON.parse(msg.data);
  } catch {
    return null;
  }
  if (!v || typeof v !== 'object' || Array.isArray(v)) return null;
  const ev = v as SwEvent;
  if (ev.live === true) {
    // A live-only event (partial transcript, audio level): no cursor, never replayed.
    ev.id = 0;
    if (typeof ev.type !== 'string') ev.type = msg.event;
    return ev;
  }
  if (typeof ev.id !== 'number') {
    // Frames without any id (e.g. a `ready` greeting carrying the current cursor) are not events.
    const raw = ev.id ?? msg.id;
    if (raw === undefined || raw === null || raw === '') return null;
    const n = Number(raw);
    if (!Number.isFinite(n)) return null;
    ev.id = n;
  }
  if (typeof ev.type !== 'string' && msg.event !== 'message') ev.type = msg.event;
  return ev;
}

// ---------------------------------------------------------------------------------------------
// Browser transport.

const TOKEN_KEY = 'stagewhisper.ui_token';

/**
 * The UI token: taken from the `#token=…` fragment (then kept in sessionStorage and removed from
 * the address bar), else from sessionStorage.
 */
export function takeUiToken(loc: Location = location, storage: Storage = sessionStorage): string | null {
  const m = /(?:^#|&)token=([^&]*)/.exec(loc.hash);
  if (m) {
    let token = m[1];
    try {
      token = decodeURIComponent(token);
    } catch {
      /* keep it raw */
    }
    try {
      storage.setItem(TOKEN_KEY, token);
    } catch {
      /* storage disabled: the token still works for this page */
    }
    history.replaceState(history.state, '', loc.pathname + loc.search);
    return token || null;
  }
  try {
    return storage.getItem(TOKEN_KEY);
  } catch {
    return null;
  }
}

export function forgetUiToken(storage: Storage = sessionStorage): void {
  try {
    storage.removeItem(TOKEN_KEY);
  } catch {
    /* ignore */
  }
}

export function storeUiToken(token: string, storage: Storage = sessionStorage): void {
  try {
    storage.setItem(TOKEN_KEY, token);
  } catch {
    /* ignore */
  }
}

/** Hands a batch to the sink; a failure there is a bug to report, not a dropped stream. */
function deliver(sink: EventSink, batch: SwEvent[]): void {
  try {
    sink.events(batch);
  } catch (e) {
    console.error('stagewhisper: applying events failed', e);
  }
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Reconnect delays: quick first, then backing off to 5 s, with a little jitter. */
export function backoffMs(attempt: number): number {
  const base = Math.min(5000, 250 * 2 ** Math.min(attempt, 5));
  return Math.round(base * (0.8 + Math.random() * 0.4));
}

/** No byte (not even the 15 s keepalive) for this long means the stream is dead. */
const STALL_MS = 40_000;
/** Events per `events_since` answer while the window catches up (the core's page size). */
export const CATCH_UP_PAGE = 500;

export class HttpTransport implements Transport {
  readonly kind = 'http' as const;

  constructor(
    private token: string,
    private base = '',
  ) {}

  setToken(token: string): void {
    this.token = token;
  }

  async api<T = unknown>(method: string, path: string, body?: unknown): Promise<ApiResponse<T>> {
    const headers: Record<string, string> = { Authorization: `Bearer ${this.token}`, Accept: 'application/json' };
    const init: RequestInit = { method, headers, cache: 'no-store' };
    if (body !== undefined && body !== null) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    const res = await fetch(`${this.base}${path}`, init);
    const text = await res.text();
    let parsed: unknown = text;
    if (text) {
      try {
        parsed = JSON.parse(text);
      } catch {
        parsed = text;
      }
    } else {
      parsed = null;
    }
    return { status: res.status, body: parsed as T };
  }

  subscribe(cursor: () => number, sink: EventSink): Subscription {
    let stopped = false;
    let ctrl: AbortController | null = null;
    let markReady!: () => void;
    const ready = new Promise<void>((r) => (markReady = r));

    const run = async () => {
      let attempt = 0;
      let connectedOnce = false;
      while (!stopped) {
        const after = cursor();
        const headers: Record<string, string> = {
          Authorization: `Bearer ${this.token}`,
          Accept: 'text/event-stream',
        };
        let url = `${this.base}/api/events`;
        if (after > 0) {
          headers['Last-Event-ID'] = String(after);
          url += `?after=${after}`;
        }
        sink.state(connectedOnce || attempt > 0 ? 'reconnecting' : 'connecting');
        ctrl = new AbortController();
        const thisCtrl = ctrl;
        let stall: ReturnType<typeof setTimeout> | undefined;
        const arm = () => {
          clearTimeout(stall);
          stall = setTimeout(() => thisCtrl.abort(), STALL_MS);
        };
        try {
          arm();
          const res = await fetch(url, { headers, signal: thisCtrl.signal, cache: 'no-store' });
          if (res.status === 401) {
            clearTimeout(stall);
            sink.state('unauthorized');
            await sleep(10_000);
            continue;
          }
          if (!res.ok || !res.body) throw new Error(`events: HTTP ${res.status}`);
          attempt = 0;
          sink.state('live');
          if (connectedOnce && after === 0) sink.resync();
          else if (connectedOnce) sink.reconnected?.();
          connectedOnce = true;
          markReady();
          const parser = new SseParser();
          const reader = res.body.getReader();
          const dec = new TextDecoder();
          arm();
          for (;;) {
            const { value, done } = await reader.read();
            if (done) break;
            arm();
            const msgs = parser.push(dec.decode(value, { stream: true }));
            if (msgs.length === 0) continue;
            const batch: SwEvent[] = [];
            for (const m of msgs) {
              const ev = sseToEvent(m);
              if (ev) batch.push(ev);
            }
            if (batch.length) deliver(sink, batch);
          }
        } catch {
          /* dropped: fall through to reconnect */
        } finally {
          clearTimeout(stall);
        }
        if (stopped) return;
        sink.state('reconnecting');
        await sleep(backoffMs(attempt++));
      }
    };
    void run();
    return {
      ready,
      stop: () => {
        stopped = true;
        ctrl?.abort();
      },
    };
  }
}

// ---------------------------------------------------------------------------------------------
// Tauri transport.

interface TauriGlobal {
  core: { invoke<T>(cmd: string, args?: Record<string, unknown>): Promise<T> };
  event: {
    listen<T>(name: string, cb: (e: { payload: T }) => void): Promise<() => void>;
  };
}

declare global {
  interface Window {
    __TAURI__?: TauriGlobal;
  }
}

export function isTauri(): boolean {
  return typeof window !== 'undefined' && !!window.__TAURI__?.core?.invoke;
}

function asEvent(v: unknown): SwEvent | null {
  let x = v;
  if (typeof x === 'string') {
    try {
      x = JSON.parse(x);
    } catch {
      return null;
    }
  }
  if (!x || typeof x !== 'object') return null;
  const ev = x as SwEvent;
  if (ev.live === true) {
    ev.id = 0;
    return ev;
  }
  const n = Number(ev.id);
  if (!Number.isFinite(n)) return null;
  ev.id = n;
  return ev;
}

export class TauriTransport implements Transport {
  readonly kind = 'tauri' as const;

  constructor(private tauri: TauriGlobal) {}

  async api<T = unknown>(method: string, path: string, body?: unknown): Promise<ApiResponse<T>> {
    const r = await this.tauri.core.invoke<{ status: number; body: T }>('api', {
      method,
      path,
      body: body ?? null,
    });
    return { status: r.status, body: r.body };
  }

  subscribe(cursor: () => number, sink: EventSink): Subscription {
    let stopped = false;
    let unlisten: (() => void) | null = null;
    let catchingUp = false;
    let held: SwEvent[] = [];

    const catchUp = async () => {
      if (stopped || catchingUp || cursor() <= 0) return;
      catchingUp = true;
      try {
        // One page at a time, each applied before the next is asked for: a long gap never
        // travels (or sits in memory) as one answer.
        let after = cursor();
        for (;;) {
          const evs = await this.tauri.core.invoke<unknown[]>('events_since', { after, limit: CATCH_UP_PAGE });
          const page = Array.isArray(evs) ? evs : [];
          const batch = page.map(asEvent).filter((e): e is SwEvent => !!e);
          if (batch.length) deliver(sink, batch);
          if (page.length < CATCH_UP_PAGE || stopped) break;
          const last = Number((page[page.length - 1] as { id?: unknown } | null)?.id);
          if (!Number.isFinite(last) || last <= after) break;
          after = last;
        }
      } catch {
        /* the live listener still runs; next catch-up will fill in */
      } finally {
        catchingUp = false;
        const h = held;
        held = [];
        if (h.length) deliver(sink, h);
      }
    };

    const onVisible = () => {
      if (document.visibilityState === 'visible') void catchUp();
    };

    const ready = (async () => {
      sink.state('connecting');
      unlisten = await this.tauri.event.listen<unknown>('sw-event', (e) => {
        const ev = asEvent(e.payload);
        if (!ev || stopped) return;
        if (catchingUp) held.push(ev);
        else deliver(sink, [ev]);
      });
      if (stopped) {
        unlisten();
        return;
      }
      document.addEventListener('visibilitychange', onVisible);
      window.addEventListener('focus', onVisible);
      await catchUp();
      sink.state('live');
    })();

    return {
      ready,
      stop: () => {
        stopped = true;
        unlisten?.();
        document.removeEventListener('visibilitychange', onVisible);
        window.removeEventListener('focus', onVisible);
      },
    };
  }
}
