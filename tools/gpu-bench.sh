#!/usr/bin/env bash
# Device-memory bandwidth on a GPU machine: ucx-asio-perf --memory cuda for
# tag, active-message, stream, put and get at 1 MiB and 64 MiB, beside
# ucx_perftest -m cuda where UCX has CUDA transports, and beside the
# cudaMemcpy ceiling of staging through host memory (printed by each run).
#
#   tools/gpu-bench.sh [--build-dir DIR | --perf PROGRAM] [--iters N]
#
# Needs a built ucx-asio-perf (--perf names it; else in the build directory,
# by default build-perf, else build) and a CUDA device; exits 77 with the
# reason where there is none.
# Every process runs with UCX_NET_DEVICES=lo.
set -euo pipefail
cd "$(dirname "$0")/.."

build=""
perf=""
iters=100
while [ $# -gt 0 ]; do
  case $1 in
    --build-dir) build=$2; shift 2 ;;
    --perf) perf=$2; shift 2 ;;
    --iters) iters=$2; shift 2 ;;
    *) echo "usage: $0 [--build-dir DIR | --perf PROGRAM] [--iters N]" >&2; exit 2 ;;
  esac
done
if [ -z "$perf" ]; then
  if [ -z "$build" ]; then
    build=build-perf
    [ -x "$build/tools/ucx-asio-perf" ] || build=build
  fi
  perf=$build/tools/ucx-asio-perf
fi
[ -x "$perf" ] || { echo "gpu-bench: $perf not built" >&2; exit 2; }

export UCX_NET_DEVICES=lo
# Whether UCX itself moves CUDA memory (then the library hands it device
# pointers; otherwise it stages them through pinned host memory).
ucx_cuda=no
if command -v ucx_info >/dev/null && ucx_info -d 2>/dev/null | grep -q 'Transport: cuda_copy'; then
  ucx_cuda=yes
fi
echo "# UCX with CUDA transports: $ucx_cuda"

printf '%-10s %8s %14s %14s %8s %16s %8s\n' test size lib_MiB/s ceiling_MiB/s of_ceil perftest_MiB/s lib/pt
for size in 1m 64m; do
  n=$iters
  window=8
  # A staged message holds pinned memory of its whole size while in flight,
  # and each worker stages through at most 256 MiB of it: two 64 MiB
  # messages in flight per side (more fail with allocation_failed).
  [ "$size" = 64m ] && n=$((iters / 5 > 4 ? iters / 5 : 4)) && window=2
  for test in tag_bw am_bw stream_bw put_bw get_bw; do
    set +e
    # UCX may print warnings on standard output too: the CSV line is kept.
    out=$("$perf" --local --memory cuda --test "$test" --size "$size" --iters "$n" \
      --window "$window" --format csv --no-header 2>&1)
    rc=$?
    line=$(grep -E '^library,' <<<"$out" | tail -1)
    set -e
    if [ $rc -eq 77 ]; then
      echo "gpu-bench: skipped: $(grep -v '^$' <<<"$out" | tail -1)"
      exit 77
    fi
    [ $rc -eq 0 ] || { echo "$out" >&2; echo "gpu-bench: $test $size failed" >&2; exit 1; }
    lib=$(cut -d, -f11 <<<"$line")
    ceiling=$(cut -d, -f16 <<<"$line")
    pt="-"
    ratio="-"
    if [ "$ucx_cuda" = yes ]; then
      case $test in
        tag_bw) pt_test=tag_bw ;;
        am_bw) pt_test=ucp_am_bw ;;
        stream_bw) pt_test=stream_bw ;;
        put_bw) pt_test=ucp_put_bw ;;
        get_bw) pt_test=ucp_get ;;
      esac
      bytes=$(numfmt --from=iec "${size^^}")
      ucx_perftest -t "$pt_test" -m cuda -s "$bytes" -n "$n" -p 13399 >/tmp/gpu-bench-pt.$$ 2>&1 &
      server=$!
      sleep 1
      pt=$(ucx_perftest 127.0.0.1 -t "$pt_test" -m cuda -s "$bytes" -n "$n" -p 13399 2>/dev/null |
        awk '/Final:/ {print $(NF-2)}' || true)
      wait $server || true
      [ -n "$pt" ] && ratio=$(awk -v a="$lib" -v b="$pt" 'BEGIN { printf "%.2f", a / b }')
    fi
    of=$(awk -v a="$lib" -v b="$ceiling" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
    printf '%-10s %8s %14s %14s %8s %16s %8s\n' "$test" "$size" "$lib" "$ceiling" "$of" "${pt:--}" "$ratio"
  done
done
rm -f /tmp/gpu-bench-pt.$$
