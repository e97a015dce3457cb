// Noticing the call in the browser, against the real app and a private PulseAudio (harness.mjs
// `startPulse`): a fake meeting app (`parec` recording from the microphone as "zoom") makes the
// banner "Zoom is using the microphone — Start listening?" appear; Start starts a call that
// listens; with speech on the microphone and nothing on the call's audio the live view says
// "No call audio heard …" with a button to the device choice; when the meeting app lets go of
// the microphone the banner offers to end the call, and End ends it. Settings shows the
// detection card, switched on.
//
// The silence rule is a minute; the app is started in its test mode (a debug build with
// STAGEWHISPER_TEST_FAULT_INJECTION=i-am-a-test, which a release build ignores) with
// STAGEWHISPER_TEST_SILENCE_SECS=3, so the line comes after three seconds. The minute itself is
// unit-tested with the app's manual clock (crates/stagewhisper-audio/src/service/silence.rs).
//
// Without PulseAudio / espeak-ng it is skipped with the reason, or fails when SW_E2E_REQUIRE=1
// or SW_AUDIO_REQUIRE=1 (CI). Screenshots go to tests/artifacts/detect-*.png.

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { api, audioRequired, audioSkipReason, ensureArtifacts, launchBrowser, openUi, skipReason, sleep, startApp, startPulse } from './harness.mjs';

const reason = skipReason();
if (reason && process.env.SW_E2E_REQUIRE === '1') throw new Error(`browser tests cannot run: ${reason}`);
const audioReason = audioSkipReason();
const shot = (name) => path.join(ensureArtifacts(), `detect-${name}.png`);

describe('noticing a call through a private PulseAudio', { skip: reason ?? (audioReason && !audioRequired() ? audioReason : false) }, () => {
  let pulse;
  let app;
  let ready;
  let browser;
  let page;
  let zoom;
  let speaking = true;
  const pageErrors = [];

  before(async () => {
    if (audioReason) throw new Error(`cannot hear a call here: ${audioReason}`);
    pulse = await startPulse();
    app = await startApp([], {
      env: { ...pulse.env, STAGEWHISPER_TEST_FAULT_INJECTION: 'i-am-a-test', STAGEWHISPER_TEST_SILENCE_SECS: '3' },
    });
    ready = app.ready;
    const d = await api(ready, 'GET', '/api/audio/detection');
    if (d.status !== 200) throw new Error(`GET /api/audio/detection → ${d.status}: this build cannot notice calls`);
    browser = await launchBrowser();
    page = await browser.context.newPage();
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    await openUi(browser.context, ready, page);
  });

  after(async () => {
    speaking = false;
    zoom?.kill('SIGTERM');
    await browser?.close();
    const exit = await app?.stop();
    await pulse?.stop();
    if (app) assert.deepEqual(exit, { code: 0, signal: null }, `the app should exit 0 on SIGTERM; stderr tail:\n${app.stderr().slice(-3000)}`);
    assert.deepEqual(pageErrors, [], 'no script errors in the page');
  });

  it('offers to listen when a meeting app takes the microphone; Start listens', async () => {
    zoom = spawn('parec', ['-d', 'mic', '--raw', '--property=application.name=zoom', '--property=application.process.binary=zoom'], {
      env: { ...process.env, PULSE_SERVER: pulse.server, XDG_RUNTIME_DIR: pulse.dir, HOME: pulse.dir },
      stdio: ['ignore', 'ignore', 'ignore'],
    });
    const banner = page.locator('.call-offer[data-app="zoom"]');
    await banner.waitFor({ state: 'visible', timeout: 15_000 });
    assert.match(await banner.innerText(), /Zoom is using the microphone — Start listening\?/);
    await banner.screenshot({ path: shot('offer') });
    await banner.locator('[data-action="start"]').click();
    await banner.waitFor({ state: 'detached', timeout: 10_000 });
    for (let i = 0; ; i++) {
      const a = await api(ready, 'GET', '/api/audio');
      if (a.json?.status?.state === 'listening' && a.json.status.call_id) break;
      assert.ok(i < 100, `listening after Start: ${JSON.stringify(a.json?.status)}`);
      await sleep(100);
    }
  });

  it('says so when the call is silent while you speak, with a way to the device choice', async () => {
    const talk = (async () => {
      while (speaking) await pulse.say('micfeed', 'Hello, can you hear me? I am talking and talking.');
    })();
    const line = page.locator('#audio-silence');
    await line.waitFor({ state: 'visible', timeout: 30_000 });
    assert.match(await line.innerText(), /No call audio heard for 3 s — is the call playing through another device\?/);
    await line.screenshot({ path: shot('silence') });
    await line.locator('#audio-silence-choose').click();
    await page.locator('#audio-system').waitFor({ state: 'visible', timeout: 10_000 });
    speaking = false;
    await talk;
    assert.equal(await page.locator('#detect-enabled').isChecked(), true, 'detection is on in Settings');
  });

  it('offers to end the call when the meeting app lets go of the microphone; End ends it', async () => {
    const call = (await api(ready, 'GET', '/api/audio')).json.status.call_id;
    zoom.kill('SIGTERM');
    const end = page.locator('.call-end-offer[data-app="zoom"]');
    await end.waitFor({ state: 'visible', timeout: 15_000 });
    assert.match(await end.innerText(), /let go of the microphone/);
    await end.locator('[data-action="end"]').click();
    for (let i = 0; ; i++) {
      const s = (await api(ready, 'GET', '/api/sessions')).json.find((x) => x.session_id === call);
      if (s?.ended_at) break;
      assert.ok(i < 100, `the call ended: ${JSON.stringify(s)}`);
      await sleep(100);
    }
    await end.waitFor({ state: 'detached', timeout: 10_000 });
  });
});
