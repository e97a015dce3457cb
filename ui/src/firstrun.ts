// The first-run guide: until an assistant is connected, the main view says what to do and
// leads there (choose the assistant → its install step → connect or pair → Test → done), with
// the microphone and call-audio check beside it. It goes away by itself once an assistant is
// configured; "Not now" hides it for this window only.

import { h } from './dom';
import { RecommendedModel, type ModelsActions } from './settings/models';
import type { Assistant } from './types';

export interface FirstRunActions extends ModelsActions {
  /** Settings → Assistant. */
  openAssistant(): void;
  /** Settings → Hearing the call. */
  openAudio(): void;
}

/** Kept for the window's life: the guide stays hidden after "Not now" until a reload. */
const LATER_KEY = 'stagewhisper.firstRunLater';

function laterChosen(): boolean {
  try {
    return sessionStorage.getItem(LATER_KEY) === '1';
  } catch {
    return false;
  }
}

/** The guide is for a person with no assistant yet (not while the first answer is awaited). */
export function needsFirstRun(a: Assistant | null): boolean {
  return !!a && a.status === 'not_configured';
}

export class FirstRunGuide {
  readonly el: HTMLElement;
  private audioBtn: HTMLButtonElement;
  private model: RecommendedModel;
  private later = laterChosen();

  constructor(actions: FirstRunActions) {
    const connect = h('button', { class: 'btn btn-primary', type: 'button', id: 'first-run-connect' }, 'Choose your assistant');
    connect.addEventListener('click', () => actions.openAssistant());
    this.audioBtn = h('button', { class: 'btn', type: 'button', id: 'first-run-audio' }, 'Check microphone and call audio');
    this.audioBtn.addEventListener('click', () => actions.openAudio());
    this.model = new RecommendedModel(actions);
    const later = h('button', { class: 'btn btn-link', type: 'button', id: 'first-run-later' }, 'Not now');
    later.addEventListener('click', () => {
      this.later = true;
      try {
        sessionStorage.setItem(LATER_KEY, '1');
      } catch {
        // Private mode: hidden until the page is reloaded all the same.
      }
      this.el.hidden = true;
    });
    this.el = h(
      'section',
      { class: 'first-run', id: 'first-run', 'aria-labelledby': 'first-run-title', hidden: true },
      h('h2', { id: 'first-run-title' }, 'Connect your assistant first'),
      h(
        'p',
        null,
        'StageWhisper’s live insights and chat answers come from your own AI assistant. Until one is connected, nothing will answer: a call is still heard and kept, and what you send waits.',
      ),
      h(
        'ol',
        { class: 'first-run-steps' },
        h('li', null, h('strong', null, 'Choose your assistant'), ': Hermes Agent, OpenClaw (direct or through its Gateway), or a Claude Code session through a clawborrator hub.'),
        h('li', null, h('strong', null, 'Install'), ' it if it is not running yet: its step is shown when you choose it.'),
        h('li', null, h('strong', null, 'Connect or pair'), ', then press ', h('strong', null, 'Test'), '.'),
        h('li', null, h('strong', null, 'Done'), ' when the chip at the top says “Assistant: online”.'),
      ),
      h('div', { class: 'first-run-actions' }, connect, this.audioBtn, later),
      this.model.el,
    );
  }

  /** Shown while no assistant is configured (and not put off); `canHear`: this build hears calls. */
  render(a: Assistant | null, canHear: boolean, onSettings: boolean): void {
    this.el.hidden = this.later || onSettings || !needsFirstRun(a);
    this.audioBtn.hidden = !canHear;
    if (!this.el.hidden) void this.model.refresh();
  }
}
