// Invariant 9: nothing degrades with use. After a hundred times the job
// capacity of enqueue/claim/complete cycles (with retries, expired leases,
// drains and duplicates mixed in), the queue still takes its full capacity.
#include <fairlane/detail/layout.hpp>

#include "queue_fixture.hpp"

namespace fairlane {
namespace {

using test::group;
using test::QueueTest;

constexpr std::uint32_t kJobs = 64;

TEST_F(QueueTest, FullCapacityAfterHundredfoldUse) {
  QueueOptions o = small_options();
  o.jobs = kJobs;
  o.lanes = 8;
  make_queue(o);
  const BrandedId lanes[4] = {group("AAA"), group("BBB"), group("CCC"), group("DDD")};

  std::uint64_t admitted = 0, completed = 0;
  Lease l;
  std::vector<Lease> batch(5);
  for (int round = 0; round < 100; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    // Fill to the brim with fresh ids.
    for (std::uint32_t i = 0; i < kJobs; ++i) {
      const BrandedId id = q().mint();
      ASSERT_EQ(q().enqueue(lanes[i % 4], id, std::string("r").append(std::to_string(round))), EnqueueStatus::enqueued) << "job " << i;
      ++admitted;
      if (i == 0) { ASSERT_EQ(q().enqueue(lanes[1], id, "dup"), EnqueueStatus::duplicate); }
    }
    ASSERT_EQ(q().enqueue(lanes[0], q().mint(), "over"), EnqueueStatus::full);

    // Every few rounds, drain one lane instead of serving it.
    std::uint64_t drained = 0;
    if (round % 10 == 3) {
      drained = q().drain(lanes[round % 4]);
      ASSERT_EQ(drained, kJobs / 4);
    }

    // Serve everything; vary how.
    std::uint64_t served = 0;
    while (served + drained < kJobs) {
      const int how = static_cast<int>((served + round) % 7);
      if (how == 0) {
        const std::size_t n = q().claim_batch(batch, 60000);
        ASSERT_GT(n, 0U);
        for (std::size_t k = 0; k < n; ++k) ASSERT_EQ(q().complete(batch[k].id, batch[k].token), AckStatus::ok);
        served += n;
        completed += n;
        continue;
      }
      ASSERT_TRUE(q().claim(l, 60000)) << "served " << served << " drained " << drained;
      if (how == 1) {
        // Retry once at once, then complete.
        ASSERT_EQ(q().fail(l.id, l.token, FailOptions{0, 3, "retry"}), FailStatus::retrying);
        Lease r;
        bool found = false;
        // The retry is due now; it comes back within one ring cycle.
        for (int k = 0; k < 8 && !found; ++k) {
          ASSERT_TRUE(q().claim(r, 60000));
          if (r.id == l.id) {
            found = true;
            ASSERT_EQ(r.attempt, 2U);
          }
          ASSERT_EQ(q().complete(r.id, r.token), AckStatus::ok);
          ++served;
          ++completed;
        }
        ASSERT_TRUE(found);
      } else if (how == 2) {
        // Let the lease expire, then serve it again.
        ASSERT_EQ(q().extend(l.id, l.token, 10), AckStatus::ok);
        q().advance_clock(20);
        ASSERT_GE(q().tick(), 1U);
        ASSERT_EQ(q().complete(l.id, l.token), AckStatus::stale);
        Lease r;
        bool found = false;
        for (int k = 0; k < 8 && !found; ++k) {
          ASSERT_TRUE(q().claim(r, 60000));
          if (r.id == l.id) found = true;
          ASSERT_EQ(q().complete(r.id, r.token), AckStatus::ok);
          ++served;
          ++completed;
        }
        ASSERT_TRUE(found);
      } else {
        ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
        ++served;
        ++completed;
      }
    }
    ASSERT_FALSE(q().claim(l, 1000));
    const Snapshot s = q().snapshot();
    ASSERT_EQ(s.pending, 0U);
    ASSERT_EQ(s.leased, 0U);
    ASSERT_EQ(s.scheduled, 0U);
    ASSERT_EQ(s.dead, 0U);
    ASSERT_TRUE(s.ring.empty());
    for (const auto& li : s.lanes) {
      ASSERT_EQ(li.active, 0U) << li.group.str();
      ASSERT_EQ(li.depth, 0U) << li.group.str();
    }
  }
  EXPECT_GE(admitted, 100U * kJobs);

  // Full capacity is still there, in one lane and across lanes.
  for (std::uint32_t i = 0; i < kJobs; ++i)
    ASSERT_EQ(q().enqueue(lanes[0], q().mint(), "final"), EnqueueStatus::enqueued) << "job " << i;
  EXPECT_EQ(q().enqueue(lanes[1], q().mint(), "final"), EnqueueStatus::full);
  EXPECT_EQ(q().depth(lanes[0]), kJobs);
  const Snapshot s = q().snapshot();
  EXPECT_EQ(s.pending, kJobs);
  EXPECT_EQ(s.counters.enqueued, admitted + kJobs);
  EXPECT_EQ(s.counters.completed, completed);
  EXPECT_LE(s.lanes.size(), 5U) << "lanes leaked";
  // And it still serves them all, in id order.
  BrandedId prev;
  for (std::uint32_t i = 0; i < kJobs; ++i) {
    ASSERT_TRUE(q().claim(l, 1000)) << i;
    if (prev.valid()) { ASSERT_LT(prev, l.id); }
    prev = l.id;
    ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  }
}

// A queue of N jobs takes N jobs: `full` means every slot is in use, not
// that the id index ran out of room first. Two sizes: 114,688 jobs, which
// was the worst case while the bucket count was a power of two (rounded up
// the least: most entries per bucket), and 100,000, whose bucket count
// (114,286) is not a power of two, so that the multiply-and-shift mapping
// is what is filled. Every size now has 7/8 of a job a bucket. With four
// entries a slot, 5 fills of the first in 100 stopped short of the last
// slot; with eight, none of 2,300 did (docs/design.md, "The id index's
// size"). Each fill has fresh ids and a fresh segment (a fresh hash seed).
TEST(Capacity, AQueueFilledToTheLastSlotTakesEveryJob) {
  // jobs x entries per slot / ways a bucket = 2^17 buckets exactly (114,688
  // jobs at eight entries a slot).
  constexpr std::uint32_t kPow2Jobs = (1U << 17) * detail::kIndexWays / detail::kIndexEntriesPerSlot;
  constexpr int kFills = 20;  // of each size
  const BrandedId lanes[4] = {group("LNA"), group("LNB"), group("LNC"), group("LND")};
  for (const std::uint32_t jobs : {kPow2Jobs, 100'000U}) {
    SCOPED_TRACE("jobs " + std::to_string(jobs));
    int short_fills = 0;
    std::string first;
    for (int fill = 0; fill < kFills; ++fill) {
      test::SegmentGuard guard(test::unique_segment_name("fill"));
      QueueOptions o;
      o.jobs = jobs;
      o.lanes = 8;
      o.payload_bytes = 8;
      auto q = Queue::create(guard.name(), o);
      ASSERT_TRUE(q.ok()) << q.error().message;
      std::uint32_t taken = 0;
      EnqueueStatus st = EnqueueStatus::enqueued;
      for (; taken < jobs; ++taken) {
        st = q->enqueue(lanes[taken % 4], q->mint(), "x");
        if (st != EnqueueStatus::enqueued) break;
      }
      if (taken < jobs) {
        if (short_fills++ == 0)
          first = "fill " + std::to_string(fill) + " said " + std::string(to_string(st)) + " after " + std::to_string(taken) + " jobs";
        continue;
      }
      EXPECT_EQ(q->enqueue(lanes[0], q->mint(), "x"), EnqueueStatus::full) << "a job past the last slot";
    }
    EXPECT_EQ(short_fills, 0) << "fills of " << jobs << " jobs that stopped short: " << short_fills << " of " << kFills
                              << "; the first: " << first;
  }
}

TEST_F(QueueTest, DeadJobsHoldSlotsUntilCapacity) {
  // Dead-lettered jobs keep their slot (they still exist); the queue reports
  // full rather than losing them.
  QueueOptions o = small_options();
  o.jobs = 8;
  make_queue(o);
  const BrandedId g = group("AAA");
  for (int i = 0; i < 8; ++i) {
    ASSERT_EQ(q().enqueue(g, q().mint(), "x"), EnqueueStatus::enqueued);
    Lease l;
    ASSERT_TRUE(q().claim(l, 1000));
    ASSERT_EQ(q().fail(l.id, l.token, FailOptions{0, 1, "dead"}), FailStatus::dead);
  }
  EXPECT_EQ(q().snapshot().dead, 8U);
  EXPECT_EQ(q().enqueue(g, q().mint(), "x"), EnqueueStatus::full);
}

}  // namespace
}  // namespace fairlane
