#!/usr/bin/env bash
# Sets up the machine, builds ucx-asio and runs the whole test suite with ctest.
#
#   tools/test.sh [--sanitize | --thread-sanitizer] [--line-tables | --no-debug-info] [--unity]
#                 [--unoptimized-tests] [--static-runtime] [--clang] [--build-dir DIR]
#
# --sanitize builds with AddressSanitizer and UndefinedBehaviorSanitizer, with clang
# (default directory build-asan instead of build); --thread-sanitizer with
# ThreadSanitizer (default directory build-tsan). --line-tables keeps line
# tables only as debug information (-g1): stack traces and sanitizer reports
# keep file and line, in about a third of the disk of full debug information.
# --no-debug-info builds without any (-g0; not with a sanitizer): the
# compiler takes about a fifth less time, and a test's failure still names
# its file and line (GoogleTest's own), a crash's stack trace the functions.
# --unity compiles the library's sources a batch at a time (UCX_ASIO_UNITY_BUILD,
# CMake's unity build): they take about half the compiler time.
# --unoptimized-tests builds the code only the tests run at -O0
# (UCX_ASIO_TEST_OPTIMIZATION_LEVEL; the library keeps its level): a test file
# compiles in four fifths of the time of -O1 (stream_test.cpp: 26 s against
# 32 s); the thread-sanitizer build always does.
# --clang compiles with clang++-16 instead of the default compiler (the
# sanitizer builds always do): the code only the tests run compiles in about
# two thirds of GCC's time at -O0 (the messaging tests' translation unit:
# 22 s against 35 s), the library in five sixths at -O2 (30 s against 36 s).
# --static-runtime links Boost, yaml-cpp and the C++ standard library into
# the programs (UCX_ASIO_STATIC_RUNTIME), so that tools/gpu-bundle.sh
# --use-build can make the GPU bundle of this build (.ci/run).
set -euo pipefail
cd "$(dirname "$0")/.."

build_dir=""
sanitize=""
line_tables=""
no_debug_info=""
unity=OFF
test_level=()
static_runtime=()
use_clang=""
while [ $# -gt 0 ]; do
  case "$1" in
    --sanitize) sanitize="address,undefined" ;;
    --thread-sanitizer) sanitize="thread" ;;
    --line-tables) line_tables=1 ;;
    --no-debug-info) no_debug_info=1 ;;
    --unity) unity=ON ;;
    --unoptimized-tests) test_level=(-DUCX_ASIO_TEST_OPTIMIZATION_LEVEL=-O0) ;;
    --static-runtime) static_runtime=(-DUCX_ASIO_STATIC_RUNTIME=ON) ;;
    --clang) use_clang=1 ;;
    --build-dir) build_dir="$2"; shift ;;
    *) echo "usage: $0 [--sanitize | --thread-sanitizer] [--line-tables | --no-debug-info] [--unity] [--unoptimized-tests] [--static-runtime] [--clang] [--build-dir DIR]" >&2; exit 2 ;;
  esac
  shift
done
if [ -z "$build_dir" ]; then
  case "$sanitize" in
    thread) build_dir=build-tsan ;;
    "") build_dir=build ;;
    *) build_dir=build-asan ;;
  esac
fi

tools/setup.sh

build_type=RelWithDebInfo
extra_flags=""
compiler=()
case "$sanitize" in
  "") [ -z "$use_clang" ] || compiler=(-DCMAKE_CXX_COMPILER=clang++-16) ;;
  # The library optimized: ThreadSanitizer slows every memory access down.
  # The code only the tests run unoptimized, and with clang: it compiles in
  # two fifths of the time of GCC at -O1 (test/integration/stream/stream_test.cpp:
  # 19 s against 47 s), and does little but wait for the library.
  thread) compiler=(-DCMAKE_CXX_COMPILER=clang++-16 -DUCX_ASIO_TEST_OPTIMIZATION_LEVEL=-O0) ;;
  # Unoptimized, and with clang: at -O0 under AddressSanitizer it compiles
  # the tests in half GCC's time (measured on test/integration/stream/beast_test.cpp:
  # 36 s against 75 s), and the suite meets a second compiler's warnings.
  *) build_type=Debug; compiler=(-DCMAKE_CXX_COMPILER=clang++-16) ;;
esac
debug_flags=()
if [ -n "$line_tables" ] && [ -n "$no_debug_info" ]; then
  echo "$0: --line-tables and --no-debug-info exclude each other" >&2; exit 2
fi
if [ -n "$line_tables" ]; then
  debug_flags=(-DCMAKE_CXX_FLAGS_DEBUG=-g1 "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -g1 -DNDEBUG")
fi
if [ -n "$no_debug_info" ]; then
  if [ -n "$sanitize" ]; then
    echo "$0: --no-debug-info is for the build without sanitizers: their reports need line tables" >&2
    exit 2
  fi
  debug_flags=("-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -DNDEBUG")
fi
# The NCCL communicators (ucx::asio_nccl, built where nccl.h is found) and
# their tests against a stand-in NCCL are built without sanitizers only: a
# minute of each sanitizer build for one source file that only calls NCCL.
nccl_flags=()
if [ -n "$sanitize" ]; then
  nccl_flags=(-DUCX_ASIO_WITH_NCCL=OFF)
fi
# LLVM's linker where it is installed (tools/setup.sh installs it): it links
# a test executable in about half the processor time of the default one, on
# several threads.
linker_flags=()
if command -v ld.lld > /dev/null; then
  linker_flags=(-DCMAKE_EXE_LINKER_FLAGS=-fuse-ld=lld -DCMAKE_SHARED_LINKER_FLAGS=-fuse-ld=lld)
fi
cmake -S . -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE="$build_type" -DUCX_ASIO_SANITIZE="$sanitize" "${compiler[@]}" \
  -DUCX_ASIO_UNITY_BUILD="$unity" -DCMAKE_CXX_FLAGS="$extra_flags" "${debug_flags[@]}" \
  "${linker_flags[@]}" "${nccl_flags[@]}" "${test_level[@]}" "${static_runtime[@]}"
cmake --build "$build_dir"

# UCX's TCP transport stays on loopback; every test process gets it from ctest too.
export UCX_NET_DEVICES=lo
if [ -n "$sanitize" ]; then
  # UCX's own memory hooks and LeakSanitizer's view of UCX's global pools get in
  # the sanitizers' way; the library's code is what is checked here.
  export UCX_MEM_MALLOC_HOOKS=no UCX_MEM_MMAP_HOOK_MODE=none
  export ASAN_OPTIONS="detect_leaks=0:abort_on_error=1"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
  export TSAN_OPTIONS="halt_on_error=1"
fi
# One test more than there are cores: the suite's processes spend about a
# sixth of their time waiting (peer timeouts, launchers, children), so the
# cores would otherwise idle (measured under ASan on 2 cores: 458 s of CPU in
# 280 s with -j2; 259 s with -j3).
# Under ThreadSanitizer, a suite run over both shared memory and TCP runs
# over TCP only (its ctest tests whose names end in /shm, /shm_poll and the
# like): the library runs the same code over both (UCP chooses the
# transport below it), and the races ThreadSanitizer looks for are between
# the threads of a process, not in the data's path through UCX; the build
# without sanitizers and the one under AddressSanitizer run both. About a
# quarter of the stage's test time (246 s of 916 s).
ctest_filter=()
if [ "$sanitize" = thread ]; then
  ctest_filter=(-E '/shm(_event|_hybrid|_poll|_handshake|_sockaddr)?$')
fi
ctest --test-dir "$build_dir" --output-on-failure -j"$(($(nproc) + 1))" --timeout 600 "${ctest_filter[@]}"
