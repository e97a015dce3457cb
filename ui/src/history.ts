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
  /** Renames a session (`''`: untitled; throws with a sentence when it fails). */
  rename?(sessionId: string, title: string): Promise<void>;
  /** Deletes a session and everything in it (throws with a sentence when it fails). */
  remove?(sessionId: string): Promise<void>;
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
  /** The row being renamed, and its input (kept across renders: events come while typing). */
  private editing: { sid: string; input: HTMLInputElement } | null = null;
  /** The row asking "Delete …?". */
  private confirmingDelete: string | null = null;
  private last: { sessions: Session[]; activeId: string | null } = { sessions: [], activeId: null };

  private rerender(): void {
    this.render(this.last.sessions, this.last.activeId);
  }

  private fail(e: unknown): void {
    this.error.hidden = false;
    this.error.textContent = e instanceof Error ? e.message : String(e);
  }

  private startRename(s: Session): void {
    const input = h('input', {
      class: 'history-rename-input',
      type: 'text',
      maxlength: '200',
      value: s.title ?? '',
      placeholder: sessionTitle(s),
      'aria-label': `New title for ${sessionTitle(s)}`,
      'data-rename-session': s.session_id,
    });
    input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') {
        e.preventDefault();
        void this.saveRename(s.session_id);
      } else if (e.key === 'Escape') {
        e.preventDefault();
        this.editing = null;
        this.rerender();
      }
    });
    this.editing = { sid: s.session_id, input };
    this.confirmingDelete = null;
    this.rerender();
    input.focus();
    input.select();
  }

  private async saveRename(sid: string): Promise<void> {
    const run = this.actions.rename;
    if (!run || this.editing?.sid !== sid) return;
    const input = this.editing.input;
    input.disabled = true;
    this.error.hidden = true;
    try {
      await run(sid, input.value.trim());
      this.editing = null;
      this.rerender();
    } catch (e) {
      input.disabled = false;
      input.focus();
      this.fail(e);
    }
  }

  private async confirmDelete(sid: string): Promise<void> {
    const run = this.actions.remove;
    if (!run) return;
    this.error.hidden = true;
    try {
      await run(sid);
      this.confirmingDelete = null;
    } catch (e) {
      this.fail(e);
    }
    this.rerender();
  }

  /** Rename and Delete of a row (or its rename form, or its delete question). */
  private rowControls(s: Session): HTMLElement | null {
    const sid = s.session_id;
    const small = (label: string, cls: string, attrs: Record<string, string>, onClick: () => void) => {
      const b = h('button', { class: `btn btn-small ${cls}`, type: 'button', ...attrs }, label);
      b.addEventListener('click', onClick);
      return b;
    };
    if (this.confirmingDelete === sid) {
      return h(
        'span',
        { class: 'history-confirm', role: 'group', 'aria-label': 'Confirm delete' },
        h('span', { class: 'history-confirm-text' }, `Delete “${sessionTitle(s)}” with its transcript, insights and chat? This cannot be undone.`),
        small('Delete', 'btn-danger', { 'data-confirm-delete': sid }, () => void this.confirmDelete(sid)),
        small('Cancel', '', { 'data-cancel-delete': sid }, () => {
          this.confirmingDelete = null;
          this.rerender();
        }),
      );
    }
    const out = h('span', { class: 'history-manage' });
    if (this.actions.rename) {
      out.append(small('Rename', '', { 'data-rename': sid, 'aria-label': `Rename ${sessionTitle(s)}` }, () => this.startRename(s)));
    }
    const live = s.is_call && !s.ended_at;
    if (this.actions.remove) {
      const del = small('Delete', 'btn-quiet-danger', { 'data-delete': sid, 'aria-label': `Delete ${sessionTitle(s)}` }, () => {
        this.confirmingDelete = sid;
        this.editing = null;
        this.rerender();
        this.list.querySelector<HTMLButtonElement>(`[data-cancel-delete="${CSS.escape(sid)}"]`)?.focus();
      });
      if (live) {
        del.disabled = true;
        del.title = 'End the call first';
      }
      out.append(del);
    }
    return out.childElementCount ? out : null;
  }

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
    this.last = { sessions, activeId };
    if (this.editing && !sessions.some((s) => s.session_id === this.editing?.sid)) this.editing = null;
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
        // A state, not a button: plain words, not a pill.
        s.session_id === activeId ? h('span', { class: 'history-open-now' }, 'open now') : null,
      );
      btn.addEventListener('click', () => this.actions.open(s.session_id));
      if (this.editing?.sid === s.session_id) {
        const save = h('button', { class: 'btn btn-small btn-primary', type: 'button', 'data-save-rename': s.session_id }, 'Save');
        save.addEventListener('click', () => void this.saveRename(s.session_id));
        const cancel = h('button', { class: 'btn btn-small', type: 'button' }, 'Cancel');
        cancel.addEventListener('click', () => {
          this.editing = null;
          this.rerender();
        });
        return h(
          'li',
          { class: 'history-row is-editing', 'data-row': s.session_id },
          h('span', { class: 'history-rename' }, this.editing.input, save, cancel),
        );
      }
      const exports = this.actions.export ? h('span', { class: 'history-exports' }, this.exportButton(s, 'md'), this.exportButton(s, 'json')) : null;
      const controls = this.rowControls(s);
      return h(
        'li',
        { class: 'history-row', 'data-row': s.session_id },
        btn,
        h('span', { class: 'history-actions' }, controls, this.confirmingDelete === s.session_id ? null : exports),
      );
    });
    const focused = document.activeElement;
    this.list.replaceChildren(...items);
    if (this.editing && focused === this.editing.input) this.editing.input.focus();
    this.showList();
  }
}
