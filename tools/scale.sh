#!/usr/bin/env bash
# Connection scale against one echo_server (one worker, one thread):
#  1. PROCESSES ucx-asio-scale clients open CONNECTIONS connections in all,
#     at once; with every one of them connected, the server's descriptors and
#     RSS are read; then every connection echoes 64 B messages for SECONDS
#     (each client prints its connect time and the spread of echoes per
#     connection: min, median, max and Jain's fairness index).
#  2. CYCLES connect/echo/close cycles, one after the other, printing the
#     descriptors and RSS of the client and the server every tenth.
# Build first (cmake --build build).
#
#   tools/scale.sh [BUILD_DIR] [CONNECTIONS] [PROCESSES] [SECONDS] [CYCLES] [UCX_TLS]
#   (defaults: build 1000 4 2 10000 tcp,sm,self)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
connections=${2:-1000}
processes=${3:-4}
seconds=${4:-2}
cycles=${5:-10000}
export UCX_TLS=${6:-tcp,sm,self}
export UCX_NET_DEVICES=lo

fds() { ls "/proc/$1/fd" | wc -l; }
rss() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }

log=$(mktemp)
tmp=()
cleanup() { kill "$server" 2>/dev/null || true; rm -f "$log" "${tmp[@]}"; }
trap cleanup EXIT
# Each connection costs the server a few descriptors (its lifeline TCP
# connection, UCX's sockets over TCP): raise the soft limit to the hard one.
ulimit -n "$(ulimit -Hn)"
"$build/samples/echo_server" --quiet --max-size 4096 --backlog "$connections" > "$log" 2>&1 &
server=$!
for _ in $(seq 50); do grep -q "listening on" "$log" && break; sleep 0.1; done
port=$(sed -n 's/.*listening on [^ ]*:\([0-9]*\).*/\1/p' "$log")
fds0=$(fds "$server"); rss0=$(rss "$server")

echo "== $connections connections from $processes processes to one server worker (UCX_TLS=$UCX_TLS)"
per=$((connections / processes))
pids=()
for i in $(seq "$processes"); do
  tmp+=("$(mktemp)")
  "$build/tools/ucx-asio-scale" --port "$port" --connections "$per" --seconds "$seconds" \
    --wait-signal > "${tmp[-1]}" 2>&1 &
  pids+=($!)
done
for _ in $(seq 600); do
  [ "$(grep -l "^connected" "${tmp[@]}" | wc -l)" -eq "$processes" ] && break
  sleep 0.1
done
sleep 0.5 # the server takes the last hellos
fds1=$(fds "$server"); rss1=$(rss "$server")
kill -USR1 "${pids[@]}"
status=0
for p in "${pids[@]}"; do wait "$p" || status=1; done
for i in "${!tmp[@]}"; do sed "s/^/client $((i + 1)): /" "${tmp[$i]}"; done
total=$((per * processes))
awk -v f0="$fds0" -v f1="$fds1" -v r0="$rss0" -v r1="$rss1" -v n="$total" 'BEGIN {
  printf "server with %d connected: fds %d -> %d (%.2f per connection), rss %d -> %d KiB (%.1f KiB per connection)\n",
    n, f0, f1, (f1 - f0) / n, r0, r1, (r1 - r0) / n }'
sleep 0.5
echo "server after they closed: fds $(fds "$server"), rss $(rss "$server") KiB"

echo "== $cycles connect/echo/close cycles"
"$build/tools/ucx-asio-scale" --port "$port" --cycles "$cycles" --server-pid "$server" || status=1
exit $status
