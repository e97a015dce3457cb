// The live call as one view (issue: transcript and insights together, an overlay that keeps the
// answer in sight, states a person can read at a glance), against the real headless app in
// Chromium, at 1280 and at 760 px wide:
//
// 1. Start call lands on the Call tab: the transcript and the insights side by side (stacked at
//    760 px), both texts inside the viewport; a question asked in its composer and the assistant's
//    answer stay pinned in view; after the call the tab is its review (summary, chat, transcript).
// 2. The overlay: after six insights its latest answer is inside its viewport; closed and opened
//    again, the question and the answer are still there; the assistant being down is said there.
// 3. Settings → Audio: an engine address where nothing listens is saved with "Saved, but the
//    server does not answer: …"; Test tries what is typed; the description follows the choice.
// 4. Hearing a call through a private PulseAudio with the transcription server down: one
//    sentence says it ("Transcription server not answering — 1 turn waiting, nothing lost."),
//    whole and inside the viewport; a transcript row for the waiting turn; Listen / Stop listening.
// 5. "Summarise this call": one short line in the chat, the transcript folded away, and no
//    search hit.
// 6. "Keep this call's audio": one switch under the composer while the call runs (off by
//    default), the app's setting for that call follows it; the review says what was kept.
//
// The assistant's answers are callbacks posted as an assistant would post them (no assistant
// process runs here). Screenshots: tests/artifacts/live-*.png.

import assert from 'node:assert/strict';
import net from 'node:net';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { api, audioRequired, audioSkipReason, callback, ensureArtifacts, launchBrowser, openUi, skipReason, startApp, startPulse, uuid } from './harness.mjs';

const reason = skipReason();
if (reason && process.env.SW_E2E_REQUIRE === '1') throw new Error(`browser tests cannot run: ${reason}`);
if (reason) console.log(`# SKIP live view browser tests: ${reason}`);
const audioReason = audioSkipReason();
if (!reason && audioReason && !audioRequired()) console.log(`# SKIP the failure state through PulseAudio: ${audioReason}`);

const WIDTHS = [1280, 760];
const HEIGHT = 800;
const shot = (name) => path.join(ensureArtifacts(), `live-${name}.png`);

/** A loopback port nothing listens on. */
async function closedPort() {
  const srv = net.createServer();
  await new Promise((r) => srv.listen(0, '127.0.0.1', r));
  const { port } = srv.address();
  await new Promise((r) => srv.close(r));
  return port;
}

/** Start call in the bar (without an assistant the bar asks first: "Start the call anyway"). */
async function startCall(page, title) {
  if (title) await page.fill('#call-title', title);
  await page.locator('#start-call').click();
  await page.waitForSelector('#warn-start-anyway, #elapsed', { timeout: 10_000 });
  const anyway = page.locator('#warn-start-anyway');
  if (await anyway.isVisible()) await anyway.click();
  await page.waitForSelector('#elapsed', { timeout: 10_000 });
  return page.evaluate(() => document.querySelector('.app')?.dataset.session);
}

async function endLiveCalls(ready) {
  for (const s of (await api(ready, 'GET', '/api/sessions')).json) {
    if (s.is_call && !s.ended_at) await api(ready, 'POST', `/api/calls/${s.session_id}/end`);
  }
}

/** Whether the element's whole box is inside the page's viewport (and not clipped inside it). */
async function inViewport(locator) {
  return locator.evaluate((el) => {
    const r = el.getBoundingClientRect();
    const inside = r.width > 0 && r.height > 0 && r.top >= 0 && r.left >= 0 && r.bottom <= window.innerHeight && r.right <= window.innerWidth;
    // Not hidden behind a scrolled-away part of a scroller: the point at its middle is it.
    const hit = document.elementFromPoint(r.left + Math.min(r.width / 2, 20), r.top + Math.min(r.height / 2, 8));
    return inside && !!hit && (hit === el || el.contains(hit) || hit.contains(el));
  });
}

/** An insight posted by "the assistant" to the call's insights session. */
async function insight(ready, sid, text) {
  const task = uuid();
  const r = await callback(ready, task, { task_id: task, session_id: `insights:${sid}`, status: 'message', message_id: uuid(), reply_text: text });
  assert.equal(r.status, 200, JSON.stringify(r.json));
}

/** The assistant's answer to the user message `messageId` in the call's chat. */
async function answer(ready, sid, messageId, text) {
  const task = uuid();
  const r = await callback(ready, task, { task_id: task, session_id: sid, status: 'message', message_id: uuid(), user_message_id: messageId, reply_text: text });
  assert.equal(r.status, 200, JSON.stringify(r.json));
}

/** The user message with this text in the call's chat (its `message_id`). */
async function asked(ready, sid, text) {
  for (let i = 0; i < 50; i++) {
    const m = (await api(ready, 'GET', `/api/sessions/${sid}/messages`)).json.find((x) => x.kind === 'user' && x.text === text);
    if (m) return m;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`no user message ${text}`);
}

describe('the live call as one view', { skip: reason ?? false }, () => {
  let app;
  let ready;
  const browsers = [];
  const pageErrors = [];

  before(async () => {
    app = await startApp();
    ready = app.ready;
  });

  after(async () => {
    for (const b of browsers) await b.close();
    const exit = await app?.stop();
    if (app) assert.deepEqual(exit, { code: 0, signal: null }, `stderr tail:\n${app.stderr().slice(-2000)}`);
    assert.deepEqual(pageErrors, [], 'no errors in the page');
  });

  for (const width of WIDTHS) {
    it(`call start shows the transcript and the insights together, the answer pinned (${width} px)`, async () => {
      await endLiveCalls(ready);
      const browser = await launchBrowser({ viewport: { width, height: HEIGHT } });
      browsers.push(browser);
      // The browser overlay opens with the call (a popup of its own).
      const popups = [];
      browser.context.on('page', (p) => popups.push(p));
      const page = await openUi(browser.context, ready);
      page.on('pageerror', (e) => pageErrors.push(String(e)));
      const sid = await startCall(page, `Renewal with Acme (${width})`);
      assert.ok(sid);
      assert.equal(await page.locator('#tab-call').getAttribute('aria-selected'), 'true', 'Start call lands on the Call tab');
      const turn = `We can sign for two years if the price holds ${width}.`;
      const r = await api(ready, 'POST', `/api/calls/${sid}/transcript`, { speaker: 'Them', text: turn });
      assert.equal(r.status, 201);
      const tip = `Ask whether the ${width} price includes support.`;
      await insight(ready, sid, tip);
      const turnEl = page.locator('#panel-transcript .turn', { hasText: turn });
      const tipEl = page.locator('#panel-insights .insight', { hasText: tip });
      await turnEl.waitFor({ timeout: 10_000 });
      await tipEl.waitFor({ timeout: 10_000 });
      assert.ok(await inViewport(turnEl), 'the transcript turn is in view');
      assert.ok(await inViewport(tipEl), 'the insight is in view');
      const [tb, ib] = [await turnEl.boundingBox(), await tipEl.boundingBox()];
      if (width >= 1000) assert.ok(ib.x > tb.x + tb.width / 2, `side by side at ${width} px: ${JSON.stringify([tb, ib])}`);
      else assert.ok(ib.y > tb.y, `stacked at ${width} px: ${JSON.stringify([tb, ib])}`);

      // A question from the Call tab's composer; its answer pinned under the two panels.
      const q = `Does the ${width} offer include onboarding?`;
      await page.fill('#live-input', q);
      await page.press('#live-input', 'Enter');
      await page.locator('#live-pinned .live-question', { hasText: q }).waitFor({ timeout: 10_000 });
      const m = await asked(ready, sid, q);
      const a = `Yes: onboarding is included for ${width} seats.`;
      await answer(ready, sid, m.message_id, a);
      const ans = page.locator('#live-pinned .live-answer', { hasText: a });
      await ans.waitFor({ timeout: 10_000 });
      // More insights and turns come: the question and its answer stay in sight.
      for (let i = 0; i < 6; i++) await insight(ready, sid, `Insight ${i + 1} of six for ${width}: keep the discount on the table.`);
      for (let i = 0; i < 8; i++) await api(ready, 'POST', `/api/calls/${sid}/transcript`, { speaker: i % 2 ? 'You' : 'Them', text: `Turn ${i + 1} about the ${width} timeline and the budget.` });
      await page.locator('#panel-insights .insight', { hasText: `Insight 6 of six for ${width}` }).waitFor({ timeout: 10_000 });
      await page.locator('#panel-transcript .turn', { hasText: `Turn 8 about the ${width}` }).waitFor({ timeout: 10_000 });
      await page.screenshot({ path: shot(`call-${width}`) });
      assert.ok(await inViewport(ans), 'the answer stays in view');
      assert.ok(await inViewport(page.locator('#live-input')), 'the composer is in view');
      assert.ok(await inViewport(page.locator('#panel-transcript .turn', { hasText: `Turn 8 about the ${width}` })), 'the newest turn is in view');

      // The chat is one click away.
      await page.click('#live-open-chat');
      assert.equal(await page.locator('#tab-chat').getAttribute('aria-selected'), 'true');
      await page.click('#tab-call');

      // After the call: its review (summary, transcript, chat) on the same tab.
      await page.click('#end-call');
      await page.click('#confirm-end-call');
      await page.waitForSelector('.app[data-call-mode="review"]', { timeout: 10_000 });
      assert.ok(await page.locator('#call-summary').isVisible());
      assert.ok(await page.locator('#panel-chat').isVisible(), 'the chat is part of the review');
      assert.ok(await page.locator('#panel-transcript').isVisible(), 'the transcript is part of the review');
      await page.screenshot({ path: shot(`review-${width}`) });
      for (const p of popups) await p.close().catch(() => {});
    });
  }

  it("a running call's audio is kept with one switch under the composer; the review shows what was kept", async () => {
    await endLiveCalls(ready);
    const browser = await launchBrowser({ viewport: { width: 1280, height: HEIGHT } });
    browsers.push(browser);
    const page = await openUi(browser.context, ready);
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    const sid = await startCall(page, 'Keep the audio of this one');
    const box = page.locator('#call-keep-audio');
    await box.waitFor({ timeout: 10_000 });
    // Off by default (Settings → Audio's default is off), said next to the switch.
    assert.equal(await box.isChecked(), false);
    assert.match(await page.locator('#call-again-note').innerText(), /Not kept/);
    assert.ok(await inViewport(box), 'the switch is in view');
    assert.ok(await inViewport(page.locator('#live-input')), 'the composer stays in view');
    const [composer, sw] = [await page.locator('#live-input').boundingBox(), await box.boundingBox()];
    assert.ok(sw.y > composer.y, `the switch is under the composer: ${JSON.stringify([composer, sw])}`);

    // On: this call keeps its audio (the app says so), and the line says what is kept so far.
    await box.check();
    await page.waitForFunction(() => /Kept so far: 0 bytes \(0 turns\)/.test(document.querySelector('#call-again-note')?.textContent ?? ''), null, { timeout: 10_000 });
    let rec = await api(ready, 'GET', `/api/calls/${sid}/recording`);
    assert.equal(rec.status, 200);
    assert.equal(rec.json.keep, true);
    await page.screenshot({ path: shot('keep-audio') });
    // Off again, then on: the switch and the app agree each time.
    await box.uncheck();
    await page.waitForFunction(() => /Not kept/.test(document.querySelector('#call-again-note')?.textContent ?? ''), null, { timeout: 10_000 });
    assert.equal((await api(ready, 'GET', `/api/calls/${sid}/recording`)).json.keep, false);
    await box.check();
    await page.waitForFunction(() => /Kept so far/.test(document.querySelector('#call-again-note')?.textContent ?? ''), null, { timeout: 10_000 });

    // After the call: its review says the audio is kept (nothing heard: 0 turns) and offers Delete.
    await page.click('#end-call');
    await page.click('#confirm-end-call');
    await page.waitForSelector('.app[data-call-mode="review"]', { timeout: 10_000 });
    await page.waitForFunction(() => /Kept on this computer/.test(document.querySelector('#call-again-note')?.textContent ?? ''), null, { timeout: 10_000 });
    assert.equal(await page.locator('#call-keep-audio').count(), 0, 'no switch once the call ended');
    await page.click('#call-again-delete');
    await page.waitForFunction(() => /Not kept/.test(document.querySelector('#call-again-note')?.textContent ?? ''), null, { timeout: 10_000 });
    rec = await api(ready, 'GET', `/api/calls/${sid}/recording`);
    assert.equal(rec.json.keep, false);
  });

  for (const width of WIDTHS) {
    it(`the overlay keeps the latest answer in view, across close and reopen, and says when the assistant is down (${width} px main window)`, async () => {
      await endLiveCalls(ready);
      const browser = await launchBrowser({ viewport: { width, height: HEIGHT } });
      browsers.push(browser);
      const page = await openUi(browser.context, ready);
      page.on('pageerror', (e) => pageErrors.push(String(e)));
      const r = await api(ready, 'POST', '/api/calls', { title: `Overlay ${width}` });
      assert.equal(r.status, 201);
      const sid = r.json.session_id;
      const open = async () => {
        const [popup] = await Promise.all([browser.context.waitForEvent('page'), page.click('#open-overlay')]);
        popup.on('pageerror', (e) => pageErrors.push(String(e)));
        await popup.setViewportSize({ width: 380, height: 460 });
        await popup.waitForSelector(`#overlay[data-conn="live"][data-call="${sid}"]`, { timeout: 15_000 });
        return popup;
      };
      let popup = await open();
      const q = `Overlay question ${width}: what did they say about the budget?`;
      await popup.fill('#overlay-input', q);
      await popup.press('#overlay-input', 'Enter');
      const m = await asked(ready, sid, q);
      const a = `They said the budget is ${width} thousand, fixed.`;
      await answer(ready, sid, m.message_id, a);
      for (let i = 0; i < 6; i++) await insight(ready, sid, `Overlay insight ${i + 1} of six (${width}): a longer line so that five of them fill the small window well past its fold.`);
      await popup.locator('.ov-insight', { hasText: 'Overlay insight 6 of six' }).waitFor({ timeout: 10_000 });
      const ans = popup.locator('#overlay-pinned .ov-reply-assistant', { hasText: a });
      await ans.waitFor({ timeout: 10_000 });
      assert.ok(await inViewport(ans), 'after six insights the answer is inside the overlay');
      await popup.screenshot({ path: shot(`overlay-${width}`) });

      // Closed and opened again: the question and its answer come from the store, not memory.
      await popup.close();
      popup = await open();
      const again = popup.locator('#overlay-pinned .ov-reply-assistant', { hasText: a });
      await again.waitFor({ timeout: 10_000 });
      assert.ok(await inViewport(again), 'the answer is there again after reopening');
      assert.ok(await inViewport(popup.locator('#overlay-pinned .ov-question', { hasText: q })));

      // The assistant down: said in words, in the overlay and under the main window's call bar.
      const nowhere = `http://127.0.0.1:${await closedPort()}`;
      const put = await api(ready, 'PUT', '/api/assistant', { kind: 'incoming', base_url: nowhere, relay_token: 'relay-token-for-a-test-0123456789' });
      assert.equal(put.status, 200, JSON.stringify(put.json));
      await api(ready, 'POST', '/api/assistant/check', {});
      const down = popup.locator('#overlay-problems [data-key="assistant"]');
      await down.waitFor({ timeout: 20_000 });
      assert.match(await down.innerText(), /^Assistant not answering — /);
      assert.ok(await inViewport(down), 'said in the overlay, whole');
      assert.ok(await inViewport(again), 'the answer is still in view');
      const bar = page.locator('#call-problems [data-key="assistant"]');
      await bar.waitFor({ timeout: 20_000 });
      assert.ok(await inViewport(bar));
      await popup.screenshot({ path: shot(`overlay-assistant-down-${width}`) });
      await page.screenshot({ path: shot(`assistant-down-${width}`) });
      await api(ready, 'DELETE', '/api/assistant');
      await popup.close();
      await api(ready, 'POST', `/api/calls/${sid}/end`);
    });
  }

  for (const width of WIDTHS) {
    it(`Settings → Audio tries the engine on Save and on Test (${width} px)`, async () => {
      await endLiveCalls(ready);
      const browser = await launchBrowser({ viewport: { width, height: HEIGHT } });
      browsers.push(browser);
      const page = await openUi(browser.context, ready);
      page.on('pageerror', (e) => pageErrors.push(String(e)));
      await page.click('#tab-settings');
      await page.waitForSelector('#audio-engine-openai', { timeout: 10_000 });
      await page.click('#audio-engine-builtin');
      // The description follows the choice before saving.
      await page.click('#audio-engine-openai');
      const draft = page.locator('#audio-engine-draft-notice');
      assert.doesNotMatch(await draft.innerText(), /PocketSphinx/);
      assert.ok(await page.locator('#audio-engine-notice').isHidden(), 'the saved engine’s words are not shown for another choice');
      // Both missing fields are flagged at once.
      await page.fill('#audio-base-url', '');
      await page.fill('#audio-model', '');
      await page.click('#audio-save');
      assert.ok(await page.locator('#audio-base-url-error').isVisible());
      assert.ok(await page.locator('#audio-model-error').isVisible());
      // An address without its scheme: plain words, not the parser's.
      await page.fill('#audio-base-url', '127.0.0.1:8001');
      await page.fill('#audio-model', 'tiny.en');
      await page.click('#audio-save');
      await page.locator('#audio-base-url-error').waitFor({ state: 'visible', timeout: 10_000 });
      const urlErr = await page.locator('#audio-base-url-error').innerText();
      assert.doesNotMatch(urlErr, /relative URL/);
      assert.match(urlErr, /http:\/\//);
      // Nothing listens there: Test says so without saving, Save saves and warns.
      const nowhere = `http://127.0.0.1:${await closedPort()}`;
      await page.fill('#audio-base-url', nowhere);
      assert.match(await draft.innerText(), /on this computer/);
      await page.click('#audio-engine-test');
      await page.waitForFunction(() => ['down', 'rejected', 'ok', 'error'].includes(document.getElementById('audio-result')?.dataset.check ?? ''), null, { timeout: 30_000 });
      assert.match(await page.locator('#audio-result').innerText(), /^The server does not answer: /);
      assert.equal((await api(ready, 'GET', '/api/audio')).json.engine.kind, 'builtin', 'Test saved nothing');
      await page.click('#audio-save');
      await page.waitForFunction(() => /^Saved, but/.test(document.getElementById('audio-result')?.textContent ?? ''), null, { timeout: 30_000 });
      const said = page.locator('#audio-result');
      assert.match(await said.innerText(), /^Saved, but the server does not answer: \S/);
      assert.ok(await inViewport(said), 'the warning is in view');
      await page.screenshot({ path: shot(`engine-unreachable-${width}`), fullPage: false });
      // Back to the built-in engine: saved and ready.
      await page.click('#audio-engine-builtin');
      await page.click('#audio-save');
      await page.waitForFunction(() => /^Saved\. The speech engine is ready\./.test(document.getElementById('audio-result')?.textContent ?? ''), null, { timeout: 60_000 });
    });
  }

  for (const width of WIDTHS) {
    it(`"Summarise this call" is one short line in the chat and not a search hit (${width} px)`, async () => {
      await endLiveCalls(ready);
      const browser = await launchBrowser({ viewport: { width, height: HEIGHT } });
      browsers.push(browser);
      const page = await openUi(browser.context, ready);
      page.on('pageerror', (e) => pageErrors.push(String(e)));
      const word = `wombat${width}`;
      const r = await api(ready, 'POST', '/api/calls', { title: `Summary ${width}` });
      const sid = r.json.session_id;
      for (let i = 0; i < 30; i++) await api(ready, 'POST', `/api/calls/${sid}/transcript`, { speaker: i % 2 ? 'You' : 'Them', text: `Line ${i} about the ${word} project and its long list of open points to settle.` });
      await api(ready, 'POST', `/api/calls/${sid}/end`);
      await page.click('#tab-history');
      await page.locator(`.history-item[data-session-id="${sid}"]`).click();
      await page.click('#tab-chat');
      await page.waitForSelector('#summarise-call:not([disabled])', { timeout: 10_000 });
      await page.click('#summarise-call');
      const bubble = page.locator('#messages .msg-user', { hasText: 'Asked for a summary of this call' });
      await bubble.waitFor({ timeout: 10_000 });
      const box = await bubble.boundingBox();
      assert.ok(box.height < 120, `one short line, not the transcript: ${box.height} px`);
      assert.ok(await bubble.locator('details.summary-request-fold').count(), 'the transcript sent is folded away');
      assert.equal(await bubble.locator('details[open]').count(), 0);
      await page.screenshot({ path: shot(`summary-${width}`) });
      // Search: the transcript's turns are found, the request is not.
      await page.click('#tab-history');
      await page.fill('#search-input', word);
      await page.locator('.search-hit-item').first().waitFor({ timeout: 10_000 });
      const hits = await api(ready, 'GET', `/api/search?q=${word}&limit=100`);
      assert.ok(hits.json.results.length > 0);
      assert.ok(hits.json.results.every((h) => h.kind !== 'chat'), `no chat hit: ${JSON.stringify(hits.json.results.map((h) => h.kind))}`);
      assert.equal(await page.locator('.search-hit-item[data-kind="chat"]').count(), 0);
    });
  }
});

describe('the rough edges', { skip: reason ?? false }, () => {
  let app;
  let ready;
  const browsers = [];

  before(async () => {
    app = await startApp();
    ready = app.ready;
  });

  after(async () => {
    for (const b of browsers) await b.close();
    const exit = await app?.stop();
    if (app) assert.deepEqual(exit, { code: 0, signal: null }, `stderr tail:\n${app.stderr().slice(-2000)}`);
  });

  /** Whether two elements' boxes overlap. */
  const overlap = (a, b) => a.x < b.x + b.width && b.x < a.x + a.width && a.y < b.y + b.height && b.y < a.y + a.height;

  for (const width of WIDTHS) {
    it(`past calls, the call bar, the first screen and the overlay at call start (${width} px)`, async () => {
      await endLiveCalls(ready);
      const browser = await launchBrowser({ viewport: { width, height: HEIGHT } });
      browsers.push(browser);
      const page = await openUi(browser.context, ready);
      // No tunnel set up: no "Tunnel: off" on the first screen.
      assert.equal(await page.locator('#tunnel-status').isVisible(), false);

      // Start call opens the browser overlay, as the desktop app opens its window.
      const title = `Quarterly planning with the whole regional sales team and finance (${width})`;
      const [popup] = await Promise.all([browser.context.waitForEvent('page', { timeout: 15_000 }), startCall(page, title)]);
      await popup.waitForSelector('#overlay[data-conn="live"]', { timeout: 15_000 });
      assert.equal(await popup.textContent('#overlay-title'), 'Live call');
      await popup.close();

      // A long title: asking to end the call does not push anything to another row (the title
      // gives way), and the question and its two buttons stay together.
      const barBefore = await page.locator('.callbar').boundingBox();
      await page.click('#end-call');
      const q = page.locator('#end-call-question');
      await q.waitFor();
      const barAfter = await page.locator('.callbar').boundingBox();
      // (A narrow window has the bar on more rows anyway: there the question keeps together.)
      if (width >= 1000) assert.ok(Math.abs(barAfter.height - barBefore.height) < 2, `the bar keeps its rows: ${barBefore.height} → ${barAfter.height}`);
      const mid = async (sel) => {
        const b = await page.locator(sel).boundingBox();
        return b.y + b.height / 2;
      };
      const [m1, m2, m3] = [await mid('#end-call-question'), await mid('#confirm-end-call'), await mid('#cancel-end-call')];
      assert.ok(Math.abs(m1 - m2) < 6 && Math.abs(m2 - m3) < 6, `the question and its buttons on one row: ${[m1, m2, m3]}`);
      assert.ok(await inViewport(page.locator('#confirm-end-call')));
      await page.screenshot({ path: shot(`end-confirm-${width}`) });
      await page.click('#confirm-end-call');

      // Past calls: the delete question does not cover the call's title and duration; the open
      // call is said in words, not a pill that looks like a button.
      const sid = await page.evaluate(() => document.querySelector('.app')?.dataset.session);
      await page.click('#tab-history');
      const row = page.locator(`.history-row[data-row="${sid}"]`);
      await row.waitFor();
      assert.equal(await row.locator('.chip', { hasText: 'Open' }).count(), 0);
      assert.equal(await row.locator('.history-open-now').innerText(), 'open now');
      await row.locator(`[data-delete="${sid}"]`).click();
      const confirm = row.locator('.history-confirm');
      await confirm.waitFor();
      const cb = await confirm.boundingBox();
      for (const sel of ['.history-title', '.history-meta', '.history-open-now']) {
        const b = await row.locator(sel).boundingBox();
        assert.ok(b && b.width > 20, `${sel} still shown`);
        assert.ok(!overlap(b, cb), `${sel} not covered by the delete question: ${JSON.stringify([b, cb])}`);
      }
      await page.screenshot({ path: shot(`delete-confirm-${width}`) });
      await row.locator(`[data-cancel-delete="${sid}"]`).click();
    });
  }
});

describe('the failure state through a private PulseAudio', { skip: reason ?? (audioReason && !audioRequired() ? audioReason : false) }, () => {
  let app;
  let ready;
  let pulse;
  const browsers = [];

  before(async () => {
    if (audioReason) throw new Error(`cannot hear a call here: ${audioReason}`);
    pulse = await startPulse();
    app = await startApp([], { env: { PULSE_SERVER: pulse.server } });
    ready = app.ready;
  });

  after(async () => {
    for (const b of browsers) await b.close();
    const exit = await app?.stop();
    await pulse?.stop();
    if (app) assert.deepEqual(exit, { code: 0, signal: null }, `stderr tail:\n${app.stderr().slice(-2000)}`);
  });

  for (const width of WIDTHS) {
    it(`the transcription server down: one whole sentence, a row for the waiting turn, Listen labelled by state (${width} px)`, async () => {
      await endLiveCalls(ready);
      const nowhere = `http://127.0.0.1:${await closedPort()}`;
      const put = await api(ready, 'PUT', '/api/audio', { engine: { kind: 'openai', base_url: nowhere, model: 'tiny.en' } });
      assert.equal(put.status, 200, JSON.stringify(put.json));
      const browser = await launchBrowser({ viewport: { width, height: HEIGHT } });
      browsers.push(browser);
      const page = await openUi(browser.context, ready);
      await page.evaluate(() => localStorage.setItem('stagewhisper.listen_on_start', 'off'));
      await startCall(page, `A call the server cannot hear (${width}), with a long title that must not push the bar`);
      const toggle = page.locator('#listen-toggle');
      assert.equal(await toggle.innerText(), 'Listen');
      await toggle.click();
      await page.waitForSelector('#listen-toggle[aria-pressed="true"]', { timeout: 15_000 });
      assert.equal(await toggle.innerText(), 'Stop listening', 'the label says what a click does');
      await pulse.say('micfeed', 'Our budget is about twenty thousand dollars this quarter.');
      const sentence = page.locator('#call-problems [data-key="engine"]');
      await sentence.waitFor({ timeout: 60_000 });
      await page.waitForFunction(() => /turns? waiting, nothing lost\.$/.test(document.querySelector('#call-problems [data-key="engine"]')?.textContent ?? ''), null, { timeout: 60_000 });
      const text = await sentence.innerText();
      assert.match(text, /^Transcription server not answering — \d+ turns? waiting, nothing lost\.$/);
      assert.ok(await inViewport(sentence), 'the sentence is inside the viewport');
      assert.ok(await sentence.evaluate((el) => el.scrollWidth <= el.clientWidth + 1 && getComputedStyle(el).textOverflow !== 'ellipsis'), 'not cut');
      assert.equal(await page.locator('#call-problems li').count(), 1, 'said once');
      const row = page.locator('#transcript-waiting .turn-waiting').first();
      await row.waitFor({ timeout: 10_000 });
      assert.match(await row.innerText(), /waits to be transcribed/);
      await page.screenshot({ path: shot(`failure-${width}`) });
      // The overlay (opened with the call) says the same, whole.
      const ov = browser.context.pages().find((p) => /view=overlay/.test(p.url()));
      assert.ok(ov, 'the overlay opened with the call');
      await ov.setViewportSize({ width: 380, height: 460 });
      const ovSentence = ov.locator('#overlay-problems [data-key="engine"]');
      await ovSentence.waitFor({ timeout: 20_000 });
      assert.match(await ovSentence.innerText(), /^Transcription server not answering — \d+ turns? waiting, nothing lost\.$/);
      assert.ok(await inViewport(ovSentence));
      assert.equal(await ov.locator('#overlay-hearing').innerText(), 'Not hearing');
      await ov.screenshot({ path: shot(`overlay-failure-${width}`) });
      // The microphone test never records into the call: refused while it is listened to, and
      // Settings' Test buttons say why.
      const t = await api(ready, 'POST', '/api/audio/test', { channel: 'mic', seconds: 1 });
      assert.equal(t.status, 409, JSON.stringify(t.json));
      assert.equal(t.json.error, 'listening');
      await page.click('#tab-settings');
      const testBtn = page.locator('#audio-test-mic');
      await testBtn.waitFor();
      assert.equal(await testBtn.isDisabled(), true);
      assert.match(await testBtn.getAttribute('title'), /Stop listening to test/);
      // Settings says what waits once, without the OS's error number.
      const card = await page.locator('#settings-audio').innerText();
      // (About the waiting turns: "N turns (… of speech) … kept and will be transcribed"; the keep-the-audio
      // setting's own note, "each turn heard is kept", is not one.)
      assert.equal((card.match(/\bturns? \(|\bturns? wait|\bturns? .*kept and will/g) ?? []).length, 1, card);
      assert.doesNotMatch(card, /os error \d+/);
      await page.locator('#settings-audio').evaluate((el) => el.scrollIntoView({ block: 'start' }));
      await page.screenshot({ path: shot(`settings-failure-${width}`) });
      await page.click('#tab-call');
      await toggle.click();
      await page.waitForSelector('#listen-toggle[aria-pressed="false"]', { timeout: 15_000 });
      assert.equal(await toggle.innerText(), 'Listen');
      await api(ready, 'PUT', '/api/audio', { engine: { kind: 'builtin' } });
      await endLiveCalls(ready);
    });
  }
});
