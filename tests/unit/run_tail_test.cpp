// The run's tail is a hint (src/lane_order.hpp): appends link after the
// run's last node without writing the lane word, an appender moves the tail
// up only once it lags by kTailLag links, and a claim moves it up to two
// links up in the CAS it makes anyway. What must hold whatever the lag: the
// tail is a node of the run, the run is whole and in id order, depth counts
// every job, fsck is clean, and every job is served once, oldest first.
#include "segment_damage.hpp"

#include <vector>

#include "../../src/lane_order.hpp"

namespace fairlane {
namespace {

using test::QueueTest;
using test::RawSegment;

const BrandedId G = BrandedId::make("GRP", 7);

class RunTail : public QueueTest {
 protected:
  struct Shape {
    std::uint32_t head = 0, tail = 0, last = 0;
    std::uint32_t length = 0;      // nodes from the head to the last
    std::uint32_t lag = 0;         // links from the tail to the last
    bool tail_on_run = false;
  };
  // The run of the lane holding jobs, as the segment has it now.
  Shape shape() {
    RawSegment raw(q().name());
    const std::uint32_t lane = raw.find_lane([](const detail::Word128& w) { return detail::LaneWord::head(w) != 0; });
    Shape s;
    if (lane == ~0U) return s;
    const detail::Word128 w = raw.word_value(raw.lane(lane).word);
    s.head = detail::LaneWord::head(w);
    s.tail = detail::LaneWord::tail(w);
    bool past_tail = false;
    for (std::uint32_t x1 = s.head; x1 != 0 && s.length <= 1000;
         x1 = detail::Link::succ(raw.slot(x1 - 1).next.load())) {
      ++s.length;
      if (past_tail) ++s.lag;
      if (x1 == s.tail) s.tail_on_run = past_tail = true;
      s.last = x1;
    }
    return s;
  }
};

TEST_F(RunTail, AppendsLeaveTheTailBehindByAtMostTheLagBound) {
  constexpr int kJobs = 3 * int(detail::kTailLag) + 5;
  std::uint32_t max_lag = 0, moved = 0, last_tail = 0;
  for (int i = 0; i < kJobs; ++i) {
    ASSERT_EQ(q().enqueue(G, q().mint(), "p"), EnqueueStatus::enqueued);
    const Shape s = shape();
    ASSERT_TRUE(s.tail_on_run) << "after job " << i;
    ASSERT_EQ(s.length, std::uint32_t(i + 1));
    EXPECT_LE(s.lag, detail::kTailLag) << "after job " << i;
    max_lag = std::max(max_lag, s.lag);
    if (i > 0 && s.tail != last_tail) ++moved;
    last_tail = s.tail;
    EXPECT_EQ(q().depth(G), std::uint64_t(i + 1)) << "depth counts the jobs past the tail too";
  }
  // The tail did lag (appends do not write the lane word), and was moved up
  // by the appenders that found it kTailLag links behind: once every
  // kTailLag appends after the first, not at each.
  EXPECT_EQ(max_lag, detail::kTailLag);
  EXPECT_EQ(moved, std::uint32_t(kJobs - 2) / detail::kTailLag);
  const FsckReport r = q().fsck();
  EXPECT_TRUE(r.clean()) << test::show(r);
}

TEST_F(RunTail, ClaimsMoveTheTailUpAndServeEveryJobInIdOrder) {
  const std::vector<BrandedId> ids = fill(G, int(detail::kTailLag) + 3);
  const Shape before = shape();
  ASSERT_GT(before.lag, 0U);
  Lease l;
  ASSERT_TRUE(q().claim(l, 60000));
  EXPECT_EQ(l.id, ids[0]);
  const Shape after = shape();
  ASSERT_TRUE(after.tail_on_run);
  EXPECT_EQ(after.lag, before.lag - std::min(2U, before.lag)) << "the claim's CAS moved the tail up to two links up";
  ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  for (std::size_t i = 1; i < ids.size(); ++i) {
    ASSERT_TRUE(q().claim(l, 60000));
    EXPECT_EQ(l.id, ids[i]) << "job " << i;
    ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
    const Shape s = shape();
    if (i + 1 < ids.size()) {
      ASSERT_TRUE(s.tail_on_run) << "after claim " << i;
    }
  }
  EXPECT_FALSE(q().claim(l, 60000));
  EXPECT_EQ(shape().head, 0U) << "the run is empty";
  const FsckReport r = q().fsck();
  EXPECT_TRUE(r.clean()) << test::show(r);
}

TEST_F(RunTail, AppendsInterleavedWithClaimsKeepTheRunWhole) {
  // A producer and a consumer taking turns, with bursts: the tail lags and
  // catches up over and over; nothing is lost, doubled or reordered.
  std::vector<BrandedId> sent;
  std::size_t next = 0;
  Lease l;
  for (int round = 0; round < 200; ++round) {
    const int burst = 1 + (round * 7) % 13;
    for (int k = 0; k < burst; ++k) {
      sent.push_back(q().mint());
      ASSERT_EQ(q().enqueue(G, sent.back(), "p"), EnqueueStatus::enqueued);
    }
    const int take = 1 + (round * 5) % 11;
    for (int k = 0; k < take && next < sent.size(); ++k) {
      ASSERT_TRUE(q().claim(l, 60000));
      ASSERT_EQ(l.id, sent[next]) << "round " << round;
      ++next;
      ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
    }
    const Shape s = shape();
    if (next < sent.size()) {
      ASSERT_TRUE(s.tail_on_run) << "round " << round;
      ASSERT_EQ(s.length, sent.size() - next) << "round " << round;
      ASSERT_EQ(q().depth(G), sent.size() - next) << "round " << round;
    }
  }
  while (next < sent.size()) {
    ASSERT_TRUE(q().claim(l, 60000));
    ASSERT_EQ(l.id, sent[next++]);
    ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  }
  const FsckReport r = q().fsck();
  EXPECT_TRUE(r.clean()) << test::show(r);
}

}  // namespace
}  // namespace fairlane
