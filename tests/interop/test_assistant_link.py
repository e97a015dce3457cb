#!/usr/bin/env python3
"""Interop tests of the assistant link: our real binary against the REAL assistant peers.

    tests/interop/run.sh                  # installs the peers if missing, builds, runs everything
    tests/interop/run.sh -k OpenClaw      # unittest -k filter
    python3 tests/interop/test_assistant_link.py -v   # re-executes itself under in_netns.sh

Everything runs inside ONE loopback-only network namespace (in_netns.sh): the stub model, the
peers (Hermes adapter 0.43 in three profiles, OpenClaw 2026.3.23 + plugin 0.64) and our binary
(`target/debug/stagewhisper --headless --data-dir <tmp>`, or $STAGEWHISPER_BIN). The tests drive
the app only through its control API — configure the link (`PUT /api/assistant`), start a call,
send chat messages, feed transcript turns — and assert what the conversation and the Insights
tab contain. On a failure the app's log, the assistant's logs and the conversation are dumped.

Environment: STAGEWHISPER_BIN (binary), SW_INTEROP_JSON (write every test's conversation to this
file), SW_INTEROP_TURN_TIMEOUT (default 60 s), SW_INTEROP_QUIET=1 (no per-test transcripts),
SW_KEEP_APP_DIRS=1 / SW_KEEP_PEER_DIRS=1 (keep data dirs and logs for a post-mortem).
The binary runs with STAGEWHISPER_TEST_FAULT_INJECTION (test-only, debug builds) so a test can
make it answer 503 once.
"""
from __future__ import annotations

import functools
import json
import os
import select
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import traceback
import unittest
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))

from peers import HermesPeer, OpenClawPeer, Peer, free_port, http_request  # noqa: E402
from stub_model import StubModelServer  # noqa: E402

BIN = Path(os.environ.get("STAGEWHISPER_BIN") or (REPO / "target" / "debug" / "stagewhisper"))
TURN = float(os.environ.get("SW_INTEROP_TURN_TIMEOUT", "60"))
READY = 90.0
QUIET = os.environ.get("SW_INTEROP_QUIET") == "1"
FAULTS_ENV = ("STAGEWHISPER_TEST_FAULT_INJECTION", "i-am-a-test")

STUB: StubModelServer | None = None
RECORD: list[dict[str, Any]] = []
T0 = time.monotonic()


# ----------------------------------------------------------------------------- namespace
def ensure_netns() -> None:
    if os.environ.get("SW_IN_NETNS") == "1":
        return
    os.execv("/bin/bash", ["bash", str(HERE / "in_netns.sh"), sys.executable,
                           str(Path(__file__).resolve()), *sys.argv[1:]])


def assert_loopback_only() -> None:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.1", 9))
    except OSError:
        return
    finally:
        s.close()
    raise SystemExit("refusing to run: this namespace has a route off loopback (use in_netns.sh)")


# ----------------------------------------------------------------------------- the app
class App:
    """Our binary, headless, on its own data dir; talks to it through the control API."""

    def __init__(self, name: str, data_dir: Path | None = None, faults: bool = True):
        self.name = name
        self._own_dir = data_dir is None
        self.data_dir = data_dir or Path(tempfile.mkdtemp(prefix=f"sw-app-{name}-"))
        self.log_path = self.data_dir.parent / f"{self.data_dir.name}.log"
        self.faults = faults
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready: dict[str, Any] = {}

    def start(self) -> "App":
        env = {k: v for k, v in os.environ.items() if not k.startswith("STAGEWHISPER_")}
        env["RUST_LOG"] = os.environ.get("SW_INTEROP_RUST_LOG", "info,stagewhisper_core::assistants::kinds::incoming=debug,sqlx=warn")
        if self.faults:
            env[FAULTS_ENV[0]] = FAULTS_ENV[1]
        log = open(self.log_path, "ab")
        log.write(f"\n----- start {time.strftime('%H:%M:%S')}\n".encode())
        self.proc = subprocess.Popen([str(BIN), "--headless", "--data-dir", str(self.data_dir)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                                     env=env)
        log.close()
        assert self.proc.stdout is not None
        deadline = time.monotonic() + 30
        line = b""
        while time.monotonic() < deadline and not line.endswith(b"\n"):
            r, _, _ = select.select([self.proc.stdout], [], [], 0.2)
            if r:
                chunk = os.read(self.proc.stdout.fileno(), 4096)
                if not chunk:
                    break
                line += chunk
        if not line.endswith(b"\n"):
            raise RuntimeError(f"{BIN} printed no ready line\n{self.log_tail()}")
        self.ready = json.loads(line.decode())
        return self

    @property
    def ui(self) -> str:
        return self.ready["ui_url"].rstrip("/")

    @property
    def callback_url(self) -> str:
        return self.ready["callback_url"]

    def api(self, method: str, path: str, body: Any = None, timeout: float = 20) -> tuple[int, Any]:
        status, _, parsed = http_request(method, self.ui + path, body if body is not None else (b"" if method in ("POST", "PUT") else None),
                                         {"Authorization": f"Bearer {self.ready['ui_token']}"}, timeout)
        return status, parsed

    def ok(self, method: str, path: str, body: Any = None, want: int | tuple[int, ...] = (200, 201)) -> Any:
        status, v = self.api(method, path, body)
        want = (want,) if isinstance(want, int) else want
        if status not in want:
            raise AssertionError(f"{method} {path} -> {status} {v}")
        return v

    # -- conversation helpers
    def configure(self, peer: Peer, **extra: Any) -> dict[str, Any]:
        body = {"base_url": peer.base_url, "relay_token": peer.token, **extra}
        return self.ok("PUT", "/api/assistant", body, 200)

    def assistant(self) -> dict[str, Any]:
        return self.ok("GET", "/api/assistant")

    def new_call(self, title: str) -> str:
        return self.ok("POST", "/api/calls", {"title": title}, 201)["session_id"]

    def new_chat(self, title: str) -> str:
        return self.ok("POST", "/api/sessions", {"title": title}, 201)["session_id"]

    def say(self, session: str, text: str) -> dict[str, Any]:
        return self.ok("POST", f"/api/sessions/{session}/messages", {"text": text}, 201)

    def turn(self, call: str, speaker: str, text: str, is_final: bool = True) -> tuple[int, Any]:
        return self.api("POST", f"/api/calls/{call}/transcript",
                        {"speaker": speaker, "text": text, "is_final": is_final})

    def messages(self, session: str) -> list[dict[str, Any]]:
        return self.ok("GET", f"/api/sessions/{session}/messages")

    def insights(self, session: str) -> list[dict[str, Any]]:
        return self.ok("GET", f"/api/sessions/{session}/insights")

    def transcript(self, call: str) -> list[dict[str, Any]]:
        return self.ok("GET", f"/api/calls/{call}/transcript")

    def message(self, session: str, row: int) -> dict[str, Any]:
        return next((m for m in self.messages(session) if m["id"] == row), {})

    def replies_to(self, session: str, user_msg: dict[str, Any]) -> list[dict[str, Any]]:
        return [m for m in self.messages(session)
                if m["kind"] == "assistant" and m.get("user_message_id") == user_msg["message_id"]]

    def stop(self) -> int | None:
        if not self.proc:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc.stdout:
            self.proc.stdout.close()
        return self.proc.returncode

    def close(self) -> None:
        self.stop()
        if self._own_dir and not os.environ.get("SW_KEEP_APP_DIRS"):
            shutil.rmtree(self.data_dir, ignore_errors=True)
            try:
                self.log_path.unlink()
            except OSError:
                pass

    def log_tail(self, n: int = 80) -> str:
        try:
            lines = self.log_path.read_text("utf-8", "replace").splitlines()
        except OSError:
            return "<no app log>"
        return f"===== app {self.name} log (last {min(n, len(lines))} of {len(lines)} lines)\n" + "\n".join(lines[-n:])


def wait_for(what: str, pred: Callable[[], Any], timeout: float = TURN, every: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for: {what}")


def short(text: str, n: int = 90) -> str:
    text = " ".join((text or "").split())
    return text if len(text) <= n else text[: n - 1] + "…"


# ----------------------------------------------------------------------------- base class
class InteropCase(unittest.TestCase):
    """Per class: one peer and one app. On failure: dump the app's and the peer's logs and the
    conversation. After every test: print (and record) what arrived."""

    peer: Peer
    app: App
    peer_kind = ""

    @classmethod
    def make_peer(cls) -> Peer:
        raise NotImplementedError

    @classmethod
    def setUpClass(cls) -> None:
        assert STUB is not None
        t = time.monotonic()
        cls.peer = cls.make_peer()
        cls.peer.start()
        try:
            ready = cls.peer.wait_ready(READY)
        except Exception:
            cls.peer.close()
            raise
        cls.app = App(cls.__name__.lower()).start()
        v = cls.app.configure(cls.peer, **cls.link_options())
        print(f"\n[{cls.__name__}] {cls.peer.kind} ready in {ready:.1f}s, link {v['status']}: "
              f"{short(v['detail'], 120)} (setup {time.monotonic() - t:.1f}s)", flush=True)
        if v["status"] != "online":
            print(cls.app.log_tail(40))
            print(cls.peer.dump_logs(60))

    @classmethod
    def link_options(cls) -> dict[str, Any]:
        return {}

    @classmethod
    def tearDownClass(cls) -> None:
        cls.app.close()
        cls.peer.close()

    def setUp(self) -> None:
        self.sessions: list[tuple[App, str]] = []
        self.extra_apps: list[App] = []
        self.t_start = time.monotonic()

    def ensure_peer_running(self) -> None:
        if not self.peer.is_running():
            self.peer.start()
            self.peer.wait_ready(READY)

    def spawn_app(self, name: str) -> App:
        """Another app instance for this test (closed after the test is reported)."""
        app = App(name).start()
        self.extra_apps.append(app)
        self.addCleanup(app.close)
        return app

    def track(self, app: App, session: str) -> str:
        self.sessions.append((app, session))
        return session

    def run(self, result: Any = None) -> Any:  # noqa: D401 - unittest hook
        # Wrap the test method: on failure, dump everything useful, then re-raise.
        method = getattr(self, self._testMethodName)

        @functools.wraps(method)
        def wrapped() -> None:
            try:
                method()
            except BaseException:
                print(f"\n!!!!! {self.id()} failed after {time.monotonic() - self.t_start:.1f}s")
                traceback.print_exc()
                self.dump()
                raise
            finally:
                self.report()

        setattr(self, self._testMethodName, wrapped)
        return super().run(result)

    def conversation(self) -> list[dict[str, Any]]:
        out = []
        for app, s in self.sessions:
            try:
                entry: dict[str, Any] = {"app": app.name, "session_id": s, "messages": app.messages(s)}
                sess = next((x for x in app.ok("GET", "/api/sessions") if x["session_id"] == s), {})
                if sess.get("is_call"):
                    entry["transcript"] = app.transcript(s)
                    entry["insights"] = app.insights(s)
                out.append(entry)
            except Exception as exc:  # noqa: BLE001
                out.append({"app": app.name, "session_id": s, "error": repr(exc)})
        return out

    def report(self) -> None:
        conv = self.conversation()
        RECORD.append({"test": self.id(), "peer": self.peer_kind,
                       "seconds": round(time.monotonic() - self.t_start, 1), "sessions": conv})
        if QUIET:
            return
        print(f"\n  -- {self._testMethodName} ({time.monotonic() - self.t_start:.1f}s), what arrived:")
        for e in conv:
            for m in e.get("messages", []):
                d = m.get("delivery")
                extra = f" [{d}{' ' + m['delivery_error']['code'] if m.get('delivery_error') else ''}]" if d else ""
                print(f"     chat  {m['kind']:9} {'draft ' if m['draft'] else ''}{short(m['text'])}{extra}")
            for t in e.get("transcript", []):
                print(f"     said  {t.get('speaker') or '?'}: {short(t['text'], 70)} [{t.get('delivery')}]")
            for i in reversed(e.get("insights", [])):
                print(f"     tip   {short(i['text'])}")

    def dump(self) -> None:
        print(self.app.log_tail(120))
        for a in self.extra_apps:
            print(a.log_tail(80))
        print(self.peer.dump_logs(150))
        print("===== conversation")
        print(json.dumps(self.conversation(), indent=1, ensure_ascii=False)[:20000])
        try:
            print("===== GET /api/assistant")
            print(json.dumps(self.app.assistant(), indent=1)[:4000])
        except Exception as exc:  # noqa: BLE001
            print(f"<{exc!r}>")

    # -- shared assertions
    def wait_reply(self, app: App, session: str, user_msg: dict[str, Any], needle: str,
                   timeout: float = TURN) -> dict[str, Any]:
        return wait_for(f"a reply containing {needle!r} to {short(user_msg['text'], 40)!r}",
                        lambda: next((m for m in app.replies_to(session, user_msg)
                                      if needle in m["text"] and not m["draft"]), None), timeout)

    def assert_no_duplicates(self, app: App, session: str) -> None:
        msgs = [m for m in app.messages(session) if m["kind"] == "assistant"]
        ids = [m["message_id"] for m in msgs]
        self.assertEqual(len(ids), len(set(ids)), f"duplicate message_ids: {ids}")
        seen: dict[tuple[Any, str], int] = {}
        for m in msgs:
            key = (m.get("user_message_id") or m.get("task_id"), " ".join(m["text"].split()))
            seen[key] = seen.get(key, 0) + 1
        dups = {k: n for k, n in seen.items() if n > 1}
        self.assertFalse(dups, f"the same reply shown more than once: {dups}")

    def check_call_chat_and_insights(self) -> None:
        app = self.app
        call = self.track(app, app.new_call(f"Interop {self.peer_kind}"))
        user = app.say(call, "hello from the interop test")
        self.assertEqual(user["delivery"], "pending")
        reply = self.wait_reply(app, call, user, "hello from the interop test")
        self.assertIn("Stub reply", reply["text"])
        sent = wait_for("the chat message marked sent", lambda: app.message(call, user["id"]).get("delivery") == "sent" and app.message(call, user["id"]))
        self.assertTrue(sent["task_id"])
        lines = [("Client", "They said the budget is fifty thousand for Q3."),
                 ("Me", "We could start the rollout in April.")]
        for speaker, text in lines:
            st, t = app.turn(call, speaker, text)
            self.assertEqual(st, 201, t)
        st, v = app.turn(call, "Client", "and one more th", is_final=False)
        self.assertEqual((st, v.get("stored")), (202, False), v)
        # Hermes may interrupt the first insights turn when the second arrives ("⚡ Interrupting
        # current task…"); both replies still come.
        tips = wait_for("an insight for each final turn", lambda: (lambda i: i if all(
            any(text in x["text"] for x in i) for _, text in lines) else None)(app.insights(call)))
        texts = " | ".join(i["text"] for i in tips)
        self.assertNotIn("and one more th", texts, "an interim turn is not forwarded")
        chat = " | ".join(m["text"] for m in app.messages(call))
        self.assertNotIn("fifty thousand", chat, "insights never go to the chat")
        turns = wait_for("transcript sent", lambda: (lambda t: t if all(x["delivery"] == "sent" for x in t) else None)(app.transcript(call)))
        self.assertEqual([t["text"] for t in turns], [t for _, t in lines])
        # The prelude reached the model, prepended as [Context: …] to the first transcript turn.
        assert STUB is not None
        self.assertTrue(any("Contract: answer every turn" in (r.get("last_user") or "")
                            and "fifty thousand" in (r.get("last_user") or "") for r in STUB.requests),
                        "the system_prelude reached the model with the first transcript turn")
        self.assert_no_duplicates(app, call)

    def check_slow_tool(self, needle: str = "tool result received") -> None:
        app = self.app
        s = self.track(app, app.new_chat("slow tool"))
        user = app.say(s, "please look it up #slowtool")
        reply = self.wait_reply(app, s, user, needle, timeout=TURN)
        time.sleep(1.0)
        self.assert_no_duplicates(app, s)
        return reply

    def check_503_once(self) -> None:
        app = self.app
        s = self.track(app, app.new_chat("503 once"))
        app.ok("POST", "/api/test/faults", {"status": "message", "session_id": s, "when": "after_commit"}, 200)
        user = app.say(s, "hello with a lost answer")
        self.wait_reply(app, s, user, "hello with a lost answer")
        fired = wait_for("the injected 503", lambda: app.ok("GET", "/api/test/faults")["fired"])
        self.assertEqual(len(fired), 1, fired)
        time.sleep(2.0)  # let every retry of the assistant land
        fired = app.ok("GET", "/api/test/faults")["fired"]
        self.assertIn("duplicate", fired[0].get("followups", []),
                      f"the assistant retried and the retry was recognised as a duplicate: {fired}")
        replies = [m for m in app.replies_to(s, user) if "hello with a lost answer" in m["text"]]
        self.assertEqual(len(replies), 1, f"the assistant's retry must not duplicate: {replies}")
        self.assertEqual(replies[0]["message_id"], fired[0]["message_id"])
        self.assert_no_duplicates(app, s)

    def check_summarise_after_end(self) -> None:
        app = self.app
        call = self.track(app, app.new_call("to summarise"))
        for speaker, text in [("Client", "Our renewal is due on June 30."),
                              ("Me", "I will send the revised quote by Friday.")]:
            self.assertEqual(app.turn(call, speaker, text)[0], 201)
        wait_for("an insight for each turn", lambda: all(any(k in i["text"] for i in app.insights(call))
                                                         for k in ("June 30", "revised quote")))
        app.ok("POST", f"/api/calls/{call}/end", None, 200)
        st, v = app.turn(call, "Client", "said after the end")
        self.assertEqual((st, v.get("error")), (409, "call_ended"), v)
        ask = app.ok("POST", f"/api/calls/{call}/summarise", None, 201)
        self.assertEqual(ask["kind"], "user")
        self.assertIn("I will send the revised quote by Friday.", ask["text"])
        reply = self.wait_reply(app, call, ask, "Please summarise this call")
        self.assertIn("June 30", reply["text"])
        self.assertEqual(len(app.transcript(call)), 2)


# ----------------------------------------------------------------------------- Hermes
class HermesDefault(InteropCase):
    """Hermes adapter 0.43, profile "default" (streaming off)."""

    peer_kind = "hermes"

    @classmethod
    def make_peer(cls) -> Peer:
        assert STUB is not None
        return HermesPeer(STUB.base_url, profile="default")

    def test_01_status_online_with_events_fallback(self) -> None:
        v = self.app.assistant()
        self.assertEqual(v["status"], "online", v)
        self.assertEqual(v["assistant_version"], "0.43.0")
        self.assertIs(v["supports_events_fallback"], True, v)
        self.assertEqual(v["delivery"], "callback")
        self.assertNotIn(self.peer.token, json.dumps(v))

    def test_02_call_chat_transcript_insights(self) -> None:
        self.check_call_chat_and_insights()

    def test_03_slow_tool_late_reply_after_completed(self) -> None:
        app = self.app
        s = self.track(app, app.new_chat("slow tool"))
        user = app.say(s, "please look it up #slowtool")
        sent = wait_for("sent", lambda: (lambda m: m if m.get("delivery") == "sent" else None)(app.message(s, user["id"])))
        reply = self.wait_reply(app, s, user, "tool result received")
        # The late reply comes under a new random task id (after `completed`).
        self.assertNotEqual(reply["task_id"], sent["task_id"])
        time.sleep(1.0)
        self.assert_no_duplicates(app, s)

    def test_04_app_answers_503_once_no_duplicate(self) -> None:
        self.check_503_once()

    def test_05_summarise_after_the_call_ended(self) -> None:
        self.check_summarise_after_end()

    def test_06_assistant_restart_mid_turn(self) -> None:
        app, peer = self.app, self.peer
        s = self.track(app, app.new_chat("restart"))
        self.addCleanup(self.ensure_peer_running)
        first = app.say(s, "a long one #slowtool")
        wait_for("the first turn in flight", lambda: app.message(s, first["id"]).get("delivery") == "sent")
        time.sleep(3.0)
        t = time.monotonic()
        peer.stop()
        print(f"     hermes stopped mid-turn in {time.monotonic() - t:.1f}s")
        during = app.say(s, "sent while the assistant is down")
        pending = wait_for("a pending note", lambda: (lambda m: m if (m.get("delivery_error") or {}).get("code") == "assistant_unreachable" else None)(app.message(s, during["id"])), timeout=20)
        self.assertEqual(pending["delivery"], "pending")
        wait_for("status unreachable", lambda: app.assistant()["status"] == "unreachable", timeout=20)
        peer.start()
        peer.wait_ready(READY)
        sent = wait_for("delivered after the restart", lambda: (lambda m: m if m.get("delivery") == "sent" else None)(app.message(s, during["id"])), timeout=TURN)
        self.assertEqual(sent["task_id"], pending["task_id"], "the same task id across retries")
        self.assertIsNone(sent["delivery_error"])
        self.wait_reply(app, s, during, "sent while the assistant is down")
        wait_for("online again", lambda: app.assistant()["status"] == "online", timeout=20)
        time.sleep(2.0)
        self.assert_no_duplicates(app, s)

    def test_07_wrong_token_then_fixed_and_retried(self) -> None:
        app = self.spawn_app("hermes-badtoken")
        v = app.ok("PUT", "/api/assistant", {"base_url": self.peer.base_url,
                                             "relay_token": "definitely-not-the-token-0123456789"}, 200)
        self.assertEqual(v["status"], "auth_failed", v)
        self.assertIn("STAGEWHISPER_RELAY_TOKEN", v["detail"])
        s = self.track(app, app.new_chat("bad token"))
        user = app.say(s, "do you hear me")
        failed = wait_for("failed", lambda: (lambda m: m if m.get("delivery") == "failed" else None)(app.message(s, user["id"])), timeout=20)
        self.assertEqual(failed["delivery_error"]["code"], "assistant_auth_failed")
        self.assertIn("401 bad_bearer", failed["delivery_error"]["message"])
        v = app.configure(self.peer)
        self.assertEqual(v["status"], "online", v)
        again = app.ok("POST", f"/api/sessions/{s}/messages/{user['id']}/retry", None, 200)
        self.assertNotEqual(again["task_id"], failed["task_id"])
        self.wait_reply(app, s, user, "do you hear me")
        self.assert_no_duplicates(app, s)

    def test_08_wrong_url_says_what_is_wrong(self) -> None:
        app = self.spawn_app("hermes-badurl")
        port = free_port()
        v = app.ok("PUT", "/api/assistant", {"base_url": f"http://127.0.0.1:{port}", "relay_token": self.peer.token}, 200)
        self.assertEqual(v["status"], "unreachable", v)
        self.assertIn("connection refused", v["detail"])
        v = app.ok("PUT", "/api/assistant", {"base_url": self.peer.base_url + "/stagewhisper"}, 200)
        self.assertEqual(v["status"], "misconfigured", v)
        self.assertIn("not a StageWhisper assistant", v["detail"])
        st, v = app.api("PUT", "/api/assistant", {"base_url": "http://192.0.2.10:8644", "relay_token": self.peer.token})
        self.assertEqual((st, v["error"]), (400, "invalid_base_url"), v)
        v = app.ok("DELETE", "/api/assistant", None, 200)
        self.assertEqual(v["status"], "not_configured")

    def test_09_app_restart_resends_pending_with_the_same_task_id(self) -> None:
        app = self.spawn_app("hermes-restart")
        self.addCleanup(self.ensure_peer_running)
        app.configure(self.peer)
        self.peer.stop()
        s = self.track(app, app.new_chat("app restart"))
        user = app.say(s, "queued across an app restart")
        pending = wait_for("a task id while pending", lambda: (lambda m: m if m.get("task_id") else None)(app.message(s, user["id"])), timeout=20)
        self.assertEqual(pending["delivery"], "pending")
        app.stop()
        self.peer.start()
        self.peer.wait_ready(READY)
        app.start()
        sent = wait_for("sent after the app restart", lambda: (lambda m: m if m.get("delivery") == "sent" else None)(app.message(s, user["id"])))
        self.assertEqual(sent["task_id"], pending["task_id"])
        self.wait_reply(app, s, user, "queued across an app restart")
        self.assert_no_duplicates(app, s)

    def test_10_events_mode_and_a_full_replay_do_not_duplicate(self) -> None:
        """Mode "events": replies come from GET /v1/events; switching back and forth, and a
        replay of the whole backlog (unknown Last-Event-ID), never duplicate a message."""
        app = self.spawn_app("hermes-events")
        v = app.configure(self.peer, mode="events")
        self.assertEqual(v["delivery"], "events", v)
        s = self.track(app, app.new_chat("events mode"))
        a = app.say(s, "first over SSE")
        self.wait_reply(app, s, a, "first over SSE")
        app.configure(self.peer, mode="callback")
        b = app.say(s, "second over the callback")
        self.wait_reply(app, s, b, "second over the callback")
        before = app.messages(s)
        # Forget the stream cursor: the next read replays the whole backlog.
        app.stop()
        # (The cursors are rows of the app's database; the app is stopped.)
        db = sqlite3.connect(app.data_dir / "stagewhisper.db")
        try:
            row = db.execute(
                "SELECT last_event_id FROM stream_cursors WHERE session_id = ?", (s,)
            ).fetchone()
            self.assertIsNotNone(row, "the stream's cursor is kept")
            db.execute(
                "UPDATE stream_cursors SET last_event_id = ? WHERE session_id = ?",
                ("unknown-epoch-0.0", s),
            )
            db.commit()
        finally:
            db.close()
        # The link's settings: the `incoming` section of the settings store.
        doc_path = app.data_dir / "settings.json"
        doc = json.loads(doc_path.read_text())
        doc["sections"]["incoming"]["value"]["mode"] = "events"
        doc_path.write_text(json.dumps(doc))
        app.start()
        c = app.say(s, "third over SSE after a replay")
        self.wait_reply(app, s, c, "third over SSE after a replay")
        time.sleep(1.5)
        after = [m for m in app.messages(s) if m["id"] not in {x["id"] for x in before}]
        self.assertTrue(all(m.get("user_message_id") == c["message_id"] or m["kind"] == "user" for m in after),
                        f"the replayed backlog added nothing: {after}")
        self.assert_no_duplicates(app, s)


class HermesStreaming(InteropCase):
    """Hermes adapter 0.43, profile "streaming" (stream + edit callbacks)."""

    peer_kind = "hermes-streaming"

    @classmethod
    def make_peer(cls) -> Peer:
        assert STUB is not None
        return HermesPeer(STUB.base_url, profile="streaming")

    def test_01_streamed_reply_settles_once(self) -> None:
        app = self.app
        s = self.track(app, app.new_chat("streaming"))
        user = app.say(s, "stream this slowly #slow")
        final = self.wait_reply(app, s, user, "stream this slowly")
        time.sleep(2.5)  # late deltas / finish after the final message
        msgs = [m for m in app.messages(s) if m["kind"] == "assistant" and "stream this slowly" in m["text"]]
        self.assertEqual(len(msgs), 1, f"one settled message: {msgs}")
        self.assertFalse(msgs[0]["draft"])
        self.assertEqual(msgs[0]["id"], final["id"])
        self.assertFalse([m for m in app.messages(s) if m["draft"]], "no draft left open")
        self.assert_no_duplicates(app, s)

    def test_02_call_chat_transcript_insights(self) -> None:
        self.check_call_chat_and_insights()


class HermesCallbackRejected(InteropCase):
    """Hermes that does not allow our callback origin (STAGEWHISPER_ALLOW_INGRESS_HOSTS set, so
    loopback callbacks must be allow-listed): 400 validation_failed invalid_callback_url."""

    peer_kind = "hermes-no-callback"

    @classmethod
    def make_peer(cls) -> Peer:
        assert STUB is not None
        return HermesPeer(STUB.base_url, profile="default",
                          extra_env={"STAGEWHISPER_ALLOW_INGRESS_HOSTS": "assistant.example.invalid"})

    def test_01_auto_mode_falls_back_to_v1_events(self) -> None:
        app = self.app
        call = self.track(app, app.new_call("no callback"))
        user = app.say(call, "reach me without a callback")
        self.wait_reply(app, call, user, "reach me without a callback")
        v = app.assistant()
        self.assertEqual(v["delivery"], "events", v)
        self.assertIn("GET /v1/events", v["detail"])
        self.assertIn(f"STAGEWHISPER_ALLOW_CALLBACK_URLS={app.callback_url}", v["detail"])
        self.assertEqual(app.message(call, user["id"])["delivery"], "sent")
        self.assertEqual(app.turn(call, "Client", "Can you do it for forty thousand?")[0], 201)
        wait_for("an insight over SSE", lambda: any("forty thousand" in i["text"] for i in app.insights(call)))
        self.assert_no_duplicates(app, call)

    def test_02_callback_mode_fails_with_an_actionable_message(self) -> None:
        app = self.spawn_app("hermes-callback-only")
        app.configure(self.peer, mode="callback")
        s = self.track(app, app.new_chat("callback only"))
        user = app.say(s, "this cannot be answered")
        m = wait_for("failed", lambda: (lambda m: m if m.get("delivery") == "failed" else None)(app.message(s, user["id"])), timeout=20)
        self.assertEqual(m["delivery_error"]["code"], "callback_rejected")
        msg = m["delivery_error"]["message"]
        self.assertIn("400 validation_failed: invalid_callback_url", msg)
        self.assertIn(f"STAGEWHISPER_ALLOW_CALLBACK_URLS={app.callback_url}", msg)
        v = app.assistant()
        self.assertEqual(v["status"], "misconfigured", v)
        self.assertEqual(v["last_error"]["code"], "callback_rejected")


# ----------------------------------------------------------------------------- OpenClaw
class OpenClaw(InteropCase):
    """OpenClaw 2026.3.23 + @stagewhisper/stagewhisper 0.64 (transport http)."""

    peer_kind = "openclaw"

    @classmethod
    def make_peer(cls) -> Peer:
        assert STUB is not None
        return OpenClawPeer(STUB.base_url)

    def test_01_status_online_without_events_fallback(self) -> None:
        v = self.app.assistant()
        self.assertEqual(v["status"], "online", v)
        self.assertIsNone(v["assistant_version"], "0.64 has no /v1/health")
        self.assertIs(v["supports_events_fallback"], False, v)
        self.assertIn("no GET /v1/events (404)", v["events_fallback_detail"])

    def test_02_call_chat_transcript_insights(self) -> None:
        self.check_call_chat_and_insights()

    def test_03_slow_tool(self) -> None:
        self.check_slow_tool(needle="Stub reply")

    def test_04_app_answers_503_once_no_duplicate(self) -> None:
        self.check_503_once()

    def test_05_summarise_after_the_call_ended(self) -> None:
        self.check_summarise_after_end()

    def test_06_events_mode_is_refused_clearly(self) -> None:
        app = self.spawn_app("openclaw-events")
        app.configure(self.peer, mode="events")
        s = self.track(app, app.new_chat("events on openclaw"))
        user = app.say(s, "no callback here")
        m = wait_for("failed", lambda: (lambda m: m if m.get("delivery") == "failed" else None)(app.message(s, user["id"])), timeout=20)
        self.assertEqual(m["delivery_error"]["code"], "callback_required")
        self.assertIn("chat_message requires callback", m["delivery_error"]["message"])
        self.assertIn("no GET /v1/events", m["delivery_error"]["message"])
        app.configure(self.peer, mode="auto")
        app.ok("POST", f"/api/sessions/{s}/messages/{user['id']}/retry", None, 200)
        self.wait_reply(app, s, user, "no callback here")

    def test_07_assistant_restart_mid_turn(self) -> None:
        app, peer = self.app, self.peer
        s = self.track(app, app.new_chat("restart"))
        self.addCleanup(self.ensure_peer_running)
        first = app.say(s, "a long one #slowtool")
        wait_for("the first turn in flight", lambda: app.message(s, first["id"]).get("delivery") == "sent")
        time.sleep(3.0)
        t = time.monotonic()
        peer.stop()
        print(f"     openclaw stopped mid-turn in {time.monotonic() - t:.1f}s (it drains the run)")
        during = app.say(s, "sent while the assistant is down")
        pending = wait_for("a pending note", lambda: (lambda m: m if (m.get("delivery_error") or {}).get("code") == "assistant_unreachable" else None)(app.message(s, during["id"])), timeout=20)
        peer.start()
        peer.wait_ready(READY)
        sent = wait_for("delivered after the restart", lambda: (lambda m: m if m.get("delivery") == "sent" else None)(app.message(s, during["id"])), timeout=TURN)
        self.assertEqual(sent["task_id"], pending["task_id"])
        # OpenClaw 2026.3.23 sometimes fails a turn that arrives while it is still booting
        # (`errored` "session file locked (timeout 10000ms)"): the app must show that error
        # (never silence); the user then simply asks again.
        outcome = wait_for("a reply or the assistant's error", lambda: next(
            (m for m in app.messages(s) if m.get("user_message_id") == during["message_id"]
             and (m["kind"] == "error" or "sent while the assistant is down" in m["text"])), None))
        if outcome["kind"] == "error":
            print(f"     NOTE: OpenClaw failed the turn after its restart: {short(outcome['text'], 100)}")
            # Its session lock can outlive the restart by more than one 10 s lock timeout on a
            # loaded machine (seen once in CI): each failure is shown (never silence), and the
            # user asks again, up to three times.
            for attempt in range(1, 4):
                again = app.say(s, f"asked again after the assistant's error ({attempt})")
                got = wait_for("a reply or the assistant's error to the question asked again", lambda: next(
                    (m for m in app.messages(s) if m.get("user_message_id") == again["message_id"]
                     and (m["kind"] == "error" or "asked again after the assistant's error" in m["text"])), None),
                    timeout=TURN)
                if got["kind"] != "error":
                    break
                self.assertIn("session file locked", got["text"])
                print(f"     NOTE: asked again ({attempt}), still: {short(got['text'], 60)}")
                time.sleep(10.0)
            else:
                self.fail("OpenClaw kept its session file locked after three questions")
        time.sleep(2.0)
        self.assert_no_duplicates(app, s)


# ----------------------------------------------------------------------------- main
def setUpModule() -> None:  # noqa: N802
    global STUB
    STUB = StubModelServer().start()


def tearDownModule() -> None:  # noqa: N802
    if STUB:
        STUB.stop()


def main() -> int:
    ensure_netns()
    assert_loopback_only()
    if not BIN.exists():
        print(f"{BIN} is missing: run `cargo build` (or tests/interop/run.sh)", file=sys.stderr)
        return 2
    missing = [n for n, ok in (("Hermes", HermesPeer.installed()), ("OpenClaw", OpenClawPeer.installed())) if not ok]
    if missing:
        print(f"peers not installed: {', '.join(missing)} (run tests/interop/install_peers.sh)", file=sys.stderr)
        return 2
    print(f"binary {BIN}\npeers  {HERE.parent.parent / '.peers'}")
    prog = unittest.main(module=__name__, exit=False, verbosity=2, argv=[sys.argv[0], *sys.argv[1:]])
    r = prog.result
    failed = len(r.failures) + len(r.errors) + len(getattr(r, "unexpectedSuccesses", []))
    passed = r.testsRun - failed - len(r.skipped)
    out = os.environ.get("SW_INTEROP_JSON")
    if out:
        Path(out).write_text(json.dumps(RECORD, indent=1, ensure_ascii=False))
        print(f"conversations written to {out}")
    print(f"\ninterop wall time {time.monotonic() - T0:.1f}s")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and r.testsRun > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
