// What recovery costs the claims that do it (docs/design.md, "Recovery").
// There is no gate: the sweep that returns the leases of dead holders and
// finishes what dead processes left half done runs a chunk of the slot
// table at a time inside the claims that find a pass due, beside everyone
// else's operations. This measures a whole pass (Queue::tick: every chunk at
// once) over a segment with nothing to do, the cost a pass spreads over the
// claims of its recovery_ms / 2.
// Args: job slots, lanes in use; 90% of the slots hold pending jobs spread
// over the lanes.
#include <algorithm>
#include <string>

#include "micro_support.hpp"

namespace fairlane::micro {
namespace {

const std::string kPayload16(16, 'p');

void BM_sweep_pass(benchmark::State& state) {
  const auto jobs = std::uint32_t(state.range(0));
  const auto lanes = std::uint32_t(state.range(1));
  bool fresh = false;
  auto& q = Pool::acquire({jobs, lanes + 1, 16, "sweep-pass"}, fresh);
  const auto groups = make_groups(lanes);
  if (fresh) fill(q, groups, std::uint64_t(jobs) * 9 / 10 / lanes, kPayload16, state);
  Pool::ready();
  for (auto _ : state) benchmark::DoNotOptimize(q.tick());
  state.counters["ns_per_slot"] =
      benchmark::Counter(double(jobs), benchmark::Counter::kIsIterationInvariantRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_sweep_pass)
    ->ArgNames({"jobs", "lanes"})
    ->Args({4096, 16})
    ->Args({65536, 4096})
    ->Args({262144, 16384})
    ->Unit(benchmark::kMillisecond);

// The same pass over a small queue with room for more processes (each has
// 16 thread records): what the pass's look at the records of threads costs.
// Only 2 of them are ever used here (this thread's and the filler's).
void BM_sweep_pass_processes(benchmark::State& state) {
  const auto procs = std::uint32_t(state.range(0));
  bool fresh = false;
  auto& q = Pool::acquire({4096, 17, 16, "sweep-pass-processes", procs}, fresh);
  const auto groups = make_groups(16);
  if (fresh) fill(q, groups, 4096 * 9 / 10 / 16, kPayload16, state);
  Pool::ready();
  for (auto _ : state) benchmark::DoNotOptimize(q.tick());
}
BENCHMARK(BM_sweep_pass_processes)->ArgName("processes")->Arg(4)->Arg(256)->Arg(4095)->Unit(benchmark::kMicrosecond);

// A handle opened, used by this thread (which takes it a thread record) and
// closed, on a segment with room for that many processes (16 thread records
// each). Closing gives back the records the handle's threads took; it read
// the whole thread table to find them until 2026-12-04.
void BM_open_use_close(benchmark::State& state) {
  const auto procs = std::uint32_t(state.range(0));
  bool fresh = false;
  auto& q = Pool::acquire({4096, 17, 16, "open-use-close", procs}, fresh);
  Pool::ready();
  const BrandedId group = BrandedId::make("GRP", 1);
  for (auto _ : state) {
    auto h = Queue::open(q.name());
    if (!h) {
      state.SkipWithError(h.error().message.c_str());
      return;
    }
    Lease l;
    if (h->enqueue(group, h->mint(), "p") != EnqueueStatus::enqueued || !h->claim(l, 60'000) ||
        h->complete(l.id, l.token) != AckStatus::ok) {
      state.SkipWithError("the opened handle could not run a job through");
      return;
    }
  }
}
BENCHMARK(BM_open_use_close)->ArgName("processes")->Arg(4)->Arg(4095)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace fairlane::micro
