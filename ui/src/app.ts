// The application shell: call bar, tabs, and the wiring between the transport, the store and the
// views. State changes only through the store (events + API snapshots); views render from it.

import { ListenControls } from './audio';
import { ChatView } from './chat';
import { CallDetection } from './detect';
import { DesktopSettings, toggleOverlay, type Invoke } from './desktop';
import { h } from './dom';
import { errorText } from './errors';
import { FirstRunGuide } from './firstrun';
import { HistoryView } from './history';
import { InsightsView } from './insights';
import { SettingsView } from './settings';
import { McpReads, McpSettings } from './settings/mcp';
import { TranscriptView } from './transcript';
import { renameSpeaker } from './speakernames';
import type { StreamState, Transport } from './transport';
import { CallView } from './live/callview';
import { overlayPrefsCard } from './live/prefs';
import { TABS } from './app/base';
import { AppBar } from './app/bar';

export type { Tab } from './app/base';

const isMac = typeof navigator !== 'undefined' && /Mac|iPhone|iPad/.test(navigator.platform || navigator.userAgent);

export class App extends AppBar {
  constructor(mount: HTMLElement, transport: Transport, onUnauthorized: () => HTMLElement | null = () => null) {
    super(transport, onUnauthorized);
    this.buildViews();
    this.buildSettings();
    const overlayBtn = this.buildDesktop(transport);
    const tablist = this.buildTabs();
    const bar = this.buildBar(overlayBtn);

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

  /** The views (one panel each). */
  private buildViews(): void {
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
      api: (m, p, b) => this.api(m, p, b),
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
  }

  /** Settings and the cards and controls that live beside the views. */
  private buildSettings(): void {
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
  }

  /** The desktop settings (Tauri window) or the overlay preferences (browser); the Overlay button. */
  private buildDesktop(transport: Transport): HTMLElement {
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
    return overlayBtn;
  }

  /** The tab list (and the Insights badge). */
  private buildTabs(): HTMLElement {
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
    return tablist;
  }

  /** The call bar: call state, Listen, actions, status chips; the banners under it. */
  private buildBar(overlayBtn: HTMLElement): HTMLElement {
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
    return bar;
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

  get connection(): StreamState {
    return this.conn;
  }
}
