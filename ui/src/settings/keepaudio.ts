// Settings → Audio → "Keep the call's audio": new calls keep what was heard, as lossless FLAC in
// the data dir, for "Transcribe again" on the call's review (`PUT /api/audio {"keep_audio"}`;
// off by default). One call can still be switched on its own (`PUT /api/calls/{id}/recording`).

import { h } from '../dom';
import type { AudioSettingsActions } from '../audiosettings/actions';

/** `GET /api/audio`'s `keep_audio`; null if absent. */
export function normKeepAudio(raw: unknown): boolean | null {
  if (typeof raw !== 'object' || raw === null) return null;
  const k = (raw as Record<string, unknown>).keep_audio;
  return typeof k === 'boolean' ? k : null;
}

export class KeepAudioSetting {
  readonly el: HTMLElement;
  private box = h('input', { type: 'checkbox', id: 'audio-keep-audio' });
  private result = h('div', { class: 'setting-status', id: 'audio-keep-audio-result', role: 'status', 'aria-live': 'polite' });

  constructor(private actions: AudioSettingsActions) {
    this.box.addEventListener('change', () => void this.save(this.box.checked));
    this.el = h(
      'div',
      { class: 'setting-row setting-row-top', id: 'audio-keep' },
      h('div', { class: 'setting-label' }, 'Call audio'),
      h(
        'div',
        { class: 'setting-field setting-field-col' },
        h('label', { class: 'mode-option', for: 'audio-keep-audio' }, this.box, h('span', null, 'Keep the call’s audio on this computer, to transcribe it again later with another model')),
        h('p', { class: 'setting-note' }, 'Off: nothing of the sound is written. On: each turn heard is kept (lossless, about 1 MB per minute of speech) until you delete it or the call.'),
        this.result,
      ),
    );
  }

  /** Shows the setting of `GET /api/audio`'s answer. */
  show(audio: unknown): void {
    const k = normKeepAudio(audio);
    if (k !== null) this.box.checked = k;
  }

  private async save(keep: boolean): Promise<void> {
    this.result.textContent = 'Saving…';
    const res = await this.actions.audioCall('PUT', '/api/audio', { keep_audio: keep }).catch(() => null);
    if (!res || res.status !== 200) {
      this.result.textContent = `Not saved: ${res ? this.actions.errorText(res) : 'no answer'}`;
      this.box.checked = !keep;
      return;
    }
    this.result.textContent = keep ? 'New calls keep their audio.' : 'New calls keep nothing.';
  }
}
