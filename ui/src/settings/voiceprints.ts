// Settings → Audio → "Who said it" → the people known by voice: the voiceprints kept when a
// speaker is renamed (`GET /api/voiceprints`), each with a Forget button
// (`DELETE /api/voiceprints/{id}`). A voiceprint is numbers computed from the voice, never audio,
// and never leaves this computer; forgetting it means the next calls no longer name that voice.

import { h } from '../dom';
import type { ApiResponse } from '../transport';

interface Voiceprint {
  id: string;
  name: string;
  speech_seconds: number;
}

export interface VoiceprintActions {
  api<T>(method: string, path: string, body?: unknown): Promise<ApiResponse<T>>;
  errorText(res: ApiResponse<unknown>): string;
}

/** `GET /api/voiceprints`'s entries; malformed ones are skipped. */
export function normVoiceprints(raw: unknown): Voiceprint[] {
  if (!Array.isArray(raw)) return [];
  return raw.flatMap((v) => {
    if (typeof v !== 'object' || v === null) return [];
    const o = v as Record<string, unknown>;
    if (typeof o.id !== 'string' || typeof o.name !== 'string') return [];
    return [{ id: o.id, name: o.name, speech_seconds: typeof o.speech_seconds === 'number' ? o.speech_seconds : 0 }];
  });
}

export class VoiceprintList {
  readonly el: HTMLElement;
  private list = h('ul', { class: 'voiceprint-list', id: 'voiceprints', 'aria-label': 'People known by voice' });
  private note = h('p', { class: 'setting-note', id: 'voiceprints-note' });
  private result = h('div', { class: 'setting-status', id: 'voiceprints-result', role: 'status', 'aria-live': 'polite' });

  constructor(private actions: VoiceprintActions) {
    this.el = h('div', { class: 'voiceprints' }, h('div', { class: 'setting-sublabel' }, 'Known voices'), this.note, this.list, this.result);
  }

  async load(): Promise<void> {
    const res = await this.actions.api<unknown>('GET', '/api/voiceprints').catch(() => null);
    if (!res || res.status !== 200) {
      this.note.textContent = `The known voices cannot be shown: ${res ? this.actions.errorText(res) : 'no answer'}`;
      return;
    }
    this.paint(normVoiceprints(res.body));
  }

  private paint(people: Voiceprint[]): void {
    this.note.textContent = people.length
      ? 'Named in earlier calls, recognised in the next ones (kept on this computer as numbers, never audio).'
      : 'Rename a speaker in a call’s transcript and their voice is recognised in the next calls.';
    this.list.replaceChildren(
      ...people.map((p) => {
        const forget = h('button', { class: 'btn btn-small btn-quiet-danger', type: 'button', 'aria-label': `Forget ${p.name}’s voice` }, 'Forget');
        forget.addEventListener('click', () => void this.forget(p, forget));
        return h(
          'li',
          { 'data-id': p.id },
          h('span', { class: 'voiceprint-name' }, p.name),
          h('span', { class: 'setting-note' }, `${Math.round(p.speech_seconds)} s of speech`),
          forget,
        );
      }),
    );
  }

  private async forget(p: Voiceprint, btn: HTMLButtonElement): Promise<void> {
    btn.disabled = true;
    const res = await this.actions.api<unknown>('DELETE', `/api/voiceprints/${encodeURIComponent(p.id)}`).catch(() => null);
    if (!res || (res.status !== 200 && res.status !== 404)) {
      btn.disabled = false;
      this.result.textContent = `Not forgotten: ${res ? this.actions.errorText(res) : 'no answer'}`;
      return;
    }
    this.result.textContent = `${p.name}’s voice is forgotten.`;
    await this.load();
  }
}
