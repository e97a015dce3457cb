// The Insights tab: one short line per insight, newest first, with the time into the call.

import { clockTime, duration, fullTime, h } from './dom';
import { renderInline } from './markdown';
import type { Conversation } from './store';
import type { Insight } from './types';

export class InsightsView {
  readonly panel: HTMLElement;
  private list: HTMLOListElement;
  private typingEl: HTMLElement;
  private empty: HTMLElement;
  private items = new Map<string, { li: HTMLLIElement; ins: Insight }>();
  private conv: Conversation | null = null;
  private emptyText = '';
  /** Why no insights come (e.g. the assistant kind has no insights session), or hidden. */
  private notice = h('p', { class: 'setting-note insight-notice', id: 'insights-notice', role: 'status', hidden: true });

  /** Asks for the next older page of insights (shown when there is one). */
  private olderBtn: HTMLButtonElement;
  private loadingOlder = false;

  constructor(private loadOlder?: () => Promise<void>) {
    this.list = h('ol', {
      class: 'insight-list',
      id: 'insights',
      'aria-live': 'polite',
      'aria-relevant': 'additions',
      'aria-label': 'Insights, newest first',
    });
    this.typingEl = h('div', { class: 'typing insight-typing', role: 'status', hidden: true });
    this.empty = h('div', { class: 'empty-state' });
    this.olderBtn = h('button', { class: 'btn btn-small list-older', id: 'insights-older', type: 'button', hidden: true, onclick: () => this.older() }, 'Older insights');
    const scroller = h('div', { class: 'insight-scroller', tabindex: '0', 'aria-label': 'Insights' }, this.list, this.olderBtn, this.empty);
    // Scrolled near the end of the list (the oldest shown): the page before it.
    scroller.addEventListener('scroll', () => {
      if (scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 400) this.older();
    }, { passive: true });
    this.panel = h(
      'section',
      { class: 'panel panel-insights', id: 'panel-insights', role: 'tabpanel', 'aria-labelledby': 'tab-insights', hidden: true },
      this.notice,
      this.typingEl,
      scroller,
    );
  }

  /** Shows (or hides, with null) a line about why no insights come. */
  setNotice(text: string | null): void {
    this.notice.hidden = !text;
    this.notice.textContent = text ?? '';
  }

  bind(conv: Conversation | null, emptyText: string): void {
    this.conv = conv;
    this.emptyText = emptyText;
    this.items.clear();
    this.list.replaceChildren();
    this.render();
  }

  /** Keyed update: only new insights are added as nodes (so aria-live announces just those). */
  render(): void {
    const conv = this.conv;
    const list = conv ? conv.insights : [];
    const keep = new Set<string>();
    let prevEl: Element | null = null;
    for (const ins of list) {
      const key = String(ins.id);
      keep.add(key);
      let item = this.items.get(key);
      if (!item) {
        item = { li: h('li'), ins };
        fill(item.li, ins);
        this.items.set(key, item);
      } else if (item.ins !== ins) {
        item.ins = ins;
        fill(item.li, ins);
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
    this.olderBtn.hidden = !conv?.insightsOlder || !this.loadOlder;
    this.empty.hidden = list.length > 0;
    this.empty.textContent = conv && !conv.loaded ? 'Loading…' : this.emptyText;
    this.renderTyping();
  }

  private older(): void {
    if (this.loadingOlder || !this.loadOlder || !this.conv?.insightsOlder) return;
    this.loadingOlder = true;
    this.olderBtn.disabled = true;
    void this.loadOlder().finally(() => {
      this.loadingOlder = false;
      this.olderBtn.disabled = false;
    });
  }

  renderTyping(): void {
    const n = this.conv ? this.conv.insightTyping.size : 0;
    this.typingEl.hidden = n === 0;
    this.typingEl.replaceChildren(
      ...(n
        ? [
            h('span', { class: 'typing-dots', 'aria-hidden': 'true' }, h('i'), h('i'), h('i')),
            h('span', { class: 'typing-text' }, 'Assistant is listening…'),
          ]
        : []),
    );
  }
}

function fill(li: HTMLLIElement, ins: Insight): void {
  li.className = `insight${ins.draft ? ' insight-is-draft' : ''}`;
  li.dataset.id = String(ins.id);
  const t = ins.occurred_at ?? ins.received_at;
  const when =
    // One convention everywhere: the clock time, the time into the call on hover.
    h(
      'time',
      {
        class: 'insight-offset',
        datetime: t ?? undefined,
        'data-offset': ins.offset_ms != null ? duration(ins.offset_ms) : undefined,
        title: ins.offset_ms != null ? `${duration(ins.offset_ms)} into the call · ${fullTime(t)}` : fullTime(t),
      },
      clockTime(t),
    );
  const text = h('span', { class: 'insight-text' });
  // One short line: collapse newlines, keep inline emphasis and links.
  text.append(renderInline(ins.text.replace(/\s*\n+\s*/g, ' ').trim()));
  li.replaceChildren(when, text);
}
