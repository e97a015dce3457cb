// Browser test of the chat's bounded window and the paged Insights list, against the real app in
// headless mode in Debian's Chromium: a chat longer than the window is scrolled to its first
// message and back down to its newest; all along the store holds at most the window's messages
// (`#messages[data-loaded]`, the count the chat view publishes), at the top the newest messages
// are dropped, a message arriving meanwhile is there once the user is back at the end, and the
// rows at the end are the chat's last messages in order. A long Insights list opens on its
// newest page and pages back.
//
//   cargo build -p stagewhisper && (cd ui && npm run build && npm run test:e2e)

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { api, callback, launchBrowser, openUi, skipReason, startApp, uuid } from './harness.mjs';

const reason = skipReason();
if (reason && process.env.SW_E2E_REQUIRE === '1') throw new Error(`browser tests cannot run: ${reason}`);
if (reason) console.log(`# SKIP window tests: ${reason}`);

/** The UI's window (ui/src/window.ts `MESSAGE_WINDOW`) and a chat well past it. */
const WINDOW = 3000;
const LONG = 4200;
const INSIGHTS = 150;
const MAX_ROWS = 120;

describe('a long chat keeps a bounded window in the browser', { skip: reason ?? false }, () => {
  let app;
  let browser;
  let page;
  let chat;
  let call;
  let all;

  before(async () => {
    app = await startApp();
    browser = await launchBrowser();
    let r = await api(app.ready, 'POST', '/api/sessions', { title: 'Very long chat' });
    chat = r.json.session_id;
    for (let i = 0; i < LONG; i += 25) {
      await Promise.all(
        Array.from({ length: Math.min(25, LONG - i) }, (_, k) =>
          api(app.ready, 'POST', `/api/sessions/${chat}/messages`, { text: `Line ${i + k} of the very long chat` }).then((res) => assert.equal(res.status, 201)),
        ),
      );
    }
    all = (await api(app.ready, 'GET', `/api/sessions/${chat}/messages`)).json;
    assert.equal(all.length, LONG);
    r = await api(app.ready, 'POST', '/api/calls', { title: 'Many insights' });
    call = r.json.session_id;
    for (let i = 0; i < INSIGHTS; i++) {
      const task = uuid();
      const res = await callback(app.ready, task, { task_id: task, session_id: `insights:${call}`, status: 'message', message_id: uuid(), reply_text: `Insight number ${i}` });
      assert.equal(res.status, 200, JSON.stringify(res.json));
    }
    page = await openUi(browser.context, app.ready);
  });

  after(async () => {
    await browser?.close();
    await app?.stop();
  });

  const loaded = async () => Number(await page.locator('#messages').getAttribute('data-loaded'));
  const rowById = (id) => page.locator(`#messages [data-id="${id}"]`);
  const checkBounds = async () => {
    const n = await loaded();
    assert.ok(n > 0 && n <= WINDOW, `messages in the store: ${n}`);
    const rows = await page.locator('#messages .vrow').count();
    assert.ok(rows <= MAX_ROWS, `rows in the DOM: ${rows}`);
    return n;
  };

  it('scrolled to the top and back down: bounded all along, nothing lost or repeated', async () => {
    await page.click('#tab-history');
    await page.click(`.history-item[data-session-id="${chat}"]`);
    await rowById(all[LONG - 1].id).waitFor({ timeout: 15_000 });

    let guard = 0;
    let maxLoaded = 0;
    while ((await rowById(all[0].id).count()) === 0) {
      assert.ok(guard++ < 400, 'reached the first message');
      await page.evaluate(() => (document.querySelector('.msg-scroller').scrollTop = 0));
      await page.waitForTimeout(120);
      maxLoaded = Math.max(maxLoaded, await checkBounds());
    }
    assert.ok(maxLoaded > 1000, `pages were loaded: ${maxLoaded}`);
    assert.ok((await rowById(all[0].id).innerText()).includes(all[0].text));

    // Meanwhile a new message: past the dropped end, it waits for its page.
    const live = await api(app.ready, 'POST', `/api/sessions/${chat}/messages`, { text: 'Arrived while scrolled to the top' });
    assert.equal(live.status, 201);
    await page.waitForTimeout(300);
    assert.ok((await loaded()) <= WINDOW);

    guard = 0;
    while ((await rowById(live.json.id).count()) === 0) {
      assert.ok(guard++ < 400, 'reached the newest message');
      await page.evaluate(() => {
        const s = document.querySelector('.msg-scroller');
        s.scrollTop = s.scrollHeight;
      });
      await page.waitForTimeout(120);
      await checkBounds();
    }
    // The end of the chat, in order, without gaps or repeats.
    const want = [...all.slice(-30).map((m) => String(m.id)), String(live.json.id)];
    await page.evaluate(() => {
      const s = document.querySelector('.msg-scroller');
      s.scrollTop = s.scrollHeight;
    });
    await page.waitForTimeout(200);
    const shown = await page.evaluate(() => [...document.querySelectorAll('#messages .vrow')].map((r) => r.dataset.id));
    const tail = shown.slice(-want.length);
    assert.ok(tail.length >= 10, `rows at the end: ${tail.length}`);
    assert.deepEqual(tail, want.slice(-tail.length));
    // The older end was dropped on the way down: the first message is no longer loaded.
    assert.equal(await rowById(all[0].id).count(), 0);
  });

  it('a long Insights list opens on its newest page and pages back', async () => {
    await page.click('#tab-history');
    await page.click(`.history-item[data-session-id="${call}"]`);
    await page.click('#tab-insights');
    const items = page.locator('#insights li');
    await page.waitForFunction(() => document.querySelectorAll('#insights li').length === 100);
    assert.match(await items.first().innerText(), new RegExp(`Insight number ${INSIGHTS - 1}\\b`));
    // The button's own click, dispatched: a pointer click first scrolls the button into view,
    // and scrolling to the end of the list loads the older page by itself (as it should for a
    // user), which moves the button away under the pointer.
    assert.ok(await page.locator('#insights-older').isVisible(), 'an older page is offered');
    await page.locator('#insights-older').dispatchEvent('click');
    await page.waitForFunction((n) => document.querySelectorAll('#insights li').length === n, INSIGHTS);
    const texts = await items.allInnerTexts();
    texts.forEach((t, i) => assert.match(t, new RegExp(`Insight number ${INSIGHTS - 1 - i}\\b`)));
    assert.ok(await page.locator('#insights-older').isHidden(), 'no older page left');
  });
});
