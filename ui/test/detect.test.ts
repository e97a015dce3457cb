import { describe, expect, it } from 'vitest';
import { normAudio, sourceOptions } from '../src/audio';
import { appOptions, normDetection, seenApps, systemBody, systemValue } from '../src/detect';

describe('only the call’s app in the call-audio picker', () => {
  it('reads and writes `system` as the API spells it', () => {
    expect(systemValue({ app: 'zoom' })).toBe('app:zoom');
    expect(systemValue('call.monitor')).toBe('call.monitor');
    expect(systemValue(null)).toBeNull();
    expect(systemBody('app:zoom')).toEqual({ app: 'zoom' });
    expect(systemBody('default')).toBe('default');
    expect(systemBody('')).toBeNull();
  });

  it('offers each app seen alone, and keeps a saved one', () => {
    seenApps.clear();
    seenApps.add('zoom');
    expect(appOptions('app:Firefox').map((o) => o.value)).toEqual(['app:Firefox', 'app:zoom']);
    const list = [{ name: 'call.monitor', description: 'Monitor of Call', kind: 'monitor' as const, is_default: true }];
    const opts = sourceOptions(list, 'system', 'app:zoom').map((o) => o.value);
    expect(opts).toEqual(['default', 'call.monitor', 'app:zoom', '']);
    expect(sourceOptions(list, 'mic', null).some((o) => o.value.startsWith('app:'))).toBe(false);
  });

  it('an answer whose system is one app is still an audio view', () => {
    const a = normAudio({
      mic: null,
      system: { app: 'zoom' },
      engine: { kind: 'builtin', leaves_machine: false, notice: '' },
      you_label: 'You',
      them_label: 'Them',
      status: { state: 'idle', detail: 'Not listening.', call_id: null, channels: [], engine: { kind: 'builtin', state: 'ready', detail: '' }, backlog: { turns: 0, seconds: 0, dropped_seconds: 0 } },
    });
    expect(a?.system).toBe('app:zoom');
  });
});

describe('the detection view', () => {
  it('is read defensively', () => {
    expect(normDetection(null)).toBeNull();
    expect(normDetection({ enabled: 'yes', offers: [] })).toBeNull();
    const d = normDetection({ enabled: true, offers: [{ app: 'zoom', binary: null, label: 'zoom', since: 't' }, { nope: 1 }], status: { state: 'watching', detail: 'x' } });
    expect(d?.offers.map((o) => o.app)).toEqual(['zoom']);
    expect(d?.ignored_apps).toEqual([]);
    expect(d?.end_after_secs).toBeNull();
  });
});
