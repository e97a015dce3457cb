// The `openclaw-gateway` assistant kind in the UI:
// - Settings → Assistant: its form (WebSocket URL, gateway token — write-only —, session key),
//   its pairing card while the gateway waits for `openclaw devices approve <requestId>` (the
//   command with a Copy button; the card goes by itself once the core reports `online`, through
//   its `assistant_status` event), and what the link reports (server version, device id);
// - the chat's Stop button while a reply runs, for kinds that can stop one.
//
// Everything shown comes from the store's `Assistant` (the `GET /api/assistant` view); the inputs
// are the user's draft.

import { describeError, plainError } from '../errors';
import { copyText, h } from '../dom';
import type { ApiResponse } from '../transport';
import type { Assistant, GatewayFields, Message } from '../types';

export const GATEWAY_KIND = 'openclaw-gateway';

const s = (v: unknown): string | null => (typeof v === 'string' ? v : null);

/** Reads the gateway fields of a raw view (absent for other kinds). */
export function gatewayFields(raw: Record<string, unknown>): GatewayFields {
  const p = raw.pairing;
  const pairing =
    p && typeof p === 'object' && typeof (p as Record<string, unknown>).command === 'string'
      ? { request_id: s((p as Record<string, unknown>).request_id) ?? '', command: (p as Record<string, string>).command }
      : null;
  return {
    url: s(raw.url),
    session_key: s(raw.session_key),
    device_id: s(raw.device_id),
    server_version: s(raw.server_version),
    pairing,
  };
}

/** A reply is running in the conversation: a typing indicator or a live draft is shown. */
export function replyRunning(typingCount: number, messages: readonly Message[]): boolean {
  if (typingCount > 0) return true;
  for (let i = messages.length - 1; i >= 0 && i >= messages.length - 20; i--) if (messages[i].draft) return true;
  return false;
}

/** The Stop button under the conversation (hidden unless a reply runs and the kind can stop it). */
export class StopControl {
  readonly el: HTMLElement;
  private btn: HTMLButtonElement;
  private err: HTMLElement;
  private busy = false;

  constructor(private stop: () => Promise<void>) {
    this.btn = h('button', { class: 'btn btn-small reply-stop', type: 'button', id: 'reply-stop', 'aria-label': 'Stop the reply' }, 'Stop');
    this.err = h('span', { class: 'reply-stop-error', role: 'alert' });
    this.btn.addEventListener('click', () => void this.click());
    this.el = h('div', { class: 'reply-stop-row', hidden: true }, this.btn, this.err);
  }

  /** Shows the button when `visible`. */
  show(visible: boolean): void {
    if (!visible) this.err.textContent = '';
    if (this.el.hidden === !visible) return;
    this.el.hidden = !visible;
  }

  private async click(): Promise<void> {
    if (this.busy) return;
    this.busy = true;
    this.btn.disabled = true;
    this.btn.textContent = 'Stopping…';
    this.err.textContent = '';
    try {
      await this.stop();
    } catch (e) {
      this.err.textContent = ` ${e instanceof Error ? e.message : String(e)}`;
    } finally {
      this.busy = false;
      this.btn.disabled = false;
      this.btn.textContent = 'Stop';
    }
  }
}

export interface GatewayActions {
  assistantCall(method: string, path: string, body?: unknown): Promise<ApiResponse<unknown>>;
  errorText(res: ApiResponse<unknown>): string;
}

type GwField = 'url' | 'token' | 'session_key';

/** Which gateway field an API error is about (`null`: the form as a whole). */
export function gatewayErrorField(code: string, message: string): GwField | null {
  switch (code) {
    case 'invalid_url':
    case 'insecure_url':
      return 'url';
    case 'invalid_token':
      return 'token';
    case 'invalid_session_key':
      return 'session_key';
    case 'missing_field':
    case 'invalid_field':
      return message.includes('token') ? 'token' : message.includes('session_key') ? 'session_key' : message.includes('url') ? 'url' : null;
    default:
      return null;
  }
}

/** The `PUT /api/assistant` body of the form (a blank token keeps the saved one). */
export function gatewayBody(url: string, token: string, sessionKey: string): Record<string, unknown> {
  const b: Record<string, unknown> = { kind: GATEWAY_KIND, url: url.trim() };
  if (token.trim()) b.token = token.trim();
  if (sessionKey.trim()) b.session_key = sessionKey.trim();
  return b;
}

/** Settings → Assistant for the `openclaw-gateway` kind. */
export class GatewaySettings {
  readonly el: HTMLElement;
  private url: HTMLInputElement;
  private token: HTMLInputElement;
  private sessionKey: HTMLInputElement;
  private errors = new Map<GwField, HTMLElement>();
  private saveBtn: HTMLButtonElement;
  private result = h('div', { class: 'setting-status', id: 'gateway-result', role: 'status', 'aria-live': 'polite' });
  private pairing: HTMLElement;
  private pairingCmd = h('code', { class: 'setting-value', id: 'gateway-pairing-command' });
  private info = h('p', { class: 'setting-note', id: 'gateway-info' });
  private dirty = new Set<GwField>();
  private a: Assistant | null = null;

  constructor(private actions: GatewayActions) {
    const input = (id: string, type: string, placeholder: string, f: GwField) => {
      const el = h('input', { class: 'field-input', type, id, placeholder, autocomplete: type === 'password' ? 'new-password' : 'off', spellcheck: 'false', 'aria-describedby': `${id}-error` });
      el.addEventListener('input', () => {
        this.dirty.add(f);
        this.setError(f, null);
      });
      return el;
    };
    this.url = input('gateway-url', 'url', 'ws://127.0.0.1:18789', 'url');
    this.token = input('gateway-token', 'password', 'gateway.auth.token', 'token');
    this.sessionKey = input('gateway-session-key', 'text', 'stagewhisper', 'session_key');
    const err = (f: GwField, id: string) => {
      const el = h('div', { class: 'field-error', id: `${id}-error`, hidden: true });
      this.errors.set(f, el);
      return el;
    };
    const row = (label: string, forId: string, field: HTMLElement, hint: string, f: GwField) =>
      h(
        'div',
        { class: 'setting-row setting-row-top' },
        h('label', { class: 'setting-label', for: forId }, label),
        h('div', { class: 'setting-field setting-field-col' }, field, h('div', { class: 'setting-note' }, hint), err(f, forId)),
      );
    this.saveBtn = h('button', { class: 'btn btn-primary', type: 'submit', id: 'gateway-save' }, 'Save and connect');

    const copyBtn = h('button', { class: 'btn btn-small', type: 'button', id: 'gateway-pairing-copy', 'aria-label': 'Copy the approval command' }, 'Copy');
    copyBtn.addEventListener('click', async () => {
      const ok = await copyText(this.a ? (gatewayFields(this.a.extra).pairing?.command ?? '') : '');
      copyBtn.textContent = ok ? 'Copied' : 'Copy failed';
      setTimeout(() => (copyBtn.textContent = 'Copy'), 1500);
    });
    this.pairing = h(
      'div',
      { class: 'pairing-card', id: 'gateway-pairing', role: 'group', 'aria-label': 'Approve this device on the gateway', hidden: true },
      h('p', { class: 'pairing-title' }, 'Approve this device on the gateway'),
      h('p', { class: 'setting-note' }, 'Run this on the gateway’s computer. StageWhisper connects by itself once it is approved — no need to come back here.'),
      h('div', { class: 'inline-field' }, this.pairingCmd, copyBtn),
    );

    const form = h(
      'form',
      { class: 'assistant-form', id: 'gateway-form', novalidate: true, 'aria-label': 'OpenClaw Gateway settings' },
      row('WebSocket URL', 'gateway-url', this.url, 'ws:// only to this computer (127.0.0.1, ::1, localhost); wss:// to any host — the token must never travel in clear.', 'url'),
      row('Gateway token', 'gateway-token', this.token, 'The gateway’s token (gateway.auth.token). Write-only: it is never shown again; leave empty to keep the saved one.', 'token'),
      row('Session key', 'gateway-session-key', this.sessionKey, 'Prefix of this app’s own gateway sessions (default stagewhisper), so your other OpenClaw chats are not mixed in.', 'session_key'),
      h('div', { class: 'form-actions' }, this.saveBtn),
    );
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      void this.save();
    });
    this.el = h('div', { class: 'gateway-settings', id: 'gateway-settings', hidden: true }, this.pairing, form, this.result, this.info);
  }

  /** Shows what the store has; fills the inputs the user is not editing. */
  render(a: Assistant | null): void {
    this.a = a;
    const mine = a?.kind === GATEWAY_KIND;
    const g = mine && a ? gatewayFields(a.extra) : null;
    if (!this.dirty.has('url')) this.url.value = g?.url ?? '';
    if (!this.dirty.has('session_key')) this.sessionKey.value = g?.session_key ?? '';
    if (!this.dirty.has('token')) this.token.value = '';
    const pairing = a?.status === 'pairing_required' ? g?.pairing : null;
    this.pairing.hidden = !pairing;
    this.pairingCmd.textContent = pairing?.command ?? '';
    const bits: string[] = [];
    if (g?.server_version) bits.push(`OpenClaw ${g.server_version}`);
    if (g?.device_id) bits.push(`device ${g.device_id.slice(0, 12)}…`);
    this.info.textContent = bits.join(' · ');
    this.info.hidden = bits.length === 0;
  }

  private setError(f: GwField, text: string | null): void {
    const el = this.errors.get(f);
    if (!el) return;
    el.hidden = !text;
    el.textContent = text ?? '';
    const input = f === 'url' ? this.url : f === 'token' ? this.token : this.sessionKey;
    if (text) input.setAttribute('aria-invalid', 'true');
    else input.removeAttribute('aria-invalid');
  }

  private async save(): Promise<void> {
    for (const f of this.errors.keys()) this.setError(f, null);
    const body = gatewayBody(this.url.value, this.token.value, this.sessionKey.value);
    if (!body.url) {
      this.setError('url', 'Enter the gateway’s WebSocket URL, e.g. ws://127.0.0.1:18789.');
      this.url.focus();
      return;
    }
    this.saveBtn.disabled = true;
    this.result.textContent = 'Saving and connecting…';
    try {
      const res = await this.actions.assistantCall('PUT', '/api/assistant', body);
      if (res.status !== 200) {
        const b = res.body as { error?: unknown; message?: unknown } | null;
        const code = typeof b?.error === 'string' ? b.error : '';
        const message = typeof b?.message === 'string' ? b.message : '';
        const f = gatewayErrorField(code, message);
        if (f) {
          this.setError(f, plainError(code, message));
          this.result.textContent = 'Not saved: see the highlighted field.';
        } else {
          this.result.textContent = `Not saved: ${this.actions.errorText(res)}`;
          describeError(this.result, res);
        }
        return;
      }
      this.dirty.clear();
      this.token.value = '';
      this.result.textContent = 'Saved.';
    } catch (e) {
      this.result.textContent = `Not saved: ${e instanceof Error ? e.message : String(e)}`;
    } finally {
      this.saveBtn.disabled = false;
    }
  }
}
