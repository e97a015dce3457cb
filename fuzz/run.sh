#!/usr/bin/env bash
# Runs every fuzz target (libFuzzer, built as `cargo fuzz` builds them) for a bounded time and
# fails on any crash.
#
#   fuzz/run.sh [TARGET...]          short run: SW_FUZZ_SECONDS (20) seconds a target
#   fuzz/run.sh --long [TARGET...]   long run: SW_FUZZ_RUNS (10,000,000) executions a target, at
#                                    most SW_FUZZ_LONG_SECONDS (7200) seconds each
#   fuzz/run.sh --cmin [TARGET...]   minimise the committed corpora (after seeds.py)
#   fuzz/run.sh --build-only         build every target and stop (run-tests builds them in the
#                                    background, so that its fuzz step only runs them)
#
# SW_FUZZ_JOBS=2 runs two targets at a time; SW_FUZZ_OPT_LEVEL=0 builds faster (CI sets both).
#
# The committed corpus (corpus/TARGET) is read, never written: new inputs go to a scratch
# corpus under target/. A crash leaves its input in artifacts/TARGET/ and fails the run; each
# target's last libFuzzer status line (executions, cov, ft) is printed at the end.
#
# Toolchain: `cargo +nightly` when a nightly toolchain is installed, else the default (stable)
# toolchain with RUSTC_BOOTSTRAP=1 (libfuzzer-sys and the sanitizer-coverage passes are unstable).
#
# No cargo-fuzz needed: the build is the one `cargo fuzz build -s none --debug-assertions`
# (cargo-fuzz 0.13) runs, spelled out below (the same cargo arguments and RUSTFLAGS, so the same
# artefacts in the same place: fuzz/target/<host triple>/release/), and the targets are run
# directly with the libFuzzer arguments `cargo fuzz run` / `cargo fuzz cmin` would pass.
set -euo pipefail
cd "$(dirname "$0")"

mode=short
case "${1:-}" in
  --long) mode=long; shift ;;
  --cmin) mode=cmin; shift ;;
  --build-only) mode=build; shift ;;
esac
ALL=(callback stream_chunk transcript_vtt transcript_srt transcript_jsonl sse gateway_frames hub_frames http_checks byo_envelope)
if [ $# -gt 0 ]; then targets=("$@"); else targets=("${ALL[@]}"); fi

if cargo +nightly --version >/dev/null 2>&1; then
  CARGO=(cargo +nightly)
else
  echo "fuzz: no nightly toolchain; using $(cargo --version) with RUSTC_BOOTSTRAP=1"
  CARGO=(cargo)
  export RUSTC_BOOTSTRAP=1
fi
export CARGO_TERM_COLOR=never
TRIPLE="$(rustc -vV | sed -n 's/^host: //p')"
# Release code with debug assertions and overflow checks on; no sanitizer (safe Rust: the
# address sanitizer finds nothing a panic does not, at twice the cost). These are cargo-fuzz's
# flags for `-s none --debug-assertions` on Linux, in its order (a RUSTFLAGS of the caller's
# comes last, as there): libFuzzer's coverage instrumentation (8-bit counters, PC table,
# comparisons, stack depth), `cfg(fuzzing)`, no branch folding, one codegen unit.
RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 \
-Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table \
-Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing \
-Cllvm-args=-simplifycfg-branch-fold-threshold=0 -Cllvm-args=-sanitizer-coverage-stack-depth \
-Cdebug-assertions -Ccodegen-units=1${RUSTFLAGS:+ $RUSTFLAGS}"
export RUSTFLAGS
# --target: the RUSTFLAGS then reach the targets and their dependencies, not the build scripts.
BUILD=(build --manifest-path "$PWD/Cargo.toml" --target "$TRIPLE" --release
  --config 'profile.release.debug="line-tables-only"' --bins)
BIN_DIR="target/$TRIPLE/release"
# SW_FUZZ_OPT_LEVEL=0 (CI) or 1 builds faster, for slower targets (0: about a tenth of the
# executions of 1 in the same time; every committed input still runs in a 10 s run).
if [ -n "${SW_FUZZ_OPT_LEVEL:-}" ]; then
  export CARGO_PROFILE_RELEASE_OPT_LEVEL="$SW_FUZZ_OPT_LEVEL"
fi

# One build of every target (one cargo run; the dependencies are shared).
mkdir -p target
start=$SECONDS
if ! "${CARGO[@]}" "${BUILD[@]}" >target/build.log 2>&1; then
  tail -40 target/build.log >&2
  echo "fuzz: the targets did not build (fuzz/target/build.log)" >&2
  exit 1
fi
echo "fuzz: built in $((SECONDS - start)) s"
[ "$mode" = build ] && exit 0

if [ "$mode" = cmin ]; then
  for t in "${targets[@]}"; do
    # The inputs of fixed crashes stay, whatever coverage they add now.
    keep=$(mktemp -d)
    find "corpus/$t" -name 'regression-*' -exec mv {} "$keep/" \;
    # As `cargo fuzz cmin`: merge into a new directory, which replaces the corpus on success.
    mkdir -p "artifacts/$t" target/logs
    merged=$(mktemp -d cmin.XXXXXX)
    mkdir "$merged/corpus"
    if "$BIN_DIR/$t" -artifact_prefix="artifacts/$t/" -merge=1 "$merged/corpus" "corpus/$t" \
        >"target/logs/$t.cmin.log" 2>&1; then
      mv "corpus/$t" "$merged/old"
      mv "$merged/corpus" "corpus/$t"
    else
      echo "fuzz: $t: the corpus was not minimised (fuzz/target/logs/$t.cmin.log)" >&2
    fi
    grep -E 'MERGE-OUTER: [0-9]+ new files' "target/logs/$t.cmin.log" || true
    rm -rf "$merged"
    mv "$keep"/* "corpus/$t/" 2>/dev/null || true
    rmdir "$keep"
  done
  du -sh corpus
  exit 0
fi

if [ "$mode" = long ]; then
  LIMIT=(-runs="${SW_FUZZ_RUNS:-10000000}" -max_total_time="${SW_FUZZ_LONG_SECONDS:-7200}")
else
  # A fixed seed: the short run (CI's) mutates the committed corpus the same way every time, so
  # it checks that nothing known breaks rather than gating a merge on a lucky find. New finds
  # are the long runs' job (random seeds); SW_FUZZ_SEED=0 asks libFuzzer for a random one.
  LIMIT=(-max_total_time="${SW_FUZZ_SECONDS:-20}" -seed="${SW_FUZZ_SEED:-1}")
fi
mkdir -p target/logs
# run_one TARGET: one bounded run; its summary line goes to target/logs/TARGET.sum.
run_one() {
  local t=$1 status=ok last runs
  local scratch="target/corpus/$t" log="target/logs/$t.log"
  mkdir -p "$scratch" "artifacts/$t"
  echo "fuzz: $t (${LIMIT[*]})"
  if ! "$BIN_DIR/$t" "${LIMIT[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="artifacts/$t/" "$scratch" "corpus/$t" >"$log" 2>&1; then
    status=FAILED
    grep -E 'panicked at|^SUMMARY|Test unit written|Deadly signal|ERROR' "$log" | head -20 >&2 || true
  fi
  last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
  runs=$(grep -E '^stat::number_of_executed_units' "$log" | awk '{print $2}' || true)
  printf '%-17s %-6s executions=%-10s %s\n' "$t" "$status" "${runs:-?}" "$last" >"target/logs/$t.sum"
}
# SW_FUZZ_JOBS targets at a time (CI: 2, one a core).
jobs_max="${SW_FUZZ_JOBS:-1}"
for t in "${targets[@]}"; do
  rm -f "target/logs/$t.sum"
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
  run_one "$t" &
done
wait
failed=0
for t in "${targets[@]}"; do
  cat "target/logs/$t.sum" 2>/dev/null || echo "$t: no result"
  awk '$2 != "ok" { exit 1 }' "target/logs/$t.sum" 2>/dev/null || failed=1
done
if [ "$failed" != 0 ]; then
  echo "fuzz: a target crashed; the input is in fuzz/artifacts/ (logs in fuzz/target/logs/)" >&2
  exit 1
fi
