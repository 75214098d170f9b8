// A child process killed while it is parked in a blocking call
// (claim_wait, enqueue_wait), and the next process to attach: what the
// parked-count tests of claim_wait and enqueue_wait both do.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "fairlane/queue.hpp"
#include "forked_child.hpp"
#include "test_support.hpp"

namespace fairlane::test {

// Forks a child that opens segment `name` and calls `park` on its handle
// (a call that parks and does not return for a long while); once
// `parked()` says it has parked, kills it with SIGKILL and reaps it.
template <class Park, class Parked>
void kill_a_parked_child(const std::string& name, Park park, Parked parked) {
  ForkedChild child([&] {
    auto r = Queue::open(name);
    if (!r) return 3;
    park(*r);
    return 0;
  }, 120);
  ASSERT_TRUE(eventually(parked)) << "the child never parked";
  child.kill_now();
  child.wait();
  ASSERT_TRUE(child.signaled()) << child.describe();
}

// Forks a child that attaches to segment `name` and exits: with every
// other record held, it takes the record a dead process left.
inline void attach_a_child(const std::string& name) {
  ForkedChild next([&] {
    auto r = Queue::open(name);
    return r ? 0 : 3;
  }, 60);
  ASSERT_TRUE(next.wait_for(std::chrono::seconds(20)));
  ASSERT_TRUE(next.exited_zero()) << next.describe();
}

}  // namespace fairlane::test
