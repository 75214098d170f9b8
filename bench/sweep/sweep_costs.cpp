// What a sweep pass costs the claims that run it, with many processes
// attached (issue 12: no claim spends over 2 ms on holder checks, expiry or
// promotion). Three measures, one segment each, wall-clock times of single
// calls (a shared machine is noisy: compare runs of two builds interleaved):
//
//   create   Queue::create of the segment (the creator faults in the tables
//            every pass reads), best of 5
//   passes   tick() over a fresh segment, advance_clock(60 s) before each:
//            the first (page faults), the mean and the worst of 50
//   claims   N other handles of this process attached (each has its own
//            process record, judged as another process would be); 20 rounds
//            of 64 enqueues, advance_clock(recovery_ms) and 64 claims: the
//            median, p99 and slowest claim
//
//   fairlane_sweep_costs [--jobs N] [--processes N] [--handles N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

#include "fairlane/queue.hpp"

namespace {

using fairlane::BrandedId;
using fairlane::Lease;
using fairlane::Queue;
using fairlane::QueueOptions;
using Clock = std::chrono::steady_clock;

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

std::string seg_name(const char* what) { return "fairlane-sweep-costs-" + std::to_string(getpid()) + "-" + what; }

Queue make(const std::string& name, const QueueOptions& o) {
  (void)Queue::remove(name);
  auto q = Queue::create(name, o);
  if (!q) {
    std::fprintf(stderr, "fairlane_sweep_costs: create %s: %s\n", name.c_str(), q.error().message.c_str());
    std::exit(1);
  }
  return std::move(q).value();
}

void measure_create(QueueOptions o) {
  const std::string name = seg_name("create");
  double best = 1e300;
  for (int i = 0; i < 5; ++i) {
    (void)Queue::remove(name);
    const auto t0 = Clock::now();
    Queue q = make(name, o);
    best = std::min(best, us_since(t0));
  }
  (void)Queue::remove(name);
  std::printf("create   jobs %u, processes %u: best of 5 %.0f us\n", o.jobs, o.processes, best);
}

void measure_passes(QueueOptions o) {
  const std::string name = seg_name("passes");
  Queue q = make(name, o);
  for (std::uint32_t i = 0; i < std::min<std::uint32_t>(o.jobs / 2, 512); ++i)
    (void)q.enqueue(BrandedId::make("GRP", 1 + i % 64), q.mint(), "payload");
  double first = 0, sum = 0, worst = 0;
  constexpr int kPasses = 50;
  for (int i = 0; i < kPasses; ++i) {
    q.advance_clock(60'000);
    const auto t0 = Clock::now();
    (void)q.tick();
    const double us = us_since(t0);
    if (i == 0) first = us;
    sum += us;
    worst = std::max(worst, us);
  }
  (void)Queue::remove(name);
  std::printf("passes   jobs %u, processes %u: first %.1f us, mean %.1f us, worst %.1f us of %d ticks\n", o.jobs,
              o.processes, first, sum / kPasses, worst, kPasses);
}

void measure_claims(QueueOptions o, std::uint32_t handles) {
  const std::string name = seg_name("claims");
  o.processes = std::max(o.processes, handles + 1);
  Queue q = make(name, o);
  std::vector<Queue> others;
  for (std::uint32_t i = 0; i < handles; ++i) {
    auto r = Queue::open(name);
    if (!r) {
      std::fprintf(stderr, "fairlane_sweep_costs: open %u: %s\n", i, r.error().message.c_str());
      std::exit(1);
    }
    others.push_back(std::move(r).value());
  }
  std::vector<double> t;
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < 64; ++i) (void)q.enqueue(BrandedId::make("GRP", 1 + i % 64), q.mint(), "payload");
    q.advance_clock(o.recovery_ms);
    for (int i = 0; i < 64; ++i) {
      Lease l;
      const auto t0 = Clock::now();
      const bool got = q.claim(l, 60'000);
      t.push_back(us_since(t0));
      if (got) (void)q.complete(l.id, l.token);
    }
  }
  others.clear();
  (void)Queue::remove(name);
  std::sort(t.begin(), t.end());
  std::printf("claims   jobs %u, %u other handles attached: %zu claims, median %.2f us, p99 %.1f us, slowest %.1f us\n",
              o.jobs, handles, t.size(), t[t.size() / 2], t[t.size() * 99 / 100], t.back());
}

}  // namespace

int main(int argc, char** argv) {
  QueueOptions o;
  o.jobs = 65536;
  o.lanes = 64;
  o.payload_bytes = 64;
  o.recovery_ms = 500;
  std::uint32_t handles = 255;
  for (int i = 1; i < argc; ++i) {
    auto arg = [&](const char* flag) { return std::strcmp(argv[i], flag) == 0 && i + 1 < argc; };
    if (arg("--jobs")) o.jobs = std::uint32_t(std::strtoul(argv[++i], nullptr, 10));
    else if (arg("--processes")) o.processes = std::uint32_t(std::strtoul(argv[++i], nullptr, 10));
    else if (arg("--handles")) handles = std::uint32_t(std::strtoul(argv[++i], nullptr, 10));
    else {
      std::fprintf(stderr, "usage: fairlane_sweep_costs [--jobs N] [--processes N] [--handles N]\n");
      return 2;
    }
  }
  measure_create(o);
  measure_passes(o);
  measure_claims(o, handles);
  return 0;
}
