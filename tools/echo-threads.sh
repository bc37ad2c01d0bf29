#!/usr/bin/env bash
# Aggregate echo throughput of one echo_server on 1 and on 2 threads
# (echo_server --threads N: a worker and a listener per thread on one port),
# with several echo_client processes at once, over TCP and shared memory.
# Prints each run's total messages per second (the sum of the clients') and
# the 2-thread / 1-thread ratio. Build first (cmake --build build).
#
#   tools/echo-threads.sh [BUILD_DIR] [CLIENTS] [COUNT] [SIZE]
#   (defaults: build 4 20000 64)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
clients=${2:-4}
count=${3:-20000}
size=${4:-64}
export UCX_NET_DEVICES=lo

run() { # label UCX_TLS threads -> prints the total msg/s
  local label=$1 tls=$2 threads=$3 log port pid total
  log=$(mktemp)
  UCX_TLS=$tls "$build/samples/echo_server" --quiet --threads "$threads" > "$log" 2>&1 &
  pid=$!
  for _ in $(seq 50); do grep -q "listening on" "$log" && break; sleep 0.1; done
  port=$(sed -n 's/.*listening on [^ ]*:\([0-9]*\).*/\1/p' "$log")
  local outs=()
  for i in $(seq "$clients"); do
    outs+=("$(mktemp)")
    UCX_TLS=$tls "$build/samples/echo_client" --port "$port" --size "$size" --count "$count" \
      > "${outs[-1]}" 2>&1 &
  done
  wait $(jobs -p | grep -v "^$pid\$") 2>/dev/null || true
  # "... 19447 msg/s" on each client's last line
  total=$(cat "${outs[@]}" | sed -n 's/.* \([0-9.]*\) msg\/s.*/\1/p' | awk '{s += $1} END {printf "%.0f", s}')
  local done_clients
  done_clients=$(grep -l "msg/s" "${outs[@]}" | wc -l)
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -f "$log" "${outs[@]}"
  printf '%-4s %d thread(s), %d clients (%d finished): %s msg/s\n' "$label" "$threads" \
    "$clients" "$done_clients" "$total" >&2
  echo "$total"
}

echo "== echo_server --threads N, $clients clients x $count echoes of $size B (total msg/s)"
for t in "tcp tcp,self" "shm tcp,sm,self"; do
  set -- $t
  one=$(run "$1" "$2" 1)
  two=$(run "$1" "$2" 2)
  awk -v a="$two" -v b="$one" -v l="$1" 'BEGIN {printf "%-4s 2 threads / 1 thread: %.2f\n", l, (b > 0 ? a / b : 0)}'
done
