// @vitest-environment happy-dom
// The live call's pieces without a browser: the problem sentences, the engine check's words, the
// summary request's line and the pinned question and answer.
import { describe, expect, it } from 'vitest';
import { checkSentence, draftEngineNotice } from '../src/live/enginecheck';
import { lastExchanges } from '../src/live/exchange';
import { assistantProblem, audioProblems, backlogRows } from '../src/live/status';
import { isSummaryRequest, latestSummary, summaryRequestBody } from '../src/live/summary';
import type { Assistant, Audio, AudioStatus, Message } from '../src/types';

function st(over: Partial<AudioStatus> = {}): AudioStatus {
  return {
    state: 'listening',
    detail: 'Listening to your microphone and the call’s audio.',
    call_id: 'c1',
    channels: [
      { channel: 'mic', state: 'listening', speaker: 'You', source: 'mic', detail: '' },
      { channel: 'system', state: 'listening', speaker: 'Them', source: 'call.monitor', detail: '' },
    ],
    engine: { kind: 'openai', state: 'ready', detail: 'Ready.' },
    backlog: { turns: 0, seconds: 0, dropped_seconds: 0 },
    ...over,
  };
}

const audio = (status: AudioStatus): Audio => ({
  mic: 'default',
  system: 'default',
  engine: { kind: status.engine.kind, base_url: null, model: null, api_key_set: false, leaves_machine: false, notice: '' },
  you_label: 'You',
  them_label: 'Them',
  status,
  keep_audio: false,
});

function msg(id: number, over: Partial<Message>): Message {
  return {
    id,
    session_id: 's',
    kind: 'user',
    text: '',
    message_id: null,
    task_id: null,
    user_message_id: null,
    error_code: null,
    occurred_at: null,
    received_at: null,
    sort_key: id,
    draft: false,
    delivery: null,
    delivery_error: null,
    edited_at: null,
    ...over,
  };
}

describe('problem sentences', () => {
  it('says the engine being down once, with what waits', () => {
    const down = st({ state: 'error', engine: { kind: 'openai', state: 'down', detail: 'not answering (os error 111)' }, backlog: { turns: 1, seconds: 4, dropped_seconds: 0 } });
    expect(audioProblems(audio(down), 'c1').map((p) => p.text)).toEqual(['Transcription server not answering — 1 turn waiting, nothing lost.']);
    const two = { ...down, backlog: { turns: 2, seconds: 8, dropped_seconds: 0 } };
    expect(audioProblems(audio(two), 'c1')[0].text).toBe('Transcription server not answering — 2 turns waiting, nothing lost.');
    const builtin = { ...down, engine: { kind: 'builtin', state: 'down', detail: 'x' } };
    expect(audioProblems(audio(builtin), 'c1')[0].text).toMatch(/^Speech engine not working — /);
  });

  it('says nothing for another call, while idle or when all is well', () => {
    expect(audioProblems(audio(st()), 'c1')).toEqual([]);
    expect(audioProblems(audio(st({ state: 'error', engine: { kind: 'openai', state: 'down', detail: '' } })), 'other')).toEqual([]);
    expect(audioProblems(null, 'c1')).toEqual([]);
  });

  it('one sentence for two channels with the same cause', () => {
    const why = 'No sound server: nothing listens at /run/user/0/pulse/native.';
    const s = st({
      state: 'error',
      channels: [
        { channel: 'mic', state: 'error', speaker: 'You', source: null, detail: why },
        { channel: 'system', state: 'error', speaker: 'Them', source: null, detail: why },
      ],
    });
    const p = audioProblems(audio(s), 'c1');
    expect(p).toHaveLength(1);
    expect(p[0].text).toBe('Neither your microphone nor the call’s audio is heard — no sound server: nothing listens at /run/user/0/pulse/native.');
  });

  it('the assistant: only when configured and not fine', () => {
    const a = (status: string, configured = true) => ({ status, configured, detail: '' }) as unknown as Assistant;
    expect(assistantProblem(a('online'))).toBeNull();
    expect(assistantProblem(a('unreachable', false))).toBeNull();
    expect(assistantProblem(a('unreachable'))?.text).toMatch(/^Assistant not answering — no insights for now; what you send waits/);
  });

  it('a transcript row per waiting turn, for the call listened to only', () => {
    const s = st({ backlog: { turns: 2, seconds: 9, dropped_seconds: 0 } });
    const rows = backlogRows(s, 'c1');
    expect(rows).toHaveLength(2);
    expect(rows[0].textContent).toMatch(/A turn waits to be transcribed \(about 5 s of speech\) — kept, nothing lost\./);
    expect(backlogRows(s, 'other')).toEqual([]);
  });
});

describe('the engine check in words', () => {
  const check = (ok: boolean, code: string, kind = 'openai', message = '') => ({ ok, code, kind, message, saved: true });
  it('after Save and after Test', () => {
    expect(checkSentence(check(false, 'down', 'openai', 'the transcription server at http://127.0.0.1:8001 is not answering: cannot connect (os error 111)'), true)).toBe(
      'Saved, but the server does not answer: cannot connect.',
    );
    expect(checkSentence(check(false, 'down', 'openai', 'timed out'), false)).toBe('The server does not answer: timed out.');
    expect(checkSentence(check(false, 'rejected', 'openai', 'HTTP 401: bad key'), true)).toBe('Saved, but the server refused the request: HTTP 401: bad key.');
    expect(checkSentence(check(true, 'ok'), true)).toBe('Saved. The transcription server answered.');
    expect(checkSentence(check(true, 'ok', 'builtin'), false)).toBe('The speech engine is ready.');
  });

  it('the description follows the choice', () => {
    expect(draftEngineNotice('builtin', '').text).toMatch(/PocketSphinx/);
    expect(draftEngineNotice('openai', '').text).not.toMatch(/PocketSphinx/);
    expect(draftEngineNotice('openai', 'http://127.0.0.1:8000')).toEqual({ text: expect.stringMatching(/on this computer; no audio leaves it/), leaves: false });
    expect(draftEngineNotice('openai', 'https://api.example.com').leaves).toBe(true);
  });
});

describe('the summary request and the pinned exchange', () => {
  const text = 'Please summarise this call: …\n\nTranscript (2 turns, about 1 min):\n[00:00] Ana: Hi\n[00:05] Bo: Budget';
  const req = msg(3, { text, message_id: 'r', purpose: 'summary_request' });

  it('one short line, the text folded away', () => {
    const el = summaryRequestBody(text);
    expect(el.querySelector('.summary-request-line')?.textContent).toBe('Asked for a summary of this call');
    const fold = el.querySelector('details')!;
    expect(fold.open).toBe(false);
    expect(fold.querySelector('summary')?.textContent).toBe('What was sent (the transcript, 2 turns)');
    expect(fold.querySelector('pre')?.textContent).toBe(text);
  });

  it('the latest question with its answer, not the summary request', () => {
    const list = [
      msg(1, { text: 'First?', message_id: 'q1' }),
      msg(2, { kind: 'assistant', text: 'One.', user_message_id: 'q1' }),
      req,
      msg(4, { kind: 'assistant', text: '- summary', user_message_id: 'r' }),
    ];
    expect(isSummaryRequest(req)).toBe(true);
    const [x] = lastExchanges(list, 1);
    expect(x.question.text).toBe('First?');
    expect(x.replies.map((r) => r.text)).toEqual(['One.']);
    expect(latestSummary(list)?.answer?.text).toBe('- summary');
    expect(latestSummary(list.slice(0, 3))).toEqual({ request: req, answer: null });
  });
});
