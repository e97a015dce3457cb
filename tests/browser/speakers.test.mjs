// Settings → Audio → "Who said it", in the browser against the real headless app: the row says
// whether telling the call's speakers apart can run here (no speaker model in a fresh data dir:
// "not available", with what is missing), and ticking the box saves `{"speakers": {"enabled":
// true}}` through the control API (read back with `GET /api/audio`); unticking saves it off.

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
});
