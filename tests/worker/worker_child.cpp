// fairlane_worker_child SEG THREADS: a consumer service, as a user would
// write one, for the many-processes test.
//
// Runs a Worker with the SIGTERM hook on the segment. The handler checks the
// payload against the job ("job:<id>:<group>"), and fails the first attempt
// of every job whose snowflake is a multiple of 5 (retried at once). Each
// completion, after complete() succeeded, is one line on stdout:
//
//   ready <pid>                    once the worker has started
//   done <id> <attempt> <pid>      a completed job
//   corrupt <id> <payload>         a payload that does not match its job
//
// Lines are written with one write(2) each (shorter than PIPE_BUF), so lines
// of many threads and processes on one pipe never interleave. Exit status 0
// after a graceful stop, 2 on a setup error.
#include <fairlane/backend.hpp>
#include <fairlane/queue.hpp>
#include <fairlane/worker.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

void line(const std::string& s) {
  const std::string l = s + "\n";
  (void)!::write(STDOUT_FILENO, l.data(), l.size());
}

}  // namespace

int main(int argc, char** argv) {
  using namespace fairlane;
  if (argc != 3) {
    std::fprintf(stderr, "usage: fairlane_worker_child SEG THREADS\n");
    return 2;
  }
  auto q = Queue::open(argv[1]);
  if (!q) {
    std::fprintf(stderr, "worker_child: %s\n", q.error().message.c_str());
    return 2;
  }
  const std::string pid = std::to_string(::getpid());

  WorkerOptions o;
  o.threads = static_cast<std::uint32_t>(std::atoi(argv[2]));
  o.max_attempts = 5;
  o.lease_ms = 30000;
  o.idle_poll = std::chrono::milliseconds(50);
  o.stop_on_signals = true;
  o.on_event = [&](const JobEvent& e) {
    if (e.kind == JobEvent::Kind::completed)
      line("done " + e.id.string() + " " + std::to_string(e.attempt) + " " + pid);
  };
  Worker w(shared_backend(segment_backend(std::move(q.value()))), o, [](Job& job) {
    const std::string want = "job:" + job.id().string() + ":" + job.group().string();
    if (job.payload() != want) {
      line("corrupt " + job.id().string() + " " + std::string(job.payload()));
      return Outcome::dead("corrupt payload");
    }
    if (job.id().snowflake() % 5 == 0 && job.attempt() == 1)
      return Outcome::retry_after(std::chrono::milliseconds(0), "first try fails");
    return Outcome::ok();
  });
  try {
    w.start();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "worker_child: %s\n", e.what());
    return 2;
  }
  line("ready " + pid);
  w.wait();
  const WorkerStats s = w.stats();
  std::fprintf(stderr, "worker_child %s: claimed %llu completed %llu retried %llu handed back %llu lost %llu\n",
               pid.c_str(), static_cast<unsigned long long>(s.claimed), static_cast<unsigned long long>(s.completed),
               static_cast<unsigned long long>(s.retried), static_cast<unsigned long long>(s.handed_back),
               static_cast<unsigned long long>(s.lost));
  return 0;
}
