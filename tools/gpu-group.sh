#!/usr/bin/env bash
# Starts RANKS processes of ucx-asio-gpu-group on this machine, joined through
# a file store in a fresh directory, and waits for them:
#
#   tools/gpu-group.sh PROGRAM RANKS [ucx-asio-gpu-group options...]
#
# Each rank's output is printed with its rank in front. Exit status: 0 when
# every rank passed; 77 when every rank skipped (the reason is in their
# output); 1 otherwise, or when a rank is still running after the time
# limit (GPU_GROUP_TIME_LIMIT seconds, default 300; every rank is then
# killed).
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: $0 PROGRAM RANKS [options...]" >&2
  exit 2
fi
program=$1
ranks=$2
shift 2
limit=${GPU_GROUP_TIME_LIMIT:-300}
store=$(mktemp -d "${TMPDIR:-/tmp}/gpu-group.XXXXXX")
trap 'rm -rf "$store"' EXIT
export UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo}
pids=()
for ((r = 0; r < ranks; r++)); do
  UCXASIO_RANK=$r UCXASIO_SIZE=$ranks UCXASIO_STORE_DIR=$store \
    timeout -k 10 "$limit" "$program" "$@" > "$store/out.$r" 2>&1 &
  pids+=($!)
done
passed=0
skipped=0
for ((r = 0; r < ranks; r++)); do
  wait "${pids[$r]}"
  status=$?
  sed "s/^/[$r] /" "$store/out.$r"
  case $status in
    0) passed=$((passed + 1)) ;;
    77) skipped=$((skipped + 1)) ;;
    124 | 137) echo "[$r] still running after ${limit} s: killed" ;;
    *) echo "[$r] exit status $status" ;;
  esac
done
if [ "$passed" -eq "$ranks" ]; then exit 0; fi
if [ "$skipped" -eq "$ranks" ]; then exit 77; fi
exit 1
