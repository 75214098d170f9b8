// How a new group's lane finds its record (take_record, src/lanes.cpp): one
// pass over the records from a rotating start, taking the first free
// record, or, once kFreeLook records were looked at with none free, the
// first idle lane met, given back and taken. Each pass moves the header's
// lane_cursor by one, so these tests read how many passes a creation made
// from it, not from a clock.
#include <gtest/gtest.h>

#include <cstdint>

#include "fairlane/queue.hpp"
#include "lanes.hpp"
#include "segment.hpp"
#include "stopped_call.hpp"
#include "test_support.hpp"

namespace fairlane {
namespace {

class LaneRecords : public test::SegmentFixture {
 protected:
  // `lanes` records and the longest recovery bound, so that no sweep gives
  // an idle lane back while a test runs.
  void make(std::uint32_t lanes) {
    QueueOptions o;
    o.jobs = lanes + 64;
    o.lanes = lanes;
    o.payload_bytes = 32;
    o.recovery_ms = kMaxRecoveryMs;
    create(o);
  }
  detail::Segment& s() { return detail::QueueAccess::segment(q()); }
  std::uint64_t cursor() { return s().h->lane_cursor.load(); }
  // Where the next creation's pass starts: record 1 + v % (records - 1).
  void start_at_record(std::uint32_t record) { s().h->lane_cursor.store(record - 1); }
  std::uint64_t reclaimed() { return q().snapshot().lanes_reclaimed; }
  // Group k's lane, made in the next record (creations in turn from record
  // 1 on take records 1, 2, ...), holding one pending job.
  static BrandedId group(std::uint64_t k) { return BrandedId::make("GRP", k); }
  void make_busy(std::uint64_t k) { ASSERT_EQ(q().enqueue(group(k), q().mint(), "x"), EnqueueStatus::enqueued); }
  // The same, then its job claimed and completed: the lane is idle.
  void make_idle(std::uint64_t k) {
    make_busy(k);
    Lease l;
    ASSERT_TRUE(q().claim(l, 600'000));
    ASSERT_EQ(l.group, group(k));
    ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  }
  // The record group g's lane is in (0: none).
  std::uint32_t record_of(const BrandedId& g) {
    std::uint32_t lane = 0;
    return detail::lane_find(s(), detail::group_key(g), false, lane) == detail::LaneFind::found ? lane : 0;
  }
};

// kFreeLook + 200 records: the first kFreeLook + 100 hold idle lanes, the
// rest are free. A pass that starts kFreeLook - 1 records before the first
// free one finds it at its last look and takes it, giving nothing back. One
// that starts at record 1 meets kFreeLook idle lanes and no free record: it
// gives the first back (record 1) and takes it.
TEST_F(LaneRecords, AFreeRecordWithinTheLookIsTakenAndOtherwiseTheFirstIdleLaneIsGivenBack) {
  const std::uint32_t idle = detail::kFreeLook + 100;
  make(detail::kFreeLook + 200);
  for (std::uint32_t k = 1; k <= idle; ++k) make_idle(k);
  for (std::uint32_t k = 1; k <= idle; ++k) ASSERT_EQ(record_of(group(k)), k);

  const std::uint32_t start = idle + 1 - (detail::kFreeLook - 1);
  start_at_record(start);
  ASSERT_EQ(q().enqueue(group(10'001), q().mint(), "x"), EnqueueStatus::enqueued);
  EXPECT_EQ(record_of(group(10'001)), idle + 1) << "the first free record after the start";
  EXPECT_EQ(reclaimed(), 0U);
  EXPECT_EQ(record_of(group(start)), start) << "the idle lane at the start kept";

  start_at_record(1);
  ASSERT_EQ(q().enqueue(group(10'002), q().mint(), "x"), EnqueueStatus::enqueued);
  EXPECT_EQ(record_of(group(10'002)), 1U) << "the first idle lane met, given back and taken";
  EXPECT_EQ(reclaimed(), 1U);
  EXPECT_EQ(record_of(group(1)), 0U);
  EXPECT_EQ(cursor(), 1U) << "one pass";
}

// Every record held by an idle lane: each new group's creation is one pass
// that gives back one lane, and the table stays full of lanes.
TEST_F(LaneRecords, WithEveryRecordIdleEachNewGroupGivesBackOneLaneInOnePass) {
  const std::uint32_t lanes = 2 * detail::kFreeLook;
  make(lanes);
  for (std::uint32_t k = 1; k <= lanes; ++k) make_idle(k);
  for (std::uint32_t k = 1; k <= 100; ++k) {
    const std::uint64_t before = cursor();
    ASSERT_EQ(q().enqueue(group(10'000 + k), q().mint(), "x"), EnqueueStatus::enqueued) << k;
    EXPECT_EQ(cursor() - before, 1U) << k;
    Lease l;
    ASSERT_TRUE(q().claim(l, 600'000));
    ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  }
  const Snapshot snap = q().snapshot();
  EXPECT_EQ(snap.lanes_reclaimed, 100U);
  EXPECT_EQ(snap.lanes_live, lanes);
}

// A lane that looks idle (its word empty) but cannot be given back: its
// mover stopped after linking the job into the lane's strays and before
// the lane word CAS that flags them. With every other record busy, a new
// group's creation is one pass that answers lanes_full. It made lane_count
// passes, each over every record, when any failed give-back counted as a
// race (found in review: 30 s at 100,000 lanes).
TEST_F(LaneRecords, ALaneThatLooksIdleButCannotBeGivenBackCostsOnePassNotOneARecord) {
  const std::uint32_t lanes = 300;
  make(lanes);
  const BrandedId a = BrandedId::make("AAA", 1);
  ASSERT_EQ(q().enqueue(a, q().mint(), "a"), EnqueueStatus::enqueued);
  Lease l;
  ASSERT_TRUE(q().claim(l, 600'000));
  for (std::uint32_t k = 1; k < lanes; ++k) make_busy(k);
  const std::uint32_t lane_a = record_of(a);
  ASSERT_NE(lane_a, 0U);
  test::StoppedCall<AckStatus> mover("strays.linked", [&] { return q().release(l.id, l.token); });
  ASSERT_TRUE(detail::may_be_idle(s(), lane_a, detail::lane_load(s(), lane_a))) << "the lane looks idle";
  ASSERT_FALSE(detail::lane_try_reclaim(s(), lane_a)) << "and cannot be given back";
  const std::uint64_t before = cursor();
  EXPECT_EQ(q().enqueue(BrandedId::make("CCC", 1), q().mint(), "c"), EnqueueStatus::lanes_full);
  EXPECT_LE(cursor() - before, 2U) << "passes over the records for one lanes_full";
  EXPECT_EQ(mover.go(), AckStatus::ok);
  EXPECT_EQ(record_of(a), lane_a);
}

}  // namespace
}  // namespace fairlane
