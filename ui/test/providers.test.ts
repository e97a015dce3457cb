// @vitest-environment happy-dom
// Settings → Assistant's kind/provider picker, built from `GET /api/providers`: available kinds
// are selectable, the others are shown as coming; each provider shows its install command (with
// Copy), set-up steps, tested versions and known-bad versions; the incoming form shows only for
// `incoming`; the version warning of `GET /api/assistant` is shown.

import { describe, expect, it } from 'vitest';
import { AssistantSettings, pickedKind, testedText } from '../src/assistant';
import { normAssistant } from '../src/store';
import type { ApiResponse } from '../src/transport';
import type { Providers } from '../src/types';

const PROVIDERS: Providers = {
  active_kind: 'incoming',
  kinds: [
    { id: 'incoming', name: 'Direct relay', description: 'POST /v1/incoming', available: true },
    { id: 'byo', name: 'BYO relay', description: 'relay API', available: false },
    { id: 'toy', name: 'toy', description: '', available: true },
  ],
  providers: [
    {
      id: 'hermes-adapter',
      kind: 'incoming',
      name: 'Hermes Agent (StageWhisper adapter)',
      available: true,
      install: "pip install 'hermes-platform-stagewhisper>=0.43,<0.44'",
      setup: ['Install the adapter.', 'Enter the base URL here.'],
      tested_with: [
        { package: 'hermes-platform-stagewhisper', version: '0.43.0', series: '0.43.' },
        { package: 'hermes-agent', version: '0.19.0', series: '0.19.' },
      ],
      known_bad: [],
    },
    {
      id: 'openclaw-channel-http',
      kind: 'incoming',
      name: 'OpenClaw (http)',
      available: true,
      install: 'openclaw plugins install @stagewhisper/stagewhisper@0.64.0',
      setup: ['Install the plugin.'],
      tested_with: [{ package: 'openclaw', version: '2026.3.23', series: '2026.3.23' }],
      known_bad: [{ package: 'openclaw', versions: '2026.9.', warning: 'every task ends in an error' }],
    },
    {
      id: 'hermes-byo-plugin',
      kind: 'byo',
      name: 'Hermes BYO',
      available: false,
      install: 'pip install hermes-plugin-stagewhisper',
      setup: ['Pair.'],
      tested_with: [],
      known_bad: [],
    },
  ],
};

function make() {
  const calls: { method: string; path: string; body?: unknown }[] = [];
  const s = new AssistantSettings({
    assistantCall: async (method, path, body) => {
      calls.push({ method, path, body });
      return { status: 200, body: {} } as ApiResponse<unknown>;
    },
    errorText: () => 'error',
  });
  document.body.replaceChildren(s.card);
  return { s, calls };
}

const q = <T extends Element = HTMLElement>(sel: string) => document.querySelector(sel) as T | null;

describe('the assistant kind picker', () => {
  it('lists the kinds, the unavailable ones as coming and not selectable', () => {
    const { s } = make();
    s.setProviders(PROVIDERS);
    s.render(normAssistant({ kind: 'incoming', status: 'not_configured' }));
    const incoming = q<HTMLInputElement>('#assistant-kind-incoming')!;
    const byo = q<HTMLInputElement>('#assistant-kind-byo')!;
    expect(incoming.checked).toBe(true);
    expect(incoming.disabled).toBe(false);
    expect(byo.disabled).toBe(true);
    expect(q('[data-kind="byo"]')!.textContent).toContain('coming');
    // The incoming providers, with install command, steps and tested versions.
    const cards = [...document.querySelectorAll<HTMLElement>('#assistant-providers .provider')].map((c) => c.dataset.provider);
    expect(cards).toEqual(['hermes-adapter', 'openclaw-channel-http']);
    const hermes = q('[data-provider="hermes-adapter"]')!;
    expect(hermes.querySelector('code')!.textContent).toContain('hermes-platform-stagewhisper');
    expect(hermes.querySelector('button')!.textContent).toBe('Copy');
    expect(hermes.querySelectorAll('ol li').length).toBe(2);
    expect(hermes.textContent).toContain('Tested with hermes-platform-stagewhisper 0.43.0, hermes-agent 0.19.0');
    expect(q('[data-provider="openclaw-channel-http"] .provider-bad')!.textContent).toContain('openclaw 2026.9.x');
    expect(q<HTMLFormElement>('#assistant-form')!.hidden).toBe(false);
    expect(q('#assistant-use-kind')!.hidden).toBe(true);
  });

  it('shows another kind’s providers without the link form, and switches with PUT {kind}', async () => {
    const { s, calls } = make();
    s.setProviders(PROVIDERS);
    s.render(normAssistant({ kind: 'incoming', status: 'online' }));
    expect(q('[data-provider="hermes-byo-plugin"]')).toBeNull();
    const toy = q<HTMLInputElement>('#assistant-kind-toy')!;
    toy.checked = true;
    toy.dispatchEvent(new Event('change'));
    expect(s.shownKind()).toBe('toy');
    expect(q<HTMLFormElement>('#assistant-form')!.hidden).toBe(true);
    const use = q<HTMLButtonElement>('#assistant-use-kind')!;
    expect(use.hidden).toBe(false);
    expect(use.textContent).toBe('Use toy');
    use.click();
    await new Promise((r) => setTimeout(r, 0));
    expect(calls).toEqual([{ method: 'PUT', path: '/api/assistant', body: { kind: 'toy' } }]);
  });

  it('saving the link form while another kind is active switches back to incoming', () => {
    const { s } = make();
    s.setProviders(PROVIDERS);
    s.render(normAssistant({ kind: 'toy', status: 'online' }));
    expect(q<HTMLInputElement>('#assistant-kind-toy')!.checked).toBe(true);
    expect(s.body().kind).toBe('incoming');
    s.render(normAssistant({ kind: 'incoming', status: 'online' }));
    expect('kind' in s.body()).toBe(false);
  });

  it('shows the version warning of GET /api/assistant', () => {
    const { s } = make();
    s.render(normAssistant({ kind: 'incoming', status: 'online', warning: 'adapter 0.44.1 is not tested' }));
    const w = q('#assistant-warning')!;
    expect(w.hidden).toBe(false);
    expect(w.textContent).toBe('adapter 0.44.1 is not tested');
    s.render(normAssistant({ kind: 'incoming', status: 'online', warning: null }));
    expect(w.hidden).toBe(true);
  });

  it('helpers', () => {
    expect(pickedKind(PROVIDERS, 'nope', null)).toBe('incoming');
    expect(pickedKind(PROVIDERS, 'byo', 'incoming')).toBe('byo');
    expect(pickedKind(null, null, 'toy')).toBe('toy');
    expect(testedText({ ...PROVIDERS.providers[2] })).toBe('');
    expect(normAssistant({ status: 'online' })!.kind).toBe('incoming');
  });
});
