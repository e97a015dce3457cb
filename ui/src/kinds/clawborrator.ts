// Settings → Assistant for the `clawborrator` kind: the user's Claude Code session, attached as
// an operator through a clawborrator hub. The hub URL, the session token (write-only: never shown
// again), the Claude Code session (picked from the hub's list, `POST
// /api/assistant/clawborrator/sessions`, or typed) and an optional second session for the call's
// insights. Saving sends `PUT /api/assistant {"kind":"clawborrator", …}`; the status comes from the
// store like every kind's.

import { describeError, plainError } from '../errors';
import { h } from '../dom';
import type { ApiResponse } from '../transport';
import type { Assistant } from '../types';

export const KIND = 'clawborrator';

export interface ClawborratorActions {
  /** A request to `/api/assistant…` whose 200 answer the app puts in the store. */
  assistantCall(method: string, path: string, body?: unknown): Promise<ApiResponse<unknown>>;
  errorText(res: ApiResponse<unknown>): string;
  /** A plain control API request (the session list is not the assistant's view). */
  api?<T>(method: string, path: string, body?: unknown): Promise<ApiResponse<T>>;
}

type Field = 'hub_url' | 'session_token' | 'session_id' | 'insights_session_id';

/** Which field an API error code is about (`null`: the form as a whole). */
export function clawErrorField(code: string, message: string): Field | null {
  switch (code) {
    case 'invalid_url':
    case 'insecure_url':
      return 'hub_url';
    case 'invalid_token':
    case 'auth_failed':
      return 'session_token';
    case 'invalid_session':
      return 'session_id';
    case 'invalid_insights_session':
      return 'insights_session_id';
    case 'missing_field':
    case 'invalid_field': {
      const m = message.toLowerCase();
      for (const f of ['insights_session_id', 'session_token', 'session_id', 'hub_url'] as Field[]) if (m.includes(f)) return f;
      return null;
    }
    default:
      return null;
  }
}

const text = (v: unknown): string => (typeof v === 'string' ? v : '');

/**
 * What the Insights tab says about the active assistant (null: nothing special): the
 * `clawborrator` kind without an insights session sends no transcript, so no insights come.
 */
export function insightsNotice(a: Assistant | null): string | null {
  if (!a || a.kind !== KIND || a.status === 'not_configured') return null;
  if (a.extra.insights !== 'not_configured') return null;
  return 'This assistant kind (clawborrator hub) has no insights session configured, so no insights come during calls. Pick a second Claude Code session for insights in Settings → Assistant.';
}

interface HubSession {
  id: string;
  routing_name: string | null;
  cwd: string | null;
  online: boolean | null;
}

function sessionLabel(s: HubSession): string {
  const bits = [s.routing_name, s.cwd].filter((b): b is string => !!b);
  const state = s.online === true ? ' · online' : s.online === false ? ' · offline' : '';
  return `${bits.length ? bits.join(' — ') : s.id}${state}`;
}

export class ClawborratorForm {
  readonly el: HTMLFormElement;
  private a: Assistant | null = null;
  private hubUrl: HTMLInputElement;
  private token: HTMLInputElement;
  private tokenState = h('span', { class: 'chip chip-muted', id: 'claw-token-state' }, 'not set');
  private sessionId: HTMLInputElement;
  private insightsId: HTMLInputElement;
  private picker: HTMLSelectElement;
  private listBtn: HTMLButtonElement;
  private saveBtn: HTMLButtonElement;
  private listResult = h('div', { class: 'setting-note', id: 'claw-sessions-result', role: 'status', 'aria-live': 'polite' });
  private result = h('div', { class: 'setting-status', id: 'claw-result', role: 'status', 'aria-live': 'polite' });
  private insightsState = h('p', { class: 'setting-note', id: 'claw-insights-state' });
  private errors = new Map<Field, HTMLElement>();
  private dirty = new Set<Field>();
  private busy = false;

  constructor(private actions: ClawborratorActions) {
    const input = (id: string, name: Field, props: Record<string, string> = {}) => {
      const el = h('input', {
        class: 'field-input',
        id,
        name,
        autocomplete: 'off',
        spellcheck: 'false',
        'aria-describedby': `${id}-hint ${id}-error`,
        ...props,
      });
      el.addEventListener('input', () => this.touch(name));
      return el;
    };
    this.hubUrl = input('claw-hub-url', 'hub_url', { type: 'url', placeholder: 'https://hub.example.com' });
    this.token = input('claw-token', 'session_token', { type: 'password', autocomplete: 'new-password' });
    this.sessionId = input('claw-session-id', 'session_id', { type: 'text' });
    this.insightsId = input('claw-insights-session', 'insights_session_id', { type: 'text', placeholder: 'none' });
    this.picker = h('select', { class: 'field-input', id: 'claw-session-picker', 'aria-label': 'Sessions on the hub', hidden: true });
    this.picker.addEventListener('change', () => {
      if (!this.picker.value) return;
      this.sessionId.value = this.picker.value;
      this.touch('session_id');
    });
    this.listBtn = h('button', { class: 'btn btn-small', type: 'button', id: 'claw-list-sessions' }, 'List sessions');
    this.listBtn.addEventListener('click', () => void this.listSessions());
    this.saveBtn = h('button', { class: 'btn btn-primary', type: 'submit', id: 'claw-save' }, 'Save and connect');

    const err = (f: Field, id: string) => {
      const el = h('div', { class: 'field-error', id: `${id}-error`, hidden: true });
      this.errors.set(f, el);
      return el;
    };
    const hint = (id: string, t: string) => h('div', { class: 'setting-note', id: `${id}-hint` }, t);
    const row = (label: string, id: string, ...field: (HTMLElement | null)[]) =>
      h('div', { class: 'setting-row setting-row-top' }, h('label', { class: 'setting-label', for: id }, label), h('div', { class: 'setting-field setting-field-col' }, ...field));

    this.el = h(
      'form',
      { class: 'assistant-form', id: 'claw-form', novalidate: true, 'aria-label': 'clawborrator hub settings', hidden: true },
      row('Hub URL', 'claw-hub-url', this.hubUrl, hint('claw-hub-url', 'The hub’s address: https://, or http:// only to this computer.'), err('hub_url', 'claw-hub-url')),
      row(
        'Session token',
        'claw-token',
        h('div', { class: 'inline-field' }, this.token, this.tokenState),
        hint('claw-token', 'Your cw_sess_… token. Write-only: it is stored on this computer and never shown again.'),
        err('session_token', 'claw-token'),
      ),
      row(
        'Claude Code session',
        'claw-session-id',
        h('div', { class: 'inline-field' }, this.sessionId, this.listBtn),
        this.picker,
        this.listResult,
        hint('claw-session-id', 'The session to attach to: list the hub’s sessions and pick one, or paste its id.'),
        err('session_id', 'claw-session-id'),
      ),
      row(
        'Insights session',
        'claw-insights-session',
        this.insightsId,
        hint('claw-insights-session', 'Optional: a second session that gets the call’s transcript and answers in the Insights tab.'),
        this.insightsState,
        err('insights_session_id', 'claw-insights-session'),
      ),
      h('div', { class: 'form-actions' }, this.saveBtn),
      this.result,
    );
    this.el.addEventListener('submit', (e) => {
      e.preventDefault();
      void this.save();
    });
  }

  /** The assistant as the store has it (the saved values when this kind is the active one). */
  render(a: Assistant | null): void {
    this.a = a && a.kind === KIND ? a : null;
    const x = this.a?.extra ?? {};
    const saved = x.token_saved === true;
    this.tokenState.textContent = saved ? 'set' : 'not set';
    this.tokenState.className = `chip ${saved ? 'chip-ok' : 'chip-muted'}`;
    this.token.placeholder = saved ? 'Saved — leave empty to keep it' : 'cw_sess_…';
    if (!this.dirty.has('hub_url')) this.hubUrl.value = text(x.hub_url);
    if (!this.dirty.has('session_id')) this.sessionId.value = text(x.session_id);
    if (!this.dirty.has('insights_session_id')) this.insightsId.value = text(x.insights_session_id);
    if (!this.dirty.has('session_token')) this.token.value = '';
    this.insightsState.textContent = this.a ? (x.insights === 'not_configured' ? 'No insights session: the Insights tab stays empty.' : `Insights: ${text(x.insights_detail)}`) : '';
  }

  private touch(f: Field): void {
    this.dirty.add(f);
    this.setError(f, null);
  }

  private field(f: Field): HTMLInputElement {
    return f === 'hub_url' ? this.hubUrl : f === 'session_token' ? this.token : f === 'session_id' ? this.sessionId : this.insightsId;
  }

  private setError(f: Field, t: string | null): void {
    const el = this.errors.get(f);
    if (!el) return;
    el.hidden = !t;
    el.textContent = t ?? '';
    if (t) this.field(f).setAttribute('aria-invalid', 'true');
    else this.field(f).removeAttribute('aria-invalid');
  }

  private problem(res: ApiResponse<unknown>, what: string): void {
    const b = res.body as { error?: unknown; message?: unknown } | null;
    const code = b && typeof b.error === 'string' ? b.error : '';
    const message = b && typeof b.message === 'string' ? b.message : '';
    const f = code ? clawErrorField(code, message) : null;
    if (f) {
      this.setError(f, plainError(code, message));
      this.field(f).focus();
    }
    this.result.textContent = `${what}: ${this.actions.errorText(res)}`;
    describeError(this.result, res);
  }

  /** The `PUT /api/assistant` body for what the form says now. */
  body(): Record<string, unknown> {
    const b: Record<string, unknown> = {
      kind: KIND,
      hub_url: this.hubUrl.value.trim(),
      session_id: this.sessionId.value.trim(),
      insights_session_id: this.insightsId.value.trim() || null,
    };
    const tok = this.token.value.trim();
    if (tok) b.session_token = tok;
    return b;
  }

  private async listSessions(): Promise<void> {
    const api = this.actions.api;
    if (!api || this.busy) return;
    const body: Record<string, unknown> = { hub_url: this.hubUrl.value.trim() };
    const tok = this.token.value.trim();
    if (tok) body.session_token = tok;
    this.listBtn.disabled = true;
    this.listResult.textContent = 'Asking the hub…';
    try {
      const res = await api<{ sessions?: HubSession[] }>('POST', '/api/assistant/clawborrator/sessions', body);
      const list = res.status === 200 && Array.isArray(res.body?.sessions) ? res.body.sessions : null;
      if (!list) {
        this.listResult.textContent = `Could not list the hub’s sessions: ${this.actions.errorText(res)}`;
        describeError(this.listResult, res);
        return;
      }
      this.picker.replaceChildren(
        h('option', { value: '' }, list.length ? 'Pick a session…' : 'The hub lists no sessions'),
        ...list.map((s) => h('option', { value: s.id }, sessionLabel(s))),
      );
      this.picker.hidden = false;
      this.listResult.textContent = `${list.length} session${list.length === 1 ? '' : 's'} on the hub.`;
      this.picker.focus();
    } catch (e) {
      this.listResult.textContent = `Could not list the hub’s sessions: ${e instanceof Error ? e.message : String(e)}`;
    } finally {
      this.listBtn.disabled = false;
    }
  }

  private async save(): Promise<void> {
    if (this.busy) return;
    for (const f of this.errors.keys()) this.setError(f, null);
    const b = this.body();
    if (!b.hub_url) return this.missing('hub_url', 'Enter the hub’s address.');
    if (!b.session_token && this.a?.extra.token_saved !== true) return this.missing('session_token', 'Enter your session token.');
    if (!b.session_id) return this.missing('session_id', 'Pick or enter the Claude Code session.');
    this.busy = true;
    this.saveBtn.disabled = true;
    this.result.textContent = 'Saving and connecting…';
    try {
      const res = await this.actions.assistantCall('PUT', '/api/assistant', b);
      if (res.status !== 200) return this.problem(res, 'Not saved');
      this.dirty.clear();
      this.token.value = '';
      this.result.textContent = 'Saved. The status above follows the connection.';
    } catch (e) {
      this.result.textContent = `Not saved: ${e instanceof Error ? e.message : String(e)}`;
    } finally {
      this.busy = false;
      this.saveBtn.disabled = false;
    }
  }

  private missing(f: Field, t: string): void {
    this.setError(f, t);
    this.field(f).focus();
  }
}
