// Single-process behaviour of the queue: rotation, admission, lane controls,
// depth and drain. Leases, retries and time are in lease_test.cpp; weights and
// batches in weight_test.cpp.
#include "queue_fixture.hpp"

#include <bit>
#include <cstring>
#include <map>
#include <string>
#include <thread>
#include <vector>

namespace fairlane {
namespace {

using test::group;
using test::QueueTest;
using test::seq_string;

const BrandedId A = BrandedId::make("AAA", 1);
const BrandedId B = BrandedId::make("BBB", 1);
const BrandedId C = BrandedId::make("CCC", 1);
const BrandedId D = BrandedId::make("DDD", 1);

std::vector<BrandedId> pattern(std::initializer_list<BrandedId> cycle, int repeats) {
  std::vector<BrandedId> out;
  for (int r = 0; r < repeats; ++r) out.insert(out.end(), cycle.begin(), cycle.end());
  return out;
}

// A BrandedId holding bytes that parse() would refuse: the only way to hand
// the library a malformed id through the typed API (e.g. from a corrupted
// record). BrandedId is 16 trivially copyable bytes (the 14 of text and two
// of zero padding), so bit_cast is defined.
BrandedId forged_id(const char (&text)[kIdLength + 1]) {
  static_assert(sizeof(BrandedId) == kIdLength + 2);
  static_assert(std::is_trivially_copyable_v<BrandedId>);
  std::array<char, sizeof(BrandedId)> bytes{};  // the text, then zero padding
  std::memcpy(bytes.data(), text, kIdLength);
  return std::bit_cast<BrandedId>(bytes);
}

// ---------------------------------------------------------------- rotation

TEST_F(QueueTest, RotationServesLanesInTurn) {
  fill(A, 4);
  fill(B, 4);
  fill(C, 4);
  EXPECT_EQ(seq_string(claim_groups(6)), seq_string(pattern({A, B, C}, 2)));
}

TEST_F(QueueTest, RotationWithInterleavedEnqueues) {
  // Lanes join the ring when they first become serviceable: A, then B, then C.
  for (int i = 0; i < 3; ++i) {
    fill(A, 1);
    fill(B, 1);
    fill(C, 1);
  }
  EXPECT_EQ(seq_string(claim_groups(9)), seq_string(pattern({A, B, C}, 3)));
}

TEST_F(QueueTest, WithinALaneServedInIdOrder) {
  auto ids = fill(A, 5);
  // Enqueue an older id (minted first, enqueued last): it goes to its mint position.
  const BrandedId old = q().mint();
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

TEST_F(QueueTest, ClaimReturnsPayloadAndGroup) {
  const BrandedId id = q().mint();
  const std::string payload("hello\0world", 11);  // binary-safe
  ASSERT_EQ(q().enqueue(B, id, payload), EnqueueStatus::enqueued);
  Lease l = claim_one();
  EXPECT_EQ(l.id, id);
  EXPECT_EQ(l.group, B);
  EXPECT_EQ(l.payload, payload);
  EXPECT_EQ(l.attempt, 1U);

  // Lease reuse: a shorter payload replaces the longer one completely.
  const BrandedId id2 = q().mint();
  ASSERT_EQ(q().enqueue(B, id2, "x"), EnqueueStatus::enqueued);
  ASSERT_TRUE(q().claim(l, 1000));
  EXPECT_EQ(l.id, id2);
  EXPECT_EQ(l.payload, "x");

  // Empty payloads are jobs too.
  const BrandedId id3 = q().mint();
  ASSERT_EQ(q().enqueue(B, id3, ""), EnqueueStatus::enqueued);
  ASSERT_TRUE(q().claim(l, 1000));
  EXPECT_EQ(l.id, id3);
  EXPECT_EQ(l.payload, "");
}

// enqueue(group, job, payload) is enqueue with EnqueueOptions{}: pending at
// once, no retry policy of its own; the overload with options still applies
// them (a delay, a policy), and a lease reused from such a job forgets it.
TEST_F(QueueTest, AnEnqueueWithoutOptionsIsOneWithDefaultOptions) {
  EnqueueOptions with;
  with.delay_ms = 60'000;
  with.retry.max_attempts = 3;
  const BrandedId delayed = q().mint();
  ASSERT_EQ(q().enqueue(C, delayed, "later", with), EnqueueStatus::enqueued);
  const BrandedId plain = q().mint(), defaulted = q().mint();
  ASSERT_EQ(q().enqueue(A, plain, "plain"), EnqueueStatus::enqueued);
  ASSERT_EQ(q().enqueue(B, defaulted, "defaulted", EnqueueOptions{}), EnqueueStatus::enqueued);
  Lease l = claim_one();
  EXPECT_EQ(l.id, plain);
  EXPECT_TRUE(l.retry.empty());
  ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  ASSERT_TRUE(q().claim(l, 1000));
  EXPECT_EQ(l.id, defaulted);
  EXPECT_TRUE(l.retry.empty());
  ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  EXPECT_FALSE(q().claim(l, 1000)) << "the delayed job is not due";
  q().advance_clock(60'001);
  ASSERT_TRUE(q().claim(l, 1000));
  EXPECT_EQ(l.id, delayed);
  EXPECT_EQ(l.retry.max_attempts, 3U);
  // The same lease, reused for a job enqueued without options: no policy.
  const BrandedId after = q().mint();
  ASSERT_EQ(q().enqueue(A, after, "after"), EnqueueStatus::enqueued);
  ASSERT_TRUE(q().claim(l, 1000));
  EXPECT_EQ(l.id, after);
  EXPECT_TRUE(l.retry.empty());
}

TEST_F(QueueTest, EmptyGroupRidesTheDefaultLane) {
  const BrandedId id = q().mint();
  ASSERT_EQ(q().enqueue(BrandedId{}, id, "d"), EnqueueStatus::enqueued);
  const auto def = BrandedId::parse(kDefaultGroup);
  ASSERT_TRUE(def.has_value());
  EXPECT_EQ(q().depth(*def), 1U);
  Lease l = claim_one();
  EXPECT_EQ(l.id, id);
  EXPECT_EQ(l.group, *def);
}

TEST_F(QueueTest, SingleConsumerServedCountsStayWithinOne) {
  // Unequal backlogs; while every lane is still backlogged, after any number
  // of claims the per-lane counts differ by at most one, and each claim
  // serves the lane at the head of the snapshot's ring.
  const std::vector<BrandedId> lanes = {A, B, C, D};
  const std::vector<int> depth = {40, 26, 60, 30};
  for (std::size_t i = 0; i < lanes.size(); ++i) fill(lanes[i], depth[i]);
  std::map<BrandedId, int> served;
  const int claims = 25 * 4;  // leaves B with one job
  for (int n = 0; n < claims; ++n) {
    const Snapshot before = q().snapshot();
    ASSERT_EQ(before.ring.size(), lanes.size()) << "after " << n << " claims";
    Lease l = claim_one();
    ASSERT_TRUE(l.group.valid());
    EXPECT_EQ(l.group, before.ring.front()) << "claim " << n << " did not serve the ring head";
    served[l.group]++;
    int lo = 1 << 30, hi = 0;
    for (const auto& g : lanes) {
      lo = std::min(lo, served[g]);
      hi = std::max(hi, served[g]);
    }
    ASSERT_LE(hi - lo, 1) << "after " << n + 1 << " claims";
    // The lane just served went to the tail.
    const Snapshot after = q().snapshot();
    ASSERT_FALSE(after.ring.empty());
    EXPECT_EQ(after.ring.back(), l.group);
  }
  for (const auto& g : lanes) EXPECT_EQ(served[g], 25);
  EXPECT_EQ(seq_string(claim_groups(4)), "AAA BBB CCC DDD");
  // B is empty now and has left the ring; the others keep rotating.
  const Snapshot s = q().snapshot();
  EXPECT_EQ(seq_string(s.ring), "AAA CCC DDD");
  EXPECT_EQ(q().depth(B), 0U);
  auto lb = lane(B);
  ASSERT_TRUE(lb.has_value());
  EXPECT_FALSE(lb->ringed);
  EXPECT_EQ(lb->served, 26U);
}

TEST_F(QueueTest, SnapshotRingMatchesServiceOrder) {
  fill(A, 3);
  fill(B, 3);
  fill(C, 3);
  Snapshot s = q().snapshot();
  ASSERT_EQ(s.ring.size(), 3U);
  EXPECT_EQ(seq_string(s.ring), "AAA BBB CCC");
  (void)claim_one();  // serves A; A goes to the tail
  s = q().snapshot();
  EXPECT_EQ(seq_string(s.ring), "BBB CCC AAA");
  EXPECT_EQ(seq_string(claim_groups(3)), "BBB CCC AAA");

  // Served counts in the snapshot match what we claimed.
  s = q().snapshot();
  for (const auto& li : s.lanes) {
    if (li.group == A) { EXPECT_EQ(li.served, 2U); }
    if (li.group == B || li.group == C) { EXPECT_EQ(li.served, 1U); }
    if (li.group == A || li.group == B || li.group == C) { EXPECT_TRUE(li.ringed); }
  }
  EXPECT_EQ(s.pending, 5U);
  EXPECT_EQ(s.leased, 4U);
  EXPECT_EQ(s.counters.claimed, 4U);
  EXPECT_EQ(s.counters.enqueued, 9U);
}

TEST_F(QueueTest, EmptyQueueClaimsNothing) {
  Lease l;
  EXPECT_FALSE(q().claim(l, 1000));
  EXPECT_TRUE(q().snapshot().ring.empty());
  std::array<Lease, 4> batch;
  EXPECT_EQ(q().claim_batch(batch, 1000), 0U);
}

// An observer is a tool that only looks: every call that would change the
// segment refuses and says so (read_only), changing nothing. Its acks of a
// member's live lease said `gone` (no such job) before 2026-12-05.
TEST_F(QueueTest, AnObserverRefusesEveryWriteAsReadOnly) {
  ASSERT_EQ(q().enqueue(A, q().mint(), "a"), EnqueueStatus::enqueued);
  ASSERT_EQ(q().enqueue(A, q().mint(), "b"), EnqueueStatus::enqueued);
  Lease held;
  ASSERT_TRUE(q().claim(held, 60000));
  auto obs = Queue::open(q().name(), Queue::Attach::observer);
  ASSERT_TRUE(obs.ok());
  Lease l;
  EXPECT_EQ(obs->enqueue(A, q().mint(), "x"), EnqueueStatus::read_only);
  EXPECT_EQ(obs->try_claim(l, 1000), ClaimStatus::read_only);
  EXPECT_EQ(obs->complete(held.id, held.token), AckStatus::read_only);
  EXPECT_EQ(obs->release(held.id, held.token), AckStatus::read_only);
  EXPECT_EQ(obs->extend(held.id, held.token, 1000), AckStatus::read_only);
  EXPECT_EQ(obs->fail(held.id, held.token), FailStatus::read_only);
  EXPECT_EQ(obs->requeue_dead(held.id), AckStatus::read_only);
  EXPECT_EQ(obs->pause(A), LaneStatus::read_only);
  EXPECT_EQ(obs->reassign(held.id, B), MoveStatus::read_only);
  // Nothing changed: the lease is still the member's, the other job pending.
  const Snapshot snap = q().snapshot();
  EXPECT_EQ(snap.leased, 1U);
  EXPECT_EQ(snap.pending, 1U);
  EXPECT_FALSE(snap.lanes.empty() || snap.lanes[0].paused);
  EXPECT_EQ(q().complete(held.id, held.token), AckStatus::ok);
}

// pause_all and resume_all said nothing (void) and did nothing through an
// observer: a caller could not tell its pause had not happened.
TEST_F(QueueTest, AnObserversPauseAllSaysReadOnlyAndPausesNothing) {
  fill(A, 2);
  auto obs = Queue::open(q().name(), Queue::Attach::observer);
  ASSERT_TRUE(obs.ok());
  EXPECT_TRUE(q().writable());
  EXPECT_FALSE(obs->writable());
  EXPECT_EQ(obs->pause_all(), LaneStatus::read_only);
  EXPECT_FALSE(q().snapshot().paused);
  Lease l;
  EXPECT_EQ(q().try_claim(l, 1000), ClaimStatus::claimed);
  EXPECT_EQ(q().pause_all(), LaneStatus::ok);
  EXPECT_EQ(obs->resume_all(), LaneStatus::read_only);
  EXPECT_TRUE(q().snapshot().paused);
  EXPECT_EQ(q().try_claim(l, 1000), ClaimStatus::paused);
  EXPECT_EQ(q().resume_all(), LaneStatus::ok);
  EXPECT_EQ(q().try_claim(l, 1000), ClaimStatus::claimed);
}

// advance_clock through an observer moved the segment's clock for every
// process: a member's 30 s lease expired and was handed out again, a job
// delayed an hour fell due. It does nothing there now. mint() is the one
// call of an observer that writes (queue.hpp): its ids are unique and
// rising among the members' too.
TEST_F(QueueTest, AnObserversAdvanceClockDoesNothingAndItsMintsAreUnique) {
  const BrandedId job = q().mint();
  ASSERT_EQ(q().enqueue(A, job, "a"), EnqueueStatus::enqueued);
  const BrandedId later = q().mint();
  ASSERT_EQ(q().enqueue(B, later, "b", EnqueueOptions{.delay_ms = 3'600'000}), EnqueueStatus::enqueued);
  Lease held;
  ASSERT_TRUE(q().claim(held, 30'000));
  auto obs = Queue::open(q().name(), Queue::Attach::observer);
  ASSERT_TRUE(obs.ok());
  ASSERT_FALSE(obs->writable());
  const std::uint64_t before = q().now_ms();
  obs->advance_clock(3'600'000);
  EXPECT_LT(q().now_ms() - before, 1'800'000U) << "the observer moved the segment clock";
  EXPECT_EQ(q().tick(), 0U) << "a lease expired or a delayed job fell due";
  EXPECT_EQ(q().job(later)->state, JobState::scheduled);
  EXPECT_EQ(q().job(job)->state, JobState::leased);
  EXPECT_EQ(q().complete(held.id, held.token), AckStatus::ok);
  EXPECT_EQ(q().snapshot().counters.expired, 0U);
  // A member's advance_clock still moves it.
  q().advance_clock(3'600'000);
  EXPECT_EQ(q().tick(), 1U);
  EXPECT_EQ(q().job(later)->state, JobState::pending);
  // The observer's mints.
  const BrandedId m1 = q().mint();
  const BrandedId o1 = obs->mint();
  const BrandedId m2 = q().mint();
  EXPECT_LT(m1, o1);
  EXPECT_LT(o1, m2);
}

TEST_F(QueueTest, LaneLeavesRingWhenEmptyAndReturnsOnEnqueue) {
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

// One job admitted, in lane `in` and not in `other`, after `duplicates`
// refused enqueues of its id.
void expect_one_admission(Queue& q, const BrandedId& in, const BrandedId& other, std::uint64_t duplicates) {
  EXPECT_EQ(q.depth(in), 1U);
  EXPECT_EQ(q.depth(other), 0U);
  const Snapshot s = q.snapshot();
  EXPECT_EQ(s.pending, 1U);
  EXPECT_EQ(s.counters.enqueued, 1U);
  EXPECT_EQ(s.counters.duplicates, duplicates);
}

TEST_F(QueueTest, DuplicateLiveIdChangesNothing) {
  const BrandedId id = q().mint();
  ASSERT_EQ(q().enqueue(A, id, "first"), EnqueueStatus::enqueued);
  EXPECT_EQ(q().enqueue(A, id, "second"), EnqueueStatus::duplicate);
  EXPECT_EQ(q().enqueue(B, id, "other lane"), EnqueueStatus::duplicate);
  expect_one_admission(q(), A, B, 2);

  Lease l = claim_one();
  EXPECT_EQ(l.id, id);
  EXPECT_EQ(l.payload, "first");
  // Leased is still live.
  EXPECT_EQ(q().enqueue(A, id, "third"), EnqueueStatus::duplicate);
  EXPECT_EQ(q().depth(A), 0U);
  EXPECT_EQ(q().complete(id, l.token), AckStatus::ok);

  // Completed: the id may be admitted again, and is a fresh job (attempt 1).
  EXPECT_EQ(q().enqueue(A, id, "again"), EnqueueStatus::enqueued);
  EXPECT_EQ(q().depth(A), 1U);
  Lease l2 = claim_one();
  EXPECT_EQ(l2.id, id);
  EXPECT_EQ(l2.payload, "again");
  EXPECT_EQ(l2.attempt, 1U);
}

// An enqueue of the id its thread just minted skips the look-up for a live
// duplicate (issue 12); the decision after the link must still refuse one.
// Here another thread enqueues the id first; the minting thread's enqueue is
// then its first of that id, the one that skips the look-up.
TEST_F(QueueTest, AFreshlyMintedIdEnqueuedElsewhereFirstIsStillADuplicate) {
  const BrandedId id = q().mint();
  std::thread other([&] { EXPECT_EQ(q().enqueue(A, id, "first"), EnqueueStatus::enqueued); });
  other.join();
  EXPECT_EQ(q().enqueue(B, id, "second"), EnqueueStatus::duplicate);
  expect_one_admission(q(), A, B, 1);
  Lease l = claim_one();
  EXPECT_EQ(l.id, id);
  EXPECT_EQ(l.payload, "first");
  Lease none;
  EXPECT_EQ(q().try_claim(none, 1000), ClaimStatus::empty) << "the refused enqueue left a job behind";
  EXPECT_EQ(q().complete(id, l.token), AckStatus::ok);
  EXPECT_TRUE(q().fsck().clean());
}

// A batch mints its ids first and enqueues them after: every id a thread
// minted lately skips the look-up on its first enqueue, not only its last
// (issue 12). The decisions after the link still refuse what must be
// refused: an id another thread enqueued first (items[80]), and an id that
// comes twice in one batch (items[90]), both among the last 64 minted, so
// (unless a millisecond's numbering restarted between them) their first
// enqueue is one that skips the look-up. And an id minted long before
// (pushed out of the thread's recent ones by 100 later mints) goes through
// the look-up as any other.
TEST_F(QueueTest, ABatchOfMintedIdsStillRefusesEveryDuplicate) {
  const BrandedId early = q().mint();
  std::vector<std::string> payloads;  // the items hold views of these
  for (int i = 0; i < 100; ++i) payloads.push_back("job " + std::to_string(i));
  std::vector<EnqueueItem> items;
  for (int i = 0; i < 100; ++i) items.push_back(EnqueueItem{A, q().mint(), payloads[std::size_t(i)]});
  std::thread other([&] {
    EXPECT_EQ(q().enqueue(B, items[80].job, "elsewhere"), EnqueueStatus::enqueued);
    EXPECT_EQ(q().enqueue(B, early, "early elsewhere"), EnqueueStatus::enqueued);
  });
  other.join();
  items.push_back(EnqueueItem{A, items[90].job, "again"});  // twice in one batch
  items.push_back(EnqueueItem{A, early, "early"});
  std::vector<EnqueueStatus> st(items.size());
  EXPECT_EQ(q().enqueue_batch(items, st), 99U);
  for (std::size_t i = 0; i < items.size(); ++i) {
    const bool dup = i == 80 || i == 100 || i == 101;
    EXPECT_EQ(st[i], dup ? EnqueueStatus::duplicate : EnqueueStatus::enqueued) << i;
  }
  EXPECT_EQ(q().depth(A), 99U);
  EXPECT_EQ(q().depth(B), 2U);
  // Every job once, with the payload of its first admission.
  std::map<BrandedId, std::string> seen;
  Lease l;
  while (q().claim(l, 60000)) {
    EXPECT_TRUE(seen.emplace(l.id, l.payload).second) << l.id.str() << " delivered twice";
    ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  }
  EXPECT_EQ(seen.size(), 101U);
  EXPECT_EQ(seen[items[80].job], "elsewhere");
  EXPECT_EQ(seen[items[90].job], "job 90");
  EXPECT_EQ(seen[early], "early elsewhere");
  EXPECT_TRUE(q().fsck().clean());
}

TEST_F(QueueTest, KindMismatchWritesNothing) {
  fill(A, 1);
  const Snapshot before = q().snapshot();
  const BrandedId foreign = q().mint("USR");
  ASSERT_TRUE(foreign.valid());
  EXPECT_EQ(q().enqueue(A, foreign, "x"), EnqueueStatus::kind_mismatch);
  EXPECT_EQ(q().enqueue(B, foreign, "x"), EnqueueStatus::kind_mismatch);  // new group: no lane made
  const Snapshot after = q().snapshot();
  EXPECT_EQ(after.pending, before.pending);
  EXPECT_EQ(after.lanes.size(), before.lanes.size());
  EXPECT_EQ(after.counters.enqueued, before.counters.enqueued);
  EXPECT_EQ(q().depth(A), 1U);
  EXPECT_EQ(q().depth(B), 0U);
  // And the foreign id was not admitted under another name: a claim gets A's job only.
  Lease l = claim_one();
  EXPECT_EQ(l.id.kind(), "JOB");
  EXPECT_FALSE(q().claim(l, 1000));
}

TEST_F(QueueTest, InvalidJobIdWritesNothing) {
  const Snapshot before = q().snapshot();
  EXPECT_EQ(q().enqueue(A, BrandedId{}, "x"), EnqueueStatus::invalid_id);
  EXPECT_EQ(q().snapshot().pending, before.pending);
  EXPECT_EQ(q().snapshot().lanes.size(), before.lanes.size());
}

TEST_F(QueueTest, ForgedMalformedIdsAreRefused) {
  // Bytes that BrandedId::parse would reject, smuggled in through bit_cast.
  const BrandedId bad_group = forged_id("grp0000000000A");  // lowercase namespace
  const BrandedId bad_job = forged_id("JOB00000000-01");    // '-' is not base62
  const BrandedId over_job = forged_id("JOBzzzzzzzzzzz");   // over 2^63-1
  const Snapshot before = q().snapshot();
  EXPECT_EQ(q().enqueue(bad_group, q().mint(), "x"), EnqueueStatus::invalid_group);
  EXPECT_EQ(q().enqueue(A, bad_job, "x"), EnqueueStatus::invalid_id);
  EXPECT_EQ(q().enqueue(A, over_job, "x"), EnqueueStatus::invalid_id);
  EXPECT_EQ(q().set_limit(bad_group, 1), LaneStatus::invalid_group);
  EXPECT_EQ(q().pause(bad_group), LaneStatus::invalid_group);
  const Snapshot after = q().snapshot();
  EXPECT_EQ(after.pending, before.pending);
  EXPECT_EQ(after.lanes.size(), before.lanes.size());
  EXPECT_EQ(after.counters.enqueued, before.counters.enqueued);
}

TEST_F(QueueTest, PayloadSizeLimit) {
  QueueOptions o = small_options();
  o.payload_bytes = 100;
  make_queue(o);
  const Snapshot before = q().snapshot();
  const BrandedId big = q().mint();
  EXPECT_EQ(q().enqueue(A, big, std::string(101, 'x')), EnqueueStatus::payload_too_large);
  EXPECT_EQ(q().enqueue(A, big, std::string(4096, 'x')), EnqueueStatus::payload_too_large);
  const Snapshot mid = q().snapshot();
  EXPECT_EQ(mid.pending, before.pending);
  EXPECT_EQ(mid.lanes.size(), before.lanes.size());
  EXPECT_EQ(q().depth(A), 0U);
  // Nothing was written under that id: it can still be admitted.
  std::string exact(100, '\0');
  for (std::size_t i = 0; i < exact.size(); ++i) exact[i] = static_cast<char>(i * 7 + 1);
  EXPECT_EQ(q().enqueue(A, big, exact), EnqueueStatus::enqueued);
  Lease l = claim_one();
  EXPECT_EQ(l.id, big);
  EXPECT_EQ(l.payload, exact);
}

TEST_F(QueueTest, FullThenRoomAfterComplete) {
  QueueOptions o = small_options();
  o.jobs = 8;
  make_queue(o);
  std::vector<BrandedId> ids;
  for (int i = 0; i < 8; ++i) {
    ids.push_back(q().mint());
    ASSERT_EQ(q().enqueue(i % 2 ? A : B, ids.back(), "j"), EnqueueStatus::enqueued) << i;
  }
  const BrandedId extra = q().mint();
  EXPECT_EQ(q().enqueue(A, extra, "j"), EnqueueStatus::full);
  EXPECT_EQ(q().enqueue(C, extra, "j"), EnqueueStatus::full);
  EXPECT_EQ(q().snapshot().pending, 8U);
  EXPECT_EQ(q().snapshot().jobs_capacity, 8U);
  // A leased job still holds its slot.
  Lease l = claim_one();
  EXPECT_EQ(q().enqueue(A, extra, "j"), EnqueueStatus::full);
  ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  EXPECT_EQ(q().enqueue(A, extra, "j"), EnqueueStatus::enqueued);
  EXPECT_EQ(q().enqueue(A, q().mint(), "j"), EnqueueStatus::full);
}

// ---------------------------------------------------------------- pause

TEST_F(QueueTest, PauseParksLaneWithBacklog) {
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
  EXPECT_EQ(q().depth(B), 5U);
  // Enqueue into a paused lane keeps it parked.
  fill(B, 1);
  EXPECT_EQ(q().depth(B), 6U);
  EXPECT_FALSE(lane(B)->ringed);
  EXPECT_EQ(seq_string(claim_groups(2)), "AAA CCC");

  ASSERT_EQ(q().resume(B), LaneStatus::ok);
  lb = lane(B);
  EXPECT_FALSE(lb->paused);
  EXPECT_TRUE(lb->ringed);
  // Resume pushes B at the tail of the ring (EchoMQ: RPUSH).
  EXPECT_EQ(seq_string(q().snapshot().ring), "AAA CCC BBB");
  EXPECT_EQ(seq_string(claim_groups(6)), "AAA CCC BBB AAA CCC BBB");
  EXPECT_EQ(q().depth(B), 4U);
}

TEST_F(QueueTest, PauseOnlyLaneThenResume) {
  auto ids = fill(A, 2);
  ASSERT_EQ(q().pause(A), LaneStatus::ok);
  Lease l;
  EXPECT_FALSE(q().claim(l, 1000));
  EXPECT_EQ(q().depth(A), 2U);
  ASSERT_EQ(q().resume(A), LaneStatus::ok);
  ASSERT_TRUE(q().claim(l, 1000));
  EXPECT_EQ(l.id, ids[0]);
}

TEST_F(QueueTest, PauseOfUnknownGroupMakesAParkedLane) {
  ASSERT_EQ(q().pause(D), LaneStatus::ok);
  fill(D, 1);
  Lease l;
  EXPECT_FALSE(q().claim(l, 1000));
  ASSERT_EQ(q().resume(D), LaneStatus::ok);
  EXPECT_TRUE(q().claim(l, 1000));
  EXPECT_EQ(l.group, D);
}

TEST_F(QueueTest, CompleteOnPausedLaneDoesNotRering) {
  fill(A, 3);
  Lease l = claim_one();
  ASSERT_EQ(q().pause(A), LaneStatus::ok);
  ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  EXPECT_FALSE(lane(A)->ringed);
  Lease l2;
  EXPECT_FALSE(q().claim(l2, 1000));
}

TEST_F(QueueTest, PauseAllStopsEveryClaim) {
  fill(A, 2);
  fill(B, 2);
  EXPECT_EQ(q().pause_all(), LaneStatus::ok);
  EXPECT_TRUE(q().snapshot().paused);
  Lease l;
  EXPECT_FALSE(q().claim(l, 1000));
  std::array<Lease, 4> batch;
  EXPECT_EQ(q().claim_batch(batch, 1000), 0U);
  // Enqueue still admits while paused.
  fill(C, 1);
  EXPECT_FALSE(q().claim(l, 1000));
  EXPECT_EQ(q().snapshot().pending, 5U);
  EXPECT_EQ(q().snapshot().counters.claimed, 0U);
  q().resume_all();
  EXPECT_FALSE(q().snapshot().paused);
  EXPECT_EQ(seq_string(claim_groups(5)), "AAA BBB CCC AAA BBB");
}

// ---------------------------------------------------------------- limits

TEST_F(QueueTest, LimitOneHoldsLaneUntilComplete) {
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
  // A is at its ceiling: only B and C are served.
  for (int i = 0; i < 6; ++i) {
    Lease l = claim_one();
    EXPECT_NE(l.group, A) << "claim " << i;
    auto a = lane(A);
    EXPECT_LE(a->active, a->limit);
    ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  }
  EXPECT_EQ(q().depth(A), 3U);
  // Completion reopens A (at the ring tail).
  ASSERT_EQ(q().complete(la.id, la.token), AckStatus::ok);
  EXPECT_TRUE(lane(A)->ringed);
  EXPECT_EQ(lane(A)->active, 0U);
  std::vector<BrandedId> served;
  for (int i = 0; i < 3; ++i) served.push_back(claim_one().group);
  EXPECT_EQ(std::count(served.begin(), served.end(), A), 1) << seq_string(served);
}

TEST_F(QueueTest, LimitNeverExceeded) {
  fill(A, 20);
  fill(B, 20);
  ASSERT_EQ(q().set_limit(A, 3), LaneStatus::ok);
  std::vector<Lease> held;
  for (int i = 0; i < 20; ++i) {
    Lease l;
    ASSERT_TRUE(q().claim(l, 60000));
    held.push_back(l);
    auto a = lane(A);
    ASSERT_LE(a->active, 3U) << "after claim " << i;
  }
  long from_a = std::count_if(held.begin(), held.end(), [](const Lease& l) { return l.group == A; });
  EXPECT_EQ(from_a, 3);
  EXPECT_EQ(q().depth(A), 17U);
}

TEST_F(QueueTest, LimitAtOrBelowActiveDeringsAndZeroClears) {
  fill(A, 6);
  fill(B, 6);
  (void)claim_groups(4);  // A B A B: A has 2 active
  ASSERT_EQ(lane(A)->active, 2U);
  ASSERT_EQ(q().set_limit(A, 2), LaneStatus::ok);
  EXPECT_FALSE(lane(A)->ringed);
  EXPECT_EQ(seq_string(claim_groups(2)), "BBB BBB");
  ASSERT_EQ(q().set_limit(A, 1), LaneStatus::ok);  // below active: still off the ring
  EXPECT_FALSE(lane(A)->ringed);
  EXPECT_EQ(seq_string(claim_groups(1)), "BBB");
  // Raising it above active re-rings.
  ASSERT_EQ(q().set_limit(A, 3), LaneStatus::ok);
  EXPECT_TRUE(lane(A)->ringed);
  // Limit 0 clears it: A is served beyond 3.
  ASSERT_EQ(q().set_limit(A, 0), LaneStatus::invalid_argument);  // as in EchoMQ
  ASSERT_EQ(q().clear_limit(A), LaneStatus::ok);
  EXPECT_EQ(lane(A)->limit, 0U);
  EXPECT_TRUE(lane(A)->ringed);
  std::vector<BrandedId> rest = claim_groups(20);
  EXPECT_EQ(std::count(rest.begin(), rest.end(), A), 4);
  EXPECT_EQ(lane(A)->active, 6U);
}

TEST_F(QueueTest, LimitOutOfRange) {
  EXPECT_EQ(q().set_limit(A, kMaxLimit), LaneStatus::ok);
  EXPECT_EQ(q().set_limit(A, kMaxLimit + 1), LaneStatus::invalid_argument);
  EXPECT_EQ(lane(A)->limit, kMaxLimit);
  EXPECT_EQ(q().set_weight(A, kMaxWeight), LaneStatus::ok);
  EXPECT_EQ(q().set_weight(A, kMaxWeight + 1), LaneStatus::invalid_argument);
  EXPECT_EQ(lane(A)->weight, kMaxWeight);
}

TEST_F(QueueTest, LanesFull) {
  QueueOptions o = small_options();
  o.lanes = 4;
  make_queue(o);
  // The default lane may or may not take a table entry; fill until refused.
  int made = 0;
  EnqueueStatus last = EnqueueStatus::enqueued;
  for (std::uint64_t n = 1; n <= 8; ++n) {
    last = q().enqueue(group("LNE", n), q().mint(), "x");
    if (last != EnqueueStatus::enqueued) break;
    ++made;
  }
  EXPECT_EQ(last, EnqueueStatus::lanes_full);
  EXPECT_GE(made, 3);
  EXPECT_LE(made, 4);
  EXPECT_EQ(q().set_limit(group("LNE", 100), 1), LaneStatus::lanes_full);
  // Known lanes keep working.
  EXPECT_EQ(q().enqueue(group("LNE", 1), q().mint(), "y"), EnqueueStatus::enqueued);
  EXPECT_EQ(q().snapshot().pending, static_cast<std::uint64_t>(made + 1));
}

// ---------------------------------------------------------------- depth and drain

TEST_F(QueueTest, DepthCountsBacklog) {
  EXPECT_EQ(q().depth(A), 0U);
  EXPECT_EQ(q().depth(group("ZZZ", 77)), 0U);
  fill(A, 5);
  fill(B, 2);
  EXPECT_EQ(q().depth(A), 5U);
  EXPECT_EQ(q().depth(B), 2U);
  (void)claim_one();  // A
  EXPECT_EQ(q().depth(A), 4U);
  auto li = lane(A);
  EXPECT_EQ(li->depth, 4U);
  EXPECT_EQ(li->active, 1U);
}

TEST_F(QueueTest, DrainRemovesPendingOnly) {
  auto a_ids = fill(A, 5);
  fill(B, 3);
  Lease la = claim_one();  // A's first job, leased
  ASSERT_EQ(la.id, a_ids[0]);
  EXPECT_EQ(q().drain(A), 4U);
  EXPECT_EQ(q().depth(A), 0U);
  EXPECT_FALSE(lane(A)->ringed);
  EXPECT_EQ(seq_string(q().snapshot().ring), "BBB");
  EXPECT_EQ(q().snapshot().counters.drained, 4U);
  EXPECT_EQ(q().snapshot().pending, 3U);
  // The leased job is untouched.
  EXPECT_EQ(q().complete(la.id, la.token), AckStatus::ok);
  // Drained jobs are gone: their ids may be admitted again.
  EXPECT_EQ(q().enqueue(A, a_ids[1], "again"), EnqueueStatus::enqueued);
  EXPECT_EQ(q().drain(A), 1U);
  EXPECT_EQ(q().drain(A), 0U);
  EXPECT_EQ(q().drain(group("ZZZ", 5)), 0U);
  EXPECT_EQ(seq_string(claim_groups(5)), "BBB BBB BBB");
}

TEST_F(QueueTest, DrainFreesSlots) {
  QueueOptions o = small_options();
  o.jobs = 8;
  make_queue(o);
  fill(A, 8);
  EXPECT_EQ(q().enqueue(B, q().mint(), "x"), EnqueueStatus::full);
  EXPECT_EQ(q().drain(A), 8U);
  fill(B, 8);
  EXPECT_EQ(q().snapshot().pending, 8U);
}

}  // namespace
}  // namespace fairlane
