// What Settings → Audio and its parts (the speakers and keep-audio settings) ask of the app.

import type { ApiResponse } from '../transport';

export interface AudioSettingsActions {
  /** A request to `/api/audio` (`GET` / `PUT`) whose answer the app puts in the store. */
  audioCall(method: string, path: string, body?: unknown): Promise<ApiResponse<unknown>>;
  /** Any other control API request (sources, test, meters). */
  api<T>(method: string, path: string, body?: unknown): Promise<ApiResponse<T>>;
  errorText(res: ApiResponse<unknown>): string;
}
