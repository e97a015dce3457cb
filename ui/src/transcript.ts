// The Transcript tab: a call's final turns, oldest first (speaker, text, time into the call),
// each with its delivery to the assistant; a failed turn can be retried. Below them, greyed, the
// turns being heard right now (live partials, one per open turn), each replaced by its final turn
// when that is stored. A small form adds a turn by hand while the call is live.

import { deliveryNote, QUEUED_LABEL, runRetry, type LinkInfo } from './chat';
import { clockTime, duration, fullTime, h } from './dom';
import { speakerName } from './speakernames';
import { deliveryView, type Conversation } from './store';
import type { PartialTurn, Session, TranscriptTurn } from './types';

export interface TranscriptActions {
  /** Sends a failed turn again; throws on failure. */
  retry(turn: TranscriptTurn): Promise<void>;
  /** Adds a final turn to the open (live) call; throws on failure. */
  add(speaker: string, text: string): Promise<void>;
  /** Loads the next older page of turns. */
  loadOlder?(): Promise<void>;
  /** Renames a speaker of the call (every turn of theirs follows); throws on failure. */
  renameSpeaker?(label: string, name: string): Promise<void>;
}

const STICK_PX = 32;

export class TranscriptView {
  readonly panel: HTMLElement;
  private list: HTMLOListElement;
  private scroller: HTMLElement;
  private empty: HTMLElement;
  private count: HTMLElement;
  private head: HTMLElement;
  private form: HTMLFormElement;
  private speaker: HTMLInputElement;
  private text: HTMLInputElement;
  private addBtn: HTMLButtonElement;
  private formError: HTMLElement;
  private items = new Map<string, { li: HTMLLIElement; turn: TranscriptTurn }>();
  private partialList: HTMLOListElement;
  /** The turns waiting for the speech engine (the backlog): one row each. */
  private waitingList = h('ol', { class: 'turn-list waiting-list', id: 'transcript-waiting', 'aria-label': 'Waiting to be transcribed', hidden: true });
  private partialItems = new Map<string, { li: HTMLLIElement; who: HTMLElement; words: HTMLElement }>();
  private partialCount = 0;
  private conv: Conversation | null = null;
  private session: Session | null = null;
  private adding = false;
  private olderBtn: HTMLButtonElement;
  private loadingOlder = false;
  /** Follow new turns (the user has not scrolled up). */
  private stick = true;
  /** Extra controls for the header (the Summarise action), provided by the app. */
  readonly headActions: HTMLElement;

  constructor(private actions: TranscriptActions) {
    this.list = h('ol', {
      class: 'turn-list',
      id: 'transcript',
      'aria-live': 'polite',
      'aria-relevant': 'additions',
      'aria-label': 'Transcript, oldest first',
    });
    // Not a live region: a partial changes every second or so; the final turn is announced.
    this.partialList = h('ol', { class: 'turn-list partial-list', id: 'transcript-partials', 'aria-label': 'Being heard now', hidden: true });
    this.empty = h('div', { class: 'empty-state' });
    this.olderBtn = h('button', { class: 'btn btn-small list-older', id: 'transcript-older', type: 'button', hidden: true, onclick: () => this.older() }, 'Earlier turns');
    this.scroller = h('div', { class: 'panel-scroll turn-scroller', tabindex: '0', 'aria-label': 'Transcript' }, this.olderBtn, this.list, this.waitingList, this.partialList, this.empty);
    this.scroller.addEventListener('scroll', () => {
      if (this.panel.hidden) return;
      const el = this.scroller;
      this.stick = el.scrollHeight - el.scrollTop - el.clientHeight < STICK_PX;
    });
    this.count = h('span', { class: 'setting-note turn-count' });
    this.headActions = h('div', { class: 'panel-head-actions' });
    this.head = h('div', { class: 'panel-head' }, h('div', { class: 'panel-title' }, h('h2', null, 'Transcript'), this.count), this.headActions);

    this.speaker = h('input', {
      class: 'field-input turn-speaker',
      type: 'text',
      id: 'turn-speaker',
      maxlength: '100',
      placeholder: 'Speaker',
      'aria-label': 'Speaker (optional)',
      autocomplete: 'off',
    });
    this.text = h('input', {
      class: 'field-input turn-text',
      type: 'text',
      id: 'turn-text',
      placeholder: 'Add a turn by hand…',
      'aria-label': 'Transcript turn',
      autocomplete: 'off',
    });
    this.addBtn = h('button', { class: 'btn', type: 'submit' }, 'Add turn');
    this.formError = h('div', { class: 'turn-error', role: 'alert', hidden: true });
    this.form = h(
      'form',
      { class: 'turn-form', 'aria-label': 'Add a transcript turn' },
      h('div', { class: 'turn-form-row' }, this.speaker, this.text, this.addBtn),
      this.formError,
    );
    this.form.addEventListener('submit', (e) => {
      e.preventDefault();
      void this.submit();
    });

    this.panel = h(
      'section',
      { class: 'panel panel-transcript', id: 'panel-transcript', role: 'tabpanel', 'aria-labelledby': 'tab-transcript', hidden: true },
      this.head,
      this.scroller,
      this.form,
    );
  }

  private link: LinkInfo = { configured: true };

  /** The link's state changed: pending turns say the same as pending chat messages. */
  setLink(link: LinkInfo): void {
    if (link.configured === this.link.configured && (link.waiting ?? null) === (this.link.waiting ?? null)) return;
    this.link = link;
    for (const item of this.items.values()) if (item.turn.delivery === 'pending') this.fill(item.li, item.turn);
  }

  bind(conv: Conversation | null, session: Session | null): void {
    const same = conv === this.conv;
    this.conv = conv;
    this.session = session;
    if (!same) {
      this.items.clear();
      this.list.replaceChildren();
      this.renderPartials([]);
    }
    if (!same) this.stick = true;
    this.render();
  }

  /** Rows for the turns that wait for the speech engine (the backlog), after the final turns. */
  setWaiting(rows: HTMLElement[]): void {
    if (rows.length === 0 && this.waitingList.childElementCount === 0) return;
    this.waitingList.replaceChildren(...rows);
    this.waitingList.hidden = rows.length === 0;
    if (rows.length) this.empty.hidden = true;
    if (this.stick && !this.panel.hidden) this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  /** The panel became visible: follow the newest turn unless the user had scrolled up. */
  shown(): void {
    if (this.stick) this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  /** The session changed (e.g. the call ended): the form and the empty text follow. */
  setSession(session: Session | null): void {
    this.session = session;
    this.render();
  }

  /** Keyed update: only new turns become new nodes (so aria-live announces just those). */
  render(): void {
    const conv = this.conv;
    const s = this.session;
    const turns = conv ? conv.transcript : [];
    const keep = new Set<string>();
    let prevEl: Element | null = null;
    for (const t of turns) {
      const key = String(t.id);
      keep.add(key);
      let item = this.items.get(key);
      if (!item) {
        item = { li: h('li'), turn: t };
        this.fill(item.li, t);
        this.items.set(key, item);
      } else if (item.turn !== t) {
        item.turn = t;
        this.fill(item.li, t);
      }
      const want: Element | null = prevEl ? prevEl.nextElementSibling : this.list.firstElementChild;
      if (want !== item.li) this.list.insertBefore(item.li, want);
      prevEl = item.li;
    }
    for (const [key, item] of this.items) {
      if (!keep.has(key)) {
        item.li.remove();
        this.items.delete(key);
      }
    }
    const isCall = !!s?.is_call;
    const live = isCall && !s?.ended_at;
    this.empty.hidden = turns.length > 0 || this.partialCount > 0;
    this.empty.textContent = !conv
      ? 'No call open.'
      : s && !isCall
        ? 'This chat is not a call: it has no transcript.'
        : !conv.transcriptLoaded && !conv.loaded
          ? 'Loading…'
          : live
            ? 'No transcript yet. Press Listen in the call bar and what you and the other side say appears here as it is heard; turns can also be added by hand on the Transcript tab, or posted to the call (POST /api/calls/{id}/transcript).'
            : 'This call has no transcript.';
    this.count.textContent = turns.length ? (turns.length === 1 ? '1 turn' : `${turns.length} turns`) + (conv?.transcriptOlder ? ' (latest)' : '') : '';
    this.olderBtn.hidden = !conv?.transcriptOlder || !this.actions.loadOlder;
    this.form.hidden = !live;
    this.head.hidden = !isCall;
    if (this.stick && turns.length && !this.panel.hidden) this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  /**
   * The turns being heard now (greyed, oldest first): keyed by `turn_id`, so a partial that grows
   * updates its row in place; a turn whose final came (or that went stale) leaves.
   */
  renderPartials(partials: PartialTurn[]): void {
    const keep = new Set<string>();
    let prevEl: Element | null = null;
    for (const p of partials) {
      keep.add(p.turn_id);
      let item = this.partialItems.get(p.turn_id);
      if (!item) {
        const who = h('span', { class: 'turn-speaker-name' });
        const words = h('span', { class: 'turn-words' });
        const li = h(
          'li',
          { class: 'turn turn-partial', 'data-turn-id': p.turn_id },
          h('span', { class: 'turn-offset turn-hearing', title: 'Being heard now' }, h('span', { class: 'hearing-dot', 'aria-hidden': 'true' })),
          h('div', { class: 'turn-main' }, h('div', { class: 'turn-line' }, who, words)),
        );
        item = { li, who, words };
        this.partialItems.set(p.turn_id, item);
      }
      item.li.dataset.channel = p.channel;
      item.who.textContent = p.speaker ?? '';
      item.who.hidden = !p.speaker;
      // Before the engine has a guess the text is empty: someone is speaking.
      item.words.textContent = p.text.trim() ? p.text : '…';
      item.li.setAttribute('aria-label', `${p.speaker ?? 'Someone'} is speaking${p.text.trim() ? `: ${p.text}` : ''} (not final yet)`);
      const want: Element | null = prevEl ? prevEl.nextElementSibling : this.partialList.firstElementChild;
      if (want !== item.li) this.partialList.insertBefore(item.li, want);
      prevEl = item.li;
    }
    for (const [key, item] of this.partialItems) {
      if (!keep.has(key)) {
        item.li.remove();
        this.partialItems.delete(key);
      }
    }
    this.partialCount = partials.length;
    this.partialList.hidden = partials.length === 0;
    this.empty.hidden = (this.conv?.transcript.length ?? 0) > 0 || partials.length > 0;
    if (this.stick && !this.panel.hidden) this.scroller.scrollTop = this.scroller.scrollHeight;
  }

  private older(): void {
    if (this.loadingOlder || !this.actions.loadOlder || !this.conv?.transcriptOlder) return;
    this.loadingOlder = true;
    this.olderBtn.disabled = true;
    this.stick = false;
    void this.actions.loadOlder().finally(() => {
      this.loadingOlder = false;
      this.olderBtn.disabled = false;
    });
  }

  focusInput(): void {
    if (!this.form.hidden) this.text.focus();
  }

  private fill(li: HTMLLIElement, t: TranscriptTurn): void {
    const d = deliveryView(t);
    const queued = d.state === 'sending' && !this.link.configured;
    li.className = `turn${d.state ? ` turn-${d.state}` : ''}`;
    li.dataset.id = String(t.id);
    if (t.delivery) li.dataset.delivery = t.delivery;
    else delete li.dataset.delivery;
    // One convention everywhere: the clock time, the time into the call on hover.
    const when = h(
      'time',
      {
        class: 'turn-offset',
        datetime: t.received_at ?? undefined,
        'data-offset': t.offset_ms != null ? duration(t.offset_ms) : undefined,
        title: t.offset_ms != null ? `${duration(t.offset_ms)} into the call · ${fullTime(t.received_at)}` : fullTime(t.received_at),
      },
      clockTime(t.received_at),
    );
    const mark = d.state
      ? h(
          'span',
          {
            class: `msg-delivery msg-delivery-${d.state}`,
            title:
              d.state === 'sending'
                ? this.link.configured
                  ? 'Being sent to your assistant'
                  : 'No assistant is connected yet: it is sent once one is (Settings → Assistant)'
                : d.state === 'sent'
                  ? 'Sent to your assistant'
                  : 'Not delivered: see below',
            'aria-label': queued ? QUEUED_LABEL : d.label,
          },
          // A transcript has many lines: a sent one carries only the quiet check mark.
          d.state === 'sent' ? '' : queued ? QUEUED_LABEL : d.label,
        )
      : null;
    const main = h(
      'div',
      { class: 'turn-main' },
      h(
        'div',
        { class: 'turn-line' },
        t.speaker ? speakerName(t.speaker, this.actions.renameSpeaker) : null,
        h('span', { class: 'turn-words' }, t.text),
        mark,
      ),
      deliveryNote(t, (btn, err) => void runRetry(btn, err, () => this.actions.retry(t)), 'turn', this.link.waiting ?? null),
    );
    li.replaceChildren(when, main);
  }

  private async submit(): Promise<void> {
    const text = this.text.value.trim();
    if (!text || this.adding) return;
    this.adding = true;
    this.addBtn.disabled = true;
    this.formError.hidden = true;
    try {
      await this.actions.add(this.speaker.value.trim(), text);
      if (this.text.value.trim() === text) this.text.value = '';
      this.stick = true;
      this.scroller.scrollTop = this.scroller.scrollHeight;
    } catch (e) {
      this.formError.hidden = false;
      this.formError.textContent = e instanceof Error ? e.message : String(e);
    } finally {
      this.adding = false;
      this.addBtn.disabled = false;
    }
  }
}
