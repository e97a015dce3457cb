// The form of a kind that has no form module of its own (kinds/index.ts): built from the
// settings fields the core's list of kinds gives (`GET /api/assistant/kinds`, the same list in
// `GET /api/providers`). Saving sends `PUT /api/assistant {kind, …fields}`; a blank secret keeps
// the saved one; a refused field is marked when the error names it.

import { describeError, plainError } from '../errors';
import { h } from '../dom';
import type { Assistant, AssistantKindInfo, KindSettingField } from '../types';
import type { AssistantActions, KindForm } from './form';
import { outcome } from './words';

type Input = HTMLInputElement | HTMLTextAreaElement | HTMLSelectElement;

function inputFor(kind: string, f: KindSettingField): Input {
  const id = `kind-${kind}-${f.name}`;
  const common = { class: 'field-input', id, name: f.name, 'aria-describedby': `${id}-hint ${id}-error` };
  switch (f.input) {
    case 'multiline':
      return h('textarea', { ...common, rows: 4 });
    case 'choice':
      return h('select', common, ...f.choices.map((c) => h('option', { value: c }, c)));
    case 'secret':
      return h('input', { ...common, type: 'password', autocomplete: 'new-password', spellcheck: 'false' });
    default:
      return h('input', { ...common, type: f.input === 'url' ? 'url' : 'text', autocomplete: 'off', spellcheck: 'false' });
  }
}

/** A kind's settings form from its fields. */
export class GenericKindForm implements KindForm {
  readonly el: HTMLFormElement;
  private a: Assistant | null = null;
  private inputs = new Map<string, Input>();
  private errors = new Map<string, HTMLElement>();
  private dirty = new Set<string>();
  private busy = false;

  constructor(
    private kind: AssistantKindInfo,
    private actions: AssistantActions,
    private result: HTMLElement,
  ) {
    const rows = (kind.settings ?? []).map((f) => {
      const input = inputFor(kind.id, f);
      input.addEventListener('input', () => this.dirty.add(f.name));
      this.inputs.set(f.name, input);
      const err = h('div', { class: 'field-error', id: `${input.id}-error`, hidden: true });
      this.errors.set(f.name, err);
      return h(
        'div',
        { class: 'setting-row setting-row-top', 'data-field': f.name },
        h('label', { class: 'setting-label', for: input.id }, f.label),
        h('div', { class: 'setting-field setting-field-col' }, input, h('div', { class: 'setting-note', id: `${input.id}-hint` }, f.hint), err),
      );
    });
    const save = h('button', { class: 'btn btn-primary', type: 'submit', id: `kind-${kind.id}-save` }, 'Save');
    this.el = h(
      'form',
      { class: 'assistant-form kind-form', id: `kind-${kind.id}-form`, novalidate: true, 'data-kind': kind.id, 'aria-label': `${kind.name} settings`, hidden: true },
      ...rows,
      h('div', { class: 'form-actions' }, save),
    );
    this.el.addEventListener('submit', (e) => {
      e.preventDefault();
      void this.save();
    });
  }

  /** Fills the untouched inputs from the view while it is this kind's (secrets stay empty). */
  render(a: Assistant | null): void {
    this.a = a;
    if (a?.kind !== this.kind.id) return;
    for (const f of this.kind.settings ?? []) {
      const input = this.inputs.get(f.name);
      if (!input || this.dirty.has(f.name) || f.input === 'secret') continue;
      const v = a.extra[f.name];
      input.value = typeof v === 'string' ? v : '';
    }
  }

  /** The `PUT /api/assistant` body: the kind and every filled field. */
  body(): Record<string, unknown> {
    const b: Record<string, unknown> = { kind: this.kind.id };
    for (const [name, input] of this.inputs) {
      const v = input.value.trim();
      if (v) b[name] = v;
    }
    return b;
  }

  private setError(name: string, text: string | null): void {
    const el = this.errors.get(name);
    if (!el) return;
    el.hidden = !text;
    el.textContent = text ?? '';
    const input = this.inputs.get(name);
    if (text) input?.setAttribute('aria-invalid', 'true');
    else input?.removeAttribute('aria-invalid');
  }

  private async save(): Promise<void> {
    if (this.busy) return;
    for (const name of this.errors.keys()) this.setError(name, null);
    const body = this.body();
    const configured = this.a?.kind === this.kind.id && this.a.status !== 'not_configured';
    const missing = (this.kind.settings ?? []).find((f) => f.required && !body[f.name] && !(configured && f.input === 'secret'));
    if (missing) {
      this.setError(missing.name, `Enter the ${missing.label.toLowerCase()}.`);
      this.inputs.get(missing.name)?.focus();
      return;
    }
    this.busy = true;
    this.result.textContent = `Saving and checking ${this.kind.name}…`;
    try {
      const res = await this.actions.assistantCall('PUT', '/api/assistant', body);
      if (res.status === 200) {
        this.dirty.clear();
        this.result.textContent = outcome(this.a, 'Saved.');
        return;
      }
      const b = res.body as { error?: unknown; message?: unknown } | null;
      const code = typeof b?.error === 'string' ? b.error : '';
      const message = typeof b?.message === 'string' ? b.message : '';
      const field = [...this.inputs.keys()].find((n) => message.includes(n));
      if (field) this.setError(field, plainError(code, message));
      this.result.textContent = `Not saved: ${this.actions.errorText(res)}`;
      describeError(this.result, res);
    } catch (e) {
      this.result.textContent = `Not saved: ${e instanceof Error ? e.message : String(e)}`;
    } finally {
      this.busy = false;
    }
  }
}
