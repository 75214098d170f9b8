#!/usr/bin/env bash
# fairlane's entry point on a fresh Debian 12 machine.
#   ./run.sh demo [--seconds S]   install deps, build, run the demo
#   ./run.sh test                 install deps, build, run every test (ctest)
#   ./run.sh bench [ARGS]         install deps, build, run the benchmark harness
set -euo pipefail
cd "$(dirname "$0")"
cmd="${1:-demo}"
[ $# -gt 0 ] && shift
scripts/install-deps.sh
build() {
  cmake --preset release >/dev/null
  cmake --build --preset release -j"$(nproc)"
}
case "$cmd" in
  demo)  build; exec build/release/tools/fairlane demo "$@" ;;
  test)  build; exec ctest --preset release -j"$(nproc)" "$@" ;;
  bench) build; exec build/release/bench/fairlane-bench "$@" ;;
  *) echo "usage: ./run.sh demo|test|bench [args]" >&2; exit 2 ;;
esac
