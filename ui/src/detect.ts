// Noticing the call: the banner that offers to listen when another app takes the microphone
// ("Zoom is using the microphone — Start listening?" with Start / Not now / Never for this app),
// the offer to end a call whose app let go of the microphone, the silence line of the live view
// ("No call audio heard for 1 min — …" with a button to the device choice), and the Settings
// card (the switch, the grace period, the apps never offered).
//
// Reads `GET /api/audio/detection` on each `call_offered` / `call_offer_closed` event (live-only)
// and at start; `audio_silence` carries its own line.

import { h } from './dom';
import type { ApiResponse } from './transport';
import type { SwEvent } from './types';

export interface Offer {
  app: string;
  binary: string | null;
  label: string;
  since: string;
}

export interface EndOffer {
  app: string;
  call_id: string;
  ends_at: string | null;
}

export interface Detection {
  enabled: boolean;
  offers: Offer[];
  ignored_apps: string[];
  end_after_secs: number | null;
  end_offers: EndOffer[];
  status: { state: string; detail: string };
}

/** The apps offered since the page opened: the call's audio may be one of them alone. */
export const seenApps = new Set<string>();

/** `system` of `GET /api/audio` as the source picker holds it: `app:<name>` for one app alone. */
export const APP_PREFIX = 'app:';

/** `system` as answered (a source name, `null`, or `{"app"}`) → the picker's value. */
export function systemValue(raw: unknown): string | null {
  if (typeof raw === 'string') return raw;
  if (raw && typeof raw === 'object' && typeof (raw as { app?: unknown }).app === 'string') return APP_PREFIX + (raw as { app: string }).app;
  return null;
}

/** The picker's value → `system` of `PUT /api/audio`. */
export function systemBody(value: string): unknown {
  if (value === '') return null;
  return value.startsWith(APP_PREFIX) ? { app: value.slice(APP_PREFIX.length) } : value;
}

/** The picker's extra choices for the call's audio: each app's own sound alone. */
export function appOptions(saved: string | null): { value: string; label: string }[] {
  const apps = new Set(seenApps);
  if (saved?.startsWith(APP_PREFIX)) apps.add(saved.slice(APP_PREFIX.length));
  return [...apps].sort().map((a) => ({ value: APP_PREFIX + a, label: `Only ${a}’s sound (not the rest of what plays)` }));
}

export function normDetection(raw: unknown): Detection | null {
  if (!raw || typeof raw !== 'object') return null;
  const r = raw as Record<string, unknown>;
  if (typeof r.enabled !== 'boolean' || !Array.isArray(r.offers)) return null;
  const status = (r.status ?? {}) as Record<string, unknown>;
  return {
    enabled: r.enabled,
    offers: (r.offers as Offer[]).filter((o) => o && typeof o.app === 'string'),
    ignored_apps: Array.isArray(r.ignored_apps) ? r.ignored_apps.filter((a): a is string => typeof a === 'string') : [],
    end_after_secs: typeof r.end_after_secs === 'number' ? r.end_after_secs : null,
    end_offers: Array.isArray(r.end_offers) ? (r.end_offers as EndOffer[]) : [],
    status: { state: String(status.state ?? ''), detail: String(status.detail ?? '') },
  };
}

const cap = (s: string): string => s.charAt(0).toUpperCase() + s.slice(1);

export interface DetectDeps {
  api<T>(method: string, path: string, body?: unknown): Promise<ApiResponse<T>>;
  /** Settings → Audio, at the device choice. */
  openAudioSettings(): void;
  errorText(res: ApiResponse<unknown>): string;
}

export class CallDetection {
  /** The banners: offers, end offers, the silence line. */
  readonly el: HTMLElement;
  /** Settings card. */
  readonly card: HTMLElement;
  private offers: HTMLElement;
  private silence: HTMLElement;
  private result: HTMLElement;
  private d: Detection | null = null;
  private enabled: HTMLInputElement;
  private grace: HTMLSelectElement;
  private ignored: HTMLElement;
  private cardStatus: HTMLElement;

  constructor(private deps: DetectDeps) {
    this.offers = h('div', { id: 'call-offers' });
    const choose = h('button', { class: 'btn btn-small', type: 'button', id: 'audio-silence-choose' }, 'Choose the device');
    choose.addEventListener('click', () => deps.openAudioSettings());
    this.silence = h('div', { class: 'bar-warn', id: 'audio-silence', role: 'status', hidden: true }, h('span', { class: 'audio-silence-text' }), ' ', choose);
    this.result = h('div', { class: 'setting-note', id: 'call-offer-result', role: 'status', hidden: true });
    this.el = h('div', { class: 'call-detection' }, this.offers, this.silence, this.result);

    this.enabled = h('input', { type: 'checkbox', id: 'detect-enabled' });
    this.enabled.addEventListener('change', () => void this.put({ enabled: this.enabled.checked }));
    this.grace = h('select', { class: 'field-input', id: 'detect-grace' });
    for (const [v, label] of [['', 'Ask me'], ['30', 'After 30 s'], ['60', 'After 1 min'], ['300', 'After 5 min']]) this.grace.append(h('option', { value: v }, label));
    this.grace.addEventListener('change', () => void this.put({ end_after_secs: this.grace.value === '' ? null : Number(this.grace.value) }));
    this.ignored = h('ul', { id: 'detect-ignored', class: 'detect-ignored' });
    this.cardStatus = h('div', { class: 'setting-note', id: 'detect-status' });
    this.card = h(
      'section',
      { class: 'card', id: 'detect-card' },
      h('h2', null, 'Noticing calls'),
      h('label', { class: 'inline-field' }, this.enabled, ' Offer to listen when another app (Zoom, Teams, a call in the browser…) takes the microphone'),
      this.cardStatus,
      h('label', { class: 'field-label', for: 'detect-grace' }, 'When the call’s app lets go of the microphone, end the call'),
      this.grace,
      h('div', { class: 'field-label' }, 'Never offered for'),
      this.ignored,
    );
  }

  async load(): Promise<void> {
    const res = await this.deps.api<unknown>('GET', '/api/audio/detection').catch(() => null);
    const d = res && res.status === 200 ? normDetection(res.body) : null;
    this.d = d;
    for (const o of d?.offers ?? []) seenApps.add(o.app);
    this.render();
  }

  /** Every live event (the store's `live` change). */
  onLive(ev: SwEvent): void {
    if (ev.type === 'call_offered' || ev.type === 'call_offer_closed') {
      if (ev.type === 'call_offered' && typeof ev.app === 'string') seenApps.add(ev.app);
      void this.load();
    } else if (ev.type === 'audio_silence') {
      const text = typeof ev.message === 'string' ? ev.message : '';
      this.silence.hidden = !ev.channel || !text;
      (this.silence.querySelector('.audio-silence-text') as HTMLElement).textContent = text;
    }
  }

  private render(): void {
    const d = this.d;
    const rows: HTMLElement[] = [];
    for (const o of d?.offers ?? []) rows.push(this.offerRow(o));
    for (const e of d?.end_offers ?? []) rows.push(this.endRow(e));
    this.offers.replaceChildren(...rows);
    if (!d) {
      this.card.hidden = true;
      return;
    }
    this.card.hidden = false;
    this.enabled.checked = d.enabled;
    this.grace.value = d.end_after_secs === null ? '' : String(d.end_after_secs);
    if (this.grace.value !== (d.end_after_secs === null ? '' : String(d.end_after_secs))) {
      this.grace.append(h('option', { value: String(d.end_after_secs) }, `After ${d.end_after_secs} s`));
      this.grace.value = String(d.end_after_secs);
    }
    this.cardStatus.textContent = d.status.detail;
    this.ignored.replaceChildren(
      ...(d.ignored_apps.length
        ? d.ignored_apps.map((a) => {
            const undo = h('button', { class: 'btn btn-small', type: 'button', 'aria-label': `Offer again for ${a}` }, 'Offer again');
            undo.addEventListener('click', () => void this.put({ ignored_apps: d.ignored_apps.filter((x) => x !== a) }));
            return h('li', { 'data-app': a }, `${a} `, undo);
          })
        : [h('li', { class: 'setting-note' }, 'No app.')]),
    );
  }

  private offerRow(o: Offer): HTMLElement {
    const start = h('button', { class: 'btn btn-primary btn-small', type: 'button', 'data-action': 'start' }, 'Start listening');
    const notNow = h('button', { class: 'btn btn-small', type: 'button', 'data-action': 'not-now' }, 'Not now');
    const never = h('button', { class: 'btn btn-small', type: 'button', 'data-action': 'never' }, 'Never for this app');
    start.addEventListener('click', () => void this.act('POST', '/api/audio/detection/accept', { app: o.app }, 201));
    notNow.addEventListener('click', () => void this.act('POST', '/api/audio/detection/dismiss', { app: o.app }, 200));
    never.addEventListener('click', () => void this.act('POST', '/api/audio/detection/dismiss', { app: o.app, never: true }, 200));
    return h('div', { class: 'bar-warn call-offer', role: 'alert', 'data-app': o.app }, h('span', null, `${cap(o.label)} is using the microphone — Start listening?`), ' ', start, notNow, never);
  }

  private endRow(e: EndOffer): HTMLElement {
    const end = h('button', { class: 'btn btn-small', type: 'button', 'data-action': 'end' }, 'End the call');
    const keep = h('button', { class: 'btn btn-small', type: 'button', 'data-action': 'keep' }, 'Keep listening');
    end.addEventListener('click', () => void this.act('POST', `/api/calls/${encodeURIComponent(e.call_id)}/end`, undefined, 200));
    keep.addEventListener('click', () => void this.act('POST', '/api/audio/detection/dismiss', { app: e.app }, 200));
    const when = e.ends_at ? ` It ends by itself at ${new Date(e.ends_at).toLocaleTimeString()}.` : '';
    return h('div', { class: 'bar-warn call-end-offer', role: 'alert', 'data-app': e.app }, h('span', null, `${cap(e.app)} let go of the microphone — the call may be over.${when}`), ' ', end, keep);
  }

  private async act(method: string, path: string, body: unknown, ok: number): Promise<void> {
    const res = await this.deps.api<unknown>(method, path, body).catch(() => null);
    this.result.hidden = !res || res.status === ok;
    if (res && res.status !== ok) this.result.textContent = this.deps.errorText(res);
    await this.load();
  }

  private async put(body: Record<string, unknown>): Promise<void> {
    const res = await this.deps.api<unknown>('PUT', '/api/audio/detection', body).catch(() => null);
    if (res && res.status === 200) this.d = normDetection(res.body);
    else if (res) this.cardStatus.textContent = this.deps.errorText(res);
    this.render();
  }
}
