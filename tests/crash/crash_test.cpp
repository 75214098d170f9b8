// Processes that die holding work (DESIGN.md section 4): a consumer that
// exits holding a lease, a consumer SIGKILLed while it holds leases, and a
// consumer killed while it is inside a claim (found by stopping it and
// looking at the ring). failpoint_test.cpp kills at each step exactly, and
// torture.cpp at random.
#include "forked_child.hpp"
#include "liveness_lock.hpp"
#include "raw_segment.hpp"
#include "segment.hpp"
#include "spawn.hpp"
#include "test_support.hpp"
#include "worker_protocol.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include <fairlane/detail/layout.hpp>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fairlane {
namespace {

using test::Child;
using test::RawSegment;
using test::describe;
using test::SegmentGuard;
using test::TempDir;
using test::unique_segment_name;
namespace proto = test::proto;

// The queue most of these tests make: 64 jobs, 8 lanes, 64-byte payloads.
QueueOptions small() {
  QueueOptions o;
  o.jobs = 64;
  o.lanes = 8;
  o.payload_bytes = 64;
  return o;
}

class Crash : public test::SegmentFixture {
 protected:
  TempDir dir_;
};

TEST_F(Crash, LeaseOfDeadConsumerIsRedeliveredAndFreesTheLimit) {
  // The BullMQ 3929 shape: a consumer dies holding a lease on a lane with
  // limit 1. The lane must not stay stuck: once the lease runs out, the job
  // is delivered again (attempt 2) and the lane's active count is released.
  QueueOptions o = small();
  create(o);
  const BrandedId lane = proto::lane_group(0);
  ASSERT_EQ(q().set_limit(lane, 1), LaneStatus::ok);
  const BrandedId first = q().mint(), second = q().mint();
  ASSERT_EQ(q().enqueue(lane, first, "one"), EnqueueStatus::enqueued);
  ASSERT_EQ(q().enqueue(lane, second, "two"), EnqueueStatus::enqueued);

  const auto out = dir_.path() / "abandon.txt";
  Child child(std::vector<std::string>{"claim_abandon", seg(), out.string(), "1000"});
  child.release();
  ASSERT_TRUE(child.succeeded()) << child.describe();
  std::ifstream in(out);
  std::string id;
  unsigned attempt = 0;
  std::uint64_t dead_token = 0;
  in >> id >> attempt >> dead_token;
  ASSERT_EQ(id, first.string());
  ASSERT_EQ(attempt, 1U);

  // The lane is at its ceiling while the lease is out. The lease comes back
  // at its deadline, or sooner, once a sweep finds its holder dead; either
  // way the next claim gets `first` again, never `second` past the limit.
  Lease l;
  if (!q().claim(l, 60000)) {
    q().advance_clock(1500);
    ASSERT_TRUE(q().claim(l, 60000)) << "lane stuck after its consumer died";
  }
  EXPECT_EQ(l.id, first) << "limit 1 exceeded while the dead consumer's lease was out";
  EXPECT_EQ(l.attempt, 2U);
  EXPECT_EQ(q().complete(first, Token(dead_token)), AckStatus::stale) << "the dead consumer's token must be fenced off";
  EXPECT_EQ(q().complete(first, l.token), AckStatus::ok);
  ASSERT_TRUE(q().claim(l, 60000));
  EXPECT_EQ(l.id, second);
  EXPECT_EQ(q().complete(second, l.token), AckStatus::ok);
  const Snapshot s = q().snapshot();
  EXPECT_EQ(s.leased, 0U);
  EXPECT_EQ(s.pending, 0U);
  for (const auto& li : s.lanes) EXPECT_EQ(li.active, 0U) << li.group.str();
}

TEST_F(Crash, LeasesOfAKilledConsumerAreRedeliveredLongBeforeTheirDeadline) {
  // A consumer holding three jobs under a 60 s lease is SIGKILLed. Its
  // leases must not wait for their deadline: a survivor parked in
  // claim_wait gets them again (attempt 2) once a sweep finds their holder
  // dead (pid + start time), and recovery() says whose they were.
  QueueOptions o = small();
  create(o);
  constexpr std::uint64_t kHeld = 3;
  std::map<std::string, int> pending;
  for (std::uint32_t i = 0; i < kHeld; ++i) {
    const BrandedId id = q().mint();
    ASSERT_EQ(q().enqueue(proto::lane_group(i), id, "held"), EnqueueStatus::enqueued);
    pending[id.string()] = 0;
  }
  const auto out = dir_.path() / "held.txt";
  Child child(std::vector<std::string>{"claim_hold", seg(), out.string(), "60000", std::to_string(kHeld)});
  child.release();
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!std::filesystem::exists(out)) {
    ASSERT_FALSE(child.poll()) << "claim_hold ended early: " << child.describe();
    ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "claim_hold never claimed";
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::ifstream in(out);
  std::string id;
  unsigned attempt = 0;
  std::uint64_t token = 0, held = 0;
  std::map<std::string, std::uint64_t> dead_tokens;
  while (in >> id >> attempt >> token) {
    ASSERT_TRUE(pending.count(id)) << id;
    ASSERT_EQ(attempt, 1U);
    dead_tokens[id] = token;
    ++held;
  }
  ASSERT_EQ(held, kHeld);

  // While it lives, its leases are its own: a sweep that judges every
  // holder moves nothing, and nothing is claimable.
  EXPECT_EQ(q().tick(), 0U);
  Lease l;
  EXPECT_FALSE(q().claim(l, 60000));
  const RecoveryInfo before = q().recovery();

  const int dead_pid = child.pid();
  ASSERT_EQ(::kill(dead_pid, SIGKILL), 0);
  child.wait();  // reaped: a zombie still has its pid and start time
  const auto killed = std::chrono::steady_clock::now();
  std::vector<std::chrono::milliseconds> redelivered;
  while (redelivered.size() < kHeld && std::chrono::steady_clock::now() - killed < std::chrono::seconds(30)) {
    if (!q().claim_wait(l, 60000, std::chrono::milliseconds(2000))) continue;
    ASSERT_TRUE(pending.count(l.id.string())) << l.id.str();
    EXPECT_EQ(++pending[l.id.string()], 1) << "delivered twice: " << l.id.str();
    EXPECT_EQ(l.attempt, 2U) << l.id.str();
    EXPECT_EQ(q().complete(l.id, Token(dead_tokens[l.id.string()])), AckStatus::stale)
        << "the dead consumer's token must be fenced off";
    EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
    redelivered.push_back(std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - killed));
  }
  ASSERT_EQ(redelivered.size(), kHeld) << "the killed consumer's jobs were not redelivered within 30 s";
  // Well before the 60 s lease would have run out (the bound is about half
  // a second; no speed is asserted beyond that generous margin).
  EXPECT_LT(redelivered.back(), std::chrono::seconds(30));
  std::printf("[ recovery ] %llu leases of killed pid %d redelivered %lld ms after the kill\n",
              static_cast<unsigned long long>(kHeld), dead_pid, static_cast<long long>(redelivered.back().count()));

  const RecoveryInfo r = q().recovery();
  EXPECT_EQ(r.runs, before.runs + 1);
  EXPECT_EQ(r.jobs, before.jobs + kHeld);
  EXPECT_EQ(r.last_jobs, kHeld);
  EXPECT_EQ(r.last_pid, dead_pid);
  EXPECT_GT(r.last_unix_ms, 0U);
  for (const ProcessInfo& p : q().processes())
    if (p.pid == dead_pid) {
      EXPECT_FALSE(p.alive);
      EXPECT_EQ(p.leases, 0U);
    }
  const FsckReport f = q().fsck();
  EXPECT_TRUE(f.clean()) << (f.issues.empty() ? "" : f.issues.front().invariant + ": " + f.issues.front().detail);
}

// Ten recovery passes on the segment's clock (advance_clock: no sleeping),
// each judging every holder afresh; what they moved, and what claims found.
std::uint64_t moved_over_recovery_passes(Queue& q, std::uint32_t recovery_ms) {
  std::uint64_t moved = 0;
  Lease l;
  for (int pass = 0; pass < 10; ++pass) {
    q.advance_clock(recovery_ms);
    moved += q.tick();
    if (q.claim(l, 60000)) ++moved;
  }
  return moved;
}

// A consumer in a PID namespace of its own (a container sharing /dev/shm
// with ours) holds two jobs. Its pid means nothing here: it is pid 1 in its
// namespace, and our pid 1 is another process with another start time, so
// judged by pid and start time it looked dead, and its leases were taken
// from it while it worked on them (and its record given to the next process
// that attached). Judged by its liveness lock it keeps them while it lives,
// and loses them soon after it is killed. Skipped where no namespace can be
// made (not root).
TEST_F(Crash, AConsumerInAnotherPidNamespaceKeepsItsLeasesUntilItDies) {
  QueueOptions o = small();
  o.recovery_ms = 200;
  create(o);
  constexpr std::uint64_t kHeld = 2;
  std::map<std::string, int> pending;
  for (std::uint32_t i = 0; i < kHeld; ++i) {
    const BrandedId id = q().mint();
    ASSERT_EQ(q().enqueue(proto::lane_group(i), id, "held"), EnqueueStatus::enqueued);
    pending[id.string()] = 0;
  }
  const auto out = dir_.path() / "held.txt";
  Child child(std::vector<std::string>{"in_pid_ns", "claim_hold", seg(), out.string(), "60000", std::to_string(kHeld)});
  child.release();
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!std::filesystem::exists(out)) {
    if (child.poll()) {
      if (WIFEXITED(child.wait()) && WEXITSTATUS(child.wait()) == 5) GTEST_SKIP() << "no PID namespace here (not root)";
      FAIL() << "claim_hold ended early: " << child.describe();
    }
    ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "claim_hold never claimed";
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::ifstream in(out);
  std::string id;
  unsigned attempt = 0;
  std::uint64_t token = 0, held = 0;
  while (in >> id >> attempt >> token) {
    ASSERT_TRUE(pending.count(id)) << id;
    ++held;
  }
  ASSERT_EQ(held, kHeld);
  bool seen = false;
  for (const ProcessInfo& p : q().processes())
    if (p.leases == kHeld) {
      seen = true;
      EXPECT_EQ(p.pid, 1) << "the consumer is not in a namespace of its own";
      EXPECT_TRUE(p.alive);
    }
  EXPECT_TRUE(seen) << "no attached process holds the leases";

  // Every pass judges the holder, and finds it alive.
  EXPECT_EQ(moved_over_recovery_passes(q(), o.recovery_ms), 0U) << "a live consumer's leases were taken";
  EXPECT_EQ(q().recovery().runs, 0U);

  ASSERT_EQ(::kill(child.pid(), SIGKILL), 0);  // its namespace's pid 1 dies with it
  child.wait();
  Lease l;
  std::uint64_t redelivered = 0;
  const auto killed = std::chrono::steady_clock::now();
  while (redelivered < kHeld && std::chrono::steady_clock::now() - killed < std::chrono::seconds(30)) {
    if (!q().claim_wait(l, 60000, std::chrono::milliseconds(2000))) continue;
    ASSERT_TRUE(pending.count(l.id.string())) << l.id.str();
    EXPECT_EQ(++pending[l.id.string()], 1) << "delivered twice: " << l.id.str();
    EXPECT_EQ(l.attempt, 2U);
    EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
    ++redelivered;
  }
  EXPECT_EQ(redelivered, kHeld) << "the killed consumer's jobs were not redelivered within 30 s";
  EXPECT_TRUE(q().fsck().clean());
}

// Waits for claim_hold's output file; false if the child ended first (then
// *skip says whether it could make no namespace) or never wrote it.
bool wait_held(Child& child, const std::filesystem::path& out, bool* skip) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!std::filesystem::exists(out)) {
    if (child.poll()) {
      *skip = WIFEXITED(child.wait()) && WEXITSTATUS(child.wait()) == 5;
      return false;
    }
    if (std::chrono::steady_clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

// Repair refuses while another live process is attached, and skips the
// records of the caller's own handles. It told those by pid: a repair run
// as pid 1 of one container skipped a consumer that is pid 1 of another,
// and rebuilt the segment under it (found in review of e826e69).
TEST_F(Crash, RepairInAnotherPidNamespaceRefusesWhileAConsumerWithTheSamePidLives) {
  QueueOptions o = small();
  SegmentGuard guard(unique_segment_name("repair"));
  const std::string name = guard.name();
  {
    auto made = Queue::create(name, o);
    ASSERT_TRUE(made.ok());
    for (std::uint32_t i = 0; i < 2; ++i)
      ASSERT_EQ(made.value().enqueue(proto::lane_group(i), made.value().mint(), "held"), EnqueueStatus::enqueued);
  }  // detached: the consumer is the only process attached
  const auto out = dir_.path() / "held.txt";
  Child holder(std::vector<std::string>{"in_pid_ns", "claim_hold", name, out.string(), "60000", "2"});
  holder.release();
  bool skip = false;
  if (!wait_held(holder, out, &skip)) {
    if (skip) GTEST_SKIP() << "no PID namespace here (not root)";
    FAIL() << "claim_hold never claimed: " << holder.describe();
  }
  Child repairer(std::vector<std::string>{"in_pid_ns", "repair", name});
  repairer.release();
  const int st = repairer.wait();
  ASSERT_TRUE(WIFEXITED(st)) << repairer.describe();
  EXPECT_EQ(WEXITSTATUS(st), 6) << "repair ran while a live consumer (pid 1 of another namespace) was attached";
  ::kill(holder.pid(), SIGKILL);
  holder.wait();
}

// Repair skips the records of the caller's own handles, known by a list in
// the process's memory. A child forked without exec inherits that list, not
// the records: it must not skip its parent's (a live member holding a
// lease) and rebuild the segment under it (found in review of 4e618c4).
TEST_F(Crash, RepairInAForkedChildRefusesWhileItsParentIsAttached) {
  QueueOptions o = small();
  create(o);
  ASSERT_EQ(q().enqueue(proto::lane_group(0), q().mint(), "held"), EnqueueStatus::enqueued);
  Lease l;
  ASSERT_TRUE(q().claim(l, 60000));
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    auto opened = Queue::open(seg());
    if (!opened.ok()) ::_exit(3);
    auto rep = opened.value().repair();
    ::_exit(rep.ok() ? 1 : (rep.error().code == Errc::busy ? 0 : 2));
  }
  int st = 0;
  ASSERT_EQ(::waitpid(child, &st, 0), child);
  ASSERT_TRUE(WIFEXITED(st));
  EXPECT_EQ(WEXITSTATUS(st), 0) << "a forked child's repair ran while its parent (holding a lease) was attached";
  EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
}

// A consumer that forked a child without exec (a worker pool's helper) and
// then died is dead, though the child lives on with copies of its
// descriptors and mapping: the liveness lock was taken on the description
// the mapping holds, which the child kept, so the parent was judged alive
// and its leases waited for their deadlines while the child lived. The
// fork handler gives the child descriptions of its own.
TEST_F(Crash, AConsumerThatDiesWhileItsChildForkedWithoutExecLivesIsDead) {
  QueueOptions o = small();
  o.recovery_ms = 200;
  create(o);
  for (std::uint32_t i = 0; i < 2; ++i)
    ASSERT_EQ(q().enqueue(proto::lane_group(i), q().mint(), "held"), EnqueueStatus::enqueued);
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t consumer = ::fork();
  ASSERT_GE(consumer, 0);
  if (consumer == 0) {
    auto opened = Queue::open(seg());
    Lease a, b;
    if (!opened.ok() || !opened.value().claim(a, 60000) || !opened.value().claim(b, 60000)) ::_exit(3);
    const pid_t child = ::fork();
    if (child == 0) {
      ::alarm(30);  // outlives its parent, not the test
      // Ready once its fork handler has let go of the parent's lock (it
      // holds the parent's description until then).
      const pid_t me = ::getpid();
      (void)!::write(ready[1], &me, sizeof me);
      for (;;) ::pause();
    }
    for (;;) ::pause();
  }
  ::close(ready[1]);
  pid_t child = 0;
  const bool held = ::read(ready[0], &child, sizeof child) == ssize_t(sizeof child);
  ::close(ready[0]);
  ::kill(consumer, SIGKILL);
  int st = 0;
  ASSERT_EQ(::waitpid(consumer, &st, 0), consumer);
  ASSERT_TRUE(held) << "the consumer never claimed (status " << st << ")";
  std::uint64_t returned = 0;
  for (int pass = 0; pass < 10 && returned < 2; ++pass) {
    q().advance_clock(o.recovery_ms);
    returned += q().tick();
  }
  EXPECT_EQ(returned, 2U) << "the dead consumer's leases did not come back while its child lived";
  EXPECT_EQ(::kill(child, 0), 0) << "the child was to outlive its parent for this test";
  ::kill(child, SIGKILL);
}

// A child forked without exec that closes its copy of its parent's handle
// (it returns from a scope, or exits through its destructors) leaves the
// parent's record alone: it cleared the record's word, so the parent's
// record was free while the parent worked, and the next process to attach
// took it.
TEST_F(Crash, AChildForkedWithoutExecThatClosesItsCopyOfTheHandleLeavesItsParentAttached) {
  QueueOptions o = small();
  create(o);
  RawSegment raw(seg());
  std::uint32_t mine = ~0U;  // the record of q(), the only handle attached
  for (std::uint32_t i = 0; i < raw.header().proc_capacity; ++i)
    if (raw.proc(i).owner.load() != 0) mine = i;
  ASSERT_NE(mine, ~0U);
  const std::uint64_t owner = raw.proc(mine).owner.load();
  ASSERT_EQ(q().enqueue(proto::lane_group(0), q().mint(), "held"), EnqueueStatus::enqueued);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    { Queue copy = std::move(q()); }  // closed
    ::_exit(0);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(child, &st, 0), child);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << st;
  EXPECT_EQ(raw.proc(mine).owner.load(), owner) << "a child's close gave its parent's record away";
  Lease l;
  ASSERT_TRUE(q().claim(l, 60000));
  EXPECT_EQ(q().complete(l.id, l.token), AckStatus::ok);
}

// The process whose parent is `parent` (in_pid_ns runs its mode in a child
// of its own), by its pid here; 0 while there is none.
pid_t child_of(pid_t parent) {
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string n = e.path().filename().string();
    if (n.empty() || n.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(e.path() / "stat");
    std::string text;
    std::getline(in, text);
    const auto paren = text.rfind(')');
    if (paren == std::string::npos) continue;
    std::istringstream rest(text.substr(paren + 2));
    std::string state;
    long ppid = 0;
    if (rest >> state >> ppid && ppid == parent) return pid_t(std::stol(n));
  }
  return 0;
}

// Is `pid` in a sleep system call? (attach sleeps 1 ms a round while it
// waits for a busy liveness lock, and makes no other sleep before.)
bool asleep(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/syscall");
  long nr = -1;
  if (!(in >> nr)) return false;  // "running", or gone
#ifdef SYS_nanosleep
  if (nr == SYS_nanosleep) return true;
#endif
  return nr == SYS_clock_nanosleep;
}

// Takes the liveness lock byte of every record whose byte is not held by
// another open of the segment's file (fd): what a detacher stopped between
// clearing its word and its unlock holds. How many it took.
int lock_every_free_record(int fd, std::uint32_t records) {
  int taken = 0;
  for (std::uint32_t i = 0; i < records; ++i)
    if (test::set_record_lock(fd, i, F_WRLCK)) ++taken;
  return taken;
}

// An attach that finds the only free record's lock held past its wait says
// so: it used to say the segment had no free record, "N processes attached;
// create it with a larger --processes", with one record free.
TEST_F(Crash, AnAttachThatGivesUpOnABusyLivenessLockSaysSo) {
  QueueOptions o = small();
  o.recovery_ms = 200;
  o.processes = 2;
  create(o);
  const int fd = ::open(("/dev/shm/" + seg()).c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(lock_every_free_record(fd, o.processes), 1);
  auto opened = Queue::open(seg());  // waits its 1 s for the busy lock, then gives up
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.error().code, Errc::busy) << opened.error().message;
  EXPECT_NE(opened.error().message.find("liveness lock"), std::string::npos) << opened.error().message;
  EXPECT_EQ(opened.error().message.find("larger --processes"), std::string::npos) << opened.error().message;
  ::close(fd);
  auto again = Queue::open(seg());
  EXPECT_TRUE(again.ok()) << (again.ok() ? "" : again.error().message);
}

// An attacher that finds a record's liveness lock still held (a detacher
// between clearing its owner word and giving the lock up; here the test
// holds every free record's lock byte for 300 ms) waits for it, rather
// than attach without it: judged by pid, a consumer in another PID
// namespace lost its leases while it worked (found in review of e826e69).
TEST_F(Crash, AConsumerWhoseLivenessLockWasBusyAtAttachWaitsForItAndKeepsItsLeases) {
  QueueOptions o = small();
  o.recovery_ms = 200;
  o.processes = 8;
  create(o);
  for (std::uint32_t i = 0; i < 2; ++i)
    ASSERT_EQ(q().enqueue(proto::lane_group(i), q().mint(), "held"), EnqueueStatus::enqueued);
  const int fd = ::open(("/dev/shm/" + seg()).c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  const int busy = lock_every_free_record(fd, o.processes);  // fails on our own record's byte only
  ASSERT_EQ(busy, int(o.processes) - 1);
  const auto out = dir_.path() / "held.txt";
  Child holder(std::vector<std::string>{"in_pid_ns", "claim_hold", seg(), out.string(), "60000", "2"});
  holder.release();
  // The detacher's unlock comes once the attacher waits for the lock (it
  // attaches before it reads the gate): then it is an attach that waited.
  const bool waited = test::eventually([&] {
    if (holder.poll()) return true;  // no namespace here: wait_held says so
    const pid_t in_ns = child_of(holder.pid());
    return in_ns > 0 && asleep(in_ns);
  });
  ::close(fd);
  bool skip = false;
  if (!wait_held(holder, out, &skip)) {
    if (skip) GTEST_SKIP() << "no PID namespace here (not root)";
    FAIL() << "claim_hold never claimed: " << holder.describe();
  }
  EXPECT_TRUE(waited) << "the attacher was never seen waiting for the busy lock";
  EXPECT_EQ(moved_over_recovery_passes(q(), o.recovery_ms), 0U) << "a live consumer's leases were taken";
  for (const ProcessInfo& p : q().processes())
    if (p.leases > 0) {
      EXPECT_TRUE(p.alive) << "pid " << p.pid;
    }
  ::kill(holder.pid(), SIGKILL);
  holder.wait();
}

// A consumer killed at a random instant of its work (often inside a claim:
// between its take and its lease, holding the lane's token) must not leave
// any lane unserved: recovery happens by itself, driven by whichever live
// process next claims (invariant 3, the crash model). The failpoint tests
// (failpoint_test.cpp) kill at each step exactly; this one kills a real
// consumer wherever it happens to be, eight times, and then checks that every
// lane is served again and the queue drains to the last job.
TEST_F(Crash, ConsumerKilledInsideAClaimDoesNotWedgeItsLane) {
  constexpr std::uint32_t kLanes = 3;
  constexpr std::uint64_t kPerLane = 20000;
  constexpr int kKills = 8;
  QueueOptions o;
  o.jobs = 65536;
  o.lanes = 8;
  o.payload_bytes = 48;
  create(o);
  for (std::uint64_t i = 0; i < kPerLane * kLanes; ++i) {
    const auto lane = static_cast<std::uint32_t>(i % kLanes);
    ASSERT_EQ(q().enqueue(proto::lane_group(lane), q().mint(), proto::expected_payload(0, lane, i, 40)),
              EnqueueStatus::enqueued);
  }
  auto total_depth = [&] {
    std::uint64_t t = 0;
    for (std::uint32_t i = 0; i < kLanes; ++i) t += q().depth(proto::lane_group(i));
    return t;
  };

  // Kill a consumer kKills times, each once it has taken 1..7 jobs more.
  // Each takes at most 4,000 jobs (so that a starved parent cannot see the
  // queue drained before its kill lands: the machine may be busy); one that
  // got there first has exited, and its kill is a no-op.
  for (int k = 0; k < kKills; ++k) {
    Child consumer(std::vector<std::string>{"consume", seg(), (dir_.path() / "c.txt").string(),
                                            std::to_string(~0ULL >> 1), "4000"});
    const std::uint64_t start = total_depth();
    consumer.release();
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (total_depth() + 1 + std::uint64_t(k % 7) > start) {
      ASSERT_LT(std::chrono::steady_clock::now(), give_up) << "consumer made no progress";
    }
    ::kill(consumer.pid(), SIGKILL);
    consumer.wait();
  }

  // The survivor (this process) drains what is left. The dead consumers'
  // leases run out (advance_clock) and their jobs come back; every job left
  // is delivered, and every lane is served. A generous real-time bound:
  // recovery is "well under a second" (DESIGN).
  std::map<BrandedId, std::uint64_t> served;
  const Snapshot before = q().snapshot();
  const std::uint64_t left = before.pending + before.leased;
  Lease l;
  std::uint64_t delivered = 0;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    const Snapshot now = q().snapshot();
    if (now.pending + now.leased == 0) break;
    ASSERT_LT(std::chrono::steady_clock::now(), give_up)
        << "the queue stopped draining: pending " << now.pending << ", leased " << now.leased;
    q().advance_clock(o.recovery_ms);
    while (q().try_claim(l, 60000) == ClaimStatus::claimed) {
      ++served[l.group];
      ++delivered;
      ASSERT_EQ(q().complete(l.id, l.token), AckStatus::ok);
    }
  }
  for (std::uint32_t i = 0; i < kLanes; ++i)
    EXPECT_GT(served[proto::lane_group(i)], 0U) << "lane " << proto::lane_group(i).str() << " was never served again";
  EXPECT_EQ(delivered, left) << "jobs pending or held by the dead consumers that were not delivered";
  const FsckReport f = q().fsck();
  EXPECT_TRUE(f.clean()) << (f.issues.empty() ? "" : f.issues.front().invariant + ": " + f.issues.front().detail);
}

// A copy was told from an attachment by pid alone (attach_pid != getpid()).
// A process that is pid 1 of its PID namespace (a container's main process)
// and forks a child into a new PID namespace without exec gives that child
// pid 1 too: the child's close of its copy detached the parent's record
// (found in review of ebd209c; skipped where no namespace can be made).
TEST_F(Crash, AChildThatIsAlsoPid1ClosingItsCopyLeavesItsParentAttached) {
  QueueOptions o = small();
  create(o);
  const pid_t x = ::fork();
  ASSERT_GE(x, 0);
  if (x == 0) {
    if (::unshare(CLONE_NEWPID) != 0) ::_exit(5);
    const pid_t y = ::fork();
    if (y == 0) {  // pid 1 of a new namespace: a container's main process
      ::alarm(30);
      auto opened = Queue::open(seg());
      if (!opened.ok()) ::_exit(3);
      Queue qy = std::move(opened.value());
      RawSegment raw(seg());
      std::uint32_t mine = ~0U;
      for (std::uint32_t i = 0; i < raw.header().proc_capacity; ++i)
        if ((raw.proc(i).owner.load() & 0xFFFFFFFF) == std::uint32_t(::getpid())) mine = i;
      if (mine == ~0U) ::_exit(6);
      const std::uint64_t owner = raw.proc(mine).owner.load();
      if (::unshare(CLONE_NEWPID) != 0) ::_exit(5);
      const pid_t z = ::fork();
      if (z == 0) {  // pid 1 of another namespace, forked without exec
        { Queue copy = std::move(qy); }
        ::_exit(::getpid() == 1 ? 0 : 7);
      }
      int st = 0;
      if (::waitpid(z, &st, 0) != z || !WIFEXITED(st) || WEXITSTATUS(st) != 0) ::_exit(8);
      std::_Exit(raw.proc(mine).owner.load() == owner ? 0 : 1);
    }
    int st = 0;
    ::waitpid(y, &st, 0);
    std::_Exit(WIFEXITED(st) ? WEXITSTATUS(st) : 9);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(x, &st, 0), x);
  ASSERT_TRUE(WIFEXITED(st)) << st;
  if (WEXITSTATUS(st) == 5) GTEST_SKIP() << "no PID namespace here (not root)";
  EXPECT_EQ(WEXITSTATUS(st), 0) << "the pid-1 child's close of its copy gave its pid-1 parent's record away";
}

// The lock's file was opened before the handle was listed for the fork
// handler. A thread that forked without exec in between gave its child the
// lock's description, which the child handler did not close: the lock the
// handle then took lived on in that child, and the process was judged alive
// after its death (the prepare handler, holding the list's mutex, widened
// the window: the opener waited for the whole fork with its descriptor
// open). Found in review of ebd209c; it failed 4 runs in 5.
TEST_F(Crash, AForkWhileAnotherThreadOpensAHandleLeavesTheChildNoCopyOfItsLock) {
  QueueOptions o = small();
  o.processes = 200;
  create(o);
  constexpr int kOpens = 190;
  int ready[2], started[2];
  ASSERT_EQ(::pipe(ready), 0);
  ASSERT_EQ(::pipe(started), 0);
  const pid_t p = ::fork();
  ASSERT_GE(p, 0);
  if (p == 0) {
    ::setpgid(0, 0);
    std::atomic<bool> stop{false};
    std::atomic<int> forks{0};
    std::thread forker([&] {
      while (!stop.load()) {
        const pid_t c = ::fork();
        if (c == 0) {  // the fork handlers have run
          ::alarm(20);
          const char b = 1;
          (void)!::write(started[1], &b, 1);
          for (;;) ::pause();
        }
        forks.fetch_add(1);
      }
    });
    std::vector<Queue> qs;
    for (int i = 0; i < kOpens; ++i) {
      auto r = Queue::open(seg());
      if (!r.ok()) ::_exit(3);
      qs.push_back(std::move(r.value()));
    }
    stop = true;
    forker.join();
    const int n = forks.load();
    for (int i = 0; i < n; ++i) {  // every child past its fork handler
      char b;
      if (::read(started[0], &b, 1) != 1) ::_exit(4);
    }
    (void)!::write(ready[1], &n, sizeof n);
    for (;;) ::pause();
  }
  ::close(ready[1]);
  int forks = 0;
  ASSERT_EQ(::read(ready[0], &forks, sizeof forks), ssize_t(sizeof forks));
  ::close(ready[0]);
  ::kill(p, SIGKILL);
  int st = 0;
  ASSERT_EQ(::waitpid(p, &st, 0), p);
  const int fd = ::open(("/dev/shm/" + seg()).c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  RawSegment raw(seg());
  int held = 0, dead_words = 0;
  for (std::uint32_t i = 0; i < o.processes; ++i) {
    const std::uint64_t w = raw.proc(i).owner.load();
    if ((w & 0xFFFFFFFF) != std::uint32_t(p)) continue;
    ++dead_words;
    struct flock f {};
    f.l_type = F_WRLCK;
    f.l_whence = SEEK_SET;
    f.l_start = off_t(detail::kLivenessLockBase + i);
    f.l_len = 1;
    ASSERT_EQ(::fcntl(fd, F_OFD_GETLK, &f), 0);
    if (f.l_type != F_UNLCK) ++held;
  }
  ::close(fd);
  ::kill(-p, SIGKILL);
  EXPECT_GT(forks, 10);
  EXPECT_EQ(dead_words, kOpens);
  EXPECT_EQ(held, 0) << held << " of the dead process's " << dead_words
                     << " records still show their liveness lock held (by children forked meanwhile; " << forks
                     << " forks)";
}

// held_by_this_process told a record of this process's own handles by
// the pid that registered it; a pid-1 child of a pid-1 parent (new PID
// namespace, fork without exec) takes its parent's record for its own, and
// its repair ran while the parent held a lease (found in review of ebd209c).
TEST_F(Crash, RepairInAPid1ChildOfAPid1ParentRefusesWhileTheParentIsAttached) {
  QueueOptions o = small();
  create(o);
  ASSERT_EQ(q().enqueue(proto::lane_group(0), q().mint(), "held"), EnqueueStatus::enqueued);
  { Queue gone = std::move(q()); }  // the test holds no record
  const pid_t x = ::fork();
  ASSERT_GE(x, 0);
  if (x == 0) {
    if (::unshare(CLONE_NEWPID) != 0) ::_exit(5);
    const pid_t y = ::fork();
    if (y == 0) {
      ::alarm(30);
      auto opened = Queue::open(seg());
      if (!opened.ok()) ::_exit(3);
      Lease l;
      if (!opened.value().claim(l, 60000)) ::_exit(4);
      if (::unshare(CLONE_NEWPID) != 0) ::_exit(5);
      const pid_t z = ::fork();
      if (z == 0) {
        auto mine = Queue::open(seg());
        if (!mine.ok()) ::_exit(3);
        auto rep = mine.value().repair();
        std::_Exit(rep.ok() ? 1 : (rep.error().code == Errc::busy ? 0 : 2));
      }
      int st = 0;
      if (::waitpid(z, &st, 0) != z || !WIFEXITED(st)) std::_Exit(8);
      std::_Exit(WEXITSTATUS(st));
    }
    int st = 0;
    ::waitpid(y, &st, 0);
    std::_Exit(WIFEXITED(st) ? WEXITSTATUS(st) : 9);
  }
  int st = 0;
  ASSERT_EQ(::waitpid(x, &st, 0), x);
  ASSERT_TRUE(WIFEXITED(st)) << st;
  if (WEXITSTATUS(st) == 5) GTEST_SKIP() << "no PID namespace here (not root)";
  EXPECT_EQ(WEXITSTATUS(st), 0) << "a pid-1 child's repair ran while its pid-1 parent (holding a lease) was attached";
}

// A consumer SIGKILLed while parked in claim_wait never takes itself out of
// `waiters`, the count that tells a notifier to wake (design.md, "Blocking
// claims"). Until 2026-12-06 the count stayed up for good: every later
// notify (each enqueue that rings a lane) made a futex wake system call
// for nobody. The sweep that finds the consumer dead takes its parked
// count out; a consumer parked in this process meanwhile stays counted and
// is woken by the next enqueue.
TEST_F(Crash, AConsumerKilledWhileParkedIsNoLongerCountedAWaiter) {
  QueueOptions o = small();
  o.recovery_ms = 200;
  create(o);
  RawSegment raw(seg());
  const auto& waiters = raw.header().waiters;
  const std::string name = seg();
  test::ForkedChild parked([&] {
    auto r = Queue::open(name);
    Lease l;
    if (!r) return 3;
    r->claim_wait(l, 60000, std::chrono::seconds(60));
    return 0;
  }, 120);
  ASSERT_TRUE(test::eventually([&] { return waiters.load() == 1; })) << "the child never parked";
  EXPECT_EQ(q().snapshot().consumers_parked, 1u);
  // The child's process record (the one its pid owns), and ours.
  std::uint32_t child_rec = ~0U;
  for (std::uint32_t i = 0; i < raw.header().proc_capacity; ++i)
    if ((raw.proc(i).owner.load() & 0xFFFFFFFF) == std::uint64_t(parked.pid())) child_rec = i;
  ASSERT_NE(child_rec, ~0U);
  const std::uint32_t our_rec = detail::QueueAccess::segment(q()).me_index;
  const auto counted = [&](std::uint32_t rec) { return raw.proc(rec).parked.load() & 0xFFFFFFFF; };
  EXPECT_EQ(counted(child_rec), 1u);
  parked.kill_now();
  parked.wait();
  ASSERT_TRUE(parked.signaled()) << parked.describe();
  EXPECT_EQ(waiters.load(), 1u) << "killed parked: nothing has judged it yet";

  // One of ours parks too, and stays parked through the passes below.
  Lease got;
  std::atomic<bool> claimed{false};
  std::thread consumer([&] { claimed = q().claim_wait(got, 60000, std::chrono::seconds(30)); });
  // Parked once our record counts it. (Not `waiters == 2`: the consumer's
  // own claim may sweep first and judge the dead child, whose count then
  // goes before ours comes, and the total never reads 2. Under ASan on a
  // loaded machine it did: 100 ms of real time is half this queue's
  // recovery_ms.)
  ASSERT_TRUE(test::eventually([&] { return counted(our_rec) == 1; })) << "our consumer never parked";
  // Passes on the segment's clock until the dead one is judged (each pass
  // judges holders at most once per recovery_ms / 2).
  const bool dropped = test::eventually([&] {
    q().advance_clock(o.recovery_ms);
    q().tick();
    return counted(child_rec) == 0;
  }, std::chrono::seconds(10));
  EXPECT_TRUE(dropped) << "the dead child's record still counts it";
  // Ours wakes every recovery_ms / 2 of real time and parks again, so the
  // total can read 1 for a moment with the dead one still in it. Ours
  // raises waiters before its record and lowers its record first, so
  // "waiters 1 while our record counts 1" (read record, total, record) is
  // only ever seen with the dead one taken out; and our own count was not
  // taken (its wake-up would be lost).
  EXPECT_TRUE(test::eventually([&] {
    const auto a = counted(our_rec);
    const auto w = waiters.load();
    return a == 1 && w == 1 && counted(our_rec) == 1;
  })) << "2: the killed consumer is still counted; 0: ours was taken out (waiters " << waiters.load() << ")";
  EXPECT_LE(q().snapshot().consumers_parked, 1u);
  EXPECT_FALSE(claimed.load());
  const BrandedId id = q().mint();
  ASSERT_EQ(q().enqueue(BrandedId::make("GRP", 1), id, "wake"), EnqueueStatus::enqueued);
  consumer.join();
  EXPECT_TRUE(claimed.load());
  EXPECT_EQ(got.id, id);
  EXPECT_EQ(waiters.load(), 0u);
}

// What a process that ends leaves of its leases (README, "The command-line
// tool"): one that detaches (its Queue destroyed, as when main returns)
// keeps them until their deadlines; one that ends with a handle still open
// (_exit, as a crash would, though its exit status is 0) has them back
// within the recovery bound, as a dead holder's; one that calls
// release_all() first leaves them claimable at once, attempt unchanged.
TEST_F(Crash, WhatAnEndedProcessLeavesOfItsLeasesDependsOnWhetherItDetached) {
  QueueOptions o = small();
  o.recovery_ms = 100;
  create(o);
  for (std::uint32_t i = 0; i < 3; ++i) ASSERT_EQ(q().enqueue(proto::lane_group(i), q().mint(), "x"), EnqueueStatus::enqueued);
  enum How { exit_attached, detach, release_then_detach };
  struct Held {
    BrandedId id[3];
    std::uint64_t token[3];
  };
  test::SharedBlock<Held> held;
  for (int how : {exit_attached, detach, release_then_detach}) {
    test::ForkedChild child([&] {
      auto h = Queue::open(seg());
      Lease l;
      if (!h || !h->claim(l, 60000)) return 3;
      held->id[how] = l.id;
      held->token[how] = l.token.value;
      if (how == exit_attached) ::_exit(0);
      if (how == release_then_detach && h->release_all() != 1) return 4;
      return 0;  // h detaches as the body returns
    });
    ASSERT_TRUE(child.wait_for(std::chrono::seconds(60))) << "child " << how << " hung";
    ASSERT_TRUE(child.exited_zero()) << "child " << how << ": " << child.describe();
  }

  // The released job at once, the one whose holder ended attached once a
  // sweep finds it dead; not the detached holder's.
  std::map<std::string, Lease> got;
  Lease l;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (got.size() < 2 && std::chrono::steady_clock::now() < give_up)
    if (q().claim_wait(l, 60000, std::chrono::milliseconds(500))) got[l.id.string()] = l;
  ASSERT_EQ(got.size(), 2U);
  EXPECT_EQ(got.count(held->id[detach].string()), 0U) << "a detached holder's lease came back before its deadline";
  EXPECT_EQ(got[held->id[release_then_detach].string()].attempt, 1U) << "a release keeps the attempt";
  EXPECT_EQ(got[held->id[exit_attached].string()].attempt, 2U) << "a holder that ended attached is a dead holder";
  EXPECT_EQ(q().complete(held->id[exit_attached], Token(held->token[exit_attached])), AckStatus::stale);
  for (const auto& [id, lease] : got) EXPECT_EQ(q().complete(lease.id, lease.token), AckStatus::ok) << id;

  // Sweeps on the segment's clock leave the detached holder's lease alone
  // until its deadline, then it comes back as an expired one.
  EXPECT_EQ(moved_over_recovery_passes(q(), o.recovery_ms), 0U);
  q().advance_clock(60000);
  ASSERT_TRUE(q().claim(l, 60000));
  EXPECT_EQ(l.id, held->id[detach]);
  EXPECT_EQ(l.attempt, 2U);
  EXPECT_EQ(q().complete(held->id[detach], Token(held->token[detach])), AckStatus::stale);
}

}  // namespace
}  // namespace fairlane
