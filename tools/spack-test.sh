#!/usr/bin/env bash
# Installs ucx-asio with a real Spack, from this source tree, with the
# machine's UCX, Boost, yaml-cpp, PMIx, CMake and pkg-config as Spack
# externals; then builds and runs a consumer against the installed package,
# with find_package and with pkg-config. Nothing is downloaded.
#
#   tools/spack-test.sh SPACK_ROOT [WORK_DIR]
#
# SPACK_ROOT: a Spack checkout brought in for the test (not part of this
# repository). Spack's solver needs clingo, which Spack downloads; without a
# network it needs a Spack that still has its original concretizer (before
# v0.21, e.g. the develop branch of June 2023), which this script selects.
# WORK_DIR (default /tmp/ucx-asio-spack) holds Spack's configuration, its
# install tree and caches, and a copy of the sources; it is removed first.
# Debian bookworm's package versions are assumed (tools/setup.sh installs
# them). Prints each step's time and the total.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
spack_root=$(cd "${1:?usage: $0 SPACK_ROOT [WORK_DIR]}" && pwd)
work=${2:-/tmp/ucx-asio-spack}
start=$(date +%s)
step() { echo "=== spack-test: $* ($(($(date +%s) - start)) s)"; }

rm -rf "$work"
mkdir -p "$work/user"
work=$(cd "$work" && pwd)
# Spack's user scope in the work directory: nothing of the machine's own
# Spack configuration (~/.spack) is read or written.
export SPACK_USER_CONFIG_PATH="$work/user" SPACK_USER_CACHE_PATH="$work/cache"
spack() { "$spack_root/bin/spack" "$@"; }

step "configuration"
version() { dpkg-query -W -f='${Version}' "$1" | sed 's/^[0-9]*://; s/[-+~].*//'; }
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
cat > "$work/user/config.yaml" << EOF
config:
  concretizer: original
  install_tree:
    root: $work/opt
  build_stage: [$work/stage]
  source_cache: $work/sources
  misc_cache: $work/cache/misc
  build_jobs: $(nproc)
EOF
# The machine's packages, never built by Spack. Debian's UCX is built with
# cross-memory attach, threads and the verbs transports, without CUDA.
cat > "$work/user/packages.yaml" << EOF
packages:
  all:
    target: [x86_64]
  ucx:
    buildable: false
    externals:
    - spec: ucx@$(version libucx-dev) +cma +thread_multiple +verbs +rc +ud +dc +rdmacm +mlx5_dv ~cuda
      prefix: /usr
  boost:
    buildable: false
    externals:
    - spec: boost@$(version libboost1.81-dev) +log +system +thread +atomic +chrono +date_time +filesystem +regex
      prefix: /usr
  yaml-cpp:
    buildable: false
    externals:
    - spec: yaml-cpp@$(version libyaml-cpp-dev)
      prefix: /usr
  pmix:
    buildable: false
    externals:
    - spec: pmix@$(version libpmix-dev)
      prefix: /usr/lib/$multiarch/pmix2
  cmake:
    buildable: false
    externals:
    - spec: cmake@$(version cmake)
      prefix: /usr
  pkgconf:
    buildable: false
    externals:
    - spec: pkgconf@$(version pkgconf)
      prefix: /usr
  pkgconfig:
    buildable: false
  gmake:
    buildable: false
    externals:
    - spec: gmake@$(version make)
      prefix: /usr
  ninja:
    buildable: false
    externals:
    - spec: ninja@$(version ninja-build)
      prefix: /usr
EOF
spack compiler find --scope user > /dev/null
spack compilers
spack repo add --scope user "$src/tools/spack"

step "concretizing ucx-asio@main ~cuda +pmix +tools"
spec="ucx-asio@main ~cuda +pmix +tools"
spack spec -I $spec

step "installing from this source tree"
# A copy of the tracked files: the build directory Spack makes stays out of
# the tree.
mkdir -p "$work/src"
git -C "$src" ls-files -z | (cd "$src" && xargs -0 tar -c) | tar -x -C "$work/src"
(cd "$work/src" && spack dev-build --skip-patch -d "$work/src" $spec)
prefix=$(spack location -i ucx-asio)
echo "installed in $prefix"
ls "$prefix/bin" "$prefix/lib" 2> /dev/null || true

step "a consumer with find_package"
cmake -S "$src/test/install/consumer" -B "$work/consumer-cmake" -DCMAKE_PREFIX_PATH="$prefix" \
  > "$work/consumer-cmake.log"
cmake --build "$work/consumer-cmake" > /dev/null
UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo} "$work/consumer-cmake/consumer"

step "a consumer with pkg-config"
libdir=$(dirname "$(find "$prefix" -name ucx-asio.pc | head -1)")
flags=$(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs ucx-asio)
# shellcheck disable=SC2086
c++ -std=c++20 "$src/test/install/consumer/main.cpp" $flags -o "$work/consumer-pc"
UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo} "$work/consumer-pc"

step "the installed tool"
UCX_NET_DEVICES=${UCX_NET_DEVICES:-lo} "$prefix/bin/ucx-asio-info" --no-connection > "$work/info.log" || true
head -3 "$work/info.log"
grep -q "ucx-asio: " "$work/info.log"

step "passed"
