// The store's side of the assistant link: delivery state of user messages, transcript turns, and
// the link's status; plus the small pure helpers the views use to show them.

import { describe, expect, it } from 'vitest';
import { errorField, statusClass, statusLabel } from '../src/assistant';
import { type Change, deliveryView, normAssistant, normMessage, normTranscript, Store } from '../src/store';
import type { SwEvent } from '../src/types';

const SID = 'call-1';
const T0 = Date.UTC(2026, 10, 29, 12, 0, 0); // ms

let next = 1;
const ev = (type: string, body: Record<string, unknown>, id = next++): SwEvent => ({ id, type, session_id: SID, ...body });

function userMsg(id: number, over: Record<string, unknown> = {}) {
  const t = new Date(T0 + id * 1000).toISOString();
  return {
    id,
    session_id: SID,
    kind: 'user',
    text: `question ${id}`,
    message_id: `um-${id}`,
    task_id: null,
    user_message_id: null,
    error_code: null,
    occurred_at: t,
    received_at: t,
    sort_key: (T0 + id * 1000) * 1000,
    draft: false,
    delivery: 'pending',
    delivery_error: null,
    ...over,
  };
}

function turn(id: number, over: Record<string, unknown> = {}) {
  return {
    id,
    session_id: SID,
    speaker: 'Ana',
    text: `turn ${id}`,
    received_at: new Date(T0 + id * 1000).toISOString(),
    offset_ms: id * 1000,
    task_id: null,
    delivery: 'pending',
    delivery_error: null,
    ...over,
  };
}

const ASSISTANT = {
  configured: true,
  base_url: 'http://127.0.0.1:8644',
  relay_token_set: true,
  status: 'online',
  detail: 'Connected to the assistant at http://127.0.0.1:8644.',
  checked_at: '2026-11-29T12:00:00.000000Z',
  assistant_version: '0.3.1',
  supports_events_fallback: true,
  events_fallback_detail: 'The assistant offers GET /v1/events.',
  mode: 'auto',
  delivery: 'callback',
  fallback_reason: null,
  prelude: 'Coach me ({title}).',
  prelude_is_default: false,
  default_prelude: 'You are my live coach during a call ({title}).',
  callback_url: 'http://127.0.0.1:39537',
  last_error: null,
};

function track(s: Store): Change[] {
  const seen: Change[] = [];
  s.subscribe((c) => seen.push(c));
  return seen;
}

const deliveries = (s: Store) => s.conv(SID)?.messages.map((m) => m.delivery) ?? [];
const turnTexts = (s: Store) => s.conv(SID)?.transcript.map((t) => t.text) ?? [];

describe('delivery of user messages', () => {
  it('normalises delivery and delivery_error (unknown values are dropped)', () => {
    expect(normMessage(userMsg(1))?.delivery).toBe('pending');
    expect(normMessage(userMsg(1, { delivery: 'bogus' }))?.delivery).toBeNull();
    expect(normMessage(userMsg(1, { delivery: undefined }))?.delivery).toBeNull();
    expect(normMessage(userMsg(1, { delivery_error: { code: 'assistant_busy', message: 'busy' } }))?.delivery_error).toEqual({
      code: 'assistant_busy',
      message: 'busy',
    });
    expect(normMessage(userMsg(1, { delivery_error: {} }))?.delivery_error).toBeNull();
    expect(normMessage(userMsg(1, { delivery_error: 'plain words' }))?.delivery_error).toEqual({ code: '', message: 'plain words' });
  });

  it('pending → pending with a note → sent, updated in place by message_updated', () => {
    const s = new Store();
    const seen = track(s);
    s.apply(ev('message_added', { message: userMsg(1) }));
    s.apply(ev('message_updated', { message: userMsg(1, { task_id: 't1', delivery_error: { code: 'assistant_unreachable', message: 'Cannot connect' } }) }));
    let m = s.conv(SID)!.messages[0];
    expect(m.delivery).toBe('pending');
    expect(deliveryView(m)).toEqual({ state: 'sending', label: 'sending…', note: 'Not delivered yet: Cannot connect', canRetry: false });
    // The app's own notes already start with "Not delivered yet:" — said once.
    expect(deliveryView({ delivery: 'pending', delivery_error: { code: 'assistant_error', message: 'Not delivered yet: 503; retrying.' } }).note).toBe(
      'Not delivered yet: 503; retrying.',
    );
    s.apply(ev('message_updated', { message: userMsg(1, { task_id: 't1', delivery: 'sent' }) }));
    m = s.conv(SID)!.messages[0];
    expect(s.conv(SID)!.messages).toHaveLength(1);
    expect(m.delivery).toBe('sent');
    expect(m.delivery_error).toBeNull();
    expect(deliveryView(m)).toMatchObject({ state: 'sent', note: null, canRetry: false });
    expect(seen.filter((c) => c.kind === 'message-update')).toHaveLength(2);
  });

  it('failed shows its reason and can be retried; the retry answer shows at once (pending, new task)', () => {
    const s = new Store();
    s.apply(ev('message_added', { message: userMsg(1) }));
    s.apply(
      ev('message_updated', {
        message: userMsg(1, { task_id: 't1', delivery: 'failed', delivery_error: { code: 'assistant_rejected', message: 'The assistant refused it (400 nope).' } }),
      }),
    );
    const failed = s.conv(SID)!.messages[0];
    expect(deliveryView(failed)).toEqual({ state: 'failed', label: 'failed', note: 'The assistant refused it (400 nope).', canRetry: true });
    // A failure without words still says something.
    expect(deliveryView({ delivery: 'failed', delivery_error: null }).note).toBeTruthy();

    const c0 = s.cursor;
    s.mergeMessage(userMsg(1, { task_id: 't2', delivery: 'pending' }), c0, true);
    expect(deliveries(s)).toEqual(['pending']);
    expect(s.conv(SID)!.messages[0].task_id).toBe('t2');
    // Then the stream reports it sent.
    s.apply(ev('message_updated', { message: userMsg(1, { task_id: 't2', delivery: 'sent' }) }));
    expect(deliveries(s)).toEqual(['sent']);
  });

  it('a retry answer that arrives after a newer event does not roll it back', () => {
    const s = new Store();
    s.apply(ev('message_added', { message: userMsg(1, { delivery: 'failed' }) }));
    const c0 = s.cursor;
    // The retry's own events come first: pending, then sent.
    s.apply(ev('message_updated', { message: userMsg(1, { task_id: 't2', delivery: 'pending' }) }));
    s.apply(ev('message_updated', { message: userMsg(1, { task_id: 't2', delivery: 'sent' }) }));
    s.mergeMessage(userMsg(1, { task_id: 't2', delivery: 'pending' }), c0, true);
    expect(deliveries(s)).toEqual(['sent']);
  });

  it('without replace, a known message is not overwritten by an API answer (the send path)', () => {
    const s = new Store();
    s.apply(ev('message_added', { message: userMsg(1) }));
    s.apply(ev('message_updated', { message: userMsg(1, { delivery: 'sent' }) }));
    s.mergeMessage(userMsg(1), 0);
    expect(deliveries(s)).toEqual(['sent']);
  });

  it('a snapshot older than a delivery event keeps the event state', () => {
    const s = new Store();
    const c0 = s.cursor;
    s.apply(ev('message_added', { message: userMsg(1) }));
    s.apply(ev('message_updated', { message: userMsg(1, { delivery: 'sent' }) }));
    s.loadConversation(SID, { messages: [userMsg(1, { delivery: 'pending' })] }, c0);
    expect(deliveries(s)).toEqual(['sent']);
  });

  it('assistant messages have no delivery state to show', () => {
    expect(deliveryView({ delivery: null, delivery_error: null })).toEqual({ state: null, label: '', note: null, canRetry: false });
  });
});

describe('transcript', () => {
  it('normalises a turn; an `insights:` session id is routed to its call', () => {
    const t = normTranscript(turn(1, { session_id: `insights:${SID}`, speaker: '  ' }))!;
    expect(t.session_id).toBe(SID);
    expect(t.speaker).toBeNull();
    expect(t.offset_ms).toBe(1000);
    expect(normTranscript({ text: 'no id' })).toBeNull();
  });

  it('transcript_added appends oldest first; never shows in the chat', () => {
    const s = new Store();
    const seen = track(s);
    s.apply(ev('transcript_added', { transcript: turn(2) }));
    s.apply(ev('transcript_added', { transcript: turn(1) })); // late: inserted in order
    s.apply(ev('transcript_added', { transcript: turn(3) }));
    expect(turnTexts(s)).toEqual(['turn 1', 'turn 2', 'turn 3']);
    expect(s.conv(SID)!.messages).toEqual([]);
    const added = seen.filter((c): c is Extract<Change, { kind: 'transcript' }> => c.kind === 'transcript');
    expect(added.map((c) => c.added?.id)).toEqual([2, 1, 3]);
  });

  it('transcript_updated changes a turn in place (pending → failed → pending → sent)', () => {
    const s = new Store();
    const seen = track(s);
    s.apply(ev('transcript_added', { transcript: turn(1) }));
    s.apply(ev('transcript_added', { transcript: turn(2) }));
    s.apply(
      ev('transcript_updated', { transcript: turn(1, { delivery: 'failed', delivery_error: { code: 'assistant_rejected', message: 'no' } }) }),
    );
    expect(s.conv(SID)!.transcript.map((t) => t.delivery)).toEqual(['failed', 'pending']);
    expect(deliveryView(s.conv(SID)!.transcript[0]).canRetry).toBe(true);
    s.mergeTurn(turn(1, { delivery: 'pending', task_id: 'new' }), s.cursor);
    s.apply(ev('transcript_updated', { transcript: turn(1, { delivery: 'sent', task_id: 'new' }) }));
    expect(s.conv(SID)!.transcript.map((t) => t.delivery)).toEqual(['sent', 'pending']);
    expect(turnTexts(s)).toEqual(['turn 1', 'turn 2']);
    const updates = seen.filter((c) => c.kind === 'transcript' && c.added === null);
    expect(updates).toHaveLength(3);
  });

  it('a snapshot fills the list and marks it loaded; an event newer than the request wins', () => {
    const s = new Store();
    expect(s.ensureConv(SID).transcriptLoaded).toBe(false);
    const c0 = s.cursor;
    s.apply(ev('transcript_added', { transcript: turn(2, { delivery: 'sent' }) }));
    s.loadTranscript(SID, [turn(1, { delivery: 'sent' }), turn(2, { delivery: 'pending' })], c0);
    const c = s.conv(SID)!;
    expect(c.transcriptLoaded).toBe(true);
    expect(c.loaded).toBe(false); // only the transcript was loaded
    expect(c.transcript.map((t) => [t.text, t.delivery])).toEqual([
      ['turn 1', 'sent'],
      ['turn 2', 'sent'],
    ]);
  });

  it('an empty snapshot is an empty, loaded transcript (what turns Summarise off)', () => {
    const s = new Store();
    s.loadConversation(SID, { messages: [], transcript: [] }, 0);
    expect(s.conv(SID)!.transcriptLoaded).toBe(true);
    expect(s.conv(SID)!.transcript).toEqual([]);
  });

  it('a snapshot without a transcript (a chat, an older app) leaves it not loaded', () => {
    const s = new Store();
    s.loadConversation(SID, { messages: [] }, 0);
    expect(s.conv(SID)!.transcriptLoaded).toBe(false);
  });

  it('turns of a deleted session are dropped', () => {
    const s = new Store();
    s.apply(ev('session_created', { session: { session_id: SID, is_call: true, created_at: new Date(T0).toISOString() } }));
    s.apply(ev('transcript_added', { transcript: turn(1) }));
    s.apply(ev('session_deleted', {}));
    s.apply(ev('transcript_added', { transcript: turn(2) }));
    s.mergeTurn(turn(3), s.cursor);
    expect(s.conv(SID)).toBeUndefined();
  });
});

describe('assistant link status', () => {
  it('normalises the view; rejects what is not one', () => {
    const a = normAssistant(ASSISTANT)!;
    expect(a.status).toBe('online');
    expect(a.supports_events_fallback).toBe(true);
    expect(normAssistant({ ...ASSISTANT, supports_events_fallback: null })!.supports_events_fallback).toBeNull();
    expect(normAssistant({ ...ASSISTANT, last_error: { code: 'assistant_rejected', message: 'no', at: 't' } })!.last_error).toEqual({
      code: 'assistant_rejected',
      message: 'no',
      at: 't',
    });
    expect(normAssistant({ ok: false, error: 'not_found' })).toBeNull();
    expect(normAssistant(null)).toBeNull();
  });

  it('setAssistant stores the state and announces only real changes', () => {
    const s = new Store();
    const seen = track(s);
    expect(s.assistant).toBeNull();
    expect(s.setAssistant({ ...ASSISTANT, status: 'checking', detail: '' })).toBe(true);
    expect(s.setAssistant({ ...ASSISTANT, status: 'checking', detail: '' })).toBe(false); // same again (a poll)
    expect(s.setAssistant(ASSISTANT)).toBe(true);
    expect(s.setAssistant('garbage')).toBe(false);
    expect(s.assistant?.status).toBe('online');
    expect(seen.filter((c) => c.kind === 'assistant')).toHaveLength(2);
  });

  it('an assistant_status event patches status, detail and check time over the last snapshot', () => {
    const s = new Store();
    const seen = track(s);
    s.setAssistant(ASSISTANT, 0);
    s.apply(
      ev('assistant_status', { session_id: null, assistant: { status: 'unreachable', detail: 'Cannot connect', checked_at: '2026-11-29T12:01:00Z' } }, 50),
    );
    expect(s.cursor).toBe(50);
    expect(s.assistant).toMatchObject({
      status: 'unreachable',
      detail: 'Cannot connect',
      checked_at: '2026-11-29T12:01:00Z',
      configured: true, // not in the event: kept
      base_url: ASSISTANT.base_url,
      relay_token_set: true,
      last_error: null,
    });
    expect(seen.filter((c) => c.kind === 'assistant').map((c) => (c as { fromEvent: boolean }).fromEvent)).toEqual([false, true]);
  });

  it('a status event before any snapshot still gives a usable view', () => {
    const s = new Store();
    s.apply(ev('assistant_status', { session_id: null, assistant: { status: 'online', detail: 'Connected.' } }, 7));
    expect(s.assistant).toMatchObject({ status: 'online', detail: 'Connected.', configured: true });
    s.apply(ev('assistant_status', { session_id: null, assistant: { status: 'not_configured', detail: 'Set it up.' } }, 8));
    expect(s.assistant).toMatchObject({ status: 'not_configured', configured: false, relay_token_set: false });
  });

  it('a snapshot requested before a status event keeps the event status; a later one replaces it', () => {
    const s = new Store();
    s.setAssistant(ASSISTANT, 0);
    const c0 = s.cursor;
    s.apply(ev('assistant_status', { session_id: null, assistant: { status: 'auth_failed', detail: 'Wrong token', checked_at: 't1' } }));
    // A poll that left before the event answers with the old status, and a new last_error.
    s.setAssistant({ ...ASSISTANT, last_error: { code: 'assistant_auth_failed', message: 'x', at: 't1' } }, c0);
    expect(s.assistant).toMatchObject({ status: 'auth_failed', detail: 'Wrong token', last_error: { code: 'assistant_auth_failed' } });
    s.setAssistant({ ...ASSISTANT, status: 'online', detail: 'Back.' }, s.cursor);
    expect(s.assistant).toMatchObject({ status: 'online', detail: 'Back.', last_error: null });
  });

  it('malformed status events are skipped (the cursor still advances)', () => {
    const s = new Store();
    s.setAssistant(ASSISTANT, 0);
    s.apply(ev('assistant_status', { session_id: null, assistant: { detail: 'no status' } }, 60));
    s.apply(ev('assistant_status', { session_id: null }, 61));
    expect(s.cursor).toBe(61);
    expect(s.assistant?.status).toBe('online');
  });

  it('labels and chip classes per status', () => {
    expect(statusLabel('online')).toBe('Online');
    expect(statusLabel('auth_failed')).toBe('Auth failed');
    expect(statusLabel('misconfigured')).toBe('Misconfigured');
    expect(statusLabel(null)).toBe('Not configured');
    expect(statusLabel('some_new_state')).toBe('some new state');
    expect(statusClass('online')).toBe('chip-ok');
    expect(statusClass('unreachable')).toBe('chip-warn');
    expect(statusClass('auth_failed')).toBe('chip-bad');
    expect(statusClass('not_configured')).toBe('chip-muted');
  });

  it('API errors of PUT /api/assistant land next to the right field', () => {
    expect(errorField('invalid_base_url', 'invalid base_url: …')).toBe('base_url');
    expect(errorField('invalid_relay_token', '…')).toBe('relay_token');
    expect(errorField('prelude_too_long', '…')).toBe('prelude');
    expect(errorField('missing_field', 'no relay token is saved yet: send `relay_token`')).toBe('relay_token');
    expect(errorField('missing_field', '`base_url` is required (e.g. http://127.0.0.1:8644)')).toBe('base_url');
    expect(errorField('invalid_field', '`mode` must be "auto", "callback" or "events"')).toBe('mode');
    expect(errorField('invalid_field', '`prelude` must be a string or null')).toBe('prelude');
    expect(errorField('config_write_failed', 'disk full')).toBeNull();
  });
});
