// fairlane_test_worker: the child process of the multi-process tests.
//
// Every mode first blocks on one byte (or EOF) from stdin: the parent holds
// the other end of that pipe and releases all children at once. A watchdog
// alarm ends a child that hangs, so a broken queue fails the test instead of
// leaving processes behind.
//
//   produce  SEG PRODUCER_ID LANES N PAYLOAD_LEN
//       enqueue N jobs, job s into lane s % LANES, payload from the protocol;
//       on `full` retry until admitted.
//   consume  SEG OUTFILE TOTAL MAX_CLAIMS
//       claim (claim_wait) and complete until the queue has completed TOTAL
//       jobs or this process made MAX_CLAIMS claims (0: no cap); one line per
//       claim: "<id> <group> <attempt> <payload>".
//   mint     SEG N OUTFILE
//       mint N ids, one per line.
//   enqueue_ids SEG IDFILE OUTFILE
//       enqueue every id of IDFILE into lane 0; one line "<id> <status>" each.
//   enqueue_one SEG LANE ID PAYLOAD
//       enqueue one job.
//   claim_abandon SEG OUTFILE LEASE_MS
//       claim one job, write "<id> <attempt> <token>", and exit without completing it
//       (as a consumer that died holding a lease).
//   claim_hold SEG OUTFILE LEASE_MS N
//       claim N jobs, write "<id> <attempt> <token>" for each (the file appears
//       complete, by rename), then sleep holding them until killed.
//   repair SEG
//       Queue::repair without force: exit 0 when it repaired, 6 when it
//       refused (other live processes attached).
//   in_pid_ns MODE ARGS...
//       run MODE in a new PID namespace with a /proc of its own, as in a
//       container: it is pid 1 there, and its pid means nothing outside.
//       It dies with this process.
//
// Exit status: 0 on success, 2 on bad arguments, 3 when the queue misbehaved
// (message on stderr), 4 when it could not attach, 5 when no namespace could
// be made (not root: the parent skips).
#include "worker_protocol.hpp"

#include <fairlane/queue.hpp>

#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

using namespace fairlane;
namespace proto = fairlane::test::proto;

namespace {

[[noreturn]] void die(int code, const std::string& msg) {
  std::fprintf(stderr, "fairlane_test_worker[%d]: %s\n", static_cast<int>(::getpid()), msg.c_str());
  std::exit(code);
}

std::uint64_t num(const char* s) {
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(s, &end, 10);
  if (errno != 0 || end == s || *end != '\0') die(2, std::string("not a number: ") + s);
  return v;
}

Queue attach(const char* name) {
  auto r = Queue::open(name);
  if (!r.ok()) die(4, std::string("open ") + name + ": " + r.error().message);
  return std::move(r.value());
}

void wait_for_gate() {
  char c;
  while (::read(0, &c, 1) < 0 && errno == EINTR) {
  }
}

int produce(char** argv) {
  Queue q = attach(argv[0]);
  const auto producer = static_cast<std::uint32_t>(num(argv[1]));
  const auto lanes = static_cast<std::uint32_t>(num(argv[2]));
  const std::uint64_t n = num(argv[3]);
  const std::size_t len = num(argv[4]);
  if (lanes == 0) die(2, "LANES must be > 0");
  wait_for_gate();
  for (std::uint64_t seq = 0; seq < n; ++seq) {
    const auto lane = static_cast<std::uint32_t>(seq % lanes);
    const BrandedId id = q.mint();
    const std::string payload = proto::expected_payload(producer, lane, seq, len);
    for (;;) {
      const EnqueueStatus st = q.enqueue(proto::lane_group(lane), id, payload);
      if (st == EnqueueStatus::enqueued) break;
      if (st == EnqueueStatus::full) {
        ::sched_yield();  // consumers will make room
        continue;
      }
      die(3, "enqueue " + id.string() + " -> " + std::string(to_string(st)));
    }
  }
  return 0;
}

int consume(char** argv) {
  Queue q = attach(argv[0]);
  std::FILE* out = std::fopen(argv[1], "w");
  if (out == nullptr) die(2, std::string("cannot write ") + argv[1]);
  const std::uint64_t total = num(argv[2]);
  const std::uint64_t max_claims = num(argv[3]);
  wait_for_gate();
  Lease lease;
  std::uint64_t claims = 0;
  while (max_claims == 0 || claims < max_claims) {
    if (!q.claim_wait(lease, 600'000, std::chrono::milliseconds(50))) {
      if (q.snapshot().counters.completed >= total) break;
      continue;
    }
    ++claims;
    std::fprintf(out, "%s %s %u %s\n", lease.id.string().c_str(), lease.group.string().c_str(), lease.attempt,
                 lease.payload.c_str());
    const AckStatus st = q.complete(lease.id, lease.token);
    if (st != AckStatus::ok) die(3, "complete " + lease.id.string() + " -> " + std::string(to_string(st)));
  }
  if (std::fclose(out) != 0) die(3, "write failed");
  return 0;
}

int mint(char** argv) {
  Queue q = attach(argv[0]);
  const std::uint64_t n = num(argv[1]);
  std::vector<BrandedId> ids;
  ids.reserve(n);
  wait_for_gate();
  for (std::uint64_t i = 0; i < n; ++i) ids.push_back(q.mint());
  std::FILE* out = std::fopen(argv[2], "w");
  if (out == nullptr) die(2, std::string("cannot write ") + argv[2]);
  for (const auto& id : ids) std::fprintf(out, "%s\n", id.string().c_str());
  if (std::fclose(out) != 0) die(3, "write failed");
  return 0;
}

int enqueue_ids(char** argv) {
  Queue q = attach(argv[0]);
  std::ifstream in(argv[1]);
  std::vector<BrandedId> ids;
  for (std::string line; std::getline(in, line);) {
    auto id = BrandedId::parse(line);
    if (!id) die(2, "bad id in input: " + line);
    ids.push_back(*id);
  }
  std::vector<EnqueueStatus> statuses(ids.size());
  wait_for_gate();
  for (std::size_t i = 0; i < ids.size(); ++i) statuses[i] = q.enqueue(proto::lane_group(0), ids[i], "same");
  std::FILE* out = std::fopen(argv[2], "w");
  if (out == nullptr) die(2, std::string("cannot write ") + argv[2]);
  for (std::size_t i = 0; i < ids.size(); ++i)
    std::fprintf(out, "%s %s\n", ids[i].string().c_str(), std::string(to_string(statuses[i])).c_str());
  if (std::fclose(out) != 0) die(3, "write failed");
  return 0;
}

int enqueue_one(char** argv) {
  Queue q = attach(argv[0]);
  const auto lane = static_cast<std::uint32_t>(num(argv[1]));
  auto id = BrandedId::parse(argv[2]);
  if (!id) die(2, std::string("bad id ") + argv[2]);
  wait_for_gate();
  const EnqueueStatus st = q.enqueue(proto::lane_group(lane), *id, argv[3]);
  if (st != EnqueueStatus::enqueued) die(3, "enqueue -> " + std::string(to_string(st)));
  return 0;
}

int claim_abandon(char** argv) {
  Queue q = attach(argv[0]);
  const auto lease_ms = static_cast<std::uint32_t>(num(argv[2]));
  wait_for_gate();
  Lease lease;
  if (!q.claim(lease, lease_ms)) die(3, "nothing to claim");
  std::FILE* out = std::fopen(argv[1], "w");
  if (out == nullptr) die(2, std::string("cannot write ") + argv[1]);
  std::fprintf(out, "%s %u %llu\n", lease.id.string().c_str(), lease.attempt,
               static_cast<unsigned long long>(lease.token.value));
  if (std::fclose(out) != 0) die(3, "write failed");
  std::_Exit(0);  // no destructors: leave as abruptly as a crash would
}

int claim_hold(char** argv) {
  Queue q = attach(argv[0]);
  const auto lease_ms = static_cast<std::uint32_t>(num(argv[2]));
  const std::uint64_t n = num(argv[3]);
  wait_for_gate();
  const std::string tmp = std::string(argv[1]) + ".tmp";
  std::FILE* out = std::fopen(tmp.c_str(), "w");
  if (out == nullptr) die(2, "cannot write " + tmp);
  Lease lease;
  for (std::uint64_t i = 0; i < n; ++i) {
    if (!q.claim(lease, lease_ms)) die(3, "nothing to claim after " + std::to_string(i) + " claims");
    std::fprintf(out, "%s %u %llu\n", lease.id.string().c_str(), lease.attempt,
               static_cast<unsigned long long>(lease.token.value));
  }
  if (std::fclose(out) != 0) die(3, "write failed");
  if (std::rename(tmp.c_str(), argv[1]) != 0) die(3, "rename failed");
  for (;;) ::pause();  // until the parent kills us (or the watchdog alarm)
}

// repair SEG: Queue::repair without force. Exit 0 repaired, 6 refused
// (other live processes attached).
int repair(char** argv) {
  Queue q = attach(argv[0]);
  wait_for_gate();
  auto r = q.repair(false);
  if (!r.ok()) {
    std::fprintf(stderr, "repair: %s\n", r.error().message.c_str());
    return 6;
  }
  return 0;
}

int run_mode(int argc, char** argv);

int in_pid_ns(int argc, char** argv) {
  if (::unshare(CLONE_NEWPID | CLONE_NEWNS) != 0) return 5;
  const pid_t child = ::fork();
  if (child < 0) die(3, "fork failed");
  if (child == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // dies with its parent, whom the test kills
    ::alarm(90);                         // fork does not inherit the alarm
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0)
      std::_Exit(5);
    // No exit handlers: LeakSanitizer's would fail in a PID namespace and
    // turn the mode's status into 1.
    std::_Exit(run_mode(argc, argv));
  }
  int st = 0;
  while (::waitpid(child, &st, 0) < 0 && errno == EINTR) {
  }
  // No exit handlers here either: this process's new tasks would go into
  // the namespace, whose pid 1 is gone (LeakSanitizer's check makes one).
  std::_Exit(WIFEXITED(st) ? WEXITSTATUS(st) : 3);
}

int run_mode(int argc, char** argv) {
  if (argc < 2) die(2, "usage: fairlane_test_worker MODE ARGS...");
  const std::string mode = argv[1];
  const int nargs = argc - 2;
  char** args = argv + 2;
  if (mode == "produce" && nargs == 5) return produce(args);
  if (mode == "consume" && nargs == 4) return consume(args);
  if (mode == "mint" && nargs == 3) return mint(args);
  if (mode == "enqueue_ids" && nargs == 3) return enqueue_ids(args);
  if (mode == "enqueue_one" && nargs == 4) return enqueue_one(args);
  if (mode == "claim_abandon" && nargs == 3) return claim_abandon(args);
  if (mode == "claim_hold" && nargs == 4) return claim_hold(args);
  if (mode == "repair" && nargs == 1) return repair(args);
  if (mode == "in_pid_ns" && nargs >= 1) return in_pid_ns(argc - 1, argv + 1);
  die(2, "bad mode or argument count: " + mode);
}

}  // namespace

int main(int argc, char** argv) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // do not outlive a killed test
  ::alarm(90);                         // nor hang forever
  return run_mode(argc, argv);
}
