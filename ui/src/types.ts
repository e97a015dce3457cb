// Wire shapes of the control API and the event stream (docs/contract.md). Everything coming
// from the app is treated as loosely typed JSON and normalised at the edge (store.ts).

export type MessageKind = 'user' | 'assistant' | 'notice' | 'error' | 'permission';

export interface Session {
  session_id: string;
  kind: string;
  is_call: boolean;
  title: string | null;
  created_at: string;
  ended_at: string | null;
  insights_session_id: string | null;
}

export interface Message {
  id: string | number;
  session_id: string;
  kind: MessageKind;
  text: string;
  message_id: string | null;
  task_id: string | null;
  user_message_id: string | null;
  error_code: string | null;
  occurred_at: string | null;
  received_at: string | null;
  sort_key: number;
  draft: boolean;
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

/** One final turn of a call's transcript (`session_id` is the call's chat session). */
export interface TranscriptTurn {
  id: string | number;
  session_id: string;
  speaker: string | null;
  text: string;
  received_at: string | null;
  /** Time into the call, in milliseconds. */
  offset_ms: number | null;
  task_id: string | null;
  delivery: Delivery | null;
  delivery_error: DeliveryError | null;
}

export type AssistantStatus = 'not_configured' | 'checking' | 'online' | 'auth_failed' | 'unreachable' | 'misconfigured';
export type AssistantMode = 'auto' | 'callback' | 'events';

/** The gateway-only fields of the `GET /api/assistant` view (`kinds/gateway.ts` reads them from `extra`). */
export interface GatewayFields {
  url?: string | null;
  session_key?: string | null;
  device_id?: string | null;
  server_version?: string | null;
  pairing?: { request_id: string; command: string } | null;
}

/** `GET /api/assistant`: the active assistant kind's configuration and status (`incoming`: the link). */
export interface Assistant {
  /** The active kind (`incoming` = `POST /v1/incoming`). */
  kind: string;
  /** The assistant reports a version StageWhisper is not tested with (plain words), else null. */
  warning: string | null;
  configured: boolean;
  base_url: string | null;
  relay_token_set: boolean;
  status: AssistantStatus | string;
  detail: string;
  checked_at: string | null;
  assistant_version: string | null;
  supports_events_fallback: boolean | null;
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

/** `GET /api/providers`. */
export interface Providers {
  active_kind: string;
  kinds: AssistantKindInfo[];
  providers: Provider[];
}

export type TunnelState = 'off' | 'connecting' | 'online' | 'failed';
export type TunnelKind = 'ngrok' | 'external';

/** `GET /api/tunnel` (and the answers of its other routes): the callback tunnel. */
export interface Tunnel {
  state: TunnelState | string;
  kind: TunnelKind | null;
  public_url: string | null;
  /** The advertised callback URL (the tunnel's origin while it is up, else the loopback one). */
  callback_url: string | null;
  local_callback_url: string | null;
  detail: string;
  error: { code: string; message: string } | null;
  since: string | null;
  attempt: number;
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

/** A source of the sound server (`GET /api/audio/sources`). */
export interface AudioSource {
  /** The server's name (what `mic` / `system` take). */
  name: string;
  description: string;
  kind: 'microphone' | 'monitor';
  /** What `"default"` means for that channel. */
  is_default: boolean;
}

export type AudioChannel = 'mic' | 'system';

/** The speech engine as answered (never the API key itself). */
export interface AudioEngineView {
  kind: 'builtin' | 'whisper' | 'openai' | string;
  base_url: string | null;
  model: string | null;
  /** `whisper`: `auto` or the language forced (ISO 639-1). */
  language?: string | null;
  /** `openai`: a key is saved. */
  api_key_set: boolean;
  /** The server is not on this computer: the call's audio is sent there. */
  leaves_machine: boolean;
  /** What happens to the call's audio, in plain words. */
  notice: string;
}

export interface AudioChannelStatus {
  channel: AudioChannel | string;
  /** `off`, `listening` or `error`. */
  state: string;
  speaker: string;
  source: string | null;
  detail: string;
}

/** The pipeline's status (`GET /api/audio` `status`, the `audio_status` event). */
export interface AudioStatus {
  state: 'idle' | 'listening' | 'error' | string;
  detail: string;
  call_id: string | null;
  channels: AudioChannelStatus[];
  /** `state`: `ready`, `down` or `unavailable`. */
  engine: { kind: string; state: string; detail: string };
  backlog: { turns: number; seconds: number; dropped_seconds: number };
}

/** `GET /api/audio`: the audio settings and the status. */
export interface Audio {
  /** A source name, `"default"`, or `null` (off). */
  mic: string | null;
  system: string | null;
  engine: AudioEngineView;
  you_label: string;
  them_label: string;
  status: AudioStatus;
  /** Telling the call's speakers apart: the setting and whether it can run here (`null`: an older core). */
  speakers?: { enabled: boolean; available: boolean; detail: string } | null;
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

export interface Insight {
  id: string | number;
  /** The chat session the insight belongs to (not the `insights:` one). */
  session_id: string;
  text: string;
  task_id: string | null;
  message_id: string | null;
  occurred_at: string | null;
  received_at: string | null;
  offset_ms: number | null;
  draft: boolean;
  hidden?: boolean;
}

export interface Typing {
  session_id: string;
  scope: string;
  label: string | null;
  since: string | null;
}

export interface Settings {
  callback_url: string;
  callback_token: string;
  data_dir: string;
  typing_timeout_secs: number;
  insights_grace_secs: number;
}

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

export interface ApiError {
  ok: false;
  error: string;
  message: string;
}
