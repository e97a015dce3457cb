// Settings → Audio → Model: the speech models a person chooses. The list of known models (size,
// languages, expected accuracy and speed, installed or not), Download with a progress bar and
// Cancel, "Use a file I have" (a path on this computer: a browser cannot hand over a path),
// Delete, and the disk the models use. Nothing is downloaded without a click.
//
// The list is `GET /api/models`, read when Settings opens and after each change; a download's
// progress comes as live-only `model_download` events (`onEvent`), which patch the row in place.

import { errorText, describeError } from '../errors';
import { h } from '../dom';
import type { ApiResponse } from '../transport';
import type { SwEvent } from '../types';

export interface ModelsActions {
  api<T>(method: string, path: string, body?: unknown): Promise<ApiResponse<T>>;
  /** Makes an installed model the speech engine (`PUT /api/audio`, whose answer the app keeps). */
  useModel?(name: string): Promise<ApiResponse<unknown>>;
}

export interface ModelDownload {
  state: string;
  done: number;
  total: number;
  error?: string;
  message?: string;
}

export interface ModelInfo {
  name: string;
  file: string;
  size: number;
  languages: string;
  wer_percent?: number;
  accuracy: string;
  speed: string;
  recommended: boolean;
  known: boolean;
  installed: boolean;
  path?: string;
  size_on_disk: number;
  download?: ModelDownload;
}

export interface ModelList {
  models_dir: string;
  disk_used: number;
  models: ModelInfo[];
}

/** `74.1 MB` (decimal units, as file managers show them). */
export function formatBytes(n: number): string {
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)} GB`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(1)} MB`;
  if (n >= 1e3) return `${Math.round(n / 1e3)} kB`;
  return `${n} B`;
}

/** What a download's state says to a person. */
export function downloadText(d: ModelDownload | undefined): string {
  if (!d) return '';
  const pct = d.total > 0 ? Math.floor((d.done * 100) / d.total) : 0;
  switch (d.state) {
    case 'downloading':
      return `Downloading… ${formatBytes(d.done)} of ${formatBytes(d.total)} (${pct} %)`;
    case 'verifying':
      return 'Checking the file…';
    case 'done':
      return 'Downloaded and checked.';
    case 'cancelled':
      return 'Download cancelled.';
    case 'paused':
      return `Download stopped at ${pct} %: Download resumes it.`;
    case 'failed':
      return `Download failed: ${d.message ?? d.error ?? 'unknown error'}`;
    default:
      return '';
  }
}

const RUNNING = new Set(['downloading', 'verifying']);

/** Reads a `GET /api/models` answer (null when it is not one). */
export function normModels(body: unknown): ModelList | null {
  const b = body as ModelList | null;
  if (!b || typeof b !== 'object' || !Array.isArray(b.models) || typeof b.disk_used !== 'number') return null;
  return b;
}

export class ModelSettings {
  readonly el: HTMLElement;
  private list: ModelList | null = null;
  private rows = h('ul', { class: 'model-list', id: 'model-list', 'aria-label': 'Speech models' });
  private used = h('p', { class: 'setting-note', id: 'model-disk-used' });
  private status = h('div', { class: 'setting-status', id: 'model-status', role: 'status', 'aria-live': 'polite' });
  private importPath: HTMLInputElement;
  private importName: HTMLInputElement;
  private importBtn: HTMLButtonElement;
  private importResult = h('div', { class: 'setting-status', id: 'model-import-result', role: 'status', 'aria-live': 'polite' });

  constructor(private actions: ModelsActions) {
    this.importPath = h('input', { class: 'field-input', id: 'model-import-path', type: 'text', placeholder: '/home/you/Downloads/ggml-base.en.bin', autocomplete: 'off', spellcheck: 'false' });
    this.importName = h('input', { class: 'field-input', id: 'model-import-name', type: 'text', placeholder: 'name (optional)', maxlength: '64', autocomplete: 'off', spellcheck: 'false' });
    this.importBtn = h('button', { class: 'btn', type: 'submit', id: 'model-import' }, 'Use this file');
    const importForm = h(
      'form',
      { class: 'model-import', id: 'model-import-form', novalidate: true, 'aria-label': 'Use a model file I have' },
      h('label', { class: 'setting-label', for: 'model-import-path' }, 'Use a file I have'),
      h('div', { class: 'inline-field' }, this.importPath, this.importName, this.importBtn),
      h('div', { class: 'setting-note' }, 'The full path of a whisper.cpp model file (ggml-….bin) on this computer. It is checked, then copied into the models folder.'),
      this.importResult,
    );
    importForm.addEventListener('submit', (e) => {
      e.preventDefault();
      void this.import();
    });
    this.el = h(
      'div',
      { class: 'setting-row setting-row-top', id: 'settings-models' },
      h('div', { class: 'setting-label', id: 'model-label' }, 'Model'),
      h(
        'div',
        { class: 'setting-field setting-field-col' },
        h('p', { class: 'setting-note' }, 'Whisper models recognise speech on this computer, far better than the built-in engine. They are downloaded only when you press Download, from the whisper.cpp model repository, and checked before use.'),
        this.rows,
        this.used,
        this.status,
        importForm,
      ),
    );
  }

  /** Settings is on screen: read the list. */
  setVisible(on: boolean): void {
    if (on) void this.load();
  }

  async load(): Promise<void> {
    const res = await this.actions.api<unknown>('GET', '/api/models').catch(() => null);
    const l = res && res.status === 200 ? normModels(res.body) : null;
    if (l) {
      this.list = l;
      this.status.textContent = '';
    } else if (res) {
      this.status.textContent = errorText(res);
      describeError(this.status, res);
    }
    this.paint();
  }

  /** A live-only event: a `model_download` patches its row. */
  onEvent(ev: SwEvent): void {
    if (ev.type !== 'model_download' || typeof ev.name !== 'string') return;
    const d: ModelDownload = {
      state: String(ev.state ?? ''),
      done: Number(ev.done ?? 0),
      total: Number(ev.total ?? 0),
      error: typeof ev.error === 'string' ? ev.error : undefined,
      message: typeof ev.message === 'string' ? ev.message : undefined,
    };
    const m = this.list?.models.find((x) => x.name === ev.name);
    if (m) {
      m.download = d;
      this.paintRow(m);
    }
    // The end changes what is installed and the disk used: read the list again.
    if (!RUNNING.has(d.state)) void this.load();
  }

  private paint(): void {
    const l = this.list;
    if (!l) return;
    const items = l.models.map((m) => this.row(m));
    this.rows.replaceChildren(...items);
    this.used.textContent = `Models use ${formatBytes(l.disk_used)} in ${l.models_dir}.`;
  }

  private paintRow(m: ModelInfo): void {
    const old = this.rows.querySelector(`[data-model="${CSS.escape(m.name)}"]`);
    if (old) old.replaceWith(this.row(m));
  }

  private row(m: ModelInfo): HTMLElement {
    const d = m.download;
    const running = !!d && RUNNING.has(d.state);
    const id = `model-${m.name.replace(/[^A-Za-z0-9_-]/g, '_')}`;
    const lang = m.languages === 'en' ? 'English' : 'Many languages';
    const title = h('span', { class: 'model-name' }, m.name);
    const facts = h('span', { class: 'model-facts' }, ` · ${formatBytes(m.size)} · ${lang}`);
    const chips: HTMLElement[] = [];
    if (m.recommended) chips.push(h('span', { class: 'chip chip-ok' }, 'Recommended'));
    if (m.installed) chips.push(h('span', { class: 'chip chip-muted model-installed' }, 'Installed'));
    if (!m.known) chips.push(h('span', { class: 'chip chip-muted' }, 'Imported'));
    const actions = h('span', { class: 'model-actions' });
    if (running) {
      const cancel = h('button', { class: 'btn btn-small', type: 'button', id: `${id}-cancel` }, 'Cancel');
      cancel.addEventListener('click', () => void this.cancel(m.name));
      actions.append(cancel);
    } else if (m.installed) {
      if (this.actions.useModel) {
        const use = h('button', { class: 'btn btn-small btn-primary', type: 'button', id: `${id}-use`, 'aria-label': `Use ${m.name} to recognise speech` }, 'Use');
        use.addEventListener('click', () => void this.use(m.name));
        actions.append(use);
      }
      const del = h('button', { class: 'btn btn-small btn-danger', type: 'button', id: `${id}-delete`, 'aria-label': `Delete ${m.name}` }, 'Delete');
      del.addEventListener('click', () => void this.remove(m.name));
      actions.append(del);
    } else if (m.known) {
      const dl = h('button', { class: 'btn btn-small', type: 'button', id: `${id}-download`, 'aria-label': `Download ${m.name}` }, d && d.state === 'paused' ? 'Resume' : 'Download');
      dl.addEventListener('click', () => void this.download(m.name));
      actions.append(dl);
      if (d && (d.state === 'paused' || d.state === 'failed') && m.size_on_disk > 0) {
        const discard = h('button', { class: 'btn btn-small', type: 'button', id: `${id}-discard` }, 'Discard');
        discard.addEventListener('click', () => void this.remove(m.name));
        actions.append(discard);
      }
    }
    const progress = h('progress', { class: 'model-progress', id: `${id}-progress`, max: String(d?.total || m.size), 'aria-label': `${m.name} download` });
    progress.value = d?.done ?? 0;
    progress.hidden = !running;
    const state = h('div', { class: 'setting-note model-state', id: `${id}-state`, role: running ? null : 'status' }, downloadText(m.installed && d?.state === 'done' ? d : m.installed ? undefined : d));
    if (d?.error) state.dataset.errorCode = d.error;
    const li = h(
      'li',
      { class: 'model-row', id, 'data-model': m.name, 'data-installed': String(m.installed), 'data-state': d?.state ?? '' },
      h('div', { class: 'model-head' }, title, facts, ...chips, actions),
      h('div', { class: 'setting-note model-accuracy' }, m.accuracy),
      h('div', { class: 'setting-note model-speed' }, m.speed),
      m.path ? h('div', { class: 'setting-note model-path' }, h('code', null, m.path)) : null,
      progress,
      state,
    );
    return li;
  }

  private async call(method: string, path: string, body?: unknown): Promise<ApiResponse<unknown> | null> {
    const res = await this.actions.api<unknown>(method, path, body).catch(() => null);
    if (!res) this.status.textContent = 'The app did not answer. Try again.';
    else if (res.status >= 400) {
      this.status.textContent = errorText(res);
      describeError(this.status, res);
    } else {
      this.status.textContent = '';
      describeError(this.status, null);
    }
    return res;
  }

  async download(name: string): Promise<void> {
    const res = await this.call('POST', `/api/models/${encodeURIComponent(name)}/download`);
    const m = this.list?.models.find((x) => x.name === name);
    if (res && res.status === 202 && m) {
      m.download = res.body as ModelDownload;
      this.paintRow(m);
    }
  }

  /** The installed model becomes the engine (Whisper, the language found per turn). */
  private async use(name: string): Promise<void> {
    const res = await this.actions.useModel?.(name).catch(() => null);
    if (!res) this.status.textContent = 'The app did not answer. Try again.';
    else if (res.status !== 200) {
      this.status.textContent = errorText(res);
      describeError(this.status, res);
    } else {
      this.status.textContent = `Speech is now recognised by Whisper ${name}, on this computer.`;
      describeError(this.status, null);
    }
  }

  private async cancel(name: string): Promise<void> {
    await this.call('DELETE', `/api/models/${encodeURIComponent(name)}/download`);
    await this.load();
  }

  private async remove(name: string): Promise<void> {
    await this.call('DELETE', `/api/models/${encodeURIComponent(name)}`);
    await this.load();
  }

  private async import(): Promise<void> {
    const path = this.importPath.value.trim();
    if (!path) {
      this.importResult.textContent = 'Give the model file’s full path.';
      return;
    }
    const name = this.importName.value.trim();
    this.importBtn.disabled = true;
    this.importResult.textContent = 'Checking and copying…';
    const res = await this.actions.api<unknown>('POST', '/api/models/import', name ? { path, name } : { path }).catch(() => null);
    this.importBtn.disabled = false;
    if (res && res.status === 201) {
      const m = res.body as ModelInfo;
      this.importResult.textContent = `Added as ${m.name}.`;
      describeError(this.importResult, null);
      this.importPath.value = '';
      this.importName.value = '';
    } else {
      this.importResult.textContent = res ? errorText(res) : 'The app did not answer. Try again.';
      describeError(this.importResult, res);
    }
    await this.load();
  }
}

/**
 * The first-run guide's offer: the recommended model (tiny.en-q8_0 in the built-in catalogue) with one click. Hidden once it is
 * installed; the download's progress is in Settings → Audio → Model.
 */
export class RecommendedModel {
  readonly el: HTMLElement;
  private btn: HTMLButtonElement;
  private note = h('span', { class: 'setting-note', id: 'first-run-model-state', role: 'status', 'aria-live': 'polite' });
  private name: string | null = null;
  private checked = false;

  constructor(private actions: ModelsActions) {
    this.btn = h('button', { class: 'btn', type: 'button', id: 'first-run-model' }, 'Download the speech model');
    this.btn.addEventListener('click', () => void this.download());
    this.el = h('p', { class: 'first-run-model', id: 'first-run-model-offer', hidden: true }, this.btn, ' ', this.note);
  }

  /** Reads the list once (the guide is on screen). */
  async refresh(): Promise<void> {
    if (this.checked) return;
    this.checked = true;
    const res = await this.actions.api<unknown>('GET', '/api/models').catch(() => null);
    const l = res && res.status === 200 ? normModels(res.body) : null;
    const m = l?.models.find((x) => x.recommended);
    if (!m || m.installed) return;
    this.name = m.name;
    this.btn.textContent = `Download the recommended speech model (${m.name}, ${formatBytes(m.size)})`;
    this.note.textContent = 'Whisper hears far better than the built-in engine; nothing is downloaded until you press this.';
    this.el.hidden = false;
  }

  private async download(): Promise<void> {
    if (!this.name) return;
    this.btn.disabled = true;
    const res = await this.actions.api<unknown>('POST', `/api/models/${encodeURIComponent(this.name)}/download`).catch(() => null);
    if (res && (res.status === 202 || (res.status === 409 && errorCode(res) === 'download_in_progress'))) {
      this.note.textContent = 'Downloading… Its progress is in Settings → Audio → Model.';
    } else if (res && res.status === 409 && errorCode(res) === 'already_installed') {
      this.note.textContent = 'It is installed already.';
    } else {
      this.btn.disabled = false;
      this.note.textContent = res ? errorText(res) : 'The app did not answer. Try again.';
      describeError(this.note, res);
    }
  }
}

function errorCode(res: ApiResponse<unknown>): string {
  const b = res.body as { error?: unknown } | null;
  return b && typeof b.error === 'string' ? b.error : '';
}
