#!/usr/bin/env bash
# The real-gateway tests, against the real npm `openclaw` 2026.9.6 gateway, offline, inside a
# loopback-only network namespace, with the stub model of tests/interop/stub_model.py:
#   client  our OpenClaw Gateway client (crates/stagewhisper-core/tests/gateway_real.rs);
#   app     the real app, the stagewhisper-headless binary driven over its control API and
#           event stream, through the gateway (crates/stagewhisper-headless/tests/gateway_app.rs).
# Both run on the same gateway, in that order.
#
#   tests/gateway/run.sh [extra args for the test binaries, e.g. a test name]
#   SW_GATEWAY_SUITES="app" tests/gateway/run.sh      # only one of them
#
# Installs Node 24 + openclaw into .peers/gateway/ when missing (tests/gateway/install.sh),
# builds the test outside the namespace, then inside it (`unshare -n`, `lo` up): starts the stub
# model, writes openclaw.json (token auth, autoApproveLocal: false so pairing is exercised),
# starts `openclaw gateway run`, waits for "[gateway] ready" and runs
# the suites with `--ignored`. Everything lives in a temp dir removed afterwards
# (SW_GATEWAY_KEEP=1 keeps it and prints where).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
PEER_DIR="${SW_GATEWAY_PEER_DIR:-$REPO/.peers/gateway}"
cd "$REPO"

if [[ "${SW_IN_NETNS:-}" != "1" ]]; then
  echo "== install (tests/gateway/install.sh)"
  "$HERE/install.sh"
  echo "== build the tests"
  # `--workspace` (not `-p`): the features then unify as in `cargo test --workspace`, so after
  # it this is a no-op (with `-p` it compiled the core, the CLI and the binary again: 39 s cold).
  cargo test --workspace --test gateway_real --test gateway_app --no-run
  echo "== run inside a loopback-only network namespace"
  exec "$REPO/tests/interop/in_netns.sh" "$HERE/run.sh" "$@"
fi

# ---------------------------------------------------------------- inside the namespace
# shellcheck disable=SC1091
source "$PEER_DIR/env.sh"
D="$(mktemp -d -t sw-gateway.XXXXXX)"
STUB_PID=""
cleanup() {
  local rc=$?
  SW_GATEWAY_DIR="$D" "$HERE/gwctl.sh" kill >/dev/null 2>&1 || true
  [[ -n "$STUB_PID" ]] && kill "$STUB_PID" 2>/dev/null || true
  if [[ $rc -ne 0 || "${SW_GATEWAY_KEEP:-}" == "1" ]]; then
    for f in "$D"/gateway-*.log; do
      [[ -f "$f" ]] && { echo "---- tail of $f"; tail -30 "$f"; }
    done
  fi
  if [[ "${SW_GATEWAY_KEEP:-}" == "1" ]]; then echo "kept $D"; else rm -rf "$D"; fi
  exit $rc
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# stub model
STUB_SLOW_TOKEN_DELAY="${STUB_SLOW_TOKEN_DELAY:-0.4}" python3 "$REPO/tests/interop/stub_model.py" --port 0 \
  --log "$D/stub-requests.jsonl" >"$D/stub.out" 2>"$D/stub.err" &
STUB_PID=$!
for _ in $(seq 1 100); do grep -q '"ready"' "$D/stub.out" 2>/dev/null && break; sleep 0.1; done
STUB_PORT="$(python3 -c 'import json,sys; print(json.loads(open(sys.argv[1]).readline())["port"])' "$D/stub.out")"

PORT="$(free_port)"
TOKEN="sw-gateway-test-$(python3 -c 'import secrets; print(secrets.token_hex(12))')"
mkdir -p "$D/home" "$D/state" "$D/workspace"
python3 - "$D" "$PORT" "$TOKEN" "$STUB_PORT" <<'PY'
import json, sys
d, port, token, stub = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
cfg = {
    "gateway": {"mode": "local", "port": port, "bind": "loopback",
                "auth": {"mode": "token", "token": token},
                "nodes": {"pairing": {"autoApproveLocal": False}}},
    "update": {"checkOnStart": False},
    "telemetry": {"enabled": False},
    "agents": {"defaults": {"model": {"primary": "stub/stub-model"}, "workspace": f"{d}/workspace"}},
    "models": {"mode": "merge", "providers": {"stub": {
        "baseUrl": f"http://127.0.0.1:{stub}/v1", "apiKey": "x", "api": "openai-completions",
        "timeoutSeconds": 60,
        "models": [{"id": "stub-model", "name": "Stub", "reasoning": False, "input": ["text"],
                    "cost": {"input": 0, "output": 0, "cacheRead": 0, "cacheWrite": 0},
                    "contextWindow": 128000, "maxTokens": 4096}]}}},
}
json.dump(cfg, open(f"{d}/openclaw.json", "w"), indent=2)
PY

export SW_GATEWAY_DIR="$D" SW_GATEWAY_PORT="$PORT" SW_GATEWAY_TOKEN="$TOKEN"
export SW_GATEWAY_URL="ws://127.0.0.1:$PORT" SW_GATEWAY_CTL="$HERE/gwctl.sh"
export SW_STUB_URL="http://127.0.0.1:$STUB_PORT"
export SW_OPENCLAW_BIN="$SW_OPENCLAW_MJS"
T0=$SECONDS
echo "== start openclaw $SW_OPENCLAW_VERSION gateway on 127.0.0.1:$PORT (stub model on $STUB_PORT)"
"$HERE/gwctl.sh" start
RC=0
for suite in ${SW_GATEWAY_SUITES:-client app}; do
  case "$suite" in
    client) pkg=stagewhisper-core test=gateway_real ;;
    app) pkg=stagewhisper-headless test=gateway_app ;;
    *) echo "unknown suite $suite (client, app)"; exit 2 ;;
  esac
  T1=$SECONDS
  echo "== cargo test --workspace --test $test ($pkg)"
  set +e
  cargo test --offline --workspace --test "$test" -- --ignored --test-threads=1 --nocapture "$@"
  rc=$?
  set -e
  echo "== $suite suite finished in $((SECONDS - T1)) s (exit $rc)"
  [[ $rc -ne 0 ]] && RC=$rc
  # The next suite needs a running gateway (the client suite leaves it running).
  "$HERE/gwctl.sh" start >/dev/null
done
echo "== real-gateway tests finished in $((SECONDS - T0)) s (exit $RC)"
exit $RC
