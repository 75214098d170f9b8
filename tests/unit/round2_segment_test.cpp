// The second round's behaviours on the segment alone (issue 10): fencing
// tokens across re-admissions, release, reassign, the group-affinity claim,
// the batch paths' statuses, dead letters. tests/conformance/round2_test.cpp
// runs the common cases on every backend; this file has what it does not:
// longer histories of one id, positions by id in the new lane, refusals of
// every kind inside one batch, the segment's own counts around each.
#include "queue_fixture.hpp"

#include <array>
#include <bit>
#include <cstring>
#include <set>
#include <type_traits>

namespace fairlane {
namespace {

using test::QueueTest;
using test::seq_string;

const BrandedId A = BrandedId::make("AAA", 1);
const BrandedId B = BrandedId::make("BBB", 1);
const BrandedId C = BrandedId::make("CCC", 1);
const BrandedId D = BrandedId::make("DDD", 1);

// Bytes BrandedId::parse would refuse, smuggled in.
BrandedId forged_id(const char (&text)[kIdLength + 1]) {
  static_assert(sizeof(BrandedId) == kIdLength + 2);
  static_assert(std::is_trivially_copyable_v<BrandedId>);
  std::array<char, sizeof(BrandedId)> bytes{};  // the text, then zero padding
  std::memcpy(bytes.data(), text, kIdLength);
  return std::bit_cast<BrandedId>(bytes);
}

class Round2Segment : public QueueTest {
 protected:
  // Every token in `old` is refused for `id` by all four fenced calls, with
  // `want` (stale while the id exists, gone once it does not).
  void expect_refused(const BrandedId& id, const std::vector<Token>& old, AckStatus want) {
    const FailStatus want_fail = want == AckStatus::stale ? FailStatus::stale : FailStatus::gone;
    for (const Token t : old) {
      EXPECT_EQ(q().complete(id, t), want) << "token " << t.value;
      EXPECT_EQ(q().extend(id, t, 1000), want) << "token " << t.value;
      EXPECT_EQ(q().release(id, t), want) << "token " << t.value;
      EXPECT_EQ(q().fail(id, t, FailOptions{0, 100, "stale"}), want_fail) << "token " << t.value;
    }
  }
};

// ---------------------------------------------------------------- tokens

TEST_F(Round2Segment, ATokenIsNeverReusedOverTwentyLivesOfOneId) {
  const BrandedId x = q().mint();
  std::vector<Token> tokens;  // every lease of x, ever
  std::set<std::uint64_t> distinct;
  auto lease_x = [&](std::uint32_t want_attempt) {
    Lease l = claim_one();
    EXPECT_EQ(l.id, x);
    EXPECT_EQ(l.attempt, want_attempt);
    EXPECT_NE(l.token.value, 0U);
    EXPECT_TRUE(distinct.insert(l.token.value).second) << "token " << l.token.value << " handed out twice";
    auto info = q().job(x);
    EXPECT_TRUE(info.has_value() && info->state == JobState::leased && info->token == l.token);
    // While x is leased under l, every earlier token is stale.
    expect_refused(x, tokens, AckStatus::stale);
    tokens.push_back(l.token);
    return l;
  };
  for (int life = 0; life < 20; ++life) {
    SCOPED_TRACE("life " + std::to_string(life));
    ASSERT_EQ(q().enqueue(A, x, "life " + std::to_string(life)), EnqueueStatus::enqueued);
    Lease l = lease_x(1);
    switch (life % 4) {
      case 0: break;
      case 1:  // expires, and is delivered again
        ASSERT_EQ(q().extend(x, l.token, 10), AckStatus::ok);
        q().advance_clock(20);
        ASSERT_EQ(q().tick(), 1U);
        l = lease_x(2);
        break;
      case 2:  // fails once, is released, then served at the attempt the failure made
        ASSERT_EQ(q().fail(x, l.token, FailOptions{0, 5, "once"}), FailStatus::retrying);
        l = lease_x(2);
        ASSERT_EQ(q().release(x, l.token), AckStatus::ok);
        l = lease_x(2);
        break;
      case 3:  // dead-lettered and requeued: attempt 1 again, a new token
        ASSERT_EQ(q().fail(x, l.token, FailOptions{0, 1, "dead"}), FailStatus::dead);
        EXPECT_EQ(q().job(x)->token, Token());
        ASSERT_EQ(q().requeue_dead(x), AckStatus::ok);
        l = lease_x(1);
        break;
    }
    ASSERT_EQ(q().complete(x, l.token), AckStatus::ok);
    // Gone now: every token of every life answers gone.
    expect_refused(x, tokens, AckStatus::gone);
  }
  EXPECT_EQ(distinct.size(), tokens.size());
  EXPECT_GE(tokens.size(), 35U);
  EXPECT_TRUE(q().fsck().clean());
}

TEST_F(Round2Segment, APendingJobRefusesItsOldTokensAndShowsNone) {
  auto ids = fill(A, 1);
  Lease l = claim_one(50);
  q().advance_clock(100);
  ASSERT_EQ(q().tick(), 1U);  // back to pending
  auto info = q().job(ids[0]);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->state, JobState::pending);
  EXPECT_EQ(info->token, Token());
  expect_refused(ids[0], {l.token}, AckStatus::stale);
  EXPECT_EQ(q().depth(A), 1U);
  EXPECT_EQ(q().snapshot().leased, 0U);
}

// ---------------------------------------------------------------- release

TEST_F(Round2Segment, ReleaseReturnsAJobToItsMintPositionAtItsAttempt) {
  auto a = fill(A, 4);
  Lease l0 = claim_one(), l1 = claim_one(), l2 = claim_one();
  ASSERT_EQ(l1.id, a[1]);
  ASSERT_EQ(q().release(a[1], l1.token), AckStatus::ok);
  auto info = q().job(a[1]);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->state, JobState::pending);
  EXPECT_EQ(info->token, Token());
  EXPECT_EQ(info->attempt, 0U);  // no delivery counted yet
  EXPECT_EQ(lane(A)->active, 2U);
  EXPECT_EQ(q().depth(A), 2U);
  // Released five times over: still attempt 1, never a repeated token.
  std::set<std::uint64_t> seen = {l0.token.value, l1.token.value, l2.token.value};
  Token last = l1.token;
  for (int i = 0; i < 5; ++i) {
    Lease again = claim_one();
    ASSERT_EQ(again.id, a[1]) << "a released job comes back before newer ones (" << i << ")";
    EXPECT_EQ(again.attempt, 1U);
    EXPECT_TRUE(seen.insert(again.token.value).second);
    EXPECT_EQ(q().complete(a[1], last), AckStatus::stale) << "the released token still works";
    ASSERT_EQ(q().release(a[1], again.token), AckStatus::ok);
    EXPECT_EQ(q().release(a[1], again.token), AckStatus::stale);  // dead at once
    last = again.token;
  }
  // A failure does count.
  Lease again = claim_one();
  ASSERT_EQ(again.id, a[1]);
  ASSERT_EQ(q().fail(a[1], again.token, FailOptions{0, 5, "real"}), FailStatus::retrying);
  Lease third = claim_one();
  EXPECT_EQ(third.id, a[1]);
  EXPECT_EQ(third.attempt, 2U);
  EXPECT_EQ(claim_one().id, a[3]);
}

TEST_F(Round2Segment, ReleaseGivesBackTheLimitSlotAndRespectsPause) {
  auto a = fill(A, 2);
  ASSERT_EQ(q().set_limit(A, 1), LaneStatus::ok);
  Lease l = claim_one();
  Lease none;
  EXPECT_EQ(q().try_claim(none, 60000), ClaimStatus::empty);
  ASSERT_EQ(q().release(l.id, l.token), AckStatus::ok);
  EXPECT_EQ(lane(A)->active, 0U);
  EXPECT_TRUE(lane(A)->ringed);
  l = claim_one();
  EXPECT_EQ(l.id, a[0]);
  ASSERT_EQ(q().pause(A), LaneStatus::ok);
  ASSERT_EQ(q().release(l.id, l.token), AckStatus::ok);
  EXPECT_EQ(q().try_claim(none, 60000), ClaimStatus::empty) << "a release rang a paused lane";
  EXPECT_FALSE(lane(A)->ringed);
  EXPECT_EQ(q().depth(A), 2U);
  ASSERT_EQ(q().resume(A), LaneStatus::ok);
  EXPECT_EQ(claim_one().id, a[0]);
  EXPECT_TRUE(q().fsck().clean());
}

TEST_F(Round2Segment, ReleaseOfAnExpiredLeaseIsStale) {
  auto a = fill(A, 1);
  Lease l = claim_one(50);
  q().advance_clock(100);
  ASSERT_EQ(q().tick(), 1U);
  EXPECT_EQ(q().release(a[0], l.token), AckStatus::stale);
  Lease again = claim_one();
  EXPECT_EQ(again.attempt, 2U);  // an expiry is a failed delivery
  ASSERT_EQ(q().release(a[0], again.token), AckStatus::ok);
  EXPECT_EQ(claim_one().attempt, 2U);
}

TEST_F(Round2Segment, ReleaseAllGivesBackOnlyThisHandlesLeases) {
  auto a = fill(A, 3);
  auto other = Queue::open(q().name());
  ASSERT_TRUE(other.ok());
  Lease mine = claim_one();
  Lease t1, t2;
  ASSERT_TRUE(other->claim(t1, 60000));
  ASSERT_TRUE(other->claim(t2, 60000));
  EXPECT_EQ(other->release_all(), 2U);
  EXPECT_EQ(q().snapshot().leased, 1U);
  EXPECT_EQ(q().complete(t1.id, t1.token), AckStatus::stale);
  EXPECT_EQ(q().complete(mine.id, mine.token), AckStatus::ok);
  Lease r1 = claim_one(), r2 = claim_one();
  EXPECT_EQ(r1.id, t1.id);
  EXPECT_EQ(r2.id, t2.id);
  EXPECT_EQ(r1.attempt, 1U);
  EXPECT_EQ(r2.attempt, 1U);
}

// ---------------------------------------------------------------- reassign

TEST_F(Round2Segment, ReassignPutsTheJobAtItsIdPositionWithItsAttemptAndPayload) {
  const BrandedId b0 = q().mint(), x = q().mint(), b1 = q().mint();
  ASSERT_EQ(q().enqueue(A, x, "x's payload"), EnqueueStatus::enqueued);
  Lease l = claim_one();
  ASSERT_EQ(q().fail(x, l.token, FailOptions{0, 5, "first try"}), FailStatus::retrying);
  ASSERT_EQ(q().enqueue(B, b0, "b0"), EnqueueStatus::enqueued);
  ASSERT_EQ(q().enqueue(B, b1, "b1"), EnqueueStatus::enqueued);
  ASSERT_EQ(q().reassign(x, B), MoveStatus::moved);
  EXPECT_EQ(q().depth(A), 0U);
  EXPECT_EQ(q().depth(B), 3U);
  EXPECT_FALSE(lane(A).has_value() && lane(A)->ringed);
  auto info = q().job(x, true);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->group, B);
  EXPECT_EQ(info->state, JobState::pending);
  EXPECT_EQ(info->last_error, "first try");
  EXPECT_EQ(info->payload, "x's payload");
  Lease s0 = claim_one(), s1 = claim_one(), s2 = claim_one();
  EXPECT_EQ(s0.id, b0);
  EXPECT_EQ(s1.id, x);
  EXPECT_EQ(s1.group, B);
  EXPECT_EQ(s1.attempt, 2U);  // the failure before the move still counts
  EXPECT_EQ(s1.payload, "x's payload");
  EXPECT_EQ(s2.id, b1);
  EXPECT_TRUE(q().fsck().clean());
}

TEST_F(Round2Segment, ReassignMovesOnlyPendingJobs) {
  const BrandedId leased = q().mint(), later = q().mint(), dead = q().mint();
  ASSERT_EQ(q().enqueue(A, leased, "l"), EnqueueStatus::enqueued);
  Lease l = claim_one();
  ASSERT_EQ(q().enqueue(A, later, "s", EnqueueOptions{60'000}), EnqueueStatus::enqueued);
  ASSERT_EQ(q().enqueue(A, dead, "d"), EnqueueStatus::enqueued);
  Lease d = claim_one();
  ASSERT_EQ(q().fail(dead, d.token, FailOptions{0, 1, "x"}), FailStatus::dead);
  const Snapshot before = q().snapshot();
  EXPECT_EQ(q().reassign(leased, B), MoveStatus::not_pending);
  EXPECT_EQ(q().reassign(later, B), MoveStatus::not_pending);
  EXPECT_EQ(q().reassign(dead, B), MoveStatus::not_pending);
  EXPECT_EQ(q().reassign(q().mint(), B), MoveStatus::gone);
  EXPECT_EQ(q().reassign(BrandedId{}, B), MoveStatus::gone);
  EXPECT_EQ(q().reassign(leased, forged_id("grp0000000000A")), MoveStatus::invalid_group);
  const Snapshot after = q().snapshot();
  EXPECT_EQ(after.leased, before.leased);
  EXPECT_EQ(after.scheduled, before.scheduled);
  EXPECT_EQ(after.dead, before.dead);
  EXPECT_EQ(q().job(leased)->group, A);
  EXPECT_EQ(q().job(later)->group, A);
  EXPECT_EQ(q().job(dead)->group, A);
  EXPECT_FALSE(lane(B).has_value() && lane(B)->depth != 0);
  EXPECT_EQ(q().complete(leased, l.token), AckStatus::ok);  // the lease was not disturbed
  EXPECT_EQ(q().reassign(leased, B), MoveStatus::gone);     // completed: gone
}

TEST_F(Round2Segment, ReassignedJobObeysItsNewLane) {
  auto a = fill(A, 1);
  ASSERT_EQ(q().pause(B), LaneStatus::ok);
  ASSERT_EQ(q().reassign(a[0], B), MoveStatus::moved);
  Lease l;
  EXPECT_EQ(q().try_claim(l, 60000), ClaimStatus::empty) << "served from a paused lane";
  EXPECT_EQ(q().depth(B), 1U);
  ASSERT_EQ(q().resume(B), LaneStatus::ok);
  l = claim_one();
  EXPECT_EQ(l.id, a[0]);
  EXPECT_EQ(l.group, B);
}

TEST_F(Round2Segment, ReassignToANewGroupWithNoLaneLeftIsRefused) {
  QueueOptions o = small_options();
  o.lanes = 4;
  make_queue(o);
  auto a = fill(A, 2);
  fill(B, 1);
  fill(C, 1);
  fill(D, 1);
  const BrandedId e = BrandedId::make("EEE", 1);
  EXPECT_EQ(q().reassign(a[0], e), MoveStatus::lanes_full);
  EXPECT_EQ(q().job(a[0])->group, A);
  EXPECT_EQ(q().depth(A), 2U);
  EXPECT_FALSE(lane(e).has_value());
  EXPECT_EQ(q().reassign(a[0], B), MoveStatus::moved);  // a lane that exists
}

// ---------------------------------------------------------------- claim_lane_batch

TEST_F(Round2Segment, ClaimLaneBatchIsOneRingStep) {
  auto a = fill(A, 3);
  auto b = fill(B, 3);
  auto c = fill(C, 3);
  std::vector<Lease> two(2);
  ASSERT_EQ(q().claim_lane_batch(two, 60000), 2U);
  EXPECT_EQ(two[0].id, a[0]);
  EXPECT_EQ(two[1].id, a[1]);
  EXPECT_EQ(two[0].deadline_ms, two[1].deadline_ms);
  EXPECT_NE(two[0].token, two[1].token);
  EXPECT_EQ(two[0].attempt, 1U);
  // The ring moved one step: B and C come next, then A's last.
  EXPECT_EQ(claim_one().id, b[0]);
  EXPECT_EQ(claim_one().id, c[0]);
  EXPECT_EQ(claim_one().id, a[2]);
  std::vector<Lease> many(10);
  ASSERT_EQ(q().claim_lane_batch(many, 60000), 2U);  // B's rest: one lane only
  EXPECT_EQ(many[0].id, b[1]);
  EXPECT_EQ(many[1].id, b[2]);
  ASSERT_EQ(q().claim_lane_batch(many, 60000), 2U);
  EXPECT_EQ(many[0].id, c[1]);
  EXPECT_EQ(many[1].id, c[2]);
  EXPECT_EQ(q().claim_lane_batch(many, 60000), 0U);
  EXPECT_EQ(q().snapshot().leased, 9U);
}

TEST_F(Round2Segment, ClaimLaneBatchStopsAtHeadroomAndSkipsPausedLanes) {
  auto a = fill(A, 6);
  auto b = fill(B, 4);
  ASSERT_EQ(q().set_limit(A, 3), LaneStatus::ok);
  ASSERT_EQ(q().pause(B), LaneStatus::ok);
  Lease first = claim_one();
  ASSERT_EQ(first.id, a[0]);
  std::vector<Lease> out(10);
  ASSERT_EQ(q().claim_lane_batch(out, 60000), 2U);  // headroom 2
  EXPECT_EQ(out[0].id, a[1]);
  EXPECT_EQ(out[1].id, a[2]);
  EXPECT_EQ(lane(A)->active, 3U);
  EXPECT_EQ(q().claim_lane_batch(out, 60000), 0U);  // A at its ceiling, B paused
  q().pause_all();
  ASSERT_EQ(q().resume(B), LaneStatus::ok);
  EXPECT_EQ(q().claim_lane_batch(out, 60000), 0U);  // the queue is paused
  q().resume_all();
  ASSERT_EQ(q().claim_lane_batch(out, 60000), 4U);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(out[i].id, b[i]);
  EXPECT_EQ(q().claim_lane_batch(std::span<Lease>(), 60000), 0U);
}

// ---------------------------------------------------------------- batches

TEST_F(Round2Segment, EnqueueBatchGivesEveryRefusalItsOwnStatusAndWritesNothingForIt) {
  QueueOptions o = small_options();
  o.jobs = 8;
  o.payload_bytes = 16;
  make_queue(o);
  const BrandedId dup = q().mint();
  ASSERT_EQ(q().enqueue(A, dup, "first"), EnqueueStatus::enqueued);
  EnqueueOptions bad_retry;
  bad_retry.retry.backoff = Backoff::exponential(std::chrono::milliseconds(1000), std::chrono::milliseconds(10));
  std::vector<BrandedId> ids;
  for (int i = 0; i < 13; ++i) ids.push_back(q().mint());
  const std::string big(17, 'x');
  const std::vector<EnqueueItem> items = {
      {A, ids[0], "a"},                                            // 0 enqueued
      {A, dup, "again"},                                           // 1 duplicate
      {B, BrandedId::make("USR", ids[1].snowflake()), "foreign"},  // 2 kind_mismatch
      {A, forged_id("JOB00000000-01"), "bad id"},                  // 3 invalid_id
      {forged_id("grp0000000000A"), ids[2], "bad group"},          // 4 invalid_group
      {A, ids[3], big},                                            // 5 payload_too_large
      {A, ids[4], "bad retry", bad_retry},                         // 6 invalid_argument
      {C, ids[5], "later", EnqueueOptions{60'000}},                // 7 enqueued, scheduled
      {B, ids[6], "b"},                                            // 8..12 enqueued: 8 slots used
      {B, ids[7], "b"},
      {B, ids[8], "b"},
      {B, ids[9], "b"},
      {B, ids[10], "b"},
      {B, ids[11], "over"},                                        // 13 full
      {D, ids[12], "over, new group"},                             // 14 full
  };
  std::vector<EnqueueStatus> st(items.size() + 2, EnqueueStatus::corrupt);  // the last two: not ours
  EXPECT_EQ(q().enqueue_batch(items, st), 7U);
  const std::vector<EnqueueStatus> want = {
      EnqueueStatus::enqueued,          EnqueueStatus::duplicate,     EnqueueStatus::kind_mismatch,
      EnqueueStatus::invalid_id,        EnqueueStatus::invalid_group, EnqueueStatus::payload_too_large,
      EnqueueStatus::invalid_argument,  EnqueueStatus::enqueued,      EnqueueStatus::enqueued,
      EnqueueStatus::enqueued,          EnqueueStatus::enqueued,      EnqueueStatus::enqueued,
      EnqueueStatus::enqueued,          EnqueueStatus::full,          EnqueueStatus::full,
      EnqueueStatus::corrupt,           EnqueueStatus::corrupt};
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(st[i], want[i]) << "item " << i;
  for (int i : {2, 3, 4, 11, 12}) EXPECT_FALSE(q().job(ids[std::size_t(i)]).has_value()) << "refused id " << i;
  EXPECT_EQ(q().job(dup, true)->payload, "first");
  EXPECT_EQ(q().job(ids[5])->state, JobState::scheduled);
  EXPECT_FALSE(lane(D).has_value());
  const Snapshot s = q().snapshot();
  EXPECT_EQ(s.pending, 7U);
  EXPECT_EQ(s.scheduled, 1U);
  EXPECT_EQ(s.counters.enqueued, 8U);
  EXPECT_EQ(q().depth(A), 2U);
  EXPECT_EQ(q().depth(B), 5U);
  // Room for one more: the refused id is new to the queue.
  Lease l = claim_one();
  ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  std::vector<EnqueueItem> retry = {{D, ids[12], "now"}, {D, ids[11], "no room"}};
  EXPECT_EQ(q().enqueue_batch(retry, st), 1U);
  EXPECT_EQ(st[0], EnqueueStatus::enqueued);
  EXPECT_EQ(st[1], EnqueueStatus::full);
  EXPECT_EQ(q().enqueue_batch(std::span<const EnqueueItem>(), st), 0U);
  EXPECT_TRUE(q().fsck().clean());
}

TEST_F(Round2Segment, EnqueueBatchSaysLanesFullPerItem) {
  QueueOptions o = small_options();
  o.lanes = 2;
  make_queue(o);
  const BrandedId g1 = BrandedId::make("GGA", 1), g2 = BrandedId::make("GGB", 1), g3 = BrandedId::make("GGC", 1);
  std::vector<BrandedId> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(q().mint());
  const std::vector<EnqueueItem> items = {{g1, ids[0], "1"}, {g2, ids[1], "2"}, {g3, ids[2], "3"}, {g1, ids[3], "4"}};
  std::vector<EnqueueStatus> st(items.size());
  EXPECT_EQ(q().enqueue_batch(items, st), 3U);
  EXPECT_EQ(st[0], EnqueueStatus::enqueued);
  EXPECT_EQ(st[1], EnqueueStatus::enqueued);
  EXPECT_EQ(st[2], EnqueueStatus::lanes_full);
  EXPECT_EQ(st[3], EnqueueStatus::enqueued);
  EXPECT_FALSE(q().job(ids[2]).has_value());
  EXPECT_FALSE(lane(g3).has_value());
  EXPECT_EQ(q().snapshot().pending, 3U);
}

TEST_F(Round2Segment, CompleteBatchGivesEveryLeaseItsOwnStatus) {
  auto a = fill(A, 4);
  std::vector<Lease> held(3);
  ASSERT_EQ(q().claim_batch(held, 60000), 3U);
  Lease stale = held[1];
  stale.token = Token(held[1].token.value ^ 0x5A5A5A5A00000000ULL);
  Lease unknown = held[0];
  unknown.id = q().mint();
  Lease pending = held[0];
  pending.id = a[3];  // pending, not leased: no token is right
  const std::vector<Lease> acks = {held[0], stale, unknown, pending, held[2], held[0], held[1]};
  std::vector<AckStatus> st(acks.size() + 1, AckStatus::corrupt);
  EXPECT_EQ(q().complete_batch(acks, st), 3U);
  const std::vector<AckStatus> want = {AckStatus::ok,   AckStatus::stale, AckStatus::gone,   AckStatus::stale,
                                       AckStatus::ok,   AckStatus::gone,  AckStatus::ok,     AckStatus::corrupt};
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_EQ(st[i], want[i]) << "lease " << i;
  const Snapshot s = q().snapshot();
  EXPECT_EQ(s.leased, 0U);
  EXPECT_EQ(s.pending, 1U);
  EXPECT_EQ(s.counters.completed, 3U);
  EXPECT_EQ(q().complete_batch(std::span<const Lease>(), st), 0U);
}

// ---------------------------------------------------------------- dead letters

TEST_F(Round2Segment, DeadLettersAcrossLanesAreListedInIdOrder) {
  // Minted A B C A B C ...; dead-lettered lane by lane, newest lane first.
  std::vector<BrandedId> ids;
  const BrandedId lanes[3] = {A, B, C};
  for (int i = 0; i < 9; ++i) {
    ids.push_back(q().mint());
    ASSERT_EQ(q().enqueue(lanes[i % 3], ids.back(), "p"), EnqueueStatus::enqueued);
  }
  std::vector<Lease> held(9);
  ASSERT_EQ(q().claim_batch(held, 60000), 9U);
  for (const BrandedId& g : {C, A, B})
    for (const Lease& l : held)
      if (l.group == g) {
        ASSERT_EQ(q().fail(l.id, l.token, FailOptions{0, 1, g.string()}), FailStatus::dead);
      }
  JobFilter dead;
  dead.state = JobState::dead;
  auto d = q().jobs(dead);
  ASSERT_EQ(d.size(), 9U);
  for (std::size_t i = 0; i < 9; ++i) {
    EXPECT_EQ(d[i].id, ids[i]);
    EXPECT_EQ(d[i].group, lanes[i % 3]);
    EXPECT_EQ(d[i].state, JobState::dead);
    EXPECT_EQ(d[i].last_error, lanes[i % 3].string());
    EXPECT_EQ(d[i].attempt, 1U);
  }
  dead.group = B;
  dead.limit = 2;
  auto db = q().jobs(dead);
  ASSERT_EQ(db.size(), 2U);
  EXPECT_EQ(db[0].id, ids[1]);
  EXPECT_EQ(db[1].id, ids[4]);
  EXPECT_EQ(q().snapshot().dead, 9U);
}

TEST_F(Round2Segment, RequeueDeadStartsAgainAtItsMintPosition) {
  auto a = fill(A, 1);
  std::vector<Token> tokens;
  for (std::uint32_t attempt = 1; attempt <= 3; ++attempt) {
    Lease l = claim_one();
    ASSERT_EQ(l.attempt, attempt);
    tokens.push_back(l.token);
    ASSERT_EQ(q().fail(a[0], l.token, FailOptions{0, 3, "x"}), attempt < 3 ? FailStatus::retrying : FailStatus::dead);
  }
  EXPECT_EQ(q().job(a[0])->state, JobState::dead);
  EXPECT_EQ(q().job(a[0])->attempt, 3U);
  auto newer = fill(A, 2);  // younger than the dead job
  EXPECT_EQ(q().requeue_dead(newer[0]), AckStatus::stale);  // pending, not dead
  EXPECT_EQ(q().requeue_dead(q().mint()), AckStatus::gone);
  ASSERT_EQ(q().requeue_dead(a[0]), AckStatus::ok);
  EXPECT_EQ(q().requeue_dead(a[0]), AckStatus::stale);
  EXPECT_EQ(q().snapshot().dead, 0U);
  EXPECT_EQ(q().job(a[0])->state, JobState::pending);
  expect_refused(a[0], tokens, AckStatus::stale);
  Lease l = claim_one();
  EXPECT_EQ(l.id, a[0]);  // ahead of the younger jobs
  EXPECT_EQ(l.attempt, 1U);
  for (const Token t : tokens) EXPECT_NE(l.token, t);
  EXPECT_EQ(q().requeue_dead(a[0]), AckStatus::stale);  // leased, not dead
  // It gets its full attempts again.
  ASSERT_EQ(q().fail(a[0], l.token, FailOptions{0, 3, "x"}), FailStatus::retrying);
  EXPECT_EQ(claim_one().attempt, 2U);
}

TEST_F(Round2Segment, RequeueDeadWithEveryLaneTakenWaitsForALane) {
  // A dead job holds no lane. Requeued while every lane is live with other
  // groups, it is requeued all the same (ok means it will be delivered): it
  // waits, due now, and enters its lane once one comes free.
  QueueOptions o = small_options();
  o.lanes = 2;
  make_queue(o);
  auto a = fill(A, 1);
  Lease l = claim_one();
  ASSERT_EQ(q().fail(a[0], l.token, FailOptions{0, 1, "x"}), FailStatus::dead);
  // A's lane is idle now: C's enqueue reclaims it.
  fill(B, 1);
  fill(C, 1);
  EXPECT_FALSE(lane(A).has_value()) << "a group with only a dead job keeps no lane";
  EXPECT_EQ(q().enqueue(D, q().mint(), "x"), EnqueueStatus::lanes_full);
  ASSERT_EQ(q().requeue_dead(a[0]), AckStatus::ok);
  EXPECT_EQ(q().requeue_dead(a[0]), AckStatus::stale);  // no longer dead
  EXPECT_EQ(q().snapshot().dead, 0U);
  EXPECT_EQ(q().job(a[0])->state, JobState::scheduled);
  // B and C are served and leave; the next sweep links A's job.
  for (int i = 0; i < 2; ++i) {
    Lease x = claim_one();
    EXPECT_NE(x.group, A);
    ASSERT_EQ(q().complete(x.id, x.token), AckStatus::ok);
  }
  q().advance_clock(o.recovery_ms);
  q().tick();
  l = claim_one();
  EXPECT_EQ(l.id, a[0]);
  EXPECT_EQ(l.group, A);
  EXPECT_EQ(l.attempt, 1U);
  EXPECT_EQ(q().requeue_all_dead(), 0U);
}

TEST_F(Round2Segment, PurgeDeadRemovesOnlyTheDeadAndFreesTheirSlots) {
  QueueOptions o = small_options();
  o.jobs = 8;
  make_queue(o);
  std::vector<BrandedId> dead_ids;
  for (int i = 0; i < 3; ++i) {
    dead_ids.push_back(q().mint());
    ASSERT_EQ(q().enqueue(A, dead_ids.back(), "d"), EnqueueStatus::enqueued);
    Lease l = claim_one();
    ASSERT_EQ(q().fail(l.id, l.token, FailOptions{0, 1, "d"}), FailStatus::dead);
  }
  auto pending = fill(B, 4);
  Lease leased = claim_one();
  ASSERT_EQ(q().enqueue(C, q().mint(), "later", EnqueueOptions{60'000}), EnqueueStatus::enqueued);
  EXPECT_EQ(q().enqueue(C, q().mint(), "no room"), EnqueueStatus::full);
  EXPECT_EQ(q().purge_dead(), 3U);
  EXPECT_EQ(q().purge_dead(), 0U);
  const Snapshot s = q().snapshot();
  EXPECT_EQ(s.dead, 0U);
  EXPECT_EQ(s.pending, 3U);
  EXPECT_EQ(s.leased, 1U);
  EXPECT_EQ(s.scheduled, 1U);
  for (const auto& id : dead_ids) {
    EXPECT_FALSE(q().job(id).has_value());
    EXPECT_EQ(q().requeue_dead(id), AckStatus::gone);
  }
  EXPECT_EQ(q().complete(leased.id, leased.token), AckStatus::ok);
  // The three slots are back, and the purged ids may come again.
  for (const auto& id : dead_ids) EXPECT_EQ(q().enqueue(A, id, "again"), EnqueueStatus::enqueued);
  EXPECT_EQ(q().enqueue(A, q().mint(), "one more"), EnqueueStatus::enqueued);  // the completed one's
  EXPECT_EQ(q().enqueue(A, q().mint(), "no room"), EnqueueStatus::full);
  EXPECT_TRUE(q().fsck().clean());
}

TEST_F(Round2Segment, RequeueAllDeadCountsAndKeepsIdOrder) {
  auto a = fill(A, 4);
  std::vector<Lease> held(4);
  ASSERT_EQ(q().claim_batch(held, 60000), 4U);
  for (int i : {3, 0, 2}) ASSERT_EQ(q().fail(held[i].id, held[i].token, FailOptions{0, 1, "x"}), FailStatus::dead);
  ASSERT_EQ(q().complete(held[1].id, held[1].token), AckStatus::ok);
  EXPECT_EQ(q().requeue_all_dead(), 3U);
  EXPECT_EQ(q().requeue_all_dead(), 0U);
  EXPECT_EQ(q().depth(A), 3U);
  Lease l0 = claim_one(), l2 = claim_one(), l3 = claim_one();
  EXPECT_EQ(l0.id, a[0]);
  EXPECT_EQ(l2.id, a[2]);
  EXPECT_EQ(l3.id, a[3]);
  EXPECT_EQ(l0.attempt, 1U);
  EXPECT_EQ(l3.attempt, 1U);
}

}  // namespace
}  // namespace fairlane
