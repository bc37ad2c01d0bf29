#!/usr/bin/env bash
# Compares the hot paths of two revisions on this machine: builds
# ucx-asio-perf of each (Release, build-compare/), then runs the tests below
# alternating the two builds test by test, round after round, and prints the
# median of each build, their ratio and the spread of the rounds, with the
# allocations per operation. Wall-clock time on a shared machine moves from
# run to run; alternating puts both builds under the same conditions.
#
#   tools/bench-compare.sh [--rounds N] [--jobs N] BEFORE [AFTER]
#
# BEFORE and AFTER are revisions (AFTER: the working tree when left out).
# Every process runs with UCX_NET_DEVICES=lo.
set -euo pipefail
cd "$(dirname "$0")/.."

rounds=5
jobs=2
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    -*) echo "usage: $0 [--rounds N] [--jobs N] BEFORE [AFTER]" >&2; exit 2 ;;
    *) break ;;
  esac
done
[ $# -ge 1 ] || { echo "usage: $0 [--rounds N] [--jobs N] BEFORE [AFTER]" >&2; exit 2; }
before=$1
after=${2:-}
export UCX_NET_DEVICES=lo
root=$PWD/build-compare
mkdir -p "$root"

# build <label> <source dir>: ucx-asio-perf in $root/<label>.
build() {
  cmake -S "$2" -B "$root/$1" -G Ninja -DCMAKE_BUILD_TYPE=Release -DUCX_ASIO_BUILD_TESTS=OFF \
    -DUCX_ASIO_BUILD_SAMPLES=OFF > /dev/null
  cmake --build "$root/$1" --target ucx-asio-perf -j "$jobs" > /dev/null
}
# source <revision>: a checkout of it under $root (made once).
source_of() {
  local rev dir
  rev=$(git rev-parse --short "$1")
  dir="$root/src-$rev"
  [ -d "$dir" ] || git worktree add --detach "$dir" "$rev" > /dev/null 2>&1
  echo "$dir"
}
before_label=$(git rev-parse --short "$before")
build before "$(source_of "$before")"
if [ -n "$after" ]; then
  after_label=$(git rev-parse --short "$after")
  build after "$(source_of "$after")"
else
  after_label="working tree"
  build after "$PWD"
fi

tests=(
  "--test tag_lat --size 8 --progress event"
  "--test tag_lat --size 8 --progress poll"
  "--test tag_lat --size 8 --progress poll --style coroutine"
  "--test tag_bw --size 8 --progress poll"
  "--test tag_lat --size 8 --progress poll --latency-histograms"
  "--test tag_bw --size 8 --progress poll --latency-histograms"
  "--test tag_bw --size 1m --progress poll"
  "--test am_lat --size 8 --progress poll"
  "--test am_bw --size 8 --progress poll"
  "--test stream_lat --size 8 --progress poll"
  "--test put_bw --size 8 --progress poll"
)
results=$root/results.csv
: > "$results"
for round in $(seq "$rounds"); do
  for i in "${!tests[@]}"; do
    for build in before after; do
      # shellcheck disable=SC2086
      "$root/$build/tools/ucx-asio-perf" --local ${tests[$i]} --format csv --no-header \
        --label "$build:$i" >> "$results"
    done
  done
  echo "round $round of $rounds done" >&2
done

python3 - "$results" "$before_label" "$after_label" "${tests[@]}" <<'EOF'
import csv, statistics, sys
path, before, after, tests = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
runs = {}
allocs = {}
# Columns (--format csv): transport, test, progress, style, size, iters,
# window, median_us, p99_us, avg_us, MiB/s, msg/s, allocs/op, label, ...
for row in csv.reader(open(path)):
    build, i = row[13].split(":")
    test = tests[int(i)]
    bandwidth = "_bw" in test
    value = float(row[10]) if bandwidth else float(row[7])
    runs.setdefault((test, build), []).append(value)
    allocs.setdefault((test, build), []).append(float(row[12]))
print(f"| test | before ({before}) | after ({after}) | after / before | rounds before | rounds after | allocs/op before, after |")
print("|---|---|---|---|---|---|---|")
for test in tests:
    b, a = runs[(test, "before")], runs[(test, "after")]
    unit = "MiB/s" if "_bw" in test else "µs"
    mb, ma = statistics.median(b), statistics.median(a)
    spread = lambda v: f"{min(v):.3f} to {max(v):.3f}"
    print(f"| `{test}` | {mb:.3f} {unit} | {ma:.3f} {unit} | {ma / mb:.2f} | {spread(b)} | {spread(a)} "
          f"| {max(allocs[(test, 'before')]):.4f}, {max(allocs[(test, 'after')]):.4f} |")
EOF
