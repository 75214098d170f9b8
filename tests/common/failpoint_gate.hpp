// Holds a thread at a step point (a failpoint callback) until the test
// lets it go: what the tests of a thread stopped between two steps do.
#pragma once

#include <atomic>

namespace fairlane::test {

// Install with failpoint_call(name, FailpointGate::hold, &gate). Only a
// thread that armed itself (FailpointGate::arm(), in that thread) is held,
// and only the first time it gets there; `held` counts the threads held.
struct FailpointGate {
  std::atomic<int> held{0};
  std::atomic<bool> open{false};

  static void arm() noexcept { armed() = true; }
  void release() noexcept {
    open = true;
    open.notify_all();
  }
  static void hold(void* arg) noexcept {
    if (!armed()) return;
    armed() = false;
    auto& g = *static_cast<FailpointGate*>(arg);
    g.held.fetch_add(1);
    g.open.wait(false);
  }

 private:
  static bool& armed() noexcept {
    thread_local bool a = false;
    return a;
  }
};

}  // namespace fairlane::test
