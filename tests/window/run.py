#!/usr/bin/env python3
"""Real-window end-to-end test of the desktop shell (Tauri + WebKitGTK) under Xvfb.

    python3 tests/window/run.py            # builds the binary (cargo build), then tests it
    python3 tests/window/run.py --bin PATH # tests an already built binary

Needs (Debian 12): xvfb, webkit2gtk-driver (WebKitWebDriver), imagemagick (`import`,
`convert`), and `tauri-driver` 2.x on the PATH (`cargo install tauri-driver --version ^2 --locked`).
Python standard library only: the WebDriver client is a few JSON-over-HTTP calls.

1. Direct launch in window mode (DISPLAY set, no --headless): the binary prints the same JSON ready
   line as in headless mode; a call is created through the control API and an assistant callback
   is posted to the callback listener; a screenshot of the display (`import -window root`) must
   show the painted window; then the window gets WM_DELETE_WINDOW (what a window manager sends
   when the user clicks the close button) and the process must exit 0 with the message durable
   (checked by starting the binary headless on the same data dir). While the window runs, a
   second `stagewhisper` in window mode on the same data dir must exit non-zero at once with
   `already running (pid N)` on stderr and leave the data dir as it was.
2. Through WebDriver (tauri-driver → WebKitWebDriver, which launches the binary): the page has
   `window.__TAURI__`; `invoke('api')` gives the callback URL and token and creates a call; an
   assistant callback posted over HTTP must show up in the window's DOM (so the `sw-event`
   forwarding and the UI work); `invoke('events_since')` returns the log; a command outside the
   window's capability is refused; SIGTERM makes the app close the window and shut down cleanly.

Screenshots go to tests/artifacts/window-*.png. Every wait is bounded; the whole run is bounded
by --timeout (default 240 s, the build excluded). Exit status 0 = pass.
"""

import argparse
import ctypes
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import http.client as http_client
import urllib.error
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TITLE = "StageWhisper"  # the window title (tauri.conf.json)


class Fail(Exception):
    pass


def log(msg):
    print(f"[window-test] {msg}", file=sys.stderr, flush=True)


def wait_for(what, fn, timeout, interval=0.2):
    """Polls fn() until it returns a truthy value; returns it, or raises Fail after timeout s."""
    deadline = time.monotonic() + timeout
    last_err = None
    while True:
        try:
            v = fn()
            if v:
                return v
        except Exception as e:  # noqa: BLE001 - reported on timeout
            last_err = e
        if time.monotonic() > deadline:
            raise Fail(f"timed out after {timeout} s waiting for {what}" + (f" (last error: {last_err})" if last_err else ""))
        time.sleep(interval)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, token=None, timeout=20):
    """JSON over HTTP; returns (status, parsed body)."""
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url, data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        raw, status = e.read(), e.code
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode(errors="replace")


def post_callback(ready, session_id, text):
    task = str(uuid.uuid4())
    status, body = http(
        "POST",
        f"{ready['callback_url'].rstrip('/')}/tasks/{task}",
        {"session_id": session_id, "status": "message", "reply_text": text, "message_id": f"m-{task}"},
        token=ready["callback_token"],
    )
    if status != 200 or not (isinstance(body, dict) and body.get("ok")) or body.get("ignored"):
        raise Fail(f"callback not applied: {status} {body}")


# ------------------------------------------------------------------------------------------------
# Processes


class Procs:
    """Processes this test started; all are stopped (by their own id) on exit."""

    def __init__(self):
        self.procs = []

    def start(self, args, **kw):
        p = subprocess.Popen(args, start_new_session=True, **kw)
        self.procs.append(p)
        return p

    def stop_all(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


def read_line(proc, timeout):
    """The first stdout line of proc, or Fail."""
    import selectors

    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    buf = b""
    deadline = time.monotonic() + timeout
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None and not sel.select(0):
            raise Fail(f"no ready line within {timeout} s (exit status {proc.poll()}); stdout so far {buf!r}")
        if sel.select(min(left, 0.5)):
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                raise Fail(f"stdout closed before the ready line (exit status {proc.wait(5)}); got {buf!r}")
            buf += chunk
    line, rest = buf.split(b"\n", 1)
    return line.decode(), rest


def window_env(display, tmp, drop=()):
    """The app's environment on `display`: no Wayland, no inherited data folder or log filter
    (nor the names in `drop`), and WebKit's caches and storage under `tmp`, out of the real home."""
    gone = {"WAYLAND_DISPLAY", "STAGEWHISPER_DATA_DIR", "RUST_LOG", *drop}
    env = {k: v for k, v in os.environ.items() if k not in gone}
    env.update(
        DISPLAY=display,
        NO_AT_BRIDGE="1",
        XDG_DATA_HOME=str(tmp / "xdg-data"),
        XDG_CACHE_HOME=str(tmp / "xdg-cache"),
        XDG_CONFIG_HOME=str(tmp / "xdg-config"),
    )
    return env


def start_xvfb(procs):
    r, w = os.pipe()
    xvfb = procs.start(
        ["Xvfb", "-displayfd", str(w), "-screen", "0", "1280x800x24", "-nolisten", "tcp"],
        pass_fds=(w,),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    os.close(w)
    num = b""
    deadline = time.monotonic() + 15
    while not num.endswith(b"\n"):
        if time.monotonic() > deadline or xvfb.poll() is not None:
            raise Fail("Xvfb did not start")
        chunk = os.read(r, 16)
        if not chunk:
            raise Fail("Xvfb did not report its display")
        num += chunk
    os.close(r)
    return f":{num.decode().strip()}"


def screenshot(env, path):
    """Takes a picture of the whole display; returns (std, signature) of the window area (the
    non-black part): a window painted only with its background colour has std 0."""
    subprocess.run(["import", "-window", "root", str(path)], env=env, check=True, timeout=30, capture_output=True)
    out = subprocess.run(
        ["convert", str(path), "-bordercolor", "black", "-border", "1", "-trim", "+repage",
         "-format", "%[fx:standard_deviation] %#", "info:"],
        check=True, timeout=30, capture_output=True, text=True,
    ).stdout.split()
    return float(out[0]), out[1]


def settled_screenshot(env, path, timeout=30, settle=2.0):
    """Waits until the window shows content (not just its background colour), lets the page
    settle, then takes the picture."""
    wait_for("the window to show the page (screenshot)", lambda: screenshot(env, path)[0] > 0.02, timeout, 0.5)
    time.sleep(settle)
    return screenshot(env, path)[0]


def no_overlay(data_dir):
    """The desktop setting "open the overlay at call start" off, so that this test sees the main
    window alone (tests/window/desktop.py tests the overlay). Written as the old `desktop.json`:
    the app moves it into settings.json at its first start, so this is a migration test too."""
    data_dir.mkdir(parents=True, exist_ok=True)
    (data_dir / "desktop.json").write_text('{"overlay_on_call_start": false}')


def start_headless_and_read(binary, data_dir, procs, env, session_id):
    """Starts the binary headless on data_dir, returns the messages of session_id, stops it."""
    p = procs.start(
        [str(binary), "--headless", "--data-dir", str(data_dir)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    ready = json.loads(read_line(p, 30)[0])
    status, msgs = http("GET", f"{ready['ui_url']}api/sessions/{session_id}/messages", token=ready["ui_token"])
    p.send_signal(signal.SIGTERM)
    if p.wait(timeout=20) != 0:
        raise Fail(f"headless check run exited {p.returncode}")
    if status != 200:
        raise Fail(f"messages after restart: {status} {msgs}")
    return msgs


def second_instance_refused(binary, data_dir, env, procs, holder_pid):
    """A second `stagewhisper` in window mode (DISPLAY set, no --headless) on a data dir in use
    must exit non-zero at once, name the holder on stderr, print nothing on stdout, open no
    window and leave the data dir's files as they were."""
    watched = ("ui_url", "callback_token", "ui_token", "stagewhisper.lock")
    def state():
        return {n: ((data_dir / n).stat().st_mtime_ns, (data_dir / n).read_bytes()) for n in watched}
    before = state()
    started = time.monotonic()
    p = procs.start(
        [str(binary), "--data-dir", str(data_dir)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        out, err = p.communicate(timeout=20)
    except subprocess.TimeoutExpired:
        raise Fail("a second window-mode instance on the same data dir is still running after 20 s") from None
    took = time.monotonic() - started
    err = err.decode(errors="replace")
    if p.returncode == 0:
        raise Fail(f"a second window-mode instance on the same data dir exited 0; stderr:\n{err[-3000:]}")
    if f"already running (pid {holder_pid})" not in err:
        raise Fail(f"the second instance does not say `already running (pid {holder_pid})`; stderr:\n{err[-3000:]}")
    if out.strip():
        raise Fail(f"the refused instance printed on stdout: {out!r}")
    if "window open" in err:
        raise Fail(f"the refused instance opened a window; stderr:\n{err[-3000:]}")
    after = state()
    changed = [n for n in watched if before[n] != after[n]]
    if changed:
        raise Fail(f"the refused instance changed {changed} in the data dir")
    log(f"   second instance on the same data dir: exit {p.returncode} in {took:.2f} s, `already running (pid {holder_pid})`, data dir untouched: ok")


# ------------------------------------------------------------------------------------------------
# X11: send WM_DELETE_WINDOW to the app's window, as a window manager does on "close".


class XClientMessageEvent(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("serial", ctypes.c_ulong),
        ("send_event", ctypes.c_int),
        ("display", ctypes.c_void_p),
        ("window", ctypes.c_ulong),
        ("message_type", ctypes.c_ulong),
        ("format", ctypes.c_int),
        ("l", ctypes.c_long * 5),
    ]


class XEvent(ctypes.Union):
    _fields_ = [("xclient", XClientMessageEvent), ("pad", ctypes.c_long * 24)]


def close_window(display, title):
    x = ctypes.CDLL("libX11.so.6")
    x.XOpenDisplay.restype = ctypes.c_void_p
    x.XOpenDisplay.argtypes = [ctypes.c_char_p]
    x.XDefaultRootWindow.restype = ctypes.c_ulong
    x.XDefaultRootWindow.argtypes = [ctypes.c_void_p]
    x.XQueryTree.argtypes = [
        ctypes.c_void_p,
        ctypes.c_ulong,
        ctypes.POINTER(ctypes.c_ulong),
        ctypes.POINTER(ctypes.c_ulong),
        ctypes.POINTER(ctypes.POINTER(ctypes.c_ulong)),
        ctypes.POINTER(ctypes.c_uint),
    ]
    x.XFetchName.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.POINTER(ctypes.c_char_p)]
    x.XInternAtom.restype = ctypes.c_ulong
    x.XInternAtom.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int]
    x.XSendEvent.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.c_int, ctypes.c_long, ctypes.POINTER(XEvent)]
    x.XFlush.argtypes = [ctypes.c_void_p]
    x.XCloseDisplay.argtypes = [ctypes.c_void_p]
    x.XFree.argtypes = [ctypes.c_void_p]

    dpy = x.XOpenDisplay(display.encode())
    if not dpy:
        raise Fail(f"cannot open display {display}")
    try:
        found = []

        def walk(w):
            name = ctypes.c_char_p()
            if x.XFetchName(dpy, w, ctypes.byref(name)) and name.value is not None:
                if name.value.decode(errors="replace") == title:
                    found.append(w)
            root, parent = ctypes.c_ulong(), ctypes.c_ulong()
            children, n = ctypes.POINTER(ctypes.c_ulong)(), ctypes.c_uint()
            if x.XQueryTree(dpy, w, ctypes.byref(root), ctypes.byref(parent), ctypes.byref(children), ctypes.byref(n)):
                kids = [children[i] for i in range(n.value)]
                if children:
                    x.XFree(children)
                for k in kids:
                    walk(k)

        walk(x.XDefaultRootWindow(dpy))
        if not found:
            raise Fail(f"no window titled {title!r} on {display}")
        protocols = x.XInternAtom(dpy, b"WM_PROTOCOLS", 0)
        delete = x.XInternAtom(dpy, b"WM_DELETE_WINDOW", 0)
        for w in found:
            ev = XEvent()
            ev.xclient.type = 33  # ClientMessage
            ev.xclient.window = w
            ev.xclient.message_type = protocols
            ev.xclient.format = 32
            ev.xclient.l[0] = delete
            ev.xclient.l[1] = 0  # CurrentTime
            x.XSendEvent(dpy, w, 0, 0, ctypes.byref(ev))
        x.XFlush(dpy)
        return len(found)
    finally:
        x.XCloseDisplay(dpy)


# ------------------------------------------------------------------------------------------------
# WebDriver (W3C, JSON over HTTP)


class WebDriver:
    def __init__(self, base):
        self.base = base
        self.session = None

    def call(self, method, path, body=None, timeout=60):
        # tauri-driver sometimes closes a fresh connection at once, without an answer (seen with
        # builds of the app from before and after any given change: the request never reached
        # the page). Only that instant drop is retried; anything slower is a real failure.
        for attempt in range(3):
            started = time.monotonic()
            try:
                status, resp = http(method, self.base + path, body, timeout=timeout)
                break
            except (http_client.RemoteDisconnected, ConnectionResetError) as e:
                if attempt == 2 or time.monotonic() - started > 0.5:
                    raise
                log(f"   tauri-driver dropped {method} {path} unanswered ({e!r}); retrying")
                time.sleep(0.5)
        if status != 200:
            raise Fail(f"WebDriver {method} {path}: {status} {resp}")
        return resp["value"]

    def new_session(self, binary, args):
        caps = {"browserName": "wry", "tauri:options": {"application": str(binary), "args": args}}
        self.session = self.call("POST", "/session", {"capabilities": {"alwaysMatch": caps}}, timeout=90)["sessionId"]

    def js(self, script, *args):
        return self.call("POST", f"/session/{self.session}/execute/sync", {"script": script, "args": list(args)})

    def invoke(self, cmd, args):
        """window.__TAURI__.core.invoke(cmd, args) → {"ok": value} or {"err": message}."""
        script = (
            "const done = arguments[arguments.length - 1];"
            "window.__TAURI__.core.invoke(arguments[0], arguments[1])"
            ".then(v => done({ok: v}), e => done({err: String(e)}));"
        )
        return self.call("POST", f"/session/{self.session}/execute/async", {"script": script, "args": [cmd, args]})

    def end(self):
        if self.session:
            try:
                self.call("DELETE", f"/session/{self.session}", timeout=20)
            except Exception as e:  # noqa: BLE001 - the app is gone already
                log(f"ending the WebDriver session: {e}")
            self.session = None


def app_pid(data_dir, session_leader):
    """The pid of the app launched by WebKitWebDriver (its command line has our data dir)."""
    needle = str(data_dir).encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            cmd = (d / "cmdline").read_bytes().split(b"\0")
            if needle in cmd and os.getsid(int(d.name)) == session_leader and b"--data-dir" in cmd:
                return int(d.name)
        except (OSError, ProcessLookupError):
            continue
    return None


# ------------------------------------------------------------------------------------------------
# The two parts


def part_direct(binary, env, tmp, procs, display, artifacts):
    log("1/2 direct launch in window mode")
    data = tmp / "direct"
    no_overlay(data)
    err_path = tmp / "direct.stderr"
    with open(err_path, "wb") as err:
        app = procs.start([str(binary), "--data-dir", str(data)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, env=env)
    line, rest = read_line(app, 60)
    ready = json.loads(line)
    for k in ("callback_url", "callback_token", "ui_url", "ui_token", "data_dir"):
        if not ready.get(k):
            raise Fail(f"ready line without {k}: {line}")
    if ready.get("event") != "ready":
        raise Fail(f"not a ready line: {line}")
    wait_for("the window to open (log line)", lambda: b"window open" in err_path.read_bytes(), 30)
    if b"running headless" in err_path.read_bytes():
        raise Fail("fell back to headless although DISPLAY is set")

    status, call = http("POST", f"{ready['ui_url']}api/calls", {"title": "Window test"}, token=ready["ui_token"])
    if status != 201:
        raise Fail(f"create call: {status} {call}")
    sid = call["session_id"]
    text = f"Direct launch {uuid.uuid4().hex[:8]}: ask about their timeline."
    post_callback(ready, sid, text)
    second_instance_refused(binary, data, env, procs, app.pid)

    shot = artifacts / "window-direct.png"
    std = settled_screenshot(env, shot)
    log(f"   screenshot {shot} (window contrast {std:.3f})")

    n = close_window(display, TITLE)
    log(f"   sent WM_DELETE_WINDOW to {n} window(s)")
    try:
        code = app.wait(timeout=30)
    except subprocess.TimeoutExpired:
        raise Fail("the app did not exit within 30 s of its window being closed") from None
    more = rest + app.stdout.read()
    stderr = err_path.read_text(errors="replace")
    if code != 0:
        raise Fail(f"exit status {code} after closing the window; stderr:\n{stderr[-3000:]}")
    if more.strip():
        raise Fail(f"more than one line on stdout: {more!r}")
    if "shutting down" not in stderr:
        raise Fail(f"no graceful shutdown in the log:\n{stderr[-3000:]}")
    msgs = start_headless_and_read(binary, data, procs, env, sid)
    if not any(m.get("text") == text for m in msgs):
        raise Fail(f"message not durable after the window closed: {msgs}")
    log("   ready line, callback, painted window, close → exit 0, message kept: ok")


def part_webdriver(binary, env, tmp, procs, artifacts):
    log("2/2 WebDriver (tauri-driver + WebKitWebDriver)")
    data = tmp / "webdriver"
    no_overlay(data)
    port, native = free_port(), free_port()
    err_path = tmp / "tauri-driver.stderr"
    with open(err_path, "wb") as err:
        driver = procs.start(
            ["tauri-driver", "--port", str(port), "--native-port", str(native)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=err,  # the app's stderr (its logs) ends up here too
            env=env,
        )

    def driver_up():
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True

    wait_for("tauri-driver to listen", driver_up, 20)
    wd = WebDriver(f"http://127.0.0.1:{port}")
    try:
        wd.new_session(binary, ["--data-dir", str(data)])
        wait_for(
            "the web UI to start in the window",
            lambda: wd.js("return !!(window.__TAURI__ && document.getElementById('app') && document.getElementById('app').children.length)"),
            30,
        )

        r = wd.invoke("api", {"method": "GET", "path": "/api/settings", "body": None})
        if "ok" not in r or r["ok"].get("status") != 200:
            raise Fail(f"invoke api GET /api/settings: {r}")
        settings = r["ok"]["body"]
        ready = {"callback_url": settings["callback_url"], "callback_token": settings["callback_token"]}

        r = wd.invoke("api", {"method": "POST", "path": "/api/calls", "body": {"title": "WebDriver call"}})
        if "ok" not in r or r["ok"].get("status") != 201:
            raise Fail(f"invoke api POST /api/calls: {r}")
        sid = r["ok"]["body"]["session_id"]
        # A new call opens on the Call tab (transcript and insights); the call's chat, where the
        # assistant's message lands, is one click away.
        wait_for(
            "the Call tab to open for the new call",
            lambda: wd.js("return document.getElementById('tab-call')?.getAttribute('aria-selected') === 'true'"),
            20,
        )
        wd.js("document.getElementById('tab-chat').click(); return true")

        text = f"WebDriver {uuid.uuid4().hex[:8]}: mention the pilot discount."
        if text in wd.js("return document.body.innerText"):
            raise Fail("the message is on the page before it was sent")
        post_callback(ready, sid, text)
        wait_for("the assistant's message in the window's DOM", lambda: text in wd.js("return document.body.innerText"), 20)
        log("   callback → sw-event → message shown in the window's DOM: ok")

        r = wd.invoke("events_since", {"after": 0})
        events = r.get("ok")
        if not isinstance(events, list) or not any(
            e.get("type") == "message_added" and e.get("message", {}).get("text") == text for e in events
        ):
            raise Fail(f"events_since(0) has no message_added for the message: {r}")
        ids = [e["id"] for e in events]
        if ids != sorted(set(ids)):
            raise Fail(f"events_since ids not strictly increasing: {ids}")
        r = wd.invoke("events_since", {"after": ids[-1]})
        if r.get("ok") != []:
            raise Fail(f"events_since(last) should be empty: {r}")

        r = wd.invoke("plugin:event|emit", {"event": "x", "payload": 1})
        if "err" not in r or "not allowed" not in r["err"]:
            raise Fail(f"a command outside the capability was not refused: {r}")
        log("   invoke('api'), invoke('events_since'), capability refusal: ok")

        shot = artifacts / "window-webdriver.png"
        settled_screenshot(env, shot)
        log(f"   screenshot {shot}")

        pid = app_pid(data, driver.pid)
        if not pid:
            raise Fail("cannot find the app's process")
        os.kill(pid, signal.SIGTERM)

        def gone():
            try:
                os.kill(pid, 0)
                return False
            except ProcessLookupError:
                return True

        wait_for("the app to exit after SIGTERM", gone, 30)
        log_text = err_path.read_text(errors="replace")
        if "signal received" not in log_text or "shutting down code=0" not in log_text:
            raise Fail(f"no graceful shutdown in the app's log:\n{log_text[-3000:]}")
        log("   SIGTERM → window closed, core shut down: ok")
    finally:
        wd.end()
    msgs = start_headless_and_read(binary, data, procs, env, sid)
    if not any(m.get("text") == text for m in msgs):
        raise Fail(f"message not durable after SIGTERM: {msgs}")


def build_binary():
    log("cargo build --bin stagewhisper")
    out = subprocess.run(
        ["cargo", "build", "--bin", "stagewhisper", "--message-format=json-render-diagnostics"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        check=True,
        text=True,
    ).stdout
    for line in out.splitlines():
        try:
            msg = json.loads(line)
        except ValueError:
            continue
        if msg.get("reason") == "compiler-artifact" and msg.get("executable") and msg["target"]["name"] == "stagewhisper":
            return Path(msg["executable"])
    raise Fail("cargo build did not report the stagewhisper executable")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", type=Path, help="the stagewhisper binary (default: cargo build it)")
    ap.add_argument("--artifacts", type=Path, default=ROOT / "tests" / "artifacts")
    ap.add_argument("--timeout", type=int, default=240, help="bound of the whole test, in seconds (build excluded)")
    opts = ap.parse_args()

    missing = [t for t in ("Xvfb", "WebKitWebDriver", "tauri-driver", "import", "convert") if not shutil.which(t)]
    if missing:
        print(
            f"missing tools: {' '.join(missing)}\n"
            "  apt-get install -y xvfb webkit2gtk-driver imagemagick\n"
            "  cargo install tauri-driver --version ^2 --locked",
            file=sys.stderr,
        )
        return 2
    binary = (opts.bin or build_binary()).resolve()
    opts.artifacts.mkdir(parents=True, exist_ok=True)

    def on_alarm(*_):
        raise Fail(f"the window test took longer than {opts.timeout} s")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(opts.timeout)
    procs = Procs()
    started = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="sw-window-", ignore_cleanup_errors=True) as t:
            tmp = Path(t)
            display = start_xvfb(procs)
            # No session bus: the single-instance plugin cannot find the first instance, so the
            # data folder's lock is what refuses a second one (tests/window/desktop.py has a bus).
            env = window_env(display, tmp, drop=("DBUS_SESSION_BUS_ADDRESS",))
            log(f"Xvfb on {display}; binary {binary}")
            try:
                part_direct(binary, env, tmp, procs, display, opts.artifacts)
                part_webdriver(binary, env, tmp, procs, opts.artifacts)
            finally:
                procs.stop_all()  # before the temporary folder goes
    except Fail as e:
        log(f"FAIL: {e}")
        return 1
    finally:
        signal.alarm(0)
        procs.stop_all()
    log(f"PASS in {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
