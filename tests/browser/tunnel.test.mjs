// Browser tests of Settings → Tunnel and the call bar's tunnel chip, against the real app in
// headless mode. The "external tunnel" is a small TCP relay this test runs on 127.0.0.1 that
// forwards to the app's callback listener, so the app's signed self-probe really goes through it
// (→ online, verified). A closed port stands in for a tunnel that is not running (→ failed).
//
//   cd ui && npm run build && npm run test:e2e

import assert from 'node:assert/strict';
import net from 'node:net';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { api, ensureArtifacts, launchBrowser, openUi, skipReason, sleep, startApp } from './harness.mjs';

const reason = skipReason();
if (reason && process.env.SW_E2E_REQUIRE === '1') throw new Error(`browser tests cannot run: ${reason}`);
if (reason) console.log(`# SKIP browser tests: ${reason}`);

const shot = (name) => path.join(ensureArtifacts(), `${name}.png`);

/** A TCP relay 127.0.0.1:<port> → target (host:port); counts the connections it forwarded. */
async function startRelay(target) {
  const u = new URL(target);
  const sockets = new Set();
  let connections = 0;
  const server = net.createServer((client) => {
    connections++;
    const upstream = net.connect(Number(u.port), u.hostname);
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => {
        client.destroy();
        upstream.destroy();
      });
    }
    client.pipe(upstream);
    upstream.pipe(client);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    origin: `http://127.0.0.1:${server.address().port}`,
    connections: () => connections,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise((r) => server.close(r));
    },
  };
}

/** A loopback port nothing listens on (bound, then released). */
async function closedPort() {
  const s = net.createServer();
  await new Promise((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address();
  await new Promise((r) => s.close(r));
  return port;
}

describe('web UI: the callback tunnel', { skip: reason ?? false }, () => {
  let app;
  let ready;
  let browser;
  let page;
  let relay;
  const pageErrors = [];

  before(async () => {
    app = await startApp();
    ready = app.ready;
    const probe = await api(ready, 'GET', '/api/tunnel');
    assert.equal(probe.status, 200, `GET /api/tunnel → ${probe.status}: is ${app.label} older than the tunnel? Rebuild it.`);
    relay = await startRelay(ready.callback_url);
    browser = await launchBrowser();
    await browser.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: new URL(ready.ui_url).origin });
    page = await browser.context.newPage();
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    await openUi(browser.context, ready, page);
  });

  after(async () => {
    await browser?.close();
    await relay?.close();
    const exit = await app?.stop();
    if (app) {
      // Besides the ready line, headless mode prints one `{"event":"tunnel"}` line per change.
      for (const l of app.extraStdout()) assert.equal(JSON.parse(l).event, 'tunnel', `unexpected stdout line: ${l}`);
      assert.deepEqual(exit, { code: 0, signal: null }, `the app should exit 0 on SIGTERM; stderr tail:\n${app.stderr().slice(-2000)}`);
    }
    assert.deepEqual(pageErrors, []);
  });

  const chip = () => page.locator('#tunnel-status');
  const state = () => page.locator('#tunnel-settings-status');
  const waitState = (s, timeout = 20_000) =>
    page.waitForFunction((want) => document.querySelector('#tunnel-settings-status')?.dataset.state === want, s, { timeout });

  async function startExternal(url) {
    await page.locator('#tunnel-kind-external').check();
    await page.locator('#tunnel-url').fill(url);
    await page.locator('#tunnel-start').click();
  }

  it('off at first; the chip opens Settings → Tunnel; a bad URL is reported next to its field', async () => {
    // No tunnel set up: the call bar says nothing about it (no "Tunnel: off" on a first
    // screen); Settings has it. The chip shows once a tunnel is set up (below).
    assert.equal(await chip().textContent(), 'Tunnel: off');
    assert.equal(await chip().isVisible(), false);
    await page.click('#tab-settings');
    assert.equal(await page.locator('#tab-settings').getAttribute('aria-selected'), 'true');
    await page.locator('#settings-tunnel').waitFor();
    assert.equal(await state().innerText(), 'Off');
    assert.match(await page.locator('#tunnel-allow').innerText(), /Nothing/);
    assert.equal(await page.locator('#tunnel-allow-copy').isVisible(), false);
    assert.equal(await page.locator('#tunnel-stop').isDisabled(), true);

    // ngrok is the default kind; without an authtoken the form asks for one (no request).
    assert.equal(await page.locator('#tunnel-kind-ngrok').isChecked(), true);
    assert.equal(await page.locator('#tunnel-authtoken-state').innerText(), 'not set');
    await page.locator('#tunnel-start').click();
    await page.locator('#tunnel-authtoken-error').waitFor();
    assert.match(await page.locator('#tunnel-authtoken-error').innerText(), /authtoken/);

    // The API's 400 lands under the URL field.
    await startExternal('ftp://desk.example.net');
    const err = page.locator('#tunnel-url-error');
    await err.waitFor();
    assert.match(await err.innerText(), /https:\/\/ or http:\/\//);
    assert.equal(await page.locator('#tunnel-url').getAttribute('aria-invalid'), 'true');
    assert.equal((await api(ready, 'GET', '/api/tunnel')).json.state, 'off');
  });

  it('an external URL through a relay to the callback listener: online, verified, the allow line copied', async () => {
    await startExternal(relay.origin);
    await waitState('online');
    assert.equal(await page.locator('#tunnel-url-error').isVisible(), false);
    assert.match(await page.locator('#tunnel-state-text').innerText(), new RegExp(`Online at ${relay.origin}`));
    assert.match(await page.locator('#tunnel-checked').innerText(), /verified/);
    assert.equal(await page.locator('#tunnel-public-url').innerText(), relay.origin);
    assert.equal(await page.locator('#tunnel-callback-url').innerText(), relay.origin);
    // The Callback card shows the advertised URL too.
    await page.waitForFunction((u) => document.querySelector('#setting-callback-url')?.textContent === u, relay.origin);
    const line = `STAGEWHISPER_ALLOW_CALLBACK_URLS=${relay.origin}`;
    assert.equal(await page.locator('#tunnel-allow').innerText(), line);
    assert.ok(relay.connections() >= 1, 'the self-probe went through the relay');
    const t = (await api(ready, 'GET', '/api/tunnel')).json;
    assert.equal(t.state, 'online');
    assert.equal(t.verified, true);
    assert.equal(t.assistant_allow.line, line);

    await page.locator('#tunnel-allow-copy').click();
    await page.waitForFunction(() => document.querySelector('#tunnel-allow-copy')?.textContent === 'Copied');
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), line);

    // The call bar follows, with the URL as tooltip.
    await page.waitForFunction(() => document.querySelector('#tunnel-status')?.textContent === 'Tunnel: online');
    assert.match(await chip().getAttribute('title'), new RegExp(relay.origin));

    // Check probes again through the relay.
    const before = relay.connections();
    await page.locator('#tunnel-check').click();
    await page.waitForFunction(() => /Checked again/.test(document.querySelector('#tunnel-result')?.textContent ?? ''));
    await waitState('online');
    for (let i = 0; i < 50 && relay.connections() <= before; i++) await sleep(100);
    assert.ok(relay.connections() > before, 'Check probed through the relay again');

    // "Rotate callback token…" opens the existing confirmation.
    await page.locator('#tunnel-rotate').click();
    await page.locator('#confirm-rotate').waitFor();
    await page.getByRole('button', { name: 'Cancel' }).click();

    await page.locator('#settings-tunnel').screenshot({ path: shot('tunnel-online-light') });
    const dark = await launchBrowser({ colorScheme: 'dark' });
    try {
      const p = await openUi(dark.context, ready);
      await p.keyboard.press('Control+5');
      await p.waitForFunction(() => document.querySelector('#tunnel-settings-status')?.dataset.state === 'online');
      await p.locator('#settings-tunnel').screenshot({ path: shot('tunnel-online-dark') });
    } finally {
      await dark.close();
    }

    await page.locator('#tunnel-stop').click();
    await waitState('off');
    await page.waitForFunction(() => document.querySelector('#tunnel-status')?.textContent === 'Tunnel: off');
    assert.match(await page.locator('#tunnel-result').innerText(), /Stopped/);
    assert.match(await page.locator('#tunnel-allow').innerText(), /Nothing/);
    await page.waitForFunction((u) => document.querySelector('#setting-callback-url')?.textContent === u, ready.callback_url);
    assert.equal((await api(ready, 'GET', '/api/tunnel')).json.state, 'off');
  });

  it('an external URL on a closed port: failed, with a readable reason on the card and the chip', async () => {
    const port = await closedPort();
    const origin = `http://127.0.0.1:${port}`;
    await startExternal(origin);
    await waitState('failed');
    const text = await page.locator('#tunnel-state-text').innerText();
    assert.match(text, /nothing is listening/i);
    assert.doesNotMatch(text, /connection_refused/);
    await page.waitForFunction(() => document.querySelector('#tunnel-status')?.textContent === 'Tunnel: failed');
    assert.match(await chip().getAttribute('title'), /nothing is listening/i);
    assert.equal(await page.locator('#tunnel-callback-url').innerText(), ready.callback_url, 'a failed tunnel is not advertised');
    await page.locator('#settings-tunnel').screenshot({ path: shot('tunnel-failed-light') });

    await page.locator('#tunnel-stop').click();
    await waitState('off');
    assert.equal(await chip().innerText(), 'Tunnel: off');
  });
});
