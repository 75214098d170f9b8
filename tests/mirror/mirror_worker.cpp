// fairlane_mirror_worker: the child processes of the mirror crash test.
//
//   produce SEG GROUPS OUTFILE   enqueue minted jobs round the groups until
//                                killed; one line "<id>" per job whose
//                                enqueue returned `enqueued` (acknowledged)
//   consume SEG OUTFILE [IDLE_MS [WORK_US]]
//                                claim_wait and complete until killed (or,
//                                with IDLE_MS > 0, until the queue stays
//                                empty that long), spending WORK_US on each
//                                job; one line "<id>" per complete that
//                                returned ok
//
// Lines are written with write(2): a SIGKILL loses nothing already written.
// Exit: 0 done, 2 bad arguments, 3 the queue misbehaved, 4 cannot attach.
#include <fairlane/queue.hpp>

#include <fcntl.h>
#include <sys/prctl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

using namespace fairlane;

namespace {

[[noreturn]] void die(int code, const std::string& msg) {
  std::fprintf(stderr, "fairlane_mirror_worker[%d]: %s\n", int(::getpid()), msg.c_str());
  std::_Exit(code);
}

int open_out(const char* path) {
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) die(2, std::string("cannot write ") + path);
  return fd;
}

void line(int fd, std::string_view text) {
  std::string l(text);
  l += '\n';
  if (::write(fd, l.data(), l.size()) != ssize_t(l.size())) die(3, "short write");
}

Queue attach(const char* seg) {
  auto q = Queue::open(seg);
  if (!q) die(4, q.error().message);
  return std::move(*q);
}

int produce(const char* seg, int groups, const char* out) {
  Queue q = attach(seg);
  const int fd = open_out(out);
  for (std::uint64_t i = 0;; ++i) {
    std::string g = "TEN00000000000";
    g[13] = char('1' + i % std::uint64_t(groups));  // groups <= 9
    const BrandedId group = *BrandedId::parse(g);
    const BrandedId id = q.mint();
    const EnqueueStatus st = q.enqueue(group, id, "job " + std::to_string(i));
    switch (st) {
      case EnqueueStatus::enqueued: line(fd, id.str()); break;
      case EnqueueStatus::full:
      case EnqueueStatus::mirror_behind:
      case EnqueueStatus::mirror_unavailable:
      case EnqueueStatus::not_durable:
        std::this_thread::sleep_for(std::chrono::milliseconds(1));  // not acknowledged: not recorded
        break;
      default: die(3, "enqueue: " + std::string(to_string(st)));
    }
  }
}

int consume(const char* seg, const char* out, long idle_ms, long work_us) {
  Queue q = attach(seg);
  const int fd = open_out(out);
  Lease l;
  for (;;) {
    if (!q.claim_wait(l, 30000, std::chrono::milliseconds(idle_ms > 0 ? idle_ms : 200))) {
      if (idle_ms > 0) return 0;
      continue;
    }
    if (work_us > 0) std::this_thread::sleep_for(std::chrono::microseconds(work_us));
    if (q.complete(l.id, l.token) == AckStatus::ok) line(fd, l.id.str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  ::alarm(120);  // a watchdog: a hung child fails the test instead of lingering
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "produce" && argc == 5) return produce(argv[2], std::atoi(argv[3]), argv[4]);
  if (mode == "consume" && argc >= 4 && argc <= 6)
    return consume(argv[2], argv[3], argc >= 5 ? std::atol(argv[4]) : 0, argc == 6 ? std::atol(argv[5]) : 0);
  die(2, "usage: produce SEG GROUPS OUTFILE | consume SEG OUTFILE [IDLE_MS [WORK_US]]");
}
