// The behaviour every backend must share, one test body per behaviour, run
// against the segment and against Valkey (INSTANTIATE at the end). Nothing
// here knows which backend it drives; where the two may differ by design
// (capacity, clocks), the test does not look.
#include <array>
#include <atomic>
#include <bit>
#include <cstring>
#include <set>
#include <thread>

#include "backend_fixture.hpp"

namespace fairlane {
namespace {

using test::BackendKind;
using test::BackendTest;
using test::pattern;
using test::seq_string;

const BrandedId A = BrandedId::make("AAA", 1);
const BrandedId B = BrandedId::make("BBB", 1);
const BrandedId C = BrandedId::make("CCC", 1);
const BrandedId D = BrandedId::make("DDD", 1);

BrandedId forged_id(const char (&text)[kIdLength + 1]) {
  std::array<char, sizeof(BrandedId)> bytes{};  // the text, then zero padding
  std::memcpy(bytes.data(), text, kIdLength);
  return std::bit_cast<BrandedId>(bytes);
}

std::vector<BrandedId> groups_of(std::span<const Lease> leases) {
  std::vector<BrandedId> out;
  for (const auto& l : leases) out.push_back(l.group);
  return out;
}

// ---------------------------------------------------------------- ids

TEST_P(BackendTest, MintIsOfTheJobKindAndStrictlyIncreasing) {
  EXPECT_EQ(q().job_kind(), "JOB");
  BrandedId last = q().mint();
  EXPECT_EQ(last.kind(), "JOB");
  Backend& other = another();
  for (int i = 0; i < 200; ++i) {
    const BrandedId next = (i % 2 ? other : q()).mint();
    ASSERT_LT(last, next) << "mint " << i;
    last = next;
  }
}

// ---------------------------------------------------------------- rotation

TEST_P(BackendTest, RotationServesLanesInTurn) {
  fill(A, 4);
  fill(B, 4);
  fill(C, 4);
  EXPECT_EQ(seq_string(claim_groups(6)), seq_string(pattern({A, B, C}, 2)));
}

TEST_P(BackendTest, RotationWithInterleavedEnqueues) {
  for (int i = 0; i < 3; ++i) {
    fill(A, 1);
    fill(B, 1);
    fill(C, 1);
  }
  EXPECT_EQ(seq_string(claim_groups(9)), seq_string(pattern({A, B, C}, 3)));
}

TEST_P(BackendTest, RotationHoldsAcrossClients) {
  fill(A, 3);
  fill(B, 3);
  fill(C, 3);
  Backend& other = another();
  std::vector<BrandedId> served;
  for (int i = 0; i < 9; ++i) {
    Lease l;
    ASSERT_TRUE((i % 2 ? other : q()).claim(l, 60000));
    served.push_back(l.group);
  }
  EXPECT_EQ(seq_string(served), seq_string(pattern({A, B, C}, 3)));
}

TEST_P(BackendTest, WithinALaneServedInIdOrder) {
  auto ids = fill(A, 5);
  const BrandedId old = q().mint();  // minted first, enqueued last: goes to its mint position
  auto more = fill(A, 2);
  ASSERT_EQ(q().enqueue(A, old, "old"), EnqueueStatus::enqueued);
  std::vector<BrandedId> expected = ids;
  expected.push_back(old);
  expected.insert(expected.end(), more.begin(), more.end());
  for (const auto& want : expected) {
    Lease l = claim_one();
    EXPECT_EQ(l.id, want);
    EXPECT_EQ(l.group, A);
    EXPECT_EQ(l.attempt, 1U);
  }
  Lease l;
  EXPECT_FALSE(q().claim(l, 1000));
}

TEST_P(BackendTest, ClaimReturnsPayloadAndGroup) {
  const BrandedId id = q().mint();
  const std::string payload("hello\0world", 11);  // binary-safe
  ASSERT_EQ(q().enqueue(B, id, payload), EnqueueStatus::enqueued);
  Lease l = claim_one();
  EXPECT_EQ(l.id, id);
  EXPECT_EQ(l.group, B);
  EXPECT_EQ(l.payload, payload);
  EXPECT_EQ(l.attempt, 1U);
  const BrandedId id2 = q().mint();
  ASSERT_EQ(q().enqueue(B, id2, ""), EnqueueStatus::enqueued);
  ASSERT_TRUE(q().claim(l, 1000));
  EXPECT_EQ(l.id, id2);
  EXPECT_EQ(l.payload, "");
}

TEST_P(BackendTest, EmptyGroupRidesTheDefaultLane) {
  const BrandedId id = q().mint();
  ASSERT_EQ(q().enqueue(BrandedId{}, id, "d"), EnqueueStatus::enqueued);
  const auto def = BrandedId::parse(kDefaultGroup);
  ASSERT_TRUE(def.has_value());
  EXPECT_EQ(q().depth(*def), 1U);
  Lease l = claim_one();
  EXPECT_EQ(l.id, id);
  EXPECT_EQ(l.group, *def);
}

TEST_P(BackendTest, ServedCountsStayWithinOne) {
  const std::vector<BrandedId> lanes = {A, B, C, D};
  const std::vector<int> depth = {40, 26, 60, 30};
  for (std::size_t i = 0; i < lanes.size(); ++i) fill(lanes[i], depth[i]);
  std::map<BrandedId, int> served;
  for (int n = 0; n < 25 * 4; ++n) {
    const Snapshot before = q().snapshot();
    ASSERT_EQ(before.ring.size(), lanes.size()) << "after " << n << " claims";
    Lease l = claim_one();
    EXPECT_EQ(l.group, before.ring.front()) << "claim " << n << " did not serve the ring head";
    served[l.group]++;
    int lo = 1 << 30, hi = 0;
    for (const auto& g : lanes) {
      lo = std::min(lo, served[g]);
      hi = std::max(hi, served[g]);
    }
    ASSERT_LE(hi - lo, 1) << "after " << n + 1 << " claims";
    const Snapshot after = q().snapshot();
    ASSERT_FALSE(after.ring.empty());
    EXPECT_EQ(after.ring.back(), l.group);
  }
  EXPECT_EQ(seq_string(claim_groups(4)), "AAA BBB CCC DDD");
  EXPECT_EQ(seq_string(q().snapshot().ring), "AAA CCC DDD");  // B emptied and left the ring
  auto lb = lane(B);
  ASSERT_TRUE(lb.has_value());
  EXPECT_FALSE(lb->ringed);
  EXPECT_EQ(lb->served, 26U);
}

TEST_P(BackendTest, SnapshotRingAndCountersMatchService) {
  fill(A, 3);
  fill(B, 3);
  fill(C, 3);
  EXPECT_EQ(seq_string(q().snapshot().ring), "AAA BBB CCC");
  (void)claim_one();
  EXPECT_EQ(seq_string(q().snapshot().ring), "BBB CCC AAA");
  EXPECT_EQ(seq_string(claim_groups(3)), "BBB CCC AAA");
  const Snapshot s = q().snapshot();
  for (const auto& li : s.lanes) {
    if (li.group == A) { EXPECT_EQ(li.served, 2U); }
    if (li.group == B || li.group == C) { EXPECT_EQ(li.served, 1U); }
    if (li.group == A || li.group == B || li.group == C) {
      EXPECT_TRUE(li.ringed);
      EXPECT_EQ(li.weight, 1U);
      EXPECT_EQ(li.limit, 0U);
      EXPECT_FALSE(li.paused);
    }
  }
  EXPECT_FALSE(s.paused);
  EXPECT_EQ(s.pending, 5U);
  EXPECT_EQ(s.leased, 4U);
  EXPECT_EQ(s.scheduled, 0U);
  EXPECT_EQ(s.dead, 0U);
  EXPECT_EQ(s.counters.claimed, 4U);
  EXPECT_EQ(s.counters.enqueued, 9U);
}

TEST_P(BackendTest, EmptyQueueClaimsNothing) {
  Lease l;
  EXPECT_FALSE(q().claim(l, 1000));
  EXPECT_TRUE(q().snapshot().ring.empty());
  std::array<Lease, 4> batch;
  EXPECT_EQ(q().claim_batch(batch, 1000), 0U);
}

TEST_P(BackendTest, LaneLeavesRingWhenEmptyAndReturnsOnEnqueue) {
  fill(A, 1);
  fill(B, 2);
  EXPECT_EQ(seq_string(claim_groups(3)), "AAA BBB BBB");
  EXPECT_TRUE(q().snapshot().ring.empty());
  fill(A, 1);
  auto l = lane(A);
  ASSERT_TRUE(l.has_value());
  EXPECT_TRUE(l->ringed);
  EXPECT_EQ(seq_string(claim_groups(2)), "AAA");
}

// ---------------------------------------------------------------- admission

TEST_P(BackendTest, DedupThenReenqueueAfterComplete) {
  const BrandedId id = q().mint();
  ASSERT_EQ(q().enqueue(A, id, "first"), EnqueueStatus::enqueued);
  EXPECT_EQ(q().enqueue(A, id, "second"), EnqueueStatus::duplicate);
  EXPECT_EQ(q().enqueue(B, id, "other lane"), EnqueueStatus::duplicate);
  EXPECT_EQ(q().depth(A), 1U);
  EXPECT_EQ(q().depth(B), 0U);
  Snapshot s = q().snapshot();
  EXPECT_EQ(s.pending, 1U);
  EXPECT_EQ(s.counters.enqueued, 1U);
  EXPECT_EQ(s.counters.duplicates, 2U);
  Lease l = claim_one();
  EXPECT_EQ(l.payload, "first");
  EXPECT_EQ(q().enqueue(A, id, "third"), EnqueueStatus::duplicate);  // leased is live
  EXPECT_EQ(q().complete(id, l.token), AckStatus::ok);
  EXPECT_EQ(q().enqueue(A, id, "again"), EnqueueStatus::enqueued);  // completed: admissible again
  Lease l2 = claim_one();
  EXPECT_EQ(l2.id, id);
  EXPECT_EQ(l2.payload, "again");
  EXPECT_EQ(l2.attempt, 1U);
}

TEST_P(BackendTest, KindMismatchWritesNothing) {
  fill(A, 1);
  const Snapshot before = q().snapshot();
  const BrandedId foreign = BrandedId::make("USR", q().mint().snowflake());
  EXPECT_EQ(q().enqueue(A, foreign, "x"), EnqueueStatus::kind_mismatch);
  EXPECT_EQ(q().enqueue(B, foreign, "x"), EnqueueStatus::kind_mismatch);  // new group: no lane made
  const Snapshot after = q().snapshot();
  EXPECT_EQ(after.pending, before.pending);
  EXPECT_EQ(after.lanes.size(), before.lanes.size());
  EXPECT_EQ(after.counters.enqueued, before.counters.enqueued);
  EXPECT_EQ(q().depth(B), 0U);
  Lease l = claim_one();
  EXPECT_EQ(l.id.kind(), "JOB");
  EXPECT_FALSE(q().claim(l, 1000));
}

TEST_P(BackendTest, MalformedIdsAreRefused) {
  const BrandedId bad_group = forged_id("grp0000000000A");
  const BrandedId bad_job = forged_id("JOB00000000-01");
  const BrandedId over_job = forged_id("JOBzzzzzzzzzzz");
  const Snapshot before = q().snapshot();
  EXPECT_EQ(q().enqueue(A, BrandedId{}, "x"), EnqueueStatus::invalid_id);
  EXPECT_EQ(q().enqueue(bad_group, q().mint(), "x"), EnqueueStatus::invalid_group);
  EXPECT_EQ(q().enqueue(A, bad_job, "x"), EnqueueStatus::invalid_id);
  EXPECT_EQ(q().enqueue(A, over_job, "x"), EnqueueStatus::invalid_id);
  EXPECT_EQ(q().set_limit(bad_group, 1), LaneStatus::invalid_group);
  EXPECT_EQ(q().pause(bad_group), LaneStatus::invalid_group);
  EXPECT_EQ(q().complete(bad_job, Token(1)), AckStatus::gone);
  const Snapshot after = q().snapshot();
  EXPECT_EQ(after.pending, before.pending);
  EXPECT_EQ(after.lanes.size(), before.lanes.size());
  EXPECT_EQ(after.counters.enqueued, before.counters.enqueued);
}

TEST_P(BackendTest, PayloadTooLargeWritesNothing) {
  const Snapshot before = q().snapshot();
  const BrandedId big = q().mint();
  EXPECT_EQ(q().enqueue(A, big, std::string(test::kConformancePayload + 1, 'x')), EnqueueStatus::payload_too_large);
  EXPECT_EQ(q().enqueue(A, big, std::string(4096, 'x')), EnqueueStatus::payload_too_large);
  EXPECT_EQ(q().snapshot().pending, before.pending);
  EXPECT_EQ(q().snapshot().lanes.size(), before.lanes.size());
  std::string exact(test::kConformancePayload, '\0');
  for (std::size_t i = 0; i < exact.size(); ++i) exact[i] = static_cast<char>(i * 7 + 1);
  EXPECT_EQ(q().enqueue(A, big, exact), EnqueueStatus::enqueued);  // the id was never written
  Lease l = claim_one();
  EXPECT_EQ(l.id, big);
  EXPECT_EQ(l.payload, exact);
}

// ---------------------------------------------------------------- pause

TEST_P(BackendTest, PauseParksLaneAndResumeRerings) {
  fill(A, 5);
  fill(B, 5);
  fill(C, 5);
  ASSERT_EQ(q().pause(B), LaneStatus::ok);
  auto lb = lane(B);
  ASSERT_TRUE(lb.has_value());
  EXPECT_TRUE(lb->paused);
  EXPECT_FALSE(lb->ringed);
  EXPECT_EQ(seq_string(q().snapshot().ring), "AAA CCC");
  EXPECT_EQ(seq_string(claim_groups(4)), "AAA CCC AAA CCC");
  fill(B, 1);  // enqueue into a paused lane keeps it parked
  EXPECT_EQ(q().depth(B), 6U);
  EXPECT_FALSE(lane(B)->ringed);
  EXPECT_EQ(seq_string(claim_groups(2)), "AAA CCC");
  ASSERT_EQ(q().resume(B), LaneStatus::ok);
  lb = lane(B);
  EXPECT_FALSE(lb->paused);
  EXPECT_TRUE(lb->ringed);
  EXPECT_EQ(seq_string(q().snapshot().ring), "AAA CCC BBB");  // back at the tail
  EXPECT_EQ(seq_string(claim_groups(6)), "AAA CCC BBB AAA CCC BBB");
}

TEST_P(BackendTest, PauseOfUnknownGroupMakesAParkedLane) {
  ASSERT_EQ(q().pause(D), LaneStatus::ok);
  ASSERT_TRUE(lane(D).has_value());
  fill(D, 1);
  Lease l;
  EXPECT_FALSE(q().claim(l, 1000));
  ASSERT_EQ(q().resume(D), LaneStatus::ok);
  ASSERT_TRUE(q().claim(l, 1000));
  EXPECT_EQ(l.group, D);
}

TEST_P(BackendTest, CompleteOnPausedLaneDoesNotRering) {
  fill(A, 3);
  Lease l = claim_one();
  ASSERT_EQ(q().pause(A), LaneStatus::ok);
  ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  EXPECT_FALSE(lane(A)->ringed);
  Lease l2;
  EXPECT_FALSE(q().claim(l2, 1000));
}

TEST_P(BackendTest, WholeQueuePause) {
  fill(A, 2);
  fill(B, 2);
  EXPECT_EQ(q().pause_all(), LaneStatus::ok);
  EXPECT_TRUE(q().snapshot().paused);
  Lease l;
  EXPECT_FALSE(q().claim(l, 1000));
  std::array<Lease, 4> batch;
  EXPECT_EQ(q().claim_batch(batch, 1000), 0U);
  fill(C, 1);  // enqueue still admits
  EXPECT_FALSE(another().claim(l, 1000));  // for every client
  EXPECT_EQ(q().snapshot().pending, 5U);
  EXPECT_EQ(q().snapshot().counters.claimed, 0U);
  EXPECT_EQ(q().resume_all(), LaneStatus::ok);
  EXPECT_FALSE(q().snapshot().paused);
  EXPECT_EQ(seq_string(claim_groups(5)), "AAA BBB CCC AAA BBB");
}

// ---------------------------------------------------------------- limits

TEST_P(BackendTest, LimitOneParksAndReopens) {
  fill(A, 4);
  fill(B, 4);
  fill(C, 4);
  ASSERT_EQ(q().set_limit(A, 1), LaneStatus::ok);
  Lease la = claim_one();
  ASSERT_EQ(la.group, A);
  auto li = lane(A);
  EXPECT_EQ(li->active, 1U);
  EXPECT_EQ(li->limit, 1U);
  EXPECT_FALSE(li->ringed);
  for (int i = 0; i < 6; ++i) {
    Lease l = claim_one();
    EXPECT_NE(l.group, A) << "claim " << i;
    EXPECT_LE(lane(A)->active, 1U);
    ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  }
  EXPECT_EQ(q().depth(A), 3U);
  ASSERT_EQ(q().complete(la.id, la.token), AckStatus::ok);  // reopens A at the tail
  EXPECT_TRUE(lane(A)->ringed);
  EXPECT_EQ(lane(A)->active, 0U);
  std::vector<BrandedId> served = claim_groups(3);
  EXPECT_EQ(std::count(served.begin(), served.end(), A), 1) << seq_string(served);
}

TEST_P(BackendTest, LimitNeverExceeded) {
  fill(A, 20);
  fill(B, 20);
  ASSERT_EQ(q().set_limit(A, 3), LaneStatus::ok);
  std::vector<Lease> held;
  for (int i = 0; i < 20; ++i) {
    Lease l;
    ASSERT_TRUE(q().claim(l, 60000));
    held.push_back(l);
    ASSERT_LE(lane(A)->active, 3U) << "after claim " << i;
  }
  EXPECT_EQ(std::count_if(held.begin(), held.end(), [](const Lease& l) { return l.group == A; }), 3);
  EXPECT_EQ(q().depth(A), 17U);
}

TEST_P(BackendTest, LimitAtOrBelowActiveDeringsAndZeroClears) {
  fill(A, 6);
  fill(B, 6);
  (void)claim_groups(4);  // A B A B
  ASSERT_EQ(lane(A)->active, 2U);
  ASSERT_EQ(q().set_limit(A, 2), LaneStatus::ok);
  EXPECT_FALSE(lane(A)->ringed);
  EXPECT_EQ(seq_string(claim_groups(2)), "BBB BBB");
  ASSERT_EQ(q().set_limit(A, 1), LaneStatus::ok);
  EXPECT_FALSE(lane(A)->ringed);
  EXPECT_EQ(seq_string(claim_groups(1)), "BBB");
  ASSERT_EQ(q().set_limit(A, 3), LaneStatus::ok);  // above active: re-ringed
  EXPECT_TRUE(lane(A)->ringed);
  ASSERT_EQ(q().clear_limit(A), LaneStatus::ok);  // cleared
  EXPECT_EQ(lane(A)->limit, 0U);
  EXPECT_TRUE(lane(A)->ringed);
  std::vector<BrandedId> rest = claim_groups(20);
  EXPECT_EQ(std::count(rest.begin(), rest.end(), A), 4);
  EXPECT_EQ(lane(A)->active, 6U);
}

TEST_P(BackendTest, LimitAndWeightOutOfRange) {
  EXPECT_EQ(q().set_limit(A, kMaxLimit), LaneStatus::ok);
  EXPECT_EQ(q().set_limit(A, kMaxLimit + 1), LaneStatus::invalid_argument);
  EXPECT_EQ(lane(A)->limit, kMaxLimit);
  EXPECT_EQ(q().set_weight(A, kMaxWeight), LaneStatus::ok);
  EXPECT_EQ(q().set_weight(A, kMaxWeight + 1), LaneStatus::invalid_argument);
  EXPECT_EQ(q().set_weight(A, 0), LaneStatus::invalid_argument);
  EXPECT_EQ(lane(A)->weight, kMaxWeight);
}

// ---------------------------------------------------------------- depth and drain

TEST_P(BackendTest, DepthCountsBacklog) {
  EXPECT_EQ(q().depth(A), 0U);
  EXPECT_EQ(q().depth(BrandedId::make("ZZZ", 77)), 0U);
  fill(A, 5);
  fill(B, 2);
  EXPECT_EQ(q().depth(A), 5U);
  EXPECT_EQ(q().depth(B), 2U);
  (void)claim_one();
  EXPECT_EQ(q().depth(A), 4U);
  auto li = lane(A);
  EXPECT_EQ(li->depth, 4U);
  EXPECT_EQ(li->active, 1U);
}

TEST_P(BackendTest, DrainRemovesPendingOnly) {
  auto a_ids = fill(A, 5);
  fill(B, 3);
  Lease la = claim_one();
  ASSERT_EQ(la.id, a_ids[0]);
  EXPECT_EQ(q().drain(A), 4U);
  EXPECT_EQ(q().depth(A), 0U);
  EXPECT_FALSE(lane(A)->ringed);
  EXPECT_EQ(seq_string(q().snapshot().ring), "BBB");
  EXPECT_EQ(q().snapshot().counters.drained, 4U);
  EXPECT_EQ(q().snapshot().pending, 3U);
  EXPECT_EQ(q().complete(la.id, la.token), AckStatus::ok);  // the leased job is untouched
  EXPECT_EQ(q().enqueue(A, a_ids[1], "again"), EnqueueStatus::enqueued);  // drained ids are gone
  EXPECT_EQ(q().drain(A), 1U);
  EXPECT_EQ(q().drain(A), 0U);
  EXPECT_EQ(q().drain(BrandedId::make("ZZZ", 5)), 0U);
  EXPECT_EQ(seq_string(claim_groups(5)), "BBB BBB BBB");
}

// ---------------------------------------------------------------- weights and batches

TEST_P(BackendTest, WeightsServeAABC) {
  fill(A, 20);
  fill(B, 10);
  fill(C, 10);
  ASSERT_EQ(q().set_weight(A, 2), LaneStatus::ok);
  EXPECT_EQ(lane(A)->weight, 2U);
  EXPECT_EQ(lane(B)->weight, 1U);
  EXPECT_EQ(seq_string(claim_groups(12)), "AAA AAA BBB CCC AAA AAA BBB CCC AAA AAA BBB CCC");
}

TEST_P(BackendTest, WeightedTurnSurvivesAcrossClients) {
  fill(A, 10);
  fill(B, 10);
  ASSERT_EQ(q().set_weight(A, 2), LaneStatus::ok);
  Backend& other = another();
  std::vector<BrandedId> served;
  for (int i = 0; i < 6; ++i) {
    Lease l;
    ASSERT_TRUE((i % 2 ? other : q()).claim(l, 60000));
    served.push_back(l.group);
  }
  EXPECT_EQ(seq_string(served), "AAA AAA BBB AAA AAA BBB");
}

TEST_P(BackendTest, WeightedTurnStopsAtEmptyLaneAndAtLimit) {
  fill(A, 1);
  fill(B, 3);
  ASSERT_EQ(q().set_weight(A, 4), LaneStatus::ok);
  EXPECT_EQ(seq_string(claim_groups(4)), "AAA BBB BBB BBB");
  fill(C, 10);
  fill(D, 10);
  ASSERT_EQ(q().set_weight(C, 3), LaneStatus::ok);
  ASSERT_EQ(q().set_limit(C, 2), LaneStatus::ok);
  EXPECT_EQ(seq_string(claim_groups(5)), "CCC CCC DDD DDD DDD");
  EXPECT_LE(lane(C)->active, 2U);
}

TEST_P(BackendTest, WeightBackToOne) {
  fill(A, 10);
  fill(B, 10);
  ASSERT_EQ(q().set_weight(A, 2), LaneStatus::ok);
  EXPECT_EQ(seq_string(claim_groups(3)), "AAA AAA BBB");
  ASSERT_EQ(q().set_weight(A, 1), LaneStatus::ok);
  EXPECT_EQ(seq_string(claim_groups(4)), "AAA BBB AAA BBB");
}

TEST_P(BackendTest, BatchTakesWeightPerRingStep) {
  auto a = fill(A, 10);
  auto b = fill(B, 10);
  auto c = fill(C, 1);
  ASSERT_EQ(q().set_weight(A, 3), LaneStatus::ok);
  std::vector<Lease> out(8);
  ASSERT_EQ(q().claim_batch(out, 60000), 8U);
  EXPECT_EQ(seq_string(groups_of(out)), "AAA AAA AAA BBB CCC AAA AAA AAA");
  EXPECT_EQ(out[0].id, a[0]);
  EXPECT_EQ(out[2].id, a[2]);
  EXPECT_EQ(out[3].id, b[0]);
  EXPECT_EQ(out[4].id, c[0]);
  EXPECT_EQ(out[7].id, a[5]);
  for (const auto& l : out) EXPECT_EQ(l.attempt, 1U);
  EXPECT_EQ(out[0].deadline_ms, out[2].deadline_ms);  // one turn, one deadline
  EXPECT_EQ(lane(A)->active, 6U);
  EXPECT_EQ(q().depth(A), 4U);
  EXPECT_EQ(q().depth(C), 0U);
  for (const auto& l : out) EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
}

TEST_P(BackendTest, BatchStopsAtHeadroomDepthAndRoom) {
  fill(A, 10);
  fill(B, 10);
  ASSERT_EQ(q().set_weight(A, 3), LaneStatus::ok);
  ASSERT_EQ(q().set_limit(A, 2), LaneStatus::ok);
  std::vector<Lease> out(6);
  ASSERT_EQ(q().claim_batch(out, 60000), 6U);
  EXPECT_EQ(seq_string(groups_of(out)), "AAA AAA BBB BBB BBB BBB");
  EXPECT_FALSE(lane(A)->ringed);

  fill(C, 2);
  fill(D, 3);
  ASSERT_EQ(q().set_weight(C, 5), LaneStatus::ok);
  ASSERT_EQ(q().drain(B), 6U);
  std::vector<Lease> big(10);
  ASSERT_EQ(q().claim_batch(big, 60000), 5U);
  EXPECT_EQ(seq_string(groups_of(std::span<const Lease>(big.data(), 5))), "CCC CCC DDD DDD DDD");
  EXPECT_TRUE(q().snapshot().ring.empty());
}

TEST_P(BackendTest, BatchRoomCutsTheTurnAndTheNextClaimFinishesIt) {
  fill(A, 10);
  fill(B, 10);
  ASSERT_EQ(q().set_weight(A, 3), LaneStatus::ok);
  std::vector<Lease> out(2);
  ASSERT_EQ(q().claim_batch(out, 60000), 2U);
  EXPECT_EQ(seq_string(groups_of(out)), "AAA AAA");
  EXPECT_EQ(seq_string(q().snapshot().ring), "AAA BBB");  // A keeps the head for the rest of its turn
  EXPECT_EQ(seq_string(claim_groups(3)), "AAA BBB AAA");
}

TEST_P(BackendTest, BatchOfWeightOneLanesRotates) {
  fill(A, 5);
  fill(B, 5);
  fill(C, 5);
  std::vector<Lease> out(7);
  ASSERT_EQ(q().claim_batch(out, 60000), 7U);
  EXPECT_EQ(seq_string(groups_of(out)), "AAA BBB CCC AAA BBB CCC AAA");
}

// ---------------------------------------------------------------- leases

TEST_P(BackendTest, LeaseExpiryReturnsJobToItsMintPosition) {
  auto ids = fill(A, 3);
  Lease first = claim_one(100);
  ASSERT_EQ(first.id, ids[0]);
  ASSERT_EQ(first.attempt, 1U);
  EXPECT_EQ(lane(A)->active, 1U);
  EXPECT_EQ(q().depth(A), 2U);
  q().advance_clock(200);
  EXPECT_EQ(q().tick(), 1U);
  EXPECT_EQ(lane(A)->active, 0U);  // released
  EXPECT_EQ(q().depth(A), 3U);
  const Snapshot s = q().snapshot();
  EXPECT_EQ(s.leased, 0U);
  EXPECT_EQ(s.pending, 3U);
  EXPECT_EQ(s.counters.expired, 1U);
  Lease again = claim_one(60000);
  EXPECT_EQ(again.id, ids[0]);  // before its younger siblings
  EXPECT_EQ(again.attempt, 2U);
  EXPECT_EQ(again.payload, first.payload);
  EXPECT_NE(again.token, first.token);
  EXPECT_EQ(q().complete(ids[0], first.token), AckStatus::stale);  // the old token is fenced off
  EXPECT_EQ(q().extend(ids[0], first.token, 1000), AckStatus::stale);
  EXPECT_EQ(q().fail(ids[0], first.token, FailOptions{}), FailStatus::stale);
  EXPECT_EQ(lane(A)->active, 1U);
  EXPECT_EQ(q().complete(ids[0], again.token), AckStatus::ok);
  EXPECT_EQ(claim_one().id, ids[1]);
}

TEST_P(BackendTest, ClaimReapsExpiredLeasesByItself) {
  auto ids = fill(A, 2);
  Lease first = claim_one(100);
  ASSERT_EQ(first.id, ids[0]);
  q().advance_clock(200);
  Lease again = claim_one(60000);  // no tick()
  EXPECT_EQ(again.id, ids[0]);
  EXPECT_EQ(again.attempt, 2U);
  EXPECT_EQ(lane(A)->active, 1U);
  EXPECT_EQ(q().complete(ids[0], first.token), AckStatus::stale);
  EXPECT_EQ(q().complete(ids[0], again.token), AckStatus::ok);
}

TEST_P(BackendTest, AdvanceClockIsSharedByEveryClient) {
  Backend& other = another();
  const std::uint64_t t0 = other.now_ms();
  q().advance_clock(3'600'000);
  EXPECT_GE(other.now_ms(), t0 + 3'600'000);
  EXPECT_GE(other.snapshot().now_ms, t0 + 3'600'000);
}

TEST_P(BackendTest, ExpiryReleasesLimitSlot) {
  auto ids = fill(A, 2);
  fill(B, 5);
  ASSERT_EQ(q().set_limit(A, 1), LaneStatus::ok);
  Lease la = claim_one(100);
  ASSERT_EQ(la.group, A);
  EXPECT_EQ(seq_string(claim_groups(2, 60000)), "BBB BBB");
  q().advance_clock(200);
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

TEST_P(BackendTest, UnexpiredLeaseIsNotReaped) {
  fill(A, 1);
  Lease l = claim_one(10'000);
  q().advance_clock(5'000);
  EXPECT_EQ(q().tick(), 0U);
  Lease other;
  EXPECT_FALSE(q().claim(other, 1000));
  EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
}

TEST_P(BackendTest, StaleTokensAreRefused) {
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
  q().advance_clock(10'500);  // the refused extend did not move the deadline
  EXPECT_EQ(q().tick(), 1U);
  EXPECT_EQ(q().complete(ids[1], Token(0)), AckStatus::stale);  // a pending job refuses every token
  EXPECT_EQ(q().complete(ids[1], l.token), AckStatus::stale);
  EXPECT_EQ(q().depth(A), 2U);
}

TEST_P(BackendTest, UnknownOrFinishedJobIsGone) {
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
  const Snapshot s = q().snapshot();
  EXPECT_EQ(s.counters.completed, 1U);
  EXPECT_EQ(s.leased, 0U);
}

// ---------------------------------------------------------------- delays, retries, dead letters

TEST_P(BackendTest, DelayedJobWaitsForItsTime) {
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

// JobInfo::ready_ms is when the job last became pending, 0 if unknown: a
// delayed job has not become pending at its enqueue. The segment said the
// enqueue's time (Valkey 0).
TEST_P(BackendTest, ADelayedJobHasNoReadyTimeUntilItComesDue) {
  const BrandedId late = q().mint();
  ASSERT_EQ(q().enqueue(A, late, "late", EnqueueOptions{1000}), EnqueueStatus::enqueued);
  auto before = q().job(late);
  ASSERT_TRUE(before.has_value());
  EXPECT_EQ(before->state, JobState::scheduled);
  EXPECT_EQ(before->ready_ms, 0U);
  q().advance_clock(1100);
  EXPECT_EQ(q().tick(), 1U);
  auto after = q().job(late);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->state, JobState::pending);
  EXPECT_GT(after->ready_ms, 0U);
}

TEST_P(BackendTest, DelayedJobPromotedByClaimAtItsMintPosition) {
  const BrandedId older = q().mint();
  ASSERT_EQ(q().enqueue(A, older, "older", EnqueueOptions{500}), EnqueueStatus::enqueued);
  auto younger = fill(A, 2);
  q().advance_clock(600);
  EXPECT_EQ(claim_one().id, older);
  EXPECT_EQ(claim_one().id, younger[0]);
}

TEST_P(BackendTest, FailRetriesThenDeadLetters) {
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
  const Snapshot s = q().snapshot();
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
  EXPECT_EQ(q().enqueue(A, id, "dup"), EnqueueStatus::duplicate);  // a dead job still exists
  EXPECT_EQ(q().complete(id, l.token), AckStatus::stale);
  EXPECT_EQ(q().fail(id, l.token, opts), FailStatus::stale);
}

TEST_P(BackendTest, FailWithDefaultOptionsIsDeadAtOnce) {
  fill(A, 1);
  Lease l = claim_one();
  EXPECT_EQ(q().fail(l.id, l.token, FailOptions{}), FailStatus::dead);
  EXPECT_EQ(q().snapshot().dead, 1U);
}

TEST_P(BackendTest, RetryWithoutDelayGoesBackToMintPosition) {
  auto ids = fill(A, 3);
  Lease l = claim_one();
  ASSERT_EQ(l.id, ids[0]);
  EXPECT_EQ(q().fail(l.id, l.token, FailOptions{0, 5, "again"}), FailStatus::retrying);
  Lease r = claim_one();
  EXPECT_EQ(r.id, ids[0]);
  EXPECT_EQ(r.attempt, 2U);
  EXPECT_EQ(q().complete(r.id, r.token), AckStatus::ok);
  EXPECT_EQ(claim_one().id, ids[1]);
}

TEST_P(BackendTest, FailReleasesLimitSlot) {
  fill(A, 3);
  ASSERT_EQ(q().set_limit(A, 1), LaneStatus::ok);
  Lease l = claim_one();
  Lease none;
  EXPECT_FALSE(q().claim(none, 1000));
  EXPECT_EQ(q().fail(l.id, l.token, FailOptions{10'000, 5, ""}), FailStatus::retrying);
  Lease next = claim_one();
  EXPECT_NE(next.id, l.id);
  EXPECT_EQ(lane(A)->active, 1U);
}

// ---------------------------------------------------------------- extend

TEST_P(BackendTest, ExtendMovesTheDeadline) {
  fill(A, 1);
  Lease l = claim_one(100);
  EXPECT_EQ(q().extend(l.id, l.token, 1000), AckStatus::ok);
  q().advance_clock(500);  // past the old deadline, before the new one
  EXPECT_EQ(q().tick(), 0U);
  Lease other;
  EXPECT_FALSE(q().claim(other, 1000)) << "extended lease was reaped at its old deadline";
  EXPECT_EQ(lane(A)->active, 1U);
  q().advance_clock(700);
  EXPECT_EQ(q().tick(), 1U);
  ASSERT_TRUE(q().claim(other, 1000));
  EXPECT_EQ(other.id, l.id);
  EXPECT_EQ(other.attempt, 2U);
  EXPECT_EQ(q().extend(l.id, l.token, 100'000), AckStatus::stale);
  EXPECT_EQ(q().extend(other.id, other.token, 5000), AckStatus::ok);
  EXPECT_EQ(q().complete(other.id, other.token), AckStatus::ok);
  EXPECT_EQ(q().snapshot().leased, 0U);
}

// ---------------------------------------------------------------- blocking claims

TEST_P(BackendTest, ClaimWaitTimesOutOnEmptyQueue) {
  Lease l;
  EXPECT_FALSE(q().claim_wait(l, 1000, std::chrono::milliseconds(20)));
}

TEST_P(BackendTest, ClaimWaitReturnsAtOnceWhenWorkIsReady) {
  auto ids = fill(A, 1);
  Lease l;
  ASSERT_TRUE(q().claim_wait(l, 1000, std::chrono::milliseconds(30'000)));
  EXPECT_EQ(l.id, ids[0]);
}

TEST_P(BackendTest, ClaimWaitWakesOnAnotherClientsEnqueue) {
  // The consumer parks (or finds the job at once if the enqueue came first:
  // either order must deliver it). The long timeout only bounds a failure.
  std::unique_ptr<Backend> consumer = open_another();
  ASSERT_TRUE(consumer);
  Lease got;
  std::atomic<bool> ok{false};
  std::thread t([&] { ok = consumer->claim_wait(got, 60'000, std::chrono::milliseconds(60'000)); });
  const BrandedId id = q().mint();
  ASSERT_EQ(q().enqueue(A, id, "wake"), EnqueueStatus::enqueued);
  t.join();
  ASSERT_TRUE(ok.load());
  EXPECT_EQ(got.id, id);
  EXPECT_EQ(got.payload, "wake");
}

// milliseconds::max() is a wait with no end, not a time in the past: the
// consumer is still waiting a while later, and takes the job that comes.
// (Over Valkey the give-up time was now + max in steady_clock's
// nanoseconds, which overflowed: one claim, then false at once.)
TEST_P(BackendTest, AClaimWaitOfMillisecondsMaxWaitsForAJob) {
  std::unique_ptr<Backend> consumer = open_another();
  ASSERT_TRUE(consumer);
  Lease got;
  std::atomic<int> ok{-1};
  std::thread t([&] { ok = consumer->claim_wait(got, 60'000, std::chrono::milliseconds::max()); });
  // A wait that ended at once ends within this (a correct one never does).
  EXPECT_FALSE(test::eventually([&] { return ok.load() != -1; }, std::chrono::milliseconds(500)))
      << "claim_wait(max) answered " << ok.load() << " with no job";
  const BrandedId id = q().mint();
  ASSERT_EQ(q().enqueue(A, id, "late"), EnqueueStatus::enqueued);
  t.join();
  EXPECT_EQ(ok.load(), 1);
  EXPECT_EQ(got.id, id);
}

TEST_P(BackendTest, EveryParkedConsumerIsServed) {
  // Three consumers park; three jobs arrive in one lane. Each wake-up must
  // lead to the next (the lane stays on the ring), so all three are served.
  constexpr int kConsumers = 3;
  std::vector<std::unique_ptr<Backend>> clients;
  for (int i = 0; i < kConsumers; ++i) clients.push_back(open_another());
  std::vector<Lease> got(kConsumers);
  std::atomic<int> served{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kConsumers; ++i)
    threads.emplace_back([&, i] {
      if (clients[i]->claim_wait(got[i], 60'000, std::chrono::milliseconds(60'000))) ++served;
    });
  std::set<BrandedId> ids;
  for (const auto& id : fill(A, kConsumers)) ids.insert(id);
  for (auto& t : threads) t.join();
  EXPECT_EQ(served.load(), kConsumers);
  std::set<BrandedId> claimed;
  for (const auto& l : got) claimed.insert(l.id);
  EXPECT_EQ(claimed, ids);
}

TEST_P(BackendTest, ParkedConsumerTakesAJobThatFallsDue) {
  const BrandedId late = q().mint();
  ASSERT_EQ(q().enqueue(A, late, "later", EnqueueOptions{3'600'000}), EnqueueStatus::enqueued);
  std::unique_ptr<Backend> consumer = open_another();
  Lease got;
  std::atomic<bool> ok{false};
  std::thread t([&] { ok = consumer->claim_wait(got, 60'000, std::chrono::milliseconds(60'000)); });
  q().advance_clock(3'600'001);  // an hour passes for every client
  t.join();
  ASSERT_TRUE(ok.load());
  EXPECT_EQ(got.id, late);
  EXPECT_EQ(got.attempt, 1U);
}

// ---------------------------------------------------------------- many clients

TEST_P(BackendTest, ManyConsumersServeEveryJobOnce) {
  const std::vector<BrandedId> lanes = {A, B, C, D};
  std::set<BrandedId> all;
  for (const auto& g : lanes)
    for (const auto& id : fill(g, 40)) all.insert(id);
  ASSERT_EQ(q().set_limit(B, 2), LaneStatus::ok);
  constexpr int kConsumers = 4;
  std::vector<std::unique_ptr<Backend>> clients;
  for (int i = 0; i < kConsumers; ++i) clients.push_back(open_another());
  std::vector<std::vector<BrandedId>> seen(kConsumers);
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kConsumers; ++i) {
    threads.emplace_back([&, i] {
      Lease l;
      while (clients[i]->claim(l, 60'000)) {
        seen[i].push_back(l.id);
        if (clients[i]->complete(l.id, l.token) != AckStatus::ok) ++errors;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors.load(), 0);
  std::multiset<BrandedId> served;
  for (const auto& v : seen) served.insert(v.begin(), v.end());
  EXPECT_EQ(served.size(), all.size());
  EXPECT_EQ(std::set<BrandedId>(served.begin(), served.end()), all);
  const Snapshot s = q().snapshot();
  EXPECT_EQ(s.pending, 0U);
  EXPECT_EQ(s.leased, 0U);
  EXPECT_EQ(s.counters.completed, all.size());
  EXPECT_TRUE(s.ring.empty());
}

// segment(): the segment's own handle behind the interface (the tool's
// fsck, repair and mirror commands reach it so), none on Valkey.
TEST_P(BackendTest, SegmentIsTheSegmentsOwnHandleAndNoneOnValkey) {
  Queue* seg = q().segment();
  if (is_valkey()) {
    EXPECT_EQ(seg, nullptr);
    return;
  }
  ASSERT_NE(seg, nullptr);
  EXPECT_EQ(seg, q().segment());
  const BrandedId& g = A;
  ASSERT_EQ(q().enqueue(g, q().mint(), "through the interface"), EnqueueStatus::enqueued);
  EXPECT_EQ(seg->depth(g), 1U);
  ASSERT_EQ(seg->enqueue(g, seg->mint(), "through the handle"), EnqueueStatus::enqueued);
  EXPECT_EQ(q().depth(g), 2U);
  EXPECT_EQ(seg->config().job_kind, q().job_kind());
  EXPECT_TRUE(seg->fsck().clean());
}

INSTANTIATE_TEST_SUITE_P(Backends, BackendTest,
                         ::testing::Values(BackendKind::segment, BackendKind::valkey, BackendKind::cluster),
                         test::backend_name);

}  // namespace
}  // namespace fairlane
