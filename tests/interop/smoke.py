#!/usr/bin/env python3
"""Smoke test of the interop harness: both real peers, offline, in one loopback-only netns.

    tests/interop/in_netns.sh python3 tests/interop/smoke.py [--peers hermes,openclaw]
    python3 tests/interop/smoke.py        # re-executes itself under in_netns.sh

Per peer, inside ONE network namespace (receiver, stub model, peer and this driver):
  1. start a callback receiver (records every POST /tasks/{id}, answers 200 {"ok":true})
     and the stub model (stub_model.py), then the peer; wait until it is ready
  2. POST /v1/incoming  system_prelude      on insights:<session>
  3. POST /v1/incoming  chat_message        on <session>           (with callback)
     -> wait for a `message` callback for <session>
  4. POST /v1/incoming  transcript_chunk    on insights:<session>  (is_final, with callback)
     -> wait for a `message` callback for insights:<session>
  5. Hermes only: a chat_message WITHOUT callback, read from GET /v1/events?session_id=...
  6. optional (--restart): a #slowtool turn, restart the peer mid-turn, then one more turn
and prints every callback received (abbreviated). Exit 0 only if every peer delivered a
`message` for the chat and for the insights turn. Every wait is bounded.
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time
import traceback
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from peers import (CallbackReceiver, HermesPeer, OpenClawPeer, Peer, PeerError,  # noqa: E402
                   chat_message, make_peer, system_prelude, transcript_chunk)
from stub_model import StubModelServer  # noqa: E402

TURN_TIMEOUT = float(os.environ.get("SMOKE_TURN_TIMEOUT", "60"))
READY_TIMEOUT = float(os.environ.get("SMOKE_READY_TIMEOUT", "90"))


def ensure_netns() -> None:
    """Re-exec under in_netns.sh unless we already are in a loopback-only namespace."""
    if os.environ.get("SW_IN_NETNS") == "1":
        return
    if os.environ.get("SMOKE_ALLOW_HOST_NETWORK") == "1":
        print("WARNING: running in the host network namespace (SMOKE_ALLOW_HOST_NETWORK=1)",
              file=sys.stderr)
        return
    script = HERE / "in_netns.sh"
    os.execv("/bin/bash", ["bash", str(script), sys.executable, str(Path(__file__).resolve()),
                           *sys.argv[1:]])


def assert_loopback_only() -> None:
    """Cheap guard: a UDP 'connect' to a public address must fail with ENETUNREACH."""
    if os.environ.get("SMOKE_ALLOW_HOST_NETWORK") == "1":
        return
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.1", 9))  # TEST-NET-1, and no packet is sent by a UDP connect
    except OSError:
        return
    finally:
        s.close()
    raise SystemExit("refusing to run: this namespace has a route off loopback (use in_netns.sh)")


def short(body: Any, width: int = 110) -> str:
    if not isinstance(body, dict):
        return repr(body)[:width]
    st = body.get("status")
    bits = [f"{st:9}", f"task={str(body.get('task_id'))[:8]}", f"sess={body.get('session_id')}"]
    if body.get("message_id"):
        bits.append(f"mid={str(body['message_id'])[:8]}")
    if st == "stream":
        chunk = body.get("chunk") or {}
        bits.append(json.dumps({k: v for k, v in chunk.items() if k != "id"}, ensure_ascii=False))
    elif body.get("reply_text") is not None:
        bits.append(json.dumps(body["reply_text"], ensure_ascii=False))
    elif body.get("error_code") or body.get("error_message"):
        bits.append(f"{body.get('error_code')}: {body.get('error_message')}")
    elif body.get("label"):
        bits.append(f"label={body['label']}")
    line = " ".join(bits)
    return line if len(line) <= width else line[: width - 1] + "…"


def has_message(records: list[dict[str, Any]], session_id: str) -> bool:
    """A `message` for session_id that carries the model's answer ("Stub reply #N: …"), not
    just a peer notice (Hermes' "📬 No home channel…" on a fresh install, "⚠️ …" errors)."""
    return any(isinstance(r["body"], dict) and r["body"].get("status") == "message"
               and r["body"].get("session_id") == session_id
               and "Stub reply" in (r["body"].get("reply_text") or "") for r in records)


class SSEReader(threading.Thread):
    """Reads GET /v1/events?session_id=… (Hermes) into a list of events, bounded in time."""

    def __init__(self, peer: HermesPeer, session_id: str, duration: float, last_event_id: str | None = None):
        super().__init__(daemon=True, name="sse-reader")
        self.peer, self.session_id, self.duration, self.last_event_id = peer, session_id, duration, last_event_id
        self.events: list[dict[str, Any]] = []
        self.status: int | None = None
        self.error: str | None = None
        self.closed_by_server = False
        self.opened = threading.Event()
        self.stop_when: Any = None
        self.linger = 4.0

    def run(self) -> None:
        import http.client
        # the adapter sends a ": keep-alive" comment every 20 s, so 25 s never fires on a live stream
        conn = http.client.HTTPConnection("127.0.0.1", self.peer.port, timeout=25)
        self.deadline = time.monotonic() + self.duration
        finished = threading.Event()

        def watchdog() -> None:  # unblocks readline() at the deadline by shutting the socket
            while not finished.wait(0.2):
                if time.monotonic() >= self.deadline and conn.sock is not None:
                    try:
                        conn.sock.shutdown(socket.SHUT_RDWR)
                    except OSError:
                        pass
                    return

        threading.Thread(target=watchdog, daemon=True).start()
        try:
            path = self.peer.events_url(self.session_id).split(str(self.peer.port), 1)[1]
            headers = {"Authorization": f"Bearer {self.peer.token}", "Accept": "text/event-stream"}
            if self.last_event_id:
                headers["Last-Event-ID"] = self.last_event_id
            conn.request("GET", path, headers=headers)
            resp = conn.getresponse()
            self.status = resp.status
            self.opened.set()
            if resp.status != 200:
                self.error = resp.read().decode("utf-8", "replace")
                return
            ev: dict[str, Any] = {}
            t_start = time.monotonic()
            while time.monotonic() < self.deadline:
                line = resp.readline()  # de-chunks (the adapter answers with chunked encoding)
                if not line:
                    self.closed_by_server = time.monotonic() < self.deadline
                    return
                text = line.decode("utf-8", "replace").rstrip("\r\n")
                if text == "":
                    if ev:
                        ev["at"] = round(time.monotonic() - t_start, 3)
                        if "data" in ev:
                            try:
                                ev["json"] = json.loads(ev["data"])
                            except ValueError:
                                pass
                        self.events.append(ev)
                        if self.stop_when and self.stop_when(self.events):
                            # keep listening a little: does the server close the stream?
                            self.deadline = min(self.deadline, time.monotonic() + self.linger)
                    ev = {}
                elif text.startswith(":"):
                    ev.setdefault("comments", []).append(text)
                else:
                    key, _, val = text.partition(":")
                    ev[key] = (ev.get(key, "") + "\n" if key in ev else "") + val.lstrip(" ")
        except Exception as exc:  # noqa: BLE001
            if time.monotonic() < self.deadline:
                self.error = f"{type(exc).__name__}: {exc}"
        finally:
            finished.set()
            self.opened.set()
            conn.close()


def check(cond: bool, what: str, failures: list[str]) -> None:
    print(f"    [{'ok' if cond else 'FAIL'}] {what}")
    if not cond:
        failures.append(what)


def run_peer(kind: str, stub: StubModelServer, args: argparse.Namespace) -> dict[str, Any]:
    result: dict[str, Any] = {"peer": kind, "ok": False}
    failures: list[str] = []
    rx = CallbackReceiver().start()
    peer: Peer = make_peer(kind, stub.base_url)
    session = f"sw-smoke-{kind}-{uuid.uuid4().hex[:6]}"
    insights = f"insights:{session}"
    t_start = time.monotonic()
    print(f"\n=== {kind}: incoming {peer.base_url}  callback {rx.url}  model {stub.base_url}")
    try:
        peer.start()
        ready = peer.wait_ready(READY_TIMEOUT)
        result["ready_s"] = ready
        print(f"    ready after {ready:.1f}s (log {peer.log_path})")

        # 2. system_prelude on the insights session
        st, _, body = peer.send_incoming(system_prelude(
            insights, "Sales call with ACME. Reply with one short sentence, or none."))
        check(st == 202, f"system_prelude -> {st} {body}", failures)

        # 3. chat_message with callback
        t0 = time.monotonic()
        st, hdrs, body = peer.send_incoming(chat_message(session, "hello from the smoke test", rx.callback()))
        check(st == 202, f"chat_message -> {st} {body}", failures)
        got = rx.wait_for(lambda recs: has_message(recs, session), TURN_TIMEOUT)
        result["chat_message_s"] = round(time.monotonic() - t0, 2)
        check(got, f"`message` callback for {session} ({result['chat_message_s']}s)", failures)

        # 4. final transcript chunk on insights:<session>
        t0 = time.monotonic()
        st, _, body = peer.send_incoming(transcript_chunk(
            insights, "They said the budget is fifty thousand for Q3.", rx.callback()))
        check(st in (200, 202), f"transcript_chunk -> {st} {body}", failures)
        got = rx.wait_for(lambda recs: has_message(recs, insights), TURN_TIMEOUT)
        result["insights_message_s"] = round(time.monotonic() - t0, 2)
        check(got, f"`message` callback for {insights} ({result['insights_message_s']}s)", failures)
        prelude_seen = any("[Context: Sales call with ACME" in (r.get("last_user") or "")
                           for r in stub.requests)
        check(prelude_seen, "the prelude reached the model as [Context: …]", failures)

        # 5. Hermes: SSE fallback without a callback block
        if isinstance(peer, HermesPeer) and not args.no_sse:
            result["sse"] = sse_check(peer, failures)

        # let trailing callbacks (typing keepalives, completed) arrive before we stop
        time.sleep(args.settle)

        # 6. optional: restart mid-turn
        if args.restart:
            result["restart"] = restart_check(peer, rx, failures)
    except PeerError as exc:
        failures.append(f"peer error: {exc}")
        print(f"    [FAIL] {exc}")
    except Exception as exc:  # noqa: BLE001
        failures.append(f"{type(exc).__name__}: {exc}")
        traceback.print_exc()
    finally:
        rc = peer.stop()
        result["exit_code"] = rc
        result["total_s"] = round(time.monotonic() - t_start, 1)
        recs = rx.snapshot()
        print(f"    callbacks received ({len(recs)}):")
        for r in recs:
            flag = "" if r["auth_ok"] else " (BAD AUTH)"
            print(f"      {r['at']:7.3f} {r['answered']} {short(r['body'])}{flag}")
        result["callbacks"] = [{"at": r["at"], "body": r["body"]} for r in recs]
        if args.dump_logs or failures:
            print(peer.dump_logs(60 if not args.dump_logs else 400))
        result["log_paths"] = [str(p) for p in peer.log_paths()]
        result["failures"] = failures
        result["ok"] = not failures
        rx.stop()
        if args.keep:
            print(f"    kept {peer.workdir}")
        else:
            peer.close()
    return result


def sse_check(peer: HermesPeer, failures: list[str]) -> dict[str, Any]:
    session = f"sw-smoke-sse-{uuid.uuid4().hex[:6]}"
    reader = SSEReader(peer, session, duration=TURN_TIMEOUT)

    def done(evs: list[dict[str, Any]]) -> bool:
        return any((e.get("json") or {}).get("status") == "message"
                   and "Stub reply" in ((e.get("json") or {}).get("reply_text") or "") for e in evs)

    reader.stop_when = done
    reader.start()
    reader.opened.wait(10)
    st, _, body = peer.send_incoming(chat_message(session, "hello over SSE", None))
    check(st == 202, f"chat_message without callback -> {st} {body}", failures)
    reader.join(TURN_TIMEOUT + 5)
    evs = reader.events
    print(f"    GET /v1/events?session_id={session}: HTTP {reader.status}, {len(evs)} events"
          f"{', closed by server' if reader.closed_by_server else ''}{', ' + reader.error if reader.error else ''}")
    for e in evs:
        j = e.get("json")
        print(f"      {e['at']:7.3f} id={e.get('id', '-'):>4} event={e.get('event', 'message'):8} "
              f"{short(j) if j is not None else e.get('comments')}")
    got_msg = done(evs)
    check(reader.status == 200 and got_msg, "SSE /v1/events delivered a `message`", failures)
    # replay: reconnect from the first durable id and see what comes back
    replay: list[dict[str, Any]] = []
    first_id = next((e["id"] for e in evs if e.get("id")), None)
    if first_id:
        r2 = SSEReader(peer, session, duration=3, last_event_id=first_id)
        r2.start()
        r2.join(8)
        replay = r2.events
        print(f"    reconnect with Last-Event-ID={first_id}: {len(replay)} events replayed "
              f"({[(e.get('id'), (e.get('json') or {}).get('status')) for e in replay]})")
    return {"status": reader.status, "events": [{k: v for k, v in e.items() if k != 'data'} for e in evs],
            "closed_by_server": reader.closed_by_server,
            "replay_after_first": [(e.get("id"), (e.get("json") or {}).get("status")) for e in replay]}


def restart_check(peer: Peer, rx: CallbackReceiver, failures: list[str]) -> dict[str, Any]:
    session = f"sw-smoke-restart-{uuid.uuid4().hex[:6]}"
    n0 = len(rx.snapshot())
    st, _, _ = peer.send_incoming(chat_message(session, "#slowtool slow one before a restart", rx.callback()))
    check(st == 202, "slow turn accepted", failures)
    time.sleep(3)
    t0 = time.monotonic()
    rc = peer.stop()
    stop_s = round(time.monotonic() - t0, 2)
    peer.start()
    ready = peer.wait_ready(READY_TIMEOUT)
    print(f"    restarted mid-turn: stop took {stop_s}s (rc={rc}), ready again after {ready:.1f}s")
    st, _, _ = peer.send_incoming(chat_message(session, "after the restart", rx.callback()))
    got = rx.wait_for(lambda recs: any(
        isinstance(r["body"], dict) and r["body"].get("status") == "message"
        and "after the restart" in (r["body"].get("reply_text") or "") for r in recs[n0:]), TURN_TIMEOUT)
    check(got, "a turn after the restart delivered its `message`", failures)
    return {"stop_s": stop_s, "rc": rc, "ready_s": ready}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--peers", default="hermes,openclaw",
                    help="comma list of: hermes, hermes-fresh, hermes-streaming, openclaw")
    ap.add_argument("--no-sse", action="store_true", help="skip the Hermes /v1/events check")
    ap.add_argument("--restart", action="store_true", help="also restart each peer mid-turn")
    ap.add_argument("--settle", type=float, default=3.0, help="seconds to wait for trailing callbacks")
    ap.add_argument("--dump-logs", action="store_true")
    ap.add_argument("--keep", action="store_true", help="keep the peers' temp dirs")
    ap.add_argument("--json", help="write the results (with every callback) to this file")
    args = ap.parse_args()

    ensure_netns()
    assert_loopback_only()
    missing = [k for k in args.peers.split(",")
               if not (HermesPeer.installed() if k.startswith("hermes") else OpenClawPeer.installed())]
    if missing:
        print(f"not installed: {missing}; run tests/interop/install_peers.sh", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    stub = StubModelServer().start()
    results = []
    try:
        for kind in [k.strip() for k in args.peers.split(",") if k.strip()]:
            results.append(run_peer(kind, stub, args))
    finally:
        stub.stop()
    total = round(time.monotonic() - t0, 1)
    print("\n=== summary")
    for r in results:
        print(f"    {r['peer']:16} {'PASS' if r['ok'] else 'FAIL'}  ready {r.get('ready_s')}s, "
              f"chat {r.get('chat_message_s')}s, insights {r.get('insights_message_s')}s, "
              f"total {r.get('total_s')}s, exit {r.get('exit_code')}"
              + ("" if r["ok"] else f"  failures: {r['failures']}"))
    print(f"    wall time {total}s")
    if args.json:
        Path(args.json).write_text(json.dumps({"total_s": total, "results": results}, indent=2,
                                              ensure_ascii=False))
    passed = sum(r["ok"] for r in results)
    print(f"{passed} passed, {len(results) - passed} failed")
    return 0 if passed == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
