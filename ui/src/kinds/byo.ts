// The `byo` assistant kind in the UI (Settings → Assistant): the assistant's plugin pairs with
// this app and takes its jobs from the relay API the app serves, end-to-end encrypted.
// - "Create pairing code": the one-use code with a countdown, both pair commands (Hermes,
//   OpenClaw) with Copy buttons, and for OpenClaw 2026.9.x (whose pair CLI crashes) the config
//   block to paste;
// - the pairing result, status, model, the capability profile with Refresh, Test connection and
//   Unpair.
// Everything shown comes from the `GET /api/assistant` view (the store keeps the raw view in
// `extra`) and from the pairing answer.

import { describeError } from '../errors';
import { copyText, h } from '../dom';
import type { ApiResponse } from '../transport';
import type { Assistant } from '../types';

export const BYO_KIND = 'byo';

export interface ByoActions {
  assistantCall(method: string, path: string, body?: unknown): Promise<ApiResponse<unknown>>;
  errorText(res: ApiResponse<unknown>): string;
}

/** `POST /api/assistant/pairing`. */
export interface Pairing {
  code: string;
  expires_at: string;
  api_url: string;
  command: string;
  commands: { hermes: string; openclaw: string };
}

/** The byo-only fields of the view. */
export interface ByoView {
  status: string;
  integration_id: string | null;
  host_label: string | null;
  provider_kind: string | null;
  display_model: string | null;
  last_heartbeat_at: string | null;
  capabilities: Record<string, unknown> | null;
  last_test: { state?: string; content?: string } | null;
}

const str = (v: unknown): string | null => (typeof v === 'string' ? v : null);
const obj = (v: unknown): Record<string, unknown> | null => (v && typeof v === 'object' && !Array.isArray(v) ? (v as Record<string, unknown>) : null);

export function byoView(a: Assistant | null): ByoView | null {
  if (!a || a.kind !== BYO_KIND) return null;
  const raw = (a.extra ?? {}) as Record<string, unknown>;
  const t = obj(raw.last_test);
  return {
    status: String(a.status ?? ''),
    integration_id: str(raw.integration_id),
    host_label: str(raw.host_label),
    provider_kind: str(raw.provider_kind),
    display_model: str(raw.display_model),
    last_heartbeat_at: str(raw.last_heartbeat_at),
    capabilities: obj(raw.capabilities),
    last_test: t ? { state: str(t.state) ?? undefined, content: str(t.content) ?? undefined } : null,
  };
}

/** `m:ss` left until `expiresAt` (`0:00` once past). */
export function countdown(expiresAt: string, nowMs: number): string {
  const left = Math.max(0, Math.floor((Date.parse(expiresAt) - nowMs) / 1000));
  return `${Math.floor(left / 60)}:${String(left % 60).padStart(2, '0')}`;
}

/**
 * The OpenClaw 2026.9.x configuration to paste by hand (its pair CLI crashes after pairing):
 * the relay in `sse` transport, the responses endpoint on, `default` as the only agent (2026.9.6
 * retired `systemAgent`: its doctor drops it at every start, so the block does not carry it). The
 * integration id, relay token and keys come from a pairing the plugin completed; until then the
 * block names where they go.
 */
export function openclawConfig(p: Pairing): string {
  return JSON.stringify(
    {
      gateway: { http: { endpoints: { responses: { enabled: true } } } },
      agents: { entries: { default: {} } },
      plugins: { entries: { stagewhisper: { config: { transport: 'sse' } } } },
      channels: {
        stagewhisper: {
          apiBaseUrl: p.api_url,
          integrationId: '<integration_id from pair/complete>',
          relayToken: '<relay_token from pair/complete>',
          desktopPublicKey: '<byo_public_key from pair/complete>',
          pluginSecretKey: '<the plugin’s X25519 secret>',
        },
      },
    },
    null,
    2,
  );
}

/** One line of the capability profile. */
export function profileText(c: Record<string, unknown> | null): string {
  if (!c) return 'Not reported yet.';
  const d = str(c.raw_description);
  return d ?? JSON.stringify(c);
}

/** Settings → Assistant for the `byo` kind. */
export class ByoSettings {
  readonly el: HTMLElement;
  private pairBtn = h('button', { class: 'btn btn-primary', type: 'button', id: 'byo-pair' }, 'Create pairing code');
  private codeCard = h('div', { class: 'pairing-card', id: 'byo-code-card', role: 'group', 'aria-label': 'Pairing code', hidden: true });
  private code = h('code', { class: 'setting-value pairing-code', id: 'byo-code' });
  private left = h('span', { class: 'setting-note', id: 'byo-countdown', 'aria-live': 'off' });
  private hermesCmd = h('code', { class: 'setting-value', id: 'byo-command-hermes' });
  private openclawCmd = h('code', { class: 'setting-value', id: 'byo-command-openclaw' });
  private config = h('pre', { class: 'setting-value', id: 'byo-openclaw-config' });
  private paired = h('div', { class: 'assistant-info', id: 'byo-paired', role: 'group', 'aria-label': 'The paired assistant', hidden: true });
  private host = h('span', { id: 'byo-host' });
  private model = h('span', { id: 'byo-model' });
  private heartbeat = h('span', { id: 'byo-heartbeat' });
  private profile = h('span', { id: 'byo-profile' });
  private test = h('span', { id: 'byo-test' });
  private result = h('div', { class: 'setting-status', id: 'byo-result', role: 'status', 'aria-live': 'polite' });
  private pairing: Pairing | null = null;
  private timer: ReturnType<typeof setInterval> | null = null;
  private wasPaired: string | null = null;
  private activeKind: string | null = null;

  constructor(
    private actions: ByoActions,
    private now: () => number = () => Date.now(),
  ) {
    this.pairBtn.addEventListener('click', () => void this.createCode());
    const copy = (id: string, what: () => string, label: string) => {
      const b = h('button', { class: 'btn btn-small', type: 'button', id, 'aria-label': label }, 'Copy');
      b.addEventListener('click', async () => {
        const ok = await copyText(what());
        b.textContent = ok ? 'Copied' : 'Copy failed';
        setTimeout(() => (b.textContent = 'Copy'), 1500);
      });
      return b;
    };
    this.codeCard.append(
      h('p', { class: 'pairing-title' }, 'Pair your assistant'),
      h('div', { class: 'inline-field' }, this.code, this.left),
      h('p', { class: 'setting-note' }, 'Hermes Agent (BYO relay plugin): run this on the assistant’s computer, then start hermes gateway run.'),
      h('div', { class: 'inline-field' }, this.hermesCmd, copy('byo-copy-hermes', () => this.pairing?.commands.hermes ?? '', 'Copy the Hermes pair command')),
      h('p', { class: 'setting-note' }, 'OpenClaw (StageWhisper channel, sse transport):'),
      h('div', { class: 'inline-field' }, this.openclawCmd, copy('byo-copy-openclaw', () => this.pairing?.commands.openclaw ?? '', 'Copy the OpenClaw pair command')),
      h(
        'details',
        { id: 'byo-openclaw-2026-9' },
        h('summary', null, 'OpenClaw 2026.9.x: the pair command crashes — paste this config instead'),
        this.config,
        copy('byo-copy-config', () => (this.pairing ? openclawConfig(this.pairing) : ''), 'Copy the OpenClaw config block'),
      ),
    );
    const info = (label: string, value: HTMLElement, ...extra: HTMLElement[]) =>
      h('div', { class: 'info-row' }, h('span', { class: 'info-label' }, label), value, ...extra);
    const refresh = h('button', { class: 'btn btn-small', type: 'button', id: 'byo-refresh' }, 'Refresh');
    refresh.addEventListener('click', () => void this.call('POST', '/api/assistant/byo/probe', 'Asked the assistant to describe itself again.'));
    const testBtn = h('button', { class: 'btn btn-small', type: 'button', id: 'byo-test-btn' }, 'Test connection');
    testBtn.addEventListener('click', () => void this.call('POST', '/api/assistant/byo/test', 'Test sent; the answer shows here.'));
    const unpair = h('button', { class: 'btn btn-small btn-danger', type: 'button', id: 'byo-unpair' }, 'Unpair');
    unpair.addEventListener('click', () => void this.call('DELETE', '/api/assistant', 'Unpaired: the assistant can no longer reach this app.'));
    this.paired.append(
      info('Paired with', this.host),
      info('Model', this.model),
      info('Last heartbeat', this.heartbeat),
      info('Capabilities', this.profile, refresh),
      info('Connection test', this.test, testBtn),
      h('div', { class: 'form-actions' }, unpair),
    );
    this.el = h(
      'div',
      { class: 'byo-settings', id: 'byo-settings', hidden: true },
      h('p', { class: 'setting-note' }, 'Your assistant’s plugin pairs with this app and fetches its work from it; transcripts and chats are end-to-end encrypted, so nothing in between (a tunnel included) can read them.'),
      h('div', { class: 'form-actions' }, this.pairBtn),
      this.codeCard,
      this.paired,
      this.result,
    );
  }

  /** Shows what the store has. */
  render(a: Assistant | null): void {
    this.activeKind = a?.kind ?? null;
    const v = byoView(a);
    const id = v?.integration_id ?? null;
    this.paired.hidden = !id;
    if (id && this.wasPaired !== id && this.pairing) {
      // The plugin completed the pairing: the code is used up.
      this.stopCountdown();
      this.pairing = null;
      this.codeCard.hidden = true;
      this.result.textContent = `Paired with ${v?.host_label ?? 'the assistant'} (${v?.provider_kind ?? 'plugin'}).`;
    }
    this.wasPaired = id;
    this.pairBtn.textContent = id ? 'Pair another assistant' : 'Create pairing code';
    this.host.textContent = v ? `${v.host_label ?? '—'}${v.provider_kind ? ` (${v.provider_kind})` : ''}` : '';
    this.model.textContent = v?.display_model ?? '—';
    this.heartbeat.textContent = v?.last_heartbeat_at ?? 'none yet';
    this.profile.textContent = profileText(v?.capabilities ?? null);
    const t = v?.last_test;
    this.test.textContent = !t ? 'Not run.' : t.state === 'ok' ? `OK — ${t.content ?? ''}` : 'Waiting for the answer…';
  }

  /** Shows a pairing answer (the code, the countdown, both commands, the config block). */
  showPairing(p: Pairing): void {
    this.pairing = p;
    this.code.textContent = p.code;
    this.hermesCmd.textContent = p.commands.hermes;
    this.openclawCmd.textContent = p.commands.openclaw;
    this.config.textContent = openclawConfig(p);
    this.codeCard.hidden = false;
    this.tick();
    this.stopCountdown();
    this.timer = setInterval(() => this.tick(), 1000);
  }

  private tick(): void {
    if (!this.pairing) return;
    const left = countdown(this.pairing.expires_at, this.now());
    this.left.textContent = left === '0:00' ? 'expired — create a new code' : `valid for ${left}`;
    if (left === '0:00') this.stopCountdown();
  }

  private stopCountdown(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
  }

  private async createCode(): Promise<void> {
    this.pairBtn.disabled = true;
    try {
      // The relay routes are served while this kind is the active one.
      if (this.activeKind !== BYO_KIND) {
        const sw = await this.actions.assistantCall('PUT', '/api/assistant', { kind: BYO_KIND });
        if (sw.status !== 200) {
          this.result.textContent = `Not switched: ${this.actions.errorText(sw)}`;
          describeError(this.result, sw);
          return;
        }
      }
      const res = await this.actions.assistantCall('POST', '/api/assistant/pairing');
      if (res.status === 201 && res.body) {
        this.showPairing(res.body as Pairing);
        this.result.textContent = '';
      } else {
        this.result.textContent = `No code: ${this.actions.errorText(res)}`;
        describeError(this.result, res);
      }
    } catch (e) {
      this.result.textContent = `No code: ${e instanceof Error ? e.message : String(e)}`;
    } finally {
      this.pairBtn.disabled = false;
    }
  }

  private async call(method: string, path: string, done: string): Promise<void> {
    try {
      const res = await this.actions.assistantCall(method, path);
      this.result.textContent = res.status < 300 ? done : `Failed: ${this.actions.errorText(res)}`;
      describeError(this.result, res);
    } catch (e) {
      this.result.textContent = `Failed: ${e instanceof Error ? e.message : String(e)}`;
    }
  }
}
