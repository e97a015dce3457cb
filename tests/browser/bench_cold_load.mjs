#!/usr/bin/env node
// Benchmark (not a test): what a cold load of the UI costs.
//
//   cd ui && npm run build && npm run bench:cold-load [-- --loads 15 --slow-kbps 0]
//
// Starts the real app in headless mode (SW_E2E_BIN as for the browser tests; point it at an
// older build to compare), then loads the UI `loads` times, each in a fresh Chromium profile (an
// empty cache), and reports the bytes that crossed the wire for the page's own files (the HTML,
// the script, the stylesheet, the favicon: Chromium's `encodedDataLength`, headers included) and
// the time from navigation to a connected UI (`.app[data-conn="live"]`: the event stream is up).
// A second load in the same profile shows what the cache saves. `--slow-kbps N` throttles the
// network to N kbit/s down (0: loopback as it is), which is where compression shows in time.

import { launchBrowser, percentile, skipReason, startApp } from './harness.mjs';

const argv = process.argv.slice(2);
const arg = (name, dflt) => {
  const i = argv.indexOf(`--${name}`);
  return i >= 0 ? Number(argv[i + 1]) : dflt;
};
const LOADS = arg('loads', 15);
const SLOW_KBPS = arg('slow-kbps', 0);

const reason = skipReason();
if (reason) {
  console.error(`bench_cold_load: cannot run: ${reason}`);
  process.exit(2);
}

const app = await startApp();
const { ready } = app;
const url = `${ready.ui_url}#token=${encodeURIComponent(ready.ui_token)}`;
const uiOrigin = new URL(ready.ui_url).origin;

/** One load in `page`: bytes of the UI's files over the wire, and ms to a live UI. */
async function load(page) {
  const cdp = await page.context().newCDPSession(page);
  await cdp.send('Network.enable');
  if (SLOW_KBPS > 0) {
    await cdp.send('Network.emulateNetworkConditions', {
      offline: false,
      latency: 20,
      downloadThroughput: (SLOW_KBPS * 1024) / 8,
      uploadThroughput: (SLOW_KBPS * 1024) / 8,
    });
  }
  const urls = new Map();
  let bytes = 0;
  let files = 0;
  cdp.on('Network.responseReceived', (e) => urls.set(e.requestId, e.response.url));
  cdp.on('Network.loadingFinished', (e) => {
    const u = urls.get(e.requestId);
    if (u && u.startsWith(uiOrigin) && !new URL(u).pathname.startsWith('/api/')) {
      bytes += e.encodedDataLength;
      files++;
    }
  });
  const t0 = performance.now();
  await page.goto(url);
  await page.waitForSelector('.app[data-conn="live"]', { timeout: 30_000 });
  const ms = performance.now() - t0;
  await cdp.detach();
  return { bytes, files, ms };
}

const cold = [];
const warm = [];
for (let i = 0; i < LOADS; i++) {
  const browser = await launchBrowser();
  try {
    const page = await browser.context.newPage();
    cold.push(await load(page));
    // The same profile again: hashed files come from the cache, the index is revalidated.
    const again = await browser.context.newPage();
    warm.push(await load(again));
  } finally {
    await browser.close();
  }
}
await app.stop();

const summary = (xs) => {
  const ms = xs.map((x) => x.ms).sort((a, b) => a - b);
  const bytes = xs.map((x) => x.bytes).sort((a, b) => a - b);
  return {
    bytes_p50: percentile(bytes, 50),
    files: xs[0]?.files ?? 0,
    ms_p50: Number(percentile(ms, 50).toFixed(1)),
    ms_p90: Number(percentile(ms, 90).toFixed(1)),
  };
};
const out = { bench: 'cold_load', app: app.label, loads: LOADS, slow_kbps: SLOW_KBPS, cold: summary(cold), warm: summary(warm) };
console.log(JSON.stringify(out));
console.log(
  `cold: ${out.cold.bytes_p50} bytes in ${out.cold.files} files, live in p50 ${out.cold.ms_p50} ms (p90 ${out.cold.ms_p90}); ` +
    `second load: ${out.warm.bytes_p50} bytes, live in p50 ${out.warm.ms_p50} ms`,
);
