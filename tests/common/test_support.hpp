// Shared helpers for the fairlane test suites: unique segment names, an RAII
// guard that removes a segment, temp directories, and small id helpers.
//
// Header-only on purpose: every test executable and the multi-process helper
// include it; none of it is linked into the library.
#pragma once

#include <fairlane/ids.hpp>
#include <fairlane/queue.hpp>
#include <fairlane/result.hpp>

#include "require_servers.hpp"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <memory>
#include <string>
#include <string_view>
#include <system_error>
#include <chrono>
#include <thread>
#include <unistd.h>

namespace fairlane::test {

// A case that needs a server or program this machine lacks (redis-server,
// prometheus) is skipped, with the reason; under FAIRLANE_REQUIRE_SERVERS
// (require_servers.hpp) it fails instead, since a skip would hide that the
// cases never ran.
#define FAIRLANE_SKIP_OR_FAIL(why)                                                   \
  do {                                                                               \
    const std::string fl_why_ = (why);                                               \
    if (::fairlane::test::servers_required())                                        \
      GTEST_FAIL() << fl_why_ << " (FAIRLANE_REQUIRE_SERVERS is set: not skipped)";  \
    else                                                                             \
      GTEST_SKIP() << fl_why_;                                                       \
  } while (0)

// Waits until a predicate holds (a real condition, polled every
// millisecond), with a hang guard; false if the guard ran out first.
template <class F>
bool eventually(F pred, std::chrono::milliseconds guard = std::chrono::seconds(20)) {
  const auto until = std::chrono::steady_clock::now() + guard;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// Is thread `tid` of this process blocked in the futex system call now?
// (/proc/self/task/TID/syscall names the system call a blocked thread is
// in.) A real condition to wait on where a test needs a thread asleep.
inline bool in_futex_wait(pid_t tid) {
  std::ifstream f("/proc/self/task/" + std::to_string(tid) + "/syscall");
  long nr = -1;
  return (f >> nr) && nr == SYS_futex;
}

// Waits until child `pid` stops (SIGSTOP, at a failpoint) or exits, with a
// hang guard: true if it stopped. (An exit is reaped here.)
inline bool wait_stopped(pid_t pid, std::chrono::milliseconds guard = std::chrono::seconds(20)) {
  bool stopped = false;
  eventually([&] {
    int st = 0;
    const pid_t r = ::waitpid(pid, &st, WNOHANG | WUNTRACED);
    if (r == pid) stopped = WIFSTOPPED(st);
    return r != 0;  // stopped, exited, or no such child
  }, guard);
  return stopped;
}

// A failpoint's name as a parameterised test's name: "run.linked" ->
// "run_linked" (gtest allows only [A-Za-z0-9_]).
inline std::string point_name(std::string_view point) {
  std::string n(point);
  for (char& c : n)
    if (c == '.') c = '_';
  return n;
}

// A segment name unique to this process and this test: "flt_<pid>_<suite>_<test>[_<tag>]".
// Characters other than [A-Za-z0-9_] are replaced so parameterised test names stay legal.
inline std::string unique_segment_name(std::string_view tag = {}) {
  std::string name = "flt_" + std::to_string(::getpid());
  if (const auto* info = ::testing::UnitTest::GetInstance()->current_test_info()) {
    name += '_';
    name += info->test_suite_name();
    name += '_';
    name += info->name();
  }
  if (!tag.empty()) {
    name += '_';
    name += tag;
  }
  for (char& c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (!ok) c = '_';
  }
  if (name.size() > 200) name.resize(200);  // NAME_MAX for /dev/shm entries is 255
  return name;
}

// Where POSIX shared memory objects live on Linux.
inline std::filesystem::path shm_path(std::string_view segment) {
  return std::filesystem::path("/dev/shm") / std::string(segment);
}

// Removes the named segment when it goes out of scope (and any leftover of a
// previous crashed run when it is made). Declare it before the Queue so the
// Queue is unmapped first.
class SegmentGuard {
 public:
  explicit SegmentGuard(std::string name) : name_(std::move(name)) {
    (void)Queue::remove(name_);
    std::error_code ec;
    std::filesystem::remove(shm_path(name_), ec);
  }
  SegmentGuard(const SegmentGuard&) = delete;
  SegmentGuard& operator=(const SegmentGuard&) = delete;
  ~SegmentGuard() {
    (void)Queue::remove(name_);
    std::error_code ec;
    std::filesystem::remove(shm_path(name_), ec);  // a crafted file the library refused to own
  }
  const std::string& name() const noexcept { return name_; }

 private:
  std::string name_;
};

// A private temporary directory, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "fairlane_test_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::system_error(errno, std::generic_category(), "mkdtemp");
    path_ = tmpl;
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const noexcept { return path_; }

 private:
  std::filesystem::path path_;
};

// A group id with a readable namespace, e.g. group("AAA") -> "AAA00000000001".
inline BrandedId group(std::string_view kind, std::uint64_t n = 1) {
  BrandedId id = BrandedId::make(kind, n);
  EXPECT_TRUE(id.valid()) << "bad test group kind " << kind;
  return id;
}

inline std::string describe(const Error& e) {
  return std::string(to_string(e.code)) + " (errno " + std::to_string(e.sys_errno) + "): " + e.message;
}

// Creates a queue or fails the current test with the library's message.
#define FAIRLANE_CREATE_OR_FAIL(var, name, opts)                                        \
  auto var##_result = ::fairlane::Queue::create((name), (opts));                        \
  ASSERT_TRUE(var##_result.ok()) << ::fairlane::test::describe(var##_result.error());   \
  ::fairlane::Queue& var = var##_result.value()



// One fresh segment per test, removed at the end (unmapped first).
class SegmentFixture : public ::testing::Test {
 protected:
  void create(const QueueOptions& o) {
    guard_ = std::make_unique<SegmentGuard>(unique_segment_name());
    auto r = Queue::create(guard_->name(), o);
    ASSERT_TRUE(r.ok()) << describe(r.error());
    q_.emplace(std::move(r.value()));
  }
  void TearDown() override {
    q_.reset();  // unmap before the guard removes the name
    guard_.reset();
  }
  bool created() const { return q_.has_value(); }
  const std::string& seg() { return guard_->name(); }
  Queue& q() { return *q_; }

 private:
  std::unique_ptr<SegmentGuard> guard_;
  std::optional<Queue> q_;
};

// The exit status and output of a program run to completion.
struct ProgramRun {
  int exit_code = -1;  // -1: did not exit normally
  int signal = 0;      // the signal that killed it, 0 if none
  std::string out, err;
};

inline std::string slurp_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `exe args...` as the argv of an exec or posix_spawn: the strings are kept
// here and get() points into them, null-terminated. Neither copied nor
// moved (the pointers would dangle).
class Argv {
 public:
  Argv(const std::string& exe, const std::vector<std::string>& args) : full_{exe} {
    full_.insert(full_.end(), args.begin(), args.end());
    for (auto& a : full_) ptrs_.push_back(a.data());
    ptrs_.push_back(nullptr);
  }
  Argv(const Argv&) = delete;
  Argv& operator=(const Argv&) = delete;
  char* const* get() const noexcept { return ptrs_.data(); }

 private:
  std::vector<std::string> full_;
  std::vector<char*> ptrs_;
};

// Waits for our child `pid` to end, a wait interrupted by a signal made
// again; once `reaped`, does nothing. `status` gets its wait status.
inline void reap(pid_t pid, int& status, bool& reaped) {
  while (!reaped) {
    const pid_t r = ::waitpid(pid, &status, 0);
    if (r == pid || (r < 0 && errno != EINTR)) reaped = true;
  }
}

// Runs `exe args...` with stdin from `stdin_path` (/dev/null by default) and
// stdout/stderr to files (never a pipe a chatty child could fill), and waits
// for it.
inline ProgramRun run_program(const std::string& exe, const std::vector<std::string>& args,
                              const std::string& stdin_path = "/dev/null") {
  TempDir dir;
  const auto out_path = dir.path() / "out";
  const auto err_path = dir.path() / "err";
  const Argv argv(exe, args);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, stdin_path.c_str(), O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv.get()[0], &fa, nullptr, argv.get(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ProgramRun r;
  if (rc != 0) {
    r.err = std::string("posix_spawn: ") + std::strerror(rc);
    return r;
  }
  int st = 0;
  bool reaped = false;
  reap(pid, st, reaped);
  if (WIFEXITED(st)) r.exit_code = WEXITSTATUS(st);
  if (WIFSIGNALED(st)) r.signal = WTERMSIG(st);
  r.out = slurp_file(out_path);
  r.err = slurp_file(err_path);
  return r;
}

// Claims and completes everything there is (each completion must be ok);
// the ids in the order they were served.
inline std::vector<BrandedId> serve_all(Queue& q) {
  std::vector<BrandedId> got;
  Lease l;
  while (q.claim(l, 60000)) {
    got.push_back(l.id);
    EXPECT_EQ(q.complete(l.id, l.token), AckStatus::ok);
  }
  return got;
}

// No corruption met, and fsck finds nothing.
inline void expect_clean(Queue& q) {
  EXPECT_EQ(q.corruption().count, 0u) << q.corruption().last_structure;
  const FsckReport r = q.fsck();
  EXPECT_TRUE(r.clean()) << (r.issues.empty() ? "" : r.issues[0].invariant + ": " + r.issues[0].detail);
}

}  // namespace fairlane::test

// gtest printers, so failures show ids and statuses instead of bytes.
namespace fairlane {
inline void PrintTo(const BrandedId& id, std::ostream* os) { *os << (id.valid() ? id.str() : std::string_view("<empty id>")); }
inline void PrintTo(EnqueueStatus s, std::ostream* os) { *os << to_string(s); }
inline void PrintTo(AckStatus s, std::ostream* os) { *os << to_string(s); }
inline void PrintTo(FailStatus s, std::ostream* os) { *os << to_string(s); }
inline void PrintTo(LaneStatus s, std::ostream* os) { *os << to_string(s); }
inline void PrintTo(Errc e, std::ostream* os) { *os << to_string(e); }
inline void PrintTo(IdError e, std::ostream* os) { *os << to_string(e); }
}  // namespace fairlane
