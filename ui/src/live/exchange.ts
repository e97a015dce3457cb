// The person's questions in a call's chat and what came back for each: the live-call view pins
// the newest one, the overlay shows the newest few. Built from the store's messages (so it is the
// same after a reload or when the overlay is opened again), never from a window's memory.

import { deliveryView } from '../store';
import type { Message } from '../types';
import { isSummaryRequest } from './summary';

/** One question and what came back for it. */
export interface Exchange {
  question: Message;
  /** The assistant's answer, its errors and notes, in order (a draft while it is written). */
  replies: Message[];
  /** Why nothing came back yet, in plain words (delivery trouble), else null. */
  waiting: string | null;
}

/**
 * The newest `n` questions of `messages` (user messages; a summary request is not a question
 * here: the review shows its answer as the summary), each with the messages that answer it
 * (`user_message_id`), oldest first.
 */
export function lastExchanges(messages: readonly Message[], n: number): Exchange[] {
  const out: Exchange[] = [];
  const byId = new Map<string, Exchange>();
  for (const m of messages) {
    if (m.kind === 'user' && m.message_id && !isSummaryRequest(m)) {
      const d = deliveryView(m);
      const x: Exchange = {
        question: m,
        replies: [],
        waiting: d.state === 'failed' ? `Not delivered: ${d.note}` : d.state === 'sending' ? d.note : null,
      };
      out.push(x);
      byId.set(m.message_id, x);
    } else if (m.kind !== 'user' && m.user_message_id && byId.has(m.user_message_id)) {
      byId.get(m.user_message_id)!.replies.push(m);
    }
  }
  return out.slice(-n);
}

/** Who a reply is from, in words. */
export function replyWho(m: Message): string {
  return m.kind === 'error' ? 'Error' : m.kind === 'notice' ? 'Note' : 'Assistant';
}
