// Browser tests of Settings → Assistant: past calls (MCP) and the call view's "Your assistant
// read: …", against the real app in headless mode. The assistant's reads are real MCP requests
// (JSON-RPC over Streamable HTTP, as an MCP client sends them) to the app's `/mcp`.
//
//   cd ui && npm run build && npm run test:e2e

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { api, launchBrowser, openUi, skipReason, startApp } from './harness.mjs';

const reason = skipReason();
if (reason && process.env.SW_E2E_REQUIRE === '1') throw new Error(`browser tests cannot run: ${reason}`);
if (reason) console.log(`# SKIP browser tests: ${reason}`);

/** One MCP tool call, as an MCP client makes it (stateless Streamable HTTP). */
async function mcpCall(url, token, name, args) {
  const res = await fetch(url, {
    method: 'POST',
    headers: {
      Authorization: `Bearer ${token}`,
      'Content-Type': 'application/json',
      Accept: 'application/json, text/event-stream',
      'MCP-Protocol-Version': '2025-06-18',
    },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name, arguments: args } }),
  });
  return { status: res.status, json: await res.json() };
}

describe('web UI: the assistant looks up past calls (MCP)', { skip: reason ?? false }, () => {
  let app;
  let browser;
  let page;
  const pageErrors = [];

  before(async () => {
    app = await startApp();
    browser = await launchBrowser();
    await browser.context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: new URL(app.ready.ui_url).origin });
    page = await browser.context.newPage();
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    await openUi(browser.context, app.ready, page);
  });

  after(async () => {
    await browser?.close();
    await app?.stop();
    assert.deepEqual(pageErrors, []);
  });

  it('off at first; the switch turns it on and shows the URL, the token and each assistant’s set-up', async () => {
    await page.click('#tab-settings');
    const toggle = page.locator('#mcp-enabled');
    await toggle.waitFor();
    assert.equal(await toggle.isChecked(), false);
    assert.equal(await page.locator('#mcp-details').isVisible(), false);
    assert.match(await page.locator('#mcp-explain').innerText(), /private stay hidden/);
    const { status } = await mcpCall(`${app.ready.ui_url}mcp`, 'x', 'list_calls', {});
    assert.equal(status, 404, 'off: /mcp is not there');

    await toggle.click();
    await page.locator('#mcp-details').waitFor();
    const view = (await api(app.ready, 'GET', '/api/mcp')).json;
    assert.equal(view.enabled, true);
    assert.equal(await page.locator('#mcp-url').innerText(), view.url);
    assert.doesNotMatch(await page.locator('#mcp-token').innerText(), new RegExp(view.token), 'the token is masked');
    const hermes = await page.locator('#mcp-snippet-hermes pre').innerText();
    assert.match(hermes, /^mcp_servers:\n {2}stagewhisper:\n {4}url: "/);
    assert.ok(hermes.includes(view.url) && hermes.includes(`Authorization: "Bearer ${view.token}"`), hermes);
    const claude = await page.locator('#mcp-snippet-claude pre').innerText();
    assert.equal(claude, `claude mcp add --transport http stagewhisper ${view.url} --header "Authorization: Bearer ${view.token}"`);
    const openclaw = await page.locator('#mcp-snippet-openclaw pre').innerText();
    const json = JSON.parse(openclaw.match(/'(.*)'$/)[1]);
    assert.deepEqual(json, { url: view.url, transport: 'streamable-http', headers: { Authorization: `Bearer ${view.token}` } });

    await page.click('#mcp-copy-claude');
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), claude);
  });

  it('rotating gives a new token: the snippets follow and the old token is refused', async () => {
    const old = (await api(app.ready, 'GET', '/api/mcp')).json.token;
    await page.click('#mcp-rotate');
    await page.waitForFunction((t) => !document.querySelector('#mcp-snippet-claude pre')?.textContent?.includes(t), old);
    const now = (await api(app.ready, 'GET', '/api/mcp')).json;
    assert.notEqual(now.token, old);
    assert.ok((await page.locator('#mcp-snippet-claude pre').innerText()).includes(now.token));
    assert.equal((await mcpCall(now.url, old, 'list_calls', {})).status, 401);
  });

  it('what the assistant read shows in the call view and in the activity log; a call can be made private', async () => {
    const r = await api(app.ready, 'POST', '/api/calls', { title: 'Acme renewal' });
    assert.equal(r.status, 201);
    const sid = r.json.session_id;
    await api(app.ready, 'POST', `/api/calls/${sid}/transcript`, { speaker: 'Dana', text: 'We agreed on 42 walruses per seat.' });
    const { url, token } = (await api(app.ready, 'GET', '/api/mcp')).json;
    const read = await mcpCall(url, token, 'get_call', { call_id: sid });
    assert.equal(read.status, 200);
    assert.equal(read.json.result.structuredContent.title, 'Acme renewal');

    await page.waitForSelector(`.app[data-session="${sid}"]`);
    await page.click('#tab-insights');
    const line = page.locator('#mcp-read-list');
    await line.waitFor();
    assert.match(await line.innerText(), /^Your assistant read: read the call · /);

    // Private: the switch in the call view hides it from the tools.
    await page.locator('#mcp-private').check();
    for (let i = 0; i < 50; i++) {
      const v = (await api(app.ready, 'GET', `/api/sessions/${sid}/mcp-reads`)).json;
      if (v.private) break;
      await new Promise((res) => setTimeout(res, 100));
    }
    const hidden = await mcpCall(url, token, 'get_call', { call_id: sid });
    assert.equal(hidden.json.error.data.error, 'call_not_found');

    await page.click('#tab-settings');
    const first = page.locator('#mcp-activity li').first();
    await first.waitFor();
    assert.match(await first.innerText(), /^Acme renewal — read the call · /);
  });

  it('turning it off refuses the assistant at once', async () => {
    await page.locator('#mcp-enabled').click();
    await page.waitForFunction(() => document.querySelector('#mcp-details')?.hidden === true);
    const { url, token } = (await api(app.ready, 'GET', '/api/mcp')).json;
    assert.equal((await mcpCall(url, token, 'list_calls', {})).status, 404);
  });
});
