#!/usr/bin/env bash
# Runs a GPU bundle (tools/gpu-bundle.sh) as a bare GPU host would, on a
# machine without a GPU, and checks its results:
#
#   tools/gpu-bundle-test.sh BUNDLE_DIR [WORK_DIR]
#
# A copy of the bundle goes into an empty root that holds only the C library,
# libgcc_s and the shell tools run.sh uses (bash, coreutils, awk, sed, grep):
# none of the build machine's UCX, Boost, yaml-cpp, CUDA or C++ standard
# library. run.sh runs
# there under `env -i`, in a mount namespace of its own (chroot, with /proc,
# /sys and /dev of the machine and a fresh /tmp); needs root and unshare(1).
# Then every step that needs no GPU must have passed, every step that needs
# one must be skipped with a reason, and no test may have failed. Prints the
# bundle's size, the run's time and the results. Exit status: 0 when all
# holds, 1 otherwise, 77 (skipped) without root or unshare.
set -euo pipefail
if [ $# -lt 1 ] || [ $# -gt 2 ]; then
  echo "usage: $0 BUNDLE_DIR [WORK_DIR]" >&2
  exit 2
fi
bundle=$(cd "$1" && pwd)
work=${2:-$(mktemp -d)}
if [ "$(id -u)" != 0 ] || ! command -v unshare > /dev/null || ! command -v chroot > /dev/null; then
  echo "gpu-bundle-test: skipped: needs root, unshare(1) and chroot(8) for the bare root"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd)
root=$work/root

# ---- the bare root: the C library and the shell tools, nothing else ----
mkdir -p "$root"/usr/bin "$root"/usr/lib "$root"/usr/lib64 "$root"/proc "$root"/sys \
  "$root"/dev "$root"/tmp "$root"/out "$root"/etc
ln -s usr/bin "$root/bin"
ln -s usr/lib "$root/lib"
ln -s usr/lib64 "$root/lib64"
ln -s bin "$root/usr/sbin"
ln -s usr/bin "$root/sbin"
tools=(bash sh env timeout awk sed grep find mktemp date du sort uname getconf paste wc cut head
  tail cat rm mkdir ls nproc tr sleep basename dirname readlink id chmod cp mv)
# copy_file PATH: the file at the same path in the root (through the merged
# /usr: /lib/x -> /usr/lib/x).
copy_file() {
  local path=$1 target
  case "$path" in
    /lib/* | /lib64/* | /bin/* | /sbin/*) target=$root/usr$path ;;
    *) target=$root$path ;;
  esac
  [ -e "$target" ] && return 0
  mkdir -p "$(dirname "$target")"
  cp -L "$path" "$target"
}
for tool in "${tools[@]}"; do
  path=$(command -v "$tool")
  cp -L "$path" "$root/usr/bin/$tool"
  while read -r lib; do copy_file "$lib"; done < <(ldd "$path" | awk '/=>/ && $3 ~ /^\// { print $3 } $1 ~ /^\/.*ld-linux/ { print $1 }')
done
# The whole C library and libgcc_s, which every Linux has.
for lib in libc.so.6 libm.so.6 libdl.so.2 libpthread.so.0 librt.so.1 libutil.so.1 libresolv.so.2 \
  libgcc_s.so.1; do
  copy_file "$(ldconfig -p | awk -v n=$lib '$1 == n && /x86-64/ { print $NF; exit }')"
done
# The root must not hold what the bundle brings.
if found=$(find "$root" \( -name 'libuc[pstm].so*' -o -name 'libboost*' -o -name 'libcudart*' \
  -o -name 'libyaml-cpp*' -o -name 'libstdc++*' -o -name 'libnuma*' \) | grep .); then
  echo "gpu-bundle-test: the bare root holds libraries the bundle should bring: $found" >&2
  exit 1
fi
cp -a "$bundle" "$root/bundle"
rm -rf "$root/bundle/logs" "$root/bundle/results.md"

# ---- the run ----
start=$(date +%s)
set +e
unshare -m --propagation private bash -c '
  set -e
  root=$1
  mount -t proc proc "$root/proc"
  mount --rbind /sys "$root/sys"
  mount --rbind /dev "$root/dev"
  mount -t tmpfs tmpfs "$root/tmp"
  exec chroot "$root" /usr/bin/env -i /usr/bin/bash /bundle/run.sh --results /out/results.md
' bash "$root" > "$work/run.log" 2>&1
status=$?
set -e
seconds=$(($(date +%s) - start))
results=$root/out/results.md
size=$(du -sb "$bundle" | cut -f1)
printf 'gpu-bundle-test: bundle %d bytes (%.1f MiB), run.sh took %d s in the bare root, exit status %d\n' \
  "$size" "$(awk -v s="$size" 'BEGIN { print s / 1048576 }')" "$seconds" "$status"
if [ ! -s "$results" ]; then
  echo "gpu-bundle-test: no results file; run.sh's output:" >&2
  cat "$work/run.log" >&2
  exit 1
fi
cat "$results"

# ---- the checks ----
problems=()
[ "$status" = 0 ] || problems+=("run.sh exited with $status")
rows=$(grep -E '^\| [a-z_0-9]+ \| (yes|no) \|' "$results" || true)
[ -n "$rows" ] || problems+=("the results have no step")
while IFS='|' read -r _ name gpu result _ detail _; do
  name=$(echo $name)
  gpu=$(echo $gpu)
  result=$(echo $result)
  detail=$(echo $detail)
  if [ "$gpu" = no ] && [ "$result" != passed ]; then
    problems+=("$name needs no GPU and $result")
  fi
  if [ "$gpu" = yes ] && [ "$result" = failed ]; then
    problems+=("$name failed")
  fi
  if [ "$result" = skipped ] && [ -z "$detail" ]; then
    problems+=("$name was skipped without a reason")
  fi
done <<< "$rows"
for step in info unit_core unit_internals integration_gpu group_host_memory_4_ranks \
  group_device_memory_2_ranks group_device_memory_4_ranks_nccl perf_host_memory gpu_bench; do
  grep -q "^| $step |" <<< "$rows" || problems+=("no step $step")
done
for step in group_device_memory_2_ranks group_device_memory_4_ranks_nccl gpu_bench; do
  grep -q "^| $step | yes | skipped |" <<< "$rows" || problems+=("$step was not skipped")
done
if grep -q '^## Failed tests' "$results"; then problems+=("tests failed"); fi
# Without a GPU, the tests with device memory report it as their reason.
grep -q 'no CUDA device' "$results" || problems+=("no skipped test names the missing device")
if [ ${#problems[@]} -gt 0 ]; then
  printf 'gpu-bundle-test: %s\n' "${problems[@]}" >&2
  echo "gpu-bundle-test: run.sh's output:" >&2
  tail -60 "$work/run.log" >&2
  exit 1
fi
echo "gpu-bundle-test: passed"
