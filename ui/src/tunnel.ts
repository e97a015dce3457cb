// Settings → Tunnel: a public path from an assistant on another machine to the callback listener
// (docs/remote-assistant.md). Kind ngrok (authtoken, write-only; optional reserved domain) or an
// external URL (the origin of a tunnel the user runs; verified by a signed probe unless turned
// off); Start (`POST /api/tunnel`), Check (`POST /api/tunnel/check`), Stop (`DELETE /api/tunnel`);
// the state, the advertised callback URL and the exact line the assistant must allow.
//
// As in assistant.ts, the inputs are the user's draft; everything shown about the tunnel comes
// from the store (`store.tunnel`, fed by the answers of `/api/tunnel…` and the app's polling).

import { describeError, plainError } from './errors';
import { clockTime, copyButton, fullTime, h } from './dom';
import type { ApiResponse } from './transport';
import type { Tunnel, TunnelKind } from './types';

export interface TunnelActions {
  /** A request to `/api/tunnel…` whose 200 answer the app puts in the store. */
  tunnelCall(method: string, path: string, body?: unknown): Promise<ApiResponse<unknown>>;
  errorText(res: ApiResponse<unknown>): string;
  /** Opens the callback token's rotation (Settings → Callback). */
  rotateToken(): void;
}

const STATE_LABEL: Record<string, string> = { off: 'Off', connecting: 'Connecting…', online: 'Online', failed: 'Failed' };

/** The label of a tunnel state (`connecting` → `Connecting…`). */
export function tunnelLabel(state: string | null | undefined): string {
  if (!state) return 'Off';
  return STATE_LABEL[state] ?? state.replace(/_/g, ' ');
}

/** CSS class of a tunnel state chip. */
export function tunnelClass(state: string | null | undefined): string {
  switch (state) {
    case 'online':
      return 'chip-ok';
    case 'connecting':
      return 'chip-checking';
    case 'failed':
      return 'chip-bad';
    default:
      return 'chip-muted';
  }
}

/** Plain words for an `error.code` the app did not explain (it normally sends a sentence). */
const REASONS: Record<string, string> = {
  no_authtoken: 'No ngrok authtoken: paste it here.',
  bad_authtoken: 'ngrok rejected the authtoken: copy the current one from the ngrok dashboard.',
  account_required: 'ngrok wants a verified account.',
  domain_not_reserved: 'The domain is not reserved for this ngrok account: reserve it, or clear it.',
  domain_not_allowed: 'Your ngrok plan cannot use that domain.',
  domain_in_use: 'The URL is online in another ngrok agent: stop the other one.',
  session_limit: 'The ngrok account runs too many agents: stop the other one.',
  dns_failure: 'The name does not resolve: offline, or no DNS.',
  no_network: 'The network is unreachable.',
  connection_refused: 'Nothing listens at the tunnel URL: is the tunnel running?',
  timeout: 'No answer in time: a network that drops packets, or a firewall.',
  tls_failed: 'TLS failed: the certificate is not valid for the name, or a proxy intercepts TLS.',
  connection_lost: 'The ngrok session dropped; reconnecting.',
  probe_not_arrived: 'The URL answered, but the probe never reached StageWhisper: the tunnel points elsewhere.',
  tunnel_upstream_failed: 'The tunnel is up but cannot reach StageWhisper.',
  redirected: 'The URL redirects: enter the final origin.',
  probe_answer_lost: 'Something between alters the answer, or another StageWhisper answered.',
  probe_mismatch: 'Something between alters the answer, or another StageWhisper answered.',
  probe_http_error: 'Something between alters the answer, or another StageWhisper answered.',
  invalid_url: 'Not an origin: enter scheme://host[:port] only.',
};

/** Why the tunnel is not up, in plain words ('' when there is no error). */
export function tunnelReason(t: Tunnel | null): string {
  const e = t?.error;
  if (!e) return '';
  return e.message || REASONS[e.code] || e.code.replace(/_/g, ' ');
}

/** The call bar's chip: text, class and tooltip. */
export function tunnelChip(t: Tunnel | null): { text: string; cls: string; title: string; state: string } {
  const state = t?.state ?? 'off';
  const label = state === 'off' ? 'off' : tunnelLabel(state).toLowerCase();
  let why: string;
  if (!t) why = 'No tunnel: the assistant must run on this computer.';
  else if (state === 'online') why = `Online: ${t.public_url ?? t.callback_url ?? ''}`;
  else if (state === 'failed') why = tunnelReason(t) || t.detail;
  else why = t.detail;
  return { text: `Tunnel: ${label}`, cls: tunnelClass(state), title: `${why}\n(Settings → Tunnel)`.trim(), state };
}

type Field = 'kind' | 'authtoken' | 'domain' | 'url' | 'verify';

/** Which form field a `400` of `POST /api/tunnel` is about (`null`: the form as a whole). */
export function tunnelErrorField(code: string, message: string, kind: TunnelKind): Field | null {
  if (code === 'invalid_url') return kind === 'ngrok' ? 'domain' : 'url';
  if (code !== 'missing_field' && code !== 'invalid_field') return null;
  const m = message.toLowerCase();
  for (const f of ['authtoken', 'domain', 'url', 'verify', 'kind'] as const) if (m.includes(`\`${f}\``)) return f;
  for (const f of ['authtoken', 'domain', 'verify', 'kind'] as const) if (m.includes(f)) return f;
  if (m.includes('url')) return 'url';
  return null;
}

const KINDS: { id: TunnelKind; label: string; hint: string }[] = [
  { id: 'ngrok', label: 'ngrok', hint: 'runs inside the app; needs your ngrok authtoken' },
  { id: 'external', label: 'External URL', hint: 'a tunnel you run (Tailscale, Cloudflare, ssh -R, a reverse proxy)' },
];

const fieldInput = (id: string, attrs: Record<string, string>) =>
  h('input', { class: 'field-input', id, autocomplete: 'off', spellcheck: 'false', 'aria-describedby': `${id}-hint ${id}-error`, ...attrs });

/** A labelled row whose field is a column (input, hint, error). */
const settingRow = (label: string, forId: string | null, ...field: (HTMLElement | null)[]) =>
  h(
    'div',
    { class: 'setting-row setting-row-top' },
    forId ? h('label', { class: 'setting-label', for: forId }, label) : h('div', { class: 'setting-label' }, label),
    h('div', { class: 'setting-field setting-field-col' }, ...field),
  );

const fieldHint = (id: string, ...text: (string | HTMLElement)[]) => h('div', { class: 'setting-note', id }, ...text);

/** A row of what the tunnel reports. */
const infoRow = (label: string, value: HTMLElement, ...extra: HTMLElement[]) =>
  h('div', { class: 'setting-row' }, h('div', { class: 'setting-label' }, label), h('div', { class: 'setting-field' }, value, ...extra));

export class TunnelSettings {
  readonly card: HTMLElement;
  private t: Tunnel | null = null;
  private statusChip = h('span', { class: 'chip chip-muted', id: 'tunnel-settings-status' }, 'Off');
  private stateText = h('p', { class: 'assistant-detail', id: 'tunnel-state-text' });
  private checked = h('p', { class: 'setting-note assistant-checked', id: 'tunnel-checked' });
  private kindInputs = new Map<TunnelKind, HTMLInputElement>();
  private authtoken = fieldInput('tunnel-authtoken', { type: 'password', name: 'authtoken', autocomplete: 'new-password' });
  private tokenState = h('span', { class: 'chip chip-muted', id: 'tunnel-authtoken-state' }, 'not set');
  private forgetBtn = h('button', { class: 'btn btn-small', type: 'button', id: 'tunnel-authtoken-forget' }, 'Delete saved token');
  private domain = fieldInput('tunnel-domain', { type: 'text', name: 'domain', placeholder: 'desk.example.app (optional)' });
  private url = fieldInput('tunnel-url', { type: 'url', name: 'url', placeholder: 'https://desk.example.net' });
  private verify = h('input', { type: 'checkbox', id: 'tunnel-verify', name: 'verify', 'aria-describedby': 'tunnel-verify-error' });
  private ngrokFields: HTMLElement;
  private externalFields: HTMLElement;
  private errors = new Map<Field, HTMLElement>();
  private startBtn = h('button', { class: 'btn btn-primary', type: 'submit', id: 'tunnel-start' }, 'Start');
  private checkBtn = h('button', { class: 'btn', type: 'button', id: 'tunnel-check' }, 'Check');
  private stopBtn = h('button', { class: 'btn btn-danger', type: 'button', id: 'tunnel-stop' }, 'Stop');
  private result = h('div', { class: 'setting-status assistant-result', id: 'tunnel-result', role: 'status', 'aria-live': 'polite' });
  private infoPublic = h('code', { class: 'setting-value', id: 'tunnel-public-url' });
  private infoCallback = h('code', { class: 'setting-value', id: 'tunnel-callback-url' });
  private infoAllow = h('code', { class: 'setting-value', id: 'tunnel-allow' });
  private allowCopy = copyButton('the line the assistant must allow', () => this.t?.assistant_allow?.line ?? '', 'tunnel-allow-copy');
  private dirty = new Set<Field>();
  private busy = false;

  constructor(private actions: TunnelActions) {
    this.authtoken.setAttribute('aria-describedby', 'tunnel-authtoken-state tunnel-authtoken-hint tunnel-authtoken-error');
    this.wire();
    this.ngrokFields = this.buildNgrokFields();
    this.externalFields = this.buildExternalFields();
    this.card = h(
      'fieldset',
      { class: 'card', id: 'settings-tunnel', tabindex: '-1' },
      h('legend', null, 'Tunnel (assistant on another machine)'),
      h('div', { class: 'assistant-status', 'aria-live': 'polite' }, this.statusChip, this.stateText),
      this.checked,
      this.buildForm(),
      this.buildInfo(),
    );
    this.render(null);
  }

  /** The error line of field `f` (one per field, shown by `showErrors`). */
  private err(f: Field): HTMLElement {
    const el = h('div', { class: 'field-error', id: `tunnel-${f}-error`, hidden: true });
    this.errors.set(f, el);
    return el;
  }

  /** The inputs mark themselves edited; the buttons act. */
  private wire(): void {
    this.authtoken.addEventListener('input', () => this.touch('authtoken'));
    this.domain.addEventListener('input', () => this.touch('domain'));
    this.url.addEventListener('input', () => this.touch('url'));
    this.verify.addEventListener('change', () => this.touch('verify'));
    this.forgetBtn.addEventListener('click', () => void this.run('DELETE', '/api/tunnel/authtoken', undefined, 'Deleting the saved authtoken…', 'Saved authtoken deleted.'));
    this.checkBtn.addEventListener('click', () => void this.run('POST', '/api/tunnel/check', undefined, 'Checking the tunnel…', 'Checked again: the state above is the answer.'));
    this.stopBtn.addEventListener('click', () => void this.run('DELETE', '/api/tunnel', undefined, 'Stopping the tunnel…', 'Stopped.'));
  }

  /** The kind's radio buttons. */
  private buildKinds(): HTMLElement {
    const kindGroup = h('div', { class: 'mode-options' });
    for (const k of KINDS) {
      const radio = h('input', { type: 'radio', name: 'tunnel-kind', value: k.id, id: `tunnel-kind-${k.id}` });
      radio.addEventListener('change', () => {
        this.touch('kind');
        this.paintKind();
      });
      this.kindInputs.set(k.id, radio);
      kindGroup.append(
        h('label', { class: 'mode-option', for: `tunnel-kind-${k.id}` }, radio, h('span', { class: 'mode-name' }, k.label), h('span', { class: 'mode-hint' }, k.hint)),
      );
    }
    return kindGroup;
  }

  private buildNgrokFields(): HTMLElement {
    return h(
      'div',
      { id: 'tunnel-ngrok-fields' },
      settingRow(
        'Authtoken',
        'tunnel-authtoken',
        h('div', { class: 'inline-field' }, this.authtoken, this.tokenState, this.forgetBtn),
        fieldHint('tunnel-authtoken-hint', 'ngrok dashboard → Your Authtoken. Write-only: saved on this computer (mode 0600), never shown again.'),
        this.err('authtoken'),
      ),
      settingRow(
        'Domain',
        'tunnel-domain',
        this.domain,
        fieldHint('tunnel-domain-hint', 'Optional: a domain reserved in the ngrok dashboard, so the URL (and the assistant’s allowlist) stays the same across restarts.'),
        this.err('domain'),
      ),
    );
  }

  private buildExternalFields(): HTMLElement {
    return h(
      'div',
      { id: 'tunnel-external-fields' },
      settingRow(
        'Public origin',
        'tunnel-url',
        this.url,
        fieldHint('tunnel-url-hint', 'scheme://host[:port], no path; it must forward to ', h('code', { id: 'tunnel-local-url' }), '.'),
        this.err('url'),
      ),
      settingRow(
        'Verify',
        null,
        h('label', { class: 'mode-option', for: 'tunnel-verify' }, this.verify, h('span', null, 'Check it with a signed probe through the URL')),
        fieldHint('tunnel-verify-hint', 'Turn off for a URL only the assistant’s host can reach (an ssh -R to its loopback): it is then advertised unchecked.'),
        this.err('verify'),
      ),
    );
  }

  private buildForm(): HTMLElement {
    const form = h(
      'form',
      { class: 'assistant-form', id: 'tunnel-form', novalidate: true, 'aria-label': 'Tunnel settings' },
      h(
        'div',
        { class: 'setting-row setting-row-top' },
        h('div', { class: 'setting-label', id: 'tunnel-kind-label' }, 'Kind'),
        h(
          'div',
          { class: 'setting-field setting-field-col' },
          h('div', { role: 'radiogroup', 'aria-labelledby': 'tunnel-kind-label', 'aria-describedby': 'tunnel-kind-error' }, this.buildKinds()),
          this.err('kind'),
        ),
      ),
      this.ngrokFields,
      this.externalFields,
      h('div', { class: 'form-actions' }, this.startBtn, this.checkBtn, this.stopBtn),
      this.result,
    );
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      void this.start();
    });
    return form;
  }

  /** What the tunnel reports: its URLs, the line the assistant must allow, the way out of a leak. */
  private buildInfo(): HTMLElement {
    const rotateLink = h('button', { class: 'btn-link', type: 'button', id: 'tunnel-rotate' }, 'Rotate callback token…');
    rotateLink.addEventListener('click', () => this.actions.rotateToken());
    return h(
      'div',
      { class: 'assistant-info', 'aria-label': 'What the tunnel reports', role: 'group' },
      infoRow('Public URL', this.infoPublic),
      infoRow('Callback URL', this.infoCallback, copyButton('the advertised callback URL', () => this.t?.callback_url ?? '', 'tunnel-callback-copy')),
      h(
        'div',
        { class: 'setting-row setting-row-top' },
        h('div', { class: 'setting-label' }, 'Assistant must allow'),
        h(
          'div',
          { class: 'setting-field setting-field-col' },
          h('div', { class: 'inline-field' }, this.infoAllow, this.allowCopy),
          h(
            'div',
            { class: 'setting-note', id: 'tunnel-allow-hint' },
            'Hermes adapter: add this line to $HERMES_HOME/.env on the assistant host; OpenClaw: to the gateway process’ environment. Then restart the assistant.',
          ),
        ),
      ),
      h(
        'div',
        { class: 'setting-row' },
        h('div', { class: 'setting-label' }, 'URL leaked?'),
        h('div', { class: 'setting-field' }, h('span', { class: 'setting-note' }, 'The callback token is the only door.'), rotateLink),
      ),
    );
  }

  /** Shows the tunnel as the store has it; fills the inputs the user is not editing. */
  render(t: Tunnel | null): void {
    this.t = t;
    const state = t?.state ?? 'off';
    this.statusChip.className = `chip ${tunnelClass(state)}`;
    this.statusChip.dataset.state = state;
    this.statusChip.textContent = tunnelLabel(state);
    this.stateText.textContent = this.describe(t);
    const bits: string[] = [];
    if (t?.checked_at) bits.push(`Checked at ${clockTime(t.checked_at)}`);
    if (t?.state === 'online' && t.verified === true) bits.push('verified: a signed probe reached this app through it');
    if (t?.state === 'online' && t.verified === null && t.kind === 'external') bits.push('not verified (verification is off)');
    if (t?.attempt && t.state !== 'online') bits.push(`attempt ${t.attempt}`);
    this.checked.textContent = bits.join(' · ');
    this.checked.title = t?.checked_at ? fullTime(t.checked_at) : '';
    this.checked.hidden = bits.length === 0;

    const c = t?.config;
    this.tokenState.textContent = c?.authtoken_set ? (c.authtoken_source === 'env' ? 'set (NGROK_AUTHTOKEN)' : 'set') : 'not set';
    this.tokenState.className = `chip ${c?.authtoken_set ? 'chip-ok' : 'chip-muted'}`;
    this.authtoken.placeholder = c?.authtoken_set ? 'Saved — leave empty to keep it' : 'Your ngrok authtoken';
    this.forgetBtn.hidden = c?.authtoken_source !== 'saved';
    const local = this.card.querySelector('#tunnel-local-url');
    if (local) local.textContent = t?.local_callback_url ?? 'the callback listener';
    this.fill(false);

    const on = !!t && (t.config.enabled || state !== 'off');
    this.checkBtn.disabled = !on || this.busy;
    this.stopBtn.disabled = !on || this.busy;
    this.startBtn.textContent = on ? 'Save & restart' : 'Start';

    this.infoPublic.textContent = t?.public_url ?? '—';
    this.infoCallback.textContent = t?.callback_url ?? '…';
    const line = t?.assistant_allow?.line;
    this.infoAllow.textContent = line ?? 'Nothing: a loopback callback URL needs no allowlist entry.';
    this.infoAllow.classList.toggle('setting-note', !line);
    this.allowCopy.hidden = !line;
  }

  focus(): void {
    this.card.focus();
  }

  /** The state line: off / connecting / online <url> / failed <reason>. */
  private describe(t: Tunnel | null): string {
    if (!t) return 'Loading…';
    switch (t.state) {
      case 'online':
        return `Online at ${t.public_url ?? t.callback_url ?? '?'}`;
      case 'failed': {
        const why = tunnelReason(t) || t.detail;
        const retry = t.next_retry_at ? ` Next attempt at ${clockTime(t.next_retry_at)}.` : ' Not retrying: fix the setting, then Start or Check.';
        return `${why}${retry}`;
      }
      default:
        return t.detail;
    }
  }

  // ---- form ------------------------------------------------------------------------------------

  private kind(): TunnelKind {
    return this.kindInputs.get('external')?.checked ? 'external' : 'ngrok';
  }

  private paintKind(): void {
    const k = this.kind();
    this.ngrokFields.hidden = k !== 'ngrok';
    this.externalFields.hidden = k !== 'external';
  }

  private touch(f: Field): void {
    this.dirty.add(f);
    this.setError(f, null);
  }

  private fill(force: boolean): void {
    const c = this.t?.config;
    if (force) this.dirty.clear();
    if (!this.dirty.has('kind')) {
      const k = c?.kind ?? 'ngrok';
      for (const [id, i] of this.kindInputs) i.checked = id === k;
    }
    if (!this.dirty.has('authtoken')) this.authtoken.value = '';
    if (!this.dirty.has('domain')) this.domain.value = c?.domain ?? '';
    if (!this.dirty.has('url')) this.url.value = c?.url ?? '';
    if (!this.dirty.has('verify')) this.verify.checked = c?.verify ?? true;
    this.paintKind();
  }

  private inputOf(f: Field): HTMLInputElement | undefined {
    return { authtoken: this.authtoken, domain: this.domain, url: this.url, verify: this.verify, kind: this.kindInputs.get(this.kind()) }[f];
  }

  private setError(f: Field, text: string | null): void {
    const el = this.errors.get(f);
    if (!el) return;
    el.hidden = !text;
    el.textContent = text ?? '';
    const input = this.inputOf(f);
    if (text) input?.setAttribute('aria-invalid', 'true');
    else input?.removeAttribute('aria-invalid');
  }

  private clearErrors(): void {
    for (const f of this.errors.keys()) this.setError(f, null);
  }

  /** The `POST /api/tunnel` body for what the form says now. */
  body(): Record<string, unknown> {
    const kind = this.kind();
    if (kind === 'external') return { kind, url: this.url.value.trim(), verify: this.verify.checked };
    const b: Record<string, unknown> = { kind };
    const tok = this.authtoken.value.trim();
    if (tok) b.authtoken = tok;
    const dom = this.domain.value.trim();
    if (dom) b.domain = dom;
    return b;
  }

  private setBusy(on: boolean, what: string): void {
    this.busy = on;
    this.startBtn.disabled = on;
    this.forgetBtn.disabled = on;
    if (on) {
      this.checkBtn.disabled = this.stopBtn.disabled = true;
      this.result.textContent = what;
    } else this.render(this.t);
  }

  private async start(): Promise<void> {
    if (this.busy) return;
    this.clearErrors();
    const body = this.body();
    if (body.kind === 'external' && !body.url) {
      this.setError('url', 'Enter the tunnel’s public origin, e.g. https://desk.example.net.');
      this.url.focus();
      return;
    }
    if (body.kind === 'ngrok' && !body.authtoken && !this.t?.config.authtoken_set) {
      this.setError('authtoken', 'Paste your ngrok authtoken (ngrok dashboard → Your Authtoken).');
      this.authtoken.focus();
      return;
    }
    this.setBusy(true, 'Starting the tunnel…');
    try {
      const res = await this.actions.tunnelCall('POST', '/api/tunnel', body);
      if (res.status !== 200) return this.apiProblem(res, String(body.kind) as TunnelKind);
      this.fill(true);
      this.result.textContent = 'Saved and started: the state above follows it.';
    } catch (e) {
      this.result.textContent = `Not started: ${e instanceof Error ? e.message : String(e)}`;
    } finally {
      this.setBusy(false, '');
    }
  }

  private apiProblem(res: ApiResponse<unknown>, kind: TunnelKind): void {
    const b = res.body as { error?: unknown; message?: unknown } | null;
    const code = b && typeof b.error === 'string' ? b.error : '';
    const message = b && typeof b.message === 'string' ? b.message : '';
    const field = code ? tunnelErrorField(code, message, kind) : null;
    if (field) {
      this.setError(field, plainError(code, message));
      this.result.textContent = 'Not started: see the highlighted field.';
      this.inputOf(field)?.focus();
    } else {
      this.result.textContent = `Not started: ${this.actions.errorText(res)}`;
      describeError(this.result, res);
    }
  }

  private async run(method: string, path: string, body: unknown, what: string, done: string): Promise<void> {
    if (this.busy) return;
    this.setBusy(true, what);
    try {
      const res = await this.actions.tunnelCall(method, path, body);
      if (res.status !== 200) {
        this.result.textContent = `Failed: ${this.actions.errorText(res)}`;
        describeError(this.result, res);
        return;
      }
      if (method === 'DELETE' && path === '/api/tunnel') this.clearErrors();
      this.result.textContent = done;
    } catch (e) {
      this.result.textContent = `Failed: ${e instanceof Error ? e.message : String(e)}`;
    } finally {
      this.setBusy(false, '');
    }
  }
}
