// Every step: a process SIGKILLed at each named failpoint (src/failpoint.hpp)
// of each multi-step operation, then what the survivors see.
//
// For each failpoint, a forked child opens the segment, arms the failpoint
// and runs an operation that reaches it; the failpoint kills it there. The
// parent (the survivor) then checks that:
//   - the child really died at that point (SIGKILL, not a normal exit);
//   - enqueue on every lane and claims of the other lanes go on at once
//     (non-blocking calls, no sleeping);
//   - every acknowledged job is delivered (or, for the child's own job,
//     completed or dead-lettered if the child had got that far);
//   - recovery ran by itself, driven by the survivor's claims, and fsck is
//     clean afterwards, with every lane's active count back to zero.
// It prints how long recovery took, from the child's death to the last
// delivery.
//
// Linked against fairlane_failpoints (the core compiled with the failpoints).
#include "test_support.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <string>

#include "failpoint.hpp"

namespace fairlane {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// What the child does to reach its failpoint.
enum class Scenario {
  enqueue,      // enqueue one job on an empty lane (rings it)
  claim,        // claim one job of lane A (which has more)
  complete,     // claim one job of lane A (limit 1), complete it
  fail_retry,   // claim one job of A (limit 1), fail it for an immediate retry
  fail_later,   // ... fail it for a retry in 50 ms
  fail_dead,    // ... fail it with max_attempts 1: dead-lettered
  sweep,        // claim with a 1 ms lease, let it expire, tick (the sweep takes it back)
  drain,        // drain lane A
  repair,       // a forced repair (the child dies holding the gate)
};

struct Case {
  const char* failpoint;
  Scenario scenario;
};

// The child's job ends: gone (completed by it), dead, or back in the queue.
bool child_completes(Scenario sc) { return sc == Scenario::complete; }

const Case kCases[] = {
    {"enqueue.slot_taken", Scenario::enqueue},
    {"enqueue.admitting", Scenario::enqueue},
    {"enqueue.indexed", Scenario::enqueue},
    {"enqueue.pending", Scenario::enqueue},
    {"lane.intake_pushed", Scenario::enqueue},
    {"lane.intake_pushed", Scenario::fail_retry},
    {"lane.intake_pushed", Scenario::sweep},
    {"lane.ringed", Scenario::enqueue},
    {"lane.ringed", Scenario::fail_retry},
    {"lane.ringed", Scenario::complete},
    {"ring.cell_filled", Scenario::enqueue},
    {"ring.cell_taken", Scenario::claim},
    {"claim.token_taken", Scenario::claim},
    {"claim.reserved", Scenario::claim},
    {"claim.token_returned", Scenario::claim},
    {"claim.popped", Scenario::claim},
    {"claim.released", Scenario::claim},
    {"claim.leased", Scenario::claim},
    {"complete.freeing", Scenario::complete},
    {"free.unindexed", Scenario::complete},
    {"free.freed", Scenario::complete},
    {"complete.freed", Scenario::complete},
    {"fail.taken", Scenario::fail_retry},
    {"fail.taken", Scenario::fail_dead},
    {"fail.pending", Scenario::fail_retry},
    {"fail.scheduled", Scenario::fail_later},
    {"fail.dead", Scenario::fail_dead},
    {"sweep.returned", Scenario::sweep},
    {"drain.owned", Scenario::drain},
    {"drain.counted", Scenario::drain},
    {"free.unindexed", Scenario::drain},
    {"repair.closed", Scenario::repair},
    {"repair.rebuilt", Scenario::repair},
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.failpoint; }

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string n = info.param.failpoint;
  for (char& c : n)
    if (c == '.') c = '_';
  static const char* scenarios[] = {"enqueue", "claim", "complete", "fail_retry", "fail_later",
                                    "fail_dead", "sweep", "drain", "repair"};
  return n + "_in_" + scenarios[int(info.param.scenario)];
}

const BrandedId kLaneA = BrandedId::make("AAA", 1);
const BrandedId kLaneB = BrandedId::make("BBB", 1);
const BrandedId kLaneC = BrandedId::make("CCC", 1);
const BrandedId kLaneE = BrandedId::make("EEE", 1);  // empty until the child enqueues

// The child: runs its scenario with the failpoint armed. Exits 0 if the
// failpoint was never reached, 3 if something went wrong before it. Writes
// the id of the job it leased (if any) to `fd` first.
[[noreturn]] void child_main(const std::string& seg, const Case& c, int fd) {
  ::alarm(30);  // watchdog: never outlive the test
  auto r = Queue::open(seg);
  if (!r) ::_exit(3);
  Queue& q = r.value();
  auto claim_one = [&](std::uint32_t lease_ms) {
    Lease l;
    if (!q.claim(l, lease_ms)) ::_exit(3);
    const std::string line = l.id.string() + "\n";
    if (::write(fd, line.data(), line.size()) != ssize_t(line.size())) ::_exit(3);
    return l;
  };
  const bool during_claim = c.scenario == Scenario::claim;
  if (!during_claim && c.scenario != Scenario::repair && c.scenario != Scenario::enqueue &&
      c.scenario != Scenario::drain) {
    // The failpoint is in what follows the claim: arm it after.
    const Lease l = claim_one(c.scenario == Scenario::sweep ? 1 : 60000);
    detail::failpoint_arm(c.failpoint);
    switch (c.scenario) {
      case Scenario::complete: q.complete(l.id, l.token); break;
      case Scenario::fail_retry: q.fail(l.id, l.token, FailOptions{.delay_ms = 0, .max_attempts = 10, .error = "boom"}); break;
      case Scenario::fail_later: q.fail(l.id, l.token, FailOptions{.delay_ms = 50, .max_attempts = 10, .error = "later"}); break;
      case Scenario::fail_dead:
        q.fail(l.id, l.token, FailOptions{.delay_ms = 0, .max_attempts = 1, .error = "hopeless"});
        break;
      case Scenario::sweep:
        q.advance_clock(10);  // the 1 ms lease runs out (the segment's clock, not a sleep)
        q.tick();
        break;
      default: break;
    }
    ::_exit(0);
  }
  detail::failpoint_arm(c.failpoint);
  switch (c.scenario) {
    case Scenario::enqueue: q.enqueue(kLaneE, q.mint(), "child"); break;
    case Scenario::claim: claim_one(60000); break;
    case Scenario::drain: q.drain(kLaneA); break;
    case Scenario::repair: (void)q.repair(true); break;
    default: break;
  }
  ::_exit(0);
}

class Failpoint : public test::SegmentFixture, public ::testing::WithParamInterface<Case> {};

TEST(FailpointList, EveryFailpointHasAScenario) {
  std::set<std::string> covered;
  for (const Case& c : kCases) covered.insert(c.failpoint);
  for (std::size_t i = 0; i < detail::kFailpointCount; ++i)
    EXPECT_TRUE(covered.count(detail::kFailpoints[i])) << detail::kFailpoints[i] << " has no test case";
  EXPECT_EQ(covered.size(), detail::kFailpointCount);
}

TEST_P(Failpoint, SurvivorsGoOnAndRecoveryRestoresEverything) {
  const Case c = GetParam();
  QueueOptions o;
  o.jobs = 64;
  o.lanes = 8;
  o.payload_bytes = 32;
  create(o);
  const bool limited = c.scenario == Scenario::complete || c.scenario == Scenario::fail_retry ||
                       c.scenario == Scenario::fail_later || c.scenario == Scenario::fail_dead;
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
  add(kLaneA, 3);
  add(kLaneB, 3);

  int fds[2];
  ASSERT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    ::close(fds[0]);
    child_main(seg(), c, fds[1]);
  }
  ::close(fds[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  const auto died = Clock::now();
  char buf[256] = {};
  const ssize_t got = ::read(fds[0], buf, sizeof buf - 1);
  ::close(fds[0]);
  const std::string child_job = got > 0 ? std::string(buf, std::strcspn(buf, "\n")) : std::string();
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL)
      << c.failpoint << " was not reached (child status " << status << ")";

  // Survivors: enqueue on every lane, the dead child's included, at once.
  add(kLaneA, 1);
  add(kLaneC, 2);
  add(kLaneE, 1);

  std::map<std::string, int> delivered;  // completed by the survivor
  auto take = [&](const Lease& l) {
    ++delivered[l.id.string()];
    EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok) << l.id.string();
  };
  // Claims of the other lanes: non-blocking calls, no waiting in between.
  auto others_done = [&] {
    for (const auto& [id, lane] : lane_of)
      if ((lane == kLaneB || lane == kLaneC) && !delivered.count(id)) return false;
    return true;
  };
  for (int i = 0; i < 64 && !others_done(); ++i) {
    Lease l;
    if (q().claim(l, 60000)) take(l);
  }
  EXPECT_TRUE(others_done()) << "claims of lanes B and C did not go on without waiting";

  // Everything acknowledged is delivered, recovery driven by our claims only.
  auto outstanding = [&] {
    std::size_t n = 0;
    for (const std::string& id : acked) {
      if (delivered.count(id)) continue;
      if (id == child_job && child_completes(c.scenario) && !q().job(BrandedId::parse(id).value())) continue;
      if (id == child_job && c.scenario == Scenario::fail_dead) {
        const auto j = q().job(BrandedId::parse(id).value());
        if (j && j->state == JobState::dead) continue;
      }
      if (c.scenario == Scenario::drain && lane_of[id] == kLaneA && !q().job(BrandedId::parse(id).value()))
        continue;  // the child's drain removed it (a drain is a deliberate removal)
      ++n;
    }
    return n;
  };
  const auto give_up = Clock::now() + 20s;
  while (outstanding() > 0 && Clock::now() < give_up) {
    Lease l;
    if (q().claim_wait(l, 60000, 100ms)) take(l);
  }
  const auto recovered = Clock::now();
  ASSERT_EQ(outstanding(), 0u) << "acknowledged jobs not delivered after " << c.failpoint;
  // Anything else still there (the child's own unacknowledged job) comes out too.
  for (Lease l; q().claim(l, 60000);) take(l);

  for (const auto& [id, n] : delivered) EXPECT_EQ(n, 1) << id << " delivered " << n << " times";
  const RecoveryInfo rec = q().recovery();
  EXPECT_GE(rec.repairs, 1u) << "no repair ran after a death inside an operation";
  const FsckReport report = q().fsck();
  for (const FsckIssue& i : report.issues) ADD_FAILURE() << i.invariant << ": " << i.detail;
  const Snapshot snap = q().snapshot();
  EXPECT_EQ(snap.pending + snap.leased, 0u);
  for (const LaneInfo& l : snap.lanes) EXPECT_EQ(l.active, 0u) << l.group.string();
  std::printf("[ failpoint ] %-22s dead at its step; all delivered %lld ms later (repairs %llu, gate closed %llu us)\n",
              c.failpoint,
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(recovered - died).count()),
              static_cast<unsigned long long>(rec.repairs), static_cast<unsigned long long>(rec.repair_us));
}

INSTANTIATE_TEST_SUITE_P(EveryStep, Failpoint, ::testing::ValuesIn(kCases), case_name);

}  // namespace
}  // namespace fairlane
