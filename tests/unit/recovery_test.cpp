// Recovery of leases whose holder died: the sweep judges each lease's holder
// (its process record: pid + start time) and returns the leases of a dead
// one at once, with the same CAS as expiry, so a holder that was only slow
// is fenced off by its attempt number. recovery() reports what it did.
//
// A second Queue handle in this process is a second process record; its
// start time, rewritten through a raw mapping, makes it look dead (a pid
// whose start time differs is another process). Real deaths are in
// tests/crash.
#include "queue_fixture.hpp"
#include "raw_segment.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <iterator>
#include <string>

namespace fairlane {
namespace {

using test::QueueTest;
using test::RawSegment;

const BrandedId A = BrandedId::make("AAA", 1);

class Recovery : public QueueTest {
 protected:
  Queue second() {
    auto r = Queue::open(q().name());
    EXPECT_TRUE(r.ok());
    return std::move(r.value());
  }
  // The process record (index) holding the one leased slot.
  std::uint32_t holder_record(RawSegment& raw) {
    const std::uint32_t slot = raw.find_slot(detail::SlotState::leased);
    EXPECT_NE(slot, ~0U);
    const std::uint32_t h = raw.slot(slot).holder;
    EXPECT_GE(h, 1U);
    return h - 1;
  }
};

TEST_F(Recovery, ALiveHolderKeepsItsLease) {
  fill(A, 2);
  Queue other = second();
  Lease l;
  ASSERT_TRUE(other.claim(l, 60000));
  EXPECT_EQ(q().tick(), 0U) << "a live holder's unexpired lease was taken";
  EXPECT_EQ(q().recovery().runs, 0U);
  EXPECT_EQ(other.complete(l.id, l.token), AckStatus::ok);
}

TEST_F(Recovery, LeaseOfADeadHolderComesBackAndALateCompleteIsFenced) {
  const auto ids = fill(A, 3);
  Queue other = second();
  Lease held[2];
  ASSERT_TRUE(other.claim(held[0], 60000));
  ASSERT_TRUE(other.claim(held[1], 60000));
  RawSegment raw(q().name());
  const std::uint32_t rec = holder_record(raw);
  // Its pid is ours, but its start time now names another process: dead.
  raw.proc(rec).start_time += 1;

  EXPECT_EQ(q().tick(), 2U);
  const RecoveryInfo r = q().recovery();
  EXPECT_EQ(r.runs, 1U);
  EXPECT_EQ(r.jobs, 2U);
  EXPECT_EQ(r.last_jobs, 2U);
  EXPECT_EQ(r.last_pid, int(::getpid()));
  EXPECT_GT(r.last_unix_ms, 0U);

  // The holder was only slow: its late acks change nothing.
  EXPECT_EQ(other.complete(held[0].id, held[0].token), AckStatus::stale);
  EXPECT_EQ(other.fail(held[1].id, held[1].token, {}), FailStatus::stale);
  // The jobs come back in mint order, attempt 2, then the untouched third.
  Lease l;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(q().claim(l, 60000));
    EXPECT_EQ(l.id, ids[std::size_t(i)]);
    EXPECT_EQ(l.attempt, i < 2 ? 2U : 1U);
    EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  }
  EXPECT_TRUE(q().fsck().clean());
  raw.proc(rec).start_time -= 1;
}

TEST_F(Recovery, ARecordStillBeingAttachedIsNeverJudged) {
  fill(A, 1);
  Queue other = second();
  Lease l;
  ASSERT_TRUE(other.claim(l, 60000));
  RawSegment raw(q().name());
  const std::uint32_t rec = holder_record(raw);
  const std::uint64_t owner = raw.proc(rec).owner.load();
  raw.proc(rec).owner.store(owner & ~(1ULL << 33));  // not stamped: its start time is not written yet
  raw.proc(rec).start_time += 1;
  EXPECT_EQ(q().tick(), 0U);
  raw.proc(rec).start_time -= 1;
  raw.proc(rec).owner.store(owner);
  EXPECT_EQ(other.complete(l.id, l.token), AckStatus::ok);
}

TEST_F(Recovery, AHolderThatDetachedCleanlyKeepsItsLeaseUntilItsDeadline) {
  // `fairlane claim` detaches and exits; `fairlane complete` comes later
  // from another process. A free record is not a dead holder.
  const auto ids = fill(A, 1);
  Lease l;
  {
    Queue other = second();
    ASSERT_TRUE(other.claim(l, 60000));
  }
  EXPECT_EQ(q().tick(), 0U);
  EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
}

TEST_F(Recovery, AHolderThatExitedButIsNotYetReapedIsDead) {
  // A zombie still answers kill(pid, 0) and keeps its /proc entry and start
  // time; it holds nothing any more.
  fill(A, 2);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(ready[0]);
    auto other = Queue::open(q().name());
    Lease l;
    const bool ok = other && other->claim(l, 60000) && other->claim(l, 60000);
    const char c = ok ? '1' : '0';
    (void)!::write(ready[1], &c, 1);
    ::_exit(0);  // no detach: the record stays attached, the process a zombie
  }
  ::close(ready[1]);
  char c = 0;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  ::close(ready[0]);
  ASSERT_EQ(c, '1');
  // Until it has exited, without reaping it (WNOWAIT): it stays a zombie.
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, id_t(child), &info, WEXITED | WNOWAIT), 0);
  const std::string stat = "/proc/" + std::to_string(child) + "/stat";
  std::ifstream in(stat);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(')');
  const bool zombie = paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z';
  ASSERT_TRUE(zombie);
  EXPECT_EQ(q().tick(), 2U);
  EXPECT_EQ(q().recovery().last_pid, int(child));
  int st = 0;
  ::waitpid(child, &st, 0);
  EXPECT_TRUE(q().fsck().clean());
}

TEST_F(Recovery, ExpiredLeasesAreCountedAndPromotionsAreNot) {
  fill(A, 2);
  ASSERT_EQ(q().enqueue(A, q().mint(), "later", {.delay_ms = 100}), EnqueueStatus::enqueued);
  Lease l;
  ASSERT_TRUE(q().claim(l, 1000));
  ASSERT_TRUE(q().claim(l, 1000));
  q().advance_clock(200);
  EXPECT_EQ(q().tick(), 1U);  // the delayed job falls due: not a recovery
  EXPECT_EQ(q().recovery().runs, 0U);
  q().advance_clock(1000);
  EXPECT_EQ(q().tick(), 2U);
  const RecoveryInfo r = q().recovery();
  EXPECT_EQ(r.runs, 1U);
  EXPECT_EQ(r.last_jobs, 2U);
  EXPECT_EQ(r.last_pid, 0) << "expired leases of a live holder name no dead pid";
  EXPECT_TRUE(q().fsck().clean());
}

}  // namespace
}  // namespace fairlane
