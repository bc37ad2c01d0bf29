#!/usr/bin/env bash
# Installs every Debian package that ucx-asio needs to build, test and benchmark
# on a fresh Debian bookworm machine. Idempotent: a second run installs nothing.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git ccache
  libucx-dev ucx-utils
  libboost1.81-dev libboost-log1.81-dev libboost-system1.81-dev libboost-thread1.81-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  clang-format iproute2 procps nftables # nftables: the fault tests' black hole
  clang-16 libclang-rt-16-dev # tools/fuzz.sh (libFuzzer), tools/test.sh --sanitize
  lld # tools/test.sh links with it
  libssl-dev openssl # TLS over ucx::stream (tests), ucxcat tests (SHA-256)
  gnuplot-nox valgrind # tools/bench.sh (chart), tools/callgrind.sh
  openmpi-bin libopenmpi-dev # the launch tests under mpirun
  libpmix-dev # ucx::pmix_store: the store of a PMIx launcher (mpirun with no variable)
  mpich # the launch tests under mpiexec.hydra (Open MPI stays the default mpirun)
  slurm-wlm munge # the launch tests' single-node Slurm cluster (started by the test)
  python3 # the layer rule's check (test/layers)
  python3-torch # the store tests against torch.distributed's TCPStore
  libyaml-cpp-dev # Dask's YAML configuration files (ucx::dask_configuration)
  prometheus # the metrics tests: a real Prometheus server scrapes a sample, promtool checks the text
)

sudo=""
if [ "$(id -u)" -ne 0 ]; then sudo="sudo"; fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# Boost 1.74 -dev packages conflict with 1.81 ones; remove them first.
conflicting=$(dpkg-query -W -f='${Package} ${Status}\n' 'libboost*1.74-dev' 'libboost-*-dev' 2>/dev/null |
  awk '/install ok installed/ && ($1 ~ /1\.74-dev$/ || ($1 ~ /^libboost-[a-z-]+-dev$/)) {print $1}' || true)
if [ -n "$conflicting" ]; then
  echo "setup: removing conflicting Boost packages: $conflicting"
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get remove -y $conflicting
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages already installed"
else
  echo "setup: installing ${missing[*]}"
  $sudo apt-get update -q
  $sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
  echo "setup: installed ${#missing[@]} packages"
fi

# MPICH registers its mpirun and mpicc as alternatives too, at a lower
# priority than Open MPI's; a machine set to MPICH by hand keeps its choice.
if command -v update-alternatives > /dev/null; then
  for a in mpi mpirun; do
    if update-alternatives --query "$a" 2>/dev/null | grep -q '^Status: auto'; then
      best=$(update-alternatives --query "$a" | awk '/^Best:/ {print $2}')
      case "$best" in *openmpi*) ;; *) echo "setup: note: the $a alternative is $best, not Open MPI's" ;; esac
    fi
  done
fi

if [ -x /usr/local/cuda/bin/nvcc ]; then
  echo "setup: CUDA Toolkit found at /usr/local/cuda (CUDA support will be built)"
else
  echo "setup: no CUDA Toolkit at /usr/local/cuda (building without CUDA support)"
fi
