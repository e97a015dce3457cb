#!/usr/bin/env python3
"""Real-window test of the desktop extras (overlay, global shortcut, notifications, one instance,
links, window places) under Xvfb, on a private session bus.

    python3 tests/window/desktop.py --bin PATH   # an already built `stagewhisper`

Re-runs itself under `dbus-run-session` (a private session bus) with a small notification server
(notification_server.py, Debian's python3-dbus + python3-gi) owning `org.freedesktop.Notifications`.
Needs xvfb, openbox, xdotool, x11-utils (xwininfo, xprop), imagemagick, webkit2gtk-driver,
tauri-driver, and the fake clawborrator hub (tests/browser/fake_hub.sh; built when absent).

1. Direct launch, light theme: a call started through the control API opens the overlay by
   itself (the default setting); the overlay window is mapped with `_NET_WM_STATE_ABOVE`;
   an insight posted by a callback is painted; a message typed into the overlay's input (real
   key presses through xdotool) reaches the call; the global shortcut (Ctrl+Shift+Space, sent
   with xdotool) hides and shows it again; with no app window focused, each kind raises a
   `Notify` call on the bus (seen by the server): an insight posted by a callback, an
   assistant error (a callback with status `errored`), a message the assistant refuses with 401
   (marked failed: "Message not delivered"), a permission request (the
   `clawborrator` kind made the active assistant through the control API, on the fake hub:
   its `permission_request` becomes a card in the call's chat); none while the server says
   `Inhibited` (Do-Not-Disturb); a second launch exits 0 without a window and the first one
   focuses its own; the main window is moved and the overlay moved and resized (xdotool);
   closing the main window ends the app (exit 0) although the overlay is open.
2. Direct launch again, dark theme (GTK_THEME=Adwaita:dark): the main window comes back where
   it was moved to in part 1 (window-state plugin); the shortcut opens the overlay, at the
   place and size it had in part 1; screenshot.
3. WebDriver (tauri-driver): the overlay's page (the session's second window) has an insight
   posted by a callback in its DOM and sends a message typed into its input; a link in an
   assistant message, clicked, goes to the system browser (a recording `xdg-open` first on the
   PATH) and the page stays where it was; Settings → Desktop refuses a bad shortcut and puts a
   new one in force (saved in the data folder's settings.json, its `desktop` section); Settings → Desktop →
   Notifications: with errors and permissions switched off, an errored callback and a
   permission request raise no Notify while an insight after them does; with insights off and
   errors on again, the reverse.
4. Under a real window manager (Debian's openbox, started in the same display; the parts before
   run without one, as a bare X server is the stricter case for what the app must do itself:
   its always-on-top state, its own focus and window places, with no manager to fix them up;
   and only what needs a manager runs with one): the overlay stays above the main window when
   the manager raises that; dragged by its header with the pointer (xdotool mousedown,
   mousemove, mouseup) it moves by the drag; pulled by its bottom-right corner it grows by the
   pull (Tauri's resize border of an undecorated window), and shrinks by a pull of its resize
   grip (the page's handle, start_resize_dragging); the next launch puts it back at that place
   and size.

What is faked: the notification server (a small one of this test's own, notification_server.py,
so that the test sees each call; the protocol on the bus is the real one) and the clawborrator
hub (the project's conformance fake of it, the `fake_hub` example: the real hub is not public;
see hub.py). The app, its callbacks, the assistant kind's client and the bus are the real ones.

Screenshots: tests/artifacts/overlay-light.png, overlay-dark.png (the overlay's part of the
display). Every wait is bounded; the whole run by --timeout. Exit status 0 = pass.
"""

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import run as w  # noqa: E402  (the helpers of the main window test)
import hub as fake_hub  # noqa: E402
import wm  # noqa: E402

ROOT = HERE.parents[1]
MAIN_TITLE = "StageWhisper"
OVERLAY_TITLE = "StageWhisper overlay"
# Where part 1 puts the overlay (x, y, width, height) and part 2 finds it again.
OVERLAY_PLACE = (861, 47, 400, 520)
SYSTEM_PYTHON = "/usr/bin/python3"
Fail = w.Fail
log = w.log


def desktop_settings(data_dir):
    """The desktop settings as saved: the `desktop` section of the data folder's settings.json."""
    doc = json.loads((data_dir / "settings.json").read_text())
    return doc["sections"]["desktop"]["value"]


def x(env, *args, check=True):
    return subprocess.run(list(args), env=env, capture_output=True, text=True, timeout=20, check=check).stdout


def window_id(env, title):
    """The app's X window with exactly this name (WM_NAME), or None. GTK also names its 10×10
    unmapped client-leader window so: the largest one is the real one."""
    ids = window_ids(env, title)
    if not ids:
        return None
    return max(ids, key=lambda i: (lambda g: g[2] * g[3])(geometry(env, i)))


def window_ids(env, title):
    return [int(i) for i in x(env, "xdotool", "search", "--name", f"^{re.escape(title)}$", check=False).split()]


def geometry(env, wid):
    info = x(env, "xwininfo", "-id", str(wid))
    g = {k: int(re.search(rf"{k}:\s+(-?\d+)", info).group(1)) for k in ("Absolute upper-left X", "Absolute upper-left Y", "Width", "Height")}
    mapped = re.search(r"Map State:\s+(\w+)", info).group(1)
    return g["Absolute upper-left X"], g["Absolute upper-left Y"], g["Width"], g["Height"], mapped


def mapped(env, title):
    wid = window_id(env, title)
    return wid is not None and geometry(env, wid)[4] == "IsViewable"


def unmapped(env, title):
    wid = window_id(env, title)
    return wid is None or geometry(env, wid)[4] != "IsViewable"


def shot_of(env, wid, path):
    """The display's picture cropped to the window; returns the crop's contrast (0 = blank)."""
    x0, y0, wd, ht, _ = geometry(env, wid)
    full = path.with_suffix(".full.png")
    subprocess.run(["import", "-window", "root", str(full)], env=env, check=True, timeout=30, capture_output=True)
    subprocess.run(["convert", str(full), "-crop", f"{wd}x{ht}+{x0}+{y0}", "+repage", str(path)], check=True, timeout=30)
    full.unlink()
    out = subprocess.run(["convert", str(path), "-format", "%[fx:standard_deviation] %[fx:mean]", "info:"], check=True, timeout=30, capture_output=True, text=True).stdout.split()
    return float(out[0]), float(out[1])


def post(ready, session_id, text):
    w.post_callback(ready, session_id, text)


def post_error(ready, session_id, code, message):
    """What an assistant reports when a turn fails: a callback with status `errored`."""
    task = str(uuid.uuid4())
    status, body = w.http(
        "POST",
        f"{ready['callback_url'].rstrip('/')}/tasks/{task}",
        {"session_id": session_id, "status": "errored", "error_code": code, "error_message": message},
        token=ready["callback_token"],
    )
    if status != 200 or not (isinstance(body, dict) and body.get("ok")) or body.get("ignored"):
        raise Fail(f"errored callback not applied: {status} {body}")


def refusing_assistant():
    """A loopback HTTP server that answers 401 to every request (an assistant whose relay token
    was revoked), serving from a thread until `shutdown()`."""
    import http.server
    import threading

    class Refuse(http.server.BaseHTTPRequestHandler):
        def _refuse(self):
            n = int(self.headers.get("Content-Length") or 0)
            if n:
                self.rfile.read(n)
            body = b'{"error":"unauthorized"}'
            self.send_response(401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = do_PUT = do_DELETE = _refuse

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def unfocus(env):
    """No window of the app focused: the pointer on the bare root window (without a window
    manager the focus follows the pointer)."""
    x(env, "xdotool", "mousemove", "1279", "799")
    time.sleep(0.5)


def notified(calls_path, before, summary, body):
    """The Notify calls since the `before`-th with this summary and body."""
    return [c for c in notify_calls(calls_path)[before:] if c["summary"] == summary and c["body"] == body]


class App:
    """A direct launch of the binary (window mode), its ready line and its log."""

    def __init__(self, binary, data, env, procs, tmp, name):
        self.err_path = tmp / f"{name}.stderr"
        with open(self.err_path, "wb") as err:
            self.proc = procs.start([str(binary), "--data-dir", str(data)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, env=env)
        line, self.rest = w.read_line(self.proc, 60)
        self.ready = json.loads(line)
        self.wait_log("window open", 30)

    def log_text(self):
        return self.err_path.read_text(errors="replace")

    def wait_log(self, needle, timeout, after=0):
        return w.wait_for(f"`{needle}` in the app's log", lambda: needle in self.log_text()[after:], timeout)

    def api(self, method, path, body=None):
        return w.http(method, f"{self.ready['ui_url']}{path.lstrip('/')}", body, token=self.ready["ui_token"])

    def close(self, display):
        w.close_window(display, MAIN_TITLE)
        try:
            code = self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            raise Fail("the app did not exit within 30 s of its main window being closed") from None
        if code != 0:
            raise Fail(f"exit status {code} after closing the main window:\n{self.log_text()[-3000:]}")


def notify_calls(path):
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def set_inhibited(env, value):
    x(env, "dbus-send", "--session", "--print-reply", "--dest=org.freedesktop.Notifications", "/org/freedesktop/Notifications",
      "test.stagewhisper.Control.SetInhibited", f"boolean:{'true' if value else 'false'}")


def part_overlay(binary, env, tmp, procs, display, artifacts, calls_path, hub_bin):
    log("1/4 overlay, shortcut, notifications, one instance (light theme)")
    data = tmp / "data"
    app = App(binary, data, env, procs, tmp, "light")
    if window_id(env, OVERLAY_TITLE) and mapped(env, OVERLAY_TITLE):
        raise Fail("the overlay is on screen before any call")

    status, call = app.api("POST", "/api/calls", {"title": "Overlay test"})
    if status != 201:
        raise Fail(f"create call: {status} {call}")
    sid = call["session_id"]
    w.wait_for("the overlay to open at call start", lambda: mapped(env, OVERLAY_TITLE), 20)
    ov = window_id(env, OVERLAY_TITLE)
    state = x(env, "xprop", "-id", str(ov), "_NET_WM_STATE")
    if "_NET_WM_STATE_ABOVE" not in state:
        raise Fail(f"the overlay is not marked always-on-top: {state.strip()}")
    log(f"   call start → overlay mapped, {state.strip()}: ok")

    shot = artifacts / "overlay-light.png"
    w.wait_for("the overlay to paint its page", lambda: shot_of(env, ov, shot)[0] > 0.02, 30, 0.5)
    time.sleep(2)
    empty = shot_of(env, ov, shot)[0]
    text = f"Overlay {uuid.uuid4().hex[:6]}: ask who signs off the budget."
    post(app.ready, f"insights:{sid}", text)
    st, ins = app.api("GET", f"/api/sessions/{sid}/insights")
    if st != 200 or not any(i.get("text") == text for i in ins):
        raise Fail(f"the insight was not stored: {st} {ins}")
    x0, y0, wd, ht, _ = geometry(env, ov)
    nudge = iter(range(10**6))

    def painted():
        # Under Xvfb (no compositor, no window manager) WebKit repaints a window that is not
        # focused only on input: the pointer moves over it. The DOM side is checked through
        # WebDriver in part 3.
        x(env, "xdotool", "mousemove", str(x0 + 100 + next(nudge) % 2), str(y0 + 120))
        return abs(shot_of(env, ov, shot)[0] - empty) > 0.005

    w.wait_for("the overlay to paint the insight", painted, 30, 0.5)
    time.sleep(1)
    std, mean = shot_of(env, ov, shot)
    if mean < 0.5:
        raise Fail(f"the light overlay is dark (mean {mean:.2f})")
    log(f"   screenshot {shot} (contrast {std:.3f}, mean {mean:.2f})")

    # A message typed into the overlay: click its input (bottom of the window), type, Enter.
    x(env, "xdotool", "mousemove", str(x0 + 40), str(y0 + ht - 24), "click", "1")
    # What a window manager does on a click: give the window the keyboard focus.
    x(env, "xdotool", "windowfocus", "--sync", str(ov))
    said = f"overlay says {uuid.uuid4().hex[:6]}"
    x(env, "xdotool", "type", "--delay", "20", said)
    x(env, "xdotool", "key", "Return")

    def sent():
        st, msgs = app.api("GET", f"/api/sessions/{sid}/messages")
        return st == 200 and any(m.get("kind") == "user" and m.get("text") == said for m in msgs)

    w.wait_for("the message typed into the overlay to reach the call", sent, 20)
    log("   typed into the overlay's input → user message in the call: ok")

    # The global shortcut hides and shows the overlay.
    x(env, "xdotool", "key", "ctrl+shift+space")
    w.wait_for("the shortcut to hide the overlay", lambda: unmapped(env, OVERLAY_TITLE), 10)
    x(env, "xdotool", "key", "ctrl+shift+space")
    w.wait_for("the shortcut to show the overlay again", lambda: mapped(env, OVERLAY_TITLE), 10)
    log("   Ctrl+Shift+Space (xdotool) → hidden → shown: ok")

    # Notifications while no window of the app has the focus.
    unfocus(env)
    before = len(notify_calls(calls_path))
    note = f"Notify {uuid.uuid4().hex[:6]}: they mentioned a competitor."
    post(app.ready, f"insights:{sid}", note)
    got = w.wait_for("a Notify call for the insight", lambda: notified(calls_path, before, "New insight", note), 20)
    log(f"   unfocused → Notify on the session bus: {got[0]['summary']!r} / {got[0]['body']!r}: ok")

    # An assistant error: the assistant's callback with status `errored`.
    oops = f"The model is overloaded ({uuid.uuid4().hex[:6]}); try again in a minute."
    post_error(app.ready, sid, "model_overloaded", oops)
    got = w.wait_for("a Notify call for the assistant error", lambda: notified(calls_path, before, "Assistant error", oops), 20)
    log(f"   errored callback → Notify {got[0]['summary']!r} / {got[0]['body']!r}: ok")

    # A permission request: the clawborrator kind on the (fake) hub asks for a tool; the card
    # goes to the live call's chat.
    hub = fake_hub.FakeHub(hub_bin, procs, tmp / "hub-light.stderr")
    fake_hub.use_hub(app.api, hub)
    preview = f"rm -rf build-{uuid.uuid4().hex[:6]}/"
    hub.permission(f"req-{uuid.uuid4().hex[:8]}", "Bash", preview)
    got = w.wait_for("a Notify call for the permission request", lambda: notified(calls_path, before, "The assistant asks for permission", preview), 20)
    st, msgs = app.api("GET", f"/api/sessions/{sid}/messages")
    if not any(m.get("kind") == "permission" and m.get("input_preview") == preview and m.get("state") == "pending" for m in msgs):
        raise Fail(f"no pending permission card in the call's chat: {st} {msgs}")
    log(f"   clawborrator permission_request → card in the call + Notify {got[0]['summary']!r} / {got[0]['body']!r}: ok")

    # A message the assistant refuses for good (401): the outbox marks it failed, and the user
    # is told it did not arrive. The assistant here is a loopback server answering 401 to all.
    refuser = refusing_assistant()
    st, body = app.api("PUT", "/api/assistant", {"kind": "incoming", "base_url": f"http://127.0.0.1:{refuser.server_port}", "relay_token": "revoked-relay-token-0123456789"})
    if st != 200:
        raise Fail(f"switch to the refusing assistant: {st} {body}")
    lost = f"Did they agree {uuid.uuid4().hex[:6]}?"
    st, body = app.api("POST", f"/api/sessions/{sid}/messages", {"text": lost})
    if st not in (200, 201, 202):
        raise Fail(f"send a message: {st} {body}")
    got = w.wait_for(
        "a Notify call for the undelivered message",
        lambda: [c for c in notify_calls(calls_path)[before:] if c["summary"] == "Message not delivered"],
        30,
    )
    st, msgs = app.api("GET", f"/api/sessions/{sid}/messages")
    mine = [m for m in msgs if m.get("kind") == "user" and m.get("text") == lost]
    why = (mine[0].get("delivery_error") or {}).get("message", "") if mine else ""
    # The body is the delivery error's sentence, cut with an ellipsis when it is long.
    if not mine or mine[0].get("delivery") != "failed" or not why or not why.startswith(got[0]["body"].removesuffix("…")):
        raise Fail(f"the Notify body is not the failed message's delivery error: {got[0]} / {mine}")
    refuser.shutdown()
    log(f"   assistant answers 401 → message failed → Notify {got[0]['summary']!r} / {got[0]['body']!r}: ok")

    set_inhibited(env, True)
    mark = len(app.log_text())
    quiet = f"Quiet {uuid.uuid4().hex[:6]}: nothing during DND."
    post(app.ready, f"insights:{sid}", quiet)
    app.wait_log("Do-Not-Disturb: no notification", 20, after=mark)
    if any(quiet in c["body"] for c in notify_calls(calls_path)):
        raise Fail("a notification came while the server said Inhibited")
    set_inhibited(env, False)
    log("   Inhibited (Do-Not-Disturb) → no Notify: ok")

    # Move the main window, and move and resize the overlay, so that part 2 can see their
    # places kept (without a window manager xdotool moves the windows themselves).
    main = window_id(env, MAIN_TITLE)
    x(env, "xdotool", "windowmove", str(main), "37", "29")
    w.wait_for("the main window to move", lambda: geometry(env, main)[:2] == (37, 29), 10)
    x(env, "xdotool", "windowmove", str(ov), str(OVERLAY_PLACE[0]), str(OVERLAY_PLACE[1]))
    x(env, "xdotool", "windowsize", str(ov), str(OVERLAY_PLACE[2]), str(OVERLAY_PLACE[3]))
    w.wait_for("the overlay to move and resize", lambda: geometry(env, ov)[:4] == OVERLAY_PLACE, 10)

    # A second launch: no second window, the first one is focused, exit 0.
    mark = len(app.log_text())
    windows_before = sorted(window_ids(env, MAIN_TITLE))
    second = procs.start([str(binary), "--data-dir", str(tmp / "other-data")], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        out, err = second.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        raise Fail("the second launch is still running after 30 s") from None
    if second.returncode != 0:
        raise Fail(f"the second launch exited {second.returncode}: {err.decode(errors='replace')[-2000:]}")
    if out.strip():
        raise Fail(f"the second launch printed on stdout: {out!r}")
    app.wait_log("main window focused", 20, after=mark)
    if sorted(window_ids(env, MAIN_TITLE)) != windows_before:
        raise Fail(f"the X windows named {MAIN_TITLE!r} changed with a second launch: {windows_before} → {window_ids(env, MAIN_TITLE)}")
    if (tmp / "other-data").exists():
        raise Fail("the second launch touched its data folder")
    log("   second launch → exit 0, no window, no data folder, the first focused its window: ok")

    app.close(display)
    hub.close()
    log("   closing the main window (overlay open) → exit 0: ok")
    return data, sid


def part_dark(binary, env, tmp, procs, display, artifacts, data):
    log("2/4 window places kept, overlay in the dark theme")
    dark = dict(env, GTK_THEME="Adwaita:dark")
    app = App(binary, data, dark, procs, tmp, "dark")
    main = w.wait_for("the main window", lambda: window_id(env, MAIN_TITLE), 10)
    w.wait_for("the main window at its kept place", lambda: geometry(env, main)[:2] == (37, 29), 10)
    log("   main window back at (37, 29): ok")
    x(env, "xdotool", "key", "ctrl+shift+space")
    w.wait_for("the shortcut to open the overlay", lambda: mapped(env, OVERLAY_TITLE), 15)
    ov = window_id(env, OVERLAY_TITLE)
    w.wait_for(f"the overlay at its kept place and size {OVERLAY_PLACE}", lambda: geometry(env, ov)[:4] == OVERLAY_PLACE, 10)
    log(f"   overlay back at {OVERLAY_PLACE[:2]}, {OVERLAY_PLACE[2]}×{OVERLAY_PLACE[3]}: ok")
    shot = artifacts / "overlay-dark.png"
    w.wait_for("the overlay to paint", lambda: shot_of(env, ov, shot)[0] > 0.05, 30, 0.5)
    time.sleep(2)
    std, mean = shot_of(env, ov, shot)
    if mean > 0.5:
        raise Fail(f"the dark overlay is light (mean {mean:.2f})")
    log(f"   screenshot {shot} (contrast {std:.3f}, mean {mean:.2f})")
    app.close(display)


def part_links(binary, env, tmp, procs, calls_path, hub_bin):
    log("3/4 the overlay's DOM, links to the system browser (WebDriver)")
    bindir = tmp / "bin"
    bindir.mkdir()
    opened = tmp / "opened.txt"
    fake = bindir / "xdg-open"
    fake.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$1\" >> '{opened}'\n")
    fake.chmod(0o755)
    lenv = dict(env, PATH=f"{bindir}:{env['PATH']}")
    port, native = w.free_port(), w.free_port()
    with open(tmp / "links-driver.stderr", "wb") as err:
        procs.start(["tauri-driver", "--port", str(port), "--native-port", str(native)], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=lenv)

    def up():
        with w.socket.create_connection(("127.0.0.1", port), timeout=1):
            return True

    w.wait_for("tauri-driver to listen", up, 20)
    wd = w.WebDriver(f"http://127.0.0.1:{port}")
    try:
        wd.new_session(binary, ["--data-dir", str(tmp / "links-data")])
        w.wait_for("the web UI", lambda: wd.js("return !!(window.__TAURI__ && document.querySelector('.callbar'))"), 30)
        r = wd.invoke("api", {"method": "GET", "path": "/api/settings", "body": None})
        s = r["ok"]["body"]
        ready = {"callback_url": s["callback_url"], "callback_token": s["callback_token"]}
        r = wd.invoke("api", {"method": "POST", "path": "/api/calls", "body": {"title": "Links"}})
        sid = r["ok"]["body"]["session_id"]
        url = f"https://example.com/pricing-{uuid.uuid4().hex[:6]}"
        post(ready, sid, f"See [the pricing page]({url}) before answering.")
        # The overlay, opened at call start, is the second page of the session.
        main_handle = wd.call("GET", f"/session/{wd.session}/window")
        w.wait_for("the overlay's page", lambda: len(wd.call("GET", f"/session/{wd.session}/window/handles")) == 2, 20)
        ov_handle = next(h for h in wd.call("GET", f"/session/{wd.session}/window/handles") if h != main_handle)
        wd.call("POST", f"/session/{wd.session}/window", {"handle": ov_handle})
        if "view=overlay" not in wd.js("return location.href"):
            raise Fail(f"the second page is not the overlay: {wd.js('return location.href')}")
        tip = f"DOM {uuid.uuid4().hex[:6]}: ask about the timeline."
        post(ready, f"insights:{sid}", tip)
        w.wait_for("the insight in the overlay's DOM", lambda: tip in wd.js("return document.getElementById('overlay-insights').innerText"), 20)
        said = f"from the overlay {uuid.uuid4().hex[:6]}"
        inp = next(iter(wd.call("POST", f"/session/{wd.session}/element", {"using": "css selector", "value": "#overlay-input"}).values()))
        wd.call("POST", f"/session/{wd.session}/element/{inp}/value", {"text": said})
        btn = next(iter(wd.call("POST", f"/session/{wd.session}/element", {"using": "css selector", "value": "#overlay-send"}).values()))
        wd.call("POST", f"/session/{wd.session}/element/{btn}/click", {})
        # Sent: the question shows under the insights, waiting for its answer.
        w.wait_for("the question in the overlay's thread", lambda: said in (wd.js("return document.getElementById('overlay-thread').innerText") or ""), 20)
        r = wd.invoke("api", {"method": "GET", "path": f"/api/sessions/{sid}/messages", "body": None})
        if not any(m.get("kind") == "user" and m.get("text") == said for m in r["ok"]["body"]):
            raise Fail(f"the overlay's message is not in the call: {r}")
        log("   overlay page: insight from a callback in its DOM, message sent from its input: ok")
        wd.call("POST", f"/session/{wd.session}/window", {"handle": main_handle})
        # The main window shows the call on its Call tab; the link is a chat message, a click away.
        wd.js("document.getElementById('tab-chat').click(); return true")

        w.wait_for("the link in the chat", lambda: wd.js("return !!document.querySelector('a.md-link')"), 20)
        before = wd.js("return location.href")
        # The overlay (opened at call start) has the focus now; a click in the main page is a
        # real WebDriver element click.
        el = wd.call("POST", f"/session/{wd.session}/element", {"using": "css selector", "value": "a.md-link"})
        eid = next(iter(el.values()))
        wd.call("POST", f"/session/{wd.session}/element/{eid}/click", {})
        w.wait_for("xdg-open to receive the link", lambda: opened.exists() and url in opened.read_text(), 20)
        time.sleep(1)
        after = wd.js("return location.href")
        if after != before:
            raise Fail(f"the webview navigated: {before} → {after}")
        log(f"   link → xdg-open {url}, page still {after}: ok")

        # Settings → Desktop: a bad shortcut is refused in words, a good one is saved (in
        # the data folder) and works at once.
        wd.js("document.getElementById('tab-settings').click()")
        w.wait_for("the Desktop card", lambda: wd.js("return document.getElementById('setting-overlay-shortcut').value") == "Ctrl+Shift+Space", 10)

        def save_shortcut(value):
            wd.js("const i = document.getElementById('setting-overlay-shortcut'); i.value = arguments[0];"
                  "document.getElementById('desktop-status').textContent = '';"
                  "document.getElementById('save-overlay-shortcut').click()", value)
            return w.wait_for("the save's answer", lambda: wd.js("return document.getElementById('desktop-status').textContent"), 10)

        said = save_shortcut("Ctrl+Nope")
        if not said.startswith('Not saved: "Ctrl+Nope" is not a shortcut') or "invalid_shortcut" in said:
            raise Fail(f"a bad shortcut (in words, not its code): {said!r}")
        if save_shortcut("Alt+F9") != "Saved.":
            raise Fail("the new shortcut was not saved")
        saved = desktop_settings(tmp / "links-data")
        if saved.get("overlay_shortcut") != "Alt+F9":
            raise Fail(f"settings.json's desktop section: {saved}")
        shown = mapped(env, OVERLAY_TITLE)
        x(env, "xdotool", "key", "alt+F9")
        w.wait_for("the new shortcut to toggle the overlay", lambda: mapped(env, OVERLAY_TITLE) != shown, 10)
        x(env, "xdotool", "key", "ctrl+shift+space")
        time.sleep(1)
        if mapped(env, OVERLAY_TITLE) == shown:
            raise Fail("the old shortcut still toggles the overlay")
        log("   Settings → Desktop: bad shortcut refused (invalid_shortcut), Alt+F9 saved (settings.json) and in force, the old one gone: ok")

        # Settings → Desktop → Notifications: with a kind's switch off, that kind raises no
        # Notify while another kind still does (the one that does comes after it, so its
        # Notify shows the event of the quiet one was handled).
        def api(method, path, body):
            r = wd.invoke("api", {"method": method, "path": path, "body": body})["ok"]
            return r["status"], r["body"]

        hub = fake_hub.FakeHub(hub_bin, procs, tmp / "hub-links.stderr")
        fake_hub.use_hub(api, hub)

        def switch(box, key, on):
            wd.js("document.getElementById('desktop-status').textContent = '';"
                  "const b = document.getElementById(arguments[0]); if (b.checked !== arguments[1]) b.click();", box, on)
            w.wait_for(f"{key} = {on} saved", lambda: wd.js("return document.getElementById('desktop-status').textContent") == "Saved."
                       and desktop_settings(tmp / "links-data").get(key) is on, 10)

        switch("setting-notify-errors", "notify_errors", False)
        switch("setting-notify-permissions", "notify_permissions", False)
        unfocus(env)
        before = len(notify_calls(calls_path))
        oops = f"Quiet error {uuid.uuid4().hex[:6]}: the gateway went away."
        post_error(ready, sid, "gateway_down", oops)
        preview = f"git push --force-{uuid.uuid4().hex[:6]}"
        hub.permission(f"req-{uuid.uuid4().hex[:8]}", "Bash", preview)
        w.wait_for("the permission card", lambda: any(m.get("input_preview") == preview for m in api("GET", f"/api/sessions/{sid}/messages", None)[1]), 20)
        tip = f"Still on {uuid.uuid4().hex[:6]}: insights notify."
        post(ready, f"insights:{sid}", tip)
        w.wait_for("a Notify call for the insight (its switch on)", lambda: notified(calls_path, before, "New insight", tip), 20)
        time.sleep(1)
        loud = [c for c in notify_calls(calls_path)[before:] if c["body"] in (oops, preview)]
        if loud:
            raise Fail(f"Notify for a kind switched off: {loud}")
        log("   errors and permissions switched off → no Notify for either; an insight still notifies: ok")

        switch("setting-notify-insights", "notify_insights", False)
        switch("setting-notify-errors", "notify_errors", True)
        unfocus(env)
        before = len(notify_calls(calls_path))
        tip = f"Quiet insight {uuid.uuid4().hex[:6]}."
        post(ready, f"insights:{sid}", tip)
        oops = f"Loud error {uuid.uuid4().hex[:6]}: the model refused."
        post_error(ready, sid, "refused", oops)
        w.wait_for("a Notify call for the error (its switch on again)", lambda: notified(calls_path, before, "Assistant error", oops), 20)
        time.sleep(1)
        if any(c["body"] == tip for c in notify_calls(calls_path)[before:]):
            raise Fail("Notify for an insight with insights switched off")
        log("   insights switched off → no Notify; errors switched on again → Notify: ok")
        hub.close()
    finally:
        wd.end()


def near(got, want, slack=2):
    return all(abs(g - v) <= slack for g, v in zip(got, want))


def stacking(env):
    """The managed windows, bottom to top (EWMH)."""
    out = x(env, "xprop", "-root", "-notype", "_NET_CLIENT_LIST_STACKING")
    return [int(i, 16) for i in re.findall(r"0x[0-9a-f]+", out)]


def part_wm(binary, env, tmp, procs, display):
    log("4/4 under a window manager (openbox): the overlay on top, dragged, resized, kept")
    ob = wm.start_openbox(env, procs, tmp / "openbox.stderr")
    app = App(binary, tmp / "wm-data", env, procs, tmp, "wm")
    x(env, "xdotool", "key", "ctrl+shift+space")
    w.wait_for("the shortcut to open the overlay", lambda: mapped(env, OVERLAY_TITLE), 15)
    ov = window_id(env, OVERLAY_TITLE)
    main = window_id(env, MAIN_TITLE)
    shot = tmp / "wm-overlay.png"
    w.wait_for("the overlay to paint its page", lambda: shot_of(env, ov, shot)[0] > 0.02, 30, 0.5)

    # The main window activated (the window manager raises it): the overlay stays above it.
    x(env, "xdotool", "windowactivate", "--sync", str(main))
    order = w.wait_for("both windows in the stacking order", lambda: (lambda o: o if ov in o and main in o else None)(stacking(env)), 10)
    if order.index(ov) < order.index(main):
        raise Fail(f"the raised main window is above the overlay: {order}")
    log("   main window raised by the window manager → the overlay stays above it: ok")

    # Dragged by its header (the page's drag region → start_dragging → the window manager).
    x0, y0, wd, ht, _ = geometry(env, ov)
    dx = -150 if x0 > 400 else 150
    dy = 90 if y0 < 300 else -90
    grab = (x0 + wd // 2, y0 + 20)
    wm.drag(env, grab, (grab[0] + dx, grab[1] + dy))
    want = (x0 + dx, y0 + dy)
    try:
        w.wait_for(f"the overlay to move to about {want}", lambda: near(geometry(env, ov)[:2], want), 10)
    except Fail:
        raise Fail(f"the overlay dragged by ({dx}, {dy}) from ({x0}, {y0}) is at {geometry(env, ov)[:2]}") from None
    if geometry(env, ov)[2:4] != (wd, ht):
        raise Fail(f"the drag changed the overlay's size: {(wd, ht)} → {geometry(env, ov)[2:4]}")
    log(f"   dragged by its header ({dx:+}, {dy:+}) → moved from ({x0}, {y0}) to {geometry(env, ov)[:2]}: ok")

    # Resized from its bottom-right corner (the undecorated window's 5 px border).
    x1, y1, wd, ht, _ = geometry(env, ov)
    dw = 60 if x1 + wd + 80 < 1280 else -60
    dh = 40 if y1 + ht + 60 < 800 else -40
    corner = (x1 + wd - 2, y1 + ht - 2)
    wm.drag(env, corner, (corner[0] + dw, corner[1] + dh))
    want = (x1, y1, wd + dw, ht + dh)
    try:
        w.wait_for(f"the overlay to resize to about {want[2:]}", lambda: near(geometry(env, ov)[:4], want), 10)
    except Fail:
        raise Fail(f"the overlay resized by ({dw}, {dh}) from {(x1, y1, wd, ht)} is {geometry(env, ov)[:4]}") from None
    x1, y1, wd, ht = geometry(env, ov)[:4]
    log(f"   resized from its corner's border ({dw:+}, {dh:+}) → {wd}×{ht} at {(x1, y1)}: ok")

    # And by its grip (the page's resize handle → start_resize_dragging → the window manager),
    # inside the corner but outside that border.
    grip = (x1 + wd - 7, y1 + ht - 7)
    wm.drag(env, grip, (grip[0] - 50, grip[1] - 30))
    want = (x1, y1, wd - 50, ht - 30)
    try:
        w.wait_for(f"the overlay to resize to about {want[2:]}", lambda: near(geometry(env, ov)[:4], want), 10)
    except Fail:
        raise Fail(f"the overlay resized by its grip by (-50, -30) from {(x1, y1, wd, ht)} is {geometry(env, ov)[:4]}") from None
    placed = geometry(env, ov)[:4]
    log(f"   resized by its grip (-50, -30) → {placed[2]}×{placed[3]} at {placed[:2]}: ok")

    # Quit and start again: the overlay comes back where it was left, at its size.
    app.close(display)
    app = App(binary, tmp / "wm-data", env, procs, tmp, "wm-again")
    x(env, "xdotool", "key", "ctrl+shift+space")
    w.wait_for("the shortcut to open the overlay", lambda: mapped(env, OVERLAY_TITLE), 15)
    ov = window_id(env, OVERLAY_TITLE)
    try:
        w.wait_for(f"the overlay at {placed}", lambda: geometry(env, ov)[:4] == placed, 10)
    except Fail:
        raise Fail(f"the overlay left at {placed} came back at {geometry(env, ov)[:4]}") from None
    log(f"   next launch → the overlay at {placed[:2]}, {placed[2]}×{placed[3]} again: ok")
    app.close(display)
    wm.stop_openbox(env, ob)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bin", type=Path, required=True, help="the stagewhisper binary")
    ap.add_argument("--artifacts", type=Path, default=ROOT / "tests" / "artifacts")
    ap.add_argument("--timeout", type=int, default=300)
    ap.add_argument("--fake-hub", type=Path, default=fake_hub.DEFAULT_BIN, help="the fake clawborrator hub (built when absent)")
    opts = ap.parse_args()

    tools = ("Xvfb", "openbox", "xdotool", "xwininfo", "xprop", "import", "convert", "dbus-run-session", "dbus-send", "tauri-driver", "WebKitWebDriver")
    missing = [t for t in tools if not shutil.which(t)]
    if subprocess.run([SYSTEM_PYTHON, "-c", "import dbus, gi"], capture_output=True).returncode != 0:
        missing.append("python3-dbus/python3-gi")
    if missing:
        print(f"missing: {' '.join(missing)}\n  apt-get install -y xvfb openbox xdotool x11-utils imagemagick dbus python3-dbus python3-gi webkit2gtk-driver", file=sys.stderr)
        return 2
    if os.environ.get("SW_PRIVATE_BUS") != "1":
        # A private session bus for the whole test (and nothing of the caller's).
        env = dict(os.environ, SW_PRIVATE_BUS="1")
        return subprocess.run(["dbus-run-session", "--", sys.executable, __file__, *sys.argv[1:]], env=env).returncode

    binary = opts.bin.resolve()
    hub_bin = fake_hub.ensure_built(opts.fake_hub.resolve())
    opts.artifacts.mkdir(parents=True, exist_ok=True)

    def on_alarm(*_):
        raise Fail(f"the desktop test took longer than {opts.timeout} s")

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(opts.timeout)
    procs = w.Procs()
    started = time.monotonic()
    laps = []
    try:
        with tempfile.TemporaryDirectory(prefix="sw-desktop-", ignore_cleanup_errors=True) as t:
            tmp = Path(t)
            calls_path = tmp / "notify.jsonl"
            server = procs.start([SYSTEM_PYTHON, str(HERE / "notification_server.py"), str(calls_path)], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL)
            if server.stdout.readline().strip() != b"ready":
                raise Fail("the notification server did not start")
            display = w.start_xvfb(procs)
            env = w.window_env(display, tmp, drop=("GTK_THEME",))
            log(f"Xvfb on {display}, private session bus, binary {binary}")
            try:
                laps.append(time.monotonic())
                data, _ = part_overlay(binary, env, tmp, procs, display, opts.artifacts, calls_path, hub_bin)
                laps.append(time.monotonic())
                part_dark(binary, env, tmp, procs, display, opts.artifacts, data)
                laps.append(time.monotonic())
                part_links(binary, env, tmp, procs, calls_path, hub_bin)
                laps.append(time.monotonic())
                part_wm(binary, env, tmp, procs, display)
                laps.append(time.monotonic())
            finally:
                procs.stop_all()
    except Fail as e:
        log(f"FAIL: {e}")
        return 1
    finally:
        signal.alarm(0)
        procs.stop_all()
    parts = ", ".join(f"{b - a:.0f}" for a, b in zip(laps, laps[1:]))
    log(f"PASS in {time.monotonic() - started:.1f} s (parts 1–4: {parts} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
