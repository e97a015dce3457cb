#!/usr/bin/env python3
"""A small remote assistant for the tunnel end-to-end test (stdlib only).

It plays the assistant on the *other* machine: it listens on its own loopback for
`POST /v1/incoming` (reached by the desktop through `ssh -L`), and posts the replies to
`{callback.url}/tasks/{task_id}` — the desktop's tunnel origin, reached through `ssh -R` — the
way the real peers do:

- bearer = the relay token; `GET /v1/health` (no auth), `POST /v1/ping` (auth);
- `callback.url` must be an origin, loopback or listed in `STAGEWHISPER_ALLOW_CALLBACK_URLS`
  (comma-separated), else `400 validation_failed invalid_callback_url` (as Hermes 0.43);
- per task: `typing`, then one `message` (`echo: <text>`; transcript turns get
  `insight: <text>`; a text containing `#slow` waits SLOW_SECS first), then `completed` for
  chat turns; each callback retried on connection errors / 408 / 425 / 429 / 5xx
  (0.25 / 0.5 / 1 s, then 2 s steps up to RETRY_FOR_SECS in total, so a reply survives a short
  tunnel outage);
- every request and every callback attempt is appended to the JSONL log.

    remote_assistant.py serve --port P --token T --log FILE
    remote_assistant.py post --url ORIGIN --token T --session S [--text X] [--host H]
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import sys
import threading
import time
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

SLOW_SECS = float(os.environ.get("SLOW_SECS", "12"))
RETRY_FOR_SECS = float(os.environ.get("RETRY_FOR_SECS", "30"))
LOG_LOCK = threading.Lock()


def now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def log(path: str, rec: dict) -> None:
    rec = {"t": time.time(), **rec}
    with LOG_LOCK, open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(rec) + "\n")


def normalize_origin(url: str) -> str | None:
    try:
        p = urlsplit(url.strip())
        port = p.port
    except ValueError:
        return None
    if p.scheme not in ("http", "https") or not p.hostname:
        return None
    host = p.hostname.lower()
    return f"{p.scheme}://{host}:{port}" if port is not None else f"{p.scheme}://{host}"


def callback_allowed(url: str) -> bool:
    p = urlsplit(url)
    if p.scheme not in ("http", "https") or p.path not in ("", "/") or p.query or p.fragment:
        return False
    allowed = {normalize_origin(u) for u in os.environ.get("STAGEWHISPER_ALLOW_CALLBACK_URLS", "").split(",") if u.strip()}
    if normalize_origin(url) in allowed:
        return True
    return (p.hostname or "") in ("127.0.0.1", "localhost")


def post(url: str, token: str, body: dict, host: str | None = None, timeout: float = 5.0) -> tuple[int, dict]:
    p = urlsplit(url)
    conn_cls = http.client.HTTPSConnection if p.scheme == "https" else http.client.HTTPConnection
    conn = conn_cls(p.hostname, p.port, timeout=timeout)
    data = json.dumps(body).encode()
    headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    if host:
        headers["Host"] = host
    try:
        conn.request("POST", f"/tasks/{body['task_id']}", body=data, headers=headers)
        r = conn.getresponse()
        raw = r.read()
        try:
            return r.status, json.loads(raw or b"{}")
        except ValueError:
            return r.status, {"raw": raw.decode(errors="replace")}
    finally:
        conn.close()


def deliver(logfile: str, cb: dict, body: dict) -> None:
    """POST one callback, retrying like the real peers (longer, see the module doc)."""
    delays = [0.25, 0.5, 1.0]
    start = time.time()
    attempt = 0
    while True:
        attempt += 1
        try:
            status, answer = post(cb["url"], cb["token"], body)
            err = None
        except OSError as e:
            status, answer, err = 0, {}, f"{type(e).__name__}: {e}"
        log(logfile, {"kind": "callback", "status": body["status"], "task_id": body["task_id"],
                      "session_id": body["session_id"], "url": cb["url"], "attempt": attempt,
                      "http": status, "answer": answer, "error": err})
        retry = status == 0 or status in (408, 425, 429) or status >= 500
        if not retry or time.time() - start > RETRY_FOR_SECS:
            return
        time.sleep(delays[attempt - 1] if attempt <= len(delays) else 2.0)


def run_task(logfile: str, ev: dict) -> None:
    cb = ev.get("callback")
    if not cb or ev["reason"] == "system_prelude":
        return
    text = ev["payload"]["text"]
    base = {"task_id": ev["task_id"], "session_id": ev["session_id"],
            "user_message_id": ev["payload"].get("user_message_id")}
    deliver(logfile, cb, {**base, "status": "typing", "occurred_at": now()})
    if "#slow" in text:
        time.sleep(SLOW_SECS)
    prefix = "insight" if ev["reason"] == "transcript_chunk" else "echo"
    deliver(logfile, cb, {**base, "status": "message", "occurred_at": now(),
                          "message_id": str(uuid.uuid4()), "reply_text": f"{prefix}: {text}"})
    if ev["reason"] == "chat_message":
        deliver(logfile, cb, {**base, "status": "completed", "occurred_at": now()})


def serve(port: int, token: str, logfile: str) -> None:
    seen: set[str] = set()

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):  # quiet
            pass

        def answer(self, code: int, obj: dict) -> None:
            data = json.dumps(obj).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def authed(self) -> bool:
            return self.headers.get("Authorization", "") == f"Bearer {token}"

        def do_GET(self):
            if self.path == "/v1/health":
                return self.answer(200, {"ok": True, "version": "remote-test"})
            self.answer(404, {"error": "not_found"})

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(n) if n else b""
            if self.path == "/v1/ping":
                return self.answer(200 if self.authed() else 401, {"ok": self.authed()})
            if self.path != "/v1/incoming":
                return self.answer(404, {"error": "not_found"})
            if not self.authed():
                return self.answer(401, {"error": "bad_bearer"})
            ev = json.loads(raw or b"{}")
            log(logfile, {"kind": "incoming", "body": ev, "host": self.headers.get("Host")})
            cb = ev.get("callback")
            if cb and not callback_allowed(cb.get("url", "")):
                return self.answer(400, {"error": "validation_failed", "detail": "invalid_callback_url"})
            if ev["task_id"] in seen:
                return self.answer(200, {"status": "duplicate", "task_id": ev["task_id"]})
            seen.add(ev["task_id"])
            threading.Thread(target=run_task, args=(logfile, ev), daemon=True).start()
            self.answer(202, {"status": "accepted", "task_id": ev["task_id"]})

    httpd = ThreadingHTTPServer(("127.0.0.1", port), H)
    print(json.dumps({"event": "ready", "port": httpd.server_address[1]}), flush=True)
    httpd.serve_forever()


def main() -> int:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--token", required=True)
    s.add_argument("--log", required=True)
    p = sub.add_parser("post")
    p.add_argument("--url", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--session", required=True)
    p.add_argument("--text", default="posted by hand")
    p.add_argument("--host")
    a = ap.parse_args()
    if a.cmd == "serve":
        serve(a.port, a.token, a.log)
        return 0
    body = {"task_id": str(uuid.uuid4()), "session_id": a.session, "status": "message",
            "message_id": str(uuid.uuid4()), "reply_text": a.text, "occurred_at": now()}
    try:
        status, answer = post(a.url, a.token, body, host=a.host)
    except (OSError, http.client.HTTPException) as e:
        # No answer read (refused, reset, closed early, cut short): said as http 0.
        status, answer = 0, {"error": f"{type(e).__name__}: {e}"}
    print(json.dumps({"http": status, "answer": answer}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
