// Settings → Assistant: past calls over MCP. The switch ("Let my assistant look up past calls"),
// the MCP URL and its own token (copy, show, rotate), copyable set-up for each assistant, and
// the activity log. And, for the call view, "Your assistant read: …" with the call's "private"
// switch (McpReads).

import { copyButton, fullTime, h } from '../dom';
import type { ApiResponse } from '../transport';

export type Api = <T>(method: string, path: string, body?: unknown) => Promise<ApiResponse<T>>;

export interface McpView {
  enabled: boolean;
  url: string;
  token: string;
}

export interface McpRead {
  session_id: string;
  title: string | null;
  tool: string;
  at: string;
}

const TOOL_LABEL: Record<string, string> = {
  list_calls: 'listed it',
  search_calls: 'searched it',
  get_transcript: 'read the transcript',
  get_call: 'read the call',
  current_call: 'read it live',
};

/** The set-up of each assistant, filled in with the URL and token. */
export function snippets(url: string, token: string): { id: string; label: string; note: string; text: string }[] {
  return [
    {
      id: 'hermes',
      label: 'Hermes Agent',
      note: 'Add to ~/.hermes/config.yaml, then start a new Hermes session.',
      text: `mcp_servers:\n  stagewhisper:\n    url: "${url}"\n    headers:\n      Authorization: "Bearer ${token}"\n`,
    },
    {
      id: 'claude',
      label: 'Claude Code',
      note: 'Run once in a terminal.',
      text: `claude mcp add --transport http stagewhisper ${url} --header "Authorization: Bearer ${token}"`,
    },
    {
      id: 'openclaw',
      label: 'OpenClaw',
      note: 'Run once (`openclaw mcp set`, OpenClaw 2026.4 or later; older versions may need the server added to mcp.servers in openclaw.json by hand), then start a new agent session.',
      text: `openclaw mcp set stagewhisper '${JSON.stringify({ url, transport: 'streamable-http', headers: { Authorization: `Bearer ${token}` } })}'`,
    },
  ];
}

function readLine(r: McpRead): string {
  return `${TOOL_LABEL[r.tool] ?? r.tool} · ${fullTime(r.at)}`;
}

export class McpSettings {
  readonly card: HTMLElement;
  private view: McpView | null = null;
  private revealed = false;
  private toggle = h('input', { type: 'checkbox', id: 'mcp-enabled', role: 'switch' }) as HTMLInputElement;
  private urlEl = h('code', { class: 'setting-value', id: 'mcp-url' });
  private tokenEl = h('code', { class: 'setting-value setting-secret', id: 'mcp-token' });
  private revealBtn = h('button', { class: 'btn btn-small', type: 'button', 'aria-pressed': 'false' }, 'Show');
  private details = h('div', { id: 'mcp-details', hidden: true });
  private snippetsEl = h('div', { class: 'mcp-snippets', id: 'mcp-snippets' });
  private activity = h('ol', { class: 'mcp-activity', id: 'mcp-activity', 'aria-label': 'What your assistant read, newest first' });
  private status = h('div', { class: 'setting-status', id: 'mcp-status', role: 'status', 'aria-live': 'polite' });

  constructor(private api: Api) {
    this.toggle.addEventListener('change', () => void this.setEnabled(this.toggle.checked));
    this.revealBtn.addEventListener('click', () => {
      this.revealed = !this.revealed;
      this.revealBtn.setAttribute('aria-pressed', String(this.revealed));
      this.revealBtn.textContent = this.revealed ? 'Hide' : 'Show';
      this.paint();
    });
    const rotateBtn = h('button', { class: 'btn btn-small btn-danger', type: 'button', id: 'mcp-rotate' }, 'Rotate');
    rotateBtn.addEventListener('click', () => void this.rotate());
    const row = (label: string, value: HTMLElement, ...buttons: HTMLElement[]) =>
      h('div', { class: 'setting-row' }, h('div', { class: 'setting-label' }, label), h('div', { class: 'setting-field' }, value, ...buttons));
    this.details.append(
      row('MCP URL', this.urlEl, copyButton('MCP URL', () => this.view?.url ?? '', 'mcp-copy-url')),
      row('MCP token', this.tokenEl, this.revealBtn, copyButton('MCP token', () => this.view?.token ?? '', 'mcp-copy-token'), rotateBtn),
      h('p', { class: 'setting-note' }, 'Rotating makes a new token at once: the old one stops working, so give the new one to your assistant. The URL’s port changes when the app restarts unless it is started with --ui-listen 127.0.0.1:<port>.'),
      h('h3', null, 'Set up your assistant'),
      this.snippetsEl,
      h('h3', null, 'What your assistant read'),
      this.activity,
    );
    this.card = h(
      'fieldset',
      { class: 'card', id: 'settings-mcp' },
      h('legend', null, 'Assistant: past calls'),
      h(
        'label',
        { class: 'setting-row mcp-switch' },
        this.toggle,
        h('span', null, 'Let my assistant look up past calls'),
      ),
      h(
        'p',
        { class: 'setting-note', id: 'mcp-explain' },
        'When on, an assistant you set up with the token below can search and read your calls — titles, transcripts, insights, chats and summaries — over MCP on this computer only; calls you mark private stay hidden, and every read is listed here and in the call.',
      ),
      this.details,
      this.status,
    );
  }

  async load(): Promise<void> {
    const res = await this.api<McpView>('GET', '/api/mcp');
    if (res.status !== 200) {
      this.status.textContent = 'Could not read the MCP settings.';
      return;
    }
    this.view = res.body;
    this.paint();
    if (this.view.enabled) await this.loadActivity();
  }

  private async setEnabled(on: boolean): Promise<void> {
    const res = await this.api<McpView>('PUT', '/api/mcp', { enabled: on });
    if (res.status !== 200) {
      this.status.textContent = 'Could not change the setting.';
      this.toggle.checked = !on;
      return;
    }
    this.view = res.body;
    this.status.textContent = on ? 'Your assistant can now look up past calls.' : 'Your assistant can no longer look up past calls.';
    this.paint();
    if (on) await this.loadActivity();
  }

  private async rotate(): Promise<void> {
    const res = await this.api<McpView>('POST', '/api/mcp/token');
    if (res.status !== 200) {
      this.status.textContent = 'Could not make a new token.';
      return;
    }
    this.view = res.body;
    this.status.textContent = 'New token in place. The old one no longer works: update your assistant.';
    this.paint();
  }

  private async loadActivity(): Promise<void> {
    const res = await this.api<McpRead[]>('GET', '/api/mcp/activity?limit=50');
    if (res.status !== 200) return;
    this.activity.replaceChildren(
      ...(res.body.length
        ? res.body.map((r) => h('li', null, h('strong', null, r.title || 'Untitled call'), ` — ${readLine(r)}`))
        : [h('li', { class: 'setting-note' }, 'Nothing yet.')]),
    );
  }

  private paint(): void {
    const v = this.view;
    this.toggle.checked = !!v?.enabled;
    this.details.hidden = !v?.enabled;
    this.urlEl.textContent = v?.url ?? '…';
    const tok = v?.token ?? '';
    this.tokenEl.textContent = this.revealed ? tok : '•'.repeat(Math.min(24, Math.max(8, tok.length)));
    this.tokenEl.dataset.revealed = String(this.revealed);
    if (!v) return;
    this.snippetsEl.replaceChildren(
      ...snippets(v.url, v.token).map((s) =>
        h(
          'div',
          { class: 'mcp-snippet', id: `mcp-snippet-${s.id}` },
          h('div', { class: 'setting-label' }, s.label, ' ', copyButton(`${s.label} set-up`, () => s.text, `mcp-copy-${s.id}`)),
          h('p', { class: 'setting-note' }, s.note),
          h('pre', { class: 'setting-value mcp-code' }, s.text),
        ),
      ),
    );
  }
}

/** The call view's strip: "Your assistant read: …", and the call's "private" switch. */
export class McpReads {
  readonly el = h('div', { class: 'mcp-reads', id: 'mcp-reads', hidden: true });
  private sid: string | null = null;

  constructor(private api: Api) {}

  async show(sid: string | null): Promise<void> {
    this.sid = sid;
    if (!sid) {
      this.el.hidden = true;
      return;
    }
    const res = await this.api<{ private: boolean; reads: McpRead[] }>('GET', `/api/sessions/${encodeURIComponent(sid)}/mcp-reads`);
    if (this.sid !== sid) return;
    if (res.status !== 200 || !Array.isArray(res.body?.reads)) {
      this.el.hidden = true;
      return;
    }
    const box = h('input', { type: 'checkbox', id: 'mcp-private' }) as HTMLInputElement;
    box.checked = res.body.private;
    box.addEventListener('change', async () => {
      const r = await this.api('PUT', `/api/calls/${encodeURIComponent(sid)}`, { private: box.checked });
      if (r.status !== 200) box.checked = !box.checked;
    });
    const reads = res.body.reads;
    this.el.replaceChildren(
      h('label', { class: 'mcp-private' }, box, ' Private: hide this call from my assistant'),
      reads.length
        ? h(
            'p',
            { class: 'setting-note', id: 'mcp-read-list' },
            'Your assistant read: ',
            reads
              .slice(0, 5)
              .map(readLine)
              .join('; '),
            reads.length > 5 ? ` (and ${reads.length - 5} more)` : '',
          )
        : '',
    );
    this.el.hidden = false;
  }
}
