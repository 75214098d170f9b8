// The segment clock: CLOCK_MONOTONIC (one clock for the whole host) plus the
// segment's test offset. clock_gettime goes through the vDSO: no system call.
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>

#include "segment.hpp"

namespace fairlane::detail {

// Wall-clock time (CLOCK_REALTIME) in ms since the Unix epoch: for times
// shown to people and for snowflakes, never for deadlines.
inline std::uint64_t unix_ms() noexcept {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return std::uint64_t(ts.tv_sec) * 1000u + std::uint64_t(ts.tv_nsec) / 1000000u;
}

// The same, from the coarse clock (the last tick, a few ms behind): what
// mint() reads, at a fraction of the cost.
inline std::uint64_t unix_ms_coarse() noexcept {
  timespec ts;
  clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return std::uint64_t(ts.tv_sec) * 1000u + std::uint64_t(ts.tv_nsec) / 1000000u;
}

inline std::uint64_t monotonic_us() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return std::uint64_t(ts.tv_sec) * 1000000u + std::uint64_t(ts.tv_nsec) / 1000u;
}

// CLOCK_MONOTONIC's coarse reading (the last tick): at or behind
// monotonic_us() / 1000, never ahead.
inline std::uint64_t monotonic_ms_coarse() noexcept {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return std::uint64_t(ts.tv_sec) * 1000u + std::uint64_t(ts.tv_nsec) / 1000000u;
}

// Relaxed: the offset only moves forward, by a test or drill, and a reader
// that sees it a moment late just sees time a moment earlier.
inline std::uint64_t segment_now_us(const Segment& s) noexcept {
  return monotonic_us() + std::uint64_t(s.h->clock_offset_ms.load(std::memory_order_relaxed)) * 1000u;
}
inline std::uint64_t segment_now_ms(const Segment& s) noexcept { return segment_now_us(s) / 1000u; }

}  // namespace fairlane::detail
