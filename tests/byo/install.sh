#!/usr/bin/env bash
# Idempotent installer for the real BYO relay plugins that tests/byo/run.sh drives.
#
#   tests/byo/install.sh           # install (or verify) everything
#
# Under <repo>/.peers/ (gitignored), or $STAGEWHISPER_PEERS_DIR:
#   byo-hermes-venv/  a venv of its own: hermes-agent 0.19.0 + hermes-plugin-stagewhisper 0.29.0
#                     (that plugin and hermes-platform-stagewhisper both install the module
#                     `hermes_stagewhisper_plugin` and the script `stagewhisper-hermes`, so
#                     they cannot share the interop suite's hermes-venv)
#   openclaw/, openclaw-template/, pkgs/, node-venv/   openclaw 2026.3.23 + the
#                     @stagewhisper/stagewhisper 0.64.0 plugin: tests/interop/install_peers.sh
#   gateway/          openclaw 2026.9.6: tests/gateway/install.sh
# Quick (seconds) when everything is there. Needs python3 >= 3.11 with venv, PyPI and npm.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
PEERS="${STAGEWHISPER_PEERS_DIR:-$REPO/.peers}"
HERMES_AGENT_SPEC="${BYO_HERMES_AGENT_SPEC:-hermes-agent==0.19.0}"
HERMES_PLUGIN_SPEC="${BYO_HERMES_PLUGIN_SPEC:-hermes-plugin-stagewhisper==0.29.0}"
SUITES="${SW_BYO_SUITES:-hermes openclaw openclaw-2026.9}"

log() { printf '[byo-install %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }
mkdir -p "$PEERS"
T_ALL=$SECONDS

# ---------------------------------------------------------------- Hermes BYO plugin
if [[ " $SUITES " == *" hermes "* ]]; then
  HV="$PEERS/byo-hermes-venv"
  PY="${PYTHON:-python3}"
  "$PY" -c 'import sys; assert sys.version_info >= (3, 11), sys.version' \
    || die "python3 >= 3.11 required (hermes-agent needs >=3.11,<3.14)"
  if [[ ! -x "$HV/bin/python" ]] || ! "$HV/bin/python" -c 'import sys' >/dev/null 2>&1; then
    if ! "$PY" -c 'import ensurepip, venv' >/dev/null 2>&1; then
      log "apt-get install python3-venv"
      DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends python3-venv >&2
    fi
    rm -rf "$HV"
    log "creating venv $HV"
    "$PY" -m venv "$HV"
  fi
  if "$HV/bin/python" - "$HERMES_AGENT_SPEC" "$HERMES_PLUGIN_SPEC" >/dev/null 2>&1 <<'PYEOF'
import sys
from importlib.metadata import version
for spec in sys.argv[1:]:
    name, want = spec.split("==")
    assert version(name) == want, spec
PYEOF
  then
    log "hermes BYO plugin already installed"
  else
    log "pip install $HERMES_AGENT_SPEC $HERMES_PLUGIN_SPEC (a minute or two)"
    "$HV/bin/python" -m pip install -q --disable-pip-version-check --only-binary=:all: \
      "$HERMES_AGENT_SPEC" "$HERMES_PLUGIN_SPEC" >&2
  fi
  [[ -x "$HV/bin/hermes" ]] || die "no hermes in $HV/bin"
  [[ -x "$HV/bin/stagewhisper-hermes" ]] || die "no stagewhisper-hermes in $HV/bin"
fi

# ---------------------------------------------------------------- OpenClaw 2026.3.23 + plugin
if [[ " $SUITES " == *" openclaw "* ]]; then
  if [[ -f "$PEERS/openclaw/node_modules/openclaw/openclaw.mjs" \
        && -f "$PEERS/openclaw-template/extensions/stagewhisper/package.json" ]]; then
    log "openclaw 2026.3.23 + plugin already installed"
  else
    STAGEWHISPER_PEERS_DIR="$PEERS" "$REPO/tests/interop/install_peers.sh" >/dev/null
  fi
fi

# ---------------------------------------------------------------- OpenClaw 2026.9.6
if [[ " $SUITES " == *" openclaw-2026.9 "* ]]; then
  if [[ -f "$PEERS/gateway/env.sh" ]]; then
    log "openclaw 2026.9.6 already installed"
  else
    SW_GATEWAY_PEER_DIR="$PEERS/gateway" "$REPO/tests/gateway/install.sh" >/dev/null
  fi
  # The plugin tarball comes from the interop install (npm pack).
  ls "$PEERS"/pkgs/stagewhisper-stagewhisper-0.64.*.tgz >/dev/null 2>&1 \
    || STAGEWHISPER_PEERS_DIR="$PEERS" "$REPO/tests/interop/install_peers.sh" >/dev/null
fi
log "done ($((SECONDS - T_ALL)) s)"
