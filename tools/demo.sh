#!/usr/bin/env bash
# Sets up the machine, builds ucx-asio and runs the demo: a UCX tag ping-pong
# between two workers, with the round-trip latency of each progress mode. It
# also builds the echo samples (build/samples/echo_server, echo_client).
#
#   tools/demo.sh [demo options, e.g. --iters 20000 --size 8]
set -euo pipefail
cd "$(dirname "$0")/.."
tools/setup.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
cmake --build build --target ucx-asio-demo echo_server echo_client
UCX_NET_DEVICES=lo build/tools/ucx-asio-demo "$@"
