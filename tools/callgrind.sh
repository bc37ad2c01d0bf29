#!/usr/bin/env bash
# Counted instructions per 8 B tag message (valgrind --tool=callgrind):
# repeatable on a noisy machine, unlike wall-clock time. One side of an 8 B
# tag_bw (window 64, poll mode) runs under callgrind, the other natively: the
# sending side (the client), then the receiving side (the server). Each runs
# with two message counts and the same warm-up; the difference, divided by
# the extra messages, is the cost of one message in that process (set-up and
# teardown cancel out). The side under callgrind is the slower one by far,
# so it seldom waits for the other; where it does, its empty progress calls
# add instructions (raw UCP's receiving side: 440 to 572 per message in four
# runs), so each total is the fewest of three runs (CALLGRIND_REPEATS).
# Also the 8 B tag round trip in the client in event and poll mode, which
# varies by tens of percent from run to run (how many progress and arm calls
# a round trip takes depends on when the reply comes), and the library's
# heap allocations per operation (operator new).
#
#   tools/callgrind.sh [--brief] [BUILD_DIR]   (default: build-perf; built if missing)
#
# --brief: only the per-message counts of raw UCP and the library, one
# "label instructions-per-message" line each (ucp_send, ucp_recv,
# library_send, library_recv; tools/bench.sh).
# CALLGRIND_MSG_N1/N2 (default 20000/60000) set the message counts,
# CALLGRIND_MSG_WARMUP (default 1000) the messages before them,
# CALLGRIND_REPEATS (default 3) the runs with each count,
# CALLGRIND_N1/N2 (default 2000/4000) the round trips.
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
case $build in /*) perf=$build/tools/ucx-asio-perf ;; *) perf=$PWD/$build/tools/ucx-asio-perf ;; esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
n1=${CALLGRIND_N1:-2000}
n2=${CALLGRIND_N2:-4000}

# grind LABEL SIDE ITERS WARMUP ARGS... : total Ir of one run of SIDE (send:
# the client; receive: the server) under callgrind, the other side native.
# Each side is bounded in time: one that fails leaves the other waiting.
grind() {
  local label=$1 side=$2 iters=$3 warmup=$4; shift 4
  local portfile=$tmp/port.$label.$iters out=$tmp/cg.$label.$iters
  local cg=(valgrind --tool=callgrind --callgrind-out-file="$out")
  local server=() client=()
  if [ "$side" = receive ]; then server=("${cg[@]}"); else client=("${cg[@]}"); fi
  timeout 600 "${server[@]}" "$perf" --server --port 0 --port-fd 3 3> "$portfile" > /dev/null 2>&1 &
  local spid=$!
  for _ in $(seq 600); do [ -s "$portfile" ] && break; sleep 0.05; done
  local port
  port=$(cat "$portfile")
  timeout 600 "${client[@]}" "$perf" 127.0.0.1 --port "$port" --iters "$iters" --warmup "$warmup" \
    "$@" > "$tmp/out.$label.$iters" 2>&1
  wait $spid
  sed -n 's/^summary: *//p' "$out" | awk '{print $1}'
}

# run LABEL ARGS... : instructions per round trip in the client
declare -A per_rtt
run() {
  local label=$1; shift
  local a b
  a=$(grind "$label" send "$n1" 200 "$@")
  b=$(grind "$label" send "$n2" 200 "$@")
  per_rtt[$label]=$(( (b - a) / (n2 - n1) ))
  printf '%-34s %14s %14s %12s\n' "$label" "$a" "$b" "${per_rtt[$label]}"
}

# messages LABEL SIDE ITERS ARGS... : total Ir of one 8 B tag_bw run of SIDE
messages() {
  local label=$1 side=$2 iters=$3; shift 3
  grind "$label" "$side" "$iters" "$warm" -t tag_bw -s 8 --window 64 --progress poll "$@"
}

m1=${CALLGRIND_MSG_N1:-20000}
m2=${CALLGRIND_MSG_N2:-60000}
repeats=${CALLGRIND_REPEATS:-3}
warm=${CALLGRIND_MSG_WARMUP:-1000}
declare -A per_msg
# per_message LABEL SIDE ARGS... : instructions per message from the
# fewest instructions of `repeats` runs with each message count (a side that
# waits for the other adds the instructions of its empty progress calls,
# never fewer)
per_message() {
  local label=$1 side=$2; shift 2
  local a="" b="" x
  for _ in $(seq "$repeats"); do
    x=$(messages "$label" "$side" "$m1" "$@")
    if [ -z "$a" ] || [ "$x" -lt "$a" ]; then a=$x; fi
    x=$(messages "$label" "$side" "$m2" "$@")
    if [ -z "$b" ] || [ "$x" -lt "$b" ]; then b=$x; fi
  done
  local best=$(( (b - a) / (m2 - m1) ))
  if [ "$best" -le 0 ]; then
    echo "callgrind: $label: $a instructions with $m1 messages, $b with $m2: the side waited" \
      "for the other (a busy machine?); the count is not the work of a message" >&2
  fi
  per_msg[$label]=$best
  if [ $brief = 1 ]; then
    echo "$label $best"
  else
    printf '%-34s %14s %14s %12s\n' "$label" "$a" "$b" "$best"
  fi
}

[ $brief = 1 ] || printf '%-34s %14s %14s %12s\n' "8 B tag_bw, window 64" "Ir ($m1 msgs)" "Ir ($m2 msgs)" "Ir per msg"
per_message ucp_send send --transport ucp
per_message ucp_recv receive --transport ucp
per_message library_send send
per_message library_recv receive
[ $brief = 1 ] && exit 0
echo "library overhead per message: sending $(( per_msg[library_send] - per_msg[ucp_send] )), receiving $(( per_msg[library_recv] - per_msg[ucp_recv] )) instructions"
echo

printf '%-34s %14s %14s %12s\n' "8 B tag round trip (client)" "Ir ($n1 RTT)" "Ir ($n2 RTT)" "Ir per RTT"

run ucp_event --transport ucp -t tag_lat -s 8 --progress event
run library_event_callback -t tag_lat -s 8 --progress event --style callback
run library_event_coroutine -t tag_lat -s 8 --progress event --style coroutine
run ucp_poll --transport ucp -t tag_lat -s 8 --progress poll
run library_poll_callback -t tag_lat -s 8 --progress poll --style callback

echo
echo "library overhead per round trip, event mode: callback $(( per_rtt[library_event_callback] - per_rtt[ucp_event] )) instructions, coroutine $(( per_rtt[library_event_coroutine] - per_rtt[ucp_event] ))"
echo "(round trips vary run to run: event mode with when each reply comes, poll mode with the"
echo " instructions spent spinning while it travels; the per-message counts above do not)"

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
