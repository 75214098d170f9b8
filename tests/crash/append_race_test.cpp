// Appends racing the end of the run, and the recovery of a dead appender:
//  - an appender stopped after its walk and its re-read of the lane word,
//    just before its link CAS (failpoint run.walked), while the node it is
//    about to link after is sealed and popped, and then reused as the same
//    lane's first node: its CAS fails and it links again, in id order;
//  - a sweep settling a dead appender's `link` intent (appended()) stopped
//    before it reads anything (failpoint settle.appended), while the node
//    the appender linked after is popped and its slot reused.
#include <gtest/gtest.h>

#include <fairlane/queue.hpp>

#include <signal.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <optional>
#include <thread>
#include <vector>

#include "../../src/failpoint.hpp"
#include "../../src/hash.hpp"
#include "../../src/lane_order.hpp"
#include "forked_child.hpp"
#include "raw_segment.hpp"
#include "stopped_call.hpp"
#include "stopped_mover.hpp"
#include "test_support.hpp"

namespace fairlane {
namespace {

using test::ForkedChild;
using test::RawSegment;
using test::SegmentFixture;
using test::SharedBlock;
using test::StoppedCall;
using test::StoppedMover;

const BrandedId G = BrandedId::make("GRP", 7);
const BrandedId H = BrandedId::make("HHH", 9);

struct Shared {
  std::atomic<int> status{-1};
  char y[32] = {};
};

using test::expect_clean;
using test::serve_all;
using test::wait_stopped;

// The tables these races need: 8 job slots (16-byte payloads), 8 lanes.
QueueOptions small() {
  QueueOptions o;
  o.jobs = 8;
  o.lanes = 8;
  o.payload_bytes = 16;
  return o;
}

class AppendRace : public SegmentFixture {
 protected:
  // reuse: the node the stopped appender walked to is completed and its slot
  // reused as the first node of the same lane (a later id) before it resumes.
  void scenario(bool reuse) {
    create(small());
    ASSERT_FALSE(HasFailure());
    Queue& q = this->q();
    const BrandedId x = q.mint();
    ASSERT_EQ(q.enqueue(G, x, "x"), EnqueueStatus::enqueued);
    std::uint32_t x_head = 0;
    {
      RawSegment raw(seg());
      const std::uint32_t lane = raw.find_lane([](const detail::Word128& w) { return detail::LaneWord::head(w) != 0; });
      ASSERT_NE(lane, ~0U);
      x_head = detail::LaneWord::head(raw.word_value(raw.lane(lane).word));
    }
    SharedBlock<Shared> sh;
    const std::string name = seg();
    ForkedChild child([&]() -> int {
      auto r = Queue::open(name);
      if (!r) return 3;
      Queue cq = std::move(r.value());
      const BrandedId y = cq.mint();
      std::memcpy(sh->y, y.str().data(), y.str().size());
      detail::failpoint_arm("run.walked", 1, detail::FailpointAction::stop);
      const EnqueueStatus st = cq.enqueue(G, y, "y");
      sh->status = int(st);
      return st == EnqueueStatus::enqueued ? 0 : 4;
    });
    ASSERT_TRUE(wait_stopped(child.pid())) << "child did not reach run.walked";
    const BrandedId y = *BrandedId::parse(std::string_view(sh->y, 14));
    ASSERT_LT(x.snowflake(), y.snowflake());
    BrandedId z;
    {
      // x is the run's head and last; the child is about to CAS x's link.
      ASSERT_EQ(q.pause(H), LaneStatus::ok);
      std::vector<BrandedId> hs;
      if (reuse)
        for (int i = 0; i < 6; ++i) {  // every other slot taken, so that the next enqueue reuses x's
          hs.push_back(q.mint());
          ASSERT_EQ(q.enqueue(H, hs.back(), "h"), EnqueueStatus::enqueued);
        }
      Lease l;
      ASSERT_TRUE(q.claim(l, 60000));  // seals x's link (last node) and pops it
      ASSERT_EQ(l.id, x);
      ASSERT_EQ(q.complete(l.id, l.token), AckStatus::ok);
      if (reuse) {
        z = q.mint();
        ASSERT_EQ(q.enqueue(G, z, "z"), EnqueueStatus::enqueued);
        RawSegment raw(seg());
        const std::uint32_t lane = raw.find_lane([](const detail::Word128& w) { return detail::LaneWord::head(w) != 0; });
        ASSERT_NE(lane, ~0U);
        EXPECT_EQ(detail::LaneWord::head(raw.word_value(raw.lane(lane).word)), x_head) << "z did not reuse x's slot";
      }
    }
    ::kill(child.pid(), SIGCONT);
    ASSERT_TRUE(child.wait_for(std::chrono::seconds(10)));
    ASSERT_TRUE(child.exited_zero()) << child.describe() << " status " << sh->status.load();
    // Served in id order: y, then z; each once.
    const std::vector<BrandedId> got = serve_all(q);
    std::vector<BrandedId> want{y};
    if (reuse) want.push_back(z);
    EXPECT_EQ(got, want);
    expect_clean(q);
  }
};

TEST_F(AppendRace, WalkEndSealedAndPoppedBeforeTheLinkCas) { scenario(false); }
TEST_F(AppendRace, WalkEndPoppedAndReusedAsTheSameLanesFirstNodeBeforeTheLinkCas) { scenario(true); }

// Contention is not corruption. A helper thread steps in at a failpoint of
// the main thread's append or insert, each time it is reached, so that the
// main thread's CAS there loses, for more rounds than the old bounds (every
// round counted: jobs + 16 for a run append, jobs + 64 for a strays insert)
// allowed; those answered corrupt. Each lost round is the helper's progress:
// the main thread's step must simply go through once the helper stops.
class Contention : public SegmentFixture {
 public:
  struct Ctx {
    std::thread::id main;
    int limit = 0;
    std::atomic<int> fired{0};
    std::atomic<int> requested{0}, served{0};
    std::atomic<bool> stop{false};
  };

  static void step_in(void* p) {
    Ctx& c = *static_cast<Ctx*>(p);
    if (std::this_thread::get_id() != c.main || c.fired.load() >= c.limit) return;
    const int n = c.fired.fetch_add(1) + 1;
    c.requested.store(n);
    while (c.served.load() < n && !c.stop.load()) std::this_thread::yield();
  }

  // Runs `helper_step(i)` on a helper thread each time the main thread
  // reaches `point`, `limit` times, around `body` (on the main thread).
  template <class Step, class Body>
  void with_helper(const char* point, int limit, Step helper_step, Body body) {
    Ctx c;
    c.main = std::this_thread::get_id();
    c.limit = limit;
    std::thread helper([&] {
      int done = 0;
      while (!c.stop.load()) {
        if (c.requested.load() > done) {
          helper_step(done);
          c.served.store(++done);
        } else {
          std::this_thread::yield();
        }
      }
    });
    detail::failpoint_call(point, &Contention::step_in, &c);
    body();
    detail::failpoint_call(point, nullptr, nullptr);
    c.stop.store(true);
    helper.join();
    EXPECT_EQ(c.fired.load(), limit) << "the main thread's step did not lose as often as planned";
  }

};

TEST_F(Contention, AnAppendWhoseLinkLosesMoreRoundsThanTheOldBoundLinksInIdOrder) {
  QueueOptions o = small();
  o.jobs = 16;
  create(o);
  ASSERT_FALSE(HasFailure());
  Queue& q = this->q();
  constexpr int kRounds = 48;  // the old bound: 16 + 16 + 1 rounds
  const BrandedId x = q.mint();
  std::vector<BrandedId> rivals;
  for (int i = 0; i < kRounds; ++i) rivals.push_back(q.mint());
  const BrandedId a = q.mint();  // above every rival: it belongs at the run's end
  ASSERT_EQ(q.enqueue(G, x, "x"), EnqueueStatus::enqueued);
  std::atomic<int> bad{0};
  // Each time: a rival appended after the node the main thread walked to
  // (its link CAS then fails), and the run's oldest job served, so that the
  // run keeps one node and the table never fills.
  with_helper("run.walked", kRounds, [&](int i) {
    if (q.enqueue(G, rivals[std::size_t(i)], "r") != EnqueueStatus::enqueued) ++bad;
    Lease l;
    if (!q.claim(l, 60000) || q.complete(l.id, l.token) != AckStatus::ok) ++bad;
  }, [&] { EXPECT_EQ(q.enqueue(G, a, "a"), EnqueueStatus::enqueued); });
  EXPECT_EQ(bad.load(), 0);
  const std::vector<BrandedId> got = serve_all(q);
  EXPECT_EQ(got, (std::vector<BrandedId>{rivals.back(), a}));
  expect_clean(q);
}

// A claimer (another process) stopped between sealing its run's last node
// and popping it, and a lane word that other threads keep moving without
// popping that node (settings written, here): each round of an append finds
// the seal under a new word. Counting those sightings answered corrupt after
// jobs + 16 of them (found in review); the append goes to the strays.
TEST_F(Contention, AnAppendThatKeepsFindingTheRunSealedUnderANewWordIsEnqueued) {
  QueueOptions o = small();
  o.jobs = 16;
  create(o);
  ASSERT_FALSE(HasFailure());
  Queue& q = this->q();
  const BrandedId x = q.mint();
  ASSERT_EQ(q.enqueue(G, x, "x"), EnqueueStatus::enqueued);
  const std::string name = seg();
  ForkedChild child([&]() -> int {
    auto r = Queue::open(name);
    if (!r) return 3;
    Queue cq = std::move(r.value());
    detail::failpoint_arm("claim.sealed", 1, detail::FailpointAction::stop);
    Lease l;
    if (!cq.claim(l, 60000) || l.id != x) return 4;
    return cq.complete(l.id, l.token) == AckStatus::ok ? 0 : 5;
  });
  ASSERT_TRUE(test::wait_stopped(child.pid())) << "child did not reach claim.sealed";
  const BrandedId a = q.mint();
  std::atomic<int> bad{0};
  with_helper("run.seal_seen", 48, [&](int i) {
    if (q.set_limit(G, std::uint32_t(1000 + i)) != LaneStatus::ok) ++bad;
  }, [&] { EXPECT_EQ(q.enqueue(G, a, "a"), EnqueueStatus::enqueued); });
  EXPECT_EQ(bad.load(), 0);
  ::kill(child.pid(), SIGCONT);
  ASSERT_TRUE(child.wait_for(std::chrono::seconds(10)));
  EXPECT_TRUE(child.exited_zero()) << child.describe();
  ASSERT_EQ(q.clear_limit(G), LaneStatus::ok);
  const std::vector<BrandedId> got = serve_all(q);
  EXPECT_EQ(got, std::vector<BrandedId>{a});
  expect_clean(q);
}

// A reassign's origin stays in its lane as a husk (its lane paused: no claim
// pops it), naming the copy's slot; the copy is served and completed, and an
// unrelated enqueue (u) reuses that slot. While u is admitting (stepped in at
// enqueue.indexed), the moved job's id is enqueued again: its admission meets
// the origin's index entry, a rival. The origin's successor names u's slot,
// but u is no move target. decide() did not compare the ctr, took u for the
// move's target, counted a corrupt slot record and killed u's admission: u
// was answered `full` (its retry found no slot) and never enqueued (found in
// review). With `wrap`, the copy's slot is first reused 2^17 - 1 times, so
// that u's ctr matches the 18 bits the origin names: u's record does not
// name the origin back (found in the review of the ctr check).
void origin_reused(Contention& t, Queue& q, bool wrap) {
  const BrandedId g1 = BrandedId::make("AAA", 1), g2 = BrandedId::make("BBB", 2), g3 = BrandedId::make("CCC", 4);
  const BrandedId fill = BrandedId::make("FFF", 3);
  const BrandedId k = q.mint(), j = q.mint();
  ASSERT_EQ(q.enqueue(g1, k, "k"), EnqueueStatus::enqueued);  // ahead of j: the origin is not at the front
  ASSERT_EQ(q.enqueue(g1, j, "j"), EnqueueStatus::enqueued);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(q.enqueue(fill, q.mint(), "f"), EnqueueStatus::enqueued);
  ASSERT_EQ(q.pause(g1), LaneStatus::ok);
  ASSERT_EQ(q.pause(fill), LaneStatus::ok);
  ASSERT_EQ(q.reassign(j, g2), MoveStatus::moved);  // the copy takes the last free slot
  {
    Lease l;
    ASSERT_TRUE(q.claim(l, 60000));
    ASSERT_EQ(l.id, j);
    ASSERT_EQ(q.complete(l.id, l.token), AckStatus::ok);  // the copy's slot is free: the only one
  }
  if (wrap)
    for (int m = 0; m < (1 << 17) - 1; ++m) {  // each an admission and a lease: 2 on the slot's ctr
      ASSERT_EQ(q.enqueue(g3, q.mint(), "c"), EnqueueStatus::enqueued);
      Lease l;
      ASSERT_TRUE(q.claim(l, 60000));
      ASSERT_EQ(q.complete(l.id, l.token), AckStatus::ok);
    }
  ASSERT_EQ(q.pause(g2), LaneStatus::ok);  // u, below, stays unclaimed
  const BrandedId u = q.mint();
  std::atomic<int> bad{0};
  EnqueueStatus again = EnqueueStatus::corrupt;
  t.with_helper("enqueue.indexed", 1, [&](int) {
    // A slot for j's admission: one filler served and completed.
    if (q.resume(fill) != LaneStatus::ok) ++bad;
    Lease l;
    if (!q.claim(l, 60000) || q.complete(l.id, l.token) != AckStatus::ok) ++bad;
    again = q.enqueue(g1, j, "j again");
  }, [&] { EXPECT_EQ(q.enqueue(g2, u, "u"), EnqueueStatus::enqueued); });
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(again, EnqueueStatus::enqueued) << to_string(again);
  expect_clean(q);
  // Everything left is served: k and j in g1, u in g2, four fillers.
  ASSERT_EQ(q.resume(g1), LaneStatus::ok);
  ASSERT_EQ(q.resume(g2), LaneStatus::ok);
  const std::vector<BrandedId> got = serve_all(q);
  EXPECT_EQ(got.size(), 7u);
  for (const BrandedId& want : {k, j, u}) EXPECT_NE(std::find(got.begin(), got.end(), want), got.end()) << want.str();
  expect_clean(q);
}

TEST_F(Contention, AnOriginWhoseCopysSlotWasReusedIsNoRival) {
  create(small());
  ASSERT_FALSE(HasFailure());
  origin_reused(*this, q(), false);
}

TEST_F(Contention, AnOriginWhoseCopysSlotCameRoundToTheSame18CtrBitsIsNoRival) {
  create(small());
  ASSERT_FALSE(HasFailure());
  origin_reused(*this, q(), true);
}

// An enqueue of an id that another thread enqueued first (so that this
// thread, which minted it, skips the look-up before its admission) meets that
// job as its rival; between its scan and its reading of the rival, the job is
// reassigned to another group. Its origin then reads as a dropped origin
// (husk linked) or a free slot (popped at once): no job. Its copy was not in
// the scan. decide() took that for "no rival" and committed: the id was
// admitted twice and served twice (found in review). It scans again now and
// meets the copy: a duplicate.
void moved_after_scan(Contention& t, Queue& q, bool husk_stays) {
  const BrandedId g1 = BrandedId::make("AAA", 1), g2 = BrandedId::make("BBB", 2);
  if (husk_stays) {
    ASSERT_EQ(q.enqueue(g1, q.mint(), "k"), EnqueueStatus::enqueued);  // j's origin is not at the front
    ASSERT_EQ(q.pause(g1), LaneStatus::ok);
  }
  const BrandedId j = q.mint();
  EnqueueStatus first = EnqueueStatus::corrupt;
  std::thread([&] { first = q.enqueue(g1, j, "j"); }).join();
  ASSERT_EQ(first, EnqueueStatus::enqueued);
  std::atomic<int> bad{0};
  EnqueueStatus again = EnqueueStatus::corrupt;
  t.with_helper("index.rival_read", 1, [&](int) {
    if (q.reassign(j, g2) != MoveStatus::moved) ++bad;
  }, [&] { again = q.enqueue(g1, j, "j again"); });
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(again, EnqueueStatus::duplicate) << to_string(again);
  if (husk_stays) {
    ASSERT_EQ(q.resume(g1), LaneStatus::ok);
  }
  const std::vector<BrandedId> got = serve_all(q);
  EXPECT_EQ(std::count(got.begin(), got.end(), j), 1) << "served " << std::count(got.begin(), got.end(), j) << " times";
  expect_clean(q);
}

TEST_F(Contention, AnIdReassignedBetweenItsRivalsScanAndItsReadingIsADuplicateWithTheOriginLinked) {
  create(small());
  ASSERT_FALSE(HasFailure());
  moved_after_scan(*this, q(), true);
}

TEST_F(Contention, AnIdReassignedBetweenItsRivalsScanAndItsReadingIsADuplicateWithTheOriginFreed) {
  create(small());
  ASSERT_FALSE(HasFailure());
  moved_after_scan(*this, q(), false);
}

// The id's first bucket (b1) and fingerprint in a segment, as index_probe
// works them out (id_index.hpp), from the header's seed and bucket count.
struct Probe {
  std::uint64_t bucket;
  std::uint32_t fp;
};
Probe probe_of(RawSegment& raw, const BrandedId& id) {
  const std::uint64_t h = detail::id_hash(id.snowflake(), raw.header().hash_seed);
  return Probe{((h & ((1ULL << 34) - 1)) * raw.header().index_buckets) >> 34, std::uint32_t(h >> 34)};
}

// The way of bucket b holding an entry for slot (slot1 = slot + 1), or -1.
int way_of(RawSegment& raw, std::uint64_t b, std::uint32_t slot1) {
  for (unsigned k = 0; k < detail::kIndexWays; ++k)
    if (detail::IndexEntry::slot1(raw.bucket(b).e[k].load()) == slot1) return int(k);
  return -1;
}

// The slot of the pending job with this id, or ~0U.
std::uint32_t pending_slot(RawSegment& raw, const BrandedId& id) {
  for (std::uint32_t i = 0; i < raw.header().job_capacity; ++i)
    if (raw.slot(i).sf.load() == id.snowflake() && detail::SlotWord::state(raw.slot_word_value(i)) == detail::SlotState::pending)
      return i;
  return ~0U;
}

// An admission's scan is no snapshot. The main thread enqueues j again (an
// id it minted, which another thread enqueued first: the look-up before
// the admission is skipped) and stops in its scan, after reading the first
// way of j's bucket. The bucket is full: way 0 holds f, way 1 j's job (x),
// ways 2-5 fillers, way 6 the main thread's entry. Meanwhile f is served
// (its way's slot is free), j is reassigned (its copy's entry takes way 0,
// already read; x is dropped, popped and freed) and an id of the same
// bucket is enqueued (its entry takes way 1, x's). The scan then met no
// entry of j and committed: j was admitted twice and served twice (found in
// review of d7df5ab). A move's copy now kills the admissions of its id it
// meets before its origin is dropped.
TEST_F(Contention, AnAdmissionWhoseScanAMoveAndAReuseOfTheOriginsWayOvertakeIsADuplicate) {
  QueueOptions o = small();
  o.jobs = 16;
  create(o);
  ASSERT_FALSE(HasFailure());
  Queue& q = this->q();
  const BrandedId g1 = BrandedId::make("AAA", 1), g2 = BrandedId::make("BBB", 2), gf = BrandedId::make("FFF", 5);
  const BrandedId gh = BrandedId::make("HHH", 8), gm = BrandedId::make("MMM", 6);
  const BrandedId j = q.mint();
  RawSegment raw(seg());
  const Probe pj = probe_of(raw, j);
  // Ids of j's bucket with another fingerprint (minted on another thread:
  // this one's memory of j as freshly minted stays): f, y and four fillers.
  std::vector<BrandedId> same;
  std::thread([&] {
    while (same.size() < 6) {
      const BrandedId c = q.mint();
      const Probe pc = probe_of(raw, c);
      if (pc.bucket == pj.bucket && pc.fp != pj.fp) same.push_back(c);
    }
  }).join();
  const BrandedId f = same[0], y = same[1];
  ASSERT_EQ(q.enqueue(gf, f, "f"), EnqueueStatus::enqueued);
  EnqueueStatus first = EnqueueStatus::corrupt;
  std::thread([&] { first = q.enqueue(g1, j, "j"); }).join();
  ASSERT_EQ(first, EnqueueStatus::enqueued);
  for (int i = 2; i < 6; ++i) ASSERT_EQ(q.enqueue(gh, same[std::size_t(i)], "h"), EnqueueStatus::enqueued);
  ASSERT_EQ(q.pause(gh), LaneStatus::ok);
  ASSERT_EQ(q.pause(gm), LaneStatus::ok);  // the main thread's job, if admitted, stays unclaimed meanwhile
  ASSERT_EQ(q.pause(g1), LaneStatus::ok);  // only f is served below
  ASSERT_EQ(way_of(raw, pj.bucket, pending_slot(raw, f) + 1), 0);
  ASSERT_EQ(way_of(raw, pj.bucket, pending_slot(raw, j) + 1), 1);
  std::atomic<int> bad{0};
  EnqueueStatus again = EnqueueStatus::corrupt;
  with_helper("admit.way_read", 1, [&](int) {
    Lease l;
    if (!q.claim(l, 60000) || l.id != f || q.complete(l.id, l.token) != AckStatus::ok) ++bad;
    if (q.reassign(j, g2) != MoveStatus::moved) ++bad;
    if (way_of(raw, pj.bucket, pending_slot(raw, j) + 1) != 0) ++bad;  // the copy's entry: in way 0
    if (q.enqueue(gh, y, "y") != EnqueueStatus::enqueued) ++bad;
    if (way_of(raw, pj.bucket, pending_slot(raw, y) + 1) != 1) ++bad;  // y's entry: in way 1, x's
  }, [&] { again = q.enqueue(gm, j, "j again"); });
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(again, EnqueueStatus::duplicate) << to_string(again);
  for (const BrandedId& g : {g1, gh, gm}) ASSERT_EQ(q.resume(g), LaneStatus::ok);
  const std::vector<BrandedId> got = serve_all(q);
  EXPECT_EQ(std::count(got.begin(), got.end(), j), 1) << "served " << std::count(got.begin(), got.end(), j) << " times";
  EXPECT_EQ(got.size(), 6u);  // j, y and four fillers
  expect_clean(q);
}

// Holds one thread (the one that set t_gated) at a point until opened.
thread_local bool t_gated = false;
struct Gate {
  std::atomic<bool> reached{false}, open{false};
  static void hold(void* p) {
    Gate& g = *static_cast<Gate*>(p);
    if (!t_gated || g.open.load()) return;
    g.reached.store(true);
    while (!g.open.load()) std::this_thread::yield();
  }
};

// The slot of the job with this id in state st, or ~0U.
std::uint32_t slot_in(RawSegment& raw, const BrandedId& id, detail::SlotState st) {
  for (std::uint32_t i = 0; i < raw.header().job_capacity; ++i)
    if (raw.slot(i).sf.load() == id.snowflake() && detail::SlotWord::state(raw.slot_word_value(i)) == st) return i;
  return ~0U;
}

// Every job slot held by a lease on a job of its own (the ids given, one
// per slot, minted on another thread), so that an admission can be steered
// into one slot: free(k) completes the lease held on slot k, the only slot
// free then; free_rest() completes the leases still held.
class LeasedSlots {
 public:
  LeasedSlots(Queue& q, RawSegment& raw, const BrandedId& group, const std::vector<BrandedId>& ids)
      : q_(q), raw_(raw), leases_(ids.size()) {
    for (const BrandedId& id : ids) EXPECT_EQ(q.enqueue(group, id, "t"), EnqueueStatus::enqueued);
    for (Lease& l : leases_) EXPECT_TRUE(q.claim(l, 600000));
  }
  bool free(std::uint32_t slot) {
    for (Lease& l : leases_)
      if (slot_in(raw_, l.id, detail::SlotState::leased) == slot) return q_.complete(l.id, l.token) == AckStatus::ok;
    return false;
  }
  bool free_rest() {
    bool ok = true;
    for (Lease& l : leases_)
      if (slot_in(raw_, l.id, detail::SlotState::leased) != ~0U) ok &= q_.complete(l.id, l.token) == AckStatus::ok;
    return ok;
  }

 private:
  Queue& q_;
  RawSegment& raw_;
  std::vector<Lease> leases_;
};

// The same window, and an admission committed by a rival's decision. l's
// enqueue of j takes slot 0 while j is no job (its look-up finds nothing)
// and is held there. j is enqueued (x, in way 1 of its bucket), then b's
// enqueue of it (the minting thread: no look-up) meets x's entry, goes to
// decide(), and stops in decide's scan after way 0 (f). Meanwhile f is
// served, j is reassigned (the copy's entry takes way 0, already read; the
// copy kills b; x is dropped, popped and freed), and l goes on: linked, its
// entry in way 1 (x's), held before its own scan. b's scan then met l, an
// admitting rival in a lower slot: b killed itself and committed l, from a
// scan that had missed the copy. l's own scan met the copy committed, l could
// not kill itself, and answered enqueued: j was admitted twice (found in
// review of 8fefa35). A rival is now committed only by its own decision
// (index_resolve: a scan begun after its entry was written), which meets
// the copy.
TEST_F(Contention, ARivalCommittedByAnotherAdmissionsScanThatMissedAMovesCopyIsADuplicate) {
  QueueOptions o = small();
  o.jobs = 16;
  o.lanes = 16;
  create(o);
  ASSERT_FALSE(HasFailure());
  Queue& q = this->q();
  const BrandedId gt = BrandedId::make("TTT", 1), gl = BrandedId::make("LLL", 2), g1 = BrandedId::make("AAA", 3);
  const BrandedId g2 = BrandedId::make("BBB", 4), gf = BrandedId::make("FFF", 5), gh = BrandedId::make("HHH", 6);
  const BrandedId gm = BrandedId::make("MMM", 7);
  const BrandedId j = q.mint();
  RawSegment raw(seg());
  const Probe pj = probe_of(raw, j);
  // f and four fillers in j's bucket, with other fingerprints; sixteen ids
  // of other buckets (minted on another thread, as above).
  std::vector<BrandedId> same, others;
  std::thread([&] {
    while (same.size() < 5 || others.size() < 16) {
      const BrandedId c = q.mint();
      const Probe pc = probe_of(raw, c);
      if (pc.bucket != pj.bucket) {
        if (others.size() < 16) others.push_back(c);
      } else if (pc.fp != pj.fp && same.size() < 5) {
        same.push_back(c);
      }
    }
  }).join();
  // Every slot leased, then slot 0 alone freed: l's admission takes it.
  LeasedSlots leases(q, raw, gt, others);
  ASSERT_FALSE(::testing::Test::HasFailure());
  ASSERT_TRUE(leases.free(0));
  for (const BrandedId& g : {gl, g1, gh, gm}) ASSERT_EQ(q.pause(g), LaneStatus::ok);  // only f is served below
  Gate taken, indexed;
  detail::failpoint_call("enqueue.slot_taken", &Gate::hold, &taken);
  detail::failpoint_call("enqueue.indexed", &Gate::hold, &indexed);
  EnqueueStatus lst = EnqueueStatus::corrupt;
  std::thread tl([&] {
    t_gated = true;
    lst = q.enqueue(gl, j, "l");
  });
  while (!taken.reached.load()) std::this_thread::yield();
  ASSERT_EQ(detail::SlotWord::state(raw.slot_word_value(0)), detail::SlotState::admitting);  // l's
  ASSERT_TRUE(leases.free_rest());
  const BrandedId f = same[0];
  ASSERT_EQ(q.enqueue(gf, f, "f"), EnqueueStatus::enqueued);
  EnqueueStatus xst = EnqueueStatus::corrupt;
  std::thread([&] { xst = q.enqueue(g1, j, "x"); }).join();
  ASSERT_EQ(xst, EnqueueStatus::enqueued);
  for (int i = 1; i < 5; ++i) ASSERT_EQ(q.enqueue(gh, same[std::size_t(i)], "h"), EnqueueStatus::enqueued);
  const std::uint32_t xs = pending_slot(raw, j);
  ASSERT_EQ(way_of(raw, pj.bucket, pending_slot(raw, f) + 1), 0);
  ASSERT_EQ(way_of(raw, pj.bucket, xs + 1), 1);
  std::atomic<int> bad{0};
  EnqueueStatus bst = EnqueueStatus::corrupt;
  with_helper("decide.way_read", 1, [&](int) {
    Lease l;
    if (!q.claim(l, 60000) || l.id != f || q.complete(l.id, l.token) != AckStatus::ok) ++bad;
    if (q.reassign(j, g2) != MoveStatus::moved) ++bad;
    if (detail::SlotWord::state(raw.slot_word_value(xs)) != detail::SlotState::free) ++bad;  // x popped and freed
    taken.open.store(true);
    while (!indexed.reached.load()) std::this_thread::yield();
    if (way_of(raw, pj.bucket, 0 + 1) != 1) ++bad;  // l's entry: in way 1, x's
  }, [&] { bst = q.enqueue(gm, j, "b"); });
  indexed.open.store(true);
  tl.join();
  detail::failpoint_call("enqueue.slot_taken", nullptr, nullptr);
  detail::failpoint_call("enqueue.indexed", nullptr, nullptr);
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(bst, EnqueueStatus::duplicate) << to_string(bst);
  EXPECT_EQ(lst, EnqueueStatus::duplicate) << to_string(lst);
  for (const BrandedId& g : {gl, g1, gh, gm}) ASSERT_EQ(q.resume(g), LaneStatus::ok);
  const std::vector<BrandedId> got = serve_all(q);
  EXPECT_EQ(std::count(got.begin(), got.end(), j), 1) << "served " << std::count(got.begin(), got.end(), j) << " times";
  EXPECT_EQ(got.size(), 5u);  // j and four fillers
  expect_clean(q);
}

// A helper's decision of another admission, whose slot moves on meanwhile.
// R's enqueue of j (slot 0, delayed: never linked) meets j's job J committed
// and is held just after reading it. J is served: no job of j exists. S
// enqueues j: it meets R admitting in a lower slot, kills itself and has R
// decided (index_resolve), and is held in that decision's scan. R goes on,
// kills itself (duplicate: J was a job during its call), is freed, and slot
// 0 is taken by another id. The decision then found its kill failing and
// the slot's ctr moved on, took that for "committed" (as R's own admitter
// may), and S answered duplicate with no job of j anywhere (found in review
// of 87de577). `minted_here`: S's thread minted j and skips the look-up
// (the decision comes from resolve_rival); else S's look-up meets R
// admitting and has it decided (admission.cpp's path, wrong the same way
// before 87de577).
void helper_sees_slot_move_on(Queue& q, RawSegment& raw, const BrandedId& j, bool minted_here) {
  const BrandedId gt = BrandedId::make("TTT", 1), gj = BrandedId::make("JJJ", 2), gr = BrandedId::make("RRR", 3);
  const BrandedId gs = BrandedId::make("SSS", 4), gk = BrandedId::make("KKK", 5);
  std::vector<BrandedId> others, ks;
  std::thread([&] {
    for (int i = 0; i < 16; ++i) others.push_back(q.mint());
    for (int i = 0; i < 16; ++i) ks.push_back(q.mint());
  }).join();
  // Every slot leased, then slot 0 alone freed: R's admission takes it.
  LeasedSlots leases(q, raw, gt, others);
  ASSERT_FALSE(::testing::Test::HasFailure());
  ASSERT_TRUE(leases.free(0));
  ASSERT_EQ(q.pause(gk), LaneStatus::ok);
  Gate taken, seen;
  detail::failpoint_call("enqueue.slot_taken", &Gate::hold, &taken);
  detail::failpoint_call("decide.rival_seen", &Gate::hold, &seen);
  EnqueueStatus rst = EnqueueStatus::corrupt;
  std::atomic<bool> r_done{false};
  std::thread tr([&] {
    t_gated = true;
    EnqueueOptions delayed;
    delayed.delay_ms = 600000;
    rst = q.enqueue(gr, j, "r", delayed);
    r_done.store(true);
  });
  while (!taken.reached.load()) std::this_thread::yield();
  ASSERT_EQ(detail::SlotWord::state(raw.slot_word_value(0)), detail::SlotState::admitting);  // R's
  const std::uint64_t r_ctr = detail::SlotWord::ctr(raw.slot_word_value(0));
  ASSERT_TRUE(leases.free_rest());
  EnqueueStatus jst = EnqueueStatus::corrupt;
  std::thread([&] { jst = q.enqueue(gj, j, "J"); }).join();
  ASSERT_EQ(jst, EnqueueStatus::enqueued);
  taken.open.store(true);
  while (!seen.reached.load()) std::this_thread::yield();  // R read J committed
  {
    Lease l;
    ASSERT_TRUE(q.claim(l, 60000));
    ASSERT_EQ(l.id, j);
    ASSERT_EQ(q.complete(l.id, l.token), AckStatus::ok);  // no job of j now
  }
  // S's thread, at a way of a decision's scan (with minted_here, once S's
  // own admission is aborted: the scan is then of R's decision), lets R go
  // on and end, and slot 0 be taken again, before it reads the next way.
  struct Hook {
    std::thread::id s_thread;
    RawSegment* raw = nullptr;
    std::uint64_t sf = 0;
    bool wait_for_abort = false;
    std::atomic<bool> fired{false};
    std::function<void()> act;
    static void at(void* p) {
      Hook& h = *static_cast<Hook*>(p);
      if (std::this_thread::get_id() != h.s_thread || h.fired.load()) return;
      if (h.wait_for_abort) {
        bool s_aborted = false;
        for (std::uint32_t i = 1; i < h.raw->header().job_capacity; ++i)
          s_aborted |= h.raw->slot(i).sf.load() == h.sf &&
                       detail::SlotWord::state(h.raw->slot_word_value(i)) == detail::SlotState::aborted;
        if (!s_aborted) return;
      }
      h.fired.store(true);
      std::thread(h.act).join();
    }
  } hook;
  hook.raw = &raw;
  hook.sf = j.snowflake();
  hook.wait_for_abort = minted_here;
  std::atomic<int> bad{0};
  hook.act = [&] {
    seen.open.store(true);
    while (!r_done.load()) std::this_thread::yield();
    for (std::size_t i = 0; i < ks.size() && detail::SlotWord::ctr(raw.slot_word_value(0)) == r_ctr; ++i)
      if (q.enqueue(gk, ks[i], "k") != EnqueueStatus::enqueued) ++bad;
    if (detail::SlotWord::ctr(raw.slot_word_value(0)) == r_ctr) ++bad;  // slot 0 taken again
    // The k's taken before it (as many as the allocation cursor passed over)
    // go again, so that S finds a slot for its own admission.
    q.drain(gk);
  };
  detail::failpoint_call("decide.way_read", &Hook::at, &hook);
  EnqueueStatus sst = EnqueueStatus::corrupt;
  if (minted_here) {
    hook.s_thread = std::this_thread::get_id();
    sst = q.enqueue(gs, j, "s");
  } else {
    std::thread([&] {
      hook.s_thread = std::this_thread::get_id();
      sst = q.enqueue(gs, j, "s");
    }).join();
  }
  seen.open.store(true);
  tr.join();
  detail::failpoint_call("decide.way_read", nullptr, nullptr);
  detail::failpoint_call("enqueue.slot_taken", nullptr, nullptr);
  detail::failpoint_call("decide.rival_seen", nullptr, nullptr);
  EXPECT_EQ(bad.load(), 0);
  EXPECT_TRUE(hook.fired.load()) << "S's decision of R was not held";
  EXPECT_EQ(rst, EnqueueStatus::duplicate) << to_string(rst);
  EXPECT_EQ(sst, EnqueueStatus::enqueued) << to_string(sst);
  // S began after J was gone: j is a job again, once.
  std::uint32_t jobs_of_j = 0;
  for (std::uint32_t i = 0; i < raw.header().job_capacity; ++i) {
    using detail::SlotState;
    const SlotState st = detail::SlotWord::state(raw.slot_word_value(i));
    jobs_of_j += raw.slot(i).sf.load() == j.snowflake() &&
                 (st == SlotState::pending || st == SlotState::leased || st == SlotState::scheduled ||
                  st == SlotState::dead || st == SlotState::returning);
  }
  EXPECT_EQ(jobs_of_j, 1u) << (jobs_of_j == 0 ? "j is lost" : "j is a job twice");
  ASSERT_EQ(q.resume(gk), LaneStatus::ok);
  const std::vector<BrandedId> got = serve_all(q);
  EXPECT_EQ(std::count(got.begin(), got.end(), j), 1);
  expect_clean(q);
}

TEST_F(Contention, AHelpersDecisionOfARivalKilledAndReusedMeanwhileIsNotWonFromAnAdmission) {
  QueueOptions o = small();
  o.jobs = 16;
  o.lanes = 16;
  create(o);
  ASSERT_FALSE(HasFailure());
  const BrandedId j = q().mint();
  RawSegment raw(seg());
  helper_sees_slot_move_on(q(), raw, j, true);
}

TEST_F(Contention, AHelpersDecisionOfARivalKilledAndReusedMeanwhileIsNotWonFromALookUp) {
  QueueOptions o = small();
  o.jobs = 16;
  o.lanes = 16;
  create(o);
  ASSERT_FALSE(HasFailure());
  BrandedId j;
  std::thread([&] { j = q().mint(); }).join();
  RawSegment raw(seg());
  helper_sees_slot_move_on(q(), raw, j, false);
}

// An admission its own admitter is still deciding, committed by a helper,
// made due, moved and served meanwhile. B's enqueue of j (slot 15) is held
// after its entry; A's (the main thread, which minted j: no look-up; delayed)
// takes a lower slot, meets B's entry, and stops in decide() before reading
// B. C's enqueue of j has A's admission decided (its look-up: the decision
// kills B and commits A, scheduled): duplicate. A's job falls due and is
// adopted into its lane (pending at the same ctr), j is reassigned (A's slot,
// the origin, is dropped: aborted naming the copy; popped and freed at the
// same ctr), B goes on (duplicate), and the copy is claimed and completed. A
// then found its commit failing and its slot free at its ctr, read that as
// killed, met no job of j, and admitted j afresh: served twice for one
// `enqueued` answer among A, B and C (found in review of 7692bd3; a pending
// admission is safe: its link intent makes the drop refuse). Free at its
// ctr, or aborted naming a copy, its admission was committed.
TEST_F(Contention, AnAdmissionCommittedByAHelperAndMovedMeanwhileIsNotAdmittedAgain) {
  QueueOptions o = small();
  o.jobs = 16;
  o.lanes = 16;
  create(o);
  ASSERT_FALSE(HasFailure());
  Queue& q = this->q();
  const BrandedId gt = BrandedId::make("TTT", 1), ga = BrandedId::make("AAA", 2), gb = BrandedId::make("BBB", 3);
  const BrandedId gc = BrandedId::make("CCC", 4), g2 = BrandedId::make("DDD", 5);
  const BrandedId j = q.mint();  // the main thread's: A skips the look-up
  RawSegment raw(seg());
  std::vector<BrandedId> others;
  std::thread([&] {
    for (int i = 0; i < 16; ++i) others.push_back(q.mint());
  }).join();
  LeasedSlots leases(q, raw, gt, others);
  ASSERT_FALSE(::testing::Test::HasFailure());
  ASSERT_TRUE(leases.free(15));
  Gate indexed;
  detail::failpoint_call("enqueue.indexed", &Gate::hold, &indexed);
  EnqueueStatus bst = EnqueueStatus::corrupt;
  std::thread tb([&] {
    t_gated = true;
    bst = q.enqueue(gb, j, "b");
  });
  while (!indexed.reached.load()) std::this_thread::yield();
  ASSERT_EQ(detail::SlotWord::state(raw.slot_word_value(15)), detail::SlotState::admitting);  // B's
  ASSERT_TRUE(leases.free_rest());
  std::atomic<int> bad{0};
  int served_in_helper = 0;
  std::uint32_t a_slot = ~0U;
  EnqueueStatus ast = EnqueueStatus::corrupt, cst = EnqueueStatus::corrupt;
  with_helper("decide.rival", 1, [&](int) {
    cst = q.enqueue(gc, j, "c");  // its look-up decides A's admission
    a_slot = slot_in(raw, j, detail::SlotState::scheduled);
    if (cst != EnqueueStatus::duplicate || a_slot == ~0U || a_slot >= 15) {
      ++bad;
      ADD_FAILURE() << "c " << to_string(cst) << " a_slot " << a_slot;
    }
    q.advance_clock(2000);
    q.tick();  // A's job falls due: adopted into its lane, pending at the same ctr
    if (pending_slot(raw, j) != a_slot) {
      ++bad;
      ADD_FAILURE() << "not adopted";
    }
    if (const MoveStatus m = q.reassign(j, g2); m != MoveStatus::moved) {
      ++bad;
      ADD_FAILURE() << "reassign " << int(m);
    }
    indexed.open.store(true);
    tb.join();  // B: a duplicate of the copy
    Lease l;
    while (q.claim(l, 600000)) {
      if (l.id == j) ++served_in_helper;
      if (q.complete(l.id, l.token) != AckStatus::ok) ++bad;
    }
    if (a_slot != ~0U && detail::SlotWord::state(raw.slot_word_value(a_slot)) != detail::SlotState::free) {
      ++bad;
      ADD_FAILURE() << "a's slot " << a_slot << " state " << int(detail::SlotWord::state(raw.slot_word_value(a_slot)));
    }
  }, [&] {
    EnqueueOptions delayed;
    delayed.delay_ms = 1000;
    ast = q.enqueue(ga, j, "a", delayed);
  });
  indexed.open.store(true);
  if (tb.joinable()) tb.join();
  detail::failpoint_call("enqueue.indexed", nullptr, nullptr);
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(served_in_helper, 1);
  EXPECT_EQ(cst, EnqueueStatus::duplicate) << to_string(cst);
  EXPECT_EQ(bst, EnqueueStatus::duplicate) << to_string(bst);
  EXPECT_EQ(ast, EnqueueStatus::enqueued) << to_string(ast);
  q.advance_clock(2000);
  q.tick();
  const std::vector<BrandedId> got = serve_all(q);
  const auto again = std::count(got.begin(), got.end(), j);
  EXPECT_EQ(served_in_helper + again, 1) << "j served " << served_in_helper + again << " times for one enqueued answer";
  expect_clean(q);
}

// A reassign whose job ends between its look-up and its reading of the
// job's slot, which another job then takes. The move read that job's word
// (pending) with no check of its id, copied it under the first job's id
// and dropped it: b was gone from its lane and the index, and a, completed,
// was served again with b's payload (found in review of 845a425). The word
// is read with its id now: `gone`.
TEST_F(Contention, AReassignWhoseJobsSlotWasTakenByAnotherJobIsGone) {
  create(small());
  ASSERT_FALSE(HasFailure());
  Queue& q = this->q();
  const BrandedId ga = BrandedId::make("AAA", 1), gb = BrandedId::make("BBB", 2), gc = BrandedId::make("CCC", 3);
  const BrandedId gf = BrandedId::make("FFF", 4);
  const BrandedId a = q.mint();
  ASSERT_EQ(q.enqueue(ga, a, "a"), EnqueueStatus::enqueued);
  for (int i = 0; i < 7; ++i) ASSERT_EQ(q.enqueue(gf, q.mint(), "f"), EnqueueStatus::enqueued);  // every slot taken
  ASSERT_EQ(q.pause(gf), LaneStatus::ok);
  RawSegment raw(seg());
  const std::uint32_t xs = pending_slot(raw, a);
  ASSERT_NE(xs, ~0U);
  std::atomic<int> bad{0};
  BrandedId b;
  MoveStatus moved = MoveStatus::corrupt;
  with_helper("reassign.found", 1, [&](int) {
    Lease l;
    if (!q.claim(l, 60000) || l.id != a || q.complete(l.id, l.token) != AckStatus::ok) ++bad;
    b = q.mint();
    if (q.enqueue(gc, b, "b") != EnqueueStatus::enqueued || pending_slot(raw, b) != xs) ++bad;  // a's slot
  }, [&] { moved = q.reassign(a, gb); });
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(moved, MoveStatus::gone) << int(moved);
  ASSERT_EQ(q.resume(gf), LaneStatus::ok);
  const std::vector<BrandedId> got = serve_all(q);
  EXPECT_EQ(got.size(), 8u);  // b and seven fillers
  EXPECT_EQ(std::count(got.begin(), got.end(), b), 1);
  EXPECT_EQ(std::count(got.begin(), got.end(), a), 0);
  expect_clean(q);
}

// A killed admission's husk is counted in its lane (`husks`, for depth)
// before anyone can pop it. r's enqueue of j (slot 7, lane lr) is held after
// its index entry; the main thread's enqueue of j (slot 0, lane lm) kills r,
// an admitting rival in a higher slot, and stops right after its kill's CAS.
// Meanwhile a claim pops r's husk (lr's run is empty then) and another group
// takes lr's lane record. The kill counted the husk after its CAS, into the
// record as it was by then: the new group's depth read 0 with one job
// (found in review of 8fefa35, and carried as L1 before). It counts the husk
// before the CAS now, into the incarnation its CAS is made under.
TEST_F(Contention, AKilledAdmissionsHuskIsCountedBeforeItCanBePopped) {
  QueueOptions o = small();
  o.lanes = 2;
  create(o);
  ASSERT_FALSE(HasFailure());
  Queue& q = this->q();
  const BrandedId gm = BrandedId::make("MMM", 1), gr = BrandedId::make("RRR", 2), g3 = BrandedId::make("CCC", 3);
  const BrandedId j = q.mint();
  RawSegment raw(seg());
  // Every slot leased (default lane), then slot 7 alone freed: r takes it.
  std::vector<BrandedId> fillers;
  std::thread([&] {
    for (int i = 0; i < 8; ++i) fillers.push_back(q.mint());
  }).join();
  LeasedSlots leases(q, raw, {}, fillers);
  ASSERT_FALSE(::testing::Test::HasFailure());
  ASSERT_TRUE(leases.free(7));
  ASSERT_EQ(q.pause(gm), LaneStatus::ok);  // the main thread's job stays unclaimed meanwhile
  Gate indexed;
  detail::failpoint_call("enqueue.indexed", &Gate::hold, &indexed);
  EnqueueStatus rst = EnqueueStatus::corrupt;
  std::thread tr([&] {
    t_gated = true;
    rst = q.enqueue(gr, j, "r");
  });
  while (!indexed.reached.load()) std::this_thread::yield();
  ASSERT_EQ(detail::SlotWord::state(raw.slot_word_value(7)), detail::SlotState::admitting);  // r's
  std::uint32_t lr = ~0U;
  for (std::uint32_t i = 1; i < raw.header().lane_capacity; ++i)
    if (raw.lane(i).key_sf.load() == gr.snowflake()) lr = i;
  ASSERT_NE(lr, ~0U);
  ASSERT_TRUE(leases.free(0));
  std::atomic<int> bad{0};
  EnqueueStatus mst = EnqueueStatus::corrupt;
  with_helper("index.killed", 1, [&](int) {
    Lease l;
    if (q.claim(l, 60000)) ++bad;  // pops r's husk; nothing else is served
    if (q.depth(gr) != 0) ++bad;
    if (!leases.free(1)) ++bad;
    if (q.enqueue(g3, q.mint(), "c") != EnqueueStatus::enqueued) ++bad;
    if (raw.lane(lr).key_sf.load() != g3.snowflake()) ++bad;  // g3 took gr's lane record
  }, [&] { mst = q.enqueue(gm, j, "m"); });
  indexed.open.store(true);
  tr.join();
  detail::failpoint_call("enqueue.indexed", nullptr, nullptr);
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(mst, EnqueueStatus::enqueued) << to_string(mst);
  EXPECT_EQ(rst, EnqueueStatus::duplicate) << to_string(rst);
  EXPECT_EQ(q.depth(g3), 1u) << "the kill's husk was counted in the lane record's next group";
  EXPECT_TRUE(leases.free_rest());
  ASSERT_EQ(q.resume(gm), LaneStatus::ok);
  const std::vector<BrandedId> got = serve_all(q);
  EXPECT_EQ(got.size(), 2u);  // j and g3's job
  EXPECT_EQ(std::count(got.begin(), got.end(), j), 1);
  expect_clean(q);
}

// A claim stopped after reading its lane's word and front (x, the run's
// head; z its tail), just before its take's CAS. Meanwhile x is served and
// its slot reused, again and again, as the only node of another lane's run,
// until the insertion tag x's link carries there agrees in its low 12 bits
// with the head tag the claim read. The claim then found x's link naming
// no successor while the tail it read was z, and reported the lane word
// corrupt, from a word that had long moved on (found in review). It reads
// the word again first, as it does when the tags disagree.
TEST_F(Contention, AClaimWhoseHeadCameBackUnderAnAliasedTagIsNoCorruption) {
  create(small());
  ASSERT_FALSE(HasFailure());
  Queue& q = this->q();
  const BrandedId gl = BrandedId::make("LLL", 1), gm = BrandedId::make("MMM", 2), gf = BrandedId::make("FFF", 3);
  const BrandedId w = q.mint(), x = q.mint(), z = q.mint();
  ASSERT_EQ(q.enqueue(gl, w, "w"), EnqueueStatus::enqueued);
  ASSERT_EQ(q.enqueue(gl, x, "x"), EnqueueStatus::enqueued);
  ASSERT_EQ(q.enqueue(gl, z, "z"), EnqueueStatus::enqueued);
  {
    Lease l;  // w's claim moves the run's tail on to z (appends leave it where it was)
    ASSERT_TRUE(q.claim(l, 60000));
    ASSERT_EQ(l.id, w);
    ASSERT_EQ(q.complete(l.id, l.token), AckStatus::ok);
  }
  for (int i = 0; i < 6; ++i) ASSERT_EQ(q.enqueue(gf, q.mint(), "f"), EnqueueStatus::enqueued);  // every slot taken
  ASSERT_EQ(q.pause(gf), LaneStatus::ok);
  RawSegment raw(seg());
  const std::uint32_t xs = pending_slot(raw, x);
  ASSERT_NE(xs, ~0U);
  const std::uint32_t lx = raw.find_lane([&](const detail::Word128& w) { return detail::LaneWord::head(w) == xs + 1; });
  ASSERT_NE(lx, ~0U);
  const detail::Word128 lw = raw.word_value(raw.lane(lx).word);
  ASSERT_EQ(detail::LaneWord::tail(lw), pending_slot(raw, z) + 1);
  const std::uint64_t htag = detail::LaneWord::htag(lw);
  std::atomic<int> bad{0};
  int reuses = 0;
  bool aliased = false;
  Lease got;
  bool claimed = false;
  with_helper("claim.intent_set", 1, [&](int) {
    Lease l;
    if (!q.claim(l, 60000) || l.id != x || q.complete(l.id, l.token) != AckStatus::ok) ++bad;
    if (q.pause(gl) != LaneStatus::ok) ++bad;  // z stays
    for (; reuses < 20000 && !aliased && bad.load() == 0; ++reuses) {
      const BrandedId m = q.mint();
      if (q.enqueue(gm, m, "m") != EnqueueStatus::enqueued || pending_slot(raw, m) != xs) ++bad;
      const std::uint32_t lm = raw.find_lane([&](const detail::Word128& w) { return detail::LaneWord::head(w) == xs + 1; });
      if (lm == ~0U) ++bad;
      aliased = lm != ~0U && detail::LaneWord::htag(raw.word_value(raw.lane(lm).word)) == htag;
      if (aliased) break;  // x's slot stays the last node of m's run
      if (!q.claim(l, 60000) || l.id != m || q.complete(l.id, l.token) != AckStatus::ok) ++bad;
    }
  }, [&] { claimed = q.claim(got, 60000); });
  EXPECT_EQ(bad.load(), 0);
  ASSERT_TRUE(aliased) << "the tag never came round in " << reuses << " reuses: nothing to test";
  EXPECT_TRUE(claimed);  // the last m, in the only lane served
  EXPECT_EQ(q.corruption().count, 0u) << q.corruption().last_structure;
  if (claimed) {
    EXPECT_EQ(q.complete(got.id, got.token), AckStatus::ok);
  }
  ASSERT_EQ(q.resume(gl), LaneStatus::ok);
  ASSERT_EQ(q.resume(gf), LaneStatus::ok);
  const std::vector<BrandedId> rest = serve_all(q);
  EXPECT_EQ(rest.size(), 7u);  // z and six fillers
  expect_clean(q);
}

// The same window, held open: the id is moved 20 times, back and forth
// between two groups (so that copies come back to slots met before), while
// one enqueue of it decides. Remembering rivals by slot alone missed a copy
// in a slot reused (the id admitted twice), and a memory of 14 slots that
// filled up made every later round a rescan, counted, until decide gave up
// as corrupt (both found in review). A rival is a slot at its admission tag
// now, and a rescan is made when the round's set of rivals that are no job
// differs from the last round's, uncounted.
TEST_F(Contention, AnIdMovedBackAndForthWhileOneEnqueueOfItDecidesIsADuplicate) {
  QueueOptions o = small();
  o.jobs = 64;
  create(o);
  ASSERT_FALSE(HasFailure());
  Queue& q = this->q();
  const BrandedId ga = BrandedId::make("AAA", 1), gb = BrandedId::make("BBB", 2), gc = BrandedId::make("CCC", 3);
  const BrandedId gm = BrandedId::make("MMM", 6);
  ASSERT_EQ(q.pause(gm), LaneStatus::ok);  // the deciding enqueue's own job stays unclaimed meanwhile
  const BrandedId j = q.mint();
  EnqueueStatus first = EnqueueStatus::corrupt;
  std::thread([&] { first = q.enqueue(ga, j, "j"); }).join();
  ASSERT_EQ(first, EnqueueStatus::enqueued);
  std::atomic<int> bad{0};
  EnqueueStatus again = EnqueueStatus::corrupt;
  with_helper("index.rival_read", 20, [&](int i) {
    if (q.reassign(j, i % 2 ? gc : gb) != MoveStatus::moved) ++bad;
  }, [&] { again = q.enqueue(gm, j, "j again"); });
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(again, EnqueueStatus::duplicate) << to_string(again);
  ASSERT_EQ(q.resume(gm), LaneStatus::ok);
  const std::vector<BrandedId> got = serve_all(q);
  EXPECT_EQ(got, std::vector<BrandedId>{j});
  expect_clean(q);
}

// A rival read while its slot's next admission is unpublished. Slot r held
// the id before and was freed, its index entry still current. Between the
// scan and the reading of r, a move of the id (from x) takes r, moves its
// admission tag and stops before publishing: r reads as no job. The move
// then goes on (x is dropped: no job either) and the scan is made again. In
// that second round the id moves on from r to m before r is read: r is
// freed. Keyed by r's tag as it was when read (the move's), the second
// round's set of rivals that are no job, {r, x}, was taken for the first's,
// and the scan was not made again: m was missed and the id admitted twice
// (found in review of b087323). Keyed by the tag of the entry the scan read,
// the first round's r is another rival than the second's, and m is met.
TEST_F(Contention, ARivalReadWhileItsSlotsNextAdmissionIsUnpublishedIsKnownByItsEntrysTag) {
  create(small());
  ASSERT_FALSE(HasFailure());
  Queue& q = this->q();
  const BrandedId g1 = BrandedId::make("AAA", 1), g2 = BrandedId::make("BBB", 2), g3 = BrandedId::make("CCC", 3);
  const BrandedId g4 = BrandedId::make("DDD", 4), gm = BrandedId::make("MMM", 6), gf = BrandedId::make("FFF", 5);
  const BrandedId k = q.mint(), j = q.mint();
  // j is the first entry of the index: the first way of its bucket, so that
  // every later entry of j is scanned after it.
  EnqueueStatus first = EnqueueStatus::corrupt;
  std::thread([&] { first = q.enqueue(g1, j, "j"); }).join();  // at slot r
  ASSERT_EQ(first, EnqueueStatus::enqueued);
  ASSERT_EQ(q.enqueue(g2, k, "k"), EnqueueStatus::enqueued);  // ahead of j's copy in g2: x stays linked when dropped
  // Every other slot holds a filler (minted on another thread: this one's
  // memory of j as freshly minted stays, and its enqueue skips the look-up),
  // so that each slot taken below is the only free one.
  std::atomic<int> bad{0};
  std::thread([&] {
    for (int i = 0; i < 6; ++i)
      if (q.enqueue(gf, q.mint(), "f") != EnqueueStatus::enqueued) ++bad;
  }).join();
  ASSERT_EQ(bad.load(), 0);
  for (const BrandedId& g : {g1, g2, gf, gm}) ASSERT_EQ(q.pause(g), LaneStatus::ok);
  // One filler served and completed: its slot is the only free one.
  const auto free_one = [&q, &bad, gf] {
    std::thread([&] {
      Lease l;
      if (q.resume(gf) != LaneStatus::ok || !q.claim(l, 60000) || q.complete(l.id, l.token) != AckStatus::ok ||
          q.pause(gf) != LaneStatus::ok)
        ++bad;
    }).join();
  };
  free_one();  // for the deciding enqueue's own slot

  struct Plan {
    std::thread::id main;
    std::atomic<int> rivals{0};
    std::atomic<bool> taken{false}, tagged{false}, go{false};
    std::thread mover;
    std::function<void()> move_to_x, move_to_r, move_to_m;
  } plan;
  static thread_local bool is_mover = false;
  MoveStatus to_x = MoveStatus::corrupt, to_r = MoveStatus::corrupt, to_m = MoveStatus::corrupt;
  plan.main = std::this_thread::get_id();
  plan.move_to_x = [&] {
    free_one();
    std::thread([&] { to_x = q.reassign(j, g2); }).join();  // r was g1's only job: popped and freed
  };
  plan.move_to_r = [&] { to_r = q.reassign(j, g3); };
  plan.move_to_m = [&] {
    free_one();
    std::thread([&] { to_m = q.reassign(j, g4); }).join();
  };
  // Once the deciding enqueue has its slot: j moves from r to x, and r is
  // free (the only free slot), its entry still current.
  const auto at_slot_taken = [](void* p) {
    Plan& pl = *static_cast<Plan*>(p);
    if (std::this_thread::get_id() != pl.main || pl.taken.exchange(true)) return;
    pl.move_to_x();
  };
  // The mover to r stops after its tag store until it is told to go on.
  const auto at_tagged = [](void* p) {
    Plan& pl = *static_cast<Plan*>(p);
    if (!is_mover) return;
    pl.tagged.store(true);
    while (!pl.go.load()) std::this_thread::yield();
  };
  // The deciding enqueue, before each rival it reads: the 1st (r, round 1):
  // the move from x to r starts and stops at its tag store; the 2nd (x): it
  // goes on and ends; the 3rd (round 2's first): the id moves from r to m.
  const auto at_rival = [](void* p) {
    Plan& pl = *static_cast<Plan*>(p);
    if (std::this_thread::get_id() != pl.main) return;
    const int n = pl.rivals.fetch_add(1) + 1;
    if (n == 1) {
      pl.mover = std::thread([&pl] {
        is_mover = true;
        pl.move_to_r();
      });
      while (!pl.tagged.load()) std::this_thread::yield();
    } else if (n == 2) {
      pl.go.store(true);
      pl.mover.join();
    } else if (n == 3) {
      pl.move_to_m();
    }
  };
  detail::failpoint_call("enqueue.slot_taken", at_slot_taken, &plan);
  detail::failpoint_call("reassign.tagged", at_tagged, &plan);
  detail::failpoint_call("decide.rival", at_rival, &plan);
  const EnqueueStatus again = q.enqueue(gm, j, "j again");
  detail::failpoint_call("decide.rival", nullptr, nullptr);
  detail::failpoint_call("reassign.tagged", nullptr, nullptr);
  detail::failpoint_call("enqueue.slot_taken", nullptr, nullptr);
  plan.go.store(true);
  if (plan.mover.joinable()) plan.mover.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(to_x, MoveStatus::moved);
  ASSERT_GE(plan.rivals.load(), 3) << "the rivals were not read as planned (r, then x, then a second round)";
  EXPECT_EQ(to_r, MoveStatus::moved);
  EXPECT_EQ(to_m, MoveStatus::moved);
  EXPECT_EQ(again, EnqueueStatus::duplicate) << to_string(again);
  for (const BrandedId& g : {g1, g2, gf, gm}) ASSERT_EQ(q.resume(g), LaneStatus::ok);
  const std::vector<BrandedId> got = serve_all(q);  // j, k and the 3 fillers left
  EXPECT_EQ(std::count(got.begin(), got.end(), j), 1) << "served " << std::count(got.begin(), got.end(), j) << " times";
  EXPECT_EQ(std::count(got.begin(), got.end(), k), 1);
  EXPECT_EQ(got.size(), 5u);
  expect_clean(q);
}

// A move's target, found undecided by an enqueue of the same id (through
// the move's origin), is decided by the move, served, completed and its
// slot reused by an unrelated enqueue u, all before the enqueue decides it
// itself. The slot's record is u's then, not a move's: decide_moved reported
// a corrupt slot record (found in review). Nothing was scribbled: no
// corruption is reported, u stays, and the enqueue admits the id again (its
// job was completed).
TEST_F(Contention, AMovesTargetDecidedAndReusedBeforeAnEnqueueDecidesItIsNoCorruption) {
  create(small());
  ASSERT_FALSE(HasFailure());
  Queue& q = this->q();
  const BrandedId g1 = BrandedId::make("AAA", 1), g2 = BrandedId::make("BBB", 2), g3 = BrandedId::make("CCC", 3);
  const BrandedId gm = BrandedId::make("MMM", 6), gf = BrandedId::make("FFF", 5);
  const BrandedId k = q.mint(), j = q.mint();
  // j is the first entry of the index (the first way of its bucket), so that
  // its origin a is scanned before its copy n.
  EnqueueStatus first = EnqueueStatus::corrupt;
  std::thread([&] { first = q.enqueue(g1, j, "j"); }).join();  // at slot a
  ASSERT_EQ(first, EnqueueStatus::enqueued);
  ASSERT_EQ(q.enqueue(g1, k, "k"), EnqueueStatus::enqueued);  // ahead of j: a stays linked when dropped
  // Four fillers (minted on another thread, so that j stays freshly minted
  // here and this thread's enqueue of it skips the look-up): two slots are
  // left, for the copy n and the deciding enqueue.
  std::atomic<int> bad{0};
  std::thread([&] {
    for (int i = 0; i < 4; ++i)
      if (q.enqueue(gf, q.mint(), "f") != EnqueueStatus::enqueued) ++bad;
  }).join();
  ASSERT_EQ(bad.load(), 0);
  for (const BrandedId& g : {g1, gf, gm, g3}) ASSERT_EQ(q.pause(g), LaneStatus::ok);

  struct Plan {
    std::thread::id main;
    std::atomic<bool> dropped{false}, go{false}, stepped{false};
    std::thread mover;
    std::function<void()> serve_and_reuse;
  } plan;
  static thread_local bool is_mover = false;
  plan.main = std::this_thread::get_id();
  MoveStatus moved = MoveStatus::corrupt;
  BrandedId u;
  EnqueueStatus u_status = EnqueueStatus::corrupt;
  // The mover stops once the origin is dropped (it names the copy, which is
  // undecided), until it is told to go on.
  const auto at_dropped = [](void* p) {
    Plan& pl = *static_cast<Plan*>(p);
    if (!is_mover) return;
    pl.dropped.store(true);
    while (!pl.go.load()) std::this_thread::yield();
  };
  // The deciding enqueue, about to decide the copy (met through the origin):
  // the mover goes on and ends (the copy committed, in g2), the copy is
  // served and completed, and u takes its slot (the only free one).
  plan.serve_and_reuse = [&] {
    plan.go.store(true);
    plan.mover.join();
    std::thread([&] {
      Lease l;
      if (!q.claim(l, 60000) || l.id != j || q.complete(l.id, l.token) != AckStatus::ok) ++bad;
      u = q.mint();
      u_status = q.enqueue(g3, u, "u");
    }).join();
  };
  const auto at_decide_moved = [](void* p) {
    Plan& pl = *static_cast<Plan*>(p);
    if (std::this_thread::get_id() != pl.main || pl.stepped.exchange(true)) return;
    pl.serve_and_reuse();
  };
  detail::failpoint_call("reassign.dropped", at_dropped, &plan);
  plan.mover = std::thread([&] {
    is_mover = true;
    moved = q.reassign(j, g2);
  });
  while (!plan.dropped.load()) std::this_thread::yield();
  // The drop is a step of the origin's lane word; any write of that word
  // applies it to the origin (now a husk that names the copy).
  ASSERT_EQ(q.pause(g1), LaneStatus::ok);
  detail::failpoint_call("decide.moved", at_decide_moved, &plan);
  const EnqueueStatus again = q.enqueue(gm, j, "j again");
  detail::failpoint_call("decide.moved", nullptr, nullptr);
  detail::failpoint_call("reassign.dropped", nullptr, nullptr);
  plan.go.store(true);
  if (plan.mover.joinable()) plan.mover.join();
  ASSERT_TRUE(plan.stepped.load()) << "the enqueue did not decide the copy";
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(moved, MoveStatus::moved);
  EXPECT_EQ(u_status, EnqueueStatus::enqueued);
  EXPECT_EQ(again, EnqueueStatus::enqueued) << to_string(again);
  EXPECT_EQ(q.corruption().count, 0u) << q.corruption().last_structure;
  for (const BrandedId& g : {g1, gf, gm, g3}) ASSERT_EQ(q.resume(g), LaneStatus::ok);
  const std::vector<BrandedId> got = serve_all(q);  // k, j again, u and the 4 fillers
  for (const BrandedId& want : {k, j, u})
    EXPECT_EQ(std::count(got.begin(), got.end(), want), 1) << want.str();
  EXPECT_EQ(got.size(), 7u);
  expect_clean(q);
}

// A job whose reassign is stopped between its drop and its copy's commit:
// the origin is a husk that names the copy, the copy admitting and not yet
// committed. The job exists all that time (the copy is the job by the rule:
// its origin names it), so a look-up finds it: `job` shows it, a `jobs`
// listing has it, a complete under an old token is `stale`, not `gone`, and a
// second reassign moves it on, `moved` (it finishes the first move, as the
// sweep would, then makes its own; the first mover, going on, finds its move
// done and says `moved` too). Before, a look-up passed over both slots and
// answered as if the id had ended; then the second reassign said
// `not_pending` of a pending job.
//
// With `hide_copy`, the copy's index entry is taken out for the look-ups
// and put back after: a look-up's scan is no snapshot, and one that read the
// copy's way before its entry was written meets only the origin. It follows
// the origin to the copy it names.
void mover_stopped_between_drop_and_commit(Queue& q, const std::string& seg, bool hide_copy) {
  const BrandedId g1 = BrandedId::make("AAA", 1), g2 = BrandedId::make("BBB", 2), g3 = BrandedId::make("CCC", 3);
  const BrandedId j = q.mint(), k = q.mint();
  ASSERT_EQ(q.enqueue(g1, j, "j"), EnqueueStatus::enqueued);
  // An old token of j's: leased, then released (j is pending again).
  Lease old;
  ASSERT_TRUE(q.claim(old, 60000));
  ASSERT_EQ(old.id, j);
  ASSERT_EQ(q.release(old.id, old.token), AckStatus::ok);
  ASSERT_EQ(q.enqueue(g1, k, "k"), EnqueueStatus::enqueued);
  ASSERT_EQ(q.pause(g1), LaneStatus::ok);
  StoppedMover mover(q, j, g1, g2);
  RawSegment raw(seg);
  const std::uint32_t copy = slot_in(raw, j, detail::SlotState::admitting);
  EXPECT_NE(slot_in(raw, j, detail::SlotState::aborted), ~0U) << "the origin is not dropped";
  EXPECT_NE(copy, ~0U) << "the copy is not undecided";
  const Probe pj = probe_of(raw, j);
  const int way = copy == ~0U ? -1 : way_of(raw, pj.bucket, copy + 1);
  std::uint64_t entry = 0;
  if (hide_copy) {
    EXPECT_GE(way, 0) << "the copy's entry is not in the id's first bucket";
    if (way >= 0) entry = raw.bucket(pj.bucket).e[way].exchange(0);
  }
  const std::optional<JobInfo> info = q.job(j);
  const AckStatus late = q.complete(j, old.token);
  const MoveStatus again = q.reassign(j, g3);
  // Put back only into an empty way: the second reassign's own copy may have
  // taken the way the hidden entry left (the hidden one is a husk's now).
  if (hide_copy && way >= 0) {
    std::uint64_t empty = 0;
    raw.bucket(pj.bucket).e[way].compare_exchange_strong(empty, entry);
  }
  const std::vector<JobInfo> listed = q.jobs();
  const MoveStatus moved = mover.go();

  EXPECT_TRUE(info.has_value()) << "a job mid-move was not found";
  if (info) {
    EXPECT_EQ(info->id, j);
    EXPECT_EQ(info->group, g2);
  }
  EXPECT_EQ(std::count_if(listed.begin(), listed.end(), [&](const JobInfo& x) { return x.id == j; }), 1);
  EXPECT_EQ(late, AckStatus::stale) << to_string(late);
  EXPECT_EQ(again, MoveStatus::moved) << to_string(again);
  EXPECT_EQ(moved, MoveStatus::moved) << to_string(moved);
  const std::optional<JobInfo> after = q.job(j);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->group, g3) << "the second move is the one that holds";
  EXPECT_EQ(after->state, JobState::pending);
  EXPECT_EQ(q.corruption().count, 0u) << q.corruption().last_structure;
  EXPECT_EQ(q.resume(g1), LaneStatus::ok);
  const std::vector<BrandedId> got = serve_all(q);
  EXPECT_EQ(std::count(got.begin(), got.end(), j), 1);
  EXPECT_EQ(std::count(got.begin(), got.end(), k), 1);
  EXPECT_EQ(got.size(), 2u);
  expect_clean(q);
}

TEST_F(Contention, AJobWhoseMoverStoppedBetweenItsDropAndItsCommitIsStillFound) {
  create(small());
  ASSERT_FALSE(HasFailure());
  mover_stopped_between_drop_and_commit(q(), seg(), false);
}

TEST_F(Contention, AJobWhoseMoverStoppedBetweenItsDropAndItsCommitIsFoundThroughItsOrigin) {
  create(small());
  ASSERT_FALSE(HasFailure());
  mover_stopped_between_drop_and_commit(q(), seg(), true);
}

// What is left to serve is j alone, once; then the queue is clean.
void expect_only_served(Queue& q, const BrandedId& j) {
  const std::vector<BrandedId> got = serve_all(q);
  EXPECT_EQ(std::count(got.begin(), got.end(), j), 1);
  EXPECT_EQ(got.size(), 1u);
  expect_clean(q);
}

// A second reassign of a job mid-move to the group it is moving to: `moved`,
// and the job is pending there (it finishes the first move). Before, it said
// `not_pending`, and a caller that asked again to make sure was told the job
// could not move.
TEST_F(Contention, ASecondReassignToTheGroupAJobIsMovingToSaysMoved) {
  create(small());
  ASSERT_FALSE(HasFailure());
  Queue& q = this->q();
  const BrandedId g1 = BrandedId::make("AAA", 1), g2 = BrandedId::make("BBB", 2);
  const BrandedId j = q.mint();
  ASSERT_EQ(q.enqueue(g1, j, "j"), EnqueueStatus::enqueued);
  ASSERT_EQ(q.pause(g1), LaneStatus::ok);
  StoppedMover mover(q, j, g1, g2);
  const MoveStatus again = q.reassign(j, g2);
  const std::optional<JobInfo> mid = q.job(j);
  const std::uint64_t depth = q.depth(g2);
  EXPECT_EQ(mover.go(), MoveStatus::moved);
  EXPECT_EQ(again, MoveStatus::moved) << to_string(again);
  ASSERT_TRUE(mid.has_value());
  EXPECT_EQ(mid->group, g2);
  EXPECT_EQ(mid->state, JobState::pending);
  EXPECT_EQ(depth, 1u) << "the copy is not linked in its new lane";
  EXPECT_EQ(q.depth(g1), 0u);
  Lease l;
  ASSERT_TRUE(q.claim(l, 60000)) << "g1 is paused: j is served from g2";
  EXPECT_EQ(l.id, j);
  EXPECT_EQ(l.payload, "j");
  EXPECT_EQ(q.complete(l.id, l.token), AckStatus::ok);
  EXPECT_EQ(q.corruption().count, 0u) << q.corruption().last_structure;
  EXPECT_EQ(q.resume(g1), LaneStatus::ok);
  EXPECT_TRUE(serve_all(q).empty());
  expect_clean(q);
}

// A job j in group AAA moving to BBB (both paused) while its mover is
// stopped at `step`: `during` runs then (a second reassign, to CCC), and
// `after` once the mover has gone on (a reassign again, where one is needed).
// Then j is in CCC, served there once, and the queue is clean.
using MidMoveStep = std::function<void(Queue&, const BrandedId&)>;
void second_reassign_mid_move(Queue& q, const char* step, const MidMoveStep& during, const MidMoveStep& after = {}) {
  const BrandedId g1 = BrandedId::make("AAA", 1), g2 = BrandedId::make("BBB", 2), g3 = BrandedId::make("CCC", 3);
  const BrandedId j = q.mint();
  ASSERT_EQ(q.enqueue(g1, j, "j"), EnqueueStatus::enqueued);
  ASSERT_EQ(q.pause(g1), LaneStatus::ok);
  ASSERT_EQ(q.pause(g2), LaneStatus::ok);
  {
    StoppedMover mover(q, j, g1, g2, step);
    during(q, j);
    EXPECT_EQ(mover.go(), MoveStatus::moved);
  }
  if (after) after(q, j);
  const std::optional<JobInfo> now = q.job(j);
  ASSERT_TRUE(now.has_value());
  EXPECT_EQ(now->group, g3);
  EXPECT_EQ(now->state, JobState::pending);
  EXPECT_EQ(q.depth(g2), 0u);
  EXPECT_EQ(q.depth(g3), 1u);
  EXPECT_EQ(q.corruption().count, 0u) << q.corruption().last_structure;
  EXPECT_EQ(q.resume(g1), LaneStatus::ok);
  EXPECT_EQ(q.resume(g2), LaneStatus::ok);
  expect_only_served(q, j);
}

// A second reassign of a job whose mover stopped after committing the copy
// and before linking it in its new lane (the copy is scheduled, due at once,
// in no lane): `moved`, to a third group, where the job is then served once.
// Before, `not_pending`.
TEST_F(Contention, ASecondReassignOfAJobWhoseCopyIsCommittedButNotLinkedMovesIt) {
  create(small());
  ASSERT_FALSE(HasFailure());
  second_reassign_mid_move(q(), "reassign.committed", [](Queue& q, const BrandedId& j) {
    const std::optional<JobInfo> before = q.job(j);
    ASSERT_TRUE(before.has_value());
    EXPECT_EQ(before->state, JobState::scheduled) << "the mover did not stop with its copy unlinked";
    const MoveStatus again = q.reassign(j, BrandedId::make("CCC", 3));
    EXPECT_EQ(again, MoveStatus::moved) << to_string(again);
  });
}

// A second reassign of a job whose mover stopped while linking its copy
// (adopted, `returning`, not yet in its lane): the mover is alive and holds
// the link, so the job cannot move until it goes on: `busy`, not
// `not_pending` (job() shows it pending). Once the mover has gone on, the
// same call moves it. (Found in review of aace6be.)
TEST_F(Contention, ASecondReassignOfAJobWhoseMoverStoppedLinkingItsCopyIsBusyThenMoves) {
  create(small());
  ASSERT_FALSE(HasFailure());
  second_reassign_mid_move(
      q(), "move.claimed",
      [](Queue& q, const BrandedId& j) {
        const std::optional<JobInfo> before = q.job(j);
        ASSERT_TRUE(before.has_value());
        EXPECT_EQ(before->state, JobState::pending) << "the job is pending while its copy is linked";
        EXPECT_EQ(before->group, BrandedId::make("BBB", 2));
        const MoveStatus busy = q.reassign(j, BrandedId::make("CCC", 3));
        EXPECT_EQ(busy, MoveStatus::busy) << to_string(busy);
      },
      [](Queue& q, const BrandedId& j) {
        const MoveStatus again = q.reassign(j, BrandedId::make("CCC", 3));
        EXPECT_EQ(again, MoveStatus::moved) << to_string(again);
      });
}

// A reassign of a job whose releaser stopped after its release step and
// before linking it (`returning`, no holder: anyone may link it, as the
// sweep does): the reassign links it and moves it, `moved`. Before,
// `not_pending` of a job job() shows pending. The releaser, going on, finds
// it linked and answers ok.
TEST_F(Contention, AReassignOfAJobWhoseReleaserStoppedBeforeLinkingItMovesIt) {
  create(small());
  ASSERT_FALSE(HasFailure());
  Queue& q = this->q();
  const BrandedId g1 = BrandedId::make("AAA", 1), g2 = BrandedId::make("BBB", 2);
  const BrandedId j = q.mint();
  ASSERT_EQ(q.enqueue(g1, j, "j"), EnqueueStatus::enqueued);
  Lease l;
  ASSERT_TRUE(q.claim(l, 60000));
  ASSERT_EQ(l.id, j);
  StoppedCall<AckStatus> releaser("release.stepped", [&] { return q.release(l.id, l.token); });
  const std::optional<JobInfo> mid = q.job(j);
  const MoveStatus moved = q.reassign(j, g2);
  const AckStatus released = releaser.go();
  ASSERT_TRUE(mid.has_value());
  EXPECT_EQ(mid->state, JobState::pending);
  EXPECT_EQ(moved, MoveStatus::moved) << to_string(moved);
  EXPECT_EQ(released, AckStatus::ok) << to_string(released);
  const std::optional<JobInfo> after = q.job(j);
  ASSERT_TRUE(after.has_value());
  EXPECT_EQ(after->group, g2);
  EXPECT_EQ(q.depth(g2), 1u);
  EXPECT_EQ(q.corruption().count, 0u) << q.corruption().last_structure;
  expect_only_served(q, j);
}

// A complete under an old token of a job that is leased again, while its
// new lease is extended each time the complete reads the job's slot word
// between its two readings: the word moves under it more than 8 times (the
// old limit, after which the slot was taken for no job of that id and the
// answer was `gone`). The job exists: `stale`.
TEST_F(Contention, ACompleteWhoseJobsWordKeepsMovingIsStaleNotGone) {
  create(small());
  ASSERT_FALSE(HasFailure());
  Queue& q = this->q();
  const BrandedId j = q.mint();
  ASSERT_EQ(q.enqueue(G, j, "j"), EnqueueStatus::enqueued);
  Lease old_lease, l;
  ASSERT_TRUE(q.claim(old_lease, 60000));
  ASSERT_EQ(q.release(old_lease.id, old_lease.token), AckStatus::ok);
  ASSERT_TRUE(q.claim(l, 60000));
  ASSERT_EQ(l.id, j);
  std::atomic<int> bad{0};
  with_helper("index.rival_read", 20, [&](int i) {
    if (q.extend(l.id, l.token, std::uint32_t(60000 + 1000 * (i + 1))) != AckStatus::ok) ++bad;
  }, [&] { EXPECT_EQ(q.complete(j, old_lease.token), AckStatus::stale); });
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(q.complete(l.id, l.token), AckStatus::ok);
  expect_clean(q);
}

TEST_F(Contention, AStraysInsertWhoseLinkLosesMoreRoundsThanTheOldBoundLinks) {
  QueueOptions o = small();
  o.jobs = 16;
  create(o);
  ASSERT_FALSE(HasFailure());
  Queue& q = this->q();
  constexpr int kRounds = 100;  // the old bound: 16 + 64 + 1 rounds
  const BrandedId a = q.mint(), y = q.mint();
  ASSERT_EQ(q.enqueue(G, a, "a"), EnqueueStatus::enqueued);
  ASSERT_EQ(q.enqueue(G, y, "y"), EnqueueStatus::enqueued);
  Lease la, ly;
  ASSERT_TRUE(q.claim(la, 60000));
  ASSERT_TRUE(q.claim(ly, 60000));
  ASSERT_EQ(la.id, a);
  ASSERT_EQ(ly.id, y);
  std::atomic<int> bad{0};
  // Each time: y released into the lane's strays (the first time), or
  // claimed back and released again, relinked under a new tag: the strays
  // head the main thread's insert is about to CAS has moved.
  with_helper("strays.found", kRounds, [&](int i) {
    if (i > 0 && (!q.claim(ly, 60000) || ly.id != y)) ++bad;
    if (q.release(ly.id, ly.token) != AckStatus::ok) ++bad;
  }, [&] { EXPECT_EQ(q.release(la.id, la.token), AckStatus::ok); });
  EXPECT_EQ(bad.load(), 0);
  const std::vector<BrandedId> got = serve_all(q);
  EXPECT_EQ(got, (std::vector<BrandedId>{a, y}));
  expect_clean(q);
}


// A dead appender's `link` intent, settled by a sweep (settle_intent ->
// appended()) that is stopped while pred (the node the appender linked
// after) is popped and its slot reused as a run node. The node it linked is
// by then the run's head. appended() used to read the head first and pred's
// link second: stopped between the two, it judged the node "never linked",
// aborted and freed it while it headed the run, and every job after it in
// the run was lost (q2 below; found in review, 2026-12-02). It now reads
// pred's link first and the head second, so whichever read it makes after
// the pop sees the node.
TEST_F(AppendRace, SettlerReadsHeadThenPredAfterPredWasPoppedAndReused) {
  QueueOptions o = small();
  o.recovery_ms = 60000;  // the parent's claims start no sweep of their own during the test
  create(o);
  ASSERT_FALSE(HasFailure());
  Queue& q = this->q();
  const BrandedId K = BrandedId::make("KKK", 3);
  // A claim now, so that a pass starts now and the next is 30 s away.
  const BrandedId d = q.mint();
  ASSERT_EQ(q.enqueue(K, d, "d"), EnqueueStatus::enqueued);
  Lease ld;
  ASSERT_TRUE(q.claim(ld, 60000));
  ASSERT_EQ(ld.id, d);
  const BrandedId p = q.mint();
  ASSERT_EQ(q.enqueue(G, p, "p"), EnqueueStatus::enqueued);
  const std::string name = seg();
  SharedBlock<Shared> sh;
  {
    ForkedChild a([&]() -> int {
      auto r = Queue::open(name);
      if (!r) return 3;
      Queue cq = std::move(r.value());
      const BrandedId n = cq.mint();
      std::memcpy(sh->y, n.str().data(), n.str().size());
      detail::failpoint_arm("run.linked", 1, detail::FailpointAction::kill);
      cq.enqueue(G, n, "n");
      return 5;  // not reached
    });
    ASSERT_TRUE(a.wait_for(std::chrono::seconds(10)));
    ASSERT_TRUE(a.signaled()) << a.describe();
  }
  const BrandedId n = *BrandedId::parse(std::string_view(sh->y, 14));
  ForkedChild settler([&]() -> int {
    auto r = Queue::open(name);
    if (!r) return 3;
    Queue cq = std::move(r.value());
    detail::failpoint_arm("settle.appended", 1, detail::FailpointAction::stop);
    cq.tick();
    return 0;
  });
  ASSERT_TRUE(wait_stopped(settler.pid())) << "the settler did not reach appended()";
  // Meanwhile: p (the dead appender's pred) is claimed and completed, and its
  // slot is reused by q2, appended after n (n is the head now).
  ASSERT_EQ(q.pause(H), LaneStatus::ok);
  for (int i = 0; i < 5; ++i) ASSERT_EQ(q.enqueue(H, q.mint(), "h"), EnqueueStatus::enqueued);
  Lease l;
  ASSERT_TRUE(q.claim(l, 60000));
  ASSERT_EQ(l.id, p);
  ASSERT_EQ(q.complete(l.id, l.token), AckStatus::ok);
  const BrandedId q2 = q.mint();
  ASSERT_EQ(q.enqueue(G, q2, "q2"), EnqueueStatus::enqueued);
  ::kill(settler.pid(), SIGCONT);
  ASSERT_TRUE(settler.wait_for(std::chrono::seconds(10)));
  ASSERT_TRUE(settler.exited_zero()) << settler.describe();
  // q2 was acknowledged: it must be delivered (n too, if it was committed).
  std::vector<BrandedId> got;
  for (int i = 0; i < 4; ++i) {
    Lease m;
    if (!q.claim(m, 60000)) continue;
    got.push_back(m.id);
    EXPECT_EQ(q.complete(m.id, m.token), AckStatus::ok);
  }
  EXPECT_NE(std::find(got.begin(), got.end(), q2), got.end()) << "the acknowledged job q2 was never delivered";
  (void)n;
  EXPECT_EQ(q.corruption().count, 0u) << q.corruption().last_structure;
  const FsckReport r = q.fsck();
  EXPECT_TRUE(r.clean()) << (r.issues.empty() ? "" : r.issues[0].invariant + ": " + r.issues[0].detail);
}

// The sweep's settling of a dead appender's `link` intent, slower than its
// slot's reuse. D (a child) dies linked in G (slot 15, no entry). A settler
// (a child) reads D's intent and slot word and stops in appended(). A claim
// decides D's admission, takes and completes it. L's enqueue of j (slot 0)
// is held after its entry; E's (the main thread, which minted j) takes slot
// 15, the head of G, meets L's entry and stops in decide() before reading L.
// L goes on: kills E, commits itself. The settler went on and, reading the
// slot again without its ctr, took E's husk for D's and cleared its holder
// (E alive and deciding); a claim popped and freed it, F took the slot, and
// E read the ctr moved on as its commit: `enqueued` twice for j, one job
// (found in review of 7692bd3). The settler leaves E's husk alone now (F,
// with every other slot leased, then finds no free slot: not asserted).
TEST_F(Contention, AStaleLinkSettlerLeavesALaterAdmissionsHuskAlone) {
  QueueOptions o = small();
  o.jobs = 16;
  o.lanes = 16;
  o.recovery_ms = 60000;  // the parent's claims start no sweep of their own during the test
  create(o);
  ASSERT_FALSE(HasFailure());
  Queue& q = this->q();
  const BrandedId gt = BrandedId::make("TTT", 1), gl = BrandedId::make("LLL", 2), gf = BrandedId::make("FFF", 3);
  const BrandedId j = q.mint();  // the main thread's: E skips the look-up
  RawSegment raw(seg());
  std::vector<BrandedId> others;
  std::thread([&] {
    for (int i = 0; i < 17; ++i) others.push_back(q.mint());
  }).join();
  LeasedSlots leases(q, raw, gt, std::vector<BrandedId>(others.begin(), others.begin() + 16));
  ASSERT_FALSE(::testing::Test::HasFailure());
  ASSERT_TRUE(leases.free(15));
  const std::string name = seg();
  SharedBlock<Shared> sh;
  {
    ForkedChild d([&]() -> int {
      auto r = Queue::open(name);
      if (!r) return 3;
      Queue cq = std::move(r.value());
      const BrandedId n = cq.mint();
      std::memcpy(sh->y, n.str().data(), n.str().size());
      detail::failpoint_arm("run.appended_first", 1, detail::FailpointAction::kill);
      cq.enqueue(G, n, "n");
      return 5;  // not reached
    });
    ASSERT_TRUE(d.wait_for(std::chrono::seconds(10)));
    ASSERT_TRUE(d.signaled()) << d.describe();
  }
  const BrandedId n = *BrandedId::parse(std::string_view(sh->y, 14));
  ASSERT_EQ(raw.slot(15).sf.load(), n.snowflake());
  ForkedChild settler([&]() -> int {
    auto r = Queue::open(name);
    if (!r) return 3;
    Queue cq = std::move(r.value());
    detail::failpoint_arm("settle.appended", 1, detail::FailpointAction::stop);
    cq.tick();
    return 0;
  });
  ASSERT_TRUE(test::wait_stopped(settler.pid())) << "the settler did not reach appended()";
  Lease ln;
  ASSERT_TRUE(q.claim(ln, 600000));  // decides D's admission (committed) and takes it
  ASSERT_EQ(ln.id, n);
  ASSERT_TRUE(leases.free(0));
  ASSERT_EQ(q.pause(gl), LaneStatus::ok);
  Gate indexed;
  detail::failpoint_call("enqueue.indexed", &Gate::hold, &indexed);
  EnqueueStatus lst = EnqueueStatus::corrupt;
  std::thread tl([&] {
    t_gated = true;
    lst = q.enqueue(gl, j, "l");
  });
  while (!indexed.reached.load()) std::this_thread::yield();
  ASSERT_EQ(detail::SlotWord::state(raw.slot_word_value(0)), detail::SlotState::admitting);  // L's
  ASSERT_EQ(q.complete(ln.id, ln.token), AckStatus::ok);  // slot 15 free: E takes it
  std::atomic<int> bad{0};
  EnqueueStatus est = EnqueueStatus::corrupt, fst = EnqueueStatus::corrupt;
  with_helper("decide.rival", 1, [&](int) {
    indexed.open.store(true);
    tl.join();  // L kills E (a higher admitting rival) and commits itself
    if (detail::SlotWord::state(raw.slot_word_value(15)) != detail::SlotState::aborted ||
        detail::SlotWord::holder(raw.slot_word_value(15)) == 0) {
      ++bad;
      ADD_FAILURE() << "E not killed";
    }
    ::kill(settler.pid(), SIGCONT);
    if (!settler.wait_for(std::chrono::seconds(10)) || !settler.exited_zero()) ++bad;
    if (detail::SlotWord::holder(raw.slot_word_value(15)) == 0) {
      ++bad;
      ADD_FAILURE() << "the settler cleared the holder of E's husk";
    }
    Lease l;
    if (q.claim(l, 600000)) {  // pops E's husk (freed before the fix; marked for E now)
      ++bad;
      ADD_FAILURE() << "claimed " << l.id.str();
    }
    fst = q.enqueue(gf, others[16], "f");  // took slot 15 before the fix
  }, [&] { est = q.enqueue(G, j, "e"); });
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(lst, EnqueueStatus::enqueued) << to_string(lst);
  (void)fst;
  EXPECT_EQ(est, EnqueueStatus::duplicate) << to_string(est) << ": E's admission was killed by L";
  detail::failpoint_call("enqueue.indexed", nullptr, nullptr);
  ASSERT_TRUE(leases.free_rest());
  ASSERT_EQ(q.resume(gl), LaneStatus::ok);
  const std::vector<BrandedId> got = serve_all(q);
  EXPECT_EQ(std::count(got.begin(), got.end(), j), 1);
}


// A duplicate enqueue of a job whose mover is stopped between its drop and
// its commit: the look-up takes the copy its origin names for the job, and
// `duplicate` must vouch for a job that is served. The enqueue commits the
// copy (the move's rule) and the sweep adopts it into its new group, so the
// job is served while its mover stays stopped and the origin's lane is
// paused (nobody meets its husk). Found in review of ea18f4d, which answered
// `duplicate` and left the copy undecided until the mover resumed.
TEST_F(Contention, ADuplicateOfAJobMidMoveCommitsItsCopy) {
  create(small());
  ASSERT_FALSE(HasFailure());
  Queue& q = this->q();
  const BrandedId g1 = BrandedId::make("AAA", 1), g2 = BrandedId::make("BBB", 2);
  const BrandedId j = q.mint();
  ASSERT_EQ(q.enqueue(g1, j, "j"), EnqueueStatus::enqueued);
  ASSERT_EQ(q.pause(g1), LaneStatus::ok);
  StoppedMover mover(q, j, g1, g2);
  const EnqueueStatus dup = q.enqueue(g1, j, "again");
  q.tick();
  Lease l;
  const bool served = q.claim(l, 60000);
  const MoveStatus moved = mover.go();
  EXPECT_EQ(dup, EnqueueStatus::duplicate);
  EXPECT_TRUE(served) << "the job an enqueue was told exists was not served while its mover was stopped";
  if (served) {
    EXPECT_EQ(l.id, j);
    EXPECT_EQ(q.complete(l.id, l.token), AckStatus::ok);
  }
  EXPECT_EQ(moved, MoveStatus::moved) << to_string(moved);
  EXPECT_EQ(q.resume(g1), LaneStatus::ok);
  const std::vector<BrandedId> got = serve_all(q);
  EXPECT_EQ(got.size() + (served ? 1 : 0), 1u);
  expect_clean(q);
}

// A completer stopped right after its lane CAS (ack.stepped: the word names
// its `complete` step, its slot is still leased) holds nothing: whoever
// next reads or writes its lane, or the sweep's next pass, applies the step.
class StoppedCompleter : public SegmentFixture {
 protected:
  // Enqueues a job into `group` (and one after it, `and_next`), claims the
  // first and holds its completer at ack.stepped. Returns the first's id.
  BrandedId hold(const BrandedId& group, bool and_next) {
    create(small());
    Queue& q = this->q();
    const BrandedId done = q.mint();
    EXPECT_EQ(q.enqueue(group, done, "done"), EnqueueStatus::enqueued);
    if (and_next) {
      EXPECT_EQ(q.enqueue(group, q.mint(), "next"), EnqueueStatus::enqueued);
    }
    EXPECT_EQ(q.try_claim(lease_, 600000), ClaimStatus::claimed);
    EXPECT_EQ(lease_.id, done);
    completer_.emplace("ack.stepped", [this] { return this->q().complete(lease_.id, lease_.token); });
    EXPECT_TRUE(q.job(done).has_value()) << "the step is applied by its author after ack.stepped";
    return done;
  }
  void finish() {
    EXPECT_EQ(completer_->go(), AckStatus::ok);
    EXPECT_EQ(q().corruption().count, 0u);
  }

  // The lane's next append applies the step as it reads the word, though it
  // only links after the run's last node and writes no word. A version that
  // applied the step only where an append CASes the word (95e21fe,
  // reverted) left the slot held until the lane's next claim, ack, tail
  // move or sweep pass: the queue said `full` one job early (found in
  // review).
  void appends_free_its_slot(const BrandedId& group) {
    const BrandedId done = hold(group, true);
    ASSERT_FALSE(HasFailure());
    ASSERT_EQ(q().enqueue(group, q().mint(), "after"), EnqueueStatus::enqueued);  // links after `next`
    EXPECT_FALSE(q().job(done).has_value()) << "the append left the stopped completer's step unapplied";
    // Every slot but the two pending jobs' is free: the completed job's
    // among them.
    int more = 0;
    while (q().enqueue(group, q().mint(), "fill") == EnqueueStatus::enqueued) ++more;
    EXPECT_EQ(more, int(small().jobs) - 2);
    finish();
  }

  // With nothing more enqueued, claimed or acknowledged in its lane, the
  // sweep's pass over the lanes applies the step: the slot is not held until
  // the lease's deadline. The default lane's was not (sweep_lanes skipped it
  // before its lane_base: it is never given back), and stayed held for as
  // long as the lease had left: here ten minutes, and up to 49 days.
  void a_pass_frees_its_slot(const BrandedId& group) {
    const BrandedId done = hold(group, false);
    ASSERT_FALSE(HasFailure());
    q().tick();
    EXPECT_FALSE(q().job(done).has_value()) << "the sweep's pass left the stopped completer's slot held";
    finish();
  }

  Lease lease_;
  std::optional<StoppedCall<AckStatus>> completer_;
};

TEST_F(StoppedCompleter, ItsLanesNextAppendFreesItsSlot) { appends_free_its_slot(G); }
TEST_F(StoppedCompleter, TheDefaultLanesNextAppendFreesItsSlot) {
  appends_free_its_slot(*BrandedId::parse(kDefaultGroup));
}
TEST_F(StoppedCompleter, ASweepPassFreesItsSlot) { a_pass_frees_its_slot(G); }
TEST_F(StoppedCompleter, ASweepPassFreesItsSlotInTheDefaultLane) {
  a_pass_frees_its_slot(*BrandedId::parse(kDefaultGroup));
}

}  // namespace
}  // namespace fairlane
