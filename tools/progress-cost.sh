#!/usr/bin/env bash
# What each progress mode costs, between two processes over shared memory:
# the echo samples paced at a low, a medium and an unbounded message rate
# (echo_client --rate), and an echo server holding 1, 16 and 1,000 silent
# connections of ucx-asio-scale. Processor time (user and system) comes from
# /proc for the server and from the client itself; latency from the client.
# Build first (tools/test.sh, or cmake --build BUILD_DIR).
#
#   tools/progress-cost.sh [--build-dir DIR] [--modes "event hybrid poll"]
#                          [--seconds S] [--quick]
#
# --seconds S   how long each paced run and each idle measurement lasts (default 5)
# --quick       2 s each, and 100 instead of 1,000 idle connections
#
# Prints two Markdown tables. Every process runs with UCX_NET_DEVICES=lo.
set -euo pipefail
cd "$(dirname "$0")/.."
build=build
modes="event hybrid poll"
seconds=5
many=1000
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --quick) seconds=2; many=100; shift ;;
    *) echo "usage: $0 [--build-dir DIR] [--modes \"event hybrid poll\"] [--seconds S] [--quick]" >&2; exit 2 ;;
  esac
done
export UCX_NET_DEVICES=lo
# Shared memory for the data; TCP only for the connection manager.
export UCX_TLS=tcp,sm,self
server_bin=$build/samples/echo_server
client_bin=$build/samples/echo_client
scale_bin=$build/tools/ucx-asio-scale
for p in "$server_bin" "$client_bin" "$scale_bin"; do
  [ -x "$p" ] || { echo "progress-cost: $p is missing (build first)" >&2; exit 1; }
done
tick=$(getconf CLK_TCK)
work=$(mktemp -d)
server_pid=""
cleanup() {
  [ -z "$server_pid" ] || kill "$server_pid" 2> /dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# Processor time of a process so far, in seconds (utime + stime).
cpu_of() { awk -v t="$tick" '{print ($14 + $15) / t}' "/proc/$1/stat"; }

# start_server MODE: an echo server in the background; sets server_pid, port.
start_server() {
  "$server_bin" --quiet --progress "$1" > "$work/server.log" 2>&1 &
  server_pid=$!
  for _ in $(seq 100); do grep -q "listening on" "$work/server.log" && break; sleep 0.1; done
  port=$(sed -n 's/.*listening on [^ ]*:\([0-9]*\).*/\1/p' "$work/server.log")
  [ -n "$port" ] || { echo "progress-cost: the server did not start" >&2; cat "$work/server.log" >&2; exit 1; }
}
stop_server() {
  kill "$server_pid" 2> /dev/null || true
  wait "$server_pid" 2> /dev/null || true
  server_pid=""
}

echo "== paced echoes of 8 B, $seconds s each (server and client processor time per echo)"
echo
echo "| mode | rate asked (msg/s) | rate got (msg/s) | median RTT (µs) | p99 RTT (µs) | client µs per echo | server µs per echo | client + server, % of a core |"
echo "|---|---|---|---|---|---|---|---|"
for mode in $modes; do
  for rate in 100 10000 0; do
    if [ "$rate" = 0 ]; then count=$((200000 * seconds / 5)); else count=$((rate * seconds)); fi
    start_server "$mode"
    s0=$(cpu_of "$server_pid")
    t0=$(date +%s.%N)
    out=$("$client_bin" --port "$port" --progress "$mode" --size 8 --count "$count" --rate "$rate")
    t1=$(date +%s.%N)
    s1=$(cpu_of "$server_pid")
    stop_server
    med=$(sed -n 's/.*median RTT \([0-9.]*\) us.*/\1/p' <<< "$out")
    p99=$(sed -n 's/.*p99 \([0-9.]*\) us.*/\1/p' <<< "$out")
    got=$(sed -n 's/.*, \([0-9]*\) msg\/s$/\1/p' <<< "$out")
    ccpu=$(sed -n 's/^client processor time \([0-9.]*\) us per echo.*/\1/p' <<< "$out")
    awk -v m="$mode" -v r="$rate" -v g="$got" -v med="$med" -v p99="$p99" -v n="$count" \
      -v c="$ccpu" -v s="$(awk -v a="$s0" -v b="$s1" 'BEGIN {print b - a}')" \
      -v wall="$(awk -v a="$t0" -v b="$t1" 'BEGIN {print b - a}')" 'BEGIN {
        printf "| %s | %s | %s | %s | %s | %.2f | %.2f | %.0f %% |\n", m, (r == 0 ? "unbounded" : r), g,
          med, p99, c, s * 1e6 / n, 100 * (c * n / 1e6 + s) / wall }'
  done
done

echo
echo "== silent connections: processor time over $seconds s, after they connected"
echo
echo "| mode | connections | server, % of a core | clients, % of a core |"
echo "|---|---|---|---|"
for mode in $modes; do
  for n in 1 16 "$many"; do
    start_server "$mode"
    # Clients of at most 100 connections each, one after the other (the
    # listener's backlog refuses a thousand connects at once).
    clients=()
    left=$n
    while [ "$left" -gt 0 ]; do
      k=$((left < 100 ? left : 100))
      log=$work/scale.${#clients[@]}.log
      "$scale_bin" --port "$port" --connections "$k" --wait-signal --progress "$mode" > "$log" 2>&1 &
      clients+=($!)
      for _ in $(seq 600); do grep -q "^connected" "$log" && break; sleep 0.1; done
      grep -q "^connected $k failed 0" "$log" ||
        { echo "progress-cost: $k connections failed" >&2; head -5 "$log" >&2; exit 1; }
      left=$((left - k))
    done
    # Let the connections settle (the handshakes' last words).
    sleep 1
    cpu_clients() { local c t=0; for c in "${clients[@]}"; do t=$(awk -v a="$t" -v b="$(cpu_of "$c")" 'BEGIN {print a + b}'); done; echo "$t"; }
    s0=$(cpu_of "$server_pid"); c0=$(cpu_clients)
    sleep "$seconds"
    s1=$(cpu_of "$server_pid"); c1=$(cpu_clients)
    kill "${clients[@]}" 2> /dev/null || true
    wait "${clients[@]}" 2> /dev/null || true
    stop_server
    awk -v m="$mode" -v n="$n" -v p="${#clients[@]}" -v s0="$s0" -v s1="$s1" -v c0="$c0" -v c1="$c1" \
      -v d="$seconds" 'BEGIN {
      printf "| %s | %s (%s client process%s) | %.2f %% | %.2f %% |\n", m, n, p, (p > 1 ? "es" : ""),
        100 * (s1 - s0) / d, 100 * (c1 - c0) / d }'
  done
done
