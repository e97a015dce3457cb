// Past calls: every call and chat, newest first; opening one shows its chat and insights.

import { dateTime, elapsedSince, fullTime, h } from './dom';
import { SearchView, type SearchHit } from './search';
import type { Session } from './types';

export type ExportFormat = 'md' | 'json';

export interface HistoryActions {
  open(sessionId: string): void;
  newChat(): Promise<void>;
  /** Full-text search over every call (throws with a sentence when it fails). */
  search?(q: string): Promise<SearchHit[]>;
  /** Opens a search result's call at its message. */
  jump?(hit: SearchHit): void;
  /** Saves the session's export as a file (throws with a sentence when it fails). */
  export?(sessionId: string, format: ExportFormat): Promise<void>;
}

export function sessionTitle(s: Session): string {
  if (s.title && s.title.trim()) return s.title.trim();
  const when = dateTime(s.created_at);
  return s.is_call ? `Call · ${when}` : `Chat · ${when}`;
}

export class HistoryView {
  readonly panel: HTMLElement;
  private list: HTMLUListElement;
  private empty: HTMLElement;
  private error: HTMLElement;
  readonly search: SearchView | null = null;

  constructor(private actions: HistoryActions) {
    this.list = h('ul', { class: 'history-list', id: 'history', 'aria-label': 'Calls and chats, newest first' });
    this.empty = h('div', { class: 'empty-state' }, 'No calls or chats yet.');
    this.error = h('div', { class: 'inline-error', role: 'alert', hidden: true });
    const newChat = h('button', { class: 'btn', type: 'button' }, 'New chat');
    newChat.addEventListener('click', async () => {
      this.error.hidden = true;
      try {
        await this.actions.newChat();
      } catch (e) {
        this.error.hidden = false;
        this.error.textContent = e instanceof Error ? e.message : String(e);
      }
    });
    const { search: doSearch, jump } = this.actions;
    if (doSearch && jump) {
      this.search = new SearchView({ search: (q) => doSearch(q), jump: (hit) => jump(hit) });
      // While results are shown, they take the place of the list.
      this.search.el.addEventListener('search-change', () => this.showList());
    }
    this.panel = h(
      'section',
      { class: 'panel panel-history', id: 'panel-history', role: 'tabpanel', 'aria-labelledby': 'tab-history', hidden: true },
      h('div', { class: 'panel-head' }, h('h2', null, 'Past calls and chats'), newChat),
      this.search?.el,
      this.error,
      h('div', { class: 'panel-scroll' }, this.list, this.empty),
    );
  }

  private sessionsShown = 0;

  private showList(): void {
    const searching = !!this.search?.active;
    this.list.hidden = searching;
    this.empty.hidden = searching || this.sessionsShown > 0;
  }

  private exportButton(s: Session, format: ExportFormat): HTMLButtonElement | null {
    const run = this.actions.export;
    if (!run) return null;
    const label = format === 'md' ? 'Markdown' : 'JSON';
    const btn = h(
      'button',
      {
        class: 'btn btn-small history-export',
        type: 'button',
        'data-export': format,
        // Not `data-session-id`: that names the row's own button, one per session.
        'data-export-session': s.session_id,
        title: `Export as ${label} (transcript, insights and chat, with times)`,
        'aria-label': `Export ${sessionTitle(s)} as ${label}`,
      },
      format === 'md' ? '⇩ .md' : '⇩ .json',
    );
    btn.addEventListener('click', async () => {
      this.error.hidden = true;
      btn.disabled = true;
      try {
        await run(s.session_id, format);
      } catch (e) {
        this.error.hidden = false;
        this.error.textContent = e instanceof Error ? e.message : String(e);
      } finally {
        btn.disabled = false;
      }
    });
    return btn;
  }

  render(sessions: Session[], activeId: string | null): void {
    this.sessionsShown = sessions.length;
    const items = sessions.map((s) => {
      const live = s.is_call && !s.ended_at;
      const titled = !!(s.title && s.title.trim());
      const meta = [
        titled ? `${s.is_call ? 'Call' : 'Chat'} · ${dateTime(s.created_at)}` : null,
        s.is_call ? (live ? 'In progress' : `Lasted ${elapsedSince(s.created_at, s.ended_at)}`) : titled ? null : 'No call: chat only',
      ]
        .filter(Boolean)
        .join(' · ');
      const btn = h(
        'button',
        {
          class: 'history-item',
          type: 'button',
          'data-session-id': s.session_id,
          'aria-current': s.session_id === activeId ? 'true' : undefined,
          title: `Open · started ${fullTime(s.created_at)}`,
        },
        h('span', { class: `history-kind ${s.is_call ? 'is-call' : 'is-chat'}`, 'aria-hidden': 'true' }, s.is_call ? '☎' : '✎'),
        h('span', { class: 'history-main' }, h('span', { class: 'history-title' }, sessionTitle(s)), h('span', { class: 'history-meta' }, meta)),
        live ? h('span', { class: 'chip chip-live' }, 'Live') : null,
        s.session_id === activeId ? h('span', { class: 'chip' }, 'Open') : null,
      );
      btn.addEventListener('click', () => this.actions.open(s.session_id));
      const exports = this.actions.export ? h('span', { class: 'history-exports' }, this.exportButton(s, 'md'), this.exportButton(s, 'json')) : null;
      return h('li', { class: 'history-row' }, btn, exports);
    });
    this.list.replaceChildren(...items);
    this.showList();
  }
}
