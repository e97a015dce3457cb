#!/usr/bin/env python3
"""Real end-to-end test of the callback tunnel with a remote assistant host (stdlib only).

Started by `run.sh` INSIDE the desktop's network namespace; the remote assistant host is a
second namespace, linked to this one by a private veth pair (both created by run.sh; nothing
has a route off the machine). The remote side can reach the desktop ONLY through a real
`ssh -R` reverse tunnel (Debian's openssh): sshd runs in the remote namespace, the desktop's
ssh client forwards

    remote 10.203.0.2:8080  ->  desktop 127.0.0.1:<callback port>      (-R: callbacks)
    desktop 127.0.0.1:<L>   ->  remote 127.0.0.1:<assistant port>      (-L: /v1/incoming)

and the app (`target/debug/stagewhisper --headless`) is told the external URL
`http://10.203.0.2:8080` with `POST /api/tunnel {"kind":"external",...}`.

Checks: the tunnel goes online (signed probe), the advertised callback URL / settings / the
`{"event":"tunnel"}` stdout lines follow; chat and insights replies posted by the remote side
land in the conversation; the remote side cannot reach the desktop directly; a wrong token
through the tunnel is refused (401), a rotated token too; the tunnel dropping mid-call shows
`failed` and recovers (a slow reply spanning the outage and a message sent during it are both
delivered); stopping the tunnel makes its Host refused (403). With `--hermes` (default: when
the interop peers are installed) the real Hermes adapter then does a round through the tunnel.
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
REMOTE_IP = "10.203.0.2"
PUBLIC_PORT = 8080
ORIGIN = f"http://{REMOTE_IP}:{PUBLIC_PORT}"
ASSISTANT_PORT = 8644  # remote loopback
HERMES_PORT = 8645     # remote loopback
RELAY_TOKEN = "remote-relay-token-" + secrets.token_hex(16)

RESULTS: list[tuple[str, bool, str]] = []


def step(name: str, ok: bool, detail: str = "") -> None:
    RESULTS.append((name, ok, detail))
    print(f"{'PASS' if ok else 'FAIL'}  {name}{'  — ' + detail if detail else ''}", flush=True)
    if not ok:
        raise AssertionError(f"{name}: {detail}")


def wait(what: str, f, timeout: float = 30.0, every: float = 0.2):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = f()
            if last:
                return last
        except Exception as e:  # noqa: BLE001 - keep polling
            last = e
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}; last: {last!r}")


class Proc:
    """A child process we started (killed by id at the end)."""

    all: list["Proc"] = []

    def __init__(self, name: str, argv: list[str], log: Path, env: dict | None = None, stdout_pipe: bool = False):
        self.name, self.log = name, log
        self.fh = open(log, "ab", buffering=0)
        self.p = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.PIPE if stdout_pipe else self.fh,
                                  stderr=self.fh, env=env, start_new_session=True)
        Proc.all.append(self)

    def stop(self, sig=signal.SIGTERM, timeout: float = 10.0) -> None:
        if self.p.poll() is None:
            try:
                os.killpg(self.p.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.p.wait(timeout)
            except subprocess.TimeoutExpired:
                os.killpg(self.p.pid, signal.SIGKILL)
                self.p.wait(5)

    def tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def in_remote(ns: str, argv: list[str]) -> list[str]:
    return ["ip", "netns", "exec", ns, *argv]


def tcp_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class Api:
    def __init__(self, ui_url: str, token: str):
        self.base, self.token = ui_url.rstrip("/"), token

    def __call__(self, method: str, path: str, body=None) -> tuple[int, object]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Authorization": f"Bearer {self.token}",
                                              "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=70) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_jsonl(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", required=True)
    ap.add_argument("--remote-ns", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--hermes", choices=["auto", "yes", "no"], default="auto")
    a = ap.parse_args()
    work = Path(a.workdir)
    ns = a.remote_ns
    t_start = time.monotonic()
    try:
        run(a, work, ns)
    except Exception as e:  # noqa: BLE001 - report, dump the logs, clean up
        print(f"\nFAILED: {type(e).__name__}: {e}", flush=True)
        for p in Proc.all:
            print(f"--- last lines of {p.name} ({p.log}) ---\n{p.tail()}", flush=True)
        return 1
    finally:
        for p in reversed(Proc.all):
            p.stop()
    passed = sum(1 for _, ok, _ in RESULTS if ok)
    print(f"\n{passed} passed, 0 failed ({time.monotonic() - t_start:.1f} s)", flush=True)
    return 0


def run(a, work: Path, ns: str) -> None:
    # ---------------------------------------------------------------- isolation
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    routes = subprocess.run(["ip", "route", "show"], capture_output=True, text=True).stdout
    step("desktop namespace: only lo + the private veth, no default route",
         len([l for l in links.splitlines() if l.strip()]) == 2 and "default" not in routes,
         routes.strip().replace("\n", "; "))

    # ---------------------------------------------------------------- remote host: sshd + assistant
    key = work / "id_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    hostkey = work / "host_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(hostkey)], check=True)
    shutil.copy(f"{key}.pub", work / "authorized_keys")
    os.chmod(work / "authorized_keys", 0o600)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege-separation dir
    (work / "sshd_config").write_text(f"""\
ListenAddress {REMOTE_IP}
Port 22
HostKey {hostkey}
PidFile {work / 'sshd.pid'}
AuthorizedKeysFile {work / 'authorized_keys'}
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
AllowTcpForwarding yes
GatewayPorts clientspecified
ClientAliveInterval 2
ClientAliveCountMax 2
LogLevel VERBOSE
""")
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    Proc("sshd", in_remote(ns, [sshd, "-D", "-e", "-f", str(work / "sshd_config")]), work / "sshd.log")
    alog = work / "assistant.jsonl"
    env = dict(os.environ, STAGEWHISPER_ALLOW_CALLBACK_URLS=ORIGIN, SLOW_SECS="12")
    Proc("remote assistant", in_remote(ns, [sys.executable, str(HERE / "remote_assistant.py"), "serve",
                                            "--port", str(ASSISTANT_PORT), "--token", RELAY_TOKEN,
                                            "--log", str(alog)]), work / "assistant.log", env=env)
    wait("sshd on the remote host", lambda: tcp_open(REMOTE_IP, 22), 20)

    # ---------------------------------------------------------------- the desktop app
    data = work / "desk-data"
    app_env = dict(os.environ, RUST_LOG=os.environ.get("RUST_LOG", "info,sqlx=warn"))
    app_env.pop("NGROK_AUTHTOKEN", None)
    app = Proc("stagewhisper", [a.bin, "--headless", "--data-dir", str(data)], work / "app.log",
               env=app_env, stdout_pipe=True)
    ready = json.loads(app.p.stdout.readline())
    step("app ready (headless)", ready.get("event") == "ready", ready.get("callback_url", ""))
    events: list[dict] = []

    def pump():
        for line in app.p.stdout:
            try:
                events.append(json.loads(line))
            except ValueError:
                events.append({"unparsed": line})
    threading.Thread(target=pump, daemon=True).start()
    api = Api(ready["ui_url"], ready["ui_token"])
    cb_port = int(ready["callback_url"].rsplit(":", 1)[1])
    local_url = ready["callback_url"]
    token = ready["callback_token"]
    lport = free_port()

    def ssh_proc(name: str, local_forward_port: int, remote_port: int) -> Proc:
        """`ssh -N -R <public>:<callback listener> -L <local>:<remote assistant>`."""
        return Proc(name, ["ssh", "-N", "-T", "-F", "/dev/null", "-i", str(key), "-o", "IdentitiesOnly=yes",
                           "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
                           "-o", "UserKnownHostsFile=/dev/null", "-o", "ExitOnForwardFailure=yes",
                           "-o", "ServerAliveInterval=2", "-o", "ServerAliveCountMax=2",
                           "-R", f"{REMOTE_IP}:{PUBLIC_PORT}:127.0.0.1:{cb_port}",
                           "-L", f"127.0.0.1:{local_forward_port}:127.0.0.1:{remote_port}",
                           f"root@{REMOTE_IP}"], work / f"{name.replace(' ', '-')}.log")

    def ssh_up(local_forward_port: int = lport, remote_port: int = ASSISTANT_PORT, name: str = "ssh") -> Proc:
        p = ssh_proc(name, local_forward_port, remote_port)
        wait("the reverse tunnel (remote port open)", lambda: tcp_open(REMOTE_IP, PUBLIC_PORT), 20)
        wait("the forward tunnel", lambda: tcp_open("127.0.0.1", local_forward_port), 20)
        return p

    # The remote side cannot reach the desktop without the tunnel.
    def remote_probe(host: str, port: int) -> bool:
        code = f"import socket,sys\ntry:\n socket.create_connection(('{host}',{port}),timeout=2); print('open')\nexcept OSError as e: print('closed', e)"
        out = subprocess.run(in_remote(ns, [sys.executable, "-c", code]), capture_output=True, text=True).stdout
        return out.startswith("open")
    step("remote host cannot reach the desktop's callback listener directly",
         not remote_probe("10.203.0.1", cb_port) and not remote_probe("127.0.0.1", cb_port))

    ssh = ssh_up()
    step("ssh -R tunnel up", True, f"{ORIGIN} -> {local_url}")

    # ---------------------------------------------------------------- configure the external URL
    st, t = api("POST", "/api/tunnel", {"kind": "external", "url": ORIGIN, "check_interval_secs": 2, "wait_secs": 20})
    step("POST /api/tunnel external -> online, verified by the signed probe",
         st == 200 and t["state"] == "online" and t["verified"] is True, f"{st} {t.get('state')} {t.get('detail')}")
    step("advertised callback URL is the tunnel origin", t["callback_url"] == ORIGIN and t["local_callback_url"] == local_url)
    step("UI shows what the remote assistant must allow",
         t["assistant_allow"]["line"] == f"STAGEWHISPER_ALLOW_CALLBACK_URLS={ORIGIN}", t["assistant_allow"]["line"])
    st, s = api("GET", "/api/settings")
    step("GET /api/settings callback_url follows the tunnel", s["callback_url"] == ORIGIN, s["callback_url"])
    wait("a tunnel online line on stdout", lambda: any(e.get("event") == "tunnel" and e.get("state") == "online"
                                                          and e.get("callback_url") == ORIGIN for e in events), 10)
    step("headless prints {\"event\":\"tunnel\",\"state\":\"online\",...}", True,
         json.dumps([e for e in events if e.get("state") == "online"][0]))

    # ---------------------------------------------------------------- the assistant link over ssh -L
    st, link = api("PUT", "/api/assistant", {"base_url": f"http://127.0.0.1:{lport}", "relay_token": RELAY_TOKEN})
    wait("assistant link online", lambda: api("GET", "/api/assistant")[1]["status"] == "online", 30)
    step("assistant link online through ssh -L", True)

    st, call = api("POST", "/api/calls", {"title": "remote call"})
    sid = call["session_id"]

    def assistant_texts(session: str) -> list[str]:
        return [m["text"] for m in api("GET", f"/api/sessions/{session}/messages")[1] if m["kind"] == "assistant"]

    api("POST", f"/api/sessions/{sid}/messages", {"text": "hello from the desk"})
    wait("the reply through the tunnel", lambda: "echo: hello from the desk" in assistant_texts(sid), 30)
    inc = [r for r in read_jsonl(alog) if r["kind"] == "incoming" and r["body"]["reason"] == "chat_message"]
    step("the assistant was given callback.url = the tunnel origin", inc and inc[-1]["body"]["callback"]["url"] == ORIGIN,
         inc[-1]["body"]["callback"]["url"] if inc else "no request")
    cbs = [r for r in read_jsonl(alog) if r["kind"] == "callback" and r["session_id"] == sid]
    step("chat reply posted by the remote host through ssh -R landed in the conversation",
         any(r["status"] == "message" and r["http"] == 200 for r in cbs), f"{len(cbs)} callbacks")

    api("POST", f"/api/calls/{sid}/transcript", {"speaker": "Client", "text": "we need it by Friday", "is_final": True})
    wait("the insight through the tunnel",
         lambda: any("insight: Client: we need it by Friday" in i["text"] for i in api("GET", f"/api/sessions/{sid}/insights")[1]), 30)
    step("insights reply through the tunnel landed in the Insights list", True)

    # ---------------------------------------------------------------- tokens through the tunnel
    def remote_post(tok: str, text: str, session: str = sid) -> dict:
        # `--token=…` in one argument: a token may start with "-" (base64url), which argparse
        # would take for an option of its own.
        done = subprocess.run(in_remote(ns, [sys.executable, str(HERE / "remote_assistant.py"), "post", "--url", ORIGIN,
                                             f"--token={tok}", "--session", session, f"--text={text}"]),
                              capture_output=True, text=True, timeout=30)
        try:
            return json.loads(done.stdout)
        except ValueError:
            raise AssertionError(f"the remote post printed no answer (rc={done.returncode}): "
                                 f"stdout={done.stdout[-300:]!r}, stderr={done.stderr[-1500:]!r}") from None
    r = remote_post("wrong-token-" + secrets.token_hex(8), "should not land")
    step("a wrong token through the tunnel is refused (401)", r["http"] == 401 and r["answer"].get("error") == "unauthorized", json.dumps(r))
    r = remote_post(token, "posted by hand through the tunnel")
    step("the right token through the tunnel works", r["http"] == 200, json.dumps(r))
    step("the refused post did not land", "should not land" not in assistant_texts(sid))

    # ---------------------------------------------------------------- the tunnel drops mid-call
    api("POST", f"/api/sessions/{sid}/messages", {"text": "a slow one #slow"})
    wait("typing from the remote assistant", lambda: api("GET", f"/api/sessions/{sid}/typing")[1], 20)
    step("typing indicator arrived through the tunnel", True)
    ssh.stop(signal.SIGKILL)
    t0 = time.monotonic()
    down = wait("tunnel failed", lambda: (lambda t: t if t["state"] == "failed" else None)(api("GET", "/api/tunnel")[1]), 20)
    step("tunnel dropping shows failed with a reason",
         down["error"]["code"] == "connection_refused" and down["next_retry_at"] is not None,
         f"after {time.monotonic() - t0:.1f} s: {down['detail']}")
    wait("a tunnel failed line on stdout", lambda: any(e.get("event") == "tunnel" and e.get("state") == "failed" for e in events), 10)
    step("headless prints the failed line", True)
    st, s = api("GET", "/api/settings")
    step("the tunnel origin stays advertised while it is re-established", s["callback_url"] == ORIGIN)
    st, m = api("POST", f"/api/sessions/{sid}/messages", {"text": "sent during the outage"})
    time.sleep(1.0)
    msgs = api("GET", f"/api/sessions/{sid}/messages")[1]
    pending = [x for x in msgs if x["kind"] == "user" and x["text"] == "sent during the outage"][0]
    step("a message sent during the outage waits (pending)", pending["delivery"] == "pending", str(pending["delivery_error"]))
    step("the local listener is untouched", tcp_open("127.0.0.1", cb_port))
    ssh = ssh_up()
    up = wait("tunnel online again", lambda: (lambda t: t if t["state"] == "online" else None)(api("GET", "/api/tunnel")[1]), 30)
    step("the tunnel recovers by itself (online again)", up["verified"] is True, f"{time.monotonic() - t0:.1f} s after the drop")
    wait("the slow reply that spanned the outage", lambda: "echo: a slow one #slow" in assistant_texts(sid), 40)
    step("the slow reply that spanned the outage landed", True)
    wait("the reply to the message sent during the outage", lambda: "echo: sent during the outage" in assistant_texts(sid), 60)
    step("the message sent during the outage was delivered and answered after recovery", True)
    wait("typing cleared", lambda: not api("GET", f"/api/sessions/{sid}/typing")[1], 10)

    # ---------------------------------------------------------------- rotate the callback token (a URL leaked)
    st, rot = api("POST", "/api/settings/callback-token/rotate")
    r = remote_post(token, "old token after rotation")
    step("after a one-click rotation the old token is refused through the tunnel", r["http"] == 401, json.dumps(r))
    api("POST", f"/api/sessions/{sid}/messages", {"text": "after rotation"})
    wait("a reply with the new token", lambda: "echo: after rotation" in assistant_texts(sid), 30)
    step("replies keep arriving with the new token", True)

    # ---------------------------------------------------------------- optional: the real Hermes adapter
    want = a.hermes
    hermes_ok = (REPO / ".peers" / "hermes-venv").exists() or os.environ.get("STAGEWHISPER_PEERS_DIR")
    if want == "yes" or (want == "auto" and hermes_ok):
        hermes = Proc("remote hermes", in_remote(ns, [sys.executable, str(HERE / "remote_hermes.py"), "--port", str(HERMES_PORT),
                                                       "--token", RELAY_TOKEN, "--allow", ORIGIN]),
                      work / "hermes.log", stdout_pipe=True)
        line = hermes.p.stdout.readline().decode(errors="replace")
        step("the real Hermes adapter runs on the remote host", bool(line) and json.loads(line)["event"] == "ready",
             line.strip() or hermes.tail())
        ssh.stop()
        wait("the old reverse forward to close", lambda: not tcp_open(REMOTE_IP, PUBLIC_PORT), 20)
        hport = free_port()
        ssh = ssh_up(hport, HERMES_PORT, "ssh-hermes")
        wait("tunnel online", lambda: api("GET", "/api/tunnel")[1]["state"] == "online", 30)
        api("PUT", "/api/assistant", {"base_url": f"http://127.0.0.1:{hport}", "relay_token": RELAY_TOKEN})
        wait("Hermes online", lambda: api("GET", "/api/assistant")[1]["status"] == "online", 60)
        st, call2 = api("POST", "/api/calls", {"title": "hermes call"})
        sid2 = call2["session_id"]
        api("POST", f"/api/sessions/{sid2}/messages", {"text": "hello hermes"})
        texts = wait("Hermes' reply through the tunnel", lambda: assistant_texts(sid2), 90)
        step("the real Hermes adapter's reply came through ssh -R into the conversation", True, repr(texts[0][:80]))
        hermes.stop(timeout=25)

    # ---------------------------------------------------------------- stop the tunnel
    st, off = api("DELETE", "/api/tunnel")
    step("DELETE /api/tunnel -> off, loopback advertised again", off["state"] == "off" and off["callback_url"] == local_url)
    r = remote_post(api("GET", "/api/settings")[1]["callback_token"], "after the tunnel was turned off")
    step("with the tunnel off its Host is refused (403 bad_host)", r["http"] == 403 and r["answer"].get("error") == "bad_host", json.dumps(r))
    wait("a tunnel off line on stdout", lambda: any(e.get("event") == "tunnel" and e.get("state") == "off" for e in events), 10)
    step("headless prints the off line", True)
    app.stop()
    step("the app exits cleanly on SIGTERM", app.p.returncode == 0, f"rc={app.p.returncode}")


if __name__ == "__main__":
    sys.exit(main())
