// @vitest-environment happy-dom
// The UI's kind registry (src/kinds/index.ts): Settings → Assistant shows the picked kind's form
// from the registry, not from checks written out per kind. A kind the core lists with settings
// fields but no form module of its own (the test kind `toy`, as the core's own tests register
// it) gets a form built from those fields, which saves with `PUT /api/assistant {kind, …}`; the
// list's `can_stop` decides the chat's Stop button.

import { describe, expect, it } from 'vitest';
import { AssistantSettings } from '../src/assistant';
import { buildForm, canStop, kindModule, setServedKinds } from '../src/kinds';
import { normAssistant } from '../src/store';
import type { ApiResponse } from '../src/transport';
import type { Providers } from '../src/types';

const PROVIDERS: Providers = {
  active_kind: 'incoming',
  kinds: [
    { id: 'incoming', name: 'Direct relay', description: '', available: true, settings: [], can_stop: false },
    { id: 'openclaw-gateway', name: 'OpenClaw Gateway', description: '', available: true, settings: [], can_stop: true },
    {
      id: 'toy',
      name: 'Toy assistant',
      description: 'A toy kind, registered by a test.',
      available: true,
      can_stop: false,
      settings: [
        { name: 'name', label: 'Toy name', input: 'text', required: true, hint: 'What the toy is called.', choices: [] },
        { name: 'key', label: 'Toy key', input: 'secret', required: false, hint: '', choices: [] },
        { name: 'mood', label: 'Mood', input: 'choice', required: false, hint: '', choices: ['calm', 'loud'] },
      ],
    },
    { id: 'bare', name: 'Bare', description: '', available: true, settings: [], can_stop: false },
  ],
  providers: [],
};

function make(status = 200, answer: unknown = {}) {
  const calls: { method: string; path: string; body?: unknown }[] = [];
  const s = new AssistantSettings({
    assistantCall: async (method, path, body) => {
      calls.push({ method, path, body });
      return { status, body: answer } as ApiResponse<unknown>;
    },
    errorText: (r) => String((r.body as { message?: string })?.message ?? 'error'),
  });
  document.body.replaceChildren(s.card);
  s.setProviders(PROVIDERS);
  s.render(normAssistant({ kind: 'incoming', status: 'online' }));
  return { s, calls };
}

const q = <T extends Element = HTMLElement>(sel: string) => document.querySelector(sel) as T | null;
const pick = (id: string) => {
  const input = q<HTMLInputElement>(`#assistant-kind-${id}`)!;
  input.checked = true;
  input.dispatchEvent(new Event('change'));
};
const tick = () => new Promise((r) => setTimeout(r, 0));

describe('the UI kind registry', () => {
  it('has a form module for each built-in kind and none for a test kind', () => {
    for (const id of ['incoming', 'byo', 'openclaw-gateway', 'clawborrator']) expect(kindModule(id), id).not.toBeNull();
    expect(kindModule('toy')).toBeNull();
    const result = document.createElement('div');
    expect(buildForm('toy', { assistantCall: async () => ({}) as ApiResponse<unknown>, errorText: () => '' }, result)).toBeNull();
  });

  it('renders a test kind’s form from its settings fields, and only the picked kind’s form shows', () => {
    make();
    expect(q<HTMLFormElement>('#assistant-form')!.hidden).toBe(false);
    expect(q<HTMLFormElement>('#kind-toy-form')!.hidden).toBe(true);
    pick('toy');
    expect(q<HTMLFormElement>('#assistant-form')!.hidden).toBe(true);
    expect(q<HTMLElement>('#gateway-settings')!.hidden).toBe(true);
    const form = q<HTMLFormElement>('#kind-toy-form')!;
    expect(form.hidden).toBe(false);
    expect([...form.querySelectorAll('label')].map((l) => l.textContent)).toEqual(['Toy name', 'Toy key', 'Mood']);
    expect(q<HTMLInputElement>('#kind-toy-key')!.type).toBe('password');
    expect([...q<HTMLSelectElement>('#kind-toy-mood')!.options].map((o) => o.value)).toEqual(['calm', 'loud']);
    expect(form.textContent).toContain('What the toy is called.');
    // It saves itself: no "Use this kind" button. A kind with no fields and no module has one.
    expect(q('#assistant-use-kind')!.hidden).toBe(true);
    pick('bare');
    expect(q('#assistant-use-kind')!.hidden).toBe(false);
    expect(q('#assistant-use-kind')!.textContent).toBe('Use Bare');
  });

  it('saves a test kind with PUT {kind, …fields}; a missing required field is said first', async () => {
    const { calls } = make();
    pick('toy');
    q<HTMLButtonElement>('#kind-toy-save')!.click();
    await tick();
    expect(calls).toEqual([]);
    expect(q('#kind-toy-name-error')!.hidden).toBe(false);
    expect(q('#kind-toy-name-error')!.textContent).toBe('Enter the toy name.');
    q<HTMLInputElement>('#kind-toy-name')!.value = ' Tiny ';
    q<HTMLSelectElement>('#kind-toy-mood')!.value = 'loud';
    q<HTMLButtonElement>('#kind-toy-save')!.click();
    await tick();
    expect(calls).toEqual([{ method: 'PUT', path: '/api/assistant', body: { kind: 'toy', name: 'Tiny', mood: 'loud' } }]);
    expect(q('#kind-toy-name-error')!.hidden).toBe(true);
  });

  it('marks the field a refusal names', async () => {
    make(400, { error: 'toy_nameless', message: '`name` is refused' });
    pick('toy');
    q<HTMLInputElement>('#kind-toy-name')!.value = 'x';
    q<HTMLButtonElement>('#kind-toy-save')!.click();
    await tick();
    expect(q('#kind-toy-name-error')!.hidden).toBe(false);
    expect(q<HTMLInputElement>('#kind-toy-name')!.getAttribute('aria-invalid')).toBe('true');
    expect(q('#assistant-result')!.textContent).toContain('Not saved');
  });

  it('fills a test kind’s fields from the view while it is the kind in use (never a secret)', () => {
    const { s } = make();
    s.render(normAssistant({ kind: 'toy', status: 'online', name: 'Saved toy', key: 'should-not-show' }));
    expect(q<HTMLInputElement>('#kind-toy-name')!.value).toBe('Saved toy');
    expect(q<HTMLInputElement>('#kind-toy-key')!.value).toBe('');
  });

  it('takes whether a reply can be stopped from the list of kinds', () => {
    setServedKinds([]);
    expect(canStop('openclaw-gateway')).toBe(true);
    expect(canStop('toy')).toBe(false);
    setServedKinds([{ ...PROVIDERS.kinds[2], can_stop: true }]);
    expect(canStop('toy')).toBe(true);
    expect(canStop(null)).toBe(false);
  });
});
