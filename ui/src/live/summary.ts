// "Summarise this call" as the chat shows it: one short line, the transcript it carries to the
// assistant folded away (opened on request). The core marks the message `purpose:
// "summary_request"` and leaves it out of search.

import { h } from '../dom';
import type { Message } from '../types';

/** The line a summary request shows as. */
export const SUMMARY_REQUEST_LINE = 'Asked for a summary of this call';

export function isSummaryRequest(m: Pick<Message, 'kind' | 'purpose'>): boolean {
  return m.kind === 'user' && m.purpose === 'summary_request';
}

/** The body of a summary request's bubble: the short line, the text sent in a closed fold. */
export function summaryRequestBody(text: string): HTMLElement {
  const turns = /Transcript \((\d+) turns?/.exec(text)?.[1];
  const pre = h('pre', { class: 'summary-request-text' }, text);
  const fold = h(
    'details',
    { class: 'summary-request-fold' },
    h('summary', null, turns ? `What was sent (the transcript, ${turns} turn${turns === '1' ? '' : 's'})` : 'What was sent (the transcript)'),
    pre,
  );
  return h('div', { class: 'summary-request' }, h('span', { class: 'summary-request-line' }, SUMMARY_REQUEST_LINE), fold);
}

/** The newest summary request of a conversation and the assistant's answer to it (or null). */
export function latestSummary(messages: readonly Message[]): { request: Message; answer: Message | null } | null {
  for (let i = messages.length - 1; i >= 0; i--) {
    const m = messages[i];
    if (!isSummaryRequest(m)) continue;
    const answer = messages.slice(i + 1).find((r) => r.kind === 'assistant' && (!r.user_message_id || r.user_message_id === m.message_id)) ?? null;
    return { request: m, answer };
  }
  return null;
}
