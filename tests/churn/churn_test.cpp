// Tenants come and go (issue 11), in one process: `lanes` bounds the groups
// live at once, never the groups a segment serves in its life. An idle lane
// is taken back by the core (by the sweep, or at once when a new group needs
// one), its settings keep it, and a refused call spends nothing.
//
// Label `churn`. The multi-process form is churn_multiproc_test.cpp.
#include "queue_fixture.hpp"
#include "raw_segment.hpp"

#include "hash.hpp"  // src/: the directory hash, to pick groups that share buckets

#include <algorithm>
#include <bit>
#include <cstring>
#include <string>
#include <vector>

namespace fairlane {
namespace {

using test::QueueTest;
using test::seq_string;

// Churned group n (0-based): "CHG00000000001", ...
BrandedId churn_group(std::uint64_t n) { return BrandedId::make("CHG", n + 1); }

const BrandedId A = BrandedId::make("AAA", 1);
const BrandedId B = BrandedId::make("BBB", 1);
const BrandedId C = BrandedId::make("CCC", 1);
const BrandedId D = BrandedId::make("DDD", 1);
const BrandedId G = BrandedId::make("GGG", 1);

class Churn : public QueueTest {
 protected:
  bool has_lane(const BrandedId& g) { return lane(g).has_value(); }

  // What a refused call must leave as it was.
  struct Counts {
    std::uint64_t pending, leased, scheduled, dead, lanes_live, lane_rows, enqueued, duplicates;
  };
  Counts counts() {
    const Snapshot s = q().snapshot();
    return {s.pending, s.leased, s.scheduled, s.dead, s.lanes_live, s.lanes.size(), s.counters.enqueued,
            s.counters.duplicates};
  }
  void expect_same(const Counts& before, const Counts& after, const char* what) {
    EXPECT_EQ(after.pending, before.pending) << what;
    EXPECT_EQ(after.leased, before.leased) << what;
    EXPECT_EQ(after.scheduled, before.scheduled) << what;
    EXPECT_EQ(after.dead, before.dead) << what;
    EXPECT_EQ(after.lanes_live, before.lanes_live) << what;
    EXPECT_EQ(after.lane_rows, before.lane_rows) << what;
    EXPECT_EQ(after.enqueued, before.enqueued) << what;
  }

  // Runs the sweep that reclaims idle lanes: a lane found idle on two visits
  // recovery_ms/2 apart goes. Moves the segment clock past recovery_ms twice
  // over, ticking and claiming (claims run the sweep) at each half.
  void sweep_past_recovery() {
    const std::uint32_t half = q().config().recovery_ms / 2 + 1;
    Lease l;
    for (int i = 0; i < 5; ++i) {
      q().advance_clock(half);
      q().tick();
      const ClaimStatus st = q().try_claim(l, 60000);
      ASSERT_NE(st, ClaimStatus::claimed) << "a sweep's claim found work: the test left a job pending";
    }
  }

  // Enqueues one job to each of groups [first, first + n), claims and
  // completes them all; checks each delivery.
  void churn_wave(std::uint64_t first, std::uint64_t n) {
    for (std::uint64_t i = 0; i < n; ++i) {
      const EnqueueStatus st = q().enqueue(churn_group(first + i), q().mint(), std::to_string(first + i));
      ASSERT_EQ(st, EnqueueStatus::enqueued) << "group " << first + i << " (" << churn_group(first + i).str()
                                             << "), lanes_live " << q().snapshot().lanes_live;
    }
    std::vector<Lease> held(n);
    for (std::uint64_t i = 0; i < n; ++i) {
      ASSERT_EQ(q().try_claim(held[i], 60000), ClaimStatus::claimed) << "claim " << i << " of " << n;
      const std::uint64_t g = std::stoull(held[i].payload);
      ASSERT_TRUE(g >= first && g < first + n) << held[i].payload;
      ASSERT_EQ(held[i].group, churn_group(g));
    }
    for (auto& l : held) ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  }
};

// ---------------------------------------------------------------- 100,000 groups

TEST_F(Churn, HundredThousandGroupsThroughSixtyFourLanes) {
  constexpr std::uint64_t kGroups = 100'000, kLanes = 64;
  QueueOptions o;
  o.jobs = 4096;
  o.lanes = kLanes;
  o.payload_bytes = 32;
  make_queue(o);

  std::vector<std::uint8_t> delivered(kGroups, 0);
  std::uint64_t reclaimed = 0, reclaimed_grew = 0, max_live = 0, waves = 0;
  auto look = [&](const char* when, std::uint64_t group) {
    const Snapshot s = q().snapshot();
    max_live = std::max(max_live, s.lanes_live);
    ASSERT_LE(s.lanes_live, kLanes + 1) << when << " group " << group;
    ASSERT_EQ(s.lanes_capacity, kLanes);
    ASSERT_GE(s.lanes_reclaimed, reclaimed) << "lanes_reclaimed went back, " << when;
    reclaimed_grew += s.lanes_reclaimed > reclaimed;
    reclaimed = s.lanes_reclaimed;
  };

  std::vector<Lease> held(kLanes);
  for (std::uint64_t first = 0; first < kGroups; ++waves) {
    // Mostly full waves of 64; every fourth a smaller one, so waves do not
    // line up with the lane table.
    const std::uint64_t size = std::min<std::uint64_t>(waves % 4 == 3 ? 1 + waves % kLanes : kLanes, kGroups - first);
    for (std::uint64_t i = 0; i < size; ++i) {
      const std::uint64_t g = first + i;
      const EnqueueStatus st = q().enqueue(churn_group(g), q().mint(), std::to_string(g));
      ASSERT_EQ(st, EnqueueStatus::enqueued) << "group " << g << " (" << churn_group(g).str() << ", wave " << waves
                                             << "): lanes_live " << q().snapshot().lanes_live;
      if (i == size / 2) {
        ASSERT_NO_FATAL_FAILURE(look("mid-enqueue", g));
      }
    }
    ASSERT_NO_FATAL_FAILURE(look("after the wave's enqueues", first));
    for (std::uint64_t i = 0; i < size; ++i) {
      Lease& l = held[i];
      ASSERT_EQ(q().try_claim(l, 60000), ClaimStatus::claimed) << "wave " << waves << " claim " << i;
      const std::uint64_t g = std::stoull(l.payload);
      ASSERT_TRUE(g >= first && g < first + size) << "wave " << waves << " delivered " << l.payload;
      ASSERT_EQ(l.group, churn_group(g)) << "job of group " << g << " served from " << l.group.str();
      ASSERT_EQ(delivered[g]++, 0) << "group " << g << " delivered twice";
    }
    Lease none;
    ASSERT_EQ(q().try_claim(none, 60000), ClaimStatus::empty) << "more jobs than enqueued, wave " << waves;
    ASSERT_NO_FATAL_FAILURE(look("after the wave's claims", first));
    // Complete in claim order, or the reverse.
    for (std::uint64_t i = 0; i < size; ++i) {
      const Lease& l = held[waves % 2 ? size - 1 - i : i];
      ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
    }
    ASSERT_NO_FATAL_FAILURE(look("after the wave's completes", first));
    // Now and then the sweep reclaims the idle lanes instead of the next
    // wave's enqueues.
    if (waves % 97 == 50) {
      ASSERT_NO_FATAL_FAILURE(sweep_past_recovery());
    }
    first += size;
  }

  EXPECT_EQ(std::count(delivered.begin(), delivered.end(), 1), std::ptrdiff_t(kGroups));
  const Snapshot s = q().snapshot();
  EXPECT_EQ(s.pending + s.leased + s.scheduled + s.dead, 0U);
  EXPECT_EQ(s.counters.enqueued, kGroups);
  EXPECT_EQ(s.counters.completed, kGroups);
  // At most 64 live at once: every group past the first 64 needed a lane
  // given back by an earlier one.
  EXPECT_GE(s.lanes_reclaimed, kGroups - kLanes);
  EXPECT_GT(reclaimed_grew, waves / 2) << "lanes_reclaimed did not grow with the churn";
  EXPECT_LE(max_live, kLanes + 1);
  const FsckReport r = q().fsck();
  EXPECT_TRUE(r.clean()) << r.issues.size() << " issues, first: "
                         << (r.issues.empty() ? "" : r.issues[0].invariant + ": " + r.issues[0].detail);
}

// ---------------------------------------------------------------- settings of idle groups

TEST_F(Churn, SettingsOfIdleGroupsSurviveTheChurnOfOthers) {
  QueueOptions o;
  o.jobs = 256;
  o.lanes = 16;
  o.payload_bytes = 32;
  make_queue(o);
  // Set while idle: no job in any of them.
  ASSERT_EQ(q().set_limit(A, 1), LaneStatus::ok);
  ASSERT_EQ(q().set_weight(B, 3), LaneStatus::ok);
  ASSERT_EQ(q().pause(C), LaneStatus::ok);
  ASSERT_TRUE(has_lane(A) && has_lane(B) && has_lane(C)) << "a setting holds a lane";

  // 5,000 other groups through the 13 lanes left, both reclaim paths.
  constexpr std::uint64_t kOthers = 5000, kWave = 13;
  for (std::uint64_t first = 0, wave = 0; first < kOthers; first += kWave, ++wave) {
    ASSERT_NO_FATAL_FAILURE(churn_wave(first, std::min(kWave, kOthers - first))) << "wave " << wave;
    if (wave % 25 == 24) {
      ASSERT_NO_FATAL_FAILURE(sweep_past_recovery());
    }
  }
  ASSERT_NO_FATAL_FAILURE(sweep_past_recovery());

  auto a = lane(A), b = lane(B), c = lane(C);
  ASSERT_TRUE(a.has_value()) << "A's lane (limit 1) was reclaimed";
  ASSERT_TRUE(b.has_value()) << "B's lane (weight 3) was reclaimed";
  ASSERT_TRUE(c.has_value()) << "C's lane (paused) was reclaimed";
  EXPECT_EQ(a->limit, 1U);
  EXPECT_EQ(b->weight, 3U);
  EXPECT_TRUE(c->paused);

  // A: never two leased at once.
  auto a_ids = fill(A, 3);
  for (int i = 0; i < 3; ++i) {
    Lease l = claim_one();
    ASSERT_EQ(l.id, a_ids[i]);
    Lease second;
    EXPECT_EQ(q().try_claim(second, 60000), ClaimStatus::empty) << "A served a second job while one is leased";
    std::vector<Lease> batch(3);
    EXPECT_EQ(q().claim_batch(batch, 60000), 0U);
    EXPECT_EQ(lane(A)->active, 1U);
    ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  }

  // B: three claims per turn against D's one.
  fill(B, 9);
  fill(D, 3);
  const std::vector<BrandedId> served = claim_groups(12);
  ASSERT_EQ(served.size(), 12U);
  std::vector<std::pair<BrandedId, int>> runs;
  for (const auto& g : served) {
    if (runs.empty() || runs.back().first != g) runs.push_back({g, 0});
    ++runs.back().second;
  }
  for (const auto& [g, n] : runs) {
    if (g == B) EXPECT_EQ(n, 3) << seq_string(served);
    else EXPECT_EQ(n, 1) << seq_string(served);
  }
  EXPECT_EQ(std::count(served.begin(), served.end(), B), 9) << seq_string(served);

  // C: nothing until resumed.
  auto c_ids = fill(C, 2);
  Lease l;
  EXPECT_EQ(q().try_claim(l, 60000), ClaimStatus::empty) << "the paused lane was served";
  EXPECT_EQ(lane(C)->depth, 2U);
  EXPECT_FALSE(lane(C)->ringed);
  ASSERT_EQ(q().resume(C), LaneStatus::ok);
  EXPECT_EQ(claim_one().id, c_ids[0]);
  EXPECT_EQ(claim_one().id, c_ids[1]);
}

// ---------------------------------------------------------------- refusals spend nothing

TEST_F(Churn, AFullRefusalSpendsNothing) {
  QueueOptions o;
  o.jobs = 8;
  o.lanes = 16;
  o.payload_bytes = 32;
  make_queue(o);
  auto ids = fill(A, 8);
  const Counts before = counts();
  const BrandedId refused = q().mint(), refused_new_group = q().mint();
  EXPECT_EQ(q().enqueue(A, refused, "x"), EnqueueStatus::full);
  EXPECT_EQ(q().enqueue(G, refused_new_group, "x"), EnqueueStatus::full);
  expect_same(before, counts(), "after two `full` refusals");
  EXPECT_FALSE(q().job(refused).has_value());
  EXPECT_FALSE(q().job(refused_new_group).has_value());
  EXPECT_FALSE(has_lane(G)) << "a refused enqueue left a lane for its new group";
  EXPECT_EQ(q().depth(A), 8U);
  EXPECT_EQ(q().depth(G), 0U);
  // One slot freed takes exactly one job, and the refused id is new to the
  // queue (not a duplicate).
  Lease l = claim_one();
  ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  EXPECT_EQ(q().enqueue(G, refused_new_group, "y"), EnqueueStatus::enqueued);
  EXPECT_EQ(q().enqueue(A, refused, "y"), EnqueueStatus::full);
  EXPECT_TRUE(q().fsck().clean());
}

TEST_F(Churn, ALanesFullRefusalSpendsNothing) {
  QueueOptions o;
  o.jobs = 64;
  o.lanes = 4;
  o.payload_bytes = 32;
  make_queue(o);
  for (std::uint64_t g = 0; g < 4; ++g) fill(churn_group(g), 1);  // four live groups: no idle lane
  const Counts before = counts();
  const BrandedId id = q().mint();
  EXPECT_EQ(q().enqueue(G, id, "x"), EnqueueStatus::lanes_full);
  EXPECT_EQ(q().pause(G), LaneStatus::lanes_full);
  EXPECT_EQ(q().set_limit(G, 2), LaneStatus::lanes_full);
  EXPECT_EQ(q().set_weight(G, 2), LaneStatus::lanes_full);
  expect_same(before, counts(), "after lanes_full refusals");
  EXPECT_FALSE(q().job(id).has_value());
  EXPECT_FALSE(has_lane(G));
  // No slot was spent: the other 60 still fit, exactly.
  for (int i = 0; i < 60; ++i) ASSERT_EQ(q().enqueue(churn_group(i % 4), q().mint(), "f"), EnqueueStatus::enqueued) << i;
  EXPECT_EQ(q().enqueue(churn_group(0), q().mint(), "f"), EnqueueStatus::full);
  EXPECT_TRUE(q().fsck().clean());
}

TEST_F(Churn, ADuplicateSpendsNothing) {
  QueueOptions o;
  o.jobs = 16;
  o.lanes = 4;
  o.payload_bytes = 32;
  make_queue(o);
  const BrandedId x = q().mint();
  ASSERT_EQ(q().enqueue(A, x, "first"), EnqueueStatus::enqueued);
  const Counts before = counts();
  EXPECT_EQ(q().enqueue(A, x, "second"), EnqueueStatus::duplicate);
  EXPECT_EQ(q().enqueue(G, x, "third"), EnqueueStatus::duplicate);  // a new group: no lane for it either
  const Counts after = counts();
  expect_same(before, after, "after duplicates");
  EXPECT_EQ(after.duplicates, before.duplicates + 2);
  EXPECT_FALSE(has_lane(G));
  auto info = q().job(x, true);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->group, A);
  EXPECT_EQ(info->payload, "first");
  // Leased, it is still a duplicate, and still spends nothing.
  Lease l = claim_one();
  const Counts leased = counts();
  EXPECT_EQ(q().enqueue(G, x, "fourth"), EnqueueStatus::duplicate);
  expect_same(leased, counts(), "after a duplicate of a leased job");
  EXPECT_FALSE(has_lane(G));
  ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  // The other 16 slots are all there.
  for (int i = 0; i < 16; ++i) ASSERT_EQ(q().enqueue(A, q().mint(), "f"), EnqueueStatus::enqueued) << i;
  EXPECT_EQ(q().enqueue(A, q().mint(), "f"), EnqueueStatus::full);
}

TEST_F(Churn, ANewGroupTakesAnIdleLaneRatherThanLanesFull) {
  QueueOptions o;
  o.jobs = 64;
  o.lanes = 4;
  o.payload_bytes = 32;
  make_queue(o);
  // Four groups pass through; each is idle again at once.
  for (std::uint64_t g = 0; g < 4; ++g) ASSERT_NO_FATAL_FAILURE(churn_wave(g, 1));
  // No sweep ran: the lanes are idle but not yet reclaimed. New groups,
  // through each call that can name one, take them.
  const BrandedId e1 = BrandedId::make("EEE", 1), e2 = BrandedId::make("EEE", 2), e3 = BrandedId::make("EEE", 3),
                  e4 = BrandedId::make("EEE", 4);
  EXPECT_EQ(q().enqueue(e1, q().mint(), "x"), EnqueueStatus::enqueued);
  EXPECT_EQ(q().pause(e2), LaneStatus::ok);
  EXPECT_EQ(q().set_limit(e3, 2), LaneStatus::ok);
  EXPECT_EQ(q().set_weight(e4, 2), LaneStatus::ok);
  const Snapshot s = q().snapshot();
  EXPECT_LE(s.lanes_live, 5U);
  EXPECT_GE(s.lanes_reclaimed, 4U);
  // Now all four are live (a job or a setting): a fifth is refused.
  EXPECT_EQ(q().enqueue(G, q().mint(), "x"), EnqueueStatus::lanes_full);
  EXPECT_TRUE(q().fsck().clean());
}

// ---------------------------------------------------------------- a stale view after a reclaim

TEST_F(Churn, AnOldLeaseAfterItsLaneWasReclaimedAndReused) {
  QueueOptions o;
  o.jobs = 256;
  o.lanes = 64;
  o.payload_bytes = 32;
  make_queue(o);
  const BrandedId x = q().mint();
  ASSERT_EQ(q().enqueue(G, x, "old"), EnqueueStatus::enqueued);
  Lease old = claim_one();
  ASSERT_EQ(old.group, G);
  ASSERT_EQ(q().complete(x, old.token), AckStatus::ok);
  const std::uint64_t reclaimed_before = q().snapshot().lanes_reclaimed;
  ASSERT_NO_FATAL_FAILURE(sweep_past_recovery());
  EXPECT_FALSE(has_lane(G)) << "the sweep left the idle lane of G";
  EXPECT_GT(q().snapshot().lanes_reclaimed, reclaimed_before);

  // 64 other groups: every lane record is in use, G's old one included.
  std::vector<Lease> held;
  for (std::uint64_t g = 0; g < 64; ++g)
    ASSERT_EQ(q().enqueue(churn_group(g), q().mint(), "other"), EnqueueStatus::enqueued) << g;
  EXPECT_GE(q().snapshot().lanes_live, 64U);
  EXPECT_LE(q().snapshot().lanes_live, 65U);
  // The old lease names a job that is gone: stale or gone, and nothing changes.
  const Snapshot before = q().snapshot();
  auto stale_or_gone = [](AckStatus st) { return st == AckStatus::stale || st == AckStatus::gone; };
  EXPECT_PRED1(stale_or_gone, q().complete(x, old.token));
  const FailStatus fs = q().fail(x, old.token, FailOptions{});
  EXPECT_TRUE(fs == FailStatus::stale || fs == FailStatus::gone) << to_string(fs);
  EXPECT_PRED1(stale_or_gone, q().extend(x, old.token, 1000));
  EXPECT_PRED1(stale_or_gone, q().release(x, old.token));
  const Snapshot after = q().snapshot();
  EXPECT_EQ(after.pending, before.pending);
  EXPECT_EQ(after.counters.completed, before.counters.completed);
  EXPECT_FALSE(q().job(x).has_value());
  for (int i = 0; i < 64; ++i) held.push_back(claim_one());
  for (const auto& l : held) {
    EXPECT_NE(l.group, G);
    ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  }
  // G comes back: its jobs go to G, the old id again too, under a new token.
  const BrandedId y = q().mint();
  ASSERT_EQ(q().enqueue(G, y, "new"), EnqueueStatus::enqueued);
  ASSERT_EQ(q().enqueue(G, x, "old again"), EnqueueStatus::enqueued);
  EXPECT_EQ(q().complete(x, old.token), AckStatus::stale);  // the id exists again, not under that token
  Lease l1 = claim_one(), l2 = claim_one();
  EXPECT_EQ(l1.group, G);
  EXPECT_EQ(l1.id, x);  // id order within G
  EXPECT_EQ(l1.attempt, 1U);
  EXPECT_NE(l1.token, old.token);
  EXPECT_EQ(l2.group, G);
  EXPECT_EQ(l2.id, y);
  EXPECT_EQ(q().complete(x, old.token), AckStatus::stale);
  EXPECT_EQ(q().release(x, old.token), AckStatus::stale);
  EXPECT_EQ(q().complete(x, l1.token), AckStatus::ok);
  EXPECT_EQ(q().complete(y, l2.token), AckStatus::ok);
  EXPECT_TRUE(q().fsck().clean());
}

// ---------------------------------------------------------------- scheduled and dead jobs hold no lane

TEST_F(Churn, ScheduledAndDeadJobsHoldNoLane) {
  QueueOptions o;
  o.jobs = 64;
  o.lanes = 4;
  o.payload_bytes = 32;
  make_queue(o);
  const BrandedId g1 = BrandedId::make("GDA", 1), g2 = BrandedId::make("GDB", 1);
  const BrandedId h1 = BrandedId::make("HSA", 1), h2 = BrandedId::make("HSB", 1);
  BrandedId dead_ids[2];
  for (int i = 0; i < 2; ++i) {
    const BrandedId& g = i == 0 ? g1 : g2;
    dead_ids[i] = q().mint();
    ASSERT_EQ(q().enqueue(g, dead_ids[i], "dead"), EnqueueStatus::enqueued);
    Lease l = claim_one();
    ASSERT_EQ(l.id, dead_ids[i]);
    ASSERT_EQ(q().fail(l.id, l.token, FailOptions{0, 1, "to the dead letters"}), FailStatus::dead);
  }
  const BrandedId later1 = q().mint(), later2 = q().mint();
  ASSERT_EQ(q().enqueue(h1, later1, "later", EnqueueOptions{60'000}), EnqueueStatus::enqueued);
  ASSERT_EQ(q().enqueue(h2, later2, "later", EnqueueOptions{60'000}), EnqueueStatus::enqueued);
  // Four groups hold only dead or scheduled jobs: four new groups fit.
  std::vector<BrandedId> fresh;
  for (std::uint64_t g = 0; g < 4; ++g) {
    fresh.push_back(q().mint());
    ASSERT_EQ(q().enqueue(churn_group(g), fresh.back(), "now"), EnqueueStatus::enqueued)
        << "group " << g << ": lanes_live " << q().snapshot().lanes_live;
  }
  // The dead and scheduled jobs are all still there, in their groups.
  JobFilter dead;
  dead.state = JobState::dead;
  auto d = q().jobs(dead);
  ASSERT_EQ(d.size(), 2U);
  EXPECT_EQ(d[0].id, dead_ids[0]);
  EXPECT_EQ(d[0].group, g1);
  EXPECT_EQ(d[1].group, g2);
  EXPECT_EQ(q().job(later1)->state, JobState::scheduled);
  EXPECT_EQ(q().job(later2)->group, h2);
  for (int i = 0; i < 4; ++i) {
    Lease l = claim_one();
    ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  }
  // Requeued and promoted, they get lanes again and are served from their groups.
  ASSERT_EQ(q().requeue_dead(dead_ids[0]), AckStatus::ok);
  Lease l = claim_one();
  EXPECT_EQ(l.id, dead_ids[0]);
  EXPECT_EQ(l.group, g1);
  ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  q().advance_clock(61'000);
  q().tick();
  std::vector<BrandedId> promoted = claim_groups(2);
  std::sort(promoted.begin(), promoted.end());
  EXPECT_EQ(seq_string(promoted), "HSA HSB");
  EXPECT_EQ(q().snapshot().dead, 1U);
  EXPECT_EQ(q().job(dead_ids[1])->group, g2);
}

// ---------------------------------------------------------------- the lane directory

// A group finds its lane through two buckets of four directory entries
// (docs/design.md, "Tenants come and go"). With every lane live, as the
// on-demand reclaim keeps them, a new group whose two buckets were both full
// of other groups' entries was refused lanes_full (buckets_full) however few
// groups had work: ChurnMultiProc met it about once in 10^7 new groups.
// These tests pick groups by the segment's own hash (src/hash.hpp, as
// lanes.cpp's dir_probe computes it) so that the case happens every time.
class ChurnDirectory : public Churn {
 protected:
  struct Pair {
    std::uint64_t b1, b2;
  };
  void SetUp() override {
    QueueOptions o;
    o.jobs = 256;
    o.lanes = 64;
    o.payload_bytes = 32;
    make_queue(o);
    test::RawSegment raw(seg());
    seed_ = raw.header().hash_seed;
    mask_ = raw.header().dir_buckets - 1;
  }
  Pair buckets(const BrandedId& g) const {
    const std::uint64_t h = detail::group_hash(detail::kind_code(g.kind()), g.snowflake(), seed_);
    Pair p{h & mask_, detail::mix64(h) & mask_};
    if (p.b2 == p.b1) p.b2 = p.b1 ^ 1;
    return p;
  }
  // n groups of namespace `kind` (numbered from 1) for which `want` holds.
  template <class F>
  std::vector<BrandedId> pick(std::string_view kind, std::size_t n, F want) const {
    std::vector<BrandedId> out;
    for (std::uint64_t i = 1; out.size() < n && i < 50'000'000; ++i) {
      const BrandedId g = BrandedId::make(kind, i);
      if (want(g, buckets(g))) out.push_back(g);
    }
    EXPECT_EQ(out.size(), n) << "not enough groups of " << kind << " with the wanted buckets";
    return out;
  }
  std::uint64_t seed_ = 0, mask_ = 0;
};

// Eight busy groups, four of which have the target's first bucket as their
// first and four its second, and each a second bucket of its own with room.
// First fit filled the target's two buckets with them and refused it with
// 56 lane records free; placing each entry in the emptier of its two buckets
// leaves room.
TEST_F(ChurnDirectory, EntriesGoToTheEmptierBucketSoBusyNeighboursLeaveRoom) {
  const BrandedId t = BrandedId::make("TGT", 1);
  const Pair tp = buckets(t);
  std::vector<std::uint64_t> used{tp.b1, tp.b2};
  auto own_second = [&](std::uint64_t first) {
    return [&, first](const BrandedId&, Pair p) {
      if (p.b1 != first || std::find(used.begin(), used.end(), p.b2) != used.end()) return false;
      used.push_back(p.b2);
      return true;
    };
  };
  std::vector<BrandedId> busy = pick("FIA", 4, own_second(tp.b1));
  const std::vector<BrandedId> more = pick("FIB", 4, own_second(tp.b2));
  ASSERT_FALSE(HasFailure());
  busy.insert(busy.end(), more.begin(), more.end());
  for (const auto& g : busy) ASSERT_EQ(q().enqueue(g, q().mint(), "busy"), EnqueueStatus::enqueued) << g.str();
  ASSERT_EQ(q().snapshot().lanes_live, busy.size());
  EXPECT_EQ(q().enqueue(t, q().mint(), "target"), EnqueueStatus::enqueued)
      << "9 of 64 lanes wanted, lanes_live " << q().snapshot().lanes_live;
  EXPECT_TRUE(has_lane(t));
  EXPECT_TRUE(q().fsck().clean());
}

// Eight groups whose two buckets are exactly the target's, each idle again
// (its job completed; no sweep has run): their entries fill both buckets
// and there are free lane records, so the on-demand reclaim (which runs only
// when no record is free) never looked at them. The creation gives back an
// idle lane named in its own buckets, as it gives one back for a record.
TEST_F(ChurnDirectory, IdleGroupsFillingBothBucketsAreReclaimedForANewGroup) {
  const BrandedId t = BrandedId::make("TGT", 1);
  const Pair tp = buckets(t);
  const std::vector<BrandedId> idle = pick("FIC", 8, [&](const BrandedId&, Pair p) {
    return (p.b1 == tp.b1 && p.b2 == tp.b2) || (p.b1 == tp.b2 && p.b2 == tp.b1);
  });
  ASSERT_FALSE(HasFailure());
  for (const auto& g : idle) {
    ASSERT_EQ(q().enqueue(g, q().mint(), "x"), EnqueueStatus::enqueued) << g.str();
    Lease l = claim_one();
    ASSERT_EQ(l.group, g);
    ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  }
  const Snapshot before = q().snapshot();
  ASSERT_EQ(before.lanes_live, 8U) << "the eight idle lanes stay live until something reclaims them";
  EXPECT_EQ(q().enqueue(t, q().mint(), "target"), EnqueueStatus::enqueued)
      << "8 idle lanes, 56 free records, lanes_live " << q().snapshot().lanes_live;
  EXPECT_GT(q().snapshot().lanes_reclaimed, before.lanes_reclaimed);
  Lease l = claim_one();
  EXPECT_EQ(l.group, t);
  ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  EXPECT_TRUE(q().fsck().clean());
}

// The limit that remains: eight groups with work whose two buckets are the
// target's own leave it nowhere (two choices of four ways; no entry is ever
// moved). The answer is lanes_full, and it spends nothing; once one of them
// is idle the target gets a lane.
TEST_F(ChurnDirectory, EightBusyGroupsInBothOfItsBucketsStillRefuseAGroup) {
  const BrandedId t = BrandedId::make("TGT", 1);
  const Pair tp = buckets(t);
  const std::vector<BrandedId> busy = pick("FID", 8, [&](const BrandedId&, Pair p) {
    return (p.b1 == tp.b1 && p.b2 == tp.b2) || (p.b1 == tp.b2 && p.b2 == tp.b1);
  });
  ASSERT_FALSE(HasFailure());
  for (const auto& g : busy) ASSERT_EQ(q().enqueue(g, q().mint(), "busy"), EnqueueStatus::enqueued) << g.str();
  const Counts before = counts();
  EXPECT_EQ(q().enqueue(t, q().mint(), "target"), EnqueueStatus::lanes_full);
  expect_same(before, counts(), "after a refusal for want of directory room");
  Lease l = claim_one();
  ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  EXPECT_EQ(q().enqueue(t, q().mint(), "target"), EnqueueStatus::enqueued);
  EXPECT_TRUE(q().fsck().clean());
}

}  // namespace
}  // namespace fairlane
