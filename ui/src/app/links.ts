// The application shell, part links: hearing the call, the assistant link and the callback tunnel: their calls, polls and chips.
// (The shell is one class in layers: base.ts → data.ts → links.ts → actions.ts → view.ts → bar.ts → ../app.ts.)

import { statusClass, statusLabel } from '../assistant';
import { apiError } from '../audio';
import { h } from '../dom';
import { errorText } from '../errors';
import { needsFirstRun } from '../firstrun';
import { tunnelChip } from '../tunnel';
import { tunnelActive } from '../store';
import type { ApiResponse } from '../transport';
import { callMode } from '../live/callview';
import { ASSISTANT_POLL_MS, TUNNEL_POLL_MS, TUNNEL_FAST_POLL_MS } from './base';
import { AppData } from './data';

export abstract class AppLinks extends AppData {

  // ---- hearing the call ------------------------------------------------------------------------

  /** Reads `GET /api/audio` into the store (a build that cannot hear: why, from its 503). */
  protected async refreshAudio(): Promise<ApiResponse<unknown> | null> {
    const epoch = this.audioEpoch;
    const seq = this.store.audioStatusSeq;
    const res = await this.api<unknown>('GET', '/api/audio').catch(() => null);
    if (!res || epoch !== this.audioEpoch) return res;
    if (res.status === 200) this.store.setAudio(res.body, seq);
    else if (res.status === 503) this.store.setAudioUnavailable(apiError(res).message || 'The app cannot hear calls here.');
    return res;
  }

  /** Settings → Audio's requests to `/api/audio`; a `200` goes to the store. */
  async audioCall(method: string, path: string, body?: unknown): Promise<ApiResponse<unknown>> {
    if (method === 'GET' && path === '/api/audio') {
      const res = await this.refreshAudio();
      if (!res) throw new Error('the app did not answer');
      return res;
    }
    this.audioEpoch++;
    const seq = this.store.audioStatusSeq;
    const res = await this.api<unknown>(method, path, body);
    if (res.status === 200 && path === '/api/audio') this.store.setAudio(res.body, seq);
    return res;
  }

  /** The call bar's Listen toggle: `POST` / `DELETE /api/calls/{id}/listen`, then the status again. */
  protected async setListening(on: boolean): Promise<void> {
    const sid = this.activeId;
    if (!sid) return;
    this.hideBarError();
    this.audioEpoch++;
    try {
      const res = await this.api<unknown>(on ? 'POST' : 'DELETE', `/api/calls/${encodeURIComponent(sid)}/listen`);
      if (res.status !== 200) this.showBarError(`Could not ${on ? 'start' : 'stop'} listening: ${errorText(res)}`, res);
    } catch (e) {
      this.showBarError(`Could not ${on ? 'start' : 'stop'} listening: ${e instanceof Error ? e.message : String(e)}`);
    }
    await this.refreshAudio();
  }

  /** The Listen controls follow the open call while it is live. */
  protected renderListen(): void {
    const s = this.activeId ? this.store.sessions.get(this.activeId) : undefined;
    const live = !!s && s.is_call && !s.ended_at;
    this.listen.render(live ? s.session_id : null, this.store.audio, this.store.audioUnavailable);
    this.listen.levels(this.store.levels, this.store.audio);
  }

  // ---- the assistant link ------------------------------------------------------------------

  /** A change to the link (`PUT` / `DELETE /api/assistant`, `POST …/check`); its answer goes to the store. */
  async assistantCall(method: string, path: string, body?: unknown): Promise<ApiResponse<unknown>> {
    this.assistantEpoch++;
    this.assistantBusy++;
    try {
      const c0 = this.store.cursor;
      const res = await this.api<unknown>(method, path, body);
      if (res.status === 200) this.store.setAssistant(res.body, c0);
      return res;
    } finally {
      this.assistantBusy--;
      this.assistantEpoch++;
      this.scheduleAssistantPoll();
    }
  }

  protected async pollAssistant(): Promise<void> {
    if (this.assistantBusy) return;
    const epoch = this.assistantEpoch;
    this.assistantPolledAt = Date.now();
    try {
      const c0 = this.store.cursor;
      const res = await this.api<unknown>('GET', '/api/assistant');
      if (res.status !== 200 || this.assistantBusy || epoch !== this.assistantEpoch) return;
      this.store.setAssistant(res.body, c0);
    } catch {
      /* the next poll tries again */
    }
  }

  /**
   * Reads the link's view `delay` ms from now (then keeps polling while Settings is open); without
   * `delay`, only keeps the Settings poll going.
   */
  protected scheduleAssistantPoll(delay?: number): void {
    clearTimeout(this.assistantTimer);
    let wait = delay;
    if (wait === undefined) {
      if (this.tab !== 'settings') return;
      wait = Math.max(0, this.assistantPolledAt + ASSISTANT_POLL_MS - Date.now());
    }
    this.assistantTimer = setTimeout(async () => {
      if (document.visibilityState !== 'hidden') await this.pollAssistant();
      this.scheduleAssistantPoll();
    }, wait);
  }

  // ---- the callback tunnel -----------------------------------------------------------------

  /** A change to the tunnel (`POST` / `DELETE /api/tunnel`, `…/check`, `…/authtoken`); its answer goes to the store. */
  async tunnelCall(method: string, path: string, body?: unknown): Promise<ApiResponse<unknown>> {
    this.tunnelEpoch++;
    this.tunnelBusy++;
    try {
      const res = await this.api<unknown>(method, path, body);
      if (res.status === 200) this.store.setTunnel(res.body);
      return res;
    } finally {
      this.tunnelBusy--;
      this.tunnelEpoch++;
      this.tunnelPolledAt = Date.now();
      this.scheduleTunnelPoll();
    }
  }

  protected async pollTunnel(): Promise<void> {
    if (this.tunnelBusy) return;
    const epoch = this.tunnelEpoch;
    this.tunnelPolledAt = Date.now();
    try {
      const res = await this.api<unknown>('GET', '/api/tunnel');
      if (res.status !== 200 || this.tunnelBusy || epoch !== this.tunnelEpoch) return;
      this.store.setTunnel(res.body);
    } catch {
      /* the next poll tries again */
    }
  }

  /**
   * Reads the tunnel `delay` ms from now; without `delay`, keeps polling while Settings is open or
   * a tunnel is configured (every 5 s; every second while it is connecting).
   */
  protected scheduleTunnelPoll(delay?: number): void {
    clearTimeout(this.tunnelTimer);
    let wait = delay;
    if (wait === undefined) {
      const t = this.store.tunnel;
      if (this.tab !== 'settings' && !tunnelActive(t)) return;
      const every = t?.state === 'connecting' ? TUNNEL_FAST_POLL_MS : TUNNEL_POLL_MS;
      wait = Math.max(0, this.tunnelPolledAt + every - Date.now());
    }
    this.tunnelTimer = setTimeout(async () => {
      if (document.visibilityState !== 'hidden') await this.pollTunnel();
      this.scheduleTunnelPoll();
    }, wait);
  }

  protected renderTunnelChip(): void {
    const c = tunnelChip(this.store.tunnel);
    this.tunnelChip.textContent = c.text;
    // No tunnel set up: nothing to say on the first screen (Settings → Tunnel has it).
    this.tunnelChip.hidden = c.state === 'off' && !this.store.tunnel?.kind;
    this.tunnelChip.className = `chip chip-button ${c.cls}`;
    this.tunnelChip.dataset.state = c.state;
    this.tunnelChip.title = c.title;
    this.tunnelChip.setAttribute('aria-label', `${c.text}. ${c.title.split('\n')[0]} Open the tunnel settings.`);
  }

  /**
   * Everything that depends on whether an assistant is connected at all: the first-run guide,
   * the chat's notice, the empty Insights tab's sentence.
   */
  protected renderFirstRun(): void {
    const a = this.store.assistant;
    // During a call the Call tab needs the room: the guide waits (the chips and the chat say it).
    const inCall = this.tab === 'call' && callMode(this.activeSession()) !== 'none';
    this.firstRun.render(a, !!this.store.audio, this.tab === 'settings' || inCall);
    const none = needsFirstRun(a);
    this.chat.setNotice(none ? this.noAssistantNotice('chat') : null);
    if (none !== this.noAssistantShown) {
      this.noAssistantShown = none;
      this.bindActive();
    }
  }

  /** "No assistant is connected: … [Connect an assistant]" (the chat's notice). */
  protected noAssistantNotice(where: string): HTMLElement {
    const btn = h('button', { class: 'btn btn-small', type: 'button', id: `${where}-connect` }, 'Connect an assistant');
    btn.addEventListener('click', () => this.openAssistantSettings());
    return h(
      'div',
      { class: 'no-assistant', id: `${where}-no-assistant`, role: 'status' },
      h('span', null, 'No assistant is connected: nothing will answer. What you send waits here and goes out once you connect one.'),
      btn,
    );
  }

  protected renderAssistantChip(): void {
    const a = this.store.assistant;
    const status = a?.status ?? 'not_configured';
    const label = status === 'not_configured' ? 'not configured' : statusLabel(status).toLowerCase();
    this.assistantChip.textContent = `Assistant: ${label}`;
    this.assistantChip.className = `chip chip-button ${statusClass(status)}`;
    this.assistantChip.dataset.status = status;
    this.assistantChip.title = `${a?.detail || (a ? '' : 'No assistant is linked yet.')}\n(Settings → Assistant link)`.trim();
    this.assistantChip.setAttribute('aria-label', `Assistant: ${label}. ${a?.detail ?? ''} Open the assistant settings.`.trim());
  }
}
