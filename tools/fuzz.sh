#!/usr/bin/env bash
# Builds the libFuzzer targets (test/fuzz) with clang into build-fuzz and runs
# each from its committed corpus for a while; fails on the first crash, hang,
# leak or sanitizer report.
#   tools/fuzz.sh [--jobs N] [seconds-per-target]          (default 30)
#   tools/fuzz.sh [--jobs N] --merge [seconds-per-target]  then add what the runs
#                                                          found, minimized, to
#                                                          test/fuzz/corpus
# --jobs N runs N targets at a time (default 1), each for the full time.
# New inputs go to build-fuzz/corpus/<target>; a crashing input is saved as
# build-fuzz/artifacts/<target>-crash-<sha1> (replay: build-fuzz/<target>_fuzz FILE).
set -euo pipefail
cd "$(dirname "$0")/.."

merge=0
jobs=1
while [ $# -gt 0 ]; do
  case "$1" in
    --merge) merge=1 ;;
    --jobs) jobs="$2"; shift ;;
    *) break ;;
  esac
  shift
done
seconds=${1:-30}

launcher=()
if command -v ccache >/dev/null; then launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache); fi
cmake -S test/fuzz -B build-fuzz -G Ninja -DCMAKE_CXX_COMPILER=clang++-16 "${launcher[@]}" >/dev/null
targets=()
for source in test/fuzz/*_fuzz.cpp; do targets+=("$(basename "$source" _fuzz.cpp)"); done
# The fuzz targets only (make_seeds, which writes the seed corpora, is built
# when asked for by name).
cmake --build build-fuzz --target "${targets[@]/%/_fuzz}"

mkdir -p build-fuzz/artifacts build-fuzz/logs

# fuzz <target>: runs it from its corpus; its exit status goes to
# build-fuzz/logs/<target>.status.
fuzz() {
  local target=$1 status=0
  mkdir -p "test/fuzz/corpus/$target" "build-fuzz/corpus/$target"
  "build-fuzz/${target}_fuzz" -max_total_time="$seconds" -timeout=5 -rss_limit_mb=2048 \
    -artifact_prefix="build-fuzz/artifacts/$target-" "build-fuzz/corpus/$target" \
    "test/fuzz/corpus/$target" >"build-fuzz/logs/$target.log" 2>&1 || status=$?
  echo "$status" >"build-fuzz/logs/$target.status"
}

running=0
for target in "${targets[@]}"; do
  if [ "$running" -ge "$jobs" ]; then
    wait -n || true
    running=$((running - 1))
  fi
  rm -f "build-fuzz/logs/$target.status"
  fuzz "$target" &
  running=$((running + 1))
done
wait

failed=0
for target in "${targets[@]}"; do
  corpus=test/fuzz/corpus/$target
  found=build-fuzz/corpus/$target
  log=build-fuzz/logs/$target.log
  if [ "$(cat "build-fuzz/logs/$target.status" 2>/dev/null)" != 0 ]; then
    tail -n 60 "$log"
    echo "fuzz: $target FAILED (log: $log, inputs: build-fuzz/artifacts/$target-*)"
    failed=1
    continue
  fi
  # The last status line: executions, coverage, corpus size, speed.
  echo "fuzz: $target ok: $(grep -E '^#[0-9]+' "$log" | tail -n 1)"
  if [ "$merge" = 1 ]; then
    # Edge coverage only (no hit counters): keeps the committed corpus small.
    "build-fuzz/${target}_fuzz" -merge=1 -use_counters=0 "$corpus" "$found" >>"$log" 2>&1
    echo "fuzz: $target corpus: $(find "$corpus" -type f | wc -l) files, $(du -sh "$corpus" | cut -f1)"
  fi
done
exit "$failed"
