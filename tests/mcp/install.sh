#!/usr/bin/env bash
# Idempotent installer of the MCP client the black-box tests use (tests/mcp/test_mcp.py): a
# Python venv with the official Python MCP SDK, every package pinned in requirements.txt.
#
#   tests/mcp/install.sh            # install (or verify) it
#   tests/mcp/install.sh --check    # exit 0 when installed and importable, 1 otherwise
#
# The venv goes to <repo>/.peers/mcp/venv (gitignored), or $SW_MCP_DIR/venv. Needs python3 >= 3.10
# with venv and the PyPI registry.
# Cost, measured on the shared 2-core machine: 46 s with an empty pip cache (PIP_NO_CACHE_DIR=1);
# the venv takes 70 MB; a second run (already installed) takes under a second.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
DIR="${SW_MCP_DIR:-$REPO/.peers/mcp}"
VENV="$DIR/venv"
REQ="$HERE/requirements.txt"
STAMP="$VENV/.requirements.sha256"

log() { printf '[mcp-install %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

want="$(sha256sum "$REQ" | cut -d' ' -f1)"
installed() {
  [[ -x "$VENV/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$want" ]] &&
    "$VENV/bin/python" -c 'import mcp, mcp.client.streamable_http, httpx2' >/dev/null 2>&1
}

case "${1:-}" in
  --check)
    if installed; then log "installed in $VENV"; exit 0; fi
    log "not installed (run tests/mcp/install.sh)"; exit 1 ;;
  "") ;;
  *) die "unknown option $1 (--check)" ;;
esac

if installed; then
  log "already installed in $VENV"
  exit 0
fi
PY="${PYTHON:-python3}"
"$PY" -c 'import ensurepip, venv' >/dev/null 2>&1 || die "python3 -m venv needs python3-venv (apt-get install python3-venv)"
log "installing the MCP SDK into $VENV"
rm -rf "$VENV"
mkdir -p "$DIR"
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check --only-binary=:all: -r "$REQ" >&2
printf '%s' "$want" > "$STAMP"
installed || die "installed, but the SDK does not import"
log "installed in $VENV"
