#!/usr/bin/env bash
# Control one offline OpenClaw gateway for the real-gateway test (used by run.sh and by the
# Rust test through $SW_GATEWAY_CTL). Everything lives in $SW_GATEWAY_DIR (openclaw.json,
# state, logs, pid); run.sh writes the config and exports the variables.
#
#   gwctl.sh start      start `openclaw gateway run` in the background, wait for "[gateway] ready"
#   gwctl.sh stop       SIGTERM, wait until it has exited (it first finishes active runs)
#   gwctl.sh kill       SIGKILL
#   gwctl.sh restart    stop + start
#   gwctl.sh cli ARGS   run `openclaw ARGS` against the same state dir (e.g. devices approve ID)
set -euo pipefail
: "${SW_GATEWAY_DIR:?}" "${SW_GATEWAY_NODE:?}" "${SW_OPENCLAW_MJS:?}" "${SW_GATEWAY_PORT:?}" "${SW_GATEWAY_TOKEN:?}"
D="$SW_GATEWAY_DIR"
PIDF="$D/gateway.pid"

oc_env() {
  env -i PATH="$(dirname "$SW_GATEWAY_NODE"):/usr/local/bin:/usr/bin:/bin" HOME="$D/home" \
    OPENCLAW_STATE_DIR="$D/state" OPENCLAW_CONFIG_PATH="$D/openclaw.json" \
    OPENCLAW_NO_RESPAWN=1 NO_COLOR=1 \
    HTTP_PROXY=http://127.0.0.1:9 HTTPS_PROXY=http://127.0.0.1:9 ALL_PROXY=http://127.0.0.1:9 \
    NO_PROXY=127.0.0.1,localhost,::1 NODE_USE_ENV_PROXY=1 \
    "$@"
}

# The gateway's helpers (spawn broker, sqlite workers) start sessions of their own and hold the
# state lock too, so "the gateway" is the main process and every descendant of it; the
# descendants are remembered while they still hang under it, and stopped with it.
main_pid() { cat "$PIDF" 2>/dev/null || true; }
descendants() { # pid -> all descendant pids
  local kids; kids=$(ps -o pid= --ppid "$1" 2>/dev/null || true)
  for k in $kids; do echo "$k"; descendants "$k"; done
}
remember_tree() {
  local pid; pid=$(main_pid); [[ -n "$pid" ]] || return 0
  { cat "$D/gateway.tree" 2>/dev/null || true; descendants "$pid"; } | sort -u >"$D/gateway.tree.new"
  mv "$D/gateway.tree.new" "$D/gateway.tree"
}
tree_alive() {
  local p
  for p in $(main_pid) $(cat "$D/gateway.tree" 2>/dev/null || true); do
    kill -0 "$p" 2>/dev/null && return 0
  done
  return 1
}
signal_tree() { # SIG
  local p
  for p in $(main_pid) $(cat "$D/gateway.tree" 2>/dev/null || true); do
    kill "-$1" "$p" 2>/dev/null || true
  done
}
running() { local pid; pid=$(main_pid); [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; }

start() {
  if tree_alive; then echo "gateway already running (pid $(cat "$PIDF"))"; return 0; fi
  local n; n=$(find "$D" -maxdepth 1 -name 'gateway-*.log' | wc -l)
  local log="$D/gateway-$((n + 1)).log"
  local t0=$SECONDS
  rm -f "$D/gateway.tree"
  oc_env "$SW_GATEWAY_NODE" "$SW_OPENCLAW_MJS" gateway run --port "$SW_GATEWAY_PORT" \
    --bind loopback --auth token --token "$SW_GATEWAY_TOKEN" --ws-log compact \
    >"$log" 2>&1 </dev/null &
  echo $! >"$PIDF"
  for _ in $(seq 1 1800); do
    remember_tree
    if grep -q '\[gateway\] ready' "$log" 2>/dev/null; then
      echo "gateway ready after $((SECONDS - t0)) s (pid $(cat "$PIDF"), log $log)"
      return 0
    fi
    if ! running; then echo "gateway exited during start-up:"; tail -40 "$log"; return 1; fi
    sleep 0.2
  done
  echo "gateway not ready after 360 s:"; tail -40 "$log"; return 1
}

stop() {
  tree_alive || { rm -f "$PIDF" "$D/gateway.tree"; return 0; }
  remember_tree
  local t0=$SECONDS
  local pid; pid=$(main_pid)
  # SIGTERM to the main process: it finishes active runs, sends `shutdown`, closes with 1012.
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 1800); do
    if kill -0 "$pid" 2>/dev/null; then remember_tree; else signal_tree TERM; fi
    tree_alive || { rm -f "$PIDF" "$D/gateway.tree"; echo "gateway stopped after $((SECONDS - t0)) s"; return 0; }
    sleep 0.2
  done
  echo "gateway did not stop after 360 s; killing it"; signal_tree KILL; rm -f "$PIDF" "$D/gateway.tree"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  kill) remember_tree; signal_tree KILL; rm -f "$PIDF" "$D/gateway.tree" ;;
  restart) stop; start ;;
  cli) shift; oc_env timeout 120 "$SW_GATEWAY_NODE" "$SW_OPENCLAW_MJS" "$@" ;;
  *) echo "usage: $0 start|stop|kill|restart|cli ARGS..." >&2; exit 2 ;;
esac
