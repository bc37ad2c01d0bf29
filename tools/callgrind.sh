#!/usr/bin/env bash
# Counted instructions per 8 B tag round trip (valgrind --tool=callgrind):
# repeatable on a noisy machine, unlike wall-clock time. The client runs under
# callgrind, the server natively; each configuration runs with two iteration
# counts and the difference, divided by the extra round trips, is the cost of
# one round trip in the client's process (set-up and teardown cancel out).
# Event mode, so that the client sleeps instead of spinning while it waits.
# Also prints the library's heap allocations per operation (operator new).
#
#   tools/callgrind.sh [--brief] [BUILD_DIR]   (default: build-perf; built if missing)
#
# --brief: only the event-mode rows of raw UCP and the library (callbacks),
# one "label instructions-per-round-trip" line each (tools/bench.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
brief=0
if [ "${1:-}" = --brief ]; then brief=1; shift; fi
build=${1:-build-perf}
export UCX_NET_DEVICES=lo
command -v valgrind > /dev/null || { echo "callgrind: valgrind is missing (tools/setup.sh)" >&2; exit 1; }
if [ ! -x "$build/tools/ucx-asio-perf" ]; then
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DUCX_ASIO_BUILD_TESTS=OFF > /dev/null
  cmake --build "$build" --target ucx-asio-perf -j2 > /dev/null
fi
perf=$PWD/$build/tools/ucx-asio-perf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n1=${CALLGRIND_N1:-2000}
n2=${CALLGRIND_N2:-4000}

# instructions LABEL ITERS ARGS... : total Ir of one client run
instructions() {
  local label=$1 iters=$2; shift 2
  local portfile=$tmp/port.$label.$iters
  "$perf" --server --port 0 --port-fd 3 3> "$portfile" &
  local spid=$!
  for _ in $(seq 100); do [ -s "$portfile" ] && break; sleep 0.05; done
  local port
  port=$(cat "$portfile")
  valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.$label.$iters" \
    "$perf" 127.0.0.1 --port "$port" --iters "$iters" --warmup 200 "$@" > "$tmp/out.$label.$iters" 2>&1
  wait $spid
  sed -n 's/^summary: *//p' "$tmp/cg.$label.$iters" | awk '{print $1}'
}

declare -A per_rtt
run() {
  local label=$1; shift
  local a b
  a=$(instructions "$label" "$n1" "$@")
  b=$(instructions "$label" "$n2" "$@")
  per_rtt[$label]=$(( (b - a) / (n2 - n1) ))
  if [ $brief = 1 ]; then
    echo "$label ${per_rtt[$label]}"
  else
    printf '%-34s %14s %14s %12s\n' "$label" "$a" "$b" "${per_rtt[$label]}"
  fi
}

if [ $brief = 1 ]; then
  run ucp_event --transport ucp -t tag_lat -s 8 --progress event
  run library_event_callback -t tag_lat -s 8 --progress event --style callback
  exit 0
fi
printf '%-34s %14s %14s %12s\n' "configuration" "Ir ($n1 RTT)" "Ir ($n2 RTT)" "Ir per RTT"

run ucp_event --transport ucp -t tag_lat -s 8 --progress event
run library_event_callback -t tag_lat -s 8 --progress event --style callback
run library_event_coroutine -t tag_lat -s 8 --progress event --style coroutine
run ucp_poll --transport ucp -t tag_lat -s 8 --progress poll
run library_poll_callback -t tag_lat -s 8 --progress poll --style callback

echo
echo "library overhead per round trip, event mode: callback $(( per_rtt[library_event_callback] - per_rtt[ucp_event] )) instructions, coroutine $(( per_rtt[library_event_coroutine] - per_rtt[ucp_event] ))"
echo "(poll rows include the instructions spent spinning while the reply travels: not comparable run to run)"

echo
echo "top functions of library_event_callback ($n2 round trips, self cost):"
callgrind_annotate --threshold=90 "$tmp/cg.library_event_callback.$n2" 2>/dev/null |
  sed -n '/^Ir/,$p' | sed -n '3,22p' || true

echo
echo "heap allocations per operation in steady state (operator new, client and server):"
for args in "-t tag_lat --progress poll" "-t tag_lat --progress event" "-t tag_bw --progress poll" \
            "-t tag_lat --progress poll --style coroutine" "-t am_lat --progress poll" \
            "-t tag_bw -s 1m --progress poll -n 2000"; do
  line=$("$perf" --local --format csv --no-header -n 20000 $args 2>/dev/null | tail -1)
  printf '  %-46s %s\n' "$args" "$(echo "$line" | cut -d, -f13)"
done
