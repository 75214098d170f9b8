#include "handoff.hpp"

#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <new>
#include <vector>

#include "proc.hpp"

namespace fairlane::bench {

namespace {

// The line handed over, and a flag on a line of its own that ends the child
// if the parent gives up.
struct alignas(64) Shared {
  std::atomic<std::uint64_t> turn;  // even: the parent's turn to write, odd: the child's
  char pad[64 - sizeof(std::atomic<std::uint64_t>)];
  std::atomic<std::uint32_t> stop;  // 1: the parent gave up; 2: the child could not pin itself
};

// Waits until `turn` reads `want`; false once a second passes with no change.
bool await(const std::atomic<std::uint64_t>& turn, std::uint64_t want, const std::atomic<std::uint32_t>& stop) {
  std::uint64_t deadline = 0;
  for (std::uint32_t spins = 0;; ++spins) {
    if (turn.load(std::memory_order_acquire) == want) return true;
    if ((spins & 0xFFF) == 0xFFF) {
      if (stop.load(std::memory_order_relaxed)) return false;
      const std::uint64_t now = now_ns();
      if (deadline == 0) deadline = now + 1'000'000'000ULL;
      else if (now > deadline) return false;
    }
  }
}

}  // namespace

double line_handoff_ns(int cpu_a, int cpu_b, std::uint32_t handoffs, std::uint32_t trials, std::string& error) {
  if (!handoff_applies(cpu_a, cpu_b)) {
    error = cpu_a < 0 || cpu_b < 0 ? "not pinned" : "one CPU: nothing to hand over";
    return 0;
  }
  if (handoffs < 2 || trials == 0) { error = "nothing to measure"; return 0; }
  const std::uint64_t rounds = handoffs / 2;  // a round: one move each way
  // The caller's own CPU set, given back at the end. Without it, no probe:
  // a harness left pinned to one CPU would start its workers there (they
  // inherit it, and place themselves by the CPUs they are allowed).
  cpu_set_t saved;
  if (sched_getaffinity(0, sizeof saved, &saved) != 0) {
    error = std::string("cannot read this thread's CPUs: ") + std::strerror(errno);
    return 0;
  }
  void* m = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) { error = std::string("mmap: ") + std::strerror(errno); return 0; }
  auto* sh = new (m) Shared{};
  std::vector<double> each;
  const pid_t pid = fork();
  if (pid < 0) {
    error = std::string("fork: ") + std::strerror(errno);
    munmap(m, sizeof(Shared));
    return 0;
  }
  if (pid == 0) {
    std::string e;
    if (!pin_thread(cpu_b, e)) {
      sh->stop.store(2, std::memory_order_relaxed);  // the parent stops waiting at once
      _exit(2);
    }
    for (std::uint64_t t = 0; t < trials * rounds; ++t) {
      if (!await(sh->turn, 2 * t + 1, sh->stop)) _exit(1);
      sh->turn.store(2 * t + 2, std::memory_order_release);
    }
    _exit(0);
  }
  bool ok = pin_thread(cpu_a, error);
  for (std::uint32_t k = 0; ok && k < trials; ++k) {
    const std::uint64_t t0 = now_ns();
    for (std::uint64_t i = 0; i < rounds; ++i) {
      const std::uint64_t t = std::uint64_t(k) * rounds + i;
      if (!await(sh->turn, 2 * t, sh->stop)) {
        error = sh->stop.load(std::memory_order_relaxed) == 2
                    ? "cannot pin the other side to CPU " + std::to_string(cpu_b)
                    : "the other CPU made no progress for a second";
        ok = false;
        break;
      }
      sh->turn.store(2 * t + 1, std::memory_order_release);
    }
    if (ok) each.push_back(double(now_ns() - t0) / double(2 * rounds));
  }
  sh->stop.store(1, std::memory_order_relaxed);
  if (!ok) kill(pid, SIGKILL);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (ok && !(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    error = "the other side ended with " + describe_status(status);
    ok = false;
  }
  if (sched_setaffinity(0, sizeof saved, &saved) != 0 && ok) {
    error = std::string("cannot give this thread its CPUs back: ") + std::strerror(errno);
    ok = false;
  }
  munmap(m, sizeof(Shared));
  if (!ok || each.empty()) return 0;
  std::sort(each.begin(), each.end());
  return each[each.size() / 2];
}

}  // namespace fairlane::bench
