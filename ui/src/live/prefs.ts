// The browser's own overlay preference: the desktop app opens its overlay window when a call
// starts (Settings → Desktop); in a browser, Start call opens the overlay popup, unless this
// browser was told not to (kept in its local storage, like "Start listening when I start a call").

import { h } from '../dom';

const KEY = 'stagewhisper.overlay_on_start';

function storage(): Storage | null {
  try {
    return typeof localStorage === 'undefined' ? null : localStorage;
  } catch {
    return null;
  }
}

/** Whether Start call opens the overlay popup (on unless turned off). */
export function overlayOnStart(s: Storage | null = storage()): boolean {
  try {
    return s?.getItem(KEY) !== 'off';
  } catch {
    return true;
  }
}

export function setOverlayOnStart(on: boolean, s: Storage | null = storage()): void {
  try {
    s?.setItem(KEY, on ? 'on' : 'off');
  } catch {
    /* storage disabled: the choice lasts for this page */
  }
}

/** Settings' "Overlay" card in a browser (the desktop app has its Desktop card instead). */
export function overlayPrefsCard(): HTMLElement {
  const box = h('input', { type: 'checkbox', id: 'setting-overlay-browser-auto' });
  box.checked = overlayOnStart();
  box.addEventListener('change', () => setOverlayOnStart(box.checked));
  return h(
    'fieldset',
    { class: 'card', id: 'settings-overlay' },
    h('legend', null, 'Overlay'),
    h(
      'div',
      { class: 'setting-row' },
      h('div', { class: 'setting-label' }, 'Overlay'),
      h(
        'div',
        { class: 'setting-field' },
        h('label', { class: 'setting-check' }, box, ' ', 'Open the overlay when I start a call (a small window that stays with the latest insights and answers)'),
        h('p', { class: 'setting-note' }, 'If the browser blocks the window, allow pop-ups for this page or use the call bar’s Overlay button.'),
      ),
    ),
  );
}
