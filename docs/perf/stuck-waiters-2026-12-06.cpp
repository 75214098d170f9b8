// Ad-hoc: the cost of a stuck `waiters` count (a parked consumer killed
// before 2026-12-06): one lane, enqueue + claim + complete, so every enqueue
// rings the lane and calls notify. waiters 0 against 1, interleaved.
#include <fairlane/queue.hpp>
#include "segment.hpp"
#include <chrono>
#include <cstdio>
using namespace fairlane;
int main() {
  (void)Queue::remove("mw_bench");
  QueueOptions o; o.jobs = 4096; o.lanes = 8; o.payload_bytes = 64;
  auto q = Queue::create("mw_bench", o);
  if (!q) return 1;
  auto& s = detail::QueueAccess::segment(*q);
  const BrandedId g = BrandedId::make("GRP", 1);
  Lease l;
  auto run = [&](std::uint32_t w, int n) {
    s.h->waiters.store(w);
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < n; ++i) {
      if (q->enqueue(g, q->mint(), "0123456789012345678901234567890123456789012345678901234567890123") != EnqueueStatus::enqueued) return -1.0;
      if (!q->claim(l, 60000)) return -2.0;
      if (q->complete(l.id, l.token) != AckStatus::ok) return -3.0;
    }
    return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / n;
  };
  run(0, 100000);
  for (int r = 0; r < 5; ++r) {
    const double a = run(0, 200000), b = run(1, 200000);
    std::printf("round %d: waiters 0: %.0f ns a cycle; waiters 1 (stuck): %.0f ns a cycle; %.2fx\n", r, a, b, b / a);
  }
  s.h->waiters.store(0);
  (void)Queue::remove("mw_bench");
}
