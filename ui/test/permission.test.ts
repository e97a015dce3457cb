// @vitest-environment happy-dom
// Permission cards (message kind `permission`) and the `clawborrator` kind's settings form: the
// wire shape is read tolerantly, the card shows the tool and preview as text (never markup), its
// Allow / Deny buttons send the decision, a settled card says who decided; the form sends the
// kind's body, keeps the saved token, lists the hub's sessions into the picker, and maps the
// API's error codes to its fields; the Insights tab's notice without an insights session.

import { describe, expect, it } from 'vitest';
import { ClawborratorForm, clawErrorField, insightsNotice } from '../src/kinds/clawborrator';
import { permissionCard, settledText } from '../src/permission';
import { normAssistant, normMessage } from '../src/store';
import type { ApiResponse } from '../src/transport';

const raw = (over: Record<string, unknown> = {}) => ({
  id: 7,
  session_id: 's1',
  kind: 'permission',
  text: 'rm -rf build/',
  received_at: '2026-12-01T10:00:00Z',
  sort_key: 1,
  draft: false,
  request_id: 'req-1',
  tool: 'Bash',
  input_preview: 'rm -rf build/',
  state: 'pending',
  resolver: null,
  ...over,
});

describe('permission cards', () => {
  it('reads the card fields, and a card without them as a notice', () => {
    const m = normMessage(raw())!;
    expect(m.kind).toBe('permission');
    expect(m.permission).toEqual({ request_id: 'req-1', tool: 'Bash', input_preview: 'rm -rf build/', state: 'pending', resolver: null });
    expect(normMessage(raw({ state: 'bogus' }))!.kind).toBe('notice');
    expect(normMessage({ ...raw(), kind: 'assistant' })!.permission).toBeNull();
  });

  it('shows the tool and the preview as text, and sends Allow / Deny', async () => {
    const evil = '<img src=x onerror="window.pwned=1">';
    const m = normMessage(raw({ tool: `Bash${evil}`, input_preview: evil }))!;
    const seen: [string, boolean][] = [];
    const card = permissionCard(m, async (id, allow) => {
      seen.push([id, allow]);
    });
    expect(card.querySelector('img')).toBeNull();
    expect(card.querySelector('.perm-preview')!.textContent).toBe(evil);
    expect(card.dataset.state).toBe('pending');
    const allow = card.querySelector<HTMLButtonElement>('.perm-allow')!;
    const deny = card.querySelector<HTMLButtonElement>('.perm-deny')!;
    expect(allow.type).toBe('button');
    allow.click();
    await Promise.resolve();
    // Sent: both buttons wait for the settled card (the row is rendered again).
    expect(allow.disabled && deny.disabled).toBe(true);
    const other = permissionCard(normMessage(raw({ request_id: 'req-2' }))!, async (id, yes) => {
      seen.push([id, yes]);
    });
    other.querySelector<HTMLButtonElement>('.perm-deny')!.click();
    await Promise.resolve();
    expect(seen).toEqual([
      ['req-1', true],
      ['req-2', false],
    ]);
  });

  it('shows a failed decision and lets it be tried again', async () => {
    const card = permissionCard(normMessage(raw())!, async () => {
      throw new Error('Not sent: already_resolved');
    });
    const allow = card.querySelector<HTMLButtonElement>('.perm-allow')!;
    allow.click();
    await new Promise((r) => setTimeout(r, 0));
    const err = card.querySelector<HTMLElement>('.perm-error')!;
    expect(err.hidden).toBe(false);
    expect(err.textContent).toContain('already_resolved');
    expect(allow.disabled).toBe(false);
  });

  it('a settled card has no buttons and says who decided', () => {
    const card = permissionCard(normMessage(raw({ state: 'deny', resolver: 'bob' }))!, async () => {});
    expect(card.querySelector('button')).toBeNull();
    expect(card.querySelector('.perm-settled')!.textContent).toBe('Denied by bob');
    expect(settledText({ request_id: 'r', tool: 't', input_preview: '', state: 'allow', resolver: 'you' })).toBe('Allowed by you');
    expect(settledText({ request_id: 'r', tool: 't', input_preview: '', state: 'expired', resolver: null })).toMatch(/^Expired/);
  });
});

function ok(body: unknown): ApiResponse<unknown> {
  return { status: 200, body } as ApiResponse<unknown>;
}

describe('the clawborrator settings form', () => {
  const view = (over: Record<string, unknown> = {}) =>
    normAssistant({ kind: 'clawborrator', status: 'online', detail: 'online', configured: true, hub_url: 'https://hub.example', session_id: 'sess-1', insights_session_id: null, token_saved: true, insights: 'not_configured', ...over })!;

  it('fills the saved values, keeps the saved token, and sends the kind body', async () => {
    const calls: [string, string, unknown][] = [];
    const form = new ClawborratorForm({
      assistantCall: async (m, p, b) => (calls.push([m, p, b]), ok(view())),
      errorText: () => 'x',
    });
    form.render(view());
    expect((form.el.querySelector('#claw-hub-url') as HTMLInputElement).value).toBe('https://hub.example');
    expect((form.el.querySelector('#claw-token') as HTMLInputElement).value).toBe('');
    expect(form.el.querySelector('#claw-token-state')!.textContent).toBe('set');
    expect(form.body()).toEqual({ kind: 'clawborrator', hub_url: 'https://hub.example', session_id: 'sess-1', insights_session_id: null });
    form.el.dispatchEvent(new Event('submit', { cancelable: true }));
    await new Promise((r) => setTimeout(r, 0));
    expect(calls).toEqual([['PUT', '/api/assistant', form.body()]]);
  });

  it('lists the hub sessions into the picker and maps error codes to fields', async () => {
    const form = new ClawborratorForm({
      assistantCall: async () => ok(view()),
      errorText: () => 'x',
      api: async <T,>() => ok({ sessions: [{ id: 'sess-9', routing_name: '@me', cwd: '~/p', online: true }] }) as ApiResponse<T>,
    });
    form.render(view());
    (form.el.querySelector('#claw-list-sessions') as HTMLButtonElement).click();
    await new Promise((r) => setTimeout(r, 0));
    const picker = form.el.querySelector('#claw-session-picker') as HTMLSelectElement;
    expect(picker.hidden).toBe(false);
    expect([...picker.options].map((o) => o.value)).toEqual(['', 'sess-9']);
    picker.value = 'sess-9';
    picker.dispatchEvent(new Event('change'));
    expect(form.body().session_id).toBe('sess-9');
    expect(clawErrorField('insecure_url', '')).toBe('hub_url');
    expect(clawErrorField('missing_field', '`session_token` is required')).toBe('session_token');
    expect(clawErrorField('invalid_insights_session', '')).toBe('insights_session_id');
  });

  it('the Insights tab says when the kind has no insights session', () => {
    expect(insightsNotice(view())).toMatch(/no insights session configured/);
    expect(insightsNotice(view({ insights: 'online', insights_session_id: 'i' }))).toBeNull();
    expect(insightsNotice(normAssistant({ kind: 'incoming', status: 'online' }))).toBeNull();
  });
});
