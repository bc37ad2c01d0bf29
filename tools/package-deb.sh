#!/usr/bin/env bash
# Builds the Debian package libucx-asio-dev: the headers, the static library,
# the CMake package and the pkg-config files, installed under /usr, with the
# Debian packages they need declared (CMakeLists.txt, "a Debian package").
#
#   tools/package-deb.sh [--build-dir DIR] [OUT_DIR] [-- CMAKE_ARGUMENT...]
#
# Builds the library alone (Release, no CUDA: the CUDA runtime is in no
# Debian package) in DIR (default build-deb), then writes
# OUT_DIR/libucx-asio-dev_VERSION_ARCH.deb (default: the current directory)
# and prints its path. Install it with `apt install ./libucx-asio-dev_*.deb`.
# CMAKE_ARGUMENTs are added to the configuration (.ci/run: link-time
# optimisation, each source on its own); only what the package holds is
# built (the install step depends on nothing else).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

build_dir=build-deb
out_dir=.
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir="$2"; shift ;;
    --) shift; extra=("$@"); break ;;
    -*) echo "usage: $0 [--build-dir DIR] [OUT_DIR] [-- CMAKE_ARGUMENT...]" >&2; exit 2 ;;
    *) out_dir=$1 ;;
  esac
  shift
done
out_dir=$(mkdir -p "$out_dir" && cd "$out_dir" && pwd)
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac
mkdir -p "$build_dir"

launcher=()
if command -v ccache > /dev/null && [ -z "${CCACHE_DISABLE:-}" ]; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
  -DUCX_ASIO_WITH_CUDA=OFF -DUCX_ASIO_WITH_NCCL=OFF -DUCX_ASIO_UNITY_BUILD=ON \
  -DUCX_ASIO_BUILD_TESTS=OFF -DUCX_ASIO_BUILD_SAMPLES=OFF -DUCX_ASIO_BUILD_TOOLS=OFF \
  -DCMAKE_SKIP_INSTALL_ALL_DEPENDENCY=ON "${launcher[@]}" "${extra[@]}" > "$build_dir/configure.log"
cmake --build "$build_dir" --target ucx_asio
(cd "$build_dir" && cpack -G DEB -B "$out_dir" > cpack.log)
ls "$out_dir"/libucx-asio-dev_*.deb
