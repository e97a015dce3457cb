// Models a person chooses, in the browser against the real headless app: the catalogue is
// replaced (STAGEWHISPER_MODEL_CATALOG) by one whose files a loopback HTTP server in this test
// serves (Range requests, throttled so progress can be seen), so every download is the app's own.
// The files are model-like (a whisper.cpp header, then bytes): the app checks size and SHA-256.
//
// - the first-run guide offers the recommended model with one click; nothing downloads before;
// - Settings → Audio → Model lists the models with size, languages, accuracy, installed; the
//   download shows a progress bar that moves, then "Installed" and the disk used;
// - Cancel stops a download and removes what arrived; Delete removes an installed model;
// - "Use a file I have" takes a path and adds the model.

import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { mkdtemp, rm, writeFile, readdir } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { api, ensureArtifacts, launchBrowser, openUi, skipReason, sleep, startApp } from './harness.mjs';

const reason = skipReason();
if (reason && process.env.SW_E2E_REQUIRE === '1') throw new Error(`browser tests cannot run: ${reason}`);
if (reason) console.log(`# SKIP model browser tests: ${reason}`);

const shot = (name) => path.join(ensureArtifacts(), `models-${name}.png`);

/** A model-like file: whisper tiny.en's header, then pseudo-random bytes. */
function modelLike(len, seed) {
  const b = Buffer.alloc(len);
  b.write('lmgg', 0, 'latin1');
  [51864, 1500, 384, 6, 4, 448, 384, 6, 4, 80, 1, 80, 201].forEach((v, i) => b.writeInt32LE(v, 4 + i * 4));
  let x = seed * 2654435761 >>> 0 || 1;
  for (let i = 56; i < len; i++) {
    x ^= x << 13; x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5; x >>>= 0;
    b[i] = x & 0xff;
  }
  return b;
}

/** Serves `files` with Range support, 64 KiB every `delay()` ms. */
async function fileServer(files, delay) {
  const server = http.createServer(async (req, res) => {
    const file = files[req.url.slice(1)];
    if (!file) {
      res.writeHead(404).end('not found');
      return;
    }
    const m = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
    const from = m ? Number(m[1]) : 0;
    res.writeHead(m ? 206 : 200, {
      'content-length': String(file.length - from),
      'accept-ranges': 'bytes',
      ...(m ? { 'content-range': `bytes ${from}-${file.length - 1}/${file.length}` } : {}),
    });
    for (let at = from; at < file.length && !res.destroyed; at += 65536) {
      await sleep(delay());
      res.write(file.subarray(at, Math.min(at + 65536, file.length)));
    }
    res.end();
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return { server, base: `http://127.0.0.1:${server.address().port}` };
}

describe('Settings → Audio → Model', { skip: reason ?? false }, () => {
  let app;
  let ready;
  let browser;
  let page;
  let srv;
  let dir;
  let delay = 60;
  const pageErrors = [];
  const tiny = modelLike(3_000_000, 1);
  const big = modelLike(6_000_000, 2);
  const sha = (b) => createHash('sha256').update(b).digest('hex');

  before(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'sw-models-'));
    srv = await fileServer({ 'tiny.bin': tiny, 'big.bin': big }, () => delay);
    const entry = (name, file, bytes, extra) => ({
      name, file: `ggml-${name}.bin`, size: bytes.length, sha256: sha(bytes), url: `${srv.base}/${file}`,
      languages: 'en', accuracy: `Accuracy of ${name}`, speed: `Speed of ${name}`, ...extra,
    });
    const catalog = path.join(dir, 'catalog.json');
    await writeFile(catalog, JSON.stringify({ models: [
      entry('test-tiny', 'tiny.bin', tiny, { recommended: true, wer_percent: 7.7 }),
      entry('test-big', 'big.bin', big, { languages: 'multilingual' }),
    ] }));
    app = await startApp([], { env: { STAGEWHISPER_MODEL_CATALOG: catalog } });
    ready = app.ready;
    browser = await launchBrowser();
    page = await browser.context.newPage();
    page.on('pageerror', (e) => pageErrors.push(String(e)));
    await openUi(browser.context, ready, page);
  });

  after(async () => {
    await browser?.close();
    const exit = await app?.stop();
    srv?.server.close();
    if (dir) await rm(dir, { recursive: true, force: true });
    if (app) assert.deepEqual(exit, { code: 0, signal: null }, `the app should exit 0 on SIGTERM; stderr tail:\n${app.stderr().slice(-2000)}`);
    assert.deepEqual(pageErrors, [], 'no script errors in the page');
  });

  const row = (name) => page.locator(`#model-list li[data-model="${name}"]`);

  it('the first-run guide offers the recommended model, and one click downloads it', async () => {
    const offer = page.locator('#first-run-model');
    await offer.waitFor({ state: 'visible', timeout: 15_000 });
    assert.match(await offer.innerText(), /test-tiny/);
    assert.match(await offer.innerText(), /3\.0 MB/);
    // Nothing has been downloaded without a click.
    await sleep(300);
    assert.equal((await api(ready, 'GET', '/api/models')).json.models[0].installed, false);
    await page.locator('#first-run-guide, #first-run').first().screenshot({ path: shot('first-run') });
    await offer.click();
    await page.waitForFunction(() => /Downloading/.test(document.querySelector('#first-run-model-state')?.textContent ?? ''), null, { timeout: 10_000 });

    // Settings → Audio → Model follows it with a moving progress bar, then "Installed".
    await page.keyboard.press('Control+5');
    await row('test-tiny').waitFor({ state: 'visible', timeout: 10_000 });
    const bar = page.locator('#model-test-tiny-progress');
    await bar.waitFor({ state: 'visible', timeout: 10_000 });
    const v1 = Number(await bar.evaluate((p) => p.value));
    await page.waitForFunction((v) => Number(document.querySelector('#model-test-tiny-progress')?.value) > v, v1, { timeout: 10_000 });
    assert.match(await page.locator('#model-test-tiny-state').innerText(), /Downloading… .* of 3\.0 MB \(\d+ %\)/);
    await page.locator('#settings-models').screenshot({ path: shot('downloading') });
    await page.waitForFunction(() => document.querySelector('#model-list li[data-model="test-tiny"]')?.dataset.installed === 'true', null, { timeout: 30_000 });
    const text = await row('test-tiny').innerText();
    assert.match(text, /Installed/);
    assert.match(text, /Recommended/);
    assert.match(text, /Accuracy of test-tiny/);
    assert.match(text, /English/);
    assert.match(text, /ggml-test-tiny\.bin/);
    assert.match(await row('test-big').innerText(), /6\.0 MB · Many languages/);
    await page.waitForFunction(() => /3\.0 MB/.test(document.querySelector('#model-disk-used')?.textContent ?? ''), null, { timeout: 5_000 });
    await page.locator('#settings-models').screenshot({ path: shot('installed') });
    // Use makes it the speech engine: Whisper with this model, and the engine form follows.
    await page.locator('#model-test-tiny-use').click();
    await page.waitForFunction(() => /now recognised by Whisper test-tiny/.test(document.querySelector('#model-status')?.textContent ?? ''), null, { timeout: 10_000 });
    const engine = (await api(ready, 'GET', '/api/audio')).json.engine;
    assert.equal(engine.kind, 'whisper');
    assert.equal(engine.model, 'test-tiny');
    await page.waitForFunction(() => document.querySelector('#audio-engine-whisper')?.checked === true, null, { timeout: 5_000 });
    assert.equal(await page.locator('#audio-model').inputValue(), 'test-tiny');
    assert.equal(await page.locator('#audio-whisper-fields').isVisible(), true);
    assert.equal(await page.locator('#audio-openai-fields').isVisible(), false);
    assert.match(await page.locator('#audio-engine-notice').innerText(), /Whisper, model test-tiny.*no audio leaves it/);
  });

  it('Cancel stops a download and removes what arrived', async () => {
    delay = 80;
    await page.locator('#model-test-big-download').click();
    await page.locator('#model-test-big-progress').waitFor({ state: 'visible', timeout: 10_000 });
    await page.waitForFunction(() => Number(document.querySelector('#model-test-big-progress')?.value) > 0, null, { timeout: 10_000 });
    await page.locator('#model-test-big-cancel').click();
    // At once, even while bytes keep coming (the app waits for the download to stop).
    await page.locator('#model-test-big-download').waitFor({ state: 'visible', timeout: 3_000 });
    assert.equal(await row('test-big').getAttribute('data-installed'), 'false');
    const files = await readdir(path.join(app.dataDir, 'models'));
    assert.deepEqual(files, ['ggml-test-tiny.bin']);
    delay = 60;
  });

  it('Delete removes an installed model; "Use a file I have" adds one', async () => {
    await page.locator('#model-test-tiny-delete').click();
    await page.locator('#model-test-tiny-download').waitFor({ state: 'visible', timeout: 10_000 });
    await page.waitForFunction(() => /Models use 0 B/.test(document.querySelector('#model-disk-used')?.textContent ?? ''), null, { timeout: 5_000 });
    const own = path.join(dir, 'ggml-my-whisper.bin');
    await writeFile(own, modelLike(200_000, 3));
    await page.locator('#model-import-path').fill(own);
    await page.locator('#model-import').click();
    await page.waitForFunction(() => /Added as my-whisper/.test(document.querySelector('#model-import-result')?.textContent ?? ''), null, { timeout: 10_000 });
    await row('my-whisper').waitFor({ state: 'visible', timeout: 5_000 });
    assert.match(await row('my-whisper').innerText(), /Imported/);
    // A file that is not a model is refused in words.
    await writeFile(path.join(dir, 'notes.bin'), 'hello');
    await page.locator('#model-import-path').fill(path.join(dir, 'notes.bin'));
    await page.locator('#model-import').click();
    await page.waitForFunction(() => document.querySelector('#model-import-result')?.dataset.errorCode === 'invalid_model_file', null, { timeout: 10_000 });
    await page.locator('#model-my-whisper-delete').click();
    await row('my-whisper').waitFor({ state: 'detached', timeout: 10_000 });
    await page.locator('#settings-models').screenshot({ path: shot('after-delete') });
  });
});
