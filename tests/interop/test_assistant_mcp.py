#!/usr/bin/env python3
"""The assistant remembers, end to end: the REAL Hermes Agent looks up an earlier call through
the app's MCP server and the answer that reaches the Insights tab quotes it.

    STAGEWHISPER_BIN=target/debug/stagewhisper python3 tests/interop/test_assistant_mcp.py
    (re-executes itself under in_netns.sh; the peers come from install_peers.sh, whose Hermes
    is installed with its `mcp` extra: Hermes' MCP client)

Inside one loopback-only network namespace: the stub model (stub_model.py), our binary
(`stagewhisper --headless`) and Hermes (hermes-agent 0.19 + the StageWhisper adapter 0.43).
Everything goes through the real interfaces, in the order a person would do it:
1. an earlier call is kept (`POST /api/calls`, its transcript turns, `POST …/end`);
2. the person turns the assistant's access on (`PUT /api/mcp`) and gives Hermes the URL and
   the token from `GET /api/mcp`: `mcp_servers.stagewhisper` in Hermes' config.yaml
   (Streamable HTTP, `Authorization: Bearer <token>`), which Hermes connects to at start-up;
3. the app is linked to Hermes (`PUT /api/assistant`) and a new call starts; one of its turns
   carries the stub's `#recall walruses` marker: for the insight the stub model asks Hermes for
   the tool whose name ends in `search_calls` (Hermes offers it as `mcp_stagewhisper_search_calls`),
   Hermes calls the app's `/mcp`, and the stub's answer quotes the passages of the tool's result;
4. asserted: the insight quotes the earlier call's fact (said only there), the app's read log
   (`GET /api/sessions/{id}/mcp-reads`, `GET /api/mcp/activity`) names the earlier call and
   `search_calls`, the prelude told the model about the tools; and, once the earlier call is
   marked private (`PUT /api/calls/{id}`, with the call whose insight quoted it), the same
   question recalls nothing of it.
The only stand-in is the model (there is no LLM here); the test says so.
"""
from __future__ import annotations

import os
import sys
import time
import unittest
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import test_assistant_link as link  # noqa: E402
from peers import HermesPeer  # noqa: E402
from test_assistant_link import App, InteropCase, short, wait_for  # noqa: E402

FACT = "We agreed on a price of 42 walruses per seat."
EARLIER = [("Dana", FACT), ("Sam", "And the renewal starts in March.")]
QUESTION = "What did we agree with Acme last time? #recall walruses"


def plain(text: str) -> str:
    """The text without the search's `**` match marks, whitespace collapsed."""
    return " ".join(text.replace("**", "").split())


class HermesMcp(InteropCase):
    """Hermes (default profile) with the app's MCP server in its `mcp_servers`."""

    peer_kind = "hermes"
    earlier = ""

    @classmethod
    def setUpClass(cls) -> None:
        assert link.STUB is not None
        t = time.monotonic()
        cls.app = App("hermes-mcp").start()
        try:
            cls.earlier = cls.seed_earlier_call(cls.app)
            view = cls.app.ok("PUT", "/api/mcp", {"enabled": True}, 200)
            assert view["enabled"] is True and view["url"].endswith("/mcp"), view
            cls.peer = HermesPeer(link.STUB.base_url, profile="default", config_extra={
                "mcp_servers": {"stagewhisper": {
                    "url": view["url"],
                    "headers": {"Authorization": f"Bearer {view['token']}"},
                    "timeout": 30, "connect_timeout": 20}}})
            cls.peer.start()
            ready = cls.peer.wait_ready(link.READY)
        except BaseException:
            cls.app.close()
            raise
        v = cls.app.configure(cls.peer)
        print(f"\n[{cls.__name__}] hermes ready in {ready:.1f}s, link {v['status']} "
              f"(setup {time.monotonic() - t:.1f}s)", flush=True)

    @staticmethod
    def seed_earlier_call(app: App) -> str:
        """An earlier call, kept as a person's call is kept: created, spoken, ended."""
        call = app.new_call("Acme renewal")
        for speaker, text in EARLIER:
            status, v = app.turn(call, speaker, text)
            assert status == 201, (status, v)
        app.ok("POST", f"/api/calls/{call}/end", None, 200)
        return call

    def ask(self, title: str) -> tuple[str, dict[str, Any]]:
        """A new call whose one turn asks about the earlier call; its insight once it came."""
        app = self.app
        call = self.track(app, app.new_call(title))
        status, v = app.turn(call, "Me", QUESTION)
        self.assertEqual(status, 201, v)
        tip = wait_for("the insight that answers the recall question", lambda: next(
            (i for i in app.insights(call) if "recalled" in i["text"]), None))
        return call, tip

    def reads(self, session: str) -> list[dict[str, Any]]:
        return self.app.ok("GET", f"/api/sessions/{session}/mcp-reads")["reads"]

    def test_01_the_insight_quotes_an_earlier_call_read_over_mcp(self) -> None:
        assert link.STUB is not None
        app = self.app
        self.track(app, self.earlier)
        calls_before = len(link.STUB.requests)
        call, tip = self.ask("Acme follow-up")
        print(f"     insight: {short(tip['text'], 160)}")
        for r in link.STUB.requests[calls_before:]:
            if r.get("tool_result"):
                print(f"     tool result: {short(r['tool_result'], 400)}")
        self.assertIn(FACT, plain(tip["text"]), "the insight quotes the earlier call's fact")
        said_now = " ".join(t["text"] for t in app.transcript(call))
        self.assertNotIn("42", said_now, "the fact was not said on this call")
        # The model asked for the MCP tool, and got its result back through Hermes.
        asked = link.STUB.requests[calls_before:]
        tools = [r["tool"] for r in asked if r["plan"] == "tool"]
        self.assertTrue(tools and all(t.endswith("search_calls") for t in tools), tools)
        self.assertTrue(tools[0].startswith("mcp_"), f"Hermes' name for an MCP tool: {tools}")
        self.assertTrue(any(r["last_role"] == "tool" and "recalled:" in r["reply"] for r in asked),
                        "the model answered from the tool's result")
        self.assertTrue(any("search_calls" in (r.get("last_user") or "") and "MCP" in (r.get("last_user") or "")
                            for r in asked), "the prelude told the assistant about the MCP tools")
        # The app's read log names the earlier call, read by search_calls.
        reads = self.reads(self.earlier)
        self.assertIn("search_calls", [r["tool"] for r in reads], reads)
        self.assertEqual(reads[0]["title"], "Acme renewal")
        activity = app.ok("GET", "/api/mcp/activity")
        self.assertTrue(any(a["session_id"] == self.earlier and a["tool"] == "search_calls"
                            for a in activity), activity)

    def test_02_private_calls_are_not_recalled(self) -> None:
        assert link.STUB is not None
        app = self.app
        # Every call so far (the earlier one, and the one whose insight quoted it) made private.
        calls = [s["session_id"] for s in app.ok("GET", "/api/sessions") if s.get("is_call")]
        self.assertIn(self.earlier, calls)
        for c in calls:
            self.assertTrue(app.ok("PUT", f"/api/calls/{c}", {"private": True}, 200)["private"])
            self.addCleanup(app.ok, "PUT", f"/api/calls/{c}", {"private": False}, 200)
        before = {c: len(self.reads(c)) for c in calls}
        calls_before = len(link.STUB.requests)
        _, tip = self.ask("Acme, privately")
        print(f"     insight: {short(tip['text'], 160)}")
        self.assertTrue(any(r["plan"] == "tool" for r in link.STUB.requests[calls_before:]),
                        "the tool was called")
        self.assertNotIn("42", tip["text"], "a private call's words never reach the assistant")
        self.assertIn("recalled nothing about walruses", tip["text"])
        self.assertEqual({c: len(self.reads(c)) for c in calls}, before, "nothing of them was read")


def setUpModule() -> None:  # noqa: N802
    link.setUpModule()


def tearDownModule() -> None:  # noqa: N802
    link.tearDownModule()


def ensure_netns() -> None:
    if os.environ.get("SW_IN_NETNS") == "1":
        return
    os.execv("/bin/bash", ["bash", str(HERE / "in_netns.sh"), sys.executable,
                           str(Path(__file__).resolve()), *sys.argv[1:]])


def main() -> int:
    ensure_netns()
    link.assert_loopback_only()
    if not link.BIN.exists():
        print(f"{link.BIN} is missing: run `cargo build`", file=sys.stderr)
        return 2
    if not HermesPeer.installed():
        print("Hermes is not installed (run tests/interop/install_peers.sh)", file=sys.stderr)
        return 2
    prog = unittest.main(module=__name__, exit=False, verbosity=2, argv=[sys.argv[0], *sys.argv[1:]])
    r = prog.result
    failed = len(r.failures) + len(r.errors) + len(getattr(r, "unexpectedSuccesses", []))
    passed = r.testsRun - failed - len(r.skipped)
    print(f"\nmcp interop wall time {time.monotonic() - link.T0:.1f}s")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 and r.testsRun > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
