// A call run on a thread of its own and stopped at a named step point until
// go(), for tests that need another thread's operation half done
// (failpoint builds only: src/failpoint.hpp).
#pragma once

#include "failpoint.hpp"

#include <atomic>
#include <functional>
#include <thread>

namespace fairlane::test {

// Runs `call` on a new thread; the first time that thread reaches `step` it
// waits there until go(). The constructor returns once it is there; go()
// lets it finish and returns what the call returned. Other threads pass the
// step point as if nothing were set.
template <class R>
class StoppedCall {
 public:
  StoppedCall(const char* step, std::function<R()> call) : step_(step) {
    detail::failpoint_call(step_, &StoppedCall::at, this);
    thread_ = std::thread([this, call = std::move(call)] {
      who_.store(std::this_thread::get_id());
      result_ = call();
    });
    while (!there_.load()) std::this_thread::yield();
  }
  StoppedCall(const StoppedCall&) = delete;
  StoppedCall& operator=(const StoppedCall&) = delete;
  ~StoppedCall() { go(); }

  R go() {
    go_.store(true);
    if (thread_.joinable()) thread_.join();
    detail::failpoint_call(step_, nullptr, nullptr);
    return result_;
  }

 private:
  static void at(void* p) {
    StoppedCall& c = *static_cast<StoppedCall*>(p);
    if (c.who_.load() != std::this_thread::get_id() || c.there_.exchange(true)) return;
    while (!c.go_.load()) std::this_thread::yield();
  }
  const char* step_;
  std::atomic<std::thread::id> who_{};
  std::atomic<bool> there_{false}, go_{false};
  R result_{};
  std::thread thread_;
};

}  // namespace fairlane::test
