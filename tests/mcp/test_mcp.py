"""Black-box tests of the app's MCP server with a real MCP client (the official Python SDK).

Starts the real headless binary on a fresh data dir, seeds calls through the real control API
and callback listener (HTTP on loopback), then talks MCP (Streamable HTTP) to `/mcp`:
initialize, the tool list, each tool, bad input, the token (missing, wrong, rotated), the switch
(off: refused) and private calls (never returned), the access log and the prelude sent to the
assistant. Run with tests/mcp/run.sh; ends with `N passed, M failed`.
"""

import asyncio
import http.server
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.error
import urllib.request
import uuid

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

BIN = os.environ.get("STAGEWHISPER_BIN") or os.path.join(
    os.path.dirname(__file__), "..", "..", "target", "debug", "stagewhisper-headless")
TOOLS = {"list_calls", "search_calls", "get_transcript", "get_call", "current_call"}


class App:
    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="sw-mcp-")
        self.proc = subprocess.Popen([BIN, "--data-dir", self.dir], stdout=subprocess.PIPE,
                                     stderr=open(os.path.join(self.dir, "log"), "w"),
                                     env={**os.environ, "RUST_LOG": "warn"})
        ready = json.loads(self.proc.stdout.readline())
        self.ui = ready["ui_url"].rstrip("/")
        self.ui_token = ready["ui_token"]
        self.cb = ready["callback_url"].rstrip("/")
        self.cb_token = ready["callback_token"]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(10)

    def raw(self, method, url, body=None, token=None, headers=None):
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, r.read()
        except urllib.error.HTTPError as e:
            return e.code, e.read()

    def api(self, method, path, body=None):
        status, raw = self.raw(method, self.ui + path, body, self.ui_token)
        return status, (json.loads(raw) if raw else None)

    def callback(self, session_id, text):
        task = str(uuid.uuid4())
        status, raw = self.raw("POST", f"{self.cb}/tasks/{task}", {
            "task_id": task, "session_id": session_id, "status": "message",
            "message_id": f"m-{task}", "reply_text": text, "error_code": None,
            "error_message": None, "model": None}, self.cb_token,
            {"Content-Type": "application/json"})
        assert status == 200, (status, raw)

    def mcp_view(self):
        status, v = self.api("GET", "/api/mcp")
        assert status == 200, v
        return v


def rpc(app, token, body, headers=None):
    """One raw JSON-RPC POST to /mcp (for what a client library would not send)."""
    h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
         **(headers or {})}
    return app.raw("POST", app.ui + "/mcp", body, token, h)


async def with_session(url, token, fn):
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                  timeout=30) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as s:
                init = await s.initialize()
                return await fn(s, init)


def data(result):
    """A tool result's structured content, checked equal to its JSON text content."""
    assert not result.is_error, result
    text = json.loads(result.content[0].text)
    assert result.structured_content == text, (result.structured_content, text)
    return text


async def refused(s, tool, args, code):
    try:
        r = await s.call_tool(tool, args)
    except MCPError as e:
        assert e.error.data and e.error.data.get("error") == code, (tool, args, e.error)
        return e.error.message
    raise AssertionError(f"{tool} {args}: no JSON-RPC error, got {r}")


class Prelude(http.server.BaseHTTPRequestHandler):
    """The assistant's side of the `incoming` kind: keeps what the app sends."""
    got = []

    def do_POST(self):
        n = int(self.headers.get("Content-Length", 0))
        body = self.rfile.read(n)
        Prelude.got.append(json.loads(body) if body.strip() else {})
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"ok":true}')

    def log_message(self, *a):
        pass


def seed(app):
    """Acme (ended: transcript, insight, chat, summary), Globex (private), Initech (live)."""
    s = {}
    for title in ["Acme renewal", "Globex secrets", "Initech kickoff"]:
        status, v = app.api("POST", "/api/calls", {"title": title})
        assert status == 201, v
        s[title.split()[0]] = v["session_id"]
    acme, globex, initech = s["Acme"], s["Globex"], s["Initech"]
    turns = [("Dana", "We agreed on a price of 42 walruses per seat."),
             ("Sam", "And the renewal starts in March."),
             ("Dana", "I will send the contract on Friday.")]
    for speaker, text in turns:
        status, v = app.api("POST", f"/api/calls/{acme}/transcript", {"speaker": speaker, "text": text})
        assert status in (200, 201), v
    app.callback(f"insights:{acme}", "Ask who signs the renewal.")
    status, v = app.api("POST", f"/api/sessions/{acme}/messages", {"text": "What did Dana promise?"})
    assert status == 201, v
    status, v = app.api("POST", f"/api/calls/{acme}/summarise")
    assert status in (200, 201), v
    app.callback(acme, "- Price: 42 walruses per seat\n- Dana sends the contract on Friday")
    status, v = app.api("POST", f"/api/calls/{acme}/end")
    assert status == 200, v
    status, v = app.api("POST", f"/api/calls/{globex}/transcript",
                        {"speaker": "Eve", "text": "The walruses budget is secret."})
    assert status in (200, 201), v
    status, v = app.api("PUT", f"/api/calls/{globex}", {"private": True})
    assert status == 200 and v["private"] is True, v
    app.api("POST", f"/api/calls/{globex}/end")
    for i in range(5):
        app.api("POST", f"/api/calls/{initech}/transcript",
                {"speaker": "Ana" if i % 2 else "Bo", "text": f"kickoff point number {i}"})
    return acme, globex, initech


def run_tests(app, ids):
    acme, globex, initech = ids
    results = []

    def check(name, fn):
        try:
            fn()
            results.append((name, None))
            print(f"ok   {name}", flush=True)
        except Exception:
            results.append((name, traceback.format_exc()))
            print(f"FAIL {name}\n{traceback.format_exc()}", flush=True)

    def off_is_404():
        v = app.mcp_view()
        assert v["enabled"] is False and v["url"] == app.ui + "/mcp", v
        assert len(v["token"]) >= 40 and v["token"] not in (app.ui_token, app.cb_token)
        for token in (None, v["token"], "wrong"):
            status, body = rpc(app, token, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            assert status == 404 and json.loads(body)["error"] == "mcp_off", (status, body)
        status, on = app.api("PUT", "/api/mcp", {"enabled": True})
        assert status == 200 and on["enabled"] is True, on
        saved = json.load(open(os.path.join(app.dir, "settings.json")))
        assert saved["sections"]["mcp"]["value"]["enabled"] is True, saved
        assert oct(os.stat(os.path.join(app.dir, "mcp_token")).st_mode & 0o777) == "0o600"
        status, v = app.api("PUT", "/api/mcp", {"enabled": "yes"})
        assert status == 400 and v["error"] == "invalid_field", v

    def token_is_required():
        for token in (None, "wrong", app.ui_token, app.cb_token):
            status, body = rpc(app, token, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
            v = json.loads(body)
            assert status == 401 and v == {"ok": False, "error": "unauthorized",
                                           "message": "missing or wrong MCP token"}, (status, body)
        # Host and Origin: the control API's rules.
        token = app.mcp_view()["token"]
        status, _ = rpc(app, token, {}, {"Host": "evil.example"})
        assert status == 403, status
        status, _ = rpc(app, token, {}, {"Origin": "http://evil.example"})
        assert status == 403, status

    token = app.mcp_view()["token"]
    url = app.mcp_view()["url"]

    def session(fn):
        return asyncio.run(with_session(url, app.mcp_view()["token"], fn))

    def initialize_and_list():
        async def go(s, init):
            assert init.server_info.name == "stagewhisper", init
            assert "search_calls" in (init.instructions or "")
            tools = (await s.list_tools()).tools
            assert {t.name for t in tools} == TOOLS, tools
            for t in tools:
                assert len(t.description) > 60 and t.input_schema["type"] == "object", t
                assert t.output_schema and t.annotations.read_only_hint is True, t
            props = {t.name: set(t.input_schema.get("properties", {})) for t in tools}
            assert props["list_calls"] == {"query", "since", "until", "limit"}, props
            assert props["get_transcript"] == {"call_id", "from_ms", "to_ms", "limit"}, props
            assert next(t for t in tools if t.name == "search_calls").input_schema["required"] == ["query"]
        session(go)

    def list_calls():
        async def go(s, _):
            v = data(await s.call_tool("list_calls", {}))
            got = [c["call_id"] for c in v["calls"]]
            assert got == [initech, acme], v
            a = v["calls"][1]
            assert a["title"] == "Acme renewal" and a["is_call"] and a["ended_at"], a
            assert a["started_at"].endswith("Z") and "T" in a["started_at"], a
            assert sorted(a["speakers"]) == ["Dana", "Sam"], a
            assert a["summary"] == "Price: 42 walruses per seat", a
            assert a["duration_s"] is not None and v["calls"][0]["ended_at"] is None
            v = data(await s.call_tool("list_calls", {"query": "RENEWAL acme"}))
            assert [c["call_id"] for c in v["calls"]] == [acme], v
            v = data(await s.call_tool("list_calls", {"limit": 1}))
            assert len(v["calls"]) == 1 and v["more"] is True, v
            v = data(await s.call_tool("list_calls", {"since": "2999-01-01"}))
            assert v["calls"] == [], v
            v = data(await s.call_tool("list_calls", {"until": "2000-01-01T00:00:00Z"}))
            assert v["calls"] == [], v
            await refused(s, "list_calls", {"limit": 0}, "invalid_limit")
            await refused(s, "list_calls", {"since": "last tuesday"}, "invalid_time")
        session(go)

    def search_calls():
        async def go(s, _):
            v = data(await s.call_tool("search_calls", {"query": "walruses"}))
            hits = v["results"]
            assert hits and all(h["call_id"] == acme for h in hits), hits
            said = [h for h in hits if h["kind"] == "transcript"]
            assert said[0]["speaker"] == "Dana" and "**walruses**" in said[0]["text"], said
            assert said[0]["title"] == "Acme renewal" and said[0]["time"].endswith("Z")
            kinds = {h["kind"] for h in hits}
            assert kinds == {"transcript", "chat"}, hits
            v = data(await s.call_tool("search_calls", {"query": '"send the contract" OR nothinglikethis'}))
            said = [h["speaker"] for h in v["results"] if h["kind"] == "transcript"]
            assert said == ["Dana"], v
            v = data(await s.call_tool("search_calls", {"query": "signs"}))
            assert v["results"][0]["kind"] == "insight", v
            v = data(await s.call_tool("search_calls", {"query": "walruses", "limit": 1}))
            assert len(v["results"]) == 1 and v["more"] is True, v
            msg = await refused(s, "search_calls", {"query": '"unterminated'}, "invalid_query")
            assert "could not be parsed" in msg, msg
            await refused(s, "search_calls", {"query": " ?! "}, "empty_query")
            await refused(s, "search_calls", {"query": "x" * 501}, "query_too_long")
        session(go)

    def get_transcript():
        async def go(s, _):
            v = data(await s.call_tool("get_transcript", {"call_id": acme}))
            assert [(t["speaker"], t["text"]) for t in v["turns"]] == [
                ("Dana", "We agreed on a price of 42 walruses per seat."),
                ("Sam", "And the renewal starts in March."),
                ("Dana", "I will send the contract on Friday.")], v
            assert v["more"] is False and v["title"] == "Acme renewal"
            offsets = [t["offset_ms"] for t in v["turns"]]
            assert offsets == sorted(offsets), offsets
            page = data(await s.call_tool("get_transcript", {"call_id": acme, "limit": 2}))
            assert len(page["turns"]) == 2 and page["more"] is True, page
            rest = data(await s.call_tool("get_transcript", {
                "call_id": acme, "from_ms": page["next_from_ms"]}))
            assert [t["text"] for t in rest["turns"]] == ["I will send the contract on Friday."], rest
            window = data(await s.call_tool("get_transcript", {
                "call_id": acme, "from_ms": 0, "to_ms": offsets[1]}))
            assert len(window["turns"]) == 1, window
            await refused(s, "get_transcript", {"call_id": "no-such-call"}, "call_not_found")
            await refused(s, "get_transcript", {"call_id": acme, "from_ms": -1}, "invalid_range")
        session(go)

    def get_call():
        async def go(s, _):
            v = data(await s.call_tool("get_call", {"call_id": acme}))
            assert v["call_id"] == acme and v["title"] == "Acme renewal", v
            assert "42 walruses" in v["summary_text"], v
            assert [i["text"] for i in v["insights"]] == ["Ask who signs the renewal."], v
            assert v["insights"][0]["speaker"] == "assistant"
            texts = [m["text"] for m in v["chat"]]
            assert "What did Dana promise?" in texts and v["chat"][0]["speaker"] == "user", v
            assert v["chat_total"] == len(v["chat"]) and v["transcript_turns"] == 3, v
        session(go)

    def current_call():
        async def go(s, _):
            v = data(await s.call_tool("current_call", {}))
            c = v["call"]
            assert c["call_id"] == initech and c["title"] == "Initech kickoff", v
            assert [t["text"] for t in c["turns"]] == [f"kickoff point number {i}" for i in range(5)]
            v = data(await s.call_tool("current_call", {"limit": 2}))
            assert [t["text"] for t in v["call"]["turns"]] == ["kickoff point number 3",
                                                              "kickoff point number 4"], v
            assert v["call"]["turns_total"] == 5
        session(go)

    def bad_input():
        async def go(s, _):
            for tool, args in [("get_call", {"call_id": 5}), ("get_call", {}),
                               ("search_calls", {}), ("list_calls", {"limit": "ten"}),
                               ("get_transcript", {"call_id": acme, "from_ms": "x"})]:
                msg = await refused(s, tool, args, "invalid_arguments")
                assert tool in msg, msg
            try:
                await s.call_tool("drop_tables", {})
                raise AssertionError("an unknown tool was answered")
            except MCPError:
                pass
        session(go)
        status, body = rpc(app, app.mcp_view()["token"], b"{" + b" " * 100_000 + b"}")
        v = json.loads(body)
        assert status == 413 and v["error"]["code"] == -32600 and "KiB" in v["error"]["message"], (status, v)
        status, body = rpc(app, app.mcp_view()["token"], b"not json")
        assert status < 500, (status, body)

    def private_calls_hidden():
        async def go(s, _):
            for args in [{"query": "secret"}, {"query": "walruses", "limit": 50}, {"query": "Eve"}]:
                v = data(await s.call_tool("search_calls", args))
                assert all(h["call_id"] != globex for h in v["results"]), v
            v = data(await s.call_tool("list_calls", {"limit": 50}))
            assert globex not in [c["call_id"] for c in v["calls"]], v
            for tool in ("get_call", "get_transcript"):
                await refused(s, tool, {"call_id": globex}, "call_not_found")
            status, _ = app.api("PUT", f"/api/calls/{initech}", {"private": True})
            assert status == 200
            v = data(await s.call_tool("current_call", {}))
            assert v["call"] is None, v
            status, _ = app.api("PUT", f"/api/calls/{initech}", {"private": False})
            assert status == 200
            v = data(await s.call_tool("current_call", {}))
            assert v["call"]["call_id"] == initech, v
        session(go)
        status, v = app.api("PUT", "/api/calls/nope", {"private": True})
        assert status == 404 and v["error"] == "session_not_found", v
        status, v = app.api("PUT", f"/api/calls/{acme}", {})
        assert status == 400 and v["error"] == "missing_field", v

    def access_log():
        status, v = app.api("GET", f"/api/sessions/{acme}/mcp-reads")
        assert status == 200 and v["private"] is False, v
        tools = {r["tool"] for r in v["reads"]}
        assert tools == TOOLS - {"current_call"}, tools
        assert all(r["title"] == "Acme renewal" and r["at"].endswith("Z") for r in v["reads"])
        status, v = app.api("GET", f"/api/sessions/{globex}/mcp-reads")
        assert status == 200 and v["private"] is True and v["reads"] == [], v
        status, v = app.api("GET", "/api/mcp/activity?limit=5")
        assert status == 200 and len(v) == 5, v
        status, v = app.api("GET", "/api/mcp/activity?limit=0")
        assert status == 400 and v["error"] == "invalid_limit", v

    def rotation():
        old = app.mcp_view()["token"]
        status, v = app.api("POST", "/api/mcp/token")
        assert status == 200 and v["token"] != old and v["enabled"] is True, v
        status, _ = rpc(app, old, {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert status == 401, status
        assert open(os.path.join(app.dir, "mcp_token")).read().strip() == v["token"]
        session(lambda s, _: s.list_tools())

    def prelude_names_the_tools():
        srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Prelude)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        try:
            status, v = app.api("PUT", "/api/assistant", {
                "base_url": f"http://127.0.0.1:{srv.server_port}",
                "relay_token": "0123456789abcdef0123"})
            assert status == 200, v
            app.api("POST", "/api/calls", {"title": "Prelude check"})
            deadline = time.time() + 15
            while time.time() < deadline and not any(
                    g.get("event_type") == "system_prelude" or "prelude" in json.dumps(g)
                    for g in Prelude.got):
                time.sleep(0.2)
            text = json.dumps(Prelude.got)
            assert url in text and "search_calls" in text, text[:2000]
            assert app.mcp_view()["token"] not in text
        finally:
            srv.shutdown()
            app.api("DELETE", "/api/assistant")

    def off_again_refuses():
        status, v = app.api("PUT", "/api/mcp", {"enabled": False})
        assert status == 200 and v["enabled"] is False
        status, _ = rpc(app, app.mcp_view()["token"], {"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        assert status == 404, status

    for name, fn in [("off_is_404", off_is_404), ("token_is_required", token_is_required),
                     ("initialize_and_list", initialize_and_list), ("list_calls", list_calls),
                     ("search_calls", search_calls), ("get_transcript", get_transcript),
                     ("get_call", get_call), ("current_call", current_call),
                     ("bad_input", bad_input), ("private_calls_hidden", private_calls_hidden),
                     ("access_log", access_log), ("rotation", rotation),
                     ("prelude_names_the_tools", prelude_names_the_tools),
                     ("off_again_refuses", off_again_refuses)]:
        check(name, fn)
    return results


def main():
    app = App()
    try:
        ids = seed(app)
        results = run_tests(app, ids)
    finally:
        app.stop()
    failed = [n for n, e in results if e]
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
