#!/usr/bin/env bash
# Makes the GPU bundle: the programs that need a GPU to be tested, the
# libraries they load that a bare Linux with a GPU driver lacks, and run.sh,
# which runs them all with a time limit per step and writes one results file
# (docs/guide/gpu.md, "the GPU bundle").
#
#   tools/gpu-bundle.sh [--build-dir DIR | --use-build DIR] OUT_DIR
#
# Builds (Release, CUDA on, NCCL where nccl.h is found, no PMIx) in DIR
# (default build-gpu-bundle) with Boost, yaml-cpp and the C++ standard
# library linked into each program (UCX_ASIO_STATIC_RUNTIME). --use-build
# takes the programs of a build configured already with UCX_ASIO_WITH_CUDA
# and UCX_ASIO_STATIC_RUNTIME on (.ci/run: its test build), building there
# only what is missing. Then fills OUT_DIR (emptied first):
#
#   run.sh             runs every step (OUT_DIR/run.sh --help)
#   MANIFEST           versions, the glibc the programs need, the size
#   bin/               unit_core, unit_internals, integration_gpu,
#                      nccl_communicator (the tests with device buffers),
#                      ucx-asio-perf, ucx-asio-info,
#                      ucx-asio-gpu-group, gpu-group.sh, gpu-bench.sh
#   lib/               what they load besides the C library and libgcc_s
#                      (which every Linux has): UCX (and the
#                      transports of lib/ucx/ whose own libraries are here
#                      too), libnuma, the CUDA runtime, and PMIx with what
#                      it loads where the build has the PMIx store
#
# Fails when the result is over 64 MiB, or when a program needs a library
# that is neither bundled nor part of the C library. Prints the size.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

usage() { echo "usage: $0 [--build-dir DIR | --use-build DIR] OUT_DIR" >&2; exit 2; }
build_dir=build-gpu-bundle
use_build=no
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) [ $# -ge 2 ] || usage; build_dir=$2; shift ;;
    --use-build) [ $# -ge 2 ] || usage; build_dir=$2; use_build=yes; shift ;;
    -*) usage ;;
    *) [ -z "$out" ] || usage; out=$1 ;;
  esac
  shift
done
[ -n "$out" ] || usage
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac
limit=$((64 * 1024 * 1024))

linker=()
if command -v ld.lld > /dev/null; then
  linker=(-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld -DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld)
fi
if [ $use_build = yes ]; then
  for option in UCX_ASIO_WITH_CUDA UCX_ASIO_STATIC_RUNTIME; do
    if ! grep -q "^$option:BOOL=ON$" "$build_dir/CMakeCache.txt" 2> /dev/null; then
      echo "gpu-bundle: $build_dir is not a build configured with $option=ON" >&2
      exit 1
    fi
  done
else
  mkdir -p "$build_dir"
  cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    "-DCMAKE_CXX_FLAGS_RELEASE=-O2 -DNDEBUG" -DUCX_ASIO_WITH_CUDA=ON \
    -DUCX_ASIO_WITH_PMIX=OFF -DUCX_ASIO_STATIC_RUNTIME=ON -DUCX_ASIO_UNITY_BUILD=ON \
    -DUCX_ASIO_BUILD_SAMPLES=OFF "${linker[@]}" > "$build_dir/configure.log" ||
    { cat "$build_dir/configure.log" >&2; exit 1; }
fi
nccl=$(sed -n 's/^UCX_ASIO_WITH_NCCL:BOOL=//p' "$build_dir/CMakeCache.txt")
tests=(unit/unit_core unit/unit_internals integration/integration_gpu)
[ "$nccl" = ON ] && tests+=(nccl/nccl_communicator)
tools=(ucx-asio-perf ucx-asio-info ucx-asio-gpu-group)
targets=("${tools[@]}")
for t in "${tests[@]}"; do targets+=("$(basename "$t")"); done
cmake --build "$build_dir" --target "${targets[@]}"

rm -rf "$out"
mkdir -p "$out/bin" "$out/lib"
out=$(cd "$out" && pwd)
for t in "${tests[@]}"; do cp "$build_dir/test/$t" "$out/bin/"; done
for t in "${tools[@]}"; do cp "$build_dir/tools/$t" "$out/bin/"; done
strip --strip-unneeded "$out"/bin/*
cp "$root/tools/gpu-group.sh" "$root/tools/gpu-bench.sh" "$out/bin/"
cp "$root/tools/gpu-bundle/run.sh" "$out/run.sh"
chmod +x "$out/run.sh" "$out"/bin/*

# The C library's own files and libgcc_s are the host's; everything else a
# program loads comes from lib/.
is_c_library() {
  case "${1##*/}" in
    linux-vdso.so.* | ld-linux*.so.* | libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | \
      librt.so.* | libutil.so.* | libresolv.so.* | libgcc_s.so.*) return 0 ;;
  esac
  return 1
}
# copy_needs FILE...: copies what the files load into lib/, until nothing
# new is needed.
copy_needs() {
  local pending=("$@") file name path
  while [ ${#pending[@]} -gt 0 ]; do
    file=${pending[0]}
    pending=("${pending[@]:1}")
    while read -r name path; do
      is_c_library "$name" && continue
      [ -e "$out/lib/$name" ] && continue
      case "$name" in
        libstdc++.so.*)
          echo "gpu-bundle: $file loads $name: the C++ standard library should be linked in" >&2
          exit 1 ;;
      esac
      if [ -z "$path" ] || [ "$path" = "not" ]; then
        echo "gpu-bundle: $file needs $name, which is not found here" >&2
        exit 1
      fi
      cp -L "$path" "$out/lib/$name"
      pending+=("$out/lib/$name")
    done < <(ldd "$file" | awk '/=>/ { print $1, $3; next } { print $1, "" }')
  done
}
programs=()
for f in "$out"/bin/*; do
  case $f in *.sh) ;; *) programs+=("$f") ;; esac
done
copy_needs "${programs[@]}"

# UCX's transports are modules it loads from the directory "ucx" beside
# libucs: the ones whose libraries are all here or in the C library.
ucs=$(ldd "$out/bin/ucx-asio-info" | awk '$1 ~ /^libucs\.so/ { print $3 }')
mkdir -p "$out/lib/ucx"
for module in "$(dirname "$(readlink -f "$ucs")")"/ucx/*.so.0; do
  [ -e "$module" ] || continue
  usable=yes
  while read -r name path; do
    if ! is_c_library "$name" && [ ! -e "$out/lib/$name" ]; then usable=no; fi
  done < <(ldd "$module" | awk '/=>/ { print $1, $3; next } { print $1, "" }')
  if [ $usable = yes ]; then
    cp -L "$module" "$out/lib/ucx/"
  else
    echo "gpu-bundle: left out UCX module $(basename "$module") (its libraries are not bundled)"
  fi
done

# The newest glibc symbol version any bundled file needs: run.sh compares
# the host's with it before anything runs.
glibc=$(find "$out/bin" "$out/lib" -type f ! -name '*.sh' -exec objdump -T {} + 2>/dev/null |
  grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -1)
ucx_version=$(pkg-config --modversion ucx)
cuda_version=$(ls "$out"/lib/libcudart.so.* | sed 's/.*\.so\.//')
library_version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build_dir/CMakeCache.txt")
revision=$(git -C "$root" describe --always --dirty 2> /dev/null || echo unknown)
size=$(du -sb "$out" | cut -f1)
cat > "$out/MANIFEST" << EOF
ucx-asio $library_version ($revision), built $(date -u +%Y-%m-%dT%H:%MZ) on $(uname -srm)
UCX $ucx_version (CUDA transports: $(ls "$out/lib/ucx" | grep -q cuda && echo yes || echo no))
CUDA runtime $cuda_version
NCCL communicators: $nccl (NCCL itself is the host's)
glibc needed: $glibc
size: $size bytes
EOF
if [ "$size" -gt "$limit" ]; then
  echo "gpu-bundle: $out is $size bytes, over the limit of $limit" >&2
  exit 1
fi
printf 'gpu-bundle: %s, %d bytes (%.1f MiB of the 64 MiB allowed), needs glibc %s\n' "$out" \
  "$size" "$(awk -v s="$size" 'BEGIN { print s / 1048576 }')" "$glibc"
