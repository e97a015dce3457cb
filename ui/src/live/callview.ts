// The Call tab: the live call as one view. While the call runs, the transcript (with what is
// being heard) and the insights side by side on a wide window and stacked on a narrow one (the
// app shows its two panels in this tab's grid), and under them the person's last question with
// the assistant's answer, pinned, and a composer to the assistant; the whole chat is one click
// away. Once the call ended the same tab is its review: the summary, the chat and the transcript.

import { clockTime, h } from '../dom';
import { renderInline, renderMarkdown } from '../markdown';
import type { Conversation } from '../store';
import type { Message, Session } from '../types';
import { lastExchanges, replyWho, type Exchange } from './exchange';
import { latestSummary } from './summary';
import { AgainCard, type Api } from './again';

export interface CallViewActions {
  /** Sends `text` to the open call's chat; throws with a sentence on failure. */
  send(text: string): Promise<void>;
  /** Opens the Chat tab. */
  openChat(): void;
  /** The "Summarise this call" button (and its reason when it is off) for an ended call. */
  summariseControls(s: Session): HTMLElement[];
  /** The control API (the review's kept audio and "Transcribe again"). */
  api?: Api;
}

/** `live`: the call runs; `review`: it ended; `none`: no call is open. */
export type CallMode = 'live' | 'review' | 'none';

export function callMode(s: Session | null | undefined): CallMode {
  if (!s || !s.is_call) return 'none';
  return s.ended_at ? 'review' : 'live';
}

export class CallView {
  readonly panel: HTMLElement;
  private pinned = h('div', { class: 'live-pinned', id: 'live-pinned', 'aria-live': 'polite', 'aria-label': 'Your last question and the answer' });
  private summary = h('section', { class: 'call-summary', id: 'call-summary', 'aria-label': 'Summary of the call', hidden: true });
  private composer: HTMLElement;
  private input: HTMLTextAreaElement;
  private sendBtn: HTMLButtonElement;
  private error = h('div', { class: 'live-error', id: 'live-error', role: 'alert', hidden: true });
  private empty = h('p', { class: 'empty-state live-empty', hidden: true });
  private lastKey = '';
  private again: AgainCard | null;

  constructor(private actions: CallViewActions) {
    this.again = actions.api ? new AgainCard(actions.api) : null;
    this.input = h('textarea', {
      class: 'live-input',
      id: 'live-input',
      rows: '1',
      maxlength: '8000',
      placeholder: 'Ask your assistant…',
      'aria-label': 'Ask your assistant',
    });
    this.input.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
        e.preventDefault();
        void this.submit();
      }
    });
    this.sendBtn = h('button', { class: 'btn btn-primary', type: 'submit', id: 'live-send' }, 'Send');
    const chat = h('button', { class: 'btn btn-small live-open-chat', type: 'button', id: 'live-open-chat', title: 'The whole conversation with your assistant' }, 'Open the chat');
    chat.addEventListener('click', () => this.actions.openChat());
    this.composer = h(
      'form',
      { class: 'live-composer', 'aria-label': 'Ask your assistant' },
      h('div', { class: 'live-row' }, this.input, this.sendBtn, chat),
      this.error,
    );
    this.composer.addEventListener('submit', (e) => {
      e.preventDefault();
      void this.submit();
    });
    this.panel = h(
      'section',
      { class: 'panel panel-call', id: 'panel-call', role: 'tabpanel', 'aria-labelledby': 'tab-call', hidden: true },
      this.empty,
      this.summary,
      this.again?.el ?? null,
      this.pinned,
      this.composer,
    );
  }

  /** Renders the open session (`conv`: its conversation as the store holds it). */
  render(s: Session | null, conv: Conversation | null): void {
    const mode = callMode(s);
    this.panel.dataset.mode = mode;
    this.empty.hidden = mode !== 'none';
    this.empty.textContent = 'No call is open. Start a call: what is said and what your assistant suggests show here side by side.';
    this.composer.hidden = mode !== 'live';
    this.pinned.hidden = mode !== 'live';
    this.summary.hidden = mode !== 'review';
    const messages = conv?.messages ?? [];
    if (mode === 'live') this.renderPinned(lastExchanges(messages, 1)[0] ?? null);
    if (mode === 'review' && s) this.renderSummary(s, messages);
    this.again?.show(mode !== 'none' && s ? s.session_id : null, mode === 'live');
  }

  focus(): void {
    if (!this.composer.hidden) this.input.focus();
  }

  private renderPinned(x: Exchange | null): void {
    const key = x ? JSON.stringify([x.question.id, x.waiting, x.replies.map((r) => [r.id, r.text, r.draft])]) : 'none';
    if (key === this.lastKey) return;
    this.lastKey = key;
    if (!x) {
      this.pinned.replaceChildren(h('p', { class: 'live-pinned-empty' }, 'Ask your assistant below: your question and its answer stay here, in sight.'));
      return;
    }
    const q = x.question;
    const at = q.occurred_at ?? q.received_at;
    const replies = x.replies.map((r) =>
      h(
        'div',
        { class: `live-answer live-answer-${r.kind}${r.draft ? ' is-draft' : ''}`, 'data-kind': r.kind },
        h('span', { class: 'live-who' }, replyWho(r)),
        h('div', { class: 'live-text' }, r.kind === 'assistant' ? renderMarkdown(r.text) : renderInline(r.text)),
      ),
    );
    this.pinned.replaceChildren(
      h(
        'div',
        { class: 'live-question', 'data-message-id': q.message_id ?? '' },
        h('span', { class: 'live-who' }, 'You'),
        at ? h('time', { class: 'live-time' }, clockTime(at)) : null,
        h('span', { class: 'live-text' }, q.text),
      ),
      ...replies,
      ...(x.replies.length === 0 ? [h('div', { class: `live-answer live-waiting${x.waiting ? ' is-trouble' : ''}` }, x.waiting ?? 'Waiting for the answer…')] : []),
    );
    // The newest words in sight (a long answer scrolls within the pinned area).
    this.pinned.scrollTop = this.pinned.scrollHeight;
  }

  private renderSummary(s: Session, messages: readonly Message[]): void {
    const found = latestSummary(messages);
    const key = JSON.stringify(['summary', s.session_id, found?.request.id, found?.answer?.id, found?.answer?.text, found?.answer?.draft]);
    if (key === this.lastKey && !this.summary.querySelector('button')) return;
    this.lastKey = key;
    const head = h('h2', { class: 'call-summary-title' }, 'Summary');
    if (found?.answer) {
      this.summary.replaceChildren(head, h('div', { class: 'call-summary-text' }, renderMarkdown(found.answer.text)));
    } else if (found) {
      this.summary.replaceChildren(head, h('p', { class: 'setting-note' }, 'Asked for a summary of this call: the answer shows here and in the chat.'));
    } else {
      this.summary.replaceChildren(
        head,
        h('p', { class: 'setting-note' }, 'No summary yet. Your assistant writes one from the transcript when you ask.'),
        h('div', { class: 'call-summary-actions' }, ...this.actions.summariseControls(s)),
      );
    }
  }

  private async submit(): Promise<void> {
    const text = this.input.value.trim();
    if (!text) return;
    this.sendBtn.disabled = true;
    this.error.hidden = true;
    try {
      await this.actions.send(text);
      this.input.value = '';
    } catch (e) {
      this.error.hidden = false;
      this.error.textContent = e instanceof Error ? e.message : String(e);
    } finally {
      this.sendBtn.disabled = false;
      this.input.focus();
    }
  }
}
