// Micro-benchmarks of single operations, one process.
//
// Names are BM_<op>_<topology>: st = one thread, mt = several threads of one
// process sharing one segment. Each loop iteration is one operation; the
// work that keeps the segment in a steady state (refilling what claims took,
// completing what they leased) runs in chunks of kChunk operations with the
// timer paused, so its cost (and PauseTiming's own) is spread over a few
// thousand timed operations. Rates are counters (kIsRate).
#include <array>
#include <span>
#include <string>
#include <vector>

#include "micro_support.hpp"

namespace fairlane::micro {
namespace {

constexpr std::uint32_t kLanes = 64;
constexpr std::size_t kChunk = 4096;
const std::string kPayload64(64, 'p');

// enqueue of a pre-minted id into one of 64 lanes, onto an empty queue
// growing to kChunk jobs; then drained with the timer paused.
void BM_enqueue_st(benchmark::State& state) {
  bool fresh = false;
  auto& q = Pool::acquire({pow2_at_least(kChunk * 2), kLanes + 1, 64, "empty"}, fresh);
  Pool::ready();
  const auto groups = make_groups(kLanes);
  std::vector<BrandedId> ids(kChunk);
  for (auto& id : ids) id = q.mint();
  Lease lease;
  lease.payload.reserve(64);
  std::size_t i = 0;
  auto drain = [&] {
    for (std::size_t k = 0; k < i; ++k)
      if (!q.claim(lease, kLeaseMs) || q.complete(lease.id, lease.token) != AckStatus::ok) return false;
    return true;
  };
  for (auto _ : state) {
    if (i == kChunk) {
      state.PauseTiming();
      if (!drain()) { state.SkipWithError("drain failed"); break; }
      for (auto& id : ids) id = q.mint();
      i = 0;
      state.ResumeTiming();
    }
    auto st = q.enqueue(groups[i % kLanes], ids[i], kPayload64);
    benchmark::DoNotOptimize(st);
    ++i;
  }
  if (!drain()) Pool::drop();
  state.counters["enqueues/s"] = benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_enqueue_st);

// claim (ring rotation + lease + payload copy) from 64 lanes holding
// kChunk/64 + 1 .. 2*kChunk/64 + 1 jobs each.
void BM_claim_st(benchmark::State& state) {
  const std::uint64_t per_lane = kChunk / kLanes + 1;
  bool fresh = false;
  auto& q = Pool::acquire({pow2_at_least(kLanes * per_lane + kChunk), kLanes + 1, 64, "claim"}, fresh);
  const auto groups = make_groups(kLanes);
  if (fresh) fill(q, groups, per_lane, kPayload64, state);
  Pool::ready();
  std::vector<Held> held(kChunk);
  Lease lease;
  lease.payload.reserve(64);
  std::size_t i = 0;
  for (auto _ : state) {
    if (i == kChunk) {
      state.PauseTiming();
      if (!complete_and_refill(q, held, i, kPayload64, state)) break;
      i = 0;
      state.ResumeTiming();
    }
    if (!q.claim(lease, kLeaseMs)) { state.SkipWithError("claim found nothing"); break; }
    held[i++] = {lease.id, lease.group, lease.token};
  }
  if (!complete_and_refill(q, held, i, kPayload64, state)) Pool::drop();
  state.counters["claims/s"] = benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_claim_st);

// enqueue into a queue whose every slot holds a job: what a producer that
// outruns its consumers pays for each `full` it is told. The queue's size is
// the argument: the answer must not cost a look at every slot.
void BM_enqueue_full_st(benchmark::State& state) {
  const auto jobs = std::uint32_t(state.range(0));
  bool fresh = false;
  auto& q = Pool::acquire({jobs, kLanes + 1, 64, "full"}, fresh);
  const auto groups = make_groups(kLanes);
  if (fresh && !fill_to_full(q, [&](std::uint64_t k) { return groups[k % kLanes]; }, kPayload64, state)) return;
  Pool::ready();
  const BrandedId id = q.mint();
  for (auto _ : state) {
    auto st = q.enqueue(groups[0], id, kPayload64);
    if (st != EnqueueStatus::full) { state.SkipWithError("the queue is not full"); break; }
    benchmark::DoNotOptimize(st);
  }
  state.counters["fulls/s"] = benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_enqueue_full_st)->ArgName("jobs")->Arg(8192)->Arg(1 << 20);

// claim on an empty queue: what an idle consumer's poll costs.
void BM_claim_empty_st(benchmark::State& state) {
  bool fresh = false;
  auto& q = Pool::acquire({pow2_at_least(kChunk * 2), kLanes + 1, 64, "empty"}, fresh);
  Pool::ready();
  Lease lease;
  for (auto _ : state) {
    bool got = q.claim(lease, kLeaseMs);
    benchmark::DoNotOptimize(got);
  }
  state.counters["polls/s"] = benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_claim_empty_st);

// complete (fenced by the attempt) of jobs claimed with the timer paused.
void BM_complete_st(benchmark::State& state) {
  const std::uint64_t per_lane = kChunk / kLanes + 1;
  bool fresh = false;
  auto& q = Pool::acquire({pow2_at_least(kLanes * per_lane + kChunk), kLanes + 1, 64, "claim"}, fresh);
  const auto groups = make_groups(kLanes);
  if (fresh) fill(q, groups, per_lane, kPayload64, state);
  Pool::ready();
  std::vector<Held> held(kChunk);
  Lease lease;
  lease.payload.reserve(64);
  std::size_t n = 0, i = 0;
  auto claim_chunk = [&] {
    for (n = 0; n < kChunk; ++n) {
      if (!q.claim(lease, kLeaseMs)) return false;
      held[n] = {lease.id, lease.group, lease.token};
    }
    return true;
  };
  auto refill = [&] {
    for (std::size_t k = 0; k < n; ++k)
      if (q.enqueue(held[k].group, q.mint(), kPayload64) != EnqueueStatus::enqueued) return false;
    return true;
  };
  if (!claim_chunk()) state.SkipWithError("claim found nothing");
  for (auto _ : state) {
    if (i == n) {
      state.PauseTiming();
      if (!refill() || !claim_chunk()) { state.SkipWithError("refill/claim failed"); break; }
      i = 0;
      state.ResumeTiming();
    }
    auto st = q.complete(held[i].id, held[i].token);
    benchmark::DoNotOptimize(st);
    ++i;
  }
  // Complete what is still leased, put back what was taken.
  for (std::size_t k = i; k < n; ++k) (void)q.complete(held[k].id, held[k].token);
  if (!refill()) Pool::drop();
  state.counters["completes/s"] = benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_complete_st);

// The full cycle a producer and a consumer make for one job:
// mint + enqueue + claim + complete, over a steady backlog of 64 x 16 jobs.
void cycle(benchmark::State& state, std::uint32_t payload_bytes) {
  const std::string payload(payload_bytes, 'p');
  const std::uint64_t per_lane = 16;
  bool fresh = false;
  auto& q = Pool::acquire({pow2_at_least(kLanes * per_lane * 2 + 1024), kLanes + 1, payload_bytes, "cycle"}, fresh);
  const auto groups = make_groups(kLanes);
  if (fresh) fill(q, groups, per_lane, payload, state);
  if (fresh) Pool::ready();
  Lease lease;
  lease.payload.reserve(payload_bytes);
  std::uint32_t g = std::uint32_t(state.thread_index()) * 7;
  for (auto _ : state) {
    if (q.enqueue(groups[g++ % kLanes], q.mint(), payload) != EnqueueStatus::enqueued) {
      state.SkipWithError("enqueue refused");
      break;
    }
    if (!q.claim(lease, kLeaseMs)) { state.SkipWithError("claim found nothing"); break; }
    if (q.complete(lease.id, lease.token) != AckStatus::ok) { state.SkipWithError("complete refused"); break; }
  }
  state.counters["cycles/s"] = benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_cycle_st(benchmark::State& state) { cycle(state, 64); }
BENCHMARK(BM_cycle_st);

// The same cycle in a table with no free slot when it starts (8,192 slots;
// lane 0 holds every other job, the other 63 lanes the rest): claim +
// complete free one slot, and mint + enqueue into the same lane must find
// it. Claims go round the lanes while the slots were taken in turn, so the
// slots freed are spread over the table, mostly outside the producer's
// cursor's block: what a producer that keeps up with its consumers at a full
// queue pays, the slot found through the free hints.
void BM_cycle_full_st(benchmark::State& state) {
  constexpr std::uint32_t kJobs = 8192;
  bool fresh = false;
  auto& q = Pool::acquire({kJobs, kLanes + 1, 64, "cycle-full"}, fresh);
  const auto groups = make_groups(kLanes);
  auto lane_of = [&](std::uint64_t k) { return groups[k % 2 ? 1 + (k / 2) % (kLanes - 1) : 0]; };
  if (fresh && !fill_to_full(q, lane_of, kPayload64, state)) return;
  Pool::ready();
  Lease lease;
  lease.payload.reserve(64);
  for (auto _ : state) {
    if (!q.claim(lease, kLeaseMs)) { state.SkipWithError("claim found nothing"); break; }
    if (q.complete(lease.id, lease.token) != AckStatus::ok) { state.SkipWithError("complete refused"); break; }
    if (q.enqueue(lease.group, q.mint(), kPayload64) != EnqueueStatus::enqueued) {
      state.SkipWithError("enqueue refused");
      break;
    }
  }
  state.counters["cycles/s"] = benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_cycle_full_st);

// Each thread runs whole cycles on the one segment: contention on the ring,
// the mint word and the lanes.
void BM_cycle_mt(benchmark::State& state) { cycle(state, 64); }
BENCHMARK(BM_cycle_mt)->Threads(2)->UseRealTime();

// Payload size through the whole cycle (copied in by enqueue, out by claim).
void BM_cycle_payload_st(benchmark::State& state) {
  cycle(state, std::uint32_t(state.range(0)));
  state.counters["bytes/s"] =
      benchmark::Counter(double(state.iterations()) * double(state.range(0)), benchmark::Counter::kIsRate,
                         benchmark::Counter::kIs1024);
}
BENCHMARK(BM_cycle_payload_st)->Arg(16)->Arg(256)->Arg(4096);

// claim_batch of `batch` leases, lanes of weight `weight` (a ring step takes
// up to `weight` jobs of its lane).
void BM_claim_batch_st(benchmark::State& state) {
  const auto batch = std::size_t(state.range(0));
  const auto weight = std::uint32_t(state.range(1));
  const std::uint64_t per_lane = kChunk / kLanes + 1;
  bool fresh = false;
  auto& q = Pool::acquire(
      {pow2_at_least(kLanes * per_lane + kChunk + batch), kLanes + 1, 64, "batch w=" + std::to_string(weight)}, fresh);
  const auto groups = make_groups(kLanes);
  if (fresh) {
    for (auto& g : groups)
      if (q.set_weight(g, weight) != LaneStatus::ok) state.SkipWithError("set_weight refused");
    fill(q, groups, per_lane, kPayload64, state);
  }
  Pool::ready();
  std::vector<Lease> leases(batch);
  for (auto& l : leases) l.payload.reserve(64);
  std::vector<Held> held(kChunk + batch);
  std::size_t n = 0;
  std::uint64_t jobs = 0;
  for (auto _ : state) {
    if (n >= kChunk) {
      state.PauseTiming();
      if (!complete_and_refill(q, held, n, kPayload64, state)) break;
      n = 0;
      state.ResumeTiming();
    }
    const std::size_t got = q.claim_batch(std::span<Lease>(leases), kLeaseMs);
    if (got == 0) { state.SkipWithError("claim_batch found nothing"); break; }
    for (std::size_t k = 0; k < got; ++k) held[n++] = {leases[k].id, leases[k].group, leases[k].token};
    jobs += got;
  }
  if (!complete_and_refill(q, held, n, kPayload64, state)) Pool::drop();
  state.counters["jobs/s"] = benchmark::Counter(double(jobs), benchmark::Counter::kIsRate);
  state.counters["jobs/call"] = double(jobs) / double(std::max<std::int64_t>(state.iterations(), 1));
}
BENCHMARK(BM_claim_batch_st)->ArgNames({"batch", "weight"})->ArgsProduct({{8, 32}, {1, 8}});

// mint: one CAS on the segment's mint word.
void BM_mint_st(benchmark::State& state) {
  bool fresh = false;
  auto& q = Pool::acquire({pow2_at_least(kChunk * 2), kLanes + 1, 64, "empty"}, fresh);
  Pool::ready();
  for (auto _ : state) {
    auto id = q.mint();
    benchmark::DoNotOptimize(id);
  }
  state.counters["mints/s"] = benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_mint_st);

void BM_mint_mt(benchmark::State& state) {
  bool fresh = false;
  auto& q = Pool::acquire({pow2_at_least(kChunk * 2), kLanes + 1, 64, "empty"}, fresh);
  if (fresh) Pool::ready();
  for (auto _ : state) {
    auto id = q.mint();
    benchmark::DoNotOptimize(id);
  }
  state.counters["mints/s"] = benchmark::Counter(double(state.iterations()), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_mint_mt)->Threads(2)->UseRealTime();

}  // namespace
}  // namespace fairlane::micro
