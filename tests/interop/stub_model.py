#!/usr/bin/env python3
"""A tiny, deterministic OpenAI-compatible model server for the interop harness.

Python stdlib only. Listens on 127.0.0.1 (never anything else).

Endpoints
  GET  /v1/models                 -> one model, "stub-model" (also /models)
  GET  /v1/models/<id>            -> that model
  POST /v1/chat/completions       -> with or without "stream": true (also /chat/completions)
  GET  /_stub/requests            -> every chat request seen so far (JSON list, for assertions)
  POST /_stub/reset               -> clear the request log and the reply counter
  GET  /health                    -> {"ok": true}

Replies are "Stub reply #N: <last user text>", N counting every chat completion request
(agents make extra calls, so N grows by more than one per turn). When the conversation's
last message is a tool result the reply is "Stub reply #N: tool result received".
The user text is the last user message with the peers' wrapping removed (OpenClaw's
"[<time>] **Chat message in session …**" task envelope, a leading "[Context: …]" block =
the StageWhisper system_prelude, Hermes' trailing "[System note: …]") and whitespace
collapsed; see `user_text()`. The raw text is kept in the request log (`last_user`).

Markers in the last user message switch behaviour:
  #fail      HTTP 500 for every call of that turn
  #empty     empty assistant content (finish_reason "stop")
  #slow      tokens are slow: STUB_SLOW_TOKEN_DELAY (0.4 s) between streamed words; a
             non-streamed reply waits the same total time
  #tool      first a tool call to a tool the agent offered (skills_list, session_status,
             ... whatever is there), then, once the tool result is in, text
  #slowtool  like #tool, but the final answer takes STUB_SLOWTOOL_DELAY (8 s)
  #long      a ~1.5 kB reply (streamed word by word)
  #recall W  a call to the offered tool whose name ends in `search_calls` (an MCP server's, e.g.
             the app's past calls) with {"query": "W"}; once its result is in, the answer
             quotes every passage of that result that contains W (see `recall_reply()`)

Usage
  python3 stub_model.py [--port 0] [--log requests.jsonl]
prints one JSON line {"event":"ready","port":P,"base_url":"http://127.0.0.1:P/v1"} on stdout.
Or in-process: `srv = StubModelServer(); srv.start(); ...; srv.stop()`.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import signal
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL_ID = "stub-model"
SLOW_TOKEN_DELAY = float(os.environ.get("STUB_SLOW_TOKEN_DELAY", "0.4"))
SLOWTOOL_DELAY = float(os.environ.get("STUB_SLOWTOOL_DELAY", "8"))
FAST_TOKEN_DELAY = float(os.environ.get("STUB_TOKEN_DELAY", "0.05"))
# Tools we prefer to call for #tool / #slowtool: read-only, argument-free ones.
PREFERRED_TOOLS = (
    "skills_list",  # Hermes
    "session_status",  # OpenClaw
    "sessions_list",
    "agents_list",
    "memory_search",
)
LONG_TEXT = " ".join(
    f"Point {i}: the stub model keeps talking so that the reply is long enough to stream in many parts."
    for i in range(1, 17)
)

_CONTEXT_RE = re.compile(r"^\s*\[Context:.*?\]\s*", re.S)
# Hermes adds one-off notes around the user's text ("[System note: ...]", e.g. on the first
# message ever, or after a restart interrupted the previous turn).
_SYSTEM_NOTE_RE = re.compile(r"\s*\[System note:.*?\](?=\s*\n\n|\s*$)\s*", re.S)
# OpenClaw wraps the text: "[Sun 2026-11-29 14:31 UTC] **Chat message in session S**\n\n<text>
# \n\nContext: <text>\n\nAction type: chat_message\nStageWhisper task: <id>\nSession: S"
_ENVELOPE_RE = re.compile(r"^\s*\[[A-Z][a-z]{2} \d{4}-\d{2}-\d{2} \d{2}:\d{2}[^\]\n]*\]\s*")
_OPENCLAW_TASK_RE = re.compile(
    r"^\*\*[^\n]*\*\*\n\n(?P<body>.*?)(?:\n\nContext: .*?)?\n\nAction type: ", re.S)


def message_text(msg: dict[str, Any]) -> str:
    content = msg.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, str):
                parts.append(part)
        return "\n".join(parts)
    return ""


# OpenClaw 2026.9.x adds its own runtime context as a user message of its own, after the user's
# words; a message that is only such blocks is not what the user typed.
_INTERNAL_CONTEXT_RE = re.compile(
    r"<<<BEGIN_OPENCLAW_INTERNAL_CONTEXT>>>.*?(<<<END_OPENCLAW_INTERNAL_CONTEXT>>>|\Z)", re.S
)


def last_user_message(messages: list[dict[str, Any]]) -> str:
    """The newest user message with words of its own (OpenClaw's internal-context blocks
    removed); the newest user message as it is when every one is only such blocks."""
    fallback = None
    for msg in reversed(messages):
        if msg.get("role") == "user":
            text = message_text(msg)
            if fallback is None:
                fallback = text
            own = _INTERNAL_CONTEXT_RE.sub("", text).strip()
            if own:
                return own
    return fallback or ""


def user_text(raw: str) -> str:
    """The text the stub echoes: prelude block and sidecar notes removed, whitespace collapsed,
    at most 300 chars."""
    text = _ENVELOPE_RE.sub("", raw, count=1)
    m = _OPENCLAW_TASK_RE.match(text)
    if m:
        text = m.group("body")
    text = _CONTEXT_RE.sub("", text, count=1)
    text = _SYSTEM_NOTE_RE.sub(" ", text)
    text = " ".join(text.split())
    return text[:300]


def pick_tool(tools: list[dict[str, Any]] | None) -> str | None:
    names = []
    for tool in tools or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        name = (fn or {}).get("name") or (tool.get("name") if isinstance(tool, dict) else None)
        if isinstance(name, str):
            names.append((name, fn or tool))
    if not names:
        return None
    by_name = dict(names)
    for preferred in PREFERRED_TOOLS:
        if preferred in by_name:
            return preferred
    for name, spec in names:  # first tool without required parameters
        params = spec.get("parameters") or {}
        if not params.get("required"):
            return name
    return names[0][0]


class Plan:
    """What to answer to one chat request."""

    def __init__(self, kind: str, text: str = "", tool: str | None = None,
                 delay_before: float = 0.0, token_delay: float = FAST_TOKEN_DELAY,
                 args: dict[str, Any] | None = None):
        self.kind = kind  # "text" | "tool" | "fail"
        self.text = text
        self.tool = tool
        self.args = args or {}
        self.delay_before = delay_before
        self.token_delay = token_delay


class StubState:
    def __init__(self, log_path: str | None = None):
        self.lock = threading.Lock()
        self.counter = 0
        self.requests: list[dict[str, Any]] = []
        self.log_path = log_path

    def record(self, body: dict[str, Any], plan: Plan, n: int) -> None:
        entry = {
            "n": n,
            "at": time.time(),
            "stream": bool(body.get("stream")),
            "model": body.get("model"),
            "last_user": last_user_message(body.get("messages") or []),
            "last_role": ((body.get("messages") or [{}])[-1] or {}).get("role"),
            "n_messages": len(body.get("messages") or []),
            "n_tools": len(body.get("tools") or []),
            "tool_result": (message_text((body.get("messages") or [{}])[-1] or {})[:2000]
                            if ((body.get("messages") or [{}])[-1] or {}).get("role") == "tool"
                            else None),
            "plan": plan.kind,
            "reply": plan.text,
            "tool": plan.tool,
        }
        with self.lock:
            self.requests.append(entry)
            if self.log_path:
                with open(self.log_path, "a", encoding="utf-8") as fh:
                    fh.write(json.dumps(entry, ensure_ascii=False) + "\n")

    def next_n(self) -> int:
        with self.lock:
            self.counter += 1
            return self.counter

    def plan(self, body: dict[str, Any]) -> tuple[Plan, int]:
        n = self.next_n()
        messages = body.get("messages") or []
        raw_user = last_user_message(messages)
        last_role = (messages[-1] or {}).get("role") if messages else None
        low = raw_user.lower()
        recall = _RECALL_RE.search(raw_user)
        if "#fail" in low:
            plan = Plan("fail")
        elif recall:
            plan = recall_plan(n, recall.group(1), body, messages, last_role)
        elif last_role == "tool":
            delay = SLOWTOOL_DELAY if "#slowtool" in low else 0.0
            plan = Plan("text", f"Stub reply #{n}: tool result received", delay_before=delay)
        elif ("#slowtool" in low or "#tool" in low) and pick_tool(body.get("tools")):
            plan = Plan("tool", tool=pick_tool(body.get("tools")))
        elif "#empty" in low:
            plan = Plan("text", "")
        elif "#long" in low:
            plan = Plan("text", f"Stub reply #{n}: {LONG_TEXT}")
        elif "#slow" in low:
            plan = Plan("text", f"Stub reply #{n}: {user_text(raw_user)}", token_delay=SLOW_TOKEN_DELAY)
        else:
            plan = Plan("text", f"Stub reply #{n}: {user_text(raw_user)}")
        self.record(body, plan, n)
        return plan, n


_RECALL_RE = re.compile(r"#recall\s+([^\s#]+)")


def tool_names(tools: list[dict[str, Any]] | None) -> list[str]:
    out = []
    for tool in tools or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        name = (fn or {}).get("name") or (tool.get("name") if isinstance(tool, dict) else None)
        if isinstance(name, str):
            out.append(name)
    return out


def _strings(value: Any) -> list[str]:
    """Every string in a JSON value, strings that are JSON themselves (or hold a JSON object
    inside other text, as Hermes' `<untrusted_tool_result …>` wrapping does) opened too."""
    if isinstance(value, str):
        start, end = value.find("{"), value.rfind("}")
        for candidate in (value, value[start:end + 1] if 0 <= start < end else None):
            if candidate is None:
                continue
            try:
                inner = json.loads(candidate)
            except ValueError:
                continue
            if isinstance(inner, (dict, list)):
                return _strings(inner)
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def recall_reply(n: int, word: str, tool_result: str) -> str:
    """Quotes each passage of the tool's result that contains `word` (not the question itself,
    which carries the #recall marker, nor the query echoed alone), once, in order; says so when
    there is none."""
    seen: list[str] = []
    for s in _strings(tool_result):
        text = " ".join(s.split())
        if (word.lower() in text.lower() and text.lower() != word.lower()
                and "#recall" not in text and text not in seen):
            seen.append(text)
    if not seen:
        return f"Stub reply #{n}: recalled nothing about {word}"
    return f"Stub reply #{n}: recalled: " + " | ".join(seen)[:600]


def recall_plan(n: int, word: str, body: dict[str, Any], messages: list[dict[str, Any]],
                last_role: str | None) -> Plan:
    if last_role == "tool":
        return Plan("text", recall_reply(n, word, message_text(messages[-1])))
    search = next((t for t in tool_names(body.get("tools")) if t.endswith("search_calls")), None)
    if search is None:
        return Plan("text", f"Stub reply #{n}: no search_calls tool was offered")
    return Plan("tool", tool=search, args={"query": word})


def words(text: str) -> list[str]:
    """Split into stream tokens that concatenate back to `text` exactly."""
    return re.findall(r"\S+\s*|\s+", text) or ([text] if text else [])


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "StubModel/1.0"
    state: StubState  # set on the server class

    def log_message(self, fmt: str, *args: Any) -> None:  # quiet; requests go to the log
        if os.environ.get("STUB_VERBOSE"):
            sys.stderr.write("stub_model: " + (fmt % args) + "\n")

    # -- helpers --------------------------------------------------------------
    def _json(self, status: int, obj: Any) -> None:
        data = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _read_json(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        return json.loads(raw or b"{}")

    @staticmethod
    def _model_obj() -> dict[str, Any]:
        return {"id": MODEL_ID, "object": "model", "created": 0, "owned_by": "stub",
                "context_length": 131072, "max_model_len": 131072}

    # -- routes ---------------------------------------------------------------
    def do_GET(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0].rstrip("/")
        st = self.server.state  # type: ignore[attr-defined]
        if path in ("/v1/models", "/models"):
            self._json(200, {"object": "list", "data": [self._model_obj()]})
        elif path.startswith("/v1/models/") or path.startswith("/models/"):
            self._json(200, dict(self._model_obj(), id=path.rsplit("/", 1)[1]))
        elif path in ("/health", "/v1/health", "/_stub/health"):
            self._json(200, {"ok": True})
        elif path == "/_stub/requests":
            with st.lock:
                self._json(200, list(st.requests))
        else:
            self._json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})

    def do_POST(self) -> None:  # noqa: N802
        path = self.path.split("?", 1)[0].rstrip("/")
        st = self.server.state  # type: ignore[attr-defined]
        if path == "/_stub/reset":
            self._read_json()
            with st.lock:
                st.requests.clear()
                st.counter = 0
            self._json(200, {"ok": True})
            return
        if path not in ("/v1/chat/completions", "/chat/completions"):
            self._read_json()
            self._json(404, {"error": {"message": f"no route {path}", "type": "not_found"}})
            return
        try:
            body = self._read_json()
        except (ValueError, UnicodeDecodeError):
            self._json(400, {"error": {"message": "invalid json", "type": "invalid_request_error"}})
            return
        plan, n = st.plan(body)
        if plan.kind == "fail":
            self._json(500, {"error": {"message": "stub model: #fail marker", "type": "server_error",
                                       "code": "stub_fail"}})
            return
        if plan.delay_before:
            time.sleep(plan.delay_before)
        model = body.get("model") or MODEL_ID
        cid = f"chatcmpl-stub-{n}"
        if body.get("stream"):
            self._stream(plan, cid, model, body)
        else:
            if plan.kind == "text" and plan.token_delay > FAST_TOKEN_DELAY:
                time.sleep(plan.token_delay * max(1, len(words(plan.text)) - 1))
            self._json(200, self._completion(plan, cid, model, n))

    # -- bodies ---------------------------------------------------------------
    @staticmethod
    def _usage() -> dict[str, int]:
        return {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}

    def _completion(self, plan: Plan, cid: str, model: str, n: int) -> dict[str, Any]:
        if plan.kind == "tool":
            message = {"role": "assistant", "content": None, "tool_calls": [{
                "id": f"call_stub_{n}", "type": "function",
                "function": {"name": plan.tool, "arguments": json.dumps(plan.args)}}]}
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": plan.text}
            finish = "stop"
        return {"id": cid, "object": "chat.completion", "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": self._usage()}

    def _stream(self, plan: Plan, cid: str, model: str, body: dict[str, Any]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        created = int(time.time())

        def chunk(delta: dict[str, Any], finish: str | None = None, usage: bool = False) -> None:
            obj: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": created,
                                   "model": model,
                                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            if usage:
                obj["choices"] = []
                obj["usage"] = self._usage()
            self.wfile.write(b"data: " + json.dumps(obj, ensure_ascii=False).encode() + b"\n\n")
            self.wfile.flush()

        try:
            chunk({"role": "assistant", "content": ""})
            if plan.kind == "tool":
                chunk({"tool_calls": [{"index": 0, "id": f"call_stub_{cid}", "type": "function",
                                       "function": {"name": plan.tool, "arguments": ""}}]})
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": json.dumps(plan.args)}}]})
                chunk({}, "tool_calls")
            else:
                for i, tok in enumerate(words(plan.text)):
                    if i:
                        time.sleep(plan.token_delay)
                    chunk({"content": tok})
                chunk({}, "stop")
            if (body.get("stream_options") or {}).get("include_usage"):
                chunk({}, usage=True)
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            pass


class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, (ConnectionError, TimeoutError)):
            return  # clients hanging up mid-request are normal here
        super().handle_error(request, client_address)


class StubModelServer:
    """In-process stub: start() binds 127.0.0.1:port (0 = any) in a daemon thread."""

    def __init__(self, port: int = 0, log_path: str | None = None):
        self.state = StubState(log_path)
        self.httpd = _QuietServer(("127.0.0.1", port), Handler)
        self.httpd.state = self.state  # type: ignore[attr-defined]
        self.port = self.httpd.server_address[1]
        self.base_url = f"http://127.0.0.1:{self.port}/v1"
        self._thread: threading.Thread | None = None

    def start(self) -> "StubModelServer":
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="stub-model", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self.state.lock:
            return list(self.state.requests)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--log", help="append every chat request (JSON lines) to this file")
    args = ap.parse_args(argv)
    srv = StubModelServer(args.port, args.log)
    print(json.dumps({"event": "ready", "port": srv.port, "base_url": srv.base_url}), flush=True)
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        srv.httpd.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        srv.httpd.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
