// Shared helpers for the browser tests and the latency benchmark: start the real app in headless
// mode, read its ready line, drive Debian's Chromium through playwright-core (which never downloads
// a browser), and talk to the callback listener and the control API like an assistant would.
//
// Environment:
//   SW_E2E_BIN      path of the app binary (default: <repo>/target/debug/stagewhisper).
//   SW_E2E_REQUIRE  =1: a missing binary fails the run instead of skipping it (and, for the
//                   tests that hear a call, missing PulseAudio / espeak-ng too; so does
//                   SW_AUDIO_REQUIRE=1).
//   CHROMIUM        path of the browser (default: `command -v chromium`).

import { execFileSync, spawn } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { existsSync, mkdirSync } from 'node:fs';
import { chmod, mkdtemp, rm } from 'node:fs/promises';
import { createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import { createInterface } from 'node:readline';
import { fileURLToPath } from 'node:url';

export const REPO = fileURLToPath(new URL('../../', import.meta.url));
export const UI_DIST = path.join(REPO, 'ui', 'dist');
export const ARTIFACTS = path.join(REPO, 'tests', 'artifacts');

// playwright-core is a dev dependency of ui/ (the only npm project in the repo).
const requireFromUi = createRequire(path.join(REPO, 'ui', 'package.json'));
const { chromium } = requireFromUi('playwright-core');

export const CHROMIUM_FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

/** What to run as the app: `{ cmd, args, label }`, or `{ missing }` when it does not exist. */
export function appCommand() {
  const env = process.env.SW_E2E_BIN;
  const bin = env || path.join(REPO, 'target', 'debug', 'stagewhisper');
  if (!existsSync(bin)) return { missing: bin };
  return { cmd: bin, args: [], label: path.relative(REPO, bin) || bin };
}

/** Why the suite cannot run (missing binary / browser / build), or null. */
export function skipReason() {
  const app = appCommand();
  if (app.missing) {
    const shown = app.missing.startsWith(REPO) ? path.relative(REPO, app.missing) : app.missing;
    return `app binary not built (${shown}); build it or set SW_E2E_BIN`;
  }
  if (!chromiumPath()) return 'chromium not installed (apt-get install -y chromium)';
  if (!existsSync(path.join(UI_DIST, 'index.html'))) return 'ui/dist missing: run `npm run build` in ui/';
  return null;
}

export function chromiumPath() {
  if (process.env.CHROMIUM) return process.env.CHROMIUM;
  try {
    return execFileSync('sh', ['-c', 'command -v chromium || command -v chromium-browser'], { encoding: 'utf8' }).trim() || null;
  } catch {
    return null;
  }
}

/**
 * Starts `stagewhisper --headless --data-dir <tmp> --ui-dir ui/dist [...extra]` and resolves with
 * its ready line. The process is killed by `stop()` (SIGTERM, then SIGKILL after 5 s), which also
 * deletes the data dir unless it was given (`{ dataDir }`: the caller keeps and removes it).
 * `{ env }`: variables added to the app's environment (e.g. `PULSE_SERVER`).
 */
export async function startApp(extra = [], { dataDir: given, env = {} } = {}) {
  const app = appCommand();
  if (app.missing) throw new Error(`app binary missing: ${app.missing}`);
  const dataDir = given ?? (await mkdtemp(path.join(os.tmpdir(), 'sw-e2e-data-')));
  const args = [...app.args, '--headless', '--data-dir', dataDir, '--ui-dir', UI_DIST, ...extra];
  const proc = spawn(app.cmd, args, { cwd: REPO, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, RUST_LOG: process.env.RUST_LOG ?? 'info', ...env } });
  const stderr = [];
  proc.stderr.setEncoding('utf8');
  proc.stderr.on('data', (d) => {
    stderr.push(d);
    if (stderr.length > 2000) stderr.splice(0, 1000);
  });
  const stdoutLines = [];
  const rl = createInterface({ input: proc.stdout });
  const ready = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`no ready line within 30 s; stderr:\n${stderr.join('').slice(-4000)}`)), 30_000);
    proc.once('exit', (code, sig) => {
      clearTimeout(timer);
      reject(new Error(`app exited before ready (code ${code}, signal ${sig}); stderr:\n${stderr.join('').slice(-4000)}`));
    });
    rl.once('line', (line) => {
      clearTimeout(timer);
      try {
        resolve(JSON.parse(line));
      } catch (e) {
        reject(new Error(`ready line is not JSON: ${JSON.stringify(line)} (${e.message})`));
      }
    });
  });
  rl.on('line', (l) => stdoutLines.push(l)); // the contract says: nothing else on stdout
  let exited = null;
  proc.on('exit', (code, signal) => (exited = { code, signal }));
  return {
    ready,
    dataDir,
    label: app.label,
    proc,
    stderr: () => stderr.join(''),
    extraStdout: () => stdoutLines,
    exited: () => exited,
    async stop() {
      if (exited === null) {
        proc.kill('SIGTERM');
        const t = setTimeout(() => proc.kill('SIGKILL'), 5000);
        await new Promise((r) => (exited !== null ? r() : proc.once('exit', r)));
        clearTimeout(t);
      }
      if (!given) await rm(dataDir, { recursive: true, force: true });
      return exited;
    },
  };
}

/** A fresh Chromium profile (persistent context on a new temporary --user-data-dir). */
export async function launchBrowser({ colorScheme = 'light', viewport = { width: 1100, height: 760 } } = {}) {
  const exe = chromiumPath();
  if (!exe) throw new Error('chromium not found');
  const userDataDir = await mkdtemp(path.join(os.tmpdir(), 'sw-e2e-chromium-'));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: exe,
    headless: true,
    args: CHROMIUM_FLAGS,
    viewport,
    colorScheme,
    reducedMotion: 'reduce',
  });
  return {
    context,
    async close() {
      await context.close().catch(() => {});
      await rm(userDataDir, { recursive: true, force: true });
    },
  };
}

/** Opens the UI with the token in the fragment and waits until the event stream is live. */
export async function openUi(context, ready, page) {
  const p = page ?? (await context.newPage());
  await p.goto(`${ready.ui_url}#token=${encodeURIComponent(ready.ui_token)}`);
  await p.waitForSelector('.app[data-conn="live"]', { timeout: 15_000 });
  return p;
}

export const uuid = () => randomUUID();

async function asJson(res) {
  const text = await res.text();
  try {
    return text ? JSON.parse(text) : null;
  } catch {
    return text;
  }
}

/** POST {callback_url}/tasks/{taskId} as an assistant would. */
export async function callback(ready, taskId, body, { token = ready.callback_token, headers = {} } = {}) {
  const res = await fetch(`${ready.callback_url.replace(/\/$/, '')}/tasks/${taskId}`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${token}`, 'Content-Type': 'application/json', ...headers },
    body: JSON.stringify(body),
  });
  return { status: res.status, headers: res.headers, json: await asJson(res) };
}

/** A control API call with the UI token. */
export async function api(ready, method, route, body) {
  const headers = { Authorization: `Bearer ${ready.ui_token}` };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(new URL(route, ready.ui_url), { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.status, headers: res.headers, json: await asJson(res) };
}

export function ensureArtifacts() {
  mkdirSync(ARTIFACTS, { recursive: true });
  return ARTIFACTS;
}

export function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * An HTTP proxy in front of the UI listener that can cut the event stream like a network drop.
 * It rewrites Host (and Origin) to the listener's own, which the app requires.
 *   drop('reset' | 'end')  cut every open /api/events response (TCP reset, or a clean EOF)
 *   block(true|false)      while blocked, new /api/events requests are reset at once
 *   eventRequests          every /api/events request seen: { url, lastEventId }
 */
export async function startProxy(uiUrl) {
  const http = await import('node:http');
  const target = new URL(uiUrl);
  const streams = new Set();
  const eventRequests = [];
  let blocked = false;
  const server = http.createServer((req, res) => {
    const isEvents = req.url.startsWith('/api/events');
    if (isEvents) {
      eventRequests.push({ url: req.url, lastEventId: req.headers['last-event-id'] ?? null, at: Date.now() });
      if (blocked) {
        req.socket.destroy();
        return;
      }
    }
    const headers = { ...req.headers, host: target.host };
    if (headers.origin) headers.origin = target.origin;
    if (headers.referer) headers.referer = target.origin + '/';
    const up = http.request({ host: target.hostname, port: target.port, method: req.method, path: req.url, headers }, (upRes) => {
      res.writeHead(upRes.statusCode, upRes.headers);
      res.flushHeaders(); // pass the head on at once, as a network would (node holds it until the first byte)
      upRes.pipe(res);
      if (isEvents) {
        const entry = { req, res, upRes, up };
        streams.add(entry);
        res.on('close', () => {
          streams.delete(entry);
          up.destroy();
        });
      }
    });
    up.on('error', () => res.destroy());
    req.pipe(up);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}/`,
    eventRequests,
    openStreams: () => streams.size,
    drop(mode = 'reset') {
      for (const s of [...streams]) {
        s.up.destroy();
        if (mode === 'end') s.res.end();
        else s.req.socket.destroy();
        streams.delete(s);
      }
    },
    block(on) {
      blocked = on;
    },
    async close() {
      this.drop();
      server.closeAllConnections?.();
      await new Promise((r) => server.close(r));
    },
  };
}

/**
 * A stand-in assistant on loopback for the UI tests (the real peers, Hermes and OpenClaw, are
 * tested in tests/interop/): `GET /v1/health` 200, `POST /v1/ping` 200 with the right bearer token
 * (else 401), `POST /v1/incoming` 202 `{status: "accepted"}` by default, `GET /v1/events` 404.
 *   respond(fn)   fn(body) → { status, body } answers `/v1/incoming` (null: back to 202)
 *   hold(pred)    holds the answers to `/v1/incoming` bodies matching pred (default: all) until `release()`
 *   incoming      every `/v1/incoming` body received, in order
 */
export async function startFakeAssistant({ token }) {
  const http = await import('node:http');
  const incoming = [];
  let responder = null;
  let gate = null;
  const sockets = new Set();
  const server = http.createServer(async (req, res) => {
    let data = '';
    for await (const chunk of req) data += chunk;
    const url = new URL(req.url, 'http://fake');
    const send = (status, obj) => {
      if (res.destroyed) return;
      res.writeHead(status, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify(obj));
    };
    if (req.method === 'GET' && url.pathname === '/v1/health') return send(200, { ok: true, version: 'fake-0.1' });
    if (req.headers.authorization !== `Bearer ${token}`) return send(401, { error: 'unauthorized', message: 'wrong relay token' });
    if (req.method === 'POST' && url.pathname === '/v1/ping') return send(200, { ok: true });
    if (req.method === 'POST' && url.pathname === '/v1/incoming') {
      let body;
      try {
        body = JSON.parse(data);
      } catch {
        return send(400, { error: 'invalid_json', message: 'body is not JSON' });
      }
      incoming.push(body);
      if (gate && gate.pred(body)) await gate.promise;
      const answer = (responder && responder(body)) || { status: 202, body: { ok: true, status: 'accepted' } };
      return send(answer.status, answer.body);
    }
    return send(404, { error: 'not_found', message: `no route ${req.method} ${url.pathname}` });
  });
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}`,
    token,
    incoming,
    respond(fn) {
      responder = fn;
    },
    hold(pred = () => true) {
      if (gate) return;
      let open;
      gate = { promise: new Promise((r) => (open = r)), open, pred };
    },
    release() {
      const g = gate;
      gate = null;
      g?.open();
    },
    async close() {
      this.release();
      for (const s of sockets) s.destroy();
      await new Promise((r) => server.close(r));
    },
  };
}

// ---- a private sound server ------------------------------------------------------------------

/** The programs the tests that hear a call need (Debian: pulseaudio pulseaudio-utils espeak-ng). */
export const AUDIO_TOOLS = ['pulseaudio', 'pactl', 'paplay', 'parec', 'espeak-ng'];

/** Whether audio tests must run (a missing tool fails them instead of skipping them). */
export const audioRequired = () => process.env.SW_E2E_REQUIRE === '1' || process.env.SW_AUDIO_REQUIRE === '1';

/** Why a private PulseAudio with speech cannot run here, or null. */
export function audioSkipReason() {
  const missing = AUDIO_TOOLS.filter((t) => {
    try {
      execFileSync('sh', ['-c', `command -v ${t}`], { stdio: 'ignore' });
      return false;
    } catch {
      return true;
    }
  });
  return missing.length ? `missing ${missing.join(', ')} (apt-get install -y --no-install-recommends pulseaudio pulseaudio-utils espeak-ng)` : null;
}

/**
 * A private PulseAudio (as root too; no --system) in a fresh runtime directory, with what a call
 * needs: a null sink `call` (the call app's output: its monitor `call.monitor` is "Them"), a null
 * sink `micfeed` and the source `mic` remapped from its monitor (what is played into `micfeed`
 * is what the microphone hears: "You"); `call` and `mic` are the defaults. `env` points a client
 * at it (`PULSE_SERVER`); `say(sink, text)` speaks into a sink with espeak-ng and waits until
 * it has played; `stop()` ends the server (by its pid) and removes the directory.
 */
export async function startPulse() {
  const dir = await mkdtemp(path.join(os.tmpdir(), 'sw-pulse-'));
  await chmod(dir, 0o700);
  const socket = path.join(dir, 'native');
  const env = { ...process.env, HOME: dir, XDG_RUNTIME_DIR: dir, PULSE_SERVER: `unix:${socket}` };
  const proc = spawn(
    'pulseaudio',
    [
      '-n',
      '--daemonize=no',
      '--use-pid-file=no',
      '--exit-idle-time=-1',
      '--disallow-exit',
      '--log-target=stderr',
      '-L',
      `module-native-protocol-unix socket=${socket} auth-anonymous=1`,
      '-L',
      'module-null-sink sink_name=call rate=48000 channels=2 sink_properties=device.description=Call',
      '-L',
      'module-null-sink sink_name=micfeed rate=48000 channels=1 sink_properties=device.description=Mic-feed',
      '-L',
      'module-remap-source master=micfeed.monitor source_name=mic source_properties=device.description=Test-microphone',
    ],
    { cwd: dir, env, stdio: ['ignore', 'ignore', 'pipe'] },
  );
  const log = [];
  proc.stderr.setEncoding('utf8');
  proc.stderr.on('data', (d) => {
    log.push(d);
    if (log.length > 500) log.splice(0, 250);
  });
  let exited = null;
  proc.on('exit', (code, signal) => (exited = { code, signal }));
  const pactl = (...args) => execFileSync('pactl', args, { env, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
  const deadline = Date.now() + 15_000;
  for (;;) {
    if (exited) throw new Error(`pulseaudio exited (${JSON.stringify(exited)}):\n${log.join('').slice(-3000)}`);
    try {
      pactl('info');
      break;
    } catch {
      if (Date.now() > deadline) {
        proc.kill('SIGKILL');
        throw new Error(`pulseaudio did not answer within 15 s:\n${log.join('').slice(-3000)}`);
      }
      await sleep(100);
    }
  }
  pactl('set-default-sink', 'call');
  pactl('set-default-source', 'mic');
  let n = 0;
  return {
    dir,
    server: env.PULSE_SERVER,
    env: { PULSE_SERVER: env.PULSE_SERVER },
    pactl,
    log: () => log.join(''),
    /** Speaks `text` (espeak-ng, voice `voice`) into `sink` (`micfeed`: You; `call`: Them). */
    async say(sink, text, { voice = 'en-us', speed = 140 } = {}) {
      const wav = path.join(dir, `say-${++n}.wav`);
      execFileSync('espeak-ng', ['-v', voice, '-s', String(speed), '-w', wav, text], { stdio: 'ignore' });
      await new Promise((resolve, reject) => {
        const p = spawn('paplay', ['-d', sink, wav], { env, stdio: ['ignore', 'ignore', 'pipe'] });
        let err = '';
        p.stderr.on('data', (d) => (err += d));
        p.on('error', reject);
        p.on('exit', (code) => (code === 0 ? resolve() : reject(new Error(`paplay -d ${sink} exited ${code}: ${err}`))));
      });
    },
    async stop() {
      if (exited === null) {
        proc.kill('SIGTERM');
        const t = setTimeout(() => proc.kill('SIGKILL'), 3000);
        await new Promise((r) => (exited !== null ? r() : proc.once('exit', r)));
        clearTimeout(t);
      }
      await rm(dir, { recursive: true, force: true });
    },
  };
}
