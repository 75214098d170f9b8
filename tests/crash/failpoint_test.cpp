// Every step, twice: a process SIGKILLed at each named failpoint
// (src/failpoint.hpp) of each multi-step operation, and a process SIGSTOPped
// there (kept stopped while the survivors work), then what the survivors see.
//
// For each case a forked child opens the segment, arms the failpoint and
// runs an operation that reaches it. The parent (the survivor) then checks:
//
//   killed   the child died at that point (SIGKILL, not a normal exit);
//            enqueue on every lane and claims of the other lanes go on at
//            once (non-blocking calls, no sleeping); every acknowledged job
//            is delivered exactly once (or completed, dead-lettered or
//            removed by the child if it had got that far), recovery driven
//            by the survivor's claims alone; fsck clean afterwards, every
//            lane's active count back to zero.
//   stopped  the child is stopped at that point; fsck names what it is in
//            the middle of and nothing else; enqueue on every lane and claims
//            of every lane go on, the stopped child's own lane included; its
//            lease comes back once it expires (the segment clock is moved on);
//            everything acknowledged is delivered but what it holds (at most
//            its one job); then it is continued, finishes its operation and
//            exits, and everything is delivered exactly once, fsck clean.
//
// The assertions are about progress, not time: the survivor's calls complete
// while the child is stopped (bounded loops of non-blocking calls; the only
// waits are hang guards).
//
// Linked against fairlane_failpoints (the core compiled with the failpoints).
#include "forked_child.hpp"
#include "raw_segment.hpp"
#include "test_support.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "failpoint.hpp"

namespace fairlane {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// What the child does to reach its failpoint.
enum class Scenario {
  enqueue_new,     // enqueue one job under a new group (makes its lane)
  enqueue,         // enqueue one job onto lane A, which has jobs
  enqueue_old,     // enqueue onto lane A a job whose id is older than A's tail (the strays path)
  enqueue_later,   // enqueue a delayed job, then (the due time passed) tick promotes it
  claim,           // claim one job of lane A (which has more)
  claim_last,      // claim the one job of lane D
  claim_retry,     // claim a job of lane A that came back after a failure (from the strays)
  complete,        // claim one job of lane A (limit 1), complete it
  fail_retry,      // ... fail it for an immediate retry
  fail_later,      // ... fail it for a retry in 50 ms
  fail_dead,       // ... fail it with max_attempts 1: dead-lettered
  release,         // ... release it
  sweep,           // claim with a 1 ms lease, let it expire, tick (the sweep takes it back)
  drain,           // drain lane A
  pause_new,       // pause a new group (makes its lane)
  reassign,        // move a pending job of lane A to lane C
  reassign_husk,   // the same, then claim lane A's jobs (the husk of the move is popped and freed)
  purge,           // purge the dead letters
  reclaim,         // an idle group's lane given back by the sweep
  recover,         // a sweep finishing after a claimer that died holding a taken job
  recover_link,    // a sweep finishing after an appender that died having linked its job onto lane A
  resume,          // resume lane A (paused before): nothing else writes lane A afterwards
  fail_copy,       // a child forked with no process record free (an unattached copy of this
                   // process's handle) fails, for an immediate retry, the lease this process
                   // claimed and handed it (parked, due now: the sweep's promotion moves it)
  extend,          // claim one job of lane A (limit 1), extend its lease
};
const char* const kScenarioNames[] = {"enqueue_new", "enqueue", "enqueue_old", "enqueue_later", "claim", "claim_last",
                                      "claim_retry", "complete", "fail_retry", "fail_later", "fail_dead", "release",
                                      "sweep", "drain", "pause_new", "reassign", "reassign_husk", "purge", "reclaim",
                                      "recover", "recover_link", "resume", "fail_copy", "extend"};

struct Case {
  const char* failpoint;
  Scenario scenario;
  bool stop = false;    // SIGSTOP at the point instead of SIGKILL
  bool repair = false;  // killed, then Queue::repair() before any survivor's call
};

const Case kCases[] = {
    {"lane.creating", Scenario::enqueue_new},
    {"lane.record_taken", Scenario::enqueue_new},
    {"lane.entry_tentative", Scenario::enqueue_new},
    {"lane.entry_live", Scenario::enqueue_new},
    {"lane.record_taken", Scenario::pause_new},
    {"lane.settings_written", Scenario::pause_new},
    {"lane.settings_written", Scenario::resume},
    {"lane.sealed", Scenario::reclaim},
    {"lane.reclaimed", Scenario::reclaim},
    {"lane.step_applied", Scenario::complete},
    {"lane.step_applied", Scenario::fail_retry},
    {"enqueue.slot_taken", Scenario::enqueue},
    {"enqueue.lane_found", Scenario::enqueue},
    {"enqueue.lane_found", Scenario::enqueue_new},
    {"run.appended_first", Scenario::enqueue_new},
    {"run.walked", Scenario::enqueue},
    {"run.linked", Scenario::enqueue},
    {"enqueue.indexed", Scenario::enqueue},
    {"enqueue.indexed", Scenario::enqueue_old},
    {"enqueue.committed", Scenario::enqueue},
    {"claim.intent_set", Scenario::claim},
    {"claim.intent_set", Scenario::claim_retry},
    {"claim.sealed", Scenario::claim_last},
    {"claim.chosen", Scenario::claim},
    {"claim.taken", Scenario::claim},
    {"claim.taken", Scenario::claim_retry},
    {"strays.marked", Scenario::claim_retry},
    {"claim.token_moved", Scenario::claim},
    {"claim.leased", Scenario::claim},
    {"ack.stepped", Scenario::complete},
    {"ack.stepped", Scenario::fail_later},
    {"ack.stepped", Scenario::release},
    {"complete.done", Scenario::complete},
    {"fail.planned", Scenario::fail_later},
    {"fail.stepped", Scenario::fail_retry},
    {"fail.stepped", Scenario::fail_later},
    {"fail.stepped", Scenario::fail_dead},
    {"release.stepped", Scenario::release},
    {"ack.stepped", Scenario::fail_copy},
    {"fail.stepped", Scenario::fail_copy},
    {"move.claimed", Scenario::enqueue_old},
    {"move.claimed", Scenario::enqueue_later},
    {"move.taken", Scenario::fail_retry},
    {"strays.found", Scenario::fail_retry},
    {"strays.found", Scenario::release},
    {"strays.linked", Scenario::fail_retry},
    {"strays.linked", Scenario::release},
    {"move.linked", Scenario::fail_retry},
    {"slot.freed", Scenario::reassign_husk},
    {"sweep.expired", Scenario::sweep},
    {"expire.checked", Scenario::sweep},
    {"expire.marked", Scenario::sweep},
    {"extend.checked", Scenario::extend},
    {"fail.plan_in", Scenario::fail_later},
    {"fail.plan_in", Scenario::fail_dead},
    {"sweep.promoted", Scenario::enqueue_later},
    {"recover.popped", Scenario::recover},
    {"settle.appended", Scenario::recover_link},
    {"drain.removed", Scenario::drain},
    {"reassign.copied", Scenario::reassign},
    {"reassign.dropped", Scenario::reassign},
    {"reassign.committed", Scenario::reassign},
    {"dead.purged", Scenario::purge},
};

std::vector<Case> all_cases() {
  std::vector<Case> v;
  for (const Case& c : kCases) {
    v.push_back(c);
    Case s = c;
    s.stop = true;
    v.push_back(s);
    Case r = c;
    r.repair = true;
    v.push_back(r);
  }
  return v;
}

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.failpoint << (c.stop ? " (stop)" : c.repair ? " (kill, repair)" : " (kill)");
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return std::string(info.param.stop ? "stopped_at_" : info.param.repair ? "repaired_after_" : "killed_at_") +
         test::point_name(info.param.failpoint) + "_in_" + kScenarioNames[int(info.param.scenario)];
}

const BrandedId kLaneA = BrandedId::make("AAA", 1);
const BrandedId kLaneB = BrandedId::make("BBB", 1);
const BrandedId kLaneC = BrandedId::make("CCC", 1);
const BrandedId kLaneD = BrandedId::make("DDD", 1);  // one job
const BrandedId kLaneE = BrandedId::make("EEE", 1);  // no lane until the child makes it
const BrandedId kLaneI = BrandedId::make("III", 1);  // idle: its lane is reclaimed

// Does the case's child take a lease first (the failpoint is in what follows)?
bool leases_first(Scenario sc) {
  switch (sc) {
    case Scenario::complete:
    case Scenario::fail_retry:
    case Scenario::fail_later:
    case Scenario::fail_dead:
    case Scenario::release:
    case Scenario::sweep:
    case Scenario::fail_copy:
    case Scenario::extend: return true;
    default: return false;
  }
}

// Is the case's child an unattached copy of this process's handle (no
// process record free: the segment has one, this process's)?
bool as_copy(Scenario sc) { return sc == Scenario::fail_copy; }

// The child: runs its scenario with the failpoint armed. Exits 0 if the
// failpoint was never reached (or it was continued and finished), 3 if
// something went wrong before it. Writes the id of each job it leased to `fd`.
// `copy`: the parent's handle, for the cases whose child is an unattached
// copy (as_copy), which acts on `handed`, the lease the parent claimed.
[[noreturn]] void child_main(const std::string& seg, const Case& c, int fd, const std::string& arg, Queue& copy,
                             const Lease& handed) {
  ::alarm(60);  // watchdog: never outlive the test
  std::optional<Result<Queue>> r;
  if (!as_copy(c.scenario)) r.emplace(Queue::open(seg));
  if (r && !*r) ::_exit(3);
  Queue& q = r ? r->value() : copy;
  auto tell = [&](const BrandedId& id) {
    const std::string line = id.string() + "\n";
    if (::write(fd, line.data(), line.size()) != ssize_t(line.size())) ::_exit(3);
  };
  auto claim_one = [&](std::uint32_t lease_ms) {
    Lease l;
    if (!q.claim(l, lease_ms)) ::_exit(3);
    tell(l.id);
    return l;
  };
  const detail::FailpointAction act = c.stop ? detail::FailpointAction::stop : detail::FailpointAction::kill;
  if (leases_first(c.scenario)) {
    Lease l = handed;
    if (as_copy(c.scenario)) tell(l.id);
    else l = claim_one(c.scenario == Scenario::sweep ? 1 : 60000);
    detail::failpoint_arm(c.failpoint, 1, act);
    switch (c.scenario) {
      case Scenario::complete: q.complete(l.id, l.token); break;
      case Scenario::fail_retry: q.fail(l.id, l.token, FailOptions{.delay_ms = 0, .max_attempts = 10, .error = "boom"}); break;
      case Scenario::fail_later: q.fail(l.id, l.token, FailOptions{.delay_ms = 50, .max_attempts = 10, .error = "later"}); break;
      case Scenario::fail_dead: q.fail(l.id, l.token, FailOptions{.delay_ms = 0, .max_attempts = 1, .error = "hopeless"}); break;
      case Scenario::release: q.release(l.id, l.token); break;
      case Scenario::extend: q.extend(l.id, l.token, 60000); break;
      case Scenario::fail_copy: q.fail(l.id, l.token, FailOptions{.delay_ms = 0, .max_attempts = 10, .error = "copy"}); break;
      case Scenario::sweep:
        q.advance_clock(10);  // the 1 ms lease runs out (the segment's clock, not a sleep)
        q.tick();
        break;
      default: break;
    }
    ::_exit(0);
  }
  // A job the child enqueues is named first: it may be delivered, never
  // acknowledged (what the survivors may see besides the acknowledged ones).
  auto minted = [&] {
    const BrandedId id = q.mint();
    tell(id);
    return id;
  };
  if (c.scenario == Scenario::enqueue_old) tell(*BrandedId::parse(arg));
  detail::failpoint_arm(c.failpoint, 1, act);
  switch (c.scenario) {
    case Scenario::enqueue_new: q.enqueue(kLaneE, minted(), "child"); break;
    case Scenario::enqueue: q.enqueue(kLaneA, minted(), "child"); break;
    case Scenario::enqueue_old: q.enqueue(kLaneA, *BrandedId::parse(arg), "old"); break;
    case Scenario::enqueue_later:
      q.enqueue(kLaneC, minted(), "later", EnqueueOptions{.delay_ms = 5});
      q.advance_clock(10);
      q.tick();
      break;
    case Scenario::claim:
    case Scenario::claim_last:
    case Scenario::claim_retry: claim_one(60000); break;
    case Scenario::drain: q.drain(kLaneA); break;
    case Scenario::pause_new: q.pause(kLaneE); break;
    case Scenario::resume: q.resume(kLaneA); break;
    case Scenario::reassign: q.reassign(*BrandedId::parse(arg), kLaneC); break;
    case Scenario::reassign_husk: {
      q.reassign(*BrandedId::parse(arg), kLaneC);
      for (int i = 0; i < 8; ++i) {
        Lease l;
        if (!q.claim(l, 60000)) break;
        tell(l.id);
        q.complete(l.id, l.token);
      }
      break;
    }
    case Scenario::purge: q.purge_dead(); break;
    case Scenario::reclaim:
      for (int i = 0; i < 4; ++i) {
        q.advance_clock(1000);
        q.tick();
      }
      break;
    case Scenario::recover:
    case Scenario::recover_link: q.tick(); break;
    default: break;
  }
  ::_exit(0);
}

// A first child that dies at `failpoint` in what `act` does on the
// segment: for the recover scenarios.
template <class Act>
void kill_a_child_at(const std::string& seg, const char* failpoint, Act act) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::alarm(30);
    auto r = Queue::open(seg);
    if (!r) ::_exit(3);
    detail::failpoint_arm(failpoint);
    act(r.value());
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
}
// recover: it dies holding a job it took out of lane B (killed at claim.taken).
void kill_a_claimer(const std::string& seg) {
  kill_a_child_at(seg, "claim.taken", [](Queue& q) {
    Lease l;
    q.claim(l, 60000);
  });
}
// recover_link: it dies having linked a job onto lane A, undecided (killed
// at run.linked). Its job was never acknowledged: it may be delivered or not.
void kill_an_appender(const std::string& seg, const BrandedId& id) {
  kill_a_child_at(seg, "run.linked", [&id](Queue& q) { q.enqueue(kLaneA, id, "unacked"); });
}

class Failpoint : public test::SegmentFixture, public ::testing::WithParamInterface<Case> {};

TEST(FailpointList, EveryFailpointHasAScenario) {
  std::set<std::string> covered;
  for (const Case& c : kCases) covered.insert(c.failpoint);
  for (std::size_t i = 0; i < detail::kFailpointCount; ++i)
    EXPECT_TRUE(covered.count(detail::kFailpoints[i])) << detail::kFailpoints[i] << " has no test case";
  EXPECT_EQ(covered.size(), detail::kFailpointCount);
}

TEST_P(Failpoint, SurvivorsGoOnAndNothingIsLost) {
  const Case c = GetParam();
  QueueOptions o;
  o.jobs = 64;
  o.lanes = 8;
  o.payload_bytes = 32;
  o.recovery_ms = 40;  // the survivors notice the dead quickly
  if (as_copy(c.scenario)) o.processes = 1;  // this process's record: the child finds none free
  create(o);
  const bool limited = leases_first(c.scenario) && c.scenario != Scenario::sweep;
  if (limited) {
    ASSERT_EQ(q().set_limit(kLaneA, 1), LaneStatus::ok);
  }

  std::set<std::string> acked;  // every job whose enqueue returned `enqueued`
  std::map<std::string, BrandedId> lane_of;
  auto add = [&](const BrandedId& lane, int n) {
    for (int i = 0; i < n; ++i) {
      const BrandedId id = q().mint();
      ASSERT_EQ(q().enqueue(lane, id, "job"), EnqueueStatus::enqueued);
      acked.insert(id.string());
      lane_of[id.string()] = lane;
    }
  };
  // An id minted before lane A's jobs: older than its tail (enqueue_old).
  const BrandedId old_id = q().mint();
  add(kLaneA, 3);
  add(kLaneB, 3);
  add(kLaneD, 1);
  std::string arg = old_id.string();
  std::map<std::string, int> delivered;  // completed by the survivor
  auto take = [&](const Lease& l) {
    ++delivered[l.id.string()];
    EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok) << l.id.string();
  };
  if (c.scenario == Scenario::claim_retry) {
    // Lane A's oldest job comes back from a failure: the strays.
    Lease l;
    ASSERT_TRUE(q().claim(l, 60000));
    ASSERT_EQ(lane_of[l.id.string()], kLaneA);
    ASSERT_EQ(q().fail(l.id, l.token, FailOptions{.delay_ms = 0, .max_attempts = 10, .error = "again"}),
              FailStatus::retrying);
  }
  if (c.scenario == Scenario::reassign || c.scenario == Scenario::reassign_husk) {
    for (const auto& [id, lane] : lane_of)
      if (lane == kLaneA) arg = id;  // the newest of lane A: in the middle of nothing special
  }
  if (c.scenario == Scenario::purge) {
    Lease l;
    ASSERT_TRUE(q().claim(l, 60000));
    ASSERT_EQ(q().fail(l.id, l.token, FailOptions{.delay_ms = 0, .max_attempts = 1, .error = "dead"}), FailStatus::dead);
    acked.erase(l.id.string());  // a dead letter: purged by the child
  }
  if (c.scenario == Scenario::reclaim) {
    ASSERT_EQ(q().set_weight(kLaneI, 2), LaneStatus::ok);  // a lane for I...
    ASSERT_EQ(q().set_weight(kLaneI, 1), LaneStatus::ok);  // ... idle from here
  }
  if (c.scenario == Scenario::recover) kill_a_claimer(seg());
  std::set<std::string> unacked;  // jobs enqueued by a child: may be delivered, once
  if (c.scenario == Scenario::recover_link) {
    const BrandedId id = q().mint();
    unacked.insert(id.string());
    kill_an_appender(seg(), id);
  }
  // The resume in force (written) must ring the lane without another write
  // of it: the survivors add nothing to lane A then.
  if (c.scenario == Scenario::resume) {
    ASSERT_EQ(q().pause(kLaneA), LaneStatus::ok);
    // A claim passes lane A's cell and drops its token (a paused lane leaves
    // the rota when a claim draws it): the resume must ring it again.
    Lease l;
    ASSERT_TRUE(q().claim(l, 60000));
    ASSERT_NE(lane_of[l.id.string()], kLaneA);
    take(l);
    const Snapshot snap = q().snapshot();
    ASSERT_EQ(std::find(snap.ring.begin(), snap.ring.end(), kLaneA), snap.ring.end());
  }
  // The child's claim must meet the front the case is about: the other lanes
  // are paused meanwhile (resumed once the child has reached its point).
  std::vector<BrandedId> paused;
  if (c.scenario == Scenario::claim_last) paused = {kLaneA, kLaneB};
  if (c.scenario == Scenario::claim_retry) paused = {kLaneB, kLaneD};
  for (const BrandedId& g : paused) ASSERT_EQ(q().pause(g), LaneStatus::ok);
  Lease handed;  // claimed here, acked by the child (as_copy)
  if (as_copy(c.scenario)) {
    ASSERT_TRUE(q().claim(handed, 2000));  // (killed before its step, the copy leaves it to its deadline)
  }

  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    child_main(seg(), c, fds[1], arg, q(), handed);
  }
  ::close(fds[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, c.stop ? WUNTRACED : 0), pid);
  const auto died = Clock::now();
  if (c.stop) {
    ASSERT_TRUE(WIFSTOPPED(status)) << c.failpoint << " was not reached (child status " << status << ")";
  } else {
    ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
        << c.failpoint << " was not reached (child status " << status << ")";
  }
  for (const BrandedId& g : paused) ASSERT_EQ(q().resume(g), LaneStatus::ok);
  auto read_child_jobs = [&] {
    std::set<std::string> jobs;
    char buf[1024] = {};
    std::string all;
    for (;;) {
      const ssize_t got = ::read(fds[0], buf, sizeof buf);
      if (got <= 0) break;
      all.append(buf, std::size_t(got));
    }
    std::size_t at = 0;
    while (at < all.size()) {
      const std::size_t nl = all.find('\n', at);
      if (nl == std::string::npos) break;
      jobs.insert(all.substr(at, nl - at));
      at = nl + 1;
    }
    return jobs;
  };

  if (c.repair) {
    // Killed, and repaired at once (no survivor's call in between): repair
    // runs (the dead process does not count as attached), returns what
    // fsck found, and leaves a segment fsck calls clean; a second repair
    // finds nothing and changes nothing. What is owed is checked below.
    const FsckReport found = q().fsck();
    auto r = q().repair();
    ASSERT_TRUE(r.ok()) << "repair after a kill at " << c.failpoint << ": " << test::describe(r.error());
    ASSERT_EQ(r.value().issues.size(), found.issues.size());
    for (std::size_t i = 0; i < found.issues.size(); ++i) {
      EXPECT_EQ(r.value().issues[i].invariant, found.issues[i].invariant);
      EXPECT_EQ(r.value().issues[i].detail, found.issues[i].detail);
    }
    const FsckReport after = q().fsck();
    for (const FsckIssue& i : after.issues) ADD_FAILURE() << "after repair: " << i.invariant << ": " << i.detail;
    auto again = q().repair();
    ASSERT_TRUE(again.ok()) << test::describe(again.error());
    EXPECT_TRUE(again.value().clean()) << "a second repair found " << again.value().issues.size() << " violations";
    EXPECT_TRUE(again.value().repairs.empty()) << "a second repair changed something: " << again.value().repairs[0];
  }
  if (c.stop && !as_copy(c.scenario)) {
    // While it is stopped, repair refuses and changes nothing. (Not for an
    // unattached copy of this process's handle: it has no process record of
    // its own and acts as this process, which repair cannot tell from this
    // process's own threads; queue.hpp, Queue::repair.) No ASSERT: the
    // child is continued below whatever happens here.
    const FsckReport seen = q().fsck();
    auto refused = q().repair();
    EXPECT_FALSE(refused.ok()) << "repair ran while a process stopped at " << c.failpoint << " was attached";
    if (!refused.ok()) {
      EXPECT_EQ(refused.error().code, Errc::busy);
    }
    const FsckReport still = q().fsck();
    auto text = [](const FsckReport& r) {
      std::string t;
      for (const FsckIssue& i : r.issues) t += i.invariant + ": " + i.detail + "\n";
      return t;
    };
    EXPECT_EQ(text(still), text(seen)) << "a refused repair changed the segment";
  }
  if (c.stop) {
    // While it is stopped, fsck names its step and nothing else. A settings
    // change leaves no intent: stopped between its settings CAS and its lane
    // CAS, the lane it made serviceable is not in the ring until a sweep (or
    // any write of the lane word) rings it, and fsck says so.
    const FsckReport during = q().fsck();
    for (const FsckIssue& i : during.issues) {
      if (c.scenario == Scenario::resume && i.invariant == "ring-membership" &&
          i.detail.find(kLaneA.string()) != std::string::npos)
        continue;
      EXPECT_EQ(i.invariant, "in-flight") << "while stopped at " << c.failpoint << ": " << i.invariant << ": " << i.detail;
    }
  }

  // Survivors: enqueue on every lane, the child's included, at once.
  if (c.scenario != Scenario::resume) add(kLaneA, 1);
  add(kLaneC, 2);
  add(kLaneE, 1);
  // Claims of the other lanes: non-blocking calls, no waiting in between.
  auto others_done = [&] {
    for (const auto& [id, lane] : lane_of)
      if ((lane == kLaneB || lane == kLaneC) && !delivered.count(id) && c.scenario != Scenario::recover &&
          c.scenario != Scenario::reassign && c.scenario != Scenario::reassign_husk)
        return false;
    return true;
  };
  for (int i = 0; i < 64 && !others_done(); ++i) {
    Lease l;
    if (q().claim(l, 60000)) take(l);
  }
  EXPECT_TRUE(others_done()) << "claims of lanes B and C did not go on without waiting";

  // What is still owed: acknowledged jobs not delivered, less what the
  // child finished with (completed, dead-lettered, drained) or holds.
  auto finished_by_child = [&](const std::string& id) {
    const auto j = q().job(BrandedId::parse(id).value());
    if (!j) return true;  // completed or drained by the child
    return j->state == JobState::dead;
  };
  auto outstanding = [&](bool allow_child) {
    std::size_t n = 0;
    for (const std::string& id : acked) {
      if (delivered.count(id)) continue;
      if (allow_child && finished_by_child(id)) continue;
      ++n;
    }
    return n;
  };
  if (c.stop) {
    // The stopped child's lease comes back when it expires: move the clock.
    q().advance_clock(120000);
    const auto give_up = Clock::now() + 20s;
    while (outstanding(true) > 1 && Clock::now() < give_up) {
      Lease l;
      if (q().claim(l, 60000)) take(l);
      else q().tick();
    }
    EXPECT_LE(outstanding(true), 1u) << "while stopped at " << c.failpoint
                                     << ", more than its own job is out of the survivors' reach";
    ::kill(pid, SIGCONT);
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "continued child ended with status " << status;
  }
  for (const std::string& id : read_child_jobs())
    if (!acked.count(id)) unacked.insert(id);
  ::close(fds[0]);

  // A pause the child got as far as writing is in force (its settings word
  // is the decision): lift it, as its owner would.
  if (c.scenario == Scenario::pause_new) {
    ASSERT_EQ(q().resume(kLaneE), LaneStatus::ok);
  }
  // Everything acknowledged is delivered, recovery driven by our claims only.
  const auto give_up = Clock::now() + 20s;
  while (outstanding(true) > 0 && Clock::now() < give_up) {
    Lease l;
    if (q().claim_wait(l, 60000, 20ms)) take(l);
    else q().advance_clock(100);  // expired leases of the child come back
  }
  const auto recovered = Clock::now();
  ASSERT_EQ(outstanding(true), 0u) << "acknowledged jobs not delivered after " << c.failpoint;
  // Anything else still there (the child's own unacknowledged job, perhaps
  // admitted by recovery) comes out too.
  for (int round = 0; round < 3; ++round) {
    q().tick();
    for (Lease l; q().claim(l, 60000);) take(l);
  }
  for (const auto& [id, n] : delivered) {
    EXPECT_EQ(n, 1) << id << " delivered " << n << " times";
    EXPECT_TRUE(acked.count(id) || unacked.count(id)) << id << " was delivered but never enqueued";
  }
  q().tick();
  const FsckReport report = q().fsck();
  for (const FsckIssue& i : report.issues) ADD_FAILURE() << i.invariant << ": " << i.detail;
  const Snapshot snap = q().snapshot();
  EXPECT_EQ(snap.pending + snap.leased, 0u);
  for (const LaneInfo& l : snap.lanes) EXPECT_EQ(l.active, 0u) << l.group.string();
  std::printf("[ failpoint ] %-22s %-8s %-14s all delivered %lld ms after (finished for the dead: %llu)\n",
              c.failpoint, c.stop ? "stopped" : "killed", kScenarioNames[int(c.scenario)],
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(recovered - died).count()),
              static_cast<unsigned long long>(q().recovery().finished));
}

INSTANTIATE_TEST_SUITE_P(EveryStep, Failpoint, ::testing::ValuesIn(all_cases()), case_name);

// Repair looks for other live processes once, first: one that attaches
// after that look, while the tables are rewritten, is not refused (nothing
// stops an attach), and the report names it.
TEST(RepairAlone, AProcessThatAttachesWhileItRunsIsNamed) {
  test::SegmentGuard guard(test::unique_segment_name("repair_late"));
  auto q = Queue::create(guard.name(), QueueOptions{.jobs = 64, .lanes = 8, .payload_bytes = 32});
  ASSERT_TRUE(q.ok()) << q.error().message;
  ASSERT_EQ(q->enqueue(kLaneA, q->mint(), "job"), EnqueueStatus::enqueued);
  {
    test::RawSegment raw(guard.name());
    const std::uint32_t lane = raw.find_lane([](const detail::Word128& w) { return detail::LaneWord::head(w) != 0; });
    ASSERT_NE(lane, ~0U);
    raw.set_word(raw.lane(lane).word, detail::LaneWord::with_active(raw.word_value(raw.lane(lane).word), 1));
  }
  struct Late {
    std::string name;
    int ready[2] = {-1, -1}, hold[2] = {-1, -1};
    std::optional<test::ForkedChild> child;
  } late;
  late.name = guard.name();
  ASSERT_EQ(::pipe(late.ready), 0);
  ASSERT_EQ(::pipe(late.hold), 0);
  // At the step: a child attaches, and stays attached until let go.
  detail::failpoint_call(
      "repair.looked",
      [](void* arg) {
        Late& l = *static_cast<Late*>(arg);
        if (l.child) return;
        l.child.emplace([&l] {
          ::close(l.hold[1]);
          auto other = Queue::open(l.name);
          char c = other.ok() ? 'y' : 'n';
          if (::write(l.ready[1], &c, 1) != 1) return 3;
          if (::read(l.hold[0], &c, 1) < 0) return 4;  // EOF when the parent closes its end
          return 0;
        }, 60);
        char c = 0;
        if (::read(l.ready[0], &c, 1) != 1 || c != 'y') std::fprintf(stderr, "the late child did not attach\n");
      },
      &late);
  auto r = q->repair();
  detail::failpoint_call("repair.looked", nullptr, nullptr);
  ASSERT_TRUE(r.ok()) << r.error().message;
  ASSERT_TRUE(late.child.has_value());
  const std::string said = "pid " + std::to_string(late.child->pid()) + " attached while the repair ran";
  bool named = false;
  for (const std::string& line : r.value().repairs) named = named || line.find(said) != std::string::npos;
  EXPECT_TRUE(named) << "the repair's report does not name the process that attached during it";
  ::close(late.hold[1]);
  ::close(late.hold[0]);
  ::close(late.ready[0]);
  ::close(late.ready[1]);
  EXPECT_TRUE(late.child->wait_for(30s)) << "the late child did not exit";
  EXPECT_TRUE(late.child->exited_zero()) << late.child->describe();
}

}  // namespace
}  // namespace fairlane
