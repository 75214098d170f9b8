#!/usr/bin/env bash
# The cycle counter (issue 12): instructions and locked read-modify-writes per
# mint + enqueue + claim + complete cycle, through the public API, counted by
# callgrind. A count, not a time: the same on a busy machine as on a quiet one.
#
#   bench/cycle/count.sh [--bin DIR] [--cycles N] [--quick] [--json FILE] [--top K]
#                        [--keep DIR] [--probe] [--inlined K] [--peer fairlane|mutex]
#
#   --bin DIR    where fairlane_cycle, fairlane_cycle_report (and _probe, _mutex) are
#                (default: build/release/bench next to this script's repository)
#   --cycles N   measured cycles per region (default 20000; --quick: 2000)
#   --quick      a short run that prints the figures without judging the budget
#   --json FILE  the report as JSON too (fairlane-bench --cycle-json FILE reads it)
#   --keep DIR   keep the callgrind dumps there (callgrind_annotate can read them)
#   --probe      count the probe instead (known RMWs per iteration) and check
#                the counter against them: exit 1 on any difference
#   --inlined K  each operation's K costliest functions, counting the ones
#                inlined into others (needs a build with -g, the prof preset:
#                --bin build/prof/bench; and llvm-symbolizer, Debian's llvm)
#   --peer mutex the same loop on the harness's mutex peer (bench/harness/
#                mutex_queue.hpp: fairlane's work behind one robust
#                process-shared mutex), for reference: its figures, never
#                judged against the budget
#
# Exit status: 0; 1 when a step failed (or --probe found a wrong count); 77
# when valgrind or objdump is missing (ctest's SKIP_RETURN_CODE). Without
# llvm-symbolizer the probe's inl= expectations are not checked (a note
# says so), unless FAIRLANE_REQUIRE_SERVERS is set: then --probe fails.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
bin="$here/../../build/release/bench"
cycles=""
quick=0
json=""
top=12
keep=""
probe=0
inlined=""
peer=fairlane
while [ $# -gt 0 ]; do
  case "$1" in
    --bin) bin="$2"; shift 2 ;;
    --cycles) cycles="$2"; shift 2 ;;
    --quick) quick=1; shift ;;
    --json) json="$2"; shift 2 ;;
    --top) top="$2"; shift 2 ;;
    --keep) keep="$2"; shift 2 ;;
    --probe) probe=1; shift ;;
    --inlined) inlined="$2"; shift 2 ;;
    --peer)
      case "${2:-}" in
        fairlane|mutex) peer="$2"; shift 2 ;;
        *) echo "count.sh: --peer takes fairlane or mutex" >&2; exit 2 ;;
      esac ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "count.sh: unknown argument $1 (try --help)" >&2; exit 2 ;;
  esac
done
for tool in valgrind objdump; do
  if ! command -v "$tool" >/dev/null 2>&1; then
    echo "count.sh: $tool not found (apt-get install valgrind binutils); skipped" >&2
    # 1 where every program is required (tests/common/require_servers.hpp).
    [ -n "${FAIRLANE_REQUIRE_SERVERS:-}" ] && [ "${FAIRLANE_REQUIRE_SERVERS}" != 0 ] && exit 1
    exit 77
  fi
done
[ -z "$cycles" ] && { [ "$quick" = 1 ] && cycles=2000 || cycles=20000; }
warmup=$(( cycles / 4 > 500 ? cycles / 4 : 500 ))

work="$(mktemp -d "${TMPDIR:-/tmp}/fairlane-cycle.XXXXXX")"
trap 'rm -rf "$work"' EXIT
vg=(valgrind --tool=callgrind --dump-instr=yes --collect-atstart=no --instr-atstart=no
    --callgrind-out-file="$work/callgrind.out.%p")
report=("$bin/fairlane_cycle_report" --top "$top")
[ -n "$json" ] && report+=(--json "$json")
[ -n "$inlined" ] && report+=(--inlined "$inlined")

if [ "$probe" = 1 ]; then
  "${vg[@]}" "$bin/fairlane_cycle_probe" --n "$cycles" >"$work/run.log" 2>&1 ||
    { cat "$work/run.log" >&2; echo "count.sh: the probe failed under valgrind" >&2; exit 1; }
  report+=(--check)
  echo "fairlane cycle counter, probe: $cycles iterations per region (known counts; --check)"
else
  loop=fairlane_cycle
  [ "$peer" = mutex ] && loop=fairlane_cycle_mutex
  "${vg[@]}" "$bin/$loop" --cycles "$cycles" --warmup "$warmup" >"$work/run.log" 2>&1 ||
    { cat "$work/run.log" >&2; echo "count.sh: $loop failed under valgrind" >&2; exit 1; }
  if [ "$peer" = mutex ]; then
    echo "the mutex peer's cycle (for reference, not judged): $cycles cycles of mint + enqueue + claim + complete" \
         "per region (after $warmup warm-up), bench/harness/mutex_queue.hpp through its own API, one thread," \
         "64 tenants in turn over a backlog of 16 each, 64-byte payloads; callgrind ($(valgrind --version))"
  else
    [ "$quick" = 1 ] || report+=(--budget 1000,12)
    echo "fairlane cycle counter: $cycles cycles of mint + enqueue + claim + complete per region" \
         "(after $warmup warm-up), public API, one thread, 64 tenants in turn over a backlog of 16 each," \
         "64-byte payloads; callgrind ($(valgrind --version))"
  fi
  echo "locked RMW = an instruction with a lock prefix, an xchg with memory, an mfence (one each)"
  echo
fi
status=0
"${report[@]}" "$work"/callgrind.out.* || status=$?
if [ -n "$keep" ]; then
  mkdir -p "$keep"
  cp "$work"/callgrind.out.* "$keep"/
  echo "callgrind dumps kept in $keep"
fi
exit $status
