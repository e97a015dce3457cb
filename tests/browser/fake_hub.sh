#!/usr/bin/env bash
# Builds the test-only fake clawborrator hub (stagewhisper-core's example `fake_hub`, behind the
# `fake-hub` feature; never in the shipped binaries) that tests/browser/permission.test.mjs
# starts: target/debug/examples/fake_hub.
set -euo pipefail
cd "$(dirname "$0")/../.."
cargo build --quiet -p stagewhisper-core --features fake-hub --example fake_hub
