#!/usr/bin/env node
// Benchmark (not a test): a chat of 100,000 messages in the browser.
//
//   cargo build --release -p stagewhisper-headless && (cd ui && npm run build && npm run bench:long-chat [-- --messages 100000 --opens 20 --scroll-seconds 600])
//
// 1. starts the release `stagewhisper-headless` (SW_E2E_BIN overrides it) on a fresh data dir,
//    makes a chat through the control API, stops it, and fills the chat with N messages in one
//    transaction of the database file with the `sqlite3` command-line tool (Debian package
//    `sqlite3`), the full-text index kept by its triggers as in the app; the same rows as
//    `cargo bench -p stagewhisper-headless --bench archive` writes (~25 words each, message ids
//    `bench-<i>`), from a JavaScript port of its generator;
// 2. starts the binary again and, in Debian's Chromium, opens the chat `--opens` times: each time
//    a reload of the UI, Past calls, then a click on the chat; in the page a MutationObserver
//    stamps the first row of the chat in `#messages` (`performance.now()` from the click). Also
//    the wall time from `page.goto` to that row (UI start, event stream, history list, click);
// 3. scrolls to the top of the chat (each step: scrollTop = 0, then wait for the older page the
//    UI loads), until the first message is in the DOM or `--scroll-seconds` have passed, and
//    reads the process's VmRSS / VmHWM from /proc/PID/status before and after, and the page's JS
//    heap after a collection (CDP `Runtime.getHeapUsage`) with the messages its store holds.
//
// Targets (2 cores): chat open p99 < 200 ms; RSS after scrolling through the chat < 100 MB.

import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { REPO, api, launchBrowser, openUi, percentile, skipReason, startApp } from './harness.mjs';

const argv = process.argv.slice(2);
const arg = (name, dflt) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? Number(argv[i + 1]) : dflt;
};
const N = arg('messages', 100_000);
const OPENS = arg('opens', 20);
const SCROLL_SECONDS = arg('scroll-seconds', 600);
const TARGET_OPEN_MS = 200;
const TARGET_RSS_MB = 100;

process.env.SW_E2E_BIN ??= path.join(REPO, 'target', 'release', 'stagewhisper-headless');
const reason = skipReason() ?? (spawnSync('sqlite3', ['-version']).status === 0 ? null : 'sqlite3 not installed (apt-get install -y sqlite3)');
if (reason) {
  console.error(`bench_long_chat: cannot run: ${reason}`);
  process.exit(2);
}

/** (VmRSS, VmHWM) of a process in MiB. */
function rss(pid) {
  const s = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (k) => Number(s.match(new RegExp(`^${k}:\\s+(\\d+)`, 'm'))?.[1] ?? NaN);
  return { rss: kib('VmRSS') / 1024, hwm: kib('VmHWM') / 1024 };
}

// The archive bench's generator: xorshift64 and a Zipf-like draw from 2,000 made-up words.
const MASK = (1n << 64n) - 1n;
function rng(seed) {
  let x = seed;
  return () => {
    x ^= (x << 13n) & MASK;
    x ^= x >> 7n;
    x ^= (x << 17n) & MASK;
    return x;
  };
}
const WORDS = Array.from({ length: 2000 }, (_, i) => `w${i}x`);
const CUM = [];
for (let i = 1, acc = 0; i <= WORDS.length; i++) CUM.push((acc += 1 / i));
function sentence(next, n) {
  const total = CUM[CUM.length - 1];
  const out = [];
  for (let k = 0; k < n; k++) {
    const x = (Number(next() % 1_000_000n) / 1_000_000) * total;
    let lo = 0;
    let hi = CUM.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (CUM[mid] < x) lo = mid + 1;
      else hi = mid;
    }
    out.push(WORDS[Math.min(lo, WORDS.length - 1)]);
  }
  return out.join(' ');
}

function fill(db, sid, n) {
  const next = Number(
    execFileSync('sqlite3', [
      db,
      'SELECT max((SELECT COALESCE(MAX(id), 0) + 1 FROM messages), (SELECT COALESCE(MAX(id), 0) + 1 FROM events), ' +
        'COALESCE((SELECT MAX(next) FROM id_floors), 1));',
    ]).toString(),
  );
  const r = rng(0x9e3779b97f4a7c15n);
  const q = (s) => `'${s.replaceAll("'", "''")}'`;
  const lines = ['PRAGMA journal_mode=WAL;', 'BEGIN;'];
  for (let i = 0; i < n; i++) {
    const kind = i % 2 === 0 ? 'user' : 'assistant';
    const key = ((BigInt(i) * 0x9e3779b97f4a7c15n) & ((1n << 128n) - 1n)).toString(16).padStart(32, '0');
    const task = `task-${Math.floor(i / 2)}`;
    lines.push(
      'INSERT INTO messages (id, session_id, kind, text, message_id, task_id, scope, content_key, received_at, sort_key, logged) VALUES ' +
        `(${next + i}, ${q(sid)}, '${kind}', ${q(sentence(r, 25))}, 'bench-${i}', '${task}', '${task}', '${key}', ` +
        `'2027-01-15T08:00:00.000000Z', ${1_800_000_000_000_000 + i * 1000}, 0);`,
    );
  }
  lines.push('COMMIT;', 'PRAGMA wal_checkpoint(TRUNCATE);');
  execFileSync('sqlite3', ['-bail', db], { input: lines.join('\n'), stdio: ['pipe', 'ignore', 'inherit'], maxBuffer: 1 << 30 });
}

const stats = (v) => {
  const s = [...v].sort((a, b) => a - b);
  return { p50: percentile(s, 50), p99: percentile(s, 99), max: s[s.length - 1], n: s.length };
};
const fmt = (st) => `p50 ${st.p50.toFixed(1)} ms · p99 ${st.p99.toFixed(1)} ms · max ${st.max.toFixed(1)} ms (n=${st.n})`;

const dataDir = await mkdtemp(path.join(os.tmpdir(), 'sw-bench-long-chat-'));
let app;
let browser;
try {
  app = await startApp([], { dataDir });
  const r = await api(app.ready, 'POST', '/api/sessions', { title: 'Long chat' });
  if (r.status !== 201) throw new Error(`POST /api/sessions → ${r.status}`);
  const sid = r.json.session_id;
  await app.stop();

  let t = performance.now();
  fill(path.join(dataDir, 'stagewhisper.db'), sid, N);
  console.log(`filled ${N} messages in ${((performance.now() - t) / 1000).toFixed(1)} s with sqlite3`);

  app = await startApp([], { dataDir });
  const pid = app.proc.pid;
  const rss0 = rss(pid);
  browser = await launchBrowser();
  const page = await browser.context.newPage();
  const item = `.history-item[data-session-id="${sid}"]`;

  // Open the chat OPENS times, each from a fresh load of the UI (nothing of the chat cached).
  const inPage = [];
  const wall = [];
  for (let k = 0; k < OPENS; k++) {
    await page.goto('about:blank');
    const t0 = performance.now();
    await openUi(browser.context, app.ready, page);
    await page.click('#tab-history');
    await page.waitForSelector(item);
    if ((await page.locator('#messages [data-message-id^="bench-"]').count()) !== 0) throw new Error('the chat is open before the click');
    const ms = await page.evaluate(
      (sel) =>
        new Promise((resolve, reject) => {
          const list = document.querySelector('#messages');
          const found = () => list?.querySelector('[data-message-id^="bench-"]');
          let start;
          const obs = new MutationObserver(() => {
            if (found()) {
              obs.disconnect();
              resolve(performance.now() - start);
            }
          });
          obs.observe(document.body, { childList: true, subtree: true });
          setTimeout(() => reject(new Error('no row within 15 s')), 15_000);
          start = performance.now();
          document.querySelector(sel).click();
          if (found()) resolve(performance.now() - start);
        }),
      item,
    );
    wall.push(performance.now() - t0);
    inPage.push(ms);
  }
  const rowsInDom = () => page.locator('#messages .vrow').count();
  const rss1 = rss(pid);

  // Scroll up to the first message, one older page per step.
  const oldest = () =>
    page.evaluate(() => {
      let min = Infinity;
      for (const el of document.querySelectorAll('#messages [data-message-id^="bench-"]')) min = Math.min(min, Number(el.dataset.messageId.slice(6)));
      return min;
    });
  t = performance.now();
  let low = await oldest();
  let steps = 0;
  let maxRows = await rowsInDom();
  while (low > 0 && performance.now() - t < SCROLL_SECONDS * 1000) {
    await page.evaluate(() => {
      document.querySelector('.msg-scroller').scrollTop = 0;
    });
    const moved = await page
      .waitForFunction(
        (prev) => {
          // Hold the scrollbar at the top: an older page goes in front and moves it down.
          const s = document.querySelector('.msg-scroller');
          s.scrollTop = 0;
          s.dispatchEvent(new Event('scroll'));
          for (const el of document.querySelectorAll('#messages [data-message-id^="bench-"]')) if (Number(el.dataset.messageId.slice(6)) < prev) return true;
          return false;
        },
        low,
        { timeout: 15_000, polling: 20 },
      )
      .then(() => true, () => false);
    if (!moved) {
      const at = await page.evaluate(() => {
        const s = document.querySelector('.msg-scroller');
        return `scrollTop ${s.scrollTop}, scrollHeight ${s.scrollHeight}`;
      });
      console.log(`stalled at bench-${low} (no older row within 15 s; ${at})`);
      break;
    }
    low = await oldest();
    steps++;
    maxRows = Math.max(maxRows, await rowsInDom());
  }
  const scrollS = (performance.now() - t) / 1000;
  await page.waitForTimeout(1000);
  const rss2 = rss(pid);
  // The page's JS heap after a full collection (what the UI keeps, not garbage yet to collect),
  // and how many messages its store holds (`data-loaded`, published by the chat view; absent in
  // UIs before the bounded window).
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('HeapProfiler.collectGarbage');
  const heap = await cdp.send('Runtime.getHeapUsage');
  const storeCount = await page.locator('#messages').getAttribute('data-loaded');

  const open = stats(inPage);
  console.log();
  console.log(`chat of ${N} messages, release headless binary, ${os.cpus().length} CPUs`);
  console.log(`open the chat, click → first row in the DOM: ${fmt(open)} (target p99 < ${TARGET_OPEN_MS} ms)`);
  console.log(`open the chat, page.goto → first row (UI start, event stream, history, click): ${fmt(stats(wall))}`);
  console.log(
    `scrolled up ${steps} steps in ${scrollS.toFixed(1)} s: oldest message in the DOM bench-${low} ` +
      `(${low === 0 ? 'reached the first message' : `${N - low} of ${N} messages scrolled through`}); at most ${maxRows} rows in the DOM`,
  );
  console.log(
    `RSS MiB of the headless process: after start ${rss0.rss.toFixed(1)}; after the ${OPENS} openings ${rss1.rss.toFixed(1)}; ` +
      `after scrolling ${rss2.rss.toFixed(1)} (peak ${rss2.hwm.toFixed(1)}; target < ${TARGET_RSS_MB})`,
  );
  console.log(
    `JS heap of the page after scrolling to the top (after a GC): used ${(heap.usedSize / 2 ** 20).toFixed(1)} MiB of ` +
      `${(heap.totalSize / 2 ** 20).toFixed(1)} MiB; messages in the UI's store: ${storeCount ?? 'not published'}`,
  );
  const ok = open.p99 < TARGET_OPEN_MS && rss2.rss < TARGET_RSS_MB;
  console.log(ok ? 'targets met' : 'TARGETS MISSED');
} finally {
  await browser?.close();
  await app?.stop();
  await rm(dataDir, { recursive: true, force: true });
}
