// fairlane_cycle: the cycle counter's workload (issue 12). Runs N cycles of
// mint + enqueue + claim + complete through the public API, one thread, over
// a steady backlog (64 tenants x 16 jobs, the shape of BM_cycle_st), with
// callgrind client requests around the measured loops so that only they are
// counted. bench/cycle/count.sh runs it under
//
//   valgrind --tool=callgrind --dump-instr=yes --collect-atstart=no
//
// and fairlane_cycle_report turns the dumps into instructions and locked
// read-modify-writes per cycle. Natively (not under valgrind) the client
// requests are a few no-op instructions and the program just runs.
//
// Each measured region ends in one CALLGRIND_DUMP_STATS_AT whose text names
// the region and its unit count ("cycle n=20000"), so the dumps describe
// themselves:
//
//   cycle     N whole cycles, collected as one stretch (the figure)
//   mint, enqueue, claim, complete
//             N more cycles each, collected only around that one call, so
//             the cycle splits by operation (each call is bracketed by a
//             pair of toggles: see "toggle")
//   toggle    N empty toggle pairs: what a bracket itself adds, which the
//             report takes off the per-operation regions ("bracketed")
//
// Job n of the loop goes to tenant n mod 64; the claim serves whatever lane
// the ring is on (every lane stays backlogged), so each cycle rotates the
// ring one step, as a steady consumer does. The segment's recovery bound is
// set to its maximum (60 s) so the periodic full-table sweep, which is timed
// by the wall clock and would run ~50x more often per cycle under valgrind
// than natively, does not land in the measured loops; natively it costs well
// under one instruction per cycle at the default bound.
//
// fairlane_cycle_mutex is this file built with FAIRLANE_CYCLE_MUTEX: the same
// loop on the harness's mutex peer (bench/harness/mutex_queue.hpp, fairlane's
// work behind one robust process-shared mutex), for reference (count.sh
// --peer mutex). A binary of its own, not a flag: fairlane_cycle is linked
// with link-time optimisation, and with the mutex peer's loop in the same
// program GCC inlined the library differently into it (2,046 instructions a
// cycle against 1,927, the library unchanged).
//
// Exit status: 0, or 1 when an operation was refused (the counts would be of
// something else).

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <valgrind/callgrind.h>

#include "fairlane/queue.hpp"
#include "../scratch_queue.hpp"

#ifdef FAIRLANE_CYCLE_MUTEX
#include <sys/mman.h>
#include <unistd.h>

#include "../harness/mutex_queue.hpp"
#endif

namespace {

struct Args {
  std::uint64_t cycles = 20000;
  std::uint64_t warmup = 5000;
  std::uint32_t lanes = 64;
  std::uint32_t backlog = 16;  // jobs per lane kept pending
  std::uint32_t payload = 64;
  bool split = true;           // the per-operation regions
};

[[noreturn]] void usage() {
  std::fprintf(stderr,
               "usage: fairlane_cycle [--cycles N] [--warmup N] [--lanes N] [--backlog N] [--payload BYTES] "
               "[--no-split]\n"
               "  Runs mint + enqueue + claim + complete cycles; meant to run under callgrind\n"
               "  (bench/cycle/count.sh). Defaults: 20000 cycles after 5000 warm-up, 64 lanes,\n"
               "  16 jobs backlogged per lane, 64-byte payloads. fairlane_cycle_mutex runs the\n"
               "  same loop on the harness's mutex peer.\n");
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string_view s = argv[i];
    auto num = [&]() -> std::uint64_t {
      if (i + 1 >= argc) usage();
      char* end = nullptr;
      const auto v = std::strtoull(argv[++i], &end, 10);
      if (!end || *end) usage();
      return v;
    };
    if (s == "--cycles") a.cycles = num();
    else if (s == "--warmup") a.warmup = num();
    else if (s == "--lanes") a.lanes = std::uint32_t(num());
    else if (s == "--backlog") a.backlog = std::uint32_t(num());
    else if (s == "--payload") a.payload = std::uint32_t(num());
    else if (s == "--no-split") a.split = false;
    else usage();
  }
  if (a.cycles == 0 || a.lanes == 0 || a.backlog == 0 || a.payload == 0) usage();
  return a;
}

std::uint32_t pow2_at_least(std::uint64_t v) {
  std::uint64_t p = 1024;
  while (p < v) p <<= 1;
  return std::uint32_t(p);
}

// Which call of the cycle a region brackets.
enum class Only { all, mint, enqueue, claim, complete };

// A toggle where the region brackets this call; the condition is a
// template constant, so the whole-cycle loop carries no test for it.
#define FL_ON(op)                                   \
  do {                                              \
    if constexpr (kOnly == op) CALLGRIND_TOGGLE_COLLECT; \
  } while (0)

template <class Q>
class Loop {
 public:
  Loop(Q& q, const Args& a)
      : q_(q), payload_(a.payload, 'p'), lanes_(a.lanes) {
    groups_.resize(a.lanes);
    for (std::uint32_t i = 0; i < a.lanes; ++i) groups_[i] = fairlane::BrandedId::make("TEN", i + 1);
    lease_.payload.reserve(a.payload);
  }

  const std::vector<fairlane::BrandedId>& groups() const noexcept { return groups_; }

  // n cycles; the collection state is toggled around the call kOnly names
  // (Only::all: the caller toggles around the whole loop).
  template <Only kOnly>
  bool run(std::uint64_t n) noexcept {
    for (std::uint64_t k = 0; k < n; ++k) {
      FL_ON(Only::mint);
      const fairlane::BrandedId id = q_.mint();
      FL_ON(Only::mint);
      FL_ON(Only::enqueue);
      const auto st = q_.enqueue(groups_[next_++ % lanes_], id, payload_);
      FL_ON(Only::enqueue);
      if (st != fairlane::EnqueueStatus::enqueued) return fail("enqueue", fairlane::to_string(st));
      FL_ON(Only::claim);
      const bool got = q_.claim(lease_, 600'000);
      FL_ON(Only::claim);
      if (!got) return fail("claim", "empty");
      FL_ON(Only::complete);
      const auto ack = q_.complete(lease_.id, lease_.token);
      FL_ON(Only::complete);
      if (ack != fairlane::AckStatus::ok) return fail("complete", fairlane::to_string(ack));
    }
    return true;
  }

 private:
  bool fail(const char* what, std::string_view why) noexcept {
    std::fprintf(stderr, "fairlane_cycle: %s refused: %.*s\n", what, int(why.size()), why.data());
    return false;
  }

  Q& q_;
  std::string payload_;
  std::uint32_t lanes_;
  std::uint64_t next_ = 0;
  std::vector<fairlane::BrandedId> groups_;
  fairlane::Lease lease_;
};

// N empty toggle pairs: the cost of a bracket itself.
void toggles(std::uint64_t n) noexcept {
  for (std::uint64_t k = 0; k < n; ++k) {
    CALLGRIND_TOGGLE_COLLECT;
    CALLGRIND_TOGGLE_COLLECT;
  }
}

void dump(const char* region, std::uint64_t n, const char* extra = "") {
  char text[128];
  std::snprintf(text, sizeof text, "%s n=%llu%s", region, static_cast<unsigned long long>(n), extra);
  CALLGRIND_DUMP_STATS_AT(text);
}

#ifdef FAIRLANE_CYCLE_MUTEX
constexpr const char* kPeer = "the mutex peer";
#else
constexpr const char* kPeer = "fairlane";
#endif

// Fills the backlog, then runs the measured regions on `q`. 0, or 1 when an
// operation was refused.
template <class Q>
int measure(Q& q, const Args& a) {
  Loop<Q> loop(q, a);
  const std::string payload(a.payload, 'p');
  for (std::uint32_t d = 0; d < a.backlog; ++d)
    for (const auto& g : loop.groups())
      if (q.enqueue(g, q.mint(), payload) != fairlane::EnqueueStatus::enqueued) {
        std::fprintf(stderr, "fairlane_cycle: fill refused\n");
        return 1;
      }

  // From here on valgrind instruments (count.sh starts with
  // --instr-atstart=no so the setup runs at full speed); nothing is collected
  // until a toggle.
  CALLGRIND_START_INSTRUMENTATION;
  if (!loop.template run<Only::all>(a.warmup)) return 1;
  CALLGRIND_ZERO_STATS;

  CALLGRIND_TOGGLE_COLLECT;
  const bool ok = loop.template run<Only::all>(a.cycles);
  CALLGRIND_TOGGLE_COLLECT;
  if (!ok) return 1;
  dump("cycle", a.cycles);

  if (a.split) {
    if (!loop.template run<Only::mint>(a.cycles)) return 1;
    dump("mint", a.cycles, " bracketed");
    if (!loop.template run<Only::enqueue>(a.cycles)) return 1;
    dump("enqueue", a.cycles, " bracketed");
    if (!loop.template run<Only::claim>(a.cycles)) return 1;
    dump("claim", a.cycles, " bracketed");
    if (!loop.template run<Only::complete>(a.cycles)) return 1;
    dump("complete", a.cycles, " bracketed");
    toggles(a.cycles);
    dump("toggle", a.cycles);
  }
  CALLGRIND_STOP_INSTRUMENTATION;
  return 0;
}

#ifdef FAIRLANE_CYCLE_MUTEX
// The harness's mutex peer (bench/harness/mutex_queue.hpp) in a segment of
// its own, removed again at the end.
int measure_mutex(const Args& a, std::uint32_t jobs) {
  const std::string name = "/fairlane_cycle_mutex-" + std::to_string(getpid());
  shm_unlink(name.c_str());
  std::uint64_t bytes = 0;
  std::string error;
  fairlane::bench::MutexQueue q;
  if (!fairlane::bench::MutexQueue::create(name, jobs, a.lanes + 1, a.payload, bytes, error) || !q.open(name, error)) {
    std::fprintf(stderr, "fairlane_cycle: the mutex peer's queue: %s\n", error.c_str());
    shm_unlink(name.c_str());
    return 1;
  }
  const int rc = measure(q, a);
  shm_unlink(name.c_str());
  return rc;
}
#endif

}  // namespace

int main(int argc, char** argv) {
  const Args a = parse(argc, argv);
  const std::uint32_t jobs = pow2_at_least(std::uint64_t(a.lanes) * a.backlog * 2 + 1024);
  int rc = 0;
#ifdef FAIRLANE_CYCLE_MUTEX
  rc = measure_mutex(a, jobs);
#else
  {
    fairlane::QueueOptions o;
    o.jobs = jobs;
    o.lanes = a.lanes + 1;
    o.payload_bytes = a.payload;
    o.recovery_ms = fairlane::kMaxRecoveryMs;
    auto scratch = fairlane::bench::ScratchQueue::create("fairlane_cycle", o);
    if (!scratch) return 1;
    rc = measure(scratch->queue(), a);
  }
#endif
  if (rc != 0) return rc;
  std::printf("fairlane_cycle: %s, %llu cycles measured (after %llu warm-up), %u lanes x %u backlogged, "
              "%u-byte payloads\n",
              kPeer, static_cast<unsigned long long>(a.cycles),
              static_cast<unsigned long long>(a.warmup), a.lanes, a.backlog, a.payload);
  return 0;
}
