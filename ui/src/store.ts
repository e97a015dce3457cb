// The UI's state, fed only by the event stream plus snapshots loaded through the control API.
//
// - `cursor` is the id of the last applied event; an event whose id is ≤ the cursor is ignored,
//   so replays and overlapping catch-ups are harmless (idempotent application).
// - Every entity remembers the cursor of the event that last touched it (its version). A snapshot
//   is merged with the cursor the store had when the snapshot was requested: an entity changed by
//   a later event keeps the event's state (that event is newer or will be followed by one), so a
//   snapshot racing the live stream never rolls anything back.
// - Messages are kept ordered by (`sort_key`, `id`); drafts are updated in place.
// - Insights: newest first; a `none` reply (or one flagged `hidden`) is never listed, nor is a draft
//   that could still turn out to be `none`.
// - A call's transcript: oldest first, from `transcript_added` / `transcript_updated` and
//   `GET /api/calls/{id}/transcript`; turns carry their delivery state like user messages.
// - The assistant link (`GET /api/assistant` and the answers of its other routes): the latest
//   snapshot, patched by `assistant_status` events (`{status, detail, checked_at}`); a snapshot
//   requested before the last such event keeps that event's status.
// - Typing indicators are live-only events (`live: true`, no id: never in the log). Their version
//   is `liveSeq`, the count of live typing events applied; a view reads the current indicators
//   from `GET /api/sessions/{id}/typing` whenever its stream (re)connects, merged with the
//   `liveSeq` it had when it asked (`Snapshot.typingAt`). A logged typing event (written by an
//   older version, replayed from the log) is history and changes nothing.
// - Hearing the call (audio.ts): `GET /api/audio` (or why it cannot be read), patched by
//   `audio_status` events the same way; the latest `audio_level`; each call's partial turns from
//   `transcript_partial` events (live only, no cursor: one per open turn, dropped by its
//   `final: true` or after `PARTIAL_STALE_MS` without news).

import { LEVEL_STALE_MS, normAudio, normAudioStatus, normLevels, normPartial, PARTIAL_STALE_MS } from './audio';
import type {
  Assistant,
  Audio,
  AudioLevels,
  Delivery,
  DeliveryError,
  Insight,
  Message,
  MessageKind,
  PartialTurn,
  PermissionState,
  Session,
  SwEvent,
  TranscriptTurn,
  Tunnel,
  Typing,
} from './types';
import { MESSAGE_PAGE, MESSAGE_WINDOW, messagesPath } from './window';

export type Change =
  | { kind: 'sessions' }
  | { kind: 'session-created'; session: Session }
  | { kind: 'session-deleted'; sessionId: string }
  | { kind: 'message-insert'; sessionId: string; index: number; message: Message }
  | { kind: 'message-update'; sessionId: string; index: number; message: Message; prev: Message }
  | { kind: 'message-move'; sessionId: string; from: number; to: number; message: Message }
  | { kind: 'messages-reset'; sessionId: string }
  /** `count` older messages were put in front of the list (a page loaded while scrolling up). */
  | { kind: 'messages-prepended'; sessionId: string; count: number }
  /** `count` newer messages were put at the end of the list (a dropped page loaded again). */
  | { kind: 'messages-appended'; sessionId: string; count: number }
  /** Far messages left the window: `front` from its start, `back` from its end. */
  | { kind: 'messages-dropped'; sessionId: string; front: number; back: number }
  | { kind: 'insights'; sessionId: string; added: Insight | null }
  | { kind: 'typing'; sessionId: string; insights: boolean }
  | { kind: 'unread'; sessionId: string }
  | { kind: 'transcript'; sessionId: string; added: TranscriptTurn | null }
  /** The assistant link changed; `fromEvent`: through an `assistant_status` event (a patch). */
  | { kind: 'assistant'; fromEvent: boolean }
  /** The callback tunnel changed (`/api/tunnel…` answers). */
  | { kind: 'tunnel' }
  /** What the app reports about hearing the call changed; `fromEvent`: an `audio_status` event. */
  | { kind: 'audio'; fromEvent: boolean }
  /** New audio levels (about ten a second while listening or while the meters are on). */
  | { kind: 'levels' }
  /** A call's partial turns changed (one came, was replaced by its final, or went stale). */
  | { kind: 'partials'; sessionId: string }
  /** A live-only event (`live: true`: a partial transcript, an audio level), as it came. */
  | { kind: 'live'; event: SwEvent };

export interface Conversation {
  sessionId: string;
  /** A snapshot of this conversation has been merged (the lists are complete). */
  loaded: boolean;
  messages: Message[];
  byId: Map<string, Message>;
  /** Visible insights, newest first. */
  insights: Insight[];
  /** Every insight seen, hidden ones included. */
  insightById: Map<string, Insight>;
  typing: Map<string, Typing>;
  insightTyping: Map<string, Typing>;
  unread: Set<string>;
  /** The call's transcript turns, oldest first. */
  transcript: TranscriptTurn[];
  transcriptById: Map<string, TranscriptTurn>;
  /** A transcript snapshot has been merged (the list is complete). */
  transcriptLoaded: boolean;
  /** Entity key → cursor of the last event that touched it. */
  ver: Map<string, number>;
  /**
   * The path of the next older page of messages (`GET …/messages?limit=N&before=ID`); null when
   * the list reaches the first message (or was loaded whole).
   */
  olderPath: string | null;
  /**
   * The window's newer end was dropped: the first message of each dropped run, oldest first
   * (empty: the window reaches the newest message). See `window.ts`.
   */
  newer: Message[];
  /** Events for messages outside the window, with their cursor (see `window.ts`). */
  outside: Map<string, { m: Message; ver: number }>;
  /** The path of the next older page of insights / transcript turns; null: none (or loaded whole). */
  insightsOlder: string | null;
  transcriptOlder: string | null;
  /** Turns being heard (live only), by `turn_id`, in the order they began. */
  partials: Map<string, PartialTurn>;
}

export interface Snapshot {
  messages?: unknown[];
  /**
   * `messages` is the newest page (`GET …/messages?limit=N`): the path of the page before it
   * (null: it reaches the first message). Absent: `messages` is the whole list.
   */
  olderPath?: string | null;
  insights?: unknown[];
  /** `insights` is the newest page: the path of the page before it (absent: the whole list). */
  insightsOlderPath?: string | null;
  typing?: unknown[];
  /** The store's `liveSeq` when `typing` was requested: live typing events after it win. */
  typingAt?: number;
  transcript?: unknown[];
  /** `transcript` is the newest page: the path of the page before it (absent: the whole list). */
  transcriptOlderPath?: string | null;
}

const INSIGHTS_PREFIX = 'insights:';

// ---------------------------------------------------------------------------------------------
// Normalisation of loosely typed JSON.

const str = (v: unknown): string | null => (typeof v === 'string' ? v : v == null ? null : String(v));
const isObj = (v: unknown): v is Record<string, unknown> => !!v && typeof v === 'object' && !Array.isArray(v);

/** Microseconds since the epoch of an RFC 3339 time (fraction kept to the microsecond); NaN if none. */
export function timeMicros(t: string | null | undefined): number {
  if (!t) return NaN;
  const m = /^(.*?T\d{2}:\d{2}:\d{2})(?:[.,](\d+))?(.*)$/.exec(t);
  if (!m) return Date.parse(t) * 1000;
  const ms = Date.parse(m[1] + (m[3] || 'Z'));
  if (Number.isNaN(ms)) return NaN;
  const frac = m[2] ? Number((m[2] + '000000').slice(0, 6)) : 0;
  return ms * 1000 + frac;
}

const KINDS: ReadonlySet<string> = new Set(['user', 'assistant', 'notice', 'error', 'permission']);
const PERMISSION_STATES: ReadonlySet<string> = new Set(['pending', 'allow', 'deny', 'expired']);

export function normMessage(raw: unknown): Message | null {
  if (!isObj(raw)) return null;
  const id = raw.id;
  const sessionId = str(raw.session_id);
  if ((typeof id !== 'string' && typeof id !== 'number') || !sessionId) return null;
  const kindRaw = str(raw.kind) ?? 'assistant';
  let kind = (KINDS.has(kindRaw) ? kindRaw : 'assistant') as MessageKind;
  const rid = str(raw.request_id);
  const pstate = str(raw.state);
  const permission =
    kind === 'permission' && rid && pstate && PERMISSION_STATES.has(pstate)
      ? { request_id: rid, tool: str(raw.tool) ?? '', input_preview: str(raw.input_preview) ?? '', state: pstate as PermissionState, resolver: str(raw.resolver) }
      : null;
  if (kind === 'permission' && !permission) kind = 'notice';
  let sortKey = Number(raw.sort_key);
  if (!Number.isFinite(sortKey)) {
    sortKey = timeMicros(str(raw.occurred_at)) || timeMicros(str(raw.received_at)) || 0;
    if (!Number.isFinite(sortKey)) sortKey = 0;
  }
  return {
    id,
    session_id: sessionId,
    kind,
    text: str(raw.text) ?? '',
    message_id: str(raw.message_id),
    task_id: str(raw.task_id),
    user_message_id: str(raw.user_message_id),
    error_code: str(raw.error_code),
    occurred_at: str(raw.occurred_at),
    received_at: str(raw.received_at),
    sort_key: sortKey,
    draft: raw.draft === true,
    delivery: normDelivery(raw.delivery),
    delivery_error: normDeliveryError(raw.delivery_error),
    permission,
    purpose: str(raw.purpose),
  };
}

const DELIVERIES: ReadonlySet<string> = new Set(['pending', 'sent', 'failed']);

export function normDelivery(v: unknown): Delivery | null {
  return typeof v === 'string' && DELIVERIES.has(v) ? (v as Delivery) : null;
}

export function normDeliveryError(v: unknown): DeliveryError | null {
  if (typeof v === 'string') return v.trim() ? { code: '', message: v } : null;
  if (!isObj(v)) return null;
  const code = str(v.code) ?? '';
  const message = str(v.message) ?? '';
  return code || message ? { code, message } : null;
}

export function normTranscript(raw: unknown): TranscriptTurn | null {
  if (!isObj(raw)) return null;
  const id = raw.id;
  let sessionId = str(raw.session_id);
  if ((typeof id !== 'string' && typeof id !== 'number') || !sessionId) return null;
  if (sessionId.startsWith(INSIGHTS_PREFIX)) sessionId = sessionId.slice(INSIGHTS_PREFIX.length);
  const off = Number(raw.offset_ms);
  const speaker = str(raw.speaker);
  return {
    id,
    session_id: sessionId,
    speaker: speaker && speaker.trim() ? speaker.trim() : null,
    text: str(raw.text) ?? '',
    received_at: str(raw.received_at),
    offset_ms: raw.offset_ms == null || !Number.isFinite(off) ? null : off,
    task_id: str(raw.task_id),
    delivery: normDelivery(raw.delivery),
    delivery_error: normDeliveryError(raw.delivery_error),
  };
}

export function normAssistant(raw: unknown): Assistant | null {
  if (!isObj(raw) || typeof raw.status !== 'string') return null;
  const le = raw.last_error;
  const sfb = raw.supports_events_fallback;
  return {
    kind: str(raw.kind) ?? 'incoming',
    warning: str(raw.warning),
    configured: raw.configured === true,
    base_url: str(raw.base_url),
    relay_token_set: raw.relay_token_set === true,
    status: raw.status,
    detail: str(raw.detail) ?? '',
    checked_at: str(raw.checked_at),
    assistant_version: str(raw.assistant_version),
    supports_events_fallback: typeof sfb === 'boolean' ? sfb : null,
    events_fallback_detail: str(raw.events_fallback_detail) ?? '',
    mode: str(raw.mode) ?? 'auto',
    delivery: str(raw.delivery) ?? 'none',
    fallback_reason: str(raw.fallback_reason),
    prelude: str(raw.prelude) ?? '',
    prelude_is_default: raw.prelude_is_default !== false,
    default_prelude: str(raw.default_prelude) ?? '',
    callback_url: str(raw.callback_url),
    last_error: isObj(le) ? { code: str(le.code) ?? '', message: str(le.message) ?? '', at: str(le.at) } : null,
    extra: raw,
  };
}

/** What a user message or transcript turn shows about its delivery to the assistant. */
export interface DeliveryView {
  state: 'sending' | 'sent' | 'failed' | null;
  /** Short label: `sending…`, `sent`, `failed`. */
  label: string;
  /** A sentence to show under the entry (a pending entry's retry note, a failure's reason). */
  note: string | null;
  /** Only a failed entry can be retried by the user. */
  canRetry: boolean;
}

export function deliveryView(e: { delivery: Delivery | null; delivery_error: DeliveryError | null }): DeliveryView {
  const err = e.delivery_error;
  const why = err ? err.message || err.code : '';
  switch (e.delivery) {
    case 'pending':
      // The app's note may already say so ("Not delivered yet: …"): never twice.
      return { state: 'sending', label: 'sending…', note: !why ? null : /^not delivered yet\b/i.test(why) ? why : `Not delivered yet: ${why}`, canRetry: false };
    case 'sent':
      return { state: 'sent', label: 'sent', note: null, canRetry: false };
    case 'failed':
      return { state: 'failed', label: 'failed', note: why || 'The assistant did not accept it.', canRetry: true };
    default:
      return { state: null, label: '', note: null, canRetry: false };
  }
}

export function normInsight(raw: unknown): Insight | null {
  if (!isObj(raw)) return null;
  const id = raw.id;
  let sessionId = str(raw.session_id);
  if ((typeof id !== 'string' && typeof id !== 'number') || !sessionId) return null;
  if (sessionId.startsWith(INSIGHTS_PREFIX)) sessionId = sessionId.slice(INSIGHTS_PREFIX.length);
  const off = Number(raw.offset_ms);
  return {
    id,
    session_id: sessionId,
    text: str(raw.text) ?? '',
    task_id: str(raw.task_id),
    message_id: str(raw.message_id),
    occurred_at: str(raw.occurred_at),
    received_at: str(raw.received_at),
    offset_ms: raw.offset_ms == null || !Number.isFinite(off) ? null : off,
    draft: raw.draft === true,
    hidden: raw.hidden === true,
  };
}

export function normSession(raw: unknown): Session | null {
  if (!isObj(raw)) return null;
  const sid = str(raw.session_id);
  if (!sid) return null;
  return {
    session_id: sid,
    kind: str(raw.kind) ?? 'chat',
    is_call: raw.is_call === true,
    title: str(raw.title),
    created_at: str(raw.created_at) ?? '',
    ended_at: str(raw.ended_at),
    insights_session_id: str(raw.insights_session_id),
  };
}

export function normTyping(raw: unknown): Typing | null {
  if (!isObj(raw)) return null;
  const sid = str(raw.session_id);
  const scope = str(raw.scope);
  if (!sid || scope == null) return null;
  const label = str(raw.label);
  return { session_id: sid, scope, label: label && label.trim() ? label : null, since: str(raw.since) };
}

/** True for an insight text that means "nothing worth surfacing". */
export function isNoneText(text: string): boolean {
  return /^none\.?$/i.test(text.trim());
}

/** Whether an insight may be listed and announced. */
export function insightVisible(ins: Insight): boolean {
  if (ins.hidden) return false;
  const t = ins.text.trim();
  if (t === '') return false;
  if (isNoneText(t)) return false;
  // A draft that could still become "none" stays out of sight until it cannot.
  if (ins.draft && 'none.'.startsWith(t.toLowerCase())) return false;
  return true;
}

export function compareIds(a: string | number, b: string | number): number {
  if (typeof a === 'number' && typeof b === 'number') return a - b;
  const sa = String(a);
  const sb = String(b);
  return sa < sb ? -1 : sa > sb ? 1 : 0;
}

export function compareMessages(a: Message, b: Message): number {
  return a.sort_key - b.sort_key || compareIds(a.id, b.id);
}

function insightTime(i: Insight): number {
  const t = timeMicros(i.occurred_at);
  if (Number.isFinite(t)) return t;
  const r = timeMicros(i.received_at);
  return Number.isFinite(r) ? r : 0;
}

function turnTime(t: TranscriptTurn): number {
  const r = timeMicros(t.received_at);
  if (Number.isFinite(r)) return r;
  return t.offset_ms != null ? t.offset_ms * 1000 : 0;
}

/** Oldest first. */
export function compareTurns(a: TranscriptTurn, b: TranscriptTurn): number {
  return turnTime(a) - turnTime(b) || compareIds(a.id, b.id);
}

/** Newest first. */
export function compareInsights(a: Insight, b: Insight): number {
  return insightTime(b) - insightTime(a) || compareIds(b.id, a.id);
}

/** First index whose element sorts after `x` (insertion point keeping the order stable). */
function upperBound<T>(list: T[], x: T, cmp: (a: T, b: T) => number): number {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (cmp(list[mid], x) <= 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

function indexOfSorted<T>(list: T[], x: T, cmp: (a: T, b: T) => number, same: (a: T) => boolean): number {
  // Binary search to the neighbourhood, then confirm by identity (ids are unique).
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (cmp(list[mid], x) < 0) lo = mid + 1;
    else hi = mid;
  }
  for (let i = lo; i < list.length && cmp(list[i], x) <= 0; i++) if (same(list[i])) return i;
  const j = list.findIndex(same);
  return j;
}

/** A message that belongs past a dropped (or not yet loaded) end of the window. */
function outsideWindow(c: Conversation, m: Message): boolean {
  const first = c.messages[0];
  if (!first) return false;
  if (c.olderPath && compareMessages(m, first) < 0) return true;
  const last = c.messages[c.messages.length - 1];
  return c.newer.length > 0 && compareMessages(m, last) > 0;
}

/** A page's message, or the state a later event left aside for it (with its cursor). */
function fromOutside(c: Conversation, m: Message, atCursor: number): { m: Message; ver: number } {
  const key = String(m.id);
  const o = c.outside.get(key);
  if (!o) return { m, ver: atCursor };
  c.outside.delete(key);
  return o.ver > atCursor ? o : { m, ver: atCursor };
}

/** Forgets events set aside before `atCursor`: a page asked for later has their state. */
function pruneOutside(c: Conversation, atCursor: number): void {
  for (const [k, o] of c.outside) if (o.ver <= atCursor) c.outside.delete(k);
}

/** The object an event carries for `key` (`message`, `insight`, …), tolerating `payload`/`data`. */
function payload(ev: SwEvent, key: string): unknown {
  const v = ev[key] ?? ev.payload ?? ev.data;
  return v;
}

const TUNNEL_KINDS: ReadonlySet<string> = new Set(['ngrok', 'external']);
const tunnelKind = (v: unknown): 'ngrok' | 'external' | null => (typeof v === 'string' && TUNNEL_KINDS.has(v) ? (v as 'ngrok' | 'external') : null);

/** A `{tunnel}` answer (`GET` / `POST` / `DELETE /api/tunnel…`); null if it is not one. */
export function normTunnel(raw: unknown): Tunnel | null {
  if (!isObj(raw) || typeof raw.state !== 'string') return null;
  const err = raw.error;
  const allow = raw.assistant_allow;
  const c = isObj(raw.config) ? raw.config : {};
  const src = c.authtoken_source;
  return {
    state: raw.state,
    kind: tunnelKind(raw.kind),
    public_url: str(raw.public_url),
    callback_url: str(raw.callback_url),
    local_callback_url: str(raw.local_callback_url),
    detail: str(raw.detail) ?? '',
    error: isObj(err) ? { code: str(err.code) ?? '', message: str(err.message) ?? '' } : null,
    since: str(raw.since),
    attempt: typeof raw.attempt === 'number' ? raw.attempt : 0,
    next_retry_at: str(raw.next_retry_at),
    verified: typeof raw.verified === 'boolean' ? raw.verified : null,
    checked_at: str(raw.checked_at),
    assistant_allow:
      isObj(allow) && typeof allow.line === 'string' && allow.line
        ? { variable: str(allow.variable) ?? '', value: str(allow.value) ?? '', line: allow.line }
        : null,
    config: {
      kind: tunnelKind(c.kind),
      enabled: c.enabled === true,
      url: str(c.url),
      domain: str(c.domain),
      check_interval_secs: typeof c.check_interval_secs === 'number' ? c.check_interval_secs : null,
      verify: c.verify !== false,
      authtoken_set: c.authtoken_set === true,
      authtoken_source: src === 'saved' || src === 'env' ? src : null,
    },
  };
}

/** A tunnel is worth watching (the call bar polls it): it is on, or not yet off. */
export function tunnelActive(t: Tunnel | null): boolean {
  return !!t && (t.config.enabled || t.state !== 'off');
}

// ---------------------------------------------------------------------------------------------

export class Store {
  cursor = 0;
  /** Live typing events applied so far: the version of a typing indicator (see the top). */
  liveSeq = 0;
  readonly sessions = new Map<string, Session>();
  private sessionVer = new Map<string, number>();
  private deleted = new Set<string>();
  private convs = new Map<string, Conversation>();
  private insightsOf = new Map<string, string>(); // insights session id → chat session id
  private listeners = new Set<(c: Change) => void>();
  /** The conversation whose Insights tab is on screen (its new insights are not "unread"). */
  private insightsOpen: string | null = null;
  /** The assistant link as last reported (null until the first answer). */
  assistant: Assistant | null = null;
  private assistantJson = '';
  /** Cursor of the last `assistant_status` event applied. */
  private assistantStatusVer = -1;
  /** The callback tunnel as last reported (null until the first answer). */
  tunnel: Tunnel | null = null;
  private tunnelJson = '';
  /** `GET /api/audio` as last answered, patched by `audio_status` events (null: not known). */
  audio: Audio | null = null;
  /** Why `GET /api/audio` cannot be answered (`503 audio_unavailable`: this build cannot hear). */
  audioUnavailable: string | null = null;
  private audioJson = '';
  /** Counts `audio_status` events (they have no cursor): a snapshot asked for before one keeps its status. */
  audioStatusSeq = 0;
  /** The latest levels (null: none for `LEVEL_STALE_MS`). */
  levels: AudioLevels | null = null;
  private levelTimer: ReturnType<typeof setTimeout> | undefined;
  private partialTimer: ReturnType<typeof setTimeout> | undefined;
  private partialDue = Infinity;

  subscribe(fn: (c: Change) => void): () => void {
    this.listeners.add(fn);
    return () => this.listeners.delete(fn);
  }

  private emit(c: Change): void {
    for (const fn of this.listeners) fn(c);
  }

  conv(sessionId: string): Conversation | undefined {
    return this.convs.get(sessionId);
  }

  /** The conversation of `sessionId`, created empty (not loaded) if new. */
  ensureConv(sessionId: string): Conversation {
    let c = this.convs.get(sessionId);
    if (!c) {
      c = {
        sessionId,
        loaded: false,
        messages: [],
        byId: new Map(),
        insights: [],
        insightById: new Map(),
        typing: new Map(),
        insightTyping: new Map(),
        unread: new Set(),
        transcript: [],
        transcriptById: new Map(),
        transcriptLoaded: false,
        ver: new Map(),
        olderPath: null,
        newer: [],
        outside: new Map(),
        insightsOlder: null,
        transcriptOlder: null,
        partials: new Map(),
      };
      this.convs.set(sessionId, c);
    }
    return c;
  }

  /** Sessions newest first. */
  sessionList(): Session[] {
    return [...this.sessions.values()].sort(
      (a, b) => (timeMicros(b.created_at) || 0) - (timeMicros(a.created_at) || 0) || compareIds(b.session_id, a.session_id),
    );
  }

  /** The chat session an (`insights:` or chat) session id belongs to, and whether it was insights. */
  private route(sessionId: string): { chat: string; insights: boolean } {
    const mapped = this.insightsOf.get(sessionId);
    if (mapped) return { chat: mapped, insights: true };
    if (sessionId.startsWith(INSIGHTS_PREFIX)) return { chat: sessionId.slice(INSIGHTS_PREFIX.length), insights: true };
    return { chat: sessionId, insights: false };
  }

  unreadCount(sessionId: string | null): number {
    if (!sessionId) return 0;
    return this.convs.get(sessionId)?.unread.size ?? 0;
  }

  /** The Insights tab of `sessionId` is on screen (or none is, with `null`): its unread clears. */
  setInsightsOpen(sessionId: string | null): void {
    this.insightsOpen = sessionId;
    if (sessionId) {
      const c = this.convs.get(sessionId);
      if (c && c.unread.size) {
        c.unread.clear();
        this.emit({ kind: 'unread', sessionId });
      }
    }
  }

  // ---- events ---------------------------------------------------------------------------------

  /** Applies a batch in order; returns how many were new. */
  applyBatch(events: SwEvent[]): number {
    let n = 0;
    for (const ev of events) if (this.apply(ev)) n++;
    return n;
  }

  /** Applies one event; false when it was already applied (id ≤ cursor) or malformed. */
  apply(ev: SwEvent): boolean {
    if (ev.live === true) {
      // No cursor: typing indicators are kept (versioned by `liveSeq`); every live event is
      // handed to whoever shows it, and never counted as applied.
      if (ev.type === 'typing_started' || ev.type === 'typing_stopped') {
        const t = normTyping(payload(ev, 'typing'));
        if (t) this.putTyping(t, ev.type === 'typing_started', ++this.liveSeq);
      } else {
        this.applyLive(ev);
      }
      this.emit({ kind: 'live', event: ev });
      return false;
    }
    const id = Number(ev.id);
    if (!Number.isFinite(id) || id <= this.cursor) return false;
    this.cursor = id;
    switch (ev.type) {
      case 'session_created':
      case 'session_updated': {
        const s = normSession(payload(ev, 'session'));
        if (s) this.putSession(s, id, true);
        break;
      }
      case 'session_deleted': {
        const p = payload(ev, 'session');
        const sid = str(ev.session_id) ?? (isObj(p) ? str(p.session_id) : null);
        if (sid) this.deleteSession(sid);
        break;
      }
      case 'message_added':
      case 'message_updated': {
        const m = normMessage(payload(ev, 'message'));
        if (m) this.putMessage(m, id);
        break;
      }
      case 'insight_added':
      case 'insight_updated': {
        const i = normInsight(payload(ev, 'insight'));
        if (i) this.putInsight(i, id, true);
        break;
      }
      case 'typing_started':
      case 'typing_stopped':
        break; // logged by an older version: history (typing is live-only, see above)
      case 'transcript_added':
      case 'transcript_updated': {
        const t = normTranscript(payload(ev, 'transcript'));
        if (t) this.putTurn(t, id);
        break;
      }
      case 'assistant_status':
        this.patchAssistant(payload(ev, 'assistant'), id);
        break;
      default:
        break; // unknown types are skipped (forward compatible); the cursor still advances
    }
    return true;
  }

  // ---- live-only events (hearing the call) ----------------------------------------------------

  private applyLive(ev: SwEvent): void {
    switch (ev.type) {
      case 'transcript_partial':
        this.putPartial(ev);
        break;
      case 'audio_level': {
        const l = normLevels(ev);
        if (!l) break;
        this.levels = l;
        clearTimeout(this.levelTimer);
        this.levelTimer = setTimeout(() => {
          this.levels = null;
          this.emit({ kind: 'levels' });
        }, LEVEL_STALE_MS);
        this.emit({ kind: 'levels' });
        break;
      }
      case 'audio_status': {
        const st = normAudioStatus(ev.status);
        if (!st) break;
        this.audioStatusSeq++;
        if (this.audio) this.putAudio({ ...this.audio, status: st }, true);
        // No snapshot yet: the app reads `GET /api/audio` after each status event anyway.
        else this.emit({ kind: 'audio', fromEvent: true });
        break;
      }
      default:
        break;
    }
  }

  private putPartial(ev: SwEvent): void {
    const now = Date.now();
    const p = normPartial(ev, now);
    if (!p) return;
    const chat = this.route(p.partial.session_id).chat;
    if (this.deleted.has(chat)) return;
    const c = this.ensureConv(chat);
    const key = p.partial.turn_id;
    const prev = c.partials.get(key);
    if (p.final) {
      // Its stored turn comes (or came) as `transcript_added`.
      if (c.partials.delete(key)) this.emit({ kind: 'partials', sessionId: chat });
      return;
    }
    c.partials.set(key, { ...p.partial, session_id: chat, since: prev?.since ?? now });
    this.schedulePartialSweep(now + PARTIAL_STALE_MS);
    this.emit({ kind: 'partials', sessionId: chat });
  }

  /** A call's turns being heard, in the order they began. */
  partialsOf(sessionId: string | null): PartialTurn[] {
    const c = sessionId ? this.convs.get(sessionId) : undefined;
    return c ? [...c.partials.values()] : [];
  }

  /** Drops every partial turn (the stream came back: those it missed cannot be trusted). */
  clearPartials(): void {
    for (const c of this.convs.values()) {
      if (!c.partials.size) continue;
      c.partials.clear();
      this.emit({ kind: 'partials', sessionId: c.sessionId });
    }
  }

  private schedulePartialSweep(due: number): void {
    if (due >= this.partialDue) return;
    clearTimeout(this.partialTimer);
    this.partialDue = due;
    this.partialTimer = setTimeout(() => this.sweepPartials(), Math.max(0, due - Date.now()));
  }

  /** Drops the partial turns with no news for `PARTIAL_STALE_MS`; wakes up again for the next. */
  private sweepPartials(): void {
    const now = Date.now();
    this.partialDue = Infinity;
    let next = Infinity;
    for (const c of this.convs.values()) {
      let dropped = false;
      for (const [k, p] of c.partials) {
        if (now - p.at >= PARTIAL_STALE_MS) {
          c.partials.delete(k);
          dropped = true;
        } else next = Math.min(next, p.at + PARTIAL_STALE_MS);
      }
      if (dropped) this.emit({ kind: 'partials', sessionId: c.sessionId });
    }
    if (next < Infinity) this.schedulePartialSweep(next);
  }

  /**
   * `GET` / `PUT /api/audio`'s answer, asked for when `audioStatusSeq` was `atSeq` (omitted: newer
   * than every event): an `audio_status` event that came meanwhile keeps its status. Returns
   * whether anything changed.
   */
  setAudio(raw: unknown, atSeq = Infinity): boolean {
    const a = normAudio(raw);
    if (!a) return false;
    if (this.audio && this.audioStatusSeq > atSeq) a.status = this.audio.status;
    this.audioUnavailable = null;
    return this.putAudio(a, false);
  }

  /** `GET /api/audio` answered `503 audio_unavailable` (this build, or this machine, cannot hear). */
  setAudioUnavailable(message: string): boolean {
    if (this.audio === null && this.audioUnavailable === message) return false;
    this.audio = null;
    this.audioJson = '';
    this.audioUnavailable = message;
    this.emit({ kind: 'audio', fromEvent: false });
    return true;
  }

  private putAudio(a: Audio, fromEvent: boolean): boolean {
    const json = JSON.stringify(a);
    if (json === this.audioJson) return false;
    this.audioJson = json;
    this.audio = a;
    this.emit({ kind: 'audio', fromEvent });
    return true;
  }

  private putSession(s: Session, version: number, live: boolean): void {
    if (this.deleted.has(s.session_id)) return;
    const isNew = !this.sessions.has(s.session_id);
    this.sessions.set(s.session_id, s);
    this.sessionVer.set(s.session_id, version);
    if (s.insights_session_id) this.insightsOf.set(s.insights_session_id, s.session_id);
    this.emit({ kind: 'sessions' });
    if (isNew && live) this.emit({ kind: 'session-created', session: s });
  }

  private deleteSession(sid: string): void {
    this.deleted.add(sid);
    const s = this.sessions.get(sid);
    if (s?.insights_session_id) this.insightsOf.delete(s.insights_session_id);
    this.sessions.delete(sid);
    this.sessionVer.delete(sid);
    this.convs.delete(sid);
    this.emit({ kind: 'sessions' });
    this.emit({ kind: 'session-deleted', sessionId: sid });
  }

  private putMessage(m: Message, version: number): void {
    const r = this.route(m.session_id);
    if (r.insights) return; // an `insights:` session never shows in a chat
    if (this.deleted.has(r.chat)) return;
    const c = this.ensureConv(r.chat);
    const key = String(m.id);
    const prev = c.byId.get(key);
    if (!prev && outsideWindow(c, m)) {
      c.outside.delete(key);
      c.outside.set(key, { m, ver: version });
      // Bounded too: only events newer than a page still on its way matter (see `pruneOutside`).
      if (c.outside.size > MESSAGE_WINDOW) c.outside.delete(c.outside.keys().next().value as string);
      return;
    }
    c.ver.set('m:' + key, version);
    c.byId.set(key, m);
    if (!prev) {
      const index = upperBound(c.messages, m, compareMessages);
      c.messages.splice(index, 0, m);
      this.emit({ kind: 'message-insert', sessionId: r.chat, index, message: m });
      return;
    }
    const from = indexOfSorted(c.messages, prev, compareMessages, (x) => String(x.id) === key);
    if (from < 0) {
      const index = upperBound(c.messages, m, compareMessages);
      c.messages.splice(index, 0, m);
      this.emit({ kind: 'message-insert', sessionId: r.chat, index, message: m });
      return;
    }
    if (compareMessages(prev, m) === 0) {
      c.messages[from] = m;
      this.emit({ kind: 'message-update', sessionId: r.chat, index: from, message: m, prev });
      return;
    }
    c.messages.splice(from, 1);
    const to = upperBound(c.messages, m, compareMessages);
    c.messages.splice(to, 0, m);
    if (to === from) this.emit({ kind: 'message-update', sessionId: r.chat, index: to, message: m, prev });
    else this.emit({ kind: 'message-move', sessionId: r.chat, from, to, message: m });
  }

  private putInsight(ins: Insight, version: number, live: boolean): void {
    const chat = this.route(ins.session_id).chat;
    if (this.deleted.has(chat)) return;
    const c = this.ensureConv(chat);
    const key = String(ins.id);
    c.ver.set('i:' + key, version);
    const prev = c.insightById.get(key);
    const wasVisible = !!prev && insightVisible(prev);
    const nowVisible = insightVisible(ins);
    c.insightById.set(key, ins);
    if (wasVisible) {
      const at = c.insights.findIndex((x) => String(x.id) === key);
      if (at >= 0) c.insights.splice(at, 1);
    }
    if (nowVisible) c.insights.splice(upperBound(c.insights, ins, compareInsights), 0, ins);
    if (!wasVisible && !nowVisible) return;
    let unreadChanged = false;
    if (nowVisible && !wasVisible && live && this.insightsOpen !== chat && !c.unread.has(key)) {
      c.unread.add(key);
      unreadChanged = true;
    }
    if (!nowVisible && c.unread.delete(key)) unreadChanged = true;
    this.emit({ kind: 'insights', sessionId: chat, added: nowVisible && !wasVisible ? ins : null });
    if (unreadChanged) this.emit({ kind: 'unread', sessionId: chat });
  }

  private putTurn(t: TranscriptTurn, version: number): void {
    const chat = this.route(t.session_id).chat;
    if (this.deleted.has(chat)) return;
    const c = this.ensureConv(chat);
    const key = String(t.id);
    c.ver.set('x:' + key, version);
    const prev = c.transcriptById.get(key);
    c.transcriptById.set(key, t);
    if (prev) {
      const at = c.transcript.findIndex((x) => String(x.id) === key);
      if (at >= 0) c.transcript.splice(at, 1);
    }
    c.transcript.splice(upperBound(c.transcript, t, compareTurns), 0, t);
    this.emit({ kind: 'transcript', sessionId: chat, added: prev ? null : t });
  }

  /**
   * The assistant link's state from an answer of `/api/assistant…`, requested when the cursor was
   * `atCursor` (omitted: newer than every event). An `assistant_status` event applied after that
   * keeps its status, detail and check time. Returns whether anything changed. Ordering between
   * overlapping requests is the caller's business (see App).
   */
  setAssistant(raw: unknown, atCursor = Infinity): boolean {
    const a = normAssistant(raw);
    if (!a) return false;
    const cur = this.assistant;
    if (cur && this.assistantStatusVer > atCursor) {
      a.status = cur.status;
      a.detail = cur.detail;
      a.checked_at = cur.checked_at;
    }
    return this.putAssistant(a, false);
  }

  /** An `assistant_status` event: `{status, detail, checked_at}` over the last snapshot. */
  private patchAssistant(raw: unknown, version: number): void {
    if (!isObj(raw) || typeof raw.status !== 'string') return;
    this.assistantStatusVer = version;
    const base: Assistant = this.assistant ?? normAssistant({ status: raw.status })!;
    const configured = raw.status !== 'not_configured';
    const next: Assistant = {
      ...base,
      kind: str(raw.kind) ?? base.kind,
      status: raw.status,
      detail: str(raw.detail) ?? '',
      checked_at: 'checked_at' in raw ? str(raw.checked_at) : base.checked_at,
      configured,
      relay_token_set: configured ? base.relay_token_set : false,
    };
    this.putAssistant(next, true);
  }

  private putAssistant(a: Assistant, fromEvent: boolean): boolean {
    const json = JSON.stringify(a);
    if (json === this.assistantJson) return false;
    this.assistantJson = json;
    this.assistant = a;
    this.emit({ kind: 'assistant', fromEvent });
    return true;
  }

  /** The tunnel from an answer of `/api/tunnel…`. Returns whether anything changed. */
  setTunnel(raw: unknown): boolean {
    const t = normTunnel(raw);
    if (!t) return false;
    const json = JSON.stringify(t);
    if (json === this.tunnelJson) return false;
    this.tunnelJson = json;
    this.tunnel = t;
    this.emit({ kind: 'tunnel' });
    return true;
  }

  private putTyping(t: Typing, on: boolean, version: number): void {
    const r = this.route(t.session_id);
    if (this.deleted.has(r.chat)) return;
    const c = this.ensureConv(r.chat);
    const map = r.insights ? c.insightTyping : c.typing;
    c.ver.set((r.insights ? 'ti:' : 't:') + t.scope, version);
    const had = map.has(t.scope);
    if (on) map.set(t.scope, t);
    else map.delete(t.scope);
    if (had || on) this.emit({ kind: 'typing', sessionId: r.chat, insights: r.insights });
  }

  // ---- snapshots ------------------------------------------------------------------------------

  /** Merges `GET /api/sessions`, requested when the cursor was `atCursor`. */
  loadSessions(list: unknown[], atCursor: number): void {
    let changed = false;
    for (const raw of list) {
      const s = normSession(raw);
      if (!s || this.deleted.has(s.session_id)) continue;
      if ((this.sessionVer.get(s.session_id) ?? -1) > atCursor) continue;
      this.sessions.set(s.session_id, s);
      if (s.insights_session_id) this.insightsOf.set(s.insights_session_id, s.session_id);
      changed = true;
    }
    if (changed) this.emit({ kind: 'sessions' });
  }

  /**
   * The messages of a page (requested when the cursor was `atCursor`) that the conversation does
   * not know yet, added to its index (with the state a later event left aside for them). Known
   * messages, and those an event newer than the page already changed, are skipped.
   */
  private mergePage(c: Conversation, items: unknown[], atCursor: number): Message[] {
    const fresh: Message[] = [];
    for (const raw of items) {
      const got = normMessage(raw);
      if (!got || this.route(got.session_id).insights) continue;
      const key = String(got.id);
      if (c.byId.has(key) || (c.ver.get('m:' + key) ?? -1) > atCursor) continue;
      const { m, ver } = fromOutside(c, got, atCursor);
      c.byId.set(key, m);
      c.ver.set('m:' + key, ver);
      fresh.push(m);
    }
    return fresh;
  }

  /**
   * Merges an older page of messages (`GET …/messages?limit=N&before=ID`, requested when the
   * cursor was `atCursor`) and remembers the path of the page before it. Messages already known
   * are skipped (pages may overlap a reload), so loading the same page twice changes nothing.
   * Answers how many messages were added.
   */
  loadOlder(sessionId: string, items: unknown[], next: string | null, atCursor: number): number {
    if (this.deleted.has(sessionId)) return 0;
    const c = this.ensureConv(sessionId);
    const fresh = this.mergePage(c, items, atCursor);
    c.olderPath = next;
    pruneOutside(c, atCursor);
    if (!fresh.length) return 0;
    fresh.sort(compareMessages);
    const first = c.messages[0];
    if (!first || compareMessages(fresh[fresh.length - 1], first) <= 0) {
      // In place: the views hold this array.
      c.messages.splice(0, 0, ...fresh);
      this.emit({ kind: 'messages-prepended', sessionId, count: fresh.length });
    } else {
      c.messages = [...c.byId.values()].sort(compareMessages);
      this.emit({ kind: 'messages-reset', sessionId });
    }
    // Scrolling up: the far end is the newer one.
    const over = c.messages.length - MESSAGE_WINDOW;
    if (over > 0) this.dropBack(c, Math.ceil(over / MESSAGE_PAGE) * MESSAGE_PAGE);
    return fresh.length;
  }

  /**
   * The page(s) bringing back the window's dropped newer end: the path to ask for (the page
   * before the next dropped run, or the newest page); null when nothing was dropped there.
   */
  newerPath(sessionId: string): string | null {
    const c = this.convs.get(sessionId);
    if (!c || !c.newer.length) return null;
    return c.newer.length > 1 ? messagesPath(sessionId, c.newer[1].id) : messagesPath(sessionId);
  }

  /**
   * Whether messages `items` (one or more pages of `GET …/messages?limit=N&before=ID`, any order)
   * reach back to the window's last message, so that merging them leaves no gap.
   */
  reachesWindow(sessionId: string, items: unknown[]): boolean {
    const c = this.convs.get(sessionId);
    const last = c?.messages[c.messages.length - 1];
    if (!c || !last) return true;
    for (const raw of items) {
      const m = normMessage(raw);
      if (m && compareMessages(m, last) <= 0) return true;
    }
    return false;
  }

  /**
   * Merges newer messages loaded again after the window's newer end was dropped (the pages of
   * `newerPath`, requested when the cursor was `atCursor`; the caller follows `next` until
   * `reachesWindow` or the oldest page). Far messages at the older end are dropped beyond the
   * window. Answers how many messages were added.
   */
  loadNewer(sessionId: string, items: unknown[], atCursor: number): number {
    if (this.deleted.has(sessionId)) return 0;
    const c = this.ensureConv(sessionId);
    const fresh = this.mergePage(c, items, atCursor);
    pruneOutside(c, atCursor);
    fresh.sort(compareMessages);
    const last = c.messages[c.messages.length - 1];
    if (fresh.length) {
      if (!last || compareMessages(fresh[0], last) > 0) {
        c.messages.push(...fresh); // in place: the views hold this array
        this.emit({ kind: 'messages-appended', sessionId, count: fresh.length });
      } else {
        c.messages = [...c.byId.values()].sort(compareMessages);
        this.emit({ kind: 'messages-reset', sessionId });
      }
    }
    const end = c.messages[c.messages.length - 1];
    if (end) c.newer = c.newer.filter((x) => compareMessages(x, end) > 0);
    // Scrolling down: the far end is the older one.
    const over = c.messages.length - MESSAGE_WINDOW;
    if (over > 0) this.dropFront(c, Math.ceil(over / MESSAGE_PAGE) * MESSAGE_PAGE);
    return fresh.length;
  }

  /**
   * Keeps a window that grew past its size at its newer end (live messages while the user reads
   * the newest ones) to `MESSAGE_WINDOW`, dropping its oldest pages.
   */
  trimFront(sessionId: string): void {
    const c = this.convs.get(sessionId);
    if (!c || c.messages.length <= MESSAGE_WINDOW + MESSAGE_PAGE) return;
    this.dropFront(c, c.messages.length - MESSAGE_WINDOW);
  }

  private forget(c: Conversation, gone: Message[]): void {
    for (const m of gone) {
      const key = String(m.id);
      c.byId.delete(key);
      c.ver.delete('m:' + key);
    }
  }

  /** Drops the `n` oldest messages of the window; `olderPath` brings them back. */
  private dropFront(c: Conversation, n: number): void {
    n = Math.min(n, c.messages.length - 1);
    if (n <= 0) return;
    this.forget(c, c.messages.splice(0, n));
    c.olderPath = messagesPath(c.sessionId, c.messages[0].id);
    this.emit({ kind: 'messages-dropped', sessionId: c.sessionId, front: n, back: 0 });
  }

  /** Drops the `n` newest messages of the window, remembering where the dropped run starts. */
  private dropBack(c: Conversation, n: number): void {
    n = Math.min(n, c.messages.length - 1);
    if (n <= 0) return;
    const gone = c.messages.splice(c.messages.length - n, n);
    this.forget(c, gone);
    c.newer.unshift(gone[0]);
    this.emit({ kind: 'messages-dropped', sessionId: c.sessionId, front: 0, back: n });
  }

  /** Merges a conversation's messages / insights / typing, requested when the cursor was `atCursor`. */
  loadConversation(sessionId: string, snap: Snapshot, atCursor: number): void {
    if (this.deleted.has(sessionId)) return;
    const c = this.ensureConv(sessionId);
    const newer = (key: string) => (c.ver.get(key) ?? -1) > atCursor;

    if (snap.messages) {
      if (c.newer.length) {
        // The window does not reach the newest page: it starts again from it.
        this.forget(c, c.messages);
        c.messages = [];
        c.newer = [];
      }
      const prevFirst = c.messages[0];
      let oldest: Message | undefined;
      for (const raw of snap.messages) {
        const got = normMessage(raw);
        if (!got || this.route(got.session_id).insights) continue;
        if (!oldest || compareMessages(got, oldest) < 0) oldest = got;
        const key = String(got.id);
        if (newer('m:' + key)) continue;
        const { m, ver } = fromOutside(c, got, atCursor);
        c.byId.set(key, m);
        c.ver.set('m:' + key, ver);
      }
      pruneOutside(c, atCursor);
      // A page reaching no further back than what is already loaded keeps the older path.
      const olderPath = snap.olderPath === undefined ? null : snap.olderPath;
      if (!prevFirst || !oldest || compareMessages(oldest, prevFirst) <= 0) c.olderPath = olderPath;
      c.messages = [...c.byId.values()].sort(compareMessages);
      this.emit({ kind: 'messages-reset', sessionId });
    }
    if (snap.insights) {
      // A page reaching no further back than what is already loaded keeps the older path.
      const prevOldest = c.insights[c.insights.length - 1];
      let oldest: Insight | undefined;
      for (const raw of snap.insights) {
        const ins = normInsight(raw);
        if (!ins) continue;
        if (!oldest || compareInsights(ins, oldest) > 0) oldest = ins;
        const key = String(ins.id);
        if (newer('i:' + key)) continue;
        c.insightById.set(key, ins);
        c.ver.set('i:' + key, atCursor);
      }
      if (!prevOldest || !oldest || compareInsights(oldest, prevOldest) >= 0) c.insightsOlder = snap.insightsOlderPath ?? null;
      c.insights = [...c.insightById.values()].filter(insightVisible).sort(compareInsights);
      for (const k of [...c.unread]) {
        const i = c.insightById.get(k);
        if (!i || !insightVisible(i)) c.unread.delete(k);
      }
      this.emit({ kind: 'insights', sessionId, added: null });
      this.emit({ kind: 'unread', sessionId });
    }
    if (snap.typing) {
      // Live typing events since the request (a version above `typingAt`) are newer.
      const at = snap.typingAt ?? this.liveSeq;
      const newer = (key: string) => (c.ver.get(key) ?? -1) > at;
      const fresh = new Map<string, { t: Typing; insights: boolean }>();
      for (const raw of snap.typing) {
        const t = normTyping(raw);
        if (!t) continue;
        const r = this.route(t.session_id);
        fresh.set((r.insights ? 'ti:' : 't:') + t.scope, { t, insights: r.insights });
      }
      for (const [map, prefix] of [
        [c.typing, 't:'],
        [c.insightTyping, 'ti:'],
      ] as const) {
        for (const scope of [...map.keys()]) {
          const key = prefix + scope;
          if (!newer(key) && !fresh.has(key)) map.delete(scope);
        }
      }
      for (const [key, { t, insights }] of fresh) {
        if (newer(key)) continue;
        (insights ? c.insightTyping : c.typing).set(t.scope, t);
      }
      this.emit({ kind: 'typing', sessionId, insights: false });
      this.emit({ kind: 'typing', sessionId, insights: true });
    }
    if (snap.transcript) {
      const prevOldest = c.transcriptLoaded ? c.transcript[0] : undefined;
      let oldest: TranscriptTurn | undefined;
      for (const raw of snap.transcript) {
        const t = normTranscript(raw);
        if (!t) continue;
        if (!oldest || compareTurns(t, oldest) < 0) oldest = t;
        const key = String(t.id);
        if (newer('x:' + key)) continue;
        c.transcriptById.set(key, t);
        c.ver.set('x:' + key, atCursor);
      }
      if (!prevOldest || !oldest || compareTurns(oldest, prevOldest) <= 0) c.transcriptOlder = snap.transcriptOlderPath ?? null;
      c.transcript = [...c.transcriptById.values()].sort(compareTurns);
      c.transcriptLoaded = true;
      this.emit({ kind: 'transcript', sessionId, added: null });
    }
    c.loaded = true;
  }

  /**
   * Merges an older page of insights (`GET …/insights?limit=N&before=ID`) or of the transcript
   * (`GET /api/calls/{id}/transcript?limit=N&before=ID`), requested when the cursor was
   * `atCursor`, and remembers the path of the page before it.
   */
  loadOlderList(sessionId: string, list: 'insights' | 'transcript', items: unknown[], next: string | null, atCursor: number): void {
    if (this.deleted.has(sessionId)) return;
    const c = this.ensureConv(sessionId);
    const was = c.loaded;
    if (list === 'insights') this.loadConversation(sessionId, { insights: items, insightsOlderPath: next }, atCursor);
    else this.loadConversation(sessionId, { transcript: items, transcriptOlderPath: next }, atCursor);
    c.loaded = was;
    if (list === 'insights') c.insightsOlder = next;
    else c.transcriptOlder = next;
  }

  /** Merges a call's transcript (`GET /api/calls/{id}/transcript`), requested at `atCursor`. */
  loadTranscript(sessionId: string, list: unknown[], atCursor: number): void {
    if (this.deleted.has(sessionId)) return;
    const c = this.ensureConv(sessionId);
    const was = c.loaded;
    this.loadConversation(sessionId, { transcript: list }, atCursor);
    c.loaded = was;
  }

  /** Merges one transcript turn returned by the API (the 201 of a posted turn, a retry's 200). */
  mergeTurn(raw: unknown, atCursor: number): void {
    const t = normTranscript(raw);
    if (!t) return;
    const chat = this.route(t.session_id).chat;
    if (this.deleted.has(chat)) return;
    const c = this.ensureConv(chat);
    if ((c.ver.get('x:' + String(t.id)) ?? -1) > atCursor) return;
    this.putTurn(t, atCursor);
  }

  /**
   * Merges one message returned by the API (e.g. the 201 of a sent message). An entry already
   * there is kept unless `replace` (a retry's answer: the entry changed by that very request);
   * either way an entry touched by an event after `atCursor` keeps the event's state.
   */
  mergeMessage(raw: unknown, atCursor: number, replace = false): void {
    const m = normMessage(raw);
    if (!m) return;
    const c = this.ensureConv(this.route(m.session_id).chat);
    if ((c.ver.get('m:' + String(m.id)) ?? -1) > atCursor) return;
    if (!replace && c.byId.has(String(m.id))) return; // already there (from the stream or a snapshot)
    this.putMessage(m, atCursor);
  }

  /** Merges one session returned by the API. */
  mergeSession(raw: unknown, atCursor: number): void {
    const s = normSession(raw);
    if (!s || (this.sessionVer.get(s.session_id) ?? -1) > atCursor) return;
    this.putSession(s, atCursor, false);
  }
}
