// The store, part norm: normalisation of the loosely typed JSON of answers and events, the order of
// messages, insights and turns, and the helpers of a conversation's window (see ../store.ts).

import type { Assistant, Delivery, DeliveryError, Insight, Message, MessageKind, PermissionState, Session, SwEvent, TranscriptTurn, Tunnel, Typing } from '../types';
import type { Conversation } from './types';

export const INSIGHTS_PREFIX = 'insights:';

// ---------------------------------------------------------------------------------------------
// Normalisation of loosely typed JSON.

export const str = (v: unknown): string | null => (typeof v === 'string' ? v : v == null ? null : String(v));
export const isObj = (v: unknown): v is Record<string, unknown> => !!v && typeof v === 'object' && !Array.isArray(v);

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

export const KINDS: ReadonlySet<string> = new Set(['user', 'assistant', 'notice', 'error', 'permission']);
export const PERMISSION_STATES: ReadonlySet<string> = new Set(['pending', 'allow', 'deny', 'expired']);

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
    edited_at: str(raw.edited_at),
  };
}

export const DELIVERIES: ReadonlySet<string> = new Set(['pending', 'sent', 'failed']);

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
    language: str(raw.language),
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

export function insightTime(i: Insight): number {
  const t = timeMicros(i.occurred_at);
  if (Number.isFinite(t)) return t;
  const r = timeMicros(i.received_at);
  return Number.isFinite(r) ? r : 0;
}

export function turnTime(t: TranscriptTurn): number {
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
export function upperBound<T>(list: T[], x: T, cmp: (a: T, b: T) => number): number {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (cmp(list[mid], x) <= 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

export function indexOfSorted<T>(list: T[], x: T, cmp: (a: T, b: T) => number, same: (a: T) => boolean): number {
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
export function outsideWindow(c: Conversation, m: Message): boolean {
  const first = c.messages[0];
  if (!first) return false;
  if (c.olderPath && compareMessages(m, first) < 0) return true;
  const last = c.messages[c.messages.length - 1];
  return c.newer.length > 0 && compareMessages(m, last) > 0;
}

/** A page's message, or the state a later event left aside for it (with its cursor). */
export function fromOutside(c: Conversation, m: Message, atCursor: number): { m: Message; ver: number } {
  const key = String(m.id);
  const o = c.outside.get(key);
  if (!o) return { m, ver: atCursor };
  c.outside.delete(key);
  return o.ver > atCursor ? o : { m, ver: atCursor };
}

/** Forgets events set aside before `atCursor`: a page asked for later has their state. */
export function pruneOutside(c: Conversation, atCursor: number): void {
  for (const [k, o] of c.outside) if (o.ver <= atCursor) c.outside.delete(k);
}

/** The object an event carries for `key` (`message`, `insight`, …), tolerating `payload`/`data`. */
export function payload(ev: SwEvent, key: string): unknown {
  const v = ev[key] ?? ev.payload ?? ev.data;
  return v;
}

export const TUNNEL_KINDS: ReadonlySet<string> = new Set(['ngrok', 'external']);
export const tunnelKind = (v: unknown): 'ngrok' | 'external' | null => (typeof v === 'string' && TUNNEL_KINDS.has(v) ? (v as 'ngrok' | 'external') : null);

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
