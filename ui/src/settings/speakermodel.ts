// Settings → Audio → "Who said it" → the speaker model: whether it is on this computer, its
// download from its public source (sherpa-onnx's release of 3D-Speaker's CAM++, with its size; the
// app checks the pinned SHA-256 before it uses the file) with progress and Cancel, or "Use a file I
// have". All through the model shelf (`GET /api/models`' `speakers`, `POST
// /api/models/speakers/download`, `POST /api/models/import {"path", "name": "speakers"}`).
// While a download runs, the list is read again every second; once the model is in place the
// audio settings are read again, which say whether speaker separation can run.

import { h } from '../dom';
import type { ApiResponse } from '../transport';
import { downloadText, formatBytes, type ModelInfo } from './models';

export interface SpeakerModelActions {
  api<T>(method: string, path: string, body?: unknown): Promise<ApiResponse<T>>;
  errorText(res: ApiResponse<unknown>): string;
  /** The model arrived or left: the audio settings are read again. */
  changed(): void;
}

const RUNNING = new Set(['downloading', 'verifying']);

/** `GET /api/models`' `speakers` (null when absent or malformed). */
export function normSpeakerModel(body: unknown): ModelInfo | null {
  const s = (body as { speakers?: unknown } | null)?.speakers as ModelInfo | undefined;
  if (!s || typeof s !== 'object' || typeof s.installed !== 'boolean' || typeof s.size !== 'number') return null;
  return s;
}

export class SpeakerModelRow {
  readonly el: HTMLElement;
  private state = h('p', { class: 'setting-note', id: 'speaker-model-state' });
  private download = h('button', { class: 'btn btn-small', type: 'button', id: 'speaker-model-download' }, 'Download');
  private cancel = h('button', { class: 'btn btn-small btn-quiet', type: 'button', id: 'speaker-model-cancel', hidden: true }, 'Cancel');
  private progress = h('progress', { id: 'speaker-model-progress', max: '100', value: '0', hidden: true });
  private path = h('input', { class: 'field-input', id: 'speaker-model-path', type: 'text', placeholder: '/home/you/Downloads/campplus.onnx', autocomplete: 'off', spellcheck: 'false', 'aria-label': 'Speaker model file on this computer' });
  private result = h('div', { class: 'setting-status', id: 'speaker-model-result', role: 'status', 'aria-live': 'polite' });
  private form: HTMLFormElement;
  private polling: number | null = null;

  constructor(private actions: SpeakerModelActions) {
    this.download.addEventListener('click', () => void this.start());
    this.cancel.addEventListener('click', () => void this.stop());
    this.form = h('form', { class: 'inline-field', id: 'speaker-model-import', novalidate: true, 'aria-label': 'Use a speaker model file I have' }, this.path, h('button', { class: 'btn btn-small', type: 'submit' }, 'Use this file'));
    this.form.addEventListener('submit', (e) => {
      e.preventDefault();
      void this.importFile();
    });
    this.el = h('div', { class: 'speaker-model', id: 'speaker-model' }, h('div', { class: 'setting-sublabel' }, 'Speaker model'), this.state, h('div', { class: 'inline-field' }, this.download, this.cancel, this.progress), this.form, this.result);
  }

  async load(): Promise<void> {
    const res = await this.actions.api<unknown>('GET', '/api/models').catch(() => null);
    const m = res && res.status === 200 ? normSpeakerModel(res.body) : null;
    if (!m) {
      this.state.textContent = res && res.status !== 200 ? `The speaker model cannot be shown: ${this.actions.errorText(res)}` : 'The speaker model cannot be shown.';
      this.download.hidden = this.form.hidden = true;
      return;
    }
    this.paint(m);
  }

  private paint(m: ModelInfo): void {
    const running = !!m.download && RUNNING.has(m.download.state);
    this.state.textContent = m.installed
      ? `Installed: ${m.path ?? m.file}.`
      : `Not on this computer. Download it (${formatBytes(m.size)}, 3D-Speaker’s CAM++ from sherpa-onnx’s public release; its SHA-256 is checked) or use a file you have.`;
    this.download.hidden = m.installed || running;
    this.cancel.hidden = !running;
    this.form.hidden = m.installed || running;
    this.progress.hidden = !running;
    if (m.download) {
      const d = m.download;
      this.progress.value = d.total > 0 ? Math.floor((d.done * 100) / d.total) : 0;
      this.result.textContent = downloadText(d);
    }
    if (running && this.polling === null) {
      this.polling = window.setInterval(() => void this.load(), 1000);
    } else if (!running && this.polling !== null) {
      window.clearInterval(this.polling);
      this.polling = null;
      this.actions.changed();
    }
  }

  private async start(): Promise<void> {
    this.download.disabled = true;
    const res = await this.actions.api<unknown>('POST', '/api/models/speakers/download').catch(() => null);
    this.download.disabled = false;
    if (!res || res.status >= 300) {
      this.result.textContent = `Not started: ${res ? this.actions.errorText(res) : 'no answer'}`;
      return;
    }
    await this.load();
  }

  private async stop(): Promise<void> {
    await this.actions.api<unknown>('DELETE', '/api/models/speakers/download').catch(() => null);
    await this.load();
  }

  private async importFile(): Promise<void> {
    const path = this.path.value.trim();
    if (!path) return;
    this.result.textContent = 'Copying…';
    const res = await this.actions.api<unknown>('POST', '/api/models/import', { path, name: 'speakers' }).catch(() => null);
    if (!res || res.status >= 300) {
      this.result.textContent = `Not used: ${res ? this.actions.errorText(res) : 'no answer'}`;
      return;
    }
    this.result.textContent = 'The speaker model is in place.';
    this.path.value = '';
    await this.load();
    this.actions.changed();
  }
}
