// Errors in plain words. The app's answers carry a stable code and a developer's sentence
// (`{"error":"missing_field","message":"`hub_url` is required"}`); a person sees a sentence made
// for them, and the code stays available for support in the element's tooltip (`describeError`).

import type { ApiResponse } from './transport';

/** What a person calls the fields the API names. */
const FIELDS: Record<string, string> = {
  base_url: 'the base URL',
  relay_token: 'the relay token',
  hub_url: 'the hub URL',
  session_token: 'the session token',
  session_id: 'the session',
  insights_session_id: 'the insights session',
  url: 'the Gateway URL',
  token: 'the token',
  session_key: 'the session key',
  api_key: 'the API key',
  model: 'the model',
  text: 'the text',
  title: 'the title',
  prelude: 'the coaching instructions',
  mic: 'the microphone',
  system: 'the call audio source',
  you_label: 'your speaker name',
  them_label: 'the other side’s speaker name',
  engine: 'the speech engine',
  kind: 'the assistant kind',
  authtoken: 'the ngrok authtoken',
  domain: 'the domain',
  external_url: 'the external URL',
  speaker: 'the speaker',
  decision: 'the decision',
  access_token: 'the access token',
  check_interval_secs: 'the check interval',
  wait_secs: 'the waiting time',
};

/** `base_url` → "the base URL"; an unknown name is shown with spaces. */
export function fieldName(name: string): string {
  const last = name.split('.').pop() ?? name;
  return FIELDS[last] ?? `the ${last.replace(/_/g, ' ')}`;
}

/** Back-quoted field names replaced by their names (`hub_url` → the hub URL), other quoted values in quotes. */
function humanize(message: string): string {
  return message.replace(/`([a-z_.]+)`/g, (_, f: string) => fieldName(f)).replace(/`([^`]*)`/g, '“$1”');
}

/** The sentence's first letter up, a full stop at its end. */
function sentence(s: string): string {
  const t = s.trim();
  if (!t) return t;
  const up = t[0].toUpperCase() + t.slice(1);
  return /[.!?…)]$/.test(up) ? up : `${up}.`;
}

/** Fields a `missing_field` message names ("`a` is required", "`a` and `b` are required"). */
function missingFields(message: string): string[] {
  return [...message.matchAll(/`([a-z_.]+)`/g)].map((m) => fieldName(m[1]));
}

function list(items: string[]): string {
  if (items.length <= 1) return items[0] ?? '';
  return `${items.slice(0, -1).join(', ')} and ${items[items.length - 1]}`;
}

/** The part of a message after a leading "invalid <field>:" (said again by the sentence). */
function detail(message: string): string {
  return humanize(message.replace(/^invalid [a-z_]+:\s*/i, '')).trim();
}

type Plain = string | ((message: string) => string);

/** A sentence for each code a person can meet; the rest fall back to the message, humanized. */
const PLAIN: Record<string, Plain> = {
  missing_field: (m) => {
    const f = missingFields(m);
    return f.length ? `Fill in ${list(f)}.` : 'A required value is missing.';
  },
  invalid_field: (m) => sentence(`That value is not accepted: ${detail(m)}`),
  invalid_url: (m) => sentence(`That address does not work here: ${detail(m)}`),
  invalid_base_url: (m) => sentence(`That base URL does not work here: ${detail(m)}`),
  insecure_url: (m) => sentence(`That address is not safe to use: ${detail(m)}`),
  invalid_token: (m) => sentence(`That token is not valid: ${detail(m)}`),
  invalid_relay_token: (m) => sentence(`That relay token is not valid: ${detail(m)}`),
  invalid_api_key: (m) => sentence(`That API key is not valid: ${detail(m)}`),
  invalid_model: (m) => sentence(`That model name is not valid: ${detail(m)}`),
  invalid_label: (m) => sentence(`That speaker name is not valid: ${detail(m)}`),
  invalid_json: 'The app could not read what this page sent. Reload the page and try again.',
  bad_request: 'The app could not understand what this page sent. Reload the page and try again.',
  payload_too_large: 'That is too large to send.',
  text_too_long: 'That message is too long: at most 16,000 characters.',
  title_too_long: 'That title is too long: at most 200 characters.',
  prelude_too_long: 'The coaching instructions are too long.',
  empty_text: 'Write something first.',
  empty_query: 'Type something to search for.',
  query_too_long: 'That search is too long.',
  session_not_found: 'This conversation no longer exists (it may have been deleted).',
  message_not_found: 'That message no longer exists.',
  not_a_call: 'This conversation is a chat, not a call.',
  call_ended: 'The call has already ended.',
  no_transcript: 'This call has no transcript yet: there is nothing to summarise.',
  storage_unavailable:
    'The app could not save this: the disk may be full. Free some space and try again; nothing already saved was lost.',
  shutting_down: 'The app is shutting down. Start it again to go on.',
  request_timeout: 'The app took too long to answer. Try again.',
  unauthorized: 'This page’s UI token was not accepted. Open the address the app printed again.',
  not_found: 'The app does not know this address (it may be an older or newer version).',
  method_not_allowed: 'The app does not allow that here (it may be an older or newer version).',
  not_configured: 'No assistant is connected yet. Choose one in Settings → Assistant.',
  assistant_not_configured: 'No assistant is connected yet. Choose one in Settings → Assistant.',
  not_paired: 'The assistant is not paired yet. Pair it in Settings → Assistant.',
  assistant_not_paired: 'The assistant is not paired yet. Pair it in Settings → Assistant.',
  unknown_kind: 'This version of the app does not know that kind of assistant.',
  kind_not_available: 'That kind of assistant is not available in this build.',
  queue_full: 'Too much is waiting to be sent to the assistant. Wait a moment and try again.',
  already_resolved: 'This request was already answered.',
  permission_not_found: 'This request is no longer waiting for an answer.',
  invalid_decision: 'Answer with Allow or Deny.',
  not_failed: 'Only something that failed can be sent again.',
  not_final: 'That turn is still being heard.',
  in_flight: 'That is being sent already.',
  nothing_running: 'The assistant is not writing anything right now.',
  not_supported: 'Your assistant does not support this.',
  token_write_failed: (m) => sentence(`The token could not be saved on this computer: ${humanize(m)}`),
  settings_write_failed: (m) => sentence(`The settings could not be saved on this computer: ${humanize(m)}`),
  config_write_failed: (m) => sentence(`The settings could not be saved on this computer: ${humanize(m)}`),
  audio_unavailable: (m) => sentence(m ? `The app cannot hear on this computer: ${humanize(m)}` : 'The app cannot hear on this computer.'),
  unknown_source: (m) => sentence(m ? `That sound device is not available: ${humanize(m)}` : 'That sound device is not available any more. Pick another one'),
  invalid_limit: 'The app asked for a page it cannot give. Reload the page.',
  invalid_cursor: 'The app asked for a page it cannot give. Reload the page.',
  invalid_format: 'That export format is not available.',
};

/** A code and message as a sentence for a person. */
export function plainError(code: string, message: string): string {
  const p = PLAIN[code];
  if (typeof p === 'string') return p;
  if (p) return p(message);
  // Codes without a sentence of their own (an assistant's delivery problems among them) come
  // with a message written for people; field names are still said in words.
  if (message) return sentence(humanize(message));
  return `Something went wrong (${code.replace(/_/g, ' ')}).`;
}

/** `{code, message}` of an error answer (empty when it has none). */
export function errorOf(res: ApiResponse<unknown>): { code: string; message: string } {
  const b = res.body as { error?: unknown; message?: unknown } | null;
  if (b && typeof b === 'object' && typeof b.error === 'string') {
    return { code: b.error, message: typeof b.message === 'string' ? b.message : '' };
  }
  return { code: '', message: '' };
}

/** An error answer in plain words. */
export function errorText(res: ApiResponse<unknown>): string {
  const { code, message } = errorOf(res);
  if (code) return plainError(code, message);
  if (res.status === 401) return PLAIN.unauthorized as string;
  return res.status >= 500
    ? `The app had a problem answering (HTTP ${res.status}). Try again.`
    : `The app answered with HTTP ${res.status}.`;
}

/**
 * Keeps the code for support: the element's tooltip and `data-error-code` (cleared with
 * `null`, when the element shows something else).
 */
export function describeError(el: HTMLElement, res: ApiResponse<unknown> | null): void {
  const code = res ? errorOf(res).code : '';
  if (res && (code || res.status >= 400)) {
    el.title = code ? `Error code: ${code} (HTTP ${res.status})` : `HTTP ${res.status}`;
    el.dataset.errorCode = code || String(res.status);
  } else {
    el.removeAttribute('title');
    delete el.dataset.errorCode;
  }
}
