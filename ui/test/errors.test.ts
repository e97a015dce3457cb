// Errors in plain words (src/errors.ts): every code a person can meet reads as a sentence, the
// API's field names are said in words, and the code stays available for support.

import { describe, expect, it } from 'vitest';
import { errorText, plainError } from '../src/errors';
import { lastExchanges } from '../src/live/exchange';
import { OVERLAY_QUESTIONS } from '../src/overlay';
import { plainSnippet } from '../src/search';
import type { Message } from '../src/types';

const res = (status: number, error?: string, message?: string) => ({ status, body: error ? { error, message } : null });

describe('plain errors', () => {
  it('names every missing field in words', () => {
    expect(plainError('missing_field', '`hub_url` and `session_token` are required')).toBe('Fill in the hub URL and the session token.');
    expect(plainError('missing_field', '`base_url` is required (e.g. http://127.0.0.1:8644)')).toBe('Fill in the base URL.');
    expect(plainError('missing_field', '')).toBe('A required value is missing.');
  });

  it('says what is wrong with a value without the code or the API names', () => {
    const s = plainError('invalid_base_url', 'invalid base_url: `10.0.0.5` is not a loopback address');
    expect(s).toBe('That base URL does not work here: “10.0.0.5” is not a loopback address.');
    expect(s).not.toMatch(/invalid_|`/);
    expect(plainError('title_too_long', 'a title is at most 200 characters')).toMatch(/^That title is too long/);
    expect(plainError('storage_unavailable', 'disk full')).toMatch(/disk may be full/);
  });

  it('falls back to the message, in words, for codes without a sentence of their own', () => {
    expect(plainError('assistant_unreachable', 'Cannot connect to http://127.0.0.1:8644 (connection refused)')).toBe(
      'Cannot connect to http://127.0.0.1:8644 (connection refused)',
    );
    expect(plainError('some_new_code', '')).toBe('Something went wrong (some new code).');
  });

  it('reads an answer: its code, or its HTTP status', () => {
    expect(errorText(res(400, 'empty_text', '`text` is empty'))).toBe('Write something first.');
    expect(errorText(res(401))).toMatch(/UI token was not accepted/);
    expect(errorText(res(502))).toBe('The app had a problem answering (HTTP 502). Try again.');
    for (const code of ['missing_field', 'invalid_field', 'invalid_json', 'session_not_found', 'not_configured', 'queue_full']) {
      expect(errorText(res(400, code, '`x` is required'))).not.toContain(code);
    }
  });
});

describe('search snippets without markdown marks', () => {
  it('drops bold, code and heading marks and moves the highlights with the text', () => {
    const raw = 'We are at **120 seats** and `pilot` soon';
    const at = Array.from(raw).join('').indexOf('120');
    const r = plainSnippet(raw, [[at, at + 3]]);
    expect(r.text).toBe('We are at 120 seats and pilot soon');
    expect(Array.from(r.text).slice(r.highlights[0][0], r.highlights[0][1]).join('')).toBe('120');
    expect(plainSnippet('## Next steps\nsend __terms__', []).text).toBe('Next steps\nsend terms');
    expect(plainSnippet('snake_case stays', []).text).toBe('snake_case stays');
  });
});

describe("the overlay's questions", () => {
  const msg = (over: Partial<Message>): Message =>
    ({
      id: 1,
      session_id: 's',
      kind: 'assistant',
      text: '',
      message_id: null,
      task_id: null,
      user_message_id: null,
      error_code: null,
      occurred_at: null,
      received_at: null,
      sort_key: 1,
      draft: false,
      delivery: null,
      delivery_error: null,
      ...over,
    }) as Message;

  it('pairs the questions asked there with their answers and says why one is not delivered', () => {
    const list = [
      msg({ id: 1, kind: 'user', text: 'q1', message_id: 'a', delivery: 'sent' }),
      msg({ id: 2, kind: 'user', text: 'from the main window', message_id: 'x', delivery: 'sent' }),
      msg({ id: 3, text: 'answer 1', user_message_id: 'a' }),
      msg({ id: 4, kind: 'error', text: 'the tool failed', user_message_id: 'a' }),
      msg({ id: 5, kind: 'user', text: 'q2', message_id: 'b', delivery: 'pending', delivery_error: { code: 'assistant_unreachable', message: 'Cannot connect' } }),
    ];
    // The overlay shows the call's newest questions, wherever they were asked.
    const shown = lastExchanges(list, OVERLAY_QUESTIONS);
    expect(shown.map((x) => x.question.text)).toEqual(['from the main window', 'q2']);
    expect(shown[1].waiting).toMatch(/^Not delivered yet: Cannot connect/);
    const t = lastExchanges(list, 3);
    expect(t.map((x) => x.question.text)).toEqual(['q1', 'from the main window', 'q2']);
    expect(t[0].replies.map((r) => r.text)).toEqual(['answer 1', 'the tool failed']);
    expect(t[0].waiting).toBeNull();
    expect(t[1].replies).toEqual([]);
  });
});
