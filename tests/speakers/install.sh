#!/usr/bin/env bash
# Idempotent installer of the ONNX Runtime shared library the speaker tests load
# (libonnxruntime.so, from the PyPI wheel `onnxruntime`, pinned below; no Python code of it runs).
#
#   tests/speakers/install.sh          # install (or verify) it; prints the library's path
#   tests/speakers/install.sh --check  # exit 0 when installed, 1 otherwise
#
# Goes to <repo>/.peers/onnxruntime (gitignored), or $SW_ORT_DIR. Needs python3 with pip and
# the PyPI registry, only here: the tests read the library from disk (ORT_DYLIB_PATH, or this
# folder). The speaker model itself is in the repository (tests/fixtures/speakers/).
set -euo pipefail

VERSION=1.32.0
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
DIR="${SW_ORT_DIR:-$REPO/.peers/onnxruntime}"
LIB="$DIR/onnxruntime/capi/libonnxruntime.so.$VERSION"

log() { printf '[onnxruntime-install %(%H:%M:%S)T] %s\n' -1 "$*" >&2; }

case "${1:-}" in
  --check)
    if [[ -f "$LIB" ]]; then echo "$LIB"; exit 0; fi
    log "not installed (run tests/speakers/install.sh)"; exit 1 ;;
  "") ;;
  *) log "unknown option $1 (--check)"; exit 2 ;;
esac

if [[ -f "$LIB" ]]; then
  log "already installed: $LIB"
  echo "$LIB"
  exit 0
fi

PY="${PYTHON:-python3}"
command -v "$PY" >/dev/null 2>&1 || { log "python3 is required"; exit 1; }
rm -rf "$DIR.tmp"
log "pip install onnxruntime==$VERSION (the wheel only, no dependencies)"
"$PY" -m pip install --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  --target "$DIR.tmp" "onnxruntime==$VERSION" >&2
[[ -f "$DIR.tmp/onnxruntime/capi/libonnxruntime.so.$VERSION" ]] || { log "the wheel has no libonnxruntime.so.$VERSION"; exit 1; }
rm -rf "$DIR"
mv "$DIR.tmp" "$DIR"
log "installed: $LIB"
echo "$LIB"
