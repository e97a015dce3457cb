// The first ten minutes, as a person meets them, in Chromium against the headless app: the
// first-run guide with no assistant (and gone once one is connected), plain sentences instead of
// error codes in Settings, naming, renaming and deleting calls, the header at a narrow width.
// Pictures at 1280×800 and 760 px wide go to tests/artifacts/ui-*.png (first run, each kind's
// Settings, a live call, Past calls).
//
// The assistant is the loopback stand-in of harness.mjs (`startFakeAssistant`): it answers the
// direct relay's health check and accepts deliveries; the real peers have suites of their own.

import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { api, callback, ensureArtifacts, launchBrowser, openUi, skipReason, startApp, startFakeAssistant, uuid } from './harness.mjs';

const reason = skipReason();
if (reason && process.env.SW_E2E_REQUIRE === '1') throw new Error(`browser tests cannot run: ${reason}`);

const RELAY_TOKEN = 'first-run-relay-token-0123456789abcdef';
const WIDE = { width: 1280, height: 800 };
const NARROW = { width: 760, height: 800 };
const shot = (name) => path.join(ensureArtifacts(), `ui-${name}.png`);

describe('the first ten minutes in the browser', { skip: reason ?? false }, () => {
  let app;
  let ready;
  let browser;
  let page;
  let fake;
  const pageErrors = [];

  before(async () => {
    app = await startApp();
    ready = app.ready;
    fake = await startFakeAssistant({ token: RELAY_TOKEN });
    browser = await launchBrowser({ viewport: WIDE });
    page = await browser.context.newPage();
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    await openUi(browser.context, ready, page);
  });

  after(async () => {
    await browser?.close();
    await fake?.close();
    const exit = await app?.stop();
    if (app) assert.deepEqual(exit, { code: 0, signal: null }, `stderr tail:\n${app.stderr().slice(-2000)}`);
    assert.deepEqual(pageErrors, [], 'no uncaught errors in the page');
  });

  async function both(name) {
    await page.setViewportSize(WIDE);
    await page.screenshot({ path: shot(`${name}-1280`) });
    await page.setViewportSize(NARROW);
    await page.screenshot({ path: shot(`${name}-760`) });
    await page.setViewportSize(WIDE);
  }

  /** The element is on screen: visible and inside the viewport's width. */
  async function onScreen(selector) {
    const box = await page.locator(selector).boundingBox();
    const vp = page.viewportSize();
    return !!box && box.width > 0 && box.x >= 0 && box.x + box.width <= vp.width + 0.5;
  }

  it('with no assistant, the guide says what to do first and leads to Settings', async () => {
    const guide = page.locator('#first-run');
    await guide.waitFor();
    assert.match(await guide.innerText(), /Connect your assistant first/);
    assert.match(await guide.innerText(), /nothing will answer/);
    assert.match(await page.locator('#chat-no-assistant').innerText(), /No assistant is connected/);
    await both('first-run');
    // At 760 px the header keeps its controls in view (wrapped, not cut off).
    await page.setViewportSize(NARROW);
    for (const sel of ['#open-overlay', '#assistant-status', '#start-call']) {
      assert.ok(await onScreen(sel), `${sel} on screen at 760 px`);
    }
    // No tunnel set up: no "Tunnel: off" jargon on the first screen.
    assert.equal(await page.locator('#tunnel-status').isVisible(), false);
    await page.setViewportSize(WIDE);
    await page.locator('#first-run-connect').click();
    assert.equal(await page.locator('#tab-settings').getAttribute('aria-selected'), 'true');
    assert.equal(await guide.isVisible(), false, 'not shown over Settings');
    // Settings' status card: what is wrong and the one next step, said where the user is.
    assert.match(await page.locator('#assistant-detail').innerText(), /below\.$/);
    assert.match(await page.locator('#assistant-next').innerText(), /^Next: choose your assistant below/);
    await page.keyboard.press('Control+1');
    await guide.waitFor();
  });

  it('a bad value in Settings reads as a sentence, the code kept in the tooltip', async () => {
    await page.keyboard.press('Control+5');
    // The hub kind: listing its sessions with nothing filled in names both missing fields.
    await page.locator('label[for="assistant-kind-clawborrator"]').click();
    await page.locator('#claw-list-sessions').click();
    const res = page.locator('#claw-sessions-result');
    await page.waitForFunction(() => /Fill in/.test(document.querySelector('#claw-sessions-result')?.textContent ?? ''));
    const text = await res.innerText();
    assert.match(text, /Fill in the hub URL and the session token\./);
    assert.doesNotMatch(text, /missing_field|`/);
    assert.match(await res.getAttribute('title'), /Error code: missing_field/);
    // The direct relay: a base URL that is not on this computer.
    await page.locator('label[for="assistant-kind-incoming"]').click();
    await page.getByLabel('Base URL', { exact: true }).fill('http://10.0.0.5:8644');
    await page.getByLabel('Relay token', { exact: true }).fill(RELAY_TOKEN);
    await page.locator('#assistant-save').click();
    const urlErr = page.locator('#assistant-base-url-error');
    await urlErr.waitFor();
    const said = await urlErr.innerText();
    assert.doesNotMatch(said, /invalid_base_url|invalid base_url|`/);
    assert.match(said, /^That base URL does not work here/);
  });

  it("each kind's Settings, at both widths", async () => {
    await page.keyboard.press('Control+5');
    for (const kind of ['incoming', 'byo', 'openclaw-gateway', 'clawborrator']) {
      const label = page.locator(`label[for="assistant-kind-${kind}"]`);
      if ((await label.count()) === 0) continue;
      await label.click();
      await page.locator('#settings-assistant').scrollIntoViewIfNeeded();
      await both(`settings-${kind}`);
    }
  });

  it('Start call without an assistant warns; a title given at start names the call', async () => {
    await page.keyboard.press('Control+1');
    await page.locator('#call-title').fill('Acme renewal');
    await page.locator('#start-call').click();
    const warn = page.locator('#bar-warn');
    await warn.waitFor();
    assert.match(await warn.innerText(), /No assistant is connected.*nothing will coach you/s);
    await page.locator('#warn-start-anyway').click();
    await page.waitForSelector('#elapsed');
    const sid = await page.locator('.app').getAttribute('data-session');
    const s = (await api(ready, 'GET', '/api/sessions')).json.find((x) => x.session_id === sid);
    assert.equal(s.title, 'Acme renewal');
    assert.equal(await page.locator('.call-state .call-title').innerText(), 'Acme renewal');
    assert.equal(await page.locator('#call-title').count(), 0, 'no title box during the call');
    // A live call with a few turns and an insight, for the pictures.
    for (const [speaker, text] of [
      ['Them', 'We need the renewal signed before the end of the quarter.'],
      ['You', 'Understood. Is the price the main concern?'],
      ['Them', 'Mostly the seat count: we are at 120 seats now.'],
    ]) {
      assert.equal((await api(ready, 'POST', `/api/calls/${sid}/transcript`, { speaker, text })).status, 201);
    }
    const task = uuid();
    const tip = 'Ask whether 120 seats include the contractors.';
    assert.equal((await callback(ready, task, { task_id: task, session_id: `insights:${sid}`, status: 'message', message_id: uuid(), reply_text: tip })).status, 200);
    await page.keyboard.press('Control+2');
    await page.waitForFunction((t) => document.body.textContent.includes(t), tip);
    await both('live-call');
    await page.keyboard.press('Control+1');
  });

  it('once an assistant is connected, the guide and the notices go away', async () => {
    const r = await api(ready, 'PUT', '/api/assistant', { kind: 'incoming', base_url: fake.url, relay_token: RELAY_TOKEN });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    await page.waitForFunction(() => document.querySelector('#first-run')?.hidden === true, null, { timeout: 15_000 });
    assert.equal(await page.locator('#chat-no-assistant').count(), 0);
    // Start call no longer warns (the live call of the test before is ended first).
    const live = (await api(ready, 'GET', '/api/sessions')).json.find((x) => x.is_call && !x.ended_at);
    await page.locator('#end-call').click();
    await page.locator('#confirm-end-call').click();
    await page.waitForFunction((sid) => document.querySelector('.app')?.dataset.session === sid && !!document.querySelector('#start-call'), live.session_id);
    await page.waitForSelector('#start-call:not([disabled])', { timeout: 5000 });
    await page.locator('#start-call').click();
    await page.waitForSelector('#elapsed');
    assert.equal(await page.locator('#bar-warn').isVisible(), false);
    await page.locator('#end-call').click();
    await page.locator('#confirm-end-call').click();
    await page.waitForSelector('#start-call');
  });

  it('Past calls: rename, then delete after a confirmation', async () => {
    const r = await api(ready, 'POST', '/api/calls', { title: 'Weekly sync' });
    const sid = r.json.session_id;
    await api(ready, 'POST', `/api/calls/${sid}/end`, {});
    await page.keyboard.press('Control+4');
    const row = page.locator(`.history-row[data-row="${sid}"]`);
    await row.waitFor();
    await both('past-calls');

    await row.locator(`[data-rename="${sid}"]`).click();
    const input = page.locator(`[data-rename-session="${sid}"]`);
    assert.equal(await input.inputValue(), 'Weekly sync');
    await input.fill('Weekly sync with Dana');
    await input.press('Enter');
    await page.waitForFunction((id) => document.querySelector(`.history-row[data-row="${id}"] .history-title`)?.textContent === 'Weekly sync with Dana', sid);
    const renamed = (await api(ready, 'GET', '/api/sessions')).json.find((x) => x.session_id === sid);
    assert.equal(renamed.title, 'Weekly sync with Dana');

    // Delete asks first; Cancel keeps it.
    await row.locator(`[data-delete="${sid}"]`).click();
    assert.match(await row.innerText(), /Delete “Weekly sync with Dana”.*cannot be undone/s);
    await row.locator(`[data-cancel-delete="${sid}"]`).click();
    assert.ok((await api(ready, 'GET', '/api/sessions')).json.some((x) => x.session_id === sid), 'still there');
    await row.locator(`[data-delete="${sid}"]`).click();
    await row.locator(`[data-confirm-delete="${sid}"]`).click();
    await row.waitFor({ state: 'detached', timeout: 10_000 });
    assert.ok(!(await api(ready, 'GET', '/api/sessions')).json.some((x) => x.session_id === sid), 'deleted');
  });
});
