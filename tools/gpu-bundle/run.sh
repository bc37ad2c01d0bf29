#!/usr/bin/env bash
# The GPU bundle's runner (made by tools/gpu-bundle.sh): runs every step with
# a time limit and writes one results file, on a host that has a GPU driver
# and nothing else of ours (no UCX, no Boost, no CUDA Toolkit, no network).
#
#   ./run.sh [--results FILE] [--nccl PATH] [--quick]
#
#   --results FILE  where the results go (default: results.md beside run.sh);
#                   each step's output goes to the folder logs beside it
#   --nccl PATH     the NCCL library (libnccl.so.2); by default
#                   UCXASIO_NCCL_LIBRARY, else one the host's loader or
#                   Python's nvidia-nccl wheel provides, else none
#   --quick         fewer iterations in the bandwidth table
#
# Steps that need a GPU report "skipped" with the reason where there is
# none; the others must pass anywhere. Everything runs on this host alone:
# UCX on loopback and shared memory. Exit status: 0 when no step failed, 1
# otherwise.
set -uo pipefail
export PATH=${PATH:-/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin}
here=$(cd "$(dirname "$0")" && pwd)
results=$here/results.md
nccl_library=${UCXASIO_NCCL_LIBRARY:-}
quick=no
while [ $# -gt 0 ]; do
  case "$1" in
    --results) results=$2; shift ;;
    --nccl) nccl_library=$2; shift ;;
    --quick) quick=yes ;;
    *) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
  esac
  shift
done
start=$(date +%s)
work=$(mktemp -d "${TMPDIR:-/tmp}/ucx-asio-gpu.XXXXXX")
logs=$(dirname "$results")/logs
rm -rf "$logs"
mkdir -p "$logs" || exit 1
logs=$(cd "$logs" && pwd)
trap 'rm -rf "$work"' EXIT
export TMPDIR=$work
export LD_LIBRARY_PATH=$here/lib
export UCX_NET_DEVICES=lo
bin=$here/bin

# ---- the host ----
glibc_needed=$(sed -n 's/^glibc needed: //p' "$here/MANIFEST")
glibc_here=$(getconf GNU_LIBC_VERSION 2> /dev/null | awk '{ print $2 }')
gpus="none"
driver="none"
if command -v nvidia-smi > /dev/null; then
  gpus=$(timeout 30 nvidia-smi -L 2> /dev/null | sed 's/ (UUID.*//' | paste -sd ';' -)
  driver=$(timeout 30 nvidia-smi --query-gpu=driver_version --format=csv,noheader 2> /dev/null |
    head -1)
  [ -n "$gpus" ] || gpus="none (nvidia-smi lists none)"
else
  gpus="none (no nvidia-smi)"
fi
if [ -z "$nccl_library" ]; then
  nccl_library=$( (ldconfig -p 2> /dev/null || true) | awk '$1 == "libnccl.so.2" { print $NF; exit }')
fi
if [ -z "$nccl_library" ] && command -v python3 > /dev/null; then
  nccl_library=$(timeout 60 python3 -c '
import os, importlib.util
spec = importlib.util.find_spec("nvidia.nccl")
for d in (spec.submodule_search_locations or []) if spec else []:
    p = os.path.join(d, "lib", "libnccl.so.2")
    if os.path.exists(p):
        print(p)
        break' 2> /dev/null)
fi
if [ -n "$nccl_library" ]; then export UCXASIO_NCCL_LIBRARY=$nccl_library; fi

# ---- steps ----
rows=()
skipped_tests=()
failed_tests=()
failures=0

# xml_cases FILE KIND: "suite.test: message" for each test case of a
# GoogleTest XML report with a <KIND> element (skipped, failure).
xml_cases() {
  awk -v kind="$2" '
    /<testcase / {
      match($0, /name="[^"]*"/); name = substr($0, RSTART + 6, RLENGTH - 7)
      match($0, /classname="[^"]*"/); suite = substr($0, RSTART + 11, RLENGTH - 12)
    }
    $0 ~ "<" kind " message=\"" {
      m = $0; sub(".*<" kind " message=\"", "", m); sub("\".*", "", m)
      print suite "." name ": " m
    }' "$1" | sed 's/: [^ :]*:[0-9]*&#x0A;/: /; s/&#x0A;/ /g; s/&quot;/"/g; s/&apos;/'"'"'/g; s/&lt;/</g; s/&gt;/>/g; s/&amp;/\&/g'
}

# step NAME NEEDS_GPU LIMIT_S COMMAND...: runs COMMAND with a time limit,
# its output in the log; 0 passes, 77 skips (the last line of the output
# gives the reason), anything else fails. A GoogleTest program's report
# (GTEST_OUTPUT) adds its counts and its skipped and failed tests.
step() {
  local name=$1 gpu=$2 limit=$3
  shift 3
  local log=$logs/$name.log xml=$logs/$name.xml t0 t1 status result detail
  echo "=== $name" >&2
  t0=$(date +%s.%N)
  GTEST_OUTPUT=xml:$xml timeout -k 10 "$limit" "$@" > "$log" 2>&1
  status=$?
  t1=$(date +%s.%N)
  case $status in
    0) result=passed ;;
    77) result=skipped ;;
    124 | 137) result=failed; echo "(stopped after the time limit of $limit s)" >> "$log" ;;
    *) result=failed ;;
  esac
  detail=$(grep -v -e '^[[:space:]]*$' -e '^#' "$log" | tail -1 | cut -c1-160)
  if [ -f "$xml" ]; then
    local total failed skipped
    total=$(grep -o '<testcase ' "$xml" | wc -l)
    failed=$(xml_cases "$xml" failure | wc -l)
    skipped=$(xml_cases "$xml" skipped | wc -l)
    detail="$((total - failed - skipped)) passed, $failed failed, $skipped skipped"
    while IFS= read -r line; do skipped_tests+=("$name: $line"); done < <(xml_cases "$xml" skipped)
    while IFS= read -r line; do failed_tests+=("$name: $line"); done < <(xml_cases "$xml" failure)
  fi
  if [ $result = failed ]; then
    failures=$((failures + 1))
    echo "--- $name failed (exit status $status); its output ends with:" >&2
    tail -40 "$log" >&2
  fi
  rows+=("| $name | $gpu | $result | $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') | ${detail//|/\\|} |")
}

if [ -n "$glibc_here" ] && [ "$(printf '%s\n%s\n' "$glibc_needed" "$glibc_here" | sort -V | head -1)" != "$glibc_needed" ]; then
  rows+=("| glibc | no | failed | 0 | this host's glibc $glibc_here is older than $glibc_needed, which the bundle's programs need |")
  failures=1
else
  step info no 120 "$bin/ucx-asio-info"
  cuda_line=$(grep -m1 '^ *cuda:' "$logs/info.log" | sed 's/^ *//')
  [ -n "$cuda_line" ] || cuda_line="cuda: (not reported)"
  step unit_core no 300 "$bin/unit_core"
  step unit_internals no 300 "$bin/unit_internals"
  step integration_gpu yes 300 "$bin/integration_gpu"
  if [ -x "$bin/nccl_communicator" ]; then
    step nccl_communicator yes 300 "$bin/nccl_communicator" --gtest_filter='nccl.*'
    step nccl_missing_library no 120 env UCXASIO_NCCL_LIBRARY=/nonexistent/libnccl.so.2 \
      UCXASIO_NCCL_TEST_MISSING=1 "$bin/nccl_communicator" --gtest_filter='nccl_missing.*'
  fi
  step group_host_memory_4_ranks no 300 "$bin/gpu-group.sh" "$bin/ucx-asio-gpu-group" 4 \
    --memory host --count 300000
  step group_device_memory_2_ranks yes 300 "$bin/gpu-group.sh" "$bin/ucx-asio-gpu-group" 2 \
    --memory cuda
  step group_device_memory_4_ranks_nccl yes 300 "$bin/gpu-group.sh" \
    "$bin/ucx-asio-gpu-group" 4 --memory cuda --nccl
  step perf_host_memory no 120 "$bin/ucx-asio-perf" --local --memory host --test tag_bw \
    --size 1m --iters 50
  iters=100
  [ $quick = yes ] && iters=20
  step gpu_bench yes 420 "$bin/gpu-bench.sh" --perf "$bin/ucx-asio-perf" --iters "$iters"
fi

# ---- the results ----
{
  echo "# ucx-asio GPU bundle results"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- host: $(uname -srm), $(nproc) cores, glibc ${glibc_here:-unknown} (the bundle needs $glibc_needed)"
  echo "- GPU: $gpus; driver: ${driver:-unknown}"
  echo "- ${cuda_line:-cuda: (not run)}"
  echo "- NCCL: ${nccl_library:-none found (--nccl PATH names one)}"
  sed 's/^/- bundle: /' "$here/MANIFEST"
  echo "- run time: $(($(date +%s) - start)) s"
  echo
  echo "| step | needs a GPU | result | seconds | detail |"
  echo "|---|---|---|---|---|"
  printf '%s\n' "${rows[@]}"
  if [ ${#failed_tests[@]} -gt 0 ]; then
    echo
    echo "## Failed tests"
    echo
    printf -- '- %s\n' "${failed_tests[@]}"
  fi
  if [ ${#skipped_tests[@]} -gt 0 ]; then
    echo
    echo "## Skipped tests, with the reason"
    echo
    printf -- '- %s\n' "${skipped_tests[@]}"
  fi
  if [ -s "$logs/gpu_bench.log" ] && grep -q '^test ' "$logs/gpu_bench.log"; then
    echo
    echo "## Device-memory bandwidth (gpu-bench.sh)"
    echo
    echo '```'
    cat "$logs/gpu_bench.log"
    echo '```'
  fi
  for group in group_device_memory_2_ranks group_device_memory_4_ranks_nccl; do
    if [ -s "$logs/$group.log" ]; then
      echo
      echo "## $group"
      echo
      echo '```'
      cat "$logs/$group.log"
      echo '```'
    fi
  done
} > "$results"
cat "$results"
[ $failures -eq 0 ]
