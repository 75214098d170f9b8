// Online recovery: what survivors do about processes that die (or stop)
// holding leases or in the middle of an operation. There is no stop-the-world
// repair: a survivor's claims (a sweep pass every recovery_ms / 2) return the
// leases of dead holders and finish or undo the half-done steps of dead
// threads through their intents; a stopped process is alive and keeps what
// it holds, and nobody waits for it.
//
// Real processes: children forked from the test (forked_child.hpp) open the
// segment themselves, and die by SIGKILL or stop by SIGSTOP at a named step
// (failpoints: this file is linked against fairlane_failpoints, label crash).
// The assertions are about progress and outcomes; time appears only as the
// segment clock (advance_clock) and as generous hang guards. A few
// single-process cases make a second handle look dead through a raw mapping
// (its start time rewritten: same pid, another process).
#include "failpoint_gate.hpp"
#include "forked_child.hpp"
#include "parked_child.hpp"
#include "liveness_lock.hpp"
#include "raw_segment.hpp"
#include "test_support.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <future>
#include <iterator>
#include <latch>
#include <map>
#include <mutex>
#include <optional>
#include <semaphore>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "core.hpp"
#include "failpoint.hpp"
#include "id_index.hpp"
#include "segment.hpp"
#include "util.hpp"

namespace fairlane {
namespace {

using namespace std::chrono_literals;
using test::ForkedChild;
using test::RawSegment;
using test::SharedBlock;
using Clock = std::chrono::steady_clock;

const BrandedId A = BrandedId::make("AAA", 1);
const BrandedId B = BrandedId::make("BBB", 1);
const BrandedId E = BrandedId::make("EEE", 1);  // no lane until a child's enqueue makes it

constexpr std::uint32_t kLongLease = 600'000;

// What a child tells the parent: the leases it took, and how far it got.
struct ChildReport {
  std::atomic<int> stage{0};  // 1: its leases are taken (or its operation done)
  std::atomic<int> leases{0};
  char ids[16][kIdLength + 1] = {};
  std::uint64_t tokens[16] = {};
  std::atomic<int> done{0};   // set after a continued child finished its operation
};

void tell(ChildReport& r, const Lease& l) {
  const int i = r.leases.load();
  if (i >= 16) return;
  std::memcpy(r.ids[i], l.id.str().data(), kIdLength);
  r.tokens[i] = l.token.value;
  r.leases.store(i + 1);
}
BrandedId reported_id(const ChildReport& r, int i) { return *BrandedId::parse(std::string_view(r.ids[i], kIdLength)); }


using test::eventually;
using test::wait_stopped;

std::string show(const FsckReport& r) {
  std::string s;
  for (const auto& i : r.issues) s += "  " + i.invariant + ": " + i.detail + "\n";
  return s;
}

class Recovery : public test::SegmentFixture {
 protected:
  // 64 jobs, 8 lanes; `processes` process records (0: the default).
  void make(std::uint32_t recovery_ms, std::uint32_t processes = 0) {
    QueueOptions o;
    o.jobs = 64;
    o.lanes = 8;
    o.payload_bytes = 32;
    o.recovery_ms = recovery_ms;
    if (processes) o.processes = processes;
    create(o);
  }
  // With make(_, 2): the second process record taken by another handle of
  // this process, so that a child forked now finds none free (its copy of
  // q() is unattached). Reset it to free the record.
  // A child that attaches and is killed at once: it leaves its process
  // record to a dead owner.
  void attach_and_die() {
    const std::string name = seg();
    ForkedChild a([name] {
      auto r = Queue::open(name);
      if (!r) return 3;
      ::raise(SIGKILL);
      return 0;
    }, 60);
    a.wait();
    ASSERT_TRUE(a.signaled()) << a.describe();
  }
  std::optional<Queue> take_the_last_record() {
    auto r = Queue::open(seg());
    EXPECT_TRUE(r) << r.error().message;
    if (!r) return std::nullopt;
    return std::optional<Queue>(std::move(r.value()));
  }
  // A child with an unattached copy says `ready` once it has set up what it
  // tests; the parent then frees a record (`other`), says `freed` and passes
  // the child's retry time on the segment clock. False if the child never
  // said ready (it ended first).
  struct CopySteps {
    std::atomic<int> ready{0}, freed{0};
  };
  bool free_a_record_when_ready(test::ForkedChild& child, CopySteps& steps, std::optional<Queue>& other) {
    if (!test::eventually([&] { return steps.ready.load() != 0 || child.poll(); }, std::chrono::seconds(20)) ||
        steps.ready.load() != 1)
      return false;
    other.reset();
    steps.freed.store(1);
    q().advance_clock(detail::Segment::kCopyRetryMs);  // the child's retry time, passed
    return true;
  }
  std::vector<BrandedId> fill(const BrandedId& g, int n) {
    std::vector<BrandedId> ids;
    for (int i = 0; i < n; ++i) {
      ids.push_back(q().mint());
      EXPECT_EQ(q().enqueue(g, ids.back(), "job " + ids.back().string()), EnqueueStatus::enqueued);
    }
    return ids;
  }
  // Claims (and completes) until nothing is claimable; counts deliveries.
  void claim_all(std::map<BrandedId, int>& got, std::map<BrandedId, std::uint32_t>* attempts = nullptr) {
    Lease l;
    for (int guard = 0; guard < 1000 && q().claim(l, kLongLease); ++guard) {
      ++got[l.id];
      if (attempts) (*attempts)[l.id] = l.attempt;
      EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok) << l.id.str();
    }
  }
  // As claim_all, but each claim waits up to `idle` for a job (one that a
  // sweep pass brings back, a parked one promoted): ends at the first wait
  // that finds none.
  void claim_all_waiting(std::map<BrandedId, int>& got, std::chrono::milliseconds idle = std::chrono::seconds(1)) {
    Lease l;
    for (int guard = 0; guard < 1000 && q().claim_wait(l, kLongLease, idle); ++guard) {
      ++got[l.id];
      EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok) << l.id.str();
    }
  }
  // A child process opens the segment, claims one job and is killed
  // holding its lease. Its pid (0 if it did not get that far: a failure).
  pid_t lease_then_die() {
    SharedBlock<ChildReport> rep;
    const std::string name = seg();
    ForkedChild child([&] {
      auto r = Queue::open(name);
      Lease l;
      if (!r || !r->claim(l, kLongLease)) return 3;
      tell(*rep, l);
      rep->stage.store(1);
      ::raise(SIGKILL);
      return 0;
    }, 60);
    child.wait();
    EXPECT_EQ(rep->stage.load(), 1) << child.describe();
    return rep->stage.load() == 1 ? child.pid() : 0;
  }
  // The intent a claimer killed at claim.taken left (its thread record's
  // three words, and the record's index), as a sweep would read it, and the
  // claimer's pid.
  struct DeadTake {
    std::uint64_t in = 0, lane = 0, pred = 0;
    std::uint32_t record = 0;
    pid_t pid = 0;
  };
  DeadTake take_then_die() {
    const std::string name = seg();
    ForkedChild child([&] {
      auto r = Queue::open(name);
      if (!r) return 3;
      detail::failpoint_arm("claim.taken");
      Lease l;
      r->claim(l, kLongLease);
      return 5;  // not reached: killed at claim.taken
    }, 60);
    child.wait();
    EXPECT_TRUE(child.signaled() && WTERMSIG(child.status()) == SIGKILL) << child.describe();
    detail::Segment& s = detail::QueueAccess::segment(q());
    DeadTake d;
    for (std::uint32_t i = 0; i < s.thread_count; ++i)
      if (const std::uint64_t v = s.threads[i].intent.load()) {
        d = {v, s.threads[i].intent_lane.load(), s.threads[i].intent_pred.load(), i, 0};
      }
    d.pid = child.pid();
    EXPECT_NE(d.in, 0U) << "the dead claimer left no intent";
    return d;
  }
  // A child process opens the segment, arms failpoint `point` and runs
  // `op`, which reaches it: the child is killed there. False (a failure
  // recorded) if it ended any other way.
  template <class Op>
  bool killed_at(const char* point, Op op) {
    const std::string name = seg();
    ForkedChild child([&] {
      auto r = Queue::open(name);
      if (!r) return 3;
      detail::failpoint_arm(point);
      op(*r);
      return 5;  // not reached: killed at the point
    }, 60);
    child.wait();
    const bool killed = child.signaled() && WTERMSIG(child.status()) == SIGKILL;
    EXPECT_TRUE(killed) << point << ": " << child.describe();
    return killed;
  }
  void expect_clean() {
    q().tick();
    const FsckReport r = q().fsck();
    EXPECT_TRUE(r.clean()) << show(r);
    const Snapshot s = q().snapshot();
    for (const LaneInfo& li : s.lanes) EXPECT_EQ(li.active, 0U) << li.group.str();
  }
  // A queue of one slot whose one job was leased by a child that is now
  // stopped in fail(`fo`) at fail.planned (its check made), and whose lease
  // then expired: the job was delivered again here and completed, and the
  // slot is free for the next admission. The child's fail, resumed, must
  // answer gone (no job with that id).
  ForkedChild stale_failer(const FailOptions& fo) {
    QueueOptions o;
    o.jobs = 1;  // every admission reuses the one slot
    o.lanes = 2;
    o.payload_bytes = 16;
    o.recovery_ms = 40;
    create(o);
    const std::string name = seg();
    const BrandedId j1 = q().mint();
    EXPECT_EQ(q().enqueue({}, j1, "one"), EnqueueStatus::enqueued);
    ForkedChild failer([name, fo] {
      auto r = Queue::open(name);
      if (!r) return 3;
      Lease l;
      if (!r->claim(l, 50)) return 4;
      detail::failpoint_arm("fail.planned", 1, detail::FailpointAction::stop);
      return r->fail(l.id, l.token, fo) == FailStatus::gone ? 0 : 5;
    }, 60);
    EXPECT_TRUE(wait_stopped(failer.pid())) << failer.describe();
    q().advance_clock(1000);  // its lease expires
    q().tick();
    Lease l;
    EXPECT_TRUE(q().claim(l, kLongLease));
    EXPECT_EQ(l.id, j1);
    EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
    return failer;
  }
};

// ---- a consumer dies holding leases ----------------------------------------------------------

TEST_F(Recovery, LeasesOfADeadConsumerComeBackToTheSurvivorsClaimsWithinTheBound) {
  constexpr std::uint32_t kBound = 1000;
  make(kBound);
  const auto a = fill(A, 3);
  const auto b = fill(B, 2);
  SharedBlock<ChildReport> rep;
  const std::string name = seg();
  ForkedChild child([&] {
    auto r = Queue::open(name);
    if (!r) return 3;
    Lease l;
    for (int i = 0; i < 3; ++i) {
      if (!r->claim(l, kLongLease)) return 4;
      tell(*rep, l);
    }
    rep->stage.store(1);
    for (;;) ::pause();  // holds its leases until killed
  }, 120);
  ASSERT_TRUE(eventually([&] { return rep->stage.load() == 1 || child.poll(); })) << "the child never took its leases";
  ASSERT_EQ(rep->stage.load(), 1) << child.describe();
  std::set<BrandedId> held;
  for (int i = 0; i < 3; ++i) {
    const BrandedId id = reported_id(*rep, i);
    held.insert(id);
    const auto j = q().job(id);
    ASSERT_TRUE(j.has_value());
    EXPECT_EQ(j->state, JobState::leased);
    EXPECT_EQ(j->holder_pid, child.pid());
  }
  // While it lives, nothing of it comes back, whatever the sweeps.
  q().advance_clock(kBound);
  EXPECT_EQ(q().tick(), 0U);
  const RecoveryInfo before = q().recovery();

  child.kill_now();
  child.wait();
  // One recovery bound of segment time later, the survivor's claims alone
  // (no tick) take them back.
  q().advance_clock(kBound);
  std::map<BrandedId, int> got;
  std::map<BrandedId, std::uint32_t> attempts;
  claim_all(got, &attempts);
  for (const BrandedId& id : a) EXPECT_EQ(got[id], 1) << id.str();
  for (const BrandedId& id : b) EXPECT_EQ(got[id], 1) << id.str();
  EXPECT_EQ(got.size(), 5U);
  for (const BrandedId& id : held) EXPECT_EQ(attempts[id], 2U) << "its dead lease counts as a delivery: " << id.str();
  const RecoveryInfo r = q().recovery();
  EXPECT_EQ(r.runs, before.runs + 1);
  EXPECT_EQ(r.jobs, before.jobs + 3);
  EXPECT_EQ(r.last_jobs, 3U);
  EXPECT_EQ(r.last_pid, child.pid());
  EXPECT_GT(r.last_unix_ms, 0U);
  // The dead holder's tokens are fenced off for good.
  for (int i = 0; i < 3; ++i)
    EXPECT_NE(q().complete(reported_id(*rep, i), Token(rep->tokens[i])), AckStatus::ok) << "a dead lease completed";
  bool listed_alive = false;
  for (const ProcessInfo& p : q().processes()) listed_alive = listed_alive || (p.pid == child.pid() && p.alive);
  EXPECT_FALSE(listed_alive) << "processes() shows the dead child alive";
  expect_clean();
}

// A consumer parked in claim_wait, with nobody else calling anything, gets
// a dead consumer's lease back: parked consumers wake to look (real time).
TEST_F(Recovery, AParkedConsumerRecoversADeadConsumersLeaseByItself) {
  make(40);
  const auto ids = fill(A, 1);
  const pid_t dead = lease_then_die();
  ASSERT_NE(dead, 0);
  const auto t0 = Clock::now();
  Lease l;
  ASSERT_TRUE(q().claim_wait(l, kLongLease, 20s)) << "the parked consumer never looked for the dead holder's lease";
  EXPECT_EQ(l.id, ids[0]);
  EXPECT_EQ(l.attempt, 2U);
  EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  std::printf("[ recovery ] a parked consumer had the dead holder's lease back after %lld ms (bound 40 ms)\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count()));
  EXPECT_EQ(q().recovery().last_pid, dead);
  expect_clean();
}

// ---- many processes attached: no one claim judges them all ---------------------------------------

// Judging a process's liveness is a kill and a /proc read (about 10 us). A
// pass judges the attached processes first, at most 32 a claim (each claim
// of the pass takes the next records), then sweeps the slots: no claim pays
// for every process. Until 2026-12-04 the claim that started a pass judged
// every attached process (docs/perf/sweep-2026-12-04.txt: the slowest claim
// 7.0-9.2 ms with 255 others attached). Other handles of this process stand
// for other processes: each has its own record, judged as any other.
class ManyAttached : public Recovery {
 protected:
  static constexpr std::uint32_t kOthers = 100;
  void SetUp() override {
    Recovery::SetUp();
    make(kBound, kOthers + 8);
    for (std::uint32_t i = 0; i < kOthers; ++i) {
      auto r = Queue::open(seg());
      ASSERT_TRUE(r.ok()) << r.error().message;
      others_.push_back(std::move(r).value());
    }
  }
  void TearDown() override {
    others_.clear();
    Recovery::TearDown();
  }
  // Attached records (not this handle's) whose verdict is fresh.
  std::uint32_t judged() {
    detail::Segment& s = detail::QueueAccess::segment(q());
    const std::uint64_t now = detail::segment_now_ms(s);
    std::uint32_t n = 0;
    for (std::uint32_t i = 0; i < s.proc_count; ++i)
      if (i != s.me_index && (s.procs[i].owner.load() & detail::kOwnerAttached) && !detail::verdict_stale(s, i, now)) ++n;
    return n;
  }
  static constexpr std::uint32_t kBound = 1000;
  std::vector<Queue> others_;
};

TEST_F(ManyAttached, AClaimJudgesTheLivenessOfABoundedNumberOfProcesses) {
  fill(A, 1);
  q().advance_clock(kBound);  // every verdict stale, a pass due
  ASSERT_EQ(judged(), 0U);
  Lease l;
  ASSERT_TRUE(q().claim(l, kLongLease));  // starts the pass: its first chunk
  const std::uint32_t first = judged();
  EXPECT_GE(first, 1U);
  EXPECT_LE(first, 32U) << "one claim judged " << first << " processes";
  // The claims that follow take the pass's next chunks, empty or not.
  int claims = 1;
  for (std::uint32_t prev = first; judged() < kOthers && claims < 16; ++claims) {
    Lease none;
    EXPECT_FALSE(q().claim(none, kLongLease));
    EXPECT_LE(judged() - prev, 32U);
    prev = judged();
  }
  EXPECT_EQ(judged(), kOthers);
  EXPECT_LE(claims, int(kOthers / 32 + 1)) << "claims to judge them all";
  EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  expect_clean();
}

TEST_F(ManyAttached, LeasesOfADeadConsumerComeBackWithinAFewClaims) {
  const auto ids = fill(A, 1);
  const pid_t dead = lease_then_die();
  ASSERT_NE(dead, 0);
  q().advance_clock(kBound);
  int claims = 0;
  Lease l;
  bool back = false;
  while (!back && claims < 16) {
    ++claims;
    back = q().claim(l, kLongLease);
  }
  ASSERT_TRUE(back) << "the dead holder's lease never came back";
  EXPECT_LE(claims, int((kOthers + 1) / 32 + 2)) << "claims until the dead holder's lease came back";
  EXPECT_EQ(l.id, ids[0]);
  EXPECT_EQ(l.attempt, 2U);
  EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  EXPECT_EQ(q().recovery().last_pid, dead);
  expect_clean();
}

// Past a chunk's judging budget, a process with no fresh verdict counts
// alive, whatever an old verdict said: a verdict of "dead" older than
// recovery_ms / 2 (here one scribbled, about the live process's own
// incarnation) is never acted on. The first version of the budget used an
// old verdict as it stood (found in review, replayed the same way).
TEST_F(ManyAttached, AnOldDeadVerdictIsNeverUsedPastTheBudget) {
  fill(A, 1);
  detail::Segment& s = detail::QueueAccess::segment(q());
  // The victim: the handle whose record is nearest the middle of the table
  // (records are taken from a rotating start), so that records before it
  // spend a slot chunk's budget and its judge chunk is not the pass's last.
  std::size_t v = 0;
  auto distance = [&](std::size_t k) {
    return std::abs(int(detail::QueueAccess::segment(others_[k]).me_index) - int(s.proc_count / 2));
  };
  for (std::size_t k = 1; k < others_.size(); ++k)
    if (distance(k) < distance(v)) v = k;
  Queue& victim = others_[v];
  const std::uint32_t vi = detail::QueueAccess::segment(victim).me_index;
  ASSERT_GE(vi, 16U);
  Lease vl;
  ASSERT_TRUE(victim.claim(vl, kLongLease));
  q().advance_clock(kBound);  // every verdict stale, a pass due
  // This handle's claims take the pass's judge chunks until the victim's
  // record is judged (alive), the pass still in the records.
  for (int i = 0; i < 16 && detail::verdict_stale(s, vi, detail::segment_now_ms(s)); ++i) {
    Lease none;
    EXPECT_FALSE(q().claim(none, kLongLease));
  }
  ASSERT_FALSE(detail::verdict_stale(s, vi, detail::segment_now_ms(s)));
  ASSERT_LT(std::uint32_t(s.h->sweep.cursor.load()), s.proc_count) << "the pass left the records";
  // The victim's verdict scribbled to "dead", about its own incarnation;
  // then it and every other verdict go stale. The pass's remaining chunks
  // do not judge it again (it is behind the cursor), and the slot chunk's
  // budget is spent on the records before it.
  s.procs[vi].seen.store(detail::Verdict::make(detail::segment_now_ms(s), std::uint32_t(s.procs[vi].incarnation.load()), true));
  q().advance_clock(kBound / 2 + 1);
  for (int i = 0; i < 8; ++i) {
    Lease l;
    EXPECT_FALSE(q().claim(l, kLongLease)) << "the live victim's lease was taken back: attempt " << l.attempt;
  }
  EXPECT_EQ(q().job(vl.id)->state, JobState::leased);
  EXPECT_EQ(victim.complete(vl.id, vl.token), AckStatus::ok);
  expect_clean();
}

// A parked consumer alone takes a pass's chunks one after another (not one
// per wake-up): with many processes to judge it still has the dead holder's
// lease back within its bound.
TEST_F(ManyAttached, AParkedConsumerRecoversADeadConsumersLeaseByItself) {
  const auto ids = fill(A, 1);
  const pid_t dead = lease_then_die();
  ASSERT_NE(dead, 0);
  q().advance_clock(kBound);  // a pass is due at once: the parked consumer starts it
  const auto t0 = Clock::now();
  Lease l;
  ASSERT_TRUE(q().claim_wait(l, kLongLease, 20s)) << "the parked consumer never had the dead holder's lease back";
  std::printf("[ recovery ] with %u other processes attached, a parked consumer had the dead holder's lease back "
              "after %lld ms (bound %u ms)\n",
              kOthers, static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0).count()),
              kBound);
  EXPECT_EQ(l.id, ids[0]);
  EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  expect_clean();
}

// A judge that finds a record's owner dead while another process takes the
// record (between the judge's kill and /proc read and its store of the
// verdict) must not leave the new, live owner judged dead: the verdict
// names the incarnation it was about. Until 2026-12-04 it did not, and the
// pass that stored it took the new owner's lease back at once (found in
// review, replayed the same way).
struct Retaken {
  std::string name;
  SharedBlock<ChildReport>* rep = nullptr;
  std::optional<ForkedChild> b;
  bool done = false;
};
void retake_while_judged(void* arg) {
  auto& r = *static_cast<Retaken*>(arg);
  if (r.done) return;
  r.done = true;
  const std::string name = r.name;
  SharedBlock<ChildReport>* rep = r.rep;
  r.b.emplace([name, rep] {
    auto q = Queue::open(name);
    if (!q) return 3;
    Lease l;
    if (!q->claim(l, kLongLease)) return 4;
    tell(**rep, l);
    (*rep)->stage.store(1);
    for (;;) ::pause();
  }, 60);
  (void)eventually([&] { return (*rep)->stage.load() == 1 || r.b->poll(); });
}

TEST_F(Recovery, AVerdictAboutARecordsDeadOwnerIsNotTakenForItsNewOwner) {
  make(1000, 2);  // this handle's record and one more: the dead A's, then B's
  const auto ids = fill(A, 1);
  const std::string name = seg();
  attach_and_die();
  ASSERT_FALSE(HasFailure());
  SharedBlock<ChildReport> rep;
  Retaken plan;
  plan.name = name;
  plan.rep = &rep;
  q().advance_clock(1000);  // a pass due: its judge finds A dead, and B attaches and claims meanwhile
  detail::failpoint_call("liveness.judged", retake_while_judged, &plan);
  Lease l;
  const bool got = q().claim(l, kLongLease);
  detail::failpoint_call("liveness.judged", nullptr, nullptr);
  ASSERT_TRUE(plan.b.has_value()) << "the pass never judged A";
  ASSERT_EQ(rep->stage.load(), 1) << plan.b->describe();
  EXPECT_FALSE(got) << "the live B's lease was taken back: " << l.id.str() << " attempt " << l.attempt;
  for (int i = 0; i < 3; ++i) {  // nor by the claims after it, within the verdict's life
    q().advance_clock(100);
    Lease again;
    EXPECT_FALSE(q().claim(again, kLongLease)) << "the live B's lease was taken back: attempt " << again.attempt;
  }
  EXPECT_EQ(q().job(ids[0])->state, JobState::leased);
  plan.b->kill_now();
  plan.b->wait();
}

// ---- a claimer dies between taking a job out of its lane and leasing it -------------------------

TEST_F(Recovery, AClaimerKilledAfterTakingAJobGivesItBack) {
  constexpr std::uint32_t kBound = 1000;
  make(kBound);
  const auto a = fill(A, 3);
  const pid_t dead = take_then_die().pid;
  ASSERT_FALSE(HasFailure());
  // Its job is out of lane A and not leased: pending, and fsck names the dead
  // thread's step (its intent) and nothing else.
  for (const BrandedId& id : a) EXPECT_EQ(q().job(id)->state, JobState::pending) << id.str();
  const FsckReport during = q().fsck();
  EXPECT_FALSE(during.clean());
  for (const FsckIssue& i : during.issues) {
    EXPECT_EQ(i.invariant, "in-flight") << i.detail;
    EXPECT_NE(i.detail.find("pid " + std::to_string(dead)), std::string::npos) << i.detail;
  }
  const RecoveryInfo before = q().recovery();
  q().advance_clock(kBound);
  std::map<BrandedId, int> got;
  std::map<BrandedId, std::uint32_t> attempts;
  claim_all(got, &attempts);
  for (const BrandedId& id : a) {
    EXPECT_EQ(got[id], 1) << id.str();
    EXPECT_EQ(attempts[id], 1U) << "the dead claimer never leased it: " << id.str();
  }
  const RecoveryInfo r = q().recovery();
  EXPECT_GT(r.finished, before.finished) << "nothing was finished for the dead claimer";
  EXPECT_EQ(r.finished_pid, dead);
  EXPECT_GT(r.finished_unix_ms, 0U);
  EXPECT_EQ(r.runs, before.runs) << "no lease was returned: it never had one";
  expect_clean();
}

// ---- helpers that read the segment long ago ----------------------------------------------------

// A helper (a claim that met an admitting slot at its lane's front, a
// rival enqueue) that read a slot's admission and was then stopped must not
// decide a later admission of the same slot when it resumes. Here the slot
// is reused by a delayed enqueue stopped right after taking it (its fields
// not yet written): the stale helper's decision must change nothing, and
// the delayed job must be delivered when it falls due.
TEST_F(Recovery, AStaleHelperCannotDecideALaterAdmissionOfTheSlot) {
  QueueOptions o;
  o.jobs = 1;  // one slot: every admission reuses it
  o.lanes = 2;
  o.payload_bytes = 16;
  create(o);
  detail::Segment& s = detail::QueueAccess::segment(q());
  const BrandedId j1 = q().mint();
  ASSERT_EQ(q().enqueue({}, j1, "a"), EnqueueStatus::enqueued);
  // What the helper read: J1's admission (the ctr it was admitted with).
  const detail::Word128 committed = detail::slot_load(s, 0);
  const detail::Word128 seen = detail::SlotWord::make(detail::SlotState::admitting, 0, 0,
                                                      detail::SlotWord::ctr(committed), detail::SlotWord::holder(committed));
  Lease l;
  ASSERT_TRUE(q().claim(l, kLongLease));
  ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  const BrandedId j2 = q().mint();
  const std::string name = seg();
  ForkedChild child([&] {
    auto r = Queue::open(name);
    if (!r) return 3;
    detail::failpoint_arm("enqueue.slot_taken", 1, detail::FailpointAction::stop);
    EnqueueOptions eo;
    eo.delay_ms = 50;
    return r->enqueue({}, j2, "b", eo) == EnqueueStatus::enqueued ? 0 : 4;
  }, 60);
  ASSERT_TRUE(wait_stopped(child.pid())) << child.describe();
  const detail::Word128 before = detail::slot_load(s, 0);
  EXPECT_FALSE(detail::index_resolve(s, 0, seen)) << "a stale helper decided another admission";
  EXPECT_TRUE(detail::slot_load(s, 0) == before) << "a stale helper changed the slot";
  ::kill(child.pid(), SIGCONT);
  child.wait();
  ASSERT_TRUE(child.exited_zero()) << child.describe();
  EXPECT_EQ(q().job(j2)->state, JobState::scheduled);
  q().advance_clock(1000);
  q().tick();
  Lease l2;
  ASSERT_TRUE(q().claim(l2, kLongLease)) << "the delayed job was lost";
  EXPECT_EQ(l2.id, j2);
  EXPECT_EQ(q().complete(l2.id, l2.token), AckStatus::ok);
  expect_clean();
}

// Two sweeps that settle the same dead claimer's take (the second read the
// dead thread's intent before the first cleared it, and resumes after the
// job was put back and relinked) return the job once: the second finds it
// moved on.
TEST_F(Recovery, ASecondSettlementOfTheSameDeadTakeChangesNothing) {
  make(1000);
  const auto a = fill(A, 2);
  const DeadTake d = take_then_die();  // as the slower sweep read it
  ASSERT_FALSE(HasFailure());
  detail::Segment& s = detail::QueueAccess::segment(q());
  const std::uint64_t in = d.in, lane = d.lane, pred = d.pred;
  q().advance_clock(1000);
  q().tick();  // the first settlement: the job goes back to its lane
  std::atomic<std::uint64_t> stale_in{in}, stale_lane{lane}, stale_pred{pred};
  EXPECT_FALSE(detail::settle_intent(s, stale_in, stale_lane, stale_pred, detail::segment_now_ms(s)))
      << "the second settlement acted on a job already put back";
  const FsckReport r = q().fsck();
  EXPECT_TRUE(r.clean()) << show(r);
  std::map<BrandedId, int> got;
  claim_all(got);
  for (const BrandedId& id : a) EXPECT_EQ(got[id], 1) << id.str();
  expect_clean();
}

// A dead claimer's job-take intent whose lane word has bits above the lane
// set (only a husk's take names an incarnation there, with its flag bit):
// scribbled. It is reported and nothing is done from it, as with a lane
// past the table: a lane the word may not mean is not written. Before, such
// a word read as the lane its low half names (since the word carries a husk
// take's incarnation; until then any value past the lanes was reported).
TEST_F(Recovery, AJobTakesIntentWithBitsAboveItsLaneIsReportedNotActedOn) {
  make(1000);
  fill(A, 2);
  const DeadTake d = take_then_die();
  ASSERT_FALSE(HasFailure());
  detail::Segment& s = detail::QueueAccess::segment(q());
  const std::uint64_t in = d.in, lane = d.lane, pred = d.pred;
  const std::uint32_t t = d.record;
  ASSERT_FALSE(detail::IntentLane::is_husk(lane));
  // fsck says so too.
  s.threads[t].intent_lane.store(lane | (1ULL << 40));
  const FsckReport f = q().fsck();
  EXPECT_TRUE(std::any_of(f.issues.begin(), f.issues.end(), [](const auto& i) { return i.invariant == "process-record"; }))
      << show(f);
  s.threads[t].intent_lane.store(lane);
  const std::uint64_t before = q().corruption().count;
  std::atomic<std::uint64_t> a_in{in}, a_lane{lane | (1ULL << 40)}, a_pred{pred};
  EXPECT_FALSE(detail::settle_intent(s, a_in, a_lane, a_pred, detail::segment_now_ms(s)));
  EXPECT_EQ(q().corruption().count, before + 1) << "a scribbled intent's lane word was taken for its low half";
  EXPECT_EQ(a_in.load(), 0U) << "a dead owner's scribbled intent is cleared once reported";
}

// Thread records are taken lowest first and the header's threads_used
// covers every one in use: the scans of the records (each sweep pass, a
// reassign's intent check) read that many, not the whole table (4,096
// records by default). Before, a thread started at gettid % records.
TEST_F(Recovery, ThreadRecordsAreTakenLowestFirstBelowTheMark) {
  make(1000);
  fill(A, 1);  // this thread's record
  detail::Segment& s = detail::QueueAccess::segment(q());
  auto in_use = [&] {
    std::vector<std::uint32_t> v;
    for (std::uint32_t i = 0; i < s.thread_count; ++i)
      if (s.threads[i].owner.load() != 0) v.push_back(i);
    return v;
  };
  ASSERT_EQ(in_use(), std::vector<std::uint32_t>{0});
  EXPECT_EQ(s.h->threads_used.load(), 1U);
  constexpr int kThreads = 3;
  auto run = [&] {
    std::latch all_in(kThreads + 1), go(1);
    std::vector<std::thread> ts;
    for (int t = 0; t < kThreads; ++t)
      ts.emplace_back([&] {
        EXPECT_EQ(q().enqueue(B, q().mint(), "x"), EnqueueStatus::enqueued);
        all_in.count_down();
        go.wait();  // holds its record until every thread has one
      });
    all_in.arrive_and_wait();
    const std::vector<std::uint32_t> v = in_use();
    go.count_down();
    for (auto& t : ts) t.join();
    return v;
  };
  EXPECT_EQ(run(), (std::vector<std::uint32_t>{0, 1, 2, 3}));
  EXPECT_EQ(s.h->threads_used.load(), 4U);
  // Their threads have exited: the records are free, and taken again from
  // the lowest; the mark does not move.
  EXPECT_EQ(in_use(), std::vector<std::uint32_t>{0});
  EXPECT_EQ(run(), (std::vector<std::uint32_t>{0, 1, 2, 3}));
  EXPECT_EQ(s.h->threads_used.load(), 4U);
  expect_clean();
}

// threads_used scribbled low, under the record of a claimer that died with
// its take in flight: the sweep finds the record above the mark within its
// bounded number of passes, reports it, raises the mark and settles the
// take; fsck names the record meanwhile.
TEST_F(Recovery, ADeadClaimersRecordAboveAScribbledMarkIsFoundAndSettled) {
  make(1000, 16);  // 256 thread records
  const auto a = fill(A, 2);
  ASSERT_TRUE(killed_at("claim.taken", [](Queue& r) {
    Lease l;
    r.claim(l, kLongLease);
  }));
  detail::Segment& s = detail::QueueAccess::segment(q());
  ASSERT_EQ(s.h->threads_used.load(), 2U) << "the parent's record and the child's";
  ASSERT_NE(s.threads[1].intent.load(), 0U) << "the dead claimer left no intent in record 1";
  // The mark scribbled to cover the parent's record only; the heal's window
  // scribbled to start as far from record 1 as it can.
  s.h->threads_used.store(1);
  s.h->threads_heal.store(64);
  const FsckReport before = q().fsck();
  bool named = false;
  for (const auto& i : before.issues) named |= i.detail.find("thread record 1 is in use") != std::string::npos;
  EXPECT_TRUE(named) << show(before);
  const std::uint64_t corrupt0 = q().corruption().count;
  int passes = 0;
  while (s.h->threads_used.load() < 2 && passes < 16) {
    q().advance_clock(1000);
    q().tick();
    ++passes;
  }
  EXPECT_EQ(s.h->threads_used.load(), 2U) << "not healed in " << passes << " passes";
  EXPECT_LE(passes, 255 / 64 + 2);
  EXPECT_EQ(q().corruption().count, corrupt0 + 1);
  EXPECT_EQ(q().corruption().last_structure, "header");
  q().advance_clock(1000);
  q().tick();  // the pass after the heal settles the dead take
  EXPECT_EQ(s.threads[1].intent.load(), 0U) << "the dead take was not settled";
  std::map<BrandedId, int> got;
  claim_all(got);
  for (const BrandedId& id : a) EXPECT_EQ(got[id], 1) << id.str();
  expect_clean();
}

// The same scribble under an admitter killed after its link (its link
// intent in the record above the mark, the heal's window elsewhere): the
// pass that meets the orphaned admission must not take "no intent below
// the mark" for "never linked" and free a slot still linked in its run
// (the job after it was lost for good: found in review). settle_orphan
// reads the whole table.
TEST_F(Recovery, AScribbledLowMarkNeverHidesALinkedAdmissionFromTheSweep) {
  make(1000, 16);  // 256 thread records
  const auto a1 = fill(A, 1);
  ASSERT_TRUE(killed_at("enqueue.indexed", [](Queue& r) { (void)r.enqueue(A, r.mint(), "x"); }));  // linked
  const auto a2 = fill(A, 1);
  detail::Segment& s = detail::QueueAccess::segment(q());
  ASSERT_EQ(s.h->threads_used.load(), 2U);
  ASSERT_NE(s.threads[1].intent.load(), 0U) << "no link intent in record 1";
  s.h->threads_used.store(1);   // the scribble
  s.h->threads_heal.store(64);  // the heal's window far from record 1
  q().advance_clock(1000);
  q().tick();
  std::map<BrandedId, int> got;
  claim_all(got);
  EXPECT_EQ(got[a1[0]], 1) << a1[0].str();
  EXPECT_EQ(got[a2[0]], 1) << "the job linked after the orphaned admission was not delivered";
  for (int i = 0; i < 6; ++i) {  // the heal finds record 1 within (255 / 64) + 2 passes
    q().advance_clock(1000);
    q().tick();
  }
  EXPECT_EQ(s.h->threads_used.load(), 2U);
  claim_all(got);
  for (const auto& [id, n] : got) EXPECT_EQ(n, 1) << id.str();
  expect_clean();
}

// A creator stopped right after taking a lane record (its key not yet
// written) keeps it: a sweep judges the creator the record's word names,
// not the record's previous creator (long gone), so the record is not
// freed under it and handed to another group.
TEST_F(Recovery, AStoppedCreatorKeepsTheRecordItTook) {
  QueueOptions o;
  o.jobs = 16;
  o.lanes = 1;  // one lane record for groups: every creation takes it
  o.payload_bytes = 32;
  o.recovery_ms = 40;
  create(o);
  const std::string name = seg();
  const BrandedId g1 = BrandedId::make("GGA", 1), g2 = BrandedId::make("GGB", 1), g3 = BrandedId::make("GGC", 1);
  ForkedChild first([&] {
    auto r = Queue::open(name);
    if (!r) return 3;
    if (r->enqueue(g1, r->mint(), "one") != EnqueueStatus::enqueued) return 4;
    Lease l;
    if (!r->claim(l, kLongLease) || r->complete(l.id, l.token) != AckStatus::ok) return 5;
    return 0;  // detaches: the record's creator is gone from here
  }, 60);
  first.wait();
  ASSERT_TRUE(first.exited_zero()) << first.describe();
  for (int i = 0; i < 4; ++i) {
    q().advance_clock(o.recovery_ms);
    q().tick();
  }
  ASSERT_GE(q().snapshot().lanes_reclaimed, 1U) << "g1's idle lane was not given back";
  const BrandedId id2 = q().mint();
  ForkedChild second([&] {
    auto r = Queue::open(name);
    if (!r) return 3;
    detail::failpoint_arm("lane.creating", 1, detail::FailpointAction::stop);
    return r->enqueue(g2, id2, "two") == EnqueueStatus::enqueued ? 0 : 4;
  }, 60);
  ASSERT_TRUE(wait_stopped(second.pid())) << second.describe();
  for (int i = 0; i < 4; ++i) {
    q().advance_clock(o.recovery_ms);
    q().tick();
  }
  EXPECT_EQ(q().enqueue(g3, q().mint(), "three"), EnqueueStatus::lanes_full)
      << "the stopped creator's record was freed and taken by another group";
  ::kill(second.pid(), SIGCONT);
  second.wait();
  ASSERT_TRUE(second.exited_zero()) << second.describe();
  Lease l;
  ASSERT_TRUE(q().claim(l, kLongLease));
  EXPECT_EQ(l.id, id2);
  EXPECT_EQ(l.group, g2);
  EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  expect_clean();
}

// A fail() that checked its lease and was then stopped past the lease's
// deadline writes its plan after the job was redelivered, completed and its
// slot taken by a new admission (itself stopped before its decision). The
// stale fail() is refused and the new job is delivered as enqueued: the
// plan never reaches another job.
TEST_F(Recovery, AStaleFailWritesNothingIntoTheSlotsNextJob) {
  ForkedChild failer = stale_failer(FailOptions{.delay_ms = 0, .max_attempts = 1, .error = "stale"});
  if (HasFailure()) return;
  const std::string name = seg();
  Lease l;
  const BrandedId j2 = q().mint();
  ForkedChild admitter([&] {
    auto r = Queue::open(name);
    if (!r) return 3;
    detail::failpoint_arm("enqueue.indexed", 1, detail::FailpointAction::stop);
    return r->enqueue({}, j2, "two") == EnqueueStatus::enqueued ? 0 : 4;
  }, 60);
  ASSERT_TRUE(wait_stopped(admitter.pid())) << admitter.describe();
  ::kill(failer.pid(), SIGCONT);
  failer.wait();
  EXPECT_TRUE(failer.exited_zero()) << "the stale fail was not refused: " << failer.describe();
  ::kill(admitter.pid(), SIGCONT);
  admitter.wait();
  ASSERT_TRUE(admitter.exited_zero()) << admitter.describe();
  ASSERT_EQ(q().job(j2)->state, JobState::pending);
  ASSERT_TRUE(q().claim(l, kLongLease)) << "the new job was not delivered";
  EXPECT_EQ(l.id, j2);
  EXPECT_EQ(l.attempt, 1U);
  EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  expect_clean();
}

// The same for a retry now (the queue's default): the error text of a
// fail() stopped past its lease's deadline must not land in the slot's next
// job either. It was written before the fail's step, checked only when the
// call began, so the next job's last_error read "stale" (and its mirror
// would have shipped it).
TEST_F(Recovery, AStaleRetryWritesNoErrorTextIntoTheSlotsNextJob) {
  ForkedChild failer = stale_failer(FailOptions{.delay_ms = 0, .max_attempts = 10, .error = "stale"});
  if (HasFailure()) return;
  Lease l;
  const BrandedId j2 = q().mint();
  ASSERT_EQ(q().enqueue({}, j2, "two"), EnqueueStatus::enqueued);
  ::kill(failer.pid(), SIGCONT);
  failer.wait();
  EXPECT_TRUE(failer.exited_zero()) << "the stale fail was not refused: " << failer.describe();
  const auto info = q().job(j2);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->last_error, "") << "a stale fail's text landed in the slot's next job";
  ASSERT_TRUE(q().claim(l, kLongLease));
  EXPECT_EQ(l.id, j2);
  EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  expect_clean();
}

// A retry now still carries its text: written once the job's move is the
// failer's, before the job is back in its lane.
TEST_F(Recovery, ARetryNowKeepsItsErrorText) {
  make(40, 4);
  fill(A, 1);
  Lease l;
  ASSERT_TRUE(q().claim(l, kLongLease));
  ASSERT_EQ(q().fail(l.id, l.token, FailOptions{.delay_ms = 0, .max_attempts = 10, .error = "boom"}),
            FailStatus::retrying);
  const auto info = q().job(l.id);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->state, JobState::pending);
  EXPECT_EQ(info->last_error, "boom");
  Lease again;
  ASSERT_TRUE(q().claim(again, kLongLease));
  EXPECT_EQ(again.id, l.id);
  EXPECT_EQ(q().complete(again.id, again.token), AckStatus::ok);
  expect_clean();
}

// A helper that read an admission long ago (a sweep settling its dead
// admitter, before index_resolve) and resumes after it was committed, made
// due, adopted into its lane and moved by a reassign: the slot is then the
// move's origin, aborted at the admission's ctr and naming the copy, a husk
// linked behind an older job. index_resolve answered "not committed" for
// it, and the sweep freed the linked husk (found in review of 19d2b53). A
// word at the admission's ctr that names a successor was committed.
TEST_F(Recovery, AHelperWhoReadAnAdmissionBeforeItWasCommittedAndMovedIsToldCommitted) {
  make(1000);
  using namespace detail;
  Segment& s = QueueAccess::segment(q());
  const BrandedId ga = BrandedId::make("AAA", 1), gb = BrandedId::make("BBB", 2);
  const BrandedId k = q().mint(), j = q().mint();
  ASSERT_EQ(q().enqueue(ga, k, "k"), EnqueueStatus::enqueued);  // ahead of j: j's husk stays linked
  EnqueueOptions delayed;
  delayed.delay_ms = 1000;
  ASSERT_EQ(q().enqueue(ga, j, "j", delayed), EnqueueStatus::enqueued);
  const std::uint32_t x = index_find(s, j.snowflake());
  ASSERT_NE(x, kNoSlot);
  const Word128 committed = slot_load(s, x);
  ASSERT_EQ(SlotWord::state(committed), SlotState::scheduled);
  // What the helper read: the admission, admitting at its ctr.
  const Word128 seen = SlotWord::make(SlotState::admitting, 0, 0, SlotWord::ctr(committed), 1);
  q().advance_clock(2000);
  q().tick();  // due: adopted into ga's lane, pending at the same ctr
  ASSERT_EQ(SlotWord::state(slot_load(s, x)), SlotState::pending);
  ASSERT_EQ(SlotWord::ctr(slot_load(s, x)), SlotWord::ctr(seen));
  ASSERT_EQ(q().reassign(j, gb), MoveStatus::moved);
  const Word128 origin = slot_load(s, x);
  ASSERT_EQ(SlotWord::state(origin), SlotState::aborted);  // a husk behind k, naming the copy
  ASSERT_EQ(SlotWord::ctr(origin), SlotWord::ctr(seen));
  EXPECT_TRUE(index_resolve(s, x, seen, true)) << "a committed admission, moved since, read as not committed";
  const std::vector<BrandedId> got = test::serve_all(q());
  EXPECT_EQ(got, (std::vector<BrandedId>{k, j}));
  expect_clean();
}

// An acker stopped between its checks and its lane CAS, for as many CASes
// of the lane as bring its word back bit for bit (the version has 9 bits),
// must not complete the job's newer lease when it resumes. Its reading and
// its CAS are replayed here with the calls release_lease makes.
TEST_F(Recovery, AStaleAckOnAWordThatCameBackCompletesNoNewerLease) {
  QueueOptions o;
  o.jobs = 16;
  o.lanes = 2;
  o.payload_bytes = 16;
  create(o);
  using namespace detail;
  Segment& s = QueueAccess::segment(q());
  const std::uint32_t lane = kDefaultLane;
  const BrandedId j1 = q().mint();
  ASSERT_EQ(q().enqueue({}, j1, "a"), EnqueueStatus::enqueued);
  Lease l1;
  ASSERT_TRUE(q().claim(l1, 1000));
  const std::uint32_t x = token_slot(s, l1.token);
  // The stale acker: it checked the lease, marked the slot, read the word.
  const Word128 sw = slot_load(s, x);
  s.slot(x).run_seq.store(exit_mark(SlotWord::ctr(sw)));
  const Word128 w = lane_load(s, lane);
  const Word128 base = lane_base(s, lane, w);
  const Word128 nw = LaneWord::with_active(LaneWord::with_rel(base, x + 1, RelOp::complete),
                                           LaneWord::active(base) ? LaneWord::active(base) - 1 : 0);
  // Meanwhile: its lease expires, and B holds the job again.
  q().advance_clock(2000);
  q().tick();
  Lease l2;
  ASSERT_TRUE(q().claim(l2, 3'600'000));
  ASSERT_EQ(l2.id, j1);
  ASSERT_EQ(q().set_weight({}, 1), LaneStatus::ok);
  // Traffic on the lane until its word is what the acker read.
  int cycles = 0;
  for (; cycles < 5000 && !(lane_load(s, lane) == w); ++cycles) {
    ASSERT_EQ(q().enqueue({}, q().mint(), "y"), EnqueueStatus::enqueued);
    Lease ly;
    ASSERT_TRUE(q().claim(ly, 1000));
    ASSERT_EQ(q().complete(ly.id, ly.token), AckStatus::ok);
    ASSERT_EQ(q().set_weight({}, 1), LaneStatus::ok);
  }
  ASSERT_TRUE(lane_load(s, lane) == w) << "the word never came back: nothing to test";
  // The acker resumes: its CAS succeeds on the word that came back...
  Word128 ww = w;
  ASSERT_TRUE(lane_cas(s, lane, ww, nw));
  (void)lane_base(s, lane, ww);
  // ... and its step is not applied to B's lease.
  EXPECT_EQ(SlotWord::state(slot_load(s, x)), SlotState::leased);
  EXPECT_EQ(q().complete(l2.id, l2.token), AckStatus::ok) << "a stale ack completed a newer lease";
  const FsckReport r = q().fsck();
  EXPECT_TRUE(r.clean()) << show(r);
}

// A claimer stopped after taking a job from the strays, past its lease's
// deadline: a sweep puts the job back and relinks it (new links). When the
// claimer resumes it must not mark those new links as taken (that would
// unlink a pending job from every list): the job is delivered once.
TEST_F(Recovery, AResumedTakerDoesNotMarkItsJobsNewLinks) {
  make(40);
  const auto a = fill(A, 1);
  Lease l0;
  ASSERT_TRUE(q().claim(l0, kLongLease));
  ASSERT_EQ(q().release(l0.id, l0.token), AckStatus::ok);  // back at its id: in the strays
  SharedBlock<ChildReport> rep;
  const std::string name = seg();
  ForkedChild child([&] {
    auto r = Queue::open(name);
    if (!r) return 3;
    detail::failpoint_arm("claim.taken", 1, detail::FailpointAction::stop);
    Lease l;
    if (!r->claim(l, 50)) return 7;  // its take undone and nothing else to take
    tell(*rep, l);
    return r->complete(l.id, l.token) == AckStatus::ok ? 0 : 6;
  }, 60);
  ASSERT_TRUE(wait_stopped(child.pid())) << child.describe();
  q().advance_clock(1000);  // the take is overdue: the job goes back, relinked
  q().tick();
  ASSERT_EQ(q().job(a[0])->state, JobState::pending);
  ::kill(child.pid(), SIGCONT);
  child.wait();
  ASSERT_TRUE(child.reaped() && WIFEXITED(child.status())) << child.describe();
  int delivered = rep->leases.load();
  std::map<BrandedId, int> got;
  claim_all(got);
  delivered += got[a[0]];
  EXPECT_EQ(delivered, 1) << "the job was " << (delivered ? "delivered twice" : "lost");
  expect_clean();
}

// A fail() stopped after checking its lease, while the job is redelivered
// and its new holder's complete has made its lane step but not applied it:
// the stale fail() must not overwrite the new lease's exit mark, or the
// completion (answered ok) would never be applied and the job delivered
// again.
TEST_F(Recovery, AStaleFailCannotUndoANewerCompletion) {
  make(40);
  const auto a = fill(A, 1);
  const std::string name = seg();
  ForkedChild failer([&] {
    auto r = Queue::open(name);
    if (!r) return 3;
    Lease l;
    if (!r->claim(l, 50)) return 4;
    detail::failpoint_arm("fail.planned", 1, detail::FailpointAction::stop);
    const FailStatus st = r->fail(l.id, l.token, FailOptions{.delay_ms = 60'000, .max_attempts = 10, .error = "x"});
    return st == FailStatus::stale ? 0 : 5;
  }, 60);
  ASSERT_TRUE(wait_stopped(failer.pid())) << failer.describe();
  q().advance_clock(1000);  // the failer's lease expires
  q().tick();
  ForkedChild completer([&] {
    auto r = Queue::open(name);
    if (!r) return 3;
    Lease l;
    if (!r->claim(l, kLongLease)) return 4;
    detail::failpoint_arm("ack.stepped", 1, detail::FailpointAction::stop);
    return r->complete(l.id, l.token) == AckStatus::ok ? 0 : 5;
  }, 60);
  ASSERT_TRUE(wait_stopped(completer.pid())) << completer.describe();
  ::kill(failer.pid(), SIGCONT);
  failer.wait();
  EXPECT_TRUE(failer.exited_zero()) << "the stale fail was not refused: " << failer.describe();
  ::kill(completer.pid(), SIGCONT);
  completer.wait();
  ASSERT_TRUE(completer.exited_zero()) << completer.describe();
  q().tick();
  EXPECT_FALSE(q().job(a[0]).has_value()) << "a completion answered ok was not applied";
  q().advance_clock(2 * kLongLease);
  Lease l;
  EXPECT_FALSE(q().claim(l, kLongLease)) << "the completed job was delivered again";
  expect_clean();
}

// ---- an enqueuer dies in the middle of an admission -------------------------------------------

struct EnqueueCase {
  const char* failpoint;
  bool new_lane;  // the child's job makes its lane (E) rather than joining A's run
};
void PrintTo(const EnqueueCase& c, std::ostream* os) { *os << c.failpoint << (c.new_lane ? " (new lane)" : ""); }

class EnqueuerKilled : public Recovery, public ::testing::WithParamInterface<EnqueueCase> {};

// The job is delivered exactly once, or (never committed) never appears;
// and an enqueue of the same id by a survivor says which: duplicate iff the
// dead one's job will be delivered.
TEST_P(EnqueuerKilled, TheJobIsDeliveredExactlyOnceOrNotAtAll) {
  const EnqueueCase c = GetParam();
  constexpr std::uint32_t kBound = 1000;
  make(kBound);
  const auto a = fill(A, 3);
  const BrandedId x = q().mint();
  const BrandedId g = c.new_lane ? E : A;
  const std::string name = seg();
  ForkedChild child([&] {
    auto r = Queue::open(name);
    if (!r) return 3;
    detail::failpoint_arm(c.failpoint);
    r->enqueue(g, x, "child");
    return 5;
  }, 60);
  child.wait();
  ASSERT_TRUE(child.signaled() && WTERMSIG(child.status()) == SIGKILL) << c.failpoint << " not reached: " << child.describe();
  const FsckReport during = q().fsck();
  for (const FsckIssue& i : during.issues) EXPECT_EQ(i.invariant, "in-flight") << i.detail;

  // A survivor enqueues the same id at once: nothing waits for the dead.
  const EnqueueStatus again = q().enqueue(g, x, "again");
  ASSERT_TRUE(again == EnqueueStatus::enqueued || again == EnqueueStatus::duplicate) << to_string(again);
  q().advance_clock(kBound);
  std::map<BrandedId, int> got;
  Lease l;
  std::string payload;
  for (int guard = 0; guard < 100 && q().claim(l, kLongLease); ++guard) {
    ++got[l.id];
    if (l.id == x) payload = l.payload;
    EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  }
  for (const BrandedId& id : a) EXPECT_EQ(got[id], 1) << id.str();
  EXPECT_EQ(got[x], 1) << "the contested id was delivered " << got[x] << " times";
  EXPECT_EQ(payload, again == EnqueueStatus::duplicate ? "child" : "again")
      << "enqueue said " << to_string(again) << " but the other admission was delivered";
  std::printf("[ recovery ] enqueuer killed at %-18s: the survivor's enqueue said %s\n", c.failpoint,
              std::string(to_string(again)).c_str());
  EXPECT_FALSE(q().job(x).has_value());
  expect_clean();
}

INSTANTIATE_TEST_SUITE_P(AtEachStep, EnqueuerKilled,
                         ::testing::Values(EnqueueCase{"run.linked", false}, EnqueueCase{"run.appended_first", true},
                                           EnqueueCase{"enqueue.lane_found", false}, EnqueueCase{"enqueue.indexed", false},
                                           EnqueueCase{"enqueue.slot_taken", false}),
                         [](const ::testing::TestParamInfo<EnqueueCase>& info) {
                           return test::point_name(info.param.failpoint);
                         });

// A dead enqueuer's job, left linked and undecided at run.linked, is settled
// by the sweep alone (no survivor names its id): delivered once, fsck clean.
TEST_F(Recovery, AnEnqueuerKilledAtRunLinkedIsSettledByTheSweep) {
  constexpr std::uint32_t kBound = 1000;
  make(kBound);
  const auto a = fill(A, 2);
  const BrandedId x = q().mint();
  const std::string name = seg();
  ForkedChild child([&] {
    auto r = Queue::open(name);
    if (!r) return 3;
    detail::failpoint_arm("run.linked");
    r->enqueue(A, x, "child");
    return 5;
  }, 60);
  child.wait();
  ASSERT_TRUE(child.signaled()) << child.describe();
  const RecoveryInfo before = q().recovery();
  q().advance_clock(kBound);
  q().tick();
  EXPECT_GT(q().recovery().finished, before.finished);
  const auto j = q().job(x);
  std::map<BrandedId, int> got;
  claim_all(got);
  for (const BrandedId& id : a) EXPECT_EQ(got[id], 1) << id.str();
  EXPECT_EQ(got[x], j ? 1 : 0) << "job(x) " << (j ? "found it" : "did not find it") << " before the claims";
  EXPECT_LE(got[x], 1);
  expect_clean();
}

// ---- a claimer stopped between taking a job and leasing it ------------------------------------

class StoppedClaimer : public Recovery, public ::testing::WithParamInterface<bool> {};  // true: continued, false: killed

// A claimer stopped between its take and its lease holds that one job, and
// only until the deadline of the lease it was taking: then a sweep puts the
// job back in its lane, as its lease would have expired. Continued, its
// claim finds its take undone and goes on; killed, nothing more is owed.
TEST_P(StoppedClaimer, HoldsOnlyTheJobItTookUntilItsLeaseDeadline) {
  const bool continued = GetParam();
  make(40);  // sweeps look at it often: a stopped process must never be taken for dead
  std::set<BrandedId> all;
  for (const BrandedId& id : fill(A, 4)) all.insert(id);
  for (const BrandedId& id : fill(B, 3)) all.insert(id);
  SharedBlock<ChildReport> rep;
  const std::string name = seg();
  ForkedChild child([&] {
    auto r = Queue::open(name);
    if (!r) return 3;
    detail::failpoint_arm("claim.taken", 1, detail::FailpointAction::stop);
    Lease l;
    if (!r->claim(l, kLongLease)) return 7;  // its take undone, and nothing left to claim
    tell(*rep, l);
    if (r->complete(l.id, l.token) != AckStatus::ok) return 6;
    rep->done.store(1);
    return 0;
  }, 120);
  ASSERT_TRUE(wait_stopped(child.pid())) << "the child did not stop at claim.taken: " << child.describe();

  const FsckReport during = q().fsck();
  for (const FsckIssue& i : during.issues) EXPECT_EQ(i.invariant, "in-flight") << i.detail;
  EXPECT_FALSE(during.clean()) << "fsck does not name the stopped claimer's step";

  // Before the deadline: the survivor claims everything else, the stopped
  // child's lane included, and new work on that lane; sweeps run; the taken
  // job stays the stopped child's.
  std::map<BrandedId, int> got;
  claim_all(got);
  for (const BrandedId& id : fill(A, 2)) all.insert(id);
  for (int round = 0; round < 3; ++round) {
    q().advance_clock(kLongLease / 4);
    q().tick();
    claim_all(got);
  }
  std::set<BrandedId> missing;
  for (const BrandedId& id : all)
    if (!got.count(id)) missing.insert(id);
  ASSERT_EQ(missing.size(), 1U) << "the survivor did not get every job but the one the stopped claimer took";
  const BrandedId held = *missing.begin();
  for (const auto& [id, n] : got) EXPECT_EQ(n, 1) << id.str();
  const auto hj = q().job(held);
  ASSERT_TRUE(hj.has_value());
  EXPECT_EQ(hj->state, JobState::pending) << "taken, not leased";
  std::uint64_t served_from_its_lane = 0;
  for (const LaneInfo& li : q().snapshot().lanes)
    if (li.group == hj->group) served_from_its_lane = li.served;
  EXPECT_GE(served_from_its_lane, 2U) << "the stopped claimer's lane was not served";
  EXPECT_EQ(q().recovery().finished, 0U) << "something was undone for a process that is only stopped, before its deadline";

  // Past the deadline: the job is back, at its attempt (never leased).
  q().advance_clock(kLongLease);
  q().tick();
  std::map<BrandedId, std::uint32_t> attempts;
  claim_all(got, &attempts);
  EXPECT_EQ(got[held], 1) << "the stopped claimer's take outlived its deadline";
  EXPECT_EQ(attempts[held], 1U);
  EXPECT_GT(q().recovery().finished, 0U);

  if (continued) {
    ASSERT_EQ(::kill(child.pid(), SIGCONT), 0);
    ASSERT_TRUE(child.wait_for(20s)) << "the continued child did not finish";
    EXPECT_TRUE(child.reaped() && WIFEXITED(child.status()) && WEXITSTATUS(child.status()) == 7)
        << "the continued claim leased a job it no longer held: " << child.describe();
    EXPECT_EQ(rep->leases.load(), 0);
  } else {
    child.kill_now();
    child.wait();
    q().advance_clock(1000);
    claim_all(got);
  }
  for (const auto& [id, n] : got) EXPECT_EQ(n, 1) << id.str();
  EXPECT_FALSE(q().job(held).has_value());
  expect_clean();
}

INSTANTIATE_TEST_SUITE_P(ThenContinuedOrKilled, StoppedClaimer, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "continued" : "killed");
                         });

// A child forked without exec that claims through its copy of the parent's
// handle, from the thread that forked (the parent's thread used the handle
// before): the child's take has a thread record of its own. It had the
// forking thread's (the thread cache came across the fork), so the parent's
// next call overwrote the stopped child's intent, and the taken job never
// came back to its lane: no intent named it.
TEST_F(Recovery, AChildClaimingThroughItsCopyOfTheHandleHasAnIntentOfItsOwn) {
  make(40);
  std::set<BrandedId> all;
  for (const BrandedId& id : fill(A, 3)) all.insert(id);
  for (const BrandedId& id : fill(B, 3)) all.insert(id);
  detail::Segment& s = detail::QueueAccess::segment(q());
  ASSERT_NE(s.thread(), nullptr);  // this thread's record, cached
  ForkedChild child([&] {
    detail::failpoint_arm("claim.taken", 1, detail::FailpointAction::stop);
    Lease l;
    if (!q().claim(l, kLongLease)) return 7;  // its take undone meanwhile
    return q().complete(l.id, l.token) == AckStatus::ok ? 0 : 6;
  }, 120);
  ASSERT_TRUE(wait_stopped(child.pid())) << "the child did not stop at claim.taken: " << child.describe();
  std::uint32_t intents = 0;
  for (std::uint32_t i = 0; i < s.threads_used(); ++i) intents += s.threads[i].intent.load() != 0;
  EXPECT_EQ(intents, 1U) << "the stopped child's take is not in a thread record";

  // The parent claims (each claim sets and clears its own intent) and the
  // stopped child's take must stay known: past its deadline it is undone.
  std::map<BrandedId, int> got;
  claim_all(got);
  q().advance_clock(kLongLease + 1000);
  q().tick();
  claim_all(got);
  for (const BrandedId& id : all) EXPECT_EQ(got[id], 1) << id.str() << ": lost with the stopped child's intent";

  ASSERT_EQ(::kill(child.pid(), SIGCONT), 0);
  ASSERT_TRUE(child.wait_for(20s)) << "the continued child did not finish";
  EXPECT_TRUE(child.reaped() && WIFEXITED(child.status()) && WEXITSTATUS(child.status()) == 7)
      << "the continued claim leased a job it no longer held: " << child.describe();
  expect_clean();
}

// The thread record a child took for its copy of the handle is given back
// when the child closes the copy, and the parent's own stays the parent's.
TEST_F(Recovery, AChildsCopyOfTheHandleGivesBackTheThreadRecordItTookAndOnlyThat) {
  make(40);
  fill(A, 2);
  detail::Segment& s = detail::QueueAccess::segment(q());
  ASSERT_NE(s.thread(), nullptr);
  const std::uint32_t index = std::uint32_t(s.thread() - s.threads);
  RawSegment raw(seg());  // a mapping of its own: outlives the child's close of its copy
  auto owned = [&raw] {
    std::uint32_t n = 0;
    for (std::uint32_t i = 0; i < raw.header().thread_capacity; ++i) n += raw.thread(i).owner.load() != 0;
    return n;
  };
  ASSERT_EQ(owned(), 1U);
  detail::ThreadRecord* const mine = &raw.thread(index);
  const std::uint64_t my_owner = mine->owner.load();
  ForkedChild child([&] {
    Lease l;
    if (!q().claim(l, kLongLease) || q().complete(l.id, l.token) != AckStatus::ok) return 3;
    if (owned() != 2) return 4;  // the child's calls took a record of its own
    { Queue copy = std::move(q()); }
    return owned() == 1 && mine->owner.load() == my_owner ? 0 : 5;
  }, 60);
  ASSERT_TRUE(child.wait_for(20s));
  EXPECT_TRUE(child.reaped() && WIFEXITED(child.status()) && WEXITSTATUS(child.status()) == 0) << child.describe();
  EXPECT_EQ(owned(), 1U);
  EXPECT_EQ(mine->owner.load(), my_owner);
  Lease l;
  ASSERT_TRUE(q().claim(l, kLongLease));
  EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  expect_clean();
}

// The thread id a thread caches (the owner of its process record's
// fallback intent while it uses it) is the child's own in a child forked
// without exec, not the id of the thread that forked.
TEST_F(Recovery, AForkedChildsCachedThreadIdIsItsOwn) {
  make(40);
  const std::uint32_t mine = detail::gettid_cached();
  ASSERT_EQ(mine, std::uint32_t(::gettid()));
  ForkedChild child([] { return detail::gettid_cached() == std::uint32_t(::gettid()) ? 0 : 1; }, 60);
  child.wait();
  EXPECT_TRUE(WIFEXITED(child.status()) && WEXITSTATUS(child.status()) == 0) << child.describe();
  EXPECT_EQ(detail::gettid_cached(), mine);
}

// A child forked without exec that claims through its copy of the parent's
// handle and dies holding the lease: the lease comes back at once, as any
// dead holder's, and the child was listed as a process of its own. As the
// parent's, it came back only at its deadline (or when the parent died),
// and anything the child was in the middle of waited as long.
TEST_F(Recovery, AChildThatClaimedThroughItsCopyAndDiedHasItsLeaseBackAtOnce) {
  make(40);
  fill(A, 2);
  SharedBlock<ChildReport> rep;
  ForkedChild child([&] {
    Lease l;
    if (!q().claim(l, kLongLease)) return 3;
    tell(*rep, l);
    bool listed = false;
    for (const ProcessInfo& p : q().processes()) listed = listed || (p.pid == ::getpid() && p.leases == 1);
    rep->stage.store(listed ? 1 : 2);
    ::raise(SIGKILL);
    return 0;
  }, 60);
  child.wait();
  ASSERT_EQ(rep->leases.load(), 1) << child.describe();
  EXPECT_EQ(rep->stage.load(), 1) << "the child was not listed with its lease as a process of its own";
  const BrandedId held = reported_id(*rep, 0);
  for (const ProcessInfo& p : q().processes()) {
    if (p.pid == ::getpid()) {
      EXPECT_EQ(p.leases, 0U) << "the child's lease is in the parent's name";
    }
  }
  q().advance_clock(1000);  // a sweep pass is due (recovery_ms 40), the lease is not (kLongLease)
  EXPECT_EQ(q().tick(), 1U) << "the dead child's lease did not come back before its deadline";
  std::map<BrandedId, int> got;
  claim_all(got);
  EXPECT_EQ(got[held], 1);
  EXPECT_EQ(got.size(), 2U);
  expect_clean();
}

// Thread records in use (owner word set), as a raw look sees them.
std::uint32_t thread_records_owned(RawSegment& raw) {
  std::uint32_t n = 0;
  for (std::uint32_t i = 0; i < raw.header().thread_capacity; ++i) n += raw.thread(i).owner.load() != 0;
  return n;
}

// With no process record free, a copy cannot become the child's own: it
// stays unattached. It ends the leases its parent handed it (complete,
// fail), refuses claims, enqueues and releases (read_only), takes no
// thread record, is not listed as a process, and its close leaves the
// parent's record alone. A job it failed comes back with no tick, its
// delivery counted; the lease it could not release is still the parent's.
TEST_F(Recovery, ACopyThatFindsNoProcessRecordFreeOnlyEndsItsParentsLeases) {
  make(40, 1);
  const auto ids = fill(A, 3);
  RawSegment raw(seg());
  ASSERT_EQ(thread_records_owned(raw), 1U);
  Lease done, back, kept;
  ASSERT_TRUE(q().claim(done, kLongLease));
  ASSERT_TRUE(q().claim(back, kLongLease));
  ASSERT_TRUE(q().claim(kept, kLongLease));
  ForkedChild child([&] {
    Lease l;
    if (q().try_claim(l, kLongLease) != ClaimStatus::read_only) return 3;
    if (q().enqueue(A, q().mint(), "x") != EnqueueStatus::read_only) return 4;
    if (thread_records_owned(raw) != 1) return 5;  // no thread record: none in the parent's name
    for (const ProcessInfo& p : q().processes())
      if (p.pid == ::getpid()) return 6;  // not a process of its own
    if (q().complete(done.id, done.token) != AckStatus::ok) return 7;
    if (q().fail(back.id, back.token, {.delay_ms = 0, .max_attempts = 9}) != FailStatus::retrying) return 8;
    if (q().fail(back.id, back.token, {.delay_ms = 0, .max_attempts = 9}) != FailStatus::stale) return 10;  // ended
    if (q().release(kept.id, kept.token) != AckStatus::read_only) return 9;
    { Queue copy = std::move(q()); }  // closed: the parent's record stays the parent's
    return 0;
  }, 60);
  ASSERT_TRUE(child.wait_for(20s));
  ASSERT_TRUE(child.exited_zero()) << child.describe();
  const auto procs = q().processes();
  ASSERT_EQ(procs.size(), 1U);
  EXPECT_EQ(procs[0].pid, ::getpid());
  EXPECT_EQ(q().complete(done.id, done.token), AckStatus::gone);  // the child's complete stands
  EXPECT_EQ(q().complete(back.id, back.token), AckStatus::stale);  // the child's fail ended the lease
  EXPECT_EQ(q().complete(kept.id, kept.token), AckStatus::ok);     // the refused release left it the parent's
  // The failed job: parked due now, promoted by a sweep pass that the
  // parent's claims run (no tick, no clock moved).
  Lease l;
  ASSERT_TRUE(q().claim_wait(l, kLongLease, 5s)) << "the failed job did not come back";
  EXPECT_EQ(l.id, back.id);
  EXPECT_EQ(l.attempt, back.attempt + 1);
  ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  EXPECT_FALSE(q().claim(l, kLongLease));
  expect_clean();
}

// A copy with no process record free, killed where a fail (or a release)
// would move its job back into its lane in its own name (move.taken).
// Before such copies were unattached, the move was taken as the parent's:
// the slot stayed returning under a live holder, which nobody takes over,
// and the job was lost while the parent lived (found in review, with a
// release; the child died there). Now the copy never makes that move: its
// fail parks the job, and the parent's claims promote it.
TEST_F(Recovery, AnUnattachedCopysFailLeavesNoMoveInItsParentsName) {
  make(40, 1);
  const auto ids = fill(A, 2);
  Lease held;
  ASSERT_TRUE(q().claim(held, kLongLease));
  ForkedChild copy([&] {
    detail::failpoint_arm("move.taken");  // (kills the child if it takes the move)
    return q().fail(held.id, held.token, {.delay_ms = 0, .max_attempts = 9}) == FailStatus::retrying ? 0 : 3;
  }, 60);
  ASSERT_TRUE(copy.wait_for(20s));
  ASSERT_TRUE(copy.exited_zero()) << copy.describe();
  std::map<BrandedId, int> got;
  claim_all_waiting(got);
  for (const auto& id : ids) EXPECT_EQ(got[id], 1) << id.str();
  expect_clean();
}

// A job delivered as often as its attempt count can say (0xFFFF) is
// dead-lettered by a fail that would retry it, whatever its max_attempts,
// and the fail says dead: through a member, with a delay or without, and
// through an unattached copy (whose fail parks). Found in review: the
// member's fail with no delay said retrying of a job it had dead-lettered,
// and every other path retried it for good at the capped count.
TEST_F(Recovery, AFailAtTheAttemptCeilingDeadLettersAndSaysSo) {
  make(40, 1);
  struct Way {
    const char* name;
    std::uint64_t delay;
    bool copy;
  };
  for (const Way& way : {Way{"member, no delay", 0, false}, Way{"member, delay", 5, false},
                         Way{"copy, no delay", 0, true}}) {
    JobInfo j;
    j.id = q().mint();
    j.group = A;
    j.state = JobState::pending;
    j.attempt = detail::SlotWord::kMaxAttempt;
    ASSERT_EQ(q().import_job(j, "x"), EnqueueStatus::enqueued) << way.name;
    Lease held;
    ASSERT_TRUE(q().claim(held, kLongLease)) << way.name;
    ASSERT_EQ(held.attempt, detail::SlotWord::kMaxAttempt) << way.name;
    const FailOptions fo{.delay_ms = way.delay, .max_attempts = 1'000'000};
    FailStatus st = FailStatus::corrupt;
    if (!way.copy) {
      st = q().fail(held.id, held.token, fo);
    } else {
      SharedBlock<ChildReport> said;
      ForkedChild child([&] {
        said->stage.store(int(q().fail(held.id, held.token, fo)));
        return 0;
      }, 60);
      ASSERT_TRUE(child.wait_for(20s)) << way.name;
      ASSERT_TRUE(child.exited_zero()) << way.name << ": " << child.describe();
      st = FailStatus(said->stage.load());
    }
    EXPECT_EQ(st, FailStatus::dead) << way.name;
    q().advance_clock(100);
    q().tick();
    const auto info = q().job(held.id);
    ASSERT_TRUE(info.has_value()) << way.name;
    EXPECT_EQ(info->state, JobState::dead) << way.name;
    EXPECT_EQ(q().purge_dead(), 1U) << way.name;
  }
  expect_clean();
}

// An extend of a lease whose exit has landed in its lane word but is not
// yet applied to its slot (the completer stopped at ack.stepped) says the
// lease is over: gone, as the complete has taken the job. It said ok
// (found in review, with a fail: the next ack then said stale).
TEST_F(Recovery, AnExtendOfALeaseWhoseExitLandedSaysItIsOver) {
  make(40, 2);
  fill(A, 1);
  const std::string name = seg();
  SharedBlock<ChildReport> rep;
  ForkedChild completer([&] {
    auto r = Queue::open(name);  // a member of its own
    Lease l;
    if (!r || !r->claim(l, kLongLease)) return 3;
    tell(*rep, l);
    detail::failpoint_arm("ack.stepped", 1, detail::FailpointAction::stop);
    return r->complete(l.id, l.token) == AckStatus::ok ? 0 : 4;
  }, 60);
  ASSERT_TRUE(wait_stopped(completer.pid())) << completer.describe();
  ASSERT_EQ(rep->leases.load(), 1);
  const BrandedId id = reported_id(*rep, 0);
  const Token token{rep->tokens[0]};
  const AckStatus st = q().extend(id, token, kLongLease);
  ::kill(completer.pid(), SIGCONT);
  ASSERT_TRUE(completer.wait_for(20s));
  EXPECT_TRUE(completer.exited_zero()) << completer.describe();
  EXPECT_EQ(st, AckStatus::gone) << "an extend of a lease whose complete had landed";
  EXPECT_FALSE(q().job(id).has_value());
  expect_clean();
}

// Helpers of the races below: a child stopped at `point` in `call` on the
// segment (it opens its own handle), and the parent's view of its answer;
// the lease they race over (one job of lane A, a 1 s lease).
ForkedChild stopped_in(const std::string& name, const char* point, std::function<int(Queue&)> call) {
  ForkedChild c([name, point, call] {
    auto r = Queue::open(name);
    if (!r) return 3;
    detail::failpoint_arm(point, 1, detail::FailpointAction::stop);
    return call(r.value());
  }, 60);
  EXPECT_TRUE(wait_stopped(c.pid())) << point << ": " << c.describe();
  return c;
}
int finish(ForkedChild& c) {
  ::kill(c.pid(), SIGCONT);
  EXPECT_TRUE(c.wait_for(20s)) << c.describe();
  return c.reaped() && WIFEXITED(c.status()) ? WEXITSTATUS(c.status()) : -1;
}
struct Raced {
  BrandedId id;
  Token token;
};
Raced lease_one_of_a(Queue& q) {
  Lease l;
  EXPECT_TRUE(q.claim(l, 1000));
  return Raced{l.id, l.token};
}
int extend_code(AckStatus st) { return st == AckStatus::ok ? 0 : st == AckStatus::stale ? 10 : st == AckStatus::gone ? 11 : 12; }
int fail_code(FailStatus st) {
  return st == FailStatus::retrying ? 20 : st == FailStatus::dead ? 21 : st == FailStatus::stale ? 22 : 23;
}
// An extend of (id, token) by kLongLease, stopped with the lease's deadline
// checked (its clock reads the lease as running) and its CAS not made.
ForkedChild extender_stopped_at_check(const std::string& name, const BrandedId& id, Token token) {
  return stopped_in(name, "extend.checked", [=](Queue& r) { return extend_code(r.extend(id, token, kLongLease)); });
}

// An extend whose clock read the lease as running, racing an expiry whose
// clock (a moment later) read it as due. Until 2026-12-07 the extend's CAS
// of the slot word could land after the sweep had judged the lease and
// before its step was in the lane word: the extend said ok, and the step
// then took the extended lease back (design.md listed it as a known limit).
// Now the expiry marks, reads the slot word again and steps only while the
// deadline is still the one it judged; the extend, having CASed, looks for
// a mark and, finding one, moves the lane word on ([A6]). The extender is
// stopped with its deadline checked (extend.checked), the clock moves past
// the deadline, and a sweeper is stopped at `at`: before its mark
// (expire.checked), or past its mark and second look but before its lane
// CAS (expire.marked): the extend must keep the lease, and say ok. Or after
// its lane CAS (ack.stepped): the lease is gone, and the extend must say
// so.
struct ExpiryRace {
  const char* at;
  bool kept;
};
void PrintTo(const ExpiryRace& c, std::ostream* os) { *os << c.at; }
class ExtendRacingAnExpiry : public Recovery, public ::testing::WithParamInterface<ExpiryRace> {};

TEST_P(ExtendRacingAnExpiry, TheExtendSaysWhatBecameOfTheLease) {
  make(40, 4);
  fill(A, 1);
  const std::string name = seg();
  const auto [id, token] = lease_one_of_a(q());
  ForkedChild extender = extender_stopped_at_check(name, id, token);
  q().advance_clock(5000);  // the lease is due by every clock from here
  ForkedChild sweeper = stopped_in(name, GetParam().at, [](Queue& r) {
    (void)r.tick();
    return 0;
  });
  const int extended = finish(extender);
  EXPECT_EQ(finish(sweeper), 0);
  if (GetParam().kept) {
    EXPECT_EQ(extended, 0) << "the extend did not say ok";
    q().tick();
    EXPECT_EQ(q().complete(id, token), AckStatus::ok) << "the extended lease was taken back";
    Lease again;
    EXPECT_FALSE(q().claim(again, kLongLease)) << "the job of an extended lease was delivered again";
  } else {
    EXPECT_EQ(extended, 10) << "an extend of a lease taken back said otherwise";
    EXPECT_EQ(q().complete(id, token), AckStatus::stale);
    Lease again;
    ASSERT_TRUE(q().claim(again, kLongLease)) << "the job of a lease taken back was not delivered again";
    EXPECT_EQ(again.id, id);
    EXPECT_EQ(q().complete(again.id, again.token), AckStatus::ok);
  }
  expect_clean();
}

INSTANTIATE_TEST_SUITE_P(Points, ExtendRacingAnExpiry,
                         ::testing::Values(ExpiryRace{"expire.checked", true}, ExpiryRace{"expire.marked", true},
                                           ExpiryRace{"ack.stepped", false}),
                         [](const ::testing::TestParamInfo<ExpiryRace>& i) { return test::point_name(i.param.at); });

// A sweeper stopped past its mark and second look, before its lane CAS
// (expire.marked), keeps its mark. The first extend to find it moves the
// lane word on and voids it; until the review of 2026-12-07 every extend
// moved the word on once more, and 512 of them on a quiet lane (the
// version has 9 bits) brought back the very word the sweeper's CAS
// expects: its step took back a lease extended 512 times, each ok.
TEST_F(Recovery, ExtendsOfALeaseWhoseExpiryIsStoppedNeverBringItsLaneWordBack) {
  make(40, 4);
  fill(A, 1);
  const std::string name = seg();
  const auto [id, token] = lease_one_of_a(q());
  ForkedChild extender = extender_stopped_at_check(name, id, token);
  q().advance_clock(5000);
  ForkedChild sweeper = stopped_in(name, "expire.marked", [](Queue& r) { return int(r.tick()); });
  ASSERT_EQ(finish(extender), 0) << "the first extend";
  // 512 extends in all: had each moved the lane word on, the last would
  // bring back the word the sweeper read (nothing else writes this lane).
  int oks = 1;
  for (int i = 0; i < 511; ++i) oks += q().extend(id, token, kLongLease) == AckStatus::ok;
  EXPECT_EQ(oks, 512);
  EXPECT_EQ(finish(sweeper), 0) << "the sweeper moved a lease";
  EXPECT_EQ(q().complete(id, token), AckStatus::ok) << "a lease extended 512 times was taken back";
  expect_clean();
}

// A fail() whose plan is in (fail.plan_in: a 60 s delay, or the dead
// letters), an extend and an expiry racing it: the expiry finds the plan
// and writes it back as it is, rather than its own mark, and lets the lease
// be (the extend landed). The fail's park step then applies the plan. Until
// the review of 2026-12-07 the expiry's mark replaced the plan, and the
// park step, finding an exit mark, sent the job straight back to its lane.
class FailPlanAndAnExpiry : public Recovery, public ::testing::WithParamInterface<bool> {};
TEST_P(FailPlanAndAnExpiry, ThePlanSurvivesAnExpiryThatLetsTheLeaseBe) {
  const bool dead_plan = GetParam();
  make(40, 4);
  fill(A, 1);
  const std::string name = seg();
  const auto [id, token] = lease_one_of_a(q());
  const FailOptions fo = dead_plan ? FailOptions{.delay_ms = 0, .max_attempts = 1, .error = "plan"}
                                   : FailOptions{.delay_ms = 60000, .max_attempts = 10, .error = "plan"};
  ForkedChild failer = stopped_in(name, "fail.plan_in", [=](Queue& r) { return fail_code(r.fail(id, token, fo)); });
  ForkedChild extender = extender_stopped_at_check(name, id, token);
  q().advance_clock(5000);
  ForkedChild sweeper = stopped_in(name, "expire.checked", [](Queue& r) { return int(r.tick()); });
  EXPECT_EQ(finish(extender), 0);
  EXPECT_EQ(finish(sweeper), 0) << "the sweeper moved a lease";
  EXPECT_EQ(finish(failer), dead_plan ? 21 : 20);
  const auto info = q().job(id);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->state, dead_plan ? JobState::dead : JobState::scheduled);
  Lease again;
  EXPECT_FALSE(q().claim(again, kLongLease)) << "the job of a fail with a plan was delivered again at once";
  expect_clean();
}
INSTANTIATE_TEST_SUITE_P(Plans, FailPlanAndAnExpiry, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& i) { return i.param ? "dead" : "delay"; });

// A fail() whose plan CAS meets an expiry's mark (the sweeper stopped at
// expire.marked), while an extend makes that expiry let the lease be: the
// fail tries its plan again while the slot still holds its lease, and its
// answer is true. Until the review of 2026-12-07 it said stale at the
// first failed CAS, and the lease was still held (a complete then said ok).
TEST_F(Recovery, AFailThatMeetsAnExpirysMarkTriesAgainWhileItHoldsTheLease) {
  make(40, 4);
  fill(A, 1);
  const std::string name = seg();
  const auto [id, token] = lease_one_of_a(q());
  ForkedChild failer = stopped_in(name, "fail.planned", [=](Queue& r) {
    return fail_code(r.fail(id, token, FailOptions{.delay_ms = 60000, .max_attempts = 10, .error = "later"}));
  });
  ForkedChild extender = extender_stopped_at_check(name, id, token);
  q().advance_clock(5000);
  ForkedChild sweeper = stopped_in(name, "expire.marked", [](Queue& r) { return int(r.tick()); });
  const int failed = finish(failer);
  const int extended = finish(extender);
  EXPECT_EQ(finish(sweeper), 0) << "the sweeper moved a lease";
  EXPECT_EQ(failed, 20) << "the fail of a lease it still held";
  EXPECT_NE(extended, 0) << "an extend after the fail said ok";
  EXPECT_NE(q().complete(id, token), AckStatus::ok) << "the lease outlived the fail that said retrying";
  const auto info = q().job(id);
  ASSERT_TRUE(info.has_value());
  EXPECT_EQ(info->state, JobState::scheduled);
  expect_clean();
}

// The void of an expiry's mark is of the very mark the extend saw. An
// extend stops after moving the lane word on (extend.moved), its first
// expiry lets the lease be; the extended deadline passes and a second
// expiry lands its step (stopped at ack.stepped, not applied); then the
// extend resumes and voids. Until the second review of 2026-12-07 every
// expiry of a lease wrote the same mark, the void ate the second one's,
// lane_base ignored its step: the sweep said it took the lease back, the
// lease was still held, and lane A (limit 1) counted none active.
void stop_self(void*) { ::raise(SIGSTOP); }
TEST_F(Recovery, AnExtendsLateVoidLeavesALaterExpirysMarkAlone) {
  make(40, 4);
  fill(A, 2);
  ASSERT_EQ(q().set_limit(A, 1), LaneStatus::ok);
  const std::string name = seg();
  const auto [id, token] = lease_one_of_a(q());
  ForkedChild extender([=] {
    auto r = Queue::open(name);
    if (!r) return 3;
    detail::failpoint_call("extend.checked", stop_self, nullptr);
    detail::failpoint_call("extend.moved", stop_self, nullptr);
    return extend_code(r->extend(id, token, 10000));
  }, 60);
  ASSERT_TRUE(wait_stopped(extender.pid())) << "at extend.checked: " << extender.describe();
  q().advance_clock(5000);  // past the first deadline
  ForkedChild first = stopped_in(name, "expire.marked", [](Queue& r) { return int(r.tick()); });
  ::kill(extender.pid(), SIGCONT);
  ASSERT_TRUE(wait_stopped(extender.pid())) << "at extend.moved: " << extender.describe();
  EXPECT_EQ(finish(first), 0) << "the first expiry let the extended lease be";
  q().advance_clock(10000);  // past the extended deadline too
  ForkedChild second = stopped_in(name, "ack.stepped", [](Queue& r) { return int(r.tick()); });
  EXPECT_EQ(finish(extender), 0);
  EXPECT_EQ(finish(second), 1) << "the second expiry took the lease back";
  const auto info = q().job(id);
  ASSERT_TRUE(info.has_value());
  EXPECT_NE(info->state, JobState::leased) << "the lease a sweep took back is still held";
  EXPECT_EQ(q().complete(id, token), AckStatus::stale);
  // The lane counts what it has out: one lease at most (limit 1), and the
  // jobs come out one at a time.
  for (int i = 0; i < 2; ++i) {
    Lease l;
    ASSERT_TRUE(q().claim(l, kLongLease)) << "claim " << i;
    Lease more;
    EXPECT_FALSE(q().claim(more, kLongLease)) << "a second lease out in a lane of limit 1";
    if (more.token.value != 0) (void)q().complete(more.id, more.token);
    EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  }
  expect_clean();
}

// A leased slot past its deadline whose expiry fails (its lane field
// scribbled: reported corrupt) does not hold next_due in the past: a pass
// that lets a lease be remembers only a deadline still ahead. (Found in the
// second review: every claim then started a pass and reported it again.)
TEST_F(Recovery, ADueLeaseWhoseExpiryFailsDoesNotKeepTheNextPassDueNow) {
  make(40, 4);
  fill(A, 2);
  Lease l;
  ASSERT_TRUE(q().claim(l, 1000));
  detail::Segment& s = detail::QueueAccess::segment(q());
  const std::uint32_t slot = std::uint32_t(l.token.value & ((1ULL << s.slot_bits) - 1));
  ASSERT_EQ(detail::SlotWord::state(detail::slot_load(s, slot)), detail::SlotState::leased);
  s.slot(slot).lane.store(s.lane_count + 5);
  q().advance_clock(5000);
  (void)q().tick();
  EXPECT_GT(s.h->sweep.next_due.load(), detail::segment_now_ms(s)) << "next_due left in the past";
}

// ExtendRacingAnExpiry at the attempt ceiling, where the expiry writes a
// dead-letter plan rather than its mark: the extend must take a plan of
// the lease for an exit under way too, not only a mark.
TEST_F(Recovery, AnExtendRacingAnExpiryAtTheAttemptCeilingKeepsTheLease) {
  make(40, 4);
  JobInfo j;
  j.id = q().mint();
  j.group = A;
  j.state = JobState::pending;
  j.attempt = detail::SlotWord::kMaxAttempt;
  ASSERT_EQ(q().import_job(j, "ceiling"), EnqueueStatus::enqueued);
  const std::string name = seg();
  const auto [id, token] = lease_one_of_a(q());
  ForkedChild extender = extender_stopped_at_check(name, id, token);
  q().advance_clock(5000);
  ForkedChild sweeper = stopped_in(name, "expire.marked", [](Queue& r) { return int(r.tick()); });
  EXPECT_EQ(finish(extender), 0);
  EXPECT_EQ(finish(sweeper), 0) << "the sweeper moved a lease";
  EXPECT_EQ(q().complete(id, token), AckStatus::ok) << "the extended lease was dead-lettered";
  expect_clean();
}

// A consumer parked in claim_wait, nothing else calling, a long recovery
// bound: the copy's fail (parked, due now) makes a sweep pass due and wakes
// it, and the job is delivered well before the next pass of the recovery
// bound would come (recovery_ms / 2 = 10 s; the test waits for it 5 s).
TEST_F(Recovery, AParkedConsumerGetsAnUnattachedCopysFailAtOnce) {
  make(20000, 1);
  fill(A, 1);
  Lease held;
  ASSERT_TRUE(q().claim(held, kLongLease));
  Lease got;
  std::atomic<bool> claimed{false};
  std::thread consumer([&] { claimed = q().claim_wait(got, kLongLease, 30s); });
  // Parked, or about to park: either way the fail's notify must reach it.
  const auto& waiters = detail::QueueAccess::segment(q()).h->waiters;
  const bool parked = eventually([&] { return waiters.load() > 0; });
  ForkedChild copy([&] {
    return q().fail(held.id, held.token, {.delay_ms = 0, .max_attempts = 9}) == FailStatus::retrying ? 0 : 3;
  }, 60);
  const bool woken = eventually([&] { return claimed.load(); }, 5s);
  consumer.join();  // (not woken, it claims at the recovery pass, 10 s on)
  ASSERT_TRUE(parked) << "the consumer never parked";
  ASSERT_TRUE(copy.wait_for(20s));
  ASSERT_TRUE(copy.exited_zero()) << copy.describe();
  ASSERT_TRUE(woken) << "the parked consumer was not woken: it waited for a pass of the recovery bound";
  EXPECT_EQ(got.id, held.id);
}

// A consumer killed while parked in claim_wait, and no sweep yet: the next
// process to attach takes its record (the only one: two records, ours and
// its), and with it the count of the dead one's parked threads out of
// `waiters` (its attach, not a sweep: nothing here claims or ticks).
TEST_F(Recovery, AnAttachThatTakesAKilledParkedConsumersRecordUncountsIt) {
  make(200, 2);
  const auto& waiters = detail::QueueAccess::segment(q()).h->waiters;
  test::kill_a_parked_child(
      seg(),
      [](Queue& r) {
        Lease l;
        r.claim_wait(l, kLongLease, 60s);
      },
      [&] { return waiters.load() == 1; });
  ASSERT_FALSE(HasFatalFailure());
  ASSERT_EQ(waiters.load(), 1u);
  test::attach_a_child(seg());  // takes the dead child's record: no other is free
  ASSERT_FALSE(HasFatalFailure());
  EXPECT_EQ(waiters.load(), 0u) << "the dead consumer is still counted parked";
}

// drop_parked takes out only the count of the incarnation judged dead: a
// sweep that judged an owner dead and reaches the record after another
// process took it over (and parked there) leaves the new owner's count,
// which that owner's attach started afresh; and it never takes waiters
// below 0 (a scribbled count).
TEST_F(Recovery, DropParkedTakesOutOnlyTheCountOfTheIncarnationJudgedDead) {
  make(200);
  detail::Segment& s = detail::QueueAccess::segment(q());
  detail::ProcRecord& p = s.procs[s.proc_count - 1];  // a record nobody holds
  const std::uint32_t kept = s.h->waiters.load();
  s.h->waiters.fetch_add(5);
  p.parked.store((std::uint64_t(8) << 32) | 2);  // incarnation 8's owner parked two threads
  detail::drop_parked(s, p, 7);                   // judged dead as incarnation 7: not this owner's
  EXPECT_EQ(s.h->waiters.load(), kept + 5);
  EXPECT_EQ(p.parked.load(), (std::uint64_t(8) << 32) | 2);
  detail::drop_parked(s, p, 8);
  EXPECT_EQ(s.h->waiters.load(), kept + 3);
  EXPECT_EQ(p.parked.load(), std::uint64_t(8) << 32);
  detail::drop_parked(s, p, 8);  // once only
  EXPECT_EQ(s.h->waiters.load(), kept + 3);
  p.parked.store((std::uint64_t(9) << 32) | 1000);
  detail::drop_parked(s, p, 9);
  EXPECT_EQ(s.h->waiters.load(), 0u) << "a scribbled count takes waiters to 0, no further";
  s.h->waiters.store(kept);
  p.parked.store(0);
}

// repair with a consumer of this process parked (its own threads are let
// through: no force needed). The first version zeroed waiters and the
// record's count under it: woken by the repair, the consumer took both below
// 0 and parked again, and waiters read one less than the consumers parked
// from then on, so an enqueue woke nobody (found in review). repair leaves
// the counts alone now.
TEST_F(Recovery, ARepairUnderAParkedConsumerOfItsOwnProcessLeavesItCounted) {
  make(20000);  // a sleep slice of 10 s
  detail::Segment& s = detail::QueueAccess::segment(q());
  const auto& waiters = s.h->waiters;
  Lease got;
  std::atomic<bool> claimed{false};
  std::thread consumer([&] { claimed = q().claim_wait(got, kLongLease, 30s); });
  ASSERT_TRUE(eventually([&] { return waiters.load() == 1; })) << "never parked";
  auto r = q().repair();
  ASSERT_TRUE(r) << r.error().message;
  // Woken by the repair, it parks again.
  ASSERT_TRUE(eventually([&] { return waiters.load() == 1 && (s.me->parked.load() & 0xFFFFFFFF) == 1; }, 5s))
      << "waiters " << waiters.load() << ", parked " << std::hex << s.me->parked.load();
  const BrandedId id = q().mint();
  ASSERT_EQ(q().enqueue(A, id, "wake"), EnqueueStatus::enqueued);
  EXPECT_TRUE(eventually([&] { return claimed.load(); }, 5s)) << "the enqueue woke nobody: it sleeps out its slice";
  consumer.join();
  EXPECT_EQ(got.id, id);
  EXPECT_EQ(waiters.load(), 0u);
}

// A judge stopped after its look at a record's dead owner and before it
// stores the verdict, while the record goes through 256 attachments and the
// 256th owner, alive, holds a lease and parks in claim_wait. With verdicts
// named by 8 bits of the incarnation, the judge's "dead" was fresh for that
// owner: the same pass took its lease back and its count out of waiters
// (found in review). The pass must leave both.
struct Cycled {
  std::string name;
  detail::Segment* s = nullptr;
  std::uint32_t rec = 0;
  std::uint64_t inc_a = 0;
  std::optional<ForkedChild> b;
  bool done = false;
};
void cycle_while_judged(void* arg) {
  auto& c = *static_cast<Cycled*>(arg);
  if (c.done) return;
  c.done = true;
  // Attach and detach until the next attach's incarnation has A's low 8 bits.
  while (((c.s->procs[c.rec].incarnation.load() + 1) & 0xFF) != (c.inc_a & 0xFF)) {
    if (!Queue::open(c.name)) return;
  }
  const std::string name = c.name;
  c.b.emplace([name] {
    auto q = Queue::open(name);
    if (!q) return 3;
    Lease held, l;
    if (!q->claim(held, kLongLease)) return 4;
    q->claim_wait(l, kLongLease, 60s);
    return 0;
  }, 120);
  (void)eventually([&] { return c.s->h->waiters.load() == 1 || c.b->poll(); });
}

TEST_F(Recovery, AStaleVerdictOf256IncarnationsAgoNeitherTakesALiveOwnersLeaseNorItsParkedCount) {
  make(10000, 2);
  detail::Segment& s = detail::QueueAccess::segment(q());
  const std::string name = seg();
  attach_and_die();
  ASSERT_FALSE(HasFailure());
  Cycled c;
  c.name = name;
  c.s = &s;
  c.rec = s.me_index == 0 ? 1 : 0;
  c.inc_a = s.procs[c.rec].incarnation.load();
  fill(B, 1);  // for B's lease
  q().advance_clock(10000);
  detail::failpoint_call("liveness.judged", cycle_while_judged, &c);
  Lease l;
  const bool got = q().claim(l, kLongLease);
  detail::failpoint_call("liveness.judged", nullptr, nullptr);
  ASSERT_TRUE(c.b.has_value()) << "the pass never judged A";
  ASSERT_FALSE(c.b->poll()) << c.b->describe();
  EXPECT_EQ((s.procs[c.rec].incarnation.load() - c.inc_a) % 256, 0u);
  EXPECT_FALSE(got) << "the live owner's lease was taken back";
  EXPECT_EQ(s.h->waiters.load(), 1u) << "the live, parked owner was taken out of waiters";
  const BrandedId id = q().mint();
  ASSERT_EQ(q().enqueue(A, id, "wake"), EnqueueStatus::enqueued);
  EXPECT_TRUE(eventually([&] { return q().job(id)->state == JobState::leased; }, 5s))
      << "the enqueue woke nobody: the parked owner sleeps out its slice";
  c.b->kill_now();
  c.b->wait();
}

// A count left in waiters with every sleep over (a consumer killed between
// its two increments, which no sweep can see) costs nothing: past
// park_until, notify makes no wake. Before it, every enqueue that rang a
// lane moved wake_seq on and made a futex wake for nobody.
TEST_F(Recovery, ACountLeftInWaitersPastEverySleepMakesNoWake) {
  make(200);
  detail::Segment& s = detail::QueueAccess::segment(q());
  s.h->waiters.store(1);                  // left by nobody we can find
  s.h->park_until.store(0);               // every sleep is over
  EXPECT_EQ(q().snapshot().consumers_parked, 0u);
  const std::uint32_t seq = s.h->wake_seq.load();
  ASSERT_EQ(q().enqueue(A, q().mint(), "x"), EnqueueStatus::enqueued);  // rings A's lane
  EXPECT_EQ(s.h->wake_seq.load(), seq) << "a wake for nobody";
  // A sleep that may not be over yet: a wake.
  s.h->park_until.store(detail::monotonic_us() / 1000 + 60000);
  EXPECT_EQ(q().snapshot().consumers_parked, 1u);
  ASSERT_EQ(q().enqueue(B, q().mint(), "y"), EnqueueStatus::enqueued);  // rings B's lane
  EXPECT_NE(s.h->wake_seq.load(), seq);
  s.h->waiters.store(0);
}

// A consumer held between working out the end of its sleep and its futex
// call (a SIGSTOP, a preemption) until that end and park_until have passed;
// an enqueue then (its notify wakes nobody: every sleep is over, says
// park_until). Released, the consumer must not sleep on: with a timeout
// relative to a clock read before the stall, it slept a whole slice more
// with the job queued (found in review). Its sleep ends at an absolute time
// now. Slices of 2 s; the claim must come well within one.
TEST_F(Recovery, AConsumerHeldBeforeItsSleepPastParkUntilDoesNotSleepOn) {
  make(4000);
  detail::Segment& s = detail::QueueAccess::segment(q());
  test::FailpointGate h;
  detail::failpoint_call("park.sleep", test::FailpointGate::hold, &h);
  std::atomic<bool> claimed{false};
  std::thread consumer([&] {
    test::FailpointGate::arm();
    Lease l;
    claimed = q().claim_wait(l, kLongLease, 30s);
  });
  ASSERT_TRUE(eventually([&] { return h.held.load() == 1; }, 5s)) << "never got to its sleep";
  // Past park_until on the clock notify reads (the coarse one, a tick or
  // so behind the precise one): the enqueue's notify then wakes nobody.
  ASSERT_TRUE(eventually([&] { return detail::monotonic_ms_coarse() > s.h->park_until.load(); }, 10s));
  ASSERT_EQ(q().enqueue(A, q().mint(), "x"), EnqueueStatus::enqueued);
  h.release();
  const bool soon = eventually([&] { return claimed.load(); }, 1s);
  consumer.join();
  detail::failpoint_call("park.sleep", nullptr, nullptr);
  EXPECT_TRUE(soon) << "released, it slept out its 2 s slice with the job queued";
  EXPECT_TRUE(claimed.load());
}

// Two handles whose recovery bounds differ (the header's, scribbled between
// their opens: each keeps what it read). The one with the short bound parks
// after the other: the first version took the other's park_until, further
// ahead than its own sleep could end, for a scribble and lowered it, and
// the other slept through the next notify, a 10 s slice (found in review).
// park_until is never lowered now.
TEST_F(Recovery, AShorterRecoveryBoundDoesNotLowerALongerOnesParkUntil) {
  make(20000, 2);  // q(): slices of 10 s
  detail::Segment& s = detail::QueueAccess::segment(q());
  s.h->recovery_ms = 20;  // read by the next open alone
  auto other = take_the_last_record();
  s.h->recovery_ms = 20000;
  ASSERT_TRUE(other);
  std::atomic<bool> claimed{false};
  std::thread consumer([&] {
    Lease l;
    claimed = q().claim_wait(l, kLongLease, 30s);
  });
  ASSERT_TRUE(eventually([&] { return s.h->waiters.load() == 1; }, 5s));
  const std::uint64_t until = s.h->park_until.load();
  Lease l;
  EXPECT_FALSE(other->claim_wait(l, kLongLease, 30ms));  // parks with slices of 10 ms
  EXPECT_GE(s.h->park_until.load(), until) << "lowered";
  ASSERT_EQ(q().enqueue(A, q().mint(), "x"), EnqueueStatus::enqueued);
  const bool soon = eventually([&] { return claimed.load(); }, 5s);
  consumer.join();
  EXPECT_TRUE(soon) << "q()'s consumer slept through its 10 s slice";
}

// Two threads of a child acking through one unattached copy at once, next
// to refused claims (for TSan; and every job is delivered once after).
TEST_F(Recovery, ThreadsOfAnUnattachedCopyAckTogether) {
  make(40, 1);
  fill(A, 8);
  std::vector<Lease> held(8);
  for (auto& l : held) ASSERT_TRUE(q().claim(l, kLongLease));
  ForkedChild child([&] {
    std::atomic<int> bad{0};
    std::thread t1([&] {
      for (int i = 0; i < 4; ++i) {
        if (q().extend(held[i].id, held[i].token, kLongLease) != AckStatus::ok) ++bad;
        if (q().complete(held[i].id, held[i].token) != AckStatus::ok) ++bad;
      }
    });
    std::thread t2([&] {
      for (int i = 4; i < 8; ++i) {
        Lease l;
        if (q().try_claim(l, kLongLease) != ClaimStatus::read_only) ++bad;
        if (q().fail(held[i].id, held[i].token, {.delay_ms = 0, .max_attempts = 9}) != FailStatus::retrying) ++bad;
      }
    });
    t1.join();
    t2.join();
    return bad.load() == 0 ? 0 : 3;
  }, 60);
  ASSERT_TRUE(child.wait_for(30s));
  ASSERT_TRUE(child.exited_zero()) << child.describe();
  std::map<BrandedId, int> got;
  claim_all_waiting(got);
  EXPECT_EQ(got.size(), 4U);  // the failed ones
  for (int i = 4; i < 8; ++i) EXPECT_EQ(got[held[i].id], 1) << held[i].id.str();
  expect_clean();
}

// claim_wait through a handle that makes no claims waits out its timeout
// and says false, as when nothing is serviceable; try_claim says why
// (read_only). It said false at once, and a loop over it (the worker's
// claimer is one) spun on the CPU (found in review: 8 million calls in
// 300 ms).
TEST_F(Recovery, ClaimWaitThroughAnUnattachedCopyWaitsOutItsTimeout) {
  make(40, 1);
  SharedBlock<ChildReport> said;
  ForkedChild copy([&] {
    Lease l;
    const auto t0 = Clock::now();
    int calls = 0;
    while (Clock::now() - t0 < 300ms) {
      if (q().claim_wait(l, kLongLease, 100ms)) return 3;
      ++calls;
    }
    said->leases.store(calls);
    return 0;
  }, 60);
  ASSERT_TRUE(copy.wait_for(20s));
  ASSERT_TRUE(copy.exited_zero()) << copy.describe();
  EXPECT_LE(said->leases.load(), 4) << "claim_wait(100ms) calls made in 300 ms";
}

// A fork of an unattached copy: the grandchild's copy is pending again,
// finds no record either, and stays unattached: it acks the lease its
// grandparent handed down, refuses claims, and takes no record.
TEST_F(Recovery, AGrandchildOfAnUnattachedCopyStaysUnattached) {
  make(40, 1);
  fill(A, 2);
  RawSegment raw(seg());
  const std::uint32_t owned = thread_records_owned(raw);
  Lease held;
  ASSERT_TRUE(q().claim(held, kLongLease));
  ForkedChild child([&] {
    Lease l;
    if (q().try_claim(l, kLongLease) != ClaimStatus::read_only) return 3;
    ForkedChild grandchild([&] {
      Lease g;
      if (q().try_claim(g, kLongLease) != ClaimStatus::read_only) return 3;
      if (q().release(held.id, held.token) != AckStatus::read_only) return 4;
      if (q().fail(held.id, held.token, {.delay_ms = 0, .max_attempts = 9}) != FailStatus::retrying) return 8;
      if (thread_records_owned(raw) != owned) return 5;
      return 0;
    }, 60);
    if (!grandchild.wait_for(20s)) return 6;
    return grandchild.exited_zero() ? 0 : 7;
  }, 60);
  ASSERT_TRUE(child.wait_for(30s));
  ASSERT_TRUE(child.exited_zero()) << child.describe();
  EXPECT_EQ(q().processes().size(), 1U);
  std::map<BrandedId, int> got;
  claim_all_waiting(got, 500ms);
  EXPECT_EQ(got.size(), 2U);
  expect_clean();
}

// ---- threads beyond the thread records --------------------------------------------------

// Every free thread record of handle q marked as taken by it (as if other
// threads of its process held them): the next thread without one of its own
// writes its intents into the process record's fallback, for one call at a
// time. How many were marked.
std::uint32_t use_up_thread_records(Queue& q) {
  detail::Segment& s = detail::QueueAccess::segment(q);
  const std::uint64_t owner = detail::ThreadOwner::make(s.me_index, s.me->incarnation.load());
  std::uint32_t n = 0;
  for (std::uint32_t i = 0; i < s.thread_count; ++i) {
    std::uint64_t free = 0;
    if (s.threads[i].owner.compare_exchange_strong(free, owner)) ++n;
  }
  detail::raise_threads_used(*s.h, s.thread_count);
  return n;
}

// The hang found on 2026-12-05: a copy with no process record free claimed
// through its parent record's fallback intent, and one killed inside its
// take (claim.taken) left that fallback held for good, so a second copy's
// claim never returned. Now such a copy's claim refuses before any take,
// and the parent's threads without a thread record of their own still
// claim through the fallback.
TEST_F(Recovery, AnUnattachedCopyNeverHoldsItsParentsFallbackIntent) {
  make(40, 1);
  const auto ids = fill(A, 2);
  for (int k = 0; k < 2; ++k) {
    ForkedChild copy([&] {
      detail::failpoint_arm("claim.taken", 1, detail::FailpointAction::stop);
      Lease l;
      return q().try_claim(l, kLongLease) == ClaimStatus::read_only ? 0 : 3;
    }, 60);
    ASSERT_TRUE(copy.wait_for(20s)) << "copy " << k << " stopped in a take: " << copy.describe();
    ASSERT_TRUE(copy.exited_zero()) << copy.describe();
  }
  ASSERT_GT(use_up_thread_records(q()), 0U);
  std::map<BrandedId, int> got;
  std::thread parent_thread([&] { claim_all(got); });  // no thread record to be had: the fallback
  parent_thread.join();
  for (const auto& id : ids) EXPECT_EQ(got[id], 1) << id.str();
}


// Threads that find no thread record take turns at the process record's
// fallback intent: each take is named there while it is in flight, and
// everything is delivered once.
TEST_F(Recovery, ThreadsWithoutAThreadRecordTakeTurnsAtTheProcessRecordsFallbackIntent) {
  make(40);
  std::set<BrandedId> all;
  for (const BrandedId& id : fill(A, 20)) all.insert(id);
  for (const BrandedId& id : fill(B, 20)) all.insert(id);
  ASSERT_GT(use_up_thread_records(q()), 0U);
  detail::Segment& s = detail::QueueAccess::segment(q());
  struct Seen {
    detail::Segment* s;
    std::atomic<int> in_fallback{0}, elsewhere{0};
  } seen{&s};
  detail::failpoint_call("claim.taken", [](void* p) {
    Seen& v = *static_cast<Seen*>(p);
    const std::uint64_t in = v.s->me->intent.load();
    const bool mine = v.s->me->intent_tid.load() == std::uint64_t(::gettid());
    (in != 0 && mine ? v.in_fallback : v.elsewhere).fetch_add(1);
  }, &seen);
  std::mutex mu;
  std::map<BrandedId, int> got;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&] {
      Lease l;
      for (int guard = 0; guard < 1000 && q().claim(l, kLongLease); ++guard) {
        EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
        std::lock_guard g(mu);
        ++got[l.id];
      }
    });
  for (auto& t : threads) t.join();
  detail::failpoint_call("claim.taken", nullptr, nullptr);
  EXPECT_EQ(seen.in_fallback.load(), 40) << "a take not named in the fallback intent by its thread";
  EXPECT_EQ(seen.elsewhere.load(), 0);
  for (const BrandedId& id : all) EXPECT_EQ(got[id], 1) << id.str();
  EXPECT_EQ(s.me->intent_tid.load(), 0U) << "the fallback was left taken";
}

// A process killed in the middle of a take made through the fallback
// intent: the sweep finds the take in its process record and puts the job
// back.
TEST_F(Recovery, ATakeOfAThreadWithoutAThreadRecordKilledMidClaimIsUndone) {
  make(40);
  std::set<BrandedId> all;
  for (const BrandedId& id : fill(A, 3)) all.insert(id);
  ASSERT_TRUE(killed_at("claim.taken", [](Queue& r) {
    use_up_thread_records(r);
    Lease l;
    r.claim(l, kLongLease);
  }));
  detail::Segment& s = detail::QueueAccess::segment(q());
  std::uint32_t named = 0;
  for (std::uint32_t i = 0; i < s.proc_count; ++i) named += s.procs[i].intent.load() != 0;
  ASSERT_EQ(named, 1U) << "the take was not made through a process record's fallback intent";
  std::map<BrandedId, int> got;
  for (int pass = 0; pass < 5 && got.size() < all.size(); ++pass) {
    q().advance_clock(100);
    q().tick();
    claim_all(got);
  }
  for (const BrandedId& id : all) EXPECT_EQ(got[id], 1) << id.str() << ": the dead fallback take was not undone";
  EXPECT_GT(q().recovery().finished, 0U);
  expect_clean();
}

// ---- copies of a handle in a child forked without exec ---------------------------------

struct ForkSync {
  std::atomic<int> child{0};
  std::atomic<int> parent{0};
  std::atomic<std::uint32_t> rec{0};
};
// A child's end in these tests: says it is ready (child 1), waits for the
// parent's word (parent 1), closes its copy q, says so (child 2).
int close_copy_when_told(Queue& q, ForkSync& sync) {
  sync.child = 1;
  if (!eventually([&] { return sync.parent.load() == 1; })) return 9;
  { Queue copy = std::move(q); }
  sync.child = 2;
  return 0;
}
// In a child: a call that writes makes the copy q the child's attachment,
// and the calling thread's thread record (the child's own) goes in sync.rec.
void adopt_and_tell_record(Queue& q, ForkSync& sync) {
  q.tick();
  detail::Segment& cs = detail::QueueAccess::segment(q);
  sync.rec = std::uint32_t(cs.thread() - cs.threads);
}

// A thread of this process that takes its thread record on handle s (its
// index: index()) and keeps it, alive, until release() or destruction.
class RecordHolder {
 public:
  explicit RecordHolder(detail::Segment& s)
      : t_([this, &s] {
          taken_.set_value(std::uint32_t(s.thread() - s.threads));
          go_.acquire();
        }),
        index_(taken_.get_future().get()) {}
  ~RecordHolder() { release(); }
  std::uint32_t index() const noexcept { return index_; }
  void release() {
    if (!t_.joinable()) return;
    go_.release();
    t_.join();
  }

 private:
  std::promise<std::uint32_t> taken_;
  std::binary_semaphore go_{0};
  std::thread t_;
  std::uint32_t index_;
};

// A record a child's thread took through a copy and gave back when it
// exited, then taken by a thread of the parent: the child's close of its
// copy leaves it alone (found in review: the child's records were in the
// parent's name, and the close gave back a live thread's record).
TEST_F(Recovery, AChildsCloseOfItsCopyLeavesARecordItGaveBackAndTheParentTookAlone) {
  make(40);
  detail::Segment& s = detail::QueueAccess::segment(q());
  ASSERT_NE(s.thread(), nullptr);
  RawSegment raw(seg());
  SharedBlock<ForkSync> sync;
  ForkedChild child([&] {
    std::thread t([&] { adopt_and_tell_record(q(), *sync); });
    t.join();  // its record given back (owner 0), still in the copy's list
    return close_copy_when_told(q(), *sync);
  }, 60);
  ASSERT_TRUE(eventually([&] { return sync->child.load() == 1; }));
  const std::uint32_t r = sync->rec.load();
  RecordHolder holder(s);
  const std::uint32_t got = holder.index();
  ASSERT_EQ(got, r) << "the parent thread took another record";
  const std::uint64_t owner = raw.thread(r).owner.load();
  ASSERT_NE(owner, 0U);
  sync->parent = 1;
  ASSERT_TRUE(child.wait_for(20s));
  EXPECT_EQ(raw.thread(r).owner.load(), owner) << "the child's close gave back the parent thread's live record";
  std::uint32_t got2 = ~0U;
  std::thread([&] { got2 = std::uint32_t(s.thread() - s.threads); }).join();
  EXPECT_NE(got2, got) << "two live threads of the parent were handed one thread record";
}

// After the parent detached and another attachment took its process
// record, the child's close of its copy leaves that attachment's thread
// records alone (found in review).
TEST_F(Recovery, AChildsCloseOfItsCopyAfterItsParentDetachedLeavesTheNextAttachmentsRecordsAlone) {
  make(40, 2);
  RawSegment raw(seg());
  SharedBlock<ForkSync> sync;
  ForkedChild child([&] {
    adopt_and_tell_record(q(), *sync);
    return close_copy_when_told(q(), *sync);
  }, 60);
  ASSERT_TRUE(eventually([&] { return sync->child.load() == 1; }));
  const std::uint32_t r = sync->rec.load();
  ASSERT_LT(r, raw.header().thread_capacity);
  ASSERT_NE(raw.thread(r).owner.load(), 0U);
  { Queue gone = std::move(q()); }  // the parent detaches
  auto q2 = Queue::open(seg());
  ASSERT_TRUE(q2.ok());
  detail::Segment& s2 = detail::QueueAccess::segment(q2.value());
  ASSERT_TRUE(s2.me != nullptr);
  RecordHolder holder(s2);
  const std::uint32_t got = holder.index();
  EXPECT_NE(got, r) << "the new attachment took the live child's record";
  const std::uint64_t owner = raw.thread(got).owner.load();
  ASSERT_NE(owner, 0U);
  sync->parent = 1;
  ASSERT_TRUE(child.wait_for(20s));
  EXPECT_TRUE(child.exited_zero()) << child.describe();
  EXPECT_EQ(raw.thread(got).owner.load(), owner) << "the child's close gave back another attachment's live record";
  EXPECT_EQ(raw.thread(r).owner.load(), 0U) << "the child's close did not give back its own record";
}

// Every call that writes makes a pending copy the child's own attachment
// first (the gate is written in each of them: a call without it would
// write in its parent's name, as every copy did before 3a53e79). A child
// forked afresh for each call makes that call alone through its copy, and
// is then listed as a process of its own. (`complete` makes no adoption,
// by design: it leaves nothing in anyone's name.)
TEST_F(Recovery, EveryCallThatWritesMakesTheCopyTheChildsOwn) {
  make(40);
  fill(A, 8);
  Lease held;
  ASSERT_TRUE(q().claim(held, kLongLease));
  using Call = std::function<void(Queue&)>;
  const std::vector<std::pair<const char*, Call>> calls = {
      {"enqueue", [](Queue& c) { (void)c.enqueue(B, c.mint(), "x"); }},
      {"claim", [](Queue& c) { Lease l; (void)c.claim(l, kLongLease); }},
      {"try_claim", [](Queue& c) { Lease l; (void)c.try_claim(l, kLongLease); }},
      {"claim_wait", [](Queue& c) { Lease l; (void)c.claim_wait(l, kLongLease, 0ms); }},
      {"claim_batch", [](Queue& c) { std::vector<Lease> l(2); (void)c.claim_batch(l, kLongLease); }},
      {"claim_lane_batch", [](Queue& c) { std::vector<Lease> l(2); (void)c.claim_lane_batch(l, kLongLease); }},
      {"fail", [&](Queue& c) { (void)c.fail(held.id, held.token); }},
      {"release", [&](Queue& c) { (void)c.release(held.id, held.token); }},
      {"extend", [&](Queue& c) { (void)c.extend(held.id, held.token, kLongLease); }},
      {"release_all", [](Queue& c) { (void)c.release_all(); }},
      {"requeue_dead", [&](Queue& c) { (void)c.requeue_dead(held.id); }},
      {"requeue_all_dead", [](Queue& c) { (void)c.requeue_all_dead(); }},
      {"purge_dead", [](Queue& c) { (void)c.purge_dead(); }},
      {"pause", [](Queue& c) { (void)c.pause(A); }},
      {"resume", [](Queue& c) { (void)c.resume(A); }},
      {"pause_all", [](Queue& c) { (void)c.pause_all(); }},
      {"resume_all", [](Queue& c) { (void)c.resume_all(); }},
      {"writable", [](Queue& c) { (void)c.writable(); }},
      {"set_limit", [](Queue& c) { (void)c.set_limit(A, 5); }},
      {"clear_limit", [](Queue& c) { (void)c.clear_limit(A); }},
      {"set_weight", [](Queue& c) { (void)c.set_weight(A, 2); }},
      {"drain", [](Queue& c) { (void)c.drain(B); }},
      {"reassign", [&](Queue& c) { (void)c.reassign(held.id, B); }},
      {"tick", [](Queue& c) { (void)c.tick(); }},
      {"repair", [](Queue& c) { (void)c.repair(false); }},  // refused: the parent is attached
  };
  for (const auto& [name, call] : calls) {
    ForkedChild child([&] {
      call(q());
      for (const ProcessInfo& p : q().processes())
        if (p.pid == ::getpid()) return 0;
      return 2;  // still its parent's
    }, 60);
    ASSERT_TRUE(child.wait_for(20s)) << name;
    EXPECT_TRUE(child.exited_zero()) << name << ": " << child.describe();
  }
}

// The same calls through a copy that finds no process record free: each
// either ends the lease its parent handed it, as its parent's, or refuses
// and changes nothing (read_only, 0, no effect); none takes a thread record
// or a process record. (Found 2026-12-05: such copies went on as their
// parents', and one killed in the middle of a step hung or lost jobs.)
TEST_F(Recovery, EveryCallThroughAnUnattachedCopyEndsALeaseOrRefuses) {
  make(40, 1);
  const auto ids = fill(A, 40);
  RawSegment raw(seg());
  const std::uint32_t owned = thread_records_owned(raw);
  Lease held;
  using Call = std::function<std::string(Queue&)>;
  auto str = [](auto st) { return std::string(to_string(st)); };
  const std::vector<std::tuple<const char*, Call, const char*>> calls = {
      {"enqueue", [&](Queue& c) { return str(c.enqueue(B, c.mint(), "x")); }, "read_only"},
      {"claim", [](Queue& c) { Lease l; return std::to_string(c.claim(l, kLongLease)); }, "0"},
      {"try_claim", [&](Queue& c) { Lease l; return str(c.try_claim(l, kLongLease)); }, "read_only"},
      {"claim_wait", [](Queue& c) { Lease l; return std::to_string(c.claim_wait(l, kLongLease, 0ms)); }, "0"},
      {"claim_batch", [](Queue& c) { std::vector<Lease> l(2); return std::to_string(c.claim_batch(l, kLongLease)); }, "0"},
      {"claim_lane_batch",
       [](Queue& c) { std::vector<Lease> l(2); return std::to_string(c.claim_lane_batch(l, kLongLease)); }, "0"},
      {"complete", [&](Queue& c) { return str(c.complete(held.id, held.token)); }, "ok"},
      {"fail", [&](Queue& c) { return str(c.fail(held.id, held.token, {.delay_ms = 0, .max_attempts = 9})); }, "retrying"},
      {"release", [&](Queue& c) { return str(c.release(held.id, held.token)); }, "read_only"},
      {"extend", [&](Queue& c) { return str(c.extend(held.id, held.token, kLongLease)); }, "ok"},
      {"release_all", [](Queue& c) { return std::to_string(c.release_all()); }, "0"},
      {"requeue_dead", [&](Queue& c) { return str(c.requeue_dead(held.id)); }, "read_only"},
      {"requeue_all_dead", [](Queue& c) { return std::to_string(c.requeue_all_dead()); }, "0"},
      {"purge_dead", [](Queue& c) { return std::to_string(c.purge_dead()); }, "0"},
      {"pause", [&](Queue& c) { return str(c.pause(A)); }, "read_only"},
      {"resume", [&](Queue& c) { return str(c.resume(A)); }, "read_only"},
      {"pause_all", [&](Queue& c) { return str(c.pause_all()); }, "read_only"},
      {"resume_all", [&](Queue& c) { return str(c.resume_all()); }, "read_only"},
      {"writable", [](Queue& c) { return std::to_string(c.writable()); }, "0"},
      {"set_limit", [&](Queue& c) { return str(c.set_limit(A, 5)); }, "read_only"},
      {"clear_limit", [&](Queue& c) { return str(c.clear_limit(A)); }, "read_only"},
      {"set_weight", [&](Queue& c) { return str(c.set_weight(A, 2)); }, "read_only"},
      {"drain", [](Queue& c) { return std::to_string(c.drain(A)); }, "0"},
      {"reassign", [&](Queue& c) { return str(c.reassign(ids.back(), B)); }, "read_only"},
      {"tick", [](Queue& c) { return std::to_string(c.tick()); }, "0"},
      {"repair", [](Queue& c) { auto r = c.repair(true); return std::string(r ? "repaired" : "refused"); }, "refused"},
  };
  SharedBlock<ChildReport> said;
  std::map<BrandedId, int> completed;  // by the copies and by this process
  for (const auto& [name, call, want] : calls) {
    ASSERT_TRUE(q().claim(held, kLongLease)) << name;
    std::memset(said->ids[0], 0, sizeof said->ids[0]);
    ForkedChild child([&] {
      const std::string got = call(q());
      std::snprintf(said->ids[0], sizeof said->ids[0], "%s", got.c_str());
      return 0;
    }, 60);
    ASSERT_TRUE(child.wait_for(20s)) << name;
    ASSERT_TRUE(child.exited_zero()) << name << ": " << child.describe();
    EXPECT_STREQ(said->ids[0], want) << name;
    EXPECT_EQ(q().processes().size(), 1U) << name << ": the copy took a process record";
    EXPECT_EQ(thread_records_owned(raw), owned) << name << ": the copy took a thread record";
    const std::string_view n = name;
    // The lease is still ours unless the copy ended it.
    const AckStatus mine = q().complete(held.id, held.token);
    EXPECT_EQ(mine, n == "complete" ? AckStatus::gone : n == "fail" ? AckStatus::stale : AckStatus::ok) << name;
    if (mine == AckStatus::ok || n == "complete") ++completed[held.id];
  }
  // Nothing refused changed anything: no lane paused, limited, weighted or
  // made, no job moved or added; the jobs the copies sent back come back.
  const Snapshot snap = q().snapshot();
  EXPECT_FALSE(snap.paused);
  for (const LaneInfo& li : snap.lanes) {
    EXPECT_NE(li.group, B);  // (the enqueue's, the reassign's)
    EXPECT_FALSE(li.paused);
    EXPECT_EQ(li.limit, 0U);
    EXPECT_EQ(li.weight, 1U);
  }
  claim_all_waiting(completed);
  EXPECT_EQ(completed.size(), ids.size());
  for (const BrandedId& id : ids) EXPECT_EQ(completed[id], 1) << id.str();
  expect_clean();
}

// A copy that found no process record free looks again at a call that
// writes, at most once a second, and becomes the child's own attachment
// once a record is free. (Until 2026-12-05 it stayed unattached for its
// life: writable() false and every write refused, with records free.)
TEST_F(Recovery, AnUnattachedCopyBecomesTheChildsOwnOnceARecordIsFree) {
  make(40, 2);
  std::optional<Queue> other = take_the_last_record();  // the table is full
  ASSERT_TRUE(other);
  struct Steps {
    std::atomic<int> refused{0};  // the child: its copy found no record
    std::atomic<int> freed{0};    // the parent: a record is free
    // The child's write right after: 1 refused within the second after the
    // failed look began (as it must be), 2 not refused within it, 3 made
    // later than that and refused, 4 made later and enqueued (a slow
    // machine: nothing to judge).
    std::atomic<int> early{0};
  };
  SharedBlock<Steps> steps;
  ForkedChild child([&] {
    // Before the look: its retry time is set after it, so a write within
    // 990 ms of this (the time is whole ms) is before the retry time.
    const auto looked = std::chrono::steady_clock::now();
    if (q().enqueue(B, q().mint(), "x") != EnqueueStatus::read_only) return 2;
    if (q().writable()) return 3;
    steps->refused.store(1);
    if (!test::eventually([&] { return steps->freed.load() != 0; }, 20s)) return 8;
    const EnqueueStatus y = q().enqueue(B, q().mint(), "y");
    const bool within = std::chrono::steady_clock::now() - looked < 990ms;
    steps->early.store(within ? (y == EnqueueStatus::read_only ? 1 : 2)
                              : (y == EnqueueStatus::enqueued ? 4 : 3));
    if (!test::eventually([&] { return q().writable(); }, 10s)) return 7;
    if (q().enqueue(B, q().mint(), "z") != EnqueueStatus::enqueued) return 5;
    for (const ProcessInfo& p : q().processes())
      if (p.pid == ::getpid()) return 0;
    return 6;  // still its parent's
  }, 60);
  ASSERT_TRUE(test::eventually([&] { return steps->refused.load() != 0 || child.poll(); }, 20s));
  ASSERT_EQ(steps->refused.load(), 1) << child.describe();
  other.reset();  // detaches: one record free
  steps->freed.store(1);
  // Once the child has made its early write, its retry time is passed on
  // the segment clock rather than waited out.
  ASSERT_TRUE(test::eventually([&] { return steps->early.load() != 0 || child.poll(); }, 20s));
  q().advance_clock(detail::Segment::kCopyRetryMs);
  ASSERT_TRUE(child.wait_for(20s));
  EXPECT_TRUE(child.exited_zero()) << child.describe();
  const int early = steps->early.load();
  EXPECT_NE(early, 2) << "looked again within a second of its last look";
  // Its jobs enqueued as the child's own are there; the refused ones are not.
  std::vector<std::string> want = {"z"};
  if (early == 4) want.insert(want.begin(), "y");
  for (const std::string& payload : want) {
    Lease l;
    ASSERT_TRUE(q().claim(l, kLongLease)) << payload;
    EXPECT_EQ(l.group, B);
    EXPECT_EQ(l.payload, payload);
    EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  }
  Lease none;
  EXPECT_FALSE(q().claim(none, kLongLease));
  expect_clean();
}

// While the child's copy is attached by a look again, a thread of the
// child goes on extending the lease its parent handed it (either thread's
// call may be the one that attaches): every extend is answered ok, before
// the adoption and after, and the lease is still the parent's to complete.
// (A check of the record that extend, fail and repair make after a refused
// look reads it atomically, me_now: an adoption in another thread stores it.
// This test does not force that interleaving; review found it.)
TEST_F(Recovery, AnUnattachedCopyExtendsItsParentsLeaseWhileAnotherThreadAttachesIt) {
  make(40, 2);
  fill(A, 2);
  Lease held;
  ASSERT_TRUE(q().claim(held, kLongLease));
  std::optional<Queue> other = take_the_last_record();
  ASSERT_TRUE(other);
  SharedBlock<CopySteps> steps;
  ForkedChild child([&] {
    if (q().writable()) return 2;  // the table is full: unattached
    std::atomic<bool> stop{false};
    std::atomic<int> extends{0}, not_ok{0};
    std::thread extender([&] {
      while (!stop.load()) {
        if (q().extend(held.id, held.token, kLongLease) != AckStatus::ok) not_ok.fetch_add(1);
        extends.fetch_add(1);
      }
    });
    steps->ready.store(1);
    if (!test::eventually([&] { return steps->freed.load() != 0; }, 20s)) return 8;
    const bool attached = test::eventually([&] { return q().writable(); }, 10s);
    const int at = extends.load();
    test::eventually([&] { return extends.load() > at + 10; }, 10s);  // some after the adoption
    stop.store(true);
    extender.join();
    if (!attached) return 3;
    if (not_ok.load() != 0) return 4;
    return 0;
  }, 60);
  ASSERT_TRUE(free_a_record_when_ready(child, *steps, other)) << child.describe();
  ASSERT_TRUE(child.wait_for(30s));
  EXPECT_TRUE(child.exited_zero()) << child.describe();
  EXPECT_EQ(q().complete(held.id, held.token), AckStatus::ok);
  expect_clean();
}

// A claim_wait through a copy that is unattached when it starts (every
// process record taken) claims once another thread of the child attaches
// the copy, rather than waiting out its timeout and saying false (as it did
// until 2026-12-06: the copy was judged once, at the call's start).
TEST_F(Recovery, AClaimWaitThroughAnUnattachedCopyClaimsOnceTheCopyIsAttached) {
  make(40, 2);
  const auto jobs = fill(A, 1);
  std::optional<Queue> other = take_the_last_record();
  ASSERT_TRUE(other);
  SharedBlock<CopySteps> steps;
  ForkedChild child([&] {
    if (q().writable()) return 2;  // the table is full: unattached
    Lease l;
    std::atomic<bool> got{false};
    std::thread waiter([&] { got.store(q().claim_wait(l, kLongLease, 30s)); });
    steps->ready.store(1);  // its wait begun (or about to)
    if (!test::eventually([&] { return steps->freed.load() != 0; }, 20s)) return 8;
    // This thread's look attaches the copy (a record is free, the retry time passed).
    if (!test::eventually([&] { return q().writable(); }, 10s)) return 3;
    waiter.join();
    if (!got.load()) return 4;  // waited its whole timeout, or refused
    if (l.id != jobs[0]) return 5;
    return q().complete(l.id, l.token) == AckStatus::ok ? 0 : 6;
  }, 90);
  ASSERT_TRUE(free_a_record_when_ready(child, *steps, other)) << child.describe();
  ASSERT_TRUE(child.wait_for(60s));
  EXPECT_TRUE(child.exited_zero()) << child.describe();
  Lease l;
  EXPECT_FALSE(q().claim(l, kLongLease)) << "the job was left for the parent: " << l.id.str();
  expect_clean();
}

// Children that call through their copies and end by _exit (or are
// killed) hold no thread record once they are gone: they took theirs in
// their own names (found in review: in the parent's, each leaked one while
// the parent lived).
TEST_F(Recovery, ChildrenThatCallThroughCopiesAndExitHoldNoThreadRecords) {
  make(40, 2);  // 64 thread records
  detail::Segment& s = detail::QueueAccess::segment(q());
  ASSERT_NE(s.thread(), nullptr);
  const std::uint32_t children = s.thread_count + 6;
  for (std::uint32_t k = 0; k < children; ++k) {
    fill(A, 1);  // (64 slots: one job a child)
    ForkedChild child([&] {
      Lease l;
      if (!q().claim(l, kLongLease)) return 3;
      if (detail::QueueAccess::segment(q()).thread() == nullptr) return 6;  // none left: leaked
      return q().complete(l.id, l.token) == AckStatus::ok ? 0 : 4;
    }, 60);
    ASSERT_TRUE(child.wait_for(20s));
    ASSERT_TRUE(child.exited_zero()) << "child " << k << " of " << children << ": " << child.describe();
  }
  expect_clean();
}

// With a limit of 1, a stopped claimer's take fills the lane's limit: the
// lane waits for that take's lease deadline, no longer (as it would for a
// stopped holder's lease), then every job of it is delivered once.
TEST_F(Recovery, AStoppedTakerHoldsALimitedLaneOnlyUntilItsDeadline) {
  make(40);
  ASSERT_EQ(q().set_limit(A, 1), LaneStatus::ok);
  const auto a = fill(A, 3);
  const std::string name = seg();
  constexpr std::uint32_t kLease = 5'000;
  ForkedChild child([&] {
    auto r = Queue::open(name);
    if (!r) return 3;
    detail::failpoint_arm("claim.taken", 1, detail::FailpointAction::stop);
    Lease l;
    return r->claim(l, kLease) ? 0 : 7;
  }, 120);
  ASSERT_TRUE(wait_stopped(child.pid())) << child.describe();
  Lease l;
  q().advance_clock(kLease / 2);
  q().tick();
  EXPECT_FALSE(q().claim(l, kLongLease)) << "the limit let a second job out while the take holds the lane's one";
  q().advance_clock(kLease);
  q().tick();
  std::map<BrandedId, int> got;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(q().claim(l, kLongLease)) << "lane A is still held by the stopped taker (claim " << i << ")";
    ++got[l.id];
    EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  }
  for (const BrandedId& id : a) EXPECT_EQ(got[id], 1) << id.str();
  child.kill_now();
  child.wait();
  q().advance_clock(1000);  // its death is judged: its stale intent (its take undone) is cleared
  expect_clean();
}

// ---- holders that look dead through a raw mapping (one process) -------------------------------

class DeadLooking : public Recovery {
 protected:
  Queue second() {
    auto r = Queue::open(seg());
    EXPECT_TRUE(r.ok());
    return std::move(r.value());
  }
  // A second handle (a process of its own as the segment sees it) holding
  // a lease of the oldest of `jobs` jobs in lane A, in a segment of
  // recovery_ms 500.
  struct Holding {
    Queue other;
    Lease lease;
  };
  Holding second_holds_a_lease(int jobs) {
    make(500);
    fill(A, jobs);
    Holding h{second(), {}};
    EXPECT_TRUE(h.other.claim(h.lease, 60000)) << "the second handle claimed nothing";
    return h;
  }
  // The process record (index) holding the first leased slot.
  static std::uint32_t holder_record(RawSegment& raw) {
    const std::uint32_t slot = raw.find_slot(detail::SlotState::leased);
    EXPECT_NE(slot, ~0U);
    const std::uint32_t h = detail::Holder::index1(detail::SlotWord::holder(raw.slot_word_value(slot)));
    EXPECT_GE(h, 1U);
    return h - 1;
  }
};

TEST_F(DeadLooking, ALiveHolderKeepsItsLease) {
  auto [other, l] = second_holds_a_lease(2);
  ASSERT_FALSE(HasFailure());
  q().advance_clock(1000);
  EXPECT_EQ(q().tick(), 0U) << "a live holder's unexpired lease was taken";
  EXPECT_EQ(q().recovery().runs, 0U);
  EXPECT_EQ(other.complete(l.id, l.token), AckStatus::ok);
}

TEST_F(DeadLooking, LeasesOfAHolderThatLooksDeadComeBackAndItsLateAcksAreFenced) {
  make(500);
  const auto ids = fill(A, 3);
  Queue other = second();
  Lease held[2];
  ASSERT_TRUE(other.claim(held[0], 60000));
  ASSERT_TRUE(other.claim(held[1], 60000));
  RawSegment raw(seg());
  const std::uint32_t rec = holder_record(raw);
  // Judged by pid and start time (a record without a liveness lock, as one
  // attached where OFD locks do not work): its pid is ours, but its start
  // time names another process: dead.
  ASSERT_TRUE(test::set_liveness_lock(other, F_UNLCK));
  raw.proc(rec).owner.fetch_and(~detail::kOwnerLocked);
  raw.proc(rec).start_time += 1;

  EXPECT_EQ(q().tick(), 2U);
  const RecoveryInfo r = q().recovery();
  EXPECT_EQ(r.runs, 1U);
  EXPECT_EQ(r.jobs, 2U);
  EXPECT_EQ(r.last_jobs, 2U);
  EXPECT_EQ(r.last_pid, int(::getpid()));
  // The holder was only slow: its late acks change nothing.
  EXPECT_EQ(other.complete(held[0].id, held[0].token), AckStatus::stale);
  EXPECT_EQ(other.fail(held[1].id, held[1].token, {}), FailStatus::stale);
  EXPECT_EQ(other.release(held[1].id, held[1].token), AckStatus::stale);
  // They come back in mint order, at attempt 2, then the untouched third.
  Lease l;
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(q().claim(l, 60000));
    EXPECT_EQ(l.id, ids[std::size_t(i)]);
    EXPECT_EQ(l.attempt, i < 2 ? 2U : 1U);
    EXPECT_NE(l.token, held[std::size_t(std::min(i, 1))].token);
    EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
  }
  EXPECT_TRUE(q().fsck().clean()) << show(q().fsck());
  raw.proc(rec).start_time -= 1;
  raw.proc(rec).owner.fetch_or(detail::kOwnerLocked);
  ASSERT_TRUE(test::set_liveness_lock(other, F_WRLCK));
}

TEST_F(DeadLooking, ARecordStillBeingAttachedIsNeverJudged) {
  auto [other, l] = second_holds_a_lease(1);
  ASSERT_FALSE(HasFailure());
  RawSegment raw(seg());
  const std::uint32_t rec = holder_record(raw);
  const std::uint64_t owner = raw.proc(rec).owner.load();
  // Not stamped (its start time is not written yet), and its lock free: only
  // the missing stamp keeps it from being judged dead.
  ASSERT_TRUE(test::set_liveness_lock(other, F_UNLCK));
  raw.proc(rec).owner.store(owner & ~(detail::kOwnerStamped | detail::kOwnerLocked));
  raw.proc(rec).start_time += 1;
  EXPECT_EQ(q().tick(), 0U);
  ASSERT_TRUE(test::set_liveness_lock(other, F_WRLCK));
  raw.proc(rec).start_time -= 1;
  raw.proc(rec).owner.store(owner);
  EXPECT_EQ(other.complete(l.id, l.token), AckStatus::ok);
}

TEST_F(DeadLooking, AHolderThatDetachedCleanlyKeepsItsLeaseUntilItsDeadline) {
  // `fairlane claim` detaches and exits; `fairlane complete` comes later
  // from another process. A free record is not a dead holder.
  make(500);
  fill(A, 1);
  Lease l;
  {
    Queue other = second();
    ASSERT_TRUE(other.claim(l, 60000));
  }
  q().advance_clock(1000);
  EXPECT_EQ(q().tick(), 0U);
  EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
}

TEST_F(DeadLooking, AHolderThatExitedButIsNotYetReapedIsDead) {
  // A zombie still answers kill(pid, 0) and keeps its /proc entry; it holds
  // nothing any more.
  make(500);
  fill(A, 2);
  const std::string name = seg();
  ForkedChild child([&] {
    auto other = Queue::open(name);
    Lease l;
    const bool ok = other && other->claim(l, 60000) && other->claim(l, 60000);
    ::_exit(ok ? 0 : 3);  // no detach: the record stays attached, the process a zombie
    return 0;
  }, 60);
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, id_t(child.pid()), &info, WEXITED | WNOWAIT), 0);  // exited, not reaped
  ASSERT_EQ(info.si_status, 0);
  std::ifstream in("/proc/" + std::to_string(child.pid()) + "/stat");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto paren = text.rfind(')');
  ASSERT_TRUE(paren != std::string::npos && paren + 2 < text.size() && text[paren + 2] == 'Z') << text;
  EXPECT_EQ(q().tick(), 2U);
  EXPECT_EQ(q().recovery().last_pid, int(child.pid()));
  child.wait();
  EXPECT_TRUE(q().fsck().clean()) << show(q().fsck());
}

// The start time field of /proc/self/stat (field 22), read here on its own.
std::uint64_t own_start_time() {
  std::ifstream in("/proc/self/stat");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::istringstream rest(text.substr(text.rfind(')') + 2));
  std::string field;
  for (int i = 3; i < 22; ++i) rest >> field;  // fields 3..21
  std::uint64_t start = 0;
  rest >> start;
  return start;
}

// A record says its owner's real start time. Until 2026-12-05 the /proc
// parse stopped one field short (itrealvalue, always 0), and 0 reads as
// "not written yet": every attached pid was judged alive whoever held it.
TEST_F(DeadLooking, ARecordHoldsItsOwnersStartTime) {
  make(500);
  const std::uint64_t start = own_start_time();
  ASSERT_GT(start, 0U);
  RawSegment raw(seg());
  const std::uint32_t me = detail::QueueAccess::segment(q()).me_index;
  EXPECT_EQ(raw.proc(me).start_time.load(), start);
  EXPECT_EQ(detail::process_start_time(int(::getpid())), start);
}

// A holder judged by pid and start time (no liveness lock, as an older
// library writes its record) whose pid now names another live process:
// dead. With every start time 0 it was alive for as long as that other
// process lived.
TEST_F(DeadLooking, AHolderWhosePidWasTakenByAnotherProcessIsDead) {
  make(500);
  fill(A, 2);
  Queue other = second();
  Lease held[2];
  ASSERT_TRUE(other.claim(held[0], 60000));
  ASSERT_TRUE(other.claim(held[1], 60000));
  RawSegment raw(seg());
  const std::uint32_t rec = holder_record(raw);
  const std::uint64_t owner = raw.proc(rec).owner.load();
  // The pid of a process started after ours: the record's start time is not
  // its. The kernel counts start times in clock ticks (10 ms), so a child
  // forked within this process's first tick has its start time, and would
  // rightly pass for the record's owner: fork until the kernel says another.
  std::optional<ForkedChild> sleeper;
  ASSERT_TRUE(test::eventually([&] {
    sleeper.emplace([] {
      ::pause();
      return 0;
    }, 60);
    return detail::process_start_time(sleeper->pid()) != raw.proc(rec).start_time.load();
  }));
  // (Its lock free, as the kernel leaves it when its holder dies.)
  ASSERT_TRUE(test::set_liveness_lock(other, F_UNLCK));
  raw.proc(rec).owner.store((owner & ~(detail::kOwnerLocked | 0xFFFFFFFFULL)) | std::uint32_t(sleeper->pid()));
  EXPECT_EQ(q().tick(), 2U);
  EXPECT_EQ(q().recovery().last_pid, int(sleeper->pid()));
  raw.proc(rec).owner.store(owner);
  EXPECT_EQ(other.complete(held[0].id, held[0].token), AckStatus::stale);
}

// A holder that holds its liveness lock is alive whatever its pid says: a
// process in another PID namespace (a container sharing /dev/shm) records a
// pid that names nobody here, or somebody else. Judged by pid it was dead,
// and its leases were taken while it worked on them. (The crash test
// AConsumerInAnotherPidNamespaceKeepsItsLeasesUntilItDies does it with a
// real namespace.)
TEST_F(DeadLooking, AHolderThatHoldsItsLivenessLockIsAliveWhateverItsPidSays) {
  auto [other, l] = second_holds_a_lease(2);
  ASSERT_FALSE(HasFailure());
  RawSegment raw(seg());
  const std::uint32_t rec = holder_record(raw);
  const std::uint64_t owner = raw.proc(rec).owner.load();
  ASSERT_TRUE(owner & detail::kOwnerLocked);
  for (const std::uint32_t pid : {std::uint32_t(0x7FFFFFF0), 1U}) {  // nobody here; somebody else
    raw.proc(rec).owner.store((owner & ~0xFFFFFFFFULL) | pid);
    q().advance_clock(1000);  // the last verdict is stale: judged again
    EXPECT_EQ(q().tick(), 0U) << "pid " << pid;
    bool alive = false;
    for (const ProcessInfo& p : q().processes())
      if (p.pid == int(pid)) alive = p.alive;
    EXPECT_TRUE(alive) << "pid " << pid;
  }
  raw.proc(rec).owner.store(owner);
  EXPECT_EQ(q().recovery().runs, 0U);
  EXPECT_EQ(other.complete(l.id, l.token), AckStatus::ok);
}

// The lock is asked before the word: a live owner holding its lock whose
// word was scribbled to say "no lock" and a pid that names nobody here, or
// the right pid with another start time, is alive. Judged by the word it
// was dead, and its leases were taken from it while it worked.
TEST_F(DeadLooking, AHolderThatHoldsItsLivenessLockIsAliveThoughItsWordSaysItHoldsNone) {
  auto [other, l] = second_holds_a_lease(2);
  ASSERT_FALSE(HasFailure());
  RawSegment raw(seg());
  const std::uint32_t rec = holder_record(raw);
  const std::uint64_t owner = raw.proc(rec).owner.load();
  ASSERT_TRUE(owner & detail::kOwnerLocked);
  for (const std::uint32_t pid : {std::uint32_t(0x7FFFFFF0), std::uint32_t(::getpid())}) {
    raw.proc(rec).owner.store((owner & ~(detail::kOwnerLocked | 0xFFFFFFFFULL)) | pid);
    raw.proc(rec).start_time += 1;  // not the start time of the process with that pid
    q().advance_clock(1000);        // the last verdict is stale: judged again
    EXPECT_EQ(q().tick(), 0U) << "pid " << pid;
    raw.proc(rec).start_time -= 1;
  }
  raw.proc(rec).owner.store(owner);
  EXPECT_EQ(q().recovery().runs, 0U);
  EXPECT_EQ(other.complete(l.id, l.token), AckStatus::ok);
}

// The lock decides, not the pid: an owner whose lock is gone (its file
// closed: it exec'd, or died and its pid lives on in another process) is
// dead though its pid and start time still match.
TEST_F(DeadLooking, AHolderWhoseLivenessLockIsGoneIsDeadThoughItsPidLives) {
  auto [other, l] = second_holds_a_lease(2);
  ASSERT_FALSE(HasFailure());
  ASSERT_TRUE(test::set_liveness_lock(other, F_UNLCK));
  EXPECT_EQ(q().tick(), 1U);
  EXPECT_EQ(q().recovery().last_pid, int(::getpid()));
  EXPECT_EQ(other.complete(l.id, l.token), AckStatus::stale);
}

// The last free record taken by a concurrent attacher while ours waits for
// its lock (held before its CAS, as attach does): the wait ended with the
// lock still busy, and the attach gave up with "free ones are still locked
// by a process that detached ...; try again", though the segment is full
// (every record attached, none free, none dead; found in review of 57b43aa).
// The other attacher's CAS is made at the step point of our wait.
struct RivalAttacher {
  std::atomic<std::uint64_t>* word = nullptr;
  std::uint64_t owner = 0;
  std::atomic<int> waits{0};
  static void at(void* p) {
    auto& r = *static_cast<RivalAttacher*>(p);
    if (r.waits.fetch_add(1) == 0) r.word->store(r.owner);
  }
};

TEST_F(DeadLooking, AnAttachThatLosesTheLastFreeRecordToAnotherAttacherSaysTheSegmentIsFull) {
  make(500, 2);
  RawSegment raw(seg());
  std::uint32_t free_rec = ~0U;
  for (std::uint32_t i = 0; i < 2; ++i)
    if (raw.proc(i).owner.load() == 0) free_rec = i;
  ASSERT_NE(free_rec, ~0U);
  // The other attacher holds the record's lock byte (its first step).
  const int fd = ::open(("/dev/shm/" + seg()).c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(test::set_record_lock(fd, free_rec, F_WRLCK));
  RivalAttacher rival;
  rival.word = &raw.proc(free_rec).owner;
  rival.owner = detail::kOwnerAttached | detail::kOwnerStamped | detail::kOwnerLocked |
                (std::uint64_t(1) << detail::kOwnerIncShift) | std::uint32_t(::getpid());
  detail::failpoint_call("attach.lock_busy", &RivalAttacher::at, &rival);
  auto opened = Queue::open(seg());
  detail::failpoint_call("attach.lock_busy", nullptr, nullptr);
  EXPECT_GE(rival.waits.load(), 1) << "the attach never waited for the busy lock";
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.error().message.find("larger --processes"), std::string::npos) << opened.error().message;
  raw.proc(free_rec).owner.store(0);
  ::close(fd);
}

// An attacher waiting for a busy liveness lock holds no record meanwhile:
// killed while it waits, it leaves nothing behind. (It held the record by
// an unstamped word, which nobody judges: with two records, no process
// could attach again; found in review of 4e618c4.) The child says it is
// waiting from the step point of its wait.
void say_waiting(void* p) {
  const int fd = *static_cast<int*>(p);
  const char b = 1;
  (void)!::write(fd, &b, 1);
}

TEST_F(DeadLooking, AnAttacherKilledWhileItWaitsForABusyLivenessLockLeavesNoRecordBehind) {
  make(200, 2);
  RawSegment raw(seg());
  std::uint32_t free_rec = ~0U;
  for (std::uint32_t i = 0; i < 2; ++i)
    if (raw.proc(i).owner.load() == 0) free_rec = i;
  ASSERT_NE(free_rec, ~0U);
  const int fd = ::open(("/dev/shm/" + seg()).c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(test::set_record_lock(fd, free_rec, F_WRLCK));  // a detacher stopped before its unlock
  int waiting[2];
  ASSERT_EQ(::pipe(waiting), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    detail::failpoint_call("attach.lock_busy", &say_waiting, &waiting[1]);
    auto opened = Queue::open(seg());  // waits for the busy lock, up to 1 s
    ::_exit(opened.ok() ? 0 : 1);
  }
  char b = 0;
  ASSERT_EQ(::read(waiting[0], &b, 1), 1) << "the attacher never waited";
  ::kill(child, SIGKILL);  // killed during its wait
  int st = 0;
  ASSERT_EQ(::waitpid(child, &st, 0), child);
  ::close(waiting[0]);
  ::close(waiting[1]);
  ::close(fd);  // the stopped detacher resumes and unlocks
  EXPECT_EQ(raw.proc(free_rec).owner.load(), 0U) << "the killed attacher left the record held";
  auto again = Queue::open(seg());
  EXPECT_TRUE(again.ok()) << (again.ok() ? "" : again.error().message);
}

TEST_F(DeadLooking, ExpiredLeasesAreCountedAndPromotionsAreNot) {
  make(500);
  fill(A, 2);
  ASSERT_EQ(q().enqueue(A, q().mint(), "later", {.delay_ms = 100}), EnqueueStatus::enqueued);
  Lease l;
  ASSERT_TRUE(q().claim(l, 1000));
  ASSERT_TRUE(q().claim(l, 1000));
  q().advance_clock(200);
  EXPECT_EQ(q().tick(), 1U);  // the delayed job falls due: not a recovery
  EXPECT_EQ(q().recovery().runs, 0U);
  q().advance_clock(1000);
  EXPECT_EQ(q().tick(), 2U);
  const RecoveryInfo r = q().recovery();
  EXPECT_EQ(r.runs, 1U);
  EXPECT_EQ(r.last_jobs, 2U);
  EXPECT_EQ(r.last_pid, 0) << "expired leases of a live holder name no dead pid";
  EXPECT_EQ(r.finished, 0U);
  EXPECT_TRUE(q().fsck().clean()) << show(q().fsck());
}



struct ForkReport {
  std::atomic<int> stage{0};
  std::atomic<int> parent{0};
  std::atomic<int> a{0}, b{0}, c{0}, d{0};
};

// The parent claims, the child works the job through its copy (the
// fork-per-job pattern), with every process record in use: the copy goes
// on as its parent's, and its extend, fail and complete of the lease do
// what they say (found in review of 3a53e79: the copy had become an
// observer, and each said `gone` of a leased job).
TEST_F(Recovery, ACopyThatFindsNoProcessRecordFreeAcksTheLeaseItsParentHandedIt) {
  make(40, 1);
  fill(A, 1);
  Lease l;
  ASSERT_TRUE(q().claim(l, kLongLease));
  SharedBlock<ForkReport> rep;
  ForkedChild child([&] {
    rep->a = int(q().extend(l.id, l.token, kLongLease)) + 1;
    rep->c = int(q().complete(l.id, l.token)) + 1;
    return 0;
  }, 60);
  ASSERT_TRUE(child.wait_for(20s));
  ASSERT_TRUE(child.exited_zero()) << child.describe();
  EXPECT_EQ(rep->a.load(), int(AckStatus::ok) + 1) << "extend through the copy: " << to_string(AckStatus(rep->a.load() - 1));
  EXPECT_EQ(rep->c.load(), int(AckStatus::ok) + 1) << "complete through the copy: " << to_string(AckStatus(rep->c.load() - 1));
  EXPECT_FALSE(q().job(l.id).has_value()) << "the child's complete did not complete";
  // A fail through a copy that goes on as its parent's.
  fill(A, 1);
  ASSERT_TRUE(q().claim(l, kLongLease));
  ForkedChild failer([&] {
    const FailStatus f = q().fail(l.id, l.token);
    return f == FailStatus::retrying || f == FailStatus::dead ? 0 : 1;
  }, 60);
  ASSERT_TRUE(failer.wait_for(20s));
  EXPECT_TRUE(failer.exited_zero()) << "fail through the copy: " << failer.describe();
}

// In a forked child: one thread makes n calls `call(i)` through the copy q
// while this one adopts it (an enqueue) once the first `before` are made.
// The flag between them is relaxed, which orders nothing for TSan: those
// calls come before the adoption's writes in time, unordered, so a plain
// read among them is a race TSan finds every run; the rest run alongside.
// True if the enqueue was made.
template <class F>
bool adopt_alongside(Queue& q, std::size_t n, std::size_t before, F call) {
  std::atomic<bool> made{false};
  std::thread caller([&] {
    for (std::size_t i = 0; i < n; ++i) {
      call(i);
      if (i + 1 == before) made.store(true, std::memory_order_relaxed);
    }
  });
  while (!made.load(std::memory_order_relaxed)) std::this_thread::yield();
  const bool enqueued = q.enqueue(B, q.mint(), "adopts") == EnqueueStatus::enqueued;
  caller.join();
  return enqueued;
}

// A child's thread completes the leases its parent handed it through its
// copy of the handle while another of its threads adopts the copy (an
// enqueue): complete makes no adoption and reads the handle's record as
// the adoption writes it. Each complete acts for either record and says
// ok. A data race under TSan before that read was atomic (the child then
// exits with TSan's status, 66); elsewhere this checks the answers.
TEST_F(Recovery, ACompleteThroughACopyWhileAnotherThreadAdoptsItIsNoRace) {
  make(40);
  fill(A, 32);
  std::vector<Lease> held(32);
  for (Lease& l : held) ASSERT_TRUE(q().claim(l, kLongLease));
  ForkedChild child([&] {
    int not_ok = 0;
    const bool adopted = adopt_alongside(q(), held.size(), held.size() / 2, [&](std::size_t i) {
      not_ok += q().complete(held[i].id, held[i].token) != AckStatus::ok;
    });
    return adopted && not_ok == 0 ? 0 : 1;
  }, 60);
  ASSERT_TRUE(child.wait_for(20s));
  EXPECT_TRUE(child.exited_zero()) << child.describe();
  for (const Lease& l : held) EXPECT_FALSE(q().job(l.id).has_value()) << l.id.str();
  EXPECT_TRUE(q().fsck().clean()) << show(q().fsck());
}

// The same with a look that makes no adoption: processes() judges each
// record, its own by me and me_index, while another thread of the child
// adopts the copy (found in review of ef2bd77: a data race under TSan on
// both, read before the adoption's flag). Every look lists the records
// attached: the parent's, and the child's once it has one.
TEST_F(Recovery, ALookAtTheProcessesThroughACopyWhileAnotherThreadAdoptsItIsNoRace) {
  make(40);
  ForkedChild child([&] {
    int empty = 0;
    const bool adopted = adopt_alongside(q(), 200, 20, [&](std::size_t) { empty += q().processes().empty(); });
    return adopted && empty == 0 ? 0 : 1;
  }, 60);
  ASSERT_TRUE(child.wait_for(20s));
  EXPECT_TRUE(child.exited_zero()) << child.describe();
}

// A copy's adoption may take its dead parent's record (found in review of
// 3a53e79: it judged the record it named as its own, so alive, and found
// none, while a handle the same child opened next took that very record).
TEST_F(Recovery, ACopyCanTakeItsDeadParentsRecord) {
  make(40, 2);
  fill(A, 1);
  SharedBlock<ForkReport> rep;
  const std::string name = seg();
  ForkedChild c1([&] {
    auto r = Queue::open(name);  // the second and last record
    Lease l;
    if (!r || !r->claim(l, kLongLease)) return 3;
    const pid_t g = ::fork();
    if (g < 0) return 4;
    if (g == 0) {
      if (!eventually([&] { return rep->parent.load() == 1; })) ::_exit(9);
      rep->a = int(r->fail(l.id, l.token)) + 1;
      auto fresh = Queue::open(name);
      rep->b = fresh.ok() ? 1 : 2;
      rep->stage = 2;
      ::_exit(0);
    }
    rep->stage = 1;
    ::raise(SIGKILL);
    return 0;
  }, 60);
  c1.wait();
  ASSERT_EQ(rep->stage.load(), 1) << c1.describe();
  rep->parent = 1;
  ASSERT_TRUE(eventually([&] { return rep->stage.load() == 2; }));
  EXPECT_EQ(rep->b.load(), 2) << "the copy did not take its dead parent's record, the only one";
  EXPECT_NE(rep->a.load(), int(FailStatus::gone) + 1) << "the copy's fail of its dead parent's lease said gone";
}


}  // namespace
}  // namespace fairlane
