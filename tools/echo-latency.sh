#!/usr/bin/env bash
# Measures round-trip latency between two processes: the echo samples over
# shared memory and over TCP in each progress mode (8 B and 64 KiB), next to
# ucx_perftest's tag latency on the same machine. Build first (tools/demo.sh
# or cmake --build build).
#
#   tools/echo-latency.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
export UCX_NET_DEVICES=lo
count=20000

run_echo() { # transport-label UCX_TLS mode size
  local label=$1 tls=$2 mode=$3 size=$4 log port pid
  log=$(mktemp)
  UCX_TLS=$tls "$build/samples/echo_server" --quiet --progress "$mode" > "$log" 2>&1 &
  pid=$!
  for _ in $(seq 50); do grep -q "listening on" "$log" && break; sleep 0.1; done
  port=$(sed -n 's/.*listening on [^ ]*:\([0-9]*\).*/\1/p' "$log")
  printf '%-4s %-7s %6s B  ' "$label" "$mode" "$size"
  UCX_TLS=$tls "$build/samples/echo_client" --port "$port" --progress "$mode" --size "$size" \
    --count "$count"
  kill "$pid"; wait "$pid" 2>/dev/null || true; rm -f "$log"
}

echo "== echo samples (client median/p99 RTT)"
for size in 8 65536; do
  for mode in event poll hybrid; do
    run_echo shm "tcp,sm,self" "$mode" "$size"   # tcp only for the connection manager
    run_echo tcp "tcp,self" "$mode" "$size"
  done
done

echo "== ucx_perftest tag_lat (one-way latency; round trip is twice that)"
for tls in "sm,self" "tcp,self"; do
  for size in 8 65536; do
    UCX_TLS=$tls ucx_perftest -t tag_lat -p 13377 > /dev/null 2>&1 &
    pid=$!
    sleep 1
    printf '%-9s %6s B  ' "$tls" "$size"
    UCX_TLS=$tls ucx_perftest 127.0.0.1 -t tag_lat -p 13377 -n "$count" -s "$size" 2>/dev/null |
      awk '/Final:/ {print "one-way latency median " $3 " us, average " $4 " us"}'
    wait "$pid" 2>/dev/null || true
  done
done
