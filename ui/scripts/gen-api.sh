#!/bin/sh
# Regenerates src/api.gen.ts, the control API's wire types, from the OpenAPI document the core
# prints (`stagewhisper-headless openapi`: no running app needed), with openapi-typescript.
# Run from ui/ as `npm run gen:api`; STAGEWHISPER_BIN names the binary (default: the debug build).
# CI runs it and fails when the committed file differs (run-tests, "UI wire types").
set -eu
bin=${STAGEWHISPER_BIN:-../target/debug/stagewhisper-headless}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$bin" openapi --output "$tmp/openapi.json"
openapi-typescript "$tmp/openapi.json" --output src/api.gen.ts
