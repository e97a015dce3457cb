// Browser test of search, long chats and export, against the real app in headless mode in
// Debian's Chromium: Past calls → search box → a result opens the call scrolled to the message
// (highlighted), also one far back in a long chat (older pages load until it is there); the chat
// opens on its newest page and loads older pages as the user scrolls up, keeping what the user
// reads in place, with a bounded number of rows in the DOM; the export buttons save the same
// bytes as the API.
//
//   cargo build -p stagewhisper && (cd ui && npm run build && npm run test:e2e)

import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { api, callback, ensureArtifacts, launchBrowser, openUi, skipReason, startApp, uuid } from './harness.mjs';

const reason = skipReason();
if (reason && process.env.SW_E2E_REQUIRE === '1') throw new Error(`browser tests cannot run: ${reason}`);
if (reason) console.log(`# SKIP archive tests: ${reason}`);

/** Messages in the long chat: several pages of the UI's 200. */
const LONG = 700;
/** The DOM may hold the rows near the viewport, never the whole chat. */
const MAX_ROWS = 120;

const shot = (name) => path.join(ensureArtifacts(), `${name}.png`);

async function reply(app, sid, text) {
  const task = uuid();
  const r = await callback(app.ready, task, {
    task_id: task,
    session_id: sid,
    status: 'message',
    message_id: uuid(),
    reply_text: text,
  });
  assert.equal(r.status, 200, JSON.stringify(r.json));
}

describe('search, long chats and export in the browser', { skip: reason ?? false }, () => {
  let app;
  let browser;
  let page;
  let call;
  let chat;
  const ids = {};

  before(async () => {
    app = await startApp();
    browser = await launchBrowser();
    let r = await api(app.ready, 'POST', '/api/calls', { title: 'Walrus review call' });
    call = r.json.session_id;
    r = await api(app.ready, 'POST', `/api/calls/${call}/transcript`, { speaker: 'Dana', text: 'The walrus budget is tight' });
    ids.turn = r.json.id;
    r = await api(app.ready, 'POST', '/api/sessions', { title: 'Long chat' });
    chat = r.json.session_id;
    for (let i = 0; i < LONG; i++) {
      const text = i === 3 ? 'An early note about the narwhal roadmap' : `Message number ${i} of the long chat`;
      if (i % 2) await reply(app, chat, text);
      else assert.equal((await api(app.ready, 'POST', `/api/sessions/${chat}/messages`, { text })).status, 201);
    }
    const all = (await api(app.ready, 'GET', `/api/sessions/${chat}/messages`)).json;
    assert.equal(all.length, LONG);
    ids.early = all[3].id;
    ids.first = all[0].id;
    page = await openUi(browser.context, app.ready);
  });

  after(async () => {
    await browser?.close();
    await app?.stop();
  });

  const rows = () => page.locator('#messages .vrow').count();

  it('a search result opens the call at that transcript turn', async () => {
    await page.click('#tab-history');
    await page.fill('#search-input', 'walrus');
    const hit = page.locator(`.search-hit-item[data-message-id="${ids.turn}"]`);
    await hit.waitFor({ timeout: 10_000 });
    assert.equal(await hit.locator('mark').first().innerText(), 'walrus');
    await hit.click();
    assert.equal(await page.locator('#tab-transcript').getAttribute('aria-selected'), 'true');
    await page.waitForSelector(`.app[data-session="${call}"]`);
    await page.locator(`[data-id="${ids.turn}"].search-hit`).waitFor({ timeout: 5000 });
  });

  it('a result far back in a long chat loads older pages until it is there, scrolled to and highlighted', async () => {
    await page.click('#tab-history');
    await page.fill('#search-input', 'narwhal roadmap');
    const hit = page.locator(`.search-hit-item[data-message-id="${ids.early}"]`);
    await hit.waitFor({ timeout: 10_000 });
    await hit.click();
    assert.equal(await page.locator('#tab-chat').getAttribute('aria-selected'), 'true');
    const row = page.locator(`#messages [data-id="${ids.early}"]`);
    await row.waitFor({ timeout: 15_000 });
    await page.locator(`#messages [data-id="${ids.early}"].search-hit`).waitFor({ timeout: 5000 });
    const inView = await row.evaluate((el) => {
      const r = el.getBoundingClientRect();
      const s = document.querySelector('.msg-scroller').getBoundingClientRect();
      return r.top >= s.top - 1 && r.bottom <= s.bottom + 1;
    });
    assert.ok(inView, 'the found message is in the viewport');
    assert.ok((await rows()) <= MAX_ROWS, `rows in the DOM: ${await rows()}`);
    await page.screenshot({ path: shot('archive-search-jump') });
  });

  it('opens on the newest page and pages back while scrolling up, keeping the place', async () => {
    // A fresh view: only the newest page is loaded.
    await page.reload();
    await page.waitForSelector('.app[data-conn="live"]');
    await page.click('#tab-history');
    await page.click(`.history-item[data-session-id="${chat}"]`);
    await page.waitForSelector(`#messages .vrow`);
    await page.waitForFunction(() => document.querySelector('#messages')?.textContent.includes(`Message number ${699}`));
    assert.equal(await page.locator(`#messages [data-id="${ids.first}"]`).count(), 0, 'the first message is not loaded yet');
    let guard = 0;
    while ((await page.locator(`#messages [data-id="${ids.first}"]`).count()) === 0) {
      assert.ok(guard++ < 200, 'reached the first message');
      // What the user reads at the top of the viewport before the scroll step.
      const before = await page.evaluate(() => {
        const s = document.querySelector('.msg-scroller');
        s.scrollTop = Math.max(0, s.scrollTop - 1500);
        return s.scrollTop;
      });
      const top = await page.evaluate(() => {
        const s = document.querySelector('.msg-scroller').getBoundingClientRect();
        const el = [...document.querySelectorAll('#messages .vrow')].find((r) => r.getBoundingClientRect().bottom > s.top + 1);
        return el ? { id: el.dataset.id ?? el.firstElementChild?.dataset.id, y: el.getBoundingClientRect().top } : null;
      });
      await page.waitForTimeout(150);
      if (top?.id && before === 0) {
        // An older page went in front: the same row is still where it was.
        const y = await page.evaluate((id) => document.querySelector(`#messages [data-id="${id}"]`)?.getBoundingClientRect().top ?? null, top.id);
        assert.ok(y !== null && Math.abs(y - top.y) < 80, `row ${top.id} moved from ${top.y} to ${y}`);
      }
      assert.ok((await rows()) <= MAX_ROWS, `rows in the DOM: ${await rows()}`);
    }
    const first = await page.locator(`#messages [data-id="${ids.first}"]`).innerText();
    assert.match(first, /Message number 0 of the long chat/);
  });

  it('the export buttons save what the API exports', async () => {
    await page.click('#tab-history');
    await page.fill('#search-input', '');
    for (const format of ['md', 'json']) {
      const [download] = await Promise.all([page.waitForEvent('download'), page.click(`[data-export="${format}"][data-export-session="${call}"]`)]);
      assert.equal(download.suggestedFilename(), `Walrus-review-call.${format}`);
      const saved = await readFile(await download.path(), 'utf8');
      const res = await fetch(new URL(`/api/sessions/${call}/export?format=${format}`, app.ready.ui_url), {
        headers: { Authorization: `Bearer ${app.ready.ui_token}` },
      });
      const want = await res.text();
      if (format === 'json') assert.deepEqual(JSON.parse(saved), JSON.parse(want));
      else assert.equal(saved, want);
    }
  });
});
