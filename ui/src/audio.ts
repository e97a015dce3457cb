// Hearing the call in the UI: the shapes of `/api/audio…` normalised at the edge, the small pure
// helpers the call bar, Settings → Audio, the Transcript tab and the overlay share, and the two
// small widgets they all show (a level meter, the call bar's Listen controls).
//
// What the app reports about audio lives in the store (`store.audio` from `GET /api/audio`,
// patched by `audio_status` events; `store.levels` from `audio_level` events; each call's
// partial turns from `transcript_partial` events). Views render from there.

import { errorOf } from './errors';
import { h } from './dom';
import { appOptions, APP_PREFIX, systemValue } from './detect';
import type { ApiResponse } from './transport';
import type { Audio, AudioChannel, AudioChannelStatus, AudioEngineView, AudioLevels, AudioSource, AudioStatus, PartialTurn } from './types';

/** A partial turn with no news for this long is dropped (its final never came: an engine gave up). */
export const PARTIAL_STALE_MS = 10_000;
/** Levels older than this are shown as nothing (the app stopped sending them). */
export const LEVEL_STALE_MS = 1_500;
/** `POST /api/audio/meters` asks for levels this long while Settings → Audio is open… */
export const METERS_SECONDS = 10;
/** …and is renewed this often, so the meters never pause. */
export const METERS_RENEW_MS = 8_000;
/** Settings → Audio's Test records this long. */
export const TEST_SECONDS = 3;

const str = (v: unknown): string | null => (typeof v === 'string' ? v : v == null ? null : String(v));
const isObj = (v: unknown): v is Record<string, unknown> => !!v && typeof v === 'object' && !Array.isArray(v);
const num = (v: unknown, d = 0): number => (typeof v === 'number' && Number.isFinite(v) ? v : d);

// ---- normalisation ------------------------------------------------------------------------

export function normSources(raw: unknown): AudioSource[] | null {
  if (!Array.isArray(raw)) return null;
  const out: AudioSource[] = [];
  for (const s of raw) {
    if (!isObj(s) || typeof s.name !== 'string' || !s.name) continue;
    out.push({
      name: s.name,
      description: str(s.description) || s.name,
      kind: s.kind === 'monitor' ? 'monitor' : 'microphone',
      is_default: s.is_default === true,
    });
  }
  return out;
}

function normEngineView(raw: unknown): AudioEngineView {
  const e = isObj(raw) ? raw : {};
  return {
    kind: str(e.kind) ?? 'builtin',
    base_url: str(e.base_url),
    model: str(e.model),
    api_key_set: e.api_key_set === true,
    leaves_machine: e.leaves_machine === true,
    notice: str(e.notice) ?? '',
    language: str(e.language),
  };
}

export function normAudioStatus(raw: unknown): AudioStatus | null {
  if (!isObj(raw) || typeof raw.state !== 'string') return null;
  const channels: AudioChannelStatus[] = [];
  if (Array.isArray(raw.channels)) {
    for (const c of raw.channels) {
      if (!isObj(c) || typeof c.channel !== 'string') continue;
      channels.push({ channel: c.channel, state: str(c.state) ?? 'off', speaker: str(c.speaker) ?? '', source: str(c.source), detail: str(c.detail) ?? '' });
    }
  }
  const e = isObj(raw.engine) ? raw.engine : {};
  const b = isObj(raw.backlog) ? raw.backlog : {};
  return {
    state: raw.state,
    detail: str(raw.detail) ?? '',
    call_id: str(raw.call_id),
    channels,
    engine: { kind: str(e.kind) ?? '', state: str(e.state) ?? '', detail: str(e.detail) ?? '' },
    backlog: { turns: num(b.turns), seconds: num(b.seconds), dropped_seconds: num(b.dropped_seconds) },
  };
}

/** `GET` / `PUT /api/audio` answers; null if it is not one. */
export function normAudio(raw: unknown): Audio | null {
  if (!isObj(raw)) return null;
  const status = normAudioStatus(raw.status);
  if (!status) return null;
  return {
    mic: str(raw.mic),
    system: systemValue(raw.system),
    engine: normEngineView(raw.engine),
    you_label: str(raw.you_label) ?? 'You',
    them_label: str(raw.them_label) ?? 'Them',
    status,
    speakers:
      isObj(raw.speakers) && typeof raw.speakers.enabled === 'boolean' && typeof raw.speakers.available === 'boolean'
        ? { enabled: raw.speakers.enabled, available: raw.speakers.available, detail: str(raw.speakers.detail) ?? '' }
        : null,
    keep_audio: raw.keep_audio === true,
  };
}

const level = (v: unknown): number | null => (typeof v === 'number' && Number.isFinite(v) ? Math.min(1, Math.max(0, v)) : null);

/** An `audio_level` event; null if it carries neither level. */
export function normLevels(raw: unknown): AudioLevels | null {
  if (!isObj(raw) || (!('mic' in raw) && !('system' in raw))) return null;
  return { mic: level(raw.mic), system: level(raw.system) };
}

/** A `transcript_partial` event as the store keeps it (`final` apart); null if malformed. */
export function normPartial(raw: unknown, now: number): { partial: PartialTurn; final: boolean } | null {
  if (!isObj(raw)) return null;
  const sid = str(raw.session_id);
  const tid = raw.turn_id;
  if (!sid || (typeof tid !== 'string' && typeof tid !== 'number')) return null;
  const speaker = str(raw.speaker);
  return {
    partial: {
      turn_id: String(tid),
      session_id: sid,
      channel: str(raw.channel) ?? '',
      speaker: speaker && speaker.trim() ? speaker.trim() : null,
      text: str(raw.text) ?? '',
      since: now,
      at: now,
    },
    final: raw.final === true,
  };
}

/** The `{error, message}` of an answer (`''` when it has none). */
export function apiError(res: ApiResponse<unknown>): { code: string; message: string } {
  return errorOf(res);
}

// ---- pure helpers ---------------------------------------------------------------------------

/**
 * The share of a meter a peak fills: decibels from −60 dBFS (empty) to 0 (full), so quiet speech
 * still moves it (a linear meter would barely show a peak of 0.05).
 */
export function meterFraction(peak: number | null | undefined): number {
  if (peak == null || !Number.isFinite(peak) || peak <= 0) return 0;
  const db = 20 * Math.log10(Math.min(1, peak));
  return Math.max(0, Math.min(1, 1 + db / 60));
}

/** Whether a URL names this computer (`localhost`, 127.0.0.0/8, `::1`), as the app decides it. */
export function isLoopbackUrl(raw: string): boolean {
  let u: URL;
  try {
    u = new URL(raw.trim());
  } catch {
    return false;
  }
  const host = u.hostname.toLowerCase();
  if (host === 'localhost' || host === '[::1]' || host === '::1') return true;
  const m = /^(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(host);
  return !!m && m[1] === '127';
}

/** The host a URL names ('' if it is not a URL). */
export function hostOf(raw: string): string {
  try {
    return new URL(raw.trim()).host;
  } catch {
    return '';
  }
}

/** Whether `call` is the call being listened to (its listening asked for, working or failing). */
export function listeningTo(a: Audio | null, call: string | null | undefined): boolean {
  return !!a && !!call && a.status.call_id === call && a.status.state !== 'idle';
}

export type AudioField = 'mic' | 'system' | 'engine' | 'base_url' | 'model' | 'api_key' | 'language' | 'you_label' | 'them_label';

/** Which field of Settings → Audio a `400` of `PUT /api/audio` is about (`null`: none in particular). */
export function audioErrorField(code: string, message: string, sent: Record<string, unknown>): AudioField | null {
  const m = message.toLowerCase();
  const named = (...fields: AudioField[]) => fields.find((f) => m.includes(`\`${f}\``) || m.includes(`engine.${f}`)) ?? null;
  switch (code) {
    case 'invalid_url':
      return 'base_url';
    case 'invalid_model':
      return 'model';
    case 'invalid_language':
      return 'language';
    case 'invalid_api_key':
      return 'api_key';
    case 'invalid_label':
      return named('you_label', 'them_label') ?? ('them_label' in sent && !('you_label' in sent) ? 'them_label' : 'you_label');
    case 'unknown_source':
      return named('mic', 'system') ?? ('system' in sent && !('mic' in sent) ? 'system' : 'mic');
    case 'missing_field':
    case 'invalid_field':
      return named('base_url', 'model', 'api_key', 'you_label', 'them_label', 'mic', 'system') ?? (m.includes('kind') || 'engine' in sent ? 'engine' : null);
    default:
      return null;
  }
}

export interface AudioChip {
  /** `idle`, `listening`, `error`, `unavailable` (no pipeline), `unknown` (not loaded yet). */
  state: string;
  text: string;
  cls: string;
  /** The status detail, in plain words (and what waits in the backlog). */
  title: string;
}

/** How many seconds, in words (`1 min 5 s`). */
export function seconds(s: number): string {
  const t = Math.round(s);
  if (t < 60) return `${t} s`;
  const m = Math.floor(t / 60);
  return t % 60 ? `${m} min ${t % 60} s` : `${m} min`;
}

/** What waits in the backlog, in plain words ('' when nothing does). */
export function backlogText(st: AudioStatus | null | undefined): string {
  if (!st) return '';
  const bits: string[] = [];
  const b = st.backlog;
  if (b.turns > 0) bits.push(`${b.turns === 1 ? '1 turn' : `${b.turns} turns`} (${seconds(b.seconds)} of speech) wait to be transcribed; nothing is lost.`);
  if (b.dropped_seconds > 0) bits.push(`${seconds(b.dropped_seconds)} of the oldest speech was dropped: the backlog was full.`);
  return bits.join(' ');
}

/** "Not hearing: <why>", the why shortened, without the status's own "Not hearing anything." */
export function notHearingText(detail: string, max: number): string {
  const why = detail.replace(/^not hearing anything\.?\s*/i, '').trim();
  return why ? `Not hearing: ${shortDetail(why, max)}` : 'Not hearing anything';
}

/** The call bar's / overlay's status for the call `call` (null: whatever call). */
export function audioChip(a: Audio | null, unavailable: string | null, call: string | null): AudioChip {
  if (!a) {
    if (unavailable) return { state: 'unavailable', text: 'Cannot hear', cls: 'chip-muted', title: unavailable };
    return { state: 'unknown', text: 'Audio…', cls: 'chip-muted', title: 'Reading the audio status…' };
  }
  const st = a.status;
  const mine = call === null || st.call_id === call;
  if (st.state === 'idle' || !mine) {
    const other = st.state !== 'idle' && !mine;
    return { state: 'idle', text: 'Not listening', cls: 'chip-muted', title: other ? 'Listening to another call.' : st.detail || 'Not listening.' };
  }
  const extra = backlogText(st);
  if (st.state === 'error') return { state: 'error', text: 'Not hearing', cls: 'chip-bad', title: [st.detail, extra].filter(Boolean).join(' ') };
  if (extra) return { state: 'listening', text: 'Listening', cls: 'chip-warn', title: [st.detail, extra].filter(Boolean).join(' ') };
  return { state: 'listening', text: 'Listening', cls: 'chip-ok', title: st.detail || 'Listening.' };
}

/** The sources of one channel, the default first. */
export function sourcesFor(list: AudioSource[], channel: AudioChannel): AudioSource[] {
  const kind = channel === 'mic' ? 'microphone' : 'monitor';
  return list.filter((s) => s.kind === kind).sort((a, b) => Number(b.is_default) - Number(a.is_default) || a.description.localeCompare(b.description));
}

export interface SourceOption {
  value: string;
  label: string;
}

/**
 * The choices of a channel's source picker: Default (naming what it is now), each source of the
 * channel's kind, the saved source when the server does not list it (unplugged), Off.
 */
export function sourceOptions(list: AudioSource[] | null, channel: AudioChannel, saved: string | null): SourceOption[] {
  const mine = list ? sourcesFor(list, channel) : [];
  const def = mine.find((s) => s.is_default);
  const out: SourceOption[] = [{ value: 'default', label: def ? `Default (${def.description})` : 'Default' }];
  for (const s of mine) out.push({ value: s.name, label: s.description === s.name ? s.name : `${s.description}` });
  if (saved && saved !== 'default' && !saved.startsWith(APP_PREFIX) && !mine.some((s) => s.name === saved)) out.push({ value: saved, label: `${saved} (not connected)` });
  if (channel === 'system') out.push(...appOptions(saved));
  out.push({ value: '', label: channel === 'mic' ? 'Off (do not record me)' : 'Off (do not record the call)' });
  return out;
}

// ---- widgets ---------------------------------------------------------------------------------

/** A horizontal level meter (`role="meter"`); `set(null)`: the channel is off or silent-unknown. */
export class LevelMeter {
  readonly el: HTMLElement;
  private fill: HTMLElement;
  private last = -1;

  constructor(id: string, label: string, small = false) {
    this.fill = h('span', { class: 'level-fill' });
    this.el = h(
      'span',
      {
        class: `level${small ? ' level-small' : ''}`,
        id,
        role: 'meter',
        'aria-label': label,
        'aria-valuemin': '0',
        'aria-valuemax': '100',
        'aria-valuenow': '0',
        'data-state': 'none',
      },
      this.fill,
    );
  }

  /** `peak` 0–1; `null`: nothing to show (off, or no levels coming); `off`: the channel is off. */
  set(peak: number | null, off = false): void {
    const f = off || peak == null ? 0 : meterFraction(peak);
    const pct = Math.round(f * 100);
    const state = off ? 'off' : peak == null ? 'none' : 'live';
    if (pct === this.last && this.el.dataset.state === state) return;
    this.last = pct;
    this.fill.style.width = `${pct}%`;
    this.el.setAttribute('aria-valuenow', String(pct));
    this.el.dataset.state = state;
    this.el.dataset.level = String(pct);
    this.el.dataset.hot = String(pct >= 95);
  }
}

export interface ListenActions {
  /** Starts (`true`) or stops listening to the open call; throws with a sentence on failure. */
  setListening(on: boolean): Promise<void>;
  /** Opens Settings → Audio. */
  openSettings(): void;
}

/**
 * The call bar's Listen toggle (`POST` / `DELETE /api/calls/{id}/listen`), both levels (You,
 * Them) and the status, which opens Settings → Audio. Shown while the open call is live.
 */
export class ListenControls {
  readonly el: HTMLElement;
  private toggle: HTMLButtonElement;
  private chip: HTMLButtonElement;
  private you = new LevelMeter('level-you', 'Your microphone level', true);
  private them = new LevelMeter('level-them', 'Call audio level', true);
  private meters: HTMLElement;
  private busy = false;
  private on = false;
  private call: string | null = null;
  private last: { a: Audio | null; unavailable: string | null } = { a: null, unavailable: null };

  constructor(private actions: ListenActions) {
    this.toggle = h('button', { class: 'btn listen-toggle', type: 'button', id: 'listen-toggle', 'aria-pressed': 'false' }, 'Listen');
    this.toggle.addEventListener('click', () => void this.flip());
    this.chip = h('button', { class: 'chip chip-muted chip-button', type: 'button', id: 'audio-status', 'aria-live': 'polite' }, 'Audio…');
    this.chip.addEventListener('click', () => this.actions.openSettings());
    this.meters = h(
      'span',
      { class: 'listen-meters', id: 'listen-meters', title: 'You (microphone) · Them (call audio)' },
      h('span', { class: 'level-tag', 'aria-hidden': 'true' }, 'You'),
      this.you.el,
      h('span', { class: 'level-tag', 'aria-hidden': 'true' }, 'Them'),
      this.them.el,
    );
    this.el = h('div', { class: 'listen', id: 'listen', hidden: true, role: 'group', 'aria-label': 'Hearing the call' }, this.toggle, this.meters, this.chip);
  }

  /** The open call (null: none live: the controls hide) and what the app reports. */
  render(call: string | null, a: Audio | null, unavailable: string | null): void {
    this.call = call;
    this.last = { a, unavailable };
    this.el.hidden = !call;
    if (!call) return;
    this.on = listeningTo(a, call);
    const c = audioChip(a, unavailable, call);
    this.el.dataset.state = c.state;
    this.toggle.setAttribute('aria-pressed', String(this.on));
    // The label says what a click does; `aria-pressed` (and its look) says whether it is on.
    this.toggle.textContent = this.busy ? (this.on ? 'Stopping…' : 'Starting…') : this.on ? 'Stop listening' : 'Listen';
    this.toggle.classList.toggle('is-on', this.on);
    this.toggle.disabled = this.busy || !a;
    const other = !!a && a.status.state !== 'idle' && !!a.status.call_id && a.status.call_id !== call;
    this.toggle.title = !a
      ? `This app cannot hear calls here: ${unavailable ?? 'the audio status is not known yet.'}`
      : this.on
        ? 'Stop transcribing this call (turns already heard are still transcribed)'
        : other
          ? 'Another call is being listened to: listening moves to this one'
          : 'Transcribe this call from your microphone (You) and the call’s audio (Them)';
    this.meters.hidden = !this.on;
    this.chip.className = `chip chip-button ${c.cls}`;
    this.chip.dataset.state = c.state;
    // The state in a word or two: why is one whole sentence under the call bar (live/status.ts),
    // never a sentence cut to fit a chip.
    this.chip.textContent = c.text;
    this.chip.title = `${c.title}\n(Settings → Audio)`.trim();
    this.chip.setAttribute('aria-label', `${c.text}. ${c.title} Open the audio settings.`);
  }

  /** The latest levels (null: none coming). */
  levels(l: AudioLevels | null, a: Audio | null): void {
    const off = (ch: AudioChannel) => !!a && a.status.channels.some((c) => c.channel === ch && c.state === 'off');
    this.you.set(l ? l.mic : null, off('mic') || (!!l && l.mic === null));
    this.them.set(l ? l.system : null, off('system') || (!!l && l.system === null));
  }

  private async flip(): Promise<void> {
    if (this.busy || !this.call) return;
    const want = !this.on;
    this.busy = true;
    this.toggle.disabled = true;
    this.toggle.textContent = want ? 'Starting…' : 'Stopping…';
    try {
      await this.actions.setListening(want);
    } finally {
      this.busy = false;
      this.render(this.call, this.last.a, this.last.unavailable);
    }
  }
}

/**
 * The gist of a detail, for a chip (the whole detail is its tooltip): up to its first full stop,
 * semicolon, colon or parenthesis, and at most `max` characters (cut at a word).
 */
export function shortDetail(detail: string, max = 80): string {
  const d = detail.trim();
  const gist = (/^(.+?)(?:[.;!?](?:\s|$)|:\s|\s\()/.exec(d)?.[1] ?? d).trim();
  if (gist.length <= max) return gist;
  const cut = gist.slice(0, max - 1);
  if (gist[max - 1] === ' ') return `${cut}…`;
  const sp = cut.lastIndexOf(' ');
  return `${sp > max / 2 ? cut.slice(0, sp) : cut}…`;
}
