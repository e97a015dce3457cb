// Browser test of Settings → Assistant for the `byo` kind (ui/src/kinds/byo.ts), against the real
// app in headless mode: choose the BYO relay, create a pairing code (the countdown runs, both pair
// commands and the OpenClaw 2026.9.x config block copy to the clipboard), complete the pairing
// from the test as the plugin does, see the result, the status, the model and the capability
// profile, run Test connection, Unpair.
//
//   cd ui && npm run build && npm run test:e2e
//
// The plugin's side is played here (a stand-in, not the real plugin: tests/byo/ runs the real
// Hermes and OpenClaw plugins against the app): an X25519 key pair from Node's crypto and
// `POST …/api/v1/openclaw/pair/complete` — what the OpenClaw plugin's pair CLI does — then the
// relay API over real HTTP: the job stream, a heartbeat, the capability probe's answer (in
// clear by design) and the connection test's `test-reply`.

import assert from 'node:assert/strict';
import { generateKeyPairSync } from 'node:crypto';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { api, ensureArtifacts, launchBrowser, openUi, skipReason, startApp } from './harness.mjs';

const reason = skipReason();
if (reason && process.env.SW_E2E_REQUIRE === '1') throw new Error(`browser tests cannot run: ${reason}`);
if (reason) console.log(`# SKIP browser tests: ${reason}`);

const shot = (name) => path.join(ensureArtifacts(), `${name}.png`);
const HOST_LABEL = 'e2e-openclaw-host';
const MODEL = 'openclaw/e2e-model';
const PROFILE = 'A stand-in plugin: answers the connection test, holds no call content.';

/** The plugin's side of the relay (OpenClaw dialect), over real HTTP on loopback. */
function standInPlugin(apiUrl) {
  const base = `${apiUrl.replace(/\/$/, '')}/api/v1/openclaw`;
  const events = [];
  const posts = [];
  let pairing = null;
  let stream = null;
  const auth = () => ({ Authorization: `Bearer ${pairing.relay_token}`, 'Content-Type': 'application/json' });
  const post = async (route, body) => {
    const res = await fetch(`${base}${route}`, { method: 'POST', headers: auth(), body: JSON.stringify(body) });
    const text = await res.text();
    posts.push({ route, status: res.status });
    return { status: res.status, text };
  };
  async function onEvent(ev) {
    events.push(ev);
    if (ev.event_type === 'reasoning_job' && ev.purpose === 'capability_probe') {
      await post(`/reasoning-jobs/${ev.job_id}/complete`, {
        job_id: ev.job_id, status: 'completed', output: { raw_description: PROFILE }, error_code: null, error_message: null,
      });
    } else if (!ev.event_type && ev.action_type === 'connectivity_test') {
      await post(`/integrations/${pairing.integration_id}/test-reply`, { test_id: ev.id, content: `hi from ${HOST_LABEL}` });
    }
  }
  return {
    events,
    posts,
    get pairing() {
      return pairing;
    },
    /** What the pair CLI does: a fresh X25519 key pair, `pair/complete` without auth. */
    async pair(code) {
      const { publicKey } = generateKeyPairSync('x25519');
      const pub = Buffer.from(publicKey.export({ format: 'jwk' }).x, 'base64url').toString('base64');
      const res = await fetch(`${base}/pair/complete`, {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ pairing_code: code, host_label: HOST_LABEL, plugin_public_key: pub }),
      });
      const body = await res.json();
      if (res.status === 200) pairing = body;
      return { status: res.status, body };
    },
    /** Opens the job stream and handles its `data: ` lines until it ends; resolves with how it ended. */
    openStream() {
      const ctl = new AbortController();
      const done = (async () => {
        const res = await fetch(`${base}/integrations/${pairing.integration_id}/stream`, { headers: { ...auth(), Accept: '*/*' }, signal: ctl.signal });
        if (res.status !== 200) return { status: res.status, ended: 'refused' };
        const reader = res.body.getReader();
        const dec = new TextDecoder();
        let buf = '';
        try {
          for (;;) {
            const { done: end, value } = await reader.read();
            if (end) return { status: 200, ended: 'closed by the app' };
            buf += dec.decode(value, { stream: true });
            let i;
            while ((i = buf.indexOf('\n')) >= 0) {
              const line = buf.slice(0, i).replace(/\r$/, '');
              buf = buf.slice(i + 1);
              if (line.startsWith('data: ')) await onEvent(JSON.parse(line.slice(6)));
            }
          }
        } catch (e) {
          return { status: 200, ended: ctl.signal.aborted ? 'aborted' : `error: ${e}` };
        }
      })();
      stream = { ctl, done };
      return done;
    },
    heartbeat(token) {
      const headers = token ? { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json' } : auth();
      return fetch(`${base}/integrations/${pairing.integration_id}/heartbeat`, {
        method: 'POST',
        headers,
        body: JSON.stringify({ supports_assistant_tasks: true, supports_reasoning: true, reasoning_transport: 'openresponses', display_model: MODEL, provider_ref: 'openclaw', status: 'healthy', degraded_reason: null }),
      }).then(async (r) => ({ status: r.status, body: await r.text() }));
    },
    close() {
      stream?.ctl.abort();
    },
  };
}

describe('web UI: pairing the BYO relay', { skip: reason ?? false }, () => {
  let app;
  let ready;
  let browser;
  let page;
  let plugin;
  let firstStream;
  const pageErrors = [];

  before(async () => {
    app = await startApp();
    ready = app.ready;
    const probe = await api(ready, 'GET', '/api/providers');
    assert.equal(probe.status, 200, `GET /api/providers → ${probe.status}: is ${app.label} older than the BYO kind? Rebuild it.`);
    browser = await launchBrowser();
    await browser.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: new URL(ready.ui_url).origin });
    page = await browser.context.newPage();
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    await openUi(browser.context, ready, page);
  });

  after(async () => {
    plugin?.close();
    await browser?.close();
    const exit = await app?.stop();
    if (app) {
      assert.deepEqual(app.extraStdout(), [], 'the app printed more than the one ready line on stdout');
      assert.deepEqual(exit, { code: 0, signal: null }, `the app should exit 0 on SIGTERM; stderr tail:\n${app.stderr().slice(-2000)}`);
    }
  });

  const settingsStatus = () => page.locator('#assistant-settings-status');
  const clipboard = () => page.evaluate(() => navigator.clipboard.readText());
  async function copy(id) {
    await page.locator(`#${id}`).click();
    await page.waitForFunction((sel) => document.querySelector(sel)?.textContent === 'Copied', `#${id}`);
    return clipboard();
  }

  it('Settings: choosing the BYO relay shows its card; a pairing code comes with a countdown and both commands, each copied by its button', async () => {
    await page.keyboard.press('Control+5');
    await page.locator('#assistant-kind-byo').check();
    await page.locator('#byo-settings').waitFor();
    assert.equal(await page.locator('#byo-code-card').isHidden(), true, 'no code before asking for one');
    assert.equal(await page.locator('#byo-pair').innerText(), 'Create pairing code');
    await page.locator('#byo-pair').click();
    await page.locator('#byo-code-card').waitFor();
    // The app switched to the kind and made the code the card shows.
    const a = (await api(ready, 'GET', '/api/assistant')).json;
    assert.equal(a.kind, 'byo');
    assert.equal(a.status, 'waiting_for_pairing');
    assert.equal(a.e2ee, true);
    await page.waitForFunction(() => document.querySelector('#assistant-settings-status')?.dataset.status === 'waiting_for_pairing');
    const code = await page.locator('#byo-code').innerText();
    assert.match(code, /^[0-9A-Z]{4,}(-[0-9A-Z]{4,})+$/, `a human-typable code: ${code}`);
    // The countdown: 10 minutes, and it runs.
    const first = await page.locator('#byo-countdown').innerText();
    assert.match(first, /^valid for (10:00|9:[0-5]\d)$/);
    await page.waitForFunction((t) => {
      const now = document.querySelector('#byo-countdown')?.textContent ?? '';
      return /^valid for \d+:\d\d$/.test(now) && now !== t;
    }, first, { timeout: 5000 });
    // Both commands, as the API answers them, each with a working Copy button.
    const hermes = await page.locator('#byo-command-hermes').innerText();
    const openclaw = await page.locator('#byo-command-openclaw').innerText();
    const url = ready.callback_url.replace(/\/$/, '');
    assert.equal(hermes, `stagewhisper-hermes pair --code ${code} --api-url ${url}`);
    assert.equal(openclaw, `openclaw stagewhisper pair --code ${code} --api-url ${url}`);
    assert.equal(await copy('byo-copy-hermes'), hermes);
    assert.equal(await copy('byo-copy-openclaw'), openclaw);
    // The OpenClaw 2026.9.x config block (its pair CLI crashes): shown when opened, copied whole.
    await page.locator('#byo-openclaw-2026-9 summary').click();
    const block = JSON.parse(await copy('byo-copy-config'));
    assert.equal(block.channels.stagewhisper.apiBaseUrl, url);
    assert.equal(block.plugins.entries.stagewhisper.config.transport, 'sse');
    assert.equal(block.gateway.http.endpoints.responses.enabled, true);
    assert.equal(await page.locator('#byo-paired').isHidden(), true);
    await page.screenshot({ path: shot('byo-pairing-code') });
  });

  it('pairing: a wrong code is refused; the code the user copied pairs, and the card shows the result', async () => {
    // What the user pastes on the assistant's computer: the OpenClaw command, copied again.
    const line = await copy('byo-copy-openclaw');
    const m = /--code (\S+) --api-url (\S+)$/.exec(line);
    assert.ok(m, `a pair command on the clipboard: ${line}`);
    plugin = standInPlugin(m[2]);
    const wrong = await plugin.pair('ZZZZZ-ZZZZZ');
    assert.equal(wrong.status, 400);
    assert.equal(typeof wrong.body.detail, 'string');
    const ok = await plugin.pair(m[1]);
    assert.equal(ok.status, 200, JSON.stringify(ok.body));
    for (const f of ['integration_id', 'relay_token', 'byo_public_key']) assert.equal(typeof ok.body[f], 'string', f);
    // The result replaces the (used) code.
    await page.waitForFunction(() => /^Paired with /.test(document.querySelector('#byo-result')?.textContent ?? ''));
    assert.equal(await page.locator('#byo-result').innerText(), `Paired with ${HOST_LABEL} (openclaw).`);
    assert.equal(await page.locator('#byo-code-card').isHidden(), true);
    await page.locator('#byo-paired').waitFor();
    assert.equal(await page.locator('#byo-host').innerText(), `${HOST_LABEL} (openclaw)`);
    assert.equal(await page.locator('#byo-pair').innerText(), 'Pair another assistant');
    // The code is used up.
    assert.equal((await plugin.pair(m[1])).status, 400);
    // Paired, but nothing connected yet.
    await page.waitForFunction(() => document.querySelector('#assistant-settings-status')?.dataset.status === 'offline');
  });

  it('status: the plugin opens its stream and heartbeats → online, its model and its capability profile shown', async () => {
    firstStream = plugin.openStream();
    const hb = await plugin.heartbeat();
    assert.equal(hb.status, 200, hb.body);
    await page.waitForFunction(() => document.querySelector('#assistant-settings-status')?.dataset.status === 'online', null, { timeout: 15_000 });
    await page.waitForFunction((m) => document.querySelector('#byo-model')?.textContent === m, MODEL);
    assert.notEqual(await page.locator('#byo-heartbeat').innerText(), 'none yet');
    // The automatic capability probe once the plugin first connected.
    await page.waitForFunction((p) => document.querySelector('#byo-profile')?.textContent === p, PROFILE, { timeout: 15_000 });
    assert.ok(plugin.events.some((e) => e.event_type === 'reasoning_job' && e.purpose === 'capability_probe'));
    assert.equal((await api(ready, 'GET', '/api/assistant')).json.capabilities.raw_description, PROFILE);
    await page.screenshot({ path: shot('byo-paired-online') });
  });

  it('Test connection: the plugin gets a connectivity_test task and its answer shows on the card', async () => {
    assert.equal(await page.locator('#byo-test').innerText(), 'Not run.');
    await page.locator('#byo-test-btn').click();
    await page.waitForFunction(() => /^OK — /.test(document.querySelector('#byo-test')?.textContent ?? ''), null, { timeout: 15_000 });
    assert.equal(await page.locator('#byo-test').innerText(), `OK — hi from ${HOST_LABEL}`);
    assert.ok(plugin.events.some((e) => e.action_type === 'connectivity_test'));
    assert.ok(plugin.posts.some((p) => p.route.endsWith('/test-reply') && p.status === 200));
  });

  it('Unpair: the stream is closed, every later request of the plugin gets 401, the card forgets the pairing', async () => {
    const token = plugin.pairing.relay_token;
    await page.locator('#byo-unpair').click();
    await page.waitForFunction(() => /^Unpaired/.test(document.querySelector('#byo-result')?.textContent ?? ''));
    await page.locator('#byo-paired').waitFor({ state: 'hidden' });
    const ended = await Promise.race([firstStream, new Promise((r) => setTimeout(() => r({ ended: 'still open 10 s after Unpair' }), 10_000))]);
    assert.equal(ended.ended, 'closed by the app');
    assert.equal((await plugin.heartbeat(token)).status, 401);
    const again = await plugin.openStream();
    assert.equal(again.status, 401, JSON.stringify(again));
    const a = (await api(ready, 'GET', '/api/assistant')).json;
    assert.notEqual(a.integration_id ?? null, plugin.pairing.integration_id);
    assert.deepEqual(pageErrors, []);
    await page.screenshot({ path: shot('byo-unpaired') });
  });
});
