// Process-shared futex on a 32-bit word in the segment. std::atomic::wait
// uses private futexes and does not work across processes, so we call the
// system directly (without FUTEX_PRIVATE_FLAG).
#pragma once

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace fairlane::detail {

// Sleeps while *word == expected, at most timeout_ms. Spurious returns are
// fine: every caller re-checks its condition.
inline void futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected, std::uint64_t timeout_ms) noexcept {
  timespec ts{time_t(timeout_ms / 1000), long(timeout_ms % 1000) * 1000000L};
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

// The same until deadline_ms, a CLOCK_MONOTONIC time: absolute, so that a
// stall between working out the deadline and this call does not make the
// sleep end later (one already past returns at once).
inline void futex_wait_until(std::atomic<std::uint32_t>* word, std::uint32_t expected, std::uint64_t deadline_ms) noexcept {
  timespec ts{time_t(deadline_ms / 1000), long(deadline_ms % 1000) * 1000000L};
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAIT_BITSET, expected, &ts, nullptr,
          FUTEX_BITSET_MATCH_ANY);
}

inline void futex_wake(std::atomic<std::uint32_t>* word, int count) noexcept {
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(word), FUTEX_WAKE, count, nullptr, nullptr, 0);
}

}  // namespace fairlane::detail
