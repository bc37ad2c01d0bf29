#!/usr/bin/env bash
# Repeats the fault tests (test/fault) and prints, for each fault and
# transport, the median and the maximum time until each side reported the
# failure: the table of docs/guide/reliability.md.
#
#   tools/faults.sh [--runs N] [--build-dir DIR]     (default 10 runs, build)
#
# Needs root for the network namespaces (the tests skip those cases
# otherwise) and nft for the black hole.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=10
build=build
while [ $# -gt 0 ]; do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    *) echo "usage: $0 [--runs N] [--build-dir DIR]" >&2; exit 2 ;;
  esac
done

cmake --build "$build" --target fault_tests fault_peer > /dev/null
"$build/test/fault/fault_tests" --gtest_filter='-group_netns.*' --gtest_repeat="$runs" 2>&1 | grep '^fault ' | python3 -c '
import re, statistics, sys
from collections import defaultdict
times = defaultdict(list)
for line in sys.stdin:
    m = re.match(r"fault (\S+) (.+?): (.*)$", line.strip())
    if not m:
        continue
    fault, where, rest = m.groups()
    for side, ms in re.findall(r"(client|server) ([0-9.]+) ms", rest):
        resumed = " (after SIGCONT)" if side + " " + ms + " ms after" in rest else ""
        times[(fault, where, side + resumed)].append(float(ms))
print("| fault | transport | side | median | max | runs |")
print("|---|---|---|---|---|---|")
for (fault, where, side), v in sorted(times.items()):
    print(f"| {fault} | {where} | {side} | {statistics.median(v):.1f} ms | {max(v):.1f} ms | {len(v)} |")
'
