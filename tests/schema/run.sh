#!/usr/bin/env bash
# The control API against its own OpenAPI document: schemathesis generates requests from
# `GET /api/openapi.json` of the real headless binary and checks every answer (no 5xx; status
# codes, content types and bodies as documented). Bounded: a few dozen cases per route.
#
#   STAGEWHISPER_BIN=target/debug/stagewhisper tests/schema/run.sh
#   tests/schema/run.sh --install-only     # only the venv (run-tests does it in the background)
#
# Needs python3 with venv (Debian: python3-venv) and PyPI for the first run; the venv is kept
# in target/schema-venv (or $STAGEWHISPER_SCHEMA_VENV). Exits non-zero on any failure.
#
# Not fuzzed: `GET /api/events` (an endless SSE stream; covered by tests/headless_cli.rs) and
# `POST /api/tunnel` (it would start a tunnel to whatever host the generator picks) and
# `POST /api/assistant/clawborrator/sessions` (it would call whatever hub the generator picks).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
SCHEMATHESIS_SPEC="${SCHEMATHESIS_SPEC:-schemathesis==4.32.5}"
VENV="${STAGEWHISPER_SCHEMA_VENV:-$REPO/target/schema-venv}"
MAX_EXAMPLES="${SCHEMA_MAX_EXAMPLES:-25}"
MAX_TIME="${SCHEMA_MAX_TIME:-180}"

log() { printf '[schema %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# ---------------------------------------------------------------- the venv
PY="${PYTHON:-python3}"
if ! "$PY" -c 'import ensurepip, venv' >/dev/null 2>&1; then
  command -v apt-get >/dev/null 2>&1 && [[ $(id -u) == 0 ]] || die "python3 -m venv needs python3-venv: apt-get install python3-venv"
  log "apt-get install python3-venv"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends python3-venv >&2
fi
want="${SCHEMATHESIS_SPEC#*==}"
have="$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("schemathesis"))' 2>/dev/null || true)"
if [[ "$have" != "$want" ]]; then
  log "installing $SCHEMATHESIS_SPEC into $VENV"
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/pip" install -q --disable-pip-version-check "$SCHEMATHESIS_SPEC" >&2
fi
if [[ "${1:-}" == "--install-only" ]]; then
  log "$SCHEMATHESIS_SPEC is installed in $VENV"
  exit 0
fi

BIN="${STAGEWHISPER_BIN:-$REPO/target/debug/stagewhisper}"
[[ -x "$BIN" ]] || die "no binary at $BIN (cargo build first, or set STAGEWHISPER_BIN)"

# ---------------------------------------------------------------- the app
TMP="$(mktemp -d)"
APP_PID=""
PULSE_PID=""
cleanup() {
  if [[ -n "$APP_PID" ]] && kill -0 "$APP_PID" 2>/dev/null; then
    kill -TERM "$APP_PID" 2>/dev/null || true
    wait "$APP_PID" 2>/dev/null || true
  fi
  if [[ -n "$PULSE_PID" ]]; then
    kill "$PULSE_PID" 2>/dev/null || true
    wait "$PULSE_PID" 2>/dev/null || true
  fi
  rm -rf "$TMP"
}
trap cleanup EXIT
mkdir -p "$TMP/data" "$TMP/pulse"
# A private sound server (as the hearing tests start one): a call output, a microphone fed by a
# second null sink. The audio routes then answer as on a user's machine (sources, meters, a test
# recording of silence) instead of 503 audio_unavailable, which schemathesis counts as a server
# error.
command -v pulseaudio >/dev/null || die "pulseaudio is needed (apt-get install pulseaudio pulseaudio-utils)"
env -u DISPLAY -u DBUS_SESSION_BUS_ADDRESS HOME="$TMP/pulse" XDG_RUNTIME_DIR="$TMP/pulse" \
  XDG_CONFIG_HOME="$TMP/pulse/config" pulseaudio -n --daemonize=no --use-pid-file=no \
  --exit-idle-time=-1 --disallow-exit --disable-shm --log-target=stderr \
  -L "module-native-protocol-unix socket=$TMP/pulse/native auth-anonymous=1" \
  -L "module-null-sink sink_name=call rate=48000 channels=2" \
  -L "module-null-sink sink_name=micfeed rate=48000 channels=1" \
  -L "module-remap-source master=micfeed.monitor source_name=mic" 2>"$TMP/pulse.log" &
PULSE_PID=$!
export PULSE_SERVER="unix:$TMP/pulse/native"
for _ in $(seq 1 100); do
  [[ -S "$TMP/pulse/native" ]] && HOME="$TMP/pulse" pactl set-default-source mic 2>/dev/null && break
  kill -0 "$PULSE_PID" 2>/dev/null || { cat "$TMP/pulse.log" >&2; die "pulseaudio exited"; }
  sleep 0.1
done
HOME="$TMP/pulse" pactl set-default-sink call
# No tunnel authtoken and no fault injection: the run must not reach beyond loopback.
env -u NGROK_AUTHTOKEN -u STAGEWHISPER_TEST_FAULT_INJECTION RUST_LOG="${RUST_LOG:-warn}" \
  "$BIN" --headless --data-dir "$TMP/data" >"$TMP/stdout" 2>"$TMP/stderr" &
APP_PID=$!
for _ in $(seq 1 300); do
  [[ -s "$TMP/stdout" ]] && head -n1 "$TMP/stdout" | grep -q '}' && break
  kill -0 "$APP_PID" 2>/dev/null || { cat "$TMP/stderr" >&2; die "the app exited before it was ready"; }
  sleep 0.1
done
READY="$(head -n1 "$TMP/stdout")"
[[ -n "$READY" ]] || { cat "$TMP/stderr" >&2; die "no ready line within 30 s"; }
read -r UI_URL UI_TOKEN < <("$PY" -c 'import json,sys; r=json.loads(sys.argv[1]); assert r["event"]=="ready"; print(r["ui_url"], r["ui_token"])' "$READY")
log "app ready at $UI_URL"

# ---------------------------------------------------------------- the run
# Left out, because they reach whatever address they are given or name and this run must stay on
# loopback: the engine check (`check_engine` makes a request to the generated server URL) and a
# model download (`download` fetches from the model's public home). Their black-box tests run
# against loopback servers (tests live_view, models).
set +e
"$VENV/bin/st" run "${UI_URL}api/openapi.json" \
  --url "${UI_URL%/}" \
  -H "Authorization: Bearer $UI_TOKEN" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
  --phases examples,coverage,fuzzing \
  --max-examples "$MAX_EXAMPLES" \
  --max-time "$MAX_TIME" \
  --request-timeout 30 \
  --exclude-operation-id event_stream \
  --exclude-operation-id post_tunnel \
  --exclude-operation-id hub_sessions \
  --exclude-operation-id check_engine \
  --exclude-operation-id download \
  --seed "${SCHEMA_SEED:-20261201}" \
  --generation-database none \
  --no-color
rc=$?
set -e
if [[ $rc != 0 ]]; then
  log "schemathesis failed (exit $rc); the app's log:"
  tail -n 50 "$TMP/stderr" >&2
  exit "$rc"
fi
kill -0 "$APP_PID" 2>/dev/null || die "the app died during the run"
log "control API matches its schema"
