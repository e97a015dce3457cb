// Search in Past calls: a box that searches every call's chat, insights and transcript
// (`GET /api/search?q=…`) as the user types, and a list of results; choosing one opens the call
// at that message (the app scrolls to it and highlights it).

import { dateTime, fullTime, h } from './dom';
import type { Schemas, WireBut } from './types';

/** One result of `GET /api/search` (`SearchHit` of the OpenAPI document; `kind`, `role` and `highlights` narrowed). */
export interface SearchHit extends WireBut<Schemas['SearchHit'], 'kind' | 'role' | 'highlights'> {
  kind: 'chat' | 'insight' | 'transcript';
  role: 'user' | 'assistant' | null;
  highlights: [number, number][];
}

export interface SearchActions {
  /** Runs a search; throws with a sentence for the user when it fails. */
  search(q: string): Promise<SearchHit[]>;
  /** Opens the hit's call at its message. */
  jump(hit: SearchHit): void;
}

/** Typing pauses this long before a search runs. */
export const SEARCH_DEBOUNCE_MS = 250;

const KIND_LABEL: Record<SearchHit['kind'], string> = { chat: 'Chat', insight: 'Insight', transcript: 'Transcript' };

/**
 * A snippet without its markdown marks (`**bold**`, `` `code` ``, `~~x~~`, `__x__`, a heading's
 * `#`), the highlights moved with the text (offsets are Unicode code points).
 */
export function plainSnippet(snippet: string, highlights: [number, number][]): { text: string; highlights: [number, number][] } {
  const chars = Array.from(snippet);
  const keep = chars.map(() => true);
  for (let i = 0; i < chars.length; i++) {
    const c = chars[i];
    if (c === '*' || c === '`' || c === '~') keep[i] = false;
    else if (c === '_' && (chars[i + 1] === '_' || chars[i - 1] === '_')) keep[i] = false;
    else if (c === '#' && (i === 0 || chars[i - 1] === '\n' || !keep[i - 1])) {
      let j = i;
      while (chars[j] === '#') j++;
      if (chars[j] === ' ' && (i === 0 || chars[i - 1] === '\n')) for (let k = i; k <= j; k++) keep[k] = false;
    }
  }
  // at[i]: where the i-th original code point lands (the length at the end).
  const at: number[] = [];
  let n = 0;
  for (let i = 0; i < chars.length; i++) {
    at.push(n);
    if (keep[i]) n++;
  }
  at.push(n);
  const moved = highlights
    .filter(([a, b]) => a >= 0 && b > a && b <= chars.length)
    .map(([a, b]) => [at[a], at[b]] as [number, number])
    .filter(([a, b]) => b > a);
  return { text: chars.filter((_, i) => keep[i]).join(''), highlights: moved };
}

/** The snippet as text with its matches in `<mark>` (offsets are Unicode code points). */
export function snippetNodes(raw: string, rawHighlights: [number, number][]): Node[] {
  const { text: snippet, highlights } = plainSnippet(raw, rawHighlights);
  const chars = Array.from(snippet);
  const marks = [...highlights].filter(([a, b]) => a >= 0 && b > a && b <= chars.length).sort((x, y) => x[0] - y[0]);
  const out: Node[] = [];
  let at = 0;
  for (const [a, b] of marks) {
    if (a < at) continue; // overlapping: keep the first
    if (a > at) out.push(document.createTextNode(chars.slice(at, a).join('')));
    out.push(h('mark', null, chars.slice(a, b).join('')));
    at = b;
  }
  if (at < chars.length) out.push(document.createTextNode(chars.slice(at).join('')));
  return out;
}

export class SearchView {
  readonly el: HTMLElement;
  readonly input: HTMLInputElement;
  private list: HTMLUListElement;
  private status: HTMLElement;
  private timer: ReturnType<typeof setTimeout> | undefined;
  /** Answers to an older query than the newest are dropped. */
  private seq = 0;

  constructor(private actions: SearchActions) {
    this.input = h('input', {
      class: 'search-input',
      type: 'search',
      id: 'search-input',
      placeholder: 'Search every call: chat, insights, transcript',
      'aria-label': 'Search past calls',
      autocomplete: 'off',
      spellcheck: 'false',
    });
    this.status = h('div', { class: 'search-status', role: 'status', 'aria-live': 'polite' });
    this.list = h('ul', { class: 'search-results', id: 'search-results', 'aria-label': 'Search results, newest first', hidden: true });
    this.input.addEventListener('input', () => this.queue());
    this.input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') {
        e.preventDefault();
        this.run();
      } else if (e.key === 'Escape' && this.input.value) {
        e.preventDefault();
        this.clear();
      }
    });
    this.el = h('div', { class: 'search', role: 'search' }, this.input, this.status, this.list);
  }

  /** Whether results are shown (the session list hides meanwhile). */
  get active(): boolean {
    return this.input.value.trim() !== '';
  }

  clear(): void {
    this.input.value = '';
    this.seq++;
    clearTimeout(this.timer);
    this.list.replaceChildren();
    this.list.hidden = true;
    this.status.textContent = '';
    this.el.dispatchEvent(new CustomEvent('search-change', { bubbles: true }));
  }

  private queue(): void {
    clearTimeout(this.timer);
    if (!this.active) {
      this.clear();
      return;
    }
    this.timer = setTimeout(() => this.run(), SEARCH_DEBOUNCE_MS);
  }

  /** Searches now for what is in the box. */
  async run(): Promise<void> {
    clearTimeout(this.timer);
    const q = this.input.value.trim();
    const seq = ++this.seq;
    this.el.dispatchEvent(new CustomEvent('search-change', { bubbles: true }));
    if (!q) return;
    this.status.textContent = 'Searching…';
    try {
      const hits = await this.actions.search(q);
      if (seq !== this.seq) return;
      this.render(hits);
    } catch (e) {
      if (seq !== this.seq) return;
      this.list.replaceChildren();
      this.list.hidden = true;
      this.status.textContent = e instanceof Error ? e.message : String(e);
    }
  }

  private render(hits: SearchHit[]): void {
    this.status.textContent = hits.length === 0 ? 'Nothing found.' : hits.length === 1 ? '1 result' : `${hits.length} results`;
    this.list.hidden = hits.length === 0;
    this.list.replaceChildren(
      ...hits.map((hit) => {
        const title = hit.title && hit.title.trim() ? hit.title.trim() : `${hit.is_call ? 'Call' : 'Chat'} · ${dateTime(hit.session_created_at)}`;
        const who = hit.kind === 'chat' ? (hit.role === 'user' ? 'You' : 'Assistant') : KIND_LABEL[hit.kind];
        const btn = h(
          'button',
          {
            class: 'search-hit-item',
            type: 'button',
            'data-session-id': hit.session_id,
            'data-kind': hit.kind,
            'data-message-id': String(hit.message_id),
            title: `Open at this ${hit.kind === 'chat' ? 'message' : hit.kind === 'insight' ? 'insight' : 'turn'} · ${fullTime(hit.time)}`,
          },
          h('span', { class: 'search-hit-head' }, h('span', { class: `chip chip-${hit.kind}` }, KIND_LABEL[hit.kind]), h('span', { class: 'search-hit-title' }, title), h('span', { class: 'search-hit-time' }, dateTime(hit.time))),
          h('span', { class: 'search-hit-snippet' }, h('span', { class: 'search-hit-who' }, `${who}: `), ...snippetNodes(hit.snippet, hit.highlights)),
        );
        btn.addEventListener('click', () => this.actions.jump(hit));
        return h('li', null, btn);
      }),
    );
  }
}
