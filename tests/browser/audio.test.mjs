// Hearing the call in the browser, against the real headless app.
//
// 1. "when the app cannot hear": the app is started pointing at a sound server that does not
//    exist. Settings → Audio must explain why it cannot hear and what to do (not show an empty
//    list), and the call bar must say so too. A build without the audio pipeline answers
//    `503 audio_unavailable` to `GET /api/audio` (it gets the "this build cannot hear"
//    explanation); a build with it answers `GET /api/audio/sources` with that 503 (the "no sound
//    server" explanation, and listening fails visibly in the call bar). Runs with either build.
// 2. "through a private PulseAudio": a PulseAudio of the test's own (null sinks `call` and
//    `micfeed`, the source `mic` remapped from `micfeed`'s monitor; harness.mjs `startPulse`), the
//    app started with `PULSE_SERVER` pointing at it. Settings → Audio lists those sources and its
//    meters move while speech plays; Test records and shows what the engine heard; a call started
//    from the call bar listens after Listen, and espeak-ng speech played into the microphone (and
//    into the call) shows first as a greyed partial, then as its final turn, in the Transcript
//    tab; the overlay shows that it is listening. Needs the audio pipeline and its default engine
//    (PocketSphinx): a build without them fails here, with the reason.
//
// Without PulseAudio / espeak-ng the second part is skipped with the reason, or fails when
// SW_E2E_REQUIRE=1 or SW_AUDIO_REQUIRE=1 (CI). Screenshots go to tests/artifacts/audio-*.png.

import assert from 'node:assert/strict';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { api, audioRequired, audioSkipReason, ensureArtifacts, launchBrowser, openUi, skipReason, sleep, startApp, startPulse } from './harness.mjs';

/** Start call in the bar; without an assistant the bar warns first and "Start the call anyway" goes on. */
async function startCallAnyway(page) {
  await page.locator('#start-call').click();
  await page.waitForSelector('#warn-start-anyway, #elapsed', { timeout: 10_000 });
  const anyway = page.locator('#warn-start-anyway');
  if (await anyway.isVisible()) await anyway.click();
}

const reason = skipReason();
if (reason && process.env.SW_E2E_REQUIRE === '1') throw new Error(`browser tests cannot run: ${reason}`);
if (reason) console.log(`# SKIP audio browser tests: ${reason}`);
const audioReason = audioSkipReason();
if (!reason && audioReason && !audioRequired()) console.log(`# SKIP hearing a call through PulseAudio: ${audioReason}`);

const shot = (name) => path.join(ensureArtifacts(), `audio-${name}.png`);

/** Ends every live call through the API (the call bar then offers Start call). */
async function endLiveCalls(ready) {
  for (const s of (await api(ready, 'GET', '/api/sessions')).json) {
    if (s.is_call && !s.ended_at) await api(ready, 'POST', `/api/calls/${s.session_id}/end`);
  }
}

describe('Settings → Audio when the app cannot hear', { skip: reason ?? false }, () => {
  let app;
  let ready;
  let browser;
  let page;
  let nowhere;
  const pageErrors = [];

  before(async () => {
    // An empty runtime directory and a socket that does not exist: no sound server to find.
    nowhere = await mkdtemp(path.join(os.tmpdir(), 'sw-no-pulse-'));
    const env = { PULSE_SERVER: `unix:${path.join(nowhere, 'native')}`, XDG_RUNTIME_DIR: nowhere, PULSE_RUNTIME_PATH: nowhere };
    app = await startApp([], { env });
    ready = app.ready;
    browser = await launchBrowser();
    page = await browser.context.newPage();
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    await openUi(browser.context, ready, page);
  });

  after(async () => {
    await browser?.close();
    const exit = await app?.stop();
    if (nowhere) await rm(nowhere, { recursive: true, force: true });
    if (app) assert.deepEqual(exit, { code: 0, signal: null }, `the app should exit 0 on SIGTERM; stderr tail:\n${app.stderr().slice(-2000)}`);
    assert.deepEqual(pageErrors, [], 'no script errors in the page');
  });

  it('explains why it cannot hear and what to do, instead of an empty list', async () => {
    const view = await api(ready, 'GET', '/api/audio');
    const kind = view.status === 503 ? 'build' : 'server';
    let said;
    if (kind === 'build') {
      assert.equal(view.json?.error, 'audio_unavailable', JSON.stringify(view.json));
      said = view.json.message;
    } else {
      assert.equal(view.status, 200, JSON.stringify(view.json));
      const src = await api(ready, 'GET', '/api/audio/sources');
      assert.equal(src.status, 503, `GET /api/audio/sources with no sound server → ${src.status} ${JSON.stringify(src.json)}`);
      assert.equal(src.json?.error, 'audio_unavailable');
      said = src.json.message;
    }
    console.log(`# ${kind === 'build' ? 'a build without the audio pipeline' : 'the audio pipeline without a sound server'}: ${said}`);

    await page.keyboard.press('Control+5');
    const box = page.locator('#audio-unavailable');
    await box.waitFor({ state: 'visible', timeout: 10_000 });
    assert.equal(await box.getAttribute('data-kind'), kind);
    const text = await box.innerText();
    assert.ok(text.includes(said), `the explanation quotes the app's reason (${said}):\n${text}`);
    assert.ok((await box.locator('li').count()) >= 2, `the explanation says what to do:\n${text}`);
    if (kind === 'server') {
      assert.match(text, /sound server/);
      assert.match(text, /pactl info/);
      assert.match(text, /PULSE_SERVER/);
      // The pickers offer what needs no server; no meter pretends to show a level.
      const mic = await page.locator('#audio-mic option').evaluateAll((os) => os.map((o) => o.value));
      assert.deepEqual(mic, ['default', '']);
      assert.equal(await page.locator('#meter-mic').isVisible(), false);
      assert.equal(await page.locator('#audio-test-mic').isDisabled(), true);
    } else {
      assert.match(text, /cannot hear calls/);
      assert.equal(await page.locator('#audio-sources').isVisible(), false);
    }
    await page.locator('#settings-audio').scrollIntoViewIfNeeded();
    await page.locator('#settings-audio').screenshot({ path: shot(`unavailable-${kind}`) });

    // "Check again" asks again and keeps explaining.
    await page.locator('#audio-retry').click();
    await sleep(300);
    assert.ok(await box.isVisible());
  });

  it('the call bar says it cannot hear (and a failed Listen is visible)', async () => {
    await endLiveCalls(ready);
    await page.keyboard.press('Control+1');
    await startCallAnyway(page);
    await page.waitForSelector('#listen:not([hidden])', { timeout: 10_000 });
    const sid = await page.locator('.app').getAttribute('data-session');
    const view = await api(ready, 'GET', '/api/audio');
    const status = page.locator('#audio-status');
    if (view.status === 503) {
      // A build that cannot hear: no toggle to press, and the reason on hover.
      assert.equal(await page.locator('#listen-toggle').isDisabled(), true);
      assert.equal(await status.innerText(), 'Cannot hear');
      assert.match(await page.locator('#listen-toggle').getAttribute('title'), /cannot hear/);
      // The call was started anyway (a "listen" the app cannot honour is not sent).
      const s = (await api(ready, 'GET', '/api/sessions')).json.find((x) => x.session_id === sid);
      assert.ok(s?.is_call && !s.ended_at);
    } else {
      // Listening is an intent: with no sound server the status fails, in words.
      if ((await page.locator('#listen-toggle').getAttribute('aria-pressed')) !== 'true') await page.locator('#listen-toggle').click();
      await page.waitForSelector('#audio-status[data-state="error"]', { timeout: 15_000 });
      // The chip says the state; the reason is one whole sentence under the call bar.
      assert.equal(await status.innerText(), 'Not hearing');
      const words = await page.locator('#call-problems').innerText();
      assert.match(words, /is heard — \S|is not heard — \S|Not hearing the call — \S/);
      assert.doesNotMatch(words, /Not hearing: Not hearing/, 'said once');
      const st = (await api(ready, 'GET', '/api/audio')).json.status;
      assert.equal(st.state, 'error');
      assert.equal(st.call_id, sid);
    }
    await page.locator('.callbar').screenshot({ path: shot('callbar-cannot-hear') });
    await api(ready, 'POST', `/api/calls/${sid}/end`);
  });
});

describe('hearing a call through a private PulseAudio', { skip: reason ?? (audioReason && !audioRequired() ? audioReason : false) }, () => {
  let pulse;
  let app;
  let ready;
  let browser;
  let page;
  let sid;
  const pageErrors = [];

  before(async () => {
    if (audioReason) throw new Error(`cannot hear a call here: ${audioReason}`);
    pulse = await startPulse();
    app = await startApp([], { env: pulse.env });
    ready = app.ready;
    const view = await api(ready, 'GET', '/api/audio');
    if (view.status !== 200) {
      throw new Error(`GET /api/audio → ${view.status} ${JSON.stringify(view.json)}: this build of the app has no audio pipeline, so it cannot hear the call`);
    }
    browser = await launchBrowser();
    page = await browser.context.newPage();
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    await openUi(browser.context, ready, page);
  });

  after(async () => {
    if (ready && sid) await api(ready, 'DELETE', `/api/calls/${sid}/listen`).catch(() => null);
    await browser?.close();
    const exit = await app?.stop();
    await pulse?.stop();
    if (app) assert.deepEqual(exit, { code: 0, signal: null }, `the app should exit 0 on SIGTERM; stderr tail:\n${app.stderr().slice(-3000)}`);
    assert.deepEqual(pageErrors, [], 'no script errors in the page');
  });

  it('Settings → Audio lists the sound server’s sources, and the meters move with speech', async () => {
    await page.keyboard.press('Control+5');
    await page.waitForSelector('#audio-mic option[value="mic"]', { state: 'attached', timeout: 15_000 });
    const values = (sel) => page.locator(`${sel} option`).evaluateAll((os) => os.map((o) => o.value));
    const texts = (sel) => page.locator(`${sel} option`).evaluateAll((os) => os.map((o) => o.textContent));
    const mic = await values('#audio-mic');
    const sys = await values('#audio-system');
    assert.ok(mic.includes('mic'), `You offers the microphone "mic": ${mic}`);
    assert.ok(!mic.includes('call.monitor'), `You offers no monitor: ${mic}`);
    assert.ok(sys.includes('call.monitor') && sys.includes('micfeed.monitor'), `Them offers the monitors: ${sys}`);
    assert.ok(!sys.includes('mic'), `Them offers no microphone: ${sys}`);
    assert.equal(mic[0], 'default');
    assert.equal(mic.at(-1), '');
    assert.equal((await texts('#audio-mic'))[0], 'Default (Test-microphone)');
    assert.equal((await texts('#audio-system'))[0], 'Default (Monitor of Call)');
    assert.equal(await page.locator('#audio-unavailable').isVisible(), false);
    assert.match(await page.locator('#audio-engine-notice').innerText(), /no audio leaves it/);

    // The meters (POST /api/audio/meters while Settings is open) follow speech into the mic.
    const speaking = pulse.say('micfeed', 'Testing the microphone level, one two three four five.');
    await page.waitForFunction(() => Number(document.getElementById('meter-mic')?.getAttribute('aria-valuenow')) > 20, null, { timeout: 15_000 });
    await page.locator('#settings-audio').scrollIntoViewIfNeeded();
    await page.locator('#settings-audio').screenshot({ path: shot('settings') });
    await speaking;
  });

  it('Test records three seconds and shows what the engine heard', async () => {
    await page.locator('#audio-test-mic').click();
    await page.waitForFunction(() => /Recording/.test(document.getElementById('audio-test-mic-result')?.textContent ?? ''));
    await pulse.say('micfeed', 'We need the report.');
    const out = page.locator('#audio-test-mic-result');
    await page.waitForFunction(() => document.getElementById('audio-test-mic-result')?.dataset.peak !== undefined || document.getElementById('audio-test-mic-result')?.classList.contains('field-error'), null, {
      timeout: 60_000,
    });
    const text = await out.innerText();
    assert.ok(Number(await out.getAttribute('data-peak')) > 0, `the test heard the speech: ${text}`);
    assert.match(text, /Heard: |Nothing recognised/);
    assert.match(text, /Loudest:\s*\d+ %/);
    await page.locator('#settings-audio').screenshot({ path: shot('settings-test') });
  });

  it('after Start call and Listen, speech shows as a greyed partial, then its final turn', async () => {
    // This window starts calls without listening: the toggle is what the test presses.
    const pref = page.locator('#audio-listen-on-start');
    if (await pref.isChecked()) await pref.uncheck();
    await endLiveCalls(ready);
    await page.keyboard.press('Control+1');
    await startCallAnyway(page);
    await page.waitForSelector('#listen:not([hidden])', { timeout: 10_000 });
    sid = await page.locator('.app').getAttribute('data-session');
    assert.equal(await page.locator('#listen-toggle').getAttribute('aria-pressed'), 'false');
    await page.locator('#listen-toggle').click();
    await page.waitForSelector('#listen-toggle[aria-pressed="true"]', { timeout: 10_000 });
    const st = page.locator('#audio-status');
    await page
      .waitForSelector('#audio-status[data-state="listening"]', { timeout: 20_000 })
      .catch(async () => assert.fail(`listening did not start: ${await st.innerText()} (${await st.getAttribute('title')})`));
    assert.equal((await api(ready, 'GET', '/api/audio')).json.status.call_id, sid);

    await page.keyboard.press('Control+3');
    // Every partial row the page shows, as it shows them.
    await page.evaluate(() => {
      const seen = [];
      window.__partials = seen;
      const list = document.getElementById('transcript-partials');
      const record = () => {
        for (const li of list.querySelectorAll('.turn-partial')) seen.push({ turn: li.dataset.turnId, text: li.textContent, at: Date.now() });
      };
      new MutationObserver(record).observe(list, { childList: true, subtree: true, characterData: true });
    });

    const heard = async (sink, speaker, sentence, keywords) => {
      const before = await page.locator('#transcript .turn').count();
      const playing = pulse.say(sink, sentence);
      await page.waitForSelector('#transcript-partials .turn-partial', { timeout: 20_000 });
      const row = page.locator('#transcript-partials .turn-partial').first();
      assert.equal(await row.locator('.turn-speaker-name').innerText(), speaker);
      assert.equal(await row.evaluate((el) => getComputedStyle(el).fontStyle), 'italic', 'a partial is greyed (italic, muted)');
      await page.screenshot({ path: shot(`partial-${speaker.toLowerCase()}`) });
      await playing;
      // The final turn replaces it.
      await page.waitForFunction((n) => document.querySelectorAll('#transcript .turn').length > n, before, { timeout: 60_000 });
      await page.waitForFunction(() => document.querySelectorAll('#transcript-partials .turn-partial').length === 0, null, { timeout: 15_000 });
      const last = page.locator('#transcript .turn').last();
      assert.equal(await last.locator('.turn-speaker-name').innerText(), speaker);
      const words = (await last.locator('.turn-words').innerText()).trim();
      assert.ok(words.length > 0, 'the final turn has text');
      assert.match(words.toLowerCase(), keywords, `the engine heard something of "${sentence}": "${words}"`);
      const stored = (await api(ready, 'GET', `/api/calls/${sid}/transcript`)).json;
      const list = Array.isArray(stored) ? stored : stored.items;
      assert.ok(
        list.some((t) => t.speaker === speaker && t.text.trim() === words),
        `the turn shown is the stored one: ${JSON.stringify(list.map((t) => [t.speaker, t.text]))}`,
      );
      return words;
    };

    const you = await heard('micfeed', 'You', 'We need the report before the meeting tomorrow.', /report|meeting|tomorrow|need/);
    const them = await heard('call', 'Them', 'Can we talk about the report and the price?', /report|price|talk/);
    console.log(`# heard: You: "${you}" · Them: "${them}"`);
    const partials = await page.evaluate(() => window.__partials);
    assert.ok(partials.length >= 2, `partials were shown before the finals: ${JSON.stringify(partials)}`);
    await page.screenshot({ path: shot('transcript') });
    await page.locator('.callbar').screenshot({ path: shot('callbar-listening') });
  });

  it('the overlay shows that it is listening; Stop listening stops', async () => {
    // Start call opened the overlay already (the Overlay button would bring that same window).
    const opened = browser.context.pages().find((p) => /view=overlay/.test(p.url()));
    const popup = opened ?? (await Promise.all([browser.context.waitForEvent('page'), page.click('#open-overlay')]))[0];
    await popup.waitForSelector(`#overlay[data-conn="live"][data-call="${sid}"]`, { timeout: 15_000 });
    await popup.waitForSelector('#overlay-hearing[data-state="listening"]', { timeout: 10_000 });
    assert.equal(await popup.locator('#overlay-hearing').innerText(), 'Listening');
    await popup.setViewportSize({ width: 380, height: 300 });
    await popup.screenshot({ path: shot('overlay-listening') });

    await page.locator('#listen-toggle').click();
    await page.waitForSelector('#listen-toggle[aria-pressed="false"]', { timeout: 10_000 });
    assert.equal((await api(ready, 'GET', '/api/audio')).json.status.state, 'idle');
    await popup.waitForSelector('#overlay-hearing[data-state="idle"]', { timeout: 10_000 });
    await popup.close();
  });
});
