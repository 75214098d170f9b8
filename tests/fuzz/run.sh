#!/usr/bin/env bash
# ctest's fuzz.segment: runs the libFuzzer target and passes only if it
# exited cleanly (no crash, leak or timeout: libFuzzer's own exit status)
# *and* ran at least the inputs asked for. The time limit is a guard
# against a hang of the whole run, not a way to pass with fewer inputs.
#   run.sh FUZZER RUNS SECONDS ARTIFACTS CORPUS...
set -uo pipefail
fuzzer="$1" runs="$2" seconds="$3" artifacts="$4"
shift 4
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
"$fuzzer" -runs="$runs" -max_total_time="$seconds" -max_len=256 -timeout=10 -print_final_stats=1 \
  -artifact_prefix="$artifacts/" "$@" >"$log" 2>&1
status=$?
# The last lines say how the run ended; the rest (one line per new input) is noise.
grep -v -E '^#[0-9]+ +(NEW|REDUCE|pulse)' "$log" | tail -n 40
if [ "$status" -ne 0 ]; then
  echo "fuzz.segment: the fuzzer exited with status $status (an input that crashed, leaked or hung is in $artifacts)"
  exit 1
fi
ran=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p' "$log" | tail -n 1)
if [ -z "$ran" ] || [ "$ran" -lt "$runs" ]; then
  echo "fuzz.segment: ${ran:-no} inputs run in the $seconds s allowed, fewer than the $runs asked for"
  exit 1
fi
echo "fuzz.segment: $ran inputs, no crash, leak or hang"
