// @vitest-environment happy-dom
// One delivery state: a pending chat message or transcript turn without a reason of its own
// (it waits behind another entry) shows the link's reason, so both say the same thing while the
// assistant is down; nothing is said while the link is online, being checked, or not configured
// (that case reads "queued: no assistant connected").

import { describe, expect, it } from 'vitest';
import { detailHere, nextStep, waitingReason } from '../src/assistant';
import { notHearingText } from '../src/audio';
import { deliveryNote } from '../src/chat';
import type { Assistant } from '../src/types';

const link = (status: string, detail = ''): Assistant => ({ status, detail }) as unknown as Assistant;
const noRetry = () => undefined;

describe('the reason a pending entry waits', () => {
  it('comes from the link while it is down, and only then', () => {
    expect(waitingReason(link('unreachable', 'Cannot connect to http://127.0.0.1:8644 (connection refused)'))).toBe(
      'Cannot connect to http://127.0.0.1:8644 (connection refused)',
    );
    expect(waitingReason(link('auth_failed'))).toBe('the assistant is auth failed');
    for (const s of ['online', 'checking', 'not_configured']) expect(waitingReason(link(s, 'x'))).toBeNull();
    expect(waitingReason(null)).toBeNull();
  });

  it('shows under an entry without a note of its own; its own note wins', () => {
    const pending = { delivery: 'pending' as const, delivery_error: null };
    expect(deliveryNote(pending, noRetry, 'message', null)).toBeNull();
    expect(deliveryNote(pending, noRetry, 'turn', 'Cannot connect')?.textContent).toBe('Not delivered yet: Cannot connect');
    const own = { delivery: 'pending' as const, delivery_error: { code: 'assistant_busy', message: 'Not delivered yet: busy (503)' } };
    expect(deliveryNote(own, noRetry, 'message', 'Cannot connect')?.textContent).toBe('Not delivered yet: busy (503)');
    const sent = { delivery: 'sent' as const, delivery_error: null };
    expect(deliveryNote(sent, noRetry, 'message', 'Cannot connect')).toBeNull();
  });
});

describe('the call bar when it cannot hear', () => {
  it('says "Not hearing" once', () => {
    expect(notHearingText('Not hearing anything. No sound server: connection refused', 48)).toBe('Not hearing: No sound server');
    expect(notHearingText('Not hearing anything.', 48)).toBe('Not hearing anything');
    expect(notHearingText('The microphone is gone', 48)).toBe('Not hearing: The microphone is gone');
  });
});

describe('Settings → Assistant in plain words', () => {
  it('gives one next step for each state that needs one', () => {
    expect(nextStep(link('not_configured'))).toMatch(/^Next: choose your assistant/);
    expect(nextStep(link('unreachable'))).toMatch(/^Next: start the assistant/);
    expect(nextStep(link('auth_failed'))).toMatch(/token/);
    expect(nextStep(link('online'))).toBeNull();
    expect(nextStep(null)).toBeNull();
  });

  it('does not send the user to where they already are', () => {
    expect(detailHere('No assistant is configured: set its base URL and relay token in Settings → Assistant.')).toBe(
      'No assistant is configured: set its base URL and relay token below.',
    );
  });
});
