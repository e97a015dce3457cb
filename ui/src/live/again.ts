// The call's audio in the Call tab. While the call runs: "Keep this call's audio", the switch
// of this one call (`PUT /api/calls/{id}/recording {keep}`; the default is Settings → Audio),
// with what is kept so far. Once it ended, its review: the kept audio (its size on disk,
// Delete) and "Transcribe again with <model>", which replaces the turns' text in place from
// that audio (speakers and times kept; the assistant is told nothing new). The new texts arrive
// as ordinary `transcript_updated` events; this card only shows the run's progress, read from
// `GET /api/calls/{id}/recording` about once a second while it runs.

import { h } from '../dom';
import { errorText } from '../errors';
import type { ApiResponse } from '../transport';

export type Api = <T>(method: string, path: string, body?: unknown) => Promise<ApiResponse<T>>;

export interface TranscribeRun {
  model: string;
  language: string;
  /** `running`, `done` or `failed`. */
  state: string;
  done: number;
  total: number;
  changed?: number;
  error?: string;
  message?: string;
}

export interface Recording {
  keep: boolean;
  bytes: number;
  turns: number;
  transcribe: TranscribeRun | null;
}

interface ModelRow {
  name: string;
  installed: boolean;
}

/** "1.2 MB", "830 kB", "0 bytes". */
export function sizeText(bytes: number): string {
  if (bytes >= 1_000_000) return `${(bytes / 1_000_000).toFixed(1)} MB`;
  if (bytes >= 1_000) return `${Math.round(bytes / 1_000)} kB`;
  return `${bytes} bytes`;
}

/** What a run says, in plain words. */
export function runText(r: TranscribeRun): string {
  if (r.state === 'running') return `Transcribing again with ${r.model}: ${r.done} of ${r.total} turns…`;
  if (r.state === 'done') {
    const n = r.changed ?? 0;
    return `Transcribed again with ${r.model}: ${n} turn${n === 1 ? '' : 's'} changed.`;
  }
  return `Transcribing again with ${r.model} failed, the turns are as they were: ${r.message ?? r.error ?? 'unknown error'}`;
}

/** How often a running call's kept size is read again while it keeps its audio. */
const LIVE_REFRESH_MS = 5000;

export class AgainCard {
  readonly el = h('section', { class: 'call-again', id: 'call-again', 'aria-label': "The call's audio", hidden: true });
  private callId: string | null = null;
  private live = false;
  private timer: number | undefined;
  private note = h('p', { class: 'setting-note', id: 'call-again-note' });
  private status = h('p', { class: 'setting-note', id: 'call-again-status', role: 'status', 'aria-live': 'polite' });

  constructor(private api: Api) {}

  /** Shows the card for a call, `live` while it runs (`null`: hides it). */
  show(callId: string | null, live = false): void {
    if (callId === this.callId && live === this.live) return;
    this.callId = callId;
    this.live = live;
    this.el.dataset.live = String(live);
    window.clearTimeout(this.timer);
    this.el.hidden = !callId;
    this.el.replaceChildren();
    if (callId) void this.refresh();
  }

  private async refresh(): Promise<void> {
    const id = this.callId;
    if (!id) return;
    const rec = await this.api<Recording>('GET', `/api/calls/${encodeURIComponent(id)}/recording`);
    if (id !== this.callId) return;
    if (rec.status !== 200) {
      this.el.hidden = true;
      return;
    }
    if (this.live) {
      this.renderLive(id, rec.body);
      // What is kept grows with each turn heard.
      if (rec.body.keep) this.timer = window.setTimeout(() => void this.refresh(), LIVE_REFRESH_MS);
      return;
    }
    const models = rec.body.keep ? await this.api<{ models: ModelRow[] }>('GET', '/api/models') : null;
    if (id !== this.callId) return;
    const installed = (models?.status === 200 ? models.body.models : []).filter((m) => m.installed).map((m) => m.name);
    this.render(id, rec.body, installed);
    if (rec.body.transcribe?.state === 'running') this.timer = window.setTimeout(() => void this.refresh(), 1000);
  }

  /** The running call's switch and what it has kept so far. */
  private renderLive(id: string, rec: Recording): void {
    const box = h('input', { type: 'checkbox', id: 'call-keep-audio', 'aria-describedby': 'call-again-note' });
    box.checked = rec.keep;
    box.addEventListener('change', () => void this.setKeep(id, box));
    this.note.textContent = rec.keep
      ? `Kept so far: ${sizeText(rec.bytes)} (${rec.turns} turn${rec.turns === 1 ? '' : 's'}).`
      : 'Not kept. Turning it on keeps what is heard from now on; turning it off deletes what was kept.';
    this.el.replaceChildren(
      h('label', { class: 'call-keep', for: 'call-keep-audio' }, box, h('span', null, "Keep this call's audio, to transcribe it again later with another model")),
      this.note,
      this.status,
    );
  }

  private async setKeep(id: string, box: HTMLInputElement): Promise<void> {
    box.disabled = true;
    const res = await this.api<Recording>('PUT', `/api/calls/${encodeURIComponent(id)}/recording`, { keep: box.checked });
    box.disabled = false;
    if (res.status !== 200) {
      box.checked = !box.checked;
      this.status.textContent = `Could not change it: ${errorText(res)}`;
      return;
    }
    this.status.textContent = '';
    window.clearTimeout(this.timer);
    void this.refresh();
  }

  private render(id: string, rec: Recording, models: string[]): void {
    const head = h('h2', { class: 'call-again-title' }, "The call's audio");
    this.note.textContent = rec.keep
      ? `Kept on this computer for "Transcribe again": ${sizeText(rec.bytes)} (${rec.turns} turn${rec.turns === 1 ? '' : 's'}).`
      : 'Not kept. Turn on "Keep the call\'s audio" in Settings → Audio to transcribe calls again later with another model.';
    this.status.textContent = rec.transcribe ? runText(rec.transcribe) : '';
    const running = rec.transcribe?.state === 'running';
    const actions: HTMLElement[] = [];
    if (rec.keep && rec.turns > 0 && models.length > 0) {
      const select = h('select', { id: 'call-again-model', 'aria-label': 'Model' }, ...models.map((m) => h('option', { value: m }, m)));
      const go = h('button', { class: 'btn btn-small', type: 'button', id: 'call-again-go' }, `Transcribe again with ${models[0]}`);
      select.addEventListener('change', () => (go.textContent = `Transcribe again with ${select.value}`));
      go.disabled = running;
      go.addEventListener('click', () => void this.start(id, select.value, go));
      actions.push(select, go);
    } else if (rec.keep && rec.turns > 0) {
      actions.push(h('span', { class: 'setting-note' }, 'Install a Whisper model (Settings → Audio → Model) to transcribe again.'));
    }
    if (rec.keep) {
      const del = h('button', { class: 'btn btn-small', type: 'button', id: 'call-again-delete' }, 'Delete the kept audio');
      del.disabled = running;
      del.addEventListener('click', () => void this.forget(id, del));
      actions.push(del);
    }
    this.el.replaceChildren(head, this.note, h('div', { class: 'call-again-actions' }, ...actions), this.status);
  }

  private async start(id: string, model: string, btn: HTMLButtonElement): Promise<void> {
    btn.disabled = true;
    const res = await this.api<TranscribeRun>('POST', `/api/calls/${encodeURIComponent(id)}/transcribe`, { model });
    if (res.status !== 202) {
      btn.disabled = false;
      this.status.textContent = `Could not transcribe again: ${errorText(res)}`;
      return;
    }
    this.status.textContent = runText(res.body);
    window.clearTimeout(this.timer);
    this.timer = window.setTimeout(() => void this.refresh(), 500);
  }

  private async forget(id: string, btn: HTMLButtonElement): Promise<void> {
    btn.disabled = true;
    const res = await this.api<Recording>('PUT', `/api/calls/${encodeURIComponent(id)}/recording`, { keep: false });
    if (res.status !== 200) {
      btn.disabled = false;
      this.status.textContent = `Could not delete the audio: ${errorText(res)}`;
      return;
    }
    void this.refresh();
  }
}
