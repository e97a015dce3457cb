#!/usr/bin/env bash
# The short soak CI runs: 40 call-minutes (10 of warm-up) of an assistant's traffic at ×20 (about two minutes),
# with the UI open in headless Chromium when it is installed. The full three-hour-equivalent run
# is `tests/soak/soak.py --minutes 180` (see tests/soak/README.md); it is not part of CI.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin="${STAGEWHISPER_BIN:-target/debug/stagewhisper-headless}"
browser=()
if command -v chromium >/dev/null 2>&1; then
  browser=(--browser)
fi
mkdir -p tests/artifacts
python3 tests/soak/soak.py --bin "$bin" --minutes "${SOAK_MINUTES:-40}" --warmup "${SOAK_WARMUP:-10}" --scale "${SOAK_SCALE:-20}" \
  "${browser[@]}" --out tests/artifacts/soak-short
