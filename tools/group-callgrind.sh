#!/usr/bin/env bash
# Counted instructions per collective (valgrind --tool=callgrind), this
# library's against Open MPI's, in the same process: repeatable on a noisy
# machine where the wall-clock times of tools/group-bench.sh vary from run to
# run. group-bench runs under mpirun with one rank under callgrind; the
# inclusive instruction counts of its two call loops (group_bench_mpi_calls,
# group_bench_group_calls), divided by the calls made, are the cost of one
# collective on that rank, waiting included (a rank under callgrind is the
# slowest, so it seldom waits).
#
#   tools/group-callgrind.sh [--ranks N] [--rank R] [--build-dir DIR]
#                            [--iterations N] [CASE...]
#
# CASE is a group-bench --only argument (default: barrier broadcast:8
# allreduce:8 allgather:8). The build directory needs tools/group-bench
# (default: build-perf, a Release build).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="$here/build-perf"
ranks=4
rank=""
iterations=1000
rounds=2
cases=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ranks) ranks="$2"; shift 2 ;;
    --rank) rank="$2"; shift 2 ;;
    --build-dir) build="$2"; shift 2 ;;
    --iterations) iterations="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) cases+=("$1"); shift ;;
  esac
done
[[ ${#cases[@]} -gt 0 ]] || cases=(barrier broadcast:8 allreduce:8 allgather:8)
[[ -n "$rank" ]] || rank=$((ranks - 1))
bench="$build/tools/group-bench"
if [[ ! -x "$bench" ]]; then
  echo "group-callgrind: $bench is not built (needs libopenmpi-dev)" >&2
  exit 2
fi
for tool in valgrind callgrind_annotate mpirun; do
  command -v "$tool" > /dev/null || { echo "group-callgrind: $tool is missing (tools/setup.sh)" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/wrap.sh" << EOF
#!/usr/bin/env bash
if [[ "\${OMPI_COMM_WORLD_RANK:-}" == "$rank" ]]; then
  exec valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" "\$@"
fi
exec "\$@"
EOF
chmod +x "$tmp/wrap.sh"
export UCX_NET_DEVICES=lo OMPI_MCA_plm_rsh_agent=
# Every round and the warm-up call of each side.
calls=$((iterations * rounds + 1))

# inclusive FUNCTION : the inclusive instruction count of FUNCTION in cg.out
inclusive() {
  callgrind_annotate --inclusive=yes --threshold=100 "$tmp/cg.out" 2> /dev/null |
    awk -v f="$1" '!found && index($0, ":" f) { gsub(",", "", $1); print $1; found = 1 }'
}

echo "group-callgrind: $ranks ranks, rank $rank under callgrind, $calls calls of each side"
echo "| collective | Open MPI (instructions per call) | ucx::group | ratio |"
echo "|---|---|---|---|"
for c in "${cases[@]}"; do
  rm -f "$tmp/cg.out"
  if ! timeout 900 mpirun --allow-run-as-root --oversubscribe -np "$ranks" -x UCX_NET_DEVICES \
      "$tmp/wrap.sh" "$bench" --rounds "$rounds" --iterations "$iterations" --only "$c" \
      > "$tmp/out" 2>&1; then
    echo "group-callgrind: $c failed:" >&2
    tail -20 "$tmp/out" >&2
    exit 1
  fi
  mpi=$(inclusive group_bench_mpi_calls)
  grp=$(inclusive group_bench_group_calls)
  if [[ -z "$mpi" || -z "$grp" ]]; then
    echo "group-callgrind: no count for $c (is $bench current?)" >&2
    exit 1
  fi
  awk -v c="$c" -v m="$mpi" -v g="$grp" -v n="$calls" \
    'BEGIN { printf "| %s | %.0f | %.0f | %.2f |\n", c, m / n, g / n, g / m }'
done
