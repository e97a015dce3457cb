// Wire shapes of the control API and the event stream (docs/contract.md). Everything coming
// from the app is treated as loosely typed JSON and normalised at the edge (store.ts).
//
// The control API's shapes come from its OpenAPI document: `api.gen.ts` is generated from it
// (`npm run gen:api`; CI regenerates it and fails when it differs). The types below are those
// schemas as the UI holds them once normalised (`Normalised`: an optional field is present,
// `null` when the answer left it out); where the UI holds a field differently, `WireBut` names
// the field, which must still be in the schema, and the type says how. So an API change the UI
// does not follow (a field added, renamed, removed or retyped) fails `tsc`. Shapes the document
// does not describe (the event stream, partial turns, levels, the assistant's per-kind fields)
// stay written by hand.

import type { components } from './api.gen';

/** The control API's schemas (generated from its OpenAPI document). */
export type Schemas = components['schemas'];

/** A schema as the UI holds it: every optional field present, `null` when the answer left it out. */
export type Normalised<T> = { [K in keyof T]-?: undefined extends T[K] ? Exclude<T[K], undefined> | null : T[K] };

/** `Normalised<S>` without the fields `K`, which the UI holds differently (each must be in `S`). */
export type WireBut<S, K extends keyof S> = Omit<Normalised<S>, K>;

/** The kinds of a chat's messages (transcript turns are listed apart: `TranscriptTurn`). */
export type MessageKind = Exclude<Schemas['MessageKind'], 'transcript'>;

/** `GET /api/sessions` (`SessionView`). */
export type Session = Normalised<Schemas['SessionView']>;

/**
 * A chat's message (`MessageView`): ids kept as strings or numbers, the delivery typed, and a
 * permission card's fields (`request_id`, `tool`, `input_preview`, `state`, `resolver`) as one
 * `permission`.
 */
export interface Message
  extends WireBut<
    Schemas['MessageView'],
    'id' | 'kind' | 'received_at' | 'delivery' | 'delivery_error' | 'purpose' | 'request_id' | 'tool' | 'input_preview' | 'state' | 'resolver'
  > {
  id: string | number;
  kind: MessageKind;
  received_at: string | null;
  /** Outgoing (user) messages only: where the desktop → assistant delivery stands. */
  delivery: Delivery | null;
  /** The last delivery problem: a note while `pending` (retried), the reason when `failed`. */
  delivery_error: DeliveryError | null;
  /** Kind `permission` only: the card's request (settled in place). */
  permission?: PermissionInfo | null;
  /** Not an ordinary message: `summary_request` ("Summarise this call", the transcript in its text). */
  purpose?: string | null;
}

export type PermissionState = 'pending' | 'allow' | 'deny' | 'expired';

/** A permission card: a tool of the assistant waits for Allow / Deny. */
export interface PermissionInfo {
  request_id: string;
  tool: string;
  input_preview: string;
  state: PermissionState;
  /** Who decided (null while pending or when it expired). */
  resolver: string | null;
}

export type Delivery = 'pending' | 'sent' | 'failed';

export interface DeliveryError {
  code: string;
  message: string;
}

/** One final turn of a call's transcript (`TranscriptView`; `session_id` is the call's chat session). */
export interface TranscriptTurn extends WireBut<Schemas['TranscriptView'], 'id' | 'received_at' | 'offset_ms' | 'delivery' | 'delivery_error'> {
  id: string | number;
  received_at: string | null;
  /** Time into the call, in milliseconds. */
  offset_ms: number | null;
  delivery: Delivery | null;
  delivery_error: DeliveryError | null;
}

export type AssistantStatus = 'not_configured' | 'checking' | 'online' | 'auth_failed' | 'unreachable' | 'misconfigured';
export type AssistantMode = Schemas['Mode'];

/** The gateway-only fields of the `GET /api/assistant` view (`kinds/gateway.ts` reads them from `extra`). */
export interface GatewayFields {
  url?: string | null;
  session_key?: string | null;
  device_id?: string | null;
  server_version?: string | null;
  pairing?: { request_id: string; command: string } | null;
}

/**
 * `GET /api/assistant`: the active assistant kind's configuration and status (`incoming`: the
 * link). The document describes the fields every kind has (`Assistant`); the rest are the
 * `incoming` link's and the gateway's (written here).
 */
export interface Assistant extends WireBut<Schemas['Assistant'], 'configured' | 'relay_token_set' | 'status' | 'mode' | 'delivery'> {
  /** The active kind (`incoming` = `POST /v1/incoming`). */
  kind: string;
  /** The assistant reports a version StageWhisper is not tested with (plain words), else null. */
  warning: string | null;
  configured: boolean;
  relay_token_set: boolean;
  status: AssistantStatus | string;
  assistant_version: string | null;
  events_fallback_detail: string;
  mode: AssistantMode | string;
  delivery: 'callback' | 'events' | 'none' | string;
  fallback_reason: string | null;
  prelude: string;
  prelude_is_default: boolean;
  default_prelude: string;
  callback_url: string | null;
  last_error: { code: string; message: string; at: string | null } | null;
  /** The whole answer, for the fields only one kind has (e.g. `clawborrator`'s `hub_url`). */
  extra: Record<string, unknown>;
}

/** A peer version StageWhisper is tested with (`series`: the prefix treated as tested). */
export interface ProviderTested {
  package: string;
  version: string;
  series: string;
}

/** One real peer an assistant kind serves (`GET /api/providers`). */
export interface Provider {
  id: string;
  kind: string;
  name: string;
  available: boolean;
  install: string;
  setup: string[];
  tested_with: ProviderTested[];
  known_bad: { package: string; versions: string; warning: string }[];
}

/** An assistant kind (a transport); `available: false` = coming, not selectable. */
export interface AssistantKindInfo {
  id: string;
  name: string;
  description: string;
  available: boolean;
  /** Its settings (the keys of `PUT /api/assistant`); absent: an older core. */
  settings?: KindSettingField[];
  /** A running reply can be stopped; absent: an older core. */
  can_stop?: boolean;
}

/** One settings field of a kind (the list of kinds, `GET /api/assistant/kinds`). */
export interface KindSettingField {
  name: string;
  label: string;
  input: 'text' | 'url' | 'secret' | 'multiline' | 'choice';
  required: boolean;
  hint: string;
  choices: string[];
}

/** `GET /api/assistant/kinds`: the list of kinds, the active one named. */
export interface KindList {
  active_kind: string;
  kinds: AssistantKindInfo[];
}

/** `GET /api/providers` (the document leaves the kinds and providers untyped: written here). */
export interface Providers extends WireBut<Schemas['Providers'], 'kinds' | 'providers'> {
  kinds: AssistantKindInfo[];
  providers: Provider[];
}

export type TunnelState = 'off' | 'connecting' | 'online' | 'failed';
export type TunnelKind = 'ngrok' | 'external';

/**
 * `GET /api/tunnel` (and the answers of its other routes): the callback tunnel. The document
 * describes its first fields (`Tunnel`); the rest (and `config`, untyped there) are written here.
 */
export interface Tunnel extends WireBut<Schemas['Tunnel'], 'state' | 'kind' | 'callback_url' | 'local_callback_url' | 'since' | 'config'> {
  state: TunnelState | string;
  kind: TunnelKind | null;
  /** The advertised callback URL (the tunnel's origin while it is up, else the loopback one). */
  callback_url: string | null;
  local_callback_url: string | null;
  error: { code: string; message: string } | null;
  since: string | null;
  next_retry_at: string | null;
  verified: boolean | null;
  checked_at: string | null;
  /** What the remote assistant must allow (null: nothing, e.g. no tunnel or a loopback origin). */
  assistant_allow: { variable: string; value: string; line: string } | null;
  config: {
    kind: TunnelKind | null;
    enabled: boolean;
    url: string | null;
    domain: string | null;
    check_interval_secs: number | null;
    verify: boolean;
    authtoken_set: boolean;
    authtoken_source: 'saved' | 'env' | null;
  };
}

/** A source of the sound server (`GET /api/audio/sources`, `SourceView`): `name` is what `mic` / `system` take; `is_default`: what `"default"` means for that channel. */
export type AudioSource = Normalised<Schemas['SourceView']>;

export type AudioChannel = Schemas['Channel'];

/** The speech engine as answered (`EngineView`; never the API key itself). */
export interface AudioEngineView extends WireBut<Schemas['EngineView'], 'kind' | 'language' | 'api_key_set'> {
  kind: 'builtin' | 'whisper' | 'openai' | string;
  /** `whisper`: `auto` or the language forced (ISO 639-1). */
  language?: string | null;
  /** `openai`: a key is saved. */
  api_key_set: boolean;
}

/** A channel's status (`ChannelStatus`); `state`: `off`, `listening` or `error`. */
export interface AudioChannelStatus extends WireBut<Schemas['ChannelStatus'], 'channel'> {
  channel: AudioChannel | string;
}

/** The pipeline's status (`GET /api/audio` `status`, the `audio_status` event; `AudioStatus`). */
export interface AudioStatus extends WireBut<Schemas['AudioStatus'], 'state' | 'channels' | 'engine' | 'backlog'> {
  state: Schemas['ListenState'] | string;
  channels: AudioChannelStatus[];
  /** `state`: `ready`, `down` or `unavailable`. */
  engine: Normalised<Schemas['EngineStatus']>;
  backlog: Normalised<Schemas['BacklogStatus']>;
}

/** `GET /api/audio`: the audio settings and the status (`AudioView`). */
export interface Audio extends WireBut<Schemas['AudioView'], 'system' | 'engine' | 'status' | 'speakers'> {
  /** `mic`: a source name, `"default"`, or `null` (off); `system` the same (an app's sound is read as its source). */
  system: string | null;
  engine: AudioEngineView;
  status: AudioStatus;
  /** Telling the call's speakers apart: the setting and whether it can run here (`null`: an older core). */
  speakers?: Normalised<Schemas['SpeakersView']> | null;
}

/** The two channels' levels (0–1 peaks; `null`: the channel is off). */
export interface AudioLevels {
  mic: number | null;
  system: number | null;
}

/** A turn being heard (`transcript_partial`, live only): greyed until its final turn is stored. */
export interface PartialTurn {
  turn_id: string;
  /** The call's chat session. */
  session_id: string;
  channel: AudioChannel | string;
  speaker: string | null;
  text: string;
  /** `Date.now()` when the turn's first partial came / its last one. */
  since: number;
  at: number;
}

/** An insight (`InsightView`; `session_id`: the chat session it belongs to, not the `insights:` one). */
export interface Insight extends WireBut<Schemas['InsightView'], 'id' | 'received_at' | 'offset_ms'> {
  id: string | number;
  received_at: string | null;
  offset_ms: number | null;
  /** Flagged by the assistant as not for the list (an event's field). */
  hidden?: boolean;
}

/** A typing indicator (`TypingView`). */
export interface Typing extends WireBut<Schemas['TypingView'], 'since'> {
  since: string | null;
}

/** `GET /api/settings` (`SettingsView`). */
export type Settings = Normalised<Schemas['SettingsView']>;

export type EventType =
  | 'session_created'
  | 'session_updated'
  | 'session_deleted'
  | 'message_added'
  | 'message_updated'
  | 'insight_added'
  | 'insight_updated'
  | 'typing_started'
  | 'typing_stopped'
  | 'transcript_added'
  | 'transcript_updated';

/** One event of the stream: the JSON of an SSE `data:` line (or a Tauri `sw-event` payload). */
export interface SwEvent {
  /** The cursor; `0` for a live-only event (`live: true`), which is never stored or replayed. */
  id: number;
  live?: boolean;
  type: EventType | string;
  session_id?: string;
  [key: string]: unknown;
}

/** An error answer (`Error`): `ok` is always false. */
export interface ApiError extends WireBut<Schemas['Error'], 'ok'> {
  ok: false;
}
