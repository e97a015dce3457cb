// Settings → Assistant for the `incoming` kind (the direct relay): where this app sends chat
// messages, the call's prelude and transcript turns (`PUT /api/assistant`), a connection test,
// removal, and what the link reports (status, delivery mode, the `/v1/events` fallback, the last
// error, the callback URL the assistant gets).
//
// The form's inputs are the user's draft; everything shown about the link comes from the store
// (`store.assistant`, fed by the answers of `/api/assistant` and the app's polling).

import { describeError, plainError } from '../errors';
import { clockTime, copyText, fullTime, h } from '../dom';
import type { ApiResponse } from '../transport';
import type { Assistant } from '../types';
import type { AssistantActions, KindForm, KindModule } from './form';
import { outcome } from './words';

export const INCOMING_KIND = 'incoming';

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

const row = (label: string, forId: string | null, ...field: (HTMLElement | null)[]) =>
  h(
    'div',
    { class: 'setting-row setting-row-top' },
    forId ? h('label', { class: 'setting-label', for: forId }, label) : h('div', { class: 'setting-label' }, label),
    h('div', { class: 'setting-field setting-field-col' }, ...field),
  );
const hint = (id: string, text: string) => h('div', { class: 'setting-note', id }, text);
const info = (label: string, value: HTMLElement, ...extra: HTMLElement[]) =>
  h('div', { class: 'setting-row' }, h('div', { class: 'setting-label' }, label), h('div', { class: 'setting-field' }, value, ...extra));

/** The `incoming` kind's form and what its link reports. */
export class IncomingForm implements KindForm {
  readonly el: HTMLFormElement;
  readonly report: HTMLElement;
  private a: Assistant | null = null;
  private baseUrl = h('input', {
    class: 'field-input',
    type: 'url',
    id: 'assistant-base-url',
    name: 'base_url',
    placeholder: 'http://127.0.0.1:8644',
    autocomplete: 'off',
    spellcheck: 'false',
    'aria-describedby': 'assistant-base-url-hint assistant-base-url-error',
  });
  private token = h('input', {
    class: 'field-input',
    type: 'password',
    id: 'assistant-relay-token',
    name: 'relay_token',
    autocomplete: 'new-password',
    spellcheck: 'false',
    'aria-describedby': 'assistant-token-state assistant-relay-token-hint assistant-relay-token-error',
  });
  private tokenState = h('span', { class: 'chip chip-muted', id: 'assistant-token-state' }, 'not set');
  private modeInputs = new Map<string, HTMLInputElement>();
  private prelude = h('textarea', {
    class: 'field-input prelude-input',
    id: 'assistant-prelude',
    name: 'prelude',
    rows: 5,
    spellcheck: 'true',
    'aria-describedby': 'assistant-prelude-hint assistant-prelude-state assistant-prelude-error',
  });
  private preludeState = h('span', { class: 'setting-note', id: 'assistant-prelude-state' });
  private defaultPrelude = h('pre', { class: 'prelude-default', id: 'assistant-default-prelude' });
  private errors = new Map<Field, HTMLElement>();
  private saveBtn = h('button', { class: 'btn btn-primary', type: 'submit', id: 'assistant-save' }, 'Save');
  private testBtn = h('button', { class: 'btn', type: 'button', id: 'assistant-test' }, 'Test connection');
  private removeBtn = h('button', { class: 'btn btn-danger', type: 'button', id: 'assistant-remove', 'aria-expanded': 'false' }, 'Remove…');
  private confirmBox: HTMLElement;
  private infoDelivery = h('span', { id: 'assistant-delivery' });
  private infoEvents = h('span', { id: 'assistant-events' });
  private infoCallback = h('code', { class: 'setting-value', id: 'assistant-callback-url' });
  private infoLastError = h('span', { id: 'assistant-last-error' });
  /** The folded "Advanced" part of the form (replies mode, prelude). */
  private advanced: HTMLDetailsElement;
  private dirty = new Set<Field>();
  /** "Reset to default" was pressed: the save sends `prelude: null`. */
  private preludeReset = false;
  private busy = false;

  /** `result`: the line under the form where answers are said. */
  constructor(
    private actions: AssistantActions,
    private result: HTMLElement,
  ) {
    this.baseUrl.addEventListener('input', () => this.touch('base_url'));
    this.token.addEventListener('input', () => this.touch('relay_token'));
    this.prelude.addEventListener('input', () => {
      this.preludeReset = false;
      this.touch('prelude');
      this.paintPreludeState();
    });
    this.testBtn.addEventListener('click', () => void this.test());
    this.confirmBox = this.removal();
    this.advanced = this.advancedPart();
    this.el = h(
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
      this.advanced,
      h('div', { class: 'form-actions' }, this.saveBtn, this.testBtn, this.removeBtn),
      this.confirmBox,
    );
    this.el.addEventListener('submit', (e) => {
      e.preventDefault();
      void this.save();
    });
    this.report = this.linkInfo();
  }

  private err(f: Field): HTMLElement {
    const el = h('div', { class: 'field-error', id: `assistant-${f.replace('_', '-')}-error`, hidden: true });
    this.errors.set(f, el);
    return el;
  }

  /** Replies mode and prelude, folded. */
  private advancedPart(): HTMLDetailsElement {
    const modeGroup = h('div', { class: 'mode-options' });
    for (const m of MODES) {
      const input = h('input', { type: 'radio', name: 'assistant-mode', value: m.id, id: `assistant-mode-${m.id}` });
      input.addEventListener('change', () => this.touch('mode'));
      this.modeInputs.set(m.id, input);
      modeGroup.append(
        h('label', { class: 'mode-option', for: `assistant-mode-${m.id}` }, input, h('span', { class: 'mode-name' }, m.label), h('span', { class: 'mode-hint' }, m.hint)),
      );
    }
    const resetBtn = h('button', { class: 'btn btn-small', type: 'button', id: 'assistant-prelude-reset' }, 'Reset to default');
    resetBtn.addEventListener('click', () => {
      this.prelude.value = this.a?.default_prelude ?? '';
      this.preludeReset = true;
      this.touch('prelude');
      this.paintPreludeState();
    });
    return h(
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
    );
  }

  /** The "Remove…" confirmation. */
  private removal(): HTMLElement {
    const confirmRemove = h('button', { class: 'btn btn-danger', type: 'button', id: 'assistant-confirm-remove' }, 'Remove the link');
    const cancelRemove = h('button', { class: 'btn', type: 'button' }, 'Cancel');
    const box = h(
      'div',
      { class: 'confirm', role: 'group', 'aria-label': 'Confirm removing the assistant link', hidden: true },
      h('p', null, 'Remove the assistant link? The base URL, mode and prelude are forgotten and the saved relay token is deleted. Messages not yet delivered wait until a link is set up again.'),
      h('div', { class: 'confirm-actions' }, confirmRemove, cancelRemove),
    );
    this.removeBtn.addEventListener('click', () => this.askRemove(true));
    cancelRemove.addEventListener('click', () => this.askRemove(false));
    box.addEventListener('keydown', (e) => {
      if (e.key === 'Escape') this.askRemove(false);
    });
    confirmRemove.addEventListener('click', () => void this.remove());
    return box;
  }

  /** What the link reports. */
  private linkInfo(): HTMLElement {
    const copyBtn = h('button', { class: 'btn btn-small', type: 'button', 'aria-label': 'Copy the callback URL the assistant uses' }, 'Copy');
    copyBtn.addEventListener('click', async () => {
      const ok = await copyText(this.a?.callback_url ?? '');
      copyBtn.textContent = ok ? 'Copied' : 'Copy failed';
      setTimeout(() => (copyBtn.textContent = 'Copy'), 1500);
    });
    return h(
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
    );
  }

  /** Shows the link as the store has it; fills the inputs the user is not editing. */
  render(a: Assistant | null): void {
    this.a = a;
    this.tokenState.textContent = a?.relay_token_set ? 'set' : 'not set';
    this.tokenState.className = `chip ${a?.relay_token_set ? 'chip-ok' : 'chip-muted'}`;
    this.token.placeholder = a?.relay_token_set ? 'Saved — leave empty to keep it' : '16 or more characters';
    this.defaultPrelude.textContent = a?.default_prelude ?? '';
    this.fill(false);

    this.removeBtn.hidden = !a?.configured;
    this.testBtn.disabled = !a?.configured || this.busy;

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
    this.paintLastError(a);
  }

  /**
   * The last error in words (its code in the tooltip); once a later check found the assistant
   * online, it says it is resolved rather than sit beside "Online" as if current.
   */
  private paintLastError(a: Assistant | null): void {
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
  }

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

  private input(f: Field): HTMLInputElement | HTMLTextAreaElement | null {
    return f === 'base_url' ? this.baseUrl : f === 'relay_token' ? this.token : f === 'prelude' ? this.prelude : null;
  }

  private setError(f: Field, text: string | null): void {
    const el = this.errors.get(f);
    if (!el) return;
    el.hidden = !text;
    el.textContent = text ?? '';
    const input = this.input(f);
    const inputs = input ? [input] : f === 'mode' ? [...this.modeInputs.values()] : [];
    for (const i of inputs) {
      if (text) i.setAttribute('aria-invalid', 'true');
      else i.removeAttribute('aria-invalid');
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
    if (a && a.kind !== INCOMING_KIND) b.kind = INCOMING_KIND;
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

  private apiProblem(res: ApiResponse<unknown>): void {
    const b = res.body as { error?: unknown; message?: unknown } | null;
    const code = b && typeof b.error === 'string' ? b.error : '';
    const message = b && typeof b.message === 'string' ? b.message : '';
    const field = code ? errorField(code, message) : null;
    if (field) {
      if (field === 'mode' || field === 'prelude') this.advanced.open = true;
      this.setError(field, plainError(code, message));
      this.result.textContent = 'Not saved: see the highlighted field.';
      (this.input(field) ?? this.modeInputs.get('auto'))?.focus();
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
      this.result.textContent = outcome(this.a, 'Saved.');
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
      this.result.textContent = res.status === 200 ? outcome(this.a, 'Checked:') : `Check failed: ${this.actions.errorText(res)}`;
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

export const incoming: KindModule = {
  savesItself: true,
  nextStep,
  create: (actions, result) => new IncomingForm(actions, result),
};
