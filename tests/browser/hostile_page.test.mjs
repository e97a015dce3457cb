// A hostile web page against both listeners, in real Chromium, against the real app in headless
// mode. The page is served on another origin (`http://evil.test:<port>`, a node server on
// loopback; Chromium resolves the names through --host-resolver-rules) and tries everything a
// page can do without the tokens: fetch in cors and no-cors mode, with and without credentials,
// JSON-looking text/plain and urlencoded form posts, EventSource, and DNS rebinding (a page
// whose own host name resolves to the listener, so its requests are same-origin for the browser
// and carry `Host: rebind.test:<port>`). Afterwards the app's own API (with the real token)
// shows that nothing was stored, changed or done, and the event log has no new entry.
//
//   cd ui && npm run build && npm run test:e2e
//
// Nothing is mocked: the rebinding page's first document is served by Playwright's request
// interception (standing in for the attacker's DNS answer before it flips to 127.0.0.1); every
// request it then makes goes over the network to the app.

import assert from 'node:assert/strict';
import http from 'node:http';
import { createRequire } from 'node:module';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { CHROMIUM_FLAGS, REPO, api, callback, chromiumPath, skipReason, sleep, startApp, uuid } from './harness.mjs';

const reason = skipReason();
if (reason && process.env.SW_E2E_REQUIRE === '1') throw new Error(`browser tests cannot run: ${reason}`);
if (reason) console.log(`# SKIP browser tests: ${reason}`);

const { chromium } = createRequire(path.join(REPO, 'ui', 'package.json'))('playwright-core');

/** The attack, run inside the hostile page: every attempt's outcome, as the page sees it. */
function attackScript() {
  return `
const results = [];
async function tryFetch(name, url, init) {
  try {
    const r = await fetch(url, init);
    let body = null;
    try { body = await r.text(); } catch (e) { body = 'unreadable: ' + e; }
    results.push({ name, fetched: true, type: r.type, status: r.status, body });
  } catch (e) {
    results.push({ name, fetched: false, error: String(e) });
  }
}
function formPost(name, action, enctype, fields) {
  return new Promise((resolve) => {
    const frame = document.createElement('iframe');
    frame.name = 'f' + Math.random().toString(36).slice(2);
    document.body.appendChild(frame);
    const form = document.createElement('form');
    form.method = 'POST';
    form.action = action;
    form.enctype = enctype;
    form.target = frame.name;
    for (const [k, v] of fields) {
      const input = document.createElement('input');
      input.type = 'hidden';
      input.name = k;
      input.value = v;
      form.appendChild(input);
    }
    document.body.appendChild(form);
    const done = (how) => {
      let readable;
      try { readable = frame.contentDocument ? frame.contentDocument.body.innerText : null; } catch (e) { readable = null; }
      results.push({ name, form: true, how, readable });
      resolve();
    };
    frame.addEventListener('load', () => done('load'), { once: true });
    setTimeout(() => done('timeout'), 5000);
    form.submit();
  });
}
function eventSource(name, url) {
  return new Promise((resolve) => {
    const es = new EventSource(url);
    const got = [];
    es.onmessage = (e) => got.push(e.data);
    es.onerror = () => { es.close(); results.push({ name, eventsource: true, got }); resolve(); };
    setTimeout(() => { es.close(); results.push({ name, eventsource: true, got, open: true }); resolve(); }, 3000);
  });
}
window.attack = async ({ cb, ui, sid, task }) => {
  const json = (o) => JSON.stringify(o);
  const reply = { task_id: task, session_id: sid, status: 'message', message_id: 'evil-1', reply_text: 'from a web page' };
  const tasks = cb + '/tasks/' + task;
  // The callback listener.
  await tryFetch('cb cors json', tasks, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: json(reply) });
  await tryFetch('cb cors json guessed bearer', tasks, { method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: 'Bearer guess' }, body: json(reply) });
  await tryFetch('cb cors text/plain', tasks, { method: 'POST', headers: { 'Content-Type': 'text/plain' }, body: json(reply) });
  await tryFetch('cb no-cors text/plain', tasks, { method: 'POST', mode: 'no-cors', headers: { 'Content-Type': 'text/plain' }, body: json(reply) });
  await tryFetch('cb no-cors credentials', tasks, { method: 'POST', mode: 'no-cors', credentials: 'include', body: json(reply) });
  await tryFetch('cb cors credentials', tasks, { method: 'POST', credentials: 'include', body: json(reply) });
  await tryFetch('cb GET /', cb + '/', {});
  await tryFetch('cb probe', cb + '/probe/abc', {});
  const crafted = json(reply).slice(0, -1) + ',"pad":"';
  await formPost('cb form text/plain', tasks, 'text/plain', [[crafted, '"}']]);
  await formPost('cb form urlencoded', tasks, 'application/x-www-form-urlencoded', [[crafted, '"}']]);
  // The control API.
  await tryFetch('ui cors GET sessions', ui + '/api/sessions', {});
  await tryFetch('ui cors GET sessions credentials', ui + '/api/sessions', { credentials: 'include' });
  await tryFetch('ui no-cors GET settings', ui + '/api/settings', { mode: 'no-cors' });
  await tryFetch('ui cors GET settings bearer', ui + '/api/settings', { headers: { Authorization: 'Bearer guess' } });
  await tryFetch('ui cors GET index', ui + '/', {});
  await tryFetch('ui cors GET openapi', ui + '/api/openapi.json', {});
  await tryFetch('ui no-cors POST sessions', ui + '/api/sessions', { method: 'POST', mode: 'no-cors', body: json({ title: 'made by a web page' }) });
  await tryFetch('ui no-cors POST calls', ui + '/api/calls', { method: 'POST', mode: 'no-cors', credentials: 'include', body: json({ title: 'made by a web page' }) });
  await tryFetch('ui no-cors POST message', ui + '/api/sessions/' + sid + '/messages', { method: 'POST', mode: 'no-cors', body: json({ text: 'sent by a web page' }) });
  await tryFetch('ui no-cors POST rotate', ui + '/api/settings/callback-token/rotate', { method: 'POST', mode: 'no-cors', body: '{}' });
  await tryFetch('ui cors PUT assistant', ui + '/api/assistant', { method: 'PUT', headers: { 'Content-Type': 'application/json' }, body: json({ base_url: 'http://127.0.0.1:9' }) });
  await tryFetch('ui cors DELETE session', ui + '/api/sessions/' + sid, { method: 'DELETE' });
  await tryFetch('ui no-cors POST tunnel', ui + '/api/tunnel', { method: 'POST', mode: 'no-cors', body: json({ mode: 'external', url: 'https://evil.example' }) });
  await formPost('ui form message', ui + '/api/sessions/' + sid + '/messages', 'text/plain', [['{"text":"sent by a form","pad":"', '"}']]);
  await formPost('ui form sessions urlencoded', ui + '/api/sessions', 'application/x-www-form-urlencoded', [['{"title":"by a form"}', '']]);
  await formPost('ui form rotate', ui + '/api/settings/callback-token/rotate', 'text/plain', [['{}', '']]);
  await formPost('ui form delete session', ui + '/api/sessions/' + sid, 'text/plain', [['{}', '']]);
  await eventSource('ui eventsource', ui + '/api/events?after=0');
  return results;
};
// DNS rebinding: this page's own origin is the listener's port; relative URLs are same-origin.
window.rebind = async ({ sid, task }) => {
  const json = (o) => JSON.stringify(o);
  const reply = { task_id: task, session_id: sid, status: 'message', message_id: 'evil-2', reply_text: 'rebound' };
  await tryFetch('rebind GET index', '/', {});
  await tryFetch('rebind GET sessions', '/api/sessions', {});
  await tryFetch('rebind GET openapi', '/api/openapi.json', {});
  await tryFetch('rebind POST sessions', '/api/sessions', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: json({ title: 'rebound' }) });
  await tryFetch('rebind POST message', '/api/sessions/' + sid + '/messages', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: json({ text: 'rebound' }) });
  await tryFetch('rebind POST rotate', '/api/settings/callback-token/rotate', { method: 'POST' });
  await tryFetch('rebind POST callback', '/tasks/' + task, { method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: 'Bearer guess' }, body: json(reply) });
  await tryFetch('rebind POST callback no bearer', '/tasks/' + task, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: json(reply) });
  await tryFetch('rebind GET probe', '/probe/abc', {});
  await eventSource('rebind eventsource', '/api/events?after=0');
  return results;
};
`;
}

const PAGE = `<!doctype html><meta charset=utf-8><title>Totally harmless</title><body><script>${attackScript()}</script>`;

/** The attacker's web server: serves the hostile page on every path. */
async function startEvilServer() {
  const hits = [];
  const server = http.createServer((req, res) => {
    hits.push(`${req.method} ${req.url}`);
    res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8', 'Cache-Control': 'no-store' });
    res.end(PAGE);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    port: server.address().port,
    hits,
    close: () => new Promise((r) => server.close(r)),
  };
}

/** Every event of the app's log (`GET /api/events?after=0` with the real token, read for `ms`). */
async function eventLog(ready, ms = 1500) {
  const ctrl = new AbortController();
  const res = await fetch(new URL('/api/events?after=0', ready.ui_url), {
    headers: { Authorization: `Bearer ${ready.ui_token}` },
    signal: ctrl.signal,
  });
  assert.equal(res.status, 200);
  const ids = [];
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  const stop = setTimeout(() => ctrl.abort(), ms);
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const frame = buf.slice(0, i);
        buf = buf.slice(i + 2);
        const id = frame.split('\n').find((l) => l.startsWith('id:'));
        const data = frame.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5)).join('\n');
        if (id) ids.push({ id: id.slice(3).trim(), data });
      }
    }
  } catch (e) {
    if (e.name !== 'AbortError') throw e;
  } finally {
    clearTimeout(stop);
  }
  return ids;
}

/** What an attacker could have changed, read with the real token. */
async function appState(ready, sid) {
  const sessions = await api(ready, 'GET', '/api/sessions');
  const messages = await api(ready, 'GET', `/api/sessions/${sid}/messages`);
  const settings = await api(ready, 'GET', '/api/settings');
  const assistant = await api(ready, 'GET', '/api/assistant');
  const tunnel = await api(ready, 'GET', '/api/tunnel');
  for (const r of [sessions, messages, settings, assistant, tunnel]) assert.equal(r.status, 200, JSON.stringify(r.json));
  return {
    sessions: sessions.json,
    messages: messages.json,
    callback_token: settings.json.callback_token,
    assistant: assistant.json,
    tunnel: tunnel.json,
  };
}

describe('a hostile web page against both listeners', { skip: reason ?? false }, () => {
  let app;
  let ready;
  let evil;
  let context;
  let userDataDir;
  let sid;
  let cbPort;
  let uiPort;

  before(async () => {
    app = await startApp();
    ready = app.ready;
    evil = await startEvilServer();
    cbPort = new URL(ready.callback_url).port;
    uiPort = new URL(ready.ui_url).port;
    userDataDir = await mkdtemp(path.join(os.tmpdir(), 'sw-e2e-hostile-'));
    context = await chromium.launchPersistentContext(userDataDir, {
      executablePath: chromiumPath(),
      headless: true,
      args: [
        ...CHROMIUM_FLAGS,
        // Both attacker names resolve to loopback, as a real attacker's DNS would make them.
        '--host-resolver-rules=MAP evil.test 127.0.0.1, MAP rebind.test 127.0.0.1',
        // Chromium's own Private Network Access checks would block the rebinding page's
        // requests before they reach the app (a page not from loopback asking loopback); other
        // browsers have no such check. Off, so the test proves the app's own defences.
        '--disable-features=BlockInsecurePrivateNetworkRequests,PrivateNetworkAccessSendPreflights,PrivateNetworkAccessRespectPreflightResults,LocalNetworkAccessChecks',
      ],
    });
    const r = await api(ready, 'POST', '/api/sessions', { title: 'the victim chat' });
    assert.equal(r.status, 201);
    sid = r.json.session_id;
    // One real reply, so there is something to steal.
    const ok = await callback(ready, uuid(), { session_id: sid, status: 'message', message_id: 'real-1', reply_text: 'the secret plan' });
    assert.equal(ok.status, 200, JSON.stringify(ok.json));
  });

  after(async () => {
    await context?.close().catch(() => {});
    if (userDataDir) await rm(userDataDir, { recursive: true, force: true });
    await evil?.close();
    const exit = await app?.stop();
    if (app) assert.deepEqual(exit, { code: 0, signal: null }, `stderr tail:\n${app.stderr().slice(-2000)}`);
  });

  it('gets nothing through from another origin: no callback stored, nothing done, nothing read', async () => {
    const before = await appState(ready, sid);
    const eventsBefore = await eventLog(ready);
    const page = await context.newPage();
    await page.goto(`http://evil.test:${evil.port}/`);
    const results = await page.evaluate((a) => window.attack(a), {
      cb: ready.callback_url.replace(/\/$/, ''),
      ui: ready.ui_url.replace(/\/$/, ''),
      sid,
      task: uuid(),
    });
    await page.close();
    console.log(`# ${results.length} attempts from http://evil.test:${evil.port}`);
    for (const r of results) console.log(`#   ${JSON.stringify(r).slice(0, 200)}`);
    assert.ok(results.length >= 25, 'every attempt reported');
    for (const r of results) {
      if (r.fetched) {
        // Only opaque answers (no status, no body) may reach the page: nothing readable.
        assert.equal(r.type, 'opaque', `${r.name}: the page read an answer: ${JSON.stringify(r)}`);
        assert.equal(r.status, 0, r.name);
        assert.equal(r.body, '', r.name);
      }
      if (r.form) assert.equal(r.readable, null, `${r.name}: the page read the form's answer`);
      if (r.eventsource) assert.deepEqual(r.got, [], `${r.name}: the page read events`);
    }
    // Nothing stored, changed or done; the event log has no new entry.
    await sleep(300);
    assert.deepEqual(await appState(ready, sid), before);
    assert.deepEqual(await eventLog(ready), eventsBefore);
    // And the real assistant still gets through (no lock-out by the page's failed attempts).
    const ok = await callback(ready, uuid(), { session_id: sid, status: 'message', message_id: 'real-2', reply_text: 'still works' });
    assert.equal(ok.status, 200, JSON.stringify(ok.json));
  });

  it('gets nothing through by DNS rebinding (a page whose host name resolves to a listener)', async () => {
    const before = await appState(ready, sid);
    const eventsBefore = await eventLog(ready);
    const all = [];
    for (const [listener, port] of [
      ['control API', uiPort],
      ['callback listener', cbPort],
    ]) {
      const page = await context.newPage();
      const origin = `http://rebind.test:${port}`;
      // The attacker's first DNS answer: its own server (the page). Only this one document;
      // every later request resolves to 127.0.0.1, i.e. to the app.
      await page.route(`${origin}/hello.html`, (route) =>
        route.fulfill({ status: 200, contentType: 'text/html; charset=utf-8', body: PAGE }),
      );
      await page.goto(`${origin}/hello.html`);
      const results = await page.evaluate((a) => window.rebind(a), { sid, task: uuid() });
      await page.close();
      console.log(`# ${listener}: ${results.length} same-origin attempts from ${origin}`);
      for (const r of results) console.log(`#   ${JSON.stringify(r).slice(0, 200)}`);
      all.push(...results);
    }
    assert.ok(all.length >= 20, 'every attempt reported');
    for (const r of all) {
      if (r.fetched) {
        // Same-origin for the browser, so the answer is readable: it must be the Host refusal.
        assert.equal(r.status, 403, `${r.name}: ${JSON.stringify(r)}`);
        assert.equal(JSON.parse(r.body).error, 'bad_host', `${r.name}: ${r.body}`);
        assert.ok(!r.body.includes('secret plan') && !r.body.includes(ready.ui_token) && !r.body.includes(ready.callback_token), r.name);
      }
      if (r.eventsource) assert.deepEqual(r.got, [], `${r.name}: the page read events`);
    }
    await sleep(300);
    assert.deepEqual(await appState(ready, sid), before);
    assert.deepEqual(await eventLog(ready), eventsBefore);
  });

  it('sends no CORS grant and refuses a foreign Origin on the control API', async () => {
    // A browser's preflight from the page's origin: no Access-Control-Allow-* answer anywhere.
    for (const url of [`${ready.callback_url.replace(/\/$/, '')}/tasks/${uuid()}`, new URL('/api/sessions', ready.ui_url).href]) {
      const res = await fetch(url, {
        method: 'OPTIONS',
        headers: { Origin: `http://evil.test:${evil.port}`, 'Access-Control-Request-Method': 'POST', 'Access-Control-Request-Headers': 'authorization,content-type' },
      });
      await res.text();
      for (const h of ['access-control-allow-origin', 'access-control-allow-headers', 'access-control-allow-credentials']) {
        assert.equal(res.headers.get(h), null, `${url}: ${h}`);
      }
    }
    // Even with the UI token, a request a foreign page made (its Origin) is refused.
    const res = await fetch(new URL('/api/sessions', ready.ui_url), {
      method: 'POST',
      headers: { Authorization: `Bearer ${ready.ui_token}`, 'Content-Type': 'application/json', Origin: `http://evil.test:${evil.port}` },
      body: JSON.stringify({ title: 'with a stolen token' }),
    });
    assert.equal(res.status, 403);
    assert.equal((await res.json()).error, 'bad_origin');
    // The UI's own origin is fine.
    const own = await fetch(new URL('/api/sessions', ready.ui_url), {
      headers: { Authorization: `Bearer ${ready.ui_token}`, Origin: new URL(ready.ui_url).origin },
    });
    assert.equal(own.status, 200);
  });
});
