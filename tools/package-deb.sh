#!/usr/bin/env bash
# Builds the Debian package libucx-asio-dev: the headers, the static library,
# the CMake package and the pkg-config files, installed under /usr, with the
# Debian packages they need declared (CMakeLists.txt, "a Debian package").
#
#   tools/package-deb.sh [--build-dir DIR] [OUT_DIR]
#
# Builds the library alone (Release, no CUDA: the CUDA runtime is in no
# Debian package) in DIR (default build-deb), then writes
# OUT_DIR/libucx-asio-dev_VERSION_ARCH.deb (default: the current directory)
# and prints its path. Install it with `apt install ./libucx-asio-dev_*.deb`.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

build_dir=build-deb
while [ $# -gt 0 ]; do
  case "$1" in
    --build-dir) build_dir="$2"; shift ;;
    -*) echo "usage: $0 [--build-dir DIR] [OUT_DIR]" >&2; exit 2 ;;
    *) break ;;
  esac
  shift
done
out_dir=$(mkdir -p "${1:-.}" && cd "${1:-.}" && pwd)
case "$build_dir" in /*) ;; *) build_dir="$root/$build_dir" ;; esac

launcher=()
if command -v ccache > /dev/null && [ -z "${CCACHE_DISABLE:-}" ]; then
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
fi
cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_INSTALL_PREFIX=/usr \
  -DUCX_ASIO_WITH_CUDA=OFF -DUCX_ASIO_WITH_NCCL=OFF -DUCX_ASIO_UNITY_BUILD=ON \
  -DUCX_ASIO_BUILD_TESTS=OFF -DUCX_ASIO_BUILD_SAMPLES=OFF -DUCX_ASIO_BUILD_TOOLS=OFF \
  "${launcher[@]}" > "$build_dir.configure.log"
cmake --build "$build_dir"
(cd "$build_dir" && cpack -G DEB -B "$out_dir" > cpack.log)
ls "$out_dir"/libucx-asio-dev_*.deb
