// The compact overlay as a route of the web UI in headless mode (`?view=overlay`): opened from
// the call bar's Overlay button as a popup (the UI token travels with the popup's session
// storage), it follows the live call, shows an insight posted by a callback (the same SSE
// stream as the main page), sends a message typed into its input and shows the answer to it
// under the insights. Light and dark pictures
// go to tests/artifacts/overlay-browser-{light,dark}.png.

import assert from 'node:assert/strict';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { api, callback, ensureArtifacts, launchBrowser, openUi, skipReason, startApp, uuid } from './harness.mjs';

const reason = skipReason();
if (reason && process.env.SW_E2E_REQUIRE === '1') throw new Error(`browser tests cannot run: ${reason}`);

describe('overlay route in the browser', { skip: reason ?? false }, () => {
  let app;
  const browsers = [];

  before(async () => {
    app = await startApp();
  });

  after(async () => {
    for (const b of browsers) await b.close();
    const exit = await app?.stop();
    if (app) assert.deepEqual(exit, { code: 0, signal: null }, `stderr tail:\n${app.stderr().slice(-2000)}`);
  });

  for (const colorScheme of ['light', 'dark']) {
    it(`opens from the call bar, shows a new insight and sends a message (${colorScheme})`, async () => {
      const ready = app.ready;
      const browser = await launchBrowser({ colorScheme });
      browsers.push(browser);
      const page = await openUi(browser.context, ready);
      const r = await api(ready, 'POST', '/api/calls', { title: `Overlay ${colorScheme}` });
      assert.equal(r.status, 201);
      const sid = r.json.session_id;

      const [popup] = await Promise.all([browser.context.waitForEvent('page'), page.click('#open-overlay')]);
      await popup.waitForSelector(`#overlay[data-conn="live"][data-call="${sid}"]`, { timeout: 15_000 });
      assert.match(popup.url(), /\?view=overlay$/);
      assert.equal(await popup.textContent('#overlay-title'), 'Live call');

      const tip = `Browser overlay ${uuid().slice(0, 6)}: ask about the renewal date.`;
      const task = uuid();
      const cb = await callback(ready, task, { task_id: task, session_id: `insights:${sid}`, status: 'message', message_id: uuid(), reply_text: tip });
      assert.equal(cb.status, 200);
      await popup.waitForFunction((t) => document.getElementById('overlay-insights')?.textContent?.includes(t), tip, { timeout: 10_000 });

      const said = `overlay in the browser ${uuid().slice(0, 6)}`;
      await popup.fill('#overlay-input', said);
      await popup.press('#overlay-input', 'Enter');
      // The question shows under the insights, waiting for its answer.
      const ex = popup.locator('#overlay-thread .ov-exchange', { hasText: said });
      await ex.waitFor({ timeout: 10_000 });
      assert.match(await ex.innerText(), /Waiting for the answer/);
      const msgs = await api(ready, 'GET', `/api/sessions/${sid}/messages`);
      const asked = msgs.json.find((m) => m.kind === 'user' && m.text === said);
      assert.ok(asked?.message_id, JSON.stringify(msgs.json));

      // The assistant's answer (a callback to the chat) shows right there, under the question.
      const answer = `The renewal date is ${uuid().slice(0, 6)}.`;
      const t2 = uuid();
      const rep = await callback(ready, t2, { task_id: t2, session_id: sid, status: 'message', message_id: uuid(), user_message_id: asked.message_id, reply_text: answer });
      assert.equal(rep.status, 200);
      await popup.waitForFunction((a) => document.getElementById('overlay-thread')?.textContent?.includes(a), answer, { timeout: 10_000 });
      assert.equal(await ex.locator('.ov-reply-assistant').innerText().then((t) => t.includes(answer)), true);
      assert.equal(await ex.locator('.ov-waiting').count(), 0, 'no longer waiting');

      await popup.setViewportSize({ width: 380, height: 460 });
      await popup.screenshot({ path: path.join(ensureArtifacts(), `overlay-browser-${colorScheme}.png`) });
      await api(ready, 'POST', `/api/calls/${sid}/end`, {});
    });
  }
});
