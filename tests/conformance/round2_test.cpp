// The second round's behaviours, one body per behaviour, run against every
// backend: fencing tokens that never repeat, release, the job's own retry
// policy, the batch paths, the group-affinity claim, reassign, job lookup,
// dead letters in id order, limit 0 refused. (The cases that waited for the
// segment's new core, once ValkeyFirstTest, run on every backend since it
// landed.)
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <set>

#include "backend_fixture.hpp"

namespace fairlane {
namespace {

using test::BackendTest;
using test::seq_string;

const BrandedId A = BrandedId::make("AAA", 1);
const BrandedId B = BrandedId::make("BBB", 1);
const BrandedId C = BrandedId::make("CCC", 1);

// ---------------------------------------------------------------- fencing and release

TEST_P(BackendTest, ReleaseKeepsTheAttemptAndKillsTheToken) {
  auto ids = fill(A, 2);
  Lease l = claim_one();
  ASSERT_EQ(l.id, ids[0]);
  ASSERT_EQ(l.attempt, 1U);
  ASSERT_EQ(q().release(l.id, l.token), AckStatus::ok);
  EXPECT_EQ(lane(A)->active, 0U);
  EXPECT_EQ(q().depth(A), 2U);
  Lease again = claim_one();
  EXPECT_EQ(again.id, ids[0]);  // back at its mint position
  EXPECT_EQ(again.attempt, 1U);  // a release is not a failed delivery
  EXPECT_NE(again.token, l.token);
  EXPECT_EQ(q().complete(l.id, l.token), AckStatus::stale);
  EXPECT_EQ(q().extend(l.id, l.token, 1000), AckStatus::stale);
  EXPECT_EQ(q().release(l.id, l.token), AckStatus::stale);
  EXPECT_EQ(q().fail(l.id, l.token, FailOptions{}), FailStatus::stale);
  EXPECT_EQ(q().fail(again.id, again.token, FailOptions{0, 5, "real error"}), FailStatus::retrying);
  Lease third = claim_one();
  EXPECT_EQ(third.attempt, 2U);
  EXPECT_EQ(q().release(third.id, third.token), AckStatus::ok);
  auto info = q().job(third.id);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->state, JobState::pending);
  EXPECT_EQ(info->attempt, 1U);  // deliveries that counted: the released one did not
  EXPECT_EQ(info->last_error, "real error");  // kept by a release
  EXPECT_EQ(claim_one().attempt, 2U);
  EXPECT_EQ(q().release(BrandedId{}, Token(1)), AckStatus::gone);
}

TEST_P(BackendTest, ATokenIsNeverReusedAcrossReadmissions) {
  // Issue 10's reproduction: C1's lease expires, C2 completes, the id is
  // enqueued again and C3 claims it at attempt 1: C1's token must not match.
  const BrandedId x = q().mint();
  ASSERT_EQ(q().enqueue(A, x, "one"), EnqueueStatus::enqueued);
  Lease c1 = claim_one(50);
  q().advance_clock(100);
  Lease c2 = claim_one();
  ASSERT_EQ(c2.id, x);
  ASSERT_EQ(c2.attempt, 2U);
  ASSERT_EQ(q().complete(x, c2.token), AckStatus::ok);
  ASSERT_EQ(q().enqueue(A, x, "two"), EnqueueStatus::enqueued);
  Lease c3 = claim_one();
  ASSERT_EQ(c3.attempt, 1U);
  std::set<std::uint64_t> tokens = {c1.token.value, c2.token.value, c3.token.value};
  EXPECT_EQ(tokens.size(), 3U);
  EXPECT_EQ(q().complete(x, c1.token), AckStatus::stale);
  EXPECT_EQ(q().complete(x, c2.token), AckStatus::stale);
  EXPECT_EQ(q().complete(x, c3.token), AckStatus::ok);
}

// ---------------------------------------------------------------- retry policy

TEST_P(BackendTest, TheJobsRetryPolicyAppliesWhenFailGivesNone) {
  const BrandedId id = q().mint();
  EnqueueOptions o;
  o.retry.max_attempts = 3;
  o.retry.backoff = Backoff::fixed(std::chrono::milliseconds(500));
  ASSERT_EQ(q().enqueue(A, id, "work", o), EnqueueStatus::enqueued);
  auto info = q().job(id);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->retry, o.retry);
  Lease l = claim_one();
  EXPECT_EQ(l.retry, o.retry);
  EXPECT_EQ(q().fail(id, l.token, FailOptions{}), FailStatus::retrying);  // the job's policy: 3 attempts
  EXPECT_EQ(q().snapshot().scheduled, 1U);
  q().advance_clock(400);
  EXPECT_FALSE(q().claim(l, 1000)) << "served before the job's backoff";
  q().advance_clock(200);
  ASSERT_TRUE(q().claim(l, 1000));
  EXPECT_EQ(l.attempt, 2U);
  FailOptions now;
  now.delay_ms = 0;  // the call wins over the job for the delay...
  EXPECT_EQ(q().fail(id, l.token, now), FailStatus::retrying);
  ASSERT_TRUE(q().claim(l, 1000));
  EXPECT_EQ(l.attempt, 3U);
  EXPECT_EQ(q().fail(id, l.token, FailOptions{}), FailStatus::dead);  // ...and the job's max still counts
  const BrandedId other = q().mint();
  ASSERT_EQ(q().enqueue(A, other, "w", o), EnqueueStatus::enqueued);
  ASSERT_TRUE(q().claim(l, 1000));
  FailOptions once;
  once.max_attempts = 1;
  EXPECT_EQ(q().fail(other, l.token, once), FailStatus::dead);  // the call's max wins
}

TEST_P(BackendTest, AnInvalidRetryPolicyIsRefusedAndWritesNothing) {
  EnqueueOptions o;
  o.retry.backoff = Backoff::exponential(std::chrono::milliseconds(1000), std::chrono::milliseconds(10));  // base > cap
  const BrandedId id = q().mint();
  EXPECT_EQ(q().enqueue(A, id, "x", o), EnqueueStatus::invalid_argument);
  EXPECT_FALSE(q().job(id).has_value());
  EXPECT_EQ(q().snapshot().pending, 0U);
}

// ---------------------------------------------------------------- the longest delay

// A delay over kMaxDelayMs is refused and writes nothing, alone or in a
// batch. The segment kept the due time in 44 bits of ms: a delay near 2^64
// wrapped round there and the job was due at once (found by a tester).
TEST_P(BackendTest, ADelayOverTheLongestIsInvalidAndWritesNothing) {
  for (const std::uint64_t delay : {kMaxDelayMs + 1, std::uint64_t(1) << 44, ~std::uint64_t(0)}) {
    const BrandedId id = q().mint();
    EXPECT_EQ(q().enqueue(A, id, "x", EnqueueOptions{delay}), EnqueueStatus::invalid_argument) << delay;
    EXPECT_FALSE(q().job(id).has_value()) << delay;
  }
  const BrandedId a1 = q().mint(), a2 = q().mint(), a3 = q().mint();
  std::vector<EnqueueItem> items = {{A, a1, "a1"}, {A, a2, "a2", EnqueueOptions{~std::uint64_t(0)}}, {A, a3, "a3"}};
  std::vector<EnqueueStatus> st(items.size());
  EXPECT_EQ(q().enqueue_batch(items, st), 2U);
  EXPECT_EQ(st[1], EnqueueStatus::invalid_argument);
  EXPECT_FALSE(q().job(a2).has_value());
  const Snapshot snap = q().snapshot();
  EXPECT_EQ(snap.pending, 2U);
  EXPECT_EQ(snap.scheduled, 0U);
  EXPECT_EQ(q().enqueue(A, a2, "a2"), EnqueueStatus::enqueued) << "the refused id was taken";
}

// The longest delay is kept as given: the job waits.
TEST_P(BackendTest, AJobGivenTheLongestDelayWaits) {
  const BrandedId id = q().mint();
  ASSERT_EQ(q().enqueue(A, id, "x", EnqueueOptions{kMaxDelayMs}), EnqueueStatus::enqueued);
  q().advance_clock(100'000);
  q().tick();
  Lease l;
  EXPECT_FALSE(q().claim(l, 1000)) << "a job delayed by kMaxDelayMs was served";
  EXPECT_EQ(q().snapshot().scheduled, 1U);
}

// A fail() asking for a longer backoff than kMaxDelayMs waits that long,
// not a wrapped-round time that was due at once.
TEST_P(BackendTest, AFailBackoffOverTheLongestWaitsTheLongest) {
  const BrandedId id = q().mint();
  ASSERT_EQ(q().enqueue(A, id, "x"), EnqueueStatus::enqueued);
  Lease l = claim_one();
  FailOptions f;
  f.delay_ms = ~std::uint64_t(0);
  f.max_attempts = 2;
  ASSERT_EQ(q().fail(id, l.token, f), FailStatus::retrying);
  q().advance_clock(100'000);
  q().tick();
  EXPECT_FALSE(q().claim(l, 1000)) << "a retry with the longest backoff was served";
  EXPECT_EQ(q().snapshot().scheduled, 1U);
}

// ---------------------------------------------------------------- batches

TEST_P(BackendTest, EnqueueBatchGivesOneStatusPerItem) {
  const BrandedId dup = q().mint();
  ASSERT_EQ(q().enqueue(A, dup, "first"), EnqueueStatus::enqueued);
  const BrandedId a1 = q().mint(), a2 = q().mint(), b1 = q().mint();
  const BrandedId foreign = BrandedId::make("USR", q().mint().snowflake());
  std::vector<EnqueueItem> items = {
      {A, a1, "a1"}, {A, dup, "again"}, {B, b1, "b1"}, {A, foreign, "x"}, {A, a2, "a2"}, {A, a2, "a2 twice"}};
  std::vector<EnqueueStatus> st(items.size());
  EXPECT_EQ(q().enqueue_batch(items, st), 3U);
  EXPECT_EQ(st[0], EnqueueStatus::enqueued);
  EXPECT_EQ(st[1], EnqueueStatus::duplicate);
  EXPECT_EQ(st[2], EnqueueStatus::enqueued);
  EXPECT_EQ(st[3], EnqueueStatus::kind_mismatch);
  EXPECT_EQ(st[4], EnqueueStatus::enqueued);
  EXPECT_EQ(st[5], EnqueueStatus::duplicate);
  EXPECT_EQ(q().depth(A), 3U);
  EXPECT_EQ(q().depth(B), 1U);
  EXPECT_EQ(seq_string(claim_groups(4)), "AAA BBB AAA AAA");
}

TEST_P(BackendTest, LargeBatchesAreWholeAcrossChunks) {
  // More items than one script takes (Valkey sends 512 at a time).
  constexpr int kN = 700;
  std::vector<BrandedId> ids;
  std::vector<EnqueueItem> items;
  for (int i = 0; i < kN; ++i) ids.push_back(q().mint());
  for (int i = 0; i < kN; ++i) items.push_back({i % 2 ? A : B, ids[std::size_t(i)], "p"});
  std::vector<EnqueueStatus> st(kN);
  ASSERT_EQ(q().enqueue_batch(items, st), std::size_t(kN));
  EXPECT_EQ(q().depth(A) + q().depth(B), std::uint64_t(kN));
  std::vector<Lease> held(kN);
  std::size_t got = 0;
  while (got < held.size()) {
    const std::size_t n = q().claim_batch(std::span<Lease>(held.data() + got, held.size() - got), 60000);
    if (n == 0) break;
    got += n;
  }
  ASSERT_EQ(got, std::size_t(kN));
  std::vector<AckStatus> acks(kN);
  EXPECT_EQ(q().complete_batch(held, acks), std::size_t(kN));
  EXPECT_EQ(q().snapshot().leased, 0U);
}

TEST_P(BackendTest, CompleteBatchGivesOneStatusPerLease) {
  fill(A, 3);
  std::vector<Lease> held(3);
  ASSERT_EQ(q().claim_batch(held, 60000), 3U);
  std::vector<Lease> acks = held;
  acks[1].token = Token(acks[1].token.value + 12345);  // stale
  acks.push_back(held[0]);                            // twice: gone the second time
  std::vector<AckStatus> st(acks.size());
  EXPECT_EQ(q().complete_batch(acks, st), 2U);
  EXPECT_EQ(st[0], AckStatus::ok);
  EXPECT_EQ(st[1], AckStatus::stale);
  EXPECT_EQ(st[2], AckStatus::ok);
  EXPECT_EQ(st[3], AckStatus::gone);
  EXPECT_EQ(q().snapshot().leased, 1U);
  EXPECT_EQ(q().complete(held[1].id, held[1].token), AckStatus::ok);
}

TEST_P(BackendTest, ClaimLaneBatchServesOneLaneUpToItsHeadroom) {
  auto a = fill(A, 6);
  fill(B, 4);
  ASSERT_EQ(q().set_limit(A, 3), LaneStatus::ok);
  std::vector<Lease> out(10);
  ASSERT_EQ(q().claim_lane_batch(out, 60000), 3U);  // one rotation: A, capped by its limit
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(out[i].group, A);
    EXPECT_EQ(out[i].id, a[i]);
    EXPECT_EQ(out[i].deadline_ms, out[0].deadline_ms);  // one deadline
  }
  EXPECT_FALSE(lane(A)->ringed);  // at its ceiling: off the ring
  ASSERT_EQ(q().claim_lane_batch(out, 60000), 4U);  // B, emptied
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i].group, B);
  EXPECT_FALSE(lane(B)->ringed);
  EXPECT_EQ(q().claim_lane_batch(out, 60000), 0U);
  std::vector<Lease> two(2);
  ASSERT_EQ(q().clear_limit(A), LaneStatus::ok);
  ASSERT_EQ(q().claim_lane_batch(two, 60000), 2U);  // room caps it; the lane stays on the ring
  EXPECT_TRUE(lane(A)->ringed);
}

// ---------------------------------------------------------------- reassign

TEST_P(BackendTest, ReassignMovesAPendingJobToAnotherLane) {
  auto a = fill(A, 2);
  fill(C, 1);
  ASSERT_EQ(q().reassign(a[1], B), MoveStatus::moved);
  EXPECT_EQ(q().depth(A), 1U);
  EXPECT_EQ(q().depth(B), 1U);
  EXPECT_TRUE(lane(B)->ringed);  // serviceable now: on the ring
  ASSERT_EQ(q().reassign(a[0], B), MoveStatus::moved);
  EXPECT_EQ(q().depth(A), 0U);
  EXPECT_FALSE(lane(A).has_value() && lane(A)->ringed);  // emptied: off the ring
  auto info = q().job(a[0]);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->group, B);
  Lease l = claim_one();
  EXPECT_EQ(l.group, C);
  l = claim_one();
  EXPECT_EQ(l.group, B);
  EXPECT_EQ(l.id, a[0]);  // its mint position in the new lane
  EXPECT_EQ(q().reassign(a[0], A), MoveStatus::not_pending);
  EXPECT_EQ(q().reassign(q().mint(), A), MoveStatus::gone);
  std::array<char, sizeof(BrandedId)> bad{};
  std::memcpy(bad.data(), "grp0000000000A", kIdLength);
  EXPECT_EQ(q().reassign(a[1], std::bit_cast<BrandedId>(bad)), MoveStatus::invalid_group);
}

// ---------------------------------------------------------------- job lookup, dead letters

TEST_P(BackendTest, JobAndJobsShowEachStateInIdOrder) {
  auto a = fill(A, 3);
  auto b = fill(B, 2);
  const BrandedId late = q().mint();
  ASSERT_EQ(q().enqueue(C, late, "later", EnqueueOptions{60'000}), EnqueueStatus::enqueued);
  Lease l = claim_one();  // a[0]
  ASSERT_EQ(l.id, a[0]);
  auto info = q().job(a[0], true);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->state, JobState::leased);
  EXPECT_EQ(info->token, l.token);
  EXPECT_EQ(info->attempt, 1U);
  EXPECT_EQ(info->when_ms, l.deadline_ms);
  EXPECT_EQ(info->payload, "p0");
  EXPECT_EQ(info->payload_bytes, 2U);
  EXPECT_EQ(q().job(late)->state, JobState::scheduled);
  EXPECT_EQ(q().job(b[1])->state, JobState::pending);
  EXPECT_FALSE(q().job(q().mint()).has_value());

  auto all = q().jobs();
  ASSERT_EQ(all.size(), 6U);
  for (std::size_t i = 1; i < all.size(); ++i) EXPECT_LT(all[i - 1].id, all[i].id);
  JobFilter only_a;
  only_a.group = A;
  EXPECT_EQ(q().jobs(only_a).size(), 3U);
  JobFilter leased;
  leased.state = JobState::leased;
  auto ls = q().jobs(leased);
  ASSERT_EQ(ls.size(), 1U);
  EXPECT_EQ(ls[0].id, a[0]);
  JobFilter two;
  two.limit = 2;
  auto first = q().jobs(two);
  ASSERT_EQ(first.size(), 2U);
  EXPECT_EQ(first[0].id, a[0]);
  EXPECT_EQ(first[1].id, a[1]);
}

TEST_P(BackendTest, DeadLettersInIdOrderRequeueAndPurge) {
  auto ids = fill(A, 3);
  // Dead-lettered newest first: the list is still in id order.
  std::vector<Lease> held(3);
  ASSERT_EQ(q().claim_batch(held, 60000), 3U);
  for (int i = 2; i >= 0; --i) ASSERT_EQ(q().fail(held[i].id, held[i].token, FailOptions{0, 1, "x"}), FailStatus::dead);
  JobFilter dead;
  dead.state = JobState::dead;
  auto d = q().jobs(dead);
  ASSERT_EQ(d.size(), 3U);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(d[i].id, ids[i]);
  EXPECT_EQ(q().requeue_dead(ids[1]), AckStatus::ok);
  EXPECT_EQ(q().requeue_dead(ids[1]), AckStatus::stale);  // not dead any more
  Lease l = claim_one();
  EXPECT_EQ(l.id, ids[1]);
  EXPECT_EQ(l.attempt, 1U);  // starts again
  EXPECT_NE(l.token, held[1].token);
  EXPECT_EQ(q().requeue_all_dead(), 2U);
  EXPECT_EQ(q().snapshot().dead, 0U);
  EXPECT_EQ(q().depth(A), 2U);
  std::vector<Lease> again(2);
  ASSERT_EQ(q().claim_batch(again, 60000), 2U);
  for (auto& x : again) ASSERT_EQ(q().fail(x.id, x.token, FailOptions{0, 1, "y"}), FailStatus::dead);
  EXPECT_EQ(q().purge_dead(), 2U);
  EXPECT_EQ(q().snapshot().dead, 0U);
  EXPECT_FALSE(q().job(ids[0]).has_value());
  EXPECT_EQ(q().enqueue(A, ids[0], "again"), EnqueueStatus::enqueued);  // purged ids are gone
}

// The id of a dead-lettered job is taken: enqueueing it again is
// duplicate and changes nothing, as in EchoMQ (its row exists). But a dead
// job is not delivered until requeue_dead (queue.hpp said duplicate meant
// "it will be delivered").
TEST_P(BackendTest, TheIdOfADeadJobIsADuplicateAndIsDeliveredOnlyAfterRequeueDead) {
  const BrandedId id = q().mint();
  ASSERT_EQ(q().enqueue(A, id, "v1"), EnqueueStatus::enqueued);
  Lease l = claim_one();
  ASSERT_EQ(l.id, id);
  ASSERT_EQ(q().fail(l.id, l.token, FailOptions{.max_attempts = 1, .error = "x"}), FailStatus::dead);
  EXPECT_EQ(q().enqueue(A, id, "v2"), EnqueueStatus::duplicate);
  auto info = q().job(id, true);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->state, JobState::dead);
  EXPECT_EQ(info->payload, "v1");
  q().advance_clock(100'000);
  q().tick();
  Lease none;
  EXPECT_FALSE(q().claim(none, 60000)) << "a dead job was delivered";
  ASSERT_EQ(q().requeue_dead(id), AckStatus::ok);
  Lease again = claim_one();
  EXPECT_EQ(again.id, id);
  EXPECT_EQ(again.payload, "v1");
}

// The empty group is the default lane in jobs() too, as in enqueue and
// depth: it listed nothing on the segment. No group (nullopt) is no filter.
TEST_P(BackendTest, JobsOfTheEmptyGroupAreTheDefaultLanes) {
  const BrandedId d1 = q().mint(), d2 = q().mint(), a1 = q().mint();
  ASSERT_EQ(q().enqueue(BrandedId{}, d1, "d"), EnqueueStatus::enqueued);
  ASSERT_EQ(q().enqueue(*BrandedId::parse(kDefaultGroup), d2, "d"), EnqueueStatus::enqueued);
  ASSERT_EQ(q().enqueue(A, a1, "a"), EnqueueStatus::enqueued);
  EXPECT_EQ(q().depth(BrandedId{}), 2U);
  JobFilter empty;
  empty.group = BrandedId{};
  auto listed = q().jobs(empty);
  ASSERT_EQ(listed.size(), 2U);
  EXPECT_EQ(listed[0].id, d1);
  EXPECT_EQ(listed[1].id, d2);
  JobFilter named;
  named.group = *BrandedId::parse(kDefaultGroup);
  EXPECT_EQ(q().jobs(named).size(), 2U);
  EXPECT_EQ(q().jobs().size(), 3U);
  JobFilter only_a;
  only_a.group = A;
  ASSERT_EQ(q().jobs(only_a).size(), 1U);
}

// The largest limit means "every job", on every backend: on Valkey a limit
// of 10^17 or more reached the scripts' ZRANGE as a float ("1e+17") and
// jobs() threw a BackendError (ERR value is not an integer).
TEST_P(BackendTest, JobsWithTheLargestLimitListsEveryJob) {
  const BrandedId a = q().mint(), d = q().mint();
  ASSERT_EQ(q().enqueue(A, a, "a"), EnqueueStatus::enqueued);
  ASSERT_EQ(q().enqueue(B, d, "d"), EnqueueStatus::enqueued);
  Lease l;
  ASSERT_TRUE(q().claim(l, 60000));
  ASSERT_EQ(q().fail(l.id, l.token, {.max_attempts = 1}), FailStatus::dead);
  for (std::size_t limit : {std::numeric_limits<std::size_t>::max(), std::size_t(100'000'000'000'000'000ULL)}) {
    JobFilter all;
    all.limit = limit;
    EXPECT_EQ(q().jobs(all).size(), 2U) << limit;
    all.state = JobState::dead;
    EXPECT_EQ(q().jobs(all).size(), 1U) << limit;
    all.group = l.group;
    EXPECT_EQ(q().jobs(all).size(), 1U) << limit;
  }
}

// One advance_clock moves the clock by at most kMaxDelayMs (2^40 ms), on
// every backend: the segment bounds it so no deadline wraps. On Valkey the
// whole number went to HINCRBY, which refuses one past 2^63 (a
// BackendError) and takes 2^62, and a clock that far on is past every
// number a script keeps exactly.
TEST_P(BackendTest, AnAdvanceOfTheClockIsBoundedAsTheLongestDelay) {
  const std::uint64_t t0 = q().now_ms();
  q().advance_clock(std::numeric_limits<std::uint64_t>::max());
  const std::uint64_t t1 = q().now_ms();
  EXPECT_GE(t1, t0 + kMaxDelayMs);
  EXPECT_LT(t1, t0 + kMaxDelayMs + 3'600'000);
  q().advance_clock(1ULL << 62);
  EXPECT_LT(q().now_ms(), t1 + kMaxDelayMs + 3'600'000);
  // The queue still works: a lease runs out when the clock passes it.
  const BrandedId id = q().mint();
  ASSERT_EQ(q().enqueue(A, id, "x"), EnqueueStatus::enqueued);
  Lease l;
  ASSERT_TRUE(q().claim(l, 1000));
  q().advance_clock(2000);
  Lease again;
  ASSERT_TRUE(q().claim(again, 1000));
  EXPECT_EQ(again.id, id);
  EXPECT_EQ(q().complete(l.id, l.token), AckStatus::stale);
  EXPECT_EQ(q().complete(again.id, again.token), AckStatus::ok);
}

TEST_P(BackendTest, LimitZeroIsRefusedAndChangesNothing) {
  fill(A, 2);
  ASSERT_EQ(q().set_limit(A, 2), LaneStatus::ok);
  EXPECT_EQ(q().set_limit(A, 0), LaneStatus::invalid_argument);
  EXPECT_EQ(lane(A)->limit, 2U);
  ASSERT_EQ(q().clear_limit(A), LaneStatus::ok);
  EXPECT_EQ(lane(A)->limit, 0U);
}

TEST_P(BackendTest, CapabilitiesSayWhatTheBackendShows) {
  const BackendCapabilities c = q().capabilities();
  EXPECT_EQ(c.process_records, !is_valkey());
  EXPECT_EQ(c.wait_histograms, !is_valkey());
  EXPECT_EQ(c.fixed_capacity, !is_valkey());
  EXPECT_EQ(c.fsck, !is_valkey());
  if (is_valkey()) {
    EXPECT_TRUE(q().processes().empty());
  }
}

}  // namespace
}  // namespace fairlane
