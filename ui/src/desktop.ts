// What only the desktop app has: the overlay window's commands, and the "Desktop" card of Settings
// (the overlay's global shortcut, the overlay at call start, system notifications per kind). The
// settings live in the app's data folder (`settings.json`, through `invoke('desktop_prefs')` and
// `invoke('set_desktop_prefs')`); the browser mode has none of this and opens the overlay route
// in a popup instead.

import { plainError } from './errors';
import { h } from './dom';
import type { OverlayChrome } from './overlay';

export interface DesktopPrefs {
  overlay_shortcut: string;
  overlay_on_call_start: boolean;
  notify_insights: boolean;
  notify_errors: boolean;
  notify_permissions: boolean;
}

export type Invoke = <T>(cmd: string, args?: Record<string, unknown>) => Promise<T>;

/** The route of the compact overlay. */
export const OVERLAY_QUERY = 'view=overlay';

export function isOverlayRoute(loc: Pick<Location, 'search'> = location): boolean {
  return new URLSearchParams(loc.search).get('view') === 'overlay';
}

/** The overlay page's address next to the current page (the token travels in sessionStorage). */
export function overlayUrl(loc: Pick<Location, 'pathname'> = location): string {
  return `${loc.pathname}?${OVERLAY_QUERY}`;
}

/** The call bar's "Overlay" button: the desktop overlay window, or a browser popup. */
export function toggleOverlay(invoke: Invoke | null, open: (url: string) => unknown = (u) => window.open(u, 'stagewhisper-overlay', 'popup,width=380,height=460')): void {
  if (invoke) void invoke('overlay_toggle').catch(() => undefined);
  else open(overlayUrl());
}

/** The overlay window's label (the shell's `desktop::OVERLAY`). */
export const OVERLAY_LABEL = 'overlay';

export function overlayChrome(invoke: Invoke | null): OverlayChrome {
  if (invoke) {
    return {
      draggable: true,
      openMain: () => void invoke('main_focus').catch(() => undefined),
      close: () => void invoke('overlay_hide').catch(() => undefined),
      // The window manager resizes the window while the button is held (Tauri's window API).
      startResize: () => void invoke('plugin:window|start_resize_dragging', { label: OVERLAY_LABEL, value: 'SouthEast' }).catch(() => undefined),
    };
  }
  return {
    draggable: false,
    openMain: () => {
      if (window.opener && !window.opener.closed) window.opener.focus();
      else window.open(location.pathname, 'stagewhisper');
    },
    close: () => window.close(),
  };
}

/** A refusal of `set_desktop_prefs` (`{error, message}`), as a sentence. */
export function prefsError(e: unknown): string {
  if (e && typeof e === 'object' && 'error' in e) {
    const x = e as { error: unknown; message?: unknown };
    return plainError(String(x.error), typeof x.message === 'string' ? x.message : '');
  }
  return e instanceof Error ? e.message : String(e);
}

export class DesktopSettings {
  readonly card: HTMLFieldSetElement;
  private shortcut: HTMLInputElement;
  private boxes: Record<Exclude<keyof DesktopPrefs, 'overlay_shortcut'>, HTMLInputElement>;
  private status = h('div', { class: 'setting-status', id: 'desktop-status', role: 'status', 'aria-live': 'polite' });
  private prefs: DesktopPrefs | null = null;

  constructor(private invoke: Invoke) {
    this.shortcut = h('input', { class: 'field-input', id: 'setting-overlay-shortcut', type: 'text', spellcheck: 'false', autocomplete: 'off', placeholder: 'Ctrl+Shift+Space', 'aria-label': 'Overlay shortcut' });
    const box = (id: string) => h('input', { type: 'checkbox', id });
    this.boxes = {
      overlay_on_call_start: box('setting-overlay-auto'),
      notify_insights: box('setting-notify-insights'),
      notify_errors: box('setting-notify-errors'),
      notify_permissions: box('setting-notify-permissions'),
    };
    const save = h('button', { class: 'btn btn-small', type: 'button', id: 'save-overlay-shortcut' }, 'Save');
    save.addEventListener('click', () => void this.save());
    this.shortcut.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') void this.save();
    });
    for (const b of Object.values(this.boxes)) b.addEventListener('change', () => void this.save());
    const check = (input: HTMLInputElement, label: string) => h('label', { class: 'setting-check' }, input, ' ', label);
    const row = (label: string, ...field: HTMLElement[]) =>
      h('div', { class: 'setting-row' }, h('div', { class: 'setting-label' }, label), h('div', { class: 'setting-field' }, ...field));
    this.card = h(
      'fieldset',
      { class: 'card', id: 'settings-desktop' },
      h('legend', null, 'Desktop'),
      row('Overlay shortcut', this.shortcut, save),
      row('Overlay', check(this.boxes.overlay_on_call_start, 'Open the overlay when a call starts')),
      row(
        'Notifications',
        h(
          'div',
          { class: 'setting-checks' },
          check(this.boxes.notify_insights, 'New insights'),
          check(this.boxes.notify_errors, 'Assistant errors and undelivered messages'),
          check(this.boxes.notify_permissions, 'Permission requests'),
        ),
      ),
      h('p', { class: 'setting-note' }, 'Notifications come only while no StageWhisper window has the focus, and not while the desktop is in Do-Not-Disturb. An empty shortcut switches it off.'),
      this.status,
    );
  }

  async load(): Promise<void> {
    try {
      this.prefs = await this.invoke<DesktopPrefs>('desktop_prefs');
      this.paint();
    } catch (e) {
      this.status.textContent = `Could not load the desktop settings: ${prefsError(e)}`;
    }
  }

  private paint(): void {
    const p = this.prefs;
    if (!p) return;
    this.shortcut.value = p.overlay_shortcut;
    for (const [k, b] of Object.entries(this.boxes)) b.checked = p[k as keyof typeof this.boxes];
  }

  private async save(): Promise<void> {
    if (!this.prefs) return;
    const next: DesktopPrefs = { ...this.prefs, overlay_shortcut: this.shortcut.value.trim() };
    for (const [k, b] of Object.entries(this.boxes)) next[k as keyof typeof this.boxes] = b.checked;
    try {
      this.prefs = await this.invoke<DesktopPrefs>('set_desktop_prefs', { prefs: next });
      this.status.textContent = 'Saved.';
    } catch (e) {
      this.status.textContent = `Not saved: ${prefsError(e)}`;
    }
    this.paint();
  }
}
