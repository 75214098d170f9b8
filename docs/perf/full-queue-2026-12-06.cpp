// Ad-hoc: a producer at a queue kept full by a slower consumer, retrying
// `full` (a pause, then a yield, as the harness's producers back off)
// against parking in enqueue_wait. Two processes pinned to CPUs 0 and 1, a
// 4,096-job queue, 100 tenants in turn, 64-byte payloads; the consumer
// spends W ns on each job between its claim and its complete. The two
// producers are interleaved, round by round. Prints the consumer's rate and
// each side's CPU time a job.
//
// Build and run (from the repository root, after a release build):
//   g++ -O2 -std=c++20 -I include -I src docs/perf/full-queue-2026-12-06.cpp \
//       build/release/libfairlane.a -lpthread -o /tmp/fullq && /tmp/fullq 3
#include <fairlane/queue.hpp>
#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

using namespace fairlane;
namespace {

struct Shared {
  std::atomic<std::uint64_t> prod_cpu_ns{0}, cons_cpu_ns{0}, cons_t0{0}, cons_t1{0}, full_answers{0};
};

std::uint64_t now_ns() {
  return std::uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::steady_clock::now().time_since_epoch())
                           .count());
}
std::uint64_t cpu_ns() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return std::uint64_t(ts.tv_sec) * 1000000000ULL + std::uint64_t(ts.tv_nsec);
}
void pin(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);
}

std::uint64_t kJobs = 400000;  // 100,000 at 20 us of work a job
const char* kName = "full_queue_bench";
const std::string kPayload(64, 'p');

void produce(Shared& sh, bool parks) {
  pin(0);
  auto q = Queue::open(kName);
  if (!q) std::_Exit(3);
  BrandedId groups[100];
  for (int i = 0; i < 100; ++i) groups[i] = BrandedId::make("TEN", std::uint64_t(i + 1));
  const std::uint64_t c0 = cpu_ns();
  std::uint64_t full = 0;
  for (std::uint64_t k = 0; k < kJobs; ++k) {
    const BrandedId id = q->mint();
    const BrandedId& g = groups[k % 100];
#ifndef FULL_QUEUE_NO_WAIT
    if (parks) {
      const EnqueueStatus st = q->enqueue(g, id, kPayload);
      if (st == EnqueueStatus::full) {
        ++full;
        if (q->enqueue_wait(g, id, kPayload, std::chrono::seconds(10)) != EnqueueStatus::enqueued) std::_Exit(4);
      } else if (st != EnqueueStatus::enqueued) {
        std::_Exit(4);
      }
      continue;
    }
#endif
    for (std::uint32_t spins = 0;; ++spins) {
      const EnqueueStatus st = q->enqueue(g, id, kPayload);
      if (st == EnqueueStatus::enqueued) break;
      if (st != EnqueueStatus::full) std::_Exit(4);
      ++full;
      if (spins < 64)
        __builtin_ia32_pause();
      else
        sched_yield();
    }
  }
  sh.prod_cpu_ns = cpu_ns() - c0;
  sh.full_answers = full;
}

void consume(Shared& sh, std::uint64_t work_ns) {
  pin(1);
  auto q = Queue::open(kName);
  if (!q) std::_Exit(3);
  Lease l;
  l.payload.reserve(64);
  std::uint64_t n = 0;
  const std::uint64_t c0 = cpu_ns(), t0 = now_ns();
  while (n < kJobs) {
    if (!q->claim_wait(l, 60000, std::chrono::seconds(10))) std::_Exit(5);
    if (work_ns) {
      const std::uint64_t until = now_ns() + work_ns;
      while (now_ns() < until) {
      }
    }
    if (q->complete(l.id, l.token) != AckStatus::ok) std::_Exit(6);
    ++n;
  }
  sh.cons_t1 = now_ns();
  sh.cons_t0 = t0;
  sh.cons_cpu_ns = cpu_ns() - c0;
}

bool run(bool parks, std::uint64_t work_ns) {
  (void)Queue::remove(kName);
  QueueOptions o;
  o.jobs = 4096;
  o.lanes = 128;
  o.payload_bytes = 64;
  auto q = Queue::create(kName, o);
  if (!q) return false;
  auto* sh = new (mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0)) Shared;
  const pid_t c = fork();
  if (c == 0) {
    consume(*sh, work_ns);
    std::_Exit(0);
  }
  const pid_t p = fork();
  if (p == 0) {
    produce(*sh, parks);
    std::_Exit(0);
  }
  int st1 = 0, st2 = 0;
  waitpid(p, &st1, 0);
  waitpid(c, &st2, 0);
  if (st1 || st2) {
    std::printf("child failed: %d %d\n", st1, st2);
    return false;
  }
  const double secs = double(sh->cons_t1 - sh->cons_t0) / 1e9;
  std::printf("  %-13s work %5llu ns: %6.3f M jobs/s; CPU a job: producer %5.0f ns, consumer %5.0f ns; full answers %llu\n",
              parks ? "enqueue_wait" : "retry full", static_cast<unsigned long long>(work_ns), double(kJobs) / secs / 1e6,
              double(sh->prod_cpu_ns) / double(kJobs), double(sh->cons_cpu_ns) / double(kJobs),
              static_cast<unsigned long long>(sh->full_answers.load()));
  munmap(sh, sizeof(Shared));
  (void)Queue::remove(kName);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 3;
  for (std::uint64_t work : {std::uint64_t(1000), std::uint64_t(200), std::uint64_t(20000)}) {
    kJobs = work >= 20000 ? 100000 : 400000;
    for (int r = 0; r < rounds; ++r) {
      std::printf("round %d\n", r);
#ifdef FULL_QUEUE_NO_WAIT
      if (!run(false, work)) return 1;
#else
      if (!run(false, work) || !run(true, work)) return 1;
#endif
    }
  }
}
