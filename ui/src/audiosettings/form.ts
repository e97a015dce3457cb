// Settings → Audio, part form: the card's fields and how they are built (the behaviour is in
// ../audiosettings.ts, whose class extends this one).

import { SpeakersSetting } from '../speakers';
import { KeepAudioSetting } from '../settings/keepaudio';
import { LevelMeter, TEST_SECONDS, type AudioField } from '../audio';
import { h } from '../dom';
import { ModelSettings } from '../settings/models';
import type { Audio, AudioChannel, AudioSource } from '../types';
import type { AudioSettingsActions } from './actions';
import { listenOnStart, setListenOnStart } from './prefs';

/** The engine kinds this form offers. */
export type EngineKind = 'builtin' | 'whisper' | 'openai';

/** The saved engine's kind as one of the form's (an unknown kind shows as none chosen: built-in). */
export function savedKind(kind: string | undefined): EngineKind {
  return kind === 'openai' || kind === 'whisper' ? kind : 'builtin';
}

export type Field = AudioField;

/** A labelled row of the form. */
export const row = (label: string, forId: string | null, ...field: (HTMLElement | null)[]) =>
  h(
    'div',
    { class: 'setting-row setting-row-top' },
    forId ? h('label', { class: 'setting-label', for: forId }, label) : h('div', { class: 'setting-label' }, label),
    h('div', { class: 'setting-field setting-field-col' }, ...field),
  );
/** A field's hint line. */
export const hint = (id: string, ...text: (string | HTMLElement)[]) => h('div', { class: 'setting-note', id }, ...text);
/** A text input of the form. */
export const input = (id: string, attrs: Record<string, string>) =>
  h('input', { class: 'field-input', id, autocomplete: 'off', spellcheck: 'false', 'aria-describedby': `${id}-hint ${id}-error`, ...attrs });

export abstract class AudioSettingsForm {
  readonly card: HTMLElement;
  /** Settings → Audio → Model (settings/models.ts). */
  readonly models: ModelSettings;
  protected a: Audio | null = null;
  protected unavailable: string | null = null;
  /** The sources as last listed (null: not listed, see `sourcesError`). */
  protected sources: AudioSource[] | null = null;
  protected sourcesError: string | null = null;
  protected statusChip = h('span', { class: 'chip chip-muted', id: 'audio-settings-status' }, 'Loading…');
  protected statusText = h('p', { class: 'assistant-detail', id: 'audio-settings-detail' });
  protected backlog = h('p', { class: 'setting-note', id: 'audio-backlog', hidden: true });
  protected unavailableBox!: HTMLElement;
  protected unavailableTitle = h('p', { class: 'audio-unavailable-title' });
  protected unavailableReason = h('p', { class: 'audio-unavailable-reason', id: 'audio-unavailable-reason' });
  protected unavailableSteps = h('ul', { class: 'audio-unavailable-steps' });
  protected retryBtn!: HTMLButtonElement;
  protected selects = new Map<AudioChannel, HTMLSelectElement>();
  protected meters = new Map<AudioChannel, LevelMeter>();
  protected channelDetail = new Map<AudioChannel, HTMLElement>();
  protected testBtns = new Map<AudioChannel, HTMLButtonElement>();
  protected testResults = new Map<AudioChannel, HTMLElement>();
  protected sourceFields!: HTMLElement;
  protected engineInputs = new Map<EngineKind, HTMLInputElement>();
  protected baseUrl!: HTMLInputElement;
  protected model!: HTMLInputElement;
  protected apiKey!: HTMLInputElement;
  protected keyState = h('span', { class: 'chip chip-muted', id: 'audio-key-state' }, 'no key');
  protected keyRemove!: HTMLButtonElement;
  protected openaiFields!: HTMLElement;
  /** The model row: a server's model name, or a Whisper model (a name in the models folder, or a path). */
  protected modelRow!: HTMLElement;
  protected modelHint!: HTMLElement;
  protected language!: HTMLInputElement;
  protected whisperFields!: HTMLElement;
  protected notice = h('p', { class: 'audio-notice', id: 'audio-engine-notice' });
  protected draftNotice = h('p', { class: 'audio-notice audio-leaves', id: 'audio-engine-draft-notice', hidden: true });
  protected engineState = h('p', { class: 'setting-note', id: 'audio-engine-state' });
  protected youLabel!: HTMLInputElement;
  protected themLabel!: HTMLInputElement;
  protected listenOnStart!: HTMLInputElement;
  /** What means nothing without an audio pipeline (the new-call preference, the engine form). */
  protected pipelineOnly: HTMLElement[] = [];
  protected errors = new Map<Field, HTMLElement>();
  protected saveBtn!: HTMLButtonElement;
  /** Tries the engine as the form says (not saved). */
  protected engineTestBtn!: HTMLButtonElement;
  protected result = h('div', { class: 'setting-status assistant-result', id: 'audio-result', role: 'status', 'aria-live': 'polite' });
  protected dirty = new Set<Field>();
  protected busy = false;
  protected visible = false;
  protected renewTimer!: ReturnType<typeof setTimeout> | undefined;
  protected testing: AudioChannel | null = null;
  protected speakers!: SpeakersSetting;
  protected keepAudio!: KeepAudioSetting;

  constructor(protected actions: AudioSettingsActions) {
    this.buildUnavailable();
    this.buildSources();
    const engines = this.buildEngine();
    this.buildLabels();
    const form = this.buildForm(engines);
    const newCalls = h(
      'div',
      { class: 'setting-row', id: 'audio-new-calls' },
      h('div', { class: 'setting-label' }, 'New calls'),
      h('div', { class: 'setting-field' }, h('label', { class: 'mode-option', for: 'audio-listen-on-start' }, this.listenOnStart, h('span', null, 'Start listening when I start a call'))),
    );
    this.models = new ModelSettings({
      api: (m, p, b) => actions.api(m, p, b),
      useModel: (name) => actions.audioCall('PUT', '/api/audio', { engine: { kind: 'whisper', model: name, language: 'auto' } }),
    });
    this.speakers = new SpeakersSetting(this.actions);
    this.keepAudio = new KeepAudioSetting(this.actions);
    this.pipelineOnly = [this.sourceFields, newCalls, form, this.speakers.el];
    this.card = h(
      'fieldset',
      { class: 'card', id: 'settings-audio', tabindex: '-1' },
      h('legend', null, 'Audio (hearing the call)'),
      h('div', { class: 'assistant-status', 'aria-live': 'polite' }, this.statusChip, this.statusText),
      this.backlog,
      this.unavailableBox,
      this.sourceFields,
      newCalls,
      form,
      this.models.el,
      this.speakers.el,
      this.keepAudio.el,
    );
  }

  /** The error line under field `f` (remembered, to show what the API refused). */
  protected err(f: Field): HTMLElement {
      const el = h('div', { class: 'field-error', id: `audio-${f.replace('_', '-')}-error`, role: 'alert', hidden: true });
      this.errors.set(f, el);
      return el;
  }

  /** What the card shows when the app cannot hear (filled in by `paint`). */
  private buildUnavailable(): void {
    this.retryBtn = h('button', { class: 'btn btn-small', type: 'button', id: 'audio-retry' }, 'Check again');
    this.retryBtn.addEventListener('click', () => void this.load());
    this.unavailableBox = h(
      'div',
      { class: 'audio-unavailable', id: 'audio-unavailable', role: 'group', 'aria-labelledby': 'audio-unavailable-title', hidden: true },
      this.unavailableTitle,
      this.unavailableReason,
      h('p', { class: 'audio-unavailable-what' }, 'What to do:'),
      this.unavailableSteps,
      h('div', { class: 'inline-field' }, this.retryBtn),
    );
    this.unavailableTitle.id = 'audio-unavailable-title';
  }

  /** The two sources, each with its meter, Test and detail line. */
  private buildSources(): void {
    // ---- sources -------------------------------------------------------------------------
    const channelRow = (ch: AudioChannel, label: string, note: string) => {
      const id = `audio-${ch}`;
      const sel = h('select', { class: 'field-input audio-source', id, name: ch, 'aria-describedby': `${id}-detail ${id}-error` });
      sel.addEventListener('change', () => void this.chooseSource(ch, sel.value));
      this.selects.set(ch, sel);
      const meter = new LevelMeter(`meter-${ch}`, ch === 'mic' ? 'Microphone level' : 'Call audio level');
      this.meters.set(ch, meter);
      const test = h('button', { class: 'btn btn-small', type: 'button', id: `audio-test-${ch}`, title: `Record ${TEST_SECONDS} s and show what the engine hears` }, 'Test');
      test.addEventListener('click', () => void this.test(ch));
      this.testBtns.set(ch, test);
      const detail = h('div', { class: 'setting-note', id: `${id}-detail` }, note);
      this.channelDetail.set(ch, detail);
      const resultEl = h('div', { class: 'audio-test-result', id: `audio-test-${ch}-result`, role: 'status', 'aria-live': 'polite', hidden: true });
      this.testResults.set(ch, resultEl);
      return row(label, id, h('div', { class: 'inline-field audio-source-row' }, sel, meter.el, test), detail, this.err(ch), resultEl);
    };
    this.sourceFields = h(
      'div',
      { id: 'audio-sources' },
      channelRow('mic', 'You (microphone)', 'Your side of the call.'),
      channelRow('system', 'Them (call audio)', 'What plays on this computer: the other side of the call.'),
      h('p', { class: 'setting-note audio-sources-hint' }, 'Headphones give the cleanest transcript: with speakers the microphone hears the other side too.'),
    );
  }

  /** The engine choice and its fields; answers the radio group. */
  private buildEngine(): HTMLElement {
    // ---- engine ---------------------------------------------------------------------------
    const engines = h('div', { class: 'mode-options', id: 'audio-engines' });
    for (const [id, label, hintText] of [
      ['builtin', 'Built-in', 'PocketSphinx on this computer; works with no network'],
      ['whisper', 'Whisper', 'a Whisper model on this computer: far fewer words wrong, no audio leaves it (get one under Model below)'],
      ['openai', 'Server', 'an OpenAI-compatible transcription server (a local Whisper server, or a cloud service)'],
    ] as const) {
      const radio = h('input', { type: 'radio', name: 'audio-engine', value: id, id: `audio-engine-${id}` });
      radio.addEventListener('change', () => {
        this.touch('engine');
        this.paintEngine();
      });
      this.engineInputs.set(id, radio);
      engines.append(h('label', { class: 'mode-option', for: `audio-engine-${id}` }, radio, h('span', { class: 'mode-name' }, label), h('span', { class: 'mode-hint' }, hintText)));
    }
    this.baseUrl = input('audio-base-url', { type: 'url', name: 'base_url', placeholder: 'http://127.0.0.1:8000' });
    this.model = input('audio-model', { type: 'text', name: 'model', placeholder: 'whisper-1, tiny.en, …', maxlength: '200' });
    this.apiKey = input('audio-api-key', { type: 'password', name: 'api_key', autocomplete: 'new-password' });
    this.apiKey.setAttribute('aria-describedby', 'audio-key-state audio-api-key-hint audio-api-key-error');
    this.baseUrl.addEventListener('input', () => {
      this.touch('base_url');
      this.paintDraftNotice();
    });
    this.model.addEventListener('input', () => this.touch('model'));
    this.language = input('audio-language', { type: 'text', name: 'language', placeholder: 'auto', maxlength: '8' });
    this.language.addEventListener('input', () => this.touch('language'));
    this.apiKey.addEventListener('input', () => this.touch('api_key'));
    this.keyRemove = h('button', { class: 'btn btn-small', type: 'button', id: 'audio-key-remove' }, 'Remove saved key');
    this.keyRemove.addEventListener('click', () => void this.removeKey());
    this.openaiFields = h(
      'div',
      { id: 'audio-openai-fields' },
      row('Server', 'audio-base-url', this.baseUrl, hint('audio-base-url-hint', 'Its address; the app posts each turn to {address}/v1/audio/transcriptions.'), this.err('base_url')),
      row(
        'API key',
        'audio-api-key',
        h('div', { class: 'inline-field' }, this.apiKey, this.keyState, this.keyRemove),
        hint('audio-api-key-hint', 'Optional; sent as a bearer token. Write-only: saved on this computer, never shown again.'),
        this.err('api_key'),
      ),
    );

    this.modelHint = hint('audio-model-hint', 'The model the server should use.');
    this.modelRow = row('Model', 'audio-model', this.model, this.modelHint, this.err('model'));
    this.whisperFields = h(
      'div',
      { id: 'audio-whisper-fields' },
      row(
        'Language',
        'audio-language',
        this.language,
        hint('audio-language-hint', '“auto” finds the language of each turn (with a multilingual model); a code such as de or fr forces one. English-only models (.en) hear English.'),
        this.err('language'),
      ),
    );
    return engines;
  }

  /** The speaker names and the "start listening" preference. */
  private buildLabels(): void {
    // ---- labels, preference ---------------------------------------------------------------
    this.youLabel = input('audio-you-label', { type: 'text', name: 'you_label', maxlength: '100', placeholder: 'You' });
    this.themLabel = input('audio-them-label', { type: 'text', name: 'them_label', maxlength: '100', placeholder: 'Them' });
    this.youLabel.addEventListener('input', () => this.touch('you_label'));
    this.themLabel.addEventListener('input', () => this.touch('them_label'));
    this.listenOnStart = h('input', { type: 'checkbox', id: 'audio-listen-on-start' });
    this.listenOnStart.checked = listenOnStart();
    this.listenOnStart.addEventListener('change', () => setListenOnStart(this.listenOnStart.checked));
  }

  /** The form (engine, names, Save, Test the engine). */
  private buildForm(engines: HTMLElement): HTMLElement {
    this.saveBtn = h('button', { class: 'btn btn-primary', type: 'submit', id: 'audio-save' }, 'Save');
    this.engineTestBtn = h('button', { class: 'btn', type: 'button', id: 'audio-engine-test', title: 'Try the engine as chosen above, without saving it' }, 'Test the engine');
    this.engineTestBtn.addEventListener('click', () => void this.testEngine());
    const form = h(
      'form',
      { class: 'assistant-form', id: 'audio-form', novalidate: true, 'aria-label': 'Speech engine and speaker names' },
      h(
        'div',
        { class: 'setting-row setting-row-top' },
        h('div', { class: 'setting-label', id: 'audio-engine-label' }, 'Engine'),
        h(
          'div',
          { class: 'setting-field setting-field-col' },
          h('div', { role: 'radiogroup', 'aria-labelledby': 'audio-engine-label', 'aria-describedby': 'audio-engine-notice audio-engine-error' }, engines),
          this.notice,
          this.draftNotice,
          this.engineState,
          this.err('engine'),
        ),
      ),
      this.openaiFields,
      this.modelRow,
      this.whisperFields,
      row('Your name', 'audio-you-label', this.youLabel, hint('audio-you-label-hint', 'The speaker of what your microphone hears.'), this.err('you_label')),
      row('Their name', 'audio-them-label', this.themLabel, hint('audio-them-label-hint', 'The speaker of what the call’s audio carries.'), this.err('them_label')),
      h('div', { class: 'form-actions' }, this.saveBtn, this.engineTestBtn),
      this.result,
    );
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      void this.save();
    });
    return form;
  }

  // ---- implemented by AudioSettings (../audiosettings.ts) ----

  protected abstract load(): Promise<void>;
  protected abstract chooseSource(ch: AudioChannel, value: string): Promise<void>;
  protected abstract test(ch: AudioChannel): Promise<void>;
  protected abstract touch(f: Field): void;
  protected abstract paintEngine(): void;
  protected abstract paintDraftNotice(): void;
  protected abstract removeKey(): Promise<void>;
  protected abstract testEngine(): Promise<void>;
  protected abstract save(): Promise<void>;
  protected abstract render(a: Audio | null, unavailable: string | null): void;
}
