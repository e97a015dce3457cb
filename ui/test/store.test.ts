import { describe, expect, it } from 'vitest';
import { type Change, insightVisible, normInsight, Store, timeMicros } from '../src/store';
import type { SwEvent } from '../src/types';

// ---- builders --------------------------------------------------------------------------------

const SID = 'chat-1';
const T0 = Date.UTC(2026, 10, 29, 12, 0, 0) * 1000; // µs

let nextCursor = 1;
function ev(type: string, body: Record<string, unknown>, id = nextCursor++): SwEvent {
  return { id, type, session_id: (body.session_id as string) ?? SID, ...body };
}

/** A live-only event (no id, `live: true`), as typing indicators come. */
function live(type: string, body: Record<string, unknown>): SwEvent {
  return { id: 0, type, live: true, session_id: (body.session_id as string) ?? SID, ...body } as SwEvent;
}

function msg(id: number | string, text: string, over: Record<string, unknown> = {}) {
  const sortKey = (over.sort_key as number) ?? T0 + Number(String(id).replace(/\D/g, '') || 0) * 1000;
  return {
    id,
    session_id: SID,
    kind: 'assistant',
    text,
    message_id: `m-${id}`,
    task_id: 't',
    user_message_id: null,
    error_code: null,
    occurred_at: new Date(sortKey / 1000).toISOString(),
    received_at: new Date(sortKey / 1000).toISOString(),
    sort_key: sortKey,
    draft: false,
    ...over,
  };
}

function insight(id: number, text: string, over: Record<string, unknown> = {}) {
  return {
    id,
    session_id: SID,
    text,
    task_id: 't',
    message_id: `i-${id}`,
    occurred_at: new Date(T0 / 1000 + id * 1000).toISOString(),
    received_at: new Date(T0 / 1000 + id * 1000).toISOString(),
    offset_ms: id * 1000,
    draft: false,
    ...over,
  };
}

const session = (sid: string, over: Record<string, unknown> = {}) => ({
  session_id: sid,
  kind: 'chat',
  is_call: true,
  title: null,
  created_at: new Date(T0 / 1000).toISOString(),
  ended_at: null,
  insights_session_id: `insights:${sid}`,
  ...over,
});

function track(store: Store): Change[] {
  const seen: Change[] = [];
  store.subscribe((c) => seen.push(c));
  return seen;
}

const texts = (s: Store, sid = SID) => s.conv(sid)?.messages.map((m) => m.text) ?? [];

// ---- tests -----------------------------------------------------------------------------------

describe('event application and the cursor', () => {
  it('applies events in order and advances the cursor', () => {
    const s = new Store();
    expect(s.apply({ id: 1, type: 'message_added', session_id: SID, message: msg(1, 'a') })).toBe(true);
    expect(s.apply({ id: 5, type: 'message_added', session_id: SID, message: msg(2, 'b') })).toBe(true);
    expect(s.cursor).toBe(5);
    expect(texts(s)).toEqual(['a', 'b']);
  });

  it('ignores an event whose id is ≤ the cursor (idempotent)', () => {
    const s = new Store();
    const batch = [
      { id: 1, type: 'message_added', session_id: SID, message: msg(1, 'a') },
      { id: 2, type: 'message_added', session_id: SID, message: msg(2, 'b') },
    ];
    expect(s.applyBatch(batch)).toBe(2);
    const seen = track(s);
    expect(s.applyBatch(batch)).toBe(0);
    expect(s.apply({ id: 2, type: 'message_updated', session_id: SID, message: msg(2, 'CHANGED') })).toBe(false);
    expect(seen).toEqual([]);
    expect(texts(s)).toEqual(['a', 'b']);
    expect(s.cursor).toBe(2);
  });

  it('resuming after a drop with an overlapping replay leaves no gap and no duplicate', () => {
    // The full history, as the server would send it.
    const all: SwEvent[] = [];
    let c = 1;
    all.push({ id: c++, type: 'session_created', session_id: SID, session: session(SID) });
    for (let i = 1; i <= 12; i++) all.push({ id: c++, type: 'message_added', session_id: SID, message: msg(i, `m${i}`) });
    all.push({ id: c++, type: 'message_added', session_id: SID, message: msg(20, 'dr', { draft: true }) });
    all.push({ id: c++, type: 'message_updated', session_id: SID, message: msg(20, 'draft gr', { draft: true }) });
    all.push({ id: c++, type: 'message_updated', session_id: SID, message: msg(20, 'draft grown', { draft: false }) });
    all.push({ id: c++, type: 'insight_added', session_id: SID, insight: insight(1, 'budget') });

    const reference = new Store();
    reference.applyBatch(all);

    const s = new Store();
    const seen = track(s);
    s.applyBatch(all.slice(0, 7)); // …then the stream drops
    const resumeFrom = s.cursor;
    expect(resumeFrom).toBe(7);
    // The server answers `after=7`; a careless server might even replay from earlier.
    s.applyBatch(all.slice(4));
    expect(s.cursor).toBe(reference.cursor);
    expect(texts(s)).toEqual(texts(reference));
    expect(texts(s)).toEqual([...Array.from({ length: 12 }, (_, i) => `m${i + 1}`), 'draft grown']);
    const inserts = seen.filter((x) => x.kind === 'message-insert');
    expect(inserts.length).toBe(13); // each message inserted exactly once
    expect(s.conv(SID)!.insights.map((i) => i.text)).toEqual(['budget']);
  });

  it('skips unknown event types but still advances the cursor', () => {
    const s = new Store();
    expect(s.apply({ id: 3, type: 'something_new', session_id: SID })).toBe(true);
    expect(s.cursor).toBe(3);
  });

  it('ignores malformed events', () => {
    const s = new Store();
    expect(s.apply({ id: Number.NaN, type: 'message_added' })).toBe(false);
    expect(s.apply({ id: 1, type: 'message_added', session_id: SID, message: { text: 'no id' } })).toBe(true);
    expect(s.conv(SID)?.messages.length ?? 0).toBe(0);
  });

  it('accepts a payload under `payload` too', () => {
    const s = new Store();
    s.apply({ id: 1, type: 'message_added', session_id: SID, payload: msg(1, 'via payload') });
    expect(texts(s)).toEqual(['via payload']);
  });
});

describe('ordering', () => {
  it('inserts by (sort_key, id), including late messages', () => {
    const s = new Store();
    const seen = track(s);
    s.apply(ev('message_added', { message: msg(3, 'c', { sort_key: T0 + 300 }) }));
    s.apply(ev('message_added', { message: msg(1, 'a', { sort_key: T0 + 100 }) }));
    s.apply(ev('message_added', { message: msg(2, 'b', { sort_key: T0 + 200 }) }));
    s.apply(ev('message_added', { message: msg(5, 'b2', { sort_key: T0 + 200 }) })); // same key: by id
    s.apply(ev('message_added', { message: msg(4, 'b1', { sort_key: T0 + 200 }) }));
    expect(texts(s)).toEqual(['a', 'b', 'b1', 'b2', 'c']);
    const idx = seen.filter((x): x is Extract<Change, { kind: 'message-insert' }> => x.kind === 'message-insert').map((x) => x.index);
    expect(idx).toEqual([0, 0, 1, 2, 2]);
  });

  it('orders string ids and numeric ids consistently', () => {
    const s = new Store();
    s.apply(ev('message_added', { message: msg('b', 'second', { sort_key: T0 }) }));
    s.apply(ev('message_added', { message: msg('a', 'first', { sort_key: T0 }) }));
    expect(texts(s)).toEqual(['first', 'second']);
  });

  it('derives a sort key from occurred_at when sort_key is missing', () => {
    const s = new Store();
    const a = msg(1, 'late', { sort_key: undefined, occurred_at: '2026-11-29T12:00:02.000002Z' });
    const b = msg(2, 'early', { sort_key: undefined, occurred_at: '2026-11-29T12:00:02.000001Z' });
    delete (a as Record<string, unknown>).sort_key;
    delete (b as Record<string, unknown>).sort_key;
    s.apply(ev('message_added', { message: a }));
    s.apply(ev('message_added', { message: b }));
    expect(texts(s)).toEqual(['early', 'late']);
  });

  it('parses RFC 3339 times to the microsecond', () => {
    expect(timeMicros('2026-11-29T12:00:00Z')).toBe(T0);
    expect(timeMicros('2026-11-29T12:00:00.123456Z')).toBe(T0 + 123456);
    expect(timeMicros('2026-11-29T12:00:00.5Z')).toBe(T0 + 500000);
    expect(timeMicros('2026-11-29T13:00:00.000001+01:00')).toBe(T0 + 1);
    expect(Number.isNaN(timeMicros('yesterday'))).toBe(true);
  });
});

describe('drafts', () => {
  it('a draft grows in place and settles in place', () => {
    const s = new Store();
    const seen = track(s);
    s.apply(ev('message_added', { message: msg(1, 'before') }));
    s.apply(ev('message_added', { message: msg(7, 'Hel', { draft: true }) }));
    s.apply(ev('message_updated', { message: msg(7, 'Hello wor', { draft: true }) }));
    s.apply(ev('message_updated', { message: msg(7, 'Hello world', { draft: false }) }));
    const c = s.conv(SID)!;
    expect(c.messages.map((m) => [m.text, m.draft])).toEqual([
      ['before', false],
      ['Hello world', false],
    ]);
    const updates = seen.filter((x) => x.kind === 'message-update');
    expect(updates.length).toBe(2);
    expect(updates.every((u) => u.kind === 'message-update' && u.index === 1)).toBe(true);
  });

  it('a settled message that changes its sort key moves', () => {
    const s = new Store();
    const seen = track(s);
    s.apply(ev('message_added', { message: msg(1, 'a', { sort_key: T0 + 1 }) }));
    s.apply(ev('message_added', { message: msg(2, 'draft', { sort_key: T0 + 5, draft: true }) }));
    s.apply(ev('message_added', { message: msg(3, 'c', { sort_key: T0 + 3 }) }));
    expect(texts(s)).toEqual(['a', 'c', 'draft']);
    s.apply(ev('message_updated', { message: msg(2, 'final', { sort_key: T0 + 2 }) }));
    expect(texts(s)).toEqual(['a', 'final', 'c']);
    expect(seen.at(-1)).toMatchObject({ kind: 'message-move', from: 2, to: 1 });
  });

  it('an update for an unknown message is an insert', () => {
    const s = new Store();
    s.apply(ev('message_updated', { message: msg(9, 'only update') }));
    expect(texts(s)).toEqual(['only update']);
  });
});

describe('typing', () => {
  it('shows by scope with its label and clears on typing_stopped (live events, no cursor)', () => {
    const s = new Store();
    s.apply(live('typing_started', { typing: { session_id: SID, scope: 'u1', label: 'searching', since: 'x' } }));
    s.apply(live('typing_started', { typing: { session_id: SID, scope: 'u2', label: null, since: 'y' } }));
    const c = s.conv(SID)!;
    expect([...c.typing.values()].map((t) => [t.scope, t.label])).toEqual([
      ['u1', 'searching'],
      ['u2', null],
    ]);
    s.apply(live('typing_stopped', { typing: { session_id: SID, scope: 'u1' }, reason: 'message' }));
    expect([...c.typing.keys()]).toEqual(['u2']);
    s.apply(live('typing_stopped', { typing: { session_id: SID, scope: 'u2' }, reason: 'timeout' }));
    expect(c.typing.size).toBe(0);
    expect(s.cursor).toBe(0);
    expect(s.liveSeq).toBe(4);
  });

  it('a label change replaces the indicator; a blank label counts as none', () => {
    const s = new Store();
    s.apply(live('typing_started', { typing: { session_id: SID, scope: 'u1', label: 'thinking' } }));
    s.apply(live('typing_started', { typing: { session_id: SID, scope: 'u1', label: '  ' } }));
    expect(s.conv(SID)!.typing.get('u1')!.label).toBeNull();
  });

  it('typing of the insights session never shows in the chat', () => {
    const s = new Store();
    s.apply(ev('session_created', { session: session(SID) }));
    s.apply(live('typing_started', { session_id: `insights:${SID}`, typing: { session_id: `insights:${SID}`, scope: 't1' } }));
    const c = s.conv(SID)!;
    expect(c.typing.size).toBe(0);
    expect(c.insightTyping.size).toBe(1);
  });

  it('stopping an unknown scope changes nothing', () => {
    const s = new Store();
    const seen = track(s);
    s.apply(live('typing_stopped', { typing: { session_id: SID, scope: 'nope' }, reason: 'completed' }));
    expect(seen.filter((c) => c.kind === 'typing')).toEqual([]);
  });

  it('a logged typing event (an older version wrote it) is history: it moves the cursor, shows nothing', () => {
    const s = new Store();
    const seen = track(s);
    expect(s.apply(ev('typing_started', { typing: { session_id: SID, scope: 'u1', label: 'old' } }, 7))).toBe(true);
    expect(s.cursor).toBe(7);
    expect(s.conv(SID)?.typing.size ?? 0).toBe(0);
    expect(seen.filter((c) => c.kind === 'typing')).toEqual([]);
  });
});

describe('insights', () => {
  it('go to the insights list of their call, newest first, never to the chat', () => {
    const s = new Store();
    s.apply(ev('session_created', { session: session(SID) }));
    s.apply(ev('insight_added', { insight: insight(1, 'first') }));
    s.apply(ev('insight_added', { insight: insight(3, 'third') }));
    s.apply(ev('insight_added', { insight: insight(2, 'second') }));
    const c = s.conv(SID)!;
    expect(c.insights.map((i) => i.text)).toEqual(['third', 'second', 'first']);
    expect(c.messages.length).toBe(0);
  });

  it('a message event for an `insights:` session never lands in the chat', () => {
    const s = new Store();
    s.apply(ev('message_added', { session_id: `insights:${SID}`, message: { ...msg(1, 'stray'), session_id: `insights:${SID}` } }));
    expect(s.conv(SID)?.messages.length ?? 0).toBe(0);
  });

  it('an insight whose session_id is the insights session is routed to its call', () => {
    const s = new Store();
    s.apply(ev('insight_added', { insight: { ...insight(1, 'x'), session_id: `insights:${SID}` } }));
    expect(s.conv(SID)!.insights.map((i) => i.text)).toEqual(['x']);
  });

  it('`none` is never shown, in any case, with or without a dot, or when flagged hidden', () => {
    for (const t of ['none', 'None', 'NONE.', ' none. ', 'None.']) {
      expect(insightVisible(normInsight(insight(1, t))!)).toBe(false);
    }
    expect(insightVisible(normInsight(insight(1, 'Budget', { hidden: true }))!)).toBe(false);
    expect(insightVisible(normInsight(insight(1, 'None of them agreed'))!)).toBe(true);
    expect(insightVisible(normInsight(insight(1, 'nonesuch'))!)).toBe(true);

    const s = new Store();
    const seen = track(s);
    s.apply(ev('insight_added', { insight: insight(1, 'None.') }));
    s.apply(ev('insight_added', { insight: insight(2, 'hidden one', { hidden: true }) }));
    expect(s.conv(SID)!.insights).toEqual([]);
    expect(s.unreadCount(SID)).toBe(0);
    expect(seen.filter((c) => c.kind === 'insights' || c.kind === 'unread')).toEqual([]);
  });

  it('a draft that could still become `none` stays hidden until it cannot', () => {
    const s = new Store();
    s.apply(ev('insight_added', { insight: insight(1, 'No', { draft: true }) }));
    expect(s.conv(SID)!.insights).toEqual([]);
    s.apply(ev('insight_updated', { insight: insight(1, 'Non', { draft: true }) }));
    expect(s.conv(SID)!.insights).toEqual([]);
    s.apply(ev('insight_updated', { insight: insight(1, 'Nonetheless, budget', { draft: true }) }));
    expect(s.conv(SID)!.insights.map((i) => i.text)).toEqual(['Nonetheless, budget']);
    s.apply(ev('insight_updated', { insight: insight(1, 'Nonetheless, budget is 50k') }));
    expect(s.conv(SID)!.insights.map((i) => [i.text, i.draft])).toEqual([['Nonetheless, budget is 50k', false]]);
    expect(s.unreadCount(SID)).toBe(1);
  });

  it('a shown insight that settles as `none` disappears (and is not unread)', () => {
    const s = new Store();
    s.apply(ev('insight_added', { insight: insight(1, 'None — wait', { draft: true }) }));
    expect(s.unreadCount(SID)).toBe(1);
    s.apply(ev('insight_updated', { insight: insight(1, 'None.') }));
    expect(s.conv(SID)!.insights).toEqual([]);
    expect(s.unreadCount(SID)).toBe(0);
  });
});

describe('unread badge', () => {
  it('counts insights that arrive while the Insights tab is not open, once each', () => {
    const s = new Store();
    s.setInsightsOpen(null); // on Chat
    s.apply(ev('insight_added', { insight: insight(1, 'a', { draft: true }) }));
    s.apply(ev('insight_updated', { insight: insight(1, 'ab', { draft: true }) }));
    s.apply(ev('insight_updated', { insight: insight(1, 'abc') }));
    s.apply(ev('insight_added', { insight: insight(2, 'second') }));
    expect(s.unreadCount(SID)).toBe(2);
    s.setInsightsOpen(SID);
    expect(s.unreadCount(SID)).toBe(0);
    s.apply(ev('insight_added', { insight: insight(3, 'seen right away') }));
    expect(s.unreadCount(SID)).toBe(0);
    s.setInsightsOpen(null);
    s.apply(ev('insight_added', { insight: insight(4, 'later') }));
    expect(s.unreadCount(SID)).toBe(1);
  });

  it('counts per conversation; another call being open does not read this one', () => {
    const s = new Store();
    s.setInsightsOpen('other');
    s.apply(ev('insight_added', { insight: insight(1, 'a') }));
    expect(s.unreadCount(SID)).toBe(1);
    expect(s.unreadCount('other')).toBe(0);
    expect(s.unreadCount(null)).toBe(0);
  });

  it('insights from a snapshot are not unread', () => {
    const s = new Store();
    s.loadConversation(SID, { messages: [], insights: [insight(1, 'old'), insight(2, 'older')], typing: [] }, 0);
    expect(s.conv(SID)!.insights.length).toBe(2);
    expect(s.unreadCount(SID)).toBe(0);
  });

  it('a replayed insight already known is not counted again', () => {
    const s = new Store();
    s.loadConversation(SID, { insights: [insight(1, 'known')] }, 0);
    s.apply(ev('insight_added', { insight: insight(1, 'known') }));
    expect(s.unreadCount(SID)).toBe(0);
  });
});

describe('snapshots merged with the live stream', () => {
  it('a snapshot fills an empty conversation', () => {
    const s = new Store();
    s.loadConversation(SID, { messages: [msg(2, 'b'), msg(1, 'a')], insights: [], typing: [{ session_id: SID, scope: 'u', label: 'x' }] }, 0);
    const c = s.conv(SID)!;
    expect(c.loaded).toBe(true);
    expect(texts(s)).toEqual(['a', 'b']);
    expect(c.typing.get('u')!.label).toBe('x');
  });

  it('an entity changed by an event after the request keeps the event state', () => {
    const s = new Store();
    s.apply({ id: 10, type: 'message_added', session_id: SID, message: msg(1, 'draft', { draft: true }) });
    const atRequest = s.cursor; // 10
    // While the snapshot is in flight, the draft settles (event 11).
    s.apply({ id: 11, type: 'message_updated', session_id: SID, message: msg(1, 'final') });
    // The snapshot was taken before event 11 and still has the draft.
    s.loadConversation(SID, { messages: [msg(1, 'draft', { draft: true }), msg(2, 'other')] }, atRequest);
    expect(s.conv(SID)!.messages.map((m) => [m.text, m.draft])).toEqual([
      ['final', false],
      ['other', false],
    ]);
  });

  it('a snapshot newer than what the store had replaces it', () => {
    const s = new Store();
    s.apply({ id: 3, type: 'message_added', session_id: SID, message: msg(1, 'dr', { draft: true }) });
    s.loadConversation(SID, { messages: [msg(1, 'settled')] }, 3);
    expect(texts(s)).toEqual(['settled']);
  });

  it('typing from an older snapshot does not resurrect an indicator that stopped since', () => {
    const s = new Store();
    const asked = s.liveSeq; // the typing list is requested here
    s.apply(live('typing_stopped', { typing: { session_id: SID, scope: 'u1' }, reason: 'message' }));
    s.loadConversation(SID, { typing: [{ session_id: SID, scope: 'u1', label: null }], typingAt: asked }, 0);
    expect(s.conv(SID)!.typing.size).toBe(0);
    s.loadConversation(SID, { typing: [], typingAt: s.liveSeq }, 0);
    expect(s.conv(SID)!.typing.size).toBe(0);
  });

  it('an indicator that started after the request stays though the snapshot lacks it', () => {
    const s = new Store();
    const asked = s.liveSeq;
    s.apply(live('typing_started', { typing: { session_id: SID, scope: 'u1', label: 'new' } }));
    s.loadConversation(SID, { typing: [], typingAt: asked }, 0);
    expect(s.conv(SID)!.typing.get('u1')!.label).toBe('new');
  });

  it('typing present before the request but absent from the snapshot is dropped', () => {
    const s = new Store();
    s.apply(live('typing_started', { typing: { session_id: SID, scope: 'u1' } }));
    s.loadConversation(SID, { typing: [], typingAt: s.liveSeq }, 0);
    expect(s.conv(SID)!.typing.size).toBe(0);
  });

  it('after a reconnect the snapshot shows what was missed while the stream was down', () => {
    const s = new Store();
    s.apply(live('typing_started', { typing: { session_id: SID, scope: 'u1', label: 'old' } }));
    // Down: u1 stopped and u2 started meanwhile; the re-read list says so.
    s.loadConversation(SID, { typing: [{ session_id: SID, scope: 'u2', label: 'working' }], typingAt: s.liveSeq }, 0);
    expect([...s.conv(SID)!.typing.keys()]).toEqual(['u2']);
  });

  it('the 201 of a sent message shows at once and the later event does not duplicate it', () => {
    const s = new Store();
    const mine = msg(5, 'hello', { kind: 'user' });
    s.mergeMessage(mine, 0);
    s.apply({ id: 1, type: 'message_added', session_id: SID, message: mine });
    expect(texts(s)).toEqual(['hello']);
  });
});

describe('sessions', () => {
  it('created, updated, deleted; newest first', () => {
    const s = new Store();
    const seen = track(s);
    s.apply(ev('session_created', { session_id: 'a', session: session('a', { created_at: '2026-11-29T10:00:00Z' }) }));
    s.apply(ev('session_created', { session_id: 'b', session: session('b', { created_at: '2026-11-29T11:00:00Z', is_call: false, insights_session_id: null }) }));
    expect(s.sessionList().map((x) => x.session_id)).toEqual(['b', 'a']);
    expect(seen.filter((c) => c.kind === 'session-created').length).toBe(2);
    s.apply(ev('session_updated', { session_id: 'a', session: session('a', { created_at: '2026-11-29T10:00:00Z', ended_at: '2026-11-29T10:30:00Z' }) }));
    expect(s.sessions.get('a')!.ended_at).toBe('2026-11-29T10:30:00Z');
    s.apply(ev('message_added', { session_id: 'a', message: { ...msg(1, 'x'), session_id: 'a' } }));
    s.apply(ev('session_deleted', { session_id: 'a' }));
    expect(s.sessions.has('a')).toBe(false);
    expect(s.conv('a')).toBeUndefined();
    // Late events and stale snapshots for a deleted session are ignored.
    s.apply(ev('message_added', { session_id: 'a', message: { ...msg(2, 'late'), session_id: 'a' } }));
    s.loadSessions([session('a')], 0);
    expect(s.conv('a')).toBeUndefined();
    expect(s.sessions.has('a')).toBe(false);
  });

  it('a session from a snapshot is not announced as newly created', () => {
    const s = new Store();
    const seen = track(s);
    s.loadSessions([session('a')], 0);
    expect(seen.some((c) => c.kind === 'session-created')).toBe(false);
    expect(s.sessions.has('a')).toBe(true);
  });

  it('a session snapshot older than an event keeps the event state', () => {
    const s = new Store();
    s.apply({ id: 5, type: 'session_updated', session_id: 'a', session: session('a', { ended_at: '2026-11-29T10:30:00Z' }) });
    s.loadSessions([session('a')], 4);
    expect(s.sessions.get('a')!.ended_at).toBe('2026-11-29T10:30:00Z');
  });
});
