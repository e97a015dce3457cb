// @vitest-environment happy-dom
// The openclaw-gateway kind in the UI: its settings form (PUT body, field errors), the pairing
// card (shown with the approval command while the core says `pairing_required`, gone by itself on
// `online`), the view fields kept by the store, and the chat's Stop button.

import { describe, expect, it } from 'vitest';
import { AssistantSettings } from '../src/assistant';
import { canStop } from '../src/kinds';
import { gatewayBody, gatewayErrorField, gatewayFields, replyRunning, StopControl } from '../src/kinds/gateway';
import { normAssistant } from '../src/store';
import type { ApiResponse } from '../src/transport';
import type { Message, Providers } from '../src/types';

const PROVIDERS: Providers = {
  active_kind: 'incoming',
  kinds: [
    { id: 'incoming', name: 'Direct relay', description: 'POST /v1/incoming', available: true },
    { id: 'openclaw-gateway', name: 'OpenClaw Gateway', description: 'WebSocket', available: true },
  ],
  providers: [],
};

const PAIRING = {
  kind: 'openclaw-gateway',
  status: 'pairing_required',
  detail: 'This device waits for approval on the gateway.',
  pairing: { request_id: 'req-7', command: 'openclaw devices approve req-7' },
  server_version: null,
  device_id: 'ab'.repeat(32),
  session_key: 'stagewhisper',
  url: 'ws://127.0.0.1:18789',
};

function make(answer: (body: unknown) => ApiResponse<unknown> = () => ({ status: 200, body: {} }) as ApiResponse<unknown>) {
  const calls: { method: string; path: string; body?: unknown }[] = [];
  const s = new AssistantSettings({
    assistantCall: async (method, path, body) => {
      calls.push({ method, path, body });
      return answer(body);
    },
    errorText: (r) => String((r.body as { message?: string } | null)?.message ?? 'error'),
  });
  document.body.replaceChildren(s.card);
  s.setProviders(PROVIDERS);
  return { s, calls };
}

const q = <T extends Element = HTMLElement>(sel: string) => document.querySelector(sel) as T | null;
const tick = () => new Promise((r) => setTimeout(r, 0));

describe('Settings → Assistant for the openclaw-gateway kind', () => {
  it('shows its form (not the incoming one) when the kind is picked, and saves with PUT', async () => {
    const { s, calls } = make();
    s.render(normAssistant({ kind: 'incoming', status: 'not_configured' }));
    expect(q('#gateway-settings')!.hidden).toBe(true);
    const pick = q<HTMLInputElement>('#assistant-kind-openclaw-gateway')!;
    pick.checked = true;
    pick.dispatchEvent(new Event('change'));
    expect(q('#gateway-settings')!.hidden).toBe(false);
    expect(q<HTMLFormElement>('#assistant-form')!.hidden).toBe(true);
    expect(q('#assistant-use-kind')!.hidden).toBe(true); // its own Save switches
    q<HTMLInputElement>('#gateway-url')!.value = 'ws://127.0.0.1:18789';
    q<HTMLInputElement>('#gateway-token')!.value = ' secret-token ';
    q<HTMLFormElement>('#gateway-form')!.dispatchEvent(new Event('submit'));
    await tick();
    expect(calls).toEqual([
      { method: 'PUT', path: '/api/assistant', body: { kind: 'openclaw-gateway', url: 'ws://127.0.0.1:18789', token: 'secret-token' } },
    ]);
    expect(q<HTMLInputElement>('#gateway-token')!.value).toBe(''); // write-only
  });

  it('puts an API error on its field', async () => {
    const { s } = make(() => ({ status: 400, body: { ok: false, error: 'insecure_url', message: 'ws:// is only allowed to a loopback host' } }) as ApiResponse<unknown>);
    s.render(normAssistant(PAIRING));
    q<HTMLInputElement>('#gateway-url')!.value = 'ws://10.0.0.2:18789';
    q<HTMLInputElement>('#gateway-url')!.dispatchEvent(new Event('input'));
    q<HTMLFormElement>('#gateway-form')!.dispatchEvent(new Event('submit'));
    await tick();
    const err = q('#gateway-url-error')!;
    expect(err.hidden).toBe(false);
    expect(err.textContent).toContain('loopback');
    expect(q('#gateway-url')!.getAttribute('aria-invalid')).toBe('true');
  });

  it('shows the pairing card with the command while pairing is required, and drops it once online', () => {
    const { s } = make();
    s.render(normAssistant(PAIRING));
    const card = q('#gateway-pairing')!;
    expect(card.hidden).toBe(false);
    expect(q('#gateway-pairing-command')!.textContent).toBe('openclaw devices approve req-7');
    expect(q('#gateway-pairing-copy')!.textContent).toBe('Copy');
    expect(q<HTMLInputElement>('#gateway-url')!.value).toBe('ws://127.0.0.1:18789');
    // The core's `assistant_status` online patches the store; the card goes without a click.
    s.render(normAssistant({ ...PAIRING, status: 'online', pairing: null, server_version: '2026.9.6' }));
    expect(card.hidden).toBe(true);
    expect(q('#gateway-info')!.textContent).toContain('OpenClaw 2026.9.6');
  });

  it('helpers', () => {
    expect(gatewayBody(' wss://gw.example.com ', '', '')).toEqual({ kind: 'openclaw-gateway', url: 'wss://gw.example.com' });
    expect(gatewayBody('ws://127.0.0.1:1', 't', 'mine')).toEqual({ kind: 'openclaw-gateway', url: 'ws://127.0.0.1:1', token: 't', session_key: 'mine' });
    expect(gatewayErrorField('invalid_url', '')).toBe('url');
    expect(gatewayErrorField('invalid_token', '')).toBe('token');
    expect(gatewayErrorField('missing_field', '`token` is required')).toBe('token');
    expect(gatewayErrorField('unknown_field', 'x')).toBeNull();
    expect(canStop('openclaw-gateway')).toBe(true);
    expect(canStop('incoming')).toBe(false);
    const a = normAssistant(PAIRING)!;
    expect(gatewayFields(a.extra).pairing).toEqual({ request_id: 'req-7', command: 'openclaw devices approve req-7' });
    expect(gatewayFields(normAssistant({ kind: 'incoming', status: 'online' })!.extra).pairing).toBeNull();
  });
});

describe('the Stop button', () => {
  const msg = (draft: boolean): Message => ({ id: 1, session_id: 's', kind: 'assistant', text: 'x', draft }) as unknown as Message;

  it('a reply runs while typing or a draft is shown', () => {
    expect(replyRunning(0, [])).toBe(false);
    expect(replyRunning(1, [])).toBe(true);
    expect(replyRunning(0, [msg(false), msg(true)])).toBe(true);
    expect(replyRunning(0, [msg(false)])).toBe(false);
  });

  it('calls stop once per click and shows a failure', async () => {
    let n = 0;
    let fail = false;
    const c = new StopControl(async () => {
      n++;
      if (fail) throw new Error('Not stopped: nothing_running');
    });
    document.body.replaceChildren(c.el);
    expect(c.el.hidden).toBe(true);
    c.show(true);
    expect(c.el.hidden).toBe(false);
    q<HTMLButtonElement>('#reply-stop')!.click();
    await tick();
    expect(n).toBe(1);
    fail = true;
    q<HTMLButtonElement>('#reply-stop')!.click();
    await tick();
    expect(n).toBe(2);
    expect(c.el.textContent).toContain('nothing_running');
    c.show(false);
    expect(c.el.hidden).toBe(true);
  });
});
