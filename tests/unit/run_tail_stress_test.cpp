// Stress of the lazy run tail and of a completion's own step: many
// appenders and claimers on ONE lane, a small table (slots
// and run nodes reused all the time, runs that keep running empty so claims
// seal the last node while appends walk), depth() read concurrently.
// Checks: every enqueue is enqueued (no corrupt), each job completed exactly
// once, per-producer id order with a single consumer, no corruption counted,
// fsck clean, depth 0 at the end.
#include "segment_damage.hpp"

#include <atomic>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace fairlane {
namespace {

using test::SegmentFixture;

const BrandedId G = BrandedId::make("GRP", 77);

class RunTailStress : public SegmentFixture {
 protected:
  void run(std::uint32_t producers, std::uint32_t consumers, std::uint32_t per_producer, bool check_order, std::uint32_t jobs = 64) {
    QueueOptions o;
    o.jobs = jobs;
    o.lanes = 8;
    o.payload_bytes = 16;
    create(o);
    if (HasFailure()) return;
    Queue& q = this->q();
    const std::uint32_t total = producers * per_producer;
    std::vector<BrandedId> ids(total);
    std::mutex mu;
    std::map<std::string, std::uint32_t> index;  // id text -> job index
    auto completes = std::make_unique<std::atomic<std::uint32_t>[]>(total);
    for (std::uint32_t i = 0; i < total; ++i) completes[i] = 0;
    std::atomic<std::uint32_t> done{0}, bad{0};
    std::string first_bad;
    auto report = [&](std::string s) {
      if (bad.fetch_add(1) == 0) {
        std::lock_guard<std::mutex> g(mu);
        first_bad = std::move(s);
      }
    };
    std::atomic<bool> stop{false};
    // For the order check (one consumer): last index served per producer.
    std::vector<std::int64_t> last_served(producers, -1);
    std::vector<std::thread> th;
    for (std::uint32_t p = 0; p < producers; ++p)
      th.emplace_back([&, p] {
        for (std::uint32_t i = 0; i < per_producer && !stop; ++i) {
          const std::uint32_t idx = p * per_producer + i;
          const BrandedId id = q.mint();
          {
            std::lock_guard<std::mutex> g(mu);
            ids[idx] = id;
            index[std::string(id.str())] = idx;
          }
          for (;;) {
            const EnqueueStatus st = q.enqueue(G, id, "x");
            if (st == EnqueueStatus::enqueued) break;
            if (st != EnqueueStatus::full) {
              report("enqueue " + std::to_string(idx) + ": " + std::string(to_string(st)));
              return;
            }
            if (stop) return;
            std::this_thread::yield();
          }
        }
      });
    for (std::uint32_t c = 0; c < consumers; ++c)
      th.emplace_back([&] {
        Lease l;
        while (done.load() < total && !stop) {
          if (!q.claim(l, 600000)) {
            std::this_thread::yield();
            continue;
          }
          std::uint32_t idx;
          {
            std::lock_guard<std::mutex> g(mu);
            auto it = index.find(std::string(l.id.str()));
            if (it == index.end()) {
              report("unknown id " + std::string(l.id.str()));
              continue;
            }
            idx = it->second;
          }
          if (check_order) {
            const std::uint32_t p = idx / per_producer;
            const std::int64_t i = idx % per_producer;
            if (i <= last_served[p]) report("order: producer " + std::to_string(p) + " job " + std::to_string(i) +
                                            " after " + std::to_string(last_served[p]));
            last_served[p] = i;
          }
          const AckStatus a = q.complete(l.id, l.token);
          if (a != AckStatus::ok) report("complete " + std::to_string(idx) + ": " + std::string(to_string(a)));
          completes[idx].fetch_add(1);
          done.fetch_add(1);
        }
      });
    th.emplace_back([&] {  // depth reader
      while (done.load() < total && !stop) {
        const std::uint64_t d = q.depth(G);
        if (d > 64) report("depth " + std::to_string(d) + " above the table");
        std::this_thread::yield();
      }
    });
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (done.load() < total && bad.load() == 0 && std::chrono::steady_clock::now() < give_up)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    stop = true;
    for (auto& t : th) t.join();
    EXPECT_EQ(bad.load(), 0u) << first_bad;
    EXPECT_EQ(done.load(), total);
    for (std::uint32_t i = 0; i < total; ++i) EXPECT_EQ(completes[i].load(), 1u) << "job " << i;
    EXPECT_EQ(q.corruption().count, 0u) << q.corruption().last_structure;
    EXPECT_EQ(q.depth(G), 0u);
    const FsckReport r = q.fsck();
    EXPECT_TRUE(r.clean()) << test::show(r);
  }
};

TEST_F(RunTailStress, ManyAppendersManyClaimersOneLane) { run(4, 3, 20000, false); }
TEST_F(RunTailStress, ManyAppendersOneClaimerKeepsEachProducersOrder) { run(3, 1, 20000, true); }
TEST_F(RunTailStress, OneAppenderManyClaimers) { run(1, 4, 40000, false); }
TEST_F(RunTailStress, TinyTableHeavyContention) { run(2, 8, 30000, false, 16); }

}  // namespace
}  // namespace fairlane
