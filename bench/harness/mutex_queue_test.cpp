// fairlane_mutex_queue_test: the mutex peer does the work it claims to do
// (dedup, strict rotation, id order, fencing, expiry, limits, lanes given
// back, recovery after a holder died inside the lock). A check of the
// benchmark's peer, not of fairlane; no timing. Exit 0 when every check
// holds.
#include <sys/wait.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "check.hpp"
#include "mutex_queue.hpp"

using fairlane::AckStatus;
using fairlane::BrandedId;
using fairlane::EnqueueStatus;
using fairlane::bench::MutexQueue;
using fairlane::bench::check_failures;

int main() {
  const std::string name = "/fairlane-mutexq-test-" + std::to_string(getpid());
  std::uint64_t bytes = 0;
  std::string error;
  if (!MutexQueue::create(name, 64, 8, 32, bytes, error)) {
    std::fprintf(stderr, "create: %s\n", error.c_str());
    return 1;
  }
  struct Unlink {
    std::string n;
    ~Unlink() { shm_unlink(n.c_str()); }
  } unlink_at_exit{name};
  MutexQueue q;
  if (!q.open(name, error)) {
    std::fprintf(stderr, "open: %s\n", error.c_str());
    return 1;
  }
  const BrandedId a = BrandedId::make("TEN", 1), b = BrandedId::make("TEN", 2), c = BrandedId::make("TEN", 3);
  fairlane::Lease l;

  // mint: strictly increasing, in the job namespace
  const BrandedId j1 = q.mint(), j2 = q.mint(), j3 = q.mint();
  CHECK(j1.valid() && j1 < j2 && j2 < j3 && j1.kind() == "JOB");

  // admission and its refusals
  CHECK(q.enqueue(a, j1, "a1") == EnqueueStatus::enqueued);
  CHECK(q.enqueue(b, j2, "b1") == EnqueueStatus::enqueued);
  CHECK(q.enqueue(a, j3, "a2") == EnqueueStatus::enqueued);
  CHECK(q.enqueue(b, j1, "again") == EnqueueStatus::duplicate);
  CHECK(q.enqueue(a, BrandedId::make("USR", 5), "x") == EnqueueStatus::kind_mismatch);
  CHECK(q.enqueue(a, BrandedId(), "x") == EnqueueStatus::invalid_id);
  CHECK(q.enqueue(a, q.mint(), std::string(33, 'x')) == EnqueueStatus::payload_too_large);

  // strict rotation, id order in a lane: a, b, a
  std::vector<fairlane::Lease> got;
  while (q.claim(l, 60'000)) got.push_back(l);
  CHECK(got.size() == 3);
  if (got.size() == 3) {
    CHECK(got[0].id == j1 && got[0].group == a && got[0].payload == "a1" && got[0].attempt == 1);
    CHECK(got[1].id == j2 && got[1].group == b);
    CHECK(got[2].id == j3 && got[2].group == a);
    CHECK(got[0].token != got[1].token && got[1].token != got[2].token);
    // fencing
    CHECK(q.complete(got[0].id, fairlane::Token(got[0].token.value + 1000)) == AckStatus::stale);
    for (auto& x : got) CHECK(q.complete(x.id, x.token) == AckStatus::ok);
    CHECK(q.complete(got[0].id, got[0].token) == AckStatus::gone);
  }
  auto st = q.stats();
  CHECK(st.pending == 0 && st.leased == 0 && st.lanes_live == 0 && st.completed == 3 && st.duplicates == 1);

  // expiry: the job comes back at its position, with attempt 2 and a new token
  const BrandedId j4 = q.mint();
  CHECK(q.enqueue(c, j4, "c1") == EnqueueStatus::enqueued);
  CHECK(q.claim(l, 100));
  const fairlane::Token first = l.token;
  q.advance_clock(200);
  fairlane::Lease again;
  CHECK(q.claim(again, 60'000));
  CHECK(again.id == j4 && again.attempt == 2 && again.token != first);
  CHECK(q.complete(j4, first) == AckStatus::stale);
  CHECK(q.complete(j4, again.token) == AckStatus::ok);
  CHECK(q.stats().expired == 1);

  // a limit holds the lane at its ceiling
  CHECK(q.set_limit(a, 1) == fairlane::LaneStatus::ok);
  const BrandedId j5 = q.mint(), j6 = q.mint();
  CHECK(q.enqueue(a, j5, "a3") == EnqueueStatus::enqueued);
  CHECK(q.enqueue(a, j6, "a4") == EnqueueStatus::enqueued);
  CHECK(q.claim(l, 60'000) && l.id == j5);
  fairlane::Lease none;
  CHECK(!q.claim(none, 60'000));
  CHECK(q.complete(l.id, l.token) == AckStatus::ok);
  CHECK(q.claim(l, 60'000) && l.id == j6);
  CHECK(q.complete(l.id, l.token) == AckStatus::ok);
  CHECK(q.stats().lanes_live == 1);  // its limit keeps the lane

  // a holder that dies inside the lock: the next lock repairs from the slots
  const BrandedId j7 = q.mint(), j8 = q.mint();
  CHECK(q.enqueue(b, j7, "b2") == EnqueueStatus::enqueued);
  CHECK(q.enqueue(c, j8, "c2") == EnqueueStatus::enqueued);
  CHECK(q.claim(l, 60'000));  // one leased, one pending across the death
  const pid_t child = fork();
  if (child == 0) {
    MutexQueue mine;
    std::string e;
    if (mine.open(name, e)) mine.lock_and_abandon();
    _exit(0);
  }
  int status = 0;
  waitpid(child, &status, 0);
  st = q.stats();  // takes the lock: EOWNERDEAD, rebuilt
  CHECK(st.repairs == 1 && st.pending == 1 && st.leased == 1 && st.lanes_live == 3);
  CHECK(q.complete(l.id, l.token) == AckStatus::ok);
  fairlane::Lease after;
  CHECK(q.claim(after, 60'000) && after.id != l.id && (after.id == j7 || after.id == j8));
  CHECK(q.complete(after.id, after.token) == AckStatus::ok);
  CHECK(q.enqueue(b, j7, "dup?") == EnqueueStatus::enqueued);  // j7 or j8 completed; both ids are free again
  CHECK(q.enqueue(b, j8, "dup?") == EnqueueStatus::enqueued);

  if (check_failures) {
    std::fprintf(stderr, "fairlane_mutex_queue_test: %d check(s) failed\n", check_failures);
    return 1;
  }
  std::printf("fairlane_mutex_queue_test: every check held\n");
  return 0;
}
