// Settings → Audio → "Who said it": telling the call's speakers apart by voice (`PUT /api/audio
// {"speakers": {"enabled"}}`), and whether it can run on this computer (`GET /api/audio`'s
// `speakers.available` / `detail`: the speaker model in the data dir and the ONNX Runtime library).

import { h } from './dom';
import type { AudioSettingsActions } from './audiosettings/actions';
import { VoiceprintList } from './settings/voiceprints';
import { SpeakerModelRow } from './settings/speakermodel';

interface SpeakersView {
  enabled: boolean;
  available: boolean;
  detail: string;
}

/** `GET /api/audio`'s `speakers`; null if absent or malformed. */
export function normSpeakers(raw: unknown): SpeakersView | null {
  if (typeof raw !== 'object' || raw === null) return null;
  const s = (raw as Record<string, unknown>).speakers;
  if (typeof s !== 'object' || s === null) return null;
  const o = s as Record<string, unknown>;
  if (typeof o.enabled !== 'boolean' || typeof o.available !== 'boolean') return null;
  return { enabled: o.enabled, available: o.available, detail: typeof o.detail === 'string' ? o.detail : '' };
}

/** How often the availability is asked again while the settings are shown (ms). */

export class SpeakersSetting {
  readonly el: HTMLElement;
  private box = h('input', { type: 'checkbox', id: 'audio-speakers-enabled' });
  private chip = h('span', { class: 'chip chip-muted', id: 'audio-speakers-state' }, '…');
  private detail = h('p', { class: 'setting-note', id: 'audio-speakers-detail' });
  private result = h('div', { class: 'setting-status', id: 'audio-speakers-result', role: 'status', 'aria-live': 'polite' });
  private voiceprints: VoiceprintList;
  private model: SpeakerModelRow;
  private listedAt = 0;

  constructor(private actions: AudioSettingsActions) {
    this.voiceprints = new VoiceprintList(actions);
    this.model = new SpeakerModelRow({ ...actions, changed: () => void actions.audioCall('GET', '/api/audio').then((r) => this.show(r.body)).catch(() => undefined) });
    this.box.setAttribute('aria-describedby', 'audio-speakers-detail');
    this.box.addEventListener('change', () => void this.save(this.box.checked));
    this.el = h(
      'div',
      { class: 'setting-row setting-row-top', id: 'audio-speakers' },
      h('div', { class: 'setting-label' }, 'Who said it'),
      h(
        'div',
        { class: 'setting-field setting-field-col' },
        h('label', { class: 'mode-option', for: 'audio-speakers-enabled' }, this.box, h('span', null, 'Tell the call’s speakers apart (Speaker 1, Speaker 2, …), on this computer')),
        h('div', null, this.chip),
        this.detail,
        this.result,
        this.model.el,
        this.voiceprints.el,
      ),
    );
  }

  /** Shows the setting of `GET /api/audio`'s answer, which Settings → Audio already holds. */
  show(audio: unknown): void {
    this.paint(normSpeakers(audio));
    // The audio view is shown again on every status change: the list is asked at most every 5 s.
    if (Date.now() - this.listedAt > 5000) {
      this.listedAt = Date.now();
      void this.voiceprints.load();
      void this.model.load();
    }
  }

  private paint(v: SpeakersView | null): void {
    if (!v) {
      this.chip.textContent = 'unknown';
      this.detail.textContent = '';
      return;
    }
    this.box.checked = v.enabled;
    this.chip.textContent = v.available ? 'available' : 'not available';
    this.chip.className = `chip ${v.available ? 'chip-ok' : 'chip-muted'}`;
    this.detail.textContent = v.available
      ? v.detail
      : `${v.detail}. Without it, the call’s voices stay “Them”.`;
  }

  private async save(enabled: boolean): Promise<void> {
    this.result.textContent = 'Saving…';
    const res = await this.actions.audioCall('PUT', '/api/audio', { speakers: { enabled } }).catch(() => null);
    if (!res || res.status !== 200) {
      this.result.textContent = `Not saved: ${res ? this.actions.errorText(res) : 'no answer'}`;
      this.box.checked = !enabled;
      return;
    }
    this.result.textContent = enabled ? 'On.' : 'Off.';
    this.paint(normSpeakers(res.body));
  }
}
