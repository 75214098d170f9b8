// Whether the hot clock (clock.hpp, monotonic_us_hot) may keep a reading
// while the time-stamp counter moves less than kHotClockTicks.
#include "clock.hpp"

#include <cstdio>
#include <string>
#include <string_view>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace fairlane::detail {

namespace {

// What the kernel reads CLOCK_MONOTONIC from, as sysfs names it ("" if it
// cannot be read).
std::string kernel_clocksource() {
  std::FILE* f = std::fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "re");
  if (!f) return {};
  char name[64] = {};
  const bool read = std::fgets(name, sizeof name, f) != nullptr;
  std::fclose(f);
  return read ? std::string(name) : std::string();
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

bool hot_clock_trusted(bool invariant, std::string_view clocksource) noexcept {
  if (!clocksource.empty() && clocksource.back() == '\n') clocksource.remove_suffix(1);
  return invariant && clocksource == "tsc";
}

// Decided once: a kernel whose watchdog later finds the counter unstable
// switches clocksource, and this process goes on keeping readings on it
// (design.md, "The segment clock", says what that can cost).
const bool kHotClockTrusted = hot_clock_trusted(invariant_tsc(), kernel_clocksource());

}  // namespace fairlane::detail
