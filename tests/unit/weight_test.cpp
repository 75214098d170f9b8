// Lane weights and claim_batch.
#include "queue_fixture.hpp"

namespace fairlane {
namespace {

using test::QueueTest;
using test::seq_string;

const BrandedId A = BrandedId::make("AAA", 1);
const BrandedId B = BrandedId::make("BBB", 1);
const BrandedId C = BrandedId::make("CCC", 1);

std::vector<BrandedId> groups_of(std::span<const Lease> leases) {
  std::vector<BrandedId> out;
  for (const auto& l : leases) out.push_back(l.group);
  return out;
}

TEST_F(QueueTest, WeightTwoServedTwicePerTurn) {
  fill(A, 20);
  fill(B, 10);
  fill(C, 10);
  ASSERT_EQ(q().set_weight(A, 2), LaneStatus::ok);
  EXPECT_EQ(lane(A)->weight, 2U);
  EXPECT_EQ(lane(B)->weight, 1U);
  EXPECT_EQ(seq_string(claim_groups(12)),
            "AAA AAA BBB CCC AAA AAA BBB CCC AAA AAA BBB CCC");
}

TEST_F(QueueTest, WeightedLaneKeepsIdOrder) {
  auto ids = fill(A, 6);
  fill(B, 3);
  ASSERT_EQ(q().set_weight(A, 3), LaneStatus::ok);
  std::vector<BrandedId> a_served;
  for (int i = 0; i < 8; ++i) {
    Lease l = claim_one();
    if (l.group == A) a_served.push_back(l.id);
  }
  ASSERT_EQ(a_served.size(), 6U);
  EXPECT_EQ(a_served, ids);
}

TEST_F(QueueTest, WeightTurnStopsAtEmptyLane) {
  fill(A, 1);
  fill(B, 3);
  ASSERT_EQ(q().set_weight(A, 4), LaneStatus::ok);
  EXPECT_EQ(seq_string(claim_groups(4)), "AAA BBB BBB BBB");
}

TEST_F(QueueTest, WeightTurnStopsAtLimit) {
  fill(A, 10);
  fill(B, 10);
  ASSERT_EQ(q().set_weight(A, 3), LaneStatus::ok);
  ASSERT_EQ(q().set_limit(A, 2), LaneStatus::ok);
  std::vector<BrandedId> served = claim_groups(5);
  EXPECT_EQ(seq_string(served), "AAA AAA BBB BBB BBB");
  EXPECT_LE(lane(A)->active, 2U);
}

TEST_F(QueueTest, WeightBackToOne) {
  fill(A, 10);
  fill(B, 10);
  ASSERT_EQ(q().set_weight(A, 2), LaneStatus::ok);
  EXPECT_EQ(seq_string(claim_groups(3)), "AAA AAA BBB");
  ASSERT_EQ(q().set_weight(A, 1), LaneStatus::ok);
  EXPECT_EQ(seq_string(claim_groups(4)), "AAA BBB AAA BBB");
}

TEST_F(QueueTest, BatchTakesWeightPerRingStep) {
  auto a = fill(A, 10);
  auto b = fill(B, 10);
  auto c = fill(C, 1);
  ASSERT_EQ(q().set_weight(A, 3), LaneStatus::ok);
  std::vector<Lease> out(8);
  ASSERT_EQ(q().claim_batch(out, 60000), 8U);
  EXPECT_EQ(seq_string(groups_of(out)), "AAA AAA AAA BBB CCC AAA AAA AAA");
  // Each lane's jobs come in id order, each with attempt 1.
  EXPECT_EQ(out[0].id, a[0]);
  EXPECT_EQ(out[1].id, a[1]);
  EXPECT_EQ(out[2].id, a[2]);
  EXPECT_EQ(out[3].id, b[0]);
  EXPECT_EQ(out[4].id, c[0]);
  EXPECT_EQ(out[5].id, a[3]);
  EXPECT_EQ(out[7].id, a[5]);
  for (const auto& l : out) EXPECT_EQ(l.attempt, 1U);
  // One turn shares one deadline.
  EXPECT_EQ(out[0].deadline_ms, out[1].deadline_ms);
  EXPECT_EQ(out[1].deadline_ms, out[2].deadline_ms);
  EXPECT_EQ(lane(A)->active, 6U);
  EXPECT_EQ(q().depth(A), 4U);
  EXPECT_EQ(q().depth(C), 0U);
  // Every lease is real: completes with its token.
  for (const auto& l : out) EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
}

TEST_F(QueueTest, BatchTakesAtMostHeadroom) {
  fill(A, 10);
  fill(B, 10);
  ASSERT_EQ(q().set_weight(A, 3), LaneStatus::ok);
  ASSERT_EQ(q().set_limit(A, 2), LaneStatus::ok);
  std::vector<Lease> out(6);
  ASSERT_EQ(q().claim_batch(out, 60000), 6U);
  EXPECT_EQ(seq_string(groups_of(out)), "AAA AAA BBB BBB BBB BBB");
  EXPECT_EQ(lane(A)->active, 2U);
  EXPECT_FALSE(lane(A)->ringed);
}

TEST_F(QueueTest, BatchTakesAtMostDepth) {
  fill(A, 2);
  fill(B, 3);
  ASSERT_EQ(q().set_weight(A, 5), LaneStatus::ok);
  std::vector<Lease> out(10);
  ASSERT_EQ(q().claim_batch(out, 60000), 5U);
  EXPECT_EQ(seq_string(groups_of(std::span<const Lease>(out.data(), 5))), "AAA AAA BBB BBB BBB");
  EXPECT_TRUE(q().snapshot().ring.empty());
}

TEST_F(QueueTest, BatchTakesAtMostRoomLeft) {
  fill(A, 10);
  fill(B, 10);
  ASSERT_EQ(q().set_weight(A, 3), LaneStatus::ok);
  std::vector<Lease> out(2);
  ASSERT_EQ(q().claim_batch(out, 60000), 2U);
  EXPECT_EQ(seq_string(groups_of(out)), "AAA AAA");
  EXPECT_EQ(lane(A)->active, 2U);
  EXPECT_EQ(q().depth(A), 8U);
}

TEST_F(QueueTest, BatchOfOneIsAClaim) {
  fill(A, 3);
  fill(B, 3);
  std::vector<Lease> one(1);
  std::vector<BrandedId> served;
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(q().claim_batch(one, 60000), 1U);
    served.push_back(one[0].group);
  }
  EXPECT_EQ(seq_string(served), "AAA BBB AAA BBB");
}

TEST_F(QueueTest, BatchOfWeightOneLanesRotates) {
  fill(A, 5);
  fill(B, 5);
  fill(C, 5);
  std::vector<Lease> out(7);
  ASSERT_EQ(q().claim_batch(out, 60000), 7U);
  EXPECT_EQ(seq_string(groups_of(out)), "AAA BBB CCC AAA BBB CCC AAA");
}

}  // namespace
}  // namespace fairlane
