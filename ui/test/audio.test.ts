// @vitest-environment happy-dom
// Hearing the call in the UI: the store's partial turns (one per open turn, dropped by their
// final or when stale), levels and audio status (patched by `audio_status`, a snapshot never
// rolling an event back); Settings → Audio (sources, no sound server, a build that cannot hear,
// audio that leaves the machine, the write-only key, errors next to their field, Test, meters);
// the call bar's Listen toggle, the status read again when the event stream (re)connects, and the
// Transcript tab's greyed partials replaced by final turns — through the real App, Store and DOM
// code, with an in-memory transport standing in for the app (the real one is driven by the
// browser tests in tests/browser/audio.test.mjs).

import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { App } from '../src/app';
import {
  audioChip,
  audioErrorField,
  isLoopbackUrl,
  LEVEL_STALE_MS,
  meterFraction,
  METERS_RENEW_MS,
  normAudio,
  PARTIAL_STALE_MS,
  shortDetail,
  sourceOptions,
} from '../src/audio';
import { AudioSettings, type AudioSettingsActions } from '../src/audiosettings';
import { Overlay } from '../src/overlay';
import { type Change, Store } from '../src/store';
import type { ApiResponse, EventSink, StreamState, Subscription, Transport } from '../src/transport';
import type { AudioSource, SwEvent } from '../src/types';

const CALL = 'call-1';
const T0 = Date.UTC(2026, 11, 3, 9, 0, 0);

// ---- fixtures ----------------------------------------------------------------------------------

const SOURCES: AudioSource[] = [
  { name: 'alsa_input.usb-headset', description: 'USB Headset Microphone', kind: 'microphone', is_default: true },
  { name: 'alsa_input.pci-analog', description: 'Built-in Audio Analog Stereo', kind: 'microphone', is_default: false },
  { name: 'alsa_output.pci-analog.monitor', description: 'Monitor of Built-in Audio', kind: 'monitor', is_default: true },
  { name: 'bluez_sink.monitor', description: 'Monitor of Bluetooth Speaker', kind: 'monitor', is_default: false },
];

function status(over: Record<string, unknown> = {}) {
  return {
    state: 'idle',
    detail: 'Not listening.',
    call_id: null,
    channels: [],
    engine: { kind: 'builtin', state: 'ready', detail: '' },
    backlog: { turns: 0, seconds: 0, dropped_seconds: 0 },
    ...over,
  };
}

const LISTENING = status({
  state: 'listening',
  detail: 'Listening: microphone and call audio.',
  call_id: CALL,
  channels: [
    { channel: 'mic', state: 'listening', speaker: 'You', source: 'alsa_input.usb-headset', detail: '' },
    { channel: 'system', state: 'listening', speaker: 'Them', source: 'alsa_output.pci-analog.monitor', detail: '' },
  ],
});

const FAILING = status({
  state: 'error',
  detail: 'The microphone is gone (USB Headset unplugged). Listening resumes when it comes back.',
  call_id: CALL,
  channels: [
    { channel: 'mic', state: 'error', speaker: 'You', source: null, detail: 'USB Headset Microphone was unplugged.' },
    { channel: 'system', state: 'listening', speaker: 'Them', source: 'alsa_output.pci-analog.monitor', detail: '' },
  ],
});

function audio(over: Record<string, unknown> = {}) {
  return {
    mic: 'default',
    system: 'default',
    engine: { kind: 'builtin', leaves_machine: false, notice: 'Speech is recognised on this computer (PocketSphinx); no audio leaves it.' },
    you_label: 'You',
    them_label: 'Them',
    status: status(),
    ...over,
  };
}

const REMOTE_ENGINE = {
  kind: 'openai',
  base_url: 'https://asr.example.net',
  model: 'whisper-1',
  api_key_set: true,
  leaves_machine: true,
  notice: 'The call’s audio leaves this computer: every turn you and the other side speak is sent to asr.example.net to be transcribed.',
};

const call = (over: Record<string, unknown> = {}) => ({
  session_id: CALL,
  kind: 'chat',
  is_call: true,
  title: null,
  created_at: new Date(T0).toISOString(),
  ended_at: null,
  insights_session_id: `insights:${CALL}`,
  ...over,
});

const turn = (id: number, speaker: string, text: string) => ({
  id,
  session_id: CALL,
  speaker,
  text,
  received_at: new Date(T0 + id * 1000).toISOString(),
  offset_ms: id * 1000,
  task_id: null,
  delivery: null,
  delivery_error: null,
});

const partial = (turnId: string, text: string, over: Record<string, unknown> = {}): SwEvent => ({
  id: 0,
  live: true,
  type: 'transcript_partial',
  session_id: CALL,
  turn_id: turnId,
  channel: 'mic',
  speaker: 'You',
  text,
  final: false,
  ...over,
});

const level = (mic: number | null, system: number | null): SwEvent => ({ id: 0, live: true, type: 'audio_level', mic, system });
const statusEvent = (st: unknown): SwEvent => ({ id: 0, live: true, type: 'audio_status', status: st });

const flush = async (n = 4) => {
  for (let i = 0; i < n; i++) await new Promise((r) => setTimeout(r, 0));
};

// ---- the store ----------------------------------------------------------------------------------

describe('partial turns in the store', () => {
  afterEach(() => vi.useRealTimers());

  it('keeps one partial per open turn, updated in place, and never moves the cursor', () => {
    const s = new Store();
    s.apply({ id: 7, type: 'session_created', session_id: CALL, session: call() });
    const seen: Change[] = [];
    s.subscribe((c) => seen.push(c));
    expect(s.apply(partial('t1', ''))).toBe(false);
    s.apply(partial('t1', 'we should'));
    s.apply(partial('t2', 'hello', { channel: 'system', speaker: 'Them' }));
    s.apply(partial('t1', 'we should ship'));
    expect(s.cursor).toBe(7);
    const p = s.partialsOf(CALL);
    expect(p.map((x) => [x.turn_id, x.speaker, x.text])).toEqual([
      ['t1', 'You', 'we should ship'],
      ['t2', 'Them', 'hello'],
    ]);
    expect(seen.filter((c) => c.kind === 'partials')).toHaveLength(4);
    // The raw event still reaches whoever listens for live events.
    expect(seen.filter((c) => c.kind === 'live')).toHaveLength(4);
  });

  it('drops a partial on its final; the stored turn comes as transcript_added', () => {
    const s = new Store();
    s.apply(partial('t1', 'we should ship on'));
    s.apply(partial('t2', 'sure', { channel: 'system', speaker: 'Them' }));
    s.apply(partial('t1', 'we should ship on Friday', { final: true }));
    expect(s.partialsOf(CALL).map((x) => x.turn_id)).toEqual(['t2']);
    s.apply({ id: 1, type: 'transcript_added', session_id: CALL, transcript: turn(1, 'You', 'we should ship on Friday') });
    expect(s.conv(CALL)!.transcript.map((t) => t.text)).toEqual(['we should ship on Friday']);
    // A final for a turn never seen (the UI opened mid-turn) is harmless.
    s.apply(partial('t9', 'x', { final: true }));
    expect(s.partialsOf(CALL).map((x) => x.turn_id)).toEqual(['t2']);
  });

  it('a partial with no news for PARTIAL_STALE_MS goes away (fake timers)', () => {
    vi.useFakeTimers();
    vi.setSystemTime(T0);
    const s = new Store();
    const seen: Change[] = [];
    s.subscribe((c) => seen.push(c));
    s.apply(partial('t1', 'first'));
    vi.advanceTimersByTime(4000);
    s.apply(partial('t2', 'second', { channel: 'system', speaker: 'Them' }));
    s.apply(partial('t1', 'first again')); // news for t1 at 4 s
    vi.advanceTimersByTime(PARTIAL_STALE_MS - 1);
    expect(s.partialsOf(CALL).map((x) => x.turn_id)).toEqual(['t1', 't2']);
    vi.advanceTimersByTime(1);
    expect(s.partialsOf(CALL)).toEqual([]);
    seen.length = 0;
    // Each stale turn on its own clock.
    s.apply(partial('t3', 'a'));
    vi.advanceTimersByTime(6000);
    s.apply(partial('t4', 'b'));
    vi.advanceTimersByTime(PARTIAL_STALE_MS - 6000);
    expect(s.partialsOf(CALL).map((x) => x.turn_id)).toEqual(['t4']);
    vi.advanceTimersByTime(6000);
    expect(s.partialsOf(CALL)).toEqual([]);
    expect(seen.filter((c) => c.kind === 'partials').length).toBe(4);
  });

  it('clearPartials drops them all (the stream came back after a drop)', () => {
    const s = new Store();
    s.apply(partial('t1', 'a'));
    s.apply(partial('t2', 'b', { session_id: 'other' }));
    s.clearPartials();
    expect(s.partialsOf(CALL)).toEqual([]);
    expect(s.partialsOf('other')).toEqual([]);
  });

  it('ignores malformed partials', () => {
    const s = new Store();
    s.apply({ id: 0, live: true, type: 'transcript_partial', session_id: CALL, text: 'no turn id' });
    s.apply({ id: 0, live: true, type: 'transcript_partial', turn_id: 't', text: 'no session' });
    expect(s.partialsOf(CALL)).toEqual([]);
  });
});

describe('audio status and levels in the store', () => {
  afterEach(() => vi.useRealTimers());

  it('an audio_status event patches the snapshot; a snapshot asked for before it keeps the event’s status', () => {
    const s = new Store();
    expect(s.setAudio(audio())).toBe(true);
    expect(s.audio?.status.state).toBe('idle');
    const seq = s.audioStatusSeq;
    const seen: Change[] = [];
    s.subscribe((c) => seen.push(c));
    s.apply(statusEvent(LISTENING));
    expect(s.audio?.status.state).toBe('listening');
    expect(seen).toContainEqual({ kind: 'audio', fromEvent: true });
    // A GET answered now, but asked for before the event: its (idle) status is older.
    s.setAudio(audio({ you_label: 'Ana' }), seq);
    expect(s.audio?.status.state).toBe('listening');
    expect(s.audio?.you_label).toBe('Ana');
    // Asked for after it: its status stands.
    s.setAudio(audio({ status: FAILING }), s.audioStatusSeq);
    expect(s.audio?.status.state).toBe('error');
  });

  it('remembers why audio is unavailable, and forgets it when an answer comes', () => {
    const s = new Store();
    s.setAudioUnavailable('this build of the app cannot hear calls (no audio pipeline)');
    expect(s.audio).toBeNull();
    expect(s.audioUnavailable).toMatch(/cannot hear/);
    s.setAudio(audio());
    expect(s.audioUnavailable).toBeNull();
  });

  it('levels come with audio_level and are forgotten when they stop', () => {
    vi.useFakeTimers();
    const s = new Store();
    s.apply(level(0.5, null));
    expect(s.levels).toEqual({ mic: 0.5, system: null });
    s.apply(level(2, -1));
    expect(s.levels).toEqual({ mic: 1, system: 0 });
    vi.advanceTimersByTime(LEVEL_STALE_MS);
    expect(s.levels).toBeNull();
  });

  it('normAudio reads an answer and refuses what is not one', () => {
    const a = normAudio(audio({ mic: null, engine: REMOTE_ENGINE, status: LISTENING }))!;
    expect(a.mic).toBeNull();
    expect(a.engine).toMatchObject({ kind: 'openai', api_key_set: true, leaves_machine: true });
    expect(a.status.channels.map((c) => c.channel)).toEqual(['mic', 'system']);
    expect(normAudio({ error: 'audio_unavailable' })).toBeNull();
    expect(normAudio([])).toBeNull();
  });
});

// ---- pure helpers ------------------------------------------------------------------------------

describe('audio helpers', () => {
  it('meters are in decibels: quiet speech still shows', () => {
    expect(meterFraction(null)).toBe(0);
    expect(meterFraction(0)).toBe(0);
    expect(meterFraction(1)).toBe(1);
    expect(meterFraction(0.001)).toBeCloseTo(0, 5);
    expect(meterFraction(0.05)).toBeGreaterThan(0.5);
    expect(meterFraction(0.05)).toBeLessThan(meterFraction(0.3));
  });

  it('tells loopback URLs like the app does', () => {
    for (const u of ['http://127.0.0.1:8000', 'http://localhost:9/x', 'http://[::1]:1', 'http://127.3.2.1']) expect(isLoopbackUrl(u), u).toBe(true);
    for (const u of ['http://10.0.0.2', 'https://api.openai.com', 'http://localhost.example.com', 'not a url']) expect(isLoopbackUrl(u), u).toBe(false);
  });

  it('puts a PUT error on the field it concerns', () => {
    expect(audioErrorField('invalid_url', '`engine.base_url`: no host', {})).toBe('base_url');
    expect(audioErrorField('invalid_model', '', {})).toBe('model');
    expect(audioErrorField('invalid_api_key', '', {})).toBe('api_key');
    expect(audioErrorField('invalid_label', '`them_label`: 1–100 characters', {})).toBe('them_label');
    expect(audioErrorField('invalid_label', 'bad', { you_label: 'x' })).toBe('you_label');
    expect(audioErrorField('unknown_source', '`system`: no source has that name', {})).toBe('system');
    expect(audioErrorField('unknown_source', 'no such source', { mic: 'x' })).toBe('mic');
    expect(audioErrorField('missing_field', 'missing field `model`', { engine: {} })).toBe('model');
    expect(audioErrorField('invalid_field', 'unknown variant `vosk`', { engine: {} })).toBe('engine');
    expect(audioErrorField('config_write_failed', 'disk full', {})).toBeNull();
  });

  it('offers Default (naming it), the channel’s own sources, a saved one that is gone, and Off', () => {
    const mic = sourceOptions(SOURCES, 'mic', 'alsa_input.gone');
    expect(mic.map((o) => o.value)).toEqual(['default', 'alsa_input.usb-headset', 'alsa_input.pci-analog', 'alsa_input.gone', '']);
    expect(mic[0].label).toBe('Default (USB Headset Microphone)');
    expect(mic[3].label).toMatch(/not connected/);
    const sys = sourceOptions(SOURCES, 'system', 'default');
    expect(sys.map((o) => o.value)).toEqual(['default', 'alsa_output.pci-analog.monitor', 'bluez_sink.monitor', '']);
    expect(sourceOptions(null, 'system', null).map((o) => o.value)).toEqual(['default', '']);
  });

  it('the status chip: idle, listening to this call or another, failing with the reason, the backlog', () => {
    const idle = normAudio(audio())!;
    expect(audioChip(idle, null, CALL).state).toBe('idle');
    const on = normAudio(audio({ status: LISTENING }))!;
    expect(audioChip(on, null, CALL)).toMatchObject({ state: 'listening', text: 'Listening', cls: 'chip-ok' });
    expect(audioChip(on, null, 'another-call')).toMatchObject({ state: 'idle', title: 'Listening to another call.' });
    const bad = normAudio(audio({ status: FAILING }))!;
    expect(audioChip(bad, null, CALL)).toMatchObject({ state: 'error', cls: 'chip-bad' });
    expect(audioChip(bad, null, CALL).title).toMatch(/unplugged/);
    const backlog = normAudio(audio({ status: { ...FAILING, backlog: { turns: 3, seconds: 42, dropped_seconds: 0 } } }))!;
    expect(audioChip(backlog, null, CALL).title).toMatch(/3 turns \(42 s of speech\) wait to be transcribed/);
    expect(audioChip(null, 'no pipeline', CALL)).toMatchObject({ state: 'unavailable', text: 'Cannot hear' });
    expect(shortDetail('The engine is down. Turns wait.')).toBe('The engine is down');
    expect(shortDetail('The microphone is gone (USB Headset unplugged).')).toBe('The microphone is gone');
    expect(shortDetail('Engine not answering: http://127.0.0.1:8000 refused')).toBe('Engine not answering');
    expect(shortDetail('The transcription server at the far end of the office network does not answer', 40)).toBe('The transcription server at the far end…');
  });
});

// ---- Settings → Audio ------------------------------------------------------------------------------

interface Call {
  method: string;
  path: string;
  body?: unknown;
}

/** Settings → Audio with a store and scripted answers, like the App wires it. */
function audioCard(answers: Record<string, (body: unknown) => ApiResponse<unknown>>) {
  const store = new Store();
  const calls: Call[] = [];
  const answer = (method: string, path: string, body?: unknown): ApiResponse<unknown> => {
    calls.push({ method, path, body });
    const fn = answers[`${method} ${path}`];
    return fn ? fn(body) : { status: 404, body: { error: 'not_found', message: path } };
  };
  const actions: AudioSettingsActions = {
    async audioCall(method, path, body) {
      const res = answer(method, path, body);
      if (res.status === 200) store.setAudio(res.body);
      else if (method === 'GET' && res.status === 503) store.setAudioUnavailable((res.body as { message: string }).message);
      return res;
    },
    async api<T>(method: string, path: string, body?: unknown) {
      return answer(method, path, body) as ApiResponse<T>;
    },
    errorText: (res) => {
      const b = res.body as { error?: string; message?: string };
      return b?.error ? `${b.error}: ${b.message}` : `HTTP ${res.status}`;
    },
  };
  const card = new AudioSettings(actions);
  store.subscribe((c) => {
    if (c.kind === 'audio') card.render(store.audio, store.audioUnavailable);
    if (c.kind === 'levels') card.levels(store.levels);
  });
  document.body.replaceChildren(card.card);
  const $ = <T extends HTMLElement = HTMLElement>(sel: string) => card.card.querySelector<T>(sel)!;
  return { card, store, calls, $ };
}

const ok = (body: unknown) => () => ({ status: 200, body });
const options = (sel: HTMLSelectElement) => Array.from(sel.options).map((o) => o.value);
const visible = (el: HTMLElement) => {
  for (let e: HTMLElement | null = el; e; e = e.parentElement) if (e.hidden) return false;
  return true;
};

describe('Settings → Audio', () => {
  afterEach(() => {
    vi.useRealTimers();
    document.body.replaceChildren();
  });

  it('lists the microphones for You and the monitors for Them, with Default and Off, and meters while open', async () => {
    const { card, store, calls, $ } = audioCard({
      'GET /api/audio': ok(audio({ system: 'bluez_sink.monitor' })),
      'GET /api/audio/sources': ok(SOURCES),
      'POST /api/audio/meters': ok({ ok: true }),
    });
    card.setVisible(true);
    await flush();
    const mic = $<HTMLSelectElement>('#audio-mic');
    const sys = $<HTMLSelectElement>('#audio-system');
    expect(options(mic)).toEqual(['default', 'alsa_input.usb-headset', 'alsa_input.pci-analog', '']);
    expect(options(sys)).toEqual(['default', 'alsa_output.pci-analog.monitor', 'bluez_sink.monitor', '']);
    expect(mic.value).toBe('default');
    expect(sys.value).toBe('bluez_sink.monitor');
    expect(mic.options[0].text).toBe('Default (USB Headset Microphone)');
    expect($('#audio-unavailable').hidden).toBe(true);
    expect(calls.filter((c) => c.path === '/api/audio/meters')).toEqual([{ method: 'POST', path: '/api/audio/meters', body: { seconds: 10 } }]);
    // Levels move the meters.
    store.apply(level(0.3, null));
    expect(Number($('#meter-mic').getAttribute('aria-valuenow'))).toBeGreaterThan(50);
    expect($('#meter-system').dataset.state).toBe('off');
    card.setVisible(false);
  });

  it('renews the meters while open and stops when closed (fake timers)', async () => {
    vi.useFakeTimers();
    const { card, calls } = audioCard({
      'GET /api/audio': ok(audio()),
      'GET /api/audio/sources': ok(SOURCES),
      'POST /api/audio/meters': ok({ ok: true }),
    });
    const meters = () => calls.filter((c) => c.path === '/api/audio/meters').length;
    card.setVisible(true);
    await vi.advanceTimersByTimeAsync(10);
    expect(meters()).toBe(1);
    await vi.advanceTimersByTimeAsync(METERS_RENEW_MS);
    expect(meters()).toBe(2);
    await vi.advanceTimersByTimeAsync(METERS_RENEW_MS);
    expect(meters()).toBe(3);
    card.setVisible(false);
    await vi.advanceTimersByTimeAsync(METERS_RENEW_MS * 3);
    expect(meters()).toBe(3);
  });

  it('no sound server: an explanation with what to do, not an empty list', async () => {
    const reason = 'no sound server at unix:/run/user/1000/pulse/native: connection refused';
    const { card, calls, $ } = audioCard({
      'GET /api/audio': ok(audio()),
      'GET /api/audio/sources': () => ({ status: 503, body: { error: 'audio_unavailable', message: reason } }),
    });
    card.setVisible(true);
    await flush();
    const box = $('#audio-unavailable');
    expect(visible(box)).toBe(true);
    expect(box.dataset.kind).toBe('server');
    expect(box.textContent).toMatch(/cannot reach a sound server/);
    expect(box.textContent).toContain(reason);
    expect(box.textContent).toMatch(/pactl info/);
    expect(box.textContent).toMatch(/PULSE_SERVER/);
    // The pickers still offer what needs no server, no meters, no test.
    expect(options($<HTMLSelectElement>('#audio-mic'))).toEqual(['default', '']);
    expect($('#meter-mic').hidden).toBe(true);
    expect($<HTMLButtonElement>('#audio-test-mic').disabled).toBe(true);
    expect(calls.some((c) => c.path === '/api/audio/meters')).toBe(false);
    // Check again: the server is there now.
    (card as unknown as { actions: AudioSettingsActions }).actions.api = async <T,>(m: string, p: string) =>
      (p === '/api/audio/sources' ? { status: 200, body: SOURCES } : { status: 200, body: m === 'GET' ? audio() : { ok: true } }) as ApiResponse<T>;
    $<HTMLButtonElement>('#audio-retry').click();
    await flush();
    expect(box.hidden).toBe(true);
    expect(options($<HTMLSelectElement>('#audio-mic'))).toHaveLength(4);
    card.setVisible(false);
  });

  it('a build that cannot hear says so, and shows no pickers', async () => {
    const { card, $ } = audioCard({
      'GET /api/audio': () => ({ status: 503, body: { error: 'audio_unavailable', message: 'this build of the app cannot hear calls (no audio pipeline)' } }),
    });
    card.setVisible(true);
    await flush();
    const box = $('#audio-unavailable');
    expect(visible(box)).toBe(true);
    expect(box.dataset.kind).toBe('build');
    expect(box.textContent).toMatch(/cannot hear calls/);
    expect(box.textContent).toContain('no audio pipeline');
    expect($('#audio-sources').hidden).toBe(true);
    expect($<HTMLButtonElement>('#audio-save').disabled).toBe(true);
    card.setVisible(false);
  });

  it('a remote engine: says plainly that call audio leaves this computer; the key is never shown', async () => {
    const { card, $ } = audioCard({
      'GET /api/audio': ok(audio({ engine: REMOTE_ENGINE })),
      'GET /api/audio/sources': ok(SOURCES),
      'POST /api/audio/meters': ok({ ok: true }),
    });
    card.setVisible(true);
    await flush();
    expect($<HTMLInputElement>('#audio-engine-openai').checked).toBe(true);
    expect($('#audio-openai-fields').hidden).toBe(false);
    expect($<HTMLInputElement>('#audio-base-url').value).toBe('https://asr.example.net');
    expect($<HTMLInputElement>('#audio-model').value).toBe('whisper-1');
    const key = $<HTMLInputElement>('#audio-api-key');
    expect(key.value).toBe('');
    expect(key.type).toBe('password');
    expect($('#audio-key-state').textContent).toBe('a key is saved');
    const notice = $('#audio-engine-notice');
    expect(notice.classList.contains('audio-leaves')).toBe(true);
    expect(notice.textContent).toMatch(/leaves this computer.*asr\.example\.net/);
    expect(key.placeholder).toMatch(/leave empty to keep it/);
    // Another server does not inherit the saved key: the field says so.
    const url = $<HTMLInputElement>('#audio-base-url');
    url.value = 'http://127.0.0.1:8000';
    url.dispatchEvent(new Event('input'));
    expect(key.placeholder).toMatch(/stays with the old server/);
    // The built-in engine keeps audio here: no warning.
    $<HTMLInputElement>('#audio-engine-builtin').click();
    card.render(normAudio(audio()), null);
    expect($('#audio-engine-notice').classList.contains('audio-leaves')).toBe(false);
    card.setVisible(false);
  });

  it('warns before saving a server that is not on this computer', async () => {
    const { card, $ } = audioCard({ 'GET /api/audio': ok(audio()), 'GET /api/audio/sources': ok(SOURCES), 'POST /api/audio/meters': ok({ ok: true }) });
    card.setVisible(true);
    await flush();
    $<HTMLInputElement>('#audio-engine-openai').click();
    const url = $<HTMLInputElement>('#audio-base-url');
    url.value = 'http://127.0.0.1:8000';
    url.dispatchEvent(new Event('input'));
    // The description follows the choice before it is saved (no "PocketSphinx…" for a server).
    expect($('#audio-engine-draft-notice').textContent).toMatch(/server on this computer; no audio leaves it/);
    expect($('#audio-engine-draft-notice').dataset.leaves).toBe('false');
    expect($('#audio-engine-notice').hidden).toBe(true);
    url.value = 'https://transcribe.example.com';
    url.dispatchEvent(new Event('input'));
    expect($('#audio-engine-draft-notice').hidden).toBe(false);
    expect($('#audio-engine-draft-notice').textContent).toMatch(/leaves this computer.*transcribe\.example\.com/);
    card.setVisible(false);
  });

  it('shows a refused save next to the field it concerns, and sends only what changed', async () => {
    let lastBody: Record<string, unknown> = {};
    const { card, calls, $ } = audioCard({
      'GET /api/audio': ok(audio()),
      'GET /api/audio/sources': ok(SOURCES),
      'POST /api/audio/meters': ok({ ok: true }),
      'PUT /api/audio': (body) => {
        lastBody = body as Record<string, unknown>;
        const e = lastBody.engine as { base_url?: string } | undefined;
        if (e?.base_url === 'ftp://x') return { status: 400, body: { error: 'invalid_url', message: '`engine.base_url`: http:// or https:// only' } };
        if (lastBody.them_label === '\u0007') return { status: 400, body: { error: 'invalid_label', message: '`them_label`: 1–100 characters, no control characters' } };
        if (lastBody.mic === 'alsa_input.pci-analog') return { status: 400, body: { error: 'unknown_source', message: '`mic`: no source has that name' } };
        return { status: 200, body: audio({ ...lastBody, engine: audio().engine }) };
      },
    });
    card.setVisible(true);
    await flush();
    // Engine: a bad URL.
    $<HTMLInputElement>('#audio-engine-openai').click();
    const url = $<HTMLInputElement>('#audio-base-url');
    url.value = 'ftp://x';
    url.dispatchEvent(new Event('input'));
    const model = $<HTMLInputElement>('#audio-model');
    model.value = 'tiny.en';
    model.dispatchEvent(new Event('input'));
    $<HTMLButtonElement>('#audio-save').click();
    await flush();
    expect(lastBody).toEqual({ engine: { kind: 'openai', base_url: 'ftp://x', model: 'tiny.en' } });
    expect(visible($('#audio-base-url-error'))).toBe(true);
    expect($('#audio-base-url-error').textContent).toMatch(/http:\/\/ or https:\/\//);
    expect(url.getAttribute('aria-invalid')).toBe('true');
    expect($('#audio-result').textContent).toMatch(/see the highlighted field/);
    // Typing clears it.
    url.value = 'http://127.0.0.1:8000';
    url.dispatchEvent(new Event('input'));
    expect($('#audio-base-url-error').hidden).toBe(true);
    // An empty model is caught before asking.
    model.value = ' ';
    model.dispatchEvent(new Event('input'));
    const puts = calls.filter((c) => c.method === 'PUT').length;
    $<HTMLButtonElement>('#audio-save').click();
    await flush();
    expect(calls.filter((c) => c.method === 'PUT').length).toBe(puts);
    expect(visible($('#audio-model-error'))).toBe(true);
    // Labels: the refused one.
    $<HTMLInputElement>('#audio-engine-builtin').click();
    const them = $<HTMLInputElement>('#audio-them-label');
    them.value = '\u0007';
    them.dispatchEvent(new Event('input'));
    $<HTMLButtonElement>('#audio-save').click();
    await flush();
    expect(lastBody).toEqual({ engine: { kind: 'builtin' }, them_label: '\u0007' });
    expect(visible($('#audio-them-label-error'))).toBe(true);
    expect($('#audio-you-label-error').hidden).toBe(true);
    // A source: saved on change; refused → the error under it, the saved choice shown again.
    const mic = $<HTMLSelectElement>('#audio-mic');
    mic.value = 'alsa_input.pci-analog';
    mic.dispatchEvent(new Event('change'));
    await flush();
    expect(lastBody).toEqual({ mic: 'alsa_input.pci-analog' });
    expect(visible($('#audio-mic-error'))).toBe(true);
    expect($('#audio-mic-error').textContent).toMatch(/no source has that name/);
    expect(mic.value).toBe('default');
    // Off is `null`.
    const sys = $<HTMLSelectElement>('#audio-system');
    sys.value = '';
    sys.dispatchEvent(new Event('change'));
    await flush();
    expect(lastBody).toEqual({ system: null });
    expect(sys.value).toBe('');
    card.setVisible(false);
  });

  it('Remove saved key sends api_key: null for the same server', async () => {
    let lastBody: unknown = null;
    const { card, $ } = audioCard({
      'GET /api/audio': ok(audio({ engine: REMOTE_ENGINE })),
      'GET /api/audio/sources': ok(SOURCES),
      'POST /api/audio/meters': ok({ ok: true }),
      'PUT /api/audio': (body) => {
        lastBody = body;
        return { status: 200, body: audio({ engine: { ...REMOTE_ENGINE, api_key_set: false } }) };
      },
    });
    card.setVisible(true);
    await flush();
    $<HTMLButtonElement>('#audio-key-remove').click();
    await flush();
    expect(lastBody).toEqual({ engine: { kind: 'openai', base_url: 'https://asr.example.net', model: 'whisper-1', api_key: null } });
    expect($('#audio-key-state').textContent).toBe('no key saved');
    expect($('#audio-key-remove').hidden).toBe(true);
    card.setVisible(false);
  });

  it('Test records a few seconds and shows the text and the peak; an engine failure says why', async () => {
    let answer: ApiResponse<unknown> = { status: 200, body: { channel: 'mic', source: 'alsa_input.usb-headset', seconds: 3, peak: 0.42, text: 'testing one two three' } };
    const { card, calls, $ } = audioCard({
      'GET /api/audio': ok(audio()),
      'GET /api/audio/sources': ok(SOURCES),
      'POST /api/audio/meters': ok({ ok: true }),
      'POST /api/audio/test': () => answer,
    });
    card.setVisible(true);
    await flush();
    $<HTMLButtonElement>('#audio-test-mic').click();
    await flush();
    expect(calls.find((c) => c.path === '/api/audio/test')?.body).toEqual({ channel: 'mic', seconds: 3 });
    expect($('#audio-test-mic-text').textContent).toBe('testing one two three');
    expect($('#audio-test-mic-result').textContent).toMatch(/42 %/);
    expect($('#audio-test-mic-result').textContent).toMatch(/USB Headset Microphone/);
    answer = { status: 502, body: { error: 'engine_failed', message: 'http://127.0.0.1:8000 refused the connection' } };
    $<HTMLButtonElement>('#audio-test-system').click();
    await flush();
    expect($('#audio-test-system-result').textContent).toMatch(/engine did not answer: http:\/\/127\.0\.0\.1:8000 refused/);
    answer = { status: 200, body: { channel: 'mic', source: 'alsa_input.usb-headset', seconds: 3, peak: 0, text: '' } };
    $<HTMLButtonElement>('#audio-test-mic').click();
    await flush();
    expect($('#audio-test-mic-result').textContent).toMatch(/Nothing recognised/);
    expect($('#audio-test-mic-result').textContent).toMatch(/nothing reached this source/);
    card.setVisible(false);
  });

  it('a failing channel shows its reason under its picker', async () => {
    const { card, $ } = audioCard({ 'GET /api/audio': ok(audio({ status: FAILING })), 'GET /api/audio/sources': ok(SOURCES), 'POST /api/audio/meters': ok({ ok: true }) });
    card.setVisible(true);
    await flush();
    expect($('#audio-mic-detail').textContent).toBe('USB Headset Microphone was unplugged.');
    expect($('#audio-mic-detail').classList.contains('field-error')).toBe(true);
    expect($('#audio-settings-status').textContent).toBe('Not hearing');
    card.setVisible(false);
  });
});

// ---- the App: call bar, transcript, reconnects -------------------------------------------------------

/** The app as the UI sees it: scripted answers, and the event sink to push events into. */
class MemTransport implements Transport {
  readonly kind = 'http' as const;
  sink: EventSink | null = null;
  calls: Call[] = [];
  audio: unknown = audio();
  audioStatus = 200;
  sessions: unknown[] = [call()];
  async api<T>(method: string, path: string, body?: unknown): Promise<ApiResponse<T>> {
    this.calls.push({ method, path, body });
    const r = (status: number, b: unknown) => ({ status, body: b as T });
    if (path === '/api/audio' && method === 'GET') return this.audioStatus === 200 ? r(200, this.audio) : r(503, { error: 'audio_unavailable', message: 'this build of the app cannot hear calls (no audio pipeline)' });
    if (path === `/api/calls/${CALL}/listen`) return r(200, { listening: method === 'POST' });
    if (path === '/api/calls' && method === 'POST') {
      if ((body as { listen?: boolean })?.listen && this.audioStatus !== 200) return r(503, { error: 'audio_unavailable', message: 'no pipeline' });
      return r(201, { session_id: CALL, session: call() });
    }
    if (path === '/api/sessions') return r(200, this.sessions);
    if (path.includes('/messages') || path.includes('/insights') || path.includes('/transcript')) return r(200, { items: [], next: null });
    if (path.endsWith('/typing')) return r(200, []);
    if (path === '/api/audio/sources') return r(200, SOURCES);
    if (path === '/api/providers') return r(200, { active_kind: 'incoming', kinds: [], providers: [] });
    return r(200, {});
  }
  subscribe(_cursor: () => number, sink: EventSink): Subscription {
    this.sink = sink;
    sink.state('connecting');
    sink.state('live');
    return { ready: Promise.resolve(), stop: () => undefined };
  }
  state(s: StreamState) {
    this.sink!.state(s);
  }
  push(...evs: SwEvent[]) {
    this.sink!.events(evs);
  }
  count(method: string, path: string) {
    return this.calls.filter((c) => c.method === method && c.path === path).length;
  }
}

async function startApp(t: MemTransport) {
  const mount = document.createElement('div');
  document.body.replaceChildren(mount);
  const app = new App(mount, t);
  await app.start();
  await flush(8);
  return { app, $: <T extends HTMLElement = HTMLElement>(sel: string) => mount.querySelector<T>(sel) };
}

describe('the app hearing the call', () => {
  beforeEach(() => {
    vi.spyOn(Element.prototype, 'scrollIntoView').mockImplementation(() => undefined);
  });
  afterEach(() => {
    vi.restoreAllMocks();
    document.body.replaceChildren();
  });

  it('reads the audio status when the stream connects and again when it comes back; partials from before the drop go', async () => {
    const t = new MemTransport();
    const { app } = await startApp(t);
    expect(t.count('GET', '/api/audio')).toBe(1);
    t.push(partial('t1', 'before the drop'));
    expect(app.store.partialsOf(CALL)).toHaveLength(1);
    t.audio = audio({ status: LISTENING });
    t.state('reconnecting');
    t.state('live');
    await flush();
    expect(t.count('GET', '/api/audio')).toBe(2);
    expect(app.store.audio?.status.state).toBe('listening');
    expect(app.store.partialsOf(CALL)).toEqual([]);
  });

  it('an audio_status event updates the call bar at once, then the whole view is read again', async () => {
    const t = new MemTransport();
    const { $ } = await startApp(t);
    expect($('#listen')!.hidden).toBe(false);
    expect($('#audio-status')!.textContent).toBe('Not listening');
    t.push(statusEvent(FAILING));
    await flush();
    expect($('#audio-status')!.textContent).toBe('Not hearing');
    expect($('#call-problems')!.textContent).toMatch(/Your microphone is not heard — USB Headset Microphone was unplugged\./);
    expect($('#audio-status')!.dataset.state).toBe('error');
    expect($('#listen-toggle')!.getAttribute('aria-pressed')).toBe('true');
    const before = t.count('GET', '/api/audio');
    await new Promise((r) => setTimeout(r, 350));
    expect(t.count('GET', '/api/audio')).toBe(before + 1);
  });

  it('the Listen toggle starts and stops listening to the open call; the levels show while on', async () => {
    const t = new MemTransport();
    const { $ } = await startApp(t);
    const toggle = $<HTMLButtonElement>('#listen-toggle')!;
    expect(toggle.textContent).toBe('Listen');
    expect($('#listen-meters')!.hidden).toBe(true);
    t.audio = audio({ status: LISTENING });
    toggle.click();
    await flush();
    expect(t.calls.some((c) => c.method === 'POST' && c.path === `/api/calls/${CALL}/listen`)).toBe(true);
    expect(toggle.getAttribute('aria-pressed')).toBe('true');
    // The label says what a click does now.
    expect(toggle.textContent).toBe('Stop listening');
    expect(toggle.classList.contains('is-on')).toBe(true);
    expect($('#audio-status')!.textContent).toBe('Listening');
    expect($('#listen-meters')!.hidden).toBe(false);
    t.push(level(0.25, 0.5));
    expect(Number($('#level-you')!.getAttribute('aria-valuenow'))).toBeGreaterThan(0);
    expect(Number($('#level-them')!.getAttribute('aria-valuenow'))).toBeGreaterThan(Number($('#level-you')!.getAttribute('aria-valuenow')));
    t.audio = audio();
    toggle.click();
    await flush();
    expect(t.calls.some((c) => c.method === 'DELETE' && c.path === `/api/calls/${CALL}/listen`)).toBe(true);
    expect(toggle.getAttribute('aria-pressed')).toBe('false');
  });

  it('without an audio pipeline the toggle is off and says why', async () => {
    const t = new MemTransport();
    t.audioStatus = 503;
    const { $ } = await startApp(t);
    expect($<HTMLButtonElement>('#listen-toggle')!.disabled).toBe(true);
    expect($('#listen-toggle')!.title).toMatch(/no audio pipeline/);
    expect($('#audio-status')!.textContent).toBe('Cannot hear');
  });

  it('Start call listens at once when the app can hear (and this window wants it), plainly otherwise', async () => {
    const t = new MemTransport();
    t.sessions = [];
    const { $ } = await startApp(t);
    $<HTMLButtonElement>('#start-call')!.click();
    await flush();
    expect(t.calls.find((c) => c.method === 'POST' && c.path === '/api/calls')?.body).toEqual({ listen: true });
    localStorage.setItem('stagewhisper.listen_on_start', 'off');
    const t2 = new MemTransport();
    t2.sessions = [];
    const second = await startApp(t2);
    second.$<HTMLButtonElement>('#start-call')!.click();
    await flush();
    expect(t2.calls.find((c) => c.method === 'POST' && c.path === '/api/calls')?.body).toEqual({});
    localStorage.removeItem('stagewhisper.listen_on_start');
    const t3 = new MemTransport();
    t3.sessions = [];
    t3.audioStatus = 503;
    const third = await startApp(t3);
    third.$<HTMLButtonElement>('#start-call')!.click();
    await flush();
    expect(t3.calls.find((c) => c.method === 'POST' && c.path === '/api/calls')?.body).toEqual({});
  });

  it('the Transcript tab shows partials greyed, one per turn, replaced by the final turn', async () => {
    const t = new MemTransport();
    const { app, $ } = await startApp(t);
    app.setTab('transcript');
    await flush();
    t.push(partial('t1', ''));
    const partials = () => Array.from(document.querySelectorAll<HTMLElement>('#transcript-partials .turn-partial'));
    expect(partials()).toHaveLength(1);
    expect(partials()[0].textContent).toBe('You…');
    const row = partials()[0];
    t.push(partial('t1', 'we should ship'), partial('t2', 'agreed', { channel: 'system', speaker: 'Them' }));
    expect(partials().map((p) => p.textContent)).toEqual(['Youwe should ship', 'Themagreed']);
    expect(partials()[0]).toBe(row); // updated in place
    expect($('#transcript')!.children).toHaveLength(0);
    // The final: the partial goes, the stored turn comes.
    t.push(partial('t1', 'we should ship on Friday', { final: true }));
    t.push({ id: 3, type: 'transcript_added', session_id: CALL, transcript: turn(3, 'You', 'we should ship on Friday') });
    await flush();
    expect(partials().map((p) => p.dataset.turnId)).toEqual(['t2']);
    const finals = Array.from($('#transcript')!.querySelectorAll('.turn'));
    expect(finals.map((li) => li.textContent)).toEqual([expect.stringContaining('we should ship on Friday')]);
    expect(finals[0].classList.contains('turn-partial')).toBe(false);
    // Another call's partials stay out of this one.
    t.push(partial('x1', 'elsewhere', { session_id: 'other-call' }));
    expect(partials().map((p) => p.dataset.turnId)).toEqual(['t2']);
  });

  it('the overlay shows that it is listening, and why it is not hearing', async () => {
    const t = new MemTransport();
    t.audio = audio({ status: LISTENING });
    const mount = document.createElement('div');
    document.body.replaceChildren(mount);
    const ov = new Overlay(mount, t, { openMain: () => undefined, close: () => undefined, draggable: false });
    await ov.start();
    await flush(8);
    const el = mount.querySelector<HTMLElement>('#overlay-hearing')!;
    expect(el.hidden).toBe(false);
    expect(el.dataset.state).toBe('listening');
    expect(el.textContent).toBe('Listening');
    t.push(statusEvent(FAILING));
    await flush();
    expect(el.dataset.state).toBe('error');
    // The state in a word; why, in a sentence of its own, whole.
    expect(el.textContent).toBe('Not hearing');
    expect(el.title).toMatch(/unplugged/);
    expect(mount.querySelector('#overlay-problems')!.textContent).toMatch(/Your microphone is not heard — USB Headset Microphone was unplugged\./);
    t.push(statusEvent(status()));
    await flush();
    expect(el.textContent).toBe('Not listening');
  });
});
