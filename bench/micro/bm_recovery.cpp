// How long the gate stays closed (docs/design.md section 7): while a repair
// after a process that died inside an operation runs, every other operation
// waits. The repair's floor is the fsck it starts with, over the whole slot
// table, id index and lanes; a rebuild of what it found broken comes on top.
//
// Each iteration is one Queue::repair(force), which closes the gate, finds
// no one inside an operation, checks a clean segment and opens the gate.
// Args: job slots, lanes in use; 90% of the slots hold pending jobs spread
// over the lanes. The counter gate_us is the time the gate was closed, as the
// segment itself recorded it (RecoveryInfo::repair_us).
#include <algorithm>
#include <string>

#include "micro_support.hpp"

namespace fairlane::micro {
namespace {

const std::string kPayload16(16, 'p');

void BM_gate_repair_check(benchmark::State& state) {
  const auto jobs = std::uint32_t(state.range(0));
  const auto lanes = std::uint32_t(state.range(1));
  bool fresh = false;
  auto& q = Pool::acquire({jobs, lanes + 1, 16, "gate-check"}, fresh);
  const auto groups = make_groups(lanes);
  if (fresh) fill(q, groups, std::uint64_t(jobs) * 9 / 10 / lanes, kPayload16, state);
  Pool::ready();
  std::uint64_t gate_us = 0;
  for (auto _ : state) {
    auto r = q.repair(true);
    if (!r || !r->clean()) {
      state.SkipWithError("the segment is not clean, or the repair failed");
      break;
    }
    gate_us += q.recovery().repair_us;
  }
  state.counters["gate_us"] = benchmark::Counter(double(gate_us) / double(std::max<std::int64_t>(1, state.iterations())));
}
BENCHMARK(BM_gate_repair_check)
    ->ArgNames({"jobs", "lanes"})
    ->Args({4096, 16})
    ->Args({65536, 4096})
    ->Args({262144, 16384})
    ->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace fairlane::micro
