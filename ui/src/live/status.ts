// States in plain words, once: one sentence per problem that keeps the call from being heard or
// coached, its cause and what is being done about it ("Transcription server not answering — 1
// turn waiting, nothing lost."). The main window shows them in a strip under the call bar, the
// overlay under its header; both wrap the sentence, never cut it.

import { h } from '../dom';
import type { Assistant, Audio, AudioStatus } from '../types';

/** One problem: a stable key (tests, styling), its severity and its sentence. */
export interface Problem {
  key: string;
  /** `bad`: nothing gets through; `warn`: it works around it. */
  level: 'bad' | 'warn';
  text: string;
}

function turns(n: number): string {
  return n === 1 ? '1 turn' : `${n} turns`;
}

/** What the engine's trouble is, said as a cause (no trailing stop). */
function engineCause(st: AudioStatus): string | null {
  const e = st.engine;
  if (e.state === 'unavailable') return e.kind === 'openai' ? 'Transcription server cannot be used' : 'Speech engine cannot run here';
  if (e.state !== 'down') return null;
  return e.kind === 'openai' ? 'Transcription server not answering' : 'Speech engine not working';
}

/**
 * The audio's problems while `call` is listened to: the engine (with what waits for it), then
 * each channel that is not heard. A backlog without an engine problem is a note (`warn`).
 */
export function audioProblems(a: Audio | null, call: string | null): Problem[] {
  if (!a || !call || a.status.call_id !== call || a.status.state === 'idle') return [];
  const st = a.status;
  const out: Problem[] = [];
  const waiting = st.backlog.turns;
  const cause = engineCause(st);
  if (cause) {
    const what = waiting > 0 ? `${turns(waiting)} waiting, nothing lost` : 'what is said waits for it, nothing is lost';
    out.push({ key: 'engine', level: 'bad', text: `${cause} — ${what}.` });
  } else if (waiting > 0) {
    out.push({ key: 'backlog', level: 'warn', text: `Transcribing late — ${turns(waiting)} waiting, nothing lost.` });
  }
  const down = st.channels.filter((c) => c.state === 'error');
  const why = (d: string) => {
    const w = d.trim().replace(/\.$/, '');
    return w ? lowerFirst(w) : 'the sound server does not answer';
  };
  if (down.length > 1 && down.every((c) => c.detail.trim() === down[0].detail.trim())) {
    // The same cause for both: said once.
    out.push({ key: 'channels', level: 'bad', text: `Neither your microphone nor the call’s audio is heard — ${why(down[0].detail)}.` });
  } else {
    for (const c of down) {
      const who = c.channel === 'mic' ? 'Your microphone' : 'The call’s audio';
      out.push({ key: `channel-${c.channel}`, level: 'bad', text: `${who} is not heard — ${why(c.detail)}.` });
    }
  }
  if (st.backlog.dropped_seconds > 0) {
    out.push({ key: 'dropped', level: 'bad', text: `The backlog was full — the oldest ${Math.round(st.backlog.dropped_seconds)} s of speech were dropped.` });
  }
  // The status's own sentence when it is in error for a reason none of the above says.
  if (st.state === 'error' && out.every((p) => p.level !== 'bad')) {
    out.push({ key: 'audio', level: 'bad', text: `Not hearing the call — ${lowerFirst(st.detail.replace(/^not hearing anything\.?\s*/i, '').trim() || 'the reason is not known')}` });
  }
  return out;
}

/** The assistant's problem, when it is configured and not fine. */
export function assistantProblem(a: Assistant | null): Problem | null {
  if (!a || !a.configured) return null;
  const keep = 'what you send waits and goes out when it is back';
  switch (a.status) {
    case 'unreachable':
      return { key: 'assistant', level: 'bad', text: `Assistant not answering — no insights for now; ${keep}.` };
    case 'auth_failed':
      return { key: 'assistant', level: 'bad', text: `Assistant refused the app’s key — fix it in Settings → Assistant; ${keep}.` };
    case 'misconfigured':
      return { key: 'assistant', level: 'bad', text: `Assistant settings need a fix — see Settings → Assistant; ${keep}.` };
    default:
      return null;
  }
}

function lowerFirst(s: string): string {
  return s && /^[A-Z][a-z]/.test(s) ? s[0].toLowerCase() + s.slice(1) : s;
}

/** A list of problem sentences (`id` for tests); hidden when there are none. */
export class ProblemList {
  readonly el: HTMLElement;
  private last = '';

  constructor(id: string, cls: string) {
    this.el = h('ul', { class: `problems ${cls}`, id, role: 'status', 'aria-live': 'polite', hidden: true });
  }

  render(problems: Problem[]): void {
    const key = JSON.stringify(problems);
    if (key === this.last) return;
    this.last = key;
    this.el.hidden = problems.length === 0;
    this.el.replaceChildren(...problems.map((p) => h('li', { class: `problem problem-${p.level}`, 'data-key': p.key }, p.text)));
  }
}

/** The transcript's rows for the turns that wait for the engine (the backlog), one per turn. */
export function backlogRows(st: AudioStatus | null | undefined, call: string | null): HTMLElement[] {
  if (!st || !call || st.call_id !== call) return [];
  const n = Math.min(st.backlog.turns, 50);
  const each = st.backlog.turns > 0 ? st.backlog.seconds / st.backlog.turns : 0;
  const rows: HTMLElement[] = [];
  for (let i = 0; i < n; i++) {
    rows.push(
      h(
        'li',
        { class: 'turn turn-waiting', 'data-waiting': String(i + 1) },
        h('span', { class: 'turn-offset', 'aria-hidden': 'true' }, '…'),
        h(
          'div',
          { class: 'turn-main' },
          h('div', { class: 'turn-line' }, h('span', { class: 'turn-words' }, `A turn waits to be transcribed${each >= 1 ? ` (about ${Math.round(each)} s of speech)` : ''} — kept, nothing lost.`)),
        ),
      ),
    );
  }
  if (st.backlog.turns > n) rows.push(h('li', { class: 'turn turn-waiting' }, h('span', { class: 'turn-words' }, `…and ${st.backlog.turns - n} more waiting.`)));
  return rows;
}
