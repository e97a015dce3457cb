// Settings → Assistant: the kind/provider picker built from `GET /api/providers` (install command,
// set-up steps, tested versions; kinds not available yet shown as coming), the version warning,
// the status of the kind in use, and the picked kind's form from the UI's kind registry
// (kinds/index.ts: `incoming`'s link form, BYO pairing, the OpenClaw Gateway, clawborrator, or a
// form built from the kind's settings fields); a kind with no form gets "Use this kind".
//
// Everything shown about the assistant comes from the store (`store.assistant`, fed by the
// answers of `/api/assistant` and the app's polling); the forms' inputs are the user's draft.

import { describeError } from './errors';
import { clockTime, copyText, fullTime, h } from './dom';
import type { ApiResponse } from './transport';
import type { Assistant, Provider, Providers } from './types';
import { buildForm, kindNextStep, moduleKinds, setServedKinds, type AssistantActions, type KindForm } from './kinds';
import { IncomingForm } from './kinds/incoming';
import { outcome, statusLabel } from './kinds/words';

export type { AssistantActions } from './kinds';
export { errorField, nextStep } from './kinds/incoming';
export { statusLabel } from './kinds/words';

/**
 * Why entries wait while the link is down (its detail, else its status in words), or null when
 * it is online, being checked, or not configured (that has its own words: "queued").
 */
export function waitingReason(a: Assistant | null): string | null {
  if (!a || a.status === 'online' || a.status === 'checking' || a.status === 'not_configured') return null;
  return a.detail?.trim() || `the assistant is ${statusLabel(a.status).toLowerCase()}`;
}

/** CSS class of a status chip. */
export function statusClass(status: string | null | undefined): string {
  switch (status) {
    case 'online':
      return 'chip-ok';
    case 'checking':
      return 'chip-checking';
    case 'unreachable':
      return 'chip-warn';
    case 'auth_failed':
    case 'misconfigured':
      return 'chip-bad';
    default:
      return 'chip-muted';
  }
}

/** `tested with hermes-platform-stagewhisper 0.43.0, hermes-agent 0.19.0` (empty: none listed). */
export function testedText(p: Provider): string {
  if (!p.tested_with.length) return '';
  return `Tested with ${p.tested_with.map((t) => `${t.package} ${t.version}`).join(', ')}`;
}

/** The kind the picker shows: the user's choice while it is a listed kind, else the active one. */
export function pickedKind(providers: Providers | null, chosen: string | null, active: string | null): string {
  const ids = providers?.kinds.map((k) => k.id) ?? [];
  if (chosen && ids.includes(chosen)) return chosen;
  return active ?? providers?.active_kind ?? 'incoming';
}

/**
 * One provider's card: its name and what it is tested with always in view; the install command
 * (with a Copy button) and the steps folded until asked for (open while nothing is connected);
 * a known-bad version said for this kind and this peer only.
 */
export function providerCard(p: Provider, kindName = '', open = false): HTMLElement {
  const copyBtn = h('button', { class: 'btn btn-small', type: 'button', 'aria-label': `Copy the install command of ${p.name}` }, 'Copy');
  copyBtn.addEventListener('click', async () => {
    const ok = await copyText(p.install);
    copyBtn.textContent = ok ? 'Copied' : 'Copy failed';
    setTimeout(() => (copyBtn.textContent = 'Copy'), 1500);
  });
  const tested = testedText(p);
  const how = h(
    'details',
    { class: 'provider-how', open: open ? '' : undefined },
    h('summary', null, `How to set up ${p.name}`),
    p.install ? h('div', { class: 'inline-field provider-install' }, h('code', { class: 'setting-value' }, p.install), copyBtn) : '',
    p.setup.length ? h('ol', { class: 'provider-steps' }, ...p.setup.map((step) => h('li', null, step))) : '',
  );
  const scope = kindName ? ` with ${kindName}` : '';
  return h(
    'div',
    { class: 'provider', 'data-provider': p.id, 'data-available': String(p.available) },
    h('div', { class: 'provider-name' }, p.name, p.available ? '' : h('span', { class: 'chip chip-muted provider-coming' }, 'coming')),
    tested ? h('p', { class: 'setting-note provider-tested' }, `${tested}${scope}.`) : '',
    ...p.known_bad.map((b) =>
      h('p', { class: 'provider-bad field-error' }, `Known bad${scope}: ${b.package} ${b.versions}x (this kind and this peer only) — ${b.warning}`),
    ),
    p.install || p.setup.length ? how : '',
  );
}

/** A status detail as said inside Settings → Assistant ("… in Settings → Assistant" is here: below). */
export function detailHere(detail: string): string {
  return detail.replace(/\s+in Settings → Assistant( link)?/g, ' below');
}

export class AssistantSettings {
  readonly card: HTMLElement;
  private a: Assistant | null = null;
  private statusChip = h('span', { class: 'chip chip-muted', id: 'assistant-settings-status' }, 'Not configured');
  private detail = h('p', { class: 'assistant-detail', id: 'assistant-detail' });
  /** The one next step (the status card's last line). */
  private next = h('p', { class: 'assistant-next', id: 'assistant-next', hidden: true });
  private checked = h('p', { class: 'setting-note assistant-checked' });
  private result = h('div', { class: 'setting-status assistant-result', id: 'assistant-result', role: 'status', 'aria-live': 'polite' });
  private providers: Providers | null = null;
  /** The kind the user picked in the picker (`null`: follow the active kind). */
  private chosenKind: string | null = null;
  private picker = h('div', { class: 'mode-options assistant-kinds', role: 'radiogroup', 'aria-label': 'Assistant kind', id: 'assistant-kinds' });
  private providerList = h('div', { class: 'assistant-providers', id: 'assistant-providers', role: 'group', 'aria-label': 'Assistants of this kind' });
  private warningEl = h('p', { class: 'field-error assistant-warning', id: 'assistant-warning', role: 'alert', hidden: true });
  private useKindBtn = h('button', { class: 'btn btn-primary', type: 'button', id: 'assistant-use-kind', hidden: true }, 'Use this kind');
  /** Each kind's form (kinds/index.ts), by kind id; only the shown kind's is visible. */
  private forms = new Map<string, { form: KindForm; savesItself: boolean }>();
  /** Where the kinds' forms go (above the result line) and what they report (below it). */
  private formSlot = h('div', { class: 'assistant-kind-forms' });
  private infoSlot = h('div', { class: 'assistant-kind-info' });
  private busy = false;

  constructor(private actions: AssistantActions) {
    this.useKindBtn.addEventListener('click', () => void this.useKind());
    // The kinds with a form module are built at once (the list of kinds may come later).
    for (const id of moduleKinds()) this.addForm(id);
    this.card = h(
      'fieldset',
      { class: 'card', id: 'settings-assistant', tabindex: '-1' },
      h('legend', null, 'Assistant link'),
      h('div', { class: 'assistant-status', 'aria-live': 'polite' }, this.statusChip, this.detail),
      this.next,
      this.checked,
      this.warningEl,
      this.picker,
      this.providerList,
      this.useKindBtn,
      this.formSlot,
      this.result,
      this.infoSlot,
    );
    this.render(null);
  }

  private addForm(kind: string | Providers['kinds'][number]): void {
    const id = typeof kind === 'string' ? kind : kind.id;
    if (this.forms.has(id)) return;
    const built = buildForm(kind, this.actions, this.result);
    if (!built) return;
    this.forms.set(id, built);
    this.formSlot.append(built.form.el);
    if (built.form.report) this.infoSlot.append(built.form.report);
    built.form.render(this.a);
  }

  /** The `incoming` kind's form (its `PUT /api/assistant` body is what tests look at). */
  body(): Record<string, unknown> {
    const f = this.forms.get('incoming')?.form;
    return f instanceof IncomingForm ? f.body() : {};
  }

  /** The registry from `GET /api/providers`: builds the kind picker (and the kinds' forms). */
  setProviders(p: Providers | null): void {
    this.providers = p;
    setServedKinds(p?.kinds ?? []);
    this.picker.replaceChildren();
    for (const k of p?.kinds ?? []) {
      this.addForm(k);
      const input = h('input', { type: 'radio', name: 'assistant-kind', value: k.id, id: `assistant-kind-${k.id}`, disabled: !k.available });
      input.addEventListener('change', () => {
        this.chosenKind = k.id;
        this.paintKind();
      });
      this.picker.append(
        h(
          'label',
          { class: 'mode-option', for: `assistant-kind-${k.id}`, 'data-kind': k.id, 'data-available': String(k.available) },
          input,
          h('span', { class: 'mode-name' }, k.name),
          k.available ? '' : h('span', { class: 'chip chip-muted' }, 'coming'),
          h('span', { class: 'mode-hint' }, k.description),
        ),
      );
    }
    this.paintKind();
  }

  /** Loads the registry (`GET /api/providers`); the picker stays empty when it cannot. */
  async loadProviders(api: <T>(method: string, path: string) => Promise<ApiResponse<T>>): Promise<void> {
    try {
      const res = await api<Providers>('GET', '/api/providers');
      if (res.status === 200 && res.body && Array.isArray(res.body.kinds)) this.setProviders(res.body);
    } catch {
      // An older core without the registry: the incoming form alone, as before.
    }
  }

  /** The kind shown in the picker. */
  shownKind(): string {
    return pickedKind(this.providers, this.chosenKind, this.a?.kind ?? null);
  }

  /**
   * The status card's words: about the active kind; while another kind is being looked at, it
   * says which kind the status is about, and the next step is for the active one only.
   */
  private paintStatusText(): void {
    const a = this.a;
    if (!a) {
      this.detail.textContent = 'Loading…';
      this.next.hidden = true;
      return;
    }
    const shown = this.shownKind();
    const activeName = this.providers?.kinds.find((k) => k.id === a.kind)?.name ?? a.kind;
    const here = detailHere(a.detail || '');
    this.detail.textContent = shown === a.kind ? here : `${activeName} (the kind in use): ${here}`;
    const step = shown === a.kind ? kindNextStep(a) : null;
    this.next.hidden = !step;
    this.next.textContent = step ?? '';
  }

  private paintKind(): void {
    this.paintStatusText();
    const kind = this.shownKind();
    for (const input of this.picker.querySelectorAll<HTMLInputElement>('input[name="assistant-kind"]')) input.checked = input.value === kind;
    const list = (this.providers?.providers ?? []).filter((p) => p.kind === kind);
    const kindName = this.providers?.kinds.find((k) => k.id === kind)?.name ?? '';
    // The set-up steps are open while nothing is connected, folded once something is.
    const setUp = !this.a || this.a.status === 'not_configured';
    this.providerList.replaceChildren(...list.map((p) => providerCard(p, kindName, setUp)));
    this.providerList.hidden = list.length === 0;
    for (const [id, { form }] of this.forms) {
      form.el.hidden = id !== kind;
      if (form.report) form.report.hidden = id !== kind;
    }
    const info = this.providers?.kinds.find((k) => k.id === kind);
    const active = this.a?.kind ?? this.providers?.active_kind ?? 'incoming';
    const savesItself = this.forms.get(kind)?.savesItself ?? false;
    this.useKindBtn.hidden = savesItself || kind === active || !info?.available;
    this.useKindBtn.textContent = `Use ${info?.name ?? kind}`;
  }

  private async useKind(): Promise<void> {
    if (this.busy) return;
    const kind = this.shownKind();
    this.busy = true;
    this.useKindBtn.disabled = true;
    this.result.textContent = 'Switching the assistant…';
    try {
      const res = await this.actions.assistantCall('PUT', '/api/assistant', { kind });
      this.result.textContent = res.status === 200 ? outcome(this.a, 'Switched:') : `Not switched: ${this.actions.errorText(res)}`;
      describeError(this.result, res);
      if (res.status === 200) this.chosenKind = null;
    } catch (e) {
      this.result.textContent = `Not switched: ${e instanceof Error ? e.message : String(e)}`;
    } finally {
      this.busy = false;
      this.useKindBtn.disabled = false;
      this.paintKind();
    }
  }

  /** Shows the assistant as the store has it, in the status card and in every kind's form. */
  render(a: Assistant | null): void {
    this.a = a;
    for (const { form } of this.forms.values()) form.render(a);
    const status = a?.status ?? 'not_configured';
    this.statusChip.className = `chip ${statusClass(status)}`;
    this.statusChip.dataset.status = status;
    this.statusChip.textContent = statusLabel(status);
    this.paintStatusText();
    const bits: string[] = [];
    if (a?.checked_at) bits.push(`Checked at ${clockTime(a.checked_at)}`);
    if (a?.assistant_version) bits.push(`adapter ${a.assistant_version}`);
    this.checked.textContent = bits.join(' · ');
    this.checked.title = a?.checked_at ? fullTime(a.checked_at) : '';
    this.checked.hidden = bits.length === 0;
    this.warningEl.textContent = a?.warning ?? '';
    this.warningEl.hidden = !a?.warning;
    this.paintKind();
  }

  focus(): void {
    this.card.focus();
  }
}
