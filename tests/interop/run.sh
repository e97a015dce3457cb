#!/usr/bin/env bash
# The interop suite of the assistant link: our real binary against the real peers (Hermes
# adapter 0.43 in three profiles, OpenClaw 2026.3.23 + plugin 0.64), offline, inside one
# loopback-only network namespace, with a stub model. Ends with "N passed, N failed".
#
#   tests/interop/run.sh [unittest args, e.g. -k OpenClaw]
#
# Installs the peers into .peers/ if they are missing (install_peers.sh; needs the registries
# once), builds the binary (cargo build) unless STAGEWHISPER_BIN points at one, then runs
# test_assistant_link.py under in_netns.sh. Caches nothing between runs: every peer, app data
# dir and log lives in a temp dir that is removed afterwards.
# Env: STAGEWHISPER_BIN, SW_INTEROP_JSON=FILE (save every test's conversation),
#      SW_INTEROP_TURN_TIMEOUT (s, default 60), SW_INTEROP_QUIET=1.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
cd "$REPO"

if ! python3 "$HERE/peers.py" check >/dev/null 2>&1; then
  echo "== installing the peers (tests/interop/install_peers.sh)"
  "$HERE/install_peers.sh"
fi

if [[ -z "${STAGEWHISPER_BIN:-}" ]]; then
  echo "== cargo build (the binary under test)"
  cargo build --quiet --bin stagewhisper
  STAGEWHISPER_BIN="${CARGO_TARGET_DIR:-$REPO/target}/debug/stagewhisper"
fi
export STAGEWHISPER_BIN

echo "== interop suite ($STAGEWHISPER_BIN)"
exec "$HERE/in_netns.sh" python3 "$HERE/test_assistant_link.py" "$@"
