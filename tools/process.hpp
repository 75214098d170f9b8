// Processes for the demo: a stop flag set by SIGINT/SIGTERM, spawning this
// very binary with other arguments, and reaping children with a deadline.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fairlane::cli {

// Installs SIGINT and SIGTERM handlers that only set a flag (no SA_RESTART,
// so a blocking call returns EINTR). Idempotent.
void install_stop_handlers();
bool stop_requested() noexcept;
int stop_signal() noexcept;  // the signal that set the flag, 0 if none

// CLOCK_MONOTONIC in nanoseconds: one clock for every process on the host.
std::uint64_t mono_ns() noexcept;

// Sleeps up to `d`, returning early once a stop is requested.
void sleep_unless_stopped(std::chrono::nanoseconds d);

// fork() + exec of /proc/self/exe with `args` (argv[1..]). The child gets
// SIGTERM when this process dies (PR_SET_PDEATHSIG), so an abandoned demo
// does not leave workers behind. Throws cli::Failure when fork fails.
pid_t spawn_self(const std::vector<std::string>& args);

// How a reaped child ended.
struct ChildExit {
  pid_t pid = 0;
  int status = 0;  // raw waitpid status
  std::string describe() const;  // "exited 0", "killed by signal 9"
  bool ok() const;
};

// Reaps any one child without blocking.
std::optional<ChildExit> reap_any() noexcept;

// Waits for every pid in `pids` until `deadline` (steady clock); children
// still running then get SIGKILL and are reaped. Returns one entry per pid.
std::vector<ChildExit> reap_all(const std::vector<pid_t>& pids,
                                std::chrono::steady_clock::time_point deadline);

}  // namespace fairlane::cli
