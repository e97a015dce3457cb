#!/usr/bin/env python3
"""A long call, compressed: the real headless binary under an assistant's traffic for hours.

Drives `stagewhisper-headless` (or `stagewhisper --headless`) the way a call does:
- the UI side: a call (`POST /api/calls`), its transcript (an interim turn or two, then the final
  one, every few seconds, alternating speakers), a chat message every few minutes, and a real SSE
  client on `GET /api/events` for the whole run (resuming by `Last-Event-ID` if it drops);
  with `--browser`, the real UI page in headless Chromium too (its own SSE connection);
- the assistant side: a minimal assistant on loopback that accepts `POST /v1/incoming` (the
  app's outbox delivers every final turn and chat message to it) and answers as a real one would:
  an insight every few turns (typing keepalives, then the message), and to each chat message
  typing keepalives, a streamed draft (`text-start`, many `text-delta`s) and the final reply.

Time is compressed by `--scale` (default 20: three hours of call in nine minutes): every gap of
the schedule above is divided by it, so the app sees `scale` times the real rate of requests. What
is not compressed: the app's own timers (the typing timeout is passed scaled, `--typing-timeout-secs`;
the WAL fsync every second, checkpoints when idle, the outbox's 250 ms gap per session and its
backoff run in real time). RSS, anonymous RSS, open file descriptors and threads are read from
/proc every call-minute (every 60/scale s). After warm-up (`--warmup` call-minutes) the figures
must end within `--tolerance` (10 %) of where they were: the mean of the last five samples against
the mean of the five after warm-up. The samples go to a CSV, the curve to a PNG (an SVG drawn here,
converted by ImageMagick's `convert` when present).

Also checked: every callback and user message acknowledged is shown afterwards; the SSE client
saw every event of the log exactly once, in order. Exit status 0 when all holds.

  tests/soak/soak.py --bin target/release/stagewhisper-headless [--minutes 180] [--scale 20]
                     [--out tests/artifacts/soak] [--browser]
"""

import argparse
import csv
import heapq
import http.client
import http.server
import itertools
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import plot  # noqa: E402  (beside this file)

TIMEOUT = 10  # bound of every request (a hang fails the run)


class Http:
    """One keep-alive connection per thread to a loopback listener."""

    def __init__(self, base, token):
        u = urllib.parse.urlsplit(base)
        self.host, self.port, self.token = u.hostname, u.port, token
        self.local = threading.local()

    def request(self, method, path, body=None, token=None):
        for attempt in (0, 1):
            conn = getattr(self.local, "conn", None)
            if conn is None:
                conn = http.client.HTTPConnection(self.host, self.port, timeout=TIMEOUT)
                self.local.conn = conn
            headers = {"Authorization": f"Bearer {token or self.token}"}
            data = None
            if body is not None:
                data = json.dumps(body).encode()
                headers["Content-Type"] = "application/json"
            try:
                conn.request(method, path, body=data, headers=headers)
                r = conn.getresponse()
                raw = r.read()
                try:
                    return r.status, json.loads(raw) if raw else None
                except ValueError:
                    return r.status, raw.decode(errors="replace")
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                conn.close()
                self.local.conn = None
                if attempt:
                    raise
        raise AssertionError("unreachable")


class Scheduler:
    """Actions due at call-time seconds, run by a few worker threads at `scale` × speed."""

    def __init__(self, scale, workers=4):
        self.scale, self.t0 = scale, time.monotonic()
        self.heap, self.seq = [], itertools.count()
        self.cv = threading.Condition()
        self.errors, self.stopped = [], False
        self.threads = [threading.Thread(target=self.work, daemon=True) for _ in range(workers)]
        for t in self.threads:
            t.start()

    def now(self):
        """Call time, in seconds."""
        return (time.monotonic() - self.t0) * self.scale

    def at(self, call_t, fn, *args):
        with self.cv:
            heapq.heappush(self.heap, (call_t, next(self.seq), fn, args))
            self.cv.notify()

    def after(self, delay, fn, *args):
        self.at(self.now() + delay, fn, *args)

    def work(self):
        while True:
            with self.cv:
                while not self.stopped and (not self.heap or self.heap[0][0] > self.now()):
                    wait = (self.heap[0][0] - self.now()) / self.scale if self.heap else 1.0
                    self.cv.wait(max(0.001, min(wait, 1.0)))
                if self.stopped:
                    return
                _, _, fn, args = heapq.heappop(self.heap)
            try:
                fn(*args)
            except Exception as e:  # noqa: BLE001 - reported at the end
                self.errors.append(f"{getattr(fn, '__name__', fn)}{args[:1]}: {e!r}")

    def stop(self):
        with self.cv:
            self.stopped = True
            self.cv.notify_all()
        for t in self.threads:
            t.join(TIMEOUT + 1)


class Soak:
    def __init__(self, a, ready, sched):
        self.a, self.sched = a, sched
        self.cb = Http(ready["callback_url"], ready["callback_token"])
        self.ui = Http(ready["ui_url"], ready["ui_token"])
        self.lock = threading.Lock()
        self.acked = {}  # session -> set(message_id)
        self.user_texts = set()
        self.counts = {}
        self.turn = 0
        self.rng = random.Random(14)

    def count(self, what):
        with self.lock:
            self.counts[what] = self.counts.get(what, 0) + 1

    # ---- the assistant's callbacks ----------------------------------------------------------

    def callback(self, body, token=None):
        s, v = self.cb.request("POST", f"/tasks/{body['task_id']}", body, token)
        if s != 200 or not isinstance(v, dict) or v.get("ok") is not True:
            raise AssertionError(f"callback {body['status']}: {s} {v}")
        self.count(body["status"])
        if body["status"] == "message" and not v.get("ignored"):
            with self.lock:
                self.acked.setdefault(body["session_id"], set()).add(body["message_id"])

    def incoming(self, v):
        """What the assistant does with one delivery of the app's outbox."""
        reason, session, task = v.get("reason"), v.get("session_id"), v.get("task_id")
        self.count(f"incoming:{reason}")
        if reason == "transcript_chunk":
            with self.lock:
                self.turn += 1
                n = self.turn
            if n % self.a.turns_per_insight == 0:
                self.insight(session, task, n)
        elif reason == "chat_message":
            self.chat_reply(session, task, (v.get("payload") or {}).get("user_message_id"))

    def insight(self, session, task, n):
        t = str(uuid.uuid4())
        for k in range(2):  # typing keepalives while it thinks
            self.sched.after(1 + 3 * k, self.callback, {"task_id": t, "session_id": session, "status": "typing"})
        self.sched.after(
            7,
            self.callback,
            {
                "task_id": t,
                "session_id": session,
                "status": "message",
                "message_id": f"insight-{n}",
                "reply_text": f"Insight {n}: ask about the timeline; they mentioned budget twice. "
                + "Keep it short. " * self.rng.randint(1, 6),
            },
        )

    def chat_reply(self, session, task, user_message_id):
        t = str(uuid.uuid4())
        base = {"task_id": t, "session_id": session, "user_message_id": user_message_id}
        for k in range(3):
            self.sched.after(0.5 + 3 * k, self.callback, {**base, "status": "typing"})
        start = 8.0
        self.sched.after(start, self.callback, {**base, "status": "stream", "chunk": {"type": "text-start", "id": "t1"}})
        words = ("Here is what I would say next, given what they just told you about the rollout " * 3).split()
        for k, w in enumerate(words):
            chunk = {"type": "text-delta", "id": "t1", "delta": w + " "}
            self.sched.after(start + 0.25 * (k + 1), self.callback, {**base, "status": "stream", "chunk": chunk})
        end = start + 0.25 * (len(words) + 2)
        self.sched.after(
            end,
            self.callback,
            {**base, "status": "message", "message_id": f"reply-{t}", "reply_text": " ".join(words)},
        )
        self.sched.after(end + 0.5, self.callback, {**base, "status": "completed"})

    # ---- the UI's side ----------------------------------------------------------------------

    def transcript(self, sid, n, final):
        speaker = "Me" if n % 2 else "Them"
        text = f"Turn {n}: " + "so what we were thinking about the next quarter is " * self.rng.randint(1, 4)
        s, v = self.ui.request(
            "POST", f"/api/calls/{sid}/transcript", {"speaker": speaker, "text": text, "is_final": final}
        )
        if s != (201 if final else 202):
            raise AssertionError(f"transcript turn {n} final={final}: {s} {v}")
        self.count("turn" if final else "interim")

    def user_message(self, sid, n):
        text = f"Chat message {n}: what should I ask next?"
        s, v = self.ui.request("POST", f"/api/sessions/{sid}/messages", {"text": text})
        if s != 201:
            raise AssertionError(f"user message {n}: {s} {v}")
        with self.lock:
            self.user_texts.add(text)
        self.count("user_message")

    def schedule_call(self, sid, minutes):
        end = minutes * 60.0
        gap = self.a.turn_gap
        for n, t in enumerate(itertools.takewhile(lambda t: t < end, itertools.count(2.0, gap))):
            self.sched.at(t - 0.5 * gap, self.transcript, sid, n, False)
            self.sched.at(t - 0.25 * gap, self.transcript, sid, n, False)
            self.sched.at(t, self.transcript, sid, n, True)
        for n, t in enumerate(itertools.takewhile(lambda t: t < end, itertools.count(30.0, self.a.chat_gap))):
            self.sched.at(t, self.user_message, sid, n)


class Assistant(http.server.ThreadingHTTPServer):
    daemon_threads = True


def assistant_server(soak_ref):
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):
            pass

        def reply(self, status, body):
            raw = json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True  # the app gave up on this attempt; it retries

        def do_GET(self):
            self.reply(200, {"status": "ok"})

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(n)
            if self.path.rstrip("/").endswith("/v1/incoming"):
                v = json.loads(body or b"{}")
                s = soak_ref[0]
                if s is not None:
                    s.sched.after(0.5, s.incoming, v)
                self.reply(202, {"status": "accepted"})
            else:
                self.reply(200, {"ok": True})

    srv = Assistant(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


class SseClient(threading.Thread):
    """A real `text/event-stream` reader of `/api/events`, resuming by `Last-Event-ID`."""

    def __init__(self, ui_url, token):
        super().__init__(daemon=True)
        u = urllib.parse.urlsplit(ui_url)
        self.host, self.port, self.token = u.hostname, u.port, token
        self.ids, self.reconnects, self.bad, self.stop = [], 0, [], False

    def run(self):
        last = 0
        while not self.stop:
            try:
                conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
                conn.request(
                    "GET",
                    f"/api/events?after={last}",
                    headers={"Authorization": f"Bearer {self.token}", "Last-Event-ID": str(last)},
                )
                r = conn.getresponse()
                if r.status != 200:
                    self.bad.append(f"GET /api/events: {r.status}")
                    time.sleep(1)
                    continue
                cur = None
                while not self.stop:
                    line = r.readline()
                    if not line:
                        break
                    line = line.decode().rstrip("\r\n")
                    if line.startswith("id:"):
                        cur = int(line[3:].strip())
                    elif line == "" and cur is not None:
                        if cur <= last:
                            self.bad.append(f"event {cur} after {last}")
                        self.ids.append(cur)
                        last, cur = cur, None
            except (OSError, http.client.HTTPException, ValueError):
                pass
            if not self.stop:
                self.reconnects += 1
                time.sleep(0.2)


def read_status(pid):
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "RssAnon", "RssFile", "Threads"):
                out[k] = int(v.split()[0])
    out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    return out


def _tcp_rows():
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                next(f)
                for line in f:
                    yield line.split()
        except OSError:
            pass


def established(port):
    """Established TCP connections to a local listening port (from /proc/net/tcp)."""
    return sum(1 for c in _tcp_rows() if int(c[1].rsplit(":", 1)[1], 16) == port and c[3] == "01")


def browser_conns(port, marker):
    """Established connections to `port` held by the processes whose command line has `marker`
    (the browser's profile dir): the UI page's own requests and event stream."""
    inodes = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if marker.encode() not in f.read():
                    continue
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    inodes.add(link[8:-1])
        except OSError:
            continue
    return sum(1 for c in _tcp_rows()
               if int(c[2].rsplit(":", 1)[1], 16) == port and c[3] == "01" and c[9] in inodes)


def mean(xs):
    return sum(xs) / len(xs) if xs else float("nan")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", required=True, help="stagewhisper-headless (or stagewhisper, run with --headless)")
    p.add_argument("--minutes", type=float, default=180, help="call-minutes to simulate (default 180)")
    p.add_argument("--scale", type=float, default=20, help="time compression (default 20)")
    p.add_argument("--warmup", type=float, default=None, help="call-minutes of warm-up (default: a sixth)")
    p.add_argument("--tolerance", type=float, default=0.10)
    p.add_argument("--turn-gap", dest="turn_gap", type=float, default=6.0, help="call-seconds between final turns")
    p.add_argument("--turns-per-insight", dest="turns_per_insight", type=int, default=8)
    p.add_argument("--chat-gap", dest="chat_gap", type=float, default=240.0, help="call-seconds between chat messages")
    p.add_argument("--out", default=os.path.join(HERE, "..", "artifacts", "soak"), help="path prefix of the CSV / SVG / PNG")
    p.add_argument("--browser", action="store_true", help="also keep the UI open in headless Chromium")
    a = p.parse_args()
    warmup = a.warmup if a.warmup is not None else a.minutes / 6

    data = tempfile.mkdtemp(prefix="sw-soak-")
    typing_timeout = max(1, round(30 / a.scale))
    args = [a.bin]
    if os.path.basename(a.bin) == "stagewhisper":
        args.append("--headless")
    args += ["--data-dir", data, "--callback-listen", "127.0.0.1:0", "--ui-listen", "127.0.0.1:0",
             "--typing-timeout-secs", str(typing_timeout)]
    log = open(os.path.join(data, "..", os.path.basename(data) + ".log"), "w")
    app = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, env={**os.environ, "RUST_LOG": "warn"})
    ready = json.loads(app.stdout.readline())
    assert ready.get("event") == "ready", ready
    browser, profile = None, None
    failures = []
    try:
        soak_ref = [None]
        srv = assistant_server(soak_ref)
        ui = Http(ready["ui_url"], ready["ui_token"])
        s, v = ui.request("PUT", "/api/assistant",
                          {"base_url": f"http://127.0.0.1:{srv.server_address[1]}", "relay_token": "s" * 40})
        assert s == 200, (s, v)
        s, v = ui.request("POST", "/api/calls", {"title": "soak call"})
        assert s == 201, (s, v)
        sid, isid = v["session_id"], v["insights_session_id"]
        ui_port = urllib.parse.urlsplit(ready["ui_url"]).port
        sse = SseClient(ready["ui_url"], ready["ui_token"])
        sse.start()
        if a.browser:
            chromium = shutil.which("chromium") or shutil.which("chromium-browser")
            if chromium is None:
                failures.append("--browser: no chromium found")
            else:
                profile = tempfile.mkdtemp(prefix="sw-soak-chromium-")
                browser_log = open(os.path.join(profile, "..", os.path.basename(profile) + ".log"), "w+")
                started = time.monotonic()
                browser = subprocess.Popen(
                    [chromium, "--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run",
                     f"--user-data-dir={profile}", "--remote-debugging-port=0",
                     f"{ready['ui_url']}#token={ready['ui_token']}"],
                    stdout=subprocess.DEVNULL, stderr=browser_log)
                # The page is up once Chromium holds a connection to the UI listener (its
                # stream). Waited for before the soak's clock starts: a first Chromium start on
                # a fresh machine once took more than 30 s (CI), and that is Chromium's cold
                # start, not the app's.
                deadline = started + 120
                while browser_conns(ui_port, profile) < 1 and time.monotonic() < deadline:
                    if browser.poll() is not None:
                        break
                    time.sleep(0.2)
                if browser_conns(ui_port, profile) < 1:
                    browser_log.seek(0)
                    tail = browser_log.read()[-2000:]
                    failures.append(f"the UI page in Chromium never connected (waited {time.monotonic() - started:.0f} s; "
                                    f"Chromium {'exited ' + str(browser.returncode) if browser.poll() is not None else 'still running'}); "
                                    f"its last output:\n{tail}")
                else:
                    print(f"soak: the UI page in Chromium connected {time.monotonic() - started:.1f} s after its start", flush=True)

        sched = Scheduler(a.scale)
        soak = Soak(a, ready, sched)
        soak_ref[0] = soak
        soak.schedule_call(sid, a.minutes)

        pid = app.pid
        samples = []
        minute = 0
        print(f"soak: {a.minutes:g} call-minutes at ×{a.scale:g} ({a.minutes * 60 / a.scale:.0f} s), "
              f"pid {pid}, data dir {data}", flush=True)
        while minute <= a.minutes:
            due = minute * 60.0
            while sched.now() < due:
                time.sleep(min(0.05, (due - sched.now()) / a.scale + 0.001))
            st = read_status(pid)
            db = os.path.join(data, "stagewhisper.db")
            st["db_kib"] = os.path.getsize(db) // 1024
            st["wal_kib"] = (os.path.getsize(db + "-wal") if os.path.exists(db + "-wal") else 0) // 1024
            st["minute"] = minute
            st["events"] = len(sse.ids)
            st["ui_conns"] = established(ui_port)
            st["browser_conns"] = browser_conns(ui_port, profile) if browser is not None else 0
            samples.append(st)
            if minute % 10 == 0:
                print(f"  minute {minute:4d}: RSS {st['VmRSS'] / 1024:6.1f} MiB (anon {st['RssAnon'] / 1024:5.1f}), "
                      f"fds {st['fds']:3d}, threads {st['Threads']:3d}, db {st['db_kib'] / 1024:5.1f} + WAL {st['wal_kib'] / 1024:5.1f} MiB, "
                      f"events {st['events']}", flush=True)
            if app.poll() is not None:
                failures.append(f"the app exited ({app.returncode})")
                break
            minute += 1
        # Let the last replies land, then stop the traffic.
        time.sleep(30 / a.scale + 2)
        sched.stop()
        failures += [f"request failed: {e}" for e in sched.errors[:20]]

        # Every acknowledged message is shown; the SSE client saw the whole log once, in order.
        for session, want in soak.acked.items():
            path = "insights" if session.startswith("insights:") else "messages"
            s, items = ui.request("GET", f"/api/sessions/{urllib.parse.quote(session.removeprefix('insights:'))}/{path}")
            got = {m.get("message_id") for m in items} if s == 200 else set()
            if want - got:
                failures.append(f"{len(want - got)} acknowledged messages of {session} not shown")
        s, items = ui.request("GET", f"/api/sessions/{sid}/messages")
        shown = {m.get("text") for m in items if m.get("kind") == "user"}
        if soak.user_texts - shown:
            failures.append(f"{len(soak.user_texts - shown)} user messages not shown")
        whole = SseClient(ready["ui_url"], ready["ui_token"])
        whole.start()
        last = sse.ids[-1] if sse.ids else 0
        deadline = time.monotonic() + 30
        while (not whole.ids or whole.ids[-1] < last) and time.monotonic() < deadline:
            time.sleep(0.1)
        whole.stop = sse.stop = True
        log_ids = [i for i in whole.ids if i <= last]
        if log_ids != [i for i in sse.ids if i <= last]:
            failures.append(f"the live view saw {len(sse.ids)} events, the log has {len(log_ids)} up to {last}")
        failures += sse.bad[:5]
    finally:
        if browser is not None:
            browser.terminate()
            browser.wait(10)
            shutil.rmtree(profile, ignore_errors=True)
        app.send_signal(signal.SIGTERM)
        try:
            app.wait(20)
        except subprocess.TimeoutExpired:
            app.kill()
            failures.append("no exit within 20 s of SIGTERM")

    # The curve: after warm-up against the end.
    after = [x for x in samples if x["minute"] >= warmup]
    ref, end = after[:5], after[-5:]
    verdicts = []
    for key, label in (("VmRSS", "RSS"), ("RssAnon", "anonymous RSS"), ("fds", "open fds")):
        r, e = mean([x[key] for x in ref]), mean([x[key] for x in end])
        drift = (e - r) / r if r else float("nan")
        ok = abs(drift) <= a.tolerance
        verdicts.append((label, r, e, drift, ok))
        if key != "RssAnon" and not ok:
            failures.append(f"{label}: {r:.0f} after warm-up → {e:.0f} at the end ({drift:+.1%})")
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out + ".csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["minute", "VmRSS", "RssAnon", "RssFile", "fds", "Threads", "db_kib", "wal_kib", "events", "ui_conns", "browser_conns"])
        w.writeheader()
        w.writerows(samples)
    png = plot.plot(samples, a.out, warmup, title=f"{a.minutes:g} call-minutes at ×{a.scale:g}")

    print()
    print(f"traffic: {json.dumps(dict(sorted(soak.counts.items())))}")
    print(f"SSE: {len(sse.ids)} events, {sse.reconnects} reconnects; browser: {'yes' if browser else 'no'}; "
          f"connections on the UI port: {min(x['ui_conns'] for x in samples)}–{max(x['ui_conns'] for x in samples)}, "
          f"the browser's: {min(x['browser_conns'] for x in samples)}–{max(x['browser_conns'] for x in samples)}")
    if browser is not None and min(x["browser_conns"] for x in samples) < 1:
        failures.append("the UI page in Chromium lost its connection")
    print(f"warm-up {warmup:g} call-minutes; means of 5 samples after warm-up → at the end:")
    for label, r, e, drift, ok in verdicts:
        unit = "KiB" if label.endswith("RSS") else ""
        print(f"  {label:14s} {r:9.0f} {unit} → {e:9.0f} {unit} ({drift:+.1%}) {'ok' if ok else 'OUTSIDE ' + format(a.tolerance, '.0%')}")
    print(f"peak RSS {max(x['VmRSS'] for x in samples) / 1024:.1f} MiB, peak fds {max(x['fds'] for x in samples)}, "
          f"database {samples[-1]['db_kib'] / 1024:.1f} MiB + WAL {samples[-1]['wal_kib'] / 1024:.1f} MiB at the end "
          f"(WAL peak {max(x['wal_kib'] for x in samples) / 1024:.1f} MiB)")
    print(f"samples: {a.out}.csv; plot: {png or a.out + '.svg'}")
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return 1
    print("soak: ok")
    shutil.rmtree(data, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
