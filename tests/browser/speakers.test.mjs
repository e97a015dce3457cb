// Settings → Audio → "Who said it", in the browser against the real headless app: the row says
// whether telling the call's speakers apart can run here (no speaker model in a fresh data dir:
// "not available", with what is missing), and ticking the box saves `{"speakers": {"enabled":
// true}}` through the control API (read back with `GET /api/audio`); unticking saves it off. The
// speaker model row offers the download; the known voices list says how a voice gets known.
// And in a call's Transcript tab, a speaker's name renames them: every turn of theirs follows.

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { api, launchBrowser, openUi, skipReason, startApp } from './harness.mjs';

const reason = skipReason();
if (reason && process.env.SW_E2E_REQUIRE === '1') throw new Error(`browser tests cannot run: ${reason}`);
if (reason) console.log(`# SKIP speakers browser test: ${reason}`);

describe('Settings → Audio → Who said it', { skip: reason ?? false }, () => {
  let app;
  let ready;
  let browser;
  let page;
  const pageErrors = [];

  before(async () => {
    app = await startApp([]);
    ready = app.ready;
    browser = await launchBrowser();
    page = await browser.context.newPage();
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    await openUi(browser.context, ready, page);
  });

  after(async () => {
    await browser?.close();
    const exit = await app?.stop();
    if (app) assert.deepEqual(exit, { code: 0, signal: null }, `the app should exit 0 on SIGTERM; stderr tail:\n${app.stderr().slice(-2000)}`);
    assert.deepEqual(pageErrors, [], 'no script errors in the page');
  });

  it('shows availability and saves the setting', async () => {
    const view = await api(ready, 'GET', '/api/audio');
    if (view.status === 503) {
      console.log('# a build without the audio pipeline: nothing to show');
      return;
    }
    assert.equal(view.json.speakers.enabled, false);
    assert.equal(view.json.speakers.available, false);
    await page.keyboard.press('Control+5');
    const row = page.locator('#audio-speakers');
    await row.waitFor({ state: 'visible', timeout: 10_000 });
    await page.waitForFunction(() => document.querySelector('#audio-speakers-state')?.textContent === 'not available', null, { timeout: 10_000 });
    const detail = await page.locator('#audio-speakers-detail').innerText();
    assert.ok(detail.includes('no speaker model'), detail);
    const box = page.locator('#audio-speakers-enabled');
    assert.equal(await box.isChecked(), false);
    await box.check();
    await page.waitForFunction(() => document.querySelector('#audio-speakers-result')?.textContent === 'On.', null, { timeout: 10_000 });
    assert.equal((await api(ready, 'GET', '/api/audio')).json.speakers.enabled, true);
    await box.uncheck();
    await page.waitForFunction(() => document.querySelector('#audio-speakers-result')?.textContent === 'Off.', null, { timeout: 10_000 });
    assert.equal((await api(ready, 'GET', '/api/audio')).json.speakers.enabled, false);
  });
  it('offers the speaker model and explains known voices', async () => {
    const view = await api(ready, 'GET', '/api/audio');
    if (view.status === 503) return;
    await page.keyboard.press('Control+5');
    await page.waitForFunction(() => document.querySelector('#speaker-model-state')?.textContent.includes('Not on this computer'), null, { timeout: 10_000 });
    assert.ok(await page.locator('#speaker-model-download').isVisible());
    await page.waitForFunction(() => document.querySelector('#voiceprints-note')?.textContent.includes('Rename a speaker'), null, { timeout: 10_000 });
  });

  it('renames a speaker in the Transcript tab: every turn of theirs follows', async () => {
    const r = await api(ready, 'POST', '/api/calls', { title: 'renewal' });
    assert.equal(r.status, 201);
    const sid = r.json.session_id;
    for (const [speaker, text] of [['Speaker 1', 'We need a discount'], ['Speaker 2', 'Not below list'], ['Speaker 1', 'Then we walk']]) {
      assert.equal((await api(ready, 'POST', `/api/calls/${sid}/transcript`, { speaker, text })).status, 201);
    }
    await page.waitForSelector(`.app[data-session="${sid}"]`, { timeout: 10_000 });
    await page.keyboard.press('Control+3');
    const names = () => page.evaluate(() => [...document.querySelectorAll('#transcript .turn-speaker-name')].map((e) => e.textContent));
    await page.waitForFunction(() => document.querySelectorAll('#transcript .turn-speaker-rename').length === 3, null, { timeout: 10_000 });
    await page.locator('#transcript .turn-speaker-rename', { hasText: 'Speaker 1' }).first().click();
    const input = page.locator('#transcript .speaker-rename-input');
    await input.fill('Dana (Acme CFO)');
    await input.press('Enter');
    await page.waitForFunction(() => [...document.querySelectorAll('#transcript .turn-speaker-name')].filter((e) => e.textContent === 'Dana (Acme CFO)').length === 2, null, { timeout: 10_000 });
    assert.deepEqual(await names(), ['Dana (Acme CFO)', 'Speaker 2', 'Dana (Acme CFO)']);
    const stored = await api(ready, 'GET', `/api/calls/${sid}/transcript`);
    assert.deepEqual(stored.json.map((t) => t.speaker), ['Dana (Acme CFO)', 'Speaker 2', 'Dana (Acme CFO)']);
    // Escape gives up without a request.
    await page.locator('#transcript .turn-speaker-rename', { hasText: 'Speaker 2' }).click();
    await page.locator('#transcript .speaker-rename-input').press('Escape');
    assert.deepEqual(await names(), ['Dana (Acme CFO)', 'Speaker 2', 'Dana (Acme CFO)']);
  });
});
