// Settings → Assistant: the kind/provider picker built from `GET /api/providers` (install command,
// set-up steps, tested versions; kinds not available yet shown as coming), the version warning,
// and, for the `incoming` kind, the link: where this app sends chat messages, the call's prelude and transcript
// turns (`PUT /api/assistant`), a connection test, removal, and what the link reports (status,
// delivery mode, the `/v1/events` fallback, the last error, the callback URL the assistant gets).
//
// The form's inputs are the user's draft; everything shown about the link comes from the store
// (`store.assistant`, fed by the answers of `/api/assistant` and the app's polling).

import { describeError, plainError } from './errors';
import { clockTime, copyText, fullTime, h } from './dom';
import { ClawborratorForm } from './kinds/clawborrator';
import type { ApiResponse } from './transport';
import type { Assistant, Provider, Providers } from './types';
import { BYO_KIND, ByoSettings } from './kinds/byo';
import { GATEWAY_KIND, GatewaySettings } from './kinds/gateway';

export interface AssistantActions {
  /** A request to `/api/assistant…` whose 200 answer the app puts in the store. */
  assistantCall(method: string, path: string, body?: unknown): Promise<ApiResponse<unknown>>;
  errorText(res: ApiResponse<unknown>): string;
  /** A plain control API request (a kind's form may read lists with it). */
  api?<T>(method: string, path: string, body?: unknown): Promise<ApiResponse<T>>;
}

const STATUS_LABEL: Record<string, string> = {
  not_configured: 'Not configured',
  checking: 'Checking…',
  online: 'Online',
  auth_failed: 'Auth failed',
  unreachable: 'Unreachable',
  misconfigured: 'Misconfigured',
};

/** The label of a link status (`auth_failed` → `Auth failed`). */
export function statusLabel(status: string | null | undefined): string {
  if (!status) return 'Not configured';
  return STATUS_LABEL[status] ?? status.replace(/_/g, ' ');
}

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

const MODES: { id: string; label: string; hint: string }[] = [
  { id: 'auto', label: 'Auto', hint: 'callbacks; switch to the assistant’s event stream if it refuses the callback URL' },
  { id: 'callback', label: 'Callback', hint: 'replies always come to the callback URL' },
  { id: 'events', label: 'Events', hint: 'no callback; replies are read from GET /v1/events (Hermes)' },
];

type Field = 'base_url' | 'relay_token' | 'mode' | 'prelude';

/** Which form field an API error is about (`null`: the form as a whole). */
export function errorField(code: string, message: string): Field | null {
  switch (code) {
    case 'invalid_base_url':
      return 'base_url';
    case 'invalid_relay_token':
      return 'relay_token';
    case 'prelude_too_long':
      return 'prelude';
    case 'missing_field':
    case 'invalid_field': {
      const m = message.toLowerCase();
      if (m.includes('relay_token') || m.includes('relay token')) return 'relay_token';
      if (m.includes('prelude')) return 'prelude';
      if (m.includes('mode')) return 'mode';
      if (m.includes('base_url')) return 'base_url';
      return null;
    }
    default:
      return null;
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

/**
 * The one next step for the link's state, in plain words (null when there is none: online, or
 * being checked).
 */
export function nextStep(a: Assistant | null): string | null {
  switch (a?.status) {
    case 'not_configured':
      return 'Next: choose your assistant below, follow its set-up, then save and press Test.';
    case 'unreachable':
      return 'Next: start the assistant (or check its address below), then press Test.';
    case 'auth_failed':
      return 'Next: enter the token the assistant expects below, then save.';
    case 'misconfigured':
      return 'Next: check the address below: something answers there, but not the assistant.';
    case 'online':
    case 'checking':
    case undefined:
      return null;
    default:
      return 'Next: check the settings below, then press Test.';
  }
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
  private baseUrl!: HTMLInputElement;
  private token!: HTMLInputElement;
  private tokenState = h('span', { class: 'chip chip-muted', id: 'assistant-token-state' }, 'not set');
  private modeInputs = new Map<string, HTMLInputElement>();
  private prelude!: HTMLTextAreaElement;
  private preludeState = h('span', { class: 'setting-note', id: 'assistant-prelude-state' });
  private defaultPrelude = h('pre', { class: 'prelude-default', id: 'assistant-default-prelude' });
  private errors = new Map<Field, HTMLElement>();
  private saveBtn!: HTMLButtonElement;
  private testBtn!: HTMLButtonElement;
  private removeBtn!: HTMLButtonElement;
  private confirmBox!: HTMLElement;
  private result = h('div', { class: 'setting-status assistant-result', id: 'assistant-result', role: 'status', 'aria-live': 'polite' });
  private infoDelivery = h('span', { id: 'assistant-delivery' });
  private infoEvents = h('span', { id: 'assistant-events' });
  private infoCallback = h('code', { class: 'setting-value', id: 'assistant-callback-url' });
  private infoLastError = h('span', { id: 'assistant-last-error' });
  private providers: Providers | null = null;
  /** The kind the user picked in the picker (`null`: follow the active kind). */
  private chosenKind: string | null = null;
  private picker = h('div', { class: 'mode-options assistant-kinds', role: 'radiogroup', 'aria-label': 'Assistant kind', id: 'assistant-kinds' });
  private providerList = h('div', { class: 'assistant-providers', id: 'assistant-providers', role: 'group', 'aria-label': 'Assistants of this kind' });
  private warningEl = h('p', { class: 'field-error assistant-warning', id: 'assistant-warning', role: 'alert', hidden: true });
  private useKindBtn = h('button', { class: 'btn btn-primary', type: 'button', id: 'assistant-use-kind', hidden: true }, 'Use this kind');
  private form!: HTMLFormElement;
  /** The folded "Advanced" part of the form (replies mode, prelude). */
  private advanced!: HTMLDetailsElement;
  private linkInfo!: HTMLElement;
  private dirty = new Set<Field>();
  /** "Reset to default" was pressed: the save sends `prelude: null`. */
  private preludeReset = false;
  private busy = false;
  /** The `clawborrator` kind's form (kinds/clawborrator.ts). */
  private claw: ClawborratorForm;
  private gateway: GatewaySettings;
  /** The `byo` kind's pairing panel (kinds/byo.ts). */
  private byo: ByoSettings;

  constructor(private actions: AssistantActions) {
    this.claw = new ClawborratorForm(actions);
    this.gateway = new GatewaySettings(actions);
    this.byo = new ByoSettings(actions);
    this.buildInputs();
    const modeGroup = this.buildModes();
    const resetBtn = this.buildReset();
    this.buildButtons();
    const form = this.buildForm(modeGroup, resetBtn);

    const info = (label: string, value: HTMLElement, ...extra: HTMLElement[]) =>
      h('div', { class: 'setting-row' }, h('div', { class: 'setting-label' }, label), h('div', { class: 'setting-field' }, value, ...extra));
    const copyBtn = h('button', { class: 'btn btn-small', type: 'button', 'aria-label': 'Copy the callback URL the assistant uses' }, 'Copy');
    copyBtn.addEventListener('click', async () => {
      const ok = await copyText(this.a?.callback_url ?? '');
      copyBtn.textContent = ok ? 'Copied' : 'Copy failed';
      setTimeout(() => (copyBtn.textContent = 'Copy'), 1500);
    });

    this.useKindBtn.addEventListener('click', () => void this.useKind());
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
      form,
      this.claw.el,
      this.gateway.el,
      this.byo.el,
      this.result,
      (this.linkInfo = h(
        'div',
        { class: 'assistant-info', 'aria-label': 'What the link reports', role: 'group' },
        info('Callback URL', this.infoCallback, copyBtn),
        info('Last error', this.infoLastError),
        // How replies travel is for whoever sets the assistant up, not for a first look.
        h(
          'details',
          { class: 'assistant-tech', id: 'assistant-tech' },
          h('summary', null, 'Technical details'),
          info('Delivery', this.infoDelivery),
          info('Event stream', this.infoEvents),
        ),
      )),
    );
    this.render(null);
  }

  /** The error line under field `f` (remembered, to show what the API refused). */
  private err(f: Field): HTMLElement {
      const el = h('div', { class: 'field-error', id: `assistant-${f.replace('_', '-')}-error`, hidden: true });
      this.errors.set(f, el);
      return el;
  }

  /** The base URL, relay token and prelude inputs. */
  private buildInputs(): void {
    this.baseUrl = h('input', {
      class: 'field-input',
      type: 'url',
      id: 'assistant-base-url',
      name: 'base_url',
      placeholder: 'http://127.0.0.1:8644',
      autocomplete: 'off',
      spellcheck: 'false',
      'aria-describedby': 'assistant-base-url-hint assistant-base-url-error',
    });
    this.token = h('input', {
      class: 'field-input',
      type: 'password',
      id: 'assistant-relay-token',
      name: 'relay_token',
      autocomplete: 'new-password',
      spellcheck: 'false',
      'aria-describedby': 'assistant-token-state assistant-relay-token-hint assistant-relay-token-error',
    });
    this.prelude = h('textarea', {
      class: 'field-input prelude-input',
      id: 'assistant-prelude',
      name: 'prelude',
      rows: 5,
      spellcheck: 'true',
      'aria-describedby': 'assistant-prelude-hint assistant-prelude-state assistant-prelude-error',
    });
    this.baseUrl.addEventListener('input', () => this.touch('base_url'));
    this.token.addEventListener('input', () => this.touch('relay_token'));
    this.prelude.addEventListener('input', () => {
      this.preludeReset = false;
      this.touch('prelude');
      this.paintPreludeState();
    });
  }

  /** The replies mode radio group. */
  private buildModes(): HTMLElement {
    const modeGroup = h('div', { class: 'mode-options' });
    for (const m of MODES) {
      const input = h('input', { type: 'radio', name: 'assistant-mode', value: m.id, id: `assistant-mode-${m.id}` });
      input.addEventListener('change', () => this.touch('mode'));
      this.modeInputs.set(m.id, input);
      modeGroup.append(
        h('label', { class: 'mode-option', for: `assistant-mode-${m.id}` }, input, h('span', { class: 'mode-name' }, m.label), h('span', { class: 'mode-hint' }, m.hint)),
      );
    }
    return modeGroup;
  }

  /** "Reset to default" of the prelude. */
  private buildReset(): HTMLElement {
    const resetBtn = h('button', { class: 'btn btn-small', type: 'button', id: 'assistant-prelude-reset' }, 'Reset to default');
    resetBtn.addEventListener('click', () => {
      this.prelude.value = this.a?.default_prelude ?? '';
      this.preludeReset = true;
      this.touch('prelude');
      this.paintPreludeState();
    });
    return resetBtn;
  }

  /** Save, Test connection, Remove… and its confirmation. */
  private buildButtons(): void {
    this.saveBtn = h('button', { class: 'btn btn-primary', type: 'submit', id: 'assistant-save' }, 'Save');
    this.testBtn = h('button', { class: 'btn', type: 'button', id: 'assistant-test' }, 'Test connection');
    this.removeBtn = h('button', { class: 'btn btn-danger', type: 'button', id: 'assistant-remove', 'aria-expanded': 'false' }, 'Remove…');
    this.testBtn.addEventListener('click', () => void this.test());
    const confirmRemove = h('button', { class: 'btn btn-danger', type: 'button', id: 'assistant-confirm-remove' }, 'Remove the link');
    const cancelRemove = h('button', { class: 'btn', type: 'button' }, 'Cancel');
    this.confirmBox = h(
      'div',
      { class: 'confirm', role: 'group', 'aria-label': 'Confirm removing the assistant link', hidden: true },
      h('p', null, 'Remove the assistant link? The base URL, mode and prelude are forgotten and the saved relay token is deleted. Messages not yet delivered wait until a link is set up again.'),
      h('div', { class: 'confirm-actions' }, confirmRemove, cancelRemove),
    );
    this.removeBtn.addEventListener('click', () => this.askRemove(true));
    cancelRemove.addEventListener('click', () => this.askRemove(false));
    this.confirmBox.addEventListener('keydown', (e) => {
      if (e.key === 'Escape') this.askRemove(false);
    });
    confirmRemove.addEventListener('click', () => void this.remove());
  }

  /** The form (base URL, relay token, Advanced: replies and prelude; the buttons). */
  private buildForm(modeGroup: HTMLElement, resetBtn: HTMLElement): HTMLFormElement {
    const row = (label: string, forId: string | null, ...field: (HTMLElement | null)[]) =>
      h(
        'div',
        { class: 'setting-row setting-row-top' },
        forId ? h('label', { class: 'setting-label', for: forId }, label) : h('div', { class: 'setting-label' }, label),
        h('div', { class: 'setting-field setting-field-col' }, ...field),
      );
    const hint = (id: string, text: string) => h('div', { class: 'setting-note', id }, text);

    const form = (this.form = h(
      'form',
      { class: 'assistant-form', id: 'assistant-form', novalidate: true, 'aria-label': 'Assistant link settings' },
      row(
        'Base URL',
        'assistant-base-url',
        this.baseUrl,
        hint('assistant-base-url-hint', 'Where the assistant listens (Hermes adapter, OpenClaw channel). Loopback only — 127.0.0.1, ::1 or localhost — because the relay token travels in clear text.'),
        this.err('base_url'),
      ),
      row(
        'Relay token',
        'assistant-relay-token',
        h('div', { class: 'inline-field' }, this.token, this.tokenState),
        hint('assistant-relay-token-hint', 'The token the assistant expects (Hermes: STAGEWHISPER_RELAY_TOKEN; OpenClaw: httpToken). Write-only: it is never shown again.'),
        this.err('relay_token'),
      ),
      // Rarely changed: folded under "Advanced" (opened by itself when one of them is refused).
      (this.advanced = h(
        'details',
        { class: 'advanced', id: 'assistant-advanced' },
        h('summary', null, 'Advanced: how replies come back, the coaching prelude'),
      h(
        'div',
        { class: 'setting-row setting-row-top' },
        h('div', { class: 'setting-label', id: 'assistant-mode-label' }, 'Replies'),
        h(
          'div',
          { class: 'setting-field setting-field-col' },
          h('div', { role: 'radiogroup', 'aria-labelledby': 'assistant-mode-label', 'aria-describedby': 'assistant-mode-error' }, modeGroup),
          this.err('mode'),
        ),
      ),
      row(
        'Prelude',
        'assistant-prelude',
        this.prelude,
        h('div', { class: 'inline-field' }, resetBtn, this.preludeState),
        hint('assistant-prelude-hint', 'Sent to the assistant when a call starts, before its transcript. {title} is replaced by the call’s title.'),
        h('details', { class: 'prelude-details' }, h('summary', null, 'Show the default prelude'), this.defaultPrelude),
        this.err('prelude'),
      ),
      )),
      h('div', { class: 'form-actions' }, this.saveBtn, this.testBtn, this.removeBtn),
      this.confirmBox,
    ));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      void this.save();
    });
    return form;
  }

  /** The registry from `GET /api/providers`: builds the kind picker. */
  setProviders(p: Providers | null): void {
    this.providers = p;
    this.picker.replaceChildren();
    for (const k of p?.kinds ?? []) {
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
    const step = a.kind === 'incoming' && shown === a.kind ? nextStep(a) : null;
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
    const isIncoming = kind === 'incoming';
    this.form.hidden = !isIncoming;
    this.linkInfo.hidden = !isIncoming;
    const info = this.providers?.kinds.find((k) => k.id === kind);
    const active = this.a?.kind ?? this.providers?.active_kind ?? 'incoming';
    this.claw.el.hidden = kind !== 'clawborrator';
    this.gateway.el.hidden = kind !== GATEWAY_KIND;
    this.byo.el.hidden = kind !== BYO_KIND;
    this.useKindBtn.hidden = isIncoming || kind === 'clawborrator' || kind === GATEWAY_KIND || kind === BYO_KIND || kind === active || !info?.available;
    this.useKindBtn.textContent = `Use ${info?.name ?? kind}`;
  }

  private async useKind(): Promise<void> {
    if (this.busy) return;
    const kind = this.shownKind();
    this.setBusy(true, 'Switching the assistant…');
    try {
      const res = await this.actions.assistantCall('PUT', '/api/assistant', { kind });
      this.result.textContent = res.status === 200 ? this.outcome('Switched:') : `Not switched: ${this.actions.errorText(res)}`;
      describeError(this.result, res);
      if (res.status === 200) this.chosenKind = null;
    } catch (e) {
      this.result.textContent = `Not switched: ${e instanceof Error ? e.message : String(e)}`;
    } finally {
      this.setBusy(false, '');
      this.paintKind();
    }
  }

  /** Shows the link as the store has it; fills the inputs the user is not editing. */
  render(a: Assistant | null): void {
    this.a = a;
    this.gateway.render(a);
    this.byo.render(a);
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

    this.tokenState.textContent = a?.relay_token_set ? 'set' : 'not set';
    this.tokenState.className = `chip ${a?.relay_token_set ? 'chip-ok' : 'chip-muted'}`;
    this.token.placeholder = a?.relay_token_set ? 'Saved — leave empty to keep it' : '16 or more characters';
    this.defaultPrelude.textContent = a?.default_prelude ?? '';
    this.fill(false);

    this.removeBtn.hidden = !a?.configured;
    this.testBtn.disabled = !a?.configured || this.busy;

    // What the link reports.
    if (!a || !a.configured || a.delivery === 'none') this.infoDelivery.textContent = 'None: no assistant is linked.';
    else if (a.delivery === 'events')
      this.infoDelivery.textContent = `Replies over the assistant’s event stream (GET /v1/events)${a.fallback_reason ? ` — fallback: ${a.fallback_reason}` : ''}`;
    else this.infoDelivery.textContent = `Replies to the callback URL (mode ${a.mode}).`;
    const sfb = a?.supports_events_fallback;
    const evLabel = sfb === true ? 'Offered' : sfb === false ? 'Not offered' : 'Unknown';
    this.infoEvents.replaceChildren(
      h('span', { class: `chip ${sfb === true ? 'chip-ok' : 'chip-muted'}`, id: 'assistant-events-support' }, evLabel),
      a?.events_fallback_detail ? h('span', { class: 'setting-note' }, ' ', a.events_fallback_detail) : '',
    );
    this.infoCallback.textContent = a?.callback_url ?? '…';
    this.claw.render(a);
    // The last error in words (its code in the tooltip); once a later check found the
    // assistant online, it says it is resolved rather than sit beside "Online" as if current.
    const le = a?.last_error;
    const resolved = !!le && a?.status === 'online' && !!a.checked_at && (!le.at || Date.parse(le.at) <= Date.parse(a.checked_at));
    this.infoLastError.title = le ? `Error code: ${le.code}` : '';
    if (le) this.infoLastError.dataset.errorCode = le.code;
    else delete this.infoLastError.dataset.errorCode;
    this.infoLastError.dataset.resolved = String(resolved);
    this.infoLastError.replaceChildren(
      ...(le
        ? [
            h('span', { class: resolved ? 'setting-note' : '' }, resolved ? `Resolved since (the last check found it online): ${plainError(le.code, le.message)}` : plainError(le.code, le.message)),
            le.at ? h('time', { class: 'setting-note', datetime: le.at, title: fullTime(le.at) }, ` · ${clockTime(le.at)}`) : '',
          ]
        : [h('span', { class: 'setting-note' }, 'None')]),
    );
    this.paintKind();
  }

  focus(): void {
    this.card.focus();
  }

  // ---- form ------------------------------------------------------------------------------------

  private touch(f: Field): void {
    this.dirty.add(f);
    this.setError(f, null);
  }

  /** Puts the link's saved values in the inputs (all of them with `force`, else the untouched). */
  private fill(force: boolean): void {
    const a = this.a;
    if (force) {
      this.dirty.clear();
      this.preludeReset = false;
    }
    if (!this.dirty.has('base_url')) this.baseUrl.value = a?.base_url ?? '';
    if (!this.dirty.has('relay_token')) this.token.value = '';
    if (!this.dirty.has('mode')) {
      const mode = a?.mode ?? 'auto';
      for (const [id, input] of this.modeInputs) input.checked = id === mode;
    }
    if (!this.dirty.has('prelude')) this.prelude.value = a ? a.prelude || a.default_prelude : '';
    this.paintPreludeState();
  }

  private paintPreludeState(): void {
    const a = this.a;
    if (!a) {
      this.preludeState.textContent = '';
      return;
    }
    const same = this.prelude.value === a.prelude;
    this.preludeState.textContent = this.preludeReset
      ? 'The default prelude will be used once you save.'
      : same && a.prelude_is_default
        ? 'Using the default prelude.'
        : same
          ? 'Using your own prelude.'
          : 'Edited — not saved yet.';
  }

  private setError(f: Field, text: string | null): void {
    const el = this.errors.get(f);
    if (!el) return;
    el.hidden = !text;
    el.textContent = text ?? '';
    const input = f === 'base_url' ? this.baseUrl : f === 'relay_token' ? this.token : f === 'prelude' ? this.prelude : null;
    if (input) {
      if (text) input.setAttribute('aria-invalid', 'true');
      else input.removeAttribute('aria-invalid');
    } else if (f === 'mode') {
      for (const i of this.modeInputs.values()) {
        if (text) i.setAttribute('aria-invalid', 'true');
        else i.removeAttribute('aria-invalid');
      }
    }
  }

  private clearErrors(): void {
    for (const f of this.errors.keys()) this.setError(f, null);
  }

  /** The `PUT /api/assistant` body for what the form says now. */
  body(): Record<string, unknown> {
    const a = this.a;
    const b: Record<string, unknown> = { base_url: this.baseUrl.value.trim() };
    // Saving the link form while another kind is active switches back to `incoming`.
    if (a && a.kind !== 'incoming') b.kind = 'incoming';
    const tok = this.token.value.trim();
    if (tok) b.relay_token = tok;
    const mode = [...this.modeInputs.entries()].find(([, i]) => i.checked)?.[0];
    if (mode) b.mode = mode;
    const p = this.prelude.value;
    if (this.preludeReset && (!a || p === a.default_prelude)) b.prelude = null;
    else if (!a || p !== a.prelude) b.prelude = p.trim() ? p : null;
    return b;
  }

  private setBusy(on: boolean, what: string): void {
    this.busy = on;
    this.saveBtn.disabled = on;
    this.testBtn.disabled = on || !this.a?.configured;
    this.removeBtn.disabled = on;
    if (on) this.result.textContent = what;
  }

  /** The sentence after an answer: the status and its detail. */
  private outcome(prefix: string): string {
    const a = this.a;
    if (!a) return prefix;
    return `${prefix} ${statusLabel(a.status)}${a.detail ? ` — ${a.detail}` : '.'}`;
  }

  private apiProblem(res: ApiResponse<unknown>): void {
    const b = res.body as { error?: unknown; message?: unknown } | null;
    const code = b && typeof b.error === 'string' ? b.error : '';
    const message = b && typeof b.message === 'string' ? b.message : '';
    const field = code ? errorField(code, message) : null;
    if (field) {
      if (field === 'mode' || field === 'prelude') this.advanced.open = true;
      this.setError(field, plainError(code, message));
      this.result.textContent = 'Not saved: see the highlighted field.';
      const input = field === 'base_url' ? this.baseUrl : field === 'relay_token' ? this.token : field === 'prelude' ? this.prelude : this.modeInputs.get('auto');
      input?.focus();
    } else {
      this.result.textContent = `Not saved: ${this.actions.errorText(res)}`;
      describeError(this.result, res);
    }
  }

  private async save(): Promise<void> {
    if (this.busy) return;
    this.clearErrors();
    const body = this.body();
    if (!body.base_url) {
      this.setError('base_url', 'Enter the assistant’s address, e.g. http://127.0.0.1:8644.');
      this.baseUrl.focus();
      return;
    }
    if (!this.a?.relay_token_set && !body.relay_token) {
      this.setError('relay_token', 'Enter the relay token the assistant is configured with.');
      this.token.focus();
      return;
    }
    this.setBusy(true, 'Saving and checking the assistant…');
    try {
      const res = await this.actions.assistantCall('PUT', '/api/assistant', body);
      if (res.status !== 200) return this.apiProblem(res);
      this.fill(true);
      this.result.textContent = this.outcome('Saved.');
    } catch (e) {
      this.result.textContent = `Not saved: ${e instanceof Error ? e.message : String(e)}`;
    } finally {
      this.setBusy(false, '');
    }
  }

  private async test(): Promise<void> {
    if (this.busy) return;
    this.setBusy(true, 'Checking the assistant…');
    try {
      const res = await this.actions.assistantCall('POST', '/api/assistant/check');
      this.result.textContent = res.status === 200 ? this.outcome('Checked:') : `Check failed: ${this.actions.errorText(res)}`;
      describeError(this.result, res);
    } catch (e) {
      this.result.textContent = `Check failed: ${e instanceof Error ? e.message : String(e)}`;
    } finally {
      this.setBusy(false, '');
    }
  }

  private askRemove(open: boolean): void {
    this.confirmBox.hidden = !open;
    this.removeBtn.setAttribute('aria-expanded', String(open));
    if (open) (this.confirmBox.querySelector('#assistant-confirm-remove') as HTMLButtonElement | null)?.focus();
    else this.removeBtn.focus();
  }

  private async remove(): Promise<void> {
    if (this.busy) return;
    this.setBusy(true, 'Removing…');
    try {
      const res = await this.actions.assistantCall('DELETE', '/api/assistant');
      if (res.status !== 200) {
        this.result.textContent = `Not removed: ${this.actions.errorText(res)}`;
        describeError(this.result, res);
        return;
      }
      this.clearErrors();
      this.fill(true);
      this.confirmBox.hidden = true;
      this.removeBtn.setAttribute('aria-expanded', 'false');
      this.result.textContent = 'The assistant link is removed.';
      this.baseUrl.focus();
    } catch (e) {
      this.result.textContent = `Not removed: ${e instanceof Error ? e.message : String(e)}`;
    } finally {
      this.setBusy(false, '');
    }
  }
}
