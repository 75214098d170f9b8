// Leases, fencing tokens, delays, retries, dead letters and extend. Time only
// moves through Queue::advance_clock: no test sleeps.
#include "queue_fixture.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

namespace fairlane {
namespace {

using test::group;
using test::QueueTest;
using test::seq_string;

const BrandedId A = BrandedId::make("AAA", 1);
const BrandedId B = BrandedId::make("BBB", 1);

// ---------------------------------------------------------------- lease expiry

TEST_F(QueueTest, LeaseDeadlineOnSegmentClock) {
  fill(A, 1);
  const std::uint64_t before = q().now_ms();
  Lease l = claim_one(5000);
  const std::uint64_t after = q().now_ms();
  EXPECT_GE(l.deadline_ms, before + 5000);
  EXPECT_LE(l.deadline_ms, after + 5000);
}

TEST_F(QueueTest, AdvanceClockMovesNow) {
  const std::uint64_t t0 = q().now_ms();
  q().advance_clock(3'600'000);
  EXPECT_GE(q().now_ms(), t0 + 3'600'000);
  EXPECT_GE(q().snapshot().now_ms, t0 + 3'600'000);
}

TEST_F(QueueTest, ExpiredLeaseReturnsToMintPositionViaTick) {
  auto ids = fill(A, 3);
  Lease first = claim_one(100);
  ASSERT_EQ(first.id, ids[0]);
  ASSERT_EQ(first.attempt, 1U);
  EXPECT_EQ(lane(A)->active, 1U);
  EXPECT_EQ(q().depth(A), 2U);

  q().advance_clock(200);
  EXPECT_EQ(q().tick(), 1U);
  EXPECT_EQ(lane(A)->active, 0U);
  EXPECT_EQ(q().depth(A), 3U);
  Snapshot s = q().snapshot();
  EXPECT_EQ(s.leased, 0U);
  EXPECT_EQ(s.pending, 3U);
  EXPECT_EQ(s.counters.expired, 1U);

  // Served before its younger siblings, with the next attempt number.
  Lease again = claim_one(60000);
  EXPECT_EQ(again.id, ids[0]);
  EXPECT_EQ(again.attempt, 2U);
  EXPECT_EQ(again.payload, first.payload);
  // The old token is fenced off.
  EXPECT_NE(again.token, first.token);
  EXPECT_EQ(q().complete(ids[0], first.token), AckStatus::stale);
  EXPECT_EQ(q().extend(ids[0], first.token, 1000), AckStatus::stale);
  EXPECT_EQ(q().fail(ids[0], first.token, FailOptions{}), FailStatus::stale);
  EXPECT_EQ(lane(A)->active, 1U);
  EXPECT_EQ(q().complete(ids[0], again.token), AckStatus::ok);
  EXPECT_EQ(claim_one().id, ids[1]);
}

// Past its deadline and before any sweep has taken it back, a lease can no
// longer be extended, but its holder's complete, fail and release still
// take effect: nobody else can hold the job yet (README, "Delivery").
TEST_F(QueueTest, PastItsDeadlineALeaseIsNotExtendedButItsAcksLandUntilTakenBack) {
  auto ids = fill(A, 3);
  for (int how = 0; how < 3; ++how) {
    SCOPED_TRACE(how);
    Lease l = claim_one(100);
    q().advance_clock(200);
    EXPECT_EQ(q().extend(l.id, l.token, 1000), AckStatus::stale);
    if (how == 0) EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
    if (how == 1) EXPECT_EQ(q().fail(l.id, l.token, FailOptions{}), FailStatus::dead);
    if (how == 2) EXPECT_EQ(q().release(l.id, l.token), AckStatus::ok);
    EXPECT_EQ(q().snapshot().counters.expired, 0U) << "taken back as well";
    EXPECT_EQ(q().tick(), 0U) << "a lease left to expire";
  }
  EXPECT_EQ(q().snapshot().dead, 1U);
  EXPECT_EQ(q().snapshot().pending, 1U) << "the released job";
}

TEST_F(QueueTest, ClaimSweepsExpiredLeasesByItself) {
  auto ids = fill(A, 2);
  Lease first = claim_one(100);
  ASSERT_EQ(first.id, ids[0]);
  q().advance_clock(200);
  Lease again = claim_one(60000);  // no tick(): the claim reaps
  EXPECT_EQ(again.id, ids[0]);
  EXPECT_EQ(again.attempt, 2U);
  EXPECT_EQ(lane(A)->active, 1U);
  EXPECT_EQ(q().complete(ids[0], first.token), AckStatus::stale);
  EXPECT_EQ(q().complete(ids[0], again.token), AckStatus::ok);
}

TEST_F(QueueTest, ExpiryReleasesLimitSlot) {
  // The BullMQ 3929 shape: a lease that is never completed must not leave a
  // phantom active count that keeps the lane off the ring forever.
  auto ids = fill(A, 2);
  fill(B, 5);
  ASSERT_EQ(q().set_limit(A, 1), LaneStatus::ok);
  Lease la = claim_one(100);
  ASSERT_EQ(la.group, A);
  EXPECT_EQ(seq_string(claim_groups(2, 60000)), "BBB BBB");
  q().advance_clock(200);
  // A is back: its expired job is served again, not its younger one.
  bool saw_a = false;
  for (int i = 0; i < 3 && !saw_a; ++i) {
    Lease l = claim_one(60000);
    if (l.group == A) {
      saw_a = true;
      EXPECT_EQ(l.id, ids[0]);
      EXPECT_EQ(l.attempt, 2U);
    }
  }
  EXPECT_TRUE(saw_a) << "lane A never came back after its lease expired";
  EXPECT_LE(lane(A)->active, 1U);
}

TEST_F(QueueTest, UnexpiredLeaseIsNotReaped) {
  fill(A, 1);
  Lease l = claim_one(10'000);
  q().advance_clock(5'000);
  EXPECT_EQ(q().tick(), 0U);
  Lease other;
  EXPECT_FALSE(q().claim(other, 1000));
  EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
}

// ---------------------------------------------------------------- fencing

TEST_F(QueueTest, StaleTokensChangeNothing) {
  auto ids = fill(A, 2);
  Lease l = claim_one(10'000);
  ASSERT_EQ(l.attempt, 1U);
  const Snapshot before = q().snapshot();
  for (Token bad : {Token(0), Token(l.token.value + 1), Token(l.token.value ^ (1ULL << 40)), Token(~0ULL)}) {
    EXPECT_EQ(q().complete(l.id, bad), AckStatus::stale) << bad.value;
    EXPECT_EQ(q().extend(l.id, bad, 1'000'000), AckStatus::stale) << bad.value;
    EXPECT_EQ(q().fail(l.id, bad, FailOptions{0, 5, "nope"}), FailStatus::stale) << bad.value;
  }
  const Snapshot after = q().snapshot();
  EXPECT_EQ(after.leased, before.leased);
  EXPECT_EQ(after.pending, before.pending);
  EXPECT_EQ(after.scheduled, 0U);
  EXPECT_EQ(after.counters.completed, 0U);
  EXPECT_EQ(after.counters.retried, 0U);
  EXPECT_EQ(lane(A)->active, 1U);
  // The bad extend did not move the deadline: the lease still expires on time.
  q().advance_clock(10'500);
  EXPECT_EQ(q().tick(), 1U);

  // A pending (unleased) job refuses every token too.
  EXPECT_EQ(q().complete(ids[1], Token(0)), AckStatus::stale);
  EXPECT_EQ(q().complete(ids[1], l.token), AckStatus::stale);
  EXPECT_EQ(q().depth(A), 2U);
}

TEST_F(QueueTest, UnknownIdIsGone) {
  const BrandedId never = q().mint();
  EXPECT_EQ(q().complete(never, Token(1)), AckStatus::gone);
  EXPECT_EQ(q().extend(never, Token(1), 100), AckStatus::gone);
  EXPECT_EQ(q().fail(never, Token(1), FailOptions{}), FailStatus::gone);
  EXPECT_EQ(q().complete(BrandedId{}, Token(1)), AckStatus::gone);

  fill(A, 1);
  Lease l = claim_one();
  ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  EXPECT_EQ(q().complete(l.id, l.token), AckStatus::gone);
  EXPECT_EQ(q().extend(l.id, l.token, 100), AckStatus::gone);
  EXPECT_EQ(q().fail(l.id, l.token, FailOptions{}), FailStatus::gone);
  Snapshot s = q().snapshot();
  EXPECT_EQ(s.counters.completed, 1U);
  EXPECT_EQ(s.leased, 0U);
}

// ---------------------------------------------------------------- delayed jobs

TEST_F(QueueTest, DelayedJobWaitsForItsTime) {
  const BrandedId late = q().mint();
  ASSERT_EQ(q().enqueue(A, late, "late", EnqueueOptions{1000}), EnqueueStatus::enqueued);
  auto b_ids = fill(B, 1);
  EXPECT_EQ(q().snapshot().scheduled, 1U);
  EXPECT_EQ(q().depth(A), 0U);
  EXPECT_FALSE(lane(A).has_value() && lane(A)->ringed);

  Lease l = claim_one();
  EXPECT_EQ(l.id, b_ids[0]);
  EXPECT_FALSE(q().claim(l, 1000)) << "delayed job was served early";
  q().advance_clock(400);
  EXPECT_EQ(q().tick(), 0U);
  EXPECT_FALSE(q().claim(l, 1000)) << "delayed job was served early";
  // A duplicate of a scheduled job is still a duplicate.
  EXPECT_EQ(q().enqueue(A, late, "again"), EnqueueStatus::duplicate);

  q().advance_clock(700);
  EXPECT_EQ(q().tick(), 1U);
  EXPECT_EQ(q().depth(A), 1U);
  EXPECT_EQ(q().snapshot().scheduled, 0U);
  ASSERT_TRUE(q().claim(l, 1000));
  EXPECT_EQ(l.id, late);
  EXPECT_EQ(l.payload, "late");
  EXPECT_EQ(l.attempt, 1U);
  EXPECT_EQ(q().snapshot().counters.promoted, 1U);
}

TEST_F(QueueTest, DelayedJobPromotedByClaim) {
  const BrandedId late = q().mint();
  ASSERT_EQ(q().enqueue(A, late, "late", EnqueueOptions{1000}), EnqueueStatus::enqueued);
  Lease l;
  EXPECT_FALSE(q().claim(l, 1000));
  q().advance_clock(1100);
  ASSERT_TRUE(q().claim(l, 1000)) << "claim did not promote the due job";
  EXPECT_EQ(l.id, late);
}

TEST_F(QueueTest, DelayedJobTakesItsMintPosition) {
  // Delayed jobs rejoin the lane by id: an older delayed job goes ahead of
  // younger pending ones once it is due.
  const BrandedId older = q().mint();
  ASSERT_EQ(q().enqueue(A, older, "older", EnqueueOptions{500}), EnqueueStatus::enqueued);
  auto younger = fill(A, 2);
  q().advance_clock(600);
  EXPECT_EQ(claim_one().id, older);
  EXPECT_EQ(claim_one().id, younger[0]);
}

// ---------------------------------------------------------------- fail, retry, dead

TEST_F(QueueTest, FailRetriesThenDeadLetters) {
  const BrandedId id = q().mint();
  ASSERT_EQ(q().enqueue(A, id, "work"), EnqueueStatus::enqueued);
  const FailOptions opts{500, 3, "boom"};

  Lease l = claim_one();
  ASSERT_EQ(l.attempt, 1U);
  EXPECT_EQ(q().fail(id, l.token, opts), FailStatus::retrying);
  EXPECT_EQ(lane(A)->active, 0U);
  EXPECT_EQ(q().snapshot().scheduled, 1U);
  EXPECT_FALSE(q().claim(l, 1000)) << "retry served before its backoff";
  EXPECT_EQ(q().enqueue(A, id, "dup"), EnqueueStatus::duplicate);
  q().advance_clock(600);
  ASSERT_TRUE(q().claim(l, 1000));
  EXPECT_EQ(l.id, id);
  EXPECT_EQ(l.attempt, 2U);
  EXPECT_EQ(l.payload, "work");

  EXPECT_EQ(q().fail(id, l.token, opts), FailStatus::retrying);
  q().advance_clock(600);
  ASSERT_TRUE(q().claim(l, 1000));
  EXPECT_EQ(l.attempt, 3U);

  EXPECT_EQ(q().fail(id, l.token, opts), FailStatus::dead);
  Snapshot s = q().snapshot();
  EXPECT_EQ(s.dead, 1U);
  EXPECT_EQ(s.scheduled, 0U);
  EXPECT_EQ(s.leased, 0U);
  EXPECT_EQ(s.pending, 0U);
  EXPECT_EQ(s.counters.retried, 2U);
  EXPECT_EQ(s.counters.dead, 1U);
  EXPECT_EQ(lane(A)->active, 0U);
  q().advance_clock(100'000);
  q().tick();
  EXPECT_FALSE(q().claim(l, 1000)) << "a dead job was served";
  // A dead job still exists: same id is a duplicate, and its token is stale.
  EXPECT_EQ(q().enqueue(A, id, "dup"), EnqueueStatus::duplicate);
  EXPECT_EQ(q().complete(id, l.token), AckStatus::stale);
  EXPECT_EQ(q().fail(id, l.token, opts), FailStatus::stale);
}

TEST_F(QueueTest, FailWithDefaultOptionsIsDeadAtOnce) {
  fill(A, 1);
  Lease l = claim_one();
  EXPECT_EQ(q().fail(l.id, l.token, FailOptions{}), FailStatus::dead);
  EXPECT_EQ(q().snapshot().dead, 1U);
}

TEST_F(QueueTest, RetryGoesBackToMintPosition) {
  auto ids = fill(A, 3);
  Lease l = claim_one();
  ASSERT_EQ(l.id, ids[0]);
  EXPECT_EQ(q().fail(l.id, l.token, FailOptions{0, 5, "again"}), FailStatus::retrying);
  Lease r = claim_one();  // due at once: promoted by the claim, served before ids[1]
  EXPECT_EQ(r.id, ids[0]);
  EXPECT_EQ(r.attempt, 2U);
  EXPECT_EQ(q().complete(r.id, r.token), AckStatus::ok);
  EXPECT_EQ(claim_one().id, ids[1]);
}

TEST_F(QueueTest, FailReleasesLimitSlot) {
  fill(A, 3);
  ASSERT_EQ(q().set_limit(A, 1), LaneStatus::ok);
  Lease l = claim_one();
  Lease none;
  EXPECT_FALSE(q().claim(none, 1000));
  EXPECT_EQ(q().fail(l.id, l.token, FailOptions{10'000, 5, ""}), FailStatus::retrying);
  Lease next = claim_one();  // the lane reopened for its next job
  EXPECT_NE(next.id, l.id);
  EXPECT_EQ(lane(A)->active, 1U);
}

// ---------------------------------------------------------------- extend

TEST_F(QueueTest, ExtendMovesTheDeadline) {
  fill(A, 1);
  Lease l = claim_one(100);
  EXPECT_EQ(q().extend(l.id, l.token, 1000), AckStatus::ok);
  q().advance_clock(500);  // past the old deadline, before the new one
  EXPECT_EQ(q().tick(), 0U);
  Lease other;
  EXPECT_FALSE(q().claim(other, 1000)) << "extended lease was reaped at its old deadline";
  EXPECT_EQ(lane(A)->active, 1U);
  q().advance_clock(700);  // past the new one
  EXPECT_EQ(q().tick(), 1U);
  ASSERT_TRUE(q().claim(other, 1000));
  EXPECT_EQ(other.id, l.id);
  EXPECT_EQ(other.attempt, 2U);
  EXPECT_EQ(q().extend(l.id, l.token, 100'000), AckStatus::stale);
}

TEST_F(QueueTest, ExtendThenCompleteWithSameToken) {
  fill(A, 1);
  Lease l = claim_one(100);
  ASSERT_EQ(q().extend(l.id, l.token, 5000), AckStatus::ok);
  ASSERT_EQ(q().extend(l.id, l.token, 5000), AckStatus::ok);
  EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  EXPECT_EQ(q().snapshot().leased, 0U);
}

// ---------------------------------------------------------------- claim_wait

TEST_F(QueueTest, ClaimWaitTimesOutOnEmptyQueue) {
  Lease l;
  EXPECT_FALSE(q().claim_wait(l, 1000, std::chrono::milliseconds(20)));
}

TEST_F(QueueTest, ClaimWaitReturnsAtOnceWhenWorkIsReady) {
  auto ids = fill(A, 1);
  Lease l;
  ASSERT_TRUE(q().claim_wait(l, 1000, std::chrono::milliseconds(30'000)));
  EXPECT_EQ(l.id, ids[0]);
}

// Parked consumers and a backlog that rings its lane once. The queue's
// recovery bound is 60 s, so a consumer that is not woken sleeps a 30 s
// slice: each consumer waits up to 20 s, and must have claimed well before
// that. `n` consumers are parked (each asleep in the futex) before `event`
// runs; then every one of them must claim.
class ClaimWaitWakes : public QueueTest {
 protected:
  void SetUp() override {
    QueueOptions o = small_options();
    o.recovery_ms = 60000;
    make_queue(o);
  }
  void every_parked_consumer_claims(int n, const std::function<void()>& event) {
    std::vector<std::atomic<pid_t>> tids(n);
    std::atomic<int> claimed{0}, answered{0};
    std::vector<std::thread> consumers;
    for (int i = 0; i < n; ++i)
      consumers.emplace_back([&, i] {
        tids[i] = pid_t(::syscall(SYS_gettid));
        Lease l;
        if (q().claim_wait(l, 60000, std::chrono::seconds(20))) ++claimed;
        ++answered;
      });
    const bool asleep = test::eventually([&] {
      if (q().snapshot().consumers_parked != std::uint64_t(n)) return false;
      for (const auto& t : tids)
        if (t.load() == 0 || !test::in_futex_wait(t.load())) return false;
      return true;
    });
    EXPECT_TRUE(asleep) << "the consumers never parked";
    event();
    EXPECT_TRUE(test::eventually([&] { return answered.load() == n; }, std::chrono::seconds(10)))
        << answered.load() << " of " << n << " parked consumers answered: the rest slept beside the jobs";
    for (auto& t : consumers) t.join();
    EXPECT_EQ(claimed.load(), n);
  }
};

TEST_F(ClaimWaitWakes, ARaisedLimitWakesAConsumerPerJobItLetsThrough) {
  ASSERT_EQ(q().set_limit(A, 1), LaneStatus::ok);
  fill(A, 3);
  const Lease held = claim_one();  // A at its limit, two jobs behind it
  every_parked_consumer_claims(2, [&] { ASSERT_EQ(q().set_limit(A, 3), LaneStatus::ok); });
  EXPECT_EQ(q().complete(held.id, held.token), AckStatus::ok);
}

TEST_F(ClaimWaitWakes, AResumedLaneWithABacklogWakesAConsumerPerJob) {
  ASSERT_EQ(q().pause(A), LaneStatus::ok);
  fill(A, 2);
  every_parked_consumer_claims(2, [&] { ASSERT_EQ(q().resume(A), LaneStatus::ok); });
}

// Attempts are fencing tokens and have a fixed width: once a job has had
// every attempt number, it is dead-lettered rather than leased again under a
// number an old holder may still have.
TEST_F(QueueTest, ExhaustedAttemptsDeadLetterInsteadOfReusingAToken) {
  const BrandedId job = q().mint();
  ASSERT_EQ(q().enqueue(A, job, "x"), EnqueueStatus::enqueued);
  Lease l;
  std::uint32_t last = 0;
  while (q().claim(l, 1)) {  // never completed: each lease expires
    ASSERT_EQ(l.attempt, last + 1) << "attempts must strictly increase";
    last = l.attempt;
    q().advance_clock(2);
  }
  EXPECT_EQ(last, 65535U);
  const auto info = q().job(job);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->state, JobState::dead);
  EXPECT_EQ(q().complete(job, l.token), AckStatus::stale);
  EXPECT_TRUE(q().fsck().clean());
}

}  // namespace
}  // namespace fairlane
