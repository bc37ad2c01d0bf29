#!/usr/bin/env bash
# ucx::group's collectives against Open MPI's, with Open MPI's default
# transports and with its UCX PML (docs/guide/groups.md#performance).
#
#   tools/group-bench.sh [--ranks N] [--build-dir DIR] [--bind] [group-bench options...]
#
# --bind pins the ranks to cores (mpirun --bind-to core:overload-allowed,
# ranks dealt round-robin over the cores): the same placement for both sides
# and from run to run. Without it the kernel places and moves them.
#
# Every process keeps UCX on loopback (UCX_NET_DEVICES=lo).
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
build="$here/build"
ranks=4
args=()
bind=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --ranks) ranks="$2"; shift 2 ;;
    --build-dir) build="$2"; shift 2 ;;
    --bind) bind=(--bind-to core:overload-allowed); shift ;;
    *) args+=("$1"); shift ;;
  esac
done
bench="$build/tools/group-bench"
if [[ ! -x "$bench" ]]; then
  echo "group-bench: $bench is not built (needs libopenmpi-dev)" >&2
  exit 2
fi
export UCX_NET_DEVICES=lo OMPI_MCA_plm_rsh_agent=
mpirun=(mpirun --allow-run-as-root --oversubscribe ${bind[@]+"${bind[@]}"} -np "$ranks" -x UCX_NET_DEVICES)
echo "## Open MPI with its default transports"
"${mpirun[@]}" "$bench" "${args[@]}"
echo
echo "## Open MPI over UCX (pml ucx)"
"${mpirun[@]}" --mca pml ucx --mca pml_ucx_tls any --mca pml_ucx_devices any "$bench" "${args[@]}"
