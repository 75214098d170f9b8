// The segment clock: CLOCK_MONOTONIC (one clock for the whole host) plus the
// segment's test offset. clock_gettime goes through the vDSO: no system call.
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>
#include <string_view>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

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

// The hot path's reading of CLOCK_MONOTONIC: a thread's last precise
// reading, while the time-stamp counter has moved less than
// kHotClockTicks since it was taken; a precise reading (and a new last one)
// otherwise. Taken from before the read, the counter's value bounds how far
// behind the clock the reading can be: kHotClockTicks of the counter (1.6 us
// at the 2.6 GHz of the development machine's, 4.1 us at 1 GHz), as if the
// thread had read the clock that much earlier and been delayed. Never ahead
// of it, and never behind a reading this thread returned before.
// A precise reading costs 24 ns through the vDSO on the development machine,
// the counter 9.6 ns (design.md, "The segment clock").
// The counter is trusted only where the kernel trusts it for its own clock
// (kHotClockTrusted: an invariant counter and the tsc clocksource), so that
// it neither stops while a thread sleeps nor differs between CPUs; elsewhere
// the counter is not read, and every reading is precise.
struct HotClock {
  std::uint64_t tsc = 0;
  std::uint64_t us = 0;
};
inline constexpr std::uint64_t kHotClockTicks = 4096;
inline thread_local constinit HotClock t_hot_clock{};

// Whether a host whose counter is invariant (`invariant`) and whose kernel
// reads CLOCK_MONOTONIC from the clocksource named `clocksource` (sysfs's
// current_clocksource, its newline included or not) may keep readings.
bool hot_clock_trusted(bool invariant, std::string_view clocksource) noexcept;
// This host's answer, decided once per process as the library loads
// (clock.cpp); false before, so that a reading made by another library's
// static initialiser is precise.
extern const bool kHotClockTrusted;

// One reading of the hot clock from `c`, given the counter's value `t`, read
// before this call (so before `precise` reads the clock): the kept reading
// if the counter moved less than kHotClockTicks since it was taken, else
// `precise()`, kept with `t`. The reading is stored before its counter
// value, with a signal fence between, so that a signal handler running
// between the two stores and reading the clock on this thread finds the old
// counter value (a miss, or the new reading), never the new counter value
// beside an old reading.
template <class Precise>
inline std::uint64_t hot_reading(HotClock& c, std::uint64_t t, Precise&& precise) noexcept {
  if (t - c.tsc < kHotClockTicks) return c.us;
  const std::uint64_t us = precise();
  c.us = us;
  std::atomic_signal_fence(std::memory_order_release);
  c.tsc = t;
  return us;
}

inline std::uint64_t monotonic_us_hot() noexcept {
#if defined(__x86_64__)
  if (!kHotClockTrusted) return monotonic_us();
  return hot_reading(t_hot_clock, __rdtsc(), monotonic_us);
#else
  return monotonic_us();
#endif
}

// Relaxed: the offset only moves forward, by a test or drill, and a reader
// that sees it a moment late just sees time a moment earlier.
inline std::uint64_t segment_now_us(const Segment& s) noexcept {
  return monotonic_us_hot() + std::uint64_t(s.h->clock_offset_ms.load(std::memory_order_relaxed)) * 1000u;
}
inline std::uint64_t segment_now_ms(const Segment& s) noexcept { return segment_now_us(s) / 1000u; }

}  // namespace fairlane::detail
