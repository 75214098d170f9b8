#!/usr/bin/env bash
# Installs the Debian 12 packages fairlane builds, tests and benchmarks with.
# Does nothing when they are all present already.
set -euo pipefail
PKGS=(
  cmake ninja-build g++ pkg-config
  libboost1.81-dev libgtest-dev libgmock-dev libbenchmark-dev
  libconcurrentqueue-dev libhiredis-dev libcli11-dev libfmt-dev nlohmann-json3-dev
  redis-server gnuplot-nox procps prometheus valgrind binutils llvm clang libclang-rt-14-dev
  # clang and libclang-rt-14-dev (libFuzzer's runtime, which clang only
  # recommends) are for ./run.sh fuzz; llvm (llvm-symbolizer) is for the
  # cycle counter's breakdown by inlined function (bench/cycle/count.sh)
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
echo "installing: ${missing[*]}" >&2
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
