// A reassign stopped at a named step, for the tests that need a move half
// done (failpoint builds only: src/failpoint.hpp).
#pragma once

#include "failpoint.hpp"

#include <fairlane/queue.hpp>

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace fairlane::test {

// A reassign of job j from paused group `from` to `to` on a thread of its
// own, stopped at `step` until go(): by default once it has dropped the
// origin (the origin names the copy, which is undecided); at
// "reassign.committed", once the copy is committed and before it is linked
// in its lane. The drop is applied to the origin (it is a step of the
// origin's lane word, which any write of that word applies).
class StoppedMover {
 public:
  StoppedMover(Queue& q, const BrandedId& j, const BrandedId& from, const BrandedId& to,
               const char* step = "reassign.dropped")
      : q_(q), from_(from), step_(step) {
    detail::failpoint_call(step_, &StoppedMover::at_dropped, this);
    thread_ = std::thread([this, j, to] {
      mover_ = this;
      moved_ = q_.reassign(j, to);
    });
    while (!dropped_.load()) std::this_thread::yield();
    EXPECT_EQ(q_.resume(from_), LaneStatus::ok);
    EXPECT_EQ(q_.pause(from_), LaneStatus::ok);
  }
  ~StoppedMover() { go(); }
  // Lets the mover go on and end; what its reassign answered.
  MoveStatus go() {
    go_.store(true);
    if (thread_.joinable()) thread_.join();
    detail::failpoint_call(step_, nullptr, nullptr);
    return moved_;
  }

 private:
  static void at_dropped(void* p) {
    StoppedMover& m = *static_cast<StoppedMover*>(p);
    if (mover_ != &m) return;
    m.dropped_.store(true);
    while (!m.go_.load()) std::this_thread::yield();
  }
  static inline thread_local StoppedMover* mover_ = nullptr;
  Queue& q_;
  BrandedId from_;
  const char* step_;
  std::atomic<bool> dropped_{false}, go_{false};
  MoveStatus moved_ = MoveStatus::corrupt;
  std::thread thread_;
};

}  // namespace fairlane::test
