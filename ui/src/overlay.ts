// The compact overlay (`?view=overlay`): the newest insights of the live call, the assistant's
// typing state, whether the app is hearing the call (listening, or why not), what is wrong with
// hearing it or with the assistant (one sentence each), a one-line input to message it and,
// pinned above the input, the person's latest questions with their answers (or why there is none
// yet), read from the call's chat (so they are there again when the overlay is reopened). It
// reads the same event stream as the main
// window (its own Store fed by the same Transport), so nothing here has a data path of its own.
// In the desktop app it is the always-on-top "overlay" window; in a browser, a popup or a tab.

import { apiError, audioChip, meterFraction, type AudioChip } from './audio';
import { clockTime, h } from './dom';
import { describeError, errorText } from './errors';
import { renderInline } from './markdown';
import { Store, type Conversation } from './store';
import type { ApiResponse, StreamState, Subscription, Transport } from './transport';
import type { Insight, Session, Typing } from './types';
import { lastExchanges, replyWho } from './live/exchange';
import { assistantProblem, audioProblems, ProblemList } from './live/status';
import { messagesPath } from './window';

/** Insights shown at once (newest first). */
export const OVERLAY_INSIGHTS = 5;
/** Questions asked in the overlay shown with their answers (the newest). */
export const OVERLAY_QUESTIONS = 2;

/** What the overlay's window chrome can do (the desktop app's commands, or the browser's). */
export interface OverlayChrome {
  /** "Open StageWhisper": the main window to the front. */
  openMain(): void;
  close(): void;
  /** The header is a drag handle (the desktop overlay has no title bar). */
  draggable: boolean;
  /** Resizes the window from its bottom-right corner while the button is held (the grip of
   * the undecorated desktop overlay; a browser window has its own frame). */
  startResize?: () => void;
}

/** The call the overlay follows: the newest live call, else the newest call, else none. */
export function pickCall(sessions: Session[]): Session | null {
  const calls = sessions.filter((s) => s.is_call);
  return calls.find((s) => !s.ended_at) ?? calls[0] ?? null;
}

export interface OverlayModel {
  call: Session | null;
  live: boolean;
  /** Hearing the followed live call (null: no live call, or a build that cannot hear). */
  hearing: AudioChip | null;
  insights: Insight[];
  /** "Assistant is typing…" (or its label) while a reply or an insight is being written. */
  typing: string | null;
}

function typingText(conv: Conversation | undefined): string | null {
  if (!conv) return null;
  const all: Typing[] = [...conv.typing.values(), ...conv.insightTyping.values()];
  if (all.length === 0) return null;
  all.sort((a, b) => (a.since ?? '').localeCompare(b.since ?? ''));
  const label = all[all.length - 1].label?.replace(/\s*(\.\.\.|…)$/, '');
  return label ? `Assistant · ${label}…` : 'Assistant is typing…';
}

export function overlayModel(store: Store): OverlayModel {
  const call = pickCall(store.sessionList());
  const conv = call ? store.conv(call.session_id) : undefined;
  const live = !!call && !call.ended_at;
  return {
    call,
    live,
    hearing: live && store.audio ? audioChip(store.audio, null, call.session_id) : null,
    insights: conv ? conv.insights.slice(0, OVERLAY_INSIGHTS) : [],
    typing: typingText(conv),
  };
}


export class Overlay {
  readonly store = new Store();
  private sub: Subscription | null = null;
  private root: HTMLElement;
  private titleEl = h('span', { class: 'ov-title', id: 'overlay-title' });
  private hearingEl = h('span', { class: 'ov-hearing', id: 'overlay-hearing', role: 'status', hidden: true });
  private hearingDot = h('span', { class: 'ov-hearing-dot', 'aria-hidden': 'true' });
  private hearingText = h('span', { class: 'ov-hearing-text' });
  private list = h('ol', { class: 'ov-insights', id: 'overlay-insights', 'aria-live': 'polite', 'aria-label': 'Newest insights' });
  private empty = h('p', { class: 'ov-empty' });
  private typingEl = h('div', { class: 'ov-typing', id: 'overlay-typing', role: 'status', hidden: true });
  private input: HTMLInputElement;
  private sendBtn: HTMLButtonElement;
  private status = h('div', { class: 'ov-status', id: 'overlay-status', role: 'status', 'aria-live': 'polite' });
  private loadedCall: string | null = null;
  private queued = false;
  private thread = h('ol', { class: 'ov-thread', id: 'overlay-thread', 'aria-live': 'polite', 'aria-label': 'Your questions and the answers', hidden: true });
  /** The latest questions and answers, pinned above the input (the insights scroll above it). */
  private pinned = h('div', { class: 'ov-pinned', id: 'overlay-pinned', hidden: true }, this.thread);
  /** What is wrong (hearing the call, the assistant), one sentence each, wrapped. */
  private problems = new ProblemList('overlay-problems', 'ov-problems');
  private threadKey = '';

  constructor(
    mount: HTMLElement,
    private transport: Transport,
    chrome: OverlayChrome,
  ) {
    const open = h('button', { class: 'ov-btn', type: 'button', id: 'overlay-open-main', title: 'Open StageWhisper', 'aria-label': 'Open StageWhisper' }, '⤢');
    open.addEventListener('click', () => chrome.openMain());
    const close = h('button', { class: 'ov-btn', type: 'button', id: 'overlay-close', title: 'Hide the overlay', 'aria-label': 'Hide the overlay' }, '×');
    close.addEventListener('click', () => chrome.close());
    const header = h(
      'header',
      { class: 'ov-header' },
      h('span', { class: 'brand-mark', 'aria-hidden': 'true' }),
      this.titleEl,
      h('span', { class: 'ov-spacer' }),
      open,
      close,
    );
    // The whole header drags the window, its buttons excepted ("deep": any element inside).
    if (chrome.draggable) header.setAttribute('data-tauri-drag-region', 'deep');
    this.input = h('input', {
      class: 'ov-input',
      id: 'overlay-input',
      type: 'text',
      autocomplete: 'off',
      placeholder: 'Message the assistant…',
      'aria-label': 'Message the assistant',
      maxlength: '4000',
    });
    this.sendBtn = h('button', { class: 'btn btn-primary btn-small', type: 'submit', id: 'overlay-send' }, 'Send');
    const form = h('form', { class: 'ov-form' }, this.input, this.sendBtn);
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      void this.send();
    });
    this.root = h(
      'div',
      { class: 'overlay', id: 'overlay', 'data-conn': 'connecting' },
      header,
      this.hearingEl,
      this.problems.el,
      this.typingEl,
      h('div', { class: 'ov-scroll' }, this.list, this.empty),
      this.pinned,
      form,
      this.status,
    );
    const resize = chrome.startResize;
    if (resize) {
      const grip = h('div', { class: 'ov-grip', id: 'overlay-grip', title: 'Drag to resize', 'aria-hidden': 'true' });
      grip.addEventListener('mousedown', (e) => {
        if (e.button !== 0) return;
        e.preventDefault();
        resize();
      });
      this.root.append(grip);
    }
    mount.replaceChildren(this.root);
    document.documentElement.classList.add('is-overlay');
    this.hearingEl.append(this.hearingDot, this.hearingText);
    this.store.subscribe((c) => {
      // Levels come about ten times a second: they only move the listening dot.
      if (c.kind === 'levels') return this.pulse();
      if (c.kind === 'live' || c.kind === 'partials') return;
      if (c.kind === 'audio' && c.fromEvent && !this.store.audio) void this.refreshAudio();
      this.schedule();
    });
    this.render();
  }

  /** `GET /api/audio` (the status is patched by `audio_status` events; live ones are not replayed). */
  private async refreshAudio(): Promise<void> {
    const seq = this.store.audioStatusSeq;
    const res = await this.transport.api<unknown>('GET', '/api/audio').catch(() => null);
    if (!res) return;
    if (res.status === 200) this.store.setAudio(res.body, seq);
    else if (res.status === 503) this.store.setAudioUnavailable(apiError(res).message || 'unavailable');
  }

  /** The listening dot follows the louder channel. */
  private pulse(): void {
    const l = this.store.levels;
    const f = l ? Math.max(meterFraction(l.mic), meterFraction(l.system)) : 0;
    this.hearingDot.style.setProperty('--level', f.toFixed(2));
  }

  async start(): Promise<void> {
    this.sub = this.transport.subscribe(() => this.store.cursor, {
      events: (batch) => {
        this.store.applyBatch(batch);
        this.root.dataset.cursor = String(this.store.cursor);
        this.schedule();
      },
      state: (s: StreamState) => {
        if (s === 'live' && this.root.dataset.conn !== 'live') {
          if (this.root.dataset.conn === 'reconnecting') this.store.clearPartials();
          void this.refreshAudio();
        }
        this.root.dataset.conn = s;
        if (s === 'unauthorized') this.status.textContent = 'The UI token was not accepted.';
      },
      resync: () => void this.reload(),
      // Typing is live-only: after a drop the followed call's indicators are read again.
      reconnected: () => {
        if (this.loadedCall) void this.loadCall(this.loadedCall);
      },
    });
    await this.sub.ready;
    await this.reload();
    void this.refreshAssistant();
  }

  /** `GET /api/assistant` (its status is patched by `assistant_status` events afterwards). */
  private async refreshAssistant(): Promise<void> {
    const c0 = this.store.cursor;
    const res = await this.transport.api<unknown>('GET', '/api/assistant').catch(() => null);
    if (res?.status === 200) this.store.setAssistant(res.body, c0);
  }

  private async reload(): Promise<void> {
    const c0 = this.store.cursor;
    const res = await this.transport.api<unknown[]>('GET', '/api/sessions').catch(() => null);
    if (!res || res.status !== 200 || !Array.isArray(res.body)) {
      this.status.textContent = res ? `Could not load the calls: ${errorText(res)}` : 'Could not load the calls.';
      describeError(this.status, res);
      return;
    }
    this.store.loadSessions(res.body, c0);
    this.loadedCall = null;
    this.schedule();
  }

  /** Loads the followed call's insights and typing state once (events keep them current). */
  private async loadCall(sid: string): Promise<void> {
    this.loadedCall = sid;
    const [c0, typingAt] = [this.store.cursor, this.store.liveSeq];
    const enc = encodeURIComponent(sid);
    const [i, t, m] = await Promise.all([
      // Only the newest few are shown: one short page.
      this.transport.api<{ items?: unknown }>('GET', `/api/sessions/${enc}/insights?limit=${OVERLAY_INSIGHTS}`),
      this.transport.api<unknown[]>('GET', `/api/sessions/${enc}/typing`),
      // The chat's newest page: the latest questions and their answers.
      this.transport.api<{ items?: unknown; next?: unknown }>('GET', messagesPath(sid)),
    ]);
    const ok = (r: ApiResponse<unknown[]>) => (r.status === 200 && Array.isArray(r.body) ? r.body : []);
    const page = i.status === 200 && i.body && Array.isArray(i.body.items) ? (i.body.items as unknown[]) : [];
    if (i.status !== 200) this.status.textContent = `Could not load the insights: ${errorText(i)}`;
    const msgs = m.status === 200 && m.body && Array.isArray(m.body.items) ? (m.body.items as unknown[]) : null;
    this.store.loadConversation(
      sid,
      msgs ? { insights: page, typing: ok(t), typingAt, messages: msgs, olderPath: typeof m.body.next === 'string' ? m.body.next : null } : { insights: page, typing: ok(t), typingAt },
      c0,
    );
    this.schedule();
  }

  private schedule(): void {
    if (this.queued) return;
    this.queued = true;
    queueMicrotask(() => {
      this.queued = false;
      this.render();
    });
  }

  render(): void {
    const m = overlayModel(this.store);
    if (m.call && m.call.session_id !== this.loadedCall) void this.loadCall(m.call.session_id);
    this.root.dataset.call = m.call?.session_id ?? '';
    this.titleEl.textContent = !m.call ? 'No call' : m.live ? 'Live call' : 'Last call';
    this.titleEl.classList.toggle('is-live', m.live);
    const hc = m.hearing;
    this.hearingEl.hidden = !hc;
    this.hearingEl.dataset.state = hc?.state ?? '';
    // The reason is said in full in the problems below: here, the state only.
    this.hearingText.textContent = !hc ? '' : hc.state === 'error' ? 'Not hearing' : hc.text;
    const live = m.live && m.call ? m.call.session_id : null;
    const ap = m.call ? assistantProblem(this.store.assistant) : null;
    this.problems.render([...audioProblems(this.store.audio, live), ...(ap ? [ap] : [])]);
    this.hearingEl.title = hc?.title ?? '';
    this.typingEl.hidden = !m.typing;
    this.typingEl.textContent = m.typing ?? '';
    this.list.replaceChildren(
      ...m.insights.map((ins) =>
        h(
          'li',
          { class: 'ov-insight', 'data-id': String(ins.id) },
          h('time', { class: 'ov-time' }, clockTime(ins.occurred_at ?? ins.received_at)),
          h('span', { class: 'ov-text' }, renderInline(ins.text)),
        ),
      ),
    );
    this.renderThread(m.call);
    this.empty.hidden = m.insights.length > 0;
    this.empty.textContent = !m.call ? 'Start a call in StageWhisper: its insights show here.' : 'No insights yet.';
    this.input.disabled = !m.call;
    this.sendBtn.disabled = !m.call;
  }

  private renderThread(call: Session | null): void {
    const conv = call ? this.store.conv(call.session_id) : undefined;
    const ex = conv ? lastExchanges(conv.messages, OVERLAY_QUESTIONS) : [];
    this.pinned.hidden = ex.length === 0;
    this.thread.hidden = ex.length === 0;
    const key = JSON.stringify(ex.map((x) => [x.question.id, x.waiting, x.replies.map((r) => [r.id, r.text, r.draft])]));
    if (key === this.threadKey) return;
    this.threadKey = key;
    this.thread.replaceChildren(
      ...ex.map((x) => {
        const replies = x.replies.map((r) =>
          h(
            'div',
            { class: `ov-reply ov-reply-${r.kind}${r.draft ? ' is-draft' : ''}`, 'data-kind': r.kind },
            h('span', { class: 'ov-who' }, replyWho(r)),
            h('span', { class: 'ov-text' }, renderInline(r.text)),
          ),
        );
        const pending =
          x.replies.length === 0
            ? [h('div', { class: `ov-reply ov-waiting${x.waiting ? ' is-trouble' : ''}` }, x.waiting ?? 'Waiting for the answer…')]
            : [];
        return h(
          'li',
          { class: 'ov-exchange', 'data-message-id': x.question.message_id ?? '' },
          h('div', { class: 'ov-question' }, h('span', { class: 'ov-who' }, 'You'), h('span', { class: 'ov-text' }, x.question.text)),
          ...replies,
          ...pending,
        );
      }),
    );
    // The newest answer in sight: the pinned area scrolls to its end.
    this.pinned.scrollTop = this.pinned.scrollHeight;
  }

  private async send(): Promise<void> {
    const text = this.input.value.trim();
    const call = overlayModel(this.store).call;
    if (!text || !call) return;
    this.sendBtn.disabled = true;
    this.status.textContent = 'Sending…';
    const c0 = this.store.cursor;
    try {
      const res = await this.transport.api('POST', `/api/sessions/${encodeURIComponent(call.session_id)}/messages`, { text });
      if (res.status !== 201 && res.status !== 200) {
        this.status.textContent = `Not sent: ${errorText(res)}`;
        describeError(this.status, res);
        return;
      }
      this.input.value = '';
      this.status.textContent = '';
      // The answer shows under the insights: the question is followed by its `message_id`
      // (its events, and the reply's `user_message_id`, come through the same store).
      const b = res.body as { message_id?: unknown; message?: { message_id?: unknown } } | null;
      const mid = typeof b?.message_id === 'string' ? b.message_id : typeof b?.message?.message_id === 'string' ? b.message.message_id : null;
      if (mid) {
        this.store.mergeMessage(res.body, c0);
        this.schedule();
      } else {
        this.status.textContent = 'Sent.';
      }
    } catch (e) {
      this.status.textContent = `Not sent: ${e instanceof Error ? e.message : String(e)}`;
    } finally {
      this.sendBtn.disabled = false;
      this.input.focus();
    }
  }
}
