// The application shell, part view: navigation (conversation, tabs, keys) and rendering what changed in the store.
// (The shell is one class in layers: base.ts → data.ts → links.ts → actions.ts → view.ts → bar.ts → ../app.ts.)

import { waitingReason } from '../assistant';
import { canStop } from '../kinds';
import { needsFirstRun } from '../firstrun';
import { insightsNotice } from '../kinds/clawborrator';
import { type Change } from '../store';
import { callMode } from '../live/callview';
import { assistantProblem, audioProblems, backlogRows } from '../live/status';
import { TABS, ASSISTANT_REFRESH_MS, AUDIO_REFRESH_MS, Tab } from './base';
import { AppActions } from './actions';

export abstract class AppView extends AppActions {

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

  protected bindActive(): void {
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

  protected syncInsightsOpen(): void {
    const seen = this.tab === 'insights' || (this.tab === 'call' && callMode(this.activeSession()) === 'live');
    this.store.setInsightsOpen(seen ? this.activeId : null);
  }

  /** The Call tab (and which panels it shows: a call that ends turns into its review). */
  protected renderCallView(): void {
    const s = this.activeSession();
    if (this.tab === 'call' && this.root.dataset.callMode !== callMode(s)) return this.setTab('call');
    this.callView.render(s, this.activeId ? (this.store.conv(this.activeId) ?? null) : null);
  }

  /** The problems of the open live call, one sentence each; the waiting turns as rows. */
  protected renderProblems(): void {
    const s = this.activeSession();
    const live = callMode(s) === 'live' ? s!.session_id : null;
    const list = live ? audioProblems(this.store.audio, live) : [];
    const a = live ? assistantProblem(this.store.assistant) : null;
    this.problems.render(a ? [...list, a] : list);
    this.transcript.setWaiting(backlogRows(this.store.audio?.status, live));
  }

  protected onGlobalKey(e: KeyboardEvent): void {
    const mod = (e.ctrlKey || e.metaKey) && !e.altKey && !e.shiftKey;
    const alt = e.altKey && !e.ctrlKey && !e.metaKey && !e.shiftKey;
    if (!mod && !alt) return;
    const t = TABS.find((x) => x.key === e.key || `Digit${x.key}` === e.code);
    if (!t) return;
    e.preventDefault();
    this.setTab(t.id, true);
  }

  protected onTabKey(e: KeyboardEvent, id: Tab): void {
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
  protected onLinkClick(e: MouseEvent): void {
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

  protected onChange(c: Change): void {
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
        this.onAssistantChange(c.fromEvent);
        break;
      case 'tunnel':
        this.renderTunnelChip();
        this.settings.tunnelChanged(this.store.tunnel);
        break;
      case 'audio':
        this.onAudioChange(c.fromEvent);
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

  /** The link changed (an `assistant_status` event, or an answer to the API). */
  protected onAssistantChange(fromEvent: boolean): void {
    if (fromEvent) {
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
  }

  /** Hearing the call changed (an `audio_status` event, or an answer to the API). */
  protected onAudioChange(fromEvent: boolean): void {
    if (fromEvent) {
      // The event carries the status only: read the settings too (another window may have
      // changed them), a moment later (events come in bursts).
      clearTimeout(this.audioRefresh);
      this.audioRefresh = setTimeout(() => void this.refreshAudio(), AUDIO_REFRESH_MS);
    }
    this.renderListen();
    this.renderProblems();
    this.settings.audio.render(this.store.audio, this.store.audioUnavailable);
    this.renderFirstRun();
  }

  protected queueFlush(): void {
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
}
