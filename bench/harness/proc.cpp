#include "proc.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

namespace fairlane::bench {

void sleep_ns(std::uint64_t ns) noexcept {
  timespec ts{time_t(ns / 1'000'000'000ULL), long(ns % 1'000'000'000ULL)};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

namespace {
// A CPU set as large as the host's CPU numbers need (a fixed cpu_set_t stops
// at 1,024).
int cpu_slots() noexcept {
  const long n = sysconf(_SC_NPROCESSORS_CONF);
  return n > CPU_SETSIZE ? int(n) : CPU_SETSIZE;
}
}  // namespace

std::vector<int> allowed_cpus() {
  std::vector<int> out;
  const int n = cpu_slots();
  cpu_set_t* set = CPU_ALLOC(n);
  if (!set) return out;
  const std::size_t bytes = CPU_ALLOC_SIZE(n);
  CPU_ZERO_S(bytes, set);
  if (sched_getaffinity(0, bytes, set) == 0)
    for (int c = 0; c < n; ++c)
      if (CPU_ISSET_S(c, bytes, set)) out.push_back(c);
  CPU_FREE(set);
  return out;
}

bool pin_thread(int cpu, std::string& error) {
  const int n = std::max(cpu_slots(), cpu + 1);
  cpu_set_t* set = CPU_ALLOC(n);
  if (!set) { error = "cannot pin to CPU " + std::to_string(cpu) + ": out of memory"; return false; }
  const std::size_t bytes = CPU_ALLOC_SIZE(n);
  CPU_ZERO_S(bytes, set);
  CPU_SET_S(cpu, bytes, set);
  const int e = pthread_setaffinity_np(pthread_self(), bytes, set);
  CPU_FREE(set);
  if (e != 0) {
    error = "cannot pin to CPU " + std::to_string(cpu) + ": " + std::strerror(e);
    return false;
  }
  return true;
}

std::string self_exe() {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return {};
  return std::string(buf, std::size_t(n));
}

pid_t spawn(const std::vector<std::string>& argv, bool quiet, std::string& error) {
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = getpid();

  // An exec failure is reported through a close-on-exec pipe.
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) { error = std::string("pipe: ") + std::strerror(errno); return -1; }
  pid_t pid = fork();
  if (pid < 0) {
    error = std::string("fork: ") + std::strerror(errno);
    close(fds[0]);
    close(fds[1]);
    return -1;
  }
  if (pid == 0) {
    close(fds[0]);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // the harness died before prctl
    if (quiet) {
      int null = open("/dev/null", O_RDWR);
      if (null >= 0) {
        dup2(null, 1);
        dup2(null, 2);
        close(null);
      }
    }
    execv(args[0], args.data());
    int e = errno;
    ssize_t w = write(fds[1], &e, sizeof e);
    (void)w;
    _exit(127);
  }
  close(fds[1]);
  int e = 0;
  ssize_t r;
  do { r = read(fds[0], &e, sizeof e); } while (r < 0 && errno == EINTR);
  close(fds[0]);
  if (r == ssize_t(sizeof e)) {
    int st;
    waitpid(pid, &st, 0);
    error = "exec " + argv[0] + ": " + std::strerror(e);
    return -1;
  }
  return pid;
}

bool wait_for(pid_t pid, std::uint64_t timeout_ns, int& status) {
  const std::uint64_t deadline = now_ns() + timeout_ns;
  std::uint64_t nap = 100'000;
  for (;;) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return true;
    if (r < 0 && errno != EINTR) { status = 0; return true; }  // not our child (any more)
    if (now_ns() >= deadline) return false;
    sleep_ns(nap);
    if (nap < 10'000'000) nap *= 2;
  }
}

void stop_process(pid_t pid, std::uint64_t grace_ns) {
  if (pid <= 0) return;
  int st;
  if (waitpid(pid, &st, WNOHANG) == pid) return;
  kill(pid, SIGTERM);
  if (wait_for(pid, grace_ns, st)) return;
  kill(pid, SIGKILL);
  waitpid(pid, &st, 0);
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exit " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return std::string("killed by signal ") + std::to_string(WTERMSIG(status)) +
                                  " (" + strsignal(WTERMSIG(status)) + ")";
  return "status " + std::to_string(status);
}

namespace {
volatile sig_atomic_t g_interrupted = 0;
extern "C" void on_interrupt(int) { g_interrupted = 1; }
}  // namespace

void install_interrupt_handler() {
  struct sigaction sa {};
  sa.sa_handler = on_interrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

bool interrupted() noexcept { return g_interrupted != 0; }

namespace {
std::uint64_t read_vmhwm(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::strtoull(line.c_str() + 6, nullptr, 10);
  }
  return 0;
}
}  // namespace

std::uint64_t thread_minor_faults() noexcept {
  rusage ru{};
  if (getrusage(RUSAGE_THREAD, &ru) != 0) return 0;
  return std::uint64_t(ru.ru_minflt);
}

std::uint64_t process_cpu_ns(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto rp = all.rfind(')');  // the command may hold spaces
  if (rp == std::string::npos) return 0;
  // After ") ": state(3) ppid ... utime is field 14, stime 15 (1-based).
  const char* p = all.c_str() + rp + 2;
  unsigned long long utime = 0, stime = 0;
  int field = 3;
  while (*p && field < 14) {
    if (*p++ == ' ') ++field;
  }
  if (std::sscanf(p, "%llu %llu", &utime, &stime) != 2) return 0;
  const long hz = sysconf(_SC_CLK_TCK);
  return (utime + stime) * (1'000'000'000ULL / std::uint64_t(hz > 0 ? hz : 100));
}

std::uint64_t vmhwm_kb(pid_t pid) { return read_vmhwm("/proc/" + std::to_string(pid) + "/status"); }
std::uint64_t self_vmhwm_kb() { return read_vmhwm("/proc/self/status"); }

}  // namespace fairlane::bench
