#!/usr/bin/env bash
# fairlane's entry point on a fresh Debian 12 machine.
#   ./run.sh demo [--seconds S]   install deps, build, run the demo
#   ./run.sh test                 install deps, build, run every test (ctest)
#   ./run.sh bench [ARGS]         install deps, build, count instructions and locked RMWs per
#                                 cycle (bench/cycle/count.sh), run the benchmark harness with
#                                 ARGS (its targets include that count), then the stall
#                                 measurement (fairlane-stall; --quick in ARGS makes all three short)
#   ./run.sh sanitize [asan|tsan] [CTEST ARGS]
#                                 build and run the unit, multiproc, crash and churn tests
#                                 (and, under asan, the cli tests) under ASan+UBSan, then
#                                 under TSan (presets asan, tsan)
#   ./run.sh fuzz [CTEST ARGS]    build the libFuzzer target with clang (preset fuzz) and run
#                                 it for 100,000 inputs from tests/fuzz/corpus (ctest label
#                                 fuzz; it fails if they do not all run within 14 minutes)
set -euo pipefail
cd "$(dirname "$0")"
cmd="${1:-demo}"
[ $# -gt 0 ] && shift
usage() { echo "usage: ./run.sh demo|test|bench|sanitize|fuzz [args]" >&2; exit 2; }
# A mistyped command is refused before anything is installed or built.
case "$cmd" in demo|test|bench|sanitize|fuzz) ;; *) usage ;; esac
# stdout is the command's own (./run.sh bench --json, demo --json): installing
# and building write to stderr.
scripts/install-deps.sh >&2
build() {
  cmake --preset release >/dev/null
  cmake --build --preset release -j"$(nproc)" >&2
}
# Configure, build the test executables of the labels unit|multiproc|crash|churn
# (target fairlane_tests_<label>; asan also builds the tool and the cli tests)
# and run them; the test presets carry the label filter and the *SAN_OPTIONS. Stops at the first preset that fails, so
# the log ends with that preset's ctest summary. Under tsan, ModelTest and
# Capacity.AQueueFilledToTheLastSlotTakesEveryJob are left out: they are
# single-threaded, so TSan has nothing to check in them (asan runs them; the
# second took 71 s under TSan, the stage's last minute);
# so is Setup.TheLastProcessRecordHoldsItsLeases, which maps the segment 4,095
# times in one process (TSan's shadow of each mapping makes it take minutes);
# and so are the tests whose processes run on one segment at once (label
# multiproc, the torture run, the multi-process churn, worker and crash
# cases): TSan's runtime makes 128-bit atomics atomic under a lock of its own
# process, so under TSan they are not atomic between processes, and TSan
# cannot see another process's accesses anyway (release and asan run them).
# TSan sees only this process: races between processes through the segment
# are outside what it can check.
sanitize() {
  local presets=(asan tsan)
  case "${1:-}" in asan|tsan) presets=("$1"); shift ;; esac
  for p in "${presets[@]}"; do
    cmake --preset "$p" >/dev/null
    cmake --build --preset "$p" -j"$(nproc)"
    ctest --preset "$p" -j"$(nproc)" "$@"
  done
}
# The fuzz target (tests/fuzz): clang, libFuzzer, ASan+UBSan; a crash, leak
# or hang leaves its input in build/fuzz/tests/fuzz/artifacts/.
fuzz() {
  cmake --preset fuzz >/dev/null
  cmake --build --preset fuzz -j"$(nproc)"
  ctest --preset fuzz "$@"
}
bench() {
  local out=build/release/bench quick=() cycle=() status=0 st=0 side=1
  for a in "$@"; do
    case "$a" in
      --quick) quick=(--quick) ;;
      --json) side=2 ;;  # stdout is fairlane-bench's JSON alone; the rest goes to stderr
    esac
  done
  # The cycle count (skipped, with a note, without valgrind).
  if bench/cycle/count.sh --bin "$out" --json "$out/cycle.json" "${quick[@]}" >&"$side"; then
    cycle=(--cycle-json "$out/cycle.json")
    # The same loop on the mutex peer, shown beside the budget for reference.
    if bench/cycle/count.sh --bin "$out" --peer mutex --json "$out/cycle-mutex.json" --quick --top 0 >/dev/null; then
      cycle+=(--cycle-peer-json "$out/cycle-mutex.json")
    fi
  fi
  echo >&"$side"
  "$out/fairlane-bench" "${cycle[@]}" "$@" || status=$?
  echo >&"$side"
  "$out/fairlane-stall" "${quick[@]}" >&"$side" || st=$?
  [ $status -ne 0 ] || status=$st
  return $status
}
case "$cmd" in
  demo)  build; exec build/release/tools/fairlane demo "$@" ;;
  test)  build; exec ctest --preset release -j"$(nproc)" "$@" ;;
  bench) build; bench "$@" ;;
  sanitize) sanitize "$@" ;;
  fuzz) fuzz "$@" ;;
  *) usage ;;
esac
