#!/usr/bin/env bash
# Builds the libFuzzer targets (test/fuzz) with clang into build-fuzz and runs
# each from its committed corpus for a while; fails on the first crash, hang,
# leak or sanitizer report.
#   tools/fuzz.sh [seconds-per-target]           (default 30)
#   tools/fuzz.sh --merge [seconds-per-target]   then add what the runs found,
#                                                minimized, to test/fuzz/corpus
# New inputs go to build-fuzz/corpus/<target>; a crashing input is saved as
# build-fuzz/artifacts/<target>-crash-<sha1> (replay: build-fuzz/<target>_fuzz FILE).
set -euo pipefail
cd "$(dirname "$0")/.."

merge=0
if [ "${1:-}" = "--merge" ]; then
  merge=1
  shift
fi
seconds=${1:-30}

launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S test/fuzz -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" >/dev/null
cmake --build build-fuzz

mkdir -p build-fuzz/artifacts build-fuzz/logs
for source in test/fuzz/*_fuzz.cpp; do
  target=$(basename "$source" _fuzz.cpp)
  corpus=test/fuzz/corpus/$target
  found=build-fuzz/corpus/$target
  log=build-fuzz/logs/$target.log
  mkdir -p "$corpus" "$found"
  if ! "build-fuzz/${target}_fuzz" -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 \
    -artifact_prefix="build-fuzz/artifacts/$target-" "$found" "$corpus" >"$log" 2>&1; then
    tail -n 60 "$log"
    echo "fuzz: $target FAILED (log: $log, inputs: build-fuzz/artifacts/$target-*)"
    exit 1
  fi
  # The last status line: executions, coverage, corpus size, speed.
  echo "fuzz: $target ok: $(grep -E '^#[0-9]+' "$log" | tail -n 1)"
  if [ "$merge" = 1 ]; then
    # Edge coverage only (no hit counters): keeps the committed corpus small.
    "build-fuzz/${target}_fuzz" -merge=1 -use_counters=0 "$corpus" "$found" >>"$log" 2>&1
    echo "fuzz: $target corpus: $(find "$corpus" -type f | wc -l) files, $(du -sh "$corpus" | cut -f1)"
  fi
done
