#!/usr/bin/env bash
# The Debian package, as a user installs it: tools/package-deb.sh builds
# libucx-asio-dev; `apt-get install ./libucx-asio-dev_*.deb` installs it into a
# copy of this machine (an overlay over / in a mount namespace of its own,
# thrown away at the end, so the machine itself is left as it was); there a
# consumer builds against the installed package with find_package and with
# pkg-config, and runs. Every Debian package whose files the consumer's build
# and run use (headers, shared libraries) must be the package itself, one of
# its declared dependencies (recursively), or one a plain C++ program uses
# too: so the declared dependencies are the ones a program needs.
#
#   deb_package_test.sh SOURCE_DIR WORK_DIR
#
# With LIBUCX_ASIO_DEB set, tests that package instead of building one.
#
# Exits 77 (skipped, with the reason) where the machine cannot: not root (a
# mount namespace and chroot), or no dpkg, apt-get, unshare or cpack.
set -euo pipefail
src=$(cd "$1" && pwd)
work=$2

skip() {
  echo "SKIPPED: $*"
  exit 77
}
[ "$(id -u)" -eq 0 ] || skip "needs root, for a mount namespace and chroot"
for tool in dpkg dpkg-deb apt-get apt-cache unshare chroot cpack; do
  command -v "$tool" > /dev/null || skip "$tool is not installed (not a Debian machine?)"
done

rm -rf "$work"
mkdir -p "$work"
work=$(cd "$work" && pwd)

if [ -n "${LIBUCX_ASIO_DEB:-}" ]; then
  # A package built before from this tree (.ci/run builds it in its stage
  # without CUDA, with tools/package-deb.sh).
  deb=$LIBUCX_ASIO_DEB
  echo "== the package built before: $deb"
  [ -f "$deb" ] || { echo "FAIL: LIBUCX_ASIO_DEB=$deb is not a file"; exit 1; }
else
  echo "== building the package"
  deb=$("$src/tools/package-deb.sh" --build-dir "$work/build" "$work/out" | tail -1)
  echo "$deb"
fi
version=$(dpkg-deb -f "$deb" Version)
expected=$(sed -n 's/^#define UCX_ASIO_VERSION_\(MAJOR\|MINOR\|PATCH\) \([0-9]*\)$/\2/p' \
  "$src/include/ucx/version.hpp" | paste -sd.)
[ "$version" = "$expected" ] || { echo "FAIL: package version $version, headers say $expected"; exit 1; }
dpkg-deb -f "$deb" Package Version Architecture Depends
contents=$(dpkg-deb -c "$deb" | awk '{print $NF}')
for f in ./usr/include/ucx/asio.hpp ./usr/include/ucx/version.hpp '/libucx_asio.a' \
  '/cmake/ucx_asio/ucx_asio-config.cmake' '/pkgconfig/ucx-asio.pc'; do
  grep -q -- "$f\$" <<< "$contents" || { echo "FAIL: no $f in the package"; exit 1; }
done

# What runs inside the copy of the machine.
cp -r "$src/test/install/consumer" "$work/consumer"
cat > "$work/inside.sh" << 'INSIDE'
set -euo pipefail
deb=$1
consumer=$2
cd /root
echo "== apt-get install ./$(basename "$deb")"
apt-get install -y -q --no-install-recommends "$deb"
dpkg -s libucx-asio-dev | grep -E '^(Status|Version)'

echo "== a consumer with find_package"
cmake -S "$consumer" -B /root/consumer-cmake -G Ninja > /root/cmake.log
cmake --build /root/consumer-cmake
/root/consumer-cmake/consumer

echo "== a consumer with pkg-config"
flags=$(pkg-config --cflags --libs ucx-asio)
echo "pkg-config --cflags --libs ucx-asio: $flags"
# shellcheck disable=SC2086
c++ -std=c++20 "$consumer/main.cpp" $flags -o /root/consumer-pc
/root/consumer-pc

echo "== the packages the consumer uses are declared"
# A plain C++ program's packages (the compiler's, the C and C++ libraries').
printf '#include <cstdio>\n#include <string>\n#include <thread>\nint main() { std::thread([] { std::puts(std::string("x").c_str()); }).join(); }\n' > /root/plain.cpp
c++ -std=c++20 /root/plain.cpp -o /root/plain -pthread
# owners FILE...: the packages that own the files (each file must have one).
# A file may be known to dpkg by another of its names: as given, resolved, or
# (merged /usr) without /usr.
owners() {
  local f r candidates=() owned line
  declare -A name_of
  for f in "$@"; do
    r=$(readlink -f "$f")
    for c in "$f" "$r" "${r#/usr}"; do
      candidates+=("$c")
    done
  done
  owned=$(dpkg -S "${candidates[@]}" 2> /dev/null || true)
  declare -A is_owned
  while IFS= read -r line; do
    is_owned["${line#*: }"]=1
  done <<< "$owned"
  for f in "$@"; do
    r=$(readlink -f "$f")
    if [ -z "${is_owned[$f]:-}" ] && [ -z "${is_owned[$r]:-}" ] && [ -z "${is_owned[${r#/usr}]:-}" ]; then
      echo "FAIL: no Debian package owns $f" >&2
      return 1
    fi
  done
  sed 's/: .*//; s/, /\n/g' <<< "$owned" | sed 's/:[a-z0-9]*$//' | sort -u
}
headers() { # the headers a compilation reads
  c++ -std=c++20 -M "$@" | tr ' \\' '\n\n' | grep '^/' | grep -v -e '^/root/' -e "^$consumer/" | sort -u
}
libraries() { # the shared libraries a program loads
  ldd "$1" | awk '$3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' | sort -u
}
baseline=$( (owners $(headers /root/plain.cpp) $(libraries /root/plain)) | sort -u)
# shellcheck disable=SC2046
used=$( (owners $(headers "$consumer/main.cpp" $(pkg-config --cflags ucx-asio)) \
  $(libraries /root/consumer-pc) $(libraries /root/consumer-cmake/consumer)) | sort -u)
declared=$(apt-cache depends --recurse --installed --no-recommends --no-suggests --no-conflicts \
  --no-breaks --no-replaces --no-enhances libucx-asio-dev | grep -v '^ ' | tr -d '<>' | sort -u)
missing=$(comm -23 <(echo "$used") <(printf '%s\n' "$baseline" "$declared" | sort -u))
echo "used: $(echo $used)"
if [ -n "$missing" ]; then
  echo "FAIL: the consumer uses packages libucx-asio-dev does not depend on: $(echo $missing)"
  exit 1
fi
echo "every package the consumer uses is declared (or a plain C++ program's)"
INSIDE

echo "== installing into a copy of this machine"
unshare -m --propagation private bash -c '
set -euo pipefail
work=$1 deb=$2
root=$work/root
mkdir -p "$root"
mount -t tmpfs tmpfs "$root"
mkdir -p "$root/upper" "$root/work" "$root/merged"
mount -t overlay overlay -o "lowerdir=/,upperdir=$root/upper,workdir=$root/work" "$root/merged"
for d in proc sys dev; do mount --rbind "/$d" "$root/merged/$d"; done
# The work directory as it is here, wherever it lives (an overlay of / shows
# no file system mounted below it, such as a /tmp of its own).
mkdir -p "$root/merged$work"
mount --bind "$work" "$root/merged$work"
chroot "$root/merged" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
  UCX_NET_DEVICES="${UCX_NET_DEVICES:-lo}" DEBIAN_FRONTEND=noninteractive \
  bash "$work/inside.sh" "$deb" "$work/consumer"
' unshare "$work" "$deb"
if dpkg -s libucx-asio-dev > /dev/null 2>&1; then
  echo "FAIL: the package leaked into this machine"
  exit 1
fi
echo "PASSED"
