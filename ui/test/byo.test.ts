// @vitest-environment happy-dom
// The byo kind in the UI: the pairing panel (switches to the kind, creates a code, shows the
// countdown, both commands and the OpenClaw 2026.9.x config block), the pairing result once the
// core reports the paired plugin, the profile with Refresh, Test connection and Unpair.

import { describe, expect, it } from 'vitest';
import { AssistantSettings } from '../src/assistant';
import { byoView, countdown, openclawConfig, profileText, type Pairing } from '../src/kinds/byo';
import { normAssistant } from '../src/store';
import type { ApiResponse } from '../src/transport';
import type { Providers } from '../src/types';

const PROVIDERS: Providers = {
  active_kind: 'incoming',
  kinds: [
    { id: 'incoming', name: 'Direct relay', description: 'POST /v1/incoming', available: true },
    { id: 'byo', name: 'BYO relay', description: 'pairs with this app', available: true },
  ],
  providers: [],
};

const PAIRING: Pairing = {
  code: 'ABCDE-FGHJK',
  expires_at: new Date(Date.now() + 600_000).toISOString(),
  api_url: 'https://abc.ngrok.app',
  command: 'stagewhisper-hermes pair --code ABCDE-FGHJK --api-url https://abc.ngrok.app',
  commands: {
    hermes: 'stagewhisper-hermes pair --code ABCDE-FGHJK --api-url https://abc.ngrok.app',
    openclaw: 'openclaw stagewhisper pair --code ABCDE-FGHJK --api-url https://abc.ngrok.app',
  },
};

const PAIRED = {
  kind: 'byo',
  status: 'online',
  detail: 'Paired with hermes-host; end-to-end encrypted.',
  integration_id: 'int-1',
  host_label: 'hermes-host',
  provider_kind: 'hermes',
  display_model: 'stub-model',
  last_heartbeat_at: '2026-12-01T10:00:00Z',
  capabilities: { raw_description: 'stub-model with web search' },
  last_test: { state: 'ok', content: 'Hi, I can hear you.' },
  e2ee: true,
};

function make() {
  const calls: { method: string; path: string; body?: unknown }[] = [];
  const s = new AssistantSettings({
    assistantCall: async (method, path, body) => {
      calls.push({ method, path, body });
      if (path === '/api/assistant/pairing') return { status: 201, body: PAIRING } as ApiResponse<unknown>;
      if (method === 'PUT') return { status: 200, body: { kind: 'byo', status: 'waiting_for_pairing' } } as ApiResponse<unknown>;
      return { status: 202, body: {} } as ApiResponse<unknown>;
    },
    errorText: (r) => String((r.body as { message?: string } | null)?.message ?? 'error'),
  });
  document.body.replaceChildren(s.card);
  s.setProviders(PROVIDERS);
  return { s, calls };
}

const q = <T extends Element = HTMLElement>(sel: string) => document.querySelector(sel) as T | null;
const tick = () => new Promise((r) => setTimeout(r, 0));

describe('Settings → Assistant for the byo kind', () => {
  it('switches to the kind, creates a code and shows both commands and the config block', async () => {
    const { s, calls } = make();
    s.render(normAssistant({ kind: 'incoming', status: 'not_configured' }));
    expect(q('#byo-settings')!.hidden).toBe(true);
    const pick = q<HTMLInputElement>('#assistant-kind-byo')!;
    pick.checked = true;
    pick.dispatchEvent(new Event('change'));
    expect(q('#byo-settings')!.hidden).toBe(false);
    expect(q('#assistant-use-kind')!.hidden).toBe(true); // its own button switches
    q<HTMLButtonElement>('#byo-pair')!.click();
    await tick();
    await tick();
    expect(calls.map((c) => `${c.method} ${c.path}`)).toEqual(['PUT /api/assistant', 'POST /api/assistant/pairing']);
    expect(calls[0].body).toEqual({ kind: 'byo' });
    expect(q('#byo-code-card')!.hidden).toBe(false);
    expect(q('#byo-code')!.textContent).toBe('ABCDE-FGHJK');
    expect(q('#byo-countdown')!.textContent).toMatch(/valid for (10:00|9:5\d)/);
    expect(q('#byo-command-hermes')!.textContent).toBe(PAIRING.commands.hermes);
    expect(q('#byo-command-openclaw')!.textContent).toBe(PAIRING.commands.openclaw);
    expect(q('#byo-openclaw-config')!.textContent).toContain('"apiBaseUrl": "https://abc.ngrok.app"');
    expect(document.querySelectorAll('#byo-code-card button').length).toBe(3);

    // The plugin paired: the code card goes, the result and the profile show.
    s.render(normAssistant(PAIRED));
    expect(q('#byo-code-card')!.hidden).toBe(true);
    expect(q('#byo-result')!.textContent).toBe('Paired with hermes-host (hermes).');
    expect(q('#byo-paired')!.hidden).toBe(false);
    expect(q('#byo-model')!.textContent).toBe('stub-model');
    expect(q('#byo-profile')!.textContent).toBe('stub-model with web search');
    expect(q('#byo-test')!.textContent).toBe('OK — Hi, I can hear you.');
  });

  it('Refresh, Test connection and Unpair call their routes', async () => {
    const { s, calls } = make();
    s.render(normAssistant(PAIRED));
    const pick = q<HTMLInputElement>('#assistant-kind-byo')!;
    pick.checked = true;
    pick.dispatchEvent(new Event('change'));
    for (const id of ['#byo-refresh', '#byo-test-btn', '#byo-unpair']) {
      q<HTMLButtonElement>(id)!.click();
      await tick();
    }
    expect(calls.map((c) => `${c.method} ${c.path}`)).toEqual([
      'POST /api/assistant/byo/probe',
      'POST /api/assistant/byo/test',
      'DELETE /api/assistant',
    ]);
    expect(q('#byo-result')!.textContent).toContain('Unpaired');
  });

  it('reads the view and formats the countdown and the profile', () => {
    expect(byoView(normAssistant({ kind: 'incoming', status: 'online' }))).toBeNull();
    const v = byoView(normAssistant(PAIRED))!;
    expect(v.integration_id).toBe('int-1');
    expect(v.capabilities).toEqual({ raw_description: 'stub-model with web search' });
    expect(countdown('2026-12-01T10:10:00Z', Date.parse('2026-12-01T10:00:00Z'))).toBe('10:00');
    expect(countdown('2026-12-01T10:00:05Z', Date.parse('2026-12-01T10:00:00Z'))).toBe('0:05');
    expect(countdown('2026-12-01T10:00:00Z', Date.parse('2026-12-01T10:01:00Z'))).toBe('0:00');
    expect(profileText(null)).toBe('Not reported yet.');
    expect(profileText({ tools: ['x'] })).toBe('{"tools":["x"]}');
    const cfg = JSON.parse(openclawConfig(PAIRING));
    expect(cfg.plugins.entries.stagewhisper.config.transport).toBe('sse');
    expect(cfg.systemAgent).toBeUndefined();
    expect(Object.keys(cfg.agents.entries)).toEqual(['default']);
    expect(cfg.gateway.http.endpoints.responses.enabled).toBe(true);
  });
});
