// Browser test of the `clawborrator` assistant kind's permission card, against the real app in
// headless mode and the conformance fake of the clawborrator hub (the example `fake_hub` of the
// dev-only crate stagewhisper-fake-hub, written from the hub's AsyncAPI: the real hub is not public, so it is the one
// fake here).
//
//   cargo build -p stagewhisper-fake-hub --example fake_hub
//   cd ui && npm run build && npm run test:e2e
//
// Covered: Settings → Assistant for the kind (hub URL, token, the hub's session list into the
// picker, save → online), a prompt from the composer reaching the hub, a permission request shown
// as a card, Allow by keyboard (the hub gets the approval; the card settles with who decided), a
// request resolved by another operator settling on its own, and a reloaded view seeing both settled.
//
// SW_E2E_FAKE_HUB: the fake hub's binary (default: target/debug/examples/fake_hub).

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { after, before, describe, it } from 'node:test';
import { REPO, api, ensureArtifacts, launchBrowser, openUi, skipReason, startApp } from './harness.mjs';

const FAKE_HUB = process.env.SW_E2E_FAKE_HUB || path.join(REPO, 'target', 'debug', 'examples', 'fake_hub');
let reason = skipReason();
if (!reason && !existsSync(FAKE_HUB)) reason = `the fake hub is not built (${path.relative(REPO, FAKE_HUB)}): cargo build -p stagewhisper-fake-hub --example fake_hub`;
if (reason && process.env.SW_E2E_REQUIRE === '1') throw new Error(`browser tests cannot run: ${reason}`);
if (reason) console.log(`# SKIP permission card tests: ${reason}`);

const shot = (name) => path.join(ensureArtifacts(), `${name}.png`);

/** Starts the fake hub; `cmd(obj)` sends one command and resolves with its one-line answer. */
async function startFakeHub() {
  const proc = spawn(FAKE_HUB, [], { stdio: ['pipe', 'pipe', 'inherit'] });
  const rl = createInterface({ input: proc.stdout });
  const waiting = [];
  rl.on('line', (l) => waiting.shift()?.(JSON.parse(l)));
  const info = await new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('the fake hub printed no URL within 10 s')), 10_000);
    waiting.push((v) => (clearTimeout(t), resolve(v)));
    proc.once('exit', (code) => reject(new Error(`the fake hub exited (${code})`)));
  });
  return {
    ...info,
    cmd(obj) {
      return new Promise((resolve) => {
        waiting.push(resolve);
        proc.stdin.write(JSON.stringify(obj) + '\n');
      });
    },
    async frames() {
      return (await this.cmd({ cmd: 'frames' })).frames;
    },
    async close() {
      proc.stdin.end();
      await new Promise((r) => (proc.exitCode !== null ? r() : proc.once('exit', r)));
    },
  };
}

async function until(what, f, timeout = 10_000) {
  const end = Date.now() + timeout;
  for (;;) {
    const v = await f();
    if (v) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

describe('web UI: a clawborrator permission card', { skip: reason ?? false }, () => {
  let app;
  let ready;
  let hub;
  let browser;
  let page;
  const pageErrors = [];

  before(async () => {
    app = await startApp();
    ready = app.ready;
    hub = await startFakeHub();
    browser = await launchBrowser();
    page = await browser.context.newPage();
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    await openUi(browser.context, ready, page);
  });

  after(async () => {
    await browser?.close();
    await hub?.close();
    const exit = await app?.stop();
    if (app) assert.deepEqual(exit, { code: 0, signal: null }, `the app should exit 0 on SIGTERM; stderr tail:\n${app.stderr().slice(-2000)}`);
  });

  it('is set up in Settings → Assistant with the hub’s session picker', async () => {
    await page.keyboard.press('Control+5');
    await page.locator('#settings-assistant').waitFor();
    await page.locator('label[data-kind="clawborrator"]').click();
    const form = page.locator('#claw-form');
    await form.waitFor();
    // The incoming form is not shown for this kind.
    assert.equal(await page.locator('#assistant-form').isHidden(), true);
    await page.locator('#claw-hub-url').fill(hub.url);
    await page.locator('#claw-token').fill(hub.token);
    await page.locator('#claw-list-sessions').click();
    const picker = page.locator('#claw-session-picker');
    await picker.waitFor();
    await until('the hub’s sessions in the picker', async () => (await picker.locator('option').count()) > 1);
    await picker.selectOption(hub.session_id);
    assert.equal(await page.locator('#claw-session-id').inputValue(), hub.session_id);
    await page.locator('#claw-save').click();
    await page.locator('#assistant-settings-status[data-status="online"]').waitFor({ timeout: 15_000 });
    // The token is write-only: emptied once the PUT is answered (the status follows the link's events).
    await page.waitForFunction(() => /^Saved\./.test(document.querySelector('#claw-result')?.textContent ?? ''));
    assert.equal(await page.locator('#claw-token').inputValue(), '');
    assert.equal(await page.locator('#claw-token-state').innerText(), 'set');
    const view = await api(ready, 'GET', '/api/assistant');
    assert.equal(view.json.kind, 'clawborrator');
    assert.ok(!JSON.stringify(view.json).includes(hub.token), 'the token is never answered back');
    await page.screenshot({ path: shot('clawborrator-settings') });
  });

  it('shows a permission request as a card that is allowed by keyboard and settles', async () => {
    await page.keyboard.press('Control+1');
    await page.locator('.composer-input').fill('Clean the build, please');
    await page.keyboard.press('Enter');
    await until('the prompt at the hub', async () => (await hub.frames()).some((f) => f.type === 'prompt' && f.text === 'Clean the build, please'));

    await hub.cmd({ cmd: 'permission', request_id: 'req-e2e-1', tool: 'Bash', input_preview: 'rm -rf build/ <b>not bold</b>' });
    const card = page.locator('.perm-card[data-request-id="req-e2e-1"]');
    await card.waitFor();
    assert.equal(await card.getAttribute('data-state'), 'pending');
    assert.equal(await card.locator('.perm-tool').innerText(), 'Bash');
    // Shown as text, never as markup.
    assert.equal(await card.locator('.perm-preview').innerText(), 'rm -rf build/ <b>not bold</b>');
    assert.equal(await card.locator('.perm-preview b').count(), 0);
    await page.screenshot({ path: shot('permission-pending') });

    // Keyboard only: Tab from Deny back to Allow (Shift+Tab), then Enter.
    await card.locator('.perm-deny').focus();
    await page.keyboard.press('Shift+Tab');
    assert.equal(await page.evaluate(() => document.activeElement?.classList.contains('perm-allow')), true, 'Allow has the focus');
    await page.keyboard.press('Enter');

    const settled = page.locator('.perm-card[data-request-id="req-e2e-1"][data-state="allow"]');
    await settled.waitFor();
    assert.match(await settled.locator('.perm-settled').innerText(), /^Allowed by \S+/);
    assert.equal(await settled.locator('button').count(), 0, 'a settled card has no buttons');
    const approval = await until('the approval at the hub', async () => (await hub.frames()).find((f) => f.type === 'approval' && f.requestId === 'req-e2e-1'));
    assert.equal(approval.decision, 'allow');
    // A second decision is refused.
    const again = await api(ready, 'POST', '/api/permissions/req-e2e-1', { decision: 'deny' });
    assert.equal(again.status, 409);
    assert.equal(again.json.error, 'already_resolved');
    await page.screenshot({ path: shot('permission-allowed') });
  });

  it('settles a card another operator resolved, and a reloaded view sees both settled', async () => {
    await hub.cmd({ cmd: 'permission', request_id: 'req-e2e-2', tool: 'Edit', input_preview: 'src/main.rs' });
    await page.locator('.perm-card[data-request-id="req-e2e-2"][data-state="pending"]').waitFor();
    const r = await hub.cmd({ cmd: 'resolve', request_id: 'req-e2e-2', decision: 'deny', resolver: 'bob' });
    assert.equal(r.ok, true);
    const denied = page.locator('.perm-card[data-request-id="req-e2e-2"][data-state="deny"]');
    await denied.waitFor();
    assert.equal(await denied.locator('.perm-settled').innerText(), 'Denied by bob');

    const chat = await page.locator('.app').getAttribute('data-session');
    await page.reload();
    await page.waitForSelector('.app[data-conn="live"]', { timeout: 15_000 });
    // Open the chat again from the list of past calls and chats.
    await page.keyboard.press('Control+4');
    await page.locator(`.history-item[data-session-id="${chat}"]`).click();
    await page.keyboard.press('Control+1');
    await page.locator('.perm-card[data-request-id="req-e2e-1"][data-state="allow"]').waitFor();
    await page.locator('.perm-card[data-request-id="req-e2e-2"][data-state="deny"]').waitFor();
    assert.deepEqual(pageErrors, []);
  });
});
