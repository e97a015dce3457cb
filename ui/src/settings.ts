// Settings: the callback address and token (copy, rotate with confirmation), the data folder,
// the assistant link (assistant.ts), hearing the call (audiosettings.ts) and the callback tunnel
// (tunnel.ts).

import { describeError } from './errors';
import { AssistantSettings, type AssistantActions } from './assistant';
import { AudioSettings, type AudioSettingsActions } from './audiosettings';
import { copyButton, h } from './dom';
import type { ApiResponse } from './transport';
import { TunnelSettings, type TunnelActions } from './tunnel';
import type { Settings, Tunnel } from './types';

export interface SettingsActions extends AssistantActions, AudioSettingsActions, Omit<TunnelActions, 'rotateToken'> {
  api<T>(method: string, path: string, body?: unknown): Promise<ApiResponse<T>>;
  errorText(res: ApiResponse<unknown>): string;
}

export class SettingsView {
  readonly panel: HTMLElement;
  private settings: Settings | null = null;
  private urlEl = h('code', { class: 'setting-value', id: 'setting-callback-url' });
  private tokenEl = h('code', { class: 'setting-value setting-secret', id: 'setting-callback-token' });
  private dataDirEl = h('code', { class: 'setting-value', id: 'setting-data-dir' });
  private timersEl = h('span', { class: 'setting-note' });
  private revealBtn: HTMLButtonElement;
  private rotateBtn: HTMLButtonElement;
  private confirmBox: HTMLElement;
  private status: HTMLElement;
  private revealed = false;
  readonly assistant: AssistantSettings;
  readonly tunnel: TunnelSettings;
  readonly audio: AudioSettings;

  constructor(private actions: SettingsActions) {
    this.assistant = new AssistantSettings(actions);
    this.audio = new AudioSettings(actions);
    this.tunnel = new TunnelSettings({ ...actions, rotateToken: () => this.askRotate(true) });
    this.revealBtn = h('button', { class: 'btn btn-small', type: 'button', 'aria-pressed': 'false' }, 'Show');
    this.revealBtn.addEventListener('click', () => {
      this.revealed = !this.revealed;
      this.revealBtn.setAttribute('aria-pressed', String(this.revealed));
      this.revealBtn.textContent = this.revealed ? 'Hide' : 'Show';
      this.paint();
    });
    this.rotateBtn = h('button', { class: 'btn btn-small btn-danger', type: 'button', 'aria-expanded': 'false' }, 'Rotate…');
    const confirmBtn = h('button', { class: 'btn btn-danger', type: 'button', id: 'confirm-rotate' }, 'Rotate token');
    const cancelBtn = h('button', { class: 'btn', type: 'button' }, 'Cancel');
    this.confirmBox = h(
      'div',
      { class: 'confirm', role: 'group', 'aria-label': 'Confirm token rotation', hidden: true },
      h('p', null, 'Rotate the callback token? The current token stops working at once: your assistant must be given the new one before it can post again.'),
      h('div', { class: 'confirm-actions' }, confirmBtn, cancelBtn),
    );
    this.status = h('div', { class: 'setting-status', role: 'status', 'aria-live': 'polite' });
    this.rotateBtn.addEventListener('click', () => this.askRotate(true));
    cancelBtn.addEventListener('click', () => this.askRotate(false));
    this.confirmBox.addEventListener('keydown', (e) => {
      if (e.key === 'Escape') this.askRotate(false);
    });
    confirmBtn.addEventListener('click', () => void this.rotate());

    const row = (label: string, value: HTMLElement, ...buttons: HTMLElement[]) =>
      h('div', { class: 'setting-row' }, h('div', { class: 'setting-label' }, label), h('div', { class: 'setting-field' }, value, ...buttons));

    this.panel = h(
      'section',
      { class: 'panel panel-settings', id: 'panel-settings', role: 'tabpanel', 'aria-labelledby': 'tab-settings', hidden: true },
      h(
        'div',
        { class: 'panel-scroll settings' },
        h('h2', null, 'Settings'),
        this.assistant.card,
        this.audio.card,
        h(
          'fieldset',
          { class: 'card', id: 'settings-callback' },
          h('legend', null, 'Callback (your assistant posts here)'),
          row('Callback URL', this.urlEl, copyButton('callback URL', () => this.settings?.callback_url ?? '')),
          row('Callback token', this.tokenEl, this.revealBtn, copyButton('callback token', () => this.settings?.callback_token ?? ''), this.rotateBtn),
          this.confirmBox,
          this.status,
        ),
        h(
          'fieldset',
          { class: 'card' },
          h('legend', null, 'Storage'),
          row('Data folder', this.dataDirEl, copyButton('data folder', () => this.settings?.data_dir ?? '')),
          h('div', { class: 'setting-row' }, h('div', { class: 'setting-label' }, 'Timers'), h('div', { class: 'setting-field' }, this.timersEl)),
        ),
        this.tunnel.card,
      ),
    );
  }

  /** Adds a card after the others (the desktop app's own settings). */
  addCard(card: HTMLElement): void {
    this.panel.querySelector('.settings')?.append(card);
  }

  async load(): Promise<void> {
    void this.assistant.loadProviders((m, p) => this.actions.api(m, p));
    const res = await this.actions.api<Settings>('GET', '/api/settings');
    if (res.status !== 200) {
      this.status.textContent = `Could not load the settings: ${this.actions.errorText(res)}`;
      describeError(this.status, res);
      return;
    }
    this.settings = res.body;
    this.paint();
  }

  /** The tunnel changed: the advertised callback URL follows it. */
  tunnelChanged(t: Tunnel | null): void {
    this.tunnel.render(t);
    if (this.settings && t?.callback_url && t.callback_url !== this.settings.callback_url) {
      this.settings.callback_url = t.callback_url;
      this.paint();
    }
  }

  private paint(): void {
    const s = this.settings;
    this.urlEl.textContent = s?.callback_url ?? '…';
    const tok = s?.callback_token ?? '';
    this.tokenEl.textContent = !s ? '…' : this.revealed ? tok : '•'.repeat(Math.min(24, Math.max(8, tok.length)));
    this.tokenEl.dataset.revealed = String(this.revealed);
    this.dataDirEl.textContent = s?.data_dir ?? '…';
    this.timersEl.textContent = s
      ? `typing indicator clears after ${s.typing_timeout_secs} s of silence · insights accepted for ${s.insights_grace_secs} s after a call ends`
      : '';
  }

  private askRotate(open: boolean): void {
    this.confirmBox.hidden = !open;
    this.rotateBtn.setAttribute('aria-expanded', String(open));
    if (open) {
      this.confirmBox.scrollIntoView({ block: 'center', behavior: 'smooth' });
      (this.confirmBox.querySelector('#confirm-rotate') as HTMLButtonElement | null)?.focus();
    }
    else this.rotateBtn.focus();
  }

  private async rotate(): Promise<void> {
    this.status.textContent = 'Rotating…';
    try {
      const res = await this.actions.api<{ callback_token: string }>('POST', '/api/settings/callback-token/rotate');
      if (res.status !== 200 || !res.body?.callback_token) {
        this.status.textContent = `Rotation failed: ${this.actions.errorText(res)}`;
        describeError(this.status, res);
        return;
      }
      if (this.settings) this.settings.callback_token = res.body.callback_token;
      this.revealed = true;
      this.revealBtn.setAttribute('aria-pressed', 'true');
      this.revealBtn.textContent = 'Hide';
      this.paint();
      this.status.textContent = 'New token in place. The old one no longer works: give this one to your assistant.';
      this.askRotate(false);
    } catch (e) {
      this.status.textContent = `Rotation failed: ${e instanceof Error ? e.message : String(e)}`;
    }
  }
}
