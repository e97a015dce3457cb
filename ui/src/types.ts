// Wire shapes of the control API and the event stream (docs/contract.md). Everything coming
// from the app is treated as loosely typed JSON and normalised at the edge (store.ts).

export type MessageKind = 'user' | 'assistant' | 'notice' | 'error';

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
  | 'typing_stopped';

/** One event of the stream: the JSON of an SSE `data:` line (or a Tauri `sw-event` payload). */
export interface SwEvent {
  id: number;
  type: EventType | string;
  session_id?: string;
  [key: string]: unknown;
}

export interface ApiError {
  ok: false;
  error: string;
  message: string;
}
