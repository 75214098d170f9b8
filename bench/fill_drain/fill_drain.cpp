// fairlane_fill_drain: one thread fills a large queue, then drains it, round
// after round, and prints both rates. A measurement of what a large segment
// costs a single caller when its lines are out of cache (the index buckets,
// slot words and records of a 262,144-job queue are tens of MiB): the fill
// is mint + enqueue, the drain claim + complete, each timed alone.
//
//   fairlane_fill_drain [--rounds N] [--jobs N] [--queue-jobs N] [--tenants N]
//
// Defaults: 8 rounds of 100,000 jobs into a 262,144-job queue over 100
// tenants (Zipf 1.0, as fairlane-bench's default), 64-byte payloads. Rates
// are per round; compare builds by running them interleaved on one machine.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "fairlane/queue.hpp"
#include "../scratch_queue.hpp"

namespace {

struct Args {
  int rounds = 8;
  std::uint32_t jobs = 100000;
  std::uint32_t queue_jobs = 262144;
  std::uint32_t tenants = 100;
};

[[noreturn]] void usage() {
  std::fprintf(stderr, "usage: fairlane_fill_drain [--rounds N] [--jobs N] [--queue-jobs N] [--tenants N]\n");
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string_view s = argv[i];
    if (i + 1 >= argc) usage();
    char* end = nullptr;
    const unsigned long long v = std::strtoull(argv[++i], &end, 10);
    if (!end || *end || v == 0 || v > (1ULL << 26)) usage();
    if (s == "--rounds") a.rounds = int(v);
    else if (s == "--jobs") a.jobs = std::uint32_t(v);
    else if (s == "--queue-jobs") a.queue_jobs = std::uint32_t(v);
    else if (s == "--tenants") a.tenants = std::uint32_t(v);
    else usage();
  }
  if (a.jobs > a.queue_jobs || a.tenants > 100000) usage();
  return a;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  fairlane::QueueOptions o;
  o.jobs = a.queue_jobs;
  o.lanes = a.tenants + 1;
  o.payload_bytes = 64;
  auto scratch = fairlane::bench::ScratchQueue::create("fairlane_fill_drain", o);
  if (!scratch) return 1;
  fairlane::Queue& q = scratch->queue();

  std::vector<fairlane::BrandedId> groups(a.tenants);
  std::vector<double> weight(a.tenants);
  for (std::uint32_t i = 0; i < a.tenants; ++i) {
    groups[i] = fairlane::BrandedId::make("TEN", i + 1);
    weight[i] = 1.0 / (i + 1);
  }
  std::mt19937 rng(1);
  std::discrete_distribution<std::uint32_t> zipf(weight.begin(), weight.end());
  std::vector<std::uint32_t> order(a.jobs);
  const std::string payload(64, 'p');
  fairlane::Lease lease;
  lease.payload.reserve(64);

  std::printf("round  fill (mint+enqueue)  drain (claim+complete)\n");
  for (int r = 0; r < a.rounds; ++r) {
    for (auto& t : order) t = zipf(rng);
    auto t0 = std::chrono::steady_clock::now();
    for (std::uint32_t i = 0; i < a.jobs; ++i) {
      const auto st = q.enqueue(groups[order[i]], q.mint(), payload);
      if (st != fairlane::EnqueueStatus::enqueued) {
        std::fprintf(stderr, "fairlane_fill_drain: enqueue refused: %s\n", std::string(fairlane::to_string(st)).c_str());
        return 1;
      }
    }
    const double fill = a.jobs / seconds_since(t0);
    t0 = std::chrono::steady_clock::now();
    std::uint64_t n = 0;
    while (q.claim(lease, 60000)) {
      if (q.complete(lease.id, lease.token) != fairlane::AckStatus::ok) {
        std::fprintf(stderr, "fairlane_fill_drain: complete refused\n");
        return 1;
      }
      ++n;
    }
    const double drain = double(n) / seconds_since(t0);
    if (n != a.jobs) {
      std::fprintf(stderr, "fairlane_fill_drain: drained %llu of %u\n", static_cast<unsigned long long>(n), a.jobs);
      return 1;
    }
    std::printf("%5d  %12.2f M/s  %15.2f M/s\n", r, fill / 1e6, drain / 1e6);
  }
  return 0;
}
