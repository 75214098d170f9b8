// Process plumbing for the harness: the clock, spawning children that die
// with us, reaping them with a deadline, and reading peak memory.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <ctime>
#include <string>
#include <vector>

namespace fairlane::bench {

// CLOCK_MONOTONIC in ns: one clock for every process on the host (vDSO, no
// system call).
inline std::uint64_t now_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::uint64_t(ts.tv_sec) * 1'000'000'000ULL + std::uint64_t(ts.tv_nsec);
}

// CPU time of the calling thread, ns (CLOCK_THREAD_CPUTIME_ID): what the
// thread itself spent, whatever else the machine is running.
inline std::uint64_t thread_cpu_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return std::uint64_t(ts.tv_sec) * 1'000'000'000ULL + std::uint64_t(ts.tv_nsec);
}

// Minor page faults of the calling thread so far (RUSAGE_THREAD).
std::uint64_t thread_minor_faults() noexcept;

// CPU time (user + system) a process has used so far, ns; 0 when unreadable.
std::uint64_t process_cpu_ns(pid_t pid);

void sleep_ns(std::uint64_t ns) noexcept;

// Absolute path of this executable (/proc/self/exe).
std::string self_exe();

// fork + exec argv[0] with argv. The child gets PR_SET_PDEATHSIG(SIGKILL), so
// it cannot outlive the harness. With quiet, its stdout and stderr go to
// /dev/null. Returns the pid, or -1 with `error` set.
pid_t spawn(const std::vector<std::string>& argv, bool quiet, std::string& error);

// Waits up to timeout_ns for pid; true and the wait status if it exited.
bool wait_for(pid_t pid, std::uint64_t timeout_ns, int& status);

// SIGTERM, then SIGKILL after grace_ns; always reaps.
void stop_process(pid_t pid, std::uint64_t grace_ns);

// A human reading of a wait status ("exit 1", "killed by signal 9").
std::string describe_status(int status);

// SIGINT / SIGTERM set a flag instead of killing the orchestrator, so it can
// stop its workers and servers and remove its segments.
void install_interrupt_handler();
bool interrupted() noexcept;

// The CPUs this process may run on (sched_getaffinity), ascending; empty
// when unreadable.
std::vector<int> allowed_cpus();

// Pins the calling thread to `cpu`; false with `error` set when it cannot.
bool pin_thread(int cpu, std::string& error);

// VmHWM (peak resident set, kB) of a live process; 0 when unreadable.
std::uint64_t vmhwm_kb(pid_t pid);
std::uint64_t self_vmhwm_kb();

}  // namespace fairlane::bench
