#!/usr/bin/env python3
"""A whole call through the real app with each REAL BYO relay plugin, offline.

    tests/byo/run.sh                                   # installs, builds, runs every plugin
    python3 tests/byo/byo_call.py --plugins hermes     # re-executes itself under in_netns.sh

Plugins (SW_BYO_SUITES / --plugins): `hermes` (PyPI hermes-plugin-stagewhisper 0.29.0 in
hermes-agent 0.19.0, `hermes gateway run`), `openclaw` (npm @stagewhisper/stagewhisper 0.64.0
in its default `sse` transport inside openclaw 2026.3.23), `openclaw-2026.9` (the same plugin in
openclaw 2026.9.6 with `default` as the only agent; that release's pair CLI crashes, so the test
completes the pairing itself and writes the config, as a user would by hand).

Everything runs in one loopback-only network namespace: the stub model (tests/byo/stub.py),
our binary (`stagewhisper-headless --data-dir <tmp>`, or $STAGEWHISPER_BIN), a recording TCP
proxy (tests/byo/wire.py) between the plugin and the app's callback listener, and the plugin.
The app is driven only through its control API, as the UI does. Per plugin:
  1. PUT /api/assistant {"kind":"byo"} -> status waiting_for_pairing, e2ee
  2. POST /api/assistant/pairing -> code, expires_at, api_url, command(s)
  3. the real pair CLI with a wrong code -> fails with 400; with the right code -> paired
  4. the plugin's gateway started -> GET /api/assistant online (integration, heartbeat)
  5. the model name shown (what the heartbeat reports)
  6. capability profile shown (the automatic probe)
  7. transcript turns of a call -> an insight in GET /api/sessions/{id}/insights
  8. a chat message -> an assistant reply
  9. end call -> a summary message (assistant) in the call's conversation
 10. wire check: no transcript, chat or reply text in clear in the proxy's captured bytes
 11. DELETE /api/assistant -> the plugin's next requests get 401
(step 8's message has accents, CJK and an emoji, and must come back whole in the reply)
Ends with "N passed, M failed" (one line per step above, per plugin); exit 1 on any failure.
SW_BYO_KEEP=1 keeps the temp dirs and logs; on a failure the app's and plugin's logs are dumped.
SW_BYO_LATENCY_TURNS=N adds a benchmark step (not a test): N final turns one at a time, the
time from each POST to its insight in the list, p50 / p99.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO / "tests" / "interop"))

import peers as interop_peers  # noqa: E402
from peers import Peer, PeerError, free_port, http_request  # noqa: E402
from stub import ByoStubServer  # noqa: E402
from wire import RecordingProxy, find_clear  # noqa: E402

PEERS_DIR = interop_peers.PEERS_DIR
BIN = Path(os.environ.get("STAGEWHISPER_BIN") or (REPO / "target" / "debug" / "stagewhisper-headless"))
KEEP = os.environ.get("SW_BYO_KEEP") == "1"
TURN = float(os.environ.get("SW_BYO_TURN_TIMEOUT", "90"))
ONLINE = float(os.environ.get("SW_BYO_ONLINE_TIMEOUT", "240"))
STUB_MODEL_ID = interop_peers.STUB_MODEL_ID
ALL_PLUGINS = ("hermes", "openclaw", "openclaw-2026.9")
LATENCY_TURNS = int(os.environ.get("SW_BYO_LATENCY_TURNS", "0"))

# What the call says (must never cross the plugin <-> app wire in clear).
TURNS = [("Client", "Our procurement board meets on the fourteenth of March."),
         ("Me", "Then I will send the security questionnaire answers by Tuesday.")]
# Non-ASCII on purpose: it crosses the real plugin sealed both ways (the desktop's seal, the
# plugin's open, the model, the plugin's seal, the desktop's open) and must come back whole.
CHAT = "Which objection should I prepare for before the pricing call with Zoë in München — 東京 team 🎉?"


def log(msg: str) -> None:
    print(f"[byo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def ensure_netns() -> None:
    if os.environ.get("SW_IN_NETNS") == "1":
        return
    os.execv("/bin/bash", ["bash", str(REPO / "tests" / "interop" / "in_netns.sh"),
                           sys.executable, *sys.argv])


def wait_for(what: str, pred: Callable[[], Any], timeout: float = TURN, every: float = 0.5) -> Any:
    deadline = time.monotonic() + timeout
    last_exc: Exception | None = None
    while time.monotonic() < deadline:
        try:
            v = pred()
            if v:
                return v
        except Exception as exc:  # noqa: BLE001 - keep polling; report the last one
            last_exc = exc
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for: {what}"
                         + (f" (last error: {last_exc})" if last_exc else ""))


# ----------------------------------------------------------------------------- the app
class App:
    """Our binary, headless, on its own data dir; driven through the control API."""

    def __init__(self, workdir: Path):
        self.data_dir = workdir / "app-data"
        self.log_path = workdir / "app.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.ready: dict[str, Any] = {}

    def start(self) -> "App":
        env = {k: v for k, v in os.environ.items() if not k.startswith("STAGEWHISPER_")}
        env["RUST_LOG"] = os.environ.get("SW_BYO_RUST_LOG", "info,stagewhisper_core=debug,sqlx=warn")
        logf = open(self.log_path, "ab")
        self.proc = subprocess.Popen([str(BIN), "--data-dir", str(self.data_dir)],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=logf, env=env)
        logf.close()
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"{BIN} printed no ready line\n{self.log_tail()}")
        self.ready = json.loads(line.decode())
        return self

    @property
    def ui(self) -> str:
        return self.ready["ui_url"].rstrip("/")

    @property
    def callback_url(self) -> str:
        return self.ready["callback_url"].rstrip("/")

    @property
    def callback_port(self) -> int:
        return int(self.callback_url.rsplit(":", 1)[1].split("/")[0])

    def api(self, method: str, path: str, body: Any = None, timeout: float = 20) -> tuple[int, Any]:
        if body is None and method in ("POST", "PUT"):
            body = b""
        status, _, parsed = http_request(method, self.ui + path, body,
                                         {"Authorization": f"Bearer {self.ready['ui_token']}"}, timeout)
        return status, parsed

    def ok(self, method: str, path: str, body: Any = None, want: Any = (200, 201)) -> Any:
        status, v = self.api(method, path, body)
        want = (want,) if isinstance(want, int) else want
        if status not in want:
            raise AssertionError(f"{method} {path} -> {status} {v}")
        return v

    def assistant(self) -> dict[str, Any]:
        return self.ok("GET", "/api/assistant", want=200)

    def messages(self, session: str) -> list[dict[str, Any]]:
        return self.ok("GET", f"/api/sessions/{session}/messages", want=200)

    def insights(self, session: str) -> list[dict[str, Any]]:
        return self.ok("GET", f"/api/sessions/{session}/insights", want=200)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self.proc and self.proc.stdout:
            self.proc.stdout.close()

    def log_tail(self, n: int = 60) -> str:
        try:
            lines = self.log_path.read_text("utf-8", "replace").splitlines()
        except OSError:
            return "<no app log>"
        return f"===== app log (last {min(n, len(lines))} of {len(lines)})\n" + "\n".join(lines[-n:])


# ----------------------------------------------------------------------------- the plugins
class ByoHermes(Peer):
    """hermes-agent 0.19.0 + hermes-plugin-stagewhisper 0.29.0 (its own venv)."""

    kind = "byo-hermes"
    venv = PEERS_DIR / "byo-hermes-venv"

    def __init__(self, model_base_url: str, **kw: Any):
        super().__init__(model_base_url, **kw)
        self.hermes_home = self.home / ".hermes"

    @classmethod
    def installed(cls) -> bool:
        return (cls.venv / "bin" / "stagewhisper-hermes").exists()

    def configure(self) -> None:
        self.hermes_home.mkdir(parents=True, exist_ok=True)
        config = {  # YAML is JSON
            "model": {"provider": "custom", "default": STUB_MODEL_ID, "base_url": self.model_base_url,
                      "api_key": "stub-key", "context_length": 131072},
            "fallback_providers": [],
            "plugins": {"enabled": ["stagewhisper"]},
            "security": {"allow_lazy_installs": False, "tirith_enabled": False},
            "model_catalog": {"enabled": False},
            "updates": {"pre_update_backup": "off"},
            "lsp": {"enabled": False},
            "logging": {"level": "INFO"},
            "onboarding": {"profile_build": "off"},
        }
        (self.hermes_home / "config.yaml").write_text(json.dumps(config, indent=2) + "\n")

    def env(self) -> dict[str, str]:
        env = self.base_env()
        env["PATH"] = str(self.venv / "bin") + os.pathsep + env["PATH"]
        env.update({"HERMES_HOME": str(self.hermes_home), "VIRTUAL_ENV": str(self.venv),
                    "HERMES_DISABLE_LAZY_INSTALLS": "1", "HERMES_SKIP_NODE_BOOTSTRAP": "1",
                    "HERMES_NONINTERACTIVE": "1", "TIRITH_ENABLED": "0",
                    "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"})
        return env

    def command(self) -> list[str]:
        return [str(self.venv / "bin" / "hermes"), "gateway", "run", "-v"]

    def probe(self) -> bool:
        return True  # no listener of its own: the app's status tells when it is connected

    def own_log_files(self) -> list[Path]:
        return sorted((self.hermes_home / "logs").glob("*.log"))

    def pair(self, code: str, api_url: str) -> tuple[int, str]:
        if not self._configured:
            self.configure()
            self._configured = True
        res = subprocess.run([str(self.venv / "bin" / "stagewhisper-hermes"), "pair", "--code", code,
                              "--api-url", api_url, "--label", "byo-test-hermes", "--no-restart"],
                             env=self.env(), cwd=str(self.home), capture_output=True, text=True, timeout=120)
        return res.returncode, res.stdout + res.stderr

    def paired_env(self) -> dict[str, str]:
        out = {}
        p = self.hermes_home / ".env"
        for line in (p.read_text() if p.exists() else "").splitlines():
            k, sep, v = line.partition("=")
            if sep:
                out[k.strip()] = v.strip().strip('"').strip("'")
        return out

    def relay_token(self) -> str | None:
        return self.paired_env().get("STAGEWHISPER_RELAY_TOKEN")

    def integration_id(self) -> str | None:
        return self.paired_env().get("STAGEWHISPER_INTEGRATION_ID")


class ByoOpenClaw(Peer):
    """The @stagewhisper/stagewhisper 0.64.0 channel plugin, `sse` transport, in openclaw."""

    kind = "byo-openclaw"

    def __init__(self, model_base_url: str, *, version: str = "2026.3.23", **kw: Any):
        self.version = version
        super().__init__(model_base_url, **kw)
        if version.startswith("2026.9"):
            self.prefix = PEERS_DIR / "gateway" / "openclaw"
            self.node = Path(self._env_sh().get("SW_GATEWAY_NODE", ""))
        else:
            self.prefix = PEERS_DIR / "openclaw"
            self.node = interop_peers.node_bin_dir() / "node"
        self.mjs = self.prefix / "node_modules" / "openclaw" / "openclaw.mjs"
        self.gateway_port = free_port(span=5)
        self.gateway_token = "gw-" + secrets.token_hex(16)
        self.state_dir = self.home / ".openclaw"
        self.config_path = self.state_dir / "openclaw.json"
        self.file_log = self.workdir / "openclaw-file.log"

    @staticmethod
    def _env_sh() -> dict[str, str]:
        out = {}
        p = PEERS_DIR / "gateway" / "env.sh"
        for line in (p.read_text() if p.exists() else "").splitlines():
            m = re.match(r"export (\w+)='(.*)'$", line.strip())
            if m:
                out[m.group(1)] = m.group(2)
        return out

    def installed(self) -> bool:  # type: ignore[override]
        return self.mjs.exists() and self.node.exists() and \
            (interop_peers.OPENCLAW_TEMPLATE / "extensions" / "stagewhisper" / "package.json").exists()

    def configure(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        ext_dst = self.state_dir / "extensions"
        if ext_dst.exists():
            shutil.rmtree(ext_dst)
        shutil.copytree(interop_peers.OPENCLAW_TEMPLATE / "extensions", ext_dst, symlinks=True)
        template_cfg = json.loads((interop_peers.OPENCLAW_TEMPLATE / "openclaw.json").read_text())
        installs = template_cfg.get("plugins", {}).get("installs", {})
        for rec in installs.values():
            if isinstance(rec, dict) and rec.get("installPath"):
                rec["installPath"] = str(ext_dst / Path(rec["installPath"]).name)
        model = {"id": STUB_MODEL_ID, "name": "Stub model", "reasoning": False, "input": ["text"],
                 "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                 "contextWindow": 131072, "maxTokens": 4096}
        agents: dict[str, Any] = {"defaults": {"model": {"primary": f"stub/{STUB_MODEL_ID}"},
                                               "workspace": str(self.home / "workspace"),
                                               "skipBootstrap": True}}
        config: dict[str, Any] = {
            # Token auth and the OpenResponses endpoint (reasoning jobs go through it), enabled
            # before pairing: the pair CLI's own write of it can race the plugin's.
            "gateway": {"mode": "local", "bind": "loopback", "port": self.gateway_port,
                        "auth": {"mode": "token", "token": self.gateway_token},
                        "http": {"endpoints": {"responses": {"enabled": True}}}},
            "discovery": {"mdns": {"mode": "off"}},
            "update": {"checkOnStart": False},
            "logging": {"level": "info", "file": str(self.file_log)},
            "models": {"mode": "replace", "providers": {"stub": {
                "baseUrl": self.model_base_url, "apiKey": "stub-key", "api": "openai-completions",
                "models": [model]}}},
            "agents": agents,
            "plugins": {"allow": ["stagewhisper"],
                        "entries": {"stagewhisper": {"enabled": True, "config": {
                            "transport": "sse", "label": "byo-test-openclaw"}}},
                        "installs": installs},
        }
        if self.version.startswith("2026.9"):
            # `default` as the only agent (with the stock set-up the probe and chat fail there).
            # (`systemAgent: {agentId: default}` is a retired key there: its doctor drops it at
            # every start.)
            agents["entries"] = {"default": {"model": {"primary": f"stub/{STUB_MODEL_ID}"},
                                             "workspace": str(self.home / "workspace")}}
            # No browser Control UI: on a start without its built assets the gateway rebuilds
            # them in the background (over a minute of CPU on 2 cores, the event loop blocked
            # for seconds at a time), which made the plugin's 15 s start-up probe of
            # /v1/responses time out, so its heartbeats said `display_model: null`.
            config["gateway"]["controlUi"] = {"enabled": False}
        self.config_path.write_text(json.dumps(config, indent=2) + "\n")
        self.config_path.chmod(0o600)

    def env(self) -> dict[str, str]:
        env = self.base_env()
        env["PATH"] = str(self.node.parent) + os.pathsep + env["PATH"]
        env.update({
            "OPENCLAW_STATE_DIR": str(self.state_dir), "OPENCLAW_CONFIG_PATH": str(self.config_path),
            "OPENCLAW_NO_RESPAWN": "1", "OPENCLAW_DISABLE_BONJOUR": "1",
            "OPENCLAW_SKIP_BROWSER_CONTROL_SERVER": "1", "OPENCLAW_SKIP_CANVAS_HOST": "1",
            "OPENCLAW_SKIP_GMAIL_WATCHER": "1", "OPENCLAW_HIDE_BANNER": "1",
            "OPENCLAW_NO_ONBOARD": "1", "OPENCLAW_NO_PROMPT": "1",
        })
        if os.environ.get("SW_BYO_OPENCLAW_TRACE") == "1":
            # The gateway's own start-up timing lines (in its log; see tests/byo/README.md).
            env["OPENCLAW_GATEWAY_STARTUP_TRACE"] = "1"
        return env

    def cli(self, *args: str, timeout: float = 180) -> tuple[int, str]:
        res = subprocess.run([str(self.node), str(self.mjs), *args], env=self.env(), cwd=str(self.home),
                             capture_output=True, text=True, timeout=timeout)
        return res.returncode, res.stdout + res.stderr

    def command(self) -> list[str]:
        return [str(self.node), str(self.mjs), "gateway", "run", "--bind", "loopback",
                "--port", str(self.gateway_port)]

    def probe(self) -> bool:
        return True

    def own_log_files(self) -> list[Path]:
        return [self.file_log]

    def config(self) -> dict[str, Any]:
        return json.loads(self.config_path.read_text())

    def pair(self, code: str, api_url: str) -> tuple[int, str]:
        if not self._configured:
            self.configure()
            self._configured = True
        if self.version.startswith("2026.9"):
            return self.pair_by_hand(code, api_url)
        return self.cli("stagewhisper", "pair", "--code", code, "--api-url", api_url,
                        "--label", "byo-test-openclaw")

    def pair_by_hand(self, code: str, api_url: str) -> tuple[int, str]:
        """2026.9.6: its pair CLI crashes after pair/complete, so do what it does and write the
        config block by hand: a fresh X25519 key pair (Node's crypto), pair/complete, then
        `channels.stagewhisper` as the 2026.3.23 CLI writes it."""
        js = ("const c=require('crypto');const k=c.generateKeyPairSync('x25519');"
              "const j=k.privateKey.export({format:'jwk'});"
              "const b=s=>Buffer.from(s,'base64url').toString('base64');"
              "console.log(JSON.stringify({secret:b(j.d),public:b(j.x)}))")
        res = subprocess.run([str(self.node), "-e", js], capture_output=True, text=True, timeout=30)
        keys = json.loads(res.stdout)
        status, _, body = http_request("POST", api_url.rstrip("/") + "/api/v1/openclaw/pair/complete",
                                       {"pairing_code": code, "host_label": "byo-test-openclaw-2026.9",
                                        "plugin_public_key": keys["public"]}, {}, 30)
        if status != 200 or not isinstance(body, dict):
            return 1, f"Pairing failed ({status}): {json.dumps(body)}"
        cfg = self.config()
        cfg.setdefault("channels", {})["stagewhisper"] = {
            "apiBaseUrl": api_url, "integrationId": body["integration_id"],
            "relayToken": body["relay_token"], "label": body.get("label") or "byo-test-openclaw",
            "pluginSecretKey": keys["secret"], "desktopPublicKey": body["byo_public_key"]}
        self.config_path.write_text(json.dumps(cfg, indent=2) + "\n")
        return 0, f"Paired by hand ({body.get('label')})"

    def relay_token(self) -> str | None:
        return (self.config().get("channels", {}).get("stagewhisper") or {}).get("relayToken")

    def integration_id(self) -> str | None:
        return (self.config().get("channels", {}).get("stagewhisper") or {}).get("integrationId")


# ----------------------------------------------------------------------------- one whole call
class Results:
    def __init__(self) -> None:
        self.rows: list[tuple[str, str, bool, str]] = []

    def add(self, plugin: str, step: str, ok: bool, detail: str = "") -> None:
        self.rows.append((plugin, step, ok, detail))
        log(f"{'PASS' if ok else 'FAIL'} {plugin}: {step}" + (f" -- {detail}" if detail else ""))


def run_plugin(name: str, stub: ByoStubServer, results: Results) -> None:
    workdir = Path(tempfile.mkdtemp(prefix=f"sw-byo-{name}-"))
    app = App(workdir)
    if name == "hermes":
        plugin: Any = ByoHermes(stub.base_url, workdir=workdir / "plugin")
        prefix = "/api/v1/assistant-relay"
    else:
        plugin = ByoOpenClaw(stub.base_url, workdir=workdir / "plugin",
                             version="2026.9.6" if name == "openclaw-2026.9" else "2026.3.23")
        prefix = "/api/v1/openclaw"
    proxy: RecordingProxy | None = None
    failed = False
    blocked = ""  # once a step every later step needs has failed

    def step(title: str, fn: Callable[[], str | None], needs: bool = True) -> None:
        """Runs one step; `needs`: every later step needs this one (skipped if it fails)."""
        nonlocal failed, blocked
        if blocked:
            results.add(name, title, False, f"not run: {blocked} failed")
            failed = True
            return
        try:
            detail = fn() or ""
            results.add(name, title, True, detail)
        except Exception as exc:  # noqa: BLE001
            failed = True
            results.add(name, title, False, f"{type(exc).__name__}: {exc}")
            if os.environ.get("SW_BYO_TRACE"):
                traceback.print_exc()
            if needs:
                blocked = title

    ctx: dict[str, Any] = {}
    try:
        if not plugin.installed():
            raise PeerError(f"{name} is not installed (tests/byo/install.sh)")
        app.start()
        proxy = RecordingProxy(app.callback_port)

        def select_kind() -> str:
            app.ok("PUT", "/api/assistant", {"kind": "byo"}, 200)
            a = app.assistant()
            assert a.get("kind") == "byo", a
            assert a.get("status") == "waiting_for_pairing", a
            assert a.get("e2ee") is True, a
            return f"status {a['status']}"

        def pairing() -> str:
            p = app.ok("POST", "/api/assistant/pairing", None, 201)
            code, api_url = p["code"], p["api_url"]
            assert api_url.rstrip("/") == app.callback_url, (api_url, app.callback_url)
            assert p["command"] == f"stagewhisper-hermes pair --code {code} --api-url {api_url}", p
            assert p["commands"]["hermes"] == p["command"], p
            assert p["commands"]["openclaw"] == \
                f"openclaw stagewhisper pair --code {code} --api-url {api_url}", p
            assert p.get("expires_at"), p
            ctx["code"] = code
            return f"code {code}, expires {p['expires_at']}"

        def wrong_code() -> str:
            code = ctx["code"]
            wrong = ("X" if code[0] != "X" else "Y") + code[1:]
            rc, out = plugin.pair(wrong, proxy.url)
            # stagewhisper-hermes prints the refusal and exits 0; openclaw's CLI exits 1.
            assert "Pairing failed" in out, f"the CLI accepted a wrong code (rc {rc}): {out}"
            assert "400" in out and "detail" in out, out
            assert not plugin.relay_token(), "a refused pairing saved a token"
            return " ".join(out.split())[-140:]

        def right_code() -> str:
            rc, out = plugin.pair(ctx["code"], proxy.url)
            assert rc == 0 and "Pairing failed" not in out, out
            assert plugin.relay_token() and plugin.integration_id(), "no pairing saved"
            return " ".join(out.split())[-140:]

        def online() -> str:
            plugin.start()
            t0 = time.monotonic()
            wait_for("GET /api/assistant online", lambda: app.assistant().get("status") == "online",
                     timeout=ONLINE, every=1)
            t_online = time.monotonic() - t0
            # The first heartbeat (OpenClaw's comes 30 s after its relay service starts).
            a = wait_for("the first heartbeat", lambda: (
                lambda v: v if v.get("status") == "online" and v.get("last_heartbeat_at") else None)(
                app.assistant()), timeout=60, every=1)
            assert a.get("integration_id") == plugin.integration_id(), a
            assert a.get("e2ee") is True, a
            for secret in ("relay_token", "secret_key", "private_key"):
                assert secret not in json.dumps(a), a
            ctx["assistant"] = a
            return f"online {t_online:.0f}s after start, model {a.get('display_model')!r}, " \
                   f"host {a.get('host_label')!r}, heartbeat {a.get('last_heartbeat_at')}"

        def model_name() -> str:
            # What the heartbeat reports: OpenClaw sends `display_model: null` while its own
            # /v1/responses start-up probe has not succeeded (heartbeat status `unverified`).
            # On a failure the heartbeats the proxy saw tell whose fault it is.
            try:
                a = wait_for("display_model", lambda: (lambda v: v if v.get("display_model") else None)(
                    app.assistant()), timeout=45, every=1)
            except AssertionError:
                beats = [b for _, b in proxy.requests("/heartbeat") if isinstance(b, dict)]
                models = [b.get("display_model") for b in beats if b.get("display_model")]
                if not beats:
                    raise AssertionError("no heartbeat with a body reached the app") from None
                if not models:
                    raise AssertionError(
                        f"the peer reported no model: its {len(beats)} heartbeat(s) say "
                        f"status {beats[-1].get('status')!r}, display_model null (its own "
                        "start-up probe of /v1/responses did not succeed)") from None
                raise AssertionError(f"the app lost it: a heartbeat said display_model "
                                     f"{models[-1]!r}, GET /api/assistant shows none") from None
            beats = [b for _, b in proxy.requests("/heartbeat") if isinstance(b, dict)]
            said = [b.get("display_model") for b in beats if b.get("display_model")]
            assert a["display_model"] in said, f"shown {a['display_model']!r}, heartbeats said {said}"
            return f"{a['display_model']!r} (as its heartbeat said)"

        def capabilities() -> str:
            a = wait_for("capabilities.raw_description", lambda: (
                lambda v: v if (v.get("capabilities") or {}).get("raw_description") else None)(app.assistant()),
                timeout=TURN)
            return str(a["capabilities"]["raw_description"])[:120]

        def insights() -> str:
            call = app.ok("POST", "/api/calls", {"title": f"byo call {name}"}, 201)["session_id"]
            ctx["call"] = call
            for speaker, text in TURNS:
                st, v = app.api("POST", f"/api/calls/{call}/transcript",
                                {"speaker": speaker, "text": text, "is_final": True})
                assert st == 201, (st, v)
            got = wait_for("an insight", lambda: [i for i in app.insights(call) if "Stub insight" in i.get("text", "")],
                           timeout=TURN)
            return f"{len(got)} insight(s): {got[0]['text'][:100]!r}"

        def latency() -> str:
            """Benchmark, not a test (SW_BYO_LATENCY_TURNS=N): one final turn at a time, the
            time until its insight is listed (what the Insights tab shows), p50 / p99."""
            call = ctx["call"]
            times = []
            for i in range(LATENCY_TURNS):
                before = len(app.insights(call))
                t0 = time.monotonic()
                st, v = app.api("POST", f"/api/calls/{call}/transcript",
                                {"speaker": "Client", "text": f"Latency probe number {i}: the budget is fixed.",
                                 "is_final": True})
                assert st == 201, (st, v)
                wait_for(f"the insight of turn {i}", lambda: len(app.insights(call)) > before, timeout=TURN,
                         every=0.02)
                times.append(time.monotonic() - t0)
            times.sort()
            p50 = times[len(times) // 2]
            p99 = times[min(len(times) - 1, int(round(0.99 * (len(times) - 1))))]
            return f"turn -> insight over {len(times)} turns: p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, " \
                   f"max {times[-1] * 1000:.0f} ms"

        def chat() -> str:
            chat_id = app.ok("POST", "/api/sessions", {"title": f"byo chat {name}"}, 201)["session_id"]
            user = app.ok("POST", f"/api/sessions/{chat_id}/messages", {"text": CHAT}, 201)
            reply = wait_for("the assistant's reply", lambda: [
                m for m in app.messages(chat_id) if m.get("kind") == "assistant"
                and (m.get("user_message_id") in (None, user.get("message_id")))], timeout=TURN)
            ctx["reply"] = reply[0]["text"]
            assert "Stub reply" in reply[0]["text"], reply
            # The stub model echoes the user's words: accents, CJK and emoji came back intact.
            assert CHAT in reply[0]["text"], f"the non-ASCII words did not come back whole: {reply}"
            return repr(reply[0]["text"][:120])

        def summary() -> str:
            call = ctx["call"]
            before = {m["id"] for m in app.messages(call)}
            app.ok("POST", f"/api/calls/{call}/end", None, 200)
            got = wait_for("the post-call summary", lambda: [
                m for m in app.messages(call) if m["id"] not in before and m.get("kind") == "assistant"],
                timeout=TURN)
            return repr(got[0]["text"][:100])

        def wire() -> str:
            assert proxy is not None
            captured = proxy.captured()
            assert b"ciphertext" in captured and prefix.encode() in captured, \
                f"the proxy saw no BYO traffic ({len(captured)} bytes)"
            # What the user said, whole or in part; the assistant's reply whole (the stub's
            # reply also quotes the assistant's own boilerplate, which the capability profile
            # carries in clear by design, so no pieces of it).
            found = find_clear(captured, [t for _, t in TURNS] + [CHAT])
            if ctx.get("reply"):
                found += find_clear(captured, [ctx["reply"]], pieces=False)
            assert not found, f"clear text on the wire: {found}"
            return f"{len(captured)} bytes over {proxy.conns} connections, no clear text"

        def unpair() -> str:
            assert proxy is not None
            token = plugin.relay_token()
            t0 = time.monotonic()
            st, v = app.api("DELETE", "/api/assistant")
            assert st in (200, 204), (st, v)
            st, _, _ = http_request("POST", f"{proxy.url}{prefix}/integrations/{plugin.integration_id()}/heartbeat",
                                    {"status": "healthy", "display_model": "x"},
                                    {"Authorization": f"Bearer {token}"}, 10)
            assert st == 401, f"the old relay token still works: {st}"
            # The plugin's own next request (stream reconnect or heartbeat) is refused too.
            wait_for("a 401 to the plugin", lambda: re.search(rb"HTTP/1\.1 401", proxy.answers(since=t0)),
                     timeout=75)
            return "old token refused (test and plugin)"

        step("select kind byo", select_kind)
        step("pairing code", pairing)
        step("pair CLI with a wrong code fails (400)", wrong_code)
        step("pair CLI with the right code", right_code)
        step("status online", online)
        step("model name shown (from the heartbeat)", model_name, needs=False)
        step("capability profile shown", capabilities)
        step("transcript turns -> insight", insights)
        if LATENCY_TURNS:
            step("benchmark: final turn -> insight latency", latency, needs=False)
        step("chat message (accents, CJK, emoji) -> assistant reply, words intact", chat, needs=False)
        step("end call -> summary message", summary, needs=False)
        step("wire check: no clear text between plugin and app", wire, needs=False)
        step("unpair -> the plugin gets 401", unpair, needs=False)
    except Exception as exc:  # noqa: BLE001 - a set-up failure fails this plugin's run
        failed = True
        results.add(name, "set-up", False, f"{type(exc).__name__}: {exc}")
    finally:
        if failed:
            print(app.log_tail(60), flush=True)
            try:
                print(plugin.dump_logs(80), flush=True)
            except Exception:  # noqa: BLE001
                pass
        try:
            plugin.stop()
        except Exception:  # noqa: BLE001
            pass
        app.stop()
        if proxy:
            proxy.close()
        if KEEP or failed and os.environ.get("SW_BYO_KEEP_FAILED") == "1":
            log(f"kept {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--plugins", default=os.environ.get("SW_BYO_SUITES", " ".join(ALL_PLUGINS)),
                    help="space- or comma-separated: " + ", ".join(ALL_PLUGINS))
    args = ap.parse_args()
    wanted = [p for p in re.split(r"[,\s]+", args.plugins) if p]
    for p in wanted:
        if p not in ALL_PLUGINS:
            ap.error(f"unknown plugin {p!r}")
    ensure_netns()
    if not BIN.exists():
        print(f"no binary at {BIN} (cargo build -p stagewhisper-headless, or STAGEWHISPER_BIN)")
        return 2
    stub = ByoStubServer().start()
    results = Results()
    try:
        for p in wanted:
            log(f"===== {p}")
            run_plugin(p, stub, results)
    finally:
        stub.stop()
    passed = sum(1 for r in results.rows if r[2])
    failed = len(results.rows) - passed
    print()
    for plugin, step, ok, detail in results.rows:
        print(f"  {'ok  ' if ok else 'FAIL'} {plugin:16} {step}")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
