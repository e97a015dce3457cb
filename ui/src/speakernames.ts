// Who said it, named: a speaker's name in the Transcript tab is a button; pressing it offers a
// field to rename that speaker (`PUT /api/calls/{id}/speakers/{label} {"name"}`). Every turn of
// that speaker in the call follows (the `transcript_updated` events rename them in place), during
// the call and afterwards; the voice is remembered for the next call (Settings → Audio lists the
// voiceprints).

import './speakers.css';
import { h } from './dom';
import { errorText } from './errors';
import type { ApiResponse } from './transport';

type Api = (method: string, path: string, body?: unknown) => Promise<ApiResponse<unknown>>;

/** Renames `label` to `name` in the call `sid`; throws with the reason on failure. */
export async function renameSpeaker(api: Api, sid: string | null, label: string, name: string): Promise<void> {
  if (!sid) throw new Error('No call is open.');
  const path = `/api/calls/${encodeURIComponent(sid)}/speakers/${encodeURIComponent(label)}`;
  const res = await api('PUT', path, { name });
  if (res.status !== 200) throw new Error(`Not renamed: ${errorText(res)}`);
}

/** A turn's speaker: plain text, or a button that renames the speaker when `rename` is given. */
export function speakerName(label: string, rename?: (label: string, name: string) => Promise<void>): HTMLElement {
  if (!rename) return h('span', { class: 'turn-speaker-name' }, label);
  const btn = h('button', { class: 'turn-speaker-name turn-speaker-rename', type: 'button', title: `Rename ${label}`, 'aria-label': `${label}: rename this speaker` }, label);
  btn.addEventListener('click', () => btn.replaceWith(renameForm(label, rename, btn)));
  return btn;
}

/** The inline rename: a field (Enter saves, Escape gives up) and its error, in place of the button. */
function renameForm(label: string, rename: (label: string, name: string) => Promise<void>, btn: HTMLElement): HTMLElement {
  const input = h('input', {
    class: 'field-input speaker-rename-input',
    type: 'text',
    maxlength: '100',
    value: label,
    'aria-label': `New name for ${label}`,
    autocomplete: 'off',
  });
  const save = h('button', { class: 'btn btn-small', type: 'submit' }, 'Rename');
  const cancel = h('button', { class: 'btn btn-small btn-quiet', type: 'button' }, 'Cancel');
  const error = h('span', { class: 'turn-error speaker-rename-error', role: 'alert', hidden: true });
  const form = h('form', { class: 'speaker-rename', 'aria-label': `Rename ${label}` }, input, save, cancel, error);
  const back = (): void => {
    form.replaceWith(btn);
    btn.focus();
  };
  cancel.addEventListener('click', back);
  input.addEventListener('keydown', (e) => {
    if (e.key === 'Escape') back();
  });
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const name = input.value.trim();
    if (!name || name === label) return back();
    save.disabled = true;
    error.hidden = true;
    rename(label, name).then(
      // The turns are renamed by their events: this one is redrawn with the new name.
      () => form.isConnected && form.replaceWith(speakerName(name, rename)),
      (err: unknown) => {
        save.disabled = false;
        error.hidden = false;
        error.textContent = err instanceof Error ? err.message : String(err);
      },
    );
  });
  queueMicrotask(() => {
    input.focus();
    input.select();
  });
  return form;
}
