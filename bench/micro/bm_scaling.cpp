// How claim scales: with the number of lanes (design invariant 8: O(1) in
// lanes) and with the depth of a lane (O(log depth)); and what a new
// tenant's lane costs when every lane record is taken by an idle lane. One
// thread.
//
// Each timed iteration is one claim. With the timer paused every chunk, the
// claimed jobs are completed and the same number enqueued into their lanes,
// so the segment's shape (lanes, depth per lane) is the same at every chunk
// start. Payloads are 16 bytes here, so the numbers are the queue's own
// costs rather than memcpy.
#include <algorithm>
#include <string>
#include <vector>

#include "micro_support.hpp"

namespace fairlane::micro {
namespace {

const std::string kPayload16(16, 'p');

// Claims `chunk` jobs per timed stretch from `lanes` lanes that each hold
// `depth` jobs at the start of a stretch.
void claim_shape(benchmark::State& state, std::uint32_t lanes, std::uint64_t depth, std::size_t chunk,
                 const char* contents) {
  bool fresh = false;
  const std::uint64_t jobs = std::uint64_t(lanes) * depth + chunk + 1024;
  auto& q = Pool::acquire({pow2_at_least(jobs), std::max<std::uint32_t>(lanes + 1, 64), 16, contents}, fresh);
  const auto groups = make_groups(lanes);
  if (fresh) fill(q, groups, depth, kPayload16, state);
  Pool::ready();
  std::vector<Held> held(chunk);
  Lease lease;
  lease.payload.reserve(16);
  std::size_t i = 0;
  for (auto _ : state) {
    if (i == chunk) {
      state.PauseTiming();
      if (!complete_and_refill(q, held, i, kPayload16, state)) break;
      i = 0;
      state.ResumeTiming();
    }
    if (!q.claim(lease, kLeaseMs)) { state.SkipWithError("claim found nothing"); break; }
    held[i++] = {lease.id, lease.group, lease.token};
  }
  if (!complete_and_refill(q, held, i, kPayload16, state)) Pool::drop();
  state.counters["claims/s"] = benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["lanes"] = lanes;
  state.counters["depth"] = double(depth);
}

// Claim cost against the number of lanes: every lane holds 2 jobs (plus what
// a chunk takes from it when there are fewer lanes than the chunk), so a
// claim never empties its lane; each claim lands on a different lane than
// the last while lanes > 1, touching a different lane record every time.
void BM_claim_lanes_st(benchmark::State& state) {
  const auto lanes = std::uint32_t(state.range(0));
  const std::size_t chunk = 1024;
  const std::uint64_t depth = chunk / lanes + 2;
  claim_shape(state, lanes, depth, chunk, "lanes");
}
BENCHMARK(BM_claim_lanes_st)->ArgName("lanes")->Arg(1)->Arg(10)->Arg(100)->Arg(1000)->Arg(10000)->Arg(100000);

// Claim cost against lane depth. M lanes of depth d, claimed r times each per
// stretch (so a lane's depth runs from d down to d - r + 1):
//   d <= 1000: M = 256, r = 1    (d = 1: every claim empties and de-rings its
//                                 lane; the refill re-rings it)
//   d = 10^4:  M = 25,  r = 10
//   d = 10^5:  M = 2,   r = 128
//   d = 10^6:  M = 1,   r = 256
void BM_claim_depth_st(benchmark::State& state) {
  const auto depth = std::uint64_t(state.range(0));
  const auto lanes = std::uint32_t(std::clamp<std::uint64_t>(256'000 / depth, 1, 256));
  const std::uint64_t r = std::min<std::uint64_t>(std::max<std::uint64_t>(1, 256 / lanes), depth);
  claim_shape(state, lanes, depth, std::size_t(lanes * r), "depth");
}
BENCHMARK(BM_claim_depth_st)
    ->ArgName("depth")
    ->Arg(1)
    ->Arg(10)
    ->Arg(100)
    ->Arg(1000)
    ->Arg(10000)
    ->Arg(100000)
    ->Arg(1000000);

// A new tenant's first enqueue when every lane record holds an idle lane
// (tenants that came and went since the last sweep): the creation finds no
// free record and gives an idle lane back for the new group. Each timed
// iteration is that enqueue; with the timer paused, its job is claimed and
// completed, so the new lane is idle too and the table's shape is the same
// at every iteration. The group ids run on, so every enqueue is a new
// group's. The recovery bound is the longest, so that no sweep gives idle
// lanes back (two sightings a bound apart) while it runs. Before
// 2026-12-07 a creation walked every record twice here
// (docs/perf/lane-creation-2026-12-07.txt).
void BM_new_group_idle_lanes_st(benchmark::State& state) {
  const auto lanes = std::uint32_t(state.range(0));
  bool fresh = false;
  auto& q = Pool::acquire({pow2_at_least(std::uint64_t(lanes) + 1024), lanes, 16, "idle lanes", 0, kMaxRecoveryMs}, fresh);
  static std::uint64_t next_group = 1;
  Lease lease;
  const auto drain_one = [&] {
    if (!q.claim(lease, kLeaseMs)) return false;
    return q.complete(lease.id, lease.token) == AckStatus::ok;
  };
  if (fresh) {
    for (std::uint32_t i = 0; i < lanes; ++i) {
      const auto st = q.enqueue(BrandedId::make("TEN", next_group++), q.mint(), kPayload16);
      if (st != EnqueueStatus::enqueued || !drain_one()) {
        state.SkipWithError("fill: a group's lane could not be made and drained");
        Pool::drop();
        return;
      }
    }
  }
  Pool::ready();
  for (auto _ : state) {
    const auto st = q.enqueue(BrandedId::make("TEN", next_group++), q.mint(), kPayload16);
    state.PauseTiming();
    if (st != EnqueueStatus::enqueued || !drain_one()) {
      state.SkipWithError(("new group: enqueue " + std::string(to_string(st))).c_str());
      Pool::drop();
      break;
    }
    state.ResumeTiming();
  }
  state.counters["lanes"] = lanes;
}
BENCHMARK(BM_new_group_idle_lanes_st)->ArgName("lanes")->Arg(1000)->Arg(100000)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace fairlane::micro
