#!/usr/bin/env bash
# The MCP server against a real MCP client (the official Python SDK): tests/mcp/test_mcp.py on
# the built headless binary. Installs the client's venv first when missing (tests/mcp/install.sh).
#
#   tests/mcp/run.sh                                   # target/debug/stagewhisper-headless
#   STAGEWHISPER_BIN=target/release/stagewhisper-headless tests/mcp/run.sh
#
# Ends with `N passed, M failed`; exits non-zero on any failure. About 5 s once installed.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
VENV="${SW_MCP_DIR:-$REPO/.peers/mcp}/venv"
"$HERE/install.sh"
export STAGEWHISPER_BIN="${STAGEWHISPER_BIN:-$REPO/target/debug/stagewhisper-headless}"
[[ -x "$STAGEWHISPER_BIN" ]] || { echo "no binary at $STAGEWHISPER_BIN (cargo build first)" >&2; exit 1; }
exec "$VENV/bin/python" "$HERE/test_mcp.py"
