// The application shell, part actions: the user's actions: sending, retrying, deciding, summarising, starting and ending calls, sessions.
// (The shell is one class in layers: base.ts → data.ts → links.ts → actions.ts → view.ts → bar.ts → ../app.ts.)

import { apiError } from '../audio';
import { listenOnStart } from '../audiosettings';
import { toggleOverlay } from '../desktop';
import { h } from '../dom';
import { errorText } from '../errors';
import type { Message, TranscriptTurn } from '../types';
import { overlayOnStart } from '../live/prefs';
import { END_CONFIRM_MS, START_AFTER_END_MS, unwrap } from './base';
import { AppLinks } from './links';

export abstract class AppActions extends AppLinks {

  protected async send(text: string): Promise<void> {
    let sid = this.activeId;
    if (!sid) {
      await this.newChat();
      sid = this.activeId;
      if (!sid) throw new Error('Could not start a chat.');
    }
    const c0 = this.store.cursor;
    const res = await this.api<unknown>('POST', `/api/sessions/${encodeURIComponent(sid)}/messages`, { text });
    if (res.status !== 201 && res.status !== 200) throw new Error(`Not sent: ${errorText(res)}`);
    const b = res.body as { message?: unknown } | null;
    this.store.mergeMessage(b && typeof b === 'object' && 'message' in b && b.message ? b.message : b, c0);
    this.flush();
  }

  /** The Stop button: the active kind stops the reply running in the open conversation. */
  protected async stopReply(): Promise<void> {
    const sid = this.activeId;
    if (!sid) return;
    const res = await this.api<unknown>('POST', `/api/sessions/${encodeURIComponent(sid)}/stop`, {});
    if (res.status !== 200) throw new Error(`Not stopped: ${errorText(res)}`);
  }

  /** The user's Retry on a failed message: pending again under a new task id. */
  protected async retryMessage(m: Message): Promise<void> {
    const c0 = this.store.cursor;
    const res = await this.api<unknown>('POST', `/api/sessions/${encodeURIComponent(m.session_id)}/messages/${encodeURIComponent(String(m.id))}/retry`);
    if (res.status !== 200) throw new Error(`Not retried: ${errorText(res)}`);
    this.store.mergeMessage(unwrap(res.body, 'message'), c0, true);
    this.flush();
  }

  /** Allow / Deny on a permission card: the answer is the settled card. */
  protected async decidePermission(requestId: string, allow: boolean): Promise<void> {
    const c0 = this.store.cursor;
    const res = await this.api<unknown>('POST', `/api/permissions/${encodeURIComponent(requestId)}`, { decision: allow ? 'allow' : 'deny' });
    if (res.status !== 200) throw new Error(`Not sent: ${errorText(res)}`);
    this.store.mergeMessage(unwrap(res.body, 'message'), c0, true);
    this.flush();
  }

  /** The user's Retry on a failed transcript turn (the same route, with the call's session id). */
  protected async retryTurn(t: TranscriptTurn): Promise<void> {
    const c0 = this.store.cursor;
    const res = await this.api<unknown>('POST', `/api/sessions/${encodeURIComponent(t.session_id)}/messages/${encodeURIComponent(String(t.id))}/retry`);
    if (res.status !== 200) throw new Error(`Not retried: ${errorText(res)}`);
    this.store.mergeTurn(unwrap(res.body, 'transcript'), c0);
    this.flush();
  }

  /** A final transcript turn typed by hand into the open (live) call. */
  protected async addTurn(speaker: string, text: string): Promise<void> {
    const sid = this.activeId;
    if (!sid) throw new Error('No call is open.');
    const c0 = this.store.cursor;
    const body: Record<string, unknown> = { text, is_final: true };
    if (speaker) body.speaker = speaker;
    const res = await this.api<unknown>('POST', `/api/calls/${encodeURIComponent(sid)}/transcript`, body);
    if (res.status !== 201) throw new Error(`Not added: ${errorText(res)}`);
    this.store.mergeTurn(unwrap(res.body, 'transcript'), c0);
    this.flush();
  }

  /** Asks the assistant (in the call's chat) for a summary of the call's transcript. */
  protected async summarise(sid: string): Promise<void> {
    if (this.summarising.has(sid)) return;
    this.hideBarError();
    this.summarising.add(sid);
    this.dirty.bar = this.dirty.transcript = true;
    this.flush();
    try {
      const c0 = this.store.cursor;
      const res = await this.api<unknown>('POST', `/api/calls/${encodeURIComponent(sid)}/summarise`);
      if (res.status === 201 || res.status === 200) {
        this.store.mergeMessage(unwrap(res.body, 'message'), c0);
        if (this.activeId === sid && this.tab !== 'call') {
          this.setTab('chat');
          this.chat.jumpToEnd();
        }
        return;
      }
      const code = (res.body as { error?: unknown } | null)?.error;
      if (code === 'no_transcript') {
        // The store learns that the transcript is empty: the action turns itself off, with why.
        const c1 = this.store.cursor;
        const t = await this.api<unknown[]>('GET', `/api/calls/${encodeURIComponent(sid)}/transcript`);
        if (t.status === 200 && Array.isArray(t.body)) this.store.loadTranscript(sid, t.body, c1);
        if ((this.store.conv(sid)?.transcript.length ?? 0) === 0) return;
      }
      this.showBarError(`Could not ask for a summary: ${errorText(res)}`, res);
    } catch (e) {
      this.showBarError(`Could not ask for a summary: ${e instanceof Error ? e.message : String(e)}`);
    } finally {
      this.summarising.delete(sid);
      this.dirty.bar = this.dirty.transcript = true;
      this.flush();
    }
  }

  /**
   * Start call. Without a connected assistant it first says so, with the way to connect one
   * (`anyway`: the user chose to start regardless: the call is heard and kept, nothing coaches).
   */
  protected async startCall(anyway = false): Promise<void> {
    this.hideBarError();
    if (Date.now() - this.endedAt < START_AFTER_END_MS) return;
    if (!anyway && this.store.assistant?.status === 'not_configured') return this.warnNoAssistant();
    this.hideBarWarn();
    const title = this.callTitle.value.trim();
    // Listening starts with the call when this window says so and the app can hear at all (a
    // build that cannot refuses the whole request).
    const listen = listenOnStart() && !!this.store.audio;
    const body: Record<string, unknown> = title ? { title } : {};
    let res = await this.api<{ session_id?: string }>('POST', '/api/calls', listen ? { ...body, listen: true } : body);
    if (listen && res.status === 503 && apiError(res).code === 'audio_unavailable') res = await this.api<{ session_id?: string }>('POST', '/api/calls', body);
    if (res.status !== 201 && res.status !== 200) return this.showBarError(`Could not start a call: ${errorText(res)}`, res);
    if (listen) void this.refreshAudio();
    const sid = res.body?.session_id;
    if (!sid) return this.showBarError('Could not start a call: no session id in the answer.');
    this.callTitle.value = '';
    // The browser's overlay opens with the call, as the desktop one does (a preference).
    if (this.transport.kind !== 'tauri' && overlayOnStart()) toggleOverlay(null);
    this.open(sid, 'call');
    if (!this.store.sessions.has(sid)) await this.reload();
  }

  /** Start call without an assistant: says what will (not) happen and offers both ways on. */
  protected warnNoAssistant(): void {
    const connect = h('button', { class: 'btn btn-small btn-primary', type: 'button', id: 'warn-connect' }, 'Connect an assistant');
    connect.addEventListener('click', () => {
      this.hideBarWarn();
      this.openAssistantSettings();
    });
    const anyway = h('button', { class: 'btn btn-small', type: 'button', id: 'warn-start-anyway' }, 'Start the call anyway');
    anyway.addEventListener('click', () => void this.startCall(true));
    const dismiss = h('button', { class: 'btn btn-small', type: 'button', id: 'warn-dismiss' }, 'Cancel');
    dismiss.addEventListener('click', () => this.hideBarWarn());
    this.barWarn.replaceChildren(
      h(
        'span',
        { class: 'bar-warn-text' },
        h('strong', null, 'No assistant is connected. '),
        'The call will be heard and kept, but nothing will coach you: no insights, no answers in the chat.',
      ),
      h('span', { class: 'bar-warn-actions' }, connect, anyway, dismiss),
    );
    this.barWarn.hidden = false;
    connect.focus();
  }

  protected hideBarWarn(): void {
    this.barWarn.hidden = true;
    this.barWarn.replaceChildren();
  }

  /** Settings → Assistant, its card in view. */
  protected openAssistantSettings(): void {
    this.setTab('settings');
    this.settings.assistant.focus();
  }

  /** End call, first press: the bar asks to confirm; "Keep the call" sits where End call was. */
  protected askEndCall(sid: string): void {
    if (this.confirmingEnd) clearTimeout(this.confirmingEnd.timer);
    this.confirmingEnd = {
      sid,
      timer: setTimeout(() => this.cancelEndCall(), END_CONFIRM_MS),
    };
    this.renderBar();
    this.callActions.querySelector<HTMLButtonElement>('#cancel-end-call')?.focus();
  }

  protected cancelEndCall(): void {
    if (!this.confirmingEnd) return;
    clearTimeout(this.confirmingEnd.timer);
    this.confirmingEnd = null;
    this.renderBar();
  }

  protected async endCall(sid: string): Promise<void> {
    if (this.confirmingEnd) clearTimeout(this.confirmingEnd.timer);
    this.confirmingEnd = null;
    this.endedAt = Date.now();
    setTimeout(() => {
      this.dirty.bar = true;
      this.flush();
    }, START_AFTER_END_MS + 50);
    this.hideBarError();
    const c0 = this.store.cursor;
    const res = await this.api<unknown>('POST', `/api/calls/${encodeURIComponent(sid)}/end`);
    if (res.status !== 200) return this.showBarError(`Could not end the call: ${errorText(res)}`, res);
    const b = res.body as { session?: unknown } | null;
    this.store.mergeSession(b && typeof b === 'object' && 'session' in b ? b.session : b, c0);
    this.dirty.bar = this.dirty.history = true;
    this.flush();
  }

  protected async renameSession(sid: string, title: string): Promise<void> {
    const c0 = this.store.cursor;
    const res = await this.api<unknown>('PATCH', `/api/sessions/${encodeURIComponent(sid)}`, { title: title || null });
    if (res.status !== 200) throw new Error(`Not renamed: ${errorText(res)}`);
    this.store.mergeSession(res.body, c0);
    this.dirty.bar = this.dirty.history = true;
    this.flush();
  }

  protected async deleteSession(sid: string): Promise<void> {
    const res = await this.api<unknown>('DELETE', `/api/sessions/${encodeURIComponent(sid)}`);
    if (res.status !== 200) throw new Error(`Not deleted: ${errorText(res)}`);
    // The `session_deleted` event removes it from every view (this one included).
  }

  protected async newChat(): Promise<void> {
    const res = await this.api<{ session_id?: string }>('POST', '/api/sessions', {});
    if (res.status !== 201 && res.status !== 200) throw new Error(`Could not start a chat: ${errorText(res)}`);
    const sid = res.body?.session_id;
    if (!sid) throw new Error('Could not start a chat: no session id in the answer.');
    this.open(sid, 'chat');
    if (!this.store.sessions.has(sid)) await this.reload();
  }
}
