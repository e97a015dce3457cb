#!/usr/bin/env bash
# The BYO relay against the REAL plugins: a whole call through the real app (the
# stagewhisper-headless binary, driven over its control API) with each plugin, offline, in one
# loopback-only network namespace, with a stub model and a recording proxy for the wire check.
# Ends with "N passed, N failed" (see byo_call.py for the steps).
#
#   tests/byo/run.sh                              # every plugin
#   SW_BYO_SUITES="hermes openclaw" tests/byo/run.sh
#
# SW_BYO_SUITES: any of `hermes` (hermes-plugin-stagewhisper 0.29.0 in hermes-agent 0.19.0),
# `openclaw` (@stagewhisper/stagewhisper 0.64.0, sse transport, in openclaw 2026.3.23),
# `openclaw-2026.9` (the same plugin in openclaw 2026.9.6). Installs what is missing
# (install.sh; needs PyPI and npm once), builds the binary unless STAGEWHISPER_BIN points at
# one. SW_BYO_KEEP=1 keeps the temp dirs and logs.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
cd "$REPO"
export SW_BYO_SUITES="${SW_BYO_SUITES:-hermes openclaw openclaw-2026.9}"

"$HERE/install.sh"

if [[ -z "${STAGEWHISPER_BIN:-}" ]]; then
  echo "== cargo build (the binary under test)"
  cargo build --quiet -p stagewhisper-headless
  STAGEWHISPER_BIN="${CARGO_TARGET_DIR:-$REPO/target}/debug/stagewhisper-headless"
fi
export STAGEWHISPER_BIN

echo "== BYO plugins: $SW_BYO_SUITES ($STAGEWHISPER_BIN)"
exec "$REPO/tests/interop/in_netns.sh" python3 "$HERE/byo_call.py"
