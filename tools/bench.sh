#!/usr/bin/env bash
# Benchmarks ucx-asio beside ucx_perftest (raw UCX), a raw UCP program and
# plain Asio TCP, on loopback, over shared memory and over UCX's TCP transport.
# Builds Release (and ucx-asio-perf once more over a library built without
# operation metrics, build-perf-nometrics: what the counts cost), runs every
# test interleaved and repeated, prints the medians
# and the target ratios, and writes docs/development/benchmarks.md (between its
# "bench:begin/end" markers) and docs/development/benchmarks.png.
#
#   tools/bench.sh [--rounds N] [--quick] [--build-dir DIR] [--jobs N] [--no-docs]
#
# --rounds N   rounds of the target tests (default 5; medians over them)
# --quick      fewer iterations and sizes (a smoke run of the script, ~1 min)
# --no-docs    print only; leave docs/ alone
# --study      only the UCX settings study (segment size, rendezvous threshold)
# --jobs N     parallel compile jobs for the Release build (default 2)
#
# Every process runs with UCX_NET_DEVICES=lo. The whole run takes about
# 5-7 minutes on a 2-core machine (each single test well under a minute).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

rounds=5
quick=0
docs=1
study_only=0
build=build-perf
jobs=2
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --quick) quick=1; shift ;;
    --no-docs) docs=0; shift ;;
    --study) study_only=1; shift ;;
    --build-dir) build=$2; shift 2 ;;
    --jobs) jobs=$2; shift 2 ;;
    *) echo "usage: $0 [--rounds N] [--quick] [--study] [--build-dir DIR] [--jobs N] [--no-docs]" >&2; exit 2 ;;
  esac
done

# The build directory: relative to the repository's root, or absolute.
case $build in /*) ;; *) build="$root/$build" ;; esac

export UCX_NET_DEVICES=lo
for tool in ucx_perftest cmake; do
  command -v $tool > /dev/null || { echo "bench: $tool is missing (run tools/setup.sh)" >&2; exit 1; }
done

echo "== building Release in $build"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DUCX_ASIO_BUILD_TESTS=OFF > /dev/null
cmake --build "$build" --target ucx-asio-perf pipe_pingpong ucx-asio-demo echo_server echo_client \
  ucx-asio-scale -j"$jobs" > /dev/null
perf="$build/tools/ucx-asio-perf"
# The same program over a library built without operation metrics
# (UCX_ASIO_OPERATION_METRICS=OFF): what the counters cost.
echo "== building Release without operation metrics in $build-nometrics"
cmake -S . -B "$build-nometrics" -G Ninja -DCMAKE_BUILD_TYPE=Release -DUCX_ASIO_BUILD_TESTS=OFF \
  -DUCX_ASIO_BUILD_SAMPLES=OFF -DUCX_ASIO_OPERATION_METRICS=OFF > /dev/null
cmake --build "$build-nometrics" --target ucx-asio-perf -j"$jobs" > /dev/null
perf_nometrics="$build-nometrics/tools/ucx-asio-perf"
pipe="$build/tools/pipe_pingpong"
demo="$build/tools/ucx-asio-demo"
echo_server="$build/samples/echo_server"
echo_client="$build/samples/echo_client"
scale="$build/tools/ucx-asio-scale"

out="$build/bench"
mkdir -p "$out"
results="$out/results.txt" # key value-columns, one line per run
: > "$results"
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
started=$(date -u '+%Y-%m-%d %H:%M UTC')
t_start=$SECONDS

# Iteration counts: scale down with --quick.
n() { if [ $quick = 1 ]; then echo $(( ($1 + 9) / 10 )); else echo "$1"; fi; }

# The UCX settings of a library context (shared-memory error handling, the
# tuned defaults), so raw UCX runs can use the same configuration.
lib_env=$("$perf" --print-config | tr '\n' ' ')
# The same without error handling (for the error handling on/off comparisons).
lib_env_noeh=$(echo "$lib_env" | tr ' ' '\n' | grep -v ERROR_HANDLING | tr '\n' ' ' || true)
sm_eh="UCX_POSIX_ERROR_HANDLING=y UCX_SYSV_ERROR_HANDLING=y"

port=$(( 20000 + RANDOM % 20000 ))
next_port() { port=$(( port + 1 )); [ $port -lt 60000 ] || port=20000; }

# record KEY LAT_MEDIAN LAT_AVG MIB_PER_S MSG_PER_S ALLOCS_PER_OP
record() { echo "$*" >> "$results"; }

# ---- medians and ratios ----
# median_lines: the median of the numbers on standard input ("-" for none).
median_lines() {
  sort -g |
    awk '{v[NR]=$1} END {if (NR == 0) print "-"; else if (NR % 2) print v[(NR+1)/2]; else printf "%.4g\n", (v[NR/2]+v[NR/2+1])/2}'
}
# median KEY COLUMN (2: latency median, 3: latency average, 4: MiB/s, 5: msg/s, 6: allocs/op)
median() {
  awk -v k="$1" -v c="$2" '$1 == k && $c != "-" {print $c}' "$results" | median_lines
}
# round_ratios KEY_A KEY_B COLUMN: each round's A / B (the k-th run of A by
# the k-th of B), one per line.
round_ratios() {
  paste <(awk -v k="$1" -v c="$3" '$1 == k {print $c}' "$results") \
    <(awk -v k="$2" -v c="$3" '$1 == k {print $c}' "$results") |
    awk 'NF == 2 && $1 != "-" && $2 != "-" && $2 > 0 {print $1 / $2}'
}
# paired_ratio KEY_A KEY_B COLUMN: the median of the rounds' ratios. For a
# row whose runs fall in one of two machine states by run (event mode: each
# run either stays awake or sleeps, for raw UCX as for the library), the
# ratio of the medians says which state each median fell in; the pairs
# compare runs made one after the other.
paired_ratio() {
  local m
  m=$(round_ratios "$@" | median_lines)
  if [ "$m" = - ]; then echo "-"; else printf "%.2f\n" "$m"; fi
}
# pairs KEY_A KEY_B COLUMN: every round's A / B, for the table.
pairs() {
  round_ratios "$@" | awk '{printf "%s%.2f", (NR > 1 ? ", " : ""), $1} END {if (NR == 0) printf "-"}'
}
ratio() { # a b -> a/b
  if [ "$1" = - ] || [ "$2" = - ]; then echo "-"; else awk -v a="$1" -v b="$2" 'BEGIN {if (b == 0) print "-"; else printf "%.2f\n", a/b}'; fi
}
ratio3() { # a b -> a/b, three decimals (for bounds of a few per cent)
  if [ "$1" = - ] || [ "$2" = - ]; then echo "-"; else awk -v a="$1" -v b="$2" 'BEGIN {if (b == 0) print "-"; else printf "%.3f\n", a/b}'; fi
}
verdict() { # value op limit
  if [ "$1" = - ]; then echo "not measured"; return; fi
  awk -v v="$1" -v op="$2" -v l="$3" 'BEGIN {ok = (op == "<=") ? (v <= l) : (op == ">=") ? (v >= l) : (v < l); print ok ? "met" : "MISSED"}'
}

# best KEY COLUMN min|max: the best run (the one the machine disturbed least)
best() {
  awk -v k="$1" -v c="$2" '$1 == k && $c != "-" {print $c}' "$results" |
    sort -g | { if [ "$3" = min ]; then head -1; else tail -1; fi; } | grep . || echo "-"
}
lat() { median "$1" 2; }
bw() { median "$1" 4; }
mr() { median "$1" 5; }

# pt KEY "ENV" ucx_perftest-args... : runs ucx_perftest server and client.
pt() {
  local key=$1 envs=$2; shift 2
  next_port
  env $envs ucx_perftest -p $port > /dev/null 2>&1 &
  local spid=$! line=""
  for _ in $(seq 40); do
    if ss -ltn "sport = :$port" 2>/dev/null | grep -q LISTEN; then break; fi
    sleep 0.05
  done
  line=$(env $envs timeout 60 ucx_perftest 127.0.0.1 -p $port -f "$@" 2>/dev/null |
    awk 'NF >= 8 && $1 ~ /^[0-9]+$/ {l=$0} END {print l}') || true
  wait $spid 2> /dev/null || true
  if [ -z "$line" ]; then echo "bench: ucx_perftest $key failed" >&2; return 0; fi
  # iterations, typical (median) latency, average latency, overall latency,
  # average bandwidth, overall bandwidth (MiB/s), average rate, overall rate
  set -- $line
  record "$key" "$2" "$3" "$6" "$8" "-"
}

# ap KEY "ENV" ucx-asio-perf-args... : runs ucx-asio-perf (server and client);
# PERF=program selects another build of it.
ap() {
  local key=$1 envs=$2; shift 2
  local line
  line=$(env $envs timeout 60 "${PERF:-$perf}" --local --format csv --no-header "$@" 2>/dev/null |
    tail -1) || true
  if [ -z "$line" ]; then echo "bench: ucx-asio-perf $key failed" >&2; return 0; fi
  # transport,test,progress,style,size,iters,window,median,p99,avg,mib,msg,allocs,label
  IFS=, read -r _ _ _ _ _ _ _ med _ avg mib msg allocs _ <<< "$line"
  record "$key" "$med" "$avg" "$mib" "$msg" "$allocs"
}

pipe_floor() {
  local line
  line=$("$pipe" --iters "$(n 20000)" --format csv)
  IFS=, read -r _ _ _ _ _ _ _ med _ avg _ <<< "$line"
  record pipe_lat8 "$med" "$avg" - - -
}

# Two workers on one io_context (ucx-asio-demo): the round trip in each mode,
# and how late a timer and a posted handler beside them run; `asio` is the
# floor of the last two (a plain handler loop, no UCX).
demo_round() {
  local line mode med p99 mean late post
  while IFS=, read -r mode med p99 mean late post; do
    record "demo_${mode}_rtt" "$med" "$mean" - - -
    record "demo_${mode}_timer" "$late" - - - -
    record "demo_${mode}_post" "$post" - - - -
  done < <(timeout 120 "$demo" --csv --iters "$(n 20000)" 2>/dev/null || true)
}

# The echo samples between two processes over shared memory, as a user runs
# them: echo_run KEY [--progress MODE]. Records the median round trip, the
# p99 (in the average's column) and the messages per second.
echo_start() { # MODE-ARGS... ; sets echo_pid, echo_port
  "$echo_server" --quiet "$@" > "$out/echo_server.log" 2>&1 &
  echo_pid=$!
  echo_port=""
  for _ in $(seq 100); do grep -q "listening on" "$out/echo_server.log" && break; sleep 0.05; done
  echo_port=$(sed -n 's/.*listening on [^ ]*:\([0-9]*\).*/\1/p' "$out/echo_server.log")
}
echo_stop() { kill "$echo_pid" 2> /dev/null || true; wait "$echo_pid" 2> /dev/null || true; }
echo_run() {
  local key=$1 line med p99 rate; shift
  echo_start "$@"
  if [ -z "$echo_port" ]; then echo "bench: echo_server $key did not start" >&2; echo_stop; return 0; fi
  line=$(timeout 60 "$echo_client" --port "$echo_port" --count "$(n 100000)" "$@" \
    2>/dev/null | grep 'median RTT') || true
  echo_stop
  med=$(sed -n 's/.*median RTT \([0-9.]*\) us.*/\1/p' <<< "$line")
  p99=$(sed -n 's/.*p99 \([0-9.]*\) us.*/\1/p' <<< "$line")
  rate=$(sed -n 's/.*, \([0-9]*\) msg\/s$/\1/p' <<< "$line")
  if [ -z "$med" ]; then echo "bench: echo_client $key failed" >&2; return 0; fi
  record "$key" "$med" "$p99" - "$rate" -
}
# idle_cpu KEY [--progress MODE]: an echo server holding one silent
# connection; its processor time over 3 s, in % of a core (latency column).
idle_cpu() {
  local key=$1 c0 c1 client tick; shift
  tick=$(getconf CLK_TCK)
  echo_start "$@"
  [ -n "$echo_port" ] || { echo_stop; return 0; }
  "$scale" --port "$echo_port" --connections 1 --wait-signal "$@" > "$out/scale.log" 2>&1 &
  client=$!
  for _ in $(seq 100); do grep -q "^connected" "$out/scale.log" && break; sleep 0.05; done
  sleep 0.5
  c0=$(awk '{print $14 + $15}' "/proc/$echo_pid/stat")
  sleep 3
  c1=$(awk '{print $14 + $15}' "/proc/$echo_pid/stat")
  kill "$client" 2> /dev/null || true; wait "$client" 2> /dev/null || true
  echo_stop
  record "$key" "$(awk -v a="$c0" -v b="$c1" -v t="$tick" 'BEGIN {printf "%.2f", 100 * (b - a) / t / 3}')" - - - -
}

has_stream=0
if "$perf" --local --test stream_lat --iters 2 --warmup 1 > /dev/null 2>&1; then has_stream=1; fi

# What the operation metrics cost: the library with them (its default) and a
# build without them, in adjacent runs, in the order on-off-off-on so that a
# drift of the machine's speed weighs on both alike.
metrics_pairs() {
  local L=$1 M=$2 b
  for b in on off off on; do
    if [ $b = on ]; then
      ap lib_lat8_poll_metrics "" -t tag_lat -s 8 --progress poll -n "$L"
      ap lib_mr8_poll_metrics "" -t tag_bw -s 8 --progress poll --window 64 -n "$M"
    else
      PERF=$perf_nometrics ap lib_lat8_poll_nometrics "" -t tag_lat -s 8 --progress poll -n "$L"
      PERF=$perf_nometrics ap lib_mr8_poll_nometrics "" -t tag_bw -s 8 --progress poll --window 64 -n "$M"
    fi
  done
}

# ---- the target tests, interleaved, repeated ----
one_round() {
  local tcp="UCX_TLS=tcp,self" L=$(n 200000) E=$(n 20000) M=$(n 2000000)
  metrics_pairs "$L" "$M"
  # 8 B tag latency over shared memory
  pt pt_lat8 "$lib_env" -t tag_lat -s 8 -n "$L" -w "$(n 20000)" -e
  ap lib_lat8_poll "" -t tag_lat -s 8 --progress poll -n "$L"
  ap lib_lat8_poll_hist "" -t tag_lat -s 8 --progress poll --latency-histograms -n "$L"
  ap lib_lat8_hybrid "" -t tag_lat -s 8 --progress hybrid -n "$L"
  pt pt_lat8_noeh "$lib_env_noeh" -t tag_lat -s 8 -n "$L" -w "$(n 20000)"
  ap lib_lat8_poll_co "" -t tag_lat -s 8 --progress poll --style coroutine -n "$L"
  ap ucp_lat8_poll "" --transport ucp -t tag_lat -s 8 --progress poll -n "$L"
  # event mode: the thread sleeps between messages
  pipe_floor
  ap lib_lat8_event "" -t tag_lat -s 8 --progress event -n "$E"
  ap ucp_lat8_event "" --transport ucp -t tag_lat -s 8 --progress event -n "$E"
  ap tcp_lat8_event "" --transport tcp -t tag_lat -s 8 --progress event -n "$E"
  ap tcp_lat8_poll "" --transport tcp -t tag_lat -s 8 --progress poll -n "$E"
  # 8 B message rate, window 64 on both sides (ucx_perftest's tag_bw default is 32)
  pt pt_mr8 "$lib_env" -t tag_bw -s 8 -n "$M" -w "$(n 200000)" -O 64 -e
  pt pt_mr8_noeh "$lib_env_noeh" -t tag_bw -s 8 -n "$M" -w "$(n 200000)" -O 64
  ap lib_mr8_poll "" -t tag_bw -s 8 --progress poll --window 64 -n "$M"
  ap lib_mr8_poll_hist "" -t tag_bw -s 8 --progress poll --window 64 --latency-histograms -n "$M"
  ap lib_mr8_batch "" -t tag_bw -s 8 --progress poll --window 64 --style batch -n "$M"
  ap lib_mr8_hybrid "" -t tag_bw -s 8 --progress hybrid --window 64 -n "$M"
  ap ucp_mr8_poll "" --transport ucp -t tag_bw -s 8 --progress poll --window 64 -n "$M"
  # 1 MiB and 16 MiB tag bandwidth. Memory bandwidth is what these measure,
  # and it is what changes most when the machine changes state: the library
  # and ucx_perftest run next to each other, twice, in the order
  # ucx_perftest-library-library-ucx_perftest (each pair's ratio is one of
  # the row's rounds), so that a drift weighs on both alike.
  local k
  for k in 1 2; do
    if [ $k = 1 ]; then pt pt_bw1m "$lib_env" -t tag_bw -s 1048576 -n "$(n 4000)" -w "$(n 400)" -e; fi
    ap lib_bw1m_poll "" -t tag_bw -s 1048576 --progress poll -n "$(n 4000)"
    if [ $k = 2 ]; then pt pt_bw1m "$lib_env" -t tag_bw -s 1048576 -n "$(n 4000)" -w "$(n 400)" -e; fi
  done
  for k in 1 2; do
    if [ $k = 1 ]; then pt pt_bw16m "$lib_env" -t tag_bw -s 16777216 -n "$(n 300)" -w "$(n 30)" -e; fi
    ap lib_bw16m_poll "" -t tag_bw -s 16777216 --progress poll -n "$(n 300)"
    if [ $k = 2 ]; then pt pt_bw16m "$lib_env" -t tag_bw -s 16777216 -n "$(n 300)" -w "$(n 30)" -e; fi
  done
  pt pt_bw1m_noeh "$lib_env_noeh" -t tag_bw -s 1048576 -n "$(n 4000)" -w "$(n 400)"
  pt pt_bw1m_ucxdef "" -t tag_bw -s 1048576 -n "$(n 4000)" -w "$(n 400)" -e
  pt pt_bw1m_ucxdef_noeh "" -t tag_bw -s 1048576 -n "$(n 4000)" -w "$(n 400)"
  ap lib_bw1m_event "" -t tag_bw -s 1048576 --progress event -n "$(n 4000)"
  # active messages
  # ucx-asio-perf's active messages carry their number in an 8-byte header:
  # ucx_perftest sends one of that size too (-H 8), so both move the same bytes
  pt pt_amlat8 "$lib_env" -t ucp_am_lat -s 8 -H 8 -n "$L" -w "$(n 20000)" -e
  ap lib_amlat8_poll "" -t am_lat -s 8 --progress poll -n "$L"
  pt pt_ambw1m "$lib_env" -t ucp_am_bw -s 1048576 -H 8 -n "$(n 4000)" -w "$(n 400)" -e
  ap lib_ambw1m_poll "" -t am_bw -s 1048576 --progress poll -n "$(n 4000)"
  # RMA, 1 MiB, window 32 (ucp_put_bw's default; ucp_get defaults to 1, so -O)
  pt pt_put1m "$lib_env" -t ucp_put_bw -s 1048576 -n "$(n 4000)" -w "$(n 400)" -O 32 -e
  ap lib_put1m_poll "" -t put_bw -s 1048576 --progress poll --window 32 -n "$(n 4000)"
  ap ucp_put1m_poll "" --transport ucp -t put_bw -s 1048576 --progress poll --window 32 -n "$(n 4000)"
  pt pt_get1m "$lib_env" -t ucp_get -s 1048576 -n "$(n 4000)" -w "$(n 400)" -O 32 -e
  ap lib_get1m_poll "" -t get_bw -s 1048576 --progress poll --window 32 -n "$(n 4000)"
  ap ucp_get1m_poll "" --transport ucp -t get_bw -s 1048576 --progress poll --window 32 -n "$(n 4000)"
  # stream, 64 KiB writes
  for k in 1 2; do
    if [ $k = 1 ]; then pt pt_stbw64k "$lib_env" -t stream_bw -s 65536 -n "$(n 40000)" -w "$(n 4000)" -e; fi
    if [ $has_stream = 1 ]; then
      ap lib_stbw64k_poll "" -t stream_bw -s 65536 --progress poll -n "$(n 40000)"
    fi
    if [ $k = 2 ]; then pt pt_stbw64k "$lib_env" -t stream_bw -s 65536 -n "$(n 40000)" -w "$(n 4000)" -e; fi
  done
  pt pt_stbw64k_noeh "$lib_env_noeh" -t stream_bw -s 65536 -n "$(n 40000)" -w "$(n 4000)"
  ap tcp_stbw64k_event "" --transport tcp -t stream_bw -s 65536 --progress event -n "$(n 40000)"
  # over UCX's TCP transport
  pt pt_tcp_lat8 "$tcp" -t tag_lat -s 8 -n "$E" -w "$(n 2000)" -e
  pt pt_tcp_lat8_noeh "$tcp" -t tag_lat -s 8 -n "$E" -w "$(n 2000)"
  ap lib_tcp_lat8_poll "$tcp" -t tag_lat -s 8 --progress poll -n "$E"
  ap lib_tcp_lat8_event "$tcp" -t tag_lat -s 8 --progress event -n "$E"
  ap ucp_tcp_lat8_event "$tcp" --transport ucp -t tag_lat -s 8 --progress event -n "$E"
  pt pt_tcp_bw1m "$tcp" -t tag_bw -s 1048576 -n "$(n 2000)" -w "$(n 200)" -e
  ap lib_tcp_bw1m_poll "$tcp" -t tag_bw -s 1048576 --progress poll -n "$(n 2000)"
  demo_round
  # The echo samples with their defaults (the library's default progress
  # mode), and in poll and event mode; the default mode's idle cost.
  echo_run echo_default
  echo_run echo_poll --progress poll
  echo_run echo_event --progress event
  idle_cpu idle_default
}

# ---- latency and bandwidth against message size (the chart) ----
sweep_sizes="8 64 512 4096 32768 262144 1048576 4194304"
[ $quick = 1 ] && sweep_sizes="8 4096 1048576"
sweep_round() {
  for s in $sweep_sizes; do
    local L=$(( s >= 1048576 ? 2000 : (s >= 32768 ? 20000 : 100000) ))
    local B=$(( s >= 1048576 ? 2000 : (s >= 32768 ? 20000 : 500000) ))
    L=$(n $L); B=$(n $B)
    local E=$(( L < 10000 ? L : 10000 ))
    pt "sw_pt_lat_$s" "$lib_env" -t tag_lat -s "$s" -n "$L" -w "$(( L / 10 ))" -e
    ap "sw_lib_lat_poll_$s" "" -t tag_lat -s "$s" --progress poll -n "$L"
    ap "sw_lib_lat_event_$s" "" -t tag_lat -s "$s" --progress event -n "$E"
    ap "sw_tcp_lat_event_$s" "" --transport tcp -t tag_lat -s "$s" --progress event -n "$E"
    pt "sw_pt_bw_$s" "$lib_env" -t tag_bw -s "$s" -n "$B" -w "$(( B / 10 ))" -e
    ap "sw_lib_bw_poll_$s" "" -t tag_bw -s "$s" --progress poll -n "$B"
    ap "sw_tcp_bw_event_$s" "" --transport tcp -t tag_bw -s "$s" --progress event -n "$B"
  done
}

# ---- UCX settings across sizes (the defaults study) ----
# ucx_perftest tag_bw with peer error handling over shared memory (and over
# UCX's TCP transport), and ucx-asio-perf with the same settings in the
# environment (which wins over the library's own defaults).
study_sizes="65536 1048576 16777216"
[ $quick = 1 ] && study_sizes="65536 1048576"
study_variants="default MM_SEG_SIZE=16448 MM_SEG_SIZE=32832 RNDV_THRESH=inf"

# Which path the bulk data takes does not depend on timing: bytes that cross
# the loopback interface per 1 MiB message (TCP carries it) for ucx_perftest
# with peer error handling, with and without the library's settings.
lo_bytes() { awk '/^ *lo:/ {print $2}' /proc/net/dev; }
path_study() {
  local label envs b0 b1 n=200
  for label in ucx_defaults library_settings library_settings+get_zcopy library_settings+thresh_inf no_error_handling; do
    case $label in
      ucx_defaults) envs="" ;;
      library_settings) envs="$lib_env" ;;
      library_settings+get_zcopy) envs="$lib_env UCX_RNDV_SCHEME=get_zcopy" ;;
      library_settings+thresh_inf) envs="$lib_env UCX_RNDV_THRESH=inf" ;;
      no_error_handling) envs="" ;;
    esac
    local eh=-e
    [ $label = no_error_handling ] && eh=""
    b0=$(lo_bytes)
    pt "path_$label" "$envs" -t tag_bw -s 1048576 -n $n -w 1 $eh
    b1=$(lo_bytes)
    echo "| $label | \`${envs:-UCX defaults}\` ${eh:-(no -e)} | $(( (b1 - b0) / (n + 1) )) | $(bw "path_$label") |" >> "$out/path.md"
  done
}
study_round() {
  local v s n
  for s in $study_sizes; do
    n=$(( s >= 16777216 ? 200 : (s >= 1048576 ? 2000 : 20000) )); n=$(n $n)
    for v in $study_variants; do
      local e="$sm_eh" t="UCX_TLS=tcp,self" l="UCX_MM_ERROR_HANDLING=y"
      [ $v = default ] || { e="$e UCX_$v"; t="$t UCX_$v"; l="$l UCX_$v"; }
      pt "st_shm_${v}_$s" "$e" -t tag_bw -s "$s" -n "$n" -w "$(( n / 10 + 1 ))" -e
      ap "st_lib_${v}_$s" "$l" --ucx-defaults -t tag_bw -s "$s" --progress poll -n "$n"
      # Shared-memory segment sizes mean nothing over TCP.
      case $v in MM_*) continue ;; esac
      pt "st_tcp_${v}_$s" "$t" -t tag_bw -s "$s" -n "$(( n / 4 + 1 ))" -w "$(( n / 40 + 1 ))" -e
    done
  done
}

if [ $study_only = 1 ]; then
  for r in $(seq "$rounds"); do
    echo "== study round $r/$rounds ($(( SECONDS - t_start )) s, load $(cut -d' ' -f1 /proc/loadavg))"
    study_round
  done
  { printf '| run |'; for s in $study_sizes; do printf ' %s |' "$s"; done; echo
    printf '|---|'; for s in $study_sizes; do printf -- '---|'; done; echo
    for tr in shm lib tcp; do
      for v in $study_variants; do
        printf '| %s %s |' "$tr" "$v"
        for s in $study_sizes; do
          printf ' %s |' "$(awk -v k="st_${tr}_${v}_$s" '$1 == k {print $4}' "$results" | sort -g |
            awk '{v[NR]=$1} END {if (NR == 0) print "-"; else print v[int((NR+1)/2)]}')"
        done
        echo
      done
    done; } | tee "$out/study_only.md"
  exit 0
fi

echo "| run | UCX settings | loopback bytes per 1 MiB message | MiB/s |" > "$out/path.md"
echo "|---|---|---|---|" >> "$out/path.md"
path_study
# Time guard: a loaded machine makes every run slower; stay within 10 minutes
# (the chart and the settings study first give way, then later rounds).
done_rounds=0
for r in $(seq "$rounds"); do
  if [ $done_rounds -ge 1 ] && [ $(( SECONDS - t_start )) -gt 450 ]; then
    echo "bench: stopping after $done_rounds rounds to stay within 10 minutes" >&2
    break
  fi
  echo "== round $r/$rounds ($(( SECONDS - t_start )) s, load $(cut -d' ' -f1 /proc/loadavg))"
  one_round
  if [ "$r" -le 2 ] && [ $(( SECONDS - t_start )) -lt 240 ]; then study_round; fi
  if [ "$r" -le 2 ] && [ $(( SECONDS - t_start )) -lt 300 ]; then sweep_round; fi
  done_rounds=$r
done
rounds=$done_rounds
# Counted instructions per 8 B message (repeatable where time is not), each
# side of a tag_bw in turn, library and raw UCP, where valgrind is installed.
if command -v valgrind > /dev/null; then
  while read -r label ir; do
    if [ "$ir" -gt 0 ]; then record "ir_$label" "$ir" - - - -; fi
  done < <(CALLGRIND_MSG_N1=$(n 20000) CALLGRIND_MSG_N2=$(n 60000) tools/callgrind.sh --brief "$build" 2>/dev/null || true)
  while read -r label ir; do
    if [[ $label == library_* ]] && [ "$ir" -gt 0 ]; then record "ir_${label}_nometrics" "$ir" - - - -; fi
  done < <(CALLGRIND_MSG_N1=$(n 20000) CALLGRIND_MSG_N2=$(n 60000) tools/callgrind.sh --brief "$build-nometrics" 2>/dev/null || true)
fi
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
elapsed=$(( SECONDS - t_start ))



table="$out/targets.md"
{
  echo "| metric | measured | ratio | target | |"
  echo "|---|---|---|---|---|"
  row() { # metric measured ratio op limit
    echo "| $1 | $2 | $3 | $4 $5 | $(verdict "$3" "$4" "$5") |"
  }
  # prow METRIC KEY_A KEY_B COLUMN UNIT OP LIMIT: a row whose ratio is the
  # median of the pairs' ratios (A and B run one after the other, once a
  # round or, for the bandwidth rows, twice in the order B-A-A-B, in the
  # same state of a machine that changes between states for minutes at a
  # time); the medians of each are shown beside.
  prow() {
    local med_a med_b
    med_a=$(median "$2" "$4"); med_b=$(median "$3" "$4")
    row "$1, median of the pairs' ratios (each pair's, in run order: $(pairs "$2" "$3" "$4"))" \
      "$med_a / $med_b $5 (medians; their ratio $(ratio "$med_a" "$med_b"))" \
      "$(paired_ratio "$2" "$3" "$4")" "$6" "$7"
  }
  prow "8 B tag latency, poll: library / ucx_perftest tag_lat" lib_lat8_poll pt_lat8 2 µs "<=" 1.2
  prow "8 B tag latency, hybrid: library / ucx_perftest tag_lat" lib_lat8_hybrid pt_lat8 2 µs "<=" 1.2
  r=$(paired_ratio lib_lat8_event ucp_lat8_event 2)
  row "8 B tag latency, event: library / raw UCP sleeping on the efd, median of the rounds' ratios (each round's: $(pairs lib_lat8_event ucp_lat8_event 2))" "$(lat lib_lat8_event) / $(lat ucp_lat8_event) µs (medians; their ratio $(ratio "$(lat lib_lat8_event)" "$(lat ucp_lat8_event)"))" "$r" "<=" 1.1
  r=$(ratio "$(lat lib_lat8_event)" "$(lat tcp_lat8_event)")
  row "8 B tag latency, event: library / Asio TCP" "$(lat lib_lat8_event) / $(lat tcp_lat8_event) µs" "$r" "<" 1.0
  r=$(ratio "$(lat lib_lat8_event)" "$(lat pipe_lat8)")
  echo "| 8 B latency, event: library / pipe ping-pong (the OS wake-up floor) | $(lat lib_lat8_event) / $(lat pipe_lat8) µs | $r | (reference) | |"
  for m in poll hybrid; do
    r=$(ratio "$(lat demo_${m}_rtt)" "$(lat demo_event_rtt)")
    row "two workers on one io_context, 8 B round trip, $m / event (ucx-asio-demo)" "$(lat demo_${m}_rtt) / $(lat demo_event_rtt) µs" "$r" "<=" 1
    row "two workers on one io_context, 8 B round trip, $m (µs)" "$(lat demo_${m}_rtt) µs" "$(lat demo_${m}_rtt)" "<=" 3
    row "handler posted from another thread while two $m workers spin: delay (µs)" "$(lat demo_${m}_post) µs (floor $(lat demo_asio_post))" "$(lat demo_${m}_post)" "<=" 5
    r=$(ratio "$(lat demo_${m}_timer)" "$(lat demo_asio_timer)")
    row "steady_timer lateness while two $m workers spin / beside a plain Asio handler loop" "$(lat demo_${m}_timer) / $(lat demo_asio_timer) µs" "$r" "<=" 1.2
  done
  r=$(ratio "$(lat echo_default)" "$(lat echo_poll)")
  row "echo samples (8 B, two processes, shared memory), defaults / poll: median round trip" "$(lat echo_default) / $(lat echo_poll) µs (event: $(lat echo_event))" "$r" "<=" 1.5
  r=$(ratio "$(mr echo_default)" "$(mr echo_poll)")
  row "echo samples, defaults / poll: messages per second" "$(mr echo_default) / $(mr echo_poll) msg/s (event: $(mr echo_event))" "$r" ">=" 0.5
  r=$(ratio "$(median echo_default 3)" "$(lat echo_default)")
  row "echo samples, defaults: p99 / median round trip" "$(median echo_default 3) / $(lat echo_default) µs" "$r" "<=" 3
  row "echo_server with its defaults, one silent connection: % of a core" "$(lat idle_default) %" "$(lat idle_default)" "<=" 1
  r="$(ratio "$(lat ir_library_send)" "$(lat ir_ucp_send)"); $(ratio "$(lat ir_library_recv)" "$(lat ir_ucp_recv)")"
  echo "| instructions per 8 B message, tag_bw window 64 (callgrind, one side at a time, the fewest of three): library / raw UCP, sending; receiving | $(lat ir_library_send) / $(lat ir_ucp_send); $(lat ir_library_recv) / $(lat ir_ucp_recv) | $r | (reference) | |"
  prow "8 B tag message rate, window 64: library / ucx_perftest tag_bw" lib_mr8_poll pt_mr8 5 msg/s ">=" 0.9
  prow "8 B tag message rate, window 64, sent with try_tag_send, received with a tag_receiver (64 slots): library / ucx_perftest tag_bw" lib_mr8_batch pt_mr8 5 msg/s ">=" 0.9
  a=$(best lib_lat8_poll_metrics 2 min); b=$(best lib_lat8_poll_nometrics 2 min)
  row "8 B tag latency, poll: operation metrics on (histograms off) / a build without them, best runs" "$a / $b µs (medians $(lat lib_lat8_poll_metrics) / $(lat lib_lat8_poll_nometrics))" "$(ratio3 "$a" "$b")" "<=" 1.02
  a=$(best lib_mr8_poll_metrics 5 max); b=$(best lib_mr8_poll_nometrics 5 max)
  row "8 B tag message rate: operation metrics on (histograms off) / a build without them, best runs" "$a / $b msg/s (medians $(mr lib_mr8_poll_metrics) / $(mr lib_mr8_poll_nometrics))" "$(ratio3 "$a" "$b")" ">=" 0.98
  a=$(lat ir_library_send); b=$(lat ir_library_send_nometrics); c=$(lat ir_library_recv); d=$(lat ir_library_recv_nometrics)
  echo "| instructions per 8 B message (callgrind, as above): operation metrics on / off, sending; receiving | $a / $b; $c / $d | $(ratio3 "$a" "$b"); $(ratio3 "$c" "$d") | (reference) | |"
  # Histograms on and off run next to each other in every round: the
  # machine's state changes in minutes, and a round takes about two.
  prow "8 B tag latency, poll: latency histograms on / off" lib_lat8_poll_hist lib_lat8_poll 2 µs "<=" 1.05
  prow "8 B tag message rate: latency histograms on / off" lib_mr8_poll_hist lib_mr8_poll 5 msg/s ">=" 0.95
  prow "1 MiB tag bandwidth: library / ucx_perftest tag_bw" lib_bw1m_poll pt_bw1m 4 MiB/s ">=" 0.95
  prow "16 MiB tag bandwidth: library / ucx_perftest tag_bw" lib_bw16m_poll pt_bw16m 4 MiB/s ">=" 0.95
  prow "8 B AM latency (8 B header): library / ucx_perftest ucp_am_lat -H 8" lib_amlat8_poll pt_amlat8 2 µs "<=" 1.3
  prow "1 MiB AM bandwidth (8 B header): library / ucx_perftest ucp_am_bw -H 8" lib_ambw1m_poll pt_ambw1m 4 MiB/s ">=" 0.9
  r=$(ratio "$(bw lib_put1m_poll)" "$(bw pt_put1m)")
  echo "| 1 MiB put bandwidth, window 32: library / ucx_perftest ucp_put_bw | $(bw lib_put1m_poll) / $(bw pt_put1m) MiB/s | $r | (reference) | |"
  r=$(ratio "$(bw lib_get1m_poll)" "$(bw pt_get1m)")
  echo "| 1 MiB get bandwidth, window 32: library / ucx_perftest ucp_get | $(bw lib_get1m_poll) / $(bw pt_get1m) MiB/s | $r | (reference) | |"
  prow "64 KiB stream bandwidth: library / ucx_perftest stream_bw" lib_stbw64k_poll pt_stbw64k 4 MiB/s ">=" 0.95
  r=$(ratio "$(bw lib_stbw64k_poll)" "$(bw tcp_stbw64k_event)")
  row "64 KiB stream bandwidth: library / Asio TCP" "$(bw lib_stbw64k_poll) / $(bw tcp_stbw64k_event) MiB/s" "$r" ">=" 3
  r=$(ratio "$(lat pt_lat8)" "$(lat pt_lat8_noeh)")
  row "error handling on / off: ucx_perftest 8 B tag_lat" "$(lat pt_lat8) / $(lat pt_lat8_noeh) µs" "$r" "<=" 1.2
  r=$(ratio "$(mr pt_mr8_noeh)" "$(mr pt_mr8)")
  row "error handling off / on: ucx_perftest 8 B tag_bw rate" "$(mr pt_mr8_noeh) / $(mr pt_mr8) msg/s" "$r" "<=" 1.2
  r=$(ratio "$(bw pt_bw1m_noeh)" "$(bw pt_bw1m)")
  row "error handling off / on: ucx_perftest 1 MiB tag_bw" "$(bw pt_bw1m_noeh) / $(bw pt_bw1m) MiB/s" "$r" "<=" 1.2
  r=$(ratio "$(bw pt_stbw64k_noeh)" "$(bw pt_stbw64k)")
  row "error handling off / on: ucx_perftest 64 KiB stream_bw" "$(bw pt_stbw64k_noeh) / $(bw pt_stbw64k) MiB/s" "$r" "<=" 1.2
  r=$(ratio "$(lat pt_tcp_lat8)" "$(lat pt_tcp_lat8_noeh)")
  row "error handling on / off: ucx_perftest 8 B tag_lat over TCP" "$(lat pt_tcp_lat8) / $(lat pt_tcp_lat8_noeh) µs" "$r" "<=" 1.2
  r=$(ratio "$(bw lib_bw1m_poll)" "$(bw pt_bw1m_ucxdef)")
  row "1 MiB tag bandwidth: library (its defaults) / ucx_perftest -e (UCX's defaults)" "$(bw lib_bw1m_poll) / $(bw pt_bw1m_ucxdef) MiB/s" "$r" ">=" 1.5
  r=$(ratio "$(bw lib_bw1m_poll)" "$(bw pt_bw1m_ucxdef_noeh)")
  echo "| 1 MiB tag bandwidth: library (its defaults) / ucx_perftest without error handling (UCX's defaults) | $(bw lib_bw1m_poll) / $(bw pt_bw1m_ucxdef_noeh) MiB/s | $r | (reference) | |"
  a=$(median lib_lat8_poll 6); b=$(median lib_mr8_poll 6); c=$(median lib_mr8_batch 6)
  d=$(median lib_bw1m_poll 6); e=$(median lib_bw16m_poll 6); f=$(median lib_amlat8_poll 6)
  g=$(median lib_ambw1m_poll 6); h=$(median lib_stbw64k_poll 6)
  worst=$(printf '%s\n' "$a" "$b" "$c" "$d" "$e" "$f" "$g" "$h" | grep -v -- - | sort -g | tail -1)
  row "heap allocations per operation, steady state (tag lat, rate, batch rate, 1 MiB, 16 MiB; AM lat, 1 MiB AM; 64 KiB stream)" "$a, $b, $c, $d, $e; $f, $g; $h" "${worst:--}" "<=" 0
  a=$(median lib_lat8_poll_nometrics 6); b=$(median lib_mr8_poll_nometrics 6)
  worst=$(printf '%s\n' "$a" "$b" | grep -v -- - | sort -g | tail -1)
  row "heap allocations per operation without operation metrics (tag lat, rate)" "$a, $b" "${worst:--}" "<=" 0
} > "$table"

details="$out/details.md"
{
  echo "| run | median latency (µs) | average latency (µs) | MiB/s | msg/s | allocs/op | runs |"
  echo "|---|---|---|---|---|---|---|"
  for key in $(awk '{print $1}' "$results" | awk '!seen[$0]++' | grep -v '^sw_\|^st_\|^path_'); do
    echo "| $key | $(median "$key" 2) | $(median "$key" 3) | $(median "$key" 4) | $(median "$key" 5) | $(median "$key" 6) | $(awk -v k="$key" '$1 == k' "$results" | wc -l) |"
  done
} > "$details"

study="$out/study.md"
{
  printf '| run |'; for s in $study_sizes; do printf ' %s B |' "$s"; done; echo
  printf '|---|'; for s in $study_sizes; do printf -- '---|'; done; echo
  for tr in shm lib tcp; do
    for v in $study_variants; do
      [ $tr = tcp ] && case $v in MM_*) continue ;; esac
      printf '| %s %s |' "$tr" "$v"
      for s in $study_sizes; do printf ' %s |' "$(bw "st_${tr}_${v}_$s")"; done
      echo
    done
  done
} > "$study"

echo
echo "== targets (medians over $rounds rounds; load $load_before -> $load_after; ${elapsed} s)"
cat "$table"
echo
echo "== UCX settings study: ucx_perftest tag_bw MiB/s with peer error handling (medians)"
cat "$study"
echo
echo "== bulk data path (1 MiB tag_bw)"
cat "$out/path.md"
echo
echo "== every run (medians)"
cat "$details"

# ---- chart ----
chart_data="$out/sweep.dat"
{
  echo "# size pt_lat lib_lat_poll lib_lat_event tcp_lat_event pt_bw lib_bw_poll tcp_bw_event"
  for s in $sweep_sizes; do
    echo "$s $(lat sw_pt_lat_$s) $(lat sw_lib_lat_poll_$s) $(lat sw_lib_lat_event_$s) $(lat sw_tcp_lat_event_$s) $(bw sw_pt_bw_$s) $(bw sw_lib_bw_poll_$s) $(bw sw_tcp_bw_event_$s)"
  done
} > "$chart_data"
png="$out/benchmarks.png"
if command -v gnuplot > /dev/null; then
  gnuplot <<EOF
set terminal pngcairo size 1200,500 font "sans,10"
set output "$png"
set datafile missing "-"
set multiplot layout 1,2 title "ucx-asio on $(nproc) cores, loopback, shared memory (medians)"
set logscale xy
set grid
set key top left
set xlabel "message size (bytes)"
set ylabel "one-way latency (µs)"
set title "tag latency"
plot "$chart_data" using 1:2 with linespoints title "ucx\\\\_perftest tag\\\\_lat", \
     "" using 1:3 with linespoints title "library, poll", \
     "" using 1:4 with linespoints title "library, event", \
     "" using 1:5 with linespoints title "Asio TCP, event"
set ylabel "bandwidth (MiB/s)"
set title "tag bandwidth"
set key bottom right
plot "$chart_data" using 1:6 with linespoints title "ucx\\\\_perftest tag\\\\_bw", \
     "" using 1:7 with linespoints title "library, poll", \
     "" using 1:8 with linespoints title "Asio TCP, event"
unset multiplot
EOF
else
  echo "bench: gnuplot not found (tools/setup.sh installs gnuplot-nox); no chart" >&2
fi

[ $docs = 1 ] || exit 0

# ---- docs/development/benchmarks.md ----
machine="$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2/1048576}' /proc/meminfo), Linux $(uname -r)"
# `ucx_info -v` prints "# Version 1.13.1" (older releases "version=..."); the
# package database is the fallback.
ucx_version=$(ucx_info -v 2>/dev/null | sed -n 's/^# *[Vv]ersion \([^ ]*\).*/\1/p; s/.*version=\([^ ]*\).*/\1/p' | head -1)
[ -n "$ucx_version" ] || ucx_version=$(pkg-config --modversion ucx 2>/dev/null || true)
[ -n "$ucx_version" ] || ucx_version=$(dpkg-query -W -f '${Version}' libucx0 2>/dev/null || true)
generated="$out/generated.md"
{
  echo "<!-- bench:begin (written by tools/bench.sh; edit outside these markers) -->"
  echo "## Results of the last run"
  echo
  echo "- Run: $started, $rounds rounds, ${elapsed} s; load average before $load_before, after $load_after."
  echo "- Machine: $machine; UCX ${ucx_version:-?}; $(c++ --version | head -1)."
  echo "- Command: \`tools/bench.sh --rounds $rounds$([ $quick = 1 ] && echo ' --quick')\`; every process with \`UCX_NET_DEVICES=lo\`."
  echo "- The library's UCX settings (\`ucx-asio-perf --print-config\`), also given to ucx_perftest for the like-for-like rows: \`${lib_env:-none}\`."
  echo
  echo "### Targets (medians over the rounds)"
  echo
  cat "$table"
  echo
  echo "### UCX settings: tag_bw with peer error handling (MiB/s, medians)"
  echo
  echo "\`shm\`: ucx_perftest \`-e\` with \`$sm_eh\` and the setting; \`lib\`: ucx-asio-perf (poll, \`--ucx-defaults\`) with \`UCX_MM_ERROR_HANDLING=y\` and the setting; \`tcp\`: ucx_perftest \`-e\` with \`UCX_TLS=tcp,self\` and the setting. \`default\` is UCX's own choice."
  echo
  cat "$study"
  echo
  echo "### Which path the bulk data takes (1 MiB ucx_perftest tag_bw, one run)"
  echo
  cat "$out/path.md"
  echo
  echo "### Every run (medians)"
  echo
  echo "Keys: \`pt_\` ucx_perftest (\`-e\`: peer error handling, with the library's settings), \`_noeh\` the same settings without error handling, \`_ucxdef\` UCX's defaults (with \`-e\`; \`_ucxdef_noeh\` without); \`lib_\` ucx-asio-perf over the library, \`ucp_\` over raw UCP, \`tcp_\` over Asio TCP; \`_tcp_\` in the middle: \`UCX_TLS=tcp,self\`. \`lat8\`: 8 B tag_lat, \`mr8\`: 8 B tag_bw (rate), \`bw1m\`/\`bw16m\`: tag_bw, \`amlat8\`/\`ambw1m\`: active messages, \`put1m\`/\`get1m\`: 1 MiB put_bw/get_bw (ucx_perftest ucp_put_bw/ucp_get, window 32), \`stbw64k\`: stream_bw with 64 KiB writes; \`_batch\`: sent with \`ucx::try_tag_send\` and received with a \`ucx::tag_receiver\` (\`--style batch\`), \`_hist\`: with latency histograms, \`_nometrics\`: over a library built with \`-DUCX_ASIO_OPERATION_METRICS=OFF\`."
  echo
  cat "$details"
  echo
  echo "### Latency and bandwidth against message size"
  echo
  echo "![latency and bandwidth against message size](benchmarks.png)"
  echo
  echo '```'
  cat "$chart_data"
  echo '```'
  echo "<!-- bench:end -->"
} > "$generated"

doc="$root/docs/development/benchmarks.md"
if [ -f "$doc" ] && grep -q '<!-- bench:begin' "$doc"; then
  awk -v gen="$generated" '
    /<!-- bench:begin/ {while ((getline l < gen) > 0) print l; skip = 1; next}
    /<!-- bench:end -->/ {skip = 0; next}
    !skip {print}' "$doc" > "$doc.tmp" && mv "$doc.tmp" "$doc"
else
  { echo "# Benchmarks"; echo; cat "$generated"; } > "$doc"
fi
[ -f "$png" ] && cp "$png" "$root/docs/development/benchmarks.png"
echo "bench: wrote docs/development/benchmarks.md and docs/development/benchmarks.png"
