// Processes for the demo (see process.hpp).
#include "process.hpp"

#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "cli_error.hpp"

namespace fairlane::cli {

namespace {

volatile std::sig_atomic_t g_stop_signal = 0;

extern "C" void on_stop_signal(int sig) { g_stop_signal = sig; }

}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: let sleeps and waits return early
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool stop_requested() noexcept { return g_stop_signal != 0; }
int stop_signal() noexcept { return g_stop_signal; }

std::uint64_t mono_ns() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1'000'000'000ULL + static_cast<std::uint64_t>(ts.tv_nsec);
}

void sleep_unless_stopped(std::chrono::nanoseconds d) {
  auto until = std::chrono::steady_clock::now() + d;
  while (!stop_requested()) {
    auto left = until - std::chrono::steady_clock::now();
    if (left <= std::chrono::nanoseconds::zero()) return;
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(left, std::chrono::milliseconds(50)));
  }
}

pid_t spawn_self(const std::vector<std::string>& args) {
  // Build argv before fork: the child only calls async-signal-safe functions.
  std::vector<char*> argv;
  static char argv0[] = "fairlane";
  argv.push_back(argv0);
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const pid_t parent = getpid();
  // The binary by its own path, so that the child's name (/proc/PID/comm,
  // what `watch` and `inspect` show) is the binary's and not "exe"; the
  // /proc link stays the fallback if that path is gone (a rebuild).
  static const std::string self = [] {
    char buf[4096];
    const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
    return n > 0 ? std::string(buf, std::size_t(n)) : std::string();
  }();

  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid < 0) fail(fmt::format("fork failed: {}", std::strerror(errno)));
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(3);  // the parent died before prctl took hold
    if (!self.empty()) execv(self.c_str(), argv.data());
    execv("/proc/self/exe", argv.data());
    static const char msg[] = "fairlane: exec of /proc/self/exe failed\n";
    [[maybe_unused]] auto n = write(2, msg, sizeof msg - 1);
    _exit(127);
  }
  return pid;
}

std::string ChildExit::describe() const {
  if (WIFEXITED(status)) return fmt::format("exited {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("killed by signal {} ({})", WTERMSIG(status), strsignal(WTERMSIG(status)));
  return fmt::format("status {:#x}", status);
}

bool ChildExit::ok() const { return WIFEXITED(status) && WEXITSTATUS(status) == 0; }

std::optional<ChildExit> reap_any() noexcept {
  int status = 0;
  pid_t pid = waitpid(-1, &status, WNOHANG);
  if (pid <= 0) return std::nullopt;
  return ChildExit{pid, status};
}

std::vector<ChildExit> reap_all(const std::vector<pid_t>& pids,
                                std::chrono::steady_clock::time_point deadline) {
  std::vector<ChildExit> done;
  std::vector<pid_t> left = pids;
  bool killed = false;
  while (!left.empty()) {
    for (auto it = left.begin(); it != left.end();) {
      int status = 0;
      pid_t r = waitpid(*it, &status, WNOHANG);
      if (r == *it || (r < 0 && errno == ECHILD)) {
        done.push_back(ChildExit{*it, r == *it ? status : 0});
        it = left.erase(it);
      } else {
        ++it;
      }
    }
    if (left.empty()) break;
    if (!killed && std::chrono::steady_clock::now() >= deadline) {
      for (pid_t p : left) kill(p, SIGKILL);
      killed = true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return done;
}

}  // namespace fairlane::cli
