// The application shell, part bar: the call bar: the call state and actions, Summarise, the connection chip.
// (The shell is one class in layers: base.ts → data.ts → links.ts → actions.ts → view.ts → bar.ts → ../app.ts.)

import { dateTime, elapsedSince, h } from '../dom';
import { describeError } from '../errors';
import type { ApiResponse, StreamState } from '../transport';
import type { Session } from '../types';
import { START_AFTER_END_MS } from './base';
import { AppView } from './view';

export abstract class AppBar extends AppView {

  // ---- call bar ------------------------------------------------------------------------------

  protected renderBar(): void {
    const s: Session | undefined = this.activeId ? this.store.sessions.get(this.activeId) : undefined;
    const live = this.store.sessionList().find((x) => x.is_call && !x.ended_at);
    this.elapsedEl = null;
    const state: (Node | string)[] = [];
    const actions: HTMLElement[] = [];
    if (s && s.is_call && !s.ended_at) {
      this.elapsedEl = h('span', { class: 'elapsed', id: 'elapsed', 'aria-label': 'Time in the call' }, elapsedSince(s.created_at));
      state.push(h('span', { class: 'live-dot', 'aria-hidden': 'true' }), h('span', { class: 'call-label' }, 'Live call'), this.elapsedEl);
      if (s.title && s.title.trim()) state.push(h('span', { class: 'call-title', title: s.title }, s.title.trim()));
      if (this.confirmingEnd?.sid === s.session_id) {
        const yes = h('button', { class: 'btn btn-danger', type: 'button', id: 'confirm-end-call' }, 'End call');
        yes.addEventListener('click', () => void this.endCall(s.session_id));
        const keep = h('button', { class: 'btn', type: 'button', id: 'cancel-end-call' }, 'Keep the call');
        keep.addEventListener('click', () => this.cancelEndCall());
        actions.push(h('span', { class: 'confirm-text', id: 'end-call-question' }, 'End this call?'), yes, keep);
      } else {
        const end = h('button', { class: 'btn btn-danger', type: 'button', id: 'end-call' }, 'End call');
        end.addEventListener('click', () => this.askEndCall(s.session_id));
        actions.push(end);
      }
    } else {
      if (this.confirmingEnd) {
        clearTimeout(this.confirmingEnd.timer);
        this.confirmingEnd = null;
      }
      if (s) {
        // Untitled: its date (sessionTitle would say "Chat · …" after the label "Chat").
        state.push(
          h('span', { class: 'call-label' }, s.is_call ? 'Past call' : 'Chat'),
          h('span', { class: 'call-title' }, s.title && s.title.trim() ? s.title.trim() : dateTime(s.created_at)),
          s.is_call && s.ended_at ? h('span', { class: 'elapsed muted' }, elapsedSince(s.created_at, s.ended_at)) : '',
        );
      } else {
        state.push(h('span', { class: 'call-label muted' }, 'No call in progress'));
      }
      // The Transcript tab has its own "Summarise this call" at its head: one on screen at a time.
      // The Call tab's review has it in its summary card.
      if (s && s.is_call && s.ended_at && this.tab !== 'transcript' && this.tab !== 'call') actions.push(...this.summariseControls(s, 'summarise-call', true));
      if (live && live.session_id !== this.activeId) {
        const back = h('button', { class: 'btn', type: 'button', id: 'go-live' }, 'Back to live call');
        back.addEventListener('click', () => this.open(live.session_id, 'call'));
        actions.push(back);
      } else {
        const start = h('button', { class: 'btn btn-primary', type: 'button', id: 'start-call' }, 'Start call');
        // Just after an end, a second click of a double click must not start another call.
        if (Date.now() - this.endedAt < START_AFTER_END_MS) {
          start.disabled = true;
          start.title = 'You just ended a call';
        }
        start.addEventListener('click', () => void this.startCall());
        actions.push(this.callTitle, start);
      }
    }
    this.callState.replaceChildren(...state);
    // While End call asks, the bar makes room for the question (the meters step aside).
    this.callState.parentElement?.classList.toggle('is-confirming', !!this.confirmingEnd && this.confirmingEnd.sid === s?.session_id);
    this.callState.parentElement?.classList.toggle('is-live', !!s && s.is_call && !s.ended_at);
    this.renderListen();
    // Keep focus on the button the user just pressed, if it is re-created.
    const focusedId = (document.activeElement as HTMLElement | null)?.id;
    const caret = [this.callTitle.selectionStart, this.callTitle.selectionEnd];
    this.callActions.replaceChildren(...actions);
    if (focusedId === 'call-title' && this.callTitle.isConnected) {
      // Moved with the other controls: the title being typed keeps focus and caret.
      this.callTitle.focus();
      this.callTitle.setSelectionRange(caret[0], caret[1]);
    } else if (focusedId === 'confirm-end-call' || focusedId === 'cancel-end-call') {
      this.callActions.querySelector<HTMLButtonElement>('#cancel-end-call, #end-call')?.focus();
    } else if (focusedId === 'start-call' || focusedId === 'end-call' || focusedId === 'go-live' || focusedId === 'summarise-call') {
      const again = focusedId === 'summarise-call' ? this.callActions.querySelector<HTMLButtonElement>('#summarise-call') : null;
      (again ?? (this.callActions.querySelector('button') as HTMLButtonElement | null))?.focus();
    }
  }

  /**
   * The "Summarise this call" button, off (with the reason) when the store knows the call has no
   * transcript. `compact` (the call bar): the button's own label says it, the sentence is its
   * description; otherwise the sentence is shown next to it.
   */
  protected summariseControls(s: Session, id: string, compact = false): HTMLElement[] {
    const conv = this.store.conv(s.session_id);
    const empty = !!conv && conv.transcriptLoaded && conv.transcript.length === 0;
    const busy = this.summarising.has(s.session_id);
    const why = 'This call has no transcript yet: there is nothing to summarise.';
    const btn = h(
      'button',
      {
        class: 'btn',
        type: 'button',
        id,
        title: empty ? why : 'Ask your assistant, in this chat, for a summary of the call (the transcript is sent along)',
        'aria-describedby': empty ? `${id}-why` : undefined,
      },
      busy ? 'Asking for a summary…' : empty && compact ? 'Nothing to summarise' : 'Summarise this call',
    );
    btn.disabled = empty || busy;
    btn.addEventListener('click', () => void this.summarise(s.session_id));
    const out: HTMLElement[] = [btn];
    if (empty) out.push(h('span', { class: compact ? 'sr-only' : 'bar-note', id: `${id}-why` }, why));
    return out;
  }

  protected renderTranscriptHead(): void {
    const s = this.activeId ? this.store.sessions.get(this.activeId) : undefined;
    const focused = (document.activeElement as HTMLElement | null)?.id === 'summarise-transcript';
    this.transcript.headActions.replaceChildren(...(s?.is_call ? this.summariseControls(s, 'summarise-transcript') : []));
    if (focused) this.transcript.headActions.querySelector<HTMLButtonElement>('#summarise-transcript')?.focus();
  }

  protected tickElapsed(): void {
    if (!this.elapsedEl || !this.activeId) return;
    const s = this.store.sessions.get(this.activeId);
    if (s) this.elapsedEl.textContent = elapsedSince(s.created_at);
  }

  /** `res`: the answer it comes from (its code goes into the tooltip, for support). */
  protected showBarError(text: string, res: ApiResponse<unknown> | null = null): void {
    this.barError.hidden = false;
    this.barError.textContent = text;
    describeError(this.barError, res);
  }

  protected hideBarError(): void {
    this.barError.hidden = true;
  }

  protected setConn(s: StreamState): void {
    const was = this.conn;
    this.conn = s;
    if (s === 'live' && was !== 'live') {
      // Live-only events are not replayed: partials from before a drop may never be finished,
      // and the audio status may have changed meanwhile.
      if (was === 'reconnecting') this.store.clearPartials();
      void this.refreshAudio();
    }
    this.root.dataset.conn = s;
    this.connChip.hidden = s === 'live';
    this.connChip.className = `chip chip-conn chip-${s}`;
    this.connChip.textContent =
      s === 'connecting' ? 'Connecting…' : s === 'reconnecting' ? 'Reconnecting…' : s === 'unauthorized' ? 'Not authorised' : '';
    if (s === 'unauthorized') {
      const el = this.onUnauthorized();
      this.authBanner.hidden = !el;
      if (el) this.authBanner.replaceChildren(el);
    } else {
      this.authBanner.hidden = true;
    }
  }
}
