#!/usr/bin/env bash
# Builds the test-only fake clawborrator hub (the example `fake_hub` of the dev-only crate
# stagewhisper-fake-hub; no product crate depends on it) that tests/browser/permission.test.mjs
# and tests/window/desktop.py start: target/debug/examples/fake_hub.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --quiet -p stagewhisper-fake-hub --example fake_hub
