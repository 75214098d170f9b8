// The hot clock (src/clock.hpp, monotonic_us_hot): a thread's last precise
// reading of CLOCK_MONOTONIC, kept while the time-stamp counter moves less
// than kHotClockTicks. Never ahead of the precise clock, never behind a
// reading the thread returned before, and behind the clock by at most
// kHotClockTicks of the counter.
#include <gtest/gtest.h>

#include <time.h>

#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "clock.hpp"

namespace fairlane::detail {
namespace {

#if defined(__x86_64__)
// The counter's ticks per microsecond, measured against CLOCK_MONOTONIC over
// 20 ms.
double ticks_per_us() {
  const std::uint64_t t0 = __rdtsc(), u0 = monotonic_us();
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const std::uint64_t t1 = __rdtsc(), u1 = monotonic_us();
  return double(t1 - t0) / double(u1 - u0);
}
#endif

TEST(HotClock, NeverAheadOfThePreciseClockNorBehindItsOwnLastReading) {
  std::uint64_t last = 0;
  for (int i = 0; i < 2'000'000; ++i) {
    const std::uint64_t hot = monotonic_us_hot();
    const std::uint64_t precise = monotonic_us();
    ASSERT_LE(hot, precise) << "reading " << i;
    ASSERT_GE(hot, last) << "reading " << i;
    last = hot;
  }
}

TEST(HotClock, BehindThePreciseClockByAtMostItsTicks) {
#if defined(__x86_64__)
  const double per_us = ticks_per_us();
  ASSERT_GT(per_us, 100.0);  // a counter of over 100 MHz
  // +1: both clocks are read in whole microseconds.
  const std::uint64_t bound = std::uint64_t(double(kHotClockTicks) / per_us) + 1;
  std::uint64_t worst = 0;
  for (int i = 0; i < 2'000'000; ++i) {
    const std::uint64_t before = monotonic_us();
    const std::uint64_t hot = monotonic_us_hot();
    if (before > hot) worst = std::max(worst, before - hot);
  }
  EXPECT_LE(worst, bound) << "counter at " << per_us << " ticks a us";
#else
  GTEST_SKIP() << "no time-stamp counter";
#endif
}

// A reading is kept across a sleep no longer than its ticks: after 2 ms the
// hot clock has moved by 2 ms, whatever it kept before.
TEST(HotClock, AKeptReadingDoesNotOutliveASleep) {
  for (int round = 0; round < 50; ++round) {
    const std::uint64_t a = monotonic_us_hot();
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    const std::uint64_t b = monotonic_us_hot();
    ASSERT_GE(b - a, 2000u) << "round " << round;
  }
}

// Where the counter is trusted (an invariant counter the kernel reads its
// own clock from), readings are kept: in a tight loop most are, so the
// precise clock's cost is paid about once per kHotClockTicks. Elsewhere
// none is, and every reading is precise.
TEST(HotClock, ReadingsAreKeptExactlyWhereTheCounterIsTrusted) {
  t_hot_clock = HotClock{};
  (void)monotonic_us_hot();
  EXPECT_EQ(t_hot_clock.tsc != 0, kHotClockTrusted);
  if (!kHotClockTrusted) GTEST_SKIP() << "the counter is not trusted here: every reading is precise";
  // Count the precise readings a tight loop makes: a new kept reading is one.
  int precise = 0;
  std::uint64_t kept = t_hot_clock.tsc;
  constexpr int kReads = 100'000;
  for (int i = 0; i < kReads; ++i) {
    (void)monotonic_us_hot();
    if (t_hot_clock.tsc != kept) {
      ++precise;
      kept = t_hot_clock.tsc;
    }
  }
  // A read in a tight loop takes about 10 ns (25 ticks at 2.6 GHz), so
  // kHotClockTicks covers many; preemption only adds misses, never hits.
  EXPECT_LT(precise, kReads / 4);
}

// The decision whether readings may be kept: only an invariant counter the
// kernel reads its own clock from.
TEST(HotClock, TrustedOnlyWithAnInvariantCounterTheKernelUses) {
  EXPECT_TRUE(hot_clock_trusted(true, "tsc\n"));
  EXPECT_TRUE(hot_clock_trusted(true, "tsc"));
  EXPECT_FALSE(hot_clock_trusted(false, "tsc\n"));  // it may stop or change rate
  EXPECT_FALSE(hot_clock_trusted(true, "kvm-clock\n"));
  EXPECT_FALSE(hot_clock_trusted(true, "hpet\n"));
  EXPECT_FALSE(hot_clock_trusted(true, "hyperv_clocksource_tsc_page\n"));
  EXPECT_FALSE(hot_clock_trusted(true, "tsc2\n"));
  EXPECT_FALSE(hot_clock_trusted(true, ""));  // sysfs could not be read
}

// hot_reading against a simulated host: a counter of one tick a nanosecond
// and a precise clock that returns the time it is read at, after a delay
// that stands for a preemption between the counter's read and the clock's.
// Whatever the delays, a reading is never ahead of the time it is returned
// at and never behind the time the call began by more than kHotClockTicks
// (+1 us for the clock's whole microseconds). Had the kept counter value
// been read after the clock, a delay would be added to what a kept reading
// can lag.
TEST(HotClock, AKeptReadingLagsTheCallByAtMostItsTicksWhateverTheDelays) {
  std::uint64_t now_ns = 1'000'000'000;
  std::uint64_t rng = 42;
  const auto next = [&rng] {
    rng = rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return rng >> 33;
  };
  HotClock c{};
  int kept = 0;
  for (int i = 0; i < 200'000; ++i) {
    const std::uint64_t begin = now_ns;
    const std::uint64_t t = now_ns;  // the counter, read first
    const std::uint64_t got = hot_reading(c, t, [&] {
      if (next() % 8 == 0) now_ns += next() % 20'000;  // preempted before the clock's read
      return now_ns / 1000;
    });
    if (got * 1000 + 1000 <= begin) ++kept;  // (counted only to show readings are kept)
    ASSERT_LE(got * 1000, now_ns) << "call " << i;
    ASSERT_GE(got * 1000 + kHotClockTicks + 1000, begin) << "call " << i;
    now_ns += next() % 1'500;  // the caller's own work between calls
  }
  EXPECT_GT(kept, 0);
}

// Each thread keeps its own reading: one thread's does not serve another.
TEST(HotClock, EachThreadKeepsItsOwn) {
  (void)monotonic_us_hot();
  const HotClock mine = t_hot_clock;
  HotClock theirs{};
  std::thread([&] { theirs = t_hot_clock; }).join();
  EXPECT_EQ(theirs.tsc, 0u);
  EXPECT_EQ(theirs.us, 0u);
  EXPECT_EQ(t_hot_clock.tsc, mine.tsc);
}

}  // namespace
}  // namespace fairlane::detail
