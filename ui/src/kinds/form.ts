// What Settings → Assistant expects of a kind's form (see kinds/index.ts, the UI's kind
// registry).

import type { ApiResponse } from '../transport';
import type { Assistant } from '../types';

export interface AssistantActions {
  /** A request to `/api/assistant…` whose 200 answer the app puts in the store. */
  assistantCall(method: string, path: string, body?: unknown): Promise<ApiResponse<unknown>>;
  errorText(res: ApiResponse<unknown>): string;
  /** A plain control API request (a kind's form may read lists with it). */
  api?<T>(method: string, path: string, body?: unknown): Promise<ApiResponse<T>>;
}

/** A kind's part of Settings → Assistant, shown while that kind is picked. */
export interface KindForm {
  /** The form (shown above the result line). */
  readonly el: HTMLElement;
  /** What the kind reports, shown below the result line (optional). */
  readonly report?: HTMLElement;
  /** Shows the store's view (`GET /api/assistant`; it may be another kind's). */
  render(a: Assistant | null): void;
}

/** The form's module: how the registry builds it and what the picker needs to know. */
export interface KindModule {
  /** The form saves with `PUT /api/assistant {kind, …}` itself: no "Use this kind" button. */
  readonly savesItself: boolean;
  /** A running reply can be stopped (until the core's list of kinds says). */
  readonly canStop?: boolean;
  /** The status card's next step while this kind is the one in use and shown (optional). */
  nextStep?(a: Assistant): string | null;
  create(actions: AssistantActions, result: HTMLElement): KindForm;
}
