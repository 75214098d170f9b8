// enqueue_wait: a producer at a full queue parks on the segment's futex
// until a slot is freed (design.md, "Blocking enqueues"), rather than
// retrying `full` in a loop.
//
// Most queues here have a recovery bound of 60 s: a parked producer then
// sleeps up to 30 s a slice, so a lost wake-up shows as a wait of that
// order, and the checks below ("woken well within a slice") cannot be met
// by a producer that slept its slice out.
#include "failpoint_gate.hpp"
#include "forked_child.hpp"
#include "parked_child.hpp"
#include "raw_segment.hpp"
#include "stopped_call.hpp"
#include "test_support.hpp"

#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "core.hpp"
#include "failpoint.hpp"
#include "hash.hpp"
#include "id_index.hpp"
#include "lanes.hpp"
#include "segment.hpp"
#include "slots.hpp"

namespace fairlane {
namespace {

using namespace std::chrono_literals;
using test::eventually;
using test::ForkedChild;
using test::in_futex_wait;
using test::RawSegment;

const BrandedId A = BrandedId::make("AAA", 1);
const BrandedId B = BrandedId::make("BBB", 1);
constexpr std::uint32_t kLease = 60000;

// A failpoint callback that counts its calls (in the std::atomic<int> it is
// handed): how often a thread got to a step.
void count_hits(void* n) { static_cast<std::atomic<int>*>(n)->fetch_add(1); }

class EnqueueWait : public test::SegmentFixture {
 protected:
  void make(std::uint32_t jobs = 8, std::uint32_t recovery_ms = 60000, std::uint32_t processes = 0) {
    QueueOptions o;
    o.jobs = jobs;
    o.lanes = 8;
    o.payload_bytes = 32;
    o.recovery_ms = recovery_ms;
    if (processes) o.processes = processes;
    create(o);
    jobs_ = jobs;
  }
  detail::Segment& s() { return detail::QueueAccess::segment(q()); }
  // Every slot in use: jobs of A's lane in every slot still free.
  void fill() {
    std::uint32_t n = 0;
    while (n <= jobs_ && q().enqueue(A, q().mint(), "x") == EnqueueStatus::enqueued) ++n;
    ASSERT_LE(n, jobs_);
    ASSERT_EQ(q().enqueue(A, q().mint(), "x"), EnqueueStatus::full);
  }
  void free_one() {
    Lease l;
    ASSERT_TRUE(q().claim(l, kLease));
    ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  }
  std::uint64_t record_count(std::uint32_t rec) { return s().procs[rec].room_parked.load() & 0xFFFFFFFF; }
  // Starts a producer whose enqueue_wait (of a fresh id into B, 50 s)
  // parks at the full queue, and waits until it is counted and has asked
  // for its wake `batch` frees on (room_want, set after the count). Its
  // answer lands in `st` (-1 until then).
  std::thread park_a_producer(std::atomic<int>& st, std::uint32_t batch) {
    std::thread t([&st, this] { st = int(q().enqueue_wait(B, q().mint(), "x", 50s)); });
    const bool parked = eventually([&] {
      return s().h->room_waiters.load() == 1 && s().h->room_want.load() == s().h->room_seq.load() + batch;
    });
    EXPECT_TRUE(parked) << "the producer never parked";
    return t;
  }

  // Waits for the producer thread that answers into `st` (10 s at most:
  // well within a 30 s sleep slice, so a lost wake shows), joins it, and
  // says whether it answered in that time; `let_go` frees it on a failure.
  bool answered_in_time(std::thread& producer, const std::atomic<int>& st, const std::function<void()>& let_go = {}) {
    const bool done = eventually([&] { return st.load() != -1; }, 10s);
    if (!done && let_go) let_go();
    producer.join();
    return done;
  }

  std::uint32_t jobs_ = 0;
};

// A producer parked on a full queue is woken by the complete that frees a
// slot, and its job is admitted; nothing stays counted.
TEST_F(EnqueueWait, AProducerParkedOnAFullQueueIsWokenByTheCompleteThatFreesASlot) {
  make();
  fill();
  const BrandedId id = q().mint();
  std::atomic<int> st{-1};
  std::thread producer([&] { st = int(q().enqueue_wait(B, id, "waited", 50s)); });
  ASSERT_TRUE(eventually([&] { return q().snapshot().producers_parked == 1; })) << "the producer never parked";
  EXPECT_EQ(record_count(s().me_index), 1u);
  EXPECT_EQ(st.load(), -1) << "it returned with every slot in use";
  const std::uint32_t seq = s().h->room_seq.load();
  free_one();
  EXPECT_NE(s().h->room_seq.load(), seq) << "the complete made no wake";
  const bool woken = eventually([&] { return st.load() != -1; }, 10s);
  producer.join();
  ASSERT_TRUE(woken) << "not woken: it slept its slice out";
  EXPECT_EQ(EnqueueStatus(st.load()), EnqueueStatus::enqueued);
  ASSERT_TRUE(q().job(id).has_value());
  EXPECT_EQ(q().job(id)->group, B);
  EXPECT_EQ(s().h->room_waiters.load(), 0u);
  EXPECT_EQ(record_count(s().me_index), 0u);
  EXPECT_EQ(q().snapshot().producers_parked, 0u);
}

// Past its timeout it says full, has written nothing, and is counted
// nowhere; the id is still its own to enqueue once there is room.
TEST_F(EnqueueWait, PastItsTimeoutItSaysFullAndLeavesNothing) {
  make();
  fill();
  const Snapshot before = q().snapshot();
  const BrandedId id = q().mint();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(q().enqueue_wait(B, id, "late", 100ms), EnqueueStatus::full);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 100ms) << "it gave up before its timeout";
  EXPECT_FALSE(q().job(id).has_value());
  EXPECT_EQ(q().depth(B), 0u);
  EXPECT_EQ(q().snapshot().counters.enqueued, before.counters.enqueued);
  EXPECT_EQ(s().h->room_waiters.load(), 0u);
  EXPECT_EQ(record_count(s().me_index), 0u);
  // A timeout of 0 is one try.
  EXPECT_EQ(q().enqueue_wait(B, id, "late", 0ms), EnqueueStatus::full);
  free_one();
  EXPECT_EQ(q().enqueue_wait(B, id, "late", 0ms), EnqueueStatus::enqueued);
}

// Every answer but full and lanes_full comes back at once, the queue full
// or not: a bad id or group, a duplicate, a payload too large. Each of
// these would otherwise park for the whole 60 s timeout.
TEST_F(EnqueueWait, EveryOtherAnswerComesBackAtOnce) {
  make();
  const BrandedId dup = q().mint();
  ASSERT_EQ(q().enqueue(A, dup, "x"), EnqueueStatus::enqueued);
  fill();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(q().enqueue_wait(A, dup, "x", 60s), EnqueueStatus::duplicate);
  EXPECT_EQ(q().enqueue_wait(A, BrandedId{}, "x", 60s), EnqueueStatus::invalid_id);
  EXPECT_EQ(q().enqueue_wait(A, BrandedId::make("OTH", 1), "x", 60s), EnqueueStatus::kind_mismatch);
  EXPECT_EQ(q().enqueue_wait(A, q().mint(), std::string(33, 'p'), 60s), EnqueueStatus::payload_too_large);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s) << "one of them waited";
  EXPECT_EQ(s().h->room_waiters.load(), 0u);
}

// milliseconds::max() is a wait for ever: its give-up time wrapped around
// to before now, and enqueue_wait, enqueue_batch_wait and claim_wait made
// one try and answered at once (found in review).
TEST_F(EnqueueWait, ATimeoutOfMillisecondsMaxWaits) {
  make();
  fill();
  const auto freed_by = [this](std::atomic<int>& st) {
    // Frees a slot once the producer is parked; says whether it was still
    // waiting then.
    const bool parked = eventually([&] { return s().h->room_waiters.load() == 1 || st.load() != -1; });
    const bool waiting = parked && st.load() == -1;
    free_one();
    return waiting;
  };
  std::atomic<int> st{-1};
  std::thread p([&] { st = int(q().enqueue_wait(B, q().mint(), "x", std::chrono::milliseconds::max())); });
  EXPECT_TRUE(freed_by(st)) << "enqueue_wait answered " << to_string(EnqueueStatus(st.load())) << " at once";
  p.join();
  EXPECT_EQ(EnqueueStatus(st.load()), EnqueueStatus::enqueued);

  std::atomic<int> bst{-1};
  const EnqueueItem items[] = {{B, q().mint(), "b", {}}};
  EnqueueStatus out[1];
  std::thread b([&] {
    (void)q().enqueue_batch_wait(items, out, std::chrono::milliseconds::max());
    bst = int(out[0]);
  });
  EXPECT_TRUE(freed_by(bst)) << "enqueue_batch_wait answered " << to_string(EnqueueStatus(bst.load())) << " at once";
  b.join();
  EXPECT_EQ(EnqueueStatus(bst.load()), EnqueueStatus::enqueued);

  // claim_wait on an empty queue (everything claimed and held).
  std::vector<Lease> held;
  for (Lease l; q().claim(l, kLease);) held.push_back(l);
  std::atomic<int> claimed{-1};
  std::thread c([&] {
    Lease l;
    claimed = q().claim_wait(l, kLease, std::chrono::milliseconds::max()) ? 1 : 0;
  });
  const bool parked = eventually([&] { return s().h->waiters.load() == 1 || claimed.load() != -1; });
  EXPECT_TRUE(parked && claimed.load() == -1) << "claim_wait answered at once";
  ASSERT_EQ(q().complete(held.back().id, held.back().token), AckStatus::ok);
  ASSERT_EQ(q().enqueue(A, q().mint(), "y"), EnqueueStatus::enqueued);
  c.join();
  EXPECT_EQ(claimed.load(), 1);
}

// ---- enqueue_batch_wait --------------------------------------------------------------------

// A batch larger than the free slots, with a consumer freeing a slot (one
// of those that filled the queue) each time a producer is parked: every
// item is admitted, in order, each
// waiting for its slot; a duplicate among them is answered as such and
// the items after it go on.
TEST_F(EnqueueWait, ABatchWaitsOutAFullQueueItemByItem) {
  make();
  const BrandedId C = BrandedId::make("CCC", 1);
  const BrandedId dup = q().mint();
  ASSERT_EQ(q().enqueue(C, dup, "x"), EnqueueStatus::enqueued);  // a lane of its own: released, it comes first again
  fill();
  std::vector<BrandedId> ids;
  for (int i = 0; i < 4; ++i) ids.push_back(q().mint());
  const EnqueueItem items[] = {
      {B, ids[0], "0", {}}, {B, ids[1], "1", {}}, {C, dup, "d", {}}, {B, ids[2], "2", {}}, {B, ids[3], "3", {}}};
  std::atomic<bool> done{false};
  std::thread consumer([&] {
    for (std::size_t k = 0; k < ids.size() && !done;) {
      if (s().h->room_waiters.load() == 0) {
        std::this_thread::yield();
        continue;
      }
      // One of fill()'s jobs (A's): the batch's own jobs stay, and so
      // does `dup` (released, they go back to their lanes).
      Lease l;
      if (!q().claim(l, kLease)) continue;
      if (l.group != A) {
        (void)q().release(l.id, l.token);
        continue;
      }
      (void)q().complete(l.id, l.token);
      // The next item in: the producer parks again for the one after.
      eventually([&] { return q().job(ids[k]).has_value() || done; }, 10s);
      ++k;
    }
  });
  EnqueueStatus st[5];
  std::fill(std::begin(st), std::end(st), EnqueueStatus::corrupt);
  const std::size_t n = q().enqueue_batch_wait(items, st, 50s);
  done = true;
  consumer.join();
  EXPECT_EQ(n, 4u);
  EXPECT_EQ(st[0], EnqueueStatus::enqueued);
  EXPECT_EQ(st[1], EnqueueStatus::enqueued);
  EXPECT_EQ(st[2], EnqueueStatus::duplicate);
  EXPECT_EQ(st[3], EnqueueStatus::enqueued);
  EXPECT_EQ(st[4], EnqueueStatus::enqueued);
  for (const BrandedId& id : ids) EXPECT_TRUE(q().job(id).has_value()) << id.string();
  EXPECT_EQ(s().h->room_waiters.load(), 0u);
}

// The timeout is the batch's, not each item's: past it, the items left get
// one try each. Three items at a full queue nobody drains answer `full`
// once the timeout has passed, the first item the only one that slept
// (counted at step point room.sleep: with a timeout of its own, each item
// would sleep), and nothing is left counted.
TEST_F(EnqueueWait, ABatchWaitsOneTimeoutInAll) {
  make();
  fill();
  const EnqueueItem items[] = {{B, q().mint(), "0", {}}, {B, q().mint(), "1", {}}, {B, q().mint(), "2", {}}};
  EnqueueStatus st[3];
  std::atomic<int> sleeps{0};
  detail::failpoint_call("room.sleep", count_hits, &sleeps);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(q().enqueue_batch_wait(items, st, 300ms), 0u);
  const auto took = std::chrono::steady_clock::now() - t0;
  detail::failpoint_call("room.sleep", nullptr, nullptr);
  for (EnqueueStatus x : st) EXPECT_EQ(x, EnqueueStatus::full);
  EXPECT_GE(took, 300ms);
  EXPECT_GE(sleeps.load(), 1) << "the first item never slept";
  EXPECT_LT(sleeps.load(), 3) << "each item waited a timeout of its own";
  EXPECT_EQ(s().h->room_waiters.load(), 0u);
}

// ---- lanes_full: a producer of a new group parks until a lane may be given back ----

class EnqueueWaitLane : public EnqueueWait {
 protected:
  // `lanes` group lanes, 64 slots.
  void make_lanes(std::uint32_t lanes) {
    QueueOptions o;
    o.jobs = 64;
    o.lanes = lanes;
    o.payload_bytes = 32;
    o.recovery_ms = 60000;
    create(o);
  }
  // One group lane (A takes it).
  void make_one_lane() {
    make_lanes(1);
    a_job_ = q().mint();
    ASSERT_EQ(q().enqueue(A, a_job_, "x"), EnqueueStatus::enqueued);  // A holds the one lane
    ASSERT_EQ(q().enqueue(B, q().mint(), "x"), EnqueueStatus::lanes_full);
  }
  // Starts a producer of group `g` whose enqueue_wait of `id` parks for a
  // lane, and waits until it is asleep in its futex wait. Its answer lands
  // in `st` (-1 until then).
  std::thread park_for_a_lane(std::atomic<int>& st, const BrandedId& g, const BrandedId& id,
                              std::chrono::milliseconds timeout = 50s) {
    std::atomic<pid_t> tid{0};
    const std::uint32_t before = s().h->lane_waiters.load();
    std::thread t([&st, &tid, g, id, timeout, this] {
      tid = pid_t(syscall(SYS_gettid));
      st = int(q().enqueue_wait(g, id, "waited", timeout));
    });
    const bool parked = eventually([&] {
      return s().h->lane_waiters.load() == before + 1 && tid.load() != 0 && in_futex_wait(tid.load());
    });
    EXPECT_TRUE(parked) << "the producer never parked for a lane";
    return t;
  }
  // A's job claimed and completed: A's lane is empty, for a look to give back.
  void empty_a() {
    Lease l;
    ASSERT_TRUE(q().claim(l, kLease));
    ASSERT_EQ(l.id, a_job_);
    ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  }
  // The producer started by park_for_a_lane is admitted, well within its
  // 30 s slice (a lost wake would sleep it out), and leaves nothing counted.
  void expect_admitted(std::thread& producer, const std::atomic<int>& st) {
    ASSERT_TRUE(answered_in_time(producer, st)) << "a lane to be had, and the producer parked for one asleep";
    EXPECT_EQ(EnqueueStatus(st.load()), EnqueueStatus::enqueued);
    expect_nothing_counted();
  }
  void expect_nothing_counted() {
    EXPECT_EQ(s().h->lane_waiters.load(), 0u);
    EXPECT_EQ(s().h->room_waiters.load(), 0u);
    EXPECT_EQ(s().procs[s().me_index].lane_parked.load() & 0xFFFFFFFF, 0u);
    EXPECT_EQ(s().procs[s().me_index].room_parked.load() & 0xFFFFFFFF, 0u);
  }
  BrandedId a_job_;
};

// The complete that leaves the only lane empty wakes the producer of a new
// group, whose look gives that lane back and takes it: admitted long
// before its 30 s slice (a lost wake would sleep it out).
TEST_F(EnqueueWaitLane, TheCompleteThatEmptiesALaneWakesAProducerParkedForOne) {
  make_one_lane();
  std::atomic<int> st{-1};
  std::thread producer = park_for_a_lane(st, B, q().mint());
  EXPECT_EQ(q().snapshot().producers_parked, 1u) << "a producer parked for a lane is a producer parked";
  const std::uint32_t seq = s().h->lane_seq.load();
  empty_a();
  EXPECT_NE(s().h->lane_seq.load(), seq) << "the complete made no wake";
  ASSERT_TRUE(answered_in_time(producer, st)) << "the lane was empty and the producer asleep";
  EXPECT_EQ(EnqueueStatus(st.load()), EnqueueStatus::enqueued);
  expect_nothing_counted();
  Lease l;
  ASSERT_TRUE(q().claim(l, kLease));
  EXPECT_EQ(l.group, B);
}

// A complete that leaves its lane with work (or a free that is no
// complete of the last job) makes no lane wake: a wake is a look at every
// lane record, and a producer woken at every free would spend a CPU.
TEST_F(EnqueueWaitLane, ACompleteThatLeavesItsLaneWithWorkMakesNoLaneWake) {
  make_one_lane();
  ASSERT_EQ(q().enqueue(A, q().mint(), "x"), EnqueueStatus::enqueued);
  std::atomic<int> st{-1};
  std::thread producer = park_for_a_lane(st, B, q().mint(), 3s);
  const std::uint32_t seq = s().h->lane_seq.load();
  empty_a();  // one of A's two
  EXPECT_EQ(s().h->lane_seq.load(), seq) << "a lane with work left woke a producer parked for one";
  producer.join();
  EXPECT_EQ(EnqueueStatus(st.load()), EnqueueStatus::lanes_full) << "past its timeout";
  expect_nothing_counted();
}

// A fail that sends the lane's last job to the dead letters (a park step,
// no free) wakes the producer too.
TEST_F(EnqueueWaitLane, AFailThatDeadLettersTheLanesLastJobWakesAProducerParkedForOne) {
  make_one_lane();
  std::atomic<int> st{-1};
  std::thread producer = park_for_a_lane(st, B, q().mint());
  const std::uint32_t seq = s().h->lane_seq.load();
  Lease l;
  ASSERT_TRUE(q().claim(l, kLease));
  FailOptions f;
  f.max_attempts = 1;
  ASSERT_EQ(q().fail(l.id, l.token, f), FailStatus::dead);
  EXPECT_NE(s().h->lane_seq.load(), seq) << "the dead-lettering made no wake";
  expect_admitted(producer, st);
}

// A lane held by a setting alone (a group paused, limited or weighted
// before it had a job, or left with no job since) is given back once the
// setting is cleared: the call that clears it wakes a producer parked for
// a lane, as the complete of a lane's last job does.
class EnqueueWaitLaneSetting : public EnqueueWaitLane {
 protected:
  void expect_clearing_wakes(const std::function<LaneStatus()>& set, const std::function<LaneStatus()>& clear) {
    make_lanes(1);
    ASSERT_EQ(set(), LaneStatus::ok);  // A holds the one lane, with no job
    ASSERT_EQ(q().enqueue(B, q().mint(), "x"), EnqueueStatus::lanes_full);
    std::atomic<int> st{-1};
    std::thread producer = park_for_a_lane(st, B, q().mint());
    ASSERT_EQ(clear(), LaneStatus::ok);
    expect_admitted(producer, st);
  }
};

TEST_F(EnqueueWaitLaneSetting, AResumeOfAnEmptyLaneWakesAProducerParkedForOne) {
  expect_clearing_wakes([&] { return q().pause(A); }, [&] { return q().resume(A); });
}

TEST_F(EnqueueWaitLaneSetting, AClearedLimitOfAnEmptyLaneWakesAProducerParkedForOne) {
  expect_clearing_wakes([&] { return q().set_limit(A, 2); }, [&] { return q().clear_limit(A); });
}

TEST_F(EnqueueWaitLaneSetting, AWeightSetBackTo1OfAnEmptyLaneWakesAProducerParkedForOne) {
  expect_clearing_wakes([&] { return q().set_weight(A, 3); }, [&] { return q().set_weight(A, 1); });
}

// A lane left empty by a waker that made no wake (here: its load of
// room_waiters made to read 0; in life, a waker killed before its wake, a
// husk's pop, settings put back) is found by the next sweep pass, which
// wakes the producer for each idle lane it sees.
TEST_F(EnqueueWaitLane, TheSweepWakesAProducerParkedForALaneWhenItSeesOneIdle) {
  make_one_lane();
  std::atomic<int> st{-1};
  std::thread producer = park_for_a_lane(st, B, q().mint());
  const std::uint32_t seq = s().h->lane_seq.load();
  s().h->room_waiters.store(0);  // the completer does not see the producer
  empty_a();
  s().h->room_waiters.store(1);
  EXPECT_EQ(s().h->lane_seq.load(), seq) << "(the test's premise: no wake from the complete)";
  q().tick();  // a sweep pass
  EXPECT_NE(s().h->lane_seq.load(), seq) << "the sweep saw the idle lane and made no wake";
  expect_admitted(producer, st);
}

// A lane that looks idle but cannot be given back (its strays head names a
// node: here a release stopped between linking its job into the strays and
// the lane word CAS that flags them) is no lane for a producer parked for
// one: a sweep pass that sees it makes no wake. It woke the producer at
// every pass, for a look that gave nothing back, before 2026-12-07. Once
// the release goes on, the lane has its job back; the complete that
// empties it wakes the producer as ever.
TEST_F(EnqueueWaitLane, TheSweepMakesNoWakeForALaneThatLooksIdleButCannotBeGivenBack) {
  make_one_lane();
  Lease l;
  ASSERT_TRUE(q().claim(l, kLease));
  ASSERT_EQ(l.id, a_job_);
  test::StoppedCall<AckStatus> mover("strays.linked", [&] { return q().release(l.id, l.token); });
  std::uint32_t lane_a = 0;
  ASSERT_EQ(detail::lane_find(s(), detail::group_key(A), false, lane_a), detail::LaneFind::found);
  ASSERT_TRUE(detail::may_be_idle(s(), lane_a, detail::lane_load(s(), lane_a))) << "(premise: A looks idle)";
  ASSERT_FALSE(detail::lane_try_reclaim(s(), lane_a)) << "(premise: and cannot be given back)";
  std::atomic<int> st{-1};
  std::thread producer = park_for_a_lane(st, B, q().mint());
  const std::uint32_t seq = s().h->lane_seq.load();
  for (int pass = 0; pass < 3; ++pass) q().tick();
  EXPECT_EQ(s().h->lane_seq.load(), seq) << "a sweep pass woke the producer for a lane it cannot have";
  EXPECT_EQ(st.load(), -1);
  ASSERT_EQ(mover.go(), AckStatus::ok);
  empty_a();
  expect_admitted(producer, st);
}

// The same lane, left looking idle by a complete: A's first job is being
// released (stopped between linking it into the strays and the CAS that
// flags them) when A's second is completed. That complete makes no lane
// wake (it woke the producer for a look that gave nothing back before
// 2026-12-08); the complete that empties the lane once the release is done
// wakes it as ever.
TEST_F(EnqueueWaitLane, ACompleteThatLeavesALaneIdleButNotGivableMakesNoLaneWake) {
  make_one_lane();
  const BrandedId second = q().mint();
  ASSERT_EQ(q().enqueue(A, second, "x"), EnqueueStatus::enqueued);
  Lease first;
  ASSERT_TRUE(q().claim(first, kLease));
  ASSERT_EQ(first.id, a_job_);
  test::StoppedCall<AckStatus> mover("strays.linked", [&] { return q().release(first.id, first.token); });
  std::atomic<int> st{-1};
  std::thread producer = park_for_a_lane(st, B, q().mint());
  Lease l;
  ASSERT_TRUE(q().claim(l, kLease));
  ASSERT_EQ(l.id, second);
  const std::uint32_t seq = s().h->lane_seq.load();
  ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  std::uint32_t lane_a = 0;
  ASSERT_EQ(detail::lane_find(s(), detail::group_key(A), false, lane_a), detail::LaneFind::found);
  ASSERT_TRUE(detail::may_be_idle(s(), lane_a, detail::lane_load(s(), lane_a))) << "(premise: A looks idle)";
  EXPECT_EQ(s().h->lane_seq.load(), seq) << "the complete woke the producer for a lane it cannot have";
  EXPECT_EQ(st.load(), -1);
  ASSERT_EQ(mover.go(), AckStatus::ok);
  empty_a();
  expect_admitted(producer, st);
}

// A wake is of one producer. One woken that leaves without the lane (its
// id was enqueued meanwhile in the default group, so it answers duplicate)
// passes the wake on: the producer parked after it takes the lane long
// before its 30 s slice.
TEST_F(EnqueueWaitLane, AWokenProducerThatLeavesWithoutTheLanePassesTheWakeOn) {
  make_one_lane();
  const BrandedId first_id = q().mint();
  const BrandedId C = BrandedId::make("CCC", 1);
  std::atomic<int> first{-1}, second{-1};
  std::thread t1 = park_for_a_lane(first, B, first_id);  // parked first: woken first (futex order)
  std::thread t2 = park_for_a_lane(second, C, q().mint());
  ASSERT_EQ(q().enqueue(*BrandedId::parse(kDefaultGroup), first_id, "x"), EnqueueStatus::enqueued);  // no lane taken
  empty_a();
  const bool done = eventually([&] { return first.load() != -1 && second.load() != -1; }, 10s);
  t1.join();
  t2.join();
  ASSERT_TRUE(done) << "the lane was empty and a producer asleep";
  EXPECT_EQ(EnqueueStatus(first.load()), EnqueueStatus::duplicate);
  EXPECT_EQ(EnqueueStatus(second.load()), EnqueueStatus::enqueued);
  expect_nothing_counted();
}

// Past its timeout it says lanes_full and leaves nothing counted; a
// timeout of 0 is one try.
TEST_F(EnqueueWaitLane, PastItsTimeoutItSaysLanesFullAndLeavesNothing) {
  make_one_lane();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(q().enqueue_wait(B, q().mint(), "x", 200ms), EnqueueStatus::lanes_full);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, 200ms);
  EXPECT_EQ(q().enqueue_wait(B, q().mint(), "x", 0ms), EnqueueStatus::lanes_full);
  EXPECT_NE(s().h->lane_park_until.load(), 0u) << "the 200 ms wait never parked";
  expect_nothing_counted();
}

// A producer killed while parked for a lane is taken out of both counts
// (lane_waiters, room_waiters) by drop_parked, by its incarnation.
TEST_F(EnqueueWaitLane, DropParkedTakesOutTheProducersParkedForALane) {
  make_one_lane();
  detail::ProcRecord& p = s().procs[s().proc_count - 1];  // a record nobody holds
  s().h->lane_waiters.store(4);
  s().h->room_waiters.store(6);
  p.room_parked.store((std::uint64_t(8) << 32) | 3);  // incarnation 8: three producers, two of them for a lane
  p.lane_parked.store((std::uint64_t(8) << 32) | 2);
  detail::drop_parked(s(), p, 7);  // another incarnation's verdict: nothing
  EXPECT_EQ(s().h->lane_waiters.load(), 4u);
  detail::drop_parked(s(), p, 8);
  EXPECT_EQ(s().h->lane_waiters.load(), 2u);
  EXPECT_EQ(s().h->room_waiters.load(), 3u);
  EXPECT_EQ(p.lane_parked.load(), std::uint64_t(8) << 32);
  s().h->lane_waiters.store(0);
  s().h->room_waiters.store(0);
}

// Lane records in the free state: what a look takes before it reclaims.
std::uint32_t free_records(detail::Segment& s) {
  std::uint32_t n = 0;
  for (std::uint32_t i = 1; i < s.lane_count; ++i)
    n += detail::LaneWord::state(detail::lane_load(s, i)) == detail::LaneState::free;
  return n;
}

// Two enqueues of one new group create its lane at once, each with a record
// of its own; the one that loses gives its record back (release_record).
// A producer parked for a lane meanwhile is woken for it: the record was
// announced by nothing, and no sweep pass looked at free records, so it
// slept its slice out (found in review).
TEST_F(EnqueueWaitLane, ARecordGivenBackByACreatorThatLostWakesAProducerParkedForALane) {
  make_lanes(3);
  a_job_ = q().mint();
  ASSERT_EQ(q().enqueue(A, a_job_, "x"), EnqueueStatus::enqueued);  // A: one lane, with work
  const BrandedId G = BrandedId::make("GGG", 1);
  test::FailpointGate gate;  // both creators held with a record taken
  detail::failpoint_call("lane.record_taken", test::FailpointGate::hold, &gate);
  std::atomic<int> sx{-1}, sy{-1};
  std::thread x([&] {
    test::FailpointGate::arm();
    sx = int(q().enqueue(G, q().mint(), "x"));
  });
  std::thread y([&] {
    test::FailpointGate::arm();
    sy = int(q().enqueue(G, q().mint(), "y"));
  });
  ASSERT_TRUE(eventually([&] { return gate.held.load() == 2; }, 10s));
  EXPECT_EQ(free_records(s()), 0u) << "(the premise: both other records being created)";
  std::atomic<int> st{-1};
  std::thread p = park_for_a_lane(st, B, q().mint());
  gate.release();
  x.join();
  y.join();
  detail::failpoint_call("lane.record_taken", nullptr, nullptr);
  EXPECT_EQ(EnqueueStatus(sx.load()), EnqueueStatus::enqueued);
  EXPECT_EQ(EnqueueStatus(sy.load()), EnqueueStatus::enqueued);
  EXPECT_TRUE(answered_in_time(p, st, [&] { empty_a(); })) << "a lane record free, and the producer parked for one asleep";
  EXPECT_EQ(EnqueueStatus(st.load()), EnqueueStatus::enqueued);
}

// A producer killed while parked for a lane is taken out of both counts
// (lane_waiters and room_waiters) by the sweep that judges its process
// dead, and the next producer parked for a lane is still woken.
TEST_F(EnqueueWaitLane, AProducerKilledWhileParkedForALaneIsTakenOutOfBothCounts) {
  make_one_lane();
  RawSegment raw(seg());
  const auto& lanes = raw.header().lane_waiters;
  const auto& room = raw.header().room_waiters;
  test::kill_a_parked_child(
      seg(), [](Queue& r) { r.enqueue_wait(B, r.mint(), "child", 60s); }, [&] { return lanes.load() == 1; });
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(lanes.load(), 1u) << "killed parked: nothing has judged it yet";
  EXPECT_EQ(room.load(), 1u);
  // Sweeps on the segment's clock: each pass judges every record whose
  // verdict is older than recovery_ms / 2.
  for (int pass = 0; pass < 64 && (lanes.load() != 0 || room.load() != 0); ++pass) {
    q().advance_clock(q().config().recovery_ms);
    (void)q().tick();
  }
  EXPECT_EQ(lanes.load(), 0u) << "the dead producer is still counted parked for a lane";
  EXPECT_EQ(room.load(), 0u);
  std::atomic<int> st{-1};
  std::thread producer = park_for_a_lane(st, BrandedId::make("CCC", 1), q().mint());
  empty_a();
  expect_admitted(producer, st);
}

// A sweep pass over many free records (or idle lanes) wakes one producer
// parked for a lane, not one a record: the woken one passes a wake on as
// it leaves. One a record made 4,096 wakes in one pass, a locked increment
// and a system call each, for a count nobody could find (found in review).
TEST_F(EnqueueWaitLane, ASweepPassWakesOnceForManyFreeRecords) {
  make_lanes(4096);
  s().h->lane_waiters.store(1);  // a producer parked for a lane, or a count left
  s().h->lane_park_until.store(detail::monotonic_us() / 1000 + 60000);
  const std::uint32_t seq = s().h->lane_seq.load();
  q().tick();
  const std::uint32_t wakes = s().h->lane_seq.load() - seq;
  s().h->lane_waiters.store(0);
  EXPECT_GE(wakes, 1u) << "a free record, and no wake";
  EXPECT_LE(wakes, 2u) << "one wake a free record";
}

// A free record that nothing announced (here: made so by hand, as a
// creator killed before its wake would leave it) is announced by the next
// sweep pass.
TEST_F(EnqueueWaitLane, TheSweepWakesAProducerParkedForALaneWhenItSeesAFreeRecord) {
  make_one_lane();
  std::atomic<int> st{-1};
  std::thread producer = park_for_a_lane(st, B, q().mint());
  // B waits for a lane while A's, the only one, is empty: A's complete is
  // not seen (room_waiters read 0), then its lane is reclaimed by hand, as
  // a creator that took it and then gave its record back unannounced.
  s().h->room_waiters.store(0);
  empty_a();
  s().h->room_waiters.store(1);
  std::uint32_t lane = 0;
  for (std::uint32_t i = 1; i < s().lane_count; ++i)
    if (detail::LaneWord::state(detail::lane_load(s(), i)) == detail::LaneState::live) lane = i;
  ASSERT_NE(lane, 0u);
  const std::uint32_t waiters = s().h->lane_waiters.load();
  s().h->lane_waiters.store(0);  // (so that the reclaim below wakes nobody)
  ASSERT_TRUE(detail::lane_try_reclaim(s(), lane));
  s().h->lane_waiters.store(waiters);
  ASSERT_EQ(free_records(s()), 1u);
  const std::uint32_t seq = s().h->lane_seq.load();
  q().tick();
  EXPECT_NE(s().h->lane_seq.load(), seq) << "the sweep saw a free record and made no wake";
  expect_admitted(producer, st);
}

// A producer whose group's two directory buckets are held by groups with
// work (lanes_full for want of directory room, not of a lane) waits for a
// lane at first (its look finds no record, and stops there), and a wake
// may go to it: its look then gives the idle lane back, takes the record,
// finds no room in the directory and gives the record back. It kept the
// wake, and the record went back unannounced: the producer that could use
// it slept its slice out (found in review). Now the record's return wakes
// a producer, it passes its own wake on, and while its answer says its
// buckets are full it polls every 20 ms, counted for no lane wake; it gets
// in once a group of its buckets goes idle.
TEST_F(EnqueueWaitLane, AProducerWhoseDirectoryBucketsAreFullLeavesTheLaneToOneThatCanUseIt) {
  make_lanes(9);
  // Groups of namespace GRP by the buckets they hash to: 8 fillers in g's
  // two buckets (the directory's 8 ways for g), and two groups x and h
  // whose buckets are apart from g's and from each other's.
  const std::uint32_t kind = detail::kind_code("GRP");
  const auto buckets = [&](std::uint64_t sf) {
    const std::uint64_t hash = detail::group_hash(kind, sf, s().seed);
    std::uint64_t b1 = hash & s().dir_mask, b2 = detail::mix64(hash) & s().dir_mask;
    if (b2 == b1) b2 = b1 ^ 1;
    return std::pair<std::uint64_t, std::uint64_t>(std::min(b1, b2), std::max(b1, b2));
  };
  const std::uint64_t g_sf = 1;
  const auto gb = buckets(g_sf);
  const auto apart = [&](std::pair<std::uint64_t, std::uint64_t> b) {
    return b.first != gb.first && b.first != gb.second && b.second != gb.first && b.second != gb.second;
  };
  std::vector<std::uint64_t> fillers;
  std::uint64_t x_sf = 0, h_sf = 0;
  for (std::uint64_t sf = 2; sf < 10000000 && (fillers.size() < 8 || !x_sf || !h_sf); ++sf) {
    const auto b = buckets(sf);
    if (b == gb && fillers.size() < 8)
      fillers.push_back(sf);
    else if (apart(b) && !x_sf)
      x_sf = sf;
    else if (apart(b) && !h_sf && buckets(x_sf) != b)
      h_sf = sf;
  }
  ASSERT_EQ(fillers.size(), 8u);
  ASSERT_NE(x_sf, 0u);
  ASSERT_NE(h_sf, 0u);
  for (std::uint64_t sf : fillers)
    ASSERT_EQ(q().enqueue(BrandedId::make("GRP", sf), q().mint(), "f"), EnqueueStatus::enqueued);
  const BrandedId X = BrandedId::make("GRP", x_sf);
  ASSERT_EQ(q().enqueue(X, q().mint(), "x"), EnqueueStatus::enqueued);  // every lane held
  ASSERT_EQ(free_records(s()), 0u);
  // Both parked for a lane (no record free, none idle: that is what a look
  // finds first), g's producer first, so that a wake goes to it first.
  std::atomic<int> sg{-1}, sh{-1};
  std::thread pg = park_for_a_lane(sg, BrandedId::make("GRP", g_sf), q().mint());
  std::thread ph = park_for_a_lane(sh, BrandedId::make("GRP", h_sf), q().mint());
  std::vector<Lease> held;
  for (int i = 0; i < 9; ++i) {
    Lease l;
    ASSERT_TRUE(q().claim(l, kLease));
    held.push_back(l);
  }
  for (auto it = held.begin(); it != held.end(); ++it)
    if (it->group == X) {
      ASSERT_EQ(q().complete(it->id, it->token), AckStatus::ok);  // x's lane idle: one lane wake
      held.erase(it);
      break;
    }
  const bool h_in = eventually([&] { return sh.load() != -1; }, 10s);
  EXPECT_TRUE(h_in) << "a lane idle, and the producer that could use it asleep";
  EXPECT_EQ(EnqueueStatus(sh.load()), EnqueueStatus::enqueued);
  EXPECT_EQ(sg.load(), -1) << "g got in with its buckets full";
  // h's job done: its lane idle, g's producer woken for it; its look gives
  // that lane back, finds its buckets full and gives the record back. From
  // then on it polls, counted for no lane wake: parked for a lane instead,
  // the wake its own look's give-back makes came back to it at every look,
  // a thousand walks a second (the lane word moved at each).
  Lease hl;
  ASSERT_TRUE(q().claim(hl, kLease));
  ASSERT_EQ(q().complete(hl.id, hl.token), AckStatus::ok);
  ASSERT_TRUE(eventually([&] { return free_records(s()) == 1; })) << "(premise: h's lane given back, record free)";
  // Over three of g's looks (each takes the free record, at step point
  // lane.record_taken, and gives it back), no lane wake.
  std::atomic<int> looks{0};
  const std::uint32_t seq = s().h->lane_seq.load();
  detail::failpoint_call("lane.record_taken", count_hits, &looks);
  const bool looked = eventually([&] { return looks.load() >= 3; }, 10s);
  detail::failpoint_call("lane.record_taken", nullptr, nullptr);
  EXPECT_TRUE(looked) << "g's producer stopped looking";
  EXPECT_EQ(s().h->lane_seq.load(), seq) << "g's producer woke itself for a lane it cannot use";
  EXPECT_EQ(s().h->lane_waiters.load(), 0u);
  // The fillers' jobs done: their lanes idle, g's look reclaims one of them.
  for (const Lease& l : held) ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  const bool g_in = eventually([&] { return sg.load() != -1; }, 10s);
  pg.join();
  ph.join();
  EXPECT_TRUE(g_in) << "a group of its buckets idle, and g's producer never got in";
  EXPECT_EQ(EnqueueStatus(sg.load()), EnqueueStatus::enqueued);
  expect_nothing_counted();
}

// Producers and a consumer through a queue of 4 slots: every enqueue_wait
// admits its job, and none sleeps a slice out (a free that found nobody
// counted while a producer was about to sleep, a wake lost to another
// producer that gave up: each would leave a producer asleep up to 30 s
// with room in the queue).
TEST_F(EnqueueWait, ProducersThroughASmallQueueAreEachWokenByAFree) {
  make(4);
  constexpr int kProducers = 3, kEach = 300;
  std::atomic<int> bad{0}, admitted{0};
  std::atomic<std::int64_t> longest_us{0};
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      const BrandedId g = BrandedId::make("GRP", std::uint64_t(p + 1));
      for (int i = 0; i < kEach; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        const EnqueueStatus st = q().enqueue_wait(g, q().mint(), "j", 60s);
        const std::int64_t us =
            std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() - t0).count();
        std::int64_t l = longest_us.load();
        while (us > l && !longest_us.compare_exchange_weak(l, us)) {
        }
        if (st == EnqueueStatus::enqueued)
          ++admitted;
        else
          ++bad;
      }
    });
  }
  int done = 0;
  Lease l;
  while (done < kProducers * kEach) {
    if (!q().claim_wait(l, kLease, 20s)) break;
    ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
    ++done;
  }
  for (auto& t : producers) t.join();
  EXPECT_EQ(done, kProducers * kEach);
  EXPECT_EQ(admitted.load(), kProducers * kEach);
  EXPECT_EQ(bad.load(), 0);
  EXPECT_LT(longest_us.load(), 10'000'000) << "a producer slept through the frees";
  EXPECT_EQ(s().h->room_waiters.load(), 0u);
}

// A count left in room_waiters with every producer's sleep over (a producer
// killed between its two increments, which no sweep can see) costs a free
// nothing: past room_park_until no wake is made. Before it, one is.
TEST_F(EnqueueWait, ACountLeftPastEveryProducersSleepMakesNoWake) {
  make(64);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(q().enqueue(A, q().mint(), "x"), EnqueueStatus::enqueued);
  const std::uint32_t seq0 = s().h->room_seq.load();
  free_one();
  EXPECT_EQ(s().h->room_seq.load(), seq0) << "a wake with nobody counted";
  s().h->room_waiters.store(1);  // left by nobody we can find
  s().h->room_park_until.store(0);
  EXPECT_EQ(q().snapshot().producers_parked, 0u);
  free_one();
  EXPECT_EQ(s().h->room_seq.load(), seq0) << "a wake for nobody";
  s().h->room_park_until.store(detail::monotonic_us() / 1000 + 60000);  // a sleep that may not be over
  EXPECT_EQ(q().snapshot().producers_parked, 1u);
  free_one();
  EXPECT_NE(s().h->room_seq.load(), seq0);
  s().h->room_waiters.store(0);
}

// A producer held between its last look (full) and its futex call while a
// consumer frees a slot: the free moved room_seq on, so its futex wait
// returns at once and it takes the slot, rather than sleeping a 30 s slice
// with room in the queue.
TEST_F(EnqueueWait, AFreeWhileAProducerIsAboutToSleepIsNotLost) {
  make();
  fill();
  test::FailpointGate h;
  detail::failpoint_call("room.sleep", test::FailpointGate::hold, &h);
  std::atomic<int> st{-1};
  std::thread producer([&] {
    test::FailpointGate::arm();
    st = int(q().enqueue_wait(B, q().mint(), "x", 50s));
  });
  ASSERT_TRUE(eventually([&] { return h.held.load() == 1; }, 10s)) << "never got to its sleep";
  EXPECT_EQ(s().h->room_waiters.load(), 1u);
  free_one();
  h.release();
  const bool soon = eventually([&] { return st.load() != -1; }, 10s);
  producer.join();
  detail::failpoint_call("room.sleep", nullptr, nullptr);
  EXPECT_TRUE(soon) << "it slept out its slice with a slot free";
  EXPECT_EQ(EnqueueStatus(st.load()), EnqueueStatus::enqueued);
}

// A producer SIGKILLed while parked: the sweep that finds it dead takes its
// count out of room_waiters (else every free would make a futex wake while
// other producers park), and leaves the count of a producer of ours parked
// meanwhile, which the next free wakes.
TEST_F(EnqueueWait, AProducerKilledWhileParkedIsTakenOutByTheSweep) {
  make(8, 200);
  fill();
  RawSegment raw(seg());
  const auto& waiters = raw.header().room_waiters;
  const std::string name = seg();
  ForkedChild parked([&] {
    auto r = Queue::open(name);
    if (!r) return 3;
    r->enqueue_wait(B, r->mint(), "child", 60s);
    return 0;
  }, 120);
  ASSERT_TRUE(eventually([&] { return waiters.load() == 1; })) << "the child never parked";
  std::uint32_t child_rec = ~0U;
  for (std::uint32_t i = 0; i < raw.header().proc_capacity; ++i)
    if ((raw.proc(i).owner.load() & 0xFFFFFFFF) == std::uint64_t(parked.pid())) child_rec = i;
  ASSERT_NE(child_rec, ~0U);
  EXPECT_EQ(record_count(child_rec), 1u);
  parked.kill_now();
  parked.wait();
  ASSERT_TRUE(parked.signaled()) << parked.describe();
  EXPECT_EQ(waiters.load(), 1u) << "killed parked: nothing has judged it yet";

  const BrandedId id = q().mint();
  std::atomic<int> st{-1};
  std::thread producer([&] { st = int(q().enqueue_wait(B, id, "ours", 30s)); });
  ASSERT_TRUE(eventually([&] { return waiters.load() == 2; })) << "our producer never parked";
  const bool dropped = eventually([&] {
    q().advance_clock(200);
    q().tick();
    return record_count(child_rec) == 0;
  }, 10s);
  EXPECT_TRUE(dropped) << "the dead child's record still counts it";
  // Ours wakes every 100 ms of real time and parks again; counted before
  // its record and taken out of its record first, "room_waiters 1 while our
  // record counts 1" is seen only with the dead one out, and ours in.
  const std::uint32_t our_rec = s().me_index;
  EXPECT_TRUE(eventually([&] {
    const auto a = record_count(our_rec);
    const auto w = waiters.load();
    return a == 1 && w == 1 && record_count(our_rec) == 1;
  })) << "room_waiters " << waiters.load();
  EXPECT_EQ(st.load(), -1);
  free_one();
  producer.join();
  EXPECT_EQ(EnqueueStatus(st.load()), EnqueueStatus::enqueued);
  EXPECT_TRUE(q().job(id).has_value());
  EXPECT_EQ(waiters.load(), 0u);
}

// A producer killed while parked, and no sweep yet: the next process to
// attach takes its record (the only one free) and its count with it.
TEST_F(EnqueueWait, AnAttachThatTakesAKilledParkedProducersRecordUncountsIt) {
  make(8, 60000, 2);
  fill();
  const auto& waiters = s().h->room_waiters;
  test::kill_a_parked_child(
      seg(), [](Queue& r) { r.enqueue_wait(B, r.mint(), "child", 60s); }, [&] { return waiters.load() == 1; });
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(waiters.load(), 1u);
  test::attach_a_child(seg());  // takes the dead child's record: no other is free
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(waiters.load(), 0u) << "the dead producer is still counted parked";
}

// drop_parked takes a judged owner's producers out as it does its
// consumers: only under the incarnation judged, once, never below 0.
TEST_F(EnqueueWait, DropParkedTakesOutTheProducersOfTheIncarnationJudgedDead) {
  make();
  detail::ProcRecord& p = s().procs[s().proc_count - 1];  // a record nobody holds
  s().h->room_waiters.store(5);
  s().h->waiters.store(1);
  p.room_parked.store((std::uint64_t(8) << 32) | 2);  // incarnation 8's owner parked two producers
  p.parked.store((std::uint64_t(8) << 32) | 1);       // and one consumer
  detail::drop_parked(s(), p, 7);
  EXPECT_EQ(s().h->room_waiters.load(), 5u);
  detail::drop_parked(s(), p, 8);
  EXPECT_EQ(s().h->room_waiters.load(), 3u);
  EXPECT_EQ(s().h->waiters.load(), 0u);
  EXPECT_EQ(p.room_parked.load(), std::uint64_t(8) << 32);
  detail::drop_parked(s(), p, 8);
  EXPECT_EQ(s().h->room_waiters.load(), 3u);
  p.room_parked.store((std::uint64_t(9) << 32) | 1000);  // scribbled
  detail::drop_parked(s(), p, 9);
  EXPECT_EQ(s().h->room_waiters.load(), 0u);
}

// A wake is one a free, and the producer it wakes may leave without the
// slot on an answer other than enqueued or full: here `duplicate` (two
// producers offer one idempotent id; a mirror's refusals are the same).
// It passes the wake on; before, the third producer slept out its 30 s
// slice with the slot free (found in review). Each producer is started
// once the one before it sleeps in the futex system call, so that the
// futex's queue (first in, first woken) holds them in this order, which
// made the fault show.
TEST_F(EnqueueWait, AWokenProducerThatLeavesWithoutTheSlotPassesTheWakeOn) {
  make();
  fill();
  const BrandedId same = q().mint(), other = q().mint();
  const auto& waiters = s().h->room_waiters;
  std::atomic<int> st1{-1}, st2{-1}, st3{-1};
  const auto park = [&](std::atomic<int>& st, BrandedId g, BrandedId id, std::uint32_t n) {
    std::atomic<pid_t> tid{0};
    std::thread t([&st, &tid, g, id, this] {
      tid = pid_t(::syscall(SYS_gettid));
      st = int(q().enqueue_wait(g, id, "x", 50s));
    });
    EXPECT_TRUE(eventually([&] { return waiters.load() == n && tid.load() != 0 && in_futex_wait(tid.load()); }))
        << "producer " << n << " never slept in the futex";
    return t;
  };
  std::thread p1 = park(st1, B, same, 1);
  std::thread p3 = park(st3, BrandedId::make("CCC", 1), same, 2);
  std::thread p2 = park(st2, BrandedId::make("DDD", 1), other, 3);
  std::vector<Lease> held;  // leases on `same`, kept so that it stays live
  const auto free_other = [&] {
    for (;;) {
      Lease l;
      ASSERT_TRUE(q().claim(l, kLease));
      if (l.id == same) {
        held.push_back(l);
        continue;
      }
      ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
      return;
    }
  };
  free_other();
  ASSERT_TRUE(eventually([&] { return st1.load() != -1 || st3.load() != -1 || st2.load() != -1; }, 10s));
  free_other();
  const bool all = eventually([&] { return st1.load() != -1 && st2.load() != -1 && st3.load() != -1; }, 10s);
  p1.join();
  p3.join();
  p2.join();
  EXPECT_TRUE(all) << "a slot is free and a producer sleeps its slice out";
  // `same` admitted once and refused once as a duplicate; `other` admitted.
  EXPECT_EQ(int(st1.load() == int(EnqueueStatus::enqueued)) + int(st3.load() == int(EnqueueStatus::enqueued)), 1);
  EXPECT_EQ(int(st1.load() == int(EnqueueStatus::duplicate)) + int(st3.load() == int(EnqueueStatus::duplicate)), 1);
  EXPECT_EQ(EnqueueStatus(st2.load()), EnqueueStatus::enqueued);
}

// "A timeout of 0 is one try": it never parks. With the give-up time
// rounded up to the millisecond and the clock read after the try rounded
// down, it counted itself parked and slept up to 1 ms (found in review).
int g_sleeps = 0;
void count_sleep(void*) { ++g_sleeps; }
TEST_F(EnqueueWait, ATimeoutOf0IsOneTryAndNeverParks) {
  make();
  fill();
  detail::failpoint_call("room.sleep", count_sleep, nullptr);
  g_sleeps = 0;
  const std::uint64_t until_before = s().h->room_park_until.load();
  for (int i = 0; i < 20; ++i) EXPECT_EQ(q().enqueue_wait(B, q().mint(), "x", 0ms), EnqueueStatus::full);
  detail::failpoint_call("room.sleep", nullptr, nullptr);
  EXPECT_EQ(g_sleeps, 0) << "a 0 ms enqueue_wait parked and slept";
  EXPECT_EQ(s().h->room_park_until.load(), until_before) << "it counted itself parked";
}

// A repair that frees slots (a husk here) wakes parked producers as it
// does parked consumers; it woke only consumers, and a producer slept its
// 30 s slice out with a slot free (found in review).
TEST_F(EnqueueWait, ARepairThatFreesASlotWakesAParkedProducer) {
  make();
  fill();
  const detail::Word128 w = detail::slot_load(s(), 0);
  std::atomic<int> st{-1};
  std::thread producer([&] { st = int(q().enqueue_wait(B, q().mint(), "x", 50s)); });
  ASSERT_TRUE(eventually([&] { return s().h->room_waiters.load() == 1; }));
  // Slot 0's word scribbled to a state no transition writes (fsck:
  // slot-state): the repair frees it. (A husk there would not do: linked in
  // its lane it is a state fsck calls clean, and a repair of a clean segment
  // changes nothing; the next claim pops and frees it.)
  detail::Word128 bad = w;
  bad.lo = (bad.lo & ~15ULL) | 9;  // states are 0..7
  detail::store128_init(s().words[0], bad);
  auto r = q().repair(true);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_TRUE(answered_in_time(producer, st)) << "the repair freed a slot and woke no producer";
  EXPECT_EQ(EnqueueStatus(st.load()), EnqueueStatus::enqueued);
}

// A repair wakes producers parked for a lane as it wakes every other
// parked thread (lanes may be free after it); it woke only those parked
// for a slot at first. Woken, this one looks, finds A's lane still busy,
// and parks again until A's job is done.
TEST_F(EnqueueWaitLane, ARepairWakesAProducerParkedForALane) {
  make_one_lane();
  std::atomic<int> st{-1};
  std::thread producer = park_for_a_lane(st, B, q().mint());
  const std::uint32_t seq = s().h->lane_seq.load();
  // Something for the repair to mend (a repair of a clean segment changes
  // nothing and wakes nobody): A's active count one too high.
  const detail::Word128 lw = detail::lane_load(s(), 1);
  ASSERT_EQ(detail::lane_group(s(), 1), A);
  detail::store128_init(s().lanes[1].word, detail::LaneWord::with_active(lw, detail::LaneWord::active(lw) + 1));
  auto r = q().repair(true);
  ASSERT_TRUE(r) << r.error().message;
  EXPECT_NE(s().h->lane_seq.load(), seq) << "the repair woke no producer parked for a lane";
  EXPECT_TRUE(eventually([&] { return s().h->lane_waiters.load() == 1; })) << "woken, it did not park again";
  empty_a();
  expect_admitted(producer, st);
}

// `full` from the id index (the id's two buckets hold seven live entries
// each: about one insert in 10^9, or a scribble) is no want of slots, and
// a free does not change it: enqueue_wait answers it at once. It waited it
// out, taking a slot and leaving a husk every round until its timeout.
TEST_F(EnqueueWait, AFullIdIndexIsNotWaitedOut) {
  make(64);
  const std::string kind(s().kind, 3);
  const BrandedId target = BrandedId::make(kind, 1000000);
  std::uint64_t sf_target = 0;
  ASSERT_EQ(detail::job_snowflake(s(), target, sf_target), detail::IdCheck::ok);
  const detail::IndexProbe pt = detail::index_probe(s(), sf_target);
  const std::uint64_t x = pt.b1, y = pt.b2(s());
  // Seven ids whose first bucket is x, seven whose first bucket is y.
  int in_x = 0, in_y = 0;
  for (std::uint64_t sf = 1; sf < 2000000 && (in_x < 7 || in_y < 7); ++sf) {
    const std::uint64_t b = detail::index_probe(s(), sf).b1;
    int* n = b == x ? &in_x : b == y ? &in_y : nullptr;
    if (n == nullptr || *n == 7) continue;
    ASSERT_EQ(q().enqueue(A, BrandedId::make(kind, sf), "x"), EnqueueStatus::enqueued);
    ++*n;
  }
  ASSERT_EQ(in_x + in_y, 14);
  ASSERT_EQ(q().enqueue(A, target, "x"), EnqueueStatus::full) << "the index was not full for the target";
  EXPECT_LT(q().snapshot().pending, 64u) << "slots are free";
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(q().enqueue_wait(A, target, "x", 30s), EnqueueStatus::full);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s) << "it waited on a full index";
  EXPECT_EQ(s().h->room_waiters.load(), 0u);
}

// In a table of 64 slots or more, wakes come in batches: a parked producer
// asks to be woken room_batch frees on (32 here, in 4,096 slots), and the
// frees before that count without a system call. Before, each free woke a
// producer, which at a queue kept full parked again at the next job: a
// futex wake a job for the consumer. Frees that stop short of a batch are
// found at the producer's next look, 20 ms on at most.
TEST_F(EnqueueWait, InALargeTableAParkedProducerIsWokenOnceABatchOfFrees) {
  make(4096);
  fill();
  std::atomic<int> st{-1};
  std::thread producer = park_a_producer(st, 32);
  const std::uint32_t want = s().h->room_want.load();
  for (int i = 0; i < 31; ++i) free_one();
  EXPECT_EQ(s().h->room_want.load(), want) << "a wake before the batch was counted";
  EXPECT_LE(std::uint32_t(s().h->room_seq.load() - (want - 32)), 31u);
  EXPECT_TRUE(answered_in_time(producer, st));
  EXPECT_EQ(EnqueueStatus(st.load()), EnqueueStatus::enqueued);
}

// A scribbled room_want (far ahead of room_seq) must not hold back the
// wakes of a table under 64 slots, whose producers wake at every free and
// sleep up to recovery_ms / 2 (30 s here): a distance no park sets wakes,
// and sets the word again. Held as "not yet", every free counted and none
// woke, and nothing set the word back while nobody parked afresh (found in
// review).
TEST_F(EnqueueWait, AScribbledRoomWantDoesNotHoldBackTheWakes) {
  make(8);
  fill();
  std::atomic<int> st{-1};
  std::thread producer = park_a_producer(st, 1);
  s().h->room_want.store(s().h->room_seq.load() + 1000);  // a scribble
  free_one();
  EXPECT_TRUE(answered_in_time(producer, st, [&] { free_one(); })) << "a slot free and the producer asleep";
  EXPECT_EQ(EnqueueStatus(st.load()), EnqueueStatus::enqueued);
}

// In a large table (batches of 32), a freer whose wake is lost (its load of
// room_waiters read 0: here made so) leaves its slot to the sweep: the
// chunk that sees a free slot wakes parked producers at once. Counted
// toward a batch like a free, it made no wake (found in review).
TEST_F(EnqueueWait, TheSweepChunkThatSeesAFreeSlotWakesAParkedProducer) {
  make(4096);
  fill();
  std::atomic<int> st{-1};
  std::thread producer = park_a_producer(st, 32);
  const std::uint32_t want = s().h->room_want.load();
  s().h->room_waiters.store(0);  // the freer does not see the producer
  free_one();
  s().h->room_waiters.store(1);
  const bool found_first = st.load() != -1;  // (a spurious return from its futex wait may find it first)
  q().tick();                                 // a sweep pass over the table
  EXPECT_TRUE(answered_in_time(producer, st));
  EXPECT_EQ(EnqueueStatus(st.load()), EnqueueStatus::enqueued);
  if (!found_first) {
    EXPECT_NE(s().h->room_want.load(), want) << "the chunk that saw the free slot made no wake";
  }
}

}  // namespace
}  // namespace fairlane
