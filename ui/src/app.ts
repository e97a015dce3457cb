// The application shell: call bar, tabs, and the wiring between the transport, the store and the
// views. State changes only through the store (events + API snapshots); views render from it.

import { statusClass, statusLabel, waitingReason } from './assistant';
import { apiError, ListenControls } from './audio';
import { listenOnStart } from './audiosettings';
import { ChatView } from './chat';
import { CallDetection } from './detect';
import { canStop } from './kinds/gateway';
import { DesktopSettings, toggleOverlay, type Invoke } from './desktop';
import { dateTime, elapsedSince, h } from './dom';
import { describeError, errorText } from './errors';
import { FirstRunGuide, needsFirstRun } from './firstrun';
import { HistoryView, sessionTitle, type ExportFormat } from './history';
import type { SearchHit } from './search';
import { InsightsView } from './insights';
import { insightsNotice } from './kinds/clawborrator';
import { SettingsView } from './settings';
import { McpReads, McpSettings } from './settings/mcp';
import { tunnelChip } from './tunnel';
import { Store, tunnelActive, type Change } from './store';
import { TranscriptView } from './transcript';
import { renameSpeaker } from './speakernames';
import { listPath, messagesPath } from './window';
import type { ApiResponse, StreamState, Subscription, Transport } from './transport';
import type { Message, Session, TranscriptTurn } from './types';
import { CallView, callMode } from './live/callview';
import { assistantProblem, audioProblems, backlogRows, ProblemList } from './live/status';
import { overlayOnStart, overlayPrefsCard } from './live/prefs';

export type Tab = 'call' | 'chat' | 'insights' | 'transcript' | 'history' | 'settings';
const TABS: { id: Tab; label: string; key: string }[] = [
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
const ASSISTANT_POLL_MS = 5000;
/** Reading the whole view again after a status event waits this long (events come in bursts). */
const ASSISTANT_REFRESH_MS = 300;
/** `GET /api/audio` after an `audio_status` event waits this long (the same reason). */
const AUDIO_REFRESH_MS = 300;
/**
 * `GET /api/tunnel` is read this often while Settings is open or a tunnel is configured (the
 * tunnel has no event on the stream), and faster while it is connecting.
 */
const TUNNEL_POLL_MS = 5000;
const TUNNEL_FAST_POLL_MS = 1000;
/**
 * A conversation opens on its newest page of messages and loads older ones as the user scrolls up
 * (`GET …/messages?limit=N&before=ID`), so opening a long chat costs one page; it keeps a bounded
 * window of them (see `window.ts`). Bringing back a dropped newer end follows at most this many
 * pages (live messages may have come after it).
 */
const NEWER_MAX_PAGES = 50;
/** End call asks once more; the question goes away by itself after this long. */
const END_CONFIRM_MS = 8000;
/** Start call is off this long after the user ended a call (a double click is not a new call). */
const START_AFTER_END_MS = 2000;
/** A search result deeper in the history than this many pages is not scrolled to. */
const JUMP_MAX_PAGES = 100;

/** The object an answer carries under `key`, or the answer itself (`{message}` or a bare message). */
function unwrap(body: unknown, key: string): unknown {
  if (body && typeof body === 'object' && key in body) return (body as Record<string, unknown>)[key];
  return body;
}

const isMac = typeof navigator !== 'undefined' && /Mac|iPhone|iPad/.test(navigator.platform || navigator.userAgent);


export class App {
  readonly store = new Store();
  private activeId: string | null = null;
  private tab: Tab = 'chat';
  private conn: StreamState = 'connecting';
  private sub: Subscription | null = null;
  private loading = new Map<string, Promise<void>>();

  private root: HTMLElement;
  private chat: ChatView;
  private insights: InsightsView;
  private history: HistoryView;
  private settings: SettingsView;
  private mcpSettings: McpSettings;
  private mcpReads: McpReads;
  private transcript: TranscriptView;
  /** The Call tab: the live call as one view, or the review of an ended one. */
  private callView: CallView;
  /** One sentence per problem of the open live call (hearing it, the assistant). */
  private problems = new ProblemList('call-problems', 'bar-problems');
  private tabButtons = new Map<Tab, HTMLButtonElement>();
  private badge: HTMLElement;
  private callState: HTMLElement;
  private callActions: HTMLElement;
  private elapsedEl: HTMLElement | null = null;
  private connChip: HTMLElement;
  private assistantChip: HTMLButtonElement;
  private tunnelChip: HTMLButtonElement;
  private barError: HTMLElement;
  /** "No assistant is connected" before a call starts without one (with the way out). */
  private barWarn: HTMLElement;
  private authBanner: HTMLElement;
  /** The first-run guide, shown while no assistant is connected. */
  private firstRun: FirstRunGuide;
  /** The call whose End was pressed once: the bar asks to confirm (until this timer). */
  private confirmingEnd: { sid: string; timer: ReturnType<typeof setTimeout> } | null = null;
  /** When the user last ended a call (Start call waits a moment: a double click is not a new call). */
  private endedAt = 0;
  /** The title typed for the next call. */
  private callTitle: HTMLInputElement;
  private listen: ListenControls;

  private flushQueued = false;
  private dirty = { bar: true, history: true, insights: true, badge: true, transcript: true };
  /** Calls whose "Summarise" request is in flight. */
  private summarising = new Set<string>();
  // Assistant status polling: answers to a poll started before a change (PUT / DELETE / check)
  // finished are dropped, so a slow poll never shows the state from before the change.
  private assistantEpoch = 0;
  private assistantBusy = 0;
  private assistantTimer: ReturnType<typeof setTimeout> | undefined;
  private assistantPolledAt = 0;
  private assistantRefresh: ReturnType<typeof setTimeout> | undefined;
  // Tunnel polling, with the same rule for answers that started before a change.
  private tunnelEpoch = 0;
  private tunnelBusy = 0;
  private tunnelTimer: ReturnType<typeof setTimeout> | undefined;
  private tunnelPolledAt = 0;
  // Hearing the call: answers to a `GET /api/audio` started before a change (PUT, listen) are
  // dropped, as for the assistant.
  private audioEpoch = 0;
  /** Noticing the call: offers, end offers, the silence line, its Settings card. */
  private detection: CallDetection;
  private audioRefresh: ReturnType<typeof setTimeout> | undefined;

  constructor(
    mount: HTMLElement,
    private transport: Transport,
    private onUnauthorized: () => HTMLElement | null = () => null,
  ) {
    this.chat = new ChatView({
      send: (t) => this.send(t),
      retry: (m) => this.retryMessage(m),
      decide: (id, allow) => this.decidePermission(id, allow),
      stop: () => this.stopReply(),
      loadOlder: () => (this.activeId ? this.loadOlder(this.activeId) : Promise.resolve(false)),
      loadNewer: () => (this.activeId ? this.loadNewer(this.activeId) : Promise.resolve(false)),
      loadNewest: () => (this.activeId ? this.loadNewest(this.activeId) : Promise.resolve()),
    });
    this.insights = new InsightsView(() => (this.activeId ? this.loadOlderList(this.activeId, 'insights') : Promise.resolve()));
    this.transcript = new TranscriptView({
      retry: (t) => this.retryTurn(t),
      add: (sp, t) => this.addTurn(sp, t),
      loadOlder: () => (this.activeId ? this.loadOlderList(this.activeId, 'transcript') : Promise.resolve()),
      renameSpeaker: (label, name) => renameSpeaker((m, p, b) => this.api(m, p, b), this.activeId, label, name),
    });
    this.callView = new CallView({
      send: (t) => this.send(t),
      openChat: () => this.setTab('chat', true),
      summariseControls: (s) => this.summariseControls(s, 'summarise-review'),
    });
    this.history = new HistoryView({
      open: (id) => this.open(id, 'chat'),
      newChat: () => this.newChat(),
      search: (q) => this.search(q),
      jump: (hit) => void this.jump(hit),
      export: (sid, format) => this.exportSession(sid, format),
      rename: (sid, title) => this.renameSession(sid, title),
      remove: (sid) => this.deleteSession(sid),
    });
    this.settings = new SettingsView({
      api: (m, p, b) => this.api(m, p, b),
      errorText,
      assistantCall: (m, p, b) => this.assistantCall(m, p, b),
      tunnelCall: (m, p, b) => this.tunnelCall(m, p, b),
      audioCall: (m, p, b) => this.audioCall(m, p, b),
    });
    this.detection = new CallDetection({
      api: (m, p, b) => this.api(m, p, b),
      errorText,
      openAudioSettings: () => {
        this.setTab('settings');
        this.settings.audio.focus();
      },
    });
    this.settings.addCard(this.detection.card);
    this.mcpSettings = new McpSettings((m, p, b) => this.api(m, p, b));
    this.settings.assistant.card.after(this.mcpSettings.card);
    this.mcpReads = new McpReads((m, p, b) => this.api(m, p, b));
    this.insights.panel.prepend(this.mcpReads.el);
    this.listen = new ListenControls({
      setListening: (on) => this.setListening(on),
      openSettings: () => {
        this.setTab('settings');
        this.settings.audio.focus();
      },
    });

    const invoke: Invoke | null = transport.kind === 'tauri' && window.__TAURI__ ? (c, a) => window.__TAURI__!.core.invoke(c, a) : null;
    if (invoke) {
      const desktop = new DesktopSettings(invoke);
      this.settings.addCard(desktop.card);
      void desktop.load();
    } else {
      this.settings.addCard(overlayPrefsCard());
    }
    const overlayBtn = h('button', { class: 'btn btn-small', type: 'button', id: 'open-overlay', title: 'Compact overlay, always on top' }, 'Overlay');
    overlayBtn.addEventListener('click', () => toggleOverlay(invoke));

    this.badge = h('span', { class: 'badge', hidden: true });
    const tablist = h('div', { class: 'tabs', role: 'tablist', 'aria-label': 'Views' });
    for (const t of TABS) {
      const btn = h(
        'button',
        {
          class: 'tab',
          role: 'tab',
          type: 'button',
          id: `tab-${t.id}`,
          'aria-controls': `panel-${t.id}`,
          'aria-keyshortcuts': `Control+${t.key} Meta+${t.key} Alt+${t.key}`,
          title: `${t.label} (${isMac ? '⌘' : 'Ctrl+'}${t.key})`,
        },
        t.label,
        t.id === 'insights' ? this.badge : null,
      );
      btn.addEventListener('click', () => this.setTab(t.id));
      btn.addEventListener('keydown', (e) => this.onTabKey(e, t.id));
      this.tabButtons.set(t.id, btn);
      tablist.append(btn);
    }

    this.callState = h('div', { class: 'call-state' });
    this.callActions = h('div', { class: 'call-actions' });
    this.connChip = h('span', { class: 'chip chip-conn', role: 'status', 'aria-live': 'polite' });
    this.assistantChip = h('button', { class: 'chip chip-muted chip-button', type: 'button', id: 'assistant-status' }, 'Assistant: not configured');
    this.assistantChip.addEventListener('click', () => {
      this.setTab('settings');
      this.settings.assistant.focus();
    });
    this.tunnelChip = h('button', { class: 'chip chip-muted chip-button', type: 'button', id: 'tunnel-status' }, 'Tunnel: off');
    this.tunnelChip.addEventListener('click', () => {
      this.setTab('settings');
      this.settings.tunnel.focus();
    });
    this.barError = h('div', { class: 'bar-error', role: 'alert', hidden: true });
    this.barWarn = h('div', { class: 'bar-warn', id: 'bar-warn', role: 'alert', hidden: true });
    this.authBanner = h('div', { class: 'auth-banner', hidden: true });
    this.firstRun = new FirstRunGuide({
      api: (method, path, body) => this.api(method, path, body),
      openAssistant: () => this.openAssistantSettings(),
      openAudio: () => {
        this.setTab('settings');
        this.settings.audio.focus();
      },
    });
    this.callTitle = h('input', {
      class: 'call-title-input',
      id: 'call-title',
      type: 'text',
      maxlength: '200',
      autocomplete: 'off',
      placeholder: 'Title (optional)',
      'aria-label': 'Title of the next call (optional)',
    });
    this.callTitle.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') {
        e.preventDefault();
        void this.startCall();
      }
    });

    const bar = h(
      'header',
      { class: 'callbar' },
      h('div', { class: 'brand' }, h('span', { class: 'brand-mark', 'aria-hidden': 'true' }), 'StageWhisper'),
      this.callState,
      this.listen.el,
      this.callActions,
      h(
        'div',
        { class: 'status-chips' },
        overlayBtn,
        this.assistantChip,
        this.tunnelChip,
        this.connChip,
      ),
    );

    this.root = h(
      'div',
      { class: 'app', 'data-conn': 'connecting' },
      bar,
      this.problems.el,
      this.barError,
      this.barWarn,
      this.detection.el,
      this.authBanner,
      this.firstRun.el,
      tablist,
      h('main', { class: 'panels' }, this.callView.panel, this.chat.panel, this.insights.panel, this.transcript.panel, this.history.panel, this.settings.panel),
    );
    mount.replaceChildren(this.root);

    this.store.subscribe((c) => this.onChange(c));
    this.store.subscribe((c) => c.kind === 'live' && this.detection.onLive(c.event));
    document.addEventListener('keydown', (e) => this.onGlobalKey(e));
    document.addEventListener('click', (e) => this.onLinkClick(e));
    setInterval(() => this.tickElapsed(), 1000);
    this.setTab('chat', false);
    this.bindActive();
    this.setConn('connecting');
    this.renderAssistantChip();
    this.renderTunnelChip();
    document.addEventListener('visibilitychange', () => {
      if (document.visibilityState === 'visible') {
        this.scheduleAssistantPoll(0);
        this.scheduleTunnelPoll(0);
      }
    });
  }

  // ---- start-up and (re)loading ---------------------------------------------------------------

  async start(): Promise<void> {
    this.sub = this.transport.subscribe(() => this.store.cursor, {
      events: (batch) => {
        this.store.applyBatch(batch);
        this.root.dataset.cursor = String(this.store.cursor);
        this.flush();
      },
      state: (s) => this.setConn(s),
      resync: () => void this.reload(),
      reconnected: () => {
        void this.reloadTyping();
        void this.detection.load();
      },
    });
    await this.sub.ready;
    void this.detection.load();
    this.scheduleAssistantPoll(0);
    this.scheduleTunnelPoll(0);
    await this.reload(true);
  }

  /** Loads the sessions and the open conversation through the API (merged by version). */
  private async reload(first = false): Promise<void> {
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
  private async reloadTyping(): Promise<void> {
    const sid = this.activeId;
    if (!sid || !this.store.conv(sid)?.loaded) return;
    const [c0, typingAt] = [this.store.cursor, this.store.liveSeq];
    const t = await this.api<unknown[]>('GET', `/api/sessions/${encodeURIComponent(sid)}/typing`).catch(() => null);
    if (!t || t.status !== 200 || !Array.isArray(t.body)) return;
    this.store.loadConversation(sid, { typing: t.body, typingAt }, c0);
    this.flush();
  }

  private loadConv(sid: string): Promise<void> {
    const running = this.loading.get(sid);
    if (running) return running;
    const p = this.loadConvNow(sid).finally(() => {
      this.loading.delete(sid);
      this.flush();
    });
    this.loading.set(sid, p);
    return p;
  }

  private async loadConvNow(sid: string): Promise<void> {
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
  private async loadOlder(sid: string): Promise<boolean> {
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
  private async loadNewer(sid: string): Promise<boolean> {
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
  private async loadOlderList(sid: string, list: 'insights' | 'transcript'): Promise<void> {
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
  private async loadNewest(sid: string): Promise<void> {
    const c0 = this.store.cursor;
    const m = await this.api<{ items?: unknown; next?: unknown }>('GET', messagesPath(sid));
    if (m.status !== 200 || !m.body || !Array.isArray(m.body.items)) return;
    this.store.loadConversation(sid, { messages: m.body.items, olderPath: typeof m.body.next === 'string' ? m.body.next : null }, c0);
    this.chat.flush();
  }

  // ---- search and export -----------------------------------------------------------------------

  private async search(q: string): Promise<SearchHit[]> {
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

  private async exportSession(sid: string, format: ExportFormat): Promise<void> {
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

  // ---- API -------------------------------------------------------------------------------------

  async api<T>(method: string, path: string, body?: unknown): Promise<ApiResponse<T>> {
    const res = await this.transport.api<T>(method, path, body);
    if (res.status === 401) this.setConn('unauthorized');
    return res;
  }

  private async send(text: string): Promise<void> {
    let sid = this.activeId;
    if (!sid) {
      await this.newChat();
      sid = this.activeId;
      if (!sid) throw new Error('Could not start a chat.');
    }
    const c0 = this.store.cursor;
    const res = await this.api<unknown>('POST', `/api/sessions/${encodeURIComponent(sid)}/messages`, { text });
    if (res.status !== 201 && res.status !== 200) throw new Error(`Not sent: ${errorText(res)}`);
    const b = res.body as { message?: unknown } | null;
    this.store.mergeMessage(b && typeof b === 'object' && 'message' in b && b.message ? b.message : b, c0);
    this.flush();
  }

  /** The Stop button: the active kind stops the reply running in the open conversation. */
  private async stopReply(): Promise<void> {
    const sid = this.activeId;
    if (!sid) return;
    const res = await this.api<unknown>('POST', `/api/sessions/${encodeURIComponent(sid)}/stop`, {});
    if (res.status !== 200) throw new Error(`Not stopped: ${errorText(res)}`);
  }

  /** The user's Retry on a failed message: pending again under a new task id. */
  private async retryMessage(m: Message): Promise<void> {
    const c0 = this.store.cursor;
    const res = await this.api<unknown>('POST', `/api/sessions/${encodeURIComponent(m.session_id)}/messages/${encodeURIComponent(String(m.id))}/retry`);
    if (res.status !== 200) throw new Error(`Not retried: ${errorText(res)}`);
    this.store.mergeMessage(unwrap(res.body, 'message'), c0, true);
    this.flush();
  }

  /** Allow / Deny on a permission card: the answer is the settled card. */
  private async decidePermission(requestId: string, allow: boolean): Promise<void> {
    const c0 = this.store.cursor;
    const res = await this.api<unknown>('POST', `/api/permissions/${encodeURIComponent(requestId)}`, { decision: allow ? 'allow' : 'deny' });
    if (res.status !== 200) throw new Error(`Not sent: ${errorText(res)}`);
    this.store.mergeMessage(unwrap(res.body, 'message'), c0, true);
    this.flush();
  }

  /** The user's Retry on a failed transcript turn (the same route, with the call's session id). */
  private async retryTurn(t: TranscriptTurn): Promise<void> {
    const c0 = this.store.cursor;
    const res = await this.api<unknown>('POST', `/api/sessions/${encodeURIComponent(t.session_id)}/messages/${encodeURIComponent(String(t.id))}/retry`);
    if (res.status !== 200) throw new Error(`Not retried: ${errorText(res)}`);
    this.store.mergeTurn(unwrap(res.body, 'transcript'), c0);
    this.flush();
  }

  /** A final transcript turn typed by hand into the open (live) call. */
  private async addTurn(speaker: string, text: string): Promise<void> {
    const sid = this.activeId;
    if (!sid) throw new Error('No call is open.');
    const c0 = this.store.cursor;
    const body: Record<string, unknown> = { text, is_final: true };
    if (speaker) body.speaker = speaker;
    const res = await this.api<unknown>('POST', `/api/calls/${encodeURIComponent(sid)}/transcript`, body);
    if (res.status !== 201) throw new Error(`Not added: ${errorText(res)}`);
    this.store.mergeTurn(unwrap(res.body, 'transcript'), c0);
    this.flush();
  }

  /** Asks the assistant (in the call's chat) for a summary of the call's transcript. */
  private async summarise(sid: string): Promise<void> {
    if (this.summarising.has(sid)) return;
    this.hideBarError();
    this.summarising.add(sid);
    this.dirty.bar = this.dirty.transcript = true;
    this.flush();
    try {
      const c0 = this.store.cursor;
      const res = await this.api<unknown>('POST', `/api/calls/${encodeURIComponent(sid)}/summarise`);
      if (res.status === 201 || res.status === 200) {
        this.store.mergeMessage(unwrap(res.body, 'message'), c0);
        if (this.activeId === sid && this.tab !== 'call') {
          this.setTab('chat');
          this.chat.jumpToEnd();
        }
        return;
      }
      const code = (res.body as { error?: unknown } | null)?.error;
      if (code === 'no_transcript') {
        // The store learns that the transcript is empty: the action turns itself off, with why.
        const c1 = this.store.cursor;
        const t = await this.api<unknown[]>('GET', `/api/calls/${encodeURIComponent(sid)}/transcript`);
        if (t.status === 200 && Array.isArray(t.body)) this.store.loadTranscript(sid, t.body, c1);
        if ((this.store.conv(sid)?.transcript.length ?? 0) === 0) return;
      }
      this.showBarError(`Could not ask for a summary: ${errorText(res)}`, res);
    } catch (e) {
      this.showBarError(`Could not ask for a summary: ${e instanceof Error ? e.message : String(e)}`);
    } finally {
      this.summarising.delete(sid);
      this.dirty.bar = this.dirty.transcript = true;
      this.flush();
    }
  }

  // ---- hearing the call ------------------------------------------------------------------------

  /** Reads `GET /api/audio` into the store (a build that cannot hear: why, from its 503). */
  private async refreshAudio(): Promise<ApiResponse<unknown> | null> {
    const epoch = this.audioEpoch;
    const seq = this.store.audioStatusSeq;
    const res = await this.api<unknown>('GET', '/api/audio').catch(() => null);
    if (!res || epoch !== this.audioEpoch) return res;
    if (res.status === 200) this.store.setAudio(res.body, seq);
    else if (res.status === 503) this.store.setAudioUnavailable(apiError(res).message || 'The app cannot hear calls here.');
    return res;
  }

  /** Settings → Audio's requests to `/api/audio`; a `200` goes to the store. */
  async audioCall(method: string, path: string, body?: unknown): Promise<ApiResponse<unknown>> {
    if (method === 'GET' && path === '/api/audio') {
      const res = await this.refreshAudio();
      if (!res) throw new Error('the app did not answer');
      return res;
    }
    this.audioEpoch++;
    const seq = this.store.audioStatusSeq;
    const res = await this.api<unknown>(method, path, body);
    if (res.status === 200 && path === '/api/audio') this.store.setAudio(res.body, seq);
    return res;
  }

  /** The call bar's Listen toggle: `POST` / `DELETE /api/calls/{id}/listen`, then the status again. */
  private async setListening(on: boolean): Promise<void> {
    const sid = this.activeId;
    if (!sid) return;
    this.hideBarError();
    this.audioEpoch++;
    try {
      const res = await this.api<unknown>(on ? 'POST' : 'DELETE', `/api/calls/${encodeURIComponent(sid)}/listen`);
      if (res.status !== 200) this.showBarError(`Could not ${on ? 'start' : 'stop'} listening: ${errorText(res)}`, res);
    } catch (e) {
      this.showBarError(`Could not ${on ? 'start' : 'stop'} listening: ${e instanceof Error ? e.message : String(e)}`);
    }
    await this.refreshAudio();
  }

  /** The Listen controls follow the open call while it is live. */
  private renderListen(): void {
    const s = this.activeId ? this.store.sessions.get(this.activeId) : undefined;
    const live = !!s && s.is_call && !s.ended_at;
    this.listen.render(live ? s.session_id : null, this.store.audio, this.store.audioUnavailable);
    this.listen.levels(this.store.levels, this.store.audio);
  }

  // ---- the assistant link ------------------------------------------------------------------

  /** A change to the link (`PUT` / `DELETE /api/assistant`, `POST …/check`); its answer goes to the store. */
  async assistantCall(method: string, path: string, body?: unknown): Promise<ApiResponse<unknown>> {
    this.assistantEpoch++;
    this.assistantBusy++;
    try {
      const c0 = this.store.cursor;
      const res = await this.api<unknown>(method, path, body);
      if (res.status === 200) this.store.setAssistant(res.body, c0);
      return res;
    } finally {
      this.assistantBusy--;
      this.assistantEpoch++;
      this.scheduleAssistantPoll();
    }
  }

  private async pollAssistant(): Promise<void> {
    if (this.assistantBusy) return;
    const epoch = this.assistantEpoch;
    this.assistantPolledAt = Date.now();
    try {
      const c0 = this.store.cursor;
      const res = await this.api<unknown>('GET', '/api/assistant');
      if (res.status !== 200 || this.assistantBusy || epoch !== this.assistantEpoch) return;
      this.store.setAssistant(res.body, c0);
    } catch {
      /* the next poll tries again */
    }
  }

  /**
   * Reads the link's view `delay` ms from now (then keeps polling while Settings is open); without
   * `delay`, only keeps the Settings poll going.
   */
  private scheduleAssistantPoll(delay?: number): void {
    clearTimeout(this.assistantTimer);
    let wait = delay;
    if (wait === undefined) {
      if (this.tab !== 'settings') return;
      wait = Math.max(0, this.assistantPolledAt + ASSISTANT_POLL_MS - Date.now());
    }
    this.assistantTimer = setTimeout(async () => {
      if (document.visibilityState !== 'hidden') await this.pollAssistant();
      this.scheduleAssistantPoll();
    }, wait);
  }

  // ---- the callback tunnel -----------------------------------------------------------------

  /** A change to the tunnel (`POST` / `DELETE /api/tunnel`, `…/check`, `…/authtoken`); its answer goes to the store. */
  async tunnelCall(method: string, path: string, body?: unknown): Promise<ApiResponse<unknown>> {
    this.tunnelEpoch++;
    this.tunnelBusy++;
    try {
      const res = await this.api<unknown>(method, path, body);
      if (res.status === 200) this.store.setTunnel(res.body);
      return res;
    } finally {
      this.tunnelBusy--;
      this.tunnelEpoch++;
      this.tunnelPolledAt = Date.now();
      this.scheduleTunnelPoll();
    }
  }

  private async pollTunnel(): Promise<void> {
    if (this.tunnelBusy) return;
    const epoch = this.tunnelEpoch;
    this.tunnelPolledAt = Date.now();
    try {
      const res = await this.api<unknown>('GET', '/api/tunnel');
      if (res.status !== 200 || this.tunnelBusy || epoch !== this.tunnelEpoch) return;
      this.store.setTunnel(res.body);
    } catch {
      /* the next poll tries again */
    }
  }

  /**
   * Reads the tunnel `delay` ms from now; without `delay`, keeps polling while Settings is open or
   * a tunnel is configured (every 5 s; every second while it is connecting).
   */
  private scheduleTunnelPoll(delay?: number): void {
    clearTimeout(this.tunnelTimer);
    let wait = delay;
    if (wait === undefined) {
      const t = this.store.tunnel;
      if (this.tab !== 'settings' && !tunnelActive(t)) return;
      const every = t?.state === 'connecting' ? TUNNEL_FAST_POLL_MS : TUNNEL_POLL_MS;
      wait = Math.max(0, this.tunnelPolledAt + every - Date.now());
    }
    this.tunnelTimer = setTimeout(async () => {
      if (document.visibilityState !== 'hidden') await this.pollTunnel();
      this.scheduleTunnelPoll();
    }, wait);
  }

  private renderTunnelChip(): void {
    const c = tunnelChip(this.store.tunnel);
    this.tunnelChip.textContent = c.text;
    // No tunnel set up: nothing to say on the first screen (Settings → Tunnel has it).
    this.tunnelChip.hidden = c.state === 'off' && !this.store.tunnel?.kind;
    this.tunnelChip.className = `chip chip-button ${c.cls}`;
    this.tunnelChip.dataset.state = c.state;
    this.tunnelChip.title = c.title;
    this.tunnelChip.setAttribute('aria-label', `${c.text}. ${c.title.split('\n')[0]} Open the tunnel settings.`);
  }

  /**
   * Everything that depends on whether an assistant is connected at all: the first-run guide,
   * the chat's notice, the empty Insights tab's sentence.
   */
  private renderFirstRun(): void {
    const a = this.store.assistant;
    // During a call the Call tab needs the room: the guide waits (the chips and the chat say it).
    const inCall = this.tab === 'call' && callMode(this.activeSession()) !== 'none';
    this.firstRun.render(a, !!this.store.audio, this.tab === 'settings' || inCall);
    const none = needsFirstRun(a);
    this.chat.setNotice(none ? this.noAssistantNotice('chat') : null);
    if (none !== this.noAssistantShown) {
      this.noAssistantShown = none;
      this.bindActive();
    }
  }

  private noAssistantShown = false;

  /** "No assistant is connected: … [Connect an assistant]" (the chat's notice). */
  private noAssistantNotice(where: string): HTMLElement {
    const btn = h('button', { class: 'btn btn-small', type: 'button', id: `${where}-connect` }, 'Connect an assistant');
    btn.addEventListener('click', () => this.openAssistantSettings());
    return h(
      'div',
      { class: 'no-assistant', id: `${where}-no-assistant`, role: 'status' },
      h('span', null, 'No assistant is connected: nothing will answer. What you send waits here and goes out once you connect one.'),
      btn,
    );
  }

  private renderAssistantChip(): void {
    const a = this.store.assistant;
    const status = a?.status ?? 'not_configured';
    const label = status === 'not_configured' ? 'not configured' : statusLabel(status).toLowerCase();
    this.assistantChip.textContent = `Assistant: ${label}`;
    this.assistantChip.className = `chip chip-button ${statusClass(status)}`;
    this.assistantChip.dataset.status = status;
    this.assistantChip.title = `${a?.detail || (a ? '' : 'No assistant is linked yet.')}\n(Settings → Assistant link)`.trim();
    this.assistantChip.setAttribute('aria-label', `Assistant: ${label}. ${a?.detail ?? ''} Open the assistant settings.`.trim());
  }

  /**
   * Start call. Without a connected assistant it first says so, with the way to connect one
   * (`anyway`: the user chose to start regardless: the call is heard and kept, nothing coaches).
   */
  private async startCall(anyway = false): Promise<void> {
    this.hideBarError();
    if (Date.now() - this.endedAt < START_AFTER_END_MS) return;
    if (!anyway && this.store.assistant?.status === 'not_configured') return this.warnNoAssistant();
    this.hideBarWarn();
    const title = this.callTitle.value.trim();
    // Listening starts with the call when this window says so and the app can hear at all (a
    // build that cannot refuses the whole request).
    const listen = listenOnStart() && !!this.store.audio;
    const body: Record<string, unknown> = title ? { title } : {};
    let res = await this.api<{ session_id?: string }>('POST', '/api/calls', listen ? { ...body, listen: true } : body);
    if (listen && res.status === 503 && apiError(res).code === 'audio_unavailable') res = await this.api<{ session_id?: string }>('POST', '/api/calls', body);
    if (res.status !== 201 && res.status !== 200) return this.showBarError(`Could not start a call: ${errorText(res)}`, res);
    if (listen) void this.refreshAudio();
    const sid = res.body?.session_id;
    if (!sid) return this.showBarError('Could not start a call: no session id in the answer.');
    this.callTitle.value = '';
    // The browser's overlay opens with the call, as the desktop one does (a preference).
    if (this.transport.kind !== 'tauri' && overlayOnStart()) toggleOverlay(null);
    this.open(sid, 'call');
    if (!this.store.sessions.has(sid)) await this.reload();
  }

  /** Start call without an assistant: says what will (not) happen and offers both ways on. */
  private warnNoAssistant(): void {
    const connect = h('button', { class: 'btn btn-small btn-primary', type: 'button', id: 'warn-connect' }, 'Connect an assistant');
    connect.addEventListener('click', () => {
      this.hideBarWarn();
      this.openAssistantSettings();
    });
    const anyway = h('button', { class: 'btn btn-small', type: 'button', id: 'warn-start-anyway' }, 'Start the call anyway');
    anyway.addEventListener('click', () => void this.startCall(true));
    const dismiss = h('button', { class: 'btn btn-small', type: 'button', id: 'warn-dismiss' }, 'Cancel');
    dismiss.addEventListener('click', () => this.hideBarWarn());
    this.barWarn.replaceChildren(
      h(
        'span',
        { class: 'bar-warn-text' },
        h('strong', null, 'No assistant is connected. '),
        'The call will be heard and kept, but nothing will coach you: no insights, no answers in the chat.',
      ),
      h('span', { class: 'bar-warn-actions' }, connect, anyway, dismiss),
    );
    this.barWarn.hidden = false;
    connect.focus();
  }

  private hideBarWarn(): void {
    this.barWarn.hidden = true;
    this.barWarn.replaceChildren();
  }

  /** Settings → Assistant, its card in view. */
  private openAssistantSettings(): void {
    this.setTab('settings');
    this.settings.assistant.focus();
  }

  /** End call, first press: the bar asks to confirm; "Keep the call" sits where End call was. */
  private askEndCall(sid: string): void {
    if (this.confirmingEnd) clearTimeout(this.confirmingEnd.timer);
    this.confirmingEnd = {
      sid,
      timer: setTimeout(() => this.cancelEndCall(), END_CONFIRM_MS),
    };
    this.renderBar();
    this.callActions.querySelector<HTMLButtonElement>('#cancel-end-call')?.focus();
  }

  private cancelEndCall(): void {
    if (!this.confirmingEnd) return;
    clearTimeout(this.confirmingEnd.timer);
    this.confirmingEnd = null;
    this.renderBar();
  }

  private async endCall(sid: string): Promise<void> {
    if (this.confirmingEnd) clearTimeout(this.confirmingEnd.timer);
    this.confirmingEnd = null;
    this.endedAt = Date.now();
    setTimeout(() => {
      this.dirty.bar = true;
      this.flush();
    }, START_AFTER_END_MS + 50);
    this.hideBarError();
    const c0 = this.store.cursor;
    const res = await this.api<unknown>('POST', `/api/calls/${encodeURIComponent(sid)}/end`);
    if (res.status !== 200) return this.showBarError(`Could not end the call: ${errorText(res)}`, res);
    const b = res.body as { session?: unknown } | null;
    this.store.mergeSession(b && typeof b === 'object' && 'session' in b ? b.session : b, c0);
    this.dirty.bar = this.dirty.history = true;
    this.flush();
  }

  private async renameSession(sid: string, title: string): Promise<void> {
    const c0 = this.store.cursor;
    const res = await this.api<unknown>('PATCH', `/api/sessions/${encodeURIComponent(sid)}`, { title: title || null });
    if (res.status !== 200) throw new Error(`Not renamed: ${errorText(res)}`);
    this.store.mergeSession(res.body, c0);
    this.dirty.bar = this.dirty.history = true;
    this.flush();
  }

  private async deleteSession(sid: string): Promise<void> {
    const res = await this.api<unknown>('DELETE', `/api/sessions/${encodeURIComponent(sid)}`);
    if (res.status !== 200) throw new Error(`Not deleted: ${errorText(res)}`);
    // The `session_deleted` event removes it from every view (this one included).
  }

  private async newChat(): Promise<void> {
    const res = await this.api<{ session_id?: string }>('POST', '/api/sessions', {});
    if (res.status !== 201 && res.status !== 200) throw new Error(`Could not start a chat: ${errorText(res)}`);
    const sid = res.body?.session_id;
    if (!sid) throw new Error('Could not start a chat: no session id in the answer.');
    this.open(sid, 'chat');
    if (!this.store.sessions.has(sid)) await this.reload();
  }

  // ---- navigation ------------------------------------------------------------------------------

  /** Opens a conversation (and optionally a tab). */
  open(sid: string, tab: Tab | null): void {
    if (this.activeId !== sid) {
      this.activeId = sid;
      this.bindActive();
      const c = this.store.conv(sid);
      if (!c || !c.loaded) void this.loadConv(sid);
    }
    if (tab) this.setTab(tab);
    this.syncInsightsOpen();
    this.dirty.bar = this.dirty.history = this.dirty.badge = true;
    this.flush();
  }

  private bindActive(): void {
    const sid = this.activeId;
    if (sid) this.root.dataset.session = sid;
    else delete this.root.dataset.session;
    const conv = sid ? this.store.ensureConv(sid) : null;
    const s = sid ? this.store.sessions.get(sid) : undefined;
    this.chat.bind(
      conv,
      !sid
        ? 'No call in progress. Start a call, or open a past one. You can also just type: a new chat starts.'
        : s?.is_call
          ? 'Nothing yet. Messages from your assistant appear here.'
          : 'Nothing yet. Say something to your assistant.',
    );
    this.insights.bind(
      conv,
      !sid
        ? 'No call open.'
        : s && !s.is_call
          ? 'This chat is not a call: it has no insights.'
          : needsFirstRun(this.store.assistant)
            ? 'No assistant is connected, so no insights will come: insights are written by your assistant. Connect one in Settings → Assistant.'
            : 'No insights yet. They appear here during the call.',
    );
    this.transcript.bind(conv, s ?? null);
    void this.mcpReads.show(sid);
    this.transcript.renderPartials(this.store.partialsOf(sid));
    this.dirty.transcript = true;
  }

  setTab(tab: Tab, focus = false): void {
    this.tab = tab;
    for (const [id, btn] of this.tabButtons) {
      const on = id === tab;
      btn.setAttribute('aria-selected', String(on));
      btn.tabIndex = on ? 0 : -1;
    }
    // The Call tab shows the transcript with the insights (live) or with the chat (review).
    const mode = tab === 'call' ? callMode(this.activeSession()) : 'none';
    this.callView.panel.hidden = tab !== 'call';
    this.chat.panel.hidden = tab !== 'chat' && mode !== 'review';
    this.insights.panel.hidden = tab !== 'insights' && mode !== 'live';
    this.transcript.panel.hidden = tab !== 'transcript' && mode === 'none';
    this.root.dataset.callMode = mode;
    this.history.panel.hidden = tab !== 'history';
    this.settings.panel.hidden = tab !== 'settings';
    this.settings.audio.setVisible(tab === 'settings');
    this.root.dataset.tab = tab;
    this.renderFirstRun();
    this.syncInsightsOpen();
    if (tab === 'chat' || mode === 'review') this.chat.shown();
    if (tab === 'call') {
      this.dirty.transcript = true;
      this.transcript.shown();
      this.renderCallView();
    }
    if (tab === 'history') this.history.render(this.store.sessionList(), this.activeId);
    if (tab === 'insights') void this.mcpReads.show(this.activeId);
    if (tab === 'settings') {
      void this.mcpSettings.load();
      void this.settings.load();
      this.scheduleAssistantPoll(0);
      this.scheduleTunnelPoll(0);
    }
    if (tab === 'transcript') {
      this.dirty.transcript = true;
      this.dirty.bar = true;
      this.transcript.shown();
    }
    if (focus) {
      if (tab === 'chat') this.chat.composer.focus();
      else this.tabButtons.get(tab)?.focus();
    }
    // The bar's Summarise button is left out on the Transcript tab (it has its own).
    this.dirty.badge = this.dirty.bar = true;
    this.flush();
  }

  private syncInsightsOpen(): void {
    const seen = this.tab === 'insights' || (this.tab === 'call' && callMode(this.activeSession()) === 'live');
    this.store.setInsightsOpen(seen ? this.activeId : null);
  }

  private activeSession(): Session | null {
    return this.activeId ? (this.store.sessions.get(this.activeId) ?? null) : null;
  }

  /** The Call tab (and which panels it shows: a call that ends turns into its review). */
  private renderCallView(): void {
    const s = this.activeSession();
    if (this.tab === 'call' && this.root.dataset.callMode !== callMode(s)) return this.setTab('call');
    this.callView.render(s, this.activeId ? (this.store.conv(this.activeId) ?? null) : null);
  }

  /** The problems of the open live call, one sentence each; the waiting turns as rows. */
  private renderProblems(): void {
    const s = this.activeSession();
    const live = callMode(s) === 'live' ? s!.session_id : null;
    const list = live ? audioProblems(this.store.audio, live) : [];
    const a = live ? assistantProblem(this.store.assistant) : null;
    this.problems.render(a ? [...list, a] : list);
    this.transcript.setWaiting(backlogRows(this.store.audio?.status, live));
  }

  private onGlobalKey(e: KeyboardEvent): void {
    const mod = (e.ctrlKey || e.metaKey) && !e.altKey && !e.shiftKey;
    const alt = e.altKey && !e.ctrlKey && !e.metaKey && !e.shiftKey;
    if (!mod && !alt) return;
    const t = TABS.find((x) => x.key === e.key || `Digit${x.key}` === e.code);
    if (!t) return;
    e.preventDefault();
    this.setTab(t.id, true);
  }

  private onTabKey(e: KeyboardEvent, id: Tab): void {
    const i = TABS.findIndex((t) => t.id === id);
    let j = -1;
    if (e.key === 'ArrowRight') j = (i + 1) % TABS.length;
    else if (e.key === 'ArrowLeft') j = (i - 1 + TABS.length) % TABS.length;
    else if (e.key === 'Home') j = 0;
    else if (e.key === 'End') j = TABS.length - 1;
    if (j < 0) return;
    e.preventDefault();
    this.setTab(TABS[j].id);
    this.tabButtons.get(TABS[j].id)?.focus();
  }

  /** In the Tauri window a link must open in the system browser, never inside the app. */
  private onLinkClick(e: MouseEvent): void {
    const a = (e.target as Element | null)?.closest?.('a.md-link') as HTMLAnchorElement | null;
    if (!a || this.transport.kind !== 'tauri') return;
    e.preventDefault();
    const t = window.__TAURI__ as unknown as {
      opener?: { openUrl(u: string): Promise<void> };
      shell?: { open(u: string): Promise<void> };
    };
    const href = a.href;
    if (t.opener?.openUrl) void t.opener.openUrl(href);
    else if (t.shell?.open) void t.shell.open(href);
  }

  // ---- store changes ---------------------------------------------------------------------------

  private onChange(c: Change): void {
    switch (c.kind) {
      case 'sessions':
        this.dirty.bar = this.dirty.history = this.dirty.transcript = true;
        break;
      case 'transcript':
        if (c.sessionId === this.activeId) {
          this.dirty.transcript = true;
          // The call bar shows "Summarise" (which depends on the transcript) once the call ended.
          if (this.store.sessions.get(c.sessionId)?.ended_at) this.dirty.bar = true;
        }
        break;
      case 'assistant':
        if (c.fromEvent) {
          // The event says only status and detail: read the rest (last error, delivery, …) too.
          clearTimeout(this.assistantRefresh);
          this.assistantRefresh = setTimeout(() => void this.pollAssistant(), ASSISTANT_REFRESH_MS);
        }
        this.renderAssistantChip();
        this.renderProblems();
        this.settings.assistant.render(this.store.assistant);
        this.insights.setNotice(insightsNotice(this.store.assistant));
        {
          const link = { configured: this.store.assistant?.configured ?? true, waiting: waitingReason(this.store.assistant) };
          this.chat.setLink({ ...link, canStop: canStop(this.store.assistant?.kind) });
          this.transcript.setLink(link);
        }
        this.renderFirstRun();
        break;
      case 'tunnel':
        this.renderTunnelChip();
        this.settings.tunnelChanged(this.store.tunnel);
        break;
      case 'audio':
        if (c.fromEvent) {
          // The event carries the status only: read the settings too (another window may have
          // changed them), a moment later (events come in bursts).
          clearTimeout(this.audioRefresh);
          this.audioRefresh = setTimeout(() => void this.refreshAudio(), AUDIO_REFRESH_MS);
        }
        this.renderListen();
        this.renderProblems();
        this.settings.audio.render(this.store.audio, this.store.audioUnavailable);
        this.renderFirstRun();
        break;
      case 'levels':
        // About ten a second: the meters move, nothing else is rendered.
        this.listen.levels(this.store.levels, this.store.audio);
        this.settings.audio.levels(this.store.levels);
        return;
      case 'live':
        this.settings.audio.models.onEvent(c.event); // a model download's progress
        return; // applied by the store already (levels, partials, status)
      case 'partials':
        if (c.sessionId === this.activeId) this.transcript.renderPartials(this.store.partialsOf(c.sessionId));
        break;
      case 'session-created':
        // A new call takes the screen: that is what the user is about to talk in.
        if (c.session.is_call && !c.session.ended_at && this.activeId !== c.session.session_id) {
          // From the chat (where the app opens) to the Call tab: transcript and insights together.
          this.open(c.session.session_id, this.tab === 'chat' ? 'call' : null);
        }
        break;
      case 'session-deleted':
        if (c.sessionId === this.activeId) {
          this.activeId = null;
          this.bindActive();
        }
        this.dirty.bar = this.dirty.history = true;
        break;
      case 'insights':
        if (c.sessionId === this.activeId) this.dirty.insights = true;
        break;
      case 'unread':
        this.dirty.badge = true;
        break;
      case 'typing':
        if (c.sessionId === this.activeId) {
          if (c.insights) this.insights.renderTyping();
          else this.chat.apply(c);
        }
        break;
      default:
        if ('sessionId' in c && c.sessionId === this.activeId) this.chat.apply(c);
        break;
    }
    this.queueFlush();
  }

  private queueFlush(): void {
    if (this.flushQueued) return;
    this.flushQueued = true;
    queueMicrotask(() => this.flush());
  }

  /** Renders everything that changed. Called right after each batch of events. */
  flush(): void {
    this.flushQueued = false;
    this.chat.flush();
    // Live messages while the user reads the newest ones: the window keeps its size.
    if (this.activeId && this.chat.atLiveEnd) {
      this.store.trimFront(this.activeId);
      this.chat.flush();
    }
    if (this.dirty.insights) {
      this.dirty.insights = false;
      this.insights.render();
    }
    if (this.dirty.transcript) {
      this.dirty.transcript = false;
      this.transcript.setSession(this.activeId ? (this.store.sessions.get(this.activeId) ?? null) : null);
      this.renderTranscriptHead();
    }
    if (this.dirty.badge) {
      this.dirty.badge = false;
      const n = this.store.unreadCount(this.activeId);
      const show = n > 0 && this.tab !== 'insights' && !(this.tab === 'call' && this.root.dataset.callMode === 'live');
      this.badge.hidden = !show;
      this.badge.textContent = show ? String(n) : '';
      this.badge.setAttribute('aria-label', `${n} unread`);
    }
    if (this.dirty.bar) {
      this.dirty.bar = false;
      this.renderBar();
      this.renderProblems();
    }
    if (this.tab === 'call') this.renderCallView();
    if (this.dirty.history && this.tab === 'history') {
      this.dirty.history = false;
      this.history.render(this.store.sessionList(), this.activeId);
    }
  }

  // ---- call bar ------------------------------------------------------------------------------

  private renderBar(): void {
    const s: Session | undefined = this.activeId ? this.store.sessions.get(this.activeId) : undefined;
    const live = this.store.sessionList().find((x) => x.is_call && !x.ended_at);
    this.elapsedEl = null;
    const state: (Node | string)[] = [];
    const actions: HTMLElement[] = [];
    if (s && s.is_call && !s.ended_at) {
      this.elapsedEl = h('span', { class: 'elapsed', id: 'elapsed', 'aria-label': 'Time in the call' }, elapsedSince(s.created_at));
      state.push(h('span', { class: 'live-dot', 'aria-hidden': 'true' }), h('span', { class: 'call-label' }, 'Live call'), this.elapsedEl);
      if (s.title && s.title.trim()) state.push(h('span', { class: 'call-title', title: s.title }, s.title.trim()));
      if (this.confirmingEnd?.sid === s.session_id) {
        const yes = h('button', { class: 'btn btn-danger', type: 'button', id: 'confirm-end-call' }, 'End call');
        yes.addEventListener('click', () => void this.endCall(s.session_id));
        const keep = h('button', { class: 'btn', type: 'button', id: 'cancel-end-call' }, 'Keep the call');
        keep.addEventListener('click', () => this.cancelEndCall());
        actions.push(h('span', { class: 'confirm-text', id: 'end-call-question' }, 'End this call?'), yes, keep);
      } else {
        const end = h('button', { class: 'btn btn-danger', type: 'button', id: 'end-call' }, 'End call');
        end.addEventListener('click', () => this.askEndCall(s.session_id));
        actions.push(end);
      }
    } else {
      if (this.confirmingEnd) {
        clearTimeout(this.confirmingEnd.timer);
        this.confirmingEnd = null;
      }
      if (s) {
        // Untitled: its date (sessionTitle would say "Chat · …" after the label "Chat").
        state.push(
          h('span', { class: 'call-label' }, s.is_call ? 'Past call' : 'Chat'),
          h('span', { class: 'call-title' }, s.title && s.title.trim() ? s.title.trim() : dateTime(s.created_at)),
          s.is_call && s.ended_at ? h('span', { class: 'elapsed muted' }, elapsedSince(s.created_at, s.ended_at)) : '',
        );
      } else {
        state.push(h('span', { class: 'call-label muted' }, 'No call in progress'));
      }
      // The Transcript tab has its own "Summarise this call" at its head: one on screen at a time.
      // The Call tab's review has it in its summary card.
      if (s && s.is_call && s.ended_at && this.tab !== 'transcript' && this.tab !== 'call') actions.push(...this.summariseControls(s, 'summarise-call', true));
      if (live && live.session_id !== this.activeId) {
        const back = h('button', { class: 'btn', type: 'button', id: 'go-live' }, 'Back to live call');
        back.addEventListener('click', () => this.open(live.session_id, 'call'));
        actions.push(back);
      } else {
        const start = h('button', { class: 'btn btn-primary', type: 'button', id: 'start-call' }, 'Start call');
        // Just after an end, a second click of a double click must not start another call.
        if (Date.now() - this.endedAt < START_AFTER_END_MS) {
          start.disabled = true;
          start.title = 'You just ended a call';
        }
        start.addEventListener('click', () => void this.startCall());
        actions.push(this.callTitle, start);
      }
    }
    this.callState.replaceChildren(...state);
    // While End call asks, the bar makes room for the question (the meters step aside).
    this.callState.parentElement?.classList.toggle('is-confirming', !!this.confirmingEnd && this.confirmingEnd.sid === s?.session_id);
    this.callState.parentElement?.classList.toggle('is-live', !!s && s.is_call && !s.ended_at);
    this.renderListen();
    // Keep focus on the button the user just pressed, if it is re-created.
    const focusedId = (document.activeElement as HTMLElement | null)?.id;
    const caret = [this.callTitle.selectionStart, this.callTitle.selectionEnd];
    this.callActions.replaceChildren(...actions);
    if (focusedId === 'call-title' && this.callTitle.isConnected) {
      // Moved with the other controls: the title being typed keeps focus and caret.
      this.callTitle.focus();
      this.callTitle.setSelectionRange(caret[0], caret[1]);
    } else if (focusedId === 'confirm-end-call' || focusedId === 'cancel-end-call') {
      this.callActions.querySelector<HTMLButtonElement>('#cancel-end-call, #end-call')?.focus();
    } else if (focusedId === 'start-call' || focusedId === 'end-call' || focusedId === 'go-live' || focusedId === 'summarise-call') {
      const again = focusedId === 'summarise-call' ? this.callActions.querySelector<HTMLButtonElement>('#summarise-call') : null;
      (again ?? (this.callActions.querySelector('button') as HTMLButtonElement | null))?.focus();
    }
  }

  /**
   * The "Summarise this call" button, off (with the reason) when the store knows the call has no
   * transcript. `compact` (the call bar): the button's own label says it, the sentence is its
   * description; otherwise the sentence is shown next to it.
   */
  private summariseControls(s: Session, id: string, compact = false): HTMLElement[] {
    const conv = this.store.conv(s.session_id);
    const empty = !!conv && conv.transcriptLoaded && conv.transcript.length === 0;
    const busy = this.summarising.has(s.session_id);
    const why = 'This call has no transcript yet: there is nothing to summarise.';
    const btn = h(
      'button',
      {
        class: 'btn',
        type: 'button',
        id,
        title: empty ? why : 'Ask your assistant, in this chat, for a summary of the call (the transcript is sent along)',
        'aria-describedby': empty ? `${id}-why` : undefined,
      },
      busy ? 'Asking for a summary…' : empty && compact ? 'Nothing to summarise' : 'Summarise this call',
    );
    btn.disabled = empty || busy;
    btn.addEventListener('click', () => void this.summarise(s.session_id));
    const out: HTMLElement[] = [btn];
    if (empty) out.push(h('span', { class: compact ? 'sr-only' : 'bar-note', id: `${id}-why` }, why));
    return out;
  }

  private renderTranscriptHead(): void {
    const s = this.activeId ? this.store.sessions.get(this.activeId) : undefined;
    const focused = (document.activeElement as HTMLElement | null)?.id === 'summarise-transcript';
    this.transcript.headActions.replaceChildren(...(s?.is_call ? this.summariseControls(s, 'summarise-transcript') : []));
    if (focused) this.transcript.headActions.querySelector<HTMLButtonElement>('#summarise-transcript')?.focus();
  }

  private tickElapsed(): void {
    if (!this.elapsedEl || !this.activeId) return;
    const s = this.store.sessions.get(this.activeId);
    if (s) this.elapsedEl.textContent = elapsedSince(s.created_at);
  }

  /** `res`: the answer it comes from (its code goes into the tooltip, for support). */
  private showBarError(text: string, res: ApiResponse<unknown> | null = null): void {
    this.barError.hidden = false;
    this.barError.textContent = text;
    describeError(this.barError, res);
  }

  private hideBarError(): void {
    this.barError.hidden = true;
  }

  private setConn(s: StreamState): void {
    const was = this.conn;
    this.conn = s;
    if (s === 'live' && was !== 'live') {
      // Live-only events are not replayed: partials from before a drop may never be finished,
      // and the audio status may have changed meanwhile.
      if (was === 'reconnecting') this.store.clearPartials();
      void this.refreshAudio();
    }
    this.root.dataset.conn = s;
    this.connChip.hidden = s === 'live';
    this.connChip.className = `chip chip-conn chip-${s}`;
    this.connChip.textContent =
      s === 'connecting' ? 'Connecting…' : s === 'reconnecting' ? 'Reconnecting…' : s === 'unauthorized' ? 'Not authorised' : '';
    if (s === 'unauthorized') {
      const el = this.onUnauthorized();
      this.authBanner.hidden = !el;
      if (el) this.authBanner.replaceChildren(el);
    } else {
      this.authBanner.hidden = true;
    }
  }

  get connection(): StreamState {
    return this.conn;
  }
}
