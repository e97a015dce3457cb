// Settings → Audio's engine that checks: Save tries the engine just saved and Test tries the one
// being typed (`POST /api/audio/engine/check`: a server gets one short request, a local engine
// loads its model), and says in words whether it works; the description follows the choice before
// it is saved.

import { apiError, hostOf, isLoopbackUrl } from '../audio';
import type { ApiResponse } from '../transport';

/** `POST /api/audio/engine/check`'s answer. */
export interface EngineCheck {
  ok: boolean;
  /** `ok`, `unavailable`, `down`, `rejected` or `decode`. */
  code: string;
  kind: string;
  message: string;
  saved: boolean;
}

export type Api = (method: string, path: string, body?: unknown) => Promise<ApiResponse<unknown>>;

/** Tries `engine` (as `PUT /api/audio` takes it; null: the saved engine). Throws with a sentence when the request itself fails. */
export async function checkEngine(api: Api, engine: Record<string, unknown> | null): Promise<EngineCheck> {
  const res = await api('POST', '/api/audio/engine/check', engine ? { engine } : {});
  const b = res.body as Partial<EngineCheck> | null;
  if (res.status === 200 && b && typeof b.ok === 'boolean') {
    return { ok: b.ok, code: String(b.code ?? ''), kind: String(b.kind ?? ''), message: String(b.message ?? ''), saved: b.saved === true };
  }
  const e = apiError(res);
  throw new Error(e.message || `the app answered ${res.status}`);
}

/** An engine message without what only a developer reads (`(os error 111)`). */
export function plainEngineWords(message: string): string {
  return message.replace(/\s*\(os error \d+\)/g, '').trim();
}

/**
 * The sentence for a check: after Save (`saved`: "Saved, but the server does not answer: …") or
 * after Test ("The server does not answer: …").
 */
export function checkSentence(c: EngineCheck, afterSave: boolean): string {
  const server = c.kind === 'openai';
  // The sentence says "the server does not answer" already: not twice.
  const why = plainEngineWords(c.message).replace(/^the transcription server at \S+ is not answering:\s*/i, '');
  if (c.ok) return `${afterSave ? 'Saved. ' : ''}${server ? 'The transcription server answered.' : 'The speech engine is ready.'}`;
  const what =
    c.code === 'down'
      ? server
        ? 'the server does not answer'
        : 'the speech engine does not work'
      : c.code === 'rejected'
        ? server
          ? 'the server refused the request'
          : 'the speech engine refused'
        : c.code === 'unavailable'
          ? 'the speech engine cannot run here'
          : server
            ? 'the server’s answer is not a transcription'
            : 'the speech engine failed';
  const head = afterSave ? `Saved, but ${what}` : what[0].toUpperCase() + what.slice(1);
  return `${head}: ${why || 'no reason given'}.`.replace(/\.\.$/, '.');
}

/** What happens to the call's audio with the engine chosen in the form (before it is saved). */
export function draftEngineNotice(kind: 'builtin' | 'whisper' | 'openai', url: string): { text: string; leaves: boolean } {
  if (kind === 'builtin') return { text: 'Speech is recognised on this computer (PocketSphinx); no audio leaves it.', leaves: false };
  if (kind === 'whisper') return { text: 'Speech is recognised on this computer by a Whisper model; no audio leaves it.', leaves: false };
  const host = hostOf(url.trim());
  if (!url.trim() || !host) return { text: 'Speech is sent to the transcription server whose address you enter below.', leaves: false };
  if (isLoopbackUrl(url.trim())) return { text: 'Speech is sent to a transcription server on this computer; no audio leaves it.', leaves: false };
  return { text: `Once saved, the call’s audio leaves this computer: every turn you and the other side speak is sent to ${host}.`, leaves: true };
}
