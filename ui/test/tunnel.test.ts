// The callback tunnel in the UI: normalising `{tunnel}` answers, the store's copy of it, and the
// small pure helpers the call bar chip and Settings → Tunnel use.

import { describe, expect, it } from 'vitest';
import { type Change, normTunnel, Store, tunnelActive } from '../src/store';
import { tunnelChip, tunnelClass, tunnelErrorField, tunnelLabel, tunnelReason } from '../src/tunnel';

const OFF = {
  state: 'off',
  kind: null,
  public_url: null,
  callback_url: 'http://127.0.0.1:4000',
  local_callback_url: 'http://127.0.0.1:4000',
  detail: 'No tunnel: the callback URL http://127.0.0.1:4000 is reachable from this computer only.',
  error: null,
  since: '2026-11-29T16:28:35.151230Z',
  attempt: 0,
  next_retry_at: null,
  verified: null,
  checked_at: null,
  assistant_allow: null,
  config: { authtoken_set: false, authtoken_source: null, check_interval_secs: null, domain: null, enabled: false, kind: null, url: null, verify: null },
};

const FAILED = {
  ...OFF,
  state: 'failed',
  kind: 'external',
  public_url: 'http://127.0.0.1:1',
  attempt: 1,
  next_retry_at: '2026-11-29T16:28:38.138831Z',
  verified: false,
  error: { code: 'connection_refused', message: 'Connection refused by http://127.0.0.1:1 (the tunnel URL): nothing is listening there.' },
  assistant_allow: { line: 'STAGEWHISPER_ALLOW_CALLBACK_URLS=http://127.0.0.1:1', value: 'http://127.0.0.1:1', variable: 'STAGEWHISPER_ALLOW_CALLBACK_URLS' },
  config: { ...OFF.config, enabled: true, kind: 'external', url: 'http://127.0.0.1:1', verify: true, check_interval_secs: 30 },
};

const ONLINE = {
  ...FAILED,
  state: 'online',
  public_url: 'https://desk.example.net',
  callback_url: 'https://desk.example.net',
  error: null,
  next_retry_at: null,
  verified: true,
  assistant_allow: { line: 'STAGEWHISPER_ALLOW_CALLBACK_URLS=https://desk.example.net', value: 'https://desk.example.net', variable: 'STAGEWHISPER_ALLOW_CALLBACK_URLS' },
};

describe('normTunnel', () => {
  it('reads a full answer', () => {
    const t = normTunnel(FAILED)!;
    expect(t.state).toBe('failed');
    expect(t.kind).toBe('external');
    expect(t.error).toEqual(FAILED.error);
    expect(t.assistant_allow?.line).toBe('STAGEWHISPER_ALLOW_CALLBACK_URLS=http://127.0.0.1:1');
    expect(t.config).toMatchObject({ enabled: true, kind: 'external', url: 'http://127.0.0.1:1', verify: true, authtoken_set: false, authtoken_source: null });
    expect(t.verified).toBe(false);
  });

  it('is lenient with missing or odd fields, and rejects what is not a tunnel', () => {
    const t = normTunnel({ state: 'connecting', kind: 'bore', assistant_allow: { line: '' }, config: { verify: null, authtoken_source: 'x' } })!;
    expect(t.kind).toBeNull();
    expect(t.assistant_allow).toBeNull();
    expect(t.config.verify).toBe(true);
    expect(t.config.authtoken_source).toBeNull();
    expect(t.config.enabled).toBe(false);
    expect(t.detail).toBe('');
    expect(normTunnel(null)).toBeNull();
    expect(normTunnel({ error: 'not_found' })).toBeNull();
  });

  it('tunnelActive: on, or not yet off', () => {
    expect(tunnelActive(null)).toBe(false);
    expect(tunnelActive(normTunnel(OFF))).toBe(false);
    expect(tunnelActive(normTunnel(FAILED))).toBe(true);
    // Stopped but still saying connecting (a race): keep watching.
    expect(tunnelActive(normTunnel({ ...OFF, state: 'connecting' }))).toBe(true);
  });
});

describe('Store.setTunnel', () => {
  it('emits a change only when something changed', () => {
    const s = new Store();
    const changes: Change[] = [];
    s.subscribe((c) => changes.push(c));
    expect(s.setTunnel(OFF)).toBe(true);
    expect(s.setTunnel({ ...OFF })).toBe(false);
    expect(s.setTunnel({ error: 'bad_request', message: 'x' })).toBe(false);
    expect(s.setTunnel(ONLINE)).toBe(true);
    expect(changes.filter((c) => c.kind === 'tunnel')).toHaveLength(2);
    expect(s.tunnel?.state).toBe('online');
  });
});

describe('tunnel helpers', () => {
  it('labels and classes', () => {
    expect(tunnelLabel('connecting')).toBe('Connecting…');
    expect(tunnelLabel(undefined)).toBe('Off');
    expect(tunnelClass('online')).toBe('chip-ok');
    expect(tunnelClass('failed')).toBe('chip-bad');
    expect(tunnelClass('connecting')).toBe('chip-checking');
    expect(tunnelClass('off')).toBe('chip-muted');
  });

  it('reasons in plain words: the app’s sentence, else ours, else the code', () => {
    expect(tunnelReason(normTunnel(FAILED))).toContain('nothing is listening there');
    expect(tunnelReason(normTunnel({ ...FAILED, error: { code: 'dns_failure', message: '' } }))).toMatch(/does not resolve/);
    expect(tunnelReason(normTunnel({ ...FAILED, error: { code: 'brand_new_thing' } }))).toBe('brand new thing');
    expect(tunnelReason(normTunnel(ONLINE))).toBe('');
  });

  it('the call bar chip', () => {
    expect(tunnelChip(null)).toMatchObject({ text: 'Tunnel: off', cls: 'chip-muted', state: 'off' });
    const f = tunnelChip(normTunnel(FAILED));
    expect(f).toMatchObject({ text: 'Tunnel: failed', cls: 'chip-bad' });
    expect(f.title).toContain('nothing is listening there');
    const o = tunnelChip(normTunnel(ONLINE));
    expect(o.text).toBe('Tunnel: online');
    expect(o.title).toContain('https://desk.example.net');
  });

  it('maps 400s to their field', () => {
    expect(tunnelErrorField('invalid_url', 'the tunnel URL must start with https:// or http://', 'external')).toBe('url');
    expect(tunnelErrorField('invalid_url', 'bad', 'ngrok')).toBe('domain');
    expect(tunnelErrorField('invalid_field', '`domain` must be a host name such as desk.example.app (got `a b`)', 'ngrok')).toBe('domain');
    expect(tunnelErrorField('missing_field', '`url` is required: the tunnel’s public origin, e.g. https://desk.example.net', 'external')).toBe('url');
    expect(tunnelErrorField('invalid_field', '`verify` must be true or false', 'external')).toBe('verify');
    expect(tunnelErrorField('invalid_field', '`check_interval_secs` must be a whole number', 'external')).toBeNull();
    expect(tunnelErrorField('settings_write_failed', 'disk full', 'external')).toBeNull();
  });
});
