#!/usr/bin/env node
// Benchmark (not a test): how long from an assistant's callback to the message in the page?
//
//   cd ui && npm run build && npm run bench:latency [-- --count 1000 --gap-ms 10]
//
// Starts the real app in headless mode (SW_E2E_BIN as for the browser tests), opens the UI in
// Debian's Chromium, starts a call, then POSTs `count` messages to {callback_url}/tasks/<uuid>
// one after another (`gap-ms` apart). In the page a MutationObserver stamps the moment each
// message's row enters the DOM, and the following animation frame (when it is on screen). Page and
// Node clocks are aligned by a round-trip calibration. Prints p50 / p95 / p99 / max; the target is
// p99 < 16 ms from callback to DOM.

import { api, callback, launchBrowser, openUi, percentile, skipReason, sleep, startApp, uuid } from './harness.mjs';

const argv = process.argv.slice(2);
const arg = (name, dflt) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? Number(argv[i + 1]) : dflt;
};
const COUNT = arg('count', 1000);
const GAP_MS = arg('gap-ms', 10);
const TARGET_P99 = 16;

const reason = skipReason();
if (reason) {
  console.error(`bench_latency: cannot run: ${reason}`);
  process.exit(2);
}

const nodeNow = () => performance.timeOrigin + performance.now();

function stats(values) {
  const s = [...values].sort((a, b) => a - b);
  const mean = s.reduce((a, b) => a + b, 0) / (s.length || 1);
  return { n: s.length, p50: percentile(s, 50), p95: percentile(s, 95), p99: percentile(s, 99), max: s[s.length - 1], mean };
}
const fmt = (st) =>
  `p50 ${st.p50.toFixed(2)} ms · p95 ${st.p95.toFixed(2)} ms · p99 ${st.p99.toFixed(2)} ms · max ${st.max.toFixed(2)} ms · mean ${st.mean.toFixed(2)} ms (n=${st.n})`;

const app = await startApp();
const browser = await launchBrowser();
try {
  // Stamp when the event stream's bytes for a bench message reach the page's JavaScript (the UI
  // decodes every SSE chunk with TextDecoder), to tell the app's share from the UI's.
  await browser.context.addInitScript(() => {
    const arrived = (window.__benchArrive = {});
    const decode = TextDecoder.prototype.decode;
    TextDecoder.prototype.decode = function (...args) {
      const out = decode.apply(this, args);
      if (out.includes('"bench-')) {
        const t = performance.timeOrigin + performance.now();
        for (const m of out.matchAll(/"message_id":"(bench-\d+)"/g)) if (!(m[1] in arrived)) arrived[m[1]] = t;
      }
      return out;
    };
  });
  const page = await openUi(browser.context, app.ready);
  const call = await api(app.ready, 'POST', '/api/calls', { title: 'Latency benchmark' });
  if (call.status !== 201) throw new Error(`POST /api/calls → ${call.status}`);
  const sid = call.json.session_id;
  await page.waitForSelector(`.app[data-session="${sid}"]`);

  // Stamp each bench row when it enters the DOM, and at the next frame.
  await page.evaluate(() => {
    const dom = (window.__benchDom = {});
    const frame = (window.__benchFrame = {});
    const list = document.querySelector('#messages');
    new MutationObserver((records) => {
      const t = performance.timeOrigin + performance.now();
      const fresh = [];
      for (const r of records) {
        for (const n of r.addedNodes) {
          const mid = n instanceof HTMLElement ? n.dataset.messageId : undefined;
          if (mid && mid.startsWith('bench-') && !(mid in dom)) {
            dom[mid] = t;
            fresh.push(mid);
          }
        }
      }
      if (fresh.length) {
        requestAnimationFrame(() => {
          const tf = performance.timeOrigin + performance.now();
          for (const mid of fresh) frame[mid] = tf;
        });
      }
    }).observe(list, { childList: true });
  });

  // Align the clocks: the page's time minus Node's at the midpoint of the fastest round trip.
  let best = { rtt: Infinity, offset: 0 };
  for (let i = 0; i < 30; i++) {
    const a = nodeNow();
    const p = await page.evaluate(() => performance.timeOrigin + performance.now());
    const b = nodeNow();
    if (b - a < best.rtt) best = { rtt: b - a, offset: p - (a + b) / 2 };
  }

  // Warm up the connection and the page (not measured).
  for (let i = 0; i < 20; i++) {
    await callback(app.ready, uuid(), { session_id: sid, status: 'message', message_id: `warm-${i}`, reply_text: `warm-up ${i}` });
  }
  await sleep(300);

  const sent = new Map();
  const acks = [];
  const t0 = Date.now();
  for (let i = 0; i < COUNT; i++) {
    const mid = `bench-${i}`;
    const start = nodeNow();
    sent.set(mid, start);
    const r = await callback(app.ready, uuid(), { session_id: sid, status: 'message', message_id: mid, reply_text: `Benchmark message ${i}: the **budget** is ${i}k.` });
    acks.push(nodeNow() - start);
    if (r.status !== 200) throw new Error(`callback ${i} → ${r.status} ${JSON.stringify(r.json)}`);
    if (GAP_MS > 0) await sleep(GAP_MS);
  }
  // Wait for the stragglers.
  const deadline = Date.now() + 10_000;
  while (Date.now() < deadline) {
    const n = await page.evaluate(() => Object.keys(window.__benchFrame).length);
    if (n >= COUNT) break;
    await sleep(100);
  }
  const { dom, frame, arrive } = await page.evaluate(() => ({ dom: window.__benchDom, frame: window.__benchFrame, arrive: window.__benchArrive }));
  const toDom = [];
  const toFrame = [];
  const toArrive = [];
  const uiOnly = [];
  let missing = 0;
  for (const [mid, start] of sent) {
    if (dom[mid] === undefined) {
      missing++;
      continue;
    }
    toDom.push(dom[mid] - best.offset - start);
    if (frame[mid] !== undefined) toFrame.push(frame[mid] - best.offset - start);
    if (arrive[mid] !== undefined) {
      toArrive.push(arrive[mid] - best.offset - start);
      uiOnly.push(dom[mid] - arrive[mid]);
    }
  }
  const rows = await page.locator('#messages .vrow').count();

  const domStats = stats(toDom);
  console.log(`StageWhisper callback → UI latency (${app.label}, Chromium headless)`);
  console.log(`  messages: ${COUNT} sent in ${((Date.now() - t0) / 1000).toFixed(1)} s, ${GAP_MS} ms apart; missing in the DOM: ${missing}`);
  console.log(`  clock alignment: best round trip ${best.rtt.toFixed(2)} ms (error ≤ ±${(best.rtt / 2).toFixed(2)} ms)`);
  console.log(`  callback answered (HTTP 200):     ${fmt(stats(acks))}`);
  console.log(`  callback → event bytes in the page: ${fmt(stats(toArrive))}`);
  console.log(`  event bytes → row in the DOM (UI): ${fmt(stats(uiOnly))}`);
  console.log(`  callback → row in the DOM:        ${fmt(domStats)}`);
  console.log(`  callback → next frame (on screen): ${fmt(stats(toFrame))}`);
  console.log(`  rows in the DOM at the end: ${rows} (virtualised)`);
  console.log(`  target p99 < ${TARGET_P99} ms (callback → DOM): ${domStats.p99 < TARGET_P99 ? 'MET' : 'NOT MET'}`);
} finally {
  await browser.close();
  await app.stop();
}
