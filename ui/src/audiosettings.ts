// Settings → Audio: where the app listens (the microphone for "You", the monitor of the output
// for "Them", each with a live level meter and a Test that records a few seconds and shows what
// the engine heard), the speech engine (built-in, or an OpenAI-compatible server: base URL, model,
// a write-only API key, and in plain words whether call audio leaves this computer), the two
// speaker labels, and whether a new call starts listening at once. A machine where the app
// cannot hear (no sound server, or a build without the audio pipeline) gets an explanation and
// what to do, not an empty list.
//
// As in assistant.ts, the inputs are the user's draft; everything shown about audio comes from
// the store (`store.audio`, `store.levels`). The list of sources is this card's own (read when
// Settings opens and while it stays open).

import { describeError, plainError } from './errors';
import { checkEngine, checkSentence, draftEngineNotice, plainEngineWords } from './live/enginecheck';
import { apiError, audioErrorField, backlogText, LevelMeter, METERS_RENEW_MS, METERS_SECONDS, normSources, sourceOptions, TEST_SECONDS } from './audio';
import { systemBody } from './detect';
import { h } from './dom';
import type { ApiResponse } from './transport';
import type { Audio, AudioChannel, AudioLevels } from './types';
import { AudioSettingsForm, savedKind, type EngineKind, type Field } from './audiosettings/form';

export { listenOnStart, setListenOnStart } from './audiosettings/prefs';
export type { AudioSettingsActions } from './audiosettings/actions';
import type { AudioSettingsActions } from './audiosettings/actions';


const ENGINE_STATE: Record<string, string> = { ready: 'Engine ready', down: 'Engine not answering', unavailable: 'Engine cannot run here' };

/** What the card says when the app cannot hear: no pipeline in this build, or no sound server. */
export function unavailableHelp(kind: 'build' | 'server'): { title: string; steps: string[] } {
  if (kind === 'build') {
    return {
      title: 'This copy of StageWhisper cannot hear calls.',
      steps: [
        'It was built without the audio pipeline. Install the StageWhisper package (.deb or .rpm) or a build that includes it.',
        'Meanwhile a transcript can still come in: typed in the Transcript tab, or posted to the call (POST /api/calls/{id}/transcript, stagewhisper transcript replay).',
      ],
    };
  }
  return {
    title: 'StageWhisper cannot reach a sound server, so it cannot hear your microphone or the call.',
    steps: [
      'On a Linux desktop the sound server is PipeWire (with pipewire-pulse) or PulseAudio, running in your login session. In a terminal, pactl info should answer.',
      'If it does not, install and start one: sudo apt install pipewire-pulse (or pulseaudio), then log out and back in.',
      'If StageWhisper runs as another user, as a service or over SSH, it cannot see your session’s sound server: start it from your desktop session, or set PULSE_SERVER (for example unix:/run/user/1000/pulse/native) in its environment.',
    ],
  };
}

export class AudioSettings extends AudioSettingsForm {
  constructor(actions: AudioSettingsActions) {
    super(actions);
    this.render(null, null);
  }


  focus(): void {
    this.card.focus();
    this.card.scrollIntoView({ block: 'start' });
  }

  // ---- loading, meters ----------------------------------------------------------------------

  /** Settings is on screen (or not): read the sources and keep the meters going while it is. */
  setVisible(on: boolean): void {
    if (on === this.visible) return;
    this.visible = on;
    clearTimeout(this.renewTimer);
    this.models.setVisible(on);
    if (on) void this.load();
  }

  /** Reads the status and the sources again, then keeps the meters alive while visible. */
  async load(): Promise<void> {
    clearTimeout(this.renewTimer);
    const res = await this.actions.audioCall('GET', '/api/audio').catch(() => null);
    if (res && res.status === 200) await this.loadSources();
    else this.paint();
    this.keepMeters();
  }

  protected async loadSources(): Promise<void> {
    try {
      const res = await this.actions.api<unknown>('GET', '/api/audio/sources');
      const list = res.status === 200 ? normSources(res.body) : null;
      if (list) {
        this.sources = list;
        this.sourcesError = null;
      } else {
        this.sources = null;
        const e = apiError(res);
        this.sourcesError = e.code === 'audio_unavailable' ? e.message || 'No sound server is reachable.' : `Could not list the sources: ${this.actions.errorText(res)}`;
      }
    } catch (e) {
      this.sourcesError = `Could not list the sources: ${e instanceof Error ? e.message : String(e)}`;
    }
    this.paint();
  }

  /**
   * While visible: `POST /api/audio/meters` (levels come as events for the next few seconds),
   * renewed before it runs out; the sources are listed again each time (a headset plugged in).
   */
  protected keepMeters(): void {
    clearTimeout(this.renewTimer);
    if (!this.visible) return;
    if (this.a && !this.sourcesError && typeof document !== 'undefined' && document.visibilityState !== 'hidden') {
      void this.actions.api('POST', '/api/audio/meters', { seconds: METERS_SECONDS }).catch(() => null);
    }
    this.renewTimer = setTimeout(() => {
      if (!this.visible) return;
      void (this.a ? this.loadSources() : this.load()).finally(() => this.keepMeters());
    }, METERS_RENEW_MS);
  }

  // ---- rendering ----------------------------------------------------------------------------

  /** Shows what the store has; fills the inputs the user is not editing. */
  render(a: Audio | null, unavailable: string | null): void {
    this.a = a;
    this.unavailable = unavailable;
    this.paint();
    if (a) this.speakers.show(a);
    if (a) this.keepAudio.show(a);
  }

  /** The latest levels (null: none coming). */
  levels(l: AudioLevels | null): void {
    for (const [ch, m] of this.meters) {
      const v = l ? l[ch] : null;
      const off = this.a ? (ch === 'mic' ? this.a.mic : this.a.system) === null : false;
      m.set(v, off || (!!l && v === null));
    }
  }

  protected paint(): void {
    const a = this.a;
    const cannot: 'build' | 'server' | null = !a && this.unavailable ? 'build' : a && this.sourcesError && this.sources === null ? 'server' : null;
    this.card.dataset.state = cannot ? `unavailable-${cannot}` : a ? a.status.state : 'loading';

    this.paintStatus(a, cannot);
    this.paintSources(a);
    this.paintEngineSettings(a);

    // Labels.
    if (!this.dirty.has('you_label')) this.youLabel.value = a?.you_label ?? '';
    if (!this.dirty.has('them_label')) this.themLabel.value = a?.them_label ?? '';
    const off = !a || this.busy;
    for (const el of [this.baseUrl, this.model, this.apiKey, this.language, this.youLabel, this.themLabel, ...this.engineInputs.values()]) el.disabled = off;
    this.saveBtn.disabled = off;
    this.engineTestBtn.disabled = off;
    this.keyRemove.disabled = off;
  }

  /** The status line, what was dropped, and why the app cannot hear (with what to do). */
  private paintStatus(a: Audio | null, cannot: 'build' | 'server' | null): void {
    // Status line.
    if (!a) {
      this.statusChip.className = 'chip chip-muted';
      this.statusChip.textContent = this.unavailable ? 'Cannot hear' : 'Loading…';
      this.statusText.textContent = this.unavailable ? '' : 'Reading the audio settings…';
    } else {
      const st = a.status;
      this.statusChip.className = `chip ${st.state === 'listening' ? 'chip-ok' : st.state === 'error' ? 'chip-bad' : 'chip-muted'}`;
      this.statusChip.textContent = st.state === 'listening' ? 'Listening' : st.state === 'error' ? 'Not hearing' : 'Not listening';
      this.statusText.textContent = plainEngineWords(st.detail);
    }
    this.statusChip.dataset.state = a?.status.state ?? (this.unavailable ? 'unavailable' : 'loading');
    // The status's detail already says what waits; this line only what was dropped.
    const bl = a && a.status.backlog.dropped_seconds > 0 ? backlogText({ ...a.status, backlog: { ...a.status.backlog, turns: 0 } }) : '';
    this.backlog.textContent = bl;
    this.backlog.hidden = !bl;

    // Why it cannot hear, and what to do.
    this.unavailableBox.hidden = !cannot;
    if (cannot) {
      const reason = cannot === 'build' ? (this.unavailable ?? '') : (this.sourcesError ?? '');
      const help = unavailableHelp(cannot);
      this.unavailableBox.dataset.kind = cannot;
      this.unavailableTitle.textContent = help.title;
      this.unavailableReason.textContent = reason ? `The app says: ${reason}` : '';
      this.unavailableReason.hidden = !reason;
      this.unavailableSteps.replaceChildren(...help.steps.map((s) => h('li', null, s)));
    }
  }

  /** Sources: their choices, detail lines, Test buttons and meters. */
  private paintSources(a: Audio | null): void {
    // Sources, engine, labels: nothing to choose without a pipeline.
    for (const el of this.pipelineOnly) el.hidden = !a;
    for (const [ch, sel] of this.selects) {
      const saved = a ? (ch === 'mic' ? a.mic : a.system) : null;
      const opts = sourceOptions(this.sources, ch, saved);
      const want = saved === null ? '' : saved;
      const keepFocus = document.activeElement === sel;
      const current = Array.from(sel.options).map((o) => `${o.value}\u0000${o.text}`).join('\u0001');
      const next = opts.map((o) => `${o.value}\u0000${o.label}`).join('\u0001');
      if (current !== next) {
        sel.replaceChildren(...opts.map((o) => h('option', { value: o.value }, o.label)));
        if (keepFocus) sel.focus();
      }
      if (!this.dirty.has(ch)) sel.value = want;
      sel.disabled = !a || this.busy;
      const st = a?.status.channels.find((c) => c.channel === ch);
      const fallback = ch === 'mic' ? 'Your side of the call.' : 'What plays on this computer: the other side of the call.';
      const none = this.sources !== null && !this.sources.some((s) => s.kind === (ch === 'mic' ? 'microphone' : 'monitor'));
      const detailEl = this.channelDetail.get(ch)!;
      detailEl.textContent =
        st && st.state === 'error' && st.detail
          ? st.detail
          : none
            ? ch === 'mic'
              ? 'No microphone found: plug one in (the list updates by itself).'
              : 'No output device to listen to.'
            : st && st.state === 'listening' && st.source
              ? `Listening to ${this.describe(st.source)}.`
              : fallback;
      detailEl.classList.toggle('field-error', !!st && st.state === 'error');
      const test = this.testBtns.get(ch)!;
      // While a call is heard, what a test records would go into its transcript.
      const listening = !!a && a.status.state !== 'idle' && !!a.status.call_id;
      test.disabled = !a || saved === null || !!this.sourcesError || this.testing !== null || listening;
      test.title = listening
        ? 'A call is being listened to: its meters show this source. Stop listening to test it (what a test records would go into the call’s transcript).'
        : saved === null
          ? 'This channel is off: choose a source first'
          : `Record ${TEST_SECONDS} s and show what the engine hears`;
      this.meters.get(ch)!.el.hidden = !a || !!this.sourcesError;
    }
  }

  /** The saved engine (unless the user is editing it) and what it says about itself. */
  private paintEngineSettings(a: Audio | null): void {
    // Engine.
    const e = a?.engine;
    if (!this.dirty.has('engine')) for (const [id, i] of this.engineInputs) i.checked = id === savedKind(e?.kind);
    if (!this.dirty.has('base_url')) this.baseUrl.value = e?.base_url ?? '';
    if (!this.dirty.has('model')) this.model.value = e?.model ?? '';
    if (!this.dirty.has('api_key')) this.apiKey.value = '';
    if (!this.dirty.has('language')) this.language.value = e?.kind === 'whisper' ? (e.language ?? 'auto') : 'auto';
    const keySaved = e?.kind === 'openai' && e.api_key_set;
    this.keyState.textContent = keySaved ? 'a key is saved' : 'no key saved';
    this.keyState.className = `chip ${keySaved ? 'chip-ok' : 'chip-muted'}`;
    this.keyRemove.hidden = !keySaved;
    this.notice.textContent = e?.notice ?? '';
    this.notice.hidden = !e?.notice;
    this.notice.classList.toggle('audio-leaves', !!e?.leaves_machine);
    this.notice.dataset.leaves = String(!!e?.leaves_machine);
    const es = a?.status.engine;
    this.engineState.textContent = es && es.state ? `${ENGINE_STATE[es.state] ?? `Engine ${es.state}`}${es.detail ? `: ${es.detail}` : '.'}` : '';
    // A failing engine is said by the status line above already: once is enough.
    const failing = !!es && (es.state === 'down' || es.state === 'unavailable');
    this.engineState.textContent = plainEngineWords(this.engineState.textContent ?? '');
    this.engineState.hidden = !this.engineState.textContent || (failing && a?.status.state === 'error');
    this.engineState.classList.toggle('field-error', !!es && (es.state === 'down' || es.state === 'unavailable'));
    this.paintEngine();
  }

  protected describe(name: string): string {
    return this.sources?.find((s) => s.name === name)?.description ?? name;
  }

  protected engineKind(): EngineKind {
    for (const [id, i] of this.engineInputs) if (i.checked) return id;
    return 'builtin';
  }

  protected paintEngine(): void {
    const kind = this.engineKind();
    this.openaiFields.hidden = kind !== 'openai';
    this.whisperFields.hidden = kind !== 'whisper';
    this.modelRow.hidden = kind === 'builtin';
    this.model.placeholder = kind === 'whisper' ? 'tiny.en (a model under Model below), or a file’s path' : 'whisper-1, tiny.en, …';
    this.modelHint.textContent =
      kind === 'whisper' ? 'A model installed under Model below (its name, e.g. tiny.en), or the full path of a ggml model file.' : 'The model the server should use.';
    this.paintDraftNotice();
  }

  /** Before saving, the description follows the choice: what will happen to the call's audio. */
  protected paintDraftNotice(): void {
    const url = this.baseUrl.value.trim();
    const saved = this.a?.engine.kind === 'openai' ? (this.a.engine.base_url ?? '') : '';
    const kind = this.engineKind();
    const changed = kind !== savedKind(this.a?.engine.kind) || (kind === 'openai' && url !== saved);
    const d = draftEngineNotice(kind, url);
    // The saved engine's notice, or the draft's words in its place until it is saved.
    this.notice.hidden = changed || !this.a?.engine.notice;
    this.draftNotice.hidden = !changed;
    this.draftNotice.textContent = changed ? d.text : '';
    this.draftNotice.classList.toggle('audio-leaves', d.leaves);
    this.draftNotice.dataset.leaves = String(d.leaves);
    // A saved key belongs to its server: another address does not inherit it.
    const keySaved = this.a?.engine.kind === 'openai' && this.a.engine.api_key_set;
    this.apiKey.placeholder = !keySaved ? 'Optional' : url.replace(/\/+$/, '') === saved.replace(/\/+$/, '') ? 'Saved — leave empty to keep it' : 'The saved key stays with the old server: enter this one’s, if it needs one';
  }

  // ---- changes ------------------------------------------------------------------------------

  protected touch(f: Field): void {
    this.dirty.add(f);
    this.setError(f, null);
  }

  protected inputOf(f: Field): HTMLElement | undefined {
    return {
      mic: this.selects.get('mic'),
      system: this.selects.get('system'),
      engine: this.engineInputs.get(this.engineKind()),
      base_url: this.baseUrl,
      model: this.model,
      api_key: this.apiKey,
      language: this.language,
      you_label: this.youLabel,
      them_label: this.themLabel,
    }[f];
  }

  protected setError(f: Field, text: string | null): void {
    const el = this.errors.get(f);
    if (!el) return;
    el.hidden = !text;
    el.textContent = text ?? '';
    const input = this.inputOf(f);
    if (text) input?.setAttribute('aria-invalid', 'true');
    else input?.removeAttribute('aria-invalid');
  }

  /** Shows a refused `PUT /api/audio` next to the field it concerns (else in the result line). */
  protected problem(res: ApiResponse<unknown>, sent: Record<string, unknown>, what: string): void {
    const e = apiError(res);
    const field = e.code ? audioErrorField(e.code, e.message, sent) : null;
    if (field) {
      this.setError(field, plainError(e.code, e.message));
      this.result.textContent = `${what}: see the highlighted field.`;
      this.inputOf(field)?.focus();
    } else {
      this.result.textContent = `${what}: ${this.actions.errorText(res)}`;
      describeError(this.result, res);
    }
  }

  protected async put(body: Record<string, unknown>, what: string, done: string): Promise<boolean> {
    this.busy = true;
    this.paint();
    this.result.textContent = 'Saving…';
    try {
      const res = await this.actions.audioCall('PUT', '/api/audio', body);
      if (res.status !== 200) {
        this.problem(res, body, what);
        return false;
      }
      for (const k of Object.keys(body)) {
        if (k === 'engine') for (const f of ['engine', 'base_url', 'model', 'api_key'] as const) this.dirty.delete(f);
        else this.dirty.delete(k as Field);
      }
      this.result.textContent = done;
      return true;
    } catch (e) {
      this.result.textContent = `${what}: ${e instanceof Error ? e.message : String(e)}`;
      return false;
    } finally {
      this.busy = false;
      this.paint();
    }
  }

  /** A source picked: saved at once (while listening it takes effect without stopping the call). */
  protected async chooseSource(ch: AudioChannel, value: string): Promise<void> {
    this.setError(ch, null);
    this.dirty.add(ch);
    const ok = await this.put({ [ch]: ch === 'system' ? systemBody(value) : value === '' ? null : value }, 'Not changed', value === '' ? `${ch === 'mic' ? 'Microphone' : 'Call audio'} off.` : 'Saved.');
    // Refused: the picker shows the saved source again (the error says why).
    this.dirty.delete(ch);
    if (!ok) this.paint();
    this.levels(null);
  }

  /** The `PUT /api/audio` body for the engine and labels as the form says now (null: a field is missing). */
  body(): Record<string, unknown> | null {
    const b: Record<string, unknown> = {};
    let bad = false;
    if (this.dirty.has('engine') || this.dirty.has('base_url') || this.dirty.has('model') || this.dirty.has('api_key') || this.dirty.has('language')) {
      const kind = this.engineKind();
      if (kind === 'builtin') b.engine = { kind: 'builtin' };
      else if (kind === 'whisper') {
        const model = this.model.value.trim();
        if (!model) {
          this.setError('model', 'Enter a model: the name of one installed under Model below (e.g. tiny.en), or a model file’s path.');
          bad = true;
        }
        b.engine = { kind: 'whisper', model, language: this.language.value.trim() || 'auto' };
      } else {
        const base_url = this.baseUrl.value.trim();
        const model = this.model.value.trim();
        // Every missing field is flagged at once, not one per Save.
        if (!base_url) this.setError('base_url', 'Enter the server’s address, for example http://127.0.0.1:8000.');
        if (!model) this.setError('model', 'Enter the model the server should use.');
        if (!model || !base_url) bad = true;
        const engine: Record<string, unknown> = { kind: 'openai', base_url, model };
        const key = this.apiKey.value.trim();
        if (key) engine.api_key = key;
        b.engine = engine;
      }
    }
    for (const [f, el] of [
      ['you_label', this.youLabel],
      ['them_label', this.themLabel],
    ] as const) {
      if (!this.dirty.has(f)) continue;
      const v = el.value.trim();
      if (!v) {
        this.setError(f, 'Enter a name (1–100 characters).');
        bad = true;
      }
      b[f] = v;
    }
    return bad ? null : b;
  }

  protected async save(): Promise<void> {
    if (this.busy) return;
    for (const f of ['engine', 'base_url', 'model', 'api_key', 'you_label', 'them_label'] as const) this.setError(f, null);
    const body = this.body();
    if (!body) {
      this.result.textContent = 'Not saved: see the highlighted field.';
      for (const f of ['base_url', 'model', 'you_label', 'them_label'] as const) {
        if (!this.errors.get(f)?.hidden) {
          this.inputOf(f)?.focus();
          break;
        }
      }
      return;
    }
    if (!Object.keys(body).length) {
      this.result.textContent = 'Nothing changed.';
      return;
    }
    const saved = await this.put(body, 'Not saved', 'Saved.');
    // A new engine is tried at once: a wrong address is found now, not in the call.
    if (saved && body.engine) await this.runCheck(null, true);
  }

  /** The Test button: the engine as the form says (saved or not), without saving it. */
  protected async testEngine(): Promise<void> {
    if (this.busy) return;
    for (const f of ['base_url', 'model'] as const) this.setError(f, null);
    const body = this.body();
    if (!body) {
      this.result.textContent = 'Not tested: see the highlighted field.';
      return;
    }
    const engine = (body.engine as Record<string, unknown> | undefined) ?? null;
    await this.runCheck(engine, false);
  }

  protected async runCheck(engine: Record<string, unknown> | null, afterSave: boolean): Promise<void> {
    this.busy = true;
    this.paint();
    this.result.dataset.check = 'running';
    this.result.textContent = afterSave ? 'Saved. Trying the engine…' : 'Trying the engine…';
    try {
      const c = await checkEngine((m, p, b) => this.actions.audioCall(m, p, b), engine);
      this.result.dataset.check = c.ok ? 'ok' : c.code;
      this.result.textContent = checkSentence(c, afterSave);
    } catch (e) {
      this.result.dataset.check = 'error';
      this.result.textContent = `${afterSave ? 'Saved, but the engine could not be tried' : 'Not tested'}: ${e instanceof Error ? e.message : String(e)}`;
    } finally {
      this.busy = false;
      this.paint();
      // The saved engine's outcome is its status too.
      if (!engine) void this.actions.audioCall('GET', '/api/audio').catch(() => null);
    }
  }

  protected async removeKey(): Promise<void> {
    const e = this.a?.engine;
    if (this.busy || !e || e.kind !== 'openai') return;
    await this.put({ engine: { kind: 'openai', base_url: e.base_url ?? '', model: e.model ?? '', api_key: null } }, 'Key not removed', 'Saved key removed.');
  }

  // ---- test -----------------------------------------------------------------------------------

  /** Records `TEST_SECONDS` of one channel and shows what the engine heard, and how loud it was. */
  protected async test(ch: AudioChannel): Promise<void> {
    if (this.testing) return;
    this.testing = ch;
    const out = this.testResults.get(ch)!;
    out.hidden = false;
    out.className = 'audio-test-result';
    let left = TEST_SECONDS;
    const speak = ch === 'mic' ? 'speak now' : 'play something in the call';
    out.textContent = `Recording ${left} s… ${speak}.`;
    const tick = setInterval(() => {
      left -= 1;
      out.textContent = left > 0 ? `Recording ${left} s… ${speak}.` : 'Transcribing…';
    }, 1000);
    this.paint();
    try {
      const res = await this.actions.api<unknown>('POST', '/api/audio/test', { channel: ch, seconds: TEST_SECONDS });
      clearInterval(tick);
      if (res.status !== 200) {
        const e = apiError(res);
        out.classList.add('field-error');
        out.textContent =
          e.code === 'channel_off'
            ? 'This channel is off: choose a source first.'
            : e.code === 'listening'
              ? e.message
            : e.code === 'engine_failed'
              ? `Recorded, but the engine did not answer: ${e.message || 'no reason given'}`
              : `Test failed: ${this.actions.errorText(res)}`;
        return;
      }
      const r = res.body as { text?: unknown; peak?: unknown; source?: unknown; seconds?: unknown };
      const text = typeof r.text === 'string' ? r.text.trim() : '';
      const peak = typeof r.peak === 'number' && Number.isFinite(r.peak) ? r.peak : 0;
      const meter = new LevelMeter(`audio-test-${ch}-peak`, 'Loudest moment of the test', true);
      meter.set(peak);
      const pct = Math.round(peak * 100);
      out.replaceChildren(
        h('div', { class: 'audio-test-heard' }, text ? h('span', null, 'Heard: ', h('q', { class: 'audio-test-text', id: `audio-test-${ch}-text` }, text)) : h('span', { id: `audio-test-${ch}-text` }, 'Nothing recognised.')),
        h(
          'div',
          { class: 'setting-note audio-test-peak' },
          'Loudest: ',
          meter.el,
          ` ${pct} %`,
          peak <= 0 ? ' — nothing reached this source: is it muted, or the wrong one?' : peak < 0.02 ? ' — very quiet: check the input volume.' : '',
          typeof r.source === 'string' && r.source ? ` · ${this.describe(r.source)}` : '',
        ),
      );
      out.dataset.peak = String(peak);
    } catch (e) {
      clearInterval(tick);
      out.classList.add('field-error');
      out.textContent = `Test failed: ${e instanceof Error ? e.message : String(e)}`;
    } finally {
      this.testing = null;
      this.paint();
    }
  }
}
