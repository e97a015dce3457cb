#!/usr/bin/env python3
"""The real Hermes adapter as the remote assistant (optional phase of the tunnel e2e).

Runs inside the remote namespace: the stub model plus `hermes gateway run` with the
StageWhisper adapter (from tests/interop, installed by tests/interop/install_peers.sh),
configured as a remote user would: `STAGEWHISPER_ALLOW_CALLBACK_URLS=<the desktop's tunnel
origin>`. Prints one JSON line when ready, then runs until SIGTERM.

    remote_hermes.py --port P --token T --allow ORIGIN
"""
from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "interop"))

from peers import HermesPeer  # noqa: E402
from stub_model import StubModelServer  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--token", required=True)
    ap.add_argument("--allow", required=True, help="the desktop's tunnel origin")
    a = ap.parse_args()
    host = urlsplit(a.allow).hostname or ""
    stub = StubModelServer().start()
    # peers.py points proxies at a dead port; the tunnel origin must bypass them.
    no_proxy = f"127.0.0.1,localhost,::1,{host}"
    peer = HermesPeer(
        model_base_url=stub.base_url,
        port=a.port,
        token=a.token,
        extra_env={
            "STAGEWHISPER_ALLOW_CALLBACK_URLS": a.allow,
            "NO_PROXY": no_proxy,
            "no_proxy": no_proxy,
        },
    )
    peer.start()
    try:
        peer.wait_ready(90)
    except BaseException:
        peer.close()
        stub.stop()
        raise
    print(json.dumps({"event": "ready", "port": a.port, "log": str(peer.log_path)}), flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    peer.close()  # stops it and removes its temp home
    stub.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
