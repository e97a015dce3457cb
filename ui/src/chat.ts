// The Chat tab: the virtualised conversation, the typing indicator, the "N new messages" pill
// and the composer.

import { clockTime, fullTime, h } from './dom';
import { renderInline, renderMarkdown } from './markdown';
import { permissionCard, type Decide } from './permission';
import { deliveryView, type Change, type Conversation } from './store';
import type { Message, Typing } from './types';
import { VList } from './vlist';
import { replyRunning, StopControl } from './kinds/gateway';
import { summaryRequestBody } from './live/summary';

export interface ChatActions {
  /** Sends `text` to the open conversation (creating a chat if none is open); throws on failure. */
  send(text: string): Promise<void>;
  /** Sends a failed user message again (`POST …/messages/{id}/retry`); throws on failure. */
  retry(m: Message): Promise<void>;
  /** Allows or denies a permission card's request; throws on failure. */
  decide?: Decide;
  /** Stops the reply running in the open conversation (kinds that can); throws on failure. */
  stop?(): Promise<void>;
  /**
   * Loads the next older page of the open conversation (the user scrolled near its top); true
   * when it got one (false: it failed, or there is none).
   */
  loadOlder?(): Promise<boolean>;
  /**
   * Loads the next newer page again after the window's newer end was dropped (the user scrolled
   * near the bottom of what is loaded); true when it got one.
   */
  loadNewer?(): Promise<boolean>;
  /** Loads the newest page again (the window's newer end was dropped), for "jump to the end". */
  loadNewest?(): Promise<void>;
}

/** Scrolled this close to the top of what is loaded, the next older page is asked for. */
const LOAD_OLDER_PX = 800;
/** How long a message found by search stays highlighted. */
const HIGHLIGHT_MS = 2500;

/** What the delivery marks need to know about the link (from the store). */
export interface LinkInfo {
  /** An assistant is configured (pending messages are on their way, not merely queued). */
  configured: boolean;
  /**
   * Why nothing gets through right now (the link's own status: unreachable, refused, …), or
   * null: a pending entry without a reason of its own shows this one, so chat messages and
   * transcript turns waiting behind the same outage say the same thing.
   */
  waiting?: string | null;
  /** The active kind can stop a running reply (the Stop button). */
  canStop?: boolean;
}

const keyOf = (m: Message) => String(m.id);

/** A rough height so that rows far away take about the right room before they are measured. */
function estimate(m: Message, width: number): number {
  if (m.kind === 'notice') return 34;
  if (m.kind === 'permission') return 150;
  if (m.purpose === 'summary_request') return 64;
  const cpl = Math.max(16, Math.floor((Math.min(width, 820) - 110) / 7.4));
  let lines = 0;
  for (const l of m.text.split('\n')) lines += Math.max(1, Math.ceil(l.length / cpl));
  return 46 + Math.min(lines, 400) * 21;
}

/** A pending entry while no assistant is configured at all. */
export const QUEUED_LABEL = 'queued: no assistant connected';

/** The subtle delivery mark of a user message (`sending…` / `sent` / `failed`), or null. */
function deliveryMark(m: Message, link: LinkInfo): HTMLElement | null {
  if (m.kind !== 'user') return null;
  const d = deliveryView(m);
  if (!d.state) return null;
  let label = d.label;
  let title =
    d.state === 'sending'
      ? 'Being delivered to your assistant'
      : d.state === 'sent'
        ? 'Delivered to your assistant'
        : 'Not delivered: see below';
  if (d.state === 'sending' && !link.configured) {
    label = QUEUED_LABEL;
    title = 'No assistant is connected yet: it is sent once one is (Settings → Assistant)';
  }
  return h('span', { class: `msg-delivery msg-delivery-${d.state}`, 'data-delivery': m.delivery, title }, label);
}

function metaLine(m: Message, link: LinkInfo): HTMLElement {
  const who =
    m.kind === 'user' ? 'You' : m.kind === 'error' ? 'Error' : m.kind === 'notice' ? 'Note' : 'Assistant';
  const t = m.occurred_at ?? m.received_at;
  return h(
    'div',
    { class: 'msg-meta' },
    h('span', { class: 'msg-who' }, who),
    t ? h('time', { datetime: t, title: fullTime(t) }, clockTime(t)) : null,
    m.draft ? h('span', { class: 'msg-draft-tag' }, 'writing…') : null,
    deliveryMark(m, link),
  );
}

/**
 * Under a user message: why it is not delivered yet (pending with a note) or why it failed, with
 * a Retry button for a failed one.
 */
export function deliveryNote(
  e: Parameters<typeof deliveryView>[0],
  retry: (btn: HTMLButtonElement, err: HTMLElement) => void,
  what = 'message',
  waiting: string | null = null,
): HTMLElement | null {
  const d = deliveryView(e);
  // Pending without a reason of its own (it waits behind another entry): the link's reason.
  const note = d.note ?? (d.state === 'sending' && waiting ? `Not delivered yet: ${waiting}` : null);
  if (!note) return null;
  const el = h('div', { class: `delivery-note delivery-note-${d.state}` }, h('span', { class: 'delivery-note-text' }, note));
  if (d.canRetry) {
    const err = h('span', { class: 'delivery-retry-error', role: 'alert' });
    const btn = h('button', { class: 'btn btn-small delivery-retry', type: 'button', 'aria-label': `Retry sending this ${what}` }, 'Retry');
    btn.addEventListener('click', () => retry(btn, err));
    el.append(' ', btn, err);
  }
  return el;
}

/** Runs a retry for a Retry button: disabled while it runs, the error (if any) next to it. */
export async function runRetry(btn: HTMLButtonElement, err: HTMLElement, go: () => Promise<void>): Promise<void> {
  btn.disabled = true;
  btn.textContent = 'Retrying…';
  err.textContent = '';
  try {
    await go();
  } catch (e) {
    err.textContent = ` ${e instanceof Error ? e.message : String(e)}`;
    btn.disabled = false;
    btn.textContent = 'Retry';
  }
}

function body(m: Message): HTMLElement {
  const el = h('div', { class: 'msg-body' });
  if (m.kind === 'user' && m.purpose === 'summary_request') {
    el.append(summaryRequestBody(m.text));
  } else if (m.kind === 'user') {
    el.classList.add('msg-plain');
    el.textContent = m.text;
  } else if (m.kind === 'error') {
    if (m.error_code) el.append(h('code', { class: 'msg-error-code' }, m.error_code), ' ');
    el.append(h('span', { class: 'msg-error-text' }, m.text || 'The assistant reported an error.'));
  } else if (m.kind === 'notice') {
    el.append(renderInline(m.text));
  } else {
    el.append(renderMarkdown(m.text));
  }
  return el;
}

function fill(row: HTMLElement, m: Message, link: LinkInfo, retry: (m: Message) => Promise<void>, decide?: Decide): void {
  row.className = `vrow msg msg-${m.kind}${m.draft ? ' msg-is-draft' : ''}`;
  row.dataset.id = String(m.id);
  if (m.kind === 'permission') {
    row.replaceChildren(permissionCard(m, decide ?? (() => Promise.reject(new Error('Not available here.')))));
    return;
  }
  if (m.message_id) row.dataset.messageId = m.message_id;
  else delete row.dataset.messageId;
  row.dataset.draft = m.draft ? 'true' : 'false';
  if (m.kind === 'user' && m.delivery) row.dataset.delivery = m.delivery;
  else delete row.dataset.delivery;
  const note = m.kind === 'user' ? deliveryNote(m, (btn, err) => void runRetry(btn, err, () => retry(m)), 'message', link.waiting ?? null) : null;
  const bubble = h('div', { class: 'msg-bubble' }, metaLine(m, link), body(m), note);
  row.replaceChildren(bubble);
}

export class ChatView {
  readonly panel: HTMLElement;
  private scroller: HTMLElement;
  private list: VList<Message>;
  private typingEl: HTMLElement;
  private pill: HTMLButtonElement;
  private empty: HTMLElement;
  /** Above the composer: why nothing will answer (no assistant), with the way to fix it. */
  private notice = h('div', { class: 'chat-notice', hidden: true });
  private input: HTMLTextAreaElement;
  private sendBtn: HTMLButtonElement;
  private sendError: HTMLElement;
  private announcer: HTMLElement;
  private conv: Conversation | null = null;
  private newCount = 0;
  private dirty = false;
  private sending = false;
  private loadingOlder = false;
  private emptyText = '';
  private link: LinkInfo = { configured: true };
  private stopControl: StopControl;

  constructor(private actions: ChatActions) {
    const retry = (m: Message) => this.actions.retry(m);
    const decide: Decide = (id, allow) => (this.actions.decide ? this.actions.decide(id, allow) : Promise.reject(new Error('Not available here.')));
    this.scroller = h('div', {
      class: 'msg-scroller',
      tabindex: '0',
      'aria-label': 'Conversation. Use the arrow keys and Page Up / Page Down to scroll.',
    });
    this.list = new VList<Message>({
      scroller: this.scroller,
      key: keyOf,
      estimate,
      create: (m) => {
        const row = h('div');
        fill(row, m, this.link, retry, decide);
        return row;
      },
      update: (row, m) => fill(row, m, this.link, retry, decide),
      onScrollState: (atBottom) => {
        if (atBottom && this.newCount) {
          this.newCount = 0;
          this.updatePill();
        }
      },
    });
    this.scroller.addEventListener('scroll', () => this.maybeLoadOlder(), { passive: true });
    this.list.listElement.setAttribute('aria-label', 'Messages');
    this.list.listElement.id = 'messages';
    this.empty = h('div', { class: 'empty-state', hidden: true });
    this.pill = h('button', { class: 'new-pill', type: 'button', hidden: true, onclick: () => this.jumpToEnd() });
    this.typingEl = h('div', { class: 'typing', role: 'status', 'aria-live': 'polite', hidden: true });
    this.announcer = h('div', { class: 'sr-only', 'aria-live': 'polite', 'aria-atomic': 'true' });
    this.stopControl = new StopControl(async () => {
      if (this.actions.stop) await this.actions.stop();
    });

    this.input = h('textarea', {
      class: 'composer-input',
      rows: 1,
      placeholder: 'Message your assistant…',
      'aria-label': 'Message',
      'aria-describedby': 'composer-hint',
    });
    this.input.addEventListener('keydown', (e) => this.onKey(e));
    this.input.addEventListener('input', () => this.autosize());
    this.sendBtn = h('button', { class: 'btn btn-primary composer-send', type: 'submit' }, 'Send');
    this.sendError = h('div', { class: 'composer-error', role: 'alert', hidden: true });
    const form = h(
      'form',
      { class: 'composer', onsubmit: (e: Event) => (e.preventDefault(), void this.submit()) },
      h('div', { class: 'composer-row' }, this.input, this.sendBtn),
      h('div', { class: 'composer-hint', id: 'composer-hint' }, 'Enter to send · Shift+Enter for a new line'),
      this.sendError,
    );

    this.panel = h(
      'section',
      { class: 'panel panel-chat', id: 'panel-chat', role: 'tabpanel', 'aria-labelledby': 'tab-chat' },
      h('div', { class: 'msg-area' }, this.scroller, this.empty, this.pill),
      this.typingEl,
      this.stopControl.el,
      this.notice,
      form,
      this.announcer,
    );
  }

  setNotice(el: HTMLElement | null): void {
    if (!el) {
      if (!this.notice.hidden) {
        this.notice.hidden = true;
        this.notice.replaceChildren();
      }
      return;
    }
    if (!this.notice.hidden && this.notice.firstElementChild?.id === el.id) return;
    this.notice.replaceChildren(el);
    this.notice.hidden = false;
  }

  get composer(): HTMLTextAreaElement {
    return this.input;
  }

  /** Shows `conv` (or nothing); `emptyText` is what an empty conversation says. */
  bind(conv: Conversation | null, emptyText: string): void {
    this.conv = conv;
    this.emptyText = emptyText;
    this.newCount = 0;
    this.updatePill();
    this.list.reset(conv ? conv.messages : [], true);
    this.renderTyping();
    this.updateEmpty();
  }

  /** The link's state changed: pending user messages may read differently (queued / sending). */
  setLink(link: LinkInfo): void {
    const canStopChanged = !!link.canStop !== !!this.link.canStop;
    if (canStopChanged) {
      this.link = { ...this.link, canStop: link.canStop };
      this.paintStop();
    }
    if (link.configured === this.link.configured && (link.waiting ?? null) === (this.link.waiting ?? null)) return;
    this.link = link;
    const conv = this.conv;
    if (!conv) return;
    conv.messages.forEach((m, i) => {
      if (m.kind === 'user' && m.delivery === 'pending') this.list.updated(i, m);
    });
    this.dirty = true;
  }

  /** A store change for the bound conversation. */
  apply(c: Change): void {
    const conv = this.conv;
    if (!conv) return;
    switch (c.kind) {
      case 'message-insert': {
        const atEnd = c.index === conv.messages.length - 1;
        this.list.inserted(c.index);
        if (atEnd && !this.list.atBottom && c.message.kind !== 'user') {
          this.newCount++;
          this.updatePill();
        }
        if (c.message.kind === 'assistant' && !c.message.draft) this.announce(c.message);
        if (c.message.kind === 'error') this.announce(c.message);
        break;
      }
      case 'message-update':
        this.list.updated(c.index, c.prev);
        if (c.prev.draft && !c.message.draft) this.announce(c.message);
        if (c.message.kind === 'user' && c.message.delivery === 'failed' && c.prev.delivery !== 'failed') {
          this.announcer.textContent = `Your message was not delivered: ${deliveryView(c.message).note ?? ''}`;
        }
        break;
      case 'message-move':
        this.list.moved(c.from, c.to);
        break;
      case 'messages-reset':
        this.list.reset(conv.messages, this.list.atBottom);
        break;
      case 'messages-prepended':
        this.list.prepended(c.count);
        break;
      case 'messages-appended':
        this.list.appended(c.count);
        break;
      case 'messages-dropped':
        this.list.dropped(c.front, c.back);
        break;
      case 'typing':
        if (!c.insights) this.renderTyping();
        return;
      default:
        return;
    }
    this.dirty = true;
  }

  /** Renders pending list changes (called once per batch of events). */
  flush(): void {
    if (!this.dirty) return;
    this.dirty = false;
    this.list.renderFast();
    // How many messages the window holds (the rest is fetched again by cursor when needed).
    this.list.listElement.dataset.loaded = String(this.conv?.messages.length ?? 0);
    this.updateEmpty();
    this.paintStop();
  }

  /** The Stop button: while a reply runs (typing or a live draft) and the kind can stop it. */
  private paintStop(): void {
    const conv = this.conv;
    this.stopControl.show(!!this.link.canStop && !!conv && replyRunning(conv.typing.size, conv.messages));
  }

  /** The panel became visible: measure with real sizes. */
  shown(): void {
    this.list.remeasureAll();
    this.list.render();
  }

  /**
   * Asks for the next older page when the user is near the top of what is loaded, or for the
   * next newer one near its bottom when the window's newer end was dropped (one at a time).
   */
  maybeLoadOlder(): void {
    const conv = this.conv;
    if (!conv || this.loadingOlder) return;
    const s = this.scroller;
    let load: (() => Promise<boolean>) | undefined;
    if (conv.olderPath && this.actions.loadOlder && s.scrollTop <= LOAD_OLDER_PX) load = this.actions.loadOlder;
    else if (conv.newer.length && this.actions.loadNewer && s.scrollHeight - s.scrollTop - s.clientHeight <= LOAD_OLDER_PX)
      load = this.actions.loadNewer;
    if (!load) return;
    this.loadingOlder = true;
    void load()
      .catch(() => false)
      .then((ok) => {
        this.loadingOlder = false;
        // Still near the top (a short page, a fast scroll): the next one.
        if (ok) requestAnimationFrame(() => this.maybeLoadOlder());
      });
  }

  /** Scrolls to the message `id` and highlights it; false when it is not loaded. */
  reveal(id: number): boolean {
    const key = String(id);
    this.list.render();
    if (!this.list.scrollToKey(key)) return false;
    const el = this.list.elementOf(key);
    if (el) {
      el.classList.add('search-hit');
      setTimeout(() => el.classList.remove('search-hit'), HIGHLIGHT_MS);
    }
    return true;
  }

  /** Rows in the DOM now (the list renders only those near the viewport). */
  get renderedRows(): number {
    return this.list.renderedCount;
  }

  jumpToEnd(): void {
    this.newCount = 0;
    this.updatePill();
    if (this.conv?.newer.length && this.actions.loadNewest) {
      void this.actions.loadNewest().then(() => this.list.scrollToBottom());
      return;
    }
    this.list.scrollToBottom();
  }

  /** The list is at its end (and the window reaches the newest message). */
  get atLiveEnd(): boolean {
    return this.list.atBottom && !this.conv?.newer.length;
  }

  private updatePill(): void {
    this.pill.hidden = this.newCount === 0;
    this.pill.textContent = this.newCount === 1 ? '1 new message ↓' : `${this.newCount} new messages ↓`;
  }

  private updateEmpty(): void {
    const isEmpty = !this.conv || this.conv.messages.length === 0;
    if (this.empty.hidden !== !isEmpty) this.empty.hidden = !isEmpty;
    const text = this.conv && !this.conv.loaded ? 'Loading…' : this.emptyText;
    if (isEmpty && this.empty.textContent !== text) this.empty.textContent = text;
  }

  private renderTyping(): void {
    const t = this.conv ? [...this.conv.typing.values()] : [];
    this.paintStop();
    if (t.length === 0) {
      this.typingEl.hidden = true;
      this.typingEl.replaceChildren();
      return;
    }
    t.sort((a: Typing, b: Typing) => (a.since ?? '').localeCompare(b.since ?? ''));
    const latest = t[t.length - 1];
    const label = latest.label ? latest.label.replace(/\s*(\.\.\.|…)$/, '') : null;
    this.typingEl.hidden = false;
    this.typingEl.replaceChildren(
      h('span', { class: 'typing-dots', 'aria-hidden': 'true' }, h('i'), h('i'), h('i')),
      h('span', { class: 'typing-text' }, label ? `Assistant · ${label}…` : 'Assistant is typing…'),
    );
    if (t.length > 1) this.typingEl.append(h('span', { class: 'typing-more' }, ` (${t.length} replies in progress)`));
  }

  private announce(m: Message): void {
    const text = m.text.length > 240 ? m.text.slice(0, 240) + '…' : m.text;
    this.announcer.textContent =
      m.kind === 'error' ? `Error ${m.error_code ?? ''}: ${text}` : `Assistant: ${text}`;
  }

  private onKey(e: KeyboardEvent): void {
    if (e.key !== 'Enter' || e.isComposing || e.keyCode === 229) return;
    if (e.shiftKey || e.altKey) return; // newline
    e.preventDefault();
    void this.submit();
  }

  /** Grows with the text up to 200 px; a scrollbar only past that (none on one line). */
  private autosize(): void {
    this.input.style.height = 'auto';
    const full = this.input.scrollHeight;
    this.input.style.height = `${Math.min(full, 200)}px`;
    this.input.style.overflowY = full > 200 ? 'auto' : 'hidden';
  }

  private async submit(): Promise<void> {
    const text = this.input.value;
    if (!text.trim() || this.sending) return;
    this.sending = true;
    this.sendBtn.disabled = true;
    this.sendError.hidden = true;
    try {
      await this.actions.send(text);
      if (this.input.value === text) this.input.value = '';
      this.autosize();
      this.jumpToEnd();
    } catch (err) {
      this.sendError.hidden = false;
      this.sendError.textContent = err instanceof Error ? err.message : String(err);
    } finally {
      this.sending = false;
      this.sendBtn.disabled = false;
    }
  }
}
