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
#include <thread>
#include <vector>

#include "../../src/failpoint.hpp"
#include "../../src/lane_order.hpp"
#include "forked_child.hpp"
#include "raw_segment.hpp"
#include "test_support.hpp"

namespace fairlane {
namespace {

using test::ForkedChild;
using test::RawSegment;
using test::SegmentFixture;
using test::SharedBlock;

const BrandedId G = BrandedId::make("GRP", 7);
const BrandedId H = BrandedId::make("HHH", 9);

struct Shared {
  std::atomic<int> status{-1};
  char y[32] = {};
};

using test::wait_stopped;

// The tables these races need: 8 job slots (16-byte payloads), 8 lanes.
QueueOptions small() {
  QueueOptions o;
  o.jobs = 8;
  o.lanes = 8;
  o.payload_bytes = 16;
  return o;
}

// Claims and completes everything there is (each completion must be ok);
// the ids in the order they were served.
std::vector<BrandedId> serve_all(Queue& q) {
  std::vector<BrandedId> got;
  Lease l;
  while (q.claim(l, 60000)) {
    got.push_back(l.id);
    EXPECT_EQ(q.complete(l.id, l.token), AckStatus::ok);
  }
  return got;
}

// No corruption met, and fsck finds nothing.
void expect_clean(Queue& q) {
  EXPECT_EQ(q.corruption().count, 0u) << q.corruption().last_structure;
  const FsckReport r = q.fsck();
  EXPECT_TRUE(r.clean()) << (r.issues.empty() ? "" : r.issues[0].invariant + ": " + r.issues[0].detail);
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

}  // namespace
}  // namespace fairlane
