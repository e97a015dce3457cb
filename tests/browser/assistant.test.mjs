// Browser tests of the assistant link in the web UI, against the real app in headless mode and a
// small stand-in assistant on loopback (harness.mjs: startFakeAssistant) — it only plays the
// assistant's side of `POST /v1/incoming` so the UI can be seen handling each answer; the real
// peers are tested in tests/interop/.
//
//   cd ui && npm run build && npm run test:e2e
//
// Covered: Settings → Assistant (field errors from the API, save, test, remove with a
// confirmation), the call bar's status chip (online, auth failed, misconfigured, unreachable), the delivery state of user messages (sending → sent,
// "Not delivered yet", failed with a working Retry), the Transcript tab (live turns, a failed turn's
// Retry, a turn added by hand, the initial load) and "Summarise this call".

import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { api, ensureArtifacts, launchBrowser, openUi, skipReason, startApp, startFakeAssistant } from './harness.mjs';

const reason = skipReason();
if (reason && process.env.SW_E2E_REQUIRE === '1') throw new Error(`browser tests cannot run: ${reason}`);
if (reason) console.log(`# SKIP browser tests: ${reason}`);

const shot = (name) => path.join(ensureArtifacts(), `${name}.png`);
const RELAY_TOKEN = 'fake-relay-token-0123456789abcdef';

describe('web UI: the assistant link', { skip: reason ?? false }, () => {
  let app;
  let ready;
  let browser;
  let page;
  let fake;
  const pageErrors = [];
  const dialogs = [];

  before(async () => {
    app = await startApp();
    ready = app.ready;
    // Fail fast, with a clear message, when the binary predates the assistant link.
    const probe = await api(ready, 'GET', '/api/assistant');
    assert.equal(probe.status, 200, `GET /api/assistant → ${probe.status}: is ${app.label} older than the assistant link? Rebuild it.`);
    fake = await startFakeAssistant({ token: RELAY_TOKEN });
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
    await fake?.close();
    const exit = await app?.stop();
    if (app) {
      assert.deepEqual(app.extraStdout(), [], 'the app printed more than the one ready line on stdout');
      assert.deepEqual(exit, { code: 0, signal: null }, `the app should exit 0 on SIGTERM; stderr tail:\n${app.stderr().slice(-2000)}`);
    }
  });

  // ---- helpers ---------------------------------------------------------------------------

  async function newCall(title) {
    const r = await api(ready, 'POST', '/api/calls', title ? { title } : {});
    assert.equal(r.status, 201, `POST /api/calls → ${r.status} ${JSON.stringify(r.json)}`);
    await page.waitForSelector(`.app[data-session="${r.json.session_id}"]`, { timeout: 5000 });
    await page.keyboard.press('Control+1');
    return r.json.session_id;
  }

  async function sendFromComposer(text) {
    await page.keyboard.press('Control+1');
    await page.locator('.composer-input').fill(text);
    await page.keyboard.press('Enter');
    const row = page.locator('#messages .msg-user', { hasText: text });
    await row.waitFor();
    return row;
  }

  const chip = () => page.locator('#assistant-status');
  const openAdvanced = async () => {
    const adv = page.locator('#assistant-advanced');
    if (!(await adv.evaluate((d) => d.open))) await page.locator('#assistant-advanced > summary').click();
  };
  const waitChip = (text, timeout = 15_000) =>
    page.waitForFunction((t) => document.querySelector('#assistant-status')?.textContent === t, text, { timeout });
  const chatIncoming = (text) => fake.incoming.filter((b) => b.reason === 'chat_message' && b.payload?.text === text);
  const reject400 = (pred) =>
    fake.respond((b) => (pred(b) ? { status: 400, body: { ok: false, error: 'invalid_payload', message: 'the fake assistant refuses this one' } } : null));

  async function shots(name) {
    await page.screenshot({ path: shot(`${name}-light`) });
    await page.emulateMedia({ colorScheme: 'dark' });
    await page.screenshot({ path: shot(`${name}-dark`) });
    await page.emulateMedia({ colorScheme: 'light' });
  }

  // ---- tests --------------------------------------------------------------------------------

  it('call bar: the assistant chip says "not configured", the tunnel chip "off"', async () => {
    assert.equal(await chip().innerText(), 'Assistant: not configured');
    assert.match(await chip().getAttribute('title'), /No assistant is configured|Settings/);
    const tunnel = page.locator('#tunnel-status');
    assert.equal(await tunnel.innerText(), 'Tunnel: off');
    assert.match(await tunnel.getAttribute('title'), /No tunnel/);
    // The chip opens Settings → Assistant link.
    await chip().click();
    assert.equal(await page.locator('#tab-settings').getAttribute('aria-selected'), 'true');
    await page.locator('#settings-assistant').waitFor();
    assert.equal(await page.locator('#assistant-settings-status').innerText(), 'Not configured');
    assert.equal(await page.locator('#assistant-token-state').innerText(), 'not set');
    await page.waitForFunction((u) => document.querySelector('#assistant-callback-url')?.textContent === u, ready.callback_url);
    // The kind/provider picker comes from GET /api/providers: the direct relay is picked, its
    // providers list their install command, steps and tested versions; the other kinds can be picked.
    await page.locator('#assistant-providers [data-provider="hermes-adapter"]').waitFor();
    assert.equal(await page.locator('#assistant-kind-incoming').isChecked(), true);
    assert.equal(await page.locator('#assistant-kind-byo').isDisabled(), false);
    assert.doesNotMatch(await page.locator('[data-kind="byo"]').innerText(), /coming/);
    const hermes = page.locator('[data-provider="hermes-adapter"]');
    assert.match(await hermes.locator('code').innerText(), /hermes-platform-stagewhisper/);
    assert.match(await hermes.innerText(), /Tested with hermes-platform-stagewhisper 0\.43\.0/);
    assert.equal(await hermes.locator('button', { hasText: 'Copy' }).count(), 1);
    assert.match(await page.locator('[data-provider="openclaw-channel-http"]').innerText(), /Known bad with Direct relay: openclaw 2026\.9\.x/);
    const providers = (await api(ready, 'GET', '/api/providers')).json;
    assert.equal(providers.active_kind, 'incoming');
    assert.equal(await page.locator('#assistant-providers .provider').count(), providers.providers.filter((p) => p.kind === 'incoming').length);
    await page.keyboard.press('Control+1');
  });

  it('Settings → Assistant: API errors show next to their field; saving links the assistant and the chip turns online', async () => {
    await page.keyboard.press('Control+5');
    const baseUrl = page.getByLabel('Base URL', { exact: true });
    const token = page.getByLabel('Relay token', { exact: true });
    // Not loopback: the API's 400 invalid_base_url goes next to the URL.
    await baseUrl.fill('http://example.com:8644');
    await token.fill(RELAY_TOKEN);
    await page.locator('#assistant-save').click();
    const urlErr = page.locator('#assistant-base-url-error');
    await urlErr.waitFor();
    assert.match(await urlErr.innerText(), /loopback/);
    assert.equal(await baseUrl.getAttribute('aria-invalid'), 'true');
    assert.equal(await page.evaluate(() => document.activeElement?.id), 'assistant-base-url', 'focus goes to the field');
    // Too short a token: invalid_relay_token next to the token.
    await baseUrl.fill(fake.url);
    assert.equal(await baseUrl.getAttribute('aria-invalid'), null, 'editing clears the error');
    await token.fill('short');
    await page.locator('#assistant-save').click();
    const tokErr = page.locator('#assistant-relay-token-error');
    await tokErr.waitFor();
    assert.match(await tokErr.innerText(), /relay token/i);
    await shots('settings-assistant-error');
    assert.equal((await api(ready, 'GET', '/api/assistant')).json.configured, false, 'nothing saved yet');

    // The right values: saved, checked, online.
    await token.fill(RELAY_TOKEN);
    // The replies mode and the prelude are folded under "Advanced".
    await openAdvanced();
    await page.locator('#assistant-mode-auto').check();
    await page.locator('#assistant-save').click();
    await page.waitForFunction(() => /^Saved\. Online/.test(document.querySelector('#assistant-result')?.textContent ?? ''));
    await waitChip('Assistant: online');
    assert.match(await chip().getAttribute('title'), new RegExp(`Connected to the assistant at ${fake.url.replace(/[.]/g, '\\.')}`));
    assert.equal(await page.locator('#assistant-settings-status').innerText(), 'Online');
    assert.equal(await page.locator('#assistant-token-state').innerText(), 'set');
    assert.equal(await token.inputValue(), '', 'the token is write-only: the field is emptied');
    assert.match(await token.getAttribute('placeholder'), /leave empty to keep/);
    assert.equal(await baseUrl.inputValue(), fake.url);
    assert.match(await page.locator('#assistant-detail').innerText(), /Connected/);
    // How replies travel is folded under "Technical details" (not first-screen words).
    await page.locator('#assistant-tech > summary').click();
    assert.equal(await page.locator('#assistant-events-support').innerText(), 'Not offered', 'the fake has no GET /v1/events (404)');
    assert.match(await page.locator('#assistant-events').innerText(), /404/);
    assert.match(await page.locator('#assistant-delivery').innerText(), /callback URL/);
    assert.equal(await page.locator('#assistant-callback-url').innerText(), ready.callback_url);
    const saved = (await api(ready, 'GET', '/api/assistant')).json;
    assert.equal(saved.status, 'online');
    assert.equal(saved.kind, 'incoming');
    assert.equal(saved.base_url, fake.url);
    // The fake reports adapter version fake-0.1, which is not a tested one: Settings says so.
    assert.match(saved.warning ?? '', /fake-0\.1/);
    assert.match(await page.locator('#assistant-warning').innerText(), /not tested with/);
    assert.equal(saved.prelude_is_default, true, 'an untouched prelude stays the default');
    assert.ok(!JSON.stringify(saved).includes(RELAY_TOKEN), 'the relay token is never returned');

    // Test connection.
    await page.locator('#assistant-test').click();
    await page.waitForFunction(() => /^Checked: Online/.test(document.querySelector('#assistant-result')?.textContent ?? ''));
    await shots('settings-assistant');
  });

  it('Settings → Assistant: the prelude is saved, and "Reset to default" sends prelude: null', async () => {
    await page.keyboard.press('Control+5');
    await openAdvanced();
    const prelude = page.getByLabel('Prelude', { exact: true });
    await prelude.fill('Coach me through {title}. One line per turn, or none.');
    assert.match(await page.locator('#assistant-prelude-state').innerText(), /not saved/);
    await page.locator('#assistant-save').click();
    await page.waitForFunction(() => /^Saved\./.test(document.querySelector('#assistant-result')?.textContent ?? ''));
    let a = (await api(ready, 'GET', '/api/assistant')).json;
    assert.equal(a.prelude, 'Coach me through {title}. One line per turn, or none.');
    assert.equal(a.prelude_is_default, false);
    assert.equal(await page.locator('#assistant-prelude-state').innerText(), 'Using your own prelude.');

    await page.locator('#assistant-prelude-reset').click();
    assert.equal(await prelude.inputValue(), a.default_prelude, 'the default prelude is shown');
    await page.locator('#assistant-save').click();
    await page.waitForFunction(() => document.querySelector('#assistant-prelude-state')?.textContent === 'Using the default prelude.');
    a = (await api(ready, 'GET', '/api/assistant')).json;
    assert.equal(a.prelude_is_default, true);
    assert.equal(a.status, 'online');
    await page.keyboard.press('Control+1');
  });

  it('a user message shows sending… then sent', async () => {
    const sid = await newCall('Delivery');
    fake.hold((b) => b.reason === 'chat_message');
    let row;
    try {
      row = await sendFromComposer('How long do we have?');
      assert.equal(await row.getAttribute('data-delivery'), 'pending');
      assert.equal(await row.locator('.msg-delivery').innerText(), 'sending…');
      // The fake has it, but has not answered yet.
      const t0 = Date.now();
      while (chatIncoming('How long do we have?').length === 0 && Date.now() - t0 < 10_000) await new Promise((r) => setTimeout(r, 50));
      assert.equal(await row.getAttribute('data-delivery'), 'pending', 'still pending until the assistant answers');
    } finally {
      fake.release();
    }
    await page.waitForSelector('#messages .msg-user[data-delivery="sent"]', { timeout: 15_000 });
    assert.match(await row.locator('.msg-delivery').innerText(), /sent/);
    const got = chatIncoming('How long do we have?');
    assert.equal(got.length, 1);
    assert.equal(got[0].session_id, sid);
    assert.ok(got[0].payload.user_message_id, 'sent with the message id');
    assert.equal(got[0].callback?.url, ready.callback_url, 'with the callback the assistant will use');
    const msgs = (await api(ready, 'GET', `/api/sessions/${sid}/messages`)).json;
    assert.equal(msgs.find((m) => m.text === 'How long do we have?').delivery, 'sent');
  });

  it('a 5xx keeps a message pending with "Not delivered yet: …" and the chip unreachable; it is sent once the assistant recovers', async () => {
    await newCall('Busy assistant');
    fake.respond((b) => (b.reason === 'chat_message' ? { status: 503, body: { ok: false, error: 'overloaded', message: 'try later' } } : null));
    let row;
    try {
      row = await sendFromComposer('Is the budget approved?');
      await row.locator('.delivery-note').waitFor({ timeout: 15_000 });
      assert.match(await row.locator('.delivery-note').innerText(), /^Not delivered yet: /);
      assert.doesNotMatch(await row.locator('.delivery-note').innerText(), /Not delivered yet:.*Not delivered yet/, 'said once');
      assert.equal(await row.getAttribute('data-delivery'), 'pending');
      assert.equal(await row.locator('.msg-delivery').innerText(), 'sending…', 'on its way (a link is configured), not merely queued');
      assert.equal(await row.locator('.delivery-retry').count(), 0, 'no Retry button while the app retries by itself');
      await waitChip('Assistant: unreachable', 20_000);
      await page.screenshot({ path: shot('chat-not-delivered-yet-light') });
    } finally {
      fake.respond(null);
    }
    await page.waitForSelector('#messages .msg-user[data-delivery="sent"]', { timeout: 40_000 });
    assert.equal(await row.locator('.delivery-note').count(), 0, 'the note goes once it is sent');
    await waitChip('Assistant: online', 20_000);
  });

  it('a 4xx from the assistant fails the message with its reason; Retry sends it again under a new task id', async () => {
    const sid = await newCall('Refusal');
    reject400((b) => b.reason === 'chat_message');
    const text = 'Summarise the pricing objection';
    const row = await sendFromComposer(text);
    await page.waitForSelector('#messages .msg-user[data-delivery="failed"]', { timeout: 15_000 });
    assert.equal(await row.locator('.msg-delivery').innerText(), 'failed');
    const note = row.locator('.delivery-note');
    assert.match(await note.innerText(), /the fake assistant refuses this one/);
    const retry = row.getByRole('button', { name: 'Retry sending this message' });
    assert.ok(await retry.isVisible());
    let m = (await api(ready, 'GET', `/api/sessions/${sid}/messages`)).json.find((x) => x.text === text);
    assert.equal(m.delivery, 'failed');
    assert.equal(m.delivery_error.code, 'assistant_rejected');
    await shots('chat-failed');
    // Settings shows the last error.
    await page.keyboard.press('Control+5');
    // In words; the code for support in the tooltip.
    await page.waitForSelector('#assistant-last-error[data-error-code="assistant_rejected"]', { timeout: 10_000 });
    assert.doesNotMatch(await page.locator('#assistant-last-error').innerText(), /assistant_rejected/);
    assert.match(await page.locator('#assistant-last-error').getAttribute('title'), /Error code: assistant_rejected/);
    await page.keyboard.press('Control+1');

    fake.respond(null);
    await row.getByRole('button', { name: 'Retry sending this message' }).click();
    await page.waitForSelector('#messages .msg-user[data-delivery="sent"]', { timeout: 15_000 });
    assert.equal(await row.locator('.delivery-retry').count(), 0);
    const sends = chatIncoming(text);
    assert.equal(sends.length, 2, 'sent twice: refused, then retried');
    assert.notEqual(sends[0].task_id, sends[1].task_id, 'the retry has a new task id');
    m = (await api(ready, 'GET', `/api/sessions/${sid}/messages`)).json.find((x) => x.text === text);
    assert.equal(m.delivery, 'sent');
  });

  it('Transcript tab: turns posted to the call show live with speaker and time; a failed turn has a Retry; one can be added by hand', async () => {
    const sid = await newCall('Transcript call');
    await page.keyboard.press('Control+3');
    assert.equal(await page.locator('#tab-transcript').getAttribute('aria-selected'), 'true');
    await page.waitForFunction(() => /No transcript yet/.test(document.querySelector('#panel-transcript')?.innerText ?? ''));

    const post = async (speaker, text) => {
      const r = await api(ready, 'POST', `/api/calls/${sid}/transcript`, { speaker, text, is_final: true });
      assert.equal(r.status, 201, `POST transcript → ${r.status} ${JSON.stringify(r.json)}`);
      return r.json;
    };
    await post('Dana', 'Thanks for making the time today.');
    await post('Me', 'Happy to. Shall we start with the timeline?');
    const interim = await api(ready, 'POST', `/api/calls/${sid}/transcript`, { speaker: 'Dana', text: 'We were hop', is_final: false });
    assert.equal(interim.status, 202);
    await post('Dana', 'Sure. We need the pilot live by May.');
    const turns = page.locator('#transcript .turn');
    await page.waitForFunction(() => document.querySelectorAll('#transcript .turn').length === 3);
    assert.deepEqual(await turns.locator('.turn-speaker-name').allInnerTexts(), ['Dana', 'Me', 'Dana']);
    assert.match(await turns.nth(2).locator('.turn-words').innerText(), /pilot live by May/);
    // The clock time, as in the chat; the time into the call on hover.
    assert.match(await turns.nth(0).locator('.turn-offset').innerText(), /^\d{1,2}:\d\d/);
    assert.match(await turns.nth(0).locator('.turn-offset').getAttribute('title'), /^\d+:\d\d into the call · /);
    assert.ok(!(await page.locator('#transcript').innerText()).includes('We were hop'), 'interim turns are not shown');
    await page.waitForFunction(() => [...document.querySelectorAll('#transcript .turn')].every((li) => li.dataset.delivery === 'sent'), null, {
      timeout: 15_000,
    });
    const chunks = fake.incoming.filter((b) => b.reason === 'transcript_chunk' && b.session_id === `insights:${sid}`);
    assert.deepEqual(
      chunks.map((b) => b.payload.text),
      ['Dana: Thanks for making the time today.', 'Me: Happy to. Shall we start with the timeline?', 'Dana: Sure. We need the pilot live by May.'],
    );

    // A refused turn: failed, with a Retry that works.
    reject400((b) => b.reason === 'transcript_chunk');
    const bad = await post('Dana', 'Budget is 50k, maybe 60k.');
    const badRow = page.locator(`#transcript .turn[data-id="${bad.id}"]`);
    await page.waitForSelector(`#transcript .turn[data-id="${bad.id}"][data-delivery="failed"]`, { timeout: 15_000 });
    assert.match(await badRow.locator('.delivery-note').innerText(), /the fake assistant refuses this one/);
    await shots('transcript-failed');
    fake.respond(null);
    await badRow.getByRole('button', { name: 'Retry sending this turn' }).click();
    await page.waitForSelector(`#transcript .turn[data-id="${bad.id}"][data-delivery="sent"]`, { timeout: 15_000 });

    // By hand.
    await page.getByLabel('Speaker (optional)', { exact: true }).fill('Me');
    await page.getByLabel('Transcript turn', { exact: true }).fill('Noted: 50 to 60k.');
    await page.keyboard.press('Enter');
    await page.waitForFunction(() => document.querySelectorAll('#transcript .turn').length === 5);
    assert.match(await turns.nth(4).innerText(), /Me\s*:?\s*Noted: 50 to 60k\./);
    // The field empties once the POST is answered, which may come after the turn's own event.
    await page.waitForFunction(() => document.querySelector('#turn-text')?.value === '', null, { timeout: 15_000 });
    const stored = (await api(ready, 'GET', `/api/calls/${sid}/transcript`)).json;
    assert.equal(stored.length, 5);
    assert.equal(stored[4].speaker, 'Me');
    await page.waitForFunction(() => [...document.querySelectorAll('#transcript .turn')].every((li) => li.dataset.delivery === 'sent'), null, {
      timeout: 15_000,
    });
    await shots('transcript');

    // A fresh page loads the transcript through GET /api/calls/{id}/transcript.
    await page.reload();
    await page.waitForSelector('.app[data-conn="live"]');
    await page.waitForSelector(`.app[data-session="${sid}"]`);
    await page.keyboard.press('Control+3');
    await page.waitForFunction(() => document.querySelectorAll('#transcript .turn').length === 5);
    assert.deepEqual(
      await page.locator('#transcript .turn .turn-words').allInnerTexts(),
      stored.map((t) => t.text),
    );
    await page.keyboard.press('Control+1');
  });

  it('Summarise: off (with why) for a call without a transcript; after a call with one, it asks the assistant in the chat', async () => {
    // No transcript.
    const empty = await newCall('Silent call');
    assert.equal((await api(ready, 'POST', `/api/calls/${empty}/end`)).status, 200);
    const btn = page.locator('#summarise-call');
    await btn.waitFor();
    await page.waitForFunction(() => document.querySelector('#summarise-call')?.disabled === true);
    assert.match(await page.locator('#summarise-call-why').textContent(), /no transcript/);
    assert.equal(await page.locator('#summarise-call').innerText(), 'Nothing to summarise');
    assert.equal((await api(ready, 'POST', `/api/calls/${empty}/summarise`)).json.error, 'no_transcript');

    // The UI did not know (the transcript did not load): the app's 409 no_transcript turns it off.
    const route = `**/api/calls/${empty}/transcript*`; // with its page parameters
    let failOnce = true;
    await page.route(route, (r) => {
      if (failOnce && r.request().method() === 'GET') {
        failOnce = false;
        return r.fulfill({ status: 503, contentType: 'application/json', body: '{"ok":false,"error":"storage_unavailable","message":"x"}' });
      }
      return r.continue();
    });
    try {
      await page.reload();
      await page.waitForSelector('.app[data-conn="live"]');
      await page.keyboard.press('Control+4');
      await page.locator(`#history [data-session-id="${empty}"]`).click();
      await page.waitForSelector(`.app[data-session="${empty}"]`);
      await page.waitForFunction(() => document.querySelector('#summarise-call')?.disabled === false);
      await page.locator('#summarise-call').click();
      await page.waitForFunction(() => document.querySelector('#summarise-call')?.disabled === true);
      assert.match(await page.locator('#summarise-call-why').textContent(), /no transcript/);
    assert.equal(await page.locator('#summarise-call').innerText(), 'Nothing to summarise');
      assert.ok(await page.locator('.bar-error').isHidden(), 'no_transcript is explained, not shown as an error');
    } finally {
      await page.unroute(route);
    }
    await page.screenshot({ path: shot('summarise-no-transcript-light') });

    // A call with a transcript.
    const sid = await newCall('Pricing call');
    for (const [speaker, text] of [
      ['Dana', 'We can do 50k if the pilot starts in May.'],
      ['Me', 'May works. Who signs off?'],
      ['Dana', 'Our CFO, next Tuesday.'],
    ]) {
      assert.equal((await api(ready, 'POST', `/api/calls/${sid}/transcript`, { speaker, text })).status, 201);
    }
    await page.locator('#end-call').click();
    await page.locator('#confirm-end-call').click();
    const sum = page.locator('#summarise-call');
    await sum.waitFor();
    await page.waitForFunction(() => document.querySelector('#summarise-call')?.disabled === false);
    await page.screenshot({ path: shot('summarise-call-light') });
    await sum.click();
    assert.equal(await page.locator('#tab-chat').getAttribute('aria-selected'), 'true', 'the chat shows the request');
    const req = page.locator('#messages .msg-user', { hasText: 'summarise' });
    await req.waitFor();
    await page.waitForSelector('#messages .msg-user[data-delivery="sent"]', { timeout: 15_000 });
    const sent = fake.incoming.filter((b) => b.reason === 'chat_message' && b.session_id === sid);
    assert.equal(sent.length, 1);
    assert.match(sent[0].payload.text, /summari[sz]e/i);
    assert.match(sent[0].payload.text, /Dana: Our CFO, next Tuesday\./, 'the transcript goes along');
    await shots('summarise-sent');
  });

  it('the chip follows the link: auth failed, misconfigured, unreachable — with the detail as its tooltip', async () => {
    await page.keyboard.press('Control+5');
    const baseUrl = page.getByLabel('Base URL', { exact: true });
    const token = page.getByLabel('Relay token', { exact: true });
    const save = async () => {
      await page.locator('#assistant-save').click();
      await page.waitForFunction(() => /^Saved\./.test(document.querySelector('#assistant-result')?.textContent ?? ''));
    };
    // A wrong token: the fake answers 401 to the ping.
    await token.fill('not-the-right-token-at-all');
    await save();
    await waitChip('Assistant: auth failed');
    assert.match(await chip().getAttribute('title'), /token/i);
    assert.equal(await page.locator('#assistant-settings-status').innerText(), 'Auth failed');
    await page.screenshot({ path: shot('settings-assistant-auth-failed-light') });
    // Not an assistant URL: 404.
    await baseUrl.fill(`${fake.url}/not-here`);
    await token.fill(RELAY_TOKEN);
    await save();
    await waitChip('Assistant: misconfigured');
    assert.match(await chip().getAttribute('title'), /404/);
    // Nobody listening.
    await baseUrl.fill('http://127.0.0.1:1');
    await save();
    await waitChip('Assistant: unreachable');
    assert.match(await chip().getAttribute('title'), /connect/i);
    await page.keyboard.press('Control+1');
    await page.screenshot({ path: shot('chip-unreachable-light') });
    // Back to the fake.
    await page.keyboard.press('Control+5');
    await baseUrl.fill(fake.url);
    await save();
    await waitChip('Assistant: online');
    await page.keyboard.press('Control+1');
  });

  it('Remove asks first; then the chip says not configured and new messages are queued', async () => {
    await page.keyboard.press('Control+5');
    const remove = page.locator('#assistant-remove');
    await remove.click();
    const confirm = page.getByRole('group', { name: 'Confirm removing the assistant link' });
    assert.ok(await confirm.isVisible());
    await page.screenshot({ path: shot('settings-assistant-remove-confirm-light') });
    await page.getByRole('button', { name: 'Cancel' }).last().click();
    assert.ok(await confirm.isHidden());
    assert.equal((await api(ready, 'GET', '/api/assistant')).json.configured, true, 'cancel keeps the link');

    await remove.click();
    await page.locator('#assistant-confirm-remove').click();
    await waitChip('Assistant: not configured');
    // The chip follows the link's event; the form is emptied once the DELETE is answered.
    await page.waitForFunction(() => document.querySelector('#assistant-result')?.textContent === 'The assistant link is removed.');
    assert.equal(await page.locator('#assistant-settings-status').innerText(), 'Not configured');
    assert.equal(await page.getByLabel('Base URL', { exact: true }).inputValue(), '');
    assert.equal(await page.locator('#assistant-token-state').innerText(), 'not set');
    const a = (await api(ready, 'GET', '/api/assistant')).json;
    assert.equal(a.configured, false);
    assert.equal(a.status, 'not_configured');

    await newCall('After removal');
    const row = await sendFromComposer('Anyone there?');
    assert.equal(await row.locator('.msg-delivery').innerText(), 'queued: no assistant connected');
    assert.match(await row.locator('.msg-delivery').getAttribute('title'), /No assistant is connected/);
    // The chat says so above the composer, with the way to fix it.
    assert.match(await page.locator('#chat-no-assistant').innerText(), /nothing will answer/);
  });

  it('no page errors and no dialogs during the run', () => {
    assert.deepEqual(pageErrors, []);
    assert.deepEqual(dialogs, []);
  });
});
