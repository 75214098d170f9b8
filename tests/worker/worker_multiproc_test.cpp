// Many workers in many processes (fork + exec of fairlane_worker_child):
// every job is completed exactly once, payloads arrive intact, retries are
// counted, and SIGTERM stops each process gracefully with exit status 0.
#include "worker_support.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <sstream>

#ifndef FAIRLANE_WORKER_CHILD_PATH
#error "FAIRLANE_WORKER_CHILD_PATH must name the fairlane_worker_child executable"
#endif

namespace fairlane {
namespace {

using test::group;
using test::kHang;
using test::SegmentGuard;
using test::unique_segment_name;

// A child with its stdout on `out_fd`; SIGKILLed if still running when this
// object goes away (or when the test process dies: PR_SET_PDEATHSIG).
class ChildProcess {
 public:
  ChildProcess(const std::vector<std::string>& args, int out_fd) {
    const test::Argv argv(FAIRLANE_WORKER_CHILD_PATH, args);
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
    if (pid_ == 0) {  // async-signal-safe calls only until exec
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(126);
      ::dup2(out_fd, STDOUT_FILENO);
      ::execv(argv.get()[0], argv.get());
      ::_exit(127);
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() {
    if (!reaped_) {
      ::kill(pid_, SIGKILL);  // our own child, by its pid
      wait();
    }
  }
  pid_t pid() const { return pid_; }
  int wait() {
    test::reap(pid_, status_, reaped_);
    return status_;
  }

 private:
  pid_t pid_ = -1;
  int status_ = 0;
  bool reaped_ = false;
};

// Reads whole lines from a pipe, with a bound on each wait for data.
class LineReader {
 public:
  explicit LineReader(int fd) : fd_(fd) {}
  // The next line, or nullopt at EOF or after kHang without data.
  std::optional<std::string> next() {
    for (;;) {
      if (auto nl = buf_.find('\n'); nl != std::string::npos) {
        std::string l = buf_.substr(0, nl);
        buf_.erase(0, nl + 1);
        return l;
      }
      pollfd p{fd_, POLLIN, 0};
      const int n = ::poll(&p, 1, static_cast<int>(std::chrono::milliseconds(kHang).count()));
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return std::nullopt;
      char chunk[4096];
      const ssize_t got = ::read(fd_, chunk, sizeof chunk);
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0) return std::nullopt;
      buf_.append(chunk, static_cast<std::size_t>(got));
    }
  }

 private:
  int fd_;
  std::string buf_;
};

TEST(WorkerProcesses, ManyWorkersInManyProcessesLoseNothing) {
  constexpr int kProcesses = 4;
  constexpr int kThreads = 3;
  constexpr int kJobs = 3000;
  constexpr int kGroups = 10;
  SegmentGuard guard(unique_segment_name());
  QueueOptions qo;
  qo.jobs = 4096;
  qo.lanes = 64;
  qo.payload_bytes = 64;
  auto created = Queue::create(guard.name(), qo);
  ASSERT_TRUE(created.ok()) << test::describe(created.error());
  Queue& q = created.value();

  int p[2];
  ASSERT_EQ(::pipe2(p, O_CLOEXEC), 0);
  std::vector<std::unique_ptr<ChildProcess>> children;
  for (int i = 0; i < kProcesses; ++i)
    children.push_back(std::make_unique<ChildProcess>(std::vector<std::string>{guard.name(), std::to_string(kThreads)}, p[1]));
  ::close(p[1]);  // EOF once every child has exited

  std::set<BrandedId> enqueued;
  std::size_t fail_first = 0;
  for (int i = 0; i < kJobs; ++i) {
    const BrandedId g = group("TEN", 1 + i % kGroups);
    const BrandedId id = q.mint();
    ASSERT_EQ(q.enqueue(g, id, "job:" + id.string() + ":" + g.string()), EnqueueStatus::enqueued);
    enqueued.insert(id);
    fail_first += id.snowflake() % 5 == 0;
  }

  LineReader lines(p[0]);
  std::map<BrandedId, int> done;
  std::set<std::string> ready, workers_that_worked;
  std::vector<std::string> corrupt;
  while (done.size() < enqueued.size() || ready.size() < kProcesses) {
    auto l = lines.next();
    ASSERT_TRUE(l.has_value()) << "children went quiet after " << done.size() << " of " << kJobs << " jobs";
    std::istringstream in(*l);
    std::string what, a, b, c;
    in >> what >> a >> b >> c;
    if (what == "ready") {
      ready.insert(a);
    } else if (what == "done") {
      auto id = BrandedId::parse(a);
      ASSERT_TRUE(id.has_value()) << *l;
      ++done[*id];
      workers_that_worked.insert(c);
    } else {
      corrupt.push_back(*l);
    }
  }
  for (auto& ch : children) ASSERT_EQ(::kill(ch->pid(), SIGTERM), 0);
  while (auto l = lines.next()) corrupt.push_back("after stop: " + *l);
  for (auto& ch : children) {
    const int st = ch->wait();
    EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "child " << ch->pid() << " status " << st;
  }
  ::close(p[0]);

  EXPECT_TRUE(corrupt.empty()) << corrupt.front();
  EXPECT_EQ(done.size(), enqueued.size());
  for (const auto& [id, n] : done) {
    EXPECT_EQ(n, 1) << id.str() << " completed " << n << " times";
    EXPECT_EQ(enqueued.count(id), 1u) << "completed a job never enqueued: " << id.str();
  }
  const Snapshot s = q.snapshot();
  EXPECT_EQ(s.pending + s.leased + s.scheduled + s.dead, 0u);
  EXPECT_EQ(s.counters.completed, static_cast<std::uint64_t>(kJobs));
  EXPECT_EQ(s.counters.retried, fail_first);
  EXPECT_EQ(s.counters.expired, 0u);
  std::cerr << "[          ] " << workers_that_worked.size() << " of " << kProcesses
            << " processes completed jobs; " << fail_first << " first attempts failed and were retried\n";
}

}  // namespace
}  // namespace fairlane
