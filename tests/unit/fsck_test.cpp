// fsck: a segment used in every way checks clean; each kind of damage done
// to its shared memory behind the library's back is reported by name.
#include "queue_fixture.hpp"
#include "raw_segment.hpp"

namespace fairlane {
namespace {

using test::QueueTest;

const BrandedId A = BrandedId::make("AAA", 1);
const BrandedId B = BrandedId::make("BBB", 1);

bool has(const FsckReport& r, std::string_view invariant) {
  for (const auto& i : r.issues)
    if (i.invariant == invariant) return true;
  return false;
}

std::string names(const FsckReport& r) {
  std::string s;
  for (const auto& i : r.issues) s += i.invariant + ": " + i.detail + "\n";
  return s;
}

using test::RawSegment;

class FsckTest : public QueueTest {
 protected:
  // Pending, leased, scheduled, dead, paused, limited, weighted, re-queued.
  void use_in_every_way() {
    for (int i = 0; i < 20; ++i) {
      ASSERT_EQ(q().enqueue(i % 2 ? A : B, q().mint(), "x"), EnqueueStatus::enqueued);
    }
    ASSERT_EQ(q().enqueue(A, BrandedId::make("JOB", 5), "old"), EnqueueStatus::enqueued);  // out of mint order
    ASSERT_EQ(q().enqueue(B, q().mint(), "later", {.delay_ms = 5000}), EnqueueStatus::enqueued);
    ASSERT_EQ(q().set_limit(A, 3), LaneStatus::ok);
    ASSERT_EQ(q().set_weight(B, 2), LaneStatus::ok);
    Lease l;
    for (int i = 0; i < 6; ++i) {
      ASSERT_TRUE(q().claim(l, 1000));
      if (i % 3 == 0) q().complete(l.id, l.token);
      if (i % 3 == 1) q().fail(l.id, l.token, {.delay_ms = 0, .max_attempts = 1, .error = "boom"});
    }
    ASSERT_EQ(q().pause(B), LaneStatus::ok);
  }
  std::string name() { return q().name(); }
};

TEST_F(FsckTest, SegmentUsedInEveryWayIsClean) {
  use_in_every_way();
  FsckReport r = q().fsck();
  EXPECT_TRUE(r.clean()) << names(r);
  EXPECT_EQ(r.slots, 256U);
  EXPECT_GE(r.lanes, 2U);
  q().advance_clock(10'000);  // leases expire, the delayed job falls due
  EXPECT_GT(q().tick(), 0U);
  r = q().fsck();
  EXPECT_TRUE(r.clean()) << names(r);
}

TEST_F(FsckTest, ReportsAnInvalidSlotState) {
  use_in_every_way();
  RawSegment raw(name());
  raw.slot_word(0).store(raw.slot_word(0).load() | 7);  // state 7 does not exist
  EXPECT_TRUE(has(q().fsck(), "slot-state")) << names(q().fsck());
}

TEST_F(FsckTest, ReportsALanePendingCountThatDisagreesWithTheSlots) {
  use_in_every_way();
  RawSegment raw(name());
  for (std::uint32_t i = 0; i < raw.header().lane_buckets; ++i) {
    auto& w = raw.lane(i).word;
    if (detail::LaneWord::pending(w.load()) > 0) {
      w.store(detail::LaneWord::with_pending(w.load(), detail::LaneWord::pending(w.load()) + 1));
      break;
    }
  }
  const FsckReport r = q().fsck();
  EXPECT_TRUE(has(r, "lane-pending-count")) << names(r);
}

TEST_F(FsckTest, ReportsALiveJobMissingFromTheIdIndex) {
  use_in_every_way();
  RawSegment raw(name());
  bool cleared = false;
  for (std::uint64_t b = 0; b < raw.header().index_buckets && !cleared; ++b)
    for (auto& e : raw.bucket(b).e)
      if (e.load() != 0) {
        e.store(0);
        cleared = true;
        break;
      }
  ASSERT_TRUE(cleared);
  const FsckReport r = q().fsck();
  EXPECT_TRUE(has(r, "index-missing")) << names(r);
}

TEST_F(FsckTest, ReportsALostWakeUp) {
  ASSERT_EQ(q().enqueue(A, q().mint(), "x"), EnqueueStatus::enqueued);
  RawSegment raw(name());
  // Clear the ringed bit of the serviceable lane: it would never be served.
  for (std::uint32_t i = 0; i < raw.header().lane_buckets; ++i) {
    auto& w = raw.lane(i).word;
    if (w.load() & detail::LaneWord::kRinged) w.store(w.load() & ~detail::LaneWord::kRinged);
  }
  const FsckReport r = q().fsck();
  EXPECT_TRUE(has(r, "ring-lost-wakeup")) << names(r);
  EXPECT_TRUE(has(r, "ring-membership")) << names(r);  // and its token now belongs to no one
}

}  // namespace
}  // namespace fairlane
