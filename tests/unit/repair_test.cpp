// repair: each kind of damage fsck names is undone from the job slots; fsck
// is clean afterwards and the queue still delivers every job that was
// pending (and takes new ones). Damage is done through a raw mapping, as in
// fsck_test.cpp.
#include "queue_fixture.hpp"
#include "raw_segment.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <set>

namespace fairlane {
namespace {

using detail::LaneWord;
using detail::SlotState;
using detail::SlotWord;
using test::QueueTest;
using test::RawSegment;

const BrandedId A = BrandedId::make("AAA", 1);
const BrandedId B = BrandedId::make("BBB", 1);
const BrandedId C = BrandedId::make("CCC", 1);

bool has(const FsckReport& r, std::string_view invariant) {
  for (const auto& i : r.issues)
    if (i.invariant == invariant) return true;
  return false;
}

std::string show(const FsckReport& r) {
  std::string s;
  for (const auto& i : r.issues) s += i.invariant + ": " + i.detail + "\n";
  for (const auto& line : r.repairs) s += "repair: " + line + "\n";
  return s;
}

class RepairTest : public QueueTest {
 protected:
  // Three lanes of pending jobs, two leased, one scheduled, one dead.
  void populate() {
    for (int i = 0; i < 12; ++i) ASSERT_EQ(q().enqueue(i % 3 == 0 ? A : i % 3 == 1 ? B : C, q().mint(), "x"), EnqueueStatus::enqueued);
    ASSERT_EQ(q().enqueue(B, BrandedId::make("JOB", 7), "old"), EnqueueStatus::enqueued);  // out of mint order
    ASSERT_EQ(q().enqueue(C, q().mint(), "later", {.delay_ms = 600'000}), EnqueueStatus::enqueued);
    Lease l;
    for (int i = 0; i < 3; ++i) {
      ASSERT_TRUE(q().claim(l, 600'000));
      leased_.insert(l.id);
    }
    ASSERT_EQ(q().fail(l.id, l.token, {.delay_ms = 0, .max_attempts = 1, .error = "boom"}), FailStatus::dead);
    leased_.erase(l.id);
    ASSERT_TRUE(q().fsck().clean()) << show(q().fsck());
  }

  std::set<BrandedId> pending_ids() {
    std::set<BrandedId> ids;
    JobFilter f;
    f.state = JobState::pending;
    for (const JobInfo& j : q().jobs(f)) ids.insert(j.id);
    return ids;
  }

  // repair() found what fsck names, and left a clean segment.
  FsckReport repair_and_check(std::string_view expect_invariant) {
    const FsckReport before = q().fsck();
    EXPECT_TRUE(has(before, expect_invariant)) << show(before);
    auto r = q().repair();
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message);
    if (!r.ok()) return {};
    EXPECT_FALSE(r.value().clean());
    EXPECT_TRUE(has(r.value(), expect_invariant)) << show(r.value());
    EXPECT_FALSE(r.value().repairs.empty());
    const FsckReport after = q().fsck();
    EXPECT_TRUE(after.clean()) << "after repair:\n" << show(after) << "repair said:\n" << show(r.value());
    return r.value();
  }

  // Claims until nothing is left; every job expected comes once, nothing else.
  void expect_delivers(const std::set<BrandedId>& expected) {
    std::set<BrandedId> got;
    Lease l;
    while (q().claim(l, 600'000)) {
      EXPECT_TRUE(expected.count(l.id)) << "unexpected job " << l.id.str();
      EXPECT_TRUE(got.insert(l.id).second) << "delivered twice: " << l.id.str();
      EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
      if (got.size() > expected.size() + 5) break;
    }
    EXPECT_EQ(got, expected);
    // And it still takes new work.
    const BrandedId fresh = q().mint();
    ASSERT_EQ(q().enqueue(A, fresh, "new"), EnqueueStatus::enqueued);
    ASSERT_TRUE(q().claim(l, 1000));
    EXPECT_EQ(l.id, fresh);
    EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
    for (const BrandedId& id : leased_) {
      const auto j = q().job(id);
      ASSERT_TRUE(j.has_value()) << id.str();
      EXPECT_EQ(j->state, JobState::leased);
      EXPECT_EQ(q().complete(id, j->token), AckStatus::ok) << "a lease held across the repair was lost";
    }
    const FsckReport f = q().fsck();
    EXPECT_TRUE(f.clean()) << show(f);
  }

  std::set<BrandedId> leased_;
};

TEST_F(RepairTest, ACleanSegmentIsLeftAlone) {
  populate();
  auto r = q().repair();
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_TRUE(r.value().clean());
  EXPECT_TRUE(r.value().repairs.empty());
  expect_delivers(pending_ids());
}

TEST_F(RepairTest, WrongLaneCountsAndABusyBit) {
  populate();
  const auto expected = pending_ids();
  {
    RawSegment raw(q().name());
    const std::uint32_t a = raw.find_lane([](std::uint64_t w) { return LaneWord::pending(w) > 0; });
    ASSERT_NE(a, ~0U);
    auto& w = raw.lane(a).word;
    w.store(LaneWord::with_active(LaneWord::with_pending(w.load(), LaneWord::pending(w.load()) + 2), 7));
    for (std::uint32_t i = 0; i < raw.header().lane_buckets; ++i)
      if (i != a && raw.lane(i).key_a.load() != 0 && LaneWord::pending(raw.lane(i).word.load()) > 0) {
        raw.lane(i).word.fetch_or(LaneWord::kBusy);  // a server that died holding the structure
        break;
      }
  }
  const FsckReport r = repair_and_check("lane-pending-count");
  EXPECT_TRUE(has(r, "lane-active-count")) << show(r);
  EXPECT_TRUE(has(r, "lane-busy")) << show(r);
  expect_delivers(expected);
}

TEST_F(RepairTest, ALostRingToken) {
  // A serviceable lane off the ring: its token was taken (by a claimer that
  // was then killed) and its ringed bit is clear. Nobody would serve it.
  populate();
  const auto expected = pending_ids();
  {
    RawSegment raw(q().name());
    auto& h = raw.header();
    const std::uint64_t head = h.ring_head.load();
    ASSERT_LT(head, h.ring_tail.load());
    const std::uint64_t cell = raw.ring_cell(head).load();
    const std::uint32_t lane = std::uint32_t(detail::RingCell::value(cell) - 1);
    raw.ring_cell(head).store(detail::RingCell::pack(head + h.ring_cells, 0));  // popped
    h.ring_head.store(head + 1);
    raw.lane(lane).word.fetch_and(~LaneWord::kRinged);
  }
  repair_and_check("ring-lost-wakeup");
  expect_delivers(expected);
}

TEST_F(RepairTest, ATokenInTheHoldSlotOfALaneThatSaysUnringed) {
  populate();
  const auto expected = pending_ids();
  {
    RawSegment raw(q().name());
    const std::uint32_t lane = raw.find_lane([](std::uint64_t w) { return LaneWord::serviceable(w); });
    ASSERT_NE(lane, ~0U);
    raw.header().hold.store((3ULL << 32) | (lane + 1));  // a second token
  }
  repair_and_check("ring-duplicate-token");
  expect_delivers(expected);
}

TEST_F(RepairTest, ASlotStuckAdmittingWithItsIdCommittedIsAdmitted) {
  // An enqueuer killed between committing the id and publishing the job: the
  // slot says admitting, its id is in the index (a retry of that enqueue is
  // told `duplicate`), and it sits in its lane's structure. Since a retry was
  // told it is queued, repair must admit it, not free it.
  populate();
  const auto expected = pending_ids();
  BrandedId stuck;
  {
    RawSegment raw(q().name());
    const std::uint32_t slot = raw.find_slot(SlotState::pending);
    ASSERT_NE(slot, ~0U);
    const std::uint64_t w = raw.slot_word(slot).load();
    raw.slot_word(slot).store(SlotWord::pack(SlotState::admitting, SlotWord::gen(w), 0, 0));
    stuck = BrandedId::make("JOB", raw.slot(slot).snowflake.load());
  }
  ASSERT_TRUE(expected.count(stuck));
  ASSERT_EQ(q().enqueue(A, stuck, "again"), EnqueueStatus::duplicate);
  const FsckReport r = repair_and_check("slot-transitional");
  bool said = false;
  for (const auto& line : r.repairs) said = said || line.find("admitted as pending") != std::string::npos;
  EXPECT_TRUE(said) << show(r);
  EXPECT_EQ(q().enqueue(A, stuck, "again"), EnqueueStatus::duplicate) << "the admitted job lost its index entry";
  expect_delivers(expected);
}

TEST_F(RepairTest, ALeakedFreeSlot) {
  populate();
  const auto expected = pending_ids();
  const std::uint64_t live = expected.size() + leased_.size() + 2;  // + scheduled + dead
  {
    RawSegment raw(q().name());
    auto& head = raw.header().free_head;
    const std::uint64_t h = head.load();
    const std::uint32_t top = std::uint32_t(h);
    ASSERT_NE(top, 0U);
    head.store((((h >> 32) + 1) << 32) | raw.slot(top - 1).next.load());  // the top slot falls off the list
  }
  repair_and_check("free-list-leak");
  // Every slot can be used again: exactly jobs - live admissions fit.
  std::uint64_t admitted = 0;
  for (;;) {
    const EnqueueStatus st = q().enqueue(C, q().mint(), "fill");
    if (st == EnqueueStatus::full) break;
    ASSERT_EQ(st, EnqueueStatus::enqueued);
    ++admitted;
  }
  EXPECT_EQ(admitted, q().config().jobs - live);
  EXPECT_TRUE(q().fsck().clean()) << show(q().fsck());
}

TEST_F(RepairTest, AStaleIndexEntry) {
  // A completed job whose index entry came back: its id reads as a live
  // duplicate, so it could never be enqueued again.
  populate();
  Lease l;
  ASSERT_TRUE(q().claim(l, 1000));
  const BrandedId done = l.id;
  std::uint64_t saved = 0;
  std::uint64_t bucket = 0;
  int way = -1;
  {
    RawSegment raw(q().name());
    const std::uint32_t slot = [&] {
      for (std::uint32_t i = 0; i < raw.header().job_capacity; ++i)
        if (raw.slot(i).snowflake.load() == done.snowflake() && SlotWord::state(raw.slot_word(i).load()) == SlotState::leased)
          return i;
      return ~0U;
    }();
    ASSERT_NE(slot, ~0U);
    for (std::uint64_t b = 0; b < raw.header().index_buckets && way < 0; ++b)
      for (int k = 0; k < int(detail::kIndexWays); ++k)
        if (const std::uint64_t e = raw.bucket(b).e[k].load(); e && detail::IndexEntry::slot(e) == slot) {
          saved = e;
          bucket = b;
          way = k;
          break;
        }
    ASSERT_GE(way, 0);
  }
  ASSERT_EQ(q().complete(done, l.token), AckStatus::ok);
  const auto expected = pending_ids();
  {
    RawSegment raw(q().name());
    raw.bucket(bucket).e[way].store(saved);
  }
  ASSERT_EQ(q().enqueue(A, done, "again"), EnqueueStatus::duplicate);
  repair_and_check("index-stale");
  expect_delivers(expected);
  EXPECT_EQ(q().enqueue(A, done, "again"), EnqueueStatus::enqueued);
}

TEST_F(RepairTest, TwoSlotsWithOneIdKeepTheIndexedOne) {
  populate();
  auto expected = pending_ids();
  BrandedId lost;
  {
    RawSegment raw(q().name());
    std::vector<std::uint32_t> pend;
    for (std::uint32_t i = 0; i < raw.header().job_capacity && pend.size() < 2; ++i)
      if (SlotWord::state(raw.slot_word(i).load()) == SlotState::pending) pend.push_back(i);
    ASSERT_EQ(pend.size(), 2U);
    // The second slot's job is overwritten with the first one's id.
    lost = BrandedId::make("JOB", raw.slot(pend[1]).snowflake.load());
    raw.slot(pend[1]).snowflake.store(raw.slot(pend[0]).snowflake.load());
  }
  const FsckReport r = repair_and_check("duplicate-id");
  bool said = false;
  for (const auto& line : r.repairs) said = said || line.find("same id") != std::string::npos;
  EXPECT_TRUE(said) << show(r);
  expected.erase(lost);
  expect_delivers(expected);
}

TEST_F(RepairTest, ManyKindsOfDamageAtOnce) {
  populate();
  auto expected = pending_ids();
  {
    RawSegment raw(q().name());
    const std::uint32_t a = raw.find_lane([](std::uint64_t w) { return LaneWord::pending(w) > 0; });
    raw.lane(a).word.store(LaneWord::with_pending(raw.lane(a).word.load(), 0) & ~LaneWord::kRinged);
    raw.lane(a).run_head = 0;
    raw.lane(a).heap_root = 0;
    raw.header().next_due.store(~0ULL);
    raw.header().ring_tail.store(raw.header().ring_head.load());  // the whole ring lost
    raw.header().free_head.store(0);                              // and the whole free list
  }
  repair_and_check("lane-pending-count");
  expect_delivers(expected);
}

TEST_F(RepairTest, RefusesWhileAnotherProcessIsAttachedUnlessForced) {
  populate();
  const auto expected = pending_ids();
  {
    RawSegment raw(q().name());
    const std::uint32_t a = raw.find_lane([](std::uint64_t w) { return LaneWord::pending(w) > 0; });
    raw.lane(a).word.store(LaneWord::with_pending(raw.lane(a).word.load(), LaneWord::pending(raw.lane(a).word.load()) + 1));
  }
  int ready[2], hold[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(hold), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Attached and idle until the parent closes `hold`.
    ::close(hold[1]);
    ::close(ready[0]);
    auto other = Queue::open(q().name());
    char c = other.ok() ? 'y' : 'n';
    (void)!::write(ready[1], &c, 1);
    (void)!::read(hold[0], &c, 1);
    ::_exit(0);
  }
  ::close(ready[1]);
  ::close(hold[0]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ASSERT_EQ(c, 'y');

  const FsckReport before = q().fsck();
  auto refused = q().repair();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, Errc::busy);
  EXPECT_NE(refused.error().message.find(std::to_string(child)), std::string::npos) << refused.error().message;
  EXPECT_EQ(show(q().fsck()), show(before)) << "a refused repair changed something";

  auto forced = q().repair(true);
  ASSERT_TRUE(forced.ok()) << forced.error().message;
  EXPECT_TRUE(has(forced.value(), "lane-pending-count"));
  EXPECT_TRUE(q().fsck().clean()) << show(q().fsck());

  ::close(hold[1]);
  int st = 0;
  ::waitpid(child, &st, 0);
  ::close(ready[0]);
  expect_delivers(expected);
}

}  // namespace
}  // namespace fairlane
