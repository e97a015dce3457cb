// The application shell, part base: its state (fields), constants and the API call every layer uses.
// (The shell is one class in layers: base.ts → data.ts → links.ts → actions.ts → view.ts → bar.ts → ../app.ts;
// a layer calls the ones above through the abstract methods declared at the end of this class.)

import { ListenControls } from '../audio';
import { ChatView } from '../chat';
import { CallDetection } from '../detect';
import { FirstRunGuide } from '../firstrun';
import { HistoryView } from '../history';
import { InsightsView } from '../insights';
import { SettingsView } from '../settings';
import { McpReads, McpSettings } from '../settings/mcp';
import { Store } from '../store';
import { TranscriptView } from '../transcript';
import type { ApiResponse, StreamState, Subscription, Transport } from '../transport';
import type { Session } from '../types';
import { CallView } from '../live/callview';
import { ProblemList } from '../live/status';

export type Tab = 'call' | 'chat' | 'insights' | 'transcript' | 'history' | 'settings';
export const TABS: { id: Tab; label: string; key: string }[] = [
  { id: 'call', label: 'Call', key: '6' },
  { id: 'chat', label: 'Chat', key: '1' },
  { id: 'insights', label: 'Insights', key: '2' },
  { id: 'transcript', label: 'Transcript', key: '3' },
  { id: 'history', label: 'Past calls', key: '4' },
  { id: 'settings', label: 'Settings', key: '5' },
];

/**
 * The link's status comes with `assistant_status` events; the rest of `GET /api/assistant` (last
 * error, delivery mode, event-stream support) is read again after each such event and, while
 * Settings is open, this often.
 */
export const ASSISTANT_POLL_MS = 5000;
/** Reading the whole view again after a status event waits this long (events come in bursts). */
export const ASSISTANT_REFRESH_MS = 300;
/** `GET /api/audio` after an `audio_status` event waits this long (the same reason). */
export const AUDIO_REFRESH_MS = 300;
/**
 * `GET /api/tunnel` is read this often while Settings is open or a tunnel is configured (the
 * tunnel has no event on the stream), and faster while it is connecting.
 */
export const TUNNEL_POLL_MS = 5000;
export const TUNNEL_FAST_POLL_MS = 1000;
/**
 * A conversation opens on its newest page of messages and loads older ones as the user scrolls up
 * (`GET …/messages?limit=N&before=ID`), so opening a long chat costs one page; it keeps a bounded
 * window of them (see `window.ts`). Bringing back a dropped newer end follows at most this many
 * pages (live messages may have come after it).
 */
export const NEWER_MAX_PAGES = 50;
/** End call asks once more; the question goes away by itself after this long. */
export const END_CONFIRM_MS = 8000;
/** Start call is off this long after the user ended a call (a double click is not a new call). */
export const START_AFTER_END_MS = 2000;
/** A search result deeper in the history than this many pages is not scrolled to. */
export const JUMP_MAX_PAGES = 100;

/** The object an answer carries under `key`, or the answer itself (`{message}` or a bare message). */
export function unwrap(body: unknown, key: string): unknown {
  if (body && typeof body === 'object' && key in body) return (body as Record<string, unknown>)[key];
  return body;
}

export abstract class AppBase {
  readonly store = new Store();
  protected activeId: string | null = null;
  protected tab: Tab = 'chat';
  protected conn: StreamState = 'connecting';
  protected sub: Subscription | null = null;
  protected loading = new Map<string, Promise<void>>();

  protected root!: HTMLElement;
  protected chat!: ChatView;
  protected insights!: InsightsView;
  protected history!: HistoryView;
  protected settings!: SettingsView;
  protected mcpSettings!: McpSettings;
  protected mcpReads!: McpReads;
  protected transcript!: TranscriptView;
  /** The Call tab: the live call as one view, or the review of an ended one. */
  protected callView!: CallView;
  /** One sentence per problem of the open live call (hearing it, the assistant). */
  protected problems = new ProblemList('call-problems', 'bar-problems');
  protected tabButtons = new Map<Tab, HTMLButtonElement>();
  protected badge!: HTMLElement;
  protected callState!: HTMLElement;
  protected callActions!: HTMLElement;
  protected elapsedEl: HTMLElement | null = null;
  protected connChip!: HTMLElement;
  protected assistantChip!: HTMLButtonElement;
  protected tunnelChip!: HTMLButtonElement;
  protected barError!: HTMLElement;
  /** "No assistant is connected" before a call starts without one (with the way out). */
  protected barWarn!: HTMLElement;
  protected authBanner!: HTMLElement;
  /** The first-run guide, shown while no assistant is connected. */
  protected firstRun!: FirstRunGuide;
  /** The call whose End was pressed once: the bar asks to confirm (until this timer). */
  protected confirmingEnd: { sid: string; timer: ReturnType<typeof setTimeout> } | null = null;
  /** When the user last ended a call (Start call waits a moment: a double click is not a new call). */
  protected endedAt = 0;
  /** The title typed for the next call. */
  protected callTitle!: HTMLInputElement;
  protected listen!: ListenControls;

  protected flushQueued = false;
  protected dirty = { bar: true, history: true, insights: true, badge: true, transcript: true };
  /** Calls whose "Summarise" request is in flight. */
  protected summarising = new Set<string>();
  // Assistant status polling: answers to a poll started before a change (PUT / DELETE / check)
  // finished are dropped, so a slow poll never shows the state from before the change.
  protected assistantEpoch = 0;
  protected assistantBusy = 0;
  protected assistantTimer!: ReturnType<typeof setTimeout> | undefined;
  protected assistantPolledAt = 0;
  protected assistantRefresh!: ReturnType<typeof setTimeout> | undefined;
  // Tunnel polling, with the same rule for answers that started before a change.
  protected tunnelEpoch = 0;
  protected tunnelBusy = 0;
  protected tunnelTimer!: ReturnType<typeof setTimeout> | undefined;
  protected tunnelPolledAt = 0;
  // Hearing the call: answers to a `GET /api/audio` started before a change (PUT, listen) are
  // dropped, as for the assistant.
  protected audioEpoch = 0;
  /** Noticing the call: offers, end offers, the silence line, its Settings card. */
  protected detection!: CallDetection;
  protected audioRefresh!: ReturnType<typeof setTimeout> | undefined;

  protected noAssistantShown = false;

  constructor(
    protected transport: Transport,
    protected onUnauthorized: () => HTMLElement | null = () => null,
  ) {}

  // ---- API -------------------------------------------------------------------------------------

  async api<T>(method: string, path: string, body?: unknown): Promise<ApiResponse<T>> {
    const res = await this.transport.api<T>(method, path, body);
    if (res.status === 401) this.setConn('unauthorized');
    return res;
  }

  protected activeSession(): Session | null {
    return this.activeId ? (this.store.sessions.get(this.activeId) ?? null) : null;
  }

  // ---- implemented by the layers above ----------------------------------------------------

  protected abstract scheduleAssistantPoll(delay?: number): void;
  protected abstract scheduleTunnelPoll(delay?: number): void;
  protected abstract openAssistantSettings(): void;
  protected abstract open(sid: string, tab: Tab | null): void;
  protected abstract bindActive(): void;
  protected abstract setTab(tab: Tab, focus?: boolean): void;
  protected abstract flush(): void;
  protected abstract renderBar(): void;
  protected abstract renderTranscriptHead(): void;
  protected abstract showBarError(text: string, res?: ApiResponse<unknown> | null): void;
  protected abstract hideBarError(): void;
  protected abstract setConn(s: StreamState): void;
}
