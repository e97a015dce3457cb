"""The clawborrator hub for the desktop window test (desktop.py): permission requests come from
the `clawborrator` assistant kind, whose hub is not public, so this drives the test-only
conformance fake of it (the example `fake_hub` of the dev-only crate stagewhisper-fake-hub;
built by tests/browser/fake_hub.sh). Everything between the hub and the app is real: the app's
operator client on the hub's `/cli` WebSocket, its permission card, the committed event.

The fake prints `{"url", "session_id", "token"}`, then answers one JSON command a line on stdin
with one JSON line (see the example's header).
"""

import json
import subprocess
from pathlib import Path

import run as w

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_BIN = ROOT / "target" / "debug" / "examples" / "fake_hub"


def ensure_built(path):
    """The fake hub's binary; the default one is built (tests/browser/fake_hub.sh) when absent."""
    if path.exists():
        return path
    if path != DEFAULT_BIN.resolve():
        raise w.Fail(f"no fake hub at {path}")
    w.log("   building the fake clawborrator hub (tests/browser/fake_hub.sh)")
    subprocess.run([str(ROOT / "tests" / "browser" / "fake_hub.sh")], check=True, timeout=900)
    return path


class FakeHub:
    def __init__(self, binary, procs, err_path):
        with open(err_path, "wb") as err:
            self.proc = procs.start([str(binary)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
        line, rest = w.read_line(self.proc, 15)
        if rest:
            raise w.Fail(f"the fake hub printed more than its first line: {rest!r}")
        self.info = json.loads(line)

    def cmd(self, **obj):
        self.proc.stdin.write((json.dumps(obj) + "\n").encode())
        self.proc.stdin.flush()
        line, rest = w.read_line(self.proc, 15)
        if rest:
            raise w.Fail(f"the fake hub answered more than one line: {rest!r}")
        answer = json.loads(line)
        if not answer.get("ok"):
            raise w.Fail(f"the fake hub refused {obj}: {answer}")
        return answer

    def permission(self, request_id, tool, preview):
        self.cmd(cmd="permission", request_id=request_id, tool=tool, input_preview=preview)

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=10)


def use_hub(api, hub):
    """Makes the app's active assistant the `clawborrator` kind on `hub` (PUT /api/assistant, as
    Settings → Assistant does) and waits until it is online. `api(method, path, body)` answers
    (status, body)."""
    status, body = api("PUT", "/api/assistant", {
        "kind": "clawborrator",
        "hub_url": hub.info["url"],
        "session_token": hub.info["token"],
        "session_id": hub.info["session_id"],
    })
    if status != 200:
        raise w.Fail(f"PUT /api/assistant (clawborrator): {status} {body}")
    last = {}

    def online():
        nonlocal last
        _, last = api("GET", "/api/assistant", None)
        return isinstance(last, dict) and last.get("kind") == "clawborrator" and last.get("status") == "online"

    try:
        w.wait_for("the clawborrator kind to be online", online, 20)
    except w.Fail as e:
        raise w.Fail(f"{e}; last status {last}") from None
