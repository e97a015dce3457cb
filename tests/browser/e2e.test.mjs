// Browser end-to-end tests of the web UI against the real app in headless mode.
//
//   cd ui && npm run build && npm run test:e2e
//
// The app is started once (`--headless --data-dir <tmp> --ui-dir ui/dist --typing-timeout-secs 3`);
// Debian's Chromium is driven by playwright-core. Each test opens its own call or chat through the
// control API and posts callbacks exactly as an assistant would. Screenshots go to tests/artifacts/.

import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import {
  api,
  callback,
  ensureArtifacts,
  launchBrowser,
  openUi,
  percentile,
  skipReason,
  sleep,
  startApp,
  startProxy,
  uuid,
} from './harness.mjs';

const reason = skipReason();
if (reason && process.env.SW_E2E_REQUIRE === '1') throw new Error(`browser tests cannot run: ${reason}`);
if (reason) console.log(`# SKIP browser tests: ${reason}`);

const TYPING_TIMEOUT_SECS = 3;
const shot = (name) => path.join(ensureArtifacts(), `${name}.png`);

describe('web UI against the headless app', { skip: reason ?? false }, () => {
  let app;
  let ready;
  let browser;
  let page;
  const pageErrors = [];
  const dialogs = [];

  before(async () => {
    app = await startApp(['--typing-timeout-secs', String(TYPING_TIMEOUT_SECS)]);
    ready = app.ready;
    console.log(`# app: ${app.label}; ui_url ${ready.ui_url}`);
    browser = await launchBrowser();
    page = await browser.context.newPage();
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    page.on('dialog', (d) => {
      dialogs.push(d.message());
      void d.dismiss();
    });
    await openUi(browser.context, ready, page);
  });

  after(async () => {
    await browser?.close();
    const exit = await app?.stop();
    if (app) {
      assert.deepEqual(app.extraStdout(), [], 'the app printed more than the one ready line on stdout');
      assert.deepEqual(exit, { code: 0, signal: null }, `the app should exit 0 on SIGTERM; stderr tail:\n${app.stderr().slice(-2000)}`);
    }
  });

  // ---- helpers ---------------------------------------------------------------------------

  async function newCall() {
    const r = await api(ready, 'POST', '/api/calls', {});
    assert.equal(r.status, 201, `POST /api/calls → ${r.status} ${JSON.stringify(r.json)}`);
    assert.ok(r.json?.session_id, 'POST /api/calls answers session_id');
    assert.equal(r.json.insights_session_id, `insights:${r.json.session_id}`);
    await page.waitForSelector(`.app[data-session="${r.json.session_id}"]`, { timeout: 5000 });
    await page.keyboard.press('Control+1');
    return r.json.session_id;
  }

  const post = async (body, task = uuid()) => {
    const r = await callback(ready, task, { task_id: task, ...body });
    assert.equal(r.status, 200, `callback ${body.status} → ${r.status} ${JSON.stringify(r.json)}`);
    return r.json;
  };
  const say = (sid, text, extra = {}) => post({ session_id: sid, status: 'message', message_id: uuid(), reply_text: text, ...extra });
  const row = (mid) => page.locator(`#messages [data-message-id="${mid}"]`);
  const chatText = () => page.locator('#messages').innerText();

  // ---- tests --------------------------------------------------------------------------------

  it('takes the token from the URL fragment, keeps it for the tab, and removes it from the address bar', async () => {
    assert.ok(!page.url().includes('token='), `address bar still shows the token: ${page.url()}`);
    const stored = await page.evaluate(() => Object.values(sessionStorage));
    assert.ok(stored.includes(ready.ui_token), 'token kept in sessionStorage');
    await page.reload();
    await page.waitForSelector('.app[data-conn="live"]');
    assert.equal(await page.locator('#assistant-status').innerText(), 'Assistant: not configured');
    assert.equal(await page.locator('#tunnel-status').innerText(), 'Tunnel: off');
  });

  it('a wrong token shows the connect form, not the app data', async () => {
    const p = await browser.context.newPage();
    await p.goto(`${ready.ui_url}#token=not-the-token`);
    await p.waitForSelector('.app[data-conn="unauthorized"]', { timeout: 10_000 });
    assert.ok(await p.locator('.auth-banner .token-form').isVisible());
    await p.close();
  });

  it('starts a call from the call bar, shows elapsed time, ends it', async () => {
    await page.keyboard.press('Control+1');
    // If another call is live the bar offers "Back to live call"; end those first through the API.
    for (const s of (await api(ready, 'GET', '/api/sessions')).json) {
      if (s.is_call && !s.ended_at) await api(ready, 'POST', `/api/calls/${s.session_id}/end`);
    }
    // No assistant is connected in this suite: Start call says so first, with both ways on.
    await page.locator('#start-call').click();
    const warn = page.locator('#bar-warn');
    await warn.waitFor();
    assert.match(await warn.innerText(), /No assistant is connected/);
    assert.equal(await page.locator('#elapsed').count(), 0, 'no call started yet');
    await page.locator('#warn-start-anyway').click();
    await page.waitForSelector('#elapsed');
    assert.equal(await warn.isVisible(), false);
    const sid = await page.locator('.app').getAttribute('data-session');
    const sessions = (await api(ready, 'GET', '/api/sessions')).json;
    const s = sessions.find((x) => x.session_id === sid);
    assert.ok(s?.is_call && s.ended_at === null, 'the call bar started a call');
    await sleep(1100);
    assert.match(await page.locator('#elapsed').innerText(), /^\d+:\d\d$/);
    // End call asks first; "Keep the call" (where End call was) keeps it.
    await page.locator('#end-call').click();
    assert.equal(await page.locator('#end-call-question').innerText(), 'End this call?');
    await page.locator('#cancel-end-call').click();
    assert.equal((await api(ready, 'GET', '/api/sessions')).json.find((x) => x.session_id === sid).ended_at, null, 'still live');
    await page.locator('#end-call').click();
    await page.locator('#confirm-end-call').click();
    await page.waitForSelector('#start-call');
    // A double click's second half is not a new call: Start call waits a moment.
    assert.equal(await page.locator('#start-call').isDisabled(), true);
    await page.waitForSelector('#start-call:not([disabled])', { timeout: 5000 });
    assert.ok((await api(ready, 'GET', '/api/sessions')).json.find((x) => x.session_id === sid).ended_at, 'ended_at set');
    assert.match(await page.locator('.call-state').innerText(), /Past call/);
  });

  it('an assistant message lands in Chat once, even when posted twice or re-sent with the same text', async () => {
    const sid = await newCall();
    const mid = uuid();
    const task = uuid();
    const body = { session_id: sid, status: 'message', message_id: mid, reply_text: 'Budget confirmed: **50k** for Q3.' };
    assert.deepEqual(await post(body, task), { ok: true });
    const dup = await post(body, task);
    assert.equal(dup.duplicate, true, `second POST should be a duplicate: ${JSON.stringify(dup)}`);
    // A plain-text re-send of the same reply under a new message_id (same scope) is a duplicate too.
    const resend = await post({ ...body, message_id: uuid() }, task);
    assert.equal(resend.duplicate, true, `near-identical re-send should be a duplicate: ${JSON.stringify(resend)}`);
    await row(mid).waitFor();
    await sleep(200);
    assert.equal(await page.locator('#messages .msg-assistant').count(), 1);
    assert.equal(await row(mid).locator('strong').innerText(), '50k');
    await page.keyboard.press('Control+2');
    assert.ok(!(await page.locator('#insights').innerText()).includes('Budget confirmed'), 'a chat reply never shows in Insights');
    await page.keyboard.press('Control+1');
  });

  it('insights go to the Insights tab, newest first, with an unread badge while on Chat; `none` never shows', async () => {
    const sid = await newCall();
    await post({ session_id: `insights:${sid}`, status: 'typing' });
    await post({ session_id: `insights:${sid}`, status: 'message', message_id: uuid(), reply_text: 'They said the budget is fifty thousand for Q3.' });
    await page.waitForSelector('#tab-insights .badge:not([hidden])');
    assert.equal(await page.locator('#tab-insights .badge').innerText(), '1');
    await post({ session_id: `insights:${sid}`, status: 'message', message_id: uuid(), reply_text: 'None.' });
    await post({ session_id: `insights:${sid}`, status: 'message', message_id: uuid(), reply_text: 'none' });
    await post({ session_id: `insights:${sid}`, status: 'message', message_id: uuid(), reply_text: 'Decision maker is the CFO, not the CTO.' });
    await page.waitForFunction(() => document.querySelector('#tab-insights .badge')?.textContent === '2');
    assert.ok(!(await chatText()).includes('fifty thousand'), 'insights never appear in the chat');
    await page.screenshot({ path: shot('chat-with-unread-insights-light') });

    await page.keyboard.press('Control+2');
    assert.equal(await page.locator('#tab-insights').getAttribute('aria-selected'), 'true');
    assert.ok(await page.locator('#tab-insights .badge').isHidden(), 'badge cleared on the Insights tab');
    const items = page.locator('#insights .insight');
    assert.equal(await items.count(), 2, 'two insights listed (the `none` replies are not)');
    assert.match(await items.nth(0).innerText(), /CFO/, 'newest first');
    assert.match(await items.nth(1).innerText(), /fifty thousand/);
    assert.match(await items.nth(0).locator('.insight-offset').innerText(), /^\d{1,2}:\d\d/, 'the clock time, as in the chat');
    assert.match(await items.nth(0).locator('.insight-offset').getAttribute('title'), /^\d+:\d\d into the call · /, 'time into the call on hover');
    assert.ok(!/\bnone\b/i.test(await page.locator('#insights').innerText()), '`none` is never shown');
    assert.equal(await page.locator('#insights').getAttribute('aria-live'), 'polite');
    await page.screenshot({ path: shot('insights-light') });
    await page.emulateMedia({ colorScheme: 'dark' });
    await page.screenshot({ path: shot('insights-dark') });
    await page.emulateMedia({ colorScheme: 'light' });

    // While on Insights, new ones are read already.
    await post({ session_id: `insights:${sid}`, status: 'message', message_id: uuid(), reply_text: 'Timeline: pilot in May.' });
    await page.waitForFunction(() => document.querySelectorAll('#insights .insight').length === 3);
    assert.ok(await page.locator('#tab-insights .badge').isHidden());
    await page.keyboard.press('Control+1');
    await post({ session_id: `insights:${sid}`, status: 'message', message_id: uuid(), reply_text: 'Competitor mentioned: Acme.' });
    await page.waitForFunction(() => document.querySelector('#tab-insights .badge')?.textContent === '1');
  });

  it('typing shows with its label and clears with the reply, on completed, and on timeout', async () => {
    const sid = await newCall();
    const um = uuid();
    const task = uuid();
    await post({ session_id: sid, status: 'typing', user_message_id: um, label: 'searching the web' }, task);
    await page.waitForSelector('.panel-chat .typing:not([hidden])');
    assert.match(await page.locator('.panel-chat .typing').innerText(), /searching the web/);
    await page.screenshot({ path: shot('typing-light') });
    await post({ session_id: sid, status: 'message', message_id: uuid(), user_message_id: um, reply_text: 'Found it.' }, task);
    await page.waitForSelector('.panel-chat .typing', { state: 'hidden' });

    const um2 = uuid();
    await post({ session_id: sid, status: 'typing', user_message_id: um2 });
    await page.waitForSelector('.panel-chat .typing:not([hidden])');
    assert.match(await page.locator('.panel-chat .typing').innerText(), /typing/i);
    await post({ session_id: sid, status: 'completed', user_message_id: um2 });
    await page.waitForSelector('.panel-chat .typing', { state: 'hidden' });

    await post({ session_id: sid, status: 'tool_call', user_message_id: uuid(), label: 'crm_lookup' });
    await page.waitForSelector('.panel-chat .typing:not([hidden])');
    assert.match(await page.locator('.panel-chat .typing').innerText(), /crm_lookup/);
    const t0 = Date.now();
    await page.waitForSelector('.panel-chat .typing', { state: 'hidden', timeout: (TYPING_TIMEOUT_SECS + 5) * 1000 });
    assert.ok(Date.now() - t0 >= (TYPING_TIMEOUT_SECS - 1) * 1000, 'cleared by the inactivity timer, not earlier');
  });

  it('errors show inline with code and message; notices are subdued', async () => {
    const sid = await newCall();
    await post({ session_id: sid, status: 'errored', error_code: 'llm_failed', error_message: 'The model provider failed after retries.' });
    await post({ session_id: sid, status: 'notice', message_id: uuid(), reply_text: 'Still looking, one moment…' });
    const err = page.locator('#messages .msg-error');
    await err.waitFor();
    assert.match(await err.innerText(), /llm_failed/);
    assert.match(await err.innerText(), /The model provider failed after retries\./);
    const notice = page.locator('#messages .msg-notice');
    await notice.waitFor();
    assert.match(await notice.innerText(), /Still looking/);
    const [noticeSize, assistantSize] = await page.evaluate(() => [
      getComputedStyle(document.querySelector('#messages .msg-notice .msg-body')).fontSize,
      getComputedStyle(document.querySelector('.composer-input')).fontSize,
    ]);
    assert.ok(parseFloat(noticeSize) < parseFloat(assistantSize), 'notices are smaller than normal text');
  });

  it('a streamed draft grows in place and settles into the final message', async () => {
    const sid = await newCall();
    const task = uuid();
    const um = uuid();
    const s = (chunk) => post({ session_id: sid, status: 'stream', user_message_id: um, chunk }, task);
    await s({ type: 'start', messageId: task });
    await s({ type: 'text-start', id: 'p1' });
    await s({ type: 'text-delta', id: 'p1', delta: 'The budget ' });
    const draft = page.locator('#messages .msg-assistant[data-draft="true"]');
    await draft.waitFor();
    const id = await draft.getAttribute('data-id');
    await s({ type: 'text-delta', id: 'p1', delta: 'is **50k**' });
    await page.waitForFunction((id) => document.querySelector(`#messages [data-id="${id}"]`)?.textContent.includes('is 50k'), id);
    await page.screenshot({ path: shot('draft-streaming-light') });
    await s({ type: 'text-end', id: 'p1' });
    await s({ type: 'finish', finishReason: 'stop' });
    await post({ session_id: sid, status: 'message', message_id: uuid(), user_message_id: um, reply_text: 'The budget is **50k** for Q3.' }, task);
    const settled = page.locator(`#messages [data-id="${id}"]`);
    await page.waitForFunction((id) => document.querySelector(`#messages [data-id="${id}"]`)?.dataset.draft === 'false', id);
    assert.match(await settled.innerText(), /The budget is 50k for Q3\./);
    assert.equal(await page.locator('#messages .msg-assistant').count(), 1, 'the draft settled in place: one message');
    // Late chunks of a settled part change nothing.
    await s({ type: 'text-delta', id: 'p1', delta: ' (late)' });
    await sleep(300);
    assert.ok(!(await settled.innerText()).includes('(late)'));
  });

  it('a late message (earlier occurred_at) is inserted in order', async () => {
    const sid = await newCall();
    const now = Date.now();
    await say(sid, 'second', { occurred_at: new Date(now).toISOString() });
    await say(sid, 'first', { occurred_at: new Date(now - 60_000).toISOString() });
    await page.waitForFunction(() => document.querySelectorAll('#messages .msg-assistant').length === 2);
    const texts = await page.locator('#messages .msg-assistant .msg-body').allInnerTexts();
    assert.deepEqual(texts, ['first', 'second']);
  });

  it('XSS payloads in reply_text stay inert text', async () => {
    const sid = await newCall();
    const remote = [];
    const onReq = (r) => {
      if (/evil\.example/.test(r.url())) remote.push(r.url());
    };
    page.on('request', onReq);
    await page.evaluate(() => {
      window.__xss = 0;
    });
    const payload = [
      '<script>window.__xss = 1</script>',
      '<img src="https://evil.example/x.png" onerror="window.__xss = 2">',
      '<svg onload="window.__xss = 3"></svg>',
      '[click me](javascript:window.__xss=4)',
      '![tracker](https://evil.example/pixel.gif)',
      '<iframe src="https://evil.example/"></iframe>',
      '<a href="javascript:window.__xss=5">link</a>',
      '<style>body{display:none}</style>',
      '`<b>code</b>` and **<i>bold</i>**',
    ].join('\n\n');
    const mid = uuid();
    await post({ session_id: sid, status: 'message', message_id: mid, reply_text: payload });
    await row(mid).waitFor();
    await sleep(500);
    const r = row(mid);
    assert.equal(await r.locator('script, img, svg, iframe, style, b, i').count(), 0, 'no element from assistant HTML');
    const hrefs = await r.locator('a').evaluateAll((as) => as.map((a) => a.getAttribute('href')));
    for (const h of hrefs) assert.match(h, /^https?:\/\//, `only http(s) links: ${h}`);
    const text = await r.innerText();
    assert.ok(text.includes('<script>window.__xss = 1</script>'), 'HTML is shown as text');
    assert.equal(await page.evaluate(() => window.__xss), 0, 'no script ran');
    assert.deepEqual(dialogs, []);
    assert.deepEqual(remote, [], 'nothing loaded from the payload hosts');
    page.off('request', onReq);
    await page.screenshot({ path: shot('xss-inert-light') });
  });

  it('composer: Enter sends, Shift+Enter makes a new line; the user message shows', async () => {
    const sid = await newCall();
    const input = page.locator('.composer-input');
    await input.focus();
    await page.keyboard.type('line one');
    await page.keyboard.press('Shift+Enter');
    await page.keyboard.type('line two');
    assert.equal(await input.inputValue(), 'line one\nline two');
    await page.keyboard.press('Enter');
    const mine = page.locator('#messages .msg-user .msg-body');
    await mine.waitFor();
    assert.equal(await mine.innerText(), 'line one\nline two');
    // Cleared once the POST is answered, which may come after the message's own event.
    await page.waitForFunction(() => document.querySelector('.composer-input')?.value === '', null, { timeout: 15_000 });
    const msgs = (await api(ready, 'GET', `/api/sessions/${sid}/messages`)).json;
    assert.ok(msgs.some((m) => m.kind === 'user' && m.text === 'line one\nline two'), 'stored through POST /api/sessions/{id}/messages');
    await say(sid, 'Got it. **Two lines** received:\n\n- line one\n- line two');
    await page.waitForSelector('#messages .msg-assistant');
    await page.screenshot({ path: shot('chat-light') });
    await page.emulateMedia({ colorScheme: 'dark' });
    await page.screenshot({ path: shot('chat-dark') });
    await page.emulateMedia({ colorScheme: 'light' });
  });

  it('keyboard: Ctrl+1 … Ctrl+5 switch tabs, arrows move along the tab list', async () => {
    await page.keyboard.press('Control+2');
    assert.equal(await page.locator('#tab-insights').getAttribute('aria-selected'), 'true');
    assert.ok(await page.locator('#panel-insights').isVisible());
    await page.keyboard.press('Control+3');
    assert.equal(await page.locator('#tab-transcript').getAttribute('aria-selected'), 'true');
    assert.ok(await page.locator('#panel-transcript').isVisible());
    await page.keyboard.press('Control+4');
    assert.equal(await page.locator('#tab-history').getAttribute('aria-selected'), 'true');
    await page.keyboard.press('Control+5');
    assert.equal(await page.locator('#tab-settings').getAttribute('aria-selected'), 'true');
    await page.keyboard.press('Control+1');
    assert.equal(await page.locator('#tab-chat').getAttribute('aria-selected'), 'true');
    assert.ok(await page.locator('#panel-chat').isVisible());
    assert.equal(await page.evaluate(() => document.activeElement?.className), 'composer-input');
    await page.locator('#tab-chat').focus();
    await page.keyboard.press('ArrowRight');
    assert.equal(await page.locator('#tab-insights').getAttribute('aria-selected'), 'true');
    await page.keyboard.press('End');
    assert.equal(await page.locator('#tab-settings').getAttribute('aria-selected'), 'true');
    await page.keyboard.press('Control+1');
  });

  it('autoscroll does not fight a user who scrolled up: a "new messages" pill appears instead', async () => {
    const sid = await newCall();
    for (let i = 0; i < 30; i++) await say(sid, `Filler message ${i}\nwith a second line`);
    await page.waitForFunction(() => document.querySelector('#messages .vrow')?.getAttribute('aria-setsize') === '30');
    const scroller = page.locator('.msg-scroller');
    await scroller.evaluate((el) => (el.scrollTop = 0));
    await sleep(150);
    await say(sid, 'arrived while reading');
    await say(sid, 'and another');
    await page.waitForSelector('.new-pill:not([hidden])');
    assert.match(await page.locator('.new-pill').innerText(), /2 new messages/);
    assert.equal(await scroller.evaluate((el) => el.scrollTop), 0, 'the view stayed where the user was');
    await page.screenshot({ path: shot('new-messages-pill-light') });
    await page.locator('.new-pill').click();
    await page.waitForSelector('.new-pill', { state: 'hidden' });
    const atBottom = await scroller.evaluate((el) => el.scrollHeight - el.scrollTop - el.clientHeight < 40);
    assert.ok(atBottom, 'the pill jumps to the newest message');
    await say(sid, 'at the bottom now');
    await page.waitForFunction(() => document.querySelector('#messages').innerText.includes('at the bottom now'));
    assert.ok(await page.locator('.new-pill').isHidden(), 'no pill while following');
  });

  it('a dropped event stream resumes from its cursor without gaps or duplicates', async () => {
    const proxy = await startProxy(ready.ui_url);
    const p = await browser.context.newPage();
    try {
      await p.goto(`${proxy.url}#token=${encodeURIComponent(ready.ui_token)}`);
      await p.waitForSelector('.app[data-conn="live"]');
      const r = await api(ready, 'POST', '/api/calls', {});
      const sid = r.json.session_id;
      await p.waitForSelector(`.app[data-session="${sid}"]`);
      // A new call opens on the Call tab: this test reads the chat.
      await p.keyboard.press('Control+1');
      await say(sid, 'before the drop 0');
      await p.waitForFunction(() => document.querySelector('#messages')?.innerText.includes('before the drop 0'));
      const cursorBefore = Number(await p.locator('.app').getAttribute('data-cursor'));

      // Network drop: the stream is reset and new connections fail for a while.
      proxy.block(true);
      proxy.drop('reset');
      await p.waitForSelector('.app[data-conn="reconnecting"]');
      assert.match(await p.locator('.chip-conn').innerText(), /Reconnecting/);
      await p.screenshot({ path: shot('reconnecting-light') });
      const task = uuid();
      for (let i = 1; i <= 8; i++) await say(sid, `while down ${i}`);
      await post({ session_id: sid, status: 'stream', chunk: { type: 'text-start', id: 'd' } }, task);
      await post({ session_id: sid, status: 'stream', chunk: { type: 'text-delta', id: 'd', delta: 'draft made while down' } }, task);
      await post({ session_id: sid, status: 'message', message_id: uuid(), reply_text: 'draft settled while down' }, task);
      await sleep(800);
      proxy.block(false);
      await p.waitForSelector('.app[data-conn="live"]', { timeout: 15_000 });
      await p.waitForFunction(() => document.querySelector('#messages')?.innerText.includes('draft settled while down'));

      const resumed = proxy.eventRequests.filter((e) => e.lastEventId !== null || /after=/.test(e.url));
      assert.ok(resumed.length > 0, 'reconnected with Last-Event-ID / ?after=');
      const last = resumed[resumed.length - 1];
      assert.equal(Number(last.lastEventId ?? new URL(last.url, 'http://x').searchParams.get('after')), cursorBefore, 'resumed from the last cursor seen');

      // A clean end of stream (server closed it) is handled the same way. Nothing happened since,
      // so this resume asks for `after=<current cursor>`: the answer's head should come at once.
      const cursorAtClose = Number(await p.locator('.app').getAttribute('data-cursor'));
      const nReq = proxy.eventRequests.length;
      proxy.drop('end');
      const t0 = Date.now();
      let headMs = null;
      try {
        await p.waitForFunction(() => document.querySelector('.app')?.dataset.conn === 'live', null, { timeout: 5000 });
        headMs = Date.now() - t0;
      } catch {
        headMs = null;
      }
      await say(sid, 'after a clean close');
      await p.waitForFunction(() => document.querySelector('#messages')?.innerText.includes('after a clean close'), null, { timeout: 20_000 });
      await p.waitForSelector('.app[data-conn="live"]', { timeout: 20_000 });
      const again = proxy.eventRequests.slice(nReq);
      assert.ok(again.length > 0 && again.every((e) => Number(e.lastEventId) === cursorAtClose), 'resumed from the cursor after a clean close');

      const texts = await p.locator('#messages .msg-assistant .msg-body').allInnerTexts();
      const expected = ['before the drop 0', ...Array.from({ length: 8 }, (_, i) => `while down ${i + 1}`), 'draft settled while down', 'after a clean close'];
      assert.deepEqual(texts, expected, 'every message once, in order');
      assert.equal(await p.locator('#messages .msg-is-draft').count(), 0, 'the draft settled in place');
      assert.equal(await p.locator('#messages .vrow').first().getAttribute('aria-setsize'), String(expected.length));
      assert.ok(
        headMs !== null,
        `after a clean close with nothing new (resume with Last-Event-ID/?after=${cursorAtClose}), the UI was not live again within 5 s`,
      );
    } finally {
      await p.close();
      await proxy.close();
    }
  });

  it('Past calls: an ended call opens with its chat and insights, and the chat continues', async () => {
    const sidA = await newCall();
    await say(sidA, 'Reply in call A');
    await post({ session_id: `insights:${sidA}`, status: 'message', message_id: uuid(), reply_text: 'Insight from call A' });
    await page.waitForFunction(() => document.querySelector('#messages').innerText.includes('Reply in call A'));
    assert.equal((await api(ready, 'POST', `/api/calls/${sidA}/end`)).status, 200);
    const sidB = await newCall();
    assert.notEqual(sidA, sidB);

    await page.keyboard.press('Control+4');
    const item = page.locator(`#history [data-session-id="${sidA}"]`);
    await item.waitFor();
    await page.screenshot({ path: shot('past-calls-light') });
    await page.emulateMedia({ colorScheme: 'dark' });
    await page.screenshot({ path: shot('past-calls-dark') });
    await page.emulateMedia({ colorScheme: 'light' });
    await item.focus();
    await page.keyboard.press('Enter');
    await page.waitForSelector(`.app[data-session="${sidA}"]`);
    await page.waitForFunction(() => document.querySelector('#messages').innerText.includes('Reply in call A'));
    assert.match(await page.locator('.call-state').innerText(), /Past call/);
    assert.ok(await page.locator('#go-live').isVisible(), 'a way back to the live call');
    await page.keyboard.press('Control+2');
    await page.waitForFunction(() => document.querySelector('#insights').innerText.includes('Insight from call A'));
    await page.keyboard.press('Control+1');
    await page.keyboard.type('Follow-up after the call');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => document.querySelector('#messages').innerText.includes('Follow-up after the call'));
    const msgs = (await api(ready, 'GET', `/api/sessions/${sidA}/messages`)).json;
    assert.ok(msgs.some((m) => m.kind === 'user' && m.text === 'Follow-up after the call'));
    await say(sidA, 'Answer after the call');
    await page.waitForFunction(() => document.querySelector('#messages').innerText.includes('Answer after the call'));
    await page.locator('#go-live').click();
    await page.waitForSelector(`.app[data-session="${sidB}"]`);
  });

  it('a failed send keeps the text and shows the error inline', async () => {
    const sid = await newCall();
    const route = `**/api/sessions/${sid}/messages`;
    await page.route(route, (r) =>
      r.request().method() === 'POST'
        ? r.fulfill({ status: 503, contentType: 'application/json', body: JSON.stringify({ ok: false, error: 'storage_unavailable', message: 'the message could not be committed' }) })
        : r.continue(),
    );
    try {
      await page.locator('.composer-input').focus();
      await page.keyboard.type('will not go through');
      await page.keyboard.press('Enter');
      const err = page.locator('.composer-error');
      await err.waitFor();
      // In plain words (the disk may be full), not the code.
      assert.match(await err.innerText(), /could not save this: the disk may be full/);
      assert.doesNotMatch(await err.innerText(), /storage_unavailable/);
      assert.equal(await page.locator('.composer-input').inputValue(), 'will not go through', 'the text is kept');
    } finally {
      await page.unroute(route);
    }
    await page.keyboard.press('Enter');
    await page.waitForSelector('.composer-error', { state: 'hidden' });
    await page.waitForFunction(() => document.querySelector('#messages').innerText.includes('will not go through'));
  });

  it('a deleted session leaves the screen and the list', async () => {
    const chat = await api(ready, 'POST', '/api/sessions', { title: 'To be deleted' });
    const sid = chat.json.session_id;
    await say(sid, 'soon gone');
    await page.keyboard.press('Control+4');
    await page.locator(`#history [data-session-id="${sid}"]`).click();
    await page.waitForSelector(`.app[data-session="${sid}"]`);
    await page.waitForFunction(() => document.querySelector('#messages').innerText.includes('soon gone'));
    const del = await api(ready, 'DELETE', `/api/sessions/${sid}`);
    assert.equal(del.status, 200);
    await page.waitForFunction((sid) => document.querySelector('.app').dataset.session !== sid, sid);
    assert.ok(!(await page.locator('#messages').innerText()).includes('soon gone'));
    await page.keyboard.press('Control+4');
    await page.waitForSelector(`#history [data-session-id="${sid}"]`, { state: 'detached' });
    const late = await say(sid, 'after deletion');
    assert.deepEqual(late, { ok: true, ignored: true, reason: 'session_ended' });
    await page.keyboard.press('Control+1');
  });

  it('10,000 messages open and scroll without jank (virtualised list)', async () => {
    const N = 10_000;
    const chat = await api(ready, 'POST', '/api/sessions', { title: 'Long conversation' });
    assert.equal(chat.status, 201);
    const sid = chat.json.session_id;
    const t0 = Date.now();
    let next = 0;
    const worker = async () => {
      while (next < N) {
        const i = next++;
        const text = i % 10 === 0 ? `Message ${i}\n\n- point one\n- point **two**\n\n\`code ${i}\`` : `Message ${i}: ${'lorem ipsum '.repeat(1 + (i % 7))}`;
        const r = await callback(ready, uuid(), { session_id: sid, status: 'message', message_id: `long-${i}`, reply_text: text, occurred_at: new Date(t0 - (N - i) * 1000).toISOString() });
        assert.equal(r.status, 200);
      }
    };
    await Promise.all(Array.from({ length: 8 }, worker));
    console.log(`# posted ${N} callbacks in ${((Date.now() - t0) / 1000).toFixed(1)} s`);

    await page.reload();
    await page.waitForSelector('.app[data-conn="live"]');
    await page.keyboard.press('Control+4');
    const open0 = Date.now();
    await page.locator(`#history [data-session-id="${sid}"]`).click();
    // The chat opens on its newest page (older pages load while scrolling up).
    await page.waitForFunction(() => document.querySelector('#messages').innerText.includes('Message 9999'), null, { timeout: 30_000 });
    const openMs = Date.now() - open0;
    const rows = await page.locator('#messages .vrow').count();
    assert.ok(rows < 120, `only the rows near the viewport are in the DOM (${rows})`);

    // Scroll from the bottom to the top in big steps, one per frame, and time the frames.
    const stats = await page.evaluate(async () => {
      const el = document.querySelector('.msg-scroller');
      const long = [];
      const po = new PerformanceObserver((l) => long.push(...l.getEntries().map((e) => e.duration)));
      try {
        po.observe({ type: 'longtask', buffered: false });
      } catch {}
      const frames = [];
      let last = performance.now();
      for (let i = 0; i < 240 && el.scrollTop > 0; i++) {
        el.scrollTop = Math.max(0, el.scrollTop - 3000);
        await new Promise((r) => requestAnimationFrame(r));
        const now = performance.now();
        frames.push(now - last);
        last = now;
      }
      // A wheel-sized scroll too.
      for (let i = 0; i < 60; i++) {
        el.scrollTop += 120;
        await new Promise((r) => requestAnimationFrame(r));
        const now = performance.now();
        frames.push(now - last);
        last = now;
      }
      po.disconnect();
      return { frames, long, top: el.scrollTop, rows: document.querySelectorAll('#messages .vrow').length, first: document.querySelector('#messages .vrow')?.innerText ?? '' };
    });
    const sorted = [...stats.frames].sort((a, b) => a - b);
    const p50 = percentile(sorted, 50);
    const p95 = percentile(sorted, 95);
    const max = sorted[sorted.length - 1];
    console.log(`# 10k messages: open ${openMs} ms; scroll frames p50 ${p50.toFixed(1)} ms, p95 ${p95.toFixed(1)} ms, max ${max.toFixed(1)} ms; long tasks ${stats.long.length}; rows in DOM ${stats.rows}`);
    assert.ok(openMs < 5000, `opening 10k messages took ${openMs} ms`);
    assert.ok(p95 < 50, `scroll frame p95 ${p95.toFixed(1)} ms`);
    assert.ok(stats.rows < 120, `rows in DOM while scrolling: ${stats.rows}`);
    await page.screenshot({ path: shot('long-conversation-light') });
    await page.locator('.msg-scroller').focus();
    await page.keyboard.press('End');
    await page.keyboard.press('Control+1');
  });

  it('Settings: callback URL and token with copy buttons; rotating asks first and the old token stops working', async () => {
    await page.keyboard.press('Control+5');
    await page.waitForFunction((u) => document.querySelector('#setting-callback-url')?.textContent === u, ready.callback_url);
    assert.notEqual(await page.locator('#setting-callback-token').innerText(), ready.callback_token, 'token masked by default');
    assert.equal(await page.locator('#setting-data-dir').innerText(), ready.data_dir);
    assert.ok(await page.locator('#settings-assistant').innerText().then((t) => /Not configured/.test(t)));
    assert.equal(await page.locator('#tunnel-settings-status').innerText(), 'Off');
    await page.getByRole('button', { name: 'Show' }).click();
    assert.equal(await page.locator('#setting-callback-token').innerText(), ready.callback_token);
    await page.getByRole('button', { name: 'Hide' }).click();
    await page.screenshot({ path: shot('settings-light') });
    await page.emulateMedia({ colorScheme: 'dark' });
    await page.screenshot({ path: shot('settings-dark') });
    await page.emulateMedia({ colorScheme: 'light' });

    const old = ready.callback_token;
    await page.getByRole('button', { name: 'Rotate…' }).click();
    const confirm = page.getByRole('group', { name: 'Confirm token rotation' });
    assert.ok(await confirm.isVisible(), 'rotation asks for confirmation');
    await page.screenshot({ path: shot('settings-rotate-confirm-light') });
    await page.getByRole('button', { name: 'Cancel' }).click();
    assert.ok(await confirm.isHidden());
    const stillOk = await callback(ready, uuid(), { session_id: 'nobody', status: 'typing' });
    assert.equal(stillOk.status, 200, 'cancel keeps the token');

    await page.getByRole('button', { name: 'Rotate…' }).click();
    await page.locator('#confirm-rotate').click();
    await page.waitForFunction((old) => {
      const t = document.querySelector('#setting-callback-token')?.textContent ?? '';
      return t && !t.startsWith('•') && t !== old;
    }, old);
    const fresh = await page.locator('#setting-callback-token').innerText();
    const denied = await callback(ready, uuid(), { session_id: 'nobody', status: 'typing' }, { token: old });
    assert.equal(denied.status, 401, 'the old token stops working at once');
    assert.equal(denied.json?.error, 'unauthorized');
    ready.callback_token = fresh;
    const ok = await callback(ready, uuid(), { session_id: 'nobody', status: 'typing' });
    assert.equal(ok.status, 200, 'the new token works');
    const settings = (await api(ready, 'GET', '/api/settings')).json;
    assert.equal(settings.callback_token, fresh);
    await page.keyboard.press('Control+1');
  });

  it('no page errors and no dialogs during the run', () => {
    assert.deepEqual(pageErrors, []);
    assert.deepEqual(dialogs, []);
  });
});
