// A reassign stopped at a named step, for the tests that need a move half
// done (failpoint builds only: src/failpoint.hpp).
#pragma once

#include <fairlane/queue.hpp>

#include <gtest/gtest.h>

#include "stopped_call.hpp"

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
      : call_(step, [&q, j, to] { return q.reassign(j, to); }) {
    EXPECT_EQ(q.resume(from), LaneStatus::ok);
    EXPECT_EQ(q.pause(from), LaneStatus::ok);
  }
  // Lets the mover go on and end; what its reassign answered.
  MoveStatus go() { return call_.go(); }

 private:
  StoppedCall<MoveStatus> call_;
};

}  // namespace fairlane::test
