import './styles.css';
import './overlay.css';
import './live/live.css';
import { App } from './app';
import { overlayChrome, isOverlayRoute } from './desktop';
import { h } from './dom';
import { Overlay } from './overlay';
import { forgetUiToken, HttpTransport, isTauri, storeUiToken, takeUiToken, TauriTransport } from './transport';

/** The "how to connect" form shown when the page has no (valid) UI token. */
function tokenForm(reason: string): HTMLElement {
  const input = h('input', {
    class: 'token-input',
    type: 'password',
    autocomplete: 'off',
    spellcheck: 'false',
    'aria-label': 'UI token',
    placeholder: 'ui_token',
  });
  const form = h(
    'form',
    { class: 'token-form' },
    h('h1', null, 'Connect to StageWhisper'),
    h('p', null, reason),
    h(
      'p',
      null,
      'Open the address printed by ',
      h('code', null, 'stagewhisper --headless'),
      ' as ',
      h('code', null, 'ui_url#token=<ui_token>'),
      ', or paste the ',
      h('code', null, 'ui_token'),
      ' here:',
    ),
    h('div', { class: 'token-row' }, input, h('button', { class: 'btn btn-primary', type: 'submit' }, 'Connect')),
  );
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const v = input.value.trim();
    if (!v) return;
    storeUiToken(v);
    location.reload();
  });
  return form;
}

function boot(): void {
  const mount = document.getElementById('app');
  if (!mount) return;
  const overlay = isOverlayRoute();
  if (isTauri()) {
    const tauri = window.__TAURI__!;
    if (overlay) {
      void new Overlay(mount, new TauriTransport(tauri), overlayChrome((c, a) => tauri.core.invoke(c, a))).start();
      return;
    }
    const app = new App(mount, new TauriTransport(tauri));
    void app.start();
    return;
  }
  const token = takeUiToken();
  if (!token) {
    mount.replaceChildren(h('div', { class: 'token-screen' }, tokenForm('This page needs the UI token of the running app.')));
    return;
  }
  if (overlay) {
    void new Overlay(mount, new HttpTransport(token), overlayChrome(null)).start();
    return;
  }
  const app = new App(mount, new HttpTransport(token), () => {
    forgetUiToken();
    return tokenForm('The UI token was not accepted (the app may have been restarted with a new one).');
  });
  void app.start();
}

boot();
