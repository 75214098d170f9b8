// Whether the hot clock (clock.hpp, monotonic_us_hot) may keep a reading
// while the time-stamp counter moves less than kHotClockTicks.
#include "clock.hpp"

#include <cstdio>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace fairlane::detail {

namespace {

// What the kernel reads CLOCK_MONOTONIC from, as it names it in sysfs.
bool kernel_clock_is_tsc() noexcept {
  std::FILE* f = std::fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "re");
  if (!f) return false;
  char name[32] = {};
  const bool read = std::fgets(name, sizeof name, f) != nullptr;
  std::fclose(f);
  return read && std::strcmp(name, "tsc\n") == 0;
}

// CPUID 0x80000007, EDX bit 8: the counter runs at one rate in every
// power state (it neither stops in deep sleep nor follows the frequency).
bool invariant_tsc() noexcept {
#if defined(__x86_64__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(0x80000000u, &a, &b, &c, &d) || a < 0x80000007u) return false;
  if (!__get_cpuid(0x80000007u, &a, &b, &c, &d)) return false;
  return (d >> 8) & 1u;
#else
  return false;
#endif
}

}  // namespace

// A kernel that later finds its counter unstable switches clocksource; the
// counter is still invariant (the CPUID bit does not change), and a reading
// is kept for at most kHotClockTicks of it.
const bool kHotClockTrusted = invariant_tsc() && kernel_clock_is_tsc();

}  // namespace fairlane::detail
